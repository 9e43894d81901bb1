//! The real default files of the images (../shared/fixtures, beside the
//! repository), for the tests. Missing fixtures fail the tests loudly: a
//! renderer tested on nothing would pass silently.

use std::path::PathBuf;

/// The Cassandra versions whose default files are in the fixtures.
pub const CASSANDRA_VERSIONS: [&str; 3] = ["3.11", "4.1", "5.0"];

/// The fixtures directory.
pub fn dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures"
    ))
}

/// The text of a fixture file, by its path under the fixtures directory.
pub fn read(relative: &str) -> String {
    let path = dir().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} is missing or unreadable ({e}): the shared fixtures must be checked out \
             beside the repository (../shared/fixtures)",
            path.display()
        )
    })
}
