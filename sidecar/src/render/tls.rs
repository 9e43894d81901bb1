//! The encryption settings of the main file (`spec.security.tls`): the
//! member's key, certificate chain and trusted CAs are files the sidecar
//! keeps in the Pod's memory-backed TLS volume
//! ([`crds::contract::tls::TLS_DIR`]), and the database reads them from
//! there, again when they change. Pure.
//!
//! They are the operator's: the settings replace whatever the image's
//! defaults or the rack's overrides hold under the same keys
//! (`server_encryption_options`, `client_encryption_options`), so that an
//! override cannot turn off what the Cluster asks for.

use std::path::{Path, PathBuf};

use crds::contract::tls::{CA_FILE, CERT_FILE, Encryption, KEY_FILE, KEYSTORE_FILE};
use crds::v1alpha1::{ClientEncryption, InternodeEncryption};
use serde_norway::{Mapping, Value};

/// Cassandra's class that reads PEM keys and certificates (4.1 and later).
pub const PEM_FACTORY: &str = "org.apache.cassandra.security.PEMBasedSslContextFactory";

/// What a member's configuration says about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Which traffic between members is encrypted.
    pub internode: InternodeEncryption,
    /// Whether members' connections of the other kind are accepted too
    /// (the transitional mode of a cluster moving to TLS).
    pub internode_optional: bool,
    /// Client connections.
    pub client: ClientEncryption,
    /// Where the key, chain and CA bundle are.
    pub dir: PathBuf,
}

impl TlsSettings {
    /// The settings the controller put in the member's Pod template
    /// ([`crds::contract::tls::ENCRYPTION_ENV`]: the spec's, or a step of a
    /// move to TLS); without it (a Pod of an older controller), the
    /// Cluster's spec. None when it asks for no TLS.
    pub fn of(
        encryption: Option<&str>,
        spec: Option<&crds::v1alpha1::SecuritySpec>,
        dir: &Path,
    ) -> Result<Option<TlsSettings>, String> {
        let encryption = match encryption {
            Some(value) => Some(Encryption::parse(value)?),
            None => spec.and_then(|s| Encryption::of(&s.tls)),
        };
        Ok(encryption.map(|e| TlsSettings {
            internode: e.internode,
            internode_optional: e.internode_optional,
            client: e.client,
            dir: dir.to_path_buf(),
        }))
    }

    fn path(&self, file: &str) -> Value {
        Value::String(self.dir.join(file).display().to_string())
    }
}

fn mapping(entries: Vec<(&str, Value)>) -> Mapping {
    entries
        .into_iter()
        .map(|(k, v)| (Value::String(k.to_string()), v))
        .collect()
}

fn factory() -> Value {
    Value::Mapping(mapping(vec![(
        "class_name",
        Value::String(PEM_FACTORY.to_string()),
    )]))
}

/// cassandra.yaml's encryption settings (4.1 and 5.0): the PEM factory
/// reading the unencrypted PKCS#8 key and the chain from one file (no
/// password: one set beside an unencrypted key breaks it) and the trusted
/// CAs from another. Between members, each side must present a
/// certificate of the cluster's CA (`require_client_auth`). Not
/// `require_endpoint_verification`: Cassandra checks it on the receiving
/// side too, against the connection's source address, which is the
/// peer's Pod IP, not the ClusterIP its certificate names (4.1.8 refused
/// a peer with "No subject alternative names matching IP address"). So a
/// member's certificate proves membership of the cluster, not which
/// member (README, Security). `optional` written out: unset, a node with a
/// keystore also accepts clear text; true only on the way to TLS (with
/// `internode_encryption: none` it then accepts TLS from members that
/// already open it, and with another value it still accepts clear text
/// from members that do not yet).
pub fn cassandra_options(tls: &TlsSettings) -> Mapping {
    let internode = tls.internode != InternodeEncryption::None;
    let server = mapping(vec![
        (
            "internode_encryption",
            Value::String(tls.internode.as_str().to_string()),
        ),
        ("optional", Value::Bool(tls.internode_optional)),
        ("ssl_context_factory", factory()),
        ("keystore", tls.path(KEYSTORE_FILE)),
        ("truststore", tls.path(CA_FILE)),
        (
            "require_client_auth",
            Value::Bool(internode || tls.internode_optional),
        ),
        ("require_endpoint_verification", Value::Bool(false)),
    ]);
    let client_enabled = tls.client != ClientEncryption::None;
    let client = mapping(vec![
        ("enabled", Value::Bool(client_enabled)),
        (
            "optional",
            Value::Bool(tls.client == ClientEncryption::Optional),
        ),
        ("ssl_context_factory", factory()),
        ("keystore", tls.path(KEYSTORE_FILE)),
        ("truststore", tls.path(CA_FILE)),
        ("require_client_auth", Value::Bool(false)),
    ]);
    let mut out = Mapping::new();
    out.insert("server_encryption_options".into(), Value::Mapping(server));
    out.insert("client_encryption_options".into(), Value::Mapping(client));
    out
}

/// scylla.yaml's encryption settings: ScyllaDB reads the key and the
/// certificate from their own files, and the trusted CAs from a third.
pub fn scylla_options(tls: &TlsSettings) -> Mapping {
    let internode = tls.internode != InternodeEncryption::None;
    let server = mapping(vec![
        (
            "internode_encryption",
            Value::String(tls.internode.as_str().to_string()),
        ),
        ("certificate", tls.path(CERT_FILE)),
        ("keyfile", tls.path(KEY_FILE)),
        ("truststore", tls.path(CA_FILE)),
        ("require_client_auth", Value::Bool(internode)),
    ]);
    let client = mapping(vec![
        ("enabled", Value::Bool(tls.client != ClientEncryption::None)),
        ("certificate", tls.path(CERT_FILE)),
        ("keyfile", tls.path(KEY_FILE)),
        ("truststore", tls.path(CA_FILE)),
        ("require_client_auth", Value::Bool(false)),
    ]);
    let mut out = Mapping::new();
    out.insert("server_encryption_options".into(), Value::Mapping(server));
    out.insert("client_encryption_options".into(), Value::Mapping(client));
    out
}
