//! The errors of a reconcile step (a failed read or write), and their kinds for the metric label.
//!
//! A transient error backs off and retries (`run`'s error policy); what
//! the API server answered with a conflict is no error (see `act`).

use thiserror::Error;

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
    /// Making a cluster's certificate authority failed (the random number
    /// generator, or rcgen).
    #[error("making a certificate authority: {0}")]
    MakeAuthority(String),
    /// Connecting to the API server failed.
    #[error("connecting to the Kubernetes API: {0}")]
    Connect(#[source] kube::Error),
}

impl Error {
    /// The variant's name: the `kind` label of the errors metric (never
    /// `Debug` text, whose cardinality a message would blow up).
    pub fn kind(&self) -> &'static str {
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
            Error::MakeAuthority(_) => "MakeAuthority",
            Error::Connect(_) => "Connect",
        }
    }
}

/// Whether the API server answered 404 (the object is gone: what a
/// deletion wanted, or nothing left to do).
pub(crate) fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}
