//! Pod networking (issue 10 part 3): each Pod gets its own Linux network
//! namespace, as on a real node, so that a listener on `0.0.0.0:PORT` in
//! one Pod is reachable only at that Pod's IP, two Pods can listen on the
//! same port, and a probe reaches exactly the probed Pod (with Pods in the
//! host's namespace the controller's metrics server on `0.0.0.0:8080`
//! answered every member's readiness probe).
//!
//! Per kubesim: one Linux bridge `ksb<pid hex>-<seq hex>` in the host's
//! namespace holding the gateway `.1` of a /24 picked at random from
//! 10.244.0.0/14 among those no route or address of this machine
//! overlaps (chosen and created under the lock file
//! `/run/kubesim-net.lock`, so parallel kubesims never share one). Per
//! Pod: a namespace `ksim-<pid>-<seq>` (`/run/netns/`, as `ip netns add`
//! makes it), a veth pair whose host end `ksv<pid hex>-<seq hex>` is a
//! port of the bridge and whose other end is `eth0` in the namespace with
//! the Pod IP, and `lo` up. A Pod's routes are its /24 and the service
//! range on `eth0` (10.96.0.0/12, whose ClusterIPs the Pod's own
//! nftables rules DNAT to a Service's endpoints, [`super::proxy`]): Pods
//! reach each other, Services and the gateway (where kubesim also
//! serves), the host reaches every Pod IP through the bridge, and nothing
//! leaves the machine (no default route, no forwarding).
//!
//! Teardown: a Pod's veth and namespace go when the Pod is removed (the
//! [`PodNet`] is dropped), the bridge when kubesim stops ([`Network`]
//! dropped or [`Network::teardown`]). Leftovers of a kubesim that died
//! without cleaning up (SIGKILL) are removed by the next kubesim that
//! starts: every name carries the pid of the kubesim that made it.
//!
//! Everything is done by iproute2's `ip` (as root), in batches: creating
//! a Pod's network costs two `ip` processes (see the module docs of
//! [`super`] for the measured cost). I/O.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The block the per-kubesim /24s come from.
const BLOCK: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 0);
const BLOCK_LEN: u32 = 14;
/// The prefix length of a kubesim's Pod network.
pub const PREFIX_LEN: u32 = 24;
const LOCK: &str = "/run/kubesim-net.lock";

/// Names made by this process: one sequence for bridges and Pods, so that
/// every name is unique on the machine (with the pid).
static SEQ: AtomicU32 = AtomicU32::new(0);

fn err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::other(msg.into())
}

/// Runs `ip [-n NS] [-force] -batch -` with `lines` on stdin.
fn ip_batch(netns: Option<&str>, force: bool, lines: &str) -> std::io::Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    if force {
        cmd.arg("-force");
    }
    let mut child = cmd
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(lines.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(err(format!(
            "ip {}: {}",
            lines.trim().replace('\n', "; "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn ip_output(args: &[&str]) -> std::io::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(err(format!("ip {} failed", args.join(" "))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name this module made (`ksb<hex>-…`, `ksv<hex>-…`,
/// `ksim-<dec>-…`).
fn owner(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix("ksim-") {
        return rest.split('-').next()?.parse().ok();
    }
    let rest = name
        .strip_prefix("ksb")
        .or_else(|| name.strip_prefix("ksv"))?;
    let (pid, seq) = rest.split_once('-')?;
    u32::from_str_radix(seq, 16).ok()?;
    u32::from_str_radix(pid, 16).ok()
}

/// Removes the bridges, veths and namespaces of kubesims that are gone.
fn clean_stale() {
    let mut lines = String::new();
    for line in ip_output(&["-o", "link", "show"])
        .unwrap_or_default()
        .lines()
    {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if owner(name).is_some_and(|p| !alive(p)) {
            lines.push_str(&format!("link del {name}\n"));
        }
    }
    for line in ip_output(&["netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if owner(name).is_some_and(|p| !alive(p)) {
            lines.push_str(&format!("netns del {name}\n"));
        }
    }
    if !lines.is_empty() {
        let _ = ip_batch(None, true, &lines);
    }
}

/// A prefix `a.b.c.d/len` (a bare address is a /32).
fn parse_prefix(s: &str) -> Option<(u32, u32)> {
    let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len.parse().ok()?))
}

fn mask(len: u32) -> u32 {
    if len == 0 { 0 } else { u32::MAX << (32 - len) }
}

/// Whether two prefixes share an address.
pub fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    let len = a.1.min(b.1);
    a.0 & mask(len) == b.0 & mask(len)
}

/// Every IPv4 prefix this machine routes or has an address in (the
/// default route aside).
fn taken() -> std::io::Result<Vec<(u32, u32)>> {
    const TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "anycast",
        "unreachable",
        "blackhole",
        "prohibit",
        "throw",
        "nat",
    ];
    let mut out = Vec::new();
    for line in ip_output(&["-4", "-o", "route", "show", "table", "all"])?.lines() {
        let mut words = line.split_whitespace();
        let mut first = words.next().unwrap_or_default();
        if TYPES.contains(&first) {
            first = words.next().unwrap_or_default();
        }
        out.extend(parse_prefix(first));
    }
    for line in ip_output(&["-4", "-o", "addr", "show"])?.lines() {
        let mut words = line.split_whitespace();
        if words.any(|w| w == "inet") {
            out.extend(words.next().and_then(parse_prefix));
        }
    }
    Ok(out)
}

/// [`Network::pod_ip`] on the /24 at `subnet`. Pure.
pub fn next_pod_ip(
    subnet: Ipv4Addr,
    node: &str,
    last: Option<Ipv4Addr>,
    used: &BTreeSet<Ipv4Addr>,
) -> Option<Ipv4Addr> {
    let base = u32::from(subnet);
    let (start, end) = node_block(node);
    let after = last
        .map(|l| u32::from(l).wrapping_sub(base))
        .filter(|o| (start..end).contains(o))
        .map_or(start, |o| o + 1);
    let span = end - start;
    (0..span)
        .map(|i| start + (after - start + i) % span)
        .chain(2..255)
        .map(|o| Ipv4Addr::from(base + o))
        .find(|ip| !used.contains(ip))
}

/// The offsets `[start, end)` of `node`'s block of Pod addresses in the
/// /24: one of eight blocks of 32, chosen by the node's name (a re-created
/// Node keeps its block), without the network, gateway and broadcast
/// addresses.
pub fn node_block(node: &str) -> (u32, u32) {
    let h = node.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let i = h % 8;
    ((i * 32).max(2), (i * 32 + 32).min(255))
}

/// The first /24 of the block from `start` on (wrapping) that overlaps
/// nothing `taken`.
pub fn free_subnet(taken: &[(u32, u32)], start: u32) -> Option<Ipv4Addr> {
    let count = 1u32 << (PREFIX_LEN - BLOCK_LEN);
    (0..count)
        .map(|i| u32::from(BLOCK) + (((start + i) % count) << (32 - PREFIX_LEN)))
        .find(|net| !taken.iter().any(|t| overlaps(*t, (*net, PREFIX_LEN))))
        .map(Ipv4Addr::from)
}

/// A kubesim's Pod network: its bridge and /24.
#[derive(Debug)]
pub struct Network {
    bridge: String,
    subnet: Ipv4Addr,
    up: Mutex<bool>,
}

impl Network {
    /// Cleans the leftovers of dead kubesims, then creates a bridge with
    /// the gateway of a free /24.
    pub fn create() -> std::io::Result<Network> {
        let lock = std::fs::File::create(LOCK)?;
        lock.lock()?;
        clean_stale();
        let start = (crate::kubesim::random_u64() % (1 << (PREFIX_LEN - BLOCK_LEN))) as u32;
        let subnet = free_subnet(&taken()?, start)
            .ok_or_else(|| err("no free /24 left in 10.244.0.0/14 for the Pod network"))?;
        let bridge = format!(
            "ksb{:x}-{:x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let net = Network {
            bridge,
            subnet,
            up: Mutex::new(true),
        };
        let b = &net.bridge;
        ip_batch(
            None,
            false,
            &format!(
                "link add {b} type bridge\naddr add {}/{PREFIX_LEN} dev {b}\nlink set {b} up\n",
                net.gateway()
            ),
        )?;
        Ok(net)
    }

    /// The host's address on the Pod network (`.1`): where Pods reach
    /// kubesim.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet) + 1)
    }

    /// Whether `ip` is on this Pod network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        overlaps((u32::from(ip), 32), (u32::from(self.subnet), PREFIX_LEN))
    }

    /// The bridge's name.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// A Pod address for a Pod of `node`, as the host-local IPAM of a node
    /// hands them out from the node's `podCIDR`: the next free one after
    /// the last it gave (round robin, not lowest-free: a re-created Pod
    /// gets a new address). Each node has its own block of the /24
    /// ([`node_block`]); when it is full, any free address of the /24.
    pub fn pod_ip(
        &self,
        node: &str,
        last: Option<Ipv4Addr>,
        used: &BTreeSet<Ipv4Addr>,
    ) -> Option<Ipv4Addr> {
        next_pod_ip(self.subnet, node, last, used)
    }

    /// Creates a Pod's namespace with `ip` on its `eth0`.
    pub fn add_pod(&self, ip: Ipv4Addr) -> std::io::Result<PodNet> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let pod = PodNet {
            name: format!("ksim-{pid}-{seq}"),
            veth: format!("ksv{pid:x}-{seq:x}"),
        };
        let (ns, veth, br) = (&pod.name, &pod.veth, &self.bridge);
        ip_batch(
            None,
            false,
            &format!(
                "netns add {ns}\nlink add {veth} type veth peer name eth0 netns {ns}\nlink set {veth} master {br} up\n"
            ),
        )?;
        ip_batch(
            Some(ns),
            false,
            &format!(
                "link set lo up\naddr add {ip}/{PREFIX_LEN} dev eth0\nlink set eth0 up\nroute add {} dev eth0\n",
                super::proxy::SERVICE_CIDR
            ),
        )?;
        Ok(pod)
    }

    /// Removes the bridge (once).
    pub fn teardown(&self) {
        let mut up = self.up.lock().unwrap_or_else(|e| e.into_inner());
        if *up {
            *up = false;
            let _ = ip_batch(None, true, &format!("link del {}\n", self.bridge));
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A Pod's network namespace; removed (with its veth) when dropped.
#[derive(Debug)]
pub struct PodNet {
    name: String,
    veth: String,
}

impl PodNet {
    /// The namespace's name (`ip netns`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end of the Pod's veth.
    pub fn veth(&self) -> &str {
        &self.veth
    }

    /// The namespace file to enter (`nsenter --net=`).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }
}

impl Drop for PodNet {
    fn drop(&mut self) {
        // Deleting one end of a veth deletes both; the namespace itself
        // goes with its last process.
        let _ = ip_batch(
            None,
            true,
            &format!("link del {}\nnetns del {}\n", self.veth, self.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ips_come_round_robin_from_the_nodes_block() {
        let subnet = Ipv4Addr::new(10, 244, 7, 0);
        let (start, end) = node_block("node-a-0");
        assert!(start >= 2 && end <= 255 && end - start >= 30);
        let mut used = BTreeSet::new();
        let first = next_pod_ip(subnet, "node-a-0", None, &used).unwrap();
        assert_eq!(u32::from(first) - u32::from(subnet), start);
        used.insert(first);
        let second = next_pod_ip(subnet, "node-a-0", Some(first), &used).unwrap();
        assert_eq!(u32::from(second), u32::from(first) + 1);
        // The first Pod goes; its address is not handed out again at once.
        used.remove(&first);
        let third = next_pod_ip(subnet, "node-a-0", Some(second), &used).unwrap();
        assert_eq!(u32::from(third), u32::from(second) + 1);
        // The block wraps around to the addresses freed.
        let last = Ipv4Addr::from(u32::from(subnet) + end - 1);
        let wrapped = next_pod_ip(subnet, "node-a-0", Some(last), &used).unwrap();
        assert_eq!(wrapped, first);
    }

    #[test]
    fn names_and_prefixes() {
        assert_eq!(owner("ksb1f-0"), Some(0x1f));
        assert_eq!(owner("ksv1f-a"), Some(0x1f));
        assert_eq!(owner("ksim-31-7"), Some(31));
        assert_eq!(owner("eth0"), None);
        assert_eq!(owner("ksbridge"), None);
        let p = |s| parse_prefix(s).expect("a prefix");
        assert!(overlaps(p("10.0.0.0/8"), p("10.244.3.0/24")));
        assert!(overlaps(p("10.244.3.7"), p("10.244.3.0/24")));
        assert!(!overlaps(p("10.244.4.0/24"), p("10.244.3.0/24")));
        assert_eq!(
            free_subnet(&[p("10.244.0.0/24")], 0),
            Some(Ipv4Addr::new(10, 244, 1, 0))
        );
        assert_eq!(free_subnet(&[], 1023), Some(Ipv4Addr::new(10, 247, 255, 0)));
        assert_eq!(free_subnet(&[p("10.0.0.0/8")], 5), None);
        assert_eq!(free_subnet(&[p("0.0.0.0/0")], 5), None);
    }
}
