//! Maintenance: cleanup marks before a scale-up, one request at a time
//! once converged, done requests cleared, holds and withdrawals, repair
//! cycles, and the figures status reports. Each write the decision asks
//! for is applied to the observation as `act` writes it, so that a
//! sequence of decisions is the controller's path, and a crash between two
//! writes is a decision on the state after the first.

use crds::contract::maintenance::{Operation, Record, Repaired, Request, State};
use crds::v1alpha1::{Cluster, MaintenanceSpec, RepairSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::decide::maintenance::{degradation, figures};
use crate::status::{Outcome, compute_status};

/// When the Cluster was created.
const CREATED: &str = "2026-11-01T12:00:00Z";
/// The observation's clock: a Friday.
const NOW: &str = "2026-11-27T10:00:00Z";
/// The cycle of `7d` at [`NOW`]: the creation plus three weeks.
const INTERVAL_CYCLE: &str = "2026-11-22T12:00:00Z";
const PREVIOUS_INTERVAL_CYCLE: &str = "2026-11-15T12:00:00Z";
/// The cycle of `0 2 * * 0` at [`NOW`]: the Sunday before, 02:00.
const CRON_CYCLE: &str = "2026-11-22T02:00:00Z";

fn secs(t: &str) -> i64 {
    crds::contract::parse_time(t).expect("a time").as_second()
}

/// Rack "b" of `n` Ready members in a settled ring, observed at [`NOW`].
fn cluster_of(n: i32) -> Observed {
    let mut o = settled(racks(n, (0..n).map(member).collect()));
    o.now = secs(NOW);
    o.created = Some(secs(CREATED));
    o
}

fn svc(o: &mut Observed, i: i32) -> &mut ServiceObserved {
    o.racks
        .get_mut("b")
        .and_then(|r| r.members.get_mut(&i))
        .and_then(|m| m.service.as_mut())
        .expect("a member Service")
}

fn rv(o: &Observed, i: i32) -> String {
    o.racks["b"].members[&i]
        .service
        .as_ref()
        .and_then(|s| s.resource_version.clone())
        .expect("a resourceVersion")
}

fn with_repair(mut spec: ClusterSpec, schedule: &str) -> ClusterSpec {
    spec.maintenance = Some(MaintenanceSpec {
        repair: Some(RepairSpec {
            schedule: schedule.into(),
            gc_grace_seconds: 864_000,
            parallelism: 1,
        }),
        ..MaintenanceSpec::default()
    });
    spec
}

fn settings(spec: &mut ClusterSpec) -> &mut MaintenanceSpec {
    spec.maintenance
        .get_or_insert_with(MaintenanceSpec::default)
}

/// A request standing on member `i`, as the controller writes it.
fn request(o: &mut Observed, i: i32, operation: Operation, cycle: Option<&str>) {
    svc(o, i).maintenance_request = Some(Request {
        id: format!("c-dc-b-{i}/{}/{NOW}", operation.as_str()),
        operation,
        requested_at: NOW.into(),
        cycle: cycle.map(str::to_string),
    });
}

/// Member `i`'s sidecar records its standing request in `state`; a
/// repair done also records the cycle repaired, as the sidecar does
/// before its record says done.
fn sidecar(o: &mut Observed, i: i32, state: State) {
    let service = svc(o, i);
    let request = service
        .maintenance_request
        .clone()
        .expect("a standing request");
    service.maintenance_record = Some(Record {
        request: request.id.clone(),
        operation: request.operation,
        state,
        keyspace: (state == State::Running).then(|| "ks".to_string()),
        keyspaces_done: vec![],
        ranges_done: (request.operation == Operation::Repair).then_some(4),
        ranges_total: (request.operation == Operation::Repair).then_some(16),
        error: (state == State::Failed).then(|| "Connection refused".to_string()),
        started_at: NOW.into(),
        at: NOW.into(),
    });
    if request.operation == Operation::Repair && state == State::Done {
        let cycle = request.cycle.expect("a repair's cycle");
        repaired(o, i, &cycle, &[("ks", NOW)]);
    }
}

fn repaired(o: &mut Observed, i: i32, cycle: &str, keyspaces: &[(&str, &str)]) {
    svc(o, i).repaired = Some(Repaired {
        cycle: cycle.into(),
        keyspaces: keyspaces
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect(),
        finished_at: NOW.into(),
    });
}

fn bump(service: &mut ServiceObserved) {
    let version: u64 = service
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    service.resource_version = Some((version + 1000).to_string());
}

/// Applies the write `action` asks for to the observation, as `act`
/// writes it (each patch changes the Service's resourceVersion).
fn apply(o: &mut Observed, action: &Action) {
    match action {
        Action::MarkCleanupDue { members } => {
            for (_, i, _) in members {
                let service = svc(o, *i);
                service.cleanup_due = Some(NOW.into());
                bump(service);
            }
        }
        Action::RequestMaintenance {
            member,
            operation,
            cycle,
            ..
        } => {
            request(o, *member, *operation, cycle.as_deref());
            bump(svc(o, *member));
        }
        Action::FinishMaintenance {
            member, operation, ..
        } => {
            let service = svc(o, *member);
            service.maintenance_request = None;
            if *operation == Operation::Cleanup {
                service.cleanup_due = None;
            }
            bump(service);
        }
        Action::WithdrawMaintenance { member, .. } => {
            let service = svc(o, *member);
            service.maintenance_request = None;
            bump(service);
        }
        Action::CreateMemberService { member, .. } => {
            let rack = o.racks.get_mut("b").expect("rack b");
            rack.members.insert(
                *member,
                MemberObserved {
                    service: Some(ServiceObserved {
                        cluster_ip: Some(format!("10.96.0.{member}")),
                        resource_version: Some(format!("{}", 100 + member)),
                        ..ServiceObserved::default()
                    }),
                    ..MemberObserved::default()
                },
            );
        }
        Action::ScaleUp { replicas, .. } => {
            o.racks.get_mut("b").expect("rack b").replicas = Some(*replicas);
        }
        other => panic!("no write of {other:?} is simulated"),
    }
}

/// Decides, checks that a controller that crashed before carrying it out
/// decides the same again, and carries it out.
fn step(spec: &ClusterSpec, o: &mut Observed, expected: Action) {
    let action = decide(spec, o);
    assert_eq!(action, expected);
    assert_eq!(
        decide(spec, o),
        action,
        "a decision is a function of the state"
    );
    if !matches!(action, Action::Converged | Action::Wait(_)) {
        apply(o, &action);
    }
}

/// The new member joined and is Ready, and the ring saw it: the state the
/// sidecars record once the bootstrap is done.
fn joined(o: &mut Observed, i: i32) {
    let rack = o.racks.get_mut("b").expect("rack b");
    let m = rack.members.get_mut(&i).expect("the new member");
    m.pod_exists = true;
    m.pod_ready = true;
    m.pod_major = Some(4);
    let (now, created) = (o.now, o.created);
    *o = settled(std::mem::take(o));
    o.now = now;
    o.created = created;
}

/// A scale-up from 3 to 4, then the cleanups of the three old members one
/// at a time, each decision taken twice (a crash before its write) and
/// taken again on the state after it (a crash after): the path never
/// marks twice, never asks two members at once, and ends converged with
/// no mark or request left.
#[test]
fn a_scale_up_marks_the_ring_then_each_old_member_cleans_up_alone() {
    let spec = spec(&[("b", 4)]);
    let mut o = cluster_of(3);
    step(
        &spec,
        &mut o,
        Action::MarkCleanupDue {
            members: (0..3)
                .map(|i| ("b".into(), i, format!("{}", 100 + i)))
                .collect(),
        },
    );
    // A crash after the marks: nothing is marked again, the scale-up goes.
    step(
        &spec,
        &mut o,
        Action::CreateMemberService {
            rack: "b".into(),
            member: 3,
            seed: false,
        },
    );
    assert_eq!(
        after_member_service_created(&spec, &mut o.clone(), "b", 3),
        Some(Action::ScaleUp {
            rack: "b".into(),
            replicas: 4
        }),
        "the scale-up follows its Service in the same reconcile"
    );
    step(
        &spec,
        &mut o,
        Action::ScaleUp {
            rack: "b".into(),
            replicas: 4,
        },
    );
    step(
        &spec,
        &mut o,
        Action::Wait(WaitReason::MemberNotReady {
            rack: "b".into(),
            member: 3,
        }),
    );
    joined(&mut o, 3);
    assert_eq!(
        svc(&mut o, 3).cleanup_due,
        None,
        "the new member gave nothing away"
    );
    for i in 0..3 {
        let expected = Action::RequestMaintenance {
            rack: "b".into(),
            member: i,
            operation: Operation::Cleanup,
            cycle: None,
            resource_version: rv(&o, i),
        };
        step(&spec, &mut o, expected);
        // Running: nothing else is asked meanwhile.
        step(&spec, &mut o, Action::Converged);
        sidecar(&mut o, i, State::Running);
        step(&spec, &mut o, Action::Converged);
        sidecar(&mut o, i, State::Done);
        let id = svc(&mut o, i).maintenance_request.clone().unwrap().id;
        let version = rv(&o, i);
        step(
            &spec,
            &mut o,
            Action::FinishMaintenance {
                rack: "b".into(),
                member: i,
                operation: Operation::Cleanup,
                request: id,
                resource_version: version,
                cycle_completed: false,
            },
        );
        assert_eq!(
            svc(&mut o, i).cleanup_due,
            None,
            "the mark goes with the request"
        );
    }
    step(&spec, &mut o, Action::Converged);
}

#[test]
fn marks_before_a_scale_up_table() {
    use Action::*;
    let b = || "b".to_string();
    let all_three = || MarkCleanupDue {
        members: (0..3).map(|i| (b(), i, format!("{}", 100 + i))).collect(),
    };
    let off = {
        let mut spec = spec(&[("b", 4)]);
        settings(&mut spec).cleanup_after_scale_up = false;
        spec
    };
    let scylla = {
        let mut spec = spec(&[("b", 4)]);
        spec.mode = crds::v1alpha1::ClusterMode::Scylla;
        spec
    };
    let cases: Vec<(&str, ClusterSpec, Observed, Action)> = vec![
        (
            "a scale-up: every member in the ring is marked first",
            spec(&[("b", 4)]),
            cluster_of(3),
            all_three(),
        ),
        (
            "a new rack's first member: the other racks' members are marked",
            spec(&[("b", 3), ("c", 1)]),
            {
                let mut o = cluster_of(3);
                o.racks.insert("c".into(), rack(Some(0), &[]));
                o
            },
            all_three(),
        ),
        (
            "marked already except one (a conflict midway): only it is marked",
            spec(&[("b", 4)]),
            {
                let mut o = cluster_of(3);
                svc(&mut o, 0).cleanup_due = Some(NOW.into());
                svc(&mut o, 2).cleanup_due = Some(NOW.into());
                o
            },
            MarkCleanupDue {
                members: vec![(b(), 1, "101".into())],
            },
        ),
        (
            "cleanups turned off: no mark, the scale-up goes",
            off,
            cluster_of(3),
            CreateMemberService {
                rack: b(),
                member: 3,
                seed: false,
            },
        ),
        (
            "scylla mode: nothing is asked",
            scylla,
            cluster_of(3),
            CreateMemberService {
                rack: b(),
                member: 3,
                seed: false,
            },
        ),
        (
            "a scale-down marks nothing",
            spec(&[("b", 2)]),
            cluster_of(3),
            RequestDecommission {
                rack: b(),
                member: 2,
                resource_version: "102".into(),
                pod_uid: Some("uid-2".into()),
                host_id: None,
            },
        ),
    ];
    for (what, spec, observed, expected) in cases {
        assert_eq!(decide(&spec, &observed), expected, "{what}");
    }
}

/// What a standing request does to the rest: a cleanup or upgradesstables
/// holds topology changes and rolls but never a replacement; a repair is
/// withdrawn before any of them; a request done is cleared first.
#[test]
fn holds_and_withdrawals_table() {
    use Action::*;
    let b = || "b".to_string();
    let standing = |op: Operation, state: Option<State>| {
        let mut o = cluster_of(3);
        let cycle = (op == Operation::Repair).then_some(INTERVAL_CYCLE);
        request(&mut o, 1, op, cycle);
        if let Some(state) = state {
            sidecar(&mut o, 1, state);
        }
        o
    };
    let rolling_with = |mut o: Observed| {
        o.racks.get_mut("b").unwrap().update_revision = Some("new".into());
        for m in o.racks.get_mut("b").unwrap().members.values_mut() {
            m.revision = Some("old".into());
        }
        o
    };
    let lost = |mut o: Observed| {
        let m = o.racks.get_mut("b").unwrap().members.get_mut(&2).unwrap();
        m.disk_lost = true;
        m.pod_ready = false;
        o
    };
    let wait = |op| {
        Wait(WaitReason::MaintenanceRunning {
            rack: b(),
            member: 1,
            operation: op,
        })
    };
    let withdraw = |reason: &str| WithdrawMaintenance {
        rack: b(),
        member: 1,
        operation: Operation::Repair,
        resource_version: "101".into(),
        reason: reason.into(),
    };
    let roll_first = "a topology change or roll comes first; the repair resumes where it stopped";
    let cases: Vec<(&str, ClusterSpec, Observed, Action)> = vec![
        (
            "a cleanup runs: the scale-up waits",
            spec(&[("b", 4)]),
            standing(Operation::Cleanup, Some(State::Running)),
            wait(Operation::Cleanup),
        ),
        (
            "a cleanup its sidecar has not taken up yet holds as well",
            spec(&[("b", 4)]),
            standing(Operation::Cleanup, None),
            wait(Operation::Cleanup),
        ),
        (
            "a cleanup that failed (its sidecar retries) still holds",
            spec(&[("b", 4)]),
            standing(Operation::Cleanup, Some(State::Failed)),
            wait(Operation::Cleanup),
        ),
        (
            "an upgradesstables runs: the scale-down waits",
            spec(&[("b", 2)]),
            standing(Operation::Upgradesstables, Some(State::Running)),
            wait(Operation::Upgradesstables),
        ),
        (
            "a cleanup runs: the roll waits",
            spec(&[("b", 3)]),
            rolling_with(standing(Operation::Cleanup, Some(State::Running))),
            wait(Operation::Cleanup),
        ),
        (
            "a cleanup runs: a member that lost its disk is replaced anyway",
            spec(&[("b", 3)]),
            lost(standing(Operation::Cleanup, Some(State::Running))),
            StartReplace {
                rack: b(),
                member: 2,
                address: "10.96.0.2".into(),
                resource_version: "102".into(),
            },
        ),
        (
            "a cleanup done: cleared before the scale-up (a controller that crashed after the sidecar's answer)",
            spec(&[("b", 4)]),
            standing(Operation::Cleanup, Some(State::Done)),
            FinishMaintenance {
                rack: b(),
                member: 1,
                operation: Operation::Cleanup,
                request: format!("c-dc-b-1/cleanup/{NOW}"),
                resource_version: "101".into(),
                cycle_completed: false,
            },
        ),
        (
            "a repair runs: withdrawn before the scale-up",
            with_repair(spec(&[("b", 4)]), "7d"),
            standing(Operation::Repair, Some(State::Running)),
            withdraw(roll_first),
        ),
        (
            "a repair runs: withdrawn before the roll",
            with_repair(spec(&[("b", 3)]), "7d"),
            rolling_with(standing(Operation::Repair, Some(State::Running))),
            withdraw(roll_first),
        ),
        (
            "a repair runs: withdrawn before a replace",
            with_repair(spec(&[("b", 3)]), "7d"),
            lost(standing(Operation::Repair, Some(State::Running))),
            withdraw("a member is replaced first; the repair resumes where it stopped"),
        ),
        (
            "a repair runs and nothing else is wanted: it goes on",
            with_repair(spec(&[("b", 3)]), "7d"),
            standing(Operation::Repair, Some(State::Running)),
            Converged,
        ),
        (
            "repairs turned off while one runs: it stops",
            spec(&[("b", 3)]),
            standing(Operation::Repair, Some(State::Running)),
            withdraw("spec.maintenance turned it off"),
        ),
        (
            "cleanups turned off while one runs: it finishes (a cleanup cannot be stopped)",
            {
                let mut spec = spec(&[("b", 3)]);
                settings(&mut spec).cleanup_after_scale_up = false;
                spec
            },
            standing(Operation::Cleanup, Some(State::Running)),
            Converged,
        ),
        (
            "cleanups turned off while one fails: withdrawn, its sidecar would retry forever",
            {
                let mut spec = spec(&[("b", 3)]);
                settings(&mut spec).cleanup_after_scale_up = false;
                spec
            },
            standing(Operation::Cleanup, Some(State::Failed)),
            WithdrawMaintenance {
                rack: b(),
                member: 1,
                operation: Operation::Cleanup,
                resource_version: "101".into(),
                reason: "spec.maintenance turned it off".into(),
            },
        ),
        (
            "a request on a member that is not Ready: wait for it, ask no one else",
            spec(&[("b", 3)]),
            {
                let mut o = standing(Operation::Cleanup, Some(State::Running));
                svc(&mut o, 0).cleanup_due = Some(NOW.into());
                o.racks
                    .get_mut("b")
                    .unwrap()
                    .members
                    .get_mut(&1)
                    .unwrap()
                    .pod_ready = false;
                o
            },
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 1,
            }),
        ),
        (
            "a request on the Service of a member above the replicas (it left): irrelevant",
            spec(&[("b", 3)]),
            {
                let mut o = standing(Operation::Cleanup, Some(State::Running));
                let mut gone = member(3);
                gone.pod_exists = false;
                gone.pod_ready = false;
                o.racks.get_mut("b").unwrap().members.insert(3, gone);
                svc(&mut o, 3).maintenance_request = svc(&mut o, 1).maintenance_request.take();
                o
            },
            Converged,
        ),
    ];
    for (what, spec, observed, expected) in cases {
        assert_eq!(decide(&spec, &observed), expected, "{what}");
    }
}

/// A repair withdrawn for a scale-up: the scale-up goes on (marks first),
/// and once the cluster converges again the member's repair of the same
/// cycle is asked again (its sidecar resumes where it stopped).
#[test]
fn a_repair_withdrawn_for_a_scale_up_resumes_in_the_same_cycle() {
    let spec = with_repair(spec(&[("b", 4)]), "7d");
    let mut o = cluster_of(3);
    for i in [0, 2] {
        repaired(&mut o, i, INTERVAL_CYCLE, &[("ks", NOW)]);
    }
    request(&mut o, 1, Operation::Repair, Some(INTERVAL_CYCLE));
    sidecar(&mut o, 1, State::Running);
    step(
        &spec,
        &mut o,
        Action::WithdrawMaintenance {
            rack: "b".into(),
            member: 1,
            operation: Operation::Repair,
            resource_version: "101".into(),
            reason: "a topology change or roll comes first; the repair resumes where it stopped"
                .into(),
        },
    );
    let Action::MarkCleanupDue { .. } = decide(&spec, &o) else {
        panic!("the scale-up goes on: {:?}", decide(&spec, &o));
    };
    // Back at the old size, nothing else wanted: the same cycle again.
    let spec = with_repair(crate::decide::tests::spec(&[("b", 3)]), "7d");
    assert_eq!(
        decide(&spec, &o),
        Action::RequestMaintenance {
            rack: "b".into(),
            member: 1,
            operation: Operation::Repair,
            cycle: Some(INTERVAL_CYCLE.into()),
            resource_version: rv(&o, 1),
        }
    );
}

/// After a major upgrade, once every member runs the new major, the
/// members with old-format sstables rewrite them one at a time; a member
/// whose upgradesstables is done is not asked again while its count
/// lags; mixed majors ask nothing.
#[test]
fn upgradesstables_after_a_major_upgrade() {
    let spec = spec(&[("b", 3)]);
    let mut o = cluster_of(3);
    for m in o.racks.get_mut("b").unwrap().members.values_mut() {
        m.pod_major = Some(5);
        m.pod_created = Some(secs(CREATED));
    }
    svc(&mut o, 0).old_format_sstables = Some(0);
    svc(&mut o, 1).old_format_sstables = Some(12);
    svc(&mut o, 2).old_format_sstables = Some(3);
    let mut mixed = o.clone();
    mixed
        .racks
        .get_mut("b")
        .unwrap()
        .members
        .get_mut(&2)
        .unwrap()
        .pod_major = Some(4);
    assert_eq!(
        decide(&spec, &mixed),
        Action::Converged,
        "mixed majors: nothing"
    );
    let mut off = spec.clone();
    settings(&mut off).upgrade_sstables_after_upgrade = false;
    assert_eq!(decide(&off, &o), Action::Converged, "turned off: nothing");
    assert_eq!(figures(&spec, &o).sstables_upgraded, Some(false));

    for i in [1, 2] {
        let version = rv(&o, i);
        step(
            &spec,
            &mut o,
            Action::RequestMaintenance {
                rack: "b".into(),
                member: i,
                operation: Operation::Upgradesstables,
                cycle: None,
                resource_version: version,
            },
        );
        sidecar(&mut o, i, State::Running);
        let running = figures(&spec, &o).running;
        assert_eq!(running.len(), 1);
        assert_eq!(
            (running[0].member, running[0].keyspace.as_deref()),
            (i, Some("ks"))
        );
        sidecar(&mut o, i, State::Done);
        let id = svc(&mut o, i).maintenance_request.clone().unwrap().id;
        let version = rv(&o, i);
        step(
            &spec,
            &mut o,
            Action::FinishMaintenance {
                rack: "b".into(),
                member: i,
                operation: Operation::Upgradesstables,
                request: id,
                resource_version: version,
                cycle_completed: false,
            },
        );
        // Its count has not caught up yet: not asked again.
    }
    step(&spec, &mut o, Action::Converged);
    for i in [1, 2] {
        svc(&mut o, i).old_format_sstables = Some(0);
    }
    assert_eq!(figures(&spec, &o).sstables_upgraded, Some(true));
    // The next major: the Pods restarted since the last upgradesstables.
    for m in o.racks.get_mut("b").unwrap().members.values_mut() {
        m.pod_created = Some(secs(NOW) + 60);
    }
    svc(&mut o, 2).old_format_sstables = Some(5);
    assert!(matches!(
        decide(&spec, &o),
        Action::RequestMaintenance {
            member: 2,
            operation: Operation::Upgradesstables,
            ..
        }
    ));
}

/// The cycle a repair is asked for: the latest start at or before now, of
/// a cron expression or of an interval counted from the creation; a member
/// is due while its last repaired cycle is older, the oldest first; the
/// last member's finish completes the cycle.
#[test]
fn repairs_follow_the_schedule_s_cycles() {
    for (schedule, cycle, previous) in [
        ("7d", INTERVAL_CYCLE, PREVIOUS_INTERVAL_CYCLE),
        ("0 2 * * 0", CRON_CYCLE, "2026-11-15T02:00:00Z"),
    ] {
        let spec = with_repair(spec(&[("b", 3)]), schedule);
        let mut o = cluster_of(3);
        repaired(&mut o, 0, previous, &[("ks", previous)]);
        repaired(&mut o, 1, "2026-11-08T12:00:00Z", &[("ks", previous)]);
        repaired(&mut o, 2, cycle, &[("ks", NOW)]);
        assert_eq!(
            crate::decide::maintenance::current_cycle(&spec, &o),
            Some(secs(cycle)),
            "{schedule}"
        );
        // Member 1 repaired longest ago.
        for i in [1, 0] {
            let version = rv(&o, i);
            step(
                &spec,
                &mut o,
                Action::RequestMaintenance {
                    rack: "b".into(),
                    member: i,
                    operation: Operation::Repair,
                    cycle: Some(cycle.into()),
                    resource_version: version,
                },
            );
            sidecar(&mut o, i, State::Running);
            step(&spec, &mut o, Action::Converged);
            sidecar(&mut o, i, State::Done);
            let id = svc(&mut o, i).maintenance_request.clone().unwrap().id;
            let version = rv(&o, i);
            step(
                &spec,
                &mut o,
                Action::FinishMaintenance {
                    rack: "b".into(),
                    member: i,
                    operation: Operation::Repair,
                    request: id,
                    resource_version: version,
                    cycle_completed: i == 0,
                },
            );
        }
        step(&spec, &mut o, Action::Converged);
        // The next cycle: every member is due again, in order.
        o.now += crate::decide::maintenance::next_cycle_in(&spec, &o).unwrap();
        assert!(matches!(
            decide(&spec, &o),
            Action::RequestMaintenance {
                member: 0,
                operation: Operation::Repair,
                ..
            }
        ));
    }
    // Before the first cycle of an interval (a clock behind the creation):
    // nothing.
    let spec = with_repair(spec(&[("b", 3)]), "7d");
    let mut o = cluster_of(3);
    o.now = secs(CREATED) - 10;
    assert_eq!(decide(&spec, &o), Action::Converged);
}

/// Nothing is asked out of a ring that is not settled, and the cleanup
/// marked first goes first.
#[test]
fn requests_wait_for_a_settled_ring_and_go_oldest_first() {
    let spec = spec(&[("b", 3)]);
    let mut o = cluster_of(3);
    svc(&mut o, 0).cleanup_due = Some(NOW.into());
    svc(&mut o, 2).cleanup_due = Some(CREATED.into());
    let mut unsettled = o.clone();
    svc(&mut unsettled, 1).gossip = None;
    assert_eq!(decide(&spec, &unsettled), Action::Converged);
    assert!(matches!(
        decide(&spec, &o),
        Action::RequestMaintenance {
            member: 2,
            operation: Operation::Cleanup,
            ..
        }
    ));
    // A cleanup outranks a repair and an upgradesstables.
    let spec = with_repair(spec, "7d");
    svc(&mut o, 1).old_format_sstables = Some(3);
    assert!(matches!(
        decide(&spec, &o),
        Action::RequestMaintenance {
            member: 2,
            operation: Operation::Cleanup,
            ..
        }
    ));
    let mut scylla = spec.clone();
    scylla.mode = crds::v1alpha1::ClusterMode::Scylla;
    assert_eq!(decide(&scylla, &o), Action::Converged);
}

fn cluster_resource(repair: bool) -> Cluster {
    let repair = if repair {
        ", maintenance: {repair: {schedule: 7d}}"
    } else {
        ""
    };
    let mut cluster: Cluster = serde_norway::from_str(&format!(
        "metadata: {{name: c, namespace: db, creationTimestamp: '{CREATED}'}}\nspec: {{version: 4.1.8, datacenter: {{name: dc, racks: [{{name: b, members: 3}}]}}{repair}}}"
    ))
    .unwrap();
    cluster.metadata.generation = Some(2);
    cluster
}

/// The figures status reports: the running member and keyspace, the
/// cycle's share (members done whole, the running one by its subranges),
/// each keyspace's last full repair once every member names it, and the
/// RepairOverdue and MaintenanceFailed degradations, with Ready intact.
#[test]
fn status_reports_the_maintenance() {
    let cluster = cluster_resource(true);
    let spec = &cluster.spec;
    assert_eq!(
        spec.maintenance
            .as_ref()
            .unwrap()
            .repair
            .as_ref()
            .unwrap()
            .gc_grace_seconds,
        864_000
    );
    let mut o = cluster_of(3);
    repaired(
        &mut o,
        0,
        INTERVAL_CYCLE,
        &[("ks", "2026-11-23T00:00:00Z"), ("other", NOW)],
    );
    repaired(
        &mut o,
        1,
        PREVIOUS_INTERVAL_CYCLE,
        &[("ks", "2026-11-18T00:00:00Z")],
    );
    request(&mut o, 1, Operation::Repair, Some(INTERVAL_CYCLE));
    sidecar(&mut o, 1, State::Running); // 4 of 16
    let now = Time(crds::contract::parse_time(NOW).unwrap());
    let outcome = Outcome::Decided(decide(spec, &o));
    assert_eq!(outcome, Outcome::Decided(Action::Converged));
    let status = compute_status(&cluster, &o, &outcome, &now);
    let maintenance = status.maintenance.clone().expect("status.maintenance");
    let repair = maintenance.repair.expect("status.maintenance.repair");
    assert_eq!(repair.cycle.as_deref(), Some(INTERVAL_CYCLE));
    // (1 + 4/16 + 0) / 3 = 41.6%
    assert_eq!(repair.repaired_percent, 41);
    assert_eq!(repair.member.as_deref(), Some("c-dc-b-1"));
    let keyspaces: Vec<(&str, Option<&str>)> = repair
        .keyspaces
        .iter()
        .map(|k| (k.name.as_str(), k.last_full_repair.as_deref()))
        .collect();
    assert_eq!(
        keyspaces,
        vec![("ks", None), ("other", None)],
        "member 2 has repaired nothing yet"
    );
    repaired(&mut o, 2, INTERVAL_CYCLE, &[("ks", "2026-11-24T00:00:00Z")]);
    let f = figures(spec, &o);
    let repair = f.repair.as_ref().unwrap();
    assert_eq!(repair.keyspaces["ks"], Some(secs("2026-11-18T00:00:00Z")));
    assert_eq!(repair.keyspaces["other"], None);
    assert!((repair.repaired - (2.0 + 0.25) / 3.0).abs() < 1e-9);
    // "other" was never fully repaired: counted from the creation, 26 days
    // ago, past the 10 days of grace.
    let (reason, message) = degradation(&f).expect("overdue");
    assert_eq!(reason, "RepairOverdue");
    assert!(message.contains("keyspace other"), "{message}");
    let status = compute_status(&cluster, &o, &outcome, &now);
    let cond = |t: &str| status.conditions.iter().find(|c| c.type_ == t).unwrap();
    assert_eq!(cond("Degraded").reason, "RepairOverdue");
    assert_eq!(cond("Ready").status, "True", "a repair overdue keeps Ready");

    // A failed request degrades first, naming Cassandra's reason.
    sidecar(&mut o, 1, State::Failed);
    let status = compute_status(&cluster, &o, &outcome, &now);
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(degraded.reason, "MaintenanceFailed");
    assert!(
        degraded.message.contains("Connection refused"),
        "{}",
        degraded.message
    );

    // A cleanup running: status names the member, keyspace and start.
    let cluster = cluster_resource(false);
    let mut o = cluster_of(3);
    request(&mut o, 2, Operation::Cleanup, None);
    let status = compute_status(&cluster, &o, &outcome, &now);
    let cleanup = status.maintenance.unwrap().cleanup.expect("a cleanup");
    assert_eq!(cleanup.member, "c-dc-b-2");
    assert_eq!(cleanup.keyspace, None, "not taken up yet");
    assert_eq!(cleanup.started_at.as_deref(), Some(NOW));
    sidecar(&mut o, 2, State::Running);
    let status = compute_status(&cluster, &o, &outcome, &now);
    let cleanup = status.maintenance.unwrap().cleanup.unwrap();
    assert_eq!(cleanup.keyspace.as_deref(), Some("ks"));
    // Nothing recorded, repairs not set: no status.maintenance at all.
    let status = compute_status(&cluster, &cluster_of(3), &outcome, &now);
    assert_eq!(status.maintenance, None);
}

/// A maintenance step keeps Ready and records the generation as
/// observed; a wait for one is Progressing.
#[test]
fn maintenance_steps_keep_the_cluster_ready() {
    let cluster = cluster_resource(false);
    let now = Time(crds::contract::parse_time(NOW).unwrap());
    let o = cluster_of(3);
    let request = Outcome::Decided(Action::RequestMaintenance {
        rack: "b".into(),
        member: 0,
        operation: Operation::Cleanup,
        cycle: None,
        resource_version: "100".into(),
    });
    let status = compute_status(&cluster, &o, &request, &now);
    let cond = |s: &crds::v1alpha1::ClusterStatus, t: &str| {
        let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
        (c.status.clone(), c.reason.clone())
    };
    assert_eq!(
        cond(&status, "Ready"),
        ("True".into(), "AllMembersReady".into())
    );
    assert_eq!(status.observed_generation, Some(2));
    let wait = Outcome::Decided(Action::Wait(WaitReason::MaintenanceRunning {
        rack: "b".into(),
        member: 0,
        operation: Operation::Cleanup,
    }));
    let status = compute_status(&cluster, &o, &wait, &now);
    assert_eq!(
        cond(&status, "Progressing"),
        ("True".into(), "MaintenanceRunning".into())
    );
}
