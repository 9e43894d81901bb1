//! The signer of member certificates (I/O): a controller of the
//! CertificateSigningRequests of signer `cassandra.rook.io/member` (a watch
//! narrowed by `spec.signerName`). Each request is judged
//! ([`crate::approval`]) from the caches the reconciles read; a member's is
//! approved through `/approval` and signed through `/status` with its
//! Cluster's CA, any other denied with the reason in its condition (and a
//! Warning Event on the Cluster when one of its members asked).
//!
//! Every write carries the resourceVersion it was judged at: a request
//! that changed meanwhile is judged again. A request approved but not
//! signed (the controller died between the two) is signed at the next
//! pass: the watch's first list brings every request of the signer.

use std::sync::Arc;
use std::time::Duration;

use crds::contract::tls::{self, SIGNER_NAME};
use crds::v1alpha1::Cluster;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::{ObjectReference, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use crate::apply::FIELD_MANAGER;
use crate::approval::{self, APPROVED_REASON, Denial, FAILED_REASON, Issue, Members, Verdict};
use crate::authority::authority_of;
use crate::certificates::{self, Authority};
use crate::context::Context;
use crate::metrics::ClusterLabels;
use crate::report::publish;

/// What the signer reads: the reconciles' context and caches, and the
/// Clusters.
pub(crate) struct Signer {
    pub(crate) ctx: Arc<Context>,
    pub(crate) clusters: Store<Cluster>,
    /// `--namespace`: the only namespace whose requests it judges.
    pub(crate) namespace: Option<String>,
}

/// Why one request's pass failed (retried).
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("writing {subresource} of CertificateSigningRequest {name}: {source}")]
    Write {
        subresource: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("reading CA Secret {name}: {source}")]
    ReadAuthority { name: String, source: kube::Error },
    #[error("signing the certificate of CertificateSigningRequest {name}: {source}")]
    Sign {
        name: String,
        source: certificates::CertificateError,
    },
}

impl Members for Signer {
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        self.clusters.get(&ObjectRef::new(name).within(namespace))
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.ctx
            .services
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn governing_service(&self, namespace: &str, statefulset: &str) -> Option<String> {
        self.ctx
            .statefulsets
            .get(&ObjectRef::new(statefulset).within(namespace))?
            .spec
            .as_ref()?
            .service_name
            .clone()
    }
}

/// Runs the signer until SIGTERM or SIGINT.
pub(crate) async fn run(client: kube::Client, signer: Arc<Signer>) {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let (reader, writer) = reflector::store::<CertificateSigningRequest>();
    let requests = watcher(
        api,
        watcher::Config::default().fields(&format!("spec.signerName={SIGNER_NAME}")),
    )
    .default_backoff()
    .modify(|csr: &mut CertificateSigningRequest| csr.managed_fields_mut().clear())
    .reflect(writer)
    .applied_objects();
    Controller::for_stream(requests, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(4))
        .shutdown_on_signal()
        .run(reconcile, error_policy, signer)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(error = %e, "signing failed");
            }
        })
        .await;
}

fn error_policy(
    _csr: Arc<CertificateSigningRequest>,
    _error: &SignerError,
    signer: Arc<Signer>,
) -> Requeue {
    signer
        .ctx
        .metrics
        .errors
        .get_or_create(&crate::metrics::ErrorLabels {
            kind: "SignMemberCertificate".to_string(),
        })
        .inc();
    Requeue::requeue(Duration::from_secs(5))
}

/// One pass over one request.
async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    signer: Arc<Signer>,
) -> Result<Requeue, SignerError> {
    let ctx = &signer.ctx;
    if !ctx.synced() {
        return Ok(Requeue::requeue(Duration::from_millis(200)));
    }
    let name = csr.name_any();
    let settings = approval::Settings {
        namespace: signer.namespace.as_deref(),
        cluster_domain: &ctx.tls.cluster_domain,
        lifetime_secs: ctx.tls.member_certificate_lifetime_secs,
        now: k8s_openapi::jiff::Timestamp::now().as_second(),
    };
    match approval::judge(&csr, signer.as_ref(), &settings) {
        Verdict::LeaveAlone(why) => {
            debug!(request = %name, why, "left alone");
            Ok(Requeue::await_change())
        }
        Verdict::Retry(why) => {
            debug!(request = %name, why = %why, "judged again later");
            Ok(Requeue::requeue(Duration::from_secs(5)))
        }
        Verdict::Deny(denial) => {
            let mut denied = (*csr).clone();
            add_condition(&mut denied, "Denied", denial.reason, &denial.message);
            if !write(&name, "approval", &denied, ctx).await? {
                return Ok(Requeue::requeue(Duration::from_secs(1)));
            }
            info!(request = %name, reason = denial.reason, message = %denial.message, "certificate request denied");
            tell(&denial, "Denied", ctx).await;
            Ok(Requeue::await_change())
        }
        Verdict::Fail(denial) => {
            let mut failed = (*csr).clone();
            add_condition(
                &mut failed,
                "Failed",
                FAILED_REASON,
                &format!("approved, but no certificate is issued: {}", denial.message),
            );
            if !write(&name, "status", &failed, ctx).await? {
                return Ok(Requeue::requeue(Duration::from_secs(1)));
            }
            info!(request = %name, reason = denial.reason, message = %denial.message, "approved certificate request failed");
            tell(&denial, "Failed", ctx).await;
            Ok(Requeue::await_change())
        }
        Verdict::Issue(issue) => sign(&csr, *issue, &signer).await,
    }
}

/// Approves (unless approved already) and signs a member's request.
async fn sign(
    csr: &CertificateSigningRequest,
    issue: Issue,
    signer: &Signer,
) -> Result<Requeue, SignerError> {
    let ctx = &signer.ctx;
    let name = csr.name_any();
    let Some(authority) = authority(&issue.cluster, ctx).await? else {
        debug!(request = %name, "the cluster's CA is not made yet");
        return Ok(Requeue::requeue(Duration::from_secs(5)));
    };
    let mut signed = csr.clone();
    if issue.approve {
        add_condition(&mut signed, "Approved", APPROVED_REASON, &issue.message);
        let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
        signed = match api
            .replace_subresource("approval", &name, &post_params(), &signed)
            .await
        {
            Ok(approved) => approved,
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                return Ok(Requeue::requeue(Duration::from_secs(1)));
            }
            Err(source) => {
                return Err(SignerError::Write {
                    subresource: "approval",
                    name,
                    source,
                });
            }
        };
        debug!(request = %name, message = %issue.message, "approved");
    }
    let chain =
        certificates::issue(&authority, &issue.key, &issue.certificate).map_err(|source| {
            SignerError::Sign {
                name: name.clone(),
                source,
            }
        })?;
    signed
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .certificate = Some(ByteString(chain.into_bytes()));
    if !write(&name, "status", &signed, ctx).await? {
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    }
    let cluster = &issue.cluster;
    ctx.metrics
        .member_certificates_signed
        .get_or_create(&ClusterLabels {
            namespace: cluster.namespace().unwrap_or_default(),
            cluster: cluster.name_any(),
        })
        .inc();
    debug!(
        request = %name,
        member = %issue.certificate.pod,
        not_after = issue.certificate.not_after,
        "member certificate signed"
    );
    Ok(Requeue::await_change())
}

/// The cluster's CA: from the cache, else read (made by a reconcile the
/// cache has not caught up with). None when it is not made yet, or holds
/// no usable CA (the Cluster's status says so).
async fn authority(cluster: &Cluster, ctx: &Context) -> Result<Option<Authority>, SignerError> {
    let namespace = &ctx.tls.operator_namespace;
    let name = tls::ca_secret_name(cluster.metadata.uid.as_deref().unwrap_or_default());
    let secret: Option<Arc<Secret>> =
        match ctx.secrets.get(&ObjectRef::new(&name).within(namespace)) {
            Some(secret) => Some(secret),
            None => Api::<Secret>::namespaced(ctx.client.clone(), namespace)
                .get_opt(&name)
                .await
                .map_err(|source| SignerError::ReadAuthority {
                    name: name.clone(),
                    source,
                })?
                .map(Arc::new),
        };
    let Some(secret) = secret else {
        return Ok(None);
    };
    if !crate::authority::labelled_for(secret.labels(), cluster) {
        warn!(secret = %name, "a CA Secret of this name is not the cluster's: not signing with it");
        return Ok(None);
    }
    match authority_of(&secret) {
        Ok(authority) => Ok(Some(authority)),
        Err(why) => {
            warn!(secret = %name, why = %why, "the cluster's CA is unusable: not signing");
            Ok(None)
        }
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// Writes `csr` through `subresource` (`approval` or `status`), guarded by
/// its resourceVersion. False when it changed meanwhile (or went): the
/// watch brings it, to be judged again.
async fn write(
    name: &str,
    subresource: &'static str,
    csr: &CertificateSigningRequest,
    ctx: &Context,
) -> Result<bool, SignerError> {
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api
        .replace_subresource(subresource, name, &post_params(), csr)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(source) => Err(SignerError::Write {
            subresource,
            name: name.to_string(),
            source,
        }),
    }
}

/// Adds a condition (True) to a request's status.
pub(crate) fn add_condition(
    csr: &mut CertificateSigningRequest,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    csr.status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.to_string(),
            status: "True".to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
}

/// A Warning Event on the Cluster one of whose members asked, about its
/// Pod: a member that gets no certificate cannot start.
async fn tell(denial: &Denial, verdict: &str, ctx: &Context) {
    let Some(cluster) = &denial.cluster else {
        return;
    };
    ctx.metrics
        .member_certificate_requests_refused
        .get_or_create(&crate::metrics::RefusalLabels {
            namespace: cluster.namespace().unwrap_or_default(),
            cluster: cluster.name_any(),
            reason: denial.reason.to_string(),
        })
        .inc();
    let related = denial.pod.as_ref().map(|pod| ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(pod.clone()),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    });
    publish(
        ctx,
        cluster,
        EventType::Warning,
        "MemberCertificateRefused",
        "SignMemberCertificate",
        format!(
            "{verdict} a certificate request ({}): {}",
            denial.reason, denial.message
        ),
        related,
    )
    .await;
}

#[cfg(test)]
#[path = "signer_tests.rs"]
mod tests;
