//! Read-only views of a [`Ring`]: the `nodetool status` table, the data
//! check behind `kubesim ring --check`, and the JSON snapshot of
//! `GET /sim/ring`. Pure.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::{
    BootstrapState, HostId, Keyspace, Node, OperationMode, Replication, Ring, RingError, RingState,
    Timing, Token,
};

/// What one copy weighs in the Load column: a key is shown as 1 KiB.
pub const BYTES_PER_COPY: u64 = 1024;

/// The two letters of `nodetool status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NodeStatus {
    UN,
    UJ,
    UL,
    UM,
    DN,
    DJ,
    DL,
    DM,
}

impl fmt::Display for NodeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

fn node_status(node: &Node) -> NodeStatus {
    let up = node.is_up();
    match (&node.state, up) {
        (RingState::Joining | RingState::Replacing { .. }, true) => NodeStatus::UJ,
        (RingState::Joining | RingState::Replacing { .. }, false) => NodeStatus::DJ,
        (RingState::Leaving, true) => NodeStatus::UL,
        (RingState::Leaving, false) => NodeStatus::DL,
        (_, true) => NodeStatus::UN,
        (_, false) => NodeStatus::DN,
    }
}

/// One row of `nodetool status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusRow {
    pub datacenter: String,
    pub status: NodeStatus,
    pub address: String,
    /// Copies held by the member's data directory.
    pub copies: usize,
    pub load_bytes: u64,
    pub tokens: usize,
    /// Ownership share (0..=1), `None` for a member that owns no tokens yet.
    pub owns: Option<f64>,
    pub host_id: HostId,
    pub rack: String,
    /// The release the member runs (`ReleaseVersion`): a column nodetool
    /// status does not have, shown by the sim so that a rolling upgrade's
    /// progress can be read at a glance.
    pub release: String,
}

/// `nodetool status [keyspace]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusTable {
    /// Whether Owns is effective ownership (replicas) or raw (primary
    /// ranges).
    pub effective: bool,
    /// The keyspace effective ownership was computed for.
    pub keyspace: Option<String>,
    /// nodetool's note when user keyspaces differ in replication.
    pub note: Option<String>,
    pub rows: Vec<StatusRow>,
}

/// `FileUtils.stringifyFileSize`: "#.##" with binary units.
pub fn stringify_size(bytes: u64) -> String {
    const UNITS: [(&str, f64); 4] = [
        ("TiB", 1024f64 * 1024f64 * 1024f64 * 1024f64),
        ("GiB", 1024f64 * 1024f64 * 1024f64),
        ("MiB", 1024f64 * 1024f64),
        ("KiB", 1024f64),
    ];
    let value = bytes as f64;
    for (unit, size) in UNITS {
        if value >= size {
            return format!("{} {unit}", two_decimals(value / size));
        }
    }
    format!("{bytes} bytes")
}

fn two_decimals(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn address_order(address: &str) -> (u8, Option<IpAddr>, String) {
    match address.parse::<IpAddr>() {
        Ok(ip) => (0, Some(ip), String::new()),
        Err(_) => (1, None, address.to_string()),
    }
}

impl fmt::Display for StatusTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut dcs: BTreeMap<&str, Vec<&StatusRow>> = BTreeMap::new();
        for row in &self.rows {
            dcs.entry(row.datacenter.as_str()).or_default().push(row);
        }
        let owns_header = if self.effective {
            "Owns (effective)"
        } else {
            "Owns"
        };
        for (i, (dc, rows)) in dcs.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let title = format!("Datacenter: {dc}");
            writeln!(f, "{title}")?;
            writeln!(f, "{}", "=".repeat(title.len()))?;
            writeln!(f, "Status=Up/Down")?;
            writeln!(f, "|/ State=Normal/Leaving/Joining/Moving")?;
            let cells: Vec<[String; 8]> = rows
                .iter()
                .map(|r| {
                    [
                        r.status.to_string(),
                        r.address.clone(),
                        stringify_size(r.load_bytes),
                        r.tokens.to_string(),
                        r.owns
                            .map(|o| format!("{:.1}%", o * 100.0))
                            .unwrap_or_else(|| "?".to_string()),
                        r.host_id.clone(),
                        r.rack.clone(),
                        r.release.clone(),
                    ]
                })
                .collect();
            let header = [
                "--".to_string(),
                "Address".to_string(),
                "Load".to_string(),
                "Tokens".to_string(),
                owns_header.to_string(),
                "Host ID".to_string(),
                "Rack".to_string(),
                "Version".to_string(),
            ];
            let mut widths = [0usize; 8];
            for line in std::iter::once(&header).chain(cells.iter()) {
                for (w, cell) in widths.iter_mut().zip(line.iter()) {
                    *w = (*w).max(cell.len());
                }
            }
            for line in std::iter::once(&header).chain(cells.iter()) {
                let mut out = String::new();
                for (k, cell) in line.iter().enumerate() {
                    if k == 7 {
                        out.push_str(cell);
                    } else {
                        out.push_str(&format!("{cell:<width$}  ", width = widths[k]));
                    }
                }
                writeln!(f, "{out}")?;
            }
        }
        if let Some(note) = &self.note {
            writeln!(f)?;
            writeln!(f, "Note: {note}")?;
        }
        Ok(())
    }
}

/// One natural replica of a key, and whether it holds a copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaCopy {
    pub host_id: HostId,
    pub address: String,
    pub status: NodeStatus,
    pub has_copy: bool,
}

/// A key whose replication is short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyReport {
    pub keyspace: String,
    pub key: String,
    pub token: Token,
    pub replication_factor: usize,
    /// Copies held by up natural replicas.
    pub live_copies: usize,
    /// Copies held by any ring member's data directory (replica or not).
    pub copies_in_ring: usize,
    pub replicas: Vec<ReplicaCopy>,
}

/// The data check: every key of every keyspace against its replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub keyspaces: usize,
    pub keys: usize,
    /// Fewer live copies than the replication factor, but a copy exists
    /// somewhere in the ring.
    pub under_replicated: Vec<KeyReport>,
    /// No copy on any ring member's data directory.
    pub lost: Vec<KeyReport>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.under_replicated.is_empty() && self.lost.is_empty()
    }
}

impl fmt::Display for KeyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{} (token {}): {} of {} live copies; replicas:",
            self.keyspace, self.key, self.token, self.live_copies, self.replication_factor
        )?;
        if self.replicas.is_empty() {
            write!(f, " none")?;
        }
        for (i, r) in self.replicas.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            let has = if r.has_copy { "has it" } else { "missing" };
            write!(f, "{sep}{} {} {has}", r.status, r.address)?;
        }
        Ok(())
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} keys in {} keyspaces: {} under-replicated, {} lost",
            self.keys,
            self.keyspaces,
            self.under_replicated.len(),
            self.lost.len()
        )?;
        for k in &self.under_replicated {
            writeln!(f, "UNDER-REPLICATED {k}")?;
        }
        for k in &self.lost {
            writeln!(f, "LOST {k}")?;
        }
        Ok(())
    }
}

impl Ring {
    /// `nodetool status [keyspace]`: every member that has not left, per
    /// datacenter, ordered by address.
    pub fn status(&self, keyspace: Option<&str>) -> Result<StatusTable, RingError> {
        let mut note = None;
        let replication: Option<(&str, &Replication)> = match keyspace {
            Some(name) => {
                let ks = self.keyspace_or_err(name)?;
                Some((ks.name.as_str(), &ks.replication))
            }
            None => {
                // StorageService.effectiveOwnership(null).
                let user: Vec<&Keyspace> = self.keyspaces.values().filter(|k| !k.system).collect();
                let first = user.first();
                if let Some(first) = first {
                    if user.iter().all(|k| k.replication == first.replication) {
                        Some((first.name.as_str(), &first.replication))
                    } else {
                        note = Some("Non-system keyspaces don't have the same replication settings, effective ownership information is meaningless".to_string());
                        None
                    }
                } else {
                    self.keyspaces
                        .get("system_traces")
                        .map(|k| (k.name.as_str(), &k.replication))
                }
            }
        };
        let map = self.natural_map();
        let owns = map.ownership(replication.map(|(_, r)| r));
        let mut rows: Vec<StatusRow> = self
            .nodes
            .values()
            .filter(|n| n.state != RingState::Left)
            .map(|n| {
                let copies = self.disk_of(&n.host_id).map_or(0, |d| d.copy_count());
                StatusRow {
                    datacenter: n.dc.clone(),
                    status: node_status(n),
                    address: n.address.clone(),
                    copies,
                    load_bytes: copies as u64 * BYTES_PER_COPY,
                    tokens: n.tokens.len(),
                    owns: if n.is_natural() {
                        owns.get(&n.host_id).copied()
                    } else {
                        None
                    },
                    host_id: n.host_id.clone(),
                    rack: n.rack.clone(),
                    release: n.release.clone(),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            (
                a.datacenter.as_str(),
                address_order(&a.address),
                a.host_id.as_str(),
            )
                .cmp(&(
                    b.datacenter.as_str(),
                    address_order(&b.address),
                    b.host_id.as_str(),
                ))
        });
        Ok(StatusTable {
            effective: replication.is_some(),
            keyspace: replication.map(|(name, _)| name.to_string()),
            note,
            rows,
        })
    }

    /// Whether a ring member's data directory holds the key.
    fn member_holds(&self, node: &Node, keyspace: &str, key: &str) -> bool {
        node.state != RingState::Left && self.holds(&node.host_id, keyspace, key)
    }

    /// The data check of `kubesim ring --check`: a key is under-replicated
    /// when fewer up natural replicas hold it than its replication factor,
    /// and lost when no ring member's data directory holds it at all.
    pub fn check(&self) -> CheckReport {
        let map = self.natural_map();
        let mut report = CheckReport {
            keyspaces: 0,
            keys: 0,
            under_replicated: Vec::new(),
            lost: Vec::new(),
        };
        for ks in self.keyspaces.values() {
            if ks.keys.is_empty() {
                continue;
            }
            report.keyspaces += 1;
            let rf = ks.replication.total_rf();
            for (key, token) in &ks.keys {
                report.keys += 1;
                let replicas: Vec<ReplicaCopy> = map
                    .replicas(&ks.replication, *token)
                    .into_iter()
                    .map(|h| {
                        let node = &self.nodes[&h];
                        ReplicaCopy {
                            address: node.address.clone(),
                            status: node_status(node),
                            has_copy: self.holds(&h, &ks.name, key),
                            host_id: h,
                        }
                    })
                    .collect();
                let live_copies = replicas
                    .iter()
                    .filter(|r| r.has_copy && self.is_up(&r.host_id))
                    .count();
                if live_copies >= rf {
                    continue;
                }
                let copies_in_ring = self
                    .nodes
                    .values()
                    .filter(|n| self.member_holds(n, &ks.name, key))
                    .count();
                let entry = KeyReport {
                    keyspace: ks.name.clone(),
                    key: key.clone(),
                    token: *token,
                    replication_factor: rf,
                    live_copies,
                    copies_in_ring,
                    replicas,
                };
                if copies_in_ring == 0 {
                    report.lost.push(entry);
                } else {
                    report.under_replicated.push(entry);
                }
            }
        }
        report
    }
}

#[derive(Serialize)]
struct NodeView<'a> {
    #[serde(flatten)]
    node: &'a Node,
    status: NodeStatus,
    up: bool,
    operation_mode: Option<OperationMode>,
}

#[derive(Serialize)]
struct DataDirView<'a> {
    id: &'a str,
    cluster_name: Option<&'a str>,
    host_id: Option<&'a str>,
    bootstrap: BootstrapState,
    tokens: usize,
    copies: BTreeMap<&'a str, usize>,
}

#[derive(Serialize)]
struct KeyspaceView<'a> {
    name: &'a str,
    replication: &'a Replication,
    system: bool,
    keys: usize,
}

#[derive(Serialize)]
pub(super) struct Snapshot<'a> {
    cluster_name: Option<&'a str>,
    now_ms: u64,
    timing: Timing,
    nodes: Vec<NodeView<'a>>,
    data_dirs: Vec<DataDirView<'a>>,
    keyspaces: Vec<KeyspaceView<'a>>,
    status: StatusTable,
    check: CheckReport,
}

pub(super) fn snapshot(ring: &Ring) -> Snapshot<'_> {
    Snapshot {
        cluster_name: ring.cluster_name(),
        now_ms: ring.now_ms,
        timing: ring.options.timing,
        nodes: ring
            .nodes
            .values()
            .map(|n| NodeView {
                node: n,
                status: node_status(n),
                up: n.is_up(),
                operation_mode: n.mode(),
            })
            .collect(),
        data_dirs: ring
            .data_dirs
            .values()
            .map(|d| DataDirView {
                id: &d.id,
                cluster_name: d.cluster_name.as_deref(),
                host_id: d.host_id.as_deref(),
                bootstrap: d.bootstrap,
                tokens: d.tokens.len(),
                copies: d
                    .copies
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.len()))
                    .collect(),
            })
            .collect(),
        keyspaces: ring
            .keyspaces
            .values()
            .map(|k| KeyspaceView {
                name: &k.name,
                replication: &k.replication,
                system: k.system,
                keys: k.keys.len(),
            })
            .collect(),
        status: ring.status(None).expect("no keyspace named"),
        check: ring.check(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_like_nodetool() {
        assert_eq!(stringify_size(0), "0 bytes");
        assert_eq!(stringify_size(1023), "1023 bytes");
        assert_eq!(stringify_size(1024), "1 KiB");
        assert_eq!(stringify_size(1536), "1.5 KiB");
        assert_eq!(stringify_size(100_000), "97.66 KiB");
        assert_eq!(stringify_size(3 * 1024 * 1024), "3 MiB");
    }
}
