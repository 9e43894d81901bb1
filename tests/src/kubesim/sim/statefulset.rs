//! The StatefulSet controller: ordinals, `OrderedReady` and `Parallel`
//! pod management, PVCs from `volumeClaimTemplates` (named
//! `<template>-<pod>`; a missing claim of a Pending pod is created again,
//! as `processReplica` does since Kubernetes 1.27; kept when pods go
//! unless `persistentVolumeClaimRetentionPolicy` says Delete, through
//! owner references the garbage collector follows), history
//! (ControllerRevisions, see [`super::history`]; each pod labelled
//! `controller-revision-hash` with the revision whose template it was
//! made from), orphaned Pods of its names and selector adopted (as after
//! `--cascade=orphan`), `RollingUpdate` with `partition` and `OnDelete`,
//! and the status, following pkg/controller/statefulset/stateful_set_control.go
//! of Kubernetes 1.33 (`updateStatefulSet`, `newVersionedStatefulSetPod`,
//! `computeReplicaStatus`, `completeRollingUpdate`). `maxUnavailable` is
//! behind the `MaxUnavailableStatefulSet` gate, alpha and off through
//! 1.34: the API server drops the field (kubesim's defaults do too) and
//! the controller updates one pod at a time. [`plan`] and [`status`] are
//! the pure decisions; [`sync_all`] does I/O.

use super::history::{self, Revisions};
use super::{list_all, ns_of, patch_status, s, t};
use crate::kubesim::store::{DeleteOptions, Store, WriteOptions};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the controller knows of one existing pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodState {
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// Phase Running and condition Ready True.
    pub running_ready: bool,
    /// Running and Ready for at least `minReadySeconds`.
    pub available: bool,
    /// Phase Failed or Succeeded: the controller replaces it.
    pub finished: bool,
    /// Its `controller-revision-hash` label.
    pub revision: String,
}

/// The inputs of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `spec.replicas`
    pub replicas: usize,
    /// `podManagementPolicy: Parallel`
    pub parallel: bool,
    /// `updateStrategy.type: OnDelete`
    pub on_delete: bool,
    /// `updateStrategy.rollingUpdate.partition`
    pub partition: usize,
    /// The name of the current revision (the one pods below the
    /// partition are made from).
    pub current_revision: String,
    /// The name of the revision of the set's template.
    pub update_revision: String,
    /// Existing pods by ordinal.
    pub pods: BTreeMap<usize, PodState>,
}

/// One step of the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the pod of this ordinal (its PVCs first), at this revision.
    Create(usize, String),
    /// Delete the pod of this ordinal.
    Delete(usize),
}

impl Observed {
    /// `newVersionedStatefulSetPod`: under `RollingUpdate` a pod below the
    /// partition is made from the current revision, any other from the
    /// update revision (under `OnDelete` always the update revision).
    pub fn revision_for(&self, ord: usize) -> &str {
        if !self.on_delete && ord < self.partition {
            &self.current_revision
        } else {
            &self.update_revision
        }
    }
}

/// The steps of one pass, in order (`updateStatefulSet`): create missing
/// and replace finished pods in ordinal order, with OrderedReady stopping
/// at the first pod that is not Running and Ready; remove condemned pods
/// from the highest ordinal, one at a time unless Parallel, only when all
/// others are Running and Ready; then, under `RollingUpdate`, walk from
/// the highest ordinal down to the partition: delete the first pod not at
/// the update revision, stopping at a pod that is not healthy.
pub fn plan(o: &Observed) -> Vec<Step> {
    let mut steps = Vec::new();
    for ord in 0..o.replicas {
        match o.pods.get(&ord) {
            None => {
                steps.push(Step::Create(ord, o.revision_for(ord).to_string()));
                if !o.parallel {
                    return steps;
                }
            }
            Some(p) if p.finished && !p.terminating => {
                steps.push(Step::Delete(ord));
                if !o.parallel {
                    return steps;
                }
            }
            Some(p) if !o.parallel && (p.terminating || !p.running_ready) => return steps,
            Some(_) => {}
        }
    }
    let condemned: Vec<usize> = o
        .pods
        .keys()
        .copied()
        .filter(|&ord| ord >= o.replicas)
        .rev()
        .collect();
    if o.parallel {
        for &ord in &condemned {
            if !o.pods[&ord].terminating {
                steps.push(Step::Delete(ord));
            }
        }
    } else if let Some(&highest) = condemned.first() {
        // OrderedReady: one at a time, highest first, the rest healthy.
        let others_ready = o
            .pods
            .iter()
            .filter(|(ord, _)| **ord != highest)
            .all(|(_, p)| p.running_ready && !p.terminating);
        if !o.pods[&highest].terminating && others_ready {
            steps.push(Step::Delete(highest));
        }
        return steps;
    }
    if o.on_delete {
        return steps;
    }
    for ord in (o.partition..o.replicas).rev() {
        let Some(p) = o.pods.get(&ord) else {
            return steps;
        };
        if p.revision != o.update_revision && !p.terminating {
            steps.push(Step::Delete(ord));
            return steps;
        }
        if !p.running_ready || p.terminating {
            return steps;
        }
    }
    steps
}

/// The status the controller writes: `computeReplicaStatus` over the
/// pods (every pod counts in `replicas` and `readyReplicas`, only those
/// not terminating in `currentReplicas` and `updatedReplicas`), then
/// `completeRollingUpdate`: under `RollingUpdate` only, once
/// `spec.replicas` pods exist, are ready and updated, the update revision
/// becomes the current one. Under `OnDelete` `currentRevision` stays
/// where it was (kubernetes#73492, fixed only in 1.36).
pub fn status(o: &Observed, generation: i64, collision_count: i64) -> Value {
    let all: Vec<&PodState> = o.pods.values().collect();
    let count = |f: &dyn Fn(&PodState) -> bool| all.iter().filter(|p| f(p)).count();
    let replicas = all.len();
    let ready = count(&|p| p.running_ready);
    let available = count(&|p| p.running_ready && p.available);
    let mut current = count(&|p| !p.terminating && p.revision == o.current_revision);
    let updated = count(&|p| !p.terminating && p.revision == o.update_revision);
    let mut current_rev = o.current_revision.clone();
    if !o.on_delete && updated == o.replicas && ready == o.replicas && replicas == o.replicas {
        current = updated;
        current_rev = o.update_revision.clone();
    }
    json!({
        "observedGeneration": generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": available,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": o.update_revision,
        "collisionCount": collision_count,
    })
}

fn ordinal_of(sts: &str, pod: &str) -> Option<usize> {
    let rest = pod.strip_prefix(sts)?.strip_prefix('-')?;
    if rest.starts_with('0') && rest.len() > 1 {
        return None;
    }
    rest.parse().ok()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `isRunningAndReady`, `isRunningAndAvailable` (Ready for
/// `minReadySeconds`), `isTerminating`, `isFailed`/`isSucceeded`.
fn pod_state(pod: &Value, min_ready_seconds: i64, now: i64) -> PodState {
    let phase = s(pod, "/status/phase");
    let ready_since = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .map(|c| {
            c["lastTransitionTime"]
                .as_str()
                .and_then(crate::kubesim::table::parse_rfc3339)
                .unwrap_or(0)
        });
    let running_ready = phase == "Running" && ready_since.is_some();
    PodState {
        terminating: pod.pointer("/metadata/deletionTimestamp").is_some(),
        running_ready,
        available: running_ready
            && (min_ready_seconds <= 0
                || ready_since.is_some_and(|t| t + min_ready_seconds <= now)),
        finished: phase == "Failed" || phase == "Succeeded",
        revision: s(pod, "/metadata/labels/controller-revision-hash").to_string(),
    }
}

/// One pass over every StatefulSet.
pub fn sync_all(store: &Store) {
    // Pods and ControllerRevisions by their controller's uid, once a pass:
    // each set reads its own (a thousand sets each reading every Pod and
    // revision was most of a pass).
    let by_controller = |plural: &str| {
        let group = if plural == "pods" { "" } else { "apps" };
        let mut index: HashMap<String, Vec<Arc<Value>>> = HashMap::new();
        for o in list_all(store, group, plural) {
            let owner = history::controller_uid(&o).unwrap_or_default().to_string();
            index.entry(owner).or_default().push(o);
        }
        index
    };
    let pods = by_controller("pods");
    let revisions = by_controller("controllerrevisions");
    let none = Vec::new();
    for sts in list_all(store, "apps", "statefulsets") {
        if sts.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let uid = s(&sts, "/metadata/uid");
        // A set's revisions, and those nobody controls (it may adopt them).
        let candidates: Vec<Arc<Value>> = [uid, ""]
            .iter()
            .flat_map(|u| revisions.get(*u).unwrap_or(&none))
            .cloned()
            .collect();
        let mut owned = pods.get(uid).unwrap_or(&none).clone();
        owned.extend(adopt_orphans(store, &sts, pods.get("").unwrap_or(&none)));
        sync(store, &sts, &owned, &candidates);
    }
}

/// `getPodsForStatefulSet`'s claim: the orphan Pods of the set's namespace
/// that its selector matches and whose names are its members' are adopted
/// (a set deleted with `--cascade=orphan` and made again takes its Pods
/// back, and then scales or rolls them as its own). A Pod being deleted is
/// left alone.
fn adopt_orphans(store: &Store, sts: &Value, orphans: &[Arc<Value>]) -> Vec<Arc<Value>> {
    let name = s(sts, "/metadata/name");
    let Ok(selector) =
        crate::kubesim::selectors::LabelSelector::from_object(&sts["spec"]["selector"])
    else {
        return Vec::new();
    };
    orphans
        .iter()
        .filter(|p| {
            ns_of(p) == ns_of(sts)
                && p.pointer("/metadata/deletionTimestamp").is_none()
                && ordinal_of(name, s(p, "/metadata/name")).is_some()
                && selector.matches_object(p)
        })
        .filter_map(|p| history::adopt(store, "", "pods", p, sts).map(Arc::new))
        .collect()
}

/// One set's pass; `owned`: the Pods it controls (in any namespace, as
/// indexed), `revisions`: the ControllerRevisions it controls or nobody
/// does.
fn sync(store: &Store, sts: &Value, owned: &[Arc<Value>], revisions: &[Arc<Value>]) {
    let name = s(sts, "/metadata/name");
    let ns = ns_of(sts).unwrap_or("default");
    let revs: Revisions = match history::sync_revisions(store, sts, revisions) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubesim: statefulset {ns}/{name}: revisions: {e}");
            return;
        }
    };
    let min_ready = sts
        .pointer("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let now = now_secs();
    let mut pods = BTreeMap::new();
    let mut by_ord = BTreeMap::new();
    for p in owned {
        if ns_of(p) != Some(ns) {
            continue;
        }
        if let Some(ord) = ordinal_of(name, s(p, "/metadata/name")) {
            pods.insert(ord, pod_state(p, min_ready, now));
            by_ord.insert(ord, p);
        }
    }
    let strategy = s(sts, "/spec/updateStrategy/type");
    let o = Observed {
        replicas: sts
            .pointer("/spec/replicas")
            .and_then(Value::as_u64)
            .unwrap_or(1) as usize,
        parallel: s(sts, "/spec/podManagementPolicy") == "Parallel",
        on_delete: strategy == "OnDelete",
        partition: sts
            .pointer("/spec/updateStrategy/rollingUpdate/partition")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize,
        current_revision: s(&revs.current, "/metadata/name").to_string(),
        update_revision: s(&revs.update, "/metadata/name").to_string(),
        pods,
    };
    let replicas = o.replicas;
    for (ord, pod) in &by_ord {
        claims_follow_retention_policy(store, sts, ns, pod, *ord >= replicas);
        // pkg/controller/statefulset/stateful_set_control.go,
        // processReplica: "If the Pod is in pending state then trigger PVC
        // creation to create missing PVCs" (kubernetes#113270, 1.27).
        let pending = matches!(s(pod, "/status/phase"), "" | "Pending");
        if pending
            && pod.pointer("/metadata/deletionTimestamp").is_none()
            && let Err(e) = create_missing_claims(store, sts, ns, s(pod, "/metadata/name"))
        {
            eprintln!("kubesim: statefulset {ns}/{name}: claims of pending pod {ord}: {e}");
        }
    }
    for step in plan(&o) {
        match step {
            Step::Create(ord, rev) => {
                // `ApplyRevision`: the pod is made from the template its
                // revision records, not necessarily the set's.
                let template = if rev == o.update_revision {
                    history::template_of(&revs.update)
                } else {
                    history::template_of(&revs.current)
                };
                if let Err(e) = create_pod(store, sts, ns, ord, &template, &rev) {
                    eprintln!("kubesim: statefulset {ns}/{name}: create pod {ord}: {e}");
                    failed_create_event(store, sts, ns, &format!("{name}-{ord}"), &e);
                }
            }
            Step::Delete(ord) => {
                let pod = by_ord[&ord];
                let _ = store.delete(
                    &t("", "pods", Some(ns)),
                    s(pod, "/metadata/name"),
                    &DeleteOptions {
                        uid: Some(s(pod, "/metadata/uid").to_string()),
                        ..Default::default()
                    },
                );
            }
        }
    }
    let generation = sts
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let mut st = status(&o, generation, revs.collision_count);
    if let Some(sel) = sts.pointer("/status/selector") {
        st["selector"] = sel.clone();
    }
    let same = st
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| sts.pointer(&format!("/status/{k}")) == Some(v));
    if !same {
        let _ = patch_status(store, "apps", "statefulsets", sts, &st);
    }
    let pod_revisions: Vec<String> = o.pods.values().map(|p| p.revision.clone()).collect();
    history::truncate(store, sts, &revs, &pod_revisions);
}

/// The PVCs a pod of a StatefulSet needs: `<template>-<sts>-<ordinal>`.
pub fn claims_for(sts: &Value, pod_name: &str) -> Vec<Value> {
    let selector_labels = sts
        .pointer("/spec/selector/matchLabels")
        .cloned()
        .unwrap_or(json!({}));
    sts.pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|tpl| {
            let mut c = tpl.clone();
            let tname = s(tpl, "/metadata/name").to_string();
            let mut labels = selector_labels.clone();
            if let Some(l) = tpl.pointer("/metadata/labels").and_then(Value::as_object) {
                for (k, v) in l {
                    labels[k] = v.clone();
                }
            }
            c["apiVersion"] = json!("v1");
            c["kind"] = json!("PersistentVolumeClaim");
            c["metadata"] = json!({
                "name": format!("{tname}-{pod_name}"),
                "namespace": ns_of(sts).unwrap_or("default"),
                "labels": labels,
            });
            if let Some(a) = tpl.pointer("/metadata/annotations") {
                c["metadata"]["annotations"] = a.clone();
            }
            if let Some(o) = c.as_object_mut() {
                o.remove("status");
            }
            c
        })
        .collect()
}

/// Creates the claims of `pod_name` that do not exist
/// (`createPersistentVolumeClaims`); Err for a claim that is being
/// deleted: the real controller refuses to start a pod on it (it would
/// never mount), and the next pass retries.
fn create_missing_claims(
    store: &Store,
    sts: &Value,
    ns: &str,
    pod_name: &str,
) -> Result<(), String> {
    let pvcs = t("", "persistentvolumeclaims", Some(ns));
    for claim in claims_for(sts, pod_name) {
        let claim_name = s(&claim, "/metadata/name").to_string();
        match store.get(&pvcs, &claim_name) {
            Ok(c) if c.pointer("/metadata/deletionTimestamp").is_some() => {
                return Err(format!("pvc {claim_name} is being deleted"));
            }
            Ok(_) => {}
            Err(_) => match store.create(&pvcs, claim, &WriteOptions::default()) {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e.to_string()),
            },
        }
    }
    Ok(())
}

/// The owners a claim of a pod should have under the set's
/// `persistentVolumeClaimRetentionPolicy`
/// (pkg/controller/statefulset/stateful_set_utils.go,
/// `updateClaimOwnerRefForSetAndPod`): `whenDeleted: Delete` makes the set
/// own it, `whenScaled: Delete` makes a condemned pod (ordinal at or above
/// `replicas`) own it, so that the garbage collector deletes it with its
/// owner; `Retain` (the default) leaves it unowned.
pub fn retention_owners(sts: &Value, pod: &Value, condemned: bool) -> Vec<Value> {
    let policy = |k: &str| {
        s(
            sts,
            &format!("/spec/persistentVolumeClaimRetentionPolicy/{k}"),
        ) == "Delete"
    };
    let set_ref = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": s(sts, "/metadata/name"), "uid": s(sts, "/metadata/uid")});
    let pod_ref = json!({"apiVersion": "v1", "kind": "Pod",
        "name": s(pod, "/metadata/name"), "uid": s(pod, "/metadata/uid")});
    match (policy("whenDeleted"), policy("whenScaled")) {
        (false, false) => vec![],
        (true, false) => vec![set_ref],
        (false, true) => condemned.then_some(pod_ref).into_iter().collect(),
        (true, true) if condemned => vec![pod_ref],
        (true, true) => vec![set_ref],
    }
}

/// Sets the owner references of `pod`'s claims to what the retention
/// policy asks, keeping owners other than this set and its pods.
fn claims_follow_retention_policy(
    store: &Store,
    sts: &Value,
    ns: &str,
    pod: &Value,
    condemned: bool,
) {
    let wanted = retention_owners(sts, pod, condemned);
    let pvcs = t("", "persistentvolumeclaims", Some(ns));
    let ours = |r: &Value| {
        (r["kind"] == "StatefulSet" && r["uid"] == sts["metadata"]["uid"])
            || (r["kind"] == "Pod"
                && s(r, "/name").starts_with(&format!("{}-", s(sts, "/metadata/name"))))
    };
    for claim in claims_for(sts, s(pod, "/metadata/name")) {
        let Ok(current) = store.get(&pvcs, s(&claim, "/metadata/name")) else {
            continue;
        };
        let refs: Vec<Value> = current
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let next: Vec<Value> = refs
            .iter()
            .filter(|r| !ours(r))
            .cloned()
            .chain(wanted.iter().cloned())
            .collect();
        if next == refs {
            continue;
        }
        let body = json!({"metadata": {"ownerReferences": next,
            "resourceVersion": current["metadata"]["resourceVersion"].clone()}});
        let _ = super::patch_main(store, "", "persistentvolumeclaims", &current, &body);
    }
}

fn create_pod(
    store: &Store,
    sts: &Value,
    ns: &str,
    ord: usize,
    template: &Value,
    rev: &str,
) -> Result<(), String> {
    let sts_name = s(sts, "/metadata/name");
    let pod_name = format!("{sts_name}-{ord}");
    create_missing_claims(store, sts, ns, &pod_name)?;
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template.get("metadata").cloned().unwrap_or(json!({})),
        "spec": template.get("spec").cloned().unwrap_or(json!({})),
    });
    let meta = &mut pod["metadata"];
    meta["name"] = json!(pod_name);
    meta["namespace"] = json!(ns);
    if !meta.get("labels").is_some_and(Value::is_object) {
        meta["labels"] = json!({});
    }
    meta["labels"]["controller-revision-hash"] = json!(rev);
    meta["labels"]["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    meta["labels"]["apps.kubernetes.io/pod-index"] = json!(ord.to_string());
    meta["ownerReferences"] = json!([{
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts_name,
        "uid": s(sts, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    let spec = &mut pod["spec"];
    spec["hostname"] = json!(pod_name);
    if let Some(svc) = sts.pointer("/spec/serviceName").and_then(Value::as_str)
        && !svc.is_empty()
    {
        spec["subdomain"] = json!(svc);
    }
    // Volumes of the claim templates that the template does not define.
    let mut volumes = spec
        .get("volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for tpl in sts
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let tname = s(tpl, "/metadata/name");
        volumes.retain(|v| v["name"] != tname);
        volumes.push(json!({
            "name": tname,
            "persistentVolumeClaim": {"claimName": format!("{tname}-{pod_name}")},
        }));
    }
    spec["volumes"] = json!(volumes);
    store
        .create(&t("", "pods", Some(ns)), pod, &WriteOptions::default())
        .map(|_| ())
        // The API server's message, as the Go error reads.
        .map_err(|e| e.message)
}

/// The Warning Event the StatefulSet controller records when it cannot
/// create a Pod (stateful_pod_control.go, `recordPodEvent`): reason
/// `FailedCreate`, "create Pod <pod> in StatefulSet <set> failed error:
/// <error>". The recorder's aggregation is modelled by counting the same
/// message on one Event.
fn failed_create_event(store: &Store, sts: &Value, ns: &str, pod: &str, error: &str) {
    let name = s(sts, "/metadata/name");
    let message = format!("create Pod {pod} in StatefulSet {name} failed error: {error}");
    let hash = message.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let event_name = format!("{name}.{hash:016x}");
    let events = t("", "events", Some(ns));
    let now = crate::kubesim::now_rfc3339();
    if let Ok(mut existing) = store.get(&events, &event_name) {
        let count = existing.get("count").and_then(Value::as_i64).unwrap_or(1);
        existing["count"] = json!(count + 1);
        existing["lastTimestamp"] = json!(now);
        let _ = store.update(
            &events,
            &event_name,
            existing,
            crate::kubesim::store::Subresource::Main,
            &WriteOptions::default(),
        );
        return;
    }
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name, "namespace": ns},
        "involvedObject": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": name,
            "namespace": ns,
            "uid": s(sts, "/metadata/uid"),
            "resourceVersion": s(sts, "/metadata/resourceVersion"),
        },
        "reason": "FailedCreate",
        "message": message,
        "type": "Warning",
        "source": {"component": "statefulset-controller"},
        "reportingComponent": "statefulset-controller",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let _ = store.create(&events, event, &WriteOptions::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(rev: &str) -> PodState {
        PodState {
            running_ready: true,
            available: true,
            revision: rev.into(),
            ..Default::default()
        }
    }

    fn observed(replicas: usize, pods: &[(usize, PodState)]) -> Observed {
        Observed {
            replicas,
            parallel: false,
            on_delete: false,
            partition: 0,
            current_revision: "r1".into(),
            update_revision: "r1".into(),
            pods: pods.iter().cloned().collect(),
        }
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time() {
        assert_eq!(plan(&observed(3, &[])), vec![Step::Create(0, "r1".into())]);
        let starting = PodState {
            revision: "r1".into(),
            ..Default::default()
        };
        assert_eq!(plan(&observed(3, &[(0, starting)])), vec![]);
        assert_eq!(
            plan(&observed(3, &[(0, ready("r1"))])),
            vec![Step::Create(1, "r1".into())]
        );
        // A gap is filled first.
        assert_eq!(
            plan(&observed(3, &[(0, ready("r1")), (2, ready("r1"))])),
            vec![Step::Create(1, "r1".into())]
        );
    }

    #[test]
    fn parallel_creates_all() {
        let mut o = observed(3, &[]);
        o.parallel = true;
        assert_eq!(
            plan(&o),
            vec![
                Step::Create(0, "r1".into()),
                Step::Create(1, "r1".into()),
                Step::Create(2, "r1".into())
            ]
        );
    }

    #[test]
    fn scale_down_from_the_highest_when_the_rest_is_ready() {
        let three = [(0, ready("r1")), (1, ready("r1")), (2, ready("r1"))];
        assert_eq!(plan(&observed(1, &three)), vec![Step::Delete(2)]);
        let mut o = observed(1, &three);
        o.pods.get_mut(&2).unwrap().terminating = true;
        assert_eq!(plan(&o), vec![], "one at a time");
        let mut o = observed(2, &three);
        o.pods.get_mut(&0).unwrap().running_ready = false;
        assert_eq!(plan(&o), vec![], "an unready pod blocks");
    }

    #[test]
    fn finished_pods_are_replaced() {
        let failed = PodState {
            finished: true,
            revision: "r1".into(),
            ..Default::default()
        };
        assert_eq!(
            plan(&observed(2, &[(0, failed), (1, ready("r1"))])),
            vec![Step::Delete(0)]
        );
    }

    #[test]
    fn rolling_update_from_the_highest_down_to_the_partition() {
        let mut o = observed(3, &[(0, ready("r1")), (1, ready("r1")), (2, ready("r1"))]);
        o.update_revision = "r2".into();
        assert_eq!(plan(&o), vec![Step::Delete(2)]);
        o.pods.insert(2, ready("r2"));
        assert_eq!(plan(&o), vec![Step::Delete(1)]);
        o.partition = 2;
        assert_eq!(plan(&o), vec![], "below the partition stays");
        // A missing pod below the partition comes back at the current
        // revision, one at or above it at the update revision.
        o.pods.remove(&1);
        assert_eq!(plan(&o), vec![Step::Create(1, "r1".into())]);
        o.pods.insert(1, ready("r1"));
        o.pods.remove(&2);
        assert_eq!(plan(&o), vec![Step::Create(2, "r2".into())]);
    }

    #[test]
    fn rolling_update_stops_at_an_unhealthy_pod() {
        let mut o = observed(3, &[(0, ready("r1")), (1, ready("r1")), (2, ready("r2"))]);
        o.parallel = true;
        o.update_revision = "r2".into();
        o.pods.get_mut(&2).unwrap().running_ready = false;
        assert_eq!(plan(&o), vec![], "an updated pod not ready yet blocks");
        o.pods.get_mut(&2).unwrap().running_ready = true;
        assert_eq!(plan(&o), vec![Step::Delete(1)]);
    }

    #[test]
    fn on_delete_waits_and_recreates_at_the_update_revision() {
        let mut o = observed(2, &[(0, ready("r1")), (1, ready("r1"))]);
        o.on_delete = true;
        o.update_revision = "r2".into();
        assert_eq!(plan(&o), vec![], "OnDelete waits for the user");
        o.pods.remove(&0);
        assert_eq!(plan(&o), vec![Step::Create(0, "r2".into())]);
        // A partition left over from RollingUpdate means nothing.
        o.partition = 2;
        assert_eq!(plan(&o), vec![Step::Create(0, "r2".into())]);
    }

    #[test]
    fn status_counts() {
        let mut o = observed(3, &[(0, ready("r1")), (1, ready("r2"))]);
        o.update_revision = "r2".into();
        let st = status(&o, 4, 0);
        assert_eq!(
            st,
            json!({"observedGeneration": 4, "replicas": 2, "readyReplicas": 2,
                "availableReplicas": 2, "currentReplicas": 1, "updatedReplicas": 1,
                "currentRevision": "r1", "updateRevision": "r2", "collisionCount": 0})
        );
        // A terminating pod counts in replicas, not in current or updated.
        o.pods.get_mut(&0).unwrap().terminating = true;
        let st = status(&o, 4, 0);
        assert_eq!(
            (&st["replicas"], &st["currentReplicas"]),
            (&json!(2), &json!(0))
        );
        // The rollout completes when spec.replicas pods are updated and ready.
        o.pods.insert(0, ready("r2"));
        assert_eq!(status(&o, 4, 0)["currentRevision"], "r1", "2 of 3");
        o.replicas = 2;
        assert_eq!(status(&o, 4, 0)["currentRevision"], "r2");
        assert_eq!(status(&o, 4, 0)["currentReplicas"], 2);
        // Not under OnDelete (kubernetes#73492).
        o.on_delete = true;
        let st = status(&o, 4, 0);
        assert_eq!(
            (&st["currentRevision"], &st["currentReplicas"]),
            (&json!("r1"), &json!(0))
        );
        assert_eq!(st["updatedReplicas"], 2);
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let pod = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let t0 = crate::kubesim::table::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert!(pod_state(&pod, 10, t0 + 5).running_ready);
        assert!(!pod_state(&pod, 10, t0 + 5).available);
        assert!(pod_state(&pod, 10, t0 + 10).available);
        assert!(pod_state(&pod, 0, t0).available);
    }

    #[test]
    fn names() {
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web", "webx-1"), None);
        let sts = json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "w"}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"storageClassName": "local-disks"}}]}});
        let c = claims_for(&sts, "web-0");
        assert_eq!(c[0]["metadata"]["name"], "data-web-0");
        assert_eq!(c[0]["metadata"]["labels"], json!({"app": "w"}));
        assert_eq!(c[0]["spec"]["storageClassName"], "local-disks");
    }
}
