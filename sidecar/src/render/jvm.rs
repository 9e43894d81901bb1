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

/// Where the init container installs the Jolokia agent (`install` copies
/// the image's plugins to `/mnt/shared/plugins`).
pub const DEFAULT_JOLOKIA_AGENT_JAR: &str = "/mnt/shared/plugins/jolokia-jvm-agent.jar";
/// The Jolokia agent's port.
pub const JOLOKIA_PORT: u16 = 8778;
/// The Jolokia agent's address: loopback only. Jolokia executes any MBean
/// operation without authentication; only the sidecar in the same Pod may
/// reach it.
pub const JOLOKIA_HOST: &str = "127.0.0.1";

/// The flags of `JVM_EXTRA_OPTS`: the Jolokia agent (on loopback, with the
/// access policy the sidecar writes beside it: `crate::jolokia_access`), and
/// `-Dcassandra.replace_address_first_boot` when the member replaces a lost
/// node (`_first_boot`: ignored once the node has bootstrapped, so a
/// restart of the replacement is harmless).
pub fn jvm_extra_opts(jolokia_agent_jar: &str, replace_address: Option<IpAddr>) -> Vec<String> {
    let policy = crate::jolokia_access::policy_path(jolokia_agent_jar);
    let mut opts = vec![format!(
        "-javaagent:{jolokia_agent_jar}=port={JOLOKIA_PORT},host={JOLOKIA_HOST},policyLocation=file://{policy}"
    )];
    if let Some(address) = replace_address {
        opts.push(format!("-Dcassandra.replace_address_first_boot={address}"));
    }
    opts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jolokia_is_bound_to_loopback_only_with_the_access_policy() {
        assert_eq!(
            jvm_extra_opts(DEFAULT_JOLOKIA_AGENT_JAR, None),
            [
                "-javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml"
            ]
        );
    }

    #[test]
    fn replacing_adds_the_first_boot_property() {
        let opts = jvm_extra_opts("/x/agent.jar", Some("10.96.0.12".parse().unwrap()));
        assert_eq!(
            opts,
            [
                "-javaagent:/x/agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///x/jolokia-access.xml",
                "-Dcassandra.replace_address_first_boot=10.96.0.12",
            ]
        );
    }
}
