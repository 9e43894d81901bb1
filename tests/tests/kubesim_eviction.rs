//! The Eviction subresource honours PodDisruptionBudgets as the API server
//! does (the disruption controller keeps the budgets' status): an eviction
//! a budget allows deletes the Pod, one it forbids is 429 with the API
//! server's message, and a Pod no budget covers is simply deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams};
use serde_json::json;
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::store::{Target, WriteOptions};

#[allow(dead_code)]
mod support;
use support::{api_error, client_without_retries, start_sim};

#[tokio::test]
async fn evictions_take_disruptions_from_the_budget() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(1));
    })
    .await;
    let store = sim.store();
    store
        .create(
            &Target::new("policy", "v1", "poddisruptionbudgets", Some("default")),
            json!({"metadata": {"name": "c"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "c"}}}}),
            &WriteOptions::default(),
        )
        .unwrap();
    for (name, app) in [("a", "c"), ("b", "c"), ("free", "other")] {
        store
            .create(
                &pods(),
                json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
                    "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "60"]}]}}),
                &WriteOptions::default(),
            )
            .unwrap();
    }
    let pdbs = Target::new("policy", "v1", "poddisruptionbudgets", Some("default"));
    until("the budget allows one disruption", 30, || {
        let b = store.get(&pdbs, "c").ok()?;
        (b.pointer("/status/disruptionsAllowed") == Some(&json!(1))).then_some(())
    })
    .await;
    // Without kube's retries: the 429 is the answer.
    let api: Api<Pod> = Api::default_namespaced(client_without_retries(&sim.kubeconfig()).await);
    api.evict("a", &EvictParams::default())
        .await
        .expect("the budget allows it");
    let a = store.get(&pods(), "a").ok();
    assert!(
        a.as_ref()
            .is_none_or(|p| !s(p, "/metadata/deletionTimestamp").is_empty()),
        "the evicted Pod is deleted"
    );
    let e = api_error(api.evict("b", &EvictParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        e.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert!(
        store
            .get(&pods(), "b")
            .is_ok_and(|p| s(&p, "/metadata/deletionTimestamp").is_empty())
    );
    // No budget covers it: deleted.
    api.evict("free", &EvictParams::default()).await.unwrap();
    // The request log names the subresource as RBAC sees it.
    let last = sim.requests().into_iter().last().unwrap();
    assert_eq!(
        (
            last.verb.as_str(),
            last.resource.as_str(),
            last.subresource.as_str()
        ),
        ("create", "pods", "eviction")
    );
}
