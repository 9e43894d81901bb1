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
//!
//! The files: this one holds [`Ring`], its constructor, its queries and
//! token maps and the data path (keyspaces, writes, hints); `types.rs` the
//! plain types (members, data directories, configuration, outcomes and
//! errors, re-exported here); `join.rs` startup, bootstrap, replacement and
//! the completions ([`Ring::advance`], [`Ring::finish`]); `leave.rs`
//! decommission, removenode, kill, disk wipe, drain, repair and cleanup;
//! `gossip.rs` generations and what each node sees of the others (the
//! lagging per-node view); `murmur3.rs` and `placement.rs` tokens and
//! replica placement; `view.rs`
//! the status table, the data check and the snapshot; `tests.rs` the rules
//! and scenarios at model level, `tests_rules.rs` the startup and schema
//! rules per Cassandra version, `tests_token_allocation.rs` the token
//! allocator's refusal of too few racks.

mod gossip;
mod join;
mod leave;
mod maintenance;
mod murmur3;
mod placement;
mod types;
mod view;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gossip;
#[cfg(test)]
mod tests_maintenance;
#[cfg(test)]
mod tests_rules;
#[cfg(test)]
mod tests_token_allocation;

use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};

pub use gossip::{
    GossipEndpoint, GossipView, HEARTBEAT_SHUTDOWN, INITIAL_STATUS_VERSION, STARTUP_VERSIONS,
};
pub use maintenance::{
    CleanupStart, Maintenance, OpEnd, OpState, RepairStart, RunningOp, TokenRange, parse_ranges,
    range_contains, range_contains_range, range_text, ranges_intersect,
};
pub use murmur3::{Rng, Token, hash3_x64_128, token_of};
pub use placement::{Endpoint, Replication, TokenMap};
pub use types::{
    BootstrapState, Busy, Completion, Consistency, DEFAULT_EPOCH_S, DataDir, DecommissionStart,
    EndedProcess, GossipStatus, HostId, Keyspace, Node, NodeConfig, Operation, OperationMode,
    Options, Process, RingError, RingState, SYSTEM_KEYSPACES, Started, Startup,
    StorageCompatibility, Timing, Version,
};
pub use view::{
    BYTES_PER_COPY, CheckReport, KeyReport, NodeStatus, ReplicaCopy, StatusRow, StatusTable,
    stringify_size,
};

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
    /// (observer, subject) host IDs between which the network fails: the
    /// observer hears of the subject through others, but its echo to it
    /// never returns, so its failure detector never marks it UP.
    gossip_cuts: BTreeSet<(HostId, HostId)>,
    /// The maintenance operations running, by id ([`maintenance`]).
    maintenance: BTreeMap<u64, RunningOp>,
    /// How the ended ones ended.
    maintenance_ended: BTreeMap<u64, OpEnd>,
    /// Every one started, in order.
    maintenance_log: Vec<RunningOp>,
    next_op: u64,
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
            gossip_cuts: BTreeSet::new(),
            data_dirs: BTreeMap::new(),
            keyspaces: BTreeMap::new(),
            hints: BTreeMap::new(),
            maintenance: BTreeMap::new(),
            maintenance_ended: BTreeMap::new(),
            maintenance_log: Vec::new(),
            next_op: 0,
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

    /// Addresses of the members whose process gossips (the global truth;
    /// one node's `LiveNodes` lags: [`Ring::sees_up`]).
    pub fn live_nodes(&self) -> Vec<String> {
        self.addresses(|n| n.is_up())
    }

    /// Addresses of the members whose process does not gossip (the global
    /// truth; one node's `UnreachableNodes` lags: [`Ring::sees_up`]).
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

    /// `ALTER KEYSPACE ... WITH replication = ...`: the new replication
    /// applies at once and nothing streams (the schema change alone moves
    /// no data: `nodetool repair` must copy the keys to their new
    /// replicas, and `nodetool cleanup` drop the ones a node no longer
    /// owns), so raising the factor leaves every key under-replicated
    /// until a repair (cql3/statements/schema/AlterKeyspaceStatement.java).
    pub fn alter_keyspace(
        &mut self,
        name: &str,
        replication: Replication,
    ) -> Result<(), RingError> {
        match self.keyspaces.get_mut(name) {
            Some(ks) => {
                ks.replication = replication;
                Ok(())
            }
            None => Err(RingError::UnknownKeyspace {
                keyspace: name.to_string(),
            }),
        }
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
}

impl Serialize for Ring {
    /// The whole state, as `GET /sim/ring` serves it: members, data
    /// directories (with copy counts), keyspaces (with key counts), the
    /// status table and the data check.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        view::snapshot(self).serialize(s)
    }
}
