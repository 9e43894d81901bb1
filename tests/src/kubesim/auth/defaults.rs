//! The RBAC objects a fresh cluster has and that the project relies on:
//! `cluster-admin` for `system:masters` (the admin kubeconfig's group),
//! `system:discovery`, `system:basic-user` (SelfSubjectAccessReview, so
//! that `kubectl auth can-i` works for everyone) and
//! `system:public-info-viewer` for every authenticated user (and the last
//! also for anonymous ones), and the aggregated `view` role. No more: a
//! permission the operator needs must come from its own manifests. The
//! rules are the API server's bootstrap policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), trimmed to the kinds
//! kubesim serves. Writes into the store.

use crate::kubesim::store::{ApiError, Store, Target, WriteOptions};
use serde_json::{Value, json};

fn cluster_role(name: &str, labels: Value, rules: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    })
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let read = json!(["get", "list", "watch"]);
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": ["get"]}]),
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
            ]),
        ),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "view", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults",
                "rbac.authorization.k8s.io/aggregate-to-edit": "true"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]},
            "rules": [],
        }),
        cluster_role(
            "system:aggregate-to-view",
            json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
            json!([
                {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims",
                    "persistentvolumeclaims/status", "pods", "replicationcontrollers",
                    "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"],
                    "verbs": read},
                {"apiGroups": [""], "resources": ["bindings", "events", "limitranges", "namespaces/status",
                    "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas",
                    "resourcequotas/status"], "verbs": read},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "daemonsets/status",
                    "deployments", "deployments/scale", "deployments/status", "replicasets",
                    "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale",
                    "statefulsets/status"], "verbs": read},
                {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                    "verbs": read},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets",
                    "poddisruptionbudgets/status"], "verbs": read},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": read},
            ]),
        ),
    ]
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

/// The root CA publisher: every live namespace has the `kube-root-ca.crt`
/// ConfigMap with the cluster's CA (what the projected ServiceAccount
/// volume's `ca.crt` comes from).
pub fn publish_root_ca(store: &Store, ca_pem: &str) {
    let namespaces = store
        .list(
            &Target::new("", "v1", "namespaces", None),
            &Default::default(),
        )
        .ok()
        .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    let name = super::service_accounts::ROOT_CA_CONFIGMAP;
    for ns in namespaces {
        if ns.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let ns = ns["metadata"]["name"].as_str().unwrap_or_default();
        let t = Target::new("", "v1", "configmaps", Some(ns));
        if store.get(&t, name).is_err() {
            let _ = store.create(
                &t,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "annotations": {"kubernetes.io/description":
                        "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                    "data": {"ca.crt": ca_pem}}),
                &WriteOptions::default(),
            );
        }
    }
}

/// Stores the defaults (at start).
pub fn install(store: &Store) -> Result<(), ApiError> {
    let roles = Target::new("rbac.authorization.k8s.io", "v1", "clusterroles", None);
    for r in cluster_roles() {
        store.create(&roles, r, &WriteOptions::default())?;
    }
    let bindings = Target::new(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        None,
    );
    for b in cluster_role_bindings() {
        store.create(&bindings, b, &WriteOptions::default())?;
    }
    Ok(())
}
