//! The request side of kubesim's HTTP face: query strings, resource
//! paths, list/write/delete options and bodies as the API server parses
//! them. Pure.

use super::*;

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters (the last value of a repeated one wins).
pub fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A parsed resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// Kind, version and namespace.
    pub target: Target,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// The legacy `/watch/` prefix was used.
    pub watch_prefix: bool,
}

/// Splits `/api/v1/...` or `/apis/<g>/<v>/...` after the version: `namespaced`
/// says whether a resource (plural) of the group is namespaced.
pub fn parse_resource_path(
    group: &str,
    version: &str,
    rest: &[&str],
    namespaced: impl Fn(&str) -> bool,
) -> Option<ResourcePath> {
    let (watch_prefix, rest) = match rest.first() {
        Some(&"watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let owned = |s: Option<&&str>| s.map(|s| s.to_string());
    if rest.len() >= 3 && rest[0] == "namespaces" && namespaced(rest[2]) {
        if rest.len() > 5 {
            return None;
        }
        return Some(ResourcePath {
            target: Target::new(group, version, rest[2], Some(rest[1])),
            name: owned(rest.get(3)),
            subresource: owned(rest.get(4)),
            watch_prefix,
        });
    }
    if rest.is_empty() || rest.len() > 3 {
        return None;
    }
    Some(ResourcePath {
        target: Target::new(group, version, rest[0], None),
        name: owned(rest.get(1)),
        subresource: owned(rest.get(2)),
        watch_prefix,
    })
}

pub(super) fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

pub(super) fn list_options(q: &HashMap<String, String>) -> Result<ListOptions, ApiError> {
    Ok(ListOptions {
        label_selector: LabelSelector::parse(
            q.get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        field_selector: FieldSelector::parse(
            q.get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(ApiError::bad_request)?,
        limit: q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q
            .get("resourceVersionMatch")
            .filter(|c| !c.is_empty())
            .cloned(),
    })
}

pub(super) fn write_options(q: &HashMap<String, String>) -> WriteOptions {
    WriteOptions {
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        field_manager: q.get("fieldManager").cloned(),
        force: truthy(q, "force"),
        field_validation: q.get("fieldValidation").cloned(),
        update_manager: None,
        admission: None,
    }
}

pub(super) fn delete_options(
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = b
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| q.get("propagationPolicy").cloned());
    let orphan = b
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| q.get("orphanDependents").map(|o| o == "true"));
    let propagation = match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Background"), _) => Some(Propagation::Background),
        (Some("Orphan"), _) | (None, Some(true)) => Some(Propagation::Orphan),
        (None, _) => None,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    let dry = b
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|d| d == "All"))
        || q.get("dryRun").is_some_and(|d| d == "All");
    Ok(DeleteOptions {
        propagation,
        uid: b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run: dry,
        grace_period: match b.get("gracePeriodSeconds").and_then(Value::as_i64) {
            Some(g) => Some(g),
            None => match q.get("gracePeriodSeconds") {
                Some(g) => Some(g.parse::<i64>().map_err(|e| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds: {e}"))
                })?),
                None => None,
            },
        },
        admission: None,
    })
}

pub(super) fn parse_body(body: &[u8], content_type: &str) -> Result<Value, ApiError> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media == "application/vnd.kubernetes.protobuf" {
        // kubectl's generators (create namespace, configmap, secret,
        // serviceaccount) send protobuf.
        return crate::kubesim::protobuf::decode(body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        });
    }
    if media.contains("protobuf") || media.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (not {media})"
        )));
    }
    if media.contains("yaml") {
        let text = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        serde_norway::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        })
    }
}
