//! The local database node as the sidecar's workflows see it, whatever it
//! runs: Cassandra through Jolokia, ScyllaDB through its REST API. The
//! probes, the drain on SIGTERM, the decommission protocol and the
//! bootstrap record ask this, never a protocol. I/O.

use std::sync::Arc;
use std::time::Duration;

use crds::v1alpha1::ClusterMode;

use crds::contract::GossipView;

use crate::jolokia::{self, GossipEndpoint, Jolokia, OperationMode, StorageService};
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

    /// What this node's gossip says, as the [`crds::contract::GOSSIP`] record
    /// holds it; `None` until its gossip knows itself (`own_address`, its
    /// broadcast address).
    pub async fn gossip_view(&self, own_address: &str) -> Result<Option<GossipView>, NodeError> {
        let (endpoints, owners, host_id) = match self {
            Node::Cassandra(storage) => {
                let (owners, host_id) = storage.owners_and_host_id().await?;
                (storage.gossip().await?, owners, host_id)
            }
            Node::Scylla(scylla) => (
                scylla.gossip().await?,
                scylla.host_ids().await?,
                scylla.local_host_id().await?,
            ),
        };
        Ok(gossip_view(own_address, &endpoints).map(|view| GossipView {
            host_id,
            owners: Some(token_owners(&owners)),
            ..view
        }))
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

/// The record of what a node's gossip says, from its endpoints: addresses
/// in their canonical text (as a Service's ClusterIP is written), the ones
/// it sees up with the generation it knows them by. `None` when the node
/// does not know itself yet. Pure.
pub fn gossip_view(own_address: &str, endpoints: &[GossipEndpoint]) -> Option<GossipView> {
    let canonical = |a: &str| {
        a.parse::<std::net::IpAddr>()
            .map_or_else(|_| a.to_string(), |ip| ip.to_string())
    };
    let own = canonical(own_address);
    let mut view = GossipView::default();
    let mut known_self = false;
    for endpoint in endpoints {
        let address = canonical(&endpoint.address);
        if address == own {
            known_self = true;
            view.generation = endpoint.generation?;
        }
        match (endpoint.up, endpoint.generation) {
            (true, Some(generation)) => {
                view.up.insert(address, generation);
            }
            _ => {
                view.down.insert(address);
            }
        }
    }
    known_self.then_some(view)
}

/// The token owners of a node's token metadata (endpoint → host ID, as
/// Cassandra's `EndpointToHostId` or ScyllaDB's `/storage_service/host_id`
/// give them), by address in its canonical text. Pure.
pub fn token_owners(
    endpoints: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    endpoints
        .iter()
        .map(|(endpoint, host_id)| (canonical_address(endpoint), host_id.clone()))
        .collect()
}

/// An endpoint's address as a Service's ClusterIP is written: without the
/// `/` prefix and port Cassandra's MBeans may print, IPv6 compressed.
fn canonical_address(endpoint: &str) -> String {
    let host = crate::jolokia::endpoint_host(endpoint);
    host.parse::<std::net::IpAddr>()
        .map_or_else(|_| host.to_string(), |ip| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_owners_are_keyed_by_canonical_address() {
        let owners = token_owners(
            &[
                ("/10.96.0.1".to_string(), "a".to_string()),
                ("10.96.0.2:7000".to_string(), "b".to_string()),
                ("fd00:0:0:0:0:0:0:a".to_string(), "c".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            owners.into_iter().collect::<Vec<_>>(),
            vec![
                ("10.96.0.1".to_string(), "a".to_string()),
                ("10.96.0.2".to_string(), "b".to_string()),
                ("fd00::a".to_string(), "c".to_string()),
            ]
        );
    }

    fn endpoint(address: &str, up: bool, generation: Option<i64>) -> GossipEndpoint {
        GossipEndpoint {
            address: address.to_string(),
            up,
            generation,
        }
    }

    #[test]
    fn a_gossip_view_records_who_is_up_by_which_generation() {
        let view = gossip_view(
            "10.96.0.2",
            &[
                endpoint("10.96.0.1", true, Some(1_700_000_000)),
                endpoint("10.96.0.2", true, Some(1_700_000_500)),
                endpoint("10.96.0.3", false, Some(1_700_000_100)),
            ],
        )
        .expect("it knows itself");
        assert_eq!(view.generation, 1_700_000_500);
        assert_eq!(
            view.up.into_iter().collect::<Vec<_>>(),
            vec![
                ("10.96.0.1".to_string(), 1_700_000_000),
                ("10.96.0.2".to_string(), 1_700_000_500)
            ]
        );
        assert_eq!(view.down.into_iter().collect::<Vec<_>>(), vec!["10.96.0.3"]);
    }

    #[test]
    fn a_node_that_does_not_know_itself_yet_records_nothing() {
        assert_eq!(
            gossip_view("10.96.0.2", &[endpoint("10.96.0.1", true, Some(1))]),
            None
        );
    }

    #[test]
    fn ipv6_addresses_compare_in_their_canonical_text() {
        // Java prints 0:0:0:0:0:0:0:1, a ClusterIP reads ::1.
        let view = gossip_view("fd00::a", &[endpoint("fd00:0:0:0:0:0:0:a", true, Some(7))])
            .expect("it knows itself");
        assert_eq!(view.generation, 7);
        assert!(view.up.contains_key("fd00::a"));
    }
}
