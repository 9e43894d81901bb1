//! The operator's Prometheus metrics and its HTTP endpoints (`/healthz`,
//! `/readyz`, `/metrics`). The registry is plain data; the server does I/O.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-cluster series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
}

/// Labels of the operation gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// The operation (`ScaleUp`, `MemberNotReady`, `MemberLeaving`...).
    pub operation: String,
}

/// Labels of the gauge of member operations in progress.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct MemberOperationLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// `decommission` or `replace`.
    pub kind: String,
    /// The member's rack.
    pub rack: String,
    /// The member's ordinal.
    pub member: String,
}

/// Labels of the counters of finished member operations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationKindLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// `decommission` or `replace`.
    pub kind: String,
}

/// Labels of the per-keyspace repair series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyspaceLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// The keyspace.
    pub keyspace: String,
}

/// Labels of the maintenance gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MaintenanceLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// `cleanup`, `upgradesstables` or `repair`.
    pub operation: String,
}

/// The maintenance figures of one cluster, as the gauges show them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaintenanceGauges {
    /// Each operation and whether it runs (1) or not (0); empty in scylla
    /// mode.
    pub running: Vec<(String, bool)>,
    /// When repairs are set.
    pub repair: Option<RepairGauges>,
}

/// The repair figures of one cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepairGauges {
    /// The share of the current cycle repaired, 0 to 1.
    pub repaired: f64,
    /// `gcGraceSeconds`.
    pub gc_grace_seconds: i64,
    /// Each keyspace's last full repair (Unix time; the Cluster's
    /// creation when never).
    pub last_full_repair: Vec<(String, i64)>,
}

/// Labels of the counter of refused member certificate requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// Namespace of the Cluster.
    pub namespace: String,
    /// Name of the Cluster.
    pub cluster: String,
    /// The refusal's reason (`NotAMemberPod`, `UnexpectedUsages`, ...).
    pub reason: String,
}

/// Labels of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// What failed (`ApplyStatefulSet`, `PatchStatus`, ...).
    pub kind: String,
}

/// Every metric of the operator.
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconcile errors by kind.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// Members per cluster.
    pub members: Family<ClusterLabels, Gauge>,
    /// Ready members per cluster.
    pub ready_members: Family<ClusterLabels, Gauge>,
    /// Members per cluster whose Pod runs a template other than their
    /// rack's: what a roll still has to restart.
    pub members_on_old_template: Family<ClusterLabels, Gauge>,
    /// 1 for the operation a cluster is in.
    pub operation: Family<OperationLabels, Gauge>,
    /// Member operations in progress: the Unix time each started at.
    pub member_operations: Family<MemberOperationLabels, Gauge>,
    /// Member operations completed (decommission confirmed and removed,
    /// replaced member ready).
    pub operations_completed: Family<OperationKindLabels, Counter>,
    /// Member operations that failed (a decommission Cassandra refused).
    pub operations_failed: Family<OperationKindLabels, Counter>,
    /// Per cluster and maintenance operation: 1 while it runs on a member.
    pub maintenance_running: Family<MaintenanceLabels, Gauge>,
    /// Per cluster with repairs set: the share of the token ranges
    /// repaired in the current cycle, 0 to 1.
    pub repair_cycle_repaired_ratio: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    /// Per cluster with repairs set: its `gcGraceSeconds`.
    pub repair_gc_grace_seconds: Family<ClusterLabels, Gauge>,
    /// Per keyspace: when it was last fully repaired (Unix time; the
    /// Cluster's creation when never).
    pub keyspace_last_full_repair: Family<KeyspaceLabels, Gauge>,
    /// Member certificates signed, per cluster (a debug log names each:
    /// an Event per renewal would be noise).
    pub member_certificates_signed: Family<ClusterLabels, Counter>,
    /// Certificate requests of a cluster's members denied (or failed), by
    /// reason.
    pub member_certificate_requests_refused: Family<RefusalLabels, Counter>,
    keyspaces: Mutex<HashMap<ClusterLabels, Vec<KeyspaceLabels>>>,
    current: Mutex<HashMap<ClusterLabels, String>>,
    in_progress: Mutex<HashMap<ClusterLabels, Vec<MemberOperationLabels>>>,
    registry: Registry,
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cassandra_operator");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let members = Family::<ClusterLabels, Gauge>::default();
        let ready_members = Family::<ClusterLabels, Gauge>::default();
        let members_on_old_template = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_members_on_old_template",
            "Members of a cluster whose Pod runs an older template than their rack's StatefulSet (a roll is due or under way)",
            members_on_old_template.clone(),
        );
        let operation = Family::<OperationLabels, Gauge>::default();
        let member_operations = Family::<MemberOperationLabels, Gauge>::default();
        let operations_completed = Family::<OperationKindLabels, Counter>::default();
        let operations_failed = Family::<OperationKindLabels, Counter>::default();
        registry.register(
            "member_operation_started_seconds",
            "Member operations in progress (decommission, replace), by member: the Unix time each started",
            member_operations.clone(),
        );
        registry.register(
            "member_operations_completed",
            "Member operations completed",
            operations_completed.clone(),
        );
        registry.register(
            "member_operations_failed",
            "Member operations that failed (a decommission Cassandra refused)",
            operations_failed.clone(),
        );
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconcile errors by kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            duration.clone(),
        );
        registry.register("cluster_members", "Members of a cluster", members.clone());
        registry.register(
            "cluster_ready_members",
            "Ready members of a cluster",
            ready_members.clone(),
        );
        registry.register(
            "cluster_operation",
            "The operation a cluster is in (1) or was in (0)",
            operation.clone(),
        );
        let maintenance_running = Family::<MaintenanceLabels, Gauge>::default();
        registry.register(
            "maintenance_running",
            "Maintenance operations (cleanup, upgradesstables, repair) running on a member of a cluster (1) or not (0)",
            maintenance_running.clone(),
        );
        let repair_cycle_repaired_ratio = Family::<ClusterLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "repair_cycle_repaired_ratio",
            "The share of a cluster's token ranges repaired in the current repair cycle (0 to 1)",
            repair_cycle_repaired_ratio.clone(),
        );
        let repair_gc_grace_seconds = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "repair_gc_grace_seconds",
            "spec.maintenance.repair.gcGraceSeconds: a keyspace not fully repaired for longer may see deleted data come back",
            repair_gc_grace_seconds.clone(),
        );
        let keyspace_last_full_repair = Family::<KeyspaceLabels, Gauge>::default();
        registry.register(
            "keyspace_last_full_repair_timestamp_seconds",
            "When every member last completed the repair of its primary ranges of a keyspace (Unix time; the Cluster's creation when never)",
            keyspace_last_full_repair.clone(),
        );
        let member_certificates_signed = Family::<ClusterLabels, Counter>::default();
        registry.register(
            "member_certificates_signed",
            "Member certificates signed by a cluster's certificate authority",
            member_certificates_signed.clone(),
        );
        let member_certificate_requests_refused = Family::<RefusalLabels, Counter>::default();
        registry.register(
            "member_certificate_requests_refused",
            "Certificate requests made by a cluster's members and denied (or failed after approval), by reason",
            member_certificate_requests_refused.clone(),
        );
        Metrics {
            member_certificates_signed,
            member_certificate_requests_refused,
            maintenance_running,
            repair_cycle_repaired_ratio,
            repair_gc_grace_seconds,
            keyspace_last_full_repair,
            keyspaces: Mutex::default(),
            reconciles,
            errors,
            duration,
            members,
            ready_members,
            members_on_old_template,
            operation,
            member_operations,
            operations_completed,
            operations_failed,
            current: Mutex::default(),
            in_progress: Mutex::default(),
            registry,
        }
    }

    /// Marks the operation a cluster is in, removing the series of the one
    /// it was in before.
    pub fn set_operation(&self, cluster: &ClusterLabels, operation: &str) {
        let series = |op: &str| OperationLabels {
            namespace: cluster.namespace.clone(),
            cluster: cluster.cluster.clone(),
            operation: op.to_string(),
        };
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let old = current.insert(cluster.clone(), operation.to_string());
        if let Some(old) = old.filter(|old| old != operation) {
            self.operation.remove(&series(&old));
        }
        self.operation.get_or_create(&series(operation)).set(1);
    }

    /// Sets the member operations a cluster has in progress, with the Unix
    /// time each started, removing the series of those that ended.
    pub fn set_member_operations(
        &self,
        cluster: &ClusterLabels,
        operations: Vec<(MemberOperationLabels, i64)>,
    ) {
        let mut in_progress = self.in_progress.lock().unwrap_or_else(|e| e.into_inner());
        let now: Vec<MemberOperationLabels> = operations.iter().map(|(l, _)| l.clone()).collect();
        for old in in_progress.get(cluster).into_iter().flatten() {
            if !now.contains(old) {
                self.member_operations.remove(old);
            }
        }
        for (labels, started) in operations {
            self.member_operations.get_or_create(&labels).set(started);
        }
        in_progress.insert(cluster.clone(), now);
    }

    /// Sets a cluster's maintenance gauges, removing the series of
    /// keyspaces no longer recorded (and the repair series once repairs
    /// are no longer set).
    pub fn set_maintenance(&self, cluster: &ClusterLabels, gauges: MaintenanceGauges) {
        for (operation, running) in gauges.running {
            self.maintenance_running
                .get_or_create(&MaintenanceLabels {
                    namespace: cluster.namespace.clone(),
                    cluster: cluster.cluster.clone(),
                    operation,
                })
                .set(i64::from(running));
        }
        let mut keyspaces = self.keyspaces.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = Vec::new();
        match gauges.repair {
            Some(repair) => {
                self.repair_cycle_repaired_ratio
                    .get_or_create(cluster)
                    .set(repair.repaired);
                self.repair_gc_grace_seconds
                    .get_or_create(cluster)
                    .set(repair.gc_grace_seconds);
                for (keyspace, at) in repair.last_full_repair {
                    let labels = KeyspaceLabels {
                        namespace: cluster.namespace.clone(),
                        cluster: cluster.cluster.clone(),
                        keyspace,
                    };
                    self.keyspace_last_full_repair
                        .get_or_create(&labels)
                        .set(at);
                    now.push(labels);
                }
            }
            None => {
                self.repair_cycle_repaired_ratio.remove(cluster);
                self.repair_gc_grace_seconds.remove(cluster);
            }
        }
        for old in keyspaces.get(cluster).into_iter().flatten() {
            if !now.contains(old) {
                self.keyspace_last_full_repair.remove(old);
            }
        }
        keyspaces.insert(cluster.clone(), now);
    }

    /// Counts a finished member operation.
    pub fn count_operation(&self, cluster: &ClusterLabels, kind: &str, succeeded: bool) {
        let labels = OperationKindLabels {
            namespace: cluster.namespace.clone(),
            cluster: cluster.cluster.clone(),
            kind: kind.to_string(),
        };
        let family = if succeeded {
            &self.operations_completed
        } else {
            &self.operations_failed
        };
        family.get_or_create(&labels).inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Serves `/healthz` (the process runs), `/readyz` (the caches are synced)
/// and `/metrics` until the process ends.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, ready: Arc<AtomicBool>) {
    use crds::http::Reply;
    let listener = crds::http::bind_retrying(addr).await;
    crds::http::serve(listener, move |path: String| {
        let text = |status, body: &str| Reply {
            status,
            content_type: Some("text/plain"),
            body: body.to_string(),
        };
        let reply = match path.as_str() {
            "/healthz" => text(200, "ok"),
            "/readyz" if ready.load(Ordering::Relaxed) => text(200, "ok"),
            "/readyz" => text(503, "caches not synced"),
            "/metrics" => Reply {
                status: 200,
                content_type: Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                body: metrics.encode(),
            },
            _ => text(404, "not found"),
        };
        async move { reply }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exposed_with_their_labels() {
        let m = Metrics::new();
        m.reconciles.inc();
        m.errors
            .get_or_create(&ErrorLabels {
                kind: "PatchStatus".into(),
            })
            .inc();
        m.members
            .get_or_create(&ClusterLabels {
                namespace: "db".into(),
                cluster: "c".into(),
            })
            .set(3);
        let labels = ClusterLabels {
            namespace: "db".into(),
            cluster: "c".into(),
        };
        m.set_operation(&labels, "ScaleUp");
        m.set_operation(&labels, "Converged");
        let text = m.encode();
        assert!(text.contains("cassandra_operator_cluster_operation{namespace=\"db\",cluster=\"c\",operation=\"Converged\"} 1"), "{text}");
        assert!(!text.contains("operation=\"ScaleUp\""), "{text}");
        assert!(
            text.contains("cassandra_operator_reconciles_total 1"),
            "{text}"
        );
        assert!(
            text.contains("cassandra_operator_reconcile_errors_total{kind=\"PatchStatus\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cassandra_operator_cluster_members{namespace=\"db\",cluster=\"c\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("cassandra_operator_reconcile_duration_seconds_bucket"),
            "{text}"
        );
    }

    /// The maintenance gauges carry the names the alert and the README
    /// use, and a keyspace no longer recorded (or repairs turned off)
    /// loses its series.
    #[test]
    fn maintenance_gauges_are_exposed_and_removed() {
        let m = Metrics::new();
        let cluster = ClusterLabels {
            namespace: "db".into(),
            cluster: "c".into(),
        };
        m.set_maintenance(
            &cluster,
            MaintenanceGauges {
                running: vec![("cleanup".into(), false), ("repair".into(), true)],
                repair: Some(RepairGauges {
                    repaired: 0.5,
                    gc_grace_seconds: 864_000,
                    last_full_repair: vec![
                        ("ks".into(), 1_700_000_000),
                        ("other".into(), 1_600_000_000),
                    ],
                }),
            },
        );
        let text = m.encode();
        for line in [
            "cassandra_operator_maintenance_running{namespace=\"db\",cluster=\"c\",operation=\"repair\"} 1",
            "cassandra_operator_maintenance_running{namespace=\"db\",cluster=\"c\",operation=\"cleanup\"} 0",
            "cassandra_operator_repair_cycle_repaired_ratio{namespace=\"db\",cluster=\"c\"} 0.5",
            "cassandra_operator_repair_gc_grace_seconds{namespace=\"db\",cluster=\"c\"} 864000",
            "cassandra_operator_keyspace_last_full_repair_timestamp_seconds{namespace=\"db\",cluster=\"c\",keyspace=\"ks\"} 1700000000",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        m.set_maintenance(
            &cluster,
            MaintenanceGauges {
                running: vec![("repair".into(), false)],
                repair: Some(RepairGauges {
                    repaired: 1.0,
                    gc_grace_seconds: 864_000,
                    last_full_repair: vec![("ks".into(), 1_700_000_100)],
                }),
            },
        );
        let text = m.encode();
        assert!(!text.contains("keyspace=\"other\""), "{text}");
        assert!(text.contains("keyspace=\"ks\"} 1700000100"), "{text}");
        m.set_maintenance(&cluster, MaintenanceGauges::default());
        let text = m.encode();
        assert!(!text.contains("repair_cycle_repaired_ratio{"), "{text}");
        assert!(!text.contains("keyspace=\"ks\""), "{text}");
    }

    #[test]
    fn member_operations_are_gauged_while_in_progress_and_counted_when_done() {
        let m = Metrics::new();
        let cluster = ClusterLabels {
            namespace: "db".into(),
            cluster: "c".into(),
        };
        let op = MemberOperationLabels {
            namespace: "db".into(),
            cluster: "c".into(),
            kind: "decommission".into(),
            rack: "b".into(),
            member: "2".into(),
        };
        m.set_member_operations(&cluster, vec![(op.clone(), 1_700_000_000)]);
        let text = m.encode();
        assert!(text.contains("cassandra_operator_member_operation_started_seconds{namespace=\"db\",cluster=\"c\",kind=\"decommission\",rack=\"b\",member=\"2\"} 1700000000"), "{text}");
        m.set_member_operations(&cluster, vec![]);
        m.count_operation(&cluster, "decommission", true);
        m.count_operation(&cluster, "decommission", false);
        let text = m.encode();
        assert!(!text.contains("member=\"2\""), "{text}");
        assert!(text.contains("cassandra_operator_member_operations_completed_total{namespace=\"db\",cluster=\"c\",kind=\"decommission\"} 1"), "{text}");
        assert!(text.contains("cassandra_operator_member_operations_failed_total{namespace=\"db\",cluster=\"c\",kind=\"decommission\"} 1"), "{text}");
    }
}
