//! Storage: two StorageClasses and their volumes.
//! - `local-disks` (`kubernetes.io/no-provisioner`, `WaitForFirstConsumer`):
//!   the local static provisioner's disks. When the scheduler places a pod
//!   with an unbound claim of this class, [`provision_local`] makes a PV on
//!   the chosen node (`spec.local`, `nodeAffinity` on
//!   `kubernetes.io/hostname`, as the provisioner makes them) and binds it;
//!   from then on the pod can only run on that node.
//! - `standard` (the default class, `Immediate`): network disks, bound at
//!   once by [`bind_immediate`], no node affinity: they follow the pod.
//!
//! Both reclaim with `Delete`: a PV whose claim is gone is deleted (the
//! kubelet then removes its data). I/O on the store.

use super::{list_all, patch_main, patch_status, s, t};
use crate::kubesim::store::{DeleteOptions, Store, WriteOptions};
use serde_json::{Value, json};

/// The local-disk StorageClass.
pub const LOCAL: &str = "local-disks";
/// The network-disk StorageClass (the default).
pub const STANDARD: &str = "standard";

/// Creates both StorageClasses.
pub fn ensure_storage_classes(store: &Store) {
    let sc = t("storage.k8s.io", "storageclasses", None);
    for obj in [
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": LOCAL},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STANDARD, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubesim.io/network-disk",
            "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete", "allowVolumeExpansion": true}),
    ] {
        let _ = store.create(&sc, obj, &WriteOptions::default());
    }
}

/// A claim's class (the default when it names none).
pub fn class_of(pvc: &Value) -> &str {
    match s(pvc, "/spec/storageClassName") {
        "" => STANDARD,
        c => c,
    }
}

/// Whether a claim waits for its first consumer (a local disk).
pub fn waits_for_consumer(pvc: &Value) -> bool {
    class_of(pvc) == LOCAL
}

fn requested(pvc: &Value) -> Value {
    pvc.pointer("/spec/resources/requests/storage")
        .cloned()
        .unwrap_or(json!("1Gi"))
}

fn pv_for(pvc: &Value, name: &str, node: Option<&str>) -> Value {
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {}},
        "spec": {
            "capacity": {"storage": requested(pvc)},
            "accessModes": pvc.pointer("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class_of(pvc),
            "volumeMode": "Filesystem",
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                "namespace": s(pvc, "/metadata/namespace"), "name": s(pvc, "/metadata/name"),
                "uid": s(pvc, "/metadata/uid")},
        },
    });
    match node {
        Some(node) => {
            pv["metadata"]["annotations"] =
                json!({"pv.kubernetes.io/provisioned-by": "local-volume-provisioner-kubesim"});
            pv["spec"]["local"] = json!({"path": format!("/mnt/disks/{name}")});
            pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}});
        }
        None => {
            pv["metadata"]["annotations"] =
                json!({"pv.kubernetes.io/provisioned-by": "kubesim.io/network-disk"});
            pv["spec"]["csi"] = json!({"driver": "kubesim.io/network-disk", "volumeHandle": name});
        }
    }
    pv
}

fn bind(store: &Store, pvc: &Value, pv: Value, node: Option<&str>) {
    let pvs = t("", "persistentvolumes", None);
    let name = s(&pv, "/metadata/name").to_string();
    let created = match store.create(&pvs, pv, &WriteOptions::default()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kubesim: create pv {name}: {e}");
            return;
        }
    };
    let _ = patch_status(
        store,
        "",
        "persistentvolumes",
        &created,
        &json!({"phase": "Bound"}),
    );
    let mut annotations = json!({"pv.kubernetes.io/bind-completed": "yes",
        "pv.kubernetes.io/bound-by-controller": "yes"});
    if let Some(node) = node {
        annotations["volume.kubernetes.io/selected-node"] = json!(node);
    }
    if let Ok(c) = patch_main(
        store,
        "",
        "persistentvolumeclaims",
        pvc,
        &json!({"metadata": {"annotations": annotations}, "spec": {"volumeName": name, "storageClassName": class_of(pvc)}}),
    ) {
        let _ = patch_status(
            store,
            "",
            "persistentvolumeclaims",
            &c,
            &json!({"phase": "Bound", "accessModes": created["spec"]["accessModes"],
                "capacity": created["spec"]["capacity"]}),
        );
    }
}

/// Provisions and binds a local PV on `node` for a claim.
pub fn provision_local(store: &Store, pvc: &Value, node: &str) {
    let uid = s(pvc, "/metadata/uid");
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    bind(
        store,
        pvc,
        pv_for(pvc, &format!("local-pv-{short}"), Some(node)),
        Some(node),
    );
}

/// Binds every pending claim of an `Immediate` class to a new PV.
pub fn bind_immediate(store: &Store) {
    for pvc in list_all(store, "", "persistentvolumeclaims") {
        if waits_for_consumer(&pvc)
            || !s(&pvc, "/spec/volumeName").is_empty()
            || pvc.pointer("/metadata/deletionTimestamp").is_some()
        {
            continue;
        }
        let name = format!("pvc-{}", s(&pvc, "/metadata/uid"));
        bind(store, &pvc, pv_for(&pvc, &name, None), None);
    }
}

/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The PVC protection controller (and its admission plugin): every claim
/// carries [`PVC_PROTECTION`]; a deleted claim loses it once no pod that
/// has not finished uses it.
pub fn protect_claims(store: &Store) {
    let pods = list_all(store, "", "pods");
    let in_use = |ns: &str, claim: &str| {
        pods.iter().any(|p| {
            s(p, "/metadata/namespace") == ns
                && !matches!(s(p, "/status/phase"), "Succeeded" | "Failed")
                && p.pointer("/spec/volumes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|v| s(v, "/persistentVolumeClaim/claimName") == claim)
        })
    };
    for pvc in list_all(store, "", "persistentvolumeclaims") {
        let fins: Vec<String> = pvc
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        let has = fins.iter().any(|f| f == PVC_PROTECTION);
        let deleting = pvc.pointer("/metadata/deletionTimestamp").is_some();
        let next: Vec<String> = if !deleting && !has {
            fins.iter()
                .cloned()
                .chain([PVC_PROTECTION.to_string()])
                .collect()
        } else if deleting
            && has
            && !in_use(s(&pvc, "/metadata/namespace"), s(&pvc, "/metadata/name"))
        {
            fins.iter()
                .filter(|f| *f != PVC_PROTECTION)
                .cloned()
                .collect()
        } else {
            continue;
        };
        let mut body = json!({"metadata": {"finalizers": next}});
        body["metadata"]["resourceVersion"] = pvc["metadata"]["resourceVersion"].clone();
        let _ = patch_main(store, "", "persistentvolumeclaims", &pvc, &body);
    }
}

/// Deletes PVs whose claim is gone (reclaim policy Delete).
pub fn reclaim(store: &Store) {
    let claims: std::collections::BTreeSet<String> = list_all(store, "", "persistentvolumeclaims")
        .iter()
        .map(|c| s(c, "/metadata/uid").to_string())
        .collect();
    for pv in list_all(store, "", "persistentvolumes") {
        let uid = s(&pv, "/spec/claimRef/uid");
        if uid.is_empty()
            || claims.contains(uid)
            || s(&pv, "/spec/persistentVolumeReclaimPolicy") != "Delete"
        {
            continue;
        }
        let _ = store.delete(
            &t("", "persistentvolumes", None),
            s(&pv, "/metadata/name"),
            &DeleteOptions::default(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_pvs_are_bound_to_their_node() {
        let pvc = json!({"metadata": {"name": "data-web-0", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "5Gi"}}}});
        let pv = pv_for(&pvc, "local-pv-1", Some("node-a-0"));
        assert_eq!(
            pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
            json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a-0"]})
        );
        assert_eq!(pv["spec"]["capacity"]["storage"], "5Gi");
        assert_eq!(pv["spec"]["claimRef"]["name"], "data-web-0");
        assert!(waits_for_consumer(&pvc));
        let net = json!({"metadata": {"name": "x"}, "spec": {}});
        assert_eq!(class_of(&net), STANDARD);
        assert!(
            pv_for(&net, "pvc-x", None)["spec"]
                .get("nodeAffinity")
                .is_none()
        );
    }
}
