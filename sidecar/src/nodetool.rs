//! A small nodetool over Jolokia. Not built yet (issue: Sidecar).

/// `cassandra-operator nodetool`: talk to the local Cassandra through Jolokia.
#[derive(clap::Args, Debug, Clone)]
pub struct NodetoolArgs {
    /// Jolokia endpoint of the node.
    #[arg(
        long,
        env = "JOLOKIA_URL",
        default_value = "http://127.0.0.1:8778/jolokia/"
    )]
    pub jolokia: String,
    /// What to do.
    #[command(subcommand)]
    pub command: NodetoolCommand,
}

/// nodetool commands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum NodetoolCommand {
    /// The ring as this node sees it: state, address, load, tokens, host ID, rack.
    Status,
    /// This node: operation mode, host ID, load, version.
    Info,
    /// This node's operation mode (NORMAL, JOINING, LEAVING, DECOMMISSIONED, ...).
    OperationMode,
    /// Flush memtables and stop accepting writes (before a restart).
    Drain,
    /// Stream this node's data to the others and leave the ring (blocks until done).
    Decommission,
    /// The Cassandra release version.
    Version,
}
