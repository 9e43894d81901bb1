//! The signer's decision on one CertificateSigningRequest of signer
//! `cassandra.rook.io/member`: issue a member certificate, deny the request
//! (with the reason in its condition), or leave it alone. Pure: from the
//! request and what the caches hold of the requester's Cluster and member
//! Service ([`Members`]).
//!
//! Who asked is read from what the API server recorded, never from what
//! the requester wrote: `spec.username` (the ServiceAccount of the token)
//! and `spec.extra["authentication.kubernetes.io/pod-name"]` (the Pod a
//! projected token is bound to), which the API server sets itself on
//! create. The request's labels, subject and names are ignored; the
//! certificate's names are the controller's. A request is approved only
//! when, in this order:
//!
//! | check | refusal (reason) |
//! | --- | --- |
//! | the requester is a ServiceAccount | `NotAServiceAccount` |
//! | of a namespace this controller watches | (left alone: another operator's) |
//! | the members' ServiceAccount of a Cluster of that namespace | `NotAMemberServiceAccount` |
//! | whose spec enables TLS | `TlsNotEnabled` |
//! | with a token bound to a Pod | `NotBoundToAPod` |
//! | a member Pod of that Cluster: its member Service exists, the Cluster's (labels, owner) | `NotAMemberPod` (or wait: a member-named Pod whose Service the cache does not show yet) |
//! | the request parses and its self-signature verifies | `InvalidRequest` |
//! | its key is ECDSA P-256 or P-384 | `KeyRefused` |
//! | it asks for exactly the member usages | `UnexpectedUsages` |
//!
//! The refusals from `TlsNotEnabled` on concern one of a Cluster's members:
//! the signer tells that Cluster with a Warning Event.
//!
//! Crash points: the signer approves (`/approval`), then signs
//! (`/status`). A request approved and not signed (the controller died
//! between the two) is judged again and signed; one that no longer passes
//! is marked `Failed` (an approval cannot be taken back). A signed,
//! denied or failed request is left alone.

use std::net::IpAddr;
use std::sync::Arc;

use crds::contract::tls::{SIGNER_NAME, member_dns_names};
use crds::labels;
use crds::names;
use crds::v1alpha1::Cluster;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Service;

use crate::certificates::{
    MEMBER_USAGES, MemberCertificate, MemberKey, RequestRefused, read_request,
};
use crate::observe::owned_by;

/// The `spec.extra` key of the Pod a projected token is bound to.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The reason of the signer's Approved condition.
pub const APPROVED_REASON: &str = "MemberIdentityVerified";
/// The reason of the signer's Failed condition: approved, but no
/// certificate can be issued.
pub const FAILED_REASON: &str = "MemberIdentityNotVerified";

/// What the caches hold of the requester's namespace.
pub trait Members {
    /// The Cluster `name` of `namespace`.
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>>;
    /// The Service `name` of `namespace`.
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>>;
    /// The governing Service (`spec.serviceName`) of StatefulSet
    /// `statefulset` of `namespace`, when the cache holds it.
    fn governing_service(&self, namespace: &str, statefulset: &str) -> Option<String>;
}

/// The signer's settings, and its clock.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// The only namespace whose requests this controller judges
    /// (`--namespace`); None: every namespace.
    pub namespace: Option<&'a str>,
    /// `--cluster-domain`.
    pub cluster_domain: &'a str,
    /// `--member-certificate-lifetime`, in seconds.
    pub lifetime_secs: u64,
    /// Unix seconds.
    pub now: i64,
}

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Nothing: signed, denied or failed already, of another signer, or of
    /// a namespace another controller watches. Why, for the log.
    LeaveAlone(&'static str),
    /// Approve (unless approved already) and sign.
    Issue(Box<Issue>),
    /// Deny: not a member's request, or not one we sign.
    Deny(Denial),
    /// Approved (by the controller before a crash, or by hand) but it does
    /// not pass: mark it Failed.
    Fail(Denial),
    /// Not decidable yet (what the cache shows of the member is not
    /// complete): look again later. Why.
    Retry(String),
}

/// A request to approve and sign.
#[derive(Debug)]
pub struct Issue {
    /// The requester's Cluster (its CA signs).
    pub cluster: Arc<Cluster>,
    /// Not approved yet.
    pub approve: bool,
    /// The approval's message: who asked, and how they were recognised.
    pub message: String,
    /// The key the request proves it holds.
    pub key: MemberKey,
    /// The certificate to sign.
    pub certificate: MemberCertificate,
}

/// A refusal, with the condition's reason and message.
#[derive(Debug)]
pub struct Denial {
    pub reason: &'static str,
    pub message: String,
    /// The Cluster one of whose members asked: told with a Warning Event.
    pub cluster: Option<Arc<Cluster>>,
    /// The member Pod that asked, when the token named one.
    pub pod: Option<String>,
}

/// Whether a request carries a condition of `type_` with status True.
fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Judges one request.
pub fn judge(
    csr: &CertificateSigningRequest,
    members: &impl Members,
    settings: &Settings<'_>,
) -> Verdict {
    if csr.spec.signer_name != SIGNER_NAME {
        return Verdict::LeaveAlone("another signer's request");
    }
    if has_condition(csr, "Denied") {
        return Verdict::LeaveAlone("denied");
    }
    if has_condition(csr, "Failed") {
        return Verdict::LeaveAlone("failed");
    }
    if csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
    {
        return Verdict::LeaveAlone("signed");
    }
    let approved = has_condition(csr, "Approved");
    match check(csr, members, settings) {
        Checked::Member(mut issue) => {
            issue.approve = !approved;
            Verdict::Issue(issue)
        }
        Checked::Refused(denial) if approved => Verdict::Fail(denial),
        Checked::Refused(denial) => Verdict::Deny(denial),
        Checked::NotOurs(why) => Verdict::LeaveAlone(why),
        Checked::Incomplete(why) => Verdict::Retry(why),
    }
}

enum Checked {
    Member(Box<Issue>),
    Refused(Denial),
    NotOurs(&'static str),
    Incomplete(String),
}

fn check(
    csr: &CertificateSigningRequest,
    members: &impl Members,
    settings: &Settings<'_>,
) -> Checked {
    let refuse = |reason, message: String, cluster: Option<&Arc<Cluster>>, pod: Option<&str>| {
        Checked::Refused(Denial {
            reason,
            message,
            cluster: cluster.cloned(),
            pod: pod.map(str::to_string),
        })
    };
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let Some((namespace, account)) = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    else {
        return refuse(
            "NotAServiceAccount",
            format!(
                "requested by {username:?}, not by a ServiceAccount: only a member of a Cluster with TLS gets a certificate of signer {SIGNER_NAME}, with its own Pod's token"
            ),
            None,
            None,
        );
    };
    if settings
        .namespace
        .is_some_and(|watched| watched != namespace)
    {
        return Checked::NotOurs("a namespace this controller does not watch");
    }
    let cluster = account
        .strip_suffix("-member")
        .and_then(|name| members.cluster(namespace, name))
        .filter(|c| {
            names::member_service_account_name(&c.metadata.name.clone().unwrap_or_default())
                == account
        });
    let Some(cluster) = cluster else {
        return refuse(
            "NotAMemberServiceAccount",
            format!(
                "requested by ServiceAccount {namespace}/{account}, which is no Cluster's member ServiceAccount: only a member of a Cluster with TLS gets a certificate of signer {SIGNER_NAME}"
            ),
            None,
            None,
        );
    };
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let tls = cluster
        .spec
        .security
        .as_ref()
        .is_some_and(|s| s.tls.enabled());
    if !tls {
        return refuse(
            "TlsNotEnabled",
            format!(
                "requested by a member of Cluster {namespace}/{cluster_name}, whose spec.security.tls is off: its members get no certificates"
            ),
            Some(&cluster),
            None,
        );
    }
    let pods = csr
        .spec
        .extra
        .as_ref()
        .and_then(|extra| extra.get(POD_NAME_EXTRA))
        .map(Vec::as_slice)
        .unwrap_or_default();
    let [pod] = pods else {
        return refuse(
            "NotBoundToAPod",
            format!(
                "requested by ServiceAccount {namespace}/{account} of Cluster {cluster_name} with a token bound to no Pod (spec.extra has no single {POD_NAME_EXTRA}): a member asks with its Pod's projected token, which names its Pod"
            ),
            Some(&cluster),
            None,
        );
    };
    let member = match member_service(&cluster, namespace, pod, members) {
        Ok(member) => member,
        Err(MemberRefused::NotYet(why)) => return Checked::Incomplete(why),
        Err(MemberRefused::No(why)) => {
            return refuse(
                "NotAMemberPod",
                format!(
                    "requested from Pod {namespace}/{pod}, which is no member of Cluster {cluster_name}: {why}"
                ),
                Some(&cluster),
                Some(pod),
            );
        }
    };
    let key = match read_request(&csr.spec.request.0) {
        Ok(key) => key,
        Err(refused) => {
            let reason = match refused {
                RequestRefused::KeyRefused(_) => "KeyRefused",
                _ => "InvalidRequest",
            };
            return refuse(
                reason,
                format!("the request of member Pod {namespace}/{pod}: {refused}"),
                Some(&cluster),
                Some(pod),
            );
        }
    };
    let mut usages: Vec<&str> = csr
        .spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    usages.sort_unstable();
    usages.dedup();
    let mut wanted = MEMBER_USAGES.to_vec();
    wanted.sort_unstable();
    if usages != wanted {
        return refuse(
            "UnexpectedUsages",
            format!(
                "the request of member Pod {namespace}/{pod} asks for the usages {:?}; a member's certificate has exactly {:?}",
                csr.spec.usages.clone().unwrap_or_default(),
                MEMBER_USAGES
            ),
            Some(&cluster),
            Some(pod),
        );
    }
    let Some(address) = member
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    else {
        return Checked::Incomplete(format!(
            "the member Service {namespace}/{pod} has no ClusterIP yet"
        ));
    };
    let labels = member.metadata.labels.clone().unwrap_or_default();
    let statefulset = names::statefulset_name(
        &cluster_name,
        labels
            .get(labels::DATACENTER)
            .map(String::as_str)
            .unwrap_or_default(),
        labels
            .get(labels::RACK)
            .map(String::as_str)
            .unwrap_or_default(),
    );
    let governing = members
        .governing_service(namespace, &statefulset)
        .unwrap_or_else(|| names::client_service_name(&cluster_name));
    let dns_names = member_dns_names(pod, namespace, &governing, settings.cluster_domain);
    Checked::Member(Box::new(Issue {
        message: format!(
            "member Pod {namespace}/{pod} of Cluster {cluster_name}, by its ServiceAccount {account}'s token bound to that Pod"
        ),
        approve: true,
        certificate: MemberCertificate::new(
            pod,
            dns_names,
            address,
            settings.now,
            settings.lifetime_secs,
            csr.spec.expiration_seconds,
        ),
        key,
        cluster,
    }))
}

enum MemberRefused {
    No(String),
    NotYet(String),
}

/// The member Service of `pod`, when `pod` is a member of `cluster`: the
/// Service of its name exists, carries the cluster's label and is owned by
/// the Cluster, and its name is a member's of the rack its labels name.
fn member_service(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
    members: &impl Members,
) -> Result<Arc<Service>, MemberRefused> {
    let cluster_name = cluster.metadata.name.as_deref().unwrap_or_default();
    let Some(service) = members.service(namespace, pod) else {
        // A member's Service is created before its Pod: one the cache does
        // not show yet is waited for, when the Pod is named as a member of
        // one of the spec's racks.
        let named_as_member = cluster.spec.datacenter.racks.iter().any(|rack| {
            names::member_ordinal(
                &names::statefulset_name(cluster_name, &cluster.spec.datacenter.name, &rack.name),
                pod,
            )
            .is_some()
        });
        return if named_as_member {
            Err(MemberRefused::NotYet(format!(
                "the member Service {namespace}/{pod} is not in the cache yet"
            )))
        } else {
            Err(MemberRefused::No(format!("no member Service {pod} exists")))
        };
    };
    let labels = service.metadata.labels.clone().unwrap_or_default();
    let label = |key: &str| labels.get(key).map(String::as_str);
    if label(labels::CLUSTER) != Some(cluster_name) || label(labels::APP) != Some(labels::APP_NAME)
    {
        return Err(MemberRefused::No(format!(
            "Service {pod} does not carry the cluster's labels"
        )));
    }
    if !owned_by(&service.metadata, cluster) {
        return Err(MemberRefused::No(format!(
            "Service {pod} is not owned by the Cluster"
        )));
    }
    let (Some(datacenter), Some(rack)) = (label(labels::DATACENTER), label(labels::RACK)) else {
        return Err(MemberRefused::No(format!(
            "Service {pod} names no datacenter and rack"
        )));
    };
    let statefulset = names::statefulset_name(cluster_name, datacenter, rack);
    if names::member_ordinal(&statefulset, pod).is_none() {
        return Err(MemberRefused::No(format!(
            "{pod} is not a member name of rack {rack} ({statefulset}-<ordinal>)"
        )));
    }
    Ok(service)
}

#[cfg(test)]
#[path = "approval_tests.rs"]
mod tests;
