//! Which changes of `spec.version` Cassandra supports on a running cluster.
//! Pure.
//!
//! From Cassandra's own upgrade notes (NEWS.txt of each release, "Upgrading"
//! sections, and the upgrade page of the documentation,
//! <https://cassandra.apache.org/doc/latest/cassandra/managing/operating/upgrading.html>):
//!
//! - patch releases of one minor line may replace each other in any order
//!   (same sstable and messaging formats);
//! - 4.0 supports upgrades from 3.0 and 3.11, 4.1 from 3.11 and 4.0
//!   (this operator runs 3.11 as its oldest line);
//! - 5.0 supports upgrades from 4.0 and 4.1 only: a 3.11 cluster goes
//!   through 4.x first ("skipping a major" is refused: 5.0 cannot read 3.x
//!   sstables or speak its messaging version);
//! - no downgrade across minor lines: a node cannot read data files or
//!   system tables written by a newer minor.
//!
//! ScyllaDB has its own rules (one minor line at a time, enterprise
//! versioning since 2025.1): they are not judged here.

use std::fmt;

/// A database version read from an image tag: `4.1.8`, `5.0-jammy`, `3.11`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    /// The major and minor of a tag, when it starts with `MAJOR.MINOR`
    /// (anything after them, a patch or a suffix, is ignored); `None` for
    /// tags that name no version (`latest`, a digest).
    pub fn of_tag(tag: &str) -> Option<Version> {
        let mut numbers = tag.split(|c: char| !c.is_ascii_digit());
        let major = numbers.next()?.parse().ok()?;
        let rest = tag.strip_prefix(|c: char| c.is_ascii_digit())?;
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        let minor_text = rest.strip_prefix('.')?;
        let end = minor_text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(minor_text.len());
        let minor = minor_text[..end].parse().ok()?;
        Some(Version { major, minor })
    }

    /// The version in an image reference (`cassandra:4.1.8`,
    /// `reg:5000/db/cassandra:5.0-jammy`).
    pub fn of_image(image: &str) -> Option<Version> {
        let reference = image.split('@').next()?;
        let last = reference.rsplit('/').next()?;
        let (_, tag) = last.split_once(':')?;
        Version::of_tag(tag)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Why Cassandra cannot go from one version to another on a running cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnsupportedChange {
    /// To an older minor line.
    Downgrade { from: Version, to: Version },
    /// Over a major release (3.11 → 5.0), or from a line that the next
    /// major does not upgrade from.
    SkipsARelease {
        from: Version,
        to: Version,
        through: String,
    },
}

impl fmt::Display for UnsupportedChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnsupportedChange::Downgrade { from, to } => write!(
                f,
                "{from} to {to} is a downgrade across minor versions, which Cassandra does not support (a node cannot read data written by a newer version)"
            ),
            UnsupportedChange::SkipsARelease { from, to, through } => write!(
                f,
                "{from} to {to} skips a release: Cassandra {to} does not upgrade from {from}; upgrade to {through} first"
            ),
        }
    }
}

/// Whether a Cassandra cluster running `from` may be rolled to `to`.
pub fn cassandra_upgrade(from: Version, to: Version) -> Result<(), UnsupportedChange> {
    if to < from {
        return Err(UnsupportedChange::Downgrade { from, to });
    }
    if to.major == from.major {
        // a patch release, or the next minor line of the same major
        return Ok(());
    }
    let supported = match (from.major, from.minor, to.major) {
        // 4.x reads 3.0 and 3.11 data; 3.11 is the oldest line run here
        (3, 0 | 11, 4) => true,
        // 5.0 upgrades from 4.0 and 4.1
        (4, 0 | 1, 5) => true,
        // later majors: from the previous major's lines, as a rule
        (major, _, next) if major >= 5 && next == major + 1 => true,
        _ => false,
    };
    if supported {
        return Ok(());
    }
    let through = match from.major {
        3 => "4.1".to_string(),
        major => format!("{}.x", major + 1),
    };
    Err(UnsupportedChange::SkipsARelease { from, to, through })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(tag: &str) -> Version {
        Version::of_tag(tag).unwrap()
    }

    #[test]
    fn versions_are_read_from_tags_and_images() {
        assert_eq!(v("4.1.8"), Version { major: 4, minor: 1 });
        assert_eq!(
            v("3.11.6"),
            Version {
                major: 3,
                minor: 11
            }
        );
        assert_eq!(v("5.0-jammy"), Version { major: 5, minor: 0 });
        assert_eq!(v("5.0"), Version { major: 5, minor: 0 });
        assert_eq!(Version::of_tag("latest"), None);
        assert_eq!(Version::of_tag("5"), None);
        assert_eq!(Version::of_tag(""), None);
        assert_eq!(
            Version::of_image("my.reg:5000/db/cassandra:4.0.13"),
            Some(Version { major: 4, minor: 0 })
        );
        assert_eq!(Version::of_image("cassandra"), None);
        assert_eq!(Version::of_image("cassandra@sha256:abc"), None);
    }

    #[test]
    fn supported_upgrades_pass() {
        for (from, to) in [
            ("4.1.3", "4.1.8"),
            ("4.1.8", "4.1.3"), // patch releases in any order
            ("3.11.6", "3.11.19"),
            ("3.11.6", "4.0.13"),
            ("3.11.6", "4.1.8"),
            ("4.0.13", "4.1.8"),
            ("4.0.13", "5.0.3"),
            ("4.1.8", "5.0.3"),
            ("5.0.2", "5.0.3"),
        ] {
            assert_eq!(cassandra_upgrade(v(from), v(to)), Ok(()), "{from} -> {to}");
        }
    }

    #[test]
    fn downgrades_across_minors_and_skipped_majors_are_refused() {
        assert_eq!(
            cassandra_upgrade(v("5.0.3"), v("4.1.8")),
            Err(UnsupportedChange::Downgrade {
                from: v("5.0"),
                to: v("4.1")
            })
        );
        assert!(matches!(
            cassandra_upgrade(v("4.1.8"), v("4.0.13")),
            Err(UnsupportedChange::Downgrade { .. })
        ));
        let skipped = cassandra_upgrade(v("3.11.6"), v("5.0.3")).unwrap_err();
        assert_eq!(
            skipped.to_string(),
            "3.11 to 5.0 skips a release: Cassandra 5.0 does not upgrade from 3.11; upgrade to 4.1 first"
        );
        assert!(cassandra_upgrade(v("3.0.29"), v("5.0.3")).is_err());
    }
}
