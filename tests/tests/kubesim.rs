//! kubesim against the operator's real client (kube-rs) and the real
//! kubectl: CRUD, conflicts, selectors, pagination, watches, patches,
//! subresources, custom resources, garbage collection, faults and the
//! request log.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testworld::kubesim::faults::FaultConfig;
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{Kubectl, api_error, client_for, client_without_retries};

async fn start(opts: Options) -> (KubeSim, Client) {
    let sim = KubeSim::start(opts).await.expect("kubesim starts");
    let client = client_for(&sim.kubeconfig()).await;
    (sim, client)
}

async fn sim() -> (KubeSim, Client) {
    start(Options::default()).await
}

fn cm(name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data}))
        .unwrap()
}

/// An empty ConfigMap `name`, created.
async fn create_cm(cms: &Api<ConfigMap>, name: &str) -> ConfigMap {
    cms.create(&PostParams::default(), &cm(name, json!({}), json!({})))
        .await
        .unwrap()
}

/// `name` merge-patched with `patch`.
async fn merge<K>(api: &Api<K>, name: &str, patch: Value) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap()
}

/// Whether `name` is gone.
async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none()
}

/// The names of listed objects, in their order.
fn names<K: kube::Resource>(objects: Vec<K>) -> Vec<String> {
    objects
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut f: F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn crud_with_resource_versions_and_conflicts() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let created = cms
        .create(
            &PostParams::default(),
            &cm("a", json!({"app": "c"}), json!({"k": "v"})),
        )
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(meta.uid.as_ref().map(String::len), Some(36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_ref().unwrap().parse().unwrap();

    let mut changed = created.clone();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), "w".into());
    let updated = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "resourceVersion grows: {rv1} then {rv2}");
    assert_eq!(updated.metadata.uid, created.metadata.uid);

    // The stale copy is refused.
    let stale = api_error(
        cms.replace("a", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!(stale.code, 409);
    assert_eq!(stale.reason, "Conflict");
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let dup = api_error(
        cms.create(&PostParams::default(), &cm("a", json!({}), json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, "configmaps \"a\" already exists");

    let gone = cms.delete("a", &DeleteParams::default()).await.unwrap();
    let status = gone
        .right()
        .expect("configmaps answer a delete with a Status");
    assert!(status.is_success());
    let nf = api_error(cms.get("a").await.unwrap_err());
    assert_eq!((nf.code, nf.reason.as_str()), (404, "NotFound"));
    assert_eq!(nf.message, "configmaps \"a\" not found");
    let details = nf.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("a", "configmaps")
    );

    // Pods answer with the deleted object.
    let pods: Api<Pod> = Api::default_namespaced(cms.into_client());
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    let p = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(p.metadata.generation, Some(1));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(
        pods.delete("p", &DeleteParams::default())
            .await
            .unwrap()
            .is_left()
    );
}

#[tokio::test]
async fn namespaces_and_names_are_checked() {
    let (_sim, client) = sim().await;
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let e = api_error(
        elsewhere
            .create(&PostParams::default(), &cm("a", json!({}), json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );

    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let ns = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    let names = names(nss.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(
        names,
        vec![
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "team"
        ]
    );

    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let e = api_error(
        cms.create(
            &PostParams::default(),
            &cm("Bad_Name", json!({}), json!({})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", e.message);
    let causes = e.details.unwrap().causes;
    assert_eq!(causes[0].field, "metadata.name");
    assert_eq!(causes[0].reason, "FieldValueInvalid");

    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let g = cms
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for (name, tier) in [
        ("cm-0", "db"),
        ("cm-1", "cache"),
        ("cm-2", "web"),
        ("cm-3", "db"),
        ("cm-4", "db"),
    ] {
        cms.create(
            &PostParams::default(),
            &cm(name, json!({"tier": tier, "app": "x"}), json!({})),
        )
        .await
        .unwrap();
    }
    let db = cms
        .list(&ListParams::default().labels("tier=db"))
        .await
        .unwrap();
    assert_eq!(names(db.items), vec!["cm-0", "cm-3", "cm-4"]);
    let set = cms
        .list(&ListParams::default().labels("tier in (cache,web),app"))
        .await
        .unwrap();
    assert_eq!(names(set.items), vec!["cm-1", "cm-2"]);
    let neg = cms
        .list(&ListParams::default().labels("tier notin (db),!missing"))
        .await
        .unwrap();
    assert_eq!(names(neg.items), vec!["cm-1", "cm-2"]);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=cm-3"))
        .await
        .unwrap();
    assert_eq!(names(by_name.items), vec!["cm-3"]);
    let not_ns = cms
        .list(&ListParams::default().fields("metadata.namespace!=default"))
        .await
        .unwrap();
    assert!(not_ns.items.is_empty());
    let bad = api_error(
        cms.list(&ListParams::default().fields("data.k=v"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (bad.code, bad.message.as_str()),
        (400, "field label not supported: data.k")
    );

    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let snapshot_rv = first.metadata.resource_version.clone();
    // A change after the first page does not show in the later ones.
    cms.delete("cm-4", &DeleteParams::default()).await.unwrap();
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(second.metadata.resource_version, snapshot_rv);
    let token = second.metadata.continue_.clone().expect("a third page");
    assert_eq!(names(second.items), vec!["cm-2", "cm-3"]);
    let third = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(third.metadata.continue_.as_deref().unwrap_or(""), "");
    assert_eq!(names(third.items), vec!["cm-4"]);
    assert_eq!(names(first.items), vec!["cm-0", "cm-1"]);
}

#[tokio::test]
async fn watcher_follows_changes() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(
        &PostParams::default(),
        &cm("before", json!({"app": "w"}), json!({})),
    )
    .await
    .unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default().labels("app=w")).boxed();
    let mut seen = Vec::new();
    let writer = {
        let cms = cms.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cms.create(
                &PostParams::default(),
                &cm("after", json!({"app": "w"}), json!({})),
            )
            .await
            .unwrap();
            cms.create(
                &PostParams::default(),
                &cm("other", json!({"app": "z"}), json!({})),
            )
            .await
            .unwrap();
            merge(&cms, "after", json!({"data": {"k": "1"}})).await;
            // Leaving the selection reads as a deletion.
            merge(
                &cms,
                "before",
                json!({"metadata": {"labels": {"app": "gone"}}}),
            )
            .await;
            cms.delete("after", &DeleteParams::default()).await.unwrap();
        }
    };
    let reader = async {
        while let Some(ev) = events.try_next().await.unwrap() {
            let entry = match ev {
                watcher::Event::Init => "init".to_string(),
                watcher::Event::InitApply(c) => format!("init-apply {}", c.metadata.name.unwrap()),
                watcher::Event::InitDone => "init-done".to_string(),
                watcher::Event::Apply(c) => format!(
                    "apply {} {}",
                    c.metadata.name.unwrap(),
                    c.data.and_then(|d| d.get("k").cloned()).unwrap_or_default()
                ),
                watcher::Event::Delete(c) => format!("delete {}", c.metadata.name.unwrap()),
            };
            let done = entry == "delete after";
            seen.push(entry);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        futures::future::join(writer, reader),
    )
    .await
    .expect("the watch ends in time");
    assert_eq!(
        seen,
        vec![
            "init",
            "init-apply before",
            "init-done",
            "apply after ",
            "apply after 1",
            "delete before",
            "delete after"
        ]
    );
}

#[tokio::test]
async fn watch_from_a_version_bookmarks_and_410() {
    let (_sim, client) = start(Options {
        watch_window: 3,
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let first = create_cm(&cms, "w0").await;
    let rv0 = first.metadata.resource_version.unwrap();
    create_cm(&cms, "w1").await;

    // From a recent version: the changes after it, then bookmarks.
    let mut stream = cms
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("w1")),
        other => panic!("expected ADDED w1, got {other:?}"),
    }
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Bookmark(b) => {
            assert!(b.metadata.resource_version.parse::<u64>().unwrap() > rv0.parse().unwrap())
        }
        other => panic!("expected a BOOKMARK, got {other:?}"),
    }

    for i in 2..6 {
        create_cm(&cms, &format!("w{i}")).await;
    }
    // Out of the window: an ERROR event with a 410 Expired Status.
    let mut old = cms
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    match old.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(
                s.message
                    .starts_with(&format!("too old resource version: {rv0} (")),
                "{}",
                s.message
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    // And a list at that exact version is 410 too.
    let lp = ListParams::default()
        .at(&rv0)
        .matching(kube::api::VersionMatch::Exact);
    let e = api_error(cms.list(&lp).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn patches_merge_json_strategic_and_apply() {
    let (_sim, client) = sim().await;
    // A StatefulSet's pod template: a Pod's own spec may not change beyond
    // its images (ValidatePodUpdate), a template's may.
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let set: StatefulSet = serde_json::from_value(
        json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {
        "selector": {"matchLabels": {"app": "p"}},
        "template": {"metadata": {"labels": {"app": "p"}}, "spec": {"containers": [
            {"name": "cassandra", "image": "cassandra:3.11", "env": [{"name": "A", "value": "1"}]}
        ]}}}}),
    )
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();

    let smp = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "cassandra", "env": [{"name": "B", "value": "2"}]},
        {"name": "sidecar", "image": "sidecar:1"}
    ]}}}});
    let p = sets
        .patch("p", &PatchParams::default(), &Patch::Strategic(smp.clone()))
        .await
        .unwrap();
    let v = serde_json::to_value(&p.spec.unwrap().template.spec).unwrap();
    assert_eq!(v["containers"][0]["image"], "cassandra:3.11");
    assert_eq!(
        v["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    assert_eq!(v["containers"][1]["name"], "sidecar");
    assert_eq!(p.metadata.generation, Some(2));

    let p = merge(
        &sets,
        "p",
        json!({"metadata": {"labels": {"a": null, "b": "2"}}}),
    )
    .await;
    assert_eq!(
        serde_json::to_value(&p.metadata.labels).unwrap(),
        json!({"b": "2"})
    );
    assert_eq!(
        p.metadata.generation,
        Some(2),
        "metadata changes keep the generation"
    );

    let jp: json_patch::Patch = serde_json::from_value(json!([{"op": "replace",
        "path": "/spec/template/spec/containers/0/image", "value": "cassandra:4.1"}]))
    .unwrap();
    let p = sets
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(
        p.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("cassandra:4.1")
    );

    let jp: json_patch::Patch = serde_json::from_value(json!([{"op": "test",
        "path": "/spec/template/spec/containers/0/image", "value": "nope"}]))
    .unwrap();
    let e = api_error(
        sets.patch("p", &PatchParams::default(), &Patch::Json::<()>(jp))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);

    // The same merge on a Pod's own spec is refused.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "cassandra", "image": "cassandra:3.11"}]}}))
        .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let e = api_error(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": smp["spec"]["template"]["spec"]})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));

    // Server-side apply creates, records its manager, and drops what a
    // later apply leaves out.
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PatchParams::apply("kubesim-test").force();
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}});
    let c = cms
        .patch("ssa", &pp, &Patch::Apply(&applied))
        .await
        .unwrap();
    let mf = c.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("kubesim-test"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(
        serde_json::to_value(&mf[0].fields_v1).unwrap(),
        json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}}})
    );
    merge(&cms, "ssa", json!({"metadata": {"labels": {"mine": "z"}}})).await;
    let again = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"x": "1"}}, "data": {"k": "w"}});
    let c = cms.patch("ssa", &pp, &Patch::Apply(&again)).await.unwrap();
    assert_eq!(
        serde_json::to_value(&c.metadata.labels).unwrap(),
        json!({"mine": "z", "x": "1"})
    );
    assert_eq!(c.data.unwrap()["k"], "w");
    let e = api_error(
        cms.patch("ssa", &PatchParams::default(), &Patch::Apply(&again))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400, "apply needs a field manager");
}

#[tokio::test]
async fn cluster_custom_resource_with_status_and_validation() {
    let (_sim, client) = sim().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .create(&PostParams::default(), &crds::crd::definition())
        .await
        .unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let (ar, caps) = discovery
        .groups()
        .find(|g| g.name() == "cassandra.rook.io")
        .expect("the CRD's group is discovered")
        .recommended_kind("Cluster")
        .expect("the Cluster kind is discovered");
    assert_eq!(ar.plural, "clusters");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "clusters/status" || s.plural == "status"),
        "{:?}",
        caps.subresources
    );

    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "rook-cassandra"}})).unwrap(),
    )
    .await
    .unwrap();
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/examples/rook-cluster.yaml"
    ))
    .unwrap();
    let mut cluster: Value = serde_norway::from_str(&yaml).unwrap();
    cluster["status"] = json!({"members": 99});
    let clusters: Api<crds::v1alpha1::Cluster> = Api::namespaced(client.clone(), "rook-cassandra");
    let created: crds::v1alpha1::Cluster = clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(cluster.clone()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is dropped on create");

    let st = clusters
        .patch_status(
            "rook-cassandra",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"members": 3, "readyMembers": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(st.status.as_ref().unwrap().members, 3);
    assert_eq!(st.metadata.generation, Some(1));

    let sp = merge(
        &clusters,
        "rook-cassandra",
        json!({"spec": {"version": "3.11.6"}, "status": {"members": 0}}),
    )
    .await;
    assert_eq!(sp.metadata.generation, Some(2));
    assert_eq!(
        sp.status.unwrap().members,
        3,
        "the main resource ignores status"
    );

    // CEL rules run too: the mode cannot change.
    let e = api_error(
        clusters
            .patch(
                "rook-cassandra",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"mode": "scylla"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.contains("mode is immutable"), "{}", e.message);

    // Unknown fields are pruned, or refused when validation is strict.
    let c = merge(&clusters, "rook-cassandra", json!({"spec": {"bogus": 1}})).await;
    assert_eq!(
        c.metadata.generation,
        Some(2),
        "a pruned change is no change"
    );
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let e = api_error(
        clusters
            .patch(
                "rook-cassandra",
                &strict,
                &Patch::Merge(json!({"spec": {"bogus": 1}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "Cluster in version \"v1alpha1\" cannot be handled as a Cluster: strict decoding error: unknown field \"spec.bogus\""
    );

    // The schema is enforced with the API server's Invalid status.
    let mut bad = cluster.clone();
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["version"] = json!("");
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "rook-cassandra",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cassandra.rook.io", "v1alpha1", "Cluster"),
            "clusters",
        ),
    );
    let e = api_error(
        raw.create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message
            .starts_with("Cluster.cassandra.rook.io \"bad\" is invalid: "),
        "{}",
        e.message
    );
    let details = e.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("cassandra.rook.io", "Cluster")
    );
    assert!(
        details.causes.iter().any(|c| c.field == "spec.version"),
        "{:?}",
        details.causes
    );

    // Deleting the CRD deletes its objects, then stops serving the kind.
    crds.delete("clusters.cassandra.rook.io", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the CRD and its clusters to go", async || {
        gone(&crds, "clusters.cassandra.rook.io").await
    })
    .await;
    let e = api_error(clusters.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 404);
}

#[tokio::test]
async fn owner_references_are_garbage_collected() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let owned_pod = |name: &str, owner: &ConfigMap| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
            "controller": true, "blockOwnerDeletion": true
        }]}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .unwrap()
    };

    let owner = create_cm(&cms, "owner").await;
    pods.create(&PostParams::default(), &owned_pod("dep", &owner))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        pods.get_opt("dep").await.unwrap().is_some(),
        "a dependent of a live owner stays"
    );
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the dependent pod to be collected", async || {
        gone(&pods, "dep").await
    })
    .await;

    // Foreground: the owner waits, marked, until its dependents are gone.
    let owner = create_cm(&cms, "fg").await;
    let mut held = owned_pod("held", &owner);
    held.metadata.finalizers = Some(vec!["test.kubesim/hold".into()]);
    pods.create(&PostParams::default(), &held).await.unwrap();
    let marked = cms
        .delete("fg", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        marked.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(marked.metadata.deletion_timestamp.is_some());
    eventually("the dependent to be marked for deletion", async || {
        pods.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    assert!(cms.get_opt("fg").await.unwrap().is_some());
    merge(&pods, "held", json!({"metadata": {"finalizers": null}})).await;
    eventually("the foreground owner to go", async || {
        gone(&cms, "fg").await
    })
    .await;

    // Orphan: the dependent stays, without its owner reference.
    let owner = create_cm(&cms, "orph").await;
    pods.create(&PostParams::default(), &owned_pod("kept", &owner))
        .await
        .unwrap();
    cms.delete("orph", &DeleteParams::orphan()).await.unwrap();
    eventually("the orphaning to finish", async || gone(&cms, "orph").await).await;
    let kept = pods.get("kept").await.unwrap();
    assert_eq!(kept.metadata.owner_references, None);
}

#[tokio::test]
async fn scale_subresource_of_a_statefulset() {
    let (_sim, client) = sim().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(client);
    let s: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "rack"}, "spec": {
        "replicas": 1, "serviceName": "rack", "selector": {"matchLabels": {"app": "c"}},
        "template": {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    }}))
    .unwrap();
    sts.create(&PostParams::default(), &s).await.unwrap();
    let scale = sts.get_scale("rack").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=c"));
    let scaled = sts
        .patch_scale(
            "rack",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    let s = sts.get("rack").await.unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(3));
    assert_eq!(s.metadata.generation, Some(2));
    let st = sts
        .patch_status(
            "rack",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3, "readyReplicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(st.status.unwrap().ready_replicas, Some(2));
}

/// The test world's endpoints (`/sim/...`): plain HTTP on their own port.
async fn admin(sim: &KubeSim, method: &str, path: &str, body: Value) -> Value {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let resp = http
        .request(method, format!("{}{path}", sim.sim_url()))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

#[tokio::test]
async fn faults_and_the_request_log() {
    let (sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cfg = admin(
        &sim,
        "PUT",
        "/sim/faults",
        json!({"conflictRate": 1.0, "verbs": ["create"]}),
    )
    .await;
    assert_eq!(cfg["conflictRate"], 1.0);
    let e = api_error(
        cms.create(&PostParams::default(), &cm("f", json!({}), json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "reads are not affected"
    );

    // kube retries a 429 by itself, after the Retry-After second the server asks for.
    sim.set_faults(FaultConfig {
        throttle_rate: 0.3,
        resources: vec!["configmaps".into()],
        ..FaultConfig::default()
    });
    sim.clear_requests();
    for _ in 0..4 {
        cms.list(&ListParams::default()).await.unwrap();
    }
    let codes: Vec<u16> = sim.requests().iter().map(|r| r.code).collect();
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 4);
    assert!(
        codes.iter().filter(|c| **c == 429).count() >= 1,
        "{codes:?}"
    );
    // Without retries the fault reaches the caller.
    let bare: Api<ConfigMap> =
        Api::default_namespaced(client_without_retries(&sim.kubeconfig()).await);
    sim.set_faults(FaultConfig {
        throttle_rate: 1.0,
        ..FaultConfig::default()
    });
    let e = api_error(bare.get("x").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    sim.set_faults(FaultConfig {
        error_rate: 1.0,
        ..FaultConfig::default()
    });
    let e = api_error(bare.get("x").await.unwrap_err());
    assert_eq!(e.code, 500);
    admin(&sim, "DELETE", "/sim/faults", json!({})).await;

    admin(&sim, "DELETE", "/sim/requests", json!({})).await;
    create_cm(&cms, "counted").await;
    merge(&cms, "counted", json!({"data": {"a": "b"}})).await;
    cms.get("counted").await.unwrap();
    let log = admin(&sim, "GET", "/sim/requests", json!({})).await;
    let items = log["items"].as_array().unwrap();
    let verbs: Vec<&str> = items.iter().map(|r| r["verb"].as_str().unwrap()).collect();
    assert_eq!(verbs, vec!["create", "patch", "get"]);
    assert_eq!(
        items[1]["path"],
        "/api/v1/namespaces/default/configmaps/counted"
    );
    assert_eq!(items[1]["contentType"], "application/merge-patch+json");
    assert_eq!(items[1]["code"], 200);
    assert!(items[0]["userAgent"].is_string());
    assert_eq!(sim.requests().iter().filter(|r| r.is_write()).count(), 2);
}

#[tokio::test]
async fn nodes_per_zone() {
    let (_sim, client) = start(Options {
        zones: vec!["europe-west1-b".into(), "europe-west1-c".into()],
        nodes_per_zone: 2,
        ..Options::default()
    })
    .await;
    let nodes: Api<Node> = Api::all(client);
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        4
    );
    let c = nodes
        .list(
            &ListParams::default().labels("failure-domain.beta.kubernetes.io/zone=europe-west1-c"),
        )
        .await
        .unwrap();
    let names = names(c.items);
    assert_eq!(
        names,
        vec!["node-europe-west1-c-0", "node-europe-west1-c-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_gets_and_applies() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let (sim, _client) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    // The machine's kubectl, whatever its version.
    let k = Kubectl {
        binary: "kubectl".into(),
        kubeconfig: sim.write_kubeconfig(dir.path()).unwrap(),
        cache: dir.path().join("kubectl-cache"),
    };
    let run = |args: &[&str]| tokio::task::block_in_place(|| k.run(args));
    let kubectl = |args: &[&str]| tokio::task::block_in_place(|| k.ok(args));
    let (ok, out, err) = run(&["get", "pods", "-A"]);
    assert!(ok, "{err}");
    assert_eq!(out, "");
    assert_eq!(err.trim(), "No resources found");

    let m = dir.path().join("cm.yaml");
    std::fs::write(&m, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\n  labels: {app: x}\ndata:\n  k: v\n").unwrap();
    let m = m.to_str().unwrap();
    assert_eq!(
        kubectl(&["apply", "-f", m]).trim(),
        "configmap/hello created"
    );
    assert_eq!(
        kubectl(&["apply", "-f", m]).trim(),
        "configmap/hello unchanged"
    );
    let out = kubectl(&[
        "get",
        "cm",
        "-l",
        "app=x",
        "-o",
        "jsonpath={.items[*].data.k}",
    ]);
    assert_eq!(out, "v");
    let out = kubectl(&["get", "nodes"]);
    assert!(out.starts_with("NAME") && out.contains("node-a-0"), "{out}");
    assert_eq!(
        kubectl(&["delete", "cm", "hello"]).trim(),
        "configmap \"hello\" deleted"
    );

    // The operator's install manifest applies as it is.
    let out = kubectl(&[
        "apply",
        "-f",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/operator.yaml"),
    ]);
    assert!(
        out.contains("deployment.apps/cassandra-operator created"),
        "{out}"
    );
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/cassandra-operator created"),
        "{out}"
    );

    // kubectl's generators send protobuf.
    assert_eq!(
        kubectl(&["create", "namespace", "team"]).trim(),
        "namespace/team created"
    );
    kubectl(&[
        "create",
        "configmap",
        "gen",
        "-n",
        "team",
        "--from-literal=a=b",
    ]);
    kubectl(&[
        "create",
        "secret",
        "generic",
        "pw",
        "-n",
        "team",
        "--from-literal=p=abc",
    ]);
    let out = kubectl(&[
        "get",
        "cm,secret",
        "-n",
        "team",
        "-o",
        "jsonpath={.items[*].data}",
    ]);
    assert_eq!(out, r#"{"a":"b"} {"p":"YWJj"}"#);
    let writes: Vec<String> = sim
        .requests()
        .iter()
        .filter(|r| r.is_write() && r.user_agent.starts_with("kubectl"))
        .map(|r| format!("{} {}", r.verb, r.name))
        .collect();
    assert_eq!(
        writes,
        vec![
            "create ",
            "delete hello",
            // manifests/operator.yaml: the CRD, the namespace, the
            // ServiceAccount, the Role to read its own Pod and its
            // RoleBinding, the Role for the CA Secrets and its
            // RoleBinding, ClusterRole, ClusterRoleBinding, the members'
            // certificates ClusterRole, the members'
            // ValidatingAdmissionPolicy and its binding, Deployment
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            "create ",
            // the namespace, the ConfigMap and the Secret
            "create ",
            "create ",
            "create "
        ],
        "kubectl's second apply writes nothing"
    );
}

#[tokio::test]
async fn slow_responses_and_dropped_watches() {
    let (sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    sim.set_faults(FaultConfig {
        slow_rate: 1.0,
        slow_ms: 300,
        verbs: vec!["get".into()],
        ..FaultConfig::default()
    });
    let t = Instant::now();
    assert!(gone(&cms, "x").await);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "lists are not slowed"
    );

    sim.set_faults(FaultConfig {
        drop_watch_rate: 1.0,
        drop_watch_after_ms: 200,
        ..FaultConfig::default()
    });
    let t = Instant::now();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = stream.try_next().await.unwrap() {
            assert!(matches!(ev, WatchEvent::Bookmark(_)), "{ev:?}");
        }
    })
    .await;
    assert!(ended.is_ok(), "the server closed the watch");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[tokio::test]
async fn metadata_only_reads_and_watches() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(
        &PostParams::default(),
        &cm("m", json!({"app": "m"}), json!({"big": "data"})),
    )
    .await
    .unwrap();
    let one = cms.get_metadata("m").await.unwrap();
    assert_eq!(one.types.unwrap().kind, "PartialObjectMetadata");
    assert_eq!(one.metadata.labels.unwrap()["app"], "m");
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let meta: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(cms.into_client());
    let mut events = watcher(meta, watcher::Config::default()).boxed();
    let names = tokio::time::timeout(Duration::from_secs(5), async {
        let mut names = Vec::new();
        while let Some(ev) = events.try_next().await.unwrap() {
            match ev {
                watcher::Event::InitApply(m) => names.push(m.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        names
    })
    .await
    .unwrap();
    assert_eq!(names, vec!["m"]);
}

#[tokio::test]
async fn events_of_both_apis_are_one_store() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = create_cm(&cms, "subject").await;
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: owner.metadata.name.clone(),
        namespace: owner.metadata.namespace.clone(),
        uid: owner.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "cassandra-operator".into(),
            instance: Some("operator-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "RackCreated".into(),
        note: Some("rack r1 created".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();

    // The core API (kubectl get events, describe) sees the same Event.
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=subject,reason=RackCreated"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("rack r1 created"));
    assert_eq!(e.reporting_component.as_deref(), Some("cassandra-operator"));
    assert_eq!(e.involved_object.uid, owner.metadata.uid);
    assert_eq!(
        e.series.as_ref().map(|s| s.count),
        Some(Some(2)),
        "the second publish updated the series"
    );

    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client);
    let got = v1
        .list(&ListParams::default().fields("regarding.name=subject"))
        .await
        .unwrap();
    assert_eq!(got.items.len(), 1);
    assert_eq!(got.items[0].note.as_deref(), Some("rack r1 created"));
}

#[tokio::test]
async fn defaults_cluster_ips_and_idempotent_apply() {
    use k8s_openapi::api::core::v1::Service;
    let (_sim, client) = sim().await;
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let k = svcs.get("kubernetes").await.unwrap();
    assert_eq!(k.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.1"));
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "cql"}, "spec": {"ports": [{"port": 9042}]}}),
    )
    .unwrap();
    let s = svcs
        .create(&PostParams::default(), &svc)
        .await
        .unwrap()
        .spec
        .unwrap();
    // At random in the service range, as the real allocator picks it.
    let ip = s.cluster_ip.clone().unwrap();
    let octets: Vec<u32> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    assert!(
        octets[0] == 10 && (96..112).contains(&octets[1]) && ip != "10.96.0.1",
        "{ip}"
    );
    assert_eq!(s.type_.as_deref(), Some("ClusterIP"));
    // An update that leaves the allocated IP out keeps it.
    let mut again = svcs.get("cql").await.unwrap();
    again.spec.as_mut().unwrap().cluster_ip = None;
    again.spec.as_mut().unwrap().cluster_ips = None;
    let kept = svcs
        .replace("cql", &PostParams::default(), &again)
        .await
        .unwrap();
    assert_eq!(kept.spec.unwrap().cluster_ip, Some(ip));

    // What an operator applies is defaulted, and applying it again writes nothing.
    let sts: Api<StatefulSet> = Api::default_namespaced(client);
    let desired = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "rack"}, "spec": {
        "serviceName": "rack", "selector": {"matchLabels": {"app": "c"}},
        "template": {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [{"name": "cassandra", "image": "cassandra:4.1.8"}]}}
    }});
    let pp = PatchParams::apply("cassandra-operator").force();
    let first = sts
        .patch("rack", &pp, &Patch::Apply(&desired))
        .await
        .unwrap();
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("OrderedReady"));
    let c = &spec.template.spec.unwrap().containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    let second = sts
        .patch("rack", &pp, &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    assert_eq!(second.metadata.generation, Some(1));
}

#[tokio::test]
async fn watcher_with_streaming_lists() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for n in ["s1", "s2"] {
        cms.create(
            &PostParams::default(),
            &cm(n, json!({"app": "s"}), json!({})),
        )
        .await
        .unwrap();
    }
    let cfg = watcher::Config::default().labels("app=s").streaming_lists();
    let mut events = watcher(cms.clone(), cfg).boxed();
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        let mut seen = Vec::new();
        while let Some(ev) = events.try_next().await.unwrap() {
            match ev {
                watcher::Event::Init => seen.push("init".to_string()),
                watcher::Event::InitApply(c) => seen.push(c.metadata.name.unwrap()),
                watcher::Event::InitDone => {
                    seen.push("done".to_string());
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        seen
    })
    .await
    .expect("the initial events end with a bookmark");
    assert_eq!(seen, vec!["init", "s1", "s2", "done"]);
}

#[tokio::test]
async fn apply_conflicts_between_managers() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let cfg = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"k": v}});
    cms.patch(
        "shared",
        &PatchParams::apply("alice"),
        &Patch::Apply(&cfg("1")),
    )
    .await
    .unwrap();
    // The same value is shared ownership, not a conflict.
    cms.patch(
        "shared",
        &PatchParams::apply("bob"),
        &Patch::Apply(&cfg("1")),
    )
    .await
    .unwrap();
    let e = api_error(
        cms.patch(
            "shared",
            &PatchParams::apply("bob"),
            &Patch::Apply(&cfg("2")),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using v1: .data.k"
    );
    let cause = &e.details.unwrap().causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.field.as_str()),
        ("FieldManagerConflict", ".data.k")
    );
    let forced = cms
        .patch(
            "shared",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&cfg("2")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k"], "2");
    let alice = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("alice"))
        .unwrap();
    assert_eq!(
        serde_json::to_value(alice.fields_v1).unwrap(),
        json!({"f:data": {}}),
        "bob took .data.k over"
    );
}

#[tokio::test]
async fn dry_run_and_delete_collection() {
    let (sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let rv = sim.store().resource_version();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let shown = cms
        .create(&dry, &cm("dry", json!({}), json!({"k": "v"})))
        .await
        .unwrap();
    assert_eq!(shown.data.unwrap()["k"], "v");
    assert!(gone(&cms, "dry").await, "a dry run stores nothing");
    assert_eq!(sim.store().resource_version(), rv);

    for (n, tier) in [("d0", "db"), ("d1", "db"), ("w0", "web")] {
        cms.create(
            &PostParams::default(),
            &cm(n, json!({"tier": tier}), json!({})),
        )
        .await
        .unwrap();
    }
    let gone = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=db"),
        )
        .await
        .unwrap();
    let deleted = names(gone.left().unwrap().items);
    assert_eq!(deleted, vec!["d0", "d1"]);
    let left = names(cms.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(left, vec!["w0"]);
}

#[tokio::test]
async fn updates_record_their_manager() {
    let (_sim, client) = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams {
        field_manager: Some("creator".into()),
        ..PostParams::default()
    };
    let c = cms
        .create(
            &pp,
            &cm("owned", json!({"a": "1"}), json!({"k": "v", "j": "w"})),
        )
        .await
        .unwrap();
    let mf = c.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("creator"), Some("Update"))
    );
    assert_eq!(
        serde_json::to_value(&mf[0].fields_v1).unwrap(),
        json!({"f:data": {"f:j": {}, "f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}})
    );

    // A patch by another manager takes over the field it changed.
    let patcher = PatchParams {
        field_manager: Some("patcher".into()),
        ..PatchParams::default()
    };
    let p = cms
        .patch(
            "owned",
            &patcher,
            &Patch::Merge(json!({"data": {"k": "x"}})),
        )
        .await
        .unwrap();
    let fields = |c: &ConfigMap, who: &str| {
        c.metadata
            .managed_fields
            .iter()
            .flatten()
            .find(|m| m.manager.as_deref() == Some(who))
            .map(|m| serde_json::to_value(&m.fields_v1).unwrap())
    };
    assert_eq!(fields(&p, "patcher"), Some(json!({"f:data": {"f:k": {}}})));
    assert_eq!(
        fields(&p, "creator"),
        Some(json!({"f:data": {"f:j": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}))
    );

    // Applying over an updater's field with another value conflicts.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"j": "z"}});
    let e = api_error(
        cms.patch("owned", &PatchParams::apply("op"), &Patch::Apply(&applied))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        "Apply failed with 1 conflict: conflict with \"creator\" using v1: .data.j"
    );
}

/// An applier that stops applying a struct removes it whole when no other
/// manager owns anything in it (structured-merge-diff#184), even on an
/// object created by a POST of the same manager name and scaled by a
/// merge patch: a StatefulSet's affinity, dropped from the operator's
/// applied configuration, leaves the template.
#[tokio::test]
async fn an_apply_that_drops_a_struct_removes_it() {
    let (_sim, client) = sim().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(client);
    let desired = |affinity: bool| {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "rack"}, "spec": {
            "serviceName": "rack", "selector": {"matchLabels": {"app": "c"}},
            "template": {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [{"name": "cassandra", "image": "cassandra:4.1.8"}]}}
        }});
        if affinity {
            d["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}});
        }
        d
    };
    let mut created = desired(false);
    created["spec"]["replicas"] = json!(0);
    let post = PostParams {
        field_manager: Some("cassandra-operator".into()),
        ..Default::default()
    };
    sts.create(&post, &serde_json::from_value(created).unwrap())
        .await
        .unwrap();
    merge(&sts, "rack", json!({"spec": {"replicas": 3}})).await;
    let apply = PatchParams::apply("cassandra-operator").force();
    let with = sts
        .patch("rack", &apply, &Patch::Apply(&desired(true)))
        .await
        .unwrap();
    assert!(with.spec.unwrap().template.spec.unwrap().affinity.is_some());
    let without = sts
        .patch("rack", &apply, &Patch::Apply(&desired(false)))
        .await
        .unwrap();
    let spec = without.spec.unwrap();
    assert_eq!(spec.template.spec.unwrap().affinity, None);
    assert_eq!(spec.replicas, Some(3), "what the apply never owned stays");
}
