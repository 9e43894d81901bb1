//! The encryption the members' Pod templates carry (`spec.security.tls`):
//! the spec's, or, while a running cluster moves from clear text to TLS,
//! the step it has reached ([`crds::contract::tls::next_encryption`]). It is
//! read from what the racks' StatefulSets hold and whether every member
//! runs its rack's template, so a restarted controller takes the move up
//! where it was: no record of its own. Pure.

use crds::contract::tls::{ENCRYPTION_ENV, Encryption, next_encryption};
use crds::v1alpha1::{Cluster, TlsSpec};
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::observe::{Cached, REVISION_LABEL, owned_by, pod_ready};
use crate::resources::TLS_VOLUME;

/// The encryption of the members' templates for `cluster` now: `None`
/// without TLS.
pub fn templates_encryption(cluster: &Cluster, cached: &Cached) -> Option<Encryption> {
    let target = cluster
        .spec
        .security
        .as_ref()
        .map(|s| s.tls.clone())
        .unwrap_or_default();
    let dc = &cluster.spec.datacenter.name;
    let owned: Vec<&StatefulSet> = cached
        .statefulsets
        .iter()
        .map(AsRef::as_ref)
        .filter(|s| owned_by(&s.metadata, cluster))
        .filter(|s| {
            s.metadata.namespace == cluster.metadata.namespace
                && label(s, crds::labels::DATACENTER).is_none_or(|d| d == dc)
        })
        .collect();
    let racks: Vec<Option<Encryption>> = owned
        .iter()
        .map(|s| template_encryption(s, &target))
        .collect();
    next_encryption(&target, &racks, settled(cluster, &owned, cached))
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
fn settled(cluster: &Cluster, owned: &[&StatefulSet], cached: &Cached) -> bool {
    cluster.spec.datacenter.racks.iter().all(|rack| {
        let Some(sts) = owned
            .iter()
            .find(|s| label(s, crds::labels::RACK) == Some(rack.name.as_str()))
        else {
            return false;
        };
        let Some(status) = sts.status.as_ref() else {
            return false;
        };
        let generation = sts.metadata.generation.unwrap_or_default();
        if status.observed_generation.unwrap_or_default() < generation {
            return false;
        }
        let Some(revision) = status.update_revision.as_deref() else {
            return false;
        };
        let name = sts.metadata.name.as_deref().unwrap_or_default();
        let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        (0..replicas).all(|ordinal| {
            let pod_name = crds::names::member_name(name, ordinal);
            cached.pods.iter().any(|pod| {
                pod.metadata.name.as_deref() == Some(pod_name.as_str())
                    && pod.metadata.namespace == cluster.metadata.namespace
                    && pod.metadata.deletion_timestamp.is_none()
                    && pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(REVISION_LABEL))
                        .is_some_and(|r| r == revision)
                    && pod_ready(pod)
            })
        })
    })
}

fn label<'a>(sts: &'a StatefulSet, key: &str) -> Option<&'a str> {
    sts.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

#[cfg(test)]
#[path = "encryption_tests.rs"]
mod tests;
