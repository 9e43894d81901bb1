//! From the objects in the caches to the [`Observed`] state the decision step
//! reads. Pure: the caller passes what its reflectors hold.
//!
//! An object is the cluster's when its controller owner reference names the
//! Cluster's UID. An object that has one of the cluster's names but another
//! owner (or none) is foreign: the controller never adopts it silently.

use std::collections::BTreeMap;

use crds::contract;
use crds::labels;
use crds::names;
use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::decide::{ForeignObject, MemberObserved, Observed, RackObserved, ServiceObserved};

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
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The observed state of a cluster, from the objects of its namespace.
pub fn observe<'a>(
    cluster: &Cluster,
    statefulsets: impl IntoIterator<Item = &'a StatefulSet>,
    services: impl IntoIterator<Item = &'a Service>,
    pods: impl IntoIterator<Item = &'a Pod>,
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
        member.service = Some(ServiceObserved {
            decommissioned: label(&service.metadata, contract::DECOMMISSIONED).map(str::to_string),
            replace: label(&service.metadata, contract::REPLACE).map(str::to_string),
        });
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
        let member = member_entry(&mut observed, &rack, ordinal);
        member.pod_exists = true;
        member.pod_ready = ready;
    }
    observed
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{self, BuildContext};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

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

    fn pod(name: &str, ready: bool) -> Pod {
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
        let sts = resources::statefulset_for_rack(&cluster, rack_a, 2, &ctx);
        let mut leaving = resources::member_service(&cluster, rack_a, 1, true);
        leaving
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(contract::DECOMMISSIONED.into(), "false".into());
        let services = [
            resources::member_service(&cluster, rack_a, 0, true),
            leaving,
        ];
        let pods = [pod("c-dc-a-0", true), pod("c-dc-a-1", false)];

        let observed = observe(&cluster, [&sts], &services, &pods);
        assert!(observed.foreign.is_empty());
        let a = &observed.racks["a"];
        assert_eq!(a.replicas, Some(2));
        assert_eq!(
            a.members[&0],
            MemberObserved {
                service: Some(ServiceObserved::default()),
                pod_exists: true,
                pod_ready: true
            }
        );
        assert_eq!(
            a.members[&1],
            MemberObserved {
                service: Some(ServiceObserved {
                    decommissioned: Some("false".into()),
                    replace: None
                }),
                pod_exists: true,
                pod_ready: false
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
        let mut sts = resources::statefulset_for_rack(&cluster, rack_a, 0, &ctx);
        sts.metadata.owner_references = None;
        let mut service = resources::member_service(&cluster, rack_a, 0, true);
        service.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        let mut client = resources::client_service(&cluster);
        client.metadata.owner_references = None;
        // objects of other namespaces are ignored whatever their names
        let mut elsewhere = resources::client_service(&cluster);
        elsewhere.metadata.namespace = Some("other".into());
        elsewhere.metadata.owner_references = None;

        let observed = observe(&cluster, [&sts], &[service, client, elsewhere], &[]);
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
        let sts =
            resources::statefulset_for_rack(&cluster, &cluster.spec.datacenter.racks[0], 3, &ctx);
        cluster.spec.datacenter.name = "renamed".into();
        let observed = observe(&cluster, [&sts], &[], &[]);
        assert_eq!(observed.other_datacenters, vec!["dc".to_string()]);
        assert_eq!(observed.racks["a"].replicas, None);
    }

    #[test]
    fn a_pod_being_deleted_is_not_ready() {
        let cluster = cluster();
        let ctx = BuildContext::default();
        let sts =
            resources::statefulset_for_rack(&cluster, &cluster.spec.datacenter.racks[0], 1, &ctx);
        let mut p = pod("c-dc-a-0", true);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let observed = observe(&cluster, [&sts], &[], &[p]);
        assert!(!observed.racks["a"].members[&0].pod_ready);
    }
}
