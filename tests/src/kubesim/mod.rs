//! kubesim: an emulator of the Kubernetes API server that the operator's
//! real kube client and the real kubectl talk to (DESIGN.md section 7).
//!
//! [`store`] holds the objects and is the in-process API (with change
//! notifications) that simulated controllers use; [`http`] serves it.
//!
//! # Starting it
//!
//! In process (a tokio test): `KubeSim::start(Options::default()).await?`
//! serves the API over HTTPS only, on 127.0.0.1 at a free port, with its
//! own CA and serving certificate ([`auth`]); [`KubeSim::kubeconfig`] (or
//! [`KubeSim::write_kubeconfig`]) gives an admin's kubeconfig (the CA's
//! `certificate-authority-data`, a `system:masters` token) for kube-rs
//! (`Kubeconfig::from_yaml` + `Config::from_custom_kubeconfig`) or kubectl;
//! [`KubeSim::create_token`] and [`KubeSim::kubeconfig_with_token`] give a
//! ServiceAccount's; [`KubeSim::store`] is the in-process API (no
//! authorization: it is the cluster's own controllers' path); dropping the
//! value stops it. The test world's own endpoints (`/sim/...`) are plain
//! HTTP on another port, [`KubeSim::sim_url`].
//!
//! # Who may do what
//!
//! Every API request is authenticated (the admin token; ServiceAccount
//! JWTs from the TokenRequest API or the kubelet's projected volume,
//! checked against the live ServiceAccount and Pod; anonymous without
//! credentials; 401 with the API server's body otherwise), impersonation
//! headers are authorized (`impersonate` on users, groups,
//! serviceaccounts), and the request is authorized by RBAC (default roles:
//! `cluster-admin`, `system:discovery`, `system:basic-user`,
//! `system:public-info-viewer`, `view`), 403 with the API server's message.
//! SelfSubjectAccessReview and SelfSubjectReview serve `kubectl auth can-i`
//! and `kubectl auth whoami`. The request log records each request's user.
//!
//! A client's write then passes the admission plugins: OpenShift's
//! OwnerReferencesPermissionEnforcement (changing ownerReferences needs
//! `delete` on the object, a new `blockOwnerDeletion` `update` on the
//! owner's `finalizers`; these checks are in the request log as calls of
//! the user with method `ADMISSION`), the certificates plugins
//! (CertificateApproval and CertificateSigning: `approve` or `sign` on the
//! request's signer, CertificateSubjectRestriction; [`store::certificates`])
//! and ValidatingAdmissionPolicy with its bindings ([`admission_policy`]:
//! 422 or the policy's reason, Warning headers). The in-process
//! controllers' writes pass none.
//!
//! As a process: `kubesim serve --dir DIR [--zones a,b] [--nodes-per-zone N]
//! [--port P] [--watch-window N] [--bookmark-interval-ms MS] [--conflict-rate
//! R] [--error-rate R] [--throttle-rate R] [--drop-watch-rate R] [--slow-rate
//! R] [--slow-ms MS]` writes `DIR/kubeconfig` and `DIR/sim-url`, prints `ready` on stdout once
//! it accepts requests, and runs until SIGTERM.
//!
//! kubectl caches discovery per host and port: tests that run kubectl
//! against several kubesims should give it `--cache-dir` in their temp dir.
//!
//! # Admin endpoints (plain HTTP at [`KubeSim::sim_url`], not logged)
//!
//! - `GET|PUT|POST|DELETE /sim/faults`: the [`faults::FaultConfig`] in force
//!   (JSON, camelCase: `conflictRate`, `errorRate`, `throttleRate`,
//!   `dropWatchRate`, `dropWatchAfterMs`, `slowRate`, `slowMs`,
//!   `lostResponseRate`, `lateWatchRate`, `lateWatchMs`, `verbs`,
//!   `resources`); DELETE clears it. In process, [`KubeSim::on_write`]
//!   kills or freezes a process right after its Nth matching write (by
//!   verb, resource or `resource/subresource`, name, user, and text the
//!   committed object contains); a hook whose process has exited since is
//!   dropped, never signalling whoever holds the pid by then.
//! - `GET /sim/requests[?since=SEQ]`: `{"items": [RequestRecord...]}` (seq,
//!   method, path, query, verb, group, resource, subresource, namespace,
//!   name, userAgent, contentType, code); `DELETE` forgets them.
//! - `POST /sim/nodes/NAME/recreate`, `POST /sim/nodes/NAME/disks/I/wipe`
//!   (a Node's machine and local SSDs, [`sim::disks`]);
//!   `POST /sim/nodes/NAME/unreachable[?freeze=true]`,
//!   `POST /sim/nodes/NAME/not-ready`, `POST /sim/nodes/NAME/reachable`
//!   (its kubelet, [`sim::nodelifecycle`]).
//!
//! # Faithful to the API server
//!
//! resourceVersion as one counter (etcd's revision), 409 on stale updates,
//! generation on spec changes, uid and timestamps, Status objects with the
//! API server's reasons and messages, namespaces (404 when missing, 403 while
//! terminating), label and field selectors, snapshot pagination with continue
//! tokens, watches from a version with bookmarks, streaming lists and 410
//! Expired past a per-kind window, discovery and OpenAPI v3 enough for
//! kubectl, CRDs serving custom resources (schema pruning, defaulting,
//! validation, CEL rules, status and scale subresources), the four patch
//! types with managedFields (Apply and Update managers, apply conflicts and
//! force), finalizers, owner-reference garbage collection, defaulting of
//! built-in kinds, ClusterIP allocation, server-side Table printing,
//! events.k8s.io Events stored as core Events, CertificateSigningRequests
//! with their `/approval` and `/status` ([`store::certificates`], the
//! request's PKCS#10 checked by [`x509`]), graceful Pod deletion
//! (`gracePeriodSeconds` only ever shortened; see
//! [`store::pod_grace`]), and the `pods/log` subresource ([`logs`]).

pub mod admission_policy;
pub mod auth;
pub mod convert;
pub mod defaults;
pub mod discovery;
pub mod faults;
pub mod gc;
pub mod http;
pub mod logs;
pub mod patch;
pub mod protobuf;
pub mod selectors;
pub mod server;
pub mod sim;
pub mod store;
pub mod table;
pub mod x509;

pub use server::{KubeSim, Options};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pseudo-random 64-bit number (splitmix64 over time and a counter).
pub(crate) fn random_u64() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = nanos
        .wrapping_add(
            COUNTER
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
        .wrapping_add(u64::from(std::process::id()) << 32);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A version-4 UUID, as `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
    let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// The five characters `generateName` appends (the API server's alphabet:
/// no vowels, no confusable digits).
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
            r /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Now, as the API server writes timestamps (RFC 3339, seconds, UTC).
/// Microseconds since the Unix epoch: the clock of the request log's and
/// the store events' times (the benchmark's reaction times).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Seconds since the epoch as `2006-01-02T15:04:05Z`.
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_uids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), new_uid());
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
