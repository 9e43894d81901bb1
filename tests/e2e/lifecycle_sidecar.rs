//! The sidecar's half of the lifecycle (issue 13), end to end with the real
//! binary in the test world: a full outage comes back (a bootstrapped member
//! seeds itself), a member killed in the middle of its bootstrap resumes it,
//! a decommission Cassandra refuses is reported and backed off, a stale
//! decommission marker on a reused volume is cleared, and a member whose
//! disk was emptied while the ring still knows it asks for a replace.
//!
//! The full outage runs on Cassandra 4.1 by default; `LIFECYCLE_VERSIONS`
//! (comma separated, e.g. `3.11.6,4.1.8,5.0.3`) runs it on others too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crds::Cluster;
use crds::contract;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use testworld::harness::{self, World, WorldOptions, container_logs, fast_ring, tail};
use testworld::kubesim::KubeSim;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::ONE_WORLD;

/// The world with `zones` of 3 Nodes each, the CRD in namespace `db`, and
/// the real binary as the controller.
async fn world(
    zones: &[&str],
    work: &Path,
    ring: testworld::ring::Options,
) -> (World, harness::Process, PathBuf) {
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let mut opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), zones);
    opts.ring = ring;
    let world = World::start(opts, work).await.unwrap();
    world.install("db").await.unwrap();
    let log = work.join("controller.log");
    let controller = world.start_controller(&log, None).unwrap();
    (world, controller, log)
}

/// A Cluster `c` in datacenter `dc` with one rack per `(zone, members)`.
fn cluster(version: &str, racks: &[(&str, i32)]) -> Cluster {
    let racks: Vec<Value> = racks
        .iter()
        .map(|(zone, members)| {
            json!({"name": zone, "members": members,
                "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "placement": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": version, "datacenter": {"name": "dc", "racks": racks}}
    }))
    .unwrap()
}

async fn create(world: &World, cluster: &Cluster) {
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    crate::common::create_cluster(&clusters, cluster).await;
}

/// Waits until the Cluster's status shows `members` members, all ready.
async fn wait_ready(world: &World, members: i32, timeout: Duration, work: &Path) {
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    let deadline = Instant::now() + timeout;
    loop {
        let status = clusters.get("c").await.unwrap().status.unwrap_or_default();
        if status.members == members && status.ready_members == members {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}/{} ready, wanted {members}; {:?}\nring:\n{}\ncontroller:\n{}\ncontainers:\n{}",
            status.ready_members,
            status.members,
            status.conditions,
            ring_status(&world.sim),
            tail(&work.join("controller.log")),
            container_logs(work)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every Pod named is Ready (the controller may be stopped).
async fn wait_pods_ready(world: &World, names: &[String], timeout: Duration, work: &Path) {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "db");
    let deadline = Instant::now() + timeout;
    loop {
        let mut ready = 0;
        for name in names {
            if let Ok(pod) = pods.get(name).await
                && pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                ready += 1;
            }
        }
        if ready == names.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ready}/{} pods ready\nring:\n{}\ncontainers:\n{}",
            names.len(),
            ring_status(&world.sim),
            container_logs(work)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ring_status(sim: &KubeSim) -> String {
    sim.ring()
        .with(|r| r.status(None).map(|s| s.to_string()).unwrap_or_default())
}

fn up_nodes(sim: &KubeSim) -> usize {
    sim.ring().with(|ring| {
        ring.status(None)
            .map(|s| s.rows.iter().filter(|r| r.status == NodeStatus::UN).count())
            .unwrap_or(0)
    })
}

fn assert_ring(sim: &KubeSim, up: usize, what: &str) {
    let (n, report) = sim.ring().with(|ring| {
        let n = ring
            .status(None)
            .unwrap()
            .rows
            .iter()
            .filter(|r| r.status == NodeStatus::UN)
            .count();
        (n, ring.check())
    });
    assert_eq!(n, up, "{what}: UN nodes\n{}", ring_status(sim));
    assert!(
        report.is_clean(),
        "{what}: data lost or under-replicated:\n{report}\n{}",
        ring_status(sim)
    );
}

/// Everything a member's containers logged, every restart included.
fn pod_logs(work: &Path, pod: &str) -> String {
    fn walk(dir: &Path, out: &mut String) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    // One directory per Pod incarnation: `<namespace>_<pod>_<uid>`.
    let prefix = format!("db_{pod}_");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(work.join("pods"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path().join("logs"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    let mut out = String::new();
    for dir in dirs {
        walk(&dir, &mut out);
    }
    out
}

/// A log without its terminal colours.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits until `path` is a file (a marker the sidecar writes).
async fn wait_file(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !path.is_file() {
        assert!(Instant::now() < deadline, "{what}: no {}", path.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The host PID of a Pod's first container (`kubesim://<pid>`).
async fn container_pid(world: &World, pod: &str) -> i32 {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "db");
    let id = pods
        .get(pod)
        .await
        .unwrap()
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    id.strip_prefix("kubesim://").unwrap().parse().unwrap()
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

async fn service(world: &World, name: &str) -> Service {
    Api::<Service>::namespaced(world.client.clone(), "db")
        .get(name)
        .await
        .unwrap()
}

fn annotation(service: &Service, key: &str) -> Option<String> {
    service.metadata.annotations.as_ref()?.get(key).cloned()
}

fn label(service: &Service, key: &str) -> Option<String> {
    service.metadata.labels.as_ref()?.get(key).cloned()
}

async fn patch_service(world: &World, name: &str, patch: Value) {
    Api::<Service>::namespaced(world.client.clone(), "db")
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The host directory of a member's data volume.
async fn data_volume(world: &World, work: &Path, pod: &str) -> PathBuf {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(world.client.clone(), "db")
        .get(&format!("data-{pod}"))
        .await
        .unwrap();
    let pv = pvc.spec.unwrap().volume_name.unwrap();
    work.join("pvs").join(pv)
}

/// The versions the full outage runs on.
fn outage_versions() -> Vec<String> {
    match std::env::var("LIFECYCLE_VERSIONS") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => vec!["4.1.8".to_string()],
    }
}

/// A converged multi-rack cluster (rack b 3, rack c 2, 1000 keys at RF 3)
/// loses every member Pod at once: all come back Ready, the ring has its 5
/// nodes UN again and the data check is clean. Before a bootstrapped member
/// could seed itself, member 0 restarted with a seed list without itself,
/// `OrderedReady` held member 1 back, and member 0 failed its shadow round
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outage_comes_back() {
    let _one = ONE_WORLD.lock().await;
    for version in outage_versions() {
        let started = Instant::now();
        let work = tempfile::tempdir().unwrap();
        let (world, _controller, _log) = world(&["b", "c"], work.path(), fast_ring()).await;
        create(&world, &cluster(&version, &[("b", 3), ("c", 2)])).await;
        wait_ready(&world, 5, Duration::from_secs(240), work.path()).await;
        world.sim.ring().with(|ring| {
            ring.create_keyspace("ks", Replication::network_topology([("dc", 3)]))
                .unwrap();
            ring.write_keys("ks", "key", 1000, Consistency::Quorum)
                .unwrap();
        });
        assert_ring(&world.sim, 5, &format!("{version}: converged"));

        let names: Vec<String> = ["c-dc-b-0", "c-dc-b-1", "c-dc-b-2", "c-dc-c-0", "c-dc-c-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let pods: Api<Pod> = Api::namespaced(world.client.clone(), "db");
        let mut uids = Vec::new();
        for name in &names {
            let pod = pods.get(name).await.unwrap();
            uids.push(pod.metadata.uid.unwrap());
            // Every bootstrapped member recorded it on its volume.
            let marker =
                contract::bootstrapped_marker(&data_volume(&world, work.path(), name).await);
            wait_file(&marker, &format!("{version}: {name}")).await;
        }
        for name in &names {
            pods.delete(name, &DeleteParams::default()).await.unwrap();
        }
        // Every Pod is gone or replaced before any is ready again.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut replaced = 0;
            for (name, uid) in names.iter().zip(&uids) {
                if pods
                    .get(name)
                    .await
                    .ok()
                    .and_then(|p| p.metadata.uid)
                    .as_ref()
                    != Some(uid)
                {
                    replaced += 1;
                }
            }
            if replaced == names.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{version}: the Pods were not deleted"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wait_pods_ready(&world, &names, Duration::from_secs(240), work.path()).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while up_nodes(&world.sim) < 5 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_ring(&world.sim, 5, &format!("{version}: after the full outage"));
        // Member 0 came back listing itself: it can start when no other
        // member is up.
        let ip = service(&world, "c-dc-b-0")
            .await
            .spec
            .unwrap()
            .cluster_ip
            .unwrap();
        let logs = strip_ansi(&pod_logs(work.path(), "c-dc-b-0"));
        let seeded_itself = logs.lines().any(|l| {
            l.contains("configuration rendered")
                && l.contains("bootstrapped=true")
                && l.split("seeds=").nth(1).is_some_and(|seeds| {
                    seeds
                        .split(']')
                        .next()
                        .is_some_and(|seeds| seeds.contains(&format!("\"{ip}\"")))
                })
        });
        assert!(
            seeded_itself,
            "{version}: member 0 did not seed itself after the outage:\n{}",
            logs.lines()
                .filter(|l| l.contains("configuration rendered"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!("{version}: full outage in {:?}", started.elapsed());
    }
}

/// A member (a seed by its ordinal) SIGKILLed in the middle of its
/// bootstrap resumes the bootstrap when it comes back: it streams its
/// ranges' data instead of starting as its own seed with half of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_in_its_bootstrap_resumes_it() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let mut ring = fast_ring();
    // long enough to kill member 1 while it streams
    ring.timing.bootstrap_ms = 4000;
    let (world, _controller, _log) = world(&["b"], work.path(), ring).await;
    create(&world, &cluster("4.1.8", &[("b", 3)])).await;

    // Data as soon as member 0 is up, so that the others must stream it.
    let deadline = Instant::now() + Duration::from_secs(120);
    while up_nodes(&world.sim) < 1 {
        assert!(Instant::now() < deadline, "member 0 never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    world.sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::simple(3)).unwrap();
        ring.write_keys("ks", "key", 500, Consistency::One).unwrap();
    });

    // Member 1 joining: kill its container (the sidecar and Cassandra).
    let joining = || {
        world.sim.ring().with(|ring| {
            ring.status(None)
                .map(|s| s.rows.iter().any(|r| r.status == NodeStatus::UJ))
                .unwrap_or(false)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !joining() {
        assert!(
            Instant::now() < deadline,
            "member 1 never started its bootstrap\n{}",
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let volume = data_volume(&world, work.path(), "c-dc-b-1").await;
    assert!(
        !contract::bootstrapped_marker(&volume).exists(),
        "the bootstrap was recorded before it completed"
    );
    sigkill(container_pid(&world, "c-dc-b-1").await);

    wait_ready(&world, 3, Duration::from_secs(240), work.path()).await;
    assert_ring(&world.sim, 3, "after the interrupted bootstrap");
    let logs = pod_logs(work.path(), "c-dc-b-1");
    assert!(
        logs.contains("Detected previous bootstrap failure; retrying"),
        "member 1 did not resume its bootstrap:\n{}",
        &logs[logs.len().saturating_sub(4000)..]
    );
    assert!(
        !logs.contains("will not auto bootstrap because it is configured to be a seed node"),
        "member 1 skipped its bootstrap as a seed"
    );
    wait_file(&contract::bootstrapped_marker(&volume), "member 1").await;
}

/// A member's Pod name in a one-rack cluster of the tests below.
fn member(ordinal: usize) -> String {
    format!("c-dc-r-{ordinal}")
}

/// Three members of `version` in rack `r`, brought up by the controller,
/// which is then stopped so that only the sidecars act; `keys` keys at RF
/// `rf` (SimpleStrategy).
async fn three_members(version: &str, rf: usize, keys: usize, work: &Path) -> (World, Vec<String>) {
    let (world, controller, _log) = world(&["r"], work, fast_ring()).await;
    create(&world, &cluster(version, &[("r", 3)])).await;
    wait_ready(&world, 3, Duration::from_secs(180), work).await;
    drop(controller);
    world.sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::simple(rf)).unwrap();
        ring.write_keys("ks", "key", keys, Consistency::All)
            .unwrap();
    });
    (world, (0..3).map(member).collect())
}

/// 4.1 refuses a decommission that would leave fewer nodes than a
/// keyspace's replication factor. The sidecar reports it on the member
/// Service with Cassandra's reason, retries with a back-off (no tight loop),
/// and nothing leaves the ring; withdrawing the request clears the records
/// and the member keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_decommission_is_reported_and_withdrawn() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, names) = three_members("4.1.8", 3, 300, work.path()).await;
    let last = &names[2];
    patch_service(
        &world,
        last,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: "false"}}}),
    )
    .await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        let s = service(&world, last).await;
        if let Some(reason) = annotation(&s, contract::DECOMMISSION_REFUSED) {
            break reason;
        }
        assert!(
            Instant::now() < deadline,
            "no refusal reported: {:?}\n{}",
            s.metadata.annotations,
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        reason.contains("Not enough live nodes to maintain replication factor"),
        "{reason}"
    );
    // The call came after the claim, which stays: only the report lets the
    // controller withdraw.
    assert!(annotation(&service(&world, last).await, contract::DECOMMISSION_STARTED).is_some());
    // Backing off: over 12 s, at most the first refusal and two retries (5 s
    // then 10 s), where a 2 s loop would make six.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let refusals = pod_logs(work.path(), last)
        .matches("cassandra refused the decommission")
        .count();
    assert!(
        (1..=3).contains(&refusals),
        "{refusals} refusals in 12 s: no back-off"
    );
    assert_ring(&world.sim, 3, "after the refusal");

    // Withdrawn: the records go, the member serves on.
    patch_service(
        &world,
        last,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: null}}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = service(&world, last).await;
        let records = (
            annotation(&s, contract::DECOMMISSION_STARTED),
            annotation(&s, contract::DECOMMISSION_REFUSED),
        );
        if records == (None, None) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the records were not cleared: {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_pods_ready(&world, &names, Duration::from_secs(30), work.path()).await;
    assert_ring(&world.sim, 3, "after the withdrawal");
}

/// A member whose node left the ring (decommission confirmed) is wanted
/// again on the same volume (a later scale-up reusing the PVC, its member
/// Service without the decommission record): the sidecar clears the
/// volume and the member bootstraps as a new node instead of waiting
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_decommission_marker_is_cleared_for_a_member_wanted_again() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, names) = three_members("3.11.6", 2, 300, work.path()).await;
    let last = &names[2];
    patch_service(
        &world,
        last,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: "false"}}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while label(&service(&world, last).await, contract::DECOMMISSIONED).as_deref() != Some("true") {
        assert!(
            Instant::now() < deadline,
            "the decommission was not confirmed\n{}",
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ring(&world.sim, 2, "after the decommission");
    let volume = data_volume(&world, work.path(), last).await;
    assert!(contract::decommission_marker(&volume).is_file());

    // Wanted again: the record goes, the Pod is made again on the same PVC.
    patch_service(
        &world,
        last,
        json!({"metadata": {
            "labels": {contract::DECOMMISSIONED: null},
            "annotations": {contract::DECOMMISSION_STARTED: null}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "db");
    pods.delete(last, &DeleteParams::default()).await.unwrap();
    wait_pods_ready(&world, &names, Duration::from_secs(120), work.path()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while up_nodes(&world.sim) < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ring(&world.sim, 3, "after the member came back");
    assert!(!contract::decommission_marker(&volume).exists());
    wait_file(&contract::bootstrapped_marker(&volume), "the new member").await;
    assert!(
        pod_logs(work.path(), last).contains("clearing it to bootstrap as a new member"),
        "the volume was not cleared"
    );
}

/// A member's disk is emptied while its Node (and its place in the ring)
/// survives: Cassandra refuses to join at an address the ring knows. The
/// sidecar asks for a replace on its member Service; given the `replace`
/// label (by hand here, as the controller would), the member starts with
/// `replace_address_first_boot`, takes its old place and streams its data
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_member_asks_for_a_replace_and_replaces_itself() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, names) = three_members("4.1.8", 3, 300, work.path()).await;
    let last = &names[2];
    let volume = data_volume(&world, work.path(), last).await;
    // The member records its bootstrap once it is NORMAL, up to a second
    // after it turns Ready; emptying the disk before that would let the
    // record land on the emptied disk, a disk that never held data.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !contract::bootstrapped_marker(&volume).exists() {
        assert!(
            Instant::now() < deadline,
            "the member never recorded its bootstrap"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The disk emptied under the running member, which then dies.
    for entry in std::fs::read_dir(&volume).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    sigkill(container_pid(&world, last).await);

    let deadline = Instant::now() + Duration::from_secs(60);
    let request = loop {
        let s = service(&world, last).await;
        if let Some(request) = annotation(&s, contract::REPLACE_REQUESTED) {
            break request;
        }
        assert!(
            Instant::now() < deadline,
            "no replace requested: {:?}\n{}",
            s.metadata.annotations,
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        request.contains("already exists, cancelling join"),
        "{request}"
    );

    // The controller's answer, by hand: the member's own ClusterIP.
    let s = service(&world, last).await;
    let ip = s.spec.unwrap().cluster_ip.unwrap();
    patch_service(
        &world,
        last,
        json!({"metadata": {"labels": {contract::REPLACE: ip}}}),
    )
    .await;
    wait_pods_ready(&world, &names, Duration::from_secs(120), work.path()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while up_nodes(&world.sim) < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ring(&world.sim, 3, "after the replace");
    let logs = pod_logs(work.path(), last);
    assert!(
        logs.contains(&format!("-Dcassandra.replace_address_first_boot={ip}"))
            || logs.contains("Writes will not be forwarded to this node during replacement"),
        "the member did not start as a replacement"
    );
    // The request is fulfilled.
    let deadline = Instant::now() + Duration::from_secs(30);
    while annotation(&service(&world, last).await, contract::REPLACE_REQUESTED).is_some() {
        assert!(Instant::now() < deadline, "the replace request stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every descendant of a process (children first found through /proc).
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(child);
            todo.push(child);
        }
    }
    out
}

fn signal_all(pids: &[i32], signal: nix::sys::signal::Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), signal);
    }
}

/// A 3-member 3.11 cluster (RF 2) whose last member's decommission stream
/// fails: member 0, a new replica of its ranges, is frozen (its lease runs
/// out and the ring has it down when the stream to it is due). Returns the
/// frozen processes, still stopped, and the reported reason.
async fn failed_stream(work: &Path) -> (World, Vec<i32>, String) {
    let mut ring = fast_ring();
    // long enough for a new replica to be found down before the stream ends
    ring.timing.decommission_ms = 8000;
    let (world, controller, _log) = world(&["r"], work, ring).await;
    create(&world, &cluster("3.11.6", &[("r", 3)])).await;
    wait_ready(&world, 3, Duration::from_secs(180), work).await;
    drop(controller);
    world.sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::simple(2)).unwrap();
        ring.write_keys("ks", "key", 300, Consistency::All).unwrap();
    });
    let last = member(2);
    patch_service(
        &world,
        &last,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: "false"}}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leaving = world.sim.ring().with(|ring| {
            ring.status(None)
                .map(|s| s.rows.iter().any(|r| r.status == NodeStatus::UL))
                .unwrap_or(false)
        });
        if leaving {
            break;
        }
        assert!(Instant::now() < deadline, "member 2 never started leaving");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let frozen = descendants(container_pid(&world, &member(0)).await);
    assert!(!frozen.is_empty(), "member 0 runs no database");
    signal_all(&frozen, nix::sys::signal::Signal::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        if let Some(reason) = annotation(
            &service(&world, &last).await,
            contract::DECOMMISSION_REFUSED,
        ) {
            break reason;
        }
        assert!(
            Instant::now() < deadline,
            "the failed stream was not reported\n{}",
            container_logs(work)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reason.contains("Stream failed"), "{reason}");
    (world, frozen, reason)
}

/// On 3.11 (and 4.x) a decommission whose stream fails leaves the node
/// LEAVING and the call throws. The sidecar reports the failure with
/// Cassandra's reason, backs off, claims again and retries from LEAVING
/// (which Cassandra allows); once the failed target is back, the
/// decommission completes and the data check is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_is_reported_and_the_decommission_retried() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, frozen, _reason) = failed_stream(work.path()).await;
    let last = member(2);
    signal_all(&frozen, nix::sys::signal::Signal::SIGCONT);

    // Member 0 comes back; the retry completes the decommission.
    let deadline = Instant::now() + Duration::from_secs(120);
    while label(&service(&world, &last).await, contract::DECOMMISSIONED).as_deref() != Some("true")
    {
        assert!(
            Instant::now() < deadline,
            "the retried decommission was not confirmed\n{}\n{}",
            ring_status(&world.sim),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while up_nodes(&world.sim) < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ring(&world.sim, 2, "after the retried decommission");
    let s = service(&world, &last).await;
    assert_eq!(
        annotation(&s, contract::DECOMMISSION_REFUSED),
        None,
        "the retry's claim clears the report"
    );
}

/// The same failed stream, and the request withdrawn while the node is
/// stuck LEAVING: the sidecar restarts the database (how Cassandra gets
/// back to NORMAL), clears its records, and the member serves again in a
/// ring of 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_failed_decommission_restarts_the_node_back_to_normal() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, frozen, _reason) = failed_stream(work.path()).await;
    let last = member(2);
    // Withdrawn at once, within the back-off: no retry has started.
    patch_service(
        &world,
        &last,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: null}}}),
    )
    .await;
    signal_all(&frozen, nix::sys::signal::Signal::SIGCONT);

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = service(&world, &last).await;
        let records = (
            annotation(&s, contract::DECOMMISSION_STARTED),
            annotation(&s, contract::DECOMMISSION_REFUSED),
        );
        if records == (None, None) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the records were not cleared: {records:?}\n{}",
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<String> = (0..3).map(member).collect();
    wait_pods_ready(&world, &names, Duration::from_secs(120), work.path()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while up_nodes(&world.sim) < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ring(&world.sim, 3, "after the withdrawal");
    assert!(
        pod_logs(work.path(), &last).contains("restarting the database"),
        "the stuck node was not restarted"
    );
}

/// How many runs the crash test makes (`LIFECYCLE_CRASH_RUNS`, default 1).
fn crash_runs() -> u32 {
    std::env::var("LIFECYCLE_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A pseudo-random delay below `max_ms` (from the clock: each run differs,
/// and the delay is printed so that a failing run can be told apart).
fn random_ms(max_ms: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos() as u64;
    // xorshift over the nanoseconds
    let mut x = nanos ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x % max_ms
}

/// The leaving member's container (sidecar and Cassandra) SIGKILLed twice
/// at random moments of its decommission (before the claim, during the
/// ring delay, while streaming, after DECOMMISSIONED): every run ends with
/// the decommission confirmed, 2 UN nodes and a clean data check.
/// `LIFECYCLE_CRASH_RUNS=20` makes 20 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_member_killed_at_random_moments_still_decommissions_safely() {
    let _one = ONE_WORLD.lock().await;
    for run in 0..crash_runs() {
        let work = tempfile::tempdir().unwrap();
        let mut ring = fast_ring();
        ring.timing.decommission_ms = 1500;
        let (world, controller, _log) = world(&["r"], work.path(), ring).await;
        create(&world, &cluster("3.11.6", &[("r", 3)])).await;
        wait_ready(&world, 3, Duration::from_secs(180), work.path()).await;
        drop(controller);
        world.sim.ring().with(|ring| {
            ring.create_keyspace("ks", Replication::simple(2)).unwrap();
            ring.write_keys("ks", "key", 300, Consistency::All).unwrap();
        });
        let last = member(2);
        patch_service(
            &world,
            &last,
            json!({"metadata": {"labels": {contract::DECOMMISSIONED: "false"}}}),
        )
        .await;
        let kills = [random_ms(2500), random_ms(4000)];
        for delay in kills {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            // The container may be between restarts: no PID to kill then.
            let pods: Api<Pod> = Api::namespaced(world.client.clone(), "db");
            let pid = pods
                .get(&last)
                .await
                .ok()
                .and_then(|p| p.status?.container_statuses?.first()?.container_id.clone())
                .and_then(|id| id.strip_prefix("kubesim://")?.parse::<i32>().ok());
            if let Some(pid) = pid {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while label(&service(&world, &last).await, contract::DECOMMISSIONED).as_deref()
            != Some("true")
        {
            assert!(
                Instant::now() < deadline,
                "run {run} (kills after {kills:?} ms): the decommission was not confirmed\n{}\n{}",
                ring_status(&world.sim),
                container_logs(work.path())
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while up_nodes(&world.sim) != 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_ring(
            &world.sim,
            2,
            &format!("run {run} (kills after {kills:?} ms)"),
        );
        eprintln!("run {run}: kills after {kills:?} ms: confirmed, clean");
    }
}
