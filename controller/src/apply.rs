//! Reads the caches; writes the supporting objects and StatefulSets that are missing or differ.
//!
//! The builders make every object in full from the validated Cluster, each
//! with a hash of itself in an annotation; an object is written only when
//! it is missing (created) or its cached hash differs (server-side apply
//! with the operator's one field manager, forcing its fields). A
//! StatefulSet's replicas are never applied: the one-member-at-a-time
//! steps own them (`act`). An object of one of the Cluster's names that
//! the Cluster does not own is never adopted nor changed, and apply never
//! refuses: observe read the supporting objects' names, decide refused
//! when one is in the way, and apply runs only when none is.

use std::collections::BTreeSet;

use crds::contract;
use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use crate::context::Context;
use crate::decide::Refusal;
use crate::error::Error;
use crate::index::NameIndex;
use crate::observe::owned_by;
use crate::observed::{ForeignObject, Observed};
use crate::report::{publish, related_member_pod};
use crate::resources;
use crate::validated::ValidCluster;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "cassandra-operator";

/// The parameters of a merge or JSON patch: by the operator's one field
/// manager, so that `managedFields` names who wrote what.
pub(crate) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Server-side applies `desired` (built with its applied hash) as the
/// operator's, unless the object the cache holds carries the same hash
/// (`cached`): the one write every built object shares. True when it
/// wrote.
pub(crate) async fn apply_when_changed<K>(
    api: &Api<K>,
    cached: Option<&str>,
    desired: &K,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if cached == resources::applied_hash(desired) {
        return Ok(false);
    }
    api.patch(
        &desired.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired),
    )
    .await?;
    Ok(true)
}

/// Creates `desired` as the operator's. False when the name was taken
/// meanwhile (409).
pub(crate) async fn create_as_ours<K>(api: &Api<K>, desired: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api.create(&params, desired).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The name of a rack's StatefulSet.
pub(crate) fn statefulset_name(cluster: &Cluster, rack: &str) -> String {
    crds::names::statefulset_name(&cluster.name_any(), &cluster.spec.datacenter.name, rack)
}

/// The name of a member's Pod and of its member Service.
pub(crate) fn member_name(cluster: &Cluster, rack: &str, member: i32) -> String {
    crds::names::member_name(&statefulset_name(cluster, rack), member)
}

/// Applies the cluster-wide objects (client Service, members' RBAC, PDB)
/// and the member Services that exist: each is built in full and written
/// only when the cache shows it missing (created) or different (its applied
/// hash differs: server-side apply). The supporting objects observe found
/// held by objects the Cluster does not own (`supporting_unowned`: the
/// members' RBAC a user made, as Rook's example does) are left alone. The
/// PodDisruptionBudget holds every eviction while data moves
/// ([`Observed::data_moving`]), and an Event says when the hold starts and
/// ends.
pub(crate) async fn apply_supporting_objects(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    ctx: &Context,
    observed: &Observed,
) -> Result<(), Error> {
    let target = Target {
        client: &ctx.client,
        namespace,
        cluster,
        unowned: &observed.supporting_unowned,
    };
    target
        .apply(&ctx.services, resources::client_service(cluster), "Service")
        .await?;
    target
        .apply(
            &ctx.service_accounts,
            resources::member_service_account(cluster),
            "ServiceAccount",
        )
        .await?;
    target
        .apply(&ctx.roles, resources::member_role(cluster), "Role")
        .await?;
    target
        .apply(
            &ctx.role_bindings,
            resources::member_role_binding(cluster),
            "RoleBinding",
        )
        .await?;
    let moving = observed.data_moving();
    let budget = resources::pod_disruption_budget(cluster, moving.is_some());
    let held_before = ctx
        .pdbs
        .get(&ObjectRef::new(&budget.name_any()).within(namespace))
        .filter(|cached| owned_by(cached.meta(), cluster))
        .map(|cached| {
            cached.spec.as_ref().and_then(|s| s.max_unavailable.clone())
                == Some(IntOrString::Int(0))
        });
    target
        .apply(&ctx.pdbs, budget, "PodDisruptionBudget")
        .await?;
    match (held_before, &moving) {
        (Some(false), Some(moving)) => {
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "DisruptionsHeld",
                "HoldDisruptions",
                format!(
                    "Member {} of rack {} {}: the PodDisruptionBudget allows no eviction until it finishes. \
                     Node drains wait (GKE node upgrades and auto-repair wait about one hour, then drain anyway)",
                    moving.member,
                    moving.rack,
                    moving.movement.doing()
                ),
                Some(related_member_pod(cluster, &moving.rack, moving.member)),
            )
            .await;
        }
        (Some(true), None) => {
            publish(
                ctx,
                cluster,
                EventType::Normal,
                "DisruptionsAllowed",
                "HoldDisruptions",
                "No data moves between members any more: the PodDisruptionBudget allows one member down again".to_string(),
                None,
            )
            .await;
        }
        _ => {}
    }
    // The member Services that exist: kept as built (an operator upgrade
    // that changes their ports or labels reaches running members). Never
    // created here: a member Service is created as the first step of a
    // scale-up, and deleted only after its member left the ring.
    for rack in &cluster.spec.datacenter.racks {
        let statefulset = statefulset_name(cluster, &rack.name);
        for ordinal in cached_member_ordinals(&ctx.names.services, namespace, &statefulset) {
            let desired =
                resources::member_service(cluster, rack, ordinal, contract::is_seed(ordinal));
            target.apply(&ctx.services, desired, "Service").await?;
        }
    }
    Ok(())
}

/// Where apply writes, and the names it leaves alone.
struct Target<'a> {
    client: &'a Client,
    namespace: &'a str,
    cluster: &'a Cluster,
    unowned: &'a BTreeSet<String>,
}

impl Target<'_> {
    /// Writes `desired` when what the cache holds differs: creates it when
    /// missing, applies it (server-side apply, forcing the operator's
    /// fields) when the Cluster owns it and its applied hash differs, and
    /// leaves alone one the Cluster does not own.
    async fn apply<K>(&self, store: &Store<K>, desired: K, kind: &'static str) -> Result<(), Error>
    where
        K: NamespacedObject,
    {
        let desired = resources::hashed(desired);
        let name = desired.name_any();
        if self.unowned.contains(&format!("{kind}/{name}")) {
            return Ok(());
        }
        let reference = ObjectRef::<K>::new(&name).within(self.namespace);
        match store.get(&reference) {
            Some(existing) if owned_by(existing.meta(), self.cluster) => {
                let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
                let wrote =
                    apply_when_changed(&api, resources::applied_hash(existing.as_ref()), &desired)
                        .await
                        .map_err(|source| Error::ApplyObject {
                            kind,
                            name: name.clone(),
                            source,
                        })?;
                if wrote {
                    info!(cluster = %self.cluster.name_any(), kind, name = %name, "applied");
                }
            }
            Some(_) => {}
            // Missing from the cache, and observe's read found no one
            // else's: created (a 409, the name taken meanwhile, is for
            // the next reconcile's read).
            None => {
                create(self.client, self.namespace, self.cluster, desired, kind).await?;
            }
        }
        Ok(())
    }
}

/// The ordinals of the member Services of a StatefulSet the cache holds
/// (`<statefulset>-<ordinal>`).
fn cached_member_ordinals(services: &NameIndex, namespace: &str, statefulset: &str) -> Vec<i32> {
    let mut ordinals: Vec<i32> = services
        .with_prefix(namespace, &format!("{statefulset}-"))
        .iter()
        .filter_map(|name| crds::names::member_ordinal(statefulset, name))
        .collect();
    ordinals.sort_unstable();
    ordinals
}

/// A namespaced kind the controller creates.
pub(crate) trait NamespacedObject:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}

impl<K> NamespacedObject for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

/// Creates `desired` unless an object of its name exists: a foreign one
/// is refused, one of ours is left as it is.
pub(crate) async fn create_unless_present<K>(
    client: &Client,
    namespace: &str,
    cluster: &Cluster,
    store: &Store<K>,
    desired: K,
    kind: &'static str,
) -> Result<Result<bool, Refusal>, Error>
where
    K: NamespacedObject,
{
    let name = desired.name_any();
    match crate::context::existing(client, namespace, store, &name, kind).await? {
        Some(existing) if owned_by(existing.meta(), cluster) => Ok(Ok(false)),
        Some(_) => Ok(Err(foreign(kind, &name))),
        None => Ok(Ok(create(client, namespace, cluster, desired, kind).await?)),
    }
}

fn foreign(kind: &str, name: &str) -> Refusal {
    Refusal::ForeignObject(ForeignObject {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Creates an object as built. False when the name was taken meanwhile
/// (409): the next reconcile reads who holds it.
async fn create<K>(
    client: &Client,
    namespace: &str,
    cluster: &Cluster,
    desired: K,
    kind: &'static str,
) -> Result<bool, Error>
where
    K: NamespacedObject,
{
    let name = desired.name_any();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match create_as_ours(&api, &desired).await {
        Ok(true) => {
            info!(cluster = %cluster.name_any(), kind, name = %name, "created");
            Ok(true)
        }
        Ok(false) => {
            info!(cluster = %cluster.name_any(), kind, name = %name, "the name was taken meanwhile; looking again");
            Ok(false)
        }
        Err(source) => Err(Error::CreateObject { kind, name, source }),
    }
}

/// Writes a rack's StatefulSet with server-side apply, forcing the
/// operator's ownership of every field it sets (replicas are not among
/// them).
pub(crate) async fn apply_statefulset(
    ctx: &Context,
    namespace: &str,
    sts: &StatefulSet,
) -> Result<(), Error> {
    let name = sts.name_any();
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    // A StatefulSet made with the default strategy (RollingUpdate, as this
    // operator's earlier versions made them) holds `rollingUpdate`, which
    // the API server defaulted and no apply owns: applying `OnDelete`
    // leaves it, and the API server refuses the pair. A merge patch
    // switches the strategy and removes it first.
    let reference = ObjectRef::<StatefulSet>::new(&name).within(namespace);
    let rolling = ctx.statefulsets.get(&reference).is_some_and(|cached| {
        cached
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .is_some_and(|u| u.rolling_update.is_some())
    });
    if rolling {
        let patch = serde_json::json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}});
        api.patch(&name, &crate::apply::patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::ApplyStatefulSet {
                name: name.clone(),
                source,
            })?;
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(sts),
    )
    .await
    .map_err(|source| Error::ApplyStatefulSet { name, source })?;
    Ok(())
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
