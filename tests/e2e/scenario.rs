//! The end-to-end tests' vocabulary: a [`Scenario`] is the test world with
//! the real binary as the controller, one namespace, and a safety watch
//! that is checked when the scenario ends; its waits say what they wait
//! for and, when they time out, show the world (the ring, the controller's
//! log, the containers' logs). [`cluster`] builds the Clusters the tests
//! create, [`until`] is the one polling loop.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use testworld::harness::{self, World, WorldOptions, container_logs, tail};
use testworld::kubesim::KubeSim;
use testworld::ring::{CheckReport, Consistency, NodeStatus, Replication};

use crate::safety::SafetyWatch;

/// What a probe of [`until`] answers: done (with a value), or not yet
/// (with what it saw, for the failure message).
pub(crate) trait Outcome {
    type Value;
    fn done(self) -> Result<Self::Value, String>;
}

impl Outcome for bool {
    type Value = ();
    fn done(self) -> Result<(), String> {
        if self { Ok(()) } else { Err(String::new()) }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T> Outcome for Result<T, String> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self
    }
}

/// Polls `probe` every 100 ms until it is done and returns its value;
/// after `timeout`, fails the test with `what`, the probe's last answer and
/// `context()` (what the world looked like).
pub(crate) async fn until_with<O, F, Fut>(
    what: &str,
    timeout: Duration,
    mut probe: F,
    context: impl FnOnce() -> String,
) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await.done() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\nlast seen: {last}\n{}",
                context()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`until_with`] with no context beyond the probe's last answer.
pub(crate) async fn until<O, F, Fut>(what: &str, timeout: Duration, probe: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    until_with(what, timeout, probe, String::new).await
}

/// Seconds, for the waits.
pub(crate) const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A Cluster as the tests create it: [`cluster`]`("c").version(..).rack(..)`.
#[derive(Clone)]
pub(crate) struct ClusterSpec {
    name: String,
    namespace: String,
    version: String,
    datacenter: String,
    racks: Vec<Value>,
    extra: Value,
}

/// A rack's overrides ConfigMap `name` in namespace `db` (the scenarios'
/// default), whose `cassandra.yaml` fragment is `text`.
pub(crate) fn overrides(name: &str, text: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "db"},
        "data": {"cassandra.yaml": text}
    }))
    .unwrap()
}

/// A Cluster named `name` in namespace `db`, datacenter `dc`, Cassandra
/// 4.1.8, no racks yet.
pub(crate) fn cluster(name: &str) -> ClusterSpec {
    ClusterSpec {
        name: name.into(),
        namespace: "db".into(),
        version: "4.1.8".into(),
        datacenter: "dc".into(),
        racks: Vec::new(),
        extra: json!({}),
    }
}

/// A rack's spec: 1Gi claims of class `standard`, 1 CPU and 1Gi.
fn rack_spec(name: &str, members: i32) -> Value {
    json!({"name": name, "members": members,
        "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
}

/// Requires a rack's members to run in `zone`.
fn in_zone(rack: &mut Value, zone: &str) {
    rack["placement"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}});
}

/// Merges `patch` into `target` (RFC 7386: objects merge, `null`
/// removes, anything else replaces).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().expect("an object");
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

impl ClusterSpec {
    pub(crate) fn version(mut self, version: &str) -> Self {
        self.version = version.into();
        self
    }

    pub(crate) fn datacenter(mut self, name: &str) -> Self {
        self.datacenter = name.into();
        self
    }

    /// A rack of `members`, anywhere.
    pub(crate) fn rack(mut self, name: &str, members: i32) -> Self {
        self.racks.push(rack_spec(name, members));
        self
    }

    /// A rack of `members` in the zone of its name.
    pub(crate) fn zone_rack(mut self, zone: &str, members: i32) -> Self {
        let mut rack = rack_spec(zone, members);
        in_zone(&mut rack, zone);
        self.racks.push(rack);
        self
    }

    /// Merges `patch` into the last rack added (`configMapName`, say).
    pub(crate) fn with_rack(mut self, patch: Value) -> Self {
        let rack = self.racks.last_mut().expect("a rack to patch");
        merge(rack, &patch);
        self
    }

    /// Merges `patch` into the Cluster's `spec` (`mode`, `annotations`...).
    pub(crate) fn with_spec(mut self, patch: Value) -> Self {
        merge(&mut self.extra, &patch);
        self
    }

    pub(crate) fn json(&self) -> Value {
        let mut spec = json!({"version": self.version,
            "datacenter": {"name": self.datacenter, "racks": self.racks}});
        merge(&mut spec, &self.extra);
        json!({
            "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec
        })
    }

    pub(crate) fn build(&self) -> Cluster {
        serde_json::from_value(self.json()).expect("a valid Cluster")
    }

    /// The racks, as a merge patch of the Cluster's `spec.datacenter` takes
    /// them (the whole list).
    pub(crate) fn racks_patch(&self) -> Value {
        json!({"spec": {"datacenter": {"name": self.datacenter, "racks": self.racks}}})
    }
}

impl From<&ClusterSpec> for Cluster {
    fn from(spec: &ClusterSpec) -> Cluster {
        spec.build()
    }
}

impl From<ClusterSpec> for Cluster {
    fn from(spec: ClusterSpec) -> Cluster {
        spec.build()
    }
}

/// The ring as the tests read it.
pub(crate) struct RingView<'a>(&'a KubeSim);

impl RingView<'_> {
    /// `nodetool status`, as text.
    pub(crate) fn text(&self) -> String {
        self.0
            .ring()
            .with(|r| r.status(None).map(|s| s.to_string()).unwrap_or_default())
    }

    /// The rows: (address, status).
    pub(crate) fn rows(&self) -> Vec<(String, NodeStatus)> {
        self.0.ring().with(|ring| {
            ring.status(None)
                .map(|s| {
                    s.rows
                        .iter()
                        .map(|r| (r.address.clone(), r.status))
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// How many nodes are Up and Normal.
    pub(crate) fn up(&self) -> usize {
        self.count(NodeStatus::UN)
    }

    pub(crate) fn count(&self, status: NodeStatus) -> usize {
        self.rows().iter().filter(|(_, s)| *s == status).count()
    }

    /// The data check: every key at its replication factor.
    pub(crate) fn check(&self) -> CheckReport {
        self.0.ring().with(|ring| ring.check())
    }

    /// Exactly `up` nodes Up and Normal, and no key lost or
    /// under-replicated.
    pub(crate) fn assert_intact(&self, up: usize) {
        let (n, report, text) = (self.up(), self.check(), self.text());
        assert_eq!(n, up, "nodes Up and Normal:\n{text}");
        assert!(
            report.is_clean(),
            "data lost or under-replicated:\n{report}\n{text}"
        );
    }

    /// A keyspace with `keys` keys named `<keyspace>-<n>`.
    pub(crate) fn write(
        &self,
        keyspace: &str,
        replication: Replication,
        keys: usize,
        consistency: Consistency,
    ) {
        self.0.ring().with(|ring| {
            ring.create_keyspace(keyspace, replication).unwrap();
            ring.write_keys(keyspace, keyspace, keys, consistency)
                .unwrap();
        });
    }
}

/// The ring of `sim`.
pub(crate) fn ring(sim: &KubeSim) -> RingView<'_> {
    RingView(sim)
}

/// Whether a Pod's Ready condition is true.
pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The host PID of a Pod's first container (`kubesim://<pid>`), if it runs.
pub(crate) fn container_pid(pod: &Pod) -> Option<i32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .container_id
        .as_deref()?
        .strip_prefix("kubesim://")?
        .parse()
        .ok()
}

/// SIGKILL to a host process.
pub(crate) fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// A label of an object's metadata.
pub(crate) fn label(meta: &kube::api::ObjectMeta, key: &str) -> Option<String> {
    meta.labels.as_ref()?.get(key).cloned()
}

/// An annotation of an object's metadata.
pub(crate) fn annotation(meta: &kube::api::ObjectMeta, key: &str) -> Option<String> {
    meta.annotations.as_ref()?.get(key).cloned()
}

/// Everything the containers of a Pod logged, every incarnation and restart
/// included, without terminal colours.
pub(crate) fn pod_logs(work: &Path, namespace: &str, pod: &str) -> String {
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
    let prefix = format!("{namespace}_{pod}_");
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
    strip_ansi(&out)
}

/// A log without its terminal colours (ESC [ ... letter).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
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

/// The test world with the controller, one namespace and a safety watch on
/// it. Dropping it stops everything; when the test has not already failed,
/// the safety watch is asserted first, so every scenario ends judged.
pub(crate) struct Scenario {
    pub(crate) world: World,
    pub(crate) namespace: String,
    /// The controller's metrics address (host:port).
    metrics: String,
    /// The metrics address of this scenario's own (one per world on the
    /// loopback interface): where a controller started without one serves.
    own_metrics: String,
    /// The log (stderr) of the controller's latest run:
    /// `controller.log`, then `controller-2.log`...
    pub(crate) log: PathBuf,
    runs: usize,
    controller: Option<harness::Process>,
    safety: SafetyWatch,
    // last: the work directory outlives the world
    work: tempfile::TempDir,
}

/// How a [`Scenario`] starts.
pub(crate) struct Setup {
    zones: Vec<String>,
    namespace: String,
    options: Box<dyn FnOnce(&mut WorldOptions)>,
    controller_args: Vec<String>,
    metrics: Option<String>,
}

/// A scenario with one zone (`a`), fast ring timings and namespace `db`.
pub(crate) fn setup() -> Setup {
    Setup {
        zones: vec!["a".into()],
        namespace: "db".into(),
        options: Box::new(|_| {}),
        controller_args: Vec::new(),
        metrics: None,
    }
}

impl Setup {
    /// Zones of 3 Nodes each.
    pub(crate) fn zones(mut self, zones: &[&str]) -> Self {
        self.zones = zones.iter().map(|z| z.to_string()).collect();
        self
    }

    pub(crate) fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The ring's options (its timings: fast by default).
    pub(crate) fn ring(self, ring: testworld::ring::Options) -> Self {
        self.options(move |o| o.ring = ring)
    }

    /// Changes the world's options before it starts.
    pub(crate) fn options(mut self, f: impl FnOnce(&mut WorldOptions) + 'static) -> Self {
        let before = self.options;
        self.options = Box::new(move |o| {
            before(o);
            f(o);
        });
        self
    }

    /// Arguments to `controller` (`--member-restart-timeout-seconds 5`).
    pub(crate) fn controller_args(mut self, args: &[&str]) -> Self {
        self.controller_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The controller's metrics address (the scenario's own on the
    /// loopback interface by default, port 8080).
    pub(crate) fn metrics(mut self, addr: &str) -> Self {
        self.metrics = Some(addr.into());
        self
    }

    /// Starts the world, installs the CRD and namespace, starts the
    /// controller and the safety watch.
    pub(crate) async fn start(self) -> Scenario {
        let mut work = tempfile::tempdir().unwrap();
        // E2E_KEEP=1: the work directory (logs, volumes) outlives the test,
        // to read what happened; its path is printed.
        if std::env::var_os("E2E_KEEP").is_some() {
            work.disable_cleanup(true);
            eprintln!("work directory kept: {}", work.path().display());
        }
        let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
        let fake = harness::beside(&operator, "fake-cassandra").unwrap();
        let zones: Vec<&str> = self.zones.iter().map(String::as_str).collect();
        let mut opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), &zones);
        opts.ring = harness::fast_ring();
        (self.options)(&mut opts);
        let real = opts.real_cassandra.is_some();
        let world = World::start(opts, work.path()).await.unwrap();
        world.install(&self.namespace).await.unwrap();
        let safety = SafetyWatch::start(&world.sim, &self.namespace, real);
        let mut scenario = Scenario {
            world,
            namespace: self.namespace,
            log: work.path().join("controller.log"),
            runs: 0,
            metrics: String::new(),
            own_metrics: crate::common::own_metrics_address(),
            controller: None,
            safety,
            work,
        };
        let args: Vec<&str> = self.controller_args.iter().map(String::as_str).collect();
        scenario.start_controller_with(self.metrics.as_deref(), &args);
        scenario
    }
}

impl Scenario {
    pub(crate) fn sim(&self) -> &KubeSim {
        &self.world.sim
    }

    pub(crate) fn client(&self) -> Client {
        self.world.client.clone()
    }

    /// The work directory: Pods' files and logs, volumes, kubeconfigs.
    pub(crate) fn work(&self) -> &Path {
        self.work.path()
    }

    /// The namespace's objects of kind `K`.
    pub(crate) fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        Api::namespaced(self.client(), &self.namespace)
    }

    pub(crate) fn clusters(&self) -> Api<Cluster> {
        self.api()
    }

    pub(crate) fn ring(&self) -> RingView<'_> {
        ring(&self.world.sim)
    }

    /// Starts the controller (again: a running one is stopped first), its
    /// log in a new [`Scenario::log`].
    pub(crate) fn start_controller_with(&mut self, metrics: Option<&str>, args: &[&str]) {
        self.controller = None;
        self.runs += 1;
        let metrics = metrics.unwrap_or(&self.own_metrics).to_string();
        self.metrics = metrics.replace("0.0.0.0", "127.0.0.1");
        self.log = match self.runs {
            1 => self.work().join("controller.log"),
            n => self.work().join(format!("controller-{n}.log")),
        };
        self.controller = Some(
            self.world
                .start_controller_with(&self.log, Some(&metrics), args)
                .unwrap(),
        );
    }

    pub(crate) fn start_controller(&mut self) {
        self.start_controller_with(None, &[]);
    }

    /// Stops the controller (SIGKILL, as a crash would).
    pub(crate) fn stop_controller(&mut self) {
        self.controller = None;
    }

    /// The running controller, to kill or freeze it.
    pub(crate) fn controller(&mut self) -> &mut harness::Process {
        self.controller.as_mut().expect("a running controller")
    }

    /// What the world looks like, for a failure message.
    pub(crate) fn context(&self) -> String {
        format!(
            "ring:\n{}\ncontroller log tail:\n{}\ncontainers:\n{}",
            self.ring().text(),
            tail(&self.log),
            container_logs(self.work())
        )
    }

    /// [`until`], showing the world when it times out.
    pub(crate) async fn until<O, F, Fut>(&self, what: &str, timeout: Duration, probe: F) -> O::Value
    where
        O: Outcome,
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
    {
        until_with(what, timeout, probe, || self.context()).await
    }

    /// Creates a Cluster (a [`cluster`] spec, or one built otherwise) in
    /// the scenario's namespace, retrying while the API server does not
    /// serve the freshly installed CRD yet.
    pub(crate) async fn create(&self, cluster: impl Into<Cluster>) {
        let mut cluster = cluster.into();
        cluster.metadata.namespace = Some(self.namespace.clone());
        crate::common::create_cluster(&self.clusters(), &cluster).await;
    }

    /// Merge-patches a Cluster.
    pub(crate) async fn patch_cluster(&self, name: &str, patch: Value) -> Cluster {
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap()
    }

    /// Waits until Cluster `name`'s status counts `members` members, all
    /// ready.
    pub(crate) async fn until_ready(&self, name: &str, members: i32, timeout: Duration) {
        let clusters = self.clusters();
        self.until(
            &format!("{members} ready members of Cluster {name}"),
            timeout,
            || async {
                let status = clusters.get(name).await.unwrap().status.unwrap_or_default();
                if status.members == members && status.ready_members == members {
                    Ok(())
                } else {
                    Err(format!(
                        "{}/{} ready; conditions {:?}",
                        status.ready_members, status.members, status.conditions
                    ))
                }
            },
        )
        .await
    }

    /// Waits until a reconcile has judged Cluster `name`'s latest spec: the
    /// conditions it wrote carry the spec's generation (the Kubernetes
    /// convention; `status.observedGeneration` itself moves only once the
    /// generation is done). What a test waits for before it asserts that
    /// a spec change made nothing happen.
    pub(crate) async fn until_observed(&self, name: &str, timeout: Duration) {
        let clusters = self.clusters();
        self.until(
            &format!("a reconcile of Cluster {name}'s latest generation"),
            timeout,
            || async {
                let c = clusters.get(name).await.unwrap();
                let judged = c.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .map(|c| c.observed_generation)
                        .min()
                        .flatten()
                });
                match (c.metadata.generation, judged) {
                    (Some(g), Some(o)) if o >= g => Ok(()),
                    (g, o) => Err(format!("generation {g:?}, conditions judged {o:?}")),
                }
            },
        )
        .await
    }

    /// The controller's metric `name` (the sum of its series), read from
    /// its metrics endpoint; `None` while it does not answer (always, for
    /// a controller started on a port of its choosing, `127.0.0.1:0`).
    pub(crate) fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = crate::common::http_get(&self.metrics, "/metrics")?;
        let series = text.lines().filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        });
        Some(
            series
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }

    /// How many reconciles the controller has started (waiting for its
    /// metrics to answer): what [`Scenario::until_reconciled`] counts from.
    pub(crate) async fn reconciles_started(&self) -> f64 {
        let total = "cassandra_operator_reconciles_total";
        self.until("the controller's metrics", secs(10), || async {
            self.metric(total)
        })
        .await
    }

    /// Waits until a reconcile that started after `started` (a
    /// [`Scenario::reconciles_started`] read before a change) has
    /// finished: reconciles of one Cluster run one at a time, and the
    /// reconcile-duration histogram counts those that finished. Proof that
    /// a reconcile ran after a change that bumps no generation (a
    /// ConfigMap's, an annotation's).
    pub(crate) async fn until_reconciled(&self, started: f64, timeout: Duration) {
        let finished = "cassandra_operator_reconcile_duration_seconds_count";
        self.until(
            &format!("a reconcile started after the {started}th to finish"),
            timeout,
            || async {
                match self.metric(finished) {
                    Some(v) if v > started => Ok(()),
                    v => Err(format!("{finished} {v:?}")),
                }
            },
        )
        .await
    }

    /// Waits until every Pod named is Ready (whether or not a controller
    /// runs).
    pub(crate) async fn until_pods_ready(&self, names: &[String], timeout: Duration) {
        let pods: Api<Pod> = self.api();
        self.until("the Pods to be Ready", timeout, || async {
            let mut unready = Vec::new();
            for name in names {
                if !pods
                    .get_opt(name)
                    .await
                    .unwrap()
                    .is_some_and(|p| pod_ready(&p))
                {
                    unready.push(name.clone());
                }
            }
            if unready.is_empty() {
                Ok(())
            } else {
                Err(format!("not Ready: {unready:?}"))
            }
        })
        .await
    }

    pub(crate) async fn service(&self, name: &str) -> Service {
        self.api::<Service>().get(name).await.unwrap()
    }

    pub(crate) async fn pod(&self, name: &str) -> Pod {
        self.api::<Pod>().get(name).await.unwrap()
    }

    /// Merge-patches a Service (its labels, say), as a person with kubectl
    /// would.
    pub(crate) async fn patch_service(&self, name: &str, patch: Value) {
        self.api::<Service>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits until a member's Service is gone (its decommission confirmed
    /// and its objects deleted).
    pub(crate) async fn until_service_gone(&self, name: &str, timeout: Duration) {
        let services: Api<Service> = self.api();
        self.until(&format!("{name}'s Service gone"), timeout, || async {
            services
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .map_or(Ok(()), |_| Err("still there".to_string()))
        })
        .await
    }

    /// Waits until the rack's `OverridesRefused` condition and a Warning
    /// Event both say `named` (the ConfigMap, the key and why).
    pub(crate) async fn until_overrides_refused(
        &self,
        cluster: &str,
        rack: &str,
        named: &str,
        timeout: Duration,
    ) {
        let events: Api<k8s_openapi::api::events::v1::Event> = self.api();
        self.until(
            "an OverridesRefused condition and Warning Event",
            timeout,
            || async {
                let cluster = self
                    .clusters()
                    .get(cluster)
                    .await
                    .map_err(|e| e.to_string())?;
                let condition = cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.racks.get(rack))
                    .and_then(|r| {
                        r.conditions
                            .iter()
                            .find(|c| c.type_ == crds::v1alpha1::RACK_CONDITION_OVERRIDES_REFUSED)
                    })
                    .and_then(|c| c.message.clone());
                let warned = events
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .any(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.reason.as_deref() == Some("OverridesRefused")
                            && e.note.as_deref().is_some_and(|n| n.contains(named))
                    });
                if condition.as_deref().is_some_and(|m| m.contains(named)) && warned {
                    Ok(())
                } else {
                    Err(format!("condition {condition:?}, warned {warned}"))
                }
            },
        )
        .await;
    }

    /// Waits until a Service's label `key` reads `value` and returns the
    /// Service.
    pub(crate) async fn until_label(
        &self,
        service: &str,
        key: &str,
        value: &str,
        timeout: Duration,
    ) -> Service {
        let services: Api<Service> = self.api();
        self.until(
            &format!("{service}'s label {key}={value}"),
            timeout,
            || async {
                let s = services.get(service).await.unwrap();
                match label(&s.metadata, key) {
                    Some(v) if v == value => Ok(s),
                    other => Err(format!("{key}={other:?}")),
                }
            },
        )
        .await
    }

    /// Waits until a Service carries annotation `key` and returns its value.
    pub(crate) async fn until_annotation(
        &self,
        service: &str,
        key: &str,
        timeout: Duration,
    ) -> String {
        self.until(
            &format!("{service}'s annotation {key}"),
            timeout,
            || async {
                let meta = self.service(service).await.metadata;
                annotation(&meta, key).ok_or_else(|| format!("annotations {:?}", meta.annotations))
            },
        )
        .await
    }

    /// Empties a member's data volume under it, as a lost local disk
    /// whose Node came back would.
    /// The member may still be writing into it (a flush, its commit log):
    /// a directory that gains a file while it is removed is removed again.
    pub(crate) async fn empty_data_volume(&self, pod: &str) {
        let volume = self.data_volume(pod).await;
        for attempt in 1.. {
            let mut raced = false;
            for entry in std::fs::read_dir(&volume).unwrap().flatten() {
                let path = entry.path();
                let removed = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                match removed {
                    Ok(()) => {}
                    Err(e)
                        if attempt < 20
                            && matches!(
                                e.kind(),
                                std::io::ErrorKind::DirectoryNotEmpty
                                    | std::io::ErrorKind::NotFound
                            ) =>
                    {
                        raced = true
                    }
                    Err(e) => panic!("emptying {}: {e}", path.display()),
                }
            }
            if !raced {
                return;
            }
        }
    }

    /// SIGKILLs a Pod's first container (its sidecar, PID 1 of the
    /// container; the kubelet restarts it) and returns its host PID.
    pub(crate) async fn kill_container(&self, pod: &str) -> i32 {
        let pid = container_pid(&self.pod(pod).await)
            .unwrap_or_else(|| panic!("{pod}: no running container"));
        sigkill(pid);
        pid
    }

    /// The host directory of a member's data volume.
    pub(crate) async fn data_volume(&self, pod: &str) -> PathBuf {
        let pvc = self
            .api::<PersistentVolumeClaim>()
            .get(&format!("data-{pod}"))
            .await
            .unwrap();
        let pv = pvc.spec.unwrap().volume_name.unwrap();
        self.work().join("pvs").join(pv)
    }

    /// Everything a member's containers logged.
    pub(crate) fn pod_logs(&self, pod: &str) -> String {
        pod_logs(self.work(), &self.namespace, pod)
    }

    /// Deletes Pods as the test's own act (a full outage, say): the safety
    /// watch excuses them.
    pub(crate) async fn delete_pods(&self, names: &[&str]) {
        self.safety.excuse(names);
        let pods: Api<Pod> = self.api();
        for name in names {
            pods.delete(name, &Default::default()).await.unwrap();
        }
    }

    /// Asserts the safety watch now (it is asserted again at the end).
    pub(crate) fn assert_safe(&self, context: &str) {
        self.safety.assert_safe(context);
    }

    /// The members of the rings the safety watch would judge a removal
    /// against now.
    pub(crate) fn safety_ring(&self) -> std::collections::BTreeSet<String> {
        self.safety.ring_members()
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.safety.assert_safe("at the end of the scenario");
        }
    }
}
