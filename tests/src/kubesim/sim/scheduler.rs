//! The scheduler: places each pending Pod on a Node that fits (node
//! selector, required node affinity, taints and tolerations, cordoned
//! nodes, the node affinity of bound PVs), preferring the node with the
//! fewest pods; a Pod that fits nowhere stays Pending with
//! `PodScheduled=False`, reason `Unschedulable`, and the real scheduler's
//! message (`0/2 nodes are available: 2 node(s) had volume node affinity
//! conflict.`). [`fit`] and [`message`] are pure; [`schedule_all`] does I/O.

use super::{list_all, ns_of, patch_main, patch_status, s, storage};
use crate::kubesim::store::Store;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

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
}

impl Misfit {
    fn text(self) -> &'static str {
        match self {
            Misfit::Affinity => "node(s) didn't match Pod's node affinity/selector",
            Misfit::Taint => "node(s) had untolerated taint(s)",
            Misfit::Cordoned => "node(s) were unschedulable",
            Misfit::VolumeNode => "node(s) had volume node affinity conflict",
        }
    }
}

fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
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

fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
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

/// Whether `pod` fits `node`, given the node affinities of its bound PVs.
pub fn fit(pod: &Value, node: &Value, pv_affinities: &[Value]) -> Result<(), Misfit> {
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
    if !selector_ok || !affinity_ok {
        return Err(Misfit::Affinity);
    }
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
    if pv_affinities
        .iter()
        .any(|a| !a.is_null() && !selector_matches(a, node))
    {
        return Err(Misfit::VolumeNode);
    }
    Ok(())
}

/// The scheduler's message for a pod that fits no node.
pub fn message(nodes: usize, misfits: &[Misfit]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in misfits {
        *counts.entry(m.text()).or_default() += 1;
    }
    let reasons: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    if reasons.is_empty() {
        format!("0/{nodes} nodes are available.")
    } else {
        format!("0/{nodes} nodes are available: {}.", reasons.join(", "))
    }
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

/// One pass: schedules every pending Pod.
pub fn schedule_all(store: &Store) {
    let nodes = list_all(store, "", "nodes");
    let pods = list_all(store, "", "pods");
    let pvcs: HashMap<(String, String), Value> = list_all(store, "", "persistentvolumeclaims")
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
    let pvs: HashMap<String, Value> = list_all(store, "", "persistentvolumes")
        .into_iter()
        .map(|p| (s(&p, "/metadata/name").to_string(), p))
        .collect();
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
        let mut best: Option<&Value> = None;
        for node in &nodes {
            match fit(pod, node, &affinities) {
                Ok(()) => {
                    let key = |n: &Value| {
                        (
                            load.get(s(n, "/metadata/name")).copied().unwrap_or(0),
                            s(n, "/metadata/name").to_string(),
                        )
                    };
                    if best.is_none_or(|b| key(node) < key(b)) {
                        best = Some(node);
                    }
                }
                Err(m) => misfits.push(m),
            }
        }
        let Some(node) = best else {
            mark_unschedulable(store, pod, &message(nodes.len(), &misfits));
            continue;
        };
        let node_name = s(node, "/metadata/name").to_string();
        for pvc in &waiting {
            storage::provision_local(store, pvc, &node_name);
        }
        if let Ok(bound) = patch_main(
            store,
            "",
            "pods",
            pod,
            &json!({"spec": {"nodeName": node_name}}),
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(fit(&pod, &node("n1", "a"), &[]), Err(Misfit::Affinity));
        assert_eq!(fit(&pod, &node("n2", "b"), &[]), Ok(()));
        assert_eq!(
            fit(&pod, &node("n2", "b"), &[on_host("n3")]),
            Err(Misfit::VolumeNode)
        );
        assert_eq!(fit(&pod, &node("n2", "b"), &[on_host("n2")]), Ok(()));
        let sel = json!({"spec": {"nodeSelector": {"topology.kubernetes.io/zone": "a"}}});
        assert_eq!(fit(&sel, &node("n1", "a"), &[]), Ok(()));
        assert_eq!(fit(&sel, &node("n2", "b"), &[]), Err(Misfit::Affinity));
        let mut cordoned = node("n1", "a");
        cordoned["spec"]["unschedulable"] = json!(true);
        assert_eq!(fit(&sel, &cordoned, &[]), Err(Misfit::Cordoned));
    }

    #[test]
    fn taints_need_tolerations() {
        let mut n = node("n1", "a");
        n["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "cassandra", "effect": "NoSchedule"}]);
        let plain = json!({"spec": {}});
        assert_eq!(fit(&plain, &n, &[]), Err(Misfit::Taint));
        let tol = json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cassandra", "effect": "NoSchedule"}]}});
        assert_eq!(fit(&tol, &n, &[]), Ok(()));
        let wrong = json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "other"}]}});
        assert_eq!(fit(&wrong, &n, &[]), Err(Misfit::Taint));
        let all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(fit(&all, &n, &[]), Ok(()));
        n["spec"]["taints"] = json!([{"key": "x", "effect": "PreferNoSchedule"}]);
        assert_eq!(fit(&plain, &n, &[]), Ok(()));
    }

    #[test]
    fn messages() {
        assert_eq!(
            message(2, &[Misfit::VolumeNode, Misfit::VolumeNode]),
            "0/2 nodes are available: 2 node(s) had volume node affinity conflict."
        );
        assert_eq!(
            message(3, &[Misfit::Affinity, Misfit::VolumeNode, Misfit::Affinity]),
            "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) had volume node affinity conflict."
        );
    }
}
