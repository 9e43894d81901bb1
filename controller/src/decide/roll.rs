//! Rolls: a rack's new template applied (`OnDelete`: it reaches no member
//! by itself), then one member restarted at a time, highest ordinal first,
//! racks in spec order, only once every member sees every member up; a
//! restart under way finishes first. Reads the spec and the observation;
//! pure.

use crds::contract::{GossipMember, GossipView, ring_settled};
use crds::v1alpha1::ClusterSpec;
use crds::versions::Version;

use super::{Action, Refusal, WaitReason};
use crate::observed::Observed;

/// The racks whose StatefulSet differs from the spec: applied, unless the
/// change of version must wait for a topology change under way.
pub(super) fn outdated_templates(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
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
        return Some(Action::UpdateStatefulSets { racks: outdated });
    }
    None
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
pub(super) fn restart_under_way(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
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
pub(super) fn next_restart(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
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
        // yet (the one rolled last) counts as down for them, and every
        // member must have recorded what it sees (both sidecars record
        // it once their node is NORMAL): right after a cluster converges,
        // no record may exist yet, and a ring no one has described is no
        // settled ring.
        let members = gossip_members(spec, observed);
        let names: Vec<&str> = members.members.iter().map(|(n, _, _)| n.as_str()).collect();
        if let Err(unsettled) = ring_settled(&members.as_members(), &names) {
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

/// Why the ring is not settled, if it is not: a member has not recorded
/// its gossip, or does not see another up under the generation it runs
/// ([`ring_settled`], every member's record required), as before a roll's
/// restart.
pub(super) fn ring_unsettled(spec: &ClusterSpec, observed: &Observed) -> Option<String> {
    let members = gossip_members(spec, observed);
    let names: Vec<&str> = members.members.iter().map(|(n, _, _)| n.as_str()).collect();
    ring_settled(&members.as_members(), &names)
        .err()
        .map(|u| u.to_string())
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
