//! Which partitions a real node holds on its disk, and which it should:
//! the partition keys of a table's sstables as the release's own
//! `sstabledump -e` lists them (`org.apache.cassandra.tools.SSTableExport`,
//! from the release's jars, run as `bin/sstabledump` runs it), and the
//! replicas of a key on a ring (its Murmur3 token, then the ring walked
//! clockwise). The cleanup scenarios judge a cleanup by these: after it,
//! a node holds exactly the keys it is a replica of. Process and file I/O
//! ([`SSTableDump`]); the ring arithmetic is pure.
//!
//! Replicas are walked as `SimpleStrategy` and `NetworkTopologyStrategy`
//! pick them in a datacenter of one rack: the owners of the first tokens
//! at or after the key's token, distinct, until the replication factor.
//! (More racks make NetworkTopologyStrategy prefer distinct racks: not
//! modelled, the callers use one rack.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner};

use super::nodetool::{DEBIAN_JAVA_17, client_options};
use super::{Error, Release};

/// The release's `sstabledump`, on the Java the release runs on (4.1's
/// Java 11 lets the tool reach into `java.io` as Cassandra does, which
/// Java 17 refuses without the server's `--add-opens`; it needs no RMI,
/// which that Java lacks).
#[derive(Debug, Clone)]
pub struct SSTableDump {
    java: PathBuf,
    jvm_args: Vec<String>,
}

impl SSTableDump {
    /// The `sstabledump` of `release`: its class path (the configuration
    /// directory, for `cassandra.yaml` and `logback-tools.xml`, then every
    /// jar of `lib/`), the client JVM options of `cassandra.in.sh` and the
    /// tool's own properties.
    pub fn of(release: &Release) -> Result<SSTableDump, Error> {
        let java = release.java_home.join("bin/java");
        if !java.is_file() {
            return Err(Error::FindRelease {
                version: release.version.clone(),
                detail: format!("no {} for sstabledump", java.display()),
            });
        }
        let conf = &release.fixtures;
        let mut jars: Vec<PathBuf> = std::fs::read_dir(&release.lib)
            .map_err(|source| Error::LayOut {
                path: release.lib.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .collect();
        jars.sort();
        let mut class_path = vec![conf.display().to_string()];
        class_path.extend(jars.iter().map(|j| j.display().to_string()));
        let mut args = vec!["-ea".to_string(), "-cp".into(), class_path.join(":")];
        let java_17 = release.java_home == Path::new(DEBIAN_JAVA_17);
        let dependent = [
            if java_17 { "jvm17-clients.options" } else { "" },
            "jvm11-clients.options",
        ]
        .iter()
        .filter(|f| !f.is_empty())
        .map(|f| conf.join(f))
        .find(|p| p.is_file());
        for file in std::iter::once(conf.join("jvm-clients.options")).chain(dependent) {
            let text = std::fs::read_to_string(&file).map_err(|source| Error::LayOut {
                path: file.clone(),
                source,
            })?;
            args.extend(client_options(&text));
        }
        let scratch = std::env::temp_dir();
        args.extend([
            "-Xmx256m".to_string(),
            "-XX:ParallelGCThreads=1".into(),
            format!("-Dcassandra.storagedir={}", scratch.display()),
            format!("-Dcassandra.logdir={}", scratch.display()),
            "-Dlogback.configurationFile=logback-tools.xml".into(),
            "org.apache.cassandra.tools.SSTableExport".into(),
        ]);
        Ok(SSTableDump {
            java,
            jvm_args: args,
        })
    }

    /// The partition keys of one sstable (`sstabledump -e <Data.db>`),
    /// text keys as they were written. The sstable must stay while it is
    /// read: give one of a snapshot (hard links Cassandra never deletes).
    pub fn keys(&self, data_file: &Path) -> Result<Vec<String>, Error> {
        let failed = |detail: String| Error::Nodetool {
            args: format!("sstabledump -e {}", data_file.display()),
            detail,
        };
        let out = Command::new(&self.java)
            .args(&self.jvm_args)
            .arg(data_file)
            .arg("-e")
            .output()
            .map_err(|e| failed(format!("spawn: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(failed(format!(
                "{}: {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        parse_keys(&stdout).ok_or_else(|| failed(format!("unreadable output: {stdout}")))
    }

    /// The partition keys of every sstable of `keyspace.table` under a
    /// snapshot named `tag` in the data directory `data` (the node's
    /// `data_file_directories` entry).
    pub fn snapshot_keys(
        &self,
        data: &Path,
        keyspace: &str,
        table: &str,
        tag: &str,
    ) -> Result<BTreeSet<String>, Error> {
        let mut keys = BTreeSet::new();
        for file in snapshot_data_files(data, keyspace, table, tag)? {
            keys.extend(self.keys(&file)?);
        }
        Ok(keys)
    }
}

/// The `*-Data.db` files of snapshot `tag` of `keyspace.table` under
/// `data` (`<data>/<keyspace>/<table>-<id>/snapshots/<tag>/`).
pub fn snapshot_data_files(
    data: &Path,
    keyspace: &str,
    table: &str,
    tag: &str,
) -> Result<Vec<PathBuf>, Error> {
    let listing = |path: &Path| {
        std::fs::read_dir(path)
            .map_err(|source| Error::LayOut {
                path: path.to_path_buf(),
                source,
            })
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .collect::<Vec<_>>()
            })
    };
    let mut files = Vec::new();
    for dir in listing(&data.join(keyspace))? {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.starts_with(&format!("{table}-")) {
            continue;
        }
        let snapshot = dir.join("snapshots").join(tag);
        if !snapshot.is_dir() {
            continue;
        }
        files.extend(
            listing(&snapshot)?
                .into_iter()
                .filter(|p| p.to_str().is_some_and(|n| n.ends_with("-Data.db"))),
        );
    }
    files.sort();
    Ok(files)
}

/// The keys of `sstabledump -e`'s output: a JSON array with, per
/// partition, the array of its key's components (one for a single-column
/// key). Pure.
pub fn parse_keys(text: &str) -> Option<Vec<String>> {
    let value: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    value
        .as_array()?
        .iter()
        .map(|partition| match partition {
            serde_json::Value::Array(parts) if parts.len() == 1 => {
                parts[0].as_str().map(str::to_string)
            }
            serde_json::Value::String(key) => Some(key.clone()),
            _ => None,
        })
        .collect()
}

/// The Murmur3 token of a text partition key (its UTF-8 bytes, as a
/// single-column key is serialized). Pure.
pub fn token(key: &str) -> i64 {
    Murmur3Partitioner.hash_one(key.as_bytes()).value()
}

/// The ring: token → owner, from `StorageService.TokenToEndpointMap`
/// (decimal tokens). Pure.
pub fn ring_of(map: &serde_json::Value) -> Option<BTreeMap<i64, String>> {
    map.as_object()?
        .iter()
        .map(|(t, owner)| Some((t.parse().ok()?, owner.as_str()?.to_string())))
        .collect()
}

/// The replicas of `token` on `ring`, `rf` of them: the owners of the
/// tokens from the first at or after it, clockwise, each once. Pure.
pub fn replicas(ring: &BTreeMap<i64, String>, token: i64, rf: usize) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for owner in ring
        .range(token..)
        .chain(ring.range(..token))
        .map(|(_, o)| o)
    {
        if found.len() == rf {
            break;
        }
        if !found.contains(owner) {
            found.push(owner.clone());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens real Cassandra 5.0.3 gives these keys
    /// (`StorageService.getToken`, asked by the e2e `facts` check): the
    /// driver's Murmur3 is Cassandra's.
    #[test]
    fn tokens_are_cassandras() {
        assert_eq!(token("k0000"), 3_642_939_009_702_325_007);
        assert_eq!(token("k1999"), 6_349_187_566_945_087_327);
        assert_eq!(token("w000001"), 1_430_765_358_617_686_799);
    }

    #[test]
    fn replicas_walk_the_ring_clockwise_each_owner_once() {
        let ring: BTreeMap<i64, String> = [(-100, "a"), (-50, "b"), (0, "a"), (50, "c"), (90, "d")]
            .into_iter()
            .map(|(t, o)| (t, o.to_string()))
            .collect();
        assert_eq!(replicas(&ring, -100, 3), ["a", "b", "c"]);
        assert_eq!(replicas(&ring, -99, 3), ["b", "a", "c"]);
        assert_eq!(replicas(&ring, 60, 3), ["d", "a", "b"]);
        // past the last token: wraps to the first
        assert_eq!(replicas(&ring, 91, 2), ["a", "b"]);
        assert_eq!(replicas(&ring, 91, 9), ["a", "b", "c", "d"]);
    }

    #[test]
    fn sstabledump_keys_are_read_and_junk_is_none() {
        assert_eq!(
            parse_keys("[ [ \"k1\" ], [ \"k2\" ] ]\n"),
            Some(vec!["k1".to_string(), "k2".to_string()])
        );
        assert_eq!(parse_keys("[]"), Some(vec![]));
        assert_eq!(parse_keys("Exception in thread"), None);
        assert_eq!(parse_keys("[[\"a\", \"b\"]]"), None);
    }
}
