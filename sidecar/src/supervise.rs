//! The sidecar as the container's init: it runs the database as its child,
//! reaps every orphan that lands on it (it is PID 1 in the container, and a
//! child subreaper elsewhere), forwards SIGTERM and SIGINT to the database
//! after asking it to drain, and exits with the database's exit status so
//! that the kubelet restarts the container when the database dies.
//!
//! Reaping uses one process-wide thread calling `waitpid(-1)`, as tini and
//! dumb-init reap; the statuses of supervised children are handed to their
//! waiters from there (so the child is spawned with `std::process`, not
//! tokio's, which would reap it itself).

use std::collections::HashMap;
use std::future::Future;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// A supervision step that failed.
#[derive(Debug, Error)]
pub enum SuperviseError {
    /// The database process could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// Signal handlers, or the reaper thread, could not be set up.
    #[error("setting up signal handling: {0}")]
    Signals(#[source] std::io::Error),
}

/// How a child ended, as a shell reports it: its exit code, or 128 + the
/// signal that killed it.
pub fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, signal, _) => Some(128 + signal as i32),
        _ => None,
    }
}

type Statuses = Arc<Mutex<HashMap<i32, i32>>>;

struct Reaper {
    statuses: Statuses,
    reaped: watch::Sender<u64>,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();

/// Starts (once per process) the thread that reaps every child.
///
/// A thread blocked in `waitpid(-1)` rather than a task on SIGCHLD: it does
/// not depend on a runtime staying alive, and it cannot miss a signal. Every
/// child of the sidecar process must therefore be spawned through
/// [`Child::spawn`], since the reaper collects all statuses.
fn reaper() -> Result<&'static Reaper, SuperviseError> {
    let mut started = false;
    let reaper = REAPER.get_or_init(|| {
        started = true;
        let (reaped, _) = watch::channel(0u64);
        Reaper {
            statuses: Arc::default(),
            reaped,
        }
    });
    if started {
        // Orphans of the database (scripts it ran, forks) are re-parented to
        // us rather than to a PID 1 that may not reap them.
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            warn!(error = %e, "cannot become a child subreaper; orphans go to PID 1");
        }
        std::thread::Builder::new()
            .name("reaper".to_string())
            .spawn(move || reap_forever(reaper))
            .map_err(SuperviseError::Signals)?;
    }
    Ok(reaper)
}

fn reap_forever(reaper: &Reaper) {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(status) => {
                if let (Some(pid), Some(code)) = (status.pid(), exit_code(status)) {
                    debug!(pid = pid.as_raw(), code, "reaped");
                    reaper
                        .statuses
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(pid.as_raw(), code);
                    reaper.reaped.send_modify(|n| *n += 1);
                }
            }
            Err(Errno::EINTR) => {}
            // No child at the moment: look again shortly (a child spawned in
            // between is reaped then).
            Err(Errno::ECHILD) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                warn!(error = %e, "waitpid failed");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// A running, supervised child.
pub struct Child {
    pid: i32,
    reaper: &'static Reaper,
    stderr: Option<std::process::ChildStderr>,
}

impl Child {
    /// Starts `command` as a supervised child. Its output goes where the
    /// command says (the container log, or a pipe the caller reads).
    pub fn spawn(mut command: Command) -> Result<Child, SuperviseError> {
        let reaper = reaper()?;
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command.spawn().map_err(|source| SuperviseError::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = child.id() as i32;
        let stderr = child.stderr.take();
        // The std handle must not wait (the reaper does): forget it.
        drop(child);
        // The database, or a helper it needs first (iotune).
        info!(pid, %program, "started");
        Ok(Child {
            pid,
            reaper,
            stderr,
        })
    }

    /// The child's standard error, when it was spawned with a pipe for it.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.stderr.take()
    }

    /// The child's PID.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The exit code, once the child has ended.
    pub fn try_exit_code(&self) -> Option<i32> {
        self.reaper
            .statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&self.pid)
            .copied()
    }

    /// Waits for the child to end; its exit code (128 + signal if killed).
    pub async fn wait(&self) -> i32 {
        let mut reaped = self.reaper.reaped.subscribe();
        loop {
            if let Some(code) = self.try_exit_code() {
                return code;
            }
            // Bounded: a status reaped between the check and the wait is seen
            // at the next round.
            let _ = tokio::time::timeout(Duration::from_millis(200), reaped.changed()).await;
        }
    }

    /// Sends a signal to the child (ignored when it already ended).
    pub fn signal(&self, signal: Signal) {
        if self.try_exit_code().is_some() {
            return;
        }
        if let Err(e) = kill(Pid::from_raw(self.pid), signal) {
            debug!(error = %e, "signalling the database");
        }
    }
}

/// A future that resolves on the first SIGTERM or SIGINT.
pub fn termination() -> Result<impl Future<Output = Signal>, SuperviseError> {
    let mut term = signal(SignalKind::terminate()).map_err(SuperviseError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(SuperviseError::Signals)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => Signal::SIGTERM,
            _ = int.recv() => Signal::SIGINT,
        }
    })
}

/// Runs the child until it ends or `shutdown` resolves. On shutdown, runs
/// `drain` (bounded by `drain_timeout`: a hung drain must not keep the
/// database from its signal), then forwards the signal and waits for the
/// child. Returns the child's exit code.
pub async fn supervise<D, F>(
    child: &Child,
    shutdown: impl Future<Output = Signal>,
    drain: D,
    drain_timeout: Duration,
) -> i32
where
    D: FnOnce() -> F,
    F: Future<Output = ()>,
{
    tokio::select! {
        code = child.wait() => {
            info!(code, "the database exited");
            code
        }
        sig = shutdown => {
            info!(signal = %sig, "stopping: draining the database first");
            if tokio::time::timeout(drain_timeout, drain()).await.is_err() {
                warn!(?drain_timeout, "drain did not finish in time; stopping anyway");
            }
            child.signal(sig);
            let code = child.wait().await;
            info!(code, "the database stopped");
            code
        }
    }
}
