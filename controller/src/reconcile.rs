//! The reconcile loop (I/O): reflector caches of the cluster's objects, the
//! pipeline read → validate → build → decide → apply → status, Events, and
//! the kube-runtime Controller that runs it.
//!
//! A reconcile reads only from the caches. The builders make every object
//! in full from the validated Cluster, each with a hash of itself in an
//! annotation; an object is written only when it is missing (created) or
//! its cached hash differs (server-side apply with the operator's field
//! manager, forcing its fields; a StatefulSet's replicas are never
//! applied: the one-member-at-a-time steps own them). Besides, it writes
//! what the decision step asks for (one scale step, one record of intent,
//! one eviction, one deletion), an Event for each action and for each new
//! refusal, and the status when it changed: a cluster with nothing to do
//! costs zero writes. Before a write that destroys or shrinks (a claim, a
//! member Service, a Pod, fewer replicas), the apply step reads the
//! objects it depends on afresh from the API server and does nothing
//! unless they still say what the decision read from the caches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crds::contract;
use crds::v1alpha1::{CONDITION_DEGRADED, Cluster, ClusterStatus};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, ObjectReference, PersistentVolumeClaim, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use tracing::{info, warn};

use crate::ControllerArgs;
use crate::cached::{CachedPod, CachedVolume};
use crate::decide::{Action, Observed, Refusal, WaitReason, after_member_service_created, decide};
use crate::index::NameIndex;
use crate::metrics::{ClusterLabels, ErrorLabels, MemberOperationLabels, Metrics};
use crate::observe::{
    Storage, claim_of_volume, observe, overdue_restarts, owned_by, references_config_map,
    refused_overrides, volume_hostnames, volume_pinned_to,
};
use crate::resources::{self, BuildContext};
use crate::status::{Outcome, compute_status, refusal_reason};
use crate::validated::{ValidCluster, validate};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "cassandra-operator";

/// A reconcile step that failed.
#[derive(Debug, Error)]
pub enum Error {
    /// Creating an object failed.
    #[error("creating {kind} {name}: {source}")]
    CreateObject {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    /// Applying an object (server-side apply) failed.
    #[error("applying {kind} {name}: {source}")]
    ApplyObject {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    /// Reading an object that was in the way failed.
    #[error("reading {kind} {name}: {source}")]
    GetObject {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    /// Scaling a rack's StatefulSet failed.
    #[error("scaling StatefulSet {name} to {replicas}: {source}")]
    ScaleStatefulSet {
        name: String,
        replicas: i32,
        source: kube::Error,
    },
    /// Applying a rack's StatefulSet (server-side apply) failed.
    #[error("applying StatefulSet {name}: {source}")]
    ApplyStatefulSet { name: String, source: kube::Error },
    /// Evicting a member's Pod for a roll failed.
    #[error("evicting Pod {name}: {source}")]
    EvictPod { name: String, source: kube::Error },
    /// Writing the status failed.
    #[error("patching the status of {name}: {source}")]
    PatchStatus { name: String, source: kube::Error },
    /// Writing a record of intent on a member Service failed.
    #[error("patching member Service {name}: {source}")]
    PatchMemberService { name: String, source: kube::Error },
    /// Deleting an object failed.
    #[error("deleting {kind} {name}: {source}")]
    DeleteObject {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    /// The Cluster has no namespace (a cluster-scoped object reached a
    /// namespaced controller).
    #[error("cluster {0} has no namespace")]
    NoNamespace(String),
    /// Connecting to the API server failed.
    #[error("connecting to the Kubernetes API: {0}")]
    Connect(#[source] kube::Error),
}

impl Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::CreateObject { .. } => "CreateObject",
            Error::ApplyObject { .. } => "ApplyObject",
            Error::GetObject { .. } => "GetObject",
            Error::ScaleStatefulSet { .. } => "ScaleStatefulSet",
            Error::ApplyStatefulSet { .. } => "ApplyStatefulSet",
            Error::EvictPod { .. } => "EvictPod",
            Error::PatchStatus { .. } => "PatchStatus",
            Error::PatchMemberService { .. } => "PatchMemberService",
            Error::DeleteObject { .. } => "DeleteObject",
            Error::NoNamespace(_) => "NoNamespace",
            Error::Connect(_) => "Connect",
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    statefulsets: Store<StatefulSet>,
    services: Store<Service>,
    pods: Store<CachedPod>,
    pdbs: Store<PodDisruptionBudget>,
    service_accounts: Store<ServiceAccount>,
    roles: Store<Role>,
    role_bindings: Store<RoleBinding>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<CachedVolume>,
    nodes: Store<Node>,
    config_maps: Store<ConfigMap>,
    /// The names in the caches a reconcile reads by cluster.
    names: CacheNames,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    build: BuildContext,
    /// [`crate::ControllerArgs::member_restart_timeout_seconds`].
    restart_timeout_seconds: i64,
    /// Every cache holds its first full list.
    synced: Arc<AtomicBool>,
}

/// The names of the objects of the caches that a reconcile reads for one
/// cluster ([`NameIndex`]).
#[derive(Debug, Clone, Default)]
struct CacheNames {
    statefulsets: NameIndex,
    services: NameIndex,
    pods: NameIndex,
    claims: NameIndex,
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: ControllerArgs) -> Result<(), Error> {
    let client = Client::try_default().await.map_err(Error::Connect)?;
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
    // The racks' overrides ConfigMaps are the user's, without our label:
    // every ConfigMap of the watched namespace(s), to refuse a key that
    // would defeat the safety rules as soon as it is written.
    let (config_maps, config_map_stream) = {
        let (reader, writer) = reflector::store::<ConfigMap>();
        let stream = watcher(
            api::<ConfigMap>(&client, &args.namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .touched_objects();
        (reader, stream)
    };
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

    let ctx = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client: client.clone(),
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
        names,
        metrics,
        build: BuildContext {
            operator_image: args.operator_image.clone(),
            ..BuildContext::default()
        },
        restart_timeout_seconds: i64::try_from(args.member_restart_timeout_seconds)
            .unwrap_or(i64::MAX),
        synced: ready.clone(),
    });

    let clusters: Api<Cluster> = api(&client, &args.namespace);
    let (clusters_reader, clusters_writer) = reflector::store::<Cluster>();
    let cluster_stream = watcher(clusters, watcher::Config::default())
        .default_backoff()
        .modify(strip_metadata::<Cluster>)
        .reflect(clusters_writer)
        .applied_objects();
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
    // A ConfigMap change concerns the Clusters that name it as overrides.
    let clusters_of_config_map = {
        let clusters = controller.store();
        move |config_map: ConfigMap| {
            clusters
                .state()
                .iter()
                .filter(|c| references_config_map(c, &config_map))
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        }
    };
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
        let containers = spec
            .template
            .spec
            .take()
            .map(|pod| names_and_images(pod.containers))
            .unwrap_or_default();
        spec.template = k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: None,
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers,
                ..Default::default()
            }),
        };
    }
}

/// Containers as the caches keep them: name and image (observe finds the
/// database's version by the container's name).
fn names_and_images(
    containers: Vec<k8s_openapi::api::core::v1::Container>,
) -> Vec<k8s_openapi::api::core::v1::Container> {
    containers
        .into_iter()
        .map(|c| k8s_openapi::api::core::v1::Container {
            name: c.name,
            image: c.image,
            ..Default::default()
        })
        .collect()
}

/// What the Node cache keeps: the name and labels (a volume's Node is
/// matched by name or hostname label); a Node's status (images,
/// addresses, capacity) is never read.
fn strip_node(node: &mut Node) {
    strip_metadata(node);
    node.metadata.annotations = None;
    node.spec = None;
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
    if !ctx.synced.load(Ordering::Relaxed) {
        // Deciding from half-filled caches would recreate what exists and
        // rewrite a correct status: wait for them.
        return Ok(Requeue::requeue(Duration::from_millis(200)));
    }
    if cluster.metadata.deletion_timestamp.is_some() {
        // Its objects carry owner references: the garbage collector removes them.
        return Ok(Requeue::await_change());
    }

    // read (caches only): this cluster's objects, found by name (observe
    // filters them as it would the whole caches)
    let prefix = format!("{name}-");
    let names = &ctx.names;
    let statefulsets = names
        .statefulsets
        .objects(&ctx.statefulsets, &namespace, &prefix);
    let services = names.services.objects(&ctx.services, &namespace, &prefix);
    let pods = names.pods.objects(&ctx.pods, &namespace, &prefix);
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
                .objects(&ctx.claims, &namespace, &crds::names::pvc_name(t, &prefix))
        })
        .collect();
    let volumes: Vec<Arc<CachedVolume>> = claims
        .iter()
        .filter_map(|c| c.spec.as_ref()?.volume_name.as_deref())
        .filter_map(|v| ctx.volumes.get(&ObjectRef::new(v)))
        .collect();
    let nodes = ctx.nodes.state();
    let storage = Storage {
        claims: claims.iter().map(|c| c.as_ref()).collect(),
        volumes: volumes.iter().map(|v| v.as_ref()).collect(),
        nodes: Some(nodes.iter().map(|n| n.as_ref()).collect()),
    };
    let mut observed = observe(
        cluster,
        statefulsets.iter().map(|s| s.as_ref()),
        services.iter().map(|s| s.as_ref()),
        pods.iter().map(|p| p.as_ref()),
        &storage,
    );
    let config_maps = ctx.config_maps.state();
    observed.refused_overrides = refused_overrides(cluster, config_maps.iter().map(|c| c.as_ref()));
    let now = k8s_openapi::jiff::Timestamp::now();
    overdue_restarts(&mut observed, now.as_second(), ctx.restart_timeout_seconds);

    // validate, build, decide, apply
    let outcome = match validate(cluster) {
        Err(errors) => Outcome::Invalid(errors),
        Ok(valid) => {
            let build = BuildContext {
                config_map_hashes: config_maps
                    .iter()
                    .filter(|c| references_config_map(cluster, c))
                    .map(|c| (c.name_any(), resources::config_map_hash(c)))
                    .collect(),
                ..ctx.build.clone()
            };
            mark_outdated_statefulsets(&valid, &namespace, &build, &mut observed, ctx);
            let mut action = match apply_supporting_objects(&valid, &namespace, ctx).await? {
                Some(refusal) => Action::Refuse(refusal),
                None => decide(&cluster.spec, &observed),
            };
            let mut acted = act(&valid, &namespace, &action, &build, ctx).await?;
            if let (Acted::ServiceCreated, Action::CreateMemberService { rack, member, .. }) =
                (&acted, &action)
                && let Some(next) =
                    after_member_service_created(&cluster.spec, &mut observed, rack, *member)
            {
                acted = act(&valid, &namespace, &next, &build, ctx).await?;
                action = next;
            }
            Outcome::Decided(match acted {
                Acted::Instead(instead) => instead,
                Acted::AsDecided | Acted::ServiceCreated => action,
            })
        }
    };

    // status, and a Warning Event when the cluster newly became degraded
    let status = compute_status(cluster, &observed, &outcome, &Time(now));
    record_metrics(cluster, &namespace, &observed, &status, &outcome, ctx);
    let previous = cluster.status.clone().unwrap_or_default();
    if status != previous {
        warn_on_new_degradation(cluster, &namespace, &previous, &status, ctx).await;
        announce_new_wait(cluster, &outcome, &previous, &status, ctx).await;
        patch_status(cluster, &namespace, &previous, &status, ctx).await?;
    }
    info!(cluster = %name, namespace = %namespace, outcome = ?outcome, "reconciled");
    Ok(match outcome {
        Outcome::Decided(Action::Converged)
        | Outcome::Invalid(_)
        | Outcome::Decided(Action::Refuse(_)) => Requeue::requeue(Duration::from_secs(300)),
        // Watches on Pods, Services and StatefulSets bring the next step; the
        // requeue is a safety net.
        _ => Requeue::requeue(Duration::from_secs(30)),
    })
}

/// Builds each rack's StatefulSet and marks the racks whose cached
/// StatefulSet (ours) carries another applied hash: the plan applies them.
fn mark_outdated_statefulsets(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    build: &BuildContext,
    observed: &mut Observed,
    ctx: &Context,
) {
    for rack in &cluster.spec.datacenter.racks {
        let desired = resources::applied_statefulset(cluster, rack, build);
        let reference = ObjectRef::<StatefulSet>::new(&desired.name_any()).within(namespace);
        let outdated = ctx.statefulsets.get(&reference).is_some_and(|cached| {
            owned_by(cached.meta(), cluster)
                && resources::applied_hash(cached.as_ref()) != resources::applied_hash(&desired)
        });
        if let Some(observed_rack) = observed.racks.get_mut(&rack.name) {
            observed_rack.statefulset_outdated = outdated;
        }
    }
}

/// Applies the cluster-wide objects (client Service, PDB, member RBAC):
/// each is built in full and written only when the cache shows it missing
/// (created) or different (its applied hash differs: server-side apply).
/// Returns a refusal when one of their names is taken by an object the
/// Cluster does not own.
async fn apply_supporting_objects(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    ctx: &Context,
) -> Result<Option<Refusal>, Error> {
    let client = &ctx.client;
    // In order, stopping at the first name held by someone else: a refused
    // cluster gets nothing more written. `$unowned` judges an object of the
    // name that the Cluster does not own (None: usable as it is).
    macro_rules! apply_or_refuse {
        ($store:expr, $desired:expr, $kind:literal) => {{
            let desired = $desired;
            let name = desired.name_any();
            apply_or_refuse!($store, desired, $kind, |_| Some(foreign($kind, &name)))
        }};
        ($store:expr, $desired:expr, $kind:literal, $unowned:expr) => {
            if let Some(refusal) = apply_object(
                client, namespace, cluster, $store, $desired, $kind, $unowned,
            )
            .await?
            {
                return Ok(Some(refusal));
            }
        };
    }
    apply_or_refuse!(&ctx.services, resources::client_service(cluster), "Service");
    // The members' RBAC may be the user's own (Rook's example brings it):
    // used as it is when it gives members what they need.
    apply_or_refuse!(
        &ctx.service_accounts,
        resources::member_service_account(cluster),
        "ServiceAccount",
        // a ServiceAccount grants nothing by itself
        |_: &ServiceAccount| None
    );
    let role = resources::member_role(cluster);
    apply_or_refuse!(&ctx.roles, role.clone(), "Role", |provided: &Role| {
        let missing = resources::missing_grants(provided, &role);
        (!missing.is_empty()).then(|| Refusal::MemberRbacInsufficient {
            kind: "Role".to_string(),
            name: provided.name_any(),
            missing: missing.join(", "),
        })
    });
    let binding = resources::member_role_binding(cluster);
    let account = crds::names::member_service_account_name(&cluster.name_any());
    apply_or_refuse!(
        &ctx.role_bindings,
        binding.clone(),
        "RoleBinding",
        |provided: &RoleBinding| {
            (!resources::binds_the_same(provided, &binding)).then(|| {
                Refusal::MemberRbacInsufficient {
                    kind: "RoleBinding".to_string(),
                    name: provided.name_any(),
                    missing: format!(
                        "a binding of Role {} to ServiceAccount {account}",
                        binding.role_ref.name
                    ),
                }
            })
        }
    );
    apply_or_refuse!(
        &ctx.pdbs,
        resources::pod_disruption_budget(cluster),
        "PodDisruptionBudget"
    );
    // The member Services that exist: kept as built (an operator upgrade
    // that changes their ports or labels reaches running members). Never
    // created here: a member Service is created as the first step of a
    // scale-up, and deleted only after its member left the ring.
    for rack in &cluster.spec.datacenter.racks {
        let statefulset = crds::names::statefulset_name(
            &cluster.name_any(),
            &cluster.spec.datacenter.name,
            &rack.name,
        );
        for ordinal in cached_member_ordinals(&ctx.names.services, namespace, &statefulset) {
            let desired =
                resources::member_service(cluster, rack, ordinal, contract::is_seed(ordinal));
            // One that is not ours is the scale-up's to refuse.
            apply_object(
                client,
                namespace,
                cluster,
                &ctx.services,
                desired,
                "Service",
                |_: &Service| None,
            )
            .await?;
        }
    }
    Ok(None)
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
trait NamespacedObject:
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

/// The object of `name` as the cache holds it or, when the cache does not
/// (an object without the cluster's labels, or a cache behind), as the API
/// server does: a foreign object costs a read per reconcile, never a
/// failed write.
async fn existing<K>(
    client: &Client,
    namespace: &str,
    store: &Store<K>,
    name: &str,
    kind: &'static str,
) -> Result<Option<Arc<K>>, Error>
where
    K: NamespacedObject,
{
    let reference = ObjectRef::<K>::new(name).within(namespace);
    match store.get(&reference) {
        Some(cached) => Ok(Some(cached)),
        None => Ok(Api::<K>::namespaced(client.clone(), namespace)
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

/// Writes `desired` when what exists differs: creates it when missing,
/// applies it (server-side apply, forcing the operator's fields) when the
/// Cluster owns it and its applied hash differs, and leaves it alone
/// otherwise. An object of its name that the Cluster does not own is never
/// adopted nor changed: `unowned` says whether it is in the way (a
/// refusal) or usable as it is (the members' RBAC a user made, as Rook's
/// example does).
async fn apply_object<K>(
    client: &Client,
    namespace: &str,
    cluster: &Cluster,
    store: &Store<K>,
    desired: K,
    kind: &'static str,
    unowned: impl Fn(&K) -> Option<Refusal>,
) -> Result<Option<Refusal>, Error>
where
    K: NamespacedObject,
{
    let desired = resources::hashed(desired);
    let name = desired.name_any();
    match existing(client, namespace, store, &name, kind).await? {
        Some(existing) if owned_by(existing.meta(), cluster) => {
            if resources::applied_hash(existing.as_ref()) != resources::applied_hash(&desired) {
                let api: Api<K> = Api::namespaced(client.clone(), namespace);
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(|source| Error::ApplyObject {
                    kind,
                    name: name.clone(),
                    source,
                })?;
                info!(cluster = %cluster.name_any(), kind, name = %name, "applied");
            }
            Ok(None)
        }
        Some(existing) => Ok(unowned(&existing)),
        None => {
            create(client, namespace, cluster, desired, kind).await?;
            Ok(None)
        }
    }
}

/// Creates `desired` unless an object of its name exists: a foreign one
/// is refused, one of ours is left as it is.
async fn create_unless_present<K>(
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
    match existing(client, namespace, store, &name, kind).await? {
        Some(existing) if owned_by(existing.meta(), cluster) => Ok(Ok(false)),
        Some(_) => Ok(Err(foreign(kind, &name))),
        None => Ok(Ok(create(client, namespace, cluster, desired, kind).await?)),
    }
}

fn foreign(kind: &str, name: &str) -> Refusal {
    Refusal::ForeignObject(crate::decide::ForeignObject {
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
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api.create(&params, &desired).await {
        Ok(_) => {
            info!(cluster = %cluster.name_any(), kind, name = %name, "created");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            info!(cluster = %cluster.name_any(), kind, name = %name, "the name was taken meanwhile; looking again");
            Ok(false)
        }
        Err(source) => Err(Error::CreateObject { kind, name, source }),
    }
}

/// What carrying out a decision did.
enum Acted {
    /// What was decided.
    AsDecided,
    /// A member Service, created just now: a scale-up's first step.
    ServiceCreated,
    /// Acting showed that the decision cannot be carried out (a name taken
    /// by a foreign object, a member still leaving): this instead.
    Instead(Action),
}

/// Carries out the decision.
async fn act(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    action: &Action,
    build: &BuildContext,
    ctx: &Context,
) -> Result<Acted, Error> {
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
                    Err(refusal) => return Ok(Acted::Instead(Action::Refuse(refusal))),
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
                    Err(refusal) => return Ok(Acted::Instead(Action::Refuse(refusal))),
                    Ok(true) => return Ok(Acted::ServiceCreated),
                    Ok(false) => {}
                }
            }
        }
        Action::ScaleUp { rack, replicas } => {
            scale_statefulset(cluster, namespace, rack, *replicas, ctx).await?;
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
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *member,
                })));
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
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *member,
                })));
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
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *member,
                })));
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
            // Request, answer and ring, read afresh: never inferred.
            if let Err(missing) =
                decommission_confirmed(cluster, namespace, rack, *replicas, ctx).await?
            {
                warn!(cluster = %cluster.name_any(), rack, member = replicas, %missing, "the caches showed a confirmed decommission, the API server does not: not scaling down");
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *replicas,
                })));
            }
            if !scale_down_past(cluster, namespace, rack, *replicas, ctx).await? {
                info!(cluster = %cluster.name_any(), rack, member = replicas, "the StatefulSet's replicas changed meanwhile: looking again");
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.clone(),
                    member: *replicas,
                })));
            }
            ctx.metrics
                .count_operation(&cluster_labels(cluster, namespace), "decommission", true);
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
            delete_leftovers(cluster, namespace, rack, *member, claims, ctx).await?;
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
                return Ok(Acted::Instead(Action::Wait(WaitReason::MemberReplacing {
                    rack: rack.clone(),
                    member: *member,
                })));
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
        Action::FinishReplace { rack, member } => {
            let service = member_name(cluster, rack, *member);
            let patch =
                serde_json::json!({"metadata": {"labels": {crds::contract::REPLACE: null}}});
            patch_member_service(ctx, namespace, &service, &patch).await?;
            ctx.metrics
                .count_operation(&cluster_labels(cluster, namespace), "replace", true);
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
                    return Ok(Acted::Instead(Action::Wait(WaitReason::MemberRestarting {
                        rack: rack.clone(),
                        member: *member,
                    })));
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
        Action::Wait(_) | Action::Refuse(_) | Action::Converged => {}
    }
    Ok(Acted::AsDecided)
}

/// Writes a rack's StatefulSet with server-side apply, forcing the
/// operator's ownership of every field it sets (replicas are not among
/// them).
async fn apply_statefulset(ctx: &Context, namespace: &str, sts: &StatefulSet) -> Result<(), Error> {
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
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
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
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match api.evict(&pod, &kube::api::EvictParams::default()).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
        Err(kube::Error::Api(status)) if status.code == 429 => {
            info!(cluster = %cluster.name_any(), rack, member, message = %status.message, "the PodDisruptionBudget refuses the eviction for now");
            return Ok(Acted::Instead(Action::Wait(WaitReason::EvictionRefused {
                rack: rack.to_string(),
                member,
            })));
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
    Ok(Acted::AsDecided)
}

fn member_name(cluster: &Cluster, rack: &str, member: i32) -> String {
    crds::names::member_name(
        &crds::names::statefulset_name(&cluster.name_any(), &cluster.spec.datacenter.name, rack),
        member,
    )
}

fn cluster_labels(cluster: &Cluster, namespace: &str) -> ClusterLabels {
    ClusterLabels {
        namespace: namespace.to_string(),
        cluster: cluster.name_any(),
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

/// A merge patch of a member Service's metadata (a record of intent).
async fn patch_member_service(
    ctx: &Context,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
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
) -> Result<Result<(), String>, Error> {
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
        return Ok(Err(format!("member Service {name} not found")));
    };
    let leaving = crate::observe::service_observed(service);
    if leaving.decommission() != crds::contract::Decommission::Confirmed {
        return Ok(Err(format!(
            "member Service {name} does not say decommissioned=true"
        )));
    }
    let others: Vec<crds::contract::GossipView> = services
        .items
        .iter()
        .filter(|s| s.name_any() != name)
        .filter_map(|s| crate::observe::service_observed(s).gossip)
        .collect();
    let judged = crate::confirmation::judge(
        &crate::confirmation::Leaving {
            address: leaving.cluster_ip.as_deref(),
            request: leaving.decommission_request.as_ref(),
            confirmation: leaving.decommission_confirmation.as_ref(),
            own_record: leaving.gossip.as_ref(),
            ready: false,
        },
        &others,
    );
    Ok(match judged {
        crate::confirmation::Verdict::Confirmed => Ok(()),
        crate::confirmation::Verdict::Pending(why) | crate::confirmation::Verdict::Stale(why) => {
            Err(why)
        }
    })
}

/// Shrinks a rack's StatefulSet past `member` (its highest), only if it
/// still has `member + 1` replicas: a JSON patch whose `test` the API
/// server checks in the same write, so that a stale cache can never shrink
/// it past another member. False when the replicas were something else.
async fn scale_down_past(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    ctx: &Context,
) -> Result<bool, Error> {
    let name =
        crds::names::statefulset_name(&cluster.name_any(), &cluster.spec.datacenter.name, rack);
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/spec/replicas", "value": member + 1},
        {"op": "replace", "path": "/spec/replicas", "value": member},
    ]))
    .expect("a JSON patch");
    match api
        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(true),
        // The test failed (422), or the object changed meanwhile (409).
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 409 => Ok(false),
        Err(source) => Err(Error::ScaleStatefulSet {
            name,
            replicas: member,
            source,
        }),
    }
}

/// Sets a rack's StatefulSet's replicas.
async fn scale_statefulset(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    replicas: i32,
    ctx: &Context,
) -> Result<(), Error> {
    let name =
        crds::names::statefulset_name(&cluster.name_any(), &cluster.spec.datacenter.name, rack);
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::ScaleStatefulSet {
            name: name.clone(),
            replicas,
            source,
        })?;
    Ok(())
}

/// The StatefulSet's replicas, read afresh (`None`: no StatefulSet).
async fn fresh_replicas(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    ctx: &Context,
) -> Result<Option<i32>, Error> {
    let name =
        crds::names::statefulset_name(&cluster.name_any(), &cluster.spec.datacenter.name, rack);
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
/// was confirmed, once the StatefulSet (read afresh) no longer counts it.
/// The Service goes last and only unchanged since it was read: it holds
/// the confirmation that allows the rest.
async fn delete_leftovers(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    claims: &[String],
    ctx: &Context,
) -> Result<(), Error> {
    let service_name = member_name(cluster, rack, member);
    let replicas = fresh_replicas(cluster, namespace, rack, ctx).await?;
    if replicas.is_none_or(|r| member < r) {
        warn!(cluster = %cluster.name_any(), rack, member, ?replicas, "the StatefulSet still counts the member: nothing deleted");
        return Ok(());
    }
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let service = api
        .get_opt(&service_name)
        .await
        .map_err(|source| Error::GetObject {
            kind: "Service",
            name: service_name.clone(),
            source,
        })?;
    let Some(service) = service else {
        return Ok(());
    };
    if let Err(missing) = decommission_confirmed(cluster, namespace, rack, member, ctx).await? {
        warn!(cluster = %cluster.name_any(), rack, member, %missing, "no confirmed decommission (read afresh): nothing deleted");
        return Ok(());
    }
    for claim in claims {
        delete_claim(ctx, namespace, claim).await?;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: service.metadata.uid.clone(),
            resource_version: service.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&service_name, &params).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
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
    Ok(())
}

/// Deletes a member's claims on a lost disk, then its Pod, so that the
/// StatefulSet makes both anew (a new local disk on another Node). The loss
/// is read afresh first: each claim's volume names only Nodes the API
/// server does not have.
async fn delete_lost_disk(
    cluster: &Cluster,
    namespace: &str,
    rack: &str,
    member: i32,
    claims: &[String],
    ctx: &Context,
) -> Result<(), Error> {
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
        let mut any_node = false;
        for host in &hostnames {
            any_node |= nodes
                .get_opt(host)
                .await
                .map_err(get_failed("Node", host))?
                .is_some();
        }
        lost |= !hostnames.is_empty() && !any_node;
    }
    if !lost {
        info!(cluster = %cluster.name_any(), rack, member, "no claim of the member is on a lost disk (read afresh): nothing deleted");
        return Ok(());
    }
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

/// A Warning Event when the Degraded condition turns True or changes
/// reason: once per problem, not once per resync.
async fn warn_on_new_degradation(
    cluster: &Cluster,
    namespace: &str,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) {
    let degraded = |s: &ClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_DEGRADED && c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let Some((reason, message)) = degraded(status) else {
        return;
    };
    if degraded(previous).is_some_and(|(r, m)| r == reason && m == message) {
        return;
    }
    if reason == "DecommissionRefused" {
        ctx.metrics
            .count_operation(&cluster_labels(cluster, namespace), "decommission", false);
    }
    publish(
        ctx,
        cluster,
        EventType::Warning,
        &reason,
        "Reconcile",
        message,
        None,
    )
    .await;
}

/// An Event when the cluster starts waiting on something people should
/// know about: a scale-up held until a decommission under way finishes.
/// Once per wait (when the Progressing message changes), not per resync.
async fn announce_new_wait(
    cluster: &Cluster,
    outcome: &Outcome,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) {
    let Outcome::Decided(Action::Wait(WaitReason::DecommissionBeforeScaleUp { rack, member })) =
        outcome
    else {
        return;
    };
    let progressing = |s: &ClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == crds::v1alpha1::CONDITION_PROGRESSING)
            .map(|c| c.message.clone())
    };
    if progressing(previous) == progressing(status) {
        return;
    }
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "ScaleUpWaitsForDecommission",
        "ScaleUp",
        format!("Member {member} of rack {rack} is decommissioning already: the decommission finishes first, then the rack is scaled up again"),
        Some(related_statefulset(cluster, rack)),
    )
    .await;
}

/// The object an Event is about besides the Cluster: Events with the same
/// reason are aggregated into one series per (Cluster, related object), so
/// that each rack gets its own `RackCreated` and `RackScaledUp`.
fn related_statefulset(cluster: &Cluster, rack: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".to_string()),
        kind: Some("StatefulSet".to_string()),
        name: Some(crds::names::statefulset_name(
            &cluster.name_any(),
            &cluster.spec.datacenter.name,
            rack,
        )),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    }
}

async fn publish(
    ctx: &Context,
    cluster: &Cluster,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: related,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        // An Event is a courtesy: failing to record one must not stop the
        // reconcile.
        warn!(error = %e, reason, "publishing an Event failed");
    }
}

async fn patch_status(
    cluster: &Cluster,
    namespace: &str,
    previous: &ClusterStatus,
    status: &ClusterStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let mut body = serde_json::json!({ "status": status });
    // A merge patch keeps map keys it does not mention: remove racks that are
    // gone explicitly.
    for rack in previous
        .racks
        .keys()
        .filter(|r| !status.racks.contains_key(*r))
    {
        body["status"]["racks"][rack] = serde_json::Value::Null;
    }
    // An empty list of rack conditions is left out of the status, which a
    // merge patch reads as "unchanged": clear the last ones explicitly.
    for (rack, now) in &status.racks {
        let had = previous
            .racks
            .get(rack)
            .is_some_and(|r| !r.conditions.is_empty());
        if had && now.conditions.is_empty() {
            body["status"]["racks"][rack]["conditions"] = serde_json::json!([]);
        }
    }
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map_err(|source| Error::PatchStatus { name, source })?;
    Ok(())
}

fn record_metrics(
    cluster: &Cluster,
    namespace: &str,
    observed: &Observed,
    status: &ClusterStatus,
    outcome: &Outcome,
    ctx: &Context,
) {
    let labels = cluster_labels(cluster, namespace);
    // Operations in progress: members with a record of intent, started when
    // their rack's condition turned True.
    let mut operations = Vec::new();
    for (rack, observed_rack) in &observed.racks {
        for (member, state) in &observed_rack.members {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            for (kind, present, condition) in [
                (
                    "decommission",
                    service.decommission() == crds::contract::Decommission::Requested,
                    crds::v1alpha1::RACK_CONDITION_MEMBER_LEAVING,
                ),
                (
                    "replace",
                    service.replace.is_some(),
                    crds::v1alpha1::RACK_CONDITION_MEMBER_REPLACING,
                ),
            ] {
                if !present {
                    continue;
                }
                let started = status
                    .racks
                    .get(rack)
                    .and_then(|r| r.conditions.iter().find(|c| c.type_ == condition))
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0.as_second())
                    .unwrap_or_default();
                operations.push((
                    MemberOperationLabels {
                        namespace: labels.namespace.clone(),
                        cluster: labels.cluster.clone(),
                        kind: kind.to_string(),
                        rack: rack.clone(),
                        member: member.to_string(),
                    },
                    started,
                ));
            }
        }
    }
    ctx.metrics.set_member_operations(&labels, operations);
    ctx.metrics
        .members
        .get_or_create(&labels)
        .set(status.members.into());
    ctx.metrics
        .ready_members
        .get_or_create(&labels)
        .set(status.ready_members.into());
    ctx.metrics
        .members_on_old_template
        .get_or_create(&labels)
        .set(i64::try_from(crate::decide::members_on_old_template(observed)).unwrap_or(i64::MAX));
    let operation = match outcome {
        Outcome::Invalid(_) => "InvalidSpec".to_string(),
        Outcome::Decided(Action::Refuse(refusal)) => refusal_reason(refusal).0.to_string(),
        Outcome::Decided(action) => format!("{action:?}")
            .split([' ', '(', '{'])
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    ctx.metrics.set_operation(&labels, &operation);
}
