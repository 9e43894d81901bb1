//! Addresses: the allocator the kubelet uses for Pod IPs (127.1.0.0/16)
//! and a ClusterIP pass for any Service that reaches the store without one
//! (from 127.2.0.0/16; the store's own allocator normally gives a Service
//! its address when it is created, as the API server does; headless
//! Services, `clusterIP: None`, keep none). [`next_free`] is pure.

use super::{list_all, patch_main, s};
use crate::kubesim::store::Store;
use serde_json::json;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The first address of the ClusterIP range (a /16).
pub const SERVICE_BASE: Ipv4Addr = Ipv4Addr::new(127, 2, 0, 0);
/// The first address of the Pod IP range (a /16).
pub const POD_BASE: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 0);

/// The lowest free address of the /16 at `base` (skipping the network
/// address), or None when all are taken.
pub fn next_free(base: Ipv4Addr, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    let b = u32::from(base);
    (1..0xFFFF)
        .map(|i| Ipv4Addr::from(b + i))
        .find(|ip| !used.contains(ip))
}

/// Gives every Service that needs one a ClusterIP.
pub fn allocate_cluster_ips(store: &Store) {
    let services = list_all(store, "", "services");
    let mut used: BTreeSet<Ipv4Addr> = services
        .iter()
        .filter_map(|svc| s(svc, "/spec/clusterIP").parse().ok())
        .collect();
    for svc in &services {
        let kind = s(svc, "/spec/type");
        if !s(svc, "/spec/clusterIP").is_empty() || kind == "ExternalName" {
            continue;
        }
        let Some(ip) = next_free(SERVICE_BASE, &used) else {
            eprintln!("kubesim: the ClusterIP range is full");
            return;
        };
        used.insert(ip);
        let ip = ip.to_string();
        let _ = patch_main(
            store,
            "",
            "services",
            svc,
            &json!({"spec": {"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack", "type": if kind.is_empty() { "ClusterIP" } else { kind }}}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_address() {
        let mut used = BTreeSet::new();
        assert_eq!(
            next_free(SERVICE_BASE, &used),
            Some(Ipv4Addr::new(127, 2, 0, 1))
        );
        used.insert(Ipv4Addr::new(127, 2, 0, 1));
        used.insert(Ipv4Addr::new(127, 2, 0, 3));
        assert_eq!(
            next_free(SERVICE_BASE, &used),
            Some(Ipv4Addr::new(127, 2, 0, 2))
        );
        used.insert(Ipv4Addr::new(127, 2, 0, 2));
        assert_eq!(
            next_free(SERVICE_BASE, &used),
            Some(Ipv4Addr::new(127, 2, 0, 4))
        );
        let full: BTreeSet<Ipv4Addr> = (1..0xFFFF)
            .map(|i| Ipv4Addr::from(u32::from(POD_BASE) + i))
            .collect();
        assert_eq!(next_free(POD_BASE, &full), None);
        assert_eq!(
            next_free(POD_BASE, &BTreeSet::new()),
            Some(Ipv4Addr::new(127, 1, 0, 1))
        );
    }
}
