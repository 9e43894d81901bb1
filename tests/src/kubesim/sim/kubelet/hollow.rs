//! The hollow kubelet (kubemark's hollow nodes): a scheduled Pod is
//! reported running and Ready at once, with an address but no network
//! namespace, no volumes and no processes; a Pod marked for deletion is
//! removed at once. For benchmarks of the controller at a scale (thousands
//! of members) that real processes cannot reach on one machine; nothing
//! a member's processes would do (the sidecar's labels, the ring) happens.
//! I/O.

use super::{Stop, force_delete, stopped};
use crate::kubesim::now_rfc3339;
use crate::kubesim::sim::{ns_of, patch_status, s, t};
use crate::kubesim::store::Store;
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::sync::watch;

/// An address for a hollow Pod: from 10.128.0.0/9, outside the Pod
/// network's /24 (which holds 253 Pods, a thousand clusters need 3,000);
/// nothing connects to a hollow Pod.
pub(super) fn next_ip() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % (1 << 23);
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + n)
}

/// The status a real kubelet reports once every container runs and passes
/// its readiness probe.
pub(super) fn ready_status(pod: &Value, ip: &str, host_ip: &str) -> Value {
    let now = now_rfc3339();
    let statuses = |path: &str, state: Value, ready: bool| -> Vec<Value> {
        pod.pointer(path)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let image = s(c, "/image");
                json!({"name": s(c, "/name"), "image": image,
                    "imageID": format!("kubesim://{image}"), "restartCount": 0,
                    "state": state, "lastState": {}, "ready": ready, "started": ready,
                    "containerID": format!("kubesim://hollow-{}", s(c, "/name"))})
            })
            .collect()
    };
    let conditions: Vec<Value> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .map(|kind| {
        json!({"type": kind, "status": "True", "lastProbeTime": null,
            "lastTransitionTime": now})
    })
    .collect();
    json!({
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
        "qosClass": "Burstable",
        "initContainerStatuses": statuses("/spec/initContainers",
            json!({"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": now, "finishedAt": now}}), false),
        "containerStatuses": statuses("/spec/containers",
            json!({"running": {"startedAt": now}}), true),
    })
}

/// Runs one hollow Pod: Ready at once, removed when stopped gracefully.
pub(super) async fn run_pod(
    store: Store,
    pod: Value,
    ip: String,
    host_ip: String,
    mut rx: watch::Receiver<Stop>,
) {
    let status = ready_status(&pod, &ip, &host_ip);
    let _ = patch_status(&store, "", "pods", &pod, &status);
    if stopped(&mut rx).await == Stop::Graceful {
        let current = store
            .get(&t("", "pods", ns_of(&pod)), s(&pod, "/metadata/name"))
            .unwrap_or(pod);
        force_delete(&store, &current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hollow_addresses_are_distinct_and_outside_the_pod_network() {
        let (a, b) = (next_ip(), next_ip());
        assert_ne!(a, b);
        assert_eq!(a.octets()[..2], [10, 128]);
    }

    #[test]
    fn every_container_is_ready_and_every_init_container_done() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "init", "image": "op:1"}],
            "containers": [{"name": "cassandra", "image": "cassandra:4.1.8"}]}});
        let st = ready_status(&pod, "10.0.0.7", "127.0.1.1");
        assert_eq!(st["phase"], "Running");
        assert_eq!(st["podIP"], "10.0.0.7");
        assert!(
            st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["status"] == "True")
        );
        assert_eq!(st["containerStatuses"][0]["ready"], true);
        assert_eq!(
            st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
    }
}
