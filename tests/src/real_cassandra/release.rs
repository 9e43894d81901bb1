//! What `scripts/fetch-cassandra <version>` cached for one release: the
//! jars of its `lib/`, the Java it runs on and the Jolokia JVM agent, with
//! the release's `bin/` and `conf/` from `shared/fixtures`. Reads files
//! only.

use std::path::{Path, PathBuf};

use super::Error;

/// The Jolokia JVM agent the operator image ships (init/Dockerfile: the
/// main artifact of `org.jolokia:jolokia-jvm:1.7.2`).
pub const JOLOKIA_AGENT: &str = "jolokia/jolokia-jvm-1.7.2.jar";

/// One fetched Cassandra release.
#[derive(Debug, Clone)]
pub struct Release {
    /// e.g. "4.1.8".
    pub version: String,
    /// The jars of the release's `lib/` (Maven's runtime closure of
    /// `cassandra-all`).
    pub lib: PathBuf,
    /// The Java the release runs on (`JAVA_HOME` in the image).
    pub java_home: PathBuf,
    /// The Jolokia JVM agent jar.
    pub jolokia_agent: PathBuf,
    /// The release's `bin/` and `conf/` files (`shared/fixtures/cassandra/<major.minor>`).
    pub fixtures: PathBuf,
}

impl Release {
    /// The release `version` as `scripts/fetch-cassandra` cached it under
    /// the repository's `target/`, with the fixtures beside the repository.
    pub fn cached(version: &str) -> Result<Release, Error> {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
        let repo = tests.parent().unwrap_or(tests);
        let fixtures = repo.join("../shared/fixtures");
        Release::cached_in(&repo.join("target"), &fixtures, version)
    }

    /// The release `version` cached under `target`, with `fixtures` holding
    /// `cassandra/<major.minor>/{bin,conf files}`.
    pub fn cached_in(target: &Path, fixtures: &Path, version: &str) -> Result<Release, Error> {
        let missing = |detail: String| Error::FindRelease {
            version: version.to_string(),
            detail,
        };
        let dir = target.join("cassandra").join(version);
        if !dir.join(".fetched").is_file() {
            return Err(missing(format!("no {}", dir.join(".fetched").display())));
        }
        let java_file = dir.join("JAVA_HOME");
        let java_home = std::fs::read_to_string(&java_file)
            .map_err(|e| missing(format!("{}: {e}", java_file.display())))?;
        let java_home = PathBuf::from(java_home.trim());
        if !java_home.join("bin/java").is_file() {
            return Err(missing(format!(
                "no {}",
                java_home.join("bin/java").display()
            )));
        }
        let jolokia_agent = target.join("cassandra").join(JOLOKIA_AGENT);
        if !jolokia_agent.is_file() {
            return Err(missing(format!("no {}", jolokia_agent.display())));
        }
        let minor = version.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
        let fixtures = fixtures.join("cassandra").join(minor);
        if !fixtures.join("bin/cassandra").is_file() || !fixtures.join("cassandra.yaml").is_file() {
            return Err(Error::FindFixtures(fixtures));
        }
        Ok(Release {
            version: version.to_string(),
            lib: dir.join("lib"),
            java_home,
            jolokia_agent,
            fixtures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfetched_release_names_the_fetch_command() {
        let target = tempfile::tempdir().unwrap();
        let err = Release::cached_in(target.path(), target.path(), "4.1.8").unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("run `scripts/fetch-cassandra 4.1.8`"),
            "{message}"
        );
    }
}
