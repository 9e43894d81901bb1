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

use std::cell::Cell;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams};
use testworld::harness;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::FAKE_WORLDS;
use crate::roll::never_for;
use crate::scenario::{Scenario, label, pod_ready, secs, setup};
use crate::world::thesis_cluster;

const NS: &str = "cassandra";
const MEMBER: &str = "cassandra-europe-west1-europe-west1-b-2";

/// `kubesim node ARGS... --url`: exits 0.
fn kubesim_node(s: &Scenario, args: &[&str]) {
    let kubesim = harness::beside(
        Path::new(env!("CARGO_BIN_EXE_cassandra-operator")),
        "kubesim",
    )
    .unwrap();
    let out = Command::new(&kubesim)
        .arg("node")
        .args(args)
        .args(["--url", &s.sim().sim_url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubesim node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the member's Pod is evicted (Terminating) from `node`,
/// tainted and `Ready=Unknown`, then watches for `duration` that it stays
/// the same Terminating Pod, that no second copy runs and that the
/// operator records no replace; its UID.
async fn evicted_and_waiting(s: &Scenario, node: &str, duration: Duration) -> String {
    let pods: Api<Pod> = s.api();
    let evicted = s
        .until("the member's Pod evicted", secs(60), || async {
            let pod = pods.get(MEMBER).await.unwrap();
            pod.metadata.deletion_timestamp.is_some().then_some(pod)
        })
        .await;
    let n = Api::<Node>::all(s.client()).get(node).await.unwrap();
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
    let uid = evicted.metadata.uid.unwrap();
    never_for(duration, || async {
        let pod = pods.get(MEMBER).await.unwrap();
        let members = pods.list(&Default::default()).await.unwrap().items.len();
        let replace = label(&s.service(MEMBER).await.metadata, crds::contract::REPLACE);
        if pod.metadata.uid.as_deref() != Some(uid.as_str()) {
            Some("a second copy".into())
        } else if pod.metadata.deletion_timestamp.is_none() {
            Some("the evicted Pod is no longer Terminating".into())
        } else if members != 3 {
            Some(format!("{members} member Pods, not 3"))
        } else {
            replace.map(|r| {
                format!(
                    "the operator must not replace a member whose Node may come back: replace={r}"
                )
            })
        }
    })
    .await;
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_an_unreachable_node_waits_terminating_then_returns_or_is_replaced() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup()
        .zones(&["europe-west1-b"])
        .namespace(NS)
        // One spare Node with a free local SSD, for the replacement.
        .options(|o| o.nodes_per_zone = 4)
        .start()
        .await;
    s.create(thesis_cluster()).await;
    s.until_ready("cassandra", 3, secs(180)).await;
    s.ring()
        .write("ks", Replication::simple(3), 200, Consistency::Quorum);
    let pods: Api<Pod> = s.api();
    let node = s.pod(MEMBER).await.spec.unwrap().node_name.unwrap();
    let address = s.service(MEMBER).await.spec.unwrap().cluster_ip.unwrap();

    // The machine hangs.
    kubesim_node(&s, &["unreachable", &node, "--freeze"]);
    s.until("the ring to see the member down", secs(30), || async {
        s.ring().rows().contains(&(address.clone(), NodeStatus::DN))
    })
    .await;
    let uid = evicted_and_waiting(&s, &node, secs(5)).await;

    // It comes back: the kubelet finishes the deletion, the StatefulSet
    // makes the member again on its Node and disk.
    kubesim_node(&s, &["reachable", &node]);
    let back = s
        .until("the member back, Ready", secs(120), || async {
            pods.get_opt(MEMBER)
                .await
                .unwrap()
                .filter(|p| p.metadata.uid.as_deref() != Some(uid.as_str()) && pod_ready(p))
        })
        .await;
    assert_eq!(
        back.spec.unwrap().node_name,
        Some(node.clone()),
        "on its Node"
    );
    s.until_ready("cassandra", 3, secs(120)).await;
    s.until("3 UN again", secs(60), || async { s.ring().up() == 3 })
        .await;
    s.ring().assert_intact(3);

    // Again, and this time GKE deletes the Node: its local SSD is gone.
    kubesim_node(&s, &["unreachable", &node]);
    evicted_and_waiting(&s, &node, secs(1)).await;
    Api::<Node>::all(s.client())
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    let saw_replace = Cell::new(false);
    s.until(
        "the member replaced on another Node, at its address",
        secs(180),
        || async {
            let replace = label(&s.service(MEMBER).await.metadata, crds::contract::REPLACE);
            if let Some(value) = &replace {
                assert_eq!(value, &address, "replaced at its address");
                saw_replace.set(true);
            }
            let pod = pods.get_opt(MEMBER).await.unwrap();
            let elsewhere = pod
                .as_ref()
                .and_then(|p| p.spec.as_ref()?.node_name.clone())
                .is_some_and(|n| n != node);
            let ready = pod.as_ref().is_some_and(pod_ready);
            let up = s.ring().up();
            if saw_replace.get() && elsewhere && ready && replace.is_none() && up == 3 {
                Ok(())
            } else {
                Err(format!(
                    "replace seen: {}, now {replace:?}, elsewhere: {elsewhere}, ready: {ready}, {up} UN",
                    saw_replace.get()
                ))
            }
        },
    )
    .await;
    s.until_ready("cassandra", 3, secs(120)).await;
    s.ring().assert_intact(3);
}
