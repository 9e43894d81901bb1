//! Nodes that stop answering, with real processes: the node lifecycle
//! controller's `Ready=Unknown` after the (scaled) node monitor grace
//! period, the unreachable taints, taint-based eviction after the Pods'
//! default tolerations, a Pod that stays Terminating (and is not
//! replaced) while its kubelet is away, and what happens when the
//! kubelet comes back or the Node is deleted; a NotReady kubelet's Node
//! tainted so that nothing is scheduled there.

use serde_json::Value;
use std::time::{Duration, Instant};
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::KubeSim;
use testworld::kubesim::sim::nodelifecycle::{NOT_READY, UNREACHABLE};
use testworld::kubesim::store::{DeleteOptions, Store, Target, WriteOptions};

#[allow(dead_code)]
mod support;
use support::{container_pid, db_statefulset, start_sim};

/// 50 s of grace → 1 s, 300 s of toleration → 6 s.
const SCALE: f64 = 0.02;

fn t(group: &str, plural: &str, ns: Option<&str>) -> Target {
    Target::new(group, "v1", plural, ns)
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind)
}

fn ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

fn taints(node: &Value) -> Vec<(String, String)> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| (s(t, "/key").to_string(), s(t, "/effect").to_string()))
        .collect()
}

async fn world(work: &std::path::Path, zones: &[&str]) -> (KubeSim, Store) {
    let sim = start_sim(work, zones, |o| {
        o.max_grace = Some(Duration::from_secs(2));
        o.node_time_scale = SCALE;
    })
    .await;
    let store = sim.store().clone();
    store
        .create(
            &t("apps", "statefulsets", Some("default")),
            // Two members, one per Node, each on its Node's local SSD.
            db_statefulset(2),
            &WriteOptions::default(),
        )
        .unwrap();
    for i in 0..2 {
        until("both members ready", 60, || {
            store
                .get(&pods(), &format!("db-{i}"))
                .ok()
                .filter(ready)
                .map(drop)
        })
        .await;
    }
    (sim, store)
}

async fn post(sim: &KubeSim, path: &str) {
    let resp = reqwest::Client::new()
        .post(format!("{}/sim/nodes/{path}", sim.sim_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.text().await.unwrap()
    );
}

/// A process's state letter in /proc (`T`: stopped), None when gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_nodes_pod_is_evicted_stays_terminating_and_comes_back_with_its_kubelet() {
    let work = tempfile::tempdir().unwrap();
    let (sim, store) = world(work.path(), &["a", "b"]).await;
    let nodes = t("", "nodes", None);
    let pod = store.get(&pods(), "db-0").unwrap();
    let node = s(&pod, "/spec/nodeName").to_string();
    let (uid, pid) = (s(&pod, "/metadata/uid").to_string(), container_pid(&pod));

    // The machine hangs: its kubelet posts nothing, its processes stop.
    let cut = Instant::now();
    post(&sim, &format!("{node}/unreachable?freeze=true")).await;
    until("the container stopped with its machine", 10, || {
        (proc_state(pid) == Some('T')).then_some(())
    })
    .await;
    let unknown = until("Ready=Unknown after the grace period", 20, || {
        let n = store.get(&nodes, &node).ok()?;
        let c = condition(&n, "Ready")?.clone();
        (c["status"] == "Unknown").then_some(c)
    })
    .await;
    assert!(
        cut.elapsed() >= Duration::from_secs_f64(50.0 * SCALE),
        "not before the node monitor's grace period"
    );
    assert_eq!(unknown["reason"], "NodeStatusUnknown");
    assert_eq!(unknown["message"], "Kubelet stopped posting node status.");
    let tainted = until("the unreachable taints", 10, || {
        let n = store.get(&nodes, &node).ok()?;
        (taints(&n).len() == 2).then_some(n)
    })
    .await;
    let mut found = taints(&tainted);
    found.sort();
    assert_eq!(
        found,
        vec![
            (UNREACHABLE.to_string(), "NoExecute".to_string()),
            (UNREACHABLE.to_string(), "NoSchedule".to_string())
        ]
    );
    until("its Pod marked not ready by the controller", 10, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .filter(|p| !ready(p))
            .map(drop)
    })
    .await;
    let other = store.get(&pods(), "db-1").unwrap();
    assert!(ready(&other), "the other Node's member is untouched");

    // The default toleration (unreachable:NoExecute for 300 s, scaled to
    // 6 s) runs out: the taint eviction controller deletes the Pod.
    let tainted_at = Instant::now();
    let evicted = until("the Pod evicted", 30, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_some())
    })
    .await;
    assert!(
        tainted_at.elapsed() >= Duration::from_secs_f64(300.0 * SCALE) - Duration::from_secs(2),
        "not before its toleration ran out"
    );
    let disruption = condition(&evicted, "DisruptionTarget").expect("a DisruptionTarget condition");
    assert_eq!(disruption["reason"], "DeletionByTaintManager");
    // Nobody confirms the deletion: the Pod stays Terminating, the same
    // Pod, and the StatefulSet makes no second one; its process lives on.
    let settle = Instant::now() + Duration::from_secs(3);
    while Instant::now() < settle {
        let p = store.get(&pods(), "db-0").unwrap();
        assert_eq!(s(&p, "/metadata/uid"), uid, "no second copy of the member");
        assert!(p.pointer("/metadata/deletionTimestamp").is_some());
        assert_eq!(proc_state(pid), Some('T'));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The kubelet is back: it finishes the deletion, the StatefulSet makes
    // the member again, on its Node (its local disk is there), and the
    // control plane takes its taints away.
    post(&sim, &format!("{node}/reachable")).await;
    let again = until("the member made again", 30, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .filter(|p| s(p, "/metadata/uid") != uid && ready(p))
    })
    .await;
    assert_eq!(s(&again, "/spec/nodeName"), node);
    until("the old process gone", 10, || {
        proc_state(pid).is_none().then_some(())
    })
    .await;
    let healed = until("Ready and untainted", 10, || {
        let n = store.get(&nodes, &node).ok()?;
        (taints(&n).is_empty() && condition(&n, "Ready")?["status"] == "True").then_some(n)
    })
    .await;
    assert_eq!(
        condition(&healed, "Ready").unwrap()["reason"],
        "KubeletReady"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_unreachable_node_s_pods_are_force_deleted_and_a_not_ready_node_gets_nothing_new()
{
    let work = tempfile::tempdir().unwrap();
    // Three zones: with every zone's Nodes down the controller would
    // taint nothing (it blames itself), so one stays healthy.
    let (sim, store) = world(work.path(), &["a", "b", "c"]).await;
    let nodes = t("", "nodes", None);

    // db-0's machine is cut off (processes running), its Pod evicted and
    // Terminating; then the Node object is deleted: the pod garbage
    // collector force-deletes its Pods, the StatefulSet makes db-0 again.
    let pod = store.get(&pods(), "db-0").unwrap();
    let node = s(&pod, "/spec/nodeName").to_string();
    let (uid, pid) = (s(&pod, "/metadata/uid").to_string(), container_pid(&pod));
    post(&sim, &format!("{node}/unreachable")).await;
    until("the Pod evicted", 30, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_some())
    })
    .await;
    assert_eq!(proc_state(pid).map(|c| c != 'T'), Some(true), "running on");
    store
        .delete(&nodes, &node, &DeleteOptions::default())
        .unwrap();
    until("the orphaned Pod force-deleted and made again", 30, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .filter(|p| s(p, "/metadata/uid") != uid)
            .map(drop)
    })
    .await;
    until("its machine's processes gone", 10, || {
        proc_state(pid).is_none().then_some(())
    })
    .await;

    // The other Node's kubelet posts Ready=False: not-ready taints; its
    // member is evicted (the kubelet, still there, stops it) and the new
    // one is not scheduled on the tainted Node, the only one its disk is on.
    let pod = store.get(&pods(), "db-1").unwrap();
    let node = s(&pod, "/spec/nodeName").to_string();
    let uid = s(&pod, "/metadata/uid").to_string();
    post(&sim, &format!("{node}/not-ready")).await;
    let n = until("Ready=False and the not-ready taints", 20, || {
        let n = store.get(&nodes, &node).ok()?;
        (condition(&n, "Ready")?["status"] == "False" && taints(&n).len() == 2).then_some(n)
    })
    .await;
    assert_eq!(condition(&n, "Ready").unwrap()["reason"], "KubeletNotReady");
    assert!(taints(&n).iter().all(|(k, _)| k == NOT_READY));
    let pending = until("the member made again, unschedulable", 40, || {
        let p = store.get(&pods(), "db-1").ok()?;
        let c = condition(&p, "PodScheduled")?;
        (s(&p, "/metadata/uid") != uid && c["status"] == "False").then(|| p.clone())
    })
    .await;
    let message = s(condition(&pending, "PodScheduled").unwrap(), "/message");
    assert!(
        message.contains("had untolerated taint"),
        "the scheduler keeps it off the tainted Node: {message}"
    );
}
