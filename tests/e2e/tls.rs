//! A Cluster with TLS, end to end, with the controller as the operator's
//! ServiceAccount: its certificate authority is made in the operator's
//! namespace only (no Secret of the Cluster's namespace holds a key), its
//! certificate published in the ConfigMap `<cluster>-ca`, and its members'
//! ServiceAccount bound to the ClusterRole that lets them ask. A request
//! made with a running member's own projected token is approved and signed
//! by that CA, with the names the controller knows (never the request's);
//! one made with the members' ServiceAccount but a token bound to no Pod,
//! and one made by an administrator, are denied with their reasons, and
//! the Cluster is told. Deleting a Cluster deletes its CA Secret and its
//! binding, which no owner reference can reach, and leaves another
//! Cluster's alone. The controller's calls are all allowed, and the TLS
//! rules of its ClusterRole are used.

use std::collections::BTreeSet;

use crds::contract::tls::{
    CA_BUNDLE_KEY, CA_NAMESPACE_LABEL, MEMBER_CSR_CLUSTER_ROLE, SIGNER_NAME, ca_config_map_name,
    ca_secret_name, member_csr_binding_name, member_dns_names,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use testworld::harness::{OPERATOR_ACCOUNT, operator_user};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::common::FAKE_WORLDS;
use crate::member_token::{client_with, projected_token};
use crate::scenario::{Scenario, cluster, secs, setup};

/// The usages a member asks for.
const USAGES: [&str; 4] = [
    "digital signature",
    "key encipherment",
    "server auth",
    "client auth",
];

/// A request of a fresh ECDSA P-256 key, asking for names of its own that
/// the certificate must not carry.
fn request(name: &str) -> CertificateSigningRequest {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let pem = rcgen::CertificateParams::new(vec!["evil.example.com".to_string()])
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: SIGNER_NAME.into(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// The condition of `type_` True on a request: (reason, message).
fn verdict(csr: &CertificateSigningRequest, type_: &str) -> Option<(String, String)> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Waits until request `name` is decided: signed (its chain), or denied.
async fn decided(
    s: &Scenario,
    requests: &Api<CertificateSigningRequest>,
    name: &str,
) -> CertificateSigningRequest {
    s.until(&format!("request {name} decided"), secs(60), || async {
        let csr = requests.get(name).await.unwrap();
        let signed = csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_some_and(|c| !c.0.is_empty());
        (signed || verdict(&csr, "Denied").is_some()).then_some(csr)
    })
    .await
}

fn pems(bytes: &[u8]) -> Vec<Pem> {
    Pem::iter_from_buffer(bytes).map(|p| p.unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_clusters_authority_signs_its_members_requests_and_no_one_elses() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup()
        .controller_args(&["--member-certificate-lifetime", "20m"])
        .start()
        .await;
    let tls = json!({"security": {"tls": {"internode": "all"}}});
    s.create(
        &cluster("c")
            .version("4.1.8")
            .rack("r", 1)
            .with_spec(tls.clone()),
    )
    .await;
    // A second one, without members, deleted at the end (deleting c would
    // delete member Services of nodes in the ring, which the safety watch
    // rightly refuses).
    s.create(&cluster("d").version("4.1.8").rack("r", 0).with_spec(tls))
        .await;
    let client = s.client();
    let uid = s.clusters().get("c").await.unwrap().metadata.uid.unwrap();
    let gone_uid = s.clusters().get("d").await.unwrap().metadata.uid.unwrap();
    let (operator_namespace, _) = OPERATOR_ACCOUNT;

    // The CA: in the operator's namespace, and no other.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), operator_namespace);
    let secret = s
        .until("the cluster's CA Secret", secs(60), || async {
            secrets.get_opt(&ca_secret_name(&uid)).await.unwrap()
        })
        .await;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(CA_NAMESPACE_LABEL).map(String::as_str),
        Some("db")
    );
    assert_eq!(
        labels.get(crds::labels::CLUSTER).map(String::as_str),
        Some("c")
    );
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.clone().unwrap_or_default();
    let ca_pem = String::from_utf8(data["tls.crt"].0.clone()).unwrap();
    assert!(String::from_utf8_lossy(&data["tls.key"].0).contains("PRIVATE KEY"));
    let d_secret = s
        .until("the second cluster's CA Secret", secs(60), || async {
            secrets.get_opt(&ca_secret_name(&gone_uid)).await.unwrap()
        })
        .await;
    assert_ne!(
        d_secret.data.unwrap_or_default()["tls.key"],
        data["tls.key"],
        "each cluster its own authority"
    );
    let everywhere = Api::<Secret>::all(client.clone())
        .list(&ListParams::default().labels(CA_NAMESPACE_LABEL))
        .await
        .unwrap();
    assert_eq!(
        everywhere
            .items
            .iter()
            .map(|s| s.metadata.namespace.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        [operator_namespace, operator_namespace],
        "one CA per cluster, in the operator's namespace"
    );
    for other in s
        .api::<Secret>()
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        for value in other.data.unwrap_or_default().values() {
            assert!(
                !String::from_utf8_lossy(&value.0).contains("PRIVATE KEY"),
                "a Secret of the Cluster's namespace holds a key: {:?}",
                other.metadata.name
            );
        }
    }

    // Its certificate, published for members and clients.
    let config_maps = s.api::<ConfigMap>();
    let published = s
        .until("the CA ConfigMap", secs(30), || async {
            config_maps.get_opt(&ca_config_map_name("c")).await.unwrap()
        })
        .await;
    assert_eq!(
        published.data.unwrap_or_default().get(CA_BUNDLE_KEY),
        Some(&ca_pem)
    );
    let owner = &published.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Cluster", uid.as_str())
    );

    // The members may ask, and read that ConfigMap.
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = bindings
        .get(&member_csr_binding_name(&uid))
        .await
        .expect("the members' binding, made before their StatefulSet");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, MEMBER_CSR_CLUSTER_ROLE);
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "c-member", Some("db"))
    );
    let role = s.api::<Role>().get("c-member").await.unwrap();
    assert!(
        role.rules.unwrap_or_default().iter().any(|r| {
            r.resources.as_deref() == Some(&["configmaps".to_string()])
                && r.resource_names.as_deref() == Some(&[ca_config_map_name("c")])
        }),
        "the members' Role names the CA ConfigMap"
    );

    // A request made with member 0's own token: approved and signed, with
    // the controller's names for it.
    let token = s
        .until("member 0 running with its token", secs(120), || async {
            projected_token(s.work(), "c-dc-r-0")
        })
        .await;
    let member = client_with(&s, &token).await;
    let as_member: Api<CertificateSigningRequest> = Api::all(member);
    as_member
        .create(&PostParams::default(), &request("e2e-member-0"))
        .await
        .unwrap();
    let signed = decided(&s, &as_member, "e2e-member-0").await;
    let (reason, message) = verdict(&signed, "Approved").expect("approved");
    assert_eq!(reason, "MemberIdentityVerified");
    assert!(
        message.contains("member Pod db/c-dc-r-0 of Cluster c"),
        "{message}"
    );
    let chain = pems(&signed.status.unwrap().certificate.unwrap().0);
    assert_eq!(chain.len(), 2, "the member's certificate, then the CA's");
    let leaf = chain[0].parse_x509().unwrap();
    let ca = pems(ca_pem.as_bytes());
    let ca = ca[0].parse_x509().unwrap();
    leaf.verify_signature(Some(ca.public_key()))
        .expect("signed by the cluster's CA");
    assert_eq!(leaf.subject().to_string(), "CN=c-dc-r-0");
    let address = s
        .api::<Service>()
        .get("c-dc-r-0")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let mut dns = BTreeSet::new();
    let mut ips = Vec::new();
    for name in &leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
    {
        match name {
            GeneralName::DNSName(n) => {
                dns.insert(n.to_string());
            }
            GeneralName::IPAddress(ip) => ips.push(ip.to_vec()),
            other => panic!("an unexpected name {other:?}"),
        }
    }
    assert_eq!(
        dns,
        member_dns_names("c-dc-r-0", "db", "c-client", "cluster.local")
            .into_iter()
            .collect::<BTreeSet<_>>(),
        "the controller's names, not the request's"
    );
    let address: std::net::Ipv4Addr = address.parse().unwrap();
    assert_eq!(ips, [address.octets().to_vec()], "the member's ClusterIP");
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    let lifetime = leaf.validity().not_after.timestamp() - leaf.validity().not_before.timestamp();
    assert_eq!(lifetime, 20 * 60 + 60, "20m, from a minute back");

    // The member's sidecar asked too, and was signed.
    let all_requests: Api<CertificateSigningRequest> = Api::all(client.clone());
    s.until("the sidecar's own request signed", secs(60), || async {
        all_requests
            .list(&ListParams::default().labels(&format!("{}=c", crds::labels::CLUSTER)))
            .await
            .unwrap()
            .items
            .iter()
            .any(|csr| {
                csr.status
                    .as_ref()
                    .and_then(|s| s.certificate.as_ref())
                    .is_some_and(|c| !c.0.is_empty())
            })
    })
    .await;

    // The members' ServiceAccount with a token bound to no Pod, and an
    // administrator: denied, each with its reason.
    let unbound = s.sim().create_token("db", "c-member", 600).unwrap();
    let unbound: Api<CertificateSigningRequest> = Api::all(client_with(&s, &unbound).await);
    unbound
        .create(&PostParams::default(), &request("e2e-unbound"))
        .await
        .unwrap();
    all_requests
        .create(&PostParams::default(), &request("e2e-admin"))
        .await
        .unwrap();
    for (name, reason) in [
        ("e2e-unbound", "NotBoundToAPod"),
        ("e2e-admin", "NotAServiceAccount"),
    ] {
        let csr = decided(&s, &all_requests, name).await;
        let (got, message) = verdict(&csr, "Denied").unwrap_or_else(|| panic!("{name} denied"));
        assert_eq!(got, reason, "{name}: {message}");
        assert!(
            csr.status.unwrap().certificate.is_none(),
            "{name}: no certificate"
        );
    }
    let events: Api<Event> = s.api();
    s.until(
        "a Warning Event on the Cluster for its member's refused request",
        secs(30),
        || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("MemberCertificateRefused")
                        && e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("c")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("NotBoundToAPod"))
                })
        },
    )
    .await;
    assert!(
        s.metric("cassandra_operator_member_certificates_signed_total")
            .is_some_and(|n| n >= 2.0),
        "the test's request and the sidecar's"
    );

    // Deleting a Cluster deletes what no owner reference reaches; the
    // other Cluster keeps its own.
    s.until("the second cluster's binding", secs(30), || async {
        bindings
            .get_opt(&member_csr_binding_name(&gone_uid))
            .await
            .unwrap()
    })
    .await;
    s.clusters()
        .delete("d", &DeleteParams::default())
        .await
        .unwrap();
    s.until(
        "the deleted cluster's CA Secret and binding deleted",
        secs(60),
        || async {
            let secret = secrets.get_opt(&ca_secret_name(&gone_uid)).await.unwrap();
            let binding = bindings
                .get_opt(&member_csr_binding_name(&gone_uid))
                .await
                .unwrap();
            match (secret, binding) {
                (None, None) => Ok(()),
                (secret, binding) => Err(format!(
                    "secret left: {}, binding left: {}",
                    secret.is_some(),
                    binding.is_some()
                )),
            }
        },
    )
    .await;
    assert!(
        secrets
            .get_opt(&ca_secret_name(&uid))
            .await
            .unwrap()
            .is_some()
            && bindings
                .get_opt(&member_csr_binding_name(&uid))
                .await
                .unwrap()
                .is_some(),
        "a Cluster that exists keeps its CA and binding"
    );

    // Every call of the controller was allowed; its TLS rules were used.
    let log = s.sim().requests();
    let user = operator_user();
    let denied: Vec<String> = log
        .iter()
        .filter(|r| r.user == user && r.code == 403)
        .map(|r| format!("{} {} {}", r.verb, r.method, r.path))
        .collect();
    assert!(denied.is_empty(), "refused:\n{}", denied.join("\n"));
    let used = |group: &str, resource: &str, subresource: &str, verb: &str| {
        log.iter().any(|r| {
            r.user == user
                && r.group == group
                && r.resource == resource
                && r.subresource == subresource
                && r.verb == verb
                && r.code < 400
        })
    };
    for (group, resource, subresource, verb) in [
        ("", "secrets", "", "create"),
        ("", "secrets", "", "delete"),
        ("", "configmaps", "", "create"),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "",
            "create",
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "",
            "delete",
        ),
        (
            "certificates.k8s.io",
            "certificatesigningrequests",
            "",
            "watch",
        ),
        (
            "certificates.k8s.io",
            "certificatesigningrequests",
            "approval",
            "update",
        ),
        (
            "certificates.k8s.io",
            "certificatesigningrequests",
            "status",
            "update",
        ),
    ] {
        assert!(
            used(group, resource, subresource, verb),
            "the controller never made {verb} {group}/{resource}/{subresource}"
        );
    }
}

/// A running cluster of fake 4.1 members in clear text is moved to
/// internode TLS with optional client TLS by a change of its spec: the
/// template takes the steps in order, each a roll, and every member ends
/// on TLS only, with its own certificate (the same move on real Cassandra,
/// under a writer: `real_tls`, a soak test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_cluster_is_moved_to_tls_a_step_at_a_time() {
    use k8s_openapi::api::core::v1::Pod;
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().start().await;
    s.create(&cluster("m").version("4.1.8").rack("r", 3)).await;
    s.until_ready("m", 3, secs(180)).await;
    s.patch_cluster(
        "m",
        json!({"spec": {"security": {"tls": {"internode": "all", "client": "optional"}}}}),
    )
    .await;
    let seen = crate::real_tls::until_moved(&s, "m-dc-r", 3, secs(600)).await;
    assert_eq!(seen, crate::real_tls::STEPS, "the steps, in order");
    s.until_ready("m", 3, secs(120)).await;
    // Each member runs the last step: its configuration says TLS only
    // between members, and its key and certificate are in its TLS volume.
    let pods: Api<Pod> = s.api();
    for ordinal in 0..3 {
        let name = format!("m-dc-r-{ordinal}");
        let uid = pods.get(&name).await.unwrap().metadata.uid.unwrap();
        let volumes = s
            .work()
            .join("pods")
            .join(format!("db_{name}_{uid}"))
            .join("volumes");
        let yaml = std::fs::read_to_string(volumes.join("shared/conf/cassandra.yaml")).unwrap();
        assert!(
            yaml.contains(
                "server_encryption_options:\n  internode_encryption: all\n  optional: false\n"
            ),
            "{name}: {yaml}"
        );
        assert!(
            yaml.contains("client_encryption_options:\n  enabled: true\n  optional: true\n"),
            "{name}"
        );
        for file in ["member.pem", "ca.crt"] {
            assert!(
                volumes.join("tls").join(file).is_file(),
                "{name}: no {file}"
            );
        }
    }
}
