//! The real Kubernetes control plane of the test world (issue 29): upstream
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
//! by `scripts/build-control-plane` (this test builds nothing; it fails
//! saying so when the binaries are missing) and started by
//! `testworld::control_plane` with TLS, RBAC and Node authorization and
//! GKE's admission plugins.
//!
//! The first test proves, against upstream's code rather than a copy of it:
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
//!
//! The second runs the operator on hollow nodes
//! ([`testworld::hollow_nodes`]) of this control plane: see its doc
//! comment.

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

/// `kubectl` (the machine's) against the control plane as its admin;
/// panics with its output when it fails.
fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    let (ok, out) = try_kubectl(plane, args);
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

/// A member a phase takes down: its Node, its volume and its claim.
struct Victim {
    node: String,
    volume: String,
    claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    claim: String,
    claim_uid: String,
}

impl Victim {
    async fn of(client: &Client, member: &str) -> Victim {
        let (node, volume, _) = member_placement(client, member)
            .await
            .expect("the member placed");
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(client.clone(), "db");
        let claim = format!("data-{member}");
        let claim_uid = claims.get(&claim).await.unwrap().metadata.uid.unwrap();
        Victim {
            node,
            volume,
            claims,
            claim,
            claim_uid,
        }
    }
}

/// Cluster `c`'s Ready members, as its status counts them.
async fn ready_members(clusters: &Api<DynamicObject>) -> Option<i64> {
    clusters
        .get_opt("c")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data.pointer("/status/readyMembers")?.as_i64())
}

/// What a node's Pods and claims look like once a member runs: (Pod's
/// node, its claim's volume, the node the volume is on).
async fn member_placement(client: &Client, pod: &str) -> Option<(String, String, String)> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let pod = Api::<Pod>::namespaced(client.clone(), "db")
        .get_opt(pod)
        .await
        .ok()??;
    let node = pod.spec?.node_name?;
    let claim_name = format!("data-{}", pod.metadata.name?);
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "db")
        .get_opt(&claim_name)
        .await
        .ok()??;
    (claim.status?.phase.as_deref() == Some("Bound")).then_some(())?;
    let volume_name = claim.spec?.volume_name?;
    let volume = Api::<PersistentVolume>::all(client.clone())
        .get_opt(&volume_name)
        .await
        .ok()??;
    let on = volume.spec?.node_affinity?.required?.node_selector_terms[0]
        .match_expressions
        .as_ref()?[0]
        .values
        .as_ref()?[0]
        .clone();
    Some((node, volume_name, on))
}

/// The operator installed with the README's `kubectl apply -k manifests/`
/// on the real control plane and hollow nodes
/// ([`testworld::hollow_nodes`]: registered, Ready and leased through the
/// real API with kubelet credentials, Pods reported running, a local
/// volume provisioner):
/// - the operator's Deployment is Available through the real Deployment
///   and ReplicaSet controllers, the scheduler and a hollow node;
/// - `kubectl create role` works (kubesim refuses RBAC kinds' protobuf);
/// - the controller (the real binary, a host process, authenticated as the
///   operator's ServiceAccount and so authorized by the installed
///   ClusterRole alone, through the real RBAC authorizer with its
///   escalation checks) brings a 3-member Cluster in a `restricted`
///   namespace to 3 Ready members: its StatefulSet's Pods are made by the
///   real StatefulSet controller, pass the real PodSecurity admission,
///   are placed by the real scheduler, and their claims are bound by the
///   real PV binder to volumes on the nodes the Pods run on.
/// - then a member's Node stops reporting
///   ([`unreachable_node_keeps_its_member`]), another member's Node is
///   deleted with its disk ([`deleted_node_has_its_member_replaced`]), and
///   two Nodes are drained with `kubectl drain`
///   ([`drains_respect_the_budget`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_installed_by_kustomize_brings_up_a_cluster_on_hollow_nodes() {
    use testworld::hollow_nodes::{self, HollowNodes, NodeSpec};
    // Node timings shortened as kubesim's `--node-time-scale` does: 8 s
    // of grace (50 s upstream) and 10 s of toleration (300 s).
    let plane = ControlPlane::start_with(control_plane::NodeTimings {
        monitor_grace: Some(Duration::from_secs(8)),
        eviction_toleration: Some(Duration::from_secs(10)),
    })
    .await
    .unwrap_or_else(|e| panic!("starting the control plane: {e}"));
    let client = plane.client().await.expect("the admin client");
    let zones = ["europe-west1-b", "europe-west1-c", "europe-west1-d"];
    let specs: Vec<NodeSpec> = zones
        .iter()
        .flat_map(|z| (0..2).map(move |i| NodeSpec::in_zone(&format!("gke-{z}-{i}"), z)))
        .collect();
    let hollow = HollowNodes::start(&plane, &specs)
        .await
        .unwrap_or_else(|e| panic!("starting the hollow nodes: {e}"));
    // The node-lifecycle controller lifts the not-ready taint
    // TaintNodesByCondition put on each new Node, once it is Ready.
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("6 Nodes Ready and untainted", || async {
        let list = nodes.list(&ListParams::default()).await.ok()?.items;
        let schedulable = list
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_none_or(|t| t.is_empty())
            })
            .count();
        (schedulable == specs.len()).then_some(())
    })
    .await;
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &hollow_nodes::storage_class("hollow-local"),
        )
        .await
        .expect("the StorageClass");

    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");
    kubectl(&plane, &["apply", "-k", manifests]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "cassandra-operator");
    eventually("the operator's Deployment Available", || async {
        let d = deployments.get_opt("cassandra-operator").await.ok()??;
        (d.status?.available_replicas? >= 1).then_some(())
    })
    .await;

    create_namespace(&client, "db", "restricted").await;
    let role = kubectl(
        &plane,
        &[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
            "-n",
            "db",
        ],
    );
    assert!(
        role.contains("role.rbac.authorization.k8s.io/reader created"),
        "{role}"
    );

    // The controller as the operator's ServiceAccount: RBAC matches a
    // ServiceAccount subject by its user name, so a client certificate
    // naming it is authorized exactly as the Pod's token would be.
    let kubeconfig = plane
        .write_client_kubeconfig(
            "system:serviceaccount:cassandra-operator:cassandra-operator",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:cassandra-operator",
            ],
        )
        .expect("the operator's kubeconfig");
    let exe = std::env::current_exe().expect("the test binary");
    // target/debug/deps/<test> → target/debug/cassandra-operator
    let operator = testworld::harness::beside(exe.parent().unwrap(), "cassandra-operator")
        .expect("target/debug/cassandra-operator (scripts/test builds it first: cargo build -p cassandra-operator --bins)");
    let log = plane.dir().join("controller.log");
    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let _controller = testworld::harness::Process(
        std::process::Command::new(&operator)
            .arg("controller")
            .args(["--operator-namespace", "cassandra-operator"])
            .env("KUBECONFIG", &kubeconfig)
            .env("METRICS_ADDR", &metrics)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the controller starts"),
    );

    let mut spec = support::valid_cluster();
    spec["metadata"] = json!({"name": "c", "namespace": "db"});
    spec["spec"]["version"] = json!("4.1.8");
    spec["spec"]["datacenter"] = json!({"name": "dc", "racks": [{
        "name": "r", "members": 3,
        "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"storageClassName": "hollow-local",
                "resources": {"requests": {"storage": "1Gi"}}}}]},
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }]});
    let gvk = GroupVersionKind::gvk("cassandra.rook.io", "v1alpha1", "Cluster");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "db", &ApiResource::from_gvk(&gvk));
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(spec).expect("a Cluster"),
        )
        .await
        .unwrap_or_else(|e| panic!("creating the Cluster: {e}"));
    let began = Instant::now();
    let waited = tokio::time::timeout(Duration::from_secs(180), async {
        loop {
            let ready = ready_members(&clusters).await;
            if ready == Some(3) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "3 Ready members not within 180 s; refused on the nodes: {:?}; the controller's log:\n{}",
        hollow.seen(|s| s.refused.clone()),
        testworld::harness::tail(&log)
    );
    println!(
        "3 members Ready in {:.1} s through the real controllers",
        began.elapsed().as_secs_f64()
    );
    for i in 0..3 {
        let pod = format!("c-dc-r-{i}");
        let (node, volume, on) = member_placement(&client, &pod)
            .await
            .unwrap_or_else(|| panic!("{pod}: no Pod on a node with its claim Bound"));
        assert_eq!(node, on, "{pod}'s volume {volume} is on another node");
        assert!(
            hollow.seen(|s| s.provisioned.values().any(|(v, _)| *v == volume)),
            "{volume} was not made by the hollow provisioner"
        );
    }
    unreachable_node_keeps_its_member(&client, &hollow, &clusters).await;
    deleted_node_has_its_member_replaced(&client, &hollow, &clusters, &log).await;
    drains_respect_the_budget(&plane, &client, &clusters).await;
    assert!(
        hollow.seen(|s| s.refused.is_empty()),
        "requests of the hollow nodes refused: {:?}",
        hollow.seen(|s| s.refused.clone())
    );
    println!("RSS at the end: {}", plane.rss_summary());
}

/// `kubectl` as [`kubectl`], returning whether it succeeded and its
/// output.
fn try_kubectl(plane: &ControlPlane, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `kubectl drain` of two members' Nodes, through the eviction API and the
/// operator's PodDisruptionBudget as the real disruption controller keeps
/// it: the first drain evicts its member, whose Pod, made again by the
/// StatefulSet controller, stays Pending (its local volume is on the
/// cordoned Node); the second drain is refused by the budget while that
/// member is down and evicts nothing; once the first Node is uncordoned
/// the member is back, and the second drain then evicts its member.
async fn drains_respect_the_budget(
    plane: &ControlPlane,
    client: &Client,
    clusters: &Api<DynamicObject>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    let (first, _, _) = member_placement(client, "c-dc-r-0").await.expect("placed");
    let (second, _, _) = member_placement(client, "c-dc-r-1").await.expect("placed");
    assert_ne!(first, second, "two members on one Node");
    let uid = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|p| p.metadata.uid)
        }
    };
    let first_uid = uid("c-dc-r-0").await;
    let second_uid = uid("c-dc-r-1").await;

    let drain = |node: &str, timeout: &str| {
        try_kubectl(
            plane,
            &[
                "drain",
                node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                &format!("--timeout={timeout}"),
            ],
        )
    };
    let (ok, out) = drain(&first, "60s");
    assert!(ok, "draining {first}: {out}");
    eventually(
        "c-dc-r-0 made again, Pending on the cordoned Node's volume",
        || async {
            let p = pods.get_opt("c-dc-r-0").await.ok()??;
            let phase = p.status.as_ref()?.phase.clone();
            (p.metadata.uid != first_uid
                && phase.as_deref() == Some("Pending")
                && ready_members(clusters).await == Some(2))
            .then_some(())
        },
    )
    .await;

    let (ok, out) = drain(&second, "15s");
    assert!(
        !ok,
        "draining {second} while a member is down succeeded: {out}"
    );
    assert!(
        out.contains("disruption budget"),
        "{second}'s drain failed for another reason: {out}"
    );
    assert_eq!(uid("c-dc-r-1").await, second_uid, "c-dc-r-1 was evicted");
    println!("the budget refused {second}'s drain while c-dc-r-0 was down");

    try_kubectl(plane, &["uncordon", &first]);
    eventually("c-dc-r-0 back on its Node, 3 members Ready", || async {
        let (node, _, _) = member_placement(client, "c-dc-r-0").await?;
        (node == first && ready_members(clusters).await == Some(3)).then_some(())
    })
    .await;
    let (ok, out) = drain(&second, "60s");
    assert!(ok, "draining {second} once every member is back: {out}");
    assert_ne!(
        uid("c-dc-r-1").await,
        second_uid,
        "c-dc-r-1 was not evicted"
    );
    try_kubectl(plane, &["uncordon", &second]);
    eventually("c-dc-r-1 back on its Node, 3 members Ready", || async {
        let (node, _, _) = member_placement(client, "c-dc-r-1").await?;
        (node == second && ready_members(clusters).await == Some(3)).then_some(())
    })
    .await;
}

/// A Node deleted with its local disk, as GKE deletes the Node of a VM it
/// re-creates (node auto-repair, an upgrade): the member's volume names a
/// Node that is gone, so the operator replaces the member: a new claim,
/// bound to a new volume on another Node, and the member Ready there.
async fn deleted_node_has_its_member_replaced(
    client: &Client,
    hollow: &testworld::hollow_nodes::HollowNodes,
    clusters: &Api<DynamicObject>,
    log: &std::path::Path,
) {
    let victim = "c-dc-r-2";
    let Victim {
        node,
        volume,
        claims,
        claim,
        claim_uid,
    } = Victim::of(client, victim).await;
    let lost = Instant::now();
    hollow.stop_reporting(&node);
    Api::<Node>::all(client.clone())
        .delete(&node, &Default::default())
        .await
        .expect("deleting the Node");
    let waited = tokio::time::timeout(Duration::from_secs(180), async {
        loop {
            let placed = member_placement(client, victim).await;
            let claim_now = claims
                .get_opt(&claim)
                .await
                .ok()
                .flatten()
                .and_then(|c| c.metadata.uid);
            let ready = ready_members(clusters).await;
            if let Some((on, new_volume, _)) = placed
                && on != node
                && new_volume != volume
                && claim_now.is_some_and(|u| u != claim_uid)
                && ready == Some(3)
            {
                return on;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let on = waited.unwrap_or_else(|_| {
        panic!(
            "{victim} not replaced within 180 s of its Node's deletion; the controller's log:\n{}",
            testworld::harness::tail(log)
        )
    });
    println!(
        "{victim} replaced on {on} with a new claim {:.1} s after {node} was deleted",
        lost.elapsed().as_secs_f64()
    );
}

/// A Node that stops reporting: the real node-lifecycle controller marks
/// it `Unknown` and taints it unreachable once its Lease is older than
/// the grace period, the taint-eviction controller deletes its member's
/// Pod once the toleration the DefaultTolerationSeconds admission gave it
/// has passed, and the Pod stays Terminating (no kubelet confirms). The
/// operator waits: the member's claim is kept. Once the Node reports
/// again, the Pod's deletion ends, the real StatefulSet controller
/// makes it again, the scheduler puts it back on its Node (its local
/// volume's), and the Cluster has 3 Ready members again.
async fn unreachable_node_keeps_its_member(
    client: &Client,
    hollow: &testworld::hollow_nodes::HollowNodes,
    clusters: &Api<DynamicObject>,
) {
    let victim = "c-dc-r-1";
    let Victim {
        node,
        claims,
        claim,
        claim_uid,
        ..
    } = Victim::of(client, victim).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    let pod_uid = pods.get(victim).await.unwrap().metadata.uid.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    let cut = Instant::now();
    hollow.stop_reporting(&node);
    eventually("the Node Unknown and tainted unreachable", || async {
        let n = nodes.get(&node).await.ok()?;
        let unknown = n
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "Unknown");
        let tainted = n
            .spec?
            .taints?
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute");
        (unknown && tainted).then_some(())
    })
    .await;
    println!(
        "{node} unreachable after {:.1} s",
        cut.elapsed().as_secs_f64()
    );
    eventually("the member's Pod evicted, Terminating", || async {
        let p = pods.get_opt(victim).await.ok()??;
        (p.metadata.uid.as_deref() == Some(&pod_uid) && p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    println!(
        "{victim} evicted after {:.1} s",
        cut.elapsed().as_secs_f64()
    );
    // The operator waits while the Node may come back.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let kept = claims.get(&claim).await.unwrap();
    assert_eq!(kept.metadata.uid.as_deref(), Some(claim_uid.as_str()));
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "the claim is being deleted"
    );
    let waiting = pods.get(victim).await.unwrap();
    assert_eq!(waiting.metadata.uid.as_deref(), Some(pod_uid.as_str()));
    assert_eq!(ready_members(clusters).await, Some(2));

    let back = Instant::now();
    hollow.resume_reporting(&node);
    eventually(
        "the member back and Ready on its Node with its claim",
        || async {
            let p = pods.get_opt(victim).await.ok()??;
            let new = p.metadata.uid.as_deref() != Some(pod_uid.as_str());
            let placed = member_placement(client, victim).await?;
            let claim_now = claims.get(&claim).await.ok()?.metadata.uid?;
            (new && placed.0 == node
                && claim_now == claim_uid
                && ready_members(clusters).await == Some(3))
            .then_some(())
        },
    )
    .await;
    println!(
        "{victim} Ready again on {node} {:.1} s after the Node reported again",
        back.elapsed().as_secs_f64()
    );
}
