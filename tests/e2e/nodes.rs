//! Nodes and their local SSDs as GKE has them, with the whole operator in
//! the test world: a Node that GKE auto-repair re-creates under its name
//! comes back with empty local SSDs behind the unchanged PV and claim; the
//! member on it is refused exactly as Cassandra refuses it (its address is
//! still in gossip with another host ID), and the operator then replaces it
//! with its own address.

use std::future::ready;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;

use crate::common::FAKE_WORLDS;
use crate::lifecycle::thesis_rack_b;
use crate::lifecycle_crash::recreate_node;
use crate::scenario::{label, secs, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_recreated_under_its_name_has_empty_disks_and_its_member_is_replaced() {
    let _one = FAKE_WORLDS.lock().await;
    // The thesis's Cluster as it is: 375Gi claims, one member per Node,
    // each on the one local SSD of its Node.
    let mut s = thesis_rack_b(setup(), 3, 3).await;

    let member = "cassandra-europe-west1-europe-west1-b-2";
    let claims: Api<PersistentVolumeClaim> = s.api();
    let nodes: Api<Node> = Api::all(s.client());
    let pvs: Api<PersistentVolume> = Api::all(s.client());
    let node_name = s.pod(member).await.spec.unwrap().node_name.unwrap();
    let old_node_uid = nodes.get(&node_name).await.unwrap().metadata.uid.unwrap();
    let claim = claims.get(&format!("data-{member}")).await.unwrap();
    let claim_uid = claim.metadata.uid.clone().unwrap();
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pv = pvs.get(&pv_name).await.unwrap();
    let disk = testworld::kubesim::sim::disks::host_dir_of_pv(
        s.work(),
        &serde_json::to_value(&pv).unwrap(),
    );
    assert!(
        disk.join("data").is_dir(),
        "the member keeps its data on its Node's local SSD ({})",
        disk.display()
    );
    let address = s.service(member).await.spec.unwrap().cluster_ip.unwrap();
    let old_host_id = s
        .sim()
        .ring()
        .with(|r| r.node_by_address(&address).map(|n| n.host_id.clone()))
        .expect("the member is in the ring at its ClusterIP");

    // The operator is stopped while the Node is re-created: the Node object
    // is deleted, then registered again, and a controller that looks in
    // between sees the member's disk gone with its Node and replaces the
    // member before Cassandra ever starts on the empty disk (right, and
    // what GKE's minutes-long gap makes likely, but not the refusal this
    // test shows first).
    s.stop_controller();
    // GKE auto-repair, through kubesim's command line.
    recreate_node(s.sim(), &node_name);

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
    s.until("the member's refusal to start", secs(120), || {
        ready(s.pod_logs(member).contains(&refusal))
    })
    .await;
    let pod = s.pod(member).await;
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
    s.start_controller();
    // The operator answers the refusal: the sidecar asks for a replace,
    // the controller grants it with the member's own address, and the
    // member takes over its old tokens on the empty disk (Cassandra keeps
    // the host ID of a same-address replacement), streaming its data back
    // onto the Node's new disk: 3 UN again, nothing lost.
    s.until("the member replaced on its emptied disk", secs(180), || {
        let back = s.sim().ring().with(|r| {
            r.node_by_address(&address)
                .is_some_and(|n| n.host_id == old_host_id && n.process.is_some())
        });
        ready(s.ring().up() == 3 && back && disk.join("data").is_dir())
    })
    .await;
    s.until_ready("cassandra", 3, secs(180)).await;
    s.until("the replace intent cleared", secs(60), || async {
        let service = s.service(member).await;
        match label(&service.metadata, crds::contract::REPLACE) {
            None => Ok(()),
            Some(_) => Err(format!("{:?}", service.metadata.labels)),
        }
    })
    .await;
    s.ring().assert_intact(3);
}
