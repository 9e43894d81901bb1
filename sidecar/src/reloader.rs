//! The reloader (`cassandra-operator reloader`): watches files and signals
//! processes when their content changes. Made for processes that re-read
//! their configuration on a signal but do not watch it themselves, such as
//! the Contrail (OpenSDN) vRouter agent, which re-reads the addresses of its
//! control nodes on SIGHUP: the reloader runs as a second container of the
//! Pod with `shareProcessNamespace: true`, watches a downward-API file of the
//! Pod's labels, and the operator changes a label after it has rewritten the
//! configuration (manifests/examples/vrouter-reloader.yaml).
//!
//! How it behaves:
//!
//! - **Content, not timestamps.** Every `--poll`, and at once when inotify
//!   reports activity in the directory of a watched file ([`wake`]), it reads
//!   each `--watch` file through its path (following symlinks, so the
//!   kubelet's atomic writer, which swaps the `..data` symlink of
//!   downward-API, ConfigMap and Secret volumes and never touches the watched
//!   path's own inode, is seen like any write). Only a different content
//!   counts; a rewrite with the same bytes or a `touch` sends nothing.
//!   Polling alone is enough to be correct; inotify makes it prompt (with the
//!   default 500ms debounce a change is signalled in about half a second).
//! - **Debounce.** A burst of changes gives one signal, once the files have
//!   been quiet for `--debounce` (at the latest ten debounce periods after
//!   the burst began). A burst that ends on the content last delivered sends
//!   nothing.
//! - **Whom.** Every live process whose `comm` or `argv[0]` basename is
//!   `--process`, never the reloader itself, never a zombie (see
//!   [`procs`]); or, with `--pid-file`, the process whose pid the file holds
//!   (and, if `--process` is given too, only when its name matches, which
//!   guards against a stale pid file whose pid was reused).
//! - **No process is not an error.** A change is addressed to the processes
//!   that ran under the name when the change was seen (they may hold the old
//!   content). A change that finds none of them stays pending and is looked
//!   at again every poll. A process that matches only later (it started, or
//!   an entrypoint script exec'd into it, after the change) read the new
//!   content as it started and is not signalled for it (a SIGHUP that arrives
//!   before a process has installed its handler kills it); it gets the next
//!   change. A failed signal (for example EPERM) is retried every poll.
//! - **Missing files.** A file missing at start is waited for (logged once);
//!   its first content is the baseline and sends nothing. A file that
//!   disappears later sends nothing either and keeps its last delivered
//!   content; when it comes back, it counts as a change only if its content
//!   differs.
//! - **Telling.** A log line per change seen and per signal sent (with the
//!   running total), and, with `--metrics-addr`, Prometheus counters on
//!   `/metrics`: `reloader_changes_total`, `reloader_signals_sent_total`,
//!   `reloader_signal_errors_total`, and the gauges `reloader_pending_changes`
//!   and `reloader_watched_files_present`.
//! - **Stopping.** SIGTERM or SIGINT: exit 0.
//!
//! [`parse`], [`procs`] (apart from its `/proc` readers) and [`state`] are
//! pure; [`wake`] (inotify) and this module do the I/O: reading files,
//! scanning `/proc`, sending signals, the clock and the metrics endpoint.

pub mod parse;
pub mod procs;
pub mod state;
pub mod wake;

use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{debug, info, warn};

use self::procs::Process;
use self::state::{Debouncer, Delivery, Observed, Plan, Seen, WatchedFile};
use self::wake::DirWatcher;

/// `cassandra-operator reloader`: watch mounted files (downward-API labels, a
/// ConfigMap) and send a signal (SIGHUP by default) to every process of a
/// given name whenever their content changes.
///
/// Only a change of content counts (the kubelet's atomic `..data` symlink
/// swap included; timestamps alone send nothing). A burst of changes sends
/// one signal. A file missing at start is waited for and its first content
/// sends nothing; a file that disappears later sends nothing. A change that
/// finds no process stays pending; processes that start after a change read
/// it as they start and get the next one. SIGTERM or SIGINT: exit 0.
#[derive(clap::Args, Debug, Clone)]
#[command(
    group(
        clap::ArgGroup::new("target")
            .args(["process", "pid_file"])
            .required(true)
            .multiple(true)
    ),
    after_help = AFTER_HELP
)]
pub struct ReloaderArgs {
    /// A file to watch; repeat for several.
    #[arg(long = "watch", value_name = "PATH", required = true)]
    pub watch: Vec<PathBuf>,
    /// Name of the process(es) to signal (comm, or the basename of argv[0]).
    /// Every process of that name gets the signal.
    #[arg(long, value_name = "NAME")]
    pub process: Option<String>,
    /// Signal to send: HUP, SIGHUP, USR1, USR2, ... or a number.
    #[arg(long, value_name = "SIGNAL", default_value = "HUP", value_parser = parse::parse_signal)]
    pub signal: Signal,
    /// Send one signal once the files have been quiet this long (500ms, 1s,
    /// 2m; 0 for none); at the latest ten times this after a burst began.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse::parse_duration)]
    pub debounce: Duration,
    /// How often to read the files (and to look again for a process that was
    /// missing). inotify also wakes the reloader at once when the directory
    /// of a watched file changes; polling covers what inotify cannot see.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse::parse_positive_duration)]
    pub poll: Duration,
    /// Signal the process whose pid this file holds (read again at every
    /// signal). With --process as well, the pid is signalled only if its name
    /// matches (a guard against a stale pid file); other processes of that
    /// name are then left alone (as the workers of a master process should).
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (http://ADDR/metrics), e.g.
    /// 0.0.0.0:9102. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

const AFTER_HELP: &str = "\
Behaviour:
  - Only a change of content counts: a rewrite with the same bytes or a new
    timestamp sends nothing. Files are read through their path, so the
    kubelet's atomic ..data symlink swap (downward API, ConfigMap, Secret)
    is seen. They are read every --poll, and at once when inotify reports
    activity in their directory.
  - A burst of changes sends one signal, once the files have been quiet for
    --debounce; a burst that ends on the content last delivered sends none.
  - A file missing at start is waited for; its first content is the baseline
    and sends nothing. A file that disappears later sends nothing; when it
    comes back, only a different content counts.
  - A change goes to the processes of that name running when it was seen.
    One that finds none stays pending and is looked at every --poll.
    Processes that start (or exec into the name) after the change read it as
    they start: they are not signalled for it (an early SIGHUP would kill a
    process that has not installed its handler yet) and get the next change.
    Failed signals
    (EPERM: another user; run as the same user, or root with CAP_KILL) are
    retried every --poll.
  - One log line per change and per signal sent (with the running total).
  - SIGTERM or SIGINT: exit 0.

Example (a sidecar with shareProcessNamespace: true):
  cassandra-operator reloader --watch /etc/podinfo/labels \\
      --process contrail-vrouter-agent --signal HUP --debounce 500ms --poll 1s";

/// What can stop the reloader. Everything else (missing files or
/// processes, failed signals) is logged and retried.
#[derive(Debug, thiserror::Error)]
pub enum ReloaderError {
    #[error("cannot start the async runtime")]
    StartRuntime(#[source] io::Error),
    #[error("cannot install the handler of {signal}")]
    InstallSignalHandler {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen for metrics on {addr}")]
    BindMetrics {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// The reloader's counters (cheap to clone: the clones share the values).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Changes of content found after debouncing (each one is a signal to
    /// every matching process).
    pub changes: Counter,
    /// Signals sent (one per process).
    pub signals_sent: Counter,
    /// Signals that failed (other than because the process had exited).
    pub signal_errors: Counter,
    /// 1 while a change waits for a process, else 0.
    pub pending: Gauge,
    /// How many of the watched files could be read at the last poll.
    pub files_present: Gauge,
}

impl Metrics {
    fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("reloader");
        registry.register(
            "changes",
            "Changes of content of the watched files, after debouncing",
            self.changes.clone(),
        );
        registry.register(
            "signals_sent",
            "Signals sent to watched processes",
            self.signals_sent.clone(),
        );
        registry.register(
            "signal_errors",
            "Signals that could not be sent",
            self.signal_errors.clone(),
        );
        registry.register(
            "pending_changes",
            "1 while a change waits for a process to signal",
            self.pending.clone(),
        );
        registry.register(
            "watched_files_present",
            "Watched files that could be read at the last poll",
            self.files_present.clone(),
        );
        registry
    }

    /// The Prometheus text exposition of the counters.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry());
        out
    }
}

/// Which processes to signal.
#[derive(Debug, Clone)]
enum Targets {
    Named(String),
    PidFile { path: PathBuf, name: Option<String> },
}

impl Targets {
    fn describe(&self) -> String {
        match self {
            Targets::Named(name) => format!("process named {name:?}"),
            Targets::PidFile { path, name: None } => {
                format!("process of pid file {}", path.display())
            }
            Targets::PidFile {
                path,
                name: Some(name),
            } => format!("process {name:?} of pid file {}", path.display()),
        }
    }
}

/// The reloader, ready to run.
#[derive(Debug)]
pub struct Reloader {
    args: ReloaderArgs,
    metrics: Metrics,
    proc_root: PathBuf,
    inotify: bool,
}

impl Reloader {
    pub fn new(args: ReloaderArgs) -> Self {
        Reloader {
            args,
            metrics: Metrics::default(),
            proc_root: PathBuf::from("/proc"),
            inotify: true,
        }
    }

    /// Only poll: no early wake-ups from inotify (see [`wake`]).
    pub fn poll_only(mut self) -> Self {
        self.inotify = false;
        self
    }

    pub fn args(&self) -> &ReloaderArgs {
        &self.args
    }

    /// The counters; they stay readable while [`Reloader::run`] runs.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Runs until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ReloaderError> {
        let server = match self.args.metrics_addr {
            Some(addr) => Some(serve_metrics(addr, self.metrics.clone()).await?),
            None => None,
        };
        let result = Watch::new(self).run(shutdown).await;
        if let Some(server) = server {
            server.abort();
        }
        result
    }
}

/// Runs the reloader on its own runtime until SIGTERM or SIGINT (the
/// `cassandra-operator reloader` subcommand).
pub fn run_blocking(args: ReloaderArgs) -> Result<(), ReloaderError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReloaderError::StartRuntime)?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|source| {
            ReloaderError::InstallSignalHandler {
                signal: "SIGTERM",
                source,
            }
        })?;
        let mut int = signal(SignalKind::interrupt()).map_err(|source| {
            ReloaderError::InstallSignalHandler {
                signal: "SIGINT",
                source,
            }
        })?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => info!("SIGTERM received, stopping"),
                _ = int.recv() => info!("SIGINT received, stopping"),
            }
        };
        Reloader::new(args).run(stop).await
    })
}

async fn serve_metrics(
    addr: SocketAddr,
    metrics: Metrics,
) -> Result<tokio::task::JoinHandle<()>, ReloaderError> {
    use crds::http::Reply;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ReloaderError::BindMetrics { addr, source })?;
    info!(%addr, "serving metrics on /metrics");
    Ok(tokio::spawn(crds::http::serve(
        listener,
        move |path: String| {
            let reply = match path.as_str() {
                "/metrics" => Reply {
                    status: 200,
                    content_type: Some(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                    body: metrics.render(),
                },
                _ => Reply::not_found(),
            };
            async move { reply }
        },
    )))
}

/// How long to let inotify events gather before looking (it also bounds how
/// often a busy directory makes the reloader read its files).
const EVENT_SETTLE: Duration = Duration::from_millis(20);

async fn next_event(watcher: &mut Option<DirWatcher>) -> io::Result<()> {
    match watcher {
        Some(w) => w.changed().await,
        None => std::future::pending().await,
    }
}

/// A watched file and what has been logged about it.
#[derive(Debug)]
struct File {
    path: PathBuf,
    state: WatchedFile,
    said_waiting: bool,
}

/// A change on its way, and whether "no process" was logged for it.
#[derive(Debug)]
struct Pending {
    delivery: Delivery,
    said_waiting: bool,
    /// Pids whose failed signal was logged (later failures go to debug).
    said_failed: Vec<i32>,
}

/// The running state of the reloader.
struct Watch {
    files: Vec<File>,
    targets: Targets,
    signal: Signal,
    poll: Duration,
    debouncer: Debouncer,
    /// The matching processes when the content was last seen changing
    /// (`None` if they could not be listed): the addressees of the change.
    running_at_change: Option<Vec<Process>>,
    pending: Option<Pending>,
    metrics: Metrics,
    proc_root: PathBuf,
    own_pid: i32,
    /// Whether to try inotify for early wake-ups.
    inotify: bool,
}

impl Watch {
    fn new(reloader: Reloader) -> Self {
        let Reloader {
            args,
            metrics,
            proc_root,
            inotify,
        } = reloader;
        let targets = match (args.pid_file, args.process) {
            (Some(path), name) => Targets::PidFile { path, name },
            (None, Some(name)) => Targets::Named(name),
            // clap requires one of the two; an empty name matches nothing.
            (None, None) => Targets::Named(String::new()),
        };
        Watch {
            files: args
                .watch
                .into_iter()
                .map(|path| File {
                    path,
                    state: WatchedFile::default(),
                    said_waiting: false,
                })
                .collect(),
            targets,
            signal: args.signal,
            poll: args.poll,
            debouncer: Debouncer::new(args.debounce, args.debounce * 10),
            running_at_change: None,
            pending: None,
            metrics,
            proc_root,
            own_pid: i32::try_from(std::process::id()).unwrap_or(0),
            inotify,
        }
    }

    async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), ReloaderError> {
        info!(
            files = ?self.files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
            target = %self.targets.describe(),
            signal = %self.signal,
            poll = ?self.poll,
            "reloader watching"
        );
        tokio::pin!(shutdown);
        let mut watcher = if self.inotify {
            match DirWatcher::new() {
                Ok(w) => Some(w),
                Err(e) => {
                    info!(error = %e, poll = ?self.poll, "no inotify; polling only");
                    None
                }
            }
        } else {
            None
        };
        loop {
            let now = Instant::now();
            self.tick(now);
            if let Some(w) = &mut watcher {
                w.ensure(self.files.iter().map(|f| wake::dir_of(&f.path)));
            }
            let mut next = now + self.poll;
            if let Some(deadline) = self.debouncer.deadline() {
                next = next.min(deadline);
            }
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                event = next_event(&mut watcher) => {
                    if let Err(e) = event {
                        warn!(error = %e, poll = ?self.poll, "inotify failed; polling only");
                        watcher = None;
                    }
                    // Let a burst of events (a writer's several syscalls, the
                    // kubelet's rename and clean-up) arrive before looking.
                    tokio::time::sleep(EVENT_SETTLE.min(self.poll)).await;
                }
                () = &mut shutdown => {
                    info!("reloader stopped");
                    return Ok(());
                }
            }
        }
    }

    /// One round: read the files, decide, signal.
    fn tick(&mut self, now: Instant) {
        let mut changed = false;
        let mut present = 0;
        for file in &mut self.files {
            let observed = read_file(&file.path);
            if let Observed::Content(_) = observed {
                present += 1;
            }
            let reason = match &observed {
                Observed::Absent(reason) => Some(reason.clone()),
                Observed::Content(_) => None,
            };
            match file.state.observe(observed) {
                Seen::First => {
                    let content = file.state.current().unwrap_or_default();
                    info!(
                        file = %file.path.display(),
                        bytes = content.len(),
                        digest = %digest(content),
                        "watching file (its content now is the baseline)"
                    );
                }
                Seen::Unchanged => {}
                Seen::Changed => {
                    changed = true;
                    let content = file.state.current().unwrap_or_default();
                    info!(
                        file = %file.path.display(),
                        bytes = content.len(),
                        digest = %digest(content),
                        "file content changed"
                    );
                }
                Seen::Vanished => warn!(
                    file = %file.path.display(),
                    reason = reason.as_deref().unwrap_or(""),
                    "watched file disappeared; nothing is signalled for that, waiting for it to come back"
                ),
                Seen::StillAbsent => {
                    if !file.said_waiting {
                        file.said_waiting = true;
                        info!(
                            file = %file.path.display(),
                            reason = reason.as_deref().unwrap_or(""),
                            "waiting for the file to appear"
                        );
                    }
                }
            }
        }
        self.metrics.files_present.set(present);
        if changed {
            self.debouncer.change(now);
            self.running_at_change = match self.matching() {
                Ok(running) => Some(running),
                Err(e) => {
                    warn!(error = %e, "cannot list processes; every matching process will be signalled");
                    None
                }
            };
        }
        if self.debouncer.take_if_due(now) {
            let differing: Vec<String> = self
                .files
                .iter()
                .filter(|f| f.state.differs())
                .map(|f| f.path.display().to_string())
                .collect();
            if differing.is_empty() {
                debug!("the files are back to the content last delivered; nothing to signal");
            } else {
                for file in &mut self.files {
                    file.state.commit();
                }
                self.metrics.changes.inc();
                info!(files = ?differing, signal = %self.signal, target = %self.targets.describe(), "configuration changed; signalling");
                self.pending = Some(Pending {
                    delivery: Delivery::new(self.running_at_change.as_deref()),
                    said_waiting: false,
                    said_failed: Vec::new(),
                });
            }
        }
        self.deliver();
        self.metrics.pending.set(i64::from(self.pending.is_some()));
    }

    /// Moves the pending change (if any) along.
    fn deliver(&mut self) {
        let Some(mut pending) = self.pending.take() else {
            return;
        };
        let matching = match self.matching() {
            Ok(found) => found,
            Err(e) => {
                warn!(error = %e, "cannot list processes; trying again at the next poll");
                self.pending = Some(pending);
                return;
            }
        };
        if self.advance(&mut pending, &matching) {
            self.pending = Some(pending);
        }
    }

    /// Plans and sends; whether the change is still pending afterwards.
    fn advance(&self, pending: &mut Pending, matching: &[Process]) -> bool {
        match pending.delivery.plan(matching) {
            Plan::Wait => {
                if pending.said_waiting {
                    debug!(target = %self.targets.describe(), "still no process to signal");
                } else {
                    pending.said_waiting = true;
                    warn!(
                        target = %self.targets.describe(),
                        "no process to signal; the change stays pending and the next polls look again"
                    );
                }
                true
            }
            Plan::Complete { late } => {
                if !late.is_empty() {
                    info!(
                        pids = ?late,
                        "processes that started after the change read it as they started; not signalling them"
                    );
                }
                false
            }
            Plan::Signal(pids) => {
                for pid in pids {
                    let comm = matching
                        .iter()
                        .find(|p| p.pid == pid)
                        .map_or("", |p| p.comm.as_str());
                    match kill(Pid::from_raw(pid), self.signal) {
                        Ok(()) => {
                            self.metrics.signals_sent.inc();
                            pending.delivery.reached(pid);
                            info!(
                                pid,
                                process = comm,
                                signal = %self.signal,
                                signals_sent_total = self.metrics.signals_sent.get(),
                                "signal sent"
                            );
                        }
                        Err(Errno::ESRCH) => {
                            debug!(pid, "process exited before its signal");
                            pending.delivery.reached(pid);
                        }
                        Err(errno) => {
                            self.metrics.signal_errors.inc();
                            if pending.said_failed.contains(&pid) {
                                debug!(pid, error = %errno, "signal failed again");
                            } else {
                                pending.said_failed.push(pid);
                                warn!(
                                    pid,
                                    process = comm,
                                    signal = %self.signal,
                                    error = %errno,
                                    "cannot signal the process (EPERM: it runs as another user; the reloader then needs the same user or CAP_KILL); retrying every poll"
                                );
                            }
                        }
                    }
                }
                // Done when every process that had to be signalled was.
                !matches!(pending.delivery.plan(matching), Plan::Complete { .. })
            }
        }
    }

    /// The live processes the signal is for.
    fn matching(&self) -> io::Result<Vec<Process>> {
        match &self.targets {
            Targets::Named(name) => procs::scan(&self.proc_root, name, self.own_pid),
            Targets::PidFile { path, name } => {
                let pid = match read_pid_file(path) {
                    Ok(pid) => pid,
                    Err(reason) => {
                        debug!(file = %path.display(), %reason, "no pid from the pid file");
                        return Ok(Vec::new());
                    }
                };
                if pid == self.own_pid {
                    return Ok(Vec::new());
                }
                Ok(procs::read_process(&self.proc_root, pid, name.as_deref())
                    .into_iter()
                    .collect())
            }
        }
    }
}

fn read_file(path: &Path) -> Observed {
    match std::fs::read(path) {
        Ok(content) => Observed::Content(content),
        Err(e) => Observed::Absent(e.to_string()),
    }
}

/// The pid in a pid file (the first token; daemons add a newline, some more).
fn read_pid_file(path: &Path) -> Result<i32, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    parse_pid(&text)
}

fn parse_pid(text: &str) -> Result<i32, String> {
    let token = text.split_ascii_whitespace().next().unwrap_or("");
    match token.parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(format!("not a pid: {token:?}")),
    }
}

/// A short, stable fingerprint of a content for the logs (FNV-1a, 64 bits):
/// enough to tell contents apart in a log without printing them (a ConfigMap
/// may hold secrets).
fn digest(content: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in content {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = String::with_capacity(16);
    let _ = write!(out, "{hash:016x}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: ReloaderArgs,
    }

    fn parse(argv: &[&str]) -> Result<ReloaderArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("reloader").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn flags_and_defaults() {
        let a = parse(&["--watch", "/a", "--watch", "/b", "--process", "vrouter"]).unwrap();
        assert_eq!(a.watch, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(a.process.as_deref(), Some("vrouter"));
        assert_eq!(a.signal, Signal::SIGHUP);
        assert_eq!(a.debounce, Duration::from_millis(500));
        assert_eq!(a.poll, Duration::from_secs(1));
        assert_eq!(a.pid_file, None);
        let a = parse(&[
            "--watch",
            "/a",
            "--pid-file",
            "/run/x.pid",
            "--signal",
            "USR1",
            "--debounce",
            "0",
            "--poll",
            "2m",
        ])
        .unwrap();
        assert_eq!(a.process, None);
        assert_eq!(a.pid_file, Some(PathBuf::from("/run/x.pid")));
        assert_eq!(a.signal, Signal::SIGUSR1);
        assert_eq!(a.debounce, Duration::ZERO);
        assert_eq!(a.poll, Duration::from_secs(120));
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse(&["--process", "x"]).is_err(), "no --watch");
        assert!(parse(&["--watch", "/a"]).is_err(), "no target");
        assert!(parse(&["--watch", "/a", "--process", "x", "--poll", "0s"]).is_err());
        assert!(parse(&["--watch", "/a", "--process", "x", "--debounce", "5"]).is_err());
        assert!(parse(&["--watch", "/a", "--process", "x", "--signal", "BOGUS"]).is_err());
    }

    #[test]
    fn pid_files_hold_one_positive_pid() {
        assert_eq!(parse_pid("1234\n"), Ok(1234));
        assert_eq!(parse_pid("  77 extra"), Ok(77));
        assert!(parse_pid("").is_err());
        assert!(parse_pid("0").is_err());
        assert!(parse_pid("-5").is_err());
        assert!(parse_pid("abc").is_err());
    }

    #[test]
    fn digests_tell_contents_apart_and_are_stable() {
        assert_eq!(digest(b""), "cbf29ce484222325");
        assert_eq!(digest(b"a"), "af63dc4c8601ec8c");
        assert_ne!(digest(b"gen=1"), digest(b"gen=2"));
    }

    #[test]
    fn metrics_render_as_prometheus_text() {
        let m = Metrics::default();
        m.signals_sent.inc();
        m.signals_sent.inc();
        m.changes.inc();
        let text = m.render();
        assert!(text.contains("reloader_signals_sent_total 2"), "{text}");
        assert!(text.contains("reloader_changes_total 1"), "{text}");
        assert!(text.contains("reloader_signal_errors_total 0"), "{text}");
        assert!(text.contains("reloader_pending_changes 0"), "{text}");
        assert!(text.contains("reloader_watched_files_present 0"), "{text}");
    }
}
