//! The Jolokia calls of the maintenance operations (issue 33) against real
//! Cassandra, outside any world: two lone nodes of one release on the
//! host's loopback (127.0.0.1 and 127.0.0.2), a keyspace of replication 2
//! with some data, and each call the sidecar makes, as it makes them
//! through the agent, with what real Cassandra answers. What it found is
//! in `/work/notes/sidecar-calls-checked.md`; each fact it relies on is
//! asserted, so that a release that changes one fails here first.
//!
//! Needs `scripts/fetch-cassandra` of 4.1.8 and 5.0.3.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testworld::cql::{Client, Consistency, Netns};
use testworld::harness::require_root;
use testworld::real_cassandra::{Node, NodeOptions, Ports, STORAGE_SERVICE, laid_out, ownership};

const START_TIMEOUT: Duration = Duration::from_secs(180);

/// One `exec` of a StorageService operation through the agent (5 s at
/// most): `{status: 200, value}`, or `{status: "failed", error}` with the
/// agent's response.
async fn exec(node: &Node, operation: &str, arguments: Value) -> Value {
    let request = json!({"type": "exec", "mbean": STORAGE_SERVICE,
        "operation": operation, "arguments": arguments});
    match node.request(request).await {
        Ok(value) => json!({"status": 200, "value": value}),
        Err(e) => json!({"status": "failed", "error": e.to_string()}),
    }
}

/// The value of a successful `exec`.
async fn exec_ok(node: &Node, operation: &str, arguments: Value) -> Value {
    let response = exec(node, operation, arguments.clone()).await;
    assert_eq!(
        response["status"], 200,
        "{operation}({arguments}): {response}"
    );
    response["value"].clone()
}

/// The primary ranges of the node at `address`: `(previous token, own
/// token]` of each of its tokens in the ring (the token → endpoint map),
/// as Murmur3 tokens; the one that wraps past the ring's end included.
fn primary_ranges(ring: &Value, address: &str) -> Vec<(i64, i64)> {
    let mut tokens: Vec<(i64, String)> = ring
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, e)| (t.parse().unwrap(), e.as_str().unwrap().to_string()))
        .collect();
    tokens.sort();
    (0..tokens.len())
        .filter(|&i| tokens[i].1 == address)
        .map(|i| {
            let previous = tokens[(i + tokens.len() - 1) % tokens.len()].0;
            (previous, tokens[i].0)
        })
        .collect()
}

/// Waits until `getParentRepairStatus(cmd)` is no longer `IN_PROGRESS`:
/// its list (status first, then Cassandra's messages) and how long.
async fn until_repair_ends(node: &Node, cmd: i64) -> (Vec<String>, Duration) {
    let began = Instant::now();
    loop {
        let status = exec_ok(node, "getParentRepairStatus", json!([cmd])).await;
        let list: Vec<String> = status
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        if list.first().is_some_and(|s| s != "IN_PROGRESS") {
            return (list, began.elapsed());
        }
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "repair #{cmd} still {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Values that do not compress (sstables are LZ4-compressed).
fn noise(seed: &mut u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            char::from(b'!' + (*seed % 94) as u8)
        })
        .collect()
}

/// The maintenance calls on two real nodes of `version`.
async fn facts_of(version: &str) {
    require_root().expect("the image's directories belong to uid 999");
    let (_root_a, release, image_a) = laid_out(version).unwrap_or_else(|e| panic!("{e}"));
    let (_root_b, _, image_b) = laid_out(version).unwrap_or_else(|e| panic!("{e}"));
    let ports_a = Ports::free().unwrap();
    let ports_b = Ports::free().unwrap();
    let mut options_a = NodeOptions::single(ports_a);
    options_a.address = "127.0.0.1".into();
    let mut node_a = Node::start(&image_a, &release, &options_a).unwrap();
    node_a.wait_for_mode("NORMAL", START_TIMEOUT).await.unwrap();
    let mut options_b = NodeOptions::single(ports_b);
    options_b.address = "127.0.0.2".into();
    options_b.seeds = vec![format!("127.0.0.1:{}", ports_a.storage)];
    let mut node_b = Node::start(&image_b, &release, &options_b).unwrap();
    node_b
        .wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{version}: two nodes NORMAL");

    // Operation signatures, as the agent lists them.
    let list = node_a
        .request(json!({"type": "list",
            "path": "org.apache.cassandra.db/type=StorageService/op"}))
        .await
        .unwrap();
    for op in [
        "forceKeyspaceFlush",
        "forceKeyspaceCleanup",
        "upgradeSSTables",
        "repairAsync",
        "forceTerminateAllRepairSessions",
        "getParentRepairStatus",
        "getNonLocalStrategyKeyspaces",
        "getPrimaryRanges",
        "getTokens",
    ] {
        let signatures: Vec<String> = match &list[op] {
            Value::Array(overloads) => overloads.iter().map(|o| o["args"].to_string()).collect(),
            Value::Null => vec![],
            one => vec![one["args"].to_string()],
        };
        eprintln!("{version}: op {op}: {signatures:?}");
    }

    // Data in a keyspace of replication 2 (the lone nodes' snitch names
    // the datacenter `datacenter1`).
    let netns = Netns::enter("/proc/self/ns/net").unwrap();
    let client = Client::connect(
        netns,
        &[SocketAddr::new(
            "127.0.0.1".parse().unwrap(),
            ports_a.native,
        )],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let table = client
        .keyspace("ks", &[("datacenter1", 2)])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The driver waited for the schema agreement of the nodes it knew;
    // wait for both.
    let began = Instant::now();
    loop {
        let a = node_a.read(STORAGE_SERVICE, "SchemaVersion").await.unwrap();
        let b = node_b.read(STORAGE_SERVICE, "SchemaVersion").await.unwrap();
        if a == b {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "schemas {a} {b}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for chunk in 0..32 {
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..64 {
            let (table, value) = (table.clone(), noise(&mut seed, 10 * 1024));
            writes.spawn(async move {
                table
                    .write(&format!("k{chunk}-{i}"), &value, Consistency::All)
                    .await
            });
        }
        for result in writes.join_all().await {
            result.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    for node in [&node_a, &node_b] {
        exec_ok(node, "forceKeyspaceFlush", json!(["ks", []])).await;
    }

    // The reads of the sidecar's note.
    for attribute in [
        "OperationMode",
        "ReleaseVersion",
        "NonLocalStrategyKeyspaces",
        "Keyspaces",
        "PartitionerName",
    ] {
        let value = node_a.read(STORAGE_SERVICE, attribute).await.unwrap();
        eprintln!("{version}: read {attribute} → {value}");
    }
    let keyspaces = node_a
        .read(STORAGE_SERVICE, "NonLocalStrategyKeyspaces")
        .await
        .unwrap();
    for want in ["system_auth", "system_distributed", "system_traces", "ks"] {
        assert!(
            keyspaces.as_array().unwrap().iter().any(|k| k == want),
            "{want} in {keyspaces}"
        );
    }
    assert!(!keyspaces.as_array().unwrap().iter().any(|k| k == "system"));
    let ring = node_a
        .read(STORAGE_SERVICE, "TokenToEndpointMap")
        .await
        .unwrap();
    let own = node_a.read(STORAGE_SERVICE, "Tokens").await.unwrap();
    let primary = primary_ranges(&ring, "127.0.0.1");
    eprintln!(
        "{version}: TokenToEndpointMap has {} tokens, Tokens of 127.0.0.1: {}, its primary ranges: {}",
        ring.as_object().unwrap().len(),
        own.as_array().unwrap().len(),
        primary.len()
    );
    assert_eq!(primary.len(), own.as_array().unwrap().len());

    // The test's own reading of ownership (testworld::real_cassandra::
    // ownership), against Cassandra's: the replicas of keys of a keyspace
    // of one replica, and the keys of a snapshot's sstables.
    let one = client
        .keyspace("one", &[("datacenter1", 1)])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ring_map = ownership::ring_of(&ring).unwrap();
    for n in 0..20 {
        let key = format!("key-{n}");
        let _ = &one;
        let theirs = exec_ok(
            &node_a,
            "getNaturalEndpointsWithPort(java.lang.String,java.lang.String,java.lang.String)",
            json!(["one", "kv", key]),
        )
        .await;
        let ours = ownership::replicas(&ring_map, ownership::token(&key), 1);
        let theirs: Vec<String> = theirs
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_str()
                    .unwrap()
                    .split(':')
                    .next()
                    .unwrap()
                    .trim_start_matches('/')
                    .to_string()
            })
            .collect();
        assert_eq!(ours, theirs, "{key}: token {}", ownership::token(&key));
    }
    if version.starts_with("5.") {
        // 5.0 says a key's token itself: the tokens ownership's unit test
        // pins.
        for key in ["k0000", "k1999", "w000001"] {
            let theirs = exec_ok(
                &node_a,
                "getToken(java.lang.String,java.lang.String,java.lang.String)",
                json!(["one", "kv", key]),
            )
            .await;
            eprintln!("{version}: getToken(one, kv, {key}) → {theirs}");
            assert_eq!(theirs, ownership::token(key).to_string(), "{key}");
        }
    }
    exec_ok(
        &node_a,
        "takeSnapshot(java.lang.String,java.util.Map,[Ljava.lang.String;)",
        json!(["facts", {}, ["ks"]]),
    )
    .await;
    let dump = ownership::SSTableDump::of(&release).unwrap();
    let began = Instant::now();
    let on_disk = dump
        .snapshot_keys(&image_a.data().join("data"), "ks", "kv", "facts")
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{version}: sstabledump of node A's snapshot: {} keys in {:.1} s",
        on_disk.len(),
        began.elapsed().as_secs_f64()
    );
    assert_eq!(on_disk.len(), 32 * 64, "every key of ks, RF 2 on 2 nodes");

    // cleanup and upgradesstables, the job-count overloads.
    let began = Instant::now();
    let cleanup = exec(
        &node_a,
        "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)",
        json!([2, "ks", []]),
    )
    .await;
    eprintln!(
        "{version}: forceKeyspaceCleanup(2, ks, []) → {cleanup} in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(cleanup["value"], 0, "0 is SUCCESSFUL: {cleanup}");
    let local = exec(
        &node_a,
        "forceKeyspaceCleanup(int,java.lang.String,[Ljava.lang.String;)",
        json!([1, "system", []]),
    )
    .await;
    eprintln!("{version}: forceKeyspaceCleanup(1, system, []) → {local}");
    let cleanup_name_only = exec(&node_a, "forceKeyspaceCleanup", json!([1, "ks", []])).await;
    eprintln!("{version}: forceKeyspaceCleanup without signature → {cleanup_name_only}");
    for signature in [
        "upgradeSSTables(java.lang.String,boolean,int,[Ljava.lang.String;)",
        "upgradeSSTables(java.lang.String,boolean,long,int,[Ljava.lang.String;)",
    ] {
        let args = if signature.contains("long") {
            json!(["ks", true, i64::MAX, 2, []])
        } else {
            json!(["ks", true, 2, []])
        };
        let upgrade = exec(&node_a, signature, args).await;
        eprintln!("{version}: {signature} → {upgrade}");
        assert_eq!(upgrade["value"], 0, "{signature}: {upgrade}");
    }

    // repairAsync of one primary subrange of a keyspace of replication 2.
    let (start, end) = *primary.iter().find(|(s, e)| s < e).unwrap();
    let middle = start + (end - start) / 2;
    let options = |ranges: String| {
        json!({"ranges": ranges, "parallelism": "parallel", "primaryRange": "false",
            "incremental": "false", "jobThreads": "1", "trace": "false"})
    };
    let cmd = exec_ok(
        &node_a,
        "repairAsync",
        json!(["ks", options(format!("{start}:{middle}"))]),
    )
    .await;
    let cmd = cmd.as_i64().unwrap();
    assert!(cmd > 0, "a repair command number: {cmd}");
    let (status, took) = until_repair_ends(&node_a, cmd).await;
    eprintln!(
        "{version}: repairAsync(ks, ranges {start}:{middle}) #{cmd} → {status:?} in {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(status[0], "COMPLETED", "{status:?}");

    // Several subranges in one call, comma-separated.
    let two = format!("{start}:{middle},{middle}:{end}");
    let cmd = exec_ok(&node_a, "repairAsync", json!(["ks", options(two.clone())]))
        .await
        .as_i64()
        .unwrap();
    let (status, _) = until_repair_ends(&node_a, cmd).await;
    eprintln!("{version}: repairAsync(ks, ranges {two}) #{cmd} → {status:?}");

    // The wrapping primary range (whichever node has it), whole and split
    // at the ring's end as the sidecar splits it.
    for (node, address) in [(&node_a, "127.0.0.1"), (&node_b, "127.0.0.2")] {
        let Some((s, e)) = primary_ranges(&ring, address)
            .into_iter()
            .find(|(s, e)| s > e)
        else {
            continue;
        };
        for ranges in [
            format!("{s}:{e}"),
            format!("{s}:{}", i64::MAX),
            format!("{}:{e}", i64::MIN),
        ] {
            let cmd = exec_ok(node, "repairAsync", json!(["ks", options(ranges.clone())]))
                .await
                .as_i64()
                .unwrap();
            let (status, _) = until_repair_ends(node, cmd).await;
            eprintln!(
                "{version}: repairAsync(ks, ranges {ranges}) on {address} (its wrapping range {s}:{e}) #{cmd} → {status:?}"
            );
        }
    }

    // A range across two nodes' ranges: Cassandra refuses it.
    let other = primary_ranges(&ring, "127.0.0.2");
    let (_, b_end) = *other
        .iter()
        .find(|(s, e)| s < e && *s == end)
        .unwrap_or(&(0, 0));
    if b_end != 0 {
        let cmd = exec_ok(
            &node_a,
            "repairAsync",
            json!(["ks", options(format!("{middle}:{b_end}"))]),
        )
        .await
        .as_i64()
        .unwrap();
        let (status, _) = until_repair_ends(&node_a, cmd).await;
        eprintln!("{version}: repairAsync(ks, across two ranges {middle}:{b_end}) → {status:?}");
    }

    // primaryRange true with ranges.
    let mut both = options(format!("{start}:{middle}"));
    both["primaryRange"] = json!("true");
    let response = exec(&node_a, "repairAsync", json!(["ks", both])).await;
    eprintln!("{version}: repairAsync(ks, primaryRange true + ranges) → {response}");
    if let Some(cmd) = response["value"].as_i64().filter(|c| *c > 0) {
        let (status, _) = until_repair_ends(&node_a, cmd).await;
        eprintln!("{version}:   → {status:?}");
    }

    // A keyspace of one replica: no command at all.
    let rf1 = exec_ok(
        &node_a,
        "repairAsync",
        json!(["system_auth", options(format!("{start}:{middle}"))]),
    )
    .await;
    eprintln!("{version}: repairAsync(system_auth (RF 1?), ranges) → {rf1}");
    let none = exec(&node_a, "getParentRepairStatus", json!([rf1])).await;
    eprintln!("{version}: getParentRepairStatus({rf1}) → {none}");
    let unknown = exec(&node_a, "getParentRepairStatus", json!([9999])).await;
    eprintln!("{version}: getParentRepairStatus(9999) → {unknown}");

    // forceTerminateAllRepairSessions while a long repair runs: every
    // primary range at once, validation throttled to 1 MiB/s.
    for node in [&node_a, &node_b] {
        node.request(json!({"type": "write", "mbean": STORAGE_SERVICE,
            "attribute": "CompactionThroughputMbPerSec", "value": 1}))
            .await
            .unwrap();
    }
    let all: Vec<String> = primary.iter().map(|(s, e)| format!("{s}:{e}")).collect();
    let cmd = exec_ok(
        &node_a,
        "repairAsync",
        json!(["ks", options(all.join(","))]),
    )
    .await
    .as_i64()
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let running = exec_ok(&node_a, "getParentRepairStatus", json!([cmd])).await;
    eprintln!("{version}: long repair #{cmd} after 3 s: {running}");
    let asked = Instant::now();
    let terminated = exec(&node_a, "forceTerminateAllRepairSessions", json!([])).await;
    eprintln!(
        "{version}: forceTerminateAllRepairSessions → {terminated} in {} ms",
        asked.elapsed().as_millis()
    );
    let (status, took) = until_repair_ends(&node_a, cmd).await;
    eprintln!(
        "{version}: the long repair #{cmd} {:.1} s after the terminate: {status:?}",
        took.as_secs_f64()
    );

    let cmd = exec_ok(
        &node_a,
        "repairAsync",
        json!(["ks", options(format!("{start}:{middle}"))]),
    )
    .await
    .as_i64()
    .unwrap();
    let (status, took) = until_repair_ends(&node_a, cmd).await;
    eprintln!(
        "{version}: a repair after the terminate #{cmd} → {status:?} in {:.1} s",
        took.as_secs_f64()
    );

    if let Ok(path) = std::env::var("MAINTENANCE_FACTS_HOLD") {
        // Kept running for calls by hand: remove the file to end.
        std::fs::write(
            &path,
            format!("a {} b {}\n", node_a.jolokia_url(), node_b.jolokia_url()),
        )
        .unwrap();
        eprintln!("holding: {path}");
        while std::path::Path::new(&path).exists() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    node_b.stop(Duration::from_secs(60)).await.ok();
    node_a.stop(Duration::from_secs(60)).await.ok();
}

/// The maintenance calls on real 4.1.8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (about 1 minute): a fact check of the sidecar's Jolokia calls, run by scripts/soak and by hand"]
async fn real_maintenance_calls_4_1() {
    facts_of("4.1.8").await;
}

/// The maintenance calls on real 5.0.3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (about 1 minute): a fact check of the sidecar's Jolokia calls, run by scripts/soak and by hand"]
async fn real_maintenance_calls_5_0() {
    facts_of("5.0.3").await;
}
