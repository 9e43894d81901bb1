//! What every reconcile shares, and the read step: one cluster's objects from the caches (reads only).
//!
//! A reconcile reads only from the caches: the read step finds one
//! cluster's objects by name ([`NameIndex`]) instead of visiting every
//! object of every cluster. Only a write that destroys or shrinks reads
//! afresh from the API server (`recheck`), and observe's read of a
//! supporting object's name the caches do not hold ([`existing`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::cached::{CachedPod, CachedVolume};
use crate::error::Error;
use crate::index::NameIndex;
use crate::metrics::Metrics;
use crate::observe::{Cached, references_config_map};
use crate::resources::{self, BuildContext};

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) statefulsets: Store<StatefulSet>,
    pub(crate) services: Store<Service>,
    pub(crate) pods: Store<CachedPod>,
    pub(crate) pdbs: Store<PodDisruptionBudget>,
    pub(crate) service_accounts: Store<ServiceAccount>,
    pub(crate) roles: Store<Role>,
    pub(crate) role_bindings: Store<RoleBinding>,
    pub(crate) claims: Store<PersistentVolumeClaim>,
    pub(crate) volumes: Store<CachedVolume>,
    pub(crate) nodes: Store<Node>,
    pub(crate) config_maps: Store<ConfigMap>,
    /// The names in the caches a reconcile reads by cluster.
    pub(crate) names: CacheNames,
    pub(crate) recorder: Recorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) build: BuildContext,
    /// [`crate::ControllerArgs::member_restart_timeout_seconds`].
    pub(crate) restart_timeout_seconds: i64,
    /// Every cache holds its first full list.
    pub(crate) synced: Arc<AtomicBool>,
}

/// The names of the objects of the caches that a reconcile reads for one
/// cluster ([`NameIndex`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct CacheNames {
    pub(crate) statefulsets: NameIndex,
    pub(crate) services: NameIndex,
    pub(crate) pods: NameIndex,
    pub(crate) claims: NameIndex,
}

impl Context {
    /// Every cache holds its first full list: before that, deciding from
    /// half-filled caches would recreate what exists and rewrite a correct
    /// status.
    pub(crate) fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// The read step: what the caches hold of `cluster`, found by name (a
    /// superset: observe filters it as it would the whole caches), with
    /// every Node and every ConfigMap.
    pub(crate) fn cached(&self, cluster: &Cluster, namespace: &str) -> Cached {
        let prefix = format!("{}-", cluster.name_any());
        let names = &self.names;
        // Claims are `<template>-<member>`, for the spec's templates.
        let templates: BTreeSet<&str> = cluster
            .spec
            .datacenter
            .racks
            .iter()
            .flat_map(|r| &r.storage.volume_claim_templates)
            .filter_map(|t| t.metadata.name.as_deref())
            .collect();
        let claims: Vec<Arc<PersistentVolumeClaim>> = templates
            .iter()
            .flat_map(|t| {
                names
                    .claims
                    .objects(&self.claims, namespace, &crds::names::pvc_name(t, &prefix))
            })
            .collect();
        let volumes = claims
            .iter()
            .filter_map(|c| c.spec.as_ref()?.volume_name.as_deref())
            .filter_map(|v| self.volumes.get(&ObjectRef::new(v)))
            .collect();
        Cached {
            statefulsets: names
                .statefulsets
                .objects(&self.statefulsets, namespace, &prefix),
            services: names.services.objects(&self.services, namespace, &prefix),
            pods: names.pods.objects(&self.pods, namespace, &prefix),
            claims,
            volumes,
            nodes: self.nodes.state(),
            config_maps: self.config_maps.state(),
        }
    }

    /// What the builders take besides the validated Cluster: the operator's
    /// settings, and the hashes of the overrides ConfigMaps the Cluster
    /// names (a change of one rolls its racks).
    pub(crate) fn build_context(
        &self,
        cluster: &Cluster,
        config_maps: &[Arc<ConfigMap>],
    ) -> BuildContext {
        BuildContext {
            config_map_hashes: config_maps
                .iter()
                .filter(|c| references_config_map(cluster, c))
                .map(|c| (c.name_any(), resources::config_map_hash(c)))
                .collect(),
            ..self.build.clone()
        }
    }
}

#[cfg(test)]
impl Context {
    /// A Context over `client` (a mocked API server in the unit tests),
    /// with empty caches that count as synced; `crate::fixtures` fills them.
    pub(crate) fn test(client: Client) -> Context {
        use kube::runtime::events::Reporter;
        use kube::runtime::reflector;
        Context {
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: crate::apply::FIELD_MANAGER.to_string(),
                    instance: None,
                },
            ),
            client,
            statefulsets: reflector::store().0,
            services: reflector::store().0,
            pods: reflector::store().0,
            pdbs: reflector::store().0,
            service_accounts: reflector::store().0,
            roles: reflector::store().0,
            role_bindings: reflector::store().0,
            claims: reflector::store().0,
            volumes: reflector::store().0,
            nodes: reflector::store().0,
            config_maps: reflector::store().0,
            names: CacheNames::default(),
            metrics: Arc::new(Metrics::new()),
            build: BuildContext::default(),
            restart_timeout_seconds: 600,
            synced: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// The object of `name` as the cache holds it or, when the cache does not
/// (an object without the cluster's labels, or a cache behind), as the API
/// server does: a foreign object costs a read per reconcile, never a
/// failed write.
pub(crate) async fn existing<K>(
    client: &Client,
    namespace: &str,
    store: &Store<K>,
    name: &str,
    kind: &'static str,
) -> Result<Option<Arc<K>>, Error>
where
    K: crate::apply::NamespacedObject,
{
    let reference = ObjectRef::<K>::new(name).within(namespace);
    match store.get(&reference) {
        Some(cached) => Ok(Some(cached)),
        None => Ok(kube::Api::<K>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| Error::GetObject {
                kind,
                name: name.to_string(),
                source,
            })?
            .map(Arc::new)),
    }
}
