//! What every reconcile shares, and the read step: one cluster's objects from the caches (reads only).
//!
//! A reconcile reads only from the caches: the read step finds one
//! cluster's objects by name ([`NameIndex`]) instead of visiting every
//! object of every cluster. Only a write that destroys or shrinks reads
//! afresh from the API server (`recheck`), and observe's read of a
//! supporting object's name the caches do not hold ([`existing`]). The
//! ConfigMap cache holds names and versions only: the content of an
//! overrides ConfigMap the Cluster names is read when the cache shows a
//! version not read yet ([`Context::named_config_maps`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::ListParams;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};

use crate::cached::{CachedConfigMap, CachedPod, CachedVolume, ConfigMapContents};
use crate::error::Error;
use crate::index::NameIndex;
use crate::metrics::Metrics;
use crate::observe::{Cached, references_config_map};
use crate::resources::{self, BuildContext};

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    /// The same API server without kube's retries of 429, 503 and 504:
    /// for evictions, whose 429 is the PodDisruptionBudget's answer (with
    /// `Retry-After: 10`), not a server busy for a moment. With retries,
    /// one refused eviction held its reconcile for 15 attempts, minutes;
    /// the controller waits and asks again at its next reconcile instead.
    pub(crate) evictions: Client,
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
    /// Every ConfigMap's name and version (metadata only).
    pub(crate) config_maps: Store<CachedConfigMap>,
    /// The content of the ConfigMaps the Clusters name, as last read.
    pub(crate) config_map_contents: ConfigMapContents,
    /// The clusters' CA Secrets, in the operator's namespace (labelled
    /// with their Cluster's namespace).
    pub(crate) secrets: Store<Secret>,
    /// The members' ClusterRoleBindings of the clusters with TLS.
    pub(crate) cluster_role_bindings: Store<ClusterRoleBinding>,
    /// Where the CAs are kept and what the certificates say.
    pub(crate) tls: TlsSettings,
    /// What the controller learnt of each cluster's superuser.
    pub(crate) authentication: crate::authentication::Memory,
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

/// The certificate authorities' settings ([`crate::ControllerArgs`]).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The operator's own namespace, where the CA Secrets are kept.
    pub operator_namespace: String,
    /// The cluster's DNS domain, in the members' certificates' names.
    pub cluster_domain: String,
    /// How long a member certificate lives, in seconds.
    pub member_certificate_lifetime_secs: u64,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            operator_namespace: "cassandra-operator".to_string(),
            cluster_domain: "cluster.local".to_string(),
            member_certificate_lifetime_secs:
                crds::contract::tls::DEFAULT_MEMBER_CERTIFICATE_LIFETIME_SECS,
        }
    }
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
    /// every Node, and the overrides ConfigMaps it names
    /// ([`Context::named_config_maps`]).
    pub(crate) async fn cached(&self, cluster: &Cluster, namespace: &str) -> Result<Cached, Error> {
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
        Ok(Cached {
            statefulsets: names
                .statefulsets
                .objects(&self.statefulsets, namespace, &prefix),
            services: names.services.objects(&self.services, namespace, &prefix),
            pods: names.pods.objects(&self.pods, namespace, &prefix),
            claims,
            volumes,
            nodes: self.nodes.state(),
            config_maps: self.named_config_maps(cluster, namespace).await?,
        })
    }

    /// The overrides ConfigMaps `cluster` names (`configMapName`) that the
    /// cache shows, with their content: as held when it was read at the
    /// version the cache shows, else read now. One the cache does not show
    /// is missing, as it was when the cache held every ConfigMap whole (no
    /// read: the watch's event of its creation brings a reconcile). One
    /// gone between the cache and the read is missing too.
    ///
    /// The read is a list narrowed to the name (`fieldSelector`), not a
    /// `get`: the watch needs `list` anyway, and so the ClusterRole grants
    /// no more than `list` and `watch` on ConfigMaps.
    pub(crate) async fn named_config_maps(
        &self,
        cluster: &Cluster,
        namespace: &str,
    ) -> Result<Vec<Arc<ConfigMap>>, Error> {
        let names: BTreeSet<&str> = cluster
            .spec
            .datacenter
            .racks
            .iter()
            .filter_map(|r| r.config_map_name.as_deref())
            .collect();
        let mut named = Vec::new();
        for name in names {
            let Some(cached) = self
                .config_maps
                .get(&ObjectRef::new(name).within(namespace))
            else {
                continue;
            };
            let version = cached.metadata.resource_version.as_deref().unwrap_or("");
            if let Some(content) = self.config_map_contents.get(namespace, name, version) {
                named.push(content);
                continue;
            }
            let read = Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                .list(&ListParams::default().fields(&format!("metadata.name={name}")))
                .await
                .map_err(|source| Error::GetObject {
                    kind: "ConfigMap",
                    name: name.to_string(),
                    source,
                })?;
            if let Some(config_map) = read
                .items
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
            {
                named.push(self.config_map_contents.insert(config_map));
            }
        }
        Ok(named)
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
            evictions: client.clone(),
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
            config_map_contents: ConfigMapContents::default(),
            secrets: reflector::store().0,
            cluster_role_bindings: reflector::store().0,
            tls: TlsSettings::default(),
            authentication: Default::default(),
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

#[cfg(test)]
mod tests {
    //! The read of the overrides ConfigMaps against a mocked API server:
    //! only the ConfigMaps a Cluster names are read, each once per version
    //! the watch shows, and never one the watch does not show.

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::fixtures::{self, Expect, Reply, TestCluster};

    const LIST: &str = "/api/v1/namespaces/db/configmaps";

    fn config_map(namespace: &str, name: &str, version: &str, text: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                annotations: Some([("note".to_string(), "x".repeat(1000))].into()),
                ..Default::default()
            },
            data: Some([("cassandra.yaml".to_string(), text.to_string())].into()),
            ..Default::default()
        }
    }

    /// What the metadata watch brings of a ConfigMap, as the cache keeps it.
    fn watched(config_map: &ConfigMap) -> CachedConfigMap {
        let meta = &config_map.metadata;
        CachedConfigMap {
            metadata: ObjectMeta {
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                resource_version: meta.resource_version.clone(),
                ..Default::default()
            },
        }
    }

    /// Cluster c in db whose rack b names `tuning`, twice (two racks).
    fn cluster() -> Cluster {
        let mut cluster = Cluster::test().rack("a", 1).rack("b", 1).build();
        for rack in &mut cluster.spec.datacenter.racks {
            rack.config_map_name = Some("tuning".into());
        }
        cluster
    }

    fn read(name: &str) -> Expect {
        Expect::get(LIST).query(&[("fieldSelector", &format!("metadata.name={name}"))])
    }

    /// A Context whose ConfigMap cache shows `config_maps` (their names and
    /// versions), and the writer that follows their changes.
    fn with_config_maps(
        mut ctx: Context,
        config_maps: &[&ConfigMap],
    ) -> (Context, reflector::store::Writer<CachedConfigMap>) {
        let (store, mut writer) = reflector::store();
        for c in config_maps {
            let event = Event::Apply(watched(c));
            ctx.config_map_contents.apply(&event);
            writer.apply_watcher_event(&event);
        }
        ctx.config_maps = store;
        (ctx, writer)
    }

    #[tokio::test]
    async fn a_named_config_map_is_read_once_per_version_and_no_other_is_read() {
        let tuning = config_map("db", "tuning", "7", "concurrent_reads: 16\n");
        let tuned = config_map("db", "tuning", "8", "concurrent_reads: 32\n");
        // Not named: another ConfigMap of the namespace, and one of the
        // same name in another namespace.
        let unrelated = config_map("db", "dashboards", "3", &"x".repeat(100_000));
        let elsewhere = config_map("other", "tuning", "4", "start_rpc: true\n");
        let (ctx, api) = fixtures::context();
        let (ctx, mut writer) = with_config_maps(ctx, &[&tuning, &unrelated, &elsewhere]);
        let api = api.expect([
            read("tuning").reply(Reply::list(std::slice::from_ref(&tuning))),
            read("tuning").reply(Reply::list(std::slice::from_ref(&tuned))),
        ]);
        let cluster = cluster();

        let first = ctx.named_config_maps(&cluster, "db").await.unwrap();
        assert_eq!(first.len(), 1, "one ConfigMap, named by two racks");
        assert_eq!(first[0].data, tuning.data);
        assert_eq!(
            first[0].metadata.annotations, None,
            "only the content is kept"
        );
        // The same version: no read.
        let again = ctx.named_config_maps(&cluster, "db").await.unwrap();
        assert_eq!(again[0].data, tuning.data);
        // Changed: the watch shows version 8, the content is read again.
        let event = Event::Apply(watched(&tuned));
        ctx.config_map_contents.apply(&event);
        writer.apply_watcher_event(&event);
        let changed = ctx.named_config_maps(&cluster, "db").await.unwrap();
        assert_eq!(changed[0].data, tuned.data);
        assert_eq!(
            ctx.build_context(&cluster, &changed).config_map_hashes["tuning"],
            resources::config_map_hash(&tuned),
            "the hash of the content, as when the cache held it whole"
        );
        assert_eq!(ctx.config_map_contents.len(), 1);
        api.done(ctx).await;
    }

    #[tokio::test]
    async fn a_config_map_the_watch_does_not_show_is_missing_without_a_read() {
        let (ctx, api) = fixtures::context();
        let unrelated = config_map("db", "dashboards", "3", "a: b\n");
        let (ctx, _writer) = with_config_maps(ctx, &[&unrelated]);
        let api = api.expect([]);
        let named = ctx.named_config_maps(&cluster(), "db").await.unwrap();
        assert!(named.is_empty());
        let build = ctx.build_context(&cluster(), &named);
        assert!(
            build.config_map_hashes.is_empty(),
            "a missing one has no hash"
        );
        api.done(ctx).await;
    }

    #[tokio::test]
    async fn a_config_map_gone_before_its_read_is_missing_and_a_failed_read_fails() {
        let tuning = config_map("db", "tuning", "7", "concurrent_reads: 16\n");
        let (ctx, api) = fixtures::context();
        let (ctx, _writer) = with_config_maps(ctx, &[&tuning]);
        let api = api.expect([
            read("tuning").reply(Reply::list::<ConfigMap>(&[])),
            read("tuning").reply(Reply::Status(500, "InternalError")),
        ]);
        let cluster = cluster();
        assert!(
            ctx.named_config_maps(&cluster, "db")
                .await
                .unwrap()
                .is_empty()
        );
        // A read that fails is no missing ConfigMap (that would drop the
        // hash from the template, and so roll the rack): the reconcile
        // fails, and is retried.
        let failed = ctx.named_config_maps(&cluster, "db").await;
        assert!(
            matches!(
                failed,
                Err(Error::GetObject {
                    kind: "ConfigMap",
                    ..
                })
            ),
            "{failed:?}"
        );
        api.done(ctx).await;
    }
}
