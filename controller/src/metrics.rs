//! The operator's Prometheus metrics and its HTTP endpoints (`/healthz`,
//! `/readyz`, `/metrics`). The registry is plain data; the server does I/O.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
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
        Metrics {
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
