//! The encryption the members' Pod templates carry (`spec.security.tls`):
//! the spec's, or, while a running cluster moves from clear text to TLS,
//! the step it has reached ([`crds::contract::tls::next_encryption`]). It is
//! read from what the racks' StatefulSets hold and whether every member
//! runs its rack's template, so a restarted controller takes the move up
//! where it was: no record of its own. Pure.

use crds::contract::tls::{ENCRYPTION_ENV, Encryption, next_encryption};
use crds::v1alpha1::{ClusterSpec, TlsSpec};
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::observed::Observed;
use crate::resources::TLS_VOLUME;

/// The encryption of the members' templates for a cluster of `spec` now,
/// from what observe saw of its racks' templates and members: `None`
/// without TLS.
pub fn templates_encryption(spec: &ClusterSpec, observed: &Observed) -> Option<Encryption> {
    let target = spec
        .security
        .as_ref()
        .map(|s| s.tls.clone())
        .unwrap_or_default();
    let racks: Vec<Option<Encryption>> = observed
        .racks
        .values()
        .filter(|r| r.replicas.is_some())
        .map(|r| r.template_encryption)
        .collect();
    next_encryption(&target, &racks, settled(spec, observed))
}

/// The encryption a StatefulSet's Pod template gives its members: none
/// without the TLS volume; the sidecar's [`ENCRYPTION_ENV`]; or, for a
/// template of a controller that did not write it yet (when TLS could not
/// change after creation), the spec's.
pub fn template_encryption(sts: &StatefulSet, target: &TlsSpec) -> Option<Encryption> {
    let pod = sts.spec.as_ref()?.template.spec.as_ref()?;
    let has_volume = pod.volumes.iter().flatten().any(|v| v.name == TLS_VOLUME);
    if !has_volume {
        return None;
    }
    let written = pod
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == ENCRYPTION_ENV)
        .and_then(|e| e.value.as_deref());
    match written {
        // A value the controller wrote; one it cannot read again counts as
        // clear text, so that the move starts over from its first step,
        // which is safe from anywhere but TLS only.
        Some(value) => Encryption::parse(value).ok(),
        None => Encryption::of(target),
    }
}

/// Whether every member of every rack of the spec runs its rack's
/// current template and is Ready: the last step reached every member.
fn settled(spec: &ClusterSpec, observed: &Observed) -> bool {
    spec.datacenter.racks.iter().all(|rack| {
        let Some(observed_rack) = observed.racks.get(&rack.name) else {
            return false;
        };
        let Some(replicas) = observed_rack.replicas else {
            return false;
        };
        !observed_rack.status_stale
            && observed_rack.update_revision.is_some()
            && (0..replicas).all(|ordinal| {
                observed_rack.members.get(&ordinal).is_some_and(|m| {
                    m.pod_exists
                        && m.pod_ready
                        && !m.pod_terminating
                        && m.revision.is_some()
                        && !m.outdated(observed_rack)
                })
            })
    })
}

#[cfg(test)]
#[path = "encryption_tests.rs"]
mod tests;
