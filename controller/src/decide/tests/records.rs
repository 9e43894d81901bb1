//! The decommission records the controller will not act on: a `true` it
//! never asked for, a member lost while leaving, and what one member's bad
//! record holds and lets go on.

use super::*;

/// The verdict on a `decommissioned=true` decides, never the label.
#[test]
fn a_decommissioned_true_the_controller_never_asked_for_is_taken_back() {
    use Action::*;
    let b = || "b".to_string();
    let forged = |m| label(m, "true");
    let missing_of = |action: &Action| match action {
        ClearStaleDecommission { missing, .. } => missing.clone(),
        Refuse(Refusal::StaleDecommissionRecord { missing, .. }) => missing.clone(),
        other => panic!("not a stale record: {other:?}"),
    };
    // (what, wanted members, observed, member, restore_request, missing contains)
    let cleared: Vec<(&str, i32, Observed, i32, bool, &str)> = vec![
        (
            "on the highest member of a healthy rack",
            3,
            ring_at(
                racks(3, vec![member(0), member(1), forged(member(2))]),
                LEFT,
                |_| true,
            ),
            2,
            false,
            "no decommission request",
        ),
        (
            "on a lower member",
            3,
            racks(3, vec![member(0), forged(member(1)), member(2)]),
            1,
            false,
            "no decommission request",
        ),
        (
            "with a forged confirmation and no request",
            3,
            racks(
                3,
                vec![
                    member(0),
                    member(1),
                    with(forged(member(2)), |m| {
                        m.service.as_mut().unwrap().decommission_confirmation =
                            Some(DecommissionConfirmation {
                                request: "made-up".into(),
                                host_id: None,
                                confirmed_at: ANSWERED.into(),
                                removed: None,
                            })
                    }),
                ],
            ),
            2,
            false,
            "no decommission request",
        ),
        (
            "with a request of the controller but no answer (the member not ready yet)",
            2,
            ring_at(
                racks(
                    3,
                    vec![
                        member(0),
                        member(1),
                        unready(label(asked(member(2)), "true")),
                    ],
                ),
                LEFT,
                |_| true,
            ),
            2,
            true,
            "no confirmation",
        ),
        (
            "with a confirmation that answers another request",
            2,
            ring_at(
                racks(
                    3,
                    vec![
                        member(0),
                        member(1),
                        unready(with(confirmed(member(2)), |m| {
                            let service = m.service.as_mut().unwrap();
                            service.decommission_confirmation.as_mut().unwrap().request =
                                "uid-2/2026-01-01T00:00:00Z".into();
                        })),
                    ],
                ),
                LEFT,
                |_| true,
            ),
            2,
            true,
            "answers request uid-2/2026-01-01T00:00:00Z",
        ),
        (
            "answered, but a ring recorded after the answer still counts it",
            2,
            ring_at(
                racks(3, vec![member(0), member(1), unready(confirmed(member(2)))]),
                "2026-11-27T10:03:00Z",
                |_| true,
            ),
            2,
            true,
            "the ring still counts the node",
        ),
    ];
    for (what, wanted, observed, at, restore, missing) in cleared {
        let action = decide(&spec(&[("b", wanted)]), &observed);
        assert!(
            matches!(
                &action,
                ClearStaleDecommission { rack, member, restore_request, resource_version, .. }
                    if *rack == b() && *member == at && *restore_request == restore
                        && *resource_version == format!("{}", 100 + at)
            ),
            "{what}: {action:?}"
        );
        assert!(missing_of(&action).contains(missing), "{what}: {action:?}");
    }

    // Asked and answered, the ring not recorded since: the decommission
    // is under way, nothing is taken back and nothing shrinks.
    let answered = racks(3, vec![member(0), member(1), unready(confirmed(member(2)))]);
    assert_eq!(
        decide(&spec(&[("b", 2)]), &answered),
        Wait(WaitReason::MemberLeaving {
            rack: b(),
            member: 2
        })
    );
    // The others recorded their ring before the request (the member joined
    // and left between two of their reads, and they record only changes):
    // one Ready member is asked to record it again, then it is waited for.
    let recorded_before = ring_at(answered, "2026-11-27T09:59:00Z", |i| i != 2);
    assert_eq!(
        decide(&spec(&[("b", 2)]), &recorded_before),
        RequestRingRecord {
            rack: b(),
            member: 2,
            witness_rack: b(),
            witness: 0,
        }
    );
    let mut asked_witness = recorded_before.clone();
    asked_witness
        .racks
        .get_mut("b")
        .unwrap()
        .members
        .get_mut(&0)
        .unwrap()
        .service
        .as_mut()
        .unwrap()
        .ring_record_requested = Some("2026-11-27T10:00:30Z".into());
    assert_eq!(
        decide(&spec(&[("b", 2)]), &asked_witness),
        Wait(WaitReason::MemberLeaving {
            rack: b(),
            member: 2
        })
    );
    // Its record made after the request: the ring agrees, the rack shrinks.
    assert_eq!(
        decide(
            &spec(&[("b", 2)]),
            &ring_at(asked_witness, "2026-11-27T10:00:31Z", |i| i != 2)
        ),
        ScaleDown {
            rack: b(),
            replicas: 2
        }
    );
    // A bare `false` (an older controller's): the request is written.
    assert_eq!(
        decide(
            &spec(&[("b", 2)]),
            &racks(3, vec![member(0), member(1), label(member(2), "false")])
        ),
        RequestDecommission {
            rack: b(),
            member: 2,
            resource_version: "102".into(),
            pod_uid: Some("uid-2".into()),
            host_id: None,
        }
    );
    // Above the replicas, a forged `true` deletes nothing, and a
    // re-created StatefulSet keeps the member.
    let above = racks(2, vec![member(0), member(1), gone(forged(member(2)))]);
    assert_eq!(decide(&spec(&[("b", 2)]), &above), Converged);
    assert_eq!(above.members_to_keep("b"), 3);
    // Not in the ring (its Pod not ready, no ring counts it): reported,
    // the label stays, nothing is deleted.
    let outside = ring_at(
        racks(3, vec![member(0), member(1), unready(forged(member(2)))]),
        LEFT,
        |i| i != 2,
    );
    let action = decide(&spec(&[("b", 3)]), &outside);
    assert!(
        matches!(
            &action,
            Refuse(Refusal::StaleDecommissionRecord { member: 2, .. })
        ),
        "{action:?}"
    );
    assert!(missing_of(&action).contains("no decommission request"));
}

/// What one member's record the controller will not act on holds, and
/// what goes on elsewhere (DESIGN.md section 5): replacements,
/// restarts under way and an outage's recovery go on; topology changes
/// and rolls wait.
#[test]
fn one_members_bad_record_holds_topology_changes_not_repairs() {
    use Action::*;
    let b = || "b".to_string();
    // Each refusal a member's record can raise, on member 1 of four.
    let outside = |m: MemberObserved| unready(label(m, "true"));
    let refusals: Vec<(&str, Observed, Refusal)> = vec![
        (
            "a stale true on a member outside the ring",
            ring_at(
                racks(4, vec![member(0), outside(member(1)), member(2), member(3)]),
                LEFT,
                |i| i != 1,
            ),
            Refusal::StaleDecommissionRecord {
                rack: b(),
                member: 1,
                missing: "no decommission request of the controller".into(),
            },
        ),
        (
            "an unreadable label",
            racks(
                4,
                vec![member(0), label(member(1), "maybe"), member(2), member(3)],
            ),
            Refusal::UnreadableDecommission {
                rack: b(),
                member: 1,
                value: "maybe".into(),
            },
        ),
        (
            "a confirmed decommission below the top",
            left(
                racks(
                    4,
                    vec![
                        member(0),
                        unready(confirmed(member(1))),
                        member(2),
                        member(3),
                    ],
                ),
                1,
            ),
            Refusal::DecommissionedBelowTheTop {
                rack: b(),
                member: 1,
            },
        ),
    ];
    for (what, observed, refusal) in refusals {
        // Alone: refused, nothing else.
        assert_eq!(
            decide(&spec(&[("b", 4)]), &observed),
            Refuse(refusal.clone()),
            "{what}"
        );
        // Topology changes wait: a scale-up, a scale-down.
        for members in [5, 3] {
            assert_eq!(
                decide(&spec(&[("b", members)]), &observed),
                Refuse(refusal.clone()),
                "{what}: to {members} members"
            );
        }
        // A roll waits.
        let mut roll = observed.clone();
        roll.racks.get_mut("b").unwrap().update_revision = Some("new".into());
        for i in 0..4 {
            with_member(&mut roll, i, |m| m.revision = Some("old".into()));
        }
        assert_eq!(
            decide(&spec(&[("b", 4)]), &roll),
            Refuse(refusal.clone()),
            "{what}: a roll"
        );
        // Another member's Node and disk lost: replaced.
        let mut lost = observed.clone();
        with_member(&mut lost, 3, |m| {
            m.disk_lost = true;
            m.pod_ready = false;
        });
        assert_eq!(
            decide(&spec(&[("b", 4)]), &lost),
            StartReplace {
                rack: b(),
                member: 3,
                address: "10.96.0.3".into(),
                resource_version: "103".into(),
            },
            "{what}: a lost Node"
        );
        // ... and the replace goes on to its end.
        with_member(&mut lost, 3, |m| {
            m.service.as_mut().unwrap().replace = Some("10.96.0.3".into())
        });
        assert_eq!(
            decide(&spec(&[("b", 4)]), &lost),
            DeleteLostDisk {
                rack: b(),
                member: 3,
                claims: vec!["data-c-dc-b-3".into()],
            },
            "{what}: a replace under way"
        );
        with_member(&mut lost, 3, |m| {
            m.disk_lost = false;
            m.pod_ready = true;
        });
        assert_eq!(
            decide(&spec(&[("b", 4)]), &lost),
            FinishReplace {
                rack: b(),
                member: 3
            },
            "{what}: a replace finishing"
        );
        // A full outage: every Pod gone at once; the controller waits
        // for the StatefulSet to bring them back and recreates nothing
        // it should not; a member Service lost meanwhile is recreated.
        let mut outage = observed.clone();
        for i in 0..4 {
            with_member(&mut outage, i, |m| {
                m.pod_exists = false;
                m.pod_ready = false;
            });
        }
        assert_eq!(
            decide(&spec(&[("b", 4)]), &outage),
            Refuse(refusal.clone()),
            "{what}: an outage"
        );
        with_member(&mut outage, 2, |m| m.service = None);
        assert_eq!(
            decide(&spec(&[("b", 4)]), &outage),
            CreateMemberService {
                rack: b(),
                member: 2,
                seed: false
            },
            "{what}: an outage that lost a member Service"
        );
    }
}

/// A member asked to leave loses its Node and local disk mid-stream: it
/// can neither finish nor answer. It is never replaced (that would bring a
/// leaving node back); the refusal says to removenode it and holds the
/// rest but not other replacements; once a ring recorded after the request
/// no longer counts it, the controller records the removal, and the
/// scale-down proceeds as after a decommission.
#[test]
fn a_member_lost_while_leaving_leaves_by_removenode_then_the_scale_down_finishes() {
    use Action::*;
    let b = || "b".to_string();
    let lost = |m: MemberObserved| {
        with(m, |m| {
            m.disk_lost = true;
            m.pod_exists = false;
            m.pod_ready = false;
        })
    };
    let leaving = || lost(started(asked(member(2))));
    // The ring, recorded after the request, still counts it.
    let counted = ring_at(
        racks(3, vec![member(0), member(1), leaving()]),
        LEFT,
        |_| true,
    );
    let action = decide(&spec(&[("b", 2)]), &counted);
    assert!(
        matches!(&action, Refuse(Refusal::LeavingMemberLost { rack, member: 2, .. }) if *rack == b()),
        "{action:?}"
    );
    // Another member's lost disk is still replaced meanwhile.
    let mut both = counted.clone();
    with_member(&mut both, 0, |m| {
        m.disk_lost = true;
        m.pod_ready = false;
    });
    assert_eq!(
        decide(&spec(&[("b", 2)]), &both),
        StartReplace {
            rack: b(),
            member: 0,
            address: "10.96.0.0".into(),
            resource_version: "100".into(),
        }
    );
    // Removed (removenode): a ring recorded after the request drops it.
    let removed = ring_at(racks(3, vec![member(0), member(1), leaving()]), LEFT, |i| {
        i != 2
    });
    let request = "uid-2/2026-11-27T10:00:00Z".to_string();
    assert_eq!(
        decide(&spec(&[("b", 2)]), &removed),
        RecordRemoval {
            rack: b(),
            member: 2,
            resource_version: "102".into(),
            request: request.clone(),
            host_id: None,
            claims: vec!["data-c-dc-b-2".into()],
        }
    );
    // ... whatever the spec wants now: it cannot come back.
    assert!(matches!(
        decide(&spec(&[("b", 3)]), &removed),
        RecordRemoval { member: 2, .. }
    ));
    // No ring recorded since the request: one member is asked to.
    let unrecorded = ring_at(
        racks(3, vec![member(0), member(1), leaving()]),
        "2026-11-27T09:59:00Z",
        |i| i != 2,
    );
    assert!(matches!(
        decide(&spec(&[("b", 2)]), &unrecorded),
        RequestRingRecord { member: 2, .. }
    ));
    // Recorded: the usual judgement confirms it, and the rack shrinks.
    let recorded = ring_at(
        racks(
            3,
            vec![
                member(0),
                member(1),
                with(lost(confirmed(member(2))), |m| {
                    let service = m.service.as_mut().unwrap();
                    service.decommission_confirmation.as_mut().unwrap().removed = Some(true);
                }),
            ],
        ),
        LEFT,
        |i| i != 2,
    );
    assert_eq!(
        decide(&spec(&[("b", 2)]), &recorded),
        ScaleDown {
            rack: b(),
            replicas: 2
        }
    );
}

/// A member whose Service carries a decommission record is leaving or
/// left: its lost disk is never replaced.
#[test]
fn a_member_with_a_decommission_record_is_never_replaced() {
    let stale_and_lost = ring_at(
        racks(
            3,
            vec![
                member(0),
                member(1),
                with(label(member(2), "true"), |m| {
                    m.disk_lost = true;
                    m.pod_ready = false;
                }),
            ],
        ),
        LEFT,
        |i| i != 2,
    );
    let action = decide(&spec(&[("b", 3)]), &stale_and_lost);
    assert!(
        matches!(
            &action,
            Action::Refuse(Refusal::StaleDecommissionRecord { member: 2, .. })
        ),
        "{action:?}"
    );
}
