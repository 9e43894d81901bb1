//! A long JMX operation on a real member does not block its probes
//! (issue 28). The Jolokia 1.7.2 agent serves requests on one thread by
//! default (`executor=single`): while `nodetool cleanup` (through the
//! agent, as the operator's nodetool and sidecar call it) ran, the
//! readiness probe's read of the operation mode waited behind it, the
//! member turned NotReady and took the PodDisruptionBudget. The sidecar
//! renders the agent with a pool of threads; here a cleanup that lasts
//! many probe timeouts runs on real Cassandra 4.1 while `/readyz` is asked
//! every half second: it must answer NORMAL at once every time.
//! (`tests/tests/jolokia_agent_executor.rs` shows the single executor
//! failing the same read, with the real agent.)
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use testworld::cql::{Client, Consistency};

use crate::common::http_get;
use crate::real::{member, member_ips, real_cluster, real_nodetool, real_world};
use crate::real_data::{CQL_PORT, app_netns};
use crate::scenario::{container_pid, pod_ready, secs};

/// What the sidecar's `/readyz` allows its read of the operation mode
/// (sidecar/src/probes.rs): an answer slower than this is a failed probe.
const PROBE_READ: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cleanup_through_jolokia_leaves_the_member_ready() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = real_world().await;
    scenario.create(&real_cluster(1)).await;
    scenario.until_ready("c", 1, secs(300)).await;

    // 40 MiB in a keyspace of one replica: after a second member joins,
    // the first holds about half of it for ranges it no longer owns,
    // which cleanup rewrites away.
    let netns = app_netns(&scenario).await;
    let ip = member_ips(&scenario, 1).await[0].parse().unwrap();
    let client = Client::connect(netns, &[SocketAddr::new(ip, CQL_PORT)])
        .await
        .unwrap();
    let table = client.keyspace("bulk", &[("dc", 1)]).await.unwrap();
    // Values that do not compress (sstables are LZ4-compressed: 20 MiB of
    // one letter would make a few kilobytes on disk and a cleanup of no
    // time at all).
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut value = move || -> String {
        (0..10 * 1024)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'!' + (seed % 94) as u8)
            })
            .collect()
    };
    let began = Instant::now();
    for chunk in 0..64 {
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..64 {
            let key = format!("k{chunk}-{i}");
            let (table, value) = (table.clone(), value());
            writes.spawn(async move { table.write(&key, &value, Consistency::One).await });
        }
        for result in writes.join_all().await {
            result.unwrap();
        }
    }
    eprintln!("40 MiB written in {:.1} s", began.elapsed().as_secs_f64());
    real_nodetool(&scenario, &member(0), &["flush", "bulk"])
        .await
        .unwrap();

    scenario
        .patch_cluster("c", real_cluster(2).racks_patch())
        .await;
    scenario.until_ready("c", 2, secs(300)).await;

    // Compaction (cleanup is one) throttled to 1 MiB/s: the cleanup of
    // about 40 MiB lasts many probe timeouts.
    real_nodetool(&scenario, &member(0), &["setcompactionthroughput", "1"])
        .await
        .unwrap();
    let pod = scenario.pod(&member(0)).await;
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();

    // The operator's nodetool (through the agent, on the Pod's loopback),
    // on a blocking thread: the probes go on beside it.
    let pid = container_pid(&pod).expect("a running container");
    let stop = AtomicBool::new(false);
    let cleanup = async {
        let began = Instant::now();
        let out = tokio::task::spawn_blocking(move || {
            Command::new("nsenter")
                .arg(format!("--net=/proc/{pid}/ns/net"))
                .arg(env!("CARGO_BIN_EXE_cassandra-operator"))
                .args(["nodetool", "cleanup", "bulk"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        (out, began.elapsed())
    };
    let probes = async {
        let mut answers: Vec<(Duration, Result<String, String>)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            let addr = format!("{pod_ip}:8080");
            let answer = match tokio::task::spawn_blocking(move || http_get(&addr, "/readyz")).await
            {
                Ok(Some((200, body))) => Ok(body.trim().to_string()),
                Ok(Some((code, body))) => Err(format!("{code}: {body}")),
                Ok(None) => Err("no answer".to_string()),
                Err(e) => Err(e.to_string()),
            };
            answers.push((asked.elapsed(), answer));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        answers
    };
    let ((out, took), answers) = tokio::join!(cleanup, probes);
    assert!(
        out.status.success(),
        "cleanup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let slowest = answers.iter().map(|(d, _)| *d).max().unwrap_or_default();
    eprintln!(
        "cleanup of member 0 at 1 MiB/s: {:.1} s; {} readiness reads meanwhile, the slowest {} ms",
        took.as_secs_f64(),
        answers.len(),
        slowest.as_millis()
    );
    // Long enough that a blocked agent would have failed probes.
    assert!(
        took > PROBE_READ * 3,
        "the cleanup took only {took:?}: it proves nothing"
    );
    let failed: Vec<_> = answers
        .iter()
        .filter(|(d, a)| *d >= PROBE_READ || a.as_deref() != Ok("NORMAL"))
        .collect();
    assert!(
        failed.is_empty(),
        "readiness during the cleanup: {failed:?}"
    );
    assert!(
        pod_ready(&scenario.pod(&member(0)).await),
        "the member stayed Ready"
    );
    let left = real_nodetool(&scenario, &member(0), &["tablestats", "bulk.kv"])
        .await
        .unwrap();
    eprintln!("after the cleanup:\n{left}");
}
