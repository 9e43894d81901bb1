//! What the fake node reads at startup, as Cassandra and its
//! `cassandra-env.sh` do: cassandra.yaml and cassandra-rackdc.properties
//! from `CASSANDRA_CONF`, the heap and `JVM_EXTRA_OPTS` from the
//! environment, the version from `CASSANDRA_VERSION` (the image tag). Pure:
//! file contents and variables in, a [`FakeConfig`] out.

use serde_json::Value;

use crate::ring::{NodeConfig, Version};

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
    pub max_heap_size: Option<String>,
    pub heap_newsize: Option<String>,
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

/// Parses `-javaagent:<jar>=port=P,host=H` (the agent's defaults: 8778 on
/// the loopback) and `-Dname=value`.
pub fn parse_jvm_opts(text: &str) -> Result<JvmOptions, ConfigError> {
    let mut out = JvmOptions::default();
    for word in text.split_whitespace() {
        if let Some(agent) = word.strip_prefix("-javaagent:") {
            let options = agent.split_once('=').map(|(_, o)| o).unwrap_or("");
            let mut host = "127.0.0.1".to_string();
            let mut port = 8778;
            for kv in options.split(',').filter(|s| !s.is_empty()) {
                match kv.split_once('=') {
                    Some(("port", p)) => {
                        port = p
                            .parse()
                            .map_err(|_| ConfigError::AgentPort(options.to_string()))?
                    }
                    Some(("host", h)) => host = h.to_string(),
                    _ => {}
                }
            }
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
/// text (if any) and the environment.
pub fn parse(yaml: &str, rackdc: Option<&str>, env: &dyn Env) -> Result<FakeConfig, ConfigError> {
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
    let jvm = parse_jvm_opts(&env.var("JVM_EXTRA_OPTS").unwrap_or_default())?;
    let jolokia = jvm.agent.clone();
    let listen_address = yaml_str(&doc, "listen_address").unwrap_or_else(|| "localhost".into());
    let address = yaml_str(&doc, "broadcast_address").unwrap_or_else(|| listen_address.clone());
    let data_dir = match env.var("CASSANDRA_DATA_DIR") {
        Some(d) => d,
        None => match doc
            .pointer("/data_file_directories/0")
            .and_then(Value::as_str)
        {
            Some(d) => d.to_string(),
            None => format!(
                "{}/data/data",
                env.var("CASSANDRA_HOME")
                    .ok_or(ConfigError::Missing("data_file_directories"))?
            ),
        },
    };
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
        data_dir,
    };
    Ok(FakeConfig {
        node,
        release,
        listen_address,
        storage_port,
        snitch,
        jolokia,
        max_heap_size,
        heap_newsize,
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

    #[test]
    fn reads_yaml_rackdc_and_jvm_options() {
        let c = parse(
            YAML,
            Some("# x\ndc=dc1\nrack=r2\n"),
            &env(&[
                ("CASSANDRA_VERSION", "4.1.8"),
                ("MAX_HEAP_SIZE", "1G"),
                ("HEAP_NEWSIZE", "200M"),
                (
                    "JVM_EXTRA_OPTS",
                    "-javaagent:/j.jar=port=8778,host=127.0.0.1 -Dcassandra.replace_address_first_boot=127.0.3.3",
                ),
            ]),
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
        );
        assert_eq!(e, Err(ConfigError::HeapPair));
        let e = parse(YAML, None, &env(&[]));
        assert_eq!(e, Err(ConfigError::Missing("CASSANDRA_VERSION")));
    }
}
