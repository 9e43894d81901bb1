//! A member asked to leave loses its Node, and its local SSD with it, while
//! it streams its data away (issue 31: the cluster used to wait for its
//! decommission forever, and a replace would have brought a leaving node
//! back). Its data is still on the other replicas: it leaves the ring by
//! `nodetool removenode`, which the operator asks an administrator to run
//! (a Degraded condition and a Warning Event naming the host ID), holding
//! every other topology change meanwhile and deleting nothing; once the
//! ring no longer counts it, the operator records the removal and the
//! scale-down finishes. The safety watch judges every deletion by the ring.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use testworld::harness::{container_logs, eventually, fast_ring, tail};
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::ONE_WORLD;
use crate::lifecycle::{
    NS, STS_B, cluster_ips, condition, events, names, ring_rows, ring_text, set_members,
};
use crate::safety::SafetyWatch;
use crate::world::{ring_summary, thesis_cluster, wait_ready, world};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_while_leaving_is_removed_by_removenode_and_the_scale_down_finishes() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let mut ring = fast_ring();
    // Long enough to lose the Node mid-stream.
    ring.timing.decommission_ms = 8_000;
    let (world, _controller, log) = world(&["europe-west1-b"], work.path(), ring, NS).await;
    let (sim, client) = (&world.sim, world.client.clone());
    let mut cluster = thesis_cluster();
    cluster.spec.datacenter.racks.truncate(1);
    cluster.spec.datacenter.racks[0].members = 3;
    let clusters: kube::Api<crds::Cluster> = Api::namespaced(client.clone(), NS);
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), &log).await;
    sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::network_topology([("europe-west1", 2)]))
            .unwrap();
        ring.write_keys("ks", "k", 300, Consistency::Quorum)
            .unwrap();
    });
    let safety = SafetyWatch::start(sim, NS);
    let leaving = format!("{STS_B}-2");
    let address = cluster_ips(&client).await[&leaving].clone();
    let claim = format!("data-{leaving}");

    // The scale-down starts; the member streams (UL); its Node goes.
    set_members(&clusters, &[("europe-west1-b", 2)]).await;
    eventually("the member leaving (UL)", 60, || async {
        ring_rows(sim)
            .iter()
            .any(|(a, s)| *a == address && *s == NodeStatus::UL)
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let node = pods
        .get(&leaving)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .expect("the member's Node");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();

    // Refused with what to do; nothing deleted, the rack not shrunk.
    let message = eventually("the LeavingMemberLost condition", 90, || async {
        let c = clusters.get("cassandra").await.ok()?;
        let (status, reason, message) = condition(&c, "Degraded")?;
        (status == "True" && reason == "LeavingMemberLost").then_some(message)
    })
    .await;
    let host_id = sim
        .ring()
        .with(|r| r.node_by_address(&address).map(|n| n.host_id.clone()))
        .expect("the lost node is still in the ring");
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    assert!(
        message.contains(&format!("nodetool removenode {host_id}")),
        "{message}\n{:?}",
        services
            .get(&leaving)
            .await
            .ok()
            .map(|s| s.metadata.annotations)
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|(reason, note)| reason == "LeavingMemberLost" && note.contains(&host_id)),
        "no Warning Event names the host ID"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let replicas = |s: StatefulSet| s.spec.and_then(|s| s.replicas);
    assert_eq!(replicas(sts.get(STS_B).await.unwrap()), Some(3));
    assert!(
        names::<PersistentVolumeClaim>(&client)
            .await
            .contains(&claim)
    );
    assert!(
        ring_rows(sim).iter().any(|(a, _)| *a == address),
        "still in the ring:\n{}",
        ring_text(sim)
    );
    safety.assert_safe("while the lost member is refused");

    // The administrator runs removenode from another member.
    let coordinator = sim
        .ring()
        .with(|r| {
            r.nodes()
                .find(|n| n.address != address && n.is_up())
                .map(|n| n.host_id.clone())
        })
        .expect("a live member");
    sim.ring()
        .with(|r| r.remove_node(&coordinator, &host_id))
        .unwrap_or_else(|e| panic!("removenode: {e:?}\n{}", ring_text(sim)));

    // The operator records the removal and finishes the scale-down.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let claims = names::<PersistentVolumeClaim>(&client).await;
        let ips = cluster_ips(&client).await;
        let c = clusters.get("cassandra").await.unwrap();
        let ready = condition(&c, "Ready").is_some_and(|(s, _, _)| s == "True");
        if !claims.contains(&claim) && !ips.contains_key(&leaving) && ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scale-down did not finish: {:?}\n{}\n{}\n{}",
            c.status,
            ring_text(sim),
            tail(&log),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(replicas(sts.get(STS_B).await.unwrap()), Some(2));
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 2, "{status}");
    assert!(
        report.is_clean(),
        "the removal lost data:\n{report}\n{status}"
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|(reason, _)| reason == "MemberRemovedFromRing"),
        "no MemberRemovedFromRing Event"
    );
    wait_ready(&clusters, "cassandra", 2, Duration::from_secs(60), &log).await;
    safety.assert_safe("the removal and the scale-down");
}
