//! The maintenance the operator runs by itself (issue 33), end to end in
//! the fake world: the real controller and sidecar binaries, the fake
//! Cassandra answering the sidecar's Jolokia calls as Cassandra does
//! (`forceKeyspaceCleanup`, `upgradeSSTables`, `repairAsync` with
//! `ranges`, `forceTerminateAllRepairSessions`), each operation lasting
//! the ring's timing (`cleanup_ms`, `upgrade_ms`, `repair_ms` per range),
//! and the ring model as the judge of what each member's disk holds.
//!
//! Every scenario runs a [`MaintenanceWatch`]: at every change the API
//! server commits (kubesim's store, in commit order), never two member
//! Services carrying a maintenance request; it also logs each request as
//! it appears and, at each StatefulSet scale-up, which members were
//! marked `cleanup-due` at that moment. The fake keeps the database's own
//! log of operations ([`testworld::ring::Ring::maintenance_log`]), whose
//! times must not overlap between members either.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crds::contract::maintenance::{
    self as contract, OLD_FORMAT_SSTABLES, Operation, REQUEST, Record, Repaired, Request, State,
};
use crds::v1alpha1::MaintenanceStatus;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::PostParams;
use serde_json::{Value, json};
use testworld::harness::fast_ring;
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::EventType;
use testworld::ring::{Consistency, Maintenance, Replication, RunningOp};
use tokio::sync::broadcast::error::RecvError;

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, cluster, overrides, secs, setup};

/// The scenarios' namespace ([`setup`]'s default).
pub(crate) const NAMESPACE: &str = "db";

/// A member's Pod (and Service) name in the scenarios' one-rack Cluster
/// `c`.
pub(crate) fn member(ordinal: usize) -> String {
    format!("c-dc-r-{ordinal}")
}

// ---- the watch ----

/// A request as it appeared on a member Service.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    pub(crate) rv: u64,
    pub(crate) member: String,
    pub(crate) request: Request,
}

/// A StatefulSet scale-up as committed, with the member Services marked
/// `cleanup-due` at that moment.
#[derive(Debug, Clone)]
pub(crate) struct ScaleUp {
    pub(crate) rv: u64,
    pub(crate) before: i64,
    pub(crate) after: i64,
    pub(crate) marked: BTreeSet<String>,
}

#[derive(Default)]
struct Seen {
    breaches: Vec<String>,
    asked: Vec<Asked>,
    scale_ups: Vec<ScaleUp>,
}

/// Watches a namespace's member Services and StatefulSets from now on
/// (see the module's doc).
pub(crate) struct MaintenanceWatch {
    seen: Arc<Mutex<Seen>>,
    judged: Arc<std::sync::atomic::AtomicU64>,
    store: testworld::kubesim::store::Store,
    task: tokio::task::JoinHandle<()>,
}

fn annotations(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn name(object: &Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn replicas(object: Option<&Value>) -> Option<i64> {
    object?.pointer("/spec/replicas")?.as_i64()
}

impl MaintenanceWatch {
    pub(crate) fn start(sim: &KubeSim, namespace: &str) -> MaintenanceWatch {
        let mut events = sim.store().subscribe();
        // Each Service's annotations as last committed.
        let mut services: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let target = testworld::kubesim::store::Target::new("", "v1", "services", Some(namespace));
        if let Ok(list) = sim.store().list(&target, &Default::default()) {
            for s in list["items"].as_array().into_iter().flatten() {
                services.insert(name(s), annotations(s));
            }
        }
        let seen = Arc::new(Mutex::new(Seen::default()));
        let found = seen.clone();
        let judged = Arc::new(std::sync::atomic::AtomicU64::new(
            sim.store().resource_version(),
        ));
        let judging = judged.clone();
        let namespace = namespace.to_string();
        let task = tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        if event.namespace() == namespace {
                            let mut seen = found.lock().unwrap();
                            let object = event.object.as_ref();
                            match event.plural.as_str() {
                                "services" => {
                                    let service = name(object);
                                    let now = if event.kind == EventType::Deleted {
                                        BTreeMap::new()
                                    } else {
                                        annotations(object)
                                    };
                                    let before = services.insert(service.clone(), now.clone());
                                    let asked_before =
                                        before.as_ref().and_then(|a| a.get(REQUEST).cloned());
                                    if let Some(text) = now.get(REQUEST)
                                        && asked_before.as_ref() != Some(text)
                                    {
                                        match Request::from_annotation(text) {
                                            Some(request) => seen.asked.push(Asked {
                                                rv: event.rv,
                                                member: service.clone(),
                                                request,
                                            }),
                                            None => seen.breaches.push(format!(
                                                "rv {}: {service}: an unreadable request {text:?}",
                                                event.rv
                                            )),
                                        }
                                    }
                                    let asked: Vec<&String> = services
                                        .iter()
                                        .filter(|(_, a)| a.contains_key(REQUEST))
                                        .map(|(n, _)| n)
                                        .collect();
                                    if asked.len() > 1 {
                                        let breach = format!(
                                            "rv {}: two maintenance requests at once: {asked:?}",
                                            event.rv
                                        );
                                        seen.breaches.push(breach);
                                    }
                                }
                                "statefulsets" => {
                                    // A new StatefulSet (a new rack) grows
                                    // from 0.
                                    let before = match event.kind {
                                        EventType::Added => Some(0),
                                        _ => replicas(event.prev.as_deref()),
                                    };
                                    if let (Some(before), Some(after)) =
                                        (before, replicas(Some(object)))
                                        && after > before
                                    {
                                        let marked = services
                                            .iter()
                                            .filter(|(_, a)| a.contains_key(contract::CLEANUP_DUE))
                                            .map(|(n, _)| n.clone())
                                            .collect();
                                        seen.scale_ups.push(ScaleUp {
                                            rv: event.rv,
                                            before,
                                            after,
                                            marked,
                                        });
                                    }
                                }
                                _ => {}
                            }
                        }
                        judging.fetch_max(event.rv, std::sync::atomic::Ordering::SeqCst);
                    }
                    Err(RecvError::Lagged(n)) => found.lock().unwrap().breaches.push(format!(
                        "the maintenance watch missed {n} changes: it cannot vouch for them"
                    )),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        MaintenanceWatch {
            seen,
            judged,
            store: sim.store().clone(),
            task,
        }
    }

    /// Waits until the watch has judged every change committed before the
    /// call (5 s at most: longer is itself a failure).
    fn caught_up(&self, context: &str) {
        let committed = self.store.resource_version();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.judged.load(std::sync::atomic::Ordering::SeqCst) < committed {
            assert!(
                Instant::now() < deadline,
                "{context}: the maintenance watch has not judged the changes up to revision {committed}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Panics if two requests ever stood at once (judged up to now).
    pub(crate) fn assert_one_at_a_time(&self, context: &str) {
        self.caught_up(context);
        let seen = self.seen.lock().unwrap();
        assert!(
            seen.breaches.is_empty(),
            "{context}: maintenance ran on two members at once:\n{}",
            seen.breaches.join("\n")
        );
    }

    /// The requests made so far, in commit order.
    pub(crate) fn asked(&self) -> Vec<Asked> {
        self.caught_up("reading the requests");
        self.seen.lock().unwrap().asked.clone()
    }

    pub(crate) fn scale_ups(&self) -> Vec<ScaleUp> {
        self.caught_up("reading the scale-ups");
        self.seen.lock().unwrap().scale_ups.clone()
    }
}

impl Drop for MaintenanceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- reading the world ----

/// A member's address: its Service's ClusterIP.
pub(crate) async fn address(s: &Scenario, member: &str) -> String {
    s.service(member).await.spec.unwrap().cluster_ip.unwrap()
}

/// The host ID of the ring member at `address`.
pub(crate) fn host_id(sim: &KubeSim, address: &str) -> String {
    sim.ring()
        .with(|r| r.node_by_address(address).map(|n| n.host_id.clone()))
        .unwrap_or_else(|| panic!("no ring member at {address}"))
}

/// The annotations of a member Service as the API server has it.
pub(crate) fn stored_annotations(sim: &KubeSim, member: &str) -> BTreeMap<String, String> {
    let target = testworld::kubesim::store::Target::new("", "v1", "services", Some(NAMESPACE));
    sim.store()
        .get(&target, member)
        .map(|s| annotations(&s))
        .unwrap_or_default()
}

/// The sidecar's record on a member Service.
pub(crate) fn record_of(annotations: &BTreeMap<String, String>) -> Option<Record> {
    annotations
        .get(contract::RECORD)
        .and_then(|t| Record::from_annotation(t))
}

/// The Cluster's `status.maintenance`, read from the API server's store.
pub(crate) fn maintenance_status(sim: &KubeSim) -> Option<MaintenanceStatus> {
    let target = testworld::kubesim::store::Target::new(
        "cassandra.rook.io",
        "v1alpha1",
        "clusters",
        Some(NAMESPACE),
    );
    let cluster = sim.store().get(&target, "c").ok()?;
    serde_json::from_value(cluster.pointer("/status/maintenance")?.clone()).ok()
}

/// What a member's disk holds, per keyspace.
pub(crate) fn disk(sim: &KubeSim, host: &str) -> BTreeMap<String, BTreeSet<String>> {
    sim.ring()
        .with(|r| r.disk_of(host).map(|d| d.copies.clone()))
        .unwrap_or_default()
}

/// The keys of `keyspace` that `host` replicates now.
pub(crate) fn owned(sim: &KubeSim, host: &str, keyspace: &str) -> BTreeSet<String> {
    sim.ring().with(|r| {
        r.keyspace(keyspace)
            .map(|ks| {
                ks.keys
                    .keys()
                    .filter(|k| {
                        r.replicas(keyspace, k)
                            .is_ok_and(|h| h.iter().any(|h| h == host))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// The fake's log of the operations of `operation` started so far.
pub(crate) fn ops(sim: &KubeSim, operation: Maintenance) -> Vec<RunningOp> {
    sim.ring().with(|r| {
        r.maintenance_log()
            .iter()
            .filter(|op| op.operation == operation)
            .cloned()
            .collect()
    })
}

/// Panics when operations of two hosts overlap in time (model ms): the
/// database itself ran them on two members at once.
pub(crate) fn assert_never_overlapping(ops: &[RunningOp], context: &str) {
    for a in ops {
        for b in ops {
            if a.host_id != b.host_id {
                assert!(
                    a.until_ms <= b.started_ms || b.until_ms <= a.started_ms,
                    "{context}: {a:?} and {b:?} ran at once on two members"
                );
            }
        }
    }
}

/// The Events of `reason` in the namespace: their notes.
pub(crate) async fn events(s: &Scenario, reason: &str) -> Vec<String> {
    let events: kube::Api<Event> = s.api();
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Asserts an Event of each reason names each member.
pub(crate) async fn assert_events(s: &Scenario, reasons: &[&str], members: &[String]) {
    for reason in reasons {
        let notes = events(s, reason).await;
        for m in members {
            assert!(
                notes.iter().any(|n| n.contains(m.as_str())),
                "no {reason} Event names {m}: {notes:?}"
            );
        }
    }
}

/// The host PID of a member Pod's first container, as the API server has
/// it, if it runs.
pub(crate) fn pod_pid(sim: &KubeSim, pod: &str) -> Option<i32> {
    let target = testworld::kubesim::store::Target::new("", "v1", "pods", Some(NAMESPACE));
    sim.store()
        .get(&target, pod)
        .ok()?
        .pointer("/status/containerStatuses/0/containerID")?
        .as_str()?
        .strip_prefix("kubesim://")?
        .parse()
        .ok()
}

/// Reads `OperationMode` through the Jolokia agent of the Pod whose
/// container runs as host process `pid` (from a thread in the Pod's
/// network namespace, as the sidecar reaches it on its loopback): the
/// answer's body and how long it took.
pub(crate) fn read_mode_in_pod(pid: i32) -> std::thread::JoinHandle<(String, Duration)> {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).expect("the pod's netns");
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let started = Instant::now();
        let body = json!({"type": "read", "mbean": "org.apache.cassandra.db:type=StorageService",
            "attribute": "OperationMode"})
        .to_string();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", 8778)).expect("the agent");
        write!(
            stream,
            "POST /jolokia/ HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("a request");
        let mut out = String::new();
        stream.read_to_string(&mut out).expect("a response");
        (out, started.elapsed())
    })
}

/// The ring timings of these scenarios: the fast ones, with maintenance
/// operations long enough to be seen (and killed) while they run.
pub(crate) fn maintenance_ring(cleanup_ms: u64, upgrade_ms: u64) -> testworld::ring::Options {
    let mut ring = fast_ring();
    ring.timing.cleanup_ms = cleanup_ms;
    ring.timing.upgrade_ms = upgrade_ms;
    // A repair command runs as soon as asked and takes no time per range:
    // the sidecar reads a command's status at once and then every 2 s, so
    // a command that is done by its first read costs no wait (a cycle is
    // some hundred subranges).
    ring.timing.repair_ms = 0;
    ring.timing.repair_queue_ms = 0;
    ring
}

// ---- cleanup after a scale-up ----

/// Waits until no member carries a request or a `cleanup-due` mark: the
/// cleanups the bring-up itself asks for (a rack grows one member at a
/// time, and each member gives ranges to the next) are over.
pub(crate) async fn until_idle(s: &Scenario, members: &[String]) {
    s.until("no maintenance under way", secs(120), || {
        let busy: Vec<String> = members
            .iter()
            .filter(|m| {
                let a = stored_annotations(s.sim(), m);
                a.contains_key(REQUEST) || a.contains_key(contract::CLEANUP_DUE)
            })
            .cloned()
            .collect();
        std::future::ready(if busy.is_empty() {
            Ok(())
        } else {
            Err(format!("busy: {busy:?}"))
        })
    })
    .await
}

/// What the old members held before the scale-up: (member, host,
/// keyspace -> keys).
pub(crate) type Before = Vec<(String, String, BTreeMap<String, BTreeSet<String>>)>;

pub(crate) async fn before_scale_up(s: &Scenario, members: &[String]) -> Before {
    let mut out = Vec::new();
    for m in members {
        let host = host_id(s.sim(), &address(s, m).await);
        out.push((m.clone(), host.clone(), disk(s.sim(), &host)));
    }
    out
}

/// Each old member's disk after its cleanup: every keyspace holds exactly
/// what it held before less what it no longer replicates, and `ks` lost
/// something (it gave ranges away).
pub(crate) fn assert_cleaned(sim: &KubeSim, before: &Before) {
    for (m, host, held) in before {
        let now = disk(sim, host);
        let mut gave = 0;
        for (keyspace, keys) in held {
            let owned = owned(sim, host, keyspace);
            let kept: BTreeSet<String> = keys.intersection(&owned).cloned().collect();
            let got = now.get(keyspace).cloned().unwrap_or_default();
            // Keys written since (none here) would be extra; none missing.
            assert_eq!(
                got.difference(&kept).count() + kept.difference(&got).count(),
                0,
                "{m}: {keyspace} holds {} keys, expected the {} it held and still replicates",
                got.len(),
                kept.len()
            );
            if keyspace == "ks" {
                gave = keys.len() - kept.len();
            }
        }
        assert!(gave > 0, "{m} gave no key of ks away: nothing was proven");
    }
}

/// The cleanup of `before`'s members: each asked once, for a cleanup, one
/// after the other, each marked `cleanup-due` when the StatefulSet grew;
/// nobody else asked.
pub(crate) fn assert_cleanup_requests(watch: &MaintenanceWatch, before: &Before, context: &str) {
    watch.assert_one_at_a_time(context);
    let old: BTreeSet<String> = before.iter().map(|(m, _, _)| m.clone()).collect();
    let asked = watch.asked();
    let cleanups: Vec<&Asked> = asked
        .iter()
        .filter(|a| a.request.operation == Operation::Cleanup)
        .collect();
    let members: BTreeSet<String> = cleanups.iter().map(|a| a.member.clone()).collect();
    assert_eq!(
        members, old,
        "{context}: the members asked to clean up: {asked:?}"
    );
    let scale_up = watch
        .scale_ups()
        .into_iter()
        .next()
        .expect("the StatefulSet grew");
    assert!(
        old.is_subset(&scale_up.marked),
        "{context}: at the scale-up {} -> {} (rv {}) only {:?} were marked cleanup-due",
        scale_up.before,
        scale_up.after,
        scale_up.rv,
        scale_up.marked
    );
    assert!(
        cleanups.iter().all(|a| a.rv > scale_up.rv),
        "{context}: a cleanup was asked before the scale-up"
    );
}

/// Whether every member of `old` recorded its cleanup done and carries
/// neither request nor mark.
pub(crate) fn cleanups_done(sim: &KubeSim, old: &[String]) -> Result<(), String> {
    for m in old {
        let a = stored_annotations(sim, m);
        let record = record_of(&a);
        let done = record
            .as_ref()
            .is_some_and(|r| r.operation == Operation::Cleanup && r.state == State::Done);
        if !done || a.contains_key(REQUEST) || a.contains_key(contract::CLEANUP_DUE) {
            return Err(format!(
                "{m}: record {record:?}, request {:?}, cleanup-due {:?}",
                a.get(REQUEST),
                a.get(contract::CLEANUP_DUE)
            ));
        }
    }
    Ok(())
}

/// Three members with `ks` at RF 3 (1000 keys at ALL), then a fourth in
/// the same rack: once it joined, the three old members run a cleanup one
/// at a time (never two requests at once at any committed change; the
/// database's own operations never overlap either), each marked
/// `cleanup-due` before the StatefulSet grew; each old member's disk then
/// holds exactly what it held less the keys it gave away (in every
/// keyspace), the new member is never asked, the data check is clean, the
/// marks are gone, `status.maintenance.cleanup` named each member while it
/// ran (and nothing once done), and CleanupStarted / CleanupFinished
/// Events name each. The Jolokia agent is not blocked by the cleanup (a
/// blocking JMX call): a read of `OperationMode` through a member's agent
/// while its cleanup runs answers before the cleanup could have returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_is_followed_by_a_cleanup_of_each_old_member_one_at_a_time() {
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    let s = setup()
        .zones(&["a", "b"])
        .ring(maintenance_ring(700, 300))
        .start()
        .await;
    s.create(&cluster("c").rack("r", 3)).await;
    s.until_ready("c", 3, secs(180)).await;
    until_idle(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
    s.ring()
        .write("ks", Replication::simple(3), 1000, Consistency::All);
    let before = before_scale_up(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
    let old: Vec<String> = before.iter().map(|(m, _, _)| m.clone()).collect();
    let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
    s.patch_cluster("c", cluster("c").rack("r", 4).racks_patch())
        .await;
    let sim = s.sim();
    let mut shown: BTreeSet<String> = BTreeSet::new();
    let mut running_in_fake: BTreeSet<String> = BTreeSet::new();
    // A read through the agent of a member while its cleanup (a blocking
    // JMX call) runs: (the member, the cleanup's operation, the read).
    let mut read_meanwhile = None;
    s.until("the cleanups of the three old members", secs(150), || {
        if let Some(c) = maintenance_status(sim).and_then(|m| m.cleanup) {
            shown.insert(c.member);
        }
        for (m, host, _) in &before {
            // The running cleanup's time left (model ms are real ms).
            let left = sim.ring().with(|r| {
                r.running_ops(host)
                    .first()
                    .map(|op| op.until_ms.saturating_sub(r.now_ms()))
            });
            if let Some(left) = left {
                running_in_fake.insert(m.clone());
                if read_meanwhile.is_none()
                    && left >= 400
                    && let Some(pid) = pod_pid(sim, m)
                {
                    read_meanwhile = Some((m.clone(), left, read_mode_in_pod(pid)));
                }
            }
        }
        std::future::ready(cleanups_done(sim, &old))
    })
    .await;
    // The agent's pool (the sidecar's `executor=fixed`) answered the read
    // while the cleanup held one of its threads: before the cleanup could
    // have returned (a single-thread agent answers only after it).
    let (m, left, read) = read_meanwhile.expect("a cleanup seen running");
    let (answer, took) = read.join().expect("the read");
    assert!(
        answer.contains("\"NORMAL\"") && took < Duration::from_millis(left),
        "{m}: OperationMode read during its cleanup ({left} ms left) took {took:?}: {answer}"
    );
    s.until_ready("c", 4, secs(60)).await;
    assert_cleanup_requests(&watch, &before, "the scale-up 3 -> 4");
    assert_cleaned(sim, &before);
    s.ring().assert_intact(4);
    let newcomer = host_id(sim, &address(&s, &member(3)).await);
    let cleanups = ops(sim, Maintenance::Cleanup);
    assert!(
        cleanups.iter().all(|op| op.host_id != newcomer),
        "the new member ran a cleanup: {cleanups:?}"
    );
    for (m, host, _) in &before {
        let keyspaces: BTreeSet<&str> = cleanups
            .iter()
            .filter(|op| &op.host_id == host)
            .map(|op| op.keyspace.as_str())
            .collect();
        assert_eq!(
            keyspaces,
            ["ks", "system_auth", "system_distributed", "system_traces"].into(),
            "{m}: the keyspaces it cleaned up"
        );
    }
    assert_never_overlapping(&cleanups, "the cleanups");
    let old_set: BTreeSet<String> = old.iter().cloned().collect();
    assert_eq!(
        shown, old_set,
        "status.maintenance.cleanup named each while it ran"
    );
    assert_eq!(running_in_fake, old_set, "the fake ran each one's cleanup");
    assert_eq!(maintenance_status(sim).and_then(|m| m.cleanup), None);
    assert_events(&s, &["CleanupStarted", "CleanupFinished"], &old).await;
    eprintln!(
        "scale-up 3 -> 4 and three cleanups in {:.1} s ({} cleanup calls)",
        started.elapsed().as_secs_f64(),
        cleanups.len()
    );
}

/// `cleanupAfterScaleUp: false`: the same scale-up, and no member is ever
/// asked for a cleanup nor runs one; the old members keep the keys they
/// gave away (the data check is clean: extra copies are no loss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cleanup_runs_after_a_scale_up_when_turned_off() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup()
        .zones(&["a", "b"])
        .ring(maintenance_ring(300, 300))
        .start()
        .await;
    s.create(
        &cluster("c")
            .rack("r", 3)
            .with_spec(json!({"maintenance": {"cleanupAfterScaleUp": false}})),
    )
    .await;
    s.until_ready("c", 3, secs(180)).await;
    until_idle(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
    s.ring()
        .write("ks", Replication::simple(3), 1000, Consistency::All);
    let before = before_scale_up(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
    let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
    s.patch_cluster("c", cluster("c").rack("r", 4).racks_patch())
        .await;
    s.until_ready("c", 4, secs(150)).await;
    s.until_observed("c", secs(30)).await;
    // The controller asks within a reconcile or two of a settled ring:
    // ten seconds past the Cluster's readiness is many of them.
    tokio::time::sleep(secs(10)).await;
    watch.assert_one_at_a_time("cleanup turned off");
    assert!(
        watch.asked().is_empty(),
        "a request with cleanup turned off: {:?}",
        watch.asked()
    );
    assert!(ops(s.sim(), Maintenance::Cleanup).is_empty());
    for (m, host, _) in &before {
        let kept = s.sim().ring().with(|r| r.unowned_on(host, "ks")).len();
        assert!(kept > 0, "{m} dropped the keys it gave away");
    }
    s.ring().assert_intact(4);
}

/// A new rack: three racks of one member each, `ks` at
/// NetworkTopologyStrategy `dc: 3` (every member holds every key), then a
/// fourth rack of one (Cassandra's token allocator needs at least as many
/// racks as the factor): the strategy spreads each key's replicas over
/// the racks, so each old member gives a quarter of its keys away. Once
/// the new member joined, each old member (marked `cleanup-due` before
/// the new rack's StatefulSet was created) runs a cleanup, one at a time,
/// and its disk then holds exactly what it still replicates; the new
/// member is never asked; the data check is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rack_is_followed_by_a_cleanup_of_each_old_member() {
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    let s = setup()
        .zones(&["a", "b"])
        .ring(maintenance_ring(500, 300))
        .start()
        .await;
    let three = cluster("c").rack("r", 1).rack("s", 1).rack("t", 1);
    s.create(&three).await;
    s.until_ready("c", 3, secs(180)).await;
    let old: Vec<String> = ["c-dc-r-0", "c-dc-s-0", "c-dc-t-0"]
        .map(String::from)
        .to_vec();
    until_idle(&s, &old).await;
    s.ring().write(
        "ks",
        Replication::network_topology([("dc", 3)]),
        1000,
        Consistency::All,
    );
    let before = before_scale_up(&s, &old).await;
    let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
    s.patch_cluster("c", three.rack("u", 1).racks_patch()).await;
    let sim = s.sim();
    s.until("the cleanups of the three old members", secs(150), || {
        std::future::ready(cleanups_done(sim, &old))
    })
    .await;
    s.until_ready("c", 4, secs(60)).await;
    assert_cleanup_requests(&watch, &before, "a new rack");
    assert_cleaned(sim, &before);
    s.ring().assert_intact(4);
    let newcomer = host_id(sim, &address(&s, "c-dc-u-0").await);
    let cleanups = ops(sim, Maintenance::Cleanup);
    assert!(cleanups.iter().all(|op| op.host_id != newcomer));
    assert_never_overlapping(&cleanups, "the cleanups");
    eprintln!(
        "a new rack and three cleanups in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---- upgradesstables after a major upgrade ----

pub(crate) const TUNING: &str = "concurrent_reads: 32\n";

/// The old-format count each of `members` recorded.
pub(crate) fn old_format(sim: &KubeSim, members: &[String]) -> Vec<Option<u64>> {
    members
        .iter()
        .map(|m| {
            contract::old_format_sstables(
                stored_annotations(sim, m)
                    .get(OLD_FORMAT_SSTABLES)
                    .map(String::as_str),
            )
        })
        .collect()
}

/// The `*-Data.db` files of sstable version `version` on a member's
/// volume.
pub(crate) async fn data_files(s: &Scenario, member: &str, version: &str) -> usize {
    let data = s.data_volume(member).await.join("data");
    sidecar::sstables::list(&data)
        .iter()
        .flat_map(|(_, _, files)| files)
        .filter(|f| f.starts_with(&format!("{version}-")))
        .count()
}

/// A 4.1 Cluster of three with data, upgraded to 5.0.3 (`spec.version`,
/// a roll), then past `CASSANDRA_4` (`storage_compatibility_mode:
/// UPGRADING` in its overrides, a roll): 5.0 writes `oa`, and each member
/// counts 4.1's `nb` files as old. Returns the members.
pub(crate) async fn upgraded_to_5_0(s: &Scenario) -> Vec<String> {
    let configmaps: kube::Api<ConfigMap> = s.api();
    configmaps
        .create(&PostParams::default(), &overrides("c-overrides", TUNING))
        .await
        .unwrap();
    s.create(
        &cluster("c")
            .version("4.1.8")
            .rack("r", 3)
            .with_rack(json!({"configMapName": "c-overrides"})),
    )
    .await;
    s.until_ready("c", 3, secs(180)).await;
    s.ring()
        .write("ks", Replication::simple(3), 500, Consistency::All);
    let members: Vec<String> = (0..3).map(member).collect();
    // 4.1 flushes its memtables (every few seconds in the fake).
    s.until("4.1's nb sstables on every member", secs(30), || async {
        for m in &members {
            if data_files(s, m, "nb").await == 0 {
                return Err(format!("{m} has none yet"));
            }
        }
        Ok(())
    })
    .await;
    s.patch_cluster("c", json!({"spec": {"version": "5.0.3"}}))
        .await;
    s.until("every member on 5.0.3", secs(240), || async {
        let releases: Vec<String> = s.sim().ring().with(|r| {
            r.nodes()
                .filter(|n| n.process.is_some())
                .map(|n| n.release.clone())
                .collect()
        });
        let status = s
            .clusters()
            .get("c")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if releases.len() == 3 && releases.iter().all(|r| r == "5.0.3") && status.ready_members == 3
        {
            Ok(())
        } else {
            Err(format!("{releases:?}, {} ready", status.ready_members))
        }
    })
    .await;
    configmaps
        .replace(
            "c-overrides",
            &PostParams::default(),
            &overrides(
                "c-overrides",
                &format!("{TUNING}storage_compatibility_mode: UPGRADING\n"),
            ),
        )
        .await
        .unwrap();
    members
}

/// Whether the upgrade is complete: every member recorded 0 old-format
/// sstables, has no `nb` file left, and the status says so.
pub(crate) async fn upgrade_complete(s: &Scenario, members: &[String]) -> Result<(), String> {
    let counts = old_format(s.sim(), members);
    let status = maintenance_status(s.sim());
    let mut nb = Vec::new();
    for m in members {
        nb.push(data_files(s, m, "nb").await);
    }
    if counts.iter().all(|c| *c == Some(0))
        && nb.iter().all(|n| *n == 0)
        && status.as_ref().and_then(|m| m.sstables_upgraded) == Some(true)
    {
        Ok(())
    } else {
        Err(format!(
            "old-format counts {counts:?}, nb files {nb:?}, status {status:?}"
        ))
    }
}

/// A major upgrade 4.1 → 5.0 in the fake world, past `CASSANDRA_4`: the
/// members record their old-format (4.1's `nb`) sstables, and the
/// controller asks each for upgradesstables, one member at a time (never
/// two requests at any committed change; the database's upgrades never
/// overlap), until every member records 0 and holds no `nb` file; then
/// `status.maintenance.sstablesUpgraded` is true, and each member's
/// UpgradeSSTablesStarted / SSTablesUpgraded Events were published. The
/// data check stays clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_major_upgrade_is_followed_by_upgradesstables_until_no_sstable_is_old() {
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    let s = setup().ring(maintenance_ring(300, 700)).start().await;
    let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
    let members = upgraded_to_5_0(&s).await;
    let sim = s.sim();
    let mut shown = BTreeSet::new();
    s.until("upgradesstables on every member", secs(240), || {
        if let Some(u) = maintenance_status(sim).and_then(|m| m.upgradesstables) {
            shown.insert(u.member);
        }
        upgrade_complete(&s, &members)
    })
    .await;
    watch.assert_one_at_a_time("upgradesstables");
    let asked: BTreeSet<String> = watch
        .asked()
        .iter()
        .filter(|a| a.request.operation == Operation::Upgradesstables)
        .map(|a| a.member.clone())
        .collect();
    let all: BTreeSet<String> = members.iter().cloned().collect();
    assert_eq!(asked, all, "each member asked for upgradesstables");
    let upgrades = ops(sim, Maintenance::Upgradesstables);
    assert!(!upgrades.is_empty());
    assert_never_overlapping(&upgrades, "the upgrades");
    assert_eq!(shown, all, "status.maintenance.upgradesstables named each");
    for m in &members {
        assert!(data_files(&s, m, "oa").await > 0, "{m}: no oa sstable");
    }
    assert_events(
        &s,
        &["UpgradeSSTablesStarted", "SSTablesUpgraded"],
        &members,
    )
    .await;
    s.ring().assert_intact(3);
    eprintln!(
        "major upgrade and upgradesstables in {:.1} s ({} upgrade calls that rewrote files)",
        started.elapsed().as_secs_f64(),
        upgrades.len()
    );
}

// ---- scheduled repairs ----

/// A member that missed writes: its process killed and the ring's clock
/// moved past the hint window before keys are written at QUORUM (no hint
/// is kept for it), in one step of the ring model; its container comes
/// back on its data. Returns its host ID and the keys it misses.
pub(crate) async fn miss_writes(s: &Scenario, victim: &str) -> (String, Vec<String>) {
    let host = host_id(s.sim(), &address(s, victim).await);
    let window = s
        .sim()
        .ring()
        .with(|r| r.options().timing.max_hint_window_ms);
    s.sim().ring().with(|r| {
        r.kill(&host).expect("kill");
        r.advance(window + 1);
        r.write_keys("ks", "missed-", 300, Consistency::Quorum)
            .expect("a quorum of two takes the writes");
    });
    s.until("the member back in the ring", secs(120), || async {
        s.ring().up() == 3
    })
    .await;
    let missing = s.sim().ring().with(|r| r.missing_on(&host, "ks"));
    assert!(
        missing.len() >= 300 && missing.iter().all(|k| k.starts_with("missed-")),
        "{victim} misses {} keys",
        missing.len()
    );
    (host, missing)
}

/// Whether the current repair cycle is complete: 100 %, every member's
/// `repaired` record of the status's cycle, `ks` with a last full repair.
pub(crate) fn repair_complete(sim: &KubeSim, members: &[String]) -> Result<String, String> {
    let status = maintenance_status(sim).and_then(|m| m.repair);
    let Some(repair) = status.clone() else {
        return Err("no repair status".into());
    };
    let cycle = repair.cycle.clone().unwrap_or_default();
    let records: Vec<Option<Repaired>> = members
        .iter()
        .map(|m| {
            stored_annotations(sim, m)
                .get(contract::REPAIRED)
                .and_then(|t| Repaired::from_annotation(t))
        })
        .collect();
    let all = records.iter().all(|r| {
        r.as_ref()
            .is_some_and(|r| r.cycle == cycle && r.keyspaces.contains_key("ks"))
    });
    let ks_repaired = repair
        .keyspaces
        .iter()
        .any(|k| k.name == "ks" && k.last_full_repair.is_some());
    if repair.repaired_percent == 100 && all && ks_repaired {
        Ok(cycle)
    } else {
        Err(format!("status {status:?}, records {records:?}"))
    }
}

/// A member down past the hint window misses writes; with scheduled
/// repairs turned on (`schedule: 60m`), the cycle repairs every member's
/// primary ranges, one member at a time (never two requests at once; the
/// database's repair commands never overlap between members), in
/// subranges (many `repairAsync` calls per member, each with `ranges`,
/// together covering the member's primary ranges of `ks`); the status's
/// repaired share reaches 100 % and `ks` gets its last full repair; and
/// the member that missed the writes, read at ONE alone, has every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_repair_brings_back_a_member_that_missed_writes() {
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    let mut ring = maintenance_ring(300, 300);
    ring.timing.max_hint_window_ms = 1000;
    let s = setup().ring(ring).start().await;
    s.create(&cluster("c").rack("r", 3)).await;
    s.until_ready("c", 3, secs(180)).await;
    let members: Vec<String> = (0..3).map(member).collect();
    until_idle(&s, &members).await;
    s.ring()
        .write("ks", Replication::simple(3), 500, Consistency::All);
    let (victim, missing) = miss_writes(&s, &members[2]).await;
    let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
    let repairs_before = ops(s.sim(), Maintenance::Repair).len();
    // The current cycle is the one that began at the Cluster's creation:
    // an hour leaves it the whole test. (With `1m`, a patch late in the
    // minute leaves the first cycle seconds before the next begins and
    // takes over: its 100 % is never shown.)
    s.patch_cluster(
        "c",
        json!({"spec": {"maintenance": {"repair": {"schedule": "60m"}}}}),
    )
    .await;
    let sim = s.sim();
    let mut percents = BTreeSet::new();
    let cycle = s
        .until("the repair cycle complete", secs(150), || {
            if let Some(r) = maintenance_status(sim).and_then(|m| m.repair) {
                percents.insert(r.repaired_percent);
            }
            std::future::ready(repair_complete(sim, &members))
        })
        .await;
    watch.assert_one_at_a_time("the repair cycle");
    let repairs: Vec<RunningOp> = ops(sim, Maintenance::Repair)
        .into_iter()
        .skip(repairs_before)
        .collect();
    assert_never_overlapping(&repairs, "the repairs");
    for m in &members {
        let host = host_id(sim, &address(&s, m).await);
        let mine: Vec<&RunningOp> = repairs
            .iter()
            .filter(|op| op.host_id == host && op.keyspace == "ks")
            .collect();
        assert!(
            mine.len() > 1 && mine.iter().all(|op| op.ranges.len() == 1),
            "{m}: the repair of ks was not done in subranges: {} commands",
            mine.len()
        );
        // Together they cover every key whose primary replica it is.
        let primary = sim.ring().with(|r| r.primary_ranges(&host, "ks")).unwrap();
        let keys: Vec<i64> = sim.ring().with(|r| {
            r.keyspace("ks")
                .unwrap()
                .keys
                .values()
                .copied()
                .filter(|t| {
                    primary
                        .iter()
                        .any(|p| testworld::ring::range_contains(*p, *t))
                })
                .collect()
        });
        let uncovered = keys
            .iter()
            .filter(|t| {
                !mine
                    .iter()
                    .any(|op| testworld::ring::range_contains(op.ranges[0], **t))
            })
            .count();
        assert_eq!(
            uncovered, 0,
            "{m}: keys of its primary ranges left unrepaired"
        );
    }
    let unread: Vec<&String> = missing
        .iter()
        .filter(|k| !sim.ring().with(|r| r.read_one_from(&victim, "ks", k)))
        .collect();
    assert!(
        unread.is_empty(),
        "{} keys unread at ONE from the member that missed them",
        unread.len()
    );
    assert!(sim.ring().with(|r| r.missing_on(&victim, "ks")).is_empty());
    s.ring().assert_intact(3);
    assert!(percents.contains(&100), "{percents:?}");
    assert_events(&s, &["RepairStarted", "RepairFinished"], &members).await;
    eprintln!(
        "repair cycle {cycle}: {} repair commands, percents seen {percents:?}, {:.1} s in all",
        repairs.len(),
        started.elapsed().as_secs_f64()
    );
}
