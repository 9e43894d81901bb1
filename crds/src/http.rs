//! The operator's few HTTP endpoints (the controller's `/healthz`,
//! `/readyz` and `/metrics`, the sidecar's probes, the reloader's
//! `/metrics`): GET only, HTTP/1.1, on hyper directly. A web framework
//! (warp) cost the binary its HTTP/2 server and header machinery for three
//! paths. Shared by the controller and the sidecar, so it lives here. I/O.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One answer: status, content type (none: no header) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<&'static str>,
    pub body: String,
}

impl Reply {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: Some("text/plain; charset=utf-8"),
            body: body.into(),
        }
    }

    /// 404 for a path that is not served.
    pub fn not_found() -> Reply {
        Reply::text(404, "not found")
    }
}

/// Binds `addr`, retrying every second while the port is taken (a
/// previous process still closing it).
pub async fn bind_retrying(addr: SocketAddr) -> TcpListener {
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot listen yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Serves GET requests on `listener` with `handle` (given the path,
/// without the query) until the task is dropped; any other method is
/// answered 405.
pub async fn serve<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause, go on.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let handle = handle.clone();
                async move {
                    let reply = if request.method() == Method::GET {
                        handle(request.uri().path().to_string()).await
                    } else {
                        Reply::text(405, "method not allowed")
                    };
                    Ok::<_, Infallible>(response(reply))
                }
            });
            // A client that goes away mid-request is no error of ours.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(content_type) = reply.content_type {
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(content_type),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn request(addr: SocketAddr, text: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_get_by_path_and_refuses_other_methods() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, |path: String| async move {
            match path.as_str() {
                "/metrics" => Reply {
                    status: 200,
                    content_type: Some(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                    body: "# EOF\n".into(),
                },
                "/readyz" => Reply {
                    status: 503,
                    content_type: None,
                    body: "JOINING".into(),
                },
                _ => Reply::not_found(),
            }
        }));
        let close = "Host: x\r\nConnection: close\r\n\r\n";
        let metrics = request(addr, &format!("GET /metrics?x=1 HTTP/1.1\r\n{close}")).await;
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(
            metrics.contains(
                "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
            ),
            "{metrics}"
        );
        assert!(metrics.ends_with("\r\n\r\n# EOF\n"), "{metrics}");
        let ready = request(addr, &format!("GET /readyz HTTP/1.1\r\n{close}")).await;
        assert!(
            ready.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{ready}"
        );
        assert!(!ready.contains("content-type"), "{ready}");
        assert!(ready.ends_with("JOINING"), "{ready}");
        let missing = request(addr, &format!("GET /nothing HTTP/1.1\r\n{close}")).await;
        assert!(
            missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{missing}"
        );
        let post = request(
            addr,
            &format!("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n{close}"),
        )
        .await;
        assert!(
            post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{post}"
        );
        server.abort();
    }
}
