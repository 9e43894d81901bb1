//! The real Kubernetes control plane (issue 29): etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of one upstream release, built
//! by `scripts/build-control-plane` from the Go modules pinned in
//! `tests/controlplane/go.mod`, started here as host processes on free ports
//! of 127.0.0.1, all their state in one temporary directory, so that several
//! can run at once. Nothing is emulated: what the API server accepts,
//! refuses, defaults and stores, and what the controllers and the scheduler
//! do with it, is upstream's code.
//!
//! Set up as a kubeadm or GKE control plane is: one CA for the cluster
//! (client certificates, the serving certificates, the kubelet and
//! ServiceAccount root CA, the CertificateSigningRequest signer) and one for
//! etcd, which serves TLS and requires a client certificate; a
//! ServiceAccount issuer with its own signing key; Node and RBAC
//! authorization; the admission plugins GKE enables; the controller-manager
//! with every default controller, each under its own ServiceAccount; each
//! component with its own kubeconfig and client certificate.
//!
//! Each component is its own process group, killed with it when the
//! [`ControlPlane`] is dropped (and by the kernel if the thread that started
//! it dies first: `setpriv --pdeathsig KILL`, as kubesim starts
//! containers; so start it from a thread that outlives it, e.g. the test's
//! own, not a short-lived blocking-pool thread).

use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The Service CIDR: kubeadm's default, the one kubesim allocates from; the
/// `kubernetes` Service takes its first address.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
const KUBERNETES_SERVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1));
/// The ServiceAccount token issuer (kubeadm's; GKE's names the cluster's
/// URL on container.googleapis.com, which no test reaches).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The admission plugins: kube-apiserver's defaults (which include
/// PodSecurity and ValidatingAdmissionPolicy) plus NodeRestriction, the one
/// GKE adds, named in full so that the list is what the test world runs
/// whatever a release's defaults become. In kube-apiserver's own order.
pub const ADMISSION_PLUGINS: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// How long the whole control plane may take to become ready: a cold start
/// on a loaded 2-core machine takes seconds, a minute means it is broken.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

/// What can go wrong while starting the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error(
        "the control plane is not built ({0}): run scripts/build-control-plane first (once per machine)"
    )]
    NotBuilt(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("making the {what} certificate: {source}")]
    Certificate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("{component} exited before the control plane was ready; the end of its log:\n{tail}")]
    Exited {
        component: &'static str,
        tail: String,
    },
    #[error("{what} not ready after {seconds} s; the end of {component}'s log:\n{tail}")]
    Timeout {
        what: String,
        seconds: u64,
        component: &'static str,
        tail: String,
    },
    #[error("the admin client: {0}")]
    Client(String),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ControlPlaneError {
    let what = what.into();
    move |source| ControlPlaneError::Io { what, source }
}

/// The components, in the order they start (and the reverse of the order
/// they are stopped in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Etcd,
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Component {
    /// The binary's (and the log's) name.
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }

    const ALL: [Component; 4] = [
        Component::Etcd,
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ];
}

/// The Kubernetes release `tests/controlplane/go.mod` pins (`v1.x.y`).
pub fn version() -> Result<String, ControlPlaneError> {
    let go_mod = Path::new(env!("CARGO_MANIFEST_DIR")).join("controlplane/go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .map_err(io_error(format!("reading {}", go_mod.display())))?;
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 2 && w[0] == "k8s.io/kubernetes" && w[1].starts_with("v1."))
        .map(|w| w[1].to_string())
        .ok_or_else(|| {
            ControlPlaneError::NotBuilt(format!(
                "{} requires no k8s.io/kubernetes",
                go_mod.display()
            ))
        })
}

/// Where `scripts/build-control-plane` puts the binaries:
/// `target/control-plane/<version>/bin` of this workspace.
pub fn bin_dir() -> Result<PathBuf, ControlPlaneError> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/control-plane")
        .join(version()?)
        .join("bin"))
}

/// The binaries, checked: every component's, and the stamp the build
/// writes last (so a build killed half-way is not taken for a build).
fn binaries() -> Result<PathBuf, ControlPlaneError> {
    let bin = bin_dir()?;
    let mut missing: Vec<String> = Component::ALL
        .iter()
        .map(|c| bin.join(c.name()))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    let stamp = bin.with_file_name("stamp");
    if !stamp.is_file() {
        missing.push(stamp.display().to_string());
    }
    if missing.is_empty() {
        Ok(bin)
    } else {
        Err(ControlPlaneError::NotBuilt(format!(
            "missing {}",
            missing.join(", ")
        )))
    }
}

/// The control plane's certificate authorities and keys, as PEM.
struct Pki {
    ca_pem: String,
    ca_issuer: Issuer<'static, KeyPair>,
    etcd_ca_pem: String,
    etcd_issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
struct Pair {
    cert: String,
    key: String,
}

fn new_key() -> Result<KeyPair, ControlPlaneError> {
    KeyPair::generate().map_err(|source| ControlPlaneError::Certificate {
        what: "key",
        source,
    })
}

fn validity(params: &mut CertificateParams) {
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
}

/// A self-signed CA: its certificate (PEM), its key (PEM) and its issuer.
fn new_ca(
    what: &'static str,
    common_name: &str,
) -> Result<(String, String, Issuer<'static, KeyPair>), ControlPlaneError> {
    let key = new_key()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params);
    let cert = params
        .self_signed(&key)
        .map_err(|source| ControlPlaneError::Certificate { what, source })?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), key_pem, Issuer::new(params, key)))
}

/// A leaf certificate signed by `issuer`: for a server (`names` are its
/// DNS names and addresses), for a client (the API server reads the user
/// from the common name and the groups from the organizations), or both.
fn leaf(
    what: &'static str,
    issuer: &Issuer<'static, KeyPair>,
    common_name: &str,
    organizations: &[&str],
    names: &[String],
    usages: &[ExtendedKeyUsagePurpose],
) -> Result<Pair, ControlPlaneError> {
    let key = new_key()?;
    let mut params = CertificateParams::new(names.to_vec())
        .map_err(|source| ControlPlaneError::Certificate { what, source })?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    for org in organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = usages.to_vec();
    validity(&mut params);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|source| ControlPlaneError::Certificate { what, source })?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

const SERVER: &[ExtendedKeyUsagePurpose] = &[ExtendedKeyUsagePurpose::ServerAuth];
const CLIENT: &[ExtendedKeyUsagePurpose] = &[ExtendedKeyUsagePurpose::ClientAuth];

/// `count` distinct free TCP ports of 127.0.0.1: all bound at once (so no
/// two are the same), then released for the components to bind. Another
/// process could take one in between; the component then fails to start
/// and says so in its log.
fn free_ports(count: usize) -> Result<Vec<u16>, ControlPlaneError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("binding a free port on 127.0.0.1"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("reading a bound port"))
}

/// A kubeconfig for `user`, authenticated by its client certificate.
fn kubeconfig(server: &str, ca_pem: &str, user: &str, pair: &Pair) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test-world
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {user}@test-world
  context:
    cluster: test-world
    user: {user}
current-context: {user}@test-world
",
        ca = b64(ca_pem),
        cert = b64(&pair.cert),
        key = b64(&pair.key),
    )
}

/// A running component: its process (the leader of its own process group)
/// and its log (stdout and stderr).
struct Running {
    component: Component,
    child: Child,
    log: PathBuf,
}

/// How long each component took to become ready, from the start of
/// [`ControlPlane::start`].
#[derive(Debug, Clone, Copy)]
pub struct Startup {
    /// The API server's `/readyz` (and so etcd) answered ok.
    pub api_server: Duration,
    /// The controller-manager's `/healthz` answered ok and it holds its
    /// leader Lease.
    pub controller_manager: Duration,
    /// The scheduler's `/healthz` answered ok and it holds its leader Lease.
    pub scheduler: Duration,
    /// Everything above, and the `default` ServiceAccount exists (made by the
    /// controller-manager's ServiceAccount controller): Pods can be created.
    pub total: Duration,
}

/// A running control plane; stopped (every process group killed) and its
/// directory deleted on drop.
pub struct ControlPlane {
    running: Vec<Running>,
    server: String,
    kubeconfig: PathBuf,
    ca_pem: String,
    ca_issuer: Issuer<'static, KeyPair>,
    startup: Option<Startup>,
    timings: NodeTimings,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// The files one control plane is made of, under its directory.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write(&self, name: &str, contents: &str) -> Result<PathBuf, ControlPlaneError> {
        let path = self.path(name);
        std::fs::write(&path, contents).map_err(io_error(format!("writing {}", path.display())))?;
        Ok(path)
    }

    fn write_pair(&self, name: &str, pair: &Pair) -> Result<(String, String), ControlPlaneError> {
        let cert = self.write(&format!("{name}.crt"), &pair.cert)?;
        let key = self.write(&format!("{name}.key"), &pair.key)?;
        Ok((arg_path(&cert), arg_path(&key)))
    }
}

fn arg_path(p: &Path) -> String {
    p.display().to_string()
}

/// The control plane's node timings, as a test shortens them (the
/// analogue of kubesim's `--node-time-scale`): `None` keeps upstream's.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeTimings {
    /// kube-controller-manager's `--node-monitor-grace-period` (50 s):
    /// how long a Node may go without renewing its Lease before the
    /// node-lifecycle controller marks it `Unknown` and taints it
    /// unreachable. Its `--node-monitor-period` becomes a fifth of it (at
    /// most upstream's 5 s).
    pub monitor_grace: Option<Duration>,
    /// kube-apiserver's `--default-not-ready-toleration-seconds` and
    /// `--default-unreachable-toleration-seconds` (300): how long a Pod
    /// without tolerations of its own stays bound to such a Node before the
    /// taint-eviction controller deletes it.
    pub eviction_toleration: Option<Duration>,
}

impl NodeTimings {
    /// How often a node agent should renew its Lease: a quarter of the
    /// grace period, as the kubelet's 10 s are of the 40 s of its Lease
    /// (10 s when the grace period is upstream's).
    pub fn lease_renew(&self) -> Duration {
        self.monitor_grace.map_or(Duration::from_secs(10), |g| {
            (g / 4).min(Duration::from_secs(10))
        })
    }
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, then kube-controller-manager and
    /// kube-scheduler, and returns once all are ready (see [`Startup`]).
    /// Fails with [`ControlPlaneError::NotBuilt`] when
    /// `scripts/build-control-plane` has not run.
    pub async fn start() -> Result<ControlPlane, ControlPlaneError> {
        ControlPlane::start_with(NodeTimings::default()).await
    }

    /// [`ControlPlane::start`] with shorter node timings.
    pub async fn start_with(timings: NodeTimings) -> Result<ControlPlane, ControlPlaneError> {
        let started = Instant::now();
        let bin = binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("control-plane-")
            .tempdir()
            .map_err(io_error("making the control plane's directory"))?;
        let layout = Layout {
            dir: dir.path().to_path_buf(),
        };

        let [
            etcd_port,
            etcd_peer_port,
            api_port,
            kcm_port,
            scheduler_port,
        ] = free_ports(5)?[..]
        else {
            unreachable!("free_ports(5) returns 5 ports")
        };
        let server = format!("https://127.0.0.1:{api_port}");
        let etcd_url = format!("https://127.0.0.1:{etcd_port}");
        // One member, so no peer ever connects: its peer listener is plain.
        let etcd_peer_url = format!("http://127.0.0.1:{etcd_peer_port}");

        // The certificates, as kubeadm lays them out.
        let (ca_pem, ca_key_pem, ca_issuer) = new_ca("CA", "kubernetes")?;
        let (etcd_ca_pem, _, etcd_issuer) = new_ca("etcd CA", "etcd-ca")?;
        let pki = Pki {
            ca_pem,
            ca_issuer,
            etcd_ca_pem,
            etcd_issuer,
        };
        let ca = arg_path(&layout.write("ca.crt", &pki.ca_pem)?);
        let ca_key = arg_path(&layout.write("ca.key", &ca_key_pem)?);
        let etcd_ca = arg_path(&layout.write("etcd-ca.crt", &pki.etcd_ca_pem)?);
        let loopback = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let mut api_names = loopback.clone();
        api_names.push(KUBERNETES_SERVICE_IP.to_string());
        api_names.extend(
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from),
        );
        let (etcd_cert, etcd_key) = layout.write_pair(
            "etcd-server",
            &leaf(
                "etcd serving",
                &pki.etcd_issuer,
                "etcd",
                &[],
                &loopback,
                SERVER,
            )?,
        )?;
        let (etcd_client_cert, etcd_client_key) = layout.write_pair(
            "apiserver-etcd-client",
            &leaf(
                "etcd client",
                &pki.etcd_issuer,
                "kube-apiserver-etcd-client",
                &[],
                &[],
                CLIENT,
            )?,
        )?;
        let (api_cert, api_key) = layout.write_pair(
            "apiserver",
            &leaf(
                "API server serving",
                &pki.ca_issuer,
                "kube-apiserver",
                &[],
                &api_names,
                SERVER,
            )?,
        )?;
        // What the API server presents to kubelets (logs, exec, port-forward).
        let (kubelet_client_cert, kubelet_client_key) = layout.write_pair(
            "apiserver-kubelet-client",
            &leaf(
                "kubelet client",
                &pki.ca_issuer,
                "kube-apiserver-kubelet-client",
                &["system:masters"],
                &[],
                CLIENT,
            )?,
        )?;
        let (kcm_cert, kcm_key) = layout.write_pair(
            "controller-manager-serving",
            &leaf(
                "controller-manager serving",
                &pki.ca_issuer,
                "kube-controller-manager",
                &[],
                &loopback,
                SERVER,
            )?,
        )?;
        let (scheduler_cert, scheduler_key) = layout.write_pair(
            "scheduler-serving",
            &leaf(
                "scheduler serving",
                &pki.ca_issuer,
                "kube-scheduler",
                &[],
                &loopback,
                SERVER,
            )?,
        )?;
        // The ServiceAccount token signing key (ES256; the API server takes
        // ECDSA as well as RSA, and ring makes no RSA keys).
        let sa = new_key()?;
        let sa_key = arg_path(&layout.write("sa.key", &sa.serialize_pem())?);
        // The verifying key as a public key: kube-apiserver reads a private
        // key there only in SEC1 form, and rcgen writes PKCS#8.
        let sa_pub = arg_path(&layout.write("sa.pub", &sa.public_key_pem())?);

        // The kubeconfigs: the admin is in system:masters (a break-glass
        // credential, as kubeadm's super-admin.conf); the controller-manager
        // and the scheduler are the users their default RBAC roles name.
        let admin = leaf(
            "admin client",
            &pki.ca_issuer,
            "kubernetes-admin",
            &["system:masters"],
            &[],
            CLIENT,
        )?;
        let admin_kubeconfig = layout.write(
            "admin.kubeconfig",
            &kubeconfig(&server, &pki.ca_pem, "kubernetes-admin", &admin),
        )?;
        let kcm_kubeconfig = arg_path(&layout.write(
            "controller-manager.kubeconfig",
            &kubeconfig(
                &server,
                &pki.ca_pem,
                "system:kube-controller-manager",
                &leaf(
                    "controller-manager client",
                    &pki.ca_issuer,
                    "system:kube-controller-manager",
                    &[],
                    &[],
                    CLIENT,
                )?,
            ),
        )?);
        let scheduler_kubeconfig = arg_path(&layout.write(
            "scheduler.kubeconfig",
            &kubeconfig(
                &server,
                &pki.ca_pem,
                "system:kube-scheduler",
                &leaf(
                    "scheduler client",
                    &pki.ca_issuer,
                    "system:kube-scheduler",
                    &[],
                    &[],
                    CLIENT,
                )?,
            ),
        )?);

        let mut plane = ControlPlane {
            running: Vec::new(),
            server: server.clone(),
            kubeconfig: admin_kubeconfig,
            ca_pem: pki.ca_pem.clone(),
            ca_issuer: pki.ca_issuer,
            startup: None,
            timings,
            dir,
        };

        let etcd_data = layout.path("etcd");
        plane.spawn(
            &bin,
            &layout,
            Component::Etcd,
            &[
                "--name=default".into(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={etcd_peer_url}"),
                format!("--initial-advertise-peer-urls={etcd_peer_url}"),
                format!("--initial-cluster=default={etcd_peer_url}"),
                format!("--cert-file={etcd_cert}"),
                format!("--key-file={etcd_key}"),
                "--client-cert-auth=true".into(),
                format!("--trusted-ca-file={etcd_ca}"),
                // Every control plane here is thrown away with its
                // directory: durability buys nothing, and an fsync per
                // write is what a loaded test machine's disk is slowest at.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;

        let admission = ADMISSION_PLUGINS.join(",");
        let mut api_timings = Vec::new();
        if let Some(t) = timings.eviction_toleration {
            api_timings.push(format!(
                "--default-not-ready-toleration-seconds={}",
                t.as_secs()
            ));
            api_timings.push(format!(
                "--default-unreachable-toleration-seconds={}",
                t.as_secs()
            ));
        }
        plane.spawn(
            &bin,
            &layout,
            Component::ApiServer,
            &[
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                // Where the `kubernetes` Service's endpoints point. Nothing
                // in a Pod reaches this API server yet (that is the node
                // agent's work, issue 29 item 2); an Endpoints address may
                // not be loopback, so the endpoint reconciler is off rather
                // than failing every 10 s.
                "--advertise-address=127.0.0.1".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--etcd-servers={etcd_url}"),
                format!("--etcd-cafile={etcd_ca}"),
                format!("--etcd-certfile={etcd_client_cert}"),
                format!("--etcd-keyfile={etcd_client_key}"),
                format!("--tls-cert-file={api_cert}"),
                format!("--tls-private-key-file={api_key}"),
                format!("--client-ca-file={ca}"),
                format!("--kubelet-client-certificate={kubelet_client_cert}"),
                format!("--kubelet-client-key={kubelet_client_key}"),
                format!("--kubelet-certificate-authority={ca}"),
                "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
                format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
                format!("--service-account-key-file={sa_pub}"),
                format!("--service-account-signing-key-file={sa_key}"),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--authorization-mode=Node,RBAC".into(),
                format!("--enable-admission-plugins={admission}"),
                // kubesim runs privileged containers (GKE allows them too).
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ]
            .into_iter()
            .chain(api_timings)
            .collect::<Vec<String>>(),
        )?;
        let client = plane.client().await?;
        plane.wait_api_server(&client, started).await?;
        let api_server = started.elapsed();

        let delegated = |kubeconfig: &str| {
            [
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
            ]
        };
        let mut kcm_args: Vec<String> = delegated(&kcm_kubeconfig).into();
        kcm_args.extend([
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={kcm_port}"),
            format!("--tls-cert-file={kcm_cert}"),
            format!("--tls-private-key-file={kcm_key}"),
            format!("--client-ca-file={ca}"),
            // Every controller that is on by default (bootstrapsigner and
            // tokencleaner are off by default, as on GKE).
            "--controllers=*".into(),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={sa_key}"),
            format!("--root-ca-file={ca}"),
            format!("--cluster-signing-cert-file={ca}"),
            format!("--cluster-signing-key-file={ca_key}"),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--cluster-name=test-world".into(),
            "--leader-elect=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]);
        if let Some(grace) = timings.monitor_grace {
            kcm_args.push(format!(
                "--node-monitor-grace-period={}ms",
                grace.as_millis()
            ));
            let period = (grace / 5).min(Duration::from_secs(5));
            kcm_args.push(format!("--node-monitor-period={}ms", period.as_millis()));
        }
        plane.spawn(&bin, &layout, Component::ControllerManager, &kcm_args)?;

        let mut scheduler_args: Vec<String> = delegated(&scheduler_kubeconfig).into();
        scheduler_args.extend([
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={scheduler_port}"),
            format!("--tls-cert-file={scheduler_cert}"),
            format!("--tls-private-key-file={scheduler_key}"),
            format!("--client-ca-file={ca}"),
            "--leader-elect=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]);
        plane.spawn(&bin, &layout, Component::Scheduler, &scheduler_args)?;

        let tls = tls_client(&pki.ca_pem);
        let (kcm_ready, scheduler_ready) = tokio::try_join!(
            plane.wait_component(
                &client,
                &tls,
                Component::ControllerManager,
                kcm_port,
                "kube-controller-manager",
                started,
            ),
            plane.wait_component(
                &client,
                &tls,
                Component::Scheduler,
                scheduler_port,
                "kube-scheduler",
                started,
            ),
        )?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        plane
            .wait(
                Component::ControllerManager,
                "the default ServiceAccount",
                started,
                || async { matches!(accounts.get_opt("default").await, Ok(Some(_))) },
            )
            .await?;
        plane.startup = Some(Startup {
            api_server,
            controller_manager: kcm_ready,
            scheduler: scheduler_ready,
            total: started.elapsed(),
        });
        Ok(plane)
    }

    /// Starts one component in its own process group, its output to
    /// `<dir>/<name>.log`.
    fn spawn(
        &mut self,
        bin: &Path,
        layout: &Layout,
        component: Component,
        args: &[String],
    ) -> Result<(), ControlPlaneError> {
        let log = layout.path(&format!("{}.log", component.name()));
        let out =
            std::fs::File::create(&log).map_err(io_error(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_error(format!("opening {}", log.display())))?;
        let program = bin.join(component.name());
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(&program)
            .args(args)
            .current_dir(&layout.dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(io_error(format!("starting {}", program.display())))?;
        self.running.push(Running {
            component,
            child,
            log,
        });
        Ok(())
    }

    /// Polls `ready` until it holds, failing as soon as any component has
    /// exited, or after [`READY_TIMEOUT`] from `started` (with the log of
    /// `blame`, the component that should have made it hold).
    async fn wait<F, Fut>(
        &self,
        blame: Component,
        what: &str,
        started: Instant,
        mut ready: F,
    ) -> Result<(), ControlPlaneError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        loop {
            if ready().await {
                return Ok(());
            }
            self.check_alive()?;
            if started.elapsed() > READY_TIMEOUT {
                return Err(ControlPlaneError::Timeout {
                    what: what.to_string(),
                    seconds: READY_TIMEOUT.as_secs(),
                    component: blame.name(),
                    tail: self.log_tail(blame),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// An error for the first component that has exited, if any: a zombie
    /// (or a process gone), read from `/proc` so that nothing is reaped
    /// before [`Drop`] does it.
    fn check_alive(&self) -> Result<(), ControlPlaneError> {
        for r in &self.running {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", r.child.id()));
            // The state follows the command name, which is in parentheses.
            let state = stat
                .as_deref()
                .ok()
                .and_then(|s| s.rsplit_once(") "))
                .and_then(|(_, rest)| rest.chars().next());
            if matches!(state, None | Some('Z') | Some('X')) {
                return Err(ControlPlaneError::Exited {
                    component: r.component.name(),
                    tail: self.log_tail(r.component),
                });
            }
        }
        Ok(())
    }

    async fn wait_api_server(
        &self,
        client: &Client,
        started: Instant,
    ) -> Result<(), ControlPlaneError> {
        self.wait(
            Component::ApiServer,
            "kube-apiserver's /readyz",
            started,
            || async {
                let request = hyper::Request::get("/readyz")
                    .body(Vec::new())
                    .expect("a GET request builds");
                matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
            },
        )
        .await
    }

    /// Waits for a controller-manager or scheduler: its `/healthz` over TLS
    /// (its serving certificate checked against the CA) and its leader
    /// Lease in kube-system held, which it can only take through the API
    /// with its own credentials. Returns when it was ready.
    async fn wait_component(
        &self,
        client: &Client,
        tls: &tokio_rustls::TlsConnector,
        component: Component,
        port: u16,
        lease: &str,
        started: Instant,
    ) -> Result<Duration, ControlPlaneError> {
        self.wait(
            component,
            &format!("{}'s /healthz", component.name()),
            started,
            || async { matches!(healthz(tls, port).await, Ok(body) if body == "ok") },
        )
        .await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        self.wait(component, &format!("{}'s leader Lease", component.name()), started, || async {
            matches!(leases.get_opt(lease).await,
                Ok(Some(l)) if l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).is_some_and(|h| !h.is_empty()))
        })
        .await?;
        Ok(started.elapsed())
    }

    /// The last 40 lines of a component's log.
    pub fn log_tail(&self, component: Component) -> String {
        let Some(r) = self.running.iter().find(|r| r.component == component) else {
            return format!("({} was not started)", component.name());
        };
        let text = std::fs::read_to_string(&r.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// A client authenticated as the admin (system:masters).
    pub async fn client(&self) -> Result<Client, ControlPlaneError> {
        client_from(&self.kubeconfig).await
    }

    /// The API server's URL (`https://127.0.0.1:<port>`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The admin kubeconfig (for `kubectl --kubeconfig`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a kubeconfig for `user` in `groups`, authenticated by a
    /// client certificate the cluster CA signs, as kubeadm makes a
    /// component's (e.g. a kubelet's: `system:node:<name>` in
    /// `system:nodes`, which the Node authorizer and NodeRestriction then
    /// confine to that Node and its Pods). Returns its path.
    pub fn write_client_kubeconfig(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<PathBuf, ControlPlaneError> {
        let pair = leaf("client", &self.ca_issuer, user, groups, &[], CLIENT)?;
        let file: String = user
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let path = self.dir.path().join(format!("{file}.kubeconfig"));
        std::fs::write(&path, kubeconfig(&self.server, &self.ca_pem, user, &pair))
            .map_err(io_error(format!("writing {}", path.display())))?;
        Ok(path)
    }

    /// The node timings it runs with.
    pub fn timings(&self) -> NodeTimings {
        self.timings
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The directory that holds the certificates, kubeconfigs, logs
    /// (`<component>.log`) and etcd's data.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How long the start took.
    pub fn startup(&self) -> Startup {
        self.startup
            .expect("a ControlPlane is returned only once it is ready")
    }

    /// Each component's resident memory now (bytes), from `/proc`.
    pub fn rss(&self) -> Vec<(Component, u64)> {
        self.running
            .iter()
            .map(|r| (r.component, rss_bytes(r.child.id())))
            .collect()
    }

    /// A one-line summary of [`ControlPlane::rss`], in MiB.
    pub fn rss_summary(&self) -> String {
        let mut s = String::new();
        for (c, bytes) in self.rss() {
            let _ = write!(s, "{} {} MiB, ", c.name(), bytes / (1 << 20));
        }
        s.trim_end_matches(", ").to_string()
    }
}

impl Drop for ControlPlane {
    /// Kills every component's process group, newest first, and reaps
    /// them. SIGKILL, not SIGTERM: the directory goes with them, so there
    /// is nothing to flush, and the API server's graceful shutdown would
    /// take seconds per test.
    fn drop(&mut self) {
        for r in self.running.iter_mut().rev() {
            let group = nix::unistd::Pid::from_raw(r.child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = r.child.wait();
        }
    }
}

/// A client for the kubeconfig at `path` (e.g. from
/// [`ControlPlane::write_client_kubeconfig`]).
pub async fn client_from(path: &Path) -> Result<Client, ControlPlaneError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| ControlPlaneError::Client(e.to_string()))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ControlPlaneError::Client(e.to_string()))?;
    Client::try_from(cfg).map_err(|e| ControlPlaneError::Client(e.to_string()))
}

/// VmRSS of a process, in bytes (0 if it is gone).
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| {
                    v.split_whitespace()
                        .next()
                        .and_then(|n| n.parse::<u64>().ok())
                })
        })
        .map_or(0, |kib| kib * 1024)
}

/// A TLS client that trusts only the cluster CA.
fn tls_client(ca_pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let der = pem_to_der(ca_pem);
    let _ = roots.add(rustls::pki_types::CertificateDer::from(der));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The DER bytes of a one-certificate PEM.
fn pem_to_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("rcgen writes valid PEM")
}

/// `GET /healthz` on 127.0.0.1:`port` over TLS, checking the serving
/// certificate for `127.0.0.1`; the body if the status is 200.
async fn healthz(tls: &tokio_rustls::TlsConnector, port: u16) -> io::Result<String> {
    let tcp = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
    let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let mut stream = tls.connect(name, tcp).await?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in 5 s"))??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(
            head.lines().next().unwrap_or("").to_string(),
        ));
    }
    Ok(body.trim().to_string())
}
