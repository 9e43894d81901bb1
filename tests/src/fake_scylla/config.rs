//! What the fake ScyllaDB node reads at startup, as the `scylla` binary
//! does: its command line (every scylla.yaml option as `--dashed-name`,
//! Seastar's options, `--options-file`), scylla.yaml (from
//! `--options-file`, default `$SCYLLA_CONF/scylla.yaml`, `SCYLLA_CONF`
//! default `/etc/scylla`) and, with GossipingPropertyFileSnitch,
//! `$SCYLLA_CONF/cassandra-rackdc.properties`. A command-line option wins
//! over the yaml. An option the binary does not know is refused as
//! boost::program_options refuses it (`unrecognised option '--x'`). Pure:
//! arguments, file contents and variables in, a [`ScyllaConfig`] out.
//!
//! The directories are Scylla's: `workdir` (default `/var/lib/scylla`),
//! `data_file_directories` (default `<workdir>/data`), `commitlog_directory`
//! (`<workdir>/commitlog`), `hints_directory` (`<workdir>/hints`),
//! `view_hints_directory` (`<workdir>/view_hints`) and
//! `saved_caches_directory` (`<workdir>/saved_caches`).
//!
//! `authenticator`, `authorizer` and `role_manager` name classes ScyllaDB
//! registers ([`AUTH_CLASSES`]; a name without a dot is in
//! `org.apache.cassandra.auth`): another is refused as its class registry
//! refuses it, and the node does not start.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::fake_cassandra::config::parse_rackdc;
use crate::ring::{NodeConfig, Version};

/// The Cassandra version every ScyllaDB release reports as its
/// `release_version` (version.hh `version::release()`): the ring model
/// applies the rules of that line (no replication-factor check on
/// decommission, as in Scylla's gossip topology).
pub const CASSANDRA_COMPAT: &str = "3.0.8";

/// The release a `latest` image runs.
pub const LATEST: &str = "2025.1.0";

/// The options the fake knows besides the scylla.yaml keys: Seastar's
/// (`app_template`, reactor, smp), the binary's own and the command-line
/// forms of yaml options whose names differ.
const SEASTAR_OPTIONS: &[&str] = &[
    "help",
    "version",
    "options-file",
    "smp",
    "memory",
    "reserve-memory",
    "overprovisioned",
    "cpuset",
    "lock-memory",
    "thread-affinity",
    "poll-mode",
    "idle-poll-time-us",
    "max-io-requests",
    "io-properties-file",
    "io-properties",
    "blocked-reactor-notify-ms",
    "default-log-level",
    "logger-log-level",
    "log-to-stdout",
    "log-to-syslog",
    "network-stack",
    "unsafe-bypass-fsync",
    "kernel-page-cache",
    "abort-on-seastar-bad-alloc",
    "seed-provider-parameters",
];

/// Seastar's switches (`bpo::bool_switch`): they take no value.
const SWITCHES: &[&str] = &["help", "version", "overprovisioned", "poll-mode"];

/// scylla.yaml options (db/config.cc) the fake knows: the keys of the
/// image's scylla.yaml (set or commented out) and those the operator and
/// the image's entrypoint use.
const YAML_OPTIONS: &[&str] = &[
    "alternator_address",
    "alternator_port",
    "alternator_write_isolation",
    "api_address",
    "api_port",
    "api_ui_dir",
    "api_doc_dir",
    "audit",
    "audit_categories",
    "audit_keyspaces",
    "audit_tables",
    "authenticator",
    "authorizer",
    "auto_bootstrap",
    "auto_snapshot",
    "batch_size_fail_threshold_in_kb",
    "batch_size_warn_threshold_in_kb",
    "broadcast_address",
    "broadcast_rpc_address",
    "cas_contention_timeout_in_ms",
    "client_encryption_options",
    "cluster_name",
    "commitlog_directory",
    "commitlog_segment_size_in_mb",
    "commitlog_sync",
    "commitlog_sync_period_in_ms",
    "commitlog_total_space_in_mb",
    "consistent_rangemovement",
    "data_file_directories",
    "developer_mode",
    "enable_repair_based_node_ops",
    "endpoint_snitch",
    "experimental_features",
    "hinted_handoff_enabled",
    "hints_directory",
    "initial_token",
    "join_ring",
    "listen_address",
    "listen_interface",
    "listen_on_broadcast_address",
    "load_ring_state",
    "max_hint_window_in_ms",
    "native_shard_aware_transport_port",
    "native_transport_port",
    "native_transport_port_ssl",
    "num_tokens",
    "override_decommission",
    "partitioner",
    "prometheus_address",
    "prometheus_port",
    "read_request_timeout_in_ms",
    "replace_address",
    "replace_address_first_boot",
    "replace_node_first_boot",
    "ring_delay_ms",
    "role_manager",
    "rpc_address",
    "rpc_interface",
    "rpc_port",
    "saved_caches_directory",
    "schema_commitlog_directory",
    "seed_provider",
    "server_encryption_options",
    "skip_wait_for_gossip_to_settle",
    "ssl_storage_port",
    "start_native_transport",
    "storage_port",
    "view_hints_directory",
    "workdir",
    "write_request_timeout_in_ms",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// boost::program_options' refusal of the command line; the binary
    /// prints `error: <this>` and `Try --help.` and exits 2.
    #[error("{0}")]
    CommandLine(String),
    #[error("scylla.yaml is not valid YAML: {0}")]
    ParseYaml(String),
    #[error("invalid {what} {value:?}")]
    Invalid { what: &'static str, value: String },
    /// The class registry's refusal of a class an authentication setting
    /// names (`no_such_class`), by its qualified name.
    #[error("unable to find class '{0}'")]
    NoSuchClass(String),
}

/// The classes ScyllaDB registers for each authentication setting, by
/// their qualified names.
pub const AUTH_CLASSES: [(&str, &[&str]); 3] = [
    (
        "authenticator",
        &[
            "org.apache.cassandra.auth.AllowAllAuthenticator",
            "org.apache.cassandra.auth.PasswordAuthenticator",
            "com.scylladb.auth.TransitionalAuthenticator",
            "com.scylladb.auth.SaslauthdAuthenticator",
            "com.scylladb.auth.CertificateAuthenticator",
        ],
    ),
    (
        "authorizer",
        &[
            "org.apache.cassandra.auth.AllowAllAuthorizer",
            "org.apache.cassandra.auth.CassandraAuthorizer",
            "com.scylladb.auth.TransitionalAuthorizer",
        ],
    ),
    (
        "role_manager",
        &[
            "org.apache.cassandra.auth.CassandraRoleManager",
            "com.scylladb.auth.LDAPRoleManager",
        ],
    ),
];

/// Each authentication setting, when set (on the command line or in the
/// yaml), names a class of [`AUTH_CLASSES`].
fn check_auth_classes(doc: &Value, cli: &CommandLine) -> Result<(), ConfigError> {
    for (key, classes) in AUTH_CLASSES {
        let Some(name) = option(doc, cli, key) else {
            continue;
        };
        let class = if name.contains('.') {
            name
        } else {
            format!("org.apache.cassandra.auth.{name}")
        };
        if !classes.contains(&class.as_str()) {
            return Err(ConfigError::NoSuchClass(class));
        }
    }
    Ok(())
}

/// The command line as the binary understood it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// `--name value` / `--name=value`, names as given (dashed).
    pub options: BTreeMap<String, String>,
    pub switches: Vec<String>,
}

impl CommandLine {
    pub fn has(&self, switch: &str) -> bool {
        self.switches.iter().any(|s| s == switch)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }
}

fn known(name: &str) -> bool {
    SEASTAR_OPTIONS.contains(&name) || YAML_OPTIONS.contains(&name.replace('-', "_").as_str())
}

/// Parses the arguments after the program name as boost::program_options
/// does for the binary: `--name value`, `--name=value`, switches; anything
/// else is refused with boost's words.
pub fn parse_command_line(args: &[String]) -> Result<CommandLine, ConfigError> {
    let mut out = CommandLine::default();
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let Some(body) = arg.strip_prefix("--") else {
            return Err(ConfigError::CommandLine(format!(
                "too many positional options have been specified on the command line (at '{arg}')"
            )));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if !known(name) {
            return Err(ConfigError::CommandLine(format!(
                "unrecognised option '--{name}'"
            )));
        }
        if SWITCHES.contains(&name) {
            if inline.is_some() {
                return Err(ConfigError::CommandLine(format!(
                    "option '--{name}' does not take any arguments"
                )));
            }
            out.switches.push(name.to_string());
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => match it.next_if(|next| !next.starts_with("--")) {
                Some(v) => v.clone(),
                None => {
                    return Err(ConfigError::CommandLine(format!(
                        "the required argument for option '--{name}' is missing"
                    )));
                }
            },
        };
        out.options.insert(name.to_string(), value);
    }
    for name in ["smp", "api-port"] {
        if let Some(v) = out.get(name)
            && v.parse::<u32>().is_err()
        {
            return Err(ConfigError::CommandLine(format!(
                "the argument ('{v}') for option '--{name}' is invalid"
            )));
        }
    }
    if let Some(v) = out.get("memory")
        && parse_memory(v).is_none()
    {
        return Err(ConfigError::CommandLine(format!(
            "the argument ('{v}') for option '--memory' is invalid"
        )));
    }
    Ok(out)
}

/// Seastar's memory sizes: a number with an optional k/K, M, G or T suffix.
pub fn parse_memory(text: &str) -> Option<u64> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "k" | "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// Where the node keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directories {
    pub data: Vec<String>,
    pub commitlog: String,
    pub hints: String,
    pub view_hints: String,
    pub saved_caches: String,
}

impl Directories {
    pub fn all(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.data.iter().map(String::as_str).collect();
        out.extend([
            self.commitlog.as_str(),
            self.hints.as_str(),
            self.view_hints.as_str(),
            self.saved_caches.as_str(),
        ]);
        out
    }
}

/// The node as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScyllaConfig {
    /// What the ring model starts (its `version` is [`CASSANDRA_COMPAT`]'s
    /// line; `replace_address_first_boot` is set once a
    /// `replace_node_first_boot` host ID is resolved).
    pub node: NodeConfig,
    /// `scylla_release_version`: the image's version.
    pub release: String,
    pub listen_address: String,
    pub api_address: String,
    pub api_port: u16,
    pub snitch: String,
    /// `replace_node_first_boot`: the host ID of the dead node to replace.
    pub replace_node_first_boot: Option<String>,
    pub smp: Option<u32>,
    pub memory: Option<String>,
    pub developer_mode: bool,
    pub directories: Directories,
    /// `rpc_address` (the CQL port's address; `listen_address` when unset).
    pub rpc_address: String,
    /// The encryption settings (`conf_dir` is `/etc/scylla` here: the
    /// process sets its `SCYLLA_CONF`).
    pub tls: super::tls::TlsConfig,
}

fn yaml_str(doc: &Value, key: &str) -> Option<String> {
    match doc.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `seed_provider[0].parameters[0].seeds`, or the command line's
/// `--seed-provider-parameters seeds=a,b`; addresses without ports.
fn seeds(doc: &Value, cli: &CommandLine) -> Vec<String> {
    let from_cli = cli.get("seed-provider-parameters").and_then(|p| {
        p.split(';')
            .find_map(|kv| kv.trim().strip_prefix("seeds="))
            .map(str::to_string)
    });
    let text = from_cli
        .or_else(|| {
            doc.pointer("/seed_provider/0/parameters/0/seeds")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "127.0.0.1".to_string());
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.rsplit_once(':') {
            Some((ip, port)) if port.parse::<u16>().is_ok() && !ip.contains(':') => ip.to_string(),
            _ => s.to_string(),
        })
        .collect()
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// The option `key` (underscored): the command line's `--dashed-key`, else
/// the yaml's.
fn option(doc: &Value, cli: &CommandLine, key: &str) -> Option<String> {
    cli.get(&key.replace('_', "-"))
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .or_else(|| yaml_str(doc, key))
}

/// The seed list the ring model is given. The model follows Cassandra: a
/// node in its own seed list joins without bootstrapping. Scylla does not
/// (`storage_service::is_first_node`): only the seed with the smallest
/// address skips bootstrap ("I am the first node in the cluster"), every
/// other node bootstraps, seeds included, and a replacing node always
/// streams. So on a first boot the node's own address stays in the list
/// only when it is that first node.
pub fn ring_seeds(seeds: &[String], address: &str, replacing: bool) -> Vec<String> {
    let order = |s: &String| {
        let ip = s.parse::<std::net::IpAddr>().ok();
        (ip.is_none(), ip, s.clone())
    };
    let first = seeds.iter().min_by_key(|s| order(s));
    let first_node = !replacing && first.is_some_and(|f| f == address);
    seeds
        .iter()
        .filter(|s| first_node || s.as_str() != address)
        .cloned()
        .collect()
}

/// The image tag the sim gives the process (`CASSANDRA_VERSION`, set by the
/// kubelet to every database image's tag) as Scylla's version.
pub fn release_of_tag(tag: Option<&str>) -> String {
    match tag {
        None | Some("" | "latest") => LATEST.to_string(),
        Some(t) => t.to_string(),
    }
}

/// Reads the configuration: the parsed command line, scylla.yaml's text,
/// cassandra-rackdc.properties' text (if any) and the release.
pub fn parse(
    cli: &CommandLine,
    yaml: &str,
    rackdc: Option<&str>,
    release: &str,
) -> Result<ScyllaConfig, ConfigError> {
    let doc: Value = if yaml.trim().is_empty() {
        Value::Null
    } else {
        serde_norway::from_str(yaml).map_err(|e| ConfigError::ParseYaml(e.to_string()))?
    };
    let opt = |key: &str| option(&doc, cli, key);
    let listen_address = opt("listen_address").unwrap_or_else(|| "localhost".into());
    let address = opt("broadcast_address").unwrap_or_else(|| listen_address.clone());
    let workdir = opt("workdir").unwrap_or_else(|| "/var/lib/scylla".into());
    let data: Vec<String> = match cli.get("data-file-directories") {
        Some(d) => d.split(',').map(str::to_string).collect(),
        None => doc
            .get("data_file_directories")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    };
    let data = if data.is_empty() {
        vec![format!("{workdir}/data")]
    } else {
        data
    };
    let dir = |key: &str, sub: &str| opt(key).unwrap_or_else(|| format!("{workdir}/{sub}"));
    let directories = Directories {
        data,
        commitlog: dir("commitlog_directory", "commitlog"),
        hints: dir("hints_directory", "hints"),
        view_hints: dir("view_hints_directory", "view_hints"),
        saved_caches: dir("saved_caches_directory", "saved_caches"),
    };
    let number = |key: &'static str, default: u64| -> Result<u64, ConfigError> {
        match opt(key) {
            Some(v) => v.parse().map_err(|_| ConfigError::Invalid {
                what: key,
                value: v,
            }),
            None => Ok(default),
        }
    };
    let num_tokens = number("num_tokens", 1)? as usize;
    let api_port = number("api_port", 10000)?;
    let api_port = u16::try_from(api_port).map_err(|_| ConfigError::Invalid {
        what: "api_port",
        value: api_port.to_string(),
    })?;
    let snitch = opt("endpoint_snitch").unwrap_or_else(|| "SimpleSnitch".into());
    let (dc, rack) = if snitch.ends_with("GossipingPropertyFileSnitch") {
        rackdc.map(parse_rackdc).unwrap_or_default()
    } else {
        (None, None)
    };
    let replace_node_first_boot = opt("replace_node_first_boot");
    let port = |key: &'static str| -> Result<Option<u16>, ConfigError> {
        opt(key)
            .map(|v| {
                v.parse().map_err(|_| ConfigError::Invalid {
                    what: key,
                    value: v,
                })
            })
            .transpose()
    };
    check_auth_classes(&doc, cli)?;
    let tls = super::tls::TlsConfig::parse(&doc, std::path::Path::new("/etc/scylla"), &port)?;
    let rpc_address = opt("rpc_address").unwrap_or_else(|| listen_address.clone());
    let version = Version::parse(CASSANDRA_COMPAT).expect("a version");
    let node = NodeConfig {
        cluster_name: opt("cluster_name").unwrap_or_else(|| "Test Cluster".into()),
        address,
        dc: dc.unwrap_or_else(|| "datacenter1".into()),
        rack: rack.unwrap_or_else(|| "rack1".into()),
        seeds: seeds(&doc, cli),
        num_tokens,
        auto_bootstrap: opt("auto_bootstrap").is_none_or(|v| truthy(&v)),
        replace_address: opt("replace_address"),
        replace_address_first_boot: opt("replace_address_first_boot"),
        allow_unsafe_replace: false,
        override_decommission: opt("override_decommission").is_some_and(|v| truthy(&v)),
        version,
        // `kubesim ring` shows the Scylla release the image runs; its
        // messaging follows the Cassandra line it speaks (3.0).
        release: Some(release.to_string()),
        storage_compatibility: Default::default(),
        // ScyllaDB has no such key (its own token allocation).
        allocate_tokens_for_local_replication_factor: None,
        data_dir: directories.data[0].clone(),
    };
    Ok(ScyllaConfig {
        node,
        release: release.to_string(),
        listen_address,
        api_address: opt("api_address").unwrap_or_else(|| "127.0.0.1".into()),
        api_port,
        snitch,
        replace_node_first_boot,
        smp: cli.get("smp").and_then(|v| v.parse().ok()),
        memory: cli.get("memory").map(str::to_string),
        developer_mode: opt("developer_mode").is_some_and(|v| truthy(&v)),
        directories,
        rpc_address,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    const YAML: &str = "cluster_name: c1\nnum_tokens: 16\nlisten_address: 10.0.0.1\nendpoint_snitch: GossipingPropertyFileSnitch\nseed_provider:\n  - class_name: org.apache.cassandra.locator.SimpleSeedProvider\n    parameters:\n      - seeds: \"10.0.0.1,10.0.0.2\"\napi_address: 127.0.0.1\n";

    #[test]
    fn the_command_line_wins_over_the_yaml() {
        let cli = parse_command_line(&args(&[
            "--listen-address",
            "10.0.0.9",
            "--broadcast-address=10.0.0.8",
            "--seed-provider-parameters",
            "seeds=10.0.0.5",
            "--smp",
            "2",
            "--memory",
            "1536M",
            "--overprovisioned",
            "--developer-mode",
            "0",
            "--api-address",
            "127.0.0.2",
            "--replace-node-first-boot",
            "0b7d3e4c-1f5a-4c39-9d6e-2f6a7b8c9d0e",
        ]))
        .expect("valid");
        let c = parse(&cli, YAML, Some("dc=DC1\nrack= B1 \n"), "5.4.9").expect("valid");
        assert_eq!(c.listen_address, "10.0.0.9");
        assert_eq!(c.node.address, "10.0.0.8");
        assert_eq!(c.node.seeds, vec!["10.0.0.5"]);
        assert_eq!((c.node.dc.as_str(), c.node.rack.as_str()), ("DC1", "B1"));
        assert_eq!(c.node.num_tokens, 16);
        assert_eq!(c.node.cluster_name, "c1");
        assert_eq!(c.api_address, "127.0.0.2");
        assert_eq!(c.api_port, 10000);
        assert_eq!(c.smp, Some(2));
        assert!(!c.developer_mode);
        assert!(cli.has("overprovisioned"));
        assert_eq!(
            c.replace_node_first_boot.as_deref(),
            Some("0b7d3e4c-1f5a-4c39-9d6e-2f6a7b8c9d0e")
        );
        assert_eq!(c.node.version, Version::new(3, 0));
        assert_eq!(c.node.data_dir, "/var/lib/scylla/data");
        assert_eq!(
            c.directories.all(),
            vec![
                "/var/lib/scylla/data",
                "/var/lib/scylla/commitlog",
                "/var/lib/scylla/hints",
                "/var/lib/scylla/view_hints",
                "/var/lib/scylla/saved_caches"
            ]
        );
    }

    /// `authenticator`, `authorizer` and `role_manager` name the classes
    /// ScyllaDB registers, short or qualified, from the yaml or the command
    /// line: what the sidecar renders for `spec.security.authentication`
    /// starts; another name does not, in the class registry's words.
    #[test]
    fn the_authentication_settings_name_registered_classes() {
        let none = CommandLine::default();
        let rendered: String = crds::contract::auth::SETTINGS
            .iter()
            .map(|(key, value)| format!("{key}: {value}\n"))
            .collect();
        parse(&none, &format!("{YAML}{rendered}"), None, "6.2.0").expect("rendered");
        let scylla_own = "authenticator: com.scylladb.auth.TransitionalAuthenticator\nauthorizer: org.apache.cassandra.auth.AllowAllAuthorizer\nrole_manager: com.scylladb.auth.LDAPRoleManager\n";
        parse(&none, &format!("{YAML}{scylla_own}"), None, "6.2.0").expect("qualified");
        let refusal = |cli: &CommandLine, extra: &str| {
            parse(cli, &format!("{YAML}{extra}"), None, "6.2.0")
                .expect_err(extra)
                .to_string()
        };
        assert_eq!(
            refusal(&none, "authenticator: AllowAllAuthenticatr\n"),
            "unable to find class 'org.apache.cassandra.auth.AllowAllAuthenticatr'"
        );
        assert_eq!(
            refusal(&none, "role_manager: TransitionalAuthorizer\n"),
            "unable to find class 'org.apache.cassandra.auth.TransitionalAuthorizer'"
        );
        // The command line wins over the yaml.
        let cli = parse_command_line(&args(&["--authorizer", "com.example.Authorizer"]))
            .expect("a known option");
        assert_eq!(
            refusal(&cli, "authorizer: CassandraAuthorizer\n"),
            "unable to find class 'com.example.Authorizer'"
        );
        let cli =
            parse_command_line(&args(&["--role-manager", "CassandraRoleManager"])).expect("known");
        parse(&cli, YAML, None, "6.2.0").expect("a registered role manager");
    }

    #[test]
    fn only_the_first_seed_skips_bootstrap() {
        let seeds: Vec<String> = ["10.0.0.10", "10.0.0.9", "10.0.0.2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // 10.0.0.2 is the smallest address (not the first in text order).
        assert_eq!(ring_seeds(&seeds, "10.0.0.2", false), seeds);
        assert_eq!(
            ring_seeds(&seeds, "10.0.0.9", false),
            vec!["10.0.0.10", "10.0.0.2"],
            "another seed bootstraps"
        );
        assert_eq!(
            ring_seeds(&seeds, "10.0.0.2", true),
            vec!["10.0.0.10", "10.0.0.9"],
            "a replacing node streams, first node or not"
        );
        assert_eq!(ring_seeds(&seeds, "10.0.0.5", false), seeds);
    }

    #[test]
    fn unknown_and_malformed_options_are_refused_in_boosts_words() {
        let e = parse_command_line(&args(&["--listen-adress", "x"])).unwrap_err();
        assert_eq!(e.to_string(), "unrecognised option '--listen-adress'");
        // A JVM option means nothing to Scylla.
        let e = parse_command_line(&args(&["-Dcassandra.replace_address=x"])).unwrap_err();
        assert!(
            e.to_string().starts_with("too many positional options"),
            "{e}"
        );
        let e = parse_command_line(&args(&["--smp", "two"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the argument ('two') for option '--smp' is invalid"
        );
        let e = parse_command_line(&args(&["--memory", "1.5G"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the argument ('1.5G') for option '--memory' is invalid"
        );
        let e = parse_command_line(&args(&["--cluster-name"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the required argument for option '--cluster-name' is missing"
        );
        assert_eq!(parse_memory("2G"), Some(2 << 30));
        assert_eq!(parse_memory("512M"), Some(512 << 20));
    }

    #[test]
    fn simple_snitch_ignores_the_rackdc_file_and_the_workdir_moves_the_directories() {
        let cli = parse_command_line(&args(&[
            "--workdir",
            "/w",
            "--endpoint-snitch",
            "SimpleSnitch",
        ]))
        .expect("valid");
        let c = parse(&cli, YAML, Some("dc=DC1\nrack=B1\n"), "6.2.0").expect("valid");
        assert_eq!(
            (c.node.dc.as_str(), c.node.rack.as_str()),
            ("datacenter1", "rack1")
        );
        assert_eq!(c.directories.commitlog, "/w/commitlog");
        assert_eq!(c.node.data_dir, "/w/data");
        assert_eq!(release_of_tag(Some("latest")), LATEST);
        assert_eq!(release_of_tag(Some("6.2.3")), "6.2.3");
    }
}
