//! A `cassandra.rook.io/decommissioned=true` the controller never asked
//! for (issue 35): written by hand, by a stray tool, by a GitOps tool
//! re-applying an old manifest. It once made the controller shrink the
//! StatefulSet and delete the claim of a member that never left the ring.
//! Now a decommission counts only as the controller's request, the
//! sidecar's answer to it and the ring's agreement; a `true` without them
//! is taken back with a Warning Event, nothing is deleted, and every later
//! operation (a real scale-down, a lost Node, a full outage) proceeds. The
//! safety watch judges each deletion and shrink by the ring model, not by
//! the label.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, ObjectList};
use serde_json::{Value, json};

use crds::contract::{
    DECOMMISSION_CONFIRMATION, DECOMMISSION_REQUEST, DECOMMISSIONED, DecommissionConfirmation,
    DecommissionRequest,
};
use crds::v1alpha1::ClusterMode;

use crate::common::FAKE_WORLDS;
use crate::lifecycle::{
    NS, STS_B, STS_R, THESIS_ZONES, cluster_ips, ensure, events, every_member_pod_deleted_at_once,
    in_ring, lose_the_node_of_b0, names, one_rack, replicas, scale_rack_b_down_to_one, set_rack_r,
    thesis_five,
};
use crate::scenario::{Scenario, annotation, label, secs, setup};

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Writes `metadata` (labels and annotations) on a member Service as an
/// administrator would, unguarded.
async fn forge(s: &Scenario, member: &str, metadata: Value) {
    s.patch_service(member, json!({ "metadata": metadata }))
        .await;
}

/// Waits until the controller took the forged `true` back (no label, no
/// confirmation) and said so in a Warning Event naming the member.
async fn taken_back(s: &Scenario, member: &str) {
    s.until(
        &format!("the stale record on {member} taken back"),
        secs(60),
        || async {
            let service = s.service(member).await;
            let (recorded, confirmed) = (
                label(&service.metadata, DECOMMISSIONED),
                annotation(&service.metadata, DECOMMISSION_CONFIRMATION),
            );
            ensure(recorded.is_none() && confirmed.is_none(), || {
                format!("{DECOMMISSIONED}={recorded:?}, confirmation {confirmed:?}")
            })
        },
    )
    .await;
    // The Event is published right after the write.
    let client = s.client();
    s.until(
        &format!("a StaleDecommissionRecord Event naming {member}"),
        secs(10),
        || async {
            events(&client)
                .await
                .into_iter()
                .any(|(reason, note)| reason == "StaleDecommissionRecord" && note.contains(member))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_true_nobody_asked_for_deletes_nothing_and_a_real_scale_down_still_works()
{
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().namespace(NS).start().await;
    // Four members: 4.1 refuses to leave a ring of no more nodes than a
    // keyspace's replication factor (system_distributed's is 3).
    one_rack(&s, "4.1.8", 4, 2).await;
    let client = s.client();
    let claims = names::<PersistentVolumeClaim>(&client).await;
    let ips = cluster_ips(&client).await;
    let top = format!("{STS_R}-3");

    // Each forgery of a confirmation, on the rack's highest member, whose
    // removal the spec would allow the moment it were believed.
    let request = |id: &str| {
        DecommissionRequest {
            id: id.into(),
            requested_at: now(),
            ..DecommissionRequest::default()
        }
        .to_annotation()
    };
    let confirmation = |id: &str| {
        DecommissionConfirmation {
            request: id.into(),
            host_id: None,
            confirmed_at: now(),
            removed: None,
        }
        .to_annotation()
    };
    let forgeries = [
        (
            "the label alone",
            json!({"labels": {DECOMMISSIONED: "true"}}),
        ),
        (
            "a confirmation without a request",
            json!({"labels": {DECOMMISSIONED: "true"},
                   "annotations": {DECOMMISSION_CONFIRMATION: confirmation("made-up")}}),
        ),
        (
            "a confirmation of another request",
            json!({"labels": {DECOMMISSIONED: "true"},
                   "annotations": {DECOMMISSION_REQUEST: request("forged-1"),
                                   DECOMMISSION_CONFIRMATION: confirmation("forged-0")}}),
        ),
        (
            "a request and its confirmation, which the ring contradicts",
            json!({"labels": {DECOMMISSIONED: "true"},
                   "annotations": {DECOMMISSION_REQUEST: request("forged-2"),
                                   DECOMMISSION_CONFIRMATION: confirmation("forged-2")}}),
        ),
    ];
    for (what, metadata) in forgeries {
        forge(&s, &top, metadata).await;
        taken_back(&s, &top).await;
        assert_eq!(
            replicas(&s, STS_R).await,
            4,
            "{what}: the StatefulSet shrank"
        );
        assert_eq!(
            names::<PersistentVolumeClaim>(&client).await,
            claims,
            "{what}: a claim went"
        );
        assert_eq!(
            cluster_ips(&client).await,
            ips,
            "{what}: a member Service went"
        );
        let ring = s.ring();
        assert_eq!(ring.up(), 4, "{what}:\n{}", ring.text());
        assert!(ring.check().is_clean(), "{what}:\n{}", ring.check());
        s.assert_safe(what);
    }

    // A roll still works: every member restarted, one at a time.
    let pods: Api<Pod> = s.api();
    let uids = |list: ObjectList<Pod>| -> BTreeSet<String> {
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect()
    };
    let before = uids(pods.list(&Default::default()).await.unwrap());
    s.patch_cluster(
        "cassandra",
        json!({"metadata": {"annotations": {crds::labels::RESTARTED_AT: now()}}}),
    )
    .await;
    s.until("every member restarted by the roll", secs(240), || async {
        let now = uids(pods.list(&Default::default()).await.ok()?);
        (now.len() == 4 && now.is_disjoint(&before)).then_some(())
    })
    .await;
    s.until_ready("cassandra", 4, secs(120)).await;
    s.assert_safe("the roll");

    // The real thing still works: the member leaves, then its claim and
    // Service go.
    set_rack_r(&s, 3).await;
    let left = ips[&top].clone();
    let services: Api<Service> = s.api();
    s.until(
        "the highest member decommissioned and removed",
        secs(180),
        || async {
            let gone = !names::<PersistentVolumeClaim>(&client)
                .await
                .contains(&format!("data-{top}"))
                && !cluster_ips(&client).await.contains_key(&top);
            if gone && replicas(&s, STS_R).await == 3 {
                return Ok(());
            }
            let service = services.get_opt(&top).await.unwrap();
            let others: Vec<_> = services
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|s| (s.metadata.name, s.metadata.annotations))
                .collect();
            let cluster = s.clusters().get("cassandra").await.unwrap();
            Err(format!(
                "service: {:?}\nothers: {others:?}\nstatus: {:?}",
                service.map(|s| s.metadata),
                cluster.status
            ))
        },
    )
    .await;
    assert!(
        !in_ring(s.sim(), &left),
        "the member's node is still in the ring:\n{}",
        s.ring().text()
    );
    s.ring().assert_intact(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_true_on_a_lower_member_stalls_nothing_after_it() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().zones(&THESIS_ZONES).namespace(NS).start().await;
    let clusters = thesis_five(&s, ClusterMode::Cassandra, "3.11.1").await;
    let lower = format!("{STS_B}-1");
    forge(&s, &lower, json!({"labels": {DECOMMISSIONED: "true"}})).await;
    taken_back(&s, &lower).await;
    assert_eq!(replicas(&s, STS_B).await, 3);
    s.assert_safe("the stale record");

    // Everything after it: the scale-down that removes that very member
    // (a real request and answer this time), a lost Node, a full outage.
    scale_rack_b_down_to_one(&s, &clusters).await;
    lose_the_node_of_b0(&s, &clusters).await;
    every_member_pod_deleted_at_once(&s, 3).await;
}
