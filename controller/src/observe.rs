//! From the objects in the caches to the [`Observed`] state the decision step
//! reads. Pure ([`observe_cached`]: the caller passes what its reflectors
//! hold), but for one read: the names of the supporting objects, which the
//! caches may not hold when someone else's object has them
//! ([`observe_supporting`]).
//!
//! A member's disk counts as lost only when the Nodes are known (a synced,
//! non-empty list) and the local PersistentVolume bound to one of its claims
//! names by node affinity only Nodes that are not in it: an unknown is never
//! read as a loss, since a replace throws the disk away.
//!
//! An object is the cluster's when its controller owner reference names the
//! Cluster's UID. An object that has one of the cluster's names but another
//! owner (or none) is foreign: the controller never adopts it silently.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crds::contract;
use crds::contract::maintenance;
use crds::labels;
use crds::names;
use crds::v1alpha1::Cluster;
use crds::versions::Version;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::ResourceExt;

use crate::cached::{CachedPod, CachedVolume};
use crate::context::Context;
use crate::decide::image_major;
use crate::error::Error;
use crate::observed::{
    ClaimTemplate, ForeignObject, InTheWay, MemberObserved, Observed, RackObserved,
    RefusedOverrides, ServiceObserved,
};
use crate::resources;
use crate::validated::ValidCluster;

/// What the caches show of storage and Nodes, for the members' claims and
/// lost disks.
#[derive(Default)]
pub struct Storage<'a> {
    /// PersistentVolumeClaims (the cluster's carry its labels).
    pub claims: Vec<&'a PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Vec<&'a CachedVolume>,
    /// The Nodes, or `None` when they are not known (cache not synced).
    pub nodes: Option<Vec<&'a Node>>,
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The names a PersistentVolume's node affinity admits by
/// `kubernetes.io/hostname` (how the local static provisioner pins a disk),
/// empty when it has none.
pub fn volume_hostnames(pv: &CachedVolume) -> Vec<String> {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| {
            r.node_selector_terms
                .iter()
                .flat_map(|t| t.match_expressions.iter().flatten())
                .filter(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
                .flat_map(|e| e.values.iter().flatten().cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a volume is pinned to this Node (by its name or hostname
/// label): only such a volume's disk can be lost or found again when the
/// Node goes or comes.
pub fn volume_pinned_to(pv: &CachedVolume, node: &Node) -> bool {
    let hostname = label(&node.metadata, "kubernetes.io/hostname");
    volume_hostnames(pv)
        .iter()
        .any(|h| node.metadata.name.as_deref() == Some(h) || hostname == Some(h))
}

/// The claim a volume is bound to, `(namespace, name)`, as its `claimRef`
/// says; a volume's change can only concern the member of that claim.
pub fn claim_of_volume(pv: &CachedVolume) -> Option<(String, String)> {
    let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((claim.namespace.clone()?, claim.name.clone()?))
}

/// Whether a volume is pinned to Nodes none of which exists any more.
fn volume_lost(pv: &CachedVolume, hostnames: &BTreeSet<String>) -> bool {
    let pinned = volume_hostnames(pv);
    !pinned.is_empty() && pinned.iter().all(|h| !hostnames.contains(h))
}

/// Whether an object is controlled by this Cluster.
pub fn owned_by(meta: &ObjectMeta, cluster: &Cluster) -> bool {
    let Some(uid) = cluster.metadata.uid.as_deref() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn in_namespace(meta: &ObjectMeta, cluster: &Cluster) -> bool {
    meta.namespace == cluster.metadata.namespace
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether a Pod is Ready (its Ready condition is True).
pub fn pod_ready(pod: &CachedPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the caches hold of one cluster, as the read step found it: its
/// objects by name (a superset: observe filters it as it would the whole
/// caches), the volumes of its claims, every Node, and the overrides
/// ConfigMaps it names that exist, with their content.
#[derive(Default)]
pub struct Cached {
    pub statefulsets: Vec<Arc<StatefulSet>>,
    pub services: Vec<Arc<Service>>,
    pub pods: Vec<Arc<CachedPod>>,
    pub claims: Vec<Arc<PersistentVolumeClaim>>,
    pub volumes: Vec<Arc<CachedVolume>>,
    pub nodes: Vec<Arc<Node>>,
    pub config_maps: Vec<Arc<ConfigMap>>,
}

/// The observed state in full, as decide reads it: the racks and members
/// ([`observe`]), the racks' refused overrides ([`refused_overrides`]), the
/// restarts overdue at `now_seconds` ([`overdue_restarts`]) and the racks
/// whose StatefulSet differs from `desired`, the StatefulSets built from
/// the spec by rack (none for a spec that did not validate: nothing is
/// built from it).
pub fn observe_cached(
    cluster: &Cluster,
    cached: &Cached,
    now_seconds: i64,
    restart_bound_seconds: i64,
) -> Observed {
    let storage = Storage {
        claims: cached.claims.iter().map(|c| c.as_ref()).collect(),
        volumes: cached.volumes.iter().map(|v| v.as_ref()).collect(),
        nodes: Some(cached.nodes.iter().map(|n| n.as_ref()).collect()),
    };
    let mut observed = observe(
        cluster,
        cached.statefulsets.iter().map(|s| s.as_ref()),
        cached.services.iter().map(|s| s.as_ref()),
        cached.pods.iter().map(|p| p.as_ref()),
        &storage,
    );
    observed.refused_overrides =
        refused_overrides(cluster, cached.config_maps.iter().map(|c| c.as_ref()));
    observed.token_allocation_factors =
        token_allocation_factors(cluster, cached.config_maps.iter().map(|c| c.as_ref()));
    overdue_restarts(&mut observed, now_seconds, restart_bound_seconds);
    observed.now = now_seconds;
    observed.created = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    observed
}

/// Reads the names of the supporting objects in the order apply writes
/// them (client Service, members' ServiceAccount, Role and RoleBinding,
/// PodDisruptionBudget), from the cache or, for a name it does not hold,
/// the API server: records those the Cluster does not own, and the first
/// in the way (a foreign object; the user's own Role or RoleBinding that
/// does not give the members what they need). A ServiceAccount of the
/// user's grants nothing by itself: it is used as it is.
pub async fn observe_supporting(
    observed: &mut Observed,
    cluster: &ValidCluster<'_>,
    namespace: &str,
    ctx: &Context,
) -> Result<(), Error> {
    let found = Found {
        client: &ctx.client,
        namespace,
        cluster,
    };
    let mut in_the_way = Vec::new();
    let service = resources::client_service(cluster);
    if found
        .unowned(&ctx.services, &service, "Service", observed)
        .await?
        .is_some()
    {
        in_the_way.push(foreign_object("Service", &service.name_any()));
    }
    let account = resources::member_service_account(cluster);
    found
        .unowned(&ctx.service_accounts, &account, "ServiceAccount", observed)
        .await?;
    let role = resources::member_role(cluster);
    if let Some(provided) = found.unowned(&ctx.roles, &role, "Role", observed).await? {
        let missing = resources::missing_grants(&provided, &role);
        if !missing.is_empty() {
            in_the_way.push(InTheWay::InsufficientRbac {
                kind: "Role".to_string(),
                name: provided.name_any(),
                missing: missing.join(", "),
            });
        }
    }
    let binding = resources::member_role_binding(cluster);
    if let Some(provided) = found
        .unowned(&ctx.role_bindings, &binding, "RoleBinding", observed)
        .await?
        && !resources::binds_the_same(&provided, &binding)
    {
        in_the_way.push(InTheWay::InsufficientRbac {
            kind: "RoleBinding".to_string(),
            name: provided.name_any(),
            missing: format!(
                "a binding of Role {} to ServiceAccount {}",
                binding.role_ref.name,
                account.name_any()
            ),
        });
    }
    let pdb = resources::pod_disruption_budget(cluster, false);
    if found
        .unowned(&ctx.pdbs, &pdb, "PodDisruptionBudget", observed)
        .await?
        .is_some()
    {
        in_the_way.push(foreign_object("PodDisruptionBudget", &pdb.name_any()));
    }
    observed.supporting_in_the_way = in_the_way.into_iter().next();
    Ok(())
}

fn foreign_object(kind: &str, name: &str) -> InTheWay {
    InTheWay::Foreign(ForeignObject {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Where [`observe_supporting`] reads.
struct Found<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    cluster: &'a Cluster,
}

impl Found<'_> {
    /// The object of `desired`'s name when the Cluster does not own it
    /// (recorded in `observed.supporting_unowned`).
    async fn unowned<K>(
        &self,
        store: &kube::runtime::reflector::Store<K>,
        desired: &K,
        kind: &'static str,
        observed: &mut Observed,
    ) -> Result<Option<Arc<K>>, Error>
    where
        K: crate::apply::NamespacedObject,
    {
        let name = desired.name_any();
        let existing = crate::context::existing(self.client, self.namespace, store, &name, kind)
            .await?
            .filter(|o| !owned_by(o.meta(), self.cluster));
        if existing.is_some() {
            observed.supporting_unowned.insert(format!("{kind}/{name}"));
        }
        Ok(existing)
    }
}

/// Marks the racks whose StatefulSet (the Cluster's) carries another
/// applied hash than the one built from the spec (`desired`, by rack): the
/// plan applies them.
pub fn outdated_statefulsets<'a>(
    observed: &mut Observed,
    cluster: &Cluster,
    statefulsets: impl IntoIterator<Item = &'a StatefulSet> + Clone,
    desired: &BTreeMap<String, StatefulSet>,
) {
    for (rack, desired) in desired {
        let outdated = statefulsets
            .clone()
            .into_iter()
            .find(|s| s.metadata.name == desired.metadata.name)
            .is_some_and(|cached| {
                owned_by(&cached.metadata, cluster)
                    && crate::resources::applied_hash(cached)
                        != crate::resources::applied_hash(desired)
            });
        if let Some(observed_rack) = observed.racks.get_mut(rack) {
            observed_rack.statefulset_outdated = outdated;
        }
    }
}

/// The observed state of a cluster, from the objects of its namespace.
pub fn observe<'a>(
    cluster: &Cluster,
    statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
    services: impl IntoIterator<Item = &'a Service>,
    pods: impl IntoIterator<Item = &'a CachedPod>,
    storage: &Storage<'_>,
) -> Observed {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let dc = &cluster.spec.datacenter.name;
    let mut observed = Observed::default();
    // The StatefulSet names of the spec's racks, to detect foreign objects
    // that hold a name we need.
    let wanted: BTreeMap<String, String> = cluster
        .spec
        .datacenter
        .racks
        .iter()
        .map(|r| (names::statefulset_name(name, dc, &r.name), r.name.clone()))
        .collect();
    let mut sts_of_rack: BTreeMap<String, String> = BTreeMap::new();

    for sts in statefulsets {
        if !in_namespace(&sts.metadata, cluster) {
            continue;
        }
        let sts_name = sts.metadata.name.clone().unwrap_or_default();
        if owned_by(&sts.metadata, cluster) {
            let Some(rack) = label(&sts.metadata, labels::RACK) else {
                continue;
            };
            if let Some(other) = label(&sts.metadata, labels::DATACENTER).filter(|d| *d != dc) {
                if !observed.other_datacenters.iter().any(|d| d == other) {
                    observed.other_datacenters.push(other.to_string());
                }
                continue;
            }
            let entry = observed.racks.entry(rack.to_string()).or_default();
            entry.replicas = Some(sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
            entry.claim_templates = sts.spec.as_ref().map(|s| {
                s.volume_claim_templates
                    .iter()
                    .flatten()
                    .map(ClaimTemplate::of)
                    .collect()
            });
            entry.template_encryption = crate::encryption::template_encryption(
                sts,
                &cluster
                    .spec
                    .security
                    .as_ref()
                    .map(|s| s.tls.clone())
                    .unwrap_or_default(),
            );
            entry.template_version = sts
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| {
                    p.containers
                        .iter()
                        .find(|c| c.name == cluster.spec.mode.as_str())
                })
                .and_then(|c| c.image.as_deref())
                .and_then(Version::of_image);
            entry.update_revision = sts.status.as_ref().and_then(|s| s.update_revision.clone());
            let generation = sts.metadata.generation.unwrap_or_default();
            // No status at all: no revisions either, so nothing to roll.
            entry.status_stale = sts
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .is_some_and(|seen| seen < generation);
            sts_of_rack.insert(rack.to_string(), sts_name);
        } else if wanted.contains_key(&sts_name) {
            observed.foreign.push(ForeignObject {
                kind: "StatefulSet".to_string(),
                name: sts_name,
            });
        }
    }
    // Racks of the spec without a StatefulSet still appear, empty.
    for rack in &cluster.spec.datacenter.racks {
        observed
            .racks
            .entry(rack.name.clone())
            .or_insert_with(RackObserved::default);
        sts_of_rack
            .entry(rack.name.clone())
            .or_insert_with(|| names::statefulset_name(name, dc, &rack.name));
    }

    let member_of = |object_name: &str| {
        sts_of_rack.iter().find_map(|(rack, sts)| {
            names::member_ordinal(sts, object_name).map(|ordinal| (rack.clone(), ordinal))
        })
    };

    for service in services {
        if !in_namespace(&service.metadata, cluster) {
            continue;
        }
        let service_name = service.metadata.name.clone().unwrap_or_default();
        let Some((rack, ordinal)) = member_of(&service_name) else {
            if service_name == names::client_service_name(name)
                && !owned_by(&service.metadata, cluster)
            {
                observed.foreign.push(ForeignObject {
                    kind: "Service".to_string(),
                    name: service_name,
                });
            }
            continue;
        };
        if !owned_by(&service.metadata, cluster) {
            observed.foreign.push(ForeignObject {
                kind: "Service".to_string(),
                name: service_name,
            });
            continue;
        }
        let member = member_entry(&mut observed, &rack, ordinal);
        member.service = Some(service_observed(service));
    }

    for pod in pods {
        if !in_namespace(&pod.metadata, cluster) {
            continue;
        }
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let Some((rack, ordinal)) = member_of(&pod_name) else {
            continue;
        };
        if label(&pod.metadata, labels::CLUSTER) != Some(name) {
            continue;
        }
        let ready = pod_ready(pod) && pod.metadata.deletion_timestamp.is_none();
        let database = cluster.spec.mode.as_str();
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == database))
            .and_then(|c| c.image.as_deref());
        let member = member_entry(&mut observed, &rack, ordinal);
        member.pod_exists = true;
        member.pod_uid = pod.metadata.uid.clone();
        member.pod_ready = ready;
        member.pod_major = image.and_then(image_major);
        member.pod_version = image.and_then(Version::of_image);
        member.revision = label(&pod.metadata, REVISION_LABEL).map(str::to_string);
        member.pod_terminating = pod.metadata.deletion_timestamp.is_some();
        member.pod_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        member.pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        member.pod_created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
    }

    observed.unschedulable_nodes = storage
        .nodes
        .iter()
        .flatten()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .filter_map(|n| n.metadata.name.clone())
        .collect();

    // Claims: `<template>-<pod>` for the rack's templates.
    let hostnames: Option<BTreeSet<String>> = storage.nodes.as_ref().map(|nodes| {
        nodes
            .iter()
            .flat_map(|n| {
                let hostname = label(&n.metadata, "kubernetes.io/hostname").map(str::to_string);
                n.metadata.name.clone().into_iter().chain(hostname)
            })
            .collect()
    });
    let hostnames = hostnames.filter(|h| !h.is_empty());
    for claim in &storage.claims {
        if !in_namespace(&claim.metadata, cluster)
            || label(&claim.metadata, labels::CLUSTER) != Some(name)
        {
            continue;
        }
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let found = cluster.spec.datacenter.racks.iter().find_map(|rack| {
            let sts = sts_of_rack.get(&rack.name)?;
            rack.storage
                .volume_claim_templates
                .iter()
                .filter_map(|t| t.metadata.name.as_deref())
                .find_map(|template| {
                    let pod = claim_name.strip_prefix(template)?.strip_prefix('-')?;
                    names::member_ordinal(sts, pod)
                })
                .map(|ordinal| (rack.name.clone(), ordinal))
        });
        let Some((rack, ordinal)) = found else {
            continue;
        };
        let lost = match (
            &hostnames,
            claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        ) {
            (Some(hostnames), Some(volume)) => storage
                .volumes
                .iter()
                .find(|pv| pv.metadata.name.as_deref() == Some(volume))
                .is_some_and(|pv| volume_lost(pv, hostnames)),
            _ => false,
        };
        let member = member_entry(&mut observed, &rack, ordinal);
        member.claims.push(claim_name);
        member.disk_lost |= lost;
    }
    for rack in observed.racks.values_mut() {
        for member in rack.members.values_mut() {
            member.claims.sort();
        }
    }
    observed
}

/// The label the StatefulSet controller puts on each Pod with the revision
/// of the template it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// Marks the members whose restart has not brought them back Ready within
/// `bound_seconds`: counted from the later of the restart's record and the
/// creation of the Pod that runs the new template (an eviction the
/// PodDisruptionBudget held back does not count against the member).
pub fn overdue_restarts(observed: &mut Observed, now_seconds: i64, bound_seconds: i64) {
    for rack in observed.racks.values_mut() {
        let update_revision = rack.update_revision.clone();
        for member in rack.members.values_mut() {
            let Some(recorded) = member
                .service
                .as_ref()
                .and_then(|s| s.restarting.as_deref())
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            else {
                continue;
            };
            let on_new = member.revision.is_some() && member.revision == update_revision;
            let since = match member.pod_created {
                Some(created) if on_new => created.max(recorded.as_second()),
                _ => recorded.as_second(),
            };
            // Ready is not back: a member the others do not see up yet is
            // still restarting, and overdue as well past the bound.
            member.restart_overdue = now_seconds - since > bound_seconds;
        }
    }
}

fn member_entry<'a>(
    observed: &'a mut Observed,
    rack: &str,
    ordinal: i32,
) -> &'a mut MemberObserved {
    observed
        .racks
        .entry(rack.to_string())
        .or_default()
        .members
        .entry(ordinal)
        .or_default()
}

/// The racks whose overrides ConfigMap (`configMapName`) sets keys the
/// operator refuses ([`crds::overrides`], the list the sidecar refuses too:
/// with `spec.security.authentication` on, the authentication settings as
/// well).
/// A ConfigMap that is missing refuses nothing here: the member's Pod waits
/// for its volume.
pub fn refused_overrides<'a>(
    cluster: &Cluster,
    config_maps: impl IntoIterator<Item = &'a ConfigMap>,
) -> BTreeMap<String, RefusedOverrides> {
    let config_maps: Vec<&ConfigMap> = config_maps
        .into_iter()
        .filter(|c| in_namespace(&c.metadata, cluster))
        .collect();
    let file = crds::overrides::config_map_key(cluster.spec.mode);
    let authentication = cluster
        .spec
        .security
        .as_ref()
        .is_some_and(|s| s.authentication_enabled());
    let mut refused = BTreeMap::new();
    for rack in &cluster.spec.datacenter.racks {
        let Some(name) = rack.config_map_name.as_deref() else {
            continue;
        };
        let Some(config_map) = config_maps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
        else {
            continue;
        };
        let keys = crds::overrides::refused_in_config_map(
            config_map.data.as_ref(),
            cluster.spec.mode,
            &cluster.spec.version,
            authentication,
        );
        if !keys.is_empty() {
            refused.insert(
                rack.name.clone(),
                RefusedOverrides {
                    config_map: name.to_string(),
                    file,
                    keys,
                },
            );
        }
    }
    refused
}

/// The racks whose overrides ConfigMap sets the token allocator's
/// replication factor, and the value (Cassandra mode only).
pub fn token_allocation_factors<'a>(
    cluster: &Cluster,
    config_maps: impl IntoIterator<Item = &'a ConfigMap>,
) -> BTreeMap<String, u32> {
    if cluster.spec.mode != crds::v1alpha1::ClusterMode::Cassandra {
        return BTreeMap::new();
    }
    let config_maps: Vec<&ConfigMap> = config_maps
        .into_iter()
        .filter(|c| in_namespace(&c.metadata, cluster))
        .collect();
    let file = crds::overrides::config_map_key(cluster.spec.mode);
    cluster
        .spec
        .datacenter
        .racks
        .iter()
        .filter_map(|rack| {
            let name = rack.config_map_name.as_deref()?;
            let fragment = config_maps
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))?
                .data
                .as_ref()?
                .get(file)?;
            Some((
                rack.name.clone(),
                crds::overrides::token_allocation_factor(fragment)?,
            ))
        })
        .collect()
}

/// Whether a Cluster names a ConfigMap as a rack's overrides.
pub fn references_config_map(cluster: &Cluster, config_map: &ConfigMap) -> bool {
    names_config_map(cluster, &config_map.metadata)
}

/// Whether a Cluster names the ConfigMap of `meta` (its namespace and
/// name: all the ConfigMap cache keeps) as a rack's overrides.
pub fn names_config_map(cluster: &Cluster, meta: &ObjectMeta) -> bool {
    in_namespace(meta, cluster)
        && cluster
            .spec
            .datacenter
            .racks
            .iter()
            .any(|r| r.config_map_name.is_some() && r.config_map_name == meta.name)
}

/// The records of intent on a member Service, as decide reads them: from
/// the cache, or from a fresh read just before a write that needs them.
pub fn service_observed(service: &Service) -> ServiceObserved {
    let meta = &service.metadata;
    ServiceObserved {
        decommissioned: contract::Decommission::label_of(meta).map(str::to_string),
        replace: label(meta, contract::REPLACE).map(str::to_string),
        decommission_started: annotation(meta, contract::DECOMMISSION_STARTED).is_some(),
        decommission_refused: annotation(meta, contract::DECOMMISSION_REFUSED).map(str::to_string),
        start_refused: annotation(meta, contract::START_REFUSED).map(str::to_string),
        replace_requested: annotation(meta, contract::REPLACE_REQUESTED).map(str::to_string),
        cluster_ip: service
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.clone())
            .filter(|ip| !ip.is_empty() && ip != "None"),
        resource_version: meta.resource_version.clone(),
        restarting: annotation(meta, contract::RESTARTING).map(str::to_string),
        restarted_from_generation: annotation(meta, contract::RESTARTED_FROM_GENERATION)
            .and_then(|g| g.parse().ok()),
        gossip: annotation(meta, contract::GOSSIP).and_then(contract::GossipView::from_annotation),
        decommission_request: annotation(meta, contract::DECOMMISSION_REQUEST)
            .and_then(contract::DecommissionRequest::from_annotation),
        ring_record_requested: annotation(meta, contract::RING_RECORD_REQUESTED)
            .map(str::to_string),
        decommission_confirmation: annotation(meta, contract::DECOMMISSION_CONFIRMATION)
            .and_then(contract::DecommissionConfirmation::from_annotation),
        cleanup_due: annotation(meta, maintenance::CLEANUP_DUE).map(str::to_string),
        maintenance_request: annotation(meta, maintenance::REQUEST)
            .and_then(maintenance::Request::from_annotation),
        maintenance_record: annotation(meta, maintenance::RECORD)
            .and_then(maintenance::Record::from_annotation),
        repaired: annotation(meta, maintenance::REPAIRED)
            .and_then(maintenance::Repaired::from_annotation),
        old_format_sstables: maintenance::old_format_sstables(annotation(
            meta,
            maintenance::OLD_FORMAT_SSTABLES,
        )),
    }
}

#[cfg(test)]
#[path = "observe_tests.rs"]
mod tests;
