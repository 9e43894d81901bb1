//! Writes what a reconcile concluded: the status (when it changed), Events and metrics.
//!
//! The status is computed (pure, `crate::status`) and patched only when it
//! differs from the Cluster's: a cluster with nothing to do costs zero
//! writes. Events: one for each action carried out (`act` publishes it
//! beside its write), and one for each new refusal or wait people should
//! know about, once per problem and not once per resync.

use crds::v1alpha1::{CONDITION_DEGRADED, Cluster, ClusterStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::apply::statefulset_name;
use crate::context::Context;
use crate::decide::maintenance;
use crate::decide::{Action, Refusal, WaitReason, members_on_old_template};
use crate::error::Error;
use crate::metrics::{ClusterLabels, MaintenanceGauges, MemberOperationLabels, RepairGauges};
use crate::observed::Observed;
use crate::status::{Outcome, refusal_reason};
use crds::contract::maintenance::Operation;

/// Reports a reconcile: its metrics, then, when the status changed, the
/// Warning Event of a new degradation, the Event of a new wait and the
/// status patch.
pub(crate) async fn report(
    cluster: &Cluster,
    namespace: &str,
    observed: &Observed,
    outcome: &Outcome,
    status: &ClusterStatus,
    ctx: &Context,
) -> Result<(), Error> {
    record_metrics(cluster, namespace, observed, status, outcome, ctx);
    let previous = cluster.status.clone().unwrap_or_default();
    if *status != previous {
        warn_on_new_degradation(cluster, namespace, outcome, &previous, status, ctx).await;
        announce_new_wait(cluster, outcome, &previous, status, ctx).await;
        patch_status(cluster, namespace, &previous, status, ctx).await?;
    }
    Ok(())
}

/// Counts a member operation (decommission, replace) that ended.
pub(crate) fn operation_ended(
    ctx: &Context,
    cluster: &Cluster,
    namespace: &str,
    kind: &str,
    succeeded: bool,
) {
    ctx.metrics
        .count_operation(&cluster_labels(cluster, namespace), kind, succeeded);
}

/// A Warning Event when the Degraded condition turns True or changes
/// reason: once per problem, not once per resync.
async fn warn_on_new_degradation(
    cluster: &Cluster,
    namespace: &str,
    outcome: &Outcome,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) {
    let degraded = |s: &ClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_DEGRADED && c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let Some((reason, message)) = degraded(status) else {
        return;
    };
    if degraded(previous).is_some_and(|(r, m)| r == reason && m == message) {
        return;
    }
    if let Outcome::Decided(Action::Refuse(Refusal::DecommissionRefused { .. })) = outcome {
        operation_ended(ctx, cluster, namespace, "decommission", false);
    }
    publish(
        ctx,
        cluster,
        EventType::Warning,
        &reason,
        "Reconcile",
        message,
        None,
    )
    .await;
}

/// An Event when the cluster starts waiting on something people should
/// know about: a scale-up held until a decommission under way finishes.
/// Once per wait (when the Progressing message changes), not per resync.
async fn announce_new_wait(
    cluster: &Cluster,
    outcome: &Outcome,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) {
    let Outcome::Decided(Action::Wait(WaitReason::DecommissionBeforeScaleUp { rack, member })) =
        outcome
    else {
        return;
    };
    let progressing = |s: &ClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == crds::v1alpha1::CONDITION_PROGRESSING)
            .map(|c| c.message.clone())
    };
    if progressing(previous) == progressing(status) {
        return;
    }
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "ScaleUpWaitsForDecommission",
        "ScaleUp",
        format!("Member {member} of rack {rack} is decommissioning already: the decommission finishes first, then the rack is scaled up again"),
        Some(related_statefulset(cluster, rack)),
    )
    .await;
}

/// The object an Event is about besides the Cluster: Events with the same
/// reason are aggregated into one series per (Cluster, related object), so
/// that each rack gets its own `RackCreated` and `RackScaledUp`.
pub(crate) fn related_statefulset(cluster: &Cluster, rack: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".to_string()),
        kind: Some("StatefulSet".to_string()),
        name: Some(statefulset_name(cluster, rack)),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    }
}

/// A member's Pod as the object an Event is about besides the Cluster:
/// Events of one reason about different members are series of their own,
/// each with its note (the recorder aggregates by reason and objects, and
/// keeps the first note of a series).
pub(crate) fn related_member_pod(cluster: &Cluster, rack: &str, member: i32) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(crate::apply::member_name(cluster, rack, member)),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    }
}

/// Publishes an Event about the Cluster (and `related`).
pub(crate) async fn publish(
    ctx: &Context,
    cluster: &Cluster,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: related,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        // An Event is a courtesy: failing to record one must not stop the
        // reconcile.
        warn!(error = %e, reason, "publishing an Event failed");
    }
}

async fn patch_status(
    cluster: &Cluster,
    namespace: &str,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let mut body = serde_json::json!({ "status": status });
    // A merge patch keeps map keys it does not mention: remove racks that are
    // gone explicitly.
    for rack in previous
        .racks
        .keys()
        .filter(|r| !status.racks.contains_key(*r))
    {
        body["status"]["racks"][rack] = serde_json::Value::Null;
    }
    // An empty list of rack conditions is left out of the status, which a
    // merge patch reads as "unchanged": clear the last ones explicitly.
    for (rack, now) in &status.racks {
        let had = previous
            .racks
            .get(rack)
            .is_some_and(|r| !r.conditions.is_empty());
        if had && now.conditions.is_empty() {
            body["status"]["racks"][rack]["conditions"] = serde_json::json!([]);
        }
    }
    // The same for the maintenance fields that ended (a cleanup done, a
    // repair no longer running, repairs turned off).
    if let Ok(previous) = serde_json::to_value(&previous.maintenance)
        && !previous.is_null()
        && let Ok(now) = serde_json::to_value(&status.maintenance)
    {
        body["status"]["maintenance"] = with_removals(&previous, now);
    }
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(&name, &crate::apply::patch_params(), &Patch::Merge(&body))
        .await
        .map_err(|source| Error::PatchStatus { name, source })?;
    Ok(())
}

/// `now` as a merge patch over `previous`: every key of an object in
/// `previous` that `now` lacks is set to null (a merge patch keeps what it
/// does not mention), in nested objects too.
fn with_removals(previous: &serde_json::Value, now: serde_json::Value) -> serde_json::Value {
    match (previous, now) {
        (serde_json::Value::Object(before), serde_json::Value::Object(mut after)) => {
            for (key, value) in before {
                match after.remove(key) {
                    None => {
                        after.insert(key.clone(), serde_json::Value::Null);
                    }
                    Some(kept) => {
                        after.insert(key.clone(), with_removals(value, kept));
                    }
                }
            }
            serde_json::Value::Object(after)
        }
        (_, now) => now,
    }
}

fn record_metrics(
    cluster: &Cluster,
    namespace: &str,
    observed: &Observed,
    status: &ClusterStatus,
    outcome: &Outcome,
    ctx: &Context,
) {
    let labels = cluster_labels(cluster, namespace);
    // Operations in progress: members with a record of intent, started when
    // their rack's condition turned True.
    let mut operations = Vec::new();
    for (rack, observed_rack) in &observed.racks {
        for (member, state) in &observed_rack.members {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            for (kind, present, condition) in [
                (
                    "decommission",
                    service.decommission() == crds::contract::Decommission::Requested,
                    crds::v1alpha1::RACK_CONDITION_MEMBER_LEAVING,
                ),
                (
                    "replace",
                    service.replace.is_some(),
                    crds::v1alpha1::RACK_CONDITION_MEMBER_REPLACING,
                ),
            ] {
                if !present {
                    continue;
                }
                let started = status
                    .racks
                    .get(rack)
                    .and_then(|r| r.conditions.iter().find(|c| c.type_ == condition))
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0.as_second())
                    .unwrap_or_default();
                operations.push((
                    MemberOperationLabels {
                        namespace: labels.namespace.clone(),
                        cluster: labels.cluster.clone(),
                        kind: kind.to_string(),
                        rack: rack.clone(),
                        member: member.to_string(),
                    },
                    started,
                ));
            }
        }
    }
    ctx.metrics.set_member_operations(&labels, operations);
    ctx.metrics
        .set_maintenance(&labels, maintenance_gauges(cluster, observed));
    ctx.metrics
        .members
        .get_or_create(&labels)
        .set(status.members.into());
    ctx.metrics
        .ready_members
        .get_or_create(&labels)
        .set(status.ready_members.into());
    ctx.metrics
        .members_on_old_template
        .get_or_create(&labels)
        .set(i64::try_from(members_on_old_template(observed)).unwrap_or(i64::MAX));
    let operation = match outcome {
        Outcome::Invalid(_) => "InvalidSpec",
        Outcome::Decided(Action::Refuse(refusal)) => refusal_reason(refusal).0,
        Outcome::Decided(action) => operation(action),
    };
    ctx.metrics.set_operation(&labels, operation);
}

/// The maintenance gauges of a cluster: every operation running or not
/// (none in scylla mode), and, with repairs set, the cycle's share, the
/// grace period and each keyspace's last full repair (the Cluster's
/// creation when never, as the RepairOverdue condition counts it).
fn maintenance_gauges(cluster: &Cluster, observed: &Observed) -> MaintenanceGauges {
    let Some(_) = maintenance::settings(&cluster.spec) else {
        return MaintenanceGauges::default();
    };
    let figures = maintenance::figures(&cluster.spec, observed);
    let running = [
        Operation::Cleanup,
        Operation::Upgradesstables,
        Operation::Repair,
    ]
    .into_iter()
    .map(|op| {
        (
            op.as_str().to_string(),
            figures.running.iter().any(|r| r.operation == op),
        )
    })
    .collect();
    let repair = figures.repair.map(|repair| {
        let created = observed.created.unwrap_or_default();
        RepairGauges {
            repaired: repair.repaired,
            gc_grace_seconds: repair.gc_grace_seconds,
            last_full_repair: repair
                .keyspaces
                .into_iter()
                .map(|(name, last)| (name, last.unwrap_or(created)))
                .collect(),
        }
    });
    MaintenanceGauges { running, repair }
}

fn cluster_labels(cluster: &Cluster, namespace: &str) -> ClusterLabels {
    ClusterLabels {
        namespace: namespace.to_string(),
        cluster: cluster.name_any(),
    }
}

/// The `operation` label of an action: its name.
fn operation(action: &Action) -> &'static str {
    match action {
        Action::CreateStatefulSets { .. } => "CreateStatefulSets",
        Action::UpdateStatefulSets { .. } => "UpdateStatefulSets",
        Action::RestartMember { .. } => "RestartMember",
        Action::EvictMember { .. } => "EvictMember",
        Action::FinishRestart { .. } => "FinishRestart",
        Action::CreateMemberService { .. } => "CreateMemberService",
        Action::ScaleUp { .. } => "ScaleUp",
        Action::RequestDecommission { .. } => "RequestDecommission",
        Action::ClearStaleDecommission { .. } => "ClearStaleDecommission",
        Action::WithdrawDecommission { .. } => "WithdrawDecommission",
        Action::ScaleDown { .. } => "ScaleDown",
        Action::DeleteLeftovers { .. } => "DeleteLeftovers",
        Action::StartReplace { .. } => "StartReplace",
        Action::DeleteLostDisk { .. } => "DeleteLostDisk",
        Action::FinishReplace { .. } => "FinishReplace",
        Action::RequestRingRecord { .. } => "RequestRingRecord",
        Action::RecordRemoval { .. } => "RecordRemoval",
        Action::MarkCleanupDue { .. } => "MarkCleanupDue",
        Action::RequestMaintenance { .. } => "RequestMaintenance",
        Action::FinishMaintenance { .. } => "FinishMaintenance",
        Action::WithdrawMaintenance { .. } => "WithdrawMaintenance",
        Action::Wait(_) => "Wait",
        Action::Refuse(_) => "Refuse",
        Action::Converged => "Converged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::Refusal;

    /// A merge patch of the maintenance status removes what ended: a
    /// cleanup no longer running, a repair member, a whole section.
    #[test]
    fn maintenance_fields_that_ended_are_removed_by_the_patch() {
        let previous = serde_json::json!({
            "cleanup": {"member": "c-dc-a-0", "keyspace": "ks", "startedAt": "t"},
            "repair": {"cycle": "t", "repairedPercent": 40, "member": "c-dc-a-1"},
            "sstablesUpgraded": true,
        });
        let now = serde_json::json!({
            "repair": {"cycle": "t", "repairedPercent": 100},
            "sstablesUpgraded": true,
        });
        assert_eq!(
            with_removals(&previous, now),
            serde_json::json!({
                "cleanup": null,
                "repair": {"cycle": "t", "repairedPercent": 100, "member": null},
                "sstablesUpgraded": true,
            })
        );
        assert_eq!(
            with_removals(&previous, serde_json::Value::Null),
            serde_json::Value::Null
        );
    }

    /// The label was the variant's name cut out of its `Debug` text: the
    /// same names, without a formatter in a metric's label.
    #[test]
    fn an_operation_is_labelled_with_its_action_name() {
        let (rack, member) = ("a".to_string(), 3);
        let actions = [
            Action::CreateStatefulSets {
                racks: vec![(rack.clone(), 0)],
            },
            Action::UpdateStatefulSets {
                racks: vec![rack.clone()],
            },
            Action::RestartMember {
                rack: rack.clone(),
                member,
                resource_version: "1".into(),
                generation: Some(7),
            },
            Action::EvictMember {
                rack: rack.clone(),
                member,
            },
            Action::FinishRestart {
                rack: rack.clone(),
                member,
            },
            Action::CreateMemberService {
                rack: rack.clone(),
                member,
                seed: true,
            },
            Action::ScaleUp {
                rack: rack.clone(),
                replicas: 4,
            },
            Action::RequestDecommission {
                rack: rack.clone(),
                member,
                resource_version: "1".into(),
                pod_uid: None,
                host_id: None,
            },
            Action::ClearStaleDecommission {
                rack: rack.clone(),
                member,
                missing: "a request".into(),
                restore_request: false,
                resource_version: "1".into(),
            },
            Action::WithdrawDecommission {
                rack: rack.clone(),
                member,
                resource_version: "1".into(),
            },
            Action::ScaleDown {
                rack: rack.clone(),
                replicas: 3,
            },
            Action::DeleteLeftovers {
                rack: rack.clone(),
                member,
                claims: vec!["data-c-dc-a-3".into()],
            },
            Action::StartReplace {
                rack: rack.clone(),
                member,
                address: "10.0.0.3".into(),
                resource_version: "1".into(),
            },
            Action::DeleteLostDisk {
                rack: rack.clone(),
                member,
                claims: vec![],
            },
            Action::FinishReplace {
                rack: rack.clone(),
                member,
            },
            Action::RequestRingRecord {
                rack: rack.clone(),
                member,
                witness_rack: rack.clone(),
                witness: 0,
            },
            Action::MarkCleanupDue {
                members: vec![(rack.clone(), member, "1".into())],
            },
            Action::RequestMaintenance {
                rack: rack.clone(),
                member,
                operation: crds::contract::maintenance::Operation::Repair,
                cycle: Some("2026-11-22T02:00:00Z".into()),
                resource_version: "1".into(),
            },
            Action::FinishMaintenance {
                rack: rack.clone(),
                member,
                operation: crds::contract::maintenance::Operation::Cleanup,
                request: "r".into(),
                resource_version: "1".into(),
                cycle_completed: false,
            },
            Action::WithdrawMaintenance {
                rack: rack.clone(),
                member,
                operation: crds::contract::maintenance::Operation::Repair,
                resource_version: "1".into(),
                reason: "a roll".into(),
            },
            Action::Wait(WaitReason::MemberNotReady {
                rack: rack.clone(),
                member,
            }),
            Action::Refuse(Refusal::RackRemovedWithMembers {
                rack: rack.clone(),
                members: 3,
            }),
            Action::Converged,
        ];
        for action in &actions {
            let debug = format!("{action:?}");
            let name = debug.split([' ', '(', '{']).next().unwrap_or_default();
            assert_eq!(operation(action), name);
        }
    }
}
