//! What the fake node reads at startup, as Cassandra and its
//! `cassandra-env.sh` do: cassandra.yaml and cassandra-rackdc.properties
//! from `CASSANDRA_CONF`, the heap and `JVM_EXTRA_OPTS` from the
//! environment, the version from `CASSANDRA_VERSION` (the image tag). Pure:
//! file contents and variables in, a [`FakeConfig`] out.
//!
//! The JVM's system properties come in the order `bin/cassandra` puts them
//! on the java command line ([`launcher_options`]): `JVM_OPTS` (which
//! `cassandra-env.sh` ends with `JVM_EXTRA_OPTS`), then the launcher's own
//! `-Dcassandra.logdir=$CASSANDRA_HOME/logs` and
//! `-Dcassandra.storagedir=$cassandra_storagedir` (`cassandra.in.sh`:
//! `$CASSANDRA_HOME/data` unless that variable is set), then the `-D`
//! options of the command line; the JVM keeps the last value of a
//! property. So a storage directory given in `JVM_EXTRA_OPTS` is lost, one
//! given as `cassandra -f -Dcassandra.storagedir=DIR` wins.
//!
//! The directories ([`Directories`]) are those of `DatabaseDescriptor`:
//! `data_file_directories`, `commitlog_directory`, `saved_caches_directory`
//! and `hints_directory` from cassandra.yaml when set there, else
//! `<storagedir>/data`, `/commitlog`, `/saved_caches` and `/hints`; none
//! set and no storage dir is a configuration error naming the key.
//!
//! `authenticator`, `authorizer` and `role_manager` name classes of
//! Cassandra's own jar ([`AUTH_CLASSES`], short or fully qualified), as
//! `AuthConfig.applyAuth` loads them: another name is a class that is not
//! on the classpath, and the node does not start.

use serde_json::Value;

use crate::ring::{NodeConfig, StorageCompatibility, Version};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("cassandra.yaml is not valid YAML: {0}")]
    ParseYaml(String),
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("invalid CASSANDRA_VERSION {0:?}: expected a release like 4.1.8")]
    Version(String),
    #[error("please set or unset MAX_HEAP_SIZE and HEAP_NEWSIZE in pairs (see cassandra-env.sh)")]
    HeapPair,
    #[error("invalid -javaagent options {0:?}: port must be a number")]
    AgentPort(String),
    #[error("invalid {what} {value:?}")]
    Invalid { what: &'static str, value: String },
    /// `DatabaseDescriptor.storagedirFor`'s refusal.
    #[error("{0} is missing and -Dcassandra.storagedir is not set")]
    NoStorageDir(&'static str),
    /// `YamlConfigurationLoader`'s refusal of keys its `Config` has no
    /// field for (a `ConfigurationException`: the node does not start).
    #[error(
        "Invalid yaml. Please remove properties [{}] from your cassandra.yaml",
        .0.join(", ")
    )]
    UnknownProperties(Vec<String>),
    /// `FBUtilities.classForName`'s refusal (3.11, 4.x) of a class an
    /// authentication setting names, completed with [`AUTH_PACKAGE`].
    #[error("Unable to find {readable} class '{class}'")]
    AuthClass {
        readable: &'static str,
        class: String,
    },
    /// 5.0's (`ParameterizedClass.newInstance`, over the packages
    /// `AuthConfig` searches).
    #[error("Unable to find class {0} in packages [\"\",\"org.apache.cassandra.auth\"]")]
    ParameterizedClass(String),
}

/// The package Cassandra looks up a class name without a dot in, for the
/// authentication settings.
pub const AUTH_PACKAGE: &str = "org.apache.cassandra.auth";

/// The classes of Cassandra's jar (in [`AUTH_PACKAGE`]) each
/// authentication setting may name: (key, what `FBUtilities` calls it in
/// its refusal, the classes, those 5.0 added).
pub const AUTH_CLASSES: [(&str, &str, &[&str], &[&str]); 3] = [
    (
        "authenticator",
        "authenticator",
        &["AllowAllAuthenticator", "PasswordAuthenticator"],
        &[
            "MutualTlsAuthenticator",
            "MutualTlsWithPasswordFallbackAuthenticator",
        ],
    ),
    (
        "authorizer",
        "authorizer",
        &["AllowAllAuthorizer", "CassandraAuthorizer"],
        &[],
    ),
    (
        "role_manager",
        "role manager",
        &["CassandraRoleManager"],
        &[],
    ),
];

/// `AuthConfig.applyAuth`: each authentication setting, when set, names a
/// class of [`AUTH_CLASSES`], by its short or its fully qualified name.
/// 5.0 reads them as a `ParameterizedClass` (a name, or a mapping with
/// `class_name`); earlier lines as a name only.
fn check_auth_classes(doc: &Value, version: Version) -> Result<(), ConfigError> {
    let v5 = version >= Version::V5_0;
    for (key, readable, classes, since_5_0) in AUTH_CLASSES {
        let name = match doc.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(name)) => name,
            Some(Value::Object(class)) if v5 => match class.get("class_name") {
                None | Some(Value::Null) => continue,
                Some(Value::String(name)) => name,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        what: key,
                        value: other.to_string(),
                    });
                }
            },
            Some(other) => {
                return Err(ConfigError::Invalid {
                    what: key,
                    value: other.to_string(),
                });
            }
        };
        let added: &[&str] = if v5 { since_5_0 } else { &[] };
        // A name without a dot is in the package (`FBUtilities.newAuthenticator`
        // and its siblings; 5.0 tries it as it is, then in the package).
        let class = if name.contains('.') {
            name.clone()
        } else {
            format!("{AUTH_PACKAGE}.{name}")
        };
        if !classes
            .iter()
            .chain(added)
            .any(|c| class == format!("{AUTH_PACKAGE}.{c}"))
        {
            return Err(if v5 {
                ConfigError::ParameterizedClass(name.clone())
            } else {
                ConfigError::AuthClass { readable, class }
            });
        }
    }
    Ok(())
}

/// The top-level cassandra.yaml keys 5.0 added (fields of 5.0.3's
/// `org.apache.cassandra.config.Config` that 4.1.8's lacks, among those the
/// fake reads): an older node refuses a file that sets one, even to its
/// default or to nothing, as real 4.1 does ("Invalid yaml. Please remove
/// properties [storage_compatibility_mode] from your cassandra.yaml").
const SINCE_5_0: [&str; 2] = ["storage_compatibility_mode", "sstable"];

/// Where the node keeps its files, as `DatabaseDescriptor` resolves them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directories {
    pub data: Vec<String>,
    pub commitlog: String,
    pub saved_caches: String,
    pub hints: String,
}

impl Directories {
    /// Every directory `StartupChecks.checkDataDirs` verifies, in its
    /// order: the data directories, the commit log, the saved caches, the
    /// hints.
    pub fn all(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.data.iter().map(String::as_str).collect();
        out.extend([
            self.commitlog.as_str(),
            self.saved_caches.as_str(),
            self.hints.as_str(),
        ]);
        out
    }
}

/// The system properties `bin/cassandra` passes the JVM, in their order:
/// `JVM_EXTRA_OPTS` (the end of `JVM_OPTS`), the launcher's own logdir and
/// storagedir, then the command line's `-D` options (`extra`).
pub fn launcher_options(env: &dyn Env, extra: &[String]) -> String {
    let home = env.var("CASSANDRA_HOME").unwrap_or_default();
    let storagedir = env
        .var("cassandra_storagedir")
        .unwrap_or_else(|| format!("{home}/data"));
    let mut words = vec![env.var("JVM_EXTRA_OPTS").unwrap_or_default()];
    if !home.is_empty() {
        words.push(format!("-Dcassandra.logdir={home}/logs"));
        words.push(format!("-Dcassandra.storagedir={storagedir}"));
    }
    words.extend(extra.iter().cloned());
    words.join(" ")
}

/// A directory from cassandra.yaml, or the storage dir's `sub`.
fn directory(
    doc: &Value,
    key: &'static str,
    storagedir: Option<&str>,
    sub: &str,
) -> Result<String, ConfigError> {
    match yaml_str(doc, key) {
        Some(d) => Ok(d),
        None => storagedir
            .map(|s| format!("{s}/{sub}"))
            .ok_or(ConfigError::NoStorageDir(key)),
    }
}

fn directories(doc: &Value, storagedir: Option<&str>) -> Result<Directories, ConfigError> {
    let data: Vec<String> = doc
        .get("data_file_directories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let data = if data.is_empty() {
        vec![
            storagedir
                .map(|s| format!("{s}/data"))
                .ok_or(ConfigError::NoStorageDir("data_file_directories"))?,
        ]
    } else {
        data
    };
    Ok(Directories {
        data,
        commitlog: directory(doc, "commitlog_directory", storagedir, "commitlog")?,
        saved_caches: directory(doc, "saved_caches_directory", storagedir, "saved_caches")?,
        hints: directory(doc, "hints_directory", storagedir, "hints")?,
    })
}

/// The node as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeConfig {
    /// What the ring model starts.
    pub node: NodeConfig,
    pub release: String,
    pub listen_address: String,
    pub storage_port: u16,
    pub snitch: String,
    /// The Jolokia agent's address, when `-javaagent:` is given.
    pub jolokia: Option<(String, u16)>,
    /// The agent's `policyLocation` option (a Jolokia access policy).
    pub jolokia_policy: Option<String>,
    /// How many requests the agent serves at once ([`JvmOptions::agent_threads`]).
    pub jolokia_threads: Option<usize>,
    /// `-Dcassandra.logdir` (`$CASSANDRA_HOME/logs`): where the JVM's GC
    /// log and logback's files go.
    pub log_dir: Option<String>,
    pub max_heap_size: Option<String>,
    pub heap_newsize: Option<String>,
    /// Where the files go; `node.data_dir` is the first data directory.
    pub directories: Directories,
    /// The sstables it writes: format version (`nb`) and format name
    /// (`big`, or `bti` with 5.0's `sstable: selected_format: bti`).
    pub sstable_version: &'static str,
    pub sstable_format: &'static str,
    /// `uuid_sstable_identifiers_enabled` (4.1+, false in the shipped
    /// files): new sstables get a time-UUID generation instead of a number.
    pub uuid_sstable_identifiers: bool,
    /// The encryption settings (4.1 and later; before, not checked).
    pub tls: Option<super::tls::TlsConfig>,
}

/// The environment the process got, as name -> value lookups.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Env for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name).filter(|v| !v.is_empty())
    }
}

fn yaml_str(doc: &Value, key: &str) -> Option<String> {
    match doc.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The seeds of cassandra.yaml's text, as SimpleSeedProvider reads them
/// at start and on `reloadSeeds`: addresses without ports.
pub fn seeds_of_yaml(yaml: &str) -> Result<Vec<String>, ConfigError> {
    let doc: Value =
        serde_norway::from_str(yaml).map_err(|e| ConfigError::ParseYaml(e.to_string()))?;
    Ok(seeds(&doc))
}

/// `seed_provider[0].parameters[0].seeds`, addresses without ports.
fn seeds(doc: &Value) -> Vec<String> {
    let text = doc
        .pointer("/seed_provider/0/parameters/0/seeds")
        .and_then(Value::as_str)
        .unwrap_or("127.0.0.1:7000");
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.rsplit_once(':') {
            Some((ip, port)) if port.parse::<u16>().is_ok() && !ip.contains(':') => ip.to_string(),
            _ => s.to_string(),
        })
        .collect()
}

/// `dc=` and `rack=` of cassandra-rackdc.properties.
pub fn parse_rackdc(text: &str) -> (Option<String>, Option<String>) {
    let mut dc = None;
    let mut rack = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            match k.trim() {
                "dc" => dc = Some(v.trim().to_string()),
                "rack" => rack = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    (dc, rack)
}

/// The JVM system properties and agent options of `JVM_EXTRA_OPTS`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JvmOptions {
    pub agent: Option<(String, u16)>,
    /// The agent's `policyLocation`.
    pub agent_policy: Option<String>,
    /// How many requests the agent serves at once, after its `executor`
    /// and `threadNr` options (jolokia-jvm 1.x `JolokiaServer`: `single`,
    /// the default, one thread for every request, so one long JMX call
    /// holds all the others; `fixed`, `threadNr` threads, 5 by default;
    /// `cached`, as many as needed: `None`).
    pub agent_threads: Option<usize>,
    pub properties: Vec<(String, String)>,
}

impl JvmOptions {
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        self.property(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// Parses `-javaagent:<jar>=port=P,host=H,policyLocation=URL` (the agent's
/// defaults: 8778 on the loopback, no policy) and `-Dname=value`.
pub fn parse_jvm_opts(text: &str) -> Result<JvmOptions, ConfigError> {
    let mut out = JvmOptions::default();
    for word in text.split_whitespace() {
        if let Some(agent) = word.strip_prefix("-javaagent:") {
            let options = agent.split_once('=').map(|(_, o)| o).unwrap_or("");
            let mut host = "127.0.0.1".to_string();
            let mut port = 8778;
            let (mut executor, mut threads) = ("single".to_string(), 5);
            for kv in options.split(',').filter(|s| !s.is_empty()) {
                match kv.split_once('=') {
                    Some(("port", p)) => {
                        port = p
                            .parse()
                            .map_err(|_| ConfigError::AgentPort(options.to_string()))?
                    }
                    Some(("host", h)) => host = h.to_string(),
                    Some(("policyLocation", p)) => out.agent_policy = Some(p.to_string()),
                    Some(("executor", e)) => executor = e.to_string(),
                    Some(("threadNr", n)) => threads = n.parse().unwrap_or(threads),
                    _ => {}
                }
            }
            out.agent_threads = match executor.as_str() {
                "fixed" => Some(threads.max(1)),
                "cached" => None,
                _ => Some(1),
            };
            if host == "*" {
                host = "0.0.0.0".to_string();
            }
            out.agent = Some((host, port));
        } else if let Some(prop) = word.strip_prefix("-D") {
            let (k, v) = prop.split_once('=').unwrap_or((prop, ""));
            out.properties.push((k.to_string(), v.to_string()));
        }
    }
    Ok(out)
}

/// The snitch's datacenter and rack: GossipingPropertyFileSnitch reads
/// cassandra-rackdc.properties, SimpleSnitch has datacenter1/rack1.
fn location(snitch: &str, rackdc: Option<&str>) -> (String, String) {
    let (dc, rack) = if snitch.ends_with("SimpleSnitch") {
        (None, None)
    } else {
        rackdc.map(parse_rackdc).unwrap_or_default()
    };
    (
        dc.unwrap_or_else(|| "datacenter1".to_string()),
        rack.unwrap_or_else(|| "rack1".to_string()),
    )
}

/// Reads the configuration from cassandra.yaml's text, the rackdc file's
/// text (if any), the environment and the command line's `-D` options, as
/// `bin/cassandra` orders them ([`launcher_options`]).
pub fn parse(
    yaml: &str,
    rackdc: Option<&str>,
    env: &dyn Env,
    extra: &[String],
) -> Result<FakeConfig, ConfigError> {
    let doc: Value =
        serde_norway::from_str(yaml).map_err(|e| ConfigError::ParseYaml(e.to_string()))?;
    let release = env
        .var("CASSANDRA_VERSION")
        .ok_or(ConfigError::Missing("CASSANDRA_VERSION"))?;
    let version = Version::parse(&release).ok_or_else(|| ConfigError::Version(release.clone()))?;
    let max_heap_size = env.var("MAX_HEAP_SIZE");
    let heap_newsize = env.var("HEAP_NEWSIZE");
    if max_heap_size.is_some() != heap_newsize.is_some() {
        return Err(ConfigError::HeapPair);
    }
    let jvm = parse_jvm_opts(&launcher_options(env, extra))?;
    let jolokia = jvm.agent.clone();
    // The JVM is up; Cassandra loads cassandra.yaml before it reads any
    // setting. 5.0's settings: older lines do not know them and refuse to
    // start.
    let v5 = version >= Version::V5_0;
    let mut unknown: Vec<String> = SINCE_5_0
        .iter()
        .filter(|key| !v5 && doc.get(**key).is_some())
        .map(|key| key.to_string())
        .collect();
    // 4.1's pluggable SSL contexts (CEP-9): earlier lines have no such
    // property in their EncryptionOptions (SnakeYAML's checker names a
    // nested property by its own name).
    if version < Version::V4_1
        && ["server_encryption_options", "client_encryption_options"]
            .iter()
            .any(|side| {
                doc.get(*side)
                    .and_then(|o| o.get("ssl_context_factory"))
                    .is_some()
            })
    {
        unknown.push("ssl_context_factory".to_string());
    }
    if !unknown.is_empty() {
        return Err(ConfigError::UnknownProperties(unknown));
    }
    let listen_address = yaml_str(&doc, "listen_address").unwrap_or_else(|| "localhost".into());
    let address = yaml_str(&doc, "broadcast_address").unwrap_or_else(|| listen_address.clone());
    let directories = directories(&doc, jvm.property("cassandra.storagedir"))?;
    let num_tokens = match yaml_str(&doc, "num_tokens") {
        Some(n) => n.parse().map_err(|_| ConfigError::Invalid {
            what: "num_tokens",
            value: n,
        })?,
        None => 1,
    };
    let storage_port = match yaml_str(&doc, "storage_port") {
        Some(p) => p.parse().map_err(|_| ConfigError::Invalid {
            what: "storage_port",
            value: p,
        })?,
        None => 7000,
    };
    let snitch = yaml_str(&doc, "endpoint_snitch").unwrap_or_else(|| "SimpleSnitch".into());
    let (dc, rack) = location(&snitch, rackdc);
    // Absent (or before 5.0): CASSANDRA_4, 5.0's default.
    let storage_compatibility = match yaml_str(&doc, "storage_compatibility_mode") {
        Some(mode) => match StorageCompatibility::parse(&mode) {
            Some(m) => m,
            None => {
                return Err(ConfigError::Invalid {
                    what: "storage_compatibility_mode",
                    value: mode,
                });
            }
        },
        None => StorageCompatibility::default(),
    };
    // An Integer of 4.0's `Config` (CASSANDRA-15260): absent or null, no
    // token allocator (random tokens); YAML that is no number does not
    // load. 3.11 has no such setting and no allocator without
    // `allocate_tokens_for_keyspace` (real 3.11 refuses a file that sets
    // it, as it refuses every 4.x key; the fake does not model 3.11's
    // unknown keys).
    let allocate_tokens_for_local_replication_factor =
        match yaml_str(&doc, "allocate_tokens_for_local_replication_factor") {
            Some(rf) if version >= Version::V4_0 => {
                Some(rf.parse().map_err(|_| ConfigError::Invalid {
                    what: "allocate_tokens_for_local_replication_factor",
                    value: rf,
                })?)
            }
            _ => None,
        };
    let bti = v5
        && doc
            .pointer("/sstable/selected_format")
            .and_then(Value::as_str)
            .is_some_and(|f| f == "bti");
    let node = NodeConfig {
        cluster_name: yaml_str(&doc, "cluster_name").unwrap_or_else(|| "Test Cluster".into()),
        address,
        dc,
        rack,
        seeds: seeds(&doc),
        num_tokens,
        auto_bootstrap: yaml_str(&doc, "auto_bootstrap").is_none_or(|v| v != "false"),
        replace_address: jvm
            .property("cassandra.replace_address")
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        replace_address_first_boot: jvm
            .property("cassandra.replace_address_first_boot")
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        allow_unsafe_replace: jvm.flag("cassandra.allow_unsafe_replace"),
        override_decommission: jvm.flag("cassandra.override_decommission"),
        version,
        release: Some(release.clone()),
        storage_compatibility,
        allocate_tokens_for_local_replication_factor,
        data_dir: directories.data[0].clone(),
    };
    check_auth_classes(&doc, version)?;
    let tls = if version >= Version::V4_1 {
        Some(super::tls::TlsConfig::parse(&doc, &listen_address)?)
    } else {
        None
    };
    Ok(FakeConfig {
        node,
        release,
        listen_address,
        storage_port,
        snitch,
        jolokia,
        jolokia_policy: jvm.agent_policy.clone(),
        jolokia_threads: jvm.agent_threads,
        log_dir: jvm
            .property("cassandra.logdir")
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        max_heap_size,
        heap_newsize,
        directories,
        sstable_version: version.sstable_version(storage_compatibility, bti),
        sstable_format: if bti { "bti" } else { "big" },
        uuid_sstable_identifiers: version >= Version::V4_1
            && yaml_str(&doc, "uuid_sstable_identifiers_enabled").is_some_and(|v| v == "true"),
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    const YAML: &str = "cluster_name: c1\nnum_tokens: 16\nlisten_address: 127.0.3.1\nbroadcast_address: 127.0.3.9\nendpoint_snitch: GossipingPropertyFileSnitch\ndata_file_directories: [/d/1]\nseed_provider:\n  - class_name: org.apache.cassandra.locator.SimpleSeedProvider\n    parameters:\n      - seeds: \"127.0.3.1:7000,127.0.3.2\"\n";

    /// The test file with `extra` appended, parsed as the image of
    /// `release` would have it (its `CASSANDRA_VERSION`).
    fn parse_on(release: &str, extra: &str) -> Result<FakeConfig, ConfigError> {
        parse(
            &format!("{YAML}{extra}"),
            None,
            &env(&[
                ("CASSANDRA_VERSION", release),
                ("CASSANDRA_HOME", "/opt/cassandra"),
            ]),
            &[],
        )
    }

    /// 5.0's storage_compatibility_mode and sstable format decide what it
    /// writes and speaks: under the shipped CASSANDRA_4, or without the
    /// key, `nb` (what 4.1 writes; real 5.0.3 has no `nc`) at messaging
    /// 12; 4.1 has neither setting (see the next test), and
    /// uuid_sstable_identifiers_enabled came with 4.1.
    #[test]
    fn sstable_format_and_compatibility_per_line() {
        let parse_as = |release: &str, extra: &str| parse_on(release, extra).expect("valid");
        for mode in ["storage_compatibility_mode: CASSANDRA_4\n", ""] {
            let shipped = parse_as("5.0.3", mode);
            assert_eq!(
                (shipped.sstable_version, shipped.sstable_format),
                ("nb", "big"),
                "{mode:?}"
            );
            assert_eq!(shipped.node.messaging_version(), 12, "{mode:?}");
        }
        let upgrading = parse_as("5.0.3", "storage_compatibility_mode: UPGRADING\n");
        assert_eq!(
            (
                upgrading.sstable_version,
                upgrading.node.messaging_version()
            ),
            ("oa", 13)
        );
        let bti = parse_as(
            "5.0.3",
            "storage_compatibility_mode: NONE\nsstable:\n  selected_format: bti\nuuid_sstable_identifiers_enabled: true\n",
        );
        assert_eq!((bti.sstable_version, bti.sstable_format), ("da", "bti"));
        assert!(bti.uuid_sstable_identifiers);
        assert_eq!(bti.node.messaging_version(), 13);
        let old = parse_as("4.1.8", "uuid_sstable_identifiers_enabled: true\n");
        assert_eq!(
            (old.sstable_version, old.node.messaging_version()),
            ("nb", 12)
        );
        assert!(old.uuid_sstable_identifiers);
        assert_eq!(old.node.release.as_deref(), Some("4.1.8"));
        assert!(matches!(
            parse(
                &format!("{YAML}storage_compatibility_mode: FIVE\n"),
                None,
                &env(&[
                    ("CASSANDRA_VERSION", "5.0.3"),
                    ("CASSANDRA_HOME", "/opt/cassandra"),
                ]),
                &[],
            ),
            Err(ConfigError::Invalid { .. })
        ));
    }

    /// Cassandra before 5.0 has no `storage_compatibility_mode` (nor 5.0's
    /// `sstable` block) and refuses to start on a cassandra.yaml that sets
    /// one, whatever the value (CASSANDRA_4, 4.x's own behaviour, included),
    /// as real 4.1 does; 5.0 reads both.
    #[test]
    fn before_5_0_a_file_that_sets_5_0_s_settings_is_refused() {
        let parse_as = parse_on;
        for release in ["4.1.8", "4.0.13", "3.11.19"] {
            for value in ["CASSANDRA_4", "UPGRADING", ""] {
                let err = parse_as(release, &format!("storage_compatibility_mode: {value}\n"))
                    .expect_err(release);
                assert_eq!(
                    err.to_string(),
                    "Invalid yaml. Please remove properties [storage_compatibility_mode] from your cassandra.yaml",
                    "{release} {value:?}"
                );
            }
            let both = "storage_compatibility_mode: NONE\nsstable:\n  selected_format: big\n";
            assert_eq!(
                parse_as(release, both),
                Err(ConfigError::UnknownProperties(vec![
                    "storage_compatibility_mode".to_string(),
                    "sstable".to_string()
                ])),
                "{release}"
            );
            assert!(parse_as(release, "").is_ok(), "{release} without them");
        }
        let v50 = parse_as(
            "5.0.3",
            "storage_compatibility_mode: NONE\nsstable:\n  selected_format: big\n",
        )
        .expect("5.0 reads both");
        assert_eq!(v50.sstable_version, "oa");
    }

    /// `ssl_context_factory` (pluggable SSL contexts) came with 4.1: an
    /// older node refuses a file that sets it, in either options; 4.1 and
    /// 5.0 read both sides (with `rpc_address` defaulting to
    /// `listen_address`).
    #[test]
    fn ssl_context_factories_are_read_from_4_1_on() {
        let factory = "server_encryption_options:\n  internode_encryption: all\n  ssl_context_factory:\n    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory\n";
        for release in ["4.0.13", "3.11.19"] {
            assert_eq!(
                parse_on(release, factory),
                Err(ConfigError::UnknownProperties(vec![
                    "ssl_context_factory".to_string()
                ])),
                "{release}"
            );
            assert_eq!(parse_on(release, "").expect(release).tls, None);
        }
        for release in ["4.1.8", "5.0.3"] {
            let tls = parse_on(release, factory)
                .expect(release)
                .tls
                .expect("read");
            assert_eq!(
                tls.server.internode_encryption,
                super::super::tls::Internode::All
            );
            assert_eq!(tls.server.class_name, super::super::tls::PEM_FACTORY);
            assert_eq!(tls.client.keystore.as_deref(), Some("conf/.keystore"));
            assert_eq!(
                (tls.rpc_address.as_str(), tls.native_transport_port),
                ("127.0.3.1", 9042)
            );
        }
    }

    /// `allocate_tokens_for_local_replication_factor` (4.0+) goes to the
    /// ring model as set, on 4.1 and 5.0 as the shipped files have it (3);
    /// absent or null, no allocator; a value that is no number does not
    /// load. 3.11 has no such setting (its shipped file none) and no
    /// allocator: the key is not read there.
    #[test]
    fn the_token_allocation_factor_is_read_from_4_0_on() {
        let key = "allocate_tokens_for_local_replication_factor";
        for release in ["4.0.13", "4.1.8", "5.0.3"] {
            let c = parse_on(release, &format!("{key}: 3\n")).expect(release);
            assert_eq!(c.node.allocate_tokens_for_local_replication_factor, Some(3));
            let c = parse_on(release, &format!("{key}: 1\n")).expect(release);
            assert_eq!(c.node.allocate_tokens_for_local_replication_factor, Some(1));
            for absent in ["".to_string(), format!("{key}:\n")] {
                let c = parse_on(release, &absent).expect(release);
                assert_eq!(
                    c.node.allocate_tokens_for_local_replication_factor, None,
                    "{release} {absent:?}"
                );
            }
            assert_eq!(
                parse_on(release, &format!("{key}: three\n")),
                Err(ConfigError::Invalid {
                    what: "allocate_tokens_for_local_replication_factor",
                    value: "three".into()
                })
            );
        }
        for line in ["4.1", "5.0"] {
            let fixtures = crate::harness::fixtures().expect("shared/fixtures");
            let shipped =
                std::fs::read_to_string(fixtures.join(format!("cassandra/{line}/cassandra.yaml")))
                    .expect("the shipped file");
            let c = parse(
                &shipped,
                None,
                &env(&[
                    ("CASSANDRA_VERSION", &format!("{line}.0")),
                    ("CASSANDRA_HOME", "/opt/cassandra"),
                ]),
                &[],
            )
            .expect(line);
            assert_eq!(
                c.node.allocate_tokens_for_local_replication_factor,
                Some(3),
                "{line}"
            );
        }
        for extra in ["".to_string(), format!("{key}: 3\n")] {
            let c = parse_on("3.11.19", &extra).expect("3.11");
            assert_eq!(
                c.node.allocate_tokens_for_local_replication_factor, None,
                "3.11 {extra:?}"
            );
        }
    }

    /// `authenticator`, `authorizer` and `role_manager` name Cassandra's
    /// own classes, short or fully qualified: the shipped files' defaults
    /// and what the sidecar renders for `spec.security.authentication`
    /// start on every line; another name does not, in the words of the
    /// line that refuses it.
    #[test]
    fn the_authentication_settings_name_cassandras_own_classes() {
        let rendered: String = crds::contract::auth::SETTINGS
            .iter()
            .map(|(key, value)| format!("{key}: {value}\n"))
            .collect();
        let qualified = "authenticator: org.apache.cassandra.auth.PasswordAuthenticator\nauthorizer: org.apache.cassandra.auth.AllowAllAuthorizer\nrole_manager: org.apache.cassandra.auth.CassandraRoleManager\n";
        let fixtures = crate::harness::fixtures().expect("shared/fixtures");
        for (line, release) in [("3.11", "3.11.19"), ("4.1", "4.1.8"), ("5.0", "5.0.3")] {
            parse_on(release, &rendered).expect(release);
            parse_on(release, qualified).expect(release);
            let shipped =
                std::fs::read_to_string(fixtures.join(format!("cassandra/{line}/cassandra.yaml")))
                    .expect("the shipped file");
            let vars = [
                ("CASSANDRA_VERSION", release),
                ("CASSANDRA_HOME", "/opt/cassandra"),
            ];
            parse(&shipped, None, &env(&vars), &[]).expect(line);
        }
        for release in ["3.11.19", "4.1.8"] {
            let refusal = |extra: &str| parse_on(release, extra).expect_err(release).to_string();
            assert_eq!(
                refusal("authenticator: AllowAllAuthenticatr\n"),
                "Unable to find authenticator class 'org.apache.cassandra.auth.AllowAllAuthenticatr'"
            );
            assert_eq!(
                refusal("authorizer: auth.CassandraAuthorizer\n"),
                "Unable to find authorizer class 'auth.CassandraAuthorizer'"
            );
            assert_eq!(
                refusal("role_manager: com.example.LdapRoleManager\n"),
                "Unable to find role manager class 'com.example.LdapRoleManager'"
            );
            // 5.0's mutual TLS, and 5.0's form of a class with parameters.
            assert!(refusal("authenticator: MutualTlsAuthenticator\n").contains("Unable to find"));
            assert_eq!(
                parse_on(
                    release,
                    "authenticator:\n  class_name: PasswordAuthenticator\n"
                ),
                Err(ConfigError::Invalid {
                    what: "authenticator",
                    value: "{\"class_name\":\"PasswordAuthenticator\"}".into()
                })
            );
        }
        parse_on(
            "5.0.3",
            "authenticator:\n  class_name: MutualTlsAuthenticator\n  parameters:\n    validator_class_name: org.apache.cassandra.auth.SpiffeCertificateValidator\n",
        )
        .expect("5.0's mutual TLS");
        assert_eq!(
            parse_on("5.0.3", "authorizer: CassandraAuthoriser\n")
                .expect_err("5.0")
                .to_string(),
            r#"Unable to find class CassandraAuthoriser in packages ["","org.apache.cassandra.auth"]"#
        );
        assert!(
            parse_on(
                "5.0.3",
                "role_manager:\n  class_name: AllowAllRoleManager\n"
            )
            .is_err()
        );
    }

    /// The agent's executor: one thread unless told (`single`), `fixed`
    /// with `threadNr` (5 by default), `cached` unbounded.
    #[test]
    fn the_agent_serves_as_many_requests_at_once_as_its_executor_has_threads() {
        let threads = |opts: &str| parse_jvm_opts(opts).expect(opts).agent_threads;
        assert_eq!(threads("-javaagent:/j.jar=port=8778"), Some(1));
        assert_eq!(
            threads("-javaagent:/j.jar=executor=single,threadNr=9"),
            Some(1)
        );
        assert_eq!(
            threads("-javaagent:/j.jar=executor=fixed,threadNr=5"),
            Some(5)
        );
        assert_eq!(threads("-javaagent:/j.jar=executor=fixed"), Some(5));
        assert_eq!(threads("-javaagent:/j.jar=executor=cached"), None);
    }

    #[test]
    fn reads_yaml_rackdc_and_jvm_options() {
        let c = parse(
            YAML,
            Some("# x\ndc=dc1\nrack=r2\n"),
            &env(&[
                ("CASSANDRA_VERSION", "4.1.8"),
                ("CASSANDRA_HOME", "/opt/cassandra"),
                ("MAX_HEAP_SIZE", "1G"),
                ("HEAP_NEWSIZE", "200M"),
                (
                    "JVM_EXTRA_OPTS",
                    "-javaagent:/j.jar=port=8778,host=127.0.0.1 -Dcassandra.replace_address_first_boot=127.0.3.3",
                ),
            ]),
            &[],
        )
        .expect("valid");
        assert_eq!(c.node.cluster_name, "c1");
        assert_eq!(c.node.address, "127.0.3.9");
        assert_eq!(c.node.seeds, vec!["127.0.3.1", "127.0.3.2"]);
        assert_eq!((c.node.dc.as_str(), c.node.rack.as_str()), ("dc1", "r2"));
        assert_eq!(c.node.num_tokens, 16);
        assert_eq!(c.node.data_dir, "/d/1");
        assert_eq!(c.node.version, Version::V4_1);
        assert_eq!(
            c.node.replace_address_first_boot.as_deref(),
            Some("127.0.3.3")
        );
        assert_eq!(c.jolokia, Some(("127.0.0.1".to_string(), 8778)));
    }

    #[test]
    fn refuses_what_cassandra_env_refuses() {
        let e = parse(
            YAML,
            None,
            &env(&[("CASSANDRA_VERSION", "4.1.8"), ("MAX_HEAP_SIZE", "1G")]),
            &[],
        );
        assert_eq!(e, Err(ConfigError::HeapPair));
        let e = parse(YAML, None, &env(&[]), &[]);
        assert_eq!(e, Err(ConfigError::Missing("CASSANDRA_VERSION")));
    }

    /// The image's cassandra.yaml leaves every directory unset (the 4.1
    /// default file): they follow the storage dir the launcher passes.
    const BARE: &str = "cluster_name: c1\nlisten_address: 127.0.3.1\n";

    #[test]
    fn the_launchers_storagedir_overrides_jvm_extra_opts() {
        let vars = [
            ("CASSANDRA_VERSION", "4.1.8"),
            ("CASSANDRA_HOME", "/opt/cassandra"),
            ("JVM_EXTRA_OPTS", "-Dcassandra.storagedir=/elsewhere"),
        ];
        let c = parse(BARE, None, &env(&vars), &[]).expect("valid");
        assert_eq!(
            c.directories,
            Directories {
                data: vec!["/opt/cassandra/data/data".into()],
                commitlog: "/opt/cassandra/data/commitlog".into(),
                saved_caches: "/opt/cassandra/data/saved_caches".into(),
                hints: "/opt/cassandra/data/hints".into(),
            }
        );
        assert_eq!(c.node.data_dir, "/opt/cassandra/data/data");
        // cassandra.in.sh honours $cassandra_storagedir.
        let mut with_var = vars.to_vec();
        with_var.push(("cassandra_storagedir", "/var/lib/x"));
        let c = parse(BARE, None, &env(&with_var), &[]).expect("valid");
        assert_eq!(c.directories.hints, "/var/lib/x/hints");
        // A -D of the command line comes after the launcher's own.
        let c = parse(
            BARE,
            None,
            &env(&vars),
            &["-Dcassandra.storagedir=/var/lib/cassandra".to_string()],
        )
        .expect("valid");
        assert_eq!(
            c.directories.all(),
            vec![
                "/var/lib/cassandra/data",
                "/var/lib/cassandra/commitlog",
                "/var/lib/cassandra/saved_caches",
                "/var/lib/cassandra/hints",
            ]
        );
    }

    #[test]
    fn directories_set_in_the_yaml_win() {
        let yaml = format!(
            "{BARE}data_file_directories: [/d/1, /d/2]\ncommitlog_directory: /c\nhints_directory: /h\n"
        );
        let vars = [
            ("CASSANDRA_VERSION", "3.11.4"),
            ("CASSANDRA_HOME", "/opt/cassandra"),
        ];
        let c = parse(&yaml, None, &env(&vars), &[]).expect("valid");
        assert_eq!(
            c.directories.all(),
            vec![
                "/d/1",
                "/d/2",
                "/c",
                "/opt/cassandra/data/saved_caches",
                "/h"
            ]
        );
        assert_eq!(c.node.data_dir, "/d/1");
    }

    #[test]
    fn no_directory_and_no_storagedir_is_refused() {
        let e = parse(BARE, None, &env(&[("CASSANDRA_VERSION", "5.0.2")]), &[]);
        assert_eq!(e, Err(ConfigError::NoStorageDir("data_file_directories")));
        assert_eq!(
            e.unwrap_err().to_string(),
            "data_file_directories is missing and -Dcassandra.storagedir is not set"
        );
    }
}
