//! Early wake-ups from inotify (I/O). The reloader's polling alone is
//! correct; this only lets it look at once when something happens in the
//! directory of a watched file (a write, or the kubelet renaming a new
//! `..data` into place), instead of at the next poll. inotify misses changes
//! on some file systems (NFS, FUSE) and outside the watched directories, and
//! a node may run out of inotify instances: then the reloader polls, as
//! before.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tracing::debug;

/// tokio's `AsyncFd` wants `AsRawFd`; nix's `Inotify` offers `AsFd`.
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Registers the inotify descriptor with tokio's reactor.
// The one unsafe call of the reloader: tokio's safe `AsyncFd::new` is
// deprecated (tokio#8587) in favour of this `unsafe fn`, whose contract is
// that the descriptor stays open and the same for the AsyncFd's lifetime.
#[allow(unsafe_code)]
fn register(fd: Fd) -> io::Result<AsyncFd<Fd>> {
    // SAFETY: `Fd` owns the inotify `OwnedFd` (nix's `Inotify`), is never
    // replaced or closed while inside the AsyncFd, and `as_raw_fd` always
    // returns that descriptor; it is closed only when the AsyncFd drops it.
    unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)
}

/// Watches the directories of the watched files.
pub struct DirWatcher {
    fd: AsyncFd<Fd>,
    watching: HashMap<PathBuf, WatchDescriptor>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher")
            .field("watching", &self.watching.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What is worth a look: the contents of a directory changing, or the
/// directory itself going away.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// The directory whose entries change when `file` is written, replaced or
/// swapped by the kubelet.
pub fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl DirWatcher {
    /// Must run inside a tokio runtime with I/O enabled.
    pub fn new() -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(DirWatcher {
            fd: register(Fd(inotify))?,
            watching: HashMap::new(),
        })
    }

    /// Watches each of `dirs` that exists and is not watched yet (a
    /// directory that appears later is picked up by a later call).
    pub fn ensure(&mut self, dirs: impl IntoIterator<Item = PathBuf>) {
        for dir in dirs {
            if self.watching.contains_key(&dir) {
                continue;
            }
            match self.fd.get_ref().0.add_watch(&dir, mask()) {
                Ok(wd) => {
                    debug!(dir = %dir.display(), "inotify watch added");
                    self.watching.insert(dir, wd);
                }
                Err(e) => debug!(dir = %dir.display(), error = %e, "no inotify watch (yet)"),
            }
        }
    }

    /// Waits for events and consumes them. Watches the kernel dropped (the
    /// directory was deleted) are forgotten, so that `ensure` adds them again.
    pub async fn changed(&mut self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.get_inner().0.read_events() {
                Ok(events) => {
                    let dropped: Vec<WatchDescriptor> = events
                        .iter()
                        .filter(|e| e.mask.contains(AddWatchFlags::IN_IGNORED))
                        .map(|e| e.wd)
                        .collect();
                    if !dropped.is_empty() {
                        self.watching.retain(|_, wd| !dropped.contains(wd));
                    }
                    return Ok(());
                }
                Err(Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_directory_of_a_file() {
        assert_eq!(
            dir_of(Path::new("/etc/podinfo/labels")),
            Path::new("/etc/podinfo")
        );
        assert_eq!(dir_of(Path::new("labels")), Path::new("."));
        assert_eq!(dir_of(Path::new("/labels")), Path::new("/"));
    }

    #[tokio::test]
    async fn a_rename_into_a_watched_directory_wakes_and_a_deleted_one_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("volume");
        std::fs::create_dir(&sub).unwrap();
        let mut w = DirWatcher::new().unwrap();
        w.ensure([sub.clone(), dir.path().join("absent")]);
        assert_eq!(w.watching.len(), 1);

        std::fs::write(dir.path().join("tmp"), "x").unwrap();
        std::fs::rename(dir.path().join("tmp"), sub.join("labels")).unwrap();
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("no wake-up")
            .unwrap();

        std::fs::remove_dir_all(&sub).unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !w.watching.is_empty() {
                w.changed().await.unwrap();
            }
        })
        .await
        .expect("the deleted directory's watch was kept");
    }
}
