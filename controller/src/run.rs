//! Runs the controller (I/O): watches Clusters and their objects into caches; reconciles on change.
//!
//! Each kind is watched once: the same stream fills the cache a reconcile
//! reads and triggers the reconciles (owned objects by owner reference;
//! Pods, claims, volumes, Nodes and ConfigMaps through mappers that find
//! the clusters they concern). Each cache keeps only what observe and
//! apply read of an object (the strip functions): at a thousand clusters
//! the rest was most of the controller's memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crds::v1alpha1::Cluster;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::ControllerArgs;
use crate::apply::FIELD_MANAGER;
use crate::cached::{CachedConfigMap, CachedPod, CachedVolume, ConfigMapContents};
use crate::context::{CacheNames, Context, TlsSettings};
use crate::error::Error;
use crate::index::NameIndex;
use crate::metrics::{ErrorLabels, Metrics};
use crate::observe::{claim_of_volume, names_config_map, volume_pinned_to};
use crate::own_image::{OwnImageError, resolve, source};
use crate::reconcile::reconcile;
use crate::resources::BuildContext;

/// Why the controller did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Controller(#[from] Error),
    #[error(transparent)]
    OwnImage(#[from] OwnImageError),
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: ControllerArgs) -> Result<(), RunError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::Connect(kube::Error::InferConfig(e)))?;
    let client = Client::try_from(config.clone()).map_err(Error::Connect)?;
    let mut no_retry = config;
    no_retry.default_retry = false;
    let evictions = Client::try_from(no_retry).map_err(Error::Connect)?;
    // Before anything else: a controller that cannot tell which image its
    // members must run does not start (see own_image).
    let operator_image = resolve(
        &client,
        source(
            args.operator_image.clone(),
            std::env::var("POD_NAME").ok(),
            std::env::var("POD_NAMESPACE").ok(),
        ),
    )
    .await?;
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn(crate::metrics::serve(
        args.metrics_addr,
        metrics.clone(),
        ready.clone(),
    ));

    fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    // Everything the controller creates carries `app: rook-cassandra`: the
    // caches hold only those objects, not every Pod and Service of the cluster.
    let owned = watcher::Config::default().labels(&format!(
        "{}={}",
        crds::labels::APP,
        crds::labels::APP_NAME
    ));

    macro_rules! cache {
        ($kind:ty) => {
            cache!($kind, strip_metadata::<$kind>, NameIndex::default())
        };
        ($kind:ty, $strip:expr, $names:expr) => {{
            let (reader, writer) = reflector::store::<$kind>();
            let names = $names;
            let stream = watcher(api::<$kind>(&client, &args.namespace), owned.clone())
                .default_backoff()
                .modify($strip)
                .map_ok(move |event| {
                    names.apply(&event);
                    event
                })
                .reflect(writer)
                .touched_objects();
            (reader, stream)
        }};
    }
    // The kinds a reconcile reads one cluster's objects of, by name.
    let names = CacheNames::default();
    let (statefulsets, sts_stream) =
        cache!(StatefulSet, strip_statefulset, names.statefulsets.clone());
    let (services, svc_stream) = cache!(Service, strip_service, names.services.clone());
    let (pods, pod_stream) = cache!(CachedPod, strip_pod, names.pods.clone());
    let (pdbs, pdb_stream) = cache!(PodDisruptionBudget);
    let (service_accounts, sa_stream) = cache!(ServiceAccount);
    let (roles, role_stream) = cache!(Role);
    let (role_bindings, rb_stream) = cache!(RoleBinding);
    // The StatefulSet controller gives claims the selector's labels.
    let (claims, claim_stream) = cache!(PersistentVolumeClaim, strip_claim, names.claims.clone());
    // The racks' overrides ConfigMaps: names and versions of all, content
    // of the named ones (config_map_watch).
    let config_map_contents = ConfigMapContents::default();
    let (config_maps, config_map_stream) =
        config_map_watch(&client, &args.namespace, config_map_contents.clone());
    // Volumes and Nodes carry none of ours: a lost local disk is a volume
    // whose Node is gone (DESIGN.md section 5).
    macro_rules! cluster_cache {
        ($kind:ty, $strip:expr) => {{
            let (reader, writer) = reflector::store::<$kind>();
            let stream = watcher(
                Api::<$kind>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify($strip)
            .reflect(writer)
            .touched_objects();
            (reader, stream)
        }};
    }
    let (volumes, volume_stream) = cluster_cache!(CachedVolume, strip_volume);
    let (nodes, node_stream) = cluster_cache!(Node, strip_node);
    // What the controller keeps of TLS clusters outside their namespaces,
    // by their labels: the CA Secrets of the operator's namespace (no
    // other Secret) and the members' ClusterRoleBindings.
    let tls = TlsSettings {
        operator_namespace: args.operator_namespace.clone(),
        cluster_domain: args.cluster_domain.clone(),
        member_certificate_lifetime_secs: args.member_certificate_lifetime.as_secs(),
    };
    let outside =
        watcher::Config::default().labels(&crate::sweep::selector(args.namespace.as_deref()));
    let (secrets, secret_stream) = {
        let (reader, writer) = reflector::store::<Secret>();
        let stream = watcher(
            Api::<Secret>::namespaced(client.clone(), &tls.operator_namespace),
            outside.clone(),
        )
        .default_backoff()
        .modify(strip_metadata::<Secret>)
        .reflect(writer)
        .touched_objects();
        (reader, stream)
    };
    let (cluster_role_bindings, binding_stream) = {
        let (reader, writer) = reflector::store::<ClusterRoleBinding>();
        let stream = watcher(Api::<ClusterRoleBinding>::all(client.clone()), outside)
            .default_backoff()
            .modify(strip_metadata::<ClusterRoleBinding>)
            .reflect(writer)
            .touched_objects();
        (reader, stream)
    };

    let ctx = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client: client.clone(),
        evictions,
        statefulsets: statefulsets.clone(),
        services: services.clone(),
        pods: pods.clone(),
        pdbs: pdbs.clone(),
        service_accounts: service_accounts.clone(),
        roles: roles.clone(),
        role_bindings: role_bindings.clone(),
        claims: claims.clone(),
        volumes: volumes.clone(),
        nodes: nodes.clone(),
        config_maps: config_maps.clone(),
        config_map_contents,
        secrets: secrets.clone(),
        cluster_role_bindings: cluster_role_bindings.clone(),
        tls,
        authentication: Default::default(),
        names,
        metrics,
        build: BuildContext {
            operator_image,
            ..BuildContext::default()
        },
        restart_timeout_seconds: i64::try_from(args.member_restart_timeout_seconds)
            .unwrap_or(i64::MAX),
        synced: ready.clone(),
    });

    let clusters: Api<Cluster> = api(&client, &args.namespace);
    let (clusters_reader, clusters_writer) = reflector::store::<Cluster>();
    // A Cluster deleted, or a relist (which may hide a deletion): what it
    // kept outside its namespace is swept.
    let sweep_prompt = Arc::new(tokio::sync::Notify::new());
    let cluster_stream = {
        let prompt = sweep_prompt.clone();
        watcher(clusters, watcher::Config::default())
            .default_backoff()
            .modify(strip_metadata::<Cluster>)
            .map_ok(move |event| {
                if matches!(event, watcher::Event::Delete(_) | watcher::Event::InitDone) {
                    prompt.notify_one();
                }
                event
            })
            .reflect(clusters_writer)
            .applied_objects()
    };
    let controller = Controller::for_stream(cluster_stream, clusters_reader).with_config(
        kube::runtime::controller::Config::default().concurrency(args.concurrent_reconciles),
    );
    let caches_ready = {
        let clusters_store = controller.store();
        let (sts, svc, pod, pdb, sa, role, rb) = (
            statefulsets,
            services,
            pods,
            pdbs,
            service_accounts,
            roles,
            role_bindings,
        );
        let (pvc, pv, node, cm) = (claims, volumes, nodes, config_maps);
        let (secret, binding) = (secrets, cluster_role_bindings);
        async move {
            // Every cache must hold a first full list before the reconciles'
            // reads mean anything.
            synced(&clusters_store).await;
            tracing::debug!("clusters cache synced");
            synced(&sts).await;
            tracing::debug!("statefulsets cache synced");
            synced(&svc).await;
            tracing::debug!("services cache synced");
            synced(&pod).await;
            tracing::debug!("pods cache synced");
            synced(&pdb).await;
            tracing::debug!("pdbs cache synced");
            synced(&sa).await;
            tracing::debug!("service accounts cache synced");
            synced(&role).await;
            tracing::debug!("roles cache synced");
            synced(&rb).await;
            tracing::debug!("role bindings cache synced");
            synced(&pvc).await;
            synced(&pv).await;
            synced(&node).await;
            tracing::debug!("claims, volumes and nodes caches synced");
            synced(&cm).await;
            tracing::debug!("config maps cache synced");
            synced(&secret).await;
            synced(&binding).await;
            tracing::debug!("CA secrets and members' cluster role bindings caches synced");
        }
    };
    tokio::spawn(async move {
        caches_ready.await;
        ready.store(true, Ordering::Relaxed);
        info!("caches synced");
    });

    let pod_to_cluster = |pod: CachedPod| {
        let namespace = pod.namespace();
        pod.labels().get(crds::labels::CLUSTER).map(|name| {
            ObjectRef::<Cluster>::new(name).within(namespace.as_deref().unwrap_or_default())
        })
    };
    // A claim, a volume or a Node changes what a member's disk is, and only
    // that member's: a claim concerns its cluster; a volume, the cluster of
    // the claim it is bound to; a Node, the clusters of the volumes pinned
    // to it (a lost local disk is a volume whose Node is gone). Not every
    // Cluster: with a thousand of them, each volume's binding and each
    // Node's update would reconcile them all.
    fn cluster_of_claim(claim: &PersistentVolumeClaim) -> Option<ObjectRef<Cluster>> {
        let namespace = claim.namespace();
        claim.labels().get(crds::labels::CLUSTER).map(|name| {
            ObjectRef::<Cluster>::new(name).within(namespace.as_deref().unwrap_or_default())
        })
    }
    fn cluster_of_volume(
        pv: &CachedVolume,
        claims: &Store<PersistentVolumeClaim>,
    ) -> Option<ObjectRef<Cluster>> {
        let (namespace, name) = claim_of_volume(pv)?;
        cluster_of_claim(
            claims
                .get(&ObjectRef::new(&name).within(&namespace))?
                .as_ref(),
        )
    }
    let claim_to_cluster = |claim: PersistentVolumeClaim| cluster_of_claim(&claim);
    let volume_to_cluster = {
        let claims = ctx.claims.clone();
        move |pv: CachedVolume| cluster_of_volume(&pv, &claims)
    };
    let node_to_clusters = {
        let (claims, volumes) = (ctx.claims.clone(), ctx.volumes.clone());
        move |node: Node| {
            volumes
                .state()
                .iter()
                .filter(|pv| volume_pinned_to(pv, &node))
                .filter_map(|pv| cluster_of_volume(pv, &claims))
                .collect::<std::collections::HashSet<_>>()
        }
    };
    // A ConfigMap change concerns the Clusters that name it as overrides,
    // and a TLS cluster's CA ConfigMap its Cluster.
    let clusters_of_config_map = {
        let clusters = controller.store();
        move |config_map: CachedConfigMap| {
            clusters
                .state()
                .iter()
                .filter(|c| {
                    names_config_map(c, &config_map.metadata)
                        || (crate::resources::tls_enabled(c)
                            && c.metadata.namespace == config_map.metadata.namespace
                            && config_map.metadata.name.as_deref()
                                == Some(
                                    crds::contract::tls::ca_config_map_name(&c.name_any()).as_str(),
                                ))
                })
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    // A CA Secret or a members' binding concerns the Cluster its labels
    // name.
    fn cluster_of_outside<K: Resource>(object: K) -> Option<ObjectRef<Cluster>> {
        let (namespace, name) = crate::authority::names_cluster(object.meta().labels.as_ref()?)?;
        Some(ObjectRef::<Cluster>::new(&name).within(&namespace))
    }
    tokio::spawn(crate::sweep::run(
        ctx.clone(),
        controller.store(),
        args.namespace.clone(),
        sweep_prompt,
    ));
    tokio::spawn(crate::signer::run(
        client.clone(),
        Arc::new(crate::signer::Signer {
            ctx: ctx.clone(),
            clusters: controller.store(),
            namespace: args.namespace.clone(),
        }),
    ));
    info!(
        namespace = args.namespace.as_deref().unwrap_or("*"),
        "controller starting"
    );
    controller
        .owns_stream(sts_stream)
        .owns_stream(svc_stream)
        .owns_stream(pdb_stream)
        .owns_stream(sa_stream)
        .owns_stream(role_stream)
        .owns_stream(rb_stream)
        .watches_stream(pod_stream, pod_to_cluster)
        .watches_stream(claim_stream, claim_to_cluster)
        .watches_stream(volume_stream, volume_to_cluster)
        .watches_stream(node_stream, node_to_clusters)
        .watches_stream(config_map_stream, clusters_of_config_map)
        .watches_stream(secret_stream, cluster_of_outside)
        .watches_stream(binding_stream, cluster_of_outside)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((cluster, _)) => tracing::debug!(cluster = %cluster.name, "reconciled"),
                Err(e) => warn!(error = %e, "reconcile failed"),
            }
        })
        .await;
    info!("controller stopped");
    Ok(())
}

/// The ConfigMap watch: the racks' overrides ConfigMaps are the user's,
/// named by the Cluster and without our label, so it covers every
/// ConfigMap of the watched namespace(s), to roll a rack on a change of
/// its overrides and refuse a key that would defeat the safety rules as
/// soon as it is written. Metadata only, and of that the name and version
/// ([`CachedConfigMap`]): a cluster's other ConfigMaps (a CA bundle, a
/// dashboard, an application's data) cost the controller next to nothing.
/// The content of the ConfigMaps the Clusters name is read when they
/// change ([`Context::named_config_maps`]), and `contents` follows the
/// watch to drop what is outdated.
pub(crate) fn config_map_watch(
    client: &Client,
    namespace: &Option<String>,
    contents: ConfigMapContents,
) -> (
    Store<CachedConfigMap>,
    impl futures::Stream<Item = Result<CachedConfigMap, watcher::Error>> + use<>,
) {
    let api: Api<CachedConfigMap> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (reader, writer) = reflector::store::<CachedConfigMap>();
    // Pages of 50, not kube's 500: the controller holds a page whole,
    // twice, while it reads it. A metadata-only page is small, unless the
    // ConfigMaps were written by `kubectl apply` (up to 256 KiB of
    // annotations each): at start among 200 such ConfigMaps of 250 KiB,
    // the controller peaked at 136 MiB with pages of 500, 111 MiB with
    // 100, 79 MiB with 50 (bench-configmaps, a debug build), under
    // a 128 MiB limit. 10,000 ConfigMaps take 200 requests to list.
    let stream = watcher(api, watcher::Config::default().page_size(50))
        .default_backoff()
        .map_ok(move |event| {
            contents.apply(&event);
            event
        })
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// What every cache keeps of an object: all but `managedFields`, which
/// the controller never reads and which is often the largest part of an
/// object (one entry per field manager, each listing its fields).
fn strip_metadata<K: Resource>(object: &mut K) {
    object.managed_fields_mut().clear();
}

/// What the Pod cache keeps beyond its type ([`CachedPod`]): not the
/// annotations nor the owner references, which observe never reads.
pub(crate) fn strip_pod(pod: &mut CachedPod) {
    strip_metadata(pod);
    pod.metadata.annotations = None;
    pod.metadata.owner_references = None;
}

/// What the Service cache keeps: the metadata (the sidecar's records are
/// its labels and annotations; the apply reads the applied hash and the
/// owner) and the cluster IP, a member's address. The ports and selector
/// are the applied hash's to compare, not the cache's.
pub(crate) fn strip_service(service: &mut Service) {
    strip_metadata(service);
    if let Some(spec) = service.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::ServiceSpec {
            cluster_ip: spec.cluster_ip.take(),
            ..Default::default()
        };
    }
    service.status = None;
}

/// What the claim cache keeps: the name and labels (whose cluster and
/// member it is) and the volume it is bound to.
pub(crate) fn strip_claim(claim: &mut PersistentVolumeClaim) {
    strip_metadata(claim);
    claim.metadata.annotations = None;
    claim.metadata.finalizers = None;
    if let Some(spec) = claim.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            volume_name: spec.volume_name.take(),
            ..Default::default()
        };
    }
    claim.status = None;
}

/// What the volume cache keeps beyond its type ([`CachedVolume`]): not the
/// labels, annotations nor finalizers.
pub(crate) fn strip_volume(volume: &mut CachedVolume) {
    strip_metadata(volume);
    volume.metadata.labels = None;
    volume.metadata.annotations = None;
    volume.metadata.finalizers = None;
}

/// What the StatefulSet cache keeps: what observe and the apply read
/// (metadata with the applied hash, replicas, claim templates, update
/// strategy, the containers' names and images, the status). The Pod
/// template's volumes, environment and probes are most of a StatefulSet,
/// and a thousand of them were most of the controller's memory.
pub(crate) fn strip_statefulset(sts: &mut StatefulSet) {
    strip_metadata(sts);
    if let Some(spec) = sts.spec.as_mut() {
        let (containers, volumes) = spec
            .template
            .spec
            .take()
            .map(|pod| (names_and_images(pod.containers), tls_volume(pod.volumes)))
            .unwrap_or_default();
        spec.template = k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: None,
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers,
                volumes,
                ..Default::default()
            }),
        };
    }
}

/// Containers as the caches keep them: name and image (observe finds the
/// database's version by the container's name), and the encryption the
/// template gives its members ([`crate::encryption::template_encryption`]).
fn names_and_images(
    containers: Vec<k8s_openapi::api::core::v1::Container>,
) -> Vec<k8s_openapi::api::core::v1::Container> {
    containers
        .into_iter()
        .map(|c| k8s_openapi::api::core::v1::Container {
            name: c.name,
            image: c.image,
            env: c
                .env
                .map(|env| {
                    env.into_iter()
                        .filter(|e| e.name == crds::contract::tls::ENCRYPTION_ENV)
                        .collect::<Vec<_>>()
                })
                .filter(|env| !env.is_empty()),
            ..Default::default()
        })
        .collect()
}

/// Of a template's volumes, the TLS volume's name alone: whether its
/// members have TLS at all.
fn tls_volume(
    volumes: Option<Vec<k8s_openapi::api::core::v1::Volume>>,
) -> Option<Vec<k8s_openapi::api::core::v1::Volume>> {
    volumes
        .into_iter()
        .flatten()
        .find(|v| v.name == crate::resources::TLS_VOLUME)
        .map(|v| {
            vec![k8s_openapi::api::core::v1::Volume {
                name: v.name,
                ..Default::default()
            }]
        })
}

/// What the Node cache keeps: the name and labels (a volume's Node is
/// matched by name or hostname label) and whether it is cordoned; a Node's
/// status (images, addresses, capacity) is never read.
fn strip_node(node: &mut Node) {
    strip_metadata(node);
    node.metadata.annotations = None;
    // Whether it is cordoned is all the spec says that matters: a drain
    // while data moves is warned of.
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable);
    node.spec = unschedulable.map(|unschedulable| k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(unschedulable),
        ..Default::default()
    });
    node.status = None;
}

/// Waits until a cache holds its first full list. `wait_until_ready` is
/// polled again and again: kube-runtime's readiness signal keeps only the
/// last waiter's waker, and the Controller waits on the same store.
async fn synced<K>(store: &Store<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(result) =
            tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await
        {
            if result.is_err() {
                warn!("a cache's writer was dropped");
            }
            return;
        }
    }
}

fn error_policy(_cluster: Arc<Cluster>, error: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics
        .errors
        .get_or_create(&ErrorLabels {
            kind: error.kind().to_string(),
        })
        .inc();
    Requeue::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use http::{Request, Response, header::ACCEPT};
    use kube::client::Body;
    use serde_json::json;

    use super::*;

    /// The ConfigMap watch asks the API server for metadata only (its list,
    /// in pages of 50, and its watch), so that no ConfigMap's content
    /// reaches the controller through it, and keeps of each the name and
    /// version.
    #[tokio::test]
    async fn the_config_map_watch_asks_for_metadata_only_and_keeps_names_and_versions() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (store, stream) = config_map_watch(&client, &None, ConfigMapContents::default());
        let first = tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            let first = stream.next().await;
            // The watch that follows the list.
            let _ = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
            first
        });
        let mut handle = Box::pin(handle);
        let (list, respond) = handle.next_request().await.expect("the list");
        assert_eq!(list.uri().path(), "/api/v1/configmaps");
        assert!(
            list.uri().query().unwrap_or_default().contains("limit=50"),
            "pages of 50: {}",
            list.uri()
        );
        assert_eq!(
            list.headers()[ACCEPT],
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        );
        let applied = "x".repeat(100_000);
        respond.send_response(
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(
                    json!({
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadataList",
                        "metadata": {"resourceVersion": "10"},
                        "items": [{
                            "apiVersion": "meta.k8s.io/v1",
                            "kind": "PartialObjectMetadata",
                            "metadata": {"namespace": "db", "name": "tuning",
                                "resourceVersion": "7", "uid": "u",
                                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied},
                                "managedFields": [{"manager": "kubectl"}]}
                        }]
                    })
                    .to_string()
                    .into_bytes(),
                ))
                .unwrap(),
        );
        let (watch, _respond) = handle.next_request().await.expect("the watch");
        assert!(
            watch
                .uri()
                .query()
                .unwrap_or_default()
                .contains("watch=true"),
            "{}",
            watch.uri()
        );
        assert_eq!(
            watch.headers()[ACCEPT],
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
        );
        let seen = first.await.unwrap().expect("an object").expect("no error");
        assert_eq!(seen.metadata.name.as_deref(), Some("tuning"));
        let kept = store
            .get(&ObjectRef::new("tuning").within("db"))
            .expect("in the cache");
        assert_eq!(
            serde_json::to_value(&kept.metadata).unwrap(),
            json!({"namespace": "db", "name": "tuning", "resourceVersion": "7"})
        );
    }
}
