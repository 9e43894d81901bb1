//! Names of the objects the controller creates (DESIGN.md section 3), the same
//! as the Rook Cassandra operator's so that existing clusters keep their
//! objects. Pure functions.

/// The StatefulSet of a rack: `<cluster>-<dc>-<rack>`.
pub fn statefulset_name(cluster: &str, datacenter: &str, rack: &str) -> String {
    format!("{cluster}-{datacenter}-{rack}")
}

/// A member's Pod, and its member Service (same name): `<statefulset>-<ordinal>`.
pub fn member_name(statefulset: &str, ordinal: i32) -> String {
    format!("{statefulset}-{ordinal}")
}

/// The headless Service clients connect through: `<cluster>-client`.
pub fn client_service_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

/// The PersistentVolumeClaim the StatefulSet controller makes for a member
/// from a volume claim template: `<template>-<pod>`.
pub fn pvc_name(template: &str, pod: &str) -> String {
    format!("{template}-{pod}")
}

/// The ServiceAccount, Role and RoleBinding of the members' sidecars:
/// `<cluster>-member`.
pub fn member_service_account_name(cluster: &str) -> String {
    format!("{cluster}-member")
}

/// The PodDisruptionBudget of a cluster: the cluster's own name.
pub fn pdb_name(cluster: &str) -> String {
    cluster.to_string()
}

/// The ordinal of a StatefulSet member from its Pod (or member Service) name,
/// given the StatefulSet's name; `None` when the name is not one of its members.
pub fn member_ordinal(statefulset: &str, member: &str) -> Option<i32> {
    let rest = member.strip_prefix(statefulset)?.strip_prefix('-')?;
    if rest.is_empty() || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statefulset_joins_cluster_dc_and_rack() {
        assert_eq!(
            statefulset_name("rook-cassandra", "us-east-1", "us-east-1a"),
            "rook-cassandra-us-east-1-us-east-1a"
        );
    }

    #[test]
    fn member_pod_and_service_share_the_ordinal_name() {
        assert_eq!(member_name("c-dc-r", 0), "c-dc-r-0");
        assert_eq!(member_name("c-dc-r", 12), "c-dc-r-12");
    }

    #[test]
    fn client_service_is_suffixed() {
        assert_eq!(
            client_service_name("rook-cassandra"),
            "rook-cassandra-client"
        );
    }

    #[test]
    fn pvc_is_template_then_pod() {
        assert_eq!(
            pvc_name("rook-cassandra-data", "c-dc-r-2"),
            "rook-cassandra-data-c-dc-r-2"
        );
    }

    #[test]
    fn member_rbac_and_pdb_names() {
        assert_eq!(member_service_account_name("prod"), "prod-member");
        assert_eq!(pdb_name("prod"), "prod");
    }

    #[test]
    fn ordinal_is_parsed_only_for_own_members() {
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r-0"), Some(0));
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r-17"), Some(17));
        // another rack whose name extends this one is not a member
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r-b-1"), None);
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r-"), None);
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r-01"), None);
        assert_eq!(member_ordinal("c-dc-r", "c-dc-r"), None);
        assert_eq!(member_ordinal("c-dc-r", "x-dc-r-1"), None);
    }
}
