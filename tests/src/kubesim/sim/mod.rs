//! The simulated cluster inside kubesim (DESIGN.md section 7, issue 3
//! part 2): the StatefulSet controller ([`statefulset`]), the scheduler
//! ([`scheduler`]), storage ([`storage`]: StorageClasses `local-disks` and
//! `standard`, PV provisioning and binding, PVC protection, reclaim), the
//! endpoints controller ([`services`]), the Service data path in each Pod
//! ([`proxy`]) and a kubelet whose containers are
//! real local processes ([`kubelet`], [`probes`], [`startup`]) and who
//! tells the fake ring at once when a database container dies
//! ([`deaths`]). Every part runs in one
//! thread driven by the store's change notifications (plus a 250 ms tick
//! for timers), out of the async runtime that serves the API (a pass over
//! a thousand clusters takes long enough to starve it), level based: each
//! pass reads the store and writes what is missing, so a pass may run any
//! number of times. Started by
//! [`crate::kubesim::KubeSim`] when `Options::sim` is set (and by
//! `kubesim serve` unless `--no-sim`; flags in [`FLAGS`]).
//!
//! # The contract with the programs in the containers
//!
//! Processes run on this machine. Each container runs as
//! `nsenter --net=<the Pod's namespace> setpriv --pdeathsig KILL unshare
//! --mount --pid --fork --kill-child --mount-proc sh -c <mounts>
//! <command>`: the Pod's network namespace (see Network below), its own
//! mount namespace (the
//! pod's volumes bind-mounted at their `mountPath`, mount points created on
//! the host when missing) and its own PID namespace, so the container's
//! command is PID 1 (as in a real container: a PID 1 without a SIGTERM
//! handler ignores SIGTERM and is killed after the grace period). The
//! mounts are made as root; the script's last step `exec setpriv` gives
//! the command the identity the Pod's and container's `securityContext`
//! and the image's default user ask for ([`security`], [`images`]): its
//! uid, gid and groups (`fsGroup`, `supplementalGroups`), the runtime's
//! default capabilities as its bounding set (none effective unless root),
//! no_new_privs for `allowPrivilegeEscalation: false`, and for
//! `readOnlyRootFilesystem` every mount but its volumes remounted
//! read-only (in its private mount namespace only). A `runAsNonRoot`
//! container that would run as root is not started: it waits in
//! `CreateContainerConfigError` with the kubelet's message. `fsGroup`
//! gives emptyDir (0777) and PersistentVolume directories its group,
//! group rw and setgid directories, and ConfigMap and downward API files
//! its group. Exec probes and preStop hooks enter the container's
//! namespaces (mount, PID, network) with `nsenter` and run with the
//! container's identity. Killing kubesim (or the test process) kills
//! every container:
//! the namespace dies with its PID 1.
//!
//! Images map to programs ([`SimOptions`]):
//! - the operator image ([`SimOptions::operator_images`], or a command that
//!   starts with `/usr/local/bin/cassandra-operator`): that path is the
//!   operator binary under test ([`SimOptions::operator_binary`]);
//! - database images `cassandra:<tag>` and `scylladb/scylla:<tag>` (any
//!   repository whose last path element is `cassandra` or `scylla`): the
//!   image's default configuration (`<fixtures>/cassandra/<major.minor>` or
//!   `<fixtures>/scylla`) is copied into the container (its writable
//!   layer) and mounted at `/etc/cassandra` (`/etc/scylla` for scylla),
//!   also named by env `CONFIG_DEFAULTS_DIR`; the program `cassandra`
//!   (first on `PATH`) is the fake Cassandra ([`SimOptions::fake_cassandra`]).
//!   Like the official image, a cassandra container has
//!   `CASSANDRA_HOME=/opt/cassandra` (mounted: `bin/cassandra`, and
//!   `conf`, `data`, `logs` symlinks to `/etc/cassandra`,
//!   `/var/lib/cassandra`, `/var/log/cassandra`),
//!   `CASSANDRA_CONF=/etc/cassandra` and `/opt/cassandra/bin` first on
//!   `PATH`; `/etc/cassandra`, `/var/lib/cassandra` and
//!   `/var/log/cassandra` are directories of the container's layer owned
//!   by cassandra (999:999, mode 1777) as in the image (scylla:
//!   `/var/lib/scylla` owned by scylla, see [`images`]); a volume mounted
//!   there covers them. Both images run as root by default.
//!   Without a command the container runs `cassandra -f`.
//!   With [`SimOptions::real_cassandra`], a `cassandra:<X.Y.Z>` of 4.1 or
//!   5.0 runs real Cassandra instead ([`RealCassandra`]): the official
//!   image's file system laid out from the fetched release
//!   ([`images::real_cassandra_layer`]), its `ENV` (`JAVA_HOME`,
//!   `CASSANDRA_HOME`, `CASSANDRA_CONF`, `PATH`) and the test world's
//!   `JVM_EXTRA_OPTS`, so that `cassandra` is the release's
//!   `bin/cassandra`; the operator image then has the real Jolokia agent
//!   in `/plugins` and `INSTALL_PLUGINS=/plugins`, as `init/Dockerfile`
//!   builds it.
//! - any other image runs its command as a host program.
//!
//! Every container's environment: the pod spec's `env` (values, downward
//! API `fieldRef` and `resourceFieldRef`, ConfigMap keys) on top of
//! `PATH`, `HOSTNAME` (the pod name), the in-cluster configuration
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`/`_PORT_HTTPS` and `KUBERNETES_PORT`:
//! kubesim's API on the Pod network's gateway; with the projected
//! ServiceAccount volume at `/var/run/secrets/kubernetes.io/serviceaccount`
//! that the API server's admission added, its token bound to the Pod and
//! refreshed before it expires; no kubeconfig), `KUBESIM_URL` (the test
//! world's endpoints: the fake Cassandra image's ring) (`POD_IP` only when
//! the spec asks for it) and
//! `CASSANDRA_VERSION=<image tag>`; the spec's env wins. Nothing else: the
//! programs run with their production defaults (the sidecar's Jolokia
//! client on `127.0.0.1:8778`, its probe server on `0.0.0.0:8080`, the
//! fake's Jolokia where its `-javaagent:` option says), as on a real node.
//!
//! Network ([`net`]): each Pod has its own network namespace with its Pod
//! IP on `eth0` and its own loopback, so a listener on `0.0.0.0:PORT` is
//! reachable only at that Pod's IP, Pods may all listen on the same
//! ports, and a probe reaches exactly the probed Pod (a host program on
//! `0.0.0.0:8080`, such as the controller's metrics server, answers no
//! probe). Per kubesim one bridge in the host's namespace with a random
//! free /24 of 10.244.0.0/14; each node hands out Pod IPs from its own
//! block of it, round robin as host-local IPAM does (a re-created Pod gets
//! a new address; [`net::next_pod_ip`]); the host (kubesim, the
//! tests, an operator run beside it) reaches every Pod IP through the
//! bridge; Pods reach each other and the gateway `.1`, where kubesim also
//! serves (its host address stays `127.0.0.1`, unreachable from a Pod);
//! Pods have no default route, so nothing leaves the machine. A
//! `hostNetwork` Pod stays in the host's namespace with its Node's
//! address. HTTP and TCP probes go from the host to `<podIP>:<port>`.
//! ClusterIPs route from every Pod with its own namespace, as kube-proxy
//! makes them route on a node ([`proxy`]): a connection to
//! `<ClusterIP>:<port>` reaches a ready endpoint of the Service at its
//! target port, one to a Service without a ready endpoint is refused
//! (the host and `hostNetwork` Pods are not served; no cluster DNS).
//! Cost, measured on the 2-core development machine
//! (`kubesim_netns::the_cost_of_a_pods_network`): creating a Pod's
//! network 12-16 ms, removing it about 37 ms (both in the sim's pass); a
//! Pod's start-up (created → container running) about 27-30 ms with its
//! own namespace against 21-22 ms with `hostNetwork` (the kubelet's path
//! before namespaces), 43-49 ms since its namespace is also given the
//! Service rules before its first container starts. An update of the
//! Service rules (a Service or its endpoints changed) is one `nft`
//! transaction per Pod namespace, in the sim's pass: 17-18 ms each with
//! 10 Service ports, 26-34 ms with 200
//! (`kubesim_netns::the_cost_of_a_cluster_ip_update`), so a world of 20
//! Pods spends about 0.4 s of its pass on one endpoint change.
//!
//! Container statuses carry `containerID: kubesim://<host pid of the
//! container's PID 1>`.
//!
//! Files: under [`SimOptions::work_dir`] (which, with its parents, every
//! user may traverse, so that a container of any user reaches them):
//! `pods/<ns>_<pod>_<uid>/` holds
//! the pod's volumes (`volumes/<name>`), each container's writable layer
//! (`containers/<name>/`) and logs (`logs/<container>/<restartCount>.log`,
//! stdout and stderr, the kubelet's layout); `pvs/<pv>` holds each
//! network PersistentVolume's data (as long as the PV lives);
//! `nodes/<node>/mnt/disks/ssd<i>` are each Node's local SSDs, with
//! `nodes/<node>/uid` (the Node incarnation they belong to) and
//! `nodes/<node>/node.json` (to re-create a deleted Node) ([`disks`]).
//!
//! Pods are deleted gracefully, as the API server does it: a DELETE marks
//! a scheduled Pod with `deletionTimestamp` and `deletionGracePeriodSeconds`
//! (the DELETE's `gracePeriodSeconds`, else
//! `terminationGracePeriodSeconds`); a later DELETE may only shorten it and
//! otherwise changes nothing; only `gracePeriodSeconds=0` removes it at
//! once. The kubelet runs preStop hooks, sends SIGTERM, SIGKILL when the
//! Pod's grace (as the store has it now, capped by
//! [`SimOptions::max_grace`]) has passed, then removes the Pod with its
//! own DELETE of grace 0. `kubectl logs` reads the log files (see
//! [`crate::kubesim::logs`]). Deleting a Node kills
//! its pods' processes at once (no preStop: the machine is gone), the
//! pod garbage collector removes those Pods, and its local SSDs are
//! destroyed (the fake ring is told their data directories are gone);
//! `POST /sim/nodes/NAME/recreate` (`kubesim node recreate`) brings it back
//! under its name as a new machine with empty disks behind the unchanged
//! PVs, and `POST /sim/nodes/NAME/disks/I/wipe` (`kubesim node wipe-disk`)
//! empties one disk of a live Node ([`disks`]).
//!
//! A Node's kubelet can be cut off from the API server (its processes
//! running on, or frozen) or turn NotReady, and come back
//! (`POST /sim/nodes/NAME/unreachable[?freeze=true]`, `.../not-ready`,
//! `.../reachable`; `kubesim node unreachable|not-ready|reachable`): the
//! node lifecycle controller marks it `Ready=Unknown` after the node
//! monitor's grace period and taints it, the taint eviction controller
//! deletes its Pods when their tolerations run out, and they stay
//! Terminating until the kubelet comes back or the Node is deleted
//! ([`nodelifecycle`]).
//!
//! Not simulated (yet): Lease objects of Nodes, the node eviction rate
//! limiter, ControllerRevision objects (a pod below a
//! partition is recreated from the current template, with its old
//! revision label), `shareProcessNamespace` (each container has its own PID
//! namespace), Secret volumes, priorities and preemption in the scheduler
//! (no victims are ever found), pod topology spread constraints, the
//! death of a process that is not its container's PID 1 (a fake started
//! by the sidecar is still convicted by its lease only, unless the sidecar
//! exits with it), `timestamps` and `sinceSeconds` in `kubectl logs`, a
//! container's exit code after a signal from outside (`unshare --fork`
//! reports 1 where a runtime reports 128 + the signal), user namespaces,
//! SELinux/AppArmor/seccomp profiles, image `HOME`s (`HOME` is `/root` for
//! every user), a root filesystem of the image's own (outside the image's
//! directories above, the container sees the host's files, and writes
//! there land on the host unless `readOnlyRootFilesystem`), kube-proxy
//! for the host and `hostNetwork` Pods (ClusterIPs route from Pods with
//! their own namespace only, [`proxy`]), cluster DNS (no Service name
//! resolves inside a Pod), and NetworkPolicies.

pub mod deaths;
pub mod disks;
pub mod disruption;
pub mod history;
pub mod images;
pub mod kubelet;
pub mod net;
pub mod nodelifecycle;
pub mod probes;
pub mod proxy;
pub mod quantity;
pub mod scheduler;
pub mod security;
pub mod services;
pub mod startup;
pub mod statefulset;
pub mod storage;

use super::patch::PatchType;
use super::store::{ApiError, Store, Subresource, Target, WriteOptions};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

/// The images the sim knows, where its programs are, and its limits.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where pods and PVs keep their files (`--sim-dir`).
    pub work_dir: PathBuf,
    /// The operator binary under test (`--operator-binary`,
    /// `KUBESIM_OPERATOR_BINARY`; the image's, when
    /// `KUBESIM_OPERATOR_IMAGE_BINARY` names it: [`image_binary`]).
    pub operator_binary: Option<PathBuf>,
    /// Image names (without tag) that are the operator image
    /// (`--operator-image`, repeatable; `KUBESIM_OPERATOR_IMAGES`; by
    /// default the controller's default image).
    pub operator_images: Vec<String>,
    /// The fake Cassandra program (`--fake-cassandra`,
    /// `KUBESIM_FAKE_CASSANDRA`): the database images' `cassandra`.
    pub fake_cassandra: Option<PathBuf>,
    /// The fixtures root holding `cassandra/<3.11|4.1|5.0>` and `scylla`
    /// (`--fixtures`, `KUBESIM_FIXTURES`).
    pub fixtures: Option<PathBuf>,
    /// A cap on every grace period (`--max-grace-seconds`).
    pub max_grace: Option<Duration>,
    /// A cap on probe periods and initial delays, so that tests need not
    /// wait 10 s between readiness probes (`--max-probe-period-ms`).
    pub max_probe_period: Option<Duration>,
    /// The first restart backoff (doubles up to 10 s; the kubelet's is 10 s
    /// up to 5 min).
    pub restart_backoff: Duration,
    /// Local SSDs per Node (`--local-ssds`, `KUBESIM_LOCAL_SSDS`; GKE's
    /// `--local-nvme-ssd-block`/`--ephemeral-storage-local-ssd count`):
    /// each is one PV of the `local-disks` class ([`disks`]).
    pub local_ssds: usize,
    /// A cap on the lifetime of the ServiceAccount tokens the kubelet
    /// projects (the API server's `--service-account-max-token-expiration`),
    /// so that a test sees a token refreshed within seconds.
    pub max_token_lifetime: Option<Duration>,
    /// The factor on the control plane's node timings
    /// (`--node-time-scale`, `KUBESIM_NODE_TIME_SCALE`; 1: as
    /// kube-controller-manager has them): the node monitor's grace period
    /// and the tolerations' seconds of taint-based eviction
    /// ([`nodelifecycle`]).
    pub node_time_scale: f64,
    /// Real Cassandra for the `cassandra:` images of the releases
    /// `scripts/fetch-cassandra` fetched ([`RealCassandra`]); None (the
    /// default): every `cassandra:` image runs the fake.
    pub real_cassandra: Option<RealCassandra>,
    /// Hollow kubelets (`KUBESIM_HOLLOW=1`; kubemark's hollow
    /// nodes): Pods are Ready at once and run no process
    /// ([`kubelet`]'s `hollow` module), for benchmarks at a scale real
    /// processes cannot reach.
    pub hollow: bool,
}

/// Real Cassandra in the `cassandra:<version>` images (issue 28): a
/// container of a 4.1.x or 5.0.x tag gets the official image's file system
/// laid out from the release `scripts/fetch-cassandra` cached
/// ([`crate::real_cassandra::image`]), so its `cassandra` is the release's
/// `bin/cassandra`; the operator image carries the real Jolokia JVM agent
/// at `/plugins/jolokia-jvm-agent.jar` (0444) with `INSTALL_PLUGINS=/plugins`,
/// as `init/Dockerfile` builds it. 3.11 (Java 8 cannot be had here) and
/// ScyllaDB stay on the fakes.
#[derive(Debug, Clone)]
pub struct RealCassandra {
    /// Where `scripts/fetch-cassandra` cached the releases and the agent
    /// (the repository's `target/`).
    pub cache: PathBuf,
    /// The `JVM_EXTRA_OPTS` the test world's `cassandra:` image sets, as a
    /// user could (the ring timings of tests: `-Dcassandra.ring_delay_ms`,
    /// `-Dcassandra.skip_wait_for_gossip_to_settle`); the sidecar keeps
    /// what the container passes and appends its own.
    pub jvm_extra_opts: String,
    /// More `ENV` of the test world's `cassandra:` image, as a derived image
    /// (`FROM cassandra:<version>` and `ENV`) would set it: the sidecar's
    /// `SSTABLE_SCAN_SECONDS`, say, which it reads from its container's
    /// environment.
    pub env: Vec<(String, String)>,
}

impl RealCassandra {
    /// The releases cached under the repository's `target/`, with
    /// `jvm_extra_opts` in the image's environment.
    pub fn cached(jvm_extra_opts: &str) -> RealCassandra {
        let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        RealCassandra {
            cache: tests.parent().unwrap_or(tests).join("target"),
            jvm_extra_opts: jvm_extra_opts.to_string(),
            env: Vec::new(),
        }
    }

    /// The same with `name=value` in the image's environment too.
    pub fn with_env(mut self, name: &str, value: &str) -> RealCassandra {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Whether `cassandra:<tag>` runs real Cassandra: a release version
    /// (`X.Y.Z`) of 4.1 or 5.0. Pure.
    pub fn runs(tag: &str) -> bool {
        let parts: Vec<&str> = tag.split('.').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            && matches!((parts[0], parts[1]), ("4", "1") | ("5", "0"))
    }

    /// The Jolokia JVM agent the operator image ships.
    pub fn jolokia_agent(&self) -> PathBuf {
        self.cache
            .join("cassandra")
            .join(crate::real_cassandra::release::JOLOKIA_AGENT)
    }
}

/// The repository of the controller's default operator image.
pub fn default_operator_repository() -> String {
    let image = crds::v1alpha1::DEFAULT_OPERATOR_IMAGE;
    image
        .rsplit_once(':')
        .map_or(image, |(repo, _)| repo)
        .to_string()
}

impl SimOptions {
    /// Options with everything else at its default.
    pub fn new(work_dir: impl Into<PathBuf>) -> SimOptions {
        SimOptions {
            work_dir: work_dir.into(),
            operator_binary: std::env::var_os("KUBESIM_OPERATOR_BINARY").map(PathBuf::from),
            operator_images: std::env::var("KUBESIM_OPERATOR_IMAGES")
                .map(|v| {
                    v.split(',')
                        .filter(|i| !i.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_else(|_| vec![default_operator_repository()]),
            fake_cassandra: std::env::var_os("KUBESIM_FAKE_CASSANDRA").map(PathBuf::from),
            fixtures: std::env::var_os("KUBESIM_FIXTURES").map(PathBuf::from),
            max_grace: None,
            max_probe_period: None,
            restart_backoff: Duration::from_millis(500),
            local_ssds: std::env::var("KUBESIM_LOCAL_SSDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            max_token_lifetime: None,
            node_time_scale: std::env::var("KUBESIM_NODE_TIME_SCALE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1.0),
            real_cassandra: None,
            hollow: std::env::var("KUBESIM_HOLLOW").is_ok_and(|v| v == "1"),
        }
    }
}

/// The operator image's own binary in place of the workspace's cargo build
/// (issue 30, "what ships is what is tested"): `KUBESIM_OPERATOR_IMAGE_BINARY`
/// (scripts/test sets it to the binary of the image `scripts/build-image`
/// has just built, the static musl build that ships) replaces an operator
/// binary that is a cargo build of `cassandra-operator`
/// (`<target>/<profile>/cassandra-operator`, the target directory holding
/// cargo's `CACHEDIR.TAG`: what the e2e worlds, the demo and the benchmarks
/// pass), so every container of the operator image (the operator's Pod,
/// members' init containers and, through `install`, their sidecars) runs
/// it. A stand-in a test gives on purpose (a script elsewhere) is kept.
/// Explicit, never found by itself: an image left in target/ by an older
/// build must not stand in for the sources under test. Unset: as given.
pub fn image_binary(given: Option<PathBuf>) -> std::io::Result<Option<PathBuf>> {
    let Some(image) = std::env::var_os("KUBESIM_OPERATOR_IMAGE_BINARY").filter(|v| !v.is_empty())
    else {
        return Ok(given);
    };
    let image = PathBuf::from(image);
    let cargo_build = given.as_deref().is_some_and(|p| {
        p.file_name().is_some_and(|n| n == "cassandra-operator")
            && p.parent()
                .and_then(std::path::Path::parent)
                .is_some_and(|target| target.join("CACHEDIR.TAG").is_file())
    });
    if !cargo_build {
        return Ok(given);
    }
    if !image.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "KUBESIM_OPERATOR_IMAGE_BINARY={}: no such file (run scripts/build-image)",
                image.display()
            ),
        ));
    }
    Ok(Some(image))
}

/// The running sim; stopping it (or dropping it) kills every container.
#[derive(Debug)]
pub struct Sim {
    kubelet: Arc<kubelet::Kubelet>,
    /// Forwards the store's change notifications to the controllers.
    task: JoinHandle<()>,
    /// The controllers' thread, and what tells it to end.
    controllers: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    net: Arc<net::Network>,
    access: PodAccess,
}

/// How Pods reach kubesim, on the gateway of the Pod network.
#[derive(Debug, Clone)]
pub struct PodAccess {
    /// The API server (TLS).
    pub api: std::net::SocketAddr,
    /// The test world's endpoints (plain HTTP): `KUBESIM_URL`.
    pub sim_url: String,
    /// kubesim's CA and token signer.
    pub authority: Arc<crate::kubesim::auth::Authority>,
}

impl Sim {
    /// Starts the controllers; `access` is where Pods reach kubesim (on
    /// the gateway of `net`); `ring` hears of database containers' deaths
    /// ([`deaths`]).
    pub fn start(
        store: Store,
        opts: SimOptions,
        access: PodAccess,
        net: Arc<net::Network>,
        ring: Option<Arc<crate::fake_cassandra::ring_service::RingService>>,
        kubelets: Arc<nodelifecycle::Kubelets>,
    ) -> std::io::Result<Sim> {
        std::fs::create_dir_all(&opts.work_dir)?;
        let mut opts = opts;
        opts.operator_binary = image_binary(opts.operator_binary)?;
        // Containers run as any user: they must reach the programs kubesim
        // gives them.
        security::open_for_containers(&opts.work_dir)?;
        for program in [&opts.operator_binary, &opts.fake_cassandra]
            .into_iter()
            .flatten()
        {
            if let Some(dir) = program.parent() {
                let _ = security::open_for_containers(dir);
            }
        }
        store.set_graceful_pod_deletion(true);
        storage::ensure_storage_classes(&store);
        let kubelet = Arc::new(kubelet::Kubelet::new(
            store.clone(),
            opts,
            access.clone(),
            net.clone(),
            ring,
            kubelets,
        ));
        // Subscribed before the first pass: no change goes unseen.
        let (poke, poked) = std::sync::mpsc::sync_channel(1);
        let task = tokio::spawn(forward(store.subscribe(), poke));
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let controllers = std::thread::Builder::new()
            .name("kubesim-controllers".into())
            .spawn({
                let (kubelet, stopping) = (kubelet.clone(), stopping.clone());
                // The kubelet starts containers' tasks on the runtime.
                let runtime = tokio::runtime::Handle::current();
                move || {
                    let _entered = runtime.enter();
                    run(&store, &kubelet, &poked, &stopping)
                }
            })?;
        Ok(Sim {
            kubelet,
            task,
            controllers: std::sync::Mutex::new(Some(controllers)),
            stopping,
            net,
            access,
        })
    }

    /// Where Pods reach the test world's endpoints (`KUBESIM_URL`).
    pub fn pod_url(&self) -> &str {
        &self.access.sim_url
    }

    /// Where Pods reach the API server.
    pub fn pod_api(&self) -> std::net::SocketAddr {
        self.access.api
    }

    /// The Pod network.
    pub fn network(&self) -> &net::Network {
        &self.net
    }

    /// Stops the controllers, kills every container and removes the Pod
    /// network.
    pub fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.abort();
        // A pass under way ends first: it could start a container after
        // the kill below.
        let thread = self
            .controllers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        self.kubelet.kill_all();
        self.net.teardown();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Tells the controllers of each change to the store; changes that come
/// while a pass runs make one more pass.
async fn forward(
    mut rx: tokio::sync::broadcast::Receiver<Arc<crate::kubesim::store::Event>>,
    poke: std::sync::mpsc::SyncSender<()>,
) {
    loop {
        match rx.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => {
                if let Err(std::sync::mpsc::TrySendError::Disconnected(())) = poke.try_send(()) {
                    return;
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// The controllers' loop: a pass after each change and every 250 ms, until
/// the sim stops.
fn run(
    store: &Store,
    kubelet: &kubelet::Kubelet,
    poked: &std::sync::mpsc::Receiver<()>,
    stopping: &std::sync::atomic::AtomicBool,
) {
    while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
        pass(store, kubelet);
        match poked.recv_timeout(Duration::from_millis(250)) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One pass of every controller.
fn pass(store: &Store, kubelet: &kubelet::Kubelet) {
    crate::kubesim::auth::defaults::publish_root_ca(store, kubelet.ca_pem());
    services::allocate_cluster_ips(store);
    kubelet.sync_disks();
    kubelet.sync_nodes();
    storage::bind_immediate(store);
    storage::protect_claims(store);
    storage::reclaim(store);
    statefulset::sync_all(store);
    disruption::sync_budgets(store);
    kubelet.collect_orphans();
    scheduler::schedule_all(store);
    kubelet.sync();
    services::sync_endpoints(store);
    kubelet.sync_proxy();
}

pub(crate) fn t(group: &str, plural: &str, ns: Option<&str>) -> Target {
    Target::new(group, "v1", plural, ns)
}

/// Every object of a kind (all namespaces), shared with the store.
pub(crate) fn list_all(store: &Store, group: &str, plural: &str) -> Vec<std::sync::Arc<Value>> {
    store.objects(&t(group, plural, None)).unwrap_or_default()
}

/// Objects by namespace and by label, built once a pass: the candidates of
/// an equality selector are the objects of its rarest label, not every
/// object (the endpoints and disruption controllers matched every Pod
/// against every Service and budget, most of a pass at a thousand
/// clusters).
pub(crate) struct LabelIndex<'a> {
    /// Lists of objects, found by the maps below (looked up with keys that
    /// live shorter than the objects).
    lists: Vec<Vec<&'a Value>>,
    by_namespace: std::collections::HashMap<&'a str, usize>,
    by_label: std::collections::HashMap<(&'a str, &'a str, &'a str), usize>,
}

impl<'a> LabelIndex<'a> {
    pub(crate) fn new(objects: &'a [Arc<Value>]) -> LabelIndex<'a> {
        let mut index = LabelIndex {
            lists: Vec::new(),
            by_namespace: Default::default(),
            by_label: Default::default(),
        };
        let LabelIndex {
            lists,
            by_namespace,
            by_label,
        } = &mut index;
        // A new list's place, the first time a key is seen.
        fn slot(lists: &mut Vec<Vec<&Value>>) -> usize {
            lists.push(Vec::new());
            lists.len() - 1
        }
        for o in objects {
            let ns = ns_of(o).unwrap_or_default();
            let at = *by_namespace.entry(ns).or_insert_with(|| slot(lists));
            lists[at].push(&**o);
            for (k, v) in o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if let Some(v) = v.as_str() {
                    let at = *by_label.entry((ns, k, v)).or_insert_with(|| slot(lists));
                    lists[at].push(&**o);
                }
            }
        }
        index
    }

    /// The objects of `ns` that may carry every one of `labels`: those of
    /// the rarest one; every object of the namespace when there are none.
    /// The caller still matches its whole selector against them.
    pub(crate) fn candidates(
        &self,
        ns: &str,
        labels: Option<&serde_json::Map<String, Value>>,
    ) -> &[&'a Value] {
        let list = |at: Option<&usize>| at.map_or(&[][..], |i| self.lists[*i].as_slice());
        match labels.filter(|l| !l.is_empty()) {
            None => list(self.by_namespace.get(ns)),
            Some(labels) => labels
                .iter()
                .map(|(k, v)| {
                    list(
                        v.as_str()
                            .and_then(|v| self.by_label.get(&(ns, k.as_str(), v))),
                    )
                })
                .min_by_key(|objects| objects.len())
                .unwrap_or_default(),
        }
    }
}

pub(crate) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

pub(crate) fn ns_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/namespace").and_then(Value::as_str)
}

/// Merge-patches an object's status.
pub(crate) fn patch_status(
    store: &Store,
    group: &str,
    plural: &str,
    obj: &Value,
    status: &Value,
) -> Result<Value, ApiError> {
    store
        .patch(
            &t(group, plural, ns_of(obj)),
            s(obj, "/metadata/name"),
            PatchType::Merge,
            &serde_json::json!({"status": status}),
            Subresource::Status,
            &WriteOptions::default(),
        )
        .map(|(v, _)| v)
}

/// Merge-patches an object.
pub(crate) fn patch_main(
    store: &Store,
    group: &str,
    plural: &str,
    obj: &Value,
    body: &Value,
) -> Result<Value, ApiError> {
    store
        .patch(
            &t(group, plural, ns_of(obj)),
            s(obj, "/metadata/name"),
            PatchType::Merge,
            body,
            Subresource::Main,
            &WriteOptions::default(),
        )
        .map(|(v, _)| v)
}

/// The `kubesim serve` flags of the sim, with their environment
/// fallbacks (`KUBESIM_OPERATOR_BINARY`, `KUBESIM_FAKE_CASSANDRA`,
/// `KUBESIM_FIXTURES`, `KUBESIM_OPERATOR_IMAGES` comma-separated).
pub const FLAGS: &str = "[--no-sim] [--sim-dir DIR] [--operator-binary PATH] [--operator-image REPO]... [--fake-cassandra PATH] [--fixtures DIR] [--max-grace-seconds S] [--max-probe-period-ms MS] [--restart-backoff-ms MS] [--local-ssds N] [--node-time-scale F]";

/// The sim's settings from `kubesim serve` flags.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    off: bool,
    dir: Option<PathBuf>,
    operator_binary: Option<PathBuf>,
    operator_images: Vec<String>,
    fake_cassandra: Option<PathBuf>,
    fixtures: Option<PathBuf>,
    max_grace: Option<Duration>,
    max_probe_period: Option<Duration>,
    restart_backoff: Option<Duration>,
    local_ssds: Option<usize>,
    node_time_scale: Option<f64>,
}

impl Flags {
    /// Whether `flag` is a sim flag that takes no value.
    pub fn is_switch(flag: &str) -> bool {
        flag == "--no-sim"
    }

    /// Takes one flag; false when it is not a sim flag.
    pub fn take(&mut self, flag: &str, value: &str) -> Result<bool, String> {
        let ms = |v: &str| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| format!("{flag}: {e}"))
        };
        // Containers run with their own working directory: a relative path
        // must be made absolute here, where it was meant.
        let path = |v: &str| std::path::absolute(v).unwrap_or_else(|_| PathBuf::from(v));
        match flag {
            "--no-sim" => self.off = true,
            "--sim-dir" => self.dir = Some(path(value)),
            "--operator-binary" => self.operator_binary = Some(path(value)),
            "--operator-image" => self.operator_images.push(value.to_string()),
            "--fake-cassandra" => self.fake_cassandra = Some(path(value)),
            "--fixtures" => self.fixtures = Some(path(value)),
            "--max-grace-seconds" => self.max_grace = Some(ms(value)? * 1000),
            "--max-probe-period-ms" => self.max_probe_period = Some(ms(value)?),
            "--restart-backoff-ms" => self.restart_backoff = Some(ms(value)?),
            "--local-ssds" => {
                self.local_ssds = Some(value.parse().map_err(|e| format!("{flag}: {e}"))?)
            }
            "--node-time-scale" => {
                self.node_time_scale = Some(value.parse().map_err(|e| format!("{flag}: {e}"))?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The sim's options (None with `--no-sim`); the work directory
    /// defaults to `<serve dir>/sim`.
    pub fn options(self, serve_dir: &std::path::Path) -> Option<SimOptions> {
        if self.off {
            return None;
        }
        let mut o = SimOptions::new(self.dir.unwrap_or_else(|| serve_dir.join("sim")));
        o.operator_binary = self.operator_binary.or(o.operator_binary);
        o.fake_cassandra = self.fake_cassandra.or(o.fake_cassandra);
        o.fixtures = self.fixtures.or(o.fixtures);
        o.operator_images.extend(self.operator_images);
        o.max_grace = self.max_grace;
        o.max_probe_period = self.max_probe_period;
        if let Some(b) = self.restart_backoff {
            o.restart_backoff = b;
        }
        if let Some(n) = self.local_ssds {
            o.local_ssds = n;
        }
        if let Some(f) = self.node_time_scale {
            o.node_time_scale = f;
        }
        Some(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn real_cassandra_runs_released_4_1_and_5_0_tags_only() {
        for tag in ["4.1.8", "4.1.10", "5.0.2"] {
            assert!(RealCassandra::runs(tag), "{tag}");
        }
        for tag in ["3.11.4", "4.0.13", "4.1", "latest", "4.1.8-jammy", "5.0.x"] {
            assert!(!RealCassandra::runs(tag), "{tag}");
        }
    }

    #[test]
    fn label_index_gives_the_rarest_labels_objects_of_the_namespace() {
        let pod = |ns: &str, name: &str, labels: Value| {
            Arc::new(json!({"metadata": {"namespace": ns, "name": name, "labels": labels}}))
        };
        let pods = vec![
            pod("db", "a-0", json!({"app": "c", "member": "a-0"})),
            pod("db", "a-1", json!({"app": "c", "member": "a-1"})),
            pod("db", "x", json!({"app": "other"})),
            pod("web", "a-0", json!({"app": "c", "member": "a-0"})),
        ];
        let index = LabelIndex::new(&pods);
        let names = |found: &[&Value]| -> Vec<String> {
            found
                .iter()
                .map(|o| format!("{}/{}", s(o, "/metadata/namespace"), s(o, "/metadata/name")))
                .collect()
        };
        let labels = |v: Value| v.as_object().cloned().unwrap();
        // The member label is rarer than the app label: its one Pod.
        let both = labels(json!({"app": "c", "member": "a-0"}));
        assert_eq!(names(index.candidates("db", Some(&both))), ["db/a-0"]);
        assert_eq!(
            names(index.candidates("db", Some(&labels(json!({"app": "c"}))))),
            ["db/a-0", "db/a-1"]
        );
        // No labels: the whole namespace; a label no object has: nothing.
        assert_eq!(index.candidates("db", None).len(), 3);
        assert_eq!(index.candidates("db", Some(&labels(json!({})))).len(), 3);
        let none = labels(json!({"app": "c", "member": "a-9"}));
        assert!(index.candidates("db", Some(&none)).is_empty());
        assert!(index.candidates("nowhere", None).is_empty());
    }
}
