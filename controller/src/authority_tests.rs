//! The authority step against a mocked API server: what it writes for a
//! new TLS cluster, that it writes nothing when all is in place, that a CA
//! is never overwritten, and what it refuses.

use crds::v1alpha1::{Cluster, InternodeEncryption, SecuritySpec, TlsSpec};
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{self, Expect, Reply, TestCluster, to_json};

const SECRETS: &str = "/api/v1/namespaces/cassandra-operator/secrets";
const SECRET: &str = "/api/v1/namespaces/cassandra-operator/secrets/cassandra-ca-uid-c";
const CONFIG_MAPS: &str = "/api/v1/namespaces/db/configmaps";
const CONFIG_MAP: &str = "/api/v1/namespaces/db/configmaps/c-ca";
const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const BINDING: &str =
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cassandra-member-uid-c";

fn tls_cluster() -> Cluster {
    let mut cluster = Cluster::test().rack("r", 1).build();
    cluster.spec.security = Some(SecuritySpec {
        tls: TlsSpec {
            internode: InternodeEncryption::All,
            ..TlsSpec::default()
        },
        authentication: None,
    });
    cluster
}

/// The cluster's CA Secret as the API server holds it.
fn ca_secret(cluster: &Cluster, authority: &Authority) -> Secret {
    let mut secret = resources::ca_secret(cluster, "cassandra-operator", authority);
    secret.metadata.uid = Some("uid-secret".into());
    secret.metadata.resource_version = Some("1".into());
    secret
}

/// A creation by the operator's field manager, its body checked apart.
fn post(path: &str) -> Expect {
    Expect::create(path, Value::Null).body_where(|_| {})
}

fn authority() -> Authority {
    certificates::make_authority("db", "c", 1_800_000_000, tls::CA_LIFETIME_SECS).unwrap()
}

fn decoded(body: &Value, key: &str) -> String {
    let b64 = body["data"][key].as_str().unwrap_or_default();
    let bytes: k8s_openapi::ByteString = serde_json::from_value(json!(b64)).expect("base64 data");
    String::from_utf8(bytes.0).unwrap()
}

#[tokio::test]
async fn a_new_tls_cluster_gets_its_ca_secret_configmap_and_binding() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let binding = to_json(&resources::hashed(resources::member_csr_binding(&valid)));
    let made = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = made.clone();
    let (ctx, api) = fixtures::context();
    let api = api.expect([
        post(SECRETS)
            .body_where(move |body| {
                assert_eq!(body["metadata"]["name"], "cassandra-ca-uid-c");
                assert_eq!(body["metadata"]["namespace"], "cassandra-operator");
                assert_eq!(
                    body["metadata"]["labels"],
                    json!({"app": "rook-cassandra", "cassandra.rook.io/cluster": "c",
                       "cassandra.rook.io/namespace": "db"})
                );
                assert!(
                    body["metadata"]["ownerReferences"].is_null(),
                    "none crosses namespaces"
                );
                assert_eq!(body["type"], "kubernetes.io/tls");
                let authority = Authority {
                    cert_pem: decoded(body, "tls.crt"),
                    key_pem: decoded(body, "tls.key"),
                };
                authority.issuer().expect("a usable CA");
                *seen.lock().unwrap() = authority.cert_pem;
            })
            .reply(Reply::Echo),
        post(CONFIG_MAPS)
            .body_where({
                let made = made.clone();
                move |body| {
                    assert_eq!(body["metadata"]["name"], "c-ca");
                    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-c");
                    assert_eq!(
                        body["data"]["ca.crt"].as_str().unwrap(),
                        made.lock().unwrap().as_str(),
                        "the certificate of the CA just made"
                    );
                    assert!(!body.to_string().contains("PRIVATE KEY"), "never the key");
                }
            })
            .reply(Reply::Echo),
        Expect::create(BINDINGS, binding.clone()).reply(Reply::Echo),
    ]);
    assert_eq!(binding["roleRef"]["name"], tls::MEMBER_CSR_CLUSTER_ROLE);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "c-member", "namespace": "db"}])
    );
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    assert!(step.is_none(), "{step:?}");
    api.done(ctx).await;
}

#[tokio::test]
async fn nothing_is_written_when_the_caches_show_it_all_in_place() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let ca = authority();
    let (ctx, api) = fixtures::context();
    let ctx = ctx
        .with_secrets([ca_secret(&cluster, &ca)])
        .with_config_maps([resources::hashed(resources::ca_config_map(
            &valid,
            &ca.cert_pem,
        ))])
        .with_cluster_role_bindings([resources::hashed(resources::member_csr_binding(&valid))]);
    let api = api.expect([]);
    assert!(
        ensure_authority(&valid, "db", &ctx)
            .await
            .unwrap()
            .is_none()
    );
    api.done(ctx).await;
}

#[tokio::test]
async fn a_cluster_without_tls_has_no_authority() {
    let cluster = Cluster::test().rack("r", 1).build();
    let (ctx, api) = fixtures::context();
    let api = api.expect([]);
    assert!(
        ensure_authority(&ValidCluster::unchecked(&cluster), "db", &ctx)
            .await
            .unwrap()
            .is_none()
    );
    api.done(ctx).await;
}

#[tokio::test]
async fn a_ca_made_meanwhile_is_read_and_published_never_overwritten() {
    // The cache is behind: the Secret exists (made by a reconcile before a
    // crash). The create is refused, the existing CA read and published.
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let existing = authority();
    let published = to_json(&resources::hashed(resources::ca_config_map(
        &valid,
        &existing.cert_pem,
    )));
    let (ctx, api) = fixtures::context();
    let ctx =
        ctx.with_cluster_role_bindings([resources::hashed(resources::member_csr_binding(&valid))]);
    let api = api.expect([
        post(SECRETS).reply(Reply::conflict()),
        Expect::get(SECRET).reply(Reply::ok(&ca_secret(&cluster, &existing))),
        Expect::create(CONFIG_MAPS, published).reply(Reply::Echo),
    ]);
    assert!(
        ensure_authority(&valid, "db", &ctx)
            .await
            .unwrap()
            .is_none()
    );
    api.done(ctx).await;
}

#[tokio::test]
async fn a_changed_configmap_is_written_back_and_a_foreign_one_refused() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let ca = authority();
    let desired = resources::hashed(resources::ca_config_map(&valid, &ca.cert_pem));
    let mut edited = resources::ca_config_map(&valid, "someone's CA");
    edited = resources::hashed(edited);
    let (ctx, api) = fixtures::context();
    let ctx = ctx
        .with_secrets([ca_secret(&cluster, &ca)])
        .with_config_maps([edited])
        .with_cluster_role_bindings([resources::hashed(resources::member_csr_binding(&valid))]);
    let api = api.expect([Expect::apply(CONFIG_MAP, to_json(&desired)).reply(Reply::Echo)]);
    assert!(
        ensure_authority(&valid, "db", &ctx)
            .await
            .unwrap()
            .is_none()
    );
    api.done(ctx).await;

    let mut foreign = resources::ca_config_map(&valid, "a user's");
    foreign.metadata.owner_references = None;
    let (ctx, api) = fixtures::context();
    let ctx = ctx
        .with_secrets([ca_secret(&cluster, &ca)])
        .with_config_maps([foreign]);
    let api = api.expect([]);
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    assert_eq!(
        step,
        Some(Refusal::ForeignObject(ForeignObject {
            kind: "ConfigMap".into(),
            name: "c-ca".into()
        }))
    );
    api.done(ctx).await;
}

#[tokio::test]
async fn an_unusable_ca_is_refused_and_left_as_it_is() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let (a, b) = (authority(), authority());
    let mixed = Authority {
        cert_pem: a.cert_pem,
        key_pem: b.key_pem,
    };
    let (ctx, api) = fixtures::context();
    let ctx = ctx.with_secrets([ca_secret(&cluster, &mixed)]);
    let api = api.expect([]);
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    let Some(Refusal::CertificateAuthorityUnavailable { detail }) = step else {
        panic!("{step:?}");
    };
    assert!(
        detail.contains("not the key of its certificate"),
        "{detail}"
    );
    assert!(detail.contains("left as it is"), "{detail}");
    api.done(ctx).await;
}

#[tokio::test]
async fn a_forbidden_write_is_a_refusal_and_a_server_error_an_error() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let (ctx, api) = fixtures::context();
    let api = api.expect([post(SECRETS).reply(Reply::Status(403, "Forbidden"))]);
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    let Some(Refusal::CertificateAuthorityUnavailable { detail }) = step else {
        panic!("{step:?}");
    };
    assert!(
        detail.contains("creating its Secret cassandra-operator/cassandra-ca-uid-c failed"),
        "{detail}"
    );
    api.done(ctx).await;

    let (ctx, api) = fixtures::context();
    let api = api.expect([post(SECRETS).reply(Reply::Status(500, "InternalError"))]);
    let step = ensure_authority(&valid, "db", &ctx).await;
    assert!(
        matches!(step, Err(Error::CreateObject { kind: "Secret", .. })),
        "{step:?}"
    );
    api.done(ctx).await;

    // The binding, without `bind` on the members' ClusterRole.
    let ca = authority();
    let (ctx, api) = fixtures::context();
    let ctx = ctx
        .with_secrets([ca_secret(&cluster, &ca)])
        .with_config_maps([resources::hashed(resources::ca_config_map(
            &valid,
            &ca.cert_pem,
        ))]);
    let api = api.expect([post(BINDINGS).reply(Reply::Status(403, "Forbidden"))]);
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    let Some(Refusal::CertificateAuthorityUnavailable { detail }) = step else {
        panic!("{step:?}");
    };
    assert!(detail.contains("cassandra-member-uid-c"), "{detail}");
    api.done(ctx).await;
}

#[tokio::test]
async fn a_binding_of_the_name_that_is_not_the_clusters_is_refused() {
    let cluster = tls_cluster();
    let valid = ValidCluster::unchecked(&cluster);
    let ca = authority();
    let mut theirs = resources::member_csr_binding(&valid);
    theirs.metadata.labels = None;
    let (ctx, api) = fixtures::context();
    let ctx = ctx
        .with_secrets([ca_secret(&cluster, &ca)])
        .with_config_maps([resources::hashed(resources::ca_config_map(
            &valid,
            &ca.cert_pem,
        ))]);
    let api = api.expect([
        post(BINDINGS).reply(Reply::conflict()),
        Expect::get(BINDING).reply(Reply::ok(&theirs)),
    ]);
    let step = ensure_authority(&valid, "db", &ctx).await.unwrap();
    assert!(
        matches!(&step, Some(Refusal::ForeignObject(o)) if o.kind == "ClusterRoleBinding"),
        "{step:?}"
    );
    api.done(ctx).await;
}
