//! The sweep against a mocked API server: what a gone Cluster left is
//! deleted, guarded by its UID; what an existing Cluster has is never.

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::json;

use super::*;
use crate::fixtures::{self, Expect, Reply, TestCluster};

const SECRETS: &str = "/api/v1/namespaces/cassandra-operator/secrets";
const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const SELECTOR: &str = "cassandra.rook.io/namespace";

fn clusters(known: &[&Cluster]) -> Store<Cluster> {
    let (store, mut writer) = reflector::store();
    for c in known {
        writer.apply_watcher_event(&watcher::Event::Apply((*c).clone()));
    }
    store
}

/// What the controller keeps outside `namespace` for Cluster `name` of UID
/// `uid`: its CA Secret's metadata.
fn ca(namespace: &str, name: &str, uid: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {
        "name": tls::ca_secret_name(uid),
        "namespace": "cassandra-operator",
        "uid": format!("secret-{uid}"),
        "labels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": name,
                   "cassandra.rook.io/namespace": namespace},
    }}))
    .unwrap()
}

fn binding(namespace: &str, name: &str, uid: &str) -> ClusterRoleBinding {
    serde_json::from_value(json!({
        "metadata": {
            "name": tls::member_csr_binding_name(uid),
            "uid": format!("binding-{uid}"),
            "labels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": name,
                       "cassandra.rook.io/namespace": namespace},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": tls::MEMBER_CSR_CLUSTER_ROLE},
    }))
    .unwrap()
}

fn deleted_if_still(uid: &str) -> serde_json::Value {
    json!({"preconditions": {"uid": uid}})
}

#[tokio::test]
async fn what_a_gone_cluster_left_is_deleted_and_what_a_known_one_has_is_kept() {
    let kept = Cluster::test().name("kept").build();
    let (ctx, api) = fixtures::context();
    let api = api.expect([
        Expect::list(SECRETS, SELECTOR).reply(Reply::list(&[
            ca("db", "kept", "uid-kept"),
            ca("db", "gone", "uid-gone"),
        ])),
        Expect::list(BINDINGS, SELECTOR).reply(Reply::list(&[
            binding("db", "kept", "uid-kept"),
            binding("db", "gone", "uid-gone"),
        ])),
        // Not in the cache: read afresh, and gone.
        Expect::get("/apis/cassandra.rook.io/v1alpha1/namespaces/db/clusters/gone")
            .reply(Reply::not_found()),
        Expect::delete(&format!("{SECRETS}/cassandra-ca-uid-gone"))
            .body(deleted_if_still("secret-uid-gone"))
            .reply(Reply::success()),
        Expect::get("/apis/cassandra.rook.io/v1alpha1/namespaces/db/clusters/gone")
            .reply(Reply::not_found()),
        Expect::delete(&format!("{BINDINGS}/cassandra-member-uid-gone"))
            .body(deleted_if_still("binding-uid-gone"))
            .reply(Reply::success()),
    ]);
    let deleted = sweep(&ctx, &clusters(&[&kept]), None).await.unwrap();
    assert_eq!(deleted, 2);
    api.done(ctx).await;
}

#[tokio::test]
async fn a_cluster_the_cache_does_not_show_yet_keeps_its_ca() {
    // Created a moment ago: the cache is behind, the fresh read finds it.
    let new = Cluster::test().name("new").build();
    let (ctx, api) = fixtures::context();
    let api = api.expect([
        Expect::list(SECRETS, SELECTOR).reply(Reply::list(&[ca("db", "new", "uid-new")])),
        Expect::list(BINDINGS, SELECTOR).reply(Reply::list::<ClusterRoleBinding>(&[])),
        Expect::get("/apis/cassandra.rook.io/v1alpha1/namespaces/db/clusters/new")
            .reply(Reply::ok(&new)),
    ]);
    assert_eq!(sweep(&ctx, &clusters(&[]), None).await.unwrap(), 0);
    api.done(ctx).await;
}

#[tokio::test]
async fn a_cluster_recreated_under_its_name_does_not_keep_its_predecessors_ca() {
    // Cluster c was deleted and created again: a new UID, a new CA; the
    // old one's CA goes.
    let again = Cluster::test().build();
    let (ctx, api) = fixtures::context();
    let api = api.expect([
        Expect::list(SECRETS, SELECTOR).reply(Reply::list(&[
            ca("db", "c", "uid-c"),
            ca("db", "c", "uid-before"),
        ])),
        Expect::list(BINDINGS, SELECTOR).reply(Reply::list::<ClusterRoleBinding>(&[])),
        Expect::get("/apis/cassandra.rook.io/v1alpha1/namespaces/db/clusters/c")
            .reply(Reply::ok(&again)),
        Expect::delete(&format!("{SECRETS}/cassandra-ca-uid-before"))
            .body(deleted_if_still("secret-uid-before"))
            .reply(Reply::success()),
    ]);
    assert_eq!(sweep(&ctx, &clusters(&[&again]), None).await.unwrap(), 1);
    api.done(ctx).await;
}

#[tokio::test]
async fn a_failed_fresh_read_deletes_nothing() {
    let (ctx, api) = fixtures::context();
    let api = api.expect([
        Expect::list(SECRETS, SELECTOR).reply(Reply::list(&[ca("db", "gone", "uid-gone")])),
        Expect::list(BINDINGS, SELECTOR).reply(Reply::list::<ClusterRoleBinding>(&[])),
        Expect::get("/apis/cassandra.rook.io/v1alpha1/namespaces/db/clusters/gone")
            .reply(Reply::Status(500, "InternalError")),
    ]);
    let swept = sweep(&ctx, &clusters(&[]), None).await;
    assert!(
        matches!(
            swept,
            Err(Error::GetObject {
                kind: "Cluster",
                ..
            })
        ),
        "{swept:?}"
    );
    api.done(ctx).await;
}

#[tokio::test]
async fn a_controller_of_one_namespace_sweeps_only_that_namespaces() {
    let (ctx, api) = fixtures::context();
    let only = "cassandra.rook.io/namespace=db";
    let api = api.expect([
        Expect::list(SECRETS, only).reply(Reply::list::<Secret>(&[])),
        Expect::list(BINDINGS, only).reply(Reply::list::<ClusterRoleBinding>(&[])),
    ]);
    assert_eq!(sweep(&ctx, &clusters(&[]), Some("db")).await.unwrap(), 0);
    api.done(ctx).await;
}
