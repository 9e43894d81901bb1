//! Crash-anywhere for the replace and the decommission (issue 13), end to
//! end with the real binary: a member whose Node (and local SSD) is lost is
//! replaced while the controller is SIGKILLed right after each of its
//! writes in turn, or at random moments with the API server's faults on
//! in alternate runs; a scale-down's leaving member has its container
//! (the sidecar, PID 1, and Cassandra under it) SIGKILLed at random
//! moments. Every run converges to the spec with a clean data check, and
//! the scenario's safety watch checks the safety rules at every change the
//! API server commits. Each test counts the kills that landed (a kill of a
//! process that had already exited is none) and asserts what state the
//! victim was in when it was killed. The machinery is shared with
//! lifecycle.rs's scale-downs with the controller killed.
//!
//! `LIFECYCLE_CRASH_RUNS=<n>` (20 in `scripts/soak`) sets the random runs;
//! `LIFECYCLE_SEED` repeats one.

use std::future::ready;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crds::Cluster;
use crds::contract;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use serde_json::Value;
use testworld::harness::{self, Process};
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::Target;
use testworld::ring::{NodeStatus, OperationMode};

use crate::common::FAKE_WORLDS;
use crate::lifecycle::{
    Lcg, NS, STS_B, STS_R, condition_is, ensure, in_ring, one_rack, set_rack_r, thesis_rack_b,
};
use crate::scenario::{Scenario, ring, secs, setup, until_with};

/// How many random runs (`LIFECYCLE_CRASH_RUNS`, else `default`) and the
/// random source's seed (`LIFECYCLE_SEED`, else the clock), printed.
pub(crate) fn runs_and_seed(default: usize) -> (usize, u64) {
    let runs = std::env::var("LIFECYCLE_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    eprintln!("LIFECYCLE_CRASH_RUNS={runs}");
    (runs, seed())
}

/// The random source's seed: `LIFECYCLE_SEED`, else the clock; printed,
/// so that a failed run can be replayed.
pub(crate) fn seed() -> u64 {
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
    seed
}

/// The API server's faults at 5 %: 409s, 500s, committed writes whose
/// answer is lost (a 504), watch events delivered late (a controller acting
/// on a stale cache), dropped watches.
pub(crate) fn five_percent_faults() -> testworld::kubesim::faults::FaultConfig {
    testworld::kubesim::faults::FaultConfig {
        conflict_rate: 0.05,
        error_rate: 0.05,
        drop_watch_rate: 0.05,
        drop_watch_after_ms: 2000,
        lost_response_rate: 0.05,
        late_watch_rate: 0.05,
        late_watch_ms: 500,
        ..Default::default()
    }
}

/// An object of namespace [`NS`] as the API server has it (read from its
/// store: the test's reads see no injected faults): `plural` of core/v1,
/// or `statefulsets`, or `clusters`.
pub(crate) fn stored(sim: &KubeSim, plural: &str, name: &str) -> Option<Value> {
    let (group, version) = match plural {
        "statefulsets" => ("apps", "v1"),
        "clusters" => ("cassandra.rook.io", "v1alpha1"),
        _ => ("", "v1"),
    };
    sim.store()
        .get(&Target::new(group, version, plural, Some(NS)), name)
        .ok()
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn has_label(object: &Value, key: &str) -> bool {
    object["metadata"]["labels"].get(key).is_some()
}

fn deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some()
}

/// A member Service's ClusterIP, as the API server has it.
pub(crate) fn cluster_ip(sim: &KubeSim, member: &str) -> Option<String> {
    let service = stored(sim, "services", member)?;
    Some(text(&service, "/spec/clusterIP").to_string()).filter(|ip| !ip.is_empty())
}

/// The node at `address` as the ring has it, for a kill's record: its
/// status (None: not in the ring) and its process's mode (None: it does
/// not run).
type NodeState = (Option<NodeStatus>, Option<OperationMode>);

fn node_state(sim: &KubeSim, address: &str) -> NodeState {
    let status = ring(sim)
        .rows()
        .into_iter()
        .find(|(a, _)| a == address)
        .map(|(_, s)| s);
    let mode = sim.ring().with(|r| {
        r.node_by_address(address)
            .and_then(|n| n.process.as_ref().map(|p| p.mode))
    });
    (status, mode)
}

/// How far the removal of a member has gone, as the API server and the
/// ring show it, in the order the controller's protocol goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Removal {
    /// Its Service does not carry the controller's decommission request.
    NotAsked,
    /// Asked to leave; its node is still in the ring.
    Asked,
    /// Its node left the ring; the StatefulSet still counts it.
    Left,
    /// The StatefulSet no longer counts it; its claim remains.
    Shrunk,
    /// Its claim is deleted (or being deleted); its Service remains.
    ClaimDeleted,
    /// Its Service is deleted (or being deleted).
    Removed,
}

impl Removal {
    /// Where the removal of `member` (its node at `address`) stands.
    pub(crate) fn of(sim: &KubeSim, member: &str, address: &str) -> Removal {
        let going =
            |plural: &str, name: &str| stored(sim, plural, name).is_none_or(|o| deleting(&o));
        let (set, ordinal) = member.rsplit_once('-').expect("a member's name");
        let ordinal: i64 = ordinal.parse().expect("a member's ordinal");
        let replicas = stored(sim, "statefulsets", set)
            .and_then(|s| s.pointer("/spec/replicas")?.as_i64())
            .unwrap_or(1);
        let asked = stored(sim, "services", member).is_some_and(|s| {
            s["metadata"]["annotations"]
                .get(contract::DECOMMISSION_REQUEST)
                .is_some()
        });
        if going("services", member) {
            Removal::Removed
        } else if going("persistentvolumeclaims", &format!("data-{member}")) {
            Removal::ClaimDeleted
        } else if replicas <= ordinal {
            Removal::Shrunk
        } else if !in_ring(sim, address) {
            Removal::Left
        } else if asked {
            Removal::Asked
        } else {
            Removal::NotAsked
        }
    }
}

/// Whether `member` (its node at `address`) is removed: out of the ring,
/// its claim and Service gone, the Cluster Ready with `members` members,
/// all ready. Panics if its claim or Service went while its node is in
/// the ring (judged by a ring read after the objects).
pub(crate) fn removed(
    sim: &KubeSim,
    member: &str,
    address: &str,
    members: i32,
) -> Result<(), String> {
    let claim = stored(sim, "persistentvolumeclaims", &format!("data-{member}")).is_some();
    let service = stored(sim, "services", member).is_some();
    let in_ring = in_ring(sim, address);
    assert!(
        !in_ring || (claim && service),
        "{member}'s claim or Service deleted while it is in the ring:\n{}",
        ring(sim).text()
    );
    let cluster = stored_cluster(sim);
    let ready = cluster.as_ref().is_some_and(|c| {
        condition_is(c, "Ready", "True")
            && c.status
                .as_ref()
                .is_some_and(|s| s.members == members && s.ready_members == members)
    });
    ensure(!in_ring && !claim && !service && ready, || {
        format!(
            "{member}: {:?}, in the ring: {in_ring}, claim: {claim}, Service: {service}; status {:?}",
            Removal::of(sim, member, address),
            cluster.and_then(|c| c.status)
        )
    })
}

fn stored_cluster(sim: &KubeSim) -> Option<Cluster> {
    serde_json::from_value(stored(sim, "clusters", "cassandra")?).ok()
}

/// One write of the controller's, to crash it right after, and `then`:
/// what the world shows at the crash when it came after this write.
pub(crate) struct Write<Then> {
    verb: &'static str,
    resource: &'static str,
    name: Option<String>,
    /// Text the committed object contains (which Event, which status).
    contains: Option<String>,
    nth: u32,
    pub(crate) then: Then,
}

impl<Then> Write<Then> {
    /// The first write by the controller with `verb` on `resource` (the
    /// plural; `plural/subresource` for a subresource) named `name` (None:
    /// any) whose committed object contains `contains`.
    pub(crate) fn new(
        verb: &'static str,
        resource: &'static str,
        name: Option<&str>,
        contains: Option<String>,
        then: Then,
    ) -> Self {
        Write {
            verb,
            resource,
            name: name.map(str::to_string),
            contains,
            nth: 1,
            then,
        }
    }

    /// The `nth` such write (from 1).
    fn nth(self, nth: u32) -> Self {
        Write { nth, ..self }
    }
}

impl<Then> std::fmt::Display for Write<Then> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} (#{}{})",
            self.verb,
            self.resource,
            self.name.as_deref().unwrap_or("*"),
            self.nth,
            self.contains
                .as_deref()
                .map(|c| format!(", containing {c}"))
                .unwrap_or_default()
        )
    }
}

/// A fresh controller (its Event recorder creates Events: one that saw an
/// Event patches its series instead), its log in the scenario's, SIGKILLed
/// by the API server right after `write` commits.
pub(crate) fn crash_after<T>(s: &Scenario, write: &Write<T>) -> Process {
    let controller = s.world.start_controller(&s.log, None).unwrap();
    let user = harness::operator_user();
    let (verb, resource, name) = (write.verb, write.resource, write.name.as_deref());
    match &write.contains {
        Some(contains) => s.world.crash_on_write_containing(
            &controller,
            Some(&user),
            verb,
            resource,
            name,
            contains,
            write.nth,
        ),
        None => s
            .world
            .crash_on_write(&controller, Some(&user), verb, resource, name, write.nth),
    }
    controller
}

/// Waits for the crash [`crash_after`] set up, and asserts that it was
/// the SIGKILL (the kill landed: the controller did not exit by itself).
pub(crate) async fn until_crashed<T>(s: &Scenario, controller: &mut Process, write: &Write<T>) {
    let status = s
        .until(
            &format!(
                "the controller's crash after {write} (a write the controller never makes means the list is stale)"
            ),
            secs(150),
            || ready(controller.exited()),
        )
        .await;
    assert_eq!(
        status.signal(),
        Some(nix::sys::signal::Signal::SIGKILL as i32),
        "crash after {write}: the controller exited by itself ({status})"
    );
}

/// Kills the controller (SIGKILL) at random moments and restarts it up to
/// 300 ms later, its log in the scenario's: the first kill 100 to 1600 ms
/// from now, the next ones 300 to 2300 ms apart, at most `most`; then
/// leaves it running and never returns (run it beside a wait; dropped
/// between a kill and its restart, it leaves the controller dead). Each
/// kill that landed (the controller still ran) is recorded in `kills`
/// with `state()`, the state of the world read at the moment of the kill.
pub(crate) async fn kill_at_random_moments<S>(
    s: &Scenario,
    controller: &mut Process,
    random: &mut Lcg,
    most: usize,
    state: impl Fn() -> S,
    kills: &mut Vec<S>,
) {
    let mut first = true;
    let schedule = std::iter::repeat_with(|| {
        let pause = if std::mem::take(&mut first) {
            100 + random.below(1500)
        } else {
            300 + random.below(2000)
        };
        (
            Duration::from_millis(pause),
            Duration::from_millis(random.below(300)),
        )
    })
    .take(most);
    for (pause, down) in schedule {
        tokio::time::sleep(pause).await;
        let (running, now) = (controller.exited().is_none(), state());
        let _ = controller.0.kill();
        let _ = controller.0.wait();
        if running {
            kills.push(now);
        }
        tokio::time::sleep(down).await;
        *controller = s.world.start_controller(&s.log, None).unwrap();
    }
    std::future::pending::<()>().await;
}

/// A member whose Node is gone, as it was before.
struct Lost {
    member: String,
    address: String,
    node: String,
    claim_uid: String,
}

/// Deletes the Node of `member` (its local SSD goes with it).
async fn lose_the_node_of(s: &Scenario, member: &str) -> Lost {
    let sim = s.sim();
    let pod = stored(sim, "pods", member).expect("the member's Pod");
    let node = text(&pod, "/spec/nodeName").to_string();
    let claim = stored(sim, "persistentvolumeclaims", &format!("data-{member}"))
        .expect("the member's claim");
    let nodes: Api<Node> = Api::all(s.client());
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    Lost {
        member: member.to_string(),
        address: cluster_ip(sim, member).expect("the member's Service"),
        node,
        claim_uid: text(&claim, "/metadata/uid").to_string(),
    }
}

/// Whether the lost member is replaced: its Service keeps its address and
/// no longer records the intent, a new claim, its Pod ready on another
/// Node, its address UN in a ring of `members` UN nodes, the Cluster
/// converged; else what is missing.
fn replaced(sim: &KubeSim, lost: &Lost, members: usize) -> Result<(), String> {
    let member = &lost.member;
    let service = stored(sim, "services", member).ok_or("no member Service")?;
    ensure(text(&service, "/spec/clusterIP") == lost.address, || {
        format!("the Service's address is not {}", lost.address)
    })?;
    ensure(!has_label(&service, contract::REPLACE), || {
        "the Service still records the replace".into()
    })?;
    let claim = stored(sim, "persistentvolumeclaims", &format!("data-{member}"));
    ensure(
        claim.is_some_and(|c| text(&c, "/metadata/uid") != lost.claim_uid && !deleting(&c)),
        || "no new claim".into(),
    )?;
    let pod = stored(sim, "pods", member).ok_or("no Pod")?;
    ensure(text(&pod, "/spec/nodeName") != lost.node, || {
        "the Pod is on the lost Node".into()
    })?;
    ensure(pod_ready(&pod), || "the Pod is not ready".into())?;
    let rows = ring(sim).rows();
    ensure(
        rows.len() == members
            && rows.iter().all(|(_, s)| *s == NodeStatus::UN)
            && rows.iter().any(|(a, _)| a == &lost.address),
        || format!("the ring is not {members} UN nodes with {}", lost.address),
    )?;
    let cluster = stored_cluster(sim);
    ensure(
        cluster.as_ref().is_some_and(|c| {
            condition_is(c, "Progressing", "False")
                && c.status.as_ref().is_some_and(|s| {
                    s.members == members as i32 && s.ready_members == members as i32
                })
        }),
        || format!("status {:?}", cluster.and_then(|c| c.status)),
    )
}

/// Whether a Pod, as stored, is Ready.
fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// How far the replace of a lost member has gone, as the API server shows
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    /// The member Service does not record the intent yet.
    NotRecorded,
    /// The intent recorded; the lost claim still there.
    Recorded,
    /// The intent recorded; the lost claim deleted (or being deleted).
    ClaimDeleted,
    /// The intent cleared: the replace is done.
    Cleared,
}

/// Whether the member Service records the replace intent.
fn intent_recorded(sim: &KubeSim, member: &str) -> bool {
    stored(sim, "services", member).is_some_and(|s| has_label(&s, contract::REPLACE))
}

impl Replace {
    fn of(sim: &KubeSim, lost: &Lost) -> Replace {
        let intent = intent_recorded(sim, &lost.member);
        let lost_claim = stored(
            sim,
            "persistentvolumeclaims",
            &format!("data-{}", lost.member),
        )
        .is_some_and(|c| text(&c, "/metadata/uid") == lost.claim_uid && !deleting(&c));
        match (intent, lost_claim) {
            (false, true) => Replace::NotRecorded,
            (true, true) => Replace::Recorded,
            (true, false) => Replace::ClaimDeleted,
            (false, false) => Replace::Cleared,
        }
    }
}

/// The objects a replace involves, one line each, for a failure message.
fn world_state(sim: &KubeSim) -> String {
    let list = |plural: &str, namespace: Option<&str>| -> Vec<Value> {
        sim.store()
            .list(
                &Target::new("", "v1", plural, namespace),
                &Default::default(),
            )
            .ok()
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for n in list("nodes", None) {
        out.push(format!(
            "node {} uid {}",
            text(&n, "/metadata/name"),
            text(&n, "/metadata/uid")
        ));
    }
    for pv in list("persistentvolumes", None) {
        out.push(format!(
            "pv {} phase {} claim {} ({}) deleting {}",
            text(&pv, "/metadata/name"),
            text(&pv, "/status/phase"),
            text(&pv, "/spec/claimRef/name"),
            text(&pv, "/spec/claimRef/uid"),
            deleting(&pv)
        ));
    }
    for c in list("persistentvolumeclaims", Some(NS)) {
        out.push(format!(
            "claim {} uid {} phase {} volume {} deleting {} finalizers {}",
            text(&c, "/metadata/name"),
            text(&c, "/metadata/uid"),
            text(&c, "/status/phase"),
            text(&c, "/spec/volumeName"),
            deleting(&c),
            c.pointer("/metadata/finalizers")
                .cloned()
                .unwrap_or_default()
        ));
    }
    for p in list("pods", Some(NS)) {
        out.push(format!(
            "pod {} uid {} node {} phase {} deleting {} conditions {}",
            text(&p, "/metadata/name"),
            text(&p, "/metadata/uid"),
            text(&p, "/spec/nodeName"),
            text(&p, "/status/phase"),
            deleting(&p),
            p.pointer("/status/conditions").cloned().unwrap_or_default()
        ));
    }
    for s in list("services", Some(NS)) {
        out.push(format!(
            "service {} labels {} annotations {}",
            text(&s, "/metadata/name"),
            s.pointer("/metadata/labels").cloned().unwrap_or_default(),
            s.pointer("/metadata/annotations")
                .cloned()
                .unwrap_or_default()
        ));
    }
    out.join("\n")
}

/// GKE brings the lost machine back (`kubesim node recreate`), empty: a
/// spare Node for the next run, or the same machine after auto-repair.
pub(crate) fn recreate_node(sim: &KubeSim, node: &str) {
    let kubesim = harness::beside(
        Path::new(env!("CARGO_BIN_EXE_cassandra-operator")),
        "kubesim",
    )
    .unwrap();
    let out = Command::new(&kubesim)
        .args(["node", "recreate", node, "--url", &sim.sim_url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubesim node recreate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The controller's writes in a replace, in order, each with whether the
/// member Service records the replace intent at the crash after it (None:
/// not checked): the intent recorded on the member Service, its Event, the
/// status that says so, the lost claim deleted, the Pod deleted, the
/// intent cleared, its Event.
fn replace_writes(member: &str) -> Vec<Write<Option<bool>>> {
    let claim = format!("data-{member}");
    let reason = |reason: &str| Some(format!("\"reason\":\"{reason}\""));
    let intent = Some(format!("\"{}\":\"", contract::REPLACE));
    #[rustfmt::skip]
    let writes = [
        ("patch", "services", Some(member), intent, 1, Some(true)),
        ("create", "events", None, reason("MemberReplacing"), 1, Some(true)),
        ("patch", "clusters/status", Some("cassandra"), reason("MemberReplacing"), 1, None),
        ("delete", "persistentvolumeclaims", Some(&*claim), None, 1, Some(true)),
        ("delete", "pods", Some(member), None, 1, Some(true)),
        // The second patch of the member Service: the intent cleared.
        ("patch", "services", Some(member), None, 2, Some(false)),
        ("create", "events", None, reason("MemberReplaced"), 1, Some(false)),
    ];
    writes
        .into_iter()
        .map(|(verb, resource, name, contains, nth, then)| {
            Write::new(verb, resource, name, contains, then).nth(nth)
        })
        .collect()
}

/// The replace with the controller SIGKILLed right after each write of
/// `which` (indices into [`replace_writes`]) in turn, then restarted.
async fn replace_killed_after_writes(which: &[usize]) {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = thesis_rack_b(setup(), 2, 2).await;
    // The test runs the controller it crashes.
    s.stop_controller();
    let sim = s.sim();
    let mut kills = 0;
    for (run, &index) in which.iter().enumerate() {
        let member = format!("{STS_B}-{}", run % 2);
        let write = replace_writes(&member).remove(index);
        let what = format!("crash after {write}");
        let mut controller = crash_after(&s, &write);
        let started = Instant::now();
        let lost = lose_the_node_of(&s, &member).await;
        until_crashed(&s, &mut controller, &write).await;
        if let Some(intent) = write.then {
            let recorded = intent_recorded(sim, &member);
            assert_eq!(
                recorded,
                intent,
                "{what}: the crash came after another write (the replace intent is {}recorded)",
                if recorded { "" } else { "not " }
            );
        }
        kills += 1;
        let _controller = s.world.start_controller(&s.log, None).unwrap();
        until_with(
            &format!("{what}: {member} replaced"),
            secs(150),
            || ready(replaced(sim, &lost, 2)),
            || format!("{}\n{}", world_state(sim), s.context()),
        )
        .await;
        s.ring().assert_intact(2);
        s.assert_safe(&what);
        eprintln!(
            "{what}: replaced in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        recreate_node(sim, &lost.node);
    }
    assert_eq!(kills, which.len(), "one crash after each write");
}

/// The replace with the controller SIGKILLed right after each of its
/// writes in turn (the intent recorded, its Event, the status that says
/// so, the lost claim deleted, the Pod deleted, the intent cleared, its
/// Event), then restarted: each run replaces the member at its address on
/// another Node, 2 UN nodes, no key lost, and at no committed change a
/// claim deleted without the intent recorded or two members being
/// replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replace_survives_the_controller_killed_after_each_write() {
    let all: Vec<usize> = (0..replace_writes("m").len()).collect();
    replace_killed_after_writes(&all).await;
}

/// Whether the lost member's container runs on another Node while its
/// Service records the replace intent: the replacement is under way.
fn running_elsewhere(sim: &KubeSim, lost: &Lost) -> bool {
    let intent = intent_recorded(sim, &lost.member);
    let running = stored(sim, "pods", &lost.member).is_some_and(|p| {
        text(&p, "/spec/nodeName") != lost.node
            && p.pointer("/status/containerStatuses/0/state/running")
                .is_some()
    });
    intent && running
}

/// SIGKILLs a Pod's container (its PID 1, the sidecar, and Cassandra
/// under it), if it runs. Whether it did.
fn kill_container(sim: &KubeSim, pod: &str) -> bool {
    let pid = stored(sim, "pods", pod).and_then(|p| {
        text(&p, "/status/containerStatuses/0/containerID")
            .strip_prefix("kubesim://")?
            .parse::<i32>()
            .ok()
    });
    pid.is_some_and(|pid| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok()
    })
}

/// The replacing member is killed within this long (ms) after its
/// container first runs on its new Node.
const MEMBER_KILL_WITHIN_MS: u64 = 2500;

/// The replace with the controller SIGKILLed at random moments (up to 6
/// times a run), and the replacing member's container once while its
/// replacement is under way (the sidecar, and Cassandra under it, before
/// its node is UN): with the API server's faults at 5 % in every other
/// run, every run converges. Every run has controller kills that landed
/// and its member kill; some controller kills landed while the replace
/// was under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replace_survives_the_controller_and_the_member_killed_at_random_moments() {
    let (runs, seed) = runs_and_seed(2);
    let mut random = Lcg(seed);
    let _one = FAKE_WORLDS.lock().await;
    // Long enough to kill the replacing member while it streams: twice
    // the longest kill delay below, so that a loaded machine (CI's two
    // cores, the suite in parallel) still kills it before it is NORMAL.
    let replace_slowly = setup().options(|o| o.ring.timing.replace_ms = 2 * MEMBER_KILL_WITHIN_MS);
    let mut s = thesis_rack_b(replace_slowly, 2, 2).await;
    s.stop_controller();
    let mut controller = s.world.start_controller(&s.log, None).unwrap();
    let sim = s.sim();
    let (mut kills, mut member_kills) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let faults = run % 2 == 1;
        let member = format!("{STS_B}-{}", run % 2);
        let lost = lose_the_node_of(&s, &member).await;
        if faults {
            sim.set_faults(five_percent_faults());
        }
        let what = format!("run {run} (faults: {faults}, seed {seed})");
        let started = Instant::now();
        // The replacing member is killed this long after its container
        // first runs on its new Node (retried while it is between
        // restarts).
        let member_kill_after = Duration::from_millis(random.below(MEMBER_KILL_WITHIN_MS));
        let mut running_since: Option<Instant> = None;
        let mut member_killed: Option<NodeState> = None;
        let mut run_kills = Vec::new();
        let replace = format!("{what}: {member} replaced");
        tokio::select! {
            () = until_with(
                &replace,
                secs(180),
                || {
                    if running_since.is_none() && running_elsewhere(sim, &lost) {
                        running_since = Some(Instant::now());
                    }
                    if member_killed.is_none()
                        && running_since.is_some_and(|t| t.elapsed() >= member_kill_after)
                        && running_elsewhere(sim, &lost)
                    {
                        let state = node_state(sim, &lost.address);
                        if kill_container(sim, &member) {
                            member_killed = Some(state);
                        }
                    }
                    ready(match member_killed {
                        None => Err("the replacing member not killed yet".to_string()),
                        Some(_) => replaced(sim, &lost, 2),
                    })
                },
                || format!("{}\n{}", world_state(sim), s.context()),
            ) => {}
            () = kill_at_random_moments(
                &s,
                &mut controller,
                &mut random,
                6,
                || Replace::of(sim, &lost),
                &mut run_kills,
            ) => {}
        }
        sim.set_faults(Default::default());
        s.ring().assert_intact(2);
        s.assert_safe(&what);
        let state = member_killed.expect("the member killed");
        eprintln!(
            "{what}: replaced in {:.1} s; the controller killed {run_kills:?}, the member at {state:?}",
            started.elapsed().as_secs_f64()
        );
        assert_ne!(
            state.0,
            Some(NodeStatus::UN),
            "{what}: the replacing member was killed once its replacement was done ({state:?}): the kill proved nothing"
        );
        assert!(
            (1..=6).contains(&run_kills.len()),
            "{what}: {} controller kills landed, not 1 to 6",
            run_kills.len()
        );
        member_kills.push(state);
        kills.extend(run_kills);
        if controller.exited().is_some() {
            controller = s.world.start_controller(&s.log, None).unwrap();
        }
        recreate_node(sim, &lost.node);
    }
    eprintln!(
        "{runs} runs, {} controller kills, {} replacing-member kills",
        kills.len(),
        member_kills.len()
    );
    assert_eq!(member_kills.len(), runs, "one member kill a run");
    assert!(
        kills
            .iter()
            .any(|k| matches!(k, Replace::Recorded | Replace::ClaimDeleted)),
        "no controller kill landed while the replace was under way (seed {seed}): {kills:?}"
    );
}

/// A scale-down with the leaving member's container (the sidecar, and
/// Cassandra under it) SIGKILLed at random moments of its decommission
/// (twice a run), the controller running: every run converges to the spec
/// with a clean data check, and nothing is deleted (claim, Service) and the
/// StatefulSet not shrunk before the member's decommission is confirmed,
/// at any change the API server commits. Every run has kills that landed;
/// some landed while the member was asked to leave and still in the ring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_down_survives_the_leaving_member_killed_at_random_moments() {
    let (runs, seed) = runs_and_seed(2);
    let mut random = Lcg(seed);
    let _one = FAKE_WORLDS.lock().await;
    let s = setup()
        .namespace(NS)
        // Long enough for kills while the member streams.
        .options(|o| o.ring.timing.decommission_ms = 3000)
        .start()
        .await;
    one_rack(&s, "3.11.6", 3, 2).await;
    let sim = s.sim();
    let member = format!("{STS_R}-2");
    let mut kills = Vec::new();
    for run in 0..runs {
        let what = format!("run {run} (seed {seed})");
        let address = s
            .until(&format!("{member}'s Service"), secs(60), || {
                ready(cluster_ip(sim, &member))
            })
            .await;
        set_rack_r(&s, 2).await;
        let started = Instant::now();
        let mut kill_at: Vec<Instant> = (0..2)
            .map(|_| started + Duration::from_millis(random.below(4000)))
            .collect();
        kill_at.sort();
        kill_at.reverse();
        let mut run_kills = Vec::new();
        s.until(&format!("{what}: {member} removed"), secs(150), || {
            // A kill waits for the container to run again (it may be
            // between restarts), as long as the member has a Pod.
            if kill_at.last().is_some_and(|at| Instant::now() >= *at) {
                let state = (
                    Removal::of(sim, &member, &address),
                    node_state(sim, &address),
                );
                if kill_container(sim, &member) {
                    kill_at.pop();
                    eprintln!(
                        "{what}: the leaving member killed after {:.1} s ({state:?})",
                        started.elapsed().as_secs_f64()
                    );
                    run_kills.push(state);
                } else if stored(sim, "pods", &member).is_none() {
                    kill_at.clear();
                }
            }
            ready(
                removed(sim, &member, &address, 2)
                    .and_then(|()| ensure(kill_at.is_empty(), || "kills to come".into())),
            )
        })
        .await;
        s.ring().assert_intact(2);
        s.assert_safe(&what);
        eprintln!(
            "{what}: scaled down in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(
            !run_kills.is_empty(),
            "{what}: no kill of the leaving member landed"
        );
        kills.extend(run_kills);
        set_rack_r(&s, 3).await;
        s.until_ready("cassandra", 3, secs(120)).await;
        s.ring().assert_intact(3);
    }
    eprintln!("{runs} runs, {} leaving-member kills", kills.len());
    assert!(
        kills.iter().any(|(removal, _)| *removal == Removal::Asked),
        "no kill landed while the member was asked to leave and in the ring (seed {seed}): {kills:?}"
    );
}
