//! The signer's decision, one named case per row: who is issued a
//! certificate, with which names, and every refusal.

use std::collections::BTreeMap;

use crds::v1alpha1::{InternodeEncryption, SecuritySpec, TlsSpec};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};

use super::*;
use crate::fixtures::{TestCluster, member};

const NOW: i64 = 1_800_000_000;

fn settings() -> Settings<'static> {
    Settings {
        namespace: None,
        cluster_domain: "cluster.local",
        lifetime_secs: 3600,
        now: NOW,
    }
}

/// Cluster c in db with TLS (`internode: all`), rack r of 2.
fn tls_cluster() -> Cluster {
    let mut cluster = Cluster::test().rack("r", 2).build();
    cluster.spec.security = Some(SecuritySpec {
        tls: TlsSpec {
            internode: InternodeEncryption::All,
            ..TlsSpec::default()
        },
        authentication: None,
    });
    cluster
}

/// What the caches hold.
#[derive(Default)]
struct Cache {
    clusters: Vec<Cluster>,
    services: Vec<Service>,
    governing: BTreeMap<String, String>,
}

impl Members for Cache {
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        self.clusters
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
            .map(Arc::new)
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services
            .iter()
            .find(|s| {
                s.metadata.namespace.as_deref() == Some(namespace)
                    && s.metadata.name.as_deref() == Some(name)
            })
            .cloned()
            .map(Arc::new)
    }

    fn governing_service(&self, _namespace: &str, statefulset: &str) -> Option<String> {
        self.governing.get(statefulset).cloned()
    }
}

/// The caches of a TLS cluster with members 0 and 1 of rack r.
fn cache() -> Cache {
    let cluster = tls_cluster();
    Cache {
        services: vec![
            member(&cluster, "r", 0).build(),
            member(&cluster, "r", 1).build(),
        ],
        clusters: vec![cluster],
        governing: BTreeMap::new(),
    }
}

fn request_pem(key: &KeyPair) -> String {
    CertificateParams::new(vec!["anything.example".to_string()])
        .unwrap()
        .serialize_request(key)
        .unwrap()
        .pem()
        .unwrap()
}

/// A request as the API server holds it once the sidecar of `pod` created
/// it with its own token: `spec.username` and `spec.extra` are the API
/// server's.
fn csr(username: &str, pod: Option<&str>) -> CertificateSigningRequest {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    CertificateSigningRequest {
        metadata: Default::default(),
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem(&key).into_bytes()),
            signer_name: SIGNER_NAME.to_string(),
            usages: Some(MEMBER_USAGES.iter().map(|u| u.to_string()).collect()),
            username: Some(username.to_string()),
            extra: pod
                .map(|pod| BTreeMap::from([(POD_NAME_EXTRA.to_string(), vec![pod.to_string()])])),
            ..Default::default()
        },
        status: None,
    }
}

const MEMBER_ACCOUNT: &str = "system:serviceaccount:db:c-member";

fn of_member(pod: &str) -> CertificateSigningRequest {
    csr(MEMBER_ACCOUNT, Some(pod))
}

fn with_condition(mut csr: CertificateSigningRequest, type_: &str) -> CertificateSigningRequest {
    csr.status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.to_string(),
            status: "True".to_string(),
            ..Default::default()
        });
    csr
}

/// The refusal's reason, and whether it tells the Cluster.
fn denied(verdict: Verdict) -> (&'static str, String, bool) {
    match verdict {
        Verdict::Deny(d) => (d.reason, d.message, d.cluster.is_some()),
        other => panic!("not denied: {other:?}"),
    }
}

#[test]
fn a_member_of_a_tls_cluster_is_issued_the_names_the_controller_knows() {
    let mut cache = cache();
    cache
        .governing
        .insert("c-dc-r".to_string(), "c-client".to_string());
    let verdict = judge(&of_member("c-dc-r-1"), &cache, &settings());
    let Verdict::Issue(issue) = verdict else {
        panic!("not issued: {verdict:?}");
    };
    assert!(issue.approve);
    assert_eq!(issue.cluster.metadata.name.as_deref(), Some("c"));
    assert_eq!(
        issue.message,
        "member Pod db/c-dc-r-1 of Cluster c, by its ServiceAccount c-member's token bound to that Pod"
    );
    assert_eq!(issue.certificate.pod, "c-dc-r-1");
    assert_eq!(
        issue.certificate.dns_names,
        [
            "c-dc-r-1",
            "c-dc-r-1.db",
            "c-dc-r-1.db.svc",
            "c-dc-r-1.db.svc.cluster.local",
            "c-dc-r-1.c-client.db.svc.cluster.local",
        ],
        "never the request's anything.example"
    );
    assert_eq!(issue.certificate.address.to_string(), "10.96.0.1");
    assert_eq!(issue.certificate.not_after, NOW + 3600);
    assert_eq!(issue.key.kind, "ECDSA P-256");
}

#[test]
fn the_pod_name_is_under_the_statefulsets_governing_service_and_the_cluster_domain() {
    let mut cache = cache();
    cache
        .governing
        .insert("c-dc-r".to_string(), "rook-governing".to_string());
    let settings = Settings {
        cluster_domain: "corp.example",
        ..settings()
    };
    let Verdict::Issue(issue) = judge(&of_member("c-dc-r-0"), &cache, &settings) else {
        panic!("not issued");
    };
    assert_eq!(
        issue.certificate.dns_names.last().unwrap(),
        "c-dc-r-0.rook-governing.db.svc.corp.example"
    );
    // Without the StatefulSet in the cache: the name the builders give it.
    let Verdict::Issue(issue) = judge(&of_member("c-dc-r-0"), &super::tests::cache(), &settings)
    else {
        panic!("not issued");
    };
    assert_eq!(
        issue.certificate.dns_names.last().unwrap(),
        "c-dc-r-0.c-client.db.svc.corp.example"
    );
}

#[test]
fn a_shorter_expiration_asked_for_is_honoured() {
    let mut request = of_member("c-dc-r-0");
    request.spec.expiration_seconds = Some(600);
    let Verdict::Issue(issue) = judge(&request, &cache(), &settings()) else {
        panic!("not issued");
    };
    assert_eq!(issue.certificate.not_after, NOW + 600);
    assert_eq!(issue.certificate.not_before, NOW - 60);
}

#[test]
fn an_approved_request_without_a_certificate_is_signed_without_a_second_approval() {
    // The controller died between its approval and its signature.
    let verdict = judge(
        &with_condition(of_member("c-dc-r-0"), "Approved"),
        &cache(),
        &settings(),
    );
    let Verdict::Issue(issue) = verdict else {
        panic!("not issued: {verdict:?}");
    };
    assert!(!issue.approve);
}

#[test]
fn a_signed_denied_failed_or_foreign_request_is_left_alone() {
    let mut signed = with_condition(of_member("c-dc-r-0"), "Approved");
    signed.status.as_mut().unwrap().certificate = Some(ByteString(b"-----BEGIN".to_vec()));
    let mut other_signer = of_member("c-dc-r-0");
    other_signer.spec.signer_name = "kubernetes.io/kube-apiserver-client".into();
    for (case, request) in [
        ("signed", signed),
        ("denied", with_condition(of_member("c-dc-r-0"), "Denied")),
        ("failed", with_condition(of_member("c-dc-r-0"), "Failed")),
        ("another signer's", other_signer),
    ] {
        assert!(
            matches!(
                judge(&request, &cache(), &settings()),
                Verdict::LeaveAlone(_)
            ),
            "{case}"
        );
    }
}

#[test]
fn a_request_of_a_namespace_another_controller_watches_is_left_alone() {
    let settings = Settings {
        namespace: Some("elsewhere"),
        ..settings()
    };
    assert!(matches!(
        judge(&of_member("c-dc-r-0"), &cache(), &settings),
        Verdict::LeaveAlone(_)
    ));
    let settings = Settings {
        namespace: Some("db"),
        ..settings
    };
    assert!(matches!(
        judge(&of_member("c-dc-r-0"), &cache(), &settings),
        Verdict::Issue(_)
    ));
}

#[test]
fn a_user_that_is_no_service_account_is_denied() {
    for user in ["alice", "system:node:n1", "system:serviceaccount:db"] {
        let (reason, message, tells) = denied(judge(&csr(user, None), &cache(), &settings()));
        assert_eq!(reason, "NotAServiceAccount", "{user}");
        assert!(message.contains(user), "{message}");
        assert!(!tells, "no Cluster to tell");
    }
}

#[test]
fn another_service_account_of_the_namespace_is_denied() {
    for account in [
        "system:serviceaccount:db:default",
        "system:serviceaccount:db:c-members",
        // The member ServiceAccount of a Cluster that does not exist.
        "system:serviceaccount:db:gone-member",
    ] {
        let (reason, message, tells) = denied(judge(
            &csr(account, Some("c-dc-r-0")),
            &cache(),
            &settings(),
        ));
        assert_eq!(reason, "NotAMemberServiceAccount", "{account}");
        assert!(
            message.contains("no Cluster's member ServiceAccount"),
            "{message}"
        );
        assert!(!tells);
    }
}

#[test]
fn the_member_service_account_of_another_namespace_is_denied() {
    // c-member of namespace other, where no Cluster c is: the Pod name is
    // that of a member of db's c, which it is not.
    let (reason, _, tells) = denied(judge(
        &csr("system:serviceaccount:other:c-member", Some("c-dc-r-0")),
        &cache(),
        &settings(),
    ));
    assert_eq!(reason, "NotAMemberServiceAccount");
    assert!(!tells);
    // With a Cluster c in other too, db's member Service does not make
    // other's Pod of that name a member: other's caches are read, where no
    // such Service is (yet).
    let mut cache = cache();
    let mut elsewhere = tls_cluster();
    elsewhere.metadata.namespace = Some("other".into());
    elsewhere.metadata.uid = Some("uid-other-c".into());
    cache.clusters.push(elsewhere);
    let verdict = judge(
        &csr("system:serviceaccount:other:c-member", Some("c-dc-r-0")),
        &cache,
        &settings(),
    );
    assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
    let (reason, _, tells) = denied(judge(
        &csr("system:serviceaccount:other:c-member", Some("intruder")),
        &cache,
        &settings(),
    ));
    assert_eq!(reason, "NotAMemberPod");
    assert!(tells);
}

#[test]
fn a_cluster_without_tls_gets_no_certificates() {
    let mut cache = cache();
    cache.clusters[0].spec.security = None;
    let (reason, message, tells) = denied(judge(&of_member("c-dc-r-0"), &cache, &settings()));
    assert_eq!(reason, "TlsNotEnabled");
    assert!(message.contains("db/c"), "{message}");
    assert!(tells, "one of its members asked: the Cluster is told");
}

#[test]
fn a_token_bound_to_no_pod_is_denied() {
    let (reason, _, tells) = denied(judge(&csr(MEMBER_ACCOUNT, None), &cache(), &settings()));
    assert_eq!(reason, "NotBoundToAPod");
    assert!(tells);
    let mut two = of_member("c-dc-r-0");
    two.spec
        .extra
        .as_mut()
        .unwrap()
        .get_mut(POD_NAME_EXTRA)
        .unwrap()
        .push("c-dc-r-1".into());
    assert_eq!(
        denied(judge(&two, &cache(), &settings())).0,
        "NotBoundToAPod"
    );
}

#[test]
fn a_pod_that_is_no_member_is_denied() {
    let mut cache = cache();
    let cluster = tls_cluster();
    // A Service of the member's name that the Cluster does not own, one
    // without the cluster's label, and the client Service.
    cache
        .services
        .push(member(&cluster, "r", 5).foreign().build());
    let mut unlabelled = member(&cluster, "r", 6).build();
    unlabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(crds::labels::CLUSTER.into(), "d".into());
    cache.services.push(unlabelled);
    let mut client = member(&cluster, "r", 7).build();
    client.metadata.name = Some("c-client".into());
    cache.services.push(client);
    for (pod, why) in [
        ("intruder", "no member Service intruder exists"),
        ("c-dc-r-5", "is not owned by the Cluster"),
        ("c-dc-r-6", "does not carry the cluster's labels"),
        ("c-client", "is not a member name of rack r"),
    ] {
        let (reason, message, tells) = denied(judge(&of_member(pod), &cache, &settings()));
        assert_eq!(reason, "NotAMemberPod", "{pod}");
        assert!(message.contains(why), "{pod}: {message}");
        assert!(tells);
    }
}

#[test]
fn a_member_named_pod_whose_service_the_cache_lacks_is_judged_again_later() {
    let verdict = judge(&of_member("c-dc-r-9"), &cache(), &settings());
    assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
    let mut cache = cache();
    cache.services[0].spec.as_mut().unwrap().cluster_ip = None;
    let verdict = judge(&of_member("c-dc-r-0"), &cache, &settings());
    assert!(
        matches!(verdict, Verdict::Retry(_)),
        "no ClusterIP yet: {verdict:?}"
    );
}

#[test]
fn a_request_whose_signature_does_not_verify_is_denied() {
    let mut request = of_member("c-dc-r-0");
    // One byte of what the requester signed changed (a letter of the name
    // it asks for): still PKCS#10, no longer signed by its key.
    let mut der = pem::parse(&request.spec.request.0)
        .unwrap()
        .contents()
        .to_vec();
    let at = der
        .windows(b"anything".len())
        .position(|w| w == b"anything")
        .unwrap();
    der[at] = b'e';
    request.spec.request =
        ByteString(pem::encode(&pem::Pem::new("CERTIFICATE REQUEST", der)).into_bytes());
    let (reason, message, tells) = denied(judge(&request, &cache(), &settings()));
    assert_eq!(reason, "InvalidRequest");
    assert!(
        message.contains("self-signature does not verify"),
        "{message}"
    );
    assert!(tells);
    request.spec.request = ByteString(b"garbage".to_vec());
    assert_eq!(
        denied(judge(&request, &cache(), &settings())).0,
        "InvalidRequest"
    );
}

#[test]
fn a_key_we_do_not_accept_is_denied() {
    let mut request = of_member("c-dc-r-0");
    let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    request.spec.request = ByteString(request_pem(&ed).into_bytes());
    let (reason, message, _) = denied(judge(&request, &cache(), &settings()));
    assert_eq!(reason, "KeyRefused");
    assert!(message.contains("P-256"), "{message}");
}

#[test]
fn other_usages_are_denied() {
    for usages in [
        vec!["digital signature", "key encipherment", "server auth"],
        vec![
            "digital signature",
            "key encipherment",
            "server auth",
            "client auth",
            "cert sign",
        ],
        vec!["any"],
        vec![],
    ] {
        let mut request = of_member("c-dc-r-0");
        request.spec.usages = Some(usages.iter().map(|u| u.to_string()).collect());
        let (reason, _, tells) = denied(judge(&request, &cache(), &settings()));
        assert_eq!(reason, "UnexpectedUsages", "{usages:?}");
        assert!(tells);
    }
    // The same four in another order are the member usages.
    let mut request = of_member("c-dc-r-0");
    request.spec.usages = Some(
        [
            "client auth",
            "server auth",
            "key encipherment",
            "digital signature",
        ]
        .iter()
        .map(|u| u.to_string())
        .collect(),
    );
    assert!(matches!(
        judge(&request, &cache(), &settings()),
        Verdict::Issue(_)
    ));
}

#[test]
fn an_approved_request_that_no_longer_passes_fails_instead_of_being_denied() {
    // Approved (by hand, or by the controller for a member whose Cluster
    // has gone since): an approval cannot be taken back.
    let request = with_condition(of_member("intruder"), "Approved");
    match judge(&request, &cache(), &settings()) {
        Verdict::Fail(d) => assert_eq!(d.reason, "NotAMemberPod"),
        other => panic!("{other:?}"),
    }
}
