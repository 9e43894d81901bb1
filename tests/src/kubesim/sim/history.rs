//! StatefulSet history as the real controller keeps it: one
//! ControllerRevision (apps/v1) per distinct pod template, owned by the
//! set, named `<set>-<hash>`, with increasing `revision` numbers; the
//! choice of the current and the update revision; the pruning of
//! revisions no pod uses beyond `revisionHistoryLimit`. Follows
//! pkg/controller/history/controller_history.go and
//! pkg/controller/statefulset (`getStatefulSetRevisions`, `newRevision`,
//! `getPatch`, `ApplyRevision`, `truncateHistory`). [`revision_data`],
//! [`hash`] and [`choose`] are pure; [`sync_revisions`] and [`truncate`]
//! write.

use super::{ns_of, s, t};
use crate::kubesim::selectors::LabelSelector;
use crate::kubesim::store::{DeleteOptions, Store, WriteOptions};
use serde_json::{Value, json};
use std::sync::Arc;

/// The label on a ControllerRevision holding its hash
/// (`history.ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The data of a set's revision (`getPatch`): a strategic merge patch
/// that replaces the pod template, `{"spec":{"template":{...,"$patch":"replace"}}}`.
/// The template is encoded as Go encodes the typed object: an unset
/// `metadata.creationTimestamp` is `null`.
pub fn revision_data(set: &Value) -> Value {
    let mut template = set.pointer("/spec/template").cloned().unwrap_or(json!({}));
    if !template.get("metadata").is_some_and(Value::is_object) {
        template["metadata"] = json!({});
    }
    if template["metadata"].get("creationTimestamp").is_none() {
        template["metadata"]["creationTimestamp"] = Value::Null;
    }
    template["$patch"] = json!("replace");
    json!({"spec": {"template": template}})
}

/// The bytes Go's `json.Marshal` writes for `data` (a map: keys sorted,
/// compact, `<`, `>` and `&` escaped).
pub fn go_json(data: &Value) -> String {
    // serde_json's maps are sorted (no preserve_order feature), as Go's
    // encoding of a map[string]interface{} is.
    data.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// `HashControllerRevision`: FNV-1 (32 bit) over the data, then the
/// collision count in decimal, then `rand.SafeEncodeString` of the sum in
/// decimal.
pub fn hash(data: &str, collision_count: i64) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in data.bytes().chain(collision_count.to_string().into_bytes()) {
        h = h.wrapping_mul(0x0100_0193);
        h ^= u32::from(b);
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// `ControllerRevisionName`: the prefix cut to 223 bytes, a dash, the hash.
pub fn revision_name(set_name: &str, hash: &str) -> String {
    let prefix = if set_name.len() > 223 {
        &set_name[..223]
    } else {
        set_name
    };
    format!("{prefix}-{hash}")
}

/// The template a revision records (`ApplyRevision` applied to the pod
/// template alone).
pub fn template_of(revision: &Value) -> Value {
    let mut t = revision
        .pointer("/data/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    if let Some(o) = t.as_object_mut() {
        o.remove("$patch");
    }
    if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut)
        && m.get("creationTimestamp").is_some_and(Value::is_null)
    {
        m.remove("creationTimestamp");
    }
    t
}

fn number(revision: &Value) -> i64 {
    revision
        .get("revision")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// `SortControllerRevisions`: by revision number, then creation time,
/// then name.
pub fn sort(revisions: &mut [Value]) {
    revisions.sort_by(|a, b| {
        number(a)
            .cmp(&number(b))
            .then_with(|| {
                s(a, "/metadata/creationTimestamp").cmp(s(b, "/metadata/creationTimestamp"))
            })
            .then_with(|| s(a, "/metadata/name").cmp(s(b, "/metadata/name")))
    });
}

/// What [`choose`] decided about the update revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateRevision {
    /// The newest revision already records the template.
    Latest(String),
    /// An older revision records it (a rollback): it gets this number.
    Renumber(String, i64),
    /// No revision records it: create one with this number.
    Create(i64),
}

/// The pure part of `getStatefulSetRevisions`: given the set's revisions
/// (sorted) and the data of its template, which revision is the update
/// revision.
pub fn choose(revisions: &[Value], data: &Value) -> UpdateRevision {
    let next = revisions.iter().map(number).max().unwrap_or(0) + 1;
    let equal: Vec<&Value> = revisions.iter().filter(|r| r["data"] == *data).collect();
    match (equal.last(), revisions.last()) {
        (Some(e), Some(last)) if last["data"] == e["data"] => {
            UpdateRevision::Latest(s(last, "/metadata/name").to_string())
        }
        (Some(e), _) => UpdateRevision::Renumber(s(e, "/metadata/name").to_string(), next),
        (None, _) => UpdateRevision::Create(next),
    }
}

/// The uid of an object's controller (the owner reference with
/// `controller: true`; the API server allows one at most).
pub(crate) fn controller_uid(o: &Value) -> Option<&str> {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
}

fn owner_ref(set: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": s(set, "/metadata/name"),
        "uid": s(set, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Makes an orphan the set's (the controller reference manager's
/// `AdoptPod` / `AdoptControllerRevision`): its owner references plus the
/// set's controller reference, written only if it is still the object read
/// (uid and resourceVersion). None when that write was refused.
pub(crate) fn adopt(
    store: &Store,
    group: &str,
    plural: &str,
    orphan: &Value,
    set: &Value,
) -> Option<Value> {
    let mut refs = orphan
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    refs.push(owner_ref(set));
    let body = json!({"metadata": {"ownerReferences": refs,
        "uid": s(orphan, "/metadata/uid"),
        "resourceVersion": s(orphan, "/metadata/resourceVersion")}});
    super::patch_main(store, group, plural, orphan, &body).ok()
}

/// The revisions of a set (`ListControllerRevisions`: those in its
/// namespace matching its selector, controlled by it), adopting orphans
/// that match (`adoptOrphanRevisions`); sorted. `candidates`: the
/// revisions of the set's namespace it controls or nothing controls (the
/// pass indexes them once, not once per set).
pub fn list(store: &Store, set: &Value, candidates: &[Arc<Value>]) -> Vec<Value> {
    let ns = ns_of(set).unwrap_or("default");
    let uid = s(set, "/metadata/uid");
    let Ok(selector) =
        LabelSelector::from_object(set.pointer("/spec/selector").unwrap_or(&Value::Null))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in candidates {
        let owner = controller_uid(r);
        if ns_of(r) != Some(ns)
            || r.pointer("/metadata/deletionTimestamp").is_some()
            || owner.is_some_and(|u| u != uid)
            || !selector.matches_object(r)
        {
            continue;
        }
        match owner {
            Some(_) => out.push(Value::clone(r)),
            None => {
                if let Some(adopted) = adopt(store, "apps", "controllerrevisions", r, set) {
                    out.push(adopted);
                }
            }
        }
    }
    sort(&mut out);
    out
}

/// The revisions a pass works with.
#[derive(Debug, Clone)]
pub struct Revisions {
    /// The set's revisions as listed at the start of the pass, sorted.
    pub listed: Vec<Value>,
    /// `status.currentRevision`'s revision, or the update revision.
    pub current: Value,
    /// The revision of the set's template.
    pub update: Value,
    /// `status.collisionCount` after this pass.
    pub collision_count: i64,
}

/// `getStatefulSetRevisions`: finds or makes the update revision (a new
/// ControllerRevision, or an older one renumbered on a rollback) and the
/// current one.
pub fn sync_revisions(
    store: &Store,
    set: &Value,
    candidates: &[Arc<Value>],
) -> Result<Revisions, String> {
    let listed = list(store, set, candidates);
    let ns = ns_of(set).unwrap_or("default");
    let crs = t("apps", "controllerrevisions", Some(ns));
    let data = revision_data(set);
    let mut collision_count = set
        .pointer("/status/collisionCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let find = |name: &str| {
        listed
            .iter()
            .find(|r| s(r, "/metadata/name") == name)
            .cloned()
    };
    let update = match choose(&listed, &data) {
        UpdateRevision::Latest(name) => find(&name).ok_or("listed revision vanished")?,
        UpdateRevision::Renumber(name, n) => {
            let r = find(&name).ok_or("listed revision vanished")?;
            let body = json!({"revision": n,
                "metadata": {"resourceVersion": s(&r, "/metadata/resourceVersion")}});
            super::patch_main(store, "apps", "controllerrevisions", &r, &body)
                .map_err(|e| e.to_string())?
        }
        UpdateRevision::Create(n) => {
            let raw = go_json(&data);
            // `NewControllerRevision`: the template's labels, the hash label,
            // the set's annotations (`newRevision`); `CreateControllerRevision`
            // bumps the collision count while the name is taken by other data.
            loop {
                let h = hash(&raw, collision_count);
                let name = revision_name(s(set, "/metadata/name"), &h);
                let mut labels = set
                    .pointer("/spec/template/metadata/labels")
                    .cloned()
                    .filter(Value::is_object)
                    .unwrap_or(json!({}));
                labels[HASH_LABEL] = json!(h);
                let mut meta = json!({"name": name, "namespace": ns, "labels": labels,
                    "ownerReferences": [owner_ref(set)]});
                if let Some(a) = set
                    .pointer("/metadata/annotations")
                    .filter(|a| a.as_object().is_some_and(|o| !o.is_empty()))
                {
                    meta["annotations"] = a.clone();
                }
                let cr = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                    "metadata": meta, "data": data, "revision": n});
                match store.create(&crs, cr, &WriteOptions::default()) {
                    Ok(created) => break created,
                    Err(e) if e.code == 409 => {
                        let existing = store.get(&crs, &name).map_err(|e| e.to_string())?;
                        if existing["data"] == data {
                            break existing;
                        }
                        collision_count += 1;
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    };
    let current = find(s(set, "/status/currentRevision")).unwrap_or_else(|| update.clone());
    Ok(Revisions {
        listed,
        current,
        update,
        collision_count,
    })
}

/// The revisions `truncateHistory` deletes: those neither current, nor
/// update, nor any pod's, beyond the oldest `limit` of them... kept newest.
pub fn to_prune<'a>(
    listed: &'a [Value],
    live: &[&str],
    limit: usize,
) -> impl Iterator<Item = &'a Value> {
    let history: Vec<&Value> = listed
        .iter()
        .filter(|r| !live.contains(&s(r, "/metadata/name")))
        .collect();
    let excess = history.len().saturating_sub(limit);
    history.into_iter().take(excess)
}

/// `truncateHistory`: deletes the oldest revisions no pod uses beyond
/// `spec.revisionHistoryLimit`.
pub fn truncate(store: &Store, set: &Value, revs: &Revisions, pod_revisions: &[String]) {
    let limit = set
        .pointer("/spec/revisionHistoryLimit")
        .and_then(Value::as_u64)
        .unwrap_or(10) as usize;
    let mut live: Vec<&str> = pod_revisions.iter().map(String::as_str).collect();
    live.push(s(&revs.current, "/metadata/name"));
    live.push(s(&revs.update, "/metadata/name"));
    let ns = ns_of(set).unwrap_or("default");
    for r in to_prune(&revs.listed, &live, limit) {
        let _ = store.delete(
            &t("apps", "controllerrevisions", Some(ns)),
            s(r, "/metadata/name"),
            &DeleteOptions {
                uid: Some(s(r, "/metadata/uid").to_string()),
                ..Default::default()
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A revision a real 1.33 cluster wrote
    /// (kubernetes/kubernetes pkg/controller/statefulset/testdata/compatibility_revision_1.33.0.json):
    /// its name is `test-c77f6d978` for exactly these data bytes.
    #[test]
    fn the_hash_of_a_real_revision() {
        let raw = r#"{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"test":"value"},"creationTimestamp":null,"labels":{"app":"foo"}},"spec":{"containers":[{"image":"test","imagePullPolicy":"Always","name":"test","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}}}"#;
        assert_eq!(hash(raw, 0), "c77f6d978");
        assert_eq!(revision_name("test", &hash(raw, 0)), "test-c77f6d978");
        // Our encoding of the same template gives the same bytes.
        let data: Value = serde_json::from_str(raw).unwrap();
        let set = json!({"spec": {"template": template_of(&json!({"data": data}))}});
        assert_eq!(go_json(&revision_data(&set)), raw);
        assert_ne!(hash(raw, 1), hash(raw, 0), "the collision count changes it");
    }

    fn rev(name: &str, n: i64, image: &str) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "revision": n, "data": {"spec": {"template": {"image": image}}}})
    }

    #[test]
    fn the_update_revision() {
        let data = |i: &str| json!({"spec": {"template": {"image": i}}});
        assert_eq!(choose(&[], &data("a")), UpdateRevision::Create(1));
        let revs = [rev("s-1", 1, "a"), rev("s-2", 2, "b")];
        assert_eq!(
            choose(&revs, &data("b")),
            UpdateRevision::Latest("s-2".into())
        );
        assert_eq!(
            choose(&revs, &data("a")),
            UpdateRevision::Renumber("s-1".into(), 3),
            "a rollback renumbers the older revision"
        );
        assert_eq!(choose(&revs, &data("c")), UpdateRevision::Create(3));
    }

    #[test]
    fn pruning_keeps_live_and_newest() {
        let revs: Vec<Value> = (1..=5)
            .map(|i| rev(&format!("s-{i}"), i, &i.to_string()))
            .collect();
        let names = |live: &[&str], limit| {
            to_prune(&revs, live, limit)
                .map(|r| s(r, "/metadata/name").to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&["s-5", "s-1"], 1), vec!["s-2", "s-3"]);
        assert_eq!(names(&["s-5"], 0), vec!["s-1", "s-2", "s-3", "s-4"]);
        assert!(names(&["s-5"], 10).is_empty());
    }

    #[test]
    fn sorted_by_number_then_time_then_name() {
        let mut revs = vec![rev("b", 2, "x"), rev("c", 1, "y"), rev("a", 2, "z")];
        sort(&mut revs);
        let names: Vec<&str> = revs.iter().map(|r| s(r, "/metadata/name")).collect();
        assert_eq!(names, vec!["c", "a", "b"]);
    }
}
