//! Gossip as each node sees it: generations, heartbeats, the `STATUS` a
//! member gossips, and the lag with which one node's failure detector marks
//! a (re)started peer UP. Pure, like the rest of the model.
//!
//! The global truth ([`Node::is_up`]) says whether a member's process runs
//! and gossips; it decides data availability (writes, streaming sources,
//! `kubesim ring`). What one node *sees* lags behind it, as in Cassandra:
//! a restarted process gossips under a new generation (its start in epoch
//! seconds, above every earlier one of its host ID:
//! `SystemKeyspace.incrementAndGetGeneration` takes max(stored + 1, now)),
//! and each peer marks it UP only once gossip reached it and the echo came
//! back (`Gossiper.applyStateLocally` → `handleMajorStateChange` →
//! `markAlive`), a second or so later, per peer; the restarted node itself
//! sees the others DOWN until it heard from them. Until it hears of the new
//! process, a peer still holds the old generation, heartbeat and status.
//! Going down is seen at once (a drained or stopped node announces its
//! shutdown; a killed one is convicted by the kubelet's report).

use serde::{Deserialize, Serialize};

use super::*;

/// `HeartBeatState.forceHighestPossibleVersionUnsafe`: the heartbeat a
/// peer records for a node that announced its shutdown
/// (`Gossiper.markAsShutdown`, 3.11 to 5.0).
pub const HEARTBEAT_SHUTDOWN: i64 = i32::MAX as i64;

/// Versions of the application states a process sets while it starts come
/// from one counter (`VersionGenerator`), as do its heartbeats: the model
/// gives the startup states fixed versions below this, the first `STATUS`
/// [`INITIAL_STATUS_VERSION`], and the heartbeat of each gossip round (one
/// a second) this plus 4 per second, leaving room between two heartbeats
/// for the versions of a status change (`TOKENS`, `STATUS_WITH_PORT`,
/// `STATUS`, set together).
pub const STARTUP_VERSIONS: i64 = 24;

/// The version of the `STATUS` (4.x: `STATUS_WITH_PORT`) a process
/// announced as it started; `TOKENS` is one less, 4.x's `STATUS` one more.
pub const INITIAL_STATUS_VERSION: i64 = 20;

/// How long after a status change a peer that left gossip is forgotten
/// (`Gossiper.aVeryLongTime`, 3 days): the expiry in `LEFT,<token>,<ms>`.
const VERY_LONG_TIME_MS: i64 = 3 * 24 * 3600 * 1000;

/// What one node's gossip holds of one member (`EndpointState`), without
/// the form each product writes it in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GossipEndpoint {
    /// The generation of the member's process as this node last heard it.
    pub generation: i64,
    /// Its heartbeat version as last heard.
    pub heartbeat: i64,
    pub status: GossipStatus,
    pub status_version: i64,
    /// When this node last updated the state (epoch milliseconds).
    pub updated_ms: i64,
    /// `RELEASE_VERSION`.
    pub release: String,
    /// `NET_VERSION`.
    pub messaging_version: u32,
    /// `RPC_READY`: the native transport serves.
    pub rpc_ready: bool,
}

/// One running member's view of the ring: what [`Ring::gossip_views`]
/// gives to a test watcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GossipView {
    pub host_id: HostId,
    pub address: String,
    /// Its own process's generation.
    pub generation: i64,
    /// Address -> generation of every member it sees UP (itself included).
    pub up: BTreeMap<String, i64>,
    /// Address -> generation (as it last heard) of every member it knows
    /// and sees DOWN.
    pub down: BTreeMap<String, i64>,
}

impl std::fmt::Display for GossipView {
    /// `10.0.0.1 (generation G): UP 10.0.0.1@G 10.0.0.2@G2; DOWN 10.0.0.3@G3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |m: &BTreeMap<String, i64>| {
            let items: Vec<String> = m.iter().map(|(a, g)| format!("{a}@{g}")).collect();
            if items.is_empty() {
                "-".to_string()
            } else {
                items.join(" ")
            }
        };
        write!(
            f,
            "{} (generation {}): UP {}; DOWN {}",
            self.address,
            self.generation,
            list(&self.up),
            list(&self.down)
        )
    }
}

impl Ring {
    /// The generation the process starting now for `host_id` gossips
    /// under: max(previous + 1, now in epoch seconds), the previous one
    /// being the data directory's or the member's last.
    pub(super) fn next_generation(&self, host_id: &str, stored: Option<i64>) -> i64 {
        let now = self.options.epoch_s + (self.now_ms / 1000) as i64;
        let node = self.nodes.get(host_id);
        let previous = [
            stored,
            node.and_then(|n| n.last_process.as_ref().map(|p| p.generation)),
            node.and_then(|n| n.process.as_ref().map(|p| p.generation))
                .filter(|g| *g > 0),
        ]
        .into_iter()
        .flatten()
        .max();
        match previous {
            Some(p) => now.max(p + 1),
            None => now,
        }
    }

    /// The process of `host_id` that just started begins to gossip, under
    /// its data directory's new generation.
    pub(super) fn begin_gossip(&mut self, host_id: &str) {
        let now = self.now_ms;
        let Some(node) = self.nodes.get(host_id) else {
            return;
        };
        let generation = self
            .data_dirs
            .get(&node.data_dir)
            .and_then(|d| d.generation)
            .unwrap_or(self.options.epoch_s);
        if let Some(p) = self.nodes.get_mut(host_id).and_then(|n| n.process.as_mut()) {
            p.generation = generation;
            p.started_ms = now;
            p.up_since_ms = now;
            p.status_since_ms = now;
        }
    }

    /// The generation of `host_id`'s process, or of its last one when none
    /// runs.
    pub fn generation(&self, host_id: &str) -> Option<i64> {
        let node = self.nodes.get(host_id)?;
        node.process
            .as_ref()
            .map(|p| p.generation)
            .or_else(|| node.last_process.as_ref().map(|p| p.generation))
    }

    /// How long gossip takes to tell `observer` of `subject`'s process of
    /// `generation`: between half [`Timing::gossip_lag_ms`] and all of it,
    /// fixed per (observer, subject, generation).
    pub fn gossip_lag(&self, observer: &str, subject: &str, generation: i64) -> u64 {
        let lag = self.options.timing.gossip_lag_ms;
        let half = lag / 2;
        // FNV-1a: deterministic across runs and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in observer
            .bytes()
            .chain([0])
            .chain(subject.bytes())
            .chain([0])
            .chain(generation.to_le_bytes())
        {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        half + h % (lag - half + 1)
    }

    /// Whether `observer`'s failure detector has `subject` UP: a node sees
    /// itself up while it runs; another member once its process gossips
    /// ([`Node::is_up`]) and the lag has passed since it came up or since
    /// the observer started, whichever is later. Nothing, for an observer
    /// that does not run.
    pub fn sees_up(&self, observer: &str, subject: &str) -> bool {
        let (Some(o), Some(s)) = (self.nodes.get(observer), self.nodes.get(subject)) else {
            return false;
        };
        let Some(op) = &o.process else {
            return false;
        };
        if observer == subject {
            return true;
        }
        let Some(sp) = &s.process else {
            return false;
        };
        if self
            .gossip_cuts
            .contains(&(observer.to_string(), subject.to_string()))
        {
            return false;
        }
        s.is_up()
            && self.now_ms
                >= sp.up_since_ms.max(op.started_ms)
                    + self.gossip_lag(observer, subject, sp.generation)
    }

    /// Cuts (or, with `cut` false, heals) the network from `observer` to
    /// `subject`: as in Cassandra, where a node marks a peer alive only when
    /// its echo to it returns (`Gossiper.markAlive`), the observer keeps
    /// hearing of the subject through the others but sees it DOWN until
    /// healed. A NetworkPolicy, a conntrack or MTU problem between two
    /// Nodes does this to real clusters.
    pub fn cut_gossip(&mut self, observer: &str, subject: &str, cut: bool) {
        let pair = (observer.to_string(), subject.to_string());
        if cut {
            self.gossip_cuts.insert(pair);
        } else {
            self.gossip_cuts.remove(&pair);
        }
    }

    /// Whether `observer` has heard of `subject`'s current process at all
    /// (UP or not: a hibernating or drained one gossips its state too).
    fn heard_current(&self, o: &Node, s: &Node) -> bool {
        let Some(sp) = &s.process else {
            return false;
        };
        if o.host_id == s.host_id {
            return true;
        }
        let since = o
            .process
            .as_ref()
            .map_or(sp.started_ms, |op| sp.started_ms.max(op.started_ms));
        self.now_ms >= since + self.gossip_lag(&o.host_id, &s.host_id, sp.generation)
    }

    fn epoch_ms(&self, model_ms: u64) -> i64 {
        self.options.epoch_s * 1000 + model_ms as i64
    }

    /// The heartbeat version of `p` at model time `at`.
    fn heartbeat_at(p: &Process, at: u64) -> i64 {
        STARTUP_VERSIONS + 4 * (at.saturating_sub(p.started_ms) / 1000) as i64
    }

    fn status_version(p: &Process) -> i64 {
        if p.status_since_ms == p.started_ms {
            INITIAL_STATUS_VERSION
        } else {
            Self::heartbeat_at(p, p.status_since_ms) + 2
        }
    }

    fn shutdown_announced(p: &Process) -> bool {
        matches!(p.mode, OperationMode::Draining | OperationMode::Drained)
    }

    /// The `STATUS` `node` gossips now (`StorageService`'s
    /// `VersionedValueFactory`: `normal`, `bootstrapping`, `bootReplacing`,
    /// `hibernate`, `leaving`, `left`, `shutdown`).
    fn gossip_status(&self, node: &Node) -> GossipStatus {
        let token = node
            .tokens
            .first()
            .map(ToString::to_string)
            .unwrap_or_default();
        let left = |p: Option<&Process>| GossipStatus::Left {
            token: token.clone(),
            expire_ms: self.epoch_ms(p.map_or(self.now_ms, |p| p.status_since_ms))
                + VERY_LONG_TIME_MS,
        };
        let process = node.process.as_ref();
        match process.map(|p| p.mode) {
            Some(OperationMode::Draining | OperationMode::Drained) => GossipStatus::Shutdown,
            Some(OperationMode::Decommissioned) => left(process),
            _ => match &node.state {
                RingState::Joining => GossipStatus::Boot { token },
                RingState::Replacing { replaced } => GossipStatus::BootReplace {
                    replaced: self.address_of(replaced),
                },
                RingState::Hibernating => GossipStatus::Hibernate,
                RingState::Normal => GossipStatus::Normal { token },
                RingState::Leaving => GossipStatus::Leaving { token },
                RingState::Left => left(process),
            },
        }
    }

    /// What gossip keeps of `host_id`'s running process as it ends now.
    pub(super) fn ended_process(&self, host_id: &str) -> Option<EndedProcess> {
        let node = self.nodes.get(host_id)?;
        let p = node.process.as_ref()?;
        let shutdown = Self::shutdown_announced(p);
        Some(EndedProcess {
            generation: p.generation,
            heartbeat: if shutdown {
                HEARTBEAT_SHUTDOWN
            } else {
                Self::heartbeat_at(p, self.now_ms)
            },
            status: self.gossip_status(node),
            status_version: Self::status_version(p),
            ended_ms: if shutdown {
                p.status_since_ms
            } else {
                self.now_ms
            },
        })
    }

    /// What `observer`'s gossip holds of `subject`: its current process
    /// once the observer heard of it, else the last one it heard of.
    /// `None` when either is unknown.
    pub fn endpoint_state(&self, observer: &str, subject: &str) -> Option<GossipEndpoint> {
        let o = self.nodes.get(observer)?;
        let s = self.nodes.get(subject)?;
        let common = |generation, heartbeat, status, status_version, updated_ms| GossipEndpoint {
            generation,
            heartbeat,
            status,
            status_version,
            updated_ms,
            release: s.release.clone(),
            messaging_version: s.messaging_version,
            rpc_ready: false,
        };
        let last = s.last_process.as_ref();
        let current = s
            .process
            .as_ref()
            .filter(|_| last.is_none() || self.heard_current(o, s));
        match (current, last) {
            (Some(sp), _) => {
                let shutdown = Self::shutdown_announced(sp);
                let heartbeat = if shutdown && observer != subject {
                    HEARTBEAT_SHUTDOWN
                } else {
                    Self::heartbeat_at(sp, self.now_ms)
                };
                let updated = if shutdown {
                    sp.status_since_ms
                } else {
                    self.now_ms
                };
                Some(GossipEndpoint {
                    rpc_ready: sp.mode == OperationMode::Normal,
                    ..common(
                        sp.generation,
                        heartbeat,
                        self.gossip_status(s),
                        Self::status_version(sp),
                        self.epoch_ms(updated),
                    )
                })
            }
            (_, Some(last)) => Some(common(
                last.generation,
                last.heartbeat,
                last.status.clone(),
                last.status_version,
                self.epoch_ms(last.ended_ms),
            )),
            (None, None) => None,
        }
    }

    /// Every running member's view: whom it sees UP and DOWN, with the
    /// generations it knows (members that left are not listed).
    pub fn gossip_views(&self) -> Vec<GossipView> {
        self.nodes
            .values()
            .filter_map(|o| {
                let generation = o.process.as_ref()?.generation;
                let mut up = BTreeMap::new();
                let mut down = BTreeMap::new();
                for s in self.nodes.values().filter(|n| n.state != RingState::Left) {
                    let Some(known) = self.endpoint_state(&o.host_id, &s.host_id) else {
                        continue;
                    };
                    if self.sees_up(&o.host_id, &s.host_id) {
                        up.insert(s.address.clone(), known.generation);
                    } else {
                        down.entry(s.address.clone()).or_insert(known.generation);
                    }
                }
                // An address a running member holds is not also DOWN.
                down.retain(|a, _| !up.contains_key(a));
                Some(GossipView {
                    host_id: o.host_id.clone(),
                    address: o.address.clone(),
                    generation,
                    up,
                    down,
                })
            })
            .collect()
    }

    /// Where the running members disagree with "every member is UP at its
    /// current generation": one line per (observer, member) that is not,
    /// empty when all agree. What a rolling restart waits for before it
    /// takes the next member down.
    pub fn gossip_disagreements(&self) -> Vec<String> {
        self.gossip_disagreements_besides(None)
    }

    /// [`Ring::gossip_disagreements`] with the member at address `aside`
    /// left out, as observer and as subject: the one a roll is taking down
    /// (its own drain is no disagreement).
    pub fn gossip_disagreements_besides(&self, aside: Option<&str>) -> Vec<String> {
        let members: Vec<&Node> = self
            .nodes
            .values()
            .filter(|n| n.state != RingState::Left && Some(n.address.as_str()) != aside)
            .collect();
        let mut out = Vec::new();
        for view in self
            .gossip_views()
            .into_iter()
            .filter(|v| Some(v.address.as_str()) != aside)
        {
            for m in &members {
                let current = self.generation(&m.host_id).unwrap_or_default();
                match view.up.get(&m.address) {
                    Some(g) if *g == current => {}
                    Some(g) => out.push(format!(
                        "{} sees {} UP at generation {g}, not {current}",
                        view.address, m.address
                    )),
                    None => out.push(format!("{} sees {} DOWN", view.address, m.address)),
                }
            }
        }
        out
    }
}
