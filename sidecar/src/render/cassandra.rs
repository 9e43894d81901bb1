//! Cassandra mode: cassandra.yaml, cassandra-rackdc.properties and the
//! environment `cassandra-env.sh` reads (heap, `JVM_EXTRA_OPTS`). Pure.

use std::net::IpAddr;

use super::heap::{calculate_heap_sizes, cpu_cores, memory_mb};
use super::jvm::jvm_extra_opts;
use super::rackdc::render_rackdc;
use super::yaml::{Identity, render_main_file};
use super::{MemberConfig, RACKDC_FILE, RenderError, Rendered, RenderedFile};

/// The main file of Cassandra.
pub const CASSANDRA_YAML: &str = "cassandra.yaml";

pub(super) fn render_cassandra(
    config: &MemberConfig,
    defaults: &str,
) -> Result<Rendered, RenderError> {
    // Cassandra replaces by address only (there is no replace by host ID).
    let replace = match &config.replace_address {
        None => None,
        Some(text) => {
            Some(
                text.parse::<IpAddr>()
                    .map_err(|_| RenderError::InvalidReplaceAddress {
                        value: text.clone(),
                        expected: "an IP address",
                    })?,
            )
        }
    };
    let heap = match config.memory_limit {
        None => None,
        Some(limit) => {
            let cores = config
                .cpu_limit
                .map_or(u64::from(config.node_cpu_cores), cpu_cores);
            let heap = calculate_heap_sizes(memory_mb(limit), cores);
            if heap.new_size_mb == 0 {
                return Err(RenderError::MemoryLimitTooSmall {
                    limit_mb: memory_mb(limit),
                    minimum_mb: 8,
                });
            }
            Some(heap)
        }
    };
    let identity = Identity {
        cluster_name: &config.cluster_name,
        listen_address: config.pod_ip.to_string(),
        broadcast_address: config.broadcast_address.to_string(),
        seeds: config.seeds.join(","),
    };
    let mut managed = config
        .tls
        .as_ref()
        .map(super::tls::cassandra_options)
        .unwrap_or_default();
    managed.extend(super::auth::settings(config.authentication));
    let yaml = render_main_file(
        CASSANDRA_YAML,
        defaults,
        &identity,
        config.overrides.as_ref(),
        crds::overrides::RENAMED_SETTINGS,
        &crds::overrides::refused_by_cluster(
            config.mode,
            config.release.as_deref(),
            config.authentication,
        ),
        managed,
    )?;

    let mut env = Vec::new();
    if let Some(heap) = heap {
        env.push(("MAX_HEAP_SIZE".to_string(), heap.max_heap_size()));
        env.push(("HEAP_NEWSIZE".to_string(), heap.heap_newsize()));
    }
    env.push((
        "JVM_EXTRA_OPTS".to_string(),
        jvm_extra_opts(&config.jolokia_agent_jar, replace).join(" "),
    ));
    Ok(Rendered {
        files: vec![
            RenderedFile {
                name: CASSANDRA_YAML.to_string(),
                content: yaml,
            },
            RenderedFile {
                name: RACKDC_FILE.to_string(),
                content: render_rackdc(&config.datacenter, &config.rack),
            },
        ],
        env,
        args: Vec::new(),
        heap,
    })
}
