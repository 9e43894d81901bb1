//! A major upgrade by hand in the test world (issue 14), without the
//! controller's rolls: one member of a 4.1 rack restarted on a 5.0 image
//! (the StatefulSet set to `OnDelete` on the new image, its Pod deleted,
//! the operator stopped so that it neither reverts nor rolls). The ring
//! runs mixed and keeps its data (`kubesim ring` and `nodetool version`
//! show the releases); the upgraded member's sidecar counts the sstables
//! 4.1 left on its disk until `nodetool upgradesstables` (over the fake's
//! stand-in of the local JMX port; the agent's policy refuses it) rewrites
//! them; a scale-up driven by hand during the mixed state is refused by
//! Cassandra's streaming rules.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::harness::{self, fast_ring, until};
use testworld::ring::{Consistency, OperationMode, Replication};

use crate::common::ONE_WORLD;
use crate::nodes::pod_logs;
use crate::world::{ring_summary, wait_ready, world};

const OLD: &str = "4.1.8";
const NEW: &str = "5.0.3";

/// One Jolokia POST to what a Pod's database serves on its loopback at
/// `port` (8778: the agent; 7199: the fake's stand-in of the local JMX
/// port), from inside the Pod's network namespace (a thread of this
/// process entering it, as `kubectl exec` would be inside the container):
/// the HTTP response's body.
fn jolokia_in_pod(pid: u32, port: u16, body: serde_json::Value) -> String {
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).expect("the pod's netns");
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the agent");
        let body = body.to_string();
        write!(
            stream,
            "POST /jolokia/ HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("a request");
        let mut out = String::new();
        stream.read_to_string(&mut out).expect("a response");
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or(out)
    })
    .join()
    .expect("the thread")
}

/// The sidecar's `/metrics` on the Pod's IP: the member's old-format
/// sstables total, once it is served.
fn old_format_gauge(pod_ip: &str) -> Option<u64> {
    let (_, text) = crate::controller::http_get(&format!("{pod_ip}:8080"), "/metrics")?;
    text.lines()
        .find_map(|l| l.strip_prefix("cassandra_operator_member_sstables_old_format "))
        .and_then(|v| v.trim().parse().ok())
}

/// The `Data.db` files of `version` under a data directory.
fn data_files(data: &Path, version: &str) -> usize {
    sidecar::sstables::list(data)
        .iter()
        .flat_map(|(_, _, files)| files)
        .filter(|f| f.starts_with(&format!("{version}-")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_on_the_next_major_runs_mixed_and_counts_old_sstables() {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, controller, log) = world(&["a"], work.path(), fast_ring(), "db").await;
    let (sim, client) = (&world.sim, world.client.clone());
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "db");
    let overrides = |text: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "c-overrides", "namespace": "db"},
            "data": {"cassandra.yaml": text}
        }))
        .unwrap()
    };
    configmaps
        .create(&PostParams::default(), &overrides("concurrent_reads: 32\n"))
        .await
        .unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": OLD, "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 3,
            "configMapName": "c-overrides",
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    crate::common::create_cluster(&clusters, &cluster).await;
    wait_ready(&clusters, "c", 3, Duration::from_secs(180), &log).await;
    sim.ring().with(|r| {
        r.create_keyspace("app", Replication::simple(3)).unwrap();
        r.write_keys("app", "key", 1000, Consistency::Quorum)
            .unwrap();
    });

    // The operator is stopped: the StatefulSet is changed by hand, and no
    // controller reverts or rolls it.
    drop(controller);
    let member = "c-dc-r-2";
    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    let address = services
        .get(member)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "db");
    let mut sts = statefulsets.get("c-dc-r").await.unwrap();
    let spec = sts.spec.as_mut().unwrap();
    spec.update_strategy = Some(serde_json::from_value(json!({"type": "OnDelete"})).unwrap());
    let pod_spec = spec.template.spec.as_mut().unwrap();
    let database = pod_spec
        .containers
        .iter_mut()
        .find(|c| {
            c.image
                .as_deref()
                .is_some_and(|i| i.ends_with(&format!(":{OLD}")))
        })
        .expect("the database container");
    let image = database.image.clone().unwrap();
    database.image = Some(image.replace(OLD, NEW));
    // The sidecar's scan of the data directory, every second here; the
    // fake's stand-in of Cassandra's local JMX port, which nodetool uses.
    database.env.get_or_insert_default().extend([
        serde_json::from_value(json!({"name": "SSTABLE_SCAN_SECONDS", "value": "1"})).unwrap(),
        serde_json::from_value(json!({"name": "FAKE_CASSANDRA_JMX", "value": "127.0.0.1:7199"}))
            .unwrap(),
    ]);
    sts.metadata.managed_fields = None;
    statefulsets
        .replace("c-dc-r", &PostParams::default(), &sts)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "db");
    pods.delete(member, &DeleteParams::default()).await.unwrap();

    // The member comes back on 5.0, on its data: the ring runs mixed.
    until("the member back on 5.0", 120, || {
        sim.ring().with(|r| {
            r.node_by_address(&address)
                .filter(|n| n.release == NEW && n.mode() == Some(OperationMode::Normal))
                .map(|_| ())
        })
    })
    .await;
    let releases: Vec<String> = sim.ring().with(|r| {
        let mut v: Vec<String> = r
            .nodes()
            .filter(|n| n.process.is_some())
            .map(|n| n.release.clone())
            .collect();
        v.sort();
        v
    });
    assert_eq!(releases, [OLD, OLD, NEW]);
    let kubesim = harness::beside(
        Path::new(env!("CARGO_BIN_EXE_cassandra-operator")),
        "kubesim",
    )
    .unwrap();
    let out = Command::new(&kubesim)
        .args(["ring", "--url", &sim.sim_url(), "--check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(&address) && l.trim_end().ends_with(NEW)),
        "kubesim ring shows the upgraded member's release:\n{text}"
    );
    sim.ring().with(|r| {
        r.write_keys("app", "mixed", 100, Consistency::Quorum)
            .expect("a mixed ring takes writes")
    });
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");

    // Its sidecar counts the sstables 4.1 left (`nb`; 5.0 writes `nc`
    // under its shipped CASSANDRA_4 mode).
    let pod = pods.get(member).await.unwrap();
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "db");
    let pv_name = claims
        .get(&format!("data-{member}"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .unwrap();
    let data = testworld::kubesim::sim::disks::host_dir_of_pv(
        work.path(),
        &serde_json::to_value(&pv).unwrap(),
    )
    .join("data");
    let nb = data_files(&data, "nb");
    assert!(nb > 0, "4.1 flushed its sstables: {}", data.display());
    let mut gauge = None;
    for _ in 0..100 {
        gauge = old_format_gauge(&pod_ip);
        if gauge == Some(nb as u64) && data_files(&data, "nc") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gauge, Some(nb as u64), "the gauge counts the nb files");
    assert!(data_files(&data, "nc") > 0, "5.0 writes nc beside them");

    // Rewriting them is the user's `nodetool upgradesstables`, over JMX:
    // the operator's Jolokia policy does not let the agent run it.
    let pid: u32 = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("kubesim://")
        .parse()
        .unwrap();
    // `nodetool version` in the Pod (the operator's, over the agent).
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg(env!("CARGO_BIN_EXE_cassandra-operator"))
        .args(["nodetool", "version"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("ReleaseVersion: {NEW}\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let upgrade = json!({"type": "exec", "mbean": "org.apache.cassandra.db:type=StorageService",
        "operation": "upgradeSSTables(java.lang.String,boolean,int,[Ljava.lang.String;)",
        "arguments": ["app", true, 0, []]});
    let refused = jolokia_in_pod(pid, 8778, upgrade.clone());
    assert!(refused.contains("\"status\":403"), "{refused}");
    assert_eq!(old_format_gauge(&pod_ip), Some(nb as u64));
    let done = jolokia_in_pod(pid, 7199, upgrade);
    assert!(
        done.contains("\"status\":200") && done.contains("\"value\":0"),
        "{done}"
    );
    until("the gauge at 0 after upgradesstables", 30, || {
        (old_format_gauge(&pod_ip) == Some(0)).then_some(())
    })
    .await;
    assert_eq!(data_files(&data, "nb"), 0, "every nb sstable rewritten");
    assert!(data_files(&data, "nc") > 0);

    // A scale-up by hand while majors are mixed: the new member runs 5.0
    // past CASSANDRA_4 (messaging 13) and cannot stream from the 4.1
    // members (12): its bootstrap fails as Cassandra's does, JOINING_FAILED,
    // and nothing else changes.
    configmaps
        .replace(
            "c-overrides",
            &PostParams::default(),
            &overrides("concurrent_reads: 32\nstorage_compatibility_mode: UPGRADING\n"),
        )
        .await
        .unwrap();
    let live = clusters.get("c").await.unwrap();
    let valid = controller::validated::validate(&live).expect("a valid Cluster");
    let rack = &live.spec.datacenter.racks[0];
    services
        .create(
            &PostParams::default(),
            &controller::resources::member_service(&valid, rack, 3, false),
        )
        .await
        .unwrap();
    statefulsets
        .patch(
            "c-dc-r",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let newcomer = "c-dc-r-3";
    until("the newcomer's failed bootstrap", 120, || {
        pod_logs(work.path(), newcomer)
            .contains("Error during bootstrap: Stream failed: peer ")
            .then_some(())
    })
    .await;
    let logs = pod_logs(work.path(), newcomer);
    assert!(
        logs.contains("only supports messaging versions lower (12) than this node supports (13)"),
        "{logs}"
    );
    let new_address = services
        .get(newcomer)
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let mode = sim
        .ring()
        .with(|r| r.node_by_address(&new_address).and_then(|n| n.mode()));
    assert_eq!(mode, Some(OperationMode::JoiningFailed));
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(report.is_clean(), "{report}\n{status}");
}
