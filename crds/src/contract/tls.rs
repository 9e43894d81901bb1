//! TLS between members and for clients (`spec.security.tls`): what the
//! controller, as the certificate authority of each cluster, and the
//! sidecar, as the holder of its member's private key, agree on. Pure.
//!
//! The flow, through Kubernetes objects only (the design's records of
//! intent):
//!
//! 1. The controller makes a certificate authority per cluster (an ECDSA
//!    P-256 key and a self-signed certificate) and keeps it in a Secret of
//!    its own namespace ([`ca_secret_name`]): no user of the Cluster's
//!    namespace, and no member, can read it. It publishes the CA's
//!    certificate in the ConfigMap [`ca_config_map_name`] of the Cluster's
//!    namespace (key [`CA_BUNDLE_KEY`]), for members and clients.
//! 2. The sidecar makes its member's private key in memory, writes it to
//!    the Pod's memory-backed TLS volume ([`TLS_DIR`]) only, and asks for a
//!    certificate with a CertificateSigningRequest of signer
//!    [`SIGNER_NAME`] ([`csr_name`], labelled with [`CSR_CLUSTER_LABEL`]).
//! 3. The controller approves and signs a request only when the API
//!    server's record of who made it (`spec.username`, and the Pod its
//!    token is bound to in `spec.extra`) is the member ServiceAccount of a
//!    Cluster with TLS and a member Pod of it; the certificate's names are
//!    the controller's own ([`member_dns_names`] and the member Service's
//!    ClusterIP), whatever the request asked for. Any other request under
//!    our signer is denied, with the reason in its condition.
//! 4. The sidecar writes the chain and the CA bundle next to the key, then
//!    starts the database; before a third of the certificate's lifetime is
//!    left it makes a new key and request, and the database reloads the
//!    files without a restart.

/// The signer of member certificates: the controller approves and signs
/// only requests for it, and only the controller may (`approve` and `sign`
/// on `signers` with this name).
pub const SIGNER_NAME: &str = "cassandra.rook.io/member";

/// The key of the CA bundle in the CA ConfigMap (PEM certificates: the CA
/// members trust, two of them while a CA is being replaced).
pub const CA_BUNDLE_KEY: &str = "ca.crt";

/// The ConfigMap of a cluster's CA certificates, in the Cluster's
/// namespace: `<cluster>-ca`.
pub fn ca_config_map_name(cluster: &str) -> String {
    format!("{cluster}-ca")
}

/// The Secret holding a cluster's CA key and certificate, in the
/// operator's namespace, named by the Cluster's UID (namespaces and names
/// joined with a separator could collide): `cassandra-ca-<uid>`.
pub fn ca_secret_name(cluster_uid: &str) -> String {
    format!("cassandra-ca-{cluster_uid}")
}

/// Label on the CA Secret: the Cluster's namespace (with
/// [`crate::labels::CLUSTER`] for its name), so that the controller finds the
/// Secrets of deleted Clusters.
pub const CA_NAMESPACE_LABEL: &str = "cassandra.rook.io/namespace";

/// The ClusterRole (installed with the operator) that lets a member's
/// sidecar create CertificateSigningRequests and read its own.
pub const MEMBER_CSR_CLUSTER_ROLE: &str = "cassandra-operator-member-certificates";

/// The ClusterRoleBinding the controller makes per Cluster with TLS,
/// binding [`MEMBER_CSR_CLUSTER_ROLE`] to the members' ServiceAccount:
/// `cassandra-member-<uid>`.
pub fn member_csr_binding_name(cluster_uid: &str) -> String {
    format!("cassandra-member-{cluster_uid}")
}

/// Label on a member's CertificateSigningRequest: the Cluster's name (to
/// narrow the controller's watch; the controller trusts only what the API
/// server records about the requester, never this label).
pub const CSR_CLUSTER_LABEL: &str = "cassandra.rook.io/cluster";

/// A member's CertificateSigningRequest:
/// `cassandra.<namespace>.<pod>.<key>` where `key` is a short digest of
/// the public key, so that each new key gets a new request. Namespaces and
/// Pod names are DNS labels: the name is a DNS subdomain.
pub fn csr_name(namespace: &str, pod: &str, key_digest: &str) -> String {
    format!("cassandra.{namespace}.{pod}.{key_digest}")
}

/// The DNS names of a member's certificate: its member Service's names and
/// its Pod's name under the StatefulSet's governing Service.
pub fn member_dns_names(
    pod: &str,
    namespace: &str,
    governing_service: &str,
    cluster_domain: &str,
) -> Vec<String> {
    vec![
        pod.to_string(),
        format!("{pod}.{namespace}"),
        format!("{pod}.{namespace}.svc"),
        format!("{pod}.{namespace}.svc.{cluster_domain}"),
        format!("{pod}.{governing_service}.{namespace}.svc.{cluster_domain}"),
    ]
}

/// The memory-backed volume of the database container where the sidecar
/// keeps the member's key, certificate chain and CA bundle.
pub const TLS_DIR: &str = "/mnt/tls";
/// The member's private key (PKCS#8 PEM), readable by the database user
/// only.
pub const KEY_FILE: &str = "member.key";
/// The member's certificate chain (PEM: its certificate, then the CA's).
pub const CERT_FILE: &str = "member.crt";
/// The CA certificates the member trusts (PEM), for peers and clients.
pub const CA_FILE: &str = "ca.crt";
/// The key and the chain in one PEM file, as Cassandra's
/// `PEMBasedSslContextFactory` reads a keystore (ScyllaDB reads
/// [`KEY_FILE`] and [`CERT_FILE`]). Replaced in one rename, so that a
/// reload never sees a key with another key's certificate.
pub const KEYSTORE_FILE: &str = "member.pem";

/// How long a member certificate lives unless the controller is told
/// otherwise (`--member-certificate-lifetime`).
pub const DEFAULT_MEMBER_CERTIFICATE_LIFETIME_SECS: u64 = 30 * 24 * 3600;
/// How long a cluster's CA lives.
pub const CA_LIFETIME_SECS: u64 = 10 * 365 * 24 * 3600;

/// Whether a certificate valid from `not_before` to `not_after` (seconds)
/// is due for renewal at `now`: when at most a third of its lifetime is
/// left.
pub fn renewal_due(not_before: i64, not_after: i64, now: i64) -> bool {
    let lifetime = (not_after - not_before).max(0);
    not_after - now <= lifetime / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_with_a_third_of_the_lifetime_left() {
        // 90 s of life: due from 60 s on
        assert!(!renewal_due(1_000, 1_090, 1_000));
        assert!(!renewal_due(1_000, 1_090, 1_059));
        assert!(renewal_due(1_000, 1_090, 1_060));
        assert!(renewal_due(1_000, 1_090, 2_000));
    }

    #[test]
    fn names_are_dns_subdomains() {
        let name = csr_name("db", "cassandra-dc-r-0", "0a1b2c3d");
        assert!(crate::validate::is_dns1123_subdomain(&name), "{name}");
        for dns in member_dns_names("c-dc-r-0", "db", "c-client", "cluster.local") {
            assert!(crate::validate::is_dns1123_subdomain(&dns), "{dns}");
        }
        assert_eq!(ca_config_map_name("c"), "c-ca");
    }
}
