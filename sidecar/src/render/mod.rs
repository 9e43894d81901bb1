//! Configuration rendering: the files a member's database process starts
//! with, and the environment or arguments it is started with. Shared by the
//! sidecar and `cassandra-operator config render`.
//!
//! [`render`] is pure: the member's settings ([`MemberConfig`]) and the
//! text of the image's default main file in, [`Rendered`] out.
//! [`render_to_dir`] is the I/O around it for `config render`.
//!
//! Cassandra mode (DESIGN.md section 6):
//! - `cassandra.yaml`: the image's default file with only `cluster_name`,
//!   `listen_address` (Pod IP), `broadcast_address` and
//!   `broadcast_rpc_address` (member Service ClusterIP), `rpc_address`
//!   (0.0.0.0), `endpoint_snitch` (GossipingPropertyFileSnitch) and
//!   `seed_provider[0].parameters[0].seeds` changed (plus `listen_interface`
//!   / `rpc_interface` removed when the default file sets them: Cassandra
//!   refuses them next to the addresses), then the rack's ConfigMap
//!   fragment deep-merged on top. Comments of the default file are lost in
//!   the YAML round trip; keys, order, values and types are kept. The
//!   operator's own settings of `spec.security` replace whatever the
//!   defaults or the fragment say, last: the encryption options ([`tls`])
//!   and, when clients must log in, `authenticator`, `authorizer` and
//!   `role_manager` ([`auth`]).
//! - `cassandra-rackdc.properties`: `dc`, `rack`, `prefer_local=false`.
//! - environment for `cassandra-env.sh`: `MAX_HEAP_SIZE` and
//!   `HEAP_NEWSIZE` computed as its `calculate_heap_sizes` would from the
//!   container's limits ([`heap`]), and `JVM_EXTRA_OPTS` with the Jolokia
//!   agent on 127.0.0.1:8778 and, when replacing,
//!   `-Dcassandra.replace_address_first_boot` ([`jvm`]).
//!
//! Scylla mode: `scylla.yaml` with the same keys, the same
//! `cassandra-rackdc.properties`, and the arguments of the `scylla` binary
//! ([`scylla`]).
//!
//! Cassandra 4.1 renamed many settings (`read_request_timeout_in_ms: 10000`
//! became `read_request_timeout: 10000ms`); 4.1 and 5.0 read either name
//! alone but refuse a file with both. When the fragment sets one name of a
//! renamed setting ([`crds::overrides::RENAMED_SETTINGS`]), the default
//! file's entry under the other name goes, so a fragment written for 3.11
//! works on 4.1 and 5.0 as written (Cassandra converts the old value with
//! the old unit itself); a fragment that sets both names is refused.
//! ScyllaDB keeps Cassandra 3.x's names and is left as it is.
//!
//! Overrides may not set the member's identity nor what would defeat the
//! safety rules ([`crds::overrides::REFUSED_KEYS`]: `auto_bootstrap`, the
//! ports, the data directories, ...), nor, when clients must log in, the
//! authentication settings ([`crds::overrides::AUTHENTICATION_KEYS`]): such
//! a fragment is an error naming the ConfigMap, the key and why, like a
//! fragment that is not YAML or not a mapping. Every check runs before
//! anything is returned or written: a member never starts with a
//! half-applied configuration.

pub mod auth;
pub mod cassandra;
pub mod emit;
#[cfg(test)]
mod fixtures;
pub mod heap;
pub mod jvm;
pub mod rackdc;
pub mod scylla;
#[cfg(test)]
mod tests;
pub mod tls;
pub mod yaml;

use std::fmt::Write as _;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crds::quantity::{ParseQuantityError, Quantity};
use crds::v1alpha1::ClusterMode;
use thiserror::Error;

pub use heap::{HeapSizes, calculate_heap_sizes};
pub use jvm::DEFAULT_JOLOKIA_AGENT_JAR;

/// The topology file both databases read.
pub const RACKDC_FILE: &str = "cassandra-rackdc.properties";
/// `config render` writes the environment of the Cassandra process here.
pub const ENV_FILE: &str = "entrypoint.env";
/// `config render` writes the arguments of the `scylla` binary here, one
/// per line (the sidecar adds the paths: `--options-file`, `--workdir`,
/// `--io-properties-file`).
pub const ARGS_FILE: &str = "entrypoint.args";

/// `cassandra-operator config render`: render a member's configuration files
/// offline, from the image's default configuration and the given inputs.
/// Writes cassandra.yaml (or scylla.yaml) and cassandra-rackdc.properties,
/// plus entrypoint.env (Cassandra: MAX_HEAP_SIZE, HEAP_NEWSIZE,
/// JVM_EXTRA_OPTS) or entrypoint.args (Scylla: the scylla binary's arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct RenderArgs {
    /// Database: cassandra or scylla.
    #[arg(long, default_value = "cassandra")]
    pub mode: String,
    /// The image's configuration directory (holding cassandra.yaml or scylla.yaml).
    #[arg(long, value_name = "DIR")]
    pub defaults: PathBuf,
    /// Where to write the rendered files.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// cluster_name.
    #[arg(long)]
    pub cluster_name: String,
    /// The Pod IP (listen_address).
    #[arg(long)]
    pub pod_ip: String,
    /// The member Service's ClusterIP (broadcast_address, broadcast_rpc_address).
    #[arg(long)]
    pub broadcast_address: String,
    /// Seed addresses, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<String>,
    /// Datacenter name.
    #[arg(long)]
    pub dc: String,
    /// Rack name.
    #[arg(long)]
    pub rack: String,
    /// Memory limit of the container, a Kubernetes quantity (e.g. 8Gi).
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// CPU limit of the container, a Kubernetes quantity (e.g. 2 or 1500m).
    #[arg(long)]
    pub cpu_limit: Option<String>,
    /// A cassandra.yaml fragment merged on top (the rack's ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub overrides: Option<PathBuf>,
    /// Start as the replacement of the node at this address.
    #[arg(long)]
    pub replace_address: Option<String>,
    /// The Cassandra release the configuration is for (`4.1.8`): the
    /// overrides may not set what it removed.
    #[arg(long, env = "CASSANDRA_VERSION")]
    pub cassandra_version: Option<String>,
}

/// Everything a member's configuration is rendered from.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// Cassandra or Scylla.
    pub mode: ClusterMode,
    /// `cluster_name` (the Cluster's name).
    pub cluster_name: String,
    /// The Pod IP: `listen_address`.
    pub pod_ip: IpAddr,
    /// The member Service's ClusterIP: `broadcast_address` and
    /// `broadcast_rpc_address`.
    pub broadcast_address: IpAddr,
    /// Seed addresses (not empty).
    pub seeds: Vec<String>,
    /// The datacenter name.
    pub datacenter: String,
    /// The rack name.
    pub rack: String,
    /// The container's memory limit; none: the database sizes itself from
    /// the node's memory.
    pub memory_limit: Option<Quantity>,
    /// The container's CPU limit.
    pub cpu_limit: Option<Quantity>,
    /// Processors `cassandra-env.sh` would count when there is no CPU limit
    /// (the caller reads them; the renderer stays pure).
    pub node_cpu_cores: u32,
    /// Replace the lost node at this address (the member Service's
    /// `replace` label). Scylla also takes a host ID.
    pub replace_address: Option<String>,
    /// The rack's main-file fragment, merged on top.
    pub overrides: Option<Overrides>,
    /// Path of the Jolokia JVM agent jar (Cassandra).
    pub jolokia_agent_jar: String,
    /// The Cassandra release the image runs (`CASSANDRA_VERSION`, which the
    /// official images set): the overrides may not set a setting it
    /// does not read ([`crds::overrides::unread_in`]). None: no such check
    /// (Cassandra's own refuses at start-up).
    pub release: Option<String>,
    /// TLS between members and for clients (`spec.security.tls`); none:
    /// the encryption settings are left as the defaults and overrides say.
    pub tls: Option<tls::TlsSettings>,
    /// Clients must log in with a password
    /// (`spec.security.authentication.enabled`): the settings of [`auth`]
    /// are rendered, and the overrides may not set them. Off: they are
    /// left as the defaults and overrides say.
    pub authentication: bool,
}

/// A fragment of the main file, merged over the rendered file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overrides {
    /// Where it comes from, for error messages.
    pub origin: OverridesOrigin,
    /// Its YAML text.
    pub text: String,
}

/// Where an overrides fragment comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverridesOrigin {
    /// The rack's `configMapName`; the fragment is its key named like the
    /// main file (`cassandra.yaml` or `scylla.yaml`).
    ConfigMap(String),
    /// A file (`config render --overrides`).
    File(PathBuf),
}

impl OverridesOrigin {
    /// How error messages name it, e.g. `ConfigMap "my-overrides": key
    /// cassandra.yaml`.
    pub fn describe(&self, file_name: &str) -> String {
        match self {
            OverridesOrigin::ConfigMap(name) => format!("ConfigMap {name:?}: key {file_name}"),
            OverridesOrigin::File(path) => {
                format!("overrides file {:?}", path.display().to_string())
            }
        }
    }
}

/// A rendered file, named relative to the configuration directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// File name (`cassandra.yaml`).
    pub name: String,
    /// Its content.
    pub content: String,
}

/// What the database process starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Files for the configuration directory.
    pub files: Vec<RenderedFile>,
    /// Environment of the process (Cassandra: `MAX_HEAP_SIZE`,
    /// `HEAP_NEWSIZE`, `JVM_EXTRA_OPTS`), to be set on top of the
    /// container's environment (append a `JVM_EXTRA_OPTS` the container
    /// already has to ours rather than dropping it).
    pub env: Vec<(String, String)>,
    /// Arguments of the `scylla` binary (Scylla).
    pub args: Vec<String>,
    /// The heap sizes behind `MAX_HEAP_SIZE` / `HEAP_NEWSIZE`, when a memory
    /// limit was given (Cassandra).
    pub heap: Option<HeapSizes>,
}

impl Rendered {
    /// The content of a rendered file.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.content.as_str())
    }

    /// The value of a rendered environment variable.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Rendering failed; nothing was written.
#[derive(Debug, Error)]
pub enum RenderError {
    #[error("unknown mode {0:?}: expected cassandra or scylla")]
    ParseMode(String),
    #[error("invalid {what} {value:?}: not an IP address")]
    ParseAddress { what: &'static str, value: String },
    #[error("invalid {what}: {source}")]
    ParseQuantity {
        what: &'static str,
        source: ParseQuantityError,
    },
    #[error("no seeds given: a member needs at least one seed address")]
    NoSeeds,
    #[error("invalid seed {0:?}: a seed is an address without blanks or commas")]
    InvalidSeed(String),
    #[error("{what} is empty")]
    EmptySetting { what: &'static str },
    #[error("invalid replace address {value:?}: expected {expected}")]
    InvalidReplaceAddress {
        value: String,
        expected: &'static str,
    },
    #[error("memory limit of {limit_mb} MiB is too small: at least {minimum_mb} MiB")]
    MemoryLimitTooSmall { limit_mb: u64, minimum_mb: u64 },
    #[error(
        "--memory {memory_mb}M over --smp {shards} leaves less than {minimum_mb} MiB per shard, which ScyllaDB refuses outside developer mode: raise the memory limit or lower the CPU limit"
    )]
    MemoryPerShardTooSmall {
        memory_mb: u64,
        shards: u64,
        minimum_mb: u64,
    },
    #[error("default {file} is not valid YAML: {source}")]
    ParseDefaults {
        file: String,
        source: serde_norway::Error,
    },
    #[error("default {file} is not a YAML mapping (it is a {found})")]
    DefaultsNotMapping { file: String, found: &'static str },
    #[error("default {file} has a seed_provider the operator cannot set seeds in: {reason}")]
    MalformedSeedProvider { file: String, reason: &'static str },
    #[error("{origin} is not valid YAML: {source}")]
    ParseOverrides {
        origin: String,
        source: serde_norway::Error,
    },
    #[error("{origin} is not a YAML mapping (it is a {found})")]
    OverridesNotMapping { origin: String, found: &'static str },
    #[error(
        "{origin} sets both {old} and {new}, the old and the new name of one setting, which Cassandra 4.1 and 5.0 refuse to start with; keep one"
    )]
    OverrideSetsBothNames {
        origin: String,
        old: String,
        new: String,
    },
    #[error("{origin} has a key that is not a string: {key}")]
    OverrideKeyNotString { origin: String, key: String },
    #[error("{origin} sets {key}, which the operator refuses: {reason}; remove it")]
    OverrideRefusedKey {
        origin: String,
        key: String,
        reason: &'static str,
    },
    #[error("writing {file}: {source}")]
    WriteYaml {
        file: String,
        source: emit::EmitError,
    },
    #[error("reading {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    WriteFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The main file of a mode (`cassandra.yaml`, `scylla.yaml`): the image's
/// default to render from, and the ConfigMap key of the overrides.
pub fn main_file_name(mode: ClusterMode) -> &'static str {
    // One name for both sides: the controller reads the same key.
    crds::overrides::config_map_key(mode)
}

/// Parses a mode as the Cluster spec names it.
pub fn parse_mode(text: &str) -> Result<ClusterMode, RenderError> {
    match text {
        "cassandra" => Ok(ClusterMode::Cassandra),
        "scylla" => Ok(ClusterMode::Scylla),
        other => Err(RenderError::ParseMode(other.to_string())),
    }
}

/// Renders a member's configuration from the text of the image's default
/// main file ([`main_file_name`]). Pure.
pub fn render(config: &MemberConfig, defaults: &str) -> Result<Rendered, RenderError> {
    validate(config)?;
    match config.mode {
        ClusterMode::Cassandra => cassandra::render_cassandra(config, defaults),
        ClusterMode::Scylla => scylla::render_scylla(config, defaults),
    }
}

fn validate(config: &MemberConfig) -> Result<(), RenderError> {
    for (what, value) in [
        ("cluster name", &config.cluster_name),
        ("datacenter", &config.datacenter),
        ("rack", &config.rack),
        ("Jolokia agent path", &config.jolokia_agent_jar),
    ] {
        if value.trim().is_empty() {
            return Err(RenderError::EmptySetting { what });
        }
    }
    if config.seeds.is_empty() {
        return Err(RenderError::NoSeeds);
    }
    for seed in &config.seeds {
        if seed.is_empty() || seed.contains(|c: char| c == ',' || c.is_whitespace()) {
            return Err(RenderError::InvalidSeed(seed.clone()));
        }
    }
    Ok(())
}

/// The replace address a member starts with (DESIGN.md section 4): the
/// value of its member Service's `cassandra.rook.io/replace` label, when the
/// label holds an address (`crds::contract::replace_address`) and the member
/// has not bootstrapped on this volume (a member that still has its data is
/// not a replacement, whatever the label says; Cassandra itself ignores
/// `replace_address_first_boot` once bootstrapped).
pub fn replace_address_for(replace_label: Option<&str>, not_bootstrapped: bool) -> Option<String> {
    crds::contract::replace_address(replace_label)
        .filter(|_| not_bootstrapped)
        .map(|ip| ip.to_string())
}

/// The processors `cassandra-env.sh` would count on this machine, for
/// [`MemberConfig::node_cpu_cores`] (at least 1).
pub fn node_cpu_cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

/// The [`MemberConfig`] of `config render`'s flags; reads the overrides file.
pub fn member_config_from_args(args: &RenderArgs) -> Result<MemberConfig, RenderError> {
    let address = |what, value: &str| {
        value
            .trim()
            .parse::<IpAddr>()
            .map_err(|_| RenderError::ParseAddress {
                what,
                value: value.to_string(),
            })
    };
    let quantity = |what, value: &Option<String>| {
        value
            .as_deref()
            .map(Quantity::parse)
            .transpose()
            .map_err(|source| RenderError::ParseQuantity { what, source })
    };
    let overrides = match &args.overrides {
        None => None,
        Some(path) => Some(Overrides {
            origin: OverridesOrigin::File(path.clone()),
            text: read(path)?,
        }),
    };
    Ok(MemberConfig {
        mode: parse_mode(&args.mode)?,
        cluster_name: args.cluster_name.clone(),
        pod_ip: address("pod IP", &args.pod_ip)?,
        broadcast_address: address("broadcast address", &args.broadcast_address)?,
        seeds: args.seeds.iter().map(|s| s.trim().to_string()).collect(),
        datacenter: args.dc.clone(),
        rack: args.rack.clone(),
        memory_limit: quantity("memory limit", &args.memory_limit)?,
        cpu_limit: quantity("CPU limit", &args.cpu_limit)?,
        node_cpu_cores: node_cpu_cores(),
        replace_address: args.replace_address.clone(),
        overrides,
        jolokia_agent_jar: DEFAULT_JOLOKIA_AGENT_JAR.to_string(),
        release: args.cassandra_version.clone(),
        tls: None,
        authentication: false,
    })
}

/// What [`render_to_dir`] did.
#[derive(Debug, Clone)]
pub struct RenderReport {
    /// The rendering.
    pub rendered: Rendered,
    /// The files written, in order.
    pub written: Vec<PathBuf>,
}

impl RenderReport {
    /// A human summary for the command line.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for path in &self.written {
            let _ = writeln!(s, "wrote {}", path.display());
        }
        if let Some(heap) = self.rendered.heap {
            let _ = writeln!(
                s,
                "heap: MAX_HEAP_SIZE={} HEAP_NEWSIZE={}",
                heap.max_heap_size(),
                heap.heap_newsize()
            );
        }
        s
    }
}

/// `config render`: reads the image's default main file from `--defaults`
/// and the `--overrides` file, renders, and writes every file into `--out`
/// (created if missing), plus [`ENV_FILE`] or [`ARGS_FILE`]. Nothing is
/// written unless rendering succeeded; each file is written to a temporary
/// file in `--out` first and then renamed over its target, so no file is
/// ever half-written.
pub fn render_to_dir(args: &RenderArgs) -> Result<RenderReport, RenderError> {
    let config = member_config_from_args(args)?;
    let defaults = read(&args.defaults.join(main_file_name(config.mode)))?;
    let rendered = render(&config, &defaults)?;

    let mut files: Vec<(String, String)> = rendered
        .files
        .iter()
        .map(|f| (f.name.clone(), f.content.clone()))
        .collect();
    if !rendered.env.is_empty() {
        let mut env = String::new();
        for (key, value) in &rendered.env {
            let _ = writeln!(env, "{key}={}", shell_quote(value));
        }
        files.push((ENV_FILE.to_string(), env));
    }
    if !rendered.args.is_empty() {
        files.push((ARGS_FILE.to_string(), rendered.args.join("\n") + "\n"));
    }
    let written = write_all(&args.out, &files)?;
    Ok(RenderReport { rendered, written })
}

fn read(path: &Path) -> Result<String, RenderError> {
    fs::read_to_string(path).map_err(|source| RenderError::ReadFile {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes every file to a temporary name, then renames them all; on an
/// error the temporary files are removed and no target was touched.
pub fn write_all(dir: &Path, files: &[(String, String)]) -> Result<Vec<PathBuf>, RenderError> {
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RenderError::WriteFile { path, source }
    };
    fs::create_dir_all(dir).map_err(write_err(dir))?;
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let result = (|| {
        for (name, content) in files {
            let target = dir.join(name);
            let temp = dir.join(format!(".{name}.rendering.{}", std::process::id()));
            staged.push((temp.clone(), target));
            fs::write(&temp, content).map_err(write_err(&temp))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (temp, _) in &staged {
            let _ = fs::remove_file(temp);
        }
        return Err(e);
    }
    let mut written = Vec::new();
    for (temp, target) in staged {
        fs::rename(&temp, &target).map_err(write_err(&target))?;
        written.push(target);
    }
    Ok(written)
}

/// Quotes a value for a POSIX shell (`. entrypoint.env`).
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}
