//! The Service data path for traffic that starts in a Pod: what kube-proxy
//! does on a node, done in each Pod's own network namespace, so that a
//! connection to `<ClusterIP>:<port>` reaches a ready endpoint of that
//! Service at its `targetPort` (real Cassandra members gossip to each
//! other at their member Services' ClusterIPs).
//!
//! Every Pod namespace holds the same nftables table `ip kubesim`
//! ([`ruleset`], pure): a `nat` chain on the `output` hook looks up
//! `daddr . l4proto . dport` in the verdict map `services` and jumps to
//! that Service port's chain, which DNATs to one of its endpoints
//! (`numgen random`, as kube-proxy spreads connections); conntrack undoes
//! the DNAT on the replies, so nothing is masqueraded, and a Pod reaching
//! its own ClusterIP (hairpin) is plain local delivery. A `filter` chain
//! after it refuses what is still addressed to the service range (a
//! Service without a ready endpoint, or a port it does not have): a TCP
//! reset, an ICMP port unreachable otherwise, as kube-proxy's REJECT for
//! Services without endpoints. The Pod's route for the service range
//! ([`SERVICE_CIDR`], on `eth0`, made with its namespace by
//! [`super::net`]) lets `connect()` get that far instead of failing with
//! ENETUNREACH.
//!
//! The endpoints are the sim's Endpoints objects ([`super::services`]):
//! `addresses` (ready Pods, or every Pod with an IP under
//! `publishNotReadyAddresses`), their ports matched to the Service's by
//! name as kube-proxy does. The kubelet ([`super::kubelet`]) loads the
//! current table into a Pod's namespace when it creates it, and after each
//! pass that changed the table into every Pod's namespace (one `nsenter
//! --net nft -f -` each, one atomic transaction that replaces the table).
//! Host processes and `hostNetwork` Pods are not served (kube-proxy would
//! serve them too); nothing resolves Service names (no cluster DNS).

use serde_json::Value;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// The service range, where the API server gives ClusterIPs
/// ([`crate::kubesim::defaults::random_cluster_ip`]).
pub const SERVICE_CIDR: &str = "10.96.0.0/12";

/// The nftables table's name (family `ip`).
pub const TABLE: &str = "kubesim";

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The endpoints (`ip . port`) of one port of a Service: the ready
/// addresses of its Endpoints, at the port named as the Service's port
/// (the only one when unnamed). Pure.
fn endpoints_of(port: &Value, endpoints: Option<&Value>) -> Vec<(String, u64)> {
    let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
    let mut out = Vec::new();
    for subset in endpoints
        .and_then(|e| e.get("subsets"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(target) = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == name)
            .and_then(|p| p.get("port"))
            .and_then(Value::as_u64)
            .filter(|p| *p > 0)
        else {
            continue;
        };
        for address in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ip = s(address, "/ip");
            if ip.parse::<std::net::Ipv4Addr>().is_ok() {
                out.push((ip.to_string(), target));
            }
        }
    }
    out.sort();
    out
}

/// The nft script that replaces the table `ip kubesim` of a Pod's
/// namespace with the data path of `services` to their `endpoints`
/// (Endpoints objects, matched by namespace and name). Deterministic: the
/// same Services and endpoints give the same text. Pure.
pub fn ruleset(services: &[impl Borrow<Value>], endpoints: &[impl Borrow<Value>]) -> String {
    let by_name: BTreeMap<(&str, &str), &Value> = endpoints
        .iter()
        .map(|e| {
            let e = e.borrow();
            ((s(e, "/metadata/namespace"), s(e, "/metadata/name")), e)
        })
        .collect();
    // (ClusterIP, protocol, port) → endpoints, in a stable order.
    let mut routes: BTreeMap<(std::net::Ipv4Addr, String, u64), Vec<(String, u64)>> =
        BTreeMap::new();
    for svc in services {
        let svc = svc.borrow();
        let Ok(ip) = s(svc, "/spec/clusterIP").parse::<std::net::Ipv4Addr>() else {
            continue; // headless, ExternalName, or none yet
        };
        let key = (s(svc, "/metadata/namespace"), s(svc, "/metadata/name"));
        for port in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(number) = port.get("port").and_then(Value::as_u64) else {
                continue;
            };
            let protocol = match port.get("protocol").and_then(Value::as_str) {
                Some("UDP") => "udp",
                Some("SCTP") => "sctp",
                _ => "tcp",
            };
            let to = endpoints_of(port, by_name.get(&key).copied());
            if !to.is_empty() {
                routes.insert((ip, protocol.to_string(), number), to);
            }
        }
    }
    let mut out = String::new();
    // Adding the table first makes the delete succeed in a new namespace;
    // the three lines are one transaction, so no packet sees no table.
    let _ = writeln!(out, "table ip {TABLE} {{}}\ndelete table ip {TABLE}");
    let _ = writeln!(out, "table ip {TABLE} {{");
    let mut elements = Vec::new();
    for (i, ((ip, protocol, port), to)) in routes.iter().enumerate() {
        let targets: Vec<String> = to
            .iter()
            .enumerate()
            .map(|(n, (ip, port))| format!("{n} : {ip} . {port}"))
            .collect();
        let _ = writeln!(
            out,
            "  chain svc-{i} {{\n    meta l4proto {protocol} dnat ip to numgen random mod {} map {{ {} }}\n  }}",
            to.len(),
            targets.join(", ")
        );
        elements.push(format!("{ip} . {protocol} . {port} : goto svc-{i}"));
    }
    let _ = writeln!(
        out,
        "  map services {{\n    type ipv4_addr . inet_proto . inet_service : verdict"
    );
    if !elements.is_empty() {
        let _ = writeln!(out, "    elements = {{ {} }}", elements.join(", "));
    }
    let _ = writeln!(out, "  }}");
    let _ = writeln!(
        out,
        "  chain output {{\n    type nat hook output priority -100; policy accept;\n    ip daddr . meta l4proto . th dport vmap @services\n  }}"
    );
    let _ = writeln!(
        out,
        "  chain refuse {{\n    type filter hook output priority 0; policy accept;\n    ip daddr {SERVICE_CIDR} meta l4proto tcp reject with tcp reset\n    ip daddr {SERVICE_CIDR} reject\n  }}"
    );
    let _ = writeln!(out, "}}");
    out
}

/// Loads `script` ([`ruleset`]) into the network namespace at `netns`.
pub fn apply(netns: &Path, script: &str) -> std::io::Result<()> {
    let mut child = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["--", "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "nft in {}: {}",
            netns.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(name: &str, ip: &str, ports: Value) -> Value {
        json!({"metadata": {"namespace": "db", "name": name},
            "spec": {"clusterIP": ip, "ports": ports}})
    }

    fn endpoints(name: &str, ips: &[&str], ports: Value) -> Value {
        let addresses: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        json!({"metadata": {"namespace": "db", "name": name},
            "subsets": [{"addresses": addresses, "notReadyAddresses": [{"ip": "10.244.0.99"}],
                "ports": ports}]})
    }

    #[test]
    fn each_service_port_goes_to_its_ready_endpoints_at_the_target_port() {
        let services = [
            svc(
                "m-0",
                "10.96.1.2",
                json!([{"name": "gossip", "port": 7000, "targetPort": "intra"},
                    {"name": "cql", "port": 9042}]),
            ),
            svc("web", "10.96.1.3", json!([{"port": 80, "protocol": "UDP"}])),
            svc("headless", "None", json!([{"port": 80}])),
            svc("empty", "10.96.1.4", json!([{"port": 80}])),
        ];
        let eps = [
            endpoints(
                "m-0",
                &["10.244.0.5"],
                json!([{"name": "gossip", "port": 7001}, {"name": "cql", "port": 9042}]),
            ),
            endpoints(
                "web",
                &["10.244.0.7", "10.244.0.6"],
                json!([{"port": 8080}]),
            ),
            endpoints("headless", &["10.244.0.8"], json!([{"port": 80}])),
            endpoints("empty", &[], json!([{"port": 80}])),
        ];
        let rules = ruleset(&services, &eps);
        assert_eq!(rules, ruleset(&services, &eps), "deterministic");
        assert!(rules.starts_with("table ip kubesim {}\ndelete table ip kubesim\n"));
        // Ports in key order: 10.96.1.2 tcp 7000, 9042, then 10.96.1.3 udp 80.
        assert!(rules.contains(
            "meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 10.244.0.5 . 7001 }"
        ));
        assert!(rules.contains(
            "meta l4proto udp dnat ip to numgen random mod 2 map { 0 : 10.244.0.6 . 8080, 1 : 10.244.0.7 . 8080 }"
        ));
        assert!(rules.contains(
            "elements = { 10.96.1.2 . tcp . 7000 : goto svc-0, 10.96.1.2 . tcp . 9042 : goto svc-1, 10.96.1.3 . udp . 80 : goto svc-2 }"
        ));
        // Not-ready addresses, headless Services and Services without a
        // ready endpoint have no route: the refuse chain answers them.
        assert!(!rules.contains("10.244.0.99") && !rules.contains("10.244.0.8"));
        assert!(!rules.contains("10.96.1.4"));
        assert!(rules.contains("ip daddr 10.96.0.0/12 meta l4proto tcp reject with tcp reset"));
    }

    #[test]
    fn no_services_still_refuses_the_service_range() {
        let rules = ruleset(&[] as &[Value], &[] as &[Value]);
        assert!(!rules.contains("elements"));
        assert!(!rules.contains("chain svc-"));
        assert!(rules.contains("chain refuse"));
    }
}
