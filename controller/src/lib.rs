//! The controller crate: reconciles `Cluster` objects into StatefulSets,
//! Services, PVC clean-up, status and Events.
//!
//! - [`run`]: the kube-runtime Controller, its reflector caches and watch
//!   mappers (I/O); [`own_image`]: the members' image, the controller's
//!   own unless configured (I/O, once at start); [`context`]: what every reconcile shares, and the read
//!   of one cluster's objects from the caches.
//! - [`reconcile`]: the pipeline of one reconcile, one call per step.
//! - [`resources`]: the pure builders of every object a Cluster is made of.
//! - [`observe`]: from the cached objects to the observed state (pure);
//!   [`observed`]: its types.
//! - [`validated`]: the validated Cluster the builders take.
//! - [`decide`]: the pure decision step: (spec, observed state) -> next action.
//! - [`apply`]: the supporting objects and StatefulSets, written when
//!   missing or different (I/O).
//! - [`recheck`]: the fresh reads a destructive write needs (I/O, reads).
//! - [`act`]: the one write the decision asks for (I/O).
//! - [`status`]: the status and conditions a reconcile writes (pure).
//! - [`report`]: the status patch, Events and metrics (I/O);
//!   [`metrics`]: Prometheus metrics and probes; [`error`]: the errors.

pub mod act;
pub mod apply;
pub mod cached;
pub mod confirmation;
pub mod context;
pub mod decide;
pub mod error;
pub mod index;
pub mod metrics;
pub mod observe;
pub mod observed;
pub mod own_image;
pub mod recheck;
pub mod reconcile;
pub mod report;
pub mod resources;
pub mod run;
pub mod status;
pub mod validated;

#[cfg(test)]
mod fixtures;

/// `cassandra-operator controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Image of the operator, used for the members' init container unless a
    /// Cluster names its own sidecarImage. Default: the image of this
    /// controller's own container, read from its Pod (POD_NAME and
    /// POD_NAMESPACE, from the downward API); outside a Pod, the default
    /// image (see [`own_image`]).
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: Option<String>,
    /// How long a member a roll took down may take to come back Ready on
    /// the new template before the roll stops (a condition and a Warning
    /// Event name it), in seconds.
    #[arg(long, env = "MEMBER_RESTART_TIMEOUT_SECONDS", default_value_t = 600)]
    pub member_restart_timeout_seconds: u64,
    /// How many Clusters are reconciled at once (never one Cluster twice
    /// at once). Each reconcile in flight holds its own connections to the
    /// API server: unbounded, a thousand new Clusters opened thousands. At
    /// 8, a cluster's next step waited behind the others' reconciles when
    /// 100 grew at once (README, "Benchmarks").
    #[arg(long, env = "CONCURRENT_RECONCILES", default_value_t = 32,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrent_reconciles: u16,
}
