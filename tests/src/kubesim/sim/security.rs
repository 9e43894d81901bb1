//! The Pod's and containers' `securityContext` as the kubelet and a CRI
//! runtime (containerd + runc) apply them (issue 10). Pure: the effective
//! identity of a container ([`identity`]: the kubelet's runAsNonRoot
//! check included), the `setpriv` arguments that give a process that
//! identity, and the shell lines that make the root filesystem read-only.
//! I/O: [`apply_fs_group`], the kubelet's volume ownership management.
//!
//! The rules modelled:
//! - `runAsUser`, `runAsGroup`, `runAsNonRoot`: the container's
//!   securityContext wins over the Pod's; without `runAsUser` the image's
//!   user runs; without `runAsGroup` the group is the image's (the user's
//!   primary group in the image's passwd, 0 for a uid it does not know).
//! - groups: the primary group, `supplementalGroups` and `fsGroup` (Pod
//!   level only).
//! - `runAsNonRoot`: refused before anything is created, with the
//!   kubelet's messages (`verifyRunAsNonRoot`); the container waits in
//!   `CreateContainerConfigError`.
//! - capabilities: the runtime's default set as the bounding set, plus
//!   `add`, minus `drop` (`ALL` drops every one); a root process has them
//!   effective, a non-root process none; `privileged` has every one.
//! - `allowPrivilegeEscalation: false` sets no_new_privs.
//! - `readOnlyRootFilesystem`: every mount of the container is read-only
//!   except its volumes (and the image's declared volumes, which
//!   containerd backs by writable directories).
//! - `fsGroup`: emptyDir and PersistentVolumes get group `fsGroup`, group
//!   rw and setgid directories (recursively, or not at all with
//!   `fsGroupChangePolicy: OnRootMismatch` when the root already matches);
//!   ConfigMap and downward API volumes get the group and group read.

use super::images::ImageInfo;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown};
use std::path::Path;

/// The capabilities containerd gives a container by default.
pub const DEFAULT_CAPS: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// How a container's process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, sorted.
    pub groups: Vec<u32>,
    /// The bounding set (upper case, without `CAP_`); `None`: every
    /// capability (privileged).
    pub caps: Option<Vec<String>>,
    pub no_new_privs: bool,
    pub read_only_root: bool,
}

fn u32_at(v: &Value, ptr: &str) -> Option<u32> {
    v.pointer(ptr)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

fn bool_at(v: &Value, ptr: &str) -> Option<bool> {
    v.pointer(ptr).and_then(Value::as_bool)
}

/// The pod as the kubelet's `format.Pod` writes it.
fn pod_desc(pod: &Value) -> String {
    let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default();
    format!(
        "{}_{}({})",
        s("/metadata/name"),
        s("/metadata/namespace"),
        s("/metadata/uid")
    )
}

fn cap_name(c: &Value) -> Option<String> {
    let c = c.as_str()?.to_ascii_uppercase();
    Some(c.strip_prefix("CAP_").map(str::to_string).unwrap_or(c))
}

/// The effective identity of container `c` of `pod` running `image`; Err
/// is the kubelet's `CreateContainerConfigError` message.
pub fn identity(pod: &Value, c: &Value, image: &ImageInfo) -> Result<Identity, String> {
    let psc = pod
        .pointer("/spec/securityContext")
        .cloned()
        .unwrap_or_default();
    let csc = c.get("securityContext").cloned().unwrap_or_default();
    let run_as_user = u32_at(&csc, "/runAsUser").or_else(|| u32_at(&psc, "/runAsUser"));
    let run_as_group = u32_at(&csc, "/runAsGroup").or_else(|| u32_at(&psc, "/runAsGroup"));
    let non_root = bool_at(&csc, "/runAsNonRoot")
        .or_else(|| bool_at(&psc, "/runAsNonRoot"))
        .unwrap_or(false);
    let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
    let (image_uid, image_name, image_gid) = image.user();
    if non_root {
        match (run_as_user, image_uid) {
            (Some(0), _) => {
                return Err(format!(
                    "container's runAsUser breaks non-root policy (pod: {:?}, container: {name})",
                    pod_desc(pod)
                ));
            }
            (Some(_), _) => {}
            (None, None) => {
                return Err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({image_name}), cannot verify user is non-root (pod: {:?}, container: {name})",
                    pod_desc(pod)
                ));
            }
            (None, Some(0)) => {
                return Err(format!(
                    "container has runAsNonRoot and image will run as root (pod: {:?}, container: {name})",
                    pod_desc(pod)
                ));
            }
            (None, Some(_)) => {}
        }
    }
    let uid = run_as_user.or(image_uid).unwrap_or(0);
    let gid = run_as_group
        .or(if run_as_user.is_some() {
            Some(image.group_of(uid))
        } else {
            image_gid
        })
        .unwrap_or(0);
    let mut groups = vec![gid];
    groups.extend(
        psc.get("supplementalGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_u64().and_then(|g| u32::try_from(g).ok())),
    );
    groups.extend(u32_at(&psc, "/fsGroup"));
    groups.sort_unstable();
    groups.dedup();
    let privileged = bool_at(&csc, "/privileged").unwrap_or(false);
    let caps = (!privileged).then(|| {
        let list = |k: &str| -> Vec<String> {
            csc.pointer(&format!("/capabilities/{k}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(cap_name)
                .collect()
        };
        let (add, drop) = (list("add"), list("drop"));
        let mut caps: Vec<String> = if drop.iter().any(|d| d == "ALL") {
            Vec::new()
        } else {
            DEFAULT_CAPS
                .iter()
                .map(|c| c.to_string())
                .filter(|c| !drop.contains(c))
                .collect()
        };
        for a in add {
            if a == "ALL" {
                return None;
            }
            if !caps.contains(&a) {
                caps.push(a);
            }
        }
        Some(caps)
    });
    Ok(Identity {
        uid,
        gid,
        groups,
        caps: caps.flatten(),
        no_new_privs: bool_at(&csc, "/allowPrivilegeEscalation") == Some(false),
        read_only_root: bool_at(&csc, "/readOnlyRootFilesystem").unwrap_or(false),
    })
}

/// `setpriv` arguments (before `--`) that give a root process this
/// identity: a uid change from root clears a non-root process's
/// capabilities; the bounding set limits what root keeps.
pub fn setpriv_args(id: &Identity) -> Vec<String> {
    let mut a = vec![format!("--reuid={}", id.uid), format!("--regid={}", id.gid)];
    if id.groups.is_empty() {
        a.push("--clear-groups".into());
    } else {
        let g: Vec<String> = id.groups.iter().map(u32::to_string).collect();
        a.push(format!("--groups={}", g.join(",")));
    }
    if let Some(caps) = &id.caps {
        let mut set = String::from("-all");
        for c in caps {
            set.push_str(&format!(",+{}", c.to_ascii_lowercase()));
        }
        a.push(format!("--bounding-set={set}"));
        a.push("--inh-caps=-all".into());
    }
    if id.no_new_privs {
        a.push("--no-new-privs".into());
    }
    a
}

/// Shell lines, run after the container's bind mounts in its private mount
/// namespace, that remount every mount read-only except `/proc`, `/dev`,
/// `/sys` and the `writable` paths (and what lies below them).
pub fn read_only_root_script(writable: &[String]) -> String {
    let mut keep = String::from("/proc|/proc/*|/dev|/dev/*|/sys|/sys/*");
    for w in writable {
        let w = super::kubelet::quote(w.trim_end_matches('/'));
        keep.push_str(&format!("|{w}|{w}/*"));
    }
    format!(
        "for m in $(awk '{{print $5}}' /proc/self/mountinfo); do case \"$m\" in {keep}) ;; *) mount -o remount,bind,ro \"$m\" 2>/dev/null || true ;; esac; done\n"
    )
}

/// The kubelet's volume ownership management for `fsGroup`: group
/// `gid` on everything under `dir`, group rw (r for a read-only volume
/// such as a ConfigMap's) and setgid directories; with
/// `on_root_mismatch` nothing is done when the root already has them.
pub fn apply_fs_group(
    dir: &Path,
    gid: u32,
    read_only: bool,
    on_root_mismatch: bool,
) -> std::io::Result<()> {
    let mask = if read_only { 0o440 } else { 0o660 };
    if on_root_mismatch {
        let m = std::fs::metadata(dir)?;
        if m.gid() == gid && m.mode() & (mask | 0o2000 | 0o110) == mask | 0o2000 | 0o110 {
            return Ok(());
        }
    }
    walk(dir, &mut |p, meta| {
        lchown(p, None, Some(gid))?;
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        let extra = if meta.is_dir() { 0o2000 | 0o110 } else { 0 };
        std::fs::set_permissions(
            p,
            std::fs::Permissions::from_mode((meta.mode() & 0o7777) | mask | extra),
        )
    })
}

fn walk(
    p: &Path,
    f: &mut dyn FnMut(&Path, &std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(p)?;
    f(p, &meta)?;
    if meta.is_dir() {
        for e in std::fs::read_dir(p)? {
            walk(&e?.path(), f)?;
        }
    }
    Ok(())
}

/// The Pod's `fsGroup` and whether its change policy is `OnRootMismatch`.
pub fn fs_group(pod: &Value) -> Option<(u32, bool)> {
    let gid = u32_at(pod, "/spec/securityContext/fsGroup")?;
    let policy = pod
        .pointer("/spec/securityContext/fsGroupChangePolicy")
        .and_then(Value::as_str);
    Some((gid, policy == Some("OnRootMismatch")))
}

/// Gives others search permission on `dir` and its ancestors, so that a
/// container running as any user reaches what kubesim puts there (its
/// kubeconfig, the programs linked from a container's `bin`), as every
/// user of a real node reaches the files an image holds.
pub fn open_for_containers(dir: &Path) -> std::io::Result<()> {
    for d in dir.ancestors() {
        if d.as_os_str().is_empty() {
            continue;
        }
        let m = std::fs::metadata(d)?;
        let mode = m.mode() & 0o7777;
        if mode & 0o011 != 0o011 {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o011))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubesim::sim::images::info;
    use crate::kubesim::sim::kubelet::Image;
    use serde_json::json;

    fn cassandra() -> ImageInfo {
        info(&Image::Database {
            kind: "cassandra".into(),
            tag: "4.1.4".into(),
        })
    }

    fn pod(sc: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"securityContext": sc}})
    }

    #[test]
    fn image_user_by_default() {
        let id = identity(&pod(json!({})), &json!({"name": "c"}), &cassandra()).unwrap();
        assert_eq!((id.uid, id.gid, id.groups.clone()), (0, 0, vec![0]));
        assert_eq!(id.caps.as_ref().map(Vec::len), Some(14));
        assert!(!id.no_new_privs && !id.read_only_root);
        let op = identity(
            &pod(json!({})),
            &json!({"name": "c"}),
            &info(&Image::Operator),
        )
        .unwrap();
        assert_eq!((op.uid, op.gid), (65532, 65532));
    }

    #[test]
    fn container_wins_over_pod() {
        let p = pod(
            json!({"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456,
            "supplementalGroups": [4567, 3456]}),
        );
        let id = identity(&p, &json!({"name": "c"}), &cassandra()).unwrap();
        assert_eq!((id.uid, id.gid), (1234, 2345));
        assert_eq!(id.groups, vec![2345, 3456, 4567]);
        let c = json!({"name": "c", "securityContext": {"runAsUser": 999}});
        let id = identity(&p, &c, &cassandra()).unwrap();
        assert_eq!((id.uid, id.gid), (999, 2345));
        // Without runAsGroup: the user's group in the image, else 0.
        let id = identity(&pod(json!({})), &c, &cassandra()).unwrap();
        assert_eq!((id.uid, id.gid), (999, 999));
        let c = json!({"name": "c", "securityContext": {"runAsUser": 1234}});
        let id = identity(&pod(json!({})), &c, &cassandra()).unwrap();
        assert_eq!((id.uid, id.gid), (1234, 0));
    }

    #[test]
    fn run_as_non_root() {
        let c = json!({"name": "cassandra"});
        let err = identity(&pod(json!({"runAsNonRoot": true})), &c, &cassandra()).unwrap_err();
        assert_eq!(
            err,
            "container has runAsNonRoot and image will run as root (pod: \"p_ns(u-1)\", container: cassandra)"
        );
        // The container may allow what the pod forbids.
        let allowed = json!({"name": "c", "securityContext": {"runAsNonRoot": false}});
        assert!(identity(&pod(json!({"runAsNonRoot": true})), &allowed, &cassandra()).is_ok());
        let p = pod(json!({"runAsNonRoot": true, "runAsUser": 0}));
        assert_eq!(
            identity(&p, &c, &cassandra()).unwrap_err(),
            "container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: cassandra)"
        );
        let p = pod(json!({"runAsNonRoot": true, "runAsUser": 999}));
        assert_eq!(identity(&p, &c, &cassandra()).unwrap().uid, 999);
        let named = ImageInfo {
            user: "cassandra",
            ..cassandra()
        };
        assert_eq!(
            identity(&pod(json!({"runAsNonRoot": true})), &c, &named).unwrap_err(),
            "container has runAsNonRoot and image has non-numeric user (cassandra), cannot verify user is non-root (pod: \"p_ns(u-1)\", container: cassandra)"
        );
        assert!(
            identity(
                &pod(json!({"runAsNonRoot": true})),
                &c,
                &info(&Image::Operator)
            )
            .is_ok()
        );
    }

    #[test]
    fn capabilities_and_privileges() {
        let c = json!({"name": "c", "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
            "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true}});
        let id = identity(&pod(json!({})), &c, &cassandra()).unwrap();
        assert_eq!(id.caps, Some(vec!["NET_ADMIN".to_string()]));
        assert!(id.no_new_privs && id.read_only_root);
        let args = setpriv_args(&id);
        assert!(args.contains(&"--bounding-set=-all,+net_admin".to_string()));
        assert!(args.contains(&"--no-new-privs".to_string()));
        let c = json!({"name": "c", "securityContext": {"capabilities": {"drop": ["CAP_KILL", "chown"]}}});
        let caps = identity(&pod(json!({})), &c, &cassandra())
            .unwrap()
            .caps
            .unwrap();
        assert_eq!(caps.len(), 12);
        assert!(!caps.contains(&"KILL".to_string()) && !caps.contains(&"CHOWN".to_string()));
        let c = json!({"name": "c", "securityContext": {"privileged": true}});
        let id = identity(&pod(json!({})), &c, &cassandra()).unwrap();
        assert_eq!(id.caps, None);
        assert!(
            !setpriv_args(&id)
                .iter()
                .any(|a| a.starts_with("--bounding-set"))
        );
    }

    #[test]
    fn fs_group_ownership() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("d");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(sub.join("f"), "x").unwrap();
        std::fs::set_permissions(sub.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        apply_fs_group(dir.path(), 3456, false, false).unwrap();
        let m = std::fs::metadata(&sub).unwrap();
        assert_eq!((m.gid(), m.mode() & 0o7777), (3456, 0o2770));
        let f = std::fs::metadata(sub.join("f")).unwrap();
        assert_eq!((f.gid(), f.mode() & 0o7777), (3456, 0o660));
        // A setgid directory gives new files its group.
        std::fs::write(sub.join("g"), "y").unwrap();
        assert_eq!(std::fs::metadata(sub.join("g")).unwrap().gid(), 3456);
        // OnRootMismatch: the root matches, nothing below is looked at.
        lchown(sub.join("g"), None, Some(0)).unwrap();
        apply_fs_group(dir.path(), 3456, false, true).unwrap();
        assert_ne!(std::fs::metadata(sub.join("g")).unwrap().gid(), 3456);
        apply_fs_group(dir.path(), 3456, false, false).unwrap();
        assert_eq!(std::fs::metadata(sub.join("g")).unwrap().gid(), 3456);
        // A read-only volume: group read only.
        std::fs::set_permissions(sub.join("g"), std::fs::Permissions::from_mode(0o600)).unwrap();
        apply_fs_group(&sub.join("g"), 4567, true, false).unwrap();
        let g = std::fs::metadata(sub.join("g")).unwrap();
        assert_eq!((g.gid(), g.mode() & 0o7777), (4567, 0o640));
    }

    #[test]
    fn read_only_script_keeps_volumes() {
        let s = read_only_root_script(&["/var/lib/cassandra/".into()]);
        assert!(
            s.contains("|'/var/lib/cassandra'|'/var/lib/cassandra'/*)"),
            "{s}"
        );
    }
}
