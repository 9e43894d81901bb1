//! The `sidecar` subcommand: the entrypoint of the database container
//! (DESIGN.md sections 4 and 6). I/O.
//!
//! Start-up: wait for the member Service's ClusterIP (the member's identity),
//! read the Pod's labels, the Cluster and the seed Services, render the
//! configuration into its own directory, start the probe server, then start
//! the database as a supervised child. While it runs, a watch on the member
//! Service (that one object) drives the decommission protocol of
//! [`crate::decommission`].
//!
//! Settings come from the environment a Pod gives (downward API) and from
//! variables with defaults that suit the real images (`JOLOKIA_URL`,
//! `PROBE_ADDR`: the test world's Pods have their own network namespaces
//! and run with these defaults; tests that run a sidecar on the host set
//! them, and the directories).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use crds::contract;
use crds::labels;
use crds::quantity::Quantity;
use crds::v1alpha1::{Cluster, ClusterMode};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::decommission::{self, Intent, NodeState, Step};
use crate::jolokia::{Jolokia, OperationMode, StorageService};
use crate::render::{self, MemberConfig, Overrides, OverridesOrigin};
use crate::supervise::{self, Child};

/// Settings of the sidecar, from the Pod's environment.
#[derive(clap::Args, Debug, Clone)]
pub struct SidecarArgs {
    /// Name of this member's Pod (and of its member Service).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: String,
    /// Namespace of the Pod.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: String,
    /// IP of the Pod (listen_address).
    #[arg(long, env = "POD_IP")]
    pub pod_ip: IpAddr,
    /// CPU limit of the container (resourceFieldRef limits.cpu).
    #[arg(long, env = "CPU_LIMIT")]
    pub cpu_limit: Option<String>,
    /// Memory limit of the container (resourceFieldRef limits.memory).
    #[arg(long, env = "MEMORY_LIMIT")]
    pub memory_limit: Option<String>,
    /// The database's Jolokia endpoint (bound to the Pod's loopback).
    #[arg(long, env = "JOLOKIA_URL", default_value = crate::jolokia::DEFAULT_URL)]
    pub jolokia_url: String,
    /// Where to serve /healthz and /readyz.
    #[arg(long, env = "PROBE_ADDR", default_value_t = SocketAddr::from(([0, 0, 0, 0], contract::SIDECAR_PORT)))]
    pub probe_addr: SocketAddr,
    /// The image's configuration directory (default: /etc/cassandra or
    /// /etc/scylla).
    #[arg(long, env = "CONFIG_DEFAULTS_DIR")]
    pub config_defaults_dir: Option<PathBuf>,
    /// Where to write the member's configuration (given to Cassandra as
    /// CASSANDRA_CONF).
    #[arg(long, env = "CONFIG_DIR", default_value = "/mnt/shared/conf")]
    pub config_dir: PathBuf,
    /// The data directory (default: /var/lib/cassandra or /var/lib/scylla).
    #[arg(long, env = "DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the rack's ConfigMap of overrides is mounted.
    #[arg(long, env = "OVERRIDES_DIR", default_value = contract::OVERRIDES_DIR)]
    pub overrides_dir: PathBuf,
    /// The database command (default: `cassandra -f`, or the Scylla image's
    /// entrypoint), split on white space.
    #[arg(long, env = "DATABASE_COMMAND")]
    pub database_command: Option<String>,
    /// The Jolokia JVM agent jar.
    #[arg(long, env = "JOLOKIA_AGENT_JAR", default_value = render::DEFAULT_JOLOKIA_AGENT_JAR)]
    pub jolokia_agent_jar: String,
    /// How long to let the database drain on SIGTERM before signalling it.
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = 600)]
    pub drain_timeout_seconds: u64,
}

/// A start-up or runtime step of the sidecar that failed.
#[derive(Debug, Error)]
pub enum MemberError {
    /// Connecting to the Kubernetes API failed.
    #[error("connecting to the Kubernetes API: {0}")]
    Connect(#[source] kube::Error),
    /// Reading an object failed for good.
    #[error("reading {what}: {source}")]
    Read { what: String, source: kube::Error },
    /// The Pod lacks a label the controller sets.
    #[error("pod {pod} has no {label} label: was it created by the operator?")]
    MissingLabel { pod: String, label: &'static str },
    /// A limit is not a Kubernetes quantity.
    #[error("{what}: {source}")]
    Quantity {
        what: &'static str,
        source: crds::quantity::ParseQuantityError,
    },
    /// The member Service has no usable ClusterIP.
    #[error("member service {0} has no ClusterIP")]
    NoClusterIp(String),
    /// Reading or writing a file failed.
    #[error("{action} {path}: {source}")]
    File {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Rendering the configuration failed (nothing was started).
    #[error("rendering the configuration: {0}")]
    Render(#[from] render::RenderError),
    /// The Jolokia client could not be built.
    #[error("jolokia: {0}")]
    Jolokia(#[from] crate::jolokia::Error),
    /// Starting or supervising the database failed.
    #[error(transparent)]
    Supervise(#[from] supervise::SuperviseError),
    /// The database command is empty.
    #[error("DATABASE_COMMAND is empty")]
    NoCommand,
}

/// Whether a data directory holds no data (a new or replaced disk). A fresh
/// ext4 volume has `lost+found`; the sidecar's own marker directory is not
/// data either.
pub fn data_dir_is_empty(data_dir: &Path) -> bool {
    match std::fs::read_dir(data_dir) {
        Err(_) => true,
        Ok(entries) => entries.flatten().all(|e| {
            let name = e.file_name();
            name == "lost+found" || name == ".cassandra-operator"
        }),
    }
}

fn cluster_ip(service: &Service) -> Option<String> {
    service
        .spec
        .as_ref()?
        .cluster_ip
        .clone()
        .filter(|ip| !ip.is_empty() && ip != "None")
}

fn label(labels: &std::collections::BTreeMap<String, String>, key: &str) -> Option<String> {
    labels.get(key).cloned()
}

/// Runs the sidecar; returns the exit code for the container.
pub async fn run(args: SidecarArgs) -> Result<i32, MemberError> {
    let client = Client::try_default().await.map_err(MemberError::Connect)?;
    let services: Api<Service> = Api::namespaced(client.clone(), &args.pod_namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.pod_namespace);

    // The member Service is the member's identity: wait for it and its IP.
    let name = args.pod_name.clone();
    let own_service = (|| async {
        let service = services.get(&name).await.map_err(|e| e.to_string())?;
        match cluster_ip(&service) {
            Some(_) => Ok(service),
            None => Err(format!("member service {name} has no ClusterIP yet")),
        }
    })
    .retry(
        ExponentialBuilder::default()
            .with_max_delay(Duration::from_secs(10))
            .with_max_times(60),
    )
    .notify(|e, after| info!(error = %e, ?after, "waiting for the member service"))
    .await
    .map_err(|_| MemberError::NoClusterIp(name.clone()))?;
    let own_ip = cluster_ip(&own_service).ok_or_else(|| MemberError::NoClusterIp(name.clone()))?;

    let pod = pods.get(&name).await.map_err(|source| MemberError::Read {
        what: format!("pod {name}"),
        source,
    })?;
    let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
    let need = |key: &'static str| {
        label(&pod_labels, key).ok_or(MemberError::MissingLabel {
            pod: name.clone(),
            label: key,
        })
    };
    let (cluster_name, dc, rack) = (
        need(labels::CLUSTER)?,
        need(labels::DATACENTER)?,
        need(labels::RACK)?,
    );
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &args.pod_namespace);
    let cluster = clusters
        .get(&cluster_name)
        .await
        .map_err(|source| MemberError::Read {
            what: format!("cluster {cluster_name}"),
            source,
        })?;
    let mode = cluster.spec.mode;

    // Seeds, from the seed Services of the whole cluster.
    let members = services
        .list(&ListParams::default().labels(&format!("{}={cluster_name}", labels::CLUSTER)))
        .await
        .map_err(|source| MemberError::Read {
            what: "member services".into(),
            source,
        })?;
    let seed_ips: Vec<String> = members
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(contract::SEED))
        })
        .filter_map(cluster_ip)
        .collect();
    let other_members = members.items.iter().any(|s| {
        s.metadata.name.as_deref() != Some(name.as_str())
            && s.spec.as_ref().and_then(|sp| sp.cluster_ip.as_deref()) != Some("None")
            && s.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(labels::RACK))
    });
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(contract::data_dir(mode)));
    let bootstrapped = contract::bootstrapped_marker(&data_dir).is_file();
    let seeds = contract::choose_seeds(&own_ip, &seed_ips, other_members, bootstrapped);
    let marker = contract::decommission_marker(&data_dir);
    let replace_label = own_service
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(contract::REPLACE))
        .cloned();
    let replace_address =
        render::replace_address_for(replace_label.as_deref(), data_dir_is_empty(&data_dir));

    let config = MemberConfig {
        mode,
        cluster_name: cluster_name.clone(),
        pod_ip: args.pod_ip,
        broadcast_address: own_ip
            .parse()
            .map_err(|_| MemberError::NoClusterIp(name.clone()))?,
        seeds: seeds.clone(),
        datacenter: dc.clone(),
        rack: rack.clone(),
        memory_limit: parse_limit("MEMORY_LIMIT", args.memory_limit.as_deref())?,
        cpu_limit: parse_limit("CPU_LIMIT", args.cpu_limit.as_deref())?,
        node_cpu_cores: render::node_cpu_cores(),
        replace_address: replace_address.clone(),
        overrides: read_overrides(&cluster, &rack, &args.overrides_dir, mode)?,
        jolokia_agent_jar: args.jolokia_agent_jar.clone(),
    };
    let defaults_dir = args
        .config_defaults_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(contract::config_dir(mode)));
    let rendered = write_configuration(&config, &defaults_dir, &args.config_dir)?;
    info!(
        cluster = %cluster_name, dc = %dc, rack = %rack, member = %name,
        broadcast = %own_ip, seeds = ?seeds, replace = ?replace_address,
        "configuration rendered"
    );

    // The intent the controller writes on the member Service.
    let (intent_tx, intent_rx) = watch::channel(Intent::from_label(
        own_service
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(contract::DECOMMISSIONED))
            .map(String::as_str),
    ));
    tokio::spawn(watch_own_service(services.clone(), name.clone(), intent_tx));

    let jolokia = Jolokia::new(&args.jolokia_url)?;
    let refused_decommissioned = Arc::new(AtomicBool::new(false));
    let child_alive = Arc::new(AtomicBool::new(false));
    tokio::spawn(serve_probes(
        args.probe_addr,
        jolokia.clone(),
        child_alive.clone(),
    ));
    tokio::spawn(decommission_loop(
        jolokia.clone(),
        intent_rx.clone(),
        services.clone(),
        name.clone(),
        marker.clone(),
        refused_decommissioned.clone(),
    ));

    let shutdown = supervise::termination()?;
    if !decommission::may_start_cassandra(marker.exists()) {
        // The node left the ring: never start it again. Stay up (not ready)
        // until the controller removes the Pod, so the confirmation is made.
        info!(marker = %marker.display(), "this member was decommissioned: the database is not started");
        let signal = shutdown.await;
        info!(%signal, "stopping");
        return Ok(0);
    }

    let command = database_command(&args, mode, &rendered.args, &data_dir)?;
    let mut process = std::process::Command::new(&command[0]);
    process
        .args(&command[1..])
        .env("CASSANDRA_CONF", &args.config_dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    for (key, value) in &rendered.env {
        let mut value = value.clone();
        if key == "JVM_EXTRA_OPTS" && mode == ClusterMode::Cassandra {
            // Keep what the container already passes the JVM.
            let existing = std::env::var(key).unwrap_or_default();
            if !existing.trim().is_empty() {
                value = format!("{value} {}", existing.trim());
            }
        }
        process.env(key, value);
    }
    let mut child = Child::spawn(process)?;
    child_alive.store(true, Ordering::Relaxed);
    if let Some(stderr) = child.take_stderr() {
        let refused = refused_decommissioned.clone();
        std::thread::spawn(move || forward_stderr(stderr, &refused));
    }

    let drain_jolokia = jolokia.clone();
    let code = supervise::supervise(
        &child,
        shutdown,
        || async move { drain(drain_jolokia).await },
        Duration::from_secs(args.drain_timeout_seconds),
    )
    .await;
    child_alive.store(false, Ordering::Relaxed);

    // Cassandra refuses to start a node that was decommissioned: the
    // decommission finished before a crash. Confirm before exiting.
    if refused_decommissioned.load(Ordering::Relaxed) && *intent_rx.borrow() == Intent::Requested {
        if let Err(e) = write_marker(&marker) {
            warn!(error = %e, "writing the decommission marker");
        } else if let Err(e) = confirm(&services, &name).await {
            warn!(error = %e, "confirming the decommission");
        }
    }
    Ok(code)
}

fn parse_limit(what: &'static str, value: Option<&str>) -> Result<Option<Quantity>, MemberError> {
    value
        .filter(|v| !v.trim().is_empty())
        .map(|v| Quantity::parse(v).map_err(|source| MemberError::Quantity { what, source }))
        .transpose()
}

/// The database's command line. Cassandra's: `cassandra -f` with the
/// storage directory on the data volume. The image's cassandra.yaml leaves
/// the data, commit log, hints and saved caches directories unset, so they
/// live under `cassandra.storagedir`; `bin/cassandra` appends its own
/// (`$CASSANDRA_HOME/data`) after `JVM_OPTS`, so only a `-D` of the command
/// line, which it passes last, decides it whatever the image links there.
fn database_command(
    args: &SidecarArgs,
    mode: ClusterMode,
    extra: &[String],
    data_dir: &Path,
) -> Result<Vec<String>, MemberError> {
    let mut command: Vec<String> = match (&args.database_command, mode) {
        (Some(custom), _) => custom.split_whitespace().map(str::to_string).collect(),
        (None, ClusterMode::Cassandra) => vec![
            "cassandra".to_string(),
            "-f".to_string(),
            format!("-Dcassandra.storagedir={}", data_dir.display()),
        ],
        (None, ClusterMode::Scylla) => vec!["/docker-entrypoint.py".to_string()],
    };
    command.extend(extra.iter().cloned());
    if command.is_empty() {
        return Err(MemberError::NoCommand);
    }
    Ok(command)
}

/// The rack's overrides, from the mounted ConfigMap (when the rack names
/// one; a rack without `configMapName` has none even if the directory
/// exists).
fn read_overrides(
    cluster: &Cluster,
    rack: &str,
    dir: &Path,
    mode: ClusterMode,
) -> Result<Option<Overrides>, MemberError> {
    let Some(config_map) = cluster
        .spec
        .datacenter
        .racks
        .iter()
        .find(|r| r.name == rack)
        .and_then(|r| r.config_map_name.clone())
    else {
        return Ok(None);
    };
    let path = dir.join(render::main_file_name(mode));
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(Overrides {
            origin: OverridesOrigin::ConfigMap(config_map),
            text,
        })),
        // The ConfigMap has no key for the main file: nothing to merge.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MemberError::File {
            action: "reading",
            path,
            source,
        }),
    }
}

/// Copies the image's configuration directory (cassandra-env.sh, the JVM
/// options...) and writes the rendered files over it: CASSANDRA_CONF points
/// at one complete directory.
fn write_configuration(
    config: &MemberConfig,
    defaults_dir: &Path,
    out: &Path,
) -> Result<render::Rendered, MemberError> {
    let main = defaults_dir.join(render::main_file_name(config.mode));
    let defaults = std::fs::read_to_string(&main).map_err(|source| MemberError::File {
        action: "reading",
        path: main.clone(),
        source,
    })?;
    let rendered = render::render(config, &defaults)?;
    let mut files: Vec<(String, String)> = Vec::new();
    let entries = std::fs::read_dir(defaults_dir).map_err(|source| MemberError::File {
        action: "listing",
        path: defaults_dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !path.is_file() || rendered.files.iter().any(|f| f.name == name) {
            continue;
        }
        // Binary files are not configuration: skip what is not text.
        if let Ok(content) = std::fs::read_to_string(&path) {
            files.push((name, content));
        }
    }
    files.extend(
        rendered
            .files
            .iter()
            .map(|f| (f.name.clone(), f.content.clone())),
    );
    render::write_all(out, &files)?;
    Ok(rendered)
}

fn forward_stderr(stderr: std::process::ChildStderr, refused: &AtomicBool) {
    use std::io::{BufRead, Write};
    let reader = std::io::BufReader::new(stderr);
    for line in reader.lines().map_while(Result::ok) {
        if line.contains(decommission::REFUSED_DECOMMISSIONED_LOG) {
            refused.store(true, Ordering::Relaxed);
        }
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

async fn watch_own_service(services: Api<Service>, name: String, intent: watch::Sender<Intent>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(services, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(service) => {
                let value = Intent::from_label(
                    service
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(contract::DECOMMISSIONED))
                        .map(String::as_str),
                );
                intent.send_if_modified(|current| {
                    let changed = *current != value;
                    *current = value;
                    changed
                });
            }
            Err(e) => warn!(error = %e, "watching the member service"),
        }
    }
}

async fn decommission_loop(
    jolokia: Jolokia,
    mut intent: watch::Receiver<Intent>,
    services: Api<Service>,
    name: String,
    marker: PathBuf,
    refused: Arc<AtomicBool>,
) {
    let in_flight = Arc::new(AtomicBool::new(false));
    let mut last_reason = "";
    loop {
        let current = *intent.borrow_and_update();
        let node = if refused.load(Ordering::Relaxed) {
            NodeState::RefusedDecommissioned
        } else if current == Intent::Requested {
            match StorageService::new(jolokia.clone()).operation_mode().await {
                Ok(mode) => NodeState::Mode(mode),
                Err(_) => NodeState::Unreachable,
            }
        } else {
            NodeState::Unreachable
        };
        match decommission::next_step(
            current,
            &node,
            marker.exists(),
            in_flight.load(Ordering::Relaxed),
        ) {
            Step::Idle => {
                let _ = intent.changed().await;
                continue;
            }
            Step::CallDecommission => {
                info!(member = %name, "decommissioning: streaming this node's data to the others");
                in_flight.store(true, Ordering::Relaxed);
                let (jolokia, in_flight) = (jolokia.clone(), in_flight.clone());
                tokio::spawn(async move {
                    // The result says little (a timeout is not a failure):
                    // the operation mode decides.
                    if let Err(e) = StorageService::new(jolokia).decommission().await {
                        warn!(error = %e, "the decommission call returned an error");
                    }
                    in_flight.store(false, Ordering::Relaxed);
                });
            }
            Step::WriteMarker => {
                info!(member = %name, "the node left the ring (DECOMMISSIONED)");
                if let Err(e) = write_marker(&marker) {
                    warn!(error = %e, "writing the decommission marker");
                }
                continue;
            }
            Step::Confirm => match confirm(&services, &name).await {
                Ok(()) => {
                    info!(member = %name, "decommission confirmed on the member service");
                    continue;
                }
                Err(e) => warn!(error = %e, "confirming the decommission"),
            },
            Step::Wait(reason) => {
                if reason != last_reason {
                    info!(member = %name, mode = ?node, "{reason}");
                    last_reason = reason;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn write_marker(marker: &Path) -> Result<(), MemberError> {
    let file_err = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| MemberError::File {
            action,
            path,
            source,
        }
    };
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir).map_err(file_err("creating", dir))?;
    }
    let file = std::fs::File::create(marker).map_err(file_err("creating", marker))?;
    file.sync_all().map_err(file_err("syncing", marker))?;
    if let Some(dir) = marker.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(file_err("syncing", dir))?;
    }
    Ok(())
}

async fn confirm(services: &Api<Service>, name: &str) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"metadata": {"labels": {contract::DECOMMISSIONED: contract::DECOMMISSION_DONE}}});
    services
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

async fn drain(jolokia: Jolokia) {
    let storage = StorageService::new(jolokia);
    match storage.operation_mode().await {
        Ok(OperationMode::Drained | OperationMode::Decommissioned) => {}
        Ok(_) => {
            if let Err(e) = storage.drain().await {
                warn!(error = %e, "drain failed");
            } else {
                info!("drained");
            }
        }
        Err(e) => info!(error = %e, "not draining: the database does not answer"),
    }
}

async fn serve_probes(addr: SocketAddr, jolokia: Jolokia, child_alive: Arc<AtomicBool>) {
    use warp::Filter;
    let routes = warp::get()
        .and(warp::path::full())
        .then(move |path: warp::path::FullPath| {
            let jolokia = jolokia.clone();
            let alive = child_alive.load(Ordering::Relaxed);
            async move {
                let (status, body) = match path.as_str() {
                    // Alive while the sidecar runs: it exits when the database
                    // does, and a long start-up or bootstrap must not be killed.
                    "/healthz" => (200, if alive { "ok" } else { "starting" }.to_string()),
                    "/readyz" => {
                        match StorageService::new(jolokia.with_timeout(Duration::from_secs(3)))
                            .operation_mode()
                            .await
                        {
                            Ok(OperationMode::Normal) => (200, "NORMAL".to_string()),
                            Ok(mode) => (503, mode.to_string()),
                            Err(e) => (503, format!("database not reachable: {e}")),
                        }
                    }
                    _ => (404, "not found".to_string()),
                };
                let mut response = warp::reply::Response::new(body.into());
                *response.status_mut() =
                    warp::http::StatusCode::from_u16(status).unwrap_or_default();
                response
            }
        });
    // Bind ourselves: warp's own bind panics when the port is taken (a
    // previous process still closing it); retry instead.
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot listen yet; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    };
    warp::serve(routes).incoming(listener).run().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn empty_data_dirs() {
        let dir = tempfile::tempdir().unwrap();
        assert!(data_dir_is_empty(&dir.path().join("missing")));
        assert!(data_dir_is_empty(dir.path()));
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        write_marker(&contract::decommission_marker(dir.path())).unwrap();
        assert!(data_dir_is_empty(dir.path()));
        std::fs::create_dir(dir.path().join("data")).unwrap();
        assert!(!data_dir_is_empty(dir.path()));
        assert!(contract::decommission_marker(dir.path()).is_file());
    }

    #[test]
    fn the_database_command_takes_the_rendered_arguments() {
        let args = SidecarArgs {
            pod_name: "p".into(),
            pod_namespace: "n".into(),
            pod_ip: "127.0.0.1".parse().unwrap(),
            cpu_limit: None,
            memory_limit: None,
            jolokia_url: crate::jolokia::DEFAULT_URL.into(),
            probe_addr: "127.0.0.1:0".parse().unwrap(),
            config_defaults_dir: None,
            config_dir: "/c".into(),
            data_dir: None,
            overrides_dir: "/o".into(),
            database_command: None,
            jolokia_agent_jar: "j".into(),
            drain_timeout_seconds: 1,
        };
        let data = Path::new("/var/lib/cassandra");
        assert_eq!(
            database_command(&args, ClusterMode::Cassandra, &[], data).unwrap(),
            vec![
                "cassandra",
                "-f",
                "-Dcassandra.storagedir=/var/lib/cassandra"
            ]
        );
        assert_eq!(
            database_command(&args, ClusterMode::Scylla, &ips(&["--smp", "2"]), data).unwrap(),
            vec!["/docker-entrypoint.py", "--smp", "2"]
        );
        let custom = SidecarArgs {
            database_command: Some("  ".into()),
            ..args
        };
        assert!(matches!(
            database_command(&custom, ClusterMode::Cassandra, &[], data),
            Err(MemberError::NoCommand)
        ));
    }
}
