//! A client of ScyllaDB's REST API (the API `scylla nodetool` and Scylla
//! Manager use), on the node's own loopback: ScyllaDB runs no JVM and no
//! Jolokia agent, and recent releases no longer ship the `scylla-jmx`
//! proxy.
//!
//! The endpoints, methods and answers are ScyllaDB's swagger definitions
//! (`api/api-doc/storage_service.json`, `gossiper.json`,
//! `endpoint_snitch_info.json` in scylladb/scylladb); the facts the sidecar
//! relies on, with their source, are in `tests/fixtures/scylla-rest/FACTS.md`.
//! In short:
//!
//! - every answer is JSON: a string (`"NORMAL"`), a list of strings, or a
//!   list of `{"key": ..., "value": ...}` ("mapper") for a map;
//! - a failure is an HTTP error status with Seastar's JSON body
//!   `{"message": "...", "code": 500}` (an exception thrown by the handler,
//!   e.g. a refused decommission, is a 500);
//! - `POST /storage_service/drain` and `POST /storage_service/decommission`
//!   block until the operation is done.
//!
//! The HTTP calls are I/O; paths, answer decoding and error parsing are
//! pure and unit-tested here.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::jolokia::OperationMode;

/// Where the local ScyllaDB serves its REST API: the address the sidecar
/// gives it (`--api-address`, [`crate::render::scylla::API_ADDRESS`]) and
/// its default `api_port` ([`crds::contract::SCYLLA_API_PORT`]).
pub static DEFAULT_URL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "http://{}:{}",
        crate::render::scylla::API_ADDRESS,
        crds::contract::SCYLLA_API_PORT
    )
});
/// Timeout of an ordinary request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of a blocking operation (drain, decommission).
pub const DEFAULT_LONG_TIMEOUT: Duration = Duration::from_secs(12 * 60 * 60);

/// Errors of the ScyllaDB REST client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be built.
    #[error("building the http client failed: {source}")]
    BuildClient { source: reqwest::Error },
    /// Nothing listens at the URL (yet): ScyllaDB is not up.
    #[error("connecting to the scylla rest api at {url} failed (is scylla running?): {cause}")]
    Connect {
        url: String,
        cause: String,
        source: reqwest::Error,
    },
    /// No complete answer within the timeout.
    #[error("scylla rest request {method} {path} timed out after {timeout:?}")]
    TimedOut {
        method: &'static str,
        path: String,
        timeout: Duration,
    },
    /// The request failed on the way.
    #[error("sending the scylla rest request {method} {path} failed: {cause}")]
    Send {
        method: &'static str,
        path: String,
        cause: String,
        source: reqwest::Error,
    },
    /// ScyllaDB answered an error status; `message` is Seastar's
    /// `message` field (or the body when it is not that JSON).
    #[error("scylla rest request {method} {path} failed with http status {status}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    /// The answer is not the JSON the swagger describes.
    #[error("decoding the answer to {path} failed: {reason}")]
    Decode { path: String, reason: String },
}

impl Error {
    /// True when the API could not be reached at all (ScyllaDB not up).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }

    /// What ScyllaDB said when its handler threw (HTTP 500), e.g. a refused
    /// decommission; `None` for anything that did not reach ScyllaDB.
    pub fn thrown_message(&self) -> Option<&str> {
        match self {
            Error::Status {
                status: 500,
                message,
                ..
            } => Some(message),
            _ => None,
        }
    }
}

/// The message of an error answer: Seastar renders an exception as
/// `{"message": ..., "code": ...}`; anything else is taken as text. Pure.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body)
        && let Some(message) = object.get("message").and_then(Value::as_str)
    {
        return message.to_string();
    }
    String::from_utf8_lossy(body).chars().take(500).collect()
}

/// ScyllaDB's operation mode (`storage_service::mode`: NONE, STARTING,
/// JOINING, BOOTSTRAP, NORMAL, LEAVING, DECOMMISSIONED, DRAINING, DRAINED,
/// MOVING, MAINTENANCE) in the sidecar's terms: BOOTSTRAP is joining (its
/// own metrics map it to JOINING); NONE and MAINTENANCE have no Cassandra
/// counterpart and stay as they are (never NORMAL). Pure.
pub fn operation_mode(text: &str) -> OperationMode {
    match text.trim() {
        "BOOTSTRAP" => OperationMode::Joining,
        other => OperationMode::parse(other),
    }
}

/// A list of `{"key": k, "value": v}` (the swagger's `mapper`) as a map.
/// Values may be strings or numbers (`load_map` holds numbers). Pure.
pub fn mapper<V: DeserializeOwned>(path: &str, value: Value) -> Result<BTreeMap<String, V>, Error> {
    #[derive(serde::Deserialize)]
    struct Entry<V> {
        key: String,
        value: V,
    }
    let entries: Vec<Entry<V>> = decode(path, value)?;
    Ok(entries.into_iter().map(|e| (e.key, e.value)).collect())
}

/// `/storage_service/tokens_endpoint`: token → endpoint, as pairs in the
/// order ScyllaDB sends them (several tokens map to one endpoint). Pure.
pub fn tokens_endpoint(value: Value) -> Result<Vec<(String, String)>, Error> {
    #[derive(serde::Deserialize)]
    struct Entry {
        key: String,
        value: String,
    }
    let entries: Vec<Entry> = decode("/storage_service/tokens_endpoint", value)?;
    Ok(entries.into_iter().map(|e| (e.key, e.value)).collect())
}

/// A path with its query string, values percent-encoded. Pure.
pub fn path_and_query(path: &str, query: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let mut out = path.to_string();
    for (i, (key, value)) in query.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&encode(key));
        out.push('=');
        out.push_str(&encode(value));
    }
    out
}

/// Deserializes an answer. Pure.
pub fn decode<T: DeserializeOwned>(path: &str, value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Decode {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// An error and its sources, joined by ": ".
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

/// A client of one ScyllaDB node's REST API.
#[derive(Debug, Clone)]
pub struct Scylla {
    http: reqwest::Client,
    url: String,
    timeout: Duration,
    long_timeout: Duration,
}

impl Scylla {
    /// A client for the API at `url` (e.g. [`DEFAULT_URL`]).
    pub fn new(url: &str) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            // The API is on loopback: a proxy from the environment would
            // only get in the way.
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|source| Error::BuildClient { source })?;
        Ok(Scylla {
            http,
            url: url.trim_end_matches('/').to_string(),
            timeout: DEFAULT_TIMEOUT,
            long_timeout: DEFAULT_LONG_TIMEOUT,
        })
    }

    /// Sets the timeout of ordinary requests.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the timeout of blocking operations.
    pub fn with_long_timeout(mut self, timeout: Duration) -> Self {
        self.long_timeout = timeout;
        self
    }

    /// The API's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The timeout of blocking operations.
    pub fn long_timeout(&self) -> Duration {
        self.long_timeout
    }

    async fn call(
        &self,
        method: &'static str,
        path: &str,
        query: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Value, Error> {
        let url = format!("{}{}", self.url, path_and_query(path, query));
        let classify = |source: reqwest::Error| {
            if source.is_timeout() {
                Error::TimedOut {
                    method,
                    path: path.to_string(),
                    timeout,
                }
            } else if source.is_connect() {
                Error::Connect {
                    url: self.url.clone(),
                    cause: cause_chain(&source),
                    source,
                }
            } else {
                Error::Send {
                    method,
                    path: path.to_string(),
                    cause: cause_chain(&source),
                    source,
                }
            }
        };
        let request = match method {
            "POST" => self.http.post(&url),
            _ => self.http.get(&url),
        };
        let response = request.timeout(timeout).send().await.map_err(classify)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(classify)?;
        if !status.is_success() {
            return Err(Error::Status {
                method,
                path: path.to_string(),
                status: status.as_u16(),
                message: error_message(&bytes),
            });
        }
        // A void operation answers an empty body (or `null`).
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
            path: path.to_string(),
            reason: format!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        })
    }

    /// `GET path` with the ordinary timeout, decoded.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, Error> {
        let value = self.call("GET", path, query, self.timeout).await?;
        decode(path, value)
    }

    /// `POST path` of a blocking operation (long timeout).
    pub async fn post_long(&self, path: &str) -> Result<(), Error> {
        self.call("POST", path, &[], self.long_timeout)
            .await
            .map(|_| ())
    }

    /// `GET /storage_service/operation_mode`.
    pub async fn operation_mode(&self) -> Result<OperationMode, Error> {
        let mode: String = self.get("/storage_service/operation_mode", &[]).await?;
        Ok(operation_mode(&mode))
    }

    /// `GET /storage_service/hostid/local`: this node's host ID (an empty
    /// string before it has one).
    pub async fn local_host_id(&self) -> Result<Option<String>, Error> {
        let id: String = self.get("/storage_service/hostid/local", &[]).await?;
        Ok(Some(id).filter(|id| !id.is_empty()))
    }

    /// `GET /storage_service/host_id`: endpoint → host ID of the nodes that
    /// own tokens.
    pub async fn host_ids(&self) -> Result<BTreeMap<String, String>, Error> {
        let path = "/storage_service/host_id";
        mapper(path, self.get::<Value>(path, &[]).await?)
    }

    /// `GET /gossiper/endpoint/live/`.
    pub async fn live(&self) -> Result<Vec<String>, Error> {
        self.get("/gossiper/endpoint/live/", &[]).await
    }

    /// `GET /failure_detector/endpoints/`: every endpoint in this node's
    /// gossip, with the generation it knows it by and whether it sees it
    /// alive.
    pub async fn gossip(&self) -> Result<Vec<crate::jolokia::GossipEndpoint>, Error> {
        #[derive(serde::Deserialize)]
        struct EndpointState {
            addrs: String,
            generation: i64,
            is_alive: bool,
        }
        let states: Vec<EndpointState> = self.get("/failure_detector/endpoints/", &[]).await?;
        Ok(states
            .into_iter()
            .map(|s| crate::jolokia::GossipEndpoint {
                address: s.addrs,
                up: s.is_alive,
                generation: Some(s.generation),
            })
            .collect())
    }

    /// `GET /gossiper/endpoint/down/`.
    pub async fn down(&self) -> Result<Vec<String>, Error> {
        self.get("/gossiper/endpoint/down/", &[]).await
    }

    /// `GET /storage_service/nodes/{joining|leaving|moving}`.
    pub async fn nodes(&self, state: &str) -> Result<Vec<String>, Error> {
        self.get(&format!("/storage_service/nodes/{state}"), &[])
            .await
    }

    /// `GET /storage_service/tokens`: this node's tokens.
    pub async fn tokens(&self) -> Result<Vec<String>, Error> {
        self.get("/storage_service/tokens", &[]).await
    }

    /// `GET /storage_service/tokens_endpoint`: (token, endpoint) pairs.
    pub async fn tokens_endpoint(&self) -> Result<Vec<(String, String)>, Error> {
        tokens_endpoint(
            self.get::<Value>("/storage_service/tokens_endpoint", &[])
                .await?,
        )
    }

    /// `GET /storage_service/load_map`: endpoint → bytes on disk.
    pub async fn load_map(&self) -> Result<BTreeMap<String, f64>, Error> {
        let path = "/storage_service/load_map";
        mapper(path, self.get::<Value>(path, &[]).await?)
    }

    /// `GET /storage_service/load`: this node's bytes on disk.
    pub async fn load(&self) -> Result<f64, Error> {
        self.get("/storage_service/load", &[]).await
    }

    /// `GET /snitch/datacenter?host=`: an endpoint's datacenter (this
    /// node's without `host`).
    pub async fn datacenter_of(&self, host: Option<&str>) -> Result<String, Error> {
        let query: Vec<(&str, &str)> = host.map(|h| ("host", h)).into_iter().collect();
        self.get("/snitch/datacenter", &query).await
    }

    /// `GET /snitch/rack?host=`.
    pub async fn rack_of(&self, host: Option<&str>) -> Result<String, Error> {
        let query: Vec<(&str, &str)> = host.map(|h| ("host", h)).into_iter().collect();
        self.get("/snitch/rack", &query).await
    }

    /// `GET /storage_service/cluster_name`.
    pub async fn cluster_name(&self) -> Result<String, Error> {
        self.get("/storage_service/cluster_name", &[]).await
    }

    /// `GET /storage_service/release_version`: the Cassandra version
    /// ScyllaDB speaks for (e.g. `3.0.8`).
    pub async fn release_version(&self) -> Result<String, Error> {
        self.get("/storage_service/release_version", &[]).await
    }

    /// `GET /storage_service/scylla_release_version`: ScyllaDB's own.
    pub async fn scylla_release_version(&self) -> Result<String, Error> {
        self.get("/storage_service/scylla_release_version", &[])
            .await
    }

    /// `POST /storage_service/drain`: blocks until DRAINED.
    pub async fn drain(&self) -> Result<(), Error> {
        self.post_long("/storage_service/drain").await
    }

    /// `POST /storage_service/decommission`: blocks until the node left
    /// the ring; a refusal is an HTTP 500 with ScyllaDB's reason.
    pub async fn decommission(&self) -> Result<(), Error> {
        self.post_long("/storage_service/decommission").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_client_calls_the_api_where_the_sidecar_binds_it() {
        assert_eq!(*DEFAULT_URL, "http://127.0.0.1:10000");
    }

    #[test]
    fn seastar_error_bodies_give_their_message() {
        assert_eq!(
            error_message(br#"{"message": "std::runtime_error (Not enough nodes)", "code": 500}"#),
            "std::runtime_error (Not enough nodes)"
        );
        assert_eq!(error_message(b"Not Found"), "Not Found");
    }

    #[test]
    fn scyllas_modes_in_the_sidecars_terms() {
        assert_eq!(operation_mode("NORMAL"), OperationMode::Normal);
        assert_eq!(operation_mode("BOOTSTRAP"), OperationMode::Joining);
        assert_eq!(operation_mode("DRAINED"), OperationMode::Drained);
        assert_eq!(
            operation_mode("MAINTENANCE"),
            OperationMode::Other("MAINTENANCE".into())
        );
        assert_eq!(operation_mode("NONE"), OperationMode::Other("NONE".into()));
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(
            path_and_query("/snitch/rack", &[("host", "10.0.0.1")]),
            "/snitch/rack?host=10.0.0.1"
        );
        assert_eq!(
            path_and_query("/snitch/rack", &[("host", "fd00::1"), ("x", "a b")]),
            "/snitch/rack?host=fd00%3A%3A1&x=a%20b"
        );
        assert_eq!(path_and_query("/x", &[]), "/x");
    }

    #[test]
    fn mappers_become_maps() {
        let host_ids: BTreeMap<String, String> = mapper(
            "/storage_service/host_id",
            json!([{"key": "10.0.0.1", "value": "a"}, {"key": "10.0.0.2", "value": "b"}]),
        )
        .unwrap();
        assert_eq!(host_ids.get("10.0.0.2").map(String::as_str), Some("b"));
        let loads: BTreeMap<String, f64> = mapper(
            "/storage_service/load_map",
            json!([{"key": "10.0.0.1", "value": 1536.0}]),
        )
        .unwrap();
        assert_eq!(loads.get("10.0.0.1"), Some(&1536.0));
        assert!(matches!(
            mapper::<String>("/x", json!({"key": "a"})),
            Err(Error::Decode { .. })
        ));
    }

    #[test]
    fn a_500_is_a_refusal_anything_else_is_not() {
        let refused = Error::Status {
            method: "POST",
            path: "/storage_service/decommission".into(),
            status: 500,
            message: "no".into(),
        };
        assert_eq!(refused.thrown_message(), Some("no"));
        let missing = Error::Status {
            method: "GET",
            path: "/x".into(),
            status: 404,
            message: "Not found".into(),
        };
        assert_eq!(missing.thrown_message(), None);
    }
}
