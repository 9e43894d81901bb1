//! The sidecar crate: everything that runs inside a member Pod or next to a
//! process that reloads on a signal.
//!
//! - [`render`]: configuration rendering (`sidecar`, `config render`).
//! - [`decommission`]: the member's side of the scale-down protocol (pure).
//! - [`supervise`]: the sidecar as the container's init (child, signals, reaping).
//! - [`jolokia`]: the Jolokia client and the StorageService facade.
//! - [`nodetool`]: a small nodetool over Jolokia.
//! - [`reloader`]: the SIGHUP watcher (`cassandra-operator reloader`).

pub mod decommission;
pub mod jolokia;
pub mod nodetool;
pub mod reloader;
pub mod render;
pub mod supervise;

/// `cassandra-operator sidecar`: the entrypoint of the database container.
/// Its settings come from the downward API.
#[derive(clap::Args, Debug, Clone)]
pub struct SidecarArgs {
    /// Name of this member's Pod (and of its member Service).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Namespace of the Pod.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// IP of the Pod (listen_address).
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<String>,
    /// CPU limit of the container (resourceFieldRef limits.cpu).
    #[arg(long, env = "CPU_LIMIT")]
    pub cpu_limit: Option<String>,
    /// Memory limit of the container (resourceFieldRef limits.memory).
    #[arg(long, env = "MEMORY_LIMIT")]
    pub memory_limit: Option<String>,
}
