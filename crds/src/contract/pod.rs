//! The member Pod's command lines and environment: the words the controller
//! writes into the Pod template and the binary's parsers read (the root
//! package's clap dispatch, `init`'s `install`, the sidecar's settings and
//! its `nodetool`). Written here once; the root binary's tests parse the Pod
//! the controller builds with the binary's own parser. Pure.

use super::SHARED_DIR;

/// The binary's file name: in the operator's image and on the shared
/// volume.
pub const BINARY_NAME: &str = "cassandra-operator";
/// The binary in the operator's image (its entrypoint, `init/Dockerfile`):
/// what the init container runs.
pub const IMAGE_BINARY: &str = "/usr/local/bin/cassandra-operator";

/// The binary as the init container installs it on the shared volume
/// (`<SHARED_DIR>/<BINARY_NAME>`): what the database container runs, the
/// database image having no binary of ours.
pub fn installed_binary() -> String {
    format!("{SHARED_DIR}/{BINARY_NAME}")
}

/// The binary's subcommands (and their flags) the member Pod runs.
pub mod subcommand {
    /// The init container: copy the binary and the image's plugins into the
    /// shared volume.
    pub const INSTALL: &str = "install";
    /// `install`'s flag (`--target`): the directory to install into.
    pub const INSTALL_TARGET: &str = "target";
    /// The database container's entrypoint.
    pub const SIDECAR: &str = "sidecar";
    /// The small nodetool (over Jolokia, or ScyllaDB's REST API).
    pub const NODETOOL: &str = "nodetool";
    /// `nodetool`'s command that the preStop hook runs.
    pub const DRAIN: &str = "drain";
}

/// The sidecar's environment, from the downward API: who the member is
/// without a read of its Pod (DESIGN.md section 6).
pub mod env {
    /// `metadata.name`: the member's Pod, and its member Service.
    pub const POD_NAME: &str = "POD_NAME";
    /// `metadata.namespace`.
    pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
    /// `status.podIP`: the database's listen address.
    pub const POD_IP: &str = "POD_IP";
    /// The Pod's cluster label ([`crate::labels::CLUSTER`]).
    pub const POD_CLUSTER: &str = "POD_CLUSTER";
    /// The Pod's datacenter label ([`crate::labels::DATACENTER`]).
    pub const POD_DATACENTER: &str = "POD_DATACENTER";
    /// The Pod's rack label ([`crate::labels::RACK`]).
    pub const POD_RACK: &str = "POD_RACK";
    /// The database container's `limits.cpu`.
    pub const CPU_LIMIT: &str = "CPU_LIMIT";
    /// The database container's `limits.memory`: the heap is sized from it.
    pub const MEMORY_LIMIT: &str = "MEMORY_LIMIT";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_container_runs_the_installed_binary() {
        assert_eq!(installed_binary(), "/mnt/shared/cassandra-operator");
        assert!(IMAGE_BINARY.ends_with(&format!("/{BINARY_NAME}")));
    }
}
