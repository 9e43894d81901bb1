//! kubesim as a real API server guards itself: TLS only with its own CA,
//! the admin kubeconfig, ServiceAccount tokens (TokenRequest, Pod-bound,
//! expiring), 401 for a bad credential, impersonation for admins, RBAC
//! with the API server's 403 messages, and `kubectl auth can-i` — with the
//! real kube client and the real kubectl 1.27 and 1.33.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use testworld::kubesim::store::Target;
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{
    Kubectl, api_error, assert_pod_bound_user, client_for, create, http_post,
    service_account_with_role,
};

/// A ServiceAccount `member` in `default` that may get and patch the
/// Service `c-0` only, and list pods.
fn member_rbac(sim: &KubeSim) {
    service_account_with_role(
        sim,
        "member",
        json!([
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"], "resourceNames": ["c-0"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ]),
    );
}

#[tokio::test]
async fn tls_only_with_its_own_ca() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let kubeconfig = sim.kubeconfig();
    assert!(
        kubeconfig.contains("certificate-authority-data: "),
        "{kubeconfig}"
    );
    let client = client_for(&kubeconfig).await;
    Api::<ConfigMap>::default_namespaced(client)
        .list(&ListParams::default())
        .await
        .expect("the admin kubeconfig works over TLS");

    // Without the CA, the client does not trust the server.
    let untrusting: String = kubeconfig
        .lines()
        .filter(|l| !l.contains("certificate-authority-data"))
        .map(|l| format!("{l}\n"))
        .collect();
    let client = client_for(&untrusting).await;
    let e = Api::<ConfigMap>::default_namespaced(client)
        .list(&ListParams::default())
        .await
        .expect_err("an unknown CA is refused");
    assert!(!matches!(e, kube::Error::Api(_)), "{e:?}");

    // Plain HTTP gets no API answer; the test world's endpoints are on their own port.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let plain = http.get(format!("http://{}/api", sim.addr())).send().await;
    assert!(plain.is_err(), "plain HTTP must not be served: {plain:?}");
    let faults = http
        .get(format!("{}/sim/faults", sim.sim_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(faults.status(), 200);
}

#[tokio::test]
async fn tokens_authenticate_and_rbac_authorizes() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    member_rbac(&sim);
    create(
        &sim,
        "",
        "services",
        Some("default"),
        json!({"metadata": {"name": "c-0"}, "spec": {"ports": [{"port": 1}]}}),
    );
    create(
        &sim,
        "",
        "services",
        Some("default"),
        json!({"metadata": {"name": "c-1"}, "spec": {"ports": [{"port": 1}]}}),
    );
    let token = sim.create_token("default", "member", 600).unwrap();
    let member = client_for(&sim.kubeconfig_with_token(&token)).await;
    let services: Api<Service> = Api::default_namespaced(member.clone());
    services.get("c-0").await.expect("granted by name");
    let e = api_error(services.get("c-1").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        r#"services "c-1" is forbidden: User "system:serviceaccount:default:member" cannot get resource "services" in API group "" in the namespace "default""#
    );
    let e = api_error(services.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 403, "resourceNames never grant a list");
    // The request log names the user.
    let last = sim.requests().into_iter().last().unwrap();
    assert_eq!(last.user, "system:serviceaccount:default:member");
    assert_eq!((last.verb.as_str(), last.code), ("list", 403));

    // A token of a deleted ServiceAccount, an expired one and a forged one: 401.
    let expired = sim.create_token("default", "member", -120).unwrap();
    let mut forged = token.clone();
    forged.replace_range(forged.len() - 4.., "AAAA");
    for bad in [expired, forged, "kubesim".to_string()] {
        let client = client_for(&sim.kubeconfig_with_token(&bad)).await;
        let e = api_error(
            Api::<Service>::default_namespaced(client)
                .get("c-0")
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (e.code, e.reason.as_str(), e.message.as_str()),
            (401, "Unauthorized", "Unauthorized")
        );
    }
    sim.store()
        .delete(
            &Target::new("", "v1", "serviceaccounts", Some("default")),
            "member",
            &Default::default(),
        )
        .unwrap();
    let e = services.get("c-0").await.unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 401),
        "{e:?}"
    );
}

#[tokio::test]
async fn pod_bound_tokens_carry_the_pod_and_die_with_it() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    member_rbac(&sim);
    let pod = create(
        &sim,
        "",
        "pods",
        Some("default"),
        json!({"metadata": {"name": "c-0"},
        "spec": {"serviceAccountName": "member", "containers": [{"name": "c", "image": "x"}]}}),
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let admin = client_for(&sim.kubeconfig()).await;
    let req = http_post(
        "/api/v1/namespaces/default/serviceaccounts/member/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "c-0", "uid": uid}}}),
    );
    let tr: Value = serde_json::from_str(&admin.request_text(req).await.unwrap()).unwrap();
    assert_eq!(tr["kind"], "TokenRequest");
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let member = client_for(&sim.kubeconfig_with_token(&token)).await;
    let user =
        assert_pod_bound_user(&member, "system:serviceaccount:default:member", "c-0", &uid).await;
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    // The Pod is gone: so is its token.
    sim.store()
        .delete(
            &Target::new("", "v1", "pods", Some("default")),
            "c-0",
            &Default::default(),
        )
        .unwrap();
    let e = Api::<Service>::default_namespaced(member)
        .get("c-0")
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 401),
        "{e:?}"
    );
}

fn kubectl_suite(version: &str, sim: &KubeSim, dir: &Path) {
    let v = version;
    let k = Kubectl::new(version, sim, dir);
    // create token: a token the server accepts, with 403s and can-i answers by its Role.
    let token = k.ok(&["create", "token", "member"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "{v}: a JWT: {token}");
    let as_member = k.with_kubeconfig(
        dir.join(format!("member-{v}")),
        &sim.kubeconfig_with_token(&token),
    );
    assert_eq!(
        as_member
            .ok(&["auth", "can-i", "patch", "services/c-0"])
            .trim(),
        "yes",
        "{v}"
    );
    let (ok, out, _) = as_member.run(&["auth", "can-i", "patch", "services/c-1"]);
    assert_eq!((ok, out.trim()), (false, "no"), "{v}");
    let (ok, out, _) = as_member.run(&["auth", "can-i", "delete", "pods"]);
    assert_eq!((ok, out.trim()), (false, "no"), "{v}");
    assert_eq!(
        as_member.ok(&["auth", "can-i", "list", "pods"]).trim(),
        "yes",
        "{v}"
    );
    let (ok, _, err) = as_member.run(&["get", "services"]);
    assert!(!ok, "{v}");
    assert!(
        err.contains(r#"Error from server (Forbidden): services is forbidden: User "system:serviceaccount:default:member" cannot list resource "services" in API group "" in the namespace "default""#),
        "{v}: {err}"
    );
    // --as: an admin may impersonate, and then is that user.
    let (ok, out, _) = k.run(&[
        "auth",
        "can-i",
        "patch",
        "services/c-1",
        "--as",
        "system:serviceaccount:default:member",
    ]);
    assert_eq!((ok, out.trim()), (false, "no"), "{v}");
    assert_eq!(
        k.ok(&[
            "auth",
            "can-i",
            "patch",
            "services/c-0",
            "--as",
            "system:serviceaccount:default:member"
        ])
        .trim(),
        "yes",
        "{v}"
    );
    let (ok, _, err) = k.run(&[
        "get",
        "services",
        "--as",
        "system:serviceaccount:default:member",
    ]);
    assert!(!ok && err.contains("(Forbidden)"), "{v}: {err}");
    // ... and the member may not.
    let (ok, _, err) = as_member.run(&["get", "pods", "--as", "system:admin"]);
    assert!(!ok, "{v}");
    assert!(
        err.contains(r#"users "system:admin" is forbidden: User "system:serviceaccount:default:member" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{v}: {err}"
    );
    // A bad token: 401, as kubectl reports it.
    let bad = k.with_kubeconfig(
        dir.join(format!("bad-{v}")),
        &sim.kubeconfig_with_token("nope"),
    );
    let (ok, _, err) = bad.run(&["get", "pods"]);
    assert!(!ok, "{v}");
    assert!(err.contains("Unauthorized"), "{v}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_and_1_33_tokens_can_i_and_impersonation() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    member_rbac(&sim);
    let dir = tempfile::tempdir().unwrap();
    for v in ["1.27", "1.33"] {
        let sim = &sim;
        let dir = dir.path().to_path_buf();
        tokio::task::block_in_place(|| kubectl_suite(v, sim, &dir));
    }
}

#[tokio::test]
async fn a_role_may_grant_only_what_its_writer_holds() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    service_account_with_role(
        &sim,
        "op",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        ]),
    );
    let token = sim.create_token("default", "op", 600).unwrap();
    let op = client_for(&sim.kubeconfig_with_token(&token)).await;
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::default_namespaced(op.clone());
    let role = |name: &str, verb: &str| -> k8s_openapi::api::rbac::v1::Role {
        serde_json::from_value(json!({"metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": [verb]}]}))
        .unwrap()
    };
    roles
        .create(&Default::default(), &role("reader", "get"))
        .await
        .expect("it holds pods get");
    let e = api_error(
        roles
            .create(&Default::default(), &role("deleter", "delete"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.starts_with(r#"roles.rbac.authorization.k8s.io "deleter" is forbidden: user "system:serviceaccount:default:op" (groups=["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#)
            && e.message.ends_with(r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#),
        "{}",
        e.message
    );
    // A binding to a role whose permissions it lacks (and no `bind`): refused.
    create(
        &sim,
        "rbac.authorization.k8s.io",
        "roles",
        Some("default"),
        json!({"metadata": {"name": "admin-ish"}, "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    );
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::default_namespaced(op);
    let binding = |role: &str| -> k8s_openapi::api::rbac::v1::RoleBinding {
        serde_json::from_value(json!({"metadata": {"name": format!("to-{role}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "default"}]}))
        .unwrap()
    };
    let e = bindings
        .create(&Default::default(), &binding("admin-ish"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 403),
        "{e:?}"
    );
    bindings
        .create(&Default::default(), &binding("reader"))
        .await
        .expect("it holds everything the reader role grants");
}
