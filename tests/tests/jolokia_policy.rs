//! The Jolokia access policy the sidecar ships (`sidecar/jolokia-access.xml`)
//! against the real Jolokia core (jolokia-core 1.7.1, see
//! `testworld::jolokia_real`), loaded as the agent loads it
//! (`policyLocation`): everything the sidecar and `nodetool` do still works
//! (reads, `nodetool status` and `info`, drain, decommission), and what they
//! do not use is refused with Jolokia's own answer (status 403). The test
//! world's fake Jolokia is held to the same answers
//! (`fake_jolokia_contract.rs`, `fake_cassandra_policy`).
//!
//! Fails, never skips, when java, javac or the jars are missing.

use std::time::Duration;

use testworld::jolokia_contract::{self as contract, RingSpec};
use testworld::jolokia_real::{CassandraLine, NodeConfig, RealJolokia};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_policy_allows_what_the_operator_uses_and_refuses_the_rest() {
    testworld::jolokia_real::compile().unwrap_or_else(|e| panic!("{e}"));
    let policy = contract::shipped_policy();
    assert!(policy.is_file(), "{}", policy.display());
    // 3.11 (plain attribute names, decommission()) and 4.1 (WithPort names,
    // decommission(boolean)); the 4.1 ring is healthy enough to leave.
    let configs = [
        NodeConfig::new(CassandraLine::V3_11)
            .peer("10.0.0.2", "UN", "rack2")
            .peer("10.0.0.3", "DN", "rack1")
            .rf(3)
            .policy(&policy),
        NodeConfig::new(CassandraLine::V4_1)
            .peer("10.0.0.2", "UN", "rack2")
            .peer("10.0.0.3", "UN", "rack3")
            .rf(1)
            .decommission_time(Duration::from_millis(500))
            .policy(&policy),
    ];
    let handles: Vec<_> = configs
        .iter()
        .cloned()
        .map(|c| std::thread::spawn(move || RealJolokia::start(&c)))
        .collect();
    let nodes: Vec<RealJolokia> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for (node, config) in nodes.iter().zip(&configs) {
        contract::check_policy(&node.url(), &RingSpec::of(config.line, &config.peers)).await;
    }
    // The operations: decommission (scale-down) through the facade on 4.1,
    // drain (preStop) on 3.11.
    contract::check_facade_decommission(&nodes[1].url(), Duration::from_millis(500)).await;
    contract::check_drain(&nodes[0].url()).await;
}

/// Without its policy file the agent refuses every MBean access (what the
/// fake does when the sidecar forgets to write it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_policy_file_refuses_everything() {
    let missing = std::path::Path::new("/nonexistent/jolokia-access.xml");
    let node = RealJolokia::start(&NodeConfig::new(CassandraLine::V4_1).policy(missing))
        .unwrap_or_else(|e| panic!("{e}"));
    let answer = contract::post_raw(
        &node.url(),
        serde_json::json!({"type": "read", "mbean": sidecar::jolokia::STORAGE_SERVICE, "attribute": "OperationMode"})
            .to_string(),
    )
    .await;
    assert_eq!(answer.body["status"], 403, "{:?}", answer.body);
}
