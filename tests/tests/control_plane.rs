//! The real Kubernetes control plane of the test world (issue 29): upstream
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
//! by `scripts/build-control-plane` (this test builds nothing; it fails
//! saying so when the binaries are missing) and started by
//! `testworld::control_plane` with TLS, RBAC and Node authorization and
//! GKE's admission plugins.
//!
//! One test proves, against upstream's code rather than a copy of it:
//! - the operator's CRD is accepted by the real API server (structural
//!   schema, CEL rules within the real cost budget) and becomes Established;
//! - a Cluster its CEL rules refuse is refused by the real API server with
//!   the rule's message, both a rule on the object alone (the name) and a
//!   transition rule (a downgrade across minors, which needs `oldSelf`), and
//!   the refused update leaves the stored object as it was;
//! - PodSecurity is enforced: a privileged Pod in a `restricted` namespace
//!   is forbidden;
//! - a Deployment gets a ReplicaSet from the real Deployment controller and
//!   Pods from the real ReplicaSet controller (each owned by the one
//!   above), the Pods get the ServiceAccount token volume from the real
//!   ServiceAccount admission, the namespace gets `kube-root-ca.crt` (this
//!   control plane's CA) from the root CA publisher, and the real scheduler,
//!   finding no Node, marks each Pod `PodScheduled=False` (`Unschedulable`)
//!   and binds none;
//! - a kubelet's credential (`system:node:<name>` in `system:nodes`, signed
//!   by the cluster CA) is confined by the Node authorizer and the
//!   NodeRestriction admission plugin: it may register its own Node (which
//!   TaintNodesByCondition taints not-ready) but not another, and may not
//!   read Secrets.
//!
//! It prints the start-up time of each component and their resident memory.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testworld::control_plane::{self, ControlPlane};

#[allow(dead_code)]
mod support;

const WAIT: Duration = Duration::from_secs(60);

/// Polls `f` until it returns `Some`, panicking with `what` after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {} s",
            WAIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The status message of an API error, or a panic naming `what` when the
/// request did not fail as a 4xx from the API server.
fn refusal<T: std::fmt::Debug>(what: &str, result: kube::Result<T>, code: u16) -> String {
    match result {
        Err(kube::Error::Api(e)) if e.code == code => e.message.clone(),
        other => panic!("{what}: expected the API server to refuse it with {code}, got {other:?}"),
    }
}

fn cluster(name: &str, version: &str) -> DynamicObject {
    let mut cluster = support::valid_cluster();
    cluster["metadata"]["name"] = json!(name);
    cluster["spec"]["version"] = json!(version);
    serde_json::from_value(cluster).expect("a Cluster")
}

async fn create_namespace(client: &Client, name: &str, enforce: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"pod-security.kubernetes.io/enforce": enforce}}}))
    .expect("a namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// Installs the operator's CRD and waits until the API server serves it.
async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds::crd::definition();
    let name = crd.metadata.name.clone().expect("the CRD has a name");
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("the real API server refused the operator's CRD: {e}"));
    eventually("the CRD Established", || async {
        let crd = crds.get(&name).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// (a) The CRD's CEL rules, evaluated by the real API server.
async fn cel_rules_refuse(client: &Client) {
    let gvk = GroupVersionKind::gvk("cassandra.rook.io", "v1alpha1", "Cluster");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "db", &ApiResource::from_gvk(&gvk));
    let pp = PostParams::default();

    // A rule on the object alone: "1cassandra" is a valid object name (a
    // DNS subdomain) but not a DNS-1035 label, which the member Services need.
    let message = refusal(
        "a Cluster named 1cassandra",
        clusters.create(&pp, &cluster("1cassandra", "4.1.8")).await,
        422,
    );
    assert!(
        message.contains("metadata.name must be a DNS-1035 label"),
        "{message}"
    );
    // The rule's fieldPath names the field (the schema declares
    // metadata.name so that the API server accepts that path).
    assert!(
        message.contains("metadata.name: Invalid value"),
        "{message}"
    );
    println!("refused on create: {message}");

    // A transition rule: 4.1.8 → 4.0.13 is a downgrade across minors.
    clusters
        .create(&pp, &cluster("cassandra", "4.1.8"))
        .await
        .unwrap_or_else(|e| panic!("a valid Cluster was refused: {e}"));
    let mut stored = clusters.get("cassandra").await.expect("the stored Cluster");
    stored.data["spec"]["version"] = json!("4.0.13");
    let message = refusal(
        "a downgrade from 4.1.8 to 4.0.13",
        clusters.replace("cassandra", &pp, &stored).await,
        422,
    );
    assert!(
        message.contains(
            "a downgrade across minor versions is not supported by Cassandra (a node cannot read data written by a newer version)"
        ),
        "{message}"
    );
    println!("refused on update: {message}");
    let after = clusters.get("cassandra").await.expect("the stored Cluster");
    assert_eq!(after.data["spec"]["version"], "4.1.8");
}

/// PodSecurity: a privileged Pod in a `restricted` namespace is forbidden.
async fn pod_security_enforced(client: &Client) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "securityContext": {"privileged": true}}]}
    }))
    .expect("a Pod");
    let message = refusal(
        "a privileged Pod in a restricted namespace",
        Api::<Pod>::namespaced(client.clone(), "db")
            .create(&PostParams::default(), &pod)
            .await,
        403,
    );
    assert!(
        message.contains("violates PodSecurity \"restricted:latest\""),
        "{message}"
    );
}

/// (b) The Deployment and ReplicaSet controllers and the scheduler.
async fn deployment_runs_through_the_controllers(client: &Client, ca_pem: &str) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .expect("a Deployment");
    let created = Api::<Deployment>::namespaced(client.clone(), "apps")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("creating the Deployment");
    let deployment_uid = created.metadata.uid.expect("a uid");

    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "apps");
    let rs = eventually("a ReplicaSet of the Deployment", || async {
        replica_sets
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|rs| {
                rs.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "Deployment" && o.uid == deployment_uid && o.controller == Some(true)
                })
            })
    })
    .await;
    let rs_uid = rs.metadata.uid.clone().expect("a uid");
    assert_eq!(rs.spec.as_ref().and_then(|s| s.replicas), Some(2));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let owned = |p: &Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ReplicaSet" && o.uid == rs_uid && o.controller == Some(true))
    };
    let unschedulable = eventually("2 Pods of the ReplicaSet, unschedulable", || async {
        let list = pods.list(&ListParams::default()).await.ok()?.items;
        let mine: Vec<Pod> = list.into_iter().filter(owned).collect();
        let messages: Vec<String> = mine
            .iter()
            .filter_map(|p| {
                p.status
                    .as_ref()?
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    })
                    .map(|c| c.message.clone().unwrap_or_default())
            })
            .collect();
        (mine.len() == 2 && messages.len() == 2).then_some((mine, messages))
    })
    .await;
    let (mine, messages) = unschedulable;
    for pod in &mine {
        let spec = pod.spec.as_ref().expect("a Pod spec");
        assert_eq!(spec.node_name, None, "no Node, so no binding");
        // The ServiceAccount admission plugin's projected token volume.
        assert!(
            spec.volumes
                .iter()
                .flatten()
                .any(|v| v.name.starts_with("kube-api-access-")
                    && v.projected.as_ref().is_some_and(|p| p
                        .sources
                        .iter()
                        .flatten()
                        .any(|s| s.service_account_token.is_some()))),
            "{:?}",
            spec.volumes
        );
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
    }
    println!("scheduler: {}", messages[0]);

    let root_ca = eventually("kube-root-ca.crt in apps", || async {
        Api::<ConfigMap>::namespaced(client.clone(), "apps")
            .get_opt("kube-root-ca.crt")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(
        root_ca
            .data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(String::as_str),
        Some(ca_pem)
    );
}

/// A kubelet's credential: its own Node only, no Secrets.
async fn node_credentials_are_confined(plane: &ControlPlane) {
    let kubeconfig = plane
        .write_client_kubeconfig("system:node:gke-a", &["system:nodes"])
        .expect("a node kubeconfig");
    let node_client = control_plane::client_from(&kubeconfig)
        .await
        .expect("the node's client");
    let nodes: Api<Node> = Api::all(node_client.clone());
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"topology.kubernetes.io/zone": "europe-west1-b"}}}))
        .expect("a Node")
    };
    let registered = nodes
        .create(&PostParams::default(), &node("gke-a"))
        .await
        .unwrap_or_else(|e| panic!("a kubelet registering its own Node: {e}"));
    assert!(
        registered
            .spec
            .and_then(|s| s.taints)
            .into_iter()
            .flatten()
            .any(|t| t.key == "node.kubernetes.io/not-ready" && t.effect == "NoSchedule"),
        "TaintNodesByCondition taints a new Node not-ready"
    );
    let message = refusal(
        "gke-a registering gke-b",
        nodes.create(&PostParams::default(), &node("gke-b")).await,
        403,
    );
    assert!(
        message.contains("not allowed to modify node \"gke-b\""),
        "{message}"
    );
    refusal(
        "a Node listing Secrets",
        Api::<Secret>::namespaced(node_client, "db")
            .list(&ListParams::default())
            .await,
        403,
    );
}

/// See the file's doc comment.
#[tokio::test]
async fn real_control_plane_runs_the_crd_rules_and_the_controllers() {
    let plane = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"));
    let startup = plane.startup();
    println!(
        "control plane {} ready in {:.1} s (kube-apiserver {:.1} s, kube-controller-manager {:.1} s, kube-scheduler {:.1} s)",
        control_plane::version().expect("the version"),
        startup.total.as_secs_f64(),
        startup.api_server.as_secs_f64(),
        startup.controller_manager.as_secs_f64(),
        startup.scheduler.as_secs_f64(),
    );
    println!("RSS at start: {}", plane.rss_summary());
    let client = plane.client().await.expect("the admin client");

    // The API server is the release go.mod pins, stamped as a release is.
    let version = client.apiserver_version().await.expect("/version");
    assert_eq!(
        version.git_version,
        control_plane::version().expect("the version")
    );

    install_crd(&client).await;
    create_namespace(&client, "db", "restricted").await;
    create_namespace(&client, "apps", "baseline").await;
    cel_rules_refuse(&client).await;
    pod_security_enforced(&client).await;
    deployment_runs_through_the_controllers(&client, plane.ca_pem()).await;
    node_credentials_are_confined(&plane).await;

    println!("RSS at the end: {}", plane.rss_summary());
}
