//! The Jolokia contract: what a Cassandra node's Jolokia answers, as checks
//! that run against any peer (the real jolokia-core 1.7.1 of
//! [`crate::jolokia_real`], and the test world's fake Jolokia), plus the
//! sidecar's client, StorageService facade and nodetool driven against it.
//! Test support: the checks panic (assert) on a violation. I/O over HTTP.
//!
//! # What the real Jolokia 1.7.1 answers (recorded from jolokia-core 1.7.1)
//!
//! Every answer is HTTP **200** with `Content-Type: text/plain; charset=utf-8`
//! (the 1.x default mime type), the body one JSON object (or an array for a
//! bulk request). The outcome is the `status` inside.
//!
//! Success of a read (keys exactly `request`, `value`, `timestamp`, `status`;
//! `timestamp` in epoch seconds; `request` echoes what was sent):
//!
//! ```json
//! {"request":{"mbean":"org.apache.cassandra.db:type=StorageService","attribute":"OperationMode","type":"read"},
//!  "value":"NORMAL","timestamp":1795321700,"status":200}
//! ```
//!
//! * a multi-attribute read (`"attribute": [..]`) answers an object keyed by
//!   attribute name, `request.attribute` echoes the array;
//! * `List<String>` is a JSON array of strings, `Map<String,String>` an
//!   object, `Map<InetAddress,Float>` (3.11 `Ownership`) an object keyed
//!   `"/10.0.0.1"` (InetAddress.toString(): leading slash) with numbers like
//!   `0.33333334` (float precision);
//! * a void exec answers `"value": null`; the echo of an exec carries
//!   `arguments` only when there were some (`"arguments": []` is not echoed);
//! * search: `"value"` is an array of ObjectName strings (in no particular
//!   order), `[]` when nothing matches, status 200;
//! * version: `"value": {"agent": "1.7.1", "protocol": "7.2", "config": {..},
//!   "info": {}}`.
//!
//! Errors (keys exactly `request`, `stacktrace`, `error_type`, `error`,
//! `status`; no `.error` flag in 1.x; `error` is `"<class> : <message>"`):
//!
//! | cause | status | error_type | error |
//! |---|---|---|---|
//! | unknown attribute (also one of several in a multi-read: the whole read fails) | 404 | `javax.management.AttributeNotFoundException` | `javax.management.AttributeNotFoundException : No such attribute: LiveNodesWithPort` |
//! | unknown MBean | 404 | `javax.management.InstanceNotFoundException` | `javax.management.InstanceNotFoundException : org.apache.cassandra.db:type=Nope` |
//! | wrong argument count | 400 | `java.lang.IllegalArgumentException` | `java.lang.IllegalArgumentException : Invalid number of operation arguments. Operation decommission on org.apache.cassandra.db:type=StorageService requires 0 parameters, not 1 as given` |
//! | unknown operation | 400 | `java.lang.IllegalArgumentException` | `java.lang.IllegalArgumentException : No operation nope found on MBean org.apache.cassandra.db:type=StorageService` |
//! | signature that does not exist | 400 | `java.lang.IllegalArgumentException` | `java.lang.IllegalArgumentException : No operation decommission(boolean) on MBean org.apache.cassandra.db:type=StorageService exists. Known signatures: )` |
//! | exception thrown by the MBean | 500 | the exception's class, e.g. `java.lang.UnsupportedOperationException`, `java.lang.IllegalStateException` | `java.lang.IllegalStateException : Node is still decommissioning. Check nodetool netstats.` |
//! | exception without a message (e.g. `getEndpointState` of an endpoint gossip does not know) | 500 | `java.lang.NullPointerException` | `java.lang.NullPointerException` (the class alone, no ` : `) |
//! | body that is not JSON | 400 | `java.lang.IllegalArgumentException` | `java.lang.IllegalArgumentException : Invalid JSON request java.io.InputStreamReader@…` (no `request` key) |
//!
//! A path outside the agent's context (e.g. `/nope/`) is a plain HTTP 404
//! from the HTTP server, not JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidecar::jolokia::{
    self, ENDPOINT_SNITCH_INFO, Error, Jolokia, OperationMode, STORAGE_SERVICE, StorageService,
};
use sidecar::nodetool::{self, NodetoolCommand};

use crate::jolokia_real::CassandraLine;

/// What the peer was configured with: the ring the checks expect.
#[derive(Debug, Clone, PartialEq)]
pub struct RingSpec {
    pub line: CassandraLine,
    /// This node: ip, rack (UN).
    pub self_ip: String,
    pub self_rack: String,
    pub datacenter: String,
    /// The other nodes: ip, state (UN, DN, UJ, UL, UM), rack.
    pub peers: Vec<(String, String, String)>,
    pub num_tokens: usize,
    pub cluster_name: String,
}

impl RingSpec {
    /// The ring of [`crate::jolokia_real::NodeConfig`] with these peers.
    pub fn of(line: CassandraLine, peers: &[(String, String, String)]) -> Self {
        RingSpec {
            line,
            self_ip: "10.0.0.1".to_string(),
            self_rack: "rack1".to_string(),
            datacenter: "dc1".to_string(),
            peers: peers.to_vec(),
            num_tokens: 4,
            cluster_name: "Test Cluster".to_string(),
        }
    }

    fn with_port(&self) -> bool {
        self.line != CassandraLine::V3_11
    }

    /// How an endpoint appears in the attributes the sidecar reads.
    fn endpoint(&self, ip: &str) -> String {
        if self.with_port() {
            format!("{ip}:7000")
        } else {
            ip.to_string()
        }
    }

    /// All nodes: (ip, state, rack), this node first.
    fn nodes(&self) -> Vec<(String, String, String)> {
        let mut all = vec![(
            self.self_ip.clone(),
            "UN".to_string(),
            self.self_rack.clone(),
        )];
        all.extend(self.peers.iter().cloned());
        all
    }

    fn endpoints_where(&self, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
        self.nodes()
            .into_iter()
            .filter(|(_, state, _)| keep(state))
            .map(|(ip, _, _)| self.endpoint(&ip))
            .collect()
    }
}

/// The answer to a raw POST.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub http_status: u16,
    pub content_type: String,
    pub body: Value,
}

/// POST a JSON (or any) body and return the HTTP status, content type and
/// JSON body, without the client's interpretation.
pub async fn post_raw(url: &str, body: String) -> RawResponse {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an http client")
        .post(url)
        .body(body)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url} failed: {e}"));
    let http_status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = response.bytes().await.expect("a response body");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "the answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    RawResponse {
        http_status,
        content_type,
        body,
    }
}

async fn post_json(url: &str, body: &Value) -> Value {
    let raw = post_raw(url, body.to_string()).await;
    assert_eq!(raw.http_status, 200, "jolokia answers HTTP 200: {raw:?}");
    assert!(
        raw.content_type.starts_with("text/plain"),
        "jolokia 1.x answers text/plain, got {:?}",
        raw.content_type
    );
    raw.body
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("expected an object, got {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Assert the shape of a success and return its value.
fn assert_success(response: &Value, request: &Value) -> Value {
    assert_eq!(
        keys(response),
        BTreeSet::from(["request", "value", "timestamp", "status"]),
        "success keys of {response}"
    );
    assert_eq!(response["status"], json!(200), "{response}");
    let timestamp = response["timestamp"].as_u64().expect("numeric timestamp");
    assert!(
        timestamp.abs_diff(now_secs()) < 120,
        "timestamp {timestamp} is epoch seconds"
    );
    assert_eq!(&response["request"], request, "request echo");
    response["value"].clone()
}

/// Assert the shape of an error response.
fn assert_error(
    response: &Value,
    request: Option<&Value>,
    status: u16,
    error_type: &str,
) -> String {
    let mut expected = BTreeSet::from(["stacktrace", "error_type", "error", "status"]);
    if request.is_some() {
        expected.insert("request");
    }
    assert_eq!(keys(response), expected, "error keys of {response}");
    assert_eq!(response["status"], json!(status), "{response}");
    assert_eq!(response["error_type"], json!(error_type), "{response}");
    if let Some(request) = request {
        assert_eq!(&response["request"], request, "request echo");
    }
    let stacktrace = response["stacktrace"].as_str().expect("a stack trace");
    assert!(
        stacktrace.starts_with(error_type),
        "stack trace starts with the class: {stacktrace:.200}"
    );
    let error = response["error"].as_str().expect("an error text");
    // An exception without a message (`getMessage()` null): the class alone.
    if error == error_type {
        return String::new();
    }
    let prefix = format!("{error_type} : ");
    error
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("error {error:?} starts with {prefix:?}"))
        .to_string()
}

fn ss_read(attribute: Value) -> Value {
    json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": attribute})
}

/// The FailureDetector (JMX-FACTS §4): `SimpleStates` (keys
/// `InetAddress.toString()`), the counts, and the gossip dump
/// `AllEndpointStates` (4.x also `WithPort` and `WithPortAndResolveIp`) in
/// `appendEndpointState`'s form, read back with the world's parser; the
/// operation `getEndpointState` gives one endpoint's lines. Read only.
pub async fn check_failure_detector(url: &str, ring: &RingSpec) {
    use crate::fake_cassandra::gossipinfo::{ParsedEndpoint, parse_all_endpoint_states};
    const FD: &str = "org.apache.cassandra.net:type=FailureDetector";
    let read = |attribute: &str| json!({"type": "read", "mbean": FD, "attribute": attribute});
    let value = |request: Value| async move {
        let response = post_json(url, &request).await;
        assert_success(&response, &request)
    };
    let nodes = ring.nodes();
    let up = |state: &str| state.starts_with('U');

    // SimpleStates: every member, by InetAddress.toString().
    let simple = value(read("SimpleStates")).await;
    let expected: Value = nodes
        .iter()
        .map(|(ip, state, _)| {
            (
                format!("/{ip}"),
                json!(if up(state) { "UP" } else { "DOWN" }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    assert_eq!(simple, expected, "SimpleStates");
    let ups = nodes.iter().filter(|(_, s, _)| up(s)).count();
    assert_eq!(value(read("UpEndpointCount")).await, json!(ups));
    assert_eq!(
        value(read("DownEndpointCount")).await,
        json!(nodes.len() - ups)
    );

    let parse = |v: Value| -> Vec<ParsedEndpoint> {
        let text = v
            .as_str()
            .unwrap_or_else(|| panic!("a String: {v}"))
            .to_string();
        parse_all_endpoint_states(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
    };
    let dump = parse(value(read("AllEndpointStates")).await);
    let dump_keys: BTreeSet<String> = dump.iter().map(|e| e.key.clone()).collect();
    let expected: BTreeSet<String> = nodes.iter().map(|(ip, _, _)| format!("/{ip}")).collect();
    assert_eq!(dump_keys, expected, "one entry per endpoint");
    let local_host_id = value(ss_read(json!("LocalHostId"))).await;
    for (ip, state, rack) in &nodes {
        let e = dump
            .iter()
            .find(|e| e.address() == ip)
            .unwrap_or_else(|| panic!("{ip} in the dump"));
        assert!(
            e.generation > 1_000_000_000,
            "{ip}: an epoch-second generation"
        );
        assert!(e.heartbeat > 0, "{ip}: a heartbeat");
        let status = e.state("STATUS").unwrap_or_else(|| panic!("{ip}: STATUS"));
        let word = match &state[1..] {
            "J" => "BOOT,",
            "L" => "LEAVING,",
            "M" => "MOVING,",
            _ => "NORMAL,",
        };
        assert!(status.starts_with(word), "{ip} ({state}): STATUS {status}");
        assert_eq!(e.state("DC"), Some(ring.datacenter.as_str()), "{ip}");
        assert_eq!(e.state("RACK"), Some(rack.as_str()), "{ip}");
        assert_eq!(
            e.state("RELEASE_VERSION")
                .map(|r| r.split('.').take(2).collect::<Vec<_>>().join(".")),
            Some(ring.line.arg().to_string()),
            "{ip}"
        );
        assert!(e.state("HOST_ID").is_some(), "{ip}: HOST_ID");
        assert!(
            e.tokens_version.is_some(),
            "{ip}: TOKENS hidden, with a version"
        );
        assert!(e.states.iter().all(|(n, _, _)| n != "TOKENS"));
        // 3.11 publishes STATUS alone; 4.x STATUS_WITH_PORT with it.
        assert_eq!(
            e.state("STATUS_WITH_PORT"),
            ring.with_port().then_some(status),
            "{ip}"
        );
    }
    let me = dump
        .iter()
        .find(|e| e.address() == ring.self_ip)
        .expect("itself");
    assert_eq!(me.state("HOST_ID").map(|h| json!(h)), Some(local_host_id));

    // One endpoint's lines (the heartbeat moves on between two reads).
    let peer = &nodes[1].0;
    let request =
        json!({"type": "exec", "mbean": FD, "operation": "getEndpointState", "arguments": [peer]});
    let one = parse(json!(format!(
        "/{peer}\n{}",
        value(request).await.as_str().expect("a String")
    )));
    let of_dump = dump
        .iter()
        .find(|e| e.address() == peer)
        .expect("in the dump");
    assert_eq!(
        (&one[0].states, one[0].generation, one[0].tokens_version),
        (&of_dump.states, of_dump.generation, of_dump.tokens_version),
        "getEndpointState({peer})"
    );
    let request = json!({"type": "exec", "mbean": FD, "operation": "getEndpointState", "arguments": ["10.9.9.9"]});
    let response = post_json(url, &request).await;
    assert_error(
        &response,
        Some(&request),
        500,
        "java.lang.NullPointerException",
    );

    if ring.with_port() {
        let with_port = value(read("SimpleStatesWithPort")).await;
        let keys: BTreeSet<&str> = keys(&with_port);
        let expected: BTreeSet<String> = nodes
            .iter()
            .map(|(ip, _, _)| format!("/{ip}:7000"))
            .collect();
        assert_eq!(keys, expected.iter().map(String::as_str).collect());
        let dump = parse(value(read("AllEndpointStatesWithPort")).await);
        let keys: BTreeSet<String> = dump.iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys, expected, "WithPort keys");
        let resolved = parse(value(read("AllEndpointStatesWithPortAndResolveIp")).await);
        let keys: BTreeSet<String> = resolved.iter().map(|e| e.key.clone()).collect();
        let expected: BTreeSet<String> = nodes
            .iter()
            .map(|(ip, _, _)| format!("{ip}:7000"))
            .collect();
        assert_eq!(keys, expected, "no reverse name: the address");
    } else {
        let response = post_json(url, &read("AllEndpointStatesWithPort")).await;
        assert_error(
            &response,
            Some(&read("AllEndpointStatesWithPort")),
            404,
            "javax.management.AttributeNotFoundException",
        );
    }
}

/// The protocol itself, by raw POSTs: success and error shapes, bulk,
/// search, version. Leaves the node as it was.
pub async fn check_protocol(url: &str, ring: &RingSpec) {
    // One attribute.
    let request = ss_read(json!("OperationMode"));
    let response = post_json(url, &request).await;
    assert_eq!(assert_success(&response, &request), json!("NORMAL"));

    // Several attributes: an object keyed by attribute name.
    let request = ss_read(json!([
        "ReleaseVersion",
        "ClusterName",
        "Tokens",
        "LocalHostId"
    ]));
    let response = post_json(url, &request).await;
    let value = assert_success(&response, &request);
    assert_eq!(
        keys(&value),
        BTreeSet::from(["ReleaseVersion", "ClusterName", "Tokens", "LocalHostId"])
    );
    assert_eq!(value["ReleaseVersion"], json!(ring.line.release_version()));
    assert_eq!(value["ClusterName"], json!(ring.cluster_name));
    assert_eq!(
        value["Tokens"].as_array().map(Vec::len),
        Some(ring.num_tokens)
    );

    // The WithPort attributes exist from 4.0 on; on 3.11 reading one fails,
    // and it fails a multi-read that includes it.
    let request = ss_read(json!("LiveNodesWithPort"));
    let response = post_json(url, &request).await;
    let live_up = ring.endpoints_where(|s| s.starts_with('U'));
    if ring.with_port() {
        let value: BTreeSet<String> =
            serde_json::from_value(assert_success(&response, &request)).expect("a list");
        assert_eq!(value, live_up);
    } else {
        let message = assert_error(
            &response,
            Some(&request),
            404,
            "javax.management.AttributeNotFoundException",
        );
        assert_eq!(message, "No such attribute: LiveNodesWithPort");
        let request = ss_read(json!(["LiveNodes", "LiveNodesWithPort"]));
        let response = post_json(url, &request).await;
        let message = assert_error(
            &response,
            Some(&request),
            404,
            "javax.management.AttributeNotFoundException",
        );
        assert_eq!(message, "No such attribute: LiveNodesWithPort");
    }

    // HostIdMap: deprecated in 3.11/4.x, gone in 5.0.
    let request = ss_read(json!("HostIdMap"));
    let response = post_json(url, &request).await;
    if ring.line == CassandraLine::V5_0 {
        assert_error(
            &response,
            Some(&request),
            404,
            "javax.management.AttributeNotFoundException",
        );
    } else {
        let value = assert_success(&response, &request);
        let ips: BTreeSet<&str> = keys(&value);
        let expected: BTreeSet<String> = ring.nodes().into_iter().map(|(ip, _, _)| ip).collect();
        assert_eq!(
            ips,
            expected.iter().map(String::as_str).collect(),
            "HostIdMap is keyed by bare IP"
        );
    }

    // 3.11's Ownership: Map<InetAddress, Float> keys are "/ip".
    let request = ss_read(json!("Ownership"));
    let response = post_json(url, &request).await;
    let value = assert_success(&response, &request);
    let owners: BTreeSet<&str> = keys(&value);
    assert!(
        owners.iter().all(|k| k.starts_with('/')),
        "InetAddress keys carry a leading slash: {value}"
    );
    let total: f64 = value
        .as_object()
        .map(|o| o.values().filter_map(Value::as_f64).sum())
        .unwrap_or_default();
    assert!((total - 1.0).abs() < 1e-3, "ownership sums to 1: {value}");

    // Unknown MBean.
    let request =
        json!({"type": "read", "mbean": "org.apache.cassandra.db:type=Nope", "attribute": "X"});
    let response = post_json(url, &request).await;
    let message = assert_error(
        &response,
        Some(&request),
        404,
        "javax.management.InstanceNotFoundException",
    );
    assert_eq!(message, "org.apache.cassandra.db:type=Nope");

    // Wrong argument count for decommission: the other version's shape.
    let (wrong, required, given) = if ring.line == CassandraLine::V3_11 {
        (json!([false]), 0, 1)
    } else {
        (json!([]), 1, 0)
    };
    let request = json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission", "arguments": wrong});
    let response = post_json(url, &request).await;
    // 1.x does not echo an empty argument list.
    let mut echo = request.clone();
    if wrong == json!([]) {
        echo.as_object_mut().map(|o| o.remove("arguments"));
    }
    let message = assert_error(
        &response,
        Some(&echo),
        400,
        "java.lang.IllegalArgumentException",
    );
    assert_eq!(
        message,
        format!(
            "Invalid number of operation arguments. Operation decommission on {STORAGE_SERVICE} requires {required} parameters, not {given} as given"
        )
    );

    // A signature that does not exist on 3.11, and one that does on 4.x.
    let request = json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission(boolean)", "arguments": [false]});
    if ring.line == CassandraLine::V3_11 {
        let response = post_json(url, &request).await;
        let message = assert_error(
            &response,
            Some(&request),
            400,
            "java.lang.IllegalArgumentException",
        );
        assert!(
            message.starts_with(&format!(
                "No operation decommission(boolean) on MBean {STORAGE_SERVICE} exists."
            )),
            "{message}"
        );
    }

    // Unknown operation.
    let request =
        json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "nope", "arguments": ["x"]});
    let response = post_json(url, &request).await;
    let message = assert_error(
        &response,
        Some(&request),
        400,
        "java.lang.IllegalArgumentException",
    );
    assert_eq!(
        message,
        format!("No operation nope found on MBean {STORAGE_SERVICE}")
    );

    // An operation with an argument, with and without an explicit signature.
    let peer_ip = ring.peers.first().map(|p| p.0.clone()).expect("a peer");
    for operation in ["getTokens", "getTokens(java.lang.String)"] {
        let request = json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": operation, "arguments": [peer_ip]});
        let response = post_json(url, &request).await;
        let tokens = assert_success(&response, &request);
        assert_eq!(tokens.as_array().map(Vec::len), Some(ring.num_tokens));
        assert!(
            tokens
                .as_array()
                .into_iter()
                .flatten()
                .all(|t| t.as_str().is_some_and(|t| t.parse::<i64>().is_ok())),
            "Murmur3 tokens are strings of i64: {tokens}"
        );
    }
    let request = json!({"type": "exec", "mbean": ENDPOINT_SNITCH_INFO, "operation": "getRack", "arguments": [peer_ip]});
    let response = post_json(url, &request).await;
    assert_eq!(
        assert_success(&response, &request),
        json!(ring.peers[0].2),
        "getRack(String)"
    );

    // Bulk: one answer per request, in order, each with its own status.
    let requests = json!([
        ss_read(json!("OperationMode")),
        {"type": "read", "mbean": "org.apache.cassandra.db:type=Nope", "attribute": "X"},
        {"type": "read", "mbean": ENDPOINT_SNITCH_INFO, "attribute": "Rack"},
    ]);
    let response = post_json(url, &requests).await;
    let items = response.as_array().expect("a bulk answer is an array");
    assert_eq!(items.len(), 3);
    assert_eq!(assert_success(&items[0], &requests[0]), json!("NORMAL"));
    assert_error(
        &items[1],
        Some(&requests[1]),
        404,
        "javax.management.InstanceNotFoundException",
    );
    assert_eq!(
        assert_success(&items[2], &requests[2]),
        json!(ring.self_rack)
    );

    // Search.
    let request = json!({"type": "search", "mbean": "org.apache.cassandra.db:*"});
    let response = post_json(url, &request).await;
    let names: BTreeSet<String> =
        serde_json::from_value(assert_success(&response, &request)).expect("names");
    assert_eq!(
        names,
        BTreeSet::from([
            STORAGE_SERVICE.to_string(),
            ENDPOINT_SNITCH_INFO.to_string()
        ])
    );
    let request = json!({"type": "search", "mbean": "org.apache.nope:*"});
    let response = post_json(url, &request).await;
    assert_eq!(assert_success(&response, &request), json!([]));

    // Version.
    let request = json!({"type": "version"});
    let response = post_json(url, &request).await;
    let value = assert_success(&response, &request);
    assert_eq!(value["agent"], json!("1.7.1"));
    assert_eq!(value["protocol"], json!("7.2"));
    assert!(
        value["config"].is_object() && value["info"].is_object(),
        "{value}"
    );

    // Not JSON at all: an error without a request echo.
    let raw = post_raw(url, "not json".to_string()).await;
    assert_eq!(raw.http_status, 200);
    let message = assert_error(&raw.body, None, 400, "java.lang.IllegalArgumentException");
    assert!(message.starts_with("Invalid JSON request"), "{message}");
}

/// The sidecar's client and StorageService facade against the peer.
pub async fn check_client(url: &str, ring: &RingSpec) {
    let client = Jolokia::new(url).expect("a client");
    let storage = StorageService::new(client.clone());

    let version = storage.release_version().await.expect("ReleaseVersion");
    assert_eq!(version.raw, ring.line.release_version());
    assert_eq!(
        storage.operation_mode().await.expect("mode"),
        OperationMode::Normal
    );
    assert_eq!(
        storage.cluster_name().await.expect("ClusterName"),
        ring.cluster_name
    );
    let host_id = storage
        .local_host_id()
        .await
        .expect("LocalHostId")
        .expect("a host id");
    assert_eq!(host_id.len(), 36, "a UUID: {host_id}");
    assert_eq!(
        storage.tokens().await.expect("Tokens").len(),
        ring.num_tokens
    );
    assert!(!storage.load_string().await.expect("LoadString").is_empty());

    // The version-dependent attribute names.
    let as_set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    assert_eq!(
        as_set(storage.live_nodes().await.expect("live")),
        ring.endpoints_where(|s| s.starts_with('U'))
    );
    assert_eq!(
        as_set(storage.unreachable_nodes().await.expect("unreachable")),
        ring.endpoints_where(|s| s.starts_with('D'))
    );
    assert_eq!(
        as_set(storage.joining_nodes().await.expect("joining")),
        ring.endpoints_where(|s| s.ends_with('J'))
    );
    assert_eq!(
        as_set(storage.leaving_nodes().await.expect("leaving")),
        ring.endpoints_where(|s| s.ends_with('L'))
    );
    assert_eq!(
        as_set(storage.moving_nodes().await.expect("moving")),
        ring.endpoints_where(|s| s.ends_with('M'))
    );
    let host_ids = storage.endpoint_to_host_id().await.expect("host ids");
    assert_eq!(
        host_ids.keys().cloned().collect::<BTreeSet<_>>(),
        ring.endpoints_where(|_| true)
    );
    assert_eq!(
        host_ids.get(&ring.endpoint(&ring.self_ip)),
        Some(&host_id),
        "the local host id is in the map"
    );
    let loads = storage.load_map().await.expect("loads");
    assert!(
        loads.contains_key(&ring.endpoint(&ring.self_ip)),
        "{loads:?}"
    );

    let whole = storage.ring().await.expect("the ring");
    assert_eq!(whole.host_ids, host_ids);
    assert_eq!(whole.loads, loads);
    let ownership = whole.ownership.as_ref().expect("ownership");
    assert_eq!(
        ownership.keys().cloned().collect::<BTreeSet<_>>(),
        ring.nodes().into_iter().map(|(ip, _, _)| ip).collect(),
        "ownership keys are bare IPs after normalisation"
    );
    for (ip, state, _) in ring.nodes() {
        assert_eq!(whole.state(&ring.endpoint(&ip)), state, "state of {ip}");
    }

    assert_eq!(storage.datacenter().await.expect("dc"), ring.datacenter);
    assert_eq!(storage.rack().await.expect("rack"), ring.self_rack);
    for (ip, _, rack) in &ring.peers {
        assert_eq!(
            &storage.rack_of(&ring.endpoint(ip)).await.expect("rack"),
            rack
        );
        assert_eq!(
            storage.datacenter_of(&ring.endpoint(ip)).await.expect("dc"),
            ring.datacenter
        );
    }
    assert_eq!(
        storage
            .tokens_of(&ring.endpoint(&ring.self_ip))
            .await
            .expect("getTokens"),
        storage.tokens().await.expect("Tokens")
    );

    // Plain client calls.
    let many = client
        .read_many(STORAGE_SERVICE, &["OperationMode", "ReleaseVersion"])
        .await
        .expect("read_many");
    assert_eq!(many.get("OperationMode"), Some(&json!("NORMAL")));
    assert_eq!(many.len(), 2);
    let mut names = client
        .search("org.apache.cassandra.db:*")
        .await
        .expect("search");
    names.sort();
    assert_eq!(names, vec![ENDPOINT_SNITCH_INFO, STORAGE_SERVICE]);
    let agent = client.version().await.expect("version");
    assert_eq!(
        (agent.agent.as_str(), agent.protocol.as_str()),
        ("1.7.1", "7.2")
    );

    // Error kinds.
    let err = client
        .read(STORAGE_SERVICE, "Nope")
        .await
        .expect_err("unknown attribute");
    assert_eq!(err.jolokia_status(), Some(404));
    assert_eq!(
        err.error_type(),
        Some("javax.management.AttributeNotFoundException")
    );
    assert_eq!(err.exception_message(), Some("No such attribute: Nope"));
    let err = client
        .exec(STORAGE_SERVICE, "getTokens", vec![])
        .await
        .expect_err("wrong argument count");
    assert_eq!(err.jolokia_status(), Some(400));
    assert_eq!(err.error_type(), Some("java.lang.IllegalArgumentException"));
    let results = client
        .bulk(&[
            jolokia::Request::read(STORAGE_SERVICE, "OperationMode"),
            jolokia::Request::read("org.apache.cassandra.db:type=Nope", "X"),
        ])
        .await
        .expect("bulk");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].as_ref().ok(), Some(&json!("NORMAL")));
    assert_eq!(
        results[1].as_ref().err().and_then(Error::error_type),
        Some("javax.management.InstanceNotFoundException")
    );
    // An explicit signature, and one that does not exist.
    let peer_ip = ring.peers.first().map(|p| p.0.clone()).expect("a peer");
    let tokens = client
        .request(&jolokia::Request::exec_signed(
            STORAGE_SERVICE,
            "getTokens",
            &["java.lang.String"],
            vec![json!(peer_ip)],
        ))
        .await
        .expect("getTokens(java.lang.String)");
    assert_eq!(tokens.as_array().map(Vec::len), Some(ring.num_tokens));
    let err = client
        .request(&jolokia::Request::exec_signed(
            STORAGE_SERVICE,
            "getTokens",
            &["int"],
            vec![json!(1)],
        ))
        .await
        .expect_err("no getTokens(int)");
    assert_eq!(err.jolokia_status(), Some(400));
    assert_eq!(err.error_type(), Some("java.lang.IllegalArgumentException"));

    // An HTTP-level error: a path outside the agent's context.
    let outside = url.replace("/jolokia/", "/nope/");
    let err = Jolokia::new(&outside)
        .expect("a client")
        .read(STORAGE_SERVICE, "OperationMode")
        .await
        .expect_err("no agent there");
    assert!(
        matches!(err, Error::HttpStatus { status: 404, .. }),
        "{err:?}"
    );
}

/// The nodetool commands that only read, against the peer.
pub async fn check_nodetool_reads(url: &str, ring: &RingSpec) {
    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    let run = |command: NodetoolCommand| {
        let storage = &storage;
        async move {
            let mut out = Vec::new();
            nodetool::run_with(storage, &command, &mut out)
                .await
                .unwrap_or_else(|e| panic!("nodetool {command:?}: {e}"));
            String::from_utf8(out).expect("utf-8 output")
        }
    };
    assert_eq!(run(NodetoolCommand::OperationMode).await, "NORMAL\n");
    assert_eq!(
        run(NodetoolCommand::Version).await,
        format!("ReleaseVersion: {}\n", ring.line.release_version())
    );
    let info = run(NodetoolCommand::Info).await;
    for expected in [
        format!("Release Version        : {}\n", ring.line.release_version()),
        format!("Cluster Name           : {}\n", ring.cluster_name),
        "Operation Mode         : NORMAL\n".to_string(),
        format!("Tokens                 : {}\n", ring.num_tokens),
        format!("Data Center            : {}\n", ring.datacenter),
        format!("Rack                   : {}\n", ring.self_rack),
    ] {
        assert!(info.contains(&expected), "{expected:?} in\n{info}");
    }

    let status = run(NodetoolCommand::Status).await;
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(
        lines[0],
        format!("Datacenter: {}", ring.datacenter),
        "{status}"
    );
    assert!(
        lines[4].starts_with("--  Address") && lines[4].contains("Owns"),
        "{status}"
    );
    let rows: BTreeMap<&str, Vec<&str>> = lines
        .iter()
        .filter(|l| {
            let b = l.as_bytes();
            b.len() > 3 && b"UD?".contains(&b[0]) && b"NJLM".contains(&b[1]) && b[2] == b' '
        })
        .map(|l| {
            let fields: Vec<&str> = l
                .split("  ")
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .collect();
            (fields[1], fields)
        })
        .collect();
    assert_eq!(rows.len(), ring.nodes().len(), "{status}");
    for (ip, state, rack) in ring.nodes() {
        let row = rows
            .get(ip.as_str())
            .unwrap_or_else(|| panic!("{ip} in\n{status}"));
        assert_eq!(row[0], state, "{status}");
        assert_eq!(row[3], ring.num_tokens.to_string(), "tokens of {ip}");
        assert!(row[4].ends_with('%'), "owns of {ip}: {status}");
        assert_eq!(row[5].len(), 36, "host id of {ip}: {status}");
        assert_eq!(row[6], rack, "{status}");
        if state.starts_with('D') {
            assert_eq!(row[2], "?", "no load gossiped by a down node");
        } else {
            assert_ne!(row[2], "?", "load of {ip}");
        }
    }
}

/// Drain twice (the second is a no-op), then a decommission of a drained
/// node is refused by the MBean (500). Leaves the node DRAINED.
pub async fn check_drain(url: &str) {
    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    let mut out = Vec::new();
    nodetool::run_with(&storage, &NodetoolCommand::Drain, &mut out)
        .await
        .expect("drain");
    assert_eq!(String::from_utf8_lossy(&out), "drained\n");
    assert_eq!(
        storage.operation_mode().await.expect("mode"),
        OperationMode::Drained
    );
    let mut out = Vec::new();
    nodetool::run_with(&storage, &NodetoolCommand::Drain, &mut out)
        .await
        .expect("a second drain");
    assert_eq!(String::from_utf8_lossy(&out), "already drained\n");
    // drain() itself is harmless on a drained node.
    storage.drain().await.expect("drain() again");

    let err = storage
        .decommission()
        .await
        .expect_err("decommission of a drained node");
    assert_eq!(err.jolokia_status(), Some(500), "{err}");
    assert_eq!(
        err.error_type(),
        Some("java.lang.UnsupportedOperationException")
    );
    assert_eq!(
        err.exception_message(),
        Some("Node in DRAINED state; wait for status to become normal or restart")
    );
}

/// 4.x/5.0 refuse a non-forced decommission when the ring has no more nodes
/// than the replication factor: the nodetool error carries the exception.
/// 5.0 then reports DECOMMISSION_FAILED (as a real 5.0 node does), 4.x stays
/// NORMAL.
pub async fn check_decommission_refused(url: &str, line: CassandraLine) {
    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    let mut out = Vec::new();
    let err = nodetool::run_with(&storage, &NodetoolCommand::Decommission, &mut out)
        .await
        .expect_err("refused");
    let nodetool::Error::Decommission { source } = &err else {
        panic!("expected a decommission error, got {err:?}");
    };
    assert_eq!(source.jolokia_status(), Some(500));
    assert_eq!(
        source.error_type(),
        Some("java.lang.UnsupportedOperationException")
    );
    let message = source.exception_message().unwrap_or_default();
    assert!(
        message.starts_with("Not enough live nodes to maintain replication factor in keyspace")
            && message.ends_with("Perform a forceful decommission to ignore."),
        "{message}"
    );
    assert!(err.to_string().contains(message), "{err}");
    assert!(out.is_empty());
    let expected = if line == CassandraLine::V5_0 {
        OperationMode::DecommissionFailed
    } else {
        OperationMode::Normal
    };
    assert_eq!(storage.operation_mode().await.expect("mode"), expected);
}

/// The whole decommission: the call blocks (a short timeout expires while
/// the node is LEAVING), a second call while it runs is refused on 3.11/4.x
/// (IllegalStateException, 500) and returns at once on 5.0, nodetool waits
/// for DECOMMISSIONED, and a later nodetool decommission is a no-op.
pub async fn check_decommission(url: &str, ring: &RingSpec, blocking_for: Duration) {
    let short = Jolokia::new(url)
        .expect("a client")
        .with_long_timeout(Duration::from_millis(300));
    let storage = StorageService::new(short);
    // Learn the version first (and warm the JVM up), so that the timed
    // call below is the exec alone.
    storage.release_version().await.expect("ReleaseVersion");
    let began = Instant::now();
    let err = storage
        .decommission()
        .await
        .expect_err("the call blocks longer than 300ms");
    assert!(
        matches!(err, Error::TimedOut { timeout, .. } if timeout == Duration::from_millis(300)),
        "the long timeout applied, got {err:?}"
    );
    // The node got the call: it is LEAVING (polled, for a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mode = storage.operation_mode().await.expect("mode");
        if mode == OperationMode::Leaving {
            break;
        }
        assert_eq!(mode, OperationMode::Normal, "before LEAVING");
        assert!(Instant::now() < deadline, "never LEAVING");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        storage
            .leaving_nodes()
            .await
            .expect("leaving")
            .contains(&ring.endpoint(&ring.self_ip))
    );

    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    let second = storage.decommission().await;
    if ring.line == CassandraLine::V5_0 {
        assert!(
            second.is_ok(),
            "5.0 returns when one is running: {second:?}"
        );
        assert_eq!(
            storage.operation_mode().await.expect("mode"),
            OperationMode::Leaving
        );
    } else {
        let err = second.expect_err("a second decommission while one runs");
        assert_eq!(err.jolokia_status(), Some(500));
        assert_eq!(err.error_type(), Some("java.lang.IllegalStateException"));
        assert_eq!(
            err.exception_message(),
            Some("Node is still decommissioning. Check nodetool netstats.")
        );
    }

    let mut out = Vec::new();
    nodetool::run_with(&storage, &NodetoolCommand::Decommission, &mut out)
        .await
        .expect("nodetool waits for the running decommission");
    assert_eq!(String::from_utf8_lossy(&out), "decommissioned\n");
    assert!(
        began.elapsed() >= blocking_for,
        "DECOMMISSIONED only after the blocking time"
    );
    assert_eq!(
        storage.operation_mode().await.expect("mode"),
        OperationMode::Decommissioned
    );
    let mut out = Vec::new();
    nodetool::run_with(&storage, &NodetoolCommand::Decommission, &mut out)
        .await
        .expect("again");
    assert_eq!(String::from_utf8_lossy(&out), "already decommissioned\n");
    let mut out = Vec::new();
    nodetool::run_with(&storage, &NodetoolCommand::Drain, &mut out)
        .await
        .expect("drain of a decommissioned node");
    assert_eq!(
        String::from_utf8_lossy(&out),
        "decommissioned: nothing to drain\n"
    );
}

/// Decommission from the start, through the facade: the right shape per
/// version succeeds and blocks until DECOMMISSIONED.
pub async fn check_facade_decommission(url: &str, blocking_for: Duration) {
    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    let began = Instant::now();
    storage.decommission().await.expect("decommission");
    assert!(began.elapsed() >= blocking_for, "the call blocked");
    assert_eq!(
        storage.operation_mode().await.expect("mode"),
        OperationMode::Decommissioned
    );
}

/// The Jolokia access policy the sidecar ships: its committed file
/// (`sidecar::jolokia_access` checks it is the rendering of its list).
pub fn shipped_policy() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sidecar/jolokia-access.xml")
}

/// Requests nothing in the operator makes, each with the `error` the real
/// Jolokia answers (status 403, `java.lang.Exception`) under the shipped
/// policy.
pub fn refused_by_policy() -> Vec<(Value, &'static str)> {
    let ss = STORAGE_SERVICE;
    vec![
        (
            json!({"type": "exec", "mbean": ss, "operation": "forceRemoveCompletion"}),
            "java.lang.Exception : Operation forceRemoveCompletion forbidden for MBean org.apache.cassandra.db:type=StorageService",
        ),
        (
            json!({"type": "exec", "mbean": ss, "operation": "removeNode", "arguments": ["x"]}),
            "java.lang.Exception : Operation removeNode forbidden for MBean org.apache.cassandra.db:type=StorageService",
        ),
        // Of the Gossiper, the sidecar calls reloadSeeds alone.
        (
            json!({"type": "exec", "mbean": jolokia::GOSSIPER, "operation": "assassinateEndpoint", "arguments": ["10.0.0.2"]}),
            "java.lang.Exception : Operation assassinateEndpoint forbidden for MBean org.apache.cassandra.net:type=Gossiper",
        ),
        (
            json!({"type": "exec", "mbean": "java.lang:type=Threading", "operation": "dumpAllThreads(boolean,boolean)", "arguments": [true, true]}),
            "java.lang.Exception : Operation dumpAllThreads(boolean,boolean) forbidden for MBean java.lang:type=Threading",
        ),
        (
            json!({"type": "exec", "mbean": "java.lang:type=Runtime", "operation": "getSystemProperties"}),
            "java.lang.Exception : Operation getSystemProperties forbidden for MBean java.lang:type=Runtime",
        ),
        (
            json!({"type": "read", "mbean": "java.lang:type=Runtime", "attribute": "SystemProperties"}),
            "java.lang.Exception : Reading attribute SystemProperties is forbidden for MBean java.lang:type=Runtime",
        ),
        (
            json!({"type": "write", "mbean": ss, "attribute": "OperationMode", "value": "NORMAL"}),
            "java.lang.Exception : Writing attribute OperationMode forbidden for MBean org.apache.cassandra.db:type=StorageService",
        ),
        (
            json!({"type": "search", "mbean": "*:*"}),
            "java.lang.Exception : Command type SEARCH not allowed due to policy used",
        ),
        (
            json!({"type": "list"}),
            "java.lang.Exception : Command type LIST not allowed due to policy used",
        ),
    ]
}

/// Under the shipped policy: every read of the sidecar and of nodetool
/// works, and each of [`refused_by_policy`] is refused with Jolokia's
/// answer, also through the client (a failed request with status 403).
pub async fn check_policy(url: &str, ring: &RingSpec) {
    check_nodetool_reads(url, ring).await;
    let storage = StorageService::new(Jolokia::new(url).expect("a client"));
    storage.ring().await.expect("the sidecar's ring read");
    storage.operation_mode().await.expect("the operation mode");
    for (request, error) in refused_by_policy() {
        let answer = post_json(url, &request).await;
        assert_eq!(
            (&answer["status"], &answer["error_type"], &answer["error"]),
            (&json!(403), &json!("java.lang.Exception"), &json!(error)),
            "{}: {request}",
            ring.line.arg()
        );
    }
    let err = Jolokia::new(url)
        .expect("a client")
        .request(&jolokia::Request::exec(
            STORAGE_SERVICE,
            "forceRemoveCompletion",
            vec![],
        ))
        .await
        .expect_err("refused by the policy");
    assert!(
        matches!(&err, Error::Jolokia { status: 403, .. }),
        "{err:?}"
    );
}
