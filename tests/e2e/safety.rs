//! The lifecycle's safety rules, checked at every change the API server
//! commits (kubesim's store, in commit order, as etcd's revisions), not by
//! polling, which could miss a breach that lasts a moment. The rules judge
//! the ring as the ring model knows it when the watch handles the change,
//! not the labels the controller trusts: a label anyone can write proves
//! nothing about where a member's data lives.
//!
//! - a member's claim starts being deleted only once the member's node has
//!   left the ring, or while its member Service records the replace intent
//!   (a lost disk: the node is still in the ring, down, and is replaced at
//!   its own address);
//! - a member Service starts being deleted only once its node has left the
//!   ring;
//! - a StatefulSet shrinks past a member (its replicas go below the
//!   member's ordinal + 1) only once that member's node has left the ring;
//! - never two members being replaced at once;
//! - a member's Pod starts being deleted while its node is up only when no
//!   other node of its ring is down: taking a second replica down is what
//!   the PodDisruptionBudget and the one-at-a-time roll exist to prevent.
//!   Deletions the test makes itself ([`SafetyWatch::excuse`]) and those of
//!   a StatefulSet's garbage collection (the Cluster deleted) are the
//!   test's, not the operator's; the Pod of a Node that was deleted is gone
//!   with it (the replace of a lost disk deletes its object, which takes
//!   down nothing that still ran). The other nodes down are those of the
//!   ring's members: a node that left may linger, unreachable, in a
//!   member's gossip.
//!
//! A member's node is in the ring while its address (its member Service's
//! ClusterIP, the node's broadcast address) is one of the ring's members
//! (`EndpointToHostId`): a node that is down, joining or leaving is in;
//! one that left, or never started, is not. The ring moves before the API
//! server hears of it (a decommissioned node has left the ring before its
//! sidecar confirms), so a change made on what the API server says is
//! judged against a ring at least as new as what it was made on.
//!
//! With real Cassandra members there is no ring model: the ring is what
//! the members themselves say, read at the moment of judging from each
//! running member's Jolokia agent on its Pod's loopback (as the sidecar
//! reads it, but by the watch: the sidecars' records are the operator's
//! word, not evidence). A member's view counts while it counts itself in
//! the ring (a node that left keeps a stale view); views are merged per
//! Cassandra cluster: a node is in the ring when any view has it, and down
//! when any view finds it unreachable (see [`real_rings`]).
//!
//! I/O: a task that receives the store's events and reads the ring; the
//! rules themselves ([`Known::apply`]) are pure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crds::contract;
use serde_json::Value;
use testworld::fake_cassandra::ring_service::RingService;
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{Event, EventType};
use testworld::ring::Ring;
use tokio::sync::broadcast::error::RecvError;

/// Watches a namespace's claims, Services and StatefulSets from now on and
/// records every breach of the rules above.
pub(crate) struct SafetyWatch {
    breaches: Arc<Mutex<Vec<String>>>,
    excused: Arc<Mutex<BTreeSet<String>>>,
    /// The revision of the last change the watch judged.
    judged: Arc<std::sync::atomic::AtomicU64>,
    store: testworld::kubesim::store::Store,
    namespace: String,
    real: bool,
    rings: Arc<RingService>,
    task: tokio::task::JoinHandle<()>,
}

/// What the watch knows: each member Service's labels as last committed,
/// and each member's address, kept after its Service is gone (the node
/// may outlive its Service).
#[derive(Default)]
struct Known {
    labels: BTreeMap<String, BTreeMap<String, String>>,
    addresses: BTreeMap<String, String>,
    /// StatefulSets deleted or being deleted.
    gone_sets: BTreeSet<String>,
    /// Pods whose deletion the test makes itself.
    excused: Arc<Mutex<BTreeSet<String>>>,
    /// Nodes deleted (lost, with what ran on them).
    lost_nodes: BTreeSet<String>,
}

/// The rings at one moment: each ring's members (see [`ring_members`]),
/// and whether each node the status shows is up.
#[derive(Default)]
struct RingNow {
    rings: Vec<(BTreeSet<String>, BTreeMap<String, bool>)>,
}

impl RingNow {
    fn of(ring: &Ring) -> RingNow {
        let mut now = RingNow::default();
        now.add(ring);
        now
    }

    fn add(&mut self, ring: &Ring) {
        let up = ring
            .status(None)
            .map(|s| {
                s.rows
                    .iter()
                    .map(|r| (r.address.clone(), r.status.to_string().starts_with('U')))
                    .collect()
            })
            .unwrap_or_default();
        self.rings.push((ring_members(ring), up));
    }

    /// Adds one Cassandra cluster's ring as its members' views show it:
    /// each view's members (`EndpointToHostId`, joining nodes included)
    /// and, for each node a view knows, whether it is live there. The
    /// union of the members; a node is up only when no view finds it
    /// unreachable.
    fn add_views(&mut self, views: &[RealView]) {
        let mut members = BTreeSet::new();
        let mut up: BTreeMap<String, bool> = BTreeMap::new();
        for view in views {
            members.extend(view.members.iter().cloned());
            for (address, live) in &view.live {
                *up.entry(address.clone()).or_insert(true) &= *live;
            }
        }
        self.rings.push((members, up));
    }

    fn contains(&self, address: &str) -> bool {
        self.rings
            .iter()
            .any(|(members, _)| members.contains(address))
    }

    /// Whether the node at `address` is up, and the other nodes of its
    /// ring that are down; `None` when no ring has it.
    fn peers_down(&self, address: &str) -> Option<(bool, Vec<String>)> {
        let (members, up) = self.rings.iter().find(|(_, up)| up.contains_key(address))?;
        let down = up
            .iter()
            .filter(|(a, up)| a.as_str() != address && !**up && members.contains(a.as_str()))
            .map(|(a, _)| a.clone())
            .collect();
        Some((up[address], down))
    }
}

/// The addresses of a ring's members: those that own tokens (up or down,
/// leaving or hibernating for a replace) and those joining; not those that
/// left.
fn ring_members(ring: &Ring) -> BTreeSet<String> {
    ring.endpoint_to_host_id().into_keys().collect()
}

/// Every ring of the world (one per Cassandra cluster; ClusterIPs are
/// unique, so no address is in two).
fn world_rings(rings: &RingService) -> RingNow {
    let mut now = RingNow::default();
    rings.with(|r| now.add(r));
    for cluster in rings.clusters() {
        rings.with_cluster(&cluster, |r| now.add(r));
    }
    now
}

/// One real member's view of its ring, read through its Jolokia agent.
#[derive(Debug, Default)]
struct RealView {
    cluster: String,
    /// The node's own address (its member Service's ClusterIP).
    address: String,
    /// `EndpointToHostId` and `JoiningNodes`: the nodes in its ring.
    members: BTreeSet<String>,
    /// `LiveNodes` (true) and `UnreachableNodes` (false).
    live: BTreeMap<String, bool>,
}

/// Reads one attribute of the StorageService MBean through the Jolokia
/// agent at 127.0.0.1 of the current thread's network namespace.
fn storage_service(attribute: &str) -> Option<Value> {
    let path = format!("/jolokia/read/org.apache.cassandra.db:type=StorageService/{attribute}");
    let (_, body) =
        crate::common::http_get(&format!("127.0.0.1:{}", contract::JOLOKIA_PORT), &path)?;
    let reply: Value = serde_json::from_str(&body).ok()?;
    (reply["status"] == 200).then(|| reply["value"].clone())
}

fn strings(value: &Value) -> impl Iterator<Item = String> + '_ {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
}

/// The view of the member whose container runs as host process `pid`
/// (any container of the Pod: they share its network namespace), at
/// `address`; `None` when its agent does not answer (not started, or
/// gone with its Pod).
fn real_view(pid: u32, address: String) -> Option<RealView> {
    use nix::sched::{CloneFlags, setns};
    let netns = std::fs::File::open(format!("/proc/{pid}/ns/net")).ok()?;
    std::thread::spawn(move || {
        // setns moves this thread only.
        setns(&netns, CloneFlags::CLONE_NEWNET).ok()?;
        let cluster = storage_service("ClusterName")?.as_str()?.to_string();
        let mut members: BTreeSet<String> = storage_service("EndpointToHostId")?
            .as_object()?
            .keys()
            .cloned()
            .collect();
        members.extend(strings(&storage_service("JoiningNodes")?));
        let mut live: BTreeMap<String, bool> = strings(&storage_service("LiveNodes")?)
            .map(|a| (a, true))
            .collect();
        live.extend(strings(&storage_service("UnreachableNodes")?).map(|a| (a, false)));
        Some(RealView {
            cluster,
            address,
            members,
            live,
        })
    })
    .join()
    .ok()?
}

/// The rings of real members: the views of the running member Pods of
/// `namespace` (those at a known member address), each read in its Pod's
/// network namespace at once, those of nodes that no longer count
/// themselves in the ring left out, merged per Cassandra cluster.
fn real_rings(
    store: &testworld::kubesim::store::Store,
    namespace: &str,
    addresses: &BTreeMap<String, String>,
) -> RingNow {
    let pods = testworld::kubesim::store::Target::new("", "v1", "pods", Some(namespace));
    let list = store.list(&pods, &Default::default()).unwrap_or_default();
    let readers: Vec<_> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pod| {
            let address = addresses.get(name(pod))?.clone();
            let pid = pod
                .pointer("/status/containerStatuses")?
                .as_array()?
                .iter()
                .find_map(|c| {
                    c["containerID"]
                        .as_str()?
                        .strip_prefix("kubesim://")?
                        .parse()
                        .ok()
                })?;
            Some(std::thread::spawn(move || real_view(pid, address)))
        })
        .collect();
    let mut clusters: BTreeMap<String, Vec<RealView>> = BTreeMap::new();
    for view in readers.into_iter().filter_map(|r| r.join().ok().flatten()) {
        if view.members.contains(&view.address) {
            clusters.entry(view.cluster.clone()).or_default().push(view);
        }
    }
    let mut now = RingNow::default();
    for views in clusters.values() {
        now.add_views(views);
    }
    now
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A Service's ClusterIP, if it has one (a headless Service's is `None`).
fn cluster_ip(service: &Value) -> Option<String> {
    service
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_string)
}

fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn deleting(object: Option<&Value>) -> bool {
    object.is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some())
}

/// Whether this change starts the object's deletion: a deletion
/// timestamp set, or the object gone without one (finishing a deletion
/// already begun is no new deletion).
fn began_deleting(event: &Event) -> bool {
    let prev = event.prev.as_deref();
    (event.kind == EventType::Deleted || deleting(Some(&event.object))) && !deleting(prev)
}

/// A member Service's name ends in its ordinal (the client Service's does
/// not).
fn is_member(service: &str) -> bool {
    service
        .rsplit_once('-')
        .is_some_and(|(_, ordinal)| ordinal.parse::<u32>().is_ok())
}

/// Whether a change may remove something of a member ([`Known::apply`]
/// reads the ring only then): a deletion begun, or a StatefulSet whose
/// replicas went down.
fn may_remove(event: &Event) -> bool {
    began_deleting(event)
        || matches!(
            (replicas(event.prev.as_deref()), replicas(Some(&event.object))),
            (Some(before), Some(after)) if after < before
        )
}

fn replicas(object: Option<&Value>) -> Option<i64> {
    object?.pointer("/spec/replicas")?.as_i64()
}

/// What a change removes of a member, to be judged against the ring.
enum Removal {
    Claim(String),
    Service,
    Shrink {
        sts: String,
        before: i64,
        after: i64,
    },
    Pod,
}

/// The StatefulSet that owns an object, if one does.
fn owner_set(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o["kind"] == "StatefulSet")?["name"]
        .as_str()
}

impl Known {
    fn replacing(&self, member: &str) -> bool {
        self.labels
            .get(member)
            .is_some_and(|l| l.contains_key(contract::REPLACE))
    }

    /// Learns a Service as it is now (`None`: it is gone).
    fn learn(&mut self, service: &str, now: Option<&Value>) {
        match now {
            Some(object) => {
                self.labels.insert(service.to_string(), labels(object));
                if let Some(ip) = cluster_ip(object) {
                    self.addresses.insert(service.to_string(), ip);
                }
            }
            None => {
                self.labels.remove(service);
            }
        }
    }

    /// The breaches this change makes. `ring` gives the addresses of the
    /// ring's members at this moment; it is read only for a change that
    /// removes something of a member.
    fn apply(&mut self, event: &Event, ring: impl FnOnce() -> RingNow) -> Vec<String> {
        let object = event.object.as_ref();
        let rv = event.rv;
        let mut breaches = Vec::new();
        // (member, what removes it)
        let mut removals: Vec<(String, Removal)> = Vec::new();
        match event.plural.as_str() {
            "services" => {
                let service = name(object).to_string();
                let gone = event.kind == EventType::Deleted;
                self.learn(&service, (!gone).then_some(object));
                if began_deleting(event) && is_member(&service) {
                    removals.push((service, Removal::Service));
                }
                let replacing: Vec<&String> = self
                    .labels
                    .iter()
                    .filter(|(_, l)| l.contains_key(contract::REPLACE))
                    .map(|(n, _)| n)
                    .collect();
                if replacing.len() > 1 {
                    breaches.push(format!(
                        "rv {rv}: two members being replaced at once: {replacing:?}"
                    ));
                }
            }
            "persistentvolumeclaims" => {
                let claim = name(object);
                if let Some(member) = claim.strip_prefix("data-")
                    && began_deleting(event)
                    && !self.replacing(member)
                {
                    removals.push((member.to_string(), Removal::Claim(claim.to_string())));
                }
            }
            "pods" => {
                let pod = name(object);
                let garbage = owner_set(object).is_some_and(|s| self.gone_sets.contains(s));
                let node_lost = object
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|n| self.lost_nodes.contains(n));
                if began_deleting(event)
                    && !garbage
                    && !node_lost
                    && !self.excused.lock().unwrap().contains(pod)
                {
                    removals.push((pod.to_string(), Removal::Pod));
                }
            }
            "statefulsets" => {
                if event.kind == EventType::Deleted || deleting(Some(object)) {
                    self.gone_sets.insert(name(object).to_string());
                }
                if let (Some(before), Some(after)) =
                    (replicas(event.prev.as_deref()), replicas(Some(object)))
                {
                    let sts = name(object);
                    for ordinal in after.max(0)..before {
                        removals.push((
                            format!("{sts}-{ordinal}"),
                            Removal::Shrink {
                                sts: sts.to_string(),
                                before,
                                after,
                            },
                        ));
                    }
                }
            }
            _ => {}
        }
        if removals.is_empty() {
            return breaches;
        }
        let rings = ring();
        for (member, removal) in removals {
            let Some(address) = self.addresses.get(&member).filter(|a| rings.contains(a)) else {
                continue;
            };
            if let Removal::Pod = removal {
                if let Some((true, down)) = rings.peers_down(address)
                    && !down.is_empty()
                {
                    breaches.push(format!(
                        "rv {rv}: Pod {member} deleted while its node ({address}) is up and {down:?} of its ring are down: a second replica taken down"
                    ));
                }
                continue;
            }
            breaches.push(match removal {
                Removal::Claim(claim) => format!(
                    "rv {rv}: claim {claim} deleted while {member}'s node ({address}) is in the ring and its member Service records no replace intent (labels: {:?})",
                    self.labels.get(&member)
                ),
                Removal::Service => format!(
                    "rv {rv}: member Service {member} deleted while its node ({address}) is in the ring"
                ),
                Removal::Shrink { sts, before, after } => format!(
                    "rv {rv}: StatefulSet {sts} shrunk from {before} to {after} while member {member}'s node ({address}) is in the ring"
                ),
                Removal::Pod => unreachable!("judged above"),
            });
        }
        breaches
    }
}

impl SafetyWatch {
    /// Starts watching `namespace`, knowing its Services as they are now;
    /// `real`: its members run real Cassandra, whose own views are the
    /// ring (the ring model's otherwise).
    pub(crate) fn start(sim: &KubeSim, namespace: &str, real: bool) -> SafetyWatch {
        let mut events = sim.store().subscribe();
        let mut known = Known::default();
        let excused = known.excused.clone();
        let services =
            testworld::kubesim::store::Target::new("", "v1", "services", Some(namespace));
        if let Ok(list) = sim.store().list(&services, &Default::default()) {
            for s in list["items"].as_array().into_iter().flatten() {
                known.learn(name(s), Some(s));
            }
        }
        let breaches = Arc::new(Mutex::new(Vec::new()));
        let found = breaches.clone();
        let namespace = namespace.to_string();
        let watched = namespace.clone();
        let rings = sim.ring().clone();
        let store = sim.store().clone();
        let judged = Arc::new(std::sync::atomic::AtomicU64::new(
            sim.store().resource_version(),
        ));
        let judging = judged.clone();
        let task = tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        if event.plural == "nodes" && began_deleting(&event) {
                            known.lost_nodes.insert(name(&event.object).to_string());
                        }
                        if event.namespace() == namespace {
                            let breaches = if real {
                                // Read before judging, for a change that
                                // may remove something, on a thread of its
                                // own: never block_in_place, which turns a
                                // runtime worker into a blocking thread
                                // that later exits, and kubesim's
                                // containers die with the thread that
                                // spawned them (setpriv --pdeathsig).
                                let ring = if may_remove(&event) {
                                    let (store, namespace) = (store.clone(), namespace.clone());
                                    let addresses = known.addresses.clone();
                                    let (tx, rx) = tokio::sync::oneshot::channel();
                                    std::thread::spawn(move || {
                                        let _ = tx.send(real_rings(&store, &namespace, &addresses));
                                    });
                                    rx.await.unwrap_or_default()
                                } else {
                                    RingNow::default()
                                };
                                known.apply(&event, || ring)
                            } else {
                                known.apply(&event, || world_rings(&rings))
                            };
                            found.lock().unwrap().extend(breaches);
                        }
                        judging.fetch_max(event.rv, std::sync::atomic::Ordering::SeqCst);
                    }
                    Err(RecvError::Lagged(n)) => found.lock().unwrap().push(format!(
                        "the safety watch missed {n} changes: it cannot vouch for them"
                    )),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        SafetyWatch {
            breaches,
            excused,
            judged,
            store: sim.store().clone(),
            namespace: watched,
            real,
            rings: sim.ring().clone(),
            task,
        }
    }

    /// The members the watch would find in the rings now, as it reads
    /// them to judge a removal (the members' own views with real
    /// Cassandra): a test checks that it judges on a ring, not on none.
    pub(crate) fn ring_members(&self) -> BTreeSet<String> {
        let now = if self.real {
            let services =
                testworld::kubesim::store::Target::new("", "v1", "services", Some(&self.namespace));
            let list = self
                .store
                .list(&services, &Default::default())
                .unwrap_or_default();
            let addresses = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some((name(s).to_string(), cluster_ip(s)?)))
                .collect();
            // A thread of its own, joined: never block_in_place (see
            // `start`).
            let (store, namespace) = (self.store.clone(), self.namespace.clone());
            std::thread::spawn(move || real_rings(&store, &namespace, &addresses))
                .join()
                .unwrap_or_default()
        } else {
            world_rings(&self.rings)
        };
        now.rings
            .into_iter()
            .flat_map(|(members, _)| members)
            .collect()
    }

    /// The test deletes these Pods itself (a full outage, say): their
    /// deletions are no breach.
    pub(crate) fn excuse(&self, pods: &[&str]) {
        let mut excused = self.excused.lock().unwrap();
        excused.extend(pods.iter().map(|p| p.to_string()));
    }

    /// Panics with the breaches seen so far, if any, once the watch has
    /// judged every change committed before the call (or after 5 s, which
    /// is itself a failure: it could not vouch for them).
    pub(crate) fn assert_safe(&self, context: &str) {
        let committed = self.store.resource_version();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.judged.load(std::sync::atomic::Ordering::SeqCst) < committed {
            assert!(
                std::time::Instant::now() < deadline,
                "{context}: the safety watch has not judged the changes up to revision {committed}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let breaches = self.breaches.lock().unwrap();
        assert!(
            breaches.is_empty(),
            "{context}: the lifecycle's safety rules were broken:\n{}",
            breaches.join("\n")
        );
    }
}

impl Drop for SafetyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testworld::ring::{HostId, NodeConfig, OperationMode, Options};

    fn event(kind: EventType, plural: &str, object: Value, prev: Option<Value>) -> Event {
        Event {
            rv: 1,
            kind,
            group: String::new(),
            plural: plural.into(),
            object: Arc::new(object),
            prev: prev.map(Arc::new),
            at_us: 0,
        }
    }

    /// Member `s-<ordinal>` and its node's address.
    fn address(ordinal: usize) -> String {
        format!("10.96.0.{}", 10 + ordinal)
    }

    fn service(name: &str, ip: Option<&str>, labels: Value) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"clusterIP": ip.unwrap_or("None")},
        })
    }

    fn member_service(ordinal: usize, labels: Value) -> Value {
        service(&format!("s-{ordinal}"), Some(&address(ordinal)), labels)
    }

    fn added(object: Value) -> Event {
        event(EventType::Added, "services", object, None)
    }

    fn claim(member: &str, deleting: bool) -> Value {
        let mut claim = json!({"metadata": {"name": format!("data-{member}"), "namespace": "ns"}});
        if deleting {
            claim["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        claim
    }

    /// The claim of `member` starts being deleted.
    fn claim_deleting(member: &str) -> Event {
        event(
            EventType::Modified,
            "persistentvolumeclaims",
            claim(member, true),
            Some(claim(member, false)),
        )
    }

    fn shrink(before: i64, after: i64) -> Event {
        let sts =
            |n: i64| json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {"replicas": n}});
        event(
            EventType::Modified,
            "statefulsets",
            sts(after),
            Some(sts(before)),
        )
    }

    /// A ring of 3 NORMAL nodes, member `s-<i>` at [`address`]`(i)`; their
    /// host IDs.
    fn three_nodes() -> (Ring, Vec<HostId>) {
        let mut ring = Ring::new(Options::default());
        let seed = address(0);
        let ids = (0..3)
            .map(|i| {
                let config = NodeConfig::new(
                    "c",
                    &address(i),
                    "dc1",
                    "r1",
                    &[seed.as_str()],
                    &format!("/data/{i}"),
                );
                let started = ring.start(&config).unwrap();
                if started.mode == OperationMode::Joining {
                    ring.finish(&started.host_id).unwrap();
                }
                started.host_id
            })
            .collect();
        (ring, ids)
    }

    /// Knows the Services of the three members.
    fn known() -> Known {
        let mut known = Known::default();
        for i in 0..3 {
            known.apply(&added(member_service(i, json!({}))), || {
                panic!("an added Service removes nothing")
            });
        }
        known
    }

    /// Decommissions node `host_id` to the end: it has left the ring.
    fn decommission(ring: &mut Ring, host_id: &str) {
        ring.start_decommission(host_id, true).unwrap();
        ring.finish(host_id).unwrap();
    }

    #[test]
    fn the_ring_members_are_the_nodes_that_have_not_left() {
        let (mut ring, ids) = three_nodes();
        assert_eq!(
            ring_members(&ring),
            (0..3).map(address).collect::<BTreeSet<_>>()
        );
        // Down (DN), still in; leaving (UL), still in; left, out.
        ring.kill(&ids[1]).unwrap();
        ring.start_decommission(&ids[2], true).unwrap();
        assert_eq!(
            ring_members(&ring),
            (0..3).map(address).collect::<BTreeSet<_>>()
        );
        ring.finish(&ids[2]).unwrap();
        assert_eq!(
            ring_members(&ring),
            (0..2).map(address).collect::<BTreeSet<_>>()
        );
    }

    #[test]
    fn a_claim_is_deleted_only_once_its_node_left_the_ring_or_for_a_replace() {
        let (mut ring, ids) = three_nodes();
        let mut known = known();
        // A decommission confirmed by hand proves nothing: the node is in
        // the ring.
        known.apply(
            &added(member_service(
                2,
                json!({contract::DECOMMISSIONED: contract::DECOMMISSION_DONE}),
            )),
            RingNow::default,
        );
        let breaches = known.apply(&claim_deleting("s-2"), || RingNow::of(&ring));
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains("data-s-2"), "{breaches:?}");
        assert!(breaches[0].contains(&address(2)), "{breaches:?}");
        // Leaving, still in.
        ring.start_decommission(&ids[2], true).unwrap();
        assert_eq!(
            known
                .apply(&claim_deleting("s-2"), || RingNow::of(&ring))
                .len(),
            1
        );
        ring.finish(&ids[2]).unwrap();
        assert_eq!(
            known.apply(&claim_deleting("s-2"), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // A lost disk: the node is down and still in the ring; only the
        // replace intent allows its claim's deletion.
        ring.kill(&ids[1]).unwrap();
        assert_eq!(
            known
                .apply(&claim_deleting("s-1"), || RingNow::of(&ring))
                .len(),
            1
        );
        known.apply(
            &added(member_service(1, json!({contract::REPLACE: address(1)}))),
            RingNow::default,
        );
        assert_eq!(
            known.apply(&claim_deleting("s-1"), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // Finishing a deletion already begun is no new deletion.
        let finished = event(
            EventType::Deleted,
            "persistentvolumeclaims",
            claim("s-0", true),
            Some(claim("s-0", true)),
        );
        assert_eq!(
            known.apply(&finished, || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // A claim deleted outright (no finalizer) starts its deletion.
        let outright = event(
            EventType::Deleted,
            "persistentvolumeclaims",
            claim("s-0", false),
            Some(claim("s-0", false)),
        );
        assert_eq!(known.apply(&outright, || RingNow::of(&ring)).len(), 1);
    }

    #[test]
    fn a_member_whose_address_the_ring_never_knew_is_not_in_it() {
        let (ring, _) = three_nodes();
        let mut known = known();
        // A member never started: its address is no ring member's.
        known.apply(
            &added(service("s-3", Some("10.96.0.99"), json!({}))),
            RingNow::default,
        );
        // A member with no Service at all, and one whose Service has no
        // ClusterIP.
        known.apply(&added(service("t-0", None, json!({}))), RingNow::default);
        for member in ["s-3", "s-4", "t-0"] {
            assert_eq!(
                known.apply(&claim_deleting(member), || RingNow::of(&ring)),
                Vec::<String>::new(),
                "{member}"
            );
        }
        assert_eq!(
            known.apply(&shrink(5, 3), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_shrink_and_a_service_deletion_need_the_node_out_of_the_ring() {
        let (mut ring, ids) = three_nodes();
        let mut known = known();
        let breaches = known.apply(&shrink(3, 2), || RingNow::of(&ring));
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains("member s-2"), "{breaches:?}");
        let gone = |ordinal: usize| {
            event(
                EventType::Deleted,
                "services",
                member_service(ordinal, json!({})),
                None,
            )
        };
        assert_eq!(known.apply(&gone(2), || RingNow::of(&ring)).len(), 1);
        decommission(&mut ring, &ids[2]);
        assert_eq!(
            known.apply(&shrink(3, 2), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        assert_eq!(
            known.apply(&gone(2), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // Past a member that is down: still in the ring.
        ring.kill(&ids[1]).unwrap();
        let breaches = known.apply(&shrink(3, 1), || RingNow::of(&ring));
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains("member s-1"), "{breaches:?}");
        // The address outlives the Service: the claim of a member whose
        // Service is gone is judged on the node that had it.
        assert_eq!(known.apply(&gone(1), || RingNow::of(&ring)).len(), 1);
        assert_eq!(
            known
                .apply(&claim_deleting("s-1"), || RingNow::of(&ring))
                .len(),
            1
        );
        // The client Service is no member's.
        assert_eq!(
            known.apply(
                &event(
                    EventType::Deleted,
                    "services",
                    service("s-client", Some("10.96.0.10"), json!({})),
                    None
                ),
                || RingNow::of(&ring)
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn two_members_being_replaced_is_a_breach() {
        let mut known = known();
        let replacing = |i: usize| added(member_service(i, json!({contract::REPLACE: address(i)})));
        assert_eq!(
            known.apply(&replacing(0), RingNow::default),
            Vec::<String>::new()
        );
        assert_eq!(known.apply(&replacing(1), RingNow::default).len(), 1);
    }

    fn pod(ordinal: usize, owner: &str, deleting: bool) -> Value {
        let mut pod = json!({"metadata": {"name": format!("s-{ordinal}"), "namespace": "ns",
            "ownerReferences": [{"kind": "StatefulSet", "name": owner}]}});
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        pod
    }

    /// Member `s-<ordinal>`'s Pod starts being deleted.
    fn pod_deleting(ordinal: usize) -> Event {
        event(
            EventType::Modified,
            "pods",
            pod(ordinal, "s", true),
            Some(pod(ordinal, "s", false)),
        )
    }

    #[test]
    fn a_pod_of_an_up_node_is_deleted_only_while_no_other_node_is_down() {
        let (mut ring, ids) = three_nodes();
        let mut known = known();
        // All up: one member at a time may go.
        assert_eq!(
            known.apply(&pod_deleting(0), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // s-1 is down: deleting s-0 takes a second replica down.
        ring.kill(&ids[1]).unwrap();
        let breaches = known.apply(&pod_deleting(0), || RingNow::of(&ring));
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains(&address(1)), "{breaches:?}");
        // The down member's own Pod may go (a replace, a lost Node).
        assert_eq!(
            known.apply(&pod_deleting(1), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // The test's own deletions, and the garbage collection of a deleted
        // StatefulSet, are no breach.
        known.excused.lock().unwrap().insert("s-2".into());
        assert_eq!(
            known.apply(&pod_deleting(2), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        let sts = json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {"replicas": 3}});
        known.apply(
            &event(EventType::Deleted, "statefulsets", sts.clone(), Some(sts)),
            || RingNow::of(&ring),
        );
        assert_eq!(
            known.apply(&pod_deleting(0), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
        // A Pod whose node left the ring is no replica.
        let (mut ring, ids) = three_nodes();
        let mut known = self::known();
        decommission(&mut ring, &ids[2]);
        ring.kill(&ids[1]).unwrap();
        assert_eq!(
            known.apply(&pod_deleting(2), || RingNow::of(&ring)),
            Vec::<String>::new()
        );
    }

    /// A view of members s-0..s-2 (addresses from [`address`]): those it
    /// has in its ring and those it finds unreachable.
    fn view(of: usize, members: &[usize], unreachable: &[usize]) -> RealView {
        RealView {
            cluster: "c".into(),
            address: address(of),
            members: members.iter().map(|&i| address(i)).collect(),
            live: members
                .iter()
                .map(|&i| (address(i), !unreachable.contains(&i)))
                .collect(),
        }
    }

    /// Real members' views merge into the strictest ring: a node one view
    /// still has is in it (a view that heard of a leave first does not
    /// excuse a claim deleted too early), and a node one view finds
    /// unreachable is down (another view that thinks it up does not excuse
    /// taking a second replica down).
    #[test]
    fn real_views_merge_into_the_strictest_ring() {
        let mut known = known();
        let merged = |views: Vec<RealView>| {
            move || {
                let mut now = RingNow::default();
                now.add_views(&views);
                now
            }
        };
        // s-1 heard that s-2 left; s-0 has not yet.
        let breaches = known.apply(
            &claim_deleting("s-2"),
            merged(vec![view(0, &[0, 1, 2], &[]), view(1, &[0, 1], &[])]),
        );
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        // Once no view has it, the claim may go.
        assert_eq!(
            known.apply(
                &claim_deleting("s-2"),
                merged(vec![view(0, &[0, 1], &[]), view(1, &[0, 1], &[])]),
            ),
            Vec::<String>::new()
        );
        // s-0 finds s-1 unreachable, s-2 does not: s-2's Pod may not go.
        let breaches = known.apply(
            &pod_deleting(2),
            merged(vec![view(0, &[0, 1, 2], &[1]), view(2, &[0, 1, 2], &[])]),
        );
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains(&address(1)), "{breaches:?}");
        // All views find every node up: it may.
        assert_eq!(
            known.apply(
                &pod_deleting(2),
                merged(vec![view(0, &[0, 1, 2], &[]), view(2, &[0, 1, 2], &[])]),
            ),
            Vec::<String>::new()
        );
        // A node that left lingers, unreachable, in s-0's gossip: it is no
        // replica, and s-2's Pod may go.
        let mut lingering = view(0, &[0, 1, 2], &[]);
        lingering.live.insert(address(7), false);
        assert_eq!(
            known.apply(
                &pod_deleting(2),
                merged(vec![lingering, view(2, &[0, 1, 2], &[])]),
            ),
            Vec::<String>::new()
        );
    }

    /// The Pod of a Node that was deleted is gone with it: deleting its
    /// object (the replace of a lost disk) takes nothing down, even while
    /// the other views still find its node up; the Pod of a Node that
    /// still exists is judged as before.
    #[test]
    fn the_pod_of_a_deleted_node_takes_nothing_down() {
        let mut known = known();
        let on = |ordinal: usize, node: &str| {
            let mut before = pod(ordinal, "s", false);
            before["spec"] = json!({"nodeName": node});
            let mut after = before.clone();
            after["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            event(EventType::Modified, "pods", after, Some(before))
        };
        let views = || {
            let mut now = RingNow::default();
            now.add_views(&[view(0, &[0, 1, 2], &[1]), view(2, &[0, 1, 2], &[])]);
            now
        };
        assert_eq!(known.apply(&on(2, "n-2"), views).len(), 1);
        known.lost_nodes.insert("n-2".into());
        assert_eq!(known.apply(&on(2, "n-2"), views), Vec::<String>::new());
        assert_eq!(known.apply(&on(0, "n-0"), views).len(), 1);
    }
}
