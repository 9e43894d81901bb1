//! ScyllaDB's admin REST API over a node's gossip view: what each request
//! answers (tests/fixtures/scylla-rest/FACTS.md), or which ring operation
//! it carries out (drain, decommission). Pure: the node's
//! [`NodeView`] and the request in, a [`Step`] out; [`super::node`] does
//! the I/O.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::fake_cassandra::jolokia::RingCall;
use crate::fake_cassandra::view::{EndpointView, NodeView};

use super::config::CASSANDRA_COMPAT;

/// An HTTP answer: the status and the JSON body (`None`: Seastar's
/// `json_void`, an empty body).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Option<Value>,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply {
            status: 200,
            body: Some(body),
        }
    }

    /// `json_void`.
    pub fn void() -> Self {
        Reply {
            status: 200,
            body: None,
        }
    }

    /// Seastar's `json_exception`: `{"message", "code"}` with that status.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Reply {
            status,
            body: Some(json!({"message": message.into(), "code": status})),
        }
    }

    /// Any exception that is not an `httpd::base_exception`: a 500 whose
    /// message is the `std::exception_ptr` as Seastar prints it.
    pub fn runtime_error(what: &str) -> Self {
        Reply::error(500, format!("std::runtime_error ({what})"))
    }

    pub fn not_found() -> Self {
        Reply::error(404, "Not found")
    }
}

/// What a request needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Answer(Reply),
    /// A blocking operation: the ring carries it out, the reply follows
    /// ([`reply_of_call`]).
    Call(RingCall),
}

/// What the node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `scylla_release_version`.
    pub release: String,
}

/// Scylla's name of the ring model's mode: a node streaming for a
/// bootstrap or a replace is in `BOOTSTRAP` (storage_service::bootstrap
/// sets it), which the model calls JOINING.
pub fn scylla_mode(model_mode: &str) -> &str {
    match model_mode {
        "JOINING" => "BOOTSTRAP",
        other => other,
    }
}

fn token_owner(e: &EndpointView) -> bool {
    matches!(e.state, 'N' | 'L')
}

fn addresses(view: &NodeView, keep: impl Fn(&EndpointView) -> bool) -> Value {
    let mut list: Vec<&str> = view
        .endpoints
        .iter()
        .filter(|e| keep(e))
        .map(|e| e.address.as_str())
        .collect();
    list.sort_unstable();
    json!(list)
}

fn sorted_tokens(tokens: &[String]) -> Vec<&String> {
    let mut list: Vec<&String> = tokens.iter().collect();
    list.sort_by_key(|t| t.parse::<i64>().unwrap_or_default());
    list
}

/// The answer to a request while the node starts: the API server is up
/// before the storage service has a host ID or gossip runs.
fn starting(method: &str, path: &str) -> Reply {
    match (method, path) {
        ("GET", "/storage_service/operation_mode") => Reply::ok(json!("STARTING")),
        ("GET", "/storage_service/is_starting") => Reply::ok(json!(true)),
        ("GET", "/storage_service/hostid/local") => {
            Reply::error(404, "local host ID is not yet set")
        }
        ("GET", "/storage_service/host_id") => {
            Reply::runtime_error("The gossiper is not ready yet")
        }
        ("POST", "/storage_service/decommission") => {
            Reply::runtime_error("local node is not a member of the token ring yet")
        }
        ("GET", p) if LISTS.contains(&p) => Reply::ok(json!([])),
        _ => Reply::not_found(),
    }
}

/// The list answers that are empty before the node knows the ring.
const LISTS: &[&str] = &[
    "/gossiper/endpoint/live/",
    "/gossiper/endpoint/down/",
    "/storage_service/nodes/joining",
    "/storage_service/nodes/leaving",
    "/storage_service/nodes/moving",
    "/storage_service/tokens",
    "/storage_service/tokens_endpoint",
    "/storage_service/load_map",
];

/// The answer to `method path?query` of a node whose view is `view`
/// (`None` while it starts).
pub fn step(
    identity: &Identity,
    view: Option<&NodeView>,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
) -> Step {
    let answer = |r: Reply| Step::Answer(r);
    match (method, path) {
        ("GET", "/storage_service/release_version") => {
            return answer(Reply::ok(json!(CASSANDRA_COMPAT)));
        }
        ("GET", "/storage_service/scylla_release_version") => {
            return answer(Reply::ok(json!(identity.release)));
        }
        _ => {}
    }
    let Some(view) = view else {
        return answer(starting(method, path));
    };
    let host = query.get("host").map(String::as_str).unwrap_or("");
    let located = |f: fn(&EndpointView) -> &str, default: &str, own: &str| -> Reply {
        if host.is_empty() {
            return Reply::ok(json!(own));
        }
        // An unknown host answers the default location (nodetool status
        // races with nodes leaving).
        Reply::ok(json!(view.endpoint(host).map_or(default, f)))
    };
    let reply = match (method, path) {
        ("GET", "/storage_service/operation_mode") => Reply::ok(json!(scylla_mode(&view.mode))),
        ("GET", "/storage_service/is_starting") => Reply::ok(json!(view.mode == "STARTING")),
        ("GET", "/storage_service/hostid/local") => Reply::ok(json!(view.host_id)),
        ("GET", "/storage_service/host_id") => {
            let mut owners: Vec<&EndpointView> =
                view.endpoints.iter().filter(|e| token_owner(e)).collect();
            owners.sort_by(|a, b| a.address.cmp(&b.address));
            Reply::ok(json!(
                owners
                    .iter()
                    .map(|e| json!({"key": e.address, "value": e.host_id}))
                    .collect::<Vec<_>>()
            ))
        }
        ("GET", "/gossiper/endpoint/live/") => Reply::ok(addresses(view, |e| e.up)),
        ("GET", "/gossiper/endpoint/down/") => Reply::ok(addresses(view, |e| !e.up)),
        ("GET", "/storage_service/nodes/joining") => Reply::ok(addresses(view, |e| e.state == 'J')),
        ("GET", "/storage_service/nodes/leaving") => Reply::ok(addresses(view, |e| e.state == 'L')),
        ("GET", "/storage_service/nodes/moving") => Reply::ok(json!([])),
        ("GET", "/storage_service/tokens") => Reply::ok(json!(sorted_tokens(&view.tokens))),
        ("GET", p) if p.starts_with("/storage_service/tokens/") => {
            let endpoint = &p["/storage_service/tokens/".len()..];
            let tokens = view
                .endpoint(endpoint)
                .map(|e| sorted_tokens(&e.tokens))
                .unwrap_or_default();
            Reply::ok(json!(tokens))
        }
        ("GET", "/storage_service/tokens_endpoint") => {
            let mut pairs: Vec<(i64, &str, &str)> = view
                .endpoints
                .iter()
                .filter(|e| token_owner(e))
                .flat_map(|e| {
                    e.tokens.iter().map(move |t| {
                        (
                            t.parse::<i64>().unwrap_or_default(),
                            t.as_str(),
                            e.address.as_str(),
                        )
                    })
                })
                .collect();
            pairs.sort_unstable();
            Reply::ok(json!(
                pairs
                    .iter()
                    .map(|(_, t, a)| json!({"key": t, "value": a}))
                    .collect::<Vec<_>>()
            ))
        }
        ("GET", "/storage_service/load_map") => {
            let mut loads: Vec<(&str, u64)> = view
                .endpoints
                .iter()
                .map(|e| (e.address.as_str(), e.load_bytes))
                .collect();
            loads.sort_unstable();
            Reply::ok(json!(
                loads
                    .iter()
                    .map(|(a, l)| json!({"key": a, "value": l}))
                    .collect::<Vec<_>>()
            ))
        }
        ("GET", "/snitch/datacenter") => located(|e| &e.dc, "datacenter1", &view.dc),
        ("GET", "/snitch/rack") => located(|e| &e.rack, "rack1", &view.rack),
        ("POST", "/storage_service/drain") => return Step::Call(RingCall::Drain),
        ("POST", "/storage_service/decommission") => {
            return Step::Call(RingCall::Decommission { force: false });
        }
        _ => Reply::not_found(),
    };
    answer(reply)
}

/// The reply to a ring operation: `json_void` when it completed, else
/// Scylla's `std::runtime_error` with the model's words (the ring speaks
/// Cassandra 3.x's, which Scylla's gossip topology kept).
pub fn reply_of_call(outcome: Result<(), String>) -> Reply {
    match outcome {
        Ok(()) => Reply::void(),
        Err(message) => Reply::runtime_error(message.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_cassandra::view::node_view;
    use crate::ring::{NodeConfig, Options, Ring, Version};

    fn scylla(address: &str, rack: &str, dir: &str) -> NodeConfig {
        let mut c = NodeConfig::new("c", address, "DC1", rack, &["10.0.0.1"], dir);
        c.version = Version::new(3, 0);
        c
    }

    fn get(view: Option<&NodeView>, path: &str) -> Reply {
        let identity = Identity {
            release: "5.4.9".into(),
        };
        match step(&identity, view, "GET", path, &BTreeMap::new()) {
            Step::Answer(r) => r,
            Step::Call(c) => panic!("a GET is no call: {c:?}"),
        }
    }

    #[test]
    fn a_ring_of_three_with_one_down_as_the_rest_api_shows_it() {
        let mut ring = Ring::new(Options::default());
        let a = ring.start(&scylla("10.0.0.1", "B1", "/a")).expect("a");
        let b = ring.start(&scylla("10.0.0.2", "B1", "/b")).expect("b");
        let _ = ring.advance(10_000);
        let c = ring.start(&scylla("10.0.0.3", "B2", "/c")).expect("c");
        let _ = ring.advance(10_000);
        ring.kill(&c.host_id).expect("kill");
        let view = node_view(&ring, &a.host_id).expect("a view");
        let v = Some(&view);
        assert_eq!(
            get(v, "/storage_service/operation_mode").body,
            Some(json!("NORMAL"))
        );
        assert_eq!(
            get(v, "/storage_service/hostid/local").body,
            Some(json!(a.host_id))
        );
        assert_eq!(
            get(v, "/gossiper/endpoint/live/").body,
            Some(json!(["10.0.0.1", "10.0.0.2"]))
        );
        assert_eq!(
            get(v, "/gossiper/endpoint/down/").body,
            Some(json!(["10.0.0.3"]))
        );
        let ids = get(v, "/storage_service/host_id").body.expect("a body");
        assert_eq!(ids[1], json!({"key": "10.0.0.2", "value": b.host_id}));
        assert_eq!(ids.as_array().map(Vec::len), Some(3));
        let te = get(v, "/storage_service/tokens_endpoint")
            .body
            .expect("a body");
        assert_eq!(te.as_array().map(Vec::len), Some(48), "16 tokens each");
        let tokens: Vec<i64> = te
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                m["key"]
                    .as_str()
                    .and_then(|t| t.parse().ok())
                    .expect("a token")
            })
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "sorted by token");
        assert_eq!(
            get(v, "/storage_service/tokens")
                .body
                .and_then(|t| t.as_array().map(Vec::len)),
            Some(16)
        );
        assert_eq!(
            get(v, "/storage_service/tokens/10.0.0.9").body,
            Some(json!([]))
        );
        let identity = Identity {
            release: "5.4.9".into(),
        };
        let rack = |host: &str| {
            let q = BTreeMap::from([("host".to_string(), host.to_string())]);
            match step(&identity, v, "GET", "/snitch/rack", &q) {
                Step::Answer(r) => r.body,
                Step::Call(_) => None,
            }
        };
        assert_eq!(rack("10.0.0.3"), Some(json!("B2")));
        assert_eq!(
            rack("10.9.9.9"),
            Some(json!("rack1")),
            "unknown: the default"
        );
        assert_eq!(rack(""), Some(json!("B1")), "empty: this node");
        assert_eq!(
            get(v, "/storage_service/release_version").body,
            Some(json!("3.0.8"))
        );
        assert_eq!(
            get(v, "/storage_service/scylla_release_version").body,
            Some(json!("5.4.9"))
        );
        assert_eq!(
            get(v, "/jolokia/read/x").body,
            Some(json!({"message": "Not found", "code": 404}))
        );
    }

    #[test]
    fn a_bootstrapping_node_is_in_bootstrap_mode_and_listed_as_joining() {
        let mut ring = Ring::new(Options::default());
        let a = ring.start(&scylla("10.0.0.1", "B1", "/a")).expect("a");
        let b = ring.start(&scylla("10.0.0.2", "B1", "/b")).expect("b");
        let view = node_view(&ring, &b.host_id).expect("b view");
        assert_eq!(
            get(Some(&view), "/storage_service/operation_mode").body,
            Some(json!("BOOTSTRAP"))
        );
        let view = node_view(&ring, &a.host_id).expect("a view");
        assert_eq!(
            get(Some(&view), "/storage_service/nodes/joining").body,
            Some(json!(["10.0.0.2"]))
        );
        let ids = get(Some(&view), "/storage_service/host_id").body;
        assert_eq!(
            ids.and_then(|i| i.as_array().map(Vec::len)),
            Some(1),
            "a joining node owns no tokens yet"
        );
    }

    #[test]
    fn while_starting_the_api_answers_without_a_ring() {
        assert_eq!(
            get(None, "/storage_service/operation_mode").body,
            Some(json!("STARTING"))
        );
        let r = get(None, "/storage_service/hostid/local");
        assert_eq!(r.status, 404);
        assert_eq!(
            r.body,
            Some(json!({"message": "local host ID is not yet set", "code": 404}))
        );
        assert_eq!(get(None, "/storage_service/host_id").status, 500);
        assert_eq!(reply_of_call(Ok(())), Reply::void());
        assert_eq!(
            reply_of_call(Err("Cannot replace a live node... ".into())).body,
            Some(
                json!({"message": "std::runtime_error (Cannot replace a live node...)", "code": 500})
            )
        );
    }
}
