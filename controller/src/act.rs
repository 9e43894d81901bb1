//! Writes what a rechecked decision asks for: one write (or a small fixed sequence), and its Event.
//!
//! One scale step, one record of intent, one eviction, one deletion:
//! nothing is decided here. A write that races the sidecar or a stale
//! cache carries a guard the API server checks (the resourceVersion the
//! decision read; a JSON-patch `test` of the replicas; the uid and
//! resourceVersion of the Service a deletion depends on); when the API
//! server refuses it, or a name turns out taken by a foreign object, or
//! the PodDisruptionBudget refuses an eviction, nothing more is written
//! and the conflict is reported ([`Acted::Conflict`]): the next reconcile
//! decides again.

use crds::contract;
use crds::contract::maintenance::{self, Operation};
use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::apply::{apply_statefulset, create_unless_present, member_name, statefulset_name};
use crate::context::Context;
use crate::decide::{Action, Refusal, WaitReason};
use crate::error::{Error, not_found};
use crate::recheck::Rechecked;
use crate::report::{operation_ended, publish, related_member_pod, related_statefulset};
use crate::resources::{self, BuildContext};
use crate::validated::ValidCluster;

/// What the decision read of a leaving member (its Service's records, or
/// its StatefulSet's replicas) changed before the guarded write: the
/// member is still leaving, and the next reconcile reads it again.
fn changed_meanwhile(rack: &str, member: i32) -> Acted {
    Acted::Conflict(Conflict::Wait(WaitReason::MemberLeaving {
        rack: rack.to_string(),
        member,
    }))
}

/// What carrying out a decision did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    /// Carried out as decided (or found done already).
    Done,
    /// A member Service, created just now: a scale-up's first step, whose
    /// next step may follow in the same reconcile.
    ServiceCreated,
    /// The write found the API server other than the caches showed it:
    /// nothing more was written, and this is reported instead of the
    /// decision. A conflict is no decision: the next reconcile decides
    /// again.
    Conflict(Conflict),
}

/// What a write found in its way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A record changed since the decision read it (409 on the
    /// resourceVersion the write carried), the replicas were not what the
    /// scale-down's test said (422), or the PodDisruptionBudget refused an
    /// eviction (429); or, before the write, the fresh reads of `recheck`
    /// disagreed with the caches.
    Wait(WaitReason),
    /// A name the write needed is taken by an object the Cluster does not
    /// own.
    Refused(Refusal),
}

impl From<Conflict> for Action {
    fn from(conflict: Conflict) -> Action {
        match conflict {
            Conflict::Wait(reason) => Action::Wait(reason),
            Conflict::Refused(refusal) => Action::Refuse(refusal),
        }
    }
}

/// Carries out a rechecked decision.
pub(crate) async fn act(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    rechecked: &Rechecked<'_>,
    build: &BuildContext,
    ctx: &Context,
) -> Result<Acted, Error> {
    let action = rechecked.action();
    let find_rack = |rack: &str| {
        cluster
            .spec
            .datacenter
            .racks
            .iter()
            .find(|r| r.name == rack)
    };
    match action {
        Action::CreateStatefulSets { racks } => {
            for (rack, replicas) in racks {
                let Some(rack) = find_rack(rack) else {
                    continue;
                };
                let sts = resources::statefulset_for_rack(cluster, rack, *replicas, build);
                let sts_name = sts.name_any();
                match create_unless_present(
                    &ctx.client,
                    namespace,
                    cluster,
                    &ctx.statefulsets,
                    sts,
                    "StatefulSet",
                )
                .await?
                {
                    Err(refusal) => return Ok(Acted::Conflict(Conflict::Refused(refusal))),
                    Ok(false) => continue,
                    Ok(true) => {}
                }
                let (reason, note) = if *replicas == 0 {
                    (
                        "RackCreated",
                        format!(
                            "Rack {} created: StatefulSet {sts_name} with 0 members",
                            rack.name
                        ),
                    )
                } else {
                    // A StatefulSet deleted with --cascade=orphan: at 0 the
                    // new one would adopt the members' Pods and delete them.
                    (
                        "RackRecreated",
                        format!(
                            "Rack {} re-created: StatefulSet {sts_name} with the {replicas} members that exist",
                            rack.name
                        ),
                    )
                };
                publish(
                    ctx,
                    cluster,
                    EventType::Normal,
                    reason,
                    "CreateStatefulSet",
                    note,
                    Some(related_statefulset(cluster, &rack.name)),
                )
                .await;
            }
        }
        Action::CreateMemberService { rack, member, seed } => {
            if let Some(spec) = find_rack(rack) {
                let service =
                    resources::hashed(resources::member_service(cluster, spec, *member, *seed));
                match create_unless_present(
                    &ctx.client,
                    namespace,
                    cluster,
                    &ctx.services,
                    service,
                    "Service",
                )
                .await?
                {
                    Err(refusal) => return Ok(Acted::Conflict(Conflict::Refused(refusal))),
                    Ok(true) => return Ok(Acted::ServiceCreated),
                    Ok(false) => {}
                }
            }
        }
        Action::ScaleUp { rack, replicas } => {
            if !scale_from(cluster, namespace, rack, *replicas - 1, *replicas, ctx).await? {
                return Ok(Acted::Conflict(Conflict::Wait(
                    WaitReason::StatefulSetNotObserved { rack: rack.clone() },
                )));
            }
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "RackScaledUp",
                "ScaleUp",
                // kube aggregates repeats of an Event into a series that keeps
                // the first note: say what every repeat means.
                format!("Rack {rack} scaled up by one member"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::RequestDecommission {
            rack,
            member,
            resource_version,
            pod_uid,
            host_id,
        } => {
            let service = member_name(cluster, rack, *member);
            let requested_at = k8s_openapi::jiff::Timestamp::now().to_string();
            let request = crds::contract::DecommissionRequest {
                id: format!(
                    "{}/{requested_at}",
                    pod_uid.as_deref().unwrap_or(service.as_str())
                ),
                pod_uid: pod_uid.clone(),
                host_id: host_id.clone(),
                requested_at,
            };
            // The label, the request it means and no earlier answer, in one
            // write: a `true` counts only as the answer to this request.
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "labels": {crds::contract::DECOMMISSIONED: crds::contract::DECOMMISSION_REQUESTED},
                "annotations": {
                    crds::contract::DECOMMISSION_REQUEST: request.to_annotation(),
                    crds::contract::DECOMMISSION_CONFIRMATION: null,
                },
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                return Ok(changed_meanwhile(rack, *member));
            }
            info!(cluster = %cluster.name_any(), rack, member, "decommission requested");
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "MemberDecommissioning",
                "Decommission",
                format!("Member {member} of rack {rack} ({service}) asked to decommission: the rack has more members than its spec"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::ClearStaleDecommission {
            rack,
            member,
            missing,
            restore_request,
            resource_version,
        } => {
            let service = member_name(cluster, rack, *member);
            let label = if *restore_request {
                serde_json::json!(crds::contract::DECOMMISSION_REQUESTED)
            } else {
                serde_json::Value::Null
            };
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "labels": {crds::contract::DECOMMISSIONED: label},
                "annotations": {crds::contract::DECOMMISSION_CONFIRMATION: null},
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                return Ok(changed_meanwhile(rack, *member));
            }
            let taken_back = if *restore_request {
                "the controller's standing request (decommissioned=false) was put back"
            } else {
                "the label was removed"
            };
            warn!(cluster = %cluster.name_any(), rack, member, %missing, "a decommissioned=true that is no confirmed decommission was taken back");
            publish(
                ctx,
                cluster,
                EventType::Warning,
                "StaleDecommissionRecord",
                "Decommission",
                format!("Member {member} of rack {rack} ({service}) carried {}=\"true\", but it is no confirmed decommission: {missing}. The member is in the ring: {taken_back}, and nothing was deleted", crds::contract::DECOMMISSIONED),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::WithdrawDecommission {
            rack,
            member,
            resource_version,
        } => {
            let service = member_name(cluster, rack, *member);
            // If the sidecar claimed the decommission meanwhile, the guard
            // refuses the write and the next reconcile sees its claim.
            if !label_member_service_unchanged(
                ctx,
                namespace,
                &service,
                resource_version,
                crds::contract::DECOMMISSIONED,
                serde_json::Value::Null,
            )
            .await?
            {
                info!(cluster = %cluster.name_any(), rack, member, "decommission request changed meanwhile; looking again");
                return Ok(changed_meanwhile(rack, *member));
            }
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "DecommissionCancelled",
                "Decommission",
                format!("The decommission request of member {member} of rack {rack} ({service}) was withdrawn before it started: the spec wants the member"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::ScaleDown { rack, replicas } => {
            if !scale_from(cluster, namespace, rack, *replicas + 1, *replicas, ctx).await? {
                info!(cluster = %cluster.name_any(), rack, member = replicas, "the StatefulSet's replicas changed meanwhile: looking again");
                return Ok(changed_meanwhile(rack, *replicas));
            }
            operation_ended(ctx, cluster, namespace, "decommission", true);
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "RackScaledDown",
                "ScaleDown",
                format!("Rack {rack} scaled down by one member after a confirmed decommission"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::DeleteLeftovers {
            rack,
            member,
            claims,
        } => {
            let service = rechecked.service_preconditions();
            if !delete_leftovers(cluster, namespace, rack, *member, claims, service, ctx).await? {
                return Ok(changed_meanwhile(rack, *member));
            }
        }
        Action::StartReplace {
            rack,
            member,
            address,
            resource_version,
        } => {
            let service = member_name(cluster, rack, *member);
            if !label_member_service_unchanged(
                ctx,
                namespace,
                &service,
                resource_version,
                crds::contract::REPLACE,
                serde_json::json!(address),
            )
            .await?
            {
                return Ok(Acted::Conflict(Conflict::Wait(
                    WaitReason::MemberReplacing {
                        rack: rack.clone(),
                        member: *member,
                    },
                )));
            }
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "MemberReplacing",
                "Replace",
                format!("Member {member} of rack {rack} ({service}) lost its data: it is replaced, taking over the tokens of {address}"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::DeleteLostDisk {
            rack,
            member,
            claims,
        } => {
            delete_lost_disk(cluster, namespace, rack, *member, claims, ctx).await?;
        }
        Action::RecordRemoval {
            rack,
            member,
            resource_version,
            request,
            host_id,
            ..
        } => {
            let service = member_name(cluster, rack, *member);
            let confirmation = crds::contract::DecommissionConfirmation {
                request: request.clone(),
                host_id: host_id.clone(),
                confirmed_at: k8s_openapi::jiff::Timestamp::now().to_string(),
                removed: Some(true),
            };
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "labels": {crds::contract::DECOMMISSIONED: crds::contract::DECOMMISSION_DONE},
                "annotations": {crds::contract::DECOMMISSION_CONFIRMATION: confirmation.to_annotation()},
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                return Ok(changed_meanwhile(rack, *member));
            }
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "MemberRemovedFromRing",
                "Decommission",
                format!("Member {member} of rack {rack} ({service}) lost its Node and disk while leaving, and the ring no longer counts it (removenode): its removal is recorded, and the scale-down proceeds"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::RequestRingRecord {
            rack,
            member,
            witness_rack,
            witness,
        } => {
            let service = member_name(cluster, witness_rack, *witness);
            let patch = serde_json::json!({"metadata": {"annotations": {
                crds::contract::RING_RECORD_REQUESTED: k8s_openapi::jiff::Timestamp::now().to_string(),
            }}});
            patch_member_service(ctx, namespace, &service, &patch).await?;
            info!(cluster = %cluster.name_any(), rack, member, witness = %service, "asked a member to record its ring: the decommission waits for the ring's word");
        }
        Action::FinishReplace { rack, member } => {
            let service = member_name(cluster, rack, *member);
            let patch =
                serde_json::json!({"metadata": {"labels": {crds::contract::REPLACE: null}}});
            patch_member_service(ctx, namespace, &service, &patch).await?;
            operation_ended(ctx, cluster, namespace, "replace", true);
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "MemberReplaced",
                "Replace",
                format!("Member {member} of rack {rack} ({service}) was replaced and is ready"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::UpdateStatefulSets { racks } => {
            for rack in racks {
                let Some(rack) = find_rack(rack) else {
                    continue;
                };
                let sts = resources::applied_statefulset(cluster, rack, build);
                apply_statefulset(ctx, namespace, &sts).await?;
                info!(cluster = %cluster.name_any(), rack = %rack.name, "StatefulSet applied");
            }
        }
        Action::RestartMember {
            rack,
            member,
            resource_version,
            generation,
        } => {
            let service = member_name(cluster, rack, *member);
            let since = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": {
                    contract::RESTARTING: since,
                    contract::RESTARTED_FROM_GENERATION: generation.map(|g| g.to_string()),
                },
            }});
            match patch_member_service(ctx, namespace, &service, &patch).await {
                Err(Error::PatchMemberService {
                    source: kube::Error::Api(status),
                    ..
                }) if status.code == 409 => {
                    info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                    return Ok(Acted::Conflict(Conflict::Wait(
                        WaitReason::MemberRestarting {
                            rack: rack.clone(),
                            member: *member,
                        },
                    )));
                }
                other => other?,
            }
            return evict_member(cluster, namespace, rack, *member, ctx).await;
        }
        Action::EvictMember { rack, member } => {
            return evict_member(cluster, namespace, rack, *member, ctx).await;
        }
        Action::FinishRestart { rack, member } => {
            let service = member_name(cluster, rack, *member);
            let patch = serde_json::json!({"metadata": {"annotations": {
                contract::RESTARTING: null,
                contract::RESTARTED_FROM_GENERATION: null,
            }}});
            patch_member_service(ctx, namespace, &service, &patch).await?;
            info!(cluster = %cluster.name_any(), rack, member, "member restarted");
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "MemberRestarted",
                "Restart",
                format!("Member {member} of rack {rack} ({service}) is back Ready on the rack's new template"),
                Some(related_statefulset(cluster, rack)),
            )
            .await;
        }
        Action::MarkCleanupDue { members } => {
            let due = k8s_openapi::jiff::Timestamp::now().to_string();
            for (rack, member, resource_version) in members {
                let service = member_name(cluster, rack, *member);
                let patch = serde_json::json!({"metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {maintenance::CLEANUP_DUE: due},
                }});
                if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                    info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                    return Ok(service_changed(rack, *member));
                }
            }
            info!(cluster = %cluster.name_any(), members = members.len(), "members marked for a cleanup before a scale-up");
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "CleanupDue",
                "Cleanup",
                format!(
                    "Member(s) {} will give token ranges away to the new member: each runs a cleanup, one at a time, once the cluster has its members",
                    members
                        .iter()
                        .map(|(rack, member, _)| member_name(cluster, rack, *member))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            )
            .await;
        }
        Action::RequestMaintenance {
            rack,
            member,
            operation,
            cycle,
            resource_version,
        } => {
            let service = member_name(cluster, rack, *member);
            let requested_at = k8s_openapi::jiff::Timestamp::now().to_string();
            let request = maintenance::Request {
                id: format!("{service}/{}/{requested_at}", operation.as_str()),
                operation: *operation,
                requested_at,
                cycle: cycle.clone(),
            };
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": {maintenance::REQUEST: request.to_annotation()},
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                return Ok(service_changed(rack, *member));
            }
            info!(cluster = %cluster.name_any(), rack, member, operation = operation.as_str(), "maintenance requested");
            let (reason, note) = match operation {
                Operation::Cleanup => (
                    "CleanupStarted",
                    format!(
                        "Member {member} of rack {rack} ({service}) asked to clean up the data of the token ranges it gave away"
                    ),
                ),
                Operation::Upgradesstables => (
                    "UpgradeSSTablesStarted",
                    format!(
                        "Member {member} of rack {rack} ({service}) asked to rewrite its sstables of an older format (upgradesstables)"
                    ),
                ),
                Operation::Repair => (
                    "RepairStarted",
                    format!(
                        "Member {member} of rack {rack} ({service}) asked to repair its primary token ranges for the current cycle"
                    ),
                ),
            };
            publish(
                ctx,
                cluster,
                EventType::Normal,
                reason,
                "Maintenance",
                note,
                Some(related_member_pod(cluster, rack, *member)),
            )
            .await;
        }
        Action::FinishMaintenance {
            rack,
            member,
            operation,
            resource_version,
            cycle_completed,
            ..
        } => {
            let service = member_name(cluster, rack, *member);
            let mut annotations = serde_json::json!({maintenance::REQUEST: null});
            if *operation == Operation::Cleanup {
                annotations[maintenance::CLEANUP_DUE] = serde_json::Value::Null;
            }
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": annotations,
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                return Ok(service_changed(rack, *member));
            }
            info!(cluster = %cluster.name_any(), rack, member, operation = operation.as_str(), "maintenance done");
            operation_ended(ctx, cluster, namespace, operation.as_str(), true);
            let (reason, note) = match operation {
                Operation::Cleanup => (
                    "CleanupFinished",
                    format!(
                        "Member {member} of rack {rack} ({service}) cleaned up the data of the token ranges it gave away"
                    ),
                ),
                Operation::Upgradesstables => (
                    "SSTablesUpgraded",
                    format!(
                        "Member {member} of rack {rack} ({service}) rewrote its sstables of an older format"
                    ),
                ),
                Operation::Repair => (
                    "RepairFinished",
                    format!(
                        "Member {member} of rack {rack} ({service}) repaired its primary token ranges for the current cycle"
                    ),
                ),
            };
            publish(
                ctx,
                cluster,
                EventType::Normal,
                reason,
                "Maintenance",
                note,
                Some(related_member_pod(cluster, rack, *member)),
            )
            .await;
            if *cycle_completed {
                publish(
                    ctx,
                    cluster,
                    EventType::Normal,
                    "RepairCycleCompleted",
                    "Repair",
                    "Every member repaired its primary token ranges of the current cycle: every replicated keyspace is fully repaired".to_string(),
                    None,
                )
                .await;
            }
        }
        Action::WithdrawMaintenance {
            rack,
            member,
            operation,
            resource_version,
            reason,
        } => {
            let service = member_name(cluster, rack, *member);
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": {maintenance::REQUEST: null},
            }});
            if !patch_member_service_unchanged(ctx, namespace, &service, &patch).await? {
                info!(cluster = %cluster.name_any(), rack, member, "the member Service changed meanwhile; looking again");
                return Ok(service_changed(rack, *member));
            }
            info!(cluster = %cluster.name_any(), rack, member, operation = operation.as_str(), %reason, "maintenance request withdrawn");
            publish(
                ctx,
                cluster,
                EventType::Normal,
                if *operation == Operation::Repair {
                    "RepairStopped"
                } else {
                    "MaintenanceWithdrawn"
                },
                "Maintenance",
                format!(
                    "The {} request of member {member} of rack {rack} ({service}) was withdrawn: {reason}",
                    operation.as_str()
                ),
                Some(related_member_pod(cluster, rack, *member)),
            )
            .await;
        }
        Action::Wait(_) | Action::Refuse(_) | Action::Converged => {}
    }
    Ok(Acted::Done)
}

/// A member Service changed since the decision read it (409 on the
/// resourceVersion its write carried): nothing more is written, and the
/// next reconcile reads it again.
fn service_changed(rack: &str, member: i32) -> Acted {
    Acted::Conflict(Conflict::Wait(WaitReason::MemberServiceChanged {
        rack: rack.to_string(),
        member,
    }))
}

/// Evicts a member's Pod through the Eviction API, so that the
/// PodDisruptionBudget holds: a refusal (429) is a wait, not an error.
/// Its sidecar drains Cassandra on SIGTERM; the StatefulSet controller
/// makes the Pod anew from the current template.
async fn evict_member(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<Acted, Error> {
    let pod = member_name(cluster, rack, member);
    let api: Api<Pod> = Api::namespaced(ctx.evictions.clone(), namespace);
    match api.evict(&pod, &kube::api::EvictParams::default()).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
        Err(kube::Error::Api(status)) if status.code == 429 => {
            info!(cluster = %cluster.name_any(), rack, member, message = %status.message, "the PodDisruptionBudget refuses the eviction for now");
            return Ok(Acted::Conflict(Conflict::Wait(
                WaitReason::EvictionRefused {
                    rack: rack.to_string(),
                    member,
                },
            )));
        }
        Err(source) => {
            return Err(Error::EvictPod { name: pod, source });
        }
    }
    info!(cluster = %cluster.name_any(), rack, member, "member evicted for a roll");
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "MemberRestarting",
        "Restart",
        format!("Member {member} of rack {rack} ({pod}) evicted: it drains and comes back on the rack's new template"),
        Some(related_statefulset(cluster, rack)),
    )
    .await;
    Ok(Acted::Done)
}

/// A merge patch of a member Service's metadata (a record of intent).
async fn patch_member_service(
    ctx: &Context,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch(name, &crate::apply::patch_params(), &Patch::Merge(patch))
        .await
        .map_err(|source| Error::PatchMemberService {
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// Sets (or, with null, removes) a label on a member Service only if the
/// Service is still at the `resource_version` the decision read: false when
/// it changed meanwhile (409), so that the caller looks again rather than
/// act on a state the sidecar may have moved on from.
async fn label_member_service_unchanged(
    ctx: &Context,
    namespace: &str,
    name: &str,
    resource_version: &str,
    key: &str,
    value: serde_json::Value,
) -> Result<bool, Error> {
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": resource_version,
        "labels": {key: value},
    }});
    patch_member_service_unchanged(ctx, namespace, name, &patch).await
}

/// A merge patch of a member Service's metadata that carries the
/// resourceVersion the decision read: false when the Service changed
/// meanwhile (409).
async fn patch_member_service_unchanged(
    ctx: &Context,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<bool, Error> {
    match patch_member_service(ctx, namespace, name, patch).await {
        Err(Error::PatchMemberService {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 409 => Ok(false),
        other => other.map(|()| true),
    }
}

/// Sets a rack's StatefulSet's replicas from `from` to `to`, only if it
/// still has `from`: a JSON patch whose `test` the API server checks in the
/// same write, so that a stale cache never shrinks it past a member (a
/// scale-down past another, or a scale-up from a count already passed).
/// False when the replicas were something else.
async fn scale_from(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    from: i32,
    to: i32,
    ctx: &Context,
) -> Result<bool, Error> {
    let name = statefulset_name(cluster, rack);
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json_patch::Patch(vec![
        json_patch::PatchOperation::Test(json_patch::TestOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/spec/replicas").expect("a JSON pointer"),
            value: serde_json::json!(from),
        }),
        json_patch::PatchOperation::Replace(json_patch::ReplaceOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/spec/replicas").expect("a JSON pointer"),
            value: serde_json::json!(to),
        }),
    ]);
    match api
        .patch(
            &name,
            &crate::apply::patch_params(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        // The test failed (422), or the object changed meanwhile (409).
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 409 => Ok(false),
        Err(source) => Err(Error::ScaleStatefulSet {
            name,
            replicas: to,
            source,
        }),
    }
}

async fn delete_claim(ctx: &Context, namespace: &str, name: &str) -> Result<(), Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(source) => Err(Error::DeleteObject {
            kind: "PersistentVolumeClaim",
            name: name.to_string(),
            source,
        }),
    }
}

/// Deletes the claims, then the Service, of a member whose decommission
/// was confirmed and that the StatefulSet no longer counts (rechecked).
/// The Service goes last, and only unchanged since the recheck read it
/// (`service`: its uid and resourceVersion): it holds the confirmation
/// that allows the rest. False when it changed since (409 on its
/// preconditions): a conflict, and the next reconcile decides again.
async fn delete_leftovers(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    claims: &[String],
    service: Option<&Preconditions>,
    ctx: &Context,
) -> Result<bool, Error> {
    let service_name = member_name(cluster, rack, member);
    let Some(service) = service else {
        // Only the recheck makes a DeleteLeftovers to act on, and with the
        // Service it read: without it, nothing may be deleted.
        warn!(cluster = %cluster.name_any(), rack, member, "the member Service was not read afresh: nothing deleted");
        return Ok(true);
    };
    for claim in claims {
        delete_claim(ctx, namespace, claim).await?;
    }
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(service.clone()),
        ..DeleteParams::default()
    };
    match api.delete(&service_name, &params).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            info!(cluster = %cluster.name_any(), rack, member, "the member Service changed since it was read: looking again");
            return Ok(false);
        }
        Err(source) => {
            return Err(Error::DeleteObject {
                kind: "Service",
                name: service_name,
                source,
            });
        }
    }
    info!(cluster = %cluster.name_any(), rack, member, ?claims, "decommissioned member's claims and Service deleted");
    let claims_text = if claims.is_empty() {
        String::new()
    } else {
        format!("claim(s) {} and ", claims.join(", "))
    };
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "MemberRemoved",
        "DeleteLeftovers",
        format!("Member {member} of rack {rack} left the ring: its {claims_text}member Service {service_name} were deleted"),
        Some(related_statefulset(cluster, rack)),
    )
    .await;
    Ok(true)
}

/// Deletes a member's claims on a lost disk (rechecked), then its Pod, so
/// that the StatefulSet makes both anew (a new local disk on another Node).
async fn delete_lost_disk(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    claims: &[String],
    ctx: &Context,
) -> Result<(), Error> {
    for claim in claims {
        delete_claim(ctx, namespace, claim).await?;
    }
    let pod = member_name(cluster, rack, member);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match pods.delete(&pod, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
        Err(source) => {
            return Err(Error::DeleteObject {
                kind: "Pod",
                name: pod,
                source,
            });
        }
    }
    info!(cluster = %cluster.name_any(), rack, member, ?claims, "claims on a lost disk and the Pod deleted");
    Ok(())
}

#[cfg(test)]
#[path = "act_tests/mod.rs"]
mod tests;
