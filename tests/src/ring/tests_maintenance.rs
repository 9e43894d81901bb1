//! The maintenance operations that take time (issue 33), at model level:
//! cleanups that drop what a node gave away only when they complete,
//! subrange repairs that repair their ranges and nothing else, Cassandra's
//! refusals and failures, and kills and terminations that leave an
//! operation undone.

use super::tests::{addr, config, load, three_nodes};
use super::*;

fn ranges_option(ranges: &[TokenRange]) -> BTreeMap<String, String> {
    let text: Vec<String> = ranges.iter().map(|(a, b)| format!("{a}:{b}")).collect();
    [("ranges".to_string(), text.join(","))].into()
}

fn keys_in(ring: &Ring, keyspace: &str, ranges: &[TokenRange]) -> BTreeSet<String> {
    ring.keyspace(keyspace)
        .expect("keyspace")
        .keys
        .iter()
        .filter(|(_, t)| ranges.iter().any(|r| range_contains(*r, **t)))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Ranges as `Range<Token>` has them: `(left, right]`, wrapping when left
/// is not below right, the whole ring when equal.
#[test]
fn ranges_contain_and_intersect_as_cassandra_s() {
    assert!(range_contains((0, 10), 10));
    assert!(!range_contains((0, 10), 0));
    assert!(range_contains((10, 0), 11) && range_contains((10, 0), -5));
    assert!(!range_contains((10, 0), 5));
    assert!(range_contains((3, 3), 99));
    assert!(range_contains_range((0, 10), (2, 10)));
    assert!(!range_contains_range((0, 10), (-1, 5)));
    assert!(range_contains_range((10, 0), (20, 30)));
    assert!(range_contains_range((10, 0), (20, -5)));
    assert!(!range_contains_range((0, 10), (20, 5)));
    assert!(ranges_intersect((0, 10), (5, 15)));
    assert!(!ranges_intersect((0, 10), (10, 15)));
    assert!(ranges_intersect((10, 0), (-5, 2)));
    assert_eq!(range_text((-3, 7)), "(-3,7]");
    assert_eq!(parse_ranges("1:5, 7:-9,junk"), Ok(vec![(1, 5), (7, -9)]));
    assert_eq!(
        parse_ranges("4:4"),
        Err(RingError::RepairOption {
            message: "Start and end tokens must be different.".into()
        })
    );
    assert!(parse_ranges("a:5").is_err());
}

/// Each range of the ring is exactly one node's primary range; a node's
/// local ranges are the ranges it replicates (with RF 3 of 3 nodes,
/// every range).
#[test]
fn primary_ranges_partition_the_ring() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    let mut all = Vec::new();
    for id in &ids {
        let primary = ring.primary_ranges(id, "ks3").expect("ranges");
        assert!(!primary.is_empty());
        let local = ring.local_ranges(id, "ks3").expect("ranges");
        assert!(primary.iter().all(|p| local.contains(p)));
        all.extend(primary);
    }
    let tokens = ring.token_to_endpoint().len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), tokens, "every range is someone's primary range");
    assert_eq!(
        ring.local_ranges(&ids[0], "ks3").expect("ranges").len(),
        tokens
    );
}

/// A node down past the hint window misses writes; a repair of some of
/// its subranges (at its own coordination) brings back exactly the keys
/// of those subranges when the command completes, and the rest of its
/// ranges repaired in further commands brings back everything: reads at
/// ONE from that node alone find every key. The log counts the commands.
#[test]
fn subrange_repairs_repair_their_ranges_and_only_them() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    ring.kill(&ids[1]).expect("kill");
    ring.advance(Timing::default().max_hint_window_ms + 1);
    ring.write_keys("ks3", "late-", 200, Consistency::Quorum)
        .expect("writes");
    ring.start(&config(2, &["10.0.0.1"])).expect("restart");
    let missing = ring.missing_on(&ids[1], "ks3");
    assert_eq!(missing.len(), 200);
    assert!(!ring.read_one_from(&ids[1], "ks3", &missing[0]));

    let primary = ring.primary_ranges(&ids[1], "ks3").expect("ranges");
    let (first, rest) = primary.split_at(primary.len() / 2);
    let started = ring
        .start_repair(&ids[1], "ks3", &ranges_option(first))
        .expect("starts");
    let RepairStart::Started(op) = started else {
        panic!("{started:?}")
    };
    assert_eq!(ring.op_state(op), OpState::Queued);
    ring.advance(Timing::default().repair_queue_ms);
    assert_eq!(ring.op_state(op), OpState::Running);
    assert_eq!(ring.running_ops(&ids[1]).len(), 1);
    assert_eq!(
        ring.missing_on(&ids[1], "ks3").len(),
        200,
        "nothing before it completes"
    );
    ring.advance(Timing::default().repair_ms * first.len() as u64);
    assert_eq!(ring.op_state(op), OpState::Ended(OpEnd::Completed));
    let left: BTreeSet<String> = ring.missing_on(&ids[1], "ks3").into_iter().collect();
    let repaired = keys_in(&ring, "ks3", first);
    assert!(
        left.iter().all(|k| !repaired.contains(k)),
        "its ranges repaired"
    );
    assert_eq!(
        left,
        keys_in(&ring, "ks3", &ring.local_ranges(&ids[1], "ks3").unwrap())
            .into_iter()
            .filter(|k| missing.contains(k) && !repaired.contains(k))
            .collect(),
        "the other ranges not"
    );
    assert!(!left.is_empty());

    // The rest of its primary ranges, then the ranges whose primary
    // replicas are the others (as their own cycles would).
    for (host, ranges) in [
        (&ids[1], rest.to_vec()),
        (&ids[0], ring.primary_ranges(&ids[0], "ks3").unwrap()),
        (&ids[2], ring.primary_ranges(&ids[2], "ks3").unwrap()),
    ] {
        let RepairStart::Started(op) = ring
            .start_repair(host, "ks3", &ranges_option(&ranges))
            .expect("starts")
        else {
            panic!("a command")
        };
        ring.advance(
            Timing::default().repair_queue_ms + Timing::default().repair_ms * ranges.len() as u64,
        );
        assert_eq!(ring.op_state(op), OpState::Ended(OpEnd::Completed));
    }
    assert!(ring.missing_on(&ids[1], "ks3").is_empty());
    assert!(
        missing
            .iter()
            .all(|k| ring.read_one_from(&ids[1], "ks3", k))
    );
    assert!(ring.check().is_clean(), "{}", ring.check());
    let commands = ring
        .maintenance_log()
        .iter()
        .filter(|op| op.operation == Maintenance::Repair)
        .count();
    assert_eq!(commands, 4);
}

/// `repairAsync`'s answers: 0 with RF 1 or with no range; a range that
/// straddles two local ranges or lies in none starts a command that fails
/// with Cassandra's words; equal ends are refused at the call; with
/// `ranges` given `primaryRange` is not looked at; without, the primary
/// ranges or every local range.
#[test]
fn repair_refusals_and_failures_are_cassandra_s() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    ring.create_keyspace("one", Replication::simple(1))
        .expect("ks");
    assert_eq!(
        ring.start_repair(&ids[0], "one", &BTreeMap::new()),
        Ok(RepairStart::Nothing)
    );
    assert_eq!(
        ring.start_repair(&ids[0], "ks3", &ranges_option(&[(5, 5)])),
        Err(RingError::RepairOption {
            message: "Start and end tokens must be different.".into()
        })
    );
    let primary = ring.primary_ranges(&ids[0], "ks3").unwrap();
    let (a, b) = primary[0];
    // Straddles the end of a local range into the next one.
    let straddling = (a, b.saturating_add(1));
    let RepairStart::Started(op) = ring
        .start_repair(&ids[0], "ks3", &ranges_option(&[straddling]))
        .unwrap()
    else {
        panic!("a command")
    };
    ring.advance(Timing::default().repair_queue_ms);
    let OpState::Ended(OpEnd::Failed(message)) = ring.op_state(op) else {
        panic!("{:?}", ring.op_state(op))
    };
    assert!(
        message.starts_with(&format!(
            "Requested range {} intersects a local range ({}) but is not fully contained in one",
            range_text(straddling),
            range_text((a, b))
        )),
        "{message}"
    );
    // ks2 (NTS 2 of 3 nodes): some range is not node 0's.
    let local = ring.local_ranges(&ids[0], "ks2").unwrap();
    let foreign = ring
        .primary_ranges(&ids[1], "ks2")
        .unwrap()
        .into_iter()
        .chain(ring.primary_ranges(&ids[2], "ks2").unwrap())
        .find(|r| !local.contains(r))
        .expect("a range node 0 does not replicate");
    let RepairStart::Started(op) = ring
        .start_repair(&ids[0], "ks2", &ranges_option(&[foreign]))
        .unwrap()
    else {
        panic!("a command")
    };
    ring.advance(Timing::default().repair_queue_ms);
    assert_eq!(
        ring.op_state(op),
        OpState::Ended(OpEnd::Failed(format!(
            "Nothing to repair for {} in ks2 - aborting",
            range_text(foreign)
        )))
    );
    // primaryRange without ranges: the primary ones; with ranges: the ranges.
    let pr: BTreeMap<String, String> = [("primaryRange".to_string(), "true".to_string())].into();
    ring.start_repair(&ids[0], "ks3", &pr).unwrap();
    let mut both = ranges_option(&primary[..1]);
    both.insert("primaryRange".into(), "true".into());
    ring.start_repair(&ids[0], "ks3", &both).unwrap();
    ring.start_repair(&ids[0], "ks3", &BTreeMap::new()).unwrap();
    let log = ring.maintenance_log();
    let n = log.len();
    assert_eq!(log[n - 3].ranges, primary);
    assert_eq!(log[n - 2].ranges, primary[..1].to_vec());
    assert_eq!(
        log[n - 1].ranges,
        ring.local_ranges(&ids[0], "ks3").unwrap()
    );
    // A neighbour down when the command runs fails it.
    ring.kill(&ids[2]).expect("kill");
    ring.advance(Timing::default().repair_ms * 1000);
    let failed = ring
        .maintenance_log()
        .iter()
        .skip(n - 3)
        .filter(|op| matches!(ring.op_state(op.id), OpState::Ended(OpEnd::Failed(_))))
        .count();
    assert_eq!(failed, 3, "{:?}", ring.maintenance_log());
}

/// A cleanup runs for its time and drops what the node gave away only
/// when it completes; killed in the middle it drops nothing (abandoned);
/// `forceTerminateAllRepairSessions` fails the running repairs, which then
/// repair nothing.
#[test]
fn cleanups_complete_in_time_and_kills_and_terminations_leave_them_undone() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    let fourth = ring.start(&config(4, &["10.0.0.1"])).expect("starts");
    ring.finish(&fourth.host_id).expect("bootstrap");
    let given_away = ring.unowned_on(&ids[0], "ks3");
    assert!(!given_away.is_empty());
    let CleanupStart::Started(op) = ring.start_cleanup(&ids[0], "ks3").unwrap() else {
        panic!("a cleanup")
    };
    assert_eq!(ring.running_ops(&ids[0])[0].operation, Maintenance::Cleanup);
    ring.kill(&ids[0]).expect("kill");
    assert_eq!(ring.op_state(op), OpState::Ended(OpEnd::Abandoned));
    assert_eq!(
        ring.unowned_on(&ids[0], "ks3"),
        given_away,
        "nothing dropped"
    );
    ring.start(&config(1, &["10.0.0.1"])).expect("restart");
    let CleanupStart::Started(op) = ring.start_cleanup(&ids[0], "ks3").unwrap() else {
        panic!("a cleanup")
    };
    ring.advance(Timing::default().cleanup_ms - 1);
    assert_eq!(ring.op_state(op), OpState::Running);
    ring.advance(1);
    assert_eq!(ring.op_state(op), OpState::Ended(OpEnd::Completed));
    assert!(ring.unowned_on(&ids[0], "ks3").is_empty());
    assert!(ring.check().is_clean());
    assert_eq!(
        ring.start_cleanup(&ids[0], "system"),
        Err(RingError::CleanupSystemKeyspace)
    );

    let RepairStart::Started(op) = ring.start_repair(&ids[1], "ks3", &BTreeMap::new()).unwrap()
    else {
        panic!("a command")
    };
    assert_eq!(ring.terminate_repairs(&ids[1]), Ok(1));
    assert_eq!(
        ring.op_state(op),
        OpState::Ended(OpEnd::Failed("Terminate session is called".into()))
    );
    assert!(ring.running_ops(&ids[1]).is_empty());
    assert_eq!(ring.terminate_repairs(&ids[1]), Ok(0));
    assert_eq!(ring.op_state(9999), OpState::Unknown);
    let _ = addr(1);
}
