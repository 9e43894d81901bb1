//! Decommission end to end on Cassandra 4.1 and 5.0 (3.11 is in world.rs):
//! the sidecar of the highest member, asked through its Service's label,
//! decommissions it through Jolokia (4.x checks that enough members remain
//! for the replication factor: with four members and RF 3 they do), and no
//! key is lost; the controller-driven scale-down the same way (ignored
//! until the controller scales down); and the 4.x refusal when too few
//! members would remain.

use crds::contract::DECOMMISSIONED;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::json;
use testworld::ring::{Consistency, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{ClusterSpec, Scenario, cluster, label, secs, setup};

/// Cluster `c` of one rack `r` of `members` members of `version`, half a
/// CPU each: four fit on the world's three Nodes.
fn rack(version: &str, members: i32) -> ClusterSpec {
    cluster("c")
        .version(version)
        .rack("r", members)
        .with_rack(json!({"resources": {"limits": {"cpu": "500m"}}}))
}

/// A scenario with `members` members of `version` ready and `keys` keys
/// written at RF 3.
async fn ready_with_keys(version: &str, members: i32, keys: usize) -> Scenario {
    let s = setup().start().await;
    s.create(&rack(version, members)).await;
    s.until_ready("c", members, secs(240)).await;
    s.ring()
        .write("ks", Replication::simple(3), keys, Consistency::Quorum);
    s
}

/// Asks member `member` to decommission, as the controller would: its
/// Service's label, written by hand.
async fn ask_to_decommission(s: &Scenario, member: &str) {
    s.patch_service(
        member,
        json!({"metadata": {"labels": {DECOMMISSIONED: "false"}}}),
    )
    .await;
}

/// Four members with RF 3: the controller scales to three, member 3
/// decommissions (4.x checks that 3 remain for RF 3: they do), the
/// StatefulSet shrinks, no key is lost.
async fn scale_down_on(version: &str) {
    let s = ready_with_keys(version, 4, 500).await;
    s.patch_cluster("c", rack(version, 3).racks_patch()).await;
    let statefulsets = s.api::<StatefulSet>();
    s.until(
        &format!("{version}: the rack scaled down to 3"),
        secs(120),
        || async {
            let sts = statefulsets.get("c-dc-r").await.unwrap();
            match sts.spec.and_then(|spec| spec.replicas) {
                Some(3) => Ok(()),
                replicas => Err(format!("replicas {replicas:?}")),
            }
        },
    )
    .await;
    s.until_ready("c", 3, secs(60)).await;
    assert_eq!(
        s.ring().rows().len(),
        3,
        "{version}: the member left the ring (nodetool status lists 3 nodes)\n{}",
        s.ring().text()
    );
    s.ring().assert_intact(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_scales_down_on_4_1() {
    let _one = FAKE_WORLDS.lock().await;
    scale_down_on("4.1.8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_scales_down_on_5_0() {
    let _one = FAKE_WORLDS.lock().await;
    scale_down_on("5.0.2").await;
}

/// Four members with RF 3, the controller stopped once they are ready:
/// member 3's Service is labelled by hand, its sidecar decommissions it
/// (allowed: three remain for RF 3), confirms, and no key is lost.
async fn decommission_by_label_on(version: &str) {
    let mut s = ready_with_keys(version, 4, 500).await;
    s.stop_controller();
    ask_to_decommission(&s, "c-dc-r-3").await;
    s.until_label("c-dc-r-3", DECOMMISSIONED, "true", secs(120))
        .await;
    s.ring().assert_intact(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_on_4_1() {
    let _one = FAKE_WORLDS.lock().await;
    decommission_by_label_on("4.1.8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_on_5_0() {
    let _one = FAKE_WORLDS.lock().await;
    decommission_by_label_on("5.0.2").await;
}

/// Three members with RF 3 on 4.1: a decommission would leave two for RF
/// 3, and Cassandra 4.0+ refuses it (StorageService.decommission: "Not
/// enough live nodes to maintain replication factor"). The member stays in
/// the ring and the intent is never confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_4_refuses_a_decommission_below_the_replication_factor() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = ready_with_keys("4.1.8", 3, 300).await;
    // Only the sidecars act from here: the intent is written by hand.
    s.stop_controller();
    ask_to_decommission(&s, "c-dc-r-2").await;
    let refusal = "Not enough live nodes to maintain replication factor in keyspace ks";
    s.until("the refusal in the member's log", secs(60), || async {
        s.pod_logs("c-dc-r-2").contains(refusal)
    })
    .await;
    assert_eq!(
        label(&s.service("c-dc-r-2").await.metadata, DECOMMISSIONED).as_deref(),
        Some("false"),
        "never confirmed"
    );
    s.ring().assert_intact(3);
}
