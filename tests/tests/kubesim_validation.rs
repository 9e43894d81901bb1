//! Validation of built-in kinds as the API server does it: a
//! StatefulSet's spec may change only in replicas, ordinals, template,
//! updateStrategy, revisionHistoryLimit, persistentVolumeClaimRetentionPolicy
//! and minReadySeconds (422 with the real message otherwise).

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use testworld::kubesim::{KubeSim, Options};

#[tokio::test]
async fn a_statefulsets_immutable_fields_stay() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig()).unwrap();
    let client = Client::try_from(
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap(),
    )
    .unwrap();
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
        let e = match api
            .patch("s", &PatchParams::default(), &merge(change.clone()))
            .await
            .unwrap_err()
        {
            kube::Error::Api(s) => s,
            other => panic!("{other:?}"),
        };
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
