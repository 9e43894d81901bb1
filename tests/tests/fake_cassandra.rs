//! The fake Cassandra node end to end (issue 4's Done-when): real
//! `fake-cassandra` processes started from configurations rendered by
//! `sidecar::render` (the 4.1 fixtures), a ring kept by an in-process
//! kubesim, checked through `/sim/ring`, `kubesim ring [--check]` and each
//! node's Jolokia with the sidecar's own client.
//!
//! Steps: three nodes form one ring of 3 UN with the data check clean; a
//! fourth bootstraps; a decommission moves its data; a node killed and its
//! disk lost is replaced with `replace_address_first_boot` and replication
//! is full again; a node started as its own seed in the populated ring is
//! flagged by the data check; a node of another cluster is refused.
//!
//! TLS (issue 32), with the sidecar's rendering of `spec.security.tls`
//! and files made with rcgen as the sidecar writes them: a member serves
//! its certificate (mutual TLS between members) and reloads it through
//! MessagingService; the files real 4.1 refuses to start with; the
//! hot-reload task.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crds::quantity::Quantity;
use crds::v1alpha1::{ClientEncryption, ClusterMode, InternodeEncryption};
use serde_json::{Value, json};
use sidecar::jolokia::{Jolokia, OperationMode, StorageService};
use sidecar::render::tls::TlsSettings;
use sidecar::render::{MemberConfig, render};
use testworld::kubesim::KubeSim;

#[allow(dead_code)]
mod support;
use support::{Node, http, poll, ring_sim};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");
const RELEASE: &str = "4.1.8";
const CLUSTER: &str = "ring-test";
/// Bootstrap, replacement and decommission stream for this long.
const STREAM_MS: u64 = 400;

fn ip(n: u8) -> String {
    format!("127.0.47.{n}")
}

/// The shipped cassandra.yaml of `release`'s line (4.1 or 5.0).
fn defaults_of(release: &str) -> String {
    let line = if release.starts_with("5.") {
        "5.0"
    } else {
        "4.1"
    };
    let path = format!("{FIXTURES}/cassandra/{line}/cassandra.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("the {line} fixture {path} is missing ({e}): the test needs /work/shared/fixtures")
    })
}

impl Node {
    fn jolokia(&self) -> StorageService {
        StorageService::new(
            Jolokia::new(&format!("http://{}:8778/jolokia/", self.ip)).expect("a client"),
        )
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

struct World {
    sim: KubeSim,
    root: tempfile::TempDir,
    http: reqwest::Client,
    /// The Jolokia access policy written beside each node's agent: the
    /// operator's (what the sidecar and its nodetool may call), or one that
    /// allows everything, for calls real nodetool makes over JMX (repair).
    policy: String,
    /// The release the next node started runs (the image's
    /// CASSANDRA_VERSION) and the rack's cassandra.yaml overrides.
    release: String,
    overrides: Option<String>,
    /// Command-line arguments after `-f` of the next node started.
    args: Vec<String>,
    /// The Cluster's `spec.security.tls` of the next node started: the
    /// sidecar renders it with the node's own TLS directory (`<dir>/tls`),
    /// where the test writes the files.
    tls: Option<(InternodeEncryption, ClientEncryption)>,
    /// An edit of the rendered cassandra.yaml of the next node started
    /// (what the operator does not write, to see it refused).
    edit: Option<fn(&mut serde_norway::Value)>,
    /// Environment of the next node started, beyond the rendered one.
    env: Vec<(&'static str, String)>,
}

impl World {
    async fn new() -> World {
        World {
            sim: ring_sim(STREAM_MS).await,
            root: tempfile::tempdir().expect("a temp dir"),
            http: http(),
            policy: sidecar::jolokia_access::policy_xml(),
            release: RELEASE.to_string(),
            overrides: None,
            args: Vec::new(),
            tls: None,
            edit: None,
            env: Vec::new(),
        }
    }

    /// Renders the member's configuration with the sidecar's renderer and
    /// starts fake-cassandra on it.
    fn start(
        &self,
        name: &str,
        n: u8,
        seeds: &[u8],
        rack: &str,
        replace: Option<u8>,
        cluster: &str,
    ) -> Node {
        let dir = self.root.path().join(name);
        let conf = dir.join("conf");
        std::fs::create_dir_all(&conf).expect("conf dir");
        let address = ip(n);
        let member = MemberConfig {
            mode: ClusterMode::Cassandra,
            cluster_name: cluster.to_string(),
            pod_ip: address.parse().expect("an ip"),
            broadcast_address: address.parse().expect("an ip"),
            seeds: seeds.iter().map(|s| ip(*s)).collect(),
            datacenter: "dc1".to_string(),
            rack: rack.to_string(),
            memory_limit: Some(Quantity::parse("2Gi").expect("a quantity")),
            cpu_limit: None,
            node_cpu_cores: 2,
            replace_address: replace.map(ip),
            overrides: self
                .overrides
                .clone()
                .map(|text| sidecar::render::Overrides {
                    origin: sidecar::render::OverridesOrigin::File(dir.join("overrides.yaml")),
                    text,
                }),
            // Where the sidecar would write the access policy beside it.
            jolokia_agent_jar: dir.join("jolokia-jvm-agent.jar").display().to_string(),
            release: None,
            tls: self.tls.map(|(internode, client)| TlsSettings {
                internode,
                internode_optional: false,
                client,
                dir: dir.join("tls"),
            }),
            authentication: false,
        };
        std::fs::write(
            sidecar::jolokia_access::policy_path(&member.jolokia_agent_jar),
            &self.policy,
        )
        .expect("the access policy");
        let mut rendered = render(&member, &defaults_of(&self.release)).expect("renders");
        for f in rendered
            .files
            .iter_mut()
            .filter(|f| f.name == "cassandra.yaml")
        {
            if self.tls.is_none() && self.edit.is_none() {
                continue;
            }
            let mut doc: serde_norway::Value = serde_norway::from_str(&f.content).expect("YAML");
            if self.tls.is_some() {
                // The image's `rpc_address: localhost` is the Pod's own
                // address in a Pod; here the nodes share the host.
                doc["rpc_address"] = address.clone().into();
            }
            if let Some(edit) = self.edit {
                edit(&mut doc);
            }
            f.content = serde_norway::to_string(&doc).expect("YAML");
        }
        for f in &rendered.files {
            std::fs::write(conf.join(&f.name), &f.content).expect("write a rendered file");
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-cassandra"));
        // As root on the host (no image's entrypoint steps down here), so
        // with bin/cassandra's -R; the storage dir as the sidecar passes it.
        cmd.args(["-f", "-R"])
            .arg(format!("-Dcassandra.storagedir={}", dir.display()))
            .args(&self.args)
            // The nodes share the host's network: each serves Jolokia on
            // its own address, where its agent option says.
            .envs(rendered.env.iter().map(|(k, v)| {
                let v = match k.as_str() {
                    "JVM_EXTRA_OPTS" => v.replace("host=127.0.0.1", &format!("host={address}")),
                    _ => v.clone(),
                };
                (k.clone(), v)
            }))
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("CASSANDRA_CONF", &conf)
            .env("CASSANDRA_VERSION", &self.release)
            .env("KUBESIM_URL", self.sim.sim_url());
        Node::spawn(name, address, dir, cmd)
    }

    /// Creates the keyspace `name` of `replication` (201).
    async fn create_keyspace(&self, name: &str, replication: Value) {
        let spec = json!({"name": name, "replication": replication});
        let (status, body) = self.post("/sim/ring/keyspaces", spec).await;
        assert_eq!(status, 201, "{body}");
    }

    /// Writes the keys `spec` describes (`prefix`, `count`, `consistency`)
    /// into the keyspace `ks` (200); the answer.
    async fn write_keys(&self, ks: &str, spec: Value) -> Value {
        let (status, body) = self
            .post(&format!("/sim/ring/keyspaces/{ks}/keys"), spec)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.sim.sim_url()))
            .send()
            .await
            .expect("kubesim answers");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("a body"))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.sim.sim_url()))
            .body(body.to_string())
            .send()
            .await
            .expect("kubesim answers");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn ring(&self) -> Value {
        let (status, text) = self.get("/sim/ring").await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).expect("ring JSON")
    }

    /// address -> nodetool status letters, for the members listed.
    async fn statuses(&self) -> Vec<(String, String)> {
        let ring = self.ring().await;
        ring["status"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r["address"].as_str().unwrap_or_default().to_string(),
                    r["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    async fn wait_statuses(&self, expected: &[(u8, &str)]) {
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, s)| (ip(*n), s.to_string()))
            .collect();
        poll(
            30,
            Duration::from_millis(50),
            async || {
                let got = self.statuses().await;
                (got == expected).then_some(()).ok_or(got)
            },
            async |got| {
                let ring = self.get("/sim/ring/status").await.1;
                format!("ring never became {expected:?}; it is {got:?}\n{ring}")
            },
        )
        .await
    }

    /// Waits until `node` is NORMAL and the ring's statuses are `ring`.
    async fn joined(&self, node: &Node, ring: &[(u8, &str)]) {
        wait_mode(node, OperationMode::Normal).await;
        self.wait_statuses(ring).await;
    }

    /// The data check: (HTTP status, report).
    async fn check(&self) -> (u16, Value) {
        let (status, text) = self.get("/sim/ring/check").await;
        (status, serde_json::from_str(&text).expect("a report"))
    }

    fn kubesim_ring(&self, check: bool) -> (i32, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubesim"));
        cmd.args(["ring", "--url", &self.sim.sim_url()]);
        if check {
            cmd.arg("--check");
        }
        let out = cmd.output().expect("kubesim ring runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

async fn wait_mode(node: &Node, mode: OperationMode) {
    let storage = node.jolokia();
    poll(
        30,
        Duration::from_millis(50),
        async || {
            let got = storage.operation_mode().await;
            let done = matches!(&got, Ok(m) if *m == mode);
            done.then_some(()).ok_or(got)
        },
        async |got| {
            format!(
                "{} never {mode:?} (last {got:?})\n{}",
                node.name,
                node.log()
            )
        },
    )
    .await
}

fn with_port(n: &[u8]) -> Vec<String> {
    n.iter().map(|n| format!("{}:7000", ip(*n))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_cassandra_ring_lifecycle() {
    let mut world = World::new().await;
    let began = Instant::now();

    // Three nodes: two seeds come up NORMAL at once, the third bootstraps.
    let n1 = world.start("n1", 1, &[1, 2], "r1", None, CLUSTER);
    wait_mode(&n1, OperationMode::Normal).await;
    let n2 = world.start("n2", 2, &[1, 2], "r2", None, CLUSTER);
    wait_mode(&n2, OperationMode::Normal).await;
    let n3 = world.start("n3", 3, &[1, 2], "r3", None, CLUSTER);
    world.joined(&n3, &[(1, "UN"), (2, "UN"), (3, "UN")]).await;
    // UN in the ring is the processes' truth; n1's own failure detector
    // marks n3 UP once gossip told it, as a client of a real node waits.
    let s1 = n1.jolokia();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live = s1.live_nodes().await.expect("live");
        if live == with_port(&[1, 2, 3]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n1 never saw all three: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // `kubesim ring --gossip`: each node's view, itself UP among the others.
    let out = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["ring", "--url", &world.sim.sim_url(), "--gossip"])
        .output()
        .expect("kubesim ring runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{} (generation ", ip(1))))
        .unwrap_or_else(|| panic!("n1's view in {text}"));
    assert!(line.contains(&format!("UP {}@", ip(1))), "{line}");
    assert_eq!(s1.cluster_name().await.expect("name"), CLUSTER);
    assert_eq!(s1.rack().await.expect("rack"), "r1");
    assert_eq!(
        n3.jolokia()
            .rack_of(&format!("{}:7000", ip(2)))
            .await
            .expect("rack of n2"),
        "r2"
    );
    assert_eq!(s1.tokens().await.expect("tokens").len(), 16);
    let ring = world.ring().await;
    assert_eq!(ring["cluster_name"], json!(CLUSTER));
    // The GET form, path escaping included (`!/`), and text/plain as 1.x.
    let got = world
        .http
        .get(format!(
            "http://{}:8778/jolokia/read/org.apache.cassandra.db:type=StorageService/EndpointWithPortToHostId/{}:7000",
            ip(1),
            ip(2)
        ))
        .send()
        .await
        .expect("jolokia answers a GET");
    assert!(
        got.headers()["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/plain")),
        "{:?}",
        got.headers()
    );
    let got: Value = got.json().await.expect("JSON");
    assert_eq!(got["status"], json!(200), "{got}");
    assert_eq!(
        got["value"],
        json!(
            n2.jolokia()
                .local_host_id()
                .await
                .expect("id")
                .expect("some")
        ),
        "{got}"
    );
    let got: Value = world
        .http
        .get(format!("http://{}:8778/jolokia/version", ip(3)))
        .send()
        .await
        .expect("jolokia answers a GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        (&got["value"]["agent"], &got["value"]["protocol"]),
        (&json!("1.7.1"), &json!("7.2"))
    );

    // Data: a keyspace of RF 3, 300 keys at QUORUM.
    world
        .create_keyspace(
            "ks",
            json!({"class": "NetworkTopologyStrategy", "datacenters": {"dc1": 3}}),
        )
        .await;
    let written = world
        .write_keys(
            "ks",
            json!({"prefix": "k", "count": 300, "consistency": "QUORUM"}),
        )
        .await;
    assert_eq!(written, json!({"written": 300}));
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["keys"], json!(300));
    let (code, out) = world.kubesim_ring(true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("UN ")).count(),
        3,
        "{out}"
    );
    assert!(
        out.contains("checked 300 keys in 1 keyspaces: 0 under-replicated, 0 lost"),
        "{out}"
    );

    // A fourth node bootstraps: JOINING (UJ) for the streaming time.
    let n4 = world.start("n4", 4, &[1, 2], "r1", None, CLUSTER);
    wait_mode(&n4, OperationMode::Joining).await;
    assert_eq!(
        s1.joining_nodes().await.expect("joining"),
        with_port(&[4]),
        "the others see it joining"
    );
    world
        .joined(&n4, &[(1, "UN"), (2, "UN"), (3, "UN"), (4, "UN")])
        .await;
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "after the bootstrap: {report}");

    // Decommission n3 through its Jolokia: the call blocks until it left;
    // its ranges moved, nothing is short.
    let n3_host = n3
        .jolokia()
        .local_host_id()
        .await
        .expect("id")
        .expect("some");
    let copies_before = world.ring().await["data_dirs"]
        .as_array()
        .expect("dirs")
        .iter()
        .find(|d| d["host_id"] == json!(n3_host))
        .map(|d| d["copies"]["ks"].as_u64().unwrap_or(0))
        .expect("n3's data dir");
    assert!(copies_before > 0, "n3 held data");
    let t = Instant::now();
    n3.jolokia().decommission().await.expect("decommission");
    assert!(
        t.elapsed() >= Duration::from_millis(STREAM_MS),
        "the call blocked while streaming ({:?})",
        t.elapsed()
    );
    assert_eq!(
        n3.jolokia().operation_mode().await.expect("mode"),
        OperationMode::Decommissioned
    );
    world
        .wait_statuses(&[(1, "UN"), (2, "UN"), (4, "UN")])
        .await;
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "after the decommission: {report}");
    let mut n3 = n3;
    assert_eq!(n3.terminate(), 143, "SIGTERM exits like the JVM");
    // A decommissioned node does not come back without the override.
    let mut again = world.start("n3", 3, &[1, 2], "r3", None, CLUSTER);
    let (code, log) = again.exit(60);
    assert_eq!(code, 3, "{log}");
    assert!(
        again
            .log()
            .contains("This node was decommissioned and will not rejoin the ring"),
        "{}",
        again.log()
    );

    // Kill n4 (SIGTERM): down, data kept; its keys are short of a copy.
    let mut n4 = n4;
    assert_eq!(n4.terminate(), 143);
    world
        .wait_statuses(&[(1, "UN"), (2, "UN"), (4, "DN")])
        .await;
    let (status, report) = world.check().await;
    assert_eq!(status, 409, "{report}");
    let under = report["under_replicated"].as_array().expect("a list").len();
    assert_eq!(under, 300, "RF 3 on 3 nodes: every key has a copy on n4");
    assert!(report["lost"].as_array().expect("a list").is_empty());
    let (code, out) = world.kubesim_ring(true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("UNDER-REPLICATED ks.k0 "), "{out}");
    assert!(
        out.contains(&format!("DN {} missing", ip(4)))
            || out.contains(&format!("DN {} has it", ip(4))),
        "{out}"
    );

    // Its disk is lost; the replacement (same address, replace_address_first_boot
    // rendered by the sidecar) streams the data back.
    std::fs::remove_dir_all(n4.data_dir()).expect("wipe the data dir");
    let n4b = world.start("n4", 4, &[1, 2], "r1", Some(4), CLUSTER);
    world.joined(&n4b, &[(1, "UN"), (2, "UN"), (4, "UN")]).await;
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "after the replacement: {report}");
    assert!(
        n4b.log().contains("Node /127.0.47.4 state jump to JOINING"),
        "{}",
        n4b.log()
    );

    // A new node that names itself as its seed joins without bootstrapping:
    // it owns ranges without their data, which the check flags. In rack r3,
    // which owns no tokens since n3 left: in r2, a second token-owning rack
    // below the 4.1 file's allocate_tokens_for_local_replication_factor (3),
    // Cassandra's token allocator would refuse it, and so does the fake.
    let n5 = world.start("n5", 5, &[5], "r3", None, CLUSTER);
    world
        .joined(&n5, &[(1, "UN"), (2, "UN"), (4, "UN"), (5, "UN")])
        .await;
    let (status, report) = world.check().await;
    assert_eq!(status, 409, "{report}");
    let flagged = report["under_replicated"].as_array().expect("a list");
    assert!(!flagged.is_empty());
    for k in flagged {
        assert!(
            k["replicas"]
                .as_array()
                .expect("replicas")
                .iter()
                .any(|r| r["address"] == json!(ip(5)) && r["has_copy"] == json!(false)),
            "flagged because n5 lacks it: {k}"
        );
    }
    let (code, out) = world.kubesim_ring(true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("UN {} missing", ip(5))), "{out}");

    // SIGKILL says nothing to the ring: the process's lease runs out and
    // the others see it down, as gossip convicts a silent node.
    let mut n5 = n5;
    let mut child = n5.child.take().expect("running");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let killed_at = Instant::now();
    world
        .wait_statuses(&[(1, "UN"), (2, "UN"), (4, "UN"), (5, "DN")])
        .await;
    assert!(
        killed_at.elapsed()
            >= testworld::fake_cassandra::ring_service::LEASE - Duration::from_millis(300),
        "down once the lease ran out, not before ({:?})",
        killed_at.elapsed()
    );
    let (status, _) = world
        .post(&format!("/sim/ring/kill?address={}", ip(5)), json!({}))
        .await;
    assert_eq!(status, 404, "no process runs at n5's address any more");

    // Another cluster's node, pointed at this cluster's seed: the seed
    // drops its gossip (GossipDigestSynVerbHandler's "ClusterName
    // mismatch"), its shadow round hears nobody, and it is not its own
    // seed: it fails to start; this cluster's ring never sees it.
    let before = world.get("/sim/ring/status").await.1;
    let mut stranger = world.start("x", 9, &[1], "r1", None, "other-cluster");
    let (code, log) = stranger.exit(60);
    assert_eq!(code, 3, "{log}");
    assert!(
        stranger.log().contains("Unable to gossip with any peers"),
        "{}",
        stranger.log()
    );
    assert_eq!(world.get("/sim/ring/status").await.1, before);

    // The text views.
    let (status, text) = world.get("/sim/ring?format=text").await;
    assert_eq!(status, 200);
    assert!(text.starts_with("Datacenter: dc1\n"), "{text}");
    assert_eq!(text, world.get("/sim/ring/status").await.1);
    let (code, out) = world.kubesim_ring(false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, text);
    // --dir finds kubesim through the files `kubesim serve` writes.
    let dir = world.root.path().join("kubesim");
    std::fs::create_dir_all(&dir).expect("a dir");
    world.sim.write_kubeconfig(&dir).expect("a kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["ring", "--dir"])
        .arg(&dir)
        .output()
        .expect("kubesim ring runs");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);

    // n2's disk is lost under the running process: it exits, as Cassandra
    // does on a disk failure.
    let (status, body) = world
        .post(
            &format!("/sim/ring/data-dirs/wipe?path={}", n2.data_dir().display()),
            json!({}),
        )
        .await;
    assert_eq!(status, 200);
    let wiped = body["wiped"].as_array().expect("a list");
    assert_eq!(wiped.len(), 1, "{body}");
    assert!(
        wiped[0]
            .as_str()
            .is_some_and(|id| id.starts_with(&format!("{}@", n2.data_dir().display()))),
        "the data dir's identity is its path and inode: {body}"
    );
    let mut n2 = n2;
    let mut child = n2.child.take().expect("running");
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "n2 kept running\n{}", n2.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, Some(1), "{}", n2.log());
    assert!(
        n2.log()
            .contains("ERROR [main] the ring has this node down"),
        "{}",
        n2.log()
    );

    // The decommissioned n3 comes back with the override, as its own log
    // says, with the tokens its disk kept.
    world.args = vec!["-Dcassandra.override_decommission=true".into()];
    let n3b = world.start("n3", 3, &[1, 2], "r3", None, CLUSTER);
    wait_mode(&n3b, OperationMode::Normal).await;
    assert!(
        n3b.log()
            .contains("This node was decommissioned, but overriding by operator request."),
        "{}",
        n3b.log()
    );

    eprintln!("scenario done in {:?}", began.elapsed());
    drop((n1, n2, n3b, n4b, n5, n4, again, stranger));
}

/// One Jolokia exec on a node: the whole answer.
async fn exec(world: &World, node: &Node, operation: &str, arguments: Value) -> Value {
    world
        .http
        .post(format!("http://{}:8778/jolokia/", node.ip))
        .body(
            json!({"type": "exec", "mbean": "org.apache.cassandra.db:type=StorageService",
                "operation": operation, "arguments": arguments})
            .to_string(),
        )
        .send()
        .await
        .expect("jolokia answers")
        .json()
        .await
        .expect("JSON")
}

/// `getParentRepairStatus(cmd)` once the command ended: as on a real
/// node, `repairAsync` returns before the repair runs, and the status is
/// null while it is queued, then `[IN_PROGRESS]`.
async fn repair_outcome(world: &World, node: &Node, cmd: &Value) -> Value {
    let began = Instant::now();
    loop {
        let status = exec(world, node, "getParentRepairStatus", json!([cmd])).await;
        let running = status["value"].is_null() || status["value"][0] == json!("IN_PROGRESS");
        if !running || began.elapsed() > Duration::from_secs(30) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The keys of `keyspace` a node's data directory holds a copy of.
fn copies_on(world: &World, n: u8, keyspace: &str) -> usize {
    world.sim.ring().with(|r| {
        let host = r
            .node_by_address(&ip(n))
            .expect("in the ring")
            .host_id
            .clone();
        r.disk_of(&host)
            .and_then(|d| d.copies.get(keyspace))
            .map_or(0, |k| k.len())
    })
}

/// `nodetool repair` and `nodetool cleanup` as nodetool calls them, through
/// each node's Jolokia: `repairAsync(String, Map)` answers a command number
/// and `getParentRepairStatus(int)` how it ended (FAILED while a neighbour
/// is down, COMPLETED once it brought a replica that missed writes up to
/// date); `forceKeyspaceCleanup(int, String, String...)` drops what a node
/// gave to a newcomer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_and_cleanup_through_jolokia() {
    // Real nodetool repairs over JMX, which the operator's Jolokia policy
    // does not cover (the operator never repairs): a policy with no
    // restriction, as an agent without one.
    let mut world = World::new().await;
    world.policy = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<restrict>\n</restrict>\n".into();
    let seeds = [11, 12];
    let n1 = world.start("r1", 11, &seeds, "r1", None, CLUSTER);
    wait_mode(&n1, OperationMode::Normal).await;
    let n2 = world.start("r2", 12, &seeds, "r1", None, CLUSTER);
    wait_mode(&n2, OperationMode::Normal).await;
    let mut n3 = world.start("r3", 13, &seeds, "r1", None, CLUSTER);
    wait_mode(&n3, OperationMode::Normal).await;
    for (name, rf) in [("app", 3), ("single", 1)] {
        world
            .create_keyspace(
                name,
                json!({"class": "SimpleStrategy", "replication_factor": rf}),
            )
            .await;
    }
    // No hints: a node down misses what is written meanwhile.
    let (status, body) = world
        .post("/sim/ring/timing", json!({"max_hint_window_ms": 0}))
        .await;
    assert_eq!(status, 200, "{body}");
    n3.terminate();
    world
        .wait_statuses(&[(11, "UN"), (12, "UN"), (13, "DN")])
        .await;

    let single = exec(&world, &n1, "repairAsync", json!(["single", {}])).await;
    assert_eq!(
        single["value"],
        json!(0),
        "RF 1: nothing to repair: {single}"
    );
    let cmd = exec(
        &world,
        &n1,
        "repairAsync",
        json!(["app", {"parallelism": "parallel"}]),
    )
    .await;
    assert_eq!(cmd["status"], json!(200), "{cmd}");
    let status = repair_outcome(&world, &n1, &cmd["value"]).await;
    assert_eq!(status["value"][0], json!("FAILED"), "{status}");
    assert!(
        status["value"][1]
            .as_str()
            .is_some_and(|m| m.contains(&format!("a neighbor ({}) is dead", ip(13)))),
        "{status}"
    );
    world.sim.ring().with(|r| {
        r.write_keys("app", "late-", 100, testworld::ring::Consistency::Quorum)
            .expect("QUORUM with two of three")
    });
    let n3 = world.start("r3", 13, &seeds, "r1", None, CLUSTER);
    world
        .joined(&n3, &[(11, "UN"), (12, "UN"), (13, "UN")])
        .await;
    let (status, report) = world.check().await;
    assert_ne!(
        status, 200,
        "the restarted replica missed the writes: {report}"
    );
    assert_eq!(copies_on(&world, 13, "app"), 0);
    let cmd = exec(&world, &n3, "repairAsync", json!(["app", {}])).await;
    let number = cmd["value"].as_i64().expect("a command number");
    assert!(number >= 1, "{cmd}");
    let status = repair_outcome(&world, &n3, &json!(number)).await;
    assert_eq!(status["value"][0], json!("COMPLETED"), "{status}");
    let unknown = exec(&world, &n3, "getParentRepairStatus", json!([number + 7])).await;
    assert_eq!(unknown["value"], Value::Null, "{unknown}");
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "repaired: {report}");
    assert_eq!(copies_on(&world, 13, "app"), 100);

    // A fourth node takes its ranges; the others keep their old copies
    // until cleanup.
    let n4 = world.start("r4", 14, &seeds, "r1", None, CLUSTER);
    wait_mode(&n4, OperationMode::Normal).await;
    assert_eq!(copies_on(&world, 11, "app"), 100);
    let overloaded = exec(&world, &n1, "forceKeyspaceCleanup", json!([0, "app", []])).await;
    assert!(
        overloaded["error"]
            .as_str()
            .is_some_and(|e| e.contains("is overloaded")),
        "{overloaded}"
    );
    let signature = "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)";
    let system = exec(&world, &n1, signature, json!([0, "system", []])).await;
    assert_eq!(
        system["error"],
        json!(
            "java.lang.RuntimeException : Cleanup of the system keyspace is neither necessary nor wise"
        )
    );
    let done = exec(&world, &n2, signature, json!([0, "app", []])).await;
    assert_eq!(done["value"], json!(0), "SUCCESSFUL: {done}");
    // The operator's own `cassandra-operator nodetool cleanup app` on n1:
    // silent on success, as nodetool is.
    let mut out = Vec::new();
    sidecar::nodetool::run_with(
        &n1.jolokia(),
        &sidecar::nodetool::NodetoolCommand::Cleanup {
            keyspace: "app".to_string(),
        },
        &mut out,
    )
    .await
    .expect("cleanup");
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    let owned = world.sim.ring().with(|r| {
        let host = r.node_by_address(&ip(11)).expect("n1").host_id.clone();
        (0..100)
            .filter(|i| {
                r.replicas("app", &format!("late-{i}"))
                    .expect("replicas")
                    .contains(&host)
            })
            .count()
    });
    assert!(owned < 100, "the newcomer took some of n1's ranges");
    assert_eq!(copies_on(&world, 11, "app"), owned, "exactly what it owns");
    assert!(copies_on(&world, 12, "app") < 100, "n2 cleaned up too");
    assert_eq!(copies_on(&world, 13, "app"), 100, "n3 did not clean up");
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "nothing lost: {report}");
    drop((n1, n2, n3, n4));
}

/// The `Data.db` files under a node's data directory: (keyspace, name).
fn data_files(node: &Node) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (keyspace, _, files) in sidecar::sstables::list(&node.data_dir()) {
        out.extend(files.into_iter().map(|f| (keyspace.clone(), f)));
    }
    out.sort();
    out
}

/// The `Data.db` files of sstable version `version` under a node's data
/// directory.
fn files_of(node: &Node, version: &str) -> usize {
    let prefix = format!("{version}-");
    data_files(node)
        .iter()
        .filter(|(_, f)| f.starts_with(&prefix))
        .count()
}

/// Waits until `node` has flushed an sstable of `version` for `keyspace`.
async fn wait_flushed(node: &Node, keyspace: &str, version: &str) {
    wait_files(node, keyspace, version, 1).await;
}

/// Waits until `node` has at least `count` sstables of `version` for
/// `keyspace`.
async fn wait_files(node: &Node, keyspace: &str, version: &str, count: usize) {
    let prefix = format!("{version}-");
    let deadline = Instant::now() + Duration::from_secs(15);
    while data_files(node)
        .iter()
        .filter(|(ks, f)| ks == keyspace && f.starts_with(&prefix))
        .count()
        < count
    {
        assert!(
            Instant::now() < deadline,
            "{} flushed fewer than {count} {version} sstables of {keyspace}: {:?}\n{}",
            node.name,
            data_files(node),
            node.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The old-format count the sidecar's gauge reports for `node` running
/// `release` under the storage_compatibility_mode `mode` (None: the key
/// absent).
fn old_format(node: &Node, release: &str, mode: Option<&str>) -> u64 {
    let latest = sidecar::sstables::latest_versions(release, mode).expect("a known release");
    sidecar::sstables::old_format_counts(&sidecar::sstables::list(&node.data_dir()), &latest)
        .values()
        .sum()
}

/// A major upgrade by hand, 4.1.8 → 5.0.3 (issue 14), with real fake
/// processes: the ring runs mixed (`kubesim ring` shows each member's
/// release, `nodetool version` the node's), takes writes and checks clean.
/// The upgraded node, in 5.0's shipped CASSANDRA_4 mode, writes `nb`
/// sstables as 4.1 did (as real 5.0.3 does: it has no `nc`), so the
/// sidecar's gauge counts none of 4.1's files and `upgradeSSTables`
/// rewrites nothing; restarted under `storage_compatibility_mode:
/// UPGRADING` it writes `oa`, the gauge counts every `nb` file, and
/// `upgradeSSTables` over Jolokia rewrites them all to `oa`. A node
/// bootstrapping on 5.0 past CASSANDRA_4 (messaging 13) fails its stream
/// from the 4.1 members (12), JOINING_FAILED, with Cassandra's message in
/// its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_major_upgrade_by_hand_runs_mixed_and_keeps_old_sstables() {
    const UPGRADE: &str = "upgradeSSTables(java.lang.String,boolean,int,[Ljava.lang.String;)";
    // nodetool upgradesstables goes over JMX, which the operator's Jolokia
    // policy does not cover (the operator never runs it).
    let mut world = World::new().await;
    world.policy = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<restrict>\n</restrict>\n".into();
    let seeds = [31, 32];
    let mut n1 = world.start("u1", 31, &seeds, "r1", None, CLUSTER);
    wait_mode(&n1, OperationMode::Normal).await;
    let n2 = world.start("u2", 32, &seeds, "r1", None, CLUSTER);
    wait_mode(&n2, OperationMode::Normal).await;
    let n3 = world.start("u3", 33, &seeds, "r1", None, CLUSTER);
    wait_mode(&n3, OperationMode::Normal).await;
    world
        .create_keyspace(
            "app",
            json!({"class": "SimpleStrategy", "replication_factor": 3}),
        )
        .await;
    world
        .write_keys("app", json!({"prefix": "k", "count": 300}))
        .await;
    wait_flushed(&n1, "app", "nb").await;
    assert_eq!(old_format(&n1, RELEASE, None), 0, "4.1's own format");

    // n1 restarts on 5.0 on its data, in the shipped CASSANDRA_4 mode.
    assert_eq!(n1.terminate(), 143);
    world.release = "5.0.3".into();
    let mut n1 = world.start("u1", 31, &seeds, "r1", None, CLUSTER);
    world
        .joined(&n1, &[(31, "UN"), (32, "UN"), (33, "UN")])
        .await;
    assert_eq!(
        n1.jolokia()
            .release_version()
            .await
            .expect("ReleaseVersion")
            .to_string(),
        "5.0.3"
    );
    assert_eq!(
        n2.jolokia()
            .release_version()
            .await
            .expect("ReleaseVersion")
            .to_string(),
        RELEASE
    );
    let (code, text) = world.kubesim_ring(false);
    assert_eq!(code, 0, "{text}");
    let release_of = |address: String| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(address.as_str()))
            .and_then(|l| l.split_whitespace().last())
            .map(str::to_string)
    };
    assert!(text.lines().any(|l| l.ends_with("Rack  Version")), "{text}");
    assert_eq!(release_of(ip(31)).as_deref(), Some("5.0.3"), "{text}");
    assert_eq!(release_of(ip(32)).as_deref(), Some(RELEASE), "{text}");

    // Mixed: writes reach every replica, the data check is clean; n1
    // writes `nb` beside 4.1's `nb` files, and none of them is old.
    let left_by_4_1 = files_of(&n1, "nb");
    assert!(left_by_4_1 > 0, "{:?}", data_files(&n1));
    world
        .write_keys("app", json!({"prefix": "mixed-", "count": 100}))
        .await;
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "{report}");
    wait_files(&n1, "app", "nb", left_by_4_1 + 1).await;
    assert_eq!(files_of(&n1, "oa"), 0, "{:?}", data_files(&n1));
    for mode in [Some("CASSANDRA_4"), None] {
        assert_eq!(
            old_format(&n1, "5.0.3", mode),
            0,
            "{mode:?}: {:?}",
            data_files(&n1)
        );
    }
    assert_eq!(old_format(&n2, RELEASE, None), 0);
    // nodetool upgradesstables app has nothing to rewrite: every file stays.
    let before = data_files(&n1);
    let done = exec(&world, &n1, UPGRADE, json!(["app", true, 0, []])).await;
    assert_eq!(done["value"], json!(0), "{done}");
    let after = data_files(&n1);
    assert!(
        before.iter().all(|f| after.contains(f)),
        "nothing rewritten: {before:?} -> {after:?}"
    );
    assert_eq!(files_of(&n1, "oa"), 0, "{after:?}");

    // n1 restarts under UPGRADING: it writes `oa` now, and every `nb`
    // file on its disk is old, as the sidecar's gauge counts them.
    assert_eq!(n1.terminate(), 143);
    world.overrides = Some("storage_compatibility_mode: UPGRADING\n".into());
    let n1 = world.start("u1", 31, &seeds, "r1", None, CLUSTER);
    world
        .joined(&n1, &[(31, "UN"), (32, "UN"), (33, "UN")])
        .await;
    world
        .write_keys("app", json!({"prefix": "upgrading-", "count": 100}))
        .await;
    wait_flushed(&n1, "app", "oa").await;
    let old = old_format(&n1, "5.0.3", Some("UPGRADING"));
    let nb = files_of(&n1, "nb") as u64;
    assert!(old > 0 && old == nb, "{:?}", data_files(&n1));
    assert_eq!(old_format(&n1, "5.0.3", Some("CASSANDRA_4")), 0);

    // nodetool upgradesstables app: the old files are rewritten.
    let done = exec(&world, &n1, UPGRADE, json!(["app", true, 0, []])).await;
    assert_eq!(done["value"], json!(0), "{done}");
    assert_eq!(
        old_format(&n1, "5.0.3", Some("UPGRADING")),
        0,
        "{:?}",
        data_files(&n1)
    );
    assert!(
        data_files(&n1).iter().all(|(_, f)| f.starts_with("oa-")),
        "{:?}",
        data_files(&n1)
    );
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "{report}");

    // A new node on 5.0 past CASSANDRA_4 (the same overrides) cannot
    // stream from the 4.1 members: its bootstrap fails.
    let n4 = world.start("u4", 34, &seeds, "r1", None, CLUSTER);
    wait_mode(&n4, OperationMode::JoiningFailed).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !n4.log().contains("Error during bootstrap: Stream failed") {
        assert!(Instant::now() < deadline, "{}", n4.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        n4.log()
            .contains("only supports messaging versions lower (12) than this node supports (13)"),
        "{}",
        n4.log()
    );
    let (status, report) = world.check().await;
    assert_eq!(status, 200, "nothing lost: {report}");
    drop((n1, n2, n3, n4));
}

/// Cassandra 4.1 has no `storage_compatibility_mode` (5.0 added it): a 4.1
/// node started on a cassandra.yaml that sets it, even to CASSANDRA_4 (a
/// rack's overrides written for 5.0 applied to a 4.1 member), does not
/// start, with Cassandra's message, and never enters the ring; a 5.0 node
/// starts on the same overrides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_1_node_refuses_a_file_that_sets_storage_compatibility_mode() {
    let mut world = World::new().await;
    world.overrides = Some("storage_compatibility_mode: CASSANDRA_4\n".into());
    let mut refused = world.start("m1", 41, &[41], "r1", None, CLUSTER);
    let (code, log) = refused.exit(20);
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains(
            "Invalid yaml. Please remove properties [storage_compatibility_mode] from your cassandra.yaml"
        ),
        "{log}"
    );
    assert!(world.statuses().await.is_empty(), "{log}");

    world.release = "5.0.3".into();
    let started = world.start("m1", 41, &[41], "r1", None, CLUSTER);
    world.joined(&started, &[(41, "UN")]).await;
    drop(started);
}

/// The token allocator's rack rule (`TokenAllocation.createStrategy` of
/// 4.1 and 5.0), on the shipped files of both (factor 3): a rack `a` of 3,
/// then rack `b`'s first member joins (its rack owns no token yet) and its
/// second exits at start, with Cassandra's `ConfigurationException` and
/// message, and never enters the ring; the same member on the rack's
/// overrides that set the factor to 2 (as many as the racks) joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_member_of_a_second_rack_is_refused_its_tokens() {
    for release in ["4.1.8", "5.0.3"] {
        let mut world = World::new().await;
        world.release = release.into();
        let seeds = [51];
        let mut running = Vec::new();
        for (n, rack) in [(51, "a"), (52, "a"), (53, "a"), (54, "b")] {
            let node = world.start(&format!("t{n}"), n, &seeds, rack, None, CLUSTER);
            wait_mode(&node, OperationMode::Normal).await;
            running.push(node);
        }
        let four: Vec<(u8, &str)> = (51..=54).map(|n| (n, "UN")).collect();
        world.wait_statuses(&four).await;
        let mut refused = world.start("t55", 55, &seeds, "b", None, CLUSTER);
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
        let members: Vec<String> = world.statuses().await.into_iter().map(|(a, _)| a).collect();
        assert_eq!(
            members,
            (51..=54).map(ip).collect::<Vec<_>>(),
            "{release}: the refused member is not in the ring"
        );

        world.overrides = Some("allocate_tokens_for_local_replication_factor: 2\n".into());
        let factor_2 = world.start("t55", 55, &seeds, "b", None, CLUSTER);
        let five: Vec<(u8, &str)> = (51..=55).map(|n| (n, "UN")).collect();
        world.joined(&factor_2, &five).await;
        drop((running, factor_2));
    }
}

// ---- TLS (issue 32) ----

/// A cluster's certificate authority, as the controller keeps one (EC
/// P-256), issuing member certificates.
struct Authority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert: rcgen::Certificate,
}

/// A member's key and the certificate the authority issued for it.
struct Issued {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a CA");
        Authority {
            issuer: rcgen::Issuer::new(params, key),
            cert,
        }
    }

    /// A certificate naming `ips` (IP SANs), serial `serial`, for a key of
    /// its own (or `key`).
    fn issue(&self, ips: &[&str], serial: u64, key: Option<rcgen::KeyPair>) -> Issued {
        let key = key.unwrap_or_else(|| {
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key")
        });
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = ips
            .iter()
            .map(|ip| rcgen::SanType::IpAddress(ip.parse().expect("an IP")))
            .collect();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ips[0]);
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).expect("issued");
        Issued { key, cert }
    }
}

impl Issued {
    /// The chain and the key as a TLS client presents them.
    fn client(&self, ca: &Authority) -> Option<(Vec<Vec<u8>>, Vec<u8>)> {
        Some((
            vec![self.cert.der().to_vec(), ca.cert.der().to_vec()],
            self.key.serialize_der(),
        ))
    }

    fn fingerprint(&self) -> String {
        testworld::fake_cassandra::tls_wire::fingerprint(self.cert.der())
    }
}

/// Writes `path` through a temporary name and a rename, as the sidecar
/// writes its TLS files.
fn write_atomically(path: &std::path::Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).expect("a TLS file");
    std::fs::rename(&tmp, path).expect("renamed");
}

/// The TLS files of the node in `dir` as the sidecar writes them: the
/// key and chain (`member.pem`, and `member.key`/`member.crt`), the CA
/// bundle (`ca.crt`).
fn write_tls(dir: &std::path::Path, member: &Issued, ca: &Authority) {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).expect("the TLS dir");
    let chain = format!("{}{}", member.cert.pem(), ca.cert.pem());
    write_atomically(&tls.join("ca.crt"), &ca.cert.pem());
    write_atomically(&tls.join("member.key"), &member.key.serialize_pem());
    write_atomically(&tls.join("member.crt"), &chain);
    write_atomically(
        &tls.join("member.pem"),
        &format!("{}{chain}", member.key.serialize_pem()),
    );
}

/// The certificate node `n` serves on `port`, its handshake made from
/// `from` with `client`'s certificate.
async fn served(
    n: u8,
    port: u16,
    client: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    from: &str,
) -> Result<testworld::fake_cassandra::tls_wire::ServedCertificate, String> {
    let address = format!("{}:{port}", ip(n)).parse().expect("an address");
    testworld::fake_cassandra::tls_wire::served_certificate(
        address,
        client,
        Some(from.parse().expect("an IP")),
    )
    .await
}

/// One Jolokia request to a node: the whole answer.
async fn jolokia(world: &World, node: &Node, request: Value) -> Value {
    world
        .http
        .post(format!("http://{}:8778/jolokia/", node.ip))
        .body(request.to_string())
        .send()
        .await
        .expect("jolokia answers")
        .json()
        .await
        .expect("JSON")
}

const MESSAGING_SERVICE: &str = "org.apache.cassandra.net:type=MessagingService";

/// A 4.1 member with the operator's TLS settings (internode `all`,
/// clients `required`) serves its certificate on the storage port to
/// members (a client certificate of the cluster's authority) and on the
/// native port to anyone; the sidecar's `reloadSslCertificates` (on
/// MessagingService, as `nodetool reloadssl` calls it) serves a new
/// certificate, and a broken file is logged while the old one goes on
/// being served, the operation answering success all the same, as real
/// 4.1.8 does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_serves_its_certificate_and_reloads_it_through_messaging_service() {
    let mut world = World::new().await;
    world.tls = Some((InternodeEncryption::All, ClientEncryption::Required));
    let ca = Authority::new("ring-test-ca");
    let first = ca.issue(&[&ip(61)], 1, None);
    let dir = world.root.path().join("s1");
    write_tls(&dir, &first, &ca);
    let node = world.start("s1", 61, &[61], "r1", None, CLUSTER);
    world.joined(&node, &[(61, "UN")]).await;
    let log = node.log();
    assert!(
        log.contains(&format!(
            "Listening on address: (/{}:7000), encryption: encrypted(openssl)",
            ip(61)
        )),
        "{log}"
    );

    // A member of the cluster, connecting from its own address.
    let peer = ca.issue(&["127.0.47.99"], 99, None);
    let from_peer = "127.0.47.99";
    let got = served(61, 7000, peer.client(&ca), from_peer)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!(got.fingerprint, first.fingerprint());
    assert_eq!(got.serial, "1");
    assert_eq!(got.chain.len(), 2, "the chain, the CA's certificate last");
    // Mutual TLS: no certificate, another authority's: refused. One of the
    // cluster's naming another address is a member's (no endpoint
    // verification: the source is a Pod IP the certificate does not name).
    assert!(served(61, 7000, None, from_peer).await.is_err());
    let rogue = Authority::new("rogue");
    let stranger = rogue.issue(&["127.0.47.99"], 7, None);
    assert!(
        served(61, 7000, stranger.client(&rogue), from_peer)
            .await
            .is_err()
    );
    let elsewhere = ca.issue(&["10.9.9.9"], 8, None);
    assert!(
        served(61, 7000, elsewhere.client(&ca), from_peer)
            .await
            .is_ok()
    );
    // Clients: TLS without a client certificate.
    let client_side = served(61, 9042, None, from_peer)
        .await
        .expect("TLS to clients");
    assert_eq!(client_side.fingerprint, first.fingerprint());

    // Renewed: the new certificate is served once reloaded.
    let second = ca.issue(&[&ip(61)], 2, None);
    write_tls(&dir, &second, &ca);
    let before = served(61, 7000, peer.client(&ca), from_peer)
        .await
        .expect("served");
    assert_eq!(
        before.fingerprint,
        first.fingerprint(),
        "not before a reload"
    );
    node.jolokia()
        .reload_ssl_certificates()
        .await
        .unwrap_or_else(|e| panic!("the sidecar's reload: {e}\n{}", node.log()));
    let after = served(61, 7000, peer.client(&ca), from_peer)
        .await
        .expect("served");
    assert_eq!(after.fingerprint, second.fingerprint());
    assert_eq!(after.serial, "2");
    let client_side = served(61, 9042, None, from_peer)
        .await
        .expect("TLS to clients");
    assert_eq!(client_side.fingerprint, second.fingerprint());
    let log = node.log();
    for side in ["server_encryption_options", "client_encryption_options"] {
        assert_eq!(
            log.matches(&format!(
                "SSL certificates have been updated for {side}. Resetting the ssl contexts for new connections."
            ))
            .count(),
            1,
            "{log}"
        );
    }

    // A broken keystore (the key alone): logged, the old one served, and
    // the operation still answers success.
    write_atomically(
        &dir.join("tls/member.pem"),
        &ca.issue(&[&ip(61)], 3, None).key.serialize_pem(),
    );
    let answer = jolokia(
        &world,
        &node,
        json!({"type": "exec", "mbean": MESSAGING_SERVICE, "operation": "reloadSslCertificates"}),
    )
    .await;
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["value"], Value::Null);
    let log = node.log();
    assert!(
        log.contains(
            "Failed to hot reload the SSL Certificates! Please check the certificate files for server_encryption_options."
        ) && log.contains("Caused by: java.security.GeneralSecurityException: Invalid certificate format"),
        "{log}"
    );
    let still = served(61, 7000, peer.client(&ca), from_peer)
        .await
        .expect("served");
    assert_eq!(still.fingerprint, second.fingerprint());
    drop(node);
}

/// What a 4.1 member refuses to start with, as real 4.1 does
/// (`ConfigurationException: Failed to initialize SSL` from
/// `applySslContext`, exit 3, never in the ring): no keystore, an empty
/// truststore, a `keystore_password` with the unencrypted key (read as an
/// encrypted one), an unknown factory class. A key that does not match
/// its certificate is not among them: Cassandra does not compare them, the
/// node starts and every handshake fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refuses_tls_files_it_cannot_use() {
    let mut world = World::new().await;
    world.tls = Some((InternodeEncryption::All, ClientEncryption::Required));
    let ca = Authority::new("ring-test-ca");
    let refused = |world: &World, name: &str| {
        let mut node = world.start(name, 62, &[62], "r1", None, CLUSTER);
        let (code, log) = node.exit(20);
        assert_eq!(code, 3, "{name}: {log}");
        assert!(
            log.contains("Exception encountered during startup"),
            "{name}: {log}"
        );
        log
    };
    let internode =
        "Caused by: java.io.IOException: Failed to create SSL context using Internode messaging";

    // No files at all.
    let log = refused(&world, "k0");
    assert!(
        log.contains(
            "Exception (org.apache.cassandra.exceptions.ConfigurationException) encountered during startup: Failed to initialize SSL"
        ) && log.contains(internode)
            && log.contains("Caused by: javax.net.ssl.SSLException: Failed to build key manager store for secure connections")
            && log.contains("Caused by: javax.net.ssl.SSLException: Must provide keystore or private_key in configuration for PEMBasedSSlContextFactory"),
        "{log}"
    );

    // An empty CA bundle.
    let member = ca.issue(&[&ip(62)], 1, None);
    let dir = world.root.path().join("k1");
    write_tls(&dir, &member, &ca);
    write_atomically(&dir.join("tls/ca.crt"), "");
    let log = refused(&world, "k1");
    assert!(
        log.contains(internode)
            && log.contains("Caused by: javax.net.ssl.SSLException: Failed to build trust manager store for secure connections")
            && log.contains("Caused by: java.security.GeneralSecurityException: Invalid certificate format"),
        "{log}"
    );

    // A keystore_password: the unencrypted key is read as encrypted.
    write_tls(&world.root.path().join("k2"), &member, &ca);
    world.edit = Some(|doc| {
        doc["server_encryption_options"]["keystore_password"] = "cassandra".into();
    });
    let log = refused(&world, "k2");
    assert!(
        log.contains("Caused by: java.io.IOException: overrun, bytes = "),
        "{log}"
    );

    // A factory Cassandra does not have.
    write_tls(&world.root.path().join("k3"), &member, &ca);
    world.edit = Some(|doc| {
        doc["server_encryption_options"]["ssl_context_factory"]["class_name"] =
            "com.example.NoSuchFactory".into();
    });
    let log = refused(&world, "k3");
    assert!(
        log.contains(
            "Exception (org.apache.cassandra.exceptions.ConfigurationException) encountered during startup: Unable to create instance of ISslContextFactory for com.example.NoSuchFactory"
        ) && log.contains("Caused by: java.lang.ClassNotFoundException: com.example.NoSuchFactory"),
        "{log}"
    );
    assert!(world.statuses().await.is_empty());

    // The key of another certificate: the node starts, no handshake
    // succeeds.
    world.edit = None;
    let other = ca.issue(&[&ip(62)], 2, None);
    let dir = world.root.path().join("k4");
    write_tls(&dir, &member, &ca);
    write_atomically(
        &dir.join("tls/member.pem"),
        &format!(
            "{}{}{}",
            other.key.serialize_pem(),
            member.cert.pem(),
            ca.cert.pem()
        ),
    );
    let node = world.start("k4", 62, &[62], "r1", None, CLUSTER);
    world.joined(&node, &[(62, "UN")]).await;
    let peer = ca.issue(&["127.0.47.98"], 98, None);
    let handshake = served(62, 7000, peer.client(&ca), "127.0.47.98").await;
    handshake.expect_err("a key that is not the certificate's serves no handshake");
    poll(
        5,
        Duration::from_millis(50),
        async || {
            let log = node.log();
            log.contains("Failed to properly handshake with peer /127.0.47.98:")
                .then_some(())
                .ok_or(log)
        },
        async |log| format!("the failed handshake was not logged\n{log}"),
    )
    .await;
    drop(node);
}

/// The hot-reload task (`SSLFactory.checkCertFilesForHotReloading`,
/// every 600 s in Cassandra, shortened here): renewed files are served
/// without a call. Settings the operator does not write: `optional` unset
/// with the keystore present makes the storage port optionally encrypted
/// (facts a3); `require_endpoint_verification` refuses a member whose
/// certificate does not name the address it connects from (facts a5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_reload_task_serves_renewed_files_without_a_call() {
    let mut world = World::new().await;
    // 5.0 builds its contexts as 4.1 does (facts a, c).
    world.release = "5.0.3".into();
    world.tls = Some((InternodeEncryption::All, ClientEncryption::None));
    world.env = vec![("FAKE_CASSANDRA_SSL_RELOAD_MS", "300".into())];
    world.edit = Some(|doc| {
        let options = &mut doc["server_encryption_options"];
        options["require_endpoint_verification"] = true.into();
        if let Some(options) = options.as_mapping_mut() {
            options.remove("optional");
        }
    });
    let ca = Authority::new("ring-test-ca");
    let first = ca.issue(&[&ip(63)], 1, None);
    let dir = world.root.path().join("h1");
    write_tls(&dir, &first, &ca);
    let node = world.start("h1", 63, &[63], "r1", None, CLUSTER);
    world.joined(&node, &[(63, "UN")]).await;
    assert!(
        node.log()
            .contains("encryption: optionally encrypted(openssl)"),
        "{}",
        node.log()
    );
    // No client encryption: nothing on the native port.
    assert!(served(63, 9042, None, "127.0.47.97").await.is_err());

    let peer = ca.issue(&["127.0.47.97"], 97, None);
    assert!(
        served(63, 7000, peer.client(&ca), "127.0.47.97")
            .await
            .is_ok()
    );
    let elsewhere = ca.issue(&["10.9.9.9"], 8, None);
    assert!(
        served(63, 7000, elsewhere.client(&ca), "127.0.47.97")
            .await
            .is_err()
    );
    // The node logs its refusal as the client reads the alert.
    poll(
        5,
        Duration::from_millis(50),
        async || {
            let log = node.log();
            log.contains("No subject alternative names matching IP address 127.0.47.97 found")
                .then_some(())
                .ok_or(log)
        },
        async |log| format!("the refusal was not logged\n{log}"),
    )
    .await;
    let second = ca.issue(&[&ip(63)], 2, None);
    write_tls(&dir, &second, &ca);
    poll(
        10,
        Duration::from_millis(100),
        async || {
            let got = served(63, 7000, peer.client(&ca), "127.0.47.97").await;
            match got {
                Ok(c) if c.fingerprint == second.fingerprint() => Ok(()),
                other => Err(other),
            }
        },
        async |got| {
            format!(
                "never served the renewed certificate: {got:?}\n{}",
                node.log()
            )
        },
    )
    .await;
    assert!(
        node.log().contains(
            "SSL certificates have been updated for server_encryption_options. Resetting the ssl contexts for new connections."
        ),
        "{}",
        node.log()
    );
    drop(node);
}
