//! The decision step of a reconcile: from the Cluster's spec and what the
//! caches show of its objects, the one next thing to do. Pure, and level
//! based: it looks only at the present state (labels and annotations on
//! member Services, StatefulSet replicas, Pods, claims, volumes, Nodes),
//! never at what it did before, so a controller that crashed between two
//! steps resumes where it was.
//!
//! One topology change at a time per cluster: while any member is not ready,
//! leaving or being replaced, nothing else starts. The safety rules of a
//! scale-down (DESIGN.md section 5) live here and are table-tested:
//! - a member's claims and Service are deleted only for an ordinal at or
//!   above the StatefulSet's replicas whose decommission was confirmed by
//!   its sidecar (`decommissioned=true`), never inferred from anything else;
//! - a StatefulSet shrinks only past a confirmed member;
//! - a decommission request on a member the spec still wants is withdrawn
//!   only while the sidecar has not claimed it and the member is ready
//!   (NORMAL), or when Cassandra refused it; one under way is finished
//!   first, and the scale-up waits;
//! - nothing starts while members run different major versions.
//!
//! Rolls (a rack's Pods not all on its StatefulSet's update revision, the
//! StatefulSets being `OnDelete`) take one member down at a time, highest
//! ordinal first, racks in spec order, only when every member is Ready and
//! no topology change is under way; no topology change starts while a
//! member runs an old template. The roll's only state is the record of a
//! restart on the member Service (`cassandra.rook.io/restarting`) and the
//! Pods' revision labels, so a controller restarted mid-roll resumes it.

use std::collections::{BTreeMap, BTreeSet};

use crds::contract::{Decommission, GossipMember, GossipView, is_seed, ring_settled};
use crds::v1alpha1::{ClusterMode, ClusterSpec};
use crds::versions::{Version, cassandra_upgrade};

use crate::confirmation::Verdict;
pub use crate::observed::{
    ClaimTemplate, ForeignObject, MemberObserved, Observed, RackObserved, RefusedOverrides,
    ServiceObserved,
};

/// Why the controller waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// A member is not ready yet (starting, joining, or failing).
    MemberNotReady { rack: String, member: i32 },
    /// A member is being decommissioned.
    MemberLeaving { rack: String, member: i32 },
    /// A member the spec wants again is decommissioning already (its sidecar
    /// claimed it): the decommission finishes, then the scale-up proceeds.
    DecommissionBeforeScaleUp { rack: String, member: i32 },
    /// A member is being replaced.
    MemberReplacing { rack: String, member: i32 },
    /// Members run different major versions: Cassandra cannot stream
    /// between majors, so no topology change starts.
    MixedMajorVersions { majors: Vec<u32> },
    /// A member was taken down by a roll and is not back Ready on the new
    /// template yet.
    MemberRestarting { rack: String, member: i32 },
    /// A rack's StatefulSet controller has not caught up with its spec:
    /// whether its members run its template is not known yet.
    StatefulSetNotObserved { rack: String },
    /// The PodDisruptionBudget does not allow the member's eviction now.
    EvictionRefused { rack: String, member: i32 },
    /// A roll waits for the ring: a member's gossip does not show every
    /// member up under the generation it runs (`detail` says which).
    RingNotSettled {
        rack: String,
        member: i32,
        detail: String,
    },
}

/// Why the controller refuses to act (until the spec or the objects change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An object the controller must create exists and belongs to someone else.
    ForeignObject(ForeignObject),
    /// `spec.version` asks for a change Cassandra does not support from a
    /// version the cluster runs (a downgrade across minors, a skipped major).
    VersionChangeRefused {
        running: String,
        spec: String,
        reason: String,
    },
    /// The members' Role or RoleBinding exists, made by the user (as Rook's
    /// example does), and does not give members what they need: `missing`
    /// says what.
    MemberRbacInsufficient {
        kind: String,
        name: String,
        missing: String,
    },
    /// The cluster runs members of another datacenter name than the spec's:
    /// Cassandra cannot rename a datacenter.
    DatacenterChanged { running: String, spec: String },
    /// The spec changes what a running StatefulSet cannot change (its
    /// volumeClaimTemplates): `field` names it, `detail` says how.
    SpecChangeUnsupported { field: String, detail: String },
    /// A rack was removed from the spec while its StatefulSet still runs members.
    RackRemovedWithMembers { rack: String, members: i32 },
    /// Cassandra refused (or failed) the decommission of a member: nothing
    /// is removed; raising the rack's members back cancels it.
    DecommissionRefused {
        rack: String,
        member: i32,
        reason: String,
    },
    /// A member below the highest one left the ring (confirmed by request,
    /// answer and ring): a StatefulSet can only remove its highest member.
    DecommissionedBelowTheTop { rack: String, member: i32 },
    /// A `decommissioned=true` that is no confirmed decommission (`missing`
    /// says what it lacks), on a member that is not in the ring either (it
    /// left without the controller's request?): nothing is deleted, and
    /// the label stays for someone to look at.
    StaleDecommissionRecord {
        rack: String,
        member: i32,
        missing: String,
    },
    /// A `decommissioned` label with a value neither side acts on.
    UnreadableDecommission {
        rack: String,
        member: i32,
        value: String,
    },
    /// A rack's overrides ConfigMap sets a key that would defeat the safety
    /// rules or the member's identity: no member may start with it, so no
    /// topology change starts (members already running keep running).
    OverridesRefused {
        rack: String,
        overrides: RefusedOverrides,
    },
    /// A member a roll took down did not come back Ready within the bound:
    /// the roll stops there, nothing else is touched.
    MemberRestartStuck {
        rack: String,
        member: i32,
        since: String,
    },
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the StatefulSets of these racks, each with the replicas its
    /// existing members need (0 for a new rack).
    CreateStatefulSets { racks: Vec<(String, i32)> },
    /// Apply the desired StatefulSet (all but replicas) of these racks:
    /// what the spec asks for differs from what they hold.
    UpdateStatefulSets { racks: Vec<String> },
    /// Roll a member: record the restart on its Service (guarded by the
    /// resourceVersion read), then evict its Pod.
    RestartMember {
        rack: String,
        member: i32,
        resource_version: String,
        /// The gossip generation it runs, as its sidecar recorded it.
        generation: Option<i64>,
    },
    /// A member with a recorded restart still runs the old template: evict
    /// its Pod (again: the first eviction was refused or never sent).
    EvictMember { rack: String, member: i32 },
    /// A restarted member is back Ready on its rack's template: remove the
    /// record of its restart.
    FinishRestart { rack: String, member: i32 },
    /// Create the member Service of a member (before its Pod exists, or
    /// because it went missing).
    CreateMemberService {
        rack: String,
        member: i32,
        seed: bool,
    },
    /// Add one member to a rack: set its StatefulSet's replicas.
    ScaleUp { rack: String, replicas: i32 },
    /// Ask the highest member of a rack to leave the ring: label its Service
    /// `decommissioned=false`, guarded by the resourceVersion the decision
    /// read (a stale cache must never turn the sidecar's `true` back).
    RequestDecommission {
        rack: String,
        member: i32,
        resource_version: String,
        /// What the request names: the member's Pod and its node.
        pod_uid: Option<String>,
        host_id: Option<String>,
    },
    /// A `decommissioned=true` that is no confirmed decommission, on a
    /// member in the ring: report it (`missing` says what it lacks) and take
    /// it back, guarded by the resourceVersion read: the label goes, or
    /// returns to the controller's request (`"false"`) when the spec no
    /// longer wants the member and the request stands. Nothing is deleted.
    ClearStaleDecommission {
        rack: String,
        member: i32,
        missing: String,
        restore_request: bool,
        resource_version: String,
    },
    /// Remove a decommission request the sidecar has not claimed (or that
    /// Cassandra refused), guarded by the Service's resourceVersion.
    WithdrawDecommission {
        rack: String,
        member: i32,
        resource_version: String,
    },
    /// The highest member's decommission is confirmed: shrink the
    /// StatefulSet past it.
    ScaleDown { rack: String, replicas: i32 },
    /// A member above the replicas whose decommission was confirmed: delete
    /// its claims, then its Service (the Service holds the confirmation, so
    /// it goes last).
    DeleteLeftovers {
        rack: String,
        member: i32,
        claims: Vec<String>,
    },
    /// Record `replace=<address>` on a member's Service: its disk was lost,
    /// or its sidecar asked.
    StartReplace {
        rack: String,
        member: i32,
        address: String,
        resource_version: String,
    },
    /// A member being replaced still has claims on a lost disk: delete them,
    /// then its Pod, so that the StatefulSet makes both anew.
    DeleteLostDisk {
        rack: String,
        member: i32,
        claims: Vec<String>,
    },
    /// The replaced member is ready: remove the `replace` record.
    FinishReplace { rack: String, member: i32 },
    /// Wait for the cluster to settle.
    Wait(WaitReason),
    /// Do nothing until something changes.
    Refuse(Refusal),
    /// Every rack has its members, all ready.
    Converged,
}

/// The decision once a scale-up's member Service exists: `observed`
/// shows the Service just created, and the scale-up it prepared is
/// returned when it is still what comes next. The caller carries it out in
/// the same reconcile, not after the Service's watch event and another
/// reconcile (each of which waits its turn among every cluster's).
pub fn after_member_service_created(
    spec: &ClusterSpec,
    observed: &mut Observed,
    rack: &str,
    member: i32,
) -> Option<Action> {
    observed
        .racks
        .get_mut(rack)?
        .members
        .entry(member)
        .or_default()
        .service
        .get_or_insert_with(ServiceObserved::default);
    match decide(spec, observed) {
        Action::ScaleUp {
            rack: next,
            replicas,
        } if next == rack && replicas == member + 1 => Some(Action::ScaleUp {
            rack: next,
            replicas,
        }),
        _ => None,
    }
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
    if let Some(refusal) = unsupported_version_change(spec, observed) {
        return Action::Refuse(refusal);
    }
    if let Some(refusal) = unsupported_storage_change(spec, observed) {
        return Action::Refuse(refusal);
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

    // Before anything that would start a member: it would start with the
    // refused overrides (the sidecar refuses them too, and the member would
    // never become ready).
    if let Some((rack, overrides)) = observed.refused_overrides.iter().next() {
        return Action::Refuse(Refusal::OverridesRefused {
            rack: rack.clone(),
            overrides: overrides.clone(),
        });
    }

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
        return Action::CreateStatefulSets { racks: missing };
    }
    // With `OnDelete`, a new template reaches no running member by itself:
    // applying it is safe at any time, and the roll below carries it.
    let outdated: Vec<String> = spec
        .datacenter
        .racks
        .iter()
        .filter(|r| {
            observed
                .racks
                .get(&r.name)
                .is_some_and(|o| o.statefulset_outdated)
        })
        .map(|r| r.name.clone())
        .collect();
    // Except a new version while a topology change is under way: a member
    // made from the new template would stream with members of another
    // version, which Cassandra refuses. The change waits for its end (the
    // steps below carry on meanwhile).
    if !outdated.is_empty() && !version_change_held(spec, observed, &outdated) {
        return Action::UpdateStatefulSets { racks: outdated };
    }

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
                return Action::Wait(WaitReason::MemberLeaving {
                    rack: rack.name.clone(),
                    member,
                });
            }
            return Action::DeleteLeftovers {
                rack: rack.name.clone(),
                member,
                claims: state.claims.clone(),
            };
        }
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
                            return Action::ScaleDown {
                                rack: rack_name,
                                replicas: member,
                            };
                        }
                        (Verdict::Confirmed, _) => {
                            hold(Refusal::DecommissionedBelowTheTop {
                                rack: rack_name,
                                member,
                            });
                            continue;
                        }
                        (Verdict::Pending(_), _) => {
                            return Action::Wait(WaitReason::MemberLeaving {
                                rack: rack_name,
                                member,
                            });
                        }
                        (Verdict::Stale(missing), true) => {
                            return match service.resource_version.clone() {
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
                            };
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
                    if !wanted
                        && member == replicas - 1
                        && service.decommission_request.is_none() =>
                {
                    // A bare `false` (an older controller's, or written by
                    // hand): the request it needs is written, so that the
                    // member's answer can name it.
                    return match service.resource_version.clone() {
                        Some(resource_version) => Action::RequestDecommission {
                            rack: rack_name,
                            member,
                            resource_version,
                            pod_uid: state.pod_uid.clone(),
                            host_id: service.gossip.as_ref().and_then(|g| g.host_id.clone()),
                        },
                        None => Action::Wait(WaitReason::MemberLeaving {
                            rack: rack_name,
                            member,
                        }),
                    };
                }
                Decommission::Requested => {
                    let refused = service.decommission_refused.is_some();
                    let claimed = service.decommission_started && !refused;
                    // Not ready means the member may be LEAVING already: a
                    // sidecar that called decommission before it could
                    // claim it (or one that never claims) must not see its
                    // request vanish under a running decommission.
                    if wanted && !claimed && (state.pod_ready || refused) {
                        return match service.resource_version.clone() {
                            Some(resource_version) => Action::WithdrawDecommission {
                                rack: rack_name,
                                member,
                                resource_version,
                            },
                            None => Action::Wait(WaitReason::MemberLeaving {
                                rack: rack_name,
                                member,
                            }),
                        };
                    }
                    if wanted {
                        return Action::Wait(WaitReason::DecommissionBeforeScaleUp {
                            rack: rack_name,
                            member,
                        });
                    }
                    if let Some(reason) = &service.decommission_refused {
                        return Action::Refuse(Refusal::DecommissionRefused {
                            rack: rack_name,
                            member,
                            reason: reason.clone(),
                        });
                    }
                    return Action::Wait(WaitReason::MemberLeaving {
                        rack: rack_name,
                        member,
                    });
                }
            }
            if service.replace.is_some() {
                if state.disk_lost {
                    return Action::DeleteLostDisk {
                        rack: rack_name,
                        member,
                        claims: state.claims.clone(),
                    };
                }
                if state.pod_ready && !state.disk_lost {
                    return Action::FinishReplace {
                        rack: rack_name,
                        member,
                    };
                }
                return Action::Wait(WaitReason::MemberReplacing {
                    rack: rack_name,
                    member,
                });
            }
        }
    }

    // A restart under way (a roll took the member down): it comes back on
    // its rack's template, then its record goes. Nothing else starts
    // meanwhile.
    if let Some(action) = restart_under_way(spec, observed) {
        return action;
    }

    // A member that needs a replace: its local disk is gone with its Node,
    // or its sidecar found an empty disk the ring still knows. One at a
    // time, only when every other member is ready (members that need a
    // replace themselves are not waited for: they never get ready alone).
    let mut needs_replace = Vec::new();
    for rack in &spec.datacenter.racks {
        let observed_rack = &observed.racks[&rack.name];
        for (&member, state) in observed_rack
            .members
            .range(..observed_rack.replicas.unwrap_or(0))
        {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            if state.disk_lost || (!state.pod_ready && service.replace_requested.is_some()) {
                needs_replace.push((rack.name.as_str(), member, service));
            }
        }
    }
    // A member whose record holds the rest is not waited for either: it
    // may never be ready again (it left the ring without a request).
    let skip: BTreeSet<(&str, i32)> = needs_replace
        .iter()
        .map(|(r, m, _)| (*r, *m))
        .chain(held.as_ref().map(|(_, member)| *member))
        .collect();
    if let Some(&(rack, member, service)) = needs_replace.first() {
        if let Some(wait) = not_ready_besides(spec, observed, &skip) {
            return Action::Wait(wait);
        }
        if let Some(wait) = mixed_majors(observed) {
            return Action::Wait(wait);
        }
        return match (service.cluster_ip.clone(), service.resource_version.clone()) {
            (Some(address), Some(resource_version)) => Action::StartReplace {
                rack: rack.to_string(),
                member,
                address,
                resource_version,
            },
            // No address yet: nothing to replace with; the ClusterIP comes
            // with the Service.
            _ => Action::Wait(WaitReason::MemberReplacing {
                rack: rack.to_string(),
                member,
            }),
        };
    }

    if let Some((refusal, _)) = held {
        return Action::Refuse(refusal);
    }
    if let Some(wait) = not_ready_besides(spec, observed, &BTreeSet::new()) {
        return Action::Wait(wait);
    }

    // Every member is Ready: roll the next one, if any runs an old template,
    // before any topology change starts.
    if let Some(action) = next_restart(spec, observed) {
        return action;
    }

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
                host_id: state.and_then(|m| m.service.as_ref()?.gossip.as_ref()?.host_id.clone()),
            },
            None => Action::Wait(WaitReason::MemberNotReady {
                rack: rack.name.clone(),
                member: highest,
            }),
        };
    }
    Action::Converged
}

/// Whether applying the racks' new templates changes the database version
/// while a topology change is under way: a rack not at its spec's
/// members, a decommission or replace recorded, or a member not Ready that
/// no roll took down (joining, or failing).
fn version_change_held(spec: &ClusterSpec, observed: &Observed, outdated: &[String]) -> bool {
    let Some(wanted) = Version::of_tag(&spec.version) else {
        return false;
    };
    let changes_version = outdated.iter().any(|rack| {
        observed
            .racks
            .get(rack)
            .and_then(|r| r.template_version)
            .is_some_and(|running| running != wanted)
    });
    changes_version
        && spec.datacenter.racks.iter().any(|rack| {
            let Some(observed_rack) = observed.racks.get(&rack.name) else {
                return false;
            };
            let replicas = observed_rack.replicas.unwrap_or(0);
            replicas != rack.members
                || observed_rack.members.range(..replicas).any(|(_, m)| {
                    let service = m.service.as_ref();
                    service.is_some_and(|s| s.decommissioned.is_some() || s.replace.is_some())
                        || (!m.pod_ready && service.is_none_or(|s| s.restarting.is_none()))
                })
        })
}

/// The member whose restart is recorded, if any: what its restart needs
/// next (its eviction, a wait, the end of the restart, or a refusal when it
/// did not come back within the bound).
fn restart_under_way(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    for rack in &spec.datacenter.racks {
        let observed_rack = observed.racks.get(&rack.name)?;
        let replicas = observed_rack.replicas.unwrap_or(0);
        for (&member, state) in observed_rack.members.range(..replicas).rev() {
            let Some(since) = state.service.as_ref().and_then(|s| s.restarting.clone()) else {
                continue;
            };
            let rack_name = rack.name.clone();
            if observed_rack.status_stale {
                return Some(Action::Wait(WaitReason::StatefulSetNotObserved {
                    rack: rack_name,
                }));
            }
            let outdated = state.outdated(observed_rack);
            // Ready on the new template is back only when the ring says so.
            let unsettled = if state.pod_ready && !outdated {
                match back_in_ring(spec, observed, &rack.name, member) {
                    None => {
                        return Some(Action::FinishRestart {
                            rack: rack_name,
                            member,
                        });
                    }
                    detail => detail,
                }
            } else {
                None
            };
            if outdated && !state.pod_terminating {
                return Some(Action::EvictMember {
                    rack: rack_name,
                    member,
                });
            }
            if state.restart_overdue {
                return Some(Action::Refuse(Refusal::MemberRestartStuck {
                    rack: rack_name,
                    member,
                    since,
                }));
            }
            if let Some(detail) = unsettled {
                return Some(Action::Wait(WaitReason::RingNotSettled {
                    rack: rack_name,
                    member,
                    detail,
                }));
            }
            return Some(Action::Wait(WaitReason::MemberRestarting {
                rack: rack_name,
                member,
            }));
        }
    }
    None
}

/// The next member to roll: racks in spec order, in each the highest
/// ordinal whose Pod runs a revision other than its StatefulSet's update
/// revision. Called only when every member is Ready.
fn next_restart(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    for rack in &spec.datacenter.racks {
        let observed_rack = observed.racks.get(&rack.name)?;
        if observed_rack.status_stale && observed_rack.replicas.unwrap_or(0) > 0 {
            return Some(Action::Wait(WaitReason::StatefulSetNotObserved {
                rack: rack.name.clone(),
            }));
        }
    }
    for rack in &spec.datacenter.racks {
        let observed_rack = observed.racks.get(&rack.name)?;
        let replicas = observed_rack.replicas.unwrap_or(0);
        let Some((&member, state)) = observed_rack
            .members
            .range(..replicas)
            .rev()
            .find(|(_, m)| m.outdated(observed_rack))
        else {
            continue;
        };
        // Only out of a settled ring: a member the others do not see up
        // yet (the one rolled last) counts as down for them.
        if let Err(unsettled) = ring_settled(&gossip_members(spec, observed).as_members(), &[]) {
            return Some(Action::Wait(WaitReason::RingNotSettled {
                rack: rack.name.clone(),
                member,
                detail: unsettled.to_string(),
            }));
        }
        let service = state.service.as_ref();
        return Some(match service.and_then(|s| s.resource_version.clone()) {
            Some(resource_version) => Action::RestartMember {
                rack: rack.name.clone(),
                member,
                resource_version,
                generation: service
                    .and_then(|s| s.gossip.as_ref())
                    .map(|g| g.generation),
            },
            // The repair above makes a missing member Service first.
            None => Action::Wait(WaitReason::MemberNotReady {
                rack: rack.name.clone(),
                member,
            }),
        });
    }
    None
}

/// The running members with an address, as the gossip rule judges them.
struct GossipMembers<'a> {
    members: Vec<(String, &'a str, Option<&'a GossipView>)>,
}

impl GossipMembers<'_> {
    fn as_members(&self) -> Vec<GossipMember<'_>> {
        self.members
            .iter()
            .map(|(name, address, view)| GossipMember {
                name,
                address,
                view: *view,
            })
            .collect()
    }
}

fn member_label(rack: &str, member: i32) -> String {
    format!("member {member} of rack {rack}")
}

fn gossip_members<'a>(spec: &ClusterSpec, observed: &'a Observed) -> GossipMembers<'a> {
    let mut members = Vec::new();
    for rack in &spec.datacenter.racks {
        let Some(observed_rack) = observed.racks.get(&rack.name) else {
            continue;
        };
        for (&member, state) in observed_rack
            .members
            .range(..observed_rack.replicas.unwrap_or(0))
        {
            let Some(service) = state.service.as_ref() else {
                continue;
            };
            let Some(address) = service.cluster_ip.as_deref() else {
                continue;
            };
            members.push((
                member_label(&rack.name, member),
                address,
                service.gossip.as_ref(),
            ));
        }
    }
    GossipMembers { members }
}

/// Whether a member a roll restarted is back in the ring: its record shows
/// a generation newer than the one it ran when it was taken down, and every
/// member sees every member up ([`ring_settled`]). `None` when it is back,
/// else why not.
fn back_in_ring(
    spec: &ClusterSpec,
    observed: &Observed,
    rack: &str,
    member: i32,
) -> Option<String> {
    let service = observed
        .racks
        .get(rack)?
        .members
        .get(&member)?
        .service
        .as_ref()?;
    let name = member_label(rack, member);
    if let Some(before) = service.restarted_from_generation
        && service
            .gossip
            .as_ref()
            .is_none_or(|g| g.generation <= before)
    {
        return Some(format!(
            "{name} has not recorded the gossip generation of its new start yet"
        ));
    }
    ring_settled(
        &gossip_members(spec, observed).as_members(),
        &[name.as_str()],
    )
    .err()
    .map(|u| u.to_string())
}

/// How many running members run a template other than their rack's.
pub fn members_on_old_template(observed: &Observed) -> usize {
    observed
        .racks
        .values()
        .map(|r| {
            r.members
                .range(..r.replicas.unwrap_or(0))
                .filter(|(_, m)| m.outdated(r))
                .count()
        })
        .sum()
}

/// The first running member (other than those in `skip`) that is not
/// ready, in spec order.
fn not_ready_besides(
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

/// A change of `spec.version` that Cassandra does not support from a version
/// that a member runs or that a rack's template holds (the CRD's transition
/// rule sees only the previous spec, not what runs: two quick edits 3.11 →
/// 4.1 → 5.0 pass it). ScyllaDB's rules are not judged.
fn unsupported_version_change(spec: &ClusterSpec, observed: &Observed) -> Option<Refusal> {
    if spec.mode != ClusterMode::Cassandra {
        return None;
    }
    let wanted = Version::of_tag(&spec.version)?;
    let running: BTreeSet<Version> = observed
        .racks
        .values()
        .flat_map(|r| {
            r.members
                .values()
                .filter(|m| m.pod_exists)
                .filter_map(|m| m.pod_version)
                .chain(r.template_version)
        })
        .collect();
    running.into_iter().find_map(|from| {
        cassandra_upgrade(from, wanted)
            .err()
            .map(|why| Refusal::VersionChangeRefused {
                running: from.to_string(),
                spec: spec.version.clone(),
                reason: why.to_string(),
            })
    })
}

/// A rack whose storage in the spec differs from what its StatefulSet's
/// volumeClaimTemplates hold: a StatefulSet cannot change them, and a
/// StatefulSet re-created with others would give new members other disks
/// than the running ones.
fn unsupported_storage_change(spec: &ClusterSpec, observed: &Observed) -> Option<Refusal> {
    spec.datacenter
        .racks
        .iter()
        .enumerate()
        .find_map(|(index, rack)| {
            let running = observed.racks.get(&rack.name)?.claim_templates.as_ref()?;
            let wanted: Vec<ClaimTemplate> = rack
                .storage
                .volume_claim_templates
                .iter()
                .map(ClaimTemplate::of)
                .collect();
            let differs = |w: &ClaimTemplate, r: &ClaimTemplate| {
                (w.storage_class.is_some() && w.storage_class != r.storage_class)
                    || (!w.access_modes.is_empty() && w.access_modes != r.access_modes)
                    || (w.storage_bytes.is_some() && w.storage_bytes != r.storage_bytes)
            };
            let detail = if wanted.len() != running.len()
                || wanted.iter().zip(running).any(|(w, r)| w.name != r.name)
            {
                Some(format!(
                    "the claims are {:?}, the spec asks for {:?}",
                    running.iter().map(|r| &r.name).collect::<Vec<_>>(),
                    wanted.iter().map(|w| &w.name).collect::<Vec<_>>()
                ))
            } else {
                wanted
                    .iter()
                    .zip(running)
                    .find(|(w, r)| differs(w, r))
                    .map(|(w, r)| {
                        format!(
                            "claim template {:?} is {}, the spec asks for {}",
                            w.name,
                            describe(r),
                            describe(w)
                        )
                    })
            };
            detail.map(|detail| Refusal::SpecChangeUnsupported {
                field: format!("spec.datacenter.racks[{index}].storage.volumeClaimTemplates"),
                detail: format!("rack {}: {detail}", rack.name),
            })
        })
}

fn describe(claim: &ClaimTemplate) -> String {
    format!(
        "{} bytes of {} ({})",
        claim
            .storage_bytes
            .map_or_else(|| "?".to_string(), |b| b.to_string()),
        claim
            .storage_class
            .as_deref()
            .unwrap_or("the default class"),
        claim.access_modes.join(", ")
    )
}

/// Members running different major versions, if they do.
fn mixed_majors(observed: &Observed) -> Option<WaitReason> {
    let majors: BTreeSet<u32> = observed
        .racks
        .values()
        .flat_map(|r| r.members.values())
        .filter(|m| m.pod_exists)
        .filter_map(|m| m.pod_major)
        .collect();
    (majors.len() > 1).then(|| WaitReason::MixedMajorVersions {
        majors: majors.into_iter().collect(),
    })
}

/// The major version in an image reference's tag (`cassandra:4.1.8` → 4);
/// `None` without a version tag (a digest, `latest`).
pub fn image_major(image: &str) -> Option<u32> {
    Version::of_image(image).map(|v| v.major)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::contract::{DecommissionConfirmation, DecommissionRequest};
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
            template_version: None,
            claim_templates: None,
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
                                cluster_ip: Some(format!("10.96.0.{i}")),
                                resource_version: Some(format!("{}", 100 + i)),
                                ..ServiceObserved::default()
                            }),
                            pod_exists: *ready,
                            pod_ready: *ready,
                            ..MemberObserved::default()
                        },
                    )
                })
                .collect(),
            ..RackObserved::default()
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

    /// A member for the lifecycle table: ready, with a Service, one claim.
    fn member(i: i32) -> MemberObserved {
        MemberObserved {
            service: Some(ServiceObserved {
                cluster_ip: Some(format!("10.96.0.{i}")),
                resource_version: Some(format!("{}", 100 + i)),
                ..ServiceObserved::default()
            }),
            pod_exists: true,
            pod_uid: Some(format!("uid-{i}")),
            pod_ready: true,
            pod_major: Some(4),
            pod_version: None,
            claims: vec![format!("data-c-dc-b-{i}")],
            ..MemberObserved::default()
        }
    }

    fn with(mut m: MemberObserved, f: impl FnOnce(&mut MemberObserved)) -> MemberObserved {
        f(&mut m);
        m
    }

    fn label(m: MemberObserved, value: &str) -> MemberObserved {
        with(m, |m| {
            m.service.as_mut().unwrap().decommissioned = Some(value.to_string())
        })
    }

    const ASKED: &str = "2026-11-27T10:00:00Z";
    const LEFT: &str = "2026-11-27T10:01:00Z";
    const ANSWERED: &str = "2026-11-27T10:02:00Z";

    /// The controller's request on the member's Service.
    fn asked(m: MemberObserved) -> MemberObserved {
        let id = format!("{}/{ASKED}", m.pod_uid.clone().unwrap_or_default());
        with(label(m, "false"), |m| {
            m.service.as_mut().unwrap().decommission_request = Some(DecommissionRequest {
                id,
                requested_at: ASKED.into(),
                ..DecommissionRequest::default()
            })
        })
    }

    /// The sidecar's answer to that request: `true` and its confirmation.
    fn confirmed(m: MemberObserved) -> MemberObserved {
        with(label(asked(m), "true"), |m| {
            let service = m.service.as_mut().unwrap();
            service.decommission_confirmation = Some(DecommissionConfirmation {
                request: service.decommission_request.as_ref().unwrap().id.clone(),
                host_id: None,
                confirmed_at: ANSWERED.into(),
            })
        })
    }

    /// Every other member records, after the request, a ring whose token
    /// owners are the members but `gone`.
    fn left(observed: Observed, gone: i32) -> Observed {
        ring_at(observed, LEFT, |i| i != gone)
    }

    /// Every member records at `at` a ring whose owners are the members
    /// for which `owns` holds.
    fn ring_at(mut observed: Observed, at: &str, owns: impl Fn(i32) -> bool) -> Observed {
        let owners: BTreeMap<String, String> = observed
            .racks
            .values()
            .flat_map(|r| r.members.iter())
            .filter(|&(&i, _)| owns(i))
            .filter_map(|(&i, m)| Some((m.service.as_ref()?.cluster_ip.clone()?, format!("h{i}"))))
            .collect();
        for rack in observed.racks.values_mut() {
            for m in rack.members.values_mut() {
                if let Some(service) = m.service.as_mut() {
                    let gossip = service.gossip.get_or_insert_with(GossipView::default);
                    gossip.owners = Some(owners.clone());
                    gossip.at = Some(at.into());
                }
            }
        }
        observed
    }

    fn started(m: MemberObserved) -> MemberObserved {
        with(m, |m| {
            m.service.as_mut().unwrap().decommission_started = true
        })
    }

    fn refused(m: MemberObserved, reason: &str) -> MemberObserved {
        with(m, |m| {
            m.service.as_mut().unwrap().decommission_refused = Some(reason.to_string())
        })
    }

    fn gone(m: MemberObserved) -> MemberObserved {
        with(m, |m| {
            m.pod_exists = false;
            m.pod_ready = false
        })
    }

    fn unready(m: MemberObserved) -> MemberObserved {
        with(m, |m| m.pod_ready = false)
    }

    fn racks(replicas: i32, members: Vec<MemberObserved>) -> Observed {
        let rack = RackObserved {
            replicas: Some(replicas),
            template_version: None,
            claim_templates: None,
            members: members
                .into_iter()
                .enumerate()
                .map(|(i, m)| (i as i32, m))
                .collect(),
            ..RackObserved::default()
        };
        observed(vec![("b", rack)])
    }

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

    fn with_member(o: &mut Observed, i: i32, f: impl FnOnce(&mut MemberObserved)) {
        f(o.racks.get_mut("b").unwrap().members.get_mut(&i).unwrap());
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

    /// A member running revision `revision`.
    fn on(m: MemberObserved, revision: &str) -> MemberObserved {
        with(m, |m| m.revision = Some(revision.to_string()))
    }

    /// A member whose restart the controller recorded.
    /// A member whose restart the controller recorded when it ran gossip
    /// generation 50 (older than any the members run in [`rolling`]).
    fn restarting(m: MemberObserved) -> MemberObserved {
        with(m, |m| {
            let service = m.service.as_mut().expect("a Service");
            service.restarting = Some("2026-01-01T00:00:00Z".into());
            service.restarted_from_generation = Some(50);
        })
    }

    /// The gossip generation member `i` runs in a settled ring.
    fn generation(i: i32) -> i64 {
        100 + i64::from(i)
    }

    /// Every member's gossip record shows every member up under the
    /// generation it runs.
    fn settled(mut observed: Observed) -> Observed {
        let up: BTreeMap<String, i64> = observed
            .racks
            .values()
            .flat_map(|r| r.members.iter())
            .filter_map(|(&i, m)| Some((m.service.as_ref()?.cluster_ip.clone()?, generation(i))))
            .collect();
        for rack in observed.racks.values_mut() {
            for (&i, m) in rack.members.iter_mut() {
                if let Some(service) = m.service.as_mut() {
                    service.gossip = Some(GossipView {
                        generation: generation(i),
                        up: up.clone(),
                        ..GossipView::default()
                    });
                }
            }
        }
        observed
    }

    /// Rack "b" of 3 replicas whose StatefulSet's update revision is "new",
    /// its ring settled.
    fn rolling(members: Vec<MemberObserved>) -> Observed {
        let mut observed = racks(members.len() as i32, members);
        observed.racks.get_mut("b").expect("rack b").update_revision = Some("new".into());
        settled(observed)
    }

    /// Changes what member `i`'s gossip record says.
    fn gossip_of(mut observed: Observed, i: i32, f: impl FnOnce(&mut GossipView)) -> Observed {
        let service = observed
            .racks
            .get_mut("b")
            .and_then(|r| r.members.get_mut(&i))
            .and_then(|m| m.service.as_mut())
            .expect("member of rack b with a Service");
        f(service.gossip.as_mut().expect("a gossip record"));
        observed
    }

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
                        m.service.as_mut().expect("a Service").restarted_from_generation =
                            Some(generation(2))
                    }),
                ]),
                Wait(WaitReason::RingNotSettled {
                    rack: b(),
                    member: 2,
                    detail: "member 2 of rack b has not recorded the gossip generation of its new start yet".into(),
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
                    detail: "member 2 of rack b has not recorded the gossip generation of its new start yet".into(),
                }),
            ),
            (
                "Ready, but another member still knows it by its old start: wait",
                spec(&[("b", 3)]),
                gossip_of(
                    rolling(vec![old(0), old(1), restarting(new(2))]),
                    0,
                    |g| {
                        g.up.insert("10.96.0.2".into(), 50);
                    },
                ),
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
                rolling(vec![
                    old(0),
                    old(1),
                    unready(started(asked(old(2)))),
                ]),
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
    fn a_scale_up_goes_on_once_its_member_service_is_created_and_nothing_else() {
        let spec = spec(&[("b", 4)]);
        let mut growing = rolling(vec![member(0), member(1)]);
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
        let mut growing = rolling(vec![member(0), member(1)]);
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
        let both = observed(vec![
            ("b", rack_of(["old", "old"])),
            ("c", rack_of(["old", "old"])),
        ]);
        assert!(
            matches!(decide(&spec, &both), Action::RestartMember { ref rack, member: 1, .. } if rack == "c"),
            "the spec's first rack first"
        );
        let second = observed(vec![
            ("b", rack_of(["old", "old"])),
            ("c", rack_of(["new", "new"])),
        ]);
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
}
