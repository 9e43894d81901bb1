//! The settings a rack's overrides ConfigMap may not change, each with the
//! reason (DESIGN.md section 5, security posture): the member's identity,
//! which the operator sets, and what would defeat the safety rules (a member
//! that skips its bootstrap, ports the member Services do not expose, data
//! off the persistent volume). One list for both sides: the sidecar refuses
//! to render a configuration that sets one (the member does not start), and
//! the controller reports it as a condition and a Warning Event.
//!
//! And the settings Cassandra 4.1 renamed ([`RENAMED_SETTINGS`]): 4.1 and
//! 5.0 still read the old names but refuse a file that holds the old and
//! the new name of one setting, which a fragment written for 3.11 merged
//! onto a 4.1 default file would make. The sidecar keeps the fragment's
//! name and drops the default file's other one (Cassandra reads either
//! alone), and refuses a fragment that sets both.
//!
//! And the settings a 3.11 file may hold that 4.1 and 5.0 no longer read
//! at all ([`REMOVED_SETTINGS`]: Thrift's, the request scheduler's): they
//! refuse to start on a file that sets one ("Invalid yaml. Please remove
//! properties [start_rpc] from your cassandra.yaml"), so a fragment that
//! sets one is refused for those releases, by the sidecar and the
//! controller alike, with the key and the release in the message: an
//! upgrade never reaches a member that would not start.
//!
//! And, for a Cluster whose clients must log in
//! (`spec.security.authentication`), the settings the operator then sets
//! ([`AUTHENTICATION_KEYS`]): refused the same way, by both sides, so that
//! an override can neither let clients in without a password nor lock the
//! operator out of the superuser it keeps. Pure.

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
    refused_in_for(fragment, &[])
}

/// [`refused_in`], with the settings `removed` ([`unread_in`]) refused too.
pub fn refused_in_for(fragment: &str, removed: &[&'static RefusedKey]) -> Vec<&'static RefusedKey> {
    match serde_norway::from_str::<Value>(fragment) {
        Ok(Value::Mapping(map)) => map
            .keys()
            .filter_map(Value::as_str)
            .filter_map(|key| refused_for(key, removed))
            .collect(),
        _ => Vec::new(),
    }
}

/// A setting some releases do not read (3.11's that later ones removed, or
/// a later one's that earlier ones lack): their `Config` has no field of
/// that name and no `@Replaces` of it, and their `YamlConfigurationLoader`
/// refuses a file that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadSetting {
    /// The refusal, as the sidecar and the controller report it.
    pub refused: RefusedKey,
    /// The releases (`major.minor`) whose `Config` was read without it:
    /// those that refuse it.
    pub releases: &'static [&'static str],
}

const THRIFT: &str = "Cassandra 4.0 removed it with Thrift (CQL clients use the native transport), and 4.1 and 5.0 refuse to start on a cassandra.yaml that sets it";
const SCHEDULER: &str = "Cassandra 4.0 removed the request scheduler with Thrift, its only user, and 4.1 and 5.0 refuse to start on a cassandra.yaml that sets it";

const BATCH_WINDOW: &str = "Cassandra 4.0 deprecated it (batch mode no longer waits for a window) and 5.0 removed it, and 5.0 refuses to start on a cassandra.yaml that sets it";

const fn unread(
    key: &'static str,
    reason: &'static str,
    releases: &'static [&'static str],
) -> UnreadSetting {
    UnreadSetting {
        refused: RefusedKey { key, reason },
        releases,
    }
}

const SINCE_4_0: &[&str] = &["4.1", "5.0"];

/// The top-level keys of 3.11's default cassandra.yaml (set or commented
/// out) that 4.1.8's or 5.0.3's `org.apache.cassandra.config.Config` does
/// not read, under their name or as an `@Replaces` old name (checked
/// against the jars by tests/tests/cassandra_settings.rs): a 3.11 user's
/// overrides may hold any of them. `rpc_port` is refused for every release
/// already ([`REFUSED_KEYS`]).
pub const REMOVED_SETTINGS: &[UnreadSetting] = &[
    unread("start_rpc", THRIFT, SINCE_4_0),
    unread("rpc_server_type", THRIFT, SINCE_4_0),
    unread("rpc_min_threads", THRIFT, SINCE_4_0),
    unread("rpc_max_threads", THRIFT, SINCE_4_0),
    unread("rpc_send_buff_size_in_bytes", THRIFT, SINCE_4_0),
    unread("rpc_recv_buff_size_in_bytes", THRIFT, SINCE_4_0),
    unread("thrift_framed_transport_size_in_mb", THRIFT, SINCE_4_0),
    unread(
        "thrift_prepared_statements_cache_size_mb",
        THRIFT,
        SINCE_4_0,
    ),
    unread("request_scheduler", SCHEDULER, SINCE_4_0),
    unread("request_scheduler_id", SCHEDULER, SINCE_4_0),
    unread("request_scheduler_options", SCHEDULER, SINCE_4_0),
    unread("commitlog_sync_batch_window_in_ms", BATCH_WINDOW, &["5.0"]),
];

const BEFORE_5_0: &str = "Cassandra 5.0 added it, and 4.1 refuses to start on a cassandra.yaml that sets it; set it together with a spec.version of 5.0 or later";

/// Settings of 5.0's `Config` that 4.1.8's lacks and that a user sets on
/// the way to 5.0: `storage_compatibility_mode` (moving on from
/// `CASSANDRA_4` after a major upgrade) and `sstable` (the format). Set
/// with the `spec.version` change, each member restarts on 5.0 with them;
/// set before it, they would stop every 4.1 member that restarts.
pub const ADDED_SETTINGS: &[UnreadSetting] = &[
    unread("storage_compatibility_mode", BEFORE_5_0, &["4.1"]),
    unread("sstable", BEFORE_5_0, &["4.1"]),
];

/// The `major.minor` of a release (`4.1` of `4.1.8`), if it reads as one.
fn major_minor(release: &str) -> Option<&str> {
    let mut dots = release.match_indices('.').map(|(i, _)| i);
    let first = dots.next()?;
    let end = dots.next().unwrap_or(release.len());
    let (major, minor) = (&release[..first], &release[first + 1..end]);
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(major) && numeric(minor)).then_some(&release[..end])
}

/// The settings `release` of Cassandra does not read and refuses
/// ([`REMOVED_SETTINGS`], [`ADDED_SETTINGS`]; none for a release these
/// tables do not know, whose own check then speaks).
pub fn unread_in(release: Option<&str>) -> Vec<&'static RefusedKey> {
    let Some(release) = release.and_then(major_minor) else {
        return Vec::new();
    };
    REMOVED_SETTINGS
        .iter()
        .chain(ADDED_SETTINGS)
        .filter(|r| r.releases.contains(&release))
        .map(|r| &r.refused)
        .collect()
}

/// The refusal of `key` in a fragment for Cassandra `release` (ScyllaDB
/// keeps 3.x's names: pass no release): a refused key, or one the release
/// removed.
pub fn refused_for(key: &str, removed: &[&'static RefusedKey]) -> Option<&'static RefusedKey> {
    refused(key).or_else(|| removed.iter().copied().find(|r| r.key == key))
}

/// The settings the operator sets when a Cluster's clients must log in
/// (`spec.security.authentication`: [`crate::contract::auth::SETTINGS`]).
/// The overrides of such a Cluster may not set them, whatever the value;
/// those of any other Cluster may.
pub const AUTHENTICATION_KEYS: &[RefusedKey] = &[
    RefusedKey {
        key: "authenticator",
        reason: "spec.security.authentication is on, so the operator sets PasswordAuthenticator: another authenticator lets clients in without a password, or locks the operator out of the superuser it keeps",
    },
    RefusedKey {
        key: "authorizer",
        reason: "spec.security.authentication is on, so the operator sets CassandraAuthorizer: another authorizer can give every role every permission",
    },
    RefusedKey {
        key: "role_manager",
        reason: "spec.security.authentication is on, so the operator sets CassandraRoleManager, which keeps the roles clients and the operator log in as (Cassandra refuses PasswordAuthenticator with any other)",
    },
];

/// The settings the overrides of a Cluster may not set besides
/// [`REFUSED_KEYS`]: those its Cassandra `release` does not read
/// ([`unread_in`]; ScyllaDB keeps 3.x's names, so none) and, when its
/// clients must log in (`authentication`), [`AUTHENTICATION_KEYS`]. What
/// the sidecar refuses to render and the controller reports.
pub fn refused_by_cluster(
    mode: ClusterMode,
    release: Option<&str>,
    authentication: bool,
) -> Vec<&'static RefusedKey> {
    let mut refused = match mode {
        ClusterMode::Cassandra => unread_in(release),
        ClusterMode::Scylla => Vec::new(),
    };
    if authentication {
        refused.extend(AUTHENTICATION_KEYS);
    }
    refused
}

/// `allocate_tokens_for_local_replication_factor` of Cassandra 4.0 and
/// later's default files (4.1's and 5.0's set 3): the replication factor
/// the token allocator balances a new node's tokens for. With it, a
/// datacenter of more than one rack but fewer racks than the factor cannot
/// bootstrap a node ("Token allocation failed: the number of racks 2 in
/// datacenter dc is lower than its replication factor 3").
pub const DEFAULT_TOKEN_ALLOCATION_FACTOR: u32 = 3;

/// The token allocation factor a Cassandra overrides fragment sets, if any.
pub fn token_allocation_factor(fragment: &str) -> Option<u32> {
    let Ok(Value::Mapping(map)) = serde_norway::from_str::<Value>(fragment) else {
        return None;
    };
    map.get("allocate_tokens_for_local_replication_factor")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

/// The key of the overrides ConfigMap the sidecar merges over the image's
/// main configuration file (and the name of that file).
pub fn config_map_key(mode: ClusterMode) -> &'static str {
    match mode {
        ClusterMode::Cassandra => "cassandra.yaml",
        ClusterMode::Scylla => "scylla.yaml",
    }
}

/// The refused keys an overrides ConfigMap's data sets for a mode, a
/// release (`spec.version`) and whether clients must log in
/// (`spec.security.authentication`): those of its [`config_map_key`]
/// fragment (the only one the sidecar reads), with the Cluster's own
/// refusals ([`refused_by_cluster`]).
pub fn refused_in_config_map(
    data: Option<&BTreeMap<String, String>>,
    mode: ClusterMode,
    release: &str,
    authentication: bool,
) -> Vec<&'static RefusedKey> {
    let refused = refused_by_cluster(mode, Some(release), authentication);
    data.and_then(|d| d.get(config_map_key(mode)))
        .map(|fragment| refused_in_for(fragment, &refused))
        .unwrap_or_default()
}

/// One setting of cassandra.yaml that Cassandra renamed (CASSANDRA-15234 in
/// 4.1: `read_request_timeout_in_ms: 10000` became
/// `read_request_timeout: 10000ms`), as an `@Replaces(oldName, converter,
/// deprecated)` annotation on the field of the new name in
/// `org.apache.cassandra.config.Config` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenamedSetting {
    /// The mapping the names sit in: `None` for the top level of the file,
    /// `Some("server_encryption_options")` for a key inside that one.
    pub section: Option<&'static str>,
    /// The name before the rename (3.11's, 4.0's).
    pub old: &'static str,
    /// The release's name.
    pub new: &'static str,
    /// The `Converters` constant Cassandra reads an old value with (its
    /// unit: `MILLIS_DURATION_LONG` reads `10000` as `10000ms`,
    /// `KIBIBYTES_DATASTORAGE` `64` as `64KiB`, `MEBIBYTES_DATA_STORAGE_INT`
    /// `100` as `100MiB`, `IDENTITY` takes the value as it is).
    pub converter: &'static str,
    /// The releases whose `Config` carries the pair.
    pub releases: &'static [&'static str],
}

const fn renamed(
    old: &'static str,
    new: &'static str,
    converter: &'static str,
    releases: &'static [&'static str],
) -> RenamedSetting {
    RenamedSetting {
        section: None,
        old,
        new,
        converter,
        releases,
    }
}

/// Every old → new pair of Cassandra 4.1 and 5.0, read from the
/// `@Replaces` annotations of `Config` (and of
/// `EncryptionOptions.ServerEncryptionOptions`, the one nested class that
/// has any) in the released jars `org.apache.cassandra:cassandra-all:4.1.8`
/// and `5.0.3` from Maven Central, in the order of `Config`'s fields.
/// Left out: the three that keep their name and only gain a unit
/// (`key_cache_save_period`, `row_cache_save_period`,
/// `counter_cache_save_period`: Cassandra's `isValueFormatReplacement`, not
/// a second name). Both releases refuse to start on a file that holds the
/// old and the new name of one pair at the same level
/// (`YamlConfigurationLoader.verifyReplacements`: "Config contains both old
/// and new keys for the same configuration parameters, migrate old -> new:
/// [read_request_timeout_in_ms -> read_request_timeout]"), and both read an
/// old name alone, through its converter, with a deprecation warning
/// (`deprecated = true` only logs).
#[rustfmt::skip]
pub const RENAMED_SETTINGS: &[RenamedSetting] = &[
    // old name, new name, Cassandra's converter, releases
    renamed("permissions_validity_in_ms", "permissions_validity", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("permissions_update_interval_in_ms", "permissions_update_interval", "MILLIS_CUSTOM_DURATION", &["4.1", "5.0"]),
    renamed("roles_validity_in_ms", "roles_validity", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("roles_update_interval_in_ms", "roles_update_interval", "MILLIS_CUSTOM_DURATION", &["4.1", "5.0"]),
    renamed("credentials_validity_in_ms", "credentials_validity", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("credentials_update_interval_in_ms", "credentials_update_interval", "MILLIS_CUSTOM_DURATION", &["4.1", "5.0"]),
    renamed("max_hint_window_in_ms", "max_hint_window", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("native_transport_idle_timeout_in_ms", "native_transport_idle_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("request_timeout_in_ms", "request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("read_request_timeout_in_ms", "read_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("range_request_timeout_in_ms", "range_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("write_request_timeout_in_ms", "write_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("counter_write_request_timeout_in_ms", "counter_write_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("cas_contention_timeout_in_ms", "cas_contention_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("truncate_request_timeout_in_ms", "truncate_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("repair_request_timeout_in_ms", "repair_request_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("streaming_keep_alive_period_in_secs", "streaming_keep_alive_period", "SECONDS_DURATION", &["4.1", "5.0"]),
    renamed("cross_node_timeout", "internode_timeout", "IDENTITY", &["4.1", "5.0"]),
    renamed("slow_query_log_timeout_in_ms", "slow_query_log_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("memtable_heap_space_in_mb", "memtable_heap_space", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("memtable_offheap_space_in_mb", "memtable_offheap_space", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("repair_session_space_in_mb", "repair_session_space", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("internode_max_message_size_in_bytes", "internode_max_message_size", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_socket_send_buffer_size_in_bytes", "internode_socket_send_buffer_size", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_send_buff_size_in_bytes", "internode_socket_send_buffer_size", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_socket_receive_buffer_size_in_bytes", "internode_socket_receive_buffer_size", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_recv_buff_size_in_bytes", "internode_socket_receive_buffer_size", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_send_queue_capacity_in_bytes", "internode_application_send_queue_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_send_queue_reserve_endpoint_capacity_in_bytes", "internode_application_send_queue_reserve_endpoint_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_send_queue_reserve_global_capacity_in_bytes", "internode_application_send_queue_reserve_global_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_receive_queue_capacity_in_bytes", "internode_application_receive_queue_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_receive_queue_reserve_endpoint_capacity_in_bytes", "internode_application_receive_queue_reserve_endpoint_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_application_receive_queue_reserve_global_capacity_in_bytes", "internode_application_receive_queue_reserve_global_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("internode_tcp_connect_timeout_in_ms", "internode_tcp_connect_timeout", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("internode_tcp_user_timeout_in_ms", "internode_tcp_user_timeout", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("internode_streaming_tcp_user_timeout_in_ms", "internode_streaming_tcp_user_timeout", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("native_transport_max_frame_size_in_mb", "native_transport_max_frame_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("native_transport_max_concurrent_requests_in_bytes_per_ip", "native_transport_max_request_data_in_flight_per_ip", "BYTES_CUSTOM_DATASTORAGE", &["4.1", "5.0"]),
    renamed("native_transport_max_concurrent_requests_in_bytes", "native_transport_max_request_data_in_flight", "BYTES_CUSTOM_DATASTORAGE", &["4.1", "5.0"]),
    renamed("native_transport_receive_queue_capacity_in_bytes", "native_transport_receive_queue_capacity", "BYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("max_value_size_in_mb", "max_value_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("column_index_size_in_kb", "column_index_size", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("column_index_cache_size_in_kb", "column_index_cache_size", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("batch_size_warn_threshold_in_kb", "batch_size_warn_threshold", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("batch_size_fail_threshold_in_kb", "batch_size_fail_threshold", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("compaction_throughput_mb_per_sec", "compaction_throughput", "MEBIBYTES_PER_SECOND_DATA_RATE", &["4.1", "5.0"]),
    renamed("compaction_large_partition_warning_threshold_mb", "compaction_large_partition_warning_threshold", "MEBIBYTES_DATA_STORAGE_INT", &["4.1"]),
    renamed("min_free_space_per_drive_in_mb", "min_free_space_per_drive", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("stream_throughput_outbound_megabits_per_sec", "stream_throughput_outbound", "MEGABITS_TO_BYTES_PER_SECOND_DATA_RATE", &["4.1", "5.0"]),
    renamed("inter_dc_stream_throughput_outbound_megabits_per_sec", "inter_dc_stream_throughput_outbound", "MEGABITS_TO_BYTES_PER_SECOND_DATA_RATE", &["4.1", "5.0"]),
    renamed("commitlog_total_space_in_mb", "commitlog_total_space", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("commitlog_sync_group_window_in_ms", "commitlog_sync_group_window", "MILLIS_DURATION_DOUBLE", &["4.1", "5.0"]),
    renamed("commitlog_sync_period_in_ms", "commitlog_sync_period", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("commitlog_segment_size_in_mb", "commitlog_segment_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("periodic_commitlog_sync_lag_block_in_ms", "periodic_commitlog_sync_lag_block", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("max_mutation_size_in_kb", "max_mutation_size", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("cdc_total_space_in_mb", "cdc_total_space", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("cdc_free_space_check_interval_ms", "cdc_free_space_check_interval", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("dynamic_snitch_update_interval_in_ms", "dynamic_snitch_update_interval", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("dynamic_snitch_reset_interval_in_ms", "dynamic_snitch_reset_interval", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("hinted_handoff_throttle_in_kb", "hinted_handoff_throttle", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("batchlog_replay_throttle_in_kb", "batchlog_replay_throttle", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("hints_flush_period_in_ms", "hints_flush_period", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("max_hints_file_size_in_mb", "max_hints_file_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("trickle_fsync_interval_in_kb", "trickle_fsync_interval", "KIBIBYTES_DATASTORAGE", &["4.1", "5.0"]),
    renamed("sstable_preemptive_open_interval_in_mb", "sstable_preemptive_open_interval", "NEGATIVE_MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("key_cache_size_in_mb", "key_cache_size", "MEBIBYTES_DATA_STORAGE_LONG", &["4.1", "5.0"]),
    renamed("row_cache_size_in_mb", "row_cache_size", "MEBIBYTES_DATA_STORAGE_LONG", &["4.1", "5.0"]),
    renamed("counter_cache_size_in_mb", "counter_cache_size", "MEBIBYTES_DATA_STORAGE_LONG", &["4.1", "5.0"]),
    renamed("cache_load_timeout_seconds", "cache_load_timeout", "NEGATIVE_SECONDS_DURATION", &["4.1", "5.0"]),
    renamed("networking_cache_size_in_mb", "networking_cache_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("file_cache_size_in_mb", "file_cache_size", "MEBIBYTES_DATA_STORAGE_INT", &["4.1", "5.0"]),
    renamed("index_summary_capacity_in_mb", "index_summary_capacity", "MEBIBYTES_DATA_STORAGE_LONG", &["4.1", "5.0"]),
    renamed("index_summary_resize_interval_in_minutes", "index_summary_resize_interval", "MINUTES_CUSTOM_DURATION", &["4.1", "5.0"]),
    renamed("gc_log_threshold_in_ms", "gc_log_threshold", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("gc_warn_threshold_in_ms", "gc_warn_threshold", "MILLIS_DURATION_INT", &["4.1", "5.0"]),
    renamed("tracetype_query_ttl", "trace_type_query_ttl", "SECONDS_DURATION", &["4.1", "5.0"]),
    renamed("tracetype_repair_ttl", "trace_type_repair_ttl", "SECONDS_DURATION", &["4.1", "5.0"]),
    renamed("prepared_statements_cache_size_mb", "prepared_statements_cache_size", "MEBIBYTES_DATA_STORAGE_LONG", &["4.1", "5.0"]),
    renamed("enable_user_defined_functions", "user_defined_functions_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_scripted_user_defined_functions", "scripted_user_defined_functions_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_materialized_views", "materialized_views_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_transient_replication", "transient_replication_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_sasi_indexes", "sasi_indexes_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_drop_compact_storage", "drop_compact_storage_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("enable_user_defined_functions_threads", "user_defined_functions_threads_enabled", "IDENTITY", &["4.1", "5.0"]),
    renamed("user_defined_function_warn_timeout", "user_defined_functions_warn_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("user_defined_function_fail_timeout", "user_defined_functions_fail_timeout", "MILLIS_DURATION_LONG", &["4.1", "5.0"]),
    renamed("validation_preview_purge_head_start_in_sec", "validation_preview_purge_head_start", "NEGATIVE_SECONDS_DURATION", &["4.1", "5.0"]),
    renamed("keyspace_count_warn_threshold", "keyspaces_warn_threshold", "KEYSPACE_COUNT_THRESHOLD_TO_GUARDRAIL", &["5.0"]),
    renamed("table_count_warn_threshold", "tables_warn_threshold", "TABLE_COUNT_THRESHOLD_TO_GUARDRAIL", &["5.0"]),
    renamed("compaction_large_partition_warning_threshold_mb", "partition_size_warn_threshold", "LONG_BYTES_DATASTORAGE_MEBIBYTES_INT", &["5.0"]),
    renamed("compaction_large_partition_warning_threshold", "partition_size_warn_threshold", "LONG_BYTES_DATASTORAGE_MEBIBYTES_DATASTORAGE", &["5.0"]),
    renamed("compaction_tombstone_warning_threshold", "partition_tombstones_warn_threshold", "INTEGER_PRIMITIVE_LONG", &["5.0"]),
    RenamedSetting {
        section: Some("server_encryption_options"),
        old: "enable_legacy_ssl_storage_port",
        new: "legacy_ssl_storage_port_enabled",
        converter: "IDENTITY",
        releases: &["4.1", "5.0"],
    },
];

/// The names [`RENAMED_SETTINGS`] pairs with `key` in `section`: the other
/// names of its setting that Cassandra refuses beside it.
pub fn renamed_partners(section: Option<&str>, key: &str) -> Vec<&'static str> {
    RENAMED_SETTINGS
        .iter()
        .filter(|r| r.section == section)
        .filter_map(|r| {
            if r.old == key {
                Some(r.new)
            } else if r.new == key {
                Some(r.old)
            } else {
                None
            }
        })
        .collect()
}

/// The renamed settings a fragment sets under both names (at the top level,
/// or both inside the pair's section), in the table's order: Cassandra 4.1
/// and 5.0 refuse such a file whatever it is merged onto. A fragment that
/// is not YAML, or not a mapping, sets none.
pub fn renamed_twice_in(fragment: &str) -> Vec<&'static RenamedSetting> {
    let Ok(Value::Mapping(map)) = serde_norway::from_str::<Value>(fragment) else {
        return Vec::new();
    };
    RENAMED_SETTINGS
        .iter()
        .filter(|r| {
            let level = match r.section {
                None => Some(&map),
                Some(section) => map.get(section).and_then(Value::as_mapping),
            };
            level.is_some_and(|m| m.contains_key(r.old) && m.contains_key(r.new))
        })
        .collect()
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
            refused_in_config_map(Some(&data), mode, "4.1.8", false)
                .iter()
                .map(|r| r.key)
                .collect()
        };
        assert_eq!(keys(ClusterMode::Cassandra), ["auto_bootstrap"]);
        assert_eq!(keys(ClusterMode::Scylla), ["api_port"]);
        assert!(refused_in_config_map(None, ClusterMode::Cassandra, "4.1.8", false).is_empty());
    }

    #[test]
    fn a_release_refuses_the_settings_it_removed() {
        let keys = |release| -> Vec<&str> { unread_in(release).iter().map(|r| r.key).collect() };
        assert!(keys(Some("4.1.8")).contains(&"start_rpc"));
        assert!(keys(Some("5.0.3")).contains(&"start_rpc"));
        // 4.1 still reads the batch window (deprecated); 5.0 does not.
        assert!(!keys(Some("4.1.8")).contains(&"commitlog_sync_batch_window_in_ms"));
        assert!(keys(Some("5.0.3")).contains(&"commitlog_sync_batch_window_in_ms"));
        // 3.11 reads them; a release the table has not read, or no release
        // at all, is left to Cassandra's own check.
        for release in [
            Some("3.11.19"),
            Some("4.0.13"),
            Some("latest"),
            Some("4"),
            None,
        ] {
            assert_eq!(keys(release), Vec::<&str>::new(), "{release:?}");
        }
        let fragment = "concurrent_reads: 32\nstart_rpc: false\nrequest_scheduler: x\n";
        let data = BTreeMap::from([("cassandra.yaml".to_string(), fragment.to_string())]);
        let refused = |mode, release| -> Vec<&str> {
            refused_in_config_map(Some(&data), mode, release, false)
                .iter()
                .map(|r| r.key)
                .collect()
        };
        assert_eq!(
            refused(ClusterMode::Cassandra, "4.1.8"),
            ["start_rpc", "request_scheduler"]
        );
        assert_eq!(
            refused(ClusterMode::Cassandra, "3.11.19"),
            Vec::<&str>::new()
        );
        let reason = refused_for("start_rpc", &unread_in(Some("4.1.8")))
            .unwrap()
            .reason;
        assert!(
            reason.contains("Thrift") && reason.contains("4.1"),
            "{reason}"
        );
        // 5.0's own settings, before 5.0.
        assert!(keys(Some("4.1.8")).contains(&"storage_compatibility_mode"));
        assert!(!keys(Some("5.0.3")).contains(&"storage_compatibility_mode"));
        let reason = refused_for("storage_compatibility_mode", &unread_in(Some("4.1.8")))
            .unwrap()
            .reason;
        assert!(reason.contains("spec.version of 5.0"), "{reason}");
        // A refused key stays refused whatever the release.
        assert_eq!(
            refused_for("auto_bootstrap", &[]).unwrap().key,
            "auto_bootstrap"
        );
    }

    /// A Cluster whose clients must log in refuses the three settings the
    /// operator then sets, in either mode and whatever the value; another
    /// may set them. One list with what the sidecar renders.
    #[test]
    fn an_authenticated_cluster_refuses_the_authentication_settings() {
        assert_eq!(
            AUTHENTICATION_KEYS
                .iter()
                .map(|r| r.key)
                .collect::<Vec<_>>(),
            crate::contract::auth::SETTINGS.map(|(key, _)| key)
        );
        let fragment = "concurrent_reads: 32\nauthenticator: AllowAllAuthenticator\nauthorizer: CassandraAuthorizer\nrole_manager: CassandraRoleManager\n";
        for mode in [ClusterMode::Cassandra, ClusterMode::Scylla] {
            let data = BTreeMap::from([(config_map_key(mode).to_string(), fragment.to_string())]);
            let refused = |authentication| -> Vec<&str> {
                refused_in_config_map(Some(&data), mode, "4.1.8", authentication)
                    .iter()
                    .map(|r| r.key)
                    .collect()
            };
            assert_eq!(
                refused(true),
                ["authenticator", "authorizer", "role_manager"],
                "{mode:?}"
            );
            assert_eq!(refused(false), Vec::<&str>::new(), "{mode:?}");
        }
        let reason = refused_for(
            "authenticator",
            &refused_by_cluster(ClusterMode::Cassandra, None, true),
        )
        .unwrap()
        .reason;
        assert!(
            reason.contains("spec.security.authentication")
                && reason.contains("without a password"),
            "{reason}"
        );
        // The release's own refusals stay.
        assert!(
            refused_by_cluster(ClusterMode::Cassandra, Some("4.1.8"), true)
                .iter()
                .any(|r| r.key == "start_rpc")
        );
    }

    /// The removed settings are 3.11's (its default file sets or mentions
    /// each) and gone from the default files of the releases that refuse
    /// them: the table holds no name a user could not have taken from
    /// 3.11, and none those files still document. (That the later releases' `Config` reads none
    /// of them, and every other 3.11 key, is checked against the released
    /// jars in tests/tests/cassandra_settings.rs.)
    #[test]
    fn removed_settings_come_from_3_11_and_left_the_later_files() {
        let mentioned = |version: &str, key: &str| {
            fixture(&format!("cassandra/{version}/cassandra.yaml"))
                .lines()
                .any(|l| {
                    l.trim_start_matches(['#', ' '])
                        .starts_with(&format!("{key}:"))
                })
        };
        for r in REMOVED_SETTINGS {
            let key = r.refused.key;
            assert!(mentioned("3.11", key), "{key} is not a 3.11 setting");
            for release in r.releases {
                assert!(!mentioned(release, key), "{key} is in {release}'s file");
            }
            assert_eq!(
                refused(key),
                None,
                "{key} is refused for every release already"
            );
        }
        // And the added ones are 5.0's, absent from 4.1's file.
        for r in ADDED_SETTINGS {
            let key = r.refused.key;
            assert!(mentioned("5.0", key), "{key} is not in 5.0's file");
            assert!(!mentioned("4.1", key), "{key} is in 4.1's file");
        }
    }

    #[test]
    fn the_token_allocation_factor_is_the_default_files_or_the_fragments() {
        for version in ["4.1", "5.0"] {
            let text = fixture(&format!("cassandra/{version}/cassandra.yaml"));
            assert_eq!(
                token_allocation_factor(&text),
                Some(DEFAULT_TOKEN_ALLOCATION_FACTOR),
                "{version}"
            );
        }
        // 3.11 has no such setting.
        assert_eq!(
            token_allocation_factor(&fixture("cassandra/3.11/cassandra.yaml")),
            None
        );
        assert_eq!(
            token_allocation_factor("allocate_tokens_for_local_replication_factor: 2\n"),
            Some(2)
        );
        assert_eq!(token_allocation_factor("concurrent_reads: 2\n"), None);
        assert_eq!(token_allocation_factor("not: [yaml"), None);
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

    fn fixture(file: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures")
            .join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The top-level keys of a real default file.
    fn default_keys(version: &str) -> Vec<String> {
        match serde_norway::from_str::<Value>(&fixture(&format!(
            "cassandra/{version}/cassandra.yaml"
        )))
        .unwrap()
        {
            Value::Mapping(m) => m.keys().map(|k| k.as_str().unwrap().to_string()).collect(),
            other => panic!("{version}: not a mapping: {other:?}"),
        }
    }

    #[test]
    fn each_renamed_pair_is_listed_once_and_names_two_keys() {
        for (i, a) in RENAMED_SETTINGS.iter().enumerate() {
            assert_ne!(a.old, a.new, "{a:?}");
            assert!(!a.releases.is_empty(), "{a:?}");
            assert!(
                RENAMED_SETTINGS[i + 1..]
                    .iter()
                    .all(|b| (b.section, b.old, b.new) != (a.section, a.old, a.new)),
                "{a:?} twice"
            );
        }
        // The pairs the 3.11-style fragment of the sidecar's test relies on.
        for (old, new) in [
            ("read_request_timeout_in_ms", "read_request_timeout"),
            ("column_index_cache_size_in_kb", "column_index_cache_size"),
            ("key_cache_size_in_mb", "key_cache_size"),
            ("compaction_throughput_mb_per_sec", "compaction_throughput"),
        ] {
            assert_eq!(renamed_partners(None, old), [new], "{old}");
            assert_eq!(renamed_partners(None, new), [old], "{new}");
        }
        assert!(renamed_partners(None, "num_tokens").is_empty());
        // A nested pair is not a top-level one.
        assert!(renamed_partners(None, "enable_legacy_ssl_storage_port").is_empty());
        assert_eq!(
            renamed_partners(
                Some("server_encryption_options"),
                "enable_legacy_ssl_storage_port"
            ),
            ["legacy_ssl_storage_port_enabled"]
        );
    }

    /// Every setting of the real 3.11 default file that the 4.1 or 5.0
    /// file no longer holds under its name is in the table (or is one that
    /// 4.x removed without a successor): a 3.11 fragment's name that is
    /// missing here would end up beside its new name.
    #[test]
    fn every_setting_the_real_4_1_and_5_0_files_renamed_is_in_the_table() {
        // Gone in 4.x without a new name (Thrift, the request scheduler),
        // or kept under its name but no longer in the default file.
        let without_successor = [
            "back_pressure_enabled",
            "back_pressure_strategy",
            "request_scheduler",
            "rpc_port",
            "rpc_server_type",
            "start_rpc",
            "thrift_framed_transport_size_in_mb",
            "thrift_prepared_statements_cache_size_mb",
            "windows_timer_interval",
        ];
        let old = default_keys("3.11");
        for version in ["4.1", "5.0"] {
            let new = default_keys(version);
            for key in old.iter().filter(|k| !new.contains(k)) {
                if without_successor.contains(&key.as_str()) {
                    continue;
                }
                let pairs: Vec<_> = RENAMED_SETTINGS
                    .iter()
                    .filter(|r| {
                        r.section.is_none() && r.old == key && r.releases.contains(&version)
                    })
                    .collect();
                assert!(
                    !pairs.is_empty(),
                    "{key} of 3.11 is not in the {version} file and has no new name in the table"
                );
            }
        }
    }

    /// On the real default files: no file holds an old name (the sidecar's
    /// rule keys on the fragment), none holds both names of a pair, and a
    /// pair of one release only never makes the other release's file drop a
    /// setting of its own: where that file holds one of its names, it does
    /// not mention the other at all (the release does not know it).
    #[test]
    fn the_real_default_files_agree_with_the_table() {
        for version in ["4.1", "5.0"] {
            let keys = default_keys(version);
            let text = fixture(&format!("cassandra/{version}/cassandra.yaml"));
            let holds = |name: &str| keys.iter().any(|k| k == name);
            let mut new_names_held = 0;
            for r in RENAMED_SETTINGS.iter().filter(|r| r.section.is_none()) {
                assert!(
                    !(holds(r.old) && holds(r.new)),
                    "{version} holds both {} and {}",
                    r.old,
                    r.new
                );
                if r.releases.contains(&version) {
                    assert!(!holds(r.old), "{version} holds the old name {}", r.old);
                    new_names_held += usize::from(holds(r.new));
                } else {
                    for (held, other) in [(r.old, r.new), (r.new, r.old)] {
                        assert!(
                            !holds(held) || !text.contains(other),
                            "{version} holds {held} and knows {other}, a pair of {:?} only",
                            r.releases
                        );
                    }
                }
            }
            // The 4.1 and 5.0 files are written in the new names.
            assert!(new_names_held >= 35, "{version}: {new_names_held}");
        }
    }

    #[test]
    fn a_fragment_naming_one_setting_twice_is_found() {
        let twice = |text: &str| -> Vec<(&str, &str)> {
            renamed_twice_in(text)
                .iter()
                .map(|r| (r.old, r.new))
                .collect()
        };
        assert_eq!(
            twice(
                "read_request_timeout_in_ms: 10000\nread_request_timeout: 5000ms\nnum_tokens: 16\n"
            ),
            [("read_request_timeout_in_ms", "read_request_timeout")]
        );
        assert_eq!(
            twice(
                "server_encryption_options:\n  enable_legacy_ssl_storage_port: true\n  legacy_ssl_storage_port_enabled: false\n"
            ),
            [(
                "enable_legacy_ssl_storage_port",
                "legacy_ssl_storage_port_enabled"
            )]
        );
        for once in [
            "read_request_timeout_in_ms: 10000\nwrite_request_timeout: 2s\n",
            // The names at different levels are different settings.
            "enable_legacy_ssl_storage_port: true\nserver_encryption_options:\n  legacy_ssl_storage_port_enabled: false\n",
            "",
            "a: [",
        ] {
            assert_eq!(twice(once), Vec::<(&str, &str)>::new(), "{once:?}");
        }
    }
}
