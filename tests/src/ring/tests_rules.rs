//! Startup and schema rules of the ring model as Cassandra's source has
//! them, per version (the endpoint collision check, the lone seed's start,
//! forceRemoveCompletion, ALTER KEYSPACE). Pure, like the model.

use super::tests::{addr, config, join, load, three_nodes, versioned};
use super::*;

/// StorageService.prepareToJoin checks for an endpoint collision on every
/// start that is not a replacement, since before 3.11: a seed (which does
/// not bootstrap) with a wiped disk has a new host ID, and
/// Gossiper.isSafeForStartup refuses it when gossip knows its address under
/// another one, on 3.11 as on 4.x.
#[test]
fn a_seed_with_a_wiped_disk_collides_on_3_11_and_on_4_x() {
    for version in [Version::V3_11, Version::V4_1, Version::V5_0] {
        let mut ring = Ring::new(Options::default());
        let seeds = ["10.0.0.1"];
        let ids: Vec<HostId> = (1..=3)
            .map(|i| join(&mut ring, &versioned(config(i, &seeds), version)))
            .collect();
        ring.create_keyspace("three", Replication::simple(3))
            .expect("ks");
        ring.write_keys("three", "k", 100, Consistency::Quorum)
            .expect("writes");
        ring.kill(&ids[0]).expect("kill");
        ring.wipe_data_dir("pvc-1");
        let seed = versioned(config(1, &["10.0.0.1", "10.0.0.2"]), version);
        assert_eq!(
            ring.start(&seed),
            Err(RingError::EndpointCollision { address: addr(1) }),
            "{version:?}"
        );
        // Nothing changed: the old member stays at its address, down; its
        // copies are gone with its disk, the others' remain.
        let old = ring.node(&ids[0]).expect("still in gossip");
        assert!(old.process.is_none() && old.address == addr(1));
        let report = ring.check();
        assert!(report.lost.is_empty(), "{version:?}: {report}");
        assert_eq!(report.under_replicated.len(), 100, "{version:?}");
    }
}

/// `nodetool removenode force` excises a member left LEAVING by a
/// decommission that died midway (StorageService.forceRemoveCompletion);
/// with nothing pending it changes nothing.
#[test]
fn force_remove_completion_excises_a_member_stuck_leaving() {
    let (mut ring, ids) = three_nodes(Version::V3_11);
    load(&mut ring);
    assert_eq!(ring.force_remove_completion(&ids[0]), Ok(vec![]));
    assert_eq!(ring.nodes().count(), 3, "nothing pending: nothing changes");
    ring.start_decommission(&ids[2], false)
        .expect("3.11 decommissions without a replication check");
    ring.kill(&ids[2]).expect("the leaving node dies midway");
    assert_eq!(
        ring.node(&ids[2]).map(|n| n.state.clone()),
        Some(RingState::Leaving)
    );
    assert_eq!(
        ring.force_remove_completion(&ids[0]),
        Ok(vec![ids[2].clone()])
    );
    assert!(ring.node(&ids[2]).is_none(), "excised");
    assert_eq!(ring.nodes().count(), 2);
    // Nothing was streamed: the ranges it held lost that copy.
    let report = ring.check();
    assert!(!report.under_replicated.is_empty(), "{report}");
    assert!(matches!(
        ring.force_remove_completion(&ids[2]),
        Err(RingError::UnknownNode { .. })
    ));
}

/// ALTER KEYSPACE moves no data: raising the replication factor leaves
/// every key short of copies until `nodetool repair`; lowering it leaves
/// extra copies until `nodetool cleanup`.
#[test]
fn alter_keyspace_moves_no_data_until_repair_and_cleanup() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    ring.create_keyspace("app", Replication::simple(1))
        .expect("ks");
    ring.write_keys("app", "k", 200, Consistency::One)
        .expect("writes");
    assert!(ring.check().is_clean());
    ring.alter_keyspace("app", Replication::simple(3))
        .expect("alter");
    let report = ring.check();
    assert_eq!(report.under_replicated.len(), 200, "{report}");
    assert!(report.lost.is_empty());
    for id in &ids {
        ring.repair(id).expect("repair");
    }
    assert!(ring.check().is_clean(), "repair copied every key");
    assert_eq!(
        ring.alter_keyspace("nope", Replication::simple(1)),
        Err(RingError::UnknownKeyspace {
            keyspace: "nope".into()
        })
    );
}

/// A seed with a wiped disk that starts while every other member is down
/// hears nobody in its shadow round and starts anyway as a new node with
/// new tokens (Gossiper.doShadowRound, isSafeForStartup on an empty map):
/// a silent fork that loses the old member's copies.
#[test]
fn a_lone_seed_with_a_wiped_disk_starts_as_a_new_node() {
    for version in [Version::V3_11, Version::V4_1, Version::V5_0] {
        let (mut ring, ids) = three_nodes(version);
        ring.create_keyspace("one", Replication::simple(1))
            .expect("ks");
        ring.write_keys("one", "k", 200, Consistency::One)
            .expect("writes");
        for id in &ids {
            ring.kill(id).expect("kill");
        }
        ring.wipe_data_dir("pvc-1");
        let seed = versioned(config(1, &["10.0.0.1"]), version);
        let started = ring.start(&seed).expect("a lone seed starts");
        assert_eq!(started.startup, Startup::JoinedWithoutBootstrap);
        assert_ne!(started.host_id, ids[0], "{version:?}: a new host ID");
        assert!(
            ring.node(&ids[0]).is_none(),
            "{version:?}: the old member is forgotten"
        );
        assert!(
            started
                .log
                .iter()
                .any(|l| l.starts_with("Unable to gossip with any peers"))
        );
        assert!(
            !ring.check().lost.is_empty(),
            "{version:?}: its old copies are gone"
        );
    }
}

/// StartupChecks.checkSSTablesFormat: a node reads the data of its own
/// major and of the one before. A rolling upgrade 4.1 → 5.0 restarts each
/// node on its data, a downgrade 5.0 → 4.1 or a skipped major 3.11 → 5.0
/// does not start, and the data stays as it was.
#[test]
fn a_node_starts_only_on_data_its_version_can_read() {
    let mut ring = Ring::new(Options::default());
    let seeds = ["10.0.0.1"];
    let ids: Vec<HostId> = (1..=3)
        .map(|i| join(&mut ring, &versioned(config(i, &seeds), Version::V4_1)))
        .collect();
    ring.create_keyspace("three", Replication::simple(3))
        .expect("ks");
    ring.write_keys("three", "k", 100, Consistency::Quorum)
        .expect("writes");
    // node 1 upgraded: 4.1 → 5.0 reads 4.x data
    ring.kill(&ids[0]).expect("kill");
    let upgraded = versioned(config(1, &seeds), Version::V5_0);
    assert!(ring.start(&upgraded).is_ok());
    // and back is a downgrade over a major: refused, node left down
    ring.kill(&ids[0]).expect("kill");
    let downgraded = versioned(config(1, &seeds), Version::V4_1);
    let refused = ring.start(&downgraded).unwrap_err();
    assert_eq!(
        refused,
        RingError::UnreadableSstables {
            data_dir: downgraded.data_dir.clone(),
            written: Version::V5_0,
            running: Version::V4_1,
        }
    );
    assert!(
        refused
            .to_string()
            .starts_with("Detected unreadable sstables in"),
        "{refused}"
    );
    assert!(ring.node(&ids[0]).unwrap().process.is_none());
    // a patch or minor step on the same data starts
    ring.start(&upgraded).expect("5.0 again");

    // 3.11 data under 5.0: a skipped major
    let mut old = Ring::new(Options::default());
    let id = join(&mut old, &versioned(config(1, &seeds), Version::V3_11));
    old.kill(&id).expect("kill");
    assert!(matches!(
        old.start(&versioned(config(1, &seeds), Version::V5_0)),
        Err(RingError::UnreadableSstables { .. })
    ));
    assert!(
        old.start(&versioned(config(1, &seeds), Version::V4_0))
            .is_ok()
    );
    let report = ring.check();
    assert!(report.lost.is_empty(), "{report}");
}

/// `nodetool repair KEYSPACE` (StorageService.repairAsync,
/// RepairRunnable): nothing to do with one replica; refused while a
/// neighbour is down; otherwise a replica that missed writes (down past
/// the hint window) gets them, in that keyspace only.
#[test]
fn repair_of_a_keyspace_as_repair_async_runs_it() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    ring.create_keyspace("one", Replication::simple(1))
        .expect("ks");
    assert_eq!(ring.repair_keyspace(&ids[0], "one"), Ok(false));
    ring.kill(&ids[1]).expect("kill");
    assert_eq!(
        ring.repair_keyspace(&ids[0], "ks3"),
        Err(RingError::RepairNeighborDown { address: addr(2) })
    );
    ring.advance(Timing::default().max_hint_window_ms + 1);
    ring.write_keys("ks3", "late-", 50, Consistency::Quorum)
        .expect("writes");
    ring.write_keys("ks2", "late-", 50, Consistency::One)
        .expect("writes");
    ring.start(&config(2, &["10.0.0.1"])).expect("restart");
    let short = |ring: &Ring, ks: &str| {
        ring.check()
            .under_replicated
            .iter()
            .filter(|k| k.keyspace == ks)
            .count()
    };
    assert_eq!(short(&ring, "ks3"), 50, "{}", ring.check());
    assert!(short(&ring, "ks2") > 0);
    assert_eq!(ring.repair_keyspace(&ids[1], "ks3"), Ok(true));
    assert_eq!(short(&ring, "ks3"), 0, "the missed writes repaired");
    assert!(short(&ring, "ks2") > 0, "only the keyspace asked for");
    assert_eq!(
        ring.repair_keyspace(&ids[1], "nope"),
        Err(RingError::UnknownKeyspace {
            keyspace: "nope".into()
        })
    );
}

/// `nodetool cleanup KEYSPACE` (StorageService.forceKeyspaceCleanup,
/// CompactionManager.performCleanup): refused for a local system keyspace
/// and on a node gaining ranges (CASSANDRA-16418); then the copies of keys
/// the node no longer replicates go, in that keyspace only.
#[test]
fn cleanup_of_a_keyspace_as_force_keyspace_cleanup_runs_it() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    assert_eq!(
        ring.cleanup_keyspace(&ids[0], "system"),
        Err(RingError::CleanupSystemKeyspace)
    );
    let fourth = ring.start(&config(4, &["10.0.0.1"])).expect("starts");
    assert_eq!(
        ring.cleanup_keyspace(&fourth.host_id, "ks3"),
        Err(RingError::CleanupPendingRanges),
        "a joining node gains ranges"
    );
    ring.finish(&fourth.host_id).expect("bootstrap");
    let ks3 = |ring: &Ring, host: &str| {
        ring.disk_of(host)
            .and_then(|d| d.copies.get("ks3"))
            .map_or(0, |k| k.len())
    };
    let ks2 = |ring: &Ring, host: &str| {
        ring.disk_of(host)
            .and_then(|d| d.copies.get("ks2"))
            .map_or(0, |k| k.len())
    };
    assert_eq!(ks3(&ring, &ids[0]), 1000, "it kept what it gave up");
    let ks2_before = ks2(&ring, &ids[0]);
    assert_eq!(ring.cleanup_keyspace(&ids[0], "ks3"), Ok(0));
    let owned = ring
        .keyspace("ks3")
        .expect("ks3")
        .keys
        .keys()
        .filter(|k| ring.replicas("ks3", k).expect("replicas").contains(&ids[0]))
        .count();
    assert!(owned < 1000);
    assert_eq!(ks3(&ring, &ids[0]), owned, "exactly what it owns is left");
    assert_eq!(ks2(&ring, &ids[0]), ks2_before, "other keyspaces untouched");
    assert!(ring.check().is_clean());
}

/// Restarts node `i` of `ring` on `version` (its data kept), as a rolling
/// upgrade does.
fn upgrade(
    ring: &mut Ring,
    host_id: &str,
    i: usize,
    version: Version,
    compatibility: StorageCompatibility,
) {
    ring.kill(host_id).expect("kill");
    let mut c = versioned(config(i, &["10.0.0.1"]), version);
    c.storage_compatibility = compatibility;
    assert_eq!(
        ring.start(&c).expect("restarts").startup,
        Startup::Restarted
    );
}

/// Streaming needs both ends on the same messaging version
/// (`accept_streaming = (current, current)`): a node bootstrapping on 5.0
/// past `CASSANDRA_4` (messaging 13) from 4.1 sources (12) fails its
/// bootstrap with the stream's failure, JOINING_FAILED as 5.0 marks it; the
/// data stays where it was and the mixed ring keeps serving writes.
#[test]
fn a_bootstrap_across_messaging_versions_fails_its_stream() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    upgrade(
        &mut ring,
        &ids[0],
        1,
        Version::V5_0,
        StorageCompatibility::Upgrading,
    );
    // mixed 4.1/5.0: writes and the data check work across versions
    ring.write_keys("ks3", "mixed-", 100, Consistency::Quorum)
        .expect("a mixed ring takes writes");
    assert!(ring.check().is_clean(), "{}", ring.check());

    let mut joiner = versioned(config(4, &["10.0.0.1"]), Version::V5_0);
    joiner.storage_compatibility = StorageCompatibility::Upgrading;
    let started = ring.start(&joiner).expect("the bootstrap starts");
    let err = ring.finish(&started.host_id).unwrap_err();
    let RingError::StreamVersionMismatch {
        operation,
        peer_version,
        own_version,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (*operation, *peer_version, *own_version),
        (Operation::Bootstrap, 12, 13)
    );
    let message = err.to_string();
    assert!(
        message.starts_with("Error during bootstrap: Stream failed: peer 10.0.0.")
            && message.ends_with(
                "only supports messaging versions lower (12) than this node supports (13)"
            ),
        "{message}"
    );
    let node = ring.node(&started.host_id).expect("still in gossip");
    assert_eq!(node.mode(), Some(OperationMode::JoiningFailed));
    assert_eq!(copies_of(&ring, &started.host_id), 0, "nothing streamed");
    assert!(ring.check().is_clean());
}

/// The same rule on 3.11 → 4.1 (messaging 11 against 12): a 4.1 node does
/// not bootstrap from 3.11 sources, still JOINING as 4.x leaves it.
#[test]
fn a_bootstrap_from_3_11_sources_fails_on_4_1() {
    let (mut ring, ids) = three_nodes(Version::V3_11);
    load(&mut ring);
    upgrade(
        &mut ring,
        &ids[2],
        3,
        Version::V4_1,
        StorageCompatibility::default(),
    );
    let joiner = versioned(config(4, &["10.0.0.1"]), Version::V4_1);
    let started = ring.start(&joiner).expect("starts");
    let err = ring.finish(&started.host_id).unwrap_err();
    assert!(
        matches!(
            err,
            RingError::StreamVersionMismatch {
                operation: Operation::Bootstrap,
                peer_version: 11,
                own_version: 12,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        ring.node(&started.host_id).and_then(Node::mode),
        Some(OperationMode::Joining)
    );
}

/// Cassandra 5.0 under its shipped `storage_compatibility_mode:
/// CASSANDRA_4` keeps messaging version 12: it streams with 4.1 like a 4.1
/// node would (the rule against topology changes while majors are mixed is
/// the operator's, not Cassandra's, in that mode).
#[test]
fn a_5_0_node_in_cassandra_4_mode_streams_with_4_1() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    upgrade(
        &mut ring,
        &ids[0],
        1,
        Version::V5_0,
        StorageCompatibility::Cassandra4,
    );
    let joiner = versioned(config(4, &["10.0.0.1"]), Version::V5_0);
    let host = join(&mut ring, &joiner);
    assert_eq!(ring.node(&host).unwrap().messaging_version, 12);
    assert!(ring.check().is_clean());
}

/// A replacement streams the dead member's ranges from the others: on a
/// messaging version they do not speak, the stream fails as a bootstrap's.
#[test]
fn a_replacement_across_messaging_versions_fails_its_stream() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    ring.kill(&ids[2]).expect("node 3 dies");
    ring.wipe_data_dir("pvc-3");
    let mut replacement = versioned(config(3, &["10.0.0.1"]), Version::V5_0);
    replacement.storage_compatibility = StorageCompatibility::None;
    replacement.replace_address_first_boot = Some(addr(3));
    let started = ring.start(&replacement).expect("the replacement starts");
    let err = ring.finish(&started.host_id).unwrap_err();
    assert!(
        matches!(
            err,
            RingError::StreamVersionMismatch {
                operation: Operation::Replace,
                peer_version: 12,
                own_version: 13,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("Error during bootstrap: Stream failed")
    );
    assert_eq!(
        ring.node(&started.host_id).and_then(Node::mode),
        Some(OperationMode::JoiningFailed)
    );
}

/// A decommissioning node streams its ranges to their new replicas: a
/// 4.1 node whose new replicas run 5.0 past CASSANDRA_4 fails with
/// "Error while decommissioning node: Stream failed", stays LEAVING (4.x)
/// and keeps its data; the keys stay fully replicated.
#[test]
fn a_decommission_across_messaging_versions_fails_its_stream() {
    let mut ring = Ring::new(Options::default());
    let seeds = ["10.0.0.1"];
    let ids: Vec<HostId> = (1..=4)
        .map(|i| join(&mut ring, &versioned(config(i, &seeds), Version::V4_1)))
        .collect();
    ring.create_keyspace("two", Replication::simple(2))
        .expect("ks");
    ring.write_keys("two", "k", 500, Consistency::All)
        .expect("writes");
    for (i, id) in ids.iter().enumerate().take(3) {
        upgrade(
            &mut ring,
            id,
            i + 1,
            Version::V5_0,
            StorageCompatibility::None,
        );
    }
    ring.start_decommission(&ids[3], false)
        .expect("the checks pass");
    let err = ring.finish(&ids[3]).unwrap_err();
    assert!(
        matches!(
            err,
            RingError::StreamVersionMismatch {
                operation: Operation::Decommission,
                peer_version: 13,
                own_version: 12,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("Error while decommissioning node: Stream failed: peer 10.0.0.")
            && message.contains("higher (13) than this node supports (12)"),
        "{message}"
    );
    assert_eq!(
        ring.node(&ids[3]).and_then(Node::mode),
        Some(OperationMode::Leaving)
    );
    assert!(copies_of(&ring, &ids[3]) > 0, "it kept its data");
}

fn copies_of(ring: &Ring, host: &str) -> usize {
    ring.disk_of(host).map_or(0, DataDir::copy_count)
}

/// The sstable version each line writes (`BigFormat.BigVersion.current_version`,
/// `BtiFormat`): 3.11 `me`, 4.x `nb`, 5.0 `nb` under CASSANDRA_4 (what 4.x
/// writes; real 5.0.3 has no `nc`) and `oa` past it, `da` in the
/// trie-indexed format; and the messaging versions.
#[test]
fn sstable_and_messaging_versions_per_line() {
    use StorageCompatibility::*;
    let cases = [
        (Version::V3_11, Cassandra4, false, "me", 11),
        (Version::V4_0, Cassandra4, false, "nb", 12),
        (Version::V4_1, None, false, "nb", 12),
        (Version::V5_0, Cassandra4, false, "nb", 12),
        (Version::V5_0, Upgrading, false, "oa", 13),
        (Version::V5_0, None, false, "oa", 13),
        (Version::V5_0, None, true, "da", 13),
    ];
    for (v, mode, bti, sstable, messaging) in cases {
        assert_eq!(v.sstable_version(mode, bti), sstable, "{v} {mode:?}");
        assert_eq!(v.messaging_version(mode), messaging, "{v} {mode:?}");
    }
}
