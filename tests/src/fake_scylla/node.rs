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
use serde_json::Value;
use tokio::net::TcpListener;

use super::rest::{self, Identity, NodeState, Reply, Step};
use crate::fake_cassandra::jolokia::RingCall;
use crate::fake_cassandra::node::{NodeError, RingClient, percent_decode, query_escape};

/// A running fake ScyllaDB node.
#[derive(Debug)]
pub struct ScyllaNode {
    pub ring: RingClient,
    /// kubesim's base URL and the node's cluster: where the schema is read.
    pub kubesim: String,
    pub cluster: String,
    pub identity: Identity,
    /// Set once the node started in the ring; until then the API answers
    /// as a starting node does.
    pub host_id: OnceLock<String>,
    /// Between STARTING and the ring: waiting for ring information.
    pub joining: std::sync::atomic::AtomicBool,
}

fn message_of(e: NodeError) -> String {
    match e {
        NodeError::Refused(r) => r.message,
        other => other.to_string(),
    }
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let state = match &view {
            Some(v) => NodeState::Running(v),
            None if self.joining.load(std::sync::atomic::Ordering::SeqCst) => NodeState::Joining,
            None => NodeState::Starting,
        };
        match rest::step(&self.identity, now, state, method, &path, &query) {
            Step::Answer(r) => r,
            Step::Schema(q) => match ring_snapshot(&self.kubesim, &self.cluster).await {
                Ok(Some(snapshot)) => rest::answer_schema(&q, &snapshot),
                Ok(None) => rest::answer_schema(&q, &serde_json::Value::Null),
                Err(e) => Reply::runtime_error(&e),
            },
            Step::Call(call) => {
                let Some(host_id) = self.host_id.get().cloned() else {
                    return Reply::runtime_error(
                        "local node is not a member of the token ring yet",
                    );
                };
                // Scylla's own checks come first: a decommission that gets
                // past them may still find a range with no replica left.
                let others = view.as_ref().is_some_and(|v| {
                    v.endpoints
                        .iter()
                        .any(|e| e.host_id != host_id && e.state == 'N')
                });
                if matches!(call, RingCall::Decommission { .. })
                    && view.as_ref().is_some_and(|v| v.mode == "NORMAL")
                    && others
                {
                    match ring_snapshot(&self.kubesim, &self.cluster).await {
                        Ok(Some(snapshot)) => {
                            if let Some(refusal) = rest::zero_replica_refusal(&snapshot, &host_id) {
                                return Reply::runtime_error(&refusal);
                            }
                        }
                        Ok(None) => {}
                        Err(e) => return Reply::runtime_error(&e),
                    }
                }
                let node = self.clone();
                let task = tokio::spawn(async move {
                    node.ring
                        .call(&host_id, &call)
                        .await
                        .map(drop)
                        .map_err(message_of)
                });
                match task.await {
                    Ok(outcome) => rest::reply_of_call(
                        outcome,
                        rest::Topology::of_release(&self.identity.release),
                    ),
                    Err(e) => Reply::runtime_error(&e.to_string()),
                }
            }
        }
    }
}

/// The ring of `cluster` as kubesim serves it (`GET /sim/ring?cluster=`):
/// members, data directories, keyspaces. `None` when no node of that
/// cluster ever started.
pub async fn ring_snapshot(kubesim: &str, cluster: &str) -> Result<Option<Value>, String> {
    let url = format!("{}/sim/ring", kubesim.trim_end_matches('/'));
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let resp = http
        .get(format!("{url}?cluster={}", query_escape(cluster)))
        .send()
        .await
        .map_err(|e| format!("ring service at {url} unreachable: {e}"))?;
    if resp.status().as_u16() == 404 {
        return Ok(None);
    }
    resp.json().await.map(Some).map_err(|e| e.to_string())
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
