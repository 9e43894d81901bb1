//! The `controller` subcommand, run for real against kubesim. The test plays
//! the StatefulSet controller and the kubelet in the simplest way (a Pod per
//! replica, made Ready), so that what is tested is the operator: the thesis
//! scale-up one member at a time, rack by rack, the objects, status and
//! Events it writes, and zero writes when a restarted controller finds
//! nothing to do.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crds::Cluster;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::kubesim::{KubeSim, Options};

use crate::common::{client, create_cluster, free_port};
use crate::install::kubectl;
use crate::scenario::{ClusterSpec, Outcome, cluster, pod_ready, secs, until_with};

/// The StatefulSet of the thesis cluster's first rack.
const STS_B: &str = "cassandra-europe-west1-europe-west1-b";

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// kubesim alone with the CRD and namespace `db`: no scheduler, no
/// StatefulSet controller, no kubelet ([`play_kubelet`] plays them). The
/// controller runs as the operator's ServiceAccount, authorized by
/// manifests/operator.yaml alone.
struct Bare {
    sim: KubeSim,
    client: Client,
    /// The admin's kubeconfig (kubectl's).
    admin_kubeconfig: PathBuf,
    /// The operator's ServiceAccount's kubeconfig (the controller's).
    kubeconfig: PathBuf,
    /// The latest controller's log (stderr).
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Bare {
    async fn start() -> Bare {
        let sim = KubeSim::start(Options::default()).await.unwrap();
        let client = client(&sim).await;
        let dir = tempfile::tempdir().unwrap();
        let admin_kubeconfig = sim.write_kubeconfig(dir.path()).unwrap();
        let kubeconfig = testworld::harness::install_operator_rbac(&sim, dir.path()).unwrap();
        let _ = Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "db"}})).unwrap(),
            )
            .await;
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crds::crd::definition())
            .await
            .unwrap();
        Bare {
            sim,
            client,
            admin_kubeconfig,
            kubeconfig,
            log: dir.path().join("controller.log"),
            dir,
        }
    }

    /// Starts the controller on a free metrics address, its log in the
    /// work directory's file `log`; returns it and the address.
    fn start_controller(&mut self, log: &str) -> (Controller, String) {
        let metrics = format!("127.0.0.1:{}", free_port());
        self.log = self.dir.path().join(log);
        let controller = Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
            .arg("controller")
            .args([
                "--operator-namespace",
                testworld::harness::OPERATOR_ACCOUNT.0,
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("METRICS_ADDR", &metrics)
            .env("RUST_LOG", "info,controller=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .unwrap();
        (Controller(controller), metrics)
    }

    /// Namespace `db`'s objects of kind `K`.
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        Api::namespaced(self.client.clone(), "db")
    }

    async fn create(&self, cluster: &ClusterSpec) {
        create_cluster(&self.api(), &cluster.build()).await;
    }

    /// Merge-patches Cluster `cassandra`.
    async fn patch(&self, patch: Value) {
        self.api::<Cluster>()
            .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// [`crate::scenario::until`], the test playing the StatefulSet
    /// controller and the kubelet before each probe; on a timeout, shows
    /// the controller's log.
    async fn until<O, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> O::Value
    where
        O: Outcome,
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
    {
        let client = &self.client;
        until_with(
            what,
            timeout,
            move || {
                let probed = probe();
                async move {
                    play_kubelet(client).await;
                    probed.await
                }
            },
            || {
                format!(
                    "controller log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                )
            },
        )
        .await
    }

    /// Waits until Cluster `cassandra` is Degraded: the condition's reason
    /// and message.
    async fn until_degraded(&self) -> (String, String) {
        let clusters = self.api::<Cluster>();
        self.until("the cluster to become Degraded", secs(30), || async {
            let status = clusters.get("cassandra").await.unwrap().status;
            let conditions = status.map(|s| s.conditions).unwrap_or_default();
            match conditions
                .iter()
                .find(|c| c.type_ == "Degraded" && c.status == "True")
            {
                Some(d) => Ok((d.reason.clone(), d.message.clone())),
                None => Err(format!("conditions {conditions:?}")),
            }
        })
        .await
    }

    /// Waits for a Warning Event of `reason`.
    async fn until_warning(&self, reason: &str) {
        let events = self.api::<Event>();
        self.until(&format!("a Warning Event {reason}"), secs(10), || async {
            let warnings: Vec<String> = events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.reason)
                .collect();
            if warnings.iter().any(|r| r == reason) {
                Ok(())
            } else {
                Err(format!("Warning Events {warnings:?}"))
            }
        })
        .await
    }
}

/// (members, ready members) of a Cluster's status, and its Ready
/// condition's (status, reason): what the waits read.
fn progress(cluster: &Cluster) -> ((i32, i32), Option<(String, String)>) {
    let status = cluster.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()));
    ((status.members, status.ready_members), ready)
}

/// The thesis's first rack, europe-west1-b, of 3.
fn thesis() -> ClusterSpec {
    cluster("cassandra")
        .version("3.11.6")
        .datacenter("europe-west1")
        .rack("europe-west1-b", 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_scales_the_thesis_cluster_up_one_member_at_a_time() {
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    let mut bare = Bare::start().await;
    let (controller, metrics) = bare.start_controller("controller-1.log");
    bare.create(&thesis()).await;
    let clusters = bare.api::<Cluster>();

    // the first rack grows to 3, one member at a time
    let (statefulsets, pods) = (bare.api::<StatefulSet>(), bare.api::<Pod>());
    let most_unready = Cell::new(0);
    bare.until("3 ready members, Ready", secs(90), || async {
        let c = clusters.get("cassandra").await.unwrap();
        // never more than one member that is not ready
        if let Ok(sts) = statefulsets.get(STS_B).await {
            let replicas = sts.spec.unwrap().replicas.unwrap_or(0);
            let pods = pods.list(&ListParams::default()).await.unwrap();
            // Members asked for and not Ready (missing or starting).
            let ready = pods.items.iter().filter(|p| pod_ready(p)).count() as i32;
            most_unready.set(most_unready.get().max(replicas - ready));
        }
        match progress(&c) {
            ((3, 3), Some((s, r))) if s == "True" && r == "AllMembersReady" => Ok(()),
            p => Err(format!("{p:?}")),
        }
    })
    .await;
    assert_eq!(
        most_unready.get(),
        1,
        "at most one member not ready at a time (and one was seen starting: the count can see a second)"
    );

    // the objects of the cluster
    let services = bare.api::<Service>();
    let client_svc = services.get("cassandra-client").await.unwrap();
    assert_eq!(client_svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    for (member, seed) in [(0, true), (1, true), (2, false)] {
        let svc = services.get(&format!("{STS_B}-{member}")).await.unwrap();
        let labels = svc.metadata.labels.unwrap();
        assert_eq!(
            labels.contains_key(crds::contract::SEED),
            seed,
            "member {member}"
        );
    }
    bare.api::<PodDisruptionBudget>()
        .get("cassandra")
        .await
        .unwrap();
    bare.api::<ServiceAccount>()
        .get("cassandra-member")
        .await
        .unwrap();
    bare.api::<Role>().get("cassandra-member").await.unwrap();
    bare.api::<RoleBinding>()
        .get("cassandra-member")
        .await
        .unwrap();

    // a second rack of 2
    bare.patch(thesis().rack("europe-west1-c", 2).racks_patch())
        .await;
    bare.until("5 ready members, Ready", secs(90), || async {
        let c = clusters.get("cassandra").await.unwrap();
        match progress(&c) {
            ((5, 5), Some((s, _))) if s == "True" => Ok(()),
            p => Err(format!("{p:?}")),
        }
    })
    .await;
    let c = clusters.get("cassandra").await.unwrap();
    let status = c.status.unwrap();
    assert_eq!(status.racks["europe-west1-c"].members, 2);
    assert_eq!(status.racks["europe-west1-c"].ready_members, 2);
    assert_eq!(status.observed_generation, c.metadata.generation);

    // the Events of the thesis's figures
    let events = bare.api::<Event>();
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
    let kubectl = |args: &[&str]| kubectl(&bare.admin_kubeconfig, args);
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
    let (code, body) = crate::common::http_get(&metrics, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains(
            "cassandra_operator_cluster_ready_members{namespace=\"db\",cluster=\"cassandra\"} 5"
        ),
        "{body}"
    );
    let failed: Vec<String> = bare
        .sim
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
    let log = std::fs::read_to_string(&bare.log).unwrap_or_default();
    let synced: Vec<&str> = log.lines().filter(|l| l.contains("synced")).collect();
    assert_eq!(
        crate::common::http_get(&metrics, "/readyz").map(|r| r.0),
        Some(200),
        "{failed:#?} {synced:#?}"
    );

    // a restarted controller resyncs everything and finds nothing to do:
    // zero writes
    drop(controller);
    bare.sim.clear_requests();
    let (_controller, metrics) = bare.start_controller("controller-2.log");
    bare.until("the restarted controller to be ready", secs(30), || async {
        crate::common::http_get(&metrics, "/readyz").map(|r| r.0) == Some(200)
    })
    .await;
    // it reconciled the cluster at least once
    let members = "cassandra_operator_cluster_members{namespace=\"db\",cluster=\"cassandra\"} 5";
    bare.until("a reconcile after the restart", secs(30), || async {
        let (_, body) = crate::common::http_get(&metrics, "/metrics").unwrap();
        if body.contains(members) {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes: Vec<String> = bare
        .sim
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

/// Cluster `cassandra`, rack `r` of 3, whose members ask for `memory`
/// under a limit of 4Gi.
fn asking_memory(memory: &str) -> ClusterSpec {
    cluster("cassandra").rack("r", 3).with_rack(
        json!({"resources": {"requests": {"memory": memory}, "limits": {"memory": "4Gi"}}}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spec_is_degraded_with_a_warning_and_changes_nothing() {
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    let mut bare = Bare::start().await;
    let _controller = bare.start_controller("controller.log");
    // valid for the schema, invalid for validate(): a request above its limit
    bare.create(&asking_memory("8Gi")).await;
    let (reason, message) = bare.until_degraded().await;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.datacenter.racks[0].resources.requests.memory"),
        "{message}"
    );
    bare.until_warning("InvalidSpec").await;
    // nothing but the status and the Event was written
    let writes: Vec<String> = bare
        .sim
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
    let statefulsets = bare.api::<StatefulSet>();
    assert!(
        statefulsets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // fixing the spec lets the controller go on
    bare.patch(asking_memory("4Gi").racks_patch()).await;
    bare.until("a StatefulSet for the fixed cluster", secs(30), || async {
        statefulsets
            .get_opt("cassandra-dc-r")
            .await
            .unwrap()
            .is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_object_is_never_adopted() {
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    let mut bare = Bare::start().await;
    // someone else's Service holds the name of the client Service
    let foreign: Service = serde_json::from_value(json!({
        "metadata": {"name": "cassandra-client", "namespace": "db", "labels": {"team": "other"}},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    let services = bare.api::<Service>();
    services
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let _controller = bare.start_controller("controller.log");
    bare.create(&cluster("cassandra").rack("r", 1)).await;
    let (reason, message) = bare.until_degraded().await;
    assert_eq!(reason, "ForeignObject");
    assert!(message.contains("Service cassandra-client"), "{message}");
    bare.until_warning("ForeignObject").await;
    // the foreign Service is untouched and no rack was created
    let svc = services.get("cassandra-client").await.unwrap();
    assert_eq!(
        svc.metadata.labels.unwrap().get("team").map(String::as_str),
        Some("other")
    );
    assert!(svc.metadata.owner_references.is_none());
    // nothing else was created for the refused cluster either
    assert!(
        bare.api::<ServiceAccount>()
            .get_opt("cassandra-member")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        bare.api::<PodDisruptionBudget>()
            .get_opt("cassandra")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        bare.api::<StatefulSet>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
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
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    let mut bare = Bare::start().await;
    let _controller = bare.start_controller("controller.log");
    bare.create(&cluster("cassandra").rack("r", 3)).await;
    // conflicts, server errors, throttling, dropped watches and slow answers
    // on everything, the controller's requests and the test's alike
    bare.sim
        .set_faults(testworld::kubesim::faults::FaultConfig {
            conflict_rate: 0.15,
            error_rate: 0.1,
            throttle_rate: 0.05,
            drop_watch_rate: 0.3,
            drop_watch_after_ms: 2000,
            slow_rate: 0.1,
            slow_ms: 200,
            ..Default::default()
        });
    let clusters = bare.api::<Cluster>();
    bare.until("convergence under faults", secs(120), || async {
        match clusters.get("cassandra").await.as_ref().map(progress) {
            Ok(((3, 3), _)) => Ok(()),
            p => Err(format!("{p:?}")),
        }
    })
    .await;
    bare.sim.set_faults(Default::default());
    // faults happened, and were survived: the request log shows them
    let failed = bare
        .sim
        .requests()
        .iter()
        .filter(|r| matches!(r.code, 409 | 429 | 500))
        .count();
    assert!(failed > 0, "no fault was injected");
    // and the outcome is exactly the fault-free one: one Service per member
    let members: Vec<String> = bare
        .api::<Service>()
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
    let sts = bare
        .api::<StatefulSet>()
        .get("cassandra-dc-r")
        .await
        .unwrap();
    assert_eq!(sts.spec.unwrap().replicas, Some(3));
}
