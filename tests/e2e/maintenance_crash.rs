//! Crash-anywhere for the maintenance (issue 33), end to end in the fake
//! world: the cleanup after a scale-up, upgradesstables after a major
//! upgrade and a scheduled repair, each with the controller SIGKILLed at
//! random moments (and restarted) and the member doing the work SIGKILLed
//! (its container: the sidecar, PID 1, and the fake Cassandra under it)
//! while its operation observably runs: its sidecar's record says
//! `running` and the fake has the operation in progress (a cleanup or an
//! upgrade lasting its timing, killed before it completes; a repair with
//! most of its subranges left). Every run converges as without the
//! kills; never two maintenance requests at any change the API server
//! commits; each test asserts its member kill landed in the middle of the
//! operation (the fake's operation abandoned; the repair resumed rather
//! than started over), and the controller kills that landed.
//!
//! `LIFECYCLE_CRASH_RUNS=<n>` sets the runs of each test (1 by default),
//! `LIFECYCLE_SEED` repeats one; both are printed.

use std::future::ready;
use std::time::{Duration, Instant};

use crds::contract::maintenance::{Operation, REQUEST, State};
use serde_json::json;
use testworld::harness::Process;
use testworld::kubesim::KubeSim;
use testworld::ring::{Maintenance, OpEnd, OpState, Replication};

use crate::common::FAKE_WORLDS;
use crate::lifecycle::Lcg;
use crate::lifecycle_crash::{kill_at_random_moments, runs_and_seed};
use crate::maintenance::{
    MaintenanceWatch, NAMESPACE, address, assert_cleaned, assert_cleanup_requests,
    assert_never_overlapping, before_scale_up, cleanups_done, host_id, maintenance_ring, member,
    miss_writes, old_format, ops, record_of, repair_complete, stored_annotations, until_idle,
    upgrade_complete, upgraded_to_5_0,
};
use crate::scenario::{Scenario, cluster, secs, setup, until_with};

/// SIGKILLs a member Pod's container (its PID 1, the sidecar, and the
/// fake Cassandra under it), if it runs. Whether it did.
fn kill_member(sim: &KubeSim, pod: &str) -> bool {
    let target = testworld::kubesim::store::Target::new("", "v1", "pods", Some(NAMESPACE));
    let pid = sim.store().get(&target, pod).ok().and_then(|p| {
        p.pointer("/status/containerStatuses/0/containerID")?
            .as_str()?
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

/// Who holds the maintenance request now and what its record says: the
/// state of the world a controller kill is recorded with.
fn holder(sim: &KubeSim, members: &[String]) -> String {
    members
        .iter()
        .find_map(|m| {
            let a = stored_annotations(sim, m);
            a.get(REQUEST)?;
            Some(format!(
                "{m}: {:?}",
                record_of(&a).map(|r| (r.operation, r.state))
            ))
        })
        .unwrap_or_else(|| "no request".to_string())
}

/// The member whose record says its `operation` runs, if one does.
fn running_member(sim: &KubeSim, members: &[String], operation: Operation) -> Option<String> {
    members.iter().find_map(|m| {
        let a = stored_annotations(sim, m);
        let record = record_of(&a)?;
        (a.contains_key(REQUEST) && record.operation == operation && record.state == State::Running)
            .then(|| m.clone())
    })
}

/// Waits until `converged`, the controller SIGKILLed at random moments
/// meanwhile (at most 6 times, restarted each time), and the member that
/// `running` names SIGKILLed once, `delay` after `running` first named
/// one, if `running` still names it then (else at the next moment it
/// does). Returns the controller kills that landed (with who held the
/// request) and what `running` said at the member kill.
#[allow(clippy::too_many_arguments)]
async fn converge_under_kills<T>(
    s: &Scenario,
    controller: &mut Process,
    random: &mut Lcg,
    members: &[String],
    what: &str,
    delay: Duration,
    mut running: impl FnMut() -> Option<(String, T)>,
    mut converged: impl FnMut() -> Result<(), String>,
) -> (Vec<String>, (String, T)) {
    let sim = s.sim();
    let mut first_seen: Option<Instant> = None;
    let mut killed: Option<(String, T)> = None;
    let mut kills = Vec::new();
    tokio::select! {
        () = until_with(
            what,
            secs(240),
            || {
                if killed.is_none()
                    && let Some((m, evidence)) = running()
                {
                    let since = *first_seen.get_or_insert_with(Instant::now);
                    if since.elapsed() >= delay && kill_member(sim, &m) {
                        eprintln!("{what}: {m} killed while its operation ran");
                        killed = Some((m, evidence));
                    }
                }
                ready(match killed {
                    None => Err("the member not killed yet".to_string()),
                    Some(_) => converged(),
                })
            },
            || s.context(),
        ) => {}
        () = kill_at_random_moments(
            s,
            controller,
            random,
            6,
            || holder(sim, members),
            &mut kills,
        ) => {}
    }
    if controller.exited().is_some() {
        *controller = s.world.start_controller(&s.log, None).unwrap();
    }
    (kills, killed.expect("the member killed"))
}

fn assert_controller_kills(kills: &[String], what: &str) {
    assert!(
        (1..=6).contains(&kills.len()),
        "{what}: {} controller kills landed, not 1 to 6: {kills:?}",
        kills.len()
    );
}

/// The scale-up 3 → 4 and the cleanups of the three old members, with the
/// controller killed at random moments and one old member (chosen at
/// random) killed in the middle of a cleanup (the fake's cleanup of a
/// keyspace, 1.5 s long, in progress): every run ends with each old
/// member cleaned up exactly as without the kills, one member at a time
/// throughout, the data check clean; the killed cleanup was abandoned by
/// the fake (nothing dropped by it) and done again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleanup_survives_the_controller_and_the_member_killed_at_random_moments() {
    let (runs, seed) = runs_and_seed(1);
    let mut random = Lcg(seed);
    let _one = FAKE_WORLDS.lock().await;
    for run in 0..runs {
        let what = format!("cleanup run {run} (seed {seed})");
        let started = Instant::now();
        let mut s = setup()
            .zones(&["a", "b"])
            .ring(maintenance_ring(1500, 300))
            .start()
            .await;
        s.create(&cluster("c").rack("r", 3)).await;
        s.until_ready("c", 3, secs(180)).await;
        until_idle(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
        s.ring().write(
            "ks",
            Replication::simple(3),
            1000,
            testworld::ring::Consistency::All,
        );
        let before = before_scale_up(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
        let old: Vec<String> = before.iter().map(|(m, _, _)| m.clone()).collect();
        let victim = old[random.below(3) as usize].clone();
        let victim_host = host_id(s.sim(), &address(&s, &victim).await);
        let delay = Duration::from_millis(random.below(600));
        s.stop_controller();
        let mut controller = s.world.start_controller(&s.log, None).unwrap();
        let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
        s.patch_cluster("c", cluster("c").rack("r", 4).racks_patch())
            .await;
        let sim = s.sim();
        let (kills, (_, op)) = converge_under_kills(
            &s,
            &mut controller,
            &mut random,
            &old,
            &what,
            delay,
            || {
                running_member(sim, std::slice::from_ref(&victim), Operation::Cleanup)?;
                let op = sim.ring().with(|r| {
                    r.running_ops(&victim_host)
                        .iter()
                        .find(|op| op.operation == Maintenance::Cleanup)
                        .map(|op| op.id)
                })?;
                Some((victim.clone(), op))
            },
            || cleanups_done(sim, &old),
        )
        .await;
        s.until_ready("c", 4, secs(120)).await;
        assert_eq!(
            sim.ring().with(|r| r.op_state(op)),
            OpState::Ended(OpEnd::Abandoned),
            "{what}: the member kill landed after the cleanup it interrupted"
        );
        assert_cleanup_requests(&watch, &before, &what);
        assert_cleaned(sim, &before);
        s.ring().assert_intact(4);
        assert_never_overlapping(&ops(sim, Maintenance::Cleanup), &what);
        s.assert_safe(&what);
        assert_controller_kills(&kills, &what);
        eprintln!(
            "{what}: converged in {:.1} s; controller kills at {kills:?}; {victim} killed in its cleanup",
            started.elapsed().as_secs_f64()
        );
    }
}

/// The major upgrade 4.1 → 5.0 (past `CASSANDRA_4`) and the
/// upgradesstables of every member, with the controller killed at random
/// moments and one member (chosen at random) killed while it rewrites its
/// old-format sstables (the fake's upgrade, 1.5 s long, in progress):
/// every member ends with no old-format sstable and the status says the
/// upgrade is complete, one member at a time throughout, the data check
/// clean; the killed upgrade was abandoned by the fake and done again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgradesstables_survives_the_controller_and_the_member_killed_at_random_moments() {
    let (runs, seed) = runs_and_seed(1);
    let mut random = Lcg(seed);
    let _one = FAKE_WORLDS.lock().await;
    for run in 0..runs {
        let what = format!("upgradesstables run {run} (seed {seed})");
        let started = Instant::now();
        let mut s = setup().ring(maintenance_ring(300, 1500)).start().await;
        let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
        let members = upgraded_to_5_0(&s).await;
        let victim = members[random.below(3) as usize].clone();
        let victim_host = host_id(s.sim(), &address(&s, &victim).await);
        let delay = Duration::from_millis(random.below(600));
        // The controller's kills begin once a member on UPGRADING counts
        // old sstables: while the rest of that roll and the upgrades run.
        s.until("a member counting old-format sstables", secs(180), || {
            ready(
                old_format(s.sim(), &members)
                    .iter()
                    .any(|c| c.is_some_and(|c| c > 0)),
            )
        })
        .await;
        s.stop_controller();
        let mut controller = s.world.start_controller(&s.log, None).unwrap();
        let sim = s.sim();
        // The upgrade's end is read from the files: polled apart from the
        // probe (which must not block).
        let complete = std::sync::Arc::new(std::sync::Mutex::new(Err::<(), String>(
            "not read yet".into(),
        )));
        let reader = {
            let complete = complete.clone();
            let members = members.clone();
            let s: &Scenario = &s;
            async move {
                loop {
                    *complete.lock().unwrap() = upgrade_complete(s, &members).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let (kills, (_, op)) = tokio::select! {
            out = converge_under_kills(
                &s,
                &mut controller,
                &mut random,
                &members,
                &what,
                delay,
                || {
                    running_member(sim, std::slice::from_ref(&victim), Operation::Upgradesstables)?;
                    let op = sim.ring().with(|r| {
                        r.running_ops(&victim_host)
                            .iter()
                            .find(|op| op.operation == Maintenance::Upgradesstables)
                            .map(|op| op.id)
                    })?;
                    Some((victim.clone(), op))
                },
                || complete.lock().unwrap().clone(),
            ) => out,
            () = reader => unreachable!("the reader loops"),
        };
        assert_eq!(
            sim.ring().with(|r| r.op_state(op)),
            OpState::Ended(OpEnd::Abandoned),
            "{what}: the member kill landed after the upgrade it interrupted"
        );
        upgrade_complete(&s, &members)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        watch.assert_one_at_a_time(&what);
        assert_never_overlapping(&ops(sim, Maintenance::Upgradesstables), &what);
        s.ring().assert_intact(3);
        s.assert_safe(&what);
        assert_controller_kills(&kills, &what);
        eprintln!(
            "{what}: converged in {:.1} s; controller kills at {kills:?}; {victim} killed in its upgrade",
            started.elapsed().as_secs_f64()
        );
    }
}

/// A member that missed writes, and a scheduled repair cycle (`60m`), with
/// the controller killed at random moments and one member (chosen at
/// random) killed while its repair runs (its record `running` with under
/// half of its subranges done): the cycle completes (100 %, every member's
/// record of it), one member at a time throughout, the member that missed
/// the writes has every key read at ONE from it alone, the data check
/// clean; the killed member's repair resumed after its restart (no
/// subrange repaired twice in the cycle but the one the kill interrupted:
/// it did not start over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_survives_the_controller_and_the_member_killed_at_random_moments() {
    let (runs, seed) = runs_and_seed(1);
    let mut random = Lcg(seed);
    let _one = FAKE_WORLDS.lock().await;
    for run in 0..runs {
        let what = format!("repair run {run} (seed {seed})");
        let started = Instant::now();
        let mut ring = maintenance_ring(300, 300);
        ring.timing.max_hint_window_ms = 1000;
        let mut s = setup().ring(ring).start().await;
        s.create(&cluster("c").rack("r", 3)).await;
        s.until_ready("c", 3, secs(180)).await;
        until_idle(&s, &(0..3).map(member).collect::<Vec<_>>()).await;
        s.ring().write(
            "ks",
            Replication::simple(3),
            500,
            testworld::ring::Consistency::All,
        );
        let members: Vec<String> = (0..3).map(member).collect();
        let (missed, missing) = miss_writes(&s, &members[2]).await;
        let victim = members[random.below(3) as usize].clone();
        let victim_host = host_id(s.sim(), &address(&s, &victim).await);
        let delay = Duration::from_millis(random.below(300));
        s.stop_controller();
        let mut controller = s.world.start_controller(&s.log, None).unwrap();
        let watch = MaintenanceWatch::start(s.sim(), &s.namespace);
        let repairs_before = ops(s.sim(), Maintenance::Repair).len();
        s.patch_cluster(
            "c",
            // An hour: the cycle begun at the creation is the only one of the
            // test (with `1m` the next could begin and repeat every subrange).
            json!({"spec": {"maintenance": {"repair": {"schedule": "60m"}}}}),
        )
        .await;
        let sim = s.sim();
        let (kills, (_, (done, total, commands))) = converge_under_kills(
            &s,
            &mut controller,
            &mut random,
            &members,
            &what,
            delay,
            || {
                let a = stored_annotations(sim, &victim);
                let record = record_of(&a)?;
                let (done, total) = (record.ranges_done?, record.ranges_total?);
                let commands = ops(sim, Maintenance::Repair)
                    .iter()
                    .skip(repairs_before)
                    .filter(|op| op.host_id == victim_host)
                    .count();
                (a.contains_key(REQUEST)
                    && record.operation == Operation::Repair
                    && record.state == State::Running
                    && done >= 2
                    && done * 2 < total)
                    .then(|| (victim.clone(), (done, total, commands)))
            },
            || repair_complete(sim, &members).map(drop),
        )
        .await;
        watch.assert_one_at_a_time(&what);
        let mine: Vec<_> = ops(sim, Maintenance::Repair)
            .into_iter()
            .skip(repairs_before)
            .filter(|op| op.host_id == victim_host)
            .collect();
        let after = mine.len() - commands;
        // Resumed, not started over: no subrange repaired twice but the
        // one the kill interrupted (the `done` ones before it, at least 2,
        // would all be repeated by a fresh start).
        let mut seen = std::collections::BTreeSet::new();
        let repeated = mine
            .iter()
            .filter(|op| !seen.insert((op.keyspace.clone(), op.ranges.clone())))
            .count();
        assert!(
            after > 0 && repeated <= 1,
            "{what}: {victim} ran {commands} repair commands before the kill ({done} of {total} subranges recorded), {after} after, {repeated} of them again: it did not resume"
        );
        assert!(
            sim.ring().with(|r| r.missing_on(&missed, "ks")).is_empty(),
            "{what}: the member that missed writes still misses keys"
        );
        assert!(
            missing
                .iter()
                .all(|k| sim.ring().with(|r| r.read_one_from(&missed, "ks", k)))
        );
        s.ring().assert_intact(3);
        s.assert_safe(&what);
        assert_controller_kills(&kills, &what);
        eprintln!(
            "{what}: converged in {:.1} s; controller kills at {kills:?}; {victim} killed at {done}/{total} subranges, {after} commands after, {repeated} repeated",
            started.elapsed().as_secs_f64()
        );
    }
}
