//! The old-format sstables gauge: after a major upgrade a member keeps the
//! sstables the previous major wrote (it reads them) until `nodetool
//! upgradesstables` rewrites them, and the next major will not read them.
//! The sidecar counts, from the data directory's file names alone, the
//! `*-Data.db` files whose version is not the latest of their format for
//! the release the member runs, and serves the counts on `/metrics`.
//!
//! What "latest" is, from Cassandra's `BigFormat.BigVersion.current_version`
//! and `BtiFormat` (the sstable version is the first part of the name,
//! `<version>-<generation>-<format>-Data.db`): 3.0/3.11 `me` (3.0.25,
//! 3.11.11+; `md` before), 4.0/4.1 `nb`, 5.0 `nb` under
//! `storage_compatibility_mode: CASSANDRA_4` (the shipped setting, also
//! when the key is absent: 5.0 writes what 4.x reads, so nothing 4.1 left
//! is old yet) and `oa` under `UPGRADING`/`NONE` (5.0's `BigVersion`:
//! `current_version` is `nb` while the mode is before major 5, in 5.0.3 and
//! 5.0.8 alike; there is no `nc`), and `da` for the trie-indexed format. This is
//! what `upgradesstables` (`CompactionManager.performSSTableRewrite` with
//! `excludeCurrentVersion`) rewrites: an sstable whose version is not its
//! format's latest.
//!
//! The scan reads two levels of directories (`<keyspace>/<table>-<id>/`)
//! and no file content; it runs every few minutes, never per scrape.
//! [`old_format_counts`] and [`latest_versions`] are pure over a listing;
//! [`Gauge::refresh`] and [`refresh_every`] do the I/O.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::registry::Registry;

/// The latest sstable versions of the running release, per format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    /// `big` (every line).
    pub big: &'static str,
    /// `bti` (5.0+).
    pub bti: Option<&'static str>,
}

/// The latest versions for `release` (`4.1.8`) under the rendered
/// cassandra.yaml's `storage_compatibility_mode` (None: the setting is
/// absent). None for a release this sidecar does not know.
pub fn latest_versions(release: &str, storage_compatibility_mode: Option<&str>) -> Option<Latest> {
    let mut parts = release.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let patch: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some(match major {
        3 if minor == 0 && patch < 25 || minor == 11 && patch < 11 => Latest {
            big: "md",
            bti: None,
        },
        3 => Latest {
            big: "me",
            bti: None,
        },
        4 => Latest {
            big: "nb",
            bti: None,
        },
        5 => Latest {
            big: match storage_compatibility_mode {
                None | Some("CASSANDRA_4") => "nb",
                Some(_) => "oa",
            },
            bti: Some("da"),
        },
        _ => return None,
    })
}

/// Whether a `Data.db` file name is of an old version; None when the name
/// is not an sstable's.
fn is_old(file_name: &str, latest: &Latest) -> Option<bool> {
    let stem = file_name.strip_suffix("-Data.db")?;
    let mut parts = stem.splitn(3, '-');
    let version = parts.next()?;
    let _generation = parts.next()?;
    let format = parts.next()?;
    if version.len() != 2 {
        return None;
    }
    // Versions order as their letters do (`BigVersion`'s compareTo); a
    // newer one than the release's (a file a later major left) is not old.
    Some(match format {
        "bti" => latest.bti.is_some_and(|v| version < v),
        _ => version < latest.big,
    })
}

/// `<table>-<32 hex id>`: the table's name.
fn table_name(dir_name: &str) -> &str {
    match dir_name.rsplit_once('-') {
        Some((name, id)) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => dir_name,
    }
}

/// A data directory as (keyspace, table directory, file names).
pub type Listing = Vec<(String, String, Vec<String>)>;

/// Lists `data_dir` (`<keyspace>/<table>-<id>/<files>`): directories and
/// names only; snapshots and backups (subdirectories of a table's) are not
/// entered.
pub fn list(data_dir: &Path) -> Listing {
    let dirs = |p: &Path| -> Vec<(String, std::path::PathBuf)> {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
            .collect()
    };
    let mut out = Vec::new();
    for (keyspace, ks_path) in dirs(data_dir) {
        for (table, table_path) in dirs(&ks_path) {
            let files = std::fs::read_dir(&table_path)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| n.ends_with("-Data.db"))
                .collect();
            out.push((keyspace.clone(), table, files));
        }
    }
    out
}

/// (keyspace, table) -> how many of its sstables are of an old version;
/// tables without any are left out.
pub fn old_format_counts(listing: &Listing, latest: &Latest) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    for (keyspace, table_dir, files) in listing {
        let old = files
            .iter()
            .filter(|f| is_old(f, latest) == Some(true))
            .count() as u64;
        if old > 0 {
            *counts
                .entry((keyspace.clone(), table_name(table_dir).to_string()))
                .or_default() += old;
        }
    }
    counts
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    keyspace: String,
    table: String,
}

/// The gauges and the registry that serves them.
#[derive(Debug, Clone)]
pub struct Gauge {
    registry: Arc<Registry>,
    by_table: Family<TableLabels, PromGauge>,
    total: PromGauge,
    /// Whether the counts are a scan's (before the first, the gauges read
    /// 0, which is no count: the member Service's record waits for it).
    scanned: Arc<AtomicBool>,
}

impl Default for Gauge {
    fn default() -> Self {
        let mut registry = Registry::default();
        let by_table = Family::<TableLabels, PromGauge>::default();
        let total = PromGauge::default();
        registry.register(
            "cassandra_operator_sstables_old_format",
            "Sstables (Data.db files) of this member in a version older than the latest of their format for the release it runs, per table: run nodetool upgradesstables before the next major upgrade",
            by_table.clone(),
        );
        registry.register(
            "cassandra_operator_member_sstables_old_format",
            "Sstables of this member, all tables, in a version older than the latest of their format for the release it runs",
            total.clone(),
        );
        Gauge {
            registry: Arc::new(registry),
            by_table,
            total,
            scanned: Arc::default(),
        }
    }
}

impl Gauge {
    /// Sets the gauges to `counts` (tables no longer listed go).
    pub fn set(&self, counts: &BTreeMap<(String, String), u64>) {
        self.by_table.clear();
        for ((keyspace, table), n) in counts {
            self.by_table
                .get_or_create(&TableLabels {
                    keyspace: keyspace.clone(),
                    table: table.clone(),
                })
                .set(*n as i64);
        }
        self.total.set(counts.values().sum::<u64>() as i64);
        self.scanned.store(true, Ordering::Relaxed);
    }

    /// The member's count (the `cassandra_operator_member_sstables_old_format`
    /// gauge), once a scan set it; `None` before.
    pub fn total(&self) -> Option<u64> {
        self.scanned
            .load(Ordering::Relaxed)
            .then(|| self.total.get().max(0) as u64)
    }

    /// Scans `data_dir` and sets the gauges.
    pub fn refresh(&self, data_dir: &Path, latest: &Latest) {
        self.set(&old_format_counts(&list(data_dir), latest));
    }

    /// The text exposition (`/metrics`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Refreshes `gauge` from `data_dir` every `period` (the first at once),
/// off the async threads: a directory listing can block on a slow disk.
pub async fn refresh_every(
    gauge: Gauge,
    data_dir: std::path::PathBuf,
    latest: Latest,
    period: Duration,
) {
    loop {
        let (g, d, l) = (gauge.clone(), data_dir.clone(), latest.clone());
        let _ = tokio::task::spawn_blocking(move || g.refresh(&d, &l)).await;
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, names: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        for n in names {
            std::fs::write(dir.join(n), "").unwrap();
        }
    }

    /// A 5.0 member past CASSANDRA_4 (`UPGRADING`) on the data a 4.1 node
    /// left: the `nb` sstables are old, its own `oa` ones are not, nor are
    /// the other components or a snapshot's copies; a trie-indexed `da`
    /// one is not old either.
    #[test]
    fn counts_the_old_data_files_of_a_real_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let users = data.join("app/users-5f1c2b30a6e011ee8c90d5e6f1b2c3d4");
        touch(
            &users,
            &[
                "nb-1-big-Data.db",
                "nb-1-big-Index.db",
                "nb-1-big-TOC.txt",
                "nb-2-big-Data.db",
                "oa-3-big-Data.db",
                "oa-3-big-Statistics.db",
            ],
        );
        touch(
            &users.join("snapshots/before-upgrade"),
            &["nb-1-big-Data.db"],
        );
        touch(
            &data.join("app/events-00000000000000000000000000000001"),
            &["oa-3fw2_0tj4_1ufq82ikvs9xhng9b6-big-Data.db"],
        );
        touch(
            &data.join("system/local-7ad54392bcdd35a684174e047860b377"),
            &["nb-7-big-Data.db", "oa-8-big-Data.db"],
        );
        let listing = list(data);
        let v50 = latest_versions("5.0.3", Some("UPGRADING")).unwrap();
        let counts = old_format_counts(&listing, &v50);
        assert_eq!(
            counts,
            BTreeMap::from([
                (("app".into(), "users".into()), 2),
                (("system".into(), "local".into()), 1),
            ])
        );
        let gauge = Gauge::default();
        assert_eq!(gauge.total(), None, "no count before a scan");
        gauge.set(&counts);
        assert_eq!(gauge.total(), Some(3));
        let text = gauge.render();
        assert!(
            text.contains(
                "cassandra_operator_sstables_old_format{keyspace=\"app\",table=\"users\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("cassandra_operator_member_sstables_old_format 3"),
            "{text}"
        );

        // upgradesstables done: every old file rewritten.
        std::fs::remove_file(users.join("nb-1-big-Data.db")).unwrap();
        std::fs::remove_file(users.join("nb-2-big-Data.db")).unwrap();
        std::fs::remove_file(
            data.join("system/local-7ad54392bcdd35a684174e047860b377/nb-7-big-Data.db"),
        )
        .unwrap();
        gauge.refresh(data, &v50);
        let text = gauge.render();
        assert!(
            text.contains("cassandra_operator_member_sstables_old_format 0"),
            "{text}"
        );
        assert!(!text.contains("keyspace=\"app\""), "{text}");

        // A trie-indexed `da` file is of its format's latest version.
        touch(&users, &["da-9-bti-Data.db"]);
        let none = latest_versions("5.0.3", Some("NONE")).unwrap();
        assert_eq!(
            old_format_counts(&list(data), &none).values().sum::<u64>(),
            0
        );
        // On 4.1 its own `nb` files are current (and `oa` ones newer).
        let v41 = latest_versions("4.1.8", None).unwrap();
        assert!(old_format_counts(&listing, &v41).is_empty());
    }

    /// Real 5.0.3 under its shipped `storage_compatibility_mode:
    /// CASSANDRA_4` writes `nb` sstables, as 4.1 does, and its
    /// `upgradesstables` rewrites none of 4.1's ("No sstables to
    /// UPGRADE_SSTABLES", tests/e2e/real_upgrade.rs): `BigVersion`'s
    /// current version is `nb` while the mode is before 5 (`oa` from
    /// `UPGRADING`), in 5.0.3 as in 5.0.8; 5.0 has no `nc`. A gauge that
    /// counted 4.1's files there would stay above 0 whatever the user ran.
    #[test]
    fn a_5_0_member_in_its_shipped_cassandra_4_mode_counts_nothing_4_1_wrote() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        touch(
            &data.join("app/kv-5f1c2b30a6e011ee8c90d5e6f1b2c3d4"),
            &["nb-1-big-Data.db", "nb-2-big-Data.db"],
        );
        touch(
            &data.join("system/local-7ad54392bcdd35a684174e047860b377"),
            &["nb-7-big-Data.db", "nb-8-big-Data.db"],
        );
        for mode in [None, Some("CASSANDRA_4")] {
            let latest = latest_versions("5.0.3", mode).unwrap();
            assert_eq!(latest.big, "nb", "{mode:?}");
            assert!(
                old_format_counts(&list(data), &latest).is_empty(),
                "{mode:?}"
            );
        }
        // From UPGRADING on, 5.0 writes `oa`, and upgradesstables rewrites
        // every `nb` file.
        let upgrading = latest_versions("5.0.3", Some("UPGRADING")).unwrap();
        assert_eq!(
            old_format_counts(&list(data), &upgrading)
                .values()
                .sum::<u64>(),
            4
        );
    }

    #[test]
    fn latest_versions_per_release() {
        let big = |r: &str, m: Option<&str>| latest_versions(r, m).map(|l| l.big);
        assert_eq!(big("3.11.4", None), Some("md"));
        assert_eq!(big("3.11.19", None), Some("me"));
        assert_eq!(big("4.0.13", None), Some("nb"));
        assert_eq!(
            big("4.1.8", Some("NONE")),
            Some("nb"),
            "4.x has no such mode"
        );
        assert_eq!(big("5.0.3", None), Some("nb"));
        assert_eq!(big("5.0.3", Some("CASSANDRA_4")), Some("nb"));
        assert_eq!(big("5.0.3", Some("NONE")), Some("oa"));
        assert_eq!(big("5.0-beta1", Some("UPGRADING")), Some("oa"));
        assert_eq!(big("6.0.0", None), None);
        assert_eq!(big("latest", None), None);
    }
}
