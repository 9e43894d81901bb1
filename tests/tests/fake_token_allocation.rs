//! The fake Cassandra node refuses to allocate tokens where real 4.1 and
//! 5.0 refuse (`TokenAllocation.createStrategy`): real `fake-cassandra`
//! processes on configurations rendered by `sidecar::render` from the
//! shipped cassandra.yaml (which sets
//! `allocate_tokens_for_local_replication_factor: 3`), a ring kept by an
//! in-process kubesim.

use std::process::Command;
use std::time::Duration;

use crds::quantity::Quantity;
use crds::v1alpha1::ClusterMode;
use sidecar::jolokia::{Jolokia, OperationMode, StorageService};
use sidecar::render::{MemberConfig, Overrides, OverridesOrigin, render};
use testworld::kubesim::KubeSim;

#[allow(dead_code)]
mod support;
use support::{Node, http, poll, ring_sim};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");

fn ip(n: u8) -> String {
    format!("127.0.53.{n}")
}

struct World {
    sim: KubeSim,
    root: tempfile::TempDir,
    release: &'static str,
}

impl World {
    async fn new(release: &'static str) -> World {
        World {
            sim: ring_sim(200).await,
            root: tempfile::tempdir().expect("a temp dir"),
            release,
        }
    }

    /// Renders member `n` of `rack` (seeded by node 1) with the sidecar's
    /// renderer over the shipped file of the release's line, with the
    /// rack's `overrides`, and starts fake-cassandra on it.
    fn start(&self, n: u8, rack: &str, overrides: Option<&str>) -> Node {
        let name = format!("{}-{n}", self.release);
        let dir = self.root.path().join(&name);
        let conf = dir.join("conf");
        std::fs::create_dir_all(&conf).expect("conf dir");
        let address = ip(n);
        let member = MemberConfig {
            mode: ClusterMode::Cassandra,
            cluster_name: "tokens".to_string(),
            pod_ip: address.parse().expect("an ip"),
            broadcast_address: address.parse().expect("an ip"),
            seeds: vec![ip(1)],
            datacenter: "dc1".to_string(),
            rack: rack.to_string(),
            memory_limit: Some(Quantity::parse("2Gi").expect("a quantity")),
            cpu_limit: None,
            node_cpu_cores: 2,
            replace_address: None,
            overrides: overrides.map(|text| Overrides {
                origin: OverridesOrigin::File(dir.join("overrides.yaml")),
                text: text.to_string(),
            }),
            jolokia_agent_jar: dir.join("jolokia-jvm-agent.jar").display().to_string(),
            release: None,
        };
        std::fs::write(
            sidecar::jolokia_access::policy_path(&member.jolokia_agent_jar),
            sidecar::jolokia_access::policy_xml(),
        )
        .expect("the access policy");
        let line = if self.release.starts_with("5.") {
            "5.0"
        } else {
            "4.1"
        };
        let shipped =
            std::fs::read_to_string(format!("{FIXTURES}/cassandra/{line}/cassandra.yaml"))
                .expect("the shipped cassandra.yaml (the test needs /work/shared/fixtures)");
        let rendered = render(&member, &shipped).expect("renders");
        for f in &rendered.files {
            std::fs::write(conf.join(&f.name), &f.content).expect("write a rendered file");
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-cassandra"));
        cmd.args(["-f", "-R"])
            .arg(format!("-Dcassandra.storagedir={}", dir.display()))
            .envs(rendered.env.iter().map(|(k, v)| {
                let v = match k.as_str() {
                    "JVM_EXTRA_OPTS" => v.replace("host=127.0.0.1", &format!("host={address}")),
                    _ => v.clone(),
                };
                (k.clone(), v)
            }))
            .env("CASSANDRA_CONF", &conf)
            .env("CASSANDRA_VERSION", self.release)
            .env("KUBESIM_URL", self.sim.sim_url());
        Node::spawn(&name, address, dir, cmd)
    }

    /// Waits until `node` is NORMAL (its bootstrap done).
    async fn normal(&self, node: &Node) {
        let storage = StorageService::new(
            Jolokia::new(&format!("http://{}:8778/jolokia/", node.ip)).expect("a client"),
        );
        poll(
            30,
            Duration::from_millis(50),
            async || {
                let got = storage.operation_mode().await;
                matches!(&got, Ok(OperationMode::Normal))
                    .then_some(())
                    .ok_or(got)
            },
            async |got| format!("{} never NORMAL ({got:?})\n{}", node.name, node.log()),
        )
        .await
    }

    /// The addresses of the ring's members (`nodetool status` rows).
    async fn members(&self) -> Vec<String> {
        let ring: serde_json::Value = http()
            .get(format!("{}/sim/ring", self.sim.sim_url()))
            .send()
            .await
            .expect("kubesim answers")
            .json()
            .await
            .expect("ring JSON");
        ring["status"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["address"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// The thesis's second rack on the shipped files of 4.1 and 5.0 (factor
/// 3): a rack `a` of 3, then rack `b`'s first member joins (its rack owns
/// no token yet) and its second exits at start, with Cassandra's
/// `ConfigurationException` and message, and never enters the ring; the
/// same member on the rack's overrides that set the factor to 2 (as many
/// as the racks) joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_member_of_a_second_rack_is_refused_its_tokens() {
    for release in ["4.1.8", "5.0.3"] {
        let world = World::new(release).await;
        let mut running = Vec::new();
        for (n, rack) in [(1, "a"), (2, "a"), (3, "a"), (4, "b")] {
            let node = world.start(n, rack, None);
            world.normal(&node).await;
            running.push(node);
        }
        let mut refused = world.start(5, "b", None);
        // Real Cassandra's log names the exception and its message (the
        // stack trace's first line) and the process exits non-zero.
        let (code, log) = refused.exit(20);
        assert_ne!(code, 0, "{release}: {log}");
        assert!(
            log.contains(
                "org.apache.cassandra.exceptions.ConfigurationException: Token allocation failed: the number of racks 2 in datacenter dc1 is lower than its replication factor 3."
            ),
            "{release}: {log}"
        );
        assert_eq!(
            world.members().await,
            (1..=4).map(ip).collect::<Vec<_>>(),
            "{release}: the refused member is not in the ring"
        );

        let factor_2 = world.start(
            5,
            "b",
            Some("allocate_tokens_for_local_replication_factor: 2\n"),
        );
        world.normal(&factor_2).await;
        assert_eq!(
            world.members().await,
            (1..=5).map(ip).collect::<Vec<_>>(),
            "{release}"
        );
        drop((running, factor_2));
    }
}
