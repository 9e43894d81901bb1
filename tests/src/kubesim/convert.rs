//! Conversions between kinds the API server stores once and serves in two
//! shapes: `events.k8s.io/v1` Events are stored as core `v1` Events (so
//! `kubectl get events` shows what an operator records through the events
//! API, and the other way round). Pure: no I/O.

use serde_json::{Map, Value, json};

/// events.k8s.io/v1 field ↔ core/v1 field, for fields that differ in name.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &Value, forward: bool, api_version: &str) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let renamed = EVENT_FIELDS
            .iter()
            .find(|(a, b)| if forward { a == k } else { b == k })
            .map(|(a, b)| if forward { *b } else { *a })
            .unwrap_or(k.as_str());
        out.insert(renamed.to_string(), v.clone());
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event as the core `v1` Event it is stored as.
pub fn event_to_core(obj: &Value) -> Value {
    rename(obj, true, "v1")
}

/// A stored core `v1` Event as served by `events.k8s.io/v1`.
pub fn event_from_core(obj: &Value) -> Value {
    rename(obj, false, "events.k8s.io/v1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Cluster", "name": "c"}, "note": "rack created", "reason": "RackCreated",
            "type": "Normal", "reportingController": "cassandra-operator", "reportingInstance": "pod-0",
            "action": "Reconcile", "eventTime": "2026-01-01T00:00:00.000000Z"});
        let core = event_to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "c");
        assert_eq!(core["message"], "rack created");
        assert_eq!(core["reportingComponent"], "cassandra-operator");
        assert_eq!(core["reason"], "RackCreated");
        assert!(core.get("note").is_none());
        assert_eq!(event_from_core(&core), v1);
    }
}
