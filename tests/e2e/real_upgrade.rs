//! Real Apache Cassandra 5.0 members, and the operator's rolls on real
//! members (issue 28): a rolling restart through the `restartedAt`
//! annotation, a patch upgrade 4.1.7 → 4.1.8 and a major upgrade 4.1.8 →
//! 5.0.3 (then `storage_compatibility_mode: UPGRADING` and the
//! upgradesstables the operator runs by itself), each timed, with an application's
//! writes at QUORUM running throughout (`testworld::cql`'s writer, from a
//! Pod of its own) and checked at ALL afterwards.
//!
//! Two nodetools judge the ring after each operation: Cassandra's own
//! (`org.apache.cassandra.tools.NodeTool` from the member's release, over
//! its local JMX port 7199, in the Pod's network namespace:
//! [`testworld::real_cassandra::nodetool`]) and the operator's
//! (`cassandra-operator nodetool`, over the Jolokia agent). They must list
//! the same members at their ClusterIPs, all Up and Normal, with the same
//! host IDs; Cassandra's `nodetool version` must name the new release on
//! every member.
//!
//! The test world's `cassandra:` image is the official one with two
//! `ENV`s a user's derived image could set: the short ring timings of
//! tests (`JVM_EXTRA_OPTS`) and `SSTABLE_SCAN_SECONDS` (the sidecar's scan
//! for old-format sstables, every 2 s instead of 5 minutes, so that the
//! gauge follows `upgradesstables` within the test).
//!
//! Needs `scripts/fetch-cassandra` of 4.1.7, 4.1.8 and 5.0.3 (scripts/test
//! runs it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use testworld::cql::{Client, Consistency, Table};
use testworld::real_cassandra::nodetool::{StatusRow, parse_status, parse_version};

use crate::real::{
    MEMORY_LIMIT_MIB, jvm_rss_mib, member, member_ips, nodetool, real_cluster_of as real_cluster,
    real_image, real_nodetool, real_world_of, release_of,
};
use crate::real_data::{CQL_PORT, app_netns, stop_and_check};
use crate::scenario::{Scenario, container_pid, overrides, pod_ready, secs};

/// The sidecar's scan period for old-format sstables, in the image's
/// environment.
const SSTABLE_SCAN_SECONDS: &str = "2";

const MEMBERS: i32 = 3;

/// How long a roll of three real members may take: each member's drain,
/// stop, start and rejoin took 15-25 s here; the margin is for a loaded
/// machine.
const ROLL_TIMEOUT: Duration = secs(600);

/// Keys written before an operation, which the data check demands after
/// it (besides every key the writer had acknowledged).
const KEYS_BEFORE: usize = 300;

/// A scenario whose `cassandra:` images run real Cassandra, the sidecar
/// scanning for old-format sstables every [`SSTABLE_SCAN_SECONDS`].
async fn real_world() -> Scenario {
    real_world_of(real_image().with_env("SSTABLE_SCAN_SECONDS", SSTABLE_SCAN_SECONDS)).await
}

fn members() -> Vec<String> {
    (0..MEMBERS).map(member).collect()
}

/// The sidecar's `/metrics` on the member's Pod IP: its old-format
/// sstables total, once served.
fn old_format_gauge(pod: &Pod) -> Option<u64> {
    let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
    let (_, text) = crate::common::http_get(&format!("{ip}:8080"), "/metrics")?;
    text.lines()
        .find_map(|l| l.strip_prefix("cassandra_operator_member_sstables_old_format "))
        .and_then(|v| v.trim().parse().ok())
}

/// The `*-Data.db` files of sstable version `version` (`nb`, `oa`) in a
/// member's data directory.
async fn data_files(s: &Scenario, member: &str, version: &str) -> usize {
    let data = s.data_volume(member).await.join("data");
    sidecar::sstables::list(&data)
        .iter()
        .flat_map(|(_, _, files)| files)
        .filter(|f| f.starts_with(&format!("{version}-")) && f.ends_with("-Data.db"))
        .count()
}

/// The ring as both nodetools show it from every member, once they agree
/// and it is what it must be: every member Ready, each nodetool on each
/// member listing exactly the members' ClusterIPs, all `UN`, with the same
/// host IDs; Cassandra's `nodetool version` on every member `version`.
/// Returns member 0's `status` (Cassandra's) and the host ID of each
/// address.
async fn until_ring_agrees(
    s: &Scenario,
    what: &str,
    version: &str,
) -> (String, BTreeMap<String, String>) {
    s.until_ready("c", MEMBERS, secs(120)).await;
    let ips = member_ips(s, MEMBERS).await;
    let began = Instant::now();
    let agreed = s
        .until(
            &format!("{what}: both nodetools show {ips:?} UN on every member, at {version}"),
            secs(180),
            || async {
                let mut first = None;
                for name in members() {
                    let real = real_nodetool(s, &name, &["status"]).await?;
                    let operator = nodetool(s, &name, &["status"]).await?;
                    let (real_rows, operator_rows) = (parse_status(&real), parse_status(&operator));
                    check_rows(&real_rows, &ips)
                        .map_err(|e| format!("{name}, Cassandra's: {e}"))?;
                    check_rows(&operator_rows, &ips)
                        .map_err(|e| format!("{name}, the operator's: {e}"))?;
                    let key = |rows: &[StatusRow]| {
                        let mut v: Vec<_> = rows
                            .iter()
                            .map(|r| (r.address.clone(), r.state.clone(), r.host_id.clone()))
                            .collect();
                        v.sort();
                        v
                    };
                    if key(&real_rows) != key(&operator_rows) {
                        return Err(format!(
                            "{name}: the nodetools differ:\n{real}\n---\n{operator}"
                        ));
                    }
                    let said = real_nodetool(s, &name, &["version"]).await?;
                    if parse_version(&said) != Some(version) {
                        return Err(format!("{name}: Cassandra's nodetool version: {said}"));
                    }
                    first.get_or_insert((real, real_rows));
                }
                first.ok_or("no members".to_string())
            },
        )
        .await;
    eprintln!(
        "{what}: both nodetools agreed {:.1} s after every member was Ready",
        began.elapsed().as_secs_f64()
    );
    let (text, rows) = agreed;
    let host_ids = rows
        .into_iter()
        .map(|r| (r.address, r.host_id.unwrap_or_default()))
        .collect();
    (text, host_ids)
}

/// Exactly the addresses `ips`, each `UN` with a host ID.
fn check_rows(rows: &[StatusRow], ips: &[String]) -> Result<(), String> {
    let mut addresses: Vec<&str> = rows.iter().map(|r| r.address.as_str()).collect();
    addresses.sort();
    let mut want: Vec<&str> = ips.iter().map(String::as_str).collect();
    want.sort();
    if addresses != want {
        return Err(format!("addresses {addresses:?}, want {want:?}"));
    }
    match rows.iter().find(|r| r.state != "UN" || r.host_id.is_none()) {
        Some(r) => Err(format!("{r:?}")),
        None => Ok(()),
    }
}

/// The members' Pod UIDs now.
async fn pod_uids(s: &Scenario) -> BTreeMap<String, String> {
    let pods: Api<Pod> = s.api();
    let mut uids = BTreeMap::new();
    for name in members() {
        let pod = pods.get(&name).await.unwrap();
        uids.insert(name, pod.metadata.uid.unwrap_or_default());
    }
    uids
}

/// Waits until every member runs a new Pod (not one of `before`), of
/// `cassandra:<version>`, Ready, and the Cluster counts them all ready;
/// asserts that no two members were ever unready at once (the roll goes
/// one member at a time; sampled every poll). The time it took.
async fn until_rolled(
    s: &Scenario,
    what: &str,
    before: &BTreeMap<String, String>,
    version: &str,
) -> Duration {
    let began = Instant::now();
    let pods: Api<Pod> = s.api();
    let most_unready = std::cell::Cell::new(0usize);
    s.until(
        &format!("{what}: every member rolled"),
        ROLL_TIMEOUT,
        || {
            let (pods, most_unready) = (pods.clone(), &most_unready);
            async move {
                let mut pending = Vec::new();
                let mut unready = 0;
                for name in members() {
                    let pod = pods.get_opt(&name).await.map_err(|e| e.to_string())?;
                    let ready = pod.as_ref().is_some_and(pod_ready);
                    if !ready {
                        unready += 1;
                    }
                    let rolled = pod.as_ref().is_some_and(|p| {
                        p.metadata.uid.as_ref() != before.get(&name)
                            && release_of(p).as_deref() == Some(version)
                    });
                    if !(rolled && ready) {
                        pending.push(name);
                    }
                }
                most_unready.set(most_unready.get().max(unready));
                if pending.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not yet rolled and Ready: {pending:?}"))
                }
            }
        },
    )
    .await;
    let took = began.elapsed();
    s.until_ready("c", MEMBERS, secs(120)).await;
    assert!(
        most_unready.get() <= 1,
        "{what}: {} members were unready at once",
        most_unready.get()
    );
    eprintln!(
        "{what}: {MEMBERS} members rolled in {:.1} s",
        took.as_secs_f64()
    );
    took
}

/// The application's session (contact points: the members' ClusterIPs),
/// its table `app.kv` (replication 3 in datacenter `dc`) and
/// [`KEYS_BEFORE`] keys written at QUORUM.
async fn application_data(s: &Scenario) -> (Table, BTreeMap<String, String>) {
    let netns = app_netns(s).await;
    let contact: Vec<SocketAddr> = member_ips(s, MEMBERS)
        .await
        .iter()
        .map(|ip| SocketAddr::new(ip.parse().unwrap(), CQL_PORT))
        .collect();
    let client = Client::connect(netns, &contact)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let table = client
        .keyspace("app", &[("dc", 3)])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut written = BTreeMap::new();
    for n in 0..KEYS_BEFORE {
        let (key, value) = (format!("k{n:04}"), format!("before-{n}"));
        table
            .write(&key, &value, Consistency::Quorum)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        written.insert(key, value);
    }
    (table, written)
}

/// Three real 5.0.3 members come up Ready: the sidecar renders a 5.0
/// configuration that the release's `bin/cassandra` accepts (on Java 17),
/// the members gossip at their ClusterIPs, both nodetools agree, the
/// application writes at QUORUM and reads back at ALL, and each JVM stays
/// under the members' memory limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (about 1 minute; CI's major upgrade brings up 5.0 members and compares the nodetools too): run by scripts/soak"]
async fn real_5_0_members_come_up_ready_and_both_nodetools_agree() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let s = real_world().await;
    let began = Instant::now();
    s.create(&real_cluster("5.0.3", MEMBERS)).await;
    s.until_ready("c", MEMBERS, secs(600)).await;
    eprintln!(
        "3 real 5.0.3 members Ready {:.1} s after the Cluster was created",
        began.elapsed().as_secs_f64()
    );
    for name in members() {
        let logs = s.pod_logs(&name);
        assert!(
            logs.contains("Cassandra version: 5.0.3"),
            "{name} runs 5.0.3:\n{}",
            &logs[logs.len().saturating_sub(4000)..]
        );
    }
    let (status, _) = until_ring_agrees(&s, "5.0 bring-up", "5.0.3").await;
    eprintln!("Cassandra's nodetool status:\n{status}");
    let (table, written) = application_data(&s).await;
    let check = table
        .check(&written, Consistency::All)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(check.clean(), "{check}");
    for name in members() {
        let pid = container_pid(&s.pod(&name).await).unwrap();
        // Within the memory limit a real kubelet would enforce (kubesim
        // does not).
        let rss = jvm_rss_mib(pid).expect("the member's JVM runs");
        eprintln!("RSS {name}: {rss} MiB (limit {MEMORY_LIMIT_MIB} MiB)");
        assert!(rss < MEMORY_LIMIT_MIB, "{name}: {rss} MiB");
    }
}

/// A patch upgrade 4.1.7 → 4.1.8 (`spec.version`), then a rolling restart
/// through the `cassandra.rook.io/restartedAt` annotation, on three real
/// members with the application writing at QUORUM: each rolls every
/// member once, one at a time; afterwards both nodetools agree on three
/// `UN` members at their ClusterIPs with the host IDs they had (the same
/// nodes, on their data), Cassandra's `nodetool version` names the
/// release; no application request failed and no acknowledged write is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (about 3 minutes; CI runs the major upgrade, a roll of the same machinery): run by scripts/soak"]
async fn real_patch_upgrade_and_rolling_restart_keep_the_ring_and_its_data() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let s = real_world().await;
    s.create(&real_cluster("4.1.7", MEMBERS)).await;
    s.until_ready("c", MEMBERS, secs(600)).await;
    let (_, host_ids) = until_ring_agrees(&s, "4.1.7 bring-up", "4.1.7").await;
    let (table, written) = application_data(&s).await;
    let writer = table
        .writer("steady on 4.1.7")
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(5)).await;

    let what = "patch upgrade 4.1.7 → 4.1.8";
    writer.phase(what);
    let before = pod_uids(&s).await;
    s.patch_cluster("c", json!({"spec": {"version": "4.1.8"}}))
        .await;
    until_rolled(&s, what, &before, "4.1.8").await;
    writer.phase(&format!("after the {what}"));
    let (_, after) = until_ring_agrees(&s, what, "4.1.8").await;
    assert_eq!(after, host_ids, "{what}: the same nodes");

    let what = "rolling restart (restartedAt)";
    writer.phase(what);
    let before = pod_uids(&s).await;
    s.patch_cluster(
        "c",
        json!({"metadata": {"annotations": {crds::labels::RESTARTED_AT: "2026-11-27T14:00:00Z"}}}),
    )
    .await;
    until_rolled(&s, what, &before, "4.1.8").await;
    writer.phase(&format!("after the {what}"));
    let (status, after) = until_ring_agrees(&s, what, "4.1.8").await;
    assert_eq!(after, host_ids, "{what}: the same nodes");
    eprintln!("Cassandra's nodetool status:\n{status}");
    stop_and_check(writer, &table, &written).await;
}

/// The overrides' setting before the upgrade: `concurrent_reads` at its
/// default in 4.1 and 5.0.
const TUNING: &str = "concurrent_reads: 32\n";

/// Waits until each member's sidecar counts as old-format exactly its
/// `*-Data.db` files of `old_version` (none when None), read from its data
/// directory at each try, as compaction may change them.
async fn until_gauges(s: &Scenario, what: &str, old_version: Option<&str>) {
    for name in members() {
        let pod = s.pod(&name).await;
        s.until(&format!("{what}: {name}'s gauge"), secs(30), || async {
            let want = match old_version {
                Some(v) => data_files(s, &name, v).await as u64,
                None => 0,
            };
            let gauge = old_format_gauge(&pod);
            (gauge == Some(want))
                .then_some(want)
                .ok_or(format!("gauge {gauge:?}, want {want}"))
        })
        .await;
    }
}

/// Waits until the operator's upgradesstables is complete: every member's
/// sidecar recorded 0 old-format sstables, its last maintenance record is
/// an upgradesstables `done`, no request stands, and the Cluster's status
/// says `sstablesUpgraded`; then `watch` vouches that no two requests
/// ever stood at once (judged at every committed change, not sampled). The
/// members in the order they were asked, and the old-format counts each
/// recorded along the way.
async fn until_sstables_upgraded(
    s: &Scenario,
    watch: &crate::maintenance::MaintenanceWatch,
) -> (Vec<String>, BTreeMap<String, Vec<u64>>) {
    use crds::contract::maintenance::{
        OLD_FORMAT_SSTABLES, Operation, RECORD, REQUEST, Record, State, old_format_sstables,
    };
    use k8s_openapi::api::core::v1::Service;
    let services: Api<Service> = s.api();
    let counts: std::cell::RefCell<BTreeMap<String, Vec<u64>>> = Default::default();
    s.until(
        "upgradesstables on every member, 0 old-format sstables",
        secs(600),
        || async {
            let mut pending = Vec::new();
            for name in members() {
                let svc = services.get(&name).await.map_err(|e| e.to_string())?;
                let a = svc.metadata.annotations.unwrap_or_default();
                let count = old_format_sstables(a.get(OLD_FORMAT_SSTABLES).map(String::as_str));
                if let Some(n) = count {
                    let mut counts = counts.borrow_mut();
                    let seen = counts.entry(name.clone()).or_default();
                    if seen.last() != Some(&n) {
                        seen.push(n);
                    }
                }
                let record = a.get(RECORD).and_then(|v| Record::from_annotation(v));
                let done = record.as_ref().is_some_and(|r| {
                    r.operation == Operation::Upgradesstables && r.state == State::Done
                });
                if count != Some(0) || !done || a.contains_key(REQUEST) {
                    pending.push(format!("{name}: count {count:?}, {record:?}"));
                }
            }
            let status = s
                .clusters()
                .get("c")
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|st| st.maintenance);
            if status.as_ref().and_then(|m| m.sstables_upgraded) != Some(true) {
                pending.push(format!("status {status:?}"));
            }
            if pending.is_empty() {
                Ok(())
            } else {
                Err(pending.join("; "))
            }
        },
    )
    .await;
    watch.assert_one_at_a_time("the operator's upgradesstables");
    let mut order: Vec<String> = Vec::new();
    for asked in watch.asked() {
        if asked.request.operation == Operation::Upgradesstables && !order.contains(&asked.member) {
            order.push(asked.member);
        }
    }
    (order, counts.into_inner())
}

/// Once the first upgradesstables request stands, after a random delay
/// (seed printed, `LIFECYCLE_SEED` replays it): SIGKILLs the controller and
/// the member asked ([`crate::real::kill_controller_and_member`]). The
/// member, its request and the seed.
async fn kill_during_the_first_request(s: &mut Scenario) -> (String, String, u64) {
    use crds::contract::maintenance::REQUEST;
    use k8s_openapi::api::core::v1::Service;
    let seed = crate::lifecycle_crash::seed();
    let mut random = crate::lifecycle::Lcg(seed);
    let services: Api<Service> = s.api();
    let (victim, _) = s
        .until("an upgradesstables request", secs(300), || async {
            for name in members() {
                let svc = services.get(&name).await.map_err(|e| e.to_string())?;
                if let Some(r) = svc.metadata.annotations.unwrap_or_default().get(REQUEST) {
                    return Ok((name, r.clone()));
                }
            }
            Err("none yet".to_string())
        })
        .await;
    tokio::time::sleep(Duration::from_millis(random.below(2000))).await;
    let asked = services
        .get(&victim)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get(REQUEST)
        .cloned()
        .unwrap_or_else(|| panic!("seed {seed}: {victim}'s request was over before the kill"));
    let order = crate::real::kill_controller_and_member(s, &victim, &mut random).await;
    eprintln!("seed {seed}: killed {order}, {victim} holding {asked}");
    (victim, asked, seed)
}

/// A major upgrade 4.1.8 → 5.0.3 of three real members as Cassandra's
/// upgrade notes have it, with data written on 4.1 and the application
/// writing at QUORUM throughout, each step timed:
///
/// 1. `spec.version` 5.0.3: every member rolls once, one at a time, onto
///    5.0.3 on its data (the same host IDs). Under 5.0's shipped
///    `storage_compatibility_mode: CASSANDRA_4` it writes `nb` sstables, as
///    4.1 did, so nothing is old yet: every sidecar's gauge is 0.
/// 2. `storage_compatibility_mode: UPGRADING` in the overrides ConfigMap:
///    a roll; 5.0 now writes `oa`, and each sidecar counts the `nb`
///    sstables 4.1 left (the application's table among them).
/// 3. The operator runs upgradesstables by itself (issue 33): each member
///    records its count of old-format sstables on its Service, and the
///    controller asks those above 0 to rewrite them, one member at a time,
///    through their sidecars' Jolokia; the controller and the first
///    member asked are SIGKILLed while its request stands and come back;
///    the request outlives both, every count and gauge goes to 0, no `nb`
///    file is left, and the Cluster's status says `sstablesUpgraded`.
///
/// After each step both nodetools agree on three `UN` members at 5.0.3;
/// no application request failed and no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_major_upgrade_4_1_to_5_0_then_upgradesstables_leaves_no_old_sstables() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let mut s = real_world().await;
    let configmaps: Api<ConfigMap> = s.api();
    // The overrides ConfigMap exists from the start (a setting both majors
    // know, at its default: 4.1 refuses to start on a key it does not
    // know, such as storage_compatibility_mode), so that changing its
    // content later is the one trigger.
    configmaps
        .create(&PostParams::default(), &overrides("c-overrides", TUNING))
        .await
        .unwrap();
    // Every maintenance request from the start, at each committed change.
    let watch = crate::maintenance::MaintenanceWatch::start(s.sim(), &s.namespace);
    let c = real_cluster("4.1.8", MEMBERS).with_rack(json!({"configMapName": "c-overrides"}));
    s.create(&c).await;
    s.until_ready("c", MEMBERS, secs(600)).await;
    let (_, host_ids) = until_ring_agrees(&s, "4.1.8 bring-up", "4.1.8").await;
    let (table, written) = application_data(&s).await;
    let writer = table
        .writer("steady on 4.1.8")
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(5)).await;

    let what = "major upgrade 4.1.8 → 5.0.3";
    writer.phase(what);
    let before = pod_uids(&s).await;
    s.patch_cluster("c", json!({"spec": {"version": "5.0.3"}}))
        .await;
    until_rolled(&s, what, &before, "5.0.3").await;
    writer.phase(&format!("after the {what}"));
    let (status, after) = until_ring_agrees(&s, what, "5.0.3").await;
    assert_eq!(after, host_ids, "{what}: the same nodes");
    eprintln!("Cassandra's nodetool status after the {what}:\n{status}");
    // 4.1's sstables, flushed by the drain before each member stopped, are
    // on the disks, and current for 5.0 in CASSANDRA_4 mode.
    let mut nb = BTreeMap::new();
    for name in members() {
        let files = data_files(&s, &name, "nb").await;
        assert!(files > 0, "{name}: 4.1 left no nb sstables");
        assert_eq!(data_files(&s, &name, "oa").await, 0, "{name}: oa files");
        nb.insert(name, files);
    }
    until_gauges(&s, &format!("after the {what}"), None).await;
    eprintln!("nb sstables after the {what}: {nb:?}, none old under CASSANDRA_4");

    let what = "storage_compatibility_mode UPGRADING";
    writer.phase(what);
    let before = pod_uids(&s).await;
    configmaps
        .replace(
            "c-overrides",
            &PostParams::default(),
            &overrides(
                "c-overrides",
                &format!("{TUNING}storage_compatibility_mode: UPGRADING\n"),
            ),
        )
        .await
        .unwrap();
    until_rolled(&s, what, &before, "5.0.3").await;
    let rolled = Instant::now();

    // From here the operator runs upgradesstables by itself: each member
    // now counts 4.1's `nb` files as old, records the count on its
    // Service, and the controller asks the members above 0, one at a
    // time. (No count is asserted before it: the first request may come
    // before this test reads a disk.)
    let what = "the operator's upgradesstables";
    writer.phase(what);
    let (victim, asked, seed) = kill_during_the_first_request(&mut s).await;
    let (order, counts) = until_sstables_upgraded(&s, &watch).await;
    let finished = {
        use crds::contract::maintenance::{RECORD, Record};
        let services: Api<k8s_openapi::api::core::v1::Service> = s.api();
        let svc = services.get(&victim).await.unwrap();
        svc.metadata
            .annotations
            .unwrap_or_default()
            .get(RECORD)
            .and_then(|v| Record::from_annotation(v))
            .expect("the killed member's record")
    };
    // The request outlived both kills: the restarted sidecar ran it again
    // (upgradesstables rewrites what is still old), and the restarted
    // controller finished it rather than ask anew.
    assert!(
        asked.contains(&finished.request),
        "seed {seed}: {victim} finished {finished:?}, was asked {asked}"
    );
    eprintln!(
        "{what}: every member at 0 old-format sstables {:.1} s after the roll; asked in order {order:?}; old-format counts recorded on the way: {counts:?}",
        rolled.elapsed().as_secs_f64()
    );
    for name in members() {
        // Each member had 4.1's files to rewrite (system tables at least),
        // recorded a count above 0, and was asked.
        assert!(order.contains(&name), "{name} was never asked");
        assert!(
            counts.get(&name).is_some_and(|c| c.iter().any(|n| *n > 0)),
            "{name} never recorded an old-format sstable: {counts:?}"
        );
    }
    until_gauges(&s, what, None).await;
    for name in members() {
        assert_eq!(data_files(&s, &name, "nb").await, 0, "{name}: nb left");
        assert!(
            data_files(&s, &name, "oa").await > 0,
            "{name}: 5.0 wrote no oa sstables"
        );
    }
    writer.phase(&format!("after {what}"));
    until_ring_agrees(&s, what, "5.0.3").await;
    stop_and_check(writer, &table, &written).await;
}
