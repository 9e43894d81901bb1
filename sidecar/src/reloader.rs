//! The reloader: watches files and signals processes when their content
//! changes. Not built yet (issue: Reloader).

use std::path::PathBuf;

/// `cassandra-operator reloader`: watch mounted files (downward-API labels, a
/// ConfigMap) and send a signal (SIGHUP by default) to every process of a
/// given name whenever their content changes.
#[derive(clap::Args, Debug, Clone)]
pub struct ReloaderArgs {
    /// A file to watch; repeat for several.
    #[arg(long = "watch", value_name = "PATH", required = true)]
    pub watch: Vec<PathBuf>,
    /// Name of the process(es) to signal (comm, or the basename of argv[0]).
    #[arg(long, value_name = "NAME")]
    pub process: String,
}
