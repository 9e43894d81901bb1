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

use k8s_openapi::api::apps::v1::StatefulSet;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Client;
use kube::api::{Api, ObjectList, Patch, PatchParams};
use serde_json::{Value, json};
use testworld::harness::{eventually, fast_ring};
use testworld::ring::{Consistency, NodeStatus, Replication};

use crds::contract::{
    DECOMMISSION_CONFIRMATION, DECOMMISSION_REQUEST, DECOMMISSIONED, DecommissionConfirmation,
    DecommissionRequest,
};

use crate::common::ONE_WORLD;
use crate::lifecycle::{
    NS, STS_B, STS_R, cluster_ips, delete_every_member_pod_at_once, events, lose_the_node_of_b0,
    names, one_rack, ring_rows, scale_rack_b_down_to_one, set_rack_r, thesis_five,
};
use crate::safety::SafetyWatch;
use crate::world::{ring_summary, wait_ready, world};

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Writes `metadata` (labels and annotations) on a member Service as an
/// administrator would, unguarded.
async fn forge(services: &Api<Service>, member: &str, metadata: Value) {
    services
        .patch(
            member,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": metadata })),
        )
        .await
        .unwrap();
}

/// Waits until the controller took the forged `true` back (no label, no
/// confirmation) and said so in a Warning Event naming the member.
async fn taken_back(services: &Api<Service>, client: &Client, member: &str) {
    eventually(
        &format!("the stale record on {member} taken back"),
        60,
        || async {
            let service = services.get(member).await.ok()?;
            let labels = service.metadata.labels.unwrap_or_default();
            let annotations = service.metadata.annotations.unwrap_or_default();
            (!labels.contains_key(DECOMMISSIONED)
                && !annotations.contains_key(DECOMMISSION_CONFIRMATION))
            .then_some(())
        },
    )
    .await;
    // The Event is published right after the write.
    eventually(
        &format!("a StaleDecommissionRecord Event naming {member}"),
        10,
        || async {
            events(client)
                .await
                .into_iter()
                .any(|(reason, note)| reason == "StaleDecommissionRecord" && note.contains(member))
                .then_some(())
        },
    )
    .await;
}

async fn replicas(client: &Client, statefulset: &str) -> i32 {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    api.get(statefulset)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_true_nobody_asked_for_deletes_nothing_and_a_real_scale_down_still_works()
{
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(&["a"], work.path(), fast_ring(), NS).await;
    // Four members: 4.1 refuses to leave a ring of no more nodes than a
    // keyspace's replication factor (system_distributed's is 3).
    let clusters = one_rack(&world, "4.1.8", 4, &log).await;
    let (sim, client) = (&world.sim, world.client.clone());
    sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::network_topology([("dc", 2)]))
            .unwrap();
        ring.write_keys("ks", "k", 300, Consistency::Quorum)
            .unwrap();
    });
    let safety = SafetyWatch::start(sim, NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
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
        forge(&services, &top, metadata).await;
        taken_back(&services, &client, &top).await;
        assert_eq!(
            replicas(&client, STS_R).await,
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
        let (up, status, report) = ring_summary(sim);
        assert_eq!(up, 4, "{what}:\n{status}");
        assert!(report.is_clean(), "{what}:\n{report}");
        safety.assert_safe(what);
    }

    // A roll still works: every member restarted, one at a time.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let uids = |list: ObjectList<Pod>| -> BTreeSet<String> {
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect()
    };
    let before = uids(pods.list(&Default::default()).await.unwrap());
    clusters
        .patch(
            "cassandra",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                crds::labels::RESTARTED_AT: now(),
            }}})),
        )
        .await
        .unwrap();
    eventually("every member restarted by the roll", 240, || async {
        let now = uids(pods.list(&Default::default()).await.ok()?);
        (now.len() == 4 && now.is_disjoint(&before)).then_some(())
    })
    .await;
    wait_ready(&clusters, "cassandra", 4, Duration::from_secs(120), &log).await;
    safety.assert_safe("the roll");

    // The real thing still works: the member leaves, then its claim and
    // Service go.
    set_rack_r(&clusters, 3).await;
    let left = ips[&top].clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let gone = !names::<PersistentVolumeClaim>(&client)
            .await
            .contains(&format!("data-{top}"))
            && !cluster_ips(&client).await.contains_key(&top);
        if gone && replicas(&client, STS_R).await == 3 {
            break;
        }
        if std::time::Instant::now() > deadline {
            let service = services.get_opt(&top).await.unwrap();
            let others: Vec<_> = services
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|s| (s.metadata.name, s.metadata.annotations))
                .collect();
            let cluster = clusters.get("cassandra").await.unwrap();
            panic!(
                "the highest member was not decommissioned and removed:\nservice: {:?}\nothers: {others:?}\nstatus: {:?}\n{}\ncontroller:\n{}\n{}",
                service.map(|s| s.metadata),
                cluster.status,
                crate::lifecycle::ring_text(sim),
                testworld::harness::tail(&log),
                testworld::harness::container_logs(log.parent().unwrap())
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let rows = ring_rows(sim);
    assert!(
        rows.iter().all(|(a, _)| *a != left),
        "the member's node is still in the ring: {rows:?}"
    );
    assert_eq!(
        rows.iter().filter(|(_, s)| *s == NodeStatus::UN).count(),
        3,
        "{rows:?}"
    );
    let (_, status, report) = ring_summary(sim);
    assert!(
        report.is_clean(),
        "the scale-down lost data:\n{report}\n{status}"
    );
    safety.assert_safe("the scale-down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_true_on_a_lower_member_stalls_nothing_after_it() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(
        &["europe-west1-b", "europe-west1-c"],
        work.path(),
        fast_ring(),
        NS,
    )
    .await;
    let clusters = thesis_five(
        &world,
        crds::v1alpha1::ClusterMode::Cassandra,
        "3.11.1",
        &log,
    )
    .await;
    let safety = SafetyWatch::start(&world.sim, NS);
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    let lower = format!("{STS_B}-1");
    forge(
        &services,
        &lower,
        json!({"labels": {DECOMMISSIONED: "true"}}),
    )
    .await;
    taken_back(&services, &world.client, &lower).await;
    assert_eq!(replicas(&world.client, STS_B).await, 3);
    safety.assert_safe("the stale record");

    // Everything after it: the scale-down that removes that very member
    // (a real request and answer this time), a lost Node, a full outage.
    scale_rack_b_down_to_one(&world, &clusters, &log).await;
    lose_the_node_of_b0(&world, &clusters, &log).await;
    delete_every_member_pod_at_once(&world, &clusters, 3, &log).await;
    safety.assert_safe("the operations after the stale record");
}
