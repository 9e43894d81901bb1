//! Validation of built-in kinds as the API server does it: a
//! StatefulSet's spec may change only in replicas, ordinals, template,
//! updateStrategy, revisionHistoryLimit, persistentVolumeClaimRetentionPolicy
//! and minReadySeconds (422 with the real message otherwise); a Pod's spec
//! only in what `ValidatePodUpdate` allows; a Service's cluster IP never;
//! the required fields and formats of what the operator writes.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{api_error, client_for};

#[tokio::test]
async fn a_statefulsets_immutable_fields_stay() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let client = client_for(&sim.kubeconfig()).await;
    let api: Api<StatefulSet> = Api::default_namespaced(client);
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "s"},
        "spec": {"replicas": 1, "serviceName": "s", "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &sts).await.unwrap();
    let merge = |p| Patch::Merge(p);
    api.patch(
        "s",
        &PatchParams::default(),
        &merge(json!({"spec": {"replicas": 3, "minReadySeconds": 5,
        "template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}})),
    )
    .await
    .expect("replicas, minReadySeconds and the template may change");
    for change in [
        json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}}}}]}}),
        json!({"spec": {"serviceName": "other"}}),
        json!({"spec": {"podManagementPolicy": "Parallel"}}),
        json!({"spec": {"selector": {"matchLabels": {"app": "s", "x": "y"}}}}),
    ] {
        let e = status_of(
            api.patch("s", &PatchParams::default(), &merge(change.clone()))
                .await,
        );
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{change}");
        assert_eq!(
            e.message,
            "StatefulSet.apps \"s\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            "{change}"
        );
    }
    assert_eq!(
        api.get("s")
            .await
            .unwrap()
            .spec
            .unwrap()
            .service_name
            .as_deref(),
        Some("s")
    );
}

/// The Status of a failed call.
fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    api_error(r.expect_err("an API error"))
}

/// Creates (or, with `patch`, merge-patches) an object of any kind in
/// `default`; the Status of the 422 it must get.
async fn invalid(
    client: &Client,
    (group, version, kind, plural): (&str, &str, &str, &str),
    body: serde_json::Value,
    patch: Option<&str>,
) -> kube::core::Status {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let s = match patch {
        None => {
            let mut o: DynamicObject = serde_json::from_value(body).unwrap();
            o.types = Some(kube::core::TypeMeta {
                api_version: ar.api_version.clone(),
                kind: kind.into(),
            });
            status_of(api.create(&PostParams::default(), &o).await)
        }
        Some(name) => status_of(
            api.patch(name, &PatchParams::default(), &Patch::Merge(body))
                .await,
        ),
    };
    assert_eq!(
        (s.code, s.reason.as_str()),
        (422, "Invalid"),
        "{}",
        s.message
    );
    s
}

#[tokio::test]
async fn pods_services_and_what_the_operator_writes_are_validated() {
    use k8s_openapi::api::core::v1::{Pod, Service};
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let client = client_for(&sim.kubeconfig()).await;
    let merge = |p| Patch::Merge(p);
    let pp = PatchParams::default();

    // A Pod: the image may change, the rest of the spec may not.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    // Strategic merges (by container name), as `kubectl set image` and
    // `kubectl patch` send: a JSON merge patch would replace the list and
    // drop the ServiceAccount token's mount, a change of its own.
    let strategic = |p| Patch::Strategic(p);
    pods.patch(
        "p",
        &pp,
        &strategic(json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}})),
    )
    .await
    .expect("an image may change");
    let e = status_of(
        pods.patch(
            "p",
            &pp,
            &strategic(json!({"spec": {"containers": [{"name": "c",
                "env": [{"name": "A", "value": "1"}]}]}})),
        )
        .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"),
        "{}",
        e.message
    );
    let s = invalid(
        &client,
        ("", "v1", "Pod", "pods"),
        json!({"spec": {"activeDeadlineSeconds": 30, "nodeName": "elsewhere"}}),
        Some("p"),
    )
    .await;
    let d = s.details.unwrap();
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("p", "Pod"));
    assert_eq!(
        (d.causes[0].field.as_str(), d.causes[0].reason.as_str()),
        ("spec", "FieldValueForbidden")
    );
    let spec = pods.get("p").await.unwrap().spec.unwrap();
    assert_eq!(spec.node_name, None, "nothing was written");
    assert_eq!(spec.containers[0].env, None);

    // A Service: a cluster IP never changes; ports are required.
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let web = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let ip = web.spec.unwrap().cluster_ip.unwrap();
    let other = if ip == "10.96.0.99" {
        "10.96.0.98"
    } else {
        "10.96.0.99"
    };
    let e = status_of(
        svcs.patch("web", &pp, &merge(json!({"spec": {"clusterIP": other}})))
            .await,
    );
    assert_eq!(
        e.message,
        format!(
            "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: []string{{\"{other}\"}}: may not change once set"
        )
    );
    svcs.patch(
        "web",
        &pp,
        &merge(json!({"spec": {"ports": [{"port": 81}]}})),
    )
    .await
    .expect("ports may change");
    let s = invalid(
        &client,
        ("", "v1", "Service", "services"),
        json!({"metadata": {"name": "noports"}, "spec": {"selector": {"app": "x"}}}),
        None,
    )
    .await;
    assert_eq!(
        s.message,
        "Service \"noports\" is invalid: spec.ports: Required value"
    );
    let c = &s.details.unwrap().causes[0];
    assert_eq!(
        (c.reason.as_str(), c.message.as_str(), c.field.as_str()),
        ("FieldValueRequired", "Required value", "spec.ports")
    );

    // What the operator writes: StatefulSets, claims, budgets, config
    // maps, RBAC.
    for (kind, body, message) in [
        (
            ("apps", "v1", "StatefulSet", "statefulsets"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {"app": "s"}},
                "template": {"metadata": {"labels": {"app": "t"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            "StatefulSet.apps \"s\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"t\"}: `selector` does not match template `labels`",
        ),
        (
            ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
            json!({"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
            "PersistentVolumeClaim \"c\" is invalid: spec.accessModes: Required value: at least 1 access mode is required",
        ),
        (
            (
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
            ),
            json!({"metadata": {"name": "b"}, "spec": {"minAvailable": 1, "maxUnavailable": 1,
                "selector": {"matchLabels": {"app": "s"}}}}),
            "PodDisruptionBudget.policy \"b\" is invalid: spec: Invalid value:",
        ),
        (
            ("", "v1", "ConfigMap", "configmaps"),
            json!({"metadata": {"name": "m"}, "data": {"cassandra yaml": "x"}}),
            "ConfigMap \"m\" is invalid: data[cassandra yaml]: Invalid value: \"cassandra yaml\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
        ),
        (
            ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
            json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]}),
            "Role.rbac.authorization.k8s.io \"r\" is invalid: rules[0].verbs: Required value: verbs must contain at least one value",
        ),
    ] {
        let s = invalid(&client, kind, body, None).await;
        assert!(s.message.starts_with(message), "{}", s.message);
    }

    // A RoleBinding's roleRef never changes.
    let rb = json!({"metadata": {"name": "rb"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]});
    let rbs: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::default_namespaced(client.clone());
    rbs.create(&PostParams::default(), &serde_json::from_value(rb).unwrap())
        .await
        .unwrap();
    let e = status_of(
        rbs.patch(
            "rb",
            &pp,
            &merge(json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}})),
        )
        .await,
    );
    assert_eq!(
        e.message,
        "RoleBinding.rbac.authorization.k8s.io \"rb\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef"
    );
}
