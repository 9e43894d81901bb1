//! The cryptography of a cluster's certificate authority: the authority
//! itself (an ECDSA P-256 key and a self-signed certificate), the reading
//! of a member's certificate signing request (its self-signature verified,
//! its key judged), and the member certificate. Pure, but for the random
//! numbers a key and a serial number take (ring's, the crypto the binary
//! already carries for rustls).
//!
//! A member certificate names what the controller knows of the member, never
//! what the request asks for: the request gives only its public key (see
//! `crds::contract::tls`).

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384,
    PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
};
use time::OffsetDateTime;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384};
use x509_parser::prelude::FromDer;

/// The key of the CA's certificate in its Secret (a `kubernetes.io/tls`
/// Secret).
pub const CA_CERT_KEY: &str = "tls.crt";
/// The key of the CA's private key (PKCS#8 PEM) in its Secret.
pub const CA_KEY_KEY: &str = "tls.key";

/// How far back a certificate's validity starts: a member whose clock is
/// behind the controller's must not see a certificate from its future.
pub const CLOCK_SKEW_SECS: i64 = 60;

/// A cluster's certificate authority, as its Secret holds it (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Authority {
    /// The CA's certificate.
    pub cert_pem: String,
    /// The CA's private key, PKCS#8.
    pub key_pem: String,
}

impl std::fmt::Debug for Authority {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// What went wrong making or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("making a key: {0}")]
    MakeKey(#[source] rcgen::Error),
    #[error("making a random serial number: ring's random number generator failed")]
    Random,
    #[error("signing the certificate: {0}")]
    Sign(#[source] rcgen::Error),
    #[error("the CA's private key does not parse: {0}")]
    ReadKey(#[source] rcgen::Error),
    #[error("the CA's certificate does not parse: {0}")]
    ReadCertificate(String),
    #[error("the CA's private key is not the key of its certificate")]
    KeyMismatch,
    #[error("a name is no valid IA5 string: {0}")]
    Name(#[source] rcgen::Error),
}

/// A random positive serial number of 16 bytes (RFC 5280: at most 20).
fn serial() -> Result<SerialNumber, CertificateError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CertificateError::Random)?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

fn time(unix: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The subject of a cluster's CA: it names the cluster, so that a
/// certificate tells whose authority signed it.
pub fn authority_subject(namespace: &str, cluster: &str) -> String {
    format!("cassandra-operator CA of Cluster {namespace}/{cluster}")
}

/// Makes a cluster's certificate authority at `now` (Unix seconds): an
/// ECDSA P-256 key and a self-signed certificate, a CA that signs member
/// certificates only (path length 0), valid for `lifetime_secs`.
pub fn make_authority(
    namespace: &str,
    cluster: &str,
    now: i64,
    lifetime_secs: u64,
) -> Result<Authority, CertificateError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(CertificateError::MakeKey)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "cassandra.rook.io");
    name.push(DnType::CommonName, authority_subject(namespace, cluster));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = time(now - CLOCK_SKEW_SECS);
    params.not_after = time(now.saturating_add(i64::try_from(lifetime_secs).unwrap_or(i64::MAX)));
    params.serial_number = Some(serial()?);
    let cert = params.self_signed(&key).map_err(CertificateError::Sign)?;
    Ok(Authority {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl Authority {
    /// The authority as a signer: its key, and its certificate's subject
    /// and key identifier. Fails when either does not parse or the key is
    /// not the certificate's.
    pub fn issuer(&self) -> Result<Issuer<'static, KeyPair>, CertificateError> {
        let key = KeyPair::from_pem(&self.key_pem).map_err(CertificateError::ReadKey)?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(self.cert_pem.as_bytes())
            .map_err(|e| CertificateError::ReadCertificate(e.to_string()))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| CertificateError::ReadCertificate(e.to_string()))?;
        if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(CertificateError::KeyMismatch);
        }
        Issuer::from_ca_cert_der(&pem.contents.clone().into(), key)
            .map_err(|e| CertificateError::ReadCertificate(e.to_string()))
    }
}

/// The key usages a member's request must ask for, exactly (as the
/// sidecar asks; `certificates.k8s.io/v1` spells them so).
pub const MEMBER_USAGES: [&str; 4] = [
    "digital signature",
    "key encipherment",
    "server auth",
    "client auth",
];

/// A member's request, read and verified: the public key it proves it
/// holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberKey {
    /// The public key (the SubjectPublicKeyInfo's bit string: for ECDSA,
    /// the curve point).
    raw: Vec<u8>,
    algorithm: &'static SignatureAlgorithm,
    /// What it is, for messages: `ECDSA P-256`.
    pub kind: &'static str,
}

impl PublicKeyData for MemberKey {
    fn der_bytes(&self) -> &[u8] {
        &self.raw
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.algorithm
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefused {
    #[error("the request is not one PEM CERTIFICATE REQUEST block: {0}")]
    NotPem(String),
    #[error("the request does not parse as PKCS#10: {0}")]
    NotPkcs10(String),
    #[error("the request's self-signature does not verify: {0}")]
    BadSignature(String),
    #[error("the request's key is {0}; members' keys must be ECDSA on P-256 or P-384")]
    KeyRefused(String),
}

/// Reads a request (`spec.request`: PEM), verifies its self-signature
/// (the requester holds the private key of the public key it names) and
/// judges its key: ECDSA on P-256 or P-384 only (what the sidecar makes,
/// and what Java's TLS of every Cassandra release reads).
pub fn read_request(pem: &[u8]) -> Result<MemberKey, RequestRefused> {
    let (rest, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|e| RequestRefused::NotPem(e.to_string()))?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(RequestRefused::NotPem(format!("a {} block", block.label)));
    }
    if rest.iter().any(|b| !b.is_ascii_whitespace()) {
        return Err(RequestRefused::NotPem(
            "more follows the first block".to_string(),
        ));
    }
    let (trailing, request) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| RequestRefused::NotPkcs10(e.to_string()))?;
    if !trailing.is_empty() {
        return Err(RequestRefused::NotPkcs10(
            "bytes after the request".to_string(),
        ));
    }
    request
        .verify_signature()
        .map_err(|e| RequestRefused::BadSignature(e.to_string()))?;
    let spki = &request.certification_request_info.subject_pki;
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok());
    let (algorithm, kind) = match (&spki.algorithm.algorithm, curve) {
        (alg, Some(curve)) if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY && curve == OID_EC_P256 => {
            (&PKCS_ECDSA_P256_SHA256, "ECDSA P-256")
        }
        (alg, Some(curve)) if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY && curve == OID_NIST_EC_P384 => {
            (&PKCS_ECDSA_P384_SHA384, "ECDSA P-384")
        }
        (alg, curve) => {
            let what = match curve {
                Some(curve) => format!("of algorithm {alg} on curve {curve}"),
                None => format!("of algorithm {alg}"),
            };
            return Err(RequestRefused::KeyRefused(what));
        }
    };
    Ok(MemberKey {
        raw: spki.subject_public_key.data.to_vec(),
        algorithm,
        kind,
    })
}

/// What a member certificate says, all of it the controller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberCertificate {
    /// The subject's common name: the member's Pod.
    pub pod: String,
    /// The DNS names (`crds::contract::tls::member_dns_names`).
    pub dns_names: Vec<String>,
    /// The member Service's ClusterIP: the member's address in the ring.
    pub address: IpAddr,
    /// Valid from (Unix seconds; [`CLOCK_SKEW_SECS`] before now).
    pub not_before: i64,
    /// Valid until (Unix seconds).
    pub not_after: i64,
}

impl MemberCertificate {
    /// A member's certificate issued at `now` (Unix seconds) for
    /// `lifetime_secs`, or for the request's `expirationSeconds` when it
    /// asks for less (as Kubernetes' own signers honour it).
    pub fn new(
        pod: &str,
        dns_names: Vec<String>,
        address: IpAddr,
        now: i64,
        lifetime_secs: u64,
        expiration_seconds: Option<i32>,
    ) -> MemberCertificate {
        let lifetime = i64::try_from(lifetime_secs).unwrap_or(i64::MAX);
        let lifetime = match expiration_seconds.map(i64::from) {
            Some(asked) if asked > 0 => lifetime.min(asked),
            _ => lifetime,
        };
        MemberCertificate {
            pod: pod.to_string(),
            dns_names,
            address,
            not_before: now - CLOCK_SKEW_SECS,
            not_after: now.saturating_add(lifetime),
        }
    }
}

/// Signs a member certificate for `key` with `authority`: the chain the
/// member presents, its certificate then the CA's (PEM).
pub fn issue(
    authority: &Authority,
    key: &MemberKey,
    certificate: &MemberCertificate,
) -> Result<String, CertificateError> {
    let issuer = authority.issuer()?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, certificate.pod.as_str());
    params.distinguished_name = name;
    let mut names = Vec::with_capacity(certificate.dns_names.len() + 1);
    for dns in &certificate.dns_names {
        names.push(SanType::DnsName(
            dns.clone().try_into().map_err(CertificateError::Name)?,
        ));
    }
    names.push(SanType::IpAddress(certificate.address));
    params.subject_alt_names = names;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = time(certificate.not_before);
    params.not_after = time(certificate.not_after);
    params.serial_number = Some(serial()?);
    let leaf = params
        .signed_by(key, &issuer)
        .map_err(CertificateError::Sign)?;
    let mut chain = leaf.pem();
    if !chain.ends_with('\n') {
        chain.push('\n');
    }
    chain.push_str(&authority.cert_pem);
    Ok(chain)
}

#[cfg(test)]
#[path = "certificates_tests.rs"]
mod tests;
