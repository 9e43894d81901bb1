//! Decoding of the Kubernetes protobuf envelope for the kinds kubectl's
//! generators send as protobuf (`kubectl create namespace|configmap|secret|
//! serviceaccount|service|token`, `kubectl auth can-i`, `kubectl
//! certificate approve|deny`): `k8s\0` +
//! `runtime.Unknown` wrapping the object's message, turned into the JSON
//! the store takes. Pure: no I/O.

use serde_json::{Map, Value, json};

/// One field of a message: number and value.
#[derive(Debug, Clone, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err("varint too long".into())
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(varint(buf, &mut pos)?),
            1 => {
                pos += 8;
                Field::Fixed
            }
            2 => {
                let len = varint(buf, &mut pos)? as usize;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or("truncated field")?;
                let b = &buf[pos..end];
                pos = end;
                Field::Bytes(b)
            }
            5 => {
                pos += 4;
                Field::Fixed
            }
            w => return Err(format!("unsupported wire type {w}")),
        };
        out.push((num, f));
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(data: &[u8]) -> String {
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

/// A `map<string, string>` (or bytes, base64 as JSON has it) entry.
fn map_entry(b: &[u8], bytes_values: bool) -> Result<(String, Value), String> {
    let mut k = String::new();
    let mut v = Value::String(String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => k = string(x)?,
            (2, Field::Bytes(x)) if bytes_values => v = json!(base64(x)),
            (2, Field::Bytes(x)) => v = json!(string(x)?),
            _ => {}
        }
    }
    Ok((k, v))
}

fn insert_entry(
    m: &mut Map<String, Value>,
    field: &str,
    b: &[u8],
    bytes_values: bool,
) -> Result<(), String> {
    let (k, v) = map_entry(b, bytes_values)?;
    let slot = m.entry(field).or_insert_with(|| json!({}));
    slot[k] = v;
    Ok(())
}

fn push(m: &mut Map<String, Value>, field: &str, v: Value) {
    if let Value::Array(a) = m.entry(field).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

fn owner_reference(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => m.insert("kind".into(), json!(string(x)?)),
            (3, Field::Bytes(x)) => m.insert("name".into(), json!(string(x)?)),
            (4, Field::Bytes(x)) => m.insert("uid".into(), json!(string(x)?)),
            (5, Field::Bytes(x)) => m.insert("apiVersion".into(), json!(string(x)?)),
            (6, Field::Varint(x)) => m.insert("controller".into(), json!(x != 0)),
            (7, Field::Varint(x)) => m.insert("blockOwnerDeletion".into(), json!(x != 0)),
            _ => None,
        };
    }
    Ok(Value::Object(m))
}

fn object_meta(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => {
                m.insert("name".into(), json!(string(x)?));
            }
            (2, Field::Bytes(x)) => {
                m.insert("generateName".into(), json!(string(x)?));
            }
            (3, Field::Bytes(x)) => {
                m.insert("namespace".into(), json!(string(x)?));
            }
            (5, Field::Bytes(x)) => {
                m.insert("uid".into(), json!(string(x)?));
            }
            (6, Field::Bytes(x)) => {
                m.insert("resourceVersion".into(), json!(string(x)?));
            }
            (11, Field::Bytes(x)) => insert_entry(&mut m, "labels", x, false)?,
            (12, Field::Bytes(x)) => insert_entry(&mut m, "annotations", x, false)?,
            (13, Field::Bytes(x)) => push(&mut m, "ownerReferences", owner_reference(x)?),
            (14, Field::Bytes(x)) => push(&mut m, "finalizers", json!(string(x)?)),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn local_object_reference(b: &[u8]) -> Result<Value, String> {
    let mut name = String::new();
    for (n, f) in fields(b)? {
        if let (1, Field::Bytes(x)) = (n, f) {
            name = string(x)?;
        }
    }
    Ok(json!({"name": name}))
}

/// A message of string fields (and int64 ones, `ints`), by field number.
fn flat_message(b: &[u8], strings: &[(u64, &str)], ints: &[(u64, &str)]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match f {
            Field::Bytes(x) => {
                if let Some((_, name)) = strings.iter().find(|(k, _)| *k == n) {
                    m.insert((*name).into(), json!(string(x)?));
                }
            }
            Field::Varint(v) => {
                if let Some((_, name)) = ints.iter().find(|(k, _)| *k == n) {
                    m.insert((*name).into(), json!(v as i64));
                }
            }
            Field::Fixed => {}
        }
    }
    Ok(Value::Object(m))
}

/// An IntOrString (`targetPort`).
fn int_or_string(b: &[u8]) -> Result<Value, String> {
    let (mut kind, mut int, mut text) = (0, 0i64, String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Varint(v)) => kind = v,
            (2, Field::Varint(v)) => int = v as i32 as i64,
            (3, Field::Bytes(x)) => text = string(x)?,
            _ => {}
        }
    }
    Ok(if kind == 1 { json!(text) } else { json!(int) })
}

/// v1 Service (`kubectl create service clusterip|headless|nodeport`).
fn service(raw: &[u8]) -> Result<Value, String> {
    let mut out = json!({"apiVersion": "v1", "kind": "Service", "spec": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => out["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(p)) => {
                            let mut port = Map::new();
                            for (pn, pf) in fields(p)? {
                                match (pn, pf) {
                                    (1, Field::Bytes(y)) => {
                                        port.insert("name".into(), json!(string(y)?));
                                    }
                                    (2, Field::Bytes(y)) => {
                                        port.insert("protocol".into(), json!(string(y)?));
                                    }
                                    (3, Field::Varint(v)) => {
                                        port.insert("port".into(), json!(v as i32));
                                    }
                                    (4, Field::Bytes(y)) => {
                                        port.insert("targetPort".into(), int_or_string(y)?);
                                    }
                                    // Go writes zero values; JSON omits them.
                                    (5, Field::Varint(v)) if v != 0 => {
                                        port.insert("nodePort".into(), json!(v as i32));
                                    }
                                    _ => {}
                                }
                            }
                            push(&mut spec, "ports", Value::Object(port));
                        }
                        (2, Field::Bytes(y)) => insert_entry(&mut spec, "selector", y, false)?,
                        (3, Field::Bytes(y)) => {
                            spec.insert("clusterIP".into(), json!(string(y)?));
                        }
                        (4, Field::Bytes(y)) => {
                            spec.insert("type".into(), json!(string(y)?));
                        }
                        (5, Field::Bytes(y)) => push(&mut spec, "externalIPs", json!(string(y)?)),
                        (7, Field::Bytes(y)) => {
                            spec.insert("sessionAffinity".into(), json!(string(y)?));
                        }
                        (11, Field::Bytes(y)) => {
                            spec.insert("externalName".into(), json!(string(y)?));
                        }
                        (13, Field::Varint(v)) if v != 0 => {
                            spec.insert("publishNotReadyAddresses".into(), json!(true));
                        }
                        (18, Field::Bytes(y)) => push(&mut spec, "clusterIPs", json!(string(y)?)),
                        _ => {}
                    }
                }
                // Go writes empty strings; JSON omits them (and the
                // API server then defaults them).
                spec.retain(|_, v| v != "");
                out["spec"] = Value::Object(spec);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// authentication.k8s.io/v1 TokenRequest (`kubectl create token` 1.33).
fn token_request(raw: &[u8]) -> Result<Value, String> {
    let mut out =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => out["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(a)) => {
                            let spec = out["spec"].as_object_mut().ok_or("spec")?;
                            push(spec, "audiences", json!(string(a)?));
                        }
                        (3, Field::Bytes(r)) => {
                            out["spec"]["boundObjectRef"] = flat_message(
                                r,
                                &[(1, "kind"), (2, "apiVersion"), (3, "name"), (4, "uid")],
                                &[],
                            )?;
                        }
                        (4, Field::Varint(v)) => out["spec"]["expirationSeconds"] = json!(v as i64),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// authorization.k8s.io/v1 SelfSubjectAccessReview (`kubectl auth can-i`).
fn self_subject_access_review(raw: &[u8]) -> Result<Value, String> {
    let mut out = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => out["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(r)) => {
                            out["spec"]["resourceAttributes"] = flat_message(
                                r,
                                &[
                                    (1, "namespace"),
                                    (2, "verb"),
                                    (3, "group"),
                                    (4, "version"),
                                    (5, "resource"),
                                    (6, "subresource"),
                                    (7, "name"),
                                ],
                                &[],
                            )?;
                        }
                        (2, Field::Bytes(r)) => {
                            out["spec"]["nonResourceAttributes"] =
                                flat_message(r, &[(1, "path"), (2, "verb")], &[])?;
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A `metav1.Time` (seconds since the epoch) as JSON has it; None for
/// the zero time, which Go writes as an empty message.
fn time(b: &[u8]) -> Result<Option<Value>, String> {
    let mut seconds = 0i64;
    for (n, f) in fields(b)? {
        if let (1, Field::Varint(v)) = (n, f) {
            seconds = v as i64;
        }
    }
    Ok((seconds > 0).then(|| json!(crate::kubesim::rfc3339(seconds as u64))))
}

/// certificates.k8s.io/v1 CertificateSigningRequest (`kubectl
/// certificate approve|deny` replace `/approval` with the whole object).
fn certificate_signing_request(raw: &[u8]) -> Result<Value, String> {
    let mut out = json!({"apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest", "spec": {}, "status": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => out["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(y)) => {
                            spec.insert("request".into(), json!(base64(y)));
                        }
                        (2, Field::Bytes(y)) => {
                            spec.insert("username".into(), json!(string(y)?));
                        }
                        (3, Field::Bytes(y)) => {
                            spec.insert("uid".into(), json!(string(y)?));
                        }
                        (4, Field::Bytes(y)) => push(&mut spec, "groups", json!(string(y)?)),
                        (5, Field::Bytes(y)) => push(&mut spec, "usages", json!(string(y)?)),
                        (6, Field::Bytes(y)) => {
                            // map<string, ExtraValue>: ExtraValue's items are field 1.
                            let (mut key, mut items) = (String::new(), Vec::new());
                            for (en, ef) in fields(y)? {
                                match (en, ef) {
                                    (1, Field::Bytes(k)) => key = string(k)?,
                                    (2, Field::Bytes(v)) => {
                                        for (vn, vf) in fields(v)? {
                                            if let (1, Field::Bytes(i)) = (vn, vf) {
                                                items.push(json!(string(i)?));
                                            }
                                        }
                                    }
                                    _ => {}
                                }
                            }
                            let extra = spec.entry("extra").or_insert_with(|| json!({}));
                            extra[key] = Value::Array(items);
                        }
                        (7, Field::Bytes(y)) => {
                            spec.insert("signerName".into(), json!(string(y)?));
                        }
                        (8, Field::Varint(v)) => {
                            spec.insert("expirationSeconds".into(), json!(v as i32));
                        }
                        _ => {}
                    }
                }
                out["spec"] = Value::Object(spec);
            }
            (3, Field::Bytes(x)) => {
                let mut status = Map::new();
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(c)) => {
                            let mut condition = flat_message(
                                c,
                                &[(1, "type"), (2, "reason"), (3, "message"), (6, "status")],
                                &[],
                            )?;
                            for (cn, cf) in fields(c)? {
                                let field = match cn {
                                    4 => "lastUpdateTime",
                                    5 => "lastTransitionTime",
                                    _ => continue,
                                };
                                if let Field::Bytes(t) = cf
                                    && let Some(at) = time(t)?
                                {
                                    condition[field] = at;
                                }
                            }
                            push(&mut status, "conditions", condition);
                        }
                        (2, Field::Bytes(y)) => {
                            status.insert("certificate".into(), json!(base64(y)));
                        }
                        _ => {}
                    }
                }
                out["status"] = Value::Object(status);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The JSON of one object message of a supported kind.
fn object(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!(kind));
    for (n, f) in fields(raw)? {
        let Field::Bytes(x) = f else {
            if let (Field::Varint(v), "ConfigMap", 4) | (Field::Varint(v), "Secret", 5) =
                (&f, kind, n)
            {
                m.insert("immutable".into(), json!(*v != 0));
            }
            if let (Field::Varint(v), "ServiceAccount", 4) = (&f, kind, n) {
                m.insert("automountServiceAccountToken".into(), json!(*v != 0));
            }
            continue;
        };
        if n == 1 {
            m.insert("metadata".into(), object_meta(x)?);
            continue;
        }
        match (kind, n) {
            ("ConfigMap", 2) => insert_entry(&mut m, "data", x, false)?,
            ("ConfigMap", 3) => insert_entry(&mut m, "binaryData", x, true)?,
            ("Secret", 2) => insert_entry(&mut m, "data", x, true)?,
            ("Secret", 3) => {
                m.insert("type".into(), json!(string(x)?));
            }
            ("Secret", 4) => insert_entry(&mut m, "stringData", x, false)?,
            ("Namespace", 2) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(x)? {
                    if let (1, Field::Bytes(y)) = (sn, sf) {
                        push(&mut spec, "finalizers", json!(string(y)?));
                    }
                }
                m.insert("spec".into(), Value::Object(spec));
            }
            ("ServiceAccount", 3) => push(&mut m, "imagePullSecrets", local_object_reference(x)?),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

/// Decodes a protobuf request body into JSON, for the supported kinds.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("not a Kubernetes protobuf envelope")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(rest)? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = string(x)?,
                        (2, Field::Bytes(x)) => kind = string(x)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount") => {
            object(&api_version, &kind, raw)
        }
        ("authentication.k8s.io/v1", "TokenRequest") => token_request(raw),
        ("v1", "Service") => service(raw),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => self_subject_access_review(raw),
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => certificate_signing_request(raw),
        _ => Err(format!(
            "protobuf bodies of {api_version} {kind} are not supported"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(n: u64, wire: u64) -> Vec<u8> {
        enc_varint((n << 3) | wire)
    }

    fn enc_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes(n: u64, b: &[u8]) -> Vec<u8> {
        let mut out = tag(n, 2);
        out.extend(enc_varint(b.len() as u64));
        out.extend_from_slice(b);
        out
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        [bytes(1, k.as_bytes()), bytes(2, v)].concat()
    }

    fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [bytes(1, b"v1"), bytes(2, kind.as_bytes())].concat();
        [
            b"k8s\0".to_vec(),
            bytes(1, &tm),
            bytes(2, raw),
            bytes(3, b""),
            bytes(4, b""),
        ]
        .concat()
    }

    #[test]
    fn configmap_with_labels_and_data() {
        let meta = [
            bytes(1, b"cfg"),
            bytes(3, b"default"),
            bytes(11, &entry("app", b"x")),
        ]
        .concat();
        let raw = [
            bytes(1, &meta),
            bytes(2, &entry("k", b"v")),
            bytes(2, &entry("j", b"w")),
            bytes(3, &entry("b", b"hi")),
        ]
        .concat();
        let v = decode(&envelope("ConfigMap", &raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": "default", "labels": {"app": "x"}},
                "data": {"k": "v", "j": "w"}, "binaryData": {"b": "aGk="}})
        );
    }

    #[test]
    fn secret_and_namespace() {
        let raw = [
            bytes(1, &bytes(1, b"s")),
            bytes(2, &entry("pw", b"abc")),
            bytes(3, b"Opaque"),
        ]
        .concat();
        let v = decode(&envelope("Secret", &raw)).unwrap();
        assert_eq!(v["data"]["pw"], "YWJj");
        assert_eq!(v["type"], "Opaque");
        let raw = [
            bytes(1, &bytes(1, b"team")),
            bytes(2, &bytes(1, b"kubernetes")),
        ]
        .concat();
        let v = decode(&envelope("Namespace", &raw)).unwrap();
        assert_eq!(v["metadata"]["name"], "team");
        assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn certificate_signing_request_as_kubectl_approves_it() {
        let tm = [
            bytes(1, b"certificates.k8s.io/v1"),
            bytes(2, b"CertificateSigningRequest"),
        ]
        .concat();
        let extra = [
            bytes(1, b"authentication.kubernetes.io/pod-name"),
            bytes(2, &bytes(1, b"c-0")),
        ]
        .concat();
        let spec = [
            bytes(1, b"pem"),
            bytes(2, b"system:serviceaccount:db:member"),
            bytes(4, b"system:serviceaccounts"),
            bytes(5, b"server auth"),
            bytes(6, &extra),
            bytes(7, b"cassandra.rook.io/member"),
            [tag(8, 0), enc_varint(3600)].concat(),
        ]
        .concat();
        let approved = [
            bytes(1, b"Approved"),
            bytes(2, b"KubectlApprove"),
            bytes(4, &[tag(1, 0), enc_varint(1_700_000_000)].concat()),
            bytes(5, b""),
            bytes(6, b"True"),
        ]
        .concat();
        let raw = [
            bytes(1, &bytes(1, b"c-0")),
            bytes(2, &spec),
            bytes(3, &bytes(1, &approved)),
        ]
        .concat();
        let body = [b"k8s\0".to_vec(), bytes(1, &tm), bytes(2, &raw)].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": "c-0"},
                "spec": {"request": "cGVt", "username": "system:serviceaccount:db:member",
                    "groups": ["system:serviceaccounts"], "usages": ["server auth"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["c-0"]},
                    "signerName": "cassandra.rook.io/member", "expirationSeconds": 3600},
                "status": {"conditions": [{"type": "Approved", "reason": "KubectlApprove",
                    "status": "True", "lastUpdateTime": "2023-11-14T22:13:20Z"}]}})
        );
    }

    #[test]
    fn unsupported_and_malformed() {
        assert!(
            decode(&envelope("Pod", &[]))
                .unwrap_err()
                .contains("not supported")
        );
        assert!(decode(b"{}").is_err());
        assert!(decode(&[b"k8s\0".as_slice(), &[0x0a, 0x05, 0x01]].concat()).is_err());
    }
}
