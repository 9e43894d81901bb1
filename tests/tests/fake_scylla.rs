//! The fake ScyllaDB node end to end: real `fake-cassandra` processes
//! started under the name `scylla` with a command line like the
//! scylladb/scylla image's entrypoint gives (the image's scylla.yaml
//! fixture, cassandra-rackdc.properties beside it), a ring kept by an
//! in-process kubesim, each node asked over its REST API.
//!
//! - `scylla_rest_contract`: the requests of the recorded answers
//!   (tests/fixtures/scylla-rest/*.json) against the fake in the states
//!   they describe, compared as each file says (exact, shape, length).
//! - `scylla_lifecycle`: bootstrap (BOOTSTRAP, then NORMAL), `kubesim ring`
//!   listing the nodes, decommission blocking until done and going on when
//!   its client disconnects, replace by host ID (an unknown and a live one
//!   refused), drain, no Jolokia.
//! - `scylla_command_line`: unknown and malformed options refused as the
//!   binary refuses them, `--version`, the yaml and the rackdc file read
//!   from `SCYLLA_CONF` with the command line winning.
//! - TLS (issue 32), with the sidecar's rendering of `spec.security.tls`:
//!   `scylla_serves_its_certificate_and_reloads_changed_files`,
//!   `scylla_refuses_tls_files_it_cannot_use`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crds::v1alpha1::{ClientEncryption, InternodeEncryption};
use serde_json::{Value, json};
use sidecar::render::tls::TlsSettings;
use testworld::fake_cassandra::tls_wire;
use testworld::kubesim::KubeSim;

#[allow(dead_code)]
mod support;
use support::{Node, http, poll, ring_sim, start_sim};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");
const RECORDED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/scylla-rest");
const RELEASE: &str = "5.4.9";
/// Bootstrap, replacement and decommission stream for this long.
const STREAM_MS: u64 = 600;

/// The size of every node here: one shard of 512M with 16 tokens, as a
/// small test cluster runs.
const SMALL_NODE: [&str; 9] = [
    "--num-tokens",
    "16",
    "--smp",
    "1",
    "--memory",
    "512M",
    "--overprovisioned",
    "--developer-mode",
    "1",
];

/// The address of node `n` of the world on network `net` (each test has
/// its own: the tests of this binary run side by side on one loopback).
fn addr(net: u8, n: u8) -> String {
    format!("127.0.{net}.{n}")
}

impl Node {
    fn api(&self, path: &str) -> String {
        format!("http://{}:10000{path}", self.ip)
    }
}

struct World {
    /// The third byte of the world's addresses.
    net: u8,
    /// The image tag its nodes run.
    release: &'static str,
    sim: KubeSim,
    root: tempfile::TempDir,
    http: reqwest::Client,
    /// The Cluster's `spec.security.tls` of the next node started, as the
    /// sidecar renders it into scylla.yaml with the node's own TLS
    /// directory (`<dir>/tls`).
    tls: Option<(InternodeEncryption, ClientEncryption)>,
}

fn scylla_command(dir: &Path, args: &[String], release: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-cassandra"));
    cmd.arg0("scylla")
        .args(args)
        .env("SCYLLA_CONF", dir.join("conf"))
        .env("CASSANDRA_VERSION", release)
        .env("FAKE_SCYLLA_STARTING_MS", "50")
        .env("FAKE_SCYLLA_JOINING_MS", "150");
    cmd
}

/// The image's scylla.yaml and a rackdc file in `dir/conf`.
fn write_conf(dir: &Path, dc: &str, rack: &str) {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).expect("conf dir");
    let yaml = std::fs::read_to_string(format!("{FIXTURES}/scylla/scylla.yaml"))
        .expect("the scylla.yaml fixture (the test needs /work/shared/fixtures)");
    std::fs::write(conf.join("scylla.yaml"), yaml).expect("scylla.yaml");
    std::fs::write(
        conf.join("cassandra-rackdc.properties"),
        format!("dc={dc}\nrack={rack}\n"),
    )
    .expect("rackdc");
}

impl World {
    async fn new(net: u8) -> World {
        World {
            net,
            release: RELEASE,
            sim: ring_sim(STREAM_MS).await,
            root: tempfile::tempdir().expect("a temp dir"),
            http: http(),
            tls: None,
        }
    }

    /// Starts node `n` as the image's entrypoint would: addresses, seeds
    /// and the API address on the command line.
    fn ip(&self, n: u8) -> String {
        addr(self.net, n)
    }

    fn start(&self, name: &str, n: u8, cluster: &str, seeds: &[u8], extra: &[&str]) -> Node {
        self.start_in("DC1", name, n, cluster, seeds, extra)
    }

    /// [`World::start`] in datacenter `dc` (rack B1).
    fn start_in(
        &self,
        dc: &str,
        name: &str,
        n: u8,
        cluster: &str,
        seeds: &[u8],
        extra: &[&str],
    ) -> Node {
        let ip = |n| self.ip(n);
        let dir = self.root.path().join(name);
        write_conf(&dir, dc, "B1");
        if let Some((internode, client)) = self.tls {
            let options = sidecar::render::tls::scylla_options(&TlsSettings {
                internode,
                internode_optional: false,
                client,
                dir: dir.join("tls"),
            });
            let yaml = dir.join("conf/scylla.yaml");
            let mut text = std::fs::read_to_string(&yaml).expect("scylla.yaml");
            text.push_str(
                &serde_norway::to_string(&serde_norway::Value::Mapping(options)).expect("YAML"),
            );
            std::fs::write(&yaml, text).expect("scylla.yaml");
        }
        let seeds: Vec<String> = seeds.iter().map(|s| ip(*s)).collect();
        let mut args: Vec<String> = [
            "--listen-address",
            &ip(n),
            "--rpc-address",
            &ip(n),
            "--broadcast-address",
            &ip(n),
            "--broadcast-rpc-address",
            &ip(n),
            "--seed-provider-parameters",
            &format!("seeds={}", seeds.join(",")),
            "--api-address",
            &ip(n),
            "--cluster-name",
            cluster,
            "--endpoint-snitch",
            "GossipingPropertyFileSnitch",
            "--workdir",
            &dir.join("var").display().to_string(),
        ]
        .iter()
        .chain(&SMALL_NODE)
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = scylla_command(&dir, &args, self.release);
        cmd.env("KUBESIM_URL", self.sim.sim_url());
        Node::spawn(name, ip(n), dir, cmd)
    }

    /// Starts node `n` (seeded by node 1) with `extra`, which it refuses:
    /// its exit code is 1. Its log.
    fn refused(&self, name: &str, n: u8, cluster: &str, extra: &[&str]) -> String {
        let (code, log) = self.start(name, n, cluster, &[1], extra).exit(20);
        assert_eq!(code, 1, "{log}");
        log
    }

    /// `method path` on node `node`'s REST API: the status and the body
    /// (`None` when empty).
    async fn call(&self, node: &Node, method: &str, path: &str) -> (u16, Option<Value>) {
        let url = node.api(path);
        let req = match method {
            "POST" => self.http.post(&url),
            _ => self.http.get(&url),
        };
        let resp = req.send().await.unwrap_or_else(|e| {
            panic!("{} answers {method} {path}: {e}\n{}", node.name, node.log())
        });
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("a body");
        let body = (!text.is_empty()).then(|| {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON from {path}: {e}: {text}"))
        });
        (status, body)
    }

    async fn mode(&self, node: &Node) -> Option<String> {
        let resp = self
            .http
            .get(node.api("/storage_service/operation_mode"))
            .send()
            .await
            .ok()?;
        resp.json::<Value>()
            .await
            .ok()?
            .as_str()
            .map(str::to_string)
    }

    async fn wait_mode(&self, node: &Node, mode: &str) {
        poll(
            30,
            Duration::from_millis(25),
            async || {
                let got = self.mode(node).await;
                (got.as_deref() == Some(mode)).then_some(()).ok_or(got)
            },
            async |got| format!("{} never {mode} (last {got:?})\n{}", node.name, node.log()),
        )
        .await
    }

    /// The ring learns that the process at `n`'s address died (as the
    /// kubelet reports a killed container).
    async fn kill(&self, node: &mut Node) {
        node.kill();
        let resp = self
            .http
            .post(format!(
                "{}/sim/ring/kill?address={}",
                self.sim.sim_url(),
                node.ip
            ))
            .send()
            .await
            .expect("kubesim answers");
        assert_eq!(resp.status().as_u16(), 200, "the ring knew {}", node.name);
    }

    /// A keyspace `ks` of replication factor `rf` (SimpleStrategy) and
    /// `keys` keys written at QUORUM in the ring of `cluster`.
    async fn seed_data(&self, cluster: &str, rf: u32, keys: u32) {
        let base = self.sim.sim_url();
        let ks = json!({"name": "ks", "replication": {"class": "SimpleStrategy", "replication_factor": rf}});
        let resp = self
            .http
            .post(format!("{base}/sim/ring/keyspaces?cluster={cluster}"))
            .body(ks.to_string())
            .send()
            .await
            .expect("kubesim answers");
        assert_eq!(resp.status().as_u16(), 201);
        let resp = self
            .http
            .post(format!(
                "{base}/sim/ring/keyspaces/ks/keys?cluster={cluster}"
            ))
            .body(json!({"count": keys}).to_string())
            .send()
            .await
            .expect("kubesim answers");
        assert_eq!(resp.status().as_u16(), 200);
    }

    /// `kubesim ring --cluster NAME --check`: its exit code and output.
    fn kubesim_ring_check(&self, cluster: &str) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_kubesim"))
            .args([
                "ring",
                "--url",
                &self.sim.sim_url(),
                "--cluster",
                cluster,
                "--check",
            ])
            .output()
            .expect("kubesim ring runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// What `kubesim ring --cluster NAME` prints.
    fn kubesim_ring(&self, cluster: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_kubesim"))
            .args(["ring", "--url", &self.sim.sim_url(), "--cluster", cluster])
            .output()
            .expect("kubesim ring runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

// ---- the contract suite ----

/// Whether `actual` has the JSON shape of `recorded`: the same types,
/// objects with the same keys, every array element shaped like the first
/// recorded element.
fn same_shape(recorded: &Value, actual: &Value) -> Result<(), String> {
    match (recorded, actual) {
        (Value::Null, Value::Null)
        | (Value::Bool(_), Value::Bool(_))
        | (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_)) => Ok(()),
        (Value::Array(r), Value::Array(a)) => match r.first() {
            None => Ok(()),
            Some(first) => a.iter().try_for_each(|e| same_shape(first, e)),
        },
        (Value::Object(r), Value::Object(a)) => {
            let rk: Vec<&String> = r.keys().collect();
            let ak: Vec<&String> = a.keys().collect();
            if rk != ak {
                return Err(format!("keys {ak:?}, recorded {rk:?}"));
            }
            r.iter().try_for_each(|(k, v)| same_shape(v, &a[k]))
        }
        _ => Err(format!("{actual} is not shaped like {recorded}")),
    }
}

fn compare(file: &str, recorded: &Value, status: u16, body: &Option<Value>) {
    assert_eq!(
        Some(status as u64),
        recorded["status"].as_u64(),
        "{file}: status (body {body:?})"
    );
    let want = &recorded["body"];
    let got = body.clone().unwrap_or(Value::Null);
    match recorded["compare"].as_str() {
        Some("exact") => assert_eq!(&got, want, "{file}"),
        Some("shape") => {
            if let Err(e) = same_shape(want, &got) {
                panic!("{file}: {e}");
            }
        }
        Some("shape_and_length") => {
            if let Err(e) = same_shape(want, &got) {
                panic!("{file}: {e}");
            }
            assert_eq!(
                got.as_array().map(Vec::len),
                want.as_array().map(Vec::len),
                "{file}: as many elements ({got})"
            );
        }
        other => panic!("{file}: unknown comparison {other:?}"),
    }
}

fn recorded_answers() -> Vec<(String, Value)> {
    let mut files: Vec<(String, Value)> = std::fs::read_dir(RECORDED)
        .expect("the recorded answers")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            let v: Value = serde_json::from_str(&text).expect("JSON");
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    // The states in order; in each, the reads before the operations.
    let rank = |v: &Value| {
        let state = match v["state"].as_str() {
            Some("three") => 0,
            Some("three-drained") => 1,
            _ => 2,
        };
        (state, v["request"]["method"] == "POST")
    };
    files.sort_by(|a, b| rank(&a.1).cmp(&rank(&b.1)).then(a.0.cmp(&b.0)));
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_rest_contract() {
    let world = World::new(48).await;
    let ip = |n| world.ip(n);
    let files = recorded_answers();
    assert!(files.len() >= 20, "the recorded answers are there");
    // The documentation's cluster: three nodes in DC1/B1, the third down.
    let n1 = world.start("n1", 1, "contract", &[1], &[]);
    world.wait_mode(&n1, "NORMAL").await;
    let n2 = world.start("n2", 2, "contract", &[1], &[]);
    world.wait_mode(&n2, "NORMAL").await;
    let mut n3 = world.start("n3", 3, "contract", &[1], &[]);
    world.wait_mode(&n3, "NORMAL").await;
    world.kill(&mut n3).await;
    // The keyspace of replication factor 1 the documentation's Owns
    // column describes.
    let resp = world
        .http
        .post(format!("{}/sim/ring/keyspaces?cluster=contract", world.sim.sim_url()))
        .body(
            json!({"name": "ks", "replication": {"class": "SimpleStrategy", "replication_factor": 1}})
                .to_string(),
        )
        .send()
        .await
        .expect("kubesim answers");
    assert_eq!(resp.status().as_u16(), 201);
    let alone = world.start("alone", 9, "alone", &[9], &[]);
    world.wait_mode(&alone, "NORMAL").await;

    for (file, recorded) in &files {
        let node = match (recorded["state"].as_str(), recorded["node"].as_u64()) {
            (Some("alone"), _) => &alone,
            (_, Some(1)) => &n1,
            (_, Some(2)) => &n2,
            other => panic!("{file}: no node for {other:?}"),
        };
        let mut path = recorded["request"]["path"]
            .as_str()
            .expect("a path")
            .to_string();
        if let Some(q) = recorded["request"]["query"].as_object() {
            let query: Vec<String> = q
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().unwrap_or_default().replace("$node3", &ip(3));
                    format!("{k}={v}")
                })
                .collect();
            path = format!("{path}?{}", query.join("&"));
        }
        let method = recorded["request"]["method"].as_str().expect("a method");
        let (status, body) = world.call(node, method, &path).await;
        compare(file, recorded, status, &body);
    }
    // What the shapes cannot say: real host IDs, the image's version.
    let (_, id) = world
        .call(&n1, "GET", "/storage_service/hostid/local")
        .await;
    let id = id
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("an id");
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(id.matches('-').count(), 4, "{id}");
    let (_, v) = world
        .call(&n1, "GET", "/storage_service/scylla_release_version")
        .await;
    assert_eq!(v, Some(json!(RELEASE)));
    // Effective ownership of RF 1 adds up to the whole ring.
    let (_, owns) = world
        .call(&n1, "GET", "/storage_service/ownership/ks")
        .await;
    let total: f64 = owns
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m["value"].as_str()?.parse::<f64>().ok())
        .sum();
    assert!((total - 1.0).abs() < 1e-3, "{owns:?}");
}

#[test]
fn the_shape_comparison_can_fail() {
    let recorded = json!([{"key": "a", "value": "b"}]);
    assert!(same_shape(&recorded, &json!([{"key": "x", "value": "y"}])).is_ok());
    assert!(same_shape(&recorded, &json!([{"key": "x", "value": 1}])).is_err());
    assert!(same_shape(&recorded, &json!([{"key": "x"}])).is_err());
    assert!(same_shape(&recorded, &json!({"a": "b"})).is_err());
    assert!(same_shape(&json!("NORMAL"), &json!(["NORMAL"])).is_err());
}

// ---- Scylla's rules, end to end ----

async fn host_id_of(world: &World, node: &Node) -> String {
    let (status, id) = world
        .call(node, "GET", "/storage_service/hostid/local")
        .await;
    assert_eq!(status, 200);
    id.and_then(|v| v.as_str().map(str::to_string))
        .expect("a host id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_lifecycle() {
    let world = World::new(49).await;
    let ip = |n| world.ip(n);
    let cluster = "life";
    // Two seeds: the first (smallest address) starts the cluster without
    // bootstrapping; the other, a seed too, bootstraps all the same.
    let mut n1 = world.start("n1", 1, cluster, &[1, 2], &[]);
    world.wait_mode(&n1, "NORMAL").await;
    // No JVM, no Jolokia: a sidecar asking Jolokia gets nowhere.
    let jolokia = world
        .http
        .post(format!("http://{}:8778/jolokia/", ip(1)))
        .body(r#"{"type":"version"}"#)
        .send()
        .await;
    assert!(
        jolokia.as_ref().is_err_and(|e| e.is_connect()),
        "{jolokia:?}"
    );

    // A new node starts, waits for the ring (JOINING), streams
    // (BOOTSTRAP, listed as joining by the others), then is NORMAL.
    let n2 = world.start("n2", 2, cluster, &[1, 2], &[]);
    world.wait_mode(&n2, "JOINING").await;
    world.wait_mode(&n2, "BOOTSTRAP").await;
    let (_, joining) = world
        .call(&n1, "GET", "/storage_service/nodes/joining")
        .await;
    assert_eq!(joining, Some(json!([ip(2)])));
    world.wait_mode(&n2, "NORMAL").await;
    let mut n3 = world.start("n3", 3, cluster, &[1], &[]);
    world.wait_mode(&n3, "NORMAL").await;
    let status = world.kubesim_ring(cluster);
    for n in 1..=3 {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("UN") && l.contains(&ip(n))),
            "{status}"
        );
    }

    // Data on the shared data model: the replacement must stream it.
    world.seed_data(cluster, 2, 200).await;

    // Replace by host ID: the dead node's, not an unknown or a live one.
    let dead = host_id_of(&world, &n3).await;
    let (_, dead_tokens) = world
        .call(&n1, "GET", &format!("/storage_service/tokens/{}", ip(3)))
        .await;
    world.kill(&mut n3).await;
    // Its address with an empty disk and no replace option: Scylla's
    // collision refusal.
    let log = world.refused("n3-wiped", 3, cluster, &[]);
    assert!(
        log.contains(&format!(
            "Startup failed: std::runtime_error (A node with address {} already exists, cancelling join. Use replace_address if you want to replace this node.)",
            ip(3)
        )),
        "{log}"
    );
    let unknown = "0b7d3e4c-1f5a-4c39-9d6e-2f6a7b8c9d0e";
    let log = world.refused("bad", 4, cluster, &["--replace-node-first-boot", unknown]);
    assert!(
        log.contains(&format!("Replaced node with Host ID {unknown} not found")),
        "{log}"
    );
    let live = host_id_of(&world, &n1).await;
    let log = world.refused("bad2", 5, cluster, &["--replace-node-first-boot", &live]);
    assert!(log.contains("Cannot replace a live node..."), "{log}");
    let n4 = world.start(
        "n4",
        4,
        cluster,
        &[1],
        &["--replace-node-first-boot", &dead],
    );
    world.wait_mode(&n4, "BOOTSTRAP").await;
    world.wait_mode(&n4, "NORMAL").await;
    let (_, tokens) = world
        .call(&n1, "GET", &format!("/storage_service/tokens/{}", ip(4)))
        .await;
    assert_eq!(tokens, dead_tokens, "n4 took over n3's tokens");
    let (_, ids) = world.call(&n1, "GET", "/storage_service/host_id").await;
    let owners: Vec<&str> = ids
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m["key"].as_str())
        .collect();
    assert_eq!(
        owners,
        vec![ip(1), ip(2), ip(4)],
        "n3 is gone from the ring"
    );
    let (code, check) = world.kubesim_ring_check(cluster);
    assert_eq!(code, 0, "every key has its copies again:\n{check}");

    // Decommission answers once the node has left.
    let began = Instant::now();
    let answer = world
        .call(&n4, "POST", "/storage_service/decommission")
        .await;
    assert_eq!(answer, (200, None));
    assert!(
        began.elapsed() >= Duration::from_millis(STREAM_MS / 2),
        "the call waited for the streaming ({:?})",
        began.elapsed()
    );
    assert_eq!(world.mode(&n4).await.as_deref(), Some("DECOMMISSIONED"));
    // Restarted on its data, a decommissioned node does not rejoin.
    let mut n4 = n4;
    assert_eq!(n4.terminate(), 0, "{}", n4.log());
    let mut again = world.start("n4", 4, cluster, &[1], &[]);
    let (code, log) = again.exit(20);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("This node was decommissioned and will not rejoin the ring unless override_decommission=true has been set,or all existing data is removed and the node is bootstrapped again"),
        "{log}"
    );
    // A client that gives up does not cancel it.
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(150))
        .build()
        .expect("a client");
    let gave_up = impatient
        .post(n2.api("/storage_service/decommission"))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    assert_eq!(world.mode(&n2).await.as_deref(), Some("LEAVING"));
    world.wait_mode(&n2, "DECOMMISSIONED").await;

    // The last node is refused, in Scylla's words; drain; SIGTERM.
    let (status, body) = world
        .call(&n1, "POST", "/storage_service/decommission")
        .await;
    assert_eq!(status, 500);
    assert_eq!(
        body,
        Some(json!({
            "message": "std::runtime_error (no other normal nodes in the ring; decommission would be pointless)",
            "code": 500
        }))
    );
    assert_eq!(
        world.call(&n1, "POST", "/storage_service/drain").await,
        (200, None)
    );
    assert_eq!(world.mode(&n1).await.as_deref(), Some("DRAINED"));
    assert_eq!(n1.terminate(), 0, "{}", n1.log());
}

/// With repair-based node operations, the last node of a datacenter where
/// a keyspace keeps replicas cannot leave: no replica would be left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_last_node_of_a_datacenter() {
    let world = World::new(50).await;
    let cluster = "dcs";
    let n1 = world.start("n1", 1, cluster, &[1], &[]);
    world.wait_mode(&n1, "NORMAL").await;
    let n2 = world.start_in("DC2", "n2", 2, cluster, &[1], &[]);
    world.wait_mode(&n2, "NORMAL").await;
    let resp = world
        .http
        .post(format!("{}/sim/ring/keyspaces?cluster={cluster}", world.sim.sim_url()))
        .body(
            json!({"name": "ks", "replication": {"class": "NetworkTopologyStrategy", "datacenters": {"DC1": 1, "DC2": 1}}})
                .to_string(),
        )
        .send()
        .await
        .expect("kubesim answers");
    assert_eq!(resp.status().as_u16(), 201);
    let (status, body) = world
        .call(&n2, "POST", "/storage_service/decommission")
        .await;
    assert_eq!(status, 500);
    let message = body
        .as_ref()
        .and_then(|b| b["message"].as_str())
        .unwrap_or_default();
    assert!(
        message.starts_with(
            "std::runtime_error (decommission_with_repair: keyspace=ks, range=(-inf, "
        ) && message.ends_with("new_replica_endpoints={}, zero replica after the removal)"),
        "{body:?}"
    );
    assert_eq!(world.mode(&n2).await.as_deref(), Some("NORMAL"));
}

/// ScyllaDB 6 runs its membership changes through Raft, and words the
/// refusals of its own checks differently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_6_refuses_in_raft_topologys_words() {
    let mut world = World::new(51).await;
    world.release = "6.2.3";
    let cluster = "raft";
    let n1 = world.start("n1", 1, cluster, &[1], &[]);
    world.wait_mode(&n1, "NORMAL").await;
    assert_eq!(
        world
            .call(&n1, "POST", "/storage_service/decommission")
            .await,
        (
            500,
            Some(json!({
                "message": "std::runtime_error (Cannot decomission last node in the cluster)",
                "code": 500
            }))
        )
    );
    let live = host_id_of(&world, &n1).await;
    let log = world.refused("bad", 2, cluster, &["--replace-node-first-boot", &live]);
    assert!(
        log.contains(&format!(
            "Startup failed: std::runtime_error (tried to replace alive node {live})"
        )),
        "{log}"
    );
}

#[test]
fn scylla_command_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_conf(dir.path(), "DC1", "B1");
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let out = scylla_command(dir.path(), &args, RELEASE)
            .output()
            .expect("the fake runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = run(&["--listen-address", "127.0.0.1", "--jmx-port", "7199"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err,
        "error: unrecognised option '--jmx-port'\n\nTry --help.\n"
    );
    let (code, _, err) = run(&["-Dcassandra.replace_address_first_boot=127.0.0.1"]);
    assert_eq!(code, 2, "a JVM option means nothing to Scylla: {err}");
    let (code, _, err) = run(&["--smp", "lots"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the argument ('lots') for option '--smp' is invalid"),
        "{err}"
    );
    let (code, out, _) = run(&["--version"]);
    assert_eq!((code, out.as_str()), (0, "5.4.9\n"));
    // A valid command line without a world to join: configuration read,
    // then the missing ring service is the failure.
    let (code, _, err) = run(&["--options-file", "/nonexistent/scylla.yaml"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Could not open configuration file /nonexistent/scylla.yaml"),
        "{err}"
    );
    // Outside developer mode, the I/O scheduler must be set up (iotune's
    // properties file, which must be there).
    let workdir = dir.path().join("w").display().to_string();
    let (code, _, err) = run(&["--workdir", &workdir, "--developer-mode", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Reason found: none of --io-properties and --io-properties-file are set.")
            && err.contains("Startup failed: std::runtime_error (Bad I/O Scheduler configuration)"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "--workdir",
        &workdir,
        "--io-properties-file",
        "/nonexistent/io_properties.yaml",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "Startup failed: std::runtime_error (bad file: /nonexistent/io_properties.yaml)"
        ),
        "{err}"
    );
    // Outside developer mode a shard needs 1 GiB.
    let io = dir.path().join("io_properties.yaml");
    std::fs::write(&io, "disks: []\n").expect("an io properties file");
    let io = io.display().to_string();
    let (code, _, err) = run(&[
        "--workdir",
        &workdir,
        "--io-properties-file",
        &io,
        "--smp",
        "2",
        "--memory",
        "1G",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Only 512 MiB per shard; this is below the recommended minimum of 1 GiB/shard; terminating.")
            && err.contains(
                "Startup failed: std::runtime_error (configuration (memory per shard too low))"
            ),
        "{err}"
    );
    // Its directories must be the process's: a user other than the one
    // owning the workdir (the image's scylla) cannot start.
    let owned_by_root = dir.path().join("var-lib-scylla");
    std::fs::create_dir_all(&owned_by_root).expect("a dir");
    for d in [
        dir.path(),
        owned_by_root.as_path(),
        &dir.path().join("conf"),
    ] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    // The kubelet's link: the fake under the name `scylla`.
    let link = dir.path().join("scylla");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_fake-cassandra"), &link).expect("a link");
    let out = Command::new("setpriv")
        .args(["--reuid=1234", "--regid=1234", "--clear-groups", "--"])
        .arg(&link)
        .args([
            "--workdir",
            &owned_by_root.display().to_string(),
            "--developer-mode",
            "1",
        ])
        .env("SCYLLA_CONF", dir.path().join("conf"))
        .env("CASSANDRA_VERSION", RELEASE)
        .output()
        .expect("setpriv runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "Startup failed: std::runtime_error (Could not create directory {}/data: Permission denied)",
            owned_by_root.display()
        )),
        "{err}"
    );
}

/// The fake in a `scylladb/scylla` image's container: the kubelet links it
/// as `scylla` on the PATH, lays out `/etc/scylla` (the image's
/// scylla.yaml) and `/var/lib/scylla`, and gives it the image tag; it runs
/// as the image's `scylla` user (999) and joins the ring at its pod IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_in_its_image() {
    use testworld::harness::{pods, str_at, until};
    use testworld::kubesim::store::WriteOptions;

    let work = tempfile::tempdir().expect("a temp dir");
    let sim = start_sim(work.path(), &["a"], |o| {
        o.fake_cassandra = Some(PathBuf::from(env!("CARGO_BIN_EXE_fake-cassandra")));
        o.fixtures = Some(testworld::harness::fixtures().expect("the fixtures"));
    })
    .await;
    let store = sim.store().clone();
    let args: Vec<&str> = vec![
        "scylla",
        "--listen-address",
        "$(POD_IP)",
        "--broadcast-address",
        "$(POD_IP)",
        "--rpc-address",
        "$(POD_IP)",
        "--seed-provider-parameters",
        "seeds=$(POD_IP)",
        "--api-address",
        "$(POD_IP)",
    ]
    .into_iter()
    .chain(SMALL_NODE)
    .collect();
    store
        .create(
            &pods(),
            json!({
                "metadata": {"name": "scylla-0", "namespace": "default"},
                "spec": {
                    "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999},
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "containers": [{"name": "scylla", "image": "scylladb/scylla:5.4.9",
                        "command": args,
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/scylla"}]}]
                }
            }),
            &WriteOptions::default(),
        )
        .expect("the pod is created");
    let pod = until("scylla-0 running", 60, || {
        let p = store.get(&pods(), "scylla-0").ok()?;
        p["status"]["containerStatuses"][0]["state"]["running"]
            .is_object()
            .then_some(p)
    })
    .await;
    let ip = str_at(&pod, "/status/podIP").to_string();
    let data_dir = until("the node normal in the ring", 60, || {
        sim.ring().with(|r| {
            r.nodes()
                .find(|n| n.address == ip && n.is_up())
                .filter(|n| n.mode() == Some(testworld::ring::OperationMode::Normal))
                .map(|n| n.data_dir.clone())
        })
    })
    .await;
    assert!(data_dir.starts_with("/var/lib/scylla/data@"), "{data_dir}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client");
    let get = |path: &str| {
        let url = format!("http://{ip}:10000{path}");
        let http = http.clone();
        async move {
            http.get(&url)
                .send()
                .await
                .expect("the API answers at the pod IP")
                .json::<Value>()
                .await
                .expect("JSON")
        }
    };
    assert_eq!(
        get("/storage_service/operation_mode").await,
        json!("NORMAL")
    );
    assert_eq!(
        get("/storage_service/scylla_release_version").await,
        json!("5.4.9"),
        "the image tag reaches the process"
    );
    // As the image's scylla user.
    let pid = str_at(&pod, "/status/containerStatuses/0/containerID")
        .strip_prefix("kubesim://")
        .expect("a container id")
        .to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().next())
        .expect("a uid");
    assert_eq!(uid, "999");
}

// ---- TLS (issue 32) ----

/// A cluster's certificate authority (EC P-256), issuing member
/// certificates.
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

    /// A certificate for `ip`, serial `serial`.
    fn issue(&self, ip: &str, serial: u64) -> Issued {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = vec![rcgen::SanType::IpAddress(ip.parse().expect("an IP"))];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ip);
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        let cert = params.signed_by(&key, &self.issuer).expect("issued");
        Issued { key, cert }
    }
}

impl Issued {
    fn client(&self, ca: &Authority) -> Option<(Vec<Vec<u8>>, Vec<u8>)> {
        Some((
            vec![self.cert.der().to_vec(), ca.cert.der().to_vec()],
            self.key.serialize_der(),
        ))
    }

    fn fingerprint(&self) -> String {
        tls_wire::fingerprint(self.cert.der())
    }
}

fn write_atomically(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).expect("a TLS file");
    std::fs::rename(&tmp, path).expect("renamed");
}

/// The TLS files of the node in `dir` as the sidecar writes them.
fn write_tls(dir: &Path, member: &Issued, ca: &Authority) {
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

/// The certificate `address` serves to a client at `from` presenting
/// `client`.
async fn served(
    address: &str,
    client: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    from: &str,
) -> Result<tls_wire::ServedCertificate, String> {
    tls_wire::served_certificate(
        address.parse().expect("an address"),
        client,
        Some(from.parse().expect("an IP")),
    )
    .await
}

/// A ScyllaDB member with the operator's TLS settings (internode `all`,
/// clients `required`) serves its certificate on the SSL storage port
/// (7001) to members of the cluster's authority only, and on the CQL port
/// to anyone; it watches its files and serves renewed ones by itself
/// ("Reloaded {...}"); a pair that does not match is "Exception loading"
/// and the old credentials stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_serves_its_certificate_and_reloads_changed_files() {
    let mut world = World::new(52).await;
    world.tls = Some((InternodeEncryption::All, ClientEncryption::Required));
    let ca = Authority::new("scylla-ca");
    let first = ca.issue(&world.ip(1), 1);
    let dir = world.root.path().join("t1");
    write_tls(&dir, &first, &ca);
    let node = world.start("t1", 1, "tls", &[1], &[]);
    world.wait_mode(&node, "NORMAL").await;
    let internode = format!("{}:7001", world.ip(1));
    let cql = format!("{}:9042", world.ip(1));
    let from = world.ip(99);
    let peer = ca.issue(&from, 99);

    let got = served(&internode, peer.client(&ca), &from)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!(got.fingerprint, first.fingerprint());
    assert_eq!(got.serial, "1");
    assert!(served(&internode, None, &from).await.is_err());
    let rogue = Authority::new("rogue");
    assert!(
        served(&internode, rogue.issue(&from, 5).client(&rogue), &from)
            .await
            .is_err()
    );
    let got = served(&cql, None, &from).await.expect("TLS to clients");
    assert_eq!(got.fingerprint, first.fingerprint());
    assert!(
        node.log().contains(&format!(
            "cql_server_controller - Starting listening for CQL clients on {cql} (encrypted, non-shard-aware)"
        )),
        "{}",
        node.log()
    );

    // Renewed files: served without a call.
    let second = ca.issue(&world.ip(1), 2);
    write_tls(&dir, &second, &ca);
    for address in [&internode, &cql] {
        poll(
            10,
            Duration::from_millis(100),
            async || match served(address, peer.client(&ca), &from).await {
                Ok(c) if c.fingerprint == second.fingerprint() => Ok(()),
                other => Err(other),
            },
            async |got| {
                format!(
                    "{address} never served the renewal: {got:?}\n{}",
                    node.log()
                )
            },
        )
        .await;
    }
    poll(
        5,
        Duration::from_millis(50),
        async || {
            let log = node.log();
            (log.contains("messaging_service - Reloaded {")
                && log.contains("cql_server_controller - Reloaded {"))
            .then_some(())
            .ok_or(log)
        },
        async |log| format!("the reloads were not logged\n{log}"),
    )
    .await;

    // A certificate of another key: refused, the old pair served.
    let stray = ca.issue(&world.ip(1), 3);
    write_atomically(
        &dir.join("tls/member.crt"),
        &format!("{}{}", stray.cert.pem(), ca.cert.pem()),
    );
    poll(
        10,
        Duration::from_millis(100),
        async || {
            let log = node.log();
            log.contains("The certificate and the given key do not match.")
                .then_some(())
                .ok_or(log)
        },
        async |log| format!("the mismatch was never refused\n{log}"),
    )
    .await;
    assert!(
        node.log()
            .contains("messaging_service - Exception loading {"),
        "{}",
        node.log()
    );
    let got = served(&internode, peer.client(&ca), &from)
        .await
        .expect("still served");
    assert_eq!(got.fingerprint, second.fingerprint());
    drop(node);
}

/// What a ScyllaDB member refuses to start with, in its words: a
/// certificate file it cannot read, a key that is not the certificate's
/// (GnuTLS checks them); internode ones before it joins, client ones once
/// it joined (the native transport starts last). A CA bundle without a
/// certificate is not refused (GnuTLS loads none) but trusts no member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_refuses_tls_files_it_cannot_use() {
    let mut world = World::new(53).await;
    world.tls = Some((InternodeEncryption::All, ClientEncryption::Required));
    let ca = Authority::new("scylla-ca");
    let member = ca.issue(&world.ip(1), 1);

    // No files.
    let (code, log) = world.start("r0", 1, "tls", &[1], &[]).exit(20);
    assert_eq!(code, 1, "{log}");
    let crt = world.root.path().join("r0/tls/member.crt");
    assert!(
        log.contains(&format!(
            "init - Startup failed: std::_Nested_exception<std::runtime_error> (Could not read certificate file {}): std::system_error (error system:2, No such file or directory)",
            crt.display()
        )),
        "{log}"
    );

    // The key of another certificate.
    let dir = world.root.path().join("r1");
    write_tls(&dir, &member, &ca);
    write_atomically(
        &dir.join("tls/member.key"),
        &ca.issue(&world.ip(1), 2).key.serialize_pem(),
    );
    let (code, log) = world.start("r1", 1, "tls", &[1], &[]).exit(20);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(
            "init - Startup failed: std::system_error (error GnuTLS:-60, The certificate and the given key do not match.)"
        ),
        "{log}"
    );
    let ring = |cluster: &'static str| {
        let url = world.sim.sim_url();
        async move {
            testworld::fake_scylla::node::ring_snapshot(&url, cluster)
                .await
                .expect("kubesim answers")
        }
    };
    assert!(ring("tls").await.is_none(), "refused before it joined");

    // Client TLS only, its files missing: refused after it joined.
    world.tls = Some((InternodeEncryption::None, ClientEncryption::Required));
    let (code, log) = world.start("r2", 1, "tls", &[1], &[]).exit(20);
    assert_eq!(code, 1, "{log}");
    assert!(
        !log.contains("initialization completed")
            && log.contains("Could not read certificate file"),
        "{log}"
    );
    let joined = ring("tls").await.expect("it joined");
    assert_eq!(joined["nodes"][0]["up"], false, "{joined}");

    // An empty CA bundle: starts, and no member is trusted.
    world.tls = Some((InternodeEncryption::All, ClientEncryption::None));
    let dir = world.root.path().join("r3");
    write_tls(&dir, &member, &ca);
    write_atomically(&dir.join("tls/ca.crt"), "");
    let node = world.start("r3", 2, "tls-2", &[2], &[]);
    world.wait_mode(&node, "NORMAL").await;
    let from = world.ip(99);
    let peer = ca.issue(&from, 99);
    let refused = served(&format!("{}:7001", world.ip(2)), peer.client(&ca), &from).await;
    assert!(refused.is_err(), "{refused:?}");
    drop(node);
}
