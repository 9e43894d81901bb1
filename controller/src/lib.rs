//! The controller crate: reconciles `Cluster` objects into StatefulSets,
//! Services, PVC clean-up, status and Events. Not built yet (issue: Controller).

/// `cassandra-operator controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
}
