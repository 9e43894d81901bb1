//! The README's first command: the thesis scenario (section 5.2.1) in the
//! test world, with the real binary.
//!
//! ```text
//! cargo run -p testworld --bin demo
//! ```
//!
//! It builds the operator and the fake Cassandra node if needed, starts
//! kubesim with its simulated cluster (two zones of three Nodes with local
//! disks, a kubelet running containers as real processes), runs the
//! operator's controller beside it, admits the GKE local-SSD Cluster
//! manifest, and shows the Cluster's status, the Pods and the Cassandra ring
//! as rack `europe-west1-b` comes up one member at a time to 3; it writes
//! 1000 keys at replication factor 3, adds rack `europe-west1-c` with 2
//! members, and checks that every key still has its 3 copies. Then (thesis
//! 5.2.2 and 5.2.3) it scales rack `europe-west1-b` down to 1 member (two
//! decommissions, one after the other), deletes the Node of the remaining
//! member of that rack (its local disk goes with it) and watches the member
//! be replaced on another Node with the same address, with the ring and the
//! data check at each step. Last, a rolling upgrade to a newer 3.11 patch
//! release: the operator restarts the members on the new image one at a
//! time, and the demo fails if it ever sees two down at once. Then it stops
//! everything it started.
//!
//! Needs root (each container runs in its own mount and PID namespaces) and
//! the Cassandra default configuration files of `shared/fixtures` beside
//! the repository (or `--fixtures DIR`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testworld::harness::{self, World, WorldOptions};
use testworld::kubesim::KubeSim;
use testworld::ring::{Consistency, NodeStatus, Replication};
use testworld::{cel, schema};

const MANIFEST: &str = include_str!("../../../manifests/examples/gke-local-ssd.yaml");

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The operator and fake Cassandra binaries, beside this one; built with
/// cargo first when the demo runs under `cargo run`.
fn binaries() -> Result<(PathBuf, PathBuf), Error> {
    let here = std::env::current_exe()?;
    let dir = here.parent().ok_or("no directory for the demo binary")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        println!("== building the operator and the fake Cassandra node");
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "cassandra-operator",
            "-p",
            "testworld",
        ]);
        build.args(["--bin", "cassandra-operator", "--bin", "fake-cassandra"]);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        if !build.status()?.success() {
            return Err("cargo build failed".into());
        }
    }
    let operator = dir.join("cassandra-operator");
    let fake = dir.join("fake-cassandra");
    for path in [&operator, &fake] {
        if !path.is_file() {
            return Err(format!(
                "{} is missing: cargo build --workspace --bins",
                path.display()
            )
            .into());
        }
    }
    Ok((operator, fake))
}

fn fixtures() -> Result<PathBuf, Error> {
    Ok(match arg("--fixtures") {
        Some(dir) => harness::fixtures_at(PathBuf::from(dir))?,
        None => harness::fixtures()?,
    })
}

fn cluster_document() -> Result<Value, Error> {
    let doc = MANIFEST
        .split("\n---\n")
        .find(|d| d.contains("kind: Cluster"))
        .ok_or("no Cluster in the manifest")?;
    Ok(serde_json::to_value(serde_norway::from_str::<
        serde_norway::Value,
    >(doc)?)?)
}

async fn run() -> Result<(), Error> {
    harness::require_root()?;
    let fixtures = fixtures()?;
    let (operator, fake) = binaries()?;

    // Admission, as the API server and the controller check it.
    let mut object = cluster_document()?;
    let crd = crds::crd::definition();
    let openapi = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or("the CRD has no schema")?;
    let openapi = serde_json::to_value(openapi)?;
    let (pruned, errors) = schema::admit(&openapi, &mut object);
    let cel_errors = cel::check(&openapi, &object, None);
    if !errors.is_empty() || !cel_errors.is_empty() || !pruned.is_empty() {
        return Err(
            format!("the manifest is rejected: {errors:?} {cel_errors:?} {pruned:?}").into(),
        );
    }
    let mut cluster: Cluster = serde_json::from_value(object)?;
    crds::validate(&cluster)?;
    println!(
        "== manifests/examples/gke-local-ssd.yaml: accepted by the schema, the CEL rules and validate()"
    );

    // The test world.
    let work = tempfile::tempdir()?;
    let mut options = WorldOptions::new(
        operator.clone(),
        fake,
        fixtures,
        &["europe-west1-b", "europe-west1-c"],
    );
    options.ring = testworld::ring::Options::default();
    options.ring.timing.bootstrap_ms = 1000;
    let world = World::start(options, work.path()).await?;
    println!(
        "== kubesim serving {} (kubeconfig {})",
        world.sim.url(),
        world.kubeconfig.display()
    );
    world.install("cassandra").await?;
    let controller_log = work.path().join("controller.log");
    // Any free port for its metrics: a machine running the demo by hand
    // may have something on 8080.
    let controller = world.start_controller(&controller_log, Some("127.0.0.1:0"))?;
    println!("== operator started: {} controller", operator.display());

    let (client, sim) = (world.client.clone(), &world.sim);
    let result = scenario(&client, sim, &mut cluster).await;
    drop(controller);
    if result.is_err() {
        let log = std::fs::read_to_string(&controller_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        eprintln!("controller log (last lines):");
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
    }
    sim.stop();
    drop(world);
    println!("== stopped the operator, the members and kubesim");
    result
}

async fn scenario(client: &Client, sim: &KubeSim, cluster: &mut Cluster) -> Result<(), Error> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "cassandra");
    // Small disks: the local-disk PVs of the simulated Nodes.
    for rack in &mut cluster.spec.datacenter.racks {
        for template in &mut rack.storage.volume_claim_templates {
            if let Some(requests) = template
                .spec
                .as_mut()
                .and_then(|s| s.resources.as_mut())
                .and_then(|r| r.requests.as_mut())
            {
                requests.insert(
                    "storage".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                );
            }
        }
    }
    let mut created = false;
    for _ in 0..50 {
        if clusters
            .create(&PostParams::default(), cluster)
            .await
            .is_ok()
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !created {
        return Err("the Cluster could not be created".into());
    }
    println!(
        "\n== Cluster cassandra/cassandra created: rack europe-west1-b, 3 members, local disks"
    );
    watch_until(client, sim, 3, Duration::from_secs(300)).await?;

    sim.ring().with(|ring| -> Result<(), Error> {
        ring.create_keyspace(
            "thesis",
            Replication::network_topology([("europe-west1", 3)]),
        )?;
        ring.write_keys("thesis", "key", 1000, Consistency::Quorum)?;
        Ok(())
    })?;
    println!("\n== wrote 1000 keys to keyspace thesis (NetworkTopologyStrategy, europe-west1: 3)");

    let mut second = cluster.spec.datacenter.racks[0].clone();
    second.name = "europe-west1-c".into();
    second.members = 2;
    if let Some(placement) = second.placement.as_mut() {
        placement.node_affinity = Some(serde_json::from_value(json!({
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["europe-west1-c"]}
            ]}]}
        }))?);
    }
    let racks = vec![cluster.spec.datacenter.racks[0].clone(), second];
    let patch = json!({"spec": {"datacenter": {"name": "europe-west1", "racks": racks}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    println!("\n== rack europe-west1-c added with 2 members");
    watch_until(client, sim, 5, Duration::from_secs(300)).await?;

    ring_and_data_check(sim)?;
    let c = clusters.get("cassandra").await?;
    let s = c.status.unwrap_or_default();
    println!(
        "== Cluster cassandra: {} members, {} ready; racks:",
        s.members, s.ready_members
    );
    for (name, rack) in &s.racks {
        println!(
            "   {name}: {} members, {} ready",
            rack.members, rack.ready_members
        );
    }
    println!(
        "== converged: {} members ready in {} racks",
        s.ready_members,
        s.racks.len()
    );

    // Thesis 5.2.2: scale down through decommission.
    let mut racks = clusters.get("cassandra").await?.spec.datacenter.racks;
    racks[0].members = 1;
    let patch = json!({"spec": {"datacenter": {"racks": racks}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    println!(
        "\n== rack europe-west1-b scaled down to 1 member: each member leaves through decommission, one at a time"
    );
    watch_until(client, sim, 3, Duration::from_secs(300)).await?;
    ring_and_data_check(sim)?;

    // Thesis 5.2.3: a Node (and its local SSD) lost.
    let member = "cassandra-europe-west1-europe-west1-b-0";
    let pods: Api<Pod> = Api::namespaced(client.clone(), "cassandra");
    let node = pods
        .get(member)
        .await?
        .spec
        .and_then(|s| s.node_name)
        .ok_or("member b-0 has no Node")?;
    Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await?;
    println!("\n== Node {node} deleted, with member b-0's local disk: the member is replaced");
    let services: Api<Service> = Api::namespaced(client.clone(), "cassandra");
    let started = Instant::now();
    loop {
        let labels = services
            .get(member)
            .await?
            .metadata
            .labels
            .unwrap_or_default();
        if let Some(address) = labels.get(crds::contract::REPLACE) {
            println!("== {member}: replace={address} recorded on its Service");
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err("the lost member was never marked for replacement".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watch_until(client, sim, 3, Duration::from_secs(300)).await?;
    let new_node = pods
        .get(member)
        .await?
        .spec
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    println!("== {member} now runs on Node {new_node}");
    ring_and_data_check(sim)?;

    // A rolling upgrade: a patch release, one member at a time.
    let from = clusters.get("cassandra").await?.spec.version;
    let patch = json!({"spec": {"version": UPGRADE_TO}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    println!(
        "\n== spec.version {from} -> {UPGRADE_TO}: the operator rolls the members one at a time (evict, drain, restart on the new image, wait for NORMAL and the whole ring up)"
    );
    watch_roll(client, sim, UPGRADE_TO, 3, Duration::from_secs(300)).await?;
    ring_and_data_check(sim)?;
    Ok(())
}

/// The release the demo's rolling upgrade goes to: a patch release of the
/// example's 3.11.
const UPGRADE_TO: &str = "3.11.17";

/// Prints each member's release and readiness, the ring's releases and the
/// roll's Events as they change, until every member runs `version`, Ready,
/// and the ring shows them all up on it; fails if two members are ever
/// seen down at once.
async fn watch_roll(
    client: &Client,
    sim: &KubeSim,
    version: &str,
    members: usize,
    timeout: Duration,
) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "cassandra");
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), "cassandra");
    let started = Instant::now();
    let mut last = String::new();
    let mut seen_events = std::collections::BTreeSet::new();
    loop {
        for event in events.list(&ListParams::default()).await? {
            let reason = event.reason.clone().unwrap_or_default();
            if !reason.starts_with("MemberRestart") {
                continue;
            }
            let uid = event.metadata.uid.clone().unwrap_or_default();
            if seen_events.insert(uid) {
                println!(
                    "[{:>5.1}s] Event {reason}: {}",
                    started.elapsed().as_secs_f64(),
                    event.message.unwrap_or_default()
                );
            }
        }
        let mut states = BTreeMap::new();
        let mut done = 0;
        let mut not_ready = 0;
        for pod in pods.list(&ListParams::default()).await? {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let image = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let tag = image.rsplit(':').next().unwrap_or_default().to_string();
            let ready = pod
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if !ready {
                not_ready += 1;
            }
            if ready && tag == version {
                done += 1;
            }
            let short = name
                .trim_start_matches("cassandra-europe-west1-")
                .to_string();
            states.insert(short, format!("{tag}{}", if ready { "/Ready" } else { "" }));
        }
        let ring: Vec<(NodeStatus, String)> = sim.ring().with(|ring| {
            ring.status(None)
                .map(|t| {
                    t.rows
                        .iter()
                        .map(|r| (r.status, r.release.clone()))
                        .collect()
                })
                .unwrap_or_default()
        });
        let line = format!(
            "pods: {} | ring: {}",
            states
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            ring.iter()
                .map(|(status, release)| format!("{status} {release}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if not_ready > 1 {
            return Err(format!("{not_ready} members not ready at once during the roll").into());
        }
        let ring_done = ring.len() == members
            && ring
                .iter()
                .all(|(status, release)| *status == NodeStatus::UN && release == version);
        if done == members && ring_done {
            println!("== every member runs {version}, one member restarted at a time");
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(format!("the roll to {version} did not finish in {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints `nodetool status thesis` and fails unless the data check is clean.
fn ring_and_data_check(sim: &KubeSim) -> Result<(), Error> {
    let (status, report) = sim
        .ring()
        .with(|ring| -> Result<_, Error> { Ok((ring.status(Some("thesis"))?, ring.check())) })?;
    println!("\n== nodetool status thesis\n{status}");
    if !report.is_clean() {
        return Err(format!("data check failed:\n{report}").into());
    }
    println!("== data check: clean (every key has its 3 copies on live nodes)");
    Ok(())
}

/// Prints the Cluster's status, the Pods and the ring whenever they change,
/// until `members` are ready.
async fn watch_until(
    client: &Client,
    sim: &KubeSim,
    members: i32,
    timeout: Duration,
) -> Result<(), Error> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "cassandra");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "cassandra");
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let c = clusters.get("cassandra").await?;
        let status = c.status.clone().unwrap_or_default();
        let progressing_condition = status.conditions.iter().find(|c| c.type_ == "Progressing");
        let progressing = progressing_condition
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let settled = progressing_condition.is_some_and(|c| c.status == "False");
        let mut pod_states = BTreeMap::new();
        for pod in pods.list(&ListParams::default()).await? {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let st = pod.status.unwrap_or_default();
            let ready = st
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let phase = st.phase.unwrap_or_default();
            let short = name
                .trim_start_matches("cassandra-europe-west1-")
                .to_string();
            pod_states.insert(
                short,
                format!("{phase}{}", if ready { "/Ready" } else { "" }),
            );
        }
        let ring: Vec<String> = sim.ring().with(|ring| {
            ring.status(None)
                .map(|t| {
                    t.rows
                        .iter()
                        .map(|r| format!("{} {}", r.status, r.address))
                        .collect()
                })
                .unwrap_or_default()
        });
        let line = format!(
            "members {}/{} ready | {} | pods: {} | ring: {}",
            status.ready_members,
            status.members,
            if progressing.is_empty() {
                "-".to_string()
            } else {
                progressing
            },
            pod_states
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            if ring.is_empty() {
                "-".to_string()
            } else {
                ring.join(", ")
            }
        );
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        let all_up = sim.ring().with(|ring| {
            ring.status(None)
                .map(|t| t.rows.iter().filter(|r| r.status == NodeStatus::UN).count())
                .unwrap_or(0)
        });
        if status.ready_members == members
            && status.members == members
            && all_up == members as usize
            && settled
        {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(format!("not {members} ready members after {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
