//! The controller crate: reconciles `Cluster` objects into StatefulSets,
//! Services, PVC clean-up, status and Events.
//!
//! - [`run`]: the kube-runtime Controller, its reflector caches and watch
//!   mappers (I/O); [`own_image`]: the members' image, the controller's
//!   own unless configured (I/O, once at start); [`context`]: what every reconcile shares, and the read
//!   of one cluster's objects from the caches.
//! - [`reconcile`]: the pipeline of one reconcile, one call per step.
//! - [`resources`]: the pure builders of every object a Cluster is made of.
//! - [`observe`]: from the cached objects to the observed state (pure);
//!   [`observed`]: its types.
//! - [`validated`]: the validated Cluster the builders take.
//! - [`decide`]: the pure decision step: (spec, observed state) -> next action.
//! - [`apply`]: the supporting objects and StatefulSets, written when
//!   missing or different (I/O).
//! - [`recheck`]: the fresh reads a destructive write needs (I/O, reads).
//! - [`act`]: the one write the decision asks for (I/O).
//! - [`status`]: the status and conditions a reconcile writes (pure).
//! - [`report`]: the status patch, Events and metrics (I/O);
//!   [`metrics`]: Prometheus metrics and probes; [`error`]: the errors.
//! - TLS clusters: [`authority`], the step that makes and publishes a
//!   cluster's certificate authority before any member runs (I/O);
//!   [`certificates`], its cryptography (pure); [`signer`], the controller
//!   of the members' CertificateSigningRequests (I/O), which
//!   [`approval`] judges (pure); [`sweep`], the deletion of what a gone
//!   Cluster kept outside its namespace (I/O).
//! - Password authentication: [`cql`], the controller's CQL client, one
//!   login to one member (I/O).

pub mod act;
pub mod apply;
pub mod approval;
pub mod authentication;
pub mod authority;
pub mod cached;
pub mod certificates;
pub mod confirmation;
pub mod context;
pub mod cql;
pub mod decide;
pub mod encryption;
pub mod error;
pub mod index;
pub mod metrics;
pub mod observe;
pub mod observed;
pub mod own_image;
pub mod recheck;
pub mod reconcile;
pub mod report;
pub mod resources;
pub mod run;
pub mod signer;
pub mod status;
pub mod sweep;
pub mod validated;

#[cfg(test)]
mod fixtures;

/// `cassandra-operator controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Image of the operator, used for the members' init container unless a
    /// Cluster names its own sidecarImage. Default: the image of this
    /// controller's own container, read from its Pod (POD_NAME and
    /// POD_NAMESPACE, from the downward API); outside a Pod, the default
    /// image (see [`own_image`]).
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: Option<String>,
    /// How long a member a roll took down may take to come back Ready on
    /// the new template before the roll stops (a condition and a Warning
    /// Event name it), in seconds.
    #[arg(long, env = "MEMBER_RESTART_TIMEOUT_SECONDS", default_value_t = 600)]
    pub member_restart_timeout_seconds: u64,
    /// How many Clusters are reconciled at once (never one Cluster twice
    /// at once). Each reconcile in flight holds its own connections to the
    /// API server: unbounded, a thousand new Clusters opened thousands. At
    /// 8, a cluster's next step waited behind the others' reconciles when
    /// 100 grew at once (README, "Benchmarks").
    #[arg(long, env = "CONCURRENT_RECONCILES", default_value_t = 32,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrent_reconciles: u16,
    /// The operator's own namespace: where it keeps the certificate
    /// authority of each Cluster with TLS (a Secret no user of a Cluster's
    /// namespace can read). In a Pod: its namespace, from the downward API.
    #[arg(long, env = "POD_NAMESPACE")]
    pub operator_namespace: String,
    /// How long a member's certificate lives (`720h`, `90m`, `1h30m`; at
    /// least a minute). Members ask for a new one when a third of it is
    /// left.
    #[arg(long, env = "MEMBER_CERTIFICATE_LIFETIME", value_parser = parse_lifetime,
          default_value = DEFAULT_LIFETIME)]
    pub member_certificate_lifetime: std::time::Duration,
    /// The cluster's DNS domain, in the DNS names of member certificates.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
}

/// [`crds::contract::tls::DEFAULT_MEMBER_CERTIFICATE_LIFETIME_SECS`] as
/// the flag's default (a unit test holds them equal).
const DEFAULT_LIFETIME: &str = "720h";

/// A duration as Go and Kubernetes write them: whole numbers, each with a
/// unit of `h`, `m` or `s`, from the largest down (`720h`, `10m`,
/// `1h30m`); at least a minute (a member renews at a third of the
/// lifetime, and certificates start a minute back for clock skew).
pub fn parse_lifetime(text: &str) -> Result<std::time::Duration, String> {
    let mut secs: u64 = 0;
    let mut rest = text.trim();
    let mut last_unit = u64::MAX;
    if rest.is_empty() {
        return Err("a duration such as 720h or 10m".to_string());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (number, after) = rest.split_at(digits);
        let unit_len = after.chars().next().map_or(0, char::len_utf8);
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "h" => 3600,
            "m" => 60,
            "s" => 1,
            _ => {
                return Err(format!(
                    "{text:?}: whole numbers each followed by h, m or s, such as 720h or 1h30m"
                ));
            }
        };
        if number.is_empty() || scale >= last_unit {
            return Err(format!(
                "{text:?}: whole numbers each followed by h, m or s, from the largest unit down, such as 720h or 1h30m"
            ));
        }
        last_unit = scale;
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number} is too large"))?;
        secs = n
            .checked_mul(scale)
            .and_then(|s| secs.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = after;
    }
    if secs < 60 {
        return Err(format!("{text:?}: a member certificate lives at least 1m"));
    }
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod lifetime_tests {
    use super::*;

    #[test]
    fn lifetimes_read_as_kubernetes_writes_durations() {
        for (text, secs) in [
            ("720h", 720 * 3600),
            ("10m", 600),
            ("1h30m", 5400),
            ("90s", 90),
            ("2h0m30s", 7230),
        ] {
            assert_eq!(
                parse_lifetime(text),
                Ok(std::time::Duration::from_secs(secs)),
                "{text}"
            );
        }
        for bad in [
            "",
            "10",
            "m",
            "10d",
            "30s10m",
            "1h1h",
            "-5m",
            "59s",
            "1.5h",
            "99999999999999999999h",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_lifetime(DEFAULT_LIFETIME).unwrap().as_secs(),
            crds::contract::tls::DEFAULT_MEMBER_CERTIFICATE_LIFETIME_SECS
        );
    }
}
