//! The controller's CQL client (password authentication, issue 32; the
//! flow is in [`crds::contract::auth`]): a login to one of a cluster's
//! members as a role, and the few statements the controller runs there:
//! reading a role, creating the superuser, disabling a role, reading and
//! setting a keyspace's replication, and reading every row of a keyspace
//! at consistency ALL. I/O (CQL over TCP, or TLS with the cluster's own
//! CA); the statements' text is built by pure functions, unit-tested below.
//!
//! ## One connection to one member, never the ring's addresses
//!
//! The controller dials members by their Pod IPs, the only addresses it
//! knows it can reach; members advertise their member Services'
//! ClusterIPs (`broadcast_rpc_address`, so `system.peers` lists those),
//! which the controller may not reach. cdrs-tokio's `Session` is built for
//! applications that follow the ring: its control connection reads
//! `system.peers`, fills its node list with the advertised addresses and
//! dials them; and its build waits, without end, until that control
//! connection is up, so a refused login is never reported (it retries).
//! So a [`Session`] here is not the driver's: it is one connection made by
//! the driver's connection manager ([`TcpConnectionManager`] or
//! [`RustlsConnectionManager`]: TCP or TLS, the STARTUP and SASL login,
//! the framing), to the first contact address that takes the login, and
//! no other. Nothing discovers nodes, so nothing but the given addresses
//! is ever dialed, and a refused login comes back as the server's answer.
//! One member is enough for what the controller asks: role and schema
//! changes are the cluster's, and a read at ALL reaches every replica from
//! any coordinator. A member that goes away fails the call, and the next
//! reconcile connects again.
//!
//! ## TLS: the cluster's CA, not the address
//!
//! With a CA bundle, the connection trusts the certificates of that bundle
//! only: the cluster's own authority, which signs nothing but that
//! cluster's members' certificates. A member certificate names the member
//! Service's DNS names and ClusterIP, not the Pod IP the controller dials,
//! so the name is not checked ([`ClusterCaVerifier`]): a chain to the
//! cluster's CA proves the peer is one of the cluster's members, the
//! identity this client needs (as the members' own TLS between each other
//! does: README, Security).
//!
//! ## Names and passwords are text from a Secret
//!
//! Role names and passwords come from a Secret a user may edit, so they
//! are never pasted into a statement as they are: a bound value where CQL
//! takes one (`WHERE role = ?`), otherwise a string literal with each `'`
//! doubled (`CREATE ROLE`'s name and `PASSWORD` cannot be bound), and
//! keyspace and table names are quoted identifiers. No error carries a
//! statement's text, so no password reaches a log.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cdrs_tokio::authenticators::{SaslAuthenticatorProvider, StaticPasswordAuthenticatorProvider};
use cdrs_tokio::cluster::session::DEFAULT_TRANSPORT_BUFFER_SIZE;
use cdrs_tokio::cluster::{
    ConnectionManager, KeyspaceHolder, RustlsConnectionManager, TcpConnectionManager,
};
use cdrs_tokio::compression::Compression;
use cdrs_tokio::consistency::Consistency;
use cdrs_tokio::frame::message_error::ErrorType;
use cdrs_tokio::frame::message_query::BodyReqQuery;
use cdrs_tokio::frame::message_response::ResponseBody;
use cdrs_tokio::frame::message_result::RowsMetadataFlags;
use cdrs_tokio::frame::{Envelope, Flags, Version};
use cdrs_tokio::frame_encoding::ProtocolFrameEncodingFactory;
use cdrs_tokio::query::{QueryParams, QueryParamsBuilder, QueryValues};
use cdrs_tokio::transport::CdrsTransport;
use cdrs_tokio::types::map::Map;
use cdrs_tokio::types::rows::Row;
use cdrs_tokio::types::value::Value;
use cdrs_tokio::types::{AsRustType, IntoRustByName};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tracing::debug;

/// The native protocol version spoken: v4, which Cassandra 3.11 to 5.0
/// and ScyllaDB all serve.
const VERSION: Version = Version::V4;

/// Rows per page of a read.
const PAGE_SIZE: i32 = 1000;

/// A role's name and password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// What `system_auth.roles` says of a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    pub is_superuser: bool,
    pub can_login: bool,
}

/// What failed, each message naming the action, the member's address and
/// the role (`logging in to 10.244.0.5:9042 as orders-superuser: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CqlError {
    /// No member could be reached, or none answered in time, or a member
    /// could not judge the login (it could not read its roles).
    #[error("{0}")]
    Unreachable(String),
    /// A member refused the login: the server answered AuthenticationError
    /// (wrong name or password, or a role that may not log in).
    #[error("{0}")]
    BadCredentials(String),
    /// The CA bundle could not be read, or the TLS handshake failed (a
    /// certificate the cluster's CA did not sign, for one).
    #[error("{0}")]
    Tls(String),
    /// A statement failed on the member that took the login.
    #[error("{0}")]
    Query(String),
}

impl CqlError {
    /// How much the error says about the cluster, to choose which of
    /// several contacts' errors to report: a TLS failure says more than an
    /// address that does not answer.
    fn weight(&self) -> u8 {
        match self {
            CqlError::Unreachable(_) => 0,
            CqlError::Query(_) => 1,
            CqlError::Tls(_) => 2,
            CqlError::BadCredentials(_) => 3,
        }
    }
}

/// A login to one member (see the module's documentation).
pub struct Session {
    connection: Box<dyn CdrsTransport>,
    member: SocketAddr,
    role: String,
    timeout: Duration,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("member", &self.member)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Logs in as `credentials` to the first of `contact` (members' Pod IPs
/// and native port) that takes the login, each in order, each given
/// `timeout` for the connection, the TLS handshake and the login. With
/// `ca_bundle_pem`, over TLS trusting only that bundle's certificates;
/// without, over plain TCP. A refused login ends the tries (the roles are
/// the cluster's, and another member would say the same); otherwise, when
/// none takes it, the error that says the most, of the first contact that
/// said it.
pub async fn connect(
    contact: &[SocketAddr],
    credentials: &Credentials,
    ca_bundle_pem: Option<&[u8]>,
    timeout: Duration,
) -> Result<Session, CqlError> {
    let tls = ca_bundle_pem.map(tls_config).transpose()?;
    let mut failed: Option<CqlError> = None;
    for &member in contact {
        match login(member, credentials, tls.as_ref(), timeout).await {
            Ok(session) => return Ok(session),
            Err(e @ CqlError::BadCredentials(_)) => return Err(e),
            Err(e) => {
                debug!(%member, role = %credentials.username, error = %e, "CQL login failed");
                if failed.as_ref().is_none_or(|f| e.weight() > f.weight()) {
                    failed = Some(e);
                }
            }
        }
    }
    Err(failed.unwrap_or_else(|| {
        CqlError::Unreachable(format!(
            "logging in as {}: no member address to connect to",
            credentials.username
        ))
    }))
}

/// One connection to `member`, logged in.
async fn login(
    member: SocketAddr,
    credentials: &Credentials,
    tls: Option<&Arc<ClientConfig>>,
    timeout: Duration,
) -> Result<Session, CqlError> {
    let action = format!("logging in to {member} as {}", credentials.username);
    let password: Arc<dyn SaslAuthenticatorProvider + Send + Sync> = Arc::new(
        StaticPasswordAuthenticatorProvider::new(&credentials.username, &credentials.password),
    );
    // No keyspace is ever `USE`d: the holder only has to exist.
    let keyspace = Arc::new(KeyspaceHolder::new(tokio::sync::watch::channel(None).0));
    let connecting = async {
        let connection: Box<dyn CdrsTransport> = match tls {
            None => {
                let manager = TcpConnectionManager::new(
                    password,
                    keyspace,
                    Box::new(ProtocolFrameEncodingFactory),
                    Compression::None,
                    DEFAULT_TRANSPORT_BUFFER_SIZE,
                    true,
                    VERSION,
                );
                Box::new(manager.connection(None, None, member).await?)
            }
            Some(config) => {
                // The name only serves the verifier, which does not check
                // it; an address sends no SNI.
                let name = ServerName::IpAddress(member.ip().into());
                let manager = RustlsConnectionManager::new(
                    name,
                    password,
                    config.clone(),
                    keyspace,
                    Box::new(ProtocolFrameEncodingFactory),
                    Compression::None,
                    DEFAULT_TRANSPORT_BUFFER_SIZE,
                    true,
                    VERSION,
                );
                Box::new(manager.connection(None, None, member).await?)
            }
        };
        Ok::<_, cdrs_tokio::Error>(connection)
    };
    let connection = tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| CqlError::Unreachable(format!("{action}: no answer in {}", seconds(timeout))))?
        .map_err(|e| login_error(&action, &e, tls.is_some()))?;
    debug!(%member, role = %credentials.username, tls = tls.is_some(), "logged in over CQL");
    Ok(Session {
        connection,
        member,
        role: credentials.username.clone(),
        timeout,
    })
}

/// What a failed login means (`tls`: whether it was over TLS).
fn login_error(action: &str, error: &cdrs_tokio::Error, tls: bool) -> CqlError {
    match error {
        cdrs_tokio::Error::Server { body, .. } if matches!(body.ty, ErrorType::Authentication) => {
            // Cassandra answers AuthenticationError too when it could not
            // read the role (`Unable to perform authentication: ...`, a
            // replica of system_auth down): that login may work later.
            if body.message.starts_with("Unable to perform authentication") {
                CqlError::Unreachable(format!("{action}: {}", body.message))
            } else {
                CqlError::BadCredentials(format!("{action}: {}", body.message))
            }
        }
        cdrs_tokio::Error::Io(io) => match io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(refused) => CqlError::Tls(format!("{action}: TLS handshake: {refused}")),
            // Cassandra 4.1 resets a clear-text connection to a port that
            // requires TLS, without a word.
            None if !tls && io.kind() == std::io::ErrorKind::ConnectionReset => {
                CqlError::Unreachable(format!(
                    "{action}: {} (as a member that requires TLS does to clear text)",
                    io_text(io)
                ))
            }
            None => CqlError::Unreachable(format!("{action}: {}", io_text(io))),
        },
        other => CqlError::Unreachable(format!("{action}: {}", describe(other))),
    }
}

/// A driver error for a message: a server's answer as its message and
/// kind, not the driver's debug form.
fn describe(error: &cdrs_tokio::Error) -> String {
    match error {
        cdrs_tokio::Error::Server { body, .. } => format!("{} ({:?})", body.message, body.ty),
        cdrs_tokio::Error::Io(io) => io_text(io),
        other => other.to_string(),
    }
}

/// An I/O error's message, or its kind when it has none (a reset
/// connection's is empty).
fn io_text(io: &std::io::Error) -> String {
    match io.to_string() {
        text if text.is_empty() => io.kind().to_string(),
        text => text,
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

impl Session {
    /// The member this session is logged in to.
    pub fn member(&self) -> SocketAddr {
        self.member
    }

    /// A role's flags, `None` when the role does not exist. Read at
    /// LOCAL_QUORUM, so a role just created through another member is
    /// seen.
    pub async fn role(&self, name: &str) -> Result<Option<Role>, CqlError> {
        let action = format!("reading role {name}");
        let mut role = None;
        self.select(
            &action,
            "SELECT is_superuser, can_login FROM system_auth.roles WHERE role = ?",
            vec![Value::from(name)],
            Consistency::LocalQuorum,
            |rows| {
                if let Some(row) = rows.first() {
                    role = Some(Role {
                        is_superuser: flag(row, "is_superuser")?,
                        can_login: flag(row, "can_login")?,
                    });
                }
                Ok(())
            },
        )
        .await?;
        Ok(role)
    }

    /// Creates `name` as a superuser that may log in with `password`,
    /// unless a role of that name exists (whose password and flags are
    /// then left as they are).
    pub async fn create_superuser(&self, name: &str, password: &str) -> Result<(), CqlError> {
        self.execute(
            &format!("creating role {name}"),
            create_superuser_statement(name, password),
        )
        .await
    }

    /// Takes superuser and login away from `name` (the default superuser,
    /// once the operator's exists). A role cannot take its own superuser
    /// status away: the session's role must be another superuser.
    pub async fn disable_role(&self, name: &str) -> Result<(), CqlError> {
        self.execute(
            &format!("disabling role {name}"),
            disable_role_statement(name),
        )
        .await
    }

    /// A keyspace's replication, as `system_schema.keyspaces` holds it
    /// (`class` the strategy's full class name, and its options: the
    /// replicas of each datacenter under NetworkTopologyStrategy). Empty
    /// when the keyspace does not exist.
    pub async fn replication(&self, keyspace: &str) -> Result<BTreeMap<String, String>, CqlError> {
        let action = format!("reading the replication of keyspace {keyspace}");
        let mut replication = BTreeMap::new();
        self.select(
            &action,
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
            vec![Value::from(keyspace)],
            Consistency::One,
            |rows| {
                if let Some(row) = rows.first() {
                    let map: Map = row
                        .get_r_by_name("replication")
                        .map_err(|e| e.to_string())?;
                    let map: HashMap<String, String> =
                        map.as_r_type().map_err(|e| e.to_string())?;
                    replication.extend(map);
                }
                Ok(())
            },
        )
        .await?;
        Ok(replication)
    }

    /// Sets `keyspace` to `replicas` replicas in `datacenter`, under
    /// NetworkTopologyStrategy: other datacenters keep their replicas, but
    /// a keyspace under another strategy (SimpleStrategy, as a new ring's
    /// `system_auth`) then has replicas in this datacenter only. Nothing is
    /// changed when the keyspace has that already.
    pub async fn set_datacenter_replicas(
        &self,
        keyspace: &str,
        datacenter: &str,
        replicas: i32,
    ) -> Result<(), CqlError> {
        let current = self.replication(keyspace).await?;
        if is_network_topology(&current) && current.get(datacenter) == Some(&replicas.to_string()) {
            return Ok(());
        }
        let wanted = replication_with(&current, datacenter, replicas);
        let action = format!(
            "setting the replication of keyspace {keyspace} to {replicas} in datacenter {datacenter}"
        );
        self.execute(&action, alter_replication_statement(keyspace, &wanted))
            .await
    }

    /// Reads every row of every table of `keyspace` at consistency ALL,
    /// page by page: a read at ALL writes a row to the replicas that lack
    /// it or hold an older version before it answers (a blocking read
    /// repair), so afterwards every replica holds every row. Returns how
    /// many rows were read.
    pub async fn read_all_at_consistency_all(&self, keyspace: &str) -> Result<u64, CqlError> {
        let mut tables = Vec::new();
        self.select(
            &format!("listing the tables of keyspace {keyspace}"),
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
            vec![Value::from(keyspace)],
            Consistency::One,
            |rows| {
                for row in &rows {
                    let table: String =
                        row.get_r_by_name("table_name").map_err(|e| e.to_string())?;
                    tables.push(table);
                }
                Ok(())
            },
        )
        .await?;
        let mut read = 0u64;
        for table in &tables {
            self.select(
                &format!("reading {keyspace}.{table} at consistency ALL"),
                &select_all_statement(keyspace, table),
                Vec::new(),
                Consistency::All,
                |rows| {
                    read += rows.len() as u64;
                    Ok(())
                },
            )
            .await?;
        }
        Ok(read)
    }

    /// Runs a statement that returns no rows.
    async fn execute(&self, action: &str, statement: String) -> Result<(), CqlError> {
        let params = QueryParamsBuilder::new()
            .with_consistency(Consistency::LocalQuorum)
            .build();
        self.send(action, statement, params).await.map(|_| ())
    }

    /// Every page of rows `statement` selects, each handed to `each`.
    async fn select(
        &self,
        action: &str,
        statement: &str,
        values: Vec<Value>,
        consistency: Consistency,
        mut each: impl FnMut(Vec<Row>) -> Result<(), String>,
    ) -> Result<(), CqlError> {
        let mut paging_state = None;
        loop {
            let mut params = QueryParamsBuilder::new()
                .with_consistency(consistency)
                .with_page_size(PAGE_SIZE);
            if !values.is_empty() {
                params = params.with_values(QueryValues::SimpleValues(values.clone()));
            }
            if let Some(state) = paging_state.take() {
                params = params.with_paging_state(state);
            }
            let body = self
                .send(action, statement.to_string(), params.build())
                .await?;
            let next = body
                .as_rows_metadata()
                .filter(|m| m.flags.contains(RowsMetadataFlags::HAS_MORE_PAGES))
                .and_then(|m| m.paging_state.clone());
            let rows = body
                .into_rows()
                .ok_or_else(|| self.failed(action, "the answer holds no rows"))?;
            each(rows).map_err(|e| self.failed(action, e))?;
            match next {
                Some(state) => paging_state = Some(state),
                None => return Ok(()),
            }
        }
    }

    /// One statement and its answer.
    async fn send(
        &self,
        action: &str,
        statement: String,
        params: QueryParams,
    ) -> Result<ResponseBody, CqlError> {
        let envelope = Envelope::new_query(
            BodyReqQuery {
                query: statement,
                query_params: params,
            },
            Flags::empty(),
            VERSION,
        );
        let answer = tokio::time::timeout(
            self.timeout,
            self.connection.write_envelope(&envelope, false),
        )
        .await
        .map_err(|_| {
            CqlError::Unreachable(format!(
                "{action} through {} as {}: no answer in {}",
                self.member,
                self.role,
                seconds(self.timeout)
            ))
        })?;
        let error = match answer {
            Ok(envelope) => match envelope.response_body() {
                Ok(body) => return Ok(body),
                Err(e) => e,
            },
            Err(e) => e,
        };
        Err(match error {
            cdrs_tokio::Error::Server { .. } => self.failed(action, describe(&error)),
            _ => CqlError::Unreachable(format!(
                "{action} through {} as {}: {}",
                self.member,
                self.role,
                describe(&error)
            )),
        })
    }

    fn failed(&self, action: &str, detail: impl fmt::Display) -> CqlError {
        CqlError::Query(format!(
            "{action} through {} as {}: {detail}",
            self.member, self.role
        ))
    }
}

/// A boolean column, false when null.
fn flag(row: &Row, column: &str) -> Result<bool, String> {
    row.get_by_name(column)
        .map(|value: Option<bool>| value.unwrap_or(false))
        .map_err(|e| format!("column {column}: {e}"))
}

/// `text` as a CQL string literal: in single quotes, each `'` doubled.
fn string_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `name` as a CQL quoted identifier: in double quotes, each `"` doubled
/// (a quoted name is taken as it is written, case included).
fn quoted_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn create_superuser_statement(name: &str, password: &str) -> String {
    format!(
        "CREATE ROLE IF NOT EXISTS {} WITH PASSWORD = {} AND SUPERUSER = true AND LOGIN = true",
        string_literal(name),
        string_literal(password)
    )
}

fn disable_role_statement(name: &str) -> String {
    format!(
        "ALTER ROLE {} WITH SUPERUSER = false AND LOGIN = false",
        string_literal(name)
    )
}

fn select_all_statement(keyspace: &str, table: &str) -> String {
    format!(
        "SELECT * FROM {}.{}",
        quoted_identifier(keyspace),
        quoted_identifier(table)
    )
}

/// The short name of the strategy that replicates per datacenter.
const NETWORK_TOPOLOGY_STRATEGY: &str = "NetworkTopologyStrategy";

/// Whether a replication is NetworkTopologyStrategy (system_schema writes
/// its full class name, a statement may write the short one).
fn is_network_topology(replication: &BTreeMap<String, String>) -> bool {
    replication.get("class").is_some_and(|class| {
        class == NETWORK_TOPOLOGY_STRATEGY
            || class.ends_with(&format!(".{NETWORK_TOPOLOGY_STRATEGY}"))
    })
}

/// The replication with `replicas` in `datacenter`: under
/// NetworkTopologyStrategy, the other datacenters' replicas kept; from
/// any other strategy, this datacenter only (another strategy's options,
/// SimpleStrategy's `replication_factor`, mean nothing per datacenter).
fn replication_with(
    current: &BTreeMap<String, String>,
    datacenter: &str,
    replicas: i32,
) -> BTreeMap<String, String> {
    let mut wanted = BTreeMap::new();
    if is_network_topology(current) {
        wanted.extend(
            current
                .iter()
                .filter(|(key, _)| key.as_str() != "class")
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    wanted.insert("class".to_string(), NETWORK_TOPOLOGY_STRATEGY.to_string());
    wanted.insert(datacenter.to_string(), replicas.to_string());
    wanted
}

/// A replication map as a CQL map literal: every key and value a string
/// literal, `class` first.
fn replication_literal(replication: &BTreeMap<String, String>) -> String {
    let class = replication.get_key_value("class");
    let entries: Vec<String> = class
        .into_iter()
        .chain(
            replication
                .iter()
                .filter(|(key, _)| key.as_str() != "class"),
        )
        .map(|(key, value)| format!("{}: {}", string_literal(key), string_literal(value)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn alter_replication_statement(keyspace: &str, replication: &BTreeMap<String, String>) -> String {
    format!(
        "ALTER KEYSPACE {} WITH replication = {}",
        quoted_identifier(keyspace),
        replication_literal(replication)
    )
}

/// The TLS settings of a connection to a member: the bundle's
/// certificates as the only roots, through [`ClusterCaVerifier`], on
/// rustls' ring provider (the binary's only one).
fn tls_config(ca_bundle_pem: &[u8]) -> Result<Arc<ClientConfig>, CqlError> {
    let refused =
        |detail: String| CqlError::Tls(format!("reading the cluster's CA bundle: {detail}"));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem) {
        let cert = cert.map_err(|e| refused(e.to_string()))?;
        roots.add(cert).map_err(|e| refused(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(refused("it holds no certificate".to_string()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cluster_ca = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| refused(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CqlError::Tls(format!("TLS settings: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClusterCaVerifier { cluster_ca }))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Accepts a member's certificate when it chains to the cluster's CA and
/// its signatures hold, whatever name or address it is for: webpki checks
/// the chain, validity and signatures first and the name last, so a
/// "not valid for name" answer is given only for a certificate that
/// passed everything else, and that is the one answer overruled. The
/// certificate names the member Service (DNS names and ClusterIP), the
/// controller dials the Pod IP; and the CA is the cluster's own, signing
/// only that cluster's members, so a chain to it is the identity needed.
#[derive(Debug)]
struct ClusterCaVerifier {
    cluster_ca: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ClusterCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.cluster_ca.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.cluster_ca.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.cluster_ca.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.cluster_ca.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(string_literal("orders-superuser"), "'orders-superuser'");
        assert_eq!(string_literal("it's"), "'it''s'");
        assert_eq!(string_literal("''"), "''''''");
        assert_eq!(string_literal(""), "''");
        // Nothing else is special inside a string literal.
        assert_eq!(string_literal("a\"b;--\\n"), "'a\"b;--\\n'");
        assert_eq!(quoted_identifier("system_auth"), "\"system_auth\"");
        assert_eq!(quoted_identifier("My\"Table"), "\"My\"\"Table\"");
    }

    #[test]
    fn role_statements_quote_the_name_and_the_password() {
        assert_eq!(
            create_superuser_statement("orders-superuser", "p4ss"),
            "CREATE ROLE IF NOT EXISTS 'orders-superuser' WITH PASSWORD = 'p4ss' \
             AND SUPERUSER = true AND LOGIN = true"
        );
        // A password that tries to end the literal stays inside it.
        assert_eq!(
            create_superuser_statement("x", "' AND SUPERUSER = false; --"),
            "CREATE ROLE IF NOT EXISTS 'x' WITH PASSWORD = ''' AND SUPERUSER = false; --' \
             AND SUPERUSER = true AND LOGIN = true"
        );
        assert_eq!(
            disable_role_statement("cassandra"),
            "ALTER ROLE 'cassandra' WITH SUPERUSER = false AND LOGIN = false"
        );
        assert_eq!(
            disable_role_statement("o'brien"),
            "ALTER ROLE 'o''brien' WITH SUPERUSER = false AND LOGIN = false"
        );
        assert_eq!(
            select_all_statement("system_auth", "roles"),
            "SELECT * FROM \"system_auth\".\"roles\""
        );
    }

    #[test]
    fn from_simple_strategy_only_this_datacenter_is_replicated() {
        let simple = map(&[
            ("class", "org.apache.cassandra.locator.SimpleStrategy"),
            ("replication_factor", "1"),
        ]);
        let wanted = replication_with(&simple, "dc1", 3);
        assert_eq!(
            wanted,
            map(&[("class", "NetworkTopologyStrategy"), ("dc1", "3")])
        );
        assert_eq!(
            alter_replication_statement("system_auth", &wanted),
            "ALTER KEYSPACE \"system_auth\" WITH replication = \
             {'class': 'NetworkTopologyStrategy', 'dc1': '3'}"
        );
        // A keyspace that does not exist reads empty: the same.
        assert_eq!(replication_with(&BTreeMap::new(), "dc1", 3), wanted);
    }

    #[test]
    fn other_datacenters_keep_their_replicas() {
        let nts = map(&[
            (
                "class",
                "org.apache.cassandra.locator.NetworkTopologyStrategy",
            ),
            ("dc1", "1"),
            ("eu-west", "3"),
        ]);
        let wanted = replication_with(&nts, "dc1", 2);
        assert_eq!(
            wanted,
            map(&[
                ("class", "NetworkTopologyStrategy"),
                ("dc1", "2"),
                ("eu-west", "3")
            ])
        );
        // A datacenter not there yet is added.
        assert_eq!(
            replication_with(&nts, "us-east", 1),
            map(&[
                ("class", "NetworkTopologyStrategy"),
                ("dc1", "1"),
                ("eu-west", "3"),
                ("us-east", "1")
            ])
        );
    }

    #[test]
    fn datacenter_names_are_string_literals_in_the_map() {
        let wanted = replication_with(&BTreeMap::new(), "dc'1", 1);
        assert_eq!(
            replication_literal(&wanted),
            "{'class': 'NetworkTopologyStrategy', 'dc''1': '1'}"
        );
        assert_eq!(
            alter_replication_statement("Odd\"Name", &wanted),
            "ALTER KEYSPACE \"Odd\"\"Name\" WITH replication = \
             {'class': 'NetworkTopologyStrategy', 'dc''1': '1'}"
        );
    }

    #[test]
    fn the_strategy_is_known_by_its_short_or_full_class_name() {
        for class in [
            "NetworkTopologyStrategy",
            "org.apache.cassandra.locator.NetworkTopologyStrategy",
        ] {
            assert!(is_network_topology(&map(&[("class", class)])), "{class}");
        }
        for class in ["SimpleStrategy", "MyNetworkTopologyStrategy", ""] {
            assert!(!is_network_topology(&map(&[("class", class)])), "{class}");
        }
        assert!(!is_network_topology(&BTreeMap::new()));
    }

    #[test]
    fn credentials_do_not_show_their_password() {
        let credentials = Credentials {
            username: "orders-superuser".into(),
            password: "s3cret".into(),
        };
        let shown = format!("{credentials:?}");
        assert!(shown.contains("orders-superuser"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn a_ca_bundle_without_a_certificate_is_refused() {
        let refused = tls_config(b"not a certificate\n").err();
        assert_eq!(
            refused,
            Some(CqlError::Tls(
                "reading the cluster's CA bundle: it holds no certificate".into()
            ))
        );
    }

    #[test]
    fn a_refused_login_is_bad_credentials_unless_the_member_could_not_judge_it() {
        let server = |message: &str| cdrs_tokio::Error::Server {
            body: cdrs_tokio::frame::message_error::ErrorBody {
                message: message.into(),
                ty: ErrorType::Authentication,
            },
            addr: "10.244.0.5:9042".parse().unwrap(),
        };
        let action = "logging in to 10.244.0.5:9042 as orders-superuser";
        assert_eq!(
            login_error(
                action,
                &server("Provided username orders-superuser and/or password are incorrect"),
                true
            ),
            CqlError::BadCredentials(
                "logging in to 10.244.0.5:9042 as orders-superuser: \
                 Provided username orders-superuser and/or password are incorrect"
                    .into()
            )
        );
        assert!(matches!(
            login_error(
                action,
                &server("Unable to perform authentication: Cannot achieve consistency level LOCAL_ONE"),
                true
            ),
            CqlError::Unreachable(m) if m.starts_with(action)
        ));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            login_error(action, &cdrs_tokio::Error::Io(refused), false),
            CqlError::Unreachable(format!("{action}: connection refused"))
        );
        // What Cassandra does to clear text on a port that requires TLS.
        let reset = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "");
        assert_eq!(
            login_error(action, &cdrs_tokio::Error::Io(reset()), false),
            CqlError::Unreachable(format!(
                "{action}: connection reset (as a member that requires TLS does to clear text)"
            ))
        );
        assert_eq!(
            login_error(action, &cdrs_tokio::Error::Io(reset()), true),
            CqlError::Unreachable(format!("{action}: connection reset"))
        );
        let tls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert!(matches!(
            login_error(action, &cdrs_tokio::Error::Io(tls), true),
            CqlError::Tls(m) if m.starts_with(action) && m.contains("UnknownIssuer")
        ));
    }
}
