//! The sidecar's HTTP probes on :8080 (DESIGN.md section 6): `/healthz`
//! (liveness: the sidecar runs) and `/readyz` (readiness: operation mode
//! NORMAL, read through Jolokia); and `/metrics` (Prometheus text: the
//! old-format sstables gauge of [`crate::sstables`], as last refreshed).
//! I/O.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::jolokia::{Jolokia, OperationMode, StorageService};

/// Serves the probes on `addr` until the task is dropped; `child_alive`
/// says whether the database process runs; `metrics` is what `/metrics`
/// serves.
pub async fn serve_probes(
    addr: SocketAddr,
    jolokia: Jolokia,
    child_alive: Arc<AtomicBool>,
    metrics: crate::sstables::Gauge,
) {
    use warp::Filter;
    let routes = warp::get()
        .and(warp::path::full())
        .then(move |path: warp::path::FullPath| {
            let jolokia = jolokia.clone();
            let alive = child_alive.load(Ordering::Relaxed);
            let metrics = metrics.clone();
            async move {
                let (status, body) = match path.as_str() {
                    // Alive while the sidecar runs: it exits when the database
                    // does, and a long start-up or bootstrap must not be killed.
                    "/healthz" => (200, if alive { "ok" } else { "starting" }.to_string()),
                    "/readyz" => {
                        match StorageService::new(jolokia.with_timeout(Duration::from_secs(3)))
                            .operation_mode()
                            .await
                        {
                            Ok(OperationMode::Normal) => (200, "NORMAL".to_string()),
                            Ok(mode) => (503, mode.to_string()),
                            Err(e) => (503, format!("database not reachable: {e}")),
                        }
                    }
                    "/metrics" => {
                        let mut response = warp::reply::Response::new(metrics.render().into());
                        response.headers_mut().insert(
                            "content-type",
                            warp::http::HeaderValue::from_static(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            ),
                        );
                        return response;
                    }
                    _ => (404, "not found".to_string()),
                };
                let mut response = warp::reply::Response::new(body.into());
                *response.status_mut() =
                    warp::http::StatusCode::from_u16(status).unwrap_or_default();
                response
            }
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
