//! Scylla mode end to end (issue 18), with the real binary as the
//! controller and as every member's sidecar, and the test world's fake
//! ScyllaDB node (`scylla` in `scylladb/scylla` images, its REST API on the
//! Pod's loopback): the thesis scenario (scale up to 3, add a rack, scale
//! down, a Node lost and its member replaced by host ID, every member Pod
//! deleted at once) with a clean data check, and `cassandra-operator
//! nodetool status` against the fake's REST API, run in a member's network
//! namespace as `kubectl exec` would.

use std::process::Command;

use crds::contract::{
    DECOMMISSION_REFUSED, DECOMMISSIONED, HOST_ID, REPLACE, REPLACE_REQUESTED, START_REFUSED,
};
use crds::v1alpha1::ClusterMode;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use testworld::ring::{Consistency, Replication};

use crate::common::FAKE_WORLDS;
use crate::lifecycle::{
    NS, STS_B, condition, every_member_pod_deleted_at_once, lose_the_node_of_b0,
    scale_rack_b_down_to_one, thesis_five,
};
use crate::roll::RollWatch;
use crate::scenario::{
    ClusterSpec, Scenario, annotation, cluster, container_pid, label, secs, setup,
};

/// The ScyllaDB release of manifests/examples/scylla.
const SCYLLA_VERSION: &str = "6.2.3";

/// A scenario in namespace [`NS`], which enforces Pod Security "baseline",
/// as manifests/examples/scylla labels its own: ScyllaDB's image has no
/// USER and its scylla account's uid is not pinned, so members run as root.
async fn scylla_scenario(zones: &[&str]) -> Scenario {
    let s = setup().zones(zones).namespace(NS).start().await;
    let patch = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}});
    Api::<Namespace>::all(s.client())
        .patch(NS, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    s
}

/// Cluster `cassandra` in scylla mode: one rack `r` of `members`, 2Gi each.
fn scylla_rack(members: i32) -> ClusterSpec {
    cluster("cassandra")
        .version(SCYLLA_VERSION)
        .with_spec(json!({"mode": "scylla"}))
        .rack("r", members)
        .with_rack(json!({"resources": {"limits": {"memory": "2Gi"}}}))
}

/// `cassandra-operator nodetool <args>` in the network namespace of a
/// member's sidecar (the container's PID 1): its stdout, or the failure.
async fn nodetool_in(s: &Scenario, member: &str, args: &[&str]) -> String {
    let pid = container_pid(&s.pod(member).await)
        .unwrap_or_else(|| panic!("{member}: no running container"));
    let out = Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_cassandra-operator"))
        .arg("nodetool")
        .args(args)
        .output()
        .expect("nsenter runs");
    assert!(
        out.status.success(),
        "nodetool {args:?} in {member}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A member Service's ClusterIP.
async fn cluster_ip(s: &Scenario, member: &str) -> String {
    s.service(member).await.spec.unwrap().cluster_ip.unwrap()
}

/// `nodetool status` through the member's REST API lists every member
/// Service's address as UN, with its rack: once its own gossip has marked
/// the others UP, which a node that just (re)started does after a moment,
/// so the status is read again until then, as an operator would.
async fn status_lists_every_member(s: &Scenario, member: &str, expected: usize) {
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("UN "))
            .map(str::to_string)
            .collect()
    };
    let text = s
        .until(
            &format!("{member}'s nodetool status to list {expected} nodes UN"),
            secs(20),
            || async {
                let text = nodetool_in(s, member, &["--mode", "scylla", "status"]).await;
                if rows(&text).len() >= expected {
                    Ok(text)
                } else {
                    Err(text)
                }
            },
        )
        .await;
    let rows = rows(&text);
    assert_eq!(rows.len(), expected, "{text}");
    let services = s.api::<Service>();
    for service in services.list(&ListParams::default()).await.unwrap() {
        let (Some(name), Some(rack)) = (
            service.metadata.name.clone(),
            label(&service.metadata, crds::labels::RACK),
        ) else {
            continue;
        };
        let ip = service.spec.and_then(|spec| spec.cluster_ip).unwrap();
        assert!(
            rows.iter()
                .any(|r| r.split_whitespace().nth(1) == Some(ip.as_str()) && r.ends_with(&rack)),
            "{name} ({ip}, rack {rack}) is not UN in:\n{text}"
        );
    }
    assert!(text.starts_with("Datacenter: europe-west1\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thesis_scenario_in_scylla_mode() {
    let _one = FAKE_WORLDS.lock().await;
    let s = scylla_scenario(&["europe-west1-b", "europe-west1-c"]).await;
    let clusters = thesis_five(&s, ClusterMode::Scylla, SCYLLA_VERSION).await;
    let b0 = format!("{STS_B}-0");
    status_lists_every_member(&s, &b0, 5).await;
    let info = nodetool_in(&s, &b0, &["--mode", "scylla", "info"]).await;
    for line in [
        "Operation Mode         : NORMAL",
        "Data Center            : europe-west1",
        "Rack                   : europe-west1-b",
        "Cluster Name           : cassandra",
    ] {
        assert!(info.contains(line), "{line:?} not in:\n{info}");
    }
    let mode = nodetool_in(&s, &b0, &["--mode", "scylla", "operation-mode"]).await;
    assert_eq!(mode, "NORMAL\n");
    let version = nodetool_in(&s, &b0, &["--mode", "scylla", "version"]).await;
    assert_eq!(
        version, "ReleaseVersion: 3.0.8\n",
        "the Cassandra version ScyllaDB speaks"
    );
    // Each member recorded its host ID on its member Service: what a
    // replacement replaces by.
    let host_id =
        annotation(&s.service(&b0).await.metadata, HOST_ID).expect("b-0 recorded its host id");
    scale_rack_b_down_to_one(&s, &clusters).await;
    lose_the_node_of_b0(&s, &clusters).await;
    // The replacement started with replace_node_first_boot: the lost node's
    // host ID, which only the member Service remembered.
    let ip = cluster_ip(&s, &b0).await;
    let wanted = format!("Replacing node {host_id} at {ip}");
    assert!(
        s.pod_logs(&b0).contains(&wanted),
        "{b0} did not log {wanted:?}"
    );
    // The member Service records the host ID the replacement runs under
    // (ScyllaDB 5.2+ gives a replacing node a new one, scylladb#12250): a
    // later replace of this member needs that one.
    s.until(
        "the member Service to record the host ID the ring runs",
        secs(30),
        || async {
            let in_ring = s.sim().ring().with(|r| {
                r.nodes()
                    .find(|n| n.address == ip && n.is_up())
                    .map(|n| n.host_id.clone())
            });
            let recorded = annotation(&s.service(&b0).await.metadata, HOST_ID);
            if in_ring.is_some() && recorded == in_ring {
                Ok(())
            } else {
                Err(format!(
                    "the member Service records {recorded:?}, the ring runs {in_ring:?} at {ip} (before the loss: {host_id})"
                ))
            }
        },
    )
    .await;
    every_member_pod_deleted_at_once(&s, 3).await;
    status_lists_every_member(&s, &b0, 3).await;
    a_restart_request_rolls_each_member_once(&s).await;
}

/// The rolling workflow in scylla mode: `cassandra.rook.io/restartedAt`
/// on the Cluster rolls each member once, one at a time (a watch on every
/// committed Pod change), each draining through ScyllaDB's REST API on its
/// way down; the ring ends all up with a clean data check.
async fn a_restart_request_rolls_each_member_once(s: &Scenario) {
    let members = vec![
        format!("{STS_B}-0"),
        "cassandra-europe-west1-europe-west1-c-0".to_string(),
        "cassandra-europe-west1-europe-west1-c-1".to_string(),
    ];
    // The members' log lines about draining.
    let draining = || -> Vec<String> {
        members
            .iter()
            .flat_map(|m| {
                s.pod_logs(m)
                    .lines()
                    .filter(|l| l.contains("drain"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let drained = || draining().iter().filter(|l| l.contains("drained")).count();
    let drained_before = drained();
    let watch = RollWatch::start(s.sim(), NS, &members);
    s.patch_cluster(
        "cassandra",
        json!({"metadata": {"annotations": {
            crds::labels::RESTARTED_AT: "2026-11-24T10:00:00Z"
        }}}),
    )
    .await;
    let clusters = s.clusters();
    s.until(
        "the roll to restart every member once",
        secs(180),
        || async {
            let deleted = watch.deletions();
            let status = clusters
                .get("cassandra")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            if members.iter().all(|m| deleted.get(m) == Some(&1)) && status.ready_members == 3 {
                Ok(())
            } else {
                Err(format!("{deleted:?}, {}/3 ready", status.ready_members))
            }
        },
    )
    .await;
    s.until_ready("cassandra", 3, secs(60)).await;
    watch.assert_one_at_a_time("a restart roll in scylla mode");
    assert_eq!(
        watch.deletions(),
        members.iter().map(|m| (m.clone(), 1)).collect(),
        "each member restarted exactly once"
    );
    let drained_after = drained();
    assert!(
        drained_after >= drained_before + members.len(),
        "every member drained on its way down: {drained_before} drained lines before, {drained_after} after; lines about draining:\n{}",
        draining().join("\n")
    );
    s.until("3 nodes up after the roll", secs(30), || async {
        s.ring().up() == 3
    })
    .await;
    s.ring().assert_intact(3);
}

/// A one-member cluster in scylla mode, the controller stopped: member 0's
/// Service is labelled for a decommission by hand; ScyllaDB refuses it over
/// its REST API (an HTTP 500 with its reason: the last node of the ring),
/// the sidecar reports that reason on the member Service, never confirms,
/// and the node stays in the ring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_scylla_refuses_is_reported_with_its_reason() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = scylla_scenario(&["a"]).await;
    s.create(&scylla_rack(1)).await;
    s.until_ready("cassandra", 1, secs(120)).await;
    // Only the sidecar acts from here: the intent is written by hand.
    s.stop_controller();
    let member = "cassandra-dc-r-0";
    s.patch_service(
        member,
        json!({"metadata": {"labels": {DECOMMISSIONED: "false"}}}),
    )
    .await;
    let refused = s
        .until_annotation(member, DECOMMISSION_REFUSED, secs(60))
        .await;
    assert_eq!(
        refused, "std::runtime_error (Cannot decomission last node in the cluster)",
        "ScyllaDB's reason (6.x, Raft topology, its typo included), as its REST API gave it"
    );
    assert_eq!(
        label(&s.service(member).await.metadata, DECOMMISSIONED).as_deref(),
        Some("false"),
        "never confirmed"
    );
    s.ring().assert_intact(1);
}

/// A member whose sidecar does not start ScyllaDB on its Node (too few free
/// AIO events: the sidecar's own test, tests/e2e/sidecar.rs, shows it
/// writing this record; here it is written by hand as the sidecar writes
/// it) gives its rack a `StartRefused` condition, degrades the Cluster
/// (`MemberStartRefused`) and brings a Warning Event, each quoting the
/// sidecar's reason and fix; once the record goes, so do they.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_the_node_cannot_give_is_a_warning_and_a_rack_condition() {
    let _one = FAKE_WORLDS.lock().await;
    let s = scylla_scenario(&["a"]).await;
    s.create(&scylla_rack(1)).await;
    s.until_ready("cassandra", 1, secs(120)).await;
    let member = "cassandra-dc-r-0";
    let why = "free AIO events on this Node: 0 of fs.aio-max-nr 65536 (aio-nr 65536); \
               ScyllaDB needs at least 2054 for its 2 shards: raise fs.aio-max-nr";
    s.patch_service(
        member,
        json!({"metadata": {"annotations": {START_REFUSED: why}}}),
    )
    .await;
    let expected = format!("member 0 of rack r does not start: {why}");
    s.until("the refusal reported", secs(30), || async {
        let c = s
            .clusters()
            .get("cassandra")
            .await
            .map_err(|e| e.to_string())?;
        let status = c.status.clone().unwrap_or_default();
        let rack = status
            .racks
            .get("r")
            .and_then(|r| r.conditions.iter().find(|c| c.type_ == "StartRefused"))
            .and_then(|c| c.message.clone());
        let degraded = condition(&c, "Degraded");
        let warned = s
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("MemberStartRefused")
                    && e.note.as_deref() == Some(expected.as_str())
            });
        let wanted = Some((
            "True".to_string(),
            "MemberStartRefused".to_string(),
            expected.clone(),
        ));
        if rack.as_deref() == Some(format!("member 0: {why}").as_str())
            && degraded == wanted
            && warned
        {
            Ok(())
        } else {
            Err(format!(
                "rack condition {rack:?}, Degraded {degraded:?}, Warning Event {warned}"
            ))
        }
    })
    .await;
    s.patch_service(
        member,
        json!({"metadata": {"annotations": {START_REFUSED: null}}}),
    )
    .await;
    s.until("the refusal gone", secs(30), || async {
        let c = s.clusters().get("cassandra").await.ok()?;
        let racks = c.status.clone().unwrap_or_default().racks;
        let rack_clear = racks
            .get("r")
            .is_some_and(|r| r.conditions.iter().all(|c| c.type_ != "StartRefused"));
        (rack_clear && condition(&c, "Degraded").is_some_and(|(s, _, _)| s == "False"))
            .then_some(())
    })
    .await;
}

/// A member's disk is emptied while its Node (and its place in the ring)
/// survives, in scylla mode: ScyllaDB refuses to join at an address the
/// ring knows, the sidecar asks for a replace on its member Service, and,
/// given the `replace` label (by hand, as the controller would), starts
/// ScyllaDB with `replace_node_first_boot` set to the host ID the lost node
/// recorded there; it takes its place back and its data streams back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_member_is_replaced_by_its_recorded_host_id() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = scylla_scenario(&["a"]).await;
    s.create(&scylla_rack(3)).await;
    s.until_ready("cassandra", 3, secs(180)).await;
    // Only the sidecars act from here.
    s.stop_controller();
    s.ring()
        .write("ks", Replication::simple(3), 300, Consistency::All);
    let last = "cassandra-dc-r-2";
    let host_id = s.until_annotation(last, HOST_ID, secs(90)).await;
    // The disk emptied under the running member, which then dies.
    s.empty_data_volume(last).await;
    s.kill_container(last).await;

    let request = s.until_annotation(last, REPLACE_REQUESTED, secs(90)).await;
    assert!(
        request.contains("already exists, cancelling join"),
        "{request}"
    );
    // The controller's answer, by hand: the member's own ClusterIP.
    let ip = cluster_ip(&s, last).await;
    s.patch_service(last, json!({"metadata": {"labels": {REPLACE: ip}}}))
        .await;
    let wanted = format!("Replacing node {host_id} at {ip}");
    s.until(
        "the emptied member replaced by its host ID",
        secs(120),
        || async {
            let (up, report) = (s.ring().up(), s.ring().check());
            let replaced = s.pod_logs(last).contains(&wanted);
            let withdrawn = annotation(&s.service(last).await.metadata, REPLACE_REQUESTED).is_none();
            if up == 3 && replaced && withdrawn && report.is_clean() {
                Ok(())
            } else {
                Err(format!(
                    "up {up}, logged {wanted:?}: {replaced}, request withdrawn: {withdrawn}\n{report}"
                ))
            }
        },
    )
    .await;
}
