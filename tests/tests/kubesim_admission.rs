//! kubesim's admission plugins as a real API server runs them on a
//! client's write: ValidatingAdmissionPolicy with its bindings (applied
//! with the real kubectl, evaluated on create, update, patch and delete
//! with the request's user, Pod-bound tokens included; 422 or 403 with the
//! API server's message, Warning headers) and OpenShift's
//! OwnerReferencesPermissionEnforcement (403 without `delete` on the
//! object or `update` on the owner's finalizers).

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::kubesim::store::{Target, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{Kubectl, api_error, client_for, create, http_post, service_account_with_role};

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: fixed-type
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: [UPDATE, DELETE]
        resources: [services]
  validations:
    - expression: request.operation != 'UPDATE' || object.spec.type == oldObject.spec.type
      message: the type of a Service is fixed
    - expression: request.operation != 'DELETE' || !has(oldObject.metadata.labels) || !('keep' in oldObject.metadata.labels)
      messageExpression: "'Service ' + oldObject.metadata.name + ' is kept'"
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: fixed-type-deny
spec:
  policyName: fixed-type
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        guarded: "yes"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: fixed-type-warn
spec:
  policyName: fixed-type
  validationActions: [Warn]
  matchResources:
    namespaceSelector:
      matchLabels:
        warned: "yes"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_applied_with_kubectl_deny_or_warn_updates_and_deletes() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new("1.33", &sim, dir.path());
    for (ns, label) in [("guarded", "guarded"), ("warned", "warned")] {
        create(
            &sim,
            "",
            "namespaces",
            None,
            json!({"metadata": {"name": ns, "labels": {label: "yes"}}}),
        );
        create(
            &sim,
            "",
            "services",
            Some(ns),
            json!({"metadata": {"name": "s", "labels": {"keep": ""}}, "spec": {"ports": [{"port": 1}]}}),
        );
    }
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let (ok, out, err) =
        tokio::task::block_in_place(|| k.run(&["apply", "-f", file.to_str().unwrap()]));
    assert!(ok, "kubectl apply: {err}");
    assert!(
        out.contains("validatingadmissionpolicy.admissionregistration.k8s.io/fixed-type created"),
        "{out}"
    );
    let (ok, out, _) = tokio::task::block_in_place(|| {
        k.run(&["get", "validatingadmissionpolicybindings", "-o", "name"])
    });
    assert!(ok);
    assert!(out.contains("fixed-type-warn"), "{out}");

    // Deny: the API server's 422 and message, for an admin too.
    let admin = client_for(&sim.kubeconfig()).await;
    let guarded: Api<Service> = Api::namespaced(admin.clone(), "guarded");
    let change = Patch::Merge(json!({"spec": {"type": "NodePort"}}));
    let e = api_error(
        guarded
            .patch("s", &PatchParams::default(), &change)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "services \"s\" is forbidden: ValidatingAdmissionPolicy 'fixed-type' with binding 'fixed-type-deny' denied request: the type of a Service is fixed"
    );
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    guarded
        .patch("s", &PatchParams::default(), &label)
        .await
        .expect("what the policy allows passes");
    // A delete is judged on the old object; reason Forbidden is 403.
    let e = api_error(
        guarded
            .delete("s", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message.ends_with("denied request: Service s is kept"),
        "{}",
        e.message
    );

    // Warn: the change is made, kubectl shows the API server's warning.
    let (ok, _, err) = tokio::task::block_in_place(|| {
        k.run(&[
            "-n",
            "warned",
            "patch",
            "service",
            "s",
            "--type=merge",
            "-p",
            r#"{"spec":{"type":"NodePort"}}"#,
        ])
    });
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'fixed-type' with binding 'fixed-type-warn': the type of a Service is fixed"),
        "{err}"
    );
    let warned: Api<Service> = Api::namespaced(admin.clone(), "warned");
    let s = warned.get("s").await.unwrap();
    assert_eq!(s.spec.unwrap().type_.as_deref(), Some("NodePort"));

    // The binding gone: the same change is allowed.
    let (ok, _, err) = tokio::task::block_in_place(|| {
        k.run(&[
            "delete",
            "validatingadmissionpolicybinding",
            "fixed-type-deny",
        ])
    });
    assert!(ok, "{err}");
    guarded
        .patch("s", &PatchParams::default(), &change)
        .await
        .expect("no binding, no policy");
}

/// A ServiceAccount `member` in `default` that may patch every Service,
/// a Pod `c-0` running as it, and the Services `c-0` and `c-1`.
fn member_world(sim: &KubeSim) -> String {
    service_account_with_role(
        sim,
        "member",
        json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"]}]),
    );
    for s in ["c-0", "c-1"] {
        create(
            sim,
            "",
            "services",
            Some("default"),
            json!({"metadata": {"name": s}, "spec": {"ports": [{"port": 1}]}}),
        );
    }
    let pod = create(
        sim,
        "",
        "pods",
        Some("default"),
        json!({"metadata": {"name": "c-0"},
        "spec": {"serviceAccountName": "member", "containers": [{"name": "c", "image": "x"}]}}),
    );
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_policy_sees_the_pod_a_token_is_bound_to() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let uid = member_world(&sim);
    create(
        &sim,
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        None,
        json!({"metadata": {"name": "own"}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["services"]}]},
            "matchConditions": [{"name": "member", "expression": "request.userInfo.username == 'system:serviceaccount:default:member'"}],
            "variables": [{"name": "pod", "expression": "request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]"}],
            "validations": [{"expression": "object.metadata.name == variables.pod", "reason": "Forbidden",
                "messageExpression": "'only ' + variables.pod"}]}}),
    );
    create(
        &sim,
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        None,
        json!({"metadata": {"name": "own"}, "spec": {"policyName": "own", "validationActions": ["Deny"]}}),
    );
    let admin = client_for(&sim.kubeconfig()).await;
    let req = http_post(
        "/api/v1/namespaces/default/serviceaccounts/member/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "c-0", "uid": uid}}}),
    );
    let tr: Value = serde_json::from_str(&admin.request_text(req).await.unwrap()).unwrap();
    let token = tr["status"]["token"].as_str().unwrap();
    let member = client_for(&sim.kubeconfig_with_token(token)).await;
    let services: Api<Service> = Api::default_namespaced(member);
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    services
        .patch("c-0", &PatchParams::default(), &label)
        .await
        .expect("its own Service");
    let e = api_error(
        services
            .patch("c-1", &PatchParams::default(), &label)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "services \"c-1\" is forbidden: ValidatingAdmissionPolicy 'own' with binding 'own' denied request: only c-0"
    );
    // The admin is not the member: untouched.
    Api::<Service>::default_namespaced(admin)
        .patch("c-1", &PatchParams::default(), &label)
        .await
        .expect("the admin");
}

#[tokio::test]
async fn owner_references_need_delete_and_blocking_ones_the_owners_finalizers() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let owner = create(
        &sim,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "owner"}}),
    );
    // The writer's Role: configmaps create, and `extra`.
    let rules = |extra: Value| {
        let mut r =
            vec![json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]})];
        if let Value::Array(a) = extra {
            r.extend(a);
        }
        Value::Array(r)
    };
    service_account_with_role(&sim, "writer", rules(json!([])));
    let roles = Target::new("rbac.authorization.k8s.io", "v1", "roles", Some("default"));
    let token = sim.create_token("default", "writer", 600).unwrap();
    let writer: Api<ConfigMap> =
        Api::default_namespaced(client_for(&sim.kubeconfig_with_token(&token)).await);
    let owned = |name: &str, block: bool| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}]}}))
        .unwrap()
    };
    writer
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "plain"}})).unwrap(),
        )
        .await
        .expect("no ownerReference, no check");
    let e = api_error(
        writer
            .create(&PostParams::default(), &owned("a", false))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "configmaps \"a\" is forbidden: cannot set an ownerRef on a resource you can't delete: , <nil>"
    );
    let set_rules = |extra: Value| {
        sim.store()
            .update(
                &roles,
                "writer",
                json!({"metadata": {"name": "writer"}, "rules": rules(extra)}),
                testworld::kubesim::store::Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap();
    };
    set_rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]));
    writer
        .create(&PostParams::default(), &owned("a", false))
        .await
        .expect("may delete what it owns");
    let e = api_error(
        writer
            .create(&PostParams::default(), &owned("b", true))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "configmaps \"b\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"
    );
    set_rules(json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]},
        {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"], "resourceNames": ["owner"]},
    ]));
    writer
        .create(&PostParams::default(), &owned("b", true))
        .await
        .expect("may update the owner's finalizers");
    // The checks are in the request log as the writer's calls.
    let user = "system:serviceaccount:default:writer";
    let checks: Vec<(String, String, String, u16)> = sim
        .requests()
        .into_iter()
        .filter(|r| r.user == user && r.method == "ADMISSION")
        .map(|r| (r.verb, r.resource, r.subresource, r.code))
        .collect();
    assert!(checks.contains(&(
        "update".into(),
        "configmaps".into(),
        "finalizers".into(),
        200
    )));
    assert!(checks.contains(&(
        "update".into(),
        "configmaps".into(),
        "finalizers".into(),
        403
    )));
    assert!(checks.contains(&("delete".into(), "configmaps".into(), String::new(), 403)));
}
