//! ScyllaDB's admin REST API over a node's gossip view: what each request
//! answers (tests/fixtures/scylla-rest/FACTS.md), or which ring operation
//! it carries out (drain, decommission). Pure: the node's
//! [`NodeView`] and the request in, a [`Step`] out; [`super::node`] does
//! the I/O.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::fake_cassandra::jolokia::RingCall;
use crate::fake_cassandra::view::{EndpointView, NodeView};
use crate::ring::{Endpoint, Replication, Token, TokenMap};

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
    /// The schema: the answer comes from the cluster's ring as a whole
    /// (its keyspaces), [`answer_schema`].
    Schema(SchemaQuery),
}

/// A request about keyspaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaQuery {
    /// `GET /storage_service/ownership/{keyspace}`.
    Ownership { keyspace: String },
    /// `GET /storage_service/keyspaces?type=`.
    Keyspaces { user_only: bool },
}

/// `replica::no_such_keyspace`'s words, as `validate_keyspace` throws
/// them in a `bad_param_exception` (400).
fn no_such_keyspace(keyspace: &str) -> Reply {
    Reply::error(400, format!("Can't find a keyspace {keyspace}"))
}

fn replication_of(v: &Value) -> Option<Replication> {
    match v["class"].as_str()? {
        "SimpleStrategy" => Some(Replication::simple(
            v["replication_factor"].as_u64()? as usize
        )),
        "NetworkTopologyStrategy" => {
            let dcs = v["datacenters"].as_object()?;
            let pairs: Vec<(&str, usize)> = dcs
                .iter()
                .filter_map(|(dc, rf)| Some((dc.as_str(), rf.as_u64()? as usize)))
                .collect();
            Some(Replication::network_topology(pairs))
        }
        _ => None,
    }
}

/// The answer to a schema request from the ring's snapshot
/// (`GET /sim/ring?cluster=`: its members and keyspaces). Effective
/// ownership is the share of the ring whose replicas include each token
/// owner, as a float printed the shortest way (`fmt::to_string`).
pub fn answer_schema(query: &SchemaQuery, snapshot: &Value) -> Reply {
    let keyspaces = snapshot["keyspaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match query {
        SchemaQuery::Keyspaces { user_only } => {
            let mut names: Vec<&str> = keyspaces
                .iter()
                .filter(|k| !user_only || k["system"] != true)
                .filter_map(|k| k["name"].as_str())
                .collect();
            names.sort_unstable();
            Reply::ok(json!(names))
        }
        SchemaQuery::Ownership { keyspace } => {
            let Some(replication) = keyspaces
                .iter()
                .find(|k| k["name"] == keyspace.as_str())
                .and_then(|k| replication_of(&k["replication"]))
            else {
                return no_such_keyspace(keyspace);
            };
            let owners = natural_members(snapshot);
            let map = TokenMap::new(owners.iter().map(|(e, t, _)| (e.clone(), t.as_slice())));
            let owned = if map.is_empty() {
                Default::default()
            } else {
                map.ownership(Some(&replication))
            };
            let mut rows: Vec<(&str, f64)> = owners
                .iter()
                .map(|(e, _, a)| (a.as_str(), owned.get(&e.host_id).copied().unwrap_or(0.0)))
                .collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            Reply::ok(json!(
                rows.iter()
                    .map(|(a, share)| json!({"key": a, "value": (*share as f32).to_string()}))
                    .collect::<Vec<_>>()
            ))
        }
    }
}

/// How the cluster's membership changes: ScyllaDB 6.0 and later run them
/// through Raft (consistent topology changes, on for new clusters), with
/// their own refusals; 5.x through gossip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Gossip,
    Raft,
}

impl Topology {
    /// The topology of a release: 6.0 and later (the 2024.x and 2025.x
    /// enterprise numbering included) run Raft.
    pub fn of_release(release: &str) -> Self {
        let major = release
            .split(['.', '-'])
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(0);
        if major >= 6 {
            Topology::Raft
        } else {
            Topology::Gossip
        }
    }
}

/// What the node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `scylla_release_version`.
    pub release: String,
    /// When the process started (Unix milliseconds): its gossip generation
    /// (in seconds) and its uptime.
    pub started_unix_ms: u64,
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

/// ScyllaDB's `gms::application_state` numbers (the REST API answers the
/// enum index, not the name): the states a node gossips.
mod app_state {
    pub const STATUS: u32 = 0;
    pub const SCHEMA: u32 = 2;
    pub const DC: u32 = 3;
    pub const RACK: u32 = 4;
    pub const RELEASE_VERSION: u32 = 5;
    pub const INTERNAL_IP: u32 = 7;
    pub const RPC_ADDRESS: u32 = 8;
    pub const NET_VERSION: u32 = 11;
    pub const HOST_ID: u32 = 12;
    pub const TOKENS: u32 = 13;
    pub const RPC_READY: u32 = 17;
}

/// `GET /failure_detector/endpoints/` (api/failure_detector.cc,
/// `get_all_endpoint_states`): every endpoint this node's gossip holds,
/// with the generation and heartbeat it last heard, when it last updated
/// the state (epoch milliseconds), whether its failure detector has it
/// alive, and the application states by enum index. Sorted by address
/// (the real map has no order).
pub fn endpoint_states(view: &NodeView) -> Value {
    let mut endpoints: Vec<&EndpointView> = view.endpoints.iter().collect();
    endpoints.sort_by(|a, b| a.address.cmp(&b.address));
    let rows: Vec<Value> = endpoints
        .iter()
        .map(|e| {
            let g = &e.gossip;
            let state = |id: u32, version: i64, value: String| {
                json!({"application_state": id, "value": value, "version": version})
            };
            let mut states = vec![
                state(app_state::STATUS, g.status_version, g.status.value(None)),
                state(
                    app_state::SCHEMA,
                    14,
                    crate::fake_cassandra::gossipinfo::SCHEMA_VERSION.to_string(),
                ),
                state(app_state::DC, 9, e.dc.clone()),
                state(app_state::RACK, 10, e.rack.clone()),
                state(app_state::RELEASE_VERSION, 5, g.release.clone()),
                state(app_state::INTERNAL_IP, 7, e.address.clone()),
                state(app_state::RPC_ADDRESS, 3, e.address.clone()),
                state(app_state::NET_VERSION, 1, "0".to_string()),
                state(app_state::HOST_ID, 2, e.host_id.clone()),
            ];
            if !e.tokens.is_empty() {
                // `versioned_value::tokens`: every token, `;`-separated.
                states.push(state(
                    app_state::TOKENS,
                    g.status_version - 1,
                    sorted_tokens(&e.tokens)
                        .iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(";"),
                ));
            }
            states.push(state(
                app_state::RPC_READY,
                22,
                if g.rpc_ready { "1" } else { "0" }.to_string(),
            ));
            json!({
                "addrs": e.address,
                "generation": g.generation,
                "version": g.heartbeat,
                "update_time": g.updated_ms,
                "is_alive": e.up,
                "application_state": states,
            })
        })
        .collect();
    json!(rows)
}

fn sorted_tokens(tokens: &[String]) -> Vec<&String> {
    let mut list: Vec<&String> = tokens.iter().collect();
    list.sort_by_key(|t| t.parse::<i64>().unwrap_or_default());
    list
}

/// Where the node is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodeState<'a> {
    /// The API server is up; the storage service is not.
    Starting,
    /// Waiting for ring information before it joins (`JOINING`).
    Joining,
    /// In the ring, as its view shows it.
    Running(&'a NodeView),
}

/// The answer to a request before the node is in the ring: the API server
/// is up before the storage service has a host ID or gossip runs.
fn starting(mode: &str, method: &str, path: &str) -> Reply {
    match (method, path) {
        ("GET", "/storage_service/operation_mode") => Reply::ok(json!(mode)),
        ("GET", "/storage_service/is_starting") => Reply::ok(json!(mode == "STARTING")),
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
    "/failure_detector/endpoints/",
    "/failure_detector/simple_states",
    "/storage_service/nodes/joining",
    "/storage_service/nodes/leaving",
    "/storage_service/nodes/moving",
    "/storage_service/tokens",
    "/storage_service/tokens_endpoint",
    "/storage_service/load_map",
];

/// The answer to `method path?query` of a node in `state`.
pub fn step(
    identity: &Identity,
    now_unix_ms: u64,
    state: NodeState<'_>,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
) -> Step {
    let answer = |r: Reply| Step::Answer(r);
    match (method, path) {
        ("GET", "/system/uptime_ms") => {
            return answer(Reply::ok(json!(
                now_unix_ms.saturating_sub(identity.started_unix_ms)
            )));
        }
        // Its own generation as its gossip has it (the ring's); before
        // it joined gossip, its start.
        ("GET", "/storage_service/generation_number") => {
            let own = match state {
                NodeState::Running(view) => view
                    .endpoints
                    .iter()
                    .find(|e| e.host_id == view.host_id)
                    .map(|e| e.gossip.generation),
                _ => None,
            };
            return answer(Reply::ok(json!(
                own.unwrap_or((identity.started_unix_ms / 1000) as i64)
            )));
        }
        ("GET", "/storage_service/release_version") => {
            return answer(Reply::ok(json!(CASSANDRA_COMPAT)));
        }
        ("GET", "/storage_service/scylla_release_version") => {
            return answer(Reply::ok(json!(identity.release)));
        }
        _ => {}
    }
    let view = match state {
        NodeState::Starting => return answer(starting("STARTING", method, path)),
        NodeState::Joining => return answer(starting("JOINING", method, path)),
        NodeState::Running(view) => view,
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
        // Drain stops gossip and the CQL server; the process runs on.
        ("GET", "/storage_service/gossiping" | "/storage_service/native_transport") => {
            Reply::ok(json!(!matches!(view.mode.as_str(), "DRAINING" | "DRAINED")))
        }
        ("GET", "/storage_service/rpc_server") => Reply::ok(json!(false)),
        ("GET", "/storage_service/cluster_name") => Reply::ok(json!(view.cluster_name)),
        ("GET", "/storage_service/partitioner_name") => {
            Reply::ok(json!("org.apache.cassandra.dht.Murmur3Partitioner"))
        }
        ("GET", "/storage_service/is_initialized") => Reply::ok(json!(view.mode != "STARTING")),
        ("GET", "/storage_service/load") => Reply::ok(json!(view.load_bytes)),
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
        // gossiper::get_live_members counts the local node unless its own
        // gossip status is shutdown (drained).
        ("GET", "/gossiper/endpoint/live/") => {
            let shut_down = matches!(view.mode.as_str(), "DRAINING" | "DRAINED");
            Reply::ok(addresses(view, |e| {
                e.up && !(shut_down && e.host_id == view.host_id)
            }))
        }
        ("GET", "/gossiper/endpoint/down/") => Reply::ok(addresses(view, |e| !e.up)),
        ("GET", "/failure_detector/endpoints/") => Reply::ok(endpoint_states(view)),
        ("GET", "/failure_detector/simple_states") => {
            let mut states: Vec<&EndpointView> = view.endpoints.iter().collect();
            states.sort_by(|a, b| a.address.cmp(&b.address));
            Reply::ok(json!(
                states
                    .iter()
                    .map(|e| json!({"key": e.address, "value": if e.up { "UP" } else { "DOWN" }}))
                    .collect::<Vec<_>>()
            ))
        }
        ("GET", "/failure_detector/count/endpoint/up") => {
            Reply::ok(json!(view.endpoints.iter().filter(|e| e.up).count()))
        }
        ("GET", "/failure_detector/count/endpoint/down") => {
            Reply::ok(json!(view.endpoints.iter().filter(|e| !e.up).count()))
        }
        // `gossiper::get_current_generation_number` and
        // `get_current_heart_beat_version`: what this node's gossip holds
        // of the endpoint (an address or a host ID); one it does not know
        // is `get_endpoint_state`'s `std::out_of_range`.
        ("GET", p)
            if p.starts_with("/gossiper/generation_number/")
                || p.starts_with("/gossiper/heart_beat_version/") =>
        {
            let (_, addr) = p.trim_end_matches('/').rsplit_once('/').unwrap_or_default();
            match view
                .endpoints
                .iter()
                .find(|e| e.address == addr || e.host_id == addr)
            {
                Some(e) if p.starts_with("/gossiper/generation_number/") => {
                    Reply::ok(json!(e.gossip.generation))
                }
                Some(e) => Reply::ok(json!(e.gossip.heartbeat)),
                None => Reply::error(500, format!("std::out_of_range (ep={addr})")),
            }
        }
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
        ("GET", p) if p.starts_with("/storage_service/ownership/") => {
            return Step::Schema(SchemaQuery::Ownership {
                keyspace: p["/storage_service/ownership/".len()..].to_string(),
            });
        }
        ("GET", "/storage_service/keyspaces") => {
            return Step::Schema(SchemaQuery::Keyspaces {
                user_only: query.get("type").is_some_and(|t| t == "user"),
            });
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

/// The ring's token owners in a snapshot: endpoint, tokens, address.
fn natural_members(snapshot: &Value) -> Vec<(Endpoint, Vec<Token>, String)> {
    snapshot["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            matches!(
                n["state"].as_str(),
                Some("normal" | "leaving" | "hibernating")
            )
        })
        .map(|n| {
            let s = |k: &str| n[k].as_str().unwrap_or_default().to_string();
            let tokens = n["tokens"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .collect();
            (
                Endpoint {
                    host_id: s("host_id"),
                    dc: s("dc"),
                    rack: s("rack"),
                },
                tokens,
                s("address"),
            )
        })
        .collect()
}

/// Decommission with repair-based node operations (the default of
/// `allowed_repair_based_node_ops` in 5.x) fails when a range the leaving
/// node replicates would have no replica left in its datacenter: the last
/// node of a datacenter where a keyspace has a replication factor
/// (repair/row_level.cc `decommission_with_repair`). Scylla finds it once
/// the decommission has begun and aborts it (the node goes back to
/// NORMAL); the fake refuses before it begins, with the same words. The
/// first such keyspace by name, and the first range, `(-inf, <lowest
/// token>]`.
pub fn zero_replica_refusal(snapshot: &Value, host_id: &str) -> Option<String> {
    let members = natural_members(snapshot);
    let (me, _, _) = members.iter().find(|(e, _, _)| e.host_id == host_id)?;
    if members
        .iter()
        .any(|(e, _, _)| e.host_id != host_id && e.dc == me.dc)
    {
        return None;
    }
    let mut keyspaces: Vec<(&str, Replication)> = snapshot["keyspaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| Some((k["name"].as_str()?, replication_of(&k["replication"])?)))
        .collect();
    keyspaces.sort_by(|a, b| a.0.cmp(b.0));
    let (keyspace, replication) = keyspaces
        .into_iter()
        .find(|(_, r)| matches!(r, Replication::NetworkTopology { .. }) && r.rf_in(&me.dc) > 0)?;
    let map = TokenMap::new(members.iter().map(|(e, t, _)| (e.clone(), t.as_slice())));
    let lowest = members.iter().flat_map(|(_, t, _)| t.iter()).min()?;
    let address_of = |h: &str| {
        members
            .iter()
            .find(|(e, _, _)| e.host_id == h)
            .map_or(String::new(), |(_, _, a)| a.clone())
    };
    let current: Vec<String> = map
        .replicas(&replication, *lowest)
        .iter()
        .map(|h| address_of(h))
        .collect();
    Some(format!(
        "decommission_with_repair: keyspace={keyspace}, range=(-inf, {lowest}], current_replica_endpoints={{{}}}, new_replica_endpoints={{}}, zero replica after the removal",
        current.join(", ")
    ))
}

/// Scylla's words for a refusal of the ring model, which speaks Cassandra
/// 3.x's: most of them Scylla's gossip topology kept as they were; these
/// it rewrote (service/storage_service.cc, 5.x): no `cassandra.` system
/// properties, scylla.yaml options instead. Raft topology (6.0+) words
/// the decommission refusals of its own checks differently.
pub fn scylla_words(model: &str, topology: Topology) -> String {
    if topology == Topology::Raft {
        // node_ops/task_manager_module.cc raft_decommission_task_impl::run,
        // typo included.
        if model.starts_with("no other normal nodes in the ring") {
            return "Cannot decomission last node in the cluster".to_string();
        }
        if model.starts_with("local node is not a member of the token ring yet") {
            return "local node is not in the normal state (current state: bootstrapping)"
                .to_string();
        }
    }
    if let Some(rest) = model.strip_prefix("A node with address ")
        && let Some((address, _)) = rest.split_once(" already exists")
    {
        return format!(
            "A node with address {address} already exists, cancelling join. Use replace_address if you want to replace this node."
        );
    }
    if model.starts_with("Replacing a node without bootstrapping risks") {
        // Scylla has no allow_unsafe_replace: a replace needs auto_bootstrap.
        return "Trying to replace_address with auto_bootstrap disabled will not work, check your configuration".to_string();
    }
    if model.starts_with("This node was decommissioned and will not rejoin the ring") {
        // Two literals joined without a space in the source.
        return "This node was decommissioned and will not rejoin the ring unless override_decommission=true has been set,or all existing data is removed and the node is bootstrapped again".to_string();
    }
    model.trim_end().to_string()
}

/// The reply to a ring operation: `json_void` when it completed, else
/// Scylla's `std::runtime_error` ([`scylla_words`]).
pub fn reply_of_call(outcome: Result<(), String>, topology: Topology) -> Reply {
    match outcome {
        Ok(()) => Reply::void(),
        Err(message) => Reply::runtime_error(&scylla_words(&message, topology)),
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

    fn identity() -> Identity {
        Identity {
            release: "5.4.9".into(),
            started_unix_ms: 0,
        }
    }

    fn state(view: Option<&NodeView>) -> NodeState<'_> {
        view.map_or(NodeState::Starting, NodeState::Running)
    }

    fn get(view: Option<&NodeView>, path: &str) -> Reply {
        match step(&identity(), 0, state(view), "GET", path, &BTreeMap::new()) {
            Step::Answer(r) => r,
            other => panic!("not an answer: {other:?}"),
        }
    }

    #[test]
    fn the_failure_detector_shows_a_restarted_peer_down_with_its_old_generation_until_gossip_tells()
    {
        let mut ring = Ring::new(Options::default());
        let a = ring.start(&scylla("10.0.0.1", "B1", "/a")).expect("a");
        let mut b_config = scylla("10.0.0.2", "B1", "/b");
        b_config.seeds.push("10.0.0.2".into());
        let b = ring.start(&b_config).expect("b");
        let _ = ring.advance(10_000);
        let old = ring.generation(&b.host_id).expect("b's generation");
        ring.kill(&b.host_id).expect("kill");
        ring.start(&b_config).expect("b restarts");
        let new = ring.generation(&b.host_id).expect("b's generation");
        assert!(new > old);

        let view = node_view(&ring, &a.host_id).expect("a view");
        let v = Some(&view);
        let body = get(v, "/failure_detector/endpoints/").body.expect("a body");
        let rows = body.as_array().expect("an array");
        assert_eq!(rows.len(), 2);
        let b_row = &rows[1];
        assert_eq!(b_row["addrs"], json!("10.0.0.2"));
        assert_eq!(b_row["is_alive"], json!(false));
        assert_eq!(b_row["generation"], json!(old), "the old one, still");
        assert!(b_row["version"].as_i64().is_some_and(|v| v > 0));
        assert!(
            b_row["update_time"]
                .as_i64()
                .is_some_and(|t| t > 1_000_000_000_000)
        );
        let states = b_row["application_state"].as_array().expect("states");
        let of = |id: u32| {
            states
                .iter()
                .find(|s| s["application_state"] == json!(id))
                .map(|s| s["value"].as_str().unwrap_or_default().to_string())
        };
        assert!(
            of(0).is_some_and(|s| s.starts_with("NORMAL,")),
            "{states:?}"
        );
        assert_eq!(of(12), Some(b.host_id.clone()));
        assert_eq!(of(5), Some("3.0".to_string()));
        assert_eq!(of(3), Some("DC1".to_string()));
        assert_eq!(of(13).map(|t| t.split(';').count()), Some(16));
        assert!(states.iter().all(|s| s["version"].as_i64().is_some()));
        assert_eq!(
            get(v, "/gossiper/generation_number/10.0.0.2").body,
            Some(json!(old))
        );
        assert_eq!(
            get(v, "/gossiper/endpoint/down/").body,
            Some(json!(["10.0.0.2"]))
        );
        assert_eq!(
            get(v, "/failure_detector/count/endpoint/up").body,
            Some(json!(1))
        );
        let unknown = get(v, "/gossiper/generation_number/10.0.0.9");
        assert_eq!(unknown.status, 500);
        assert_eq!(
            unknown.body.expect("a body")["message"],
            json!("std::out_of_range (ep=10.0.0.9)")
        );

        // Once gossip told it: alive, the new generation, by address or host ID.
        let _ = ring.advance(ring.options().timing.gossip_lag_ms);
        let view = node_view(&ring, &a.host_id).expect("a view");
        let v = Some(&view);
        let body = get(v, "/failure_detector/endpoints/").body.expect("a body");
        assert_eq!(body[1]["is_alive"], json!(true));
        assert_eq!(body[1]["generation"], json!(new));
        assert_eq!(
            get(v, &format!("/gossiper/generation_number/{}", b.host_id)).body,
            Some(json!(new))
        );
        assert_eq!(
            get(v, "/gossiper/endpoint/live/").body,
            Some(json!(["10.0.0.1", "10.0.0.2"]))
        );
        assert_eq!(
            get(v, "/failure_detector/simple_states").body,
            Some(json!([{"key": "10.0.0.1", "value": "UP"}, {"key": "10.0.0.2", "value": "UP"}]))
        );
        // The node's own generation is its gossip's.
        assert_eq!(
            get(v, "/storage_service/generation_number").body,
            Some(json!(ring.generation(&a.host_id).expect("a's")))
        );
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
        let rack = |host: &str| {
            let q = BTreeMap::from([("host".to_string(), host.to_string())]);
            match step(&identity(), 0, state(v), "GET", "/snitch/rack", &q) {
                Step::Answer(r) => r.body,
                _ => None,
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
        assert_eq!(get(v, "/storage_service/gossiping").body, Some(json!(true)));
        assert_eq!(
            get(v, "/storage_service/cluster_name").body,
            Some(json!("c"))
        );
        let q = BTreeMap::new();
        let Step::Answer(up) = step(
            &identity(),
            90_500,
            state(v),
            "GET",
            "/system/uptime_ms",
            &q,
        ) else {
            panic!("an answer");
        };
        assert_eq!(up.body, Some(json!(90_500)));
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
    fn effective_ownership_follows_the_keyspaces_replication() {
        let mut ring = Ring::new(Options::default());
        let a = ring.start(&scylla("10.0.0.1", "B1", "/a")).expect("a");
        ring.start(&scylla("10.0.0.2", "B1", "/b")).expect("b");
        let _ = ring.advance(10_000);
        ring.create_keyspace("ks", Replication::simple(2))
            .expect("a keyspace");
        let snapshot = serde_json::to_value(&ring).expect("a snapshot");
        let view = node_view(&ring, &a.host_id).expect("a view");
        let q = BTreeMap::new();
        let Step::Schema(query) = step(
            &identity(),
            0,
            NodeState::Running(&view),
            "GET",
            "/storage_service/ownership/ks",
            &q,
        ) else {
            panic!("ownership needs the schema");
        };
        let owns = answer_schema(&query, &snapshot).body.expect("a body");
        assert_eq!(
            owns,
            json!([{"key": "10.0.0.1", "value": "1"}, {"key": "10.0.0.2", "value": "1"}]),
            "RF 2 on two nodes: each holds everything"
        );
        let missing = answer_schema(
            &SchemaQuery::Ownership {
                keyspace: "nope".into(),
            },
            &snapshot,
        );
        assert_eq!(missing, Reply::error(400, "Can't find a keyspace nope"));
        let user = answer_schema(&SchemaQuery::Keyspaces { user_only: true }, &snapshot);
        assert_eq!(user.body, Some(json!(["ks"])));
    }

    #[test]
    fn the_last_node_of_a_datacenter_with_replicas_there_cannot_leave() {
        let mut ring = Ring::new(Options::default());
        let mut dc2 = scylla("10.0.0.3", "B1", "/c");
        dc2.dc = "DC2".into();
        let a = ring.start(&scylla("10.0.0.1", "B1", "/a")).expect("a");
        ring.start(&scylla("10.0.0.2", "B1", "/b")).expect("b");
        let _ = ring.advance(10_000);
        let c = ring.start(&dc2).expect("c");
        let _ = ring.advance(10_000);
        ring.create_keyspace("only_dc1", Replication::network_topology([("DC1", 2)]))
            .expect("a keyspace");
        let snapshot = serde_json::to_value(&ring).expect("a snapshot");
        assert_eq!(
            zero_replica_refusal(&snapshot, &c.host_id),
            None,
            "no replicas in DC2"
        );
        assert_eq!(
            zero_replica_refusal(&snapshot, &a.host_id),
            None,
            "DC1 keeps b"
        );
        ring.create_keyspace(
            "ks",
            Replication::network_topology([("DC1", 1), ("DC2", 1)]),
        )
        .expect("a keyspace");
        let snapshot = serde_json::to_value(&ring).expect("a snapshot");
        let refusal = zero_replica_refusal(&snapshot, &c.host_id).expect("refused");
        assert!(
            refusal.starts_with("decommission_with_repair: keyspace=ks, range=(-inf, -"),
            "{refusal}"
        );
        assert!(refusal.contains("10.0.0.3"), "{refusal}");
        assert!(
            refusal.ends_with(", new_replica_endpoints={}, zero replica after the removal"),
            "{refusal}"
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
        let joining = step(
            &identity(),
            0,
            NodeState::Joining,
            "GET",
            "/storage_service/operation_mode",
            &BTreeMap::new(),
        );
        assert_eq!(joining, Step::Answer(Reply::ok(json!("JOINING"))));
        assert_eq!(reply_of_call(Ok(()), Topology::Gossip), Reply::void());
        let last = crate::ring::RingError::NoOtherNormalNodes.to_string();
        assert_eq!(
            scylla_words(&last, Topology::Gossip),
            "no other normal nodes in the ring; decommission would be pointless"
        );
        assert_eq!(
            scylla_words(&last, Topology::Raft),
            "Cannot decomission last node in the cluster"
        );
        assert_eq!(Topology::of_release("5.4.9"), Topology::Gossip);
        assert_eq!(Topology::of_release("6.2"), Topology::Raft);
        assert_eq!(Topology::of_release("2025.1.0"), Topology::Raft);
        let collision = crate::ring::RingError::EndpointCollision {
            address: "10.0.0.3".into(),
        };
        assert_eq!(
            scylla_words(&collision.to_string(), Topology::Gossip),
            "A node with address 10.0.0.3 already exists, cancelling join. Use replace_address if you want to replace this node."
        );
        assert_eq!(
            scylla_words(
                &crate::ring::RingError::UnsafeReplace.to_string(),
                Topology::Raft
            ),
            "Trying to replace_address with auto_bootstrap disabled will not work, check your configuration"
        );
        assert!(
            scylla_words(
                &crate::ring::RingError::Decommissioned.to_string(),
                Topology::Gossip
            )
            .contains("unless override_decommission=true has been set,or all")
        );
        assert_eq!(
            reply_of_call(
                Err("Cannot replace a live node... ".into()),
                Topology::Gossip
            )
            .body,
            Some(
                json!({"message": "std::runtime_error (Cannot replace a live node...)", "code": 500})
            )
        );
    }
}
