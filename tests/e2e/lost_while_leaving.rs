//! A member asked to leave loses its Node, and its local SSD with it, while
//! it streams its data away (issue 31: the cluster used to wait for its
//! decommission forever, and a replace would have brought a leaving node
//! back). Its data is still on the other replicas: it leaves the ring by
//! `nodetool removenode`, which the operator asks an administrator to run
//! (a Degraded condition and a Warning Event naming the host ID), holding
//! every other topology change meanwhile and deleting nothing; once the
//! ring no longer counts it, the operator records the removal and the
//! scale-down finishes. The safety watch judges every deletion by the ring.

use std::future::ready;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams};
use serde_json::json;
use testworld::ring::NodeStatus;

use crate::common::FAKE_WORLDS;
use crate::lifecycle::{
    STS_B, cluster_ips, condition, condition_is, ensure, events, in_ring, names, replicas,
    set_members, thesis_rack_b,
};
use crate::scenario::{Scenario, secs, setup};

/// Makes the controller reconcile once more (an annotation on the Cluster,
/// a change that bumps no generation) and waits until it did: proof that
/// it ran before a check that it did nothing.
async fn reconciled_again(s: &Scenario) {
    let started = s.reconciles_started().await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    s.patch_cluster(
        "cassandra",
        json!({"metadata": {"annotations": {"e2e.test/nudged-at": now}}}),
    )
    .await;
    s.until_reconciled(started, secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_while_leaving_is_removed_by_removenode_and_the_scale_down_finishes() {
    let _one = FAKE_WORLDS.lock().await;
    // Long enough to lose the Node mid-stream.
    let leave_slowly = setup().options(|o| o.ring.timing.decommission_ms = 8_000);
    let s = thesis_rack_b(leave_slowly, 3, 2).await;
    let (sim, client, clusters) = (s.sim(), s.client(), s.clusters());
    let leaving = format!("{STS_B}-2");
    let address = cluster_ips(&client).await[&leaving].clone();
    let claim = format!("data-{leaving}");

    // The scale-down starts; the member streams (UL); its Node goes.
    set_members(&clusters, &[("europe-west1-b", 2)]).await;
    s.until("the member leaving (UL)", secs(60), || {
        ready(
            s.ring()
                .rows()
                .iter()
                .any(|(a, status)| *a == address && *status == NodeStatus::UL),
        )
    })
    .await;
    let node = s
        .pod(&leaving)
        .await
        .spec
        .and_then(|s| s.node_name)
        .expect("the member's Node");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();

    // Refused with what to do; nothing deleted, the rack not shrunk.
    let message = s
        .until("the LeavingMemberLost condition", secs(90), || async {
            let c = clusters.get("cassandra").await.ok()?;
            let (status, reason, message) = condition(&c, "Degraded")?;
            (status == "True" && reason == "LeavingMemberLost").then_some(message)
        })
        .await;
    let host_id = sim
        .ring()
        .with(|r| r.node_by_address(&address).map(|n| n.host_id.clone()))
        .expect("the lost node is still in the ring");
    assert!(
        message.contains(&format!("nodetool removenode {host_id}")),
        "{message}\n{:?}",
        s.service(&leaving).await.metadata.annotations
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|(reason, note)| reason == "LeavingMemberLost" && note.contains(&host_id)),
        "no Warning Event names the host ID"
    );
    reconciled_again(&s).await;
    assert_eq!(replicas(&s, STS_B).await, 3);
    assert!(
        names::<PersistentVolumeClaim>(&client)
            .await
            .contains(&claim)
    );
    assert!(
        in_ring(sim, &address),
        "still in the ring:\n{}",
        s.ring().text()
    );
    s.assert_safe("while the lost member is refused");

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
        .unwrap_or_else(|e| panic!("removenode: {e:?}\n{}", s.ring().text()));

    // The operator records the removal and finishes the scale-down.
    s.until("the scale-down finished", secs(120), || async {
        let claims = names::<PersistentVolumeClaim>(&client).await;
        let ips = cluster_ips(&client).await;
        let c = clusters.get("cassandra").await.unwrap();
        ensure(
            !claims.contains(&claim)
                && !ips.contains_key(&leaving)
                && condition_is(&c, "Ready", "True"),
            || format!("{:?}", c.status),
        )
    })
    .await;
    assert_eq!(replicas(&s, STS_B).await, 2);
    s.ring().assert_intact(2);
    assert!(
        events(&client)
            .await
            .iter()
            .any(|(reason, _)| reason == "MemberRemovedFromRing"),
        "no MemberRemovedFromRing Event"
    );
    s.until_ready("cassandra", 2, secs(60)).await;
}
