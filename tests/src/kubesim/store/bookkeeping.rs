//! What the API server keeps about objects besides their content:
//! resourceVersions, `managedFields` (who wrote what, for server-side
//! apply), the stored and presented forms of a kind, and the opaque
//! `continue` tokens of paginated lists. Pure.

use super::*;

pub(super) fn too_large(want: u64, have: u64) -> ApiError {
    ApiError {
        details: Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
        ..ApiError::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {want}, current: {have}"),
        )
    }
}

pub(super) fn current_rv(obj: &Value) -> String {
    meta_str(obj, "resourceVersion")
        .unwrap_or_default()
        .to_string()
}

pub(super) fn managed_fields(obj: &Value) -> Vec<Value> {
    meta(obj)
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn is_entry(e: &Value, manager: &str, sub: Option<&str>) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(manager)
        && e.get("operation").and_then(Value::as_str) == Some("Apply")
        && e.get("subresource").and_then(Value::as_str) == sub
}

/// An apply records its own `Apply` entry, not an `Update` one.
pub(super) fn without_update_manager(opts: &WriteOptions) -> WriteOptions {
    WriteOptions {
        update_manager: None,
        ..opts.clone()
    }
}

/// Records the fields a non-apply write set as owned by its manager
/// (operation `Update`), taking them from other managers, as the API
/// server's field manager does.
pub(super) fn record_update(
    obj: &mut Value,
    old: Option<&Value>,
    manager: &str,
    api_version: &str,
    keyed: bool,
    sub: Option<&str>,
) {
    let mut body = obj.clone();
    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    let changed: Vec<Vec<String>> = patch::leaves(&patch::field_set(&body, keyed))
        .into_iter()
        .filter(|p| old.is_none_or(|o| patch::lookup(o, p) != patch::lookup(obj, p)))
        .collect();
    if changed.is_empty() {
        return;
    }
    let mut entries = managed_fields(obj);
    let mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str) == sub
    };
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        if let Some(f) = e.get_mut("fieldsV1") {
            for p in &changed {
                patch::remove_path(f, p);
            }
        }
    }
    let mut fields = entries
        .iter()
        .find(|e| mine(e))
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| json!({}));
    for p in &changed {
        patch::insert_path(&mut fields, p);
    }
    entries.retain(|e| {
        !mine(e)
            && e.get("fieldsV1")
                .is_some_and(|f| !patch::leaves(f).is_empty())
    });
    let mut entry = json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    entries.push(entry);
    meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
}

pub(super) fn set_apply_entry(
    obj: &mut Value,
    manager: &str,
    api_version: &str,
    fields: Value,
    sub: Option<&str>,
) {
    let mut entries = managed_fields(obj);
    entries.retain(|e| !is_entry(e, manager, sub));
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    entries.push(entry);
    meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
}

/// An object as served at a version (custom resources are stored once and
/// served at every version with only `apiVersion` changed, as the API server
/// does with conversion strategy `None`).
pub fn present(rt: &ResourceType, version: &str, obj: &Value) -> Value {
    if rt.stored_as.is_some() {
        return convert::event_from_core(obj);
    }
    let mut o = obj.clone();
    o["apiVersion"] = json!(rt.api_version(version));
    o
}

/// The (group, plural) a kind's objects are stored under.
pub fn storage_key(rt: &ResourceType) -> TypeKey {
    rt.stored_as
        .clone()
        .unwrap_or_else(|| (rt.group.clone(), rt.plural.clone()))
}

pub(super) fn key(rt: &ResourceType) -> TypeKey {
    storage_key(rt)
}

pub(super) const B64: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(super) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|b| *b == c)? as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// A continue token as the API server makes it: base64 of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the last item>"}`.
pub fn encode_continue(rv: u64, start: &str) -> String {
    base64_encode(
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
            .to_string()
            .as_bytes(),
    )
}

/// The snapshot resourceVersion and start key of a continue token.
pub fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let bytes = base64_decode(token).ok_or_else(bad)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad());
    }
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    Ok((rv, start))
}
