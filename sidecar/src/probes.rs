//! The sidecar's HTTP probes on :8080 (DESIGN.md section 6): `/healthz`
//! (liveness: the sidecar runs) and `/readyz` (readiness: operation mode
//! NORMAL, read through Jolokia or ScyllaDB's REST API); and `/metrics`
//! (Prometheus text: the old-format sstables gauge of [`crate::sstables`],
//! as last refreshed). I/O.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crds::http::Reply;

use crate::jolokia::OperationMode;
use crate::node::Node;

/// Serves the probes on `addr` until the task is dropped; `child_alive`
/// says whether the database process runs; `metrics` is what `/metrics`
/// serves.
pub async fn serve_probes(
    addr: SocketAddr,
    node: Node,
    child_alive: Arc<AtomicBool>,
    metrics: crate::sstables::Gauge,
) {
    let listener = crds::http::bind_retrying(addr).await;
    crds::http::serve(listener, move |path: String| {
        let node = node.with_timeout(Duration::from_secs(3));
        let alive = child_alive.load(Ordering::Relaxed);
        let metrics = metrics.clone();
        async move {
            let (status, body) = match path.as_str() {
                // Alive while the sidecar runs: it exits when the database
                // does, and a long start-up or bootstrap must not be killed.
                "/healthz" => (200, if alive { "ok" } else { "starting" }.to_string()),
                "/readyz" => match node.operation_mode().await {
                    Ok(OperationMode::Normal) => (200, "NORMAL".to_string()),
                    Ok(mode) => (503, mode.to_string()),
                    Err(e) => (503, format!("database not reachable: {e}")),
                },
                "/metrics" => {
                    return Reply {
                        status: 200,
                        content_type: Some(
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        ),
                        body: metrics.render(),
                    };
                }
                _ => (404, "not found".to_string()),
            };
            Reply {
                status,
                content_type: None,
                body,
            }
        }
    })
    .await;
}
