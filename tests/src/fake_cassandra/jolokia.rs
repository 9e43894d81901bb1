//! The fake node's Jolokia: requests mapped to answers as jolokia-core
//! 1.7.1 gives them for Cassandra's StorageService and EndpointSnitchInfo
//! MBeans, per Cassandra line (the shapes are recorded in
//! [`crate::jolokia_contract`]). Pure: a request and the node's
//! [`NodeView`] in, a JSON answer out; the operations that change the ring
//! (decommission, drain, removeNode) come out as a [`RingCall`] for the I/O
//! layer, whose outcome [`answer_call`] turns into the answer.

use serde_json::{Map, Value, json};

use super::view::NodeView;
use crate::ring::{RingError, Version};

pub const STORAGE_SERVICE: &str = "org.apache.cassandra.db:type=StorageService";
pub const ENDPOINT_SNITCH_INFO: &str = "org.apache.cassandra.db:type=EndpointSnitchInfo";
pub const FAILURE_DETECTOR: &str = "org.apache.cassandra.net:type=FailureDetector";
pub const GOSSIPER: &str = "org.apache.cassandra.net:type=Gossiper";
/// `MessagingServiceMBean`: what `nodetool reloadssl` calls
/// (`NodeProbe.reloadSslCerts`, facts c).
pub const MESSAGING_SERVICE: &str = "org.apache.cassandra.net:type=MessagingService";
/// The MBeans the fake registers.
const MBEANS: [&str; 5] = [
    STORAGE_SERVICE,
    ENDPOINT_SNITCH_INFO,
    FAILURE_DETECTOR,
    GOSSIPER,
    MESSAGING_SERVICE,
];
pub const AGENT_VERSION: &str = "1.7.1";
pub const PROTOCOL_VERSION: &str = "7.2";
/// Jolokia 1.x answers with this content type.
pub const CONTENT_TYPE: &str = "text/plain; charset=utf-8";
const SNITCH: &str = "org.apache.cassandra.locator.GossipingPropertyFileSnitch";

/// What the node runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `ReleaseVersion` (the image tag, e.g. 4.1.8).
    pub release: String,
    pub version: Version,
    /// `storage_port`, for the `WithPort` endpoints.
    pub storage_port: u16,
}

impl Identity {
    pub fn new(release: &str, storage_port: u16) -> Option<Self> {
        Some(Identity {
            release: release.to_string(),
            version: Version::parse(release)?,
            storage_port,
        })
    }

    fn v4(&self) -> bool {
        self.version >= Version::V4_0
    }

    fn v5(&self) -> bool {
        self.version >= Version::V5_0
    }
}

/// A Java exception as Jolokia reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaError {
    pub status: u16,
    pub class: String,
    pub message: String,
}

impl JavaError {
    pub fn new(status: u16, class: &str, message: impl Into<String>) -> Self {
        JavaError {
            status,
            class: class.to_string(),
            message: message.into(),
        }
    }

    fn illegal_argument(message: impl Into<String>) -> Self {
        JavaError::new(400, "java.lang.IllegalArgumentException", message)
    }

    fn no_attribute(name: &str) -> Self {
        JavaError::new(
            404,
            "javax.management.AttributeNotFoundException",
            format!("No such attribute: {name}"),
        )
    }

    /// What Jolokia answers for an MBean that is not registered (yet).
    pub fn no_instance(mbean: &str) -> Self {
        JavaError::new(404, "javax.management.InstanceNotFoundException", mbean)
    }

    /// An exception thrown by the MBean method (500).
    pub fn thrown(class: &str, message: impl Into<String>) -> Self {
        JavaError::new(500, class, message)
    }
}

/// The Cassandra exception class a ring refusal is thrown as.
pub fn exception_class(error: &RingError) -> &'static str {
    match error {
        RingError::StillDecommissioning => "java.lang.IllegalStateException",
        RingError::NotAMember
        | RingError::NoOtherNormalNodes
        | RingError::WrongMode { .. }
        | RingError::NotEnoughNodes { .. }
        | RingError::HostIdNotFound
        | RingError::RemoveSelf
        | RingError::RemoveLive { .. }
        | RingError::RemoveNotMember => "java.lang.UnsupportedOperationException",
        RingError::RepairOption { .. } => "java.lang.IllegalArgumentException",
        RingError::TokenAllocation { .. } => {
            "org.apache.cassandra.exceptions.ConfigurationException"
        }
        _ => "java.lang.RuntimeException",
    }
}

/// An operation the ring model has to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingCall {
    /// Blocks until the node left the ring (or the attempt failed).
    Decommission {
        force: bool,
    },
    Drain,
    RemoveNode {
        host_id: String,
    },
    ForceRemoveCompletion,
    /// `forceKeyspaceCleanup`: answers the status code (0 SUCCESSFUL, 1
    /// ABORTED).
    Cleanup {
        keyspace: String,
    },
    /// `repairAsync`: answers the command number (0: nothing to repair).
    /// The options as `RepairOption.parse` reads them (every repair of
    /// the ring model is a full one of the node's ranges; the node logs
    /// and keeps them).
    Repair {
        keyspace: String,
        options: std::collections::BTreeMap<String, String>,
    },
    /// `getParentRepairStatus` (4.0+): the status of a repair command.
    RepairStatus {
        cmd: i64,
    },
    /// `upgradeSSTables`: rewrites the node's old sstables (its own files,
    /// no ring change); answers the status code (0 SUCCESSFUL).
    UpgradeSstables {
        keyspace: String,
        exclude_current_version: bool,
    },
    /// `forceTerminateAllRepairSessions`: the node's running repair
    /// sessions fail.
    TerminateRepairs,
    /// `Gossiper.reloadSeeds` (4.0+): reads the seeds of cassandra.yaml
    /// again (the node's own configuration, no ring change); answers the
    /// seeds it has then.
    ReloadSeeds,
    /// `MessagingService.reloadSslCertificates` (4.0+,
    /// `SSLFactory.forceCheckCertFiles`): the node reads its keystores and
    /// truststores again (its own files, no ring change); answers null,
    /// a failed reload too (it is logged).
    ReloadSslCertificates,
}

/// What a request needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The answer.
    Answer(Value),
    /// Carry out the call, then [`answer_call`] with this echo.
    Call { call: RingCall, echo: Value },
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A success answer.
pub fn success(echo: &Value, value: Value) -> Value {
    json!({"request": echo, "value": value, "timestamp": now_secs(), "status": 200})
}

/// An error answer (`request` only when there is one to echo).
pub fn failure(echo: Option<&Value>, error: &JavaError) -> Value {
    let mut out = Map::new();
    if let Some(echo) = echo {
        out.insert("request".into(), echo.clone());
    }
    // An empty message stands for Java's null: `Throwable.toString()` and
    // Jolokia's `error` are then the class name alone.
    let (thrown, error_text) = if error.message.is_empty() {
        (error.class.clone(), error.class.clone())
    } else {
        (
            format!("{}: {}", error.class, error.message),
            format!("{} : {}", error.class, error.message),
        )
    };
    out.insert(
        "stacktrace".into(),
        json!(format!(
            "{thrown}\n\tat org.apache.cassandra.service.StorageService (fake-cassandra)\n"
        )),
    );
    out.insert("error_type".into(), json!(error.class));
    out.insert("error".into(), json!(error_text));
    out.insert("status".into(), json!(error.status));
    Value::Object(out)
}

/// The answer once a [`RingCall`] is done (void operations return null).
pub fn answer_call(echo: &Value, outcome: Result<Value, JavaError>) -> Value {
    match outcome {
        Ok(v) => success(echo, v),
        Err(e) => failure(Some(echo), &e),
    }
}

/// The answer to a POST body: one request or a bulk array.
pub fn parse_body(body: &[u8]) -> Result<Value, Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|v| v.is_object() || v.is_array())
        .ok_or_else(|| {
            failure(
                None,
                &JavaError::illegal_argument(
                    "Invalid JSON request java.io.InputStreamReader@6d06d69c",
                ),
            )
        })
}

/// What Jolokia 1.x echoes of a request: its known keys, without an empty
/// argument list.
fn echo_of(request: &Value) -> Value {
    let mut echo = Map::new();
    if let Some(o) = request.as_object() {
        for key in [
            "type",
            "mbean",
            "attribute",
            "path",
            "operation",
            "arguments",
        ] {
            if let Some(v) = o.get(key) {
                if key == "arguments" && v.as_array().is_some_and(Vec::is_empty) {
                    continue;
                }
                echo.insert(key.to_string(), v.clone());
            }
        }
    }
    Value::Object(echo)
}

/// Maps one request (an object of a POST) to its answer or a ring call.
pub fn step(id: &Identity, view: &NodeView, request: &Value) -> Step {
    let echo = echo_of(request);
    let kind = request.get("type").and_then(Value::as_str).unwrap_or("");
    let result = match kind.to_ascii_lowercase().as_str() {
        "read" => read(id, view, request),
        "exec" => match exec(id, view, request) {
            Ok(Exec::Value(v)) => Ok(v),
            Ok(Exec::Call(call)) => return Step::Call { call, echo },
            Err(e) => Err(e),
        },
        "search" => Ok(search(
            request.get("mbean").and_then(Value::as_str).unwrap_or(""),
        )),
        "version" => Ok(version_value()),
        "" => Err(JavaError::illegal_argument("No type given")),
        other => Err(JavaError::illegal_argument(format!(
            "Unknown request type {other}"
        ))),
    };
    Step::Answer(match result {
        Ok(v) => success(&echo, v),
        Err(e) => failure(Some(&echo), &e),
    })
}

fn version_value() -> Value {
    json!({
        "agent": AGENT_VERSION,
        "protocol": PROTOCOL_VERSION,
        "config": {
            "agentContext": "/jolokia",
            "agentType": "jvm",
            "debug": "false",
            "debugMaxEntries": "100",
            "discoveryEnabled": "false",
            "historyMaxEntries": "10",
            "maxCollectionSize": "0",
            "maxDepth": "15",
            "maxObjects": "0",
            "serializeException": "false"
        },
        "info": {}
    })
}

// ---- MBean names ----

/// An ObjectName split: domain, sorted key properties, and whether the
/// property list ends in the `*` wildcard.
type NameParts<'a> = (&'a str, Vec<(&'a str, &'a str)>, bool);

/// `domain:key=value,...`: the domain and the sorted properties.
fn split_name(name: &str) -> Option<NameParts<'_>> {
    let (domain, props) = name.split_once(':')?;
    let mut wildcard = false;
    let mut out = Vec::new();
    for p in props.split(',') {
        if p == "*" {
            wildcard = true;
            continue;
        }
        out.push(p.split_once('=')?);
    }
    out.sort();
    Some((domain, out, wildcard))
}

fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

fn matches(pattern: &str, name: &str) -> bool {
    let (Some((pd, pp, wild)), Some((nd, np, _))) = (split_name(pattern), split_name(name)) else {
        return false;
    };
    if !glob(pd, nd) {
        return false;
    }
    if wild {
        pp.iter()
            .all(|(k, v)| np.iter().any(|(nk, nv)| nk == k && glob(v, nv)))
    } else {
        pp.len() == np.len()
            && pp
                .iter()
                .zip(np.iter())
                .all(|((k, v), (nk, nv))| k == nk && glob(v, nv))
    }
}

fn search(pattern: &str) -> Value {
    let names: Vec<&str> = MBEANS.into_iter().filter(|n| matches(pattern, n)).collect();
    json!(names)
}

/// The registered MBean a name designates (its canonical form).
fn mbean_of(name: &str) -> Option<&'static str> {
    MBEANS
        .into_iter()
        .find(|n| split_name(n).map(|(d, p, _)| (d, p)) == split_name(name).map(|(d, p, _)| (d, p)))
}

// ---- attributes ----

/// StorageService attributes per line (the members the sidecar and
/// nodetool use; JMX-FACTS §2.1).
fn storage_attributes(id: &Identity) -> Vec<&'static str> {
    let mut names = vec![
        "OperationMode",
        "Initialized",
        "Joined",
        "Starting",
        "Drained",
        "Draining",
        "DrainProgress",
        "BootstrapMode",
        "LiveNodes",
        "UnreachableNodes",
        "JoiningNodes",
        "LeavingNodes",
        "MovingNodes",
        "EndpointToHostId",
        "HostIdToEndpoint",
        "Tokens",
        "LocalHostId",
        "ReleaseVersion",
        "SchemaVersion",
        "LoadString",
        "LoadMap",
        "RemovalStatus",
        "ClusterName",
        "GossipRunning",
        "NativeTransportRunning",
        "Ownership",
        // `Schema.distributedKeyspaces().names()`: what `nodetool repair`
        // repairs when given no keyspace (3.11, 4.x, 5.0).
        "NonLocalStrategyKeyspaces",
        // `Schema.getKeyspaces()`: every keyspace, the local system ones
        // too (what upgradesstables may have files of).
        "Keyspaces",
        // `getTokenToEndpointMap`: every normal and bootstrapping token of
        // the ring, sorted, to the owner's address (3.11, 4.x, 5.0).
        "TokenToEndpointMap",
        "PartitionerName",
    ];
    if !id.v5() {
        names.push("HostIdMap");
    }
    if id.v4() {
        names.extend([
            "LiveNodesWithPort",
            "UnreachableNodesWithPort",
            "JoiningNodesWithPort",
            "LeavingNodesWithPort",
            "MovingNodesWithPort",
            "EndpointWithPortToHostId",
            "HostIdToEndpointWithPort",
            "LoadMapWithPort",
            "RemovalStatusWithPort",
            "OwnershipWithPort",
        ]);
    }
    if id.v5() {
        names.extend([
            "UncompressedLoadString",
            "DecommissionFailed",
            "Decommissioning",
            "BootstrapState",
        ]);
    }
    names
}

const SNITCH_ATTRIBUTES: [&str; 3] = ["Datacenter", "Rack", "SnitchName"];

/// Java's `Float.toString` for a ring share.
fn java_float(v: f64) -> Value {
    let mut text = format!("{}", v as f32);
    if !text.contains(['.', 'e', 'E']) {
        text.push_str(".0");
    }
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

fn storage_attribute(id: &Identity, view: &NodeView, name: &str) -> Value {
    let port = id.storage_port;
    // `LiveNodesWithPort`, `EndpointWithPortToHostId`: the same data with
    // ip:port endpoints.
    let with_port = name.contains("WithPort");
    let base = name.replace("WithPort", "");
    let base = base.as_str();
    let ep = |address: &str| {
        if with_port {
            format!("{address}:{port}")
        } else {
            address.to_string()
        }
    };
    let list = |keep: &dyn Fn(&super::view::EndpointView) -> bool| {
        let mut out: Vec<String> = view
            .endpoints
            .iter()
            .filter(|e| keep(e))
            .map(|e| ep(&e.address))
            .collect();
        out.sort();
        json!(out)
    };
    let drained = view.mode == "DRAINED";
    match (base, name) {
        ("LiveNodes", _) => list(&|e| e.up),
        ("UnreachableNodes", _) => list(&|e| !e.up),
        ("JoiningNodes", _) => list(&|e| e.state == 'J'),
        ("LeavingNodes", _) => list(&|e| e.state == 'L'),
        ("MovingNodes", _) => list(&|e| e.state == 'M'),
        ("EndpointToHostId" | "HostIdMap", _) => {
            let map: Map<String, Value> = view
                .endpoints
                .iter()
                .map(|e| (ep(&e.address), json!(e.host_id)))
                .collect();
            Value::Object(map)
        }
        ("HostIdToEndpoint", _) => Value::Object(
            view.endpoints
                .iter()
                .map(|e| (e.host_id.clone(), json!(ep(&e.address))))
                .collect(),
        ),
        ("LoadMap", _) => Value::Object(
            view.endpoints
                .iter()
                .filter(|e| e.up || e.host_id == view.host_id)
                .map(|e| {
                    (
                        ep(&e.address),
                        json!(crate::ring::stringify_size(e.load_bytes)),
                    )
                })
                .collect(),
        ),
        ("Ownership", _) => Value::Object(
            view.endpoints
                .iter()
                .map(|e| {
                    // 3.11's Map<InetAddress, Float>: InetAddress.toString().
                    let key = if with_port {
                        ep(&e.address)
                    } else {
                        format!("/{}", e.address)
                    };
                    (key, java_float(e.ownership))
                })
                .collect(),
        ),
        ("RemovalStatus", _) => json!("No token removals in process."),
        (_, "OperationMode") => json!(view.mode),
        (_, "Initialized") => json!(true),
        (_, "Joined") => json!(view.joined),
        (_, "Starting") => json!(view.mode == "STARTING"),
        (_, "Drained") => json!(drained),
        (_, "Draining") => json!(view.mode == "DRAINING"),
        (_, "DrainProgress") => json!(if drained {
            "Drained 12/12 ColumnFamilies"
        } else {
            "Drained 0/12 ColumnFamilies"
        }),
        (_, "BootstrapMode") => json!(view.mode == "JOINING"),
        (_, "Tokens") => json!(view.tokens),
        (_, "LocalHostId") => json!(view.host_id),
        (_, "ReleaseVersion") => json!(id.release),
        (_, "SchemaVersion") => json!("59adb24e-f3cd-3e02-97f0-5b395827453f"),
        (_, "LoadString" | "UncompressedLoadString") => json!(view.load_string()),
        (_, "ClusterName") => json!(view.cluster_name),
        (_, "GossipRunning") => json!(!drained && view.mode != "DECOMMISSIONED"),
        (_, "NativeTransportRunning") => json!(view.mode == "NORMAL"),
        (_, "DecommissionFailed") => json!(view.decommission_failed),
        (_, "Decommissioning") => json!(view.decommissioning),
        (_, "BootstrapState") => json!(view.bootstrap_state),
        (_, "NonLocalStrategyKeyspaces") => json!(view.keyspaces),
        (_, "Keyspaces") => {
            let mut all = vec!["system".to_string(), "system_schema".to_string()];
            all.extend(view.keyspaces.iter().cloned());
            json!(all)
        }
        (_, "TokenToEndpointMap") => {
            let mut tokens: Vec<(i64, String)> = view
                .endpoints
                .iter()
                .filter(|e| matches!(e.state, 'N' | 'L' | 'J' | 'M'))
                .flat_map(|e| {
                    e.tokens
                        .iter()
                        .filter_map(|t| Some((t.parse::<i64>().ok()?, e.address.clone())))
                })
                .collect();
            tokens.sort();
            Value::Object(
                tokens
                    .into_iter()
                    .map(|(t, a)| (t.to_string(), json!(a)))
                    .collect(),
            )
        }
        (_, "PartitionerName") => json!("org.apache.cassandra.dht.Murmur3Partitioner"),
        _ => Value::Null,
    }
}

fn snitch_attribute(view: &NodeView, name: &str) -> Value {
    match name {
        "Datacenter" => json!(view.dc),
        "Rack" => json!(view.rack),
        _ => json!(SNITCH),
    }
}

/// FailureDetector attributes per line (JMX-FACTS §4).
fn detector_attributes(id: &Identity) -> Vec<&'static str> {
    let mut names = vec![
        "SimpleStates",
        "UpEndpointCount",
        "DownEndpointCount",
        "AllEndpointStates",
    ];
    if id.v4() {
        names.push("SimpleStatesWithPort");
        names.push("AllEndpointStatesWithPort");
    }
    if id.version >= Version::V4_1 {
        names.push("AllEndpointStatesWithPortAndResolveIp");
    }
    names
}

/// `SimpleStates` keys are `InetAddress.toString()` (`/10.0.0.5`), the
/// `WithPort` ones `/10.0.0.5:7000`; every member follows this node's
/// lagging failure detector (`EndpointState.isAlive`), as do the counts.
fn detector_attribute(id: &Identity, view: &NodeView, name: &str) -> Value {
    use super::gossipinfo::{KeyForm, all_endpoint_states};
    let count = |up: bool| view.endpoints.iter().filter(|e| e.up == up).count();
    let dump = |form| json!(all_endpoint_states(id.version, id.storage_port, view, form));
    match name {
        "UpEndpointCount" => json!(count(true)),
        "DownEndpointCount" => json!(count(false)),
        "AllEndpointStates" => dump(KeyForm::Address),
        "AllEndpointStatesWithPort" => dump(KeyForm::WithPort),
        "AllEndpointStatesWithPortAndResolveIp" => dump(KeyForm::WithPortResolved),
        _ => Value::Object(
            view.endpoints
                .iter()
                .map(|e| {
                    let key = if name.ends_with("WithPort") {
                        format!("/{}:{}", e.address, id.storage_port)
                    } else {
                        format!("/{}", e.address)
                    };
                    (key, json!(if e.up { "UP" } else { "DOWN" }))
                })
                .collect(),
        ),
    }
}

/// The attributes of an MBean as a request names it (none when it is not
/// registered): what a read without `attribute` reads.
pub fn mbean_attributes(id: &Identity, name: &str) -> Vec<&'static str> {
    mbean_of(name)
        .map(|mbean| attribute_names(id, mbean))
        .unwrap_or_default()
}

fn attribute_names(id: &Identity, mbean: &str) -> Vec<&'static str> {
    match mbean {
        STORAGE_SERVICE => storage_attributes(id),
        FAILURE_DETECTOR => detector_attributes(id),
        // Its attributes (Seeds, ReleaseVersionsWithPort) are not read;
        // nor MessagingService's (message counts, timeouts).
        GOSSIPER | MESSAGING_SERVICE => Vec::new(),
        _ => SNITCH_ATTRIBUTES.to_vec(),
    }
}

fn attribute(id: &Identity, view: &NodeView, mbean: &str, name: &str) -> Result<Value, JavaError> {
    if !attribute_names(id, mbean).contains(&name) {
        return Err(JavaError::no_attribute(name));
    }
    Ok(match mbean {
        STORAGE_SERVICE => storage_attribute(id, view, name),
        FAILURE_DETECTOR => detector_attribute(id, view, name),
        _ => snitch_attribute(view, name),
    })
}

fn apply_path(value: Value, path: Option<&str>) -> Result<Value, JavaError> {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Ok(value);
    };
    let mut current = value;
    for part in path.split('/') {
        current = match current {
            Value::Object(mut o) => o.remove(part),
            Value::Array(a) => part
                .parse::<usize>()
                .ok()
                .and_then(|i| a.into_iter().nth(i)),
            _ => None,
        }
        .ok_or_else(|| {
            JavaError::new(
                400,
                "javax.management.AttributeNotFoundException",
                format!("No such key {part}"),
            )
        })?;
    }
    Ok(current)
}

fn read(id: &Identity, view: &NodeView, request: &Value) -> Result<Value, JavaError> {
    let name = request.get("mbean").and_then(Value::as_str).unwrap_or("");
    let mbean = mbean_of(name).ok_or_else(|| JavaError::no_instance(name))?;
    let path = request.get("path").and_then(Value::as_str);
    match request.get("attribute") {
        Some(Value::String(a)) => apply_path(attribute(id, view, mbean, a)?, path),
        Some(Value::Array(names)) => {
            let mut out = Map::new();
            for n in names {
                let n = n.as_str().unwrap_or_default();
                out.insert(n.to_string(), attribute(id, view, mbean, n)?);
            }
            Ok(Value::Object(out))
        }
        _ => {
            let names = attribute_names(id, mbean);
            Ok(Value::Object(
                names
                    .into_iter()
                    .map(|n| Ok((n.to_string(), attribute(id, view, mbean, n)?)))
                    .collect::<Result<_, JavaError>>()?,
            ))
        }
    }
}

// ---- operations ----

/// The operations of an MBean per line: (name, Java parameter types).
fn operations(id: &Identity, mbean: &str) -> Vec<(&'static str, Vec<&'static str>)> {
    const STRING: &str = "java.lang.String";
    if mbean == ENDPOINT_SNITCH_INFO {
        return vec![("getRack", vec![STRING]), ("getDatacenter", vec![STRING])];
    }
    if mbean == FAILURE_DETECTOR {
        return vec![("getEndpointState", vec![STRING])];
    }
    if mbean == MESSAGING_SERVICE {
        // `void reloadSslCertificates() throws IOException` came with 4.0
        // (CASSANDRA-14222, `nodetool reloadssl`); 3.11's MBean has only
        // the message counts. StorageService has no such operation.
        return id
            .v4()
            .then(|| ("reloadSslCertificates", vec![]))
            .into_iter()
            .collect();
    }
    if mbean == GOSSIPER {
        // GossiperMBean.reloadSeeds came with 4.0 (CASSANDRA-14190); the
        // operations of 3.11's are not called.
        return id
            .v4()
            .then(|| ("reloadSeeds", vec![]))
            .into_iter()
            .collect();
    }
    vec![
        (
            "decommission",
            if id.v4() { vec!["boolean"] } else { vec![] },
        ),
        ("drain", vec![]),
        ("getTokens", vec![STRING]),
        ("removeNode", vec![STRING]),
        ("forceRemoveCompletion", vec![]),
        // StorageServiceMBean (3.11, 4.x, 5.0): the deprecated overload
        // (CASSANDRA-11179) and the one NodeProbe.forceKeyspaceCleanup
        // calls; `String...` is an array for JMX.
        ("forceKeyspaceCleanup", vec!["int", STRING, STRINGS]),
        ("forceKeyspaceCleanup", vec![STRING, STRINGS]),
        // NodeProbe.repairAsync calls `int repairAsync(String keyspace,
        // Map<String, String> options)` (3.11, 4.x, 5.0).
        ("repairAsync", vec![STRING, "java.util.Map"]),
        // `void forceTerminateAllRepairSessions()` (3.11, 4.x, 5.0).
        ("forceTerminateAllRepairSessions", vec![]),
        // `void forceKeyspaceFlush(String keyspace, String... tables)`
        // (3.11, 4.x, 5.0): the fake has no memtables (a write is on its
        // disk at once), so it flushes nothing.
        ("forceKeyspaceFlush", vec![STRING, STRINGS]),
        // StorageServiceMBean.upgradeSSTables: the deprecated overload
        // (CASSANDRA-11179) and the one with `jobs` on every line; 4.1
        // added one with `long maxSSTableTimestamp` before `jobs`
        // (CASSANDRA-16837), so a caller names a signature.
        ("upgradeSSTables", vec![STRING, "boolean", STRINGS]),
        ("upgradeSSTables", vec![STRING, "boolean", "int", STRINGS]),
    ]
    .into_iter()
    .chain((id.version >= Version::V4_1).then(|| {
        (
            "upgradeSSTables",
            vec![STRING, "boolean", "long", "int", STRINGS],
        )
    }))
    // `List<String> getParentRepairStatus(int cmd)` came with 4.0
    // (CASSANDRA-13480): 3.11's nodetool hears of repairs only through
    // JMX notifications.
    .chain(id.v4().then(|| ("getParentRepairStatus", vec!["int"])))
    .collect()
}

/// `String...` as a JMX signature names it.
const STRINGS: &str = "[Ljava.lang.String;";

/// Jolokia 1.x lists the signatures of the operation's overloads.
fn signatures(params: &[Vec<&str>]) -> String {
    params
        .iter()
        .map(|p| {
            let mut s = String::from("(");
            for t in p {
                s.push_str(t);
                s.push(',');
            }
            s.pop();
            s.push(')');
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

enum Exec {
    Value(Value),
    Call(RingCall),
}

fn string_arg(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn bool_arg(v: &Value) -> Result<bool, JavaError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => Ok(s.eq_ignore_ascii_case("true")),
        other => Err(JavaError::illegal_argument(format!(
            "Cannot convert {other} to boolean"
        ))),
    }
}

/// An endpoint argument: 3.11 parses an InetAddress (no port), 4.x an
/// InetAddressAndPort (port optional).
fn endpoint_arg(id: &Identity, raw: &str) -> Result<String, JavaError> {
    let unknown = || {
        JavaError::thrown(
            "java.net.UnknownHostException",
            format!("{raw}: Name or service not known"),
        )
    };
    let ip = if id.v4() {
        match raw.rsplit_once(':') {
            Some((ip, port)) if port.parse::<u16>().is_ok() && !ip.contains(':') => ip,
            _ => raw,
        }
    } else {
        raw
    };
    ip.parse::<std::net::IpAddr>().map_err(|_| unknown())?;
    Ok(ip.to_string())
}

fn exec(id: &Identity, view: &NodeView, request: &Value) -> Result<Exec, JavaError> {
    let name = request.get("mbean").and_then(Value::as_str).unwrap_or("");
    let mbean = mbean_of(name).ok_or_else(|| JavaError::no_instance(name))?;
    let operation = request
        .get("operation")
        .and_then(Value::as_str)
        .unwrap_or("");
    let args: Vec<Value> = match request.get("arguments") {
        Some(Value::Array(a)) => a.clone(),
        None | Some(Value::Null) => Vec::new(),
        Some(other) => vec![other.clone()],
    };
    let ops = operations(id, mbean);
    let (op_name, signature) = match operation.split_once('(') {
        Some((n, rest)) => {
            let sig: Vec<&str> = rest
                .trim_end_matches(')')
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            (n, Some(sig))
        }
        None => (operation, None),
    };
    let overloads: Vec<&Vec<&str>> = ops
        .iter()
        .filter(|(n, _)| *n == op_name)
        .map(|(_, p)| p)
        .collect();
    if overloads.is_empty() {
        return Err(JavaError::illegal_argument(format!(
            "No operation {operation} found on MBean {mbean}"
        )));
    }
    let params = match &signature {
        Some(sig) => overloads
            .iter()
            .find(|p| p.as_slice() == sig.as_slice())
            .ok_or_else(|| {
                let known: Vec<Vec<&str>> = overloads.iter().map(|p| (*p).clone()).collect();
                JavaError::illegal_argument(format!(
                    "No operation {operation} on MBean {mbean} exists. Known signatures: {}",
                    signatures(&known)
                ))
            })?,
        None if overloads.len() == 1 => overloads[0],
        // jolokia-core's OperationHandler: an overloaded operation needs
        // its signature.
        None => {
            let known: Vec<Vec<&str>> = overloads.iter().map(|p| (*p).clone()).collect();
            return Err(JavaError::illegal_argument(format!(
                "Operation {operation} on MBean {mbean} is overloaded. Signatures found: {}. Use a signature when specifying the operation.",
                signatures(&known)
            )));
        }
    };
    if params.len() != args.len() {
        return Err(JavaError::illegal_argument(format!(
            "Invalid number of operation arguments. Operation {operation} on {mbean} requires {} parameters, not {} as given",
            params.len(),
            args.len()
        )));
    }
    match (mbean, op_name) {
        (ENDPOINT_SNITCH_INFO, "getRack" | "getDatacenter") => {
            let ip = endpoint_arg(id, &string_arg(&args[0]))?;
            let found = view.endpoint(&ip);
            Ok(Exec::Value(json!(match (op_name, found) {
                ("getRack", Some(e)) => e.rack.as_str(),
                ("getRack", None) => "UNKNOWN_RACK",
                (_, Some(e)) => e.dc.as_str(),
                (_, None) => "UNKNOWN_DC",
            })))
        }
        // FailureDetector.getEndpointState: `appendEndpointState` of the
        // endpoint; one gossip does not know has no state, and
        // `appendEndpointState` dereferences it.
        (FAILURE_DETECTOR, "getEndpointState") => {
            let ip = endpoint_arg(id, &string_arg(&args[0]))?;
            match view.endpoint(&ip) {
                Some(e) => Ok(Exec::Value(json!(super::gossipinfo::endpoint_state(
                    id.version,
                    id.storage_port,
                    e
                )))),
                None => Err(JavaError::thrown("java.lang.NullPointerException", "")),
            }
        }
        (GOSSIPER, "reloadSeeds") => Ok(Exec::Call(RingCall::ReloadSeeds)),
        (MESSAGING_SERVICE, "reloadSslCertificates") => {
            Ok(Exec::Call(RingCall::ReloadSslCertificates))
        }
        (_, "getTokens") => {
            let ip = endpoint_arg(id, &string_arg(&args[0]))?;
            Ok(Exec::Value(json!(
                view.endpoint(&ip)
                    .map(|e| e.tokens.clone())
                    .unwrap_or_default()
            )))
        }
        (_, "decommission") => Ok(Exec::Call(RingCall::Decommission {
            force: match args.first() {
                Some(v) => bool_arg(v)?,
                None => false,
            },
        })),
        (_, "drain") => Ok(Exec::Call(RingCall::Drain)),
        (_, "removeNode") => Ok(Exec::Call(RingCall::RemoveNode {
            host_id: string_arg(&args[0]),
        })),
        (_, "forceRemoveCompletion") => Ok(Exec::Call(RingCall::ForceRemoveCompletion)),
        (_, "forceTerminateAllRepairSessions") => Ok(Exec::Call(RingCall::TerminateRepairs)),
        (_, "forceKeyspaceFlush") => Ok(Exec::Value(Value::Null)),
        // StorageService.forceKeyspaceCleanup(int jobs, String keyspaceName,
        // String... tables): the keyspace is the argument before the tables.
        (_, "forceKeyspaceCleanup") => Ok(Exec::Call(RingCall::Cleanup {
            keyspace: string_arg(&args[args.len() - 2]),
        })),
        // StorageService.repairAsync(String keyspace, Map<String, String>
        // options): the options are parsed by RepairOption.parse; every
        // repair here is a full repair of the node's ranges.
        (_, "repairAsync") => {
            if !(args[1].is_object() || args[1].is_null()) {
                return Err(JavaError::illegal_argument(format!(
                    "Cannot convert {} to java.util.Map",
                    args[1]
                )));
            }
            // Jolokia makes a JSON object a Map; its values are the
            // strings `RepairOption.parse` reads.
            let options = args[1]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                v.as_str().map_or_else(|| v.to_string(), str::to_string),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Exec::Call(RingCall::Repair {
                keyspace: string_arg(&args[0]),
                options,
            }))
        }
        // StorageService.upgradeSSTables(String keyspaceName, boolean
        // excludeCurrentVersion, [long maxSSTableTimestamp,] [int jobs,]
        // String... tableNames).
        (_, "upgradeSSTables") => Ok(Exec::Call(RingCall::UpgradeSstables {
            keyspace: string_arg(&args[0]),
            exclude_current_version: bool_arg(&args[1])?,
        })),
        (_, "getParentRepairStatus") => {
            let cmd = match &args[0] {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            }
            .ok_or_else(|| {
                JavaError::illegal_argument(format!("Cannot convert {} to int", args[0]))
            })?;
            Ok(Exec::Call(RingCall::RepairStatus { cmd }))
        }
        _ => Err(JavaError::illegal_argument(format!(
            "No operation {operation} found on MBean {mbean}"
        ))),
    }
}

// ---- the GET form ----

/// Splits a GET path (after the agent context) on unescaped `/`, undoing
/// `!/`, `!!` and `!"`.
fn split_get_path(path: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '!' => {
                if let Some(n) = chars.next() {
                    parts.last_mut().expect("one").push(n);
                }
            }
            '/' => parts.push(String::new()),
            c => parts.last_mut().expect("one").push(c),
        }
    }
    if parts.last().is_some_and(String::is_empty) {
        parts.pop();
    }
    parts
}

/// The request a GET path (after `/jolokia/`, already percent-decoded)
/// stands for.
pub fn request_of_get(path: &str) -> Result<Value, Value> {
    let parts = split_get_path(path);
    let bad = |m: &str| failure(None, &JavaError::illegal_argument(m.to_string()));
    match parts.first().map(String::as_str) {
        None | Some("version") => Ok(json!({"type": "version"})),
        Some("read") => {
            let mbean = parts.get(1).ok_or_else(|| bad("No MBean name given"))?;
            let mut r = json!({"type": "read", "mbean": mbean});
            if let Some(a) = parts.get(2) {
                r["attribute"] = json!(a);
            }
            if parts.len() > 3 {
                r["path"] = json!(parts[3..].join("/"));
            }
            Ok(r)
        }
        Some("exec") => {
            let (Some(mbean), Some(op)) = (parts.get(1), parts.get(2)) else {
                return Err(bad("No operation given"));
            };
            let mut r = json!({"type": "exec", "mbean": mbean, "operation": op});
            if parts.len() > 3 {
                r["arguments"] = json!(parts[3..]);
            }
            Ok(r)
        }
        Some("search") => Ok(json!({"type": "search", "mbean": parts.get(1)})),
        Some(other) => Err(bad(&format!("Unknown request type {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_cassandra::view::EndpointView;

    fn ep(address: &str, up: bool, state: char, rack: &str) -> EndpointView {
        EndpointView {
            address: address.into(),
            host_id: format!("00000000-0000-4000-8000-0000000000{}", &address[7..]),
            dc: "dc1".into(),
            rack: rack.into(),
            tokens: vec!["-9".into(), "7".into()],
            up,
            state,
            load_bytes: 2048,
            ownership: 0.5,
            gossip: Default::default(),
        }
    }

    fn view() -> NodeView {
        NodeView {
            host_id: "00000000-0000-4000-8000-0000000000.1".into(),
            address: "10.0.0.1".into(),
            cluster_name: "Test Cluster".into(),
            running: true,
            mode: "NORMAL".into(),
            joined: true,
            dc: "dc1".into(),
            rack: "rack1".into(),
            tokens: vec!["-9".into(), "7".into()],
            load_bytes: 2048,
            bootstrap_state: "COMPLETED".into(),
            decommissioning: false,
            decommission_failed: false,
            copies: Default::default(),
            failure: None,
            endpoints: vec![
                ep("10.0.0.1", true, 'N', "rack1"),
                ep("10.0.0.2", false, 'N', "rack2"),
            ],
            keyspaces: vec!["system_auth".into(), "ks".into()],
        }
    }

    fn answer(id: &Identity, request: Value) -> Value {
        match step(id, &view(), &request) {
            Step::Answer(v) => v,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    fn v(release: &str) -> Identity {
        Identity::new(release, 7000).expect("a release")
    }

    #[test]
    fn reads_answer_per_line() {
        let r = answer(
            &v("4.1.8"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "LiveNodesWithPort"}),
        );
        assert_eq!(r["value"], json!(["10.0.0.1:7000"]));
        assert_eq!(r["status"], json!(200));
        let r = answer(
            &v("3.11.6"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": ["LiveNodes", "LiveNodesWithPort"]}),
        );
        assert_eq!(r["status"], json!(404));
        assert_eq!(
            r["error"],
            json!(
                "javax.management.AttributeNotFoundException : No such attribute: LiveNodesWithPort"
            )
        );
        let r = answer(
            &v("5.0.3"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "HostIdMap"}),
        );
        assert_eq!(r["status"], json!(404));
        let r = answer(
            &v("3.11.6"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "Ownership"}),
        );
        assert_eq!(r["value"], json!({"/10.0.0.1": 0.5, "/10.0.0.2": 0.5}));
        // A down node gossips no load.
        let r = answer(
            &v("3.11.6"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "LoadMap"}),
        );
        assert_eq!(r["value"], json!({"10.0.0.1": "2 KiB"}));
        // What nodetool repair repairs when given no keyspace, on every line.
        for release in ["3.11.6", "4.1.8", "5.0.3"] {
            let r = answer(
                &v(release),
                json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "NonLocalStrategyKeyspaces"}),
            );
            assert_eq!(r["value"], json!(["system_auth", "ks"]), "{release}");
        }
    }

    /// repairAsync and forceKeyspaceCleanup on every line;
    /// getParentRepairStatus only from 4.0; the cleanup overloads need a
    /// signature.
    #[test]
    fn repair_and_cleanup_operations_per_line() {
        let call = |id: &Identity, op: &str, args: Value| {
            step(
                id,
                &view(),
                &json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": op, "arguments": args}),
            )
        };
        let cleanup = "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)";
        for release in ["3.11.19", "4.1.8", "5.0.4"] {
            let id = v(release);
            assert!(matches!(
                call(&id, "repairAsync", json!(["ks", {}])),
                Step::Call { call: RingCall::Repair { ref keyspace, .. }, .. } if keyspace == "ks"
            ));
            // The options reach the node as RepairOption.parse reads them.
            let Step::Call {
                call: RingCall::Repair { options, .. },
                ..
            } = call(
                &id,
                "repairAsync",
                json!(["ks", {"incremental": "false", "jobThreads": "1"}]),
            )
            else {
                panic!("a repair call");
            };
            assert_eq!(options["incremental"], "false");
            assert_eq!(options["jobThreads"], "1");
            assert!(matches!(
                call(&id, cleanup, json!([0, "ks", []])),
                Step::Call { call: RingCall::Cleanup { ref keyspace }, .. } if keyspace == "ks"
            ));
            assert!(matches!(
                call(&id, "forceKeyspaceCleanup(java.lang.String,[Ljava.lang.String;)", json!(["ks", []])),
                Step::Call { call: RingCall::Cleanup { ref keyspace }, .. } if keyspace == "ks"
            ));
            let Step::Answer(overloaded) = call(&id, "forceKeyspaceCleanup", json!([0, "ks", []]))
            else {
                panic!("an overloaded operation without a signature is answered at once");
            };
            assert!(
                overloaded["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("is overloaded. Signatures found:")),
                "{overloaded}"
            );
            let status = call(&id, "getParentRepairStatus", json!([1]));
            assert_eq!(
                matches!(
                    status,
                    Step::Call {
                        call: RingCall::RepairStatus { cmd: 1 },
                        ..
                    }
                ),
                release != "3.11.19",
                "{release}: {status:?}"
            );
        }
    }

    /// What the sidecar's maintenance reads (issue 33): every keyspace,
    /// the ring's tokens (both members', sorted by token, to addresses),
    /// the partitioner; and the stop of the running repairs.
    #[test]
    fn maintenance_reads_and_the_repair_stop_on_every_line() {
        for release in ["3.11.6", "4.1.8", "5.0.3"] {
            let id = v(release);
            let mut ring = view();
            ring.endpoints[1].tokens = vec!["3".into()];
            let read = |attribute: &str| {
                let request =
                    json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": attribute});
                match step(&id, &ring, &request) {
                    Step::Answer(v) => v["value"].clone(),
                    other => panic!("{other:?}"),
                }
            };
            assert_eq!(
                read("Keyspaces"),
                json!(["system", "system_schema", "system_auth", "ks"])
            );
            assert_eq!(
                read("TokenToEndpointMap"),
                json!({"-9": "10.0.0.1", "3": "10.0.0.2", "7": "10.0.0.1"}),
                "{release}"
            );
            assert_eq!(
                read("PartitionerName"),
                json!("org.apache.cassandra.dht.Murmur3Partitioner")
            );
            assert!(matches!(
                step(
                    &id,
                    &view(),
                    &json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "forceTerminateAllRepairSessions"})
                ),
                Step::Call {
                    call: RingCall::TerminateRepairs,
                    ..
                }
            ));
        }
    }

    #[test]
    fn exec_errors_like_jolokia() {
        let r = answer(
            &v("3.11.6"),
            json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission", "arguments": [false]}),
        );
        assert_eq!(r["status"], json!(400));
        assert_eq!(
            r["error"],
            json!(format!(
                "java.lang.IllegalArgumentException : Invalid number of operation arguments. Operation decommission on {STORAGE_SERVICE} requires 0 parameters, not 1 as given"
            ))
        );
        let r = answer(
            &v("3.11.6"),
            json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission(boolean)", "arguments": [false]}),
        );
        assert_eq!(
            r["error"],
            json!(format!(
                "java.lang.IllegalArgumentException : No operation decommission(boolean) on MBean {STORAGE_SERVICE} exists. Known signatures: )"
            ))
        );
        // An empty argument list is not echoed.
        let r = answer(
            &v("4.1.8"),
            json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission", "arguments": []}),
        );
        assert_eq!(
            r["request"],
            json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission"})
        );
        let s = step(
            &v("4.1.8"),
            &view(),
            &json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission", "arguments": [true]}),
        );
        assert!(matches!(
            s,
            Step::Call {
                call: RingCall::Decommission { force: true },
                ..
            }
        ));
        let r = answer(
            &v("4.1.8"),
            json!({"type": "exec", "mbean": ENDPOINT_SNITCH_INFO, "operation": "getRack", "arguments": ["10.0.0.2:7000"]}),
        );
        assert_eq!(r["value"], json!("rack2"));
        let r = answer(
            &v("3.11.6"),
            json!({"type": "exec", "mbean": ENDPOINT_SNITCH_INFO, "operation": "getRack", "arguments": ["10.0.0.2:7000"]}),
        );
        assert_eq!(r["error_type"], json!("java.net.UnknownHostException"));
    }

    #[test]
    fn failure_detector_keys_are_inet_addresses() {
        let r = answer(
            &v("4.1.8"),
            json!({"type": "read", "mbean": FAILURE_DETECTOR, "attribute": ["SimpleStates", "SimpleStatesWithPort", "DownEndpointCount"]}),
        );
        assert_eq!(
            r["value"],
            json!({
                "SimpleStates": {"/10.0.0.1": "UP", "/10.0.0.2": "DOWN"},
                "SimpleStatesWithPort": {"/10.0.0.1:7000": "UP", "/10.0.0.2:7000": "DOWN"},
                "DownEndpointCount": 1
            })
        );
        let r = answer(
            &v("3.11.6"),
            json!({"type": "read", "mbean": FAILURE_DETECTOR, "attribute": "SimpleStatesWithPort"}),
        );
        assert_eq!(r["status"], json!(404));
        assert_eq!(
            search("org.apache.cassandra.net:*"),
            json!([FAILURE_DETECTOR, GOSSIPER, MESSAGING_SERVICE])
        );
    }

    #[test]
    fn seeds_reload_from_4_0_on() {
        let reload = json!({"type": "exec", "mbean": GOSSIPER, "operation": "reloadSeeds"});
        for release in ["4.1.8", "5.0.3"] {
            assert!(
                matches!(
                    step(&v(release), &view(), &reload),
                    Step::Call {
                        call: RingCall::ReloadSeeds,
                        ..
                    }
                ),
                "{release}"
            );
        }
        // 3.11's GossiperMBean has no reloadSeeds (CASSANDRA-14190 is 4.0).
        let r = answer(&v("3.11.6"), reload);
        assert_eq!(r["status"], json!(400));
        assert_eq!(
            r["error"],
            json!(format!(
                "java.lang.IllegalArgumentException : No operation reloadSeeds found on MBean {GOSSIPER}"
            ))
        );
    }

    /// `nodetool reloadssl`'s operation is MessagingService's, from 4.0
    /// (CASSANDRA-14222) on; StorageService has none on any line, and a
    /// caller that asks it gets Jolokia's "No operation" (400).
    #[test]
    fn ssl_certificates_reload_on_messaging_service_from_4_0_on() {
        let on = |mbean: &str| json!({"type": "exec", "mbean": mbean, "operation": "reloadSslCertificates"});
        for release in ["4.0.13", "4.1.8", "5.0.3"] {
            assert!(
                matches!(
                    step(&v(release), &view(), &on(MESSAGING_SERVICE)),
                    Step::Call {
                        call: RingCall::ReloadSslCertificates,
                        ..
                    }
                ),
                "{release}"
            );
            let r = answer(&v(release), on(STORAGE_SERVICE));
            assert_eq!(r["status"], json!(400), "{release}");
            assert_eq!(
                r["error"],
                json!(format!(
                    "java.lang.IllegalArgumentException : No operation reloadSslCertificates found on MBean {STORAGE_SERVICE}"
                ))
            );
        }
        let r = answer(&v("3.11.19"), on(MESSAGING_SERVICE));
        assert_eq!(r["status"], json!(400));
        assert_eq!(
            r["error"],
            json!(format!(
                "java.lang.IllegalArgumentException : No operation reloadSslCertificates found on MBean {MESSAGING_SERVICE}"
            ))
        );
    }

    #[test]
    fn search_matches_object_name_patterns() {
        assert_eq!(
            search("org.apache.cassandra.db:*"),
            json!([STORAGE_SERVICE, ENDPOINT_SNITCH_INFO])
        );
        assert_eq!(
            search("org.apache.cassandra.*:type=Storage*"),
            json!([STORAGE_SERVICE])
        );
        assert_eq!(search("org.apache.nope:*"), json!([]));
    }

    #[test]
    fn get_paths_unescape() {
        assert_eq!(
            request_of_get("read/org.apache.cassandra.db:type=StorageService/OperationMode")
                .expect("a request"),
            json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "OperationMode"})
        );
        assert_eq!(
            request_of_get("exec/a:b=c/op/x!/y").expect("a request"),
            json!({"type": "exec", "mbean": "a:b=c", "operation": "op", "arguments": ["x/y"]})
        );
    }

    #[test]
    fn not_json_is_an_error_without_echo() {
        let err = parse_body(b"not json").expect_err("not json");
        assert_eq!(err["status"], json!(400));
        assert!(err.get("request").is_none());
    }
}
