//! kubesim serves CertificateSigningRequests (`certificates.k8s.io/v1`)
//! as kube-apiserver 1.33 does, for members' TLS certificates: a member's
//! request records who asked (its ServiceAccount, the Pod and Node its
//! token is bound to) whatever it claims; `/approval` needs `approve` and
//! `/status` `sign` on the request's signer; the spec never changes; the
//! request must be a signed PKCS#10 and the certificate PEM — with the
//! real kube client, and the real kubectl 1.33 for the table and
//! `kubectl certificate approve`.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use rcgen::{CertificateParams, DnType, Issuer, KeyPair};
use serde_json::{Value, json};
use std::time::Duration;
use testworld::kubesim::store::{Subresource, Target, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{Kubectl, api_error, client_for, create, http_post};

/// The operator's signer of members' certificates.
const SIGNER: &str = "cassandra.rook.io/member";
const RBAC: &str = "rbac.authorization.k8s.io";

/// A ServiceAccount `name` in `default` with a ClusterRole `name` of
/// `rules` (requests are cluster-scoped).
fn account_with_cluster_role(sim: &KubeSim, name: &str, rules: Value) {
    create(
        sim,
        "",
        "serviceaccounts",
        Some("default"),
        json!({"metadata": {"name": name}}),
    );
    create(
        sim,
        RBAC,
        "clusterroles",
        None,
        json!({"metadata": {"name": name}, "rules": rules}),
    );
    create(
        sim,
        RBAC,
        "clusterrolebindings",
        None,
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    );
}

/// Replaces the rules of the ClusterRole `name`.
fn set_cluster_role(sim: &KubeSim, name: &str, rules: Value) {
    let t = Target::new(RBAC, "v1", "clusterroles", None);
    let mut role = sim.store().get(&t, name).expect("the role exists");
    role["rules"] = rules;
    sim.store()
        .update(&t, name, role, Subresource::Main, &WriteOptions::default())
        .expect("the role is replaced");
}

/// A client for the ServiceAccount `name` of `default` (a token without a
/// Pod, as `kubectl create token` makes it).
async fn client_as(sim: &KubeSim, name: &str) -> Client {
    let token = sim.create_token("default", name, 3600).expect("a token");
    client_for(&sim.kubeconfig_with_token(&token)).await
}

/// A member's request for its key, as a sidecar makes it (PEM).
fn member_request(key: &KeyPair, member: &str) -> String {
    let mut params = CertificateParams::new(vec![format!("{member}.cassandra.svc")]).unwrap();
    params.distinguished_name.push(DnType::CommonName, member);
    params
        .serialize_request(key)
        .expect("the request is signed")
        .pem()
        .expect("PEM")
}

/// A request `name` for the member's signer.
fn csr(name: &str, pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(vec![
                "digital signature".into(),
                "key encipherment".into(),
                "server auth".into(),
                "client auth".into(),
            ]),
            expiration_seconds: Some(86_400),
            ..Default::default()
        },
        status: None,
    }
}

/// A certificate for `key` from a CA of the operator's (PEM).
fn issued_for(key: &KeyPair, member: &str) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "members");
    let issuer = Issuer::new(ca, ca_key);
    CertificateParams::new(vec![format!("{member}.cassandra.svc")])
        .unwrap()
        .signed_by(key, &issuer)
        .expect("signed")
        .pem()
}

fn condition(kind: &str, reason: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": reason, "message": "by the test"})
}

fn approval(conditions: Value) -> Patch<Value> {
    Patch::Merge(json!({"status": {"conditions": conditions}}))
}

fn types(csr: &CertificateSigningRequest) -> Vec<String> {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .map(|c| c.type_.clone())
        .collect()
}

fn certificate(csr: &CertificateSigningRequest) -> Option<Vec<u8>> {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map(|c| c.0.clone())
}

/// The status the signer writes: the request's status with `pem` as the
/// certificate.
fn with_certificate(csr: &CertificateSigningRequest, pem: &[u8]) -> CertificateSigningRequest {
    let mut signed = csr.clone();
    signed
        .status
        .get_or_insert_with(Default::default)
        .certificate = Some(ByteString(pem.to_vec()));
    signed
}

async fn started() -> (KubeSim, Api<CertificateSigningRequest>) {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let admin = client_for(&sim.kubeconfig()).await;
    (sim, Api::all(admin))
}

#[tokio::test]
async fn a_member_request_records_who_asked_whatever_it_claims() {
    let (sim, admin) = started().await;
    account_with_cluster_role(
        &sim,
        "member",
        json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "list", "watch"]}]),
    );
    let node = create(&sim, "", "nodes", None, json!({"metadata": {"name": "n1"}}));
    let pod = create(
        &sim,
        "",
        "pods",
        Some("default"),
        json!({"metadata": {"name": "c-0"}, "spec": {"serviceAccountName": "member",
            "nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}),
    );
    let pod_uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    // The member's token is the kubelet's: bound to its Pod (and Node).
    let token_request = http_post(
        "/api/v1/namespaces/default/serviceaccounts/member/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "c-0", "uid": pod_uid}}}),
    );
    let tr: Value = serde_json::from_str(
        &admin
            .clone()
            .into_client()
            .request_text(token_request)
            .await
            .unwrap(),
    )
    .unwrap();
    let member =
        client_for(&sim.kubeconfig_with_token(tr["status"]["token"].as_str().unwrap())).await;
    let requests: Api<CertificateSigningRequest> = Api::all(member);

    let key = KeyPair::generate().unwrap();
    let mut claimed = csr("c-0", &member_request(&key, "c-0"));
    claimed.spec.username = Some("system:admin".into());
    claimed.spec.uid = Some("0".into());
    claimed.spec.groups = Some(vec!["system:masters".into()]);
    claimed.spec.extra = Some([("scopes".to_string(), vec!["all".to_string()])].into());
    claimed.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        certificate: Some(ByteString(issued_for(&key, "c-0").into_bytes())),
    });
    let made = requests
        .create(&PostParams::default(), &claimed)
        .await
        .expect("a member may ask");

    let sa = sim
        .store()
        .get(
            &Target::new("", "v1", "serviceaccounts", Some("default")),
            "member",
        )
        .unwrap();
    let spec = &made.spec;
    assert_eq!(
        spec.username.as_deref(),
        Some("system:serviceaccount:default:member")
    );
    assert_eq!(spec.uid.as_deref(), sa["metadata"]["uid"].as_str());
    assert_eq!(
        spec.groups.clone().unwrap(),
        vec![
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
    let extra = spec.extra.clone().unwrap();
    let one = |k: &str| {
        extra
            .get(&format!("authentication.kubernetes.io/{k}"))
            .cloned()
    };
    assert_eq!(one("pod-name"), Some(vec!["c-0".to_string()]));
    assert_eq!(one("pod-uid"), Some(vec![pod_uid]));
    assert_eq!(one("node-name"), Some(vec!["n1".to_string()]));
    assert_eq!(
        one("node-uid"),
        Some(vec![node["metadata"]["uid"].as_str().unwrap().to_string()])
    );
    assert!(
        one("credential-id").is_some_and(|v| v[0].starts_with("JTI=")),
        "{extra:?}"
    );
    assert!(!extra.contains_key("scopes"), "{extra:?}");
    assert_eq!(spec.signer_name, SIGNER);
    assert_eq!(spec.expiration_seconds, Some(86_400));
    assert_eq!(
        made.status,
        Some(CertificateSigningRequestStatus::default()),
        "a new request is neither approved nor issued"
    );
    assert_eq!(requests.get("c-0").await.unwrap().spec, made.spec);

    // The member may neither approve nor sign its own request.
    let e = api_error(
        requests
            .patch_approval(
                "c-0",
                &PatchParams::default(),
                &approval(json!([condition("Approved", "Self")])),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"certificatesigningrequests.certificates.k8s.io "c-0" is forbidden: User "system:serviceaccount:default:member" cannot patch resource "certificatesigningrequests/approval" in API group "certificates.k8s.io" at the cluster scope"#
        )
    );
    let signed = with_certificate(&made, issued_for(&key, "c-0").as_bytes());
    let e = api_error(
        requests
            .replace_status("c-0", &PostParams::default(), &signed)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"certificatesigningrequests.certificates.k8s.io "c-0" is forbidden: User "system:serviceaccount:default:member" cannot update resource "certificatesigningrequests/status" in API group "certificates.k8s.io" at the cluster scope"#
        )
    );
    assert_eq!(
        types(&admin.get("c-0").await.unwrap()),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn approving_needs_approve_on_the_signer_besides_the_approval_subresource() {
    let (sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    admin
        .create(
            &PostParams::default(),
            &csr("c-0", &member_request(&key, "c-0")),
        )
        .await
        .unwrap();
    let may_approve = json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update", "patch"]},
    ]);
    account_with_cluster_role(&sim, "approver", may_approve.clone());
    let approver: Api<CertificateSigningRequest> = Api::all(client_as(&sim, "approver").await);
    let approve = approval(json!([condition("Approved", "MemberOfCluster")]));

    let e = api_error(
        approver
            .patch_approval("c-0", &PatchParams::default(), &approve)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (
            403,
            "Forbidden",
            r#"certificatesigningrequests.certificates.k8s.io "c-0" is forbidden: user not permitted to approve requests with signerName "cassandra.rook.io/member""#
        )
    );
    // The plugin asked for the signer, then for its domain.
    let checks: Vec<(String, String, String, String, u16)> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "ADMISSION" && r.user == "system:serviceaccount:default:approver")
        .map(|r| (r.path, r.verb, r.resource, r.name, r.code))
        .collect();
    let check = |name: &str| {
        (
            "CertificateApproval".to_string(),
            "approve".to_string(),
            "signers".to_string(),
            name.to_string(),
            403,
        )
    };
    assert_eq!(checks, vec![check(SIGNER), check("cassandra.rook.io/*")]);

    // `approve` on every signer of the domain.
    let mut rules = may_approve.as_array().unwrap().clone();
    rules.push(
        json!({"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
        "verbs": ["approve"], "resourceNames": ["cassandra.rook.io/*"]}),
    );
    set_cluster_role(&sim, "approver", json!(rules));
    let approved = approver
        .patch_approval("c-0", &PatchParams::default(), &approve)
        .await
        .expect("the approver may approve the domain's requests");
    assert_eq!(types(&approved), vec!["Approved"]);
    let c = &approved
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()[0];
    assert_eq!(c.reason.as_deref(), Some("MemberOfCluster"));
    assert!(
        c.last_update_time.is_some() && c.last_transition_time.is_some(),
        "the server stamps the condition: {c:?}"
    );

    // Approved and Denied exclude each other, and a decision stays.
    let e = api_error(
        approver
            .patch_approval(
                "c-0",
                &PatchParams::default(),
                &approval(json!([
                    condition("Approved", "A"),
                    condition("Denied", "B")
                ])),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        r#"CertificateSigningRequest.certificates.k8s.io "c-0" is invalid: status.conditions[1].type: Invalid value: "Denied": Approved and Denied conditions are mutually exclusive"#
    );
    let e = api_error(
        approver
            .patch_approval("c-0", &PatchParams::default(), &approval(json!([])))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            422,
            r#"CertificateSigningRequest.certificates.k8s.io "c-0" is invalid: status.conditions: Forbidden: updates may not remove a condition of type "Approved""#
        )
    );
    // A replace of /approval (as `kubectl certificate approve` does it)
    // changes the conditions and nothing else.
    let mut current = approver.get("c-0").await.unwrap();
    current.spec.signer_name = "example.com/other".into();
    current
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(condition("Failed", "Expired")).unwrap());
    current.status.as_mut().unwrap().certificate = Some(ByteString(b"not issued".to_vec()));
    let replaced = approver
        .replace_subresource("approval", "c-0", &PostParams::default(), &current)
        .await
        .expect("conditions through /approval");
    assert_eq!(types(&replaced), vec!["Approved", "Failed"]);
    assert_eq!(replaced.spec.signer_name, SIGNER);
    assert_eq!(certificate(&replaced), None);
}

#[tokio::test]
async fn signing_needs_sign_on_the_signer_and_a_pem_certificate() {
    let (sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    admin
        .create(
            &PostParams::default(),
            &csr("c-0", &member_request(&key, "c-0")),
        )
        .await
        .unwrap();
    let made = admin
        .patch_approval(
            "c-0",
            &PatchParams::default(),
            &approval(json!([condition("Approved", "MemberOfCluster")])),
        )
        .await
        .unwrap();
    let may_write_status = json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/status"], "verbs": ["update", "patch"]},
    ]);
    account_with_cluster_role(&sim, "signer", may_write_status.clone());
    let signer: Api<CertificateSigningRequest> = Api::all(client_as(&sim, "signer").await);
    let pem = issued_for(&key, "c-0");

    let e = api_error(
        signer
            .replace_status(
                "c-0",
                &PostParams::default(),
                &with_certificate(&made, pem.as_bytes()),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"certificatesigningrequests.certificates.k8s.io "c-0" is forbidden: user not permitted to sign requests with signerName "cassandra.rook.io/member""#
        )
    );
    let mut rules = may_write_status.as_array().unwrap().clone();
    rules.push(
        json!({"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
        "verbs": ["sign"], "resourceNames": [SIGNER]}),
    );
    set_cluster_role(&sim, "signer", json!(rules));

    // Not PEM, or PEM of something else than certificates: refused.
    let invalid = |detail: &str| {
        format!(
            r#"CertificateSigningRequest.certificates.k8s.io "c-0" is invalid: status.certificate: Invalid value: "<certificate data>": {detail}"#
        )
    };
    for (bad, detail) in [
        (
            b"MIIB...".to_vec(),
            "must contain at least one CERTIFICATE PEM block",
        ),
        (
            member_request(&key, "c-0").into_bytes(),
            r#"only CERTIFICATE PEM blocks are allowed, found "CERTIFICATE REQUEST""#,
        ),
    ] {
        let e = api_error(
            signer
                .replace_status(
                    "c-0",
                    &PostParams::default(),
                    &with_certificate(&made, &bad),
                )
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.message), (422, invalid(detail)));
    }
    // A signer approves nothing: /status keeps the decision as it was.
    let e = api_error(
        signer
            .patch_status(
                "c-0",
                &PatchParams::default(),
                &approval(json!([
                    condition("Approved", "MemberOfCluster"),
                    condition("Denied", "No")
                ])),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        e.message.ends_with(
            r#"status.conditions: Forbidden: updates may not add a condition of type "Denied"]"#
        ),
        "{}",
        e.message
    );

    let issued = signer
        .replace_status(
            "c-0",
            &PostParams::default(),
            &with_certificate(&made, pem.as_bytes()),
        )
        .await
        .expect("the signer signs");
    assert_eq!(certificate(&issued), Some(pem.clone().into_bytes()));
    assert_eq!(types(&issued), vec!["Approved"]);
    let e = api_error(
        signer
            .replace_status(
                "c-0",
                &PostParams::default(),
                &with_certificate(&issued, issued_for(&key, "c-0").as_bytes()),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            422,
            r#"CertificateSigningRequest.certificates.k8s.io "c-0" is invalid: status.certificate: Forbidden: updates may not modify existing certificate content"#
        )
    );
    // The signing plugin's checks are the signer's calls in the log.
    assert!(sim.requests().iter().any(|r| r.method == "ADMISSION"
        && r.path == "CertificateSigning"
        && r.verb == "sign"
        && r.name == SIGNER
        && r.code == 200));
}

#[tokio::test]
async fn the_api_server_leaves_checking_approval_to_the_signer() {
    // Upstream validation refuses no certificate for a request that is
    // pending or denied: the signer must look at the conditions itself.
    let (_sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    let made = admin
        .create(
            &PostParams::default(),
            &csr("c-0", &member_request(&key, "c-0")),
        )
        .await
        .unwrap();
    let issued = admin
        .replace_status(
            "c-0",
            &PostParams::default(),
            &with_certificate(&made, issued_for(&key, "c-0").as_bytes()),
        )
        .await
        .expect("the API server issues what a signer writes");
    assert_eq!(types(&issued), Vec::<String>::new());
    assert!(certificate(&issued).is_some());
}

#[tokio::test]
async fn the_spec_never_changes_after_create() {
    let (_sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    let made = admin
        .create(
            &PostParams::default(),
            &csr("c-0", &member_request(&key, "c-0")),
        )
        .await
        .unwrap();
    let other = member_request(&KeyPair::generate().unwrap(), "c-9");

    // A replace of the object keeps spec and status and takes the rest.
    let mut changed = made.clone();
    changed.spec.request = ByteString(other.clone().into_bytes());
    changed.spec.signer_name = "example.com/other".into();
    changed.spec.usages = Some(vec!["client auth".into()]);
    changed.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![
            serde_json::from_value(condition("Approved", "Sneaked")).unwrap(),
        ]),
        certificate: None,
    });
    changed.metadata.labels = Some([("member".to_string(), "c-0".to_string())].into());
    let replaced = admin
        .replace("c-0", &PostParams::default(), &changed)
        .await
        .expect("the API server drops spec and status changes silently");
    assert_eq!(replaced.spec, made.spec);
    assert_eq!(replaced.status, made.status);
    assert_eq!(replaced.metadata.labels, changed.metadata.labels);

    // Neither a patch of the object nor one of a subresource reaches it.
    let spec_patch = json!({"spec": {"signerName": "example.com/other", "usages": ["any"]}});
    let patched = admin
        .patch("c-0", &PatchParams::default(), &Patch::Merge(&spec_patch))
        .await
        .unwrap();
    assert_eq!(patched.spec, made.spec);
    for sub in ["approval", "status"] {
        let patched = admin
            .patch_subresource(
                sub,
                "c-0",
                &PatchParams::default(),
                &Patch::Merge(&spec_patch),
            )
            .await
            .unwrap();
        assert_eq!(patched.spec, made.spec, "{sub}");
    }
    assert_eq!(admin.get("c-0").await.unwrap().spec, made.spec);
}

#[tokio::test]
async fn a_request_must_be_a_signed_pkcs10_with_usages_and_a_signer() {
    let (_sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    let good = member_request(&key, "c-0");
    let invalid = |mut request: CertificateSigningRequest,
                   edit: &dyn Fn(&mut CertificateSigningRequest)| {
        edit(&mut request);
        let admin = admin.clone();
        async move {
            let e = api_error(
                admin
                    .create(&PostParams::default(), &request)
                    .await
                    .unwrap_err(),
            );
            assert_eq!(e.code, 422, "{}", e.message);
            e.message
                .split_once(" is invalid: ")
                .map(|(_, why)| why.to_string())
                .unwrap_or(e.message)
        }
    };
    // A certificate is not a request.
    let why = invalid(csr("a", &issued_for(&key, "c-0")), &|_| {}).await;
    assert!(
        why.starts_with("spec.request: Invalid value: []byte{0x2d, 0x2d")
            && why.ends_with("}: PEM block type must be CERTIFICATE REQUEST"),
        "{why}"
    );
    // A request whose subject was changed after signing.
    let mut der = testworld::kubesim::x509::pem_decode(good.as_bytes())
        .unwrap()
        .0
        .der;
    let at = der.windows(3).position(|w| w == b"c-0").unwrap();
    der[at + 2] = b'9';
    let forged = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        testworld::kubesim::x509::go_base64_encode(&der)
    );
    let why = invalid(csr("b", &forged), &|_| {}).await;
    assert!(
        why.ends_with("}: x509: ECDSA verification failure"),
        "{why}"
    );
    assert_eq!(
        invalid(csr("c", &good), &|r| r.spec.usages = None).await,
        "spec.usages: Required value"
    );
    assert_eq!(
        invalid(csr("d", &good), &|r| r.spec.signer_name = "member".into()).await,
        r#"spec.signerName: Invalid value: "member": must be a fully qualified domain and path of the form 'example.com/signer-name'"#
    );
    assert_eq!(
        invalid(csr("e", &good), &|r| r.spec.expiration_seconds = Some(599)).await,
        "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"
    );
    assert_eq!(
        invalid(csr("f", &good), &|r| r.spec.usages =
            Some(vec!["tls".into()]))
        .await,
        r#"spec.usages[0]: Unsupported value: "tls": supported values: "any", "cert sign", "client auth", "code signing", "content commitment", "crl sign", "data encipherment", "decipher only", "digital signature", "email protection", "encipher only", "ipsec end system", "ipsec tunnel", "ipsec user", "key agreement", "key encipherment", "microsoft sgc", "netscape sgc", "ocsp signing", "s/mime", "server auth", "signing", "timestamping""#
    );

    // Not base64 at all: the decoder refuses the body.
    let raw = http_post(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": "g"}, "spec": {"request": good, "signerName": SIGNER, "usages": ["any"]}}),
    );
    let e = admin
        .clone()
        .into_client()
        .request_text(raw)
        .await
        .unwrap_err();
    let e = api_error(e);
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "CertificateSigningRequest in version \"v1\" cannot be handled as a CertificateSigningRequest: illegal base64 data at input byte 0"
    );

    // CertificateSubjectRestriction: no system:masters client certificates.
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, "root");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let masters = params.serialize_request(&key).unwrap().pem().unwrap();
    let mut request = csr("h", &masters);
    request.spec.signer_name = "kubernetes.io/kube-apiserver-client".into();
    request.spec.usages = Some(vec!["client auth".into()]);
    let e = api_error(
        admin
            .create(&PostParams::default(), &request)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"certificatesigningrequests.certificates.k8s.io "h" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"#
        )
    );
    assert!(
        admin
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn requests_are_listed_watched_and_deleted_by_signer_name() {
    let (_sim, admin) = started().await;
    let key = KeyPair::generate().unwrap();
    let pem = member_request(&key, "c-0");
    let mine = ListParams::default().fields(&format!("spec.signerName={SIGNER}"));
    let start = admin
        .list(&mine)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let watch = WatchParams::default().fields(&format!("spec.signerName={SIGNER}"));
    let mut events = admin.watch(&watch, &start).await.unwrap().boxed();

    let mut foreign = csr("kubelet", &pem);
    foreign.spec.signer_name = "kubernetes.io/kubelet-serving".into();
    admin
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    admin
        .create(&PostParams::default(), &csr("c-0", &pem))
        .await
        .unwrap();
    let names = |l: kube::core::ObjectList<CertificateSigningRequest>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    assert_eq!(names(admin.list(&mine).await.unwrap()), vec!["c-0"]);
    assert_eq!(
        names(
            admin
                .list(&ListParams::default().fields("metadata.name=kubelet"))
                .await
                .unwrap()
        ),
        vec!["kubelet"]
    );
    let e = api_error(
        admin
            .list(&ListParams::default().fields("spec.usages=any"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "field label not supported: spec.usages")
    );
    admin
        .patch_approval(
            "c-0",
            &PatchParams::default(),
            &approval(json!([condition("Approved", "MemberOfCluster")])),
        )
        .await
        .unwrap();
    admin.delete("c-0", &DeleteParams::default()).await.unwrap();
    admin
        .delete("kubelet", &DeleteParams::default())
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let next = tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("the watch goes on")
            .unwrap()
            .expect("an event");
        let (kind, c) = match next {
            WatchEvent::Added(c) => ("ADDED", c),
            WatchEvent::Modified(c) => ("MODIFIED", c),
            WatchEvent::Deleted(c) => ("DELETED", c),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        seen.push((kind, c.metadata.name.clone().unwrap_or_default(), types(&c)));
    }
    assert_eq!(
        seen,
        vec![
            ("ADDED", "c-0".to_string(), vec![]),
            ("MODIFIED", "c-0".to_string(), vec!["Approved".to_string()]),
            ("DELETED", "c-0".to_string(), vec!["Approved".to_string()]),
        ]
    );
    assert_eq!(api_error(admin.get("c-0").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn discovery_serves_the_api_with_approval_and_status() {
    let (_sim, admin) = started().await;
    let req = hyper::Request::get("/apis/certificates.k8s.io/v1")
        .body(Vec::new())
        .unwrap();
    let list: Value =
        serde_json::from_str(&admin.into_client().request_text(req).await.unwrap()).unwrap();
    assert_eq!(list["groupVersion"], "certificates.k8s.io/v1");
    assert_eq!(
        list["resources"],
        json!([
            {"name": "certificatesigningrequests", "singularName": "certificatesigningrequest",
                "namespaced": false, "kind": "CertificateSigningRequest",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["csr"]},
            {"name": "certificatesigningrequests/approval", "singularName": "", "namespaced": false,
                "kind": "CertificateSigningRequest", "verbs": ["get", "patch", "update"]},
            {"name": "certificatesigningrequests/status", "singularName": "", "namespaced": false,
                "kind": "CertificateSigningRequest", "verbs": ["get", "patch", "update"]},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_approves_and_denies_requests() {
    let (sim, admin) = started().await;
    let dir = tempfile::tempdir().unwrap();
    let key = KeyPair::generate().unwrap();
    for name in ["c-0", "c-1"] {
        admin
            .create(
                &PostParams::default(),
                &csr(name, &member_request(&key, name)),
            )
            .await
            .unwrap();
    }
    let k = Kubectl::new("1.33", &sim, dir.path());
    let table = tokio::task::block_in_place(|| k.ok(&["get", "csr"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec![
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[2], row[3], row[4], row[5]),
        ("c-0", SIGNER, "kubernetes-admin", "24h", "Pending")
    );
    tokio::task::block_in_place(|| k.ok(&["certificate", "approve", "c-0"]));
    assert_eq!(types(&admin.get("c-0").await.unwrap()), vec!["Approved"]);
    tokio::task::block_in_place(|| k.ok(&["certificate", "deny", "c-1"]));
    assert_eq!(types(&admin.get("c-1").await.unwrap()), vec!["Denied"]);
    let table = tokio::task::block_in_place(|| k.ok(&["get", "csr", "--no-headers"]));
    let conditions: Vec<&str> = table
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(conditions, vec!["Approved", "Denied"], "{table}");
}
