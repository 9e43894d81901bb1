//! The settings a rack's overrides ConfigMap may not change, each with the
//! reason (DESIGN.md section 5, security posture): the member's identity,
//! which the operator sets, and what would defeat the safety rules (a member
//! that skips its bootstrap, ports the member Services do not expose, data
//! off the persistent volume). One list for both sides: the sidecar refuses
//! to render a configuration that sets one (the member does not start), and
//! the controller reports it as a condition and a Warning Event. Pure.

use std::collections::BTreeMap;

use serde_norway::Value;

use crate::v1alpha1::ClusterMode;

/// A setting the overrides may not change, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedKey {
    /// The top-level key of cassandra.yaml or scylla.yaml.
    pub key: &'static str,
    /// Why, as the sentence after "… sets KEY, which the operator refuses:".
    pub reason: &'static str,
}

const IDENTITY: &str = "the operator sets it from the Cluster and the member's Service";
const ADDRESS: &str =
    "the operator sets it from the member's Pod and Service (its identity in the ring)";
const REPLACE: &str =
    "the operator sets it only for a member whose disk was lost (the replace label)";
const PORT: &str = "the member Services expose the default port only, so another port makes the member unreachable";
const DIRECTORY: &str =
    "it must stay on the member's persistent volume, or the data is lost with the container";

/// Every refused key, in the order of the families above.
pub const REFUSED_KEYS: &[RefusedKey] = &[
    RefusedKey {
        key: "cluster_name",
        reason: IDENTITY,
    },
    RefusedKey {
        key: "endpoint_snitch",
        reason: "the operator sets GossipingPropertyFileSnitch with the Cluster's datacenter and rack; another snitch places replicas without regard to racks",
    },
    RefusedKey {
        key: "seed_provider",
        reason: "the operator sets the seeds from the seed members' Services; other seeds can split the cluster or let a joining member skip its bootstrap",
    },
    RefusedKey {
        key: "auto_bootstrap",
        reason: "a member that does not bootstrap owns token ranges whose data it never streamed (silent data loss)",
    },
    RefusedKey {
        key: "listen_address",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "listen_interface",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "listen_on_broadcast_address",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "broadcast_address",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "rpc_address",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "rpc_interface",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "broadcast_rpc_address",
        reason: ADDRESS,
    },
    RefusedKey {
        key: "replace_address",
        reason: REPLACE,
    },
    RefusedKey {
        key: "replace_address_first_boot",
        reason: REPLACE,
    },
    RefusedKey {
        key: "replace_node_first_boot",
        reason: REPLACE,
    },
    RefusedKey {
        key: "storage_port",
        reason: PORT,
    },
    RefusedKey {
        key: "ssl_storage_port",
        reason: PORT,
    },
    RefusedKey {
        key: "native_transport_port",
        reason: PORT,
    },
    RefusedKey {
        key: "native_transport_port_ssl",
        reason: PORT,
    },
    RefusedKey {
        key: "rpc_port",
        reason: PORT,
    },
    RefusedKey {
        key: "native_shard_aware_transport_port",
        reason: PORT,
    },
    RefusedKey {
        key: "native_shard_aware_transport_port_ssl",
        reason: PORT,
    },
    RefusedKey {
        key: "api_address",
        reason: "the sidecar reaches ScyllaDB's REST API on the Pod's loopback only; elsewhere it is unreachable or open to the whole cluster",
    },
    RefusedKey {
        key: "api_port",
        reason: "the sidecar reaches ScyllaDB's REST API at its default port",
    },
    RefusedKey {
        key: "data_file_directories",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "local_system_data_file_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "commitlog_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "schema_commitlog_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "hints_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "view_hints_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "saved_caches_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "cdc_raw_directory",
        reason: DIRECTORY,
    },
    RefusedKey {
        key: "workdir",
        reason: DIRECTORY,
    },
];

/// The refusal of `key`, if the overrides may not set it.
pub fn refused(key: &str) -> Option<&'static RefusedKey> {
    REFUSED_KEYS.iter().find(|r| r.key == key)
}

/// The refused keys an overrides fragment sets, in the fragment's order.
/// A fragment that is not YAML, or not a mapping, sets none: the sidecar
/// reports those with their own errors.
pub fn refused_in(fragment: &str) -> Vec<&'static RefusedKey> {
    match serde_norway::from_str::<Value>(fragment) {
        Ok(Value::Mapping(map)) => map
            .keys()
            .filter_map(Value::as_str)
            .filter_map(refused)
            .collect(),
        _ => Vec::new(),
    }
}

/// The key of the overrides ConfigMap the sidecar merges over the image's
/// main configuration file (and the name of that file).
pub fn config_map_key(mode: ClusterMode) -> &'static str {
    match mode {
        ClusterMode::Cassandra => "cassandra.yaml",
        ClusterMode::Scylla => "scylla.yaml",
    }
}

/// The refused keys an overrides ConfigMap's data sets for a mode: those of
/// its [`config_map_key`] fragment (the only one the sidecar reads).
pub fn refused_in_config_map(
    data: Option<&BTreeMap<String, String>>,
    mode: ClusterMode,
) -> Vec<&'static RefusedKey> {
    data.and_then(|d| d.get(config_map_key(mode)))
        .map(|fragment| refused_in(fragment))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_listed_once() {
        for (i, a) in REFUSED_KEYS.iter().enumerate() {
            assert!(
                REFUSED_KEYS[i + 1..].iter().all(|b| b.key != a.key),
                "{} twice",
                a.key
            );
        }
    }

    #[test]
    fn the_settings_that_would_defeat_safety_are_refused() {
        for key in [
            "auto_bootstrap",
            "storage_port",
            "native_transport_port",
            "data_file_directories",
            "commitlog_directory",
            "hints_directory",
            "saved_caches_directory",
            "cdc_raw_directory",
            "seed_provider",
            "endpoint_snitch",
            "cluster_name",
            "broadcast_address",
        ] {
            assert!(refused(key).is_some(), "{key}");
        }
        for key in ["num_tokens", "concurrent_reads", "compaction_throughput"] {
            assert_eq!(refused(key), None, "{key}");
        }
        assert!(
            refused("auto_bootstrap")
                .unwrap()
                .reason
                .contains("silent data loss")
        );
    }

    #[test]
    fn a_fragment_names_its_refused_keys_in_order() {
        let keys = |text: &str| -> Vec<&str> { refused_in(text).iter().map(|r| r.key).collect() };
        assert_eq!(
            keys("concurrent_reads: 64\nnative_transport_port: 9043\nauto_bootstrap: false\n"),
            ["native_transport_port", "auto_bootstrap"]
        );
        // Nested keys with the same names are not top-level settings.
        assert_eq!(
            keys("client_encryption_options:\n  storage_port: 1\n"),
            Vec::<&str>::new()
        );
        for not_a_mapping in ["", "# only a comment\n", "[1, 2]", "a: [", "just text"] {
            assert_eq!(keys(not_a_mapping), Vec::<&str>::new(), "{not_a_mapping:?}");
        }
    }

    #[test]
    fn a_config_map_is_read_at_the_key_of_its_mode() {
        let data = BTreeMap::from([
            (
                "cassandra.yaml".to_string(),
                "auto_bootstrap: false\n".to_string(),
            ),
            ("scylla.yaml".to_string(), "api_port: 1\n".to_string()),
            ("notes.yaml".to_string(), "cluster_name: x\n".to_string()),
        ]);
        let keys = |mode| -> Vec<&str> {
            refused_in_config_map(Some(&data), mode)
                .iter()
                .map(|r| r.key)
                .collect()
        };
        assert_eq!(keys(ClusterMode::Cassandra), ["auto_bootstrap"]);
        assert_eq!(keys(ClusterMode::Scylla), ["api_port"]);
        assert!(refused_in_config_map(None, ClusterMode::Cassandra).is_empty());
    }

    /// Every refused key that the real default files of Cassandra 3.11,
    /// 4.1, 5.0 and ScyllaDB mention exists there: the list is not made of
    /// names Cassandra does not read. (Where the fixtures are missing the
    /// test world is not set up either: scripts/test says so.)
    #[test]
    fn refused_keys_are_real_settings() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
        let mut text = String::new();
        for file in [
            "cassandra/3.11/cassandra.yaml",
            "cassandra/4.1/cassandra.yaml",
            "cassandra/5.0/cassandra.yaml",
            "scylla/scylla.yaml",
        ] {
            text.push_str(
                &std::fs::read_to_string(fixtures.join(file))
                    .unwrap_or_else(|e| panic!("{file}: {e}")),
            );
        }
        // Settings that the default files leave out entirely, each
        // documented by Cassandra or ScyllaDB elsewhere.
        let documented_elsewhere = [
            "auto_bootstrap",             // cassandra.yaml reference, "auto_bootstrap"
            "replace_address",            // a -D system property in practice
            "replace_address_first_boot", // likewise
            "replace_node_first_boot",    // ScyllaDB 5.x
        ];
        for r in REFUSED_KEYS {
            if documented_elsewhere.contains(&r.key) {
                continue;
            }
            assert!(
                text.contains(&format!("{}:", r.key)),
                "{} appears in none of the default files",
                r.key
            );
        }
    }
}
