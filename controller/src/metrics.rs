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
use warp::Filter;

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
    /// 1 for the operation a cluster is in.
    pub operation: Family<OperationLabels, Gauge>,
    current: Mutex<HashMap<ClusterLabels, String>>,
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
        let operation = Family::<OperationLabels, Gauge>::default();
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
            operation,
            current: Mutex::default(),
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
    let routes = warp::get()
        .and(warp::path::full())
        .map(move |path: warp::path::FullPath| {
            let (status, content_type, body) = match path.as_str() {
                "/healthz" => (200, "text/plain", "ok".to_string()),
                "/readyz" if ready.load(Ordering::Relaxed) => (200, "text/plain", "ok".to_string()),
                "/readyz" => (503, "text/plain", "caches not synced".to_string()),
                "/metrics" => (
                    200,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics.encode(),
                ),
                _ => (404, "text/plain", "not found".to_string()),
            };
            let mut response = warp::reply::Response::new(body.into());
            *response.status_mut() = warp::http::StatusCode::from_u16(status).unwrap_or_default();
            if let Ok(value) = warp::http::HeaderValue::from_str(content_type) {
                response.headers_mut().insert("content-type", value);
            }
            response
        });
    // Bind ourselves: warp's own bind panics when the port is taken (a
    // previous process still closing it); retry instead.
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot listen yet; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    };
    warp::serve(routes).incoming(listener).run().await;
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
}
