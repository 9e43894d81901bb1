//! The data on real Apache Cassandra through the real operator's ring
//! changes (issue 28): an application Pod's CQL client (ScyllaDB's driver,
//! [`testworld::cql`], in the Pod's network namespace) reaches the members
//! at the ClusterIPs they advertise, writes and reads at QUORUM all the
//! while the operator changes the ring, and every key it was told was
//! written is then read back at ALL.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use testworld::cql::{Client, Consistency, Netns, Table, WRITES_PER_SECOND, Writer, WriterReport};

use crate::real::{cluster_ips, member, real_cluster, real_world};
use crate::scenario::{Scenario, container_pid, secs};

/// The ClusterIPs of the members `0..n`, as addresses.
async fn member_addresses(scenario: &Scenario, n: i32) -> Vec<IpAddr> {
    let names: Vec<String> = (0..n).map(member).collect();
    cluster_ips(scenario, &names).await
}

/// The CQL port of the members (their Services' `cql` port).
pub(crate) const CQL_PORT: u16 = 9042;

/// Starts the application Pod `app` (a host program for an image kubesim
/// does not know: `sleep infinity`, as a Pod that only holds a network
/// namespace) and returns its container's host PID: its network
/// namespace is where the application's driver runs.
pub(crate) async fn app_pod(scenario: &Scenario) -> i32 {
    let pods: Api<Pod> = scenario.api();
    // The scenario's namespace enforces the restricted Pod Security
    // Standard: the Pod says what that demands.
    let pod = serde_json::from_value(json!({"metadata": {"name": "app"}, "spec": {
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "busybox", "command": ["sleep", "infinity"],
            "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}}}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    scenario
        .until("the app Pod's container running", secs(60), || async {
            let pod = pods.get_opt("app").await.ok().flatten();
            pod.as_ref().and_then(container_pid)
        })
        .await
}

/// A thread in the network namespace of a new application Pod
/// ([`app_pod`]): where an application's driver runs.
pub(crate) async fn app_netns(scenario: &Scenario) -> std::sync::Arc<Netns> {
    let pid = app_pod(scenario).await;
    Netns::enter(format!("/proc/{pid}/ns/net")).unwrap()
}

/// The peers of the TCP connections established in the network namespace
/// of host process `pid` (`ss`; a connection to a ClusterIP shows it, not
/// the endpoint it was translated to). No connect from the host can tell
/// where a ClusterIP is reached: this machine's default gateway accepts a
/// connection to any address.
fn connections(pid: i32) -> Vec<SocketAddr> {
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["ss", "-Htn", "state", "established"])
        .output()
        .expect("nsenter ss runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect()
}

/// Waits until the driver sees exactly the members at `ips`, in
/// datacenter `dc`.
pub(crate) async fn until_driver_sees(scenario: &Scenario, client: &Client, ips: &[IpAddr]) {
    let mut expected: Vec<_> = ips.iter().map(|ip| (*ip, Some("dc".to_string()))).collect();
    expected.sort();
    scenario
        .until(
            &format!("the driver to see {ips:?} in dc"),
            secs(60),
            || async {
                let nodes = client.nodes();
                (nodes == expected)
                    .then_some(())
                    .ok_or(format!("{nodes:?}"))
            },
        )
        .await
}

/// Reads every key the writer was told was written so far, at ALL
/// (every replica answers), and asserts each has its value (a read that
/// fails is read again, and told).
pub(crate) async fn check_acknowledged(table: &Table, writer: &WriterReport, after: &str) {
    let acknowledged = writer.acknowledged();
    let began = Instant::now();
    let report = table.check(&acknowledged, Consistency::All).await.unwrap();
    eprintln!(
        "data check after {after}: {report} ({:.1} s)",
        began.elapsed().as_secs_f64()
    );
    assert!(!acknowledged.is_empty(), "the writer wrote");
    assert!(report.clean(), "after {after}: {report}");
}

/// Stops the writer, asserts that each phase wrote and that no request
/// failed in any, and checks at ALL every key written before and every
/// write it had acknowledged.
pub(crate) async fn stop_and_check(
    writer: Writer,
    table: &Table,
    before: &BTreeMap<String, String>,
) {
    let report = writer.stop().await;
    eprintln!("the application's requests, by phase:\n{report}");
    // One member down at a time leaves a quorum of every replica set of
    // 3: a roll that drains each member first, or a member killed, fails
    // no request (the driver's retries take an idempotent one to another
    // coordinator), and no read misses the value just written.
    for phase in &report.phases {
        assert!(phase.writes_ok > 0, "no writes went through: {phase}");
        assert_eq!(phase.failed(), 0, "requests failed at QUORUM: {phase}");
    }
    let mut expected = before.clone();
    expected.extend(report.acknowledged());
    let check = table
        .check(&expected, Consistency::All)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(check.clean(), "data lost: {check}");
    eprintln!("data check: {check}");
}

const SCALE_UP: &str = "scale-up 3 -> 4";
const DECOMMISSION: &str = "decommission 4 -> 3";

/// An application writing and reading back at QUORUM, 20 keys a second,
/// in a keyspace of replication factor 3, sees not one write fail and no
/// read without the value just written while the operator adds a fourth
/// member (a real bootstrap) and decommissions it again (a real
/// decommission, which streams its ranges back), and every write it was
/// told succeeded is then on the ring: read at ALL after each step, with
/// its value.
///
/// Reads can time out during the decommission: in 1 of 5 runs, 2 of ~250
/// QUORUM reads did ("received: 1, required: 2, data_present: true"),
/// 9.7-10.1 s into the 12.6 s decommission, when the leaving member stops
/// (a write, which goes to every replica, needs 2 of 3 answers; a read
/// asks 2). Those are counted and shown, not asserted away: no other
/// phase may fail a read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (CI's real_thesis scenario adds a rack and decommissions a member under the same QUORUM traffic, with the same checks): run by scripts/soak"]
async fn real_quorum_writes_never_fail_nor_lose_a_key_through_a_scale_up_and_a_decommission() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = real_world().await;
    let three = real_cluster(3);
    scenario.create(&three).await;
    scenario.until_ready("c", 3, secs(600)).await;

    let app = app_pod(&scenario).await;
    let netns = Netns::enter(format!("/proc/{app}/ns/net")).unwrap();
    let ips = member_addresses(&scenario, 3).await;
    let contact: Vec<SocketAddr> = ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, CQL_PORT))
        .collect();
    let client = Client::connect(netns, &contact).await.unwrap();
    // The ring the driver found is the members at their ClusterIPs, in
    // their datacenter, and its connections to them are the app Pod's.
    until_driver_sees(&scenario, &client, &ips).await;
    scenario
        .until("the app Pod connected to each member", secs(30), || async {
            let connected = connections(app);
            let all = contact.iter().all(|cql| connected.contains(cql));
            all.then_some(()).ok_or(format!("{connected:?}"))
        })
        .await;
    let table = client.keyspace("app", &[("dc", 3)]).await.unwrap();

    let writer = table.writer("steady with 3").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;

    writer.phase(SCALE_UP);
    let began = Instant::now();
    scenario
        .patch_cluster("c", real_cluster(4).racks_patch())
        .await;
    scenario.until_ready("c", 4, secs(300)).await;
    let scale_up = began.elapsed();
    let four = member_addresses(&scenario, 4).await;
    until_driver_sees(&scenario, &client, &four).await;
    writer.phase("steady with 4");
    check_acknowledged(&table, &writer.report(), SCALE_UP).await;

    writer.phase(DECOMMISSION);
    let began = Instant::now();
    scenario.patch_cluster("c", three.racks_patch()).await;
    scenario.until_service_gone(&member(3), secs(300)).await;
    scenario.until_ready("c", 3, secs(120)).await;
    let decommission = began.elapsed();
    until_driver_sees(&scenario, &client, &ips).await;
    writer.phase("steady with 3 again");
    check_acknowledged(&table, &writer.report(), DECOMMISSION).await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let report = writer.stop().await;
    eprintln!(
        "{SCALE_UP}: {:.1} s, {DECOMMISSION}: {:.1} s\nQUORUM requests per phase:\n{report}",
        scale_up.as_secs_f64(),
        decommission.as_secs_f64()
    );
    for phase in &report.phases {
        // The writer kept (at least half) its pace through each phase: a
        // writer stalled on requests hanging would hide their failures.
        let pace = phase.lasted.as_secs_f64() * f64::from(WRITES_PER_SECOND);
        let requests = phase.writes_ok + phase.writes_failed;
        assert!(requests as f64 >= pace / 2.0, "{phase}");
        assert_eq!(phase.writes_failed, 0, "{phase}");
        assert_eq!(phase.reads_stale, 0, "{phase}");
        if phase.name != DECOMMISSION {
            assert_eq!(phase.reads_failed, 0, "{phase}");
        }
        assert_eq!(
            phase.reads_ok + phase.reads_failed,
            phase.writes_ok,
            "{phase}"
        );
    }
    // The last writes too.
    check_acknowledged(&table, &report, "the end").await;
}
