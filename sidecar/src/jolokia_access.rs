//! The Jolokia access policy shipped with the agent (`jolokia-access.xml`,
//! Jolokia's policy format): defence in depth beside the agent's loopback
//! binding. Only the request types, MBean attributes and operations that
//! the sidecar and `cassandra-operator nodetool` use are allowed; every other
//! attribute, operation and request type is refused by the agent itself, so
//! that even a process inside the Pod cannot invoke arbitrary JMX
//! operations (`forceRemoveCompletion`, `java.lang:type=Runtime`, thread
//! dumps, ...) through it. The list is kept here, in one place, beside the
//! client that makes the calls; `sidecar/jolokia-access.xml` is its
//! committed rendering (a test fails when it is stale). Pure.
//!
//! Jolokia reads the file named by the agent option `policyLocation`: the
//! sidecar writes it beside the agent jar before it starts Cassandra
//! ([`policy_path`]).

use std::fmt::Write as _;

use crate::jolokia::{
    ENDPOINT_SNITCH_INFO, FAILURE_DETECTOR, GOSSIPER, MESSAGING_SERVICE, STORAGE_SERVICE,
};

/// The file name of the policy, beside the agent jar.
pub const FILE_NAME: &str = "jolokia-access.xml";

/// The committed rendering of [`policy_xml`].
pub const COMMITTED: &str = include_str!("../jolokia-access.xml");

/// What may be done with one MBean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The MBean's object name.
    pub mbean: &'static str,
    /// Attributes that may be read (never written).
    pub attributes: &'static [&'static str],
    /// Operations that may be executed.
    pub operations: &'static [&'static str],
}

/// The Jolokia request types allowed wholesale: only the agent's version.
/// Jolokia 1.x (`MBeanAccessChecker`) lets a type listed under
/// `<commands>` reach every MBean the `<deny>` section does not name, while
/// a type left out is refused unless the `<allow>` section names the MBean
/// and the attribute (`mode="read"`: read only) or the operation. So
/// `read` and `exec` are left out on purpose, and `write`, `list` and
/// `search` are refused outright.
pub const COMMANDS: &[&str] = &["version"];

/// Every MBean the sidecar and `nodetool` reach, with what they read and
/// call (`jolokia::StorageService`, `nodetool::gather_info`,
/// `nodetool::gather_status`, `jolokia::RingAttributes` for both the 3.11
/// names and the 4.0+ `...WithPort` ones).
pub const ALLOWED: &[Allowed] = &[
    Allowed {
        mbean: STORAGE_SERVICE,
        attributes: &[
            "ReleaseVersion",
            "OperationMode",
            "ClusterName",
            "LocalHostId",
            "LoadString",
            "Tokens",
            // RingAttributes, 3.11
            "LiveNodes",
            "UnreachableNodes",
            "JoiningNodes",
            "LeavingNodes",
            "MovingNodes",
            "EndpointToHostId",
            "LoadMap",
            "Ownership",
            // RingAttributes, 4.0+
            "LiveNodesWithPort",
            "UnreachableNodesWithPort",
            "JoiningNodesWithPort",
            "LeavingNodesWithPort",
            "MovingNodesWithPort",
            "EndpointWithPortToHostId",
            "LoadMapWithPort",
            "OwnershipWithPort",
            // the repair after a same-address replace (member::repair)
            "NonLocalStrategyKeyspaces",
            // the maintenance operations (member::maintenance):
            // upgradesstables' keyspaces, the ring's tokens and its
            // partitioner for the subranges of a scheduled repair.
            "Keyspaces",
            "TokenToEndpointMap",
            "PartitionerName",
        ],
        // drain (preStop, SIGTERM), decommission (scale-down), getTokens
        // (nodetool status), and nodetool cleanup by the signed name it is
        // called with (the agent matches the name the request gives: the
        // bare name let no call through, 403 on a real agent).
        operations: &[
            "drain",
            "decommission",
            "getTokens",
            crate::jolokia::CLEANUP,
            // the repair after a same-address replace (member::repair):
            // started, then followed by its status (no notifications over
            // Jolokia's reads).
            crate::jolokia::REPAIR_ASYNC,
            crate::jolokia::PARENT_REPAIR_STATUS,
            // the maintenance operations (member::maintenance), by the
            // signed names they are called with, and the stop of a
            // scheduled repair whose request was withdrawn.
            crate::jolokia::UPGRADE_SSTABLES,
            crate::jolokia::UPGRADE_SSTABLES_BEFORE_4_1,
            crate::jolokia::TERMINATE_REPAIRS,
            // the flush before a cleanup (member::maintenance).
            crate::jolokia::FLUSH,
        ],
    },
    Allowed {
        mbean: FAILURE_DETECTOR,
        // the member's gossip record (member::gossip): who it sees up, and
        // by which generation.
        attributes: &["SimpleStates", "AllEndpointStates"],
        operations: &[],
    },
    Allowed {
        mbean: GOSSIPER,
        attributes: &[],
        // the seeds of a running member (member::seeds): a member being
        // replaced is a seed while it is, so that the others gossip to it.
        operations: &["reloadSeeds"],
    },
    Allowed {
        mbean: MESSAGING_SERVICE,
        attributes: &[],
        // a renewed member certificate or CA bundle read again
        // (member::tls), without a restart: what `nodetool reloadssl` calls.
        operations: &["reloadSslCertificates"],
    },
    Allowed {
        mbean: ENDPOINT_SNITCH_INFO,
        attributes: &["Datacenter", "Rack"],
        // nodetool status: each endpoint's datacenter and rack.
        operations: &["getDatacenter", "getRack"],
    },
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The policy in Jolokia's format: the commands allowed wholesale, then
/// the `<allow>` section, the only way to the MBeans (see [`COMMANDS`]).
/// An operation is matched by the name the request gives, so the client
/// calls them without a signature.
pub fn policy_xml() -> String {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!-- Rendered from sidecar/src/jolokia_access.rs: edit the list there.\n     \
         Only what the cassandra-operator sidecar and nodetool use; everything\n     \
         else is refused by the Jolokia agent. -->\n\
         <restrict>\n  <commands>\n",
    );
    for command in COMMANDS {
        let _ = writeln!(xml, "    <command>{command}</command>");
    }
    xml.push_str("  </commands>\n  <allow>\n");
    for allowed in ALLOWED {
        let _ = writeln!(
            xml,
            "    <mbean>\n      <name>{}</name>",
            escape(allowed.mbean)
        );
        for attribute in allowed.attributes {
            let _ = writeln!(
                xml,
                "      <attribute mode=\"read\">{}</attribute>",
                escape(attribute)
            );
        }
        for operation in allowed.operations {
            let _ = writeln!(xml, "      <operation>{}</operation>", escape(operation));
        }
        xml.push_str("    </mbean>\n");
    }
    xml.push_str("  </allow>\n</restrict>\n");
    xml
}

/// Where the policy goes: beside the agent jar (the install container puts
/// the jar on the Pod's shared volume).
pub fn policy_path(agent_jar: &str) -> String {
    match agent_jar.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{FILE_NAME}"),
        None => FILE_NAME.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_policy_is_up_to_date() {
        assert!(
            COMMITTED == policy_xml(),
            "sidecar/jolokia-access.xml is stale: run \
             `cargo test -p sidecar jolokia_access -- --ignored` to rewrite it"
        );
    }

    /// Rewrites the committed file from the list.
    #[test]
    #[ignore = "rewrites sidecar/jolokia-access.xml"]
    fn write_the_committed_policy() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE_NAME);
        std::fs::write(path, policy_xml()).unwrap();
    }

    #[test]
    fn the_policy_lists_what_the_client_calls_and_nothing_dangerous() {
        let xml = policy_xml();
        for needed in [
            "<command>version</command>",
            "<name>org.apache.cassandra.db:type=StorageService</name>",
            "<operation>drain</operation>",
            "<operation>decommission</operation>",
            "<attribute mode=\"read\">OperationMode</attribute>",
            "<name>org.apache.cassandra.net:type=Gossiper</name>",
            "<operation>reloadSeeds</operation>",
        ] {
            assert!(xml.contains(needed), "{needed}");
        }
        for refused in [
            // Listed, they would open every MBean (see COMMANDS).
            "<command>read</command>",
            "<command>exec</command>",
            "<command>write</command>",
            "<command>search</command>",
            "<command>list</command>",
            "forceRemoveCompletion",
            "removeNode",
            "assassinateEndpoint",
            // no MBean of the JVM's own (the signature of cleanup names
            // java.lang.String, which is no MBean)
            "<name>java.lang",
            "*",
        ] {
            assert!(!xml.contains(refused), "{refused}");
        }
        // Every name the client reads on 3.11 and 4.0+ is there.
        for version in ["3.11.19", "4.1.8", "5.0.3"] {
            let v = crate::jolokia::CassandraVersion::parse(version).unwrap();
            let ring = crate::jolokia::RingAttributes::for_version(&v);
            for name in [
                ring.live,
                ring.unreachable,
                ring.joining,
                ring.leaving,
                ring.moving,
                ring.host_ids,
                ring.loads,
                ring.ownership,
            ] {
                assert!(ALLOWED[0].attributes.contains(&name), "{version} {name}");
            }
            let (operation, _) = crate::jolokia::decommission_call(&v);
            assert!(ALLOWED[0].operations.contains(&operation));
            // nodetool cleanup
            assert!(ALLOWED[0].operations.contains(&crate::jolokia::CLEANUP));
            // the repair after a replace (member::repair)
            for operation in [
                crate::jolokia::REPAIR_ASYNC,
                crate::jolokia::PARENT_REPAIR_STATUS,
            ] {
                assert!(ALLOWED[0].operations.contains(&operation), "{operation}");
            }
            assert!(ALLOWED[0].attributes.contains(&"NonLocalStrategyKeyspaces"));
            // the maintenance operations (member::maintenance)
            let upgrade = crate::jolokia::upgrade_sstables_request(&v, "ks", 2);
            let upgrade = upgrade.body()["operation"].as_str().unwrap().to_string();
            assert!(
                ALLOWED[0].operations.contains(&upgrade.as_str()),
                "{version} {upgrade}"
            );
            assert!(
                ALLOWED[0]
                    .operations
                    .contains(&crate::jolokia::TERMINATE_REPAIRS)
            );
            for attribute in ["Keyspaces", "TokenToEndpointMap", "PartitionerName"] {
                assert!(ALLOWED[0].attributes.contains(&attribute), "{attribute}");
            }
        }
    }

    #[test]
    fn the_policy_sits_beside_the_agent() {
        assert_eq!(
            policy_path("/mnt/shared/plugins/jolokia-jvm-agent.jar"),
            "/mnt/shared/plugins/jolokia-access.xml"
        );
        assert_eq!(policy_path("agent.jar"), "jolokia-access.xml");
    }
}
