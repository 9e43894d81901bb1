//! Reads afresh from the API server what a destructive write depends on; writes nothing.
//!
//! Before a write that destroys or shrinks (a claim, a member Service, a
//! Pod, fewer replicas), the objects it depends on are read afresh, and the
//! write is made only if they still say what the decision read from the
//! caches, judged by the same predicates (`crate::confirmation::judge` of
//! the member Services' records, a volume pinned to Nodes that are gone).
//! A cache can be behind: across a whole decommission, it could show a
//! confirmation the API server no longer holds. What the write itself
//! finds (a 409 on a resourceVersion it carries, a 422 on a JSON-patch
//! test) is `act`'s to report.
//!
//! The one place that builds a [`Rechecked`]: `act` carries out only what
//! passed here.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Service};
use kube::api::{ListParams, Preconditions};
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::apply::{member_name, statefulset_name};
use crate::cached::CachedVolume;
use crate::confirmation::{Verdict, judge, judge_removed};
use crate::context::Context;
use crate::decide::{Action, WaitReason};
use crate::error::Error;
use crate::observe::{service_observed, volume_hostnames};
use crate::observed::ServiceObserved;
use crds::contract::GossipView;
use crds::v1alpha1::Cluster;

/// What the fresh reads say of a decision.
pub enum Recheck<'a> {
    /// The API server says what the caches said: carry it out.
    Agrees(Rechecked<'a>),
    /// It does not: nothing is written, and the reconcile reports this wait
    /// instead of the decision.
    Wait(WaitReason),
    /// It does not, or what the write would remove is gone already: nothing
    /// is written, the decision is reported as made, and the change that
    /// brings the next reconcile decides again.
    Defer,
}

/// An action the fresh reads agreed with, and what they read that its
/// write must find unchanged.
pub struct Rechecked<'a> {
    action: &'a Action,
    /// [`Action::DeleteLeftovers`]: the member Service whose confirmation
    /// allows the deletions, as read (its uid and resourceVersion): it is
    /// deleted last, and only unchanged.
    service: Option<Preconditions>,
}

impl<'a> Rechecked<'a> {
    /// The action to carry out.
    pub fn action(&self) -> &'a Action {
        self.action
    }

    /// The preconditions of the member Service's deletion
    /// ([`Action::DeleteLeftovers`]).
    pub fn service_preconditions(&self) -> Option<&Preconditions> {
        self.service.as_ref()
    }

    fn agrees(action: &'a Action) -> Recheck<'a> {
        Recheck::Agrees(Rechecked {
            action,
            service: None,
        })
    }
}

/// Reads afresh what `action`'s write depends on, if it destroys or
/// shrinks.
pub(crate) async fn recheck<'a>(
    cluster: &Cluster,
    namespace: &str,
    action: &'a Action,
    ctx: &Context,
) -> Result<Recheck<'a>, Error> {
    match action {
        Action::ScaleDown { rack, replicas } => {
            // Request, answer and ring, read afresh: never inferred.
            if let Err(missing) =
                decommission_confirmed(cluster, namespace, rack, *replicas, ctx).await?
            {
                warn!(cluster = %cluster.name_any(), rack, member = replicas, %missing, "the caches showed a confirmed decommission, the API server does not: not scaling down");
                return Ok(Recheck::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *replicas,
                }));
            }
            Ok(Rechecked::agrees(action))
        }
        Action::DeleteLeftovers { rack, member, .. } => {
            leftovers_deletable(cluster, namespace, rack, *member, ctx)
                .await
                .map(|service| match service {
                    Some(service) => Recheck::Agrees(Rechecked {
                        action,
                        service: Some(service),
                    }),
                    None => Recheck::Defer,
                })
        }
        Action::RecordRemoval {
            rack,
            member,
            claims,
            ..
        } => {
            // Its disk lost (read afresh) and the ring, read afresh, no
            // longer counting it: never inferred.
            let removed = removal_confirmed(cluster, namespace, rack, *member, ctx).await?;
            if let Err(missing) = &removed {
                warn!(cluster = %cluster.name_any(), rack, member, %missing, "the caches showed a member removed from the ring, the API server does not: nothing recorded");
            }
            if removed.is_err() || !disk_lost(namespace, claims, ctx).await? {
                return Ok(Recheck::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *member,
                }));
            }
            Ok(Rechecked::agrees(action))
        }
        Action::DeleteLostDisk {
            rack,
            member,
            claims,
        } => {
            if !disk_lost(namespace, claims, ctx).await? {
                info!(cluster = %cluster.name_any(), rack, member, "no claim of the member is on a lost disk (read afresh): nothing deleted");
                return Ok(Recheck::Defer);
            }
            Ok(Rechecked::agrees(action))
        }
        // Nothing destroyed nor shrunk; a record of intent carries the
        // resourceVersion the decision read, and the API server checks it.
        Action::CreateStatefulSets { .. }
        | Action::UpdateStatefulSets { .. }
        | Action::RestartMember { .. }
        | Action::EvictMember { .. }
        | Action::FinishRestart { .. }
        | Action::CreateMemberService { .. }
        | Action::ScaleUp { .. }
        | Action::RequestDecommission { .. }
        | Action::ClearStaleDecommission { .. }
        | Action::WithdrawDecommission { .. }
        | Action::StartReplace { .. }
        | Action::FinishReplace { .. }
        | Action::RequestRingRecord { .. }
        // Guarded by the resourceVersion the decision read.
        | Action::MarkCleanupDue { .. }
        | Action::RequestMaintenance { .. }
        | Action::FinishMaintenance { .. }
        | Action::WithdrawMaintenance { .. }
        | Action::Wait(_)
        | Action::Refuse(_)
        | Action::Converged => Ok(Rechecked::agrees(action)),
    }
}

/// The preconditions of the member Service of a member whose decommission
/// was confirmed, once the StatefulSet (read afresh) no longer counts it and
/// the Service (read afresh) still confirms it; `None`: nothing is to be
/// deleted now. The Service holds the confirmation that allows the rest.
async fn leftovers_deletable(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<Option<Preconditions>, Error> {
    let replicas = fresh_replicas(cluster, namespace, rack, ctx).await?;
    if replicas.is_none_or(|r| member < r) {
        warn!(cluster = %cluster.name_any(), rack, member, ?replicas, "the StatefulSet still counts the member: nothing deleted");
        return Ok(None);
    }
    // The Service judged is the one whose uid and resourceVersion the
    // deletion carries: one read, no window between the two.
    match decommission_confirmed(cluster, namespace, rack, member, ctx).await? {
        Ok(preconditions) => Ok(Some(preconditions)),
        Err(missing) => {
            warn!(cluster = %cluster.name_any(), rack, member, %missing, "no confirmed decommission (read afresh): nothing deleted");
            Ok(None)
        }
    }
}

/// Whether one of a member's claims is on a lost disk, read afresh: its
/// volume names only Nodes the API server does not have.
async fn disk_lost(namespace: &str, claims: &[String], ctx: &Context) -> Result<bool, Error> {
    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    // What the cache would keep of each volume: its claim and its Nodes.
    let volumes: Api<CachedVolume> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let get_failed = |kind, name: &str| {
        let name = name.to_string();
        move |source| Error::GetObject { kind, name, source }
    };
    let mut lost = false;
    for claim in claims {
        let Some(pvc) = claims_api
            .get_opt(claim)
            .await
            .map_err(get_failed("PersistentVolumeClaim", claim))?
        else {
            continue;
        };
        let Some(volume) = pvc.spec.and_then(|s| s.volume_name) else {
            continue;
        };
        let Some(pv) = volumes
            .get_opt(&volume)
            .await
            .map_err(get_failed("PersistentVolume", &volume))?
        else {
            continue;
        };
        let hostnames = volume_hostnames(&pv);
        // A volume names its Node by `kubernetes.io/hostname`, which is
        // the Node's name on GKE but need not be: a Node found by either is
        // there (observe reads the caches the same way).
        let mut any_node = false;
        for host in &hostnames {
            if any_node {
                break;
            }
            any_node = nodes
                .get_opt(host)
                .await
                .map_err(get_failed("Node", host))?
                .is_some();
            if !any_node {
                let labelled = ListParams::default()
                    .labels(&format!("kubernetes.io/hostname={host}"))
                    .limit(1);
                any_node = !nodes
                    .list_metadata(&labelled)
                    .await
                    .map_err(get_failed("Node", host))?
                    .items
                    .is_empty();
            }
        }
        lost |= !hostnames.is_empty() && !any_node;
    }
    Ok(lost)
}

/// Whether a member's decommission is confirmed, judged on the records read
/// afresh from the API server (the member Service's request and
/// confirmation, every member's record of its ring), as decide judges them
/// on the caches; `Err` says what is missing. A missing Service is no
/// confirmation.
async fn decommission_confirmed(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<Result<Preconditions, String>, Error> {
    let Some((leaving, others)) = fresh_records(cluster, namespace, rack, member, ctx).await?
    else {
        return Ok(Err("member Service not found".into()));
    };
    if leaving.record.decommission() != crds::contract::Decommission::Confirmed {
        return Ok(Err(
            "the member Service does not say decommissioned=true".into()
        ));
    }
    Ok(verdict(judge(&leaving.record.leaving(false), &others)).map(|()| leaving.preconditions))
}

/// Whether a member asked to leave, whose disk was lost, left the ring
/// (removenode), judged on the records read afresh as decide judges them
/// on the caches ([`crate::confirmation::judge_removed`]).
async fn removal_confirmed(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<Result<(), String>, Error> {
    let Some((leaving, others)) = fresh_records(cluster, namespace, rack, member, ctx).await?
    else {
        return Ok(Err("member Service not found".into()));
    };
    if leaving.record.decommission() != crds::contract::Decommission::Requested {
        return Ok(Err(
            "the member Service does not say decommissioned=false".into()
        ));
    }
    Ok(verdict(judge_removed(
        &leaving.record.leaving(false),
        &others,
    )))
}

/// A member Service read afresh: its records, and what a write that
/// depends on them must find unchanged.
struct Fresh {
    record: ServiceObserved,
    preconditions: Preconditions,
}

/// The member Service of `member` and every other member's record of its
/// ring, read afresh (one list of the cluster's Services); `None` when the
/// member Service is gone.
async fn fresh_records(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<Option<(Fresh, Vec<GossipView>)>, Error> {
    let name = member_name(cluster, rack, member);
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}={}", crds::labels::CLUSTER, cluster.name_any());
    let services = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::GetObject {
            kind: "Service",
            name: selector.clone(),
            source,
        })?;
    let Some(service) = services.items.iter().find(|s| s.name_any() == name) else {
        return Ok(None);
    };
    let others = services
        .items
        .iter()
        .filter(|s| s.name_any() != name)
        .filter_map(|s| service_observed(s).gossip)
        .collect();
    let fresh = Fresh {
        record: service_observed(service),
        preconditions: Preconditions {
            uid: service.metadata.uid.clone(),
            resource_version: service.metadata.resource_version.clone(),
        },
    };
    Ok(Some((fresh, others)))
}

fn verdict(judged: Verdict) -> Result<(), String> {
    match judged {
        Verdict::Confirmed => Ok(()),
        Verdict::Pending(why) | Verdict::Stale(why) => Err(why),
        Verdict::Unrecorded => {
            Err("no other member has recorded its ring since the request".into())
        }
    }
}

/// The StatefulSet's replicas, read afresh (`None`: no StatefulSet).
async fn fresh_replicas(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    ctx: &Context,
) -> Result<Option<i32>, Error> {
    let name = statefulset_name(cluster, rack);
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let sts = api
        .get_opt(&name)
        .await
        .map_err(|source| Error::GetObject {
            kind: "StatefulSet",
            name: name.clone(),
            source,
        })?;
    Ok(sts.map(|s| s.spec.and_then(|s| s.replicas).unwrap_or(1)))
}

#[cfg(test)]
#[path = "recheck_tests.rs"]
pub(crate) mod tests;
