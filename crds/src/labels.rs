//! Labels on everything the controller creates (DESIGN.md section 3). The
//! records of intent on member Services (section 4) are part of
//! [`crate::contract`]. Pure.

use std::collections::BTreeMap;

/// `app`, the label Rook put on every object of a Cassandra cluster.
pub const APP: &str = "app";
/// The value of [`APP`].
pub const APP_NAME: &str = "rook-cassandra";
/// The Cluster an object belongs to.
pub const CLUSTER: &str = "cassandra.rook.io/cluster";
/// The datacenter an object belongs to.
pub const DATACENTER: &str = "cassandra.rook.io/datacenter";
/// The rack an object belongs to.
pub const RACK: &str = "cassandra.rook.io/rack";

/// The label the StatefulSet controller puts on each Pod with the Pod's name;
/// a member Service selects its Pod with it.
pub const POD_NAME: &str = "statefulset.kubernetes.io/pod-name";

/// The annotation on a Cluster that asks for a rolling restart of every
/// member, as `kubectl rollout restart` writes `kubectl.kubernetes.io/restartedAt`
/// into a workload's template: set it to the time of the request (any new
/// value restarts again). The controller copies it into the racks' Pod
/// templates, so the request is a template change like any other.
pub const RESTARTED_AT: &str = "cassandra.rook.io/restartedAt";

/// The labels of every object of a cluster.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP.to_string(), APP_NAME.to_string()),
        (CLUSTER.to_string(), cluster.to_string()),
    ])
}

/// The labels of every object of one rack (its StatefulSet, Pods, member
/// Services).
pub fn rack_labels(cluster: &str, datacenter: &str, rack: &str) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.insert(DATACENTER.to_string(), datacenter.to_string());
    labels.insert(RACK.to_string(), rack.to_string());
    labels
}

/// A label selector string (`k=v,k=v`) for a set of labels, as list calls and
/// watches take it.
pub fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_are_rooks() {
        assert_eq!(APP, "app");
        assert_eq!(APP_NAME, "rook-cassandra");
        assert_eq!(CLUSTER, "cassandra.rook.io/cluster");
        assert_eq!(DATACENTER, "cassandra.rook.io/datacenter");
        assert_eq!(RACK, "cassandra.rook.io/rack");
        assert_eq!(POD_NAME, "statefulset.kubernetes.io/pod-name");
    }

    #[test]
    fn rack_labels_extend_cluster_labels() {
        let labels = rack_labels("c", "dc1", "r1");
        assert_eq!(
            labels,
            BTreeMap::from([
                ("app".to_string(), "rook-cassandra".to_string()),
                ("cassandra.rook.io/cluster".to_string(), "c".to_string()),
                (
                    "cassandra.rook.io/datacenter".to_string(),
                    "dc1".to_string()
                ),
                ("cassandra.rook.io/rack".to_string(), "r1".to_string()),
            ])
        );
        assert_eq!(
            selector(&cluster_labels("c")),
            "app=rook-cassandra,cassandra.rook.io/cluster=c"
        );
    }
}
