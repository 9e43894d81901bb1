//! Maintenance (issue 33): a cleanup on every member that gave ranges away
//! to a new member, upgradesstables on every member with sstables of an
//! older format once every member runs one major, and, when the spec asks
//! for them, scheduled repairs. Reads the spec and the observation; pure.
//!
//! Every piece of state is on the member Services (`crds::contract::
//! maintenance`): the controller's `cleanup-due` marks and its one request
//! at a time, the sidecar's record of where the request stands, what each
//! member last repaired and its count of old-format sstables. So a
//! controller restarted anywhere decides again from what it reads:
//! - before a scale-up (a new rack's first member too), every member in
//!   the ring is marked `cleanup-due` (after it, nothing says who gave
//!   ranges away); marks already there are kept, so a crash between the
//!   marks and the scale-up marks nothing again;
//! - once the cluster is converged and its ring settled, one member at a
//!   time is asked: first a cleanup (oldest mark first), then
//!   upgradesstables, then a repair of the current cycle (the member that
//!   repaired longest ago first);
//! - a request its sidecar recorded done is removed (with the member's
//!   mark, for a cleanup) before anything else happens;
//! - a cleanup or upgradesstables under way holds topology changes and
//!   rolls (not replacements: a member that lost its disk is replaced
//!   whatever runs); a repair under way is withdrawn instead (its sidecar
//!   stops and keeps its progress for the next request of the cycle).
//!
//! In scylla mode nothing is asked (not supported yet).

use std::collections::{BTreeMap, BTreeSet};

use crds::contract::maintenance::{Operation, Record, Request, State};
use crds::contract::parse_time;
use crds::v1alpha1::{ClusterMode, ClusterSpec, MaintenanceSpec};
use crds::validate::schedule::Schedule;

use super::guards::mixed_majors;
use super::roll::ring_unsettled;
use super::{Action, WaitReason};
use crate::observed::{MemberObserved, Observed, ServiceObserved};

/// The maintenance settings in force: the spec's, or the defaults when it
/// names none; `None` in scylla mode (nothing is asked).
pub fn settings(spec: &ClusterSpec) -> Option<MaintenanceSpec> {
    (spec.mode == ClusterMode::Cassandra).then(|| spec.maintenance.clone().unwrap_or_default())
}

/// A member maintenance concerns: one the StatefulSet counts, with its
/// Service, not leaving or left.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub rack: &'a str,
    pub ordinal: i32,
    pub state: &'a MemberObserved,
    pub service: &'a ServiceObserved,
}

impl Member<'_> {
    /// Its last repaired cycle (seconds), when recorded.
    fn repaired_cycle(&self) -> Option<i64> {
        self.service
            .repaired
            .as_ref()
            .and_then(|r| parse_time(&r.cycle))
            .map(|t| t.as_second())
    }
}

/// The members, racks in spec order, ordinals in order.
pub fn members<'a>(spec: &ClusterSpec, observed: &'a Observed) -> Vec<Member<'a>> {
    let mut members = Vec::new();
    for rack in &spec.datacenter.racks {
        let Some((name, observed_rack)) = observed.racks.get_key_value(&rack.name) else {
            continue;
        };
        for (&ordinal, state) in observed_rack
            .members
            .range(..observed_rack.replicas.unwrap_or(0))
        {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            if service.decommissioned.is_some() {
                continue;
            }
            members.push(Member {
                rack: name.as_str(),
                ordinal,
                state,
                service,
            });
        }
    }
    members
}

/// A request that stands on a member, and its sidecar's record of it (the
/// record only when it answers this request).
#[derive(Debug, Clone, Copy)]
pub struct Standing<'a> {
    pub member: Member<'a>,
    pub request: &'a Request,
    pub record: Option<&'a Record>,
}

impl Standing<'_> {
    fn state(&self) -> Option<State> {
        self.record.map(|r| r.state)
    }

    fn done(&self) -> bool {
        self.state() == Some(State::Done)
    }

    /// Whether it holds topology changes and rolls (a repair is withdrawn
    /// instead).
    fn holds(&self) -> bool {
        self.request.operation != Operation::Repair
    }
}

/// The requests that stand, in member order.
pub fn standing<'a>(spec: &ClusterSpec, observed: &'a Observed) -> Vec<Standing<'a>> {
    members(spec, observed)
        .into_iter()
        .filter_map(|member| {
            let request = member.service.maintenance_request.as_ref()?;
            let record = member
                .service
                .maintenance_record
                .as_ref()
                .filter(|r| r.request == request.id);
            Some(Standing {
                member,
                request,
                record,
            })
        })
        .collect()
}

/// The start of the current repair cycle (seconds since the epoch), when
/// repairs are set, their schedule reads, and a cycle has started.
pub fn current_cycle(spec: &ClusterSpec, observed: &Observed) -> Option<i64> {
    let schedule = repair_schedule(spec)?;
    schedule.cycle_start(origin(&schedule, observed)?, observed.now)
}

/// Seconds from now to the next cycle's start, when repairs are set: the
/// controller wakes up for it.
pub fn next_cycle_in(spec: &ClusterSpec, observed: &Observed) -> Option<i64> {
    let schedule = repair_schedule(spec)?;
    let next = schedule.next_start(origin(&schedule, observed)?, observed.now)?;
    Some((next - observed.now).max(1))
}

fn repair_schedule(spec: &ClusterSpec) -> Option<Schedule> {
    let repair = settings(spec)?.repair?;
    Schedule::parse(&repair.schedule).ok()
}

/// Where an interval counts from: the Cluster's creation (a cron
/// expression needs none).
fn origin(schedule: &Schedule, observed: &Observed) -> Option<i64> {
    match schedule {
        Schedule::Interval(_) => observed.created,
        Schedule::Cron(_) => Some(observed.created.unwrap_or(0)),
    }
}

/// A time as the records write it (RFC 3339, UTC).
pub fn rfc3339(seconds: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn finish(spec: &ClusterSpec, observed: &Observed, s: &Standing<'_>) -> Option<Action> {
    let cycle_completed = s.request.operation == Operation::Repair && {
        let cycle = s
            .request
            .cycle
            .as_deref()
            .and_then(parse_time)
            .map(|t| t.as_second());
        cycle.is_some()
            && cycle == current_cycle(spec, observed)
            && members(spec, observed).iter().all(|m| {
                (m.rack == s.member.rack && m.ordinal == s.member.ordinal)
                    || m.repaired_cycle() >= cycle
            })
    };
    Some(Action::FinishMaintenance {
        rack: s.member.rack.to_string(),
        member: s.member.ordinal,
        operation: s.request.operation,
        request: s.request.id.clone(),
        resource_version: s.member.service.resource_version.clone()?,
        cycle_completed,
    })
}

fn withdraw(s: &Standing<'_>, reason: &str) -> Option<Action> {
    Some(Action::WithdrawMaintenance {
        rack: s.member.rack.to_string(),
        member: s.member.ordinal,
        operation: s.request.operation,
        resource_version: s.member.service.resource_version.clone()?,
        reason: reason.to_string(),
    })
}

/// What must come before `change`, a step that starts a topology change
/// or a roll (a restart, a member Service for a scale-up, a scale-up, a
/// decommission request), if anything: a request done is removed; a
/// cleanup or upgradesstables under way is waited for; a repair under way
/// is withdrawn; before a scale-up, the ring's members are marked
/// `cleanup-due`. `None`: the change goes.
pub(super) fn before_change(
    spec: &ClusterSpec,
    observed: &Observed,
    change: &Action,
) -> Option<Action> {
    let scale_up = matches!(
        change,
        Action::CreateMemberService { .. } | Action::ScaleUp { .. }
    );
    if !scale_up
        && !matches!(
            change,
            Action::RestartMember { .. } | Action::RequestDecommission { .. }
        )
    {
        return None;
    }
    let settings = settings(spec)?;
    let standing = standing(spec, observed);
    if let Some(done) = standing.iter().find(|s| s.done()) {
        return finish(spec, observed, done);
    }
    if let Some(held) = standing.iter().find(|s| s.holds()) {
        return Some(Action::Wait(WaitReason::MaintenanceRunning {
            rack: held.member.rack.to_string(),
            member: held.member.ordinal,
            operation: held.request.operation,
        }));
    }
    if let Some(repair) = standing.first() {
        return withdraw(
            repair,
            "a topology change or roll comes first; the repair resumes where it stopped",
        );
    }
    if scale_up && settings.cleanup_after_scale_up {
        return mark_cleanup_due(spec, observed);
    }
    None
}

/// Before a replace: a repair under way is withdrawn (a replace never
/// waits for a cleanup or upgradesstables: the member lost its data).
pub(super) fn before_replace(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    settings(spec)?;
    let standing = standing(spec, observed);
    let repair = standing
        .iter()
        .find(|s| s.request.operation == Operation::Repair && !s.done())?;
    withdraw(
        repair,
        "a member is replaced first; the repair resumes where it stopped",
    )
}

/// Every member in the ring (Ready) not marked yet, with the
/// resourceVersion each mark is guarded by.
fn mark_cleanup_due(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    let unmarked: Vec<(String, i32, String)> = members(spec, observed)
        .into_iter()
        .filter(|m| m.state.pod_ready && m.service.cleanup_due.is_none())
        .filter_map(|m| {
            Some((
                m.rack.to_string(),
                m.ordinal,
                m.service.resource_version.clone()?,
            ))
        })
        .collect();
    (!unmarked.is_empty()).then_some(Action::MarkCleanupDue { members: unmarked })
}

/// The cluster is converged: the next maintenance step, or
/// [`Action::Converged`] when there is none (or one runs).
pub(super) fn next(spec: &ClusterSpec, observed: &Observed) -> Action {
    next_step(spec, observed).unwrap_or(Action::Converged)
}

fn next_step(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    let settings = settings(spec)?;
    let standing = standing(spec, observed);
    if let Some(done) = standing.iter().find(|s| s.done()) {
        return finish(spec, observed, done);
    }
    if let Some(s) = standing.first() {
        // One at a time: it runs (or its sidecar takes it up). Turned off
        // in the spec meanwhile: a repair stops; a cleanup or
        // upgradesstables cannot be stopped, and is withdrawn only once it
        // failed (its sidecar would try again forever).
        let disabled = match s.request.operation {
            Operation::Cleanup => !settings.cleanup_after_scale_up,
            Operation::Upgradesstables => !settings.upgrade_sstables_after_upgrade,
            Operation::Repair => settings.repair.is_none(),
        };
        if disabled
            && (s.request.operation == Operation::Repair || s.state() == Some(State::Failed))
        {
            return withdraw(s, "spec.maintenance turned it off");
        }
        return None;
    }
    // Only out of a settled ring: every member sees every member up.
    if ring_unsettled(spec, observed).is_some() {
        return None;
    }
    let members = members(spec, observed);
    let ready: Vec<&Member<'_>> = members
        .iter()
        .filter(|m| m.state.pod_ready && m.service.resource_version.is_some())
        .collect();
    let request = |m: &Member<'_>, operation: Operation, cycle: Option<String>| {
        Some(Action::RequestMaintenance {
            rack: m.rack.to_string(),
            member: m.ordinal,
            operation,
            cycle,
            resource_version: m.service.resource_version.clone()?,
        })
    };
    // (a) Cleanups, the oldest mark first.
    if settings.cleanup_after_scale_up
        && let Some(m) = ready
            .iter()
            .filter(|m| m.service.cleanup_due.is_some())
            .min_by_key(|m| {
                m.service
                    .cleanup_due
                    .as_deref()
                    .and_then(parse_time)
                    .map_or(i64::MIN, |t| t.as_second())
            })
    {
        return request(m, Operation::Cleanup, None);
    }
    // (b) upgradesstables, once every member runs one major.
    if settings.upgrade_sstables_after_upgrade
        && mixed_majors(observed).is_none()
        && let Some(m) = ready
            .iter()
            .find(|m| m.service.old_format_sstables.is_some_and(|n| n > 0) && !upgraded(m))
    {
        return request(m, Operation::Upgradesstables, None);
    }
    // (c) The repair of the current cycle, the member that repaired
    // longest ago first.
    if settings.repair.is_some()
        && let Some(cycle) = current_cycle(spec, observed)
        && let Some(m) = ready
            .iter()
            .filter(|m| m.repaired_cycle().is_none_or(|c| c < cycle))
            .min_by_key(|m| m.repaired_cycle().unwrap_or(i64::MIN))
    {
        return request(m, Operation::Repair, Some(rfc3339(cycle)));
    }
    None
}

/// Whether a member's last record is an upgradesstables done since its
/// Pod started: its count of old-format sstables may lag behind (the
/// sidecar writes it when it changes), and asking again would loop on a
/// count that does not reach 0. A Pod started since (the next upgrade's
/// roll) is asked again.
fn upgraded(m: &Member<'_>) -> bool {
    m.service.maintenance_record.as_ref().is_some_and(|r| {
        r.operation == Operation::Upgradesstables
            && r.state == State::Done
            && match (parse_time(&r.at), m.state.pod_created) {
                (Some(at), Some(created)) => at.as_second() >= created,
                _ => true,
            }
    })
}

/// A maintenance operation under way on a member, for status and
/// metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub operation: Operation,
    pub rack: String,
    pub member: i32,
    /// The keyspace its sidecar works on now.
    pub keyspace: Option<String>,
    /// When its sidecar started it, or the request's time until then.
    pub started_at: String,
    /// What failed, while it fails (its sidecar tries again).
    pub error: Option<String>,
}

/// The repair figures of the current cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairFigures {
    /// The current cycle's start (seconds), once one started.
    pub cycle: Option<i64>,
    /// The share of the members' ranges repaired in the cycle, 0 to 1.
    pub repaired: f64,
    /// Every keyspace a member's record names, and when it was last fully
    /// repaired (seconds): every member's record names it, at the earliest
    /// of their times.
    pub keyspaces: BTreeMap<String, Option<i64>>,
    /// The keyspaces gone longer than `gcGraceSeconds` without a full
    /// repair (counted from the Cluster's creation when never), and since
    /// when; `None` as the name when no member recorded any keyspace.
    pub overdue: Vec<(Option<String>, i64)>,
    pub gc_grace_seconds: i64,
}

/// What status and metrics say of the maintenance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// The requests that stand and are not done.
    pub running: Vec<Running>,
    /// Whether every member records no old-format sstable (unknown while
    /// one has not recorded its count).
    pub sstables_upgraded: Option<bool>,
    /// When repairs are set.
    pub repair: Option<RepairFigures>,
}

/// The maintenance figures of a cluster (empty in scylla mode).
pub fn figures(spec: &ClusterSpec, observed: &Observed) -> Figures {
    let Some(settings) = settings(spec) else {
        return Figures::default();
    };
    let members = members(spec, observed);
    let standing = standing(spec, observed);
    let running = standing
        .iter()
        .filter(|s| !s.done())
        .map(|s| Running {
            operation: s.request.operation,
            rack: s.member.rack.to_string(),
            member: s.member.ordinal,
            keyspace: s.record.and_then(|r| r.keyspace.clone()),
            started_at: s
                .record
                .map_or_else(|| s.request.requested_at.clone(), |r| r.started_at.clone()),
            error: s
                .record
                .filter(|r| r.state == State::Failed)
                .map(|r| r.error.clone().unwrap_or_else(|| "no reason given".into())),
        })
        .collect();
    let counts: Option<Vec<u64>> = members
        .iter()
        .map(|m| m.service.old_format_sstables)
        .collect();
    let sstables_upgraded = counts
        .filter(|c| !c.is_empty())
        .map(|c| c.iter().all(|n| *n == 0));
    let repair = settings.repair.as_ref().map(|repair| {
        let cycle = current_cycle(spec, observed);
        let share = |m: &Member<'_>| -> f64 {
            let Some(cycle) = cycle else {
                return 0.0;
            };
            if m.repaired_cycle().is_some_and(|c| c >= cycle) {
                return 1.0;
            }
            // Its progress in this cycle: the record of the request that
            // stands, or of one stopped in this cycle (kept for the next).
            let Some(record) = m.service.maintenance_record.as_ref() else {
                return 0.0;
            };
            let answers_standing = m
                .service
                .maintenance_request
                .as_ref()
                .is_some_and(|r| r.id == record.request && r.operation == Operation::Repair);
            let this_cycle = parse_time(&record.started_at).is_some_and(|t| t.as_second() >= cycle);
            match (record.ranges_done, record.ranges_total) {
                (Some(done), Some(total))
                    if record.operation == Operation::Repair
                        && total > 0
                        && (answers_standing || this_cycle) =>
                {
                    (done.min(total) as f64) / (total as f64)
                }
                _ => 0.0,
            }
        };
        let repaired = if members.is_empty() {
            0.0
        } else {
            members.iter().map(share).sum::<f64>() / members.len() as f64
        };
        let names: BTreeSet<&String> = members
            .iter()
            .filter_map(|m| m.service.repaired.as_ref())
            .flat_map(|r| r.keyspaces.keys())
            .collect();
        let keyspaces: BTreeMap<String, Option<i64>> = names
            .into_iter()
            .map(|name| {
                let times: Option<Vec<i64>> = members
                    .iter()
                    .map(|m| {
                        let at = m.service.repaired.as_ref()?.keyspaces.get(name)?;
                        parse_time(at).map(|t| t.as_second())
                    })
                    .collect();
                let last = times.and_then(|t| t.into_iter().min());
                (name.clone(), last)
            })
            .collect();
        let grace = repair.gc_grace_seconds;
        let mut overdue = Vec::new();
        if let Some(created) = observed.created {
            if keyspaces.is_empty() && observed.now - created > grace {
                overdue.push((None, created));
            }
            for (name, last) in &keyspaces {
                let since = last.unwrap_or(created);
                if observed.now - since > grace {
                    overdue.push((Some(name.clone()), since));
                }
            }
        }
        RepairFigures {
            cycle,
            repaired,
            keyspaces,
            overdue,
            gc_grace_seconds: grace,
        }
    });
    Figures {
        running,
        sstables_upgraded,
        repair,
    }
}

/// What degrades the cluster in its maintenance, if anything: a request
/// its sidecar failed (it tries again), then a keyspace overdue for a
/// full repair. The reason (also the Warning Event's) and the message.
pub fn degradation(figures: &Figures) -> Option<(&'static str, String)> {
    if let Some(failing) = figures.running.iter().find(|r| r.error.is_some()) {
        return Some((
            "MaintenanceFailed",
            format!(
                "the {} of member {} of rack {} failed: {}; its sidecar tries again (topology changes and rolls wait for a cleanup or upgradesstables)",
                failing.operation.as_str(),
                failing.member,
                failing.rack,
                failing.error.as_deref().unwrap_or_default()
            ),
        ));
    }
    let repair = figures.repair.as_ref()?;
    let (name, since) = repair.overdue.first()?;
    let what = match name {
        Some(name) => format!(
            "keyspace {name} was last fully repaired at {}",
            rfc3339(*since)
        ),
        None => format!(
            "no keyspace was fully repaired since the cluster's creation at {}",
            rfc3339(*since)
        ),
    };
    let others = repair.overdue.len() - 1;
    let more = if others > 0 {
        format!(" (and {others} more keyspace(s))")
    } else {
        String::new()
    };
    Some((
        "RepairOverdue",
        format!(
            "{what}{more}, longer ago than spec.maintenance.repair.gcGraceSeconds ({}s): deleted data may come back; check that repairs run (status.maintenance.repair)",
            repair.gc_grace_seconds
        ),
    ))
}
