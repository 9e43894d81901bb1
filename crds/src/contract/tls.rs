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

use crate::v1alpha1::{ClientEncryption, InternodeEncryption, TlsSpec};

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

/// The sidecar container's environment variable that says which
/// encryption its member runs with ([`Encryption::to_env`]): set by the
/// controller in the Pod template of every cluster with TLS, so that a
/// change of it is a template change, and so a roll, one member at a time.
pub const ENCRYPTION_ENV: &str = "TLS_ENCRYPTION";

/// The encryption a member runs with: the spec's, or a step of a move of a
/// running cluster from clear text to TLS ([`next_encryption`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encryption {
    /// Which connections to other members it opens with TLS.
    pub internode: InternodeEncryption,
    /// Whether it also accepts the other kind of connection from members
    /// (TLS besides clear text, or clear text besides TLS): Cassandra's
    /// `server_encryption_options.optional`, the transitional mode.
    pub internode_optional: bool,
    /// Client connections.
    pub client: ClientEncryption,
}

impl Encryption {
    /// What the spec asks for, once every member runs it; `None` without TLS.
    pub fn of(tls: &TlsSpec) -> Option<Encryption> {
        tls.enabled().then_some(Encryption {
            internode: tls.internode,
            internode_optional: false,
            client: tls.client,
        })
    }

    /// The value of [`ENCRYPTION_ENV`]:
    /// `internode=<all|dc|rack|none>[+optional],client=<required|optional|none>`.
    pub fn to_env(&self) -> String {
        format!(
            "internode={}{},client={}",
            self.internode.as_str(),
            if self.internode_optional {
                "+optional"
            } else {
                ""
            },
            self.client.as_str()
        )
    }

    /// Reads [`Encryption::to_env`]'s form back.
    pub fn parse(value: &str) -> Result<Encryption, String> {
        let bad = || {
            format!(
                "{ENCRYPTION_ENV}={value:?} is not internode=<all|dc|rack|none>[+optional],client=<required|optional|none>"
            )
        };
        let (internode, client) = value
            .split_once(',')
            .and_then(|(i, c)| Some((i.strip_prefix("internode=")?, c.strip_prefix("client=")?)))
            .ok_or_else(bad)?;
        let (internode, internode_optional) = match internode.strip_suffix("+optional") {
            Some(i) => (i, true),
            None => (internode, false),
        };
        let internode = match internode {
            "all" => InternodeEncryption::All,
            "dc" => InternodeEncryption::Dc,
            "rack" => InternodeEncryption::Rack,
            "none" => InternodeEncryption::None,
            _ => return Err(bad()),
        };
        let client = match client {
            "required" => ClientEncryption::Required,
            "optional" => ClientEncryption::Optional,
            "none" => ClientEncryption::None,
            _ => return Err(bad()),
        };
        Ok(Encryption {
            internode,
            internode_optional,
            client,
        })
    }

    /// Where it stands on the way between members (`None`: a member
    /// without TLS at all): 0 clear text only, 1 accepting TLS from
    /// members, 2 opening TLS connections while still accepting clear
    /// text, 3 TLS only.
    fn internode_step(this: Option<&Encryption>) -> u8 {
        match this {
            None => 0,
            Some(e) => match (e.internode, e.internode_optional) {
                (InternodeEncryption::None, false) => 0,
                (InternodeEncryption::None, true) => 1,
                (_, true) => 2,
                (_, false) => 3,
            },
        }
    }

    /// Where it stands on the way for clients: 0 clear text, 1 both, 2 TLS
    /// only.
    fn client_step(this: Option<&Encryption>) -> u8 {
        match this.map(|e| e.client) {
            None | Some(ClientEncryption::None) => 0,
            Some(ClientEncryption::Optional) => 1,
            Some(ClientEncryption::Required) => 2,
        }
    }

    /// The encryption at these steps towards `target`.
    fn at(target: &TlsSpec, internode: u8, client: u8) -> Encryption {
        Encryption {
            internode: if internode >= 2 {
                target.internode
            } else {
                InternodeEncryption::None
            },
            internode_optional: internode == 1 || internode == 2,
            client: match client {
                0 => ClientEncryption::None,
                1 => ClientEncryption::Optional,
                _ => ClientEncryption::Required,
            },
        }
    }
}

/// The encryption every rack's Pod template should carry now, on the way
/// from what the racks' templates hold (`racks`: one entry per existing
/// StatefulSet, `None` for a template without TLS) to what the spec asks
/// for (`target`), when every member runs its rack's template and is
/// Ready (`settled`).
///
/// A running cluster cannot go from clear text to TLS in one roll: a
/// member restarted with TLS would open connections its peers, still in
/// clear text, cannot read, and refuse theirs. So it moves a step at a
/// time, each step a roll of every member, and the next step only once
/// every member runs the last one (as Cassandra's own procedure in
/// cassandra.yaml says, with one step more so that no member ever opens
/// TLS to one that cannot accept it):
///
/// 1. every member accepts TLS from members besides clear text
///    (`internode_encryption: none`, `optional: true`) and clients get
///    `optional` TLS (when the target has client TLS);
/// 2. every member opens its connections with TLS, still accepting clear
///    text (the target's `internode_encryption`, `optional: true`), and
///    clients get the spec's setting (every member serves TLS already);
/// 3. the target: members accept TLS only.
///
/// Members and clients move each on their own, from the same rolls: steps
/// that change nothing are skipped (`client: optional` alone is one roll,
/// `client: required` alone two). A new cluster (no rack yet), or
/// one whose templates are all at the target, gets the target. `None`:
/// no TLS.
pub fn next_encryption(
    target: &TlsSpec,
    racks: &[Option<Encryption>],
    settled: bool,
) -> Option<Encryption> {
    let wanted = Encryption::of(target)?;
    if racks.is_empty() {
        return Some(wanted);
    }
    let last_internode = Encryption::internode_step(Some(&wanted));
    let last_client = Encryption::client_step(Some(&wanted));
    // One dimension: the furthest step a rack's template holds, when it
    // is ahead (the templates of the next step are applied to every rack
    // at once, so one rack ahead means a roll to it is under way); the
    // next step once every member runs the same one; never past the
    // target (going back is refused by the API).
    let step = |steps: Vec<u8>, last: u8| -> u8 {
        let (low, high) = (
            steps.iter().copied().min().unwrap_or(0),
            steps.iter().copied().max().unwrap_or(0),
        );
        let at = if high > low {
            high
        } else if (settled || low == 0) && low < last {
            // The first step needs no wait: a member that accepts TLS
            // besides clear text, or serves clients both, breaks nothing.
            low + 1
        } else {
            low
        };
        at.min(last)
    };
    let internode = step(
        racks
            .iter()
            .map(|r| Encryption::internode_step(r.as_ref()))
            .collect(),
        last_internode,
    );
    let client = step(
        racks
            .iter()
            .map(|r| Encryption::client_step(r.as_ref()))
            .collect(),
        last_client,
    );
    Some(Encryption::at(target, internode, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(internode: InternodeEncryption, client: ClientEncryption) -> TlsSpec {
        TlsSpec { internode, client }
    }

    /// The steps from clear text to `target`, each taken once every
    /// member runs the one before, with two racks.
    fn walk(target: &TlsSpec) -> Vec<String> {
        let mut racks = vec![None, None];
        let mut seen = Vec::new();
        for _ in 0..10 {
            // A member not Ready holds every step but the first.
            if racks[0].is_some() {
                assert_eq!(next_encryption(target, &racks, false), racks[0]);
            }
            let Some(next) = next_encryption(target, &racks, true) else {
                break;
            };
            if Some(next) == racks[0] {
                break;
            }
            // One rack rolled to it, the other not yet: the same step
            // for both, settled or not.
            let half = vec![Some(next), racks[1]];
            assert_eq!(next_encryption(target, &half, false), Some(next));
            assert_eq!(next_encryption(target, &half, true), Some(next));
            seen.push(next.to_env());
            racks = vec![Some(next), Some(next)];
        }
        assert_eq!(racks[0], Encryption::of(target), "ends at the target");
        seen
    }

    #[test]
    fn a_running_cluster_moves_to_tls_a_step_at_a_time() {
        use ClientEncryption as C;
        use InternodeEncryption as I;
        assert_eq!(
            walk(&spec(I::All, C::Optional)),
            [
                "internode=none+optional,client=optional",
                "internode=all+optional,client=optional",
                "internode=all,client=optional",
            ]
        );
        assert_eq!(
            walk(&spec(I::Dc, C::Required)),
            [
                "internode=none+optional,client=optional",
                "internode=dc+optional,client=required",
                "internode=dc,client=required",
            ]
        );
        assert_eq!(
            walk(&spec(I::Rack, C::None)),
            [
                "internode=none+optional,client=none",
                "internode=rack+optional,client=none",
                "internode=rack,client=none",
            ]
        );
        assert_eq!(
            walk(&spec(I::None, C::Optional)),
            ["internode=none,client=optional"]
        );
        assert_eq!(
            walk(&spec(I::None, C::Required)),
            [
                "internode=none,client=optional",
                "internode=none,client=required"
            ]
        );
        // From client TLS alone to internode TLS too.
        let client_only = Encryption::of(&spec(I::None, C::Optional));
        let target = spec(I::All, C::Optional);
        assert_eq!(
            next_encryption(&target, &[client_only, client_only], true).map(|e| e.to_env()),
            Some("internode=none+optional,client=optional".to_string())
        );
        // From internode TLS, clients required: one roll, every member
        // already serves TLS.
        let optional = Encryption::of(&spec(I::All, C::Optional));
        assert_eq!(
            next_encryption(&spec(I::All, C::Required), &[optional], true),
            Encryption::of(&spec(I::All, C::Required))
        );
        assert_eq!(
            next_encryption(&spec(I::None, C::None), &[None], true),
            None
        );
    }

    #[test]
    fn a_new_cluster_or_one_at_its_target_gets_the_target() {
        let target = spec(InternodeEncryption::All, ClientEncryption::Required);
        let wanted = Encryption::of(&target);
        assert_eq!(next_encryption(&target, &[], false), wanted);
        assert_eq!(next_encryption(&target, &[wanted, wanted], false), wanted);
        assert_eq!(next_encryption(&target, &[wanted, wanted], true), wanted);
    }

    #[test]
    fn the_environment_form_reads_back() {
        for internode in [
            InternodeEncryption::All,
            InternodeEncryption::Dc,
            InternodeEncryption::Rack,
            InternodeEncryption::None,
        ] {
            for client in [
                ClientEncryption::Required,
                ClientEncryption::Optional,
                ClientEncryption::None,
            ] {
                for internode_optional in [false, true] {
                    let e = Encryption {
                        internode,
                        internode_optional,
                        client,
                    };
                    assert_eq!(Encryption::parse(&e.to_env()), Ok(e));
                }
            }
        }
        for bad in [
            "",
            "internode=all",
            "internode=some,client=none",
            "client=none,internode=all",
            "internode=all,client=optional,x=1",
        ] {
            let err = Encryption::parse(bad).unwrap_err();
            assert!(err.contains(ENCRYPTION_ENV), "{err}");
        }
    }

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
