//! Real Apache Cassandra 4.1 and 5.0 (DESIGN.md section 7, issue 28): the
//! release's jars from Maven, in the official image's layout, started
//! through its own `bin/cassandra` as the image's cassandra user, with the
//! real Jolokia JVM agent the operator image ships; and Cassandra's own
//! nodetool from the same jars against the node's local JMX port.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` and `scripts/fetch-cassandra
//! 5.0.3` once per machine (scripts/test runs them); without them the
//! tests fail and name that command.

use std::time::Duration;

use serde_json::json;
use testworld::harness::require_root;
use testworld::real_cassandra::image::CASSANDRA_UID;
use testworld::real_cassandra::nodetool::{parse_status, parse_version};
use testworld::real_cassandra::{
    Node, NodeOptions, NodeTool, Ports, Release, STORAGE_SERVICE, VERSION_4_1, VERSION_5_0,
    laid_out,
};

/// Start to NORMAL took 5.5-8 s here (2 cores) with a one-second ring
/// delay; the margin is for a loaded CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Drain on SIGTERM took about 6.5 s.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_4_1_node_started_by_bin_cassandra_reaches_normal_and_answers_jolokia() {
    require_root().expect("the image's directories belong to uid 999");
    let (_root, release, image) = laid_out(VERSION_4_1).unwrap_or_else(|e| panic!("{e}"));
    let ports = Ports::free().unwrap_or_else(|e| panic!("{e}"));

    let mut node = Node::start(&image, &release, &NodeOptions::single(ports))
        .unwrap_or_else(|e| panic!("{e}"));
    let to_normal = node
        .wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mode = node.read(STORAGE_SERVICE, "OperationMode").await.unwrap();
    assert_eq!(mode, "NORMAL");
    let version = node.read(STORAGE_SERVICE, "ReleaseVersion").await.unwrap();
    assert_eq!(
        version, VERSION_4_1,
        "the jars Maven resolved are the release asked for"
    );
    assert_eq!(
        node.uid(),
        Some(CASSANDRA_UID),
        "the JVM runs as the image's cassandra user"
    );
    let agent = node.request(json!({"type": "version"})).await.unwrap();
    // The 1.7.2 jar's own version constant still says 1.7.1.
    assert_eq!(agent["agent"], "1.7.1");
    assert_eq!(
        agent["config"]["discoveryEnabled"], "false",
        "the -javaagent options reach the agent"
    );
    let jvm_uptime_ms = node.read("java.lang:type=Runtime", "Uptime").await.unwrap();
    let java = node
        .read("java.lang:type=Runtime", "SpecVersion")
        .await
        .unwrap();
    assert_eq!(
        java, "11",
        "4.1 runs on Java 11, as the official image does"
    );
    let rss_kib = node.rss_kib().expect("the node's /proc status");
    nodetool_reads_what_jolokia_reads(&node, &release, ports.jmx).await;

    let (status, to_stop) = node
        .stop(STOP_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "real cassandra {}: spawn to NORMAL {:.1} s (JVM uptime {jvm_uptime_ms} ms), \
         RSS {} MiB at NORMAL (heap 512M, pre-touched), SIGTERM to exit {:.1} s ({status})",
        version.as_str().unwrap_or_default(),
        to_normal.as_secs_f64(),
        rss_kib / 1024,
        to_stop.as_secs_f64(),
    );
}

/// Cassandra's own nodetool (the release's jars on Debian's Java 17, with
/// `bin/nodetool`'s JVM options) over the node's local JMX port: its
/// `version`, `status` and `info` say what the node's Jolokia agent says
/// (release, the one node Up and Normal at its address, its host ID).
async fn nodetool_reads_what_jolokia_reads(node: &Node, release: &Release, jmx: u16) {
    let nodetool = NodeTool::of(release).unwrap_or_else(|e| panic!("{e}"));
    let began = std::time::Instant::now();
    let version = nodetool
        .run(jmx, &["version"])
        .unwrap_or_else(|e| panic!("{e}"));
    let one_run = began.elapsed();
    assert_eq!(parse_version(&version), Some(release.version.as_str()));
    let host_id = node.read(STORAGE_SERVICE, "LocalHostId").await.unwrap();
    let status = nodetool
        .run(jmx, &["status"])
        .unwrap_or_else(|e| panic!("{e}"));
    let rows = parse_status(&status);
    assert_eq!(rows.len(), 1, "{status}");
    assert_eq!(rows[0].state, "UN", "{status}");
    assert_eq!(rows[0].address, "127.0.0.1", "{status}");
    assert_eq!(rows[0].host_id.as_deref(), host_id.as_str(), "{status}");
    let info = nodetool
        .run(jmx, &["info"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        info.lines()
            .any(|l| l.starts_with("ID") && l.ends_with(host_id.as_str().unwrap_or("?"))),
        "{info}"
    );
    eprintln!(
        "real nodetool {} (Java 17): `version` in {:.1} s; status:\n{status}",
        release.version,
        one_run.as_secs_f64()
    );
}

/// Real Cassandra 5.0 started by its `bin/cassandra` on Debian's OpenJDK 17
/// (the official 5.0 image runs temurin 17) reaches NORMAL with the
/// Jolokia agent and its release's version, and its own nodetool reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_5_0_node_started_by_bin_cassandra_on_java_17_reaches_normal() {
    require_root().expect("the image's directories belong to uid 999");
    let (_root, release, image) = laid_out(VERSION_5_0).unwrap_or_else(|e| panic!("{e}"));
    let ports = Ports::free().unwrap_or_else(|e| panic!("{e}"));
    let mut node = Node::start(&image, &release, &NodeOptions::single(ports))
        .unwrap_or_else(|e| panic!("{e}"));
    let to_normal = node
        .wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let version = node.read(STORAGE_SERVICE, "ReleaseVersion").await.unwrap();
    assert_eq!(version, VERSION_5_0);
    let java = node
        .read("java.lang:type=Runtime", "SpecVersion")
        .await
        .unwrap();
    assert_eq!(
        java, "17",
        "5.0 runs on Java 17, as the official image does"
    );
    assert_eq!(node.uid(), Some(CASSANDRA_UID));
    let rss_kib = node.rss_kib().expect("the node's /proc status");
    nodetool_reads_what_jolokia_reads(&node, &release, ports.jmx).await;
    let (status, to_stop) = node
        .stop(STOP_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "real cassandra {VERSION_5_0}: spawn to NORMAL {:.1} s, RSS {} MiB at NORMAL (heap 512M), \
         SIGTERM to exit {:.1} s ({status})",
        to_normal.as_secs_f64(),
        rss_kib / 1024,
        to_stop.as_secs_f64(),
    );
}

/// The sidecar's own Jolokia client against the real node, through the
/// agent options it renders and the access policy it writes: what the
/// sidecar and `nodetool` call passes the policy (`nodetool cleanup` was
/// refused with 403: the policy named the operation without the signature
/// the client calls it by).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecars_calls_pass_the_rendered_agent_options_and_policy_on_a_real_4_1_node() {
    use sidecar::jolokia::{Jolokia, OperationMode, StorageService};

    require_root().expect("the image's directories belong to uid 999");
    let (root, release, image) = laid_out(VERSION_4_1).unwrap_or_else(|e| panic!("{e}"));
    let ports = Ports::free().unwrap_or_else(|e| panic!("{e}"));
    // The policy as the sidecar writes it beside the agent, readable by
    // the cassandra user.
    let policy = root.path().join("jolokia-access.xml");
    std::fs::write(&policy, sidecar::jolokia_access::policy_xml()).unwrap();
    std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let rendered = sidecar::render::jvm::jolokia_agent_options("/mnt/shared/plugins/agent.jar");
    let mut options = NodeOptions::single(ports);
    options.jolokia_options = rendered
        .split(',')
        .filter(|kv| !kv.starts_with("port=") && !kv.starts_with("host="))
        .map(|kv| {
            if kv.starts_with("policyLocation=") {
                format!("policyLocation=file://{}", policy.display())
            } else {
                kv.to_string()
            }
        })
        .collect();
    let mut node = Node::start(&image, &release, &options).unwrap_or_else(|e| panic!("{e}"));
    node.wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let storage = StorageService::new(Jolokia::new(node.jolokia_url()).unwrap());
    assert_eq!(
        storage.operation_mode().await.unwrap(),
        OperationMode::Normal
    );
    assert!(storage.local_host_id().await.unwrap().is_some());
    let owners = storage.endpoint_to_host_id().await.unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    // What the gossip record reads at every tick, in one request.
    let host_id = storage.local_host_id().await.unwrap();
    assert_eq!(
        storage.owners_and_host_id().await.unwrap(),
        (owners.clone(), host_id.clone())
    );
    assert_eq!(owners.values().next(), host_id.as_ref());
    assert_eq!(
        storage
            .cleanup("system_auth")
            .await
            .unwrap_or_else(|e| panic!("nodetool cleanup: {e}")),
        0,
        "cleanup SUCCESSFUL"
    );
    // A running member's new seeds (sidecar::member::seeds): written into
    // cassandra.yaml without ports (the storage port is the default), then
    // read again by Cassandra through the policy; the node leaves itself
    // out, and answers as Gossiper.getSeeds prints them.
    let yaml = image.conf().join("cassandra.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let text =
        sidecar::render::yaml::with_seeds("cassandra.yaml", &text, "127.0.0.1,127.0.0.2").unwrap();
    std::fs::write(&yaml, text).unwrap();
    assert_eq!(
        storage.reload_seeds().await.unwrap(),
        Some(vec![format!("/127.0.0.2:{}", ports.storage)])
    );
    // Anything else is refused by the agent.
    let refused = node
        .request(json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "stopGossiping"}))
        .await;
    assert!(
        refused.as_ref().is_err()
            || refused
                .as_ref()
                .unwrap()
                .get("status")
                .is_some_and(|s| s != 200),
        "the policy lets stopGossiping through: {refused:?}"
    );
    node.stop(STOP_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
