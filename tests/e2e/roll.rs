//! Rolling upgrades and restarts (issue 14), end to end with the real
//! binary in the test world: a rack of 3 members holding 1000 keys at RF 3
//! is rolled by each trigger (a patch upgrade, the overrides ConfigMap's
//! content, the resources, the `restartedAt` annotation, a major upgrade
//! 4.1 → 5.0). A [`RollWatch`] sees every change the API server commits
//! to the members' Pods (kubesim's store, in commit order, not sampled)
//! and records any moment at which more than one member is not Ready.
//! Each roll ends with every Pod on its StatefulSet's update revision,
//! on the new image, the ring all UN on the new release and a clean data
//! check.
//!
//! Also: the refusals (the schema's CEL for a single edit, the controller
//! for what CEL cannot see), an unchanged cluster costing zero writes, a
//! member that does not come back stopping the roll, and rolls with the
//! controller SIGKILLed at random moments.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::fake_cassandra::ring_service::RingService;
use testworld::harness::{self, World, WorldOptions, container_logs, fast_ring, tail};
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{EventType, Target};
use testworld::ring::{Consistency, Replication};
use tokio::sync::broadcast::error::RecvError;

use crate::common::ONE_WORLD;
use crate::lifecycle::{Lcg, condition, ring_text};
use crate::world::ring_summary;

const NS: &str = "db";
const STS: &str = "c-dc-r";
const MEMBERS: usize = 3;
/// The controller's bound on a member's restart in these tests.
const RESTART_TIMEOUT: &str = "20";

fn member(ordinal: usize) -> String {
    format!("{STS}-{ordinal}")
}

/// Records, at every committed change of the namespace's Pods, how many
/// of the rack's members are not Ready (no Pod, a Pod not Ready, or one
/// being deleted), and every moment more than one is. And, each time a
/// member is taken down (its Pod marked for deletion), whether every other
/// running member's gossip (the fake ring's per-node views, which lag as
/// real gossip does) sees every other member UP at the generation it
/// runs: readiness alone does not say so, and a member taken down while a
/// peer still sees the previous one down leaves two replicas missing for
/// that peer.
pub(crate) struct RollWatch {
    breaches: Arc<Mutex<Vec<String>>>,
    /// Pods deleted, by member.
    deletions: Arc<Mutex<BTreeMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Where the ring's running members, the one taken down aside, do not see
/// each other UP at their current generations: one line each.
fn gossip_gaps(
    ring: &RingService,
    addresses: &BTreeMap<String, String>,
    leaving: &str,
) -> Vec<String> {
    let leaving = addresses.get(leaving).map(String::as_str);
    ring.clusters()
        .iter()
        .flat_map(|c| {
            ring.with_cluster(c, |r| r.gossip_disagreements_besides(leaving))
                .unwrap_or_default()
        })
        .collect()
}

fn healthy(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

impl RollWatch {
    /// Watches the Pods `members` of namespace `ns`.
    pub(crate) fn start(sim: &KubeSim, ns: &str, members: &[String]) -> RollWatch {
        let mut events = sim.store().subscribe();
        let ns = ns.to_string();
        let pods = Target::new("", "v1", "pods", Some(&ns));
        let mut ready: BTreeMap<String, bool> =
            members.iter().map(|m| (m.clone(), false)).collect();
        for pod in sim
            .store()
            .list(&pods, &Default::default())
            .ok()
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
        {
            if let Some(name) = pod.pointer("/metadata/name").and_then(Value::as_str)
                && let Some(state) = ready.get_mut(name)
            {
                *state = healthy(&pod);
            }
        }
        let not_ready = |ready: &BTreeMap<String, bool>| {
            ready
                .iter()
                .filter(|(_, r)| !**r)
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        };
        let breaches = Arc::new(Mutex::new(Vec::new()));
        let deletions = Arc::new(Mutex::new(BTreeMap::new()));
        let initially = not_ready(&ready);
        if !initially.is_empty() {
            breaches.lock().unwrap().push(format!(
                "members not Ready when the watch started: {initially:?}"
            ));
        }
        let services = Target::new("", "v1", "services", Some(&ns));
        let addresses: BTreeMap<String, String> = sim
            .store()
            .list(&services, &Default::default())
            .ok()
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|svc| {
                let name = svc.pointer("/metadata/name")?.as_str()?.to_string();
                let ip = svc.pointer("/spec/clusterIP")?.as_str()?.to_string();
                ready.contains_key(&name).then_some((name, ip))
            })
            .collect();
        let ring = sim.ring().clone();
        let (found, deleted) = (breaches.clone(), deletions.clone());
        let task = tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    Err(RecvError::Lagged(n)) => {
                        found.lock().unwrap().push(format!(
                            "the watch missed {n} changes: it cannot vouch for them"
                        ));
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                };
                if event.plural != "pods" || event.namespace() != ns {
                    continue;
                }
                let name = event
                    .object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let Some(state) = ready.get_mut(&name) else {
                    continue;
                };
                let was_healthy = *state;
                if event.kind == EventType::Deleted {
                    *state = false;
                    *deleted.lock().unwrap().entry(name.clone()).or_default() += 1;
                } else {
                    *state = healthy(&event.object);
                }
                let taken_down = was_healthy
                    && (event.kind == EventType::Deleted
                        || event
                            .object
                            .pointer("/metadata/deletionTimestamp")
                            .is_some());
                if taken_down {
                    let gaps = gossip_gaps(&ring, &addresses, &name);
                    if !gaps.is_empty() {
                        found.lock().unwrap().push(format!(
                            "rv {}: {name} taken down while the ring had not settled: {}",
                            event.rv,
                            gaps.join("; ")
                        ));
                    }
                }
                let down = not_ready(&ready);
                if down.len() > 1 {
                    found.lock().unwrap().push(format!(
                        "rv {}: members not Ready at once: {down:?}",
                        event.rv
                    ));
                }
            }
        });
        RollWatch {
            breaches,
            deletions,
            task,
        }
    }

    pub(crate) fn assert_one_at_a_time(&self, what: &str) {
        let breaches = self.breaches.lock().unwrap();
        assert!(
            breaches.is_empty(),
            "{what}: more than one member down at a time, or one taken down before the ring settled:\n{}",
            breaches.join("\n")
        );
    }

    pub(crate) fn deletions(&self) -> BTreeMap<String, usize> {
        self.deletions.lock().unwrap().clone()
    }
}

impl Drop for RollWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The ring (its cluster's name) and host ID of the member at `address`.
fn host_at(ring: &RingService, address: &str) -> Option<(String, String)> {
    ring.clusters().into_iter().find_map(|c| {
        let host = ring
            .with_cluster(&c, |r| {
                r.nodes()
                    .find(|n| n.address == address)
                    .map(|n| n.host_id.to_string())
            })
            .flatten()?;
        Some((c, host))
    })
}

/// Polls `check` every 50 ms for up to `secs`.
async fn poll<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// During a roll: once member 2 is taken down, cuts member 0's network to
/// it (member 0 hears of it through member 1 but sees it DOWN, as a node
/// does whose echo to a peer never returns). Once member 2 is back Ready
/// on its new Pod, the roll must hold: `Progressing` names the ring, and
/// for 4 s member 1 is not taken down. Then heals the cut. What went
/// wrong, if anything.
async fn cut_gossip_while_rolling(
    client: kube::Client,
    ring: Arc<RingService>,
) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    let clusters: Api<Cluster> = Api::namespaced(client, NS);
    let address = |name: String| {
        let services = services.clone();
        async move {
            services
                .get(&name)
                .await
                .ok()
                .and_then(|s| s.spec?.cluster_ip)
                .ok_or(format!("no ClusterIP for {name}"))
        }
    };
    let ((cluster, observer), (_, subject)) = (
        host_at(&ring, &address(member(0)).await?).ok_or("member 0 in no ring")?,
        host_at(&ring, &address(member(2)).await?).ok_or("member 2 in no ring")?,
    );
    let uid = |pod: &Pod| pod.metadata.uid.clone().unwrap_or_default();
    // Whether the member whose Pod was `before` is going or gone.
    let taken_down =
        |name: String, before: Pod| {
            let pods = pods.clone();
            async move {
                pods.get_opt(&name).await.ok().flatten().is_none_or(|p| {
                    p.metadata.deletion_timestamp.is_some() || uid(&p) != uid(&before)
                })
            }
        };
    let before = pods.get(&member(2)).await.map_err(|e| e.to_string())?;
    if !poll(60, || taken_down(member(2), before.clone())).await {
        return Err("member 2 was never taken down".into());
    }
    let cut = |on: bool| {
        ring.with_cluster(&cluster, |r| r.cut_gossip(&observer, &subject, on));
    };
    cut(true);
    let result = async {
        let back = poll(60, || async {
            pods.get_opt(&member(2))
                .await
                .ok()
                .flatten()
                .is_some_and(|p| {
                    uid(&p) != uid(&before)
                        && p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
        })
        .await;
        if !back {
            return Err("member 2 did not come back Ready".to_string());
        }
        let named = poll(20, || async {
            clusters.get("c").await.ok().is_some_and(|c| {
                condition(&c, "Progressing").is_some_and(|(_, _, message)| {
                    message.contains("member 0 of rack r does not see member 2 of rack r up yet")
                })
            })
        })
        .await;
        if !named {
            let now = clusters
                .get("c")
                .await
                .ok()
                .and_then(|c| condition(&c, "Progressing"));
            return Err(format!(
                "Progressing never said that member 0 does not see member 2: {now:?}"
            ));
        }
        let next_before = pods.get(&member(1)).await.map_err(|e| e.to_string())?;
        if poll(4, || taken_down(member(1), next_before.clone())).await {
            return Err("member 1 was taken down while member 0 saw member 2 DOWN".into());
        }
        Ok(())
    }
    .await;
    cut(false);
    result
}

/// The test world with one zone, the operator started with a small
/// restart bound.
async fn roll_world(work: &Path) -> (World, harness::Process, std::path::PathBuf) {
    let operator = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let mut opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), &["a"]);
    opts.ring = fast_ring();
    let world = World::start(opts, work).await.unwrap();
    world.install(NS).await.unwrap();
    let log = work.join("controller.log");
    let controller = start_controller(&world, &log);
    (world, controller, log)
}

fn start_controller(world: &World, log: &Path) -> harness::Process {
    world
        .start_controller_with(
            log,
            None,
            &["--member-restart-timeout-seconds", RESTART_TIMEOUT],
        )
        .unwrap()
}

fn overrides(text: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "tuning", "namespace": NS},
        "data": {"cassandra.yaml": text}
    }))
    .unwrap()
}

/// Rack r of 3 members at `version` with the overrides ConfigMap
/// "tuning", and 1000 keys at RF 3; returns when all are Ready.
async fn rack_of_three(world: &World, version: &str, log: &Path) -> Api<Cluster> {
    let configmaps: Api<ConfigMap> = Api::namespaced(world.client.clone(), NS);
    configmaps
        .create(&PostParams::default(), &overrides("concurrent_reads: 16\n"))
        .await
        .unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"version": version, "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "configMapName": "tuning",
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_converged(world, &clusters, log, Duration::from_secs(180)).await;
    world.sim.ring().with(|ring| {
        ring.create_keyspace("k", Replication::network_topology([("dc", 3)]))
            .unwrap();
        ring.write_keys("k", "key", 1000, Consistency::Quorum)
            .unwrap();
    });
    clusters
}

/// The members' Pods by name: (uid, revision label, image, Ready).
async fn members(world: &World) -> BTreeMap<String, (String, String, String, bool)> {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| {
            let ready = crate::lifecycle::pod_ready(&p) && p.metadata.deletion_timestamp.is_none();
            let name = p.metadata.name?;
            let revision = p
                .metadata
                .labels
                .unwrap_or_default()
                .get("controller-revision-hash")
                .cloned()
                .unwrap_or_default();
            let image = p
                .spec?
                .containers
                .iter()
                .find(|c| c.name == "cassandra")
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            Some((name, (p.metadata.uid?, revision, image, ready)))
        })
        .collect()
}

async fn update_revision(world: &World) -> Option<String> {
    let sts: Api<StatefulSet> = Api::namespaced(world.client.clone(), NS);
    sts.get(STS).await.ok()?.status?.update_revision
}

/// Waits until the cluster says it converged on its generation, every
/// member Ready on its StatefulSet's update revision.
async fn wait_converged(world: &World, clusters: &Api<Cluster>, log: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let c = clusters.get("c").await.unwrap();
        let status = c.status.clone().unwrap_or_default();
        let converged = condition(&c, "Progressing")
            .is_some_and(|(s, r, _)| s == "False" && r == "Converged")
            && status.observed_generation == c.metadata.generation;
        let revision = update_revision(world).await;
        let pods = members(world).await;
        let rolled = pods.len() == MEMBERS
            && pods
                .values()
                .all(|(_, r, _, ready)| *ready && Some(r) == revision.as_ref());
        if converged && rolled {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not converged: {:?}\nupdate revision {revision:?}, pods {pods:#?}\n{}\ncontroller:\n{}\n{}",
            status,
            ring_text(&world.sim),
            tail(log),
            container_logs(log.parent().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts a roll with `trigger`, watches it whole and checks its end:
/// every member restarted once, one at a time, on the new revision and
/// `image`, the ring all UN on its release, the data check clean.
async fn roll<F, Fut>(
    world: &World,
    clusters: &Api<Cluster>,
    log: &Path,
    what: &str,
    image: &str,
    trigger: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let before = members(world).await;
    let revision_before = update_revision(world).await;
    let watch = RollWatch::start(
        &world.sim,
        NS,
        &(0..MEMBERS).map(member).collect::<Vec<_>>(),
    );
    trigger().await;
    // The new template first, then the roll to its end.
    let deadline = Instant::now() + Duration::from_secs(30);
    while update_revision(world).await == revision_before {
        assert!(
            Instant::now() < deadline,
            "{what}: the StatefulSet's template did not change\n{}",
            tail(log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_converged(world, clusters, log, Duration::from_secs(180)).await;
    watch.assert_one_at_a_time(what);
    let after = members(world).await;
    for (name, (uid, _, running, _)) in &after {
        assert_ne!(uid, &before[name].0, "{what}: {name} was not restarted");
        assert_eq!(running, image, "{what}: {name} runs another image");
    }
    assert_eq!(
        watch.deletions(),
        (0..MEMBERS).map(|o| (member(o), 1)).collect(),
        "{what}: each member is restarted exactly once"
    );
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, MEMBERS, "{what}: {status}");
    assert!(
        report.is_clean(),
        "{what}: the roll lost data:\n{report}\n{status}"
    );
    // The ring (kubesim ring's release column) runs the new version.
    let release = image.rsplit(':').next().unwrap_or_default();
    let releases: Vec<String> = world.sim.ring().with(|ring| {
        ring.status(None)
            .map(|s| s.rows.iter().map(|r| r.release.clone()).collect())
            .unwrap_or_default()
    });
    assert_eq!(
        releases,
        vec![release.to_string(); MEMBERS],
        "{what}: {status}"
    );
    eprintln!("{what}: rolled in {:.1} s", started.elapsed().as_secs_f64());
}

async fn patch_cluster(clusters: &Api<Cluster>, patch: Value) -> Result<Cluster, kube::Error> {
    clusters
        .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

async fn set_version(clusters: &Api<Cluster>, version: &str) {
    patch_cluster(clusters, json!({"spec": {"version": version}}))
        .await
        .unwrap();
}

/// The rack's spec with `f` applied (a merge patch replaces the list).
async fn change_rack(clusters: &Api<Cluster>, f: impl FnOnce(&mut Value)) {
    let c = clusters.get("c").await.unwrap();
    let mut rack = serde_json::to_value(&c.spec.datacenter.racks[0]).unwrap();
    f(&mut rack);
    patch_cluster(
        clusters,
        json!({"spec": {"datacenter": {"name": "dc", "racks": [rack]}}}),
    )
    .await
    .unwrap();
}

/// The writes the operator made since the request log was cleared (it
/// runs as its own ServiceAccount).
fn operator_writes(sim: &KubeSim) -> Vec<String> {
    let (namespace, account) = harness::OPERATOR_ACCOUNT;
    let operator = format!("system:serviceaccount:{namespace}:{account}");
    sim.requests()
        .into_iter()
        .filter(|r| r.is_write() && r.user == operator)
        .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.code))
        .collect()
}

/// The controller's gauge of members on an old template for cluster c,
/// from its metrics endpoint (the default address, in the test's network
/// namespace).
fn old_template_gauge() -> Option<i64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect("127.0.0.1:8080").ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    body.lines()
        .find(|l| {
            l.starts_with("cassandra_operator_cluster_members_on_old_template{")
                && l.contains("cluster=\"c\"")
        })?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

/// A Warning Event with `reason` whose note contains `text`.
async fn warning(world: &World, reason: &str, text: &str) -> bool {
    let list: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), NS);
    list.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some(reason)
                && e.note.as_deref().is_some_and(|n| n.contains(text))
        })
}

/// Every trigger rolls every member, one at a time, in one world (a patch
/// upgrade, the overrides ConfigMap's content, the resources, the
/// `restartedAt` annotation, then the major upgrade); the refusals; zero
/// writes when nothing changed; a member that does not come back stops
/// the roll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trigger_rolls_one_member_at_a_time_and_refusals_change_nothing() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = roll_world(work.path()).await;
    let clusters = rack_of_three(&world, "4.1.3", &log).await;

    // A member Service as an older operator built it (no applied hash, a
    // field of ours changed): applied again as built, the sidecar's records
    // and the ClusterIP kept.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(world.client.clone(), NS);
    let gossip_record = |s: &k8s_openapi::api::core::v1::Service| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crds::contract::GOSSIP).cloned())
    };
    // The sidecar records its node's view once gossip told it of all.
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = loop {
        let s = services.get(&member(1)).await.unwrap();
        if gossip_record(&s).is_some_and(|r| !r.contains(r#""down""#)) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no gossip record of all up on {}",
            member(1)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    services
        .patch(
            &member(1),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"cassandra.rook.io/applied-hash": null}},
                "spec": {"publishNotReadyAddresses": false}
            })),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = services.get(&member(1)).await.unwrap();
        if s.spec.as_ref().and_then(|s| s.publish_not_ready_addresses) == Some(true) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the member Service was not applied again\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        after
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("cassandra.rook.io/applied-hash")),
        "applied with its hash"
    );
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.cluster_ip.clone()),
        before.spec.as_ref().and_then(|s| s.cluster_ip.clone()),
        "the member's address"
    );
    assert_eq!(
        gossip_record(&after),
        gossip_record(&before),
        "the sidecar's record"
    );

    // An unchanged cluster: zero writes across resyncs and reconciles
    // (a Pod status heartbeat from the kubelet is not the controller's).
    world.sim.clear_requests();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = operator_writes(&world.sim);
    assert!(writes.is_empty(), "an unchanged cluster wrote: {writes:#?}");

    roll(
        &world,
        &clusters,
        &log,
        "patch upgrade 4.1.3 → 4.1.8",
        "cassandra:4.1.8",
        || set_version(&clusters, "4.1.8"),
    )
    .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(world.client.clone(), NS);
    roll(
        &world,
        &clusters,
        &log,
        "overrides content",
        "cassandra:4.1.8",
        || async {
            configmaps
                .replace(
                    "tuning",
                    &PostParams::default(),
                    &overrides("concurrent_reads: 32\n"),
                )
                .await
                .unwrap();
        },
    )
    .await;
    roll(
        &world,
        &clusters,
        &log,
        "resources",
        "cassandra:4.1.8",
        || {
            change_rack(&clusters, |rack| {
                rack["resources"] = json!({"limits": {"cpu": "500m", "memory": "1Gi"}});
            })
        },
    )
    .await;
    // During this roll, member 0's network to member 2 fails once member 2
    // is taken down: member 2 comes back Ready, but member 0 sees it DOWN,
    // and the roll must hold until it is healed.
    let cut = tokio::spawn(cut_gossip_while_rolling(
        world.client.clone(),
        world.sim.ring().clone(),
    ));
    roll(&world, &clusters, &log, "restartedAt", "cassandra:4.1.8", || async {
        patch_cluster(
            &clusters,
            json!({"metadata": {"annotations": {crds::labels::RESTARTED_AT: "2026-11-24T09:00:00Z"}}}),
        )
        .await
        .unwrap();
    })
    .await;
    cut.await
        .expect("the gossip cut task")
        .unwrap_or_else(|e| panic!("restartedAt, a peer's gossip cut: {e}\n{}", tail(&log)));
    roll(
        &world,
        &clusters,
        &log,
        "major upgrade 4.1 → 5.0",
        "cassandra:5.0.3",
        || set_version(&clusters, "5.0.3"),
    )
    .await;
    let list: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), NS);
    let reasons: Vec<String> = list
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["MemberRestarting", "MemberRestarted"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }

    // One edit that downgrades or skips a major: the schema refuses it.
    for (version, words) in [("4.1.8", "downgrade"), ("7.0.0", "skip a major")] {
        let refused = patch_cluster(&clusters, json!({"spec": {"version": version}})).await;
        match refused {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(status.message.contains(words), "{status:?}");
            }
            other => panic!("{version}: the schema let it through: {other:?}"),
        }
    }

    // Objects as an older operator left them (no applied hash, a
    // StatefulSet with RollingUpdate, another budget): one apply each
    // brings them to what the builders make, and restarts nobody.
    let before = members(&world).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(world.client.clone(), NS);
    let sts: Api<StatefulSet> = Api::namespaced(world.client.clone(), NS);
    let pdb_name = crds::names::pdb_name("c");
    let no_hash = json!({"cassandra.rook.io/applied-hash": null});
    pdbs.patch(
        &pdb_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": no_hash}, "spec": {"maxUnavailable": 2}})),
    )
    .await
    .unwrap();
    sts.patch(
        STS,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": no_hash},
            "spec": {"updateStrategy": {"type": "RollingUpdate"}}})),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pdb = pdbs.get(&pdb_name).await.unwrap();
        let set = sts.get(STS).await.unwrap();
        let hashed = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("cassandra.rook.io/applied-hash"))
        };
        let budget = pdb.spec.as_ref().and_then(|s| s.max_unavailable.clone());
        let strategy = set
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.type_.clone());
        if hashed(&pdb.metadata)
            && hashed(&set.metadata)
            && budget == Some(IntOrString::Int(1))
            && strategy.as_deref() == Some("OnDelete")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not applied: budget {budget:?}, strategy {strategy:?}\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = members(&world).await;
    assert_eq!(
        before.values().map(|m| &m.0).collect::<Vec<_>>(),
        after.values().map(|m| &m.0).collect::<Vec<_>>(),
        "applying restarted a member"
    );

    assert_eq!(
        old_template_gauge(),
        Some(0),
        "every member runs its template"
    );

    // A member that does not come back (its rack's new placement fits
    // no Node): the roll stops at it, with a condition and a Warning
    // Event naming it; the others are left alone.
    let before = members(&world).await;
    change_rack(&clusters, |rack| {
        rack["placement"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["nowhere"]}]}]}}});
    })
    .await;
    let stuck_member = member(2);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let c = clusters.get("c").await.unwrap();
        if condition(&c, "Degraded").is_some_and(|(s, r, m)| {
            s == "True" && r == "MemberRestartStuck" && m.contains("member 2 of rack r")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no MemberRestartStuck: {:?}\n{}",
            c.status,
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        warning(&world, "MemberRestartStuck", "member 2 of rack r").await,
        "no Warning Event naming the member"
    );
    let now = members(&world).await;
    for ordinal in 0..2 {
        let name = member(ordinal);
        assert_eq!(now[&name].0, before[&name].0, "{name} was touched");
        assert!(now[&name].3, "{name} is not Ready");
    }
    assert_ne!(
        now.get(&stuck_member).map(|p| &p.0),
        Some(&before[&stuck_member].0)
    );
    assert_eq!(
        old_template_gauge(),
        Some(2),
        "members 0 and 1 still run the old template"
    );
    // Putting the spec back lets the stopped member come back (its
    // Pending Pod is evicted: no budget holds a Pod that never started).
    change_rack(&clusters, |rack| {
        rack.as_object_mut().unwrap().remove("placement");
    })
    .await;
    wait_converged(&world, &clusters, &log, Duration::from_secs(90)).await;
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, MEMBERS, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");

    // What CEL cannot see: two edits, each allowed from the one before
    // (5.0 → 6.0 → 7.0) while the controller is stopped, and the members
    // still run 5.0. The controller refuses 5.0 → 7.0 and writes no
    // StatefulSet.
    drop(controller);
    set_version(&clusters, "6.0.0").await;
    set_version(&clusters, "7.0.0").await;
    world.sim.clear_requests();
    let sts: Api<StatefulSet> = Api::namespaced(world.client.clone(), NS);
    let sts_before = sts.get(STS).await.unwrap().metadata.resource_version;
    let _controller = start_controller(&world, &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = clusters.get("c").await.unwrap();
        if condition(&c, "Degraded")
            .is_some_and(|(s, r, _)| s == "True" && r == "VersionChangeRefused")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no VersionChangeRefused: {:?}",
            c.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        warning(&world, "VersionChangeRefused", "skips a release").await,
        "no Warning Event for the skipped major"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes: Vec<String> = operator_writes(&world.sim)
        .into_iter()
        .filter(|w| w.contains("/statefulsets") || w.contains("/pods"))
        .collect();
    assert!(writes.is_empty(), "a refused version wrote: {writes:#?}");
    assert_eq!(
        sts.get(STS).await.unwrap().metadata.resource_version,
        sts_before
    );
    let c = clusters.get("c").await.unwrap();
    assert_ne!(
        c.status.unwrap_or_default().observed_generation,
        c.metadata.generation,
        "a refused generation is not observed"
    );
}

/// Crash-anywhere: rolls (restart requests) with the controller SIGKILLed
/// and restarted at random moments, until at least 10 kills
/// (`ROLL_CRASH_KILLS`) fell during rolls. Every roll still restarts every member exactly once, one at a
/// time, and ends on the new revision with the data check clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_survive_the_controller_killed_at_random_moments() {
    let _one = ONE_WORLD.lock().await;
    let seed = std::env::var("LIFECYCLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("LIFECYCLE_SEED={seed}");
    let mut random = Lcg(seed);
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = roll_world(work.path()).await;
    let clusters = rack_of_three(&world, "4.1.8", &log).await;
    let watch = RollWatch::start(
        &world.sim,
        NS,
        &(0..MEMBERS).map(member).collect::<Vec<_>>(),
    );
    let mut controller = Some(controller);
    // `ROLL_CRASH_KILLS` (scripts/soak: 40) raises the bar.
    let wanted: usize = std::env::var("ROLL_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (mut kills, mut rolls) = (0, 0);
    while kills < wanted {
        rolls += 1;
        let before = members(&world).await;
        let revision_before = update_revision(&world).await;
        patch_cluster(
            &clusters,
            json!({"metadata": {"annotations": {crds::labels::RESTARTED_AT: format!("2026-11-24T09:00:0{rolls}Z")}}}),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut next_kill = Instant::now() + Duration::from_millis(random.below(800));
        loop {
            if Instant::now() >= next_kill {
                // SIGKILL, then a new controller process.
                drop(controller.take());
                kills += 1;
                controller = Some(start_controller(&world, &log));
                next_kill = Instant::now() + Duration::from_millis(200 + random.below(1200));
            }
            let pods = members(&world).await;
            let revision = update_revision(&world).await;
            let rolled = revision != revision_before
                && pods.len() == MEMBERS
                && pods.iter().all(|(name, (uid, r, _, ready))| {
                    *ready && Some(r) == revision.as_ref() && *uid != before[name].0
                });
            if rolled {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "roll {rolls} did not finish ({kills} kills so far): {pods:#?}\n{}\n{}",
                ring_text(&world.sim),
                tail(&log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("roll {rolls} done, {kills} kills so far");
    }
    wait_converged(&world, &clusters, &log, Duration::from_secs(60)).await;
    watch.assert_one_at_a_time(&format!("{rolls} rolls, {kills} controller kills"));
    assert_eq!(
        watch.deletions(),
        (0..MEMBERS).map(|o| (member(o), rolls)).collect(),
        "each roll restarts each member exactly once"
    );
    let (up, status, report) = ring_summary(&world.sim);
    assert_eq!(up, MEMBERS, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");
    eprintln!("{rolls} rolls, {kills} controller kills during them");
}
