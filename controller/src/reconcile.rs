//! One reconcile of one Cluster, as its pipeline: read → observe → decide → apply → authority → recheck → act → report.
//!
//! Each step sits in its own module: `context` (the read), `validated` and
//! `resources` (pure), `observe` (pure, but for a read of the supporting
//! objects' names), `decide` (pure), `apply` (the supporting objects),
//! `authority` (a TLS cluster's certificate authority, before any member
//! runs), `recheck` (fresh reads before a write that destroys or
//! shrinks), `act` (the one write the decision asks for), `status` (pure)
//! and `report` (the status patch, Events and metrics). A cluster with
//! nothing to do costs zero writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use tracing::info;

use crate::act::{Acted, Conflict, act};
use crate::apply::apply_supporting_objects;
use crate::authentication::ensure_authentication;
use crate::authority::ensure_authority;
use crate::context::Context;
use crate::decide::{Action, Refusal, after_member_service_created, decide};
use crate::encryption::templates_encryption;
use crate::error::Error;
use crate::observe::{observe_cached, observe_supporting, outdated_statefulsets};
use crate::observed::Observed;
use crate::recheck::{Recheck, recheck};
use crate::report::report;
use crate::resources::{self, BuildContext};
use crate::status::{Outcome, compute_status};
use crate::validated::{ValidCluster, validate};

/// One reconcile of one Cluster.
pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = reconcile_inner(&cluster, &ctx).await;
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(cluster: &Cluster, ctx: &Context) -> Result<Requeue, Error> {
    let name = cluster.name_any();
    let namespace = cluster
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    if !ctx.synced() {
        return Ok(Requeue::requeue(Duration::from_millis(200)));
    }
    if cluster.metadata.deletion_timestamp.is_some() {
        // Its objects carry owner references: the garbage collector removes them.
        return Ok(Requeue::await_change());
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let cached = ctx.cached(cluster, &namespace).await?;
    let mut observed = observe_cached(
        cluster,
        &cached,
        now.as_second(),
        ctx.restart_timeout_seconds,
    );
    // The templates as the builders make them, with the encryption the
    // racks' templates and members call for (a move to TLS goes a step at
    // a time); then which StatefulSets differ from them.
    let valid = validate(cluster).map(|valid| {
        let mut build = ctx.build_context(&valid, &cached.config_maps);
        build.encryption = templates_encryption(&cluster.spec, &observed);
        (valid, build)
    });
    let desired = match &valid {
        Ok((valid, build)) => desired_statefulsets(valid, build),
        Err(_) => BTreeMap::new(),
    };
    outdated_statefulsets(
        &mut observed,
        cluster,
        cached.statefulsets.iter().map(|s| s.as_ref()),
        &desired,
    );
    let outcome = match valid {
        Err(errors) => Outcome::Invalid(errors),
        Ok((valid, build)) => {
            observe_supporting(&mut observed, &valid, &namespace, ctx).await?;
            Outcome::Decided(next_step(&valid, &namespace, &build, &mut observed, ctx).await?)
        }
    };
    let status = compute_status(cluster, &observed, &outcome, &Time(now));
    report(cluster, &namespace, &observed, &outcome, &status, ctx).await?;
    info!(cluster = %name, namespace = %namespace, outcome = ?outcome, "reconciled");
    // A repair cycle that starts before the resync: woken up for it.
    let next_cycle = crate::decide::maintenance::next_cycle_in(&cluster.spec, &observed)
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| Duration::from_secs(s + 1));
    // A superuser or system_auth step still to do: soon again (the
    // default superuser appears about 10 s after a new ring's first
    // member starts, with no event to wake the controller).
    let auth_pending = cluster
        .spec
        .security
        .as_ref()
        .is_some_and(|s| s.authentication_enabled())
        && ctx
            .authentication
            .pending(cluster.metadata.uid.as_deref().unwrap_or_default());
    let next_cycle = if auth_pending {
        Some(next_cycle.map_or(crate::authentication::RETRY, |c| {
            c.min(crate::authentication::RETRY)
        }))
    } else {
        next_cycle
    };
    let resync = |period: Duration| next_cycle.map_or(period, |cycle| cycle.min(period));
    Ok(match outcome {
        // An API error the operator could not outwait (its RBAC, its
        // namespace): soon again, nothing else brings a change.
        Outcome::Decided(Action::Refuse(
            Refusal::CertificateAuthorityUnavailable { .. }
            | Refusal::SuperuserSecretUnusable { .. },
        )) => Requeue::requeue(Duration::from_secs(30)),
        Outcome::Decided(Action::Converged)
        | Outcome::Invalid(_)
        | Outcome::Decided(Action::Refuse(_)) => Requeue::requeue(resync(Duration::from_secs(300))),
        // Watches on Pods, Services and StatefulSets bring the next step; the
        // requeue is a safety net.
        _ => Requeue::requeue(resync(Duration::from_secs(30))),
    })
}

/// Each rack's StatefulSet as the builders make it from the spec.
fn desired_statefulsets(
    cluster: &ValidCluster<'_>,
    build: &BuildContext,
) -> BTreeMap<String, StatefulSet> {
    cluster
        .spec
        .datacenter
        .racks
        .iter()
        .map(|rack| {
            let desired = resources::applied_statefulset(cluster, rack, build);
            (rack.name.clone(), desired)
        })
        .collect()
}

/// decide → apply → recheck → act: what the reconcile did, or what stood
/// in its way. The supporting objects are applied whatever the decision,
/// unless one of their names is in the way (decide refused it). A scale-up's member Service created just now is followed by
/// the scale-up in the same reconcile, not after the Service's watch event
/// and another reconcile.
async fn next_step(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    build: &BuildContext,
    observed: &mut Observed,
    ctx: &Context,
) -> Result<Action, Error> {
    let action = decide(&cluster.spec, observed);
    if observed.supporting_in_the_way.is_some() {
        return Ok(action);
    }
    apply_supporting_objects(cluster, namespace, ctx, observed).await?;
    // Before any member runs: a member of a cluster with TLS starts only
    // with a certificate of its cluster's authority.
    if let Some(refusal) = ensure_authority(cluster, namespace, ctx).await? {
        return Ok(Action::Refuse(refusal));
    }
    // The superuser and system_auth's replication; before a decommission,
    // system_auth no wider than the members that remain.
    if let Some(instead) = ensure_authentication(cluster, namespace, observed, &action, ctx).await?
    {
        return Ok(instead);
    }
    let acted = carry_out(cluster, namespace, &action, build, ctx).await?;
    if let (Acted::ServiceCreated, Action::CreateMemberService { rack, member, .. }) =
        (&acted, &action)
        && let Some(next) = after_member_service_created(&cluster.spec, observed, rack, *member)
    {
        let acted = carry_out(cluster, namespace, &next, build, ctx).await?;
        return Ok(reported(next, acted));
    }
    Ok(reported(action, acted))
}

/// recheck → act: the write of `action`, if the fresh reads agree.
async fn carry_out(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    action: &Action,
    build: &BuildContext,
    ctx: &Context,
) -> Result<Acted, Error> {
    Ok(match recheck(cluster, namespace, action, ctx).await? {
        Recheck::Agrees(rechecked) => act(cluster, namespace, &rechecked, build, ctx).await?,
        Recheck::Wait(reason) => Acted::Conflict(Conflict::Wait(reason)),
        Recheck::Defer => Acted::Done,
    })
}

/// What the status and Events report of a step: the action, or the
/// conflict that stood in its way.
fn reported(action: Action, acted: Acted) -> Action {
    match acted {
        Acted::Done | Acted::ServiceCreated => action,
        Acted::Conflict(conflict) => conflict.into(),
    }
}
