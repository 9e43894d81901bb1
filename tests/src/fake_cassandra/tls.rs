//! The fake Cassandra's encryption (issue 32), as Cassandra 4.1 and 5.0
//! build their SSL contexts (facts: /work/notes/cassandra_tls_facts.md;
//! source: `EncryptionOptions`, `FBUtilities.newSslContextFactory`,
//! `PEMBasedSslContextFactory`, `FileBasedSslContextFactory`, `PEMReader`,
//! `SSLFactory`, `DatabaseDescriptor.applySslContext`).
//!
//! - [`TlsConfig::parse`] reads `server_encryption_options` and
//!   `client_encryption_options` (absent keys take `EncryptionOptions`'
//!   defaults: keystore `conf/.keystore`, no passwords,
//!   `DefaultSslContextFactory`).
//! - [`SslState::start`] is `EncryptionOptions.applyConfig` and
//!   `applySslContext`: each side's factory is instantiated (an unknown
//!   `class_name` is a `ConfigurationException`, "Unable to create instance
//!   of ISslContextFactory for X"); its policy is computed (`optional`
//!   unset with a keystore file present means optionally encrypted,
//!   `dc`/`rack` are always optional); every side that is not unencrypted
//!   is validated ("Internode messaging" with its truststore, "Native
//!   transport" with it only under `require_client_auth`), a failure being
//!   `ConfigurationException: Failed to initialize SSL` caused by
//!   `IOException: Failed to create SSL context using <side>` caused by
//!   the factory's own exception.
//! - With the PEM factory the keystore file must exist ("Must provide
//!   keystore or private_key ..."), be readable (`AccessDeniedException`),
//!   hold an unencrypted PKCS#8 key ("Invalid private key format", "The
//!   given private key could not be parsed ..."; with a `keystore_password`
//!   the key is read as encrypted: an unencrypted one fails "overrun",
//!   a PBES2 one "PBES2 SecretKeyFactory not available") and certificates
//!   ("Invalid certificate format") forming a chain (the PKCS12 store's
//!   "Certificate chain is not valid" when an issuer is not the next
//!   subject); the truststore, when needed, must exist and hold at least
//!   one certificate. An expired leaf is a warning only. The key is not
//!   checked against the certificate: Cassandra does not either (the
//!   PKCS12 store and Netty's key manager take it as given); the node
//!   starts and every handshake fails (see [`super::tls_wire`]).
//! - With the default (JKS) factory the files must exist and the passwords
//!   be set (a missing one is Java's `NullPointerException`); the stores
//!   are not parsed, and the node cannot serve TLS from them.
//! - [`SslState::force_reload`] is `reloadSslCertificates`
//!   (`SSLFactory.forceCheckCertFiles`, CASSANDRA-18681: 4.0.12, 4.1.4,
//!   5.0): each side validated again; a success replaces what the node
//!   serves and logs "SSL certificates have been updated for ...", a
//!   failure keeps the old context and logs "Failed to hot reload the SSL
//!   Certificates! ..."; the operation itself never fails.
//! - [`SslState::periodic_check`] is the hot-reload task (every 600 s after
//!   600 s; `FAKE_CASSANDRA_SSL_RELOAD_MS` shortens it for tests): the same,
//!   for the sides whose keystore or truststore changed its modification
//!   time since the last look.
//!
//! Not modelled: inline `private_key`/`trusted_certificates` beyond their
//! source checks, encrypted keys other than PBES2 (taken as readable, not
//! decrypted: such a node cannot serve TLS here), `outbound_keystore`,
//! the lazily built context (Cassandra builds the one it serves at the
//! first connection; here it is the one validated), contexts a real node
//! has not cached yet (a side without connections is not reloaded there),
//! Cassandra before 4.1 (no factories: the settings are not checked).
//! Pure parsing and checks over file contents; [`SslState`] does the I/O
//! of reading the files and logging.

use std::sync::Mutex;

use base64::Engine;
use serde_json::Value;

use super::config::ConfigError;
use super::tls_wire::{KeyDer, Served};

pub const PEM_FACTORY: &str = "org.apache.cassandra.security.PEMBasedSslContextFactory";
pub const DEFAULT_FACTORY: &str = "org.apache.cassandra.security.DefaultSslContextFactory";

const CONFIGURATION_EXCEPTION: &str = "org.apache.cassandra.exceptions.ConfigurationException";
const IO_EXCEPTION: &str = "java.io.IOException";
const SSL_EXCEPTION: &str = "javax.net.ssl.SSLException";
const SECURITY_EXCEPTION: &str = "java.security.GeneralSecurityException";
const ILLEGAL_ARGUMENT: &str = "java.lang.IllegalArgumentException";
const NULL_POINTER: &str = "java.lang.NullPointerException";

/// A Java exception and its causes, as a stack trace prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaException {
    pub class: String,
    /// Empty: Java's null message.
    pub message: String,
    pub cause: Option<Box<JavaException>>,
}

impl JavaException {
    pub fn new(class: &str, message: impl Into<String>) -> Self {
        JavaException {
            class: class.to_string(),
            message: message.into(),
            cause: None,
        }
    }

    pub fn caused_by(mut self, cause: JavaException) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// `Throwable.toString()`: the class, and the message when there is one.
    pub fn headline(&self) -> String {
        if self.message.is_empty() {
            self.class.clone()
        } else {
            format!("{}: {}", self.class, self.message)
        }
    }

    /// The headline, then a `Caused by:` line for each cause.
    pub fn trace(&self) -> String {
        let mut out = self.headline();
        let mut cause = self.cause.as_deref();
        while let Some(c) = cause {
            out.push_str("\nCaused by: ");
            out.push_str(&c.headline());
            cause = c.cause.as_deref();
        }
        out
    }

    /// The innermost cause.
    pub fn root(&self) -> &JavaException {
        let mut e = self;
        while let Some(c) = e.cause.as_deref() {
            e = c;
        }
        e
    }
}

// ---- the settings ----

/// Which options: between members, or for clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

impl Side {
    /// The key in cassandra.yaml, which is also the description the
    /// reloads log (`SSLFactory.CacheKey.contextDescription`).
    pub fn key(self) -> &'static str {
        match self {
            Side::Server => "server_encryption_options",
            Side::Client => "client_encryption_options",
        }
    }

    /// What `applySslContext` calls it.
    pub fn startup_description(self) -> &'static str {
        match self {
            Side::Server => "Internode messaging",
            Side::Client => "Native transport",
        }
    }
}

/// `internode_encryption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Internode {
    None,
    All,
    Dc,
    Rack,
}

/// `EncryptionOptions.TlsEncryptionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Unencrypted,
    Optional,
    Encrypted,
}

impl Policy {
    pub fn description(self) -> &'static str {
        match self {
            Policy::Unencrypted => "unencrypted",
            Policy::Optional => "optionally encrypted",
            Policy::Encrypted => "encrypted",
        }
    }
}

/// One side's settings as cassandra.yaml gives them (absent keys take
/// `EncryptionOptions()`'s defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptionOptions {
    pub side: Side,
    /// `ssl_context_factory.class_name` as written.
    pub class_name: String,
    /// `ssl_context_factory.parameters`.
    pub parameters: Vec<(String, String)>,
    pub keystore: Option<String>,
    pub keystore_password: Option<String>,
    pub truststore: Option<String>,
    pub truststore_password: Option<String>,
    pub require_client_auth: bool,
    pub require_endpoint_verification: bool,
    pub enabled: Option<bool>,
    pub optional: Option<bool>,
    /// Server side only (`none` on the client side).
    pub internode_encryption: Internode,
}

fn invalid(what: &'static str, value: &Value) -> ConfigError {
    ConfigError::Invalid {
        what,
        value: match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    }
}

/// A string setting: absent or null is None (Java's null).
fn string(map: &Value, key: &str) -> Option<String> {
    scalar(map.get(key)?)
}

/// A scalar as a string (null and collections: None).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A Boolean setting as SnakeYAML reads one (`true`/`false`, and the YAML
/// 1.1 words as strings).
fn boolean(map: &Value, key: &str, what: &'static str) -> Result<Option<bool>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v @ Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "y" => Ok(Some(true)),
            "false" | "no" | "off" | "n" => Ok(Some(false)),
            _ => Err(invalid(what, v)),
        },
        Some(other) => Err(invalid(what, other)),
    }
}

impl EncryptionOptions {
    /// `side`'s options in the parsed cassandra.yaml.
    pub fn of(doc: &Value, side: Side) -> Result<Self, ConfigError> {
        let empty = Value::Object(Default::default());
        let map = match doc.get(side.key()) {
            None | Some(Value::Null) => &empty,
            Some(m @ Value::Object(_)) => m,
            Some(other) => return Err(invalid("encryption options", other)),
        };
        let factory = map.get("ssl_context_factory");
        let class_name = factory
            .and_then(|f| string(f, "class_name"))
            .unwrap_or_else(|| DEFAULT_FACTORY.to_string());
        let parameters = factory
            .and_then(|f| f.get("parameters"))
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), scalar(v).unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let internode_encryption = match (side, map.get("internode_encryption")) {
            (Side::Client, _) | (Side::Server, None | Some(Value::Null)) => Internode::None,
            (Side::Server, Some(v)) => match v.as_str() {
                Some("none") => Internode::None,
                Some("all") => Internode::All,
                Some("dc") => Internode::Dc,
                Some("rack") => Internode::Rack,
                _ => return Err(invalid("internode_encryption", v)),
            },
        };
        let keystore = match map.get("keystore") {
            None => Some("conf/.keystore".to_string()),
            Some(_) => string(map, "keystore"),
        };
        let truststore = match map.get("truststore") {
            None => Some("conf/.truststore".to_string()),
            Some(_) => string(map, "truststore"),
        };
        Ok(EncryptionOptions {
            side,
            class_name,
            parameters,
            keystore,
            keystore_password: string(map, "keystore_password"),
            truststore,
            truststore_password: string(map, "truststore_password"),
            require_client_auth: boolean(map, "require_client_auth", "require_client_auth")?
                .unwrap_or(false),
            require_endpoint_verification: boolean(
                map,
                "require_endpoint_verification",
                "require_endpoint_verification",
            )?
            .unwrap_or(false),
            enabled: boolean(map, "enabled", "enabled")?,
            optional: boolean(map, "optional", "optional")?,
            internode_encryption,
        })
    }

    fn parameter(&self, key: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Both sides, and where the node listens (the TLS fronts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub server: EncryptionOptions,
    pub client: EncryptionOptions,
    /// `rpc_address` (the native port's address; `listen_address` when
    /// unset) and `native_transport_port`.
    pub rpc_address: String,
    pub native_transport_port: u16,
}

impl TlsConfig {
    /// The settings of the parsed cassandra.yaml; `listen_address` is the
    /// default of `rpc_address`.
    pub fn parse(doc: &Value, listen_address: &str) -> Result<Self, ConfigError> {
        let native_transport_port = match string(doc, "native_transport_port") {
            Some(p) => p.parse().map_err(|_| ConfigError::Invalid {
                what: "native_transport_port",
                value: p,
            })?,
            None => 9042,
        };
        Ok(TlsConfig {
            server: EncryptionOptions::of(doc, Side::Server)?,
            client: EncryptionOptions::of(doc, Side::Client)?,
            rpc_address: string(doc, "rpc_address")
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| listen_address.to_string()),
            native_transport_port,
        })
    }
}

// ---- PEMReader ----

/// Java's `\s` (without UNICODE_CHARACTER_CLASS) and `.` (no line
/// terminators) spelled out for the regex crate.
const JAVA_SPACE: &str = r"[ \t\n\x0B\f\r]";
const JAVA_DOT: &str = "[^\n\r\u{85}\u{2028}\u{2029}]";

fn pem_pattern(what: &str) -> regex::Regex {
    // PEMReader's CERT_PATTERN and KEY_PATTERN, CASE_INSENSITIVE.
    let text = format!(
        "(?i)-+BEGIN{s}+{d}*{what}[^-]*-+(?:{s}|\r|\n)+([a-z0-9+/=\r\n]+)-+END{s}+{d}*{what}[^-]*-+",
        s = JAVA_SPACE,
        d = JAVA_DOT,
    );
    regex::Regex::new(&text).expect("PEMReader's pattern")
}

fn java_base64(text: &str) -> Result<Vec<u8>, JavaException> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const JAVA: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    JAVA.decode(clean.as_bytes()).map_err(|e| {
        JavaException::new(
            ILLEGAL_ARGUMENT,
            match e {
                base64::DecodeError::InvalidByte(_, b) => {
                    format!("Illegal base64 character {b:x}")
                }
                _ => "Input byte array has wrong 4-byte ending unit".to_string(),
            },
        )
    })
}

/// A DER element: tag, contents, the whole encoding.
type Element<'a> = (u8, &'a [u8], &'a [u8]);

/// The element at the start of `d`.
fn der(d: &[u8]) -> Option<Element<'_>> {
    let tag = *d.first()?;
    let first = *d.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for b in d.get(2..2 + n)? {
            len = (len << 8) | usize::from(*b);
        }
        (len, 2 + n)
    };
    let whole = d.get(..header.checked_add(len)?)?;
    Some((tag, &whole[header..], whole))
}

/// The elements of a DER SEQUENCE's contents.
fn elements(mut contents: &[u8]) -> Option<Vec<Element<'_>>> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let e = der(contents)?;
        contents = &contents[e.2.len()..];
        out.push(e);
    }
    Some(out)
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// The named curves Java's SunEC reads: P-256, P-384, P-521.
const JAVA_CURVES: [&[u8]; 3] = [
    &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
    &[0x2b, 0x81, 0x04, 0x00, 0x22],
    &[0x2b, 0x81, 0x04, 0x00, 0x23],
];
const OID_PBES2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];

/// Whether `der_bytes` is a PKCS#8 `PrivateKeyInfo` one of
/// `KeyFactory`'s RSA, DSA or EC reads (EC on a curve Java knows).
fn java_reads_pkcs8(der_bytes: &[u8]) -> bool {
    let Some((0x30, contents, whole)) = der(der_bytes) else {
        return false;
    };
    if whole.len() != der_bytes.len() {
        return false;
    }
    let Some(parts) = elements(contents) else {
        return false;
    };
    let [version, algorithm, key, ..] = parts.as_slice() else {
        return false;
    };
    if version.0 != 0x02 || !matches!(version.1, [0] | [1]) || algorithm.0 != 0x30 || key.0 != 0x04
    {
        return false;
    }
    let Some(alg) = elements(algorithm.1) else {
        return false;
    };
    let Some((0x06, oid, _)) = alg.first().copied() else {
        return false;
    };
    let inner_is_sequence = matches!(der(key.1), Some((0x30, _, w)) if w.len() == key.1.len());
    match oid {
        o if o == OID_RSA || o == OID_DSA => inner_is_sequence || o == OID_DSA,
        o if o == OID_EC => {
            inner_is_sequence
                && matches!(alg.get(1), Some((0x06, curve, _)) if JAVA_CURVES.contains(curve))
        }
        _ => false,
    }
}

/// The key `PEMReader.extractPrivateKey` finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivateKey {
    /// Unencrypted PKCS#8 (DER).
    Pkcs8(Vec<u8>),
    /// Encrypted with a scheme the fake does not decrypt (not PBES2).
    Encrypted,
}

/// `PEMReader.extractPrivateKey(pem, password)`.
pub fn read_private_key(pem: &str, password: Option<&str>) -> Result<PrivateKey, JavaException> {
    let Some(m) = pem_pattern(r"PRIVATE[ \t\n\x0B\f\r]+KEY").captures(pem) else {
        return Err(JavaException::new(
            SECURITY_EXCEPTION,
            "Invalid private key format",
        ));
    };
    let bytes = java_base64(&m[1])?;
    if password.is_some() {
        // EncryptedPrivateKeyInfo(byte[]): a SEQUENCE of two.
        let parsed = der(&bytes)
            .filter(|(tag, _, _)| *tag == 0x30)
            .and_then(|(_, contents, _)| {
                let first = der(contents)?;
                let rest = &contents[first.2.len()..];
                let second = der(rest)?;
                Some((first, rest.len() - second.2.len()))
            });
        let Some((algorithm, overrun)) = parsed else {
            return Err(JavaException::new(
                IO_EXCEPTION,
                "DerInputStream.getLength(): lengthTag=127, too big.",
            ));
        };
        if overrun != 0 {
            return Err(JavaException::new(
                IO_EXCEPTION,
                format!("overrun, bytes = {overrun}"),
            ));
        }
        let oid = elements(algorithm.1).and_then(|a| a.first().map(|e| e.1.to_vec()));
        if oid.as_deref() == Some(OID_PBES2) {
            return Err(JavaException::new(
                "java.security.NoSuchAlgorithmException",
                "PBES2 SecretKeyFactory not available",
            ));
        }
        return Ok(PrivateKey::Encrypted);
    }
    if java_reads_pkcs8(&bytes) {
        Ok(PrivateKey::Pkcs8(bytes))
    } else {
        Err(JavaException::new(
            SECURITY_EXCEPTION,
            "The given private key could not be parsed with any of the supported algorithms. Please see PEMReader#SUPPORTED_PRIVATE_KEY_ALGORITHMS.",
        ))
    }
}

/// `PEMReader.extractCertificates`: each certificate block's DER, read
/// by `CertificateFactory` (X.509).
pub fn read_certificates(pem: &str) -> Result<Vec<Vec<u8>>, JavaException> {
    let pattern = pem_pattern("CERTIFICATE");
    let mut out = Vec::new();
    for m in pattern.captures_iter(pem) {
        let bytes = java_base64(&m[1])?;
        if let Err(e) = x509_parser::parse_x509_certificate(&bytes) {
            let reason = if bytes.is_empty() {
                "Empty input".to_string()
            } else {
                e.to_string()
            };
            return Err(JavaException::new(
                "java.security.cert.CertificateException",
                format!("Could not parse certificate: java.io.IOException: {reason}"),
            ));
        }
        out.push(bytes);
    }
    if out.is_empty() {
        return Err(JavaException::new(
            SECURITY_EXCEPTION,
            "Invalid certificate format",
        ));
    }
    Ok(out)
}

/// PKCS12 `validateChain`: each certificate's issuer is the next one's
/// subject, no certificate twice.
fn chain_is_valid(chain: &[Vec<u8>]) -> bool {
    let names: Vec<(Vec<u8>, Vec<u8>)> = chain
        .iter()
        .filter_map(|der| {
            let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
            Some((
                c.tbs_certificate.issuer.as_raw().to_vec(),
                c.tbs_certificate.subject.as_raw().to_vec(),
            ))
        })
        .collect();
    let linked = names.windows(2).all(|w| w[0].0 == w[1].1);
    let distinct = chain
        .iter()
        .enumerate()
        .all(|(i, c)| !chain[..i].contains(c));
    names.len() == chain.len() && linked && distinct
}

/// The key and chain of a PEM keystore
/// (`PEMBasedSslContextFactory.buildKeyStore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldKey {
    pub key: PrivateKey,
    pub chain: Vec<Vec<u8>>,
}

/// `buildKeyStore` over the keystore's text.
pub fn build_key_store(pem: &str, password: Option<&str>) -> Result<HeldKey, JavaException> {
    let key = read_private_key(pem, password)?;
    let chain = read_certificates(pem)?;
    if chain.len() > 1 && !chain_is_valid(&chain) {
        return Err(JavaException::new(
            "java.security.KeyStoreException",
            "Certificate chain is not valid",
        ));
    }
    Ok(HeldKey { key, chain })
}

/// Java's `Date.toString()` of a time in seconds since the epoch, in UTC
/// (the image's time zone).
pub fn java_date(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {day:02} {:02}:{:02}:{:02} UTC {year}",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    )
}

// ---- the factories ----

/// Where a PEM factory's key or trusted certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    File(Option<String>),
    Inline(String),
}

impl Source {
    fn present(&self) -> bool {
        match self {
            Source::File(path) => path
                .as_deref()
                .is_some_and(|p| std::path::Path::new(p).exists()),
            Source::Inline(text) => !text.is_empty(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Pem {
        key: Source,
        key_password: Option<String>,
        trust: Source,
    },
    /// `DefaultSslContextFactory`: JKS (or `store_type`) files.
    Default,
}

/// A file the hot-reload task watches, with the modification time it saw
/// last (`FileBasedSslContextFactory.HotReloadableFile`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HotFile {
    path: String,
    last: u128,
}

/// `File.lastModified()`: milliseconds, 0 when it cannot be read.
fn last_modified(path: &str) -> u128 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis())
}

impl HotFile {
    fn new(path: &str) -> Self {
        HotFile {
            path: path.to_string(),
            last: last_modified(path),
        }
    }

    fn should_reload(&mut self) -> bool {
        let now = last_modified(&self.path);
        let changed = now != self.last;
        self.last = now;
        changed
    }
}

/// One side's `ISslContextFactory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factory {
    pub options: EncryptionOptions,
    kind: Kind,
    checked_expiry: bool,
    hot: Vec<HotFile>,
}

/// The `ConfigKey` names, which parameters may not repeat.
const CONFIG_KEYS: [&str; 15] = [
    "keystore",
    "keystore_password",
    "outbound_keystore",
    "outbound_keystore_password",
    "truststore",
    "truststore_password",
    "cipher_suites",
    "protocol",
    "accepted_protocols",
    "algorithm",
    "store_type",
    "require_client_auth",
    "require_endpoint_verification",
    "enabled",
    "optional",
];

/// Reads a PEM file as `readPEMFile` does (`Files.readAllBytes`).
fn read_pem_file(path: &str) -> Result<String, JavaException> {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| nio_error(path, &e))
}

fn nio_error(path: &str, e: &std::io::Error) -> JavaException {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            JavaException::new("java.nio.file.AccessDeniedException", path)
        }
        std::io::ErrorKind::NotFound => {
            JavaException::new("java.nio.file.NoSuchFileException", path)
        }
        _ if e.raw_os_error() == Some(nix::libc::EISDIR) => {
            JavaException::new(IO_EXCEPTION, "Is a directory")
        }
        _ => JavaException::new(IO_EXCEPTION, e.to_string()),
    }
}

/// What a side serves once its context is built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// The PEM keystore (none with the default factory: not read here).
    pub key: Option<HeldKey>,
    /// The trusted certificates (empty when not built, or JKS).
    pub trust: Vec<Vec<u8>>,
}

impl Factory {
    /// `FBUtilities.newSslContextFactory` after
    /// `prepareSslContextFactoryParameterizedKeys`; the warnings the
    /// constructor logs.
    pub fn instantiate(options: &EncryptionOptions) -> Result<(Self, Vec<String>), JavaException> {
        for (key, _) in &options.parameters {
            if CONFIG_KEYS.contains(&key.to_ascii_lowercase().as_str()) {
                return Err(JavaException::new(
                    ILLEGAL_ARGUMENT,
                    format!(
                        "SslContextFactory {} should configure '{key}' as encryption_options instead of parameterized keys",
                        options.class_name
                    ),
                ));
            }
        }
        let class = if options.class_name.contains('.') {
            options.class_name.clone()
        } else {
            format!("org.apache.cassandra.security.{}", options.class_name)
        };
        let unable = |cause: JavaException| {
            JavaException::new(
                CONFIGURATION_EXCEPTION,
                format!("Unable to create instance of ISslContextFactory for {class}"),
            )
            .caused_by(cause)
        };
        let mut warnings = Vec::new();
        let kind = match class.as_str() {
            DEFAULT_FACTORY => Kind::Default,
            PEM_FACTORY => {
                let constructor = |message: &str| {
                    unable(
                        JavaException::new("java.lang.reflect.InvocationTargetException", "")
                            .caused_by(JavaException::new(ILLEGAL_ARGUMENT, message)),
                    )
                };
                let pem_key = options
                    .parameter("private_key")
                    .filter(|k| !k.is_empty())
                    .map(str::to_string);
                let key_password = options
                    .parameter("private_key_password")
                    .filter(|p| !p.is_empty())
                    .map(str::to_string);
                let keystore_password = options.keystore_password.clone();
                let key_password = match key_password {
                    None => keystore_password,
                    Some(p) => {
                        if keystore_password
                            .as_deref()
                            .is_some_and(|k| !k.is_empty() && k != p)
                        {
                            return Err(constructor(
                                "'keystore_password' and 'key_password' both configurations are given and the values do not match",
                            ));
                        }
                        warnings.push("'keystore_password' and 'key_password' both are configured but since the values match it's okay. Ideally you should only specify one of them.".to_string());
                        Some(p)
                    }
                };
                if options
                    .truststore_password
                    .as_deref()
                    .is_some_and(|p| !p.is_empty())
                {
                    warnings.push("PEM based truststore should not be using password. Ignoring the given value in 'truststore_password' configuration.".to_string());
                }
                let pem_trust = options
                    .parameter("trusted_certificates")
                    .filter(|t| !t.is_empty())
                    .map(str::to_string);
                let keystore_file = Source::File(options.keystore.clone());
                let truststore_file = Source::File(options.truststore.clone());
                if keystore_file.present() && pem_key.is_some() {
                    return Err(constructor(
                        "Configuration must specify value for either keystore or private_key, not both for PEMBasedSSlContextFactory",
                    ));
                }
                if truststore_file.present() && pem_trust.is_some() {
                    return Err(constructor(
                        "Configuration must specify value for either truststore or trusted_certificates, not both for PEMBasedSSlContextFactory",
                    ));
                }
                Kind::Pem {
                    key: pem_key.map_or(keystore_file, Source::Inline),
                    key_password,
                    trust: pem_trust.map_or(truststore_file, Source::Inline),
                }
            }
            "org.apache.cassandra.security.FileBasedSslContextFactory"
            | "org.apache.cassandra.security.AbstractSslContextFactory" => {
                return Err(unable(JavaException::new(
                    "java.lang.InstantiationException",
                    "",
                )));
            }
            other => {
                return Err(unable(JavaException::new(
                    "java.lang.ClassNotFoundException",
                    other,
                )));
            }
        };
        Ok((
            Factory {
                options: options.clone(),
                kind,
                checked_expiry: false,
                hot: Vec::new(),
            },
            warnings,
        ))
    }

    /// `hasKeystore()`.
    pub fn has_keystore(&self) -> bool {
        match &self.kind {
            Kind::Pem { key, .. } => key.present(),
            Kind::Default => Source::File(self.options.keystore.clone()).present(),
        }
    }

    fn has_truststore(&self) -> bool {
        match &self.kind {
            Kind::Pem { trust, .. } => trust.present(),
            Kind::Default => Source::File(self.options.truststore.clone()).present(),
        }
    }

    /// `EncryptionOptions.applyConfig` (and the server side's
    /// `applyConfigInternal`): the policy, and the warnings it logs.
    pub fn policy(&self) -> (Policy, Vec<String>) {
        let o = &self.options;
        let mut warnings = Vec::new();
        let mut enabled = o.enabled == Some(true);
        let mut optional = match o.optional {
            Some(v) => v,
            None if self.has_keystore() => !enabled,
            None => false,
        };
        if o.side == Side::Server {
            enabled = o.internode_encryption != Internode::None;
            if o.enabled == Some(true) && !enabled {
                warnings.push(
                    "Setting server_encryption_options.enabled has no effect, use internode_encryption"
                        .to_string(),
                );
            }
            let dc_or_rack = matches!(o.internode_encryption, Internode::Dc | Internode::Rack);
            if o.require_client_auth && dc_or_rack {
                warnings.push("Setting require_client_auth is incompatible with 'rack' and 'dc' internode_encryption values. It is possible for an internode connection to pretend to be in the same rack/dc by spoofing its broadcast address in the handshake and bypass authentication. To ensure that mutual TLS authentication is not bypassed, please set internode_encryption to 'all'. Continuing with insecure configuration.".to_string());
            }
            optional = optional || dc_or_rack;
        }
        let policy = if optional {
            Policy::Optional
        } else if enabled {
            Policy::Encrypted
        } else {
            Policy::Unencrypted
        };
        (policy, warnings)
    }

    /// `buildKeyManagerFactory`; the warnings it logs (an expired
    /// certificate, the first time).
    fn build_key_manager(
        &mut self,
        warnings: &mut Vec<String>,
    ) -> Result<Option<HeldKey>, JavaException> {
        match &self.kind {
            Kind::Pem {
                key, key_password, ..
            } => {
                let built = (|| {
                    let text = match key {
                        Source::Inline(text) => text.clone(),
                        Source::File(Some(path)) if key.present() => read_pem_file(path)?,
                        Source::File(_) => {
                            return Err(JavaException::new(
                                SSL_EXCEPTION,
                                "Must provide keystore or private_key in configuration for PEMBasedSSlContextFactory",
                            ));
                        }
                    };
                    build_key_store(&text, key_password.as_deref())
                })()
                .map_err(|e| {
                    JavaException::new(
                        SSL_EXCEPTION,
                        "Failed to build key manager store for secure connections",
                    )
                    .caused_by(e)
                })?;
                if !self.checked_expiry {
                    self.checked_expiry = true;
                    if let Some(Ok((_, leaf))) = built
                        .chain
                        .first()
                        .map(|d| x509_parser::parse_x509_certificate(d))
                    {
                        let not_after = leaf.validity().not_after.timestamp();
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs() as i64);
                        if not_after < now {
                            warnings.push(format!(
                                "Certificate for cassandra-ssl-keystore expired on {}",
                                java_date(not_after)
                            ));
                        }
                    }
                }
                Ok(Some(built))
            }
            Kind::Default => {
                let o = &self.options;
                jks_file(o.keystore.as_deref(), o.keystore_password.as_deref()).map_err(|e| {
                    JavaException::new(
                        SSL_EXCEPTION,
                        "failed to build key manager store for secure connections",
                    )
                    .caused_by(e)
                })?;
                Ok(None)
            }
        }
    }

    /// `buildTrustManagerFactory`: the trusted certificates.
    fn build_trust_manager(&self) -> Result<Vec<Vec<u8>>, JavaException> {
        match &self.kind {
            Kind::Pem { trust, .. } => (|| {
                let text = match trust {
                    Source::Inline(text) => text.clone(),
                    Source::File(Some(path)) if trust.present() => read_pem_file(path)?,
                    Source::File(_) => {
                        return Err(JavaException::new(
                            SSL_EXCEPTION,
                            "Must provide truststore or trusted_certificates in configuration for PEMBasedSSlContextFactory",
                        ));
                    }
                };
                read_certificates(&text)
            })()
            .map_err(|e| {
                JavaException::new(
                    SSL_EXCEPTION,
                    "Failed to build trust manager store for secure connections",
                )
                .caused_by(e)
            }),
            Kind::Default => {
                let o = &self.options;
                jks_file(o.truststore.as_deref(), o.truststore_password.as_deref()).map_err(
                    |e| {
                        JavaException::new(
                            SSL_EXCEPTION,
                            "failed to build trust manager store for secure connections",
                        )
                        .caused_by(e)
                    },
                )?;
                Ok(Vec::new())
            }
        }
    }

    /// `SSLFactory.validateSslContext(description, options,
    /// verifyPeerCertificate)` for a side that is not unencrypted: the
    /// key manager, then the trust manager when peers are verified.
    pub fn validate(
        &mut self,
        description: &str,
        verify_peer: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Context, JavaException> {
        let built = (|| {
            let key = self.build_key_manager(warnings)?;
            let trust = if verify_peer {
                self.build_trust_manager()?
            } else {
                Vec::new()
            };
            Ok(Context { key, trust })
        })();
        built.map_err(|e| {
            JavaException::new(
                IO_EXCEPTION,
                format!("Failed to create SSL context using {description}"),
            )
            .caused_by(e)
        })
    }

    /// `initHotReloading`: the files to watch, with their times now.
    fn init_hot_reloading(&mut self) {
        let mut files = Vec::new();
        let (key_file, trust_file) = match &self.kind {
            Kind::Pem { key, trust, .. } => (
                matches!(key, Source::File(_)) && self.has_keystore(),
                matches!(trust, Source::File(_)) && self.has_truststore(),
            ),
            Kind::Default => (self.has_keystore(), self.has_truststore()),
        };
        if key_file && let Some(p) = &self.options.keystore {
            files.push(HotFile::new(p));
        }
        if trust_file && let Some(p) = &self.options.truststore {
            files.push(HotFile::new(p));
        }
        if !files.is_empty() {
            self.hot = files;
        }
    }

    /// `shouldReload()`: a watched file's time changed since the last look
    /// (the look stops at the first changed file, as `anyMatch` does).
    fn should_reload(&mut self) -> bool {
        self.hot.iter_mut().any(HotFile::should_reload)
    }
}

/// `FileBasedSslContextFactory`'s opening of a JKS store: the file, then
/// its password (`keystore_password.toCharArray()`); the store is not
/// parsed here.
fn jks_file(path: Option<&str>, password: Option<&str>) -> Result<(), JavaException> {
    let Some(path) = path else {
        return Err(JavaException::new(NULL_POINTER, ""));
    };
    std::fs::File::open(path).map_err(|e| nio_error(path, &e))?;
    if password.is_none() {
        return Err(JavaException::new(NULL_POINTER, ""));
    }
    Ok(())
}

// ---- the running node ----

/// A log line: level and message.
pub type LogLine = (&'static str, String);

#[derive(Debug)]
struct SideState {
    factory: Factory,
    policy: Policy,
    context: Context,
}

/// The node's SSL contexts while it runs. I/O: reads the files, prints
/// the log lines on stdout (INFO, WARN) and stderr (ERROR).
#[derive(Debug)]
pub struct SslState {
    sides: Mutex<Vec<SideState>>,
    reloads: std::sync::atomic::AtomicU64,
    failed_reloads: std::sync::atomic::AtomicU64,
}

fn print(thread: &str, lines: &[LogLine]) {
    for (level, message) in lines {
        let line = format!("{level:<5} [{thread}] {message}");
        if *level == "ERROR" {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

impl SslState {
    /// `applyConfig` of both sides, then `applySslContext`: the state, or
    /// the exception the node does not start with (a
    /// `ConfigurationException`, or the `IllegalArgumentException` of
    /// repeated parameters). Logs the warnings on the way.
    pub fn start(config: &TlsConfig) -> Result<SslState, JavaException> {
        let mut lines: Vec<LogLine> = Vec::new();
        let mut factories = Vec::new();
        let outcome = (|| {
            for options in [&config.server, &config.client] {
                let (factory, warnings) = Factory::instantiate(options)?;
                lines.extend(warnings.into_iter().map(|w| ("WARN", w)));
                let (policy, warnings) = factory.policy();
                lines.extend(warnings.into_iter().map(|w| ("WARN", w)));
                factories.push((factory, policy));
            }
            let mut sides = Vec::new();
            for (mut factory, policy) in factories.drain(..) {
                let context = if policy == Policy::Unencrypted {
                    Context::default()
                } else {
                    let side = factory.options.side;
                    let verify = side == Side::Server || factory.options.require_client_auth;
                    let mut warnings = Vec::new();
                    let built = factory.validate(side.startup_description(), verify, &mut warnings);
                    lines.extend(warnings.into_iter().map(|w| ("WARN", w)));
                    built.map_err(|e| {
                        JavaException::new(CONFIGURATION_EXCEPTION, "Failed to initialize SSL")
                            .caused_by(e)
                    })?
                };
                sides.push(SideState {
                    factory,
                    policy,
                    context,
                });
            }
            for s in sides.iter_mut().filter(|s| s.policy != Policy::Unencrypted) {
                s.factory.init_hot_reloading();
            }
            Ok(sides)
        })();
        print("main", &lines);
        Ok(SslState {
            sides: Mutex::new(outcome?),
            reloads: Default::default(),
            failed_reloads: Default::default(),
        })
    }

    /// A side's policy.
    pub fn policy(&self, side: Side) -> Policy {
        self.lock()
            .iter()
            .find(|s| s.factory.options.side == side)
            .map_or(Policy::Unencrypted, |s| s.policy)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SideState>> {
        self.sides.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `side` serves now (None when unencrypted).
    pub fn served(&self, side: Side) -> Option<Served> {
        let sides = self.lock();
        let s = sides
            .iter()
            .find(|s| s.factory.options.side == side && s.policy != Policy::Unencrypted)?;
        let held = s.context.key.as_ref();
        Some(Served {
            chain: held.map(|h| h.chain.clone()).unwrap_or_default(),
            key: held.and_then(|h| match &h.key {
                PrivateKey::Pkcs8(der) => Some(KeyDer::Pkcs8(der.clone())),
                PrivateKey::Encrypted => None,
            }),
            require_client_auth: s.factory.options.require_client_auth,
            trust: s.context.trust.clone(),
            endpoint_verification: side == Side::Server
                && s.factory.options.require_endpoint_verification,
        })
    }

    /// How many contexts were reloaded, and how many reloads failed.
    pub fn reload_counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.reloads.load(SeqCst), self.failed_reloads.load(SeqCst))
    }

    /// `checkCachedContextsForReload`: every encrypted side (the changed
    /// ones only unless `force`) validated again; a success replaces its
    /// context, a failure keeps the old one. The log lines.
    fn check(&self, force: bool) -> Vec<LogLine> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut lines = Vec::new();
        let mut sides = self.lock();
        for s in sides.iter_mut().filter(|s| s.policy != Policy::Unencrypted) {
            if !(force || s.factory.should_reload()) {
                continue;
            }
            let side = s.factory.options.side;
            let verify = side == Side::Server || s.factory.options.require_client_auth;
            let mut warnings = Vec::new();
            let built = s.factory.validate(side.key(), verify, &mut warnings);
            lines.extend(warnings.into_iter().map(|w| ("WARN", w)));
            match built {
                Ok(context) => {
                    s.context = context;
                    self.reloads.fetch_add(1, SeqCst);
                    lines.push((
                        "INFO",
                        format!(
                            "SSL certificates have been updated for {}. Resetting the ssl contexts for new connections.",
                            side.key()
                        ),
                    ));
                }
                Err(e) => {
                    self.failed_reloads.fetch_add(1, SeqCst);
                    lines.push((
                        "ERROR",
                        format!(
                            "Failed to hot reload the SSL Certificates! Please check the certificate files for {}.\n{}",
                            side.key(),
                            e.trace()
                        ),
                    ));
                }
            }
        }
        lines
    }

    /// `reloadSslCertificates` (`SSLFactory.forceCheckCertFiles`).
    pub fn force_reload(&self) -> Vec<LogLine> {
        let lines = self.check(true);
        print("RMI TCP Connection(2)-127.0.0.1", &lines);
        lines
    }

    /// The hot-reload task's look (`checkCertFilesForHotReloading`).
    pub fn periodic_check(&self) -> Vec<LogLine> {
        let lines = self.check(false);
        print("ScheduledTasks:1", &lines);
        lines
    }
}

/// The hot-reload task's period: 600 s (`SSLFactory`'s constants), or
/// `FAKE_CASSANDRA_SSL_RELOAD_MS`.
pub fn hot_reload_period() -> std::time::Duration {
    std::env::var("FAKE_CASSANDRA_SSL_RELOAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_millis,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, IsCa, KeyPair, PKCS_ECDSA_P256_SHA256};

    /// A CA and a leaf it signed: (CA PEM, leaf PEM, leaf key PEM).
    fn pki() -> (String, String, String, KeyPair) {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "ca");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut leaf = CertificateParams::new(vec!["m".to_string()]).unwrap();
        leaf.distinguished_name.push(rcgen::DnType::CommonName, "m");
        let leaf = leaf.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), leaf.pem(), key.serialize_pem(), key)
    }

    #[test]
    fn pem_reader_reads_pkcs8_keys_and_certificates_only() {
        let (ca, leaf, key, key_pair) = pki();
        let held = build_key_store(&format!("{key}{leaf}{ca}"), None).expect("a keystore");
        assert_eq!(held.chain.len(), 2);
        assert!(matches!(held.key, PrivateKey::Pkcs8(_)));
        // Order in the file does not matter.
        assert!(build_key_store(&format!("{leaf}{ca}{key}"), None).is_ok());
        // The key alone.
        let e = build_key_store(&key, None).unwrap_err();
        assert_eq!(
            e.headline(),
            "java.security.GeneralSecurityException: Invalid certificate format"
        );
        // No key.
        let e = build_key_store(&leaf, None).unwrap_err();
        assert_eq!(e.message, "Invalid private key format");
        // SEC1 (the ECPrivateKey inside the PKCS#8): matched by the
        // pattern, refused by every KeyFactory.
        let pkcs8 = key_pair.serialize_der();
        let (_, contents, _) = der(&pkcs8).unwrap();
        let inner = elements(contents).unwrap()[2].1.to_vec();
        let sec1 = format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(inner)
        );
        let e = read_private_key(&sec1, None).unwrap_err();
        assert!(
            e.message
                .starts_with("The given private key could not be parsed"),
            "{e:?}"
        );
        // A password means an encrypted key: an unencrypted one overruns.
        let e = read_private_key(&key, Some("cassandra")).unwrap_err();
        assert!(
            e.headline()
                .starts_with("java.io.IOException: overrun, bytes = "),
            "{e:?}"
        );
        // Chain out of order: the leaf's issuer is not the next subject.
        let e = build_key_store(&format!("{key}{ca}{leaf}"), None).unwrap_err();
        assert_eq!(e.message, "Certificate chain is not valid");
        assert_eq!(
            read_certificates("").unwrap_err().message,
            "Invalid certificate format"
        );
    }

    fn doc(yaml: &str) -> Value {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn policies_follow_apply_config() {
        let dir = tempfile::tempdir().unwrap();
        let ks = dir.path().join("ks.pem");
        std::fs::write(&ks, "x").unwrap();
        let ks = ks.display().to_string();
        let policy = |yaml: String, side: Side| {
            let o = EncryptionOptions::of(&doc(&yaml), side).unwrap();
            Factory::instantiate(&o).unwrap().0.policy()
        };
        let pem = format!("ssl_context_factory: {{class_name: {PEM_FACTORY}}}, keystore: {ks}");
        // all + optional unset + a keystore file: optionally encrypted.
        let (p, _) = policy(
            format!("server_encryption_options: {{internode_encryption: all, {pem}}}"),
            Side::Server,
        );
        assert_eq!(p, Policy::Optional);
        let (p, _) = policy(
            format!(
                "server_encryption_options: {{internode_encryption: all, optional: false, {pem}}}"
            ),
            Side::Server,
        );
        assert_eq!(p, Policy::Encrypted);
        // dc is always optional, and warns with require_client_auth.
        let (p, w) = policy(
            format!(
                "server_encryption_options: {{internode_encryption: dc, optional: false, require_client_auth: true, {pem}}}"
            ),
            Side::Server,
        );
        assert_eq!(p, Policy::Optional);
        assert!(
            w[0].starts_with("Setting require_client_auth is incompatible"),
            "{w:?}"
        );
        // none, no keystore: unencrypted.
        let (p, _) = policy("{}".into(), Side::Server);
        assert_eq!(p, Policy::Unencrypted);
        let (p, _) = policy(
            format!("client_encryption_options: {{enabled: true, {pem}}}"),
            Side::Client,
        );
        assert_eq!(p, Policy::Encrypted);
        let (p, _) = policy(
            format!("client_encryption_options: {{enabled: false, {pem}}}"),
            Side::Client,
        );
        assert_eq!(p, Policy::Optional);
    }

    #[test]
    fn unknown_factories_and_repeated_keys_are_refused() {
        let o = EncryptionOptions::of(
            &doc(
                "server_encryption_options: {ssl_context_factory: {class_name: com.example.Nope}}",
            ),
            Side::Server,
        )
        .unwrap();
        let e = Factory::instantiate(&o).unwrap_err();
        assert_eq!(
            e.trace(),
            "org.apache.cassandra.exceptions.ConfigurationException: Unable to create instance of ISslContextFactory for com.example.Nope\nCaused by: java.lang.ClassNotFoundException: com.example.Nope"
        );
        let o = EncryptionOptions::of(
            &doc("server_encryption_options: {ssl_context_factory: {class_name: PEMBasedSslContextFactory, parameters: {keystore: x}}}"),
            Side::Server,
        )
        .unwrap();
        let e = Factory::instantiate(&o).unwrap_err();
        assert_eq!(e.class, ILLEGAL_ARGUMENT);
        // Short names are in org.apache.cassandra.security.
        let o = EncryptionOptions::of(
            &doc("server_encryption_options: {ssl_context_factory: {class_name: PEMBasedSslContextFactory}}"),
            Side::Server,
        )
        .unwrap();
        assert!(Factory::instantiate(&o).is_ok());
    }

    #[test]
    fn java_dates() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(1_795_880_148), "Sat Nov 28 15:35:48 UTC 2026");
    }
}
