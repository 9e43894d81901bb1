//! When data moves between members (the PodDisruptionBudget then holds
//! every eviction), and when a drain of a member's Node is warned of.

use super::*;
use crate::observed::{DataMoving, MemberOnDrainedNode, Movement};

/// Three ready members, each with its record of a ring the three own.
fn settled() -> Observed {
    ring_at(
        racks(3, vec![member(0), member(1), member(2)]),
        LEFT,
        |_| true,
    )
}

fn moving(member: i32, movement: Movement) -> Option<DataMoving> {
    Some(DataMoving {
        rack: "b".into(),
        member,
        movement,
    })
}

#[test]
fn a_settled_ring_moves_no_data() {
    assert_eq!(settled().data_moving(), None);
}

#[test]
fn a_member_that_has_never_been_normal_joins_when_a_ring_exists() {
    // A scale-up's member: a fresh Service, its Pod running, not Ready.
    let mut o = settled();
    o.racks
        .get_mut("b")
        .unwrap()
        .members
        .insert(3, unready(member(3)));
    assert_eq!(o.data_moving(), moving(3, Movement::Joining));

    // A new cluster's first member has no ring to stream from.
    let first = racks(1, vec![unready(member(0))]);
    assert_eq!(first.data_moving(), None);
}

#[test]
fn a_member_restarted_by_a_roll_keeps_its_data_where_it_is() {
    let mut o = settled();
    with_member(&mut o, 1, |m| m.pod_ready = false);
    assert_eq!(o.data_moving(), None, "its earlier gossip record stays");
}

#[test]
fn a_replacement_moves_data_from_its_record_until_the_record_goes() {
    let mut o = settled();
    with_member(&mut o, 2, |m| {
        m.service.as_mut().unwrap().replace = Some("10.96.0.2".into());
        m.pod_exists = false;
        m.pod_ready = false;
    });
    assert_eq!(o.data_moving(), moving(2, Movement::Replacing));
    with_member(&mut o, 2, |m| {
        m.pod_exists = true;
        m.pod_ready = true;
    });
    assert_eq!(
        o.data_moving(),
        moving(2, Movement::Replacing),
        "Ready, until the controller removes the record"
    );
    with_member(&mut o, 2, |m| m.service.as_mut().unwrap().replace = None);
    assert_eq!(o.data_moving(), None);
}

#[test]
fn a_decommission_moves_data_until_it_is_confirmed() {
    let mut o = settled();
    with_member(&mut o, 2, |m| *m = started(asked(m.clone())));
    assert_eq!(o.data_moving(), moving(2, Movement::Leaving));
    with_member(&mut o, 2, |m| *m = confirmed(m.clone()));
    assert_eq!(o.data_moving(), None, "the data has left");
}

#[test]
fn a_drain_is_warned_of_only_while_data_moves() {
    let mut o = settled();
    for i in 0..3 {
        with_member(&mut o, i, |m| m.pod_node = Some(format!("node-{i}")));
    }
    o.unschedulable_nodes.insert("node-1".into());
    assert_eq!(o.drained_while_data_moves(), None, "nothing moves");

    with_member(&mut o, 2, |m| {
        m.service.as_mut().unwrap().replace = Some("10.96.0.2".into())
    });
    assert_eq!(
        o.drained_while_data_moves(),
        Some((
            DataMoving {
                rack: "b".into(),
                member: 2,
                movement: Movement::Replacing
            },
            vec![MemberOnDrainedNode {
                rack: "b".into(),
                member: 1,
                node: "node-1".into()
            }]
        ))
    );

    o.unschedulable_nodes.clear();
    assert_eq!(o.drained_while_data_moves(), None, "no Node is cordoned");
}
