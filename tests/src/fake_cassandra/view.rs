//! What one node's JMX sees of the ring (its gossip view), taken from the
//! ring model kept by kubesim and served to the fake node at
//! `GET /sim/ring/nodes/{host_id}`. Pure.

use serde::{Deserialize, Serialize};

use crate::ring::{
    BYTES_PER_COPY, BootstrapState, Endpoint, GossipEndpoint, Operation, Ring, RingState, Token,
    TokenMap,
};

/// A ring member as another node's gossip shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub address: String,
    pub host_id: String,
    pub dc: String,
    pub rack: String,
    pub tokens: Vec<String>,
    /// Up in this node's failure detector (`LiveNodes`) or not
    /// (`UnreachableNodes`): it lags behind the member's process
    /// ([`Ring::sees_up`]).
    pub up: bool,
    /// `N`, `J` (joining or replacing), `L` (leaving) or `M`.
    pub state: char,
    /// Bytes of live data it gossips (`LoadMap`).
    pub load_bytes: u64,
    /// Share of the token ring its tokens own (`getOwnership`).
    pub ownership: f64,
    /// What this node's gossip holds of it (generation, heartbeat,
    /// status): `AllEndpointStates`, `/failure_detector/endpoints/`.
    #[serde(default)]
    pub gossip: GossipEndpoint,
}

/// One node's view: its own state and the members it knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub host_id: String,
    pub address: String,
    pub cluster_name: String,
    /// Whether the model has its process running (a process killed
    /// behind its back, or whose disk was lost, has to exit).
    pub running: bool,
    /// `OperationMode`.
    pub mode: String,
    /// A token-ring member (`isJoined`).
    pub joined: bool,
    pub dc: String,
    pub rack: String,
    pub tokens: Vec<String>,
    pub load_bytes: u64,
    /// `SystemKeyspace.BootstrapState` of its data directory.
    pub bootstrap_state: String,
    pub decommissioning: bool,
    pub decommission_failed: bool,
    /// Keyspace -> copies its data directory holds (what its sstables
    /// hold; the fake flushes them to files).
    #[serde(default)]
    pub copies: std::collections::BTreeMap<String, usize>,
    /// How its last streaming operation failed, if it did (what Cassandra
    /// logs of a failed bootstrap, replacement or decommission).
    #[serde(default)]
    pub failure: Option<String>,
    /// Every member that has not left (this node too while it is one).
    pub endpoints: Vec<EndpointView>,
    /// The ring's replicated keyspaces, the system ones included
    /// (`NonLocalStrategyKeyspaces`).
    #[serde(default)]
    pub keyspaces: Vec<String>,
}

impl NodeView {
    /// The member at `address`.
    pub fn endpoint(&self, address: &str) -> Option<&EndpointView> {
        self.endpoints.iter().find(|e| e.address == address)
    }

    /// The load of this node's data directory.
    pub fn load_string(&self) -> String {
        crate::ring::stringify_size(self.load_bytes)
    }
}

fn state_letter(state: &RingState) -> char {
    match state {
        RingState::Joining | RingState::Replacing { .. } => 'J',
        RingState::Leaving => 'L',
        _ => 'N',
    }
}

fn bootstrap_name(state: BootstrapState) -> &'static str {
    match state {
        BootstrapState::NeedsBootstrap => "NEEDS_BOOTSTRAP",
        BootstrapState::InProgress => "IN_PROGRESS",
        BootstrapState::Completed => "COMPLETED",
        BootstrapState::Decommissioned => "DECOMMISSIONED",
    }
}

/// The view of the member `host_id` of `ring`, `None` if there is no such
/// member. Ownership counts the tokens of joining members as theirs (as the
/// contract peer does), so that a joining member shows a share.
pub fn node_view(ring: &Ring, host_id: &str) -> Option<NodeView> {
    let me = ring.node(host_id)?;
    let members: Vec<_> = ring
        .nodes()
        .filter(|n| n.state != RingState::Left)
        .collect();
    let owners: Vec<(Endpoint, Vec<Token>)> = members
        .iter()
        .filter(|n| n.state != RingState::Hibernating || n.process.is_some())
        .map(|n| {
            (
                Endpoint {
                    host_id: n.host_id.clone(),
                    dc: n.dc.clone(),
                    rack: n.rack.clone(),
                },
                n.tokens.clone(),
            )
        })
        .collect();
    let map = TokenMap::new(owners.iter().map(|(e, t)| (e.clone(), t.as_slice())));
    let ownership = if map.is_empty() {
        Default::default()
    } else {
        map.ownership(None)
    };
    let copies = |h: &str| ring.disk_of(h).map_or(0, |d| d.copy_count()) as u64;
    let endpoints = members
        .iter()
        .map(|n| EndpointView {
            address: n.address.clone(),
            host_id: n.host_id.clone(),
            dc: n.dc.clone(),
            rack: n.rack.clone(),
            tokens: n.tokens.iter().map(|t| t.to_string()).collect(),
            // Gossiper.getLiveMembers always counts the local node; the
            // others as this node's failure detector has them.
            up: n.host_id == me.host_id || ring.sees_up(&me.host_id, &n.host_id),
            state: state_letter(&n.state),
            load_bytes: copies(&n.host_id) * BYTES_PER_COPY,
            ownership: ownership.get(&n.host_id).copied().unwrap_or(0.0),
            gossip: ring
                .endpoint_state(&me.host_id, &n.host_id)
                .unwrap_or_default(),
        })
        .collect();
    let process = me.process.as_ref();
    let busy = process.and_then(|p| p.busy).map(|b| b.operation);
    Some(NodeView {
        host_id: me.host_id.clone(),
        address: me.address.clone(),
        cluster_name: ring.cluster_name().unwrap_or_default().to_string(),
        running: me.process.is_some(),
        mode: me
            .mode()
            .map(|m| m.to_string())
            .unwrap_or_else(|| "STARTING".to_string()),
        joined: matches!(
            me.state,
            RingState::Normal | RingState::Leaving | RingState::Hibernating
        ),
        dc: me.dc.clone(),
        rack: me.rack.clone(),
        tokens: me.tokens.iter().map(|t| t.to_string()).collect(),
        load_bytes: copies(&me.host_id) * BYTES_PER_COPY,
        copies: ring
            .disk_of(&me.host_id)
            .map(|d| {
                d.copies
                    .iter()
                    .map(|(ks, keys)| (ks.clone(), keys.len()))
                    .collect()
            })
            .unwrap_or_default(),
        failure: None,
        bootstrap_state: ring
            .data_dir(&me.data_dir)
            .map_or("NEEDS_BOOTSTRAP", |d| bootstrap_name(d.bootstrap))
            .to_string(),
        decommissioning: busy == Some(Operation::Decommission),
        decommission_failed: me.mode() == Some(crate::ring::OperationMode::DecommissionFailed),
        endpoints,
        keyspaces: ring.keyspaces().map(|k| k.name.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{NodeConfig, Options};

    #[test]
    fn a_nodes_view_of_a_ring_with_a_down_peer() {
        let mut ring = Ring::new(Options::default());
        let seeds = ["10.0.0.1", "10.0.0.2"];
        let a = ring
            .start(&NodeConfig::new("c", "10.0.0.1", "dc1", "r1", &seeds, "/a"))
            .expect("a");
        let b = ring
            .start(&NodeConfig::new("c", "10.0.0.2", "dc1", "r2", &seeds, "/b"))
            .expect("b");
        ring.kill(&b.host_id).expect("kill");
        let view = node_view(&ring, &a.host_id).expect("a view");
        assert_eq!(view.mode, "NORMAL");
        assert!(view.running);
        assert!(!node_view(&ring, &b.host_id).expect("b's view").running);
        assert_eq!(view.cluster_name, "c");
        assert_eq!(view.tokens.len(), 16);
        assert!(view.joined);
        let peer = view.endpoint("10.0.0.2").expect("b is known");
        assert!(!peer.up);
        assert_eq!((peer.state, peer.rack.as_str()), ('N', "r2"));
        let total: f64 = view.endpoints.iter().map(|e| e.ownership).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(node_view(&ring, "nope").is_none());
        // Drained, the others see it down; its own view still counts it
        // live (Gossiper.getLiveMembers).
        ring.drain(&a.host_id).expect("drain");
        let view = node_view(&ring, &a.host_id).expect("a view");
        assert_eq!(view.mode, "DRAINED");
        assert!(view.endpoint("10.0.0.1").expect("itself").up);
    }
}
