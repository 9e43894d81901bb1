//! The TLS front of a fake database node (the fake Cassandra's storage and
//! native ports, the fake ScyllaDB's SSL storage and CQL ports): the TLS
//! handshake with the key material the node holds at that moment, and
//! nothing after it (the fakes speak neither the messaging protocol nor
//! CQL). So a test asks a node which certificate it serves as one asks a
//! real node, with a handshake ([`served_certificate`], what
//! `openssl s_client` shows), and sees a handshake refused where a real
//! node refuses it: no client certificate, or one of another authority,
//! where the node requires one; a key that does not match its certificate
//! (Cassandra takes such a pair at start, and Netty's OpenSSL engine
//! fails each handshake when it sets them on the connection: here the
//! node finds no certificate to present); a client certificate that does
//! not name the connection's source address under Cassandra's
//! `require_endpoint_verification`. I/O (rustls on ring, the provider the
//! test world already uses).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::DistinguishedName;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// A private key's DER in its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDer {
    Pkcs8(Vec<u8>),
    /// `RSA PRIVATE KEY`.
    Pkcs1(Vec<u8>),
    /// `EC PRIVATE KEY`.
    Sec1(Vec<u8>),
}

impl KeyDer {
    fn rustls(&self) -> PrivateKeyDer<'static> {
        match self {
            KeyDer::Pkcs8(d) => PrivateKeyDer::Pkcs8(d.clone().into()),
            KeyDer::Pkcs1(d) => PrivateKeyDer::Pkcs1(d.clone().into()),
            KeyDer::Sec1(d) => PrivateKeyDer::Sec1(d.clone().into()),
        }
    }
}

/// What a node serves on one port at one moment: its certificate chain and
/// private key (none when it holds a key the fake cannot sign with, and
/// every handshake fails), and how it checks clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    pub chain: Vec<Vec<u8>>,
    pub key: Option<KeyDer>,
    /// Whether a client must present a certificate of [`Served::trust`].
    pub require_client_auth: bool,
    /// The trusted certificates (DER).
    pub trust: Vec<Vec<u8>>,
    /// Cassandra's `require_endpoint_verification` on an inbound internode
    /// connection: the client's certificate must name the connection's
    /// source address (an IP address in its subject alternative names),
    /// as `InboundConnectionInitiator` checks it (facts a5).
    pub endpoint_verification: bool,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate and the key as the node holds them; none when the key
/// is not the certificate's, or cannot sign.
#[derive(Debug)]
struct Holding(Option<Arc<CertifiedKey>>);

impl ResolvesServerCert for Holding {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.clone()
    }
}

fn holding(served: &Served, provider: &CryptoProvider) -> Holding {
    let key = served
        .key
        .as_ref()
        .and_then(|der| provider.key_provider.load_private_key(der.rustls()).ok());
    Holding(
        key.filter(|_| !served.chain.is_empty())
            .map(|key| {
                let chain = served
                    .chain
                    .iter()
                    .map(|c| CertificateDer::from(c.clone()))
                    .collect();
                Arc::new(CertifiedKey::new(chain, key))
            })
            .filter(|pair| pair.keys_match().is_ok()),
    )
}

/// The node's check of a client certificate: chained to its trusted
/// certificates (none trusted: every client refused), and, under endpoint
/// verification, naming the peer's address.
#[derive(Debug)]
struct MemberClients {
    trusted: Option<Arc<dyn ClientCertVerifier>>,
    peer: Option<IpAddr>,
    provider: Arc<CryptoProvider>,
}

/// Java's `HostnameChecker.matchIP`: an IP address is matched only by the
/// IP address entries of the subject alternative names.
pub fn names_ip(cert_der: &[u8], ip: IpAddr) -> Result<(), String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| format!("the certificate cannot be read: {e}"))?;
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Err("No subject alternative names present".into());
    };
    let wanted = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    if san
        .value
        .general_names
        .iter()
        .any(|n| matches!(n, GeneralName::IPAddress(bytes) if *bytes == wanted.as_slice()))
    {
        Ok(())
    } else {
        Err(format!(
            "No subject alternative names matching IP address {ip} found"
        ))
    }
}

impl ClientCertVerifier for MemberClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        match &self.trusted {
            Some(v) => v.root_hint_subjects(),
            None => &[],
        }
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let Some(trusted) = &self.trusted else {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ));
        };
        let verified = trusted.verify_client_cert(end_entity, intermediates, now)?;
        if let Some(peer) = self.peer {
            names_ip(end_entity, peer).map_err(rustls::Error::General)?;
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The server side of one handshake with a client at `peer`.
pub fn server_config(served: &Served, peer: IpAddr) -> Result<rustls::ServerConfig, String> {
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if served.require_client_auth {
        let mut roots = rustls::RootCertStore::empty();
        for der in &served.trust {
            // A certificate webpki cannot use as an anchor is left out, as
            // one that cannot verify anything.
            let _ = roots.add(CertificateDer::from(der.clone()));
        }
        let trusted = if roots.is_empty() {
            None
        } else {
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .ok()
        };
        builder.with_client_cert_verifier(Arc::new(MemberClients {
            trusted,
            peer: served.endpoint_verification.then_some(peer),
            provider: provider.clone(),
        }))
    } else {
        builder.with_no_client_auth()
    };
    Ok(builder.with_cert_resolver(Arc::new(holding(served, &provider))))
}

/// Serves TLS handshakes on `listener` with what `current` gives at each
/// connection (None: the port refuses, as a node whose context cannot be
/// built); `refused` hears of each failed handshake. The connection stays
/// open until the client closes it.
pub async fn serve(
    listener: TcpListener,
    current: Arc<dyn Fn() -> Option<Served> + Send + Sync>,
    refused: Arc<dyn Fn(SocketAddr, String) + Send + Sync>,
) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let (current, refused) = (current.clone(), refused.clone());
        tokio::spawn(async move {
            let Some(served) = current() else {
                return;
            };
            let config = match server_config(&served, peer.ip()) {
                Ok(c) => c,
                Err(e) => return refused(peer, e),
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(mut tls)) => {
                    let mut sink = [0u8; 1024];
                    while matches!(tls.read(&mut sink).await, Ok(n) if n > 0) {}
                }
                Ok(Err(e)) => refused(peer, e.to_string()),
                Err(_) => refused(peer, "the handshake timed out".into()),
            }
        });
    }
}

/// Binds `address` for [`serve`]; the error in words.
pub async fn bind(address: &str) -> Result<TcpListener, String> {
    TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot bind {address}: {e}"))
}

/// A certificate as a node served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCertificate {
    /// The chain, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The leaf's serial number, lowercase hex without leading zeros.
    pub serial: String,
    /// SHA-256 of the leaf's DER, lowercase hex.
    pub fingerprint: String,
}

/// SHA-256 of `der`, lowercase hex.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The serial number of a certificate, lowercase hex without leading
/// zeros (`0` for zero); None when it cannot be read.
pub fn serial_of(cert_der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    let hex: String = cert
        .raw_serial()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let trimmed = hex.trim_start_matches('0');
    Some(if trimmed.is_empty() { "0" } else { trimmed }.to_string())
}

async fn connect(address: SocketAddr, from: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect(address).await;
    };
    let socket = match address {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(address).await
}

/// Accepts whatever chain the node presents (the caller judges it) but
/// checks that the node proves it holds the leaf's key.
#[derive(Debug)]
struct Recording {
    provider: Arc<CryptoProvider>,
    seen: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        *seen = std::iter::once(end_entity)
            .chain(intermediates)
            .map(|c| c.as_ref().to_vec())
            .collect();
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The certificate the node at `address` serves, by a TLS handshake from
/// `from` (a local address; the system's choice when None), the client
/// presenting `client` (a chain and its PKCS#8 key) when given. The chain
/// is not judged (compare it with what you expect); the node must prove it
/// holds the key of its leaf. The error is the handshake's.
pub async fn served_certificate(
    address: SocketAddr,
    client: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    from: Option<IpAddr>,
) -> Result<ServedCertificate, String> {
    let provider = provider();
    let recording = Arc::new(Recording {
        provider: provider.clone(),
        seen: Default::default(),
    });
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(recording.clone());
    let config = match client {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                chain.into_iter().map(CertificateDer::from).collect(),
                PrivateKeyDer::Pkcs8(key.into()),
            )
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = connect(address, from)
        .await
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    let mut tls = tokio::time::timeout(
        Duration::from_secs(10),
        connector.connect(ServerName::IpAddress(address.ip().into()), stream),
    )
    .await
    .map_err(|_| format!("the handshake with {address} timed out"))?
    .map_err(|e| e.to_string())?;
    // TLS 1.3: the server judges the client's certificate after the
    // client's Finished; its refusal arrives as an alert on the first read.
    let mut byte = [0u8; 1];
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_millis(300), tls.read(&mut byte)).await
    {
        return Err(e.to_string());
    }
    let chain = recording
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let leaf = chain.first().ok_or("no certificate served")?;
    Ok(ServedCertificate {
        serial: serial_of(leaf).unwrap_or_default(),
        fingerprint: fingerprint(leaf),
        chain,
    })
}
