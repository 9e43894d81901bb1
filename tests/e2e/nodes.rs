//! Nodes and their local SSDs as GKE has them, with the whole operator in
//! the test world: a Node that GKE auto-repair re-creates under its name
//! comes back with empty local SSDs behind the unchanged PV and claim; the
//! member on it is refused exactly as Cassandra refuses it (its address is
//! still in gossip with another host ID), and the operator then replaces it
//! with its own address.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crds::Cluster;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use kube::api::Api;
use testworld::harness::{self, fast_ring, until};
use testworld::ring::{Consistency, Replication};

use crate::common::ONE_WORLD;
use crate::world::{ring_summary, thesis_cluster, wait_ready, world};

/// Every log line the containers of `pod` wrote (all restarts).
pub(crate) fn pod_logs(work: &Path, pod: &str) -> String {
    let mut out = String::new();
    for dir in std::fs::read_dir(work.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = dir.file_name().to_string_lossy().to_string();
        if !name.contains(&format!("_{pod}_")) {
            continue;
        }
        for container in std::fs::read_dir(dir.path().join("logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for log in std::fs::read_dir(container.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push_str(&std::fs::read_to_string(log.path()).unwrap_or_default());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_recreated_under_its_name_has_empty_disks_and_its_member_is_replaced() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) =
        world(&["europe-west1-b"], work.path(), fast_ring(), "cassandra").await;
    let (sim, client) = (&world.sim, world.client.clone());
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "cassandra");
    // The thesis's Cluster as it is: 375Gi claims, one member per Node,
    // each on the one local SSD of its Node.
    crate::common::create_cluster(&clusters, &thesis_cluster()).await;
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), &log).await;
    sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 200, Consistency::Quorum).unwrap();
    });

    let member = "cassandra-europe-west1-europe-west1-b-2";
    let pods: Api<Pod> = Api::namespaced(client.clone(), "cassandra");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "cassandra");
    let services: Api<Service> = Api::namespaced(client.clone(), "cassandra");
    let nodes: Api<Node> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pod = pods.get(member).await.unwrap();
    let node_name = pod.spec.unwrap().node_name.unwrap();
    let old_node_uid = nodes.get(&node_name).await.unwrap().metadata.uid.unwrap();
    let claim = claims.get(&format!("data-{member}")).await.unwrap();
    let claim_uid = claim.metadata.uid.clone().unwrap();
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pv = pvs.get(&pv_name).await.unwrap();
    let disk = testworld::kubesim::sim::disks::host_dir_of_pv(
        work.path(),
        &serde_json::to_value(&pv).unwrap(),
    );
    assert!(
        disk.join("data").is_dir(),
        "the member keeps its data on its Node's local SSD ({})",
        disk.display()
    );
    let address = services
        .get(member)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let old_host_id = sim
        .ring()
        .with(|r| r.node_by_address(&address).map(|n| n.host_id.clone()))
        .expect("the member is in the ring at its ClusterIP");

    // The operator is stopped while the Node is re-created: the Node object
    // is deleted, then registered again, and a controller that looks in
    // between sees the member's disk gone with its Node and replaces the
    // member before Cassandra ever starts on the empty disk (right, and
    // what GKE's minutes-long gap makes likely, but not the refusal this
    // test shows first).
    drop(controller);
    // GKE auto-repair, through kubesim's command line.
    let kubesim = harness::beside(
        Path::new(env!("CARGO_BIN_EXE_cassandra-operator")),
        "kubesim",
    )
    .unwrap();
    let out = Command::new(&kubesim)
        .args(["node", "recreate", &node_name, "--url", &sim.sim_url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubesim node recreate: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let new_node = nodes.get(&node_name).await.unwrap();
    assert_ne!(
        new_node.metadata.uid.unwrap(),
        old_node_uid,
        "a new machine"
    );
    // The member's Pod comes back on the re-created Node (its PV names it)
    // and its container fails as Cassandra does.
    let refusal = format!(
        "A node with address {address} already exists, cancelling join. Use cassandra.replace_address if you want to replace this node."
    );
    until("the member's refusal to start", 120, || {
        pod_logs(work.path(), member)
            .contains(&refusal)
            .then_some(())
    })
    .await;
    let pod = pods.get(member).await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.unwrap(), node_name);
    // The claim and the PV are the same objects: nothing says the disk
    // was lost but the disk itself.
    let claim = claims.get(&format!("data-{member}")).await.unwrap();
    assert_eq!(claim.metadata.uid.unwrap(), claim_uid);
    assert_eq!(claim.spec.unwrap().volume_name.unwrap(), pv_name);
    let marker = disk.join("data").join(testworld::fake_cassandra::MARKER);
    assert!(
        !marker.exists(),
        "the old data is gone from the re-created Node's disk"
    );
    let _controller = world.start_controller(&log, None).unwrap();
    // The operator answers the refusal: the sidecar asks for a replace,
    // the controller grants it with the member's own address, and the
    // member takes over its old tokens on the empty disk (Cassandra keeps
    // the host ID of a same-address replacement), streaming its data back
    // onto the Node's new disk: 3 UN again, nothing lost.
    until("the member replaced on its emptied disk", 180, || {
        let (up, _, _) = ring_summary(sim);
        let back = sim.ring().with(|r| {
            r.node_by_address(&address)
                .is_some_and(|n| n.host_id == old_host_id && n.process.is_some())
        });
        (up == 3 && back && disk.join("data").is_dir()).then_some(())
    })
    .await;
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), &log).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let labels = services
            .get(member)
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if !labels.contains_key(crds::contract::REPLACE) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replace intent was not cleared: {labels:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");
}
