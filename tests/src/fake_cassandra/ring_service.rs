//! The ring service: the [`Ring`]s of the fake Cassandra nodes, one per
//! Cassandra cluster, which kubesim serves under `/sim/ring` (DESIGN.md
//! section 7). Cassandra keeps clusters apart by name: gossip drops a
//! message whose cluster name is not its own (`GossipDigestSynVerbHandler`:
//! "ClusterName mismatch"), so a node only ever meets the members of the
//! cluster it is configured for, and each cluster has its own ring, data and
//! data check. A node starts in the ring of its `cluster_name` (made on
//! first use); everything about a node afterwards goes to the ring that
//! knows its host ID; inspection takes `?cluster=NAME` (default: the first
//! cluster of the world). Inspection (`GET
//! /sim/ring`, `/sim/ring/status`, `/sim/ring/check`, `/sim/ring/gossip`:
//! each running member's lagging view), the node-facing
//! operations the fake processes call (start, stop, decommission, drain,
//! their JMX view), data seeding (keyspaces and keys) and the timing of
//! streaming. The model's clock follows real time: [`run_clock`] advances it
//! every 50 ms. I/O (HTTP handlers over the shared state).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::jolokia::exception_class;
use super::view::{NodeView, node_view};
use crate::ring::{
    CleanupStart, Consistency, DecommissionStart, HostId, NodeConfig, OpEnd, OpState,
    OperationMode, RepairStart, Replication, Ring, RingError, StorageCompatibility, Version,
};

/// Whether the data directory `id` (`<path>@<dev>:<inode>`, as the fake
/// names it) is the one a query designates: `path` (the path the process
/// sees, or the whole id) or `inode` (`<dev>:<inode>` of the directory, as
/// its host path shows it).
pub fn data_dir_matches(id: &str, path: Option<&str>, inode: Option<&str>) -> bool {
    let by_path = path
        .is_some_and(|p| id == p || id.strip_prefix(p).is_some_and(|rest| rest.starts_with('@')));
    let by_inode = inode.is_some_and(|i| id.rsplit_once('@').is_some_and(|(_, at)| at == i));
    by_path || by_inode
}

/// How often the model's clock moves.
pub const TICK: Duration = Duration::from_millis(50);

/// A process that asked for a lease and has not read its view for this
/// long is dead (SIGKILL, OOM: nothing told the ring), as gossip's failure
/// detector convicts a silent node after some seconds.
pub const LEASE: Duration = Duration::from_secs(5);

/// A node's start, as the fake process asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRequest {
    pub cluster_name: String,
    pub address: String,
    pub dc: String,
    pub rack: String,
    pub seeds: Vec<String>,
    pub num_tokens: usize,
    pub auto_bootstrap: bool,
    pub replace_address: Option<String>,
    pub replace_address_first_boot: Option<String>,
    pub allow_unsafe_replace: bool,
    pub override_decommission: bool,
    /// The release (`4.1.8`).
    pub version: String,
    /// `storage_compatibility_mode` of cassandra.yaml (5.0), as written.
    #[serde(default)]
    pub storage_compatibility_mode: Option<String>,
    /// `allocate_tokens_for_local_replication_factor` of cassandra.yaml
    /// (4.0+), when set.
    #[serde(default)]
    pub allocate_tokens_for_local_replication_factor: Option<u32>,
    pub data_dir: String,
    /// The fake found no marker of an earlier start in its data directory:
    /// whatever the model remembers of that directory is lost.
    pub data_dir_empty: bool,
    /// The process keeps a lease by reading its view (at least every
    /// [`LEASE`]); without, it is down once the lease runs out.
    #[serde(default)]
    pub lease: bool,
}

impl StartRequest {
    pub fn of(config: &NodeConfig, release: &str, data_dir_empty: bool) -> Self {
        StartRequest {
            cluster_name: config.cluster_name.clone(),
            address: config.address.clone(),
            dc: config.dc.clone(),
            rack: config.rack.clone(),
            seeds: config.seeds.clone(),
            num_tokens: config.num_tokens,
            auto_bootstrap: config.auto_bootstrap,
            replace_address: config.replace_address.clone(),
            replace_address_first_boot: config.replace_address_first_boot.clone(),
            allow_unsafe_replace: config.allow_unsafe_replace,
            override_decommission: config.override_decommission,
            version: release.to_string(),
            storage_compatibility_mode: Some(
                match config.storage_compatibility {
                    StorageCompatibility::Cassandra4 => "CASSANDRA_4",
                    StorageCompatibility::Upgrading => "UPGRADING",
                    StorageCompatibility::None => "NONE",
                }
                .to_string(),
            ),
            allocate_tokens_for_local_replication_factor: config
                .allocate_tokens_for_local_replication_factor,
            data_dir: config.data_dir.clone(),
            data_dir_empty,
            lease: false,
        }
    }

    fn config(&self) -> Result<NodeConfig, String> {
        Ok(NodeConfig {
            cluster_name: self.cluster_name.clone(),
            address: self.address.clone(),
            dc: self.dc.clone(),
            rack: self.rack.clone(),
            seeds: self.seeds.clone(),
            num_tokens: self.num_tokens,
            auto_bootstrap: self.auto_bootstrap,
            replace_address: self.replace_address.clone(),
            replace_address_first_boot: self.replace_address_first_boot.clone(),
            allow_unsafe_replace: self.allow_unsafe_replace,
            override_decommission: self.override_decommission,
            version: Version::parse(&self.version)
                .ok_or_else(|| format!("invalid version {:?}", self.version))?,
            release: Some(self.version.clone()),
            storage_compatibility: match self.storage_compatibility_mode.as_deref() {
                None => StorageCompatibility::default(),
                Some(mode) => StorageCompatibility::parse(mode)
                    .ok_or_else(|| format!("invalid storage_compatibility_mode {mode:?}"))?,
            },
            allocate_tokens_for_local_replication_factor: self
                .allocate_tokens_for_local_replication_factor,
            data_dir: self.data_dir.clone(),
        })
    }
}

/// A refusal: the Java exception class and Cassandra's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub error_type: String,
    pub message: String,
}

impl Refusal {
    fn of(e: &RingError) -> Self {
        Refusal {
            error_type: exception_class(e).to_string(),
            message: e.to_string(),
        }
    }
}

#[derive(Debug)]
struct State {
    /// One ring per cluster name, in the order they appeared; the first is
    /// the world's default (it exists, unnamed, before any node starts).
    rings: Vec<Ring>,
    /// What a new ring starts from.
    options: crate::ring::Options,
    /// The last failed completion of each node's operation.
    failures: BTreeMap<HostId, RingError>,
    /// The real time the model's clock stands at.
    synced: Instant,
    /// When each leased process last read its view.
    leases: BTreeMap<HostId, Instant>,
}

/// A ring's own random source: host IDs and tokens of two clusters never
/// coincide.
fn seed_for(base: u64, cluster: &str) -> u64 {
    cluster.bytes().fold(base ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl State {
    fn default_ring(&mut self) -> &mut Ring {
        &mut self.rings[0]
    }

    /// The ring of the cluster `name`: its own, else the first ring while
    /// no node has named it (data seeded before the first start belongs to
    /// the first cluster), else a new one.
    fn ring_for_cluster(&mut self, name: &str) -> &mut Ring {
        if let Some(i) = self
            .rings
            .iter()
            .position(|r| r.cluster_name() == Some(name))
        {
            return &mut self.rings[i];
        }
        if self.rings[0].cluster_name().is_none() {
            return &mut self.rings[0];
        }
        let mut options = self.options.clone();
        options.seed = seed_for(options.seed, name);
        options.epoch_s = wall_epoch_s();
        let mut ring = Ring::new(options);
        ring.set_timing(self.rings[0].options().timing);
        self.rings.push(ring);
        self.rings.last_mut().expect("just pushed")
    }

    /// The ring whose members include `host_id`.
    fn ring_of_host(&mut self, host_id: &str) -> Option<&mut Ring> {
        self.rings.iter_mut().find(|r| r.node(host_id).is_some())
    }

    /// The ring `?cluster=NAME` designates (the default one without).
    fn ring_named(&mut self, name: Option<&str>) -> Option<&mut Ring> {
        match name {
            None => Some(self.default_ring()),
            Some(n) => self.rings.iter_mut().find(|r| r.cluster_name() == Some(n)),
        }
    }

    /// Moves the model's clock to the real time, completing what is due;
    /// whether anything completed.
    fn sync(&mut self) -> bool {
        let expired: Vec<HostId> = self
            .leases
            .iter()
            .filter(|(_, seen)| seen.elapsed() > LEASE)
            .map(|(h, _)| h.clone())
            .collect();
        for host_id in &expired {
            self.leases.remove(host_id);
            if let Some(r) = self.ring_of_host(host_id) {
                let _ = r.kill(host_id);
            }
        }
        let ms = self.synced.elapsed().as_millis() as u64;
        if ms == 0 {
            return !expired.is_empty();
        }
        // Keep the sub-millisecond rest for the next time.
        self.synced += Duration::from_millis(ms);
        let completions: Vec<_> = self.rings.iter_mut().flat_map(|r| r.advance(ms)).collect();
        let any = !completions.is_empty();
        for c in completions {
            match c.result {
                Ok(()) => {
                    self.failures.remove(&c.host_id);
                }
                Err(e) => {
                    self.failures.insert(c.host_id, e);
                }
            }
        }
        any || !expired.is_empty()
    }
}

/// The rings and who waits on them.
#[derive(Debug)]
pub struct RingService {
    state: Mutex<State>,
    changed: Notify,
}

/// Now in epoch seconds: the model clock follows real time, so a ring's
/// zero is the moment it is made and its gossip generations are real ones.
fn wall_epoch_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(crate::ring::DEFAULT_EPOCH_S)
}

impl RingService {
    pub fn new(mut options: crate::ring::Options) -> Self {
        options.epoch_s = wall_epoch_s();
        RingService {
            state: Mutex::new(State {
                rings: vec![Ring::new(options.clone())],
                options,
                failures: BTreeMap::new(),
                synced: Instant::now(),
                leases: BTreeMap::new(),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the world's first ring (its clock brought to the real
    /// time first) and wakes the waiters.
    pub fn with<T>(&self, f: impl FnOnce(&mut Ring) -> T) -> T {
        self.with_state(|st| f(st.default_ring()))
    }

    /// Runs `f` on the ring of the cluster named `cluster`, if any node of
    /// it ever started.
    pub fn with_cluster<T>(&self, cluster: &str, f: impl FnOnce(&mut Ring) -> T) -> Option<T> {
        self.with_state(|st| st.ring_named(Some(cluster)).map(f))
    }

    /// The names of the clusters whose nodes started, in order.
    pub fn clusters(&self) -> Vec<String> {
        self.with_state(|st| {
            st.rings
                .iter()
                .filter_map(|r| r.cluster_name().map(str::to_string))
                .collect()
        })
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = {
            let mut state = self.lock();
            state.sync();
            f(&mut state)
        };
        self.changed.notify_waiters();
        out
    }

    /// Runs `f` on every ring.
    fn with_all<T>(&self, mut f: impl FnMut(&mut Ring) -> Vec<T>) -> Vec<T> {
        self.with_state(|st| st.rings.iter_mut().flat_map(&mut f).collect())
    }

    /// Runs `f` on the ring that knows `host_id`; the error of an unknown
    /// node otherwise.
    fn with_host<T>(
        &self,
        host_id: &str,
        f: impl FnOnce(&mut Ring) -> Result<T, RingError>,
    ) -> Result<T, RingError> {
        self.with_state(|st| match st.ring_of_host(host_id) {
            Some(r) => f(r),
            None => Err(RingError::UnknownNode {
                host_id: host_id.to_string(),
            }),
        })
    }

    /// A leased process read its view: it lives.
    fn renew(&self, host_id: &str) {
        if let Some(seen) = self.lock().leases.get_mut(host_id) {
            *seen = Instant::now();
        }
    }

    /// The process is gone; no lease to watch.
    fn release(&self, host_id: &str) {
        self.lock().leases.remove(host_id);
    }

    /// The kubelet's report of a dead process: every node with a running
    /// process that `dead(address, data_dir id)` designates is down at
    /// once (as gossip convicts a peer whose connection closed; its data
    /// stays). Their host ids.
    pub fn report_dead(&self, dead: impl Fn(&str, &str) -> bool) -> Vec<HostId> {
        let killed: Vec<HostId> = self.with_all(|r| {
            let ids: Vec<HostId> = r
                .nodes()
                .filter(|n| n.process.is_some() && dead(&n.address, &n.data_dir))
                .map(|n| n.host_id.clone())
                .collect();
            ids.into_iter().filter(|h| r.kill(h).is_ok()).collect()
        });
        for h in &killed {
            self.release(h);
        }
        killed
    }

    /// A disk is gone (its Node's machine deleted or replaced, a disk
    /// swapped): every data directory `lost(data_dir id)` designates is
    /// forgotten, and a process running on it dies. The ids wiped.
    pub fn report_disk_lost(&self, lost: impl Fn(&str) -> bool) -> Vec<String> {
        let outcome = self.with_all(|r| {
            let ids: Vec<String> = r
                .data_dirs()
                .map(|d| d.id.clone())
                .filter(|id| lost(id))
                .collect();
            let killed: Vec<HostId> = r
                .nodes()
                .filter(|n| n.process.is_some() && ids.contains(&n.data_dir))
                .map(|n| n.host_id.clone())
                .collect();
            for id in &ids {
                r.wipe_data_dir(id);
            }
            vec![(ids, killed)]
        });
        let (wiped, killed): (Vec<String>, Vec<HostId>) =
            outcome
                .into_iter()
                .fold((vec![], vec![]), |(mut w, mut k), (ids, ks)| {
                    w.extend(ids);
                    k.extend(ks);
                    (w, k)
                });
        for h in &killed {
            self.release(h);
        }
        wiped
    }

    /// Brings the model's clock to the real time (completing the
    /// operations due), waking the waiters when something completed.
    pub fn tick(&self) {
        if self.lock().sync() {
            self.changed.notify_waiters();
        }
    }
}

/// Keeps the ring's clock with the real time: a tick every [`TICK`].
pub async fn run_clock(service: Arc<RingService>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        service.tick();
    }
}

/// An answer of the ring service, for the HTTP server that carries it
/// (kubesim): the service itself knows nothing of HTTP servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

fn respond(code: u16, content_type: &'static str, body: String) -> Reply {
    Reply {
        status: code,
        content_type,
        body,
    }
}

fn json_reply(code: u16, body: &Value) -> Reply {
    respond(code, "application/json", body.to_string())
}

fn text_reply(code: u16, body: String) -> Reply {
    respond(code, "text/plain; charset=utf-8", body)
}

fn refused(code: u16, e: &RingError) -> Reply {
    json_reply(
        code,
        &serde_json::to_value(Refusal::of(e)).unwrap_or_default(),
    )
}

fn bad_request(message: String) -> Reply {
    json_reply(400, &json!({"message": message}))
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Box<Reply>> {
    serde_json::from_slice(body).map_err(|e| Box::new(bad_request(format!("invalid body: {e}"))))
}

/// Partial timing: the fields given replace the model's.
#[derive(Debug, Default, Deserialize)]
struct TimingPatch {
    bootstrap_ms: Option<u64>,
    replace_ms: Option<u64>,
    decommission_ms: Option<u64>,
    max_hint_window_ms: Option<u64>,
    gossip_lag_ms: Option<u64>,
    cleanup_ms: Option<u64>,
    upgrade_ms: Option<u64>,
    repair_ms: Option<u64>,
    repair_queue_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct KeyspaceRequest {
    name: String,
    /// `{"class": "SimpleStrategy", "replication_factor": 3}` or
    /// `{"class": "NetworkTopologyStrategy", "datacenters": {"dc1": 3}}`.
    replication: Value,
}

#[derive(Debug, Deserialize)]
struct KeysRequest {
    #[serde(default = "default_prefix")]
    prefix: String,
    count: usize,
    #[serde(default)]
    consistency: Option<String>,
}

fn default_prefix() -> String {
    "key".to_string()
}

fn replication_of(v: &Value) -> Result<Replication, String> {
    match v.get("class").and_then(Value::as_str) {
        Some("SimpleStrategy" | "org.apache.cassandra.locator.SimpleStrategy") => {
            let rf = v
                .get("replication_factor")
                .and_then(|r| {
                    r.as_u64()
                        .or_else(|| r.as_str().and_then(|s| s.parse().ok()))
                })
                .ok_or("SimpleStrategy requires a replication_factor")?;
            Ok(Replication::simple(rf as usize))
        }
        Some(
            "NetworkTopologyStrategy" | "org.apache.cassandra.locator.NetworkTopologyStrategy",
        ) => {
            let dcs = v
                .get("datacenters")
                .and_then(Value::as_object)
                .ok_or("NetworkTopologyStrategy requires datacenters")?;
            let mut out = Vec::new();
            for (dc, rf) in dcs {
                let rf = rf.as_u64().ok_or("a replication factor is a number")?;
                out.push((dc.as_str(), rf as usize));
            }
            Ok(Replication::network_topology(out))
        }
        other => Err(format!("unknown replication class {other:?}")),
    }
}

fn consistency_of(name: &str) -> Result<Consistency, String> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "ANY" => Consistency::Any,
        "ONE" => Consistency::One,
        "TWO" => Consistency::Two,
        "THREE" => Consistency::Three,
        "QUORUM" => Consistency::Quorum,
        "ALL" => Consistency::All,
        other => return Err(format!("unknown consistency level {other}")),
    })
}

/// Routes `/sim/ring/...` (`rest` is the path after `ring`).
pub async fn handle(
    service: &Arc<RingService>,
    method: &str,
    rest: &[&str],
    q: &HashMap<String, String>,
    body: &[u8],
) -> Reply {
    let text = q.get("format").is_some_and(|f| f == "text");
    let cluster = q.get("cluster").map(String::as_str);
    // Inspection and data seeding of one cluster's ring.
    let on_cluster = |f: &mut dyn FnMut(&mut Ring) -> Reply| -> Reply {
        service
            .with_state(|st| st.ring_named(cluster).map(f))
            .unwrap_or_else(|| {
                json_reply(
                    404,
                    &json!({"message": format!("no cluster {:?} in this world", cluster.unwrap_or_default())}),
                )
            })
    };
    match (method, rest) {
        ("GET", []) if text => on_cluster(&mut status_text),
        ("GET", []) => {
            on_cluster(&mut |r| json_reply(200, &serde_json::to_value(&*r).unwrap_or_default()))
        }
        ("GET", ["clusters"]) => json_reply(200, &json!(service.clusters())),
        // Each running member's gossip view: whom it sees UP and DOWN, at
        // which generation; `disagreements` lists who does not yet see
        // every member UP at its current generation.
        ("GET", ["gossip"]) if text => on_cluster(&mut |r| {
            let mut out = String::new();
            for view in r.gossip_views() {
                out.push_str(&format!("{view}\n"));
            }
            text_reply(200, out)
        }),
        ("GET", ["gossip"]) => on_cluster(&mut |r| {
            json_reply(
                200,
                &json!({"views": r.gossip_views(), "disagreements": r.gossip_disagreements()}),
            )
        }),
        ("GET", ["status"]) => on_cluster(&mut status_text),
        ("GET", ["check"]) => on_cluster(&mut |r| {
            let report = r.check();
            let code = if report.is_clean() { 200 } else { 409 };
            if text {
                text_reply(code, report.to_string())
            } else {
                json_reply(code, &serde_json::to_value(&report).unwrap_or_default())
            }
        }),
        ("GET", ["timing"]) => json_reply(
            200,
            &service.with(|r| serde_json::to_value(r.options().timing).unwrap_or_default()),
        ),
        ("PUT" | "POST" | "PATCH", ["timing"]) => {
            let patch: TimingPatch = match parse(body) {
                Ok(p) => p,
                Err(r) => return *r,
            };
            let timing = service.with_state(|st| {
                let mut t = st.default_ring().options().timing;
                t.bootstrap_ms = patch.bootstrap_ms.unwrap_or(t.bootstrap_ms);
                t.replace_ms = patch.replace_ms.unwrap_or(t.replace_ms);
                t.decommission_ms = patch.decommission_ms.unwrap_or(t.decommission_ms);
                t.max_hint_window_ms = patch.max_hint_window_ms.unwrap_or(t.max_hint_window_ms);
                t.gossip_lag_ms = patch.gossip_lag_ms.unwrap_or(t.gossip_lag_ms);
                t.cleanup_ms = patch.cleanup_ms.unwrap_or(t.cleanup_ms);
                t.upgrade_ms = patch.upgrade_ms.unwrap_or(t.upgrade_ms);
                t.repair_ms = patch.repair_ms.unwrap_or(t.repair_ms);
                t.repair_queue_ms = patch.repair_queue_ms.unwrap_or(t.repair_queue_ms);
                st.options.timing = t;
                for r in &mut st.rings {
                    r.set_timing(t);
                }
                t
            });
            json_reply(200, &serde_json::to_value(timing).unwrap_or_default())
        }
        ("POST", ["nodes"]) => {
            let request: StartRequest = match parse(body) {
                Ok(p) => p,
                Err(r) => return *r,
            };
            let config = match request.config() {
                Ok(c) => c,
                Err(e) => return bad_request(e),
            };
            let result = service.with_state(|st| {
                for r in &mut st.rings {
                    if r.cluster_name() == Some(config.cluster_name.as_str()) {
                        continue;
                    }
                    if request.data_dir_empty {
                        r.wipe_data_dir(&config.data_dir);
                    } else if let Some(saved) = r
                        .data_dir(&config.data_dir)
                        .and_then(|d| d.cluster_name.clone())
                    {
                        // SystemKeyspace.checkHealth: the directory is
                        // another cluster's.
                        return Err(RingError::SavedClusterName {
                            saved,
                            configured: config.cluster_name.clone(),
                        });
                    }
                }
                let r = st.ring_for_cluster(&config.cluster_name);
                if request.data_dir_empty && r.data_dir(&config.data_dir).is_some() {
                    r.wipe_data_dir(&config.data_dir);
                }
                r.start(&config)
            });
            if let (Ok(started), true) = (&result, request.lease) {
                service
                    .lock()
                    .leases
                    .insert(started.host_id.clone(), Instant::now());
            }
            match result {
                Ok(started) => json_reply(200, &serde_json::to_value(started).unwrap_or_default()),
                Err(e) => refused(409, &e),
            }
        }
        ("GET", ["nodes", host_id]) => {
            service.renew(host_id);
            let failure = service
                .lock()
                .failures
                .get(*host_id)
                .map(ToString::to_string);
            match service
                .with_host(host_id, |r| Ok(node_view(r, host_id)))
                .ok()
                .flatten()
                .map(|view| NodeView { failure, ..view })
            {
                Some(view) => json_reply(200, &serde_json::to_value(view).unwrap_or_default()),
                None => refused(
                    404,
                    &RingError::UnknownNode {
                        host_id: host_id.to_string(),
                    },
                ),
            }
        }
        ("POST", ["nodes", host_id, verb @ ("stop" | "kill")]) => {
            service.release(host_id);
            let stop = *verb == "stop";
            match service.with_host(host_id, |r| {
                if stop {
                    r.stop(host_id)
                } else {
                    r.kill(host_id)
                }
            }) {
                Ok(()) => json_reply(200, &json!({})),
                Err(e) => refused(404, &e),
            }
        }
        ("POST", ["nodes", host_id, "drain"]) => {
            match service.with_host(host_id, |r| r.drain(host_id)) {
                Ok(()) => json_reply(200, &json!({})),
                Err(e) => refused(500, &e),
            }
        }
        ("POST", ["nodes", host_id, "remove"]) => {
            let target = q.get("target").cloned().unwrap_or_default();
            match service.with_host(host_id, |r| r.remove_node(host_id, &target)) {
                Ok(()) => json_reply(200, &json!({})),
                Err(e) => refused(500, &e),
            }
        }
        ("POST", ["nodes", host_id, "force-remove-completion"]) => {
            match service.with_host(host_id, |r| r.force_remove_completion(host_id)) {
                Ok(excised) => json_reply(200, &json!({"excised": excised})),
                Err(e) => refused(500, &e),
            }
        }
        // forceKeyspaceCleanup: blocks, as the JMX call does, until the
        // cleanup completes (Timing::cleanup_ms).
        ("POST", ["nodes", host_id, "cleanup"]) => {
            let keyspace = q.get("keyspace").cloned().unwrap_or_default();
            match service.with_host(host_id, |r| r.start_cleanup(host_id, &keyspace)) {
                Ok(CleanupStart::Status(status)) => json_reply(200, &json!({"status": status})),
                Ok(CleanupStart::Started(op)) => match wait_op(service, host_id, op).await {
                    OpEnd::Completed => json_reply(200, &json!({"status": 0})),
                    end => op_refused(host_id, end),
                },
                Err(e) => refused(500, &e),
            }
        }
        // upgradeSSTables of a keyspace with files to rewrite: blocks for
        // Timing::upgrade_ms (the node rewrites its own files).
        ("POST", ["nodes", host_id, "upgradesstables"]) => {
            let keyspace = q.get("keyspace").cloned().unwrap_or_default();
            match service.with_host(host_id, |r| r.start_upgrade(host_id, &keyspace)) {
                Ok(op) => match wait_op(service, host_id, op).await {
                    OpEnd::Completed => json_reply(200, &json!({})),
                    end => op_refused(host_id, end),
                },
                Err(e) => refused(500, &e),
            }
        }
        // repairAsync, its options (`RepairOption.parse`'s map) as the
        // body: `op` names the command's operation; `repaired: false` is
        // command 0. A command that fails still starts: its failure is its
        // status.
        ("POST", ["nodes", host_id, "repair"]) => {
            let keyspace = q.get("keyspace").cloned().unwrap_or_default();
            let options: BTreeMap<String, String> = if body.is_empty() {
                BTreeMap::new()
            } else {
                match parse(body) {
                    Ok(o) => o,
                    Err(r) => return *r,
                }
            };
            match service.with_host(host_id, |r| r.start_repair(host_id, &keyspace, &options)) {
                Ok(RepairStart::Nothing) => json_reply(200, &json!({"repaired": false})),
                Ok(RepairStart::Started(op)) => {
                    json_reply(200, &json!({"repaired": true, "op": op}))
                }
                Err(e) => refused(500, &e),
            }
        }
        ("GET", ["nodes", host_id, "ops", op]) => {
            let Ok(op) = op.parse::<u64>() else {
                return bad_request(format!("no operation {op}"));
            };
            let state = service
                .with_host(host_id, |r| Ok(r.op_state(op)))
                .unwrap_or(OpState::Unknown);
            json_reply(200, &op_state_json(&state))
        }
        ("POST", ["nodes", host_id, "terminate-repairs"]) => {
            match service.with_host(host_id, |r| r.terminate_repairs(host_id)) {
                Ok(n) => json_reply(200, &json!({"terminated": n})),
                Err(e) => refused(500, &e),
            }
        }
        ("POST", ["nodes", host_id, "decommission"]) => {
            let force = q.get("force").is_some_and(|f| f == "true");
            decommission(service, host_id, force).await
        }
        // The kubelet's view: the process at this address or on this data
        // directory died (SIGKILL, Pod deleted) without saying so.
        ("POST", ["kill"]) => {
            let address = q.get("address");
            let data_dir = q.get("data_dir").map(String::as_str);
            let inode = q.get("inode").map(String::as_str);
            let killed = service
                .with_all(|r| {
                    let host_id = r
                        .nodes()
                        .find(|n| {
                            n.process.is_some()
                                && (address == Some(&n.address)
                                    || data_dir_matches(&n.data_dir, data_dir, inode))
                        })
                        .map(|n| n.host_id.clone());
                    host_id.filter(|h| r.kill(h).is_ok()).into_iter().collect()
                })
                .into_iter()
                .next();
            match killed {
                Some(host_id) => {
                    service.release(&host_id);
                    json_reply(200, &json!({"host_id": host_id}))
                }
                None => json_reply(
                    404,
                    &json!({"message": "no running node at that address or data directory"}),
                ),
            }
        }
        // The disk is lost: `path` or `inode` as for `kill`.
        ("POST", ["data-dirs", "wipe"]) => {
            let path = q.get("path").map(String::as_str);
            let inode = q.get("inode").map(String::as_str);
            if path.is_none() && inode.is_none() {
                return bad_request("path or inode is required".into());
            }
            let wiped = service.with_all(|r| {
                let ids: Vec<String> = r
                    .data_dirs()
                    .map(|d| d.id.clone())
                    .filter(|id| data_dir_matches(id, path, inode))
                    .collect();
                for id in &ids {
                    r.wipe_data_dir(id);
                }
                ids
            });
            json_reply(200, &json!({"wiped": wiped}))
        }
        ("POST", ["keyspaces"]) => {
            let request: KeyspaceRequest = match parse(body) {
                Ok(p) => p,
                Err(r) => return *r,
            };
            let replication = match replication_of(&request.replication) {
                Ok(r) => r,
                Err(e) => return bad_request(e),
            };
            on_cluster(
                &mut |r| match r.create_keyspace(&request.name, replication.clone()) {
                    Ok(()) => json_reply(201, &json!({"name": request.name})),
                    Err(e) => refused(409, &e),
                },
            )
        }
        // ALTER KEYSPACE: `{"replication": {...}}` as for a new keyspace.
        ("PUT" | "PATCH", ["keyspaces", keyspace]) => {
            let request: Value = match parse(body) {
                Ok(p) => p,
                Err(r) => return *r,
            };
            let replication = match replication_of(&request["replication"]) {
                Ok(r) => r,
                Err(e) => return bad_request(e),
            };
            on_cluster(
                &mut |r| match r.alter_keyspace(keyspace, replication.clone()) {
                    Ok(()) => json_reply(200, &json!({"name": keyspace})),
                    Err(e) => refused(404, &e),
                },
            )
        }
        ("POST", ["keyspaces", keyspace, "keys"]) => {
            let request: KeysRequest = match parse(body) {
                Ok(p) => p,
                Err(r) => return *r,
            };
            let consistency =
                match consistency_of(request.consistency.as_deref().unwrap_or("QUORUM")) {
                    Ok(c) => c,
                    Err(e) => return bad_request(e),
                };
            on_cluster(&mut |r| match r.write_keys(
                keyspace,
                &request.prefix,
                request.count,
                consistency,
            ) {
                Ok(keys) => json_reply(200, &json!({"written": keys.len()})),
                Err(e) => refused(503, &e),
            })
        }
        _ => json_reply(
            404,
            &json!({"message": format!("no ring route {method} /sim/ring/{}", rest.join("/"))}),
        ),
    }
}

/// An operation's state as `GET nodes/{host}/ops/{op}` answers it.
fn op_state_json(state: &OpState) -> Value {
    match state {
        OpState::Queued => json!({"state": "queued"}),
        OpState::Running => json!({"state": "running"}),
        OpState::Ended(OpEnd::Completed) => json!({"state": "completed"}),
        OpState::Ended(OpEnd::Failed(m)) => json!({"state": "failed", "message": m}),
        OpState::Ended(OpEnd::Abandoned) => json!({"state": "abandoned"}),
        OpState::Unknown => json!({"state": "unknown"}),
    }
}

/// A blocking operation that did not complete: its process died (the
/// caller is gone with it), or it failed.
fn op_refused(host_id: &str, end: OpEnd) -> Reply {
    match end {
        OpEnd::Failed(message) => json_reply(
            500,
            &serde_json::to_value(Refusal {
                error_type: "java.lang.RuntimeException".into(),
                message,
            })
            .unwrap_or_default(),
        ),
        _ => refused(
            500,
            &RingError::NotRunning {
                host_id: host_id.to_string(),
            },
        ),
    }
}

/// Waits until maintenance operation `op` ends (the clock completes it).
async fn wait_op(service: &Arc<RingService>, host_id: &str, op: u64) -> OpEnd {
    loop {
        // Polled: the clock's ticks complete it.
        let state = {
            let mut st = service.lock();
            st.sync();
            st.ring_of_host(host_id)
                .map_or(OpState::Unknown, |r| r.op_state(op))
        };
        match state {
            OpState::Queued | OpState::Running => {}
            OpState::Ended(end) => return end,
            OpState::Unknown => return OpEnd::Abandoned,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status_text(ring: &mut Ring) -> Reply {
    match ring.status(None) {
        Ok(table) => text_reply(200, table.to_string()),
        Err(e) => text_reply(500, e.to_string()),
    }
}

/// `decommission()`: the checks, then the call blocks until the node left
/// the ring or the streaming failed (as the JMX operation does).
async fn decommission(service: &Arc<RingService>, host_id: &str, force: bool) -> Reply {
    let started = {
        let mut state = service.lock();
        state.sync();
        state.failures.remove(host_id);
        match state.ring_of_host(host_id) {
            Some(r) => r.start_decommission(host_id, force),
            None => Err(RingError::UnknownNode {
                host_id: host_id.to_string(),
            }),
        }
    };
    service.changed.notify_waiters();
    match started {
        Err(e) => return refused(500, &e),
        Ok(DecommissionStart::AlreadyDone) => return json_reply(200, &json!({})),
        Ok(DecommissionStart::Started { .. }) => {}
    }
    loop {
        let notified = service.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut state = service.lock();
            state.sync();
            if let Some(e) = state.failures.get(host_id) {
                return refused(500, e);
            }
            let mode = state
                .ring_of_host(host_id)
                .and_then(|r| r.node(host_id).and_then(|n| n.mode()));
            match mode {
                Some(OperationMode::Decommissioned) => return json_reply(200, &json!({})),
                Some(OperationMode::Leaving) => {}
                _ => {
                    return refused(
                        500,
                        &RingError::NotRunning {
                            host_id: host_id.to_string(),
                        },
                    );
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dirs_match_by_path_or_inode() {
        let id = "/var/lib/cassandra/data@2049:1234";
        assert!(data_dir_matches(id, Some("/var/lib/cassandra/data"), None));
        assert!(data_dir_matches(id, Some(id), None));
        assert!(data_dir_matches(id, None, Some("2049:1234")));
        assert!(!data_dir_matches(id, Some("/var/lib/cassandra"), None));
        assert!(!data_dir_matches(id, None, Some("2049:12")));
        assert!(!data_dir_matches(id, None, None));
    }

    #[test]
    fn replication_and_consistency_parse_like_cql() {
        assert_eq!(
            replication_of(&json!({"class": "SimpleStrategy", "replication_factor": "3"})),
            Ok(Replication::simple(3))
        );
        assert_eq!(
            replication_of(
                &json!({"class": "NetworkTopologyStrategy", "datacenters": {"dc1": 3, "dc2": 1}})
            ),
            Ok(Replication::network_topology([("dc1", 3), ("dc2", 1)]))
        );
        assert!(replication_of(&json!({"class": "SimpleStrategy"})).is_err());
        assert_eq!(
            consistency_of("local_quorum"),
            Err("unknown consistency level LOCAL_QUORUM".to_string())
        );
        assert_eq!(consistency_of("quorum"), Ok(Consistency::Quorum));
    }

    #[test]
    fn the_clock_completes_operations_at_real_time() {
        let service = RingService::new(crate::ring::Options {
            timing: crate::ring::Timing {
                bootstrap_ms: 60_000,
                ..Default::default()
            },
            ..Default::default()
        });
        let seed = NodeConfig::new("c", "10.0.0.1", "dc1", "r1", &["10.0.0.1"], "/d1");
        let joiner = NodeConfig::new("c", "10.0.0.2", "dc1", "r1", &["10.0.0.1"], "/d2");
        service.with(|r| r.start(&seed)).expect("seed starts");
        let started = service.with(|r| r.start(&joiner)).expect("joins");
        assert_eq!(started.mode, OperationMode::Joining);
        service.tick();
        let mode = service.with(|r| r.node(&started.host_id).and_then(|n| n.mode()));
        assert_eq!(mode, Some(OperationMode::Joining), "60 s have not passed");
    }
}
