//! Scylla mode end to end (issue 18), with the real binary as the
//! controller and as every member's sidecar, and the test world's fake
//! ScyllaDB node (`scylla` in `scylladb/scylla` images, its REST API on the
//! Pod's loopback): the thesis scenario (scale up to 3, add a rack, scale
//! down, a Node lost and its member replaced by host ID, every member Pod
//! deleted at once) with a clean data check, and `cassandra-operator
//! nodetool status` against the fake's REST API, run in a member's network
//! namespace as `kubectl exec` would.

use std::path::Path;
use std::process::Command;

use crds::v1alpha1::ClusterMode;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, Patch, PatchParams};
use testworld::harness::{World, fast_ring};

use crate::common::ONE_WORLD;
use crate::lifecycle::{
    NS, STS_B, cluster_ips, delete_every_member_pod_at_once, lose_the_node_of_b0,
    scale_rack_b_down_to_one, thesis_five,
};
use crate::roll::RollWatch;
use crate::world::{ring_summary, wait_ready, world};

/// The ScyllaDB release of manifests/examples/scylla.
const SCYLLA_VERSION: &str = "6.2.3";

/// `cassandra-operator nodetool <args>` in the network namespace of a
/// member's sidecar (the container's PID 1): its stdout, or the failure.
async fn nodetool_in(world: &World, member: &str, args: &[&str]) -> String {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    let pod = pods.get(member).await.unwrap();
    let pid = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .find_map(|c| c.container_id.clone())
        .and_then(|id| id.strip_prefix("kubesim://").map(str::to_string))
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

/// `nodetool status` through the member's REST API lists every member
/// Service's address as UN, with its rack: once its own gossip has marked
/// the others UP, which a node that just (re)started does after a moment,
/// so the status is read again until then, as an operator would.
async fn status_lists_every_member(world: &World, member: &str, expected: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = nodetool_in(world, member, &["--mode", "scylla", "status"]).await;
        let up = text.lines().filter(|l| l.starts_with("UN ")).count();
        if up >= expected || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let ips = cluster_ips(&world.client).await;
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("UN ")).collect();
    assert_eq!(rows.len(), expected, "{text}");
    for (name, ip) in ips {
        let Some(rack) = services
            .get(&name)
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default()
            .get(crds::labels::RACK)
            .cloned()
        else {
            continue;
        };
        assert!(
            rows.iter()
                .any(|r| r.split_whitespace().nth(1) == Some(ip.as_str()) && r.ends_with(&rack)),
            "{name} ({ip}, rack {rack}) is not UN in:\n{text}"
        );
    }
    assert!(text.starts_with("Datacenter: europe-west1\n"), "{text}");
}

/// Whether any container of the world logged `needle` (every log file,
/// whole).
fn logs_contain(work: &Path, needle: &str) -> bool {
    let files = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    files(&work.join("pods")).iter().any(|pod| {
        files(&pod.join("logs")).iter().any(|container| {
            files(container)
                .iter()
                .any(|log| std::fs::read_to_string(log).is_ok_and(|text| text.contains(needle)))
        })
    })
}

/// Pod Security "baseline" for the members' namespace, as
/// manifests/examples/scylla labels its own: ScyllaDB's image has no USER
/// and its scylla account's uid is not pinned, so members run as root.
async fn baseline(world: &World) {
    let namespaces: Api<Namespace> = Api::all(world.client.clone());
    let patch = serde_json::json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "baseline"}}});
    namespaces
        .patch(NS, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thesis_scenario_in_scylla_mode() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(
        &["europe-west1-b", "europe-west1-c"],
        work.path(),
        fast_ring(),
        NS,
    )
    .await;
    let log: &Path = &log;
    baseline(&world).await;
    let clusters = thesis_five(&world, ClusterMode::Scylla, SCYLLA_VERSION, log).await;
    status_lists_every_member(&world, &format!("{STS_B}-0"), 5).await;
    let b0 = format!("{STS_B}-0");
    let info = nodetool_in(&world, &b0, &["--mode", "scylla", "info"]).await;
    for line in [
        "Operation Mode         : NORMAL",
        "Data Center            : europe-west1",
        "Rack                   : europe-west1-b",
        "Cluster Name           : cassandra",
    ] {
        assert!(info.contains(line), "{line:?} not in:\n{info}");
    }
    let mode = nodetool_in(&world, &b0, &["--mode", "scylla", "operation-mode"]).await;
    assert_eq!(mode, "NORMAL\n");
    let version = nodetool_in(&world, &b0, &["--mode", "scylla", "version"]).await;
    assert_eq!(
        version, "ReleaseVersion: 3.0.8\n",
        "the Cassandra version ScyllaDB speaks"
    );
    // Each member recorded its host ID on its member Service: what a
    // replacement replaces by.
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    let b0 = services.get(&format!("{STS_B}-0")).await.unwrap();
    let host_id = b0
        .metadata
        .annotations
        .unwrap_or_default()
        .get(crds::contract::HOST_ID)
        .cloned()
        .expect("b-0 recorded its host id");
    scale_rack_b_down_to_one(&world, &clusters, log).await;
    lose_the_node_of_b0(&world, &clusters, log).await;
    // The replacement started with replace_node_first_boot: the lost node's
    // host ID, which only the member Service remembered.
    let ip = cluster_ips(&world.client).await[&format!("{STS_B}-0")].clone();
    let wanted = format!("Replacing node {host_id} at {ip}");
    assert!(
        logs_contain(work.path(), &wanted),
        "no member logged {wanted:?}"
    );
    // The member Service records the host ID the replacement runs under
    // (ScyllaDB 5.2+ gives a replacing node a new one, scylladb#12250): a
    // later replace of this member needs that one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let in_ring = world.sim.ring().with(|r| {
            r.nodes()
                .find(|n| n.address == ip && n.is_up())
                .map(|n| n.host_id.clone())
        });
        let recorded = services
            .get(&format!("{STS_B}-0"))
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(crds::contract::HOST_ID)
            .cloned();
        if in_ring.is_some() && recorded == in_ring {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the member Service records {recorded:?}, the ring runs {in_ring:?} at {ip} (before the loss: {host_id})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    delete_every_member_pod_at_once(&world, &clusters, 3, log).await;
    status_lists_every_member(&world, &format!("{STS_B}-0"), 3).await;
    a_restart_request_rolls_each_member_once(&world, &clusters, work.path(), log).await;
}

/// The rolling workflow in scylla mode: `cassandra.rook.io/restartedAt`
/// on the Cluster rolls each member once, one at a time (a watch on every
/// committed Pod change), each draining through ScyllaDB's REST API on its
/// way down; the ring ends all up with a clean data check.
async fn a_restart_request_rolls_each_member_once(
    world: &World,
    clusters: &Api<crds::Cluster>,
    work: &Path,
    log: &Path,
) {
    let members = vec![
        format!("{STS_B}-0"),
        "cassandra-europe-west1-europe-west1-c-0".to_string(),
        "cassandra-europe-west1-europe-west1-c-1".to_string(),
    ];
    let drained_before = count_in_logs(work, "drained");
    let watch = RollWatch::start(&world.sim, NS, &members);
    let patch = serde_json::json!({"metadata": {"annotations": {
        crds::labels::RESTARTED_AT: "2026-11-24T10:00:00Z"
    }}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let deleted = watch.deletions();
        let status = clusters
            .get("cassandra")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if members.iter().all(|m| deleted.get(m) == Some(&1)) && status.ready_members == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the roll did not restart every member once: {deleted:?}, {}/3 ready",
            status.ready_members
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    wait_ready(
        clusters,
        "cassandra",
        3,
        std::time::Duration::from_secs(60),
        log,
    )
    .await;
    watch.assert_one_at_a_time("a restart roll in scylla mode");
    assert_eq!(
        watch.deletions(),
        members.iter().map(|m| (m.clone(), 1)).collect(),
        "each member restarted exactly once"
    );
    let drained = count_in_logs(work, "drained");
    assert!(
        drained >= drained_before + members.len(),
        "every member drained on its way down: {drained_before} drained lines before, {drained} after; lines about draining:\n{}",
        lines_in_logs(work, "drain").join("\n")
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (up, status, report) = ring_summary(&world.sim);
        if up == 3 {
            assert!(report.is_clean(), "the roll lost data:\n{report}\n{status}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How many lines of every container log of the world contain `needle`.
fn count_in_logs(work: &Path, needle: &str) -> usize {
    lines_in_logs(work, needle).len()
}

/// The lines of every container log of the world that contain `needle`.
fn lines_in_logs(work: &Path, needle: &str) -> Vec<String> {
    let files = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    files(&work.join("pods"))
        .iter()
        .flat_map(|pod| files(&pod.join("logs")))
        .flat_map(|container| files(&container))
        .flat_map(|log| {
            std::fs::read_to_string(log)
                .map(|text| {
                    text.lines()
                        .filter(|l| l.contains(needle))
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// A one-member cluster in scylla mode, the controller stopped: member 0's
/// Service is labelled for a decommission by hand; ScyllaDB refuses it over
/// its REST API (an HTTP 500 with its reason: the last node of the ring),
/// the sidecar reports that reason on the member Service, never confirms,
/// and the node stays in the ring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_scylla_refuses_is_reported_with_its_reason() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), fast_ring(), NS).await;
    baseline(&world).await;
    let cluster: crds::Cluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "cassandra", "namespace": NS},
        "spec": {"version": SCYLLA_VERSION, "mode": "scylla",
            "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 1,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<crds::Cluster> = Api::namespaced(world.client.clone(), NS);
    crate::common::create_cluster(&clusters, &cluster).await;
    crate::world::wait_ready(
        &clusters,
        "cassandra",
        1,
        std::time::Duration::from_secs(120),
        &log,
    )
    .await;
    // Only the sidecar acts from here: the intent is written by hand.
    drop(controller);
    let member = "cassandra-dc-r-0";
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    services
        .patch(
            member,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                crds::contract::DECOMMISSIONED: "false"}}})),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let service = loop {
        let service = services.get(member).await.unwrap();
        if service
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crds::contract::DECOMMISSION_REFUSED))
        {
            break service;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal reported\n{}",
            testworld::harness::container_logs(work.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let annotations = service.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations[crds::contract::DECOMMISSION_REFUSED],
        "std::runtime_error (Cannot decomission last node in the cluster)",
        "ScyllaDB's reason (6.x, Raft topology, its typo included), as its REST API gave it"
    );
    assert_eq!(
        service.metadata.labels.unwrap_or_default()[crds::contract::DECOMMISSIONED],
        "false",
        "never confirmed"
    );
    let (up, status, report) = crate::world::ring_summary(&world.sim);
    assert_eq!(up, 1, "the member stays, NORMAL: {status}");
    assert!(report.is_clean(), "{report}");
}

/// The host PID of a member's database container (its sidecar, PID 1).
async fn container_pid(world: &World, member: &str) -> i32 {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    pods.get(member)
        .await
        .unwrap()
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .find_map(|c| c.container_id.clone())
        .and_then(|id| id.strip_prefix("kubesim://").and_then(|p| p.parse().ok()))
        .unwrap_or_else(|| panic!("{member}: no running container"))
}

/// An annotation of a member Service, waited for.
async fn wait_annotation(world: &World, member: &str, key: &str, work: &Path) -> String {
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let annotations = services
            .get(member)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default();
        if let Some(value) = annotations.get(key) {
            return value.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{member}: no {key} annotation: {annotations:?}\n{}",
            testworld::harness::container_logs(work)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A member's disk is emptied while its Node (and its place in the ring)
/// survives, in scylla mode: ScyllaDB refuses to join at an address the
/// ring knows, the sidecar asks for a replace on its member Service, and,
/// given the `replace` label (by hand, as the controller would), starts
/// ScyllaDB with `replace_node_first_boot` set to the host ID the lost node
/// recorded there; it takes its place back and its data streams back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_member_is_replaced_by_its_recorded_host_id() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), fast_ring(), NS).await;
    baseline(&world).await;
    let cluster: crds::Cluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "cassandra", "namespace": NS},
        "spec": {"version": SCYLLA_VERSION, "mode": "scylla",
            "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<crds::Cluster> = Api::namespaced(world.client.clone(), NS);
    crate::common::create_cluster(&clusters, &cluster).await;
    crate::world::wait_ready(
        &clusters,
        "cassandra",
        3,
        std::time::Duration::from_secs(180),
        &log,
    )
    .await;
    // Only the sidecars act from here.
    drop(controller);
    world.sim.ring().with(|ring| {
        ring.create_keyspace("ks", testworld::ring::Replication::simple(3))
            .unwrap();
        ring.write_keys("ks", "key", 300, testworld::ring::Consistency::All)
            .unwrap();
    });
    let last = "cassandra-dc-r-2";
    let host_id = wait_annotation(&world, last, crds::contract::HOST_ID, work.path()).await;
    let pvc = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        world.client.clone(),
        NS,
    )
    .get(&format!("data-{last}"))
    .await
    .unwrap();
    let volume = work
        .path()
        .join("pvs")
        .join(pvc.spec.unwrap().volume_name.unwrap());
    // The disk emptied under the running member, which then dies.
    for entry in std::fs::read_dir(&volume).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let pid = container_pid(&world, last).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let request =
        wait_annotation(&world, last, crds::contract::REPLACE_REQUESTED, work.path()).await;
    assert!(
        request.contains("already exists, cancelling join"),
        "{request}"
    );
    // The controller's answer, by hand: the member's own ClusterIP.
    let ip = cluster_ips(&world.client).await[last].clone();
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    services
        .patch(
            last,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                crds::contract::REPLACE: ip}}})),
        )
        .await
        .unwrap();
    let wanted = format!("Replacing node {host_id} at {ip}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (up, _, report) = crate::world::ring_summary(&world.sim);
        let replaced = logs_contain(work.path(), &wanted);
        let fulfilled = !services
            .get(last)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(crds::contract::REPLACE_REQUESTED);
        if up == 3 && replaced && fulfilled && report.is_clean() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not replaced (up {up}, logged {wanted:?}: {replaced}, request withdrawn: {fulfilled}):\n{report}\n{}",
            testworld::harness::container_logs(work.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
