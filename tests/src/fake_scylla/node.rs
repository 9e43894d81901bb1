//! The fake ScyllaDB node's REST API server (hyper) over the pure answers
//! of [`super::rest`]: each request reads the node's view from the ring
//! service, a drain or a decommission is carried out by the ring and the
//! POST answers when it is done. A client that disconnects does not cancel
//! it (Seastar's httpd does not either): the operation runs in a task of
//! its own. I/O.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::rest::{self, Identity, Reply, Step};
use crate::fake_cassandra::node::{NodeError, RingClient};

/// A running fake ScyllaDB node.
#[derive(Debug)]
pub struct ScyllaNode {
    pub ring: RingClient,
    pub identity: Identity,
    /// Set once the node started in the ring; until then the API answers
    /// as a starting node does.
    pub host_id: OnceLock<String>,
}

fn message_of(e: NodeError) -> String {
    match e {
        NodeError::Refused(r) => r.message,
        other => other.to_string(),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_of(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

impl ScyllaNode {
    /// The reply to one request.
    pub async fn reply(self: &Arc<Self>, method: &str, path: &str, query: &str) -> Reply {
        let query = query_of(query);
        let path = percent_decode(path);
        let view = match self.host_id.get() {
            None => None,
            Some(h) => match self.ring.view(h).await {
                Ok(v) => Some(v),
                Err(e) => return Reply::runtime_error(&message_of(e)),
            },
        };
        match rest::step(&self.identity, view.as_ref(), method, &path, &query) {
            Step::Answer(r) => r,
            Step::Call(call) => {
                let Some(host_id) = self.host_id.get().cloned() else {
                    return Reply::runtime_error(
                        "local node is not a member of the token ring yet",
                    );
                };
                let node = self.clone();
                let task = tokio::spawn(async move {
                    node.ring
                        .call(&host_id, &call)
                        .await
                        .map(drop)
                        .map_err(message_of)
                });
                match task.await {
                    Ok(outcome) => rest::reply_of_call(outcome),
                    Err(e) => Reply::runtime_error(&e.to_string()),
                }
            }
        }
    }
}

fn response(reply: Reply) -> Response<Full<Bytes>> {
    let body = reply.body.map(|b| b.to_string()).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(node: Arc<ScyllaNode>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    response(node.reply(&method, &path, &query).await)
}

/// Serves the REST API on `listener` until the task is dropped.
pub async fn serve_rest(listener: TcpListener, node: Arc<ScyllaNode>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let node = node.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let node = node.clone();
                async move { Ok::<_, Infallible>(handle(node, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
