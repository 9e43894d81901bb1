//! What the sidecar records on the member's data volume, so that it lives
//! and dies with the data (`crds::contract::state_dir`): the markers
//! "bootstrapped", "decommissioned", "repair after replace" and "repair
//! cycle", and whether the volume holds data at
//! all. I/O (the file system), each write made durable before it counts.

use std::io::Write;
use std::path::{Path, PathBuf};

use crds::contract;
use thiserror::Error;

/// A marker could not be read or made durable.
#[derive(Debug, Error)]
#[error("{action} {path}: {source}")]
pub struct MarkerError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn failed(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MarkerError {
    let path = path.to_path_buf();
    move |source| MarkerError {
        action,
        path,
        source,
    }
}

/// Whether a data directory holds no data (a new or replaced disk). A fresh
/// ext4 volume has `lost+found`; the sidecar's own marker directory is not
/// data either.
pub fn data_dir_is_empty(data_dir: &Path) -> bool {
    match std::fs::read_dir(data_dir) {
        Err(_) => true,
        Ok(entries) => entries.flatten().all(|e| {
            let name = e.file_name();
            name == "lost+found" || name == ".cassandra-operator"
        }),
    }
}

/// The marker of a repair owed after a replace at the member's own
/// address (`member::repair`): written before Cassandra starts to replace,
/// removed once every keyspace is repaired. It lives in the sidecar's
/// state directory, with the data it is about.
pub fn repair_marker(data_dir: &Path) -> PathBuf {
    contract::state_dir(data_dir).join("repair-after-replace")
}

/// The marker of a scheduled repair's progress (`member::maintenance`):
/// the cycle it belongs to and the subranges repaired in it, rewritten
/// after each one, so that a repair stopped or crashed resumes with the
/// subranges left, and a new cycle starts afresh. Kept after the cycle
/// completes (the next request of the same cycle then has nothing left).
pub fn repair_cycle_marker(data_dir: &Path) -> PathBuf {
    contract::state_dir(data_dir).join("repair-cycle")
}

/// Writes `marker` atomically and durably: a temporary file beside it,
/// synced, renamed over it, and the directory synced, so that after a crash
/// at any moment the marker either exists whole or not at all.
pub fn write_marker(marker: &Path, content: &str) -> Result<(), MarkerError> {
    let dir = marker
        .parent()
        .ok_or_else(|| MarkerError {
            action: "finding the directory of",
            path: marker.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?
        .to_path_buf();
    std::fs::create_dir_all(&dir).map_err(failed("creating", &dir))?;
    let tmp = marker.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(failed("creating", &tmp))?;
    file.write_all(content.as_bytes())
        .map_err(failed("writing", &tmp))?;
    file.sync_all().map_err(failed("syncing", &tmp))?;
    std::fs::rename(&tmp, marker).map_err(failed("renaming over", marker))?;
    sync_dir(&dir)
}

/// Removes `marker` durably (nothing to do when it is absent).
pub fn remove_marker(marker: &Path) -> Result<(), MarkerError> {
    match std::fs::remove_file(marker) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(MarkerError {
                action: "removing",
                path: marker.to_path_buf(),
                source,
            });
        }
    }
    match marker.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// Empties the data volume of a node that left the ring, so that it can
/// start again as a new, bootstrapping member (Cassandra's own advice: "all
/// existing data is removed and the node is bootstrapped again"). The
/// decommission marker proves the data left the ring: it is written only
/// after operation mode DECOMMISSIONED was read back, and the streams that
/// led there copied every range elsewhere.
///
/// Crash-safe in this order: the bootstrapped marker goes first (a member
/// that has not bootstrapped never seeds itself), then the data, then the
/// decommission marker, so that a crash midway leaves the decommission
/// marker and the next start clears again.
pub fn clear_left_node(data_dir: &Path) -> Result<(), MarkerError> {
    let state = contract::state_dir(data_dir);
    remove_marker(&contract::bootstrapped_marker(data_dir))?;
    // The data a repair was owed for is going: the new member bootstraps.
    remove_marker(&repair_marker(data_dir))?;
    remove_marker(&repair_cycle_marker(data_dir))?;
    let entries = std::fs::read_dir(data_dir).map_err(failed("listing", data_dir))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == "lost+found" || path == state {
            continue;
        }
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(failed("removing", &path))?;
    }
    sync_dir(data_dir)?;
    remove_marker(&contract::decommission_marker(data_dir))
}

fn sync_dir(dir: &Path) -> Result<(), MarkerError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed("syncing", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_data_dirs() {
        let dir = tempfile::tempdir().unwrap();
        assert!(data_dir_is_empty(&dir.path().join("missing")));
        assert!(data_dir_is_empty(dir.path()));
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        write_marker(&contract::decommission_marker(dir.path()), "").unwrap();
        assert!(data_dir_is_empty(dir.path()));
        std::fs::create_dir(dir.path().join("data")).unwrap();
        assert!(!data_dir_is_empty(dir.path()));
        assert!(contract::decommission_marker(dir.path()).is_file());
    }

    #[test]
    fn a_marker_is_written_whole_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = contract::bootstrapped_marker(dir.path());
        write_marker(&marker, "NORMAL\n").unwrap();
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "NORMAL\n");
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(marker.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("bootstrapped")]);
        remove_marker(&marker).unwrap();
        assert!(!marker.exists());
        // Removing what is not there is no error.
        remove_marker(&marker).unwrap();
    }

    #[test]
    fn a_left_node_is_cleared_to_an_empty_volume() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        std::fs::create_dir(data.join("lost+found")).unwrap();
        std::fs::create_dir_all(data.join("data/system")).unwrap();
        std::fs::write(data.join("data/system/x.db"), "rows").unwrap();
        std::fs::create_dir(data.join("commitlog")).unwrap();
        std::fs::write(data.join(".fake-cassandra"), "host").unwrap();
        write_marker(&contract::bootstrapped_marker(data), "").unwrap();
        write_marker(&contract::decommission_marker(data), "").unwrap();
        write_marker(&repair_marker(data), "replaced 10.96.0.12\n").unwrap();
        write_marker(&repair_cycle_marker(data), "cycle 2026-11-27T10:00:00Z\n").unwrap();
        clear_left_node(data).unwrap();
        assert!(
            !repair_cycle_marker(data).exists(),
            "no repair progress of a node that left"
        );
        assert!(
            !repair_marker(data).exists(),
            "no repair owed by a new member"
        );
        assert!(data_dir_is_empty(data));
        assert!(data.join("lost+found").is_dir(), "the file system's own");
        assert!(!contract::bootstrapped_marker(data).exists());
        assert!(!contract::decommission_marker(data).exists());
        // Again, as after a crash: nothing left to do, no error.
        clear_left_node(data).unwrap();
    }
}
