//! A major upgrade by hand in the test world (issue 14), without the
//! controller's rolls: one member of a 4.1 rack restarted on a 5.0 image
//! (the StatefulSet set to `OnDelete` on the new image, its Pod deleted,
//! the operator stopped so that it neither reverts nor rolls). The ring
//! runs mixed and keeps its data (`kubesim ring` and `nodetool version`
//! show the releases). In 5.0's shipped `storage_compatibility_mode:
//! CASSANDRA_4` the upgraded member writes `nb` sstables as 4.1 does (real
//! 5.0.3 has no `nc`), so its sidecar counts none of 4.1's as old; restarted
//! under `UPGRADING` it writes `oa` and the sidecar counts the `nb` ones
//! until an `upgradeSSTables` through the operator's Jolokia agent (its
//! policy lets the sidecar's maintenance call it; the operator is stopped
//! here, so the test calls it) rewrites them; a scale-up
//! driven by hand during the mixed state is refused by Cassandra's
//! streaming rules.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::harness;
use testworld::ring::{Consistency, OperationMode, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, cluster, container_pid, overrides, secs, setup};

const OLD: &str = "4.1.8";
const NEW: &str = "5.0.3";

/// One Jolokia POST to what a Pod's database serves on its loopback at
/// `port` (8778: the agent; 7199: the fake's stand-in of the local JMX
/// port), from inside the Pod's network namespace (a thread of this
/// process entering it, as `kubectl exec` would be inside the container):
/// the HTTP response's body.
fn jolokia_in_pod(pid: i32, port: u16, body: serde_json::Value) -> String {
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
    let (_, text) = crate::common::http_get(&format!("{pod_ip}:8080"), "/metrics")?;
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

/// A member's address: its Service's ClusterIP.
async fn address_of(s: &Scenario, member: &str) -> String {
    s.service(member).await.spec.unwrap().cluster_ip.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_on_the_next_major_runs_mixed_and_counts_old_sstables() {
    let _one = FAKE_WORLDS.lock().await;
    let mut s = setup().start().await;
    let configmaps: Api<ConfigMap> = s.api();
    configmaps
        .create(
            &PostParams::default(),
            &overrides("c-overrides", "concurrent_reads: 32\n"),
        )
        .await
        .unwrap();
    let c = cluster("c")
        .version(OLD)
        .rack("r", 3)
        .with_rack(json!({"configMapName": "c-overrides"}));
    s.create(&c).await;
    s.until_ready("c", 3, secs(180)).await;
    s.ring()
        .write("app", Replication::simple(3), 1000, Consistency::Quorum);

    // The operator is stopped: the StatefulSet is changed by hand, and no
    // controller reverts or rolls it.
    s.stop_controller();
    let member = "c-dc-r-2";
    let address = address_of(&s, member).await;
    let statefulsets: Api<StatefulSet> = s.api();
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
    s.delete_pods(&[member]).await;

    // The member comes back on 5.0, on its data: the ring runs mixed.
    s.until("the member back on 5.0", secs(120), || async {
        s.sim().ring().with(|r| {
            r.node_by_address(&address)
                .is_some_and(|n| n.release == NEW && n.mode() == Some(OperationMode::Normal))
        })
    })
    .await;
    let releases: Vec<String> = s.sim().ring().with(|r| {
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
        .args(["ring", "--url", &s.sim().sim_url(), "--check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(&address) && l.trim_end().ends_with(NEW)),
        "kubesim ring shows the upgraded member's release:\n{text}"
    );

    // In 5.0's shipped CASSANDRA_4 mode (the overrides do not set the key)
    // the member writes `nb`, as 4.1 did: its own flush of the mixed
    // writes adds `nb` files beside 4.1's, none is `oa`, and the sidecar
    // counts nothing old. Its scan runs every second: a gauge that counted
    // 4.1's files would show them within the three seconds it must hold 0.
    let data = s.data_volume(member).await.join("data");
    let left_by_4_1 = data_files(&data, "nb");
    assert!(
        left_by_4_1 > 0,
        "4.1 flushed its sstables: {}",
        data.display()
    );
    let pod = s.pod(member).await;
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    s.sim().ring().with(|r| {
        r.write_keys("app", "mixed", 100, Consistency::Quorum)
            .expect("a mixed ring takes writes")
    });
    s.ring().assert_intact(3);
    s.until(
        "5.0 in CASSANDRA_4 mode to write nb beside 4.1's, the gauge at 0",
        secs(10),
        || async {
            let gauge = old_format_gauge(&pod_ip);
            let (nb, oa) = (data_files(&data, "nb"), data_files(&data, "oa"));
            if gauge == Some(0) && nb > left_by_4_1 && oa == 0 {
                Ok(())
            } else {
                Err(format!(
                    "gauge {gauge:?} for {nb} nb files ({left_by_4_1} from 4.1), {oa} oa files"
                ))
            }
        },
    )
    .await;
    for _ in 0..6 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(
            old_format_gauge(&pod_ip),
            Some(0),
            "nothing is old under CASSANDRA_4"
        );
    }
    assert_eq!(data_files(&data, "oa"), 0);

    // Past CASSANDRA_4: the overrides set `storage_compatibility_mode:
    // UPGRADING` and the member restarts on them (its Pod deleted; the 4.1
    // members keep running on what they rendered, as 4.1 would refuse a
    // file with that key). It comes back at messaging version 13, writes
    // `oa`, and its sidecar counts every `nb` file as old.
    configmaps
        .replace(
            "c-overrides",
            &PostParams::default(),
            &overrides(
                "c-overrides",
                "concurrent_reads: 32\nstorage_compatibility_mode: UPGRADING\n",
            ),
        )
        .await
        .unwrap();
    s.delete_pods(&[member]).await;
    s.until(
        "the member back on 5.0 under UPGRADING",
        secs(120),
        || async {
            s.sim().ring().with(|r| {
                r.node_by_address(&address).is_some_and(|n| {
                    n.release == NEW
                        && n.messaging_version == 13
                        && n.mode() == Some(OperationMode::Normal)
                })
            })
        },
    )
    .await;
    s.sim().ring().with(|r| {
        r.write_keys("app", "upgrading", 100, Consistency::Quorum)
            .expect("a mixed ring takes writes")
    });
    s.ring().assert_intact(3);
    let pod = s.pod(member).await;
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let nb = data_files(&data, "nb");
    assert!(nb > left_by_4_1, "5.0's own nb files are there too");
    s.until(
        "the gauge to count the nb files, and 5.0 to write oa beside them",
        secs(10),
        || async {
            let gauge = old_format_gauge(&pod_ip);
            let oa = data_files(&data, "oa");
            if gauge == Some(nb as u64) && oa > 0 {
                Ok(())
            } else {
                Err(format!("gauge {gauge:?} for {nb} nb files, {oa} oa files"))
            }
        },
    )
    .await;

    // Rewriting them is what the sidecar's upgradesstables calls, through
    // the agent and its policy (the operator, stopped, asks nothing here).
    let pid = container_pid(&pod).expect("a running container");
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
    assert_eq!(old_format_gauge(&pod_ip), Some(nb as u64));
    let done = jolokia_in_pod(pid, 8778, upgrade);
    assert!(
        done.contains("\"status\":200") && done.contains("\"value\":0"),
        "{done}"
    );
    s.until("the gauge at 0 after upgradesstables", secs(30), || async {
        old_format_gauge(&pod_ip) == Some(0)
    })
    .await;
    assert_eq!(data_files(&data, "nb"), 0, "every nb sstable rewritten");
    assert!(data_files(&data, "oa") > 0);

    // A scale-up by hand while majors are mixed: the new member runs 5.0
    // past CASSANDRA_4 (the UPGRADING overrides; messaging 13) and cannot
    // stream from the 4.1 members (12): its bootstrap fails as Cassandra's
    // does, JOINING_FAILED, and nothing else changes.
    let live = s.clusters().get("c").await.unwrap();
    let valid = controller::validated::validate(&live).expect("a valid Cluster");
    let rack = &live.spec.datacenter.racks[0];
    s.api::<Service>()
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
    s.until("the newcomer's failed bootstrap", secs(120), || async {
        s.pod_logs(newcomer)
            .contains("Error during bootstrap: Stream failed: peer ")
    })
    .await;
    let logs = s.pod_logs(newcomer);
    assert!(
        logs.contains("only supports messaging versions lower (12) than this node supports (13)"),
        "{logs}"
    );
    let new_address = address_of(&s, newcomer).await;
    let mode = s
        .sim()
        .ring()
        .with(|r| r.node_by_address(&new_address).and_then(|n| n.mode()));
    assert_eq!(mode, Some(OperationMode::JoiningFailed));
    s.ring().assert_intact(3);
}
