//! The decision table (one named case per row) and the guards: what stands
//! in the way of every step.

use super::*;

#[test]
fn decision_table() {
    use Action::*;
    let b = || "b".to_string();
    let cases: Vec<(&str, ClusterSpec, Observed, Action)> = vec![
        (
            "new cluster: create every rack's StatefulSet",
            spec(&[("b", 3), ("c", 2)]),
            observed(vec![]),
            CreateStatefulSets {
                racks: vec![("b".into(), 0), ("c".into(), 0)],
            },
        ),
        (
            "a rack added later gets its StatefulSet",
            spec(&[("b", 3), ("c", 2)]),
            observed(vec![("b", rack(Some(3), &[READY, READY, READY]))]),
            CreateStatefulSets {
                racks: vec![("c".into(), 0)],
            },
        ),
        (
            "first member: its seed Service comes before the Pod",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(0), &[]))]),
            CreateMemberService {
                rack: b(),
                member: 0,
                seed: true,
            },
        ),
        (
            "then the StatefulSet grows by one",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(0), &[SERVICE_ONLY]))]),
            ScaleUp {
                rack: b(),
                replicas: 1,
            },
        ),
        (
            "a member that is not ready holds everything",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(1), &[STARTING]))]),
            Wait(WaitReason::MemberNotReady {
                rack: b(),
                member: 0,
            }),
        ),
        (
            "before the second member, the first is marked for a cleanup: it will give ranges away",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(1), &[READY]))]),
            MarkCleanupDue {
                members: vec![(b(), 0, "100".into())],
            },
        ),
        (
            "second member is a seed too",
            spec(&[("b", 3)]),
            marked(observed(vec![("b", rack(Some(1), &[READY]))])),
            CreateMemberService {
                rack: b(),
                member: 1,
                seed: true,
            },
        ),
        (
            "third member is not a seed",
            spec(&[("b", 3)]),
            marked(observed(vec![("b", rack(Some(2), &[READY, READY]))])),
            CreateMemberService {
                rack: b(),
                member: 2,
                seed: false,
            },
        ),
        (
            "scale up the third",
            spec(&[("b", 3)]),
            marked(observed(vec![(
                "b",
                rack(Some(2), &[READY, READY, SERVICE_ONLY]),
            )])),
            ScaleUp {
                rack: b(),
                replicas: 3,
            },
        ),
        (
            "all ready: converged",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(3), &[READY, READY, READY]))]),
            Converged,
        ),
        (
            "racks fill in spec order, one member at a time",
            spec(&[("b", 1), ("c", 2)]),
            marked(observed(vec![
                ("b", rack(Some(1), &[READY])),
                ("c", rack(Some(1), &[READY, SERVICE_ONLY])),
            ])),
            ScaleUp {
                rack: "c".into(),
                replicas: 2,
            },
        ),
        (
            "a not-ready member of another rack holds a scale-up",
            spec(&[("b", 2), ("c", 2)]),
            observed(vec![
                ("b", rack(Some(1), &[READY])),
                ("c", rack(Some(1), &[STARTING])),
            ]),
            Wait(WaitReason::MemberNotReady {
                rack: "c".into(),
                member: 0,
            }),
        ),
        (
            "a lost member Service is recreated first",
            spec(&[("b", 3)]),
            observed(vec![(
                "b",
                rack(Some(2), &[READY, (false, true, None, None)]),
            )]),
            CreateMemberService {
                rack: b(),
                member: 1,
                seed: true,
            },
        ),
        (
            "a leaving member holds everything",
            spec(&[("b", 2), ("c", 1)]),
            observed(vec![
                ("b", {
                    let mut leaving =
                        rack(Some(3), &[READY, READY, (true, true, Some("false"), None)]);
                    let member = leaving.members.get_mut(&2).unwrap();
                    member.service.as_mut().unwrap().decommission_request =
                        Some(DecommissionRequest::default());
                    leaving
                }),
                ("c", rack(Some(0), &[])),
            ]),
            Wait(WaitReason::MemberLeaving {
                rack: b(),
                member: 2,
            }),
        ),
        (
            "a member being replaced holds everything",
            spec(&[("b", 3)]),
            observed(vec![(
                "b",
                rack(Some(2), &[READY, (true, false, None, Some("10.0.0.1"))]),
            )]),
            Wait(WaitReason::MemberReplacing {
                rack: b(),
                member: 1,
            }),
        ),
        (
            "fewer members wanted: the highest member is asked to leave",
            spec(&[("b", 2)]),
            observed(vec![("b", rack(Some(3), &[READY, READY, READY]))]),
            RequestDecommission {
                rack: b(),
                member: 2,
                resource_version: "102".into(),
                pod_uid: None,
                host_id: None,
            },
        ),
        (
            "a rack removed while it runs members: refused",
            spec(&[("b", 1)]),
            observed(vec![
                ("b", rack(Some(1), &[READY])),
                ("gone", rack(Some(2), &[READY, READY])),
            ]),
            Refuse(Refusal::RackRemovedWithMembers {
                rack: "gone".into(),
                members: 2,
            }),
        ),
        (
            "a removed rack already at 0 members is no obstacle",
            spec(&[("b", 1)]),
            observed(vec![
                ("b", rack(Some(1), &[READY])),
                ("gone", rack(Some(0), &[])),
            ]),
            Converged,
        ),
        (
            "zero members wanted in a new rack: its StatefulSet exists, nothing else",
            spec(&[("b", 0)]),
            observed(vec![("b", rack(Some(0), &[]))]),
            Converged,
        ),
    ];
    for (what, spec, observed, expected) in cases {
        assert_eq!(decide(&spec, &observed), expected, "{what}");
    }
}

#[test]
fn a_renamed_datacenter_is_refused() {
    let mut seen = observed(vec![]);
    seen.other_datacenters.push("old-dc".into());
    assert_eq!(
        decide(&spec(&[("b", 3)]), &seen),
        Action::Refuse(Refusal::DatacenterChanged {
            running: "old-dc".into(),
            spec: "dc".into()
        })
    );
}

#[test]
fn foreign_objects_stop_everything() {
    let mut seen = observed(vec![]);
    seen.foreign.push(ForeignObject {
        kind: "StatefulSet".into(),
        name: "c-dc-b".into(),
    });
    assert_eq!(
        decide(&spec(&[("b", 3)]), &seen),
        Action::Refuse(Refusal::ForeignObject(ForeignObject {
            kind: "StatefulSet".into(),
            name: "c-dc-b".into()
        }))
    );
}

#[test]
fn a_supporting_objects_name_in_the_way_stops_everything_first() {
    let mut seen = observed(vec![]);
    // A foreign StatefulSet found in the caches comes second.
    seen.foreign.push(ForeignObject {
        kind: "StatefulSet".into(),
        name: "c-dc-b".into(),
    });
    seen.supporting_in_the_way = Some(crate::observed::InTheWay::InsufficientRbac {
        kind: "Role".into(),
        name: "c-member".into(),
        missing: "get services".into(),
    });
    assert_eq!(
        decide(&spec(&[("b", 3)]), &seen),
        Action::Refuse(Refusal::MemberRbacInsufficient {
            kind: "Role".into(),
            name: "c-member".into(),
            missing: "get services".into(),
        })
    );
    let client = ForeignObject {
        kind: "Service".into(),
        name: "c-client".into(),
    };
    seen.supporting_in_the_way = Some(crate::observed::InTheWay::Foreign(client.clone()));
    assert_eq!(
        decide(&spec(&[("b", 3)]), &seen),
        Action::Refuse(Refusal::ForeignObject(client))
    );
}

#[test]
fn image_majors() {
    assert_eq!(image_major("cassandra:4.1.8"), Some(4));
    assert_eq!(image_major("cassandra:3.11.6"), Some(3));
    assert_eq!(image_major("my.reg:5000/db/cassandra:5.0-jammy"), Some(5));
    assert_eq!(image_major("cassandra:latest"), None);
    assert_eq!(image_major("cassandra"), None);
    assert_eq!(image_major("my.reg:5000/cassandra@sha256:abc"), None);
}

#[test]
fn a_version_cassandra_cannot_upgrade_to_is_refused_and_nothing_moves() {
    let running = |tag: &str| {
        let mut observed = racks(3, (0..3).map(member).collect());
        for m in observed.racks.get_mut("b").unwrap().members.values_mut() {
            m.pod_version = Version::of_tag(tag);
        }
        observed
    };
    let with_version = |version: &str| {
        let mut s = spec(&[("b", 2)]);
        s.version = version.into();
        s
    };
    // a scale-down is due, but the version change comes first
    let refused = |from: &str, to: &str| match decide(&with_version(to), &running(from)) {
        Action::Refuse(Refusal::VersionChangeRefused { running, spec, .. }) => (running, spec),
        other => panic!("{from} -> {to}: {other:?}"),
    };
    assert_eq!(refused("3.11.6", "5.0.3"), ("3.11".into(), "5.0.3".into()));
    assert_eq!(refused("5.0.3", "4.1.8"), ("5.0".into(), "4.1.8".into()));
    assert_eq!(refused("4.1.8", "4.0.13"), ("4.1".into(), "4.0.13".into()));
    for (from, to) in [("4.1.3", "4.1.8"), ("4.1.8", "5.0.3"), ("3.11.6", "4.1.8")] {
        assert!(
            !matches!(decide(&with_version(to), &running(from)), Action::Refuse(_)),
            "{from} -> {to}"
        );
    }
    // the template counts as running: two quick edits cannot skip 4.x
    let mut observed = running("4.1.8");
    observed.racks.get_mut("b").unwrap().template_version = Version::of_tag("3.11.6");
    assert!(matches!(
        decide(&with_version("5.0.3"), &observed),
        Action::Refuse(Refusal::VersionChangeRefused { .. })
    ));
    // ScyllaDB's versions are not judged by Cassandra's rules
    let mut scylla = with_version("5.0.3");
    scylla.mode = ClusterMode::Scylla;
    assert!(!matches!(
        decide(&scylla, &running("2025.1.0")),
        Action::Refuse(_)
    ));
}

#[test]
fn a_storage_change_on_a_running_rack_is_refused_and_names_the_field() {
    let claim = |size: &str, class: Option<&str>| {
        serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
            serde_json::json!({
                "metadata": {"name": "data"},
                "spec": {
                    "storageClassName": class,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": size}}
                }
            }),
        )
        .unwrap()
    };
    let mut observed = racks(3, (0..3).map(member).collect());
    observed.racks.get_mut("b").unwrap().claim_templates =
        Some(vec![ClaimTemplate::of(&claim("10Gi", Some("local-disks")))]);
    let with_storage = |claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>| {
        let mut s = spec(&[("b", 3)]);
        s.datacenter.racks[0].storage.volume_claim_templates = claims;
        s
    };
    let refused = |claims| match decide(&with_storage(claims), &observed) {
        Action::Refuse(Refusal::SpecChangeUnsupported { field, detail }) => (field, detail),
        other => panic!("{other:?}"),
    };
    let (field, detail) = refused(vec![claim("20Gi", Some("local-disks"))]);
    assert_eq!(
        field,
        "spec.datacenter.racks[0].storage.volumeClaimTemplates"
    );
    assert!(detail.contains("10737418240 bytes"), "{detail}");
    assert!(detail.contains("21474836480 bytes"), "{detail}");
    refused(vec![claim("10Gi", Some("standard-rwo"))]);
    refused(vec![]);
    // the same size written otherwise, and the class left to the
    // default, are no change
    for same in [
        vec![claim("10240Mi", Some("local-disks"))],
        vec![claim("10Gi", None)],
    ] {
        assert_eq!(decide(&with_storage(same), &observed), Action::Converged);
    }
}

/// A rack whose overrides set a refused key: nothing that would start a
/// member happens (no StatefulSet, no Service, no scale-up), in any rack.
#[test]
fn refused_overrides_hold_every_topology_change() {
    let refused = || {
        BTreeMap::from([(
            "b".to_string(),
            RefusedOverrides {
                config_map: "tuning".into(),
                file: "cassandra.yaml",
                keys: vec![crds::overrides::refused("auto_bootstrap").unwrap()],
            },
        )])
    };
    let expected = Action::Refuse(Refusal::OverridesRefused {
        rack: "b".into(),
        overrides: refused().remove("b").unwrap(),
    });
    for (what, spec, mut observed) in [
        ("new cluster", spec(&[("b", 3)]), observed(vec![])),
        (
            "scale-up of a running rack",
            spec(&[("b", 3)]),
            observed(vec![("b", rack(Some(1), &[READY]))]),
        ),
        (
            "another rack's scale-up",
            spec(&[("b", 1), ("c", 2)]),
            observed(vec![
                ("b", rack(Some(1), &[READY])),
                ("c", rack(Some(1), &[READY])),
            ]),
        ),
    ] {
        observed.refused_overrides = refused();
        assert_eq!(decide(&spec, &observed), expected, "{what}");
        observed.refused_overrides.clear();
        assert!(
            !matches!(decide(&spec, &observed), Action::Refuse(_)),
            "{what}: fixed overrides go on"
        );
    }
}

#[test]
fn a_refused_version_change_writes_no_statefulset() {
    let mut spec = spec(&[("b", 3)]);
    spec.version = "5.0.3".into();
    let mut o = rolling(vec![member(0), member(1), member(2)]);
    let rack = o.racks.get_mut("b").expect("b");
    rack.statefulset_outdated = true;
    rack.template_version = Version::of_tag("3.11.6");
    assert!(matches!(
        decide(&spec, &o),
        Action::Refuse(Refusal::VersionChangeRefused { .. })
    ));
    // a downgrade across minors
    spec.version = "3.0.0".into();
    assert!(matches!(
        decide(&spec, &o),
        Action::Refuse(Refusal::VersionChangeRefused { .. })
    ));
}

#[test]
fn a_scale_up_goes_on_once_its_member_service_is_created_and_nothing_else() {
    let spec = spec(&[("b", 4)]);
    let mut growing = marked(rolling(vec![member(0), member(1)]));
    let Action::CreateMemberService {
        rack, member: next, ..
    } = decide(&spec, &growing)
    else {
        panic!("a scale-up starts with the member Service");
    };
    assert_eq!(
        after_member_service_created(&spec, &mut growing, &rack, next),
        Some(Action::ScaleUp {
            rack: "b".into(),
            replicas: 3
        })
    );
    assert!(growing.racks["b"].members[&2].service.is_some());
    // A running member's Service, re-created: whatever comes next waits
    // for its own reconcile.
    let mut repaired = rolling(vec![member(0), with(member(1), |m| m.service = None)]);
    assert!(matches!(
        decide(&spec, &repaired),
        Action::CreateMemberService { member: 1, .. }
    ));
    assert_eq!(
        after_member_service_created(&spec, &mut repaired, "b", 1),
        None
    );
    // A rack that is not observed: nothing.
    assert_eq!(
        after_member_service_created(&spec, &mut growing, "z", 0),
        None
    );
}

/// Cassandra 4.0 and later allocate a new node's tokens for a replication
/// factor (3 by default) and refuse to in a datacenter of more than one
/// rack but fewer racks than that factor: a spec that would bootstrap a
/// member there is refused, naming the rack; with one rack, three racks,
/// a factor of 2 in the overrides, 3.11, or no member to bootstrap, it
/// goes on.
#[test]
fn a_second_rack_is_refused_where_the_token_allocator_would_refuse_its_members() {
    let on = |version: &str, racks: &[(&str, i32)]| {
        let mut spec = spec(racks);
        spec.version = version.into();
        spec
    };
    let three_in_a = || observed(vec![("a", rack(Some(3), &[READY, READY, READY]))]);
    let refused = |rack: &str| {
        Action::Refuse(Refusal::TooFewRacksForTokenAllocation {
            rack: rack.into(),
            racks: 2,
            factor: 3,
        })
    };
    for version in ["4.1.8", "5.0.3"] {
        let two_racks = on(version, &[("a", 3), ("b", 2)]);
        assert_eq!(decide(&two_racks, &three_in_a()), refused("b"), "{version}");
        // Growing a rack of a datacenter already of two racks.
        let grown = on(version, &[("a", 4), ("b", 2)]);
        let both = observed(vec![
            ("a", rack(Some(3), &[READY, READY, READY])),
            ("b", rack(Some(2), &[READY, READY])),
        ]);
        assert_eq!(decide(&grown, &both), refused("a"), "{version}");
        // Nothing to bootstrap: what runs keeps being looked after.
        let same = on(version, &[("a", 3), ("b", 2)]);
        assert!(
            !matches!(decide(&same, &both), Action::Refuse(_)),
            "{version}"
        );
        // A factor the racks allow, in the overrides of the growing rack.
        let mut allowed = three_in_a();
        allowed.token_allocation_factors.insert("b".into(), 2);
        assert!(
            !matches!(decide(&two_racks, &allowed), Action::Refuse(_)),
            "{version}"
        );
        // One rack, or three.
        for racks in [&[("a", 4)][..], &[("a", 3), ("b", 1), ("c", 1)][..]] {
            assert!(
                !matches!(
                    decide(&on(version, racks), &three_in_a()),
                    Action::Refuse(_)
                ),
                "{version} {racks:?}"
            );
        }
    }
    // 3.11 allocates tokens at random by default.
    assert!(!matches!(
        decide(&on("3.11.6", &[("a", 3), ("b", 2)]), &three_in_a()),
        Action::Refuse(_)
    ));
}
