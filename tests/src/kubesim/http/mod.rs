//! The HTTP face of kubesim: the API server's URL layout, verbs, query
//! parameters, content types, streaming watches, Table output for kubectl,
//! and the admin endpoints (`/sim/faults`, `/sim/requests`). I/O: serves
//! hyper 1 HTTP/1.1 connections on tokio. Requests are parsed in
//! [`request`] (pure), watches are served by [`watch`].

use super::discovery;
use super::faults::{Fault, FaultConfig, Faults, RequestLog, RequestRecord};
use super::patch::PatchType;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{
    ApiError, DeleteOptions, Event, EventType, ListOptions, Propagation, Store, Subresource,
    Target, WriteOptions,
};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

mod request;
pub mod tokens;
mod watch;
use request::*;
pub use request::{ResourcePath, parse_query, parse_resource_path, percent_decode};
use watch::*;
pub use watch::{Shape, filter_event};

/// A response body: whole, or a stream of chunks (watches).
#[derive(Debug)]
pub enum Body {
    /// The whole body.
    Full(Option<Bytes>),
    /// Chunks as they come; the end of the channel ends the body.
    Stream(mpsc::Receiver<Bytes>),
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Body::Full(Some(b)) => http_body::SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => http_body::SizeHint::with_exact(0),
            Body::Stream(_) => http_body::SizeHint::default(),
        }
    }
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The API server (TLS): every request is authenticated and
    /// authorized.
    Api,
    /// The test world's own endpoints (`/sim/...`, plain HTTP): no
    /// Kubernetes API there.
    Sim,
}

/// What the server shares between connections.
#[derive(Debug)]
pub struct Shared {
    /// The objects.
    pub store: Store,
    /// Faults in force.
    pub faults: Faults,
    /// Requests served.
    pub log: RequestLog,
    /// The requests to the test world's own endpoints (`/sim/...`: the
    /// fake ring's, from the fake Cassandra nodes).
    pub sim_log: RequestLog,
    /// Address the server listens on.
    pub addr: SocketAddr,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// The fake Cassandra nodes' ring (`/sim/ring`).
    pub ring: Arc<crate::fake_cassandra::ring_service::RingService>,
    /// The sim's work directory, where the kubelet writes container logs
    /// (None without the sim).
    pub sim_dir: Option<std::path::PathBuf>,
    /// kubesim's CA, admin token and token signer.
    pub authority: Arc<crate::kubesim::auth::Authority>,
    /// The kubelets' troubles (`/sim/nodes/NAME/unreachable`, ...).
    pub kubelets: Arc<crate::kubesim::sim::nodelifecycle::Kubelets>,
    /// The RBAC policy the authorizer evaluates.
    pub policy: crate::kubesim::auth::rbac::PolicyCache,
}

/// The ring service's answer as an HTTP response.
fn ring_reply(reply: crate::fake_cassandra::ring_service::Reply) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(reply.body))));
    *r.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static(reply.content_type),
    );
    r
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(body.to_string()))));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        "cache-control",
        hyper::header::HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// `/openapi/v2`, which kubectl before 1.28 fetches (protobuf only) before a
/// client-side apply: a minimal valid OpenAPI 2.0 document (swagger, info,
/// empty paths). Without models, kubectl computes strategic merge patches for
/// built-in kinds from its compiled-in types and JSON merge patches for custom
/// resources, as it does for kinds a real server's document lacks.
fn openapi_v2() -> Response<Body> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        // length-delimited field; every length here is below 128
        let mut out = vec![(number << 3) | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let info = [field(1, b"Kubernetes"), field(2, b"v1.33.0")].concat();
    let document = [field(1, b"2.0"), field(2, &info), field(8, &[])].concat();
    let mut r = Response::new(Body::Full(Some(Bytes::from(document))));
    r.headers_mut().insert(
        "content-type",
        // The protobuf media type kubectl asks for has an '@' that Go's
        // mime parser rejects in a response: the real server answers with
        // an octet stream.
        hyper::header::HeaderValue::from_static("application/octet-stream"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut response = json_response(e.code, &e.status());
    // As the API server's ErrorNegotiated: a Status that names a delay
    // says it in `Retry-After` too (clients' retries read the header).
    if let Some(delay) = e
        .details
        .as_ref()
        .and_then(|d| d.get("retryAfterSeconds"))
        .and_then(Value::as_i64)
        .filter(|d| *d > 0)
        && let Ok(value) = hyper::header::HeaderValue::from_str(&delay.to_string())
    {
        response.headers_mut().insert("retry-after", value);
    }
    response
}

/// Serves one request.
pub async fn handle(shared: Arc<Shared>, kind: Listener, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let user_agent = header("user-agent");
    let content_type = header("content-type");
    let accept = header("accept");
    let is_sim = path == "/sim" || path.starts_with("/sim/");
    if is_sim != (kind == Listener::Sim) {
        // The API server has no /sim; the test world's port no API.
        return error_response(&ApiError::no_route());
    }
    let q = parse_query(&query);
    let mut rec = RequestRecord {
        seq: 0,
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        verb: String::new(),
        group: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        user_agent,
        content_type: content_type.clone(),
        code: 0,
        user: String::new(),
        at_us: crate::kubesim::now_us(),
    };
    let user = match kind {
        Listener::Sim => None,
        Listener::Api => match tokens::identify(&shared, req.headers()) {
            Ok(user) => Some(user),
            Err(e) => {
                rec.code = e.code;
                shared.log.push(rec);
                return error_response(&e);
            }
        },
    };
    if let Some(user) = &user {
        rec.user = user.name.clone();
        let a = tokens::attributes(&shared, &method, &path, &q);
        rec.verb = a.verb.clone();
        rec.group = a.api_group.clone();
        rec.resource = a.resource.clone();
        rec.subresource = a.subresource.clone();
        rec.namespace = a.namespace.clone();
        rec.name = a.name.clone();
        if !tokens::authorized(&shared, user, &a) {
            let e = crate::kubesim::auth::rbac::forbidden(user, &a);
            rec.code = e.code;
            shared.log.push(rec);
            return error_response(&e);
        }
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response(&ApiError::bad_request(format!("reading the body: {e}"))),
    };
    if let Some(user) = &user {
        let a = tokens::attributes(&shared, &method, &path, &q);
        if a.api_group == "rbac.authorization.k8s.io"
            && let Ok(obj) = parse_body(&body, &content_type)
            && let Err(e) = tokens::check_escalation(&shared, user, &a, &obj)
        {
            rec.code = e.code;
            shared.log.push(rec);
            return error_response(&e);
        }
    }
    let resp = match (method.as_str(), user.as_ref()) {
        ("POST", Some(user)) => {
            match tokens::auth_api(&shared, user, &path, &body, &content_type) {
                Some(r) => r,
                None => {
                    route(
                        &shared,
                        &method,
                        &path,
                        &q,
                        &body,
                        &content_type,
                        &accept,
                        &mut rec,
                        Some(user),
                    )
                    .await
                }
            }
        }
        _ => {
            route(
                &shared,
                &method,
                &path,
                &q,
                &body,
                &content_type,
                &accept,
                &mut rec,
                user.as_ref(),
            )
            .await
        }
    };
    let mut resp = resp;
    if user.is_some() && rec.is_write() && resp.status().is_success() {
        let body = match resp.body() {
            Body::Full(Some(b)) => std::str::from_utf8(b).unwrap_or_default(),
            _ => "",
        };
        // A create names its object in the body, not the URL.
        let name = if rec.name.is_empty() {
            serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v["metadata"]["name"].as_str().map(str::to_string))
                .unwrap_or_default()
        } else {
            rec.name.clone()
        };
        let write = super::faults::CommittedWrite {
            user: &rec.user,
            verb: &rec.verb,
            resource: &rec.resource,
            subresource: &rec.subresource,
            name: &name,
            body,
        };
        for hook in shared.faults.fire_hooks(&write) {
            let signal = match hook.action {
                super::faults::ProcessAction::Kill => nix::sys::signal::Signal::SIGKILL,
                super::faults::ProcessAction::Freeze => nix::sys::signal::Signal::SIGSTOP,
            };
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(hook.pid as i32), signal);
        }
        if shared.faults.lose_response(&rec.verb, &rec.resource) {
            // Committed, but the client hears of a timeout.
            resp = error_response(&ApiError {
                code: 504,
                reason: "Timeout",
                message: "Timeout: request did not complete within requested timeout - context deadline exceeded".into(),
                details: Some(json!({})),
            });
        }
    }
    rec.code = resp.status().as_u16();
    if is_sim {
        shared.sim_log.push(rec);
    } else {
        shared.log.push(rec);
    }
    resp
}

#[allow(clippy::too_many_arguments)]
async fn route(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    q: &HashMap<String, String>,
    body: &[u8],
    content_type: &str,
    accept: &str,
    rec: &mut RequestRecord,
    user: Option<&crate::kubesim::auth::authn::UserInfo>,
) -> Response<Body> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let store = &shared.store;
    match (method, segs.as_slice()) {
        ("GET", ["version"]) => json_response(200, &discovery::version_info()),
        ("GET", ["healthz" | "readyz" | "livez", ..]) => {
            let mut r = Response::new(Body::Full(Some(Bytes::from_static(b"ok"))));
            r.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        ("GET", ["api"]) => json_response(200, &discovery::core_versions(&shared.addr.to_string())),
        ("GET", ["apis"]) => {
            let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut order: Vec<String> = Vec::new();
            for t in store.types().iter().filter(|t| !t.group.is_empty()) {
                if !groups.contains_key(&t.group) {
                    order.push(t.group.clone());
                }
                let vs = groups.entry(t.group.clone()).or_default();
                for v in &t.versions {
                    if !vs.contains(v) {
                        vs.push(v.clone());
                    }
                }
            }
            let list: Vec<(String, Vec<String>)> = order
                .into_iter()
                .map(|g| {
                    let vs = groups.remove(&g).unwrap_or_default();
                    (g, vs)
                })
                .collect();
            json_response(200, &discovery::api_group_list(&list))
        }
        ("GET", ["api", "v1"]) => {
            let types = store.types();
            let core: Vec<_> = types
                .iter()
                .filter(|t| t.group.is_empty())
                .map(|t| &**t)
                .collect();
            json_response(200, &discovery::resource_list("", "v1", &core))
        }
        ("GET", ["apis", g]) => {
            let mut versions: Vec<String> = Vec::new();
            for t in store.types().iter().filter(|t| t.group == *g) {
                for v in &t.versions {
                    if !versions.contains(v) {
                        versions.push(v.clone());
                    }
                }
            }
            if versions.is_empty() {
                return error_response(&ApiError::no_route());
            }
            json_response(200, &discovery::api_group(g, &versions))
        }
        ("GET", ["apis", g, v]) => {
            let types = store.types();
            let in_gv: Vec<_> = types
                .iter()
                .filter(|t| t.group == *g && t.versions.iter().any(|x| x == v))
                .map(|t| &**t)
                .collect();
            if in_gv.is_empty() {
                return error_response(&ApiError::no_route());
            }
            json_response(200, &discovery::resource_list(g, v, &in_gv))
        }
        ("GET", ["openapi", "v3"]) => {
            let mut paths = serde_json::Map::new();
            for t in store.types().iter() {
                for v in &t.versions {
                    let gv = if t.group.is_empty() {
                        format!("api/{v}")
                    } else {
                        format!("apis/{}/{v}", t.group)
                    };
                    // kubectl caches these documents by host, port and hash: a
                    // fresh hash keeps another kubesim's (same port, earlier
                    // test) from being taken for this one.
                    let url = format!("/openapi/v3/{gv}?hash={:016x}", super::random_u64());
                    paths.insert(gv, json!({"serverRelativeURL": url}));
                }
            }
            json_response(200, &json!({"paths": paths}))
        }
        ("GET", ["openapi", "v2"]) => openapi_v2(),
        ("GET", ["openapi", "v3", rest @ ..]) => {
            let (group, version) = match rest {
                ["api", v] => ("", *v),
                ["apis", g, v] => (*g, *v),
                _ => return error_response(&ApiError::no_route()),
            };
            json_response(200, &openapi_v3(store, group, version))
        }
        (_, ["sim", "ring", rest @ ..]) => ring_reply(
            crate::fake_cassandra::ring_service::handle(&shared.ring, method, rest, q, body).await,
        ),
        (_, ["sim", rest @ ..]) => admin(shared, method, rest, q, body),
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            rec.verb = "create".into();
            match parse_body(body, content_type)
                .and_then(|b| super::sim::disruption::evict(store, ns, name, &b))
            {
                Ok((code, v)) => json_response(code, &v),
                Err(e) => error_response(&e),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "binding"]) => {
            // What a scheduler posts: the only way to set spec.nodeName.
            rec.verb = "create".into();
            let node = parse_body(body, content_type).and_then(|b| {
                b.pointer("/target/name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::bad_request("a Binding needs target.name (the Node)"))
            });
            match node.and_then(|n| store.bind_pod(ns, name, &n)) {
                Ok(_) => json_response(
                    201,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ),
                Err(e) => error_response(&e),
            }
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", name, "log"]) => {
            match super::logs::handle(store, shared.sim_dir.as_deref(), ns, name, q) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
        (_, ["api", "v1", rest @ ..]) => {
            resource(
                shared,
                method,
                "",
                "v1",
                rest,
                q,
                body,
                content_type,
                accept,
                rec,
                user,
            )
            .await
        }
        (_, ["apis", g, v, rest @ ..]) => {
            resource(
                shared,
                method,
                g,
                v,
                rest,
                q,
                body,
                content_type,
                accept,
                rec,
                user,
            )
            .await
        }
        _ => error_response(&ApiError::no_route()),
    }
}

/// The OpenAPI v3 document of a group version, as kubectl reads it to
/// validate what it applies: each kind's schema is found by its
/// `x-kubernetes-group-version-kind`. Custom resources carry their CRD's
/// schema; built-in kinds a permissive one (their full schemas are not
/// modelled yet).
fn openapi_v3(store: &Store, group: &str, version: &str) -> Value {
    let mut schemas = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    for t in store
        .types()
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
    {
        let mut schema = t.schemas.get(version).cloned().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        if t.custom
            && let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut)
        {
            for f in ["apiVersion", "kind"] {
                props.entry(f).or_insert(json!({"type": "string"}));
            }
            props
                .entry("metadata")
                .or_insert(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        }
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        // The PATCH operation with its fieldValidation parameter tells kubectl
        // to leave field validation to the server.
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let item = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        paths.insert(item, json!({"patch": {
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
            ],
        }}));
        let prefix: Vec<&str> = if group.is_empty() {
            vec!["io", "k8s", "api", "core"]
        } else {
            group.split('.').rev().collect()
        };
        schemas.insert(format!("{}.{version}.{}", prefix.join("."), t.kind), schema);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn admin(
    shared: &Arc<Shared>,
    method: &str,
    rest: &[&str],
    q: &HashMap<String, String>,
    body: &[u8],
) -> Response<Body> {
    match (method, rest) {
        ("GET", ["faults"]) => json_response(
            200,
            &serde_json::to_value(shared.faults.get()).unwrap_or_default(),
        ),
        ("PUT" | "POST", ["faults"]) => match serde_json::from_slice::<FaultConfig>(body) {
            Ok(cfg) => {
                shared.faults.set(cfg.clone());
                json_response(200, &serde_json::to_value(cfg).unwrap_or_default())
            }
            Err(e) => error_response(&ApiError::bad_request(format!(
                "invalid fault configuration: {e}"
            ))),
        },
        ("DELETE", ["faults"]) => {
            shared.faults.set(FaultConfig::default());
            json_response(
                200,
                &serde_json::to_value(FaultConfig::default()).unwrap_or_default(),
            )
        }
        ("GET", ["requests"]) => {
            let since = q.get("since").and_then(|s| s.parse().ok()).unwrap_or(0);
            let items = shared.log.since(since);
            json_response(200, &json!({"items": items}))
        }
        ("DELETE", ["requests"]) => {
            shared.log.clear();
            json_response(200, &json!({"items": []}))
        }
        (
            "POST",
            [
                "nodes",
                name,
                trouble @ ("unreachable" | "not-ready" | "reachable"),
            ],
        ) => kubelet_admin(shared, name, trouble, q),
        ("POST", ["nodes", ..]) => nodes_admin(shared, rest),
        _ => error_response(&ApiError::no_route()),
    }
}

/// `POST /sim/nodes/NAME/unreachable[?freeze=true]` (the kubelet cut off
/// from the API server; with `freeze`, every process of its Pods stopped
/// too), `POST /sim/nodes/NAME/not-ready` (the kubelet posts
/// `Ready=False`) and `POST /sim/nodes/NAME/reachable` (healthy again); see
/// [`crate::kubesim::sim::nodelifecycle`].
fn kubelet_admin(
    shared: &Arc<Shared>,
    name: &str,
    trouble: &str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    use crate::kubesim::sim::nodelifecycle::Trouble;
    if shared.sim_dir.is_none() {
        return error_response(&ApiError::bad_request("the sim does not run"));
    }
    let trouble = match trouble {
        "unreachable" if q.get("freeze").is_some_and(|v| v == "true") => Some(Trouble::Frozen),
        "unreachable" => Some(Trouble::Unreachable),
        "not-ready" => Some(Trouble::NotReady),
        _ => None,
    };
    match shared.kubelets.set(&shared.store, name, trouble) {
        Ok(node) => json_response(
            200,
            &json!({"node": name, "uid": node.pointer("/metadata/uid"), "kubelet": trouble}),
        ),
        Err(e) => json_response(404, &json!({"message": e.to_string()})),
    }
}

/// `POST /sim/nodes/NAME/recreate` (GKE auto-repair: the same name, a new
/// machine, empty local SSDs) and `POST /sim/nodes/NAME/disks/I/wipe` (one
/// local SSD swapped while its Node lives); see [`crate::kubesim::sim::disks`].
fn nodes_admin(shared: &Arc<Shared>, rest: &[&str]) -> Response<Body> {
    use crate::kubesim::sim::disks;
    let Some(work_dir) = shared.sim_dir.as_deref() else {
        return error_response(&ApiError::bad_request("the sim does not run"));
    };
    let result = match rest {
        ["nodes", name, "recreate"] => disks::recreate_node(&shared.store, work_dir, name),
        ["nodes", name, "disks", index, "wipe"] => match index.parse() {
            Ok(i) => disks::wipe_disk(&shared.store, work_dir, Some(&shared.ring), name, i)
                .map(|dir| json!({"wiped": dir})),
            Err(_) => return error_response(&ApiError::bad_request(format!("disk {index}"))),
        },
        _ => return error_response(&ApiError::no_route()),
    };
    match result {
        Ok(v) => json_response(200, &v),
        Err(e @ (disks::DiskError::UnknownNode(_) | disks::DiskError::UnknownDisk { .. })) => {
            json_response(404, &json!({"message": e.to_string()}))
        }
        Err(e) => json_response(500, &json!({"message": e.to_string()})),
    }
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    shared: &Arc<Shared>,
    method: &str,
    group: &str,
    version: &str,
    rest: &[&str],
    q: &HashMap<String, String>,
    body: &[u8],
    content_type: &str,
    accept: &str,
    rec: &mut RequestRecord,
    user: Option<&crate::kubesim::auth::authn::UserInfo>,
) -> Response<Body> {
    let store = &shared.store;
    let Some(rp) = parse_resource_path(group, version, rest, |plural| {
        store
            .resolve(group, version, plural)
            .is_some_and(|t| t.namespaced)
    }) else {
        return error_response(&ApiError::no_route());
    };
    let Some(rt) = store.resolve(group, version, &rp.target.plural) else {
        return error_response(&ApiError::no_route());
    };
    let mut target = rp.target.clone();
    if !rt.namespaced && target.namespace.is_some() {
        return error_response(&ApiError::no_route());
    }
    if rt.namespaced && rp.name.is_some() && target.namespace.is_none() {
        return error_response(&ApiError::no_route());
    }
    if !rt.namespaced {
        target.namespace = None;
    }
    let name = rp.name.clone();
    let sub = rp.subresource.clone();
    let watch = rp.watch_prefix || truthy(q, "watch");
    let verb = match (method, &name, watch) {
        ("GET", _, true) => "watch",
        ("GET", Some(_), false) => "get",
        ("GET", None, false) => "list",
        ("POST", None, _) => "create",
        ("PUT", Some(_), _) => "update",
        ("PATCH", Some(_), _) => "patch",
        ("DELETE", Some(_), _) => "delete",
        ("DELETE", None, _) => "deletecollection",
        _ => "",
    };
    rec.verb = verb.to_string();
    rec.group = group.to_string();
    rec.resource = rt.plural.clone();
    rec.subresource = sub.clone().unwrap_or_default();
    rec.namespace = target.namespace.clone().unwrap_or_default();
    rec.name = name.clone().unwrap_or_default();
    if verb.is_empty() {
        return error_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let subresource = match sub.as_deref() {
        None => Subresource::Main,
        Some("status") if rt.status_subresource => Subresource::Status,
        Some("approval") if rt.approval_subresource() => Subresource::Approval,
        Some("scale") if rt.scale.is_some() => Subresource::Main,
        Some(_) => return error_response(&ApiError::no_route()),
    };
    if sub.is_some() && !matches!(verb, "get" | "update" | "patch") {
        // These subresources are read, replaced and patched only.
        return error_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    if let Some(d) = shared.faults.delay(verb, &rt.plural) {
        tokio::time::sleep(d).await;
    }
    if let Some(f) = shared.faults.pick(verb, &rt.plural) {
        return fault_response(f, &rt, name.as_deref().unwrap_or_default());
    }
    if verb == "watch" {
        let mut q = q.clone();
        if let Some(n) = &name {
            q.insert("fieldSelector".into(), format!("metadata.name={n}"));
        }
        let shape = if accept.contains("as=Table") {
            Shape::Table(
                q.get("includeObject")
                    .cloned()
                    .unwrap_or_else(|| "PartialObjectMetadata".into()),
            )
        } else if accept.contains("as=PartialObjectMetadata") {
            Shape::Meta
        } else {
            Shape::Full
        };
        return start_watch(shared, &target, &q, shape).await;
    }
    let table = accept.contains("as=Table");
    let mut wo = write_options(q);
    // The API server names a manager that gave none after its user agent.
    wo.update_manager = wo.field_manager.clone().or_else(|| {
        let ua = rec.user_agent.split('/').next().unwrap_or_default();
        (!ua.is_empty()).then(|| ua.to_string())
    });
    // The admission plugins see the user and may ask the authorizer.
    let admission = user
        .filter(|_| super::faults::WRITES.contains(&verb))
        .map(|u| {
            let policy = (!u.is_master()).then(|| shared.policy.current(store));
            let who = u.clone();
            Arc::new(super::store::Admission::new(u.clone(), move |a| {
                policy.as_ref().is_none_or(|p| p.allows(&who, a))
            }))
        });
    wo.admission = admission.clone();
    let result: Result<(u16, Value), ApiError> = (|| {
        let name = name.as_deref().unwrap_or_default();
        match verb {
            "get" if sub.as_deref() == Some("scale") => {
                Ok((200, scale_of(&rt, &store.get(&target, name)?)))
            }
            "get" => store.get(&target, name).map(|o| (200, o)),
            "list" => store.list(&target, &list_options(q)?).map(|o| (200, o)),
            "create" => {
                let obj = parse_body(body, content_type)?;
                store.create(&target, obj, &wo).map(|o| (201, o))
            }
            "update" if sub.as_deref() == Some("scale") => {
                let scale = parse_body(body, content_type)?;
                write_scale(store, &rt, &target, name, &scale, &wo)
            }
            "update" => {
                let obj = parse_body(body, content_type)?;
                store
                    .update(&target, name, obj, subresource, &wo)
                    .map(|o| (200, o))
            }
            "patch" => {
                let kind = PatchType::from_content_type(content_type).ok_or_else(|| {
                    ApiError::unsupported_media_type("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json")
                })?;
                let patch = parse_body(body, content_type)?;
                if sub.as_deref() == Some("scale") {
                    let mut scale = scale_of(&rt, &store.get(&target, name)?);
                    match kind {
                        PatchType::Json => super::patch::json_patch(&mut scale, &patch)
                            .map_err(ApiError::bad_request)?,
                        _ => super::patch::merge_patch(&mut scale, &patch),
                    }
                    return write_scale(store, &rt, &target, name, &scale, &wo);
                }
                let (o, created) = store.patch(&target, name, kind, &patch, subresource, &wo)?;
                Ok((if created { 201 } else { 200 }, o))
            }
            "delete" => {
                let mut opts = delete_options(q, body)?;
                opts.admission = admission.clone();
                store.delete(&target, name, &opts).map(|o| (200, o))
            }
            "deletecollection" => {
                let mut opts = delete_options(q, body)?;
                opts.admission = admission.clone();
                store
                    .delete_collection(&target, &list_options(q)?, &opts)
                    .map(|o| (200, o))
            }
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        }
    })();
    let mut resp = respond(result, table, verb, version, &rt, q, accept);
    if let Some(adm) = admission {
        record_admission_checks(shared, &adm, rec);
        for w in adm
            .warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
            if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
                resp.headers_mut().append("warning", v);
            }
        }
    }
    resp
}

/// The authorization checks admission plugins made for a request, in the
/// request log as calls of its user (method `ADMISSION`, the plugin as
/// the path): what the user must be allowed besides the request itself.
fn record_admission_checks(
    shared: &Arc<Shared>,
    adm: &super::store::Admission,
    rec: &RequestRecord,
) {
    for (plugin, a, ok) in adm.checks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        shared.log.push(RequestRecord {
            seq: 0,
            method: "ADMISSION".into(),
            path: (*plugin).into(),
            query: String::new(),
            verb: a.verb.clone(),
            group: a.api_group.clone(),
            resource: a.resource.clone(),
            subresource: a.subresource.clone(),
            namespace: a.namespace.clone(),
            name: a.name.clone(),
            user_agent: rec.user_agent.clone(),
            content_type: String::new(),
            code: if *ok { 200 } else { 403 },
            user: rec.user.clone(),
            at_us: rec.at_us,
        });
    }
}

/// The response to a served request: JSON, or a Table or partial metadata
/// when kubectl asks for them.
fn respond(
    result: Result<(u16, Value), ApiError>,
    table: bool,
    verb: &str,
    version: &str,
    rt: &super::discovery::ResourceType,
    q: &HashMap<String, String>,
    accept: &str,
) -> Response<Body> {
    match result {
        Ok((code, v)) if table && (verb == "get" || verb == "list") => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            let include = q
                .get("includeObject")
                .map(String::as_str)
                .unwrap_or("PartialObjectMetadata");
            json_response(code, &super::table::to_table(rt, version, &v, include, now))
        }
        Ok((code, v)) if accept.contains("as=PartialObjectMetadataList") && verb == "list" => {
            json_response(code, &partial_list(&v))
        }
        Ok((code, v)) if accept.contains("as=PartialObjectMetadata;") && verb == "get" => {
            json_response(code, &partial(&v))
        }
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

fn fault_response(f: Fault, rt: &super::discovery::ResourceType, name: &str) -> Response<Body> {
    match f {
        Fault::Conflict => error_response(&ApiError::stale(rt, name)),
        Fault::Error => error_response(&ApiError::internal(
            "Internal error occurred: injected by kubesim",
        )),
        Fault::Throttle => {
            let e = ApiError {
                code: 429,
                reason: "TooManyRequests",
                message: "Too many requests, please try again later.".into(),
                details: Some(
                    json!({"causes": [{"message": "injected by kubesim"}], "retryAfterSeconds": 1}),
                ),
            };
            error_response(&e)
        }
    }
}

/// The `autoscaling/v1` Scale of a scalable object.
fn scale_of(rt: &super::discovery::ResourceType, obj: &Value) -> Value {
    let Some(paths) = &rt.scale else {
        return Value::Null;
    };
    let m = &obj["metadata"];
    let selector = match &paths.label_selector {
        Some(p) => obj.pointer(p).cloned().unwrap_or(json!("")),
        None => {
            // Built-in kinds: the spec's label selector as a string.
            let sel = obj
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object);
            json!(
                sel.map(|m| m
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(","))
                    .unwrap_or_default()
            )
        }
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]
        },
        "spec": {"replicas": obj.pointer(&paths.spec_replicas).cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer(&paths.status_replicas).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

fn write_scale(
    store: &Store,
    rt: &super::discovery::ResourceType,
    target: &Target,
    name: &str,
    scale: &Value,
    wo: &WriteOptions,
) -> Result<(u16, Value), ApiError> {
    let Some(paths) = &rt.scale else {
        return Err(ApiError::no_route());
    };
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("spec.replicas is required"))?;
    let mut obj = store.get(target, name)?;
    if let Some(rv) = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        && !rv.is_empty()
    {
        obj["metadata"]["resourceVersion"] = json!(rv);
    }
    let mut ptr_target = &mut obj;
    let parts: Vec<&str> = paths
        .spec_replicas
        .trim_start_matches('/')
        .split('/')
        .collect();
    for p in &parts[..parts.len() - 1] {
        if !ptr_target.get(*p).is_some_and(Value::is_object) {
            ptr_target[*p] = json!({});
        }
        ptr_target = &mut ptr_target[*p];
    }
    ptr_target[parts[parts.len() - 1]] = json!(replicas);
    let updated = store.update(target, name, obj, Subresource::Main, wo)?;
    Ok((200, scale_of(rt, &updated)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespaced(p: &str) -> bool {
        matches!(p, "pods" | "configmaps" | "statefulsets")
    }

    #[test]
    fn resource_paths() {
        let p = parse_resource_path(
            "",
            "v1",
            &["namespaces", "ns", "pods", "p", "status"],
            namespaced,
        )
        .unwrap();
        assert_eq!(p.target, Target::new("", "v1", "pods", Some("ns")));
        assert_eq!(p.name.as_deref(), Some("p"));
        assert_eq!(p.subresource.as_deref(), Some("status"));
        let p = parse_resource_path("", "v1", &["namespaces", "ns", "status"], namespaced).unwrap();
        assert_eq!(p.target, Target::new("", "v1", "namespaces", None));
        assert_eq!(p.name.as_deref(), Some("ns"));
        assert_eq!(p.subresource.as_deref(), Some("status"));
        let p = parse_resource_path("", "v1", &["pods"], namespaced).unwrap();
        assert_eq!(p.target, Target::new("", "v1", "pods", None));
        let p = parse_resource_path(
            "apps",
            "v1",
            &["watch", "namespaces", "a", "statefulsets"],
            namespaced,
        )
        .unwrap();
        assert!(p.watch_prefix);
        assert_eq!(
            p.target,
            Target::new("apps", "v1", "statefulsets", Some("a"))
        );
        assert!(parse_resource_path("", "v1", &[], namespaced).is_none());
    }

    #[test]
    fn queries_are_decoded() {
        let q = parse_query("labelSelector=app%3Dc%2Cenv+in+%28a%29&watch=1&x");
        assert_eq!(q["labelSelector"], "app=c,env in (a)");
        assert_eq!(q["watch"], "1");
        assert_eq!(q["x"], "");
    }

    #[test]
    fn watch_filters_turn_selection_changes_into_added_and_deleted() {
        let obj = |app: &str| {
            Arc::new(json!({"metadata": {"name": "p", "namespace": "a", "labels": {"app": app}}}))
        };
        let ev = |kind, now: &str, prev: Option<&str>| Event {
            rv: 1,
            kind,
            group: String::new(),
            plural: "pods".into(),
            object: obj(now),
            prev: prev.map(obj),
            at_us: 0,
        };
        let sel = LabelSelector::parse("app=x").unwrap();
        let none = FieldSelector::default();
        assert_eq!(
            filter_event(&ev(EventType::Modified, "x", Some("y")), None, &sel, &none),
            Some("ADDED")
        );
        assert_eq!(
            filter_event(&ev(EventType::Modified, "y", Some("x")), None, &sel, &none),
            Some("DELETED")
        );
        assert_eq!(
            filter_event(&ev(EventType::Modified, "x", Some("x")), None, &sel, &none),
            Some("MODIFIED")
        );
        assert_eq!(
            filter_event(&ev(EventType::Modified, "y", Some("y")), None, &sel, &none),
            None
        );
        assert_eq!(
            filter_event(&ev(EventType::Added, "x", None), Some("b"), &sel, &none),
            None
        );
        assert_eq!(
            filter_event(
                &ev(EventType::Deleted, "x", Some("x")),
                Some("a"),
                &sel,
                &none
            ),
            Some("DELETED")
        );
    }

    #[test]
    fn delete_options_from_body_and_query() {
        let q = parse_query("propagationPolicy=Foreground");
        let d = delete_options(&q, b"").unwrap();
        assert_eq!(d.propagation, Some(Propagation::Foreground));
        let d = delete_options(
            &HashMap::new(),
            br#"{"propagationPolicy":"Orphan","preconditions":{"uid":"u"}}"#,
        )
        .unwrap();
        assert_eq!(d.propagation, Some(Propagation::Orphan));
        assert_eq!(d.uid.as_deref(), Some("u"));
        assert_eq!(
            delete_options(&HashMap::new(), br#"{"propagationPolicy":"Nope"}"#)
                .unwrap_err()
                .code,
            400
        );
    }
}
