//! Configuration rendering (cassandra.yaml, scylla.yaml, rackdc, JVM options).
//! Not built yet (issue: Sidecar).

use std::path::PathBuf;

/// `cassandra-operator config render`: render a member's configuration files
/// offline, from the image's default configuration and the given inputs.
#[derive(clap::Args, Debug, Clone)]
pub struct RenderArgs {
    /// Database: cassandra or scylla.
    #[arg(long, default_value = "cassandra")]
    pub mode: String,
    /// The image's configuration directory (holding cassandra.yaml or scylla.yaml).
    #[arg(long, value_name = "DIR")]
    pub defaults: PathBuf,
    /// Where to write the rendered files.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// cluster_name.
    #[arg(long)]
    pub cluster_name: String,
    /// The Pod IP (listen_address).
    #[arg(long)]
    pub pod_ip: String,
    /// The member Service's ClusterIP (broadcast_address, broadcast_rpc_address).
    #[arg(long)]
    pub broadcast_address: String,
    /// Seed addresses, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<String>,
    /// Datacenter name.
    #[arg(long)]
    pub dc: String,
    /// Rack name.
    #[arg(long)]
    pub rack: String,
    /// Memory limit of the container, a Kubernetes quantity (e.g. 8Gi).
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// CPU limit of the container, a Kubernetes quantity (e.g. 2 or 1500m).
    #[arg(long)]
    pub cpu_limit: Option<String>,
    /// A cassandra.yaml fragment merged on top (the rack's ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub overrides: Option<PathBuf>,
    /// Start as the replacement of the node at this address.
    #[arg(long)]
    pub replace_address: Option<String>,
}
