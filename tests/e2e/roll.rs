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
//! controller SIGKILLed at random moments (each kill landing on a running
//! controller, some in the middle of a roll). The scenario's safety watch
//! is checked after each roll.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::fake_cassandra::ring_service::RingService;
use testworld::harness;
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{EventType, Target};
use testworld::ring::{Consistency, Replication};
use tokio::sync::broadcast::error::RecvError;

use crate::common::FAKE_WORLDS;
use crate::lifecycle::{Lcg, condition};
use crate::scenario::{
    ClusterSpec, Scenario, annotation, cluster, overrides, pod_ready, secs, setup, until,
};

const STS: &str = "c-dc-r";
const MEMBERS: usize = 3;
/// The controller's bound on a member's restart in these tests.
const CONTROLLER_ARGS: [&str; 2] = ["--member-restart-timeout-seconds", "20"];
const APPLIED_HASH: &str = "cassandra.rook.io/applied-hash";

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

/// Fails the test if `breach` finds something (`Some(what it saw)`) within
/// `duration`: [`until`] waiting for a breach, cut off at `duration`.
pub(crate) async fn never_for<F, Fut>(duration: Duration, breach: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let found = tokio::time::timeout(duration, until("a breach", duration + secs(1), breach)).await;
    if let Ok(breach) = found {
        panic!("{breach}");
    }
}

/// A member's address: its Service's ClusterIP.
async fn address(s: &Scenario, name: &str) -> String {
    s.service(name).await.spec.unwrap().cluster_ip.unwrap()
}

/// Whether the member whose Pod was `before` is going or gone.
async fn taken_down(s: &Scenario, before: &Pod) -> bool {
    let name = before.metadata.name.as_deref().unwrap();
    s.api::<Pod>().get_opt(name).await.unwrap().is_none_or(|p| {
        p.metadata.deletion_timestamp.is_some() || p.metadata.uid != before.metadata.uid
    })
}

/// During a roll: once member 2 is taken down, cuts member 0's network to
/// it (member 0 hears of it through member 1 but sees it DOWN, as a node
/// does whose echo to a peer never returns). Once member 2 is back Ready
/// on its new Pod, the roll must hold: `Progressing` names the ring, and
/// for 4 s member 1 is not taken down. Then heals the cut.
async fn cut_gossip_while_rolling(s: &Scenario) {
    let ring = s.sim().ring();
    let (cluster, observer) =
        host_at(ring, &address(s, &member(0)).await).expect("member 0 in a ring");
    let (_, subject) = host_at(ring, &address(s, &member(2)).await).expect("member 2 in a ring");
    let before = s.pod(&member(2)).await;
    s.until("member 2 taken down", secs(60), || taken_down(s, &before))
        .await;
    let cut = |on: bool| ring.with_cluster(&cluster, |r| r.cut_gossip(&observer, &subject, on));
    cut(true);
    s.until("member 2 back Ready on a new Pod", secs(60), || async {
        s.api::<Pod>()
            .get_opt(&member(2))
            .await
            .unwrap()
            .is_some_and(|p| {
                p.metadata.uid != before.metadata.uid
                    && p.metadata.deletion_timestamp.is_none()
                    && pod_ready(&p)
            })
    })
    .await;
    until_condition(
        s,
        "Progressing to say that member 0 does not see member 2",
        "Progressing",
        secs(20),
        |_, _, message| {
            message.contains("member 0 of rack r does not see member 2 of rack r up yet")
        },
    )
    .await;
    let next = s.pod(&member(1)).await;
    never_for(secs(4), || async {
        taken_down(s, &next)
            .await
            .then(|| "member 1 was taken down while member 0 saw member 2 DOWN".to_string())
    })
    .await;
    cut(false);
}

/// Starts the controller again (a running one is SIGKILLed first).
fn restart_controller(s: &mut Scenario) {
    s.start_controller_with(None, &CONTROLLER_ARGS);
}

/// Rack r of 3 members at `version` with the overrides ConfigMap
/// "tuning", and 1000 keys at RF 3; returns when all are Ready, with the
/// Cluster as created.
async fn rack_of_three(s: &Scenario, version: &str) -> ClusterSpec {
    s.api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &overrides("tuning", "concurrent_reads: 16\n"),
        )
        .await
        .unwrap();
    let c = cluster("c")
        .version(version)
        .rack("r", 3)
        .with_rack(json!({"configMapName": "tuning"}));
    s.create(&c).await;
    until_converged(s, secs(180)).await;
    s.ring().write(
        "k",
        Replication::network_topology([("dc", 3)]),
        1000,
        Consistency::Quorum,
    );
    c
}

/// The members' Pods by name: (uid, revision label, image, Ready).
type Members = BTreeMap<String, (String, String, String, bool)>;

async fn members(s: &Scenario) -> Members {
    s.api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| {
            let ready = pod_ready(&p) && p.metadata.deletion_timestamp.is_none();
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

async fn update_revision(s: &Scenario) -> Option<String> {
    s.api::<StatefulSet>()
        .get(STS)
        .await
        .ok()?
        .status?
        .update_revision
}

/// Waits until the cluster says it converged on its generation, every
/// member Ready on its StatefulSet's update revision.
async fn until_converged(s: &Scenario, timeout: Duration) {
    s.until(
        "Cluster c converged, every member Ready on the update revision",
        timeout,
        || async {
            let c = s.clusters().get("c").await.unwrap();
            let status = c.status.clone().unwrap_or_default();
            let converged = condition(&c, "Progressing")
                .is_some_and(|(s, r, _)| s == "False" && r == "Converged")
                && status.observed_generation == c.metadata.generation;
            let revision = update_revision(s).await;
            let pods = members(s).await;
            let rolled = pods.len() == MEMBERS
                && pods
                    .values()
                    .all(|(_, r, _, ready)| *ready && Some(r) == revision.as_ref());
            if converged && rolled {
                Ok(())
            } else {
                Err(format!(
                    "{status:?}\nupdate revision {revision:?}, pods {pods:#?}"
                ))
            }
        },
    )
    .await
}

/// Waits until Cluster c's condition `type_` is as `wanted` (its status,
/// reason and message) says: `what`.
async fn until_condition(
    s: &Scenario,
    what: &str,
    type_: &str,
    timeout: Duration,
    wanted: impl Fn(&str, &str, &str) -> bool,
) {
    s.until(what, timeout, || async {
        let c = s.clusters().get("c").await.unwrap();
        match condition(&c, type_) {
            Some((status, reason, message)) if wanted(&status, &reason, &message) => Ok(()),
            _ => Err(format!("{:?}", c.status)),
        }
    })
    .await
}

/// A roll from where it began: the members' Pods and the StatefulSet's
/// update revision then.
struct RollStart {
    pods: Members,
    revision: Option<String>,
}

/// How far a roll has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Stage {
    /// The StatefulSet has the new template.
    new_template: bool,
    /// Members Ready on new Pods of the new revision.
    rolled: usize,
    /// Members' Pods, whatever their state.
    pods: usize,
}

impl Stage {
    /// Every member (and no other) runs a new Pod of the new template,
    /// Ready.
    fn done(&self) -> bool {
        self.new_template && self.rolled == MEMBERS && self.pods == MEMBERS
    }
}

impl RollStart {
    async fn of(s: &Scenario) -> RollStart {
        RollStart {
            pods: members(s).await,
            revision: update_revision(s).await,
        }
    }

    /// How far the roll has come, and the members' Pods now.
    async fn stage(&self, s: &Scenario) -> (Stage, Members) {
        let revision = update_revision(s).await;
        let pods = members(s).await;
        let rolled = pods
            .iter()
            .filter(|(name, (uid, r, _, ready))| {
                *ready
                    && Some(r) == revision.as_ref()
                    && self.pods.get(*name).is_none_or(|b| &b.0 != uid)
            })
            .count();
        let stage = Stage {
            new_template: revision != self.revision,
            rolled,
            pods: pods.len(),
        };
        (stage, pods)
    }

    /// Whether the roll is done within `pause`; fails the test with `what`
    /// if it is not done when `left` has passed.
    async fn done_within(&self, s: &Scenario, pause: Duration, left: Duration, what: &str) -> bool {
        let done = s.until(what, left, || async {
            match self.stage(s).await {
                (stage, _) if stage.done() => Ok(()),
                (stage, pods) => Err(format!("{stage:?}: {pods:#?}")),
            }
        });
        tokio::time::timeout(pause, done).await.is_ok()
    }
}

/// Roll `n` (a restart request) with the controller SIGKILLed and
/// restarted at random moments until the roll is done (within 120 s): the
/// first kill within 800 ms, the next ones 200 to 1400 ms apart. Each kill
/// landed on a running controller (asserted), and is recorded in `kills`
/// with the roll's stage at that moment.
async fn roll_killing_the_controller(
    s: &mut Scenario,
    n: usize,
    random: &mut Lcg,
    kills: &mut Vec<Stage>,
) {
    let start = RollStart::of(s).await;
    s.patch_cluster("c", restart_request(n)).await;
    let began = Instant::now();
    let mut pause = Duration::from_millis(random.below(800));
    let what = |kills: usize| format!("roll {n} to finish ({kills} kills so far)");
    while !start
        .done_within(
            s,
            pause,
            secs(120).saturating_sub(began.elapsed()),
            &what(kills.len()),
        )
        .await
    {
        let (stage, _) = start.stage(s).await;
        if stage.done() {
            break;
        }
        assert!(
            s.controller().exited().is_none(),
            "roll {n}: the controller had exited before its kill ({stage:?})"
        );
        // SIGKILL, then a new controller process.
        restart_controller(s);
        kills.push(stage);
        pause = Duration::from_millis(200 + random.below(1200));
    }
}

fn restart_request(n: usize) -> Value {
    json!({"metadata": {"annotations": {crds::labels::RESTARTED_AT: format!("2026-11-24T09:00:{n:02}Z")}}})
}

/// Starts a roll with `trigger`, watches it whole and checks its end:
/// every member restarted once, one at a time, on the new revision and
/// `image`, the ring all UN on its release, the data check clean.
async fn roll<F, Fut>(s: &Scenario, what: &str, image: &str, trigger: F)
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    let started = Instant::now();
    let before = RollStart::of(s).await;
    let watch = RollWatch::start(
        s.sim(),
        &s.namespace,
        &(0..MEMBERS).map(member).collect::<Vec<_>>(),
    );
    trigger().await;
    // The new template first, then the roll to its end.
    s.until(
        &format!("{what}: the StatefulSet's template to change"),
        secs(30),
        || async { update_revision(s).await != before.revision },
    )
    .await;
    until_converged(s, secs(180)).await;
    watch.assert_one_at_a_time(what);
    s.assert_safe(what);
    for (name, (uid, _, running, _)) in &members(s).await {
        assert_ne!(
            uid, &before.pods[name].0,
            "{what}: {name} was not restarted"
        );
        assert_eq!(running, image, "{what}: {name} runs another image");
    }
    assert_eq!(
        watch.deletions(),
        (0..MEMBERS).map(|o| (member(o), 1)).collect(),
        "{what}: each member is restarted exactly once"
    );
    let ring = s.ring();
    let (up, status, report) = (ring.up(), ring.text(), ring.check());
    assert_eq!(up, MEMBERS, "{what}: {status}");
    assert!(
        report.is_clean(),
        "{what}: the roll lost data:\n{report}\n{status}"
    );
    // The ring (kubesim ring's release column) runs the new version.
    let release = image.rsplit(':').next().unwrap_or_default();
    let releases: Vec<String> = s.sim().ring().with(|ring| {
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

fn version(v: &str) -> Value {
    json!({"spec": {"version": v}})
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

/// The controller's gauge of members on an old template (this world has
/// one Cluster, c).
fn old_template_gauge(s: &Scenario) -> Option<i64> {
    s.metric("cassandra_operator_cluster_members_on_old_template")
        .map(|v| v as i64)
}

/// The Events' reasons, Warning or not, with their notes.
async fn events(s: &Scenario) -> Vec<Event> {
    s.api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// A Warning Event with `reason` whose note contains `text`.
async fn warning(s: &Scenario, reason: &str, text: &str) -> bool {
    events(s).await.into_iter().any(|e| {
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
    let _one = FAKE_WORLDS.lock().await;
    let mut s = setup().controller_args(&CONTROLLER_ARGS).start().await;
    let c = rack_of_three(&s, "4.1.3").await;

    // A member Service as an older operator built it (no applied hash, a
    // field of ours changed): applied again as built, the sidecar's records
    // and the ClusterIP kept.
    let gossip_record = |svc: &k8s_openapi::api::core::v1::Service| {
        annotation(&svc.metadata, crds::contract::GOSSIP)
    };
    // The sidecar records its node's view once gossip told it of all.
    let before = s
        .until(
            &format!("a gossip record of all up on {}", member(1)),
            secs(20),
            || async {
                let svc = s.service(&member(1)).await;
                gossip_record(&svc)
                    .is_some_and(|r| !r.contains(r#""down""#))
                    .then_some(svc)
            },
        )
        .await;
    s.patch_service(
        &member(1),
        json!({
            "metadata": {"annotations": {APPLIED_HASH: null}},
            "spec": {"publishNotReadyAddresses": false}
        }),
    )
    .await;
    let after = s
        .until("the member Service applied again", secs(20), || async {
            let svc = s.service(&member(1)).await;
            (svc.spec
                .as_ref()
                .and_then(|s| s.publish_not_ready_addresses)
                == Some(true))
            .then_some(svc)
        })
        .await;
    assert!(
        annotation(&after.metadata, APPLIED_HASH).is_some(),
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

    // The cleanups the bring-up asks for (each member gave ranges to the
    // next) are over, and the status no longer reports one: a cluster
    // whose member cleans up is not unchanged (its status follows the
    // cleanup keyspace by keyspace).
    crate::maintenance::until_idle(&s, &(0..MEMBERS).map(member).collect::<Vec<_>>()).await;
    s.until(
        "the status to report no maintenance running",
        secs(20),
        || async {
            let c = s.clusters().get("c").await.ok()?;
            let maintenance = c.status?.maintenance.unwrap_or_default();
            (maintenance.cleanup.is_none() && maintenance.upgradesstables.is_none()).then_some(())
        },
    )
    .await;

    // An unchanged cluster: zero writes in a reconcile, which a touch of
    // its overrides ConfigMap (an annotation, not its content) makes run
    // (a Pod status heartbeat from the kubelet is not the controller's).
    // The Service applied just above may reach the controller's cache
    // after the touch does (two watches, no order between them): that
    // reconcile applies it once more from its stale copy, the same
    // content. Once that write is in the cache, a second touch must write
    // nothing at all.
    let reapplied = format!(
        "PATCH /api/v1/namespaces/{}/services/{}?",
        s.namespace,
        member(1)
    );
    let mut writes = Vec::new();
    for touch in ["once", "twice"] {
        s.sim().clear_requests();
        let started = s.reconciles_started().await;
        s.api::<ConfigMap>()
            .patch(
                "tuning",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": touch}}})),
            )
            .await
            .unwrap();
        s.until_reconciled(started, secs(30)).await;
        writes = operator_writes(s.sim());
        let stale_cache = !writes.is_empty() && writes.iter().all(|w| w.starts_with(&reapplied));
        if !stale_cache {
            break;
        }
    }
    assert!(writes.is_empty(), "an unchanged cluster wrote: {writes:#?}");

    roll(
        &s,
        "patch upgrade 4.1.3 → 4.1.8",
        "cassandra:4.1.8",
        || s.patch_cluster("c", version("4.1.8")),
    )
    .await;
    roll(&s, "overrides content", "cassandra:4.1.8", || async {
        s.api::<ConfigMap>()
            .replace(
                "tuning",
                &PostParams::default(),
                &overrides("tuning", "concurrent_reads: 32\n"),
            )
            .await
            .unwrap();
    })
    .await;
    let c = c.with_rack(json!({"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}));
    roll(&s, "resources", "cassandra:4.1.8", || {
        s.patch_cluster("c", c.racks_patch())
    })
    .await;
    // During this roll, member 0's network to member 2 fails once member 2
    // is taken down: member 2 comes back Ready, but member 0 sees it DOWN,
    // and the roll must hold until it is healed.
    tokio::join!(
        cut_gossip_while_rolling(&s),
        roll(&s, "restartedAt", "cassandra:4.1.8", || {
            s.patch_cluster("c", restart_request(0))
        })
    );
    roll(&s, "major upgrade 4.1 → 5.0", "cassandra:5.0.3", || {
        s.patch_cluster("c", version("5.0.3"))
    })
    .await;
    let reasons: Vec<String> = events(&s)
        .await
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
    for (v, words) in [("4.1.8", "downgrade"), ("7.0.0", "skip a major")] {
        let refused = s
            .clusters()
            .patch("c", &PatchParams::default(), &Patch::Merge(version(v)))
            .await;
        match refused {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(status.message.contains(words), "{status:?}");
            }
            other => panic!("{v}: the schema let it through: {other:?}"),
        }
    }

    // Objects as an older operator left them (no applied hash, a
    // StatefulSet with RollingUpdate, another budget): one apply each
    // brings them to what the builders make, and restarts nobody.
    let before = members(&s).await;
    let pdbs: Api<PodDisruptionBudget> = s.api();
    let sts: Api<StatefulSet> = s.api();
    let pdb_name = crds::names::pdb_name("c");
    let no_hash = json!({APPLIED_HASH: null});
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
    s.until(
        "the budget and the StatefulSet applied again",
        secs(30),
        || async {
            let pdb = pdbs.get(&pdb_name).await.unwrap();
            let set = sts.get(STS).await.unwrap();
            let budget = pdb.spec.as_ref().and_then(|s| s.max_unavailable.clone());
            let strategy = set
                .spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.type_.clone());
            let hashed = annotation(&pdb.metadata, APPLIED_HASH).is_some()
                && annotation(&set.metadata, APPLIED_HASH).is_some();
            if hashed
                && budget == Some(IntOrString::Int(1))
                && strategy.as_deref() == Some("OnDelete")
            {
                Ok(())
            } else {
                Err(format!(
                    "hashed: {hashed}, budget {budget:?}, strategy {strategy:?}"
                ))
            }
        },
    )
    .await;
    let after = members(&s).await;
    assert_eq!(
        before.values().map(|m| &m.0).collect::<Vec<_>>(),
        after.values().map(|m| &m.0).collect::<Vec<_>>(),
        "applying restarted a member"
    );

    assert_eq!(
        old_template_gauge(&s),
        Some(0),
        "every member runs its template"
    );

    // A member that does not come back (its rack's new placement fits
    // no Node): the roll stops at it, with a condition and a Warning
    // Event naming it; the others are left alone.
    let before = members(&s).await;
    let nowhere = json!({"placement": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["nowhere"]}]}]}}}});
    s.patch_cluster("c", c.clone().with_rack(nowhere).racks_patch())
        .await;
    let stuck_member = member(2);
    until_condition(
        &s,
        "MemberRestartStuck naming member 2",
        "Degraded",
        secs(90),
        |status, reason, message| {
            status == "True"
                && reason == "MemberRestartStuck"
                && message.contains("member 2 of rack r")
        },
    )
    .await;
    assert!(
        warning(&s, "MemberRestartStuck", "member 2 of rack r").await,
        "no Warning Event naming the member"
    );
    let now = members(&s).await;
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
        old_template_gauge(&s),
        Some(2),
        "members 0 and 1 still run the old template"
    );
    // Putting the spec back lets the stopped member come back (its
    // Pending Pod is evicted: no budget holds a Pod that never started).
    s.patch_cluster("c", c.racks_patch()).await;
    until_converged(&s, secs(90)).await;
    s.ring().assert_intact(MEMBERS);

    // What CEL cannot see: two edits, each allowed from the one before
    // (5.0 → 6.0 → 7.0) while the controller is stopped, and the members
    // still run 5.0. The controller refuses 5.0 → 7.0 and writes no
    // StatefulSet.
    s.stop_controller();
    s.patch_cluster("c", version("6.0.0")).await;
    s.patch_cluster("c", version("7.0.0")).await;
    s.sim().clear_requests();
    let sts_before = sts.get(STS).await.unwrap().metadata.resource_version;
    restart_controller(&mut s);
    until_condition(
        &s,
        "VersionChangeRefused",
        "Degraded",
        secs(30),
        |status, reason, _| status == "True" && reason == "VersionChangeRefused",
    )
    .await;
    assert!(
        warning(&s, "VersionChangeRefused", "skips a release").await,
        "no Warning Event for the skipped major"
    );
    // The refusal is in the status, which a reconcile patches last, after
    // its writes: it wrote no StatefulSet and no Pod.
    let writes: Vec<String> = operator_writes(s.sim())
        .into_iter()
        .filter(|w| w.contains("/statefulsets") || w.contains("/pods"))
        .collect();
    assert!(writes.is_empty(), "a refused version wrote: {writes:#?}");
    assert_eq!(
        sts.get(STS).await.unwrap().metadata.resource_version,
        sts_before
    );
    let c = s.clusters().get("c").await.unwrap();
    assert_ne!(
        c.status.unwrap_or_default().observed_generation,
        c.metadata.generation,
        "a refused generation is not observed"
    );
}

/// Crash-anywhere: rolls (restart requests) with the controller SIGKILLed
/// and restarted at random moments, until at least 10 kills
/// (`ROLL_CRASH_KILLS`) landed on a running controller during rolls, some
/// of them in the middle of one (the new template applied, not every
/// member rolled yet). Every roll still restarts every member exactly
/// once, one at a time, and ends on the new revision with the data check
/// clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_survive_the_controller_killed_at_random_moments() {
    let _one = FAKE_WORLDS.lock().await;
    let seed = crate::lifecycle_crash::seed();
    let mut random = Lcg(seed);
    let mut s = setup().controller_args(&CONTROLLER_ARGS).start().await;
    rack_of_three(&s, "4.1.8").await;
    let watch = RollWatch::start(
        s.sim(),
        &s.namespace,
        &(0..MEMBERS).map(member).collect::<Vec<_>>(),
    );
    // `ROLL_CRASH_KILLS` (scripts/soak: 40) raises the bar.
    let wanted: usize = std::env::var("ROLL_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (mut kills, mut rolls) = (Vec::new(), 0);
    while kills.len() < wanted {
        rolls += 1;
        roll_killing_the_controller(&mut s, rolls, &mut random, &mut kills).await;
        s.assert_safe(&format!("roll {rolls} (seed {seed})"));
        eprintln!("roll {rolls} done, {} kills so far", kills.len());
    }
    until_converged(&s, secs(60)).await;
    let what = format!(
        "{rolls} rolls, {} controller kills (seed {seed})",
        kills.len()
    );
    watch.assert_one_at_a_time(&what);
    assert_eq!(
        watch.deletions(),
        (0..MEMBERS).map(|o| (member(o), rolls)).collect(),
        "{what}: each roll restarts each member exactly once"
    );
    s.ring().assert_intact(MEMBERS);
    let mut by_stage = BTreeMap::<Stage, usize>::new();
    for stage in &kills {
        *by_stage.entry(*stage).or_default() += 1;
    }
    eprintln!("{what}, by the roll's stage: {by_stage:?}");
    // A crash test whose kills never hit a roll under way proved nothing.
    assert!(
        kills.iter().any(|k| k.new_template),
        "{what}: no kill landed in the middle of a roll: {by_stage:?}"
    );
}
