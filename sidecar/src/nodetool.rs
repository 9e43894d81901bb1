//! A small nodetool over Jolokia (Cassandra) or ScyllaDB's REST API:
//! `status`, `info`, `operation-mode`, `drain`, `decommission`, `version`.
//! Used by people (`kubectl exec`) and by the member Pod's preStop hook
//! (`cassandra-operator nodetool drain`).
//!
//! Which database: `--mode`, by default `auto`: ScyllaDB when the sidecar
//! rendered `scylla.yaml` into its configuration directory (`CONFIG_DIR`,
//! the shared volume both containers mount), Cassandra otherwise; so the
//! same preStop hook serves both modes.
//!
//! Gathering data is I/O through [`crate::jolokia::StorageService`] or
//! [`crate::scylla::Scylla`]; the output is formatted by pure functions,
//! unit-tested here. In scylla mode `status` is composed as ScyllaDB's own
//! `scylla nodetool status` composes it (tools/scylla-nodetool.cc): the
//! endpoints that own tokens (`/storage_service/tokens_endpoint`), their
//! datacenter and rack from the snitch, up/down from the gossiper,
//! joining/leaving/moving, `load_map` and `host_id`; without a keyspace the
//! effective ownership is unknown (`?`).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::jolokia::{
    self, ENDPOINT_SNITCH_INFO, Jolokia, OperationMode, Request, Ring, STORAGE_SERVICE,
    StorageService, endpoint_host,
};
use crate::scylla::{self, Scylla};

/// `cassandra-operator nodetool`: talk to the local Cassandra through Jolokia.
#[derive(clap::Args, Debug, Clone)]
pub struct NodetoolArgs {
    /// Jolokia endpoint of the node.
    #[arg(long, env = "JOLOKIA_URL", default_value = jolokia::DEFAULT_URL.as_str())]
    pub jolokia: String,
    /// ScyllaDB's REST API of the node (scylla mode).
    #[arg(long = "scylla-api", env = "SCYLLA_API_URL", default_value = scylla::DEFAULT_URL.as_str())]
    pub scylla_api: String,
    /// The database: cassandra, scylla, or auto (scylla when scylla.yaml
    /// was rendered into --config-dir).
    #[arg(long, env = "NODETOOL_MODE", default_value = "auto")]
    pub mode: String,
    /// Where the sidecar renders the member's configuration.
    #[arg(long, env = "CONFIG_DIR", default_value = crds::contract::RENDERED_CONFIG_DIR)]
    pub config_dir: std::path::PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: NodetoolCommand,
}

/// Whether nodetool talks to ScyllaDB: `--mode`, or for `auto` whether the
/// sidecar rendered scylla.yaml into the configuration directory.
pub fn is_scylla(mode: &str, config_dir: &std::path::Path) -> Result<bool, Error> {
    match mode {
        "scylla" => Ok(true),
        "cassandra" => Ok(false),
        "auto" => Ok(config_dir.join("scylla.yaml").is_file()),
        other => Err(Error::UnknownMode(other.to_string())),
    }
}

/// nodetool commands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum NodetoolCommand {
    /// The ring as this node sees it: state, address, load, tokens, host ID, rack.
    Status,
    /// This node: operation mode, host ID, load, version.
    Info,
    /// This node's operation mode (NORMAL, JOINING, LEAVING, DECOMMISSIONED, ...).
    OperationMode,
    /// Flush memtables and stop accepting writes (before a restart).
    #[command(name = crds::contract::pod::subcommand::DRAIN)]
    Drain,
    /// Stream this node's data to the others and leave the ring (blocks until done).
    Decommission,
    /// The Cassandra release version.
    Version,
    /// Drop the data of a keyspace this node no longer owns (after nodes
    /// joined): `forceKeyspaceCleanup`. Silent on success, as nodetool is.
    Cleanup {
        /// The keyspace (nodetool's default of every non-local keyspace is
        /// not offered).
        keyspace: String,
    },
}

/// Errors of the nodetool commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating the jolokia client failed: {source}")]
    CreateClient { source: jolokia::Error },
    #[error("starting the async runtime failed: {source}")]
    StartRuntime { source: std::io::Error },
    #[error("reading the ring failed: {source}")]
    ReadRing { source: jolokia::Error },
    #[error("reading the node's information failed: {source}")]
    ReadInfo { source: jolokia::Error },
    #[error("reading the operation mode failed: {source}")]
    ReadOperationMode { source: jolokia::Error },
    #[error("reading the release version failed: {source}")]
    ReadReleaseVersion { source: jolokia::Error },
    #[error("drain failed: {source}")]
    Drain { source: jolokia::Error },
    #[error("drain returned but the operation mode is {mode}, not DRAINED")]
    NotDrained { mode: OperationMode },
    #[error("decommission failed: {source}")]
    Decommission { source: jolokia::Error },
    #[error("decommission ended with operation mode {mode}, not DECOMMISSIONED")]
    NotDecommissioned { mode: OperationMode },
    #[error("decommission did not finish within {timeout:?} (operation mode {mode})")]
    DecommissionTimedOut {
        timeout: Duration,
        mode: OperationMode,
    },
    #[error("cleanup failed: {source}")]
    Cleanup { source: jolokia::Error },
    /// NodeProbe.forceKeyspaceCleanup's words for a status other than 0.
    #[error(
        "Aborted cleaning up at least one table in keyspace {keyspace}, check server logs for more information."
    )]
    CleanupAborted { keyspace: String },
    #[error("writing the output failed: {source}")]
    WriteOutput { source: std::io::Error },
    #[error("unknown mode {0:?}: expected auto, cassandra or scylla")]
    UnknownMode(String),
    #[error("creating the scylla rest client failed: {source}")]
    CreateScyllaClient { source: scylla::Error },
    /// A call to ScyllaDB's REST API failed; `action` says what nodetool
    /// was doing (reading the ring, draining, ...).
    #[error("{action} failed: {source}")]
    Scylla {
        action: &'static str,
        source: scylla::Error,
    },
    #[error("cleanup is not offered in scylla mode")]
    CleanupUnsupported,
}

/// Entry point of `cassandra-operator nodetool`: runs the command, prints
/// its output on stdout and any error on stderr; non-zero exit on error.
pub fn main(args: &NodetoolArgs) -> ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::StartRuntime { source })
        .and_then(|runtime| {
            let mut stdout = std::io::stdout();
            runtime.block_on(run(args, &mut stdout))
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodetool: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Run one nodetool command against the Jolokia at `args.jolokia`, writing
/// human-readable output to `out`.
pub async fn run(args: &NodetoolArgs, out: &mut dyn Write) -> Result<(), Error> {
    if is_scylla(&args.mode, &args.config_dir)? {
        let client =
            Scylla::new(&args.scylla_api).map_err(|source| Error::CreateScyllaClient { source })?;
        return run_scylla(&client, &args.command, out).await;
    }
    let client = Jolokia::new(&args.jolokia).map_err(|source| Error::CreateClient { source })?;
    run_with(&StorageService::new(client), &args.command, out).await
}

/// Run one nodetool command with a given facade (its client's timeouts
/// apply: the long one to drain and decommission).
pub async fn run_with(
    storage: &StorageService,
    command: &NodetoolCommand,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let text = match command {
        NodetoolCommand::Status => format_status(&gather_status(storage).await?),
        NodetoolCommand::Info => format_info(&gather_info(storage).await?),
        NodetoolCommand::OperationMode => {
            let mode = storage
                .operation_mode()
                .await
                .map_err(|source| Error::ReadOperationMode { source })?;
            format!("{mode}\n")
        }
        NodetoolCommand::Version => {
            let version = storage
                .release_version()
                .await
                .map_err(|source| Error::ReadReleaseVersion { source })?;
            format!("ReleaseVersion: {version}\n")
        }
        NodetoolCommand::Drain => drain(storage).await?,
        NodetoolCommand::Decommission => decommission(storage).await?,
        NodetoolCommand::Cleanup { keyspace } => {
            let status = storage
                .cleanup(keyspace)
                .await
                .map_err(|source| Error::Cleanup { source })?;
            if status != 0 {
                return Err(Error::CleanupAborted {
                    keyspace: keyspace.clone(),
                });
            }
            String::new()
        }
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| Error::WriteOutput { source })
}

/// Drain the node; succeeds at once when it is already drained (or
/// decommissioned: nothing accepts writes there either). Reliable enough
/// for a preStop hook: if the call itself fails on the way (a timeout, a
/// dropped connection) but the node reports DRAINED afterwards, the drain
/// happened.
async fn drain(storage: &StorageService) -> Result<String, Error> {
    let mode = storage
        .operation_mode()
        .await
        .map_err(|source| Error::ReadOperationMode { source })?;
    match mode {
        OperationMode::Drained => return Ok("already drained\n".to_string()),
        OperationMode::Decommissioned => {
            return Ok("decommissioned: nothing to drain\n".to_string());
        }
        _ => {}
    }
    let called = storage.drain().await;
    let after = storage.operation_mode().await;
    match (called, after) {
        (_, Ok(OperationMode::Drained)) => Ok("drained\n".to_string()),
        (Err(source), _) => Err(Error::Drain { source }),
        (Ok(()), Ok(mode)) => Err(Error::NotDrained { mode }),
        (Ok(()), Err(source)) => Err(Error::ReadOperationMode { source }),
    }
}

/// How often decommission polls the operation mode when the call returned
/// before the node left (5.0 returns at once when one is already running).
const DECOMMISSION_POLL: Duration = Duration::from_millis(500);

/// Decommission the node and wait until it reports DECOMMISSIONED.
async fn decommission(storage: &StorageService) -> Result<String, Error> {
    let mode = storage
        .operation_mode()
        .await
        .map_err(|source| Error::ReadOperationMode { source })?;
    match mode {
        OperationMode::Decommissioned => return Ok("already decommissioned\n".to_string()),
        // One is running (3.11 and 4.x would refuse a second call with
        // IllegalStateException): wait for it instead.
        OperationMode::Leaving => {}
        _ => storage
            .decommission()
            .await
            .map_err(|source| Error::Decommission { source })?,
    }
    let timeout = storage.jolokia().long_timeout();
    let started = Instant::now();
    loop {
        let mode = storage
            .operation_mode()
            .await
            .map_err(|source| Error::ReadOperationMode { source })?;
        match mode {
            OperationMode::Decommissioned => return Ok("decommissioned\n".to_string()),
            OperationMode::Leaving => {}
            mode => return Err(Error::NotDecommissioned { mode }),
        }
        if started.elapsed() >= timeout {
            return Err(Error::DecommissionTimedOut { timeout, mode });
        }
        tokio::time::sleep(DECOMMISSION_POLL).await;
    }
}

/// One line of `nodetool status`.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusRow {
    /// UN, DN, UJ, UL, UM, ...
    pub state: String,
    /// The node's address, without port.
    pub address: String,
    /// Human-readable load; `None` when the node did not report it.
    pub load: Option<String>,
    /// Number of tokens; `None` when they could not be read.
    pub tokens: Option<usize>,
    /// Share of the token ring (0..=1); `None` when unknown.
    pub owns: Option<f64>,
    pub host_id: Option<String>,
    pub rack: Option<String>,
}

/// `nodetool status`: the rows by datacenter.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    pub datacenters: BTreeMap<String, Vec<StatusRow>>,
    /// Whether the node reported ownership at all (else the column is left
    /// out rather than invented).
    pub has_ownership: bool,
    /// The line printed under the tables.
    pub note: Option<String>,
}

/// Cassandra mode's note under `status` when Owns is shown.
pub const RAW_OWNERSHIP_NOTE: &str = "Note: Owns is the share of the token ring (raw ownership), not the effective ownership of a keyspace.";
/// ScyllaDB's note under `status` without a keyspace (scylla-nodetool.cc).
pub const SCYLLA_OWNERSHIP_NOTE: &str = "Note: Non-system keyspaces don't have the same replication settings, effective ownership information is meaningless";

/// Read the ring, then the tokens, datacenter and rack of every endpoint in
/// one bulk request.
async fn gather_status(storage: &StorageService) -> Result<Status, Error> {
    let ring = storage
        .ring()
        .await
        .map_err(|source| Error::ReadRing { source })?;
    let endpoints = ring.endpoints();
    let requests: Vec<Request> = endpoints
        .iter()
        .flat_map(|endpoint| {
            [
                jolokia::tokens_request(endpoint),
                jolokia::snitch_request("getDatacenter", endpoint),
                jolokia::snitch_request("getRack", endpoint),
            ]
        })
        .collect();
    let results = storage
        .jolokia()
        .bulk(&requests)
        .await
        .map_err(|source| Error::ReadRing { source })?;
    let mut per_endpoint = results.into_iter().map(Result::ok);
    let mut lookups = Vec::with_capacity(endpoints.len());
    for _ in &endpoints {
        let tokens = per_endpoint.next().flatten();
        let dc = per_endpoint.next().flatten();
        let rack = per_endpoint.next().flatten();
        lookups.push(EndpointLookup {
            tokens: tokens.and_then(|v| serde_json::from_value::<Vec<String>>(v).ok()),
            datacenter: dc.and_then(|v| v.as_str().map(str::to_string)),
            rack: rack.and_then(|v| v.as_str().map(str::to_string)),
        });
    }
    Ok(status_from(&ring, &endpoints, lookups))
}

/// What was looked up per endpoint for `status`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EndpointLookup {
    pub tokens: Option<Vec<String>>,
    pub datacenter: Option<String>,
    pub rack: Option<String>,
}

/// Build the status table from the ring and the per-endpoint lookups (same
/// order as `endpoints`). Pure.
pub fn status_from(ring: &Ring, endpoints: &[String], lookups: Vec<EndpointLookup>) -> Status {
    let mut status = Status {
        datacenters: BTreeMap::new(),
        has_ownership: ring.ownership.is_some(),
        note: ring
            .ownership
            .as_ref()
            .map(|_| RAW_OWNERSHIP_NOTE.to_string()),
    };
    for (endpoint, lookup) in endpoints.iter().zip(lookups) {
        let address = endpoint_host(endpoint).to_string();
        let row = StatusRow {
            state: ring.state(endpoint),
            load: ring.loads.get(endpoint).cloned(),
            tokens: lookup.tokens.map(|t| t.len()),
            owns: ring
                .ownership
                .as_ref()
                .and_then(|o| o.get(&address))
                .copied(),
            host_id: ring.host_ids.get(endpoint).cloned(),
            rack: lookup.rack,
            address,
        };
        status
            .datacenters
            .entry(lookup.datacenter.unwrap_or_else(|| "?".to_string()))
            .or_default()
            .push(row);
    }
    for rows in status.datacenters.values_mut() {
        rows.sort_by_key(|row| address_order(&row.address));
    }
    status
}

/// Sort IPv4 addresses numerically, everything else after them by text.
fn address_order(address: &str) -> (u8, Vec<u32>, String) {
    let octets: Option<Vec<u32>> = address.split('.').map(|o| o.parse().ok()).collect();
    match octets {
        Some(octets) if octets.len() == 4 => (0, octets, String::new()),
        _ => (1, Vec::new(), address.to_string()),
    }
}

/// Format `nodetool status` like Cassandra's nodetool. Pure.
pub fn format_status(status: &Status) -> String {
    let mut out = String::new();
    for (dc, rows) in &status.datacenters {
        let title = format!("Datacenter: {dc}");
        out.push_str(&title);
        out.push('\n');
        out.push_str(&"=".repeat(title.len()));
        out.push('\n');
        out.push_str("Status=Up/Down\n|/ State=Normal/Leaving/Joining/Moving\n");
        let mut table: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
        let mut header = vec!["--", "Address", "Load", "Tokens"];
        if status.has_ownership {
            header.push("Owns");
        }
        header.extend(["Host ID", "Rack"]);
        table.push(header.into_iter().map(str::to_string).collect());
        for row in rows {
            let mut line = vec![
                row.state.clone(),
                row.address.clone(),
                row.load.clone().unwrap_or_else(|| "?".to_string()),
                row.tokens
                    .map_or_else(|| "?".to_string(), |t| t.to_string()),
            ];
            if status.has_ownership {
                line.push(
                    row.owns
                        .map_or_else(|| "?".to_string(), |o| format!("{:.1}%", o * 100.0)),
                );
            }
            line.push(row.host_id.clone().unwrap_or_else(|| "?".to_string()));
            line.push(row.rack.clone().unwrap_or_else(|| "?".to_string()));
            table.push(line);
        }
        out.push_str(&format_table(&table));
        out.push('\n');
    }
    if let Some(note) = &status.note {
        out.push_str(note);
        out.push('\n');
    }
    out
}

/// Left-aligned columns separated by two spaces, no trailing blanks.
fn format_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `nodetool info`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Info {
    pub host_id: Option<String>,
    pub release_version: String,
    pub cluster_name: String,
    pub operation_mode: String,
    pub load: String,
    pub tokens: usize,
    pub datacenter: String,
    pub rack: String,
}

async fn gather_info(storage: &StorageService) -> Result<Info, Error> {
    let read_info = |source| Error::ReadInfo { source };
    let attributes = [
        "LocalHostId",
        "ReleaseVersion",
        "ClusterName",
        "OperationMode",
        "LoadString",
        "Tokens",
    ];
    let requests = [
        Request::read_many(STORAGE_SERVICE, &attributes),
        Request::read_many(ENDPOINT_SNITCH_INFO, &["Datacenter", "Rack"]),
    ];
    let mut results = storage
        .jolokia()
        .bulk(&requests)
        .await
        .map_err(read_info)?
        .into_iter();
    let mut ss = match results.next() {
        Some(Ok(Value::Object(values))) => values,
        Some(Err(source)) => return Err(read_info(source)),
        _ => {
            return Err(read_info(jolokia::Error::DecodeResponse {
                request: requests[0].label().to_string(),
                reason: "expected an object of attributes".to_string(),
            }));
        }
    };
    let mut snitch = match results.next() {
        Some(Ok(Value::Object(values))) => values,
        Some(Err(source)) => return Err(read_info(source)),
        _ => {
            return Err(read_info(jolokia::Error::DecodeResponse {
                request: requests[1].label().to_string(),
                reason: "expected an object of attributes".to_string(),
            }));
        }
    };
    let label = requests[0].label();
    let text = |values: &mut serde_json::Map<String, Value>, key: &str| {
        jolokia::decode::<String>(label, values.remove(key).unwrap_or(Value::Null))
            .map_err(read_info)
    };
    Ok(Info {
        host_id: jolokia::decode(label, ss.remove("LocalHostId").unwrap_or(Value::Null))
            .map_err(read_info)?,
        release_version: text(&mut ss, "ReleaseVersion")?,
        cluster_name: text(&mut ss, "ClusterName")?,
        operation_mode: text(&mut ss, "OperationMode")?,
        load: text(&mut ss, "LoadString")?,
        tokens: jolokia::decode::<Vec<String>>(label, ss.remove("Tokens").unwrap_or(Value::Null))
            .map_err(read_info)?
            .len(),
        datacenter: text(&mut snitch, "Datacenter")?,
        rack: text(&mut snitch, "Rack")?,
    })
}

/// Format `nodetool info`. Pure.
pub fn format_info(info: &Info) -> String {
    let lines = [
        ("ID", info.host_id.as_deref().unwrap_or("?").to_string()),
        ("Release Version", info.release_version.clone()),
        ("Cluster Name", info.cluster_name.clone()),
        ("Operation Mode", info.operation_mode.clone()),
        ("Load", info.load.clone()),
        ("Tokens", info.tokens.to_string()),
        ("Data Center", info.datacenter.clone()),
        ("Rack", info.rack.clone()),
    ];
    lines
        .iter()
        .map(|(key, value)| format!("{key:<23}: {value}\n"))
        .collect()
}

/// Runs one nodetool command against ScyllaDB's REST API.
pub async fn run_scylla(
    node: &Scylla,
    command: &NodetoolCommand,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let failed = |action: &'static str| move |source| Error::Scylla { action, source };
    let text = match command {
        NodetoolCommand::Status => format_status(
            &gather_scylla_status(node)
                .await
                .map_err(failed("reading the ring"))?,
        ),
        NodetoolCommand::Info => format_info(
            &gather_scylla_info(node)
                .await
                .map_err(failed("reading the node's information"))?,
        ),
        NodetoolCommand::OperationMode => {
            let mode = node
                .operation_mode()
                .await
                .map_err(failed("reading the operation mode"))?;
            format!("{mode}\n")
        }
        // As `scylla nodetool version`: the Cassandra version it speaks.
        NodetoolCommand::Version => {
            let version = node
                .release_version()
                .await
                .map_err(failed("reading the release version"))?;
            format!("ReleaseVersion: {version}\n")
        }
        NodetoolCommand::Drain => scylla_drain(node).await?,
        NodetoolCommand::Decommission => scylla_decommission(node).await?,
        NodetoolCommand::Cleanup { .. } => return Err(Error::CleanupUnsupported),
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| Error::WriteOutput { source })
}

/// Drains, as [`drain`] does in Cassandra mode.
async fn scylla_drain(node: &Scylla) -> Result<String, Error> {
    let read = |source| Error::Scylla {
        action: "reading the operation mode",
        source,
    };
    match node.operation_mode().await.map_err(read)? {
        OperationMode::Drained => return Ok("already drained\n".to_string()),
        OperationMode::Decommissioned => {
            return Ok("decommissioned: nothing to drain\n".to_string());
        }
        _ => {}
    }
    let called = node.drain().await;
    match (called, node.operation_mode().await) {
        (_, Ok(OperationMode::Drained)) => Ok("drained\n".to_string()),
        (Err(source), _) => Err(Error::Scylla {
            action: "drain",
            source,
        }),
        (Ok(()), Ok(mode)) => Err(Error::NotDrained { mode }),
        (Ok(()), Err(source)) => Err(read(source)),
    }
}

/// Decommissions and waits for DECOMMISSIONED, as [`decommission`] does in
/// Cassandra mode.
async fn scylla_decommission(node: &Scylla) -> Result<String, Error> {
    let read = |source| Error::Scylla {
        action: "reading the operation mode",
        source,
    };
    match node.operation_mode().await.map_err(read)? {
        OperationMode::Decommissioned => return Ok("already decommissioned\n".to_string()),
        OperationMode::Leaving => {}
        _ => node.decommission().await.map_err(|source| Error::Scylla {
            action: "decommission",
            source,
        })?,
    }
    let timeout = node.long_timeout();
    let started = Instant::now();
    loop {
        let mode = node.operation_mode().await.map_err(read)?;
        match mode {
            OperationMode::Decommissioned => return Ok("decommissioned\n".to_string()),
            OperationMode::Leaving => {}
            mode => return Err(Error::NotDecommissioned { mode }),
        }
        if started.elapsed() >= timeout {
            return Err(Error::DecommissionTimedOut { timeout, mode });
        }
        tokio::time::sleep(DECOMMISSION_POLL).await;
    }
}

/// What ScyllaDB's REST API says of the ring, for `status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScyllaRing {
    pub live: Vec<String>,
    pub down: Vec<String>,
    pub joining: Vec<String>,
    pub leaving: Vec<String>,
    pub moving: Vec<String>,
    /// Endpoint → bytes on disk.
    pub loads: BTreeMap<String, f64>,
    pub host_ids: BTreeMap<String, String>,
    /// (token, endpoint), as `/storage_service/tokens_endpoint` lists them.
    pub tokens_endpoint: Vec<(String, String)>,
    /// Endpoint → (datacenter, rack).
    pub places: BTreeMap<String, (String, String)>,
}

async fn gather_scylla_status(node: &Scylla) -> Result<Status, scylla::Error> {
    let mut ring = ScyllaRing {
        live: node.live().await?,
        down: node.down().await?,
        joining: node.nodes("joining").await?,
        leaving: node.nodes("leaving").await?,
        moving: node.nodes("moving").await?,
        loads: node.load_map().await?,
        host_ids: node.host_ids().await?,
        tokens_endpoint: node.tokens_endpoint().await?,
        places: BTreeMap::new(),
    };
    let endpoints: Vec<String> = ring
        .tokens_endpoint
        .iter()
        .map(|(_, endpoint)| endpoint.clone())
        .collect();
    for endpoint in endpoints {
        if ring.places.contains_key(&endpoint) {
            continue;
        }
        let dc = node.datacenter_of(Some(&endpoint)).await?;
        let rack = node.rack_of(Some(&endpoint)).await?;
        ring.places.insert(endpoint, (dc, rack));
    }
    Ok(scylla_status_from(&ring))
}

/// The status table of ScyllaDB's ring: one row per endpoint that owns
/// tokens, grouped by datacenter, in the text order of the addresses; Owns
/// is unknown without a keyspace. Pure.
pub fn scylla_status_from(ring: &ScyllaRing) -> Status {
    let mut tokens: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, endpoint) in &ring.tokens_endpoint {
        *tokens.entry(endpoint.as_str()).or_default() += 1;
    }
    let mut status = Status {
        datacenters: BTreeMap::new(),
        has_ownership: true,
        note: Some(SCYLLA_OWNERSHIP_NOTE.to_string()),
    };
    for (endpoint, count) in tokens {
        let has = |list: &[String]| list.iter().any(|e| e == endpoint);
        let up = if has(&ring.live) {
            'U'
        } else if has(&ring.down) {
            'D'
        } else {
            '?'
        };
        let state = if has(&ring.joining) {
            'J'
        } else if has(&ring.leaving) {
            'L'
        } else if has(&ring.moving) {
            'M'
        } else {
            'N'
        };
        let (dc, rack) = ring
            .places
            .get(endpoint)
            .cloned()
            .unwrap_or_else(|| ("?".to_string(), "?".to_string()));
        status.datacenters.entry(dc).or_default().push(StatusRow {
            state: format!("{up}{state}"),
            address: endpoint.to_string(),
            load: ring.loads.get(endpoint).map(|b| file_size(*b)),
            tokens: Some(count),
            owns: None,
            host_id: ring.host_ids.get(endpoint).cloned(),
            rack: Some(rack),
        });
    }
    // Rows stay in the text order of their addresses, as ScyllaDB's
    // nodetool keeps them (a set of strings).
    status
}

/// A size in bytes as ScyllaDB's nodetool prints it (its
/// `file_size_printer`, after Cassandra's `FileUtils.stringifyFileSize`):
/// two decimals in the largest binary unit it exceeds, else bytes. Pure.
pub fn file_size(bytes: f64) -> String {
    for (unit, name) in [
        (1u64 << 40, "TB"),
        (1 << 30, "GB"),
        (1 << 20, "MB"),
        (1 << 10, "KB"),
    ] {
        #[allow(clippy::cast_precision_loss)]
        let unit = unit as f64;
        if bytes > unit {
            return format!("{:.2} {name}", bytes / unit);
        }
    }
    format!("{bytes:.0} bytes")
}

async fn gather_scylla_info(node: &Scylla) -> Result<Info, scylla::Error> {
    Ok(Info {
        host_id: node.local_host_id().await?,
        release_version: node.scylla_release_version().await?,
        cluster_name: node.cluster_name().await?,
        operation_mode: node.operation_mode().await?.to_string(),
        load: file_size(node.load().await?),
        tokens: node.tokens().await?.len(),
        datacenter: node.datacenter_of(None).await?,
        rack: node.rack_of(None).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Ring {
        Ring {
            live: vec!["10.0.0.1:7000".into(), "10.0.0.10:7000".into()],
            unreachable: vec!["10.0.0.2:7000".into()],
            joining: vec!["10.0.0.10:7000".into()],
            host_ids: [
                ("10.0.0.1:7000".to_string(), "h1".to_string()),
                ("10.0.0.2:7000".to_string(), "h2".to_string()),
            ]
            .into(),
            loads: [("10.0.0.1:7000".to_string(), "1.5 KiB".to_string())].into(),
            ownership: Some([("10.0.0.1".to_string(), 0.5), ("10.0.0.2".to_string(), 0.5)].into()),
            ..Ring::default()
        }
    }

    fn lookup(tokens: usize, dc: &str, rack: &str) -> EndpointLookup {
        EndpointLookup {
            tokens: Some((0..tokens).map(|t| t.to_string()).collect()),
            datacenter: Some(dc.to_string()),
            rack: Some(rack.to_string()),
        }
    }

    #[test]
    fn status_groups_by_datacenter_and_sorts_addresses_numerically() {
        let ring = ring();
        let endpoints = ring.endpoints();
        assert_eq!(
            endpoints,
            vec!["10.0.0.10:7000", "10.0.0.1:7000", "10.0.0.2:7000"]
        );
        let status = status_from(
            &ring,
            &endpoints,
            vec![
                lookup(4, "dc2", "r3"),
                lookup(4, "dc1", "r1"),
                lookup(4, "dc1", "r2"),
            ],
        );
        let text = format_status(&status);
        let expected = "\
Datacenter: dc1
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address   Load     Tokens  Owns   Host ID  Rack
UN  10.0.0.1  1.5 KiB  4       50.0%  h1       r1
DN  10.0.0.2  ?        4       50.0%  h2       r2

Datacenter: dc2
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address    Load  Tokens  Owns  Host ID  Rack
UJ  10.0.0.10  ?     4       ?     ?        r3

Note: Owns is the share of the token ring (raw ownership), not the effective ownership of a keyspace.
";
        assert_eq!(text, expected);
    }

    #[test]
    fn status_without_ownership_leaves_the_column_out() {
        let mut ring = ring();
        ring.ownership = None;
        let endpoints = vec!["10.0.0.1:7000".to_string()];
        let status = status_from(&ring, &endpoints, vec![EndpointLookup::default()]);
        let text = format_status(&status);
        assert!(text.starts_with("Datacenter: ?\n"), "{text}");
        assert!(
            text.contains("--  Address   Load     Tokens  Host ID  Rack\n"),
            "{text}"
        );
        assert!(
            text.contains("UN  10.0.0.1  1.5 KiB  ?       h1       ?\n"),
            "{text}"
        );
        assert!(!text.contains("Owns"), "{text}");
    }

    #[test]
    fn sizes_print_as_scyllas_nodetool_prints_them() {
        assert_eq!(file_size(100.0), "100 bytes");
        assert_eq!(file_size(1024.0), "1024 bytes");
        assert_eq!(file_size(1536.0), "1.50 KB");
        assert_eq!(file_size(3.0 * 1024.0 * 1024.0 * 1024.0 + 1.0), "3.00 GB");
    }

    #[test]
    fn scylla_status_lists_the_token_owners_by_datacenter() {
        let ring = ScyllaRing {
            live: vec!["10.0.0.1".into()],
            joining: vec!["10.0.0.9".into()],
            tokens_endpoint: vec![
                ("1".into(), "10.0.0.1".into()),
                ("2".into(), "10.0.0.9".into()),
                ("3".into(), "10.0.0.1".into()),
            ],
            places: [
                (
                    "10.0.0.1".to_string(),
                    ("dc1".to_string(), "r1".to_string()),
                ),
                (
                    "10.0.0.9".to_string(),
                    ("dc2".to_string(), "r2".to_string()),
                ),
            ]
            .into(),
            ..ScyllaRing::default()
        };
        let status = scylla_status_from(&ring);
        assert_eq!(status.datacenters.len(), 2);
        let one = &status.datacenters["dc1"][0];
        assert_eq!((one.state.as_str(), one.tokens), ("UN", Some(2)));
        let joining = &status.datacenters["dc2"][0];
        assert_eq!(joining.state, "?J", "neither live nor down");
        let text = format_status(&status);
        assert!(text.contains("Owns"), "{text}");
        assert!(
            text.ends_with(&format!("{SCYLLA_OWNERSHIP_NOTE}\n")),
            "{text}"
        );
    }

    #[test]
    fn info_is_one_line_per_field() {
        let info = Info {
            host_id: None,
            release_version: "4.1.8".into(),
            cluster_name: "c".into(),
            operation_mode: "NORMAL".into(),
            load: "1 KiB".into(),
            tokens: 16,
            datacenter: "dc1".into(),
            rack: "r1".into(),
        };
        let text = format_info(&info);
        assert!(text.starts_with("ID                     : ?\n"), "{text}");
        assert!(text.contains("Tokens                 : 16\n"), "{text}");
        assert_eq!(text.lines().count(), 8);
    }
}
