//! The signer's writes against a mocked API server: a member's request is
//! approved through `/approval`, then signed through `/status`; one
//! approved before a crash is only signed; another's is denied with a
//! Warning Event on the Cluster; a request changed meanwhile is judged
//! again.

use std::collections::BTreeMap;

use crds::v1alpha1::{InternodeEncryption, SecuritySpec, TlsSpec};
use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
use kube::runtime::{reflector, watcher};
use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};
use serde_json::Value;
use x509_parser::pem::Pem;

use super::*;
use crate::approval::POD_NAME_EXTRA;
use crate::certificates::MEMBER_USAGES;
use crate::fixtures::{self, Expect, Reply, TestCluster, member};

const CSR: &str =
    "/apis/certificates.k8s.io/v1/certificatesigningrequests/cassandra.db.c-dc-r-0.abcd";

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

fn request(username: &str, pod: &str, key: &KeyPair) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some("cassandra.db.c-dc-r-0.abcd".into()),
            resource_version: Some("5".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(
                CertificateParams::default()
                    .serialize_request(key)
                    .unwrap()
                    .pem()
                    .unwrap()
                    .into_bytes(),
            ),
            signer_name: SIGNER_NAME.into(),
            usages: Some(MEMBER_USAGES.iter().map(|u| u.to_string()).collect()),
            username: Some(username.into()),
            extra: Some(BTreeMap::from([(
                POD_NAME_EXTRA.to_string(),
                vec![pod.to_string()],
            )])),
            ..Default::default()
        },
        status: None,
    }
}

/// A signer over caches holding the TLS cluster, its member 0's Service
/// and its CA.
fn signer(ctx: Context, cluster: &Cluster, authority: &Authority) -> Arc<Signer> {
    let mut secret = crate::resources::ca_secret(cluster, "cassandra-operator", authority);
    secret.metadata.uid = Some("uid-secret".into());
    let ctx = ctx
        .with_services([member(cluster, "r", 0).build()])
        .with_secrets([secret]);
    let (clusters, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(cluster.clone()));
    Arc::new(Signer {
        ctx: Arc::new(ctx),
        clusters,
        namespace: None,
    })
}

fn condition(body: &Value, type_: &str) -> Value {
    body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Checks that the body carries a chain whose leaf the CA signed, for
/// member 0's address; returns the body as the API server keeps it.
fn signed_by(authority: &Authority) -> impl Fn(&Value) + Send + Sync + 'static {
    let ca = authority.cert_pem.clone();
    move |body: &Value| {
        let chain: ByteString =
            serde_json::from_value(body["status"]["certificate"].clone()).expect("a certificate");
        let pems: Vec<Pem> = Pem::iter_from_buffer(&chain.0)
            .map(|p| p.unwrap())
            .collect();
        assert_eq!(pems.len(), 2, "leaf and CA");
        let root: Vec<Pem> = Pem::iter_from_buffer(ca.as_bytes())
            .map(|p| p.unwrap())
            .collect();
        let root = root[0].parse_x509().unwrap();
        let leaf = pems[0].parse_x509().unwrap();
        leaf.verify_signature(Some(root.public_key()))
            .expect("signed by the cluster's CA");
        assert_eq!(leaf.subject().to_string(), "CN=c-dc-r-0");
        assert_eq!(
            condition(body, "Approved")["status"],
            "True",
            "the approval is kept"
        );
    }
}

#[tokio::test]
async fn a_members_request_is_approved_then_signed_by_its_clusters_ca() {
    let cluster = tls_cluster();
    let authority =
        certificates::make_authority("db", "c", 1_800_000_000, tls::CA_LIFETIME_SECS).unwrap();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let csr = request("system:serviceaccount:db:c-member", "c-dc-r-0", &key);
    let (ctx, api) = fixtures::context();
    let signer = signer(ctx, &cluster, &authority);
    let api = api.expect([
        Expect::replace(&format!("{CSR}/approval"))
            .body_where(|body| {
                assert_eq!(body["metadata"]["resourceVersion"], "5", "guarded");
                let approved = condition(body, "Approved");
                assert_eq!(approved["status"], "True");
                assert_eq!(approved["reason"], APPROVED_REASON);
                assert!(
                    approved["message"]
                        .as_str()
                        .unwrap()
                        .contains("member Pod db/c-dc-r-0 of Cluster c"),
                    "{approved}"
                );
                assert!(body["status"]["certificate"].is_null());
            })
            .reply(Reply::Echo),
        Expect::replace(&format!("{CSR}/status"))
            .body_where(signed_by(&authority))
            .reply(Reply::Echo),
    ]);
    let requeue = reconcile(Arc::new(csr), signer.clone()).await.unwrap();
    assert_eq!(requeue, Requeue::await_change());
    assert_eq!(
        signer
            .ctx
            .metrics
            .member_certificates_signed
            .get_or_create(&ClusterLabels {
                namespace: "db".into(),
                cluster: "c".into()
            })
            .get(),
        1
    );
    let ctx = Arc::try_unwrap(signer).ok().unwrap().ctx;
    api.done(Arc::try_unwrap(ctx).ok().unwrap()).await;
}

#[tokio::test]
async fn a_request_approved_before_a_crash_is_signed_without_a_second_approval() {
    let cluster = tls_cluster();
    let authority =
        certificates::make_authority("db", "c", 1_800_000_000, tls::CA_LIFETIME_SECS).unwrap();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut csr = request("system:serviceaccount:db:c-member", "c-dc-r-0", &key);
    add_condition(&mut csr, "Approved", APPROVED_REASON, "before the crash");
    let (ctx, api) = fixtures::context();
    let signer = signer(ctx, &cluster, &authority);
    let api = api.expect([Expect::replace(&format!("{CSR}/status"))
        .body_where(signed_by(&authority))
        .reply(Reply::Echo)]);
    reconcile(Arc::new(csr), signer.clone()).await.unwrap();
    let ctx = Arc::try_unwrap(signer).ok().unwrap().ctx;
    api.done(Arc::try_unwrap(ctx).ok().unwrap()).await;
}

#[tokio::test]
async fn another_identitys_request_is_denied_and_the_cluster_told() {
    let cluster = tls_cluster();
    let authority =
        certificates::make_authority("db", "c", 1_800_000_000, tls::CA_LIFETIME_SECS).unwrap();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    // The member's ServiceAccount, from a Pod that is no member.
    let csr = request("system:serviceaccount:db:c-member", "intruder", &key);
    let (ctx, api) = fixtures::context();
    let signer = signer(ctx, &cluster, &authority);
    let api = api.expect([
        Expect::replace(&format!("{CSR}/approval"))
            .body_where(|body| {
                let denied = condition(body, "Denied");
                assert_eq!(denied["status"], "True");
                assert_eq!(denied["reason"], "NotAMemberPod");
                assert!(condition(body, "Approved").is_null());
                assert!(body["status"]["certificate"].is_null());
            })
            .reply(Reply::Echo),
        Expect::event("db", "Warning", "MemberCertificateRefused").body_where(|body| {
            assert_eq!(body["reason"], "MemberCertificateRefused");
            assert_eq!(body["related"]["name"], "intruder");
            assert!(
                body["note"].as_str().unwrap().contains("NotAMemberPod"),
                "{body}"
            );
        }),
    ]);
    reconcile(Arc::new(csr), signer.clone()).await.unwrap();
    let ctx = Arc::try_unwrap(signer).ok().unwrap().ctx;
    api.done(Arc::try_unwrap(ctx).ok().unwrap()).await;
}

#[tokio::test]
async fn a_request_changed_meanwhile_is_neither_approved_twice_nor_signed() {
    let cluster = tls_cluster();
    let authority =
        certificates::make_authority("db", "c", 1_800_000_000, tls::CA_LIFETIME_SECS).unwrap();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let csr = request("system:serviceaccount:db:c-member", "c-dc-r-0", &key);
    let (ctx, api) = fixtures::context();
    let signer = signer(ctx, &cluster, &authority);
    let api = api.expect([Expect::replace(&format!("{CSR}/approval"))
        .body_where(|_| {})
        .reply(Reply::conflict())]);
    let requeue = reconcile(Arc::new(csr), signer.clone()).await.unwrap();
    assert_eq!(requeue, Requeue::requeue(Duration::from_secs(1)));
    let ctx = Arc::try_unwrap(signer).ok().unwrap().ctx;
    api.done(Arc::try_unwrap(ctx).ok().unwrap()).await;
}

#[tokio::test]
async fn no_certificate_without_the_clusters_ca() {
    // The CA Secret is neither in the cache nor in the API server (yet).
    let cluster = tls_cluster();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let csr = request("system:serviceaccount:db:c-member", "c-dc-r-0", &key);
    let (ctx, api) = fixtures::context();
    let ctx = ctx.with_services([member(&cluster, "r", 0).build()]);
    let (clusters, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(cluster.clone()));
    let signer = Arc::new(Signer {
        ctx: Arc::new(ctx),
        clusters,
        namespace: None,
    });
    let api = api.expect([Expect::get(
        "/api/v1/namespaces/cassandra-operator/secrets/cassandra-ca-uid-c",
    )
    .reply(Reply::not_found())]);
    let requeue = reconcile(Arc::new(csr), signer.clone()).await.unwrap();
    assert_eq!(requeue, Requeue::requeue(Duration::from_secs(5)));
    let ctx = Arc::try_unwrap(signer).ok().unwrap().ctx;
    api.done(Arc::try_unwrap(ctx).ok().unwrap()).await;
}
