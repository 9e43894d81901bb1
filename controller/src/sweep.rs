//! Deletes what the controller keeps of a Cluster outside the Cluster's
//! namespace once the Cluster is gone (I/O): its CA Secret in the
//! operator's namespace and its members' ClusterRoleBinding, which no owner
//! reference can reach (none crosses namespaces, and a cluster-scoped
//! object cannot be owned by a namespaced one).
//!
//! Run at start (after the caches' first lists), after every Cluster
//! deletion the watch sees, after every relist of the Clusters (a deletion
//! missed while the watch was down) and every half hour. Each object is
//! named by its Cluster's UID and labelled with its Cluster's namespace
//! and name: one whose Cluster the cache shows is kept; any other is
//! deleted only when a fresh read of that Cluster finds it gone, or
//! recreated under another UID. A CA of a Cluster that exists is never
//! deleted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crds::contract::tls;
use crds::v1alpha1::Cluster;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::authority::names_cluster;
use crate::context::Context;
use crate::error::{Error, not_found};

/// How often the sweep runs without a deletion to prompt it.
pub const PERIOD: Duration = Duration::from_secs(1800);

/// Sweeps when `prompt` is notified, and every [`PERIOD`], once the caches
/// hold their first lists.
pub(crate) async fn run(
    ctx: Arc<Context>,
    clusters: Store<Cluster>,
    namespace: Option<String>,
    prompt: Arc<Notify>,
) {
    while !ctx.synced() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        match sweep(&ctx, &clusters, namespace.as_deref()).await {
            Ok(0) => {}
            Ok(deleted) => info!(
                deleted,
                "deleted what gone Clusters left outside their namespaces"
            ),
            Err(e) => warn!(error = %e, "the sweep of gone Clusters' CAs failed"),
        }
        let _ = tokio::time::timeout(PERIOD, prompt.notified()).await;
        // Several deletions at once (a namespace deleted): one sweep.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The label selector of what the controller keeps outside the Clusters'
/// namespaces: of every namespace, or of the one it watches.
pub(crate) fn selector(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{}={ns}", tls::CA_NAMESPACE_LABEL),
        None => tls::CA_NAMESPACE_LABEL.to_string(),
    }
}

/// One sweep: the number of objects deleted.
pub(crate) async fn sweep(
    ctx: &Context,
    clusters: &Store<Cluster>,
    namespace: Option<&str>,
) -> Result<usize, Error> {
    let params = ListParams::default().labels(&selector(namespace));
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.tls.operator_namespace);
    let bindings: Api<ClusterRoleBinding> = Api::all(ctx.client.clone());
    let listed_secrets =
        secrets
            .list_metadata(&params)
            .await
            .map_err(|source| Error::GetObject {
                kind: "Secret",
                name: selector(namespace),
                source,
            })?;
    let listed_bindings =
        bindings
            .list_metadata(&params)
            .await
            .map_err(|source| Error::GetObject {
                kind: "ClusterRoleBinding",
                name: selector(namespace),
                source,
            })?;
    let known_uids: BTreeSet<String> = clusters
        .state()
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    // What authentication learnt of gone Clusters.
    ctx.authentication.retain(&known_uids);
    let mut deleted = 0;
    for object in listed_secrets.items {
        if gone(ctx, &object.metadata, tls::ca_secret_name, &known_uids).await? {
            deleted += delete(&secrets, &object.metadata, "Secret").await?;
        }
    }
    for object in listed_bindings.items {
        if gone(
            ctx,
            &object.metadata,
            tls::member_csr_binding_name,
            &known_uids,
        )
        .await?
        {
            deleted += delete(&bindings, &object.metadata, "ClusterRoleBinding").await?;
        }
    }
    Ok(deleted)
}

/// Whether the Cluster an object was made for is gone: the object is named
/// `name_of(<uid>)` of no Cluster the cache shows, and a fresh read of the
/// Cluster its labels name finds none, or one of another UID. An object
/// whose name or labels say nothing is kept.
async fn gone(
    ctx: &Context,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    name_of: fn(&str) -> String,
    known_uids: &BTreeSet<String>,
) -> Result<bool, Error> {
    let name = meta.name.clone().unwrap_or_default();
    if known_uids.iter().any(|uid| name_of(uid) == name) {
        return Ok(false);
    }
    let Some((namespace, cluster)) = meta.labels.as_ref().and_then(names_cluster) else {
        return Ok(false);
    };
    let fresh = Api::<Cluster>::namespaced(ctx.client.clone(), &namespace)
        .get_opt(&cluster)
        .await
        .map_err(|source| Error::GetObject {
            kind: "Cluster",
            name: format!("{namespace}/{cluster}"),
            source,
        })?;
    Ok(match fresh {
        None => true,
        Some(c) => c
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| name_of(uid) != name),
    })
}

/// Deletes an object, if it is still the one listed (its UID): 1 when it
/// went.
async fn delete<K>(
    api: &Api<K>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &'static str,
) -> Result<usize, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = meta.name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            info!(kind, name = %name, cluster = ?meta.labels.as_ref().and_then(names_cluster), "deleted: its Cluster is gone");
            Ok(1)
        }
        Err(e) if not_found(&e) => Ok(0),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(0),
        Err(source) => Err(Error::DeleteObject { kind, name, source }),
    }
}

#[cfg(test)]
#[path = "sweep_tests.rs"]
mod tests;
