//! Writes keep working through topology changes: a client writing at
//! QUORUM with RF 3 all through a scale-up sees no failed write, and every
//! key it wrote is fully replicated at the end.

use std::time::Duration;

use crds::Cluster;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testworld::fake_cassandra::writer::Writer;
use testworld::harness::fast_ring;
use testworld::ring::{Consistency, Replication};

use crate::common::ONE_WORLD;
use crate::world::{ring_summary, wait_ready, world};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_writer_sees_no_failure_through_a_scale_up() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "c", 3, Duration::from_secs(180), &log).await;
    let ring = world.sim.ring().clone();
    ring.with(|r| r.create_keyspace("app", Replication::simple(3)))
        .unwrap();
    let writer = Writer::start(
        ring.clone(),
        Some("c".into()),
        "app",
        "w-",
        Consistency::Quorum,
        Duration::from_millis(20),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The whole rack (a merge patch replaces the list), one member more.
    let mut rack = clusters.get("c").await.unwrap().spec.datacenter.racks[0].clone();
    rack.members = 4;
    clusters
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"datacenter": {"name": "dc", "racks": [rack]}}})),
        )
        .await
        .unwrap();
    wait_ready(&clusters, "c", 4, Duration::from_secs(120), &log).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = writer.stop();
    assert_eq!(report.failed, 0, "writes failed: {:?}", report.errors);
    assert!(report.written > 50, "the writer ran: {report:?}");
    let (up, status, check) = ring_summary(&world.sim);
    assert_eq!(up, 4, "{status}");
    assert!(check.is_clean(), "{check}\n{status}");
}
