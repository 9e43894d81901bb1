//! The contract between the controller and the sidecar (DESIGN.md sections
//! 4 to 6): the records of intent on member Services, how each side reads
//! them, the paths and ports both sides assume, and the seed rule. The
//! controller and the sidecar never call each other; everything they agree
//! on is here, in one place, as Rook kept it in one `constants` package;
//! the member Pod's command lines and environment are in [`pod`].
//! Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::v1alpha1::ClusterMode;

pub mod auth;
pub mod maintenance;
pub mod pod;
pub mod tls;

// ---------------------------------------------------------------------------
// Records of intent on a member Service
// ---------------------------------------------------------------------------

/// Label, present on the member Service of a seed (written by the controller).
pub const SEED: &str = "cassandra.rook.io/seed";
/// Label, record of intent: `"false"` (controller) asks the member to
/// decommission, `"true"` (sidecar) says the decommission finished.
pub const DECOMMISSIONED: &str = "cassandra.rook.io/decommissioned";
/// Label, record of intent: the member's disk was lost; start it with
/// `replace_address_first_boot` set to the value (its own ClusterIP).
pub const REPLACE: &str = "cassandra.rook.io/replace";
/// Annotation, written by the sidecar before it calls decommission, with a
/// patch guarded by the member Service's resourceVersion: the sidecar's claim
/// that the decommission is under way. The controller withdraws a request
/// (removes [`DECOMMISSIONED`]) only while this is absent, or Cassandra
/// refused ([`DECOMMISSION_REFUSED`]), with a patch guarded the same way, so
/// that exactly one of the two wins a race.
pub const DECOMMISSION_STARTED: &str = "cassandra.rook.io/decommission-started";
/// Annotation, written by the sidecar: Cassandra refused the requested
/// decommission, or it failed; the value is Cassandra's reason. Cleared by
/// the sidecar when the request is withdrawn or a new attempt starts.
pub const DECOMMISSION_REFUSED: &str = "cassandra.rook.io/decommission-refused";
/// Annotation, written by the sidecar: it does not start the database
/// because the Node cannot give it what it needs to start (ScyllaDB: the
/// free Linux AIO events, `fs.aio-max-nr`); the value says what is short
/// and the fix. The sidecar looks again periodically and removes it when
/// it starts the database.
pub const START_REFUSED: &str = "cassandra.rook.io/start-refused";
/// Annotation, written by the sidecar of a member replaced at its own
/// address: where the full repair of its ranges stands (JSON: `state`
/// `pending`, `running`, `retrying`, `done` or `unsupported`, the keyspace
/// under repair, the last error, the keyspaces repaired, when).
pub const REPAIR_AFTER_REPLACE: &str = "cassandra.rook.io/repair-after-replace";
/// Annotation, written by the sidecar: the member found an empty data
/// directory while the ring still knows its address with a host ID, so it
/// cannot start without replacing itself; the value is what it saw
/// (Cassandra's refusal). The controller answers with [`REPLACE`]; the
/// sidecar removes the request once the member is NORMAL.
pub const REPLACE_REQUESTED: &str = "cassandra.rook.io/replace-requested";

/// Annotation, written by the controller in the same guarded write that
/// sets [`DECOMMISSIONED`] to `"false"`: a [`DecommissionRequest`] as JSON,
/// naming the member and when the request was made. A `"true"` counts as a
/// confirmed decommission only when it answers this request (a member's own
/// token may never write it: the admission policy refuses).
pub const DECOMMISSION_REQUEST: &str = "cassandra.rook.io/decommission-request";
/// Annotation, written by the sidecar in the same write that sets
/// [`DECOMMISSIONED`] to `"true"`: a [`DecommissionConfirmation`] as JSON,
/// naming the request it answers and the host ID of the node that left.
pub const DECOMMISSION_CONFIRMATION: &str = "cassandra.rook.io/decommission-confirmation";
/// Annotation, written by the sidecar in scylla mode once its node is
/// NORMAL: the node's host ID. ScyllaDB replaces a lost node by host ID
/// (`replace_node_first_boot`; `replace_address_first_boot` is deprecated),
/// and the member Service outlives the lost node, so the replacement's
/// sidecar reads it here (the REST API of the other members is bound to
/// their loopback).
pub const HOST_ID: &str = "cassandra.rook.io/host-id";

/// Annotation, written by the sidecar while its node is NORMAL, each time
/// what the node's gossip says changes: a [`GossipView`] as JSON. A roll
/// takes the next member down only when every member's view shows every
/// member up under the generation that member runs ([`ring_settled`]);
/// readiness alone says nothing of how the others see a member.
pub const GOSSIP: &str = "cassandra.rook.io/gossip";
/// Annotation, written by the controller on another member's Service while
/// it waits for the ring to agree that a member left: the time it asked
/// (RFC 3339). The sidecar records its ring again ([`GOSSIP`]), changed
/// or not, once its record is older than that: a sidecar records only
/// what changes, and a ring that had not counted the leaving member yet
/// (it joined and left between two reads) would never record again.
pub const RING_RECORD_REQUESTED: &str = "cassandra.rook.io/ring-record-requested";
/// Annotation, written by the controller with [`RESTARTING`]: the gossip
/// generation the member ran when a roll took it down. The member is back
/// when its record shows a newer one.
pub const RESTARTED_FROM_GENERATION: &str = "cassandra.rook.io/restarted-from-generation";
/// Annotation, written by the controller: a roll restarts the member; the
/// value is when it was recorded (RFC 3339). The roll's only state, so
/// that a controller restarted mid-roll resumes it.
pub const RESTARTING: &str = "cassandra.rook.io/restarting";

/// [`DECOMMISSIONED`] value: the controller asks for a decommission.
pub const DECOMMISSION_REQUESTED: &str = "false";
/// [`DECOMMISSIONED`] value: the sidecar confirmed the member left the ring.
pub const DECOMMISSION_DONE: &str = "true";

/// The decommission record of a member Service, as both sides read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decommission {
    /// No label: the member serves.
    Serve,
    /// `"false"`: decommission this member.
    Requested,
    /// `"true"`: the sidecar confirmed that the member left the ring
    /// (operation mode DECOMMISSIONED read back).
    Confirmed,
    /// Any other value. Neither side acts on it: decommissioning is
    /// irreversible, and a PVC is deleted only after a confirmation.
    Unknown,
}

impl Decommission {
    /// The record an object carries (a member Service): the one reader of
    /// [`DECOMMISSIONED`] off an object, for both sides.
    pub fn of(meta: &ObjectMeta) -> Decommission {
        Decommission::from_label(Decommission::label_of(meta))
    }

    /// The label's value as an object carries it, for messages about a
    /// value neither side acts on ([`Decommission::Unknown`]).
    pub fn label_of(meta: &ObjectMeta) -> Option<&str> {
        meta.labels
            .as_ref()?
            .get(DECOMMISSIONED)
            .map(String::as_str)
    }

    /// From the label's value (`None` when the label is absent).
    pub fn from_label(value: Option<&str>) -> Decommission {
        match value {
            None => Decommission::Serve,
            Some(DECOMMISSION_REQUESTED) => Decommission::Requested,
            Some(DECOMMISSION_DONE) => Decommission::Confirmed,
            Some(_) => Decommission::Unknown,
        }
    }

    /// The label's value for this record (`None`: no label).
    pub fn label_value(self) -> Option<&'static str> {
        match self {
            Decommission::Requested => Some(DECOMMISSION_REQUESTED),
            Decommission::Confirmed => Some(DECOMMISSION_DONE),
            Decommission::Serve | Decommission::Unknown => None,
        }
    }
}

/// The controller's request that a member leave the ring
/// ([`DECOMMISSION_REQUEST`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecommissionRequest {
    /// Names this request; a confirmation quotes it.
    pub id: String,
    /// The UID of the member's Pod when the request was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The host ID of the member's node, when its gossip record named one:
    /// only a confirmation of this node answers the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// When the request was made (RFC 3339).
    pub requested_at: String,
}

/// The sidecar's confirmation that its node left the ring
/// ([`DECOMMISSION_CONFIRMATION`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecommissionConfirmation {
    /// The [`DecommissionRequest::id`] it answers.
    pub request: String,
    /// The host ID of the node that left, when the sidecar knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// When the sidecar confirmed (RFC 3339).
    pub confirmed_at: String,
    /// Set when the controller recorded it instead of the sidecar: the
    /// member lost its disk while leaving, and the ring shows it removed
    /// (`removenode`) — the only way it can leave without its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<bool>,
}

impl DecommissionRequest {
    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a DecommissionRequest serializes")
    }

    /// From the annotation's value; `None` when it is not one (an empty id
    /// or an unreadable time is no request).
    pub fn from_annotation(value: &str) -> Option<DecommissionRequest> {
        let request: DecommissionRequest = serde_json::from_str(value).ok()?;
        (!request.id.is_empty() && parse_time(&request.requested_at).is_some()).then_some(request)
    }
}

impl DecommissionConfirmation {
    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a DecommissionConfirmation serializes")
    }

    /// From the annotation's value; `None` when it is not one.
    pub fn from_annotation(value: &str) -> Option<DecommissionConfirmation> {
        let confirmation: DecommissionConfirmation = serde_json::from_str(value).ok()?;
        (!confirmation.request.is_empty() && parse_time(&confirmation.confirmed_at).is_some())
            .then_some(confirmation)
    }
}

/// When a gossip record says it was seen: now, or just after the time the
/// controller asked for a newer record ([`RING_RECORD_REQUESTED`]) if this
/// clock is behind the controller's. The view was read after the ask
/// either way; a clock behind would otherwise never write a record the
/// controller takes as newer, and would rewrite it at every read.
pub fn record_time(
    now: k8s_openapi::jiff::Timestamp,
    requested: Option<&str>,
) -> k8s_openapi::jiff::Timestamp {
    let after_ask = requested.and_then(parse_time).and_then(|at| {
        at.checked_add(k8s_openapi::jiff::SignedDuration::from_millis(1))
            .ok()
    });
    match after_ask {
        Some(after) if after > now => after,
        _ => now,
    }
}

/// An RFC 3339 time of a record, as both sides write it.
pub fn parse_time(text: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    text.parse().ok()
}

/// The replace record of a member Service: the address whose tokens the
/// member takes over (its own ClusterIP). A value that is not an IP address
/// is no intent at all: Cassandra would refuse it, and the sidecar must not
/// start a node with it.
pub fn replace_address(value: Option<&str>) -> Option<IpAddr> {
    value?.trim().parse().ok()
}

/// What a node's gossip says, as its sidecar records it ([`GOSSIP`]).
/// Generations are gossip's: a process's start in seconds since the epoch,
/// greater at each start of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GossipView {
    /// The node's own generation.
    pub generation: i64,
    /// The endpoints it sees up (itself included), by broadcast address,
    /// with the generation it knows each one by.
    pub up: BTreeMap<String, i64>,
    /// The endpoints in its gossip it sees down (members gone for good
    /// stay there for days: only members' addresses count).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub down: BTreeSet<String>,
    /// The node's own host ID, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// The token owners in the node's token metadata, by broadcast address,
    /// with their host IDs. `None` (a sidecar that does not read them) says
    /// nothing of who owns tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<BTreeMap<String, String>>,
    /// When the sidecar recorded this view (RFC 3339): renewed only when
    /// the rest of the view changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

impl GossipView {
    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a GossipView serializes")
    }

    /// From the annotation's value; `None` when it is not one.
    pub fn from_annotation(value: &str) -> Option<GossipView> {
        serde_json::from_str(value).ok()
    }

    /// Whether two views say the same, whenever each was recorded.
    pub fn same_as(&self, other: &GossipView) -> bool {
        GossipView {
            at: None,
            ..self.clone()
        } == GossipView {
            at: None,
            ..other.clone()
        }
    }

    /// Whether this view, recorded as `recorded`, must be written: it says
    /// something else, or the record is older than what the controller
    /// asked for (`requested`, [`RING_RECORD_REQUESTED`]).
    pub fn to_record(&self, recorded: Option<&GossipView>, requested: Option<&str>) -> bool {
        let Some(recorded) = recorded else {
            return true;
        };
        if !recorded.same_as(self) {
            return true;
        }
        match (
            requested.and_then(parse_time),
            recorded.at.as_deref().and_then(parse_time),
        ) {
            (Some(requested), Some(at)) => at <= requested,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Whether the node counts `address` or `host_id` among the token
    /// owners; `None` when the view does not say who owns tokens.
    pub fn counts_owner(&self, address: Option<&str>, host_id: Option<&str>) -> Option<bool> {
        let owners = self.owners.as_ref()?;
        Some(
            address.is_some_and(|a| owners.contains_key(a))
                || host_id.is_some_and(|h| owners.values().any(|v| v == h)),
        )
    }
}

/// A member as [`ring_settled`] judges it: its name (for messages), its
/// broadcast address (its member Service's ClusterIP) and its record.
#[derive(Debug, Clone, Copy)]
pub struct GossipMember<'a> {
    pub name: &'a str,
    pub address: &'a str,
    pub view: Option<&'a GossipView>,
}

/// Why the ring is not settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsettled {
    /// A member has not recorded its view yet (just started, or its sidecar
    /// has not seen it NORMAL).
    NoRecord { member: String },
    /// `observer` does not see `peer` up, or knows it by an older generation
    /// than the one `peer` runs (gossip has not told it of the restart).
    NotSeenUp { observer: String, peer: String },
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsettled::NoRecord { member } => {
                write!(f, "{member} has not recorded its gossip view yet")
            }
            Unsettled::NotSeenUp { observer, peer } => {
                write!(f, "{observer} does not see {peer} up yet")
            }
        }
    }
}

/// Whether every member sees every member up under the generation that
/// member runs. Members without a record (a sidecar that does not write
/// one) are not asked, but must be seen by the others; a member whose
/// record is required (`required`, e.g. the one a roll restarted) must
/// have one.
pub fn ring_settled(members: &[GossipMember<'_>], required: &[&str]) -> Result<(), Unsettled> {
    for member in members {
        if member.view.is_none() && required.contains(&member.name) {
            return Err(Unsettled::NoRecord {
                member: member.name.to_string(),
            });
        }
    }
    for observer in members {
        let Some(view) = observer.view else {
            continue;
        };
        for peer in members {
            let seen = view.up.get(peer.address).copied();
            let runs = peer.view.map(|v| v.generation);
            let up = match (seen, runs) {
                (None, _) => false,
                (Some(seen), Some(runs)) => seen >= runs,
                (Some(_), None) => true,
            };
            if !up {
                return Err(Unsettled::NotSeenUp {
                    observer: observer.name.to_string(),
                    peer: peer.name.to_string(),
                });
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Paths and ports
// ---------------------------------------------------------------------------

/// Where the init container installs the binary, in both containers.
pub const SHARED_DIR: &str = "/mnt/shared";
/// The directory, under the install target ([`SHARED_DIR`]), that the init
/// container copies the image's plugins (the Jolokia agent) into.
pub const PLUGINS: &str = "plugins";
/// Where the sidecar renders the member's configuration, on the shared
/// volume: `nodetool` (the preStop hook) looks there for `scylla.yaml` to
/// tell the database.
pub const RENDERED_CONFIG_DIR: &str = "/mnt/shared/conf";
/// Where a rack's ConfigMap of configuration overrides is mounted.
pub const OVERRIDES_DIR: &str = "/mnt/overrides";
/// Where a rack's JMX exporter ConfigMap is mounted.
pub const JMX_EXPORTER_DIR: &str = "/mnt/jmx-exporter";
/// The sidecar's HTTP port (`/healthz`, `/readyz`, `/metrics`).
pub const SIDECAR_PORT: u16 = 8080;
/// The Jolokia agent's port, bound to 127.0.0.1 only.
pub const JOLOKIA_PORT: u16 = 8778;
/// ScyllaDB's REST API port, bound to 127.0.0.1 only (`--api-address`).
pub const SCYLLA_API_PORT: u16 = 10000;

/// The CQL port (`native_transport_port`), where clients and the
/// controller's own CQL session connect.
pub const CQL_PORT: u16 = 9042;

/// The ports members reach each other on (gossip, streaming; `storage_port`
/// and `ssl_storage_port`): on member Services, not on the client Service.
pub const INTERNODE_PORTS: [u16; 2] = [7000, 7001];

/// The database ports a member serves others on, by name (names of at most
/// 15 characters: its member Service's ports and the container's ports),
/// as each database uses them. What nothing outside the Pod can use is left
/// out: JMX (7199) listens on the Pod's loopback only (`LOCAL_JMX=yes` in
/// cassandra-env.sh; the sidecar reaches the node through Jolokia on
/// 127.0.0.1), so a Service port for it forwards to nothing.
///
/// - Cassandra: internode 7000 and 7001 (TLS), CQL 9042 and 9142 (TLS, when
///   client encryption offers a port of its own), and Thrift 9160 only
///   before 4.0, which removed Thrift (4.1 and 5.0 refuse a cassandra.yaml
///   that sets `rpc_port` or `start_rpc`). 3.11 ships it off
///   (`start_rpc: false`), but an overrides ConfigMap may turn it on, and
///   its clients then connect to `broadcast_rpc_address`, the member
///   Service's ClusterIP, which forwards only the ports it lists: 3.x keeps
///   the port. A tag that names no version (`latest`) is taken as current.
/// - ScyllaDB: the same internode and CQL ports and its shard-aware CQL
///   ports 19042 and 19142 (TLS) (`native_shard_aware_transport_port`,
///   `..._ssl`): its drivers open one connection per shard to these, which
///   the ClusterIP must forward or every shard-aware driver falls back to
///   one shard's connection. No Thrift (ScyllaDB 6 has none) and no JMX
///   (the sidecar runs the `scylla` binary itself, not the image's
///   supervisord that would start the `scylla-jmx` proxy).
pub fn member_ports(mode: ClusterMode, version: &str) -> Vec<(&'static str, u16)> {
    let mut ports = vec![
        ("intra-node", INTERNODE_PORTS[0]),
        ("tls-intra-node", INTERNODE_PORTS[1]),
        ("cql", CQL_PORT),
        ("cql-ssl", 9142),
    ];
    match mode {
        ClusterMode::Cassandra => {
            let thrift = crate::versions::Version::of_tag(version).is_some_and(|v| v.major < 4);
            if thrift {
                ports.push(("thrift", 9160));
            }
        }
        ClusterMode::Scylla => {
            ports.push(("cql-shard", 19042));
            ports.push(("cql-ssl-shard", 19142));
        }
    }
    ports
}

/// The data directory of each database, where the first volume claim
/// template is mounted.
pub fn data_dir(mode: ClusterMode) -> &'static str {
    match mode {
        ClusterMode::Cassandra => "/var/lib/cassandra",
        ClusterMode::Scylla => "/var/lib/scylla",
    }
}

/// The configuration directory each database reads.
pub fn config_dir(mode: ClusterMode) -> &'static str {
    match mode {
        ClusterMode::Cassandra => "/etc/cassandra",
        ClusterMode::Scylla => "/etc/scylla",
    }
}

/// The sidecar's own directory on the data volume: what it records there
/// lives and dies with the member's data.
pub fn state_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(".cassandra-operator")
}

/// Marker: this node left the ring (decommission confirmed). It is never
/// started again.
pub fn decommission_marker(data_dir: &Path) -> PathBuf {
    state_dir(data_dir).join("decommissioned")
}

/// Record: this node's host ID, written by the sidecar before it claims a
/// decommission. Its confirmation names the node that left by it, and a
/// node that left no longer has a host ID in its own token metadata.
pub fn leaving_marker(data_dir: &Path) -> PathBuf {
    state_dir(data_dir).join("leaving")
}

/// Marker: this node's bootstrap is complete (the sidecar saw operation
/// mode NORMAL on this data). From then on it may list itself as a seed.
pub fn bootstrapped_marker(data_dir: &Path) -> PathBuf {
    state_dir(data_dir).join("bootstrapped")
}

// ---------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------

/// Whether a member of a rack is a seed: members 0 and 1 of each rack.
pub fn is_seed(ordinal: i32) -> bool {
    ordinal < 2
}

/// The seeds a member starts with (DESIGN.md section 4), from the ClusterIPs
/// of the seed Services:
/// - a member whose bootstrap is known complete keeps its own address, so
///   that it can start when no other member is up (after a full outage
///   `OrderedReady` starts member 0 alone);
/// - a member that has not bootstrapped never lists itself while the
///   cluster has other members: a seed does not bootstrap (Cassandra skips
///   even an interrupted bootstrap when it is its own seed), so it would
///   own ranges without their data;
/// - only the very first member of a new cluster, with no other seed to
///   reach, seeds itself before that.
pub fn choose_seeds(
    own_ip: &str,
    seed_ips: &[String],
    other_members: bool,
    bootstrapped: bool,
) -> Vec<String> {
    let mut seeds: Vec<String> = seed_ips
        .iter()
        .filter(|ip| bootstrapped || !(other_members && ip.as_str() == own_ip))
        .cloned()
        .collect();
    seeds.sort();
    seeds.dedup();
    if seeds.is_empty() {
        // No other seed exists yet: this member founds the cluster.
        seeds.push(own_ip.to_string());
    }
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_are_rooks_and_ours() {
        assert_eq!(SEED, "cassandra.rook.io/seed");
        assert_eq!(DECOMMISSIONED, "cassandra.rook.io/decommissioned");
        assert_eq!(REPLACE, "cassandra.rook.io/replace");
        assert_eq!(
            (DECOMMISSION_REQUESTED, DECOMMISSION_DONE),
            ("false", "true")
        );
        assert_eq!(
            DECOMMISSION_REFUSED,
            "cassandra.rook.io/decommission-refused"
        );
        assert_eq!(REPLACE_REQUESTED, "cassandra.rook.io/replace-requested");
        assert_eq!(HOST_ID, "cassandra.rook.io/host-id");
        assert_eq!(
            DECOMMISSION_STARTED,
            "cassandra.rook.io/decommission-started"
        );
    }

    #[test]
    fn the_decommission_record_reads_the_same_on_both_sides() {
        assert_eq!(Decommission::from_label(None), Decommission::Serve);
        assert_eq!(
            Decommission::from_label(Some("false")),
            Decommission::Requested
        );
        assert_eq!(
            Decommission::from_label(Some("true")),
            Decommission::Confirmed
        );
        // Anything else is neither a request nor a confirmation.
        for odd in ["", "yes", "True", "FALSE", " true"] {
            assert_eq!(
                Decommission::from_label(Some(odd)),
                Decommission::Unknown,
                "{odd:?}"
            );
        }
        for d in [Decommission::Requested, Decommission::Confirmed] {
            assert_eq!(Decommission::from_label(d.label_value()), d);
        }
        assert_eq!(Decommission::Unknown.label_value(), None);
    }

    #[test]
    fn the_decommission_record_is_read_off_an_object_by_its_label() {
        let meta = |labels: &[(&str, &str)]| ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        };
        assert_eq!(
            Decommission::of(&ObjectMeta::default()),
            Decommission::Serve
        );
        assert_eq!(Decommission::of(&meta(&[(SEED, "")])), Decommission::Serve);
        assert_eq!(
            Decommission::of(&meta(&[(DECOMMISSIONED, "false")])),
            Decommission::Requested
        );
        assert_eq!(
            Decommission::of(&meta(&[(DECOMMISSIONED, "true")])),
            Decommission::Confirmed
        );
        // An annotation of the same key is no record.
        let annotated = ObjectMeta {
            annotations: Some([(DECOMMISSIONED.to_string(), "false".to_string())].into()),
            ..ObjectMeta::default()
        };
        assert_eq!(Decommission::of(&annotated), Decommission::Serve);
        let odd = meta(&[(DECOMMISSIONED, "yes")]);
        assert_eq!(Decommission::of(&odd), Decommission::Unknown);
        assert_eq!(Decommission::label_of(&odd), Some("yes"));
        assert_eq!(Decommission::label_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn a_replace_record_is_an_address_or_nothing() {
        assert_eq!(
            replace_address(Some("10.96.0.12")),
            Some("10.96.0.12".parse().unwrap())
        );
        assert_eq!(
            replace_address(Some("fd00::1")),
            Some("fd00::1".parse().unwrap())
        );
        assert_eq!(replace_address(Some("")), None);
        assert_eq!(replace_address(Some("true")), None);
        assert_eq!(replace_address(None), None);
    }

    #[test]
    fn markers_live_on_the_data_volume() {
        let data = Path::new("/var/lib/cassandra");
        assert_eq!(
            decommission_marker(data),
            Path::new("/var/lib/cassandra/.cassandra-operator/decommissioned")
        );
        assert_eq!(
            bootstrapped_marker(data),
            Path::new("/var/lib/cassandra/.cassandra-operator/bootstrapped")
        );
        assert_eq!(data_dir(ClusterMode::Scylla), "/var/lib/scylla");
        assert_eq!(config_dir(ClusterMode::Cassandra), "/etc/cassandra");
    }

    #[test]
    fn the_rendered_configuration_lives_on_the_shared_volume() {
        assert!(Path::new(RENDERED_CONFIG_DIR).starts_with(SHARED_DIR));
        assert_ne!(Path::new(RENDERED_CONFIG_DIR), Path::new(SHARED_DIR));
    }

    #[test]
    fn seeds_are_the_first_two_members_of_each_rack() {
        assert!(is_seed(0) && is_seed(1) && !is_seed(2) && !is_seed(7));
    }

    #[test]
    fn the_first_member_of_a_new_cluster_seeds_itself() {
        assert_eq!(
            choose_seeds("10.0.0.1", &ips(&["10.0.0.1"]), false, false),
            ips(&["10.0.0.1"])
        );
        assert_eq!(
            choose_seeds("10.0.0.1", &[], false, false),
            ips(&["10.0.0.1"])
        );
    }

    #[test]
    fn a_member_that_has_not_bootstrapped_never_lists_itself() {
        assert_eq!(
            choose_seeds("10.0.0.2", &ips(&["10.0.0.1", "10.0.0.2"]), true, false),
            ips(&["10.0.0.1"])
        );
        // Member 0 of a new rack: the other rack's seeds.
        assert_eq!(
            choose_seeds(
                "10.0.1.1",
                &ips(&["10.0.0.1", "10.0.0.2", "10.0.1.1"]),
                true,
                false
            ),
            ips(&["10.0.0.1", "10.0.0.2"])
        );
        // Member 0 restarted before it ever reached NORMAL, with member 1's
        // Service already there: it must not skip its bootstrap.
        assert_eq!(
            choose_seeds("10.0.0.1", &ips(&["10.0.0.2", "10.0.0.1"]), true, false),
            ips(&["10.0.0.2"])
        );
    }

    #[test]
    fn a_bootstrapped_member_lists_itself_and_can_start_alone() {
        // The full outage: member 0 comes back first, alone.
        assert_eq!(
            choose_seeds("10.0.0.1", &ips(&["10.0.0.2", "10.0.0.1"]), true, true),
            ips(&["10.0.0.1", "10.0.0.2"])
        );
        // A bootstrapped non-seed member adds nothing of its own.
        assert_eq!(
            choose_seeds("10.0.0.3", &ips(&["10.0.0.2", "10.0.0.1"]), true, true),
            ips(&["10.0.0.1", "10.0.0.2"])
        );
    }

    #[test]
    fn a_record_made_after_an_ask_is_newer_than_the_ask_whatever_the_clock() {
        let now: k8s_openapi::jiff::Timestamp = "2026-11-27T10:00:00Z".parse().unwrap();
        assert_eq!(record_time(now, None), now);
        assert_eq!(record_time(now, Some("2026-11-27T09:59:00Z")), now);
        let behind = record_time(now, Some("2026-11-27T10:00:02Z"));
        assert!(behind > "2026-11-27T10:00:02Z".parse().unwrap());
        // ... and then the ask is answered: no rewrite at every read.
        let recorded = GossipView {
            at: Some(behind.to_string()),
            ..GossipView::default()
        };
        assert!(!GossipView::default().to_record(Some(&recorded), Some("2026-11-27T10:00:02Z")));
    }

    #[test]
    fn a_view_is_recorded_when_it_changes_or_when_the_controller_asks_for_a_newer_record() {
        let seen = GossipView {
            generation: 7,
            at: Some("2026-11-27T10:00:00Z".into()),
            ..GossipView::default()
        };
        let now = GossipView {
            at: None,
            ..seen.clone()
        };
        assert!(now.to_record(None, None), "nothing recorded yet");
        assert!(
            !now.to_record(Some(&seen), None),
            "the same view, not asked"
        );
        let changed = GossipView {
            generation: 8,
            ..now.clone()
        };
        assert!(changed.to_record(Some(&seen), None));
        assert!(
            now.to_record(Some(&seen), Some("2026-11-27T10:00:05Z")),
            "asked after it was recorded"
        );
        assert!(
            !now.to_record(Some(&seen), Some("2026-11-27T09:59:00Z")),
            "asked before: the record answers it"
        );
        assert!(!now.to_record(Some(&seen), Some("not a time")));
    }

    fn view(generation: i64, up: &[(&str, i64)]) -> GossipView {
        GossipView {
            generation,
            up: up.iter().map(|(a, g)| (a.to_string(), *g)).collect(),
            ..GossipView::default()
        }
    }

    fn members<'a>(views: &'a [(&'a str, &'a str, Option<GossipView>)]) -> Vec<GossipMember<'a>> {
        views
            .iter()
            .map(|(name, address, view)| GossipMember {
                name,
                address,
                view: view.as_ref(),
            })
            .collect()
    }

    #[test]
    fn gossip_view_round_trips_through_its_annotation() {
        let mut v = view(
            1_700_000_100,
            &[("10.0.0.1", 1_700_000_000), ("10.0.0.2", 1_700_000_100)],
        );
        v.down.insert("10.0.0.9".to_string());
        let text = v.to_annotation();
        assert_eq!(
            text,
            r#"{"generation":1700000100,"up":{"10.0.0.1":1700000000,"10.0.0.2":1700000100},"down":["10.0.0.9"]}"#
        );
        assert_eq!(GossipView::from_annotation(&text), Some(v));
        assert_eq!(GossipView::from_annotation("UN"), None);
    }

    #[test]
    fn the_ring_is_settled_when_every_member_sees_every_member_up_at_its_generation() {
        let all_up = [("10.0.0.1", 100), ("10.0.0.2", 200), ("10.0.0.3", 300)];
        let settled = [
            ("a-0", "10.0.0.1", Some(view(100, &all_up))),
            ("a-1", "10.0.0.2", Some(view(200, &all_up))),
            ("a-2", "10.0.0.3", Some(view(300, &all_up))),
        ];
        assert_eq!(ring_settled(&members(&settled), &["a-2"]), Ok(()));

        // a-2 restarted (generation 400): a-0 still knows it by 300.
        let stale = [
            ("a-0", "10.0.0.1", Some(view(100, &all_up))),
            (
                "a-1",
                "10.0.0.2",
                Some(view(
                    200,
                    &[("10.0.0.1", 100), ("10.0.0.2", 200), ("10.0.0.3", 400)],
                )),
            ),
            (
                "a-2",
                "10.0.0.3",
                Some(view(
                    400,
                    &[("10.0.0.1", 100), ("10.0.0.2", 200), ("10.0.0.3", 400)],
                )),
            ),
        ];
        assert_eq!(
            ring_settled(&members(&stale), &[]),
            Err(Unsettled::NotSeenUp {
                observer: "a-0".into(),
                peer: "a-2".into()
            })
        );

        // The restarted member does not see a-0 up yet.
        let fresh = [
            ("a-0", "10.0.0.1", Some(view(100, &all_up))),
            ("a-1", "10.0.0.2", Some(view(200, &all_up))),
            (
                "a-2",
                "10.0.0.3",
                Some(view(300, &[("10.0.0.2", 200), ("10.0.0.3", 300)])),
            ),
        ];
        assert_eq!(
            ring_settled(&members(&fresh), &[]).unwrap_err().to_string(),
            "a-2 does not see a-0 up yet"
        );

        // A member without a record is not asked, but is seen; unless required.
        let silent = [
            ("a-0", "10.0.0.1", Some(view(100, &all_up))),
            ("a-1", "10.0.0.2", None),
        ];
        assert_eq!(ring_settled(&members(&silent), &[]), Ok(()));
        assert_eq!(
            ring_settled(&members(&silent), &["a-1"]),
            Err(Unsettled::NoRecord {
                member: "a-1".into()
            })
        );
        let unseen = [
            ("a-0", "10.0.0.1", Some(view(100, &[("10.0.0.1", 100)]))),
            ("a-1", "10.0.0.2", None),
        ];
        assert!(ring_settled(&members(&unseen), &[]).is_err());
    }
}
