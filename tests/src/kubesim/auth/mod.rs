//! Who may talk to kubesim, and as whom: its own certificate authority and
//! TLS serving certificate (made at start, ECDSA P-256 so that the many
//! kubesims of a test run start fast), the admin credential of the
//! kubeconfig it writes, ServiceAccount tokens ([`tokens`]), authentication
//! of a request with impersonation ([`authn`]), RBAC ([`rbac`]) and the
//! default roles of a fresh cluster ([`defaults`]). Pure but for the
//! key generation (randomness) in [`Authority::new`].

pub mod authn;
pub mod defaults;
pub mod rbac;
pub mod service_accounts;
pub mod tokens;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::net::IpAddr;
use std::sync::Arc;

/// What can go wrong while kubesim makes its credentials.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("generating a key: {0}")]
    GenerateKey(String),
    #[error("signing the {what} certificate: {source}")]
    SignCertificate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("building the TLS server configuration: {0}")]
    ServerConfig(#[source] rustls::Error),
}

/// The names every API server certificate carries besides its addresses
/// (the `kubernetes` Service's DNS names).
const SERVICE_NAMES: [&str; 5] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// kubesim's credentials: the CA clients trust, the TLS configuration it
/// serves with, the admin token and the ServiceAccount token signer.
pub struct Authority {
    ca_pem: String,
    tls: Arc<rustls::ServerConfig>,
    admin_token: String,
    signer: tokens::Signer,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    /// A new CA and a serving certificate for 127.0.0.1, the `kubernetes`
    /// Service's names and `addresses` (where Pods reach kubesim).
    pub fn new(addresses: &[IpAddr]) -> Result<Authority, AuthorityError> {
        let ca_key = KeyPair::generate().map_err(|e| AuthorityError::GenerateKey(e.to_string()))?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name = rcgen::DistinguishedName::new();
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_before = rcgen::date_time_ymd(2020, 1, 1);
        ca.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let ca_cert = ca
            .self_signed(&ca_key)
            .map_err(|source| AuthorityError::SignCertificate { what: "CA", source })?;
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate().map_err(|e| AuthorityError::GenerateKey(e.to_string()))?;
        let mut sans: Vec<String> = vec!["127.0.0.1".into()];
        sans.extend(addresses.iter().map(IpAddr::to_string));
        sans.extend(SERVICE_NAMES.iter().map(|s| s.to_string()));
        let mut serving =
            CertificateParams::new(sans).map_err(|source| AuthorityError::SignCertificate {
                what: "serving",
                source,
            })?;
        serving.distinguished_name = rcgen::DistinguishedName::new();
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.not_before = rcgen::date_time_ymd(2020, 1, 1);
        serving.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert =
            serving
                .signed_by(&key, &issuer)
                .map_err(|source| AuthorityError::SignCertificate {
                    what: "serving",
                    source,
                })?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(AuthorityError::ServerConfig)?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(AuthorityError::ServerConfig)?;
        // kubesim serves HTTP/1.1 only: offering h2 would make Go clients
        // speak it.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];

        Ok(Authority {
            ca_pem: ca_cert.pem(),
            tls: Arc::new(tls),
            admin_token: format!("kubesim-admin-{:016x}", super::random_u64()),
            signer: tokens::Signer::new().map_err(AuthorityError::GenerateKey)?,
        })
    }

    /// The CA certificate (PEM): a client's `certificate-authority-data`,
    /// a Pod's `ca.crt`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate as a kubeconfig carries it (base64 of the PEM).
    pub fn ca_data(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The TLS configuration kubesim serves with.
    pub fn tls(&self) -> Arc<rustls::ServerConfig> {
        self.tls.clone()
    }

    /// The bearer token of the cluster admin (group `system:masters`), as
    /// an admin kubeconfig carries it.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The ServiceAccount token signer.
    pub fn signer(&self) -> &tokens::Signer {
        &self.signer
    }
}
