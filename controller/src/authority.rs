//! A TLS cluster's certificate authority, before anything of its members
//! runs: reads the caches; creates the CA's Secret in the operator's
//! namespace (once: never overwritten), writes the ConfigMap that
//! publishes the CA's certificate and the ClusterRoleBinding that lets the
//! members ask for certificates, each when missing or different. What
//! stands in the way (the CA cannot be made, read or published; one of
//! these names held by someone else's object) is a refusal, which holds
//! every step of the cluster until it passes.
//!
//! An API error the operator cannot outwait (a 4xx other than a conflict:
//! its RBAC lacks a permission, its namespace is missing) is such a
//! refusal, so that the Cluster's status and a Warning Event say it; a
//! server error is an error, retried.

use std::sync::Arc;

use crds::contract::tls;
use crds::labels;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::info;

use crate::apply::{FIELD_MANAGER, apply_when_changed, create_as_ours};
use crate::certificates::{self, Authority};
use crate::context::Context;
use crate::decide::Refusal;
use crate::error::Error;
use crate::observe::owned_by;
use crate::observed::ForeignObject;
use crate::resources::{self, ValidCluster};

/// What stood in the way of the authority, if anything.
type Step = Result<Option<Refusal>, Error>;

/// Makes, reads and publishes the cluster's authority (clusters with TLS
/// only). None when all is in place.
pub(crate) async fn ensure_authority(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    ctx: &Context,
) -> Step {
    if !resources::tls_enabled(cluster) {
        return Ok(None);
    }
    let authority = match authority(cluster, ctx).await? {
        Ok(authority) => authority,
        Err(refusal) => return Ok(Some(refusal)),
    };
    if let Some(refusal) = publish(cluster, namespace, &authority, ctx).await? {
        return Ok(Some(refusal));
    }
    bind_members(cluster, ctx).await
}

fn unavailable(detail: String) -> Refusal {
    Refusal::CertificateAuthorityUnavailable { detail }
}

fn foreign(kind: &str, name: String) -> Refusal {
    Refusal::ForeignObject(ForeignObject {
        kind: kind.to_string(),
        name,
    })
}

/// Whether an API error will not pass by waiting: a 4xx other than a
/// conflict or too many requests (RBAC, a missing namespace, an invalid
/// object).
pub(crate) fn lasting(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// Whether the object's labels name this cluster (its name and namespace):
/// what the controller keeps outside the Cluster's namespace carries no
/// owner reference.
pub(crate) fn labelled_for(
    object_labels: &std::collections::BTreeMap<String, String>,
    cluster: &crds::v1alpha1::Cluster,
) -> bool {
    resources::outside_labels(cluster)
        .iter()
        .all(|(k, v)| object_labels.get(k) == Some(v))
}

/// The authority a CA Secret holds, or why it holds none.
pub(crate) fn authority_of(secret: &Secret) -> Result<Authority, String> {
    let field = |key: &str| -> Result<String, String> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .ok_or_else(|| format!("it has no {key}"))?;
        String::from_utf8(bytes.0.clone()).map_err(|_| format!("its {key} is not PEM text"))
    };
    let authority = Authority {
        cert_pem: field(certificates::CA_CERT_KEY)?,
        key_pem: field(certificates::CA_KEY_KEY)?,
    };
    authority.issuer().map_err(|e| e.to_string())?;
    Ok(authority)
}

/// The cluster's authority: from the cache, or made now and created (once:
/// a name taken meanwhile is read, never overwritten).
async fn authority(
    cluster: &ValidCluster<'_>,
    ctx: &Context,
) -> Result<Result<Authority, Refusal>, Error> {
    let operator_namespace = &ctx.tls.operator_namespace;
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let name = tls::ca_secret_name(&uid);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), operator_namespace);
    let cached = ctx
        .secrets
        .get(&ObjectRef::new(&name).within(operator_namespace));
    let secret = match cached {
        Some(secret) => secret,
        None => {
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            let made = certificates::make_authority(
                cluster.metadata.namespace.as_deref().unwrap_or_default(),
                &cluster.name_any(),
                now,
                tls::CA_LIFETIME_SECS,
            )
            .map_err(|e| Error::MakeAuthority(e.to_string()))?;
            let desired = resources::ca_secret(cluster, operator_namespace, &made);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PostParams::default()
            };
            match api.create(&params, &desired).await {
                Ok(_) => {
                    info!(cluster = %cluster.name_any(), secret = %name, "certificate authority made");
                    return Ok(Ok(made));
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    match api
                        .get_opt(&name)
                        .await
                        .map_err(|source| Error::GetObject {
                            kind: "Secret",
                            name: name.clone(),
                            source,
                        })? {
                        Some(secret) => Arc::new(secret),
                        // Deleted between the two: made again next time.
                        None => {
                            return Ok(Err(unavailable(format!(
                                "Secret {operator_namespace}/{name} was deleted while it was made"
                            ))));
                        }
                    }
                }
                Err(e) if lasting(&e) => {
                    return Ok(Err(unavailable(format!(
                        "creating its Secret {operator_namespace}/{name} failed: {e}"
                    ))));
                }
                Err(source) => {
                    return Err(Error::CreateObject {
                        kind: "Secret",
                        name,
                        source,
                    });
                }
            }
        }
    };
    if !labelled_for(secret.labels(), cluster) {
        return Ok(Err(foreign(
            "Secret",
            format!("{operator_namespace}/{name}"),
        )));
    }
    Ok(authority_of(&secret).map_err(|why| {
        unavailable(format!(
            "its Secret {operator_namespace}/{name} holds no usable CA ({why}); it is left as it is (a new CA would leave the members with certificates no peer trusts): repair it, or delete and recreate the Cluster"
        ))
    }))
}

/// The ConfigMap `<cluster>-ca` with the CA's certificate, written when the
/// cache shows it missing or different (its applied hash).
async fn publish(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    authority: &Authority,
    ctx: &Context,
) -> Step {
    let desired = resources::hashed(resources::ca_config_map(cluster, &authority.cert_pem));
    let name = desired.name_any();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let failed = |e: kube::Error, what: &str| -> Step {
        if lasting(&e) {
            Ok(Some(unavailable(format!(
                "{what} its ConfigMap {namespace}/{name} failed: {e}"
            ))))
        } else {
            Err(Error::ApplyObject {
                kind: "ConfigMap",
                name: name.clone(),
                source: e,
            })
        }
    };
    match ctx
        .config_maps
        .get(&ObjectRef::new(&name).within(namespace))
    {
        None => {
            match create_as_ours(&api, &desired).await {
                Ok(true) => {
                    info!(cluster = %cluster.name_any(), config_map = %name, "CA published")
                }
                // Taken meanwhile: the next reconcile reads whose it is.
                Ok(false) => {}
                Err(e) => return failed(e, "creating"),
            }
        }
        Some(cached) if !owned_by(&cached.metadata, cluster) => {
            return Ok(Some(foreign("ConfigMap", name)));
        }
        Some(cached) => {
            match apply_when_changed(&api, resources::applied_hash(cached.as_ref()), &desired).await
            {
                Ok(true) => {
                    info!(cluster = %cluster.name_any(), config_map = %name, "CA published");
                }
                Ok(false) => {}
                Err(e) => return failed(e, "writing"),
            }
        }
    }
    Ok(None)
}

/// The ClusterRoleBinding that lets the members' ServiceAccount create
/// CertificateSigningRequests, written when missing or different.
async fn bind_members(cluster: &ValidCluster<'_>, ctx: &Context) -> Step {
    let desired = resources::hashed(resources::member_csr_binding(cluster));
    let name = desired.name_any();
    let api: Api<ClusterRoleBinding> = Api::all(ctx.client.clone());
    let failed = |e: kube::Error, what: &str| -> Step {
        if lasting(&e) {
            Ok(Some(unavailable(format!(
                "{what} the members' ClusterRoleBinding {name} failed: {e}"
            ))))
        } else {
            Err(Error::ApplyObject {
                kind: "ClusterRoleBinding",
                name: name.clone(),
                source: e,
            })
        }
    };
    match ctx.cluster_role_bindings.get(&ObjectRef::new(&name)) {
        Some(cached) if labelled_for(cached.labels(), cluster) => {
            match apply_when_changed(&api, resources::applied_hash(cached.as_ref()), &desired).await
            {
                Ok(true) => {
                    info!(cluster = %cluster.name_any(), binding = %name, "members' certificate binding applied");
                }
                Ok(false) => {}
                Err(e) => return failed(e, "writing"),
            }
            Ok(None)
        }
        Some(_) => Ok(Some(foreign("ClusterRoleBinding", name))),
        None => {
            match create_as_ours(&api, &desired).await {
                Ok(true) => {
                    info!(cluster = %cluster.name_any(), binding = %name, "members' certificate binding created");
                    Ok(None)
                }
                // Taken: ours (the cache is behind), or someone else's.
                Ok(false) => {
                    let existing = api
                        .get_opt(&name)
                        .await
                        .map_err(|source| Error::GetObject {
                            kind: "ClusterRoleBinding",
                            name: name.clone(),
                            source,
                        })?;
                    match existing {
                        Some(existing) if !labelled_for(existing.labels(), cluster) => {
                            Ok(Some(foreign("ClusterRoleBinding", name)))
                        }
                        _ => Ok(None),
                    }
                }
                Err(e) => failed(e, "creating"),
            }
        }
    }
}

/// The Cluster (namespace, name) whose object, kept outside its namespace
/// (a CA Secret, a members' binding), carries these labels.
pub(crate) fn names_cluster(
    object_labels: &std::collections::BTreeMap<String, String>,
) -> Option<(String, String)> {
    Some((
        object_labels.get(tls::CA_NAMESPACE_LABEL)?.clone(),
        object_labels.get(labels::CLUSTER)?.clone(),
    ))
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
