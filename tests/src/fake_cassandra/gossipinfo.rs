//! The FailureDetector's gossip dump (`AllEndpointStates`,
//! `AllEndpointStatesWithPort`, `getEndpointState`; what `nodetool
//! gossipinfo` prints) of one node's view, in the form of
//! `FailureDetector.appendEndpointState` (3.11, 4.1, 5.0, JMX-FACTS §4):
//!
//! ```text
//! /10.0.0.5
//!   generation:1700000000
//!   heartbeat:96
//!   STATUS:21:NORMAL,-9012334759434585722
//!   ...
//!   TOKENS:19:<hidden>
//! ```
//!
//! one key line per endpoint (`InetAddress.toString()`: `/10.0.0.5`; with
//! port `/10.0.0.5:7000`; with port and resolved name `10.0.0.5:7000`, as no
//! reverse name exists), then `generation`, `heartbeat`, each application
//! state but `TOKENS` as `NAME:version:value` in `ApplicationState` order
//! (an `EnumMap`), then `TOKENS:version:<hidden>` or `TOKENS: not present`.
//! Pure; also the parser tests and contract checks read it back with.

use super::view::{EndpointView, NodeView};
use crate::ring::{GossipEndpoint, Version};

/// The native transport port the nodes publish (`native_transport_port`).
const NATIVE_PORT: u16 = 9042;

/// The schema version every fake node agrees on (`SchemaVersion`).
pub const SCHEMA_VERSION: &str = "59adb24e-f3cd-3e02-97f0-5b395827453f";

/// How the endpoint keys are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyForm {
    /// `/10.0.0.5` (`AllEndpointStates`).
    Address,
    /// `/10.0.0.5:7000` (`AllEndpointStatesWithPort`).
    WithPort,
    /// `10.0.0.5:7000` (`AllEndpointStatesWithPortAndResolveIp`:
    /// `getHostName` finds no name and gives the address back).
    WithPortResolved,
}

/// The application states `e` gossips, in `ApplicationState` order:
/// (name, version, value). Fixed versions for the states set at startup
/// ([`crate::ring::STARTUP_VERSIONS`]).
fn application_states(
    line: Version,
    storage_port: u16,
    e: &EndpointView,
) -> Vec<(&'static str, i64, String)> {
    let g: &GossipEndpoint = &e.gossip;
    let v4 = line >= Version::V4_0;
    let addr = &e.address;
    let mut out = Vec::new();
    // STATUS: 3.11 publishes only it; 4.x sets STATUS_WITH_PORT then STATUS.
    let status = if v4 {
        g.status_version + 1
    } else {
        g.status_version
    };
    out.push(("STATUS", status, g.status.value(None)));
    out.push(("SCHEMA", 14, SCHEMA_VERSION.to_string()));
    out.push(("DC", 9, e.dc.clone()));
    out.push(("RACK", 10, e.rack.clone()));
    out.push(("RELEASE_VERSION", 5, g.release.clone()));
    out.push(("INTERNAL_IP", 7, addr.clone()));
    out.push(("RPC_ADDRESS", 3, addr.clone()));
    out.push(("NET_VERSION", 1, g.messaging_version.to_string()));
    out.push(("HOST_ID", 2, e.host_id.clone()));
    out.push(("RPC_READY", 22, g.rpc_ready.to_string()));
    if v4 {
        out.push((
            "INTERNAL_ADDRESS_AND_PORT",
            8,
            format!("{addr}:{storage_port}"),
        ));
        out.push((
            "NATIVE_ADDRESS_AND_PORT",
            4,
            format!("{addr}:{NATIVE_PORT}"),
        ));
        out.push((
            "STATUS_WITH_PORT",
            g.status_version,
            g.status.value(Some(storage_port)),
        ));
    }
    if line >= Version::V4_1 {
        // `SSTABLE_VERSIONS`: the format and version the member writes.
        let release = Version::parse(&g.release).unwrap_or(line);
        let compatibility = if g.messaging_version <= 12 {
            crate::ring::StorageCompatibility::Cassandra4
        } else {
            crate::ring::StorageCompatibility::None
        };
        out.push((
            "SSTABLE_VERSIONS",
            6,
            format!("big-{}", release.sstable_version(compatibility, false)),
        ));
    }
    out
}

fn key(form: KeyForm, address: &str, storage_port: u16) -> String {
    match form {
        KeyForm::Address => format!("/{address}"),
        KeyForm::WithPort => format!("/{address}:{storage_port}"),
        KeyForm::WithPortResolved => format!("{address}:{storage_port}"),
    }
}

/// `appendEndpointState`: the lines of one endpoint after its key.
pub fn endpoint_state(line: Version, storage_port: u16, e: &EndpointView) -> String {
    let mut out = String::new();
    out.push_str(&format!("  generation:{}\n", e.gossip.generation));
    out.push_str(&format!("  heartbeat:{}\n", e.gossip.heartbeat));
    for (name, version, value) in application_states(line, storage_port, e) {
        out.push_str(&format!("  {name}:{version}:{value}\n"));
    }
    if e.tokens.is_empty() {
        out.push_str("  TOKENS: not present\n");
    } else {
        out.push_str(&format!(
            "  TOKENS:{}:<hidden>\n",
            e.gossip.status_version - 1
        ));
    }
    out
}

/// `getAllEndpointStates(withPort, resolveIp)` of `view`, endpoints in
/// address order (the real map is a hash map: no order to rely on).
pub fn all_endpoint_states(
    line: Version,
    storage_port: u16,
    view: &NodeView,
    form: KeyForm,
) -> String {
    let mut endpoints: Vec<&EndpointView> = view.endpoints.iter().collect();
    endpoints.sort_by(|a, b| a.address.cmp(&b.address));
    let mut out = String::new();
    for e in endpoints {
        out.push_str(&key(form, &e.address, storage_port));
        out.push('\n');
        out.push_str(&endpoint_state(line, storage_port, e));
    }
    out
}

/// One endpoint of a parsed dump.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedEndpoint {
    /// The key line as written (`/10.0.0.5`, `/10.0.0.5:7000`).
    pub key: String,
    pub generation: i64,
    pub heartbeat: i64,
    /// (name, version, value) of each application state but `TOKENS`.
    pub states: Vec<(String, i64, String)>,
    /// The version of `TOKENS`, `None` for `TOKENS: not present`.
    pub tokens_version: Option<i64>,
}

impl ParsedEndpoint {
    /// The value of the application state `name`.
    pub fn state(&self, name: &str) -> Option<&str> {
        self.states
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v.as_str())
    }

    /// The address of the key, without the slash and the port.
    pub fn address(&self) -> &str {
        let key = self.key.trim_start_matches('/');
        match key.rsplit_once(':') {
            Some((ip, port)) if port.parse::<u16>().is_ok() && !ip.contains(':') => ip,
            _ => key,
        }
    }
}

/// Reads an `AllEndpointStates` dump back: a key line starts without
/// indentation, the rest of its endpoint's lines with two spaces.
pub fn parse_all_endpoint_states(text: &str) -> Result<Vec<ParsedEndpoint>, String> {
    let mut out: Vec<ParsedEndpoint> = Vec::new();
    for line in text.lines() {
        let Some(body) = line.strip_prefix("  ") else {
            out.push(ParsedEndpoint {
                key: line.to_string(),
                ..Default::default()
            });
            continue;
        };
        let current = out
            .last_mut()
            .ok_or_else(|| format!("a state line before any endpoint: {line:?}"))?;
        let number = |v: &str| {
            v.parse::<i64>()
                .map_err(|_| format!("not a number in {line:?}"))
        };
        if let Some(v) = body.strip_prefix("generation:") {
            current.generation = number(v)?;
        } else if let Some(v) = body.strip_prefix("heartbeat:") {
            current.heartbeat = number(v)?;
        } else if body == "TOKENS: not present" {
            current.tokens_version = None;
        } else if let Some(rest) = body.strip_prefix("TOKENS:") {
            let (version, hidden) = rest
                .split_once(':')
                .ok_or_else(|| format!("no TOKENS version in {line:?}"))?;
            if hidden != "<hidden>" {
                return Err(format!("TOKENS shown in {line:?}"));
            }
            current.tokens_version = Some(number(version)?);
        } else {
            let (name, rest) = body
                .split_once(':')
                .ok_or_else(|| format!("not NAME:version:value: {line:?}"))?;
            let (version, value) = rest
                .split_once(':')
                .ok_or_else(|| format!("no version in {line:?}"))?;
            current
                .states
                .push((name.to_string(), number(version)?, value.to_string()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_cassandra::view::node_view;
    use crate::ring::{NodeConfig, Options, Ring};

    fn ring_of_three() -> (Ring, Vec<String>) {
        let mut ring = Ring::new(Options::default());
        let seeds = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
        let ids = (1..=3)
            .map(|i| {
                let ip = format!("10.0.0.{i}");
                let started = ring
                    .start(&NodeConfig::new(
                        "c",
                        &ip,
                        "dc1",
                        "r1",
                        &seeds,
                        &format!("/d{i}"),
                    ))
                    .expect("starts");
                started.host_id
            })
            .collect();
        ring.advance(5_000);
        (ring, ids)
    }

    #[test]
    fn the_dump_reads_back_per_line() {
        let (mut ring, ids) = ring_of_three();
        ring.stop(&ids[2]).expect("stops");
        let view = node_view(&ring, &ids[0]).expect("a view");
        let text = all_endpoint_states(Version::V4_1, 7000, &view, KeyForm::WithPort);
        let parsed = parse_all_endpoint_states(&text).expect("parses");
        let keys: Vec<&str> = parsed.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["/10.0.0.1:7000", "/10.0.0.2:7000", "/10.0.0.3:7000"]);
        let me = &parsed[0];
        assert_eq!(me.generation, ring.generation(&ids[0]).expect("gen"));
        assert_eq!(me.state("HOST_ID"), Some(ids[0].as_str()));
        assert_eq!(me.state("RELEASE_VERSION"), Some("4.1"));
        assert_eq!(me.state("NET_VERSION"), Some("12"));
        assert_eq!(me.state("INTERNAL_ADDRESS_AND_PORT"), Some("10.0.0.1:7000"));
        assert_eq!(me.state("SSTABLE_VERSIONS"), Some("big-nb"));
        let status = me.state("STATUS").expect("a status");
        assert!(status.starts_with("NORMAL,"), "{status}");
        assert_eq!(me.state("STATUS_WITH_PORT"), Some(status));
        assert_eq!(me.tokens_version, Some(INITIAL_TOKENS));
        // Five seconds of heartbeats.
        assert_eq!(me.heartbeat, crate::ring::STARTUP_VERSIONS + 20);
        // The stopped one announced its shutdown.
        let stopped = &parsed[2];
        assert_eq!(stopped.state("STATUS"), Some("shutdown,true"));
        assert_eq!(stopped.heartbeat, crate::ring::HEARTBEAT_SHUTDOWN);
        // `getEndpointState` is the same lines without the key.
        let one = endpoint_state(Version::V4_1, 7000, view.endpoint("10.0.0.2").expect("b"));
        assert!(text.contains(&format!("/10.0.0.2:7000\n{one}")), "{text}");

        // 3.11: no port, no *_AND_PORT or STATUS_WITH_PORT states.
        let text = all_endpoint_states(Version::V3_11, 7000, &view, KeyForm::Address);
        let parsed = parse_all_endpoint_states(&text).expect("parses");
        assert_eq!(parsed[1].key, "/10.0.0.2");
        assert_eq!(parsed[1].address(), "10.0.0.2");
        assert!(parsed[1].state("STATUS_WITH_PORT").is_none());
        assert!(parsed[1].state("INTERNAL_IP").is_some());
        let names: Vec<&str> = parsed[1].states.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names[..3], ["STATUS", "SCHEMA", "DC"]);
        assert!(!text.contains("TOKENS: not present"));
    }

    const INITIAL_TOKENS: i64 = crate::ring::INITIAL_STATUS_VERSION - 1;

    #[test]
    fn malformed_dumps_are_refused() {
        assert!(parse_all_endpoint_states("  generation:1\n").is_err());
        assert!(parse_all_endpoint_states("/10.0.0.1\n  heartbeat:x\n").is_err());
        assert!(parse_all_endpoint_states("/10.0.0.1\n  TOKENS:3:-1,2\n").is_err());
        let parsed =
            parse_all_endpoint_states("/10.0.0.1\n  TOKENS: not present\n").expect("parses");
        assert_eq!(parsed[0].tokens_version, None);
    }
}
