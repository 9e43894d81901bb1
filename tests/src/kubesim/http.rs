//! The HTTP face of kubesim: the API server's URL layout, verbs, query
//! parameters, content types, streaming watches, Table output for kubectl,
//! and the admin endpoints (`/sim/faults`, `/sim/requests`). I/O: serves
//! hyper 1 HTTP/1.1 connections on tokio.

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

/// What the server shares between connections.
#[derive(Debug)]
pub struct Shared {
    /// The objects.
    pub store: Store,
    /// Faults in force.
    pub faults: Faults,
    /// Requests served.
    pub log: RequestLog,
    /// Address the server listens on.
    pub addr: SocketAddr,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// The fake Cassandra nodes' ring (`/sim/ring`).
    pub ring: Arc<crate::fake_cassandra::ring_service::RingService>,
    /// The sim's work directory, where the kubelet writes container logs
    /// (None without the sim).
    pub sim_dir: Option<std::path::PathBuf>,
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
    json_response(e.code, &e.status())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters (the last value of a repeated one wins).
pub fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A parsed resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// Kind, version and namespace.
    pub target: Target,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// The legacy `/watch/` prefix was used.
    pub watch_prefix: bool,
}

/// Splits `/api/v1/...` or `/apis/<g>/<v>/...` after the version: `namespaced`
/// says whether a resource (plural) of the group is namespaced.
pub fn parse_resource_path(
    group: &str,
    version: &str,
    rest: &[&str],
    namespaced: impl Fn(&str) -> bool,
) -> Option<ResourcePath> {
    let (watch_prefix, rest) = match rest.first() {
        Some(&"watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let owned = |s: Option<&&str>| s.map(|s| s.to_string());
    if rest.len() >= 3 && rest[0] == "namespaces" && namespaced(rest[2]) {
        if rest.len() > 5 {
            return None;
        }
        return Some(ResourcePath {
            target: Target::new(group, version, rest[2], Some(rest[1])),
            name: owned(rest.get(3)),
            subresource: owned(rest.get(4)),
            watch_prefix,
        });
    }
    if rest.is_empty() || rest.len() > 3 {
        return None;
    }
    Some(ResourcePath {
        target: Target::new(group, version, rest[0], None),
        name: owned(rest.get(1)),
        subresource: owned(rest.get(2)),
        watch_prefix,
    })
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

fn list_options(q: &HashMap<String, String>) -> Result<ListOptions, ApiError> {
    Ok(ListOptions {
        label_selector: LabelSelector::parse(
            q.get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        field_selector: FieldSelector::parse(
            q.get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(ApiError::bad_request)?,
        limit: q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q
            .get("resourceVersionMatch")
            .filter(|c| !c.is_empty())
            .cloned(),
    })
}

fn write_options(q: &HashMap<String, String>) -> WriteOptions {
    WriteOptions {
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        field_manager: q.get("fieldManager").cloned(),
        force: truthy(q, "force"),
        field_validation: q.get("fieldValidation").cloned(),
        update_manager: None,
    }
}

fn delete_options(q: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = b
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| q.get("propagationPolicy").cloned());
    let orphan = b
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| q.get("orphanDependents").map(|o| o == "true"));
    let propagation = match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Background"), _) => Some(Propagation::Background),
        (Some("Orphan"), _) | (None, Some(true)) => Some(Propagation::Orphan),
        (None, _) => None,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    let dry = b
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|d| d == "All"))
        || q.get("dryRun").is_some_and(|d| d == "All");
    Ok(DeleteOptions {
        propagation,
        uid: b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run: dry,
        grace_period: match b.get("gracePeriodSeconds").and_then(Value::as_i64) {
            Some(g) => Some(g),
            None => match q.get("gracePeriodSeconds") {
                Some(g) => Some(g.parse::<i64>().map_err(|e| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds: {e}"))
                })?),
                None => None,
            },
        },
    })
}

fn parse_body(body: &[u8], content_type: &str) -> Result<Value, ApiError> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media == "application/vnd.kubernetes.protobuf" {
        // kubectl's generators (create namespace, configmap, secret,
        // serviceaccount) send protobuf.
        return super::protobuf::decode(body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        });
    }
    if media.contains("protobuf") || media.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (not {media})"
        )));
    }
    if media.contains("yaml") {
        let text = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        serde_norway::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        })
    }
}

/// Serves one request.
pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
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
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response(&ApiError::bad_request(format!("reading the body: {e}"))),
    };
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
    };
    let q = parse_query(&query);
    let resp = route(
        &shared,
        &method,
        &path,
        &q,
        &body,
        &content_type,
        &accept,
        &mut rec,
    )
    .await;
    rec.code = resp.status().as_u16();
    if !path.starts_with("/sim/") {
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
        _ => error_response(&ApiError::no_route()),
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
        Some("scale") if rt.scale.is_some() => Subresource::Main,
        Some(_) => return error_response(&ApiError::no_route()),
    };
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
                let opts = delete_options(q, body)?;
                store.delete(&target, name, &opts).map(|o| (200, o))
            }
            "deletecollection" => {
                let opts = delete_options(q, body)?;
                store
                    .delete_collection(&target, &list_options(q)?, &opts)
                    .map(|o| (200, o))
            }
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        }
    })();
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
            json_response(
                code,
                &super::table::to_table(&rt, version, &v, include, now),
            )
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
            let mut r = error_response(&e);
            r.headers_mut()
                .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
            r
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

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// How watch events carry their objects, as the request's `Accept` asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// The object.
    Full,
    /// `PartialObjectMetadata`
    Meta,
    /// A one-row `Table` (`kubectl get -w`), with this `includeObject`.
    Table(String),
}

fn present_at(
    rt: &super::discovery::ResourceType,
    version: &str,
    obj: &Value,
    shape: &Shape,
) -> Value {
    match shape {
        Shape::Full => super::store::present(rt, version, obj),
        Shape::Meta => partial(obj),
        Shape::Table(include) => {
            let shown = super::store::present(rt, version, obj);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            super::table::to_table(rt, version, &shown, include, now)
        }
    }
}

/// A store event as watchers of a kind see it (converted when the kind is
/// stored as another), so that selectors apply to the served shape.
fn view(rt: &super::discovery::ResourceType, version: &str, ev: &Arc<Event>) -> Arc<Event> {
    if rt.stored_as.is_none() {
        return ev.clone();
    }
    let shown = |o: &Value| Arc::new(super::store::present(rt, version, o));
    Arc::new(Event {
        object: shown(&ev.object),
        prev: ev.prev.as_deref().map(shown),
        ..(**ev).clone()
    })
}

/// The `PartialObjectMetadata` of an object (what metadata watchers ask
/// for with `Accept: ...;as=PartialObjectMetadata`).
fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

/// A list as a `PartialObjectMetadataList`.
fn partial_list(list: &Value) -> Value {
    let items: Vec<Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(partial)
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list["metadata"], "items": items})
}

/// How one store event looks to a watcher with these filters: the event
/// type it becomes (a MODIFIED that leaves the selection is a DELETED, one
/// that enters it an ADDED, as the watch cache does) or nothing.
pub fn filter_event(
    ev: &Event,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<&'static str> {
    if ns.is_some_and(|n| n != ev.namespace()) {
        return None;
    }
    let matches = |o: &Value| labels.matches_object(o) && fields.matches_object(o);
    let now = matches(&ev.object);
    match ev.kind {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => now.then_some("DELETED"),
        EventType::Modified => {
            let before = ev.prev.as_deref().is_some_and(matches);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

async fn start_watch(
    shared: &Arc<Shared>,
    target: &Target,
    q: &HashMap<String, String>,
    shape: Shape,
) -> Response<Body> {
    let opts = match list_options(q) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    let store = &shared.store;
    let Some(rt) = store.resolve(&target.group, &target.version, &target.plural) else {
        return error_response(&ApiError::no_route());
    };
    for term in &opts.field_selector.0 {
        if !rt.supports_field(&term.field) {
            return error_response(&ApiError::bad_request(format!(
                "field label not supported: {}",
                term.field
            )));
        }
    }
    let initial_events = truthy(q, "sendInitialEvents");
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(r) => match r.parse::<u64>() {
            Ok(n) if !initial_events => Some(n),
            Ok(_) => None,
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resource version: {r:?}"
                )));
            }
        },
    };
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let drop_after = shared.faults.drop_watch_after(&rt.plural);
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let mut resp = Response::new(Body::Stream(rx));
    resp.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        "cache-control",
        hyper::header::HeaderValue::from_static("no-cache, private"),
    );
    let (rt, replay, start_rv, events) = match store.watch_from(target, rv) {
        Ok(x) => x,
        Err(e) => {
            // The watch cache answers a too old version inside the stream.
            let _ = tx.try_send(event_line("ERROR", &e.status()));
            return resp;
        }
    };
    let version = target.version.clone();
    let ns = target.namespace.clone().filter(|_| rt.namespaced);
    let interval = shared.bookmark_interval;
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let dropped = drop_after.map(|d| tokio::time::Instant::now() + d);
        let mut last_rv = start_rv;
        let bookmark = |rv: u64, initial_end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                &json!({"kind": rt.kind, "apiVersion": rt.api_version(&version), "metadata": meta}),
            )
        };
        for ev in &replay {
            let ev = &view(&rt, &version, ev);
            if let Some(kind) = filter_event(
                ev,
                ns.as_deref(),
                &opts.label_selector,
                &opts.field_selector,
            ) && tx
                .send(event_line(
                    kind,
                    &present_at(&rt, &version, &ev.object, &shape),
                ))
                .await
                .is_err()
            {
                return;
            }
        }
        if initial_events && bookmarks && tx.send(bookmark(start_rv, true)).await.is_err() {
            return;
        }
        watch_loop(
            events,
            &tx,
            &rt,
            &version,
            ns.as_deref(),
            &opts,
            bookmarks,
            interval,
            deadline,
            dropped,
            &mut last_rv,
            &bookmark,
            &shape,
        )
        .await;
    });
    resp
}

#[allow(clippy::too_many_arguments)]
async fn watch_loop(
    mut events: broadcast::Receiver<Arc<Event>>,
    tx: &mpsc::Sender<Bytes>,
    rt: &super::discovery::ResourceType,
    version: &str,
    ns: Option<&str>,
    opts: &ListOptions,
    bookmarks: bool,
    interval: Duration,
    deadline: tokio::time::Instant,
    dropped: Option<tokio::time::Instant>,
    last_rv: &mut u64,
    bookmark: &impl Fn(u64, bool) -> Bytes,
    shape: &Shape,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let drop_at = dropped.unwrap_or(deadline);
    loop {
        tokio::select! {
            r = events.recv() => match r {
                Ok(ev) => {
                    if ev.rv <= *last_rv {
                        continue;
                    }
                    *last_rv = ev.rv;
                    let (group, plural) = super::store::storage_key(rt);
                    if ev.group != group || ev.plural != plural {
                        continue;
                    }
                    let ev = view(rt, version, &ev);
                    if let Some(kind) = filter_event(&ev, ns, &opts.label_selector, &opts.field_selector)
                        && tx.send(event_line(kind, &present_at(rt, version, &ev.object, shape))).await.is_err()
                    {
                        return;
                    }
                }
                // Fell behind: end the watch; the client resumes from its last version.
                Err(_) => return,
            },
            _ = tick.tick(), if bookmarks => {
                if tx.send(bookmark(*last_rv, false)).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tokio::time::sleep_until(drop_at), if dropped.is_some() => return,
            _ = tx.closed() => return,
        }
    }
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
