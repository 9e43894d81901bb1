//! The shared ring and replicated-data model behind the fake Cassandra nodes
//! (DESIGN.md section 7): one [`Ring`] per Cassandra cluster, kept by
//! kubesim, driven by the fake nodes' lifecycle and JMX operations, and
//! inspected by tests (`GET /sim/ring`, `kubesim ring --check`). Pure: no
//! I/O, no clock of its own (the driver moves [`Ring::advance`]).
//!
//! What it models, after Cassandra's `StorageService`, `Gossiper` and
//! `RangeStreamer` (see the `JMX-FACTS.md` citations on each rule):
//! - data directories ([`DataDir`]): host ID, saved tokens, bootstrap state
//!   (`SystemKeyspace.BootstrapState`) and the (keyspace, key) copies they
//!   hold; they survive a process restart and are lost with the disk;
//! - ring members ([`Node`]) keyed by host ID: address, dc, rack, tokens,
//!   their place in the token ring ([`RingState`]) and their process
//!   ([`Process`], with its `OperationMode`);
//! - keyspaces with `SimpleStrategy` or `NetworkTopologyStrategy`, keys
//!   placed by their Murmur3 token, and writes at a consistency level;
//! - startup rules (seeds do not bootstrap, endpoint collision, replace,
//!   decommissioned nodes, cluster name), bootstrap, replacement,
//!   decommission (blocking, with the 4.0+ replication-factor check),
//!   removenode, kill, disk loss, drain, hints, repair and cleanup;
//! - the views: [`Ring::status`] (`nodetool status`) and [`Ring::check`]
//!   (under-replicated and lost keys).
//!
//! Operations that stream take two steps, as the real ones take time: a
//! `start` that changes modes and states at once, and a completion (by
//! [`Ring::advance`] once the configured time has passed, or explicitly by
//! [`Ring::finish`]) that moves the copies.

mod murmur3;
mod placement;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Serialize, Serializer};

pub use murmur3::{Rng, Token, hash3_x64_128, token_of};
pub use placement::{Endpoint, Replication, TokenMap};
pub use view::{
    BYTES_PER_COPY, CheckReport, KeyReport, NodeStatus, ReplicaCopy, StatusRow, StatusTable,
    stringify_size,
};

/// A host ID (UUID text).
pub type HostId = String;

/// Cassandra's replicated system keyspaces and their default replication
/// (`SystemDistributedKeyspace`, `TraceKeyspace`, `AuthKeyspace`): they count
/// in the decommission replication-factor check of 4.0+.
pub const SYSTEM_KEYSPACES: [(&str, usize); 3] = [
    ("system_auth", 1),
    ("system_distributed", 3),
    ("system_traces", 2),
];

/// A Cassandra release line: the rules that differ between versions key on
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const V3_11: Version = Version::new(3, 11);
    pub const V4_0: Version = Version::new(4, 0);
    pub const V4_1: Version = Version::new(4, 1);
    pub const V5_0: Version = Version::new(5, 0);

    pub const fn new(major: u32, minor: u32) -> Self {
        Version { major, minor }
    }

    /// Parses `ReleaseVersion` (`4.1.8`, `5.0-beta1`, `3.11.20-SNAPSHOT`).
    pub fn parse(release: &str) -> Option<Self> {
        let mut parts = release.split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Version { major, minor })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `StorageService.Mode`, as the `OperationMode` attribute names it
/// (JMX-FACTS §2.3; the two `_FAILED` modes exist from 5.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationMode {
    Starting,
    Normal,
    Joining,
    JoiningFailed,
    Leaving,
    Decommissioned,
    DecommissionFailed,
    Moving,
    Draining,
    Drained,
}

impl fmt::Display for OperationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            OperationMode::Starting => "STARTING",
            OperationMode::Normal => "NORMAL",
            OperationMode::Joining => "JOINING",
            OperationMode::JoiningFailed => "JOINING_FAILED",
            OperationMode::Leaving => "LEAVING",
            OperationMode::Decommissioned => "DECOMMISSIONED",
            OperationMode::DecommissionFailed => "DECOMMISSION_FAILED",
            OperationMode::Moving => "MOVING",
            OperationMode::Draining => "DRAINING",
            OperationMode::Drained => "DRAINED",
        };
        f.write_str(name)
    }
}

/// `SystemKeyspace.BootstrapState`, kept in the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BootstrapState {
    NeedsBootstrap,
    InProgress,
    Completed,
    Decommissioned,
}

/// A member's place in the token ring, as the other nodes see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RingState {
    /// Bootstrapping: its tokens are pending (gossip `BOOT`).
    Joining,
    /// Replacing the member `replaced` (a different address): the replaced
    /// member's tokens are pending for it (`BOOT_REPLACE`).
    Replacing { replaced: HostId },
    /// Owns its tokens.
    Normal,
    /// Replacing a dead member at the same address, under that member's
    /// host ID: owns its tokens but gossips `hibernate`, so the others keep
    /// it down and do not forward writes to it.
    Hibernating,
    /// Decommissioning: still owns its tokens; the new owners are pending.
    Leaving,
    /// Decommissioned: no longer in the ring (not shown by status).
    Left,
}

/// The operation a process is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    Bootstrap,
    Replace,
    Decommission,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Bootstrap => "bootstrap",
            Operation::Replace => "replace",
            Operation::Decommission => "decommission",
        })
    }
}

/// An operation in progress and when it completes (model milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Busy {
    pub operation: Operation,
    pub until_ms: u64,
}

/// A running Cassandra process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub mode: OperationMode,
    pub busy: Option<Busy>,
    pub seeds: Vec<String>,
}

/// A ring member (an endpoint in gossip), keyed by host ID.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub host_id: HostId,
    pub address: String,
    pub dc: String,
    pub rack: String,
    pub tokens: Vec<Token>,
    pub state: RingState,
    pub version: Version,
    /// The data directory the member runs (or last ran) on.
    pub data_dir: String,
    /// `None` when the process is not running.
    pub process: Option<Process>,
    /// Model time at which it went down (for the hint window).
    pub down_since_ms: Option<u64>,
}

impl Node {
    /// Whether the other nodes see it up: its process runs and gossips
    /// (not drained, decommissioned, or hibernating while it replaces).
    pub fn is_up(&self) -> bool {
        match &self.process {
            None => false,
            Some(p) => {
                !matches!(
                    p.mode,
                    OperationMode::Draining
                        | OperationMode::Drained
                        | OperationMode::Decommissioned
                ) && self.state != RingState::Hibernating
            }
        }
    }

    /// The process's `OperationMode`, if it runs.
    pub fn mode(&self) -> Option<OperationMode> {
        self.process.as_ref().map(|p| p.mode)
    }

    /// Owns its tokens now (a natural endpoint).
    fn is_natural(&self) -> bool {
        matches!(
            self.state,
            RingState::Normal | RingState::Leaving | RingState::Hibernating
        )
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host_id: self.host_id.clone(),
            dc: self.dc.clone(),
            rack: self.rack.clone(),
        }
    }
}

/// A data directory (a PVC, a local SSD): what survives a process restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataDir {
    pub id: String,
    pub cluster_name: Option<String>,
    pub host_id: Option<HostId>,
    pub tokens: Vec<Token>,
    pub bootstrap: BootstrapState,
    /// keyspace -> keys this directory holds a copy of.
    pub copies: BTreeMap<String, BTreeSet<String>>,
}

impl DataDir {
    fn empty(id: &str) -> Self {
        DataDir {
            id: id.to_string(),
            cluster_name: None,
            host_id: None,
            tokens: Vec::new(),
            bootstrap: BootstrapState::NeedsBootstrap,
            copies: BTreeMap::new(),
        }
    }

    pub fn holds(&self, keyspace: &str, key: &str) -> bool {
        self.copies.get(keyspace).is_some_and(|k| k.contains(key))
    }

    pub fn copy_count(&self) -> usize {
        self.copies.values().map(BTreeSet::len).sum()
    }

    fn add(&mut self, keyspace: &str, key: &str) {
        self.copies
            .entry(keyspace.to_string())
            .or_default()
            .insert(key.to_string());
    }
}

/// A keyspace and its keys (key -> token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Keyspace {
    pub name: String,
    pub replication: Replication,
    pub system: bool,
    pub keys: BTreeMap<String, Token>,
}

/// A node's configuration, as rendered into cassandra.yaml,
/// cassandra-rackdc.properties and the JVM system properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    pub cluster_name: String,
    /// `broadcast_address`.
    pub address: String,
    pub dc: String,
    pub rack: String,
    /// The seed provider's `seeds`.
    pub seeds: Vec<String>,
    pub num_tokens: usize,
    pub auto_bootstrap: bool,
    /// `-Dcassandra.replace_address`.
    pub replace_address: Option<String>,
    /// `-Dcassandra.replace_address_first_boot`.
    pub replace_address_first_boot: Option<String>,
    /// `-Dcassandra.allow_unsafe_replace`.
    pub allow_unsafe_replace: bool,
    /// `-Dcassandra.override_decommission`.
    pub override_decommission: bool,
    pub version: Version,
    /// Identity of the data directory the process runs on.
    pub data_dir: String,
}

impl NodeConfig {
    /// A 4.1 node with 16 tokens and auto_bootstrap, as the default
    /// cassandra.yaml of 4.x configures it.
    pub fn new(
        cluster_name: &str,
        address: &str,
        dc: &str,
        rack: &str,
        seeds: &[&str],
        data_dir: &str,
    ) -> Self {
        NodeConfig {
            cluster_name: cluster_name.to_string(),
            address: address.to_string(),
            dc: dc.to_string(),
            rack: rack.to_string(),
            seeds: seeds.iter().map(|s| s.to_string()).collect(),
            num_tokens: 16,
            auto_bootstrap: true,
            replace_address: None,
            replace_address_first_boot: None,
            allow_unsafe_replace: false,
            override_decommission: false,
            version: Version::V4_1,
            data_dir: data_dir.to_string(),
        }
    }

    pub fn is_seed(&self) -> bool {
        self.seeds.iter().any(|s| s == &self.address)
    }
}

/// Durations of the streaming operations, in model milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timing {
    pub bootstrap_ms: u64,
    pub replace_ms: u64,
    pub decommission_ms: u64,
    /// `max_hint_window` (3 hours by default): no hints are stored for a
    /// node down for longer.
    pub max_hint_window_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            bootstrap_ms: 2_000,
            replace_ms: 2_000,
            decommission_ms: 2_000,
            max_hint_window_ms: 3 * 3600 * 1000,
        }
    }
}

/// How a ring is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Seed of the random source for tokens and host IDs.
    pub seed: u64,
    pub timing: Timing,
    /// Create Cassandra's replicated system keyspaces ([`SYSTEM_KEYSPACES`]).
    pub system_keyspaces: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            timing: Timing::default(),
            system_keyspaces: true,
        }
    }
}

/// A consistency level of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Consistency {
    Any,
    One,
    Two,
    Three,
    Quorum,
    All,
}

impl Consistency {
    /// `ConsistencyLevel.blockFor` over the total replication factor.
    fn block_for(self, rf: usize) -> usize {
        match self {
            Consistency::Any | Consistency::One => 1,
            Consistency::Two => 2,
            Consistency::Three => 3,
            Consistency::Quorum => rf / 2 + 1,
            Consistency::All => rf,
        }
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Consistency::Any => "ANY",
            Consistency::One => "ONE",
            Consistency::Two => "TWO",
            Consistency::Three => "THREE",
            Consistency::Quorum => "QUORUM",
            Consistency::All => "ALL",
        })
    }
}

/// How a node came up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Startup {
    /// Restarted on a bootstrapped data directory: NORMAL with its tokens.
    Restarted,
    /// Joined without bootstrapping (a seed, or `auto_bootstrap: false`):
    /// NORMAL at once, owning ranges without their data.
    JoinedWithoutBootstrap,
    /// Bootstrapping: JOINING until [`Ring::finish`].
    Bootstrapping,
    /// Replacing `replaced`: JOINING until [`Ring::finish`].
    Replacing {
        replaced: HostId,
        same_address: bool,
    },
    /// Took over `replaced`'s tokens without streaming
    /// (`allow_unsafe_replace`).
    ReplacedWithoutStreaming { replaced: HostId },
    /// Rejoined the ring as a new member at the address of `superseded`,
    /// whose tokens it dropped (3.11 has no collision check for a node that
    /// does not bootstrap).
    Superseded { superseded: HostId },
}

/// What [`Ring::start`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Started {
    pub host_id: HostId,
    pub startup: Startup,
    pub mode: OperationMode,
    /// What Cassandra logs about the decisions taken (INFO/WARN).
    pub log: Vec<String>,
}

/// What [`Ring::start_decommission`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecommissionStart {
    /// LEAVING; streaming until `until_ms`.
    Started { until_ms: u64 },
    /// 5.0: already decommissioned or decommissioning (INFO only).
    AlreadyDone,
}

/// An operation completed by [`Ring::advance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub host_id: HostId,
    pub operation: Operation,
    pub result: Result<(), RingError>,
}

/// Why a ring operation was refused. The messages are Cassandra's where it
/// has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("no ring member with host id {host_id}")]
    UnknownNode { host_id: HostId },
    #[error("Keyspace '{keyspace}' does not exist")]
    UnknownKeyspace { keyspace: String },
    #[error("Cannot add already existing keyspace \"{keyspace}\"")]
    KeyspaceExists { keyspace: String },
    #[error("data directory {data_dir} is in use by the running node {host_id}")]
    DataDirInUse { data_dir: String, host_id: HostId },
    #[error("address {address} is in use by the running node {host_id}")]
    AddressInUse { address: String, host_id: HostId },
    #[error("Saved cluster name {saved} != configured name {configured}")]
    SavedClusterName { saved: String, configured: String },
    #[error(
        "Unable to gossip with any peers: ClusterName mismatch (the ring is {ring}, this node is configured with {configured})"
    )]
    ClusterNameMismatch { ring: String, configured: String },
    #[error("Unable to gossip with any peers")]
    NoSeedReachable,
    #[error(
        "This node was decommissioned and will not rejoin the ring unless -Dcassandra.override_decommission=true has been set, or all existing data is removed and the node is bootstrapped again"
    )]
    Decommissioned,
    #[error("Cannot change the number of tokens from {from} to {to}")]
    TokenCountChanged { from: usize, to: usize },
    #[error("Cannot replace address with a node that is already bootstrapped")]
    ReplaceBootstrapped,
    #[error(
        "Replacing a node without bootstrapping risks invalidating consistency guarantees as the expected data may not be present until repair is run. To perform this operation, please restart with -Dcassandra.allow_unsafe_replace=true"
    )]
    UnsafeReplace,
    #[error("Cannot replace_address {address} because it doesn't exist in gossip")]
    ReplaceUnknown { address: String },
    #[error("Cannot replace a live node... ")]
    ReplaceLive { address: String },
    #[error(
        "A node with address {address} already exists, cancelling join. Use cassandra.replace_address if you want to replace this node."
    )]
    EndpointCollision { address: String },
    #[error(
        "Other bootstrapping/leaving/moving nodes detected, cannot bootstrap while cassandra.consistent.rangemovement is true"
    )]
    RangeMovement,
    #[error("node {host_id} is not running")]
    NotRunning { host_id: HostId },
    #[error("local node is not a member of the token ring yet")]
    NotAMember,
    #[error("no other normal nodes in the ring; decommission would be pointless")]
    NoOtherNormalNodes,
    #[error("Node in {mode} state; wait for status to become normal or restart")]
    WrongMode { mode: OperationMode },
    #[error("Node is still decommissioning. Check nodetool netstats.")]
    StillDecommissioning,
    #[error(
        "Not enough live nodes to maintain replication factor in keyspace {keyspace} (RF = {rf}, N = {nodes}). Perform a forceful decommission to ignore."
    )]
    NotEnoughNodes {
        keyspace: String,
        rf: usize,
        nodes: usize,
    },
    #[error("node {host_id} has no {operation} in progress")]
    NotInProgress {
        host_id: HostId,
        operation: &'static str,
    },
    #[error(
        "A node required to move the data consistently is down ({address}). If you wish to move the data from a potentially inconsistent replica, restart the node with -Dcassandra.consistent.rangemovement=false"
    )]
    SourceDown { address: String },
    #[error(
        "unable to find sufficient sources for streaming range ({start},{end}] in keyspace {keyspace}"
    )]
    NoSources {
        keyspace: String,
        start: Token,
        end: Token,
    },
    #[error("Error while decommissioning node: Stream failed (to {address})")]
    StreamTargetDown { address: String },
    #[error("Cannot achieve consistency level {consistency}")]
    Unavailable { consistency: Consistency },
    #[error("Host ID not found.")]
    HostIdNotFound,
    #[error("Cannot remove self")]
    RemoveSelf,
    #[error(
        "Node /{address} is alive and owns this ID. Use decommission command to remove it from the ring"
    )]
    RemoveLive { address: String },
    #[error("Node to be removed is not a member of the token ring")]
    RemoveNotMember,
}

/// The ring of one Cassandra cluster and its replicated data.
#[derive(Debug, Clone)]
pub struct Ring {
    cluster_name: Option<String>,
    options: Options,
    rng: Rng,
    now_ms: u64,
    nodes: BTreeMap<HostId, Node>,
    data_dirs: BTreeMap<String, DataDir>,
    keyspaces: BTreeMap<String, Keyspace>,
    /// Hints stored for down replicas: host ID -> (keyspace, key).
    hints: BTreeMap<HostId, BTreeSet<(String, String)>>,
}

/// One copy to add: (data directory, keyspace, key).
type CopyPlan = Vec<(String, String, String)>;

impl Ring {
    pub fn new(options: Options) -> Self {
        let mut ring = Ring {
            cluster_name: None,
            rng: Rng::new(options.seed),
            options,
            now_ms: 0,
            nodes: BTreeMap::new(),
            data_dirs: BTreeMap::new(),
            keyspaces: BTreeMap::new(),
            hints: BTreeMap::new(),
        };
        if ring.options.system_keyspaces {
            for (name, rf) in SYSTEM_KEYSPACES {
                ring.keyspaces.insert(
                    name.to_string(),
                    Keyspace {
                        name: name.to_string(),
                        replication: Replication::simple(rf),
                        system: true,
                        keys: BTreeMap::new(),
                    },
                );
            }
        }
        ring
    }

    // ---- accessors ----

    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Every member known to gossip, including those that left.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn node(&self, host_id: &str) -> Option<&Node> {
        self.nodes.get(host_id)
    }

    /// The member at `address` (not one that left), preferring a running
    /// one.
    pub fn node_by_address(&self, address: &str) -> Option<&Node> {
        let at = || {
            self.nodes
                .values()
                .filter(move |n| n.address == address && n.state != RingState::Left)
        };
        at().find(|n| n.process.is_some()).or_else(|| at().next())
    }

    /// Replaces the operation durations (from then on).
    pub fn set_timing(&mut self, timing: Timing) {
        self.options.timing = timing;
    }

    /// Addresses of the members gossip sees up (`LiveNodes`).
    pub fn live_nodes(&self) -> Vec<String> {
        self.addresses(|n| n.is_up())
    }

    /// Addresses of the members gossip sees down (`UnreachableNodes`).
    pub fn unreachable_nodes(&self) -> Vec<String> {
        self.addresses(|n| !n.is_up())
    }

    /// Addresses of bootstrapping and replacing members (`JoiningNodes`).
    pub fn joining_nodes(&self) -> Vec<String> {
        self.addresses(|n| matches!(n.state, RingState::Joining | RingState::Replacing { .. }))
    }

    /// Addresses of decommissioning members (`LeavingNodes`).
    pub fn leaving_nodes(&self) -> Vec<String> {
        self.addresses(|n| n.state == RingState::Leaving)
    }

    /// Address -> host ID of every member (`EndpointToHostId`).
    pub fn endpoint_to_host_id(&self) -> BTreeMap<String, HostId> {
        self.nodes
            .values()
            .filter(|n| n.state != RingState::Left)
            .map(|n| (n.address.clone(), n.host_id.clone()))
            .collect()
    }

    /// Token -> address of the owners (`TokenToEndpointMap`).
    pub fn token_to_endpoint(&self) -> BTreeMap<Token, String> {
        self.nodes
            .values()
            .filter(|n| n.is_natural())
            .flat_map(|n| n.tokens.iter().map(|t| (*t, n.address.clone())))
            .collect()
    }

    fn addresses(&self, pick: impl Fn(&Node) -> bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.state != RingState::Left && pick(n))
            .map(|n| n.address.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The member running on `data_dir`, if its process runs.
    pub fn node_on(&self, data_dir: &str) -> Option<&Node> {
        self.nodes
            .values()
            .find(|n| n.data_dir == data_dir && n.process.is_some())
    }

    pub fn data_dir(&self, id: &str) -> Option<&DataDir> {
        self.data_dirs.get(id)
    }

    pub fn data_dirs(&self) -> impl Iterator<Item = &DataDir> {
        self.data_dirs.values()
    }

    pub fn keyspace(&self, name: &str) -> Option<&Keyspace> {
        self.keyspaces.get(name)
    }

    pub fn keyspaces(&self) -> impl Iterator<Item = &Keyspace> {
        self.keyspaces.values()
    }

    /// The data directory a member's copies live in, if it still exists.
    pub fn disk_of(&self, host_id: &str) -> Option<&DataDir> {
        self.nodes
            .get(host_id)
            .and_then(|n| self.data_dirs.get(&n.data_dir))
            .filter(|d| d.host_id.as_deref() == Some(host_id))
    }

    /// The natural replicas of a key of `keyspace`, primary first.
    pub fn replicas(&self, keyspace: &str, key: &str) -> Result<Vec<HostId>, RingError> {
        let ks = self.keyspace_or_err(keyspace)?;
        Ok(self
            .natural_map()
            .replicas(&ks.replication, token_of(key.as_bytes())))
    }

    // ---- token maps ----

    fn token_map(&self, include: impl Fn(&Node) -> Option<Vec<Token>>) -> TokenMap {
        let owners: Vec<(Endpoint, Vec<Token>)> = self
            .nodes
            .values()
            .filter_map(|n| include(n).map(|t| (n.endpoint(), t)))
            .collect();
        TokenMap::new(owners.iter().map(|(e, t)| (e.clone(), t.as_slice())))
    }

    /// The owners now.
    fn natural_map(&self) -> TokenMap {
        self.token_map(|n| n.is_natural().then(|| n.tokens.clone()))
    }

    /// The owners once every pending movement is done.
    fn future_map(&self) -> TokenMap {
        let replaced: BTreeSet<&str> = self
            .nodes
            .values()
            .filter_map(|n| match &n.state {
                RingState::Replacing { replaced } => Some(replaced.as_str()),
                _ => None,
            })
            .collect();
        self.token_map(|n| match n.state {
            RingState::Normal | RingState::Hibernating => {
                (!replaced.contains(n.host_id.as_str())).then(|| n.tokens.clone())
            }
            RingState::Joining | RingState::Replacing { .. } => Some(n.tokens.clone()),
            RingState::Leaving | RingState::Left => None,
        })
    }

    fn keyspace_or_err(&self, keyspace: &str) -> Result<&Keyspace, RingError> {
        self.keyspaces
            .get(keyspace)
            .ok_or_else(|| RingError::UnknownKeyspace {
                keyspace: keyspace.to_string(),
            })
    }

    fn node_or_err(&self, host_id: &str) -> Result<&Node, RingError> {
        self.nodes
            .get(host_id)
            .ok_or_else(|| RingError::UnknownNode {
                host_id: host_id.to_string(),
            })
    }

    fn running(&self, host_id: &str) -> Result<&Process, RingError> {
        self.node_or_err(host_id)?
            .process
            .as_ref()
            .ok_or_else(|| RingError::NotRunning {
                host_id: host_id.to_string(),
            })
    }

    fn holds(&self, host_id: &str, keyspace: &str, key: &str) -> bool {
        self.disk_of(host_id)
            .is_some_and(|d| d.holds(keyspace, key))
    }

    fn is_up(&self, host_id: &str) -> bool {
        self.nodes.get(host_id).is_some_and(Node::is_up)
    }

    fn address_of(&self, host_id: &str) -> String {
        self.nodes
            .get(host_id)
            .map(|n| n.address.clone())
            .unwrap_or_default()
    }

    fn new_tokens(&mut self, count: usize) -> Vec<Token> {
        let taken: BTreeSet<Token> = self
            .nodes
            .values()
            .flat_map(|n| n.tokens.iter().copied())
            .collect();
        let mut tokens = BTreeSet::new();
        while tokens.len() < count {
            let t = self.rng.token();
            if !taken.contains(&t) {
                tokens.insert(t);
            }
        }
        tokens.into_iter().collect()
    }

    // ---- schema and writes ----

    /// `CREATE KEYSPACE`.
    pub fn create_keyspace(
        &mut self,
        name: &str,
        replication: Replication,
    ) -> Result<(), RingError> {
        if self.keyspaces.contains_key(name) {
            return Err(RingError::KeyspaceExists {
                keyspace: name.to_string(),
            });
        }
        self.keyspaces.insert(
            name.to_string(),
            Keyspace {
                name: name.to_string(),
                replication,
                system: false,
                keys: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Writes `key` at `consistency`, as a coordinator does: every live
    /// natural and pending replica gets a copy, a down natural replica gets
    /// a hint (within the hint window); refused, with nothing written, when
    /// fewer live replicas than the level needs (plus the pending ones)
    /// exist (`UnavailableException`).
    pub fn write(
        &mut self,
        keyspace: &str,
        key: &str,
        consistency: Consistency,
    ) -> Result<(), RingError> {
        let natural_map = self.natural_map();
        let future_map = self.future_map();
        self.write_with(&natural_map, &future_map, keyspace, key, consistency)
    }

    /// Writes `count` keys named `{prefix}{i}` (i from 0); stops at the
    /// first refused write.
    pub fn write_keys(
        &mut self,
        keyspace: &str,
        prefix: &str,
        count: usize,
        consistency: Consistency,
    ) -> Result<Vec<String>, RingError> {
        let natural_map = self.natural_map();
        let future_map = self.future_map();
        let mut keys = Vec::with_capacity(count);
        for i in 0..count {
            let key = format!("{prefix}{i}");
            self.write_with(&natural_map, &future_map, keyspace, &key, consistency)?;
            keys.push(key);
        }
        Ok(keys)
    }

    fn write_with(
        &mut self,
        natural_map: &TokenMap,
        future_map: &TokenMap,
        keyspace: &str,
        key: &str,
        consistency: Consistency,
    ) -> Result<(), RingError> {
        let ks = self.keyspace_or_err(keyspace)?;
        let token = token_of(key.as_bytes());
        let natural = natural_map.replicas(&ks.replication, token);
        let pending: Vec<HostId> = future_map
            .replicas(&ks.replication, token)
            .into_iter()
            .filter(|h| !natural.contains(h))
            .collect();
        let live_natural = natural.iter().filter(|h| self.is_up(h)).count();
        let live_pending = pending.iter().filter(|h| self.is_up(h)).count();
        let needed = consistency.block_for(ks.replication.total_rf());
        // ANY is satisfied by a hint alone.
        let enough = consistency == Consistency::Any
            || live_natural + live_pending >= needed + pending.len();
        if !enough || natural.is_empty() {
            return Err(RingError::Unavailable { consistency });
        }
        let window = self.options.timing.max_hint_window_ms;
        let now = self.now_ms;
        let mut targets = Vec::new();
        let mut hinted = Vec::new();
        for host in natural.iter().chain(pending.iter()) {
            if self.is_up(host) {
                targets.push(self.nodes[host].data_dir.clone());
            } else if self.nodes[host]
                .down_since_ms
                .is_none_or(|since| now.saturating_sub(since) <= window)
            {
                hinted.push(host.clone());
            }
        }
        self.keyspaces
            .get_mut(keyspace)
            .expect("checked")
            .keys
            .insert(key.to_string(), token);
        for dir in targets {
            if let Some(d) = self.data_dirs.get_mut(&dir) {
                d.add(keyspace, key);
            }
        }
        for host in hinted {
            self.hints
                .entry(host)
                .or_default()
                .insert((keyspace.to_string(), key.to_string()));
        }
        Ok(())
    }

    /// Replays the hints stored for `host_id` into its data directory (as
    /// the coordinators do when they see it come back up).
    fn deliver_hints(&mut self, host_id: &str) {
        let Some(hints) = self.hints.remove(host_id) else {
            return;
        };
        let Some(dir) = self.nodes.get(host_id).map(|n| n.data_dir.clone()) else {
            return;
        };
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            for (ks, key) in hints {
                d.add(&ks, &key);
            }
        }
    }

    fn apply_copies(&mut self, plan: CopyPlan) {
        for (dir, ks, key) in plan {
            if let Some(d) = self.data_dirs.get_mut(&dir) {
                d.add(&ks, &key);
            }
        }
    }

    // ---- startup ----

    /// Starts a Cassandra process with `config`, applying Cassandra's
    /// startup rules (`StorageService.prepareToJoin`, `joinTokenRing`,
    /// `prepareForReplacement`, `Gossiper.isSafeForStartup`). On success
    /// the process runs, NORMAL or JOINING; a JOINING node completes with
    /// [`Ring::finish`] (or [`Ring::advance`]). On error nothing changed
    /// (the process exits).
    pub fn start(&mut self, config: &NodeConfig) -> Result<Started, RingError> {
        if let Some(n) = self.node_on(&config.data_dir) {
            return Err(RingError::DataDirInUse {
                data_dir: config.data_dir.clone(),
                host_id: n.host_id.clone(),
            });
        }
        if let Some(n) = self
            .nodes
            .values()
            .find(|n| n.address == config.address && n.process.is_some())
        {
            return Err(RingError::AddressInUse {
                address: config.address.clone(),
                host_id: n.host_id.clone(),
            });
        }
        let mut disk = self
            .data_dirs
            .get(&config.data_dir)
            .cloned()
            .unwrap_or_else(|| DataDir::empty(&config.data_dir));
        let mut log = Vec::new();

        // SystemKeyspace.checkHealth.
        if let Some(saved) = &disk.cluster_name
            && saved != &config.cluster_name
        {
            return Err(RingError::SavedClusterName {
                saved: saved.clone(),
                configured: config.cluster_name.clone(),
            });
        }
        // Gossip drops messages of another cluster: no peer answers.
        let live_members = self.nodes.values().any(Node::is_up);
        if let Some(ring) = &self.cluster_name
            && ring != &config.cluster_name
            && live_members
        {
            return Err(RingError::ClusterNameMismatch {
                ring: ring.clone(),
                configured: config.cluster_name.clone(),
            });
        }
        if disk.bootstrap == BootstrapState::Decommissioned {
            if !config.override_decommission {
                return Err(RingError::Decommissioned);
            }
            log.push("This node was decommissioned, but overriding by operator request.".into());
            disk.bootstrap = BootstrapState::Completed;
        }
        let bootstrapped = disk.bootstrap == BootstrapState::Completed;

        // The shadow round: a node outside its own seed list needs a live
        // seed (a bootstrapped one also knows its saved peers).
        let is_seed = config.is_seed();
        let seed_up = self
            .nodes
            .values()
            .any(|n| n.is_up() && config.seeds.contains(&n.address));
        if !(is_seed || seed_up || (bootstrapped && live_members)) {
            return Err(RingError::NoSeedReachable);
        }
        if is_seed && !live_members {
            log.push(
                "Unable to gossip with any peers but continuing anyway since node is in its own seed list"
                    .into(),
            );
        }

        // StorageService.isReplacing.
        let replace_target = if config.replace_address.is_some() {
            config.replace_address.clone()
        } else if let Some(first_boot) = &config.replace_address_first_boot {
            if bootstrapped {
                log.push(
                    "Replace address on first boot requested; this node is already bootstrapped"
                        .into(),
                );
                None
            } else {
                Some(first_boot.clone())
            }
        } else {
            None
        };
        let should_bootstrap = config.auto_bootstrap && !bootstrapped && !is_seed;
        if config.auto_bootstrap && !bootstrapped && is_seed {
            log.push(
                "This node will not auto bootstrap because it is configured to be a seed node."
                    .into(),
            );
        }

        let result = match replace_target {
            Some(target) => self.start_replacing(
                config,
                &mut disk,
                &target,
                bootstrapped,
                should_bootstrap,
                &mut log,
            ),
            None => self.start_joining(config, &mut disk, should_bootstrap, &mut log),
        }?;
        disk.cluster_name = Some(config.cluster_name.clone());
        self.data_dirs.insert(disk.id.clone(), disk);
        if self.cluster_name.is_none() || !live_members {
            self.cluster_name = Some(config.cluster_name.clone());
        }
        if self.is_up(&result.host_id) {
            self.deliver_hints(&result.host_id);
        }
        Ok(result)
    }

    fn process(config: &NodeConfig, mode: OperationMode, busy: Option<Busy>) -> Option<Process> {
        Some(Process {
            mode,
            busy,
            seeds: config.seeds.clone(),
        })
    }

    fn new_member(
        config: &NodeConfig,
        host_id: &str,
        tokens: Vec<Token>,
        state: RingState,
        process: Option<Process>,
    ) -> Node {
        Node {
            host_id: host_id.to_string(),
            address: config.address.clone(),
            dc: config.dc.clone(),
            rack: config.rack.clone(),
            tokens,
            state,
            version: config.version,
            data_dir: config.data_dir.clone(),
            process,
            down_since_ms: None,
        }
    }

    fn start_replacing(
        &mut self,
        config: &NodeConfig,
        disk: &mut DataDir,
        target: &str,
        bootstrapped: bool,
        should_bootstrap: bool,
        log: &mut Vec<String>,
    ) -> Result<Started, RingError> {
        if bootstrapped {
            return Err(RingError::ReplaceBootstrapped);
        }
        if !should_bootstrap && !config.allow_unsafe_replace {
            return Err(RingError::UnsafeReplace);
        }
        let replaced = self
            .nodes
            .values()
            .filter(|n| {
                n.address == target
                    && matches!(
                        n.state,
                        RingState::Normal | RingState::Leaving | RingState::Hibernating
                    )
            })
            .map(|n| n.host_id.clone())
            .next()
            .ok_or_else(|| RingError::ReplaceUnknown {
                address: target.to_string(),
            })?;
        if self.is_up(&replaced) {
            return Err(RingError::ReplaceLive {
                address: target.to_string(),
            });
        }
        let same_address = target == config.address;
        // An earlier replacement attempt that died is superseded.
        let stale: Vec<HostId> = self
            .nodes
            .values()
            .filter(|n| {
                n.process.is_none()
                    && n.state
                        == RingState::Replacing {
                            replaced: replaced.clone(),
                        }
            })
            .map(|n| n.host_id.clone())
            .collect();
        for h in stale {
            self.nodes.remove(&h);
        }
        let tokens = self.nodes[&replaced].tokens.clone();
        let host_id = if same_address {
            log.push(format!(
                "Writes will not be forwarded to this node during replacement because it has the same address as the node to be replaced ({target}). If the previous node has been down for longer than max_hint_window, repair must be run after the replacement process in order to make this node consistent."
            ));
            replaced.clone()
        } else {
            disk.host_id.clone().unwrap_or_else(|| self.rng.uuid())
        };
        disk.host_id = Some(host_id.clone());
        disk.tokens = tokens.clone();

        if !should_bootstrap {
            // allow_unsafe_replace: take the tokens over, stream nothing.
            disk.bootstrap = BootstrapState::Completed;
            let process = Self::process(config, OperationMode::Normal, None);
            if same_address {
                let node = self.nodes.get_mut(&replaced).expect("found");
                node.state = RingState::Normal;
                node.data_dir = config.data_dir.clone();
                node.process = process;
                node.down_since_ms = None;
            } else {
                self.nodes.remove(&replaced);
                let node = Self::new_member(config, &host_id, tokens, RingState::Normal, process);
                self.nodes.insert(host_id.clone(), node);
            }
            return Ok(Started {
                host_id,
                startup: Startup::ReplacedWithoutStreaming { replaced },
                mode: OperationMode::Normal,
                log: std::mem::take(log),
            });
        }

        disk.bootstrap = BootstrapState::InProgress;
        let busy = Some(Busy {
            operation: Operation::Replace,
            until_ms: self.now_ms + self.options.timing.replace_ms,
        });
        let process = Self::process(config, OperationMode::Joining, busy);
        if same_address {
            let node = self.nodes.get_mut(&replaced).expect("found");
            node.state = RingState::Hibernating;
            node.data_dir = config.data_dir.clone();
            node.dc = config.dc.clone();
            node.rack = config.rack.clone();
            node.version = config.version;
            node.process = process;
        } else {
            let node = Self::new_member(
                config,
                &host_id,
                tokens,
                RingState::Replacing {
                    replaced: replaced.clone(),
                },
                process,
            );
            self.nodes.insert(host_id.clone(), node);
        }
        Ok(Started {
            host_id,
            startup: Startup::Replacing {
                replaced,
                same_address,
            },
            mode: OperationMode::Joining,
            log: std::mem::take(log),
        })
    }

    fn start_joining(
        &mut self,
        config: &NodeConfig,
        disk: &mut DataDir,
        should_bootstrap: bool,
        log: &mut Vec<String>,
    ) -> Result<Started, RingError> {
        let host_id = disk.host_id.clone();
        // Another member at this address (Gossiper.isSafeForStartup).
        let other = self
            .nodes
            .values()
            .find(|n| {
                n.address == config.address
                    && n.state != RingState::Left
                    && Some(&n.host_id) != host_id.as_ref()
            })
            .map(|n| (n.host_id.clone(), n.state.clone()));
        let mut superseded = None;
        let mut stale = None;
        if let Some((other_id, other_state)) = other {
            let collision_checked = should_bootstrap || config.version >= Version::V4_0;
            let safe = if should_bootstrap {
                // A failed bootstrap (BOOT) is safe to retry over; NORMAL,
                // shutdown and hibernate are not.
                matches!(
                    other_state,
                    RingState::Joining | RingState::Replacing { .. }
                )
            } else {
                false
            };
            if collision_checked && !safe {
                return Err(RingError::EndpointCollision {
                    address: config.address.clone(),
                });
            }
            if !safe {
                superseded = Some(other_id.clone());
            }
            stale = Some(other_id);
        }
        if should_bootstrap {
            // Only one range movement at a time; the entry at our own
            // address does not count.
            let moving = self.nodes.values().any(|n| {
                n.address != config.address
                    && matches!(n.state, RingState::Joining | RingState::Leaving)
            });
            if moving {
                return Err(RingError::RangeMovement);
            }
        }

        if disk.bootstrap == BootstrapState::Completed {
            let host_id = host_id.expect("a bootstrapped data directory has a host id");
            if disk.tokens.len() != config.num_tokens {
                return Err(RingError::TokenCountChanged {
                    from: disk.tokens.len(),
                    to: config.num_tokens,
                });
            }
            if let Some(stale) = &stale {
                self.nodes.remove(stale);
            }
            let process = Self::process(config, OperationMode::Normal, None);
            match self.nodes.get_mut(&host_id) {
                Some(node) => {
                    // A decommission or a replacement does not survive a
                    // restart.
                    node.state = RingState::Normal;
                    node.address = config.address.clone();
                    node.dc = config.dc.clone();
                    node.rack = config.rack.clone();
                    node.version = config.version;
                    node.tokens = disk.tokens.clone();
                    node.data_dir = config.data_dir.clone();
                    node.process = process;
                    node.down_since_ms = None;
                }
                None => {
                    let node = Self::new_member(
                        config,
                        &host_id,
                        disk.tokens.clone(),
                        RingState::Normal,
                        process,
                    );
                    self.nodes.insert(host_id.clone(), node);
                }
            }
            return Ok(Started {
                host_id,
                startup: Startup::Restarted,
                mode: OperationMode::Normal,
                log: std::mem::take(log),
            });
        }

        let host_id = match host_id {
            Some(h) => h,
            None => self.rng.uuid(),
        };
        disk.host_id = Some(host_id.clone());
        if should_bootstrap {
            if disk.bootstrap == BootstrapState::InProgress
                && disk.tokens.len() == config.num_tokens
            {
                log.push("Detected previous bootstrap failure; retrying".into());
            } else {
                disk.tokens = self.new_tokens(config.num_tokens);
            }
            disk.bootstrap = BootstrapState::InProgress;
            let busy = Some(Busy {
                operation: Operation::Bootstrap,
                until_ms: self.now_ms + self.options.timing.bootstrap_ms,
            });
            let process = Self::process(config, OperationMode::Joining, busy);
            if let Some(stale) = &stale {
                self.nodes.remove(stale);
            }
            self.nodes.remove(&host_id);
            let node = Self::new_member(
                config,
                &host_id,
                disk.tokens.clone(),
                RingState::Joining,
                process,
            );
            self.nodes.insert(host_id.clone(), node);
            return Ok(Started {
                host_id,
                startup: Startup::Bootstrapping,
                mode: OperationMode::Joining,
                log: std::mem::take(log),
            });
        }

        // No bootstrap: NORMAL at once, owning ranges without their data.
        if disk.tokens.len() != config.num_tokens {
            disk.tokens = self.new_tokens(config.num_tokens);
        }
        disk.bootstrap = BootstrapState::Completed;
        let process = Self::process(config, OperationMode::Normal, None);
        if let Some(stale) = &stale {
            self.nodes.remove(stale);
        }
        self.nodes.remove(&host_id);
        let node = Self::new_member(
            config,
            &host_id,
            disk.tokens.clone(),
            RingState::Normal,
            process,
        );
        self.nodes.insert(host_id.clone(), node);
        Ok(Started {
            host_id,
            startup: match superseded {
                Some(superseded) => Startup::Superseded { superseded },
                None => Startup::JoinedWithoutBootstrap,
            },
            mode: OperationMode::Normal,
            log: std::mem::take(log),
        })
    }

    // ---- completions ----

    /// Moves the model clock forward by `ms` and completes every operation
    /// due by then, in order of due time.
    pub fn advance(&mut self, ms: u64) -> Vec<Completion> {
        self.now_ms += ms;
        let mut due: Vec<(u64, HostId, Operation)> = self
            .nodes
            .values()
            .filter_map(|n| {
                let busy = n.process.as_ref()?.busy?;
                (busy.until_ms <= self.now_ms)
                    .then(|| (busy.until_ms, n.host_id.clone(), busy.operation))
            })
            .collect();
        due.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        due.into_iter()
            .map(|(_, host_id, operation)| {
                let result = self.finish(&host_id);
                Completion {
                    host_id,
                    operation,
                    result,
                }
            })
            .collect()
    }

    /// Completes the operation `host_id`'s process is in the middle of
    /// (bootstrap, replacement or decommission), whatever the clock says.
    pub fn finish(&mut self, host_id: &str) -> Result<(), RingError> {
        let busy = self.running(host_id)?.busy;
        match busy.map(|b| b.operation) {
            Some(Operation::Bootstrap) => self.finish_bootstrap(host_id),
            Some(Operation::Replace) => self.finish_replace(host_id),
            Some(Operation::Decommission) => self.finish_decommission(host_id),
            None => Err(RingError::NotInProgress {
                host_id: host_id.to_string(),
                operation: "streaming operation",
            }),
        }
    }

    fn set_mode(&mut self, host_id: &str, mode: OperationMode) {
        if let Some(p) = self.nodes.get_mut(host_id).and_then(|n| n.process.as_mut()) {
            p.mode = mode;
            p.busy = None;
        }
    }

    /// A failed bootstrap or replacement: JOINING_FAILED on 5.0, still
    /// JOINING before (`nodetool bootstrap resume` territory).
    fn fail_join(&mut self, host_id: &str, error: RingError) -> Result<(), RingError> {
        let mode = if self.nodes[host_id].version >= Version::V5_0 {
            OperationMode::JoiningFailed
        } else {
            OperationMode::Joining
        };
        self.set_mode(host_id, mode);
        Err(error)
    }

    /// The one source `RangeStreamer` fetches a range from: the live old
    /// replica closest to `to` (same datacenter first, then replica order).
    fn pick_source<'a>(&self, to: &str, candidates: &'a [HostId]) -> Option<&'a HostId> {
        let dc = &self.nodes[to].dc;
        let live: Vec<&HostId> = candidates.iter().filter(|h| self.is_up(h)).collect();
        live.iter()
            .find(|h| &self.nodes[h.as_str()].dc == dc)
            .or(live.first())
            .copied()
    }

    fn finish_bootstrap(&mut self, host_id: &str) -> Result<(), RingError> {
        match self.plan_bootstrap(host_id) {
            Ok(plan) => {
                self.apply_copies(plan);
                self.complete_join(host_id);
                Ok(())
            }
            Err(e) => self.fail_join(host_id, e),
        }
    }

    fn plan_bootstrap(&self, host_id: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() || n.host_id == host_id).then(|| n.tokens.clone()));
        let joining = &self.nodes[host_id];
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let new = after.replicas(&ks.replication, *token);
                if !new.iter().any(|h| h == host_id) {
                    continue;
                }
                let old = before.replicas(&ks.replication, *token);
                // Strict consistency (`cassandra.consistent.rangemovement`):
                // fetch from the replica that loses the range, which must
                // be up.
                let losing: Vec<&HostId> = old.iter().filter(|h| !new.contains(h)).collect();
                let required = losing
                    .iter()
                    .find(|h| self.nodes[h.as_str()].dc == joining.dc)
                    .or(losing.first());
                let source = match required {
                    Some(required) if !self.is_up(required) => {
                        return Err(RingError::SourceDown {
                            address: self.address_of(required),
                        });
                    }
                    Some(required) => Some(*required),
                    None => self.pick_source(host_id, &old),
                };
                match source {
                    Some(s) => {
                        if self.holds(s, &ks.name, key) {
                            plan.push((joining.data_dir.clone(), ks.name.clone(), key.clone()));
                        }
                    }
                    None if old.is_empty() => {}
                    None => {
                        let (start, end) = before.range_of(*token);
                        return Err(RingError::NoSources {
                            keyspace: ks.name.clone(),
                            start,
                            end,
                        });
                    }
                }
            }
        }
        Ok(plan)
    }

    fn complete_join(&mut self, host_id: &str) {
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.state = RingState::Normal;
        node.down_since_ms = None;
        let dir = node.data_dir.clone();
        self.set_mode(host_id, OperationMode::Normal);
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            d.bootstrap = BootstrapState::Completed;
        }
        self.deliver_hints(host_id);
    }

    fn finish_replace(&mut self, host_id: &str) -> Result<(), RingError> {
        let replaced = match &self.nodes[host_id].state {
            RingState::Replacing { replaced } => Some(replaced.clone()),
            _ => None,
        };
        match self.plan_replace(host_id, replaced.as_deref().unwrap_or(host_id)) {
            Ok(plan) => {
                self.apply_copies(plan);
                if let Some(old) = &replaced {
                    self.nodes.remove(old);
                    self.hints.remove(old);
                }
                self.complete_join(host_id);
                Ok(())
            }
            Err(e) => self.fail_join(host_id, e),
        }
    }

    /// `host_id` takes over the ranges of `target` (itself when replacing
    /// at the same address): each range from one live other replica.
    fn plan_replace(&self, host_id: &str, target: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let dir = &self.nodes[host_id].data_dir;
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == target) {
                    continue;
                }
                let others: Vec<HostId> = old.iter().filter(|h| *h != target).cloned().collect();
                match self.pick_source(host_id, &others) {
                    Some(s) => {
                        if self.holds(s, &ks.name, key) {
                            plan.push((dir.clone(), ks.name.clone(), key.clone()));
                        }
                    }
                    // RangeStreamer lets an RF 1 range go (with a warning).
                    None if ks.replication.total_rf() <= 1 => {}
                    None => {
                        let (start, end) = before.range_of(*token);
                        return Err(RingError::NoSources {
                            keyspace: ks.name.clone(),
                            start,
                            end,
                        });
                    }
                }
            }
        }
        Ok(plan)
    }

    // ---- decommission ----

    /// `StorageService.decommission` (`force` is ignored on 3.11, whose
    /// operation has no argument): the checks, then LEAVING. The JMX call
    /// blocks until [`Ring::finish`] (or [`Ring::advance`]) streams the
    /// ranges away.
    pub fn start_decommission(
        &mut self,
        host_id: &str,
        force: bool,
    ) -> Result<DecommissionStart, RingError> {
        let process = self.running(host_id)?.clone();
        let node = &self.nodes[host_id];
        let v5 = node.version >= Version::V5_0;
        let decommissioning = process.busy.map(|b| b.operation) == Some(Operation::Decommission);
        if v5 && (process.mode == OperationMode::Decommissioned || decommissioning) {
            return Ok(DecommissionStart::AlreadyDone);
        }
        if decommissioning {
            return Err(RingError::StillDecommissioning);
        }
        if !matches!(node.state, RingState::Normal | RingState::Leaving) {
            return Err(RingError::NotAMember);
        }
        let others = self
            .nodes
            .values()
            .filter(|n| n.host_id != host_id && n.state == RingState::Normal)
            .count();
        if others == 0 {
            return Err(RingError::NoOtherNormalNodes);
        }
        let allowed = matches!(process.mode, OperationMode::Normal | OperationMode::Leaving)
            || (v5 && process.mode == OperationMode::DecommissionFailed);
        if !allowed {
            return Err(RingError::WrongMode { mode: process.mode });
        }
        if node.version >= Version::V4_0 && !force {
            let members: Vec<&Node> = self.nodes.values().filter(|n| n.is_natural()).collect();
            let refusal = self.keyspaces.values().find_map(|ks| {
                let (rf, nodes) = match &ks.replication {
                    Replication::Simple { replication_factor } => {
                        (*replication_factor, members.len())
                    }
                    Replication::NetworkTopology { .. } => (
                        ks.replication.rf_in(&node.dc),
                        members.iter().filter(|n| n.dc == node.dc).count(),
                    ),
                };
                (rf > 0 && nodes <= rf).then(|| RingError::NotEnoughNodes {
                    keyspace: ks.name.clone(),
                    rf,
                    nodes,
                })
            });
            if let Some(refusal) = refusal {
                // 5.0 marks the failed attempt (DECOMMISSION_FAILED, from
                // which a retry is allowed).
                if v5 {
                    self.set_mode(host_id, OperationMode::DecommissionFailed);
                }
                return Err(refusal);
            }
        }
        let until_ms = self.now_ms + self.options.timing.decommission_ms;
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.state = RingState::Leaving;
        let p = node.process.as_mut().expect("running");
        p.mode = OperationMode::Leaving;
        p.busy = Some(Busy {
            operation: Operation::Decommission,
            until_ms,
        });
        Ok(DecommissionStart::Started { until_ms })
    }

    /// Streams the leaving node's ranges to their new replicas (each gets
    /// the copies the leaving node holds), then the node leaves the ring:
    /// mode DECOMMISSIONED, data directory marked decommissioned. A new
    /// replica that is down fails the stream: DECOMMISSION_FAILED on 5.0,
    /// still LEAVING before.
    fn finish_decommission(&mut self, host_id: &str) -> Result<(), RingError> {
        let plan = match self.plan_decommission(host_id) {
            Ok(plan) => plan,
            Err(e) => {
                let mode = if self.nodes[host_id].version >= Version::V5_0 {
                    OperationMode::DecommissionFailed
                } else {
                    OperationMode::Leaving
                };
                self.set_mode(host_id, mode);
                return Err(e);
            }
        };
        self.apply_copies(plan);
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.state = RingState::Left;
        let dir = node.data_dir.clone();
        self.set_mode(host_id, OperationMode::Decommissioned);
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            d.bootstrap = BootstrapState::Decommissioned;
        }
        self.hints.remove(host_id);
        Ok(())
    }

    fn plan_decommission(&self, host_id: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() && n.host_id != host_id).then(|| n.tokens.clone()));
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == host_id) {
                    continue;
                }
                for new in after.replicas(&ks.replication, *token) {
                    if old.contains(&new) {
                        continue;
                    }
                    if !self.is_up(&new) {
                        return Err(RingError::StreamTargetDown {
                            address: self.address_of(&new),
                        });
                    }
                    if self.holds(host_id, &ks.name, key) {
                        plan.push((
                            self.nodes[&new].data_dir.clone(),
                            ks.name.clone(),
                            key.clone(),
                        ));
                    }
                }
            }
        }
        Ok(plan)
    }

    // ---- other operations ----

    /// `removenode <host id>` run on `coordinator`: the dead member leaves
    /// the ring and each new replica of its ranges fetches from a live
    /// remaining replica. Blocks until done (one step here).
    pub fn remove_node(&mut self, coordinator: &str, target: &str) -> Result<(), RingError> {
        self.running(coordinator)?;
        let Some(node) = self.nodes.get(target) else {
            return Err(RingError::HostIdNotFound);
        };
        if target == coordinator {
            return Err(RingError::RemoveSelf);
        }
        if node.is_up() {
            return Err(RingError::RemoveLive {
                address: node.address.clone(),
            });
        }
        if !node.is_natural() {
            return Err(RingError::RemoveNotMember);
        }
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() && n.host_id != target).then(|| n.tokens.clone()));
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == target) {
                    continue;
                }
                let remaining: Vec<HostId> = old.iter().filter(|h| *h != target).cloned().collect();
                for new in after.replicas(&ks.replication, *token) {
                    if old.contains(&new) || !self.is_up(&new) {
                        continue;
                    }
                    if let Some(s) = self.pick_source(&new, &remaining)
                        && self.holds(s, &ks.name, key)
                    {
                        plan.push((
                            self.nodes[&new].data_dir.clone(),
                            ks.name.clone(),
                            key.clone(),
                        ));
                    }
                }
            }
        }
        self.apply_copies(plan);
        self.nodes.remove(target);
        self.hints.remove(target);
        Ok(())
    }

    /// The process dies (kill -9, OOM, Pod deleted): the member stays in the
    /// ring, down; its data directory is kept. An operation in progress is
    /// abandoned where it was.
    pub fn kill(&mut self, host_id: &str) -> Result<(), RingError> {
        let now = self.now_ms;
        let node = self
            .nodes
            .get_mut(host_id)
            .ok_or_else(|| RingError::UnknownNode {
                host_id: host_id.to_string(),
            })?;
        if node.process.take().is_some() && node.down_since_ms.is_none() {
            node.down_since_ms = Some(now);
        }
        if node.state == RingState::Left {
            // Gossip forgets a departed member once its process is gone.
            self.nodes.remove(host_id);
        }
        Ok(())
    }

    /// The disk is lost (local SSD gone, PVC deleted): the process on it
    /// dies and every copy, the host ID and the bootstrap state go with it.
    pub fn wipe_data_dir(&mut self, data_dir: &str) {
        let running: Vec<HostId> = self
            .nodes
            .values()
            .filter(|n| n.data_dir == data_dir && n.process.is_some())
            .map(|n| n.host_id.clone())
            .collect();
        for h in running {
            let _ = self.kill(&h);
        }
        self.data_dirs.remove(data_dir);
    }

    /// `nodetool drain`: DRAINED; gossip stops, so the others see it down.
    pub fn drain(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        let now = self.now_ms;
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.down_since_ms.get_or_insert(now);
        let p = node.process.as_mut().expect("running");
        p.mode = OperationMode::Drained;
        p.busy = None;
        Ok(())
    }

    /// `nodetool repair` of `host_id`'s ranges: for every key it
    /// replicates, each live replica gets the copy if any live replica has
    /// it.
    pub fn repair(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        let map = self.natural_map();
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let replicas = map.replicas(&ks.replication, *token);
                if !replicas.iter().any(|h| h == host_id) {
                    continue;
                }
                let live: Vec<&HostId> = replicas.iter().filter(|h| self.is_up(h)).collect();
                if !live.iter().any(|h| self.holds(h, &ks.name, key)) {
                    continue;
                }
                for h in live {
                    plan.push((self.nodes[h].data_dir.clone(), ks.name.clone(), key.clone()));
                }
            }
        }
        self.apply_copies(plan);
        Ok(())
    }

    /// `nodetool cleanup`: drops the copies of keys `host_id` no longer
    /// replicates.
    pub fn cleanup(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        let map = self.natural_map();
        let dir = self.nodes[host_id].data_dir.clone();
        let mut drop: Vec<(String, String)> = Vec::new();
        if let Some(d) = self.data_dirs.get(&dir) {
            for (ks, keys) in &d.copies {
                let Some(keyspace) = self.keyspaces.get(ks) else {
                    continue;
                };
                for key in keys {
                    let token = token_of(key.as_bytes());
                    if !map
                        .replicas(&keyspace.replication, token)
                        .iter()
                        .any(|h| h == host_id)
                    {
                        drop.push((ks.clone(), key.clone()));
                    }
                }
            }
        }
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            for (ks, key) in drop {
                if let Some(keys) = d.copies.get_mut(&ks) {
                    keys.remove(&key);
                }
            }
        }
        Ok(())
    }
}

impl Serialize for Ring {
    /// The whole state, as `GET /sim/ring` serves it: members, data
    /// directories (with copy counts), keyspaces (with key counts), the
    /// status table and the data check.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        view::snapshot(self).serialize(s)
    }
}
