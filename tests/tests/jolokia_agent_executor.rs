//! The real Jolokia JVM agent (`org.jolokia:jolokia-jvm:1.7.2`, the jar
//! the operator image ships, fetched by `scripts/fetch-cassandra`), loaded
//! by `-javaagent` with the options the sidecar renders
//! (`sidecar::render::jvm::jolokia_agent_options`) and the access policy it
//! writes: while a long JMX operation runs (drain here; decommission and
//! cleanup hold the agent the same way), the readiness probe's read of
//! `OperationMode` still answers at once. With the agent's default
//! executor (`single`) it waited behind the operation: the member turned
//! NotReady for as long as the operation ran.
//!
//! The MBean is a stand-in (`testworld::jolokia_real::AgentJvm`) whose
//! drain blocks for a chosen time; the agent, its HTTP server, its executor
//! and its policy restrictor are the real ones. Fails, never skips, when
//! java, javac or the agent jar is missing.

use std::time::{Duration, Instant};

use sidecar::jolokia::{Jolokia, OperationMode, Request, StorageService};
use sidecar::jolokia_access::policy_xml;
use sidecar::render::jvm::jolokia_agent_options;
use testworld::jolokia_real::AgentJvm;

/// How long the stand-in's drain blocks.
const DRAIN: Duration = Duration::from_secs(4);
/// What the probe allows a read of the operation mode: far under DRAIN.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// The rendered options on an ephemeral port (the tests run side by side;
/// the port is the one option the test changes).
fn rendered_on_any_port(jar: &str) -> String {
    let options = jolokia_agent_options(jar);
    assert!(options.starts_with("port=8778,"), "{options}");
    options.replacen("port=8778,", "port=0,", 1)
}

/// The rendered options without the executor options: the agent's default.
fn without_executor(jar: &str) -> String {
    rendered_on_any_port(jar)
        .split(',')
        .filter(|kv| !kv.starts_with("executor=") && !kv.starts_with("threadNr="))
        .collect::<Vec<_>>()
        .join(",")
}

fn storage_service(url: &str) -> StorageService {
    StorageService::new(
        Jolokia::new(url)
            .unwrap()
            .with_timeout(PROBE_TIMEOUT)
            .with_long_timeout(DRAIN * 3),
    )
}

/// Starts a drain, waits until it has surely reached the agent, then reads
/// the operation mode as the probe does: what the read answered, how long
/// it took, and whether the drain was still running when it answered.
async fn read_during_drain(
    agent: &AgentJvm,
) -> (
    Result<OperationMode, sidecar::jolokia::Error>,
    Duration,
    bool,
) {
    let drainer = storage_service(agent.url());
    let drain = tokio::spawn(async move { drainer.drain().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !drain.is_finished(),
        "the drain returned at once: {drain:?}"
    );
    let began = Instant::now();
    let mode = storage_service(agent.url()).operation_mode().await;
    let took = began.elapsed();
    let drain_running = !drain.is_finished();
    drain
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the drain itself failed: {e}"));
    (mode, took, drain_running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rendered_options_a_long_operation_does_not_hold_the_probe() {
    let agent = AgentJvm::start(rendered_on_any_port, &policy_xml(), DRAIN)
        .unwrap_or_else(|e| panic!("{e}"));
    let (mode, took, drain_running) = read_during_drain(&agent).await;
    assert_eq!(
        mode.unwrap_or_else(|e| panic!("the read waited behind the drain: {e}")),
        OperationMode::parse("DRAINING"),
        "the read answered during the drain"
    );
    assert!(drain_running, "the drain ended before the read answered");
    assert!(took < Duration::from_millis(1000), "the read took {took:?}");
    // And the drain's own answer came through.
    assert_eq!(
        storage_service(agent.url()).operation_mode().await.unwrap(),
        OperationMode::parse("DRAINED")
    );
    // Discovery is off: the agent reports its configuration in `version`.
    let version = Jolokia::new(agent.url())
        .unwrap()
        .request(&Request::version())
        .await
        .unwrap();
    assert_eq!(
        version["config"]["discoveryEnabled"],
        serde_json::json!("false"),
        "{version}"
    );
}

/// What the fix is for: the same agent, with its default executor, serves
/// the read only after the drain. If a later agent changed its default,
/// this says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_agents_default_executor_the_probe_waits_behind_the_operation() {
    let agent =
        AgentJvm::start(without_executor, &policy_xml(), DRAIN).unwrap_or_else(|e| panic!("{e}"));
    let (mode, took, _) = read_during_drain(&agent).await;
    let err = mode.expect_err("the single-threaded agent answered during the drain");
    assert!(
        matches!(err, sidecar::jolokia::Error::TimedOut { .. }),
        "{err}"
    );
    assert!(took >= PROBE_TIMEOUT, "{took:?}");
}
