//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for
//! (`Accept: ...;as=Table`), with the columns of the API server's printers
//! for the kinds people look at, a CRD's `additionalPrinterColumns`, and
//! ages as the API server words them. Pure: no I/O.

use super::discovery::ResourceType;
use serde_json::{Value, json};

/// Seconds since the epoch of an RFC 3339 timestamp (`2006-01-02T15:04:05Z`,
/// fractions and offsets ignored).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.trim_end_matches('Z').split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.split('.').next()?.parse::<i64>().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86400 + hh * 3600 + mm * 60 + ss)
}

/// A duration as `kubectl get` shows ages (`duration.HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let dy = days % 365;
        return if dy == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{dy}d")
        };
    }
    format!("{years}y")
}

/// The age of an object at `now` (seconds since the epoch).
fn age(obj: &Value, now: i64) -> Value {
    match obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
    {
        Some(t) => json!(human_duration(now - t)),
        None => json!("<unknown>"),
    }
}

/// Evaluates the JSONPath subset of printer columns: `.a.b`, `[N]`, `[*]`
/// and `[?(@.field=="value")]`. Returns every match.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut cur: Vec<&Value> = vec![obj];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            cur = cur.iter().filter_map(|v| v.get(field)).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            let items = cur.iter().filter_map(|v| v.as_array()).flatten();
            cur = if inner == "*" {
                items.collect()
            } else if let Ok(i) = inner.parse::<usize>() {
                cur.iter().filter_map(|v| v.get(i)).collect()
            } else if let Some(cond) = inner.strip_prefix("?(@.").and_then(|c| c.strip_suffix(')'))
            {
                let Some((field, want)) = cond.split_once("==") else {
                    return vec![];
                };
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                items
                    .filter(|i| i.get(field.trim()).and_then(Value::as_str) == Some(want))
                    .collect()
            } else {
                return vec![];
            };
        } else {
            return vec![];
        }
    }
    cur
}

fn column(name: &str, typ: &str, description: &str, priority: i64) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": typ, "format": format, "description": description, "priority": priority})
}

fn pod_status(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    for cs in statuses.into_iter().flatten() {
        if let Some(reason) = cs.pointer("/state/waiting/reason").and_then(Value::as_str) {
            return reason.into();
        }
        if let Some(reason) = cs
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            return reason.into();
        }
    }
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .into()
}

/// Column definitions and the cells of one object.
fn columns(rt: &ResourceType, version: &str) -> Vec<Value> {
    let name = column(
        "Name",
        "string",
        "Name must be unique within a namespace.",
        0,
    );
    let age = column(
        "Age",
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    );
    if let Some(cols) = rt.printer_columns.get(version) {
        let mut out = vec![name];
        for c in cols {
            let typ = c.get("type").and_then(Value::as_str).unwrap_or("string");
            out.push(column(
                c.get("name").and_then(Value::as_str).unwrap_or_default(),
                if typ == "date" { "string" } else { typ },
                c.get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            ));
        }
        if !cols.iter().any(|c| {
            c.get("jsonPath").and_then(Value::as_str) == Some(".metadata.creationTimestamp")
        }) {
            out.push(age);
        }
        return out;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "events") | ("events.k8s.io", "events") => vec![
            column(
                "Last Seen",
                "string",
                "The time at which the most recent occurrence of this event was recorded.",
                0,
            ),
            column(
                "Type",
                "string",
                "Type of this event (Normal, Warning), new types could be added in the future",
                0,
            ),
            column(
                "Reason",
                "string",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            column(
                "Object",
                "string",
                "The object that this event is about.",
                0,
            ),
            column(
                "Subobject",
                "string",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
                1,
            ),
            column(
                "Source",
                "string",
                "The component reporting this event. Should be a short machine understandable string.",
                1,
            ),
            column(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
                0,
            ),
            column(
                "First Seen",
                "string",
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                1,
            ),
            column(
                "Count",
                "string",
                "The number of times this event has occurred.",
                1,
            ),
            column(
                "Name",
                "string",
                "Name must be unique within a namespace.",
                1,
            ),
        ],
        ("", "pods") => vec![
            name,
            column(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
            ),
            column(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
                0,
            ),
            column(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted.",
                0,
            ),
            age,
            column("IP", "string", "IP address allocated to the pod.", 1),
            column(
                "Node",
                "string",
                "Name of the node the pod is assigned to.",
                1,
            ),
        ],
        ("", "nodes") => vec![
            name,
            column("Status", "string", "The status of the node", 0),
            column("Roles", "string", "The roles of the node", 0),
            age,
            column(
                "Version",
                "string",
                "Kubelet Version reported by the node.",
                0,
            ),
        ],
        ("apps", "statefulsets") => vec![
            name,
            column("Ready", "string", "Number of the pod with ready state", 0),
            age,
        ],
        ("", "namespaces") => vec![
            name,
            column("Status", "string", "The status of the namespace", 0),
            age,
        ],
        ("certificates.k8s.io", "certificatesigningrequests") => vec![
            name,
            age,
            column(
                "SignerName",
                "string",
                "signerName indicates the requested signer, and is a qualified name.",
                0,
            ),
            column(
                "Requestor",
                "string",
                "Name of the user who requested the CSR.",
                0,
            ),
            column(
                "RequestedDuration",
                "string",
                "expirationSeconds is the requested duration of validity of the issued certificate.",
                0,
            ),
            column(
                "Condition",
                "string",
                "conditions applied to the request. Known conditions are \"Approved\", \"Denied\", and \"Failed\".",
                0,
            ),
        ],
        _ => vec![name, age],
    }
}

/// A request's CONDITION (`extractCSRStatus`): Denied before Approved
/// before Pending, then Failed and Issued.
fn csr_condition(o: &Value) -> String {
    let has = |kind: &str| {
        o.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    };
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if o.pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        status.push_str(",Issued");
    }
    status
}

fn cells(rt: &ResourceType, version: &str, o: &Value, now: i64) -> Vec<Value> {
    let name = o["metadata"]["name"].clone();
    if let Some(cols) = rt.printer_columns.get(version) {
        let mut out = vec![name];
        for c in cols {
            let path = c
                .get("jsonPath")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let typ = c.get("type").and_then(Value::as_str).unwrap_or("string");
            let found = json_path(o, path);
            out.push(match (typ, found.first()) {
                (_, None) => Value::Null,
                ("date", Some(v)) => match v.as_str().and_then(parse_rfc3339) {
                    Some(t) => json!(human_duration(now - t)),
                    None => Value::Null,
                },
                (_, Some(v)) if found.len() == 1 => (*v).clone(),
                (_, Some(_)) => json!(
                    found
                        .iter()
                        .map(|v| v
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            });
        }
        if !cols.iter().any(|c| {
            c.get("jsonPath").and_then(Value::as_str) == Some(".metadata.creationTimestamp")
        }) {
            out.push(age(o, now));
        }
        return out;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "events") | ("events.k8s.io", "events") => event_cells(o, now),
        ("", "pods") => {
            let specs = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let ready = statuses
                .into_iter()
                .flatten()
                .filter(|c| c.get("ready") == Some(&json!(true)))
                .count();
            let restarts: i64 = statuses
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum();
            vec![
                name,
                json!(format!("{ready}/{specs}")),
                json!(pod_status(o)),
                json!(restarts),
                age(o, now),
                json!(
                    o.pointer("/status/podIP")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>")
                ),
                json!(
                    o.pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>")
                ),
            ]
        }
        ("", "nodes") => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| c.get("type") == Some(&json!("Ready")))
                .and_then(|c| c.get("status").and_then(Value::as_str));
            let mut status = if ready == Some("True") {
                "Ready"
            } else {
                "NotReady"
            }
            .to_string();
            if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            vec![
                name,
                json!(status),
                json!("<none>"),
                age(o, now),
                json!(
                    o.pointer("/status/nodeInfo/kubeletVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                ),
            ]
        }
        ("apps", "statefulsets") => {
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let ready = o
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            vec![name, json!(format!("{ready}/{want}")), age(o, now)]
        }
        ("", "namespaces") => vec![
            name,
            json!(
                o.pointer("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
            age(o, now),
        ],
        ("certificates.k8s.io", "certificatesigningrequests") => {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let signer = Some(text("/spec/signerName"))
                .filter(|s| !s.is_empty())
                .unwrap_or("<none>");
            let duration = o
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .map_or_else(|| "<none>".to_string(), human_duration);
            vec![
                name,
                age(o, now),
                json!(signer),
                json!(text("/spec/username")),
                json!(duration),
                json!(csr_condition(o)),
            ]
        }
        _ => vec![name, age(o, now)],
    }
}

/// An Event's cells, as the API server prints it (wide: kubectl hides the
/// priority-1 columns), from either API's shape.
fn event_cells(o: &Value, now: i64) -> Vec<Value> {
    let text = |paths: &[&str]| {
        paths
            .iter()
            .filter_map(|p| o.pointer(p).and_then(Value::as_str))
            .find(|v| !v.is_empty())
            .unwrap_or_default()
            .to_string()
    };
    let since = |t: &str| match parse_rfc3339(t) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".to_string(),
    };
    let first = match text(&["/firstTimestamp", "/deprecatedFirstTimestamp"]).as_str() {
        "" => since(&text(&["/eventTime"])),
        t => since(t),
    };
    let mut last = match text(&["/lastTimestamp", "/deprecatedLastTimestamp"]).as_str() {
        "" => first.clone(),
        t => since(t),
    };
    let mut count = ["/count", "/deprecatedCount"]
        .iter()
        .find_map(|p| o.pointer(p).and_then(Value::as_i64))
        .unwrap_or(0);
    if let Some(series) = o.get("series").filter(|s| s.is_object()) {
        last = since(series["lastObservedTime"].as_str().unwrap_or_default());
        count = series["count"].as_i64().unwrap_or(count);
    } else if count == 0 {
        count = 1;
    }
    let kind = text(&["/involvedObject/kind", "/regarding/kind"]).to_lowercase();
    let target = match text(&["/involvedObject/name", "/regarding/name"]).as_str() {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let component = text(&[
        "/source/component",
        "/reportingController",
        "/deprecatedSource/component",
    ]);
    let instance = text(&[
        "/source/host",
        "/reportingInstance",
        "/deprecatedSource/host",
    ]);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text(&["/type"])),
        json!(text(&["/reason"])),
        json!(target),
        json!(text(&["/involvedObject/fieldPath", "/regarding/fieldPath"])),
        json!(source),
        json!(text(&["/message", "/note"]).trim()),
        json!(first),
        json!(count),
        o["metadata"]["name"].clone(),
    ]
}

/// The Table of a list (or of one object) as served at `version`.
/// `include` is the `includeObject` parameter.
pub fn to_table(rt: &ResourceType, version: &str, v: &Value, include: &str, now: i64) -> Value {
    let items: Vec<Value> = match v.get("items").and_then(Value::as_array) {
        Some(items) => items.clone(),
        None => vec![v.clone()],
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(rt, version, o, now)});
            match include {
                "Object" => {
                    let mut full = o.clone();
                    full["apiVersion"] = json!(rt.api_version(version));
                    full["kind"] = json!(rt.kind);
                    row["object"] = full;
                }
                "None" => {}
                _ => {
                    row["object"] =
                        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]});
                }
            }
            row
        })
        .collect();
    let mut metadata = json!({"resourceVersion": v["metadata"]["resourceVersion"]});
    if let Some(c) = v.pointer("/metadata/continue") {
        metadata["continue"] = c.clone();
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(rt, version),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubesim::discovery::{builtin_types, crd_type};

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(400 * 86400), "400d");
        assert_eq!(human_duration(-5), "<invalid>");
        assert_eq!(parse_rfc3339("1970-01-02T00:00:01Z"), Some(86401));
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199));
    }

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "reason": "AllUp"}, {"type": "Degraded", "reason": "No"}]}, "spec": {"v": "1"}});
        assert_eq!(json_path(&o, ".spec.v"), vec![&json!("1")]);
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].reason"),
            vec![&json!("AllUp")]
        );
        assert_eq!(
            json_path(&o, ".status.conditions[1].type"),
            vec![&json!("Degraded")]
        );
        assert_eq!(json_path(&o, ".status.conditions[*].type").len(), 2);
        assert!(json_path(&o, ".spec.missing").is_empty());
    }

    #[test]
    fn crd_printer_columns_and_pod_columns() {
        let crd = serde_json::to_value(crds::crd::definition()).unwrap();
        let rt = crd_type(&crd).unwrap();
        let cluster = json!({"metadata": {"name": "c", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"mode": "cassandra", "version": "4.1.8"},
            "status": {"members": 3, "readyMembers": 2, "conditions": [{"type": "Ready", "reason": "MembersNotReady"}]}});
        let t = to_table(
            &rt,
            "v1alpha1",
            &json!({"metadata": {"resourceVersion": "9"}, "items": [cluster]}),
            "None",
            3600,
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                "Name", "Mode", "Version", "Members", "Ready", "Status", "Age"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["c", "cassandra", "4.1.8", 3, 2, "MembersNotReady", "60m"])
        );

        let pods = builtin_types()
            .into_iter()
            .find(|t| t.plural == "pods")
            .unwrap();
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        let t = to_table(&pods, "v1", &pod, "PartialObjectMetadata", 30);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["p", "1/2", "Running", 3, "30s", "10.0.0.1", "n1"])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
