//! The decision step of a reconcile: from the Cluster's spec and what the
//! caches show of its objects, the one next thing to do. Pure, and level
//! based: it looks only at the present state (labels on member Services,
//! StatefulSet replicas, Pod readiness), never at what it did before, so a
//! controller that crashed between two steps resumes where it was.
//!
//! One topology change at a time per cluster: while any member is not ready,
//! leaving or being replaced, nothing else starts.

use std::collections::BTreeMap;

use crds::v1alpha1::ClusterSpec;

use crds::contract::is_seed;

/// What the caches show of one member (one ordinal of a rack).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberObserved {
    /// Its member Service, if it exists.
    pub service: Option<ServiceObserved>,
    /// Its Pod exists.
    pub pod_exists: bool,
    /// Its Pod is Ready (the sidecar reports operation mode NORMAL).
    pub pod_ready: bool,
}

/// The records of intent on a member Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceObserved {
    /// The `cassandra.rook.io/decommissioned` label, if present.
    pub decommissioned: Option<String>,
    /// The `cassandra.rook.io/replace` label, if present.
    pub replace: Option<String>,
}

/// What the caches show of one rack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RackObserved {
    /// `spec.replicas` of its StatefulSet, if the StatefulSet exists.
    pub replicas: Option<i32>,
    /// Its members by ordinal (Pods and member Services found).
    pub members: BTreeMap<i32, MemberObserved>,
}

/// An object with one of the cluster's names that the Cluster does not own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
}

/// Everything the decision looks at besides the spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Racks by name: the spec's racks and any rack whose StatefulSet exists.
    pub racks: BTreeMap<String, RackObserved>,
    /// Objects in the way.
    pub foreign: Vec<ForeignObject>,
    /// Datacenter names on the cluster's StatefulSets that differ from the
    /// spec's (a renamed datacenter).
    pub other_datacenters: Vec<String>,
}

/// Why the controller waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// A member is not ready yet (starting, joining, or failing).
    MemberNotReady { rack: String, member: i32 },
    /// A member is being decommissioned.
    MemberLeaving { rack: String, member: i32 },
    /// A member is being replaced.
    MemberReplacing { rack: String, member: i32 },
}

/// Why the controller refuses to act (until the spec or the objects change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An object the controller must create exists and belongs to someone else.
    ForeignObject(ForeignObject),
    /// The cluster runs members of another datacenter name than the spec's:
    /// Cassandra cannot rename a datacenter.
    DatacenterChanged { running: String, spec: String },
    /// A rack was removed from the spec while its StatefulSet still runs members.
    RackRemovedWithMembers { rack: String, members: i32 },
    /// The spec asks for fewer members than a rack has; decommissioning is not
    /// implemented by this version, so nothing is removed.
    ScaleDownUnsupported {
        rack: String,
        members: i32,
        wanted: i32,
    },
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the StatefulSets of these racks, with 0 replicas.
    CreateStatefulSets { racks: Vec<String> },
    /// Create the member Service of a member (before its Pod exists, or
    /// because it went missing).
    CreateMemberService {
        rack: String,
        member: i32,
        seed: bool,
    },
    /// Add one member to a rack: set its StatefulSet's replicas.
    ScaleUp { rack: String, replicas: i32 },
    /// Wait for the cluster to settle.
    Wait(WaitReason),
    /// Do nothing until something changes.
    Refuse(Refusal),
    /// Every rack has its members, all ready.
    Converged,
}

/// Decides the next action.
pub fn decide(spec: &ClusterSpec, observed: &Observed) -> Action {
    if let Some(foreign) = observed.foreign.first() {
        return Action::Refuse(Refusal::ForeignObject(foreign.clone()));
    }
    if let Some(running) = observed.other_datacenters.first() {
        return Action::Refuse(Refusal::DatacenterChanged {
            running: running.clone(),
            spec: spec.datacenter.name.clone(),
        });
    }
    let in_spec = |name: &str| spec.datacenter.racks.iter().any(|r| r.name == name);
    for (name, rack) in &observed.racks {
        let members = rack.replicas.unwrap_or(0);
        if !in_spec(name) && members > 0 {
            return Action::Refuse(Refusal::RackRemovedWithMembers {
                rack: name.clone(),
                members,
            });
        }
    }

    let missing: Vec<String> = spec
        .datacenter
        .racks
        .iter()
        .filter(|r| {
            observed
                .racks
                .get(&r.name)
                .is_none_or(|o| o.replicas.is_none())
        })
        .map(|r| r.name.clone())
        .collect();
    if !missing.is_empty() {
        return Action::CreateStatefulSets { racks: missing };
    }

    // Repair: every running member has its Service (its identity).
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        for member in 0..observed_rack.replicas.unwrap_or(0) {
            let has_service = observed_rack
                .members
                .get(&member)
                .is_some_and(|m| m.service.is_some());
            if !has_service {
                return Action::CreateMemberService {
                    rack: rack.name.clone(),
                    member,
                    seed: is_seed(member),
                };
            }
        }
    }

    // One topology change at a time: wait while anything is in motion.
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        for (&member, state) in &observed_rack.members {
            let service = state.service.as_ref();
            if service.is_some_and(|s| s.decommissioned.is_some()) {
                return Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.name.clone(),
                    member,
                });
            }
            if service.is_some_and(|s| s.replace.is_some()) {
                return Action::Wait(WaitReason::MemberReplacing {
                    rack: rack.name.clone(),
                    member,
                });
            }
        }
        for member in 0..observed_rack.replicas.unwrap_or(0) {
            if !observed_rack
                .members
                .get(&member)
                .is_some_and(|m| m.pod_ready)
            {
                return Action::Wait(WaitReason::MemberNotReady {
                    rack: rack.name.clone(),
                    member,
                });
            }
        }
    }

    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        let replicas = observed_rack.replicas.unwrap_or(0);
        if replicas < rack.members {
            let next = replicas;
            if observed_rack
                .members
                .get(&next)
                .is_none_or(|m| m.service.is_none())
            {
                return Action::CreateMemberService {
                    rack: rack.name.clone(),
                    member: next,
                    seed: is_seed(next),
                };
            }
            return Action::ScaleUp {
                rack: rack.name.clone(),
                replicas: replicas + 1,
            };
        }
        if replicas > rack.members {
            return Action::Refuse(Refusal::ScaleDownUnsupported {
                rack: rack.name.clone(),
                members: replicas,
                wanted: rack.members,
            });
        }
    }
    Action::Converged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::v1alpha1::{ClusterMode, DatacenterSpec, RackSpec};

    fn spec(racks: &[(&str, i32)]) -> ClusterSpec {
        ClusterSpec {
            version: "3.11.6".into(),
            repository: None,
            mode: ClusterMode::Cassandra,
            annotations: None,
            datacenter: DatacenterSpec {
                name: "dc".into(),
                racks: racks
                    .iter()
                    .map(|(name, members)| RackSpec {
                        name: name.to_string(),
                        members: *members,
                        config_map_name: None,
                        jmx_exporter_config_map_name: None,
                        storage: Default::default(),
                        annotations: None,
                        placement: None,
                        resources: Default::default(),
                    })
                    .collect(),
            },
            sidecar_image: None,
        }
    }

    /// A rack whose StatefulSet has `replicas`; `members` lists each
    /// member's (has service, pod ready, decommissioned label, replace label).
    fn rack(
        replicas: Option<i32>,
        members: &[(bool, bool, Option<&str>, Option<&str>)],
    ) -> RackObserved {
        RackObserved {
            replicas,
            members: members
                .iter()
                .enumerate()
                .map(|(i, (service, ready, decommissioned, replace))| {
                    (
                        i as i32,
                        MemberObserved {
                            service: service.then(|| ServiceObserved {
                                decommissioned: decommissioned.map(str::to_string),
                                replace: replace.map(str::to_string),
                            }),
                            pod_exists: *ready,
                            pod_ready: *ready,
                        },
                    )
                })
                .collect(),
        }
    }

    const READY: (bool, bool, Option<&str>, Option<&str>) = (true, true, None, None);
    const STARTING: (bool, bool, Option<&str>, Option<&str>) = (true, false, None, None);
    const SERVICE_ONLY: (bool, bool, Option<&str>, Option<&str>) = (true, false, None, None);

    fn observed(racks: Vec<(&str, RackObserved)>) -> Observed {
        Observed {
            racks: racks.into_iter().map(|(n, r)| (n.to_string(), r)).collect(),
            ..Observed::default()
        }
    }

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
                    racks: vec!["b".into(), "c".into()],
                },
            ),
            (
                "a rack added later gets its StatefulSet",
                spec(&[("b", 3), ("c", 2)]),
                observed(vec![("b", rack(Some(3), &[READY, READY, READY]))]),
                CreateStatefulSets {
                    racks: vec!["c".into()],
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
                "second member is a seed too",
                spec(&[("b", 3)]),
                observed(vec![("b", rack(Some(1), &[READY]))]),
                CreateMemberService {
                    rack: b(),
                    member: 1,
                    seed: true,
                },
            ),
            (
                "third member is not a seed",
                spec(&[("b", 3)]),
                observed(vec![("b", rack(Some(2), &[READY, READY]))]),
                CreateMemberService {
                    rack: b(),
                    member: 2,
                    seed: false,
                },
            ),
            (
                "scale up the third",
                spec(&[("b", 3)]),
                observed(vec![("b", rack(Some(2), &[READY, READY, SERVICE_ONLY]))]),
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
                observed(vec![
                    ("b", rack(Some(1), &[READY])),
                    ("c", rack(Some(1), &[READY, SERVICE_ONLY])),
                ]),
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
                spec(&[("b", 3), ("c", 1)]),
                observed(vec![
                    (
                        "b",
                        rack(Some(3), &[READY, READY, (true, true, Some("false"), None)]),
                    ),
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
                "fewer members wanted: refused, nothing removed",
                spec(&[("b", 2)]),
                observed(vec![("b", rack(Some(3), &[READY, READY, READY]))]),
                Refuse(Refusal::ScaleDownUnsupported {
                    rack: b(),
                    members: 3,
                    wanted: 2,
                }),
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
}
