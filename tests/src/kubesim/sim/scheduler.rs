//! The scheduler: places each pending Pod on a Node that fits, with the
//! default profile's filters in their order (cordoned nodes, taints and
//! tolerations, node selector and required node affinity, resource
//! requests against the Node's `status.allocatable` summed over the Pods
//! bound there, the node affinity of bound PVs, required inter-pod
//! affinity and anti-affinity, both the incoming Pod's and the existing
//! Pods'), preferring among the fitting nodes the one with the most
//! satisfied preferred (soft) pod anti-affinity weight, then the fewest
//! pods; a Pod that fits nowhere stays Pending with `PodScheduled=False`,
//! reason `Unschedulable`, and the real scheduler's message (`0/6 nodes
//! are available: 3 Insufficient cpu, 3 node(s) didn't match pod
//! anti-affinity rules. preemption: 0/6 nodes are available: 3 No
//! preemption victims found for incoming pod, 3 Preemption is not helpful
//! for scheduling.`); every pass retries it, so it is placed once the
//! cluster changes. Terminated Pods (Succeeded, Failed) hold nothing, as
//! the scheduler's cache ignores them; terminating ones still do.
//! Priority and preemption are not modelled (no victims are ever found).
//! [`fit`] and [`message`] are pure; [`schedule_all`] does I/O.

use super::quantity::parse_milli;
use super::{list_all, ns_of, patch_status, s, storage};
use crate::kubesim::selectors::{LabelSelector, label_of, labels_of as labels};
use crate::kubesim::store::Store;
use serde_json::{Value, json};
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Why a node does not fit (the real scheduler's wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    /// The pod's node selector or required node affinity.
    Affinity,
    /// A NoSchedule / NoExecute taint the pod does not tolerate.
    Taint,
    /// `spec.unschedulable` (cordoned).
    Cordoned,
    /// A bound PV's node affinity.
    VolumeNode,
    /// No Available PV on the node for an unbound `WaitForFirstConsumer`
    /// claim (VolumeBinding's `ErrReasonBindConflict`).
    NoVolume,
    /// Not enough allocatable of a resource (`cpu`, `memory`) left.
    Insufficient(&'static str),
    /// The node's allocatable `pods` are taken.
    TooManyPods,
    /// The pod's required pod affinity.
    PodAffinity,
    /// The pod's required pod anti-affinity.
    AntiAffinity,
    /// An existing pod's required anti-affinity against this pod.
    ExistingAntiAffinity,
}

impl Misfit {
    fn text(self) -> String {
        match self {
            Misfit::Affinity => "node(s) didn't match Pod's node affinity/selector".into(),
            Misfit::Taint => "node(s) had untolerated taint(s)".into(),
            Misfit::Cordoned => "node(s) were unschedulable".into(),
            Misfit::VolumeNode => "node(s) had volume node affinity conflict".into(),
            Misfit::NoVolume => "node(s) didn't find available persistent volumes to bind".into(),
            Misfit::Insufficient(r) => format!("Insufficient {r}"),
            Misfit::TooManyPods => "Too many pods".into(),
            Misfit::PodAffinity => "node(s) didn't match pod affinity rules".into(),
            Misfit::AntiAffinity => "node(s) didn't match pod anti-affinity rules".into(),
            Misfit::ExistingAntiAffinity => {
                "node(s) didn't satisfy existing pods anti-affinity rules".into()
            }
        }
    }

    /// Whether evicting lower-priority pods could help (the filter said
    /// Unschedulable rather than UnschedulableAndUnresolvable).
    fn preemption_may_help(self) -> bool {
        matches!(
            self,
            Misfit::Insufficient(_)
                | Misfit::TooManyPods
                | Misfit::AntiAffinity
                | Misfit::ExistingAntiAffinity
        )
    }
}

/// What the scheduler knows of the cluster beyond one node: the pods
/// placed (bound and not terminated), the nodes by name, namespaces'
/// labels.
#[derive(Debug, Default, Clone)]
pub struct Cluster<'a> {
    /// Bound Pods that hold their node (not Succeeded or Failed).
    pub placed: Vec<Arc<Value>>,
    /// The same by node name, and those with required anti-affinity
    /// terms: the filters look at one node's Pods, and at every Pod's
    /// anti-affinity, for each node and each pending Pod.
    by_node: HashMap<String, Vec<Arc<Value>>>,
    repelling: Vec<Arc<Value>>,
    /// The cpu and memory requests of each node's Pods, summed as they
    /// are placed.
    used: HashMap<String, [u128; 2]>,
    /// Every Node by name.
    pub nodes: HashMap<String, &'a Value>,
    /// Namespaces' labels (for `namespaceSelector`).
    pub namespaces: HashMap<String, BTreeMap<String, String>>,
}

impl<'a> Cluster<'a> {
    /// The cluster of these nodes and pods.
    pub fn new<N: Borrow<Value>, P: Clone + Into<Arc<Value>>>(
        nodes: &'a [N],
        pods: &[P],
        namespaces: &[N],
    ) -> Self {
        let mut cluster = Cluster {
            placed: Vec::new(),
            by_node: HashMap::new(),
            repelling: Vec::new(),
            used: HashMap::new(),
            nodes: nodes
                .iter()
                .map(|n| -> (String, &Value) {
                    (s(n.borrow(), "/metadata/name").to_string(), n.borrow())
                })
                .collect(),
            namespaces: namespaces
                .iter()
                .map(|n| -> &Value { n.borrow() })
                .map(|n| (s(n, "/metadata/name").to_string(), labels(n)))
                .collect(),
        };
        for pod in pods.iter().cloned().map(Into::into) {
            if !s(&pod, "/spec/nodeName").is_empty()
                && !matches!(s(&pod, "/status/phase"), "Succeeded" | "Failed")
            {
                cluster.place(pod);
            }
        }
        cluster
    }

    /// Counts a Pod bound to its node.
    pub fn place(&mut self, pod: Arc<Value>) {
        let node = s(&pod, "/spec/nodeName").to_string();
        let used = self.used.entry(node.clone()).or_default();
        for (sum, r) in used.iter_mut().zip(["cpu", "memory"]) {
            *sum += request(&pod, r);
        }
        if !terms(&pod, ANTI).is_empty() {
            self.repelling.push(pod.clone());
        }
        self.by_node.entry(node).or_default().push(pod.clone());
        self.placed.push(pod);
    }

    /// The Pods bound to a node.
    fn on(&self, node: &str) -> &[Arc<Value>] {
        self.by_node
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The Pods on the nodes of `node`'s topology domain for `key`.
    fn in_domain<'c>(
        &'c self,
        node: &'c Value,
        key: &'c str,
    ) -> impl Iterator<Item = &'c Value> + 'c {
        self.nodes
            .iter()
            .filter(move |(_, other)| same_domain(node, other, key))
            .flat_map(|(name, _)| self.on(name).iter().map(|p| &**p))
    }
}

const ANTI: &str = "/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution";

/// A pod's effective request of a resource in thousandths: the larger of
/// its containers' sum and its largest init container (a request absent
/// but a limit set counts as the limit, as the API server defaults it).
pub fn request(pod: &Value, resource: &str) -> u128 {
    let of = |c: &Value| {
        let quantity = |kind: &str| c.get("resources")?.get(kind)?.get(resource);
        quantity("requests")
            .or_else(|| quantity("limits"))
            .and_then(|q| match q {
                Value::String(q) => parse_milli(q),
                Value::Number(n) => parse_milli(&n.to_string()),
                _ => None,
            })
            .unwrap_or(0)
    };
    let list = |p: &str| -> Vec<u128> {
        pod.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(of)
            .collect()
    };
    let sum: u128 = list("/spec/containers").iter().sum();
    let init = list("/spec/initContainers").into_iter().max().unwrap_or(0);
    sum.max(init)
}

fn allocatable(node: &Value, resource: &str) -> Option<u128> {
    node.pointer(&format!("/status/allocatable/{resource}"))
        .and_then(Value::as_str)
        .and_then(parse_milli)
}

/// NodeResourcesFit: the pod's cpu and memory requests and one more pod
/// against what the node's bound pods leave of its allocatable.
fn resource_misfits(pod: &Value, node: &Value, cluster: &Cluster) -> Vec<Misfit> {
    let name = s(node, "/metadata/name");
    let here = cluster.on(name);
    let mut out = Vec::new();
    if let Some(max) = allocatable(node, "pods")
        && (here.len() as u128 + 1) * 1000 > max
    {
        out.push(Misfit::TooManyPods);
    }
    let used = cluster.used.get(name).copied().unwrap_or_default();
    for (r, used) in ["cpu", "memory"].into_iter().zip(used) {
        let want = request(pod, r);
        if want == 0 {
            continue;
        }
        let Some(max) = allocatable(node, r) else {
            continue;
        };
        if used + want > max {
            out.push(Misfit::Insufficient(r));
        }
    }
    out
}

/// Whether `other` is matched by a `PodAffinityTerm` of `owner` (its label
/// selector, in its namespaces: the listed ones, those the namespace
/// selector picks, else the owner's own).
fn term_selects(term: &Term<'_>, owner: &Value, other: &Value, cluster: &Cluster) -> bool {
    let Some(sel) = &term.selector else {
        return false;
    };
    let term = term.term;
    let ns = ns_of(other).unwrap_or("default");
    let listed = strings(&term["namespaces"]);
    let ns_ok = match term.get("namespaceSelector").filter(|v| !v.is_null()) {
        Some(nsel) => {
            listed.contains(&ns)
                || LabelSelector::from_object(nsel).is_ok_and(|nsel| {
                    nsel.matches(&cluster.namespaces.get(ns).cloned().unwrap_or_default())
                })
        }
        None if listed.is_empty() => ns == ns_of(owner).unwrap_or("default"),
        None => listed.contains(&ns),
    };
    ns_ok && sel.matches_object(other)
}

/// A `PodAffinityTerm` with its label selector parsed once: the filters
/// match it against every placed Pod for every node.
struct Term<'v> {
    term: &'v Value,
    selector: Option<LabelSelector>,
    key: &'v str,
}

impl<'v> Term<'v> {
    fn of(term: &'v Value) -> Term<'v> {
        Term {
            term,
            selector: term
                .get("labelSelector")
                .filter(|v| !v.is_null())
                .and_then(|sel| LabelSelector::from_object(sel).ok()),
            key: s(term, "/topologyKey"),
        }
    }
}

/// Whether two nodes share a topology domain (both carry `key`, equal).
fn same_domain(a: &Value, b: &Value, key: &str) -> bool {
    label_of(a, key).is_some_and(|v| label_of(b, key) == Some(v))
}

fn terms<'v>(pod: &'v Value, ptr: &str) -> Vec<&'v Value> {
    pod.pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

/// InterPodAffinity: this pod's required affinity, then its required
/// anti-affinity, then existing pods' required anti-affinity against it
/// (topology domains by each term's `topologyKey`), the filter's order.
fn inter_pod_misfit(pod: &Value, node: &Value, cluster: &Cluster) -> Option<Misfit> {
    let node_of = |p: &Value| cluster.nodes.get(s(p, "/spec/nodeName")).copied();
    const AFF: &str = "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution";
    for t in terms(pod, AFF).into_iter().map(Term::of) {
        let (t, key) = (&t, t.key);
        let matched = cluster
            .in_domain(node, key)
            .any(|o| term_selects(t, pod, o, cluster));
        // The first pod of a group may go anywhere its own labels match
        // the term (the scheduler's special case), if no pod matches yet.
        let none_anywhere = !cluster
            .placed
            .iter()
            .any(|o| term_selects(t, pod, o, cluster));
        let self_match = none_anywhere && term_selects(t, pod, pod, cluster);
        if !matched && !self_match || label_of(node, key).is_none() {
            return Some(Misfit::PodAffinity);
        }
    }
    for t in terms(pod, ANTI).into_iter().map(Term::of) {
        let (t, key) = (&t, t.key);
        if cluster
            .in_domain(node, key)
            .any(|o| term_selects(t, pod, o, cluster))
        {
            return Some(Misfit::AntiAffinity);
        }
    }
    for other in &cluster.repelling {
        let Some(on) = node_of(other) else { continue };
        if terms(other, ANTI).iter().any(|t| {
            same_domain(node, on, s(t, "/topologyKey"))
                && term_selects(&Term::of(t), other, pod, cluster)
        }) {
            return Some(Misfit::ExistingAntiAffinity);
        }
    }
    None
}

/// The weight of the pod's preferred anti-affinity terms this node keeps
/// (no matching pod in the term's domain): higher is better.
fn preference(pod: &Value, node: &Value, cluster: &Cluster) -> i64 {
    terms(
        pod,
        "/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution",
    )
    .iter()
    .filter(|w| {
        let t = &Term::of(&w["podAffinityTerm"]);
        !cluster
            .in_domain(node, t.key)
            .any(|o| term_selects(t, pod, o, cluster))
    })
    .map(|w| w.get("weight").and_then(Value::as_i64).unwrap_or(0))
    .sum()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether a node matches one `nodeSelectorTerm` (its expressions and
/// fields all hold).
fn term_matches(term: &Value, node: &Value) -> bool {
    let labels = labels(node);
    let exprs_ok = term
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = s(e, "/key");
            let values = strings(&e["values"]);
            let have = labels.get(key);
            match s(e, "/operator") {
                "In" => have.is_some_and(|h| values.contains(&h.as_str())),
                "NotIn" => !have.is_some_and(|h| values.contains(&h.as_str())),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                "Gt" | "Lt" => {
                    let (Some(h), Some(v)) = (
                        have.and_then(|h| h.parse::<i64>().ok()),
                        values.first().and_then(|v| v.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if s(e, "/operator") == "Gt" {
                        h > v
                    } else {
                        h < v
                    }
                }
                _ => false,
            }
        });
    let fields_ok = term
        .get("matchFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|f| {
            let name = s(node, "/metadata/name");
            let values = strings(&f["values"]);
            match (s(f, "/key"), s(f, "/operator")) {
                ("metadata.name", "In") => values.contains(&name),
                ("metadata.name", "NotIn") => !values.contains(&name),
                _ => false,
            }
        });
    exprs_ok && fields_ok
}

/// Whether a node satisfies a `NodeSelector` (its terms are ORed; an
/// empty list of terms matches nothing).
pub fn selector_matches(selector: &Value, node: &Value) -> bool {
    selector
        .get("nodeSelectorTerms")
        .and_then(Value::as_array)
        .is_some_and(|terms| terms.iter().any(|t| term_matches(t, node)))
}

pub(crate) fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    tolerations.iter().any(|tol| {
        let effect_ok = s(tol, "/effect").is_empty() || s(tol, "/effect") == s(taint, "/effect");
        let key = s(tol, "/key");
        let key_ok = key.is_empty() || key == s(taint, "/key");
        let value_ok = match s(tol, "/operator") {
            "Exists" => true,
            _ => !key.is_empty() && s(tol, "/value") == s(taint, "/value"),
        };
        effect_ok && key_ok && value_ok && (!key.is_empty() || s(tol, "/operator") == "Exists")
    })
}

/// Whether `pod` fits `node`, given the node affinities of its bound PVs
/// and the rest of the cluster: the reasons of the first filter that
/// fails, as the scheduler stops at it.
pub fn fit(
    pod: &Value,
    node: &Value,
    pv_affinities: &[Value],
    cluster: &Cluster,
) -> Result<(), Vec<Misfit>> {
    fit_with_disks(pod, node, pv_affinities, true, cluster)
}

/// [`fit`], where `disks_free` says whether the node has an Available PV
/// for each of the pod's unbound local claims (VolumeBinding runs after
/// the resource filters and before inter-pod affinity).
fn fit_with_disks(
    pod: &Value,
    node: &Value,
    pv_affinities: &[Value],
    disks_free: bool,
    cluster: &Cluster,
) -> Result<(), Vec<Misfit>> {
    node_fit(pod, node).map_err(|m| vec![m])?;
    let r = resource_misfits(pod, node, cluster);
    if !r.is_empty() {
        return Err(r);
    }
    if pv_affinities
        .iter()
        .any(|a| !a.is_null() && !selector_matches(a, node))
    {
        return Err(vec![Misfit::VolumeNode]);
    }
    if !disks_free {
        return Err(vec![Misfit::NoVolume]);
    }
    inter_pod_misfit(pod, node, cluster).map_or(Ok(()), |m| Err(vec![m]))
}

/// The filters that look at the node alone: cordon, taints, selector and
/// node affinity.
fn node_fit(pod: &Value, node: &Value) -> Result<(), Misfit> {
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        return Err(Misfit::Cordoned);
    }
    let node_labels = labels(node);
    let selector_ok = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k).map(String::as_str) == v.as_str());
    let affinity_ok = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .is_none_or(|sel| selector_matches(sel, node));
    let tolerations: Vec<Value> = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let untolerated = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|taint| matches!(s(taint, "/effect"), "NoSchedule" | "NoExecute"))
        .any(|taint| !tolerates(&tolerations, taint));
    if untolerated {
        return Err(Misfit::Taint);
    }
    if !selector_ok || !affinity_ok {
        return Err(Misfit::Affinity);
    }
    Ok(())
}

/// Counts of reasons as the scheduler words them: `<n> <reason>`, sorted
/// as strings (Go's `sort.Strings`, count included).
fn histogram(reasons: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut out: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    out.sort();
    out.join(", ")
}

/// The scheduler's message for a pod that fits no node: each node's
/// reasons (those of the filter that failed it), then what preemption
/// found (no lower-priority victims are ever modelled).
pub fn message(nodes: usize, misfits: &[Vec<Misfit>]) -> String {
    let filters = histogram(misfits.iter().flatten().map(|m| m.text()));
    let mut msg = if filters.is_empty() {
        format!("0/{nodes} nodes are available.")
    } else {
        format!("0/{nodes} nodes are available: {filters}.")
    };
    if !misfits.is_empty() {
        let preemption = histogram(misfits.iter().map(|ms| {
            if ms.iter().all(|m| m.preemption_may_help()) {
                "No preemption victims found for incoming pod".to_string()
            } else {
                "Preemption is not helpful for scheduling".to_string()
            }
        }));
        msg.push_str(&format!(
            " preemption: 0/{nodes} nodes are available: {preemption}."
        ));
    }
    msg
}

fn condition(pod: &Value, kind: &str) -> Option<Value> {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
}

fn mark_unschedulable(store: &Store, pod: &Value, msg: &str) {
    if let Some(c) = condition(pod, "PodScheduled")
        && c["status"] == "False"
        && c["message"] == msg
    {
        return;
    }
    let _ = patch_status(
        store,
        "",
        "pods",
        pod,
        &json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": msg,
            "lastProbeTime": null, "lastTransitionTime": crate::kubesim::now_rfc3339()}]}),
    );
}

/// One Available local PV of `node` for each claim of `waiting`, the
/// smallest that fits first (the volume binder's `FindMatchingVolume`);
/// None when a claim finds none.
fn local_disks_for<'a>(
    waiting: &[std::sync::Arc<Value>],
    node: &str,
    pvs: &'a HashMap<String, std::sync::Arc<Value>>,
    taken: &std::collections::BTreeSet<String>,
) -> Option<Vec<&'a Value>> {
    let mut chosen: Vec<&Value> = Vec::new();
    for pvc in waiting {
        let size = |pv: &Value| {
            pv.pointer("/spec/capacity/storage")
                .and_then(Value::as_str)
                .and_then(super::quantity::parse_milli)
                .unwrap_or(0)
        };
        let best = pvs
            .values()
            .filter(|pv| {
                super::disks::node_of_pv(pv) == Some(node)
                    && storage::local_pv_fits(pv, pvc)
                    && !taken.contains(s(pv, "/metadata/name"))
                    && !chosen
                        .iter()
                        .any(|c| c["metadata"]["name"] == pv["metadata"]["name"])
            })
            .min_by_key(|pv| (size(pv), s(pv, "/metadata/name").to_string()))?;
        chosen.push(best);
    }
    Some(chosen)
}

/// One pass: schedules every pending Pod.
pub fn schedule_all(store: &Store) {
    let nodes = list_all(store, "", "nodes");
    let pods = list_all(store, "", "pods");
    let namespaces = list_all(store, "", "namespaces");
    // What is placed, built once a pass: Pods bound in this pass are
    // added as they are, and count for the next ones.
    let mut cluster = Cluster::new(&nodes, &pods, &namespaces);
    let pvcs: HashMap<(String, String), std::sync::Arc<Value>> =
        list_all(store, "", "persistentvolumeclaims")
            .into_iter()
            .map(|c| {
                (
                    (
                        ns_of(&c).unwrap_or_default().to_string(),
                        s(&c, "/metadata/name").to_string(),
                    ),
                    c,
                )
            })
            .collect();
    let pvs: HashMap<String, std::sync::Arc<Value>> = list_all(store, "", "persistentvolumes")
        .into_iter()
        .map(|p| (s(&p, "/metadata/name").to_string(), p))
        .collect();
    // Local PVs bound in this pass are taken for the next pods.
    let mut taken_now: std::collections::BTreeSet<String> = Default::default();
    let mut load: HashMap<String, usize> = HashMap::new();
    for p in &pods {
        let n = s(p, "/spec/nodeName");
        if !n.is_empty() {
            *load.entry(n.to_string()).or_default() += 1;
        }
    }
    for pod in &pods {
        if !s(pod, "/spec/nodeName").is_empty()
            || pod.pointer("/metadata/deletionTimestamp").is_some()
        {
            continue;
        }
        let scheduler = s(pod, "/spec/schedulerName");
        if !scheduler.is_empty() && scheduler != "default-scheduler" {
            continue;
        }
        let ns = ns_of(pod).unwrap_or("default").to_string();
        let mut affinities = Vec::new();
        let mut waiting = Vec::new();
        let mut problem = None;
        for v in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let claim = s(v, "/persistentVolumeClaim/claimName");
            if claim.is_empty() {
                continue;
            }
            let Some(pvc) = pvcs.get(&(ns.clone(), claim.to_string())) else {
                problem = Some(format!("persistentvolumeclaim \"{claim}\" not found"));
                break;
            };
            if pvc.pointer("/metadata/deletionTimestamp").is_some() {
                problem = Some(format!(
                    "persistentvolumeclaim \"{claim}\" is being deleted"
                ));
                break;
            }
            let volume = s(pvc, "/spec/volumeName");
            if volume.is_empty() {
                if storage::waits_for_consumer(pvc) {
                    waiting.push(pvc.clone());
                } else {
                    problem = Some("pod has unbound immediate PersistentVolumeClaims".into());
                }
                continue;
            }
            match pvs.get(volume) {
                Some(pv) => affinities.push(
                    pv.pointer("/spec/nodeAffinity/required")
                        .cloned()
                        .unwrap_or(Value::Null),
                ),
                None => {
                    problem = Some(format!("persistentvolume \"{volume}\" not found"));
                }
            }
        }
        if let Some(p) = problem {
            mark_unschedulable(
                store,
                pod,
                &format!("0/{} nodes are available: {p}.", nodes.len()),
            );
            continue;
        }
        let mut misfits = Vec::new();
        let mut best: Option<((i64, usize, &str), &Value)> = None;
        let disks_for =
            |node: &Value| local_disks_for(&waiting, s(node, "/metadata/name"), &pvs, &taken_now);
        for node in &nodes {
            let disks = disks_for(node);
            match fit_with_disks(pod, node, &affinities, disks.is_some(), &cluster) {
                Ok(()) => {
                    let name = s(node, "/metadata/name");
                    let key = (
                        -preference(pod, node, &cluster),
                        load.get(name).copied().unwrap_or(0),
                        name,
                    );
                    if best.as_ref().is_none_or(|(b, _)| key < *b) {
                        best = Some((key, node));
                    }
                }
                Err(m) => misfits.push(m),
            }
        }
        let Some((_, node)) = best else {
            mark_unschedulable(store, pod, &message(nodes.len(), &misfits));
            continue;
        };
        let node_name = s(node, "/metadata/name").to_string();
        for (pvc, pv) in waiting.iter().zip(disks_for(node).unwrap_or_default()) {
            taken_now.insert(s(pv, "/metadata/name").to_string());
            storage::bind_local(store, pvc, pv, &node_name);
        }
        if let Ok(bound) = store.bind_pod(
            ns_of(pod).unwrap_or("default"),
            s(pod, "/metadata/name"),
            &node_name,
        ) {
            *load.entry(node_name).or_default() += 1;
            let _ = patch_status(
                store,
                "",
                "pods",
                &bound,
                &json!({"conditions": [{"type": "PodScheduled", "status": "True",
                    "lastProbeTime": null, "lastTransitionTime": crate::kubesim::now_rfc3339()}]}),
            );
            cluster.place(Arc::new(bound));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node-local filters alone (an empty cluster).
    fn fit1(pod: &Value, node: &Value, pvs: &[Value]) -> Result<(), Misfit> {
        fit(pod, node, pvs, &Cluster::default()).map_err(|m| m[0])
    }

    fn node(name: &str, zone: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone}}, "spec": {}})
    }

    fn on_host(h: &str) -> Value {
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}]})
    }

    #[test]
    fn affinity_selector_and_volumes() {
        let pod = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}]}}}}});
        assert_eq!(fit1(&pod, &node("n1", "a"), &[]), Err(Misfit::Affinity));
        assert_eq!(fit1(&pod, &node("n2", "b"), &[]), Ok(()));
        assert_eq!(
            fit1(&pod, &node("n2", "b"), &[on_host("n3")]),
            Err(Misfit::VolumeNode)
        );
        assert_eq!(fit1(&pod, &node("n2", "b"), &[on_host("n2")]), Ok(()));
        let sel = json!({"spec": {"nodeSelector": {"topology.kubernetes.io/zone": "a"}}});
        assert_eq!(fit1(&sel, &node("n1", "a"), &[]), Ok(()));
        assert_eq!(fit1(&sel, &node("n2", "b"), &[]), Err(Misfit::Affinity));
        let mut cordoned = node("n1", "a");
        cordoned["spec"]["unschedulable"] = json!(true);
        assert_eq!(fit1(&sel, &cordoned, &[]), Err(Misfit::Cordoned));
    }

    #[test]
    fn taints_need_tolerations() {
        let mut n = node("n1", "a");
        n["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "cassandra", "effect": "NoSchedule"}]);
        let plain = json!({"spec": {}});
        assert_eq!(fit1(&plain, &n, &[]), Err(Misfit::Taint));
        let tol = json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cassandra", "effect": "NoSchedule"}]}});
        assert_eq!(fit1(&tol, &n, &[]), Ok(()));
        let wrong = json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "other"}]}});
        assert_eq!(fit1(&wrong, &n, &[]), Err(Misfit::Taint));
        let all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(fit1(&all, &n, &[]), Ok(()));
        n["spec"]["taints"] = json!([{"key": "x", "effect": "PreferNoSchedule"}]);
        assert_eq!(fit1(&plain, &n, &[]), Ok(()));
    }

    #[test]
    fn messages() {
        use Misfit::*;
        assert_eq!(
            message(2, &[vec![VolumeNode], vec![VolumeNode]]),
            "0/2 nodes are available: 2 node(s) had volume node affinity conflict. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
        // Sorted as strings, counts included (Go's sort.Strings).
        assert_eq!(
            message(3, &[vec![Affinity], vec![VolumeNode], vec![Affinity]]),
            "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        assert_eq!(
            message(
                6,
                &[
                    vec![Insufficient("cpu")],
                    vec![Insufficient("cpu"), Insufficient("memory")],
                    vec![Insufficient("cpu")],
                    vec![AntiAffinity],
                    vec![AntiAffinity],
                    vec![Taint],
                ]
            ),
            "0/6 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 node(s) didn't match pod anti-affinity rules, 3 Insufficient cpu. preemption: 0/6 nodes are available: 1 Preemption is not helpful for scheduling, 5 No preemption victims found for incoming pod."
        );
    }

    fn pod(name: &str, labels: Value, on: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": on, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "3", "memory": "8Gi"}}}]},
            "status": {"phase": "Running"}})
    }

    fn sized(n: Value, cpu: &str) -> Value {
        let mut n = n;
        n["status"] = json!({"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}});
        n
    }

    #[test]
    fn resource_requests_against_allocatable() {
        let nodes = vec![sized(node("n1", "a"), "8"), sized(node("n2", "a"), "4")];
        let pods = vec![pod("x", json!({}), "n1"), pod("y", json!({}), "n2")];
        let c = Cluster::new(&nodes, &pods, &[]);
        let new = pod("z", json!({}), "");
        assert_eq!(fit(&new, &nodes[0], &[], &c), Ok(()));
        assert_eq!(
            fit(&new, &nodes[1], &[], &c),
            Err(vec![Misfit::Insufficient("cpu")])
        );
        // A limit alone counts as the request; init containers by their max.
        let mut lim = new.clone();
        lim["spec"]["containers"] =
            json!([{"name": "c", "resources": {"limits": {"cpu": "6", "memory": "30Gi"}}}]);
        assert_eq!(
            fit(&lim, &nodes[0], &[], &c),
            Err(vec![
                Misfit::Insufficient("cpu"),
                Misfit::Insufficient("memory")
            ])
        );
        lim["spec"]["containers"] = json!([{"name": "c"}]);
        lim["spec"]["initContainers"] =
            json!([{"name": "i", "resources": {"requests": {"cpu": "5500m"}}}]);
        assert_eq!(request(&lim, "cpu"), 5500);
        assert_eq!(
            fit(&lim, &nodes[0], &[], &c),
            Err(vec![Misfit::Insufficient("cpu")])
        );
        // A terminated pod holds nothing.
        let mut done = pods.clone();
        done[1]["status"]["phase"] = json!("Succeeded");
        let c = Cluster::new(&nodes, &done, &[]);
        assert_eq!(fit(&new, &nodes[1], &[], &c), Ok(()));
    }

    #[test]
    fn pod_anti_affinity_by_host_and_zone() {
        let nodes = vec![node("n1", "a"), node("n2", "a"), node("n3", "b")];
        let pods = vec![pod("db-0", json!({"app": "db"}), "n1")];
        let c = Cluster::new(&nodes, &pods, &[]);
        let anti = |key: &str| {
            let mut p = pod("db-1", json!({"app": "db"}), "");
            p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": key}]}});
            p
        };
        let host = anti("kubernetes.io/hostname");
        assert_eq!(
            fit(&host, &nodes[0], &[], &c),
            Err(vec![Misfit::AntiAffinity])
        );
        assert_eq!(fit(&host, &nodes[1], &[], &c), Ok(()));
        let zone = anti("topology.kubernetes.io/zone");
        assert_eq!(
            fit(&zone, &nodes[1], &[], &c),
            Err(vec![Misfit::AntiAffinity])
        );
        assert_eq!(fit(&zone, &nodes[2], &[], &c), Ok(()));
        // Another namespace is not matched unless the term names it.
        let mut other_ns = host.clone();
        other_ns["metadata"]["namespace"] = json!("other");
        assert_eq!(fit(&other_ns, &nodes[0], &[], &c), Ok(()));
        other_ns["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0]["namespaces"] = json!(["default"]);
        assert_eq!(
            fit(&other_ns, &nodes[0], &[], &c),
            Err(vec![Misfit::AntiAffinity])
        );
        // The existing pod's anti-affinity keeps a plain matching pod away.
        let placed = vec![host.clone()];
        let mut placed = placed;
        placed[0]["spec"]["nodeName"] = json!("n2");
        let c = Cluster::new(&nodes, &placed, &[]);
        let plain = pod("web", json!({"app": "db"}), "");
        assert_eq!(
            fit(&plain, &nodes[1], &[], &c),
            Err(vec![Misfit::ExistingAntiAffinity])
        );
        assert_eq!(fit(&plain, &nodes[0], &[], &c), Ok(()));
        // Preferred anti-affinity scores the emptier domain higher.
        let mut soft = pod("db-2", json!({"app": "db"}), "");
        soft["spec"]["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}}]}});
        assert_eq!(preference(&soft, &nodes[0], &c), 0);
        assert_eq!(preference(&soft, &nodes[2], &c), 100);
    }

    #[test]
    fn required_pod_affinity() {
        let nodes = vec![node("n1", "a"), node("n2", "b")];
        let pods = vec![pod("cache", json!({"app": "cache"}), "n1")];
        let c = Cluster::new(&nodes, &pods, &[]);
        let mut p = pod("web", json!({"app": "web"}), "");
        p["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]}});
        assert_eq!(fit(&p, &nodes[0], &[], &c), Ok(()));
        assert_eq!(fit(&p, &nodes[1], &[], &c), Err(vec![Misfit::PodAffinity]));
    }

    #[test]
    fn node_affinity_operators_and_fields() {
        let n = node("n1", "a");
        let with = |expr: Value| {
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [expr]}}}}})
        };
        let ok = |e: Value| fit1(&with(e), &n, &[]).is_ok();
        assert!(ok(
            json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["b"]}]})
        ));
        assert!(!ok(
            json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["a"]}]})
        ));
        assert!(ok(
            json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]})
        ));
        assert!(!ok(
            json!({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]})
        ));
        assert!(ok(
            json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]})
        ));
        assert!(ok(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
        ));
        assert!(!ok(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]})
        ));
    }
}
