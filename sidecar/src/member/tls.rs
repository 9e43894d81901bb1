//! The member's certificate (`spec.security.tls`; the flow is
//! [`crds::contract::tls`]'s): the sidecar makes the member's private key
//! in memory, asks the cluster's authority (the controller) for a
//! certificate through a CertificateSigningRequest made with the member's
//! own token, and keeps key, chain and the CA bundle in the Pod's
//! memory-backed TLS volume, before the database starts and again before a
//! third of the certificate's lifetime is left; the database then reads
//! the files again without a restart. The key never leaves the Pod. I/O
//! ([`request_pem`], [`validity`] and [`key_digest`] are pure).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crds::contract::tls::{
    CA_BUNDLE_KEY, CA_FILE, CERT_FILE, CSR_CLUSTER_LABEL, KEY_FILE, KEYSTORE_FILE, SIGNER_NAME,
    ca_config_map_name, csr_name, renewal_due,
};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use rcgen::{CertificateParams, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
use thiserror::Error;
use tracing::{info, warn};

use crate::node::Node;

/// Getting the member's certificate failed.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("making the member's key or request: {0}")]
    Key(#[from] rcgen::Error),
    #[error("{action} the certificate signing request {name}: {source}")]
    Api {
        action: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("the certificate signing request {name} was {verdict}: {message}")]
    Refused {
        name: String,
        verdict: &'static str,
        message: String,
    },
    #[error("reading the CA bundle (ConfigMap {name}): {source}")]
    CaBundle { name: String, source: kube::Error },
    #[error("the issued certificate cannot be read: {0}")]
    Certificate(String),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Who asks, and where the files go.
#[derive(Clone)]
pub struct Links {
    pub requests: Api<CertificateSigningRequest>,
    pub config_maps: Api<ConfigMap>,
    pub pod: String,
    pub namespace: String,
    pub cluster: String,
    pub dir: PathBuf,
}

impl Links {
    /// The member's links, through its own token.
    pub fn new(client: &Client, namespace: &str, pod: &str, cluster: &str, dir: &Path) -> Self {
        Links {
            requests: Api::all(client.clone()),
            config_maps: Api::namespaced(client.clone(), namespace),
            pod: pod.to_string(),
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            dir: dir.to_path_buf(),
        }
    }
}

/// The validity of the certificate in the files, seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// A PKCS#10 request for the key, naming the member (the controller
/// chooses the certificate's names itself; these are for whoever reads
/// the request). Pure.
pub fn request_pem(key: &KeyPair, pod: &str, namespace: &str) -> Result<String, rcgen::Error> {
    let mut params =
        CertificateParams::new(vec![pod.to_string(), format!("{pod}.{namespace}.svc")])?;
    params.distinguished_name.push(DnType::CommonName, pod);
    params.serialize_request(key)?.pem()
}

/// A short digest of the public key (FNV-1a, 32 bits, hex): each new key
/// gets its own request name. Not a security measure: the API server
/// records who made each request. Pure.
pub fn key_digest(key: &KeyPair) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in key.public_key_raw() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

/// The validity of the first certificate of a PEM chain. Pure.
pub fn validity(chain_pem: &[u8]) -> Result<Validity, String> {
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(chain_pem).map_err(|e| format!("not PEM: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    Ok(Validity {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Makes a new key, gets it a certificate, and writes key, chain and CA
/// bundle into the TLS directory. Waits for as long as the controller
/// takes to sign (the Pod stays not ready meanwhile); a request the
/// controller denied is an error naming its reason.
pub async fn obtain(links: &Links) -> Result<Validity, TlsError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let request = request_pem(&key, &links.pod, &links.namespace)?;
    let name = csr_name(&links.namespace, &links.pod, &key_digest(&key));
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(CSR_CLUSTER_LABEL.to_string(), links.cluster.clone())].into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: SIGNER_NAME.to_string(),
            usages: Some(
                [
                    "digital signature",
                    "key encipherment",
                    "server auth",
                    "client auth",
                ]
                .map(String::from)
                .to_vec(),
            ),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    links
        .requests
        .create(&PostParams::default(), &csr)
        .await
        .map_err(|source| TlsError::Api {
            action: "creating",
            name: name.clone(),
            source,
        })?;
    info!(request = %name, "asked the cluster's authority for a certificate");
    let chain = issued_certificate(&links.requests, &name).await?;
    let validity = validity(&chain).map_err(TlsError::Certificate)?;
    let bundle = ca_bundle(&links.config_maps, &links.cluster).await?;

    let key_pem = key.serialize_pem();
    let mut keystore = key_pem.clone().into_bytes();
    keystore.extend_from_slice(&chain);
    write_atomically(&links.dir.join(CA_FILE), bundle.as_bytes(), 0o644)?;
    write_atomically(&links.dir.join(KEY_FILE), key_pem.as_bytes(), 0o600)?;
    write_atomically(&links.dir.join(CERT_FILE), &chain, 0o644)?;
    write_atomically(&links.dir.join(KEYSTORE_FILE), &keystore, 0o600)?;
    info!(
        request = %name, not_after = validity.not_after,
        "member certificate written"
    );
    Ok(validity)
}

/// Waits until the request is signed (its certificate), or denied or
/// failed (an error).
async fn issued_certificate(
    requests: &Api<CertificateSigningRequest>,
    name: &str,
) -> Result<Vec<u8>, TlsError> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(requests.clone(), config));
    while let Some(event) = events.next().await {
        let csr = match event {
            Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr)) => csr,
            Ok(_) => continue,
            Err(e) => {
                // the watcher retries by itself; say why it waits
                warn!(request = %name, error = %e, "watching the certificate signing request");
                continue;
            }
        };
        let status = csr.status.unwrap_or_default();
        for condition in status.conditions.iter().flatten() {
            let verdict = match condition.type_.as_str() {
                "Denied" => "denied",
                "Failed" => "failed",
                _ => continue,
            };
            if condition.status == "True" {
                return Err(TlsError::Refused {
                    name: name.to_string(),
                    verdict,
                    message: format!(
                        "{}: {}",
                        condition.reason.as_deref().unwrap_or("no reason"),
                        condition.message.as_deref().unwrap_or("")
                    ),
                });
            }
        }
        if let Some(certificate) = status.certificate.filter(|c| !c.0.is_empty()) {
            return Ok(certificate.0);
        }
    }
    Err(TlsError::Certificate(format!("the watch of {name} ended")))
}

/// The CA bundle the cluster's members trust, waiting for the ConfigMap
/// the controller publishes.
async fn ca_bundle(config_maps: &Api<ConfigMap>, cluster: &str) -> Result<String, TlsError> {
    let name = ca_config_map_name(cluster);
    loop {
        match config_maps.get_opt(&name).await {
            Ok(Some(cm)) => {
                if let Some(bundle) = cm.data.and_then(|mut d| d.remove(CA_BUNDLE_KEY))
                    && !bundle.trim().is_empty()
                {
                    return Ok(bundle);
                }
            }
            Ok(None) => {}
            Err(source) if !transient(&source) => {
                return Err(TlsError::CaBundle { name, source });
            }
            Err(e) => warn!(config_map = %name, error = %e, "reading the CA bundle"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn transient(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(s) if s.code == 403 || s.code == 401)
}

/// Writes a file through a temporary name and a rename, so that the
/// database never reads half of it.
fn write_atomically(path: &Path, content: &[u8], mode: u32) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).map_err(err)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Obtains the first certificate, retrying after failures (a denied
/// request too: the controller may not know the member yet), until it is
/// written.
pub async fn obtain_until_written(links: &Links) -> Validity {
    let mut delay = Duration::from_secs(1);
    loop {
        match obtain(links).await {
            Ok(validity) => return validity,
            Err(e) => {
                warn!(error = %e, retry_in = ?delay, "getting the member's certificate");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Keeps the files current while the member runs: a new key and
/// certificate when a third of the lifetime is left, the CA bundle when
/// the controller changes it; the database reads them again each time.
pub async fn keep_current(links: Links, node: Node, mut validity: Validity) {
    let bundle_name = ca_config_map_name(&links.cluster);
    let config = watcher::Config::default().fields(&format!("metadata.name={bundle_name}"));
    let mut bundles = std::pin::pin!(watcher::watcher(links.config_maps.clone(), config));
    loop {
        let wait = renewal_wait(validity, now());
        tokio::select! {
            () = tokio::time::sleep(wait) => {
                validity = obtain_until_written(&links).await;
                reload(&node).await;
            }
            Some(event) = bundles.next() => {
                let Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = event else {
                    continue;
                };
                let Some(bundle) = cm.data.and_then(|mut d| d.remove(CA_BUNDLE_KEY)) else {
                    continue;
                };
                let path = links.dir.join(CA_FILE);
                if std::fs::read_to_string(&path).ok().as_deref() == Some(bundle.as_str()) {
                    continue;
                }
                match write_atomically(&path, bundle.as_bytes(), 0o644) {
                    Ok(()) => {
                        info!("the cluster's CA bundle changed");
                        reload(&node).await;
                    }
                    Err(e) => warn!(error = %e, "writing the CA bundle"),
                }
            }
        }
    }
}

/// How long until the certificate is due for renewal. Pure.
pub fn renewal_wait(validity: Validity, now: i64) -> Duration {
    if renewal_due(validity.not_before, validity.not_after, now) {
        return Duration::ZERO;
    }
    let lifetime = (validity.not_after - validity.not_before).max(0);
    let due_at = validity.not_after - lifetime / 3;
    Duration::from_secs(u64::try_from(due_at - now).unwrap_or(0))
}

/// Has the database read its key, chain and CA bundle again. Cassandra:
/// `reloadSslCertificates` (it would also find the change by itself, at
/// its next check of the files, within minutes); ScyllaDB watches its
/// files itself.
async fn reload(node: &Node) {
    if let Node::Cassandra(storage) = node {
        match storage.reload_ssl_certificates().await {
            Ok(()) => info!("the database reloaded its certificates"),
            Err(e) => warn!(error = %e, "asking the database to reload its certificates"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_member_and_carries_its_key() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = request_pem(&key, "c-dc-r-0", "db").unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        use rcgen::PublicKeyData;
        assert_eq!(parsed.public_key.der_bytes(), key.der_bytes());
        let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        assert_ne!(key_digest(&key), key_digest(&other));
        assert_eq!(key_digest(&key).len(), 8);
    }

    #[test]
    fn renewal_waits_for_two_thirds_of_the_lifetime() {
        let v = Validity {
            not_before: 1_000,
            not_after: 1_300,
        };
        assert_eq!(renewal_wait(v, 1_000), Duration::from_secs(200));
        assert_eq!(renewal_wait(v, 1_150), Duration::from_secs(50));
        assert_eq!(renewal_wait(v, 1_200), Duration::ZERO);
        assert_eq!(renewal_wait(v, 5_000), Duration::ZERO);
    }

    #[test]
    fn the_validity_of_a_chain_is_its_first_certificates() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["a".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 2);
        let leaf = params.self_signed(&key).unwrap().pem();
        let mut other = CertificateParams::new(vec!["b".to_string()]).unwrap();
        other.not_before = rcgen::date_time_ymd(2020, 1, 1);
        let ca = other.self_signed(&key).unwrap().pem();
        let v = validity(format!("{leaf}{ca}").as_bytes()).unwrap();
        assert_eq!(v.not_after - v.not_before, 86_400);
        assert!(validity(b"nothing").is_err());
    }
}
