//! A Cluster whose spec passed validation: what the builders take, so
//! that no object is ever built from a spec that was not validated. Pure.

use std::ops::Deref;

use crds::ValidationErrors;
use crds::v1alpha1::Cluster;

/// A Cluster that [`validate`] accepted.
#[derive(Debug, Clone, Copy)]
pub struct ValidCluster<'a>(&'a Cluster);

impl Deref for ValidCluster<'_> {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        self.0
    }
}

/// The Cluster, validated ([`crds::validate`]: the rules the schema cannot
/// express), or every error found.
pub fn validate(cluster: &Cluster) -> Result<ValidCluster<'_>, ValidationErrors> {
    crds::validate(cluster).map(|()| ValidCluster(cluster))
}

#[cfg(test)]
impl<'a> ValidCluster<'a> {
    /// A Cluster the builders' tests take as it is (some are partial on
    /// purpose: a builder test is about the builder, not validation).
    pub fn unchecked(cluster: &'a Cluster) -> ValidCluster<'a> {
        ValidCluster(cluster)
    }
}
