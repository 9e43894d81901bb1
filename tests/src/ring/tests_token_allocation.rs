//! The token allocator's refusal (`allocate_tokens_for_local_replication_factor`,
//! `TokenAllocation.createStrategy` of 4.1.8 and 5.0.3): where a node picks
//! new tokens, a datacenter of more racks than one but fewer than the
//! factor is refused, counting the racks of the members that own tokens
//! and only if the node's own rack is among them.

use super::tests::{addr, join};
use super::*;

const MESSAGE_2_OF_3: &str = "Token allocation failed: the number of racks 2 in datacenter dc is lower than its replication factor 3.";

/// Node `i` of rack `rack` in datacenter `dc`, with the allocator's
/// `factor` (None: the key is absent), seeded by node 1.
fn member(i: usize, rack: &str, factor: Option<u32>) -> NodeConfig {
    let mut c = NodeConfig::new(
        "Test Cluster",
        &addr(i),
        "dc",
        rack,
        &["10.0.0.1"],
        &format!("pvc-{i}"),
    );
    c.allocate_tokens_for_local_replication_factor = factor;
    c
}

/// A ring whose rack `a` runs nodes 1 to 3 (node 1 its own seed), with
/// the allocator's `factor`.
fn rack_a_of_three(factor: Option<u32>) -> Ring {
    let mut ring = Ring::new(Options::default());
    for i in 1..=3 {
        join(&mut ring, &member(i, "a", factor));
    }
    ring
}

/// Starts `c` and expects the allocator's refusal, with nothing of the
/// node left in the ring or on record for its data directory.
fn refused(ring: &mut Ring, c: &NodeConfig) -> RingError {
    let members = ring.nodes().count();
    let err = ring.start(c).expect_err(&c.address);
    assert!(
        matches!(err, RingError::TokenAllocation { .. }),
        "{}: {err}",
        c.address
    );
    assert_eq!(
        ring.nodes().count(),
        members,
        "{}: nothing joined",
        c.address
    );
    assert!(ring.node_by_address(&c.address).is_none(), "{}", c.address);
    assert!(ring.data_dir(&c.data_dir).is_none(), "{}", c.data_dir);
    err
}

/// The thesis on real 4.1: rack `a` of 3 and the default factor 3. The
/// first node of rack `b` joins (its rack owns no token yet: one rack);
/// the second is refused with Cassandra's message at every start, and so
/// is a fourth node of rack `a` (both racks now own tokens), whether it
/// bootstraps or not. The refused node never enters the ring.
#[test]
fn the_first_node_of_a_new_rack_joins_and_the_second_is_refused() {
    let mut ring = rack_a_of_three(Some(3));
    let b1 = join(&mut ring, &member(4, "b", Some(3)));
    assert_eq!(ring.node(&b1).expect("b1").state, RingState::Normal);

    let second = member(5, "b", Some(3));
    for _ in 0..3 {
        assert_eq!(refused(&mut ring, &second).to_string(), MESSAGE_2_OF_3);
    }
    assert_eq!(
        refused(&mut ring, &member(6, "a", Some(3))),
        RingError::TokenAllocation {
            racks: 2,
            dc: "dc".into(),
            rf: 3
        }
    );
    // A node that does not bootstrap picks new tokens all the same
    // (joinTokenRing without saved tokens).
    let mut unbootstrapped = member(7, "b", Some(3));
    unbootstrapped.auto_bootstrap = false;
    assert_eq!(
        refused(&mut ring, &unbootstrapped).to_string(),
        MESSAGE_2_OF_3
    );
}

/// The racks are those of members that own tokens, down ones included
/// (the token map keeps a stopped member's tokens): rack `b`'s only node
/// stopped, a second node of `b` is still refused.
#[test]
fn a_down_member_s_rack_still_counts() {
    let mut ring = rack_a_of_three(Some(3));
    let b1 = join(&mut ring, &member(4, "b", Some(3)));
    ring.stop(&b1).expect("b1 stops");
    assert_eq!(
        refused(&mut ring, &member(5, "b", Some(3))).to_string(),
        MESSAGE_2_OF_3
    );
}

/// A bootstrapping member owns no token yet (its tokens are pending, not
/// in the topology): while rack `b`'s first node bootstraps, another node
/// of `b` that does not bootstrap still finds rack `b` absent, one rack.
#[test]
fn a_bootstrapping_member_s_rack_does_not_count() {
    let mut ring = rack_a_of_three(Some(3));
    let started = ring.start(&member(4, "b", Some(3))).expect("b1 starts");
    assert_eq!(started.mode, OperationMode::Joining);
    let mut unbootstrapped = member(5, "b", Some(3));
    unbootstrapped.auto_bootstrap = false;
    let second = ring.start(&unbootstrapped).expect("b2 starts");
    assert_eq!(second.mode, OperationMode::Normal);
}

/// One rack, however many nodes: the allocator treats it as one unit.
#[test]
fn one_rack_is_allocated_as_one() {
    let mut ring = rack_a_of_three(Some(3));
    for i in 4..=6 {
        join(&mut ring, &member(i, "a", Some(3)));
    }
    assert_eq!(ring.nodes().count(), 6);
}

/// A factor of 1 (or 0) ignores the racks: two racks of any size.
#[test]
fn a_factor_of_one_or_less_ignores_the_racks() {
    for factor in [1, 0] {
        let mut ring = rack_a_of_three(Some(factor));
        for i in 4..=5 {
            join(&mut ring, &member(i, "b", Some(factor)));
        }
        join(&mut ring, &member(6, "a", Some(factor)));
        assert_eq!(ring.nodes().count(), 6, "factor {factor}");
    }
}

/// As many racks as the factor: rack-aware, every node joins (2 racks at
/// factor 2, 3 racks at factor 3).
#[test]
fn as_many_racks_as_the_factor_join() {
    let mut ring = rack_a_of_three(Some(2));
    for i in 4..=6 {
        join(&mut ring, &member(i, "b", Some(2)));
    }
    join(&mut ring, &member(7, "a", Some(2)));

    let mut ring = Ring::new(Options::default());
    for (i, rack) in ["a", "b", "c", "a", "b", "c"].iter().enumerate() {
        join(&mut ring, &member(i + 1, rack, Some(3)));
    }
    assert_eq!(ring.nodes().count(), 6);
}

/// More racks than the factor: racks ignored, every node joins (3 racks
/// at factor 2).
#[test]
fn more_racks_than_the_factor_join() {
    let mut ring = Ring::new(Options::default());
    for (i, rack) in ["a", "b", "c", "a", "b", "c"].iter().enumerate() {
        join(&mut ring, &member(i + 1, rack, Some(2)));
    }
    assert_eq!(ring.nodes().count(), 6);
}

/// Only the node's own datacenter counts: a second datacenter of two racks
/// beside `dc`'s one rack is refused at factor 3 by its own racks, with
/// its own name.
#[test]
fn the_racks_are_those_of_the_node_s_datacenter() {
    let mut ring = rack_a_of_three(Some(3));
    let in_dc2 = |i: usize, rack: &str| {
        let mut c = member(i, rack, Some(3));
        c.dc = "dc2".into();
        c
    };
    // dc2's first racks: each is absent from dc2's topology when it starts.
    join(&mut ring, &in_dc2(4, "a"));
    join(&mut ring, &in_dc2(5, "x"));
    assert_eq!(
        refused(&mut ring, &in_dc2(6, "x")).to_string(),
        "Token allocation failed: the number of racks 2 in datacenter dc2 is lower than its replication factor 3."
    );
    // dc still has one rack.
    join(&mut ring, &member(7, "a", Some(3)));
}

/// No `allocate_tokens_for_local_replication_factor` (3.11, or a file
/// without it): random tokens, two racks of any size.
#[test]
fn without_the_key_any_racks_join() {
    let mut ring = rack_a_of_three(None);
    for i in 4..=5 {
        join(&mut ring, &member(i, "b", None));
    }
    assert_eq!(ring.nodes().count(), 5);
}

/// Only new tokens are allocated: a member that restarts keeps its saved
/// tokens, and a replacement takes the lost node's, whatever the racks.
#[test]
fn restarts_and_replacements_keep_their_tokens() {
    let mut ring = rack_a_of_three(Some(3));
    let b1 = join(&mut ring, &member(4, "b", Some(3)));
    // 2 racks now: no new node of either may join, but the members may
    // restart.
    let a3 = ring.node_by_address(&addr(3)).expect("a3").host_id.clone();
    ring.stop(&a3).expect("a3 stops");
    let restarted = ring.start(&member(3, "a", Some(3))).expect("a3 restarts");
    assert_eq!(restarted.startup, Startup::Restarted);
    ring.stop(&b1).expect("b1 stops");
    let restarted = ring.start(&member(4, "b", Some(3))).expect("b1 restarts");
    assert_eq!(restarted.startup, Startup::Restarted);

    // a3 lost with its disk: a new node at another address replaces it.
    ring.kill(&a3).expect("a3 killed");
    let mut replacement = member(8, "a", Some(3));
    replacement.replace_address_first_boot = Some(addr(3));
    let started = ring.start(&replacement).expect("the replacement starts");
    assert!(
        matches!(started.startup, Startup::Replacing { .. }),
        "{:?}",
        started.startup
    );
    ring.finish(&started.host_id)
        .expect("the replacement completes");
}
