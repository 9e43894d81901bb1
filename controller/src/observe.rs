//! From the objects in the caches to the [`Observed`] state the decision step
//! reads. Pure: the caller passes what its reflectors hold.
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
use crds::labels;
use crds::names;
use crds::v1alpha1::Cluster;
use crds::versions::Version;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cached::{CachedPod, CachedVolume};
use crate::decide::image_major;
use crate::observed::{
    ClaimTemplate, ForeignObject, MemberObserved, Observed, RackObserved, RefusedOverrides,
    ServiceObserved,
};

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
/// caches), the volumes of its claims, every Node and every ConfigMap.
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
    desired: &BTreeMap<String, StatefulSet>,
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
    overdue_restarts(&mut observed, now_seconds, restart_bound_seconds);
    outdated_statefulsets(
        &mut observed,
        cluster,
        cached.statefulsets.iter().map(|s| s.as_ref()),
        desired,
    );
    observed
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
        member.pod_created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
    }

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
/// operator refuses ([`crds::overrides`], the list the sidecar refuses too).
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
        let keys =
            crds::overrides::refused_in_config_map(config_map.data.as_ref(), cluster.spec.mode);
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

/// Whether a Cluster names a ConfigMap as a rack's overrides.
pub fn references_config_map(cluster: &Cluster, config_map: &ConfigMap) -> bool {
    in_namespace(&config_map.metadata, cluster)
        && cluster
            .spec
            .datacenter
            .racks
            .iter()
            .any(|r| r.config_map_name.is_some() && r.config_map_name == config_map.metadata.name)
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cached::cached;
    use crate::resources::{self, BuildContext};
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

    fn cluster() -> Cluster {
        let mut cluster: Cluster = serde_norway::from_str(
            r#"
metadata: {name: c, namespace: db, uid: u1}
spec:
  version: 4.1.8
  datacenter: {name: dc, racks: [{name: a, members: 3}, {name: b, members: 1}]}
"#,
        )
        .unwrap();
        cluster.metadata.uid = Some("u1".into());
        cluster
    }

    fn pod(name: &str, ready: bool) -> CachedPod {
        cached(&full_pod(name, ready))
    }

    fn full_pod(name: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("db".into()),
                labels: Some(labels::rack_labels("c", "dc", "a")),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn members_are_gathered_from_owned_objects() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let rack_a = &cluster.spec.datacenter.racks[0];
        let sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            2,
            &ctx,
        );
        let mut leaving = resources::member_service(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            1,
            true,
        );
        leaving
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(contract::DECOMMISSIONED.into(), "false".into());
        let services = [
            resources::member_service(
                &resources::ValidCluster::unchecked(&cluster),
                rack_a,
                0,
                true,
            ),
            leaving,
        ];
        let pods = [pod("c-dc-a-0", true), pod("c-dc-a-1", false)];

        let observed = observe(&cluster, [&sts], &services, &pods, &Storage::default());
        assert!(observed.foreign.is_empty());
        let a = &observed.racks["a"];
        assert_eq!(a.replicas, Some(2));
        assert_eq!(
            a.members[&0],
            MemberObserved {
                service: Some(ServiceObserved::default()),
                pod_exists: true,
                pod_ready: true,
                ..MemberObserved::default()
            }
        );
        assert_eq!(
            a.members[&1],
            MemberObserved {
                service: Some(ServiceObserved {
                    decommissioned: Some("false".into()),
                    ..ServiceObserved::default()
                }),
                pod_exists: true,
                pod_ready: false,
                ..MemberObserved::default()
            }
        );
        // rack b has no StatefulSet yet
        assert_eq!(observed.racks["b"], RackObserved::default());
    }

    #[test]
    fn objects_with_our_names_and_another_owner_are_foreign() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let rack_a = &cluster.spec.datacenter.racks[0];
        let mut sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            0,
            &ctx,
        );
        sts.metadata.owner_references = None;
        let mut service = resources::member_service(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            0,
            true,
        );
        service.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        let mut client = resources::client_service(&resources::ValidCluster::unchecked(&cluster));
        client.metadata.owner_references = None;
        // objects of other namespaces are ignored whatever their names
        let mut elsewhere =
            resources::client_service(&resources::ValidCluster::unchecked(&cluster));
        elsewhere.metadata.namespace = Some("other".into());
        elsewhere.metadata.owner_references = None;

        let observed = observe(
            &cluster,
            [&sts],
            &[service, client, elsewhere],
            &[],
            &Storage::default(),
        );
        assert_eq!(
            observed.foreign,
            vec![
                ForeignObject {
                    kind: "StatefulSet".into(),
                    name: "c-dc-a".into()
                },
                ForeignObject {
                    kind: "Service".into(),
                    name: "c-dc-a-0".into()
                },
                ForeignObject {
                    kind: "Service".into(),
                    name: "c-client".into()
                },
            ]
        );
    }

    #[test]
    fn statefulsets_of_another_datacenter_name_are_reported() {
        let mut cluster = cluster();
        let ctx = BuildContext::default();
        let sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            3,
            &ctx,
        );
        cluster.spec.datacenter.name = "renamed".into();
        let observed = observe(&cluster, [&sts], &[], &[], &Storage::default());
        assert_eq!(observed.other_datacenters, vec!["dc".to_string()]);
        assert_eq!(observed.racks["a"].replicas, None);
    }

    #[test]
    fn a_statefulset_stripped_for_the_cache_is_observed_as_in_full() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let mut sts = resources::hashed(resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            3,
            &ctx,
        ));
        sts.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
            observed_generation: Some(1),
            update_revision: Some("c-dc-a-1234".into()),
            ..Default::default()
        });
        sts.metadata.generation = Some(2);
        let mut stripped = sts.clone();
        crate::run::strip_statefulset(&mut stripped);
        let size = |s: &StatefulSet| serde_json::to_vec(s).unwrap().len();
        assert!(
            size(&stripped) * 3 < size(&sts),
            "{} of {} bytes kept",
            size(&stripped),
            size(&sts)
        );
        let (full, kept) = (
            observe(&cluster, [&sts], &[], &[], &Storage::default()),
            observe(&cluster, [&stripped], &[], &[], &Storage::default()),
        );
        assert_eq!(kept, full);
        assert!(full.racks["a"].template_version.is_some());
        assert!(full.racks["a"].status_stale);
        assert_eq!(
            resources::applied_hash(&stripped),
            resources::applied_hash(&sts)
        );
    }

    #[test]
    fn members_stripped_for_the_caches_are_observed_as_in_full() {
        use crate::run::{strip_claim, strip_pod, strip_service, strip_volume};
        let mut cluster = cluster();
        let rack_a = &mut cluster.spec.datacenter.racks[0];
        rack_a.storage.volume_claim_templates = vec![
            serde_json::from_value(serde_json::json!({"metadata": {"name": "data"}})).unwrap(),
        ];
        let rack_a = &cluster.spec.datacenter.racks[0];
        let valid = resources::ValidCluster::unchecked(&cluster);
        let ctx = BuildContext::default();
        let sts = resources::statefulset_for_rack(&valid, rack_a, 2, &ctx);
        let mut services = Vec::new();
        let mut pods = Vec::new();
        let mut claims = Vec::new();
        let mut volumes = Vec::new();
        for (ordinal, node) in [(0, "n0"), (1, "gone")] {
            let member = format!("c-dc-a-{ordinal}");
            let mut service =
                resources::hashed(resources::member_service(&valid, rack_a, ordinal, true));
            service.metadata.resource_version = Some(format!("4{ordinal}"));
            service
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(contract::RESTARTING.into(), "t".into());
            let spec = service.spec.as_mut().unwrap();
            spec.cluster_ip = Some(format!("10.96.0.{ordinal}"));
            spec.cluster_ips = Some(vec![format!("10.96.0.{ordinal}")]);
            services.push(service);

            let mut pod = full_pod(&member, ordinal == 0);
            pod.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
            pod.spec = sts.spec.clone().unwrap().template.spec;
            pods.push(pod);

            claims.push(
                serde_json::from_value::<PersistentVolumeClaim>(serde_json::json!({
                    "metadata": {"name": format!("data-{member}"), "namespace": "db",
                        "labels": labels::rack_labels("c", "dc", "a"),
                        "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                        "finalizers": ["kubernetes.io/pvc-protection"]},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                        "resources": {"requests": {"storage": "10Gi"}}, "volumeName": format!("pv{ordinal}")},
                    "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}}
                }))
                .unwrap(),
            );
            volumes.push(
                serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolume>(
                    serde_json::json!({
                        "metadata": {"name": format!("pv{ordinal}"), "labels": {"l": "v"},
                            "finalizers": ["kubernetes.io/pv-protection"]},
                        "spec": {"capacity": {"storage": "10Gi"}, "local": {"path": "/mnt/disks/x"},
                            "claimRef": {"namespace": "db", "name": format!("data-{member}")},
                            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
                        "status": {"phase": "Bound"}
                    }),
                )
                .unwrap(),
            );
        }
        let nodes = [node("n0")];
        let full_pods: Vec<CachedPod> = pods.iter().map(cached).collect();
        let full_volumes: Vec<CachedVolume> = volumes.iter().map(cached).collect();
        let full = observe(
            &cluster,
            [&sts],
            &services,
            &full_pods,
            &Storage {
                claims: claims.iter().collect(),
                volumes: full_volumes.iter().collect(),
                nodes: Some(nodes.iter().collect()),
            },
        );

        let mut kept_services = services.clone();
        kept_services.iter_mut().for_each(strip_service);
        let mut kept_pods = full_pods.clone();
        kept_pods.iter_mut().for_each(strip_pod);
        let mut kept_claims = claims.clone();
        kept_claims.iter_mut().for_each(strip_claim);
        let mut kept_volumes = full_volumes.clone();
        kept_volumes.iter_mut().for_each(strip_volume);
        let kept = observe(
            &cluster,
            [&sts],
            &kept_services,
            &kept_pods,
            &Storage {
                claims: kept_claims.iter().collect(),
                volumes: kept_volumes.iter().collect(),
                nodes: Some(nodes.iter().collect()),
            },
        );
        assert_eq!(kept, full);
        for (kept, full) in kept_services.iter().zip(&services) {
            assert_eq!(resources::applied_hash(kept), resources::applied_hash(full));
            assert!(owned_by(&kept.metadata, &cluster));
        }
        // What the comparison covers: every member field a kept object feeds.
        let (m0, m1) = (&full.racks["a"].members[&0], &full.racks["a"].members[&1]);
        assert!(m0.pod_ready && !m1.pod_ready);
        assert!(m0.pod_version.is_some() && m0.revision.is_none());
        let service = m0.service.as_ref().unwrap();
        assert_eq!(service.cluster_ip.as_deref(), Some("10.96.0.0"));
        assert_eq!(service.resource_version.as_deref(), Some("40"));
        assert_eq!(service.restarting.as_deref(), Some("t"));
        assert_eq!(m1.claims, vec!["data-c-dc-a-1".to_string()]);
        assert!(!m0.disk_lost && m1.disk_lost, "pv1's Node is gone");
    }

    #[test]
    fn a_pod_being_deleted_is_not_ready() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            1,
            &ctx,
        );
        let mut p = pod("c-dc-a-0", true);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let observed = observe(&cluster, [&sts], &[], &[p], &Storage::default());
        assert!(!observed.racks["a"].members[&0].pod_ready);
    }

    fn claim(name: &str, volume: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "db", "labels": labels::rack_labels("c", "dc", "a")},
            "spec": {"volumeName": volume}
        }))
        .unwrap()
    }

    fn local_volume(name: &str, node: &str) -> CachedVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"local": {"path": "/mnt/disks/x"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
        }))
        .unwrap()
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}
        }))
        .unwrap()
    }

    #[test]
    fn a_volume_concerns_the_claim_it_is_bound_to_and_the_node_it_is_pinned_to() {
        let mut pv = local_volume("pv0", "n0");
        assert_eq!(claim_of_volume(&pv), None, "not bound");
        pv.spec.as_mut().unwrap().claim_ref = Some(
            serde_json::from_value(serde_json::json!({"namespace": "db", "name": "data-c-dc-a-0"}))
                .unwrap(),
        );
        assert_eq!(
            claim_of_volume(&pv),
            Some(("db".to_string(), "data-c-dc-a-0".to_string()))
        );
        assert!(volume_pinned_to(&pv, &node("n0")));
        assert!(!volume_pinned_to(&pv, &node("n1")));
        // A Node named otherwise whose hostname label is the pinned one.
        let mut renamed = node("n1");
        renamed.metadata.labels =
            Some([("kubernetes.io/hostname".to_string(), "n0".to_string())].into());
        assert!(volume_pinned_to(&pv, &renamed));
        let mut unpinned = pv.clone();
        unpinned.spec.as_mut().unwrap().node_affinity = None;
        assert!(!volume_pinned_to(&unpinned, &node("n0")));
    }

    #[test]
    fn claims_and_lost_disks_are_found_per_member() {
        let mut cluster = cluster();
        cluster.spec.datacenter.racks[0]
            .storage
            .volume_claim_templates = vec![
            serde_json::from_value(serde_json::json!({"metadata": {"name": "data"}})).unwrap(),
        ];
        let ctx = BuildContext::default();
        let sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            3,
            &ctx,
        );
        let claims = [
            claim("data-c-dc-a-0", "pv0"),
            claim("data-c-dc-a-1", "pv1"),
            // another template's name, or another cluster's claim: not ours
            claim("logs-c-dc-a-0", "pv0"),
        ];
        let mut foreign = claim("data-c-dc-a-2", "pv2");
        foreign.metadata.labels = None;
        let volumes = [
            local_volume("pv0", "n0"),
            local_volume("pv1", "gone"),
            local_volume("pv2", "gone"),
        ];
        let nodes = [node("n0"), node("n1")];
        let mut storage = Storage {
            claims: claims.iter().chain([&foreign]).collect(),
            volumes: volumes.iter().collect(),
            nodes: Some(nodes.iter().collect()),
        };
        let observed = observe(&cluster, [&sts], &[], &[], &storage);
        let a = &observed.racks["a"];
        assert_eq!(a.members[&0].claims, vec!["data-c-dc-a-0".to_string()]);
        assert!(!a.members[&0].disk_lost);
        assert_eq!(a.members[&1].claims, vec!["data-c-dc-a-1".to_string()]);
        assert!(a.members[&1].disk_lost, "pv1's Node is gone");
        assert!(!a.members.contains_key(&2));

        // Nodes unknown, or an empty list: never a loss.
        storage.nodes = None;
        let observed = observe(&cluster, [&sts], &[], &[], &storage);
        assert!(!observed.racks["a"].members[&1].disk_lost);
        storage.nodes = Some(vec![]);
        let observed = observe(&cluster, [&sts], &[], &[], &storage);
        assert!(!observed.racks["a"].members[&1].disk_lost);
    }

    #[test]
    fn the_sidecars_annotations_and_the_address_are_read() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let rack_a = &cluster.spec.datacenter.racks[0];
        let sts = resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            1,
            &ctx,
        );
        let mut service = resources::member_service(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            0,
            true,
        );
        service.metadata.resource_version = Some("42".into());
        service.metadata.annotations = Some(BTreeMap::from([
            (contract::DECOMMISSION_STARTED.to_string(), "t".to_string()),
            (
                contract::DECOMMISSION_REFUSED.to_string(),
                "Not enough live nodes".to_string(),
            ),
            (contract::REPLACE_REQUESTED.to_string(), "empty".to_string()),
        ]));
        service.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.7".into());
        let mut p = full_pod("c-dc-a-0", true);
        p.spec = Some(
            resources::statefulset_for_rack(
                &resources::ValidCluster::unchecked(&cluster),
                rack_a,
                1,
                &ctx,
            )
            .spec
            .unwrap()
            .template
            .spec
            .unwrap(),
        );
        let observed = observe(
            &cluster,
            [&sts],
            &[service],
            &[cached(&p)],
            &Storage::default(),
        );
        let m = &observed.racks["a"].members[&0];
        assert_eq!(
            m.service,
            Some(ServiceObserved {
                decommission_started: true,
                decommission_refused: Some("Not enough live nodes".into()),
                replace_requested: Some("empty".into()),
                cluster_ip: Some("10.96.0.7".into()),
                resource_version: Some("42".into()),
                ..ServiceObserved::default()
            })
        );
        assert_eq!(m.pod_major, Some(4));
    }

    fn config_map(namespace: &str, name: &str, key: &str, text: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(key.to_string(), text.to_string())])),
            ..ConfigMap::default()
        }
    }

    /// From a rack's overrides ConfigMap to the decision and the status,
    /// once per refused family: the decision refuses (no member starts with
    /// it), the rack's `OverridesRefused` condition and the Degraded
    /// condition (whose message becomes the Warning Event) name the key, the
    /// ConfigMap and why; the same ConfigMap without the key refuses nothing.
    #[test]
    fn each_refused_family_is_reported_naming_key_and_config_map() {
        use crate::decide::{Action, Refusal, decide};
        use crate::status::{Outcome, compute_status};
        let mut cluster = cluster();
        cluster.spec.datacenter.racks[0].config_map_name = Some("tuning".into());
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(10).unwrap(),
        );
        for (family, key, value) in [
            ("bootstrap", "auto_bootstrap", "false"),
            ("ports", "storage_port", "7001"),
            ("ports", "ssl_storage_port", "7002"),
            ("ports", "native_transport_port", "9043"),
            ("directories", "data_file_directories", "[/tmp/data]"),
            ("directories", "commitlog_directory", "/tmp/commitlog"),
            ("directories", "hints_directory", "/tmp/hints"),
            ("directories", "saved_caches_directory", "/tmp/caches"),
            ("directories", "cdc_raw_directory", "/tmp/cdc"),
            ("addresses", "listen_address", "10.0.0.1"),
            ("addresses", "broadcast_address", "10.0.0.1"),
            ("addresses", "rpc_address", "0.0.0.0"),
            ("addresses", "broadcast_rpc_address", "10.0.0.1"),
            (
                "seed_provider",
                "seed_provider",
                "[{class_name: org.apache.cassandra.locator.SimpleSeedProvider, parameters: [{seeds: 10.0.0.9}]}]",
            ),
            ("endpoint_snitch", "endpoint_snitch", "SimpleSnitch"),
            ("cluster_name", "cluster_name", "other"),
        ] {
            let fragment = format!("concurrent_reads: 16\n{key}: {value}\n");
            let maps = [
                config_map("db", "tuning", "cassandra.yaml", &fragment),
                // Same name, another namespace: not this cluster's.
                config_map(
                    "other",
                    "tuning",
                    "cassandra.yaml",
                    "auto_bootstrap: true\n",
                ),
            ];
            let mut observed = observe(&cluster, [], [], [], &Storage::default());
            observed.refused_overrides = refused_overrides(&cluster, &maps);
            let action = decide(&cluster.spec, &observed);
            assert!(
                matches!(&action, Action::Refuse(Refusal::OverridesRefused { rack, .. }) if rack == "a"),
                "{family} {key}: {action:?}"
            );
            let status = compute_status(&cluster, &observed, &Outcome::Decided(action), &now);
            let reason = crds::overrides::refused(key).unwrap().reason;
            let named = format!(
                "ConfigMap \"tuning\": key cassandra.yaml sets {key}, which the operator refuses: {reason}"
            );
            let rack = &status.racks["a"];
            let condition = rack
                .conditions
                .iter()
                .find(|c| c.type_ == crds::v1alpha1::RACK_CONDITION_OVERRIDES_REFUSED)
                .unwrap_or_else(|| panic!("{family} {key}: no condition in {rack:?}"));
            assert_eq!(condition.message.as_deref(), Some(named.as_str()));
            let degraded = status
                .conditions
                .iter()
                .find(|c| c.type_ == crds::v1alpha1::CONDITION_DEGRADED)
                .unwrap();
            assert_eq!(
                (degraded.status.as_str(), degraded.reason.as_str()),
                ("True", "OverridesRefused"),
                "{family} {key}"
            );
            assert!(degraded.message.contains(&named), "{}", degraded.message);
            assert!(!status.racks.contains_key("b"), "rack b was not refused");

            // The ConfigMap without the key: nothing refused, the rack goes on.
            let fixed = [config_map(
                "db",
                "tuning",
                "cassandra.yaml",
                "concurrent_reads: 16\n",
            )];
            observed.refused_overrides = refused_overrides(&cluster, &fixed);
            assert!(observed.refused_overrides.is_empty());
            assert!(!matches!(
                decide(&cluster.spec, &observed),
                Action::Refuse(_)
            ));
        }
    }

    #[test]
    fn only_the_key_of_the_mode_and_the_named_config_map_count() {
        let mut cluster = cluster();
        cluster.spec.datacenter.racks[1].config_map_name = Some("tuning-b".into());
        let maps = [
            // Rack a names none: its ConfigMap is not read.
            config_map("db", "tuning", "cassandra.yaml", "auto_bootstrap: false\n"),
            // Rack b's, at a key the sidecar does not read in cassandra mode.
            config_map("db", "tuning-b", "scylla.yaml", "auto_bootstrap: false\n"),
        ];
        assert!(refused_overrides(&cluster, &maps).is_empty());
        assert!(!references_config_map(&cluster, &maps[0]));
        assert!(references_config_map(&cluster, &maps[1]));
        cluster.spec.mode = crds::v1alpha1::ClusterMode::Scylla;
        let refused = refused_overrides(&cluster, &maps);
        assert_eq!(refused["b"].file, "scylla.yaml");
        assert_eq!(refused["b"].keys[0].key, "auto_bootstrap");
    }

    #[test]
    fn a_restart_is_overdue_when_not_back_within_the_bound() {
        let recorded = "2026-01-01T00:00:00Z";
        let t = recorded
            .parse::<k8s_openapi::jiff::Timestamp>()
            .expect("a time")
            .as_second();
        let observed = |revision: Option<&str>, created: Option<i64>, ready: bool| {
            let member = MemberObserved {
                service: Some(ServiceObserved {
                    restarting: Some(recorded.into()),
                    ..ServiceObserved::default()
                }),
                pod_exists: created.is_some(),
                pod_ready: ready,
                pod_created: created,
                revision: revision.map(str::to_string),
                ..MemberObserved::default()
            };
            let rack = RackObserved {
                replicas: Some(1),
                update_revision: Some("new".into()),
                members: [(0, member)].into(),
                ..RackObserved::default()
            };
            Observed {
                racks: [("a".to_string(), rack)].into(),
                ..Observed::default()
            }
        };
        let overdue = |mut o: Observed, now: i64| {
            overdue_restarts(&mut o, now, 60);
            o.racks["a"].members[&0].restart_overdue
        };
        // no Pod yet: counted from the record
        assert!(!overdue(observed(None, None, false), t + 60));
        assert!(overdue(observed(None, None, false), t + 61));
        // on the new template: counted from its Pod's creation (an eviction
        // the budget held back does not count)
        assert!(!overdue(
            observed(Some("new"), Some(t + 100), false),
            t + 150
        ));
        assert!(overdue(
            observed(Some("new"), Some(t + 100), false),
            t + 161
        ));
        // still the old Pod: from the record
        assert!(overdue(observed(Some("old"), Some(t - 500), false), t + 61));
        // Ready is not back by itself (the ring must see it up too, which
        // the decision judges): the bound counts on
        assert!(!overdue(observed(Some("new"), Some(t), true), t + 60));
        assert!(overdue(observed(Some("new"), Some(t), true), t + 61));
    }

    #[test]
    fn a_statefulset_of_ours_with_another_applied_hash_is_outdated() {
        let cluster = cluster();
        let valid = resources::ValidCluster::unchecked(&cluster);
        let rack = &cluster.spec.datacenter.racks[0];
        let ctx = BuildContext::default();
        let desired: BTreeMap<String, StatefulSet> = [(
            rack.name.clone(),
            resources::applied_statefulset(&valid, rack, &ctx),
        )]
        .into();
        let ours = resources::statefulset_for_rack(&valid, rack, 3, &ctx);
        let mut changed = ours.clone();
        changed
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(resources::APPLIED_HASH.into(), "another".into());
        let mut foreign = changed.clone();
        foreign.metadata.owner_references = None;
        for (sts, outdated) in [(&ours, false), (&changed, true), (&foreign, false)] {
            let mut observed = observe(&cluster, [sts], &[], &[], &Storage::default());
            outdated_statefulsets(&mut observed, &cluster, [sts], &desired);
            assert_eq!(observed.racks["a"].statefulset_outdated, outdated);
        }
    }
}
