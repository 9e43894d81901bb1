//! What the sidecar records on the member's data volume, so that it lives
//! and dies with the data (`crds::contract::state_dir`): the markers
//! "bootstrapped" and "decommissioned", and whether the volume holds data at
//! all. I/O (the file system), each write made durable before it counts.

use std::io::Write;
use std::path::{Path, PathBuf};

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

fn sync_dir(dir: &Path) -> Result<(), MarkerError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed("syncing", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::contract;

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
}
