//! Replacements: a member whose Node and local disk are gone, or whose
//! sidecar found an empty disk the ring still knows, is replaced at its own
//! address, one at a time, when every other member is ready. Reads the
//! spec and the observation; pure.

use std::collections::BTreeSet;

use crds::v1alpha1::ClusterSpec;

use super::guards::mixed_majors;
use super::topology::not_ready_besides;
use super::{Action, WaitReason};
use crate::observed::Observed;

/// The next replace to start, if a member needs one. `held`: a member
/// whose record holds the rest, not waited for either (it may never be
/// ready again).
pub(super) fn next_replace(
    spec: &ClusterSpec,
    observed: &Observed,
    held: Option<(&str, i32)>,
) -> Option<Action> {
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
            // A member with a decommission record is leaving or left: a
            // replace would bring it back.
            if service.decommissioned.is_some() {
                continue;
            }
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
        .chain(held)
        .collect();
    if let Some(&(rack, member, service)) = needs_replace.first() {
        if let Some(wait) = not_ready_besides(spec, observed, &skip) {
            return Some(Action::Wait(wait));
        }
        if let Some(wait) = mixed_majors(observed) {
            return Some(Action::Wait(wait));
        }
        return Some(
            match (service.cluster_ip.clone(), service.resource_version.clone()) {
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
            },
        );
    }
    None
}
