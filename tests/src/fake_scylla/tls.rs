//! The fake ScyllaDB's encryption (issue 32), as `scylla` builds its TLS
//! credentials (facts e; source: db/config.cc
//! `utils::configure_tls_creds_builder`, seastar's `tls.cc`
//! `read_fully`/`set_x509_key_file`/`set_x509_trust_file` over GnuTLS,
//! main.cc, `messaging_service::start`).
//!
//! - `server_encryption_options` and `client_encryption_options` are
//!   string maps; `certificate` and `keyfile` default to `scylla.crt` and
//!   `scylla.key` in the configuration directory, `truststore` to none (the
//!   system's trust), `require_client_auth` to false.
//! - The credentials are read certificate file first ("Could not read
//!   certificate file X", nested over the `std::system_error` of the
//!   open), then the key file ("Could not read key file X"), then GnuTLS
//!   reads the key (PKCS#8, PKCS#1 or SEC1 PEM), the certificates and
//!   checks that the key is the certificate's ("The certificate and the
//!   given key do not match.", GnuTLS -60), then the trust file ("Could not
//!   read trust file X"; one without certificates loads nothing and is no
//!   error: GnuTLS's `set_x509_trust_mem` answers 0 for it, and every
//!   client certificate is then refused).
//! - Internode (`internode_encryption` not `none`): at "starting messaging
//!   service", before the node joins; TLS on `ssl_storage_port` (7001).
//!   Clients (`enabled`): when the native transport starts, after the node
//!   joined; TLS on `native_transport_port_ssl` when set apart, else on
//!   `native_transport_port`. A failure is "Startup failed: ..." (exit 1).
//! - ScyllaDB watches its files (seastar's reloadable credentials, with
//!   inotify): [`Watched`] looks at their modification times and rebuilds
//!   the credentials when one changed ("Reloaded {files}"; a failure is
//!   "Exception loading {files}: ..." and the old credentials stay).
//!
//! Not modelled: `priority_string`, `certficate_revocation_list`, session
//! tickets, encrypted keys (refused as GnuTLS refuses a key it cannot
//! read without its password), the system trust. Pure reading of file
//! contents; [`Watched`] does the I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine;
use serde_json::Value;

use crate::fake_cassandra::tls_wire::{KeyDer, Served};

/// A side's options as ScyllaDB holds them (`db::config::string_map`).
pub type Options = BTreeMap<String, String>;

fn string_map(doc: &Value, key: &str) -> Options {
    doc.get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `utils::is_true`.
pub fn is_true(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "true" | "1")
}

/// Both sides, where the node listens, and the configuration directory
/// (`db::config::get_conf_dir`, for the default file names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub server: Options,
    pub client: Options,
    pub conf_dir: PathBuf,
    pub ssl_storage_port: u16,
    pub native_transport_port: u16,
    pub native_transport_port_ssl: Option<u16>,
}

impl TlsConfig {
    /// From the parsed scylla.yaml; `port` reads a port option (the
    /// command line's, else the yaml's).
    pub fn parse(
        doc: &Value,
        conf_dir: &Path,
        port: &dyn Fn(&'static str) -> Result<Option<u16>, super::config::ConfigError>,
    ) -> Result<Self, super::config::ConfigError> {
        Ok(TlsConfig {
            server: string_map(doc, "server_encryption_options"),
            client: string_map(doc, "client_encryption_options"),
            conf_dir: conf_dir.to_path_buf(),
            ssl_storage_port: port("ssl_storage_port")?.unwrap_or(7001),
            native_transport_port: port("native_transport_port")?.unwrap_or(9042),
            native_transport_port_ssl: port("native_transport_port_ssl")?,
        })
    }

    /// `internode_encryption`, `none` when unset.
    pub fn internode(&self) -> &str {
        self.server
            .get("internode_encryption")
            .map_or("none", String::as_str)
    }

    pub fn internode_encrypted(&self) -> bool {
        self.internode() != "none"
    }

    pub fn client_encrypted(&self) -> bool {
        self.client.get("enabled").is_some_and(|v| is_true(v))
    }

    /// The client TLS port: `native_transport_port_ssl` when set apart.
    pub fn client_port(&self) -> u16 {
        match self.native_transport_port_ssl {
            Some(p) if p != self.native_transport_port => p,
            _ => self.native_transport_port,
        }
    }

    /// main.cc's warning about `require_client_auth` with `dc`/`rack`.
    pub fn warnings(&self) -> Vec<String> {
        let auth = self
            .server
            .get("require_client_auth")
            .is_some_and(|v| is_true(v));
        if auth && matches!(self.internode(), "dc" | "rack") {
            vec!["Setting require_client_auth is incompatible with 'rack' and 'dc' internode_encryption values. To ensure that mutual TLS authentication is enforced, please set internode_encryption to 'all'. Continuing with potentially insecure configuration.".to_string()]
        } else {
            Vec::new()
        }
    }

    /// The files one side reads: certificate, key, trust (if any).
    pub fn files(&self, options: &Options) -> Vec<PathBuf> {
        let (cert, key) = self.key_files(options);
        let mut out = vec![cert, key];
        if let Some(t) = options.get("truststore") {
            out.push(PathBuf::from(t));
        }
        out
    }

    fn key_files(&self, options: &Options) -> (PathBuf, PathBuf) {
        let file = |key: &str, default: &str| {
            options
                .get(key)
                .map_or_else(|| self.conf_dir.join(default), PathBuf::from)
        };
        (
            file("certificate", "scylla.crt"),
            file("keyfile", "scylla.key"),
        )
    }

    /// `configure_tls_creds_builder` over the files as they are now.
    pub fn load(&self, options: &Options) -> Result<Served, String> {
        let (cert, key) = self.key_files(options);
        let cert_text = read_fully(&cert, "certificate file")?;
        let key_text = read_fully(&key, "key file")?;
        let (chain, key) = x509_key(&cert_text, &key_text)?;
        let trust = match options.get("truststore") {
            Some(t) => x509_trust(&read_fully(Path::new(t), "trust file")?)?,
            None => Vec::new(),
        };
        Ok(Served {
            chain,
            key: Some(key),
            require_client_auth: options
                .get("require_client_auth")
                .is_some_and(|v| is_true(v)),
            trust,
            endpoint_verification: false,
        })
    }
}

/// seastar's `read_fully`: the file's bytes, or the nested exception as
/// ScyllaDB prints it.
fn read_fully(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| {
        let code = e.raw_os_error().unwrap_or(nix::libc::EIO);
        format!(
            "std::_Nested_exception<std::runtime_error> (Could not read {what} {}): std::system_error (error system:{code}, {})",
            path.display(),
            nix::errno::Errno::from_raw(code).desc()
        )
    })
}

fn gnutls(code: i32, message: &str) -> String {
    format!("std::system_error (error GnuTLS:{code}, {message})")
}

/// The PEM blocks of `text` (label, DER), as GnuTLS finds them.
fn pem_blocks(text: &[u8]) -> Vec<(String, Result<Vec<u8>, ()>)> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    let mut rest: &str = &text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + 11..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = after[..label_end].to_string();
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_start.find(&end_marker) else {
            break;
        };
        let body: String = body_start[..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(drop);
        out.push((label, der));
        rest = &body_start[end + end_marker.len()..];
    }
    out
}

/// GnuTLS's `gnutls_certificate_set_x509_key_mem2` (PEM): the key, the
/// certificates, their match. The chain and the key.
fn x509_key(cert: &[u8], key: &[u8]) -> Result<(Vec<Vec<u8>>, KeyDer), String> {
    use rustls::pki_types::{
        PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
    };
    let parsed_key = pem_blocks(key).into_iter().find_map(|(label, der)| {
        let der = der.ok()?;
        match label.as_str() {
            "PRIVATE KEY" => Some(KeyDer::Pkcs8(der)),
            "RSA PRIVATE KEY" => Some(KeyDer::Pkcs1(der)),
            "EC PRIVATE KEY" => Some(KeyDer::Sec1(der)),
            _ => None,
        }
    });
    let Some(parsed_key) = parsed_key else {
        return Err(gnutls(-207, "Base64 unexpected header error."));
    };
    let rustls_key = match &parsed_key {
        KeyDer::Pkcs8(d) => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(d.clone())),
        KeyDer::Pkcs1(d) => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(d.clone())),
        KeyDer::Sec1(d) => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(d.clone())),
    };
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(rustls_key)
        .map_err(|_| gnutls(-69, "ASN1 parser: Error in DER parsing."))?;
    let chain: Vec<Vec<u8>> = pem_blocks(cert)
        .into_iter()
        .filter(|(label, _)| label == "CERTIFICATE" || label == "X509 CERTIFICATE")
        .map(|(_, der)| der.map_err(|()| gnutls(-34, "Base64 decoding error.")))
        .collect::<Result<_, _>>()?;
    if chain.is_empty() {
        return Err(gnutls(-34, "Base64 decoding error."));
    }
    let mut spkis = Vec::new();
    for der in &chain {
        let (_, c) = x509_parser::parse_x509_certificate(der)
            .map_err(|_| gnutls(-69, "ASN1 parser: Error in DER parsing."))?;
        spkis.push(c.tbs_certificate.subject_pki.raw.to_vec());
    }
    if let Some(public) = signing.public_key()
        && public.as_ref() != spkis[0].as_slice()
    {
        return Err(gnutls(
            -60,
            "The certificate and the given key do not match.",
        ));
    }
    Ok((chain, parsed_key))
}

/// `gnutls_certificate_set_x509_trust_mem` (PEM): the certificates; none
/// is not an error.
fn x509_trust(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for (label, der) in pem_blocks(text) {
        if label != "CERTIFICATE" && label != "X509 CERTIFICATE" {
            continue;
        }
        let der = der.map_err(|()| gnutls(-34, "Base64 decoding error."))?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|_| gnutls(-69, "ASN1 parser: Error in DER parsing."))?;
        out.push(der);
    }
    Ok(out)
}

/// A file's identity for the watch: modification time, inode, size.
type Stamp = (std::time::SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.ino(), m.len()))
}

/// One side's credentials as the running node holds them, rebuilt when
/// its files change (seastar's `reloadable_credentials`). I/O.
#[derive(Debug)]
pub struct Watched {
    config: TlsConfig,
    server: bool,
    /// The logger that reports reloads (`messaging_service`,
    /// `cql_server_controller`).
    pub logger: &'static str,
    current: Mutex<Served>,
    stamps: Mutex<Vec<(PathBuf, Option<Stamp>)>>,
    reloads: std::sync::atomic::AtomicU64,
}

impl Watched {
    /// The credentials of the internode side (`server`) or the client
    /// side, loaded now.
    pub fn load(config: &TlsConfig, server: bool) -> Result<Watched, String> {
        let options = if server {
            &config.server
        } else {
            &config.client
        };
        let current = config.load(options)?;
        let stamps = config
            .files(options)
            .into_iter()
            .map(|f| {
                let s = stamp(&f);
                (f, s)
            })
            .collect();
        Ok(Watched {
            config: config.clone(),
            server,
            logger: if server {
                "messaging_service"
            } else {
                "cql_server_controller"
            },
            current: Mutex::new(current),
            stamps: Mutex::new(stamps),
            reloads: Default::default(),
        })
    }

    /// What the node serves now.
    pub fn served(&self) -> Served {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many times the credentials were rebuilt.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The files that changed since the last look.
    pub fn changed(&self) -> Vec<PathBuf> {
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (path, seen) in stamps.iter_mut() {
            let now = stamp(path);
            if now != *seen {
                *seen = now;
                out.push(path.clone());
            }
        }
        out
    }

    /// Rebuilds the credentials after `changed` changed: the log line
    /// (level, message).
    pub fn reload(&self, changed: &[PathBuf]) -> (&'static str, String) {
        let files = changed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let options = if self.server {
            &self.config.server
        } else {
            &self.config.client
        };
        match self.config.load(options) {
            Ok(served) => {
                *self.current.lock().unwrap_or_else(|e| e.into_inner()) = served;
                self.reloads
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ("INFO", format!("Reloaded {{{files}}}"))
            }
            Err(e) => ("WARN", format!("Exception loading {{{files}}}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};

    fn leaf(key: &KeyPair) -> String {
        CertificateParams::new(vec!["m".to_string()])
            .unwrap()
            .self_signed(key)
            .unwrap()
            .pem()
    }

    #[test]
    fn gnutls_reads_the_key_then_the_certificates_then_matches_them() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = leaf(&key);
        let (chain, held) =
            x509_key(cert.as_bytes(), key.serialize_pem().as_bytes()).expect("a matching pair");
        assert_eq!(chain.len(), 1);
        assert_eq!(held, KeyDer::Pkcs8(key.serialize_der()));
        assert_eq!(
            x509_key(cert.as_bytes(), other.serialize_pem().as_bytes()).unwrap_err(),
            "std::system_error (error GnuTLS:-60, The certificate and the given key do not match.)"
        );
        assert!(
            x509_key(b"", key.serialize_pem().as_bytes())
                .unwrap_err()
                .contains("GnuTLS:-34")
        );
        assert!(
            x509_key(cert.as_bytes(), b"")
                .unwrap_err()
                .contains("GnuTLS:-207")
        );
        assert_eq!(x509_trust(b"").unwrap(), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn a_missing_file_is_a_nested_exception() {
        let e = read_fully(Path::new("/nonexistent/member.crt"), "certificate file").unwrap_err();
        assert_eq!(
            e,
            "std::_Nested_exception<std::runtime_error> (Could not read certificate file /nonexistent/member.crt): std::system_error (error system:2, No such file or directory)"
        );
    }
}
