//! Local SSDs as GKE has them and the local static provisioner
//! (kubernetes-sigs/sig-storage-local-static-provisioner) publishes them:
//! every Node has a fixed number of disks ([`super::SimOptions::local_ssds`])
//! mounted at `/mnt/disks/ssd<i>`; the provisioner's DaemonSet pod on each
//! Node publishes one PV per disk (`pkg/discovery/discovery.go`
//! `discoverVolumesAtPath`: name `local-pv-<fnv32a(file, node, class)>`,
//! `spec.local.path`, node affinity on `kubernetes.io/hostname`, class
//! `local-disks`, phase Available) and, when a PV is Released with reclaim
//! policy Delete, cleans the disk and deletes the PV (`pkg/deleter`), so
//! that discovery publishes it again, empty and Available. Nothing is
//! provisioned on demand: a claim binds to a published PV on the Node the
//! scheduler picks ([`super::scheduler`]), and a Node whose disks are taken
//! does not fit.
//!
//! A disk is a directory of the Node's machine,
//! `<work_dir>/nodes/<node>/mnt/disks/ssd<i>`, and belongs to one
//! incarnation of the Node (its UID, kept in `<work_dir>/nodes/<node>/uid`).
//! When the machine goes (the Node deleted) or comes back as a new machine
//! under the same name (GKE auto-repair re-creates the VM: a new Node UID),
//! its local SSDs are gone: their data is destroyed and the fake ring is
//! told the data directories on them are gone, while the PV and PVC
//! objects stay as they were (nobody deletes them: the provisioner pod of
//! that Node is gone too). A disk can also be emptied while its Node lives
//! ([`wipe_disk`]: a disk swapped by a repair). [`recreate_node`] brings a
//! Node back under its name with empty disks. I/O: the store, the disks'
//! directories and the ring.

use super::{list_all, s, t};
use crate::fake_cassandra::ring_service::RingService;
use crate::kubesim::store::{ApiError, DeleteOptions, Store, WriteOptions};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A GKE local SSD's size.
pub const SSD_CAPACITY: &str = "375Gi";

/// What can go wrong with a Node's machine or disk.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("node {0} is unknown: it never ran in this world")]
    UnknownNode(String),
    #[error("node {node} has no local SSD {index}")]
    UnknownDisk { node: String, index: usize },
    #[error("re-creating node {node}: {source}")]
    RecreateNode {
        node: String,
        #[source]
        source: ApiError,
    },
    #[error("wiping {path}: {source}")]
    Wipe {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where the `i`th local SSD is mounted on a Node (GKE's layout).
pub fn mount_path(index: usize) -> String {
    format!("/mnt/disks/ssd{index}")
}

/// The provisioner's PV name for a disk: `local-pv-` and the FNV-1a 32-bit
/// hash of the mount path, the node name and the class
/// (`discovery.generatePVName`), so that a re-published disk gets its old
/// name back.
pub fn pv_name(node: &str, path: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in path
        .bytes()
        .chain(node.bytes())
        .chain(super::storage::LOCAL.bytes())
    {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("local-pv-{h:08x}")
}

fn machine_dir(work_dir: &Path, node: &str) -> PathBuf {
    work_dir.join("nodes").join(node)
}

/// The host directory behind a disk of a Node.
pub fn disk_dir(work_dir: &Path, node: &str, path: &str) -> PathBuf {
    machine_dir(work_dir, node).join(path.trim_start_matches('/'))
}

/// The node a local PV's affinity names.
pub fn node_of_pv(pv: &Value) -> Option<&str> {
    pv.pointer("/spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| s(e, "/key") == "kubernetes.io/hostname")
        .and_then(|e| e.pointer("/values/0"))
        .and_then(Value::as_str)
}

/// Where a PV's data lives on this machine: a local PV on its Node's disk,
/// any other under `pvs/<name>`.
pub fn host_dir_of_pv(work_dir: &Path, pv: &Value) -> PathBuf {
    match (
        pv.pointer("/spec/local/path").and_then(Value::as_str),
        node_of_pv(pv),
    ) {
        (Some(path), Some(node)) => disk_dir(work_dir, node, path),
        _ => work_dir.join("pvs").join(s(pv, "/metadata/name")),
    }
}

/// The PV the provisioner publishes for disk `index` of `node`.
pub fn published_pv(node: &Value, index: usize) -> Value {
    let name = s(node, "/metadata/name");
    let path = mount_path(index);
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": pv_name(name, &path),
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"pv.kubernetes.io/provisioned-by":
                format!("local-volume-provisioner-{name}-{}", s(node, "/metadata/uid"))},
        },
        "spec": {
            "capacity": {"storage": SSD_CAPACITY},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": super::storage::LOCAL,
            "volumeMode": "Filesystem",
            "local": {"path": path},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [name]}]}]}},
        },
    })
}

/// Destroys a disk's data: the ring forgets every data directory on it
/// (its process, if any, dies with it), then the files go and the disk is
/// an empty directory again (a new inode: nothing of the old one is
/// found again).
fn destroy(dir: &Path, ring: Option<&RingService>) -> Result<(), DiskError> {
    if let Some(ring) = ring {
        let mut inodes = BTreeSet::new();
        super::deaths::dir_inodes(dir, 4, &mut inodes);
        ring.report_disk_lost(|data_dir| {
            data_dir
                .rsplit_once('@')
                .is_some_and(|(_, at)| inodes.contains(at))
        });
    }
    let failed = |source| DiskError::Wipe {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    std::fs::create_dir_all(dir).map_err(failed)
}

/// The Node incarnation whose disks a machine directory holds.
fn recorded_uid(work_dir: &Path, node: &str) -> Option<String> {
    std::fs::read_to_string(machine_dir(work_dir, node).join("uid")).ok()
}

/// Whether the kubelet of `node` (this incarnation, `uid`) may start Pods:
/// its disks are attached (the pass has set them up for this machine).
pub fn attached(work_dir: &Path, node: &str, uid: &str) -> bool {
    recorded_uid(work_dir, node).as_deref() == Some(uid)
}

/// One pass: machines that are gone or replaced lose their disks (their
/// processes are killed first with `kill_node`); live Nodes get their
/// disks and the provisioner publishes and cleans their PVs.
pub fn sync(
    store: &Store,
    work_dir: &Path,
    per_node: usize,
    ring: Option<&RingService>,
    kill_node: impl Fn(&str),
) {
    let nodes: BTreeMap<String, std::sync::Arc<Value>> = list_all(store, "", "nodes")
        .into_iter()
        .map(|n| (s(&n, "/metadata/name").to_string(), n))
        .collect();
    let root = work_dir.join("nodes");
    for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(recorded) = recorded_uid(work_dir, &name) else {
            continue;
        };
        if nodes
            .get(&name)
            .is_some_and(|n| s(n, "/metadata/uid") == recorded)
        {
            continue;
        }
        // The machine this directory belonged to is gone.
        kill_node(&name);
        let disks = e.path().join("mnt/disks");
        for d in std::fs::read_dir(&disks).into_iter().flatten().flatten() {
            if let Err(err) = destroy(&d.path(), ring) {
                eprintln!("kubesim: {err}");
            }
        }
        let _ = std::fs::remove_file(e.path().join("uid"));
    }
    for (name, node) in &nodes {
        if node.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let uid = s(node, "/metadata/uid");
        if !attached(work_dir, name, uid) {
            let dir = machine_dir(work_dir, name);
            let made = (0..per_node)
                .map(|i| destroy(&disk_dir(work_dir, name, &mount_path(i)), ring))
                .collect::<Result<Vec<()>, DiskError>>()
                .and_then(|_| {
                    std::fs::create_dir_all(&dir).map_err(|source| DiskError::Wipe {
                        path: dir.clone(),
                        source,
                    })?;
                    // Kept so that a deleted Node can be re-created.
                    let record = serde_json::to_vec(&**node).unwrap_or_default();
                    std::fs::write(dir.join("node.json"), record)
                        .and_then(|()| std::fs::write(dir.join("uid"), uid))
                        .map_err(|source| DiskError::Wipe { path: dir, source })
                });
            if let Err(err) = made {
                eprintln!("kubesim: the disks of node {name}: {err}");
                continue;
            }
        }
        publish(store, work_dir, node, per_node, ring);
    }
}

/// The provisioner of one live Node: publishes each disk's PV when
/// missing, and cleans and deletes a Released one (its claim is gone).
fn publish(
    store: &Store,
    work_dir: &Path,
    node: &Value,
    per_node: usize,
    ring: Option<&RingService>,
) {
    let pvs = t("", "persistentvolumes", None);
    let claims: BTreeSet<String> = list_all(store, "", "persistentvolumeclaims")
        .iter()
        .map(|c| s(c, "/metadata/uid").to_string())
        .collect();
    let name = s(node, "/metadata/name");
    for i in 0..per_node {
        let wanted = published_pv(node, i);
        let pv_name = s(&wanted, "/metadata/name").to_string();
        match store.get(&pvs, &pv_name) {
            Err(_) => {
                if let Ok(created) = store.create(&pvs, wanted, &WriteOptions::default()) {
                    let _ = super::patch_status(
                        store,
                        "",
                        "persistentvolumes",
                        &created,
                        &json!({"phase": "Available"}),
                    );
                }
            }
            Ok(pv) => {
                let claim = s(&pv, "/spec/claimRef/uid");
                if claim.is_empty()
                    || claims.contains(claim)
                    || pv.pointer("/metadata/deletionTimestamp").is_some()
                {
                    continue;
                }
                // Released: the deleter wipes the disk, then the PV goes;
                // discovery publishes it again on the next pass.
                if let Err(err) = destroy(&disk_dir(work_dir, name, &mount_path(i)), ring) {
                    eprintln!("kubesim: cleaning {pv_name}: {err}");
                    continue;
                }
                let _ = store.delete(&pvs, &pv_name, &DeleteOptions::default());
            }
        }
    }
}

/// Empties disk `index` of a live Node, as a disk swapped by a repair: the
/// PV and its claim stay, the data and the ring's memory of it go.
pub fn wipe_disk(
    store: &Store,
    work_dir: &Path,
    ring: Option<&RingService>,
    node: &str,
    index: usize,
) -> Result<PathBuf, DiskError> {
    store
        .get(&t("", "nodes", None), node)
        .map_err(|_| DiskError::UnknownNode(node.to_string()))?;
    let dir = disk_dir(work_dir, node, &mount_path(index));
    if !dir.is_dir() {
        return Err(DiskError::UnknownDisk {
            node: node.to_string(),
            index,
        });
    }
    destroy(&dir, ring)?;
    Ok(dir)
}

/// GKE auto-repair: the machine of `node` is replaced by a new one under
/// the same name. Its Pods are gone (the pod garbage collector deletes the
/// Pods of a deleted Node), the Node object is deleted and registered
/// again (a new UID; no taints or cordon of the old one) with the same
/// labels, capacity and addresses; its local SSDs come back empty behind
/// the unchanged PVs (the next pass destroys the old data and tells the
/// ring). Works for a Node that exists and for one deleted earlier. The
/// new Node.
pub fn recreate_node(store: &Store, work_dir: &Path, node: &str) -> Result<Value, DiskError> {
    let nodes = t("", "nodes", None);
    let old = match store.get(&nodes, node) {
        Ok(n) => n,
        Err(_) => std::fs::read(machine_dir(work_dir, node).join("node.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| DiskError::UnknownNode(node.to_string()))?,
    };
    for pod in list_all(store, "", "pods") {
        if s(&pod, "/spec/nodeName") == node {
            let _ = store.delete(
                &t("", "pods", super::ns_of(&pod)),
                s(&pod, "/metadata/name"),
                &DeleteOptions {
                    grace_period: Some(0),
                    ..Default::default()
                },
            );
        }
    }
    let _ = store.delete(&nodes, node, &DeleteOptions::default());
    let mut fresh = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "labels": old.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
        "spec": {},
        "status": old.get("status").cloned().unwrap_or(json!({})),
    });
    fresh["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "kubelet is posting ready status",
        "lastHeartbeatTime": crate::kubesim::now_rfc3339(),
        "lastTransitionTime": crate::kubesim::now_rfc3339()}]);
    let created = store
        .create(&nodes, fresh.clone(), &WriteOptions::default())
        .map_err(|source| DiskError::RecreateNode {
            node: node.to_string(),
            source,
        })?;
    // The store keeps status on create for Nodes registered by a kubelet.
    if created.get("status") != fresh.get("status") {
        let _ = super::patch_status(store, "", "nodes", &created, &fresh["status"]);
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pv_names_are_stable_per_disk_and_differ_between_disks() {
        assert_eq!(
            pv_name("node-a-0", "/mnt/disks/ssd0"),
            pv_name("node-a-0", "/mnt/disks/ssd0")
        );
        assert_ne!(
            pv_name("node-a-0", "/mnt/disks/ssd0"),
            pv_name("node-a-0", "/mnt/disks/ssd1")
        );
        assert_ne!(
            pv_name("node-a-0", "/mnt/disks/ssd0"),
            pv_name("node-a-1", "/mnt/disks/ssd0")
        );
        assert!(pv_name("n", "/p").starts_with("local-pv-"));
        assert_eq!(pv_name("n", "/p").len(), "local-pv-".len() + 8);
    }

    #[test]
    fn a_published_pv_is_a_local_disk_of_its_node() {
        let node = json!({"metadata": {"name": "node-b-1", "uid": "u-1"}});
        let pv = published_pv(&node, 1);
        assert_eq!(pv["spec"]["local"]["path"], "/mnt/disks/ssd1");
        assert_eq!(node_of_pv(&pv), Some("node-b-1"));
        assert_eq!(pv["spec"]["storageClassName"], "local-disks");
        assert_eq!(pv["spec"]["capacity"]["storage"], SSD_CAPACITY);
        assert_eq!(
            pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
            "local-volume-provisioner-node-b-1-u-1"
        );
        assert_eq!(
            host_dir_of_pv(Path::new("/w"), &pv),
            PathBuf::from("/w/nodes/node-b-1/mnt/disks/ssd1")
        );
        let network = json!({"metadata": {"name": "pvc-1"}, "spec": {"csi": {}}});
        assert_eq!(
            host_dir_of_pv(Path::new("/w"), &network),
            PathBuf::from("/w/pvs/pvc-1")
        );
    }

    #[test]
    fn destroying_a_disk_leaves_it_empty_and_the_ring_forgets_it() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("ssd0");
        std::fs::create_dir_all(disk.join("data")).unwrap();
        std::fs::write(disk.join("data/marker"), "x").unwrap();
        let ring = RingService::new(crate::ring::Options::default());
        let id = {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(disk.join("data")).unwrap();
            format!("/var/lib/cassandra/data@{}:{}", m.dev(), m.ino())
        };
        let seed = crate::ring::NodeConfig::new("c", "10.0.0.1", "dc1", "r1", &["10.0.0.1"], &id);
        ring.with(|r| r.start(&seed)).expect("starts");
        assert!(ring.with(|r| r.data_dir(&id).is_some()));
        destroy(&disk, Some(&ring)).unwrap();
        assert!(disk.is_dir());
        assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0);
        assert!(
            ring.with(|r| r.data_dir(&id).is_none()),
            "the ring forgot the data directory"
        );
        assert!(
            ring.with(|r| r.node_on(&id).is_none()),
            "its process died with it"
        );
    }
}
