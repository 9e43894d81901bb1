//! The four patch formats of the API server: JSON merge patch (RFC 7386),
//! JSON patch (RFC 6902), strategic merge patch (list merge by the
//! `patchMergeKey`s of the core kinds) and server-side apply (field sets
//! per manager, as `managedFields` `FieldsV1`). Pure: no I/O.

use serde_json::{Map, Value, json};

/// The `Content-Type` of a PATCH request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
}

impl PatchType {
    /// The patch type of a content type, if it is one.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// RFC 7386: objects merge, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902, all operations or none.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
    json_patch::patch(target, &ops).map_err(|e| e.to_string())
}

/// The `patchMergeKey` of a list field of the core kinds, by the names of
/// the fields leading to it (e.g. `["spec", "template", "spec", "containers"]`).
/// `None`: the list is replaced whole.
pub fn merge_key(path: &[String]) -> Option<&'static str> {
    let last = path.last()?.as_str();
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    Some(match last {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "env" => "name",
        "resourceClaims" | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" | "addresses" if parent != Some("subsets") => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        "readinessGates" => "conditionType",
        "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => "name",
        "ports" => {
            // Container ports merge by containerPort, a Service's by port.
            if path.iter().any(|p| p.ends_with("ontainers")) {
                "containerPort"
            } else if parent == Some("spec") {
                "port"
            } else {
                return None;
            }
        }
        _ => return None,
    })
}

/// Lists of strings merged as sets (`patchStrategy: merge` on a primitive list).
fn primitive_merge(path: &[String]) -> bool {
    matches!(path.last().map(String::as_str), Some("finalizers"))
}

/// Kubernetes strategic merge patch, with the `$patch` (`replace`,
/// `delete`), `$deleteFromPrimitiveList/`, `$setElementOrder/` and
/// `$retainKeys` directives.
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), String> {
    strategic_object(target, patch, &mut Vec::new())
}

fn strategic_object(
    target: &mut Value,
    patch: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Object(m);
            return Ok(());
        }
        Some("delete") => {
            *target = json!({});
            return Ok(());
        }
        Some(other) => return Err(format!("Unknown patch type: {other}")),
        None => {}
    }
    if !target.is_object() {
        *target = json!({});
    }
    let retain: Option<Vec<String>> = p.get("$retainKeys").and_then(Value::as_array).map(|keys| {
        keys.iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect()
    });
    for (k, v) in p {
        if k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        let t = target.as_object_mut().expect("made an object above");
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(del)) = (t.get_mut(field), v.as_array()) {
                items.retain(|i| !del.contains(i));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        path.push(k.clone());
        match v {
            Value::Object(_) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic_object(slot, v, path)?;
            }
            Value::Array(items) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                if let Some(key) = merge_key(path) {
                    merge_list(slot, items, key, path)?;
                } else if primitive_merge(path) {
                    let mut out = slot.as_array().cloned().unwrap_or_default();
                    for i in items {
                        if !out.contains(i) {
                            out.push(i.clone());
                        }
                    }
                    *slot = Value::Array(out);
                } else {
                    let replace: Vec<Value> = items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect();
                    *slot = Value::Array(replace);
                }
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
        path.pop();
    }
    if let (Some(keys), Some(t)) = (retain, target.as_object_mut()) {
        t.retain(|k, _| keys.contains(k));
    }
    Ok(())
}

fn merge_list(
    slot: &mut Value,
    items: &[Value],
    key: &str,
    path: &mut Vec<String>,
) -> Result<(), String> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *slot = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    let mut out = slot.as_array().cloned().unwrap_or_default();
    for item in items {
        let Some(k) = item.get(key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        let pos = out.iter().position(|o| o.get(key) == Some(k));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                out.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => strategic_object(&mut out[i], item, path)?,
            None => {
                let mut fresh = json!({});
                strategic_object(&mut fresh, item, path)?;
                out.push(fresh);
            }
        }
    }
    *slot = Value::Array(out);
    Ok(())
}

/// The field set (`FieldsV1`) of an applied configuration: `f:<field>` for
/// fields, `k:{...}` for items of keyed lists, `{}` for leaves. `keyed`
/// says whether lists use the core kinds' merge keys (built-in kinds) or
/// are atomic (custom resources without list-map annotations).
pub fn field_set(obj: &Value, keyed: bool) -> Value {
    fields_of(obj, keyed, &mut Vec::new())
}

fn fields_of(v: &Value, keyed: bool, path: &mut Vec<String>) -> Value {
    let mut out = Map::new();
    let Some(m) = v.as_object() else {
        return json!({});
    };
    for (k, child) in m {
        if path.is_empty() && (k == "apiVersion" || k == "kind") {
            continue;
        }
        if path.len() == 1
            && path[0] == "metadata"
            && !matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            )
        {
            continue;
        }
        path.push(k.clone());
        let sub = match child {
            Value::Object(o) if !o.is_empty() => fields_of(child, keyed, path),
            Value::Array(items) if keyed && merge_key(path).is_some() => {
                let key = merge_key(path).unwrap_or_default();
                let mut lm = Map::new();
                for item in items {
                    if let Some(kv) = item.get(key) {
                        let mut f = fields_of(item, keyed, path);
                        if let Some(o) = f.as_object_mut() {
                            o.insert(".".into(), json!({}));
                        }
                        lm.insert(format!("k:{}", json!({ key: kv })), f);
                    }
                }
                Value::Object(lm)
            }
            Value::Array(items) if keyed && primitive_merge(path) => {
                let mut lm = Map::new();
                for item in items {
                    lm.insert(format!("v:{item}"), json!({}));
                }
                Value::Object(lm)
            }
            _ => json!({}),
        };
        path.pop();
        // Only the name: metadata owns nothing.
        if path.is_empty() && k == "metadata" && sub.as_object().is_some_and(|o| o.is_empty()) {
            continue;
        }
        out.insert(format!("f:{k}"), sub);
    }
    Value::Object(out)
}

/// The paths of `a` that are not in `b` (both field sets). A subtree of
/// `a` missing from `b` is returned whole.
pub fn subtract(a: &Value, b: &Value) -> Value {
    let mut out = Map::new();
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return json!({});
    };
    for (k, av) in am {
        if k == "." {
            continue;
        }
        match bm.get(k) {
            None => {
                out.insert(k.clone(), av.clone());
            }
            Some(bv) => {
                let empty = |v: &Value| v.as_object().is_none_or(|o| o.keys().all(|k| k == "."));
                if !empty(av) && !empty(bv) {
                    let d = subtract(av, bv);
                    if d.as_object().is_some_and(|o| !o.is_empty()) {
                        out.insert(k.clone(), d);
                    }
                }
            }
        }
    }
    Value::Object(out)
}

/// Removes from an object the fields of a field set (as [`subtract`] gives).
/// A struct or map left empty by the removal goes too, as
/// structured-merge-diff removes a struct none of whose items another
/// manager owns (kubernetes-sigs/structured-merge-diff#184): an applier that
/// stops applying `affinity` removes it, not just its leaves.
pub fn remove_fields(obj: &mut Value, fields: &Value) {
    let Some(fm) = fields.as_object() else { return };
    for (k, sub) in fm {
        let leaf = sub.as_object().is_none_or(|o| o.is_empty());
        if let Some(name) = k.strip_prefix("f:") {
            let Some(o) = obj.as_object_mut() else {
                continue;
            };
            if leaf {
                o.remove(name);
            } else if let Some(child) = o.get_mut(name) {
                let had_items = child.as_object().is_some_and(|c| !c.is_empty());
                remove_fields(child, sub);
                if had_items && child.as_object().is_some_and(|c| c.is_empty()) {
                    o.remove(name);
                }
            }
        } else if let Some(kv) = k.strip_prefix("k:") {
            let Ok(Value::Object(want)) = serde_json::from_str::<Value>(kv) else {
                continue;
            };
            let Some(items) = obj.as_array_mut() else {
                continue;
            };
            let matches = |i: &Value| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv));
            if leaf || sub.as_object().is_some_and(|o| o.contains_key(".")) {
                items.retain(|i| !matches(i));
            } else if let Some(item) = items.iter_mut().find(|i| matches(i)) {
                remove_fields(item, sub);
            }
        } else if let Some(vv) = k.strip_prefix("v:") {
            let Ok(want) = serde_json::from_str::<Value>(vv) else {
                continue;
            };
            if let Some(items) = obj.as_array_mut() {
                items.retain(|i| *i != want);
            }
        }
    }
}

fn is_leaf(set: &Value) -> bool {
    set.as_object().is_none_or(|o| o.keys().all(|k| k == "."))
}

/// The leaf paths (as field-set keys) owned in both field sets.
pub fn overlaps(a: &Value, b: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    overlap_into(a, b, &mut Vec::new(), &mut out);
    out
}

fn overlap_into(a: &Value, b: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return;
    };
    for (k, av) in am {
        if k == "." {
            continue;
        }
        let Some(bv) = bm.get(k) else { continue };
        path.push(k.clone());
        if is_leaf(av) || is_leaf(bv) {
            out.push(path.clone());
        } else {
            overlap_into(av, bv, path, out);
        }
        path.pop();
    }
}

/// The value at a field-set path in an object.
pub fn lookup<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for k in path {
        cur = if let Some(f) = k.strip_prefix("f:") {
            cur.get(f)?
        } else if let Some(kv) = k.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(kv).ok()?;
            cur.as_array()?
                .iter()
                .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))?
        } else if let Some(vv) = k.strip_prefix("v:") {
            let want: Value = serde_json::from_str(vv).ok()?;
            cur.as_array()?.iter().find(|i| **i == want)?
        } else {
            return None;
        };
    }
    Some(cur)
}

/// A field-set path as the API server names it in conflicts:
/// `.spec.containers[name="c"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for k in path {
        if let Some(f) = k.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(kv) = k.strip_prefix("k:") {
            let m: Map<String, Value> = serde_json::from_str(kv).unwrap_or_default();
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = k.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

/// Removes one path from a field set (a forced apply takes it over).
pub fn remove_path(set: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = set;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// The leaf paths of a field set.
pub fn leaves(set: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    leaves_into(set, &mut Vec::new(), &mut out);
    out
}

fn leaves_into(set: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(m) = set.as_object() else { return };
    for (k, sub) in m {
        if k == "." {
            continue;
        }
        path.push(k.clone());
        if is_leaf(sub) {
            out.push(path.clone());
        } else {
            leaves_into(sub, path, out);
        }
        path.pop();
    }
}

/// Adds one path to a field set.
pub fn insert_path(set: &mut Value, path: &[String]) {
    let mut cur = set;
    for k in path {
        if !cur.is_object() {
            *cur = json!({});
        }
        cur = cur
            .as_object_mut()
            .expect("made an object above")
            .entry(k.clone())
            .or_insert_with(|| json!({}));
    }
}

/// Merges an applied configuration into the live object: built-in kinds
/// merge keyed lists, custom resources replace lists whole.
pub fn apply_merge(live: &mut Value, applied: &Value, keyed: bool) -> Result<(), String> {
    let mut cleaned = applied.clone();
    drop_nulls(&mut cleaned);
    if keyed {
        strategic_merge(live, &cleaned)
    } else {
        merge_patch(live, &cleaned);
        Ok(())
    }
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_deletes_nulls_and_replaces_lists() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(doc, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_is_atomic() {
        let mut doc = json!({"spec": {"replicas": 1}});
        json_patch(
            &mut doc,
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap();
        assert_eq!(doc, json!({"spec": {"replicas": 3}}));
        let err = json_patch(
            &mut doc,
            &json!([
                {"op": "replace", "path": "/spec/replicas", "value": 5},
                {"op": "test", "path": "/spec/replicas", "value": 4}
            ]),
        );
        assert!(err.is_err());
        assert_eq!(doc, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn strategic_merge_merges_containers_env_and_ports_by_key() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "cassandra", "image": "c:3", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 9042, "name": "cql"}]},
            {"name": "sidecar", "image": "s:1"}
        ]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {"containers": [
                {"name": "cassandra", "image": "c:4", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 7199, "name": "jmx"}]},
                {"name": "extra", "image": "e:1"}
            ]}}),
        )
        .unwrap();
        assert_eq!(
            pod,
            json!({"spec": {"containers": [
                {"name": "cassandra", "image": "c:4", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 9042, "name": "cql"}, {"containerPort": 7199, "name": "jmx"}]},
                {"name": "sidecar", "image": "s:1"},
                {"name": "extra", "image": "e:1"}
            ]}})
        );
    }

    #[test]
    fn strategic_merge_conditions_by_type_and_directives() {
        let mut obj = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Scheduled", "status": "True"}]},
            "metadata": {"finalizers": ["a"]}, "spec": {"ports": [{"port": 80}], "args": ["x"]}});
        strategic_merge(
            &mut obj,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Scheduled", "$patch": "delete"}]},
                "metadata": {"finalizers": ["b", "a"]}, "spec": {"ports": [{"port": 443}], "args": ["y"]}}),
        )
        .unwrap();
        assert_eq!(
            obj,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
                "metadata": {"finalizers": ["a", "b"]}, "spec": {"ports": [{"port": 80}, {"port": 443}], "args": ["y"]}})
        );
        strategic_merge(&mut obj, &json!({"spec": {"$patch": "replace", "new": 1}, "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})).unwrap();
        assert_eq!(obj["spec"], json!({"new": 1}));
        assert_eq!(obj["metadata"]["finalizers"], json!(["b"]));
        assert!(
            strategic_merge(&mut obj, &json!({"spec": {"containers": [{"image": "x"}]}})).is_err()
        );
    }

    #[test]
    fn field_sets_use_keys_for_keyed_lists() {
        let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            field_set(&applied, true),
            json!({"f:metadata": {"f:labels": {"f:a": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
    }

    #[test]
    fn dropping_a_field_from_an_apply_removes_it() {
        let first = field_set(
            &json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "c"}, {"name": "d"}]}}),
            true,
        );
        let second = field_set(
            &json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}),
            true,
        );
        let gone = subtract(&first, &second);
        let mut live = json!({"metadata": {"labels": {"a": "1", "b": "2", "other": "x"}}, "spec": {"containers": [{"name": "c"}, {"name": "d"}]}});
        remove_fields(&mut live, &gone);
        assert_eq!(
            live,
            json!({"metadata": {"labels": {"a": "1", "other": "x"}}, "spec": {"containers": [{"name": "c"}]}})
        );
    }

    #[test]
    fn overlapping_fields_and_their_names() {
        let a = field_set(
            &json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            true,
        );
        let b = field_set(
            &json!({"spec": {"replicas": 1, "containers": 1, "template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}}),
            true,
        );
        let o = overlaps(&a, &b);
        let names: Vec<String> = o.iter().map(|p| path_string(p)).collect();
        assert_eq!(
            names,
            vec![
                ".spec.replicas",
                ".spec.template.spec.containers[name=\"c\"].image",
                ".spec.template.spec.containers[name=\"c\"].name"
            ]
        );
        let live =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}});
        assert_eq!(lookup(&live, &o[1]), Some(&json!("y")));
        let mut set = a.clone();
        remove_path(&mut set, &o[0]);
        assert!(set["f:spec"].get("f:replicas").is_none());
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml; charset=utf-8"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }
}
