//! A real CQL client for the tests on real Cassandra members (issue 28):
//! ScyllaDB's Rust driver, run inside a Pod's network namespace as an
//! application Pod's driver would run, a data check and a background
//! writer. Network I/O.
//!
//! - [`Netns`]: an OS thread that entered a network namespace and runs a
//!   current-thread tokio runtime; the test's own runtime hands it futures
//!   and gets their results back. Every socket the driver opens is opened
//!   by its tasks on that thread, so inside the namespace, where kubesim
//!   routes ClusterIPs as kube-proxy does: the driver reaches the members
//!   at the ClusterIPs they advertise (`broadcast_rpc_address`), which the
//!   host cannot reach.
//! - [`Client`]: a driver session; [`Client::keyspace`] creates a keyspace
//!   of NetworkTopologyStrategy and its table of key → value: a [`Table`],
//!   which writes and reads one key, and checks many ([`Table::check`],
//!   [`DataReport`]). [`ConnectOptions`] add TLS, trusting a cluster's
//!   [`CaBundle`], and a role's credentials to what a session is built
//!   with; by default it has neither.
//! - [`Writer`]: writes and reads back keys at QUORUM at a fixed rate for
//!   the whole of an operation, as an application would, and records each
//!   failed request with the driver's error under the phase (operation)
//!   that was running ([`WriterReport`], [`PhaseReport`]).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};
use openssl::ssl::{SslConnector, SslConnectorBuilder, SslMethod};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::{OpenSsl010Config, Session};
use scylla::client::session_builder::SessionBuilder;
use scylla::observability::history::HistoryCollector;
use scylla::policies::host_filter::AllowListHostFilter;
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

/// The driver's consistency levels, for the tests that have no `scylla`
/// dependency of their own (the binary's e2e tests).
pub use scylla::statement::Consistency;

/// The driver's request timeout. Longer than any timeout of Cassandra's
/// own (`write_request_timeout` 2 s, `read_request_timeout` 5 s,
/// `request_timeout` 10 s), so that a coordinator's answer (a write
/// timeout with the acknowledgements it got, say) is what a failed
/// request reports, not the driver's giving up; shorter than the driver's
/// 30 s default, so that a request stuck on a member that went away
/// fails within the operation it belongs to and the writer keeps its
/// pace.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(12);

/// The [`Writer`]'s pace: a modest application's.
pub const WRITES_PER_SECOND: u32 = 20;

/// The most requests the [`Writer`] has in flight, and the data check.
const IN_FLIGHT: usize = 16;

/// How many times the data check reads a key whose read fails, and how
/// long it waits in between.
pub const CHECK_ATTEMPTS: usize = 3;
pub const CHECK_PAUSE: Duration = Duration::from_secs(2);

/// How many keys a [`DataReport`] names.
const NAMED: usize = 10;

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("entering the network namespace {path}: {source}")]
    EnterNetns {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the network namespace's thread has ended")]
    NetnsGone,
    #[error("reading the CA bundle: {0}")]
    ReadCaBundle(String),
    #[error("building the TLS context: {0}")]
    BuildTls(openssl::error::ErrorStack),
    #[error("connecting to {contact_points:?}: {source}")]
    Connect {
        contact_points: Vec<SocketAddr>,
        source: Box<scylla::errors::NewSessionError>,
    },
    #[error("{statement}: {source}")]
    Prepare {
        statement: String,
        source: Box<scylla::errors::PrepareError>,
    },
    #[error("{statement}: {source}{attempts}")]
    Execute {
        statement: String,
        source: Box<scylla::errors::ExecutionError>,
        /// What each attempt that reached a node met, when the request
        /// was retried ([`attempts`]): the driver's error names the last
        /// one only.
        attempts: String,
    },
    #[error("{statement}: reading the rows: {detail}")]
    Rows { statement: String, detail: String },
}

/// Certificate authorities to trust, as PEM (one or more `CERTIFICATE`
/// blocks): the bundle a cluster's member certificates chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaBundle(pub Vec<u8>);

/// How a [`Client`]'s session talks to the members, beyond where it
/// connects. The default, clear text and no credentials, is what the
/// tests have always used.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// TLS to every member, trusting these authorities alone (not the
    /// system's). Each member's certificate must name, as an IP SAN, the
    /// address the driver connects to: the address the member advertises
    /// (its ClusterIP), which the driver checks on every connection.
    pub tls: Option<CaBundle>,
    /// A role's name and password, for Cassandra's `PasswordAuthenticator`.
    pub credentials: Option<(String, String)>,
}

impl ConnectOptions {
    /// `builder` with these options.
    fn apply(&self, mut builder: SessionBuilder) -> Result<SessionBuilder, Error> {
        if let Some(ca) = &self.tls {
            builder = builder.tls_context(Some(OpenSsl010Config::new(tls_connector(ca)?)));
        }
        if let Some((name, password)) = &self.credentials {
            builder = builder.user(name, password);
        }
        Ok(builder)
    }
}

/// An OpenSSL client context that verifies the peer's certificate against
/// `ca` alone. The driver adds, per connection, that the certificate must
/// name the node's IP address (`X509_VERIFY_PARAM_set1_ip`).
fn tls_connector(ca: &CaBundle) -> Result<SslConnectorBuilder, Error> {
    let certificates =
        X509::stack_from_pem(&ca.0).map_err(|e| Error::ReadCaBundle(e.to_string()))?;
    if certificates.is_empty() {
        return Err(Error::ReadCaBundle("it holds no certificate".into()));
    }
    let mut trusted = X509StoreBuilder::new().map_err(Error::BuildTls)?;
    for certificate in certificates {
        trusted.add_cert(certificate).map_err(Error::BuildTls)?;
    }
    // The connector verifies the peer (SSL_VERIFY_PEER); replacing its
    // store drops the system's authorities it was given.
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(Error::BuildTls)?;
    builder.set_cert_store(trusted.build());
    Ok(builder)
}

/// The certificate a member serves on a TLS port, as a client that
/// trusts `ca` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCertificate {
    /// Its serial number, in hex.
    pub serial: String,
    /// Its `notAfter`, as OpenSSL prints it.
    pub not_after: String,
}

/// A TLS handshake with `address`, from the namespace's thread, verifying
/// the peer against `ca` and the address (IP SAN): the certificate it
/// serves, or why the handshake failed. Speaks no protocol after it.
pub async fn served_certificate(
    netns: &Netns,
    address: SocketAddr,
    ca: &CaBundle,
) -> Result<ServedCertificate, String> {
    let mut builder = tls_connector(ca).map_err(|e| e.to_string())?;
    builder.set_verify(openssl::ssl::SslVerifyMode::PEER);
    let connector = builder.build();
    netns
        .run(async move {
            // A blocking connect on the namespace's own thread: one brief
            // handshake, the thread's other tasks wait for it.
            let stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
                .map_err(|e| format!("connecting to {address}: {e}"))?;
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            let mut config = connector.configure().map_err(|e| e.to_string())?;
            config.set_use_server_name_indication(false);
            config
                .param_mut()
                .set_ip(address.ip())
                .map_err(|e| e.to_string())?;
            config.set_verify_hostname(false);
            let tls = config
                .connect("member", stream)
                .map_err(|e| format!("TLS handshake with {address}: {e}"))?;
            let peer = tls
                .ssl()
                .peer_certificate()
                .ok_or_else(|| format!("{address} served no certificate"))?;
            let serial = peer
                .serial_number()
                .to_bn()
                .and_then(|n| n.to_hex_str().map(|h| h.to_string()))
                .map_err(|e| e.to_string())?;
            Ok(ServedCertificate {
                serial,
                not_after: peer.not_after().to_string(),
            })
        })
        .await
        .map_err(|e| e.to_string())?
}

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A thread in a network namespace that runs the futures handed to it on
/// its own current-thread runtime. Dropping it ends the thread and every
/// task still on it.
pub struct Netns {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Netns {
    /// A thread in the network namespace at `path` (`/proc/<pid>/ns/net`).
    pub fn enter(path: impl AsRef<Path>) -> Result<Arc<Netns>, Error> {
        let path = path.as_ref().to_path_buf();
        let failed = |source| Error::EnterNetns {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(failed)?;
        let (jobs, mut incoming) = mpsc::unbounded_channel::<Job>();
        let (ready, entered) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cql-netns".into())
            .spawn(move || {
                // setns moves this thread only: the test's threads stay.
                let runtime = setns(&file, CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
                    .and_then(|()| {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                    });
                let runtime = match runtime {
                    Ok(runtime) => {
                        let _ = ready.send(Ok(()));
                        runtime
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    while let Some(job) = incoming.recv().await {
                        tokio::spawn(job);
                    }
                });
            })
            .map_err(failed)?;
        entered
            .recv()
            .map_err(|_| Error::NetnsGone)?
            .map_err(failed)?;
        Ok(Arc::new(Netns {
            jobs: Some(jobs),
            thread: Some(thread),
        }))
    }

    /// Runs `future` as a task on the namespace's thread; its output, once
    /// done, comes out of the receiver.
    pub fn spawn<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<oneshot::Receiver<T>, Error> {
        let (done, output) = oneshot::channel();
        let job = Box::pin(async move {
            let _ = done.send(future.await);
        });
        self.jobs
            .as_ref()
            .ok_or(Error::NetnsGone)?
            .send(job)
            .map_err(|_| Error::NetnsGone)?;
        Ok(output)
    }

    /// Runs `future` on the namespace's thread and waits for its output.
    pub async fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, Error> {
        self.spawn(future)?.await.map_err(|_| Error::NetnsGone)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.jobs = None;
        match self.thread.take() {
            // A task of its own dropped it: the thread ends once the
            // task returns (its job channel is closed now).
            Some(thread) if thread.thread().id() == std::thread::current().id() => {}
            Some(thread) => {
                let _ = thread.join();
            }
            None => {}
        }
    }
}

/// A driver session whose connections are all made in one network
/// namespace.
pub struct Client {
    // first: the session's tasks end with the namespace's runtime
    session: Arc<Session>,
    netns: Arc<Netns>,
}

impl Client {
    /// Connects to the ring through `contact_points` (CQL addresses), with
    /// the driver's defaults otherwise (token- and datacenter-aware load
    /// balancing, its default retry policy) and [`REQUEST_TIMEOUT`]. The
    /// driver learns the other members from the ring itself (the
    /// addresses they advertise) and follows its changes.
    pub async fn connect(
        netns: Arc<Netns>,
        contact_points: &[SocketAddr],
    ) -> Result<Client, Error> {
        Client::connect_with(netns, contact_points, &ConnectOptions::default()).await
    }

    /// [`Client::connect`] with `options` (TLS, credentials).
    pub async fn connect_with(
        netns: Arc<Netns>,
        contact_points: &[SocketAddr],
        options: &ConnectOptions,
    ) -> Result<Client, Error> {
        let builder = SessionBuilder::new().known_nodes_addr(contact_points.iter().copied());
        Client::build(netns, builder, contact_points, options).await
    }

    /// Builds the session of `builder` with `options` and
    /// [`REQUEST_TIMEOUT`], in `netns`.
    async fn build(
        netns: Arc<Netns>,
        builder: SessionBuilder,
        contact_points: &[SocketAddr],
        options: &ConnectOptions,
    ) -> Result<Client, Error> {
        let profile = ExecutionProfile::builder()
            .request_timeout(Some(REQUEST_TIMEOUT))
            .build();
        let builder = options
            .apply(builder)?
            .default_execution_profile_handle(profile.into_handle());
        let session = netns
            .run(async move { builder.build().await })
            .await?
            .map_err(|source| Error::Connect {
                contact_points: contact_points.to_vec(),
                source: Box::new(source),
            })?;
        Ok(Client {
            session: Arc::new(session),
            netns,
        })
    }

    /// Connects to `node` alone: the driver's host filter refuses every
    /// other member it learns of, so `node` coordinates every request. A
    /// read at ONE asks one replica, no read repair mends it on the way,
    /// and the coordinator mostly asks itself; mostly, not always: its
    /// dynamic snitch may prefer another replica (on real 4.1.8, 127 of
    /// 146 keys a member lacked on its disk read as missing this way).
    pub async fn connect_only(netns: Arc<Netns>, node: SocketAddr) -> Result<Client, Error> {
        Client::connect_only_with(netns, node, &ConnectOptions::default()).await
    }

    /// [`Client::connect_only`] with `options` (TLS, credentials).
    pub async fn connect_only_with(
        netns: Arc<Netns>,
        node: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Client, Error> {
        let only = AllowListHostFilter::new([node]).expect("a socket address resolves to itself");
        let builder = SessionBuilder::new()
            .known_node_addr(node)
            .host_filter(Arc::new(only));
        Client::build(netns, builder, &[node], options).await
    }

    /// The ring as the driver sees it: each node's CQL address and
    /// datacenter.
    pub fn nodes(&self) -> Vec<(IpAddr, Option<String>)> {
        let state = self.session.get_cluster_state();
        let mut nodes: Vec<_> = state
            .get_nodes_info()
            .iter()
            .map(|n| (n.address.ip(), n.datacenter.clone()))
            .collect();
        nodes.sort();
        nodes
    }

    /// Creates keyspace `name` (NetworkTopologyStrategy, `replication`:
    /// each datacenter's replication factor) and its table `kv` of key →
    /// value, unless they exist; the driver waits for the ring's schema
    /// agreement after each.
    pub async fn keyspace(&self, name: &str, replication: &[(&str, u32)]) -> Result<Table, Error> {
        let factors: Vec<String> = replication
            .iter()
            .map(|(dc, rf)| format!("'{dc}': {rf}"))
            .collect();
        let statements = [
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {name} WITH replication = \
                 {{'class': 'NetworkTopologyStrategy', {}}}",
                factors.join(", ")
            ),
            format!("CREATE TABLE IF NOT EXISTS {name}.kv (key text PRIMARY KEY, value text)"),
        ];
        for statement in statements {
            let session = self.session.clone();
            let text = statement.clone();
            self.netns
                .run(async move { session.query_unpaged(text, ()).await })
                .await?
                .map_err(|source| Error::Execute {
                    statement,
                    source: Box::new(source),
                    attempts: String::new(),
                })?;
        }
        let insert = self
            .prepare(format!("INSERT INTO {name}.kv (key, value) VALUES (?, ?)"))
            .await?;
        let select = self
            .prepare(format!("SELECT value FROM {name}.kv WHERE key = ?"))
            .await?;
        Ok(Table {
            netns: self.netns.clone(),
            statements: Statements {
                session: self.session.clone(),
                insert,
                select,
            },
        })
    }

    /// The replication map of `keyspace` (`class` and each datacenter's
    /// factor), as `system_schema.keyspaces` holds it.
    pub async fn replication(&self, keyspace: &str) -> Result<BTreeMap<String, String>, Error> {
        let session = self.session.clone();
        let statement =
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?".to_string();
        let text = statement.clone();
        let keyspace = keyspace.to_string();
        let result = self
            .netns
            .run(async move { session.query_unpaged(text, (keyspace,)).await })
            .await?
            .map_err(|source| Error::Execute {
                statement: statement.clone(),
                source: Box::new(source),
                attempts: String::new(),
            })?;
        let rows = result.into_rows_result().map_err(|e| Error::Rows {
            statement: statement.clone(),
            detail: e.to_string(),
        })?;
        let mut replication = BTreeMap::new();
        for row in rows
            .rows::<(BTreeMap<String, String>,)>()
            .map_err(|e| Error::Rows {
                statement: statement.clone(),
                detail: e.to_string(),
            })?
        {
            let (map,) = row.map_err(|e| Error::Rows {
                statement: statement.clone(),
                detail: e.to_string(),
            })?;
            replication = map;
        }
        Ok(replication)
    }

    async fn prepare(&self, statement: String) -> Result<PreparedStatement, Error> {
        let session = self.session.clone();
        let text = statement.clone();
        let mut prepared = self
            .netns
            .run(async move { session.prepare(text).await })
            .await?
            .map_err(|source| Error::Prepare {
                statement,
                source: Box::new(source),
            })?;
        // Writing a key its one value, or reading it, may be repeated
        // safely: the driver's retry policy may then try another node
        // after a broken connection or a timeout, as an application
        // marking its statements so would let it.
        prepared.set_is_idempotent(true);
        Ok(prepared)
    }
}

/// A table of key → value (`<keyspace>.kv`), its statements prepared.
#[derive(Clone)]
pub struct Table {
    netns: Arc<Netns>,
    statements: Statements,
}

/// What the tasks on the namespace's thread use of a [`Table`]: not the
/// [`Netns`], whose last holder ends its thread (a task cannot).
#[derive(Clone)]
struct Statements {
    session: Arc<Session>,
    insert: PreparedStatement,
    select: PreparedStatement,
}

impl Table {
    /// Writes `key` = `value` at `consistency`.
    pub async fn write(
        &self,
        key: &str,
        value: &str,
        consistency: Consistency,
    ) -> Result<(), Error> {
        let task = self.statements.write_task(key, value, consistency);
        self.netns.run(task).await?
    }

    /// `key`'s value read at `consistency` (None: no such key).
    pub async fn read(&self, key: &str, consistency: Consistency) -> Result<Option<String>, Error> {
        let task = self.statements.read_task(key, consistency);
        self.netns.run(task).await?
    }

    /// Reads every key of `expected` at `consistency` (ALL: every replica
    /// must answer; QUORUM only where a replica is known to be down) and
    /// reports those missing, with another value, or whose read failed.
    pub async fn check(
        &self,
        expected: &BTreeMap<String, String>,
        consistency: Consistency,
    ) -> Result<DataReport, Error> {
        let (statements, expected) = (self.statements.clone(), expected.clone());
        self.netns
            .run(async move { statements.check_here(expected, consistency).await })
            .await
    }

    /// Starts a [`Writer`] on this table, in phase `first_phase`.
    pub fn writer(&self, first_phase: &str) -> Result<Writer, Error> {
        Writer::start(self, first_phase)
    }
}

/// The tasks on the namespace's thread.
impl Statements {
    fn write_task(
        &self,
        key: &str,
        value: &str,
        consistency: Consistency,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let (session, mut insert) = (self.session.clone(), self.insert.clone());
        let (key, value) = (key.to_string(), value.to_string());
        insert.set_consistency(consistency);
        let history = Arc::new(HistoryCollector::new());
        insert.set_history_listener(history.clone());
        async move {
            session
                .execute_unpaged(&insert, (&key, &value))
                .await
                .map(|_| ())
                .map_err(|source| Error::Execute {
                    statement: format!("INSERT {key} at {consistency}"),
                    source: Box::new(source),
                    attempts: attempts(&history),
                })
        }
    }

    fn read_task(
        &self,
        key: &str,
        consistency: Consistency,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send + 'static {
        let (session, mut select) = (self.session.clone(), self.select.clone());
        let key = key.to_string();
        select.set_consistency(consistency);
        let history = Arc::new(HistoryCollector::new());
        select.set_history_listener(history.clone());
        async move {
            let statement = format!("SELECT {key} at {consistency}");
            let result = session
                .execute_unpaged(&select, (&key,))
                .await
                .map_err(|source| Error::Execute {
                    statement: statement.clone(),
                    source: Box::new(source),
                    attempts: attempts(&history),
                })?;
            let unreadable = |detail: String| Error::Rows {
                statement: statement.clone(),
                detail,
            };
            let rows = result
                .into_rows_result()
                .map_err(|e| unreadable(e.to_string()))?;
            let row = rows
                .maybe_first_row::<(Option<String>,)>()
                .map_err(|e| unreadable(e.to_string()))?;
            Ok(row.and_then(|(value,)| value))
        }
    }

    async fn check_here(
        &self,
        expected: BTreeMap<String, String>,
        consistency: Consistency,
    ) -> DataReport {
        let mut report = DataReport {
            consistency,
            checked: expected.len(),
            ..DataReport::default()
        };
        let mut todo: Vec<(String, String)> = expected.into_iter().collect();
        for attempt in 1..=CHECK_ATTEMPTS {
            let mut failed = Vec::new();
            for (key, value, read) in self.read_each(todo, consistency).await {
                match read {
                    Ok(Some(found)) if found == value => {}
                    Ok(Some(found)) => report.wrong.push((key, value, found)),
                    Ok(None) => report.missing.push(key),
                    Err(e) => failed.push((key, value, cause(&e))),
                }
            }
            if attempt == 1 {
                report.failed_at_first = failed
                    .iter()
                    .map(|(k, _, e)| (k.clone(), e.clone()))
                    .collect();
                report.failed_at_first.sort();
            }
            if failed.is_empty() || attempt == CHECK_ATTEMPTS {
                report.failed = failed.into_iter().map(|(k, _, e)| (k, e)).collect();
                break;
            }
            todo = failed.into_iter().map(|(k, v, _)| (k, v)).collect();
            tokio::time::sleep(CHECK_PAUSE).await;
        }
        report.missing.sort();
        report.wrong.sort();
        report.failed.sort();
        report
    }

    /// Reads each key, [`IN_FLIGHT`] at a time: (key, expected value, what
    /// the read gave).
    async fn read_each(
        &self,
        keys: Vec<(String, String)>,
        consistency: Consistency,
    ) -> Vec<(String, String, Result<Option<String>, Error>)> {
        let mut reads = JoinSet::new();
        let mut done = Vec::new();
        let mut keys = keys.into_iter();
        loop {
            while reads.len() < IN_FLIGHT {
                let Some((key, value)) = keys.next() else {
                    break;
                };
                let read = self.read_task(&key, consistency);
                reads.spawn(async move { (key, value, read.await) });
            }
            match reads.join_next().await {
                Some(Ok(read)) => done.push(read),
                // A read task that panicked or was cancelled: the driver's,
                // if ever; the key is then neither checked nor reported.
                Some(Err(_)) => {}
                None => return done,
            }
        }
    }
}

/// What a data check found.
#[derive(Debug, Default)]
pub struct DataReport {
    pub consistency: Consistency,
    /// How many keys were read.
    pub checked: usize,
    /// Keys not found.
    pub missing: Vec<String>,
    /// Keys found with another value: (key, expected, found).
    pub wrong: Vec<(String, String, String)>,
    /// Keys whose read still failed after [`CHECK_ATTEMPTS`], with the
    /// last error.
    pub failed: Vec<(String, String)>,
    /// Keys whose first read failed, with its error (read again after
    /// [`CHECK_PAUSE`]: a read that fails, a timeout say, tells nothing of
    /// the data; the check reports it all the same).
    pub failed_at_first: Vec<(String, String)>,
}

impl DataReport {
    /// Every key read, found, with its value.
    pub fn clean(&self) -> bool {
        self.missing.is_empty() && self.wrong.is_empty() && self.failed.is_empty()
    }
}

impl fmt::Display for DataReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} keys read at {}: {} missing, {} with another value, {} failed",
            self.checked,
            self.consistency,
            self.missing.len(),
            self.wrong.len(),
            self.failed.len()
        )?;
        if !self.missing.is_empty() {
            let named = &self.missing[..self.missing.len().min(NAMED)];
            write!(f, "\n  missing: {}", named.join(", "))?;
            if self.missing.len() > NAMED {
                write!(f, " and {} more", self.missing.len() - NAMED)?;
            }
        }
        for (key, expected, found) in self.wrong.iter().take(NAMED) {
            write!(f, "\n  {key}: expected {expected:?}, found {found:?}")?;
        }
        for (key, error) in self.failed.iter().take(NAMED) {
            write!(f, "\n  {key}: {error}")?;
        }
        if !self.failed_at_first.is_empty() {
            let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, error) in &self.failed_at_first {
                *errors.entry(error).or_default() += 1;
            }
            write!(
                f,
                "\n  {} reads failed at first ({} ...) and were read again:",
                self.failed_at_first.len(),
                self.failed_at_first[0].0
            )?;
            for (error, count) in errors {
                write!(f, "\n    {count}x {error}")?;
            }
        }
        Ok(())
    }
}

/// What the [`Writer`] saw during one phase (operation).
#[derive(Debug, Clone)]
pub struct PhaseReport {
    pub name: String,
    /// How long the phase lasted (until the next began, or the writer
    /// stopped; so far, while it runs).
    pub lasted: Duration,
    pub writes_ok: usize,
    pub writes_failed: usize,
    pub reads_ok: usize,
    /// Reads that failed (a timeout, say): the driver's error.
    pub reads_failed: usize,
    /// Reads that answered, without the value just written (or no value):
    /// what QUORUM writes and reads exist to prevent.
    pub reads_stale: usize,
    /// Each distinct error (`write: ...` or `read: ...`, as the driver
    /// reported it) with its count and when it was first and last seen,
    /// since the phase began.
    pub errors: BTreeMap<String, Seen>,
    /// The keys whose write was acknowledged, with their values: the only
    /// keys a data check may demand.
    pub acknowledged: BTreeMap<String, String>,
    began: Instant,
    ended: Option<Instant>,
}

/// How often an error was seen, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    pub count: usize,
    pub first: Duration,
    pub last: Duration,
}

impl PhaseReport {
    fn new(name: &str) -> PhaseReport {
        PhaseReport {
            name: name.into(),
            lasted: Duration::ZERO,
            writes_ok: 0,
            writes_failed: 0,
            reads_ok: 0,
            reads_failed: 0,
            reads_stale: 0,
            errors: BTreeMap::new(),
            acknowledged: BTreeMap::new(),
            began: Instant::now(),
            ended: None,
        }
    }

    /// Requests that failed or read a stale value.
    pub fn failed(&self) -> usize {
        self.writes_failed + self.reads_failed + self.reads_stale
    }

    fn error(&mut self, error: String) {
        let at = self.began.elapsed();
        self.errors
            .entry(error)
            .and_modify(|s| {
                s.count += 1;
                s.last = at;
            })
            .or_insert(Seen {
                count: 1,
                first: at,
                last: at,
            });
    }
}

impl fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:.1} s): writes {} ok, {} failed; reads {} ok, {} failed, {} stale",
            self.name,
            self.lasted.as_secs_f64(),
            self.writes_ok,
            self.writes_failed,
            self.reads_ok,
            self.reads_failed,
            self.reads_stale
        )?;
        for (error, seen) in &self.errors {
            write!(
                f,
                "\n  {}x at {:.1}-{:.1} s: {error}",
                seen.count,
                seen.first.as_secs_f64(),
                seen.last.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

/// The [`Writer`]'s phases so far, in order.
#[derive(Debug, Clone)]
pub struct WriterReport {
    pub phases: Vec<PhaseReport>,
}

impl WriterReport {
    /// The phase named `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseReport> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// Every acknowledged key and its value, over all phases.
    pub fn acknowledged(&self) -> BTreeMap<String, String> {
        self.phases
            .iter()
            .flat_map(|p| p.acknowledged.clone())
            .collect()
    }
}

impl fmt::Display for WriterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for phase in &self.phases {
            writeln!(f, "{phase}")?;
        }
        Ok(())
    }
}

/// Writes keys `w<n>` at QUORUM, [`WRITES_PER_SECOND`], at most
/// [`IN_FLIGHT`] at a time, and reads each back at QUORUM once its write
/// is acknowledged, on the namespace's thread, until stopped. It keeps
/// going whatever the ring does (the driver reconnects on its own); every
/// failed request is recorded under the phase in which it started.
pub struct Writer {
    phases: Arc<Mutex<Vec<PhaseReport>>>,
    stop: watch::Sender<bool>,
    done: oneshot::Receiver<()>,
}

/// The phases, whoever panicked while holding them (nobody should).
fn lock(phases: &Mutex<Vec<PhaseReport>>) -> MutexGuard<'_, Vec<PhaseReport>> {
    phases.lock().unwrap_or_else(|e| e.into_inner())
}

impl Writer {
    fn start(table: &Table, first_phase: &str) -> Result<Writer, Error> {
        let phases = Arc::new(Mutex::new(vec![PhaseReport::new(first_phase)]));
        let (stop, stopped) = watch::channel(false);
        let writing = write_until_stopped(table.statements.clone(), phases.clone(), stopped);
        let done = table.netns.spawn(writing)?;
        Ok(Writer { phases, stop, done })
    }

    /// Marks the start of an operation: what fails from now on is its.
    pub fn phase(&self, name: &str) {
        let mut phases = lock(&self.phases);
        if let Some(last) = phases.last_mut() {
            last.ended = Some(Instant::now());
        }
        phases.push(PhaseReport::new(name));
    }

    /// The phases so far.
    pub fn report(&self) -> WriterReport {
        let mut phases = lock(&self.phases).clone();
        for phase in &mut phases {
            phase.lasted = phase.ended.unwrap_or_else(Instant::now) - phase.began;
        }
        WriterReport { phases }
    }

    /// Stops writing, waits for the requests in flight, and reports.
    pub async fn stop(mut self) -> WriterReport {
        let _ = self.stop.send(true);
        let _ = (&mut self.done).await;
        if let Some(last) = lock(&self.phases).last_mut() {
            last.ended = Some(Instant::now());
        }
        self.report()
    }
}

/// The writer's loop (on the namespace's thread).
async fn write_until_stopped(
    table: Statements,
    phases: Arc<Mutex<Vec<PhaseReport>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut pace = tokio::time::interval(Duration::from_secs(1) / WRITES_PER_SECOND);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut requests = JoinSet::new();
    for n in 0u64.. {
        let permit = tokio::select! {
            _ = stopped.changed() => break,
            permit = async {
                pace.tick().await;
                in_flight.clone().acquire_owned().await
            } => permit,
        };
        let Ok(permit) = permit else { break };
        while requests.try_join_next().is_some() {}
        let phase = lock(&phases).len() - 1;
        let (key, value) = (format!("w{n:06}"), format!("v{n}"));
        let (write, read) = (
            table.write_task(&key, &value, Consistency::Quorum),
            table.read_task(&key, Consistency::Quorum),
        );
        let phases = phases.clone();
        requests.spawn(async move {
            let _permit = permit;
            let written = write.await;
            let read = match written {
                Ok(()) => Some(read.await),
                Err(_) => None,
            };
            let mut phases = lock(&phases);
            let Some(report) = phases.get_mut(phase) else {
                return;
            };
            match written {
                Ok(()) => {
                    report.writes_ok += 1;
                    report.acknowledged.insert(key, value.clone());
                }
                Err(e) => {
                    report.writes_failed += 1;
                    report.error(format!("write: {}", cause(&e)));
                }
            }
            match read {
                None => {}
                Some(Ok(Some(found))) if found == value => report.reads_ok += 1,
                Some(Ok(found)) => {
                    report.reads_stale += 1;
                    report.error(format!("read: {found:?} instead of the value written"));
                }
                Some(Err(e)) => {
                    report.reads_failed += 1;
                    report.error(format!("read: {}", cause(&e)));
                }
            }
        });
    }
    while requests.join_next().await.is_some() {}
}

/// The driver's error without the statement (which names the key, so that
/// the same error counts once), with its attempts.
fn cause(error: &Error) -> String {
    match error {
        Error::Execute {
            source, attempts, ..
        } => format!("{source}{attempts}"),
        other => other.to_string(),
    }
}

/// The attempts of a failed request that reached a node, with what each
/// met and what the retry policy made of it (" (attempts: ...)"); nothing
/// when one did (the driver's error is its). A node whose pool had no
/// connection is passed over without an attempt: a request that failed
/// with "no connections in the pool" lists here what the other nodes of
/// its plan answered, or that none was tried.
fn attempts(history: &HistoryCollector) -> String {
    use scylla::observability::history::AttemptResult;
    let mut seen = Vec::new();
    for request in history.clone_structured_history().requests {
        let fibers = std::iter::once(&request.non_speculative_fiber)
            .chain(request.speculative_fibers.iter());
        for attempt in fibers.flat_map(|f| f.attempts.iter()) {
            let met = match &attempt.result {
                Some(AttemptResult::Success(_)) => "ok".to_string(),
                Some(AttemptResult::Error(_, error, decision)) => format!("{error} → {decision:?}"),
                None => "no answer".to_string(),
            };
            seen.push(format!("{}: {met}", attempt.node_addr));
        }
    }
    match seen.len() {
        0 => " (no attempt reached a node)".to_string(),
        // The driver's error is that attempt's.
        1 => String::new(),
        _ => format!(" (attempts: {})", seen.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::process::{Child, Command};

    /// A process alone in a new network namespace, its loopback up.
    struct Namespace(Child);

    impl Namespace {
        fn new() -> Namespace {
            crate::harness::require_root().expect("creating a network namespace");
            let child = Command::new("unshare")
                .args(["--net", "--", "sleep", "60"])
                .spawn()
                .expect("unshare runs");
            let namespace = Namespace(child);
            let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::read_link(namespace.path()).ok().as_ref() == Some(&ours) {
                assert!(Instant::now() < deadline, "unshare made no namespace");
                std::thread::sleep(Duration::from_millis(10));
            }
            let up = Command::new("nsenter")
                .arg(format!("--net={}", namespace.path().display()))
                .args(["ip", "link", "set", "lo", "up"])
                .status()
                .unwrap();
            assert!(up.success());
            namespace
        }

        fn path(&self) -> PathBuf {
            PathBuf::from(format!("/proc/{}/ns/net", self.0.id()))
        }
    }

    impl Drop for Namespace {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// The futures handed to a [`Netns`] run in its namespace: the thread
    /// is there, and the sockets they open are: a listener on the
    /// namespace's loopback is reachable from it, one on the host's
    /// loopback is not.
    #[tokio::test]
    async fn sockets_opened_through_a_netns_are_in_its_namespace() {
        let namespace = Namespace::new();
        let netns = Netns::enter(namespace.path()).unwrap();
        let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let host_port = host.local_addr().unwrap().port();

        let (here, inside) = netns
            .run(async move {
                let here = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
                let own = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .await
                    .unwrap();
                let own_port = own.local_addr().unwrap().port();
                let to_own = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, own_port)).await;
                let to_host =
                    tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, host_port)).await;
                (
                    here,
                    (to_own.is_ok(), to_host.map(|_| ()).map_err(|e| e.kind())),
                )
            })
            .await
            .unwrap();
        assert_eq!(here, std::fs::read_link(namespace.path()).unwrap());
        assert_ne!(here, std::fs::read_link("/proc/self/ns/net").unwrap());
        assert_eq!(
            inside,
            (true, Err(std::io::ErrorKind::ConnectionRefused)),
            "(its own loopback's listener reached, the host's refused)"
        );
        // The host's listener is there for the host.
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, host_port)).is_ok());
        // The test's own thread did not move.
        assert_eq!(
            std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
            std::fs::read_link("/proc/self/ns/net").unwrap()
        );
    }

    /// A certificate authority made with rcgen, and its PEM.
    struct Authority {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        pem: String,
    }

    impl Authority {
        fn new(name: &str) -> Authority {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![
                rcgen::KeyUsagePurpose::KeyCertSign,
                rcgen::KeyUsagePurpose::DigitalSignature,
            ];
            let pem = params.self_signed(&key).unwrap().pem();
            Authority {
                issuer: rcgen::Issuer::new(params, key),
                pem,
            }
        }

        /// A member's serving certificate naming `address` (an IP SAN),
        /// and its PKCS#8 key.
        fn member(&self, address: &str) -> (Vec<u8>, Vec<u8>) {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec![address.to_string()]).unwrap();
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            (cert.der().to_vec(), key.serialize_der())
        }
    }

    /// Serves one TLS handshake on 127.0.0.1 with `cert` and its key
    /// (rustls on ring: any TLS server would do) and returns its port.
    fn serve_one_handshake((cert, key): (Vec<u8>, Vec<u8>)) -> u16 {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.into()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
            )
            .unwrap();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut tcp, _) = listener.accept().unwrap();
            let mut tls = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            // The client's verdict is what the test reads; a refused
            // handshake ends here with an alert.
            while tls.is_handshaking() && tls.complete_io(&mut tcp).is_ok() {}
        });
        port
    }

    /// A TLS handshake to the server on `port` of 127.0.0.1, with the
    /// context built from `ca` and the address checked as the driver
    /// checks a node's (OpenSSL's `connect` sets the IP to verify for an
    /// address, as the driver's backend does).
    fn handshake(ca: &CaBundle, port: u16) -> Result<(), String> {
        let connector = tls_connector(ca).map_err(|e| e.to_string())?.build();
        let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        connector
            .connect("127.0.0.1", tcp)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn tls_trusts_the_bundles_authorities_for_the_address_their_certificates_name() {
        let ours = Authority::new("cluster CA");
        let other = Authority::new("another CA");
        let bundle = CaBundle(format!("{}{}", Authority::new("old CA").pem, ours.pem).into());

        let port = serve_one_handshake(ours.member("127.0.0.1"));
        assert_eq!(handshake(&bundle, port), Ok(()));

        let port = serve_one_handshake(ours.member("10.96.0.7"));
        let refused = handshake(&bundle, port).unwrap_err();
        assert!(refused.contains("IP address mismatch"), "{refused}");

        let port = serve_one_handshake(other.member("127.0.0.1"));
        let refused = handshake(&bundle, port).unwrap_err();
        assert!(
            refused.contains("unable to get local issuer certificate"),
            "{refused}"
        );
    }

    #[test]
    fn a_ca_bundle_without_a_certificate_is_refused() {
        let refused = tls_connector(&CaBundle(b"not a certificate\n".to_vec())).err();
        assert!(
            matches!(&refused, Some(Error::ReadCaBundle(detail)) if detail == "it holds no certificate"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_data_report_names_the_first_missing_keys_and_is_clean_only_when_all_matched() {
        let mut report = DataReport {
            consistency: Consistency::All,
            checked: 20,
            ..DataReport::default()
        };
        assert!(report.clean());
        assert_eq!(
            report.to_string(),
            "20 keys read at All: 0 missing, 0 with another value, 0 failed"
        );
        // Reads that failed and then found their value leave it clean,
        // and are told.
        report.failed_at_first = vec![
            ("w000003".into(), "timed out".into()),
            ("w000005".into(), "timed out".into()),
        ];
        assert!(report.clean());
        assert!(
            report.to_string().ends_with(
                "2 reads failed at first (w000003 ...) and were read again:\n    2x timed out"
            ),
            "{report}"
        );
        report.missing = (0..12).map(|n| format!("w{n:06}")).collect();
        report
            .wrong
            .push(("w000013".into(), "v13".into(), "v1".into()));
        assert!(!report.clean());
        let text = report.to_string();
        assert!(text.contains("12 missing, 1 with another value"), "{text}");
        assert!(text.contains("missing: w000000, w000001"), "{text}");
        assert!(text.contains("w000009 and 2 more"), "{text}");
        assert!(!text.contains("w000010"), "{text}");
        assert!(
            text.contains("w000013: expected \"v13\", found \"v1\""),
            "{text}"
        );
    }
}
