//! Topology: StatefulSets made for the racks, leftovers of confirmed
//! decommissions removed, member Services kept, the operations under way
//! on members (decommission records: finished, withdrawn, taken back or
//! refused), and the one-member-at-a-time scale up and down. Reads the
//! spec and the observation; pure.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use crds::contract::{Decommission, is_seed};
use crds::v1alpha1::ClusterSpec;

use super::guards::mixed_majors;
use super::{Action, Refusal, WaitReason};
use crate::confirmation::Verdict;
use crate::observed::Observed;

/// A member whose record the controller will not act on, and the refusal
/// it raises: it holds topology changes and rolls, not repairs.
pub(super) type Held<'a> = Option<(Refusal, (&'a str, i32))>;

/// Racks without a StatefulSet: created, each with the replicas its
/// existing members need.
pub(super) fn missing_statefulsets(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    let missing: Vec<(String, i32)> = spec
        .datacenter
        .racks
        .iter()
        .filter_map(|r| match observed.racks.get(&r.name) {
            None => Some((r.name.clone(), 0)),
            Some(o) if o.replicas.is_none() => {
                Some((r.name.clone(), observed.members_to_keep(&r.name)))
            }
            Some(_) => None,
        })
        .collect();
    if !missing.is_empty() {
        return Some(Action::CreateStatefulSets { racks: missing });
    }
    None
}

/// Leftovers of confirmed decommissions, first: a stale Service or claim at
/// the next ordinal would be reused by a scale-up.
pub(super) fn leftovers(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    // Leftovers of confirmed decommissions, first: a stale Service or claim
    // at the next ordinal would be reused by a scale-up.
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        let replicas = observed_rack.replicas.unwrap_or(0);
        for (&member, state) in observed_rack.members.range(replicas..) {
            if !observed.decommission_confirmed(&rack.name, member) {
                // Never inferred: without the controller's request, the
                // sidecar's answer and the ring's agreement, what is above
                // the replicas stays.
                continue;
            }
            if state.pod_exists {
                // The StatefulSet is still removing the Pod: its identity
                // stays until the process is gone.
                return Some(Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.name.clone(),
                    member,
                }));
            }
            return Some(Action::DeleteLeftovers {
                rack: rack.name.clone(),
                member,
                claims: state.claims.clone(),
            });
        }
    }
    None
}

/// A Pod at an ordinal at or above its StatefulSet's replicas, as the
/// caches show them, whose decommission is not confirmed: the cache is
/// behind the StatefulSet, or the StatefulSet was shrunk past a member by
/// someone else and is removing it. Either way the rack is not what the
/// caches say: no topology change or roll starts until the Pod is gone or
/// the caches catch up.
pub(super) fn unsettled_above_replicas(
    spec: &ClusterSpec,
    observed: &Observed,
) -> Option<WaitReason> {
    spec.datacenter.racks.iter().find_map(|rack| {
        let observed_rack = observed.racks.get(&rack.name)?;
        let replicas = observed_rack.replicas.unwrap_or(0);
        observed_rack
            .members
            .range(replicas..)
            .any(|(&member, state)| {
                state.pod_exists && !observed.decommission_confirmed(&rack.name, member)
            })
            .then(|| WaitReason::StatefulSetNotObserved {
                rack: rack.name.clone(),
            })
    })
}

/// Repair: every running member has its Service (its identity).
pub(super) fn missing_member_services(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    // Repair: every running member has its Service (its identity).
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        for member in 0..observed_rack.replicas.unwrap_or(0) {
            let has_service = observed_rack
                .members
                .get(&member)
                .is_some_and(|m| m.service.is_some());
            if !has_service {
                return Some(Action::CreateMemberService {
                    rack: rack.name.clone(),
                    member,
                    seed: is_seed(member),
                });
            }
        }
    }
    None
}

/// Operations under way on running members: what finishes (or withdraws)
/// them, or the member record that holds the rest.
pub(super) fn under_way<'a>(
    spec: &'a ClusterSpec,
    observed: &'a Observed,
) -> ControlFlow<Action, Held<'a>> {
    // Operations under way on running members: finish (or withdraw) them
    // before anything else. A member whose record the controller will not
    // act on holds every topology change and roll (`held`), but not what
    // keeps the others serving: a replacement of a member whose Node or
    // disk is gone, a restart under way, an outage's recovery (DESIGN.md
    // section 5, "One member's bad record").
    let mut held: Option<(Refusal, (&str, i32))> = None;
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        let replicas = observed_rack.replicas.unwrap_or(0);
        for (&member, state) in observed_rack.members.range(..replicas) {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            let (rack_name, wanted) = (rack.name.clone(), member < rack.members);
            let mut hold = |refusal: Refusal| {
                held.get_or_insert((refusal, (rack.name.as_str(), member)));
            };
            match service.decommission() {
                Decommission::Serve => {}
                Decommission::Confirmed => {
                    match observed.decommission_verdict(&rack.name, member) {
                        (Verdict::Confirmed, _) if member == replicas - 1 => {
                            // Whether or not the spec wants it again: it left
                            // the ring and never starts again; a scale-up makes
                            // a new one.
                            return ControlFlow::Break(Action::ScaleDown {
                                rack: rack_name,
                                replicas: member,
                            });
                        }
                        (Verdict::Confirmed, _) => {
                            hold(Refusal::DecommissionedBelowTheTop {
                                rack: rack_name,
                                member,
                            });
                            continue;
                        }
                        (Verdict::Pending(_), _) => {
                            return ControlFlow::Break(Action::Wait(WaitReason::MemberLeaving {
                                rack: rack_name,
                                member,
                            }));
                        }
                        (Verdict::Unrecorded, _) => {
                            return ControlFlow::Break(ask_for_a_ring_record(
                                observed, &rack.name, member,
                            ));
                        }
                        (Verdict::Stale(missing), true) => {
                            return ControlFlow::Break(match service.resource_version.clone() {
                                Some(resource_version) => Action::ClearStaleDecommission {
                                    rack: rack_name,
                                    member,
                                    missing,
                                    restore_request: !wanted
                                        && service.decommission_request.is_some(),
                                    resource_version,
                                },
                                None => Action::Wait(WaitReason::MemberLeaving {
                                    rack: rack_name,
                                    member,
                                }),
                            });
                        }
                        (Verdict::Stale(missing), false) => {
                            hold(Refusal::StaleDecommissionRecord {
                                rack: rack_name,
                                member,
                                missing,
                            });
                            continue;
                        }
                    }
                }
                Decommission::Unknown => {
                    hold(Refusal::UnreadableDecommission {
                        rack: rack_name,
                        member,
                        value: service.decommissioned.clone().unwrap_or_default(),
                    });
                    continue;
                }
                Decommission::Requested
                    if state.disk_lost && service.decommission_request.is_some() =>
                {
                    // Asked to leave, and its node is gone for good with its
                    // disk: it cannot finish, and a replace would bring a
                    // leaving node back. It leaves by removenode; the ring
                    // says when.
                    let host_id = observed.host_id_of(&rack.name, member);
                    match observed.removal_verdict(&rack.name, member) {
                        Verdict::Confirmed => {
                            return ControlFlow::Break(
                                match (
                                    service.resource_version.clone(),
                                    service.decommission_request.as_ref(),
                                ) {
                                    (Some(resource_version), Some(request)) => {
                                        Action::RecordRemoval {
                                            rack: rack_name,
                                            member,
                                            resource_version,
                                            request: request.id.clone(),
                                            host_id,
                                            claims: state.claims.clone(),
                                        }
                                    }
                                    _ => Action::Wait(WaitReason::MemberLeaving {
                                        rack: rack_name,
                                        member,
                                    }),
                                },
                            );
                        }
                        Verdict::Unrecorded => {
                            return ControlFlow::Break(ask_for_a_ring_record(
                                observed, &rack.name, member,
                            ));
                        }
                        Verdict::Pending(detail) | Verdict::Stale(detail) => {
                            hold(Refusal::LeavingMemberLost {
                                rack: rack_name,
                                member,
                                host_id,
                                detail,
                            });
                            continue;
                        }
                    }
                }
                Decommission::Requested
                    if !wanted
                        && member == replicas - 1
                        && service.decommission_request.is_none() =>
                {
                    // A bare `false` (an older controller's, or written by
                    // hand): the request it needs is written, so that the
                    // member's answer can name it.
                    return ControlFlow::Break(match service.resource_version.clone() {
                        Some(resource_version) => Action::RequestDecommission {
                            rack: rack_name,
                            member,
                            resource_version,
                            pod_uid: state.pod_uid.clone(),
                            host_id: observed.host_id_of(&rack.name, member),
                        },
                        None => Action::Wait(WaitReason::MemberLeaving {
                            rack: rack_name,
                            member,
                        }),
                    });
                }
                Decommission::Requested => {
                    let refused = service.decommission_refused.is_some();
                    let claimed = service.decommission_started && !refused;
                    // Not ready means the member may be LEAVING already: a
                    // sidecar that called decommission before it could
                    // claim it (or one that never claims) must not see its
                    // request vanish under a running decommission.
                    if wanted && !claimed && (state.pod_ready || refused) {
                        return ControlFlow::Break(match service.resource_version.clone() {
                            Some(resource_version) => Action::WithdrawDecommission {
                                rack: rack_name,
                                member,
                                resource_version,
                            },
                            None => Action::Wait(WaitReason::MemberLeaving {
                                rack: rack_name,
                                member,
                            }),
                        });
                    }
                    if wanted {
                        return ControlFlow::Break(Action::Wait(
                            WaitReason::DecommissionBeforeScaleUp {
                                rack: rack_name,
                                member,
                            },
                        ));
                    }
                    if let Some(reason) = &service.decommission_refused {
                        return ControlFlow::Break(Action::Refuse(Refusal::DecommissionRefused {
                            rack: rack_name,
                            member,
                            reason: reason.clone(),
                        }));
                    }
                    return ControlFlow::Break(Action::Wait(WaitReason::MemberLeaving {
                        rack: rack_name,
                        member,
                    }));
                }
            }
            if service.replace.is_some() {
                if state.disk_lost {
                    return ControlFlow::Break(Action::DeleteLostDisk {
                        rack: rack_name,
                        member,
                        claims: state.claims.clone(),
                    });
                }
                if state.pod_ready && !state.disk_lost {
                    return ControlFlow::Break(Action::FinishReplace {
                        rack: rack_name,
                        member,
                    });
                }
                return ControlFlow::Break(Action::Wait(WaitReason::MemberReplacing {
                    rack: rack_name,
                    member,
                }));
            }
        }
    }
    ControlFlow::Continue(held)
}

/// A member's decommission is asked and answered, and no other member has
/// recorded its ring since the request: a sidecar records its ring only
/// when it changes, and one that had not counted the member yet (it joined
/// and left between two of its reads) never would. One other Ready member
/// is asked to record it again; once it has been asked, the controller
/// waits for its record.
fn ask_for_a_ring_record(observed: &Observed, rack: &str, member: i32) -> Action {
    let leaving = WaitReason::MemberLeaving {
        rack: rack.to_string(),
        member,
    };
    let Some(requested_at) = observed
        .racks
        .get(rack)
        .and_then(|r| r.members.get(&member))
        .and_then(|m| m.service.as_ref()?.decommission_request.as_ref())
        .and_then(|r| crds::contract::parse_time(&r.requested_at))
    else {
        return Action::Wait(leaving);
    };
    let witnesses: Vec<(&String, i32, Option<&str>)> = observed
        .racks
        .iter()
        .flat_map(|(name, r)| r.members.iter().map(move |(&i, m)| (name, i, m)))
        .filter(|&(name, i, m)| !(name == rack && i == member) && m.pod_ready)
        .filter_map(|(name, i, m)| {
            let service = m.service.as_ref()?;
            service.gossip.as_ref()?;
            Some((name, i, service.ring_record_requested.as_deref()))
        })
        .collect();
    let asked = witnesses.iter().any(|(_, _, asked)| {
        asked
            .and_then(crds::contract::parse_time)
            .is_some_and(|at| at >= requested_at)
    });
    match witnesses.first() {
        Some((witness_rack, witness, _)) if !asked => Action::RequestRingRecord {
            rack: rack.to_string(),
            member,
            witness_rack: witness_rack.to_string(),
            witness: *witness,
        },
        _ => Action::Wait(leaving),
    }
}

/// Every member is Ready and nothing is under way: one step towards the
/// spec's members, or nothing to do.
pub(super) fn scale(spec: &ClusterSpec, observed: &Observed) -> Action {
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        let replicas = observed_rack.replicas.unwrap_or(0);
        if replicas == rack.members {
            continue;
        }
        if let Some(wait) = mixed_majors(observed) {
            return Action::Wait(wait);
        }
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
        let highest = replicas - 1;
        let state = observed_rack.members.get(&highest);
        return match state.and_then(|m| m.service.as_ref()?.resource_version.clone()) {
            Some(resource_version) => Action::RequestDecommission {
                rack: rack.name.clone(),
                member: highest,
                resource_version,
                pod_uid: state.and_then(|m| m.pod_uid.clone()),
                host_id: observed.host_id_of(&rack.name, highest),
            },
            None => Action::Wait(WaitReason::MemberNotReady {
                rack: rack.name.clone(),
                member: highest,
            }),
        };
    }
    Action::Converged
}

/// The first running member (other than those in `skip`) that is not
/// ready, in spec order.
pub(super) fn not_ready_besides(
    spec: &ClusterSpec,
    observed: &Observed,
    skip: &BTreeSet<(&str, i32)>,
) -> Option<WaitReason> {
    for rack in &spec.datacenter.racks {
        let observed_rack = observed.racks.get(&rack.name)?;
        for member in 0..observed_rack.replicas.unwrap_or(0) {
            if skip.contains(&(rack.name.as_str(), member)) {
                continue;
            }
            if !observed_rack
                .members
                .get(&member)
                .is_some_and(|m| m.pod_ready)
            {
                return Some(WaitReason::MemberNotReady {
                    rack: rack.name.clone(),
                    member,
                });
            }
        }
    }
    None
}
