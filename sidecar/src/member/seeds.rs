//! The seeds a member lists, at start and while it runs (DESIGN.md section
//! 4): the seed Services' addresses, and those of the members being
//! replaced (their member Service carries [`contract::REPLACE`]), under the
//! rule of [`contract::choose_seeds`].
//!
//! Why a member being replaced is a seed while it is: a replacement at the
//! node's own address gossips `STATUS=hibernate`, a dead state, and learns
//! the ring only when another node opens a gossip round with it. Cassandra
//! opens rounds with an unreachable node only when it is not in a dead
//! state (`Gossiper.maybeGossipToUnreachableMember`), but with a seed
//! whatever its state (`maybeGossipToSeed`). So once the others have heard
//! `hibernate` before they gossiped to it, the replacement never hears from
//! them and fails with "Unable to contact any seeds", at every restart
//! (CASSANDRA-19580). Listed as a seed, it is gossiped to within seconds.
//!
//! [`seed_addresses`] is pure; [`follow_seeds`] is the I/O: it watches the
//! cluster's member Services, rewrites the seeds of the rendered
//! cassandra.yaml in place when they change ([`crate::render::yaml::with_seeds`])
//! and has Cassandra read them again (`reloadSeeds` on the Gossiper MBean).
//! ScyllaDB's REST API has no such operation (its `/gossiper` endpoints
//! read, assassinate and remove endpoints only): scylla mode lists the seed
//! Services alone, as before, and keeps the seeds it started with.

use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crds::contract;
use crds::labels;
use crds::v1alpha1::ClusterMode;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tracing::{debug, info, warn};

use super::identity::{Member, cluster_ip};
use crate::jolokia::StorageService;
use crate::render::cassandra::CASSANDRA_YAML;
use crate::render::{self, RenderError, yaml};

/// How often a reload that did not reach Cassandra (not up yet) is tried
/// again.
const RETRY: Duration = Duration::from_secs(5);

/// What a member may list as seeds, from its cluster's member Services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedAddresses {
    /// The seed Services' ClusterIPs and those of the other members being
    /// replaced.
    pub addresses: Vec<String>,
    /// Whether the cluster has members besides this one.
    pub other_members: bool,
}

/// The seed candidates among the member Services of a cluster (`own`: this
/// member's name); the members being replaced only when `replacing_seeds`
/// (Cassandra). A member being replaced is not its own seed, whatever the
/// replace: a node never bootstraps from itself. Pure.
pub fn seed_addresses(
    services: &[impl Borrow<Service>],
    own: &str,
    replacing_seeds: bool,
) -> SeedAddresses {
    let services = || services.iter().map(Borrow::borrow);
    let has = |s: &Service, key: &str| {
        s.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(key))
    };
    let is_other = |s: &Service| s.metadata.name.as_deref() != Some(own);
    let replacing = |s: &Service| {
        let label = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(contract::REPLACE));
        replacing_seeds
            && is_other(s)
            && contract::replace_address(label.map(String::as_str)).is_some()
    };
    SeedAddresses {
        addresses: services()
            .filter(|s| has(s, contract::SEED) || replacing(s))
            .filter_map(cluster_ip)
            .collect(),
        other_members: services().any(|s| {
            is_other(s)
                && s.spec.as_ref().and_then(|sp| sp.cluster_ip.as_deref()) != Some("None")
                && has(s, labels::RACK)
        }),
    }
}

/// The seeds of a member, from its cluster's member Services; `bootstrapped`:
/// whether its data volume records a completed bootstrap. ScyllaDB keeps
/// the seed Services alone: it cannot reload its seeds, and replaces by
/// host ID. Pure.
pub fn seeds_of(
    member: &Member,
    services: &[impl Borrow<Service>],
    bootstrapped: bool,
) -> Vec<String> {
    let found = seed_addresses(services, &member.pod, member.mode == ClusterMode::Cassandra);
    contract::choose_seeds(
        &member.own_ip,
        &found.addresses,
        found.other_members,
        bootstrapped,
    )
}

/// Follows the cluster's member Services for as long as the sidecar runs;
/// when the seeds the member should list differ from `listed` (the rendered
/// ones), writes them into `config_dir`'s cassandra.yaml (a rename: never a
/// half-written file) and has Cassandra reload them, trying again while
/// Cassandra does not answer.
pub async fn follow_seeds(
    services: Api<Service>,
    member: Member,
    config_dir: PathBuf,
    storage: Arc<StorageService>,
    mut listed: Vec<String>,
) {
    let config =
        watcher::Config::default().labels(&format!("{}={}", labels::CLUSTER, member.cluster_name));
    let (store, writer) = reflector::store();
    let mut events = reflector(writer, watcher(services, config))
        .default_backoff()
        .boxed();
    let bootstrapped = contract::bootstrapped_marker(&member.data_dir);
    // The store holds the whole list once the first listing is done (not
    // `wait_until_ready`: only polling this very stream makes it ready).
    let mut complete = false;
    let mut unreloaded = false;
    loop {
        let retry = async {
            if unreloaded {
                tokio::time::sleep(RETRY).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => complete |= matches!(event, watcher::Event::InitDone),
                Some(Err(e)) => {
                    warn!(error = %e, "watching the member services");
                    continue;
                }
                None => return,
            },
            () = retry => {}
        }
        if !complete {
            continue;
        }
        let wanted = seeds_of(&member, &store.state(), bootstrapped.is_file());
        if wanted != listed {
            match rewrite_seeds(&config_dir, &wanted) {
                Ok(()) => {
                    info!(member = %member.pod, from = ?listed, to = ?wanted, "seeds changed");
                    listed = wanted;
                    unreloaded = true;
                }
                Err(e) => warn!(member = %member.pod, error = %e, "writing the new seeds"),
            }
        }
        if unreloaded {
            unreloaded = reload(&storage, &member.pod).await;
        }
    }
}

/// Has Cassandra read its seeds again; whether to try again (it did not
/// answer: not up yet, or restarting).
async fn reload(storage: &StorageService, member: &str) -> bool {
    match storage.reload_seeds().await {
        Ok(Some(seeds)) => {
            info!(%member, ?seeds, "cassandra reloaded its seeds");
            false
        }
        Ok(None) => {
            warn!(%member, "cassandra could not read its new seeds (see its log): it keeps the old ones");
            false
        }
        Err(e) if e.is_unreachable() || e.jolokia_status() == Some(404) => {
            debug!(%member, error = %e, "reloading the seeds: cassandra is not up yet");
            true
        }
        Err(e) => {
            warn!(%member, error = %e, "reloading the seeds: it has them at its next start");
            false
        }
    }
}

/// Writes `seeds` into the rendered cassandra.yaml, the rest unchanged.
fn rewrite_seeds(config_dir: &Path, seeds: &[String]) -> Result<(), RenderError> {
    let path = config_dir.join(CASSANDRA_YAML);
    let text = std::fs::read_to_string(&path).map_err(|source| RenderError::ReadFile {
        path: path.clone(),
        source,
    })?;
    let text = yaml::with_seeds(CASSANDRA_YAML, &text, &seeds.join(","))?;
    render::write_all(config_dir, &[(CASSANDRA_YAML.to_string(), text)]).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn service(name: &str, ip: &str, labels: &[(&str, &str)]) -> Service {
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.insert(labels::RACK.to_string(), "r".to_string());
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(all),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                cluster_ip: Some(ip.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Members 0 and 1 are seeds, 2 is not; `replacing`: the members whose
    /// Service carries a replace record, with its value.
    fn rack(replacing: &[(usize, &str)]) -> Vec<Service> {
        (0..3)
            .map(|i| {
                let mut labels = vec![];
                if contract::is_seed(i as i32) {
                    labels.push((contract::SEED, ""));
                }
                if let Some((_, value)) = replacing.iter().find(|(r, _)| *r == i) {
                    labels.push((contract::REPLACE, *value));
                }
                service(
                    &format!("c-dc-r-{i}"),
                    &format!("10.96.0.{}", 10 + i),
                    &labels,
                )
            })
            .collect()
    }

    fn addresses(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_seeds_are_the_seed_services() {
        let found = seed_addresses(&rack(&[]), "c-dc-r-2", true);
        assert_eq!(found.addresses, addresses(&["10.96.0.10", "10.96.0.11"]));
        assert!(found.other_members);
    }

    #[test]
    fn a_member_being_replaced_is_a_seed_of_the_others_while_it_is() {
        let replacing = rack(&[(2, "10.96.0.12")]);
        for other in ["c-dc-r-0", "c-dc-r-1"] {
            assert_eq!(
                seed_addresses(&replacing, other, true).addresses,
                addresses(&["10.96.0.10", "10.96.0.11", "10.96.0.12"]),
                "{other}"
            );
        }
        // Not of itself: it would not bootstrap (stream) from the others.
        assert_eq!(
            seed_addresses(&replacing, "c-dc-r-2", true).addresses,
            addresses(&["10.96.0.10", "10.96.0.11"])
        );
        // ScyllaDB (no reload of seeds; a replace by host ID): the seed
        // Services alone.
        assert_eq!(
            seed_addresses(&replacing, "c-dc-r-0", false).addresses,
            addresses(&["10.96.0.10", "10.96.0.11"])
        );
        // The record gone, it is no seed again.
        assert_eq!(
            seed_addresses(&rack(&[]), "c-dc-r-0", true).addresses,
            addresses(&["10.96.0.10", "10.96.0.11"])
        );
    }

    #[test]
    fn a_replace_record_without_an_address_is_no_replace() {
        // The sidecar never starts a replace with it (contract::replace_address).
        let found = seed_addresses(&rack(&[(2, "")]), "c-dc-r-0", true);
        assert_eq!(found.addresses, addresses(&["10.96.0.10", "10.96.0.11"]));
    }

    #[test]
    fn a_seed_being_replaced_lists_the_other_seed_only() {
        // The rule of contract::choose_seeds: not bootstrapped, it leaves
        // itself out; the others keep it.
        let replacing = rack(&[(1, "10.96.0.11")]);
        let found = seed_addresses(&replacing, "c-dc-r-1", true);
        assert_eq!(
            contract::choose_seeds("10.96.0.11", &found.addresses, found.other_members, false),
            addresses(&["10.96.0.10"])
        );
        let found = seed_addresses(&replacing, "c-dc-r-2", true);
        assert_eq!(
            contract::choose_seeds("10.96.0.12", &found.addresses, found.other_members, true),
            addresses(&["10.96.0.10", "10.96.0.11"])
        );
    }

    #[test]
    fn the_first_member_alone_has_no_other_members() {
        let only = vec![service("c-dc-r-0", "10.96.0.10", &[(contract::SEED, "")])];
        let found = seed_addresses(&only, "c-dc-r-0", true);
        assert!(!found.other_members);
        assert_eq!(found.addresses, addresses(&["10.96.0.10"]));
    }

    #[test]
    fn rewritten_seeds_replace_the_file_and_keep_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let rendered = "# Rendered by cassandra-operator from the image's default cassandra.yaml:\n\
            # the member's identity set, the rack's overrides merged on top.\n\
            # The default file's comments are not kept.\n\
            cluster_name: c\n\
            seed_provider:\n- class_name: org.apache.cassandra.locator.SimpleSeedProvider\n  parameters:\n  - seeds: 10.96.0.10,10.96.0.11\n\
            num_tokens: 16\n";
        std::fs::write(dir.path().join(CASSANDRA_YAML), rendered).unwrap();
        rewrite_seeds(
            dir.path(),
            &addresses(&["10.96.0.10", "10.96.0.11", "10.96.0.12"]),
        )
        .unwrap();
        let after = std::fs::read_to_string(dir.path().join(CASSANDRA_YAML)).unwrap();
        assert_eq!(
            after,
            rendered.replace("10.96.0.10,10.96.0.11", "10.96.0.10,10.96.0.11,10.96.0.12")
        );
        // Nothing left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(CASSANDRA_YAML)]);
    }
}
