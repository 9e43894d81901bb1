//! What the integration tests share (each test binary compiles this
//! module on its own, so items one binary leaves unused are allowed where
//! it is declared): kube clients and the real kubectl through kubesim's
//! kubeconfigs, an API error's Status, a simulated cluster's start,
//! ServiceAccounts with a Role, Pods' readiness and processes, polling
//! with a reason, and fake database nodes as child processes.
//! Set-up and I/O; the tests' assertions stay in the tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use testworld::harness::{kubectl_binary, pods, str_at as s, until};
use testworld::kubesim::sim::SimOptions;
use testworld::kubesim::store::{Store, Target, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

/// A kube client through `kubeconfig`, with kube's default retries of
/// 429, 503 and 504.
pub async fn client_for(kubeconfig: &str) -> Client {
    Client::try_from(config(kubeconfig).await).expect("a client")
}

/// [`client_for`] without the retries: a fault's first answer is the
/// answer.
pub async fn client_without_retries(kubeconfig: &str) -> Client {
    let mut cfg = config(kubeconfig).await;
    cfg.default_retry = false;
    Client::try_from(cfg).expect("a client")
}

async fn config(kubeconfig: &str) -> kube::Config {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("a valid kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube reads the kubeconfig")
}

/// The Status of an API error; fails the test on any other error.
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A POST of `body` as JSON to `path`, for [`Client::request_text`].
pub fn http_post(path: &str, body: Value) -> hyper::Request<Vec<u8>> {
    hyper::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("JSON"))
        .expect("a request")
}

/// Asserts, by a SelfSubjectReview, that `client` is `username` through
/// a token bound to the Pod `pod` of `uid`; the user info, for more.
pub async fn assert_pod_bound_user(client: &Client, username: &str, pod: &str, uid: &str) -> Value {
    let review = http_post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    );
    let text = client.request_text(review).await.expect("a review");
    let review: Value = serde_json::from_str(&text).expect("a review");
    let user = review["status"]["userInfo"].clone();
    assert_eq!(user["username"], username);
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-name"],
        json!([pod])
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-uid"],
        json!([uid])
    );
    user
}

/// The real kubectl (`binary`) against kubesim: its kubeconfig, and a
/// discovery cache of its own (discovery is cached per host and port, and
/// kubesims of earlier tests may have had the same port).
#[derive(Clone, Debug)]
pub struct Kubectl {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub cache: PathBuf,
}

impl Kubectl {
    /// kubectl `version` as `sim`'s admin, its kubeconfig and cache in `dir`.
    pub fn new(version: &str, sim: &KubeSim, dir: &Path) -> Kubectl {
        Kubectl {
            binary: kubectl_binary(version),
            kubeconfig: sim
                .write_kubeconfig(dir)
                .expect("the kubeconfig is written"),
            cache: dir.join(format!("cache-{version}")),
        }
    }

    /// The same kubectl through another kubeconfig, written to `path`.
    pub fn with_kubeconfig(&self, path: PathBuf, kubeconfig: &str) -> Kubectl {
        std::fs::write(&path, kubeconfig).expect("the kubeconfig is written");
        Kubectl {
            kubeconfig: path,
            ..self.clone()
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.binary);
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args);
        c
    }

    /// Runs kubectl: (success, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command(args).output().expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl; fails the test with its stderr when it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "{} {args:?} failed: {err}", self.binary.display());
        out
    }
}

/// Writes `text` to `dir/name`; the path, as kubectl's arguments take it.
pub fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the file is written");
    path.to_string_lossy().into_owned()
}

/// Creates `obj` as a `plural` of `group`/v1 straight in `sim`'s store.
pub fn create(sim: &KubeSim, group: &str, plural: &str, ns: Option<&str>, obj: Value) -> Value {
    sim.store()
        .create(
            &Target::new(group, "v1", plural, ns),
            obj,
            &WriteOptions::default(),
        )
        .expect("created")
}

/// A ServiceAccount `name` in `default`, bound to a Role `name` of `rules`.
pub fn service_account_with_role(sim: &KubeSim, name: &str, rules: Value) {
    let rbac = "rbac.authorization.k8s.io";
    let ns = Some("default");
    create(
        sim,
        "",
        "serviceaccounts",
        ns,
        json!({"metadata": {"name": name}}),
    );
    create(
        sim,
        rbac,
        "roles",
        ns,
        json!({"metadata": {"name": name}, "rules": rules}),
    );
    create(
        sim,
        rbac,
        "rolebindings",
        ns,
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    );
}

/// kubesim running the simulated cluster (scheduler, kubelet, controllers)
/// in `work` on one Node in each of `zones`, its options set by `tune`.
pub async fn start_sim(work: &Path, zones: &[&str], tune: impl FnOnce(&mut SimOptions)) -> KubeSim {
    let mut sim = SimOptions::new(work);
    tune(&mut sim);
    KubeSim::start(Options {
        zones: zones.iter().map(|z| z.to_string()).collect(),
        nodes_per_zone: 1,
        sim: Some(sim),
        ..Options::default()
    })
    .await
    .expect("kubesim starts")
}

/// A StatefulSet `name` in `default`: `replicas` Pods of `container`,
/// started in parallel and stopped with 1 s of grace.
pub fn statefulset(name: &str, replicas: u64, container: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}
            }
        }
    })
}

/// [`statefulset`] whose Pods each have a claim `data` of `storage` on
/// the Nodes' local SSDs, mounted at /data.
pub fn statefulset_on_local_disks(
    name: &str,
    replicas: u64,
    storage: &str,
    container: Value,
) -> Value {
    let mut sts = statefulset(name, replicas, container);
    sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    sts["spec"]["volumeClaimTemplates"] = json!([{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-disks",
            "resources": {"requests": {"storage": storage}}}
    }]);
    sts
}

/// [`statefulset_on_local_disks`] `db` of 100Gi claims whose container
/// writes `/data/file`, Ready once it is there, and exits on SIGTERM.
pub fn db_statefulset(replicas: u64) -> Value {
    statefulset_on_local_disks(
        "db",
        replicas,
        "100Gi",
        json!({
            "name": "db", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", "echo here > /data/file; trap 'exit 0' TERM; while :; do sleep 0.1; done"],
            "readinessProbe": {"exec": {"command": ["cat", "/data/file"]}, "periodSeconds": 1}
        }),
    )
}

/// Whether a Pod's Ready condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The host pid of a Pod's first container (`kubesim://<pid>`).
pub fn container_pid(pod: &Value) -> u32 {
    s(pod, "/status/containerStatuses/0/containerID")
        .strip_prefix("kubesim://")
        .and_then(|p| p.parse().ok())
        .expect("a running container has an id")
}

/// Creates a Pod in `default` and waits until it has run to its end
/// (Succeeded or Failed); the Pod then.
pub async fn run_to_end(store: &Store, pod: Value) -> Value {
    let name = s(&pod, "/metadata/name").to_string();
    store
        .create(&pods(), pod, &WriteOptions::default())
        .expect("the pod is created");
    until(&format!("{name} done"), 60, || {
        let p = store.get(&pods(), &name).ok()?;
        matches!(s(&p, "/status/phase"), "Succeeded" | "Failed").then_some(p)
    })
    .await
}

/// The kubelet's directory of a Pod of `default` under the sim's `work`.
pub fn pod_dir(work: &Path, pod: &Value) -> PathBuf {
    work.join("pods").join(format!(
        "default_{}_{}",
        s(pod, "/metadata/name"),
        s(pod, "/metadata/uid")
    ))
}

/// Polls `f` every `every` until it gives Ok; after `secs` seconds,
/// fails the test with what `why` says of its last Err.
pub async fn poll<T, E>(
    secs: u64,
    every: Duration,
    mut f: impl AsyncFnMut() -> Result<T, E>,
    why: impl AsyncFnOnce(E) -> String,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => panic!("{}", why(last).await),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// An HTTP client for the test world's endpoints (never through a proxy).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

/// kubesim whose fake ring streams bootstrap, replacement and
/// decommission for `stream_ms` each.
pub async fn ring_sim(stream_ms: u64) -> KubeSim {
    let mut opts = Options::default();
    opts.ring.timing.bootstrap_ms = stream_ms;
    opts.ring.timing.replace_ms = stream_ms;
    opts.ring.timing.decommission_ms = stream_ms;
    KubeSim::start(opts).await.expect("kubesim starts")
}

/// A fake database process (fake-cassandra, or it as `scylla`) and where
/// it lives; killed when dropped.
pub struct Node {
    pub name: String,
    pub ip: String,
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Node {
    /// Starts `cmd` with its output in `dir/stdout` and `dir/stderr`.
    pub fn spawn(name: &str, ip: String, dir: PathBuf, mut cmd: Command) -> Node {
        let file = |f: &str| Stdio::from(std::fs::File::create(dir.join(f)).expect("a log file"));
        cmd.stdout(file("stdout")).stderr(file("stderr"));
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{name} starts: {e}"));
        Node {
            name: name.to_string(),
            ip,
            dir,
            child: Some(child),
        }
    }

    pub fn log(&self) -> String {
        let out = std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        let err = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        format!("--- {} stdout\n{out}--- stderr\n{err}", self.name)
    }

    /// Waits up to `secs` for the process to exit by itself; its code
    /// (-1 for a signal) and its log.
    pub fn exit(&mut self, secs: u64) -> (i32, String) {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return (status.code().unwrap_or(-1), self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, as the kubelet stops a container; the exit code.
    pub fn terminate(&mut self) -> i32 {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(ok.success());
        self.exit(20).0
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A valid Cluster (the GKE example's shape: one rack of 3 on local SSDs,
/// Guaranteed resources), named `cassandra` in `db`, for a test to break
/// in one place at a time.
pub fn valid_cluster() -> Value {
    json!({
        "apiVersion": "cassandra.rook.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "cassandra", "namespace": "db"},
        "spec": {
            "version": "4.1.8",
            "mode": "cassandra",
            "datacenter": {
                "name": "europe-west1",
                "racks": [{
                    "name": "europe-west1-b",
                    "members": 3,
                    "storage": {"volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "10Gi"}}}
                    }]},
                    "resources": {"requests": {"cpu": 1, "memory": "2Gi"}, "limits": {"cpu": 1, "memory": "2Gi"}}
                }]
            }
        }
    })
}
