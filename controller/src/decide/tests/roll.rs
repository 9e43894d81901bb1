//! Rolls: one member at a time, only once the ring is settled.

use super::*;

#[test]
fn roll_table() {
    use Action::*;
    let b = || "b".to_string();
    let old = |i| on(member(i), "old");
    let new = |i| on(member(i), "new");
    let rv = |i: i32| format!("{}", 100 + i);
    let cases: Vec<(&str, ClusterSpec, Observed, Action)> = vec![
        (
            "every member on the update revision: nothing to roll",
            spec(&[("b", 3)]),
            rolling(vec![new(0), new(1), new(2)]),
            Converged,
        ),
        (
            "a new template: the highest member goes first",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), old(2)]),
            RestartMember {
                rack: b(),
                member: 2,
                resource_version: rv(2),
                generation: Some(generation(2)),
            },
        ),
        (
            "recorded but still on the old template (eviction refused, or a crash before it): evict",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), restarting(old(2))]),
            EvictMember {
                rack: b(),
                member: 2,
            },
        ),
        (
            "evicted and draining: wait, never evict twice",
            spec(&[("b", 3)]),
            rolling(vec![
                old(0),
                old(1),
                restarting(with(unready(old(2)), |m| m.pod_terminating = true)),
            ]),
            Wait(WaitReason::MemberRestarting {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "its Pod is gone: wait for the StatefulSet to make it anew",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), restarting(gone(member(2)))]),
            Wait(WaitReason::MemberRestarting {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "back on the new template but not Ready yet: wait",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), restarting(unready(new(2)))]),
            Wait(WaitReason::MemberRestarting {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "back Ready on the new template: the record goes",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), restarting(new(2))]),
            FinishRestart {
                rack: b(),
                member: 2,
            },
        ),
        (
            "Ready on the new template, its record still of the start it was taken down from: wait",
            spec(&[("b", 3)]),
            rolling(vec![
                old(0),
                old(1),
                with(restarting(new(2)), |m| {
                    m.service
                        .as_mut()
                        .expect("a Service")
                        .restarted_from_generation = Some(generation(2))
                }),
            ]),
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 2,
                detail:
                    "member 2 of rack b has not recorded the gossip generation of its new start yet"
                        .into(),
            }),
        ),
        (
            "Ready without any record of its gossip: wait",
            spec(&[("b", 3)]),
            {
                let mut o = rolling(vec![old(0), old(1), restarting(new(2))]);
                let rack = o.racks.get_mut("b").expect("rack b");
                let m = rack.members.get_mut(&2).expect("member 2");
                m.service.as_mut().expect("a Service").gossip = None;
                o
            },
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 2,
                detail:
                    "member 2 of rack b has not recorded the gossip generation of its new start yet"
                        .into(),
            }),
        ),
        (
            "Ready, but another member still knows it by its old start: wait",
            spec(&[("b", 3)]),
            gossip_of(rolling(vec![old(0), old(1), restarting(new(2))]), 0, |g| {
                g.up.insert("10.96.0.2".into(), 50);
            }),
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 2,
                detail: "member 0 of rack b does not see member 2 of rack b up yet".into(),
            }),
        ),
        (
            "Ready, but not seen up within the bound: the roll stops",
            spec(&[("b", 3)]),
            gossip_of(
                rolling(vec![
                    old(0),
                    old(1),
                    with(restarting(new(2)), |m| m.restart_overdue = true),
                ]),
                1,
                |g| {
                    g.up.remove("10.96.0.2");
                    g.down.insert("10.96.0.2".into());
                },
            ),
            Refuse(Refusal::MemberRestartStuck {
                rack: b(),
                member: 2,
                since: "2026-01-01T00:00:00Z".into(),
            }),
        ),
        (
            "the next member goes only out of a settled ring",
            spec(&[("b", 3)]),
            gossip_of(rolling(vec![old(0), old(1), new(2)]), 2, |g| {
                g.up.remove("10.96.0.0");
            }),
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 1,
                detail: "member 2 of rack b does not see member 0 of rack b up yet".into(),
            }),
        ),
        (
            "then the next one down",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), new(2)]),
            RestartMember {
                rack: b(),
                member: 1,
                resource_version: rv(1),
                generation: Some(generation(1)),
            },
        ),
        (
            "right after the cluster converged, before any member recorded its gossip: wait",
            spec(&[("b", 3)]),
            {
                let mut o = rolling(vec![old(0), old(1), old(2)]);
                for m in o.racks.get_mut("b").expect("rack b").members.values_mut() {
                    m.service.as_mut().expect("a Service").gossip = None;
                }
                o
            },
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 2,
                detail: "member 0 of rack b has not recorded its gossip view yet".into(),
            }),
        ),
        (
            "one member has not recorded its gossip yet, though the others see it up: wait",
            spec(&[("b", 3)]),
            {
                let mut o = rolling(vec![old(0), old(1), old(2)]);
                let rack = o.racks.get_mut("b").expect("rack b");
                let m = rack.members.get_mut(&1).expect("member 1");
                m.service.as_mut().expect("a Service").gossip = None;
                o
            },
            Wait(WaitReason::RingNotSettled {
                rack: b(),
                member: 2,
                detail: "member 1 of rack b has not recorded its gossip view yet".into(),
            }),
        ),
        (
            "one at a time: a member not Ready holds the roll",
            spec(&[("b", 3)]),
            rolling(vec![old(0), old(1), unready(new(2))]),
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "an old member not Ready holds the roll too",
            spec(&[("b", 3)]),
            rolling(vec![unready(old(0)), old(1), new(2)]),
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 0,
            }),
        ),
        (
            "not back within the bound: the roll stops, naming the member",
            spec(&[("b", 3)]),
            rolling(vec![
                old(0),
                old(1),
                restarting(with(unready(new(2)), |m| m.restart_overdue = true)),
            ]),
            Refuse(Refusal::MemberRestartStuck {
                rack: b(),
                member: 2,
                since: "2026-01-01T00:00:00Z".into(),
            }),
        ),
        (
            "no scale-up starts while a roll is under way",
            spec(&[("b", 5)]),
            rolling(vec![old(0), old(1), new(2)]),
            RestartMember {
                rack: b(),
                member: 1,
                resource_version: rv(1),
                generation: Some(generation(1)),
            },
        ),
        (
            "no decommission starts while a roll is under way",
            spec(&[("b", 2)]),
            rolling(vec![old(0), new(1), new(2)]),
            RestartMember {
                rack: b(),
                member: 0,
                resource_version: rv(0),
                generation: Some(generation(0)),
            },
        ),
        (
            "no roll while a decommission is under way",
            spec(&[("b", 2)]),
            rolling(vec![old(0), old(1), unready(started(asked(old(2))))]),
            Wait(WaitReason::MemberLeaving {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "no roll while a member joins",
            spec(&[("b", 4)]),
            {
                let mut o = rolling(vec![old(0), old(1), old(2), unready(new(3))]);
                o.racks.get_mut("b").expect("b").replicas = Some(4);
                o
            },
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 3,
            }),
        ),
        (
            "no roll while a member is replaced",
            spec(&[("b", 3)]),
            rolling(vec![
                old(0),
                old(1),
                with(unready(new(2)), |m| {
                    m.service.as_mut().expect("a Service").replace = Some("10.96.0.2".into())
                }),
            ]),
            Wait(WaitReason::MemberReplacing {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "a StatefulSet behind the spec is applied first",
            spec(&[("b", 3)]),
            {
                let mut o = rolling(vec![new(0), new(1), new(2)]);
                o.racks.get_mut("b").expect("b").statefulset_outdated = true;
                o
            },
            UpdateStatefulSets { racks: vec![b()] },
        ),
        (
            "a StatefulSet whose controller has not seen its template yet: wait, never Converged",
            spec(&[("b", 3)]),
            {
                let mut o = rolling(vec![new(0), new(1), new(2)]);
                o.racks.get_mut("b").expect("b").status_stale = true;
                o
            },
            Wait(WaitReason::StatefulSetNotObserved { rack: b() }),
        ),
    ];
    for (name, spec, observed, expected) in cases {
        assert_eq!(decide(&spec, &observed), expected, "{name}");
    }
}

#[test]
fn a_new_version_waits_for_the_topology_change_under_way() {
    let mut spec = spec(&[("b", 3)]);
    spec.version = "5.0.3".into();
    let template = |o: &mut Observed, replicas: i32| {
        let rack = o.racks.get_mut("b").expect("b");
        rack.statefulset_outdated = true;
        rack.template_version = Version::of_tag("4.1.8");
        rack.replicas = Some(replicas);
    };
    // member 2 joins: the scale-up finishes on the old version first
    let mut joining = rolling(vec![member(0), member(1), unready(member(2))]);
    template(&mut joining, 3);
    assert_eq!(
        decide(&spec, &joining),
        Action::Wait(WaitReason::MemberNotReady {
            rack: "b".into(),
            member: 2
        })
    );
    // the next member of a scale-up still starts on the old template
    let mut growing = marked(rolling(vec![member(0), member(1)]));
    template(&mut growing, 2);
    assert!(matches!(
        decide(&spec, &growing),
        Action::CreateMemberService { member: 2, .. }
    ));
    // once the topology is settled, the new version is applied
    let mut settled = rolling(vec![member(0), member(1), member(2)]);
    template(&mut settled, 3);
    assert_eq!(
        decide(&spec, &settled),
        Action::UpdateStatefulSets {
            racks: vec!["b".into()]
        }
    );
    // another template change (not the version) is applied at once
    spec.version = "4.1.8".into();
    assert_eq!(
        decide(&spec, &joining),
        Action::UpdateStatefulSets {
            racks: vec!["b".into()]
        }
    );
}

#[test]
fn racks_roll_one_after_another_in_spec_order() {
    let rack_of = |revisions: [&str; 2]| RackObserved {
        replicas: Some(2),
        update_revision: Some("new".into()),
        members: revisions
            .iter()
            .enumerate()
            .map(|(i, r)| (i as i32, on(member(i as i32), r)))
            .collect(),
        ..RackObserved::default()
    };
    let spec = spec(&[("c", 2), ("b", 2)]);
    // Every member's gossip record shows the ring settled.
    let both = settled(observed(vec![
        ("b", rack_of(["old", "old"])),
        ("c", rack_of(["old", "old"])),
    ]));
    assert!(
        matches!(decide(&spec, &both), Action::RestartMember { ref rack, member: 1, .. } if rack == "c"),
        "the spec's first rack first"
    );
    let second = settled(observed(vec![
        ("b", rack_of(["old", "old"])),
        ("c", rack_of(["new", "new"])),
    ]));
    assert!(
        matches!(decide(&spec, &second), Action::RestartMember { ref rack, member: 1, .. } if rack == "b"),
        "then the next rack"
    );
    // A member of rack c restarting holds rack b's roll.
    let mut holding = second.clone();
    let c = holding.racks.get_mut("c").expect("c");
    let m = c.members.get_mut(&0).expect("member 0");
    *m = restarting(unready(on(member(0), "new")));
    assert_eq!(
        decide(&spec, &holding),
        Action::Wait(WaitReason::MemberRestarting {
            rack: "c".into(),
            member: 0
        })
    );
    let old_template = crate::decide::members_on_old_template(&second);
    assert_eq!(old_template, 2);
}
