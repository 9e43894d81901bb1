//! Decommission end to end on Cassandra 4.1 and 5.0 (3.11 is in world.rs):
//! the sidecar of the highest member, asked through its Service's label,
//! decommissions it through Jolokia (4.x checks that enough members remain
//! for the replication factor: with four members and RF 3 they do), and no
//! key is lost; the controller-driven scale-down the same way (ignored
//! until the controller scales down); and the 4.x refusal when too few
//! members would remain.

use std::time::Duration;

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testworld::harness::{container_logs, fast_ring, until};
use testworld::ring::{Consistency, Replication};

use crate::common::{ONE_WORLD, create_cluster as create};
use crate::world::{ring_summary, wait_ready, world};

fn cluster(version: &str, members: i32) -> Cluster {
    serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": version, "datacenter": {"name": "dc", "racks": [{"name": "r", "members": members,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}}
    }))
    .unwrap()
}

/// Four members with RF 3: the controller scales to three, member 3
/// decommissions (4.x checks that 3 remain for RF 3: they do), the
/// StatefulSet shrinks, no key is lost.
async fn scale_down_on(version: &str) {
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    create(&clusters, &cluster(version, 4)).await;
    wait_ready(&clusters, "c", 4, Duration::from_secs(240), &log).await;
    world.sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 500, Consistency::Quorum).unwrap();
    });
    // The whole rack (a merge patch replaces the list), one member less.
    let mut rack = clusters.get("c").await.unwrap().spec.datacenter.racks[0].clone();
    rack.members = 3;
    clusters
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"datacenter": {"name": "dc", "racks": [rack]}}})),
        )
        .await
        .unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(world.client.clone(), "db");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let replicas = statefulsets
            .get("c-dc-r")
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas;
        if replicas == Some(3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{version}: the rack was not scaled down\n{}\n{}",
            testworld::harness::tail(&log),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_ready(&clusters, "c", 3, Duration::from_secs(60), &log).await;
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, 3, "{version}: {status}");
    assert_eq!(
        world
            .sim
            .ring()
            .with(|r| r.status(None).unwrap().rows.len()),
        3,
        "{version}: the member left the ring (nodetool status lists 3 nodes)\n{status}"
    );
    assert!(report.is_clean(), "{version}: {report}\n{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_scales_down_on_4_1() {
    let _one = ONE_WORLD.lock().await;
    scale_down_on("4.1.8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_scales_down_on_5_0() {
    let _one = ONE_WORLD.lock().await;
    scale_down_on("5.0.2").await;
}

/// Four members with RF 3, the controller stopped once they are ready:
/// member 3's Service is labelled by hand, its sidecar decommissions it
/// (allowed: three remain for RF 3), confirms, and no key is lost.
async fn decommission_by_label_on(version: &str) {
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    create(&clusters, &cluster(version, 4)).await;
    wait_ready(&clusters, "c", 4, Duration::from_secs(240), &log).await;
    drop(controller);
    world.sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 500, Consistency::Quorum).unwrap();
    });
    let services: Api<Service> = Api::namespaced(world.client.clone(), "db");
    services
        .patch(
            "c-dc-r-3",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {crds::contract::DECOMMISSIONED: "false"}}}),
            ),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let labels = services
            .get("c-dc-r-3")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if labels
            .get(crds::contract::DECOMMISSIONED)
            .map(String::as_str)
            == Some("true")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{version}: the decommission was not confirmed\n{}",
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, 3, "{version}: {status}");
    assert!(report.is_clean(), "{version}: {report}\n{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_on_4_1() {
    let _one = ONE_WORLD.lock().await;
    decommission_by_label_on("4.1.8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_on_5_0() {
    let _one = ONE_WORLD.lock().await;
    decommission_by_label_on("5.0.2").await;
}

/// Three members with RF 3 on 4.1: a decommission would leave two for RF
/// 3, and Cassandra 4.0+ refuses it (StorageService.decommission: "Not
/// enough live nodes to maintain replication factor"). The member stays in
/// the ring and the intent is never confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_4_refuses_a_decommission_below_the_replication_factor() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    create(&clusters, &cluster("4.1.8", 3)).await;
    wait_ready(&clusters, "c", 3, Duration::from_secs(180), &log).await;
    // Only the sidecars act from here: the intent is written by hand.
    drop(controller);
    world.sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 300, Consistency::Quorum).unwrap();
    });
    let services: Api<Service> = Api::namespaced(world.client.clone(), "db");
    services
        .patch(
            "c-dc-r-2",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {crds::contract::DECOMMISSIONED: "false"}}}),
            ),
        )
        .await
        .unwrap();
    until("the refusal in the member's log", 60, || {
        container_logs(work.path())
            .contains("Not enough live nodes to maintain replication factor in keyspace ks")
            .then_some(())
    })
    .await;
    let labels = services
        .get("c-dc-r-2")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels
            .get(crds::contract::DECOMMISSIONED)
            .map(String::as_str),
        Some("false"),
        "never confirmed"
    );
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, 3, "the member stays, NORMAL: {status}");
    assert!(report.is_clean(), "{report}");
}
