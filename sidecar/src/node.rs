//! The local database node as the sidecar's workflows see it, whatever it
//! runs: Cassandra through Jolokia, ScyllaDB through its REST API. The
//! probes, the drain on SIGTERM, the decommission protocol and the
//! bootstrap record ask this, never a protocol. I/O.

use std::sync::Arc;
use std::time::Duration;

use crds::v1alpha1::ClusterMode;

use crate::jolokia::{self, Jolokia, OperationMode, StorageService};
use crate::scylla::{self, Scylla};

/// A call to the node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Jolokia(#[from] jolokia::Error),
    #[error(transparent)]
    Scylla(#[from] scylla::Error),
}

impl NodeError {
    /// Nothing answers (the database is not up).
    pub fn is_unreachable(&self) -> bool {
        match self {
            NodeError::Jolokia(e) => e.is_unreachable(),
            NodeError::Scylla(e) => e.is_unreachable(),
        }
    }

    /// The database's own refusal (an exception it threw), without any
    /// protocol wrapping; `None` when the call did not reach it.
    pub fn thrown_message(&self) -> Option<&str> {
        match self {
            NodeError::Jolokia(e) => e.thrown_message(),
            NodeError::Scylla(e) => e.thrown_message(),
        }
    }
}

/// The local node.
#[derive(Debug, Clone)]
pub enum Node {
    /// Cassandra's StorageService through Jolokia (it learns the version
    /// once, hence shared).
    Cassandra(Arc<StorageService>),
    /// ScyllaDB's REST API.
    Scylla(Scylla),
}

impl Node {
    /// The node of a mode, at the given endpoints.
    pub fn for_mode(
        mode: ClusterMode,
        jolokia_url: &str,
        scylla_url: &str,
    ) -> Result<Node, NodeError> {
        Ok(match mode {
            ClusterMode::Cassandra => Node::cassandra(Jolokia::new(jolokia_url)?),
            ClusterMode::Scylla => Node::Scylla(Scylla::new(scylla_url)?),
        })
    }

    /// Cassandra through this Jolokia client.
    pub fn cassandra(jolokia: Jolokia) -> Node {
        Node::Cassandra(Arc::new(StorageService::new(jolokia)))
    }

    /// The same node with another timeout for ordinary calls.
    pub fn with_timeout(&self, timeout: Duration) -> Node {
        match self {
            Node::Cassandra(storage) => {
                Node::cassandra(storage.jolokia().clone().with_timeout(timeout))
            }
            Node::Scylla(scylla) => Node::Scylla(scylla.clone().with_timeout(timeout)),
        }
    }

    /// The timeout of the blocking operations (drain, decommission).
    pub fn long_timeout(&self) -> Duration {
        match self {
            Node::Cassandra(storage) => storage.jolokia().long_timeout(),
            Node::Scylla(scylla) => scylla.long_timeout(),
        }
    }

    /// The operation mode (NORMAL, JOINING, LEAVING, DECOMMISSIONED, ...).
    pub async fn operation_mode(&self) -> Result<OperationMode, NodeError> {
        Ok(match self {
            Node::Cassandra(storage) => storage.operation_mode().await?,
            Node::Scylla(scylla) => scylla.operation_mode().await?,
        })
    }

    /// This node's host ID, once it has one.
    pub async fn local_host_id(&self) -> Result<Option<String>, NodeError> {
        Ok(match self {
            Node::Cassandra(storage) => storage.local_host_id().await?,
            Node::Scylla(scylla) => scylla.local_host_id().await?,
        })
    }

    /// Flushes and stops accepting writes; blocks until done.
    pub async fn drain(&self) -> Result<(), NodeError> {
        match self {
            Node::Cassandra(storage) => storage.drain().await?,
            Node::Scylla(scylla) => scylla.drain().await?,
        }
        Ok(())
    }

    /// Streams this node's data away and leaves the ring; blocks until done.
    pub async fn decommission(&self) -> Result<(), NodeError> {
        match self {
            Node::Cassandra(storage) => storage.decommission().await?,
            Node::Scylla(scylla) => scylla.decommission().await?,
        }
        Ok(())
    }
}
