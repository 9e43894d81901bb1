//! Storage: two StorageClasses and their volumes.
//! - `local-disks` (`kubernetes.io/no-provisioner`, `WaitForFirstConsumer`):
//!   the local static provisioner's disks, a fixed number per Node,
//!   published as PVs by [`super::disks`]. When the scheduler places a pod
//!   with an unbound claim of this class on a Node, [`bind_local`] binds
//!   the claim to one of that Node's Available PVs (the scheduler's
//!   VolumeBinding plugin); from then on the pod can only run on that
//!   node. A Node without a free disk does not fit.
//! - `standard` (the default class, `Immediate`): network disks, bound at
//!   once by [`bind_immediate`], no node affinity: they follow the pod.
//!
//! Both reclaim with `Delete`: a network PV whose claim is gone is deleted
//! (the kubelet then removes its data); a local one is Released and left
//! to its Node's provisioner, which cleans the disk and publishes it
//! again. I/O on the store.

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

fn pv_for(pvc: &Value, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {},
            "annotations": {"pv.kubernetes.io/provisioned-by": "kubesim.io/network-disk"}},
        "spec": {
            "capacity": {"storage": requested(pvc)},
            "accessModes": pvc.pointer("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class_of(pvc),
            "volumeMode": "Filesystem",
            "csi": {"driver": "kubesim.io/network-disk", "volumeHandle": name},
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                "namespace": s(pvc, "/metadata/namespace"), "name": s(pvc, "/metadata/name"),
                "uid": s(pvc, "/metadata/uid")},
        },
    })
}

fn bind(store: &Store, pvc: &Value, pv: Value) {
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
    let annotations = json!({"pv.kubernetes.io/bind-completed": "yes",
        "pv.kubernetes.io/bound-by-controller": "yes"});
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

/// Whether a published, Available local PV can hold `pvc` (its class,
/// no claim yet, enough capacity, the access modes it offers).
pub fn local_pv_fits(pv: &Value, pvc: &Value) -> bool {
    let size = |v: &Value| {
        v.as_str()
            .and_then(super::quantity::parse_milli)
            .unwrap_or(0)
    };
    s(pv, "/spec/storageClassName") == class_of(pvc)
        && pv.pointer("/spec/claimRef").is_none_or(Value::is_null)
        && pv.pointer("/metadata/deletionTimestamp").is_none()
        && s(pv, "/status/phase") == "Available"
        && size(&pv["spec"]["capacity"]["storage"]) >= size(&requested(pvc))
}

/// Binds a claim to the published local PV `pv` of `node` (the volume
/// binder's API update of the PV's `claimRef`, then the PV controller's
/// binding of the claim).
pub fn bind_local(store: &Store, pvc: &Value, pv: &Value, node: &str) {
    let claim_ref = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": s(pvc, "/metadata/namespace"), "name": s(pvc, "/metadata/name"),
        "uid": s(pvc, "/metadata/uid")});
    let mut body = json!({"spec": {"claimRef": claim_ref}});
    body["metadata"] = json!({"resourceVersion": pv["metadata"]["resourceVersion"].clone()});
    let Ok(bound) = patch_main(store, "", "persistentvolumes", pv, &body) else {
        // Taken meanwhile: the pod is scheduled again on the next pass.
        return;
    };
    let _ = patch_status(
        store,
        "",
        "persistentvolumes",
        &bound,
        &json!({"phase": "Bound"}),
    );
    let annotations = json!({"pv.kubernetes.io/bind-completed": "yes",
        "pv.kubernetes.io/bound-by-controller": "yes",
        "volume.kubernetes.io/selected-node": node});
    if let Ok(c) = patch_main(
        store,
        "",
        "persistentvolumeclaims",
        pvc,
        &json!({"metadata": {"annotations": annotations},
            "spec": {"volumeName": s(&bound, "/metadata/name"), "storageClassName": class_of(pvc)}}),
    ) {
        let _ = patch_status(
            store,
            "",
            "persistentvolumeclaims",
            &c,
            &json!({"phase": "Bound", "accessModes": bound["spec"]["accessModes"],
                "capacity": bound["spec"]["capacity"]}),
        );
    }
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
        bind(store, &pvc, pv_for(&pvc, &name));
    }
}

/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The PVC protection controller (and its admission plugin): every claim
/// carries [`PVC_PROTECTION`]; a deleted claim loses it once no Pod bound
/// to a Node names it, whatever that Pod's phase
/// (pkg/controller/volume/pvcprotection/pvc_protection_controller.go,
/// `podUsesPVC`: "Check whether pvc is used by pod only if pod is
/// scheduled, because kubelet sees pods after they have been scheduled and
/// it won't allow starting a pod referencing a PVC with a non-nil
/// deletionTimestamp"). An unscheduled Pending Pod does not hold its
/// claim; a Failed Pod still on its Node does.
pub fn protect_claims(store: &Store) {
    let pods = list_all(store, "", "pods");
    let in_use = |ns: &str, claim: &str| {
        pods.iter().any(|p| {
            s(p, "/metadata/namespace") == ns
                && !s(p, "/spec/nodeName").is_empty()
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

/// PVs whose claim is gone (reclaim policy Delete): a network disk is
/// deleted; a local one is marked Released for its Node's provisioner
/// ([`super::disks`]), which alone can clean it.
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
        if pv.pointer("/spec/local").is_some() {
            if s(&pv, "/status/phase") != "Released" {
                let _ = patch_status(
                    store,
                    "",
                    "persistentvolumes",
                    &pv,
                    &json!({"phase": "Released"}),
                );
            }
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
    fn a_local_pv_fits_a_claim_of_its_class_and_size_while_available() {
        let pvc = json!({"metadata": {"name": "data-web-0", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "5Gi"}}}});
        assert!(waits_for_consumer(&pvc));
        let node = json!({"metadata": {"name": "node-a-0", "uid": "n1"}});
        let mut pv = super::super::disks::published_pv(&node, 0);
        pv["status"] = json!({"phase": "Available"});
        assert!(local_pv_fits(&pv, &pvc));
        let mut big = pvc.clone();
        big["spec"]["resources"]["requests"]["storage"] = json!("400Gi");
        assert!(!local_pv_fits(&pv, &big), "a 375Gi disk cannot hold 400Gi");
        let mut taken = pv.clone();
        taken["spec"]["claimRef"] = json!({"uid": "u2"});
        assert!(!local_pv_fits(&taken, &pvc));
        let mut released = pv.clone();
        released["status"]["phase"] = json!("Released");
        assert!(!local_pv_fits(&released, &pvc));
        let net = json!({"metadata": {"name": "x"}, "spec": {}});
        assert_eq!(class_of(&net), STANDARD);
        assert!(!local_pv_fits(&pv, &net));
        let network = pv_for(&net, "pvc-x");
        assert!(network["spec"].get("nodeAffinity").is_none());
        assert_eq!(network["spec"]["claimRef"]["name"], "x");
    }
}
