//! The StatefulSet controller: ordinals, `OrderedReady` and `Parallel`
//! pod management, PVCs from `volumeClaimTemplates` (named
//! `<template>-<pod>`; a missing claim of a Pending pod is created again,
//! as `processReplica` does since Kubernetes 1.27; kept when pods go
//! unless `persistentVolumeClaimRetentionPolicy` says Delete, through
//! owner references the garbage collector follows),
//! revisions (`controller-revision-hash`) with `RollingUpdate` (partition)
//! and `OnDelete`, and the status. [`plan`] is the pure decision (one pass
//! of the real controller's `updateStatefulSet`); [`sync_all`] does I/O.

use super::{list_all, ns_of, patch_status, s, t};
use crate::kubesim::store::{DeleteOptions, Store, WriteOptions};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the controller knows of one existing pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodState {
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// Phase Running and condition Ready True.
    pub running_ready: bool,
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
    /// The revision pods below the partition keep.
    pub current_revision: String,
    /// The revision of the current template.
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

/// The steps of one pass, in order (the real controller's rules: create
/// missing and replace finished pods in ordinal order; with OrderedReady
/// stop at the first pod that is not Running and Ready; remove condemned
/// pods from the highest ordinal, one at a time unless Parallel, only when
/// all others are Running and Ready; then roll one pod from the highest
/// ordinal down to the partition).
pub fn plan(o: &Observed) -> Vec<Step> {
    let mut steps = Vec::new();
    let revision_for = |ord: usize| {
        if (!o.on_delete && ord >= o.partition) || o.current_revision.is_empty() {
            o.update_revision.clone()
        } else {
            o.current_revision.clone()
        }
    };
    for ord in 0..o.replicas {
        match o.pods.get(&ord) {
            None => {
                steps.push(Step::Create(ord, revision_for(ord)));
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
    if !condemned.is_empty() {
        if o.parallel {
            for ord in condemned {
                if !o.pods[&ord].terminating {
                    steps.push(Step::Delete(ord));
                }
            }
            return steps;
        }
        // OrderedReady: one at a time, highest first, the rest healthy.
        let highest = condemned[0];
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
    // Rolling update: wait for every pod to be healthy, then replace the
    // highest ordinal at or above the partition that is not updated.
    if o.pods
        .values()
        .any(|p| p.terminating || (!o.parallel && !p.running_ready))
    {
        return steps;
    }
    for ord in (o.partition..o.replicas).rev() {
        if let Some(p) = o.pods.get(&ord)
            && p.revision != o.update_revision
        {
            steps.push(Step::Delete(ord));
            break;
        }
    }
    steps
}

/// The status the controller writes.
pub fn status(o: &Observed, generation: i64) -> Value {
    let live: Vec<&PodState> = o.pods.values().filter(|p| !p.terminating).collect();
    let count = |f: &dyn Fn(&PodState) -> bool| live.iter().filter(|p| f(p)).count();
    let updated = count(&|p| p.revision == o.update_revision);
    let current_rev =
        if (updated == o.replicas && live.len() == o.replicas) || o.current_revision.is_empty() {
            o.update_revision.clone()
        } else {
            o.current_revision.clone()
        };
    let ready = count(&|p| p.running_ready);
    json!({
        "observedGeneration": generation,
        "replicas": o.pods.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": count(&|p| p.revision == current_rev),
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": o.update_revision,
        "collisionCount": 0,
    })
}

/// The revision name of a template: `<sts>-<hash>` (FNV-1a of the
/// template's JSON; the real controller hashes the ControllerRevision).
pub fn revision(sts_name: &str, template: &Value) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in template.to_string().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{sts_name}-{h:08x}")
}

fn ordinal_of(sts: &str, pod: &str) -> Option<usize> {
    let rest = pod.strip_prefix(sts)?.strip_prefix('-')?;
    if rest.starts_with('0') && rest.len() > 1 {
        return None;
    }
    rest.parse().ok()
}

fn pod_state(pod: &Value) -> PodState {
    let phase = s(pod, "/status/phase");
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    PodState {
        terminating: pod.pointer("/metadata/deletionTimestamp").is_some(),
        running_ready: phase == "Running" && ready,
        finished: phase == "Failed" || phase == "Succeeded",
        revision: s(pod, "/metadata/labels/controller-revision-hash").to_string(),
    }
}

/// One pass over every StatefulSet.
pub fn sync_all(store: &Store) {
    let pods = list_all(store, "", "pods");
    for sts in list_all(store, "apps", "statefulsets") {
        if sts.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        sync(store, &sts, &pods);
    }
}

fn owned_by(pod: &Value, uid: &str) -> bool {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| r["uid"] == uid && r["controller"] == true)
}

fn sync(store: &Store, sts: &Value, all_pods: &[Value]) {
    let name = s(sts, "/metadata/name");
    let ns = ns_of(sts).unwrap_or("default");
    let uid = s(sts, "/metadata/uid");
    let template = sts.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut pods = BTreeMap::new();
    let mut by_ord = BTreeMap::new();
    for p in all_pods {
        if ns_of(p) != Some(ns) || !owned_by(p, uid) {
            continue;
        }
        if let Some(ord) = ordinal_of(name, s(p, "/metadata/name")) {
            pods.insert(ord, pod_state(p));
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
        current_revision: s(sts, "/status/currentRevision").to_string(),
        update_revision: revision(name, &template),
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
                // Old templates are not kept (no ControllerRevisions): a pod
                // below the partition is recreated from the current template
                // but keeps its old revision label.
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
    let mut st = status(&o, generation);
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
        // A missing pod below the partition comes back at the old revision.
        o.pods.remove(&1);
        assert_eq!(plan(&o), vec![Step::Create(1, "r1".into())]);
        o.on_delete = true;
        o.pods.insert(1, ready("r1"));
        o.partition = 0;
        assert_eq!(plan(&o), vec![], "OnDelete waits for the user");
    }

    #[test]
    fn status_counts() {
        let mut o = observed(3, &[(0, ready("r1")), (1, ready("r2"))]);
        o.update_revision = "r2".into();
        let st = status(&o, 4);
        assert_eq!(
            st,
            json!({"observedGeneration": 4, "replicas": 2, "readyReplicas": 2,
                "availableReplicas": 2, "currentReplicas": 1, "updatedReplicas": 1,
                "currentRevision": "r1", "updateRevision": "r2", "collisionCount": 0})
        );
        o.pods.insert(0, ready("r2"));
        o.replicas = 2;
        assert_eq!(status(&o, 4)["currentRevision"], "r2");
        assert_eq!(status(&o, 4)["currentReplicas"], 2);
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
