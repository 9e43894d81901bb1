//! The kubelet's death reports: when a container of a database image
//! exits or is killed (any reason: SIGKILL from outside, OOM, a crash, the
//! kubelet's own kill), the fake ring hears it at once, as gossip notices
//! a peer's closed connection within a second, instead of waiting for the
//! process's lease to run out ([`crate::fake_cassandra::ring_service::LEASE`]). The
//! node is known by the address it announced (the pod IP, as the
//! operator configures it) or by its data directory: the ring names it
//! `<path>@<dev>:<inode>`, and a directory whose device and inode lie in
//! one of the container's volumes is this container's. Only the process
//! is down; its data is untouched. I/O.

use crate::fake_cassandra::ring_service::RingService;
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How many directories of one volume are looked at (a hostPath volume
/// may be large; data directories sit near a volume's root).
const WALK_LIMIT: usize = 2000;

/// `<dev>:<inode>` of the directories under `root` (itself included), to
/// a few levels, not following symlinks.
pub fn dir_inodes(root: &Path, depth: usize, out: &mut BTreeSet<String>) {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return;
    };
    if !meta.is_dir() || out.len() >= WALK_LIMIT {
        return;
    }
    out.insert(format!("{}:{}", meta.dev(), meta.ino()));
    if depth == 0 {
        return;
    }
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        dir_inodes(&e.path(), depth - 1, out);
    }
}

/// Whether the ring's node (its announced address, its data directory
/// id) is the one that ran in a container with this pod IP and these
/// volume directories' inodes.
pub fn designates(address: &str, data_dir: &str, pod_ip: &str, inodes: &BTreeSet<String>) -> bool {
    address == pod_ip
        || data_dir
            .rsplit_once('@')
            .is_some_and(|(_, at)| inodes.contains(at))
}

/// Reports the death of a database container whose volumes live at
/// `volumes` (host paths); the host ids marked down.
pub fn report(ring: &RingService, pod_ip: &str, volumes: &[PathBuf]) -> Vec<String> {
    let mut inodes = BTreeSet::new();
    for v in volumes {
        dir_inodes(v, 4, &mut inodes);
    }
    ring.report_dead(|address, data_dir| designates(address, data_dir, pod_ip, &inodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_address_or_by_a_directory_in_the_volumes() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let mut inodes = BTreeSet::new();
        dir_inodes(dir.path(), 4, &mut inodes);
        let meta = std::fs::metadata(&data).unwrap();
        let id = format!("/var/lib/cassandra/data@{}:{}", meta.dev(), meta.ino());
        assert!(designates("10.0.0.9", &id, "127.1.2.3", &inodes));
        assert!(designates("127.1.2.3", "/x@1:2", "127.1.2.3", &inodes));
        assert!(!designates("10.0.0.9", "/x@1:2", "127.1.2.3", &inodes));
        let other = tempfile::tempdir().unwrap();
        let mut none = BTreeSet::new();
        dir_inodes(other.path(), 4, &mut none);
        assert!(!designates("10.0.0.9", &id, "127.1.2.3", &none));
    }
}
