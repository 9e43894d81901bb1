//! The repair after a replace at the member's own address (issue 30), end
//! to end in the fake world: the real sidecar binary, the fake Cassandra
//! 4.1.8 (its `repairAsync` and `getParentRepairStatus` as the 4.1 jar's
//! StorageService has them: the command number at once, the status null
//! while queued, `IN_PROGRESS`, then `COMPLETED`), the Jolokia access
//! policy the agent enforces.

use crds::contract;
use serde_json::{Value, json};
use sidecar::member::repair::{RECORD, Record};
use testworld::harness::fast_ring;
use testworld::ring::{Consistency, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, annotation, cluster, secs, setup};

/// A member's Pod name in the one-rack cluster below.
fn member(ordinal: usize) -> String {
    format!("c-dc-r-{ordinal}")
}

/// What the fake Cassandra logs when a repair command starts (4.1's
/// RepairRunnable: "Starting repair command #N (id), repairing keyspace
/// KS with repair options (...)"), with the options of a full repair of
/// all the node's ranges.
fn full_repair_started(keyspace: &str) -> String {
    format!(
        "repairing keyspace {keyspace} with repair options (parallelism: parallel, primary range: false, incremental: false"
    )
}

/// The record of the repair on a member Service, if any.
async fn record(s: &Scenario, pod: &str) -> Option<Record> {
    let meta = s.service(pod).await.metadata;
    annotation(&meta, RECORD).map(|text| {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{RECORD} {text:?}: {e}"))
    })
}

/// A member's disk is emptied while the ring still knows its address; it
/// asks for a replace and, given the `replace` label (by hand, the
/// controller stopped), replaces itself at its own address. Once NORMAL its
/// sidecar repairs, in full, every replicated keyspace with more than one
/// replica (the test's `ks` at RF 3, `system_distributed`,
/// `system_traces`; `system_auth` at RF 1 has nothing to repair),
/// following each command's status. The sidecar is SIGKILLed in the middle
/// of the repair: the marker on the data volume makes the next start
/// resume it, and only when every keyspace is repaired is the marker gone
/// and the member Service's record `done`. The members that started
/// normally ran no repair and carry no record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_replaced_at_its_own_address_is_repaired_even_across_a_sidecar_crash() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = setup().zones(&["r"]).ring(fast_ring()).start().await;
    s.create(&cluster("c").version("4.1.8").zone_rack("r", 3))
        .await;
    s.until_ready("c", 3, secs(180)).await;
    s.stop_controller();
    s.ring()
        .write("ks", Replication::simple(3), 300, Consistency::All);
    let names: Vec<String> = (0..3).map(member).collect();
    let last = &names[2];
    let volume = s.data_volume(last).await;
    let bootstrapped = contract::bootstrapped_marker(&volume);
    s.until("the member to record its bootstrap", secs(30), || async {
        bootstrapped.exists()
    })
    .await;
    for name in &names {
        assert!(
            !s.pod_logs(name).contains("Starting repair command"),
            "{name} started normally, and was repaired"
        );
        assert_eq!(record(&s, name).await, None, "{name}");
    }

    // The disk emptied under the running member, which then dies; it asks
    // for a replace, and the controller's answer comes by hand.
    s.empty_data_volume(last).await;
    s.kill_container(last).await;
    s.until_annotation(last, contract::REPLACE_REQUESTED, secs(60))
        .await;
    let ip = s.service(last).await.spec.unwrap().cluster_ip.unwrap();
    s.patch_service(
        last,
        json!({"metadata": {"labels": {contract::REPLACE: ip}}}),
    )
    .await;

    // The repair starts once the replacement is NORMAL: the sidecar is
    // killed right then, with the keyspaces not all repaired.
    s.until(
        "the repair after the replace to start",
        secs(120),
        || async { s.pod_logs(last).contains("Starting repair command") },
    )
    .await;
    let marker = sidecar::markers::repair_marker(&volume);
    assert!(marker.is_file(), "the marker is there while it repairs");
    s.kill_container(last).await;

    let done = s
        .until("the repair after the replace done", secs(120), || async {
            match record(&s, last).await {
                Some(r) if r.state == "done" => Ok(r),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let logs = s.pod_logs(last);
    assert!(
        logs.matches("a repair is due after the replace").count() >= 2,
        "the sidecar's restart resumed the repair:\n{}",
        &logs[logs.len().saturating_sub(4000)..]
    );
    for keyspace in ["ks", "system_distributed", "system_traces"] {
        assert!(
            logs.contains(&full_repair_started(keyspace)),
            "no full repair of {keyspace}:\n{}",
            &logs[logs.len().saturating_sub(4000)..]
        );
    }
    let mut repaired = done.repaired.clone();
    repaired.sort();
    assert_eq!(
        repaired,
        ["ks", "system_auth", "system_distributed", "system_traces"],
        "{done:?}"
    );
    assert!(
        !marker.exists(),
        "the marker is removed once all are repaired"
    );
    assert!(logs.contains("repair after replace complete"));
    for name in &names[..2] {
        assert!(
            !s.pod_logs(name).contains("Starting repair command"),
            "{name} started normally, and was repaired"
        );
        assert_eq!(record(&s, name).await, None, "{name}");
    }
    // The record is JSON the controller reads.
    let raw = annotation(&s.service(last).await.metadata, RECORD).unwrap();
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["state"], "done");
    assert!(contract::parse_time(value["at"].as_str().unwrap()).is_some());
}
