//! Nodes that stop answering, and the control plane's answer, as
//! kube-controller-manager has it:
//!
//! - A Node's kubelet can be made unreachable ([`Kubelets::set`]: its
//!   machine is cut off from the API server; its processes keep running,
//!   or are frozen with SIGSTOP as a hung machine's are) or NotReady (it
//!   posts `Ready=False`, `KubeletNotReady`, and keeps running its Pods),
//!   and brought back. An unreachable kubelet writes nothing (no Node or
//!   Pod status) and reads nothing: it neither starts a Pod bound to it
//!   nor sees a deletion ([`super::kubelet`]).
//! - The node lifecycle controller (`pkg/controller/nodelifecycle/
//!   node_lifecycle_controller.go`, `tryUpdateNodeHealth`): a Node whose
//!   kubelet has posted nothing (no Lease renewal, no status) for
//!   `--node-monitor-grace-period` (50 s since Kubernetes 1.32, 40 s
//!   before) gets `Ready=Unknown`, reason `NodeStatusUnknown`, message
//!   "Kubelet stopped posting node status.", and its Pods are marked not
//!   ready (`MarkPodsNotReady`: their `Ready` condition False). Its taint
//!   passes (`doNoScheduleTaintingPass`, `doNoExecuteTaintingPass`) give a
//!   Node whose `Ready` is Unknown the `node.kubernetes.io/unreachable`
//!   taints, NoSchedule and NoExecute (with `timeAdded`), one whose
//!   `Ready` is False `node.kubernetes.io/not-ready`, and take them away
//!   when it is Ready again (`markNodeAsReachable`). Zone disruption as
//!   `ComputeZoneState` and `handleDisruption` have it: when every zone is
//!   fully disrupted (no Ready Node anywhere: the control plane is the
//!   likelier culprit) no NoExecute taint is added and those present are
//!   removed; a partially disrupted zone (more than 2 Nodes not ready and
//!   at least 55 % of it) of a small cluster (50 Nodes or fewer) gets no
//!   new NoExecute taint. NoExecute taints are rate limited per zone as
//!   the zone's `RateLimitedTimedQueue` does it: one Node per 10 s
//!   (`--node-eviction-rate` 0.1), one per 100 s in a partially disrupted
//!   large zone (`--secondary-node-eviction-rate` 0.01). Not modelled:
//!   `--node-startup-grace-period`, the Lease objects.
//! - The taint eviction controller (`pkg/controller/tainteviction/
//!   taint_eviction.go`, `processPodOnNode`): a Pod on a Node with
//!   NoExecute taints it does not tolerate is deleted at once; one that
//!   tolerates them all for a while (the `tolerationSeconds` the
//!   DefaultTolerationSeconds admission plugin gives every Pod: 300 s for
//!   `not-ready` and `unreachable`, see [`crate::kubesim::defaults`]) is
//!   deleted when the shortest of them has run out since the taint was
//!   added. The delete is graceful, after a `DisruptionTarget` condition
//!   (`DeletionByTaintManager`); on an unreachable Node nobody finishes
//!   it: the Pod stays Terminating, and the StatefulSet controller does
//!   not make a second one, until the kubelet comes back (and finishes
//!   the deletion) or the Node object is deleted (the pod garbage
//!   collector's `gcOrphaned` force-deletes the Pods of a missing Node:
//!   [`super::kubelet`]).
//!
//! Every duration of the control plane here (the grace period, the
//! tolerations' seconds) is multiplied by [`super::SimOptions::node_time_scale`],
//! so that tests need not wait minutes. I/O: the store.

use super::{list_all, ns_of, patch_main, patch_status, s, t};
use crate::kubesim::now_rfc3339;
use crate::kubesim::store::{DeleteOptions, Store};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `--node-monitor-grace-period`'s default (kube-controller-manager 1.32+).
pub const NODE_MONITOR_GRACE_PERIOD: Duration = Duration::from_secs(50);

/// The taint of a Node whose `Ready` condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a Node whose `Ready` condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// `unhealthyZoneThreshold`'s default.
const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
/// One Node per this long per zone (`--node-eviction-rate` 0.1/s).
const EVICTION_PERIOD: Duration = Duration::from_secs(10);
/// `largeClusterSizeThreshold`'s default.
const LARGE_CLUSTER: usize = 50;

/// What is wrong with a Node's kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trouble {
    /// It runs and posts `Ready=False` (its Pods keep running).
    NotReady,
    /// Cut off from the API server; its processes keep running.
    Unreachable,
    /// Cut off, and every process of its Pods stopped (SIGSTOP).
    Frozen,
}

impl Trouble {
    /// Whether the kubelet reaches the API server.
    pub fn reaches_api(self) -> bool {
        self == Trouble::NotReady
    }
}

/// What can go wrong when changing a kubelet.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("node {0} does not exist")]
    UnknownNode(String),
}

/// The kubelets' troubles, by Node UID (a re-created Node is a new
/// machine with a healthy kubelet).
#[derive(Debug, Default)]
pub struct Kubelets {
    troubles: Mutex<HashMap<String, (Trouble, Instant)>>,
    /// When each zone's eviction queue last let a Node be tainted.
    zone_tainted: Mutex<HashMap<String, Instant>>,
}

impl Kubelets {
    /// Gives the kubelet of `node` a trouble (None: healthy again); the
    /// Node as it is.
    pub fn set(
        &self,
        store: &Store,
        node: &str,
        trouble: Option<Trouble>,
    ) -> Result<Value, KubeletError> {
        let obj = store
            .get(&t("", "nodes", None), node)
            .map_err(|_| KubeletError::UnknownNode(node.to_string()))?;
        let uid = s(&obj, "/metadata/uid").to_string();
        let mut troubles = self.troubles.lock().unwrap_or_else(|e| e.into_inner());
        match trouble {
            None => {
                troubles.remove(&uid);
            }
            Some(tr) => {
                // Cut off since the first trouble that cut it off.
                let since = match troubles.get(&uid) {
                    Some((old, at)) if !old.reaches_api() && !tr.reaches_api() => *at,
                    _ => Instant::now(),
                };
                troubles.insert(uid, (tr, since));
            }
        }
        Ok(obj)
    }

    /// The trouble of the Node with this UID, and since when.
    pub fn trouble(&self, uid: &str) -> Option<(Trouble, Instant)> {
        self.troubles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .copied()
    }

    /// Whether the kubelet of the Node with this UID reaches the API server.
    pub fn reaches_api(&self, uid: &str) -> bool {
        self.trouble(uid).is_none_or(|(t, _)| t.reaches_api())
    }

    /// Whether the machine of the Node with this UID is frozen.
    pub fn frozen(&self, uid: &str) -> bool {
        self.trouble(uid).is_some_and(|(t, _)| t == Trouble::Frozen)
    }
}

fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The `Ready` condition's status of a Node ("True", "False", "Unknown").
pub fn ready_status(node: &Value) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| s(c, "/status"))
}

fn with_ready(node: &Value, status: &str, reason: &str, message: &str) -> Value {
    let now = now_rfc3339();
    let mut conds: Vec<Value> = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conds.retain(|c| c["type"] != "Ready");
    let heartbeat = condition(node, "Ready")
        .and_then(|c| c.get("lastHeartbeatTime"))
        .cloned()
        .unwrap_or(json!(now));
    // A silent kubelet's last heartbeat stays what it was.
    let heartbeat = if status == "Unknown" {
        heartbeat
    } else {
        json!(now)
    };
    conds.insert(
        0,
        json!({"type": "Ready", "status": status, "reason": reason,
            "message": message, "lastTransitionTime": now, "lastHeartbeatTime": heartbeat}),
    );
    json!(conds)
}

/// One pass: the kubelets post their Nodes' `Ready`, the node lifecycle
/// controller notices the silent ones and taints, and the taint eviction
/// controller deletes the Pods whose tolerations ran out.
pub fn sync(store: &Store, kubelets: &Kubelets, scale: f64) {
    let grace = NODE_MONITOR_GRACE_PERIOD.mul_f64(scale);
    let mut nodes = list_all(store, "", "nodes");
    for node in &mut nodes {
        if node.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let uid = s(node, "/metadata/uid").to_string();
        let wanted = match kubelets.trouble(&uid) {
            None => Some(("True", "KubeletReady", "kubelet is posting ready status")),
            Some((Trouble::NotReady, _)) => Some((
                "False",
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false",
            )),
            // tryUpdateNodeHealth: nothing posted for the grace period.
            Some((_, since)) if since.elapsed() >= grace => Some((
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )),
            Some(_) => None,
        };
        if let Some((status, reason, message)) = wanted
            && (ready_status(node) != status
                || condition(node, "Ready").map(|c| s(c, "/reason")) != Some(reason))
        {
            let conds = with_ready(node, status, reason, message);
            if let Ok(n) = patch_status(store, "", "nodes", node, &json!({"conditions": conds})) {
                *node = std::sync::Arc::new(n);
            }
            if status == "Unknown" {
                mark_pods_not_ready(store, s(node, "/metadata/name"));
            }
        }
    }
    taint(store, &nodes, kubelets, scale);
    evict(store, scale);
}

/// `MarkPodsNotReady`: the Pods of a Node whose kubelet went silent are
/// not ready (nobody can tell otherwise).
fn mark_pods_not_ready(store: &Store, node: &str) {
    for pod in list_all(store, "", "pods") {
        if s(&pod, "/spec/nodeName") != node {
            continue;
        }
        let Some(conds) = pod.pointer("/status/conditions").and_then(Value::as_array) else {
            continue;
        };
        if !conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
        {
            continue;
        }
        let conds: Vec<Value> = conds
            .iter()
            .map(|c| {
                let mut c = c.clone();
                if c["type"] == "Ready" {
                    c["status"] = json!("False");
                    c["lastTransitionTime"] = json!(now_rfc3339());
                }
                c
            })
            .collect();
        let _ = patch_status(store, "", "pods", &pod, &json!({"conditions": conds}));
    }
}

fn zone_of(node: &Value) -> &str {
    s(node, "/metadata/labels/topology.kubernetes.io~1zone")
}

/// `ComputeZoneState`: per zone, whether it is fully disrupted (no Node
/// ready) or partially (more than 2 and at least 55 % not ready).
fn zone_states<N: std::borrow::Borrow<Value>>(nodes: &[N]) -> BTreeMap<&str, &'static str> {
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in nodes.iter().map(|n| -> &Value { n.borrow() }) {
        let e = counts.entry(zone_of(n)).or_default();
        if ready_status(n) == "True" {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    counts
        .into_iter()
        .map(|(zone, (ready, not_ready))| {
            let state = if ready == 0 && not_ready > 0 {
                "FullDisruption"
            } else if not_ready > 2
                && not_ready as f64 / (ready + not_ready) as f64 >= UNHEALTHY_ZONE_THRESHOLD
            {
                "PartialDisruption"
            } else {
                "Normal"
            };
            (zone, state)
        })
        .collect()
}

/// The taint passes: each Node's not-ready/unreachable taints as its
/// `Ready` condition and its zone's state say.
fn taint(store: &Store, nodes: &[std::sync::Arc<Value>], kubelets: &Kubelets, scale: f64) {
    let zones = zone_states(nodes);
    let all_down = !zones.is_empty() && zones.values().all(|z| *z == "FullDisruption");
    for node in nodes {
        if node.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let key = match ready_status(node) {
            "True" => None,
            "False" => Some(NOT_READY),
            _ => Some(UNREACHABLE),
        };
        let taints: Vec<Value> = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let has = |k: &str, effect: &str| {
            taints
                .iter()
                .any(|t| t["key"] == k && t["effect"] == effect)
        };
        let ours = |t: &Value| t["key"] == UNREACHABLE || t["key"] == NOT_READY;
        let mut wanted: Vec<Value> = taints
            .iter()
            .filter(|t| !ours(t) || key.is_some_and(|k| t["key"] == k))
            .cloned()
            .collect();
        if let Some(k) = key {
            if !has(k, "NoSchedule") {
                wanted.push(json!({"key": k, "effect": "NoSchedule"}));
            }
            let zone = zones.get(zone_of(node)).copied().unwrap_or("Normal");
            let may_evict =
                !all_down && (zone != "PartialDisruption" || nodes.len() > LARGE_CLUSTER);
            if all_down {
                wanted.retain(|t| !(ours(t) && t["effect"] == "NoExecute"));
            } else if may_evict && !has(k, "NoExecute") {
                let period = if zone == "PartialDisruption" {
                    EVICTION_PERIOD * 10
                } else {
                    EVICTION_PERIOD
                }
                .mul_f64(scale);
                let mut queues = kubelets
                    .zone_tainted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let last = queues.get(zone_of(node)).copied();
                if last.is_none_or(|at| at.elapsed() >= period) {
                    queues.insert(zone_of(node).to_string(), Instant::now());
                    wanted
                        .push(json!({"key": k, "effect": "NoExecute", "timeAdded": now_rfc3339()}));
                }
            }
        }
        if wanted != taints {
            let _ = patch_main(
                store,
                "",
                "nodes",
                node,
                &json!({"spec": {"taints": wanted}}),
            );
        }
    }
}

/// When a Pod must go because of these NoExecute taints, as
/// `processPodOnNode` and `getMinTolerationTime` decide it: at once when a
/// taint is not tolerated; never when no toleration used has
/// `tolerationSeconds`; else when the shortest of those has run out (a
/// value of 0 or less: at once), counted from the earliest `timeAdded` of
/// the taints, scaled.
fn eviction_time(pod: &Value, taints: &[Value], scale: f64) -> Option<Instant> {
    let tolerations: Vec<Value> = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut used: Vec<&Value> = Vec::new();
    for taint in taints {
        let matching: Vec<&Value> = tolerations
            .iter()
            .filter(|tol| super::scheduler::tolerates(std::slice::from_ref(*tol), taint))
            .collect();
        if matching.is_empty() {
            return Some(Instant::now());
        }
        used.extend(matching);
    }
    let secs = used
        .iter()
        .filter_map(|tol| tol.get("tolerationSeconds").and_then(Value::as_i64))
        .min()?;
    if secs <= 0 {
        return Some(Instant::now());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let added = taints
        .iter()
        .filter_map(|t| crate::kubesim::table::parse_rfc3339(s(t, "/timeAdded")))
        .min()
        .map_or(Duration::ZERO, |at| {
            Duration::from_secs(now.saturating_sub(at).max(0) as u64)
        });
    let left = Duration::from_secs(secs as u64)
        .mul_f64(scale)
        .saturating_sub(added);
    Some(Instant::now() + left)
}

/// The taint eviction controller's pass.
fn evict(store: &Store, scale: f64) {
    let noexec: BTreeMap<String, Vec<Value>> = list_all(store, "", "nodes")
        .into_iter()
        .filter_map(|n| {
            let taints: Vec<Value> = n
                .pointer("/spec/taints")
                .and_then(Value::as_array)?
                .iter()
                .filter(|t| t["effect"] == "NoExecute")
                .cloned()
                .collect();
            (!taints.is_empty()).then(|| (s(&n, "/metadata/name").to_string(), taints))
        })
        .collect();
    if noexec.is_empty() {
        return;
    }
    for pod in list_all(store, "", "pods") {
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let Some(taints) = noexec.get(s(&pod, "/spec/nodeName")) else {
            continue;
        };
        if eviction_time(&pod, taints, scale).is_none_or(|at| at > Instant::now()) {
            continue;
        }
        let mut conds: Vec<Value> = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conds.retain(|c| c["type"] != "DisruptionTarget");
        conds.push(json!({"type": "DisruptionTarget", "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": now_rfc3339()}));
        let _ = patch_status(store, "", "pods", &pod, &json!({"conditions": conds}));
        let _ = store.delete(
            &t("", "pods", ns_of(&pod)),
            s(&pod, "/metadata/name"),
            &DeleteOptions {
                uid: Some(s(&pod, "/metadata/uid").to_string()),
                ..Default::default()
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(zone: &str, ready: &str) -> Value {
        json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}})
    }

    /// Three of four Nodes of a zone unreachable: partially disrupted (more
    /// than 2 and at least 55 %) in a small cluster, no NoExecute taint.
    /// Two of five: a Normal zone, one Node tainted per eviction period.
    #[test]
    fn no_execute_taints_follow_the_zone_and_its_rate() {
        use crate::kubesim::store::{StoreOptions, WriteOptions};
        let node_t = t("", "nodes", None);
        let taints_of = |store: &Store| -> Vec<(String, usize)> {
            list_all(store, "", "nodes")
                .iter()
                .map(|n| {
                    let count = n
                        .pointer("/spec/taints")
                        .and_then(Value::as_array)
                        .map_or(0, |t| {
                            t.iter().filter(|t| t["effect"] == "NoExecute").count()
                        });
                    (s(n, "/metadata/name").to_string(), count)
                })
                .collect()
        };
        for (total, down, expect_tainted) in [(4, 3, 0), (5, 2, 1)] {
            let store = Store::new(StoreOptions::default());
            for i in 0..total {
                let ready = if i < down { "Unknown" } else { "True" };
                let mut n = node("a", ready);
                n["metadata"]["name"] = json!(format!("n{i}"));
                store.create(&node_t, n, &WriteOptions::default()).unwrap();
            }
            let nodes = list_all(&store, "", "nodes");
            let kubelets = Kubelets::default();
            // A long period: the second Node waits for the next one.
            taint(&store, &nodes, &kubelets, 1.0);
            let nodes = list_all(&store, "", "nodes");
            taint(&store, &nodes, &kubelets, 1.0);
            let tainted = taints_of(&store).iter().filter(|(_, c)| *c > 0).count();
            assert_eq!(tainted, expect_tainted, "{total} Nodes, {down} down");
        }
    }

    #[test]
    fn zone_states_as_compute_zone_state() {
        let nodes = vec![
            node("a", "True"),
            node("a", "Unknown"),
            node("b", "Unknown"),
            node("c", "False"),
            node("c", "False"),
            node("c", "Unknown"),
            node("c", "True"),
        ];
        let z = zone_states(&nodes);
        assert_eq!(z["a"], "Normal");
        assert_eq!(z["b"], "FullDisruption");
        assert_eq!(z["c"], "PartialDisruption");
    }

    #[test]
    fn eviction_after_the_shortest_toleration_scaled() {
        let taint = json!({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now_rfc3339()});
        let pod = json!({"spec": {"tolerations": [
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 100}]}});
        let at = eviction_time(&pod, std::slice::from_ref(&taint), 0.1).unwrap();
        let left = at.saturating_duration_since(Instant::now());
        assert!(
            left > Duration::from_secs(8) && left <= Duration::from_secs(10),
            "{left:?}"
        );
        // A toleration without seconds does not make the others' last for
        // ever (getMinTolerationTime skips it).
        let both = json!({"spec": {"tolerations": [{"operator": "Exists"},
            {"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 0}]}});
        let now = eviction_time(&both, std::slice::from_ref(&taint), 1.0).unwrap();
        assert!(now <= Instant::now());
        let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(
            eviction_time(&forever, std::slice::from_ref(&taint), 1.0),
            None
        );
        let none = json!({"spec": {}});
        let now = eviction_time(&none, &[taint], 1.0).unwrap();
        assert!(now <= Instant::now());
    }
}
