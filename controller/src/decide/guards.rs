//! The guards: what stands in the way of every step (a supporting object's
//! name in the way, a foreign object, a
//! renamed datacenter, a version or storage change Cassandra or a
//! StatefulSet cannot make, a rack removed with members, refused
//! overrides), and the majors rule of topology changes. Reads the spec and
//! the observation; pure.

use std::collections::BTreeSet;

use crds::v1alpha1::{ClusterMode, ClusterSpec};
use crds::versions::{Version, cassandra_upgrade};

use super::{Action, Refusal, WaitReason};
use crate::observed::{ClaimTemplate, InTheWay, Observed};

/// A refusal that stops everything, if any: nothing moves until the spec
/// or the objects change.
pub(super) fn refusal(spec: &ClusterSpec, observed: &Observed) -> Option<Action> {
    match &observed.supporting_in_the_way {
        Some(InTheWay::Foreign(foreign)) => {
            return Some(Action::Refuse(Refusal::ForeignObject(foreign.clone())));
        }
        Some(InTheWay::InsufficientRbac {
            kind,
            name,
            missing,
        }) => {
            return Some(Action::Refuse(Refusal::MemberRbacInsufficient {
                kind: kind.clone(),
                name: name.clone(),
                missing: missing.clone(),
            }));
        }
        None => {}
    }
    if let Some(foreign) = observed.foreign.first() {
        return Some(Action::Refuse(Refusal::ForeignObject(foreign.clone())));
    }
    if let Some(running) = observed.other_datacenters.first() {
        return Some(Action::Refuse(Refusal::DatacenterChanged {
            running: running.clone(),
            spec: spec.datacenter.name.clone(),
        }));
    }
    if let Some(refusal) = unsupported_version_change(spec, observed) {
        return Some(Action::Refuse(refusal));
    }
    if let Some(refusal) = unsupported_storage_change(spec, observed) {
        return Some(Action::Refuse(refusal));
    }
    let in_spec = |name: &str| spec.datacenter.racks.iter().any(|r| r.name == name);
    for (name, rack) in &observed.racks {
        let members = rack.replicas.unwrap_or(0);
        if !in_spec(name) && members > 0 {
            return Some(Action::Refuse(Refusal::RackRemovedWithMembers {
                rack: name.clone(),
                members,
            }));
        }
    }

    // Before anything that would start a member: it would start with the
    // refused overrides (the sidecar refuses them too, and the member would
    // never become ready).
    if let Some((rack, overrides)) = observed.refused_overrides.iter().next() {
        return Some(Action::Refuse(Refusal::OverridesRefused {
            rack: rack.clone(),
            overrides: overrides.clone(),
        }));
    }
    // After the overrides: they may set the token allocation factor.
    too_few_racks_for_token_allocation(spec, observed).map(Action::Refuse)
}

/// A spec that would bootstrap a member (a rack with more members than its
/// StatefulSet runs) into a datacenter of more than one rack but fewer
/// racks than that member's token allocation factor (its overrides', or
/// the default files' 3): Cassandra 4.0 and later would refuse to allocate
/// its tokens at every start. Members that run, and replacements (which
/// take the lost node's tokens), are not concerned. Cassandra 3.x has no
/// such allocator by default, ScyllaDB none.
pub(super) fn too_few_racks_for_token_allocation(
    spec: &ClusterSpec,
    observed: &Observed,
) -> Option<Refusal> {
    if spec.mode != ClusterMode::Cassandra || Version::of_tag(&spec.version)?.major < 4 {
        return None;
    }
    let racks = spec
        .datacenter
        .racks
        .iter()
        .filter(|r| r.members > 0)
        .count();
    spec.datacenter.racks.iter().find_map(|rack| {
        let running = observed
            .racks
            .get(&rack.name)
            .and_then(|r| r.replicas)
            .unwrap_or(0);
        let factor = observed
            .token_allocation_factors
            .get(&rack.name)
            .copied()
            .unwrap_or(crds::overrides::DEFAULT_TOKEN_ALLOCATION_FACTOR);
        (rack.members > running && racks > 1 && racks < factor as usize).then(|| {
            Refusal::TooFewRacksForTokenAllocation {
                rack: rack.name.clone(),
                racks,
                factor,
            }
        })
    })
}

/// A change of `spec.version` that Cassandra does not support from a version
/// that a member runs or that a rack's template holds (the CRD's transition
/// rule sees only the previous spec, not what runs: two quick edits 3.11 →
/// 4.1 → 5.0 pass it). ScyllaDB's rules are not judged.
pub(super) fn unsupported_version_change(
    spec: &ClusterSpec,
    observed: &Observed,
) -> Option<Refusal> {
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
pub(super) fn unsupported_storage_change(
    spec: &ClusterSpec,
    observed: &Observed,
) -> Option<Refusal> {
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
pub(super) fn mixed_majors(observed: &Observed) -> Option<WaitReason> {
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
