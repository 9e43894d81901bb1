//! The benchmark: the real operator binary in the test world, measured
//! against its goals (issue 17).
//!
//! ```text
//! cargo build --release && target/release/bench [--quick] [--json FILE]
//! ```
//!
//! Four worlds, one after the other:
//!
//! 1. real members (sidecar and fake Cassandra processes): a 3-rack,
//!    12-member cluster brought up (the operator's requests, the overhead
//!    over N × bootstrap), a steady period (writes, the sidecars' VmRSS),
//!    a restarted controller's reconciles of the unchanged cluster
//!    (writes), then every rack scaled down from 4 to 2 (6 decommissions:
//!    reaction times, the decommissioning sidecar's VmRSS);
//! 2. hollow kubelets (Pods Ready at once, no processes): 1 cluster, then
//!    100 (the controller's VmRSS, scale-up reaction times);
//! 3. hollow kubelets: 1,000 clusters created at once (first steps, all
//!    Ready, the controller's CPU time and VmRSS);
//! 4. the hollow phases again on the real control plane (issue 29):
//!    upstream's API server, controller-manager and scheduler with hollow
//!    nodes ([`testworld::hollow_nodes`]); printed beside kubesim's, not
//!    in the JSON (whose keys are issue 17's). `BENCH_SKIP_CONTROL_PLANE=1`
//!    skips it.
//!
//! Times come from kubesim's request log and store events (both stamped
//! in µs), memory from /proc. `--quick` shortens the steady period (60 s
//! instead of 10 minutes) and the time limits. Prints the table, writes
//! the JSON of
//! [`testworld::bench::Figures::to_json`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crds::Cluster;
use crds::contract::{self, GossipMember, GossipView};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::bench::{Figures, Percentiles, reactions};
use testworld::harness::{self, Process, World, WorldOptions};
use testworld::kubesim::faults::RequestRecord;
use testworld::kubesim::now_us;
use testworld::kubesim::selectors::label_of;
use testworld::kubesim::sim::quantity::parse_milli;
use testworld::kubesim::store::{EventType, Store, Target};

type Error = Box<dyn std::error::Error>;

const NS: &str = "db";
const MIB: f64 = 1024.0;

use harness::{proc_cpu_seconds as cpu_seconds, proc_status_kib as status_kib};

/// The objects of a kind in a namespace, shared with the store: the bench
/// polls every 20 ms, and copying a thousand objects each time would load
/// the machine it measures.
fn list(store: &Store, group: &str, version: &str, plural: &str, ns: &str) -> Vec<Arc<Value>> {
    store
        .objects(&Target::new(group, version, plural, Some(ns)))
        .unwrap_or_default()
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    harness::str_at(v, p)
}

/// The sidecars (PID 1 of each member's database container), by Pod.
fn sidecars(store: &Store) -> BTreeMap<String, u32> {
    list(store, "", "v1", "pods", NS)
        .iter()
        .filter_map(|pod| {
            let statuses = pod.pointer("/status/containerStatuses")?.as_array()?;
            let c = statuses.iter().find(|c| s(c, "/name") == "cassandra")?;
            let pid = s(c, "/containerID")
                .strip_prefix("kubesim://")?
                .parse()
                .ok()?;
            Some((s(pod, "/metadata/name").to_string(), pid))
        })
        .collect()
}

fn clusters_ready(store: &Store, members: i64) -> usize {
    list(store, "cassandra.rook.io", "v1alpha1", "clusters", NS)
        .iter()
        .filter(|c| {
            c.pointer("/status/readyMembers").and_then(Value::as_i64) == Some(members)
                && c.pointer("/status/members").and_then(Value::as_i64) == Some(members)
        })
        .count()
}

/// Whether the `members` member Services of `cluster` all hold a gossip
/// record, and every record shows every member up under the generation it
/// runs (the rule the controller's rolls wait for).
fn ring_settled(store: &Store, cluster: &str, members: usize) -> bool {
    let services: Vec<(String, String, Option<GossipView>)> = list(store, "", "v1", "services", NS)
        .iter()
        // Member Services select their one Pod by name.
        .filter(|o| {
            let selected = format!(
                "/spec/selector/{}",
                json_pointer_key(crds::labels::POD_NAME)
            );
            label_of(o, crds::labels::CLUSTER) == Some(cluster) && !s(o, &selected).is_empty()
        })
        .map(|o| {
            let record = s(
                o,
                &format!(
                    "/metadata/annotations/{}",
                    json_pointer_key(contract::GOSSIP)
                ),
            );
            (
                s(o, "/metadata/name").to_string(),
                s(o, "/spec/clusterIP").to_string(),
                GossipView::from_annotation(record),
            )
        })
        .collect();
    let all: Vec<GossipMember<'_>> = services
        .iter()
        .map(|(name, address, view)| GossipMember {
            name,
            address,
            view: view.as_ref(),
        })
        .collect();
    let names: Vec<&str> = all.iter().map(|m| m.name).collect();
    all.len() == members && contract::ring_settled(&all, &names).is_ok()
}

/// Whether a request is the operator's: the controller's or a sidecar's
/// (the members' ServiceAccount in the cluster's namespace).
fn operators(r: &RequestRecord) -> bool {
    r.user == harness::operator_user()
        || r.user.starts_with(&format!("system:serviceaccount:{NS}:"))
}

fn is_read(r: &RequestRecord) -> bool {
    matches!(r.verb.as_str(), "get" | "list" | "watch")
}

/// What the store's events tell, stamped when each change was made.
#[derive(Debug, Default)]
struct Recorded {
    /// A member Pod turned Ready: (cluster, µs).
    ready: Vec<(String, u64)>,
    /// A StatefulSet created or given more replicas: (cluster, name, µs).
    growth: Vec<(String, String, u64)>,
    /// A member Service given the decommission label: (cluster, name, µs).
    labelled: Vec<(String, String, u64)>,
}

fn pod_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| s(c, "/type") == "Ready" && s(c, "/status") == "True")
        })
}

/// Records the store's events until the world stops.
fn record(store: &Store) -> Arc<Mutex<Recorded>> {
    let out = Arc::new(Mutex::new(Recorded::default()));
    let mut rx = store.subscribe();
    let rec = out.clone();
    tokio::spawn(async move {
        loop {
            let ev = match rx.recv().await {
                Ok(ev) => ev,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("bench: {n} store events missed");
                    continue;
                }
                Err(_) => return,
            };
            let cluster = label_of(&ev.object, crds::labels::CLUSTER)
                .unwrap_or_default()
                .to_string();
            let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
            match ev.plural.as_str() {
                "pods" if pod_ready(&ev.object) && !ev.prev.as_deref().is_some_and(pod_ready) => {
                    r.ready.push((cluster, ev.at_us));
                }
                "statefulsets" => {
                    let replicas = |o: &Value| o.pointer("/spec/replicas").and_then(Value::as_i64);
                    let grew = match (&ev.kind, ev.prev.as_deref()) {
                        (EventType::Added, _) => true,
                        (EventType::Modified, Some(prev)) => replicas(&ev.object) > replicas(prev),
                        _ => false,
                    };
                    if grew {
                        r.growth.push((
                            cluster,
                            s(&ev.object, "/metadata/name").to_string(),
                            ev.at_us,
                        ));
                    }
                }
                "services" => {
                    let has = |o: &Value| label_of(o, crds::contract::DECOMMISSIONED).is_some();
                    if has(&ev.object) && !ev.prev.as_deref().is_some_and(has) {
                        r.labelled.push((
                            cluster,
                            s(&ev.object, "/metadata/name").to_string(),
                            ev.at_us,
                        ));
                    }
                }
                _ => {}
            }
        }
    });
    out
}

fn json_pointer_key(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// The controller's last write to `resource` named `name` (or a create of
/// one) at or before `at`.
fn write_before(log: &[RequestRecord], resource: &str, name: &str, at: u64) -> Option<u64> {
    let controller = harness::operator_user();
    log.iter()
        .filter(|r| {
            r.user == controller
                && r.resource == resource
                && r.is_write()
                && (r.name == name || r.verb == "create")
                && r.at_us <= at
        })
        .map(|r| r.at_us)
        .max()
}

/// Scale-up reactions: last member Ready → the controller's write that
/// grows the cluster (ms).
fn scale_up_reactions(rec: &Recorded, log: &[RequestRecord]) -> Vec<f64> {
    let actions: Vec<(String, u64)> = rec
        .growth
        .iter()
        .filter_map(|(cluster, name, at)| {
            write_before(log, "statefulsets", name, *at).map(|w| (cluster.clone(), w))
        })
        .collect();
    reactions(&rec.ready, &actions)
}

/// The host IDs of every ring node, by cluster (a node's decommission
/// call on `/sim/ring/nodes/<host id>/decommission` names only the host).
fn host_clusters(world: &World) -> BTreeMap<String, String> {
    let ring = world.sim.ring();
    ring.clusters()
        .into_iter()
        .flat_map(|cluster| {
            ring.with_cluster(&cluster, |r| {
                r.nodes()
                    .map(|n| (n.host_id.to_string(), cluster.clone()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
        })
        .collect()
}

/// Decommission reactions: the controller's label write on a member
/// Service → that cluster's next decommission call reaching the ring
/// (ms). A cluster decommissions one member at a time, so the cluster
/// pairs them.
fn decommission_reactions(
    rec: &Recorded,
    log: &[RequestRecord],
    sim_log: &[RequestRecord],
    hosts: &BTreeMap<String, String>,
) -> Vec<f64> {
    let causes: Vec<(String, u64)> = rec
        .labelled
        .iter()
        .filter_map(|(cluster, name, at)| {
            write_before(log, "services", name, *at).map(|w| (cluster.clone(), w))
        })
        .collect();
    let actions: Vec<(String, u64)> = sim_log
        .iter()
        .filter(|q| q.method == "POST" && q.path.ends_with("/decommission"))
        .filter_map(|q| {
            let host = q.path.rsplit('/').nth(1)?;
            Some((hosts.get(host)?.clone(), q.at_us))
        })
        .collect();
    reactions(&causes, &actions)
}

fn cluster(
    name: &str,
    racks: &[&str],
    members: i32,
    cpu: &str,
    memory: &str,
) -> Result<Cluster, Error> {
    let racks: Vec<Value> = racks
        .iter()
        .map(|r| {
            json!({"name": r, "members": members,
                "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
                "resources": {"limits": {"cpu": cpu, "memory": memory}}})
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"version": "4.1.8", "datacenter": {"name": "dc", "racks": racks}}
    }))?)
}

/// Creates a Cluster, retrying while the CRD is not served yet.
async fn create(clusters: &Api<Cluster>, c: &Cluster) -> Result<(), Error> {
    let mut last = None;
    for _ in 0..100 {
        match clusters.create(&PostParams::default(), c).await {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("creating {:?}: {last:?}", c.metadata.name).into())
}

async fn until(
    what: &str,
    secs: u64,
    log: &Path,
    mut f: impl FnMut() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() > deadline {
            return Err(format!(
                "timed out after {secs} s waiting for {what}\ncontroller log:\n{}",
                harness::tail(log)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Mean VmRSS of a process over `secs` seconds (MiB).
async fn mean_rss(pid: u32, secs: u64) -> f64 {
    let mut samples = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        samples.extend(status_kib(pid, "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64 / MIB
}

/// Creates the clusters `c1` to `c99` of 3 members, one after the other.
async fn create_c1_to_c99(clusters: &Api<Cluster>) -> Result<(), Error> {
    for i in 1..100 {
        create(
            clusters,
            &cluster(&format!("c{i}"), &["r"], 3, "100m", "256Mi")?,
        )
        .await?;
    }
    Ok(())
}

/// Creates the clusters `k0` to `k999` of 3 members, at once.
async fn create_thousand(clusters: &Api<Cluster>) -> Result<(), Error> {
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let clusters = clusters.clone();
        let c = cluster(&format!("k{i}"), &["r"], 3, "100m", "256Mi")?;
        tasks.push(tokio::spawn(async move {
            create(&clusters, &c).await.map_err(|e| e.to_string())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Sets every rack's members (a merge patch replaces the list).
async fn scale(clusters: &Api<Cluster>, name: &str, members: i32) -> Result<(), Error> {
    let mut racks = clusters.get(name).await?.spec.datacenter.racks;
    for r in &mut racks {
        r.members = members;
    }
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"datacenter": {"name": "dc", "racks": racks}}})),
        )
        .await?;
    Ok(())
}

/// The reconciles the controller's metrics count.
fn reconciles(addr: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|n| n.ends_with("reconciles_total"))
        })?
        .split_whitespace()
        .nth(1)?
        .parse::<f64>()
        .ok()
        .map(|v| v as u64)
}

fn free_addr() -> Result<String, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("127.0.0.1:{}", l.local_addr()?.port()))
}

struct Paths {
    operator: PathBuf,
    fake: PathBuf,
    fixtures: PathBuf,
}

async fn start_world(
    paths: &Paths,
    work: &Path,
    zones: &[&str],
    nodes_per_zone: usize,
    hollow: bool,
) -> Result<(World, Process, PathBuf), Error> {
    let mut opts = WorldOptions::new(
        paths.operator.clone(),
        paths.fake.clone(),
        paths.fixtures.clone(),
        zones,
    );
    opts.nodes_per_zone = nodes_per_zone;
    opts.hollow = hollow;
    let world = World::start(opts, work).await?;
    world.install(NS).await?;
    let log = work.join("controller.log");
    let controller = world.start_controller(&log, Some(&free_addr()?))?;
    Ok((world, controller, log))
}

/// World 1: real members.
async fn real_members(
    paths: &Paths,
    quick: bool,
    f: &mut Figures,
    scale_ups: &mut Vec<f64>,
    decommissions: &mut Vec<f64>,
) -> Result<(), Error> {
    let work = tempfile::tempdir()?;
    let ring = harness::fast_ring();
    let bootstrap_ms = ring.timing.bootstrap_ms;
    let mut opts = WorldOptions::new(
        paths.operator.clone(),
        paths.fake.clone(),
        paths.fixtures.clone(),
        &["a", "b", "c"],
    );
    opts.ring = ring;
    let world = World::start(opts, work.path()).await?;
    world.install(NS).await?;
    let log = work.path().join("controller.log");
    let metrics = free_addr()?;
    let mut controller = world.start_controller(&log, Some(&metrics))?;
    let store = world.sim.store().clone();
    let rec = record(&store);
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);

    // Bring-up of 3 racks × 4 members.
    let members = 12;
    let seq0 = world.sim.requests().last().map_or(0, |r| r.seq);
    let began = Instant::now();
    create(
        &clusters,
        &cluster("c", &["a", "b", "c"], 4, "500m", "1Gi")?,
    )
    .await?;
    until("12 Ready members", 600, &log, || {
        clusters_ready(&store, members) == 1
    })
    .await?;
    let took = began.elapsed().as_secs_f64() * 1000.0;
    f.bringup_overhead_ms_per_member =
        (took - members as f64 * bootstrap_ms as f64) / members as f64;
    // The sidecars record each step of their nodes' gossip converging:
    // those writes are the bring-up's, and the steady period begins once
    // every record shows every member up.
    until("every member seeing every member up", 120, &log, || {
        ring_settled(&store, "c", members as usize)
    })
    .await?;
    let log_now = world.sim.requests();
    let ours = log_now.iter().filter(|r| r.seq > seq0 && operators(r));
    let (reads, writes): (Vec<_>, Vec<_>) = ours
        .filter(|r| is_read(r) || r.is_write())
        .partition(|r| is_read(r));
    f.bringup_reads = reads.len() as u64;
    f.bringup_writes = writes.len() as u64;
    eprintln!("bench: 12 members up in {:.1} s", took / 1000.0);
    let hosts = host_clusters(&world);

    // Steady: nothing to do.
    let steady = if quick { 60 } else { 600 };
    let seq1 = world.sim.requests().last().map_or(0, |r| r.seq);
    let end = Instant::now() + Duration::from_secs(steady);
    let mut samples = Vec::new();
    let mut peak = 0u64;
    while Instant::now() < end {
        for pid in sidecars(&store).values() {
            samples.extend(status_kib(*pid, "VmRSS:"));
            peak = peak.max(status_kib(*pid, "VmHWM:").unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    f.steady_seconds = steady;
    f.sidecar_steady_mib = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64 / MIB;
    let steady_writes: Vec<RequestRecord> = world
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.seq > seq1 && operators(r) && r.is_write())
        .collect();
    for w in &steady_writes {
        eprintln!(
            "bench: steady write by {}: {} {} {}/{} {}",
            w.user, w.verb, w.resource, w.subresource, w.name, w.code
        );
    }
    f.steady_writes = steady_writes.len() as u64;
    eprintln!("bench: steady period done");

    // A restarted controller's reconciles of the unchanged cluster, and
    // five more from annotation changes.
    drop(controller);
    let seq2 = world.sim.requests().last().map_or(0, |r| r.seq);
    controller = world.start_controller(&log, Some(&metrics))?;
    until("a reconcile", 60, &log, || {
        reconciles(&metrics).unwrap_or(0) >= 1
    })
    .await?;
    for i in 0..5 {
        clusters
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"bench/nudge": i.to_string()}}})),
            )
            .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = reconciles(&metrics).unwrap_or(0);
    let w = world
        .sim
        .requests()
        .iter()
        .filter(|r| r.seq > seq2 && r.user == harness::operator_user() && r.is_write())
        .count();
    f.noop_reconciles = n;
    f.noop_reconcile_writes = w as f64 / n.max(1) as f64;
    eprintln!("bench: {n} reconciles of the unchanged cluster, {w} writes");

    // Every rack scaled down from 4 to 2 members: 6 decommissions, one
    // at a time.
    let mut decommissioning = 0u64;
    scale(&clusters, "c", 2).await?;
    let deadline = Instant::now() + Duration::from_secs(900);
    while !(clusters_ready(&store, 6) == 1 && sidecars(&store).len() == 6) {
        let labelled: BTreeSet<String> = list(&store, "", "v1", "services", NS)
            .iter()
            .filter(|svc| label_of(svc, crds::contract::DECOMMISSIONED).is_some())
            .map(|svc| s(svc, "/metadata/name").to_string())
            .collect();
        for (pod, pid) in sidecars(&store) {
            if labelled.contains(&pod) {
                decommissioning = decommissioning.max(status_kib(pid, "VmRSS:").unwrap_or(0));
            }
            peak = peak.max(status_kib(pid, "VmHWM:").unwrap_or(0));
        }
        if Instant::now() > deadline {
            return Err(format!("the racks were not scaled down\n{}", harness::tail(&log)).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("bench: scaled down to 6 members");
    f.sidecar_peak_mib = peak as f64 / MIB;
    f.sidecar_decommissioning_mib = decommissioning as f64 / MIB;

    let log_all = world.sim.requests();
    let sim_log = world.sim.sim_requests();
    let r = rec.lock().unwrap_or_else(|e| e.into_inner());
    decommissions.extend(decommission_reactions(&r, &log_all, &sim_log, &hosts));
    scale_ups.extend(scale_up_reactions(&r, &log_all));
    drop(controller);
    Ok(())
}

/// Clusters of the decommission phase.
const DECOMMISSION_CLUSTERS: usize = 10;
/// Times each of them goes from 6 members down to 3 (and, between two,
/// back up to 6): 3 decommissions a cycle per cluster, so that the
/// reaction figure rests on at least 100 events
/// (10 × 4 × 3 = 120) while no more than 60 members run at once.
const DECOMMISSION_CYCLES: usize = 4;

/// World 1b: [`DECOMMISSION_CLUSTERS`] clusters of 6 real members, created
/// at once, then each scaled down to 3 and up again,
/// [`DECOMMISSION_CYCLES`] times: three decommissions per cycle and
/// cluster, one after the other within a cluster, the clusters side by
/// side. Not below 3: Cassandra refuses to decommission a node when fewer
/// nodes than `system_distributed`'s replication factor (3) would remain.
async fn decommission_phase(paths: &Paths, out: &mut Vec<f64>) -> Result<(), Error> {
    let work = tempfile::tempdir()?;
    let mut opts = WorldOptions::new(
        paths.operator.clone(),
        paths.fake.clone(),
        paths.fixtures.clone(),
        &["a"],
    );
    opts.nodes_per_zone = 6;
    opts.ring = harness::fast_ring();
    let world = World::start(opts, work.path()).await?;
    world.install(NS).await?;
    let log = work.path().join("controller.log");
    let controller = world.start_controller(&log, Some(&free_addr()?))?;
    let store = world.sim.store().clone();
    let rec = record(&store);
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    let n = DECOMMISSION_CLUSTERS;
    let began = Instant::now();
    for i in 0..n {
        create(
            &clusters,
            &cluster(&format!("d{i}"), &["r"], 6, "100m", "256Mi")?,
        )
        .await?;
    }
    until("the clusters of 6 Ready", 900, &log, || {
        clusters_ready(&store, 6) == n
    })
    .await?;
    eprintln!(
        "bench: {n} clusters of 6 up in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    // A decommissioned node's host ID may leave the ring's records: they
    // are taken before each scale-down.
    let mut hosts = BTreeMap::new();
    for cycle in 0..DECOMMISSION_CYCLES {
        if cycle > 0 {
            for i in 0..n {
                scale(&clusters, &format!("d{i}"), 6).await?;
            }
            until("the clusters scaled up to 6 again", 900, &log, || {
                clusters_ready(&store, 6) == n
            })
            .await?;
        }
        hosts.extend(host_clusters(&world));
        for i in 0..n {
            scale(&clusters, &format!("d{i}"), 3).await?;
        }
        until("the clusters scaled down to 3", 900, &log, || {
            clusters_ready(&store, 3) == n
        })
        .await?;
        eprintln!(
            "bench: decommission cycle {} of {DECOMMISSION_CYCLES} done at {:.1} s",
            cycle + 1,
            began.elapsed().as_secs_f64()
        );
    }
    let r = rec.lock().unwrap_or_else(|e| e.into_inner());
    let found =
        decommission_reactions(&r, &world.sim.requests(), &world.sim.sim_requests(), &hosts);
    eprintln!(
        "bench: {} decommissions in {n} clusters, done at {:.1} s",
        found.len(),
        began.elapsed().as_secs_f64()
    );
    out.extend(found);
    drop(controller);
    Ok(())
}

/// World 2: 1 cluster, then 100, on hollow kubelets.
async fn hundred(paths: &Paths, f: &mut Figures, scale_ups: &mut Vec<f64>) -> Result<(), Error> {
    let work = tempfile::tempdir()?;
    let (world, controller, log) =
        start_world(paths, work.path(), &["a", "b", "c"], 4, true).await?;
    let store = world.sim.store().clone();
    let rec = record(&store);
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    let pid = controller.0.id();
    create(&clusters, &cluster("c0", &["r"], 3, "100m", "256Mi")?).await?;
    until("one cluster Ready", 120, &log, || {
        clusters_ready(&store, 3) == 1
    })
    .await?;
    f.controller_1_mib = mean_rss(pid, 10).await;
    let began = Instant::now();
    create_c1_to_c99(&clusters).await?;
    until("100 clusters Ready", 600, &log, || {
        clusters_ready(&store, 3) == 100
    })
    .await?;
    f.hundred_ready_s = began.elapsed().as_secs_f64();
    f.controller_100_mib = mean_rss(pid, 10).await;
    let r = rec.lock().unwrap_or_else(|e| e.into_inner());
    let requests = world.sim.requests();
    // BENCH_REQUEST_LOG=FILE: this world's request log, one JSON record a
    // line (which requests a slow reaction waited on).
    if let Ok(file) = std::env::var("BENCH_REQUEST_LOG") {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file)?);
        for request in &requests {
            serde_json::to_writer(&mut out, request)?;
            std::io::Write::write_all(&mut out, b"\n")?;
        }
        std::io::Write::flush(&mut out)?;
        eprintln!("bench: the 100-cluster world's request log is in {file}");
    }
    scale_ups.extend(scale_up_reactions(&r, &requests));
    drop(controller);
    Ok(())
}

/// How many Pods requesting `milli_cpu` and `memory` bytes the Nodes hold,
/// by their allocatable CPU, memory and Pod count.
fn capacity(store: &Store, milli_cpu: u128, memory: u128) -> u128 {
    let at = |node: &Value, r: &str| {
        node.pointer(&format!("/status/allocatable/{r}"))
            .and_then(Value::as_str)
            .and_then(parse_milli)
            .unwrap_or(0)
    };
    store
        .objects(&Target::new("", "v1", "nodes", None))
        .unwrap_or_default()
        .iter()
        .map(|n| {
            (at(n, "cpu") / milli_cpu)
                .min(at(n, "memory") / (memory * 1000))
                .min(at(n, "pods") / 1000)
        })
        .sum()
}

/// World 3: 1,000 clusters at once on hollow kubelets.
async fn thousand(paths: &Paths, quick: bool, f: &mut Figures) -> Result<(), Error> {
    let work = tempfile::tempdir()?;
    // 3,000 Pods of 100m and 256Mi: 42 Nodes of 8 CPUs, 32 GiB and 110
    // Pods hold 3,360 (30 held 2,400: the rest stayed Pending, and the
    // clusters could never all be Ready).
    let (world, controller, log) =
        start_world(paths, work.path(), &["a", "b", "c"], 14, true).await?;
    let store = world.sim.store().clone();
    let room = capacity(&store, 100, 256 << 20);
    if room < 3000 {
        return Err(
            format!("the world's Nodes hold {room} Pods of 100m and 256Mi, not 3,000").into(),
        );
    }
    let rec = record(&store);
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    let pid = controller.0.id();
    // The CRD served before the clock starts.
    create(&clusters, &cluster("warm-up", &["r"], 1, "100m", "256Mi")?).await?;
    clusters.delete("warm-up", &Default::default()).await?;
    until("the warm-up cluster gone", 60, &log, || {
        list(&store, "cassandra.rook.io", "v1alpha1", "clusters", NS).is_empty()
    })
    .await?;
    let cpu0 = cpu_seconds(pid);
    let t0 = now_us();
    let began = Instant::now();
    create_thousand(&clusters).await?;
    eprintln!(
        "bench: 1000 clusters created in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let first_racks = |store: &Store| {
        list(store, "apps", "v1", "statefulsets", NS)
            .iter()
            .filter_map(|sts| label_of(sts, crds::labels::CLUSTER))
            .filter(|c| c.starts_with('k'))
            .collect::<BTreeSet<&str>>()
            .len()
    };
    until(
        "every cluster's first rack",
        if quick { 300 } else { 900 },
        &log,
        || first_racks(&store) >= 1000,
    )
    .await?;
    // When: each cluster's first StatefulSet, as the store made it.
    let mut firsts: BTreeMap<String, u64> = BTreeMap::new();
    for (cluster, _, at) in &rec.lock().unwrap_or_else(|e| e.into_inner()).growth {
        if !cluster.starts_with('k') {
            continue;
        }
        let first = firsts.entry(cluster.clone()).or_insert(*at);
        *first = (*first).min(*at);
    }
    let last_first = firsts.values().copied().max().unwrap_or(t0);
    f.first_steps_s = (last_first - t0) as f64 / 1e6;
    until(
        "1000 clusters Ready",
        if quick { 600 } else { 1800 },
        &log,
        || clusters_ready(&store, 3) >= 1000,
    )
    .await?;
    f.all_ready_s = began.elapsed().as_secs_f64();
    f.controller_cpu_s = cpu_seconds(pid) - cpu0;
    f.controller_1000_mib = mean_rss(pid, 10).await;
    drop(controller);
    Ok(())
}

/// The hollow phases' figures measured on the real control plane
/// (issue 29), printed beside kubesim's.
#[derive(Debug, Clone, Copy)]
struct RealPlane {
    controller_1_mib: f64,
    controller_100_mib: f64,
    hundred_ready_s: f64,
    controller_1000_mib: f64,
    first_steps_s: f64,
    all_ready_s: f64,
    controller_cpu_s: f64,
}

impl Default for RealPlane {
    fn default() -> RealPlane {
        let nan = f64::NAN;
        RealPlane {
            controller_1_mib: nan,
            controller_100_mib: nan,
            hundred_ready_s: nan,
            controller_1000_mib: nan,
            first_steps_s: nan,
            all_ready_s: nan,
            controller_cpu_s: nan,
        }
    }
}

/// The Clusters in [`NS`] whose status counts `members` Ready of
/// `members`, and, when `with_sets`, the names of those that have a
/// StatefulSet (otherwise empty: a list of 1,100 sets is not made for
/// nothing), as the API server lists them.
async fn listed(
    client: &kube::Client,
    members: i64,
    with_sets: bool,
) -> Result<(usize, BTreeSet<String>), Error> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let ready = clusters
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                i64::from(s.ready_members) == members && i64::from(s.members) == members
            })
        })
        .count();
    if !with_sets {
        return Ok((ready, BTreeSet::new()));
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let with_sets = sets
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|s| {
            s.metadata
                .labels
                .as_ref()?
                .get(crds::labels::CLUSTER)
                .cloned()
        })
        .collect();
    Ok((ready, with_sets))
}

/// Lists until `done` says so, every `every` (the StatefulSets only
/// `with_sets`).
async fn until_listed(
    what: &str,
    (secs, every): (u64, Duration),
    log: &Path,
    (client, with_sets): (&kube::Client, bool),
    mut done: impl FnMut(usize, &BTreeSet<String>) -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (ready, sets) = listed(client, 3, with_sets).await?;
        if done(ready, &sets) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out after {secs} s waiting for {what} ({ready} Ready)\ncontroller log:\n{}",
                harness::tail(log)
            )
            .into());
        }
        tokio::time::sleep(every).await;
    }
}

/// World 4: the hollow phases on the real control plane (issue 29):
/// etcd, kube-apiserver, kube-controller-manager and kube-scheduler of
/// `scripts/build-control-plane`, with upstream's settings, and 42
/// hollow nodes ([`testworld::hollow_nodes`]) of 8 CPUs in 3 zones. The
/// controller runs as the operator's ServiceAccount. 1 cluster, then 100
/// (the controller's VmRSS, the time until the 100 are Ready), then,
/// unless `quick`, 1,000 created at once (first steps, all Ready, CPU,
/// VmRSS). Times by listing (kubesim's phases read store events): every
/// 250 ms up to 100 clusters, every second for the 1,000 (a list of
/// 1,100 Clusters is megabytes the API server would serve four times a
/// second while it is measured); each time is that much late at most.
async fn real_plane(paths: &Paths, quick: bool, r: &mut RealPlane) -> Result<(), Error> {
    use testworld::control_plane::ControlPlane;
    use testworld::hollow_nodes::{self, HollowNodes, NodeSpec};
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    let specs: Vec<NodeSpec> = ["a", "b", "c"]
        .iter()
        .flat_map(|z| {
            (0..14).map(move |i| NodeSpec::in_zone(&format!("node-{z}-{i}"), &format!("zone-{z}")))
        })
        .collect();
    let _hollow = HollowNodes::start(&plane, &specs).await?;
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &hollow_nodes::storage_class("standard"),
        )
        .await?;
    let crds_api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds_api
        .create(&PostParams::default(), &crds::crd::definition())
        .await?;
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {
        "name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    // The operator's RBAC as the install has it (the objects of
    // manifests/operator.yaml but its Deployment).
    for object in harness::manifest_objects(harness::OPERATOR_MANIFEST)? {
        let kind = object["kind"].as_str().unwrap_or_default();
        if kind == "Deployment" || kind == "CustomResourceDefinition" {
            continue;
        }
        let (group, version) = harness::group_version(&object);
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        api.create(&PostParams::default(), &serde_json::from_value(object)?)
            .await?;
    }
    let (account_ns, account) = harness::OPERATOR_ACCOUNT;
    let kubeconfig = plane.write_client_kubeconfig(
        &format!("system:serviceaccount:{account_ns}:{account}"),
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{account_ns}"),
        ],
    )?;
    let log = plane.dir().join("controller.log");
    let controller = Process(
        std::process::Command::new(&paths.operator)
            .arg("controller")
            .args(["--operator-namespace", account_ns])
            .env("KUBECONFIG", &kubeconfig)
            .env("METRICS_ADDR", free_addr()?)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    let pid = controller.0.id();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    create(&clusters, &cluster("c0", &["r"], 3, "100m", "256Mi")?).await?;
    let fast = Duration::from_millis(250);
    until_listed(
        "one cluster Ready",
        (300, fast),
        &log,
        (&client, false),
        |ready, _| ready == 1,
    )
    .await?;
    r.controller_1_mib = mean_rss(pid, 10).await;
    let began = Instant::now();
    create_c1_to_c99(&clusters).await?;
    until_listed(
        "100 clusters Ready",
        (900, fast),
        &log,
        (&client, false),
        |ready, _| ready == 100,
    )
    .await?;
    r.hundred_ready_s = began.elapsed().as_secs_f64();
    r.controller_100_mib = mean_rss(pid, 10).await;
    eprintln!(
        "bench: real control plane, 100 clusters Ready in {:.1} s",
        r.hundred_ready_s
    );
    if quick {
        return Ok(());
    }
    let cpu0 = cpu_seconds(pid);
    let began = Instant::now();
    create_thousand(&clusters).await?;
    let firsts = |sets: &BTreeSet<String>| sets.iter().filter(|c| c.starts_with('k')).count();
    let slow = Duration::from_secs(1);
    until_listed(
        "every cluster's first rack",
        (1800, slow),
        &log,
        (&client, true),
        |_, sets| firsts(sets) >= 1000,
    )
    .await?;
    r.first_steps_s = began.elapsed().as_secs_f64();
    until_listed(
        "1100 clusters Ready",
        (3600, slow),
        &log,
        (&client, false),
        |ready, _| ready >= 1100,
    )
    .await?;
    r.all_ready_s = began.elapsed().as_secs_f64();
    r.controller_cpu_s = cpu_seconds(pid) - cpu0;
    r.controller_1000_mib = mean_rss(pid, 10).await;
    Ok(())
}

/// kubesim's hollow figures beside the real control plane's.
fn side_by_side(f: &Figures, r: &RealPlane) -> String {
    let rows = [
        (
            "controller RSS, 1 cluster (MiB)",
            f.controller_1_mib,
            r.controller_1_mib,
        ),
        (
            "controller RSS, 100 clusters (MiB)",
            f.controller_100_mib,
            r.controller_100_mib,
        ),
        (
            "controller RSS, 1000 clusters (MiB)",
            f.controller_1000_mib,
            r.controller_1000_mib,
        ),
        (
            "1000 clusters, all first steps (s)",
            f.first_steps_s,
            r.first_steps_s,
        ),
        ("1000 clusters, all Ready (s)", f.all_ready_s, r.all_ready_s),
        (
            "1000 clusters, controller CPU (s)",
            f.controller_cpu_s,
            r.controller_cpu_s,
        ),
        (
            "100 clusters, all Ready (s)",
            f.hundred_ready_s,
            r.hundred_ready_s,
        ),
    ];
    let mut out = format!(
        "{:38}  {:>10}  {:>18}\n",
        "hollow phases", "kubesim", "real control plane"
    );
    for (name, kubesim, real) in rows {
        out.push_str(&format!("{name:38}  {kubesim:>10.1}  {real:>18.1}\n"));
    }
    out
}

/// What the real-members phase measures, unknown when it fails part way.
fn failed_real(f: &mut Figures) {
    let nan = f64::NAN;
    if f.bringup_writes == 0 {
        f.bringup_overhead_ms_per_member = nan;
    }
    if f.steady_seconds == 0 {
        f.sidecar_steady_mib = nan;
    }
    if f.noop_reconciles == 0 {
        f.noop_reconcile_writes = nan;
    }
    f.sidecar_peak_mib = nan;
    f.sidecar_decommissioning_mib = nan;
    f.decommission_label_ms = Percentiles {
        p50: nan,
        p99: nan,
        count: 0,
    };
}

fn main() -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(run());
    // A world's helpers may still sit in blocking calls: do not wait for
    // them once the figures are out (the worlds are dropped, their
    // processes stopped, by then).
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json_file = args
        .iter()
        .position(|a| a == "--json")
        .map(|i| args.get(i + 1).cloned().ok_or("--json needs a FILE"))
        .transpose()?;
    if let Some(a) = args
        .iter()
        .find(|a| a.starts_with("--") && *a != "--quick" && *a != "--json")
    {
        return Err(format!("unknown option {a}; usage: bench [--quick] [--json FILE]").into());
    }
    harness::require_root()?;
    let exe = std::env::current_exe()?;
    let paths = Paths {
        operator: harness::beside(&exe, "cassandra-operator")?,
        fake: harness::beside(&exe, "fake-cassandra")?,
        fixtures: harness::fixtures()?,
    };
    let mut f = Figures {
        binary_size_mib: std::fs::metadata(&paths.operator)?.len() as f64 / MIB / MIB,
        ..Default::default()
    };
    let started = Instant::now();
    let mut scale_ups = Vec::new();
    let mut decommissions = Vec::new();
    // A phase that fails leaves its figures unknown (NaN: null in the
    // JSON), never a number it did not measure.
    // BENCH_SKIP_REAL=1: the hollow phases alone (trying the benchmark out).
    let real = if std::env::var("BENCH_SKIP_REAL").is_ok_and(|v| v == "1") {
        Err("skipped (BENCH_SKIP_REAL=1)".into())
    } else {
        real_members(&paths, quick, &mut f, &mut scale_ups, &mut decommissions).await
    };
    if let Err(e) = real {
        eprintln!("bench: the real-members phase failed: {e}");
        failed_real(&mut f);
    }
    let skip_decommissions = std::env::var("BENCH_SKIP_REAL").is_ok_and(|v| v == "1");
    let decommissioned = if skip_decommissions {
        Err("skipped (BENCH_SKIP_REAL=1)".into())
    } else {
        decommission_phase(&paths, &mut decommissions).await
    };
    match decommissioned {
        // The real-members phase's decommissions still count (the table
        // shows how many there were).
        Err(e) if !decommissions.is_empty() => {
            eprintln!("bench: the decommission phase failed: {e}");
            f.decommission_label_ms = Percentiles::of(&decommissions);
        }
        Err(e) => {
            eprintln!("bench: the decommission phase failed: {e}");
            f.decommission_label_ms = Percentiles {
                p50: f64::NAN,
                p99: f64::NAN,
                count: 0,
            };
        }
        Ok(()) => f.decommission_label_ms = Percentiles::of(&decommissions),
    }
    eprint!("{}", f.table());
    eprintln!(
        "bench: real members done at {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = hundred(&paths, &mut f, &mut scale_ups).await {
        eprintln!("bench: the 100-cluster phase failed: {e}");
        for v in [
            &mut f.controller_1_mib,
            &mut f.controller_100_mib,
            &mut f.hundred_ready_s,
        ] {
            if *v == 0.0 {
                *v = f64::NAN;
            }
        }
    }
    eprint!("{}", f.table());
    eprintln!(
        "bench: 100 clusters done at {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = thousand(&paths, quick, &mut f).await {
        eprintln!("bench: the 1000-cluster phase failed: {e}");
        if f.first_steps_s == 0.0 {
            f.first_steps_s = f64::NAN;
        }
        for v in [
            &mut f.all_ready_s,
            &mut f.controller_cpu_s,
            &mut f.controller_1000_mib,
        ] {
            if *v == 0.0 {
                *v = f64::NAN;
            }
        }
    }
    f.scale_up_ms = Percentiles::of(&scale_ups);
    // BENCH_SKIP_CONTROL_PLANE=1: not on the real control plane (or when
    // scripts/build-control-plane has not built it: the phase says so).
    let mut plane = RealPlane::default();
    if std::env::var("BENCH_SKIP_CONTROL_PLANE").is_ok_and(|v| v == "1") {
        eprintln!("bench: the real control plane phase skipped (BENCH_SKIP_CONTROL_PLANE=1)");
    } else if let Err(e) = real_plane(&paths, quick, &mut plane).await {
        eprintln!("bench: the real control plane phase failed: {e}");
    }
    println!(
        "cassandra-operator benchmark ({}, {:.0} s, {})",
        if quick { "--quick" } else { "full" },
        started.elapsed().as_secs_f64(),
        paths.operator.display()
    );
    print!("{}", f.table());
    println!("\nthe hollow phases, kubesim and the real control plane (issue 29):");
    print!("{}", side_by_side(&f, &plane));
    if let Some(file) = json_file {
        std::fs::write(&file, serde_json::to_string_pretty(&f.to_json())? + "\n")?;
    }
    Ok(())
}
