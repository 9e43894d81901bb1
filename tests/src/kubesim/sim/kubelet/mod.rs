//! The kubelet of every Node: a scheduled Pod gets its network namespace
//! and an IP on the sim's Pod network ([`super::net`]; a `hostNetwork`
//! Pod stays in the host's with its Node's address), its volumes become
//! directories, its init containers run
//! in order and then its containers run as real processes (see the module
//! docs of [`super`] for the contract), supervised per `restartPolicy`
//! with a doubling backoff; a startup probe gates the others ([`super::startup`]),
//! probes drive `ready`; a database container's end is reported to the
//! fake ring at once ([`super::deaths`]); the Pod's status
//! (phase, conditions, container statuses) is written as it changes. A
//! Pod marked for deletion is stopped (preStop, SIGTERM, SIGKILL after the
//! grace period) and then removed; a Pod whose Node is gone is killed at
//! once and removed (the pod garbage collector's job). I/O.

use super::net::{Network, PodNet};
use super::nodelifecycle::Kubelets;
use super::quantity::divide_ceil;
use super::{SimOptions, list_all, ns_of, patch_status, s, t};
use super::{deaths, images, probes, proxy, security, startup};
use crate::fake_cassandra::ring_service::RingService;
use crate::kubesim::now_rfc3339;
use crate::kubesim::store::{DeleteOptions, Store};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

mod container;
mod hollow;
mod volumes;
pub(crate) use container::quote;
use container::*;
pub use container::{Image, classify, expand, fixtures_dir};
pub use volumes::project;
use volumes::*;

/// `CASSANDRA_HOME` of the cassandra image.
pub const CASSANDRA_HOME: &str = "/opt/cassandra";

/// The command prefix of the operator image.
pub const OPERATOR_COMMAND: &str = "/usr/local/bin/cassandra-operator";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Run,
    Graceful,
    Kill,
}

/// Running container processes of a pod: name → (unshare's pid, the
/// container's PID 1 as the host sees it).
type Procs = Arc<Mutex<BTreeMap<String, (u32, u32)>>>;

#[derive(Debug)]
struct PodHandle {
    stop: watch::Sender<Stop>,
    procs: Procs,
    ip: Ipv4Addr,
    /// The Node it runs on.
    node: String,
    task: JoinHandle<()>,
    /// Dropped with the handle: the Pod's namespace and veth go.
    net: Option<PodNet>,
    /// The Service data path last loaded into its namespace
    /// ([`super::proxy`]).
    rules: Option<Arc<str>>,
}

impl PodHandle {
    fn kill_now(&self) {
        let _ = self.stop.send(Stop::Kill);
        for (outer, inner) in lock(&self.procs).values() {
            signal(container::container_init(*outer, *inner), Signal::SIGKILL);
            signal(*outer, Signal::SIGKILL);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, sig: Signal) {
    if pid > 1 {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

/// The kubelets of all Nodes.
#[derive(Debug)]
pub struct Kubelet {
    store: Store,
    opts: SimOptions,
    access: crate::kubesim::sim::PodAccess,
    pods: Mutex<HashMap<String, PodHandle>>,
    net: Arc<Network>,
    /// The fake ring, told of database containers' deaths.
    ring: Option<Arc<RingService>>,
    /// The last Pod address each node's IPAM gave.
    last_ip: Mutex<HashMap<String, Ipv4Addr>>,
    /// Which kubelets are cut off or NotReady ([`super::nodelifecycle`]).
    kubelets: Arc<Kubelets>,
    /// The Pods (UIDs) whose processes are stopped with their machine.
    frozen: Mutex<BTreeSet<String>>,
    /// The Service data path of every Pod's namespace, as the last pass
    /// made it ([`super::proxy::ruleset`]).
    rules: Mutex<Arc<str>>,
    /// Set by [`Kubelet::kill_all`]: the world is going away, start nothing
    /// more. A pass already under way when the world stops (a synchronous
    /// pass outlives the abort of its task) would otherwise start Pods on
    /// a torn-down network, and hollow Pods that nobody ever stops.
    stopped: std::sync::atomic::AtomicBool,
}

/// The kubelet's final DELETE: grace 0 with the Pod's UID as
/// precondition (the status manager's), which removes it at once.
fn force_delete(store: &Store, pod: &Value) {
    let opts = DeleteOptions {
        uid: Some(s(pod, "/metadata/uid").to_string()),
        grace_period: Some(0),
        ..Default::default()
    };
    let _ = store.delete(&t("", "pods", ns_of(pod)), s(pod, "/metadata/name"), &opts);
}

impl Kubelet {
    pub(super) fn new(
        store: Store,
        opts: SimOptions,
        access: crate::kubesim::sim::PodAccess,
        net: Arc<Network>,
        ring: Option<Arc<RingService>>,
        kubelets: Arc<Kubelets>,
    ) -> Self {
        Kubelet {
            kubelets,
            frozen: Mutex::default(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            ring,
            store,
            opts,
            access,
            pods: Mutex::new(HashMap::new()),
            net,
            last_ip: Mutex::new(HashMap::new()),
            rules: Mutex::new(Arc::from(proxy::ruleset(&[] as &[Value], &[] as &[Value]))),
        }
    }

    /// The cluster's CA (PEM), which the root CA publisher gives every
    /// namespace.
    pub(crate) fn ca_pem(&self) -> &str {
        self.access.authority.ca_pem()
    }

    /// Kills every container (no grace).
    pub fn kill_all(&self) {
        // Before taking the lock: a pass holds it throughout, so it either
        // ends before the drain below or sees the flag.
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for (_, h) in lock(&self.pods).drain() {
            h.kill_now();
            h.task.abort();
        }
    }

    /// The Nodes' local SSDs ([`super::disks`]): a machine that is gone
    /// or replaced loses its processes and its disks.
    pub fn sync_disks(&self) {
        super::disks::sync(
            &self.store,
            &self.opts.work_dir,
            self.opts.local_ssds,
            self.ring.as_deref(),
            |node| {
                lock(&self.pods).retain(|_, h| {
                    let gone = h.node == node;
                    if gone {
                        h.kill_now();
                    }
                    !gone
                });
            },
        );
    }

    /// The kubelets' Node status and the control plane's answer to silent
    /// ones ([`super::nodelifecycle`]); the processes of a frozen machine
    /// stop (SIGSTOP) and go on (SIGCONT) when it comes back.
    pub fn sync_nodes(&self) {
        super::nodelifecycle::sync(&self.store, &self.kubelets, self.opts.node_time_scale);
        let uids: BTreeMap<String, String> = list_all(&self.store, "", "nodes")
            .iter()
            .map(|n| {
                (
                    s(n, "/metadata/name").to_string(),
                    s(n, "/metadata/uid").to_string(),
                )
            })
            .collect();
        let handles = lock(&self.pods);
        let mut frozen = lock(&self.frozen);
        for (pod, h) in handles.iter() {
            let freeze = uids
                .get(&h.node)
                .is_some_and(|uid| self.kubelets.frozen(uid));
            if freeze == frozen.contains(pod) {
                continue;
            }
            let sig = if freeze {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            for (outer, inner) in lock(&h.procs).values() {
                for pid in process_tree(*outer).into_iter().chain(process_tree(*inner)) {
                    signal(pid, sig);
                }
            }
            if freeze {
                frozen.insert(pod.clone());
            } else {
                frozen.remove(pod);
            }
        }
        frozen.retain(|pod| handles.contains_key(pod));
    }

    /// Removes the data of PVs that are gone (reclaim policy Delete).
    pub fn collect_orphans(&self) {
        let pvs: BTreeSet<String> = list_all(&self.store, "", "persistentvolumes")
            .iter()
            .map(|p| s(p, "/metadata/name").to_string())
            .collect();
        let dir = self.opts.work_dir.join("pvs");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !pvs.contains(&name) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// One pass: starts pods bound to live Nodes, stops deleted ones, kills
    /// and removes the pods of Nodes that are gone.
    pub fn sync(&self) {
        let nodes: BTreeMap<String, std::sync::Arc<Value>> = list_all(&self.store, "", "nodes")
            .into_iter()
            .map(|n| (s(&n, "/metadata/name").to_string(), n))
            .collect();
        let pods = list_all(&self.store, "", "pods");
        let mut handles = lock(&self.pods);
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut live = BTreeSet::new();
        for pod in &pods {
            let node = s(pod, "/spec/nodeName");
            if node.is_empty() {
                continue;
            }
            let uid = s(pod, "/metadata/uid").to_string();
            let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
            let Some(node_obj) = nodes.get(node) else {
                // The machine is gone: its processes die with it, and the
                // pod garbage collector removes the pod.
                if let Some(h) = handles.remove(&uid) {
                    h.kill_now();
                }
                force_delete(&self.store, pod);
                continue;
            };
            live.insert(uid.clone());
            // A kubelet cut off from the API server sees no new Pod and no
            // deletion: what runs there runs on.
            if !self.kubelets.reaches_api(s(node_obj, "/metadata/uid")) {
                continue;
            }
            match handles.get(&uid) {
                Some(h) => {
                    if deleting {
                        h.stop.send_if_modified(|st| {
                            let change = *st == Stop::Run;
                            if change {
                                *st = Stop::Graceful;
                            }
                            change
                        });
                    }
                }
                None if deleting => force_delete(&self.store, pod),
                None => {
                    let phase = s(pod, "/status/phase");
                    if phase == "Succeeded" || phase == "Failed" {
                        continue;
                    }
                    // A machine whose disks are not set up for it yet
                    // (just registered, or re-created) runs nothing.
                    if !super::disks::attached(
                        &self.opts.work_dir,
                        node,
                        s(node_obj, "/metadata/uid"),
                    ) {
                        continue;
                    }
                    let host_ip = node_obj
                        .pointer("/status/addresses/0/address")
                        .and_then(Value::as_str)
                        .unwrap_or("127.0.0.1")
                        .to_string();
                    if self.opts.hollow {
                        let ip = hollow::next_ip();
                        let (stop, rx) = watch::channel(Stop::Run);
                        let task = tokio::spawn(hollow::run_pod(
                            self.store.clone(),
                            Value::clone(pod),
                            ip.to_string(),
                            host_ip,
                            rx,
                        ));
                        handles.insert(
                            uid,
                            PodHandle {
                                stop,
                                procs: Arc::default(),
                                ip,
                                node: node.to_string(),
                                task,
                                net: None,
                                rules: None,
                            },
                        );
                        continue;
                    }
                    let (ip, net) = if pod.pointer("/spec/hostNetwork") == Some(&json!(true)) {
                        (host_ip.parse().unwrap_or(Ipv4Addr::LOCALHOST), None)
                    } else {
                        let used: BTreeSet<Ipv4Addr> = handles.values().map(|h| h.ip).collect();
                        let mut last = lock(&self.last_ip);
                        let Some(ip) = self.net.pod_ip(node, last.get(node).copied(), &used) else {
                            eprintln!("kubesim: the pod IP range is full");
                            continue;
                        };
                        last.insert(node.to_string(), ip);
                        drop(last);
                        match self.net.add_pod(ip) {
                            Ok(n) => {
                                // Its Services route before its first
                                // container starts.
                                let rules = lock(&self.rules).clone();
                                if let Err(e) = proxy::apply(&n.path(), &rules) {
                                    eprintln!("kubesim: the Service rules of a pod: {e}");
                                }
                                (ip, Some((n, rules)))
                            }
                            Err(e) => {
                                eprintln!("kubesim: the network of a pod: {e}");
                                continue;
                            }
                        }
                    };
                    let (stop, rx) = watch::channel(Stop::Run);
                    let procs: Procs = Arc::default();
                    let ctx = Arc::new(PodCtx {
                        store: self.store.clone(),
                        opts: self.opts.clone(),
                        access: self.access.clone(),
                        tokens: Mutex::default(),
                        ip: ip.to_string(),
                        host_ip,
                        netns: net.as_ref().map(|(n, _)| n.path()),
                        allocatable: node_obj
                            .pointer("/status/allocatable")
                            .cloned()
                            .unwrap_or(json!({})),
                        dir: self.opts.work_dir.join("pods").join(format!(
                            "{}_{}_{}",
                            ns_of(pod).unwrap_or("default"),
                            s(pod, "/metadata/name"),
                            uid
                        )),
                        procs: procs.clone(),
                        ring: self.ring.clone(),
                        kubelets: self.kubelets.clone(),
                        node_uid: s(node_obj, "/metadata/uid").to_string(),
                        pod: Mutex::new(Value::clone(pod)),
                        run: Mutex::new(PodRun::new(pod)),
                        changed: Notify::new(),
                    });
                    let task = tokio::spawn(run_pod(ctx, rx));
                    handles.insert(
                        uid,
                        PodHandle {
                            stop,
                            procs,
                            ip,
                            node: node.to_string(),
                            task,
                            rules: net.as_ref().map(|(_, r)| r.clone()),
                            net: net.map(|(n, _)| n),
                        },
                    );
                }
            }
        }
        // A Pod removed from the API (a forced delete) while its kubelet is
        // cut off runs on: nobody there has heard of the removal.
        let cut_off: BTreeSet<&str> = nodes
            .iter()
            .filter(|(_, n)| !self.kubelets.reaches_api(s(n, "/metadata/uid")))
            .map(|(name, _)| name.as_str())
            .collect();
        handles.retain(|uid, h| {
            let keep = live.contains(uid) || cut_off.contains(h.node.as_str());
            if !keep {
                h.kill_now();
            }
            keep
        });
    }
}

impl Kubelet {
    /// kube-proxy's pass ([`super::proxy`]): the Service data path from the
    /// Services and Endpoints as they are now, loaded into every Pod
    /// namespace that does not hold it yet (all of them when it changed).
    /// Hollow Pods have no namespace: nothing to do.
    pub fn sync_proxy(&self) {
        if self.opts.hollow {
            return;
        }
        let script = proxy::ruleset(
            &list_all(&self.store, "", "services"),
            &list_all(&self.store, "", "endpoints"),
        );
        let current = {
            let mut rules = lock(&self.rules);
            if **rules != *script {
                *rules = Arc::from(script);
            }
            rules.clone()
        };
        let mut handles = lock(&self.pods);
        for h in handles.values_mut() {
            let Some(net) = &h.net else { continue };
            if h.rules.as_ref().is_some_and(|r| Arc::ptr_eq(r, &current)) {
                continue;
            }
            if let Err(e) = proxy::apply(&net.path(), &current) {
                eprintln!("kubesim: the Service rules of a pod: {e}");
            }
            h.rules = Some(current.clone());
        }
    }
}

/// A process and its descendants (from `/proc/*/stat`), so that a whole
/// container can be stopped and continued.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parens.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok());
        if let Some(ppid) = ppid {
            parent.push((pid, ppid));
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// What the kubelet knows of one container.
#[derive(Debug, Clone)]
struct Cs {
    name: String,
    image: String,
    restart_count: u32,
    state: Value,
    last_state: Value,
    ready: bool,
    started: bool,
    container_id: String,
}

impl Cs {
    fn new(c: &Value, reason: &str) -> Cs {
        Cs {
            name: s(c, "/name").to_string(),
            image: s(c, "/image").to_string(),
            restart_count: 0,
            state: json!({"waiting": {"reason": reason}}),
            last_state: json!({}),
            ready: false,
            started: false,
            container_id: String::new(),
        }
    }

    fn json(&self) -> Value {
        let mut v = json!({"name": self.name, "image": self.image, "imageID": format!("kubesim://{}", self.image),
            "restartCount": self.restart_count, "state": self.state, "lastState": self.last_state,
            "ready": self.ready, "started": self.started});
        if !self.container_id.is_empty() {
            v["containerID"] = json!(self.container_id);
        }
        v
    }

    fn running(&self) -> bool {
        self.state.get("running").is_some()
    }

    fn exit_code(&self) -> Option<i64> {
        self.state
            .pointer("/terminated/exitCode")
            .and_then(Value::as_i64)
    }
}

/// The state of one pod's run.
#[derive(Debug)]
struct PodRun {
    init: Vec<Cs>,
    main: Vec<Cs>,
    initialized: bool,
    init_failed: bool,
    start_time: String,
    transitions: BTreeMap<&'static str, (bool, String)>,
}

impl PodRun {
    fn new(pod: &Value) -> PodRun {
        let list = |p: &str, reason: &str| -> Vec<Cs> {
            pod.pointer(p)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| Cs::new(c, reason))
                .collect()
        };
        let init = list("/spec/initContainers", "PodInitializing");
        let main = list(
            "/spec/containers",
            if init.is_empty() {
                "ContainerCreating"
            } else {
                "PodInitializing"
            },
        );
        PodRun {
            initialized: init.is_empty(),
            init,
            main,
            init_failed: false,
            start_time: now_rfc3339(),
            transitions: BTreeMap::new(),
        }
    }

    /// The phase (the kubelet's getPhase).
    fn phase(&self, policy: &str) -> &'static str {
        if self.init_failed {
            return "Failed";
        }
        if !self.initialized {
            return "Pending";
        }
        let running = self.main.iter().filter(|c| c.running()).count();
        let terminated: Vec<i64> = self.main.iter().filter_map(Cs::exit_code).collect();
        let waiting = self.main.len() - running - terminated.len();
        if waiting > 0 && running == 0 && terminated.is_empty() {
            return "Pending";
        }
        if running > 0 || (waiting > 0 && policy == "Always") {
            return "Running";
        }
        if terminated.len() == self.main.len() {
            if policy == "Always" {
                return "Running";
            }
            if terminated.iter().all(|c| *c == 0) {
                return "Succeeded";
            }
            if policy == "Never" {
                return "Failed";
            }
        }
        "Running"
    }
}

struct PodCtx {
    store: Store,
    opts: SimOptions,
    access: crate::kubesim::sim::PodAccess,
    /// The projected ServiceAccount tokens by volume and path: token,
    /// issued at, expires at (seconds).
    tokens: Mutex<HashMap<String, (String, u64, u64)>>,
    ip: String,
    host_ip: String,
    /// The Pod's network namespace (None: the host's).
    netns: Option<PathBuf>,
    allocatable: Value,
    dir: PathBuf,
    procs: Procs,
    ring: Option<Arc<RingService>>,
    kubelets: Arc<Kubelets>,
    /// The UID of the Node it runs on.
    node_uid: String,
    pod: Mutex<Value>,
    run: Mutex<PodRun>,
    changed: Notify,
}

impl PodCtx {
    /// Whether its kubelet reaches the API server.
    fn reaches_api(&self) -> bool {
        self.kubelets.reaches_api(&self.node_uid)
    }

    fn pod(&self) -> Value {
        lock(&self.pod).clone()
    }

    fn update(&self, init: bool, idx: usize, f: impl FnOnce(&mut Cs)) {
        {
            let mut run = lock(&self.run);
            let list = if init { &mut run.init } else { &mut run.main };
            if let Some(c) = list.get_mut(idx) {
                f(c);
            }
        }
        self.changed.notify_one();
    }

    fn policy(&self) -> String {
        match s(&self.pod(), "/spec/restartPolicy") {
            "" => "Always".to_string(),
            p => p.to_string(),
        }
    }

    /// The grace period: the Pod's `deletionGracePeriodSeconds` as the
    /// store has it now (a later DELETE may have shortened it), else its
    /// `terminationGracePeriodSeconds`, capped by `max_grace`.
    fn grace(&self) -> Duration {
        let mut pod = self.pod();
        if let Ok(fresh) = self
            .store
            .get(&t("", "pods", ns_of(&pod)), s(&pod, "/metadata/name"))
            && fresh.pointer("/metadata/uid") == pod.pointer("/metadata/uid")
        {
            pod = fresh;
        }
        let secs = pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .or_else(|| {
                pod.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_u64)
            })
            .unwrap_or(30);
        let g = Duration::from_secs(secs);
        self.opts.max_grace.map_or(g, |m| g.min(m))
    }

    fn status(&self) -> Value {
        let pod = self.pod();
        let policy = self.policy();
        let mut run = lock(&self.run);
        let phase = run.phase(&policy);
        let containers_ready = !run.main.is_empty() && run.main.iter().all(|c| c.ready);
        let now = now_rfc3339();
        let mut conds = Vec::new();
        for (kind, ok) in [
            ("PodReadyToStartContainers", true),
            ("Initialized", run.initialized),
            ("Ready", containers_ready),
            ("ContainersReady", containers_ready),
            ("PodScheduled", true),
        ] {
            let entry = run.transitions.entry(kind).or_insert((ok, now.clone()));
            if entry.0 != ok {
                *entry = (ok, now.clone());
            }
            let mut c = json!({"type": kind, "status": if ok { "True" } else { "False" },
                "lastProbeTime": null, "lastTransitionTime": entry.1});
            if !ok && (kind == "Ready" || kind == "ContainersReady") {
                let names: Vec<&str> = run
                    .main
                    .iter()
                    .filter(|c| !c.ready)
                    .map(|c| c.name.as_str())
                    .collect();
                c["reason"] = json!("ContainersNotReady");
                c["message"] = json!(format!(
                    "containers with unready status: [{}]",
                    names.join(" ")
                ));
            }
            if !ok && kind == "Initialized" {
                c["reason"] = json!("ContainersNotInitialized");
                let names: Vec<&str> = run
                    .init
                    .iter()
                    .filter(|c| c.exit_code() != Some(0))
                    .map(|c| c.name.as_str())
                    .collect();
                c["message"] = json!(format!(
                    "containers with incomplete status: [{}]",
                    names.join(" ")
                ));
            }
            conds.push(c);
        }
        let qos = if pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .all(|c| {
                c.pointer("/resources/limits").is_none()
                    && c.pointer("/resources/requests").is_none()
            }) {
            "BestEffort"
        } else {
            "Burstable"
        };
        json!({
            "phase": phase,
            "conditions": conds,
            "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "startTime": run.start_time,
            "qosClass": qos,
            "initContainerStatuses": run.init.iter().map(Cs::json).collect::<Vec<_>>(),
            "containerStatuses": run.main.iter().map(Cs::json).collect::<Vec<_>>(),
        })
    }
}

async fn stopped(rx: &mut watch::Receiver<Stop>) -> Stop {
    match rx.wait_for(|s| *s != Stop::Run).await {
        Ok(v) => *v,
        Err(_) => Stop::Kill,
    }
}

/// Sleeps, or returns the stop request that came first.
async fn pause(rx: &mut watch::Receiver<Stop>, d: Duration) -> Option<Stop> {
    tokio::select! {
        _ = tokio::time::sleep(d) => None,
        s = stopped(rx) => Some(s),
    }
}

async fn write_status(ctx: Arc<PodCtx>) {
    let mut last = Value::Null;
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(1), ctx.changed.notified()).await;
        if !ctx.reaches_api() {
            // Nothing reaches the API server; once it does again, the whole
            // status is posted (the control plane may have changed it).
            last = Value::Null;
            continue;
        }
        let pod = ctx.pod();
        let status = ctx.status();
        if status != last {
            match patch_status(&ctx.store, "", "pods", &pod, &status) {
                Ok(p) => {
                    *lock(&ctx.pod) = p;
                    last = status;
                }
                Err(e) if e.code == 404 => return,
                Err(_) => {}
            }
        } else if let Ok(p) = ctx
            .store
            .get(&t("", "pods", ns_of(&pod)), s(&pod, "/metadata/name"))
            && p.pointer("/metadata/uid") == pod.pointer("/metadata/uid")
        {
            *lock(&ctx.pod) = p;
        }
        refresh_projections(&ctx);
    }
}

async fn run_pod(ctx: Arc<PodCtx>, mut rx: watch::Receiver<Stop>) {
    let writer = tokio::spawn(write_status(ctx.clone()));
    ctx.changed.notify_one();
    let how = lifecycle(&ctx, &mut rx).await;
    if how == Stop::Graceful {
        // Last status, then the kubelet confirms the deletion (once it
        // reaches the API server).
        while !ctx.reaches_api() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let pod = ctx.pod();
        let _ = patch_status(&ctx.store, "", "pods", &pod, &ctx.status());
        force_delete(&ctx.store, &pod);
    }
    writer.abort();
}

async fn lifecycle(ctx: &Arc<PodCtx>, rx: &mut watch::Receiver<Stop>) -> Stop {
    let volumes = loop {
        match prepare_volumes(ctx) {
            Ok(v) => break v,
            Err(msg) => {
                // Counted first: a guard in the `for` head would live for
                // the whole loop, and `update` locks the same mutex (a
                // worker thread of the runtime stuck for good).
                let containers = lock(&ctx.run).main.len();
                for i in 0..containers {
                    ctx.update(false, i, |c| {
                        c.state =
                            json!({"waiting": {"reason": "ContainerCreating", "message": msg}});
                    });
                }
                if let Some(s) = pause(rx, Duration::from_millis(500)).await {
                    return s;
                }
            }
        }
    };
    let pod = ctx.pod();
    let inits: Vec<Value> = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut backoff = ctx.opts.restart_backoff;
    for (i, c) in inits.iter().enumerate() {
        loop {
            if *rx.borrow() != Stop::Run {
                return *rx.borrow();
            }
            match run_once(ctx, true, i, c, &volumes, rx).await {
                Exit::Stopped(s) => return s,
                Exit::Code(0) => break,
                Exit::Code(_) | Exit::CreateFailed if ctx.policy() == "Never" => {
                    lock(&ctx.run).init_failed = true;
                    ctx.changed.notify_one();
                    return stopped(rx).await;
                }
                _ => {
                    ctx.update(true, i, |c| c.restart_count += 1);
                    if let Some(s) = pause(rx, backoff).await {
                        return s;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }
    lock(&ctx.run).initialized = true;
    ctx.changed.notify_one();
    let containers: Vec<Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let sups: Vec<JoinHandle<()>> = containers
        .into_iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(supervise(ctx.clone(), i, c, volumes.clone(), rx.clone())))
        .collect();
    let how = stopped(rx).await;
    for s in sups {
        let _ = s.await;
    }
    how
}

enum Exit {
    Code(i32),
    CreateFailed,
    Stopped(Stop),
}

async fn supervise(
    ctx: Arc<PodCtx>,
    idx: usize,
    c: Value,
    volumes: HashMap<String, PathBuf>,
    mut rx: watch::Receiver<Stop>,
) {
    let mut backoff = ctx.opts.restart_backoff;
    loop {
        let began = Instant::now();
        let exit = run_once(&ctx, false, idx, &c, &volumes, &mut rx).await;
        let code = match exit {
            Exit::Stopped(_) => return,
            Exit::Code(code) => Some(code),
            Exit::CreateFailed => None,
        };
        let restart = match ctx.policy().as_str() {
            "Never" => false,
            "OnFailure" => code != Some(0),
            _ => true,
        };
        if !restart {
            let _ = stopped(&mut rx).await;
            return;
        }
        if began.elapsed() > Duration::from_secs(10) {
            backoff = ctx.opts.restart_backoff;
        }
        if code.is_some() {
            ctx.update(false, idx, |cs| {
                cs.last_state = cs.state.clone();
                cs.state = json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off {}ms restarting failed container={}", backoff.as_millis(), cs.name)}});
                cs.restart_count += 1;
            });
        }
        if pause(&mut rx, backoff).await.is_some() {
            return;
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Starts a container, runs it (with its probes) until it exits or the pod
/// stops, and records its states.
async fn run_once(
    ctx: &Arc<PodCtx>,
    init: bool,
    idx: usize,
    c: &Value,
    volumes: &HashMap<String, PathBuf>,
    rx: &mut watch::Receiver<Stop>,
) -> Exit {
    let restart = {
        let run = lock(&ctx.run);
        let list = if init { &run.init } else { &run.main };
        list.get(idx).map_or(0, |c| c.restart_count)
    };
    // The kubelet checks the security context before it creates anything.
    let image = classify(s(c, "/image"), &ctx.opts.operator_images);
    let identity = match security::identity(&ctx.pod(), c, &images::info(&image)) {
        Ok(id) => id,
        Err(msg) => {
            ctx.update(init, idx, |cs| {
                cs.state =
                    json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}});
            });
            return Exit::CreateFailed;
        }
    };
    let mut running = match start_container(ctx, c, &image, &identity, volumes, restart).await {
        Ok(r) => r,
        Err(msg) => {
            ctx.update(init, idx, |cs| {
                cs.state = json!({"waiting": {"reason": "CreateContainerError", "message": msg}});
            });
            return Exit::CreateFailed;
        }
    };
    let name = s(c, "/name").to_string();
    lock(&ctx.procs).insert(name.clone(), (running.outer, running.inner));
    let started_at = now_rfc3339();
    let has_readiness = c.get("readinessProbe").is_some() && !init;
    let startup_probe = c.get("startupProbe").filter(|_| !init).cloned();
    ctx.update(init, idx, |cs| {
        cs.state = json!({"running": {"startedAt": started_at}});
        cs.started = startup_probe.is_none();
        // Not ready before it has started (startup probe).
        cs.ready = !has_readiness && !init && startup_probe.is_none();
        cs.container_id = format!("kubesim://{}", running.inner);
    });
    let target = probes::Target {
        pod_ip: ctx.ip.clone(),
        pid: running.inner,
        env: running.env.clone(),
        ports: c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.get("name")?.as_str()?.to_string(),
                    u16::try_from(p.get("containerPort")?.as_u64()?).ok()?,
                ))
            })
            .collect(),
        identity: running.identity.clone(),
    };
    let (live_tx, mut live_rx) = tokio::sync::mpsc::channel::<()>(1);
    let probe_tasks: Vec<JoinHandle<()>> = if init {
        Vec::new()
    } else {
        vec![tokio::spawn(run_probes(
            ctx.clone(),
            idx,
            c.clone(),
            startup_probe,
            target.clone(),
            live_tx,
        ))]
    };
    let outcome = tokio::select! {
        st = running.child.wait() => Ok(st),
        s = stopped(rx) => Err(Some(s)),
        _ = live_rx.recv() => Err(None),
    };
    for p in &probe_tasks {
        p.abort();
    }
    let status = match outcome {
        Ok(st) => st.ok(),
        Err(how) => {
            let graceful = how != Some(Stop::Kill);
            terminate(ctx, c, &mut running, &target, graceful).await
        }
    };
    lock(&ctx.procs).remove(&name);
    report_death(ctx, c, volumes);
    let code = status.map_or(137, |st| {
        use std::os::unix::process::ExitStatusExt;
        st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(9))
    });
    let finished = now_rfc3339();
    ctx.update(init, idx, |cs| {
        let started = cs
            .state
            .pointer("/running/startedAt")
            .cloned()
            .unwrap_or(json!(null));
        cs.state = json!({"terminated": {"exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started, "finishedAt": finished, "containerID": cs.container_id}});
        cs.ready = false;
        cs.started = false;
    });
    match outcome_stop(rx) {
        Some(s) => Exit::Stopped(s),
        None => Exit::Code(code),
    }
}

/// A database container is gone: the ring hears it at once.
fn report_death(ctx: &PodCtx, c: &Value, volumes: &HashMap<String, PathBuf>) {
    let Some(ring) = &ctx.ring else { return };
    if !matches!(
        classify(s(c, "/image"), &ctx.opts.operator_images),
        Image::Database { .. }
    ) {
        return;
    }
    let mounted: Vec<PathBuf> = c
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| volumes.get(s(m, "/name")).map(|h| h.join(s(m, "/subPath"))))
        .collect();
    deaths::report(ring, &ctx.ip, &mounted);
}

/// The container's probes: the startup probe first (a failure kills the
/// container), then readiness and liveness together. Runs until the
/// container ends (its task is aborted then), holding `live_tx` open: a
/// closed channel would read as a liveness failure.
async fn run_probes(
    ctx: Arc<PodCtx>,
    idx: usize,
    c: Value,
    startup_probe: Option<Value>,
    target: probes::Target,
    live_tx: tokio::sync::mpsc::Sender<()>,
) {
    if let Some(p) = startup_probe {
        if !startup::passes(&p, &target, ctx.opts.max_probe_period).await {
            let _ = live_tx.send(()).await;
            return;
        }
        let ready = c.get("readinessProbe").is_none();
        ctx.update(false, idx, |cs| {
            cs.started = true;
            cs.ready = ready;
        });
    }
    let readiness = c
        .get("readinessProbe")
        .cloned()
        .map(|p| probe_loop(ctx.clone(), idx, p, target.clone(), None));
    let liveness = c
        .get("livenessProbe")
        .cloned()
        .map(|p| probe_loop(ctx.clone(), idx, p, target.clone(), Some(live_tx.clone())));
    tokio::join!(
        async {
            if let Some(r) = readiness {
                r.await;
            }
        },
        async {
            if let Some(l) = liveness {
                l.await;
            }
        }
    );
    std::future::pending::<()>().await;
    drop(live_tx);
}

fn outcome_stop(rx: &watch::Receiver<Stop>) -> Option<Stop> {
    let s = *rx.borrow();
    (s != Stop::Run).then_some(s)
}

async fn probe_loop(
    ctx: Arc<PodCtx>,
    idx: usize,
    probe: Value,
    target: probes::Target,
    liveness: Option<tokio::sync::mpsc::Sender<()>>,
) {
    let timing = startup::capped(&probe, ctx.opts.max_probe_period);
    tokio::time::sleep(timing.initial_delay).await;
    let (mut ok_run, mut fail_run) = (0u32, 0u32);
    loop {
        if ctx.kubelets.frozen(&ctx.node_uid) {
            // The kubelet is frozen with its machine: no probe runs.
            tokio::time::sleep(timing.period).await;
            continue;
        }
        let ok = probes::run(&probe, &target, timing.timeout).await;
        if ok {
            ok_run += 1;
            fail_run = 0;
        } else {
            fail_run += 1;
            ok_run = 0;
        }
        match &liveness {
            Some(tx) => {
                if fail_run >= timing.failure_threshold {
                    let _ = tx.send(()).await;
                    return;
                }
            }
            None => {
                if ok_run >= timing.success_threshold {
                    ctx.update(false, idx, |c| c.ready = true);
                } else if fail_run >= timing.failure_threshold {
                    ctx.update(false, idx, |c| c.ready = false);
                }
            }
        }
        tokio::time::sleep(timing.period).await;
    }
}

/// Stops a container: preStop and SIGTERM then SIGKILL after the grace
/// period (graceful), or SIGKILL at once.
async fn terminate(
    ctx: &Arc<PodCtx>,
    c: &Value,
    running: &mut Running,
    target: &probes::Target,
    graceful: bool,
) -> Option<std::process::ExitStatus> {
    if graceful {
        let began = Instant::now();
        let deadline = began + ctx.grace();
        if let Some(h) = c.pointer("/lifecycle/preStop") {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(argv) = h.pointer("/exec/command").and_then(Value::as_array) {
                let argv: Vec<String> = argv
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect();
                let _ = probes::exec(&argv, target, left).await;
            } else {
                let _ = probes::run(h, target, left).await;
            }
        }
        running.inner = container::container_init(running.outer, running.inner);
        signal(running.inner, Signal::SIGTERM);
        // A later DELETE may shorten the grace (never lengthen it): look
        // again while waiting, as the kubelet's pod worker does.
        let mut deadline = deadline;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_millis(250));
            if let Ok(st) = tokio::time::timeout(step, running.child.wait()).await {
                return st.ok();
            }
            if left <= step {
                break;
            }
            deadline = deadline.min(began + ctx.grace());
        }
    }
    signal(
        container::container_init(running.outer, running.inner),
        Signal::SIGKILL,
    );
    signal(running.outer, Signal::SIGKILL);
    running.child.wait().await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images() {
        assert_eq!(
            classify("cassandra:3.11.1", &[]),
            Image::Database {
                kind: "cassandra".into(),
                tag: "3.11.1".into()
            }
        );
        assert_eq!(
            classify("scylladb/scylla:5.4", &[]),
            Image::Database {
                kind: "scylla".into(),
                tag: "5.4".into()
            }
        );
        assert_eq!(
            classify(
                "example.com:5000/ops/op:1.0",
                &["example.com:5000/ops/op".into()]
            ),
            Image::Operator
        );
        assert_eq!(classify("busybox", &[]), Image::Other);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
        if root.is_dir() {
            assert_eq!(
                fixtures_dir(&root, "cassandra", "3.11.1"),
                Some(root.join("cassandra/3.11"))
            );
            assert_eq!(
                fixtures_dir(&root, "cassandra", "latest"),
                Some(root.join("cassandra/5.0"))
            );
            assert_eq!(fixtures_dir(&root, "cassandra", "2.2.0"), None);
        }
    }

    #[test]
    fn env_expansion_and_downward_api() {
        let env = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)", &env), "x-$(B)-$(A)");
        let pod = json!({"metadata": {"name": "p", "namespace": "n", "labels": {"app.kubernetes.io/name": "c"}},
            "spec": {"nodeName": "node-a-0", "containers": [{"name": "c", "resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}}}]}});
        assert_eq!(
            field_value(&pod, "metadata.name", "127.1.0.1", "h").as_deref(),
            Some("p")
        );
        assert_eq!(
            field_value(&pod, "metadata.labels['app.kubernetes.io/name']", "", "").as_deref(),
            Some("c")
        );
        assert_eq!(
            field_value(&pod, "status.podIP", "127.1.0.1", "h").as_deref(),
            Some("127.1.0.1")
        );
        let c = pod["spec"]["containers"][0].clone();
        let alloc = json!({"cpu": "8", "memory": "32Gi"});
        assert_eq!(
            resource_value(&pod, &c, &json!({"resource": "limits.cpu"}), &alloc).as_deref(),
            Some("2")
        );
        assert_eq!(
            resource_value(&pod, &c, &json!({"resource": "limits.memory"}), &alloc).as_deref(),
            Some("2147483648")
        );
        let bare = json!({"name": "d"});
        assert_eq!(
            resource_value(&pod, &bare, &json!({"resource": "limits.cpu"}), &alloc).as_deref(),
            Some("8")
        );
        assert_eq!(
            String::from_utf8(format_map(pod.pointer("/metadata/labels"))).unwrap(),
            "app.kubernetes.io/name=\"c\""
        );
    }

    #[test]
    fn atomic_projection() {
        let dir = tempfile::tempdir().unwrap();
        let files = BTreeMap::from([("a".to_string(), b"1".to_vec())]);
        assert!(project(dir.path(), &files).unwrap());
        let first = std::fs::read_link(dir.path().join("..data")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"1");
        assert!(!project(dir.path(), &files).unwrap(), "unchanged: no write");
        let files = BTreeMap::from([("b".to_string(), b"2".to_vec())]);
        assert!(project(dir.path(), &files).unwrap());
        assert_ne!(
            std::fs::read_link(dir.path().join("..data")).unwrap(),
            first
        );
        assert!(!dir.path().join("a").exists());
        assert!(!dir.path().join(first).exists(), "the old data goes");
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"2");
        assert_eq!(
            std::fs::read_link(dir.path().join("b")).unwrap(),
            Path::new("..data/b")
        );
    }

    #[test]
    fn phases() {
        let pod = json!({"spec": {"containers": [{"name": "c"}]}});
        let mut run = PodRun::new(&pod);
        assert_eq!(run.phase("Always"), "Pending");
        run.main[0].state = json!({"running": {}});
        assert_eq!(run.phase("Always"), "Running");
        run.main[0].state = json!({"terminated": {"exitCode": 1}});
        assert_eq!(run.phase("Never"), "Failed");
        assert_eq!(run.phase("Always"), "Running");
        run.main[0].state = json!({"terminated": {"exitCode": 0}});
        assert_eq!(run.phase("OnFailure"), "Succeeded");
    }
}
