//! Starting kubesim: its credentials, the API server's TLS listener on
//! 127.0.0.1 (and on the Pod network's gateway), the test world's plain
//! HTTP endpoints (`/sim/...`) on listeners of their own, the connection
//! loops, the in-process controllers, the simulated Nodes and the admin
//! kubeconfig. I/O.

use super::auth::Authority;
use super::faults::{FaultConfig, Faults, RequestLog, RequestRecord};
use super::http::{Listener, Shared, handle};
use super::store::{Store, StoreOptions, Target, WriteOptions};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How to start kubesim.
#[derive(Debug, Clone)]
pub struct Options {
    /// Zones of the Nodes (`--zones`).
    pub zones: Vec<String>,
    /// Nodes in each zone (`--nodes-per-zone`).
    pub nodes_per_zone: usize,
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Events kept per kind (the watch cache window).
    pub watch_window: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Faults from the start.
    pub faults: FaultConfig,
    /// The fake Cassandra nodes' ring model (seed, timing).
    pub ring: crate::ring::Options,
    /// The simulated cluster (StatefulSets, scheduler, storage, kubelet);
    /// None: the API alone.
    pub sim: Option<super::sim::SimOptions>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            zones: vec!["a".into()],
            nodes_per_zone: 1,
            port: 0,
            watch_window: StoreOptions::default().watch_window,
            bookmark_interval: Duration::from_secs(1),
            faults: FaultConfig::default(),
            ring: crate::ring::Options::default(),
            sim: None,
        }
    }
}

/// A running kubesim; stops when dropped.
#[derive(Debug)]
pub struct KubeSim {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    sim: Option<super::sim::Sim>,
    /// The test world's endpoints on the host (plain HTTP).
    sim_addr: SocketAddr,
}

/// The region of a zone, as cloud providers name them (`europe-west1-b`
/// is in `europe-west1`); a zone without a suffix is its own region.
pub fn region_of(zone: &str) -> String {
    match zone.rsplit_once('-') {
        Some((region, z)) if z.len() == 1 => region.to_string(),
        _ => zone.to_string(),
    }
}

/// The Node objects of a cluster of `zones` × `per_zone`.
pub fn nodes(zones: &[String], per_zone: usize) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut n = 0;
    for zone in zones {
        let region = region_of(zone);
        for i in 0..per_zone {
            n += 1;
            let name = format!("node-{zone}-{i}");
            out.push(json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": zone,
                    "topology.kubernetes.io/region": region,
                    "failure-domain.beta.kubernetes.io/zone": zone,
                    "failure-domain.beta.kubernetes.io/region": region,
                }},
                "spec": {},
                "status": {
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
                    "addresses": [
                        {"type": "InternalIP", "address": format!("127.0.1.{n}")},
                        {"type": "Hostname", "address": name}
                    ],
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64",
                        "containerRuntimeVersion": "kubesim://1", "kernelVersion": "", "osImage": "kubesim",
                        "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""},
                },
            }));
        }
    }
    out
}

impl KubeSim {
    /// Starts serving on 127.0.0.1 and returns once requests are accepted.
    pub async fn start(opts: Options) -> std::io::Result<KubeSim> {
        let store = Store::new(StoreOptions {
            watch_window: opts.watch_window,
        });
        let nodes_t = Target::new("", "v1", "nodes", None);
        for node in nodes(&opts.zones, opts.nodes_per_zone) {
            store
                .create(&nodes_t, node, &WriteOptions::default())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        super::auth::defaults::install(&store).map_err(|e| std::io::Error::other(e.to_string()))?;
        // Pods have their own network namespaces: they reach kubesim at
        // the Pod network's gateway, which its certificate names too.
        let net = match &opts.sim {
            Some(_) => Some(Arc::new(
                tokio::task::spawn_blocking(super::sim::net::Network::create)
                    .await
                    .map_err(std::io::Error::other)??,
            )),
            None => None,
        };
        let gateways: Vec<std::net::IpAddr> = net.iter().map(|n| n.gateway().into()).collect();
        let authority = Arc::new(Authority::new(&gateways).map_err(std::io::Error::other)?);
        let listener = TcpListener::bind(("127.0.0.1", opts.port)).await?;
        let addr = listener.local_addr()?;
        let sim_listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let sim_addr = sim_listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: store.clone(),
            faults: Faults::new(opts.faults.clone()),
            log: RequestLog::default(),
            sim_log: RequestLog::default(),
            addr,
            bookmark_interval: opts.bookmark_interval,
            ring: Arc::new(crate::fake_cassandra::ring_service::RingService::new(
                opts.ring.clone(),
            )),
            sim_dir: opts.sim.as_ref().map(|o| o.work_dir.clone()),
            authority: authority.clone(),
            kubelets: Arc::default(),
            policy: Default::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let sim = match (opts.sim.clone(), net) {
            (Some(o), Some(net)) => {
                let pod_api = TcpListener::bind((net.gateway(), 0)).await?;
                let pod_sim = TcpListener::bind((net.gateway(), 0)).await?;
                let access = super::sim::PodAccess {
                    api: pod_api.local_addr()?,
                    sim_url: format!("http://{}", pod_sim.local_addr()?),
                    authority: authority.clone(),
                };
                tasks.push(tokio::spawn(accept_loop(
                    pod_api,
                    shared.clone(),
                    Listener::Api,
                    stopped.clone(),
                )));
                tasks.push(tokio::spawn(accept_loop(
                    pod_sim,
                    shared.clone(),
                    Listener::Sim,
                    stopped.clone(),
                )));
                Some(super::sim::Sim::start(
                    store.clone(),
                    o,
                    access,
                    net,
                    Some(shared.ring.clone()),
                    shared.kubelets.clone(),
                )?)
            }
            _ => None,
        };
        tasks.push(tokio::spawn(super::gc::run(store, Duration::from_secs(1))));
        tasks.push(tokio::spawn(accept_loop(
            sim_listener,
            shared.clone(),
            Listener::Sim,
            stopped.clone(),
        )));
        tasks.push(tokio::spawn(accept_loop(
            listener,
            shared.clone(),
            Listener::Api,
            stopped,
        )));
        tasks.push(tokio::spawn(
            crate::fake_cassandra::ring_service::run_clock(shared.ring.clone()),
        ));
        Ok(KubeSim {
            shared,
            stop,
            tasks,
            sim,
            sim_addr,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The API server: `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    /// The test world's own endpoints (`/sim/ring`, `/sim/faults`,
    /// `/sim/requests`): `http://127.0.0.1:<port>`, plain HTTP, no
    /// credentials (they are no part of the Kubernetes API).
    pub fn sim_url(&self) -> String {
        format!("http://{}", self.sim_addr)
    }

    /// Where Pods reach the test world's endpoints
    /// (`http://<gateway>:<port>`: every container's `KUBESIM_URL`), with
    /// the sim.
    pub fn pod_url(&self) -> Option<&str> {
        self.sim.as_ref().map(|s| s.pod_url())
    }

    /// Where Pods reach the API server (`<gateway>:<port>`: every
    /// container's `KUBERNETES_SERVICE_HOST` and `_PORT`), with the sim.
    pub fn pod_api(&self) -> Option<SocketAddr> {
        self.sim.as_ref().map(|s| s.pod_api())
    }

    /// kubesim's credentials: its CA, the admin token, the token signer.
    pub fn authority(&self) -> &Authority {
        &self.shared.authority
    }

    /// The sim's Pod network (with the sim).
    pub fn network(&self) -> Option<&super::sim::net::Network> {
        self.sim.as_ref().map(|s| s.network())
    }

    /// The store: kubesim's in-process API.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The fake Cassandra nodes' ring.
    pub fn ring(&self) -> &Arc<crate::fake_cassandra::ring_service::RingService> {
        &self.shared.ring
    }

    /// The admin kubeconfig of this server (context `kubesim`, namespace
    /// `default`): its CA, and the token of a cluster admin.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_with_token(self.shared.authority.admin_token())
    }

    /// A kubeconfig for this server whose user is the bearer of `token`
    /// (a ServiceAccount token from [`KubeSim::create_token`]).
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        kubeconfig_for(&self.url(), &self.shared.authority.ca_data(), token)
    }

    /// A token for a ServiceAccount, as the TokenRequest API makes it
    /// (`kubectl create token`): valid for `seconds`.
    pub fn create_token(
        &self,
        namespace: &str,
        service_account: &str,
        seconds: i64,
    ) -> Result<String, super::store::ApiError> {
        super::http::tokens::issue(
            &self.shared.store,
            &self.shared.authority,
            namespace,
            service_account,
            seconds,
            None,
        )
        .map(|(token, _)| token)
    }

    /// Writes `dir/kubeconfig` (and `dir/sim-url`, the test world's
    /// endpoints, for `kubesim ring --dir`) and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, self.kubeconfig())?;
        std::fs::write(dir.join("sim-url"), self.sim_url())?;
        Ok(path)
    }

    /// The requests served so far (admin endpoints excepted).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.log.since(0)
    }

    /// The requests to the test world's own endpoints (`/sim/...`), such
    /// as the fake Cassandra nodes' calls to the ring.
    pub fn sim_requests(&self) -> Vec<RequestRecord> {
        self.shared.sim_log.since(0)
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.shared.log.clear();
    }

    /// Kills or freezes a process right after its Nth matching write
    /// commits (see [`super::faults::WriteHook`]).
    pub fn on_write(&self, hook: super::faults::WriteHook) {
        self.shared.faults.add_hook(hook);
    }

    /// Sets the faults to inject.
    pub fn set_faults(&self, cfg: FaultConfig) {
        self.shared.faults.set(cfg);
    }

    /// Stops serving (also on drop).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
        if let Some(sim) = &self.sim {
            sim.stop();
        }
    }
}

/// A kubeconfig for `server` that trusts `ca_data` (base64 PEM) and sends
/// `token` (context `kubesim`, namespace `default`).
pub fn kubeconfig_for(server: &str, ca_data: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubesim\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca_data}\ncontexts:\n- name: kubesim\n  context:\n    cluster: kubesim\n    user: kubesim\n    namespace: default\ncurrent-context: kubesim\nusers:\n- name: kubesim\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves the connections of one listener: TLS for the API server, plain
/// HTTP for the test world's endpoints.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    kind: Listener,
    stopped: watch::Receiver<bool>,
) {
    let tls = tokio_rustls::TlsAcceptor::from(shared.authority.tls());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let mut stopped = stopped.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, kind, req).await) }
            });
            match kind {
                Listener::Api => {
                    // A client that does not finish its handshake (a plain
                    // HTTP request, an untrusted CA) is dropped.
                    let Ok(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                }
                Listener::Sim => {
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_carry_zone_labels() {
        let ns = nodes(&["europe-west1-b".into(), "europe-west1-c".into()], 2);
        assert_eq!(ns.len(), 4);
        assert_eq!(ns[2]["metadata"]["name"], "node-europe-west1-c-0");
        assert_eq!(
            ns[2]["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "europe-west1-c"
        );
        assert_eq!(
            ns[2]["metadata"]["labels"]["failure-domain.beta.kubernetes.io/zone"],
            "europe-west1-c"
        );
        assert_eq!(
            ns[2]["metadata"]["labels"]["topology.kubernetes.io/region"],
            "europe-west1"
        );
        assert_eq!(region_of("a"), "a");
    }
}
