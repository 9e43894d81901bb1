//! Real Apache Cassandra in the test world (DESIGN.md section 7, issue 28):
//! the jars Maven resolves for a release, laid out as the official
//! `cassandra:` image lays them out, started through the release's own
//! `bin/cassandra` with the real Jolokia JVM agent.
//!
//! - [`release`]: what `scripts/fetch-cassandra <version>` cached under
//!   `target/` (jars, Java, the Jolokia agent). Reads files only.
//! - [`image`]: the image's file system under a root directory and the
//!   environment its Dockerfile sets. File system I/O.
//! - [`config`]: `cassandra.yaml` rendered from the release's default with
//!   a few keys changed. Pure.
//! - [`node`]: one node as a process, its Jolokia agent, and its stop.
//!   Process and HTTP I/O.
//! - [`ownership`]: the partition keys a node holds on its disk (the
//!   release's `sstabledump`) and the replicas of a key on a ring.
//!   Process and file I/O; the ring arithmetic is pure.
//! - [`nodetool`]: Cassandra's own nodetool from the release's jars,
//!   against a node's local JMX port (in a Pod's network namespace too).
//!   Process I/O; its output's parsers are pure.
//!
//! Nothing here skips: a release that was not fetched is an error naming
//! the command that fetches it.

pub mod config;
pub mod image;
pub mod node;
pub mod nodetool;
pub mod ownership;
pub mod release;

use std::path::PathBuf;

pub use config::{NodeAddresses, render_cassandra_yaml};
pub use image::Image;
pub use node::{Node, NodeOptions, Ports, STORAGE_SERVICE};
pub use nodetool::NodeTool;
pub use release::Release;

/// The 4.1 release the fixtures' `conf/` and `bin/` match (SOURCES.md: the
/// conf files are the blobs of the 4.1.8 release preparation).
pub const VERSION_4_1: &str = "4.1.8";

/// The 5.0 release the fixtures' `conf/` and `bin/` match (SOURCES.md: the
/// conf files are the blobs of the `cassandra-5.0.3` tag).
pub const VERSION_5_0: &str = "5.0.3";

/// Release `version` as `scripts/fetch-cassandra` cached it, laid out as
/// the official image in a new temporary directory (removed when the
/// returned guard drops): what a test of a lone node starts from.
pub fn laid_out(version: &str) -> Result<(tempfile::TempDir, Release, Image), Error> {
    let release = Release::cached(version)?;
    let root = tempfile::tempdir().map_err(|source| Error::LayOut {
        path: std::env::temp_dir(),
        source,
    })?;
    let image = Image::lay_out(root.path(), &release)?;
    Ok((root, release, image))
}

/// Errors of preparing, starting and stopping a real Cassandra node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "Cassandra {version} is not fetched ({detail}): run `scripts/fetch-cassandra {version}` \
         (once per machine; scripts/test runs it)"
    )]
    FindRelease { version: String, detail: String },
    #[error("the release's bin/ and conf/ are not in {0}: put shared/ beside the repository")]
    FindFixtures(PathBuf),
    #[error("laying out the image at {path}: {source}")]
    LayOut {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rendering cassandra.yaml: {0}")]
    RenderConfig(String),
    #[error("finding a free port: {0}")]
    FreePort(std::io::Error),
    #[error("starting {path}: {source}")]
    Start {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cassandra exited ({status}) before {waited_for}; the end of its output:\n{output}")]
    Exited {
        status: String,
        waited_for: String,
        output: String,
    },
    #[error(
        "cassandra was not {waited_for} after {seconds} s (last answer: {last}); the end of its output:\n{output}"
    )]
    Timeout {
        waited_for: String,
        seconds: u64,
        last: String,
        output: String,
    },
    #[error("jolokia {request}: {detail}")]
    Jolokia { request: String, detail: String },
    #[error("signalling cassandra (pid {pid}): {source}")]
    Signal { pid: i32, source: nix::Error },
    #[error("waiting for cassandra: {0}")]
    Wait(std::io::Error),
    #[error("nodetool {args}: {detail}")]
    Nodetool { args: String, detail: String },
}
