//! The reconcile loop (I/O): reflector caches of the cluster's objects, the
//! pipeline read → validate → decide → act → status, Events, and the
//! kube-runtime Controller that runs it.
//!
//! A reconcile reads only from the caches. It writes only what the decision
//! step asks for (creating a missing object, one scale-up), an Event for each
//! action and for each new refusal, and the status when it changed: a cluster
//! with nothing to do costs zero writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crds::v1alpha1::{CONDITION_DEGRADED, Cluster, ClusterStatus};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
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
use crate::decide::{Action, Refusal, decide};
use crate::metrics::{ClusterLabels, ErrorLabels, Metrics};
use crate::observe::{observe, owned_by};
use crate::resources::{self, BuildContext};
use crate::status::{Outcome, compute_status, refusal_reason};

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
    /// Writing the status failed.
    #[error("patching the status of {name}: {source}")]
    PatchStatus { name: String, source: kube::Error },
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
            Error::GetObject { .. } => "GetObject",
            Error::ScaleStatefulSet { .. } => "ScaleStatefulSet",
            Error::PatchStatus { .. } => "PatchStatus",
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
    pods: Store<Pod>,
    pdbs: Store<PodDisruptionBudget>,
    service_accounts: Store<ServiceAccount>,
    roles: Store<Role>,
    role_bindings: Store<RoleBinding>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    build: BuildContext,
    /// Every cache holds its first full list.
    synced: Arc<AtomicBool>,
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
        ($kind:ty) => {{
            let (reader, writer) = reflector::store::<$kind>();
            let stream = watcher(api::<$kind>(&client, &args.namespace), owned.clone())
                .default_backoff()
                .reflect(writer)
                .touched_objects();
            (reader, stream)
        }};
    }
    let (statefulsets, sts_stream) = cache!(StatefulSet);
    let (services, svc_stream) = cache!(Service);
    let (pods, pod_stream) = cache!(Pod);
    let (pdbs, pdb_stream) = cache!(PodDisruptionBudget);
    let (service_accounts, sa_stream) = cache!(ServiceAccount);
    let (roles, role_stream) = cache!(Role);
    let (role_bindings, rb_stream) = cache!(RoleBinding);

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
        metrics,
        build: BuildContext {
            operator_image: args.operator_image.clone(),
        },
        synced: ready.clone(),
    });

    let clusters: Api<Cluster> = api(&client, &args.namespace);
    let controller = Controller::new(clusters, watcher::Config::default());
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
        }
    };
    tokio::spawn(async move {
        caches_ready.await;
        ready.store(true, Ordering::Relaxed);
        info!("caches synced");
    });

    let pod_to_cluster = |pod: Pod| {
        let namespace = pod.namespace();
        pod.labels().get(crds::labels::CLUSTER).map(|name| {
            ObjectRef::<Cluster>::new(name).within(namespace.as_deref().unwrap_or_default())
        })
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

    // read (caches only)
    let statefulsets = ctx.statefulsets.state();
    let services = ctx.services.state();
    let pods = ctx.pods.state();
    let observed = observe(
        cluster,
        statefulsets.iter().map(|s| s.as_ref()),
        services.iter().map(|s| s.as_ref()),
        pods.iter().map(|p| p.as_ref()),
    );

    // validate, decide, act
    let outcome = match crds::validate(cluster) {
        Err(errors) => Outcome::Invalid(errors),
        Ok(()) => {
            let action = match ensure_supporting_objects(cluster, &namespace, ctx).await? {
                Some(refusal) => Action::Refuse(refusal),
                None => decide(&cluster.spec, &observed),
            };
            let action = act(cluster, &namespace, &action, ctx)
                .await?
                .unwrap_or(action);
            Outcome::Decided(action)
        }
    };

    // status, and a Warning Event when the cluster newly became degraded
    let status = compute_status(
        cluster,
        &observed,
        &outcome,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    );
    record_metrics(cluster, &namespace, &status, &outcome, ctx);
    let previous = cluster.status.clone().unwrap_or_default();
    if status != previous {
        warn_on_new_degradation(cluster, &previous, &status, ctx).await;
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

/// Creates the cluster-wide objects (client Service, PDB, member RBAC) that
/// are missing from the caches. Returns a refusal when one of their names is
/// taken by an object the Cluster does not own.
async fn ensure_supporting_objects(
    cluster: &Cluster,
    namespace: &str,
    ctx: &Context,
) -> Result<Option<Refusal>, Error> {
    let client = &ctx.client;
    // In order, stopping at the first name held by someone else: a refused
    // cluster gets nothing more created.
    macro_rules! ensure_or_refuse {
        ($store:expr, $desired:expr, $kind:literal) => {
            if let Some(refusal) =
                ensure(client, namespace, cluster, $store, $desired, $kind).await?
            {
                return Ok(Some(refusal));
            }
        };
    }
    ensure_or_refuse!(&ctx.services, resources::client_service(cluster), "Service");
    ensure_or_refuse!(
        &ctx.service_accounts,
        resources::member_service_account(cluster),
        "ServiceAccount"
    );
    ensure_or_refuse!(&ctx.roles, resources::member_role(cluster), "Role");
    ensure_or_refuse!(
        &ctx.role_bindings,
        resources::member_role_binding(cluster),
        "RoleBinding"
    );
    ensure_or_refuse!(
        &ctx.pdbs,
        resources::pod_disruption_budget(cluster),
        "PodDisruptionBudget"
    );
    Ok(None)
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

/// Creates `desired` unless the cache holds it; a name taken by another
/// owner is a refusal, never an adoption.
async fn ensure<K>(
    client: &Client,
    namespace: &str,
    cluster: &Cluster,
    store: &Store<K>,
    desired: K,
    kind: &'static str,
) -> Result<Option<Refusal>, Error>
where
    K: NamespacedObject,
{
    let name = desired.name_any();
    let reference = ObjectRef::<K>::new(&name).within(namespace);
    if let Some(existing) = store.get(&reference) {
        return Ok((!owned_by(existing.meta(), cluster)).then(|| foreign(kind, &name)));
    }
    create(client, namespace, cluster, desired, kind).await
}

fn foreign(kind: &str, name: &str) -> Refusal {
    Refusal::ForeignObject(crate::decide::ForeignObject {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Creates an object; when the name is taken (by an object the caches do not
/// hold, because it lacks the cluster's labels) reads it to tell a foreign
/// object from one of ours that the cache has not seen yet.
async fn create<K>(
    client: &Client,
    namespace: &str,
    cluster: &Cluster,
    desired: K,
    kind: &'static str,
) -> Result<Option<Refusal>, Error>
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
            Ok(None)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api.get(&name).await.map_err(|source| Error::GetObject {
                kind,
                name: name.clone(),
                source,
            })?;
            Ok((!owned_by(existing.meta(), cluster)).then(|| foreign(kind, &name)))
        }
        Err(source) => Err(Error::CreateObject { kind, name, source }),
    }
}

/// Carries out the decision. Returns a different action when acting showed
/// that the decision cannot be carried out (a name taken by a foreign object).
async fn act(
    cluster: &Cluster,
    namespace: &str,
    action: &Action,
    ctx: &Context,
) -> Result<Option<Action>, Error> {
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
            for rack in racks.iter().filter_map(|r| find_rack(r)) {
                let sts = resources::statefulset_for_rack(cluster, rack, 0, &ctx.build);
                let sts_name = sts.name_any();
                if let Some(refusal) =
                    create(&ctx.client, namespace, cluster, sts, "StatefulSet").await?
                {
                    return Ok(Some(Action::Refuse(refusal)));
                }
                publish(
                    ctx,
                    cluster,
                    EventType::Normal,
                    "RackCreated",
                    "CreateStatefulSet",
                    format!(
                        "Rack {} created: StatefulSet {sts_name} with 0 members",
                        rack.name
                    ),
                    Some(related_statefulset(cluster, &rack.name)),
                )
                .await;
            }
        }
        Action::CreateMemberService { rack, member, seed } => {
            if let Some(spec) = find_rack(rack) {
                let service = resources::member_service(cluster, spec, *member, *seed);
                if let Some(refusal) =
                    create(&ctx.client, namespace, cluster, service, "Service").await?
                {
                    return Ok(Some(Action::Refuse(refusal)));
                }
            }
        }
        Action::ScaleUp { rack, replicas } => {
            let name = crds::names::statefulset_name(
                &cluster.name_any(),
                &cluster.spec.datacenter.name,
                rack,
            );
            let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
            let patch = serde_json::json!({"spec": {"replicas": replicas}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| Error::ScaleStatefulSet {
                    name: name.clone(),
                    replicas: *replicas,
                    source,
                })?;
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
        Action::Wait(_) | Action::Refuse(_) | Action::Converged => {}
    }
    Ok(None)
}

/// A Warning Event when the Degraded condition turns True or changes
/// reason: once per problem, not once per resync.
async fn warn_on_new_degradation(
    cluster: &Cluster,
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
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map_err(|source| Error::PatchStatus { name, source })?;
    Ok(())
}

fn record_metrics(
    cluster: &Cluster,
    namespace: &str,
    status: &ClusterStatus,
    outcome: &Outcome,
    ctx: &Context,
) {
    let labels = ClusterLabels {
        namespace: namespace.to_string(),
        cluster: cluster.name_any(),
    };
    ctx.metrics
        .members
        .get_or_create(&labels)
        .set(status.members.into());
    ctx.metrics
        .ready_members
        .get_or_create(&labels)
        .set(status.ready_members.into());
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
