//! What a member's own token can do, end to end: the token the kubelet
//! projected into a running member's Pod, against the API server with the
//! operator installed as `kubectl apply -k manifests/` installs it (its
//! ValidatingAdmissionPolicy included) and the members' Role the
//! controller wrote. It may write its own member Service's records of
//! intent and nothing else: another member's Service, `spec.externalIPs`,
//! a selector and Secrets are refused with 403. Of the decommission
//! records it may only answer: `decommissioned` from `"false"` to `"true"`,
//! with its confirmation; asking (a `"true"` or `"false"` where there was
//! no request) and the controller's request annotation are refused.

use std::path::{Path, PathBuf};

use crds::contract::{
    DECOMMISSION_CONFIRMATION, DECOMMISSION_REQUEST, DECOMMISSIONED, DecommissionConfirmation,
    DecommissionRequest,
};
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, cluster, secs, setup};

/// The projected ServiceAccount token of Pod `pod` (namespace `db`), as
/// the kubelet wrote it under the world's work directory.
pub(crate) fn projected_token(work: &Path, pod: &str) -> Option<String> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && depth < 6 {
                walk(&p, depth + 1, out);
            } else if p.file_name().is_some_and(|n| n == "token") {
                out.push(p);
            }
        }
    }
    let mut tokens = Vec::new();
    walk(work, 0, &mut tokens);
    let prefix = format!("db_{pod}_");
    tokens
        .into_iter()
        .filter(|p| {
            p.ancestors().any(|a| {
                a.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
        })
        .find_map(|p| std::fs::read_to_string(p).ok())
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().to_string())
}

pub(crate) async fn client_with(s: &Scenario, token: &str) -> Client {
    let kc = Kubeconfig::from_yaml(&s.sim().kubeconfig_with_token(token)).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

/// A merge patch of a member Service's decommission records: its
/// `decommissioned` label and annotation `key`.
fn records(decommissioned: &str, key: &str, value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {
        "labels": {DECOMMISSIONED: decommissioned},
        "annotations": {key: value}}}))
}

/// The API error of a refused call.
fn refused<T: std::fmt::Debug>(r: Result<T, kube::Error>, what: &str) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(e)) => e,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_token_may_change_only_its_own_services_records() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = setup().start().await;
    s.create(&cluster("c").version("3.11.6").rack("r", 2)).await;

    // Member 0 runs (its sidecar holds its token) and member 1's Service
    // exists.
    let admin_services = s.api::<Service>();
    let token = s
        .until(
            "a running member 0 with a token and a Service for member 1",
            secs(120),
            || async {
                let other = admin_services.get_opt("c-dc-r-1").await.unwrap().is_some();
                projected_token(s.work(), "c-dc-r-0").filter(|_| other)
            },
        )
        .await;
    let member = client_with(&s, &token).await;
    let services: Api<Service> = Api::namespaced(member.clone(), "db");
    let pp = PatchParams::default();
    let label =
        |v: serde_json::Value| Patch::Merge(json!({"metadata": {"labels": {DECOMMISSIONED: v}}}));

    let denied = "ValidatingAdmissionPolicy 'cassandra-member-service' with binding 'cassandra-member-service' denied request";

    // 1. Its own Service's decommissioned label where the controller asked
    // nothing: `true` (even with a confirmation) is refused; so is writing
    // the controller's request. Nothing is written: the world goes on.
    let confirmation = DecommissionConfirmation {
        request: "c-dc-r-0/1".into(),
        host_id: None,
        confirmed_at: "2026-11-27T10:05:00Z".into(),
        removed: None,
    }
    .to_annotation();
    let e = refused(
        services
            .patch(
                "c-dc-r-0",
                &pp,
                &records("true", DECOMMISSION_CONFIRMATION, &confirmation),
            )
            .await,
        "decommissioned=true with no request",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    assert_eq!(
        e.message,
        format!(
            "services \"c-dc-r-0\" is forbidden: {denied}: a member may change its cassandra.rook.io/decommissioned label only from \"false\" to \"true\" (to confirm the decommission the controller requested)"
        )
    );
    let request = DecommissionRequest {
        id: "c-dc-r-0/1".into(),
        requested_at: "2026-11-27T10:00:00Z".into(),
        ..Default::default()
    }
    .to_annotation();
    let e = refused(
        services
            .patch(
                "c-dc-r-0",
                &pp,
                &Patch::Merge(
                    json!({"metadata": {"annotations": {DECOMMISSION_REQUEST: request}}}),
                ),
            )
            .await,
        "writing the controller's request",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    assert!(
        e.message.ends_with(&format!(
            "{denied}: a member may not add, change or remove the cassandra.rook.io/decommission-request annotation (the controller's request)"
        )),
        "{}",
        e.message
    );
    let own = admin_services.get("c-dc-r-0").await.unwrap();
    assert!(
        !own.metadata
            .labels
            .unwrap_or_default()
            .contains_key(DECOMMISSIONED),
        "the refused label was not written"
    );
    let annotations = own.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(DECOMMISSION_REQUEST)
            && !annotations.contains_key(DECOMMISSION_CONFIRMATION),
        "the refused annotations were not written: {annotations:?}"
    );

    // 2. Another member's Service: refused by the policy.
    let e = refused(
        services
            .patch("c-dc-r-1", &pp, &label(json!("false")))
            .await,
        "labelling another member's Service",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    assert_eq!(
        e.message,
        "services \"c-dc-r-1\" is forbidden: ValidatingAdmissionPolicy 'cassandra-member-service' with binding 'cassandra-member-service' denied request: a member may change only its own member Service, not c-dc-r-1"
    );
    let other = admin_services.get("c-dc-r-1").await.unwrap();
    assert!(
        !other
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("cassandra.rook.io/decommissioned"),
        "the refused label was not written"
    );

    // 3. spec.externalIPs on its own Service (CVE-2020-8554): refused.
    let e = refused(
        services
            .patch(
                "c-dc-r-0",
                &pp,
                &Patch::Merge(json!({"spec": {"externalIPs": ["203.0.113.7"]}})),
            )
            .await,
        "setting externalIPs",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    assert!(
        e.message
            .ends_with("denied request: a member may not change a Service's spec"),
        "{}",
        e.message
    );

    // 4. Its own Service's selector: refused.
    let e = refused(
        services
            .patch(
                "c-dc-r-0",
                &pp,
                &Patch::Merge(json!({"spec": {"selector": {"app": "web"}}})),
            )
            .await,
        "changing a selector",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    let own = admin_services.get("c-dc-r-0").await.unwrap();
    let spec = own.spec.unwrap();
    assert!(spec.external_ips.is_none(), "externalIPs not written");
    assert!(
        !spec.selector.unwrap_or_default().contains_key("app"),
        "the selector not changed"
    );

    // 5. Secrets: refused by RBAC.
    let secrets: Api<Secret> = Api::namespaced(member.clone(), "db");
    let e = refused(
        secrets.list(&ListParams::default()).await,
        "listing Secrets",
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "secrets is forbidden: User \"system:serviceaccount:db:c-member\" cannot list resource \"secrets\" in API group \"\" in the namespace \"db\""
    );
    let e = refused(secrets.get("any").await, "reading a Secret");
    assert_eq!(e.code, 403, "{}", e.message);

    // 6. Nor does it read Pods (its labels come from the downward API).
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(member, "db");
    assert_eq!(
        refused(pods.get("c-dc-r-0").await, "reading its Pod").code,
        403
    );

    // 7. Last, as it disturbs the world: the controller asks (the admin
    // client writes `false` and the request in one write, as the controller
    // does), and the member's token answers `true` with its confirmation.
    // The controller is stopped first: the request is not one it made, and
    // it would withdraw it (the spec wants the member) between the two
    // writes. The sidecar may claim the request meanwhile; its claim does
    // not change what is checked here.
    s.stop_controller();
    admin_services
        .patch(
            "c-dc-r-0",
            &pp,
            &records("false", DECOMMISSION_REQUEST, &request),
        )
        .await
        .expect("the controller's side asks member 0 to decommission");
    let answered = services
        .patch(
            "c-dc-r-0",
            &pp,
            &records("true", DECOMMISSION_CONFIRMATION, &confirmation),
        )
        .await
        .expect("a member answers the request on its own Service");
    assert_eq!(
        answered
            .metadata
            .labels
            .unwrap_or_default()
            .get(DECOMMISSIONED),
        Some(&"true".to_string())
    );
    let annotations = answered.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(DECOMMISSION_CONFIRMATION),
        Some(&confirmation)
    );
    assert_eq!(annotations.get(DECOMMISSION_REQUEST), Some(&request));
    // The answer stands: the member's token may not take it back.
    let e = refused(
        services
            .patch("c-dc-r-0", &pp, &label(serde_json::Value::Null))
            .await,
        "removing its true",
    );
    assert_eq!(e.code, 403, "{}", e.message);
    // The records taken back right away, by the admin client.
    admin_services
        .patch(
            "c-dc-r-0",
            &pp,
            &Patch::Merge(json!({"metadata": {
                "labels": {DECOMMISSIONED: null},
                "annotations": {DECOMMISSION_REQUEST: null, DECOMMISSION_CONFIRMATION: null}}})),
        )
        .await
        .expect("the records taken back");
}
