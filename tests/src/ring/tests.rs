//! The ring model's rules and the issue's Done-when scenario, at model
//! level.

use super::*;

const CLUSTER: &str = "Test Cluster";

pub(super) fn addr(i: usize) -> String {
    format!("10.0.0.{i}")
}

/// Node `i` as the sidecar renders it: its own address, rack `r{i % 3}`
/// (ordinals 1..3 spread over three racks), one data directory per
/// ordinal.
pub(super) fn config(i: usize, seeds: &[&str]) -> NodeConfig {
    let a = addr(i);
    let rack = format!("r{}", (i - 1) % 3 + 1);
    NodeConfig::new(CLUSTER, &a, "dc1", &rack, seeds, &format!("pvc-{i}"))
}

pub(super) fn versioned(mut c: NodeConfig, v: Version) -> NodeConfig {
    c.version = v;
    c
}

/// Starts a node and completes its bootstrap or replacement, if any.
pub(super) fn join(ring: &mut Ring, c: &NodeConfig) -> HostId {
    let started = ring
        .start(c)
        .unwrap_or_else(|e| panic!("{}: {e}", c.address));
    if started.mode == OperationMode::Joining {
        ring.finish(&started.host_id).expect("join completes");
    }
    started.host_id
}

/// The three-node ring of the scenario: node 1 seeds itself, 2 and 3
/// have it as their seed and bootstrap.
pub(super) fn three_nodes(v: Version) -> (Ring, Vec<HostId>) {
    let mut ring = Ring::new(Options::default());
    let seeds = ["10.0.0.1"];
    let ids = (1..=3)
        .map(|i| join(&mut ring, &versioned(config(i, &seeds), v)))
        .collect();
    (ring, ids)
}

/// Keyspaces `ks3` (SimpleStrategy 3) and `ks2` (NTS dc1: 2) with 1000
/// keys each, written at QUORUM.
pub(super) fn load(ring: &mut Ring) {
    ring.create_keyspace("ks3", Replication::simple(3))
        .expect("ks3");
    ring.create_keyspace("ks2", Replication::network_topology([("dc1", 2)]))
        .expect("ks2");
    for ks in ["ks3", "ks2"] {
        let keys = ring
            .write_keys(ks, "key-", 1000, Consistency::Quorum)
            .expect("writes");
        assert_eq!(keys.len(), 1000);
    }
}

fn statuses(ring: &Ring) -> Vec<(String, NodeStatus)> {
    ring.status(None)
        .expect("status")
        .rows
        .into_iter()
        .map(|r| (r.address, r.status))
        .collect()
}

fn copies(ring: &Ring, host: &str) -> usize {
    ring.disk_of(host).map_or(0, DataDir::copy_count)
}

/// Every key's natural replicas all hold it, and the check says so.
fn assert_fully_replicated(ring: &Ring) {
    let report = ring.check();
    assert!(report.is_clean(), "{report}");
    for ks in ["ks3", "ks2"] {
        for key in ring.keyspace(ks).expect("ks").keys.keys() {
            for h in ring.replicas(ks, key).expect("replicas") {
                assert!(
                    ring.disk_of(&h).expect("disk").holds(ks, key),
                    "{ks}.{key} on {h}"
                );
            }
        }
    }
}

fn keys_replicated_by(ring: &Ring, host: &str) -> usize {
    ["ks3", "ks2"]
        .iter()
        .map(|ks| {
            ring.keyspace(ks)
                .expect("ks")
                .keys
                .keys()
                .filter(|k| ring.replicas(ks, k).expect("r").iter().any(|h| h == host))
                .count()
        })
        .sum()
}

// ---- the Done-when scenario ----

/// The issue's Done-when list, in one ring, step after step, with the
/// clock driving every streaming operation.
#[test]
fn done_when_scenario_end_to_end() {
    let mut ring = Ring::new(Options::default());
    let seeds = ["10.0.0.1"];
    // Three nodes from rendered configs: one ring of 3 UN, check clean.
    for i in 1..=3 {
        let started = ring.start(&config(i, &seeds)).expect("starts");
        if started.mode == OperationMode::Joining {
            let done = ring.advance(2_000);
            assert_eq!(done.len(), 1);
            assert_eq!(done[0].result, Ok(()));
        }
    }
    assert!(statuses(&ring).iter().all(|(_, s)| *s == NodeStatus::UN));
    assert_eq!(ring.status(None).expect("status").rows.len(), 3);
    load(&mut ring);
    assert!(ring.check().is_clean());

    // A fourth joins by bootstrapping.
    let fourth = ring.start(&config(4, &seeds)).expect("fourth");
    assert_eq!(fourth.startup, Startup::Bootstrapping);
    assert_eq!(ring.advance(2_000)[0].result, Ok(()));
    assert_eq!(
        copies(&ring, &fourth.host_id),
        keys_replicated_by(&ring, &fourth.host_id)
    );
    assert_fully_replicated(&ring);

    // Decommissioning one moves its data; the next is refused on 4.1.
    let second = ring.node_by_address("10.0.0.2").expect("n").host_id.clone();
    ring.start_decommission(&second, false)
        .expect("decommission");
    assert_eq!(ring.advance(2_000)[0].result, Ok(()));
    ring.kill(&second).expect("stop the JVM");
    assert_eq!(statuses(&ring).len(), 3);
    assert_fully_replicated(&ring);
    assert!(matches!(
        ring.start_decommission(&fourth.host_id, false),
        Err(RingError::NotEnoughNodes {
            rf: 3,
            nodes: 3,
            ..
        })
    ));

    // Kill one, lose its disk, replace it: full replication restored.
    let third = ring.node_by_address("10.0.0.3").expect("n").host_id.clone();
    ring.wipe_data_dir("pvc-3");
    assert!(!ring.check().is_clean());
    assert!(ring.check().lost.is_empty());
    let mut replacement = config(3, &seeds);
    replacement.replace_address_first_boot = Some(addr(3));
    assert_eq!(ring.start(&replacement).expect("replaces").host_id, third);
    assert_eq!(ring.advance(2_000)[0].result, Ok(()));
    assert_fully_replicated(&ring);

    // A node started with itself as a seed is flagged by the data check.
    let rogue = ring
        .start(&config(5, &["10.0.0.5", "10.0.0.1"]))
        .expect("starts");
    let report = ring.check();
    assert!(!report.is_clean());
    assert_eq!(
        report.under_replicated.len(),
        keys_replicated_by(&ring, &rogue.host_id)
    );
    let text = report.to_string();
    for k in &report.under_replicated {
        assert!(text.contains(&format!("UNDER-REPLICATED {}.{} ", k.keyspace, k.key)));
    }
}

#[test]
fn three_nodes_form_one_ring_with_a_clean_data_check() {
    let mut ring = Ring::new(Options::default());
    let seeds = ["10.0.0.1"];
    let first = ring.start(&config(1, &seeds)).expect("seed starts");
    assert_eq!(first.startup, Startup::JoinedWithoutBootstrap);
    assert_eq!(first.mode, OperationMode::Normal);
    assert!(
        first.log.contains(
            &"This node will not auto bootstrap because it is configured to be a seed node."
                .to_string()
        )
    );
    assert_eq!(ring.cluster_name(), Some(CLUSTER));

    let second = ring.start(&config(2, &seeds)).expect("second starts");
    assert_eq!(second.startup, Startup::Bootstrapping);
    assert_eq!(
        statuses(&ring),
        [(addr(1), NodeStatus::UN), (addr(2), NodeStatus::UJ)]
    );
    // One range movement at a time.
    assert_eq!(
        ring.start(&config(3, &seeds)),
        Err(RingError::RangeMovement)
    );
    ring.finish(&second.host_id).expect("bootstrap");
    let third = ring.start(&config(3, &seeds)).expect("third starts");
    assert_eq!(third.startup, Startup::Bootstrapping);
    ring.finish(&third.host_id).expect("bootstrap");

    assert_eq!(
        statuses(&ring),
        [
            (addr(1), NodeStatus::UN),
            (addr(2), NodeStatus::UN),
            (addr(3), NodeStatus::UN)
        ]
    );
    for n in ring.nodes() {
        assert_eq!(n.mode(), Some(OperationMode::Normal));
        assert_eq!(n.tokens.len(), 16);
        assert_eq!(
            ring.data_dir(&n.data_dir).expect("dir").bootstrap,
            BootstrapState::Completed
        );
    }
    load(&mut ring);
    let report = ring.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.keys, report.keyspaces), (2000, 2));
    // RF 3 on 3 nodes: each holds every ks3 key; ks2 has 2000 copies.
    for n in ring.nodes() {
        assert_eq!(
            ring.disk_of(&n.host_id).expect("disk").copies["ks3"].len(),
            1000
        );
    }
    let ks2: usize = ring
        .nodes()
        .map(|n| ring.disk_of(&n.host_id).expect("disk").copies["ks2"].len())
        .sum();
    assert_eq!(ks2, 2000);
    assert_fully_replicated(&ring);
}

#[test]
fn a_fourth_node_bootstraps_and_receives_its_ranges() {
    let (mut ring, _) = three_nodes(Version::V4_1);
    load(&mut ring);
    let fourth = ring.start(&config(4, &["10.0.0.1"])).expect("starts");
    assert_eq!(fourth.startup, Startup::Bootstrapping);
    assert_eq!(copies(&ring, &fourth.host_id), 0);
    // A write during the join also reaches the pending replica.
    let pending_key = (0..)
        .map(|i| format!("late-{i}"))
        .find(|k| {
            let token = token_of(k.as_bytes());
            let r = Replication::simple(3);
            ring.future_map()
                .replicas(&r, token)
                .contains(&fourth.host_id)
        })
        .expect("some key lands on the new node");
    ring.write("ks3", &pending_key, Consistency::All)
        .expect("write");
    assert!(
        ring.disk_of(&fourth.host_id)
            .expect("disk")
            .holds("ks3", &pending_key)
    );

    ring.finish(&fourth.host_id).expect("bootstrap");
    assert_fully_replicated(&ring);
    let expected = keys_replicated_by(&ring, &fourth.host_id);
    assert!(expected > 0);
    // It holds exactly the keys it replicates: streamed, not invented.
    assert_eq!(copies(&ring, &fourth.host_id), expected);
    // The old replicas keep what they gave up until cleanup.
    let total: usize = ring.nodes().map(|n| copies(&ring, &n.host_id)).sum();
    assert!(total > 3 * 1001 + 2 * 1000, "{total}");
    let ids: Vec<HostId> = ring.nodes().map(|n| n.host_id.clone()).collect();
    for h in &ids {
        ring.cleanup(h).expect("cleanup");
    }
    let total: usize = ring.nodes().map(|n| copies(&ring, &n.host_id)).sum();
    assert_eq!(total, 3 * 1001 + 2 * 1000);
    assert_fully_replicated(&ring);
}

#[test]
fn decommission_moves_the_leaving_nodes_data_and_blocks_until_done() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    join(&mut ring, &config(4, &["10.0.0.1"]));
    let leaving = &ids[1];
    let held = ring.disk_of(leaving).expect("disk").clone();
    let until = ring.start_decommission(leaving, false).expect("starts");
    assert_eq!(until, DecommissionStart::Started { until_ms: 2_000 });
    assert_eq!(
        ring.node(leaving).and_then(Node::mode),
        Some(OperationMode::Leaving)
    );
    assert!(statuses(&ring).contains(&(addr(2), NodeStatus::UL)));
    // Not done before its time.
    assert!(ring.advance(1_999).is_empty());
    let done = ring.advance(1);
    assert_eq!(
        done,
        [Completion {
            host_id: leaving.clone(),
            operation: Operation::Decommission,
            result: Ok(())
        }]
    );
    let node = ring
        .node(leaving)
        .expect("still known while its process runs");
    assert_eq!(node.mode(), Some(OperationMode::Decommissioned));
    assert_eq!(node.state, RingState::Left);
    assert!(!statuses(&ring).iter().any(|(a, _)| a == &addr(2)));
    assert_eq!(
        ring.data_dir("pvc-2").expect("dir").bootstrap,
        BootstrapState::Decommissioned
    );
    assert_fully_replicated(&ring);
    // Every copy it held lives on among the new replicas.
    for (ks, keys) in &held.copies {
        if !ks.starts_with("ks") {
            continue;
        }
        for key in keys {
            let replicas = ring.replicas(ks, key).expect("replicas");
            assert!(!replicas.contains(leaving));
            assert!(
                replicas
                    .iter()
                    .all(|h| ring.disk_of(h).expect("disk").holds(ks, key))
            );
        }
    }
    // The JVM stays up until killed; then gossip forgets the member.
    ring.kill(leaving).expect("kill");
    assert!(ring.node(leaving).is_none());
}

#[test]
fn decommission_below_the_replication_factor_is_refused_from_4_0() {
    for v in [Version::V4_0, Version::V4_1, Version::V5_0] {
        let (mut ring, ids) = three_nodes(v);
        load(&mut ring);
        let err = ring
            .start_decommission(&ids[2], false)
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "Not enough live nodes to maintain replication factor in keyspace ks3 (RF = 3, N = 3). Perform a forceful decommission to ignore."
        );
        // 5.0 marks the attempt failed (a retry is allowed from there).
        let expected = if v >= Version::V5_0 {
            OperationMode::DecommissionFailed
        } else {
            OperationMode::Normal
        };
        assert_eq!(ring.node(&ids[2]).and_then(Node::mode), Some(expected));
        // force ignores it.
        assert!(matches!(
            ring.start_decommission(&ids[2], true),
            Ok(DecommissionStart::Started { .. })
        ));
    }
    // Cassandra's own system_distributed (RF 3) refuses it too, with no
    // user keyspace at all.
    let (mut ring, ids) = three_nodes(Version::V4_1);
    assert_eq!(
        ring.start_decommission(&ids[0], false),
        Err(RingError::NotEnoughNodes {
            keyspace: "system_distributed".into(),
            rf: 3,
            nodes: 3
        })
    );
    // NTS counts the nodes of the leaving node's datacenter.
    let mut ring = Ring::new(Options {
        system_keyspaces: false,
        ..Options::default()
    });
    let a = join(&mut ring, &config(1, &["10.0.0.1"]));
    let mut other_dc = config(2, &["10.0.0.1"]);
    other_dc.dc = "dc2".into();
    join(&mut ring, &other_dc);
    ring.create_keyspace(
        "nts",
        Replication::network_topology([("dc1", 1), ("dc2", 1)]),
    )
    .expect("ks");
    assert_eq!(
        ring.start_decommission(&a, false),
        Err(RingError::NotEnoughNodes {
            keyspace: "nts".into(),
            rf: 1,
            nodes: 1
        })
    );
}

#[test]
fn decommission_on_3_11_has_no_replication_check_and_leaves_keys_short() {
    let (mut ring, ids) = three_nodes(Version::V3_11);
    load(&mut ring);
    ring.start_decommission(&ids[2], false)
        .expect("no RF check on 3.11");
    assert_eq!(
        ring.start_decommission(&ids[2], false),
        Err(RingError::StillDecommissioning)
    );
    ring.finish(&ids[2]).expect("finishes");
    let report = ring.check();
    // Every ks3 key has 2 copies left for RF 3; ks2 is whole.
    assert_eq!(report.under_replicated.len(), 1000);
    assert!(report.lost.is_empty());
    assert!(
        report
            .under_replicated
            .iter()
            .all(|k| k.keyspace == "ks3" && k.live_copies == 2)
    );
}

#[test]
fn decommission_state_rules() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    // A lone node.
    let mut alone = Ring::new(Options::default());
    let only = join(&mut alone, &config(1, &["10.0.0.1"]));
    assert_eq!(
        alone.start_decommission(&only, true),
        Err(RingError::NoOtherNormalNodes)
    );
    // Not running.
    ring.kill(&ids[2]).expect("kill");
    assert_eq!(
        ring.start_decommission(&ids[2], true),
        Err(RingError::NotRunning {
            host_id: ids[2].clone()
        })
    );
    // Drained.
    ring.drain(&ids[1]).expect("drain");
    assert_eq!(
        ring.start_decommission(&ids[1], true)
            .map_err(|e| e.to_string()),
        Err("Node in DRAINED state; wait for status to become normal or restart".to_string())
    );
    // Joining.
    let joining = ring.start(&config(4, &["10.0.0.1"])).expect("starts");
    assert_eq!(
        ring.start_decommission(&joining.host_id, true),
        Err(RingError::NotAMember)
    );
}

#[test]
fn decommission_on_5_0_is_idempotent_and_retryable_after_failure() {
    let (mut ring, ids) = three_nodes(Version::V5_0);
    join(
        &mut ring,
        &versioned(config(4, &["10.0.0.1"]), Version::V5_0),
    );
    load(&mut ring);
    let leaving = ids[0].clone();
    ring.start_decommission(&leaving, false).expect("starts");
    assert_eq!(
        ring.start_decommission(&leaving, false),
        Ok(DecommissionStart::AlreadyDone)
    );
    // A new replica goes down: the stream fails.
    let target = ring
        .nodes()
        .find(|n| n.host_id != leaving)
        .map(|n| n.host_id.clone())
        .expect("other");
    ring.kill(&target).expect("kill");
    let err = ring.finish(&leaving).expect_err("stream fails");
    assert!(matches!(err, RingError::StreamTargetDown { .. }), "{err}");
    assert_eq!(
        ring.node(&leaving).and_then(Node::mode),
        Some(OperationMode::DecommissionFailed)
    );
    // Retried from DECOMMISSION_FAILED once the target is back.
    let back = ring
        .nodes()
        .find(|n| n.host_id == target)
        .expect("t")
        .clone();
    let mut c = versioned(config(1, &["10.0.0.1"]), Version::V5_0);
    c.address = back.address.clone();
    c.rack = back.rack.clone();
    c.data_dir = back.data_dir.clone();
    assert_eq!(ring.start(&c).expect("restart").startup, Startup::Restarted);
    ring.start_decommission(&leaving, false).expect("retry");
    ring.finish(&leaving).expect("done");
    assert_eq!(
        ring.start_decommission(&leaving, false),
        Ok(DecommissionStart::AlreadyDone)
    );
    assert_fully_replicated(&ring);
}

#[test]
fn a_failed_decommission_stays_leaving_before_5_0() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    join(&mut ring, &config(4, &["10.0.0.1"]));
    load(&mut ring);
    ring.start_decommission(&ids[0], false).expect("starts");
    for h in &ids[1..] {
        ring.kill(h).expect("kill");
    }
    assert!(ring.finish(&ids[0]).is_err());
    assert_eq!(
        ring.node(&ids[0]).and_then(Node::mode),
        Some(OperationMode::Leaving)
    );
    assert_eq!(
        ring.node(&ids[0]).map(|n| &n.state),
        Some(&RingState::Leaving)
    );
}

#[test]
fn a_dead_node_replaced_at_the_same_address_restores_full_replication() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    let dead = ids[2].clone();
    let old_tokens = ring.node(&dead).expect("n").tokens.clone();
    ring.wipe_data_dir("pvc-3");
    assert!(ring.node(&dead).expect("n").process.is_none());
    let report = ring.check();
    assert_eq!(
        report.under_replicated.len(),
        keys_replicated_by(&ring, &dead)
    );
    assert!(report.lost.is_empty());
    assert!(statuses(&ring).contains(&(addr(3), NodeStatus::DN)));

    // Without replace: the collision check refuses.
    assert_eq!(
        ring.start(&config(3, &["10.0.0.1"])).map_err(|e| e.to_string()),
        Err("A node with address 10.0.0.3 already exists, cancelling join. Use cassandra.replace_address if you want to replace this node.".to_string())
    );
    // With replace_address_first_boot: takes over host ID and tokens.
    let mut c = config(3, &["10.0.0.1"]);
    c.replace_address_first_boot = Some(addr(3));
    let started = ring.start(&c).expect("replacement starts");
    assert_eq!(
        started.startup,
        Startup::Replacing {
            replaced: dead.clone(),
            same_address: true
        }
    );
    assert_eq!(started.host_id, dead);
    assert!(
        started.log[0].starts_with("Writes will not be forwarded to this node during replacement")
    );
    assert_eq!(
        ring.node(&dead).and_then(Node::mode),
        Some(OperationMode::Joining)
    );
    // Hibernating: the others keep it down.
    assert!(statuses(&ring).contains(&(addr(3), NodeStatus::DN)));
    assert_eq!(ring.advance(2_000)[0].result, Ok(()));
    assert_eq!(ring.node(&dead).expect("n").tokens, old_tokens);
    assert!(statuses(&ring).contains(&(addr(3), NodeStatus::UN)));
    assert_fully_replicated(&ring);

    // The flag left set is harmless on the next restart.
    ring.kill(&dead).expect("kill");
    let again = ring.start(&c).expect("restart");
    assert_eq!(again.startup, Startup::Restarted);
    assert_eq!(
        again.log,
        ["Replace address on first boot requested; this node is already bootstrapped"]
    );
    // Plain replace_address on a bootstrapped node fails.
    ring.kill(&dead).expect("kill");
    let mut plain = config(3, &["10.0.0.1"]);
    plain.replace_address = Some(addr(3));
    assert_eq!(ring.start(&plain), Err(RingError::ReplaceBootstrapped));
}

#[test]
fn a_dead_node_replaced_from_another_address_is_removed_when_done() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    let dead = ids[1].clone();
    let tokens = ring.node(&dead).expect("n").tokens.clone();
    // Refused while it lives.
    let mut c = config(9, &["10.0.0.1"]);
    c.rack = "r2".into();
    c.replace_address_first_boot = Some(addr(2));
    assert_eq!(
        ring.start(&c).map_err(|e| e.to_string()),
        Err("Cannot replace a live node... ".to_string())
    );
    ring.kill(&dead).expect("kill");
    let started = ring.start(&c).expect("starts");
    assert_ne!(started.host_id, dead);
    assert_eq!(
        statuses(&ring),
        [
            (addr(1), NodeStatus::UN),
            (addr(2), NodeStatus::DN),
            (addr(3), NodeStatus::UN),
            (addr(9), NodeStatus::UJ)
        ]
    );
    // Writes reach the pending replacement.
    ring.write("ks3", "during", Consistency::Quorum)
        .expect("write");
    assert!(
        ring.disk_of(&started.host_id)
            .expect("d")
            .holds("ks3", "during")
    );
    ring.finish(&started.host_id).expect("replace");
    assert!(ring.node(&dead).is_none());
    assert_eq!(ring.node(&started.host_id).expect("n").tokens, tokens);
    assert_fully_replicated(&ring);
}

#[test]
fn replace_refusals() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    let mut c = config(9, &["10.0.0.1"]);
    c.replace_address_first_boot = Some("10.9.9.9".into());
    assert_eq!(
        ring.start(&c).map_err(|e| e.to_string()),
        Err("Cannot replace_address 10.9.9.9 because it doesn't exist in gossip".to_string())
    );
    // A seed does not bootstrap, so it cannot replace unless unsafe.
    ring.kill(&ids[0]).expect("kill");
    ring.wipe_data_dir("pvc-1");
    let mut seed = config(1, &["10.0.0.1", "10.0.0.2"]);
    seed.replace_address_first_boot = Some(addr(1));
    assert_eq!(ring.start(&seed), Err(RingError::UnsafeReplace));
    seed.allow_unsafe_replace = true;
    let started = ring.start(&seed).expect("unsafe replace");
    assert_eq!(
        started.startup,
        Startup::ReplacedWithoutStreaming {
            replaced: ids[0].clone()
        }
    );
    assert_eq!(started.host_id, ids[0]);
    assert_eq!(started.mode, OperationMode::Normal);
}

#[test]
fn a_node_seeding_itself_into_a_populated_ring_owns_ranges_without_data() {
    let (mut ring, _) = three_nodes(Version::V4_1);
    load(&mut ring);
    assert!(ring.check().is_clean());
    let started = ring
        .start(&config(5, &["10.0.0.1", "10.0.0.5"]))
        .expect("starts");
    assert_eq!(started.startup, Startup::JoinedWithoutBootstrap);
    assert_eq!(copies(&ring, &started.host_id), 0);
    let owned = keys_replicated_by(&ring, &started.host_id);
    assert!(owned > 0);
    let report = ring.check();
    assert_eq!(report.under_replicated.len(), owned);
    assert!(report.lost.is_empty());
    for k in &report.under_replicated {
        let r = k
            .replicas
            .iter()
            .find(|r| r.host_id == started.host_id)
            .expect("the new node is a replica of every short key");
        assert!(!r.has_copy);
        assert_eq!(k.live_copies, k.replication_factor - 1);
    }
    let text = report.to_string();
    assert!(
        text.starts_with(&format!(
            "checked 2000 keys in 2 keyspaces: {owned} under-replicated, 0 lost\n"
        )),
        "{text}"
    );
    let first = &report.under_replicated[0];
    assert!(
        text.contains(&format!(
            "UNDER-REPLICATED {}.{} (token {}): {} of {} live copies; replicas:",
            first.keyspace,
            first.key,
            first.token,
            first.replication_factor - 1,
            first.replication_factor
        )),
        "{text}"
    );
    assert!(text.contains("UN 10.0.0.5 missing"), "{text}");
    // Repair fixes it.
    ring.repair(&started.host_id).expect("repair");
    assert!(ring.check().is_clean());

    // auto_bootstrap: false has the same effect without being a seed.
    let mut c = config(6, &["10.0.0.1"]);
    c.auto_bootstrap = false;
    let started = ring.start(&c).expect("starts");
    assert_eq!(started.startup, Startup::JoinedWithoutBootstrap);
    assert!(started.log.is_empty(), "{:?}", started.log);
    let report = ring.check();
    assert_eq!(
        report.under_replicated.len(),
        keys_replicated_by(&ring, &started.host_id)
    );
    assert!(!report.is_clean());
}

// ---- startup rules ----

#[test]
fn a_non_seed_needs_a_live_seed() {
    let mut ring = Ring::new(Options::default());
    assert_eq!(
        ring.start(&config(2, &["10.0.0.1"])),
        Err(RingError::NoSeedReachable)
    );
    let seed = ring.start(&config(1, &["10.0.0.1"])).expect("seed");
    assert!(
        seed.log
            .iter()
            .any(|l| l.starts_with("Unable to gossip with any peers but continuing"))
    );
}

#[test]
fn cluster_names_must_match() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    let mut other = config(4, &["10.0.0.1"]);
    other.cluster_name = "Other".into();
    assert_eq!(
        ring.start(&other),
        Err(RingError::ClusterNameMismatch {
            ring: CLUSTER.into(),
            configured: "Other".into()
        })
    );
    // A data directory remembers its cluster.
    ring.kill(&ids[1]).expect("kill");
    let mut renamed = config(2, &["10.0.0.1"]);
    renamed.cluster_name = "Other".into();
    assert_eq!(
        ring.start(&renamed).map_err(|e| e.to_string()),
        Err("Saved cluster name Test Cluster != configured name Other".to_string())
    );
}

#[test]
fn a_decommissioned_node_does_not_rejoin_unless_overridden() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    join(&mut ring, &config(4, &["10.0.0.1"]));
    ring.start_decommission(&ids[1], true).expect("starts");
    ring.finish(&ids[1]).expect("done");
    ring.kill(&ids[1]).expect("kill");
    let mut c = config(2, &["10.0.0.1"]);
    assert_eq!(ring.start(&c), Err(RingError::Decommissioned));
    c.override_decommission = true;
    let back = ring.start(&c).expect("override");
    assert_eq!(back.startup, Startup::Restarted);
    assert_eq!(back.host_id, ids[1]);
    assert_eq!(
        back.log,
        ["This node was decommissioned, but overriding by operator request."]
    );
    // A wiped disk bootstraps again as a new node.
    ring.start_decommission(&ids[0], true)
        .expect("decommission");
    ring.finish(&ids[0]).expect("done");
    ring.kill(&ids[0]).expect("kill");
    ring.wipe_data_dir("pvc-1");
    let fresh = ring.start(&config(1, &["10.0.0.3"])).expect("bootstraps");
    assert_eq!(fresh.startup, Startup::Bootstrapping);
    assert_ne!(fresh.host_id, ids[0]);
}

#[test]
fn a_restart_keeps_host_id_and_tokens_and_replays_hints() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    let tokens = ring.node(&ids[1]).expect("n").tokens.clone();
    ring.kill(&ids[1]).expect("kill");
    ring.write("ks3", "while-down", Consistency::Quorum)
        .expect("write");
    assert!(!ring.disk_of(&ids[1]).expect("d").holds("ks3", "while-down"));
    assert_eq!(
        ring.check().under_replicated.len(),
        keys_replicated_by(&ring, &ids[1])
    );
    let back = ring.start(&config(2, &["10.0.0.1"])).expect("restart");
    assert_eq!(back.startup, Startup::Restarted);
    assert_eq!(back.host_id, ids[1]);
    assert_eq!(ring.node(&ids[1]).expect("n").tokens, tokens);
    assert!(ring.disk_of(&ids[1]).expect("d").holds("ks3", "while-down"));
    assert!(ring.check().is_clean());
    // More tokens than saved: refused.
    ring.kill(&ids[1]).expect("kill");
    let mut c = config(2, &["10.0.0.1"]);
    c.num_tokens = 256;
    assert_eq!(
        ring.start(&c).map_err(|e| e.to_string()),
        Err("Cannot change the number of tokens from 16 to 256".to_string())
    );
}

#[test]
fn no_hints_past_the_hint_window() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    load(&mut ring);
    ring.kill(&ids[1]).expect("kill");
    ring.advance(Timing::default().max_hint_window_ms + 1);
    ring.write("ks3", "late", Consistency::Quorum)
        .expect("write");
    ring.start(&config(2, &["10.0.0.1"])).expect("restart");
    let report = ring.check();
    assert_eq!(report.under_replicated.len(), 1);
    assert_eq!(report.under_replicated[0].key, "late");
    ring.repair(&ids[0]).expect("repair");
    assert!(ring.check().is_clean());
}

#[test]
fn process_and_address_clashes_are_refused() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    assert_eq!(
        ring.start(&config(2, &["10.0.0.1"])),
        Err(RingError::DataDirInUse {
            data_dir: "pvc-2".into(),
            host_id: ids[1].clone()
        })
    );
    let mut c = config(2, &["10.0.0.1"]);
    c.data_dir = "pvc-other".into();
    assert_eq!(
        ring.start(&c),
        Err(RingError::AddressInUse {
            address: addr(2),
            host_id: ids[1].clone()
        })
    );
}

#[test]
fn bootstrap_needs_the_replica_it_takes_ranges_from() {
    for (v, mode) in [
        (Version::V4_1, OperationMode::Joining),
        (Version::V5_0, OperationMode::JoiningFailed),
    ] {
        let mut ring = Ring::new(Options::default());
        let seeds = ["10.0.0.1", "10.0.0.2"];
        for i in 1..=3 {
            join(&mut ring, &versioned(config(i, &seeds), v));
        }
        ring.create_keyspace("one", Replication::simple(1))
            .expect("ks");
        ring.write_keys("one", "k", 200, Consistency::One)
            .expect("w");
        let joining = ring
            .start(&versioned(config(4, &seeds), v))
            .expect("starts");
        let third = ring.node_by_address("10.0.0.3").expect("n").host_id.clone();
        ring.kill(&third).expect("kill");
        let err = ring.finish(&joining.host_id).expect_err("fails");
        assert_eq!(
            err.to_string(),
            "A node required to move the data consistently is down (10.0.0.3). If you wish to move the data from a potentially inconsistent replica, restart the node with -Dcassandra.consistent.rangemovement=false"
        );
        assert_eq!(ring.node(&joining.host_id).and_then(Node::mode), Some(mode));
        // Killed and restarted, it retries with the same tokens.
        let tokens = ring.node(&joining.host_id).expect("n").tokens.clone();
        ring.kill(&joining.host_id).expect("kill");
        ring.start(&versioned(config(3, &seeds), v))
            .expect("third back");
        let retry = ring
            .start(&versioned(config(4, &seeds), v))
            .expect("retries");
        assert_eq!(retry.host_id, joining.host_id);
        assert_eq!(retry.log, ["Detected previous bootstrap failure; retrying"]);
        assert_eq!(ring.node(&retry.host_id).expect("n").tokens, tokens);
        ring.finish(&retry.host_id).expect("bootstraps");
        assert!(ring.check().is_clean(), "{}", ring.check());
    }
}

// ---- removenode, writes, drain, clock ----

#[test]
fn removenode_rereplicates_from_the_survivors() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    join(&mut ring, &config(4, &["10.0.0.1"]));
    ring.create_keyspace("ks3", Replication::simple(3))
        .expect("ks");
    ring.write_keys("ks3", "key-", 500, Consistency::All)
        .expect("w");
    assert_eq!(
        ring.remove_node(&ids[0], "nope"),
        Err(RingError::HostIdNotFound)
    );
    assert_eq!(
        ring.remove_node(&ids[0], &ids[0]),
        Err(RingError::RemoveSelf)
    );
    assert_eq!(
        ring.remove_node(&ids[0], &ids[1]).map_err(|e| e.to_string()),
        Err("Node /10.0.0.2 is alive and owns this ID. Use decommission command to remove it from the ring".to_string())
    );
    ring.kill(&ids[1]).expect("kill");
    ring.wipe_data_dir("pvc-2");
    assert!(!ring.check().is_clean());
    ring.remove_node(&ids[0], &ids[1]).expect("removenode");
    assert!(ring.node(&ids[1]).is_none());
    let report = ring.check();
    assert!(report.is_clean(), "{report}");
    // A joining node is no member to remove.
    let joining = ring.start(&config(5, &["10.0.0.1"])).expect("starts");
    ring.kill(&joining.host_id).expect("kill");
    assert_eq!(
        ring.remove_node(&ids[0], &joining.host_id),
        Err(RingError::RemoveNotMember)
    );
}

#[test]
fn writes_need_enough_live_replicas() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    ring.create_keyspace("ks3", Replication::simple(3))
        .expect("ks");
    ring.kill(&ids[0]).expect("kill");
    ring.write("ks3", "a", Consistency::Quorum).expect("2 of 3");
    assert_eq!(
        ring.write("ks3", "b", Consistency::All)
            .map_err(|e| e.to_string()),
        Err("Cannot achieve consistency level ALL".to_string())
    );
    ring.kill(&ids[1]).expect("kill");
    assert_eq!(
        ring.write("ks3", "c", Consistency::Quorum),
        Err(RingError::Unavailable {
            consistency: Consistency::Quorum
        })
    );
    ring.write("ks3", "d", Consistency::One).expect("1 of 3");
    assert_eq!(
        ring.write("nope", "d", Consistency::One)
            .map_err(|e| e.to_string()),
        Err("Keyspace 'nope' does not exist".to_string())
    );
    assert_eq!(
        ring.create_keyspace("ks3", Replication::simple(1))
            .map_err(|e| e.to_string()),
        Err("Cannot add already existing keyspace \"ks3\"".to_string())
    );
    // Refused writes store nothing.
    assert!(!ring.keyspace("ks3").expect("ks").keys.contains_key("c"));
}

#[test]
fn gossip_views_list_members_by_state() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    join(&mut ring, &config(4, &["10.0.0.1"]));
    let joining = ring.start(&config(5, &["10.0.0.1"])).expect("joins");
    ring.kill(&ids[1]).expect("kill");
    assert_eq!(
        ring.live_nodes(),
        ["10.0.0.1", "10.0.0.3", "10.0.0.4", "10.0.0.5"]
    );
    assert_eq!(ring.unreachable_nodes(), ["10.0.0.2"]);
    assert_eq!(ring.joining_nodes(), ["10.0.0.5"]);
    assert!(ring.leaving_nodes().is_empty());
    assert_eq!(ring.endpoint_to_host_id()["10.0.0.5"], joining.host_id);
    assert_eq!(ring.endpoint_to_host_id().len(), 5);
    // Only owners have tokens in the map: 4 members of 16.
    let tokens = ring.token_to_endpoint();
    assert_eq!(tokens.len(), 64);
    assert!(!tokens.values().any(|a| a == "10.0.0.5"));
    assert_eq!(
        ring.node_by_address("10.0.0.2").map(|n| &n.host_id),
        Some(&ids[1])
    );
    // ANY takes a hint when no replica is up.
    ring.create_keyspace("one", Replication::simple(1))
        .expect("ks");
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| ring.replicas("one", k).expect("r") == [ids[1].clone()])
        .expect("a key on the dead node");
    assert_eq!(
        ring.write("one", &key, Consistency::One),
        Err(RingError::Unavailable {
            consistency: Consistency::One
        })
    );
    ring.write("one", &key, Consistency::Any).expect("hinted");
    assert!(!ring.disk_of(&ids[1]).expect("d").holds("one", &key));
    ring.start(&config(2, &["10.0.0.1"])).expect("restart");
    assert!(ring.disk_of(&ids[1]).expect("d").holds("one", &key));
}

#[test]
fn drain_stops_gossip() {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    ring.drain(&ids[2]).expect("drain");
    assert_eq!(
        ring.node(&ids[2]).and_then(Node::mode),
        Some(OperationMode::Drained)
    );
    assert!(statuses(&ring).contains(&(addr(3), NodeStatus::DN)));
}

#[test]
fn advance_completes_operations_in_due_order() {
    let mut ring = Ring::new(Options {
        timing: Timing {
            bootstrap_ms: 500,
            decommission_ms: 300,
            ..Timing::default()
        },
        ..Options::default()
    });
    let seeds = ["10.0.0.1"];
    ring.start(&config(1, &seeds)).expect("a");
    join(&mut ring, &config(2, &seeds));
    join(&mut ring, &config(3, &seeds));
    join(&mut ring, &config(4, &seeds));
    let leaving = ring.node_by_address("10.0.0.4").expect("n").host_id.clone();
    ring.start_decommission(&leaving, false).expect("starts");
    assert!(ring.advance(299).is_empty());
    assert_eq!(ring.now_ms(), 299);
    let done = ring.advance(1);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].operation, Operation::Decommission);
    assert_eq!(
        ring.finish(&leaving),
        Err(RingError::NotInProgress {
            host_id: leaving.clone(),
            operation: "streaming operation"
        })
    );
}

// ---- views ----

/// nodetool status, plus the sim's Version column (the release each member
/// runs).
#[test]
fn status_prints_like_nodetool() {
    let mut ring = Ring::new(Options {
        system_keyspaces: false,
        ..Options::default()
    });
    let seeds = ["10.0.0.1"];
    let mut c1 = config(1, &seeds);
    c1.num_tokens = 4;
    let mut c2 = config(2, &seeds);
    c2.num_tokens = 4;
    let mut c10 = config(10, &seeds);
    c10.num_tokens = 4;
    c10.dc = "dc2".into();
    join(&mut ring, &c1);
    join(&mut ring, &c2);
    join(&mut ring, &c10);
    ring.create_keyspace(
        "ks",
        Replication::network_topology([("dc1", 2), ("dc2", 1)]),
    )
    .expect("ks");
    ring.write_keys("ks", "k", 3, Consistency::All).expect("w");
    let mut c3 = config(3, &seeds);
    c3.num_tokens = 4;
    ring.start(&c3).expect("joining");
    let table = ring.status(Some("ks")).expect("status");
    let ids: Vec<String> = table.rows.iter().map(|r| r.host_id.clone()).collect();
    let expected = format!(
        "Datacenter: dc1
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address   Load     Tokens  Owns (effective)  Host ID                               Rack  Version
UN  10.0.0.1  3 KiB    4       100.0%            {}  r1    4.1
UN  10.0.0.2  3 KiB    4       100.0%            {}  r2    4.1
UJ  10.0.0.3  0 bytes  4       ?                 {}  r3    4.1

Datacenter: dc2
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address    Load   Tokens  Owns (effective)  Host ID                               Rack  Version
UN  10.0.0.10  3 KiB  4       100.0%            {}  r1    4.1
",
        ids[0], ids[1], ids[2], ids[3]
    );
    assert_eq!(table.to_string(), expected);
    // Raw ownership without a keyspace when user keyspaces differ.
    ring.create_keyspace("other", Replication::simple(1))
        .expect("ks");
    let raw = ring.status(None).expect("status");
    assert!(!raw.effective);
    let total: f64 = raw.rows.iter().filter_map(|r| r.owns).sum();
    assert!((total - 1.0).abs() < 1e-9);
    assert!(raw.to_string().ends_with(
        "\nNote: Non-system keyspaces don't have the same replication settings, effective ownership information is meaningless\n"
    ));
    assert_eq!(
        ring.status(Some("nope")),
        Err(RingError::UnknownKeyspace {
            keyspace: "nope".into()
        })
    );
}

#[test]
fn the_snapshot_serializes_the_whole_state() {
    let (mut ring, ids) = three_nodes(Version::V5_0);
    load(&mut ring);
    ring.kill(&ids[0]).expect("kill");
    let json = serde_json::to_value(&ring).expect("json");
    assert_eq!(json["cluster_name"], CLUSTER);
    let nodes = json["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    let dead = nodes
        .iter()
        .find(|n| n["host_id"] == ids[0].as_str())
        .expect("dead");
    assert_eq!(dead["status"], "DN");
    assert_eq!(dead["up"], false);
    assert_eq!(dead["operation_mode"], serde_json::Value::Null);
    assert_eq!(dead["state"], "normal");
    assert_eq!(dead["version"], "5.0");
    assert_eq!(dead["tokens"].as_array().expect("tokens").len(), 16);
    let live = nodes
        .iter()
        .find(|n| n["host_id"] == ids[1].as_str())
        .expect("live");
    assert_eq!(live["operation_mode"], "NORMAL");
    assert_eq!(json["data_dirs"][0]["bootstrap"], "COMPLETED");
    assert_eq!(json["data_dirs"][0]["copies"]["ks3"], 1000);
    let ks3 = json["keyspaces"]
        .as_array()
        .expect("ks")
        .iter()
        .find(|k| k["name"] == "ks3")
        .expect("ks3");
    assert_eq!(ks3["replication"]["class"], "SimpleStrategy");
    assert_eq!(ks3["replication"]["replication_factor"], 3);
    assert_eq!(ks3["keys"], 1000);
    assert_eq!(json["status"]["rows"][0]["status"], "DN");
    let short = json["check"]["under_replicated"].as_array().expect("short");
    assert_eq!(short.len(), ring.check().under_replicated.len());
    assert!(!short.is_empty());
    assert_eq!(
        short[0]["live_copies"].as_u64().expect("n") + 1,
        short[0]["replication_factor"].as_u64().expect("rf")
    );
}

#[test]
fn versions_parse_from_release_strings() {
    assert_eq!(Version::parse("4.1.8"), Some(Version::V4_1));
    assert_eq!(Version::parse("5.0-beta1"), Some(Version::V5_0));
    assert_eq!(Version::parse("3.11.20-SNAPSHOT"), Some(Version::V3_11));
    assert_eq!(Version::parse("x"), None);
    assert!(Version::V3_11 < Version::V4_0);
    assert_eq!(
        OperationMode::DecommissionFailed.to_string(),
        "DECOMMISSION_FAILED"
    );
}

#[test]
fn scenarios_are_deterministic() {
    let (a, _) = three_nodes(Version::V4_1);
    let (b, _) = three_nodes(Version::V4_1);
    assert_eq!(
        serde_json::to_string(&a).expect("a"),
        serde_json::to_string(&b).expect("b")
    );
}
