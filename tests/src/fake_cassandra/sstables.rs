//! The fake node's sstables on its data volume: named as the Cassandra of
//! its line names them, so that what reads the data directory (the
//! sidecar's old-format gauge, a person with `ls`) sees what it would see
//! under a real node. I/O (files), over a pure naming part.
//!
//! The copies themselves live in the ring model; the files stand for them.
//! A flush writes one sstable per keyspace whose copy count changed since
//! its last one (the file holds the count), as a memtable flush adds an
//! sstable and never rewrites one. Files of an older version stay (the node
//! reads them: `BigVersion.isCompatible`) until `upgradesstables` rewrites
//! them (`CompactionManager.performSSTableRewrite`: every sstable whose
//! version is not its format's latest, or all of them without
//! `excludeCurrentVersion`).
//!
//! Names, after `Descriptor` and the format classes (3.0+ layout):
//! `<data dir>/<keyspace>/<table>-<table id, 32 hex>/<version>-<generation>-<format>-<Component>`,
//! e.g. `nb-1-big-Data.db`; versions from `BigFormat.BigVersion` (`me`
//! 3.11.11+, `nb` 4.0 and 4.1, and 5.0 by `storage_compatibility_mode`:
//! `nb` under CASSANDRA_4, `oa` past it) and `BtiFormat` (`da`, 5.0); with `uuid_sstable_identifiers_enabled` the
//! generation is a time-UUID in `UUIDBasedSSTableId`'s base-36 text
//! (`3fw2_0tj4_1ufq82ikvs9xhng9b6`-like) instead of a number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The table every keyspace's keys are in (the ring model has no tables).
pub const TABLE: &str = "kv";

/// The components a flush writes besides `Data.db` (a compressed big
/// sstable's set, abridged).
const COMPONENTS: [&str; 3] = ["Statistics.db", "Digest.crc32", "TOC.txt"];

/// How the node writes sstables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// The version it writes (`nb`).
    pub version: String,
    /// `big` or `bti`.
    pub name: String,
    /// The latest big version of its line (what `upgradesstables` leaves
    /// alone among big files).
    pub big_latest: String,
    /// UUID-based generations.
    pub uuid_ids: bool,
}

impl Format {
    pub fn new(version: &str, name: &str, uuid_ids: bool) -> Self {
        // A node that writes bti runs 5.0 outside CASSANDRA_4.
        let big_latest = if name == "bti" { "oa" } else { version };
        Format {
            version: version.to_string(),
            name: name.to_string(),
            big_latest: big_latest.to_string(),
            uuid_ids,
        }
    }

    /// Whether a file of `version` in format `name` is its format's latest
    /// (`Version.isLatestVersion`).
    pub fn is_latest(&self, version: &str, name: &str) -> bool {
        match name {
            "bti" => version == "da",
            _ => version == self.big_latest,
        }
    }
}

/// One sstable's `Data.db`, parsed from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    pub path: PathBuf,
    pub version: String,
    pub generation: String,
    pub format: String,
}

/// Parses `<version>-<generation>-<format>-Data.db`.
pub fn parse_data_file(path: &Path) -> Option<DataFile> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix("-Data.db")?;
    let mut parts = stem.splitn(3, '-');
    let version = parts.next()?;
    let generation = parts.next()?;
    let format = parts.next()?;
    (version.len() == 2 && !generation.is_empty()).then(|| DataFile {
        path: path.to_path_buf(),
        version: version.to_string(),
        generation: generation.to_string(),
        format: format.to_string(),
    })
}

/// The table directory of `keyspace`'s keys: `<keyspace>/kv-<id>`, the id
/// a stable 32-hex-digit name (a table's UUID without dashes).
pub fn table_dir(data_dir: &Path, keyspace: &str) -> PathBuf {
    let id = crate::ring::hash3_x64_128(format!("{keyspace}.{TABLE}").as_bytes(), 0);
    data_dir
        .join(keyspace)
        .join(format!("{TABLE}-{:016x}{:016x}", id.0, id.1))
}

/// The sstables of one node's data directory and what it last flushed.
#[derive(Debug)]
pub struct Sstables {
    data_dir: PathBuf,
    format: Format,
    /// The next numeric generation (or UUID sequence).
    next: u64,
    /// Keyspace -> copy count of its newest sstable.
    flushed: BTreeMap<String, usize>,
}

fn data_files(dir: &Path) -> Vec<DataFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| parse_data_file(&e.path()))
        .collect()
}

/// A generation's order: numbers by value, UUID ones after them by text.
fn generation_key(g: &str) -> (u64, String) {
    match g.parse::<u64>() {
        Ok(n) => (n, String::new()),
        Err(_) => (u64::MAX, g.to_string()),
    }
}

impl Sstables {
    /// Takes stock of what `data_dir` holds (the files of an earlier run,
    /// of any version).
    pub fn open(data_dir: &Path, format: Format) -> Self {
        let mut next = 1;
        let mut flushed = BTreeMap::new();
        if let Ok(keyspaces) = std::fs::read_dir(data_dir) {
            for ks in keyspaces.filter_map(Result::ok) {
                let Some(name) = ks.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let files = data_files(&table_dir(data_dir, &name));
                for f in &files {
                    if let Ok(n) = f.generation.parse::<u64>() {
                        next = next.max(n + 1);
                    }
                }
                if let Some(newest) = files.iter().max_by_key(|f| generation_key(&f.generation))
                    && let Some(count) = std::fs::read_to_string(&newest.path)
                        .ok()
                        .and_then(|t| t.trim().parse().ok())
                {
                    flushed.insert(name, count);
                }
            }
        }
        Sstables {
            data_dir: data_dir.to_path_buf(),
            format,
            next,
            flushed,
        }
    }

    fn generation(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        if !self.format.uuid_ids {
            return n.to_string();
        }
        // UUIDBasedSSTableId's text: the time-UUID's parts in base 36,
        // joined with underscores (4_4_5_13 digits).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let base36 = |mut v: u64, width: usize| {
            let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
            let mut out = vec![b'0'; width];
            for slot in out.iter_mut().rev() {
                *slot = digits[(v % 36) as usize];
                v /= 36;
            }
            String::from_utf8(out).unwrap_or_default()
        };
        format!(
            "{}_{}_{}{}",
            base36(nanos / 1_000_000_000 / 86_400, 4),
            base36((nanos / 1_000_000_000) % 86_400, 4),
            base36(nanos % 1_000_000_000, 5),
            base36(n ^ (std::process::id() as u64) << 20, 13),
        )
    }

    fn write(&mut self, keyspace: &str, count: usize) -> std::io::Result<()> {
        let dir = table_dir(&self.data_dir, keyspace);
        std::fs::create_dir_all(&dir)?;
        let generation = self.generation();
        let prefix = format!("{}-{generation}-{}", self.format.version, self.format.name);
        for component in COMPONENTS {
            std::fs::write(dir.join(format!("{prefix}-{component}")), "")?;
        }
        // Data.db last: a reader that sees it sees a whole sstable.
        std::fs::write(dir.join(format!("{prefix}-Data.db")), format!("{count}\n"))?;
        Ok(())
    }

    /// Flushes: a new sstable for each keyspace whose copy count changed.
    /// The keyspaces flushed.
    pub fn flush(&mut self, copies: &BTreeMap<String, usize>) -> std::io::Result<Vec<String>> {
        let mut written = Vec::new();
        for (keyspace, count) in copies {
            if *count == 0 || self.flushed.get(keyspace) == Some(count) {
                continue;
            }
            self.write(keyspace, *count)?;
            self.flushed.insert(keyspace.clone(), *count);
            written.push(keyspace.clone());
        }
        Ok(written)
    }

    /// How many sstables [`Sstables::upgrade`] would rewrite.
    pub fn to_upgrade(&self, keyspace: &str, exclude_current_version: bool) -> usize {
        let keyspaces: Vec<String> = if keyspace.is_empty() {
            std::fs::read_dir(&self.data_dir)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .filter(|e| e.path().is_dir())
                        .filter_map(|e| e.file_name().to_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            vec![keyspace.to_string()]
        };
        keyspaces
            .iter()
            .flat_map(|ks| data_files(&table_dir(&self.data_dir, ks)))
            .filter(|f| !(exclude_current_version && self.format.is_latest(&f.version, &f.format)))
            .count()
    }

    /// `upgradesstables` of `keyspace` (every keyspace when empty): each
    /// sstable not at its format's latest version (all of them unless
    /// `exclude_current_version`) is rewritten into the version the node
    /// writes, under a new generation; the old files go. How many were
    /// rewritten.
    pub fn upgrade(
        &mut self,
        keyspace: &str,
        exclude_current_version: bool,
    ) -> std::io::Result<usize> {
        let keyspaces: Vec<String> = if keyspace.is_empty() {
            std::fs::read_dir(&self.data_dir)?
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        } else {
            vec![keyspace.to_string()]
        };
        let mut rewritten = 0;
        for ks in keyspaces {
            let dir = table_dir(&self.data_dir, &ks);
            let mut files = data_files(&dir);
            files.sort_by_key(|f| generation_key(&f.generation));
            for f in files {
                if exclude_current_version && self.format.is_latest(&f.version, &f.format) {
                    continue;
                }
                let count: usize = std::fs::read_to_string(&f.path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0);
                self.write(&ks, count)?;
                let prefix = format!("{}-{}-{}-", f.version, f.generation, f.format);
                for entry in std::fs::read_dir(&dir)?.filter_map(Result::ok) {
                    if entry
                        .file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with(&prefix))
                    {
                        std::fs::remove_file(entry.path())?;
                    }
                }
                rewritten += 1;
            }
        }
        Ok(rewritten)
    }
}

/// The format a node writes under its configuration.
pub fn format_of(config: &super::config::FakeConfig) -> Format {
    Format::new(
        config.sstable_version,
        config.sstable_format,
        config.uuid_sstable_identifiers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.ends_with("-Data.db"))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn flushes_write_named_sstables_and_upgrade_rewrites_the_old_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let copies = |n: usize| BTreeMap::from([("ks".to_string(), n)]);
        let mut v41 = Sstables::open(tmp.path(), Format::new("nb", "big", false));
        assert_eq!(v41.flush(&copies(10)).unwrap(), ["ks"]);
        assert!(v41.flush(&copies(10)).unwrap().is_empty(), "nothing new");
        v41.flush(&copies(12)).unwrap();
        let dir = table_dir(tmp.path(), "ks");
        assert_eq!(names(&dir), ["nb-1-big-Data.db", "nb-2-big-Data.db"]);
        assert!(dir.join("nb-1-big-TOC.txt").is_file());

        // 5.0 in its shipped CASSANDRA_4 mode on that data: writes `nb`
        // as 4.1 did, so upgradesstables has nothing to rewrite ("No
        // sstables to UPGRADE_SSTABLES").
        let mut v50 = Sstables::open(tmp.path(), Format::new("nb", "big", false));
        assert!(v50.flush(&copies(12)).unwrap().is_empty(), "flushed before");
        v50.flush(&copies(13)).unwrap();
        let three = ["nb-1-big-Data.db", "nb-2-big-Data.db", "nb-3-big-Data.db"];
        assert_eq!(names(&dir), three);
        assert_eq!(v50.upgrade("ks", true).unwrap(), 0);
        assert_eq!(names(&dir), three, "nothing rewritten");

        // Past CASSANDRA_4 (UPGRADING): 5.0 writes `oa`, and every `nb`
        // file is old.
        let mut upgrading = Sstables::open(tmp.path(), Format::new("oa", "big", false));
        upgrading.flush(&copies(14)).unwrap();
        assert_eq!(names(&dir)[3], "oa-4-big-Data.db");
        assert_eq!(upgrading.upgrade("ks", true).unwrap(), 3);
        assert_eq!(
            names(&dir),
            [
                "oa-4-big-Data.db",
                "oa-5-big-Data.db",
                "oa-6-big-Data.db",
                "oa-7-big-Data.db"
            ]
        );
        assert!(
            !dir.join("nb-1-big-TOC.txt").exists(),
            "every component goes"
        );
        assert_eq!(
            upgrading.upgrade("", true).unwrap(),
            0,
            "nothing old is left"
        );
        // Rewritten in generation order, each keeping its content.
        assert_eq!(
            std::fs::read_to_string(dir.join("oa-7-big-Data.db")).unwrap(),
            "13\n"
        );
        // Without excludeCurrentVersion (`upgradesstables -a`) every file
        // is rewritten, current ones too.
        assert_eq!(upgrading.upgrade("ks", false).unwrap(), 4);
        assert_eq!(names(&dir).len(), 4);
        assert!(names(&dir).iter().all(|n| n.starts_with("oa-")));
    }

    #[test]
    fn names_parse_as_descriptors_do() {
        let f = parse_data_file(Path::new(
            "/d/ks/t-00/oa-3fw2_0tj4_1ufq82ikvs9xhng9b6-bti-Data.db",
        ))
        .unwrap();
        assert_eq!((f.version.as_str(), f.format.as_str()), ("oa", "bti"));
        assert!(parse_data_file(Path::new("nb-1-big-Index.db")).is_none());
        let mut uuid = Sstables::open(Path::new("/nonexistent"), Format::new("oa", "big", true));
        let g = uuid.generation();
        assert_eq!(g.split('_').map(str::len).collect::<Vec<_>>(), [4, 4, 18]);
    }
}
