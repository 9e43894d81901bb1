//! The whole operator in the test world: kubesim with its StatefulSet
//! controller, scheduler, local disks and kubelet; the real binary as
//! controller (a host process) and as the members' init container and
//! sidecar; fake Cassandra nodes sharing kubesim's ring. The thesis scenario
//! (section 5.2.1), then the sidecar's decommission by hand.

use std::process::Command;

use crds::{Cluster, contract};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use testworld::harness::fast_ring;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, cluster, overrides, secs, setup};

/// Every member's database container runs as the image's database user
/// (999:999), never root, and so does Cassandra under it: the container's
/// PID 1 (the sidecar) and its children, read from /proc through the
/// container ID kubesim reports (`kubesim://<host pid>`).
async fn assert_members_run_as_the_database_user(client: &Client, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods.list(&Default::default()).await.unwrap();
    assert!(!list.items.is_empty());
    for pod in list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let statuses = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default();
        let id = statuses
            .iter()
            .find_map(|c| c.container_id.clone())
            .unwrap_or_else(|| panic!("{name}: no running container"));
        let pid = id.trim_start_matches("kubesim://");
        let mut pids = vec![pid.to_string()];
        pids.extend(
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string),
        );
        assert!(pids.len() >= 2, "{name}: the sidecar runs no database");
        for pid in pids {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            for field in ["Uid:", "Gid:"] {
                let ids: Vec<&str> = status
                    .lines()
                    .find(|l| l.starts_with(field))
                    .unwrap()
                    .split_whitespace()
                    .skip(1)
                    .collect();
                assert_eq!(ids, ["999"; 4], "{name} pid {pid} {field}");
            }
        }
    }
}

/// The thesis's Cluster (manifests/examples/gke-local-ssd.yaml), with
/// smaller disks.
pub(crate) fn thesis_cluster() -> Cluster {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/examples/gke-local-ssd.yaml"
    ))
    .unwrap();
    let doc = text
        .split("\n---\n")
        .find(|doc| doc.contains("kind: Cluster"))
        .expect("a Cluster in the manifest");
    serde_norway::from_str(doc).unwrap()
}

/// The thesis's Cluster with 1Gi claims.
pub(crate) fn small_thesis_cluster() -> Cluster {
    let mut cluster = thesis_cluster();
    for rack in &mut cluster.spec.datacenter.racks {
        for template in &mut rack.storage.volume_claim_templates {
            if let Some(requests) = template
                .spec
                .as_mut()
                .and_then(|s| s.resources.as_mut())
                .and_then(|r| r.requests.as_mut())
            {
                requests.insert(
                    "storage".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                );
            }
        }
    }
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thesis_scenario_in_the_test_world() {
    let _one = FAKE_WORLDS.lock().await;
    let scenario = setup()
        .zones(&["europe-west1-b", "europe-west1-c"])
        .namespace("cassandra")
        .start()
        .await;
    let cluster = small_thesis_cluster();
    scenario.create(cluster.clone()).await;
    scenario.until_ready("cassandra", 3, secs(180)).await;
    assert_members_run_as_the_database_user(&scenario.client(), "cassandra").await;
    scenario.ring().assert_intact(3);

    // data, then the second rack
    scenario.ring().write(
        "thesis",
        Replication::network_topology([("europe-west1", 3)]),
        1000,
        Consistency::Quorum,
    );
    let mut second = cluster.spec.datacenter.racks[0].clone();
    second.name = "europe-west1-c".into();
    second.members = 2;
    if let Some(placement) = second.placement.as_mut() {
        placement.node_affinity = serde_json::from_value(json!({"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["europe-west1-c"]}
            ]}]}}))
        .unwrap();
    }
    let racks = vec![cluster.spec.datacenter.racks[0].clone(), second];
    scenario
        .patch_cluster(
            "cassandra",
            json!({"spec": {"datacenter": {"name": "europe-west1", "racks": racks}}}),
        )
        .await;
    scenario.until_ready("cassandra", 5, secs(180)).await;
    scenario.ring().assert_intact(5);
    let c = scenario.clusters().get("cassandra").await.unwrap();
    assert_eq!(c.status.unwrap().racks["europe-west1-c"].ready_members, 2);
}

/// A 3-member Cassandra 3.11 cluster (no replication-factor check on
/// decommission) brought up by the controller, which is then stopped so
/// that only the sidecars act.
async fn three_members(ring: testworld::ring::Options) -> Scenario {
    let mut scenario = setup().ring(ring).start().await;
    scenario
        .create(cluster("c").version("3.11.6").rack("r", 3))
        .await;
    scenario.until_ready("c", 3, secs(180)).await;
    scenario.stop_controller();
    scenario
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_when_its_service_is_labelled() {
    let _one = FAKE_WORLDS.lock().await;
    let scenario = three_members(fast_ring()).await;

    // the intent, by hand, as a person would with kubectl label
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&scenario.world.kubeconfig)
        .args([
            "label",
            "service",
            "-n",
            "db",
            "c-dc-r-2",
            "cassandra.rook.io/decommissioned=false",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    scenario
        .until_label("c-dc-r-2", contract::DECOMMISSIONED, "true", secs(120))
        .await;
    scenario.ring().assert_intact(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_survives_the_sidecar_being_killed_midway() {
    let _one = FAKE_WORLDS.lock().await;
    let mut ring = fast_ring();
    // long enough to kill the member while it streams
    ring.timing.decommission_ms = 4000;
    let scenario = three_members(ring).await;
    scenario
        .ring()
        .write("ks", Replication::simple(2), 300, Consistency::All);
    scenario
        .patch_service(
            "c-dc-r-2",
            json!({"metadata": {"labels": {contract::DECOMMISSIONED: "false"}}}),
        )
        .await;

    // Once the member is leaving (streaming), kill its container's init
    // (the sidecar): the kubelet restarts the container.
    scenario
        .until("the member to start leaving", secs(60), || async {
            scenario.ring().count(NodeStatus::UL) == 1
        })
        .await;
    let victim = scenario.ring().rows();
    scenario.kill_container("c-dc-r-2").await;
    assert!(
        victim.iter().any(|(_, s)| *s == NodeStatus::UL),
        "the victim was leaving when killed: {victim:?}"
    );

    scenario
        .until_label("c-dc-r-2", contract::DECOMMISSIONED, "true", secs(120))
        .await;
    let restarts = scenario
        .pod("c-dc-r-2")
        .await
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .restart_count;
    assert!(restarts >= 1, "the container was not restarted");
    scenario.ring().assert_intact(2);
}

/// An overrides ConfigMap that would make a new member skip its bootstrap
/// (`auto_bootstrap: false`) is refused by the controller as soon as it is
/// written: the rack's `OverridesRefused` condition and a Warning Event name
/// the key and the ConfigMap, the scale-up waits (no member starts with
/// it), the running member keeps running and no data is lost; removing the
/// key clears the condition and the scale-up proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_that_defeats_safety_never_reaches_a_member() {
    let _one = FAKE_WORLDS.lock().await;
    let scenario = setup().start().await;
    let configmaps: Api<ConfigMap> = scenario.api();
    configmaps
        .create(
            &PostParams::default(),
            &overrides("tuning", "concurrent_reads: 16\n"),
        )
        .await
        .unwrap();
    let tuned = |members: i32| {
        cluster("c")
            .version("4.1.5")
            .rack("r", members)
            .with_rack(json!({"configMapName": "tuning"}))
    };
    scenario.create(tuned(1)).await;
    scenario.until_ready("c", 1, secs(120)).await;
    scenario.ring().write(
        "k",
        Replication::network_topology([("dc", 1)]),
        100,
        Consistency::One,
    );

    // The user's change, then a scale-up that would start a member with it.
    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("tuning", "concurrent_reads: 16\nauto_bootstrap: false\n"),
        )
        .await
        .unwrap();
    scenario.patch_cluster("c", tuned(2).racks_patch()).await;
    let named = "ConfigMap \"tuning\": key cassandra.yaml sets auto_bootstrap, which the \
                 operator refuses: a member that does not bootstrap owns token ranges whose \
                 data it never streamed";
    scenario
        .until_overrides_refused("c", "r", named, secs(60))
        .await;
    // The controller changes nothing: no scale-up, no Pod for member 1, and
    // the running member keeps running, after reconciles that saw the
    // scale-up and the refused key.
    scenario.until_observed("c", secs(30)).await;
    let started = scenario.reconciles_started().await;
    scenario.until_reconciled(started, secs(60)).await;
    let replicas = scenario
        .api::<StatefulSet>()
        .get("c-dc-r")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(replicas, Some(1), "the refused rack was scaled up");
    assert!(
        scenario
            .api::<Pod>()
            .get_opt("c-dc-r-1")
            .await
            .unwrap()
            .is_none()
    );
    scenario.ring().assert_intact(1);
    assert_eq!(
        scenario.ring().rows().len(),
        1,
        "{}",
        scenario.ring().text()
    );
    let status = scenario.clusters().get("c").await.unwrap().status.unwrap();
    assert_eq!(status.ready_members, 1);

    // Fixing the ConfigMap clears the condition, and the scale-up proceeds
    // with a member that bootstraps.
    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("tuning", "concurrent_reads: 16\n"),
        )
        .await
        .unwrap();
    scenario.until_ready("c", 2, secs(120)).await;
    let cluster = scenario.clusters().get("c").await.unwrap();
    let rack = &cluster.status.unwrap().racks["r"];
    assert!(
        rack.conditions
            .iter()
            .all(|c| c.type_ != crds::v1alpha1::RACK_CONDITION_OVERRIDES_REFUSED),
        "{rack:?}"
    );
    scenario.ring().assert_intact(2);
}
