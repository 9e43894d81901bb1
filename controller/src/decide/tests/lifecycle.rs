//! Scale-down, replace and the decommission records: the safety rules of
//! DESIGN.md section 5, one named case per row.

use super::*;

#[test]
fn lifecycle_table() {
    use Action::*;
    let b = || "b".to_string();
    let cases: Vec<(&str, i32, Observed, Action)> = vec![
        (
            "scale down: the highest member is asked to leave",
            1,
            racks(3, vec![member(0), member(1), member(2)]),
            RequestDecommission {
                rack: b(),
                member: 2,
                resource_version: "102".into(),
                pod_uid: Some("uid-2".into()),
                host_id: None,
            },
        ),
        (
            "while it leaves, nothing else starts",
            1,
            racks(
                3,
                vec![member(0), member(1), unready(started(asked(member(2))))],
            ),
            Wait(WaitReason::MemberLeaving {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "a confirmed decommission shrinks the StatefulSet past it",
            1,
            left(
                racks(
                    3,
                    vec![member(0), member(1), unready(started(confirmed(member(2))))],
                ),
                2,
            ),
            ScaleDown {
                rack: b(),
                replicas: 2,
            },
        ),
        (
            "its Pod still terminating: its identity stays",
            1,
            left(
                racks(2, vec![member(0), member(1), unready(confirmed(member(2)))]),
                2,
            ),
            Wait(WaitReason::MemberLeaving {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "Pod gone: its claims and Service are deleted",
            1,
            left(
                racks(2, vec![member(0), member(1), gone(confirmed(member(2)))]),
                2,
            ),
            DeleteLeftovers {
                rack: b(),
                member: 2,
                claims: vec!["data-c-dc-b-2".into()],
            },
        ),
        (
            "then the next member, one at a time",
            1,
            racks(2, vec![member(0), member(1)]),
            RequestDecommission {
                rack: b(),
                member: 1,
                resource_version: "101".into(),
                pod_uid: Some("uid-1".into()),
                host_id: None,
            },
        ),
        (
            "above the replicas without a confirmation: nothing is deleted",
            2,
            racks(2, vec![member(0), member(1), gone(asked(member(2)))]),
            Converged,
        ),
        (
            "above the replicas with no label at all: nothing is deleted",
            2,
            racks(2, vec![member(0), member(1), gone(member(2))]),
            Converged,
        ),
        (
            "a Pod above the cached replicas that never confirmed: the rack is not settled",
            2,
            racks(2, vec![member(0), member(1), member(2)]),
            Wait(WaitReason::StatefulSetNotObserved { rack: b() }),
        ),
        (
            "... and no decommission starts below it",
            1,
            racks(2, vec![member(0), member(1), unready(member(2))]),
            Wait(WaitReason::StatefulSetNotObserved { rack: b() }),
        ),
        (
            "a confirmation below the top never shrinks the StatefulSet",
            1,
            left(
                racks(3, vec![member(0), unready(confirmed(member(1))), member(2)]),
                1,
            ),
            Refuse(Refusal::DecommissionedBelowTheTop {
                rack: b(),
                member: 1,
            }),
        ),
        (
            "an unreadable label: neither side acts",
            1,
            racks(3, vec![member(0), member(1), label(member(2), "yes")]),
            Refuse(Refusal::UnreadableDecommission {
                rack: b(),
                member: 2,
                value: "yes".into(),
            }),
        ),
        (
            "a stale request on a wanted member, unclaimed: withdrawn, guarded",
            3,
            racks(3, vec![member(0), member(1), asked(member(2))]),
            WithdrawDecommission {
                rack: b(),
                member: 2,
                resource_version: "102".into(),
            },
        ),
        (
            "unclaimed but not ready (LEAVING already?): never withdrawn, finished first",
            3,
            racks(3, vec![member(0), member(1), unready(asked(member(2)))]),
            Wait(WaitReason::DecommissionBeforeScaleUp {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "raised back while the sidecar has claimed it: finished first",
            3,
            racks(
                3,
                vec![member(0), member(1), unready(started(asked(member(2))))],
            ),
            Wait(WaitReason::DecommissionBeforeScaleUp {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "a scale-up waits for a decommission under way in another rack's place",
            4,
            racks(
                3,
                vec![member(0), member(1), unready(started(asked(member(2))))],
            ),
            Wait(WaitReason::DecommissionBeforeScaleUp {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "finished while raised back: the member is removed, then made anew",
            3,
            left(
                racks(
                    3,
                    vec![member(0), member(1), unready(started(confirmed(member(2))))],
                ),
                2,
            ),
            ScaleDown {
                rack: b(),
                replicas: 2,
            },
        ),
        (
            "refused: nothing is removed, the refusal is reported",
            2,
            racks(
                3,
                vec![
                    member(0),
                    member(1),
                    refused(started(asked(member(2))), "Not enough live nodes"),
                ],
            ),
            Refuse(Refusal::DecommissionRefused {
                rack: b(),
                member: 2,
                reason: "Not enough live nodes".into(),
            }),
        ),
        (
            "refused, then raised back: withdrawn",
            3,
            racks(
                3,
                vec![
                    member(0),
                    member(1),
                    refused(started(asked(member(2))), "Not enough live nodes"),
                ],
            ),
            WithdrawDecommission {
                rack: b(),
                member: 2,
                resource_version: "102".into(),
            },
        ),
        (
            "nothing starts while a member is not ready",
            1,
            racks(3, vec![member(0), unready(member(1)), member(2)]),
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 1,
            }),
        ),
        (
            "nothing starts while members run different majors",
            1,
            racks(
                3,
                vec![
                    member(0),
                    member(1),
                    with(member(2), |m| m.pod_major = Some(5)),
                ],
            ),
            Wait(WaitReason::MixedMajorVersions { majors: vec![4, 5] }),
        ),
        (
            "mixed majors and nothing to change: converged",
            3,
            racks(
                3,
                vec![
                    member(0),
                    member(1),
                    with(member(2), |m| m.pod_major = Some(5)),
                ],
            ),
            Converged,
        ),
        (
            "a lost disk: the replace is recorded with the member's address",
            3,
            racks(
                3,
                vec![
                    member(0),
                    unready(with(member(1), |m| m.disk_lost = true)),
                    member(2),
                ],
            ),
            StartReplace {
                rack: b(),
                member: 1,
                address: "10.96.0.1".into(),
                resource_version: "101".into(),
            },
        ),
        (
            "recorded: the lost claims go, then the Pod",
            3,
            racks(
                3,
                vec![
                    member(0),
                    unready(with(member(1), |m| {
                        m.disk_lost = true;
                        m.service.as_mut().unwrap().replace = Some("10.96.0.1".into())
                    })),
                    member(2),
                ],
            ),
            DeleteLostDisk {
                rack: b(),
                member: 1,
                claims: vec!["data-c-dc-b-1".into()],
            },
        ),
        (
            "a new disk, not ready yet: wait",
            3,
            racks(
                3,
                vec![
                    member(0),
                    unready(with(member(1), |m| {
                        m.service.as_mut().unwrap().replace = Some("10.96.0.1".into())
                    })),
                    member(2),
                ],
            ),
            Wait(WaitReason::MemberReplacing {
                rack: b(),
                member: 1,
            }),
        ),
        (
            "replaced and ready: the record is cleared",
            3,
            racks(
                3,
                vec![
                    member(0),
                    with(member(1), |m| {
                        m.service.as_mut().unwrap().replace = Some("10.96.0.1".into())
                    }),
                    member(2),
                ],
            ),
            FinishReplace {
                rack: b(),
                member: 1,
            },
        ),
        (
            "a lost disk waits while another member is not ready",
            3,
            racks(
                3,
                vec![
                    unready(member(0)),
                    unready(with(member(1), |m| m.disk_lost = true)),
                    member(2),
                ],
            ),
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 0,
            }),
        ),
        (
            "two lost disks: one replace at a time, no deadlock",
            3,
            racks(
                3,
                vec![
                    member(0),
                    unready(with(member(1), |m| m.disk_lost = true)),
                    unready(with(member(2), |m| m.disk_lost = true)),
                ],
            ),
            StartReplace {
                rack: b(),
                member: 1,
                address: "10.96.0.1".into(),
                resource_version: "101".into(),
            },
        ),
        (
            "a lost disk waits while another member leaves",
            2,
            racks(
                3,
                vec![
                    unready(with(member(0), |m| m.disk_lost = true)),
                    member(1),
                    unready(started(asked(member(2)))),
                ],
            ),
            Wait(WaitReason::MemberLeaving {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "the sidecar asks for a replace (empty disk, surviving Node)",
            3,
            racks(
                3,
                vec![
                    member(0),
                    unready(with(member(1), |m| {
                        m.service.as_mut().unwrap().replace_requested = Some("empty".into())
                    })),
                    member(2),
                ],
            ),
            StartReplace {
                rack: b(),
                member: 1,
                address: "10.96.0.1".into(),
                resource_version: "101".into(),
            },
        ),
        (
            "a ready member's stale replace request is ignored",
            3,
            racks(
                3,
                vec![
                    member(0),
                    with(member(1), |m| {
                        m.service.as_mut().unwrap().replace_requested = Some("empty".into())
                    }),
                    member(2),
                ],
            ),
            Converged,
        ),
    ];
    for (what, wanted, observed, expected) in cases {
        assert_eq!(
            decide(&spec(&[("b", wanted)]), &observed),
            expected,
            "{what}"
        );
    }
}

#[test]
fn a_recreated_statefulset_keeps_the_members_that_exist() {
    // `kubectl delete sts --cascade=orphan`: Pods, Services and claims
    // remain; a StatefulSet at 0 would adopt the Pods and delete them.
    let mut seen = racks(3, vec![member(0), member(1), member(2)]);
    seen.racks.get_mut("b").unwrap().replicas = None;
    assert_eq!(
        decide(&spec(&[("b", 3)]), &seen),
        Action::CreateStatefulSets {
            racks: vec![("b".into(), 3)]
        }
    );
    // Claims alone count (Pods gone too); a confirmed leftover does not.
    let mut seen = racks(
        3,
        vec![
            gone(member(0)),
            with(gone(member(1)), |m| m.service = None),
            gone(confirmed(member(2))),
        ],
    );
    seen = left(seen, 2);
    seen.racks.get_mut("b").unwrap().replicas = None;
    assert_eq!(
        decide(&spec(&[("b", 1)]), &seen),
        Action::CreateStatefulSets {
            racks: vec![("b".into(), 2)]
        }
    );
}
