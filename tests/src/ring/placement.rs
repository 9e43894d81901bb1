//! Replica placement as Cassandra computes it (`TokenMetadata`,
//! `SimpleStrategy`, `NetworkTopologyStrategy`) and token ownership as
//! `nodetool status` shows it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::murmur3::Token;

/// A keyspace's replication strategy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "class")]
pub enum Replication {
    /// `SimpleStrategy`: `rf` distinct nodes clockwise from the key's token.
    #[serde(rename = "SimpleStrategy")]
    Simple { replication_factor: usize },
    /// `NetworkTopologyStrategy`: per datacenter, distinct racks first.
    #[serde(rename = "NetworkTopologyStrategy")]
    NetworkTopology {
        datacenters: BTreeMap<String, usize>,
    },
}

impl Replication {
    pub fn simple(rf: usize) -> Self {
        Replication::Simple {
            replication_factor: rf,
        }
    }

    pub fn network_topology<'a>(dcs: impl IntoIterator<Item = (&'a str, usize)>) -> Self {
        Replication::NetworkTopology {
            datacenters: dcs
                .into_iter()
                .map(|(dc, rf)| (dc.to_string(), rf))
                .collect(),
        }
    }

    /// The total replication factor (`getReplicationFactor()`).
    pub fn total_rf(&self) -> usize {
        match self {
            Replication::Simple { replication_factor } => *replication_factor,
            Replication::NetworkTopology { datacenters } => datacenters.values().sum(),
        }
    }

    /// The replication factor in one datacenter (NTS), or the total (Simple).
    pub fn rf_in(&self, dc: &str) -> usize {
        match self {
            Replication::Simple { replication_factor } => *replication_factor,
            Replication::NetworkTopology { datacenters } => {
                datacenters.get(dc).copied().unwrap_or(0)
            }
        }
    }
}

/// One endpoint of a token map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host_id: String,
    pub dc: String,
    pub rack: String,
}

/// A sorted ring of tokens and the topology of their owners: Cassandra's
/// `TokenMetadata` for one view (the current natural owners, or the owners
/// once pending movements are done).
#[derive(Debug, Clone, Default)]
pub struct TokenMap {
    tokens: Vec<(Token, usize)>,
    endpoints: Vec<Endpoint>,
    dc_nodes: BTreeMap<String, usize>,
    dc_racks: BTreeMap<String, usize>,
}

impl TokenMap {
    pub fn new<'a>(owners: impl IntoIterator<Item = (Endpoint, &'a [Token])>) -> Self {
        let mut map = TokenMap::default();
        let mut racks: BTreeSet<(String, String)> = BTreeSet::new();
        for (endpoint, tokens) in owners {
            let index = map.endpoints.len();
            *map.dc_nodes.entry(endpoint.dc.clone()).or_default() += 1;
            racks.insert((endpoint.dc.clone(), endpoint.rack.clone()));
            map.tokens.extend(tokens.iter().map(|t| (*t, index)));
            map.endpoints.push(endpoint);
        }
        for (dc, _) in racks {
            *map.dc_racks.entry(dc).or_default() += 1;
        }
        map.tokens.sort();
        map
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Index of the first token >= `token`, wrapping past the end
    /// (`TokenMetadata.firstTokenIndex`).
    fn first_index(&self, token: Token) -> usize {
        let i = self.tokens.partition_point(|(t, _)| *t < token);
        if i == self.tokens.len() { 0 } else { i }
    }

    /// The range `(previous token, owning token]` that holds `token`.
    pub fn range_of(&self, token: Token) -> (Token, Token) {
        let i = self.first_index(token);
        let prev = if i == 0 { self.tokens.len() - 1 } else { i - 1 };
        (self.tokens[prev].0, self.tokens[i].0)
    }

    /// The natural replicas of `token`, primary first, as host IDs.
    pub fn replicas(&self, replication: &Replication, token: Token) -> Vec<String> {
        if self.tokens.is_empty() {
            return Vec::new();
        }
        let start = self.first_index(token);
        let indices = match replication {
            Replication::Simple { replication_factor } => self.simple(start, *replication_factor),
            Replication::NetworkTopology { datacenters } => self.nts(start, datacenters),
        };
        indices
            .into_iter()
            .map(|i| self.endpoints[i].host_id.clone())
            .collect()
    }

    fn ring_from(&self, start: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.tokens.len()).map(move |k| self.tokens[(start + k) % self.tokens.len()].1)
    }

    /// `SimpleStrategy.calculateNaturalReplicas`.
    fn simple(&self, start: usize, rf: usize) -> Vec<usize> {
        let mut replicas = Vec::new();
        for endpoint in self.ring_from(start) {
            if replicas.len() >= rf {
                break;
            }
            if !replicas.contains(&endpoint) {
                replicas.push(endpoint);
            }
        }
        replicas
    }

    /// `NetworkTopologyStrategy.calculateNaturalReplicas`: one pass over the
    /// ring; in each datacenter a node of a rack not seen yet is taken at
    /// once, a node of a seen rack only while there are fewer racks than
    /// the datacenter's rf (`acceptableRackRepeats`).
    fn nts(&self, start: usize, datacenters: &BTreeMap<String, usize>) -> Vec<usize> {
        struct Fill {
            rf_left: usize,
            rack_repeats: isize,
        }
        let mut fills: BTreeMap<&str, Fill> = BTreeMap::new();
        for (dc, rf) in datacenters {
            let nodes = self.dc_nodes.get(dc).copied().unwrap_or(0);
            if *rf == 0 || nodes == 0 {
                continue;
            }
            let racks = self.dc_racks.get(dc).copied().unwrap_or(0);
            fills.insert(
                dc.as_str(),
                Fill {
                    rf_left: (*rf).min(nodes),
                    rack_repeats: *rf as isize - racks as isize,
                },
            );
        }
        let mut to_fill = fills.len();
        let mut replicas: Vec<usize> = Vec::new();
        let mut seen_racks: BTreeSet<(&str, &str)> = BTreeSet::new();
        for endpoint in self.ring_from(start) {
            if to_fill == 0 {
                break;
            }
            let Endpoint { dc, rack, .. } = &self.endpoints[endpoint];
            let Some(fill) = fills.get_mut(dc.as_str()) else {
                continue;
            };
            if fill.rf_left == 0 {
                continue;
            }
            if seen_racks.insert((dc.as_str(), rack.as_str())) {
                fill.rf_left -= 1;
                replicas.push(endpoint);
            } else {
                if fill.rack_repeats <= 0 || replicas.contains(&endpoint) {
                    continue;
                }
                fill.rack_repeats -= 1;
                fill.rf_left -= 1;
                replicas.push(endpoint);
            }
            if fill.rf_left == 0 {
                to_fill -= 1;
            }
        }
        replicas
    }

    /// Share of the ring each endpoint holds a replica of: the effective
    /// ownership of `nodetool status <keyspace>`, or with `None` the raw
    /// share of primary ranges (`getOwnership`).
    pub fn ownership(&self, replication: Option<&Replication>) -> BTreeMap<String, f64> {
        let mut owned: BTreeMap<String, f64> = self
            .endpoints
            .iter()
            .map(|e| (e.host_id.clone(), 0.0))
            .collect();
        let n = self.tokens.len();
        for i in 0..n {
            let (token, owner) = self.tokens[i];
            let prev = self.tokens[(i + n - 1) % n].0;
            let size = if n == 1 {
                1.0
            } else {
                (token.wrapping_sub(prev) as u64) as f64 / 2f64.powi(64)
            };
            let holders = match replication {
                None => vec![self.endpoints[owner].host_id.clone()],
                Some(r) => self.replicas(r, token),
            };
            for host in holders {
                *owned.entry(host).or_default() += size;
            }
        }
        owned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, dc: &str, rack: &str) -> Endpoint {
        Endpoint {
            host_id: host.to_string(),
            dc: dc.to_string(),
            rack: rack.to_string(),
        }
    }

    fn map(owners: &[(&str, &str, &str, &[Token])]) -> TokenMap {
        TokenMap::new(
            owners
                .iter()
                .map(|(h, dc, rack, tokens)| (ep(h, dc, rack), *tokens)),
        )
    }

    #[test]
    fn simple_strategy_walks_clockwise_from_the_first_token_at_or_after_the_key() {
        let m = map(&[
            ("a", "dc1", "r1", &[0, 300]),
            ("b", "dc1", "r1", &[100]),
            ("c", "dc1", "r1", &[200]),
        ]);
        let rf2 = Replication::simple(2);
        assert_eq!(m.replicas(&rf2, 50), ["b", "c"]);
        assert_eq!(m.replicas(&rf2, 100), ["b", "c"]);
        assert_eq!(m.replicas(&rf2, 101), ["c", "a"]);
        // Past the last token the ring wraps to the first.
        assert_eq!(m.replicas(&rf2, 301), ["a", "b"]);
        // a's second token is skipped: replicas are distinct nodes.
        assert_eq!(m.replicas(&Replication::simple(3), 250), ["a", "b", "c"]);
        // rf above the node count yields every node once.
        assert_eq!(m.replicas(&Replication::simple(5), 250), ["a", "b", "c"]);
        assert_eq!(m.range_of(250), (200, 300));
        assert_eq!(m.range_of(301), (300, 0));
        assert_eq!(m.range_of(-7), (300, 0));
    }

    #[test]
    fn nts_prefers_distinct_racks_then_fills_with_repeats() {
        // dc1: racks r1 (a, b) and r2 (c); ring order a b c.
        let m = map(&[
            ("a", "dc1", "r1", &[0]),
            ("b", "dc1", "r1", &[100]),
            ("c", "dc1", "r2", &[200]),
            ("x", "dc2", "r1", &[50]),
            ("y", "dc2", "r1", &[150]),
        ]);
        let r = Replication::network_topology([("dc1", 2), ("dc2", 1)]);
        // From 0: a (r1), x (dc2, done), b skipped (r1 seen, 2 racks >= rf 2), c (r2).
        assert_eq!(m.replicas(&r, 0), ["a", "x", "c"]);
        // rf 3 in a dc with 2 racks: one rack repeat is acceptable.
        let r3 = Replication::network_topology([("dc1", 3)]);
        assert_eq!(m.replicas(&r3, 0), ["a", "b", "c"]);
        assert_eq!(m.replicas(&r3, 150), ["c", "a", "b"]);
        // A dc absent from the ring, or rf 0, is ignored.
        let r0 = Replication::network_topology([("dc1", 1), ("dc3", 2), ("dc2", 0)]);
        assert_eq!(m.replicas(&r0, 160), ["c"]);
        // rf above the node count of a dc takes them all.
        let big = Replication::network_topology([("dc2", 5)]);
        assert_eq!(m.replicas(&big, 0), ["x", "y"]);
    }

    #[test]
    fn ownership_sums_ranges_per_replica() {
        let q = i64::MAX / 2;
        let m = map(&[
            ("a", "dc1", "r1", &[-q - 1, q]),
            ("b", "dc1", "r1", &[0]),
            ("c", "dc1", "r1", &[i64::MIN + 1]),
        ]);
        let raw = m.ownership(None);
        let total: f64 = raw.values().sum();
        assert!((total - 1.0).abs() < 1e-9, "{raw:?}");
        assert!((raw["b"] - 0.25).abs() < 1e-6, "{raw:?}");
        let eff = m.ownership(Some(&Replication::simple(3)));
        for host in ["a", "b", "c"] {
            assert!((eff[host] - 1.0).abs() < 1e-9, "{eff:?}");
        }
        let single = map(&[("a", "dc1", "r1", &[42])]);
        assert_eq!(single.ownership(None)["a"], 1.0);
    }
}
