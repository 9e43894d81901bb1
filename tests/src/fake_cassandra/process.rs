//! What every fake database process (the fake Cassandra, the fake
//! ScyllaDB node) does around the ring: names its data directory, keeps
//! its lease, waits for its signals. I/O.

use std::path::Path;
use std::time::{Duration, Instant};

use super::node::{NodeError, RingClient};

/// The data directory's identity in the ring: its path and its device and
/// inode. In the sim every container sees its volume at the same path (a
/// bind mount in its own mount namespace); the inode tells the volumes
/// apart, and a volume deleted and made again is a new disk.
pub fn data_dir_identity(dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)?;
    Ok(format!("{}@{}:{}", dir.display(), meta.dev(), meta.ino()))
}

/// Returns once the ring no longer runs this process (the kubelet reported
/// it dead, its disk was lost) or kubesim has been gone for 10 s, so that
/// no fake outlives its world. Reading the view every 250 ms is the lease.
pub async fn watch_ring(ring: &RingClient, host_id: &str) -> String {
    const GONE_FOR: Duration = Duration::from_secs(10);
    let mut unreachable_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match ring.view(host_id).await {
            Ok(view) if view.running => unreachable_since = None,
            Ok(_) => return "the ring has this node down (killed, or its disk was lost)".into(),
            Err(NodeError::Refused(r)) => return r.message,
            Err(e) => {
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= GONE_FOR {
                    return e.to_string();
                }
            }
        }
    }
}

/// The signal that stops the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Term,
    Interrupt,
    /// The handlers could not be installed.
    NoHandler,
}

/// Waits for SIGTERM or SIGINT.
pub async fn wait_for_signal() -> Stop {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Stop::NoHandler;
    };
    tokio::select! {
        _ = term.recv() => Stop::Term,
        _ = int.recv() => Stop::Interrupt,
    }
}
