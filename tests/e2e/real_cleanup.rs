//! A long maintenance operation on a real member does not block its
//! Jolokia agent (issues 28 and 33). The Jolokia 1.7.2 agent serves
//! requests on one thread by default (`executor=single`): while `nodetool
//! cleanup` ran through it, the readiness probe's read of the operation
//! mode waited behind it, the member turned NotReady and took the
//! PodDisruptionBudget. The sidecar renders the agent with a pool of
//! threads. Here the cleanup the operator runs by itself after a scale-up
//! 3 → 4 (issue 33), throttled to last many probe timeouts on real
//! Cassandra 4.1, runs while, on the same member: `/readyz` is asked every
//! half second (it must answer NORMAL at once every time), the controller's
//! ask for a fresh gossip record (`ring-record-requested`) is answered,
//! and the rack is scaled back down to 3, which the controller holds until
//! the cleanup is done and then carries out by a real decommission.
//! (`tests/tests/jolokia_agent_executor.rs` shows the single executor
//! failing the same read, with the real agent.)
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crds::contract::DECOMMISSIONED;
use crds::contract::maintenance::{Operation, REQUEST, State};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use testworld::cql::{Client, Consistency};

use crate::real::{member, member_ips, real_cluster, real_nodetool, real_world, until_status_un};
use crate::real_data::{CQL_PORT, app_netns};
use crate::real_maintenance::{annotations, ask_ring_record, readiness_reads, record};
use crate::scenario::{pod_ready, secs};

/// What the sidecar's `/readyz` allows its read of the operation mode
/// (sidecar/src/probes.rs): an answer slower than this is a failed probe.
const PROBE_READ: Duration = Duration::from_secs(3);

/// How long the sidecar may take to record its ring once asked: it reads
/// the ring every few seconds; a blocked agent would take the whole
/// cleanup.
const RING_RECORD_WITHIN: Duration = Duration::from_secs(15);

/// Chunks of 64 values of 10 KiB written before the scale-up: 50 MiB in a
/// keyspace of one replica, about 17 MiB on each of the three first
/// members, which the cleanup of each rewrites at 1 MiB/s.
const CHUNKS: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cleanup_by_the_operator_leaves_probes_gossip_records_and_decommission_working() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = real_world().await;
    scenario.create(&real_cluster(3)).await;
    scenario.until_ready("c", 3, secs(600)).await;

    // A keyspace of one replica: a key a cleanup wrongly dropped would be
    // gone for good, which the read at the end would see.
    let netns = app_netns(&scenario).await;
    let contact: Vec<SocketAddr> = member_ips(&scenario, 3)
        .await
        .iter()
        .map(|ip| SocketAddr::new(ip.parse().unwrap(), CQL_PORT))
        .collect();
    let client = Client::connect(netns, &contact)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let table = client.keyspace("bulk", &[("dc", 1)]).await.unwrap();
    // Values that do not compress (sstables are LZ4-compressed: 50 MiB of
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
    let mut written = BTreeMap::new();
    for chunk in 0..CHUNKS {
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..64 {
            let key = format!("k{chunk}-{i}");
            let (table, value) = (table.clone(), value());
            written.insert(key.clone(), value.clone());
            writes.spawn(async move { table.write(&key, &value, Consistency::One).await });
        }
        for result in writes.join_all().await {
            result.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    eprintln!(
        "{} MiB written in {:.1} s",
        CHUNKS * 64 * 10 / 1024,
        began.elapsed().as_secs_f64()
    );
    // Flushed, and compaction (cleanup is one) throttled to 1 MiB/s: each
    // cleanup lasts many probe timeouts. (A runtime setting: the members
    // keep it, as nothing restarts them.)
    for i in 0..3 {
        real_nodetool(&scenario, &member(i), &["flush", "bulk"])
            .await
            .unwrap();
        real_nodetool(&scenario, &member(i), &["setcompactionthroughput", "1"])
            .await
            .unwrap();
    }

    let began = Instant::now();
    scenario
        .patch_cluster("c", real_cluster(4).racks_patch())
        .await;
    let services: Api<Service> = scenario.api();
    // The first member the operator asks to clean up, once its sidecar
    // runs the cleanup.
    let cleaning = scenario
        .until("a cleanup running on an old member", secs(600), || async {
            for i in 0..3 {
                let svc = services.get(&member(i)).await.map_err(|e| e.to_string())?;
                if record(&svc)
                    .is_some_and(|r| r.operation == Operation::Cleanup && r.state == State::Running)
                    && annotations(&svc).contains_key(REQUEST)
                {
                    return Ok(member(i));
                }
            }
            Err("no cleanup running".to_string())
        })
        .await;
    let started = Instant::now();
    eprintln!(
        "cleanup running on {cleaning} {:.1} s after the scale-up was asked",
        began.elapsed().as_secs_f64()
    );
    let pod = scenario.pod(&cleaning).await;
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let running = || async {
        let svc = services.get(&cleaning).await.unwrap();
        record(&svc).is_some_and(|r| r.operation == Operation::Cleanup && r.state == State::Running)
    };

    let stop = AtomicBool::new(false);
    // Meanwhile: a fresh gossip record asked for and written; then the
    // rack scaled back to 3, which waits for the cleanup; the end of the
    // cleanup.
    let steps = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let recorded_in = ask_ring_record(&scenario, &cleaning, RING_RECORD_WITHIN).await;
        let still_running = running().await;

        scenario
            .patch_cluster("c", real_cluster(3).racks_patch())
            .await;
        // Held: no decommission asked of the fourth member while the
        // cleanup runs.
        let mut held_for = Duration::ZERO;
        let asked_down = Instant::now();
        while running().await {
            let svc = services.get(&member(3)).await.unwrap();
            let labels = svc.metadata.labels.clone().unwrap_or_default();
            assert!(
                !labels.contains_key(DECOMMISSIONED),
                "a decommission was asked while {cleaning}'s cleanup ran"
            );
            held_for = asked_down.elapsed();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        stop.store(true, Ordering::Relaxed);
        (recorded_in, still_running, held_for)
    };
    let (answers, (recorded_in, still_running, held_for)) =
        tokio::join!(readiness_reads(&pod_ip, &stop), steps);
    let took = started.elapsed();
    let slowest = answers.iter().map(|(d, _)| *d).max().unwrap_or_default();
    eprintln!(
        "cleanup of {cleaning} at 1 MiB/s: {:.1} s; {} readiness reads meanwhile, the slowest {} ms; \
         gossip record written {} ms after the ask (cleanup still running: {still_running}); \
         scale-down held {:.1} s",
        took.as_secs_f64(),
        answers.len(),
        slowest.as_millis(),
        recorded_in.as_millis(),
        held_for.as_secs_f64()
    );
    let svc = services.get(&cleaning).await.unwrap();
    let rec = record(&svc).expect("a record");
    assert_eq!(rec.state, State::Done, "{rec:?}");
    assert!(rec.keyspaces_done.iter().any(|k| k == "bulk"), "{rec:?}");
    // Long enough that a blocked agent would have failed probes.
    assert!(
        took > PROBE_READ * 3,
        "the cleanup took only {took:?}: it proves nothing"
    );
    assert!(
        still_running,
        "the gossip record was asked and written during the cleanup"
    );
    assert!(
        held_for > Duration::ZERO,
        "the scale-down was asked during the cleanup"
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
        pod_ready(&scenario.pod(&cleaning).await),
        "the member stayed Ready"
    );

    // Then the decommission: the fourth member leaves by a real
    // decommission (streaming its ranges back), the three see each other.
    let began = Instant::now();
    scenario.until_service_gone(&member(3), secs(300)).await;
    scenario.until_ready("c", 3, secs(300)).await;
    eprintln!(
        "decommission 4 -> 3 done {:.1} s after the cleanup",
        began.elapsed().as_secs_f64()
    );
    let ips = member_ips(&scenario, 3).await;
    until_status_un(&scenario, &member(0), &ips).await;
    let left = scenario.pod_logs(&member(3));
    assert!(
        left.contains("DECOMMISSIONED") || left.contains("Announcing that I have left the ring"),
        "the fourth member decommissioned itself:\n{}",
        &left[left.len().saturating_sub(4000)..]
    );

    // Every key, each on one replica, is still there: no cleanup dropped
    // data a member still owned.
    let check = table
        .check(&written, Consistency::One)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(check.clean(), "data lost: {check}");
    eprintln!("data check at ONE of the {} keys: {check}", written.len());
}
