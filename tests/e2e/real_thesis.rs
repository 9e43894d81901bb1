//! The thesis scenario on real Apache Cassandra 4.1 (issue 28), with an
//! application writing and reading at QUORUM the whole time: a rack of 3,
//! a second rack of 2 (after the first is up, its members are checked as
//! real: the release, `nodetool status` over Jolokia, the memory limit),
//! the first rack scaled to 2 (a real decommission),
//! the Node of a member lost (replaced at its own ClusterIP on an empty
//! local disk), and a full outage (every member Pod deleted at once).
//! After each step every key the application was told was written is read
//! back at ALL. The failed requests of each operation are printed; no
//! write fails while a rack is added or the first rack scaled down, and no
//! read while the rack is added (in the scale-down a read sent to the
//! leaving node as it stops may time out); during the Node's loss only
//! requests to the vanished node may fail (timeouts), and during the
//! outage, when no replica answers, writes fail and are counted. No read
//! ever returns a stale value.
//!
//! Two racks and RF 3: Cassandra 4.1's token allocator balances a new
//! node's tokens for `allocate_tokens_for_local_replication_factor` (3 in
//! the default file) and refuses to in a datacenter of more racks than one
//! but fewer than that factor ("Token allocation failed: the number of
//! racks 2 in datacenter dc is lower than its replication factor 3"): the
//! second member of the second rack never joined, until the operator
//! refused such a spec (`TooFewRacksForTokenAllocation`). The thesis's
//! racks therefore carry overrides that set the factor to 2, as a user of
//! two racks must.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use testworld::cql::{Client, WRITES_PER_SECOND};
use testworld::kubesim::sim::RealCassandra;

use crate::real::{
    MEMORY_LIMIT_MIB, TEST_RING_TIMINGS, VERSION, brought_up, cluster_ips, lose_node_until_replaced,
};
use crate::real_data::{CQL_PORT, app_netns, check_acknowledged, until_driver_sees};
use crate::scenario::{cluster, overrides, secs, setup};

const ZONES: [&str; 2] = ["zone-a", "zone-b"];

/// A rack of `members` in its own zone, on local disks (a claim on a
/// Node's disk, lost with the Node), 1 CPU and [`MEMORY_LIMIT_MIB`] each.
fn rack(name: &str, zone: &str, members: i32) -> Value {
    json!({
        "name": name,
        "members": members,
        "configMapName": "tokens",
        "resources": {"limits": {"cpu": "1", "memory": format!("{MEMORY_LIMIT_MIB}Mi")}},
        "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"storageClassName": "local-disks",
                "resources": {"requests": {"storage": "10Gi"}}}}]},
        "placement": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                "operator": "In", "values": [zone]}]}]}}}
    })
}

fn racks(first: i32, second: Option<i32>) -> Value {
    let mut racks = vec![rack("r1", ZONES[0], first)];
    if let Some(n) = second {
        racks.push(rack("r2", ZONES[1], n));
    }
    json!({"spec": {"datacenter": {"name": "dc", "racks": racks}}})
}

fn member(rack: &str, ordinal: i32) -> String {
    crds::names::member_name(&crds::names::statefulset_name("c", "dc", rack), ordinal)
}

/// Every member of the racks, by name.
fn members(first: i32, second: i32) -> Vec<String> {
    let mut all: Vec<String> = (0..first).map(|i| member("r1", i)).collect();
    all.extend((0..second).map(|i| member("r2", i)));
    all
}

const ADD_RACK: &str = "add rack r2 of 2";
const SCALE_DOWN: &str = "scale r1 3 -> 2";
const REPLACE: &str = "replace after the Node's loss";
const OUTAGE: &str = "full outage";

/// Whether every failure of a phase is a timeout: the client's, or a
/// coordinator's waiting for a replica ("Operation timed out").
fn only_timeouts(phase: &testworld::cql::PhaseReport) -> bool {
    phase
        .errors
        .keys()
        .all(|e| e.contains("exceeded a client timeout") || e.contains("Operation timed out"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_thesis_scenario_on_4_1_with_quorum_traffic_throughout() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = setup()
        .zones(&ZONES)
        .options(|o| {
            o.real_cassandra = Some(RealCassandra::cached(TEST_RING_TIMINGS));
            // Room for a replacement on another Node of its zone.
            o.nodes_per_zone = 4;
        })
        .start()
        .await;
    let configmaps: Api<ConfigMap> = scenario.api();
    let tokens = overrides(
        "tokens",
        "allocate_tokens_for_local_replication_factor: 2\n",
    );
    configmaps
        .create(&PostParams::default(), &tokens)
        .await
        .unwrap();
    let mut timings: Vec<(&str, Duration)> = Vec::new();
    let began = Instant::now();
    scenario
        .create(
            cluster("c")
                .version(VERSION)
                .rack("r1", 3)
                .with_rack(rack("r1", ZONES[0], 3)),
        )
        .await;
    scenario.until_ready("c", 3, secs(600)).await;
    timings.push(("bring-up of 3", began.elapsed()));
    let three = cluster_ips(&scenario, &members(3, 0)).await;
    let three_text: Vec<String> = three.iter().map(ToString::to_string).collect();
    brought_up(&scenario, &members(3, 0), &three_text).await;

    let netns = app_netns(&scenario).await;
    let contact: Vec<_> = three
        .iter()
        .map(|ip| std::net::SocketAddr::new(*ip, CQL_PORT))
        .collect();
    let client = Client::connect(netns, &contact).await.unwrap();
    until_driver_sees(&scenario, &client, &three).await;
    let table = client.keyspace("thesis", &[("dc", 3)]).await.unwrap();
    let writer = table.writer("steady with 3").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A second rack of 2, in the other zone.
    writer.phase(ADD_RACK);
    let began = Instant::now();
    scenario.patch_cluster("c", racks(3, Some(2))).await;
    scenario.until_ready("c", 5, secs(600)).await;
    timings.push((ADD_RACK, began.elapsed()));
    let five = cluster_ips(&scenario, &members(3, 2)).await;
    until_driver_sees(&scenario, &client, &five).await;
    writer.phase("steady with 5");
    check_acknowledged(&table, &writer.report(), ADD_RACK).await;

    // The first rack down to 2: its last member decommissions.
    writer.phase(SCALE_DOWN);
    let began = Instant::now();
    scenario.patch_cluster("c", racks(2, Some(2))).await;
    let leaving = member("r1", 2);
    scenario.until_service_gone(&leaving, secs(600)).await;
    scenario.until_ready("c", 4, secs(120)).await;
    timings.push((SCALE_DOWN, began.elapsed()));
    let four_names = members(2, 2);
    let four = cluster_ips(&scenario, &four_names).await;
    until_driver_sees(&scenario, &client, &four).await;
    writer.phase("steady with 4");
    check_acknowledged(&table, &writer.report(), SCALE_DOWN).await;

    // The Node of a member of the second rack is lost, with its local
    // disk: the member is replaced at its own ClusterIP.
    writer.phase(REPLACE);
    let began = Instant::now();
    let lost = member("r2", 1);
    let lost_ip = cluster_ips(&scenario, std::slice::from_ref(&lost)).await[0].to_string();
    lose_node_until_replaced(&scenario, &lost, &lost_ip).await;
    scenario.until_ready("c", 4, secs(120)).await;
    timings.push((REPLACE, began.elapsed()));
    until_driver_sees(&scenario, &client, &four).await;
    writer.phase("steady after the replace");
    check_acknowledged(&table, &writer.report(), REPLACE).await;

    // Every member Pod deleted at once: the members come back on their
    // disks, at their addresses.
    writer.phase(OUTAGE);
    let began = Instant::now();
    let names: Vec<&str> = four_names.iter().map(String::as_str).collect();
    scenario.delete_pods(&names).await;
    scenario.until_ready("c", 4, secs(600)).await;
    timings.push((OUTAGE, began.elapsed()));
    until_driver_sees(&scenario, &client, &four).await;
    writer.phase("steady after the outage");
    tokio::time::sleep(Duration::from_secs(5)).await;
    check_acknowledged(&table, &writer.report(), OUTAGE).await;

    let report = writer.stop().await;
    for (what, took) in &timings {
        eprintln!("{what}: {:.1} s", took.as_secs_f64());
    }
    eprintln!("QUORUM requests per phase:\n{report}");
    for phase in &report.phases {
        // What QUORUM exists for, in every phase: a read after an
        // acknowledged write sees it.
        assert_eq!(phase.reads_stale, 0, "{phase}");
        match phase.name.as_str() {
            // The operator's topology changes: not one write fails, and the
            // writer keeps its pace; no read fails while a rack is added.
            // In the scale-down, as the leaving node stops, a coordinator
            // may still have sent it a read (2 and 10 reads of ~250 in 2 of
            // 5 runs here, as in real_data's): those may time out, nothing
            // else.
            ADD_RACK | SCALE_DOWN => {
                let pace = phase.lasted.as_secs_f64() * f64::from(WRITES_PER_SECOND);
                let requests = phase.writes_ok + phase.writes_failed;
                assert!(requests as f64 >= pace / 2.0, "{phase}");
                assert_eq!(phase.writes_failed, 0, "{phase}");
                if phase.name == ADD_RACK {
                    assert_eq!(phase.reads_failed, 0, "{phase}");
                }
                assert!(only_timeouts(phase), "{phase}");
            }
            // A Node that vanishes sends nothing: the requests the driver
            // had sent to its node wait out the client's timeout, and a
            // coordinator's read of it times out, until the node is given
            // up (the same on GKE; 24-33 writes and 15-20 reads here).
            // What the ring itself answered never failed otherwise.
            REPLACE => assert!(only_timeouts(phase), "{phase}"),
            // While no replica answers, writes fail; after it, the driver
            // takes some seconds to reconnect (3 writes in one run); and
            // the steady phases share the two cores with the data checks
            // at ALL. Measured and printed, not judged: the data is,
            // after every step.
            _ => {}
        }
    }
    check_acknowledged(&table, &report, "the end").await;
}
