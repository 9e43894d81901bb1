//! Scylla mode: scylla.yaml, cassandra-rackdc.properties and the arguments
//! of the `scylla` binary. Pure.
//!
//! The sidecar runs `scylla` itself, as the image's entrypoint
//! (`docker-entrypoint.py` → supervisord → `scylla-server.sh`) would, with
//! the image's `SCYLLA_ARGS` ([`IMAGE_ARGS`]) and the arguments
//! `scyllasetup.py` composes: `--listen-address`,
//! `--rpc-address`, `--seed-provider-parameters seeds=...`,
//! `--broadcast-address`, `--broadcast-rpc-address`, `--api-address`,
//! `--smp`, `--memory`, `--overprovisioned` (no cpuset is pinned: Kubernetes
//! shares the Node's CPUs unless its static CPU manager says otherwise),
//! plus `--developer-mode 0` (the entrypoint's default is 1, which skips
//! ScyllaDB's production checks). The addresses and seeds are in
//! scylla.yaml as well; they are the same values. The REST API is bound to
//! the Pod's loopback: the sidecar is its only client, and it is
//! unauthenticated. The paths (`--options-file`, `--workdir`,
//! `--io-properties-file`) are added by the sidecar, which knows them.
//!
//! Sizing:
//! - `--smp`: the CPU limit rounded up, at least 1 (none without a limit:
//!   Scylla takes every processor it sees).
//! - `--memory`: the memory limit minus a reserve for the sidecar, the
//!   entrypoint's helpers and memory Scylla allocates outside Seastar:
//!   max(512 MiB, 1/10 of the limit). Seastar would otherwise size itself
//!   from the node's memory and the container would be OOM-killed. A limit
//!   below 1.5 GiB is refused, and so is one that leaves a shard less than
//!   1 GiB: ScyllaDB terminates then outside developer mode.
//!
//! Replacing: an IP address becomes `--replace-address-first-boot`
//! (deprecated by ScyllaDB, refused by releases that replace by host ID
//! only), a host ID (UUID) becomes `--replace-node-first-boot`.

use super::heap::cpu_cores;
use super::rackdc::render_rackdc;
use super::yaml::{Identity, RPC_ADDRESS, render_main_file};
use super::{MemberConfig, RACKDC_FILE, RenderError, Rendered, RenderedFile};

/// The main file of Scylla.
pub const SCYLLA_YAML: &str = "scylla.yaml";
/// The smallest memory limit Scylla is started with: 1 GiB for one shard
/// plus the least reserve.
pub const MIN_MEMORY_LIMIT_MB: u64 = MIN_SHARD_MB + MIN_RESERVE_MB;
/// What ScyllaDB needs per shard outside developer mode
/// (`verify_adequate_memory_per_shard` in main.cc: below 1 GiB it
/// terminates).
pub const MIN_SHARD_MB: u64 = 1024;
/// The least memory left outside Seastar.
pub const MIN_RESERVE_MB: u64 = 512;
/// The arguments the scylla image gives every start (`SCYLLA_ARGS` of
/// /etc/default/scylla-server in dist/docker/debian/build_docker.sh).
pub const IMAGE_ARGS: [&str; 8] = [
    "--log-to-syslog",
    "0",
    "--log-to-stdout",
    "1",
    "--default-log-level",
    "info",
    "--network-stack",
    "posix",
];
/// Where ScyllaDB serves its REST API: the Pod's loopback.
pub const API_ADDRESS: &str = "127.0.0.1";

/// `--memory` in MiB for a memory limit in MiB.
pub fn scylla_memory_mb(limit_mb: u64) -> Result<u64, RenderError> {
    if limit_mb < MIN_MEMORY_LIMIT_MB {
        return Err(RenderError::MemoryLimitTooSmall {
            limit_mb,
            minimum_mb: MIN_MEMORY_LIMIT_MB,
        });
    }
    Ok(limit_mb - MIN_RESERVE_MB.max(limit_mb / 10))
}

pub(super) fn render_scylla(
    config: &MemberConfig,
    defaults: &str,
) -> Result<Rendered, RenderError> {
    let replace_arg = match &config.replace_address {
        None => None,
        Some(text) if text.parse::<std::net::IpAddr>().is_ok() => {
            Some(("--replace-address-first-boot", text.clone()))
        }
        Some(text) if is_host_id(text) => Some(("--replace-node-first-boot", text.clone())),
        Some(text) => {
            return Err(RenderError::InvalidReplaceAddress {
                value: text.clone(),
                expected: "an IP address or a host ID",
            });
        }
    };
    let memory = match config.memory_limit {
        None => None,
        Some(limit) => Some(scylla_memory_mb(super::heap::memory_mb(limit))?),
    };
    let smp = config.cpu_limit.map(cpu_cores);
    if let (Some(memory_mb), Some(shards)) = (memory, smp)
        && memory_mb / shards.max(1) < MIN_SHARD_MB
    {
        return Err(RenderError::MemoryPerShardTooSmall {
            memory_mb,
            shards,
            minimum_mb: MIN_SHARD_MB,
        });
    }
    let seeds = config.seeds.join(",");
    let identity = Identity {
        cluster_name: &config.cluster_name,
        listen_address: config.pod_ip.to_string(),
        broadcast_address: config.broadcast_address.to_string(),
        seeds: seeds.clone(),
    };
    let mut managed = config
        .tls
        .as_ref()
        .map(super::tls::scylla_options)
        .unwrap_or_default();
    managed.extend(super::auth::settings(config.authentication));
    // ScyllaDB kept Cassandra 3.x's names (read_request_timeout_in_ms)
    // and has no rule against two names of one setting.
    let yaml = render_main_file(
        SCYLLA_YAML,
        defaults,
        &identity,
        config.overrides.as_ref(),
        &[],
        &crds::overrides::refused_by_cluster(
            config.mode,
            config.release.as_deref(),
            config.authentication,
        ),
        managed,
    )?;

    // The image's own (`SCYLLA_ARGS` in /etc/default/scylla-server, as
    // dist/docker's build script sets it): logs on the container's output.
    let mut args: Vec<String> = IMAGE_ARGS.iter().map(|a| a.to_string()).collect();
    args.extend([
        "--listen-address".to_string(),
        config.pod_ip.to_string(),
        "--rpc-address".to_string(),
        RPC_ADDRESS.to_string(),
        "--broadcast-address".to_string(),
        config.broadcast_address.to_string(),
        "--broadcast-rpc-address".to_string(),
        config.broadcast_address.to_string(),
        "--seed-provider-parameters".to_string(),
        format!("seeds={seeds}"),
        "--api-address".to_string(),
        API_ADDRESS.to_string(),
        "--developer-mode".to_string(),
        "0".to_string(),
        "--overprovisioned".to_string(),
    ]);
    if let Some(shards) = smp {
        args.push("--smp".to_string());
        args.push(shards.to_string());
    }
    if let Some(mb) = memory {
        args.push("--memory".to_string());
        args.push(format!("{mb}M"));
    }
    if let Some((flag, value)) = replace_arg {
        args.push(flag.to_string());
        args.push(value);
    }
    Ok(Rendered {
        files: vec![
            RenderedFile {
                name: SCYLLA_YAML.to_string(),
                content: yaml,
            },
            RenderedFile {
                name: RACKDC_FILE.to_string(),
                content: render_rackdc(&config.datacenter, &config.rack),
            },
        ],
        env: Vec::new(),
        args,
        heap: None,
    })
}

/// A host ID: a UUID in its 8-4-4-4-12 hex form.
fn is_host_id(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}
