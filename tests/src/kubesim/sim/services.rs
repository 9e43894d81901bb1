//! Addresses: a ClusterIP pass for any Service that reaches the store without one
//! (at random from the service range, as
//! [`crate::kubesim::defaults::random_cluster_ip`]; the store's own allocator
//! normally gives a Service its address when it is created, as the API
//! server does; headless Services, `clusterIP: None`, keep none), and the
//! endpoints controller (Endpoints per Service with a selector;
//! `publishNotReadyAddresses`). [`endpoints_for`] is pure.

use super::{list_all, patch_main, s};
use crate::kubesim::selectors::label_of;
use crate::kubesim::store::Store;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Gives every Service that needs one a ClusterIP.
pub fn allocate_cluster_ips(store: &Store) {
    let services = list_all(store, "", "services");
    let mut used: Vec<String> = services
        .iter()
        .map(|svc| s(svc, "/spec/clusterIP").to_string())
        .filter(|ip| !ip.is_empty())
        .collect();
    for svc in &services {
        let kind = s(svc, "/spec/type");
        if !s(svc, "/spec/clusterIP").is_empty() || kind == "ExternalName" {
            continue;
        }
        let random = crate::kubesim::random_u64();
        let Some(ip) = crate::kubesim::defaults::random_cluster_ip(&used, random) else {
            eprintln!("kubesim: the ClusterIP range is full");
            return;
        };
        used.push(ip.clone());
        let _ = patch_main(
            store,
            "",
            "services",
            svc,
            &json!({"spec": {"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack", "type": if kind.is_empty() { "ClusterIP" } else { kind }}}),
        );
    }
}

/// The Endpoints of a Service with a selector, from the pods it selects:
/// ready pods in `addresses`, the others (with an IP, not terminating) in
/// `notReadyAddresses`, or in `addresses` too with
/// `publishNotReadyAddresses`. Pure.
pub fn endpoints_for(svc: &Value, pods: &[impl std::borrow::Borrow<Value>]) -> Option<Value> {
    let selector = svc.pointer("/spec/selector")?.as_object()?;
    if selector.is_empty() {
        return None;
    }
    let ns = s(svc, "/metadata/namespace");
    let publish = svc.pointer("/spec/publishNotReadyAddresses") == Some(&json!(true));
    let mut ready = Vec::new();
    let mut not_ready = Vec::new();
    let mut chosen: Vec<&Value> = pods
        .iter()
        .map(|p| -> &Value { p.borrow() })
        .filter(|p| s(p, "/metadata/namespace") == ns)
        .filter(|p| {
            selector
                .iter()
                .all(|(k, v)| v.as_str().is_some_and(|v| label_of(p, k) == Some(v)))
        })
        .filter(|p| !s(p, "/status/podIP").is_empty())
        .collect();
    chosen.sort_by_key(|p| s(p, "/status/podIP").to_string());
    for p in &chosen {
        let terminating = p.pointer("/metadata/deletionTimestamp").is_some();
        let is_ready = s(p, "/status/phase") == "Running"
            && p.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let mut addr = json!({"ip": s(p, "/status/podIP"), "nodeName": s(p, "/spec/nodeName"),
            "targetRef": {"kind": "Pod", "name": s(p, "/metadata/name"), "namespace": ns,
                "uid": s(p, "/metadata/uid")}});
        if s(p, "/spec/subdomain") == s(svc, "/metadata/name") && !s(p, "/spec/hostname").is_empty()
        {
            addr["hostname"] = json!(s(p, "/spec/hostname"));
        }
        if publish || (is_ready && !terminating) {
            ready.push(addr);
        } else if !terminating {
            not_ready.push(addr);
        }
    }
    let ports: Vec<Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|port| {
            let target = match port.get("targetPort") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(name)) => chosen.iter().find_map(|p| {
                    p.pointer("/spec/containers")?
                        .as_array()?
                        .iter()
                        .flat_map(|c| {
                            c.get("ports")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                        })
                        .find(|cp| cp.get("name") == Some(&json!(name)))?
                        .get("containerPort")?
                        .as_u64()
                }),
                _ => port.get("port").and_then(Value::as_u64),
            };
            let mut e = json!({"port": target.unwrap_or(0),
                "protocol": port.get("protocol").cloned().unwrap_or(json!("TCP"))});
            if let Some(n) = port.get("name") {
                e["name"] = n.clone();
            }
            e
        })
        .collect();
    let mut subset = json!({});
    if !ready.is_empty() {
        subset["addresses"] = json!(ready);
    }
    if !not_ready.is_empty() {
        subset["notReadyAddresses"] = json!(not_ready);
    }
    let subsets = if ready.is_empty() && not_ready.is_empty() {
        json!([])
    } else {
        subset["ports"] = json!(ports);
        json!([subset])
    };
    Some(json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": s(svc, "/metadata/name"), "namespace": ns,
            "labels": svc.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
        "subsets": subsets}))
}

/// The endpoints controller: one Endpoints object per Service with a
/// selector, kept equal to [`endpoints_for`].
pub fn sync_endpoints(store: &Store) {
    let pods = list_all(store, "", "pods");
    let pods_by_label = super::LabelIndex::new(&pods);
    let existing: HashMap<(String, String), std::sync::Arc<Value>> =
        list_all(store, "", "endpoints")
            .into_iter()
            .map(|e| {
                (
                    (
                        s(&e, "/metadata/namespace").to_string(),
                        s(&e, "/metadata/name").to_string(),
                    ),
                    e,
                )
            })
            .collect();
    for svc in list_all(store, "", "services") {
        // A Service's selector is a map of labels.
        let candidates = pods_by_label.candidates(
            s(&svc, "/metadata/namespace"),
            svc.pointer("/spec/selector").and_then(Value::as_object),
        );
        let Some(want) = endpoints_for(&svc, candidates) else {
            continue;
        };
        let ns = s(&svc, "/metadata/namespace").to_string();
        let name = s(&svc, "/metadata/name").to_string();
        let target = super::t("", "endpoints", Some(&ns));
        match existing.get(&(ns.clone(), name.clone())) {
            None => {
                let _ = store.create(&target, want, &Default::default());
            }
            Some(have) if have.get("subsets") != want.get("subsets") => {
                let mut next = Value::clone(have);
                next["subsets"] = want["subsets"].clone();
                let _ = store.update(
                    &target,
                    &name,
                    next,
                    crate::kubesim::store::Subresource::Main,
                    &Default::default(),
                );
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name, "namespace": "db", "uid": name, "labels": {"app": "c"}},
            "spec": {"nodeName": "n1", "hostname": name, "subdomain": "c",
                "containers": [{"ports": [{"name": "cql", "containerPort": 9042}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn ready_and_not_ready_addresses() {
        let svc = json!({"metadata": {"name": "c", "namespace": "db"},
            "spec": {"selector": {"app": "c"}, "clusterIP": "None",
                "ports": [{"name": "cql", "port": 9042, "targetPort": "cql"}]}});
        let pods = [
            pod("c-0", "127.1.0.1", true),
            pod("c-1", "127.1.0.2", false),
        ];
        let ep = endpoints_for(&svc, &pods).unwrap();
        let subset = &ep["subsets"][0];
        assert_eq!(subset["addresses"][0]["ip"], "127.1.0.1");
        assert_eq!(subset["addresses"][0]["hostname"], "c-0");
        assert_eq!(subset["notReadyAddresses"][0]["ip"], "127.1.0.2");
        assert_eq!(
            subset["ports"],
            json!([{"name": "cql", "port": 9042, "protocol": "TCP"}])
        );
        let mut publish = svc.clone();
        publish["spec"]["publishNotReadyAddresses"] = json!(true);
        let ep = endpoints_for(&publish, &pods).unwrap();
        assert_eq!(ep["subsets"][0]["addresses"].as_array().unwrap().len(), 2);
        assert!(ep["subsets"][0].get("notReadyAddresses").is_none());
        assert_eq!(
            endpoints_for(&svc, &[] as &[Value]).unwrap()["subsets"],
            json!([])
        );
        let no_selector = json!({"metadata": {"name": "x", "namespace": "db"}, "spec": {}});
        assert!(endpoints_for(&no_selector, &pods).is_none());
    }
}
