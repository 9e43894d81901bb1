//! Crash-anywhere for the replace and the decommission (issue 13), end to
//! end with the real binary: a member whose Node (and local SSD) is lost is
//! replaced while the controller is SIGKILLed right after each of its
//! writes in turn, or at random moments with the API server's faults on
//! in alternate runs; a scale-down's leaving member has its container
//! (the sidecar, PID 1, and Cassandra under it) SIGKILLed at random
//! moments. Every run converges to the spec with a clean data check, and
//! [`SafetyWatch`] checks the safety rules at every change the API server
//! commits.
//!
//! `LIFECYCLE_CRASH_RUNS=<n>` (20 in `scripts/soak`) sets the random runs;
//! `LIFECYCLE_SEED` repeats one.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crds::Cluster;
use crds::contract;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Service};
use kube::api::{Api, DeleteParams};
use serde_json::Value;
use testworld::harness::{self, Process, World, container_logs, fast_ring, tail};
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::Target;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::ONE_WORLD;
use crate::lifecycle::{
    Lcg, NS, STS_B, STS_R, condition, names, one_rack, ring_rows, ring_text, set_rack_r,
};
use crate::safety::SafetyWatch;
use crate::world::{ring_summary, thesis_cluster, wait_ready, world};

/// How many random runs (`LIFECYCLE_CRASH_RUNS`, default 2: one without
/// faults, one with).
fn crash_runs() -> usize {
    std::env::var("LIFECYCLE_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// The random source's seed (`LIFECYCLE_SEED`, else the clock), printed.
fn seed() -> u64 {
    let seed = std::env::var("LIFECYCLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!(
        "LIFECYCLE_SEED={seed} LIFECYCLE_CRASH_RUNS={}",
        crash_runs()
    );
    seed
}

/// The API server's faults at 5 %: 409s, 500s, committed writes whose
/// answer is lost, late watch events, dropped watches.
fn five_percent_faults() -> testworld::kubesim::faults::FaultConfig {
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

/// An object as the API server has it (read from its store: the test's
/// reads see no injected faults).
fn stored(
    sim: &KubeSim,
    group: &str,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    let version = if group.is_empty() { "v1" } else { "v1alpha1" };
    sim.store()
        .get(&Target::new(group, version, plural, namespace), name)
        .ok()
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The thesis's Cluster on the local SSDs of one zone of 3 Nodes, with 2
/// members (a Node is spare for a replacement) and 300 keys at RF 2.
async fn two_members_on_local_ssds(world: &World, log: &Path) -> Api<Cluster> {
    let mut cluster = thesis_cluster();
    cluster.spec.datacenter.racks[0].members = 2;
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "cassandra", 2, Duration::from_secs(180), log).await;
    world.sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::network_topology([("europe-west1", 2)]))
            .unwrap();
        ring.write_keys("ks", "k", 300, Consistency::Quorum)
            .unwrap();
    });
    clusters
}

/// A member whose Node is gone, as it was before.
struct Lost {
    member: String,
    address: String,
    node: String,
    claim_uid: String,
}

/// Deletes the Node of `member` (its local SSD goes with it).
async fn lose_the_node_of(world: &World, member: &str) -> Lost {
    let sim = &world.sim;
    let pod = stored(sim, "", "pods", Some(NS), member).expect("the member's Pod");
    let node = text(&pod, "/spec/nodeName").to_string();
    let service = stored(sim, "", "services", Some(NS), member).expect("the member's Service");
    let claim = stored(
        sim,
        "",
        "persistentvolumeclaims",
        Some(NS),
        &format!("data-{member}"),
    )
    .expect("the member's claim");
    let nodes: Api<Node> = Api::all(world.client.clone());
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    Lost {
        member: member.to_string(),
        address: text(&service, "/spec/clusterIP").to_string(),
        node,
        claim_uid: text(&claim, "/metadata/uid").to_string(),
    }
}

/// Whether the lost member is replaced: its Service keeps its address and
/// no longer records the intent, a new claim, its Pod ready on another
/// Node, its address UN in a ring of `members` UN nodes, the Cluster
/// converged.
fn replaced(sim: &KubeSim, lost: &Lost, members: usize) -> bool {
    let member = &lost.member;
    let Some(service) = stored(sim, "", "services", Some(NS), member) else {
        return false;
    };
    let claim = stored(
        sim,
        "",
        "persistentvolumeclaims",
        Some(NS),
        &format!("data-{member}"),
    );
    let pod = stored(sim, "", "pods", Some(NS), member);
    let cluster = stored(sim, "cassandra.rook.io", "clusters", Some(NS), "cassandra")
        .and_then(|c| serde_json::from_value::<Cluster>(c).ok());
    let rows = ring_rows(sim);
    text(&service, "/spec/clusterIP") == lost.address
        && service
            .pointer(&format!(
                "/metadata/labels/{}",
                contract::REPLACE.replace('/', "~1")
            ))
            .is_none()
        && claim.is_some_and(|c| {
            text(&c, "/metadata/uid") != lost.claim_uid
                && c.pointer("/metadata/deletionTimestamp").is_none()
        })
        && pod.is_some_and(|p| {
            text(&p, "/spec/nodeName") != lost.node
                && p.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
        })
        && rows.len() == members
        && rows.iter().all(|(_, s)| *s == NodeStatus::UN)
        && rows.iter().any(|(a, _)| a == &lost.address)
        && cluster.is_some_and(|c| {
            condition(&c, "Progressing").is_some_and(|(s, _, _)| s == "False")
                && c.status.is_some_and(|s| {
                    s.members == members as i32 && s.ready_members == members as i32
                })
        })
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
            pv.pointer("/metadata/deletionTimestamp").is_some()
        ));
    }
    for c in list("persistentvolumeclaims", Some(NS)) {
        out.push(format!(
            "claim {} uid {} phase {} volume {} deleting {} finalizers {}",
            text(&c, "/metadata/name"),
            text(&c, "/metadata/uid"),
            text(&c, "/status/phase"),
            text(&c, "/spec/volumeName"),
            c.pointer("/metadata/deletionTimestamp").is_some(),
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
            p.pointer("/metadata/deletionTimestamp").is_some(),
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
/// spare Node for the next run.
fn recreate_node(sim: &KubeSim, node: &str) {
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

/// The member ring after a run: `members` UN, no key lost.
fn assert_clean(sim: &KubeSim, members: usize, what: &str) {
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, members, "{what}: {status}");
    assert!(report.is_clean(), "{what} lost data:\n{report}\n{status}");
}

/// One write of the controller's in the replace, to crash right after.
struct Write {
    verb: &'static str,
    resource: &'static str,
    name: Option<String>,
    /// Text the committed object contains (which Event, which status).
    contains: Option<String>,
    nth: u32,
    /// Whether the member Service records the replace intent once this
    /// write committed (checked at the crash: the hook fired on the write
    /// meant).
    intent_after: Option<bool>,
}

impl std::fmt::Display for Write {
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

/// The controller's writes in a replace, in order: the intent recorded on
/// the member Service, its Event, the status that says so, the lost claim
/// deleted, the Pod deleted, the intent cleared, its Event.
fn replace_writes(member: &str) -> Vec<Write> {
    let write =
        |verb, resource, name: Option<&str>, contains: Option<String>, nth, intent_after| Write {
            verb,
            resource,
            name: name.map(str::to_string),
            contains,
            nth,
            intent_after,
        };
    let claim = format!("data-{member}");
    vec![
        write(
            "patch",
            "services",
            Some(member),
            Some(format!("\"{}\":\"", contract::REPLACE)),
            1,
            Some(true),
        ),
        write(
            "create",
            "events",
            None,
            Some("\"reason\":\"MemberReplacing\"".into()),
            1,
            Some(true),
        ),
        write(
            "patch",
            "clusters/status",
            Some("cassandra"),
            Some("\"reason\":\"MemberReplacing\"".into()),
            1,
            None,
        ),
        write(
            "delete",
            "persistentvolumeclaims",
            Some(&claim),
            None,
            1,
            Some(true),
        ),
        write("delete", "pods", Some(member), None, 1, Some(true)),
        // The second patch of the member Service: the intent cleared.
        write("patch", "services", Some(member), None, 2, Some(false)),
        write(
            "create",
            "events",
            None,
            Some("\"reason\":\"MemberReplaced\"".into()),
            1,
            Some(false),
        ),
    ]
}

/// The replace with the controller SIGKILLed right after each write of
/// `writes` (indices into [`replace_writes`]) in turn, then restarted.
async fn replace_killed_after_writes(which: &[usize]) {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, mut controller, log) =
        world(&["europe-west1-b"], work.path(), fast_ring(), NS).await;
    let _clusters = two_members_on_local_ssds(&world, &log).await;
    let sim = &world.sim;
    let safety = SafetyWatch::start(sim, NS);
    let user = harness::operator_user();
    for (run, &index) in which.iter().enumerate() {
        let member = format!("{STS_B}-{}", run % 2);
        let write = replace_writes(&member).remove(index);
        // A fresh controller each run: its Event recorder creates (a
        // recorder that saw an Event patches its series instead).
        drop(controller);
        controller = world.start_controller(&log, None).unwrap();
        match &write.contains {
            Some(contains) => world.crash_on_write_containing(
                &controller,
                Some(&user),
                write.verb,
                write.resource,
                write.name.as_deref(),
                contains,
                write.nth,
            ),
            None => world.crash_on_write(
                &controller,
                Some(&user),
                write.verb,
                write.resource,
                write.name.as_deref(),
                write.nth,
            ),
        }
        let started = Instant::now();
        let lost = lose_the_node_of(&world, &member).await;
        let deadline = Instant::now() + Duration::from_secs(150);
        let mut crashed = false;
        loop {
            if !crashed && controller.exited().is_some() {
                crashed = true;
                if let Some(intent) = write.intent_after {
                    let service = stored(sim, "", "services", Some(NS), &member).unwrap();
                    let recorded = service
                        .pointer(&format!(
                            "/metadata/labels/{}",
                            contract::REPLACE.replace('/', "~1")
                        ))
                        .is_some();
                    assert_eq!(
                        recorded,
                        intent,
                        "crash after {write}: the crash came after another write (the replace intent is {}recorded)",
                        if recorded { "" } else { "not " }
                    );
                }
                controller = world.start_controller(&log, None).unwrap();
            }
            safety.assert_safe(&format!("crash after {write}"));
            if crashed && replaced(sim, &lost, 2) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "crash after {write} (crashed: {crashed}; a write the controller never made means this list is stale): {} not replaced\n{}\n{}\ncontroller:\n{}\n{}",
                lost.member,
                world_state(sim),
                ring_text(sim),
                tail(&log),
                container_logs(work.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_clean(sim, 2, &format!("crash after {write}"));
        eprintln!(
            "crash after {write}: replaced in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        recreate_node(sim, &lost.node);
    }
    safety.assert_safe("the replaces");
    drop(controller);
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
    let intent = stored(sim, "", "services", Some(NS), &lost.member).is_some_and(|s| {
        s.pointer(&format!(
            "/metadata/labels/{}",
            contract::REPLACE.replace('/', "~1")
        ))
        .is_some()
    });
    let running = stored(sim, "", "pods", Some(NS), &lost.member).is_some_and(|p| {
        text(&p, "/spec/nodeName") != lost.node
            && p.pointer("/status/containerStatuses/0/state/running")
                .is_some()
    });
    intent && running
}

/// SIGKILLs a Pod's container (its PID 1, the sidecar, and Cassandra
/// under it), if it runs. Whether it did.
fn kill_container(sim: &KubeSim, pod: &str) -> bool {
    let pid = stored(sim, "", "pods", Some(NS), pod).and_then(|p| {
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

/// The replace with the controller SIGKILLed at random moments (up to 6
/// times a run), and the replacing member's container once while it
/// streams the lost member's data (the sidecar, and Cassandra under it):
/// with the API server's faults at 5 % in every other run, every run
/// converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replace_survives_the_controller_and_the_member_killed_at_random_moments() {
    let seed = seed();
    let mut random = Lcg(seed);
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let mut ring = fast_ring();
    // Long enough to kill the replacing member while it streams.
    ring.timing.replace_ms = 2500;
    let (world, controller, log) = world(&["europe-west1-b"], work.path(), ring, NS).await;
    let _clusters = two_members_on_local_ssds(&world, &log).await;
    let sim = &world.sim;
    let safety = SafetyWatch::start(sim, NS);
    let mut controller: Option<Process> = Some(controller);
    let (mut kills, mut member_kills) = (0, 0);
    for run in 0..crash_runs() {
        let faults = run % 2 == 1;
        let member = format!("{STS_B}-{}", run % 2);
        let lost = lose_the_node_of(&world, &member).await;
        if faults {
            sim.set_faults(five_percent_faults());
        }
        let what = format!("run {run} (faults: {faults}, seed {seed})");
        let started = Instant::now();
        let deadline = started + Duration::from_secs(180);
        let mut next_kill = Instant::now() + Duration::from_millis(100 + random.below(1500));
        let mut run_kills = 0;
        // The replacing member is killed this long after its container
        // first runs on its new Node.
        let member_kill_after = Duration::from_millis(random.below(2500));
        let mut member_running_since: Option<Instant> = None;
        let mut member_killed = false;
        loop {
            if run_kills < 6 && Instant::now() >= next_kill {
                drop(controller.take()); // SIGKILL
                kills += 1;
                run_kills += 1;
                tokio::time::sleep(Duration::from_millis(random.below(300))).await;
                controller = Some(world.start_controller(&log, None).unwrap());
                next_kill = Instant::now() + Duration::from_millis(300 + random.below(2000));
            }
            if member_running_since.is_none() && running_elsewhere(sim, &lost) {
                member_running_since = Some(Instant::now());
            }
            if !member_killed
                && member_running_since.is_some_and(|t| t.elapsed() >= member_kill_after)
            {
                member_killed = true;
                let state = sim.ring().with(|r| {
                    r.node_by_address(&lost.address)
                        .map(|n| format!("{:?}, {:?}", n.state, n.process.as_ref().map(|p| p.mode)))
                        .unwrap_or_default()
                });
                if kill_container(sim, &member) {
                    member_kills += 1;
                    eprintln!("{what}: the replacing member killed (in the ring: {state})");
                }
            }
            safety.assert_safe(&what);
            if member_killed && replaced(sim, &lost, 2) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {member} not replaced\n{}\n{}\ncontroller:\n{}\n{}",
                world_state(sim),
                ring_text(sim),
                tail(&log),
                container_logs(work.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        sim.set_faults(Default::default());
        assert_clean(sim, 2, &what);
        eprintln!(
            "{what}: replaced in {:.1} s, {run_kills} controller kills",
            started.elapsed().as_secs_f64()
        );
        recreate_node(sim, &lost.node);
    }
    safety.assert_safe("the replaces");
    eprintln!(
        "{} runs, {kills} controller kills, {member_kills} replacing-member kills",
        crash_runs()
    );
    drop(controller);
}

/// A scale-down with the leaving member's container (the sidecar, and
/// Cassandra under it) SIGKILLed at random moments of its decommission,
/// the controller running: every run converges to the spec with a clean
/// data check, and nothing is deleted (claim, Service) and the StatefulSet
/// not shrunk before the member's decommission is confirmed, at any
/// change the API server commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_down_survives_the_leaving_member_killed_at_random_moments() {
    let seed = seed();
    let mut random = Lcg(seed);
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let mut ring = fast_ring();
    // Long enough for kills while the member streams.
    ring.timing.decommission_ms = 3000;
    let (world, controller, log) = world(&["a"], work.path(), ring, NS).await;
    let clusters = one_rack(&world, "3.11.6", 3, &log).await;
    let (sim, client) = (&world.sim, world.client.clone());
    sim.ring().with(|ring| {
        ring.create_keyspace("ks", Replication::network_topology([("dc", 2)]))
            .unwrap();
        ring.write_keys("ks", "k", 300, Consistency::Quorum)
            .unwrap();
    });
    let safety = SafetyWatch::start(sim, NS);
    let member = format!("{STS_R}-2");
    let mut kills = 0;
    for run in 0..crash_runs() {
        let what = format!("run {run} (seed {seed})");
        let address = text(
            &stored(sim, "", "services", Some(NS), &member).unwrap(),
            "/spec/clusterIP",
        )
        .to_string();
        set_rack_r(&clusters, 2).await;
        let started = Instant::now();
        let mut kill_at: Vec<Instant> = (0..2)
            .map(|_| started + Duration::from_millis(random.below(4000)))
            .collect();
        kill_at.sort();
        kill_at.reverse();
        let deadline = started + Duration::from_secs(150);
        loop {
            // A kill waits for the container to run again (it may be
            // between restarts), as long as the member has a Pod.
            if kill_at.last().is_some_and(|at| Instant::now() >= *at) {
                let state = sim.ring().with(|r| {
                    r.node_by_address(&address)
                        .map(|n| format!("{:?}, {:?}", n.state, n.process.as_ref().map(|p| p.mode)))
                        .unwrap_or_else(|| "gone".into())
                });
                if kill_container(sim, &member) {
                    kills += 1;
                    kill_at.pop();
                    eprintln!(
                        "{what}: the leaving member killed after {:.1} s (in the ring: {state})",
                        started.elapsed().as_secs_f64()
                    );
                } else if stored(sim, "", "pods", Some(NS), &member).is_none() {
                    kill_at.clear();
                }
            }
            safety.assert_safe(&what);
            let in_ring = ring_rows(sim).iter().any(|(a, _)| a == &address);
            let claims = names::<PersistentVolumeClaim>(&client).await;
            let services = names::<Service>(&client).await;
            let converged = kill_at.is_empty()
                && !in_ring
                && !claims.contains(&format!("data-{member}"))
                && !services.contains(&member)
                && clusters.get("cassandra").await.ok().is_some_and(|c| {
                    condition(&c, "Ready").is_some_and(|(s, _, _)| s == "True")
                        && c.status
                            .is_some_and(|s| s.members == 2 && s.ready_members == 2)
                });
            if converged {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the scale-down did not converge\n{}\ncontroller:\n{}\n{}",
                ring_text(sim),
                tail(&log),
                container_logs(work.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_clean(sim, 2, &what);
        eprintln!(
            "{what}: scaled down in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        set_rack_r(&clusters, 3).await;
        wait_ready(&clusters, "cassandra", 3, Duration::from_secs(120), &log).await;
        assert_clean(sim, 3, &what);
    }
    safety.assert_safe("the scale-downs");
    eprintln!("{} runs, {kills} leaving-member kills", crash_runs());
    assert!(
        kills > 0,
        "no kill of the leaving member landed in {} runs (seed {seed})",
        crash_runs()
    );
    drop(controller);
}
