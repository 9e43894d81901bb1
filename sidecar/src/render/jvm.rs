//! JVM options of the Cassandra process: what the sidecar passes to
//! `cassandra-env.sh` through the environment. Pure.
//!
//! `jvm.options` / `jvm-server.options` take static flags only (no
//! variables), and `cassandra-env.sh` ends with
//! `JVM_OPTS="$JVM_OPTS $JVM_EXTRA_OPTS"` in 3.11, 4.1 and 5.0: per-member
//! flags go into `JVM_EXTRA_OPTS`. The heap goes into `MAX_HEAP_SIZE` and
//! `HEAP_NEWSIZE`, which the script turns into `-Xms`/`-Xmx` (and `-Xmn`
//! under CMS) itself; an `-Xmx` in `JVM_EXTRA_OPTS` would come after the
//! script's own and fight it.

use std::net::IpAddr;

use crds::contract::{JOLOKIA_PORT, data_dir};
use crds::v1alpha1::ClusterMode;

/// Where the init container installs the Jolokia agent (`install` copies
/// the image's plugins to `/mnt/shared/plugins`).
pub const DEFAULT_JOLOKIA_AGENT_JAR: &str = "/mnt/shared/plugins/jolokia-jvm-agent.jar";
/// The Jolokia agent's address: loopback only. Jolokia executes any MBean
/// operation without authentication; only the sidecar in the same Pod may
/// reach it.
pub const JOLOKIA_HOST: &str = "127.0.0.1";

/// Threads the Jolokia agent serves requests on.
///
/// The agent's HTTP server (the JDK's `com.sun.net.httpserver`) runs each
/// request on the executor the agent option `executor` names, and Jolokia
/// 1.x defaults to `single`: one thread for every request (jolokia/jolokia
/// branch 1.x, `agent/jvm/.../JolokiaServerConfig.java` `initExecutor`:
/// "single", "fixed" or "cached", default "single"; `initThreadNr`: option
/// `threadNr`, default 5; `JolokiaServer.createHttpServer`: "fixed" is
/// `Executors.newFixedThreadPool(threadNr)`; the same names are in the
/// 1.7.2 jar the image ships). A JMX operation holds its thread until it
/// returns, so a decommission, drain or cleanup of minutes held every
/// other request behind it: the readiness probe (OperationMode), the
/// gossip recorder and `nodetool` timed out and the member turned
/// NotReady. A fixed pool, not `cached`: requests that hang (a node in a
/// long GC) cannot grow threads without bound. At most one long operation
/// runs at a time (the sidecar and the operator's maintenance go one
/// operation per member), beside the probe, the gossip recorder and a
/// `nodetool`: four, and one spare.
pub const JOLOKIA_THREADS: u32 = 5;

/// The Jolokia agent's options after `-javaagent:<jar>=`.
///
/// `discoveryEnabled=false`: the 1.x JVM agent answers multicast discovery
/// by default (`default-jolokia-agent.properties` in the 1.7.2 jar:
/// `discoveryEnabled=true`; the option is `ConfigKey.DISCOVERY_ENABLED`):
/// a multicast listener that tells whoever asks on the Pod's network where
/// the agent is and what it runs in. Nothing here needs it (the sidecar
/// knows the address), and it is one more thread and socket in every
/// member. The pool options come after `policyLocation` only so that the
/// options before them read as they did.
pub fn jolokia_agent_options(jolokia_agent_jar: &str) -> String {
    let policy = crate::jolokia_access::policy_path(jolokia_agent_jar);
    format!(
        "port={JOLOKIA_PORT},host={JOLOKIA_HOST},policyLocation=file://{policy},\
         executor=fixed,threadNr={JOLOKIA_THREADS},discoveryEnabled=false"
    )
}

/// The file a heap dump goes to, in the root of the data volume.
pub const HEAP_DUMP_FILE: &str = "heapdump.hprof";

/// Where the JVM writes a heap dump when it runs out of heap: the images'
/// `jvm.options` (3.11) and `jvm-server.options` (4.0 and later) turn on
/// `-XX:+HeapDumpOnOutOfMemoryError`, and without a `-XX:HeapDumpPath` the
/// JVM writes into its working directory, the root of the image, which is
/// read-only in a member (`readOnlyRootFilesystem`): the dump that would
/// say why a member ran out of heap was lost ("Unable to create
/// java_pid….hprof: Read-only file system"). `cassandra-env.sh` sets the
/// path only from `CASSANDRA_HEAPDUMP_DIR`, which nothing sets.
///
/// On the data volume, because it is the only volume with room for a dump
/// (as large as the heap) that outlives the container: the scratch volumes
/// are emptyDirs on the Node's boot disk, whose filling gets the Pod
/// evicted. A file in the volume's root, not a directory: the JVM creates
/// no directory (a missing one is taken as the name of a file), and the
/// root exists whenever the member runs. One fixed name, which bounds the
/// space dumps take to one heap: the JVM never overwrites a dump (it
/// creates the file exclusively), so a member that runs out of heap at
/// every start keeps its first dump and cannot fill the disk its data needs
/// with one more heap per restart. Copy it out and delete it
/// (`kubectl cp`, `kubectl exec ... rm`) for the next one to be written.
/// Cassandra 5.0's own dump on an uncaught exception (off by default) goes
/// beside it: it takes the directory of a path ending in `.hprof`.
pub fn heap_dump_path() -> String {
    format!("{}/{HEAP_DUMP_FILE}", data_dir(ClusterMode::Cassandra))
}

/// The flags of `JVM_EXTRA_OPTS`: the heap dump's path
/// ([`heap_dump_path`]; `cassandra-env.sh` puts these flags last, and the
/// last `-XX:HeapDumpPath` is the JVM's), the Jolokia agent (on loopback, with the
/// access policy the sidecar writes beside it: `crate::jolokia_access`, and
/// a pool of threads: [`jolokia_agent_options`]), and
/// `-Dcassandra.replace_address_first_boot` when the member replaces a lost
/// node (`_first_boot`: ignored once the node has bootstrapped, so a
/// restart of the replacement is harmless).
pub fn jvm_extra_opts(jolokia_agent_jar: &str, replace_address: Option<IpAddr>) -> Vec<String> {
    let mut opts = vec![
        format!("-XX:HeapDumpPath={}", heap_dump_path()),
        format!(
            "-javaagent:{jolokia_agent_jar}={}",
            jolokia_agent_options(jolokia_agent_jar)
        ),
    ];
    if let Some(address) = replace_address {
        opts.push(format!("-Dcassandra.replace_address_first_boot={address}"));
    }
    opts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jolokia_is_bound_to_loopback_only_with_the_access_policy_and_a_thread_pool() {
        assert_eq!(
            jvm_extra_opts(DEFAULT_JOLOKIA_AGENT_JAR, None),
            [
                "-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof",
                "-javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false"
            ]
        );
    }

    /// The agent splits its options at `,` and each at the first `=`
    /// (`JvmAgentConfig.split`): every option is one `key=value` pair, each
    /// key once, none of them the agent's single-thread default.
    #[test]
    fn the_agent_options_are_distinct_key_value_pairs() {
        let options = jolokia_agent_options(DEFAULT_JOLOKIA_AGENT_JAR);
        let pairs: Vec<(&str, &str)> = options
            .split(',')
            .map(|kv| kv.split_once('=').expect(kv))
            .collect();
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "port",
                "host",
                "policyLocation",
                "executor",
                "threadNr",
                "discoveryEnabled"
            ]
        );
        assert!(pairs.contains(&("executor", "fixed")), "{options}");
        assert!(pairs.contains(&("discoveryEnabled", "false")), "{options}");
        let threads: u32 = pairs
            .iter()
            .find(|(k, _)| *k == "threadNr")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        assert!(
            threads >= 4,
            "probe, recorder, nodetool and one long operation: {threads}"
        );
    }

    /// The heap dump of a member that runs out of heap goes to a file in the
    /// root of its data volume (the path the controller mounts it at, from
    /// the same contract), the only writable place with room for it: on a
    /// real cluster the JVM tried the image's read-only root and the dump
    /// was lost. Exactly one such flag, naming a file (the JVM creates no
    /// directory) directly in the mount's root, which exists whenever the
    /// member runs.
    #[test]
    fn heap_dumps_go_to_a_file_in_the_data_volume_root() {
        let opts = jvm_extra_opts(
            DEFAULT_JOLOKIA_AGENT_JAR,
            Some("10.96.0.12".parse().unwrap()),
        );
        let paths: Vec<&str> = opts
            .iter()
            .filter_map(|o| o.strip_prefix("-XX:HeapDumpPath="))
            .collect();
        assert_eq!(paths.len(), 1, "{opts:?}");
        let path = std::path::Path::new(paths[0]);
        assert_eq!(
            path.parent(),
            Some(std::path::Path::new(data_dir(ClusterMode::Cassandra)))
        );
        assert_eq!(
            path.extension().and_then(|e| e.to_str()),
            Some("hprof"),
            "a file, not a directory: {opts:?}"
        );
        assert_eq!(
            path,
            std::path::Path::new("/var/lib/cassandra/heapdump.hprof")
        );
    }

    #[test]
    fn replacing_adds_the_first_boot_property() {
        let opts = jvm_extra_opts("/x/agent.jar", Some("10.96.0.12".parse().unwrap()));
        assert_eq!(
            opts,
            [
                "-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof",
                "-javaagent:/x/agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///x/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false",
                "-Dcassandra.replace_address_first_boot=10.96.0.12",
            ]
        );
    }
}
