//! A Jolokia client (protocol 7.x of Jolokia 1.x and 8.x of 2.x) and a typed,
//! version-aware facade over Cassandra's StorageService and EndpointSnitchInfo
//! MBeans.
//!
//! The HTTP calls are I/O; request building, response parsing, version and
//! operation-mode parsing and endpoint normalisation are pure and unit-tested
//! here. The contract test against a real Jolokia (jolokia-core 1.7.1) is
//! `tests/tests/jolokia_contract.rs` in the test world.
//!
//! Jolokia answers HTTP 200 even when a request failed: the outcome is the
//! `status` field inside each response object. A response is an error when
//! `status != 200` (1.x sends no `.error` flag, 2.x no stack trace by default).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

/// Where the Jolokia agent of the local Cassandra listens: where the
/// sidecar binds it (loopback only, [`crate::render::jvm::JOLOKIA_HOST`],
/// on [`crds::contract::JOLOKIA_PORT`]).
pub static DEFAULT_URL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "http://{}:{}/jolokia/",
        crate::render::jvm::JOLOKIA_HOST,
        crds::contract::JOLOKIA_PORT
    )
});
/// Timeout of an ordinary request (a read, a quick operation).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of a blocking operation (drain, decommission): decommission
/// streams the node's data away before it returns, which can take hours.
pub const DEFAULT_LONG_TIMEOUT: Duration = Duration::from_secs(12 * 60 * 60);

/// ObjectName of Cassandra's StorageService MBean.
pub const STORAGE_SERVICE: &str = "org.apache.cassandra.db:type=StorageService";
/// ObjectName of Cassandra's EndpointSnitchInfo MBean.
pub const ENDPOINT_SNITCH_INFO: &str = "org.apache.cassandra.db:type=EndpointSnitchInfo";
/// ObjectName of Cassandra's FailureDetector MBean.
pub const FAILURE_DETECTOR: &str = "org.apache.cassandra.net:type=FailureDetector";
/// ObjectName of Cassandra's Gossiper MBean.
pub const GOSSIPER: &str = "org.apache.cassandra.net:type=Gossiper";
/// ObjectName of Cassandra's MessagingService MBean.
pub const MESSAGING_SERVICE: &str = "org.apache.cassandra.net:type=MessagingService";

/// Errors of the Jolokia client and of the StorageService facade.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be built.
    #[error("building the http client failed: {source}")]
    BuildClient { source: reqwest::Error },
    /// Nothing listens at the URL (yet): Cassandra, and its Jolokia agent,
    /// is not up.
    #[error("connecting to jolokia at {url} failed (is cassandra running?): {cause}")]
    Connect {
        url: String,
        /// The error and its causes, e.g. "... Connection refused".
        cause: String,
        source: reqwest::Error,
    },
    /// The request got no complete answer within its timeout.
    #[error("jolokia request to {url} timed out after {timeout:?}")]
    TimedOut { url: String, timeout: Duration },
    /// The request failed on the way (connection reset, broken body, ...).
    #[error("sending the jolokia request to {url} failed: {cause}")]
    Send {
        url: String,
        cause: String,
        source: reqwest::Error,
    },
    /// The agent could not handle the HTTP request at all (wrong path, ...).
    #[error("jolokia at {url} answered http status {status}: {body}")]
    HttpStatus {
        url: String,
        status: u16,
        body: String,
    },
    /// Jolokia handled the request, and the request failed (`status != 200`
    /// inside the response): unknown MBean/attribute/operation (404), bad
    /// arguments (400), an exception thrown by the MBean (500), ...
    #[error(
        "jolokia {request} failed with status {status}: {error_type}: {}",
        without_class(error_type, message)
    )]
    Jolokia {
        /// What was asked, e.g. `exec decommission`.
        request: String,
        status: u16,
        /// Java class of the exception, e.g. `java.lang.UnsupportedOperationException`.
        error_type: String,
        /// The `error` text as sent (1.x: `"<class> : <message>"`).
        message: String,
    },
    /// The answer is not the JSON Jolokia sends.
    #[error("decoding the jolokia response to {request} failed: {reason}")]
    DecodeResponse { request: String, reason: String },
}

impl Error {
    /// True when Jolokia could not be reached at all (Cassandra not up yet).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }

    /// The Java exception class of a Jolokia error response.
    pub fn error_type(&self) -> Option<&str> {
        match self {
            Error::Jolokia { error_type, .. } => Some(error_type),
            _ => None,
        }
    }

    /// What the MBean said when it threw (a Cassandra refusal such as "Not
    /// enough live nodes to maintain replication factor..."), without the
    /// exception's class; `None` when the request did not reach the MBean.
    pub fn thrown_message(&self) -> Option<&str> {
        match self {
            Error::Jolokia {
                status: 500,
                error_type,
                message,
                ..
            } => Some(without_class(error_type, message)),
            _ => None,
        }
    }

    /// The `status` of a Jolokia error response.
    pub fn jolokia_status(&self) -> Option<u16> {
        match self {
            Error::Jolokia { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The exception's own message of a Jolokia error response, without the
    /// `"<class> : "` prefix that Jolokia 1.x puts in front of it.
    pub fn exception_message(&self) -> Option<&str> {
        match self {
            Error::Jolokia {
                error_type,
                message,
                ..
            } => Some(without_class(error_type, message)),
            _ => None,
        }
    }
}

/// An `error` text without the `"<class> : "` prefix of Jolokia 1.x.
fn without_class<'a>(error_type: &str, message: &'a str) -> &'a str {
    message
        .strip_prefix(error_type)
        .and_then(|m| m.strip_prefix(" : "))
        .unwrap_or(message)
}

/// One Jolokia request (the POST body form).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    body: Value,
    /// Short description for error messages, e.g. `read OperationMode`.
    label: String,
}

impl Request {
    /// Read one attribute.
    pub fn read(mbean: &str, attribute: &str) -> Self {
        Request {
            body: json!({"type": "read", "mbean": mbean, "attribute": attribute}),
            label: format!("read {attribute}"),
        }
    }

    /// Read several attributes of one MBean at once: the value is an object
    /// keyed by attribute name. If one attribute does not exist the whole
    /// request fails (404).
    pub fn read_many(mbean: &str, attributes: &[&str]) -> Self {
        Request {
            body: json!({"type": "read", "mbean": mbean, "attribute": attributes}),
            label: format!("read {}", attributes.join(",")),
        }
    }

    /// Execute an operation. `operation` may carry a signature, e.g.
    /// `getTokens(java.lang.String)`, to pick one of overloaded operations.
    pub fn exec(mbean: &str, operation: &str, arguments: Vec<Value>) -> Self {
        Request {
            body: json!({"type": "exec", "mbean": mbean, "operation": operation, "arguments": arguments}),
            label: format!("exec {operation}"),
        }
    }

    /// Execute one overload of an operation, named by its parameter types
    /// (fully qualified class names or primitive names), e.g.
    /// `("getTokens", &["java.lang.String"])` → `getTokens(java.lang.String)`.
    pub fn exec_signed(
        mbean: &str,
        operation: &str,
        signature: &[&str],
        arguments: Vec<Value>,
    ) -> Self {
        let signed = format!("{operation}({})", signature.join(","));
        Request::exec(mbean, &signed, arguments)
    }

    /// The names of the MBeans matching an ObjectName pattern.
    pub fn search(pattern: &str) -> Self {
        Request {
            body: json!({"type": "search", "mbean": pattern}),
            label: format!("search {pattern}"),
        }
    }

    /// The agent's version.
    pub fn version() -> Self {
        Request {
            body: json!({"type": "version"}),
            label: "version".to_string(),
        }
    }

    /// The JSON object that is POSTed.
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// Short description, e.g. `exec decommission`.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// Turn one response object into its `value`, or into [`Error::Jolokia`]
/// when its `status` is not 200. Pure.
pub fn parse_response(label: &str, response: Value) -> Result<Value, Error> {
    let Value::Object(mut object) = response else {
        return Err(Error::DecodeResponse {
            request: label.to_string(),
            reason: format!("expected a JSON object, got {}", kind_of(&response)),
        });
    };
    let status = object
        .get("status")
        .and_then(Value::as_u64)
        .ok_or_else(|| Error::DecodeResponse {
            request: label.to_string(),
            reason: "no numeric \"status\" in the response".to_string(),
        })?;
    if status != 200 {
        let text = |key: &str| {
            object
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return Err(Error::Jolokia {
            request: label.to_string(),
            status: u16::try_from(status).unwrap_or(u16::MAX),
            error_type: text("error_type"),
            message: text("error"),
        });
    }
    // A void operation answers "value": null; a success without "value" is
    // not Jolokia.
    object.remove("value").ok_or_else(|| Error::DecodeResponse {
        request: label.to_string(),
        reason: "status 200 without a \"value\"".to_string(),
    })
}

/// Parse the answer to a bulk request: one result per request, in order. Pure.
pub fn parse_bulk_response(
    requests: &[Request],
    response: Value,
) -> Result<Vec<Result<Value, Error>>, Error> {
    let label = "bulk request";
    let Value::Array(items) = response else {
        // A bulk request that Jolokia could not parse at all gets one error
        // object instead of an array.
        parse_response(label, response)?;
        return Err(Error::DecodeResponse {
            request: label.to_string(),
            reason: "expected a JSON array".to_string(),
        });
    };
    if items.len() != requests.len() {
        return Err(Error::DecodeResponse {
            request: label.to_string(),
            reason: format!("{} responses to {} requests", items.len(), requests.len()),
        });
    }
    Ok(requests
        .iter()
        .zip(items)
        .map(|(request, item)| parse_response(&request.label, item))
        .collect())
}

/// Deserialize a response value into a Rust type. Pure.
pub fn decode<T: DeserializeOwned>(label: &str, value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::DecodeResponse {
        request: label.to_string(),
        reason: e.to_string(),
    })
}

/// An error and its sources, joined by ": " (reqwest's own message leaves
/// out "Connection refused").
fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The `value` of a `version` request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct AgentVersion {
    /// The agent's version, e.g. `1.7.1`.
    pub agent: String,
    /// The protocol version, e.g. `7.2` (1.x) or `8.2` (2.x).
    pub protocol: String,
}

/// A Jolokia client: POSTs JSON requests to one agent.
#[derive(Debug, Clone)]
pub struct Jolokia {
    http: reqwest::Client,
    url: String,
    timeout: Duration,
    long_timeout: Duration,
}

impl Jolokia {
    /// A client for the agent at `url` (e.g. [`DEFAULT_URL`]), with
    /// [`DEFAULT_TIMEOUT`] and [`DEFAULT_LONG_TIMEOUT`].
    pub fn new(url: &str) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            // The agent is on loopback: a proxy from the environment would
            // only get in the way.
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|source| Error::BuildClient { source })?;
        Ok(Jolokia {
            http,
            url: url.to_string(),
            timeout: DEFAULT_TIMEOUT,
            long_timeout: DEFAULT_LONG_TIMEOUT,
        })
    }

    /// Set the timeout of ordinary requests.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set the timeout of blocking operations ([`Jolokia::exec_long`]).
    pub fn with_long_timeout(mut self, timeout: Duration) -> Self {
        self.long_timeout = timeout;
        self
    }

    /// The agent's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The timeout of ordinary requests.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The timeout of blocking operations.
    pub fn long_timeout(&self) -> Duration {
        self.long_timeout
    }

    /// POST a JSON body and return the JSON answer.
    async fn post(&self, body: &Value, timeout: Duration) -> Result<Value, Error> {
        let url = &self.url;
        let classify = |source: reqwest::Error| {
            if source.is_timeout() {
                Error::TimedOut {
                    url: url.clone(),
                    timeout,
                }
            } else if source.is_connect() {
                Error::Connect {
                    url: url.clone(),
                    cause: cause_chain(&source),
                    source,
                }
            } else {
                Error::Send {
                    url: url.clone(),
                    cause: cause_chain(&source),
                    source,
                }
            }
        };
        let response = self
            .http
            .post(url)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status();
        // Jolokia 1.x answers text/plain: parse the bytes, whatever the
        // content type says.
        let bytes = response.bytes().await.map_err(classify)?;
        if !status.is_success() {
            return Err(Error::HttpStatus {
                url: url.clone(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::DecodeResponse {
            request: body
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("bulk")
                .to_string(),
            reason: format!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        })
    }

    /// Send one request with the ordinary timeout; its `value` on success.
    pub async fn request(&self, request: &Request) -> Result<Value, Error> {
        self.request_with_timeout(request, self.timeout).await
    }

    /// Send one request with the given timeout.
    pub async fn request_with_timeout(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> Result<Value, Error> {
        let response = self.post(&request.body, timeout).await?;
        parse_response(&request.label, response)
    }

    /// Send several requests in one HTTP round trip. The outer error is a
    /// transport failure; each request has its own result.
    pub async fn bulk(&self, requests: &[Request]) -> Result<Vec<Result<Value, Error>>, Error> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let body = Value::Array(requests.iter().map(|r| r.body.clone()).collect());
        let response = self.post(&body, self.timeout).await?;
        parse_bulk_response(requests, response)
    }

    /// Read one attribute.
    pub async fn read(&self, mbean: &str, attribute: &str) -> Result<Value, Error> {
        self.request(&Request::read(mbean, attribute)).await
    }

    /// Read one attribute into a Rust type.
    pub async fn read_as<T: DeserializeOwned>(
        &self,
        mbean: &str,
        attribute: &str,
    ) -> Result<T, Error> {
        let request = Request::read(mbean, attribute);
        let value = self.request(&request).await?;
        decode(&request.label, value)
    }

    /// Read several attributes of one MBean: attribute name → value.
    pub async fn read_many(
        &self,
        mbean: &str,
        attributes: &[&str],
    ) -> Result<Map<String, Value>, Error> {
        let request = Request::read_many(mbean, attributes);
        let value = self.request(&request).await?;
        decode(&request.label, value)
    }

    /// Execute an operation with the ordinary timeout.
    pub async fn exec(
        &self,
        mbean: &str,
        operation: &str,
        arguments: Vec<Value>,
    ) -> Result<Value, Error> {
        self.request(&Request::exec(mbean, operation, arguments))
            .await
    }

    /// Execute a blocking operation (drain, decommission) with the long
    /// timeout.
    pub async fn exec_long(
        &self,
        mbean: &str,
        operation: &str,
        arguments: Vec<Value>,
    ) -> Result<Value, Error> {
        self.request_with_timeout(
            &Request::exec(mbean, operation, arguments),
            self.long_timeout,
        )
        .await
    }

    /// The names of the MBeans matching an ObjectName pattern.
    pub async fn search(&self, pattern: &str) -> Result<Vec<String>, Error> {
        let request = Request::search(pattern);
        let value = self.request(&request).await?;
        decode(&request.label, value)
    }

    /// The agent's version.
    pub async fn version(&self) -> Result<AgentVersion, Error> {
        let request = Request::version();
        let value = self.request(&request).await?;
        decode(&request.label, value)
    }
}

/// A Cassandra release version, from `ReleaseVersion` (e.g. `4.1.8`,
/// `5.0-beta1`, `3.11.19-SNAPSHOT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CassandraVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// As Cassandra reported it.
    pub raw: String,
}

impl CassandraVersion {
    /// Parse a release version; `None` when it does not start with
    /// `<major>.<minor>`.
    pub fn parse(raw: &str) -> Option<Self> {
        let numeric: &str = raw
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap_or_default();
        let mut parts = numeric.split('.').filter(|p| !p.is_empty());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(CassandraVersion {
            major,
            minor,
            patch,
            raw: raw.to_string(),
        })
    }

    /// 4.0 added the `...WithPort` attributes (`ip:storage_port`).
    pub fn has_with_port(&self) -> bool {
        self.major >= 4
    }

    /// 4.0 changed `decommission()` into `decommission(boolean force)`.
    pub fn decommission_takes_force(&self) -> bool {
        self.major >= 4
    }

    /// 4.0 added `getParentRepairStatus(int)` (CASSANDRA-13480): before,
    /// a repair's outcome reached a client only as JMX notifications.
    pub fn has_parent_repair_status(&self) -> bool {
        self.major >= 4
    }

    /// 5.0 removed the deprecated `HostIdMap` attribute.
    pub fn has_host_id_map(&self) -> bool {
        self.major < 5
    }
}

impl fmt::Display for CassandraVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// `StorageService.Mode`, as `OperationMode` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationMode {
    Starting,
    Normal,
    Joining,
    /// 5.0: bootstrap failed.
    JoiningFailed,
    Leaving,
    Decommissioned,
    /// 5.0: decommission was interrupted or failed; it may be retried.
    DecommissionFailed,
    Moving,
    Draining,
    Drained,
    /// A value this code does not know (a newer Cassandra).
    Other(String),
}

impl OperationMode {
    /// Parse the enum constant name (case-insensitive, as older Javadoc
    /// spells the modes in lower case).
    pub fn parse(mode: &str) -> Self {
        match mode.trim().to_ascii_uppercase().as_str() {
            "STARTING" => OperationMode::Starting,
            "NORMAL" => OperationMode::Normal,
            "JOINING" => OperationMode::Joining,
            "JOINING_FAILED" => OperationMode::JoiningFailed,
            "LEAVING" => OperationMode::Leaving,
            "DECOMMISSIONED" => OperationMode::Decommissioned,
            "DECOMMISSION_FAILED" => OperationMode::DecommissionFailed,
            "MOVING" => OperationMode::Moving,
            "DRAINING" => OperationMode::Draining,
            "DRAINED" => OperationMode::Drained,
            _ => OperationMode::Other(mode.to_string()),
        }
    }

    /// The name Cassandra uses.
    pub fn as_str(&self) -> &str {
        match self {
            OperationMode::Starting => "STARTING",
            OperationMode::Normal => "NORMAL",
            OperationMode::Joining => "JOINING",
            OperationMode::JoiningFailed => "JOINING_FAILED",
            OperationMode::Leaving => "LEAVING",
            OperationMode::Decommissioned => "DECOMMISSIONED",
            OperationMode::DecommissionFailed => "DECOMMISSION_FAILED",
            OperationMode::Moving => "MOVING",
            OperationMode::Draining => "DRAINING",
            OperationMode::Drained => "DRAINED",
            OperationMode::Other(mode) => mode,
        }
    }
}

impl fmt::Display for OperationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An endpoint as a node's gossip knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GossipEndpoint {
    /// Its broadcast address, bare (`10.0.0.5`).
    pub address: String,
    /// The node's failure detector sees it up.
    pub up: bool,
    /// The gossip generation the node knows it by.
    pub generation: Option<i64>,
}

/// Each endpoint's generation in a FailureDetector `AllEndpointStates`
/// dump (`FailureDetector.appendEndpointState`, 3.11 to 5.0): a line with
/// the endpoint (`/10.0.0.5`, or `/10.0.0.5:7000` in the `WithPort` form),
/// then indented `  generation:N`, `  heartbeat:N` and one line per
/// application state. Addresses without `/` and port. Pure.
pub fn endpoint_generations(dump: &str) -> BTreeMap<String, i64> {
    let mut generations = BTreeMap::new();
    let mut endpoint: Option<&str> = None;
    for line in dump.lines() {
        if !line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
            endpoint = Some(endpoint_host(line));
        } else if let (Some(address), Some(value)) =
            (endpoint, line.trim().strip_prefix("generation:"))
            && let Ok(generation) = value.trim().parse()
        {
            generations.insert(address.to_string(), generation);
        }
    }
    generations
}

/// The host part of an endpoint as Cassandra's MBeans print it: strips the
/// `hostname/` prefix of `InetAddress.toString()` (FailureDetector keys such
/// as `/10.0.0.5`, 3.11 `Ownership` keys), the `:storage_port` suffix of the
/// `...WithPort` forms (`10.0.0.5:7000`) and IPv6 brackets (`[::1]:7000`).
/// A bare IPv6 address (`::1`, 3.11) is returned as it is. Pure.
pub fn endpoint_host(endpoint: &str) -> &str {
    let endpoint = endpoint.trim();
    let address = match endpoint.rfind('/') {
        Some(slash) => &endpoint[slash + 1..],
        None => endpoint,
    };
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match address.split_once(':') {
        // Exactly one colon: IPv4 (or a host name) with a port.
        Some((host, port)) if !port.contains(':') => host,
        _ => address,
    }
}

/// The ring as one node sees it, keyed by endpoint (`ip:port` on 4.0+, `ip`
/// on 3.11).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ring {
    pub live: Vec<String>,
    pub unreachable: Vec<String>,
    pub joining: Vec<String>,
    pub leaving: Vec<String>,
    pub moving: Vec<String>,
    /// Endpoint → host ID.
    pub host_ids: BTreeMap<String, String>,
    /// Endpoint → human-readable load (only nodes whose load is known).
    pub loads: BTreeMap<String, String>,
    /// Endpoint host (see [`endpoint_host`]) → share of the token ring
    /// (0..=1), when the node reported it.
    pub ownership: Option<BTreeMap<String, f64>>,
}

impl Ring {
    /// Every endpoint the node knows of, sorted and without duplicates.
    pub fn endpoints(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .live
            .iter()
            .chain(&self.unreachable)
            .chain(&self.joining)
            .chain(&self.leaving)
            .chain(&self.moving)
            .chain(self.host_ids.keys())
            .cloned()
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// nodetool's two-letter state of an endpoint: U/D (up, down or
    /// unknown-as-down) and N/J/L/M (normal, joining, leaving, moving).
    pub fn state(&self, endpoint: &str) -> String {
        let has = |list: &[String]| list.iter().any(|e| e == endpoint);
        let up = if has(&self.live) {
            'U'
        } else if has(&self.unreachable) {
            'D'
        } else {
            '?'
        };
        let state = if has(&self.joining) {
            'J'
        } else if has(&self.leaving) {
            'L'
        } else if has(&self.moving) {
            'M'
        } else {
            'N'
        };
        format!("{up}{state}")
    }
}

/// The names of the attributes the facade reads, per Cassandra version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingAttributes {
    pub live: &'static str,
    pub unreachable: &'static str,
    pub joining: &'static str,
    pub leaving: &'static str,
    pub moving: &'static str,
    pub host_ids: &'static str,
    pub loads: &'static str,
    pub ownership: &'static str,
}

impl RingAttributes {
    /// The `...WithPort` attributes on 4.0+, the plain ones on 3.11.
    pub fn for_version(version: &CassandraVersion) -> Self {
        if version.has_with_port() {
            RingAttributes {
                live: "LiveNodesWithPort",
                unreachable: "UnreachableNodesWithPort",
                joining: "JoiningNodesWithPort",
                leaving: "LeavingNodesWithPort",
                moving: "MovingNodesWithPort",
                host_ids: "EndpointWithPortToHostId",
                loads: "LoadMapWithPort",
                ownership: "OwnershipWithPort",
            }
        } else {
            RingAttributes {
                live: "LiveNodes",
                unreachable: "UnreachableNodes",
                joining: "JoiningNodes",
                leaving: "LeavingNodes",
                moving: "MovingNodes",
                host_ids: "EndpointToHostId",
                loads: "LoadMap",
                ownership: "Ownership",
            }
        }
    }
}

/// Build a [`Ring`] from the `value` of a multi-attribute read of the
/// [`RingAttributes`] (without ownership) and, separately, the ownership
/// read's result. Pure.
pub fn ring_from_values(
    attributes: &RingAttributes,
    mut values: Map<String, Value>,
    ownership: Option<Value>,
) -> Result<Ring, Error> {
    let label = "read ring";
    let mut take = |name: &str| values.remove(name).unwrap_or(Value::Null);
    let list = |value: Value| -> Result<Vec<String>, Error> {
        if value.is_null() {
            return Ok(Vec::new());
        }
        decode(label, value)
    };
    let map = |value: Value| -> Result<BTreeMap<String, String>, Error> {
        if value.is_null() {
            return Ok(BTreeMap::new());
        }
        decode(label, value)
    };
    let ring = Ring {
        live: list(take(attributes.live))?,
        unreachable: list(take(attributes.unreachable))?,
        joining: list(take(attributes.joining))?,
        leaving: list(take(attributes.leaving))?,
        moving: list(take(attributes.moving))?,
        host_ids: map(take(attributes.host_ids))?,
        loads: map(take(attributes.loads))?,
        ownership: match ownership {
            None => None,
            Some(value) => {
                let shares: BTreeMap<String, f64> = decode(label, value)?;
                Some(
                    shares
                        .into_iter()
                        .map(|(endpoint, share)| (endpoint_host(&endpoint).to_string(), share))
                        .collect(),
                )
            }
        },
    };
    Ok(ring)
}

/// `forceKeyspaceCleanup` as `nodetool cleanup` calls it: the overload
/// named by its signature (`int jobs, String keyspace, String... tables`;
/// the other, deprecated, takes no job count). The agent's access policy
/// matches an operation by the name the request gives, signature included,
/// so the policy lists this very name (`crate::jolokia_access`).
pub const CLEANUP: &str = "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)";

/// `upgradeSSTables` as `nodetool upgradesstables` calls it on 4.1 and
/// 5.0 (`NodeProbe.upgradeSSTables`: keyspace, `excludeCurrentVersion`,
/// `maxSSTableTimestamp` = `Long.MAX_VALUE` unless `-t`, jobs, tables);
/// the overload is named by its signature (four in 4.1/5.0), and the
/// access policy lists this very name.
pub const UPGRADE_SSTABLES: &str =
    "upgradeSSTables(java.lang.String,boolean,long,int,[Ljava.lang.String;)";
/// `upgradeSSTables(keyspace, excludeCurrentVersion, jobs, tables)`: what
/// 3.11 and 4.0 have (no `maxSSTableTimestamp` before 4.1,
/// CASSANDRA-16837).
pub const UPGRADE_SSTABLES_BEFORE_4_1: &str =
    "upgradeSSTables(java.lang.String,boolean,int,[Ljava.lang.String;)";
/// `StorageService.forceTerminateAllRepairSessions()` (3.11 to 5.0).
pub const TERMINATE_REPAIRS: &str = "forceTerminateAllRepairSessions";
/// `StorageService.forceKeyspaceFlush(String keyspace, String... tables)`
/// (3.11 to 5.0, one overload): what `nodetool flush KEYSPACE` calls.
pub const FLUSH: &str = "forceKeyspaceFlush";

/// The `exec` of [`CLEANUP`] for a keyspace, all its tables, `jobs`
/// sstables at once (0: as many as compaction allows).
pub fn cleanup_request(keyspace: &str, jobs: u32) -> Request {
    Request::exec(
        STORAGE_SERVICE,
        CLEANUP,
        vec![json!(jobs), json!(keyspace), json!([])],
    )
}

/// The `exec` of an upgradesstables of a keyspace's sstables that are not
/// of the current version, all tables, for a Cassandra version (see
/// [`UPGRADE_SSTABLES`]).
pub fn upgrade_sstables_request(version: &CassandraVersion, keyspace: &str, jobs: u32) -> Request {
    if (version.major, version.minor) >= (4, 1) {
        Request::exec(
            STORAGE_SERVICE,
            UPGRADE_SSTABLES,
            vec![
                json!(keyspace),
                json!(true),
                json!(i64::MAX),
                json!(jobs),
                json!([]),
            ],
        )
    } else {
        Request::exec(
            STORAGE_SERVICE,
            UPGRADE_SSTABLES_BEFORE_4_1,
            vec![json!(keyspace), json!(true), json!(jobs), json!([])],
        )
    }
}

/// The int status of a compaction-manager operation (cleanup,
/// upgradesstables: `AllSSTableOpStatus.statusCode`). Pure.
fn status_code(label: &str, value: Value) -> Result<i64, Error> {
    value.as_i64().ok_or_else(|| Error::DecodeResponse {
        request: label.to_string(),
        reason: format!("the status is not an int: {value}"),
    })
}

/// Typed, version-aware access to Cassandra's StorageService (and
/// EndpointSnitchInfo) through Jolokia. Learns the Cassandra version from
/// `ReleaseVersion` on first need and keeps it.
#[derive(Debug)]
pub struct StorageService {
    jolokia: Jolokia,
    version: OnceCell<CassandraVersion>,
}

impl StorageService {
    pub fn new(jolokia: Jolokia) -> Self {
        StorageService {
            jolokia,
            version: OnceCell::new(),
        }
    }

    /// The underlying client.
    pub fn jolokia(&self) -> &Jolokia {
        &self.jolokia
    }

    async fn read<T: DeserializeOwned>(&self, attribute: &str) -> Result<T, Error> {
        self.jolokia.read_as(STORAGE_SERVICE, attribute).await
    }

    /// `ReleaseVersion`, parsed (read once, then cached).
    pub async fn release_version(&self) -> Result<&CassandraVersion, Error> {
        self.version
            .get_or_try_init(|| async {
                let raw: String = self.read("ReleaseVersion").await?;
                CassandraVersion::parse(&raw).ok_or_else(|| Error::DecodeResponse {
                    request: "read ReleaseVersion".to_string(),
                    reason: format!("{raw:?} is not a cassandra version"),
                })
            })
            .await
    }

    async fn attributes(&self) -> Result<RingAttributes, Error> {
        Ok(RingAttributes::for_version(self.release_version().await?))
    }

    /// `OperationMode`.
    pub async fn operation_mode(&self) -> Result<OperationMode, Error> {
        let mode: String = self.read("OperationMode").await?;
        Ok(OperationMode::parse(&mode))
    }

    /// `ClusterName`.
    pub async fn cluster_name(&self) -> Result<String, Error> {
        self.read("ClusterName").await
    }

    /// `LocalHostId`: `None` until the node's own host ID is in its token
    /// metadata.
    pub async fn local_host_id(&self) -> Result<Option<String>, Error> {
        self.read("LocalHostId").await
    }

    /// `LoadString`: this node's live data size, human-readable.
    pub async fn load_string(&self) -> Result<String, Error> {
        self.read("LoadString").await
    }

    /// `Tokens`: this node's tokens.
    pub async fn tokens(&self) -> Result<Vec<String>, Error> {
        self.read("Tokens").await
    }

    /// `getTokens(String)`: the tokens of another endpoint, in any form the
    /// node lists it (see [`tokens_request`]).
    pub async fn tokens_of(&self, endpoint: &str) -> Result<Vec<String>, Error> {
        let request = tokens_request(endpoint);
        let value = self.jolokia.request(&request).await?;
        decode(request.label(), value)
    }

    /// Live nodes (`LiveNodesWithPort` on 4.0+, `LiveNodes` on 3.11).
    pub async fn live_nodes(&self) -> Result<Vec<String>, Error> {
        self.read(self.attributes().await?.live).await
    }

    /// What this node's gossip says of every endpoint it knows, in one
    /// read of the FailureDetector: up or down (`SimpleStates`) and the
    /// generation it knows it by (`AllEndpointStates`). The names without
    /// port are deprecated since 4.0 but served by 3.11 to 5.0 alike
    /// (JMX-FACTS §4); addresses come back without the `/` and port.
    pub async fn gossip(&self) -> Result<Vec<GossipEndpoint>, Error> {
        let request = Request::read_many(FAILURE_DETECTOR, &["SimpleStates", "AllEndpointStates"]);
        let value = self.jolokia.request(&request).await?;
        let mut values: Map<String, Value> = decode(&request.label, value)?;
        let states: BTreeMap<String, String> = decode(
            &request.label,
            values.remove("SimpleStates").unwrap_or_default(),
        )?;
        let dump: String = decode(
            &request.label,
            values.remove("AllEndpointStates").unwrap_or_default(),
        )?;
        let generations = endpoint_generations(&dump);
        Ok(states
            .iter()
            .map(|(endpoint, state)| {
                let address = endpoint_host(endpoint).to_string();
                GossipEndpoint {
                    generation: generations.get(&address).copied(),
                    up: state == "UP",
                    address,
                }
            })
            .collect())
    }

    /// `Gossiper.reloadSeeds()` (4.0+, CASSANDRA-14190): the node reads
    /// its seed provider again (SimpleSeedProvider: the seeds of
    /// cassandra.yaml) and gossips with those seeds from now on. The seeds
    /// it has then, or `None` when it could not read the list (it logs why
    /// and keeps the ones it had). 3.11 has no such operation.
    pub async fn reload_seeds(&self) -> Result<Option<Vec<String>>, Error> {
        let value = self.jolokia.exec(GOSSIPER, "reloadSeeds", vec![]).await?;
        decode("exec reloadSeeds", value)
    }

    /// `MessagingService.reloadSslCertificates()` (4.0+, what `nodetool
    /// reloadssl` calls; StorageService has no such operation): the node
    /// reads its keystore and truststore files again, for new connections;
    /// open ones keep their session. A file it cannot read is logged
    /// ("Failed to hot reload") and the old context kept: the call still
    /// succeeds.
    pub async fn reload_ssl_certificates(&self) -> Result<(), Error> {
        self.jolokia
            .exec(MESSAGING_SERVICE, "reloadSslCertificates", vec![])
            .await?;
        Ok(())
    }

    /// Unreachable nodes.
    pub async fn unreachable_nodes(&self) -> Result<Vec<String>, Error> {
        self.read(self.attributes().await?.unreachable).await
    }

    /// Joining nodes.
    pub async fn joining_nodes(&self) -> Result<Vec<String>, Error> {
        self.read(self.attributes().await?.joining).await
    }

    /// Leaving nodes.
    pub async fn leaving_nodes(&self) -> Result<Vec<String>, Error> {
        self.read(self.attributes().await?.leaving).await
    }

    /// Moving nodes.
    pub async fn moving_nodes(&self) -> Result<Vec<String>, Error> {
        self.read(self.attributes().await?.moving).await
    }

    /// Endpoint → host ID (`EndpointWithPortToHostId` on 4.0+,
    /// `EndpointToHostId` on 3.11; `HostIdMap`, its deprecated alias, is
    /// gone in 5.0).
    pub async fn endpoint_to_host_id(&self) -> Result<BTreeMap<String, String>, Error> {
        self.read(self.attributes().await?.host_ids).await
    }

    /// The token owners (as [`StorageService::endpoint_to_host_id`]) and
    /// this node's `LocalHostId`, in one read of the MBean: the gossip
    /// record reads both at every tick, in every member.
    pub async fn owners_and_host_id(
        &self,
    ) -> Result<(BTreeMap<String, String>, Option<String>), Error> {
        let owners = self.attributes().await?.host_ids;
        let request = Request::read_many(STORAGE_SERVICE, &[owners, "LocalHostId"]);
        let value = self.jolokia.request(&request).await?;
        let mut values: Map<String, Value> = decode(&request.label, value)?;
        Ok((
            decode(&request.label, values.remove(owners).unwrap_or_default())?,
            decode(
                &request.label,
                values.remove("LocalHostId").unwrap_or_default(),
            )?,
        ))
    }

    /// Endpoint → load (`LoadMapWithPort` on 4.0+, `LoadMap` on 3.11).
    pub async fn load_map(&self) -> Result<BTreeMap<String, String>, Error> {
        self.read(self.attributes().await?.loads).await
    }

    /// The whole ring in one round trip (a multi-attribute read plus the
    /// ownership read, which is allowed to fail: it is then `None`).
    pub async fn ring(&self) -> Result<Ring, Error> {
        let attributes = self.attributes().await?;
        let many = Request::read_many(
            STORAGE_SERVICE,
            &[
                attributes.live,
                attributes.unreachable,
                attributes.joining,
                attributes.leaving,
                attributes.moving,
                attributes.host_ids,
                attributes.loads,
            ],
        );
        let ownership = Request::read(STORAGE_SERVICE, attributes.ownership);
        let mut results = self
            .jolokia
            .bulk(&[many.clone(), ownership])
            .await?
            .into_iter();
        let values = results.next().ok_or_else(|| Error::DecodeResponse {
            request: many.label().to_string(),
            reason: "missing from the bulk response".to_string(),
        })??;
        let values: Map<String, Value> = decode(many.label(), values)?;
        let ownership = results.next().and_then(Result::ok);
        ring_from_values(&attributes, values, ownership)
    }

    /// `drain()`: flush and stop accepting writes; blocks until DRAINED
    /// (long timeout). Calling it on a drained node is harmless.
    pub async fn drain(&self) -> Result<(), Error> {
        self.jolokia
            .exec_long(STORAGE_SERVICE, "drain", Vec::new())
            .await?;
        Ok(())
    }

    /// `forceKeyspaceCleanup(0, keyspace)` as NodeProbe calls it (3.11,
    /// 4.x, 5.0; the overload named by its signature, all tables, as many
    /// jobs as compaction allows); blocks until done (long timeout). The
    /// status: 0 SUCCESSFUL, 1 ABORTED (the node has not joined), 2
    /// UNABLE_TO_CANCEL.
    pub async fn cleanup(&self, keyspace: &str) -> Result<i64, Error> {
        self.cleanup_with_jobs(keyspace, 0).await
    }

    /// `forceKeyspaceCleanup(jobs, keyspace)`: [`StorageService::cleanup`]
    /// with a bound on the sstables cleaned at once (`nodetool cleanup`'s
    /// default is 2: the maintenance leaves the other compaction threads
    /// to the node's own compactions).
    pub async fn cleanup_with_jobs(&self, keyspace: &str, jobs: u32) -> Result<i64, Error> {
        let request = cleanup_request(keyspace, jobs);
        let value = self
            .jolokia
            .request_with_timeout(&request, self.jolokia.long_timeout())
            .await?;
        status_code(request.label(), value)
    }

    /// `upgradeSSTables` of a keyspace's old-format sstables as `nodetool
    /// upgradesstables` calls it for this version (see
    /// [`upgrade_sstables_request`]); blocks until done (long timeout).
    /// The status as [`StorageService::cleanup`]'s.
    pub async fn upgrade_sstables(&self, keyspace: &str, jobs: u32) -> Result<i64, Error> {
        let request = upgrade_sstables_request(self.release_version().await?, keyspace, jobs);
        let value = self
            .jolokia
            .request_with_timeout(&request, self.jolokia.long_timeout())
            .await?;
        status_code(request.label(), value)
    }

    /// `Keyspaces` (`getKeyspaces()`): every keyspace with data, the
    /// node-local system ones included (`nodetool upgradesstables` with
    /// no keyspace covers these).
    pub async fn keyspaces(&self) -> Result<Vec<String>, Error> {
        self.read("Keyspaces").await
    }

    /// `PartitionerName`, e.g. `org.apache.cassandra.dht.Murmur3Partitioner`.
    pub async fn partitioner_name(&self) -> Result<String, Error> {
        self.read("PartitionerName").await
    }

    /// Every token of the ring (normal and bootstrapping), from the keys
    /// of `TokenToEndpointMap` (3.11 to 5.0; deprecated since 4.0 for its
    /// values, bare addresses, which are not used here).
    pub async fn ring_tokens(&self) -> Result<Vec<String>, Error> {
        let map: BTreeMap<String, Value> = self.read("TokenToEndpointMap").await?;
        Ok(map.into_keys().collect())
    }

    /// `forceKeyspaceFlush(keyspace)` of all its tables, as `nodetool
    /// flush KEYSPACE` calls it; blocks until the memtables are written
    /// (long timeout).
    pub async fn flush(&self, keyspace: &str) -> Result<(), Error> {
        self.jolokia
            .exec_long(STORAGE_SERVICE, FLUSH, vec![json!(keyspace), json!([])])
            .await?;
        Ok(())
    }

    /// `forceTerminateAllRepairSessions()` (3.11 to 5.0): every repair
    /// this node coordinates fails at once (its status turns FAILED).
    pub async fn terminate_repairs(&self) -> Result<(), Error> {
        self.jolokia
            .exec(STORAGE_SERVICE, TERMINATE_REPAIRS, Vec::new())
            .await?;
        Ok(())
    }

    /// Decommission this node: `decommission()` on 3.11,
    /// `decommission(false)` on 4.0+. Blocks until the data is streamed
    /// away (long timeout).
    pub async fn decommission(&self) -> Result<(), Error> {
        let (operation, arguments) = decommission_call(self.release_version().await?);
        self.jolokia
            .exec_long(STORAGE_SERVICE, operation, arguments)
            .await?;
        Ok(())
    }

    /// `NonLocalStrategyKeyspaces`: the keyspaces whose data is
    /// replicated across nodes (the user's and `system_auth`,
    /// `system_distributed`, `system_traces`), the ones `nodetool repair`
    /// repairs when it is given none (3.11, 4.x, 5.0).
    pub async fn non_local_strategy_keyspaces(&self) -> Result<Vec<String>, Error> {
        self.read("NonLocalStrategyKeyspaces").await
    }

    /// `int repairAsync(String keyspace, Map<String, String> options)`
    /// (3.11, 4.x, 5.0; the options are `RepairOption.parse`'s): starts a
    /// repair and returns its command number at once; 0 when there is
    /// nothing to repair (the keyspace has fewer than 2 replicas, or no
    /// ranges here), in which case no status is ever recorded.
    pub async fn repair_async(
        &self,
        keyspace: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<i64, Error> {
        let request = repair_request(keyspace, options);
        let value = self.jolokia.request(&request).await?;
        value.as_i64().ok_or_else(|| Error::DecodeResponse {
            request: request.label().to_string(),
            reason: format!("the command number is not an int: {value}"),
        })
    }

    /// `List<String> getParentRepairStatus(int cmd)` (4.0+,
    /// CASSANDRA-13480): the status's name (`IN_PROGRESS`, `COMPLETED`,
    /// `FAILED`) then its messages, or `None` for a command the node does
    /// not know (not started yet, or not this process's).
    pub async fn parent_repair_status(&self, cmd: i64) -> Result<Option<Vec<String>>, Error> {
        let value = self
            .jolokia
            .exec(STORAGE_SERVICE, PARENT_REPAIR_STATUS, vec![json!(cmd)])
            .await?;
        decode("exec getParentRepairStatus", value)
    }

    /// This node's datacenter (EndpointSnitchInfo `Datacenter`).
    pub async fn datacenter(&self) -> Result<String, Error> {
        self.jolokia
            .read_as(ENDPOINT_SNITCH_INFO, "Datacenter")
            .await
    }

    /// This node's rack (EndpointSnitchInfo `Rack`).
    pub async fn rack(&self) -> Result<String, Error> {
        self.jolokia.read_as(ENDPOINT_SNITCH_INFO, "Rack").await
    }

    /// The datacenter of an endpoint (`getDatacenter(String)`).
    pub async fn datacenter_of(&self, endpoint: &str) -> Result<String, Error> {
        let request = snitch_request("getDatacenter", endpoint);
        let value = self.jolokia.request(&request).await?;
        decode(request.label(), value)
    }

    /// The rack of an endpoint (`getRack(String)`).
    pub async fn rack_of(&self, endpoint: &str) -> Result<String, Error> {
        let request = snitch_request("getRack", endpoint);
        let value = self.jolokia.request(&request).await?;
        decode(request.label(), value)
    }
}

/// The `exec` of one EndpointSnitchInfo lookup (`getRack` or
/// `getDatacenter`) for an endpoint. `getRack`/`getDatacenter` are
/// overloaded with the attributes' getters, but only the one-argument form
/// is an operation, so no signature is needed. The endpoint goes as a bare
/// address (see [`tokens_request`]).
pub fn snitch_request(operation: &str, endpoint: &str) -> Request {
    Request::exec(
        ENDPOINT_SNITCH_INFO,
        operation,
        vec![json!(endpoint_host(endpoint))],
    )
}

/// The `exec` of `getTokens(String)` for an endpoint. The endpoint goes as a
/// bare address: 3.11 parses it with `InetAddress.getByName`, where
/// `ip:port` would be taken for a host name (a DNS lookup that fails),
/// while 4.0+ accepts an address without port (the storage port, the same
/// on every member of a cluster this operator runs).
pub fn tokens_request(endpoint: &str) -> Request {
    Request::exec(
        STORAGE_SERVICE,
        "getTokens",
        vec![json!(endpoint_host(endpoint))],
    )
}

/// `StorageService.repairAsync(String, Map<String, String>)`: one
/// operation of that name on 3.11 to 5.0, so the bare name (the access
/// policy lists it so).
pub const REPAIR_ASYNC: &str = "repairAsync";
/// `StorageService.getParentRepairStatus(int)` (4.0+).
pub const PARENT_REPAIR_STATUS: &str = "getParentRepairStatus";

/// The `exec` of `repairAsync` for a keyspace with these options (Jolokia
/// turns a JSON object into the `Map<String, String>`).
pub fn repair_request(keyspace: &str, options: &BTreeMap<String, String>) -> Request {
    Request::exec(
        STORAGE_SERVICE,
        REPAIR_ASYNC,
        vec![json!(keyspace), json!(options)],
    )
}

/// The operation and arguments of a non-forced decommission for a version:
/// 3.11 has only `decommission()`, 4.0+ only `decommission(boolean force)`.
pub fn decommission_call(version: &CassandraVersion) -> (&'static str, Vec<Value>) {
    if version.decommission_takes_force() {
        ("decommission", vec![json!(false)])
    } else {
        ("decommission", Vec::new())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_client_calls_the_agent_where_the_sidecar_binds_it() {
        assert_eq!(*super::DEFAULT_URL, "http://127.0.0.1:8778/jolokia/");
    }

    #[test]
    fn generations_are_read_from_cassandras_endpoint_state_dump() {
        // FailureDetector.appendEndpointState (4.1): the endpoint, then its
        // heartbeat state, then its application states.
        let dump = "/10.96.0.1\n  generation:1700000000\n  heartbeat:4711\n  STATUS:15:NORMAL,-9223372036854775808\n  RELEASE_VERSION:5:4.1.8\n  TOKENS:14:<hidden>\n/10.96.0.2:7000\n  generation:1700000321\n  heartbeat:12\n  TOKENS: not present\n";
        let generations = endpoint_generations(dump);
        assert_eq!(
            generations.into_iter().collect::<Vec<_>>(),
            vec![
                ("10.96.0.1".to_string(), 1_700_000_000),
                ("10.96.0.2".to_string(), 1_700_000_321)
            ]
        );
    }
    use super::*;

    #[test]
    fn read_request_has_the_documented_shape() {
        let request = Request::read(STORAGE_SERVICE, "OperationMode");
        assert_eq!(
            request.body(),
            &json!({"type": "read", "mbean": "org.apache.cassandra.db:type=StorageService", "attribute": "OperationMode"})
        );
        let many = Request::read_many(STORAGE_SERVICE, &["LiveNodes", "UnreachableNodes"]);
        assert_eq!(
            many.body()["attribute"],
            json!(["LiveNodes", "UnreachableNodes"])
        );
        assert_eq!(many.label(), "read LiveNodes,UnreachableNodes");
    }

    #[test]
    fn exec_search_version_requests_have_the_documented_shape() {
        assert_eq!(
            Request::exec(STORAGE_SERVICE, "decommission", vec![json!(false)]).body(),
            &json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "decommission", "arguments": [false]})
        );
        assert_eq!(
            Request::search("org.apache.cassandra.db:*").body(),
            &json!({"type": "search", "mbean": "org.apache.cassandra.db:*"})
        );
        assert_eq!(Request::version().body(), &json!({"type": "version"}));
        assert_eq!(
            Request::exec_signed(
                STORAGE_SERVICE,
                "decommission",
                &["boolean"],
                vec![json!(true)]
            )
            .body()["operation"],
            json!("decommission(boolean)")
        );
        assert_eq!(
            Request::exec_signed(STORAGE_SERVICE, "drain", &[], vec![]).body()["operation"],
            json!("drain()")
        );
    }

    /// The long maintenance calls, as nodetool makes them: cleanup with
    /// its job count, upgradesstables of old-format files only, by the
    /// overload each version has.
    #[test]
    fn maintenance_calls_name_their_overloads() {
        assert_eq!(
            cleanup_request("ks", 2).body(),
            &json!({"type": "exec", "mbean": STORAGE_SERVICE,
                "operation": "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)",
                "arguments": [2, "ks", []]})
        );
        let v41 = CassandraVersion::parse("4.1.8").unwrap();
        assert_eq!(
            upgrade_sstables_request(&v41, "ks", 2).body(),
            &json!({"type": "exec", "mbean": STORAGE_SERVICE,
                "operation": "upgradeSSTables(java.lang.String,boolean,long,int,[Ljava.lang.String;)",
                "arguments": ["ks", true, 9_223_372_036_854_775_807_i64, 2, []]})
        );
        let v50 = CassandraVersion::parse("5.0.3").unwrap();
        assert_eq!(
            upgrade_sstables_request(&v50, "ks", 2).body()["operation"],
            json!(UPGRADE_SSTABLES)
        );
        for old in ["3.11.19", "4.0.13"] {
            let v = CassandraVersion::parse(old).unwrap();
            assert_eq!(
                upgrade_sstables_request(&v, "ks", 2).body(),
                &json!({"type": "exec", "mbean": STORAGE_SERVICE,
                    "operation": "upgradeSSTables(java.lang.String,boolean,int,[Ljava.lang.String;)",
                    "arguments": ["ks", true, 2, []]}),
                "{old}"
            );
        }
        assert_eq!(status_code("x", json!(0)).ok(), Some(0));
        assert!(status_code("x", json!(null)).is_err());
    }

    #[test]
    fn endpoint_lookups_send_bare_addresses() {
        assert_eq!(
            tokens_request("10.0.0.5:7000").body(),
            &json!({"type": "exec", "mbean": STORAGE_SERVICE, "operation": "getTokens", "arguments": ["10.0.0.5"]})
        );
        assert_eq!(
            snitch_request("getRack", "/10.0.0.5").body(),
            &json!({"type": "exec", "mbean": ENDPOINT_SNITCH_INFO, "operation": "getRack", "arguments": ["10.0.0.5"]})
        );
    }

    #[test]
    fn success_yields_the_value_even_when_null() {
        let ok = json!({"request": {"type": "exec"}, "value": null, "status": 200, "timestamp": 1});
        assert_eq!(parse_response("exec drain", ok).ok(), Some(Value::Null));
        let ok = json!({"value": ["10.0.0.1"], "status": 200});
        assert_eq!(
            parse_response("read LiveNodes", ok).ok(),
            Some(json!(["10.0.0.1"]))
        );
    }

    #[test]
    fn status_other_than_200_is_a_jolokia_error_in_both_lines() {
        // 1.x: no ".error" flag, a stack trace, "<class> : <message>".
        let v1 = json!({
            "status": 500,
            "error_type": "java.lang.UnsupportedOperationException",
            "error": "java.lang.UnsupportedOperationException : Not enough live nodes",
            "stacktrace": "java.lang.UnsupportedOperationException: ...",
            "request": {"type": "exec"}
        });
        let err = parse_response("exec decommission", v1).err();
        let Some(err) = err else {
            panic!("a status 500 must be an error");
        };
        assert_eq!(err.jolokia_status(), Some(500));
        assert_eq!(
            err.error_type(),
            Some("java.lang.UnsupportedOperationException")
        );
        assert_eq!(err.exception_message(), Some("Not enough live nodes"));
        assert_eq!(
            err.to_string(),
            "jolokia exec decommission failed with status 500: java.lang.UnsupportedOperationException: Not enough live nodes"
        );
        assert!(!err.is_unreachable());
        // 2.x: ".error": true, no stack trace, and a plain message.
        let v2 = json!({
            "status": 404,
            ".error": true,
            "error_type": "javax.management.AttributeNotFoundException",
            "error": "No such attribute: Nope",
        });
        let err = parse_response("read Nope", v2).err();
        assert_eq!(err.as_ref().and_then(Error::jolokia_status), Some(404));
        assert_eq!(
            err.as_ref().and_then(Error::exception_message),
            Some("No such attribute: Nope")
        );
    }

    #[test]
    fn shapes_that_are_not_jolokia_are_decode_errors() {
        for bad in [
            json!([1, 2]),
            json!({"value": 1}),
            json!({"status": "200", "value": 1}),
            json!({"status": 200}),
        ] {
            assert!(
                matches!(
                    parse_response("read X", bad.clone()),
                    Err(Error::DecodeResponse { .. })
                ),
                "{bad} must be a decode error"
            );
        }
    }

    #[test]
    fn bulk_responses_are_matched_in_order() {
        let requests = [
            Request::read(STORAGE_SERVICE, "OperationMode"),
            Request::read("org.apache.cassandra.db:type=Nope", "X"),
        ];
        let response = json!([
            {"status": 200, "value": "NORMAL"},
            {"status": 404, "error_type": "javax.management.InstanceNotFoundException", "error": "x"}
        ]);
        let results = parse_bulk_response(&requests, response).unwrap_or_default();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].as_ref().ok(), Some(&json!("NORMAL")));
        assert_eq!(
            results[1].as_ref().err().and_then(Error::error_type),
            Some("javax.management.InstanceNotFoundException")
        );
        let short = json!([{"status": 200, "value": 1}]);
        assert!(matches!(
            parse_bulk_response(&requests, short),
            Err(Error::DecodeResponse { .. })
        ));
        // An unparsable bulk request gets one error object.
        let whole = json!({"status": 400, "error_type": "java.lang.IllegalArgumentException", "error": "bad"});
        assert_eq!(
            parse_bulk_response(&requests, whole)
                .err()
                .and_then(|e| e.jolokia_status()),
            Some(400)
        );
    }

    #[test]
    fn versions_parse_and_pick_the_api() {
        let v311 = CassandraVersion::parse("3.11.19").expect("3.11.19");
        assert_eq!((v311.major, v311.minor, v311.patch), (3, 11, 19));
        assert!(!v311.has_with_port());
        assert!(v311.has_host_id_map());
        assert_eq!(decommission_call(&v311), ("decommission", vec![]));
        let v41 = CassandraVersion::parse("4.1.8").expect("4.1.8");
        assert!(v41.has_with_port());
        assert!(v41.has_host_id_map());
        assert_eq!(
            decommission_call(&v41),
            ("decommission", vec![json!(false)])
        );
        let v50 = CassandraVersion::parse("5.0-beta1").expect("5.0-beta1");
        assert_eq!((v50.major, v50.minor, v50.patch), (5, 0, 0));
        assert!(!v50.has_host_id_map());
        assert_eq!(
            decommission_call(&v50),
            ("decommission", vec![json!(false)])
        );
        let snap = CassandraVersion::parse("3.11.20-SNAPSHOT").expect("snapshot");
        assert_eq!(snap.patch, 20);
        assert_eq!(snap.to_string(), "3.11.20-SNAPSHOT");
        assert_eq!(CassandraVersion::parse("unknown"), None);
        assert_eq!(CassandraVersion::parse("5"), None);
    }

    #[test]
    fn ring_attributes_follow_the_version() {
        let v311 = CassandraVersion::parse("3.11.19").expect("version");
        let v50 = CassandraVersion::parse("5.0.3").expect("version");
        assert_eq!(RingAttributes::for_version(&v311).live, "LiveNodes");
        assert_eq!(
            RingAttributes::for_version(&v311).host_ids,
            "EndpointToHostId"
        );
        assert_eq!(RingAttributes::for_version(&v50).live, "LiveNodesWithPort");
        assert_eq!(
            RingAttributes::for_version(&v50).host_ids,
            "EndpointWithPortToHostId"
        );
        assert_eq!(RingAttributes::for_version(&v50).loads, "LoadMapWithPort");
    }

    #[test]
    fn operation_modes_parse_including_the_5_0_failures() {
        for (text, mode) in [
            ("STARTING", OperationMode::Starting),
            ("NORMAL", OperationMode::Normal),
            ("JOINING", OperationMode::Joining),
            ("JOINING_FAILED", OperationMode::JoiningFailed),
            ("LEAVING", OperationMode::Leaving),
            ("DECOMMISSIONED", OperationMode::Decommissioned),
            ("DECOMMISSION_FAILED", OperationMode::DecommissionFailed),
            ("MOVING", OperationMode::Moving),
            ("DRAINING", OperationMode::Draining),
            ("DRAINED", OperationMode::Drained),
        ] {
            assert_eq!(OperationMode::parse(text), mode);
            assert_eq!(mode.as_str(), text);
        }
        assert_eq!(OperationMode::parse("normal"), OperationMode::Normal);
        assert_eq!(
            OperationMode::parse("CLIENT"),
            OperationMode::Other("CLIENT".to_string())
        );
        assert_eq!(OperationMode::parse("CLIENT").to_string(), "CLIENT");
    }

    #[test]
    fn endpoint_host_normalises_every_form_cassandra_prints() {
        assert_eq!(endpoint_host("10.0.0.5"), "10.0.0.5");
        assert_eq!(endpoint_host("10.0.0.5:7000"), "10.0.0.5");
        assert_eq!(endpoint_host("/10.0.0.5"), "10.0.0.5");
        assert_eq!(endpoint_host("/10.0.0.5:7000"), "10.0.0.5");
        assert_eq!(endpoint_host("node-1.example/10.0.0.5"), "10.0.0.5");
        assert_eq!(endpoint_host("[2001:db8::1]:7000"), "2001:db8::1");
        assert_eq!(endpoint_host("/[2001:db8::1]:7000"), "2001:db8::1");
        assert_eq!(endpoint_host("2001:db8::1"), "2001:db8::1");
        assert_eq!(endpoint_host("/2001:db8::1"), "2001:db8::1");
    }

    #[test]
    fn ring_states_and_ownership_keys() {
        let attributes = RingAttributes::for_version(&CassandraVersion {
            major: 3,
            minor: 11,
            patch: 19,
            raw: "3.11.19".into(),
        });
        let values = json!({
            "LiveNodes": ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
            "UnreachableNodes": ["10.0.0.3"],
            "JoiningNodes": ["10.0.0.4"],
            "LeavingNodes": ["10.0.0.2"],
            "MovingNodes": [],
            "EndpointToHostId": {"10.0.0.1": "a", "10.0.0.2": "b", "10.0.0.3": "c"},
            "LoadMap": {"10.0.0.1": "1 KiB"}
        });
        let Value::Object(values) = values else {
            panic!("an object")
        };
        let ownership = json!({"/10.0.0.1": 0.5, "/10.0.0.2": 0.25, "/10.0.0.3": 0.25});
        let ring = ring_from_values(&attributes, values, Some(ownership)).expect("a ring");
        assert_eq!(
            ring.endpoints(),
            vec!["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
        );
        assert_eq!(ring.state("10.0.0.1"), "UN");
        assert_eq!(ring.state("10.0.0.2"), "UL");
        assert_eq!(ring.state("10.0.0.3"), "DN");
        assert_eq!(ring.state("10.0.0.4"), "UJ");
        assert_eq!(
            ring.ownership.as_ref().and_then(|o| o.get("10.0.0.1")),
            Some(&0.5)
        );
        assert_eq!(
            ring.loads.get("10.0.0.1").map(String::as_str),
            Some("1 KiB")
        );
    }
}
