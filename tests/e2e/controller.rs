//! The `controller` subcommand, run for real against kubesim. The test plays
//! the StatefulSet controller and the kubelet in the simplest way (a Pod per
//! replica, made Ready), so that what is tested is the operator: the thesis
//! scale-up one member at a time, rack by rack, the objects, status and
//! Events it writes, and zero writes when a restarted controller finds
//! nothing to do.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;
use testworld::kubesim::{KubeSim, Options};

use crate::common::{client, free_port};

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_controller(kubeconfig: &Path, metrics: &str, log: &Path) -> Controller {
    let log = std::fs::File::create(log).unwrap();
    Controller(
        Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
            .arg("controller")
            .env("KUBECONFIG", kubeconfig)
            .env("METRICS_ADDR", metrics)
            .env("RUST_LOG", "info,controller=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

pub(crate) fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

async fn until<F: AsyncFnMut() -> bool>(what: &str, timeout: Duration, client: &Client, mut f: F) {
    let deadline = Instant::now() + timeout;
    loop {
        play_kubelet(client).await;
        if f().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ready_members(cluster: &Cluster) -> (i32, i32) {
    cluster
        .status
        .as_ref()
        .map(|s| (s.members, s.ready_members))
        .unwrap_or_default()
}

fn condition(cluster: &Cluster, type_: &str) -> Option<(String, String)> {
    cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_scales_the_thesis_cluster_up_one_member_at_a_time() {
    let (sim, client, dir, kubeconfig) = setup().await;
    let metrics = format!("127.0.0.1:{}", free_port());
    let controller = start_controller(&kubeconfig, &metrics, &dir.path().join("controller-1.log"));
    create_cluster(
        &client,
        json!({"version": "3.11.6", "datacenter": {"name": "europe-west1", "racks": [
            {"name": "europe-west1-b", "members": 3,
             "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "1Gi"}}}}]}}
        ]}}),
    )
    .await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");

    // the first rack grows to 3, one member at a time
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "db");
    let mut max_seen_unready = 0;
    until(
        "3 ready members",
        Duration::from_secs(90),
        &client,
        async || {
            let c = clusters.get("cassandra").await.unwrap();
            // never more than one member that is not ready
            if let Ok(sts) = statefulsets
                .get("cassandra-europe-west1-europe-west1-b")
                .await
            {
                let replicas = sts.spec.unwrap().replicas.unwrap_or(0);
                let pods = Api::<Pod>::namespaced(client.clone(), "db")
                    .list(&ListParams::default())
                    .await
                    .unwrap();
                // Members asked for and not Ready (missing or starting).
                let ready = pods.items.iter().filter(|p| pod_ready(p)).count() as i32;
                max_seen_unready = max_seen_unready.max(replicas - ready);
            }
            ready_members(&c) == (3, 3)
                && condition(&c, "Ready") == Some(("True".into(), "AllMembersReady".into()))
        },
    )
    .await;
    assert_eq!(
        max_seen_unready, 1,
        "at most one member not ready at a time (and one was seen starting: the count can see a second)"
    );

    // the objects of the cluster
    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let client_svc = services.get("cassandra-client").await.unwrap();
    assert_eq!(client_svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    for (member, seed) in [(0, true), (1, true), (2, false)] {
        let svc = services
            .get(&format!("cassandra-europe-west1-europe-west1-b-{member}"))
            .await
            .unwrap();
        let labels = svc.metadata.labels.unwrap();
        assert_eq!(
            labels.contains_key(crds::contract::SEED),
            seed,
            "member {member}"
        );
    }
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "db")
        .get("cassandra")
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "db")
        .get("cassandra-member")
        .await
        .unwrap();
    Api::<Role>::namespaced(client.clone(), "db")
        .get("cassandra-member")
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), "db")
        .get("cassandra-member")
        .await
        .unwrap();

    // a second rack of 2
    let patch = json!({"spec": {"datacenter": {"name": "europe-west1", "racks": [
        {"name": "europe-west1-b", "members": 3,
         "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "1Gi"}}}}]}},
        {"name": "europe-west1-c", "members": 2}
    ]}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until(
        "5 ready members",
        Duration::from_secs(90),
        &client,
        async || {
            let c = clusters.get("cassandra").await.unwrap();
            ready_members(&c) == (5, 5) && condition(&c, "Ready").is_some_and(|(s, _)| s == "True")
        },
    )
    .await;
    let c = clusters.get("cassandra").await.unwrap();
    let status = c.status.unwrap();
    assert_eq!(status.racks["europe-west1-c"].members, 2);
    assert_eq!(status.racks["europe-west1-c"].ready_members, 2);
    assert_eq!(status.observed_generation, c.metadata.generation);

    // the Events of the thesis's figures
    let events: Api<Event> = Api::namespaced(client.clone(), "db");
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| *r == "RackCreated").count(),
        2,
        "{reasons:?}"
    );
    // one series per rack (kube aggregates repeats per related object)
    assert_eq!(
        reasons.iter().filter(|r| *r == "RackScaledUp").count(),
        2,
        "{reasons:?}"
    );

    // what a person sees: kubectl get and describe
    let admin_kubeconfig = dir.path().join("kubeconfig");
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&admin_kubeconfig)
            .args(args)
            .output()
            .expect("kubectl is on the machine");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let table = kubectl(&["get", "clusters.cassandra.rook.io", "-n", "db"]);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..5],
        ["cassandra", "3.11.6", "5", "5", "AllMembersReady"],
        "{table}"
    );
    let describe = kubectl(&[
        "describe",
        "clusters.cassandra.rook.io",
        "-n",
        "db",
        "cassandra",
    ]);
    assert!(
        describe
            .lines()
            .any(|l| l.split_whitespace().eq(["Ready", "Members:", "5"])),
        "{describe}"
    );
    for expected in [
        "AllMembersReady",
        "Rack europe-west1-b created: StatefulSet cassandra-europe-west1-europe-west1-b with 0 members",
        "Rack europe-west1-c scaled up by one member",
    ] {
        assert!(
            describe.contains(expected),
            "{expected:?} missing from kubectl describe:\n{describe}"
        );
    }

    // metrics
    let (code, body) = http_get(&metrics, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains(
            "cassandra_operator_cluster_ready_members{namespace=\"db\",cluster=\"cassandra\"} 5"
        ),
        "{body}"
    );
    let failed: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.code >= 400)
        .map(|r| {
            format!(
                "{} {} {}?{} -> {}",
                r.verb, r.method, r.path, r.query, r.code
            )
        })
        .collect();
    let log = std::fs::read_to_string(dir.path().join("controller-1.log")).unwrap_or_default();
    let synced: Vec<&str> = log.lines().filter(|l| l.contains("synced")).collect();
    assert_eq!(
        http_get(&metrics, "/readyz").map(|r| r.0),
        Some(200),
        "{failed:#?} {synced:#?}"
    );

    // a restarted controller resyncs everything and finds nothing to do:
    // zero writes
    drop(controller);
    sim.clear_requests();
    let metrics2 = format!("127.0.0.1:{}", free_port());
    let _controller =
        start_controller(&kubeconfig, &metrics2, &dir.path().join("controller-2.log"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(&metrics2, "/readyz").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the restarted controller never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // it reconciled the cluster at least once
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = http_get(&metrics2, "/metrics").unwrap();
        if body.contains(
            "cassandra_operator_cluster_members{namespace=\"db\",cluster=\"cassandra\"} 5",
        ) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no reconcile after the restart: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}?{} ({})", r.method, r.path, r.query, r.user_agent))
        .collect();
    assert!(
        writes.is_empty(),
        "a resync with nothing to do wrote: {writes:#?}"
    );
}

async fn setup() -> (KubeSim, Client, tempfile::TempDir, std::path::PathBuf) {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let client = client(&sim).await;
    let dir = tempfile::tempdir().unwrap();
    sim.write_kubeconfig(dir.path()).unwrap();
    // The controller runs as the operator's ServiceAccount, authorized by
    // manifests/operator.yaml alone.
    let kubeconfig = testworld::harness::install_operator_rbac(&sim, dir.path()).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "db"}})).unwrap(),
        )
        .await;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
        client.clone(),
    )
    .create(&PostParams::default(), &Cluster::crd())
    .await
    .unwrap();
    (sim, client, dir, kubeconfig)
}

async fn create_cluster(client: &Client, spec: serde_json::Value) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "cassandra", "namespace": "db"},
        "spec": spec
    }))
    .unwrap();
    for _ in 0..50 {
        if clusters
            .create(&PostParams::default(), &cluster)
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Cluster was not created");
}

async fn degraded(client: &Client, timeout: Duration) -> (String, String) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    let deadline = Instant::now() + timeout;
    loop {
        let c = clusters.get("cassandra").await.unwrap();
        if let Some(d) = c.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Degraded" && c.status == "True")
        }) {
            return (d.reason.clone(), d.message.clone());
        }
        assert!(
            Instant::now() < deadline,
            "the cluster never became Degraded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn warning_events(client: &Client) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), "db")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spec_is_degraded_with_a_warning_and_changes_nothing() {
    let (sim, client, dir, kubeconfig) = setup().await;
    let metrics = format!("127.0.0.1:{}", free_port());
    let _controller = start_controller(&kubeconfig, &metrics, &dir.path().join("controller.log"));
    // valid for the schema, invalid for validate(): a request above its limit
    create_cluster(
        &client,
        json!({"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}}}]}}),
    )
    .await;
    let (reason, message) = degraded(&client, Duration::from_secs(30)).await;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.datacenter.racks[0].resources.requests.memory"),
        "{message}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !warning_events(&client)
        .await
        .iter()
        .any(|(r, _)| r == "InvalidSpec")
    {
        assert!(Instant::now() < deadline, "no Warning Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // nothing but the status and the Event was written
    let writes: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.is_write() && r.resource != "customresourcedefinitions")
        .filter(|r| {
            !(r.resource == "clusters" && r.subresource == "status") && r.resource != "events"
        })
        .filter(|r| !(r.resource == "clusters" && r.verb == "create") && r.resource != "namespaces")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        writes.is_empty(),
        "an invalid spec changed objects: {writes:#?}"
    );
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), "db")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // fixing the spec lets the controller go on
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    let fix = json!({"spec": {"datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
        "resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "4Gi"}}}]}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Api::<StatefulSet>::namespaced(client.clone(), "db")
        .get_opt("cassandra-dc-r")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the fixed cluster got no StatefulSet"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_object_is_never_adopted() {
    let (_sim, client, dir, kubeconfig) = setup().await;
    // someone else's Service holds the name of the client Service
    let foreign: Service = serde_json::from_value(json!({
        "metadata": {"name": "cassandra-client", "namespace": "db", "labels": {"team": "other"}},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), "db")
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let _controller = start_controller(&kubeconfig, &metrics, &dir.path().join("controller.log"));
    create_cluster(
        &client,
        json!({"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 1}]}}),
    )
    .await;
    let (reason, message) = degraded(&client, Duration::from_secs(30)).await;
    assert_eq!(reason, "ForeignObject");
    assert!(message.contains("Service cassandra-client"), "{message}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !warning_events(&client)
        .await
        .iter()
        .any(|(r, _)| r == "ForeignObject")
    {
        assert!(Instant::now() < deadline, "no Warning Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // the foreign Service is untouched and no rack was created
    let svc = Api::<Service>::namespaced(client.clone(), "db")
        .get("cassandra-client")
        .await
        .unwrap();
    assert_eq!(
        svc.metadata.labels.unwrap().get("team").map(String::as_str),
        Some("other")
    );
    assert!(svc.metadata.owner_references.is_none());
    // nothing else was created for the refused cluster either
    assert!(
        Api::<ServiceAccount>::namespaced(client.clone(), "db")
            .get_opt("cassandra-member")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<PodDisruptionBudget>::namespaced(client.clone(), "db")
            .get_opt("cassandra")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), "db")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The StatefulSet controller and kubelet of these tests: one Ready Pod per
/// replica of every StatefulSet, one new Pod per pass, in ordinal order (as
/// OrderedReady does). Every call may fail (the fault test injects
/// failures): the next pass tries again.
async fn play_kubelet(client: &Client) {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "db");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    let Ok(list) = statefulsets.list(&ListParams::default()).await else {
        return;
    };
    for sts in list {
        let name = sts.metadata.name.clone().unwrap_or_default();
        let Some(spec) = sts.spec.clone() else {
            continue;
        };
        let labels = spec
            .template
            .metadata
            .clone()
            .and_then(|m| m.labels)
            .unwrap_or_default();
        for ordinal in 0..spec.replicas.unwrap_or(1) {
            let pod_name = format!("{name}-{ordinal}");
            match pods.get_opt(&pod_name).await {
                Ok(Some(p)) if pod_ready(&p) => continue,
                Ok(Some(_)) => {}
                Ok(None) => {
                    let mut pod_labels: BTreeMap<String, String> = labels.clone();
                    pod_labels.insert(
                        "statefulset.kubernetes.io/pod-name".into(),
                        pod_name.clone(),
                    );
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": pod_name, "namespace": "db", "labels": pod_labels},
                        "spec": {"containers": [{"name": "cassandra", "image": "cassandra"}]}
                    }))
                    .unwrap();
                    // A new Pod is not Ready in the pass that creates it
                    // (a real one starts, then passes its probe): the next
                    // pass makes it Ready.
                    let _ = pods.create(&PostParams::default(), &pod).await;
                    return;
                }
                Err(_) => return,
            }
            let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
            let _ = pods
                .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_converges_under_injected_faults() {
    let (sim, client, dir, kubeconfig) = setup().await;
    let metrics = format!("127.0.0.1:{}", free_port());
    let _controller = start_controller(&kubeconfig, &metrics, &dir.path().join("controller.log"));
    create_cluster(
        &client,
        json!({"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3}]}}),
    )
    .await;
    // conflicts, server errors, throttling, dropped watches and slow answers
    // on everything, the controller's requests and the test's alike
    sim.set_faults(testworld::kubesim::faults::FaultConfig {
        conflict_rate: 0.15,
        error_rate: 0.1,
        throttle_rate: 0.05,
        drop_watch_rate: 0.3,
        drop_watch_after_ms: 2000,
        slow_rate: 0.1,
        slow_ms: 200,
        ..Default::default()
    });
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        play_kubelet(&client).await;
        if let Ok(c) = clusters.get("cassandra").await
            && ready_members(&c) == (3, 3)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence under faults: {}",
            std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.set_faults(Default::default());
    // faults happened, and were survived: the request log shows them
    let failed = sim
        .requests()
        .iter()
        .filter(|r| matches!(r.code, 409 | 429 | 500))
        .count();
    assert!(failed > 0, "no fault was injected");
    // and the outcome is exactly the fault-free one: one Service per member
    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let members: Vec<String> = services
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| n.starts_with("cassandra-dc-r-"))
        .collect();
    assert_eq!(
        members,
        ["cassandra-dc-r-0", "cassandra-dc-r-1", "cassandra-dc-r-2"]
    );
    let sts = Api::<StatefulSet>::namespaced(client.clone(), "db")
        .get("cassandra-dc-r")
        .await
        .unwrap();
    assert_eq!(sts.spec.unwrap().replicas, Some(3));
}
