//! The full outage: every member Pod of a converged cluster deleted at
//! once (a zone's power lost, a careless `kubectl delete pods --all`). The
//! StatefulSet brings them back one at a time (`OrderedReady`); each member
//! has its data and must come back as itself (same host ID, no bootstrap),
//! without losing a key.

use std::collections::BTreeMap;
use std::time::Duration;

use crds::Cluster;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use testworld::harness::fast_ring;
use testworld::ring::{Consistency, Replication};

use crate::common::ONE_WORLD;
use crate::world::{ring_summary, wait_ready, world};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_deleted_at_once_comes_back_as_itself() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let client = world.client.clone();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "c", 3, Duration::from_secs(180), &log).await;
    let sim = &world.sim;
    sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 300, Consistency::Quorum).unwrap();
    });
    // Who each member is: its address (ClusterIP) and host ID.
    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let mut identities = BTreeMap::new();
    for i in 0..3 {
        let ip = services
            .get(&format!("c-dc-r-{i}"))
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap();
        let host = sim
            .ring()
            .with(|r| r.node_by_address(&ip).map(|n| n.host_id.clone()))
            .expect("a member of the ring");
        identities.insert(ip, host);
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("cassandra.rook.io/cluster=c"),
    )
    .await
    .unwrap();

    // Back within the time three restarts take, not a deadlock.
    wait_ready(&clusters, "c", 3, Duration::from_secs(120), &log).await;
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");
    for (ip, host) in &identities {
        let now = sim
            .ring()
            .with(|r| r.node_by_address(ip).map(|n| n.host_id.clone()));
        assert_eq!(now.as_ref(), Some(host), "{ip} came back as itself");
    }
    let members = sim.ring().with(|r| r.nodes().count());
    assert_eq!(members, 3, "no member joined as a new node\n{status}");
}
