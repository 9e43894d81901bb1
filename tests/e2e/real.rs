//! Real Apache Cassandra through the real operator (issue 28): members of
//! `cassandra:4.1.8` run the release's own `bin/cassandra` in the official
//! image's layout (kubesim's real image, [`RealCassandra`]), started by the
//! sidecar with the JVM options it renders and the Jolokia agent the
//! operator image's init container installs; they gossip at their member
//! Services' ClusterIPs (kubesim routes them as kube-proxy does). The ring
//! timings of tests are the image's `JVM_EXTRA_OPTS`, as a user could set
//! them; the heap comes from the rack's memory limit, through the
//! sidecar's heap rule.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use testworld::kubesim::sim::RealCassandra;

use serde_json::json;

use crate::scenario::{ClusterSpec, Scenario, cluster, container_pid, pod_ready, secs, setup};

/// The test world's `cassandra:` image's `JVM_EXTRA_OPTS`: short ring
/// timings, as a user of a small test cluster would set them (Cassandra's
/// default ring delay is 30 s, twice per bootstrapping node).
const TEST_RING_TIMINGS: &str =
    "-Dcassandra.ring_delay_ms=3000 -Dcassandra.skip_wait_for_gossip_to_settle=0";

const VERSION: &str = "4.1.8";

/// The members' memory limit: the sidecar's heap rule (cassandra-env.sh's)
/// makes it a 384M heap. The smallest of 512Mi, 768Mi and 1Gi whose JVM
/// stays under its limit: at 512Mi (a 256M heap) the JVM's resident set
/// is already about 510 MiB after start-up, more than a kubelet would
/// allow; at 768Mi about 640 MiB, at 1Gi about 770 MiB.
const MEMORY_LIMIT_MIB: u64 = 768;

/// Cluster `c` of Cassandra [`VERSION`], one rack `r` of `members`, each
/// with 1 CPU and [`MEMORY_LIMIT_MIB`].
fn real_cluster(members: i32) -> ClusterSpec {
    cluster("c").version(VERSION).rack("r", members).with_rack(
        json!({"resources": {"limits": {"cpu": "1", "memory": format!("{MEMORY_LIMIT_MIB}Mi")}}}),
    )
}

/// A scenario whose `cassandra:` 4.1 and 5.0 images run real Cassandra.
async fn real_world() -> Scenario {
    setup()
        .options(|o| o.real_cassandra = Some(RealCassandra::cached(TEST_RING_TIMINGS)))
        .start()
        .await
}

fn member(ordinal: i32) -> String {
    crds::names::member_name(&crds::names::statefulset_name("c", "dc", "r"), ordinal)
}

/// `cassandra-operator nodetool <args>` in the network namespace of a
/// member's sidecar, as it reaches the node's Jolokia agent on the Pod's
/// loopback: its stdout, or the failure.
async fn nodetool(scenario: &Scenario, member: &str, args: &[&str]) -> Result<String, String> {
    let pod = scenario.pod(member).await;
    let pid = container_pid(&pod).ok_or(format!("{member}: no running container"))?;
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg(env!("CARGO_BIN_EXE_cassandra-operator"))
        .arg("nodetool")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The ClusterIPs of the members `0..n`.
async fn member_ips(scenario: &Scenario, n: i32) -> Vec<String> {
    let services: Api<Service> = scenario.api();
    let mut ips = Vec::new();
    for i in 0..n {
        let svc = services.get(&member(i)).await.unwrap();
        ips.push(svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default());
    }
    ips
}

/// Waits until `nodetool status` on `on` lists exactly `ips`, each Up and
/// Normal; its text.
async fn until_status_un(scenario: &Scenario, on: &str, ips: &[String]) -> String {
    scenario
        .until(
            &format!("nodetool status on {on}: {ips:?} UN"),
            secs(120),
            || async {
                let text = nodetool(scenario, on, &["status"]).await?;
                let un: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("UN "))
                    .filter_map(|l| l.split_whitespace().nth(1))
                    .collect();
                let rows = text
                    .lines()
                    .filter(|l| l.len() > 3 && l.as_bytes()[2] == b' ' && l.starts_with(['U', 'D']))
                    .count();
                let all = ips.iter().all(|ip| un.contains(&ip.as_str()));
                if all && rows == ips.len() {
                    Ok(text)
                } else {
                    Err(text)
                }
            },
        )
        .await
}

/// The JVM of a member (the sidecar's descendant with the largest
/// resident set) and its VmRSS in MiB.
fn jvm_rss_mib(sidecar: i32) -> Option<u64> {
    fn children(pid: i32) -> Vec<i32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
    fn rss_kib(pid: i32) -> Option<u64> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
    let mut todo = vec![sidecar];
    let mut best = None;
    while let Some(pid) = todo.pop() {
        todo.extend(children(pid));
        if pid != sidecar {
            best = best.max(rss_kib(pid));
        }
    }
    best.map(|k| k / 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_real_cassandra_members_come_up_ready_and_see_each_other_at_their_cluster_ips() {
    let scenario = real_world().await;
    let began = Instant::now();
    scenario.create(&real_cluster(3)).await;
    // Each member's bring-up: from its Pod's first sighting to Ready.
    let pods: Api<Pod> = scenario.api();
    type Sightings = BTreeMap<String, Instant>;
    let track: std::cell::RefCell<(Sightings, Sightings)> = Default::default();
    scenario
        .until("3 real members Ready", secs(600), || {
            let (pods, track) = (pods.clone(), &track);
            async move {
                for i in 0..3 {
                    let name = member(i);
                    let Some(pod) = pods.get_opt(&name).await.ok().flatten() else {
                        continue;
                    };
                    let now = Instant::now();
                    let (seen, ready) = &mut *track.borrow_mut();
                    seen.entry(name.clone()).or_insert(now);
                    if pod_ready(&pod) {
                        ready.entry(name).or_insert(now);
                    }
                }
                let ready = &track.borrow().1;
                (ready.len() == 3)
                    .then_some(())
                    .ok_or(format!("ready: {:?}", ready.keys()))
            }
        })
        .await;
    let (seen, ready) = track.into_inner();
    scenario.until_ready("c", 3, secs(120)).await;
    for (name, at) in &ready {
        eprintln!(
            "bring-up {name}: {:.1} s (Pod seen to Ready), {:.1} s since the Cluster was created",
            (*at - seen[name]).as_secs_f64(),
            (*at - began).as_secs_f64()
        );
    }

    // Real Cassandra, started through the release's bin/cassandra by the
    // sidecar, with the real agent at the path the init container gave it.
    let logs = scenario.pod_logs(&member(0));
    assert!(
        logs.contains(&format!("Cassandra version: {VERSION}")),
        "the member runs the release:\n{}",
        &logs[logs.len().saturating_sub(4000)..]
    );

    // Each member's `nodetool status` (the operator's, over Jolokia) shows
    // the three at their ClusterIPs, Up and Normal.
    let ips = member_ips(&scenario, 3).await;
    for i in 0..3 {
        let text = until_status_un(&scenario, &member(i), &ips).await;
        if i == 0 {
            eprintln!("nodetool status on {}:\n{text}", member(0));
        }
    }
    // Within the memory limit a real kubelet would enforce (kubesim does
    // not: this is where it is checked).
    for i in 0..3 {
        let pid = container_pid(&scenario.pod(&member(i)).await).unwrap();
        let rss = jvm_rss_mib(pid).expect("the member's JVM runs");
        eprintln!(
            "RSS {}: {rss} MiB (limit {MEMORY_LIMIT_MIB} MiB)",
            member(i)
        );
        assert!(rss < MEMORY_LIMIT_MIB, "{}: {rss} MiB", member(i));
    }
}

/// Scale the rack to 4 (a real bootstrap) and back to 3: the operator's
/// decommission protocol runs a real `decommission` on the last member,
/// which streams its ranges away and leaves the ring before its Pod, claim
/// and Service go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_member_joins_and_leaves_by_a_real_decommission() {
    let scenario = real_world().await;
    let three = real_cluster(3);
    scenario.create(&three).await;
    scenario.until_ready("c", 3, secs(600)).await;

    // A change of members alone rolls nobody: the three Pods stay.
    let uids = |scenario: &Scenario| {
        let pods: Api<Pod> = scenario.api();
        async move {
            let mut uids = Vec::new();
            for i in 0..3 {
                uids.push(pods.get(&member(i)).await.unwrap().metadata.uid);
            }
            uids
        }
    };
    let before = uids(&scenario).await;
    let began = Instant::now();
    scenario
        .patch_cluster("c", real_cluster(4).racks_patch())
        .await;
    scenario.until_ready("c", 4, secs(300)).await;
    eprintln!("scale-up 3 → 4: {:.1} s", began.elapsed().as_secs_f64());
    let ips = member_ips(&scenario, 4).await;
    let text = until_status_un(&scenario, &member(0), &ips).await;
    eprintln!("nodetool status with 4:\n{text}");

    let began = Instant::now();
    scenario.patch_cluster("c", three.racks_patch()).await;
    let services: Api<Service> = scenario.api();
    scenario
        .until("the fourth member's Service gone", secs(300), || async {
            services
                .get_opt(&member(3))
                .await
                .map_err(|e| e.to_string())?
                .map_or(Ok(()), |_| Err("still there".to_string()))
        })
        .await;
    scenario.until_ready("c", 3, secs(120)).await;
    eprintln!("scale-down 4 → 3: {:.1} s", began.elapsed().as_secs_f64());
    // The three that stay see only each other, Up and Normal: the fourth
    // left the ring (a node that was removed some other way would show DN).
    let text = until_status_un(&scenario, &member(0), &ips[..3]).await;
    assert!(!text.contains(&ips[3]), "{text}");
    let left = scenario.pod_logs(&member(3));
    assert!(
        left.contains("DECOMMISSIONED") || left.contains("Announcing that I have left the ring"),
        "the fourth member decommissioned itself:\n{}",
        &left[left.len().saturating_sub(4000)..]
    );
    eprintln!("nodetool status after the decommission:\n{text}");
    assert_eq!(uids(&scenario).await, before, "no member restarted");
}
