//! The fake node's I/O: the client of kubesim's ring service and the
//! Jolokia HTTP server (POST single and bulk, GET forms) over the pure
//! mapping of [`super::jolokia`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::jolokia::{self, Identity, JavaError, RingCall, Step};
use super::view::NodeView;
use crate::fake_cassandra::ring_service::{Refusal, StartRequest};
use crate::fake_cassandra::sstables::Sstables;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("ring service at {url} unreachable: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("ring service answered {status} to {what}: {body}")]
    Answer {
        what: String,
        status: u16,
        body: String,
    },
    /// Cassandra refused (startup, an operation).
    #[error("{}", .0.message)]
    Refused(Refusal),
}

/// The client of kubesim's `/sim/ring` endpoints.
#[derive(Debug, Clone)]
pub struct RingClient {
    base: String,
    http: reqwest::Client,
}

impl RingClient {
    /// `kubesim_url`: kubesim's base URL.
    pub fn new(kubesim_url: &str) -> Self {
        RingClient {
            base: format!("{}/sim/ring", kubesim_url.trim_end_matches('/')),
            http: reqwest::Client::builder()
                .no_proxy()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("an http client"),
        }
    }

    async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, NodeError> {
        let url = format!("{}/{path}", self.base);
        let mut req = self.http.post(&url);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.map_err(|source| NodeError::Unreachable {
            url: url.clone(),
            source,
        })?;
        Self::parse(path, resp).await
    }

    async fn parse(what: &str, resp: reqwest::Response) -> Result<Value, NodeError> {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if status < 300 {
            return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
        }
        match serde_json::from_str::<Refusal>(&text) {
            Ok(r) => Err(NodeError::Refused(r)),
            Err(_) => Err(NodeError::Answer {
                what: what.to_string(),
                status,
                body: text,
            }),
        }
    }

    /// Starts the node in the ring: the model's `Started` (host_id,
    /// startup, mode, log).
    pub async fn start(&self, request: &StartRequest) -> Result<Value, NodeError> {
        let body = serde_json::to_value(request).unwrap_or_default();
        self.post("nodes", Some(&body)).await
    }

    pub async fn view(&self, host_id: &str) -> Result<NodeView, NodeError> {
        let url = format!("{}/nodes/{host_id}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| NodeError::Unreachable {
                url: url.clone(),
                source,
            })?;
        let value = Self::parse("the node view", resp).await?;
        serde_json::from_value(value).map_err(|e| NodeError::Answer {
            what: "the node view".into(),
            status: 200,
            body: e.to_string(),
        })
    }

    /// The process stops (SIGTERM, a crash): down in the ring, data kept.
    pub async fn stop(&self, host_id: &str) -> Result<(), NodeError> {
        self.post(&format!("nodes/{host_id}/stop"), None)
            .await
            .map(drop)
    }

    /// Where maintenance operation `op` stands on the ring
    /// (`{"state": "running" | "completed" | "failed" | "abandoned" |
    /// "unknown", "message": ...}`).
    pub async fn op_state(&self, host_id: &str, op: u64) -> Result<Value, NodeError> {
        let url = format!("{}/nodes/{host_id}/ops/{op}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| NodeError::Unreachable {
                url: url.clone(),
                source,
            })?;
        Self::parse("the operation's state", resp).await
    }

    /// An `upgradesstables` of `keyspace` with files to rewrite: blocks
    /// for as long as the ring times it (the node rewrites its files
    /// after).
    pub async fn upgrade(&self, host_id: &str, keyspace: &str) -> Result<Value, NodeError> {
        self.post(
            &format!(
                "nodes/{host_id}/upgradesstables?keyspace={}",
                query_escape(keyspace)
            ),
            None,
        )
        .await
    }

    /// Carries out an operation; blocks as long as the JMX call does. The
    /// ring service's answer (an empty object for void operations).
    pub async fn call(&self, host_id: &str, call: &RingCall) -> Result<Value, NodeError> {
        if let RingCall::Repair { keyspace, options } = call {
            let body = serde_json::to_value(options).unwrap_or_default();
            return self
                .post(
                    &format!("nodes/{host_id}/repair?keyspace={}", query_escape(keyspace)),
                    Some(&body),
                )
                .await;
        }
        let path = match call {
            RingCall::Decommission { force } => {
                format!("nodes/{host_id}/decommission?force={force}")
            }
            RingCall::Drain => format!("nodes/{host_id}/drain"),
            RingCall::RemoveNode { host_id: target } => {
                format!("nodes/{host_id}/remove?target={target}")
            }
            RingCall::ForceRemoveCompletion => format!("nodes/{host_id}/force-remove-completion"),
            RingCall::Cleanup { keyspace } => {
                format!(
                    "nodes/{host_id}/cleanup?keyspace={}",
                    query_escape(keyspace)
                )
            }
            RingCall::TerminateRepairs => format!("nodes/{host_id}/terminate-repairs"),
            // Answered above, or by the node itself (see FakeNode::repairs
            // and FakeNode::sstables).
            RingCall::Repair { .. }
            | RingCall::RepairStatus { .. }
            | RingCall::UpgradeSstables { .. }
            | RingCall::ReloadSeeds
            | RingCall::ReloadSslCertificates => {
                return Ok(Value::Null);
            }
        };
        self.post(&path, None).await
    }
}

/// A query parameter's value, percent-encoded (the unreserved bytes kept).
pub fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One repair command a node ran, as `ActiveRepairService` keeps it. The
/// command is asynchronous, as in Cassandra: `repairAsync` returns its
/// number at once; its status follows the ring's operation: null while
/// the command waits in the repair executor's queue
/// ([`crate::ring::Timing::repair_queue_ms`]), `IN_PROGRESS` while
/// `RepairRunnable` runs it (`recordRepairStatus` when it starts;
/// [`crate::ring::Timing::repair_ms`] per range), then COMPLETED or FAILED
/// with its messages.
#[derive(Debug, Clone)]
pub struct RepairRun {
    pub keyspace: String,
    /// The options it was given (`RepairOption.parse`'s keys).
    pub options: std::collections::BTreeMap<String, String>,
    /// The ring's operation.
    pub op: u64,
}

/// The repair commands a node ran, by command number (from 1).
pub type Repairs = std::sync::Arc<std::sync::Mutex<Vec<RepairRun>>>;

/// `getParentRepairStatus(cmd)` of command `cmd` from the ring's state of
/// its operation (`{"state", "message"}`): the status's name and its
/// messages (RepairRunnable.success / fail: `RepairTask.successMessage`,
/// or the failure's reason and the summary).
pub fn repair_status(cmd: usize, op: &Value) -> Value {
    match op["state"].as_str().unwrap_or_default() {
        "queued" => Value::Null,
        "running" => json!(["IN_PROGRESS"]),
        "completed" => json!(["COMPLETED", "Repair completed successfully"]),
        _ => {
            let message = op["message"]
                .as_str()
                .filter(|m| !m.is_empty())
                .unwrap_or("Repair session failed: the coordinator stopped");
            json!([
                "FAILED",
                message,
                format!("Repair command #{cmd} finished with error")
            ])
        }
    }
}

/// `RepairOption.toString` (4.1) of the options a repair was given, their
/// defaults filled in as `RepairOption.parse` does.
fn repair_options_text(options: &std::collections::BTreeMap<String, String>) -> String {
    let get = |key: &str, default: &str| {
        options
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    format!(
        "repair options (parallelism: {}, primary range: {}, incremental: {}, job threads: {}, ColumnFamilies: [], dataCenters: [], hosts: [], previewKind: NONE, pull repair: false, force repair: false, optimise streams: false, ignore unreplicated keyspaces: false)",
        get("parallelism", "sequential"),
        get("primaryRange", "false"),
        get("incremental", "false"),
        get("jobThreads", "1"),
    )
}

/// A running fake node: who it is in the ring and what it runs as.
#[derive(Debug, Clone)]
pub struct FakeNode {
    pub ring: RingClient,
    pub host_id: String,
    pub identity: Identity,
    /// When the StorageService MBean is registered. The Jolokia agent
    /// starts with the JVM (premain) and answers at once; Cassandra
    /// registers `org.apache.cassandra.db:type=StorageService` a moment
    /// later, during CassandraDaemon.setup: until then a request for it
    /// gets 404 InstanceNotFoundException (the STARTING window).
    pub storage_service_at: std::time::Instant,
    /// The agent's access policy (`policyLocation`), checked before
    /// anything else: Jolokia refuses before it looks the MBean up.
    pub policy: super::policy::Policy,
    /// The repairs it ran.
    pub repairs: Repairs,
    /// Its sstables on the data volume (none when it writes no files).
    pub sstables: Option<Arc<std::sync::Mutex<Sstables>>>,
    /// Its seeds (none: it cannot read them again, `reloadSeeds` answers
    /// null as on an error).
    pub seeds: Option<Seeds>,
    /// Its SSL contexts (none: no context to reload, as a node before 4.1
    /// here, or one without encryption).
    pub tls: Option<Arc<super::tls::SslState>>,
}

/// The seeds of a node as its Gossiper keeps them (`Gossiper.seeds`): read
/// from cassandra.yaml at start and again on `reloadSeeds`.
#[derive(Debug, Clone)]
pub struct Seeds {
    /// The node's cassandra.yaml.
    pub yaml: std::path::PathBuf,
    /// Its broadcast address: never its own seed (`Gossiper.buildSeedsList`
    /// and `reloadSeeds` leave it out).
    pub own_address: String,
    pub current: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Seeds {
    /// The seeds of `yaml` as the node starts with them.
    pub fn read(yaml: std::path::PathBuf, own_address: &str) -> Seeds {
        let seeds = Seeds {
            yaml,
            own_address: own_address.to_string(),
            current: Arc::default(),
        };
        seeds.reload();
        seeds
    }

    /// `Gossiper.reloadSeeds`: the list read again (an empty one leaves the
    /// seeds as they were), `None` when it cannot be read ("Error while
    /// getting seed node list", the seeds kept).
    fn reload(&self) -> Option<Vec<String>> {
        let text = std::fs::read_to_string(&self.yaml).ok()?;
        let read = match super::config::seeds_of_yaml(&text) {
            Ok(read) => read,
            Err(e) => {
                println!("WARN  [main] Error while getting seed node list: {e}");
                return None;
            }
        };
        let read: Vec<String> = read
            .into_iter()
            .filter(|s| *s != self.own_address)
            .collect();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if !read.is_empty() {
            *current = read;
        }
        Some(current.clone())
    }
}

/// The StorageService MBean's name, whatever properties follow.
const STORAGE_SERVICE: &str = "org.apache.cassandra.db:type=StorageService";

fn java_error_of(e: NodeError) -> JavaError {
    match e {
        NodeError::Refused(r) => JavaError::thrown(&r.error_type, r.message),
        other => JavaError::thrown("java.lang.RuntimeException", other.to_string()),
    }
}

impl FakeNode {
    async fn answer_one(&self, request: &Value) -> Value {
        let mbean = request.get("mbean").and_then(Value::as_str).unwrap_or("");
        let identity = &self.identity;
        if let Err(e) = self
            .policy
            .check(request, &|name| jolokia::mbean_attributes(identity, name))
        {
            return jolokia::failure(Some(request), &e);
        }
        if mbean.starts_with(STORAGE_SERVICE) && std::time::Instant::now() < self.storage_service_at
        {
            return jolokia::failure(Some(request), &JavaError::no_instance(mbean));
        }
        let view = match self.ring.view(&self.host_id).await {
            Ok(v) => v,
            Err(e) => {
                return jolokia::failure(Some(request), &java_error_of(e));
            }
        };
        match jolokia::step(&self.identity, &view, request) {
            Step::Answer(v) => v,
            Step::Call {
                call:
                    RingCall::UpgradeSstables {
                        keyspace,
                        exclude_current_version,
                    },
                echo,
            } => {
                let outcome = self
                    .upgrade_sstables(&keyspace, exclude_current_version)
                    .await;
                jolokia::answer_call(&echo, outcome)
            }
            Step::Call {
                call: RingCall::RepairStatus { cmd },
                echo,
            } => {
                let outcome = self.repair_status(cmd).await;
                jolokia::answer_call(&echo, outcome)
            }
            Step::Call {
                call: RingCall::ReloadSslCertificates,
                echo,
            } => {
                // Reads files and logs: off the event loop.
                if let Some(tls) = self.tls.clone() {
                    let _ = tokio::task::spawn_blocking(move || tls.force_reload()).await;
                }
                jolokia::answer_call(&echo, Ok(Value::Null))
            }
            Step::Call {
                call: RingCall::ReloadSeeds,
                echo,
            } => {
                // Gossiper.getSeeds: InetAddressAndPort.toString of each,
                // `/10.0.0.1:7000`.
                let port = self.identity.storage_port;
                let seeds = self.seeds.as_ref().and_then(Seeds::reload).map(|seeds| {
                    seeds
                        .iter()
                        .map(|s| format!("/{s}:{port}"))
                        .collect::<Vec<_>>()
                });
                jolokia::answer_call(&echo, Ok(json!(seeds)))
            }
            Step::Call { call, echo } => {
                let outcome = self
                    .ring
                    .call(&self.host_id, &call)
                    .await
                    .map_err(java_error_of)
                    .map(|answer| self.result_of(&call, answer));
                jolokia::answer_call(&echo, outcome)
            }
        }
    }

    /// `upgradeSSTables`, on the node's own files: when the keyspace has
    /// files to rewrite, the call lasts as long as the ring times it
    /// ([`crate::ring::Timing::upgrade_ms`]; a kill in the middle leaves
    /// them as they were), then they are rewritten; 0 (SUCCESSFUL).
    async fn upgrade_sstables(
        &self,
        keyspace: &str,
        exclude_current_version: bool,
    ) -> Result<Value, JavaError> {
        let Some(sstables) = &self.sstables else {
            return Ok(json!(0));
        };
        let due = sstables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .to_upgrade(keyspace, exclude_current_version);
        if due > 0 {
            println!(
                "INFO  [CompactionExecutor:1] Starting Upgrade sstables for {keyspace} ({due} sstables)"
            );
            self.ring
                .upgrade(&self.host_id, keyspace)
                .await
                .map_err(java_error_of)?;
        }
        let mut sstables = sstables.lock().unwrap_or_else(|e| e.into_inner());
        sstables
            .upgrade(keyspace, exclude_current_version)
            .map(|_| json!(0))
            .map_err(|e| JavaError::thrown("java.io.IOException", e.to_string()))
    }

    /// `getParentRepairStatus(cmd)`: null for a command it does not know
    /// (or still queued), else the status's name and the messages.
    async fn repair_status(&self, cmd: i64) -> Result<Value, JavaError> {
        let run = usize::try_from(cmd)
            .ok()
            .and_then(|c| c.checked_sub(1))
            .and_then(|i| {
                self.repairs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(i)
                    .cloned()
            });
        let Some(run) = run else {
            return Ok(Value::Null);
        };
        let op = self
            .ring
            .op_state(&self.host_id, run.op)
            .await
            .map_err(java_error_of)?;
        Ok(repair_status(cmd as usize, &op))
    }

    /// What the JMX operation returns, from the ring service's answer.
    fn result_of(&self, call: &RingCall, answer: Value) -> Value {
        match call {
            RingCall::Cleanup { .. } => answer.get("status").cloned().unwrap_or(json!(0)),
            // StorageService.repair (3.11 `repairAsync`, 4.x `repair`):
            // 0 when there is nothing to repair (RF 1, no range);
            // otherwise the command number, and RepairRunnable records how
            // it ended (ActiveRepairService.recordRepairStatus).
            RingCall::Repair { keyspace, options } => {
                let Some(op) = answer.get("op").and_then(Value::as_u64) else {
                    return json!(0);
                };
                let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
                let cmd = repairs.len() + 1;
                repairs.push(RepairRun {
                    keyspace: keyspace.clone(),
                    options: options.clone(),
                    op,
                });
                println!(
                    "INFO  [Repair-Task:{cmd}] Starting repair command #{cmd} (00000000-0000-1000-8000-{cmd:012}), repairing keyspace {keyspace} with {}",
                    repair_options_text(options)
                );
                // RepairRunnable.complete logs the end under the session's
                // prefix (4.1 jar), or the failure first.
                let (ring, host_id) = (self.ring.clone(), self.host_id.clone());
                tokio::spawn(async move {
                    let prefix = format!("[repair #00000000-0000-1000-8000-{cmd:012}]");
                    loop {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let Ok(state) = ring.op_state(&host_id, op).await else {
                            return;
                        };
                        match state["state"].as_str().unwrap_or_default() {
                            "queued" | "running" => continue,
                            "completed" => println!(
                                "INFO  [Repair-Task:{cmd}] {prefix}Repair command #{cmd} finished in 1 second"
                            ),
                            _ => println!(
                                "ERROR [Repair-Task:{cmd}] Repair command #{cmd} failed with error {}\nINFO  [Repair-Task:{cmd}] {prefix}Repair command #{cmd} finished with error",
                                state["message"].as_str().unwrap_or_default()
                            ),
                        }
                        return;
                    }
                });
                json!(cmd)
            }
            _ => Value::Null,
        }
    }

    /// The answer to a request or a bulk array of them.
    pub async fn answer(&self, body: &Value) -> Value {
        match body {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.answer_one(item).await);
                }
                Value::Array(out)
            }
            one => self.answer_one(one).await,
        }
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}

/// A URL's percent-encoded text decoded (`+` as a space).
pub fn percent_decode(s: &str) -> String {
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

async fn handle(node: Arc<FakeNode>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let Some(rest) = path
        .strip_prefix("/jolokia")
        .filter(|r| r.is_empty() || r.starts_with('/'))
    else {
        return reply(
            StatusCode::NOT_FOUND,
            "text/html",
            "<h1>404 Not Found</h1>No context found for request".into(),
        );
    };
    let rest = rest.trim_start_matches('/').to_string();
    let method = req.method().clone();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let answer = if method == hyper::Method::POST {
        match jolokia::parse_body(&body) {
            Ok(request) => node.answer(&request).await,
            Err(error) => error,
        }
    } else {
        let p = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("p="))
            .map(percent_decode);
        let get_path = p.unwrap_or_else(|| percent_decode(&rest));
        match jolokia::request_of_get(get_path.trim_start_matches('/')) {
            Ok(request) => node.answer(&request).await,
            Err(error) => error,
        }
    };
    reply(StatusCode::OK, jolokia::CONTENT_TYPE, answer.to_string())
}

/// Serves Jolokia on `listener` until the task is dropped, every request
/// at once (the JMX stand-in: RMI has a thread per call).
pub async fn serve_jolokia(listener: TcpListener, node: Arc<FakeNode>) {
    serve_jolokia_pooled(listener, node, None).await
}

/// Serves Jolokia on `listener` as the agent does with `threads` threads
/// in its executor (None: as many as needed): a request waits for a free
/// thread, and one that blocks (a cleanup, an upgradesstables) holds its
/// thread until it returns.
pub async fn serve_jolokia_pooled(
    listener: TcpListener,
    node: Arc<FakeNode>,
    threads: Option<usize>,
) {
    let pool = threads.map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (node, pool) = (node.clone(), pool.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let (node, pool) = (node.clone(), pool.clone());
                async move {
                    let _thread = match &pool {
                        Some(p) => p.clone().acquire_owned().await.ok(),
                        None => None,
                    };
                    Ok::<_, Infallible>(handle(node, req).await)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod starting_tests {
    use super::*;
    use serde_json::json;

    /// getParentRepairStatus as the 4.1 jar answers it along a command's
    /// life: null while queued, `[IN_PROGRESS]` while it runs, then the
    /// outcome's name and messages (RepairRunnable.success / fail).
    #[test]
    fn a_repair_command_is_queued_then_runs_then_ends() {
        assert_eq!(repair_status(1, &json!({"state": "queued"})), Value::Null);
        assert_eq!(
            repair_status(1, &json!({"state": "running"})),
            json!(["IN_PROGRESS"])
        );
        assert_eq!(
            repair_status(1, &json!({"state": "completed"})),
            json!(["COMPLETED", "Repair completed successfully"])
        );
        assert_eq!(
            repair_status(
                3,
                &json!({"state": "failed", "message": "Terminate session is called"})
            ),
            json!([
                "FAILED",
                "Terminate session is called",
                "Repair command #3 finished with error"
            ])
        );
        assert!(repair_options_text(&Default::default()).starts_with(
            "repair options (parallelism: sequential, primary range: false, incremental: false, job threads: 1,"
        ));
    }

    #[tokio::test]
    async fn the_storage_service_mbean_is_missing_while_cassandra_starts() {
        let node = FakeNode {
            // Nothing listens there: a request that reaches the ring fails
            // otherwise.
            ring: RingClient::new("http://127.0.0.1:9"),
            host_id: "h".into(),
            identity: Identity::new("4.1.8", 7000).expect("an identity"),
            storage_service_at: std::time::Instant::now() + Duration::from_secs(60),
            policy: crate::fake_cassandra::policy::Policy::AllowAll,
            repairs: Repairs::default(),
            sstables: None,
            seeds: None,
            tls: None,
        };
        let read = json!({"type": "read", "mbean": STORAGE_SERVICE, "attribute": "OperationMode"});
        let answer = node.answer(&read).await;
        assert_eq!(answer["status"], 404, "{answer}");
        assert_eq!(
            answer["error_type"],
            "javax.management.InstanceNotFoundException"
        );
        let other =
            json!({"type": "read", "mbean": "java.lang:type=Runtime", "attribute": "Uptime"});
        assert_ne!(node.answer(&other).await["status"], 404);
    }
}
