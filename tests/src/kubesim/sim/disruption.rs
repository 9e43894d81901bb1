//! The disruption controller and the Eviction subresource
//! (`POST pods/<name>/eviction`) as the API server serves it: a PDB's
//! status counts the healthy (Ready, not terminating) Pods its selector
//! matches against what `minAvailable`/`maxUnavailable` demand; an
//! eviction deletes the Pod when a budget allows it (and takes one
//! disruption from it), answers 429 when none does, and 500 when more
//! than one budget covers the Pod. Reads and writes the store.

use crate::kubesim::selectors::LabelSelector;
use crate::kubesim::store::{ApiError, DeleteOptions, Store, Subresource, Target, WriteOptions};
use serde_json::{Value, json};

fn pdbs(ns: Option<&str>) -> Target {
    Target::new("policy", "v1", "poddisruptionbudgets", ns)
}

fn items(store: &Store, t: &Target) -> Vec<Value> {
    store
        .list(t, &Default::default())
        .ok()
        .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
        .unwrap_or_default()
}

fn healthy(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// An int-or-percent of `of` (percentages round up, as the controller's).
fn scaled(v: &Value, of: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * of + 99) / 100)
        }
        _ => None,
    }
}

/// The status a PDB should have given the Pods of its namespace.
pub fn pdb_status(pdb: &Value, pods: &[impl std::borrow::Borrow<Value>]) -> Value {
    let selector = LabelSelector::from_object(&pdb["spec"]["selector"]).ok();
    let matching: Vec<&Value> = pods
        .iter()
        .map(|p| -> &Value { p.borrow() })
        .filter(|p| selector.as_ref().is_some_and(|s| s.matches_object(p)))
        .collect();
    let expected = matching.len() as i64;
    let current = matching.iter().filter(|p| healthy(p)).count() as i64;
    let desired = if let Some(min) = pdb["spec"].get("minAvailable") {
        scaled(min, expected).unwrap_or(expected)
    } else if let Some(max) = pdb["spec"].get("maxUnavailable") {
        (expected - scaled(max, expected).unwrap_or(0)).max(0)
    } else {
        expected
    };
    json!({
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": (current - desired).max(0),
        "currentHealthy": current,
        "desiredHealthy": desired,
        "expectedPods": expected,
    })
}

/// One pass of the disruption controller.
pub fn sync_budgets(store: &Store) {
    // The Pods are read once per pass, shared with the store, and each
    // budget's candidates found by label (the real controller reads them
    // from its informer's cache): 1,000 budgets over 3,000 Pods would
    // otherwise match 3 million.
    let pods = super::list_all(store, "", "pods");
    let pods_by_label = super::LabelIndex::new(&pods);
    for pdb in super::list_all(store, "policy", "poddisruptionbudgets") {
        let ns = pdb["metadata"]["namespace"].as_str().unwrap_or_default();
        let candidates = pods_by_label.candidates(
            ns,
            pdb.pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object),
        );
        let mut status = pdb.get("status").cloned().unwrap_or(json!({}));
        let want = pdb_status(&pdb, candidates);
        let before = status.clone();
        for (k, v) in want.as_object().into_iter().flatten() {
            status[k] = v.clone();
        }
        if status != before {
            let mut obj = Value::clone(&pdb);
            obj["status"] = status;
            let name = pdb["metadata"]["name"].as_str().unwrap_or_default();
            let _ = store.update(
                &pdbs(Some(ns)),
                name,
                obj,
                Subresource::Status,
                &WriteOptions::default(),
            );
        }
    }
}

/// `POST /api/v1/namespaces/<ns>/pods/<name>/eviction`.
pub fn evict(store: &Store, ns: &str, name: &str, body: &Value) -> Result<(u16, Value), ApiError> {
    let pods_t = Target::new("", "v1", "pods", Some(ns));
    let pod = store.get(&pods_t, name)?;
    let mut delete = DeleteOptions::default();
    if let Some(g) = body
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        delete.grace_period = Some(g);
    }
    let success = || json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    // A Pod that has finished, or never started, needs no budget.
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed" | "Pending")
        || pod.pointer("/metadata/deletionTimestamp").is_some()
    {
        store.delete(&pods_t, name, &delete)?;
        return Ok((201, success()));
    }
    let covering: Vec<Value> = items(store, &pdbs(Some(ns)))
        .into_iter()
        .filter(|b| {
            LabelSelector::from_object(&b["spec"]["selector"]).is_ok_and(|s| s.matches_object(&pod))
        })
        .collect();
    let pdb = match covering.as_slice() {
        [] => {
            store.delete(&pods_t, name, &delete)?;
            return Ok((201, success()));
        }
        [one] => one.clone(),
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let pdb_name = pdb["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // An unready Pod counts towards no budget (eviction.go): evicted
    // whatever the budget under `AlwaysAllow`; under `IfHealthyBudget` (the
    // default) when the healthy Pods meet the budget as its status last
    // counted them, without taking a disruption from it.
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    if !ready {
        let count = |k: &str| pdb.pointer(&format!("/status/{k}")).and_then(Value::as_i64);
        let (current, desired) = (
            count("currentHealthy").unwrap_or(0),
            count("desiredHealthy").unwrap_or(0),
        );
        if pdb.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow"))
            || (current >= desired && desired > 0)
        {
            store.delete(&pods_t, name, &delete)?;
            return Ok((201, success()));
        }
    }
    let too_many = |message: String, cause: String| ApiError {
        code: 429,
        reason: "TooManyRequests",
        message,
        // eviction.go's NewTooManyRequests(..., 10): clients wait 10 s.
        details: Some(
            json!({"causes": [{"reason": "DisruptionBudget", "message": cause}], "retryAfterSeconds": 10}),
        ),
    };
    if pdb.pointer("/status/observedGeneration") != pdb.pointer("/metadata/generation") {
        return Err(too_many(
            "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            format!("The disruption budget {pdb_name} is still being processed by the server."),
        ));
    }
    let allowed = pdb
        .pointer("/status/disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if allowed <= 0 {
        let n = |k: &str| {
            pdb.pointer(&format!("/status/{k}"))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        return Err(too_many(
            "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            format!(
                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                n("desiredHealthy"),
                n("currentHealthy")
            ),
        ));
    }
    // Take the disruption (a conflict here is the API server's too: the
    // client retries), then delete.
    let mut updated = pdb.clone();
    updated["status"]["disruptionsAllowed"] = json!(allowed - 1);
    updated["status"]["disruptedPods"][name] = json!(crate::kubesim::now_rfc3339());
    store.update(
        &pdbs(Some(ns)),
        &pdb_name,
        updated,
        Subresource::Status,
        &WriteOptions::default(),
    )?;
    store.delete(&pods_t, name, &delete)?;
    Ok((201, success()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": "c"}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn budgets_count_healthy_pods() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        let pdb = json!({"metadata": {"generation": 1}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "c"}}}});
        let s = pdb_status(&pdb, &pods);
        assert_eq!(
            (
                s["expectedPods"].as_i64(),
                s["currentHealthy"].as_i64(),
                s["desiredHealthy"].as_i64(),
                s["disruptionsAllowed"].as_i64()
            ),
            (Some(3), Some(2), Some(2), Some(0))
        );
        let pdb = json!({"metadata": {"generation": 1}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "c"}}}});
        assert_eq!(
            pdb_status(&pdb, &pods)["disruptionsAllowed"],
            0,
            "50% of 3 rounds up to 2"
        );
        let pdb = json!({"metadata": {"generation": 1}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "c"}}}});
        assert_eq!(pdb_status(&pdb, &pods)["disruptionsAllowed"], 1);
    }

    /// The eviction of a running Pod that is not Ready, as eviction.go
    /// decides it: under `IfHealthyBudget` (the default) it goes while the
    /// healthy Pods meet the budget, so `maxUnavailable: 1` with that one
    /// Pod down lets it go; `maxUnavailable: 0` holds it; `AlwaysAllow`
    /// lets it go whatever the budget. A Ready Pod needs a disruption.
    #[test]
    fn an_unready_pod_is_evicted_when_the_healthy_ones_meet_the_budget() {
        use crate::kubesim::store::StoreOptions;
        let cases = [
            (json!({"maxUnavailable": 1}), "b", 201),
            (json!({"maxUnavailable": 0}), "b", 429),
            (
                json!({"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
                "b",
                201,
            ),
            (json!({"maxUnavailable": 1}), "a", 429),
        ];
        for (budget, evicted, code) in cases {
            let store = Store::new(StoreOptions::default());
            let namespace =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db"}});
            store
                .create(
                    &Target::new("", "v1", "namespaces", None),
                    namespace,
                    &WriteOptions::default(),
                )
                .unwrap();
            let pods_t = Target::new("", "v1", "pods", Some("db"));
            for (name, ready) in [("a", true), ("b", false), ("c", true)] {
                let mut p = pod(name, ready);
                p["apiVersion"] = json!("v1");
                p["kind"] = json!("Pod");
                p["metadata"]["namespace"] = json!("db");
                p["spec"] = json!({"containers": [{"name": "m", "image": "m"}]});
                p["status"]["phase"] = json!("Running");
                let created = store
                    .create(&pods_t, p.clone(), &WriteOptions::default())
                    .unwrap();
                let mut running = created.clone();
                running["status"] = p["status"].clone();
                store
                    .update(
                        &pods_t,
                        name,
                        running,
                        Subresource::Status,
                        &WriteOptions::default(),
                    )
                    .unwrap();
            }
            let mut spec = budget.clone();
            spec["selector"] = json!({"matchLabels": {"app": "c"}});
            let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "c", "namespace": "db"}, "spec": spec});
            store
                .create(&pdbs(Some("db")), pdb, &WriteOptions::default())
                .unwrap();
            sync_budgets(&store);
            let got = match evict(&store, "db", evicted, &json!({})) {
                Ok((code, _)) => code,
                Err(e) => e.code,
            };
            assert_eq!(got, code, "evicting {evicted} under {budget}");
            assert_eq!(
                store.get(&pods_t, evicted).is_err(),
                code == 201,
                "{evicted} deleted when evicted"
            );
        }
    }
}
