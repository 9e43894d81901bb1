//! The fake ScyllaDB process: what `scylla` does from its command line to
//! its shutdown, on the test world's ring. The `fake-cassandra` binary runs
//! this when it is started as `scylla` (the kubelet links it under that
//! name in `scylladb/scylla` images). I/O.
//!
//! - the command line and scylla.yaml ([`super::config`]); an unknown
//!   option: `error: unrecognised option '--x'`, `Try --help.`, exit 2;
//!   `--version` prints the release, `--help` the usage.
//! - the version: the image tag the kubelet passes in `CASSANDRA_VERSION`.
//! - outside developer mode (scylla.yaml's default) a shard needs 1 GiB
//!   (`--memory` over `--smp`), else `configuration (memory per shard too
//!   low)`; and the I/O scheduler must
//!   be configured: `--io-properties-file` (iotune's output, which must
//!   exist) or `--io-properties`, else `Bad I/O Scheduler configuration`.
//! - its directories (data, commitlog, hints, view_hints, saved_caches)
//!   are made if missing and must be writable by the process (the image's
//!   `scylla` user owns `/var/lib/scylla`), else exit 1.
//! - the REST API is served from the start on `--api-address:--api-port`
//!   (STARTING, no host ID yet); after `FAKE_SCYLLA_STARTING_MS` (300 ms)
//!   it is JOINING for `FAKE_SCYLLA_JOINING_MS` (100 ms), then the node
//!   starts in the ring of its cluster (NORMAL, or BOOTSTRAP while it
//!   streams).
//! - `replace_node_first_boot: <host id>` on an empty data directory
//!   replaces that node: `Replaced node with Host ID <id> not found` if no
//!   member has it, `Cannot replace a live node...` if it is up (exit 1);
//!   ignored once the node has bootstrapped.
//! - only the seed with the smallest address joins without bootstrapping
//!   (Scylla's "first node"); every other node bootstraps, seeds too
//!   ([`config::ring_seeds`]).
//! - ScyllaDB 6.0 and later (Raft topology) word some refusals their own
//!   way: the last node's decommission, the replace of a live node
//!   ([`super::rest::Topology`]).
//! - TLS ([`super::tls`]): with `internode_encryption` not `none`, the
//!   credentials of `server_encryption_options` are loaded at "starting
//!   messaging service", before the node joins (a file it cannot read, a
//!   key that is not the certificate's: "Startup failed: ...", exit 1), and
//!   handshakes are served on `ssl_storage_port`; with
//!   `client_encryption_options.enabled`, those of the clients once it
//!   joined (refused: it leaves the ring down), served on the CQL port.
//!   Changed files are loaded again by themselves ("Reloaded {...}").
//! - no JMX and no Jolokia: nothing else listens but the TLS ports.
//! - SIGTERM or SIGINT: the node stops (down in the ring, data kept) and
//!   the process exits 0, as Scylla's clean shutdown does; the ring having
//!   it down behind its back: exit 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::config::{self, CASSANDRA_COMPAT, ScyllaConfig};
use super::node::{ScyllaNode, ring_snapshot, serve_rest};
use super::rest::{Identity, Topology, scylla_words};
use super::tls::Watched;
use crate::fake_cassandra::MARKER;
use crate::fake_cassandra::node::{NodeError, RingClient};
use crate::fake_cassandra::process::{data_dir_identity, wait_for_signal, watch_ring};
use crate::fake_cassandra::ring_service::StartRequest;
use crate::fake_cassandra::tls_wire;

const USAGE: &str = "Scylla version options:\n  --version   print the version\n  --options-file arg   configuration file (default $SCYLLA_CONF/scylla.yaml)\n  --<scylla.yaml option> arg   any scylla.yaml option, dashed\n  --smp arg, --memory arg, --overprovisioned, --developer-mode arg: Seastar's\n";

fn log(level: &str, message: &str) {
    println!("{level:<5} [shard 0:main] init - {message}");
}

fn startup_failed(message: &str) -> ExitCode {
    startup_failed_with(&format!("std::runtime_error ({message})"))
}

/// main.cc's catch: the exception as seastar prints it.
fn startup_failed_with(exception: &str) -> ExitCode {
    eprintln!("ERROR [shard 0:main] init - Startup failed: {exception}");
    ExitCode::from(1)
}

fn log_as(level: &str, logger: &str, message: &str) {
    println!("{level:<5} [shard 0:main] {logger} - {message}");
}

/// Serves `watched`'s credentials on `address` (a port that cannot be
/// bound is a warning: the fake binds nothing there without TLS either).
async fn tls_front(
    watched: &Arc<Watched>,
    address: String,
    line: impl FnOnce(&str) -> String,
) -> Option<tokio::task::JoinHandle<()>> {
    let listener = match tls_wire::bind(&address).await {
        Ok(l) => l,
        Err(e) => {
            log_as("WARN", watched.logger, &format!("{e}: no TLS there"));
            return None;
        }
    };
    let shown = listener.local_addr().map_or(address, |a| a.to_string());
    log_as("INFO", watched.logger, &line(&shown));
    let state = watched.clone();
    let logger = watched.logger;
    Some(tokio::spawn(tls_wire::serve(
        listener,
        Arc::new(move || Some(state.served())),
        Arc::new(move |peer, e| {
            log_as(
                "WARN",
                logger,
                &format!("TLS handshake with {peer} failed: {e}"),
            )
        }),
    )))
}

/// seastar's reloadable credentials: each side's files watched, the
/// credentials rebuilt a moment after one changed.
fn watch_files(sides: Vec<Arc<Watched>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            for side in &sides {
                let mut changed = side.changed();
                if changed.is_empty() {
                    continue;
                }
                // The tolerance: a change in several files reloads once.
                tokio::time::sleep(Duration::from_millis(100)).await;
                for more in side.changed() {
                    if !changed.contains(&more) {
                        changed.push(more);
                    }
                }
                let (side, logger) = (side.clone(), side.logger);
                if let Ok((level, line)) =
                    tokio::task::spawn_blocking(move || side.reload(&changed)).await
                {
                    log_as(level, logger, &line);
                }
            }
        }
    })
}

/// main.cc `verify_adequate_memory_per_shard`: below 1 GiB per shard
/// (`--memory` over `--smp`, all CPUs when `--smp` is not given) only
/// developer mode goes on. Without `--memory` Seastar takes the machine's
/// memory, which the fake does not judge.
fn verify_memory_per_shard(config: &ScyllaConfig) -> Result<(), String> {
    let Some(memory) = config.memory.as_deref().and_then(config::parse_memory) else {
        return Ok(());
    };
    let shards = config
        .smp
        .map(u64::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let per_shard = memory / shards.max(1);
    if per_shard >= 1 << 30 {
        return Ok(());
    }
    let mib = per_shard >> 20;
    if config.developer_mode {
        println!(
            "WARN  [shard 0:main] init - Only {mib} MiB per shard; this is below the recommended minimum of 1 GiB/shard; continuing since running in developer mode"
        );
        return Ok(());
    }
    eprintln!(
        "ERROR [shard 0:main] init - Only {mib} MiB per shard; this is below the recommended minimum of 1 GiB/shard; terminating.Configure more memory (--memory option) or decrease shard count (--smp option)."
    );
    Err("configuration (memory per shard too low)".to_string())
}

/// main.cc `verify_seastar_io_scheduler`: outside developer mode the I/O
/// scheduler must be configured (`scylla_io_setup`, iotune's properties):
/// without `--io-properties` or `--io-properties-file` the start fails.
/// A properties file that is not there fails yaml-cpp's `LoadFile`
/// (`YAML::BadFile`, "bad file: <path>").
fn verify_io_scheduler(cli: &config::CommandLine, developer_mode: bool) -> Result<(), String> {
    if let Some(file) = cli.get("io-properties-file")
        && !Path::new(file).is_file()
    {
        return Err(format!("bad file: {file}"));
    }
    if developer_mode
        || cli.get("io-properties").is_some()
        || cli.get("io-properties-file").is_some()
    {
        return Ok(());
    }
    eprintln!(
        "ERROR [shard 0:main] init - I/O Scheduler is not properly configured! This is a non-supported setup, and performance is expected to be unpredictably bad.\n Reason found: none of --io-properties and --io-properties-file are set.\nTo properly configure the I/O Scheduler, run the scylla_io_setup utility shipped with Scylla.\nTo ignore this, see the developer-mode configuration option."
    );
    Err("Bad I/O Scheduler configuration".to_string())
}

/// Each directory exists (made if missing) and the process may read,
/// write and enter it.
fn check_directories(dirs: &[&str]) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    for dir in dirs {
        let path = Path::new(dir);
        if !path.exists() && std::fs::create_dir_all(path).is_err() {
            return Err(format!(
                "Could not create directory {dir}: Permission denied"
            ));
        }
        if access(
            path,
            AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK,
        )
        .is_err()
        {
            return Err(format!("Could not access {dir}: Permission denied"));
        }
    }
    Ok(())
}

/// The member with host ID `id` in the ring of `cluster`: its address and
/// whether it is up.
async fn member_of(
    kubesim: &str,
    cluster: &str,
    id: &str,
) -> Result<Option<(String, bool)>, String> {
    let Some(ring) = ring_snapshot(kubesim, cluster).await? else {
        return Ok(None);
    };
    Ok(ring["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|n| {
            (n["host_id"] == id && n["state"] != "left").then(|| {
                (
                    n["address"].as_str().unwrap_or_default().to_string(),
                    n["up"] == true,
                )
            })
        }))
}

fn read_config(cli: &config::CommandLine) -> Result<ScyllaConfig, String> {
    let conf = std::env::var("SCYLLA_CONF")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "/etc/scylla".to_string());
    let conf = PathBuf::from(conf);
    let options_file = cli
        .get("options-file")
        .map(PathBuf::from)
        .unwrap_or_else(|| conf.join("scylla.yaml"));
    let yaml = std::fs::read_to_string(&options_file).map_err(|e| {
        format!(
            "Could not open configuration file {}: {e}",
            options_file.display()
        )
    })?;
    let rackdc = std::fs::read_to_string(conf.join("cassandra-rackdc.properties")).ok();
    let release = config::release_of_tag(std::env::var("CASSANDRA_VERSION").ok().as_deref());
    let mut config =
        config::parse(cli, &yaml, rackdc.as_deref(), &release).map_err(|e| e.to_string())?;
    config.tls.conf_dir = conf;
    Ok(config)
}

/// Runs the fake node with the arguments after the program name.
pub async fn main(args: Vec<String>) -> ExitCode {
    let cli = match config::parse_command_line(&args) {
        Ok(c) => c,
        Err(e) => {
            // Seastar's app_template on a boost::program_options error.
            eprintln!("error: {e}\n\nTry --help.");
            return ExitCode::from(2);
        }
    };
    if cli.has("help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if cli.has("version") {
        println!(
            "{}",
            config::release_of_tag(std::env::var("CASSANDRA_VERSION").ok().as_deref())
        );
        return ExitCode::SUCCESS;
    }
    let mut config = match read_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ERROR [shard 0:main] init - {e}");
            return ExitCode::from(1);
        }
    };
    log(
        "INFO",
        &format!(
            "Scylla version {} starting; cluster {}; listen {}; broadcast {}; dc {} rack {}; smp {}; memory {}; developer mode {}",
            config.release,
            config.node.cluster_name,
            config.listen_address,
            config.node.address,
            config.node.dc,
            config.node.rack,
            config.smp.map_or("all".to_string(), |s| s.to_string()),
            config.memory.as_deref().unwrap_or("all"),
            config.developer_mode,
        ),
    );
    if let Err(e) = verify_memory_per_shard(&config) {
        return startup_failed(&e);
    }
    if let Err(e) = verify_io_scheduler(&cli, config.developer_mode) {
        return startup_failed(&e);
    }
    if let Err(e) = check_directories(&config.directories.all()) {
        return startup_failed(&e);
    }
    let Some(kubesim) = std::env::var("KUBESIM_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!(
            "ERROR [shard 0:main] init - KUBESIM_URL is not set: the fake node keeps its ring in kubesim"
        );
        return ExitCode::from(1);
    };
    let data_dir = PathBuf::from(&config.node.data_dir);
    let marker = data_dir.join(MARKER);
    let data_dir_empty = !marker.exists();
    match data_dir_identity(&data_dir) {
        Ok(id) => config.node.data_dir = id,
        Err(e) => return startup_failed(&format!("Could not access {}: {e}", data_dir.display())),
    }

    let topology = Topology::of_release(&config.release);
    let ring = RingClient::new(&kubesim);
    let node = Arc::new(ScyllaNode {
        ring: ring.clone(),
        kubesim: kubesim.clone(),
        cluster: config.node.cluster_name.clone(),
        identity: Identity {
            release: config.release.clone(),
            started_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        },
        host_id: OnceLock::new(),
        joining: Default::default(),
    });
    let api = (config.api_address.clone(), config.api_port);
    let server = match tokio::net::TcpListener::bind((api.0.as_str(), api.1)).await {
        Ok(listener) => {
            log(
                "INFO",
                &format!("starting API server on {}:{}", api.0, api.1),
            );
            tokio::spawn(serve_rest(listener, node.clone()))
        }
        Err(e) => {
            return startup_failed(&format!(
                "Failed to bind the API server to {}:{}: {e}",
                api.0, api.1
            ));
        }
    };
    // "starting messaging service": its TLS credentials, before the node
    // gossips.
    let mut fronts = Vec::new();
    let mut watched = Vec::new();
    if config.tls.internode_encrypted() {
        for w in config.tls.warnings() {
            log("WARN", &w);
        }
        let internode = match Watched::load(&config.tls, true) {
            Ok(w) => Arc::new(w),
            Err(e) => {
                server.abort();
                return startup_failed_with(&e);
            }
        };
        let (ip, port) = (config.listen_address.clone(), config.tls.ssl_storage_port);
        fronts.extend(
            tls_front(&internode, format!("{ip}:{port}"), |_| {
                format!("Starting Encrypted Messaging Service on SSL address {ip} port {port}")
            })
            .await,
        );
        watched.push(internode);
    }
    let starting = std::env::var("FAKE_SCYLLA_STARTING_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    tokio::time::sleep(Duration::from_millis(starting)).await;
    // JOINING: gossip runs, the node waits for ring information
    // (FAKE_SCYLLA_JOINING_MS, 100 ms by default; Scylla's ring_delay).
    node.joining
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let joining = std::env::var("FAKE_SCYLLA_JOINING_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    tokio::time::sleep(Duration::from_millis(joining)).await;

    if let Some(id) = config.replace_node_first_boot.clone() {
        if data_dir_empty {
            match member_of(&kubesim, &config.node.cluster_name, &id).await {
                Ok(Some((_, true))) => {
                    server.abort();
                    return startup_failed(&match topology {
                        Topology::Gossip => "Cannot replace a live node...".to_string(),
                        // The topology coordinator's words.
                        Topology::Raft => format!("tried to replace alive node {id}"),
                    });
                }
                Ok(Some((address, false))) => {
                    log("INFO", &format!("Replacing node {id} at {address}"));
                    config.node.replace_address_first_boot = Some(address);
                }
                Ok(None) => {
                    server.abort();
                    return startup_failed(&format!("Replaced node with Host ID {id} not found"));
                }
                Err(e) => {
                    server.abort();
                    return startup_failed(&e);
                }
            }
        } else {
            log(
                "INFO",
                "replace_node_first_boot is set but this node has already bootstrapped: ignored",
            );
        }
    }

    if data_dir_empty {
        let replacing = config.node.replace_address_first_boot.is_some()
            || config.node.replace_address.is_some();
        config.node.seeds = config::ring_seeds(&config.node.seeds, &config.node.address, replacing);
    }
    let started = match ring
        .start(&StartRequest {
            lease: true,
            ..StartRequest::of(&config.node, CASSANDRA_COMPAT, data_dir_empty)
        })
        .await
    {
        Ok(s) => s,
        Err(e) => {
            server.abort();
            let message = match e {
                NodeError::Refused(r) => r.message,
                other => other.to_string(),
            };
            return startup_failed(&scylla_words(&message, topology));
        }
    };
    let host_id = started["host_id"].as_str().unwrap_or_default().to_string();
    for line in started["log"].as_array().into_iter().flatten() {
        log("INFO", line.as_str().unwrap_or_default());
    }
    if let Err(e) = std::fs::write(&marker, &host_id) {
        eprintln!(
            "ERROR [shard 0:main] init - writing {}: {e}",
            marker.display()
        );
    }
    let _ = node.host_id.set(host_id.clone());
    // "starting native transport": the CQL server's credentials, once the
    // node joined.
    if config.tls.client_encrypted() {
        match Watched::load(&config.tls, false) {
            Ok(w) => {
                let client = Arc::new(w);
                log_as(
                    "INFO",
                    client.logger,
                    "Enabling encrypted CQL connections between client and server",
                );
                let address = format!("{}:{}", config.rpc_address, config.tls.client_port());
                fronts.extend(
                    tls_front(&client, address, |shown| {
                        format!(
                            "Starting listening for CQL clients on {shown} (encrypted, non-shard-aware)"
                        )
                    })
                    .await,
                );
                watched.push(client);
            }
            Err(e) => {
                let _ = ring.stop(&host_id).await;
                server.abort();
                return startup_failed_with(&e);
            }
        }
    }
    if !watched.is_empty() {
        fronts.push(watch_files(watched));
    }
    log(
        "INFO",
        &format!(
            "Scylla version {} initialization completed (host id {host_id}, {}, mode {})",
            config.release,
            started["startup"],
            started["mode"].as_str().unwrap_or_default()
        ),
    );

    tokio::select! {
        _ = wait_for_signal() => {}
        reason = watch_ring(&ring, &host_id, |_| {}) => {
            eprintln!("ERROR [shard 0:main] init - {reason}: exiting");
            server.abort();
            return ExitCode::from(1);
        }
    };
    log("INFO", "Signal received; shutting down");
    if let Err(e) = ring.stop(&host_id).await {
        eprintln!("WARN  [shard 0:main] init - {e}");
    }
    server.abort();
    for f in fronts {
        f.abort();
    }
    log("INFO", "Scylla shutdown complete.");
    ExitCode::SUCCESS
}
