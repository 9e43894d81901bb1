//! A Pod's volumes: emptyDirs, PersistentVolumes, hostPaths, and the
//! projected ConfigMap, downward API and ServiceAccount token volumes
//! written as the kubelet's atomic writer does (and kept current: tokens
//! are refreshed before they expire), with `fsGroup` ownership. I/O.

use super::*;

/// Writes `files` into `dir` as the kubelet's atomic writer does: a fresh
/// `..<timestamp>` directory, the `..data` symlink swapped to it by a
/// rename, and one symlink per top-level name into `..data`. Nothing is
/// written when the content is unchanged.
pub fn project(dir: &Path, files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let data = dir.join("..data");
    let current: BTreeMap<String, Vec<u8>> = files
        .keys()
        .filter_map(|k| std::fs::read(data.join(k)).ok().map(|v| (k.clone(), v)))
        .collect();
    if data.exists() && current == *files {
        return Ok(false);
    }
    let old = std::fs::read_link(&data).ok();
    let stamp = format!(
        "..{}_{}",
        now_rfc3339().replace(':', "_"),
        crate::kubesim::random_u64() % 1_000_000_000
    );
    let fresh = dir.join(&stamp);
    for (k, v) in files {
        let p = fresh.join(k);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, v)?;
    }
    std::fs::create_dir_all(&fresh)?;
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, &data)?;
    let tops: BTreeSet<String> = files
        .keys()
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{top}"), &link)?;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if !n.starts_with("..") && !tops.contains(&n) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if let Some(old) = old
        && old != Path::new(&stamp)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

pub(super) fn format_map(m: Option<&Value>) -> Vec<u8> {
    let mut out = String::new();
    for (k, v) in m.and_then(Value::as_object).into_iter().flatten() {
        out.push_str(&format!(
            "{k}={}\n",
            Value::String(v.as_str().unwrap_or_default().into())
        ));
    }
    out.trim_end_matches('\n').as_bytes().to_vec()
}

impl PodCtx {
    /// The files of a ConfigMap or downward-API volume; Err when a
    /// required ConfigMap is missing.
    pub(super) fn projection(
        &self,
        v: &Value,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        let pod = self.pod();
        if let Some(src) = v.get("configMap") {
            let name = s(src, "/name");
            let cm = self.store.get(&t("", "configmaps", ns_of(&pod)), name).ok();
            let Some(cm) = cm else {
                if src.get("optional") == Some(&json!(true)) {
                    return Ok(Some(BTreeMap::new()));
                }
                return Err(format!("configmap \"{name}\" not found"));
            };
            let data: BTreeMap<String, Vec<u8>> = cm
                .get("data")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().unwrap_or_default().as_bytes().to_vec(),
                    )
                })
                .collect();
            let files = match src.get("items").and_then(Value::as_array) {
                Some(items) => items
                    .iter()
                    .filter_map(|i| {
                        Some((s(i, "/path").to_string(), data.get(s(i, "/key"))?.clone()))
                    })
                    .collect(),
                None => data,
            };
            return Ok(Some(files));
        }
        if let Some(src) = v.get("downwardAPI") {
            let mut files = BTreeMap::new();
            for item in src
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let path = s(item, "/path").to_string();
                let content = if let Some(f) = item.get("fieldRef") {
                    match s(f, "/fieldPath") {
                        "metadata.labels" => format_map(pod.pointer("/metadata/labels")),
                        "metadata.annotations" => format_map(pod.pointer("/metadata/annotations")),
                        p => field_value(&pod, p, &self.ip, &self.host_ip)
                            .unwrap_or_default()
                            .into_bytes(),
                    }
                } else if let Some(r) = item.get("resourceFieldRef") {
                    let container = pod
                        .pointer("/spec/containers/0")
                        .cloned()
                        .unwrap_or(json!({}));
                    resource_value(&pod, &container, r, &self.allocatable)
                        .unwrap_or_default()
                        .into_bytes()
                } else {
                    Vec::new()
                };
                files.insert(path, content);
            }
            return Ok(Some(files));
        }
        if let Some(src) = v.get("projected") {
            let mut files = BTreeMap::new();
            for source in src
                .get("sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(t) = source.get("serviceAccountToken") {
                    let path = s(t, "/path").to_string();
                    let seconds = t
                        .get("expirationSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(3600);
                    let key = format!("{}/{path}", s(v, "/name"));
                    files.insert(path, self.projected_token(&key, seconds)?.into_bytes());
                } else if let Some(sub) = self.projection(source)? {
                    files.extend(sub);
                }
            }
            return Ok(Some(files));
        }
        Ok(None)
    }

    /// The Pod's bound ServiceAccount token for one projected path: the
    /// one it has until 80% of its lifetime has passed (or a day), as the
    /// kubelet's token manager refreshes it, then a new one.
    fn projected_token(&self, key: &str, seconds: i64) -> Result<String, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut tokens = lock(&self.tokens);
        if let Some((token, iat, exp)) = tokens.get(key)
            && now < iat + (exp - iat) * 8 / 10
            && now < iat + 86_400
        {
            return Ok(token.clone());
        }
        let seconds = match self.opts.max_token_lifetime {
            Some(max) => seconds.min(max.as_secs() as i64),
            None => seconds,
        };
        let pod = self.pod();
        let account = match s(&pod, "/spec/serviceAccountName") {
            "" => "default",
            a => a,
        };
        let (token, exp) = crate::kubesim::http::tokens::issue(
            &self.store,
            &self.access.authority,
            ns_of(&pod).unwrap_or("default"),
            account,
            seconds,
            Some(&pod),
        )
        .map_err(|e| format!("failed to fetch token: {}", e.message))?;
        tokens.insert(key.to_string(), (token.clone(), now, exp));
        Ok(token)
    }
}

pub(super) fn refresh_projections(ctx: &PodCtx) {
    let pod = ctx.pod();
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Ok(Some(files)) = ctx.projection(v) {
            let dir = ctx.dir.join("volumes").join(s(v, "/name"));
            if project(&dir, &files).unwrap_or(false)
                && let Some((gid, _)) = security::fs_group(&pod)
            {
                let _ = security::apply_fs_group(&dir, gid, true, false);
            }
        }
    }
}

pub(super) fn prepare_volumes(ctx: &PodCtx) -> Result<HashMap<String, PathBuf>, String> {
    let pod = ctx.pod();
    let mut out = HashMap::new();
    let fs_group = security::fs_group(&pod);
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(v, "/name").to_string();
        let local = ctx.dir.join("volumes").join(&name);
        // Whether the kubelet manages the volume's ownership, and as a
        // read-only volume: not for hostPath.
        let mut owned = Some(false);
        let path = if let Some(claim) = v.pointer("/persistentVolumeClaim/claimName") {
            let claim = claim.as_str().unwrap_or_default();
            let pvc = ctx
                .store
                .get(&t("", "persistentvolumeclaims", ns_of(&pod)), claim)
                .map_err(|_| format!("persistentvolumeclaim \"{claim}\" not found"))?;
            let pv = s(&pvc, "/spec/volumeName");
            if pv.is_empty() {
                return Err(format!("persistentvolumeclaim \"{claim}\" is not bound"));
            }
            let pv = ctx
                .store
                .get(&t("", "persistentvolumes", None), pv)
                .map_err(|_| format!("persistentvolume \"{pv}\" not found"))?;
            super::super::disks::host_dir_of_pv(&ctx.opts.work_dir, &pv)
        } else if let Some(p) = v.pointer("/hostPath/path").and_then(Value::as_str) {
            owned = None;
            PathBuf::from(p)
        } else if let Some(files) = ctx.projection(v)? {
            project(&local, &files).map_err(|e| format!("write volume {name}: {e}"))?;
            owned = Some(true);
            local
        } else {
            // An emptyDir: the kubelet makes it 0777.
            std::fs::create_dir_all(&local)
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o777))
                })
                .map_err(|e| format!("create {}: {e}", local.display()))?;
            local
        };
        std::fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        if let (Some((gid, on_mismatch)), Some(read_only)) = (fs_group, owned) {
            security::apply_fs_group(&path, gid, read_only, on_mismatch)
                .map_err(|e| format!("set the ownership of volume {name}: {e}"))?;
        }
        out.insert(name, path);
    }
    Ok(out)
}
