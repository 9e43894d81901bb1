//! The plain types of the ring model: versions, modes and states, members
//! and their data directories, keyspaces, node configuration, timing and
//! options, consistency levels, the outcomes of operations and the errors.
//! Pure: data and small helpers, no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Serialize, Serializer};

use super::{Endpoint, Replication, Token};

// For the intra-doc links to `Ring`'s methods.
#[cfg(doc)]
use super::Ring;

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

/// `storage_compatibility_mode` of Cassandra 5.0 (`StorageCompatibilityMode`;
/// the 5.0 cassandra.yaml ships `CASSANDRA_4`, which is also the default
/// when the key is absent): under `CASSANDRA_4` a 5.0 node keeps the 4.x
/// messaging version and writes `nb` sstables, as 4.x does (so what 4.x
/// left is not old); `UPGRADING` and `NONE` move it to messaging version 13
/// and `oa`. Before 5.0 the setting does not exist: 4.x refuses to start on
/// a cassandra.yaml that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StorageCompatibility {
    #[default]
    Cassandra4,
    Upgrading,
    None,
}

impl StorageCompatibility {
    /// The setting's value as cassandra.yaml spells it.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "CASSANDRA_4" => Some(StorageCompatibility::Cassandra4),
            "UPGRADING" => Some(StorageCompatibility::Upgrading),
            "NONE" => Some(StorageCompatibility::None),
            _ => None,
        }
    }
}

impl Version {
    /// `MessagingService.current_version`, which is also the only version
    /// a node streams at (`accept_streaming = (current, current)` in 4.0+;
    /// 3.11's `IncomingStreamingConnection` wants `StreamMessage.CURRENT_VERSION`):
    /// 3.0/3.11 `VERSION_3014` (11), 4.x `VERSION_40` (12), 5.0
    /// `VERSION_40` under `CASSANDRA_4` and `VERSION_50` (13) otherwise
    /// (`MessagingService.Version.CURRENT = isBefore(5) ? VERSION_40 :
    /// VERSION_50`; `UPGRADING` is `Integer.MAX_VALUE - 1`, not before 5).
    pub fn messaging_version(self, compatibility: StorageCompatibility) -> u32 {
        match self.major {
            0..=3 => 11,
            4 => 12,
            _ if compatibility == StorageCompatibility::Cassandra4 => 12,
            _ => 13,
        }
    }

    /// The sstable version a node of this line writes (`BigVersion.current_version`,
    /// `BtiVersion` for `sstable: selected_format: bti`): 3.11 `me` (3.11.11+),
    /// 4.0/4.1 `nb`, 5.0 `nb` under `CASSANDRA_4` (5.0's `BigVersion` has
    /// `nb` as its current version while the mode is before 5; there is no
    /// `nc`, in 5.0.3 as in 5.0.8) and `oa` otherwise, or `da` in the
    /// trie-indexed format (which `CASSANDRA_4` refuses).
    pub fn sstable_version(self, compatibility: StorageCompatibility, bti: bool) -> &'static str {
        match self.major {
            0..=3 => "me",
            4 => "nb",
            _ if bti => "da",
            _ if compatibility == StorageCompatibility::Cassandra4 => "nb",
            _ => "oa",
        }
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
    /// Its gossip generation: seconds since the epoch at its start, above
    /// every earlier one of its host ID (`SystemKeyspace.incrementAndGetGeneration`).
    pub generation: i64,
    /// Model time it started (began gossiping).
    pub started_ms: u64,
    /// Model time from which the others may mark it UP: its start, or the
    /// end of its hibernation (a replacement at the same address).
    pub up_since_ms: u64,
    /// Model time its gossip `STATUS` last changed.
    pub status_since_ms: u64,
}

/// What gossip last heard of a member's process that is gone: a peer that
/// has not yet heard of its next process still holds this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndedProcess {
    pub generation: i64,
    /// Its last heartbeat version (`Integer.MAX_VALUE` once it announced its
    /// shutdown).
    pub heartbeat: i64,
    /// Its last `STATUS`, and the version of it.
    pub status: GossipStatus,
    pub status_version: i64,
    /// Model time it ended (killed) or announced its shutdown.
    pub ended_ms: u64,
}

/// A member's gossip `STATUS` (`VersionedValue`: `NORMAL,<token>`, ...),
/// without the form each line and product writes it in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GossipStatus {
    /// `BOOT,<first token>`.
    Boot { token: String },
    /// `BOOT_REPLACE,<replaced address>`.
    BootReplace { replaced: String },
    /// `hibernate,true` (replacing a dead member at its own address).
    Hibernate,
    /// `NORMAL,<first token>`.
    Normal { token: String },
    /// `LEAVING,<first token>`.
    Leaving { token: String },
    /// `LEFT,<first token>,<expire time in epoch ms>`.
    Left { token: String, expire_ms: i64 },
    /// `shutdown,true` (drained, or stopped cleanly).
    #[default]
    Shutdown,
}

impl GossipStatus {
    /// The value as Cassandra and ScyllaDB gossip it (`STATUS`); `port`
    /// is added to a replaced address (`STATUS_WITH_PORT`).
    pub fn value(&self, port: Option<u16>) -> String {
        match self {
            GossipStatus::Boot { token } => format!("BOOT,{token}"),
            GossipStatus::BootReplace { replaced } => match port {
                Some(p) => format!("BOOT_REPLACE,{replaced}:{p}"),
                None => format!("BOOT_REPLACE,{replaced}"),
            },
            GossipStatus::Hibernate => "hibernate,true".to_string(),
            GossipStatus::Normal { token } => format!("NORMAL,{token}"),
            GossipStatus::Leaving { token } => format!("LEAVING,{token}"),
            GossipStatus::Left { token, expire_ms } => format!("LEFT,{token},{expire_ms}"),
            GossipStatus::Shutdown => "shutdown,true".to_string(),
        }
    }
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
    /// The release it runs (`ReleaseVersion`, e.g. `4.1.8`).
    pub release: String,
    /// The messaging (and streaming) version it speaks
    /// ([`Version::messaging_version`]).
    pub messaging_version: u32,
    /// The data directory the member runs (or last ran) on.
    pub data_dir: String,
    /// `None` when the process is not running.
    pub process: Option<Process>,
    /// Model time at which it went down (for the hint window).
    pub down_since_ms: Option<u64>,
    /// Its last process that ended, as gossip last heard of it.
    pub last_process: Option<EndedProcess>,
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
    pub(super) fn is_natural(&self) -> bool {
        matches!(
            self.state,
            RingState::Normal | RingState::Leaving | RingState::Hibernating
        )
    }

    pub(super) fn endpoint(&self) -> Endpoint {
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
    /// The release line of the last node that ran on it: what its system
    /// tables and newest sstables were written by.
    pub written_by: Option<Version>,
    /// The gossip generation of the last process that ran on it
    /// (`system.local.gossip_generation`).
    pub generation: Option<i64>,
}

impl DataDir {
    pub(super) fn empty(id: &str) -> Self {
        DataDir {
            id: id.to_string(),
            cluster_name: None,
            host_id: None,
            tokens: Vec::new(),
            bootstrap: BootstrapState::NeedsBootstrap,
            copies: BTreeMap::new(),
            written_by: None,
            generation: None,
        }
    }

    pub fn holds(&self, keyspace: &str, key: &str) -> bool {
        self.copies.get(keyspace).is_some_and(|k| k.contains(key))
    }

    pub fn copy_count(&self) -> usize {
        self.copies.values().map(BTreeSet::len).sum()
    }

    pub(super) fn add(&mut self, keyspace: &str, key: &str) {
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
    /// The full release (`4.1.8`); the line's `major.minor` when None.
    pub release: Option<String>,
    /// `storage_compatibility_mode` (5.0).
    pub storage_compatibility: StorageCompatibility,
    /// `allocate_tokens_for_local_replication_factor` (4.0+; the 4.1 and
    /// 5.0 default files set 3): with it, a node that picks new tokens
    /// runs the token allocator, which refuses a datacenter of more racks
    /// than one but fewer than this factor ([`RingError::TokenAllocation`]).
    /// None: random tokens, no rule (3.11, or a file without the key).
    pub allocate_tokens_for_local_replication_factor: Option<u32>,
    /// Identity of the data directory the process runs on.
    pub data_dir: String,
}

impl NodeConfig {
    /// A 4.1 node with 16 tokens and auto_bootstrap, as the default
    /// cassandra.yaml of 4.x configures it, but without its token
    /// allocator (`allocate_tokens_for_local_replication_factor`): random
    /// tokens, whatever the racks.
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
            release: None,
            storage_compatibility: StorageCompatibility::default(),
            allocate_tokens_for_local_replication_factor: None,
            data_dir: data_dir.to_string(),
        }
    }

    /// The release the node runs.
    pub fn release(&self) -> String {
        self.release
            .clone()
            .unwrap_or_else(|| self.version.to_string())
    }

    /// The messaging version the node will speak.
    pub fn messaging_version(&self) -> u32 {
        self.version.messaging_version(self.storage_compatibility)
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
    /// How long gossip takes, at most, to tell a node that a peer
    /// (re)started: each observer marks it UP after a lag between half
    /// this and this, its own per (observer, peer, generation). Going down
    /// is seen at once.
    pub gossip_lag_ms: u64,
    /// How long a `cleanup` of one keyspace runs (issue 33).
    pub cleanup_ms: u64,
    /// How long an `upgradesstables` of one keyspace with old-format files
    /// runs.
    pub upgrade_ms: u64,
    /// How long a repair command runs per range it repairs.
    pub repair_ms: u64,
    /// How long a repair command waits in the repair executor's queue
    /// before it runs (its status is null meanwhile).
    pub repair_queue_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            bootstrap_ms: 2_000,
            replace_ms: 2_000,
            decommission_ms: 2_000,
            max_hint_window_ms: 3 * 3600 * 1000,
            gossip_lag_ms: 1_000,
            cleanup_ms: 300,
            upgrade_ms: 300,
            repair_ms: 100,
            repair_queue_ms: 200,
        }
    }
}

/// The default [`Options::epoch_s`] (2023-11-14).
pub const DEFAULT_EPOCH_S: i64 = 1_700_000_000;

/// How a ring is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Seed of the random source for tokens and host IDs.
    pub seed: u64,
    pub timing: Timing,
    /// Create Cassandra's replicated system keyspaces ([`SYSTEM_KEYSPACES`]).
    pub system_keyspaces: bool,
    /// The epoch second the model clock's zero stands for: gossip
    /// generations are this plus the model's seconds.
    pub epoch_s: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            timing: Timing::default(),
            system_keyspaces: true,
            epoch_s: DEFAULT_EPOCH_S,
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
    pub(super) fn block_for(self, rf: usize) -> usize {
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
    /// StartupChecks.checkSSTablesFormat: a data directory written by a
    /// newer major, or by one the running version no longer reads.
    #[error(
        "Detected unreadable sstables in {data_dir} (written by Cassandra {written}, this is {running}), please check NEWS.txt and ensure that you have upgraded through all required intermediate versions, running upgradesstables"
    )]
    UnreadableSstables {
        data_dir: String,
        written: Version,
        running: Version,
    },
    #[error("Unable to gossip with any peers")]
    NoSeedReachable,
    #[error(
        "This node was decommissioned and will not rejoin the ring unless -Dcassandra.override_decommission=true has been set, or all existing data is removed and the node is bootstrapped again"
    )]
    Decommissioned,
    #[error("Cannot change the number of tokens from {from} to {to}")]
    TokenCountChanged { from: usize, to: usize },
    /// The token allocator's refusal (`TokenAllocation.createStrategy`, a
    /// `ConfigurationException` of 4.0 to 5.0): `racks` racks of the
    /// joining node's datacenter `dc` own tokens, its own rack among them,
    /// more than one but fewer than the factor `rf`.
    #[error(
        "Token allocation failed: the number of racks {racks} in datacenter {dc} is lower than its replication factor {rf}."
    )]
    TokenAllocation { racks: usize, dc: String, rf: u32 },
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
    #[error("Cleanup of the system keyspace is neither necessary nor wise")]
    CleanupSystemKeyspace,
    #[error("Node is involved in cluster membership changes. Not safe to run cleanup.")]
    CleanupPendingRanges,
    #[error("Cannot proceed on repair because a neighbor ({address}) is dead: session failed")]
    RepairNeighborDown { address: String },
    /// `RepairOption.parse`'s refusal of the options (an
    /// `IllegalArgumentException` at the call).
    #[error("{message}")]
    RepairOption { message: String },
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
    /// A stream session whose two ends speak different messaging versions:
    /// the receiving side refuses the handshake (4.0+
    /// `InboundConnectionInitiator`: "peer ... only supports messaging
    /// versions lower/higher (..) than this node supports (..)"; a pre-4.0
    /// peer: "Received stream using protocol version .. (my version ..).
    /// Terminating connection"), the session fails ("Stream failed") and
    /// with it the operation, as `StorageService` reports it ("Error during
    /// bootstrap: ", "Error while decommissioning node: "). Streaming
    /// between majors is not supported (the upgrade guides; CASSANDRA-19211:
    /// "Repair (and streaming in general) are not supported when multiple
    /// major versions are running in the cluster").
    #[error(
        "{prefix}Stream failed: peer {peer} only supports messaging versions {direction} ({peer_version}) than this node supports ({own_version})",
        prefix = match operation {
            Operation::Decommission => "Error while decommissioning node: ",
            Operation::Bootstrap | Operation::Replace => "Error during bootstrap: ",
        },
        direction = if peer_version < own_version { "lower" } else { "higher" }
    )]
    StreamVersionMismatch {
        operation: Operation,
        peer: String,
        peer_version: u32,
        own_version: u32,
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
