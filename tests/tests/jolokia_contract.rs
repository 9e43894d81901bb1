//! The Jolokia contract against a real Jolokia: jolokia-core 1.7.1 (Debian's
//! `libjolokia-core-java`) serving MBeans with the JMX signatures of
//! Cassandra 3.11, 4.1 and 5.0 (`tests/jolokia/FakeCassandraJolokia.java`).
//! The recorded answers are in the docs of `testworld::jolokia_contract`.
//!
//! Per version, three JVMs start in parallel:
//! - a ring with a down and a joining peer and RF 3: the protocol's shapes,
//!   the client and facade, nodetool's reads, the RF refusal (4.x, 5.0),
//!   drain;
//! - a ring of three up nodes: decommission through timeouts, a second call
//!   and nodetool's wait;
//! - the same: decommission through the facade from start to end.
//!
//! These tests fail, never skip, when java, javac or the jars are missing.

use std::time::{Duration, Instant};

use sidecar::jolokia::{Jolokia, STORAGE_SERVICE};
use sidecar::nodetool::{self, NodetoolArgs, NodetoolCommand};
use testworld::jolokia_contract::{self as contract, RingSpec};
use testworld::jolokia_real::{CassandraLine, NodeConfig, RealJolokia};

/// How long a decommission blocks: long enough for the checks made while
/// it runs, even on a loaded machine.
const BLOCKING: Duration = Duration::from_millis(2500);

fn ring_config(line: CassandraLine) -> NodeConfig {
    NodeConfig::new(line)
        .peer("10.0.0.2", "UN", "rack2")
        .peer("10.0.0.3", "DN", "rack1")
        .peer("10.0.0.4", "UJ", "rack3")
        .rf(3)
}

fn healthy_config(line: CassandraLine) -> NodeConfig {
    NodeConfig::new(line)
        .peer("10.0.0.2", "UN", "rack2")
        .peer("10.0.0.3", "UN", "rack3")
        .rf(1)
        .decommission_time(BLOCKING)
}

fn start_all(configs: &[NodeConfig]) -> Vec<RealJolokia> {
    // Compile once before the parallel starts.
    testworld::jolokia_real::compile().unwrap_or_else(|e| panic!("{e}"));
    let handles: Vec<_> = configs
        .iter()
        .cloned()
        .map(|config| std::thread::spawn(move || RealJolokia::start(&config)))
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .expect("the start thread")
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

async fn contract_for(line: CassandraLine) {
    let began = Instant::now();
    let configs = [
        ring_config(line),
        healthy_config(line),
        healthy_config(line),
    ];
    let nodes = start_all(&configs);
    eprintln!(
        "{}: jvms ready in {:?} ({:?})",
        line.arg(),
        began.elapsed(),
        nodes.iter().map(|n| n.started_in).collect::<Vec<_>>()
    );
    let ring = RingSpec::of(line, &configs[0].peers);
    let url = nodes[0].url();
    contract::check_protocol(&url, &ring).await;
    contract::check_client(&url, &ring).await;
    contract::check_nodetool_reads(&url, &ring).await;
    contract::check_failure_detector(&url, &ring).await;
    if line != CassandraLine::V3_11 {
        contract::check_decommission_refused(&url, line).await;
    }
    contract::check_drain(&url).await;

    let healthy = RingSpec::of(line, &configs[1].peers);
    let (staged, direct) = (nodes[1].url(), nodes[2].url());
    tokio::join!(
        contract::check_decommission(&staged, &healthy, BLOCKING),
        contract::check_facade_decommission(&direct, BLOCKING),
    );
    eprintln!("{}: contract done in {:?}", line.arg(), began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_3_11() {
    contract_for(CassandraLine::V3_11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_4_1() {
    contract_for(CassandraLine::V4_1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_5_0() {
    contract_for(CassandraLine::V5_0).await;
}

/// Nothing listening: a connect error that says Cassandra is not up, and a
/// nodetool failure that says so.
#[tokio::test]
async fn unreachable_jolokia_is_a_connect_error() {
    // A port that was free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let url = format!("http://127.0.0.1:{port}/jolokia/");
    let err = Jolokia::new(&url)
        .expect("a client")
        .read(STORAGE_SERVICE, "OperationMode")
        .await
        .expect_err("nothing listens");
    assert!(err.is_unreachable(), "{err:?}");
    assert!(
        err.to_string().contains("is cassandra running?")
            && err.to_string().contains("Connection refused"),
        "{err}"
    );
    let args = NodetoolArgs {
        jolokia: url,
        scylla_api: sidecar::scylla::DEFAULT_URL.to_string(),
        mode: "cassandra".to_string(),
        config_dir: "/nowhere".into(),
        command: NodetoolCommand::Drain,
    };
    let mut out = Vec::new();
    let err = nodetool::run(&args, &mut out)
        .await
        .expect_err("drain without cassandra fails");
    assert!(
        matches!(&err, nodetool::Error::ReadOperationMode { source } if source.is_unreachable()),
        "{err:?}"
    );
    assert!(out.is_empty());
}
