//! The operator's tables of Cassandra's settings against the released
//! jars (issue 28): every setting a 3.11 user may have in a rack's
//! overrides (each top-level key 3.11's default cassandra.yaml sets or
//! mentions) is, for 4.1 and 5.0, either read by the release's
//! `org.apache.cassandra.config.Config` (a field of that name), or an old
//! name the release still reads ([`RENAMED_SETTINGS`]), or one the
//! operator refuses for that release ([`REMOVED_SETTINGS`], or a key it
//! refuses for every release). So a fragment written for 3.11 either
//! starts a 4.1 or 5.0 member or is refused with the key named, never
//! stops one at start-up with Cassandra's "Invalid yaml. Please remove
//! properties". And no removed setting is one the release reads.
//!
//! `Config`'s fields are read with `javap` from the jars
//! `scripts/fetch-cassandra` caches (scripts/test fetches both releases).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crds::overrides::{ADDED_SETTINGS, REMOVED_SETTINGS, RENAMED_SETTINGS, refused, unread_in};
use testworld::real_cassandra::{Release, VERSION_4_1, VERSION_5_0};

/// The public fields of the release's `Config`: the names its
/// cassandra.yaml may set.
fn config_fields(release: &Release) -> BTreeSet<String> {
    let jar = release
        .lib
        .join(format!("apache-cassandra-{}.jar", release.version));
    assert!(jar.is_file(), "{} is missing", jar.display());
    let out = Command::new("javap")
        .arg("-cp")
        .arg(&jar)
        .arg("org.apache.cassandra.config.Config")
        .output()
        .unwrap_or_else(|e| panic!("javap (the JDK's) cannot run: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: BTreeSet<String> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("public ") && !l.contains('('))
        .filter_map(|l| l.trim_end().strip_suffix(';')?.rsplit(' ').next())
        .map(str::to_string)
        .collect();
    // A sanity floor: Config has hundreds of settings.
    assert!(fields.len() > 300, "{}: {fields:?}", release.version);
    fields
}

/// The top-level keys a release's default file sets or mentions in a
/// comment (`key: value` or `# key: value`).
fn keys_of(major_minor: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../shared/fixtures/cassandra/{major_minor}/cassandra.yaml"
    ));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let key = regex::Regex::new(r"^(?:# ?)?([a-z][a-z0-9_]*):(?:\s|$)").unwrap();
    // Words of the comments' prose that read like a key: 4.1's
    // flush_compression options ("# table: Always flush with the same
    // compressor that the table uses").
    let prose = ["table"];
    let keys: BTreeSet<String> = text
        .lines()
        .filter_map(|l| key.captures(l))
        .map(|c| c[1].to_string())
        .filter(|k| !prose.contains(&k.as_str()))
        .collect();
    assert!(keys.len() > 100, "{keys:?}");
    keys
}

#[test]
fn every_setting_of_an_older_file_is_read_renamed_or_refused_by_the_newer_release() {
    // And 4.1's settings on 5.0: the next major upgrade.
    for (from, version) in [
        ("3.11", VERSION_4_1),
        ("3.11", VERSION_5_0),
        ("4.1", VERSION_5_0),
    ] {
        let keys = keys_of(from);
        let release = Release::cached(version).unwrap_or_else(|e| panic!("{e}"));
        let fields = config_fields(&release);
        let major_minor = &version[..3];
        let renamed_old: BTreeSet<&str> = RENAMED_SETTINGS
            .iter()
            .filter(|r| r.section.is_none() && r.releases.contains(&major_minor))
            .map(|r| r.old)
            .collect();
        let removed: BTreeSet<&str> = unread_in(Some(version)).iter().map(|r| r.key).collect();
        let unaccounted: Vec<&String> = keys
            .iter()
            .filter(|k| !fields.contains(*k))
            .filter(|k| !renamed_old.contains(k.as_str()))
            .filter(|k| !removed.contains(k.as_str()) && refused(k).is_none())
            .collect();
        assert!(
            unaccounted.is_empty(),
            "{version}: {from} settings the release does not read and the operator lets through \
             (the member would not start): {unaccounted:?}"
        );
        for r in REMOVED_SETTINGS
            .iter()
            .chain(ADDED_SETTINGS)
            .filter(|r| r.releases.contains(&major_minor))
        {
            assert!(
                !fields.contains(r.refused.key),
                "{version} reads {}: refusing it is wrong",
                r.refused.key
            );
        }
        // A setting refused before the release that added it is one that
        // release reads.
        for r in ADDED_SETTINGS
            .iter()
            .filter(|r| !r.releases.contains(&major_minor))
        {
            assert!(
                fields.contains(r.refused.key),
                "{version} does not read {}",
                r.refused.key
            );
        }
        // What the tables refuse is not the whole of 3.11's file: most of
        // it is read as written.
        let read = keys.iter().filter(|k| fields.contains(*k)).count();
        eprintln!(
            "{version}: of {from}'s {} settings, {read} read as named, {} under an old name, {} refused as removed",
            keys.len(),
            keys.iter()
                .filter(|k| renamed_old.contains(k.as_str()))
                .count(),
            keys.iter().filter(|k| removed.contains(k.as_str())).count(),
        );
    }
}
