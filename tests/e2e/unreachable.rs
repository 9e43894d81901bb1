//! A member whose Node stops answering, with the whole operator in the
//! test world (control-plane timings scaled by 0.02: the Node is
//! `Ready=Unknown` 1 s after its kubelet went silent and its Pods are
//! evicted 6 s later). The machine hangs (its processes frozen): the ring
//! sees the member down, the Node is tainted, the member's Pod is evicted
//! and stays Terminating, and nothing starts a second copy of the member
//! (neither the StatefulSet nor the operator). When the Node comes back,
//! its kubelet finishes the deletion and the member comes back on its own
//! disk, nothing lost. When instead the Node is deleted (GKE gave up on
//! the machine, and its local SSD with it), the pod garbage collector
//! removes the Terminating Pod and the operator replaces the member on
//! the spare Node, at its address.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams};
use testworld::harness::{self, World, WorldOptions, container_logs, tail, until};
use testworld::kubesim::KubeSim;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::ONE_WORLD;
use crate::world::{ring_summary, thesis_cluster, wait_ready};

const NS: &str = "cassandra";
const MEMBER: &str = "cassandra-europe-west1-europe-west1-b-2";

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `kubesim node ARGS... --url`: exits 0.
fn kubesim_node(sim: &KubeSim, args: &[&str]) {
    let kubesim = harness::beside(
        Path::new(env!("CARGO_BIN_EXE_cassandra-operator")),
        "kubesim",
    )
    .unwrap();
    let out = Command::new(&kubesim)
        .arg("node")
        .args(args)
        .args(["--url", &sim.sim_url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubesim node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn member_down(sim: &KubeSim, address: &str) -> bool {
    sim.ring().with(|r| {
        r.status(None).is_ok_and(|s| {
            s.rows
                .iter()
                .any(|row| row.address == address && row.status == NodeStatus::DN)
        })
    })
}

/// Waits until the member's Pod is evicted (Terminating), then watches for
/// a few seconds that it stays the same Terminating Pod, that no second
/// copy runs and that the operator records no replace; its UID.
async fn evicted_and_waiting(world: &World, node: &str, seconds: u64) -> String {
    let client = world.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    let evicted = loop {
        let pod = pods.get(MEMBER).await.unwrap();
        if pod.metadata.deletion_timestamp.is_some() {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "the member's Pod was not evicted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let n = nodes.get(node).await.unwrap();
    let taints: Vec<(String, String)> = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect();
    assert!(
        taints.contains(&("node.kubernetes.io/unreachable".into(), "NoExecute".into())),
        "{taints:?}"
    );
    let ready = n
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "Unknown");
    assert_eq!(
        ready.message.as_deref(),
        Some("Kubelet stopped posting node status.")
    );
    let uid = evicted.metadata.uid.clone().unwrap();
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let pod = pods.get(MEMBER).await.unwrap();
        assert_eq!(
            pod.metadata.uid.as_deref(),
            Some(uid.as_str()),
            "a second copy"
        );
        assert!(pod.metadata.deletion_timestamp.is_some());
        let members = pods.list(&Default::default()).await.unwrap().items.len();
        assert_eq!(members, 3, "no member Pod more");
        let labels = services
            .get(MEMBER)
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        assert!(
            !labels.contains_key(crds::contract::REPLACE),
            "the operator must not replace a member whose Node may come back"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_an_unreachable_node_waits_terminating_then_returns_or_is_replaced() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let mut opts = WorldOptions::new(
        operator,
        fake,
        harness::fixtures().unwrap(),
        &["europe-west1-b"],
    );
    // One spare Node with a free local SSD, for the replacement.
    opts.nodes_per_zone = 4;
    opts.ring = harness::fast_ring();
    let world = World::start(opts, work.path()).await.unwrap();
    world.install(NS).await.unwrap();
    let log = work.path().join("controller.log");
    let _controller = world.start_controller(&log, None).unwrap();
    let (sim, client) = (&world.sim, world.client.clone());
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    crate::common::create_cluster(&clusters, &thesis_cluster()).await;
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), &log).await;
    sim.ring().with(|r| {
        r.create_keyspace("ks", Replication::simple(3)).unwrap();
        r.write_keys("ks", "key", 200, Consistency::Quorum).unwrap();
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let pod = pods.get(MEMBER).await.unwrap();
    let node = pod.spec.unwrap().node_name.unwrap();
    let address = services
        .get(MEMBER)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();

    // The machine hangs.
    kubesim_node(sim, &["unreachable", &node, "--freeze"]);
    until("the ring sees the member down", 30, || {
        member_down(sim, &address).then_some(())
    })
    .await;
    let uid = evicted_and_waiting(&world, &node, 5).await;

    // It comes back: the kubelet finishes the deletion, the StatefulSet
    // makes the member again on its Node and disk.
    kubesim_node(sim, &["reachable", &node]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pod = pods.get_opt(MEMBER).await.unwrap();
        if let Some(p) = pod.as_ref()
            && p.metadata.uid.as_deref() != Some(uid.as_str())
            && pod_ready(p)
        {
            assert_eq!(
                p.spec.as_ref().unwrap().node_name.as_deref(),
                Some(node.as_str())
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member did not come back:\n{}\n{}",
            tail(&log),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(120), &log).await;
    until("3 UN again", 60, || {
        (ring_summary(sim).0 == 3).then_some(())
    })
    .await;
    let (_, status, report) = ring_summary(sim);
    assert!(report.is_clean(), "{report}\n{status}");

    // Again, and this time GKE deletes the Node: its local SSD is gone.
    kubesim_node(sim, &["unreachable", &node]);
    evicted_and_waiting(&world, &node, 1).await;
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    let mut saw_replace = false;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let labels = services
            .get(MEMBER)
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if let Some(value) = labels.get(crds::contract::REPLACE) {
            assert_eq!(value, &address, "replaced at its address");
            saw_replace = true;
        }
        let pod = pods.get_opt(MEMBER).await.unwrap();
        let elsewhere = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
            .is_some_and(|n| n != node);
        let ready = pod.as_ref().is_some_and(pod_ready);
        if saw_replace
            && elsewhere
            && ready
            && !labels.contains_key(crds::contract::REPLACE)
            && ring_summary(sim).0 == 3
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member was not replaced (replace seen: {saw_replace}, elsewhere: {elsewhere}, ready: {ready}):\n{}\n{}",
            ring_summary(sim).1,
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(120), &log).await;
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(
        report.is_clean(),
        "the replacement lost data:\n{report}\n{status}"
    );
}
