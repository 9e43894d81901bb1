//! The harness's write hooks on the real controller: crashed right after
//! its StatefulSet create commits (it never sees the response), a
//! restarted controller takes over from what is stored and brings the
//! member up; frozen after a write, it resumes where it stopped.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use serde_json::json;
use testworld::harness::{self, World, WorldOptions, container_logs, operator_user, tail};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_crashed_after_a_write_is_taken_over_by_the_next() {
    let work = tempfile::tempdir().unwrap();
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), &["a"]);
    let world = World::start(opts, work.path()).await.unwrap();
    world.install("db").await.unwrap();
    let log = work.path().join("controller-1.log");
    let mut first = world.start_controller(&log, Some("127.0.0.1:0")).unwrap();
    let user = operator_user();
    world.crash_on_write(&first, Some(&user), "create", "statefulsets", None, 1);

    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), "db");
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "3.11.6", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 1,
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    }))
    .unwrap();
    crate::common::create_cluster(&clusters, &cluster).await;
    let status = harness::until("the first controller's crash", 30, || first.exited()).await;
    assert_eq!(status.signal(), Some(9), "{}", tail(&log));
    let sts: Api<StatefulSet> = Api::namespaced(world.client.clone(), "db");
    let stored = sts
        .get("c-dc-r")
        .await
        .expect("the write committed before the crash");
    assert_eq!(
        stored.spec.unwrap().replicas,
        Some(0),
        "created with 0 replicas"
    );

    // The next controller, frozen after its first scale-up write for a while.
    let log2 = work.path().join("controller-2.log");
    let second = world.start_controller(&log2, Some("127.0.0.1:0")).unwrap();
    world.freeze_on_write(
        &second,
        Some(&user),
        "patch",
        "statefulsets",
        Some("c-dc-r"),
        1,
    );
    let pid = second.0.id();
    let stopped = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.starts_with('T').then_some(())
    };
    harness::until("the second controller frozen after its patch", 60, stopped).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(stopped().is_some(), "still frozen");
    second.resume();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = clusters.get("c").await.unwrap().status.unwrap_or_default();
        if s.members == 1 && s.ready_members == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready: {s:?}\n{}\n{}",
            tail(&log2),
            container_logs(work.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let statefulsets = sts.list(&Default::default()).await.unwrap().items;
    assert_eq!(statefulsets.len(), 1, "no duplicate after the crash");
}
