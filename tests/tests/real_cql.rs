//! The test world's CQL client ([`testworld::cql`]) against one real
//! Cassandra 4.1 node on the host's loopback: the client, the data check
//! and the background writer, which keeps going through the node's stop
//! and restart. The ring tests on real members use them in Pods
//! (tests/e2e/real_data.rs).
//!
//! Needs `scripts/fetch-cassandra 4.1.8` once per machine (scripts/test
//! runs it); without it the test fails and names that command.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use scylla::statement::Consistency;
use testworld::cql::{Client, Netns, WRITES_PER_SECOND};
use testworld::harness::require_root;
use testworld::real_cassandra::{Node, NodeOptions, Ports, VERSION_4_1, laid_out};

/// Start to NORMAL took 5.5-8 s here (2 cores) with a one-second ring
/// delay; the margin is for a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the node serves CQL: it starts its native transport after
/// it reached NORMAL.
async fn until_listening(cql: SocketAddr) {
    let listening = async {
        while tokio::net::TcpStream::connect(cql).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(START_TIMEOUT, listening)
        .await
        .unwrap_or_else(|_| panic!("nothing listens at {cql}"));
}

/// Writes and reads at QUORUM on a lone node (its datacenter is the
/// default snitch's `datacenter1`), a data check that finds every
/// acknowledged key and names a key never written and one with another
/// value; the writer records the requests that fail while the node is
/// stopped, under that phase, and succeeds again once it is back (the
/// driver reconnects by itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cql_client_writes_checks_and_outlives_a_restart_of_a_real_node() {
    require_root().expect("the image's directories belong to uid 999");
    let (_root, release, image) = laid_out(VERSION_4_1).unwrap_or_else(|e| panic!("{e}"));
    let options = NodeOptions::single(Ports::free().unwrap_or_else(|e| panic!("{e}")));
    let mut node = Node::start(&image, &release, &options).unwrap_or_else(|e| panic!("{e}"));
    node.wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The host's own namespace: the node listens on the host's loopback.
    let netns = Netns::enter("/proc/self/ns/net").unwrap();
    let cql = SocketAddr::from((Ipv4Addr::LOCALHOST, options.ports.native));
    until_listening(cql).await;
    let client = Client::connect(netns, &[cql]).await.unwrap();
    assert_eq!(
        client.nodes(),
        [(cql.ip(), Some("datacenter1".to_string()))]
    );
    let table = client.keyspace("app", &[("datacenter1", 1)]).await.unwrap();
    table.write("k", "v", Consistency::Quorum).await.unwrap();
    assert_eq!(
        table
            .read("k", Consistency::Quorum)
            .await
            .unwrap()
            .as_deref(),
        Some("v")
    );
    assert_eq!(
        table.read("never", Consistency::Quorum).await.unwrap(),
        None
    );

    let writer = table.writer("steady").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    writer.phase("node stopped");
    let (status, _) = node.stop(STOP_TIMEOUT).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.phase("node back");
    let mut node = Node::start(&image, &release, &options).unwrap_or_else(|e| panic!("{e}"));
    node.wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Until the writer has written again since the node came back.
    let resumed = async {
        loop {
            let back = writer.report().phase("node back").unwrap().writes_ok;
            if back >= WRITES_PER_SECOND as usize {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), resumed)
        .await
        .unwrap_or_else(|_| panic!("no writes since the node came back:\n{}", writer.report()));
    let report = writer.stop().await;
    eprintln!("node stopped: {status}\n{report}");

    let steady = report.phase("steady").unwrap();
    assert_eq!(steady.failed(), 0, "{report}");
    assert!(
        steady.writes_ok >= 2 * WRITES_PER_SECOND as usize && steady.reads_ok == steady.writes_ok,
        "{report}"
    );
    let stopped = report.phase("node stopped").unwrap();
    assert!(
        stopped.writes_failed > 0 && !stopped.errors.is_empty(),
        "the node's stop failed requests, recorded with their errors: {report}"
    );

    let acknowledged = report.acknowledged();
    let check = table.check(&acknowledged, Consistency::All).await.unwrap();
    eprintln!("{check}");
    assert!(check.clean(), "{check}");
    assert_eq!(check.checked, acknowledged.len());

    // The check can fail: a key never written and one whose value differs.
    let mut wrong = BTreeMap::from([("never".to_string(), "x".to_string())]);
    let (key, value) = acknowledged.iter().next().unwrap();
    wrong.insert(key.clone(), format!("{value}-not"));
    let check = table.check(&wrong, Consistency::All).await.unwrap();
    assert!(!check.clean());
    assert_eq!(check.missing, ["never"]);
    assert_eq!(
        check.wrong,
        [(key.clone(), format!("{value}-not"), value.clone())]
    );
    assert!(check.to_string().contains("missing: never"), "{check}");
    node.stop(STOP_TIMEOUT).await.unwrap();
}
