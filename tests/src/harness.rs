//! One harness for everything that runs the real operator in the test
//! world (the end-to-end tests of the binary, the demo, the benchmarks):
//! where the fixtures and the binaries are, kubesim started with its
//! simulated cluster, the namespace and the CRD installed, the real
//! binary started as the controller beside it, and what a failing test
//! prints (the controller's log and every container's). I/O.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::kubesim::faults::{ProcessAction, WriteHook};
use crate::kubesim::sim::SimOptions;
use crate::kubesim::{KubeSim, Options};

/// What can go wrong while a world is set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("the Cassandra default files are not at {0} (shared/ must sit beside the repository)")]
    Fixtures(PathBuf),
    #[error("{0} is missing: build it first (cargo build --workspace --bins)")]
    Binary(PathBuf),
    #[error("the test world runs containers in their own namespaces as other users: run as root")]
    NotRoot,
    #[error("starting kubesim: {0}")]
    StartKubesim(#[source] std::io::Error),
    #[error("the kube client for kubesim: {0}")]
    Client(String),
    #[error("installing {what}: {source}")]
    Install {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("installing the operator's RBAC from manifests/operator.yaml: {0}")]
    OperatorRbac(String),
    #[error("starting the controller {binary}: {source}")]
    StartController {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The real default configuration files of Cassandra and ScyllaDB,
/// `shared/fixtures` beside the repository.
pub fn fixtures() -> Result<PathBuf, HarnessError> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures"
    ));
    fixtures_at(dir)
}

/// `dir` if it holds the fixtures.
pub fn fixtures_at(dir: PathBuf) -> Result<PathBuf, HarnessError> {
    if dir.join("cassandra/3.11/cassandra.yaml").is_file() {
        Ok(dir)
    } else {
        Err(HarnessError::Fixtures(dir))
    }
}

/// The test world needs root: say so at once rather than deep in a test.
pub fn require_root() -> Result<(), HarnessError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(HarnessError::NotRoot)
    }
}

/// A binary of the workspace beside `exe` (the operator, fake-cassandra).
pub fn beside(exe: &Path, name: &str) -> Result<PathBuf, HarnessError> {
    let path = exe.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::Binary(path))
    }
}

/// Ring timings for tests: streams of 300 ms; gossip tells a node of a
/// peer's (re)start after 0.75 to 1.5 s. Not shorter: in the test world a
/// restarted member is Ready about 0.5 s after its process started, and a
/// roll that waited only for readiness must be caught taking the next member
/// down while the others still see the last one DOWN (as on a loaded real
/// cluster, where gossip can take longer than the readiness probe).
pub fn fast_ring() -> crate::ring::Options {
    let mut ring = crate::ring::Options::default();
    ring.timing.bootstrap_ms = 300;
    ring.timing.decommission_ms = 300;
    ring.timing.replace_ms = 300;
    ring.timing.gossip_lag_ms = 1_500;
    ring
}

/// A world to start.
#[derive(Debug, Clone)]
pub struct WorldOptions {
    /// The operator binary under test (the controller, and the image's
    /// binary in the members).
    pub operator: PathBuf,
    pub fake_cassandra: PathBuf,
    pub fixtures: PathBuf,
    /// One zone per entry, `nodes_per_zone` Nodes each.
    pub zones: Vec<String>,
    pub nodes_per_zone: usize,
    pub ring: crate::ring::Options,
    /// Install the operator's ServiceAccount and RBAC from
    /// manifests/operator.yaml at start, so that the controller runs as it
    /// (default). Off for a test that installs the operator itself, as a
    /// user does; the controller then runs with the admin's kubeconfig.
    pub operator_rbac: bool,
    /// The factor on the control plane's node timings (the node monitor's
    /// grace period, taint-based eviction's tolerations): 0.02 by default,
    /// so that an unreachable Node is `Ready=Unknown` after 1 s and its
    /// Pods are evicted 6 s later.
    pub node_time_scale: f64,
    /// Hollow kubelets: Pods Ready at once, no processes (benchmarks at
    /// scale; see [`SimOptions::hollow`]).
    pub hollow: bool,
    /// Real Cassandra in the `cassandra:` images of fetched 4.1 and 5.0
    /// releases ([`SimOptions::real_cassandra`]); None: the fake in every
    /// one.
    pub real_cassandra: Option<crate::kubesim::sim::RealCassandra>,
    /// More repositories the world runs as the operator's image (besides
    /// the default's, [`SimOptions::operator_images`]): a user's own build
    /// pushed to their registry.
    pub operator_images: Vec<String>,
}

impl WorldOptions {
    /// Three Nodes in each of `zones`, fast ring timings.
    pub fn new(
        operator: PathBuf,
        fake_cassandra: PathBuf,
        fixtures: PathBuf,
        zones: &[&str],
    ) -> Self {
        WorldOptions {
            operator,
            fake_cassandra,
            fixtures,
            zones: zones.iter().map(|z| z.to_string()).collect(),
            nodes_per_zone: 3,
            ring: fast_ring(),
            operator_rbac: true,
            node_time_scale: 0.02,
            hollow: false,
            real_cassandra: None,
            operator_images: Vec::new(),
        }
    }
}

/// A running world: kubesim with its simulated cluster, a work directory
/// (Pods' files, logs, the kubeconfig), and a client. Dropping it stops
/// every container and kubesim.
pub struct World {
    pub sim: KubeSim,
    pub client: Client,
    /// The admin's kubeconfig (the tests' own).
    pub kubeconfig: PathBuf,
    /// The operator's ServiceAccount's kubeconfig (the controller's).
    pub operator_kubeconfig: PathBuf,
    operator: PathBuf,
}

impl World {
    /// Starts kubesim with the simulated cluster in `work`, with the
    /// grace periods and probe periods of tests (10 s, 500 ms).
    pub async fn start(opts: WorldOptions, work: &Path) -> Result<World, HarnessError> {
        require_root()?;
        for binary in [&opts.operator, &opts.fake_cassandra] {
            if !binary.is_file() {
                return Err(HarnessError::Binary(binary.clone()));
            }
        }
        let mut sim = SimOptions::new(work);
        sim.operator_binary = Some(opts.operator.clone());
        sim.fake_cassandra = Some(opts.fake_cassandra);
        sim.fixtures = Some(opts.fixtures);
        sim.max_grace = Some(Duration::from_secs(10));
        sim.max_probe_period = Some(Duration::from_millis(500));
        sim.node_time_scale = opts.node_time_scale;
        sim.hollow = opts.hollow;
        sim.real_cassandra = opts.real_cassandra;
        sim.operator_images.extend(opts.operator_images);
        let sim = KubeSim::start(Options {
            zones: opts.zones,
            nodes_per_zone: opts.nodes_per_zone,
            ring: opts.ring,
            sim: Some(sim),
            ..Default::default()
        })
        .await
        .map_err(HarnessError::StartKubesim)?;
        let kubeconfig = sim
            .write_kubeconfig(work)
            .map_err(HarnessError::StartKubesim)?;
        let operator_kubeconfig = if opts.operator_rbac {
            install_operator_rbac(&sim, work)?
        } else {
            kubeconfig.clone()
        };
        let client = client(&sim).await?;
        // The controller too runs the image's binary when scripts/test built
        // the image (what ships is what is tested), as the operator's Pod
        // and the members do.
        let operator = crate::kubesim::sim::image_binary(Some(opts.operator.clone()))
            .map_err(HarnessError::StartKubesim)?
            .unwrap_or(opts.operator);
        Ok(World {
            sim,
            client,
            kubeconfig,
            operator_kubeconfig,
            operator,
        })
    }

    /// Creates `namespace` (if missing) and the Cluster CRD. The namespace
    /// enforces Pod Security "restricted", as the examples' do: the
    /// members must meet it.
    pub async fn install(&self, namespace: &str) -> Result<(), HarnessError> {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
        .expect("a namespace");
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => {
                return Err(HarnessError::Install {
                    what: "the namespace",
                    source,
                });
            }
        }
        match Api::<CustomResourceDefinition>::all(self.client.clone())
            .create(&PostParams::default(), &crds::crd::definition())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(source) => Err(HarnessError::Install {
                what: "the CRD",
                source,
            }),
        }
    }

    /// The real binary as the controller, a host process beside kubesim,
    /// authenticated as the operator's ServiceAccount (and so authorized
    /// by manifests/operator.yaml's ClusterRole alone), on its production
    /// metrics address unless `metrics` names one; its log (stderr) in
    /// `log`.
    pub fn start_controller(
        &self,
        log: &Path,
        metrics: Option<&str>,
    ) -> Result<Process, HarnessError> {
        self.start_controller_with(log, metrics, &[])
    }

    /// [`World::start_controller`] with extra arguments to `controller`
    /// (e.g. `--member-restart-timeout-seconds 5`).
    pub fn start_controller_with(
        &self,
        log: &Path,
        metrics: Option<&str>,
        args: &[&str],
    ) -> Result<Process, HarnessError> {
        let failed = |source| HarnessError::StartController {
            binary: self.operator.clone(),
            source,
        };
        // The namespace of the operator's install keeps the CAs of TLS
        // clusters: there unless the world installs none (then made here,
        // as an admin's install would).
        let (operator_namespace, _) = OPERATOR_ACCOUNT;
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": operator_namespace}});
        let t = crate::kubesim::store::Target::new("", "v1", "namespaces", None);
        match self.sim.store().create(&t, namespace, &Default::default()) {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => {
                return Err(failed(std::io::Error::other(format!(
                    "creating namespace {operator_namespace}: {e}"
                ))));
            }
        }
        let mut cmd = Command::new(&self.operator);
        cmd.arg("controller")
            .args(["--operator-namespace", operator_namespace])
            .args(args)
            .env("KUBECONFIG", &self.operator_kubeconfig)
            .env_remove("METRICS_ADDR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).map_err(failed)?);
        if let Some(addr) = metrics {
            cmd.env("METRICS_ADDR", addr);
        }
        cmd.spawn().map(Process).map_err(failed)
    }
}

/// The operator's install manifest.
pub const OPERATOR_MANIFEST: &str = include_str!("../../manifests/operator.yaml");

/// The ServiceAccount the operator runs as: (namespace, name).
pub const OPERATOR_ACCOUNT: (&str, &str) = ("cassandra-operator", "cassandra-operator");

/// The objects of a multi-document YAML manifest.
pub fn manifest_objects(text: &str) -> Result<Vec<serde_json::Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v = serde_json::Value::deserialize(doc).map_err(|e| e.to_string())?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// A manifest object's `apiVersion` as (group, version); the core group
/// is "".
pub fn group_version(object: &serde_json::Value) -> (String, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

/// Installs what manifests/operator.yaml installs but the Deployment (the
/// tests run the controller as a host process beside kubesim): its
/// Namespace, ServiceAccount, ClusterRole and ClusterRoleBinding, as an
/// admin's `kubectl apply` would; then writes `dir/operator-kubeconfig`,
/// whose user is that ServiceAccount (a day's token from the TokenRequest
/// API), and returns its path.
pub fn install_operator_rbac(sim: &KubeSim, dir: &Path) -> Result<PathBuf, HarnessError> {
    let failed = |e: String| HarnessError::OperatorRbac(e);
    for obj in manifest_objects(OPERATOR_MANIFEST).map_err(failed)? {
        let (group, version) = group_version(&obj);
        let plural = match obj["kind"].as_str().unwrap_or_default() {
            "Namespace" => "namespaces",
            "ServiceAccount" => "serviceaccounts",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            // The members' admission policy, as `kubectl apply -k manifests/`
            // installs it.
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
            _ => continue,
        };
        let ns = obj.pointer("/metadata/namespace").and_then(|n| n.as_str());
        let t = crate::kubesim::store::Target::new(&group, &version, plural, ns);
        match sim.store().create(&t, obj.clone(), &Default::default()) {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    let (ns, sa) = OPERATOR_ACCOUNT;
    let token = sim
        .create_token(ns, sa, 24 * 3600)
        .map_err(|e| failed(e.to_string()))?;
    let path = dir.join("operator-kubeconfig");
    std::fs::write(&path, sim.kubeconfig_with_token(&token)).map_err(|e| failed(e.to_string()))?;
    Ok(path)
}

/// The user the controller's requests are made as (its ServiceAccount).
pub fn operator_user() -> String {
    let (ns, sa) = OPERATOR_ACCOUNT;
    format!("system:serviceaccount:{ns}:{sa}")
}

impl World {
    /// Crashes `process` (SIGKILL) right after the `nth` (from 1) write by
    /// `user` (None: anyone; [`operator_user`] for the controller) with
    /// `verb` on `resource` (the plural; `plural/subresource` for a
    /// subresource's writes, e.g. `clusters/status`) named `name` (None:
    /// any) has committed, before the writer sees the response: for tests
    /// that crash the controller after each write of a scenario in turn.
    /// Fires once.
    pub fn crash_on_write(
        &self,
        process: &Process,
        user: Option<&str>,
        verb: &str,
        resource: &str,
        name: Option<&str>,
        nth: u32,
    ) {
        self.hook(
            process,
            user,
            verb,
            resource,
            name,
            None,
            nth,
            ProcessAction::Kill,
        );
    }

    /// As [`World::crash_on_write`], counting only writes whose committed
    /// object, as JSON text, contains `contains` (e.g.
    /// `"reason":"MemberReplaced"` for one Event among the writer's many).
    #[allow(clippy::too_many_arguments)]
    pub fn crash_on_write_containing(
        &self,
        process: &Process,
        user: Option<&str>,
        verb: &str,
        resource: &str,
        name: Option<&str>,
        contains: &str,
        nth: u32,
    ) {
        self.hook(
            process,
            user,
            verb,
            resource,
            name,
            Some(contains),
            nth,
            ProcessAction::Kill,
        );
    }

    /// As [`World::crash_on_write`], but freezes the process (SIGSTOP);
    /// [`Process::resume`] thaws it.
    pub fn freeze_on_write(
        &self,
        process: &Process,
        user: Option<&str>,
        verb: &str,
        resource: &str,
        name: Option<&str>,
        nth: u32,
    ) {
        self.hook(
            process,
            user,
            verb,
            resource,
            name,
            None,
            nth,
            ProcessAction::Freeze,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn hook(
        &self,
        process: &Process,
        user: Option<&str>,
        verb: &str,
        resource: &str,
        name: Option<&str>,
        contains: Option<&str>,
        nth: u32,
        action: ProcessAction,
    ) {
        self.sim.on_write(WriteHook {
            pid: process.0.id(),
            verb: verb.into(),
            resource: resource.into(),
            name: name.map(str::to_string),
            user: user.map(str::to_string),
            contains: contains.map(str::to_string),
            nth,
            action,
        });
    }
}

/// A kube client through kubesim's kubeconfig.
pub async fn client(sim: &KubeSim) -> Result<Client, HarnessError> {
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig())
        .map_err(|e| HarnessError::Client(e.to_string()))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| HarnessError::Client(e.to_string()))?;
    Client::try_from(cfg).map_err(|e| HarnessError::Client(e.to_string()))
}

/// A child process killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Process(pub Child);

impl Process {
    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// Thaws a frozen process (SIGCONT).
    pub fn resume(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`, `RssFile:`).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User and system CPU seconds of a process (`/proc/<pid>/stat`; USER_HZ
/// is 100 on Linux).
pub fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command may hold spaces: the fields after its closing ")",
    // where utime and stime (fields 14 and 15) are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The last 15 lines of a file.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The tails of every container log under a sim's work directory
/// (`pods/<pod>/logs/<container>/<restart>.log`).
pub fn container_logs(work: &Path) -> String {
    let mut out = String::new();
    let Ok(pods) = std::fs::read_dir(work.join("pods")) else {
        return out;
    };
    for pod in pods.flatten() {
        let Ok(containers) = std::fs::read_dir(pod.path().join("logs")) else {
            continue;
        };
        for container in containers.flatten() {
            let Ok(logs) = std::fs::read_dir(container.path()) else {
                continue;
            };
            for log in logs.flatten() {
                out.push_str(&format!(
                    "--- {}\n{}\n",
                    log.path().display(),
                    tail(&log.path())
                ));
            }
        }
    }
    out
}

/// The Pods of the `default` namespace, as kubesim's store names them.
pub fn pods() -> crate::kubesim::store::Target {
    crate::kubesim::store::Target::new("", "v1", "pods", Some("default"))
}

/// The string at a JSON pointer of an object ("" when absent).
pub fn str_at<'a>(object: &'a serde_json::Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

/// Polls `f` every 20 ms until it gives a value; fails the test, naming
/// `what`, after `secs` seconds.
pub async fn until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the asynchronous `f` (an API read, say) every 100 ms until it
/// gives a value; fails the test, naming `what`, after `secs` seconds.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kubectl.<version>` (`1.27` ... `1.33`) beside the machine's real
/// `kubectl` (the Google Cloud SDK ships the versioned binaries).
pub fn kubectl_binary(version: &str) -> PathBuf {
    let which = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .expect("sh runs");
    let path = PathBuf::from(String::from_utf8_lossy(&which.stdout).trim());
    let versioned = path.with_file_name(format!("kubectl.{version}"));
    assert!(
        versioned.is_file(),
        "{} is missing: the machine image's Google Cloud SDK ships kubectl.1.27 to kubectl.1.33",
        versioned.display()
    );
    versioned
}
