//! The `sidecar` subcommand: the entrypoint of the database container
//! (DESIGN.md sections 4 and 6). I/O.
//!
//! This module conducts; its rooms work: [`identity`] gathers who the
//! member is, [`database`] writes the configuration and runs the database,
//! [`crate::probes`] serves the probes, [`crate::decommission`] answers the
//! scale-down intent, [`crate::markers`] keeps what the data volume must
//! remember. [`run`] reads as the steps of DESIGN.md.
//!
//! Settings come from the environment a Pod gives (downward API) and from
//! variables with defaults that suit the real images (`JOLOKIA_URL`,
//! `SCYLLA_API_URL`, `IOTUNE_COMMAND`, `PROBE_ADDR`, `PROC_SYS_FS`: the test world's Pods have their own network namespaces
//! and run with these defaults; tests that run a sidecar on the host set
//! them, and the directories).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crds::contract;
use crds::contract::pod::env;
use crds::v1alpha1::Cluster;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::decommission::{self, Intent, act};
use crate::node::Node;
use crate::render::{self, MemberConfig};
use crate::supervise;
use crate::{markers, probes, sstables};
use crds::v1alpha1::ClusterMode;
use database::StartRefusals;
use kube::api::{Patch, PatchParams};
use nix::sys::signal::Signal;
use tokio::sync::Notify;

mod aio;
mod bootstrap;
mod database;
mod gossip;
mod identity;
pub mod maintenance;
pub mod repair;
mod seeds;
pub mod tls;

pub use aio::START_REFUSED;
pub use database::{ensure_io_properties, io_properties_file};
pub use identity::{Member, cluster_ip};

/// Settings of the sidecar, from the Pod's environment.
#[derive(clap::Args, Debug, Clone)]
pub struct SidecarArgs {
    /// Name of this member's Pod (and of its member Service).
    #[arg(long, env = env::POD_NAME)]
    pub pod_name: String,
    /// Namespace of the Pod.
    #[arg(long, env = env::POD_NAMESPACE)]
    pub pod_namespace: String,
    /// IP of the Pod (listen_address).
    #[arg(long, env = env::POD_IP)]
    pub pod_ip: IpAddr,
    /// The Pod's Cluster, datacenter and rack: its labels, through the
    /// downward API (so that the member's token needs no read of Pods).
    #[arg(long, env = env::POD_CLUSTER, default_value = "")]
    pub pod_cluster: String,
    #[arg(long, env = env::POD_DATACENTER, default_value = "")]
    pub pod_datacenter: String,
    #[arg(long, env = env::POD_RACK, default_value = "")]
    pub pod_rack: String,
    /// CPU limit of the container (resourceFieldRef limits.cpu).
    #[arg(long, env = env::CPU_LIMIT)]
    pub cpu_limit: Option<String>,
    /// Memory limit of the container (resourceFieldRef limits.memory).
    #[arg(long, env = env::MEMORY_LIMIT)]
    pub memory_limit: Option<String>,
    /// The database's Jolokia endpoint (bound to the Pod's loopback).
    #[arg(long, env = "JOLOKIA_URL", default_value = crate::jolokia::DEFAULT_URL.as_str())]
    pub jolokia_url: String,
    /// ScyllaDB's REST API (bound to the Pod's loopback), in scylla mode.
    #[arg(long, env = "SCYLLA_API_URL", default_value = crate::scylla::DEFAULT_URL.as_str())]
    pub scylla_api_url: String,
    /// ScyllaDB's disk benchmark, run once per data volume (scylla mode).
    #[arg(long, env = "IOTUNE_COMMAND", default_value = "iotune")]
    pub iotune_command: String,
    /// Where the kernel shows the Node's AIO events (`aio-max-nr`,
    /// `aio-nr`), read before ScyllaDB starts (scylla mode).
    #[arg(long, env = "PROC_SYS_FS", default_value = aio::DEFAULT_PROC_SYS_FS)]
    pub proc_sys_fs: PathBuf,
    /// How often to look again at the Node's AIO events while they are
    /// too few for ScyllaDB to start.
    #[arg(long, env = "AIO_CHECK_SECONDS", default_value_t = 10)]
    pub aio_check_seconds: u64,
    /// Where to serve /healthz and /readyz.
    #[arg(long, env = "PROBE_ADDR", default_value_t = SocketAddr::from(([0, 0, 0, 0], contract::SIDECAR_PORT)))]
    pub probe_addr: SocketAddr,
    /// The image's configuration directory (default: /etc/cassandra or
    /// /etc/scylla).
    #[arg(long, env = "CONFIG_DEFAULTS_DIR")]
    pub config_defaults_dir: Option<PathBuf>,
    /// Where to write the member's configuration (given to Cassandra as
    /// CASSANDRA_CONF).
    #[arg(long, env = "CONFIG_DIR", default_value = contract::RENDERED_CONFIG_DIR)]
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
    /// Where the member's key, certificate chain and CA bundle are kept
    /// (the memory-backed TLS volume), when the Cluster asks for TLS.
    #[arg(long, env = "TLS_DIR", default_value = crds::contract::tls::TLS_DIR)]
    pub tls_dir: PathBuf,
    /// The encryption the member runs with, as the controller's Pod
    /// template says (`internode=<all|dc|rack|none>[+optional],client=<...>`:
    /// the spec's, or a step of a move to TLS); without it, the Cluster's
    /// spec.
    #[arg(long, env = crds::contract::tls::ENCRYPTION_ENV)]
    pub tls_encryption: Option<String>,
    /// The Jolokia JVM agent jar.
    #[arg(long, env = "JOLOKIA_AGENT_JAR", default_value = render::DEFAULT_JOLOKIA_AGENT_JAR)]
    pub jolokia_agent_jar: String,
    /// How long to let the database drain on SIGTERM before signalling it.
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = 600)]
    pub drain_timeout_seconds: u64,
    /// How often to count the old-format sstables of the data directory
    /// (a listing of file names, no reads).
    #[arg(long, env = "SSTABLE_SCAN_SECONDS", default_value_t = 300)]
    pub sstable_scan_seconds: u64,
    /// How often to read the node's gossip for the member's gossip record
    /// (written only when it changes).
    #[arg(long, env = "GOSSIP_RECORD_SECONDS", default_value_t = 2)]
    pub gossip_record_seconds: u64,
    /// The release the image runs (the official images set it).
    #[arg(long, env = "CASSANDRA_VERSION")]
    pub cassandra_version: Option<String>,
    /// How often to compare the old-format sstables count (the gauge's)
    /// with the one recorded on the member Service, while NORMAL (written
    /// only when it changed).
    #[arg(long, env = "OLD_FORMAT_RECORD_SECONDS", default_value_t = 30)]
    pub old_format_record_seconds: u64,
    /// The delay before a failed maintenance request is tried again,
    /// doubling after each further failure (at most 10 minutes).
    #[arg(long, env = "MAINTENANCE_RETRY_SECONDS", default_value_t = 10)]
    pub maintenance_retry_seconds: u64,
    /// How many subranges a scheduled repair cuts the node's primary
    /// ranges into, per keyspace (each repaired, and recorded, on its own).
    #[arg(long, env = "MAINTENANCE_REPAIR_SUBRANGES", default_value_t = maintenance::ring::DEFAULT_SUBRANGES)]
    pub maintenance_repair_subranges: u32,
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
    /// A marker on the data volume could not be read or written.
    #[error(transparent)]
    Marker(crate::markers::MarkerError),
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
    /// The client of the node could not be built.
    #[error("the database's client: {0}")]
    Node(#[from] crate::node::NodeError),
    /// ScyllaDB's I/O setup (iotune) failed.
    #[error(
        "iotune failed ({0}): scylla cannot start outside developer mode without its i/o scheduler's properties"
    )]
    IoSetup(String),
    /// Starting or supervising the database failed.
    #[error(transparent)]
    Supervise(#[from] supervise::SuperviseError),
    /// The database command is empty.
    #[error("DATABASE_COMMAND is empty")]
    NoCommand,
    /// The Pod template's encryption setting cannot be read.
    #[error("{0}")]
    Encryption(String),
}

/// Runs the sidecar; returns the exit code for the container. The steps of
/// DESIGN.md sections 4 and 6, in order.
pub async fn run(args: SidecarArgs) -> Result<i32, MemberError> {
    let client = Client::try_default().await.map_err(MemberError::Connect)?;
    let services: Api<Service> = Api::namespaced(client.clone(), &args.pod_namespace);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &args.pod_namespace);

    // 1. Who this member is: its member Service (and ClusterIP), the Pod's
    //    labels, its Cluster.
    let member = Member::gather(&args, &services, &clusters).await?;
    let name = member.pod.clone();
    let data_dir = member.data_dir.clone();
    let marker = contract::decommission_marker(&data_dir);

    // 2. A volume whose node left the ring, given back to a member the spec
    //    wants again (a later scale-up reusing the PVC): its data left with
    //    the node; start afresh as a new, bootstrapping member.
    if marker.exists() && Intent::of(&member.service.metadata) == Intent::Serve {
        info!(member = %name, "the data volume holds a node that left the ring, and the member is wanted again: clearing it to bootstrap as a new member");
        markers::clear_left_node(&data_dir).map_err(MemberError::Marker)?;
    }

    // 3. Its seeds and its replace intent, from what its data volume holds.
    let bootstrapped = contract::bootstrapped_marker(&data_dir).is_file();
    let seeds = member.seeds(&services, bootstrapped).await?;
    let replace_address = render::replace_address_for(
        member.service_label(contract::REPLACE),
        !bootstrapped || markers::data_dir_is_empty(&data_dir),
    );
    let replace_address = replace_target(
        member.mode,
        replace_address,
        member.service_annotation(contract::HOST_ID),
    );

    // 4. Its configuration, rendered from the image's defaults.
    let mode = member.mode;
    let config = MemberConfig {
        mode,
        cluster_name: member.cluster_name.clone(),
        pod_ip: args.pod_ip,
        broadcast_address: member
            .own_ip
            .parse()
            .map_err(|_| MemberError::NoClusterIp(name.clone()))?,
        seeds: seeds.clone(),
        datacenter: member.dc.clone(),
        rack: member.rack.clone(),
        memory_limit: database::parse_limit(env::MEMORY_LIMIT, args.memory_limit.as_deref())?,
        cpu_limit: database::parse_limit(env::CPU_LIMIT, args.cpu_limit.as_deref())?,
        node_cpu_cores: render::node_cpu_cores(),
        replace_address: replace_address.clone(),
        overrides: database::read_overrides(
            &member.cluster,
            &member.rack,
            &args.overrides_dir,
            mode,
        )?,
        jolokia_agent_jar: args.jolokia_agent_jar.clone(),
        release: args.cassandra_version.clone(),
        tls: render::tls::TlsSettings::of(
            args.tls_encryption.as_deref(),
            member.cluster.spec.security.as_ref(),
            &args.tls_dir,
        )
        .map_err(MemberError::Encryption)?,
        authentication: member
            .cluster
            .spec
            .security
            .as_ref()
            .is_some_and(|s| s.authentication_enabled()),
    };
    let defaults_dir = args
        .config_defaults_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(contract::config_dir(mode)));
    let rendered = database::write_configuration(&config, &defaults_dir, &args.config_dir)?;
    info!(
        cluster = %member.cluster_name, dc = %member.dc, rack = %member.rack, member = %name,
        broadcast = %member.own_ip, seeds = ?seeds, bootstrapped, replace = ?replace_address,
        "configuration rendered"
    );

    // 5. The records of intent on the member Service, followed from now on.
    let (service_tx, service_rx) = watch::channel(member.service.clone());
    tokio::spawn(act::watch_own_service(
        services.clone(),
        name.clone(),
        service_tx,
    ));

    // 6. Probes, the bootstrap record, and the decommission protocol.
    let node = Node::for_mode(mode, &args.jolokia_url, &args.scylla_api_url)?;
    let refusals = Arc::new(StartRefusals::default());
    let child_alive = Arc::new(AtomicBool::new(false));
    let restart = Arc::new(Notify::new());
    let gauge = sstables::Gauge::default();
    tokio::spawn(probes::serve_probes(
        args.probe_addr,
        node.clone(),
        child_alive.clone(),
        gauge.clone(),
    ));
    let old_format =
        old_format_rule(mode, args.cassandra_version.as_deref(), &rendered).map(|latest| {
            maintenance::OldFormat {
                gauge: gauge.clone(),
                data: data_dir.join("data"),
                latest,
            }
        });
    if let Some(old) = &old_format {
        tokio::spawn(sstables::refresh_every(
            old.gauge.clone(),
            old.data.clone(),
            old.latest.clone(),
            Duration::from_secs(args.sstable_scan_seconds.max(1)),
        ));
    }
    tokio::spawn(act::decommission_loop(
        act::Links {
            node: node.clone(),
            services: services.clone(),
            name: name.clone(),
            marker: marker.clone(),
            leaving: contract::leaving_marker(&data_dir),
            refused_decommissioned: refusals.decommissioned.clone(),
            restart: restart.clone(),
        },
        service_rx.clone(),
    ));

    let mut shutdown = Box::pin(supervise::termination()?);
    if !decommission::may_start_cassandra(marker.exists()) {
        // The node left the ring: never start it again. Stay up (not ready)
        // until the controller removes the Pod, so the confirmation is made.
        info!(marker = %marker.display(), "this member was decommissioned: the database is not started");
        let signal = shutdown.await;
        info!(%signal, "stopping");
        return Ok(0);
    }
    tokio::spawn(gossip::record_gossip(
        node.clone(),
        member.own_ip.clone(),
        services.clone(),
        service_rx.clone(),
        name.clone(),
        Duration::from_secs(args.gossip_record_seconds.max(1)),
    ));
    if let Node::Cassandra(storage) = &node {
        // A member being replaced is everyone's seed while it is (the
        // module doc of `seeds`: CASSANDRA-19580).
        tokio::spawn(seeds::follow_seeds(
            services.clone(),
            member.clone(),
            args.config_dir.clone(),
            storage.clone(),
            seeds.clone(),
        ));
    }
    // A replace at the member's own address owes a repair once NORMAL:
    // its marker is written here, before Cassandra starts to replace.
    if repair::prepare(mode, replace_address.as_deref(), &data_dir).map_err(MemberError::Marker)? {
        tokio::spawn(repair::run(
            node.clone(),
            data_dir.clone(),
            services.clone(),
            name.clone(),
            repair::Pace::default(),
        ));
    }
    // The maintenance the controller asks for (issue 33), on its own
    // client: its calls block for as long as a cleanup runs.
    let maintained = maintenance::client(mode, &args.jolokia_url, &args.scylla_api_url)?;
    if let Some(old) = old_format.clone() {
        tokio::spawn(maintenance::record_old_format(
            maintained.clone(),
            old,
            services.clone(),
            service_rx.clone(),
            name.clone(),
            Duration::from_secs(args.old_format_record_seconds.max(1)),
        ));
    }
    tokio::spawn(maintenance::run(
        maintenance::Links {
            node: maintained,
            mode,
            data_dir: data_dir.clone(),
            services: services.clone(),
            name: name.clone(),
            old_format,
            settings: maintenance::Settings {
                retry: Duration::from_secs(args.maintenance_retry_seconds.max(1)),
                subranges: args.maintenance_repair_subranges.max(1),
                ..maintenance::Settings::default()
            },
        },
        service_rx.clone(),
    ));
    if !bootstrapped {
        tokio::spawn(bootstrap::record_bootstrap(
            node.clone(),
            data_dir.clone(),
            services.clone(),
            service_rx.clone(),
            name.clone(),
        ));
    }

    // The member's certificate, before the database reads it: the Pod
    // stays not ready, its probes answering, until the controller signs.
    if config.tls.is_some() {
        let links = tls::Links::new(
            &client,
            &args.pod_namespace,
            &name,
            &member.cluster_name,
            &args.tls_dir,
        );
        let validity = tokio::select! {
            validity = tls::obtain_until_written(&links) => validity,
            signal = &mut shutdown => {
                info!(%signal, "stopping before the database started");
                return Ok(0);
            }
        };
        tokio::spawn(tls::keep_current(links, node.clone(), validity));
    }

    if mode == ClusterMode::Scylla {
        tokio::spawn(bootstrap::record_host_id(
            node.clone(),
            member.service.clone(),
            services.clone(),
            name.clone(),
        ));
        // The Node's AIO events, then the disk's I/O properties, before
        // ScyllaDB: both may take minutes (an admin raising fs.aio-max-nr,
        // iotune measuring), while the probes answer and the Pod's stop
        // still stops the sidecar (iotune killed with it).
        let command = database::database_command(&args, mode, &rendered.args, &data_dir)?;
        let prepare = async {
            if let Some(need) = aio::Need::of_command(&command, render::node_cpu_cores()) {
                let report = aio::Report {
                    services: &services,
                    name: &name,
                    recorded: member
                        .service_annotation(aio::START_REFUSED)
                        .map(str::to_string),
                    interval: Duration::from_secs(args.aio_check_seconds.max(1)),
                };
                aio::wait_for_capacity(&args.proc_sys_fs, need, report).await;
            }
            database::ensure_io_properties(&args.iotune_command, &data_dir).await
        };
        tokio::select! {
            prepared = prepare => {
                prepared?;
            }
            signal = &mut shutdown => {
                info!(%signal, "stopping before the database started");
                return Ok(0);
            }
        }
    }

    // 7. The database, supervised until it ends, the Pod stops, or the
    //    decommission protocol asks for a restart.
    let child = database::start(&args, mode, &rendered, &data_dir, refusals.clone())?;
    child_alive.store(true, Ordering::Relaxed);

    let drain_node = node.clone();
    let stop = async {
        tokio::select! {
            signal = &mut shutdown => signal,
            _ = restart.notified() => {
                info!(member = %name, "restarting the database");
                Signal::SIGTERM
            }
        }
    };
    let code = supervise::supervise(
        &child,
        stop,
        || async move { database::drain(drain_node).await },
        Duration::from_secs(args.drain_timeout_seconds),
    )
    .await;
    child_alive.store(false, Ordering::Relaxed);

    // 8. What Cassandra's refusal to start asks of the sidecar.
    if refusals.decommissioned.load(Ordering::Relaxed) {
        // The decommission finished before a crash: the data left the ring.
        // Record it, and confirm when it was asked for.
        if let Err(e) = markers::write_marker(&marker, "") {
            warn!(error = %e, "writing the decommission marker");
        } else if let seen = service_rx.borrow().clone()
            && Intent::of(&seen.metadata) == Intent::Requested
            && let Err(e) =
                act::confirm(&services, &seen, &contract::leaving_marker(&data_dir)).await
        {
            warn!(error = %e, "confirming the decommission");
        }
    }
    if let Some(line) = refusals.collision()
        && !bootstrapped
    {
        request_replace(&services, &name, &line, service_rx, shutdown).await;
    }
    Ok(code)
}

/// What counts as an old sstable for the Cassandra this member runs: the
/// image's release (`CASSANDRA_VERSION`, which the official images set)
/// under the rendered cassandra.yaml's `storage_compatibility_mode`. None
/// for Scylla (its own formats) or a release it cannot read: no gauge.
fn old_format_rule(
    mode: crds::v1alpha1::ClusterMode,
    release: Option<&str>,
    rendered: &render::Rendered,
) -> Option<sstables::Latest> {
    if mode != crds::v1alpha1::ClusterMode::Cassandra {
        return None;
    }
    let release = release?;
    let yaml = rendered.files.iter().find(|f| f.name == "cassandra.yaml")?;
    let doc: serde_json::Value = serde_norway::from_str(&yaml.content).ok()?;
    let compatibility = doc
        .get("storage_compatibility_mode")
        .and_then(serde_json::Value::as_str);
    let latest = sstables::latest_versions(release, compatibility);
    if latest.is_none() {
        warn!(%release, "unknown Cassandra release: no old-format sstables gauge");
    }
    latest
}

/// What a replacing member starts with: Cassandra replaces the address;
/// ScyllaDB by host ID (`replace_node_first_boot`; the address alone is
/// deprecated there), the one the lost node recorded on the member Service,
/// falling back on the address when none was recorded. Pure.
pub fn replace_target(
    mode: ClusterMode,
    replace_address: Option<String>,
    recorded_host_id: Option<&str>,
) -> Option<String> {
    match (mode, replace_address, recorded_host_id) {
        (ClusterMode::Scylla, Some(_), Some(host_id)) if !host_id.trim().is_empty() => {
            Some(host_id.trim().to_string())
        }
        (_, replace, _) => replace,
    }
}

/// The ring still knows this member's address while its data directory was
/// never bootstrapped (the disk was swapped or emptied, the Node survived):
/// asks the controller for a replace on the member Service, then waits,
/// not ready, until the `replace` label holds an address (the container is
/// then restarted and starts with `replace_address_first_boot`) or the Pod
/// stops.
async fn request_replace(
    services: &Api<Service>,
    name: &str,
    line: &str,
    mut service: watch::Receiver<Service>,
    shutdown: impl std::future::Future<Output = Signal>,
) {
    warn!(member = %name, %line, "the ring still knows this member's address and its data is gone: asking for a replace");
    let patch =
        serde_json::json!({"metadata": {"annotations": {contract::REPLACE_REQUESTED: line}}});
    if let Err(e) = services
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        warn!(member = %name, error = %e, "asking for a replace");
    }
    let answered = async {
        loop {
            let label = service
                .borrow_and_update()
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(contract::REPLACE).cloned());
            if let Some(address) = contract::replace_address(label.as_deref()) {
                return address;
            }
            if service.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        address = answered => info!(member = %name, %address, "replace granted: restarting to replace"),
        signal = shutdown => info!(member = %name, %signal, "stopping"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use database::database_command;
    use std::path::Path;

    fn ips(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn scylla_replaces_by_the_recorded_host_id() {
        let id = "6f0c2e4e-1d0a-4a8e-9a52-3f1f1f2b7c11";
        let ip = || Some("10.96.0.12".to_string());
        assert_eq!(
            replace_target(ClusterMode::Scylla, ip(), Some(id)).as_deref(),
            Some(id)
        );
        // Nothing recorded: the (deprecated) address.
        assert_eq!(replace_target(ClusterMode::Scylla, ip(), None), ip());
        assert_eq!(replace_target(ClusterMode::Scylla, ip(), Some(" ")), ip());
        // No replace: a recorded host ID alone is no intent.
        assert_eq!(replace_target(ClusterMode::Scylla, None, Some(id)), None);
        // Cassandra replaces the address.
        assert_eq!(replace_target(ClusterMode::Cassandra, ip(), Some(id)), ip());
    }

    #[test]
    fn the_database_command_takes_the_rendered_arguments() {
        let args = SidecarArgs {
            pod_name: "p".into(),
            pod_namespace: "n".into(),
            pod_ip: "127.0.0.1".parse().unwrap(),
            pod_cluster: "c".into(),
            pod_datacenter: "dc".into(),
            pod_rack: "r".into(),
            cpu_limit: None,
            memory_limit: None,
            jolokia_url: crate::jolokia::DEFAULT_URL.clone(),
            scylla_api_url: crate::scylla::DEFAULT_URL.clone(),
            iotune_command: "iotune".into(),
            probe_addr: "127.0.0.1:0".parse().unwrap(),
            proc_sys_fs: aio::DEFAULT_PROC_SYS_FS.into(),
            aio_check_seconds: 1,
            config_defaults_dir: None,
            config_dir: "/c".into(),
            tls_dir: "/t".into(),
            tls_encryption: None,
            data_dir: None,
            overrides_dir: "/o".into(),
            database_command: None,
            jolokia_agent_jar: "j".into(),
            drain_timeout_seconds: 1,
            sstable_scan_seconds: 1,
            gossip_record_seconds: 1,
            cassandra_version: None,
            old_format_record_seconds: 1,
            maintenance_retry_seconds: 1,
            maintenance_repair_subranges: 1,
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
            database_command(
                &args,
                ClusterMode::Scylla,
                &ips(&["--smp", "2"]),
                Path::new("/var/lib/scylla")
            )
            .unwrap(),
            vec![
                "scylla",
                "--options-file",
                "/c/scylla.yaml",
                "--workdir",
                "/var/lib/scylla",
                "--io-properties-file",
                "/var/lib/scylla/.cassandra-operator/io_properties.yaml",
                "--smp",
                "2"
            ]
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
