//! The whole operator in the test world: kubesim with its StatefulSet
//! controller, scheduler, local disks and kubelet; the real binary as
//! controller (a host process) and as the members' init container and
//! sidecar; fake Cassandra nodes sharing kubesim's ring. The thesis scenario
//! (section 5.2.1), then the sidecar's decommission by hand.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::harness::{self, World, WorldOptions, container_logs, fast_ring, tail};
use testworld::kubesim::KubeSim;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::ONE_WORLD;

/// The test world with `zones` of 3 Nodes each, the CRD and namespace
/// installed, the real binary as the controller (log in the work dir).
pub(crate) async fn world(
    zones: &[&str],
    work: &Path,
    ring: testworld::ring::Options,
    namespace: &str,
) -> (World, harness::Process, PathBuf) {
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let mut opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), zones);
    opts.ring = ring;
    let world = World::start(opts, work).await.unwrap();
    world.install(namespace).await.unwrap();
    let log = work.join("controller.log");
    let controller = world.start_controller(&log, None).unwrap();
    (world, controller, log)
}

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

pub(crate) async fn wait_ready(
    clusters: &Api<Cluster>,
    name: &str,
    members: i32,
    timeout: Duration,
    log: &Path,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let c = clusters.get(name).await.unwrap();
        let status = c.status.clone().unwrap_or_default();
        if status.members == members && status.ready_members == members {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {}/{} ready, wanted {members}; status {:?}\ncontroller log tail:\n{}\ncontainers:\n{}",
            status.ready_members,
            status.members,
            status.conditions,
            tail(log),
            container_logs(log.parent().unwrap_or(log))
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ring as a test reads it: UN nodes, `nodetool status`, the data check.
pub(crate) fn ring_summary(sim: &KubeSim) -> (usize, String, testworld::ring::CheckReport) {
    sim.ring().with(|ring| {
        let status = ring.status(None).unwrap();
        let up = status
            .rows
            .iter()
            .filter(|r| r.status == NodeStatus::UN)
            .count();
        (up, status.to_string(), ring.check())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thesis_scenario_in_the_test_world() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(
        &["europe-west1-b", "europe-west1-c"],
        work.path(),
        fast_ring(),
        "cassandra",
    )
    .await;
    let (sim, client) = (&world.sim, world.client.clone());

    let mut cluster = thesis_cluster();
    for rack in &mut cluster.spec.datacenter.racks {
        for template in &mut rack.storage.volume_claim_templates {
            let requests = template
                .spec
                .as_mut()
                .unwrap()
                .resources
                .as_mut()
                .unwrap()
                .requests
                .as_mut()
                .unwrap();
            requests.insert(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
            );
        }
    }
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "cassandra");
    crate::common::create_cluster(&clusters, &cluster).await;

    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), &log).await;
    assert_members_run_as_the_database_user(&client, "cassandra").await;
    let (up, clean) = sim.ring().with(|ring| {
        let status = ring.status(None).unwrap();
        let up = status
            .rows
            .iter()
            .filter(|r| r.status == NodeStatus::UN)
            .count();
        (up, ring.check().is_clean())
    });
    assert_eq!(
        (up, clean),
        (3, true),
        "{}",
        sim.ring().with(|r| r.status(None).unwrap().to_string())
    );

    // data, then the second rack
    sim.ring().with(|ring| {
        ring.create_keyspace(
            "thesis",
            Replication::network_topology([("europe-west1", 3)]),
        )
        .unwrap();
        ring.write_keys("thesis", "key", 1000, Consistency::Quorum)
            .unwrap();
    });
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
    let patch = json!({"spec": {"datacenter": {"name": "europe-west1", "racks": racks}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_ready(&clusters, "cassandra", 5, Duration::from_secs(180), &log).await;

    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 5, "{status}");
    assert!(
        report.is_clean(),
        "data lost or under-replicated:\n{report}\n{status}"
    );
    let c = clusters.get("cassandra").await.unwrap().status.unwrap();
    assert_eq!(c.racks["europe-west1-c"].ready_members, 2);
}

/// A world with a 3-member Cassandra 3.11 cluster (no replication-factor
/// check on decommission) brought up by the controller, which is then
/// stopped so that only the sidecars act.
async fn three_members(ring: testworld::ring::Options) -> (tempfile::TempDir, World) {
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), ring, "db").await;
    let client = world.client.clone();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "3.11.6", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "c", 3, Duration::from_secs(180), &log).await;
    drop(controller);
    (work, world)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_decommissions_when_its_service_is_labelled() {
    let _one = ONE_WORLD.lock().await;
    let (_work, world) = three_members(fast_ring()).await;
    let (sim, client, kubeconfig) = (&world.sim, world.client.clone(), &world.kubeconfig);

    // the intent, by hand, as a person would with kubectl label
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
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

    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let labels = services
            .get("c-dc-r-2")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if labels
            .get(crds::contract::DECOMMISSIONED)
            .map(String::as_str)
            == Some("true")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the decommission was not confirmed: {labels:?}\n{}",
            sim.ring().with(|r| r.status(None).unwrap().to_string())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 2, "{status}");
    assert!(report.is_clean(), "the decommission lost data:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_survives_the_sidecar_being_killed_midway() {
    let _one = ONE_WORLD.lock().await;
    let mut ring = fast_ring();
    // long enough to kill the member while it streams
    ring.timing.decommission_ms = 4000;
    let (work, world) = three_members(ring).await;
    let (sim, client) = (&world.sim, world.client.clone());
    sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::simple(2)).unwrap();
        ring.write_keys("ks", "k", 300, Consistency::All).unwrap();
    });

    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let label = json!({"metadata": {"labels": {crds::contract::DECOMMISSIONED: "false"}}});
    services
        .patch("c-dc-r-2", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();

    // wait until the member is leaving (streaming), then kill its container's
    // init (the sidecar): the kubelet restarts the container
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leaving = sim.ring().with(|ring| {
            ring.status(None)
                .unwrap()
                .rows
                .iter()
                .any(|r| r.status == NodeStatus::UL)
        });
        if leaving {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member never started leaving"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "db");
    let pod = pods.get("c-dc-r-2").await.unwrap();
    let status = pod.status.unwrap().container_statuses.unwrap();
    let id = status[0].container_id.clone().unwrap();
    let pid: i32 = id.strip_prefix("kubesim://").unwrap().parse().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let labels = services
            .get("c-dc-r-2")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if labels
            .get(crds::contract::DECOMMISSIONED)
            .map(String::as_str)
            == Some("true")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the decommission was not confirmed after the crash: {labels:?}\n{}\n{}",
            sim.ring().with(|r| r.status(None).unwrap().to_string()),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let restarts = pods
        .get("c-dc-r-2")
        .await
        .unwrap()
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .restart_count;
    assert!(restarts >= 1, "the container was not restarted");
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 2, "{status}");
    assert!(
        report.is_clean(),
        "the interrupted decommission lost data:\n{report}\n{status}"
    );
}

/// An overrides ConfigMap that would make a new member skip its bootstrap
/// (`auto_bootstrap: false`) is refused by the controller as soon as it is
/// written: the rack's `OverridesRefused` condition and a Warning Event name
/// the key and the ConfigMap, the scale-up waits (no member starts with
/// it), the running member keeps running and no data is lost; removing the
/// key clears the condition and the scale-up proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_that_defeats_safety_never_reaches_a_member() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let (sim, client) = (&world.sim, world.client.clone());
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "db");
    let overrides = |text: &str| {
        serde_json::from_value::<k8s_openapi::api::core::v1::ConfigMap>(json!({
            "metadata": {"name": "tuning", "namespace": "db"},
            "data": {"cassandra.yaml": text}
        }))
        .unwrap()
    };
    configmaps
        .create(&PostParams::default(), &overrides("concurrent_reads: 16\n"))
        .await
        .unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "4.1.5", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 1,
            "configMapName": "tuning",
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "c", 1, Duration::from_secs(120), &log).await;
    sim.ring().with(|ring| {
        ring.create_keyspace("k", Replication::network_topology([("dc", 1)]))
            .unwrap();
        ring.write_keys("k", "key", 100, Consistency::One).unwrap();
    });

    // The user's change, then a scale-up that would start a member with it.
    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("concurrent_reads: 16\nauto_bootstrap: false\n"),
        )
        .await
        .unwrap();
    clusters
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"datacenter": {"name": "dc", "racks": [
                {"name": "r", "members": 2, "configMapName": "tuning",
                 "storage": cluster.spec.datacenter.racks[0].storage,
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}})),
        )
        .await
        .unwrap();
    let named = "ConfigMap \"tuning\": key cassandra.yaml sets auto_bootstrap, which the \
                 operator refuses: a member that does not bootstrap owns token ranges whose \
                 data it never streamed";
    let rack_condition = |c: &Cluster| {
        c.status
            .as_ref()
            .and_then(|s| s.racks.get("r"))
            .and_then(|r| {
                r.conditions
                    .iter()
                    .find(|c| c.type_ == crds::v1alpha1::RACK_CONDITION_OVERRIDES_REFUSED)
            })
            .and_then(|c| c.message.clone())
    };
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "db");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let condition = rack_condition(&clusters.get("c").await.unwrap());
        let warned = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("OverridesRefused")
                    && e.note.as_deref().is_some_and(|n| n.contains(named))
            });
        if condition.as_deref().is_some_and(|m| m.contains(named)) && warned {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no OverridesRefused condition and Warning Event (condition: {condition:?}, \
             warned: {warned})\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The controller changes nothing: no scale-up, no Pod for member 1, and
    // the running member keeps running. A few resyncs' worth of time for a
    // wrong scale-up to show.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    let statefulsets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), "db");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let replicas = statefulsets
        .get("c-dc-r")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(replicas, Some(1), "the refused rack was scaled up");
    assert!(pods.get_opt("c-dc-r-1").await.unwrap().is_none());
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 1, "{status}");
    assert_eq!(
        sim.ring().with(|r| r.status(None).unwrap().rows.len()),
        1,
        "{status}"
    );
    assert!(report.is_clean(), "{report}\n{status}");
    let status = clusters.get("c").await.unwrap().status.unwrap();
    assert_eq!(status.ready_members, 1);

    // Fixing the ConfigMap clears the condition, and the scale-up proceeds
    // with a member that bootstraps.
    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("concurrent_reads: 16\n"),
        )
        .await
        .unwrap();
    wait_ready(&clusters, "c", 2, Duration::from_secs(120), &log).await;
    assert_eq!(rack_condition(&clusters.get("c").await.unwrap()), None);
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 2, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");
}
