//! The sidecar's half of the lifecycle (issue 13), end to end with the real
//! binary in the test world: a full outage comes back (a bootstrapped member
//! seeds itself), a member killed in the middle of its bootstrap resumes it,
//! a decommission Cassandra refuses is reported and backed off, a stale
//! decommission marker on a reused volume is cleared, a member whose disk
//! was emptied while the ring still knows it asks for a replace, and a
//! member being replaced is a seed of the others while it is.
//!
//! The full outage runs on Cassandra 4.1 by default; `LIFECYCLE_VERSIONS`
//! (comma separated, e.g. `3.11.6,4.1.8,5.0.3`) runs it on others too.

use std::time::{Duration, Instant};

use crds::contract;
use k8s_openapi::api::core::v1::{Pod, Service};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use testworld::harness::fast_ring;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{Scenario, annotation, cluster, container_pid, secs, setup};

/// Cluster `c` of `version`, one rack per `(zone, members)`, each in its
/// zone.
fn racks(version: &str, racks: &[(&str, i32)]) -> crate::scenario::ClusterSpec {
    racks
        .iter()
        .fold(cluster("c").version(version), |c, (zone, members)| {
            c.zone_rack(zone, *members)
        })
}

/// A member's Pod name in a one-rack cluster of the tests below.
fn member(ordinal: usize) -> String {
    format!("c-dc-r-{ordinal}")
}

/// A member's address in the ring: its Service's ClusterIP.
async fn address(s: &Scenario, pod: &str) -> String {
    s.until(&format!("{pod}'s member Service"), secs(120), || async {
        s.api::<Service>()
            .get_opt(pod)
            .await
            .unwrap()
            .and_then(|service| service.spec?.cluster_ip)
    })
    .await
}

/// Where the node at `address` stands in the ring: its `nodetool status`
/// (None: not in the ring, left or never joined).
fn ring_state(s: &Scenario, address: &str) -> Option<NodeStatus> {
    s.ring()
        .rows()
        .into_iter()
        .find_map(|(a, status)| (a == address).then_some(status))
}

/// Waits until the node at `address` shows `status` in the ring.
async fn until_state(s: &Scenario, what: &str, address: &str, status: NodeStatus) {
    s.until(what, secs(120), || async {
        match ring_state(s, address) {
            Some(now) if now == status => Ok(()),
            now => Err(format!("{address} is {now:?}")),
        }
    })
    .await
}

/// Waits (30 s at most: gossip catching up) until `up` nodes are Up and
/// Normal, then asserts the ring intact: no key lost or under-replicated.
async fn until_intact(s: &Scenario, up: usize) {
    s.until(&format!("{up} nodes Up and Normal"), secs(30), || async {
        match s.ring().up() {
            n if n == up => Ok(()),
            n => Err(format!("{n} Up and Normal")),
        }
    })
    .await;
    s.ring().assert_intact(up);
}

/// Waits until a member Service's decommission records (the claim and the
/// refusal report) are cleared.
async fn until_records_cleared(s: &Scenario, service: &str, timeout: Duration) {
    s.until("the decommission records cleared", timeout, || async {
        let meta = s.service(service).await.metadata;
        match (
            annotation(&meta, contract::DECOMMISSION_STARTED),
            annotation(&meta, contract::DECOMMISSION_REFUSED),
        ) {
            (None, None) => Ok(()),
            records => Err(format!("{records:?}")),
        }
    })
    .await
}

/// Waits until a marker the sidecar writes is a file.
async fn until_file(s: &Scenario, marker: &std::path::Path, what: &str) {
    s.until(what, secs(15), || async { marker.is_file() }).await
}

/// The controller's decommission request on a member Service, by hand.
async fn request_decommission(s: &Scenario, pod: &str) {
    decommission_label(s, pod, json!("false")).await
}

/// The request withdrawn (the label removed).
async fn withdraw_decommission(s: &Scenario, pod: &str) {
    decommission_label(s, pod, Value::Null).await
}

async fn decommission_label(s: &Scenario, pod: &str, value: Value) {
    s.patch_service(
        pod,
        json!({"metadata": {"labels": {contract::DECOMMISSIONED: value}}}),
    )
    .await
}

/// Whether host process `pid` runs (exists, and is not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| Some(!stat.rsplit_once(") ")?.1.starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// A SIGKILL sent to a member's running container.
#[derive(Debug)]
struct Kill {
    pid: i32,
    /// Where the member stood in the ring when it was killed (None: it had
    /// left).
    state: Option<NodeStatus>,
}

/// SIGKILLs `pod`'s container (its sidecar and Cassandra) as soon as one
/// runs (it may be between restarts: a kill that hits no running process
/// is no kill) and records where the member at `address` stood in the ring
/// at that moment.
async fn kill_member(s: &Scenario, pod: &str, address: &str) -> Kill {
    let kill = s
        .until(
            &format!("{pod}'s container running, to kill it"),
            secs(60),
            || async {
                let pid = container_pid(&s.pod(pod).await).ok_or("no container")?;
                if !running(pid) {
                    return Err(format!("{pid} not running"));
                }
                let state = ring_state(s, address);
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL)
                    .map_err(|e| format!("kill {pid}: {e}"))?;
                Ok(Kill { pid, state })
            },
        )
        .await;
    // Gone before anything else looks for a running container.
    s.until(
        &format!("{pod}'s killed container to die"),
        secs(10),
        || async { !running(kill.pid) },
    )
    .await;
    kill
}

/// How many times `pod`'s container has restarted: the kubelet's count of
/// the container's deaths, what proves that a kill landed.
async fn restarts(s: &Scenario, pod: &str) -> i32 {
    s.pod(pod)
        .await
        .status
        .and_then(|status| Some(status.container_statuses?.first()?.restart_count))
        .unwrap_or(0)
}

/// Waits until `pod`'s container has restarted at least `n` times since
/// `since` (a [`restarts`] read before) and returns how many times it did.
async fn until_restarted(s: &Scenario, pod: &str, since: i32, n: i32) -> i32 {
    s.until(
        &format!("{pod}'s container to die {n} time(s)"),
        secs(30),
        || async {
            match restarts(s, pod).await - since {
                died if died >= n => Ok(died),
                died => Err(format!("{died} restarts")),
            }
        },
    )
    .await
}

/// The versions the full outage runs on.
fn outage_versions() -> Vec<String> {
    match std::env::var("LIFECYCLE_VERSIONS") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => vec!["4.1.8".to_string()],
    }
}

/// A converged multi-rack cluster (rack b 3, rack c 2, 1000 keys at RF 3)
/// loses every member Pod at once: all come back Ready, the ring has its 5
/// nodes UN again and the data check is clean. Before a bootstrapped member
/// could seed itself, member 0 restarted with a seed list without itself,
/// `OrderedReady` held member 1 back, and member 0 failed its shadow round
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outage_comes_back() {
    let _one = FAKE_WORLDS.lock().await;
    for version in outage_versions() {
        let started = Instant::now();
        let s = setup().zones(&["b", "c"]).start().await;
        let mut cluster = racks(&version, &[("b", 3), ("c", 2)]);
        if !version.starts_with("3.") {
            // Two racks: Cassandra 4.0 and later allocate tokens only for
            // a factor the racks allow, and the operator refuses the
            // default's 3 (`TooFewRacksForTokenAllocation`).
            let tokens = crate::scenario::overrides(
                "tokens",
                "allocate_tokens_for_local_replication_factor: 2\n",
            );
            s.api::<k8s_openapi::api::core::v1::ConfigMap>()
                .create(&Default::default(), &tokens)
                .await
                .unwrap();
            let with_tokens = serde_json::json!({"configMapName": "tokens"});
            cluster = racks(&version, &[("b", 3)])
                .with_rack(with_tokens.clone())
                .zone_rack("c", 2)
                .with_rack(with_tokens);
        }
        s.create(&cluster).await;
        s.until_ready("c", 5, secs(240)).await;
        s.ring().write(
            "ks",
            Replication::network_topology([("dc", 3)]),
            1000,
            Consistency::Quorum,
        );
        eprintln!("{version}: converged");
        s.ring().assert_intact(5);

        let names = ["c-dc-b-0", "c-dc-b-1", "c-dc-b-2", "c-dc-c-0", "c-dc-c-1"];
        let mut uids = Vec::new();
        for name in names {
            uids.push(s.pod(name).await.metadata.uid.unwrap());
            // Every bootstrapped member recorded it on its volume.
            let marker = contract::bootstrapped_marker(&s.data_volume(name).await);
            until_file(
                &s,
                &marker,
                &format!("{version}: {name}'s bootstrap marker"),
            )
            .await;
        }
        s.delete_pods(&names).await;
        // Every Pod is gone or replaced before any is ready again.
        let pods = s.api::<Pod>();
        s.until(
            &format!("{version}: every Pod deleted"),
            secs(60),
            || async {
                let mut left = Vec::new();
                for (name, uid) in names.iter().zip(&uids) {
                    let pod = pods.get_opt(name).await.unwrap();
                    if pod.and_then(|p| p.metadata.uid).as_ref() == Some(uid) {
                        left.push(name);
                    }
                }
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not deleted yet: {left:?}"))
                }
            },
        )
        .await;
        let names: Vec<String> = names.map(String::from).into();
        s.until_pods_ready(&names, secs(240)).await;
        eprintln!("{version}: after the full outage");
        until_intact(&s, 5).await;
        // Member 0 came back listing itself: it can start when no other
        // member is up.
        let ip = address(&s, "c-dc-b-0").await;
        let logs = s.pod_logs("c-dc-b-0");
        let seeded_itself = logs.lines().any(|l| {
            l.contains("configuration rendered")
                && l.contains("bootstrapped=true")
                && l.split("seeds=").nth(1).is_some_and(|seeds| {
                    seeds
                        .split(']')
                        .next()
                        .is_some_and(|seeds| seeds.contains(&format!("\"{ip}\"")))
                })
        });
        assert!(
            seeded_itself,
            "{version}: member 0 did not seed itself after the outage:\n{}",
            logs.lines()
                .filter(|l| l.contains("configuration rendered"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!("{version}: full outage in {:?}", started.elapsed());
    }
}

/// A member (a seed by its ordinal) SIGKILLed in the middle of its
/// bootstrap resumes the bootstrap when it comes back: it streams its
/// ranges' data instead of starting as its own seed with half of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_in_its_bootstrap_resumes_it() {
    let _one = FAKE_WORLDS.lock().await;
    let mut ring = fast_ring();
    // long enough to kill member 1 while it streams
    ring.timing.bootstrap_ms = 4000;
    let s = setup().zones(&["b"]).ring(ring).start().await;
    s.create(&racks("4.1.8", &[("b", 3)])).await;

    // Data as soon as member 0 is up, so that the others must stream it.
    s.until("member 0 up", secs(120), || async { s.ring().up() >= 1 })
        .await;
    s.ring()
        .write("ks", Replication::simple(3), 500, Consistency::One);

    // Member 1 joining: kill its container (the sidecar and Cassandra).
    let victim = "c-dc-b-1";
    let address = address(&s, victim).await;
    until_state(&s, "member 1 in its bootstrap", &address, NodeStatus::UJ).await;
    let volume = s.data_volume(victim).await;
    assert!(
        !contract::bootstrapped_marker(&volume).exists(),
        "the bootstrap was recorded before it completed"
    );
    let before = restarts(&s, victim).await;
    let kill = kill_member(&s, victim, &address).await;
    assert_eq!(
        kill.state,
        Some(NodeStatus::UJ),
        "member 1 was not joining when killed: {kill:?}\n{}",
        s.ring().text()
    );
    // The kill landed: the kubelet saw the container die.
    until_restarted(&s, victim, before, 1).await;

    s.until_ready("c", 3, secs(240)).await;
    s.ring().assert_intact(3);
    let logs = s.pod_logs(victim);
    assert!(
        logs.contains("Detected previous bootstrap failure; retrying"),
        "member 1 did not resume its bootstrap:\n{}",
        &logs[logs.len().saturating_sub(4000)..]
    );
    assert!(
        !logs.contains("will not auto bootstrap because it is configured to be a seed node"),
        "member 1 skipped its bootstrap as a seed"
    );
    until_file(
        &s,
        &contract::bootstrapped_marker(&volume),
        "member 1's bootstrap marker",
    )
    .await;
}

/// Three members of `version` in rack `r` on a ring of `ring`'s timings,
/// brought up by the controller, which is then stopped so that only the
/// sidecars act; 300 keys at RF `rf` (SimpleStrategy).
async fn three_members(
    version: &str,
    rf: usize,
    ring: testworld::ring::Options,
) -> (Scenario, Vec<String>) {
    let mut s = setup().zones(&["r"]).ring(ring).start().await;
    s.create(&racks(version, &[("r", 3)])).await;
    s.until_ready("c", 3, secs(180)).await;
    s.stop_controller();
    s.ring()
        .write("ks", Replication::simple(rf), 300, Consistency::All);
    (s, (0..3).map(member).collect())
}

/// 4.1 refuses a decommission that would leave fewer nodes than a
/// keyspace's replication factor. The sidecar reports it on the member
/// Service with Cassandra's reason, retries with a back-off (no tight loop),
/// and nothing leaves the ring; withdrawing the request clears the records
/// and the member keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_decommission_is_reported_and_withdrawn() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, names) = three_members("4.1.8", 3, fast_ring()).await;
    let last = &names[2];
    request_decommission(&s, last).await;

    let reason = s
        .until_annotation(last, contract::DECOMMISSION_REFUSED, secs(60))
        .await;
    assert!(
        reason.contains("Not enough live nodes to maintain replication factor"),
        "{reason}"
    );
    // The call came after the claim, which stays: only the report lets the
    // controller withdraw.
    let meta = s.service(last).await.metadata;
    assert!(annotation(&meta, contract::DECOMMISSION_STARTED).is_some());
    // Backing off: over 12 s, at most the first refusal and two retries (5 s
    // then 10 s), where a 2 s loop would make six.
    tokio::time::sleep(secs(12)).await;
    let refusals = s
        .pod_logs(last)
        .matches("cassandra refused the decommission")
        .count();
    assert!(
        (1..=3).contains(&refusals),
        "{refusals} refusals in 12 s: no back-off"
    );
    s.ring().assert_intact(3);

    // Withdrawn: the records go, the member serves on.
    withdraw_decommission(&s, last).await;
    until_records_cleared(&s, last, secs(30)).await;
    s.until_pods_ready(&names, secs(30)).await;
    s.ring().assert_intact(3);
}

/// A member whose node left the ring (decommission confirmed) is wanted
/// again on the same volume (a later scale-up reusing the PVC, its member
/// Service without the decommission record): the sidecar clears the
/// volume and the member bootstraps as a new node instead of waiting
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_decommission_marker_is_cleared_for_a_member_wanted_again() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, names) = three_members("3.11.6", 2, fast_ring()).await;
    let last = &names[2];
    request_decommission(&s, last).await;
    s.until_label(last, contract::DECOMMISSIONED, "true", secs(60))
        .await;
    s.ring().assert_intact(2);
    let volume = s.data_volume(last).await;
    assert!(contract::decommission_marker(&volume).is_file());

    // Wanted again: the record goes, the Pod is made again on the same PVC.
    s.patch_service(
        last,
        json!({"metadata": {
            "labels": {contract::DECOMMISSIONED: null},
            "annotations": {contract::DECOMMISSION_STARTED: null}}}),
    )
    .await;
    s.delete_pods(&[last]).await;
    s.until_pods_ready(&names, secs(120)).await;
    until_intact(&s, 3).await;
    assert!(!contract::decommission_marker(&volume).exists());
    until_file(
        &s,
        &contract::bootstrapped_marker(&volume),
        "the new member's bootstrap marker",
    )
    .await;
    assert!(
        s.pod_logs(last)
            .contains("clearing it to bootstrap as a new member"),
        "the volume was not cleared"
    );
}

/// A member's disk is emptied while its Node (and its place in the ring)
/// survives: Cassandra refuses to join at an address the ring knows. The
/// sidecar asks for a replace on its member Service; given the `replace`
/// label (by hand here, as the controller would), the member starts with
/// `replace_address_first_boot`, takes its old place and streams its data
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_member_asks_for_a_replace_and_replaces_itself() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, names) = three_members("4.1.8", 3, fast_ring()).await;
    let last = &names[2];
    let volume = s.data_volume(last).await;
    // The member records its bootstrap once it is NORMAL, up to a second
    // after it turns Ready; emptying the disk before that would let the
    // record land on the emptied disk, a disk that never held data.
    let marker = contract::bootstrapped_marker(&volume);
    s.until("the member to record its bootstrap", secs(30), || async {
        marker.exists()
    })
    .await;
    // The disk emptied under the running member, which then dies.
    s.empty_data_volume(last).await;
    s.kill_container(last).await;

    let request = s
        .until_annotation(last, contract::REPLACE_REQUESTED, secs(60))
        .await;
    assert!(
        request.contains("already exists, cancelling join"),
        "{request}"
    );

    // The controller's answer, by hand: the member's own ClusterIP.
    let ip = address(&s, last).await;
    s.patch_service(
        last,
        json!({"metadata": {"labels": {contract::REPLACE: ip}}}),
    )
    .await;
    s.until_pods_ready(&names, secs(120)).await;
    until_intact(&s, 3).await;
    let logs = s.pod_logs(last);
    assert!(
        logs.contains(&format!("-Dcassandra.replace_address_first_boot={ip}"))
            || logs.contains("Writes will not be forwarded to this node during replacement"),
        "the member did not start as a replacement"
    );
    // The request is fulfilled.
    s.until("the replace request to go", secs(30), || async {
        let meta = s.service(last).await.metadata;
        annotation(&meta, contract::REPLACE_REQUESTED).is_none()
    })
    .await;
}

/// The seeds a member's rendered cassandra.yaml lists (what Cassandra
/// reads at start and on `reloadSeeds`), read through its container.
async fn listed_seeds(s: &Scenario, pod: &str) -> Result<Vec<String>, String> {
    let pid = container_pid(&s.pod(pod).await).ok_or(format!("{pod}: no running container"))?;
    let path = format!(
        "/proc/{pid}/root{}/cassandra.yaml",
        contract::RENDERED_CONFIG_DIR
    );
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    testworld::fake_cassandra::config::seeds_of_yaml(&text).map_err(|e| e.to_string())
}

/// Waits until each of `pods` lists exactly `seeds`.
async fn until_seeds(s: &Scenario, pods: &[&String], seeds: &[&String]) {
    let mut wanted: Vec<String> = seeds.iter().map(|a| a.to_string()).collect();
    wanted.sort();
    s.until(
        &format!("{pods:?} to list the seeds {wanted:?}"),
        secs(30),
        || async {
            for pod in pods {
                let listed = listed_seeds(s, pod).await?;
                if listed != wanted {
                    return Err(format!("{pod} lists {listed:?}"));
                }
            }
            Ok(())
        },
    )
    .await
}

/// How many times a member's Cassandra answered `reloadSeeds` with the
/// address among its seeds (as Gossiper.getSeeds prints it).
fn reloads_with(s: &Scenario, pod: &str, address: &str) -> usize {
    s.pod_logs(pod)
        .lines()
        .filter(|l| {
            l.contains("cassandra reloaded its seeds")
                && l.contains(&format!("\"/{address}:7000\""))
        })
        .count()
}

/// A member being replaced is a seed of the others while it is: a
/// replacement at its own address gossips a dead state, and Cassandra
/// gossips to a dead node only when it is a seed (CASSANDRA-19580; the
/// doc of `sidecar::member::seeds`). With the replace record on member 2's
/// Service (by hand, the controller stopped), members 0 and 1 write its
/// address into their cassandra.yaml and their Cassandra reloads its seeds;
/// member 2 never lists itself; with the record gone, the others drop it
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_being_replaced_is_a_seed_of_the_others_while_it_is() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, names) = three_members("4.1.8", 3, fast_ring()).await;
    let mut ips = Vec::new();
    for name in &names {
        ips.push(address(&s, name).await);
    }
    let everyone: Vec<&String> = names.iter().collect();
    let others = [&names[0], &names[1]];
    // Members 0 and 1 are the seeds (all three bootstrapped).
    until_seeds(&s, &everyone, &[&ips[0], &ips[1]]).await;
    assert_eq!(reloads_with(&s, &names[0], &ips[2]), 0);

    s.patch_service(
        &names[2],
        json!({"metadata": {"labels": {contract::REPLACE: ips[2]}}}),
    )
    .await;
    until_seeds(&s, &others, &[&ips[0], &ips[1], &ips[2]]).await;
    until_seeds(&s, &[&names[2]], &[&ips[0], &ips[1]]).await;
    for other in others {
        s.until(
            &format!("{other}'s Cassandra to reload its seeds"),
            secs(30),
            || async { reloads_with(&s, other, &ips[2]) > 0 },
        )
        .await;
    }

    s.patch_service(
        &names[2],
        json!({"metadata": {"labels": {contract::REPLACE: null}}}),
    )
    .await;
    until_seeds(&s, &everyone, &[&ips[0], &ips[1]]).await;
    s.until(
        "member 0's Cassandra to reload its seeds again",
        secs(30),
        || async {
            s.pod_logs(&names[0])
                .lines()
                .rev()
                .find(|l| l.contains("cassandra reloaded its seeds"))
                .is_some_and(|l| !l.contains(&format!("/{}:", ips[2])))
        },
    )
    .await;
}

/// Every descendant of a process (children first found through /proc).
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(child);
            todo.push(child);
        }
    }
    out
}

/// Sends `signal` to each of `pids` that runs; returns those it reached.
fn signal_running(pids: &[i32], signal: Signal) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|pid| {
            running(*pid)
                && nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), signal).is_ok()
        })
        .collect()
}

/// A 3-member 3.11 cluster (RF 2) whose last member's decommission stream
/// fails: member 0, a new replica of its ranges, is frozen while member 2
/// is leaving (its lease runs out and the ring has it down when the stream
/// to it is due). Returns the frozen processes, still stopped, and the
/// reported reason.
async fn failed_stream() -> (Scenario, Vec<i32>, String) {
    let mut ring = fast_ring();
    // long enough for a new replica to be found down before the stream ends
    ring.timing.decommission_ms = 8000;
    let (s, names) = three_members("3.11.6", 2, ring).await;
    let (first, last) = (&names[0], &names[2]);
    let (first_address, last_address) = (address(&s, first).await, address(&s, last).await);
    request_decommission(&s, last).await;
    until_state(&s, "member 2 leaving", &last_address, NodeStatus::UL).await;

    let database = descendants(container_pid(&s.pod(first).await).expect("member 0 runs"));
    let states = (
        ring_state(&s, &first_address),
        ring_state(&s, &last_address),
    );
    let frozen = signal_running(&database, Signal::SIGSTOP);
    assert!(
        !frozen.is_empty(),
        "member 0 runs no database to freeze: {database:?}"
    );
    assert_eq!(
        states,
        (Some(NodeStatus::UN), Some(NodeStatus::UL)),
        "member 0 frozen as a live new replica while member 2 leaves\n{}",
        s.ring().text()
    );
    let reason = s
        .until_annotation(last, contract::DECOMMISSION_REFUSED, secs(60))
        .await;
    assert!(reason.contains("Stream failed"), "{reason}");
    (s, frozen, reason)
}

/// On 3.11 (and 4.x) a decommission whose stream fails leaves the node
/// LEAVING and the call throws. The sidecar reports the failure with
/// Cassandra's reason, backs off, claims again and retries from LEAVING
/// (which Cassandra allows); once the failed target is back, the
/// decommission completes and the data check is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_is_reported_and_the_decommission_retried() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, frozen, _reason) = failed_stream().await;
    let last = member(2);
    signal_running(&frozen, Signal::SIGCONT);

    // Member 0 comes back; the retry completes the decommission.
    s.until_label(&last, contract::DECOMMISSIONED, "true", secs(120))
        .await;
    until_intact(&s, 2).await;
    let meta = s.service(&last).await.metadata;
    assert_eq!(
        annotation(&meta, contract::DECOMMISSION_REFUSED),
        None,
        "the retry's claim clears the report"
    );
}

/// The same failed stream, and the request withdrawn while the node is
/// stuck LEAVING: the sidecar restarts the database (how Cassandra gets
/// back to NORMAL), clears its records, and the member serves again in a
/// ring of 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_failed_decommission_restarts_the_node_back_to_normal() {
    let _one = FAKE_WORLDS.lock().await;
    let (s, frozen, _reason) = failed_stream().await;
    let last = member(2);
    // Withdrawn at once, within the back-off: no retry has started.
    withdraw_decommission(&s, &last).await;
    signal_running(&frozen, Signal::SIGCONT);

    until_records_cleared(&s, &last, secs(60)).await;
    let names: Vec<String> = (0..3).map(member).collect();
    s.until_pods_ready(&names, secs(120)).await;
    until_intact(&s, 3).await;
    assert!(
        s.pod_logs(&last).contains("restarting the database"),
        "the stuck node was not restarted"
    );
}

/// How many runs the crash test makes (`LIFECYCLE_CRASH_RUNS`, default 1).
fn crash_runs() -> u32 {
    std::env::var("LIFECYCLE_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A pseudo-random delay below `max_ms` (from the clock: each run differs,
/// and the delay is printed so that a failing run can be told apart).
fn random_ms(max_ms: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos() as u64;
    // xorshift over the nanoseconds
    let mut x = nanos ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x % max_ms
}

/// The leaving member's container (sidecar and Cassandra) SIGKILLed twice
/// at random moments of its decommission (before the claim, during the
/// ring delay, while streaming, after DECOMMISSIONED): both kills land (a
/// container between restarts is killed once it runs again), the member is
/// never seen joining or back in the ring once it left, and every run ends
/// with the decommission confirmed, 2 UN nodes and a clean data check.
/// `LIFECYCLE_CRASH_RUNS=20` makes 20 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_member_killed_at_random_moments_still_decommissions_safely() {
    let _one = FAKE_WORLDS.lock().await;
    let runs = crash_runs();
    let mut landed = 0;
    for run in 0..runs {
        let mut ring = fast_ring();
        ring.timing.decommission_ms = 1500;
        let (s, names) = three_members("3.11.6", 2, ring).await;
        let last = &names[2];
        let address = address(&s, last).await;
        let before = restarts(&s, last).await;
        request_decommission(&s, last).await;
        let delays = [random_ms(2500), random_ms(4000)];
        let mut kills = Vec::new();
        for delay in delays {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            kills.push(kill_member(&s, last, &address).await);
        }
        let moments = format!("run {run}: kills after {delays:?} ms: {kills:?}");
        eprintln!("{moments}");
        // In the ring (Normal before its claim, Leaving after) or left:
        // a leaving member never joins again, nor comes back once it left.
        for kill in &kills {
            assert!(
                matches!(
                    kill.state,
                    None | Some(NodeStatus::UN | NodeStatus::DN | NodeStatus::UL | NodeStatus::DL)
                ),
                "{moments}: the leaving member was {:?}",
                kill.state
            );
        }
        if let Some(left) = kills.iter().position(|k| k.state.is_none()) {
            assert!(
                kills[left..].iter().all(|k| k.state.is_none()),
                "{moments}: the member came back to the ring after it left"
            );
        }

        s.until_label(last, contract::DECOMMISSIONED, "true", secs(120))
            .await;
        until_intact(&s, 2).await;
        // Every kill landed: the kubelet saw the container die at least
        // once per kill (the sidecar also exits once by itself when a kill
        // came between DECOMMISSIONED and its marker: Cassandra refuses to
        // start, the sidecar records the marker and ends).
        let died = until_restarted(&s, last, before, kills.len() as i32).await;
        landed += kills.len();
        eprintln!(
            "run {run}: {} kills landed, {died} container deaths; confirmed, clean",
            kills.len()
        );
    }
    assert_eq!(landed, 2 * runs as usize, "kills landed over {runs} runs");
}
