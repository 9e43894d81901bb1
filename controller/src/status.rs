//! The status a reconcile writes: per-rack members, readiness and
//! conditions, and the cluster's Ready / Progressing / Degraded conditions.
//! Pure and infallible: computed from the spec, the observed state and what
//! the reconcile decided.

use std::collections::BTreeMap;

use crds::ValidationErrors;
use crds::contract::maintenance::Operation;
use crds::v1alpha1::{
    CONDITION_DEGRADED, CONDITION_PROGRESSING, CONDITION_READY, Cluster, ClusterStatus,
    ConditionStatus, RACK_CONDITION_DECOMMISSION_REFUSED, RACK_CONDITION_MEMBER_LEAVING,
    RACK_CONDITION_MEMBER_REPLACING, RACK_CONDITION_OVERRIDES_REFUSED,
    RACK_CONDITION_START_REFUSED, RackCondition, RackStatus,
};
use crds::v1alpha1::{KeyspaceRepair, MaintenanceStatus, RepairStatus, RunningMaintenance};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::decide::maintenance::{self, Figures};
use crate::decide::{Action, Refusal, WaitReason};
use crate::observed::{Observed, RefusedOverrides};

/// What the reconcile concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The spec is invalid: nothing was done.
    Invalid(ValidationErrors),
    /// The decision step chose this action.
    Decided(Action),
}

/// One condition's (status, reason, message).
struct Cond {
    status: bool,
    reason: &'static str,
    message: String,
}

fn conditions(outcome: &Outcome) -> [(&'static str, Cond); 3] {
    let cond = |status, reason, message: String| Cond {
        status,
        reason,
        message,
    };
    match outcome {
        Outcome::Invalid(errors) => [
            (
                CONDITION_READY,
                cond(
                    false,
                    "InvalidSpec",
                    "the spec is invalid; nothing was changed".into(),
                ),
            ),
            (
                CONDITION_PROGRESSING,
                cond(false, "InvalidSpec", "waiting for a valid spec".into()),
            ),
            (
                CONDITION_DEGRADED,
                cond(
                    true,
                    "InvalidSpec",
                    format!("invalid spec, nothing was changed: {errors}"),
                ),
            ),
        ],
        Outcome::Decided(action) => {
            let progressing = |reason, message: String| {
                [
                    (
                        CONDITION_READY,
                        cond(false, "MembersNotReady", "the cluster is changing".into()),
                    ),
                    (CONDITION_PROGRESSING, cond(true, reason, message)),
                    (
                        CONDITION_DEGRADED,
                        cond(false, "AsExpected", "nothing stands in the way".into()),
                    ),
                ]
            };
            match action {
                // A maintenance step is no change of the cluster: it
                // stays Ready while a member cleans up or repairs.
                Action::Converged
                | Action::RequestMaintenance { .. }
                | Action::FinishMaintenance { .. } => [
                    (
                        CONDITION_READY,
                        cond(
                            true,
                            "AllMembersReady",
                            "every member of every rack is ready".into(),
                        ),
                    ),
                    (
                        CONDITION_PROGRESSING,
                        cond(
                            false,
                            "Converged",
                            "the cluster has the members its spec asks for".into(),
                        ),
                    ),
                    (
                        CONDITION_DEGRADED,
                        cond(false, "AsExpected", "nothing stands in the way".into()),
                    ),
                ],
                Action::CreateStatefulSets { racks } => progressing(
                    "RackCreating",
                    format!(
                        "creating the StatefulSet of rack(s) {}",
                        racks
                            .iter()
                            .map(|(r, n)| format!("{r} ({n} members)"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                Action::RequestDecommission { rack, member, .. } => progressing(
                    "MemberLeaving",
                    format!("asking member {member} of rack {rack} to decommission"),
                ),
                Action::ClearStaleDecommission {
                    rack,
                    member,
                    missing,
                    ..
                } => progressing(
                    "StaleDecommissionRecord",
                    format!(
                        "member {member} of rack {rack} has a decommissioned=true that is no confirmed decommission ({missing}): taking it back, nothing is deleted"
                    ),
                ),
                Action::RecordRemoval { rack, member, .. } => progressing(
                    "MemberLeaving",
                    format!(
                        "member {member} of rack {rack}, lost while leaving, was removed from the ring: recording it"
                    ),
                ),
                Action::RequestRingRecord {
                    rack,
                    member,
                    witness_rack,
                    witness,
                } => progressing(
                    "MemberLeaving",
                    format!(
                        "member {member} of rack {rack} left: asking member {witness} of rack {witness_rack} to record its ring, which must agree before anything is removed"
                    ),
                ),
                Action::WithdrawDecommission { rack, member, .. } => progressing(
                    "DecommissionCancelled",
                    format!(
                        "withdrawing the decommission request of member {member} of rack {rack}, which the spec wants"
                    ),
                ),
                Action::ScaleDown { rack, replicas } => progressing(
                    "MemberLeaving",
                    format!(
                        "member {replicas} of rack {rack} left the ring: removing it from the StatefulSet"
                    ),
                ),
                Action::DeleteLeftovers { rack, member, .. } => progressing(
                    "MemberLeaving",
                    format!(
                        "deleting the claims and Service of member {member} of rack {rack}, decommissioned"
                    ),
                ),
                Action::StartReplace { rack, member, .. } => progressing(
                    "MemberReplacing",
                    format!("member {member} of rack {rack} lost its disk: recording its replace"),
                ),
                Action::DeleteLostDisk { rack, member, .. } => progressing(
                    "MemberReplacing",
                    format!(
                        "member {member} of rack {rack} is being replaced: deleting its lost claims and its Pod"
                    ),
                ),
                Action::FinishReplace { rack, member } => progressing(
                    "MemberReplacing",
                    format!("member {member} of rack {rack} was replaced and is ready"),
                ),
                Action::Wait(WaitReason::DecommissionBeforeScaleUp { rack, member }) => {
                    progressing(
                        "MemberLeaving",
                        format!(
                            "member {member} of rack {rack} is decommissioning already; it finishes before the scale-up proceeds"
                        ),
                    )
                }
                Action::Wait(WaitReason::MixedMajorVersions { majors }) => progressing(
                    "MixedMajorVersions",
                    format!(
                        "members run major versions {}: no topology change until they run one",
                        majors
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ),
                ),
                Action::CreateMemberService { rack, member, .. } => progressing(
                    "ScalingUp",
                    format!("creating the member Service of member {member} of rack {rack}"),
                ),
                Action::MarkCleanupDue { members } => progressing(
                    "ScalingUp",
                    format!(
                        "marking {} member(s) for a cleanup before the scale-up: they will give ranges away",
                        members.len()
                    ),
                ),
                Action::WithdrawMaintenance {
                    rack,
                    member,
                    operation,
                    reason,
                    ..
                } => progressing(
                    "MaintenanceStopping",
                    format!(
                        "withdrawing the {} request of member {member} of rack {rack}: {reason}",
                        operation.as_str()
                    ),
                ),
                Action::Wait(WaitReason::MemberServiceChanged { rack, member }) => progressing(
                    "MemberServiceChanged",
                    format!(
                        "the member Service of member {member} of rack {rack} changed while it was written: looking again"
                    ),
                ),
                Action::Wait(WaitReason::MaintenanceRunning {
                    rack,
                    member,
                    operation,
                }) => progressing(
                    "MaintenanceRunning",
                    format!(
                        "the {} of member {member} of rack {rack} runs: no topology change or roll starts until it is done",
                        operation.as_str()
                    ),
                ),
                Action::ScaleUp { rack, replicas } => progressing(
                    "ScalingUp",
                    format!("adding member {} to rack {rack}", replicas - 1),
                ),
                Action::Wait(WaitReason::MemberNotReady { rack, member }) => progressing(
                    "MemberNotReady",
                    format!("waiting for member {member} of rack {rack} to be ready"),
                ),
                Action::Wait(WaitReason::AuthReplicationBeforeDecommission {
                    rack,
                    member,
                    detail,
                }) => progressing(
                    "AuthReplicationBeforeDecommission",
                    format!(
                        "member {member} of rack {rack} leaves once system_auth, system_distributed and system_traces have no more replicas than members remain: {detail}"
                    ),
                ),
                Action::Wait(WaitReason::MemberLeaving { rack, member }) => progressing(
                    "MemberLeaving",
                    format!("member {member} of rack {rack} is being decommissioned"),
                ),
                Action::UpdateStatefulSets { racks } => progressing(
                    "TemplateChanging",
                    format!(
                        "applying the spec to the StatefulSet of rack(s) {}",
                        racks.join(", ")
                    ),
                ),
                Action::RestartMember { rack, member, .. }
                | Action::EvictMember { rack, member } => progressing(
                    "RollingRestart",
                    format!("rolling the new template of rack {rack}: restarting member {member}"),
                ),
                Action::FinishRestart { rack, member } => progressing(
                    "RollingRestart",
                    format!(
                        "rolling the new template of rack {rack}: member {member} is back Ready"
                    ),
                ),
                Action::Wait(WaitReason::MemberRestarting { rack, member }) => progressing(
                    "RollingRestart",
                    format!(
                        "rolling the new template of rack {rack}: waiting for member {member} to come back Ready"
                    ),
                ),
                Action::Wait(WaitReason::RingNotSettled {
                    rack,
                    member,
                    detail,
                }) => progressing(
                    "RollingRestart",
                    format!(
                        "rolling the new template of rack {rack}: member {member} waits for the ring, {detail}"
                    ),
                ),
                Action::Wait(WaitReason::EvictionRefused { rack, member }) => progressing(
                    "RollingRestart",
                    format!(
                        "rolling the new template of rack {rack}: the PodDisruptionBudget holds the eviction of member {member} for now"
                    ),
                ),
                Action::Wait(WaitReason::StatefulSetNotObserved { rack }) => progressing(
                    "TemplateChanging",
                    format!(
                        "waiting for the StatefulSet controller to take in the new spec of rack {rack}"
                    ),
                ),
                Action::Wait(WaitReason::MemberReplacing { rack, member }) => progressing(
                    "MemberReplacing",
                    format!("member {member} of rack {rack} is being replaced"),
                ),
                Action::Refuse(refusal) => {
                    let (reason, message) = refusal_reason(refusal);
                    [
                        (CONDITION_READY, cond(false, reason, message.clone())),
                        (
                            CONDITION_PROGRESSING,
                            cond(
                                false,
                                reason,
                                "waiting for a change of the spec or of the objects".into(),
                            ),
                        ),
                        (CONDITION_DEGRADED, cond(true, reason, message)),
                    ]
                }
            }
        }
    }
}

/// The reason and message of a refusal (also used for its Warning Event).
pub fn refusal_reason(refusal: &Refusal) -> (&'static str, String) {
    match refusal {
        Refusal::ForeignObject(o) => (
            "ForeignObject",
            format!(
                "{} {} exists and is not owned by this Cluster: it was left alone and nothing was changed; delete or rename it",
                o.kind, o.name
            ),
        ),
        Refusal::MemberRbacInsufficient {
            kind,
            name,
            missing,
        } => (
            "MemberRbacInsufficient",
            format!(
                "{kind} {name} was not created by the operator and is used as it is, but it lacks {missing}, which members need; add it, or delete the {kind} so that the operator creates its own (nothing was changed)"
            ),
        ),
        Refusal::VersionChangeRefused {
            running,
            spec,
            reason,
        } => (
            "VersionChangeRefused",
            format!(
                "spec.version: {spec:?} is refused: {reason} (the cluster runs {running}); nothing was changed"
            ),
        ),
        Refusal::SpecChangeUnsupported { field, detail } => (
            "SpecChangeUnsupported",
            format!(
                "{field}: a StatefulSet cannot change its volumeClaimTemplates, so this change is not supported on a running rack ({detail}); put the spec back (nothing was changed)"
            ),
        ),
        Refusal::DatacenterChanged { running, spec } => (
            "DatacenterChanged",
            format!(
                "spec.datacenter.name: the cluster runs datacenter {running:?} and the spec names {spec:?}; Cassandra cannot rename a datacenter (nothing was changed)"
            ),
        ),
        Refusal::TooFewRacksForTokenAllocation {
            rack,
            racks,
            factor,
        } => (
            "TooFewRacksForTokenAllocation",
            format!(
                "spec.datacenter.racks: a new member of rack {rack} would join a datacenter of {racks} racks, and Cassandra's token allocator (allocate_tokens_for_local_replication_factor: {factor}) refuses a node in a datacenter of more than one rack but fewer racks than that factor, so it would never join; use 1 or at least {factor} racks, or set allocate_tokens_for_local_replication_factor to at most {racks} in every rack's overrides (nothing was changed)"
            ),
        ),
        Refusal::RackRemovedWithMembers { rack, members } => (
            "RackRemovedWithMembers",
            format!(
                "spec.datacenter.racks: rack {rack} was removed while it still runs {members} member(s); scale it to 0 members first (nothing was changed)"
            ),
        ),
        Refusal::DecommissionRefused {
            rack,
            member,
            reason,
        } => (
            "DecommissionRefused",
            format!(
                "Cassandra refused to decommission member {member} of rack {rack}: {reason}; nothing was removed (raise the rack's members back to cancel)"
            ),
        ),
        Refusal::DecommissionedBelowTheTop { rack, member } => (
            "DecommissionedBelowTheTop",
            format!(
                "member {member} of rack {rack} left the ring but is not the rack's highest member: a StatefulSet removes only its highest; nothing was removed"
            ),
        ),
        Refusal::StaleDecommissionRecord {
            rack,
            member,
            missing,
        } => (
            "StaleDecommissionRecord",
            format!(
                "the member Service of member {member} of rack {rack} says {}=\"true\", but that is no confirmed decommission: {missing}; the member is not in the ring either, so the label is left for you to look at (did it leave by hand?); nothing was deleted, and no topology change or roll starts meanwhile (replacements do)",
                crds::contract::DECOMMISSIONED
            ),
        ),
        Refusal::LeavingMemberLost {
            rack,
            member,
            host_id,
            detail,
        } => (
            "LeavingMemberLost",
            format!(
                "member {member} of rack {rack} lost its Node and local disk while it was asked to leave: its decommission cannot finish, and its data is on the other replicas ({detail}). Remove it from the ring from another member: `kubectl exec <another member's Pod> -- nodetool removenode {}`; the operator then finishes the scale-down. Nothing was deleted; no topology change or roll starts meanwhile (replacements of other members do)",
                host_id
                    .as_deref()
                    .unwrap_or("<its host ID, from nodetool status>")
            ),
        ),
        Refusal::UnreadableDecommission {
            rack,
            member,
            value,
        } => (
            "UnreadableDecommission",
            format!(
                "the member Service of member {member} of rack {rack} has {}={value:?}, neither \"false\" nor \"true\"; nothing was done",
                crds::contract::DECOMMISSIONED
            ),
        ),
        Refusal::MemberRestartStuck {
            rack,
            member,
            since,
        } => (
            "MemberRestartStuck",
            format!(
                "the roll stopped: member {member} of rack {rack}, restarted at {since}, is not back (Ready on the new template and seen up by every member); the other members are left alone until it is (look at its Pod), or change the spec back"
            ),
        ),
        Refusal::CertificateAuthorityUnavailable { detail } => (
            "CertificateAuthorityUnavailable",
            format!(
                "the cluster's certificate authority cannot be made or published: {detail}; no member starts and nothing changes until it can (members already running keep running)"
            ),
        ),
        Refusal::SuperuserSecretUnusable { detail } => (
            "SuperuserSecretUnusable",
            format!(
                "the superuser Secret cannot be used: {detail}; nothing changes until it can (members already running keep running)"
            ),
        ),
        Refusal::OverridesRefused { rack, overrides } => (
            "OverridesRefused",
            format!(
                "rack {rack}: {}; no member starts with it and nothing was changed (members already running keep running): remove the key",
                overrides_message(overrides)
            ),
        ),
    }
}

/// Names each refused key, the ConfigMap and why, as the sidecar does.
pub fn overrides_message(overrides: &RefusedOverrides) -> String {
    overrides
        .keys
        .iter()
        .map(|r| {
            format!(
                "ConfigMap {:?}: key {} sets {}, which the operator refuses: {}",
                overrides.config_map, overrides.file, r.key, r.reason
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What is degraded when a member's sidecar does not start the database
/// because its Node lacks what it needs (its record on the member Service,
/// which names what is short and the fix): the first such member.
fn start_refused_message(observed: &Observed) -> Option<String> {
    observed.racks.iter().find_map(|(rack, r)| {
        r.members.iter().find_map(|(ordinal, m)| {
            let reason = m.service.as_ref()?.start_refused.as_ref()?;
            Some(format!(
                "member {ordinal} of rack {rack} does not start: {reason}"
            ))
        })
    })
}

/// What is degraded when a member's Node is cordoned while data moves:
/// the PodDisruptionBudget holds its eviction, but GKE's node upgrades and
/// auto-repair drain anyway after about one hour, and a second member down
/// while a member streams leaves ranges short of a quorum and can fail the
/// stream. `None` when no such drain is under way.
fn drained_message(observed: &Observed) -> Option<String> {
    let (moving, drained) = observed.drained_while_data_moves()?;
    let drained = drained
        .iter()
        .map(|d| format!("{} (member {} of rack {})", d.node, d.member, d.rack))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "Node(s) {drained} cordoned while member {} of rack {} {}: the PodDisruptionBudget holds \
         their eviction, but GKE node upgrades and auto-repair drain anyway after about one hour, \
         and a second member down while data moves leaves ranges short of a quorum and can fail \
         the stream; hold the node pool's upgrade (a maintenance exclusion) until it finishes",
        moving.member,
        moving.rack,
        moving.movement.doing()
    ))
}

/// Computes the status. Conditions keep their `lastTransitionTime` when their
/// status did not change, so that an unchanged cluster gets an identical
/// status (and the reconcile writes nothing).
pub fn compute_status(
    cluster: &Cluster,
    observed: &Observed,
    outcome: &Outcome,
    now: &Time,
) -> ClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let mut racks = BTreeMap::new();
    for (name, rack) in &observed.racks {
        let refused_overrides = observed.refused_overrides.get(name);
        // A rack refused before its StatefulSet exists still shows why.
        let Some(replicas) = rack.replicas.or(refused_overrides.map(|_| 0)) else {
            continue;
        };
        let ready = (0..replicas)
            .filter(|o| rack.members.get(o).is_some_and(|m| m.pod_ready))
            .count() as i32;
        let flag =
            |pred: &dyn Fn(&crate::decide::MemberObserved) -> bool| rack.members.values().any(pred);
        let previous_rack = previous.racks.get(name);
        let mut conditions = Vec::new();
        let start_refused = rack.members.iter().find_map(|(ordinal, m)| {
            let reason = m.service.as_ref()?.start_refused.as_ref()?;
            Some(format!("member {ordinal}: {reason}"))
        });
        let refused = rack.members.iter().find_map(|(ordinal, m)| {
            let s = m.service.as_ref()?;
            let reason = s.decommission_refused.as_ref()?;
            (s.decommissioned.is_some()).then(|| format!("member {ordinal}: {reason}"))
        });
        for (kind, present, message) in [
            (
                RACK_CONDITION_MEMBER_LEAVING,
                flag(&|m| {
                    m.service
                        .as_ref()
                        .is_some_and(|s| s.decommissioned.is_some())
                }),
                None,
            ),
            (
                RACK_CONDITION_MEMBER_REPLACING,
                flag(&|m| m.service.as_ref().is_some_and(|s| s.replace.is_some())),
                None,
            ),
            (
                RACK_CONDITION_DECOMMISSION_REFUSED,
                refused.is_some(),
                refused.clone(),
            ),
            (
                RACK_CONDITION_OVERRIDES_REFUSED,
                refused_overrides.is_some(),
                refused_overrides.map(overrides_message),
            ),
            (
                RACK_CONDITION_START_REFUSED,
                start_refused.is_some(),
                start_refused.clone(),
            ),
        ] {
            if !present {
                continue;
            }
            let since = previous_rack
                .and_then(|r| {
                    r.conditions
                        .iter()
                        .find(|c| c.type_ == kind && c.status == ConditionStatus::True)
                })
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            conditions.push(RackCondition {
                type_: kind.to_string(),
                status: ConditionStatus::True,
                reason: None,
                message,
                last_transition_time: Some(since),
            });
        }
        racks.insert(
            name.clone(),
            RackStatus {
                members: replicas,
                ready_members: ready,
                conditions,
            },
        );
    }

    let generation = cluster.metadata.generation;
    let mut conditions = conditions(outcome);
    // What degrades the cluster besides the decision: a member that cannot
    // start on its Node, then a drain while data moves (the first only,
    // when the decision found nothing worse).
    let figures = maintenance::figures(&cluster.spec, observed);
    let degradation = start_refused_message(observed)
        .map(|m| ("MemberStartRefused", m))
        .or_else(|| drained_message(observed).map(|m| ("NodeDrainedWhileDataMoves", m)))
        .or_else(|| maintenance::degradation(&figures));
    if let Some((reason, message)) = degradation
        && let Some((_, degraded)) = conditions
            .iter_mut()
            .find(|(type_, c)| *type_ == CONDITION_DEGRADED && !c.status)
    {
        *degraded = Cond {
            status: true,
            reason,
            message,
        };
    }
    let conditions = conditions
        .into_iter()
        .map(|(type_, c)| {
            let status = if c.status { "True" } else { "False" }.to_string();
            let since = previous
                .conditions
                .iter()
                .find(|p| p.type_ == type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: type_.to_string(),
                status,
                reason: c.reason.to_string(),
                message: c.message,
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect();

    // A generation is observed once what it asks for is done: every member
    // Ready on its rack's template, the racks at their members.
    let observed_generation = match outcome {
        Outcome::Decided(
            Action::Converged
            | Action::RequestMaintenance { .. }
            | Action::FinishMaintenance { .. },
        ) => generation,
        _ => previous.observed_generation,
    };
    ClusterStatus {
        members: racks.values().map(|r| r.members).sum(),
        ready_members: racks.values().map(|r| r.ready_members).sum(),
        racks,
        conditions,
        observed_generation,
        maintenance: maintenance_status(cluster, &figures),
    }
}

/// `status.maintenance`: what runs, whether the sstables are upgraded,
/// how far the repairs are; `None` when there is nothing to say (scylla
/// mode, or no member recorded anything yet and repairs are not set).
pub fn maintenance_status(cluster: &Cluster, figures: &Figures) -> Option<MaintenanceStatus> {
    let member = |rack: &str, ordinal: i32| crate::apply::member_name(cluster, rack, ordinal);
    let running = |operation: Operation| {
        figures
            .running
            .iter()
            .find(|r| r.operation == operation)
            .map(|r| RunningMaintenance {
                member: member(&r.rack, r.member),
                keyspace: r.keyspace.clone(),
                started_at: Some(r.started_at.clone()),
            })
    };
    let repair = figures.repair.as_ref().map(|repair| RepairStatus {
        cycle: repair.cycle.map(maintenance::rfc3339),
        repaired_percent: (repair.repaired * 100.0).floor().clamp(0.0, 100.0) as i32,
        member: figures
            .running
            .iter()
            .find(|r| r.operation == Operation::Repair)
            .map(|r| member(&r.rack, r.member)),
        keyspaces: repair
            .keyspaces
            .iter()
            .map(|(name, last)| KeyspaceRepair {
                name: name.clone(),
                last_full_repair: last.map(maintenance::rfc3339),
            })
            .collect(),
    });
    let status = MaintenanceStatus {
        cleanup: running(Operation::Cleanup),
        upgradesstables: running(Operation::Upgradesstables),
        sstables_upgraded: figures.sstables_upgraded,
        repair,
    };
    (status != MaintenanceStatus::default()).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{MemberObserved, RackObserved, ServiceObserved};

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn cluster() -> Cluster {
        let mut cluster: Cluster = serde_norway::from_str(
            "metadata: {name: c, namespace: db}\nspec: {version: 4.1.8, datacenter: {name: dc, racks: [{name: a, members: 2}]}}",
        )
        .unwrap();
        cluster.metadata.generation = Some(3);
        cluster
    }

    fn observed(ready: &[bool], leaving: bool) -> Observed {
        let mut rack = RackObserved {
            replicas: Some(ready.len() as i32),
            ..RackObserved::default()
        };
        for (i, r) in ready.iter().enumerate() {
            rack.members.insert(
                i as i32,
                MemberObserved {
                    service: Some(ServiceObserved {
                        decommissioned: (leaving && i + 1 == ready.len()).then(|| "false".into()),
                        ..ServiceObserved::default()
                    }),
                    pod_exists: true,
                    pod_ready: *r,
                    ..MemberObserved::default()
                },
            );
        }
        Observed {
            racks: BTreeMap::from([("a".to_string(), rack)]),
            ..Observed::default()
        }
    }

    /// The Service record of member 1 of rack a, to write a sidecar's
    /// record into.
    fn service_of_a1(o: &mut Observed) -> &mut ServiceObserved {
        o.racks
            .get_mut("a")
            .and_then(|r| r.members.get_mut(&1))
            .and_then(|m| m.service.as_mut())
            .expect("member 1 of rack a has a Service")
    }

    fn cond<'a>(status: &'a ClusterStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn converged_cluster_is_ready() {
        let status = compute_status(
            &cluster(),
            &observed(&[true, true], false),
            &Outcome::Decided(Action::Converged),
            &time(10),
        );
        assert_eq!((status.members, status.ready_members), (2, 2));
        assert_eq!(
            status.racks["a"],
            RackStatus {
                members: 2,
                ready_members: 2,
                conditions: vec![]
            }
        );
        assert_eq!(status.observed_generation, Some(3));
        let ready = cond(&status, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "AllMembersReady")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(cond(&status, "Progressing").status, "False");
        assert_eq!(cond(&status, "Degraded").status, "False");
    }

    #[test]
    fn a_certificate_authority_that_cannot_be_made_is_degraded_and_says_why() {
        let outcome = Outcome::Decided(Action::Refuse(Refusal::CertificateAuthorityUnavailable {
            detail: "creating its Secret cassandra-operator/cassandra-ca-u failed: forbidden"
                .into(),
        }));
        let status = compute_status(
            &cluster(),
            &observed(&[true, true], false),
            &outcome,
            &time(10),
        );
        let d = cond(&status, "Degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "CertificateAuthorityUnavailable")
        );
        assert_eq!(
            d.message,
            "the cluster's certificate authority cannot be made or published: creating its Secret cassandra-operator/cassandra-ca-u failed: forbidden; no member starts and nothing changes until it can (members already running keep running)"
        );
        assert_eq!(cond(&status, "Ready").status, "False");
    }

    #[test]
    fn an_unusable_superuser_secret_is_degraded_and_a_held_decommission_says_why() {
        let outcome = Outcome::Decided(Action::Refuse(Refusal::SuperuserSecretUnusable {
            detail: "Secret db/c-superuser has no password".into(),
        }));
        let status = compute_status(
            &cluster(),
            &observed(&[true, true], false),
            &outcome,
            &time(10),
        );
        let d = cond(&status, "Degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str(), d.message.as_str()),
            (
                "True",
                "SuperuserSecretUnusable",
                "the superuser Secret cannot be used: Secret db/c-superuser has no password; nothing changes until it can (members already running keep running)"
            )
        );
        let outcome = Outcome::Decided(Action::Wait(
            WaitReason::AuthReplicationBeforeDecommission {
                rack: "a".into(),
                member: 1,
                detail: "logging in to 10.0.0.1:9042 as c-superuser: refused".into(),
            },
        ));
        let status = compute_status(
            &cluster(),
            &observed(&[true, true], false),
            &outcome,
            &time(10),
        );
        let p = cond(&status, "Progressing");
        assert_eq!(
            (p.status.as_str(), p.reason.as_str(), p.message.as_str()),
            (
                "True",
                "AuthReplicationBeforeDecommission",
                "member 1 of rack a leaves once system_auth, system_distributed and system_traces have no more replicas than members remain: logging in to 10.0.0.1:9042 as c-superuser: refused"
            )
        );
    }

    #[test]
    fn waiting_on_a_member_is_progressing_with_its_name() {
        let outcome = Outcome::Decided(Action::Wait(WaitReason::MemberNotReady {
            rack: "a".into(),
            member: 1,
        }));
        let status = compute_status(
            &cluster(),
            &observed(&[true, false], false),
            &outcome,
            &time(10),
        );
        assert_eq!(status.ready_members, 1);
        let p = cond(&status, "Progressing");
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("True", "MemberNotReady")
        );
        assert_eq!(p.message, "waiting for member 1 of rack a to be ready");
    }

    #[test]
    fn invalid_spec_is_degraded_and_names_the_field() {
        let errors = ValidationErrors(vec![crds::FieldError {
            field: "spec.datacenter.racks[0].members".into(),
            message: "must be 0 or more (is -1)".into(),
        }]);
        let status = compute_status(
            &cluster(),
            &observed(&[true], false),
            &Outcome::Invalid(errors),
            &time(10),
        );
        let d = cond(&status, "Degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "InvalidSpec")
        );
        assert!(
            d.message
                .contains("spec.datacenter.racks[0].members: must be 0 or more (is -1)"),
            "{}",
            d.message
        );
    }

    #[test]
    fn leaving_member_sets_the_rack_condition() {
        let outcome = Outcome::Decided(Action::Wait(WaitReason::MemberLeaving {
            rack: "a".into(),
            member: 1,
        }));
        let status = compute_status(
            &cluster(),
            &observed(&[true, true], true),
            &outcome,
            &time(10),
        );
        let rack = &status.racks["a"];
        assert_eq!(rack.conditions.len(), 1);
        assert_eq!(rack.conditions[0].type_, "MemberLeaving");
        assert_eq!(rack.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let mut c = cluster();
        let outcome = Outcome::Decided(Action::Converged);
        let first = compute_status(&c, &observed(&[true, true], false), &outcome, &time(10));
        c.status = Some(first.clone());
        let again = compute_status(&c, &observed(&[true, true], false), &outcome, &time(99));
        assert_eq!(first, again, "a resync must compute the identical status");

        let changed = compute_status(
            &c,
            &observed(&[true, false], false),
            &Outcome::Decided(Action::Wait(WaitReason::MemberNotReady {
                rack: "a".into(),
                member: 1,
            })),
            &time(99),
        );
        assert_eq!(cond(&changed, "Ready").last_transition_time, time(99));
        // Degraded stayed False: its time is kept
        assert_eq!(cond(&changed, "Degraded").last_transition_time, time(10));
    }

    #[test]
    fn a_refused_decommission_is_a_rack_condition_and_degrades_the_cluster() {
        let mut seen = observed(&[true, true], true);
        service_of_a1(&mut seen).decommission_refused =
            Some("Not enough live nodes to maintain replication factor".into());
        let outcome = Outcome::Decided(Action::Refuse(Refusal::DecommissionRefused {
            rack: "a".into(),
            member: 1,
            reason: "Not enough live nodes to maintain replication factor".into(),
        }));
        let status = compute_status(&cluster(), &seen, &outcome, &time(10));
        let kinds: Vec<(&str, Option<&str>)> = status.racks["a"]
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.message.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("MemberLeaving", None),
                (
                    "DecommissionRefused",
                    Some("member 1: Not enough live nodes to maintain replication factor")
                ),
            ]
        );
        let d = cond(&status, "Degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "DecommissionRefused")
        );
        assert!(d.message.contains("Not enough live nodes"), "{}", d.message);
    }

    #[test]
    fn progressing_names_the_operation_and_the_member() {
        for (action, reason, message) in [
            (
                Action::RequestDecommission {
                    rack: "a".into(),
                    member: 1,
                    resource_version: "7".into(),
                    pod_uid: None,
                    host_id: None,
                },
                "MemberLeaving",
                "asking member 1 of rack a to decommission",
            ),
            (
                Action::StartReplace {
                    rack: "a".into(),
                    member: 0,
                    address: "10.96.0.1".into(),
                    resource_version: "1".into(),
                },
                "MemberReplacing",
                "member 0 of rack a lost its disk: recording its replace",
            ),
        ] {
            let status = compute_status(
                &cluster(),
                &observed(&[true, true], false),
                &Outcome::Decided(action),
                &time(10),
            );
            let p = cond(&status, "Progressing");
            assert_eq!(
                (p.status.as_str(), p.reason.as_str(), p.message.as_str()),
                ("True", reason, message)
            );
        }
    }

    /// A cordoned Node of a member while another leaves degrades the
    /// cluster, naming the Node and the movement; once the Node is
    /// schedulable again, or the movement ends, it no longer does.
    #[test]
    fn a_drain_while_data_moves_degrades_the_cluster() {
        let mut o = observed(&[true, false], true);
        for (i, m) in o.racks.get_mut("a").unwrap().members.iter_mut() {
            m.pod_node = Some(format!("node-{i}"));
        }
        o.unschedulable_nodes.insert("node-0".into());
        let wait = Outcome::Decided(Action::Wait(WaitReason::MemberLeaving {
            rack: "a".into(),
            member: 1,
        }));
        let status = compute_status(&cluster(), &o, &wait, &time(10));
        let degraded = cond(&status, CONDITION_DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "NodeDrainedWhileDataMoves")
        );
        assert!(
            degraded
                .message
                .starts_with("Node(s) node-0 (member 0 of rack a) cordoned while member 1 of rack a is decommissioning"),
            "{}",
            degraded.message
        );

        o.unschedulable_nodes.clear();
        let status = compute_status(&cluster(), &o, &wait, &time(20));
        assert_eq!(cond(&status, CONDITION_DEGRADED).status, "False");
    }

    /// A member whose sidecar refuses to start the database on its Node
    /// gives its rack a `StartRefused` condition and degrades the cluster
    /// (whose Warning Event report publishes), both quoting the sidecar.
    #[test]
    fn a_refused_start_is_a_rack_condition_and_degrades_the_cluster() {
        let mut o = observed(&[true, false], false);
        let why = "free AIO events 0 < 2054 needed (2 shards): raise fs.aio-max-nr";
        service_of_a1(&mut o).start_refused = Some(why.into());
        let wait = Outcome::Decided(Action::Wait(WaitReason::MemberNotReady {
            rack: "a".into(),
            member: 1,
        }));
        let status = compute_status(&cluster(), &o, &wait, &time(10));
        let rack = &status.racks["a"];
        let condition = rack
            .conditions
            .iter()
            .find(|c| c.type_ == RACK_CONDITION_START_REFUSED)
            .expect("the rack condition");
        assert_eq!(
            condition.message.as_deref(),
            Some(format!("member 1: {why}").as_str())
        );
        let degraded = cond(&status, CONDITION_DEGRADED);
        assert_eq!(
            (
                degraded.status.as_str(),
                degraded.reason.as_str(),
                degraded.message.as_str()
            ),
            (
                "True",
                "MemberStartRefused",
                format!("member 1 of rack a does not start: {why}").as_str()
            )
        );
    }
}
