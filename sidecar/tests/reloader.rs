//! The reloader against real processes: shell scripts with unique names that
//! append a line to a log file on each SIGHUP, and real files (plain writes
//! and the kubelet's atomic `..data` symlink swap). The reloader runs in this
//! test process (it never signals itself), with short --poll and --debounce.
//!
//! Waiting is by polling with generous deadlines; "exactly one" and "none"
//! are asserted after a quiet interval several polls and debounces long.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sidecar::reloader::{Metrics, Reloader, ReloaderArgs};

const POLL: Duration = Duration::from_millis(25);
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Long enough for a signal that should not come to have come.
const QUIET: Duration = Duration::from_millis(700);
/// Deadline for anything that should happen.
const PATIENCE: Duration = Duration::from_secs(10);

/// A name no other process on the machine has, for a test `tag` (at most 15
/// bytes, so that it is the whole `comm`).
fn unique_name(tag: &str) -> String {
    let name = format!("hup{tag}{}", std::process::id());
    assert!(name.len() <= 15, "{name} is too long for comm");
    name
}

/// A shell script named `name` that appends a line to the file given as its
/// first argument on each SIGHUP, and creates the file given as its second
/// once its trap is installed (before that, SIGHUP would kill it).
fn hup_script(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        "#!/bin/sh\ntrap 'echo hup >> \"$1\"' HUP\n: > \"$2\"\nwhile :; do sleep 1 & wait $!; done\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Spawns, retrying for a moment on ETXTBSY: another test thread may fork
/// while a script file is still open for writing. The child gets SIGHUP's
/// default disposition: a test runner started under nohup passes SIGHUP on
/// ignored, and a shell cannot trap a signal ignored on entry.
#[allow(unsafe_code)]
fn spawn(command: &mut Command) -> Child {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (sigaction, sigprocmask) between
    // fork and exec.
    unsafe {
        command.pre_exec(|| {
            use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};
            signal(Signal::SIGHUP, SigHandler::SigDfl)?;
            let mut hup = SigSet::empty();
            hup.add(Signal::SIGHUP);
            sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&hup), None)?;
            Ok(())
        });
    }
    let mut tries = 0;
    loop {
        match command.spawn() {
            Ok(child) => return child,
            Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot start {command:?}: {e}"),
        }
    }
}

/// A running script and its log of signals.
struct Recorder {
    child: Child,
    log: PathBuf,
}

impl Recorder {
    fn start(script: &Path, dir: &Path, label: &str) -> Recorder {
        let log = dir.join(format!("{label}.log"));
        let ready = dir.join(format!("{label}.ready"));
        let child = spawn(Command::new(script).arg(&log).arg(&ready));
        let recorder = Recorder { child, log };
        assert!(
            wait_until(|| ready.exists()),
            "{} did not get ready",
            script.display()
        );
        recorder
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    fn signals(&self) -> usize {
        std::fs::read_to_string(&self.log).map_or(0, |s| s.lines().count())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reloader, running on its own thread until dropped.
struct Running {
    metrics: Metrics,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    /// Starts the reloader and waits until it has read the files that exist.
    fn start(args: ReloaderArgs) -> Running {
        Running::start_reloader(Reloader::new(args))
    }

    fn start_reloader(reloader: Reloader) -> Running {
        let expected_present = reloader.args().watch.iter().filter(|p| p.exists()).count();
        let metrics = reloader.metrics();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime
                .block_on(reloader.run(async {
                    let _ = stopped.await;
                }))
                .unwrap();
        });
        let running = Running {
            metrics,
            stop: Some(stop),
            thread: Some(thread),
        };
        let present = running.metrics.files_present.clone();
        assert!(
            wait_until(|| usize::try_from(present.get()).unwrap() == expected_present),
            "the reloader did not read its files"
        );
        // The gauge is set after the first read of every file: the baselines
        // are taken.
        running
    }

    fn sent(&self) -> u64 {
        self.metrics.signals_sent.get()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let finished = thread.join();
            if !std::thread::panicking() {
                finished.unwrap();
            }
        }
    }
}

fn args(watch: &[&Path], process: &str) -> ReloaderArgs {
    ReloaderArgs {
        watch: watch.iter().map(|p| p.to_path_buf()).collect(),
        process: Some(process.to_owned()),
        signal: Signal::SIGHUP,
        debounce: DEBOUNCE,
        poll: POLL,
        pid_file: None,
        metrics_addr: None,
    }
}

fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// Replaces a file's content in one step (a reader never sees it half
/// written), as editors and most tools do.
fn write_atomically(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn reloader_a_new_content_signals_once_and_the_same_content_never() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("nc");
    let script = hup_script(dir.path(), &name);
    let agent = Recorder::start(&script, dir.path(), "agent");
    let file = dir.path().join("labels");
    write_atomically(&file, "generation=\"1\"\n");
    let reloader = Running::start(args(&[&file], &name));

    // Starting sends nothing: the first content is the baseline.
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 0);

    let changed = Instant::now();
    write_atomically(&file, "generation=\"2\"\n");
    assert!(wait_until(|| agent.signals() >= 1), "no signal");
    let latency = changed.elapsed();
    assert!(latency < Duration::from_secs(1), "signal after {latency:?}");
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1, "one change, one signal");

    // The same bytes again, written in place and atomically, and a newer
    // modification time: nothing.
    std::fs::write(&file, "generation=\"2\"\n").unwrap();
    write_atomically(&file, "generation=\"2\"\n");
    std::fs::File::options()
        .append(true)
        .open(&file)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1, "same content sent a signal");
    assert_eq!(reloader.sent(), 1);
    assert_eq!(reloader.metrics.changes.get(), 1);
    eprintln!("signal latency: {latency:?}");
}

#[test]
fn reloader_a_burst_of_ten_writes_gives_one_signal() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("bu");
    let script = hup_script(dir.path(), &name);
    let agent = Recorder::start(&script, dir.path(), "agent");
    let file = dir.path().join("config");
    std::fs::write(&file, "v0").unwrap();
    let mut a = args(&[&file], &name);
    // Writes every 30 ms with polls every 20 ms: the reloader sees several of
    // them; only the debounce makes one signal of them.
    a.poll = Duration::from_millis(20);
    a.debounce = Duration::from_millis(600);
    let reloader = Running::start(a);

    for i in 1..=10 {
        // Plain writes (truncate, then write): half-written states are part
        // of the burst.
        std::fs::write(&file, format!("v{i}")).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(wait_until(|| agent.signals() >= 1), "no signal");
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1, "a burst gave several signals");
    assert_eq!(reloader.sent(), 1);

    // A burst that ends where it began changes nothing.
    std::fs::write(&file, "v11").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    std::fs::write(&file, "v10").unwrap();
    std::thread::sleep(QUIET + Duration::from_millis(600));
    assert_eq!(agent.signals(), 1);
}

/// The kubelet's atomic writer (downward-API, ConfigMap and Secret volumes):
/// the watched path is a symlink into `..data`, itself a symlink to a
/// timestamped directory; an update writes a new directory and renames a new
/// `..data` over the old one. The watched path's own inode never changes.
#[test]
fn reloader_the_atomic_writer_symlink_swap_is_seen() {
    atomic_writer_swap(false);
}

/// The same without inotify: polling alone sees the swap.
#[test]
fn reloader_the_atomic_writer_symlink_swap_is_seen_by_polling_alone() {
    atomic_writer_swap(true);
}

fn atomic_writer_swap(poll_only: bool) {
    use std::os::unix::fs::{MetadataExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("podinfo");
    std::fs::create_dir(&volume).unwrap();
    let publish = |stamp: &str, content: &str| {
        let data = volume.join(stamp);
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("labels"), content).unwrap();
        let tmp = volume.join("..data_tmp");
        symlink(stamp, &tmp).unwrap();
        std::fs::rename(&tmp, volume.join("..data")).unwrap();
    };
    publish(
        "..2026_11_22_04_00_00.000000001",
        "app=\"vrouter\"\ngeneration=\"1\"\n",
    );
    let labels = volume.join("labels");
    symlink("..data/labels", &labels).unwrap();
    let inode = std::fs::symlink_metadata(&labels).unwrap().ino();

    let name = unique_name(if poll_only { "ap" } else { "aw" });
    let script = hup_script(dir.path(), &name);
    let agent = Recorder::start(&script, dir.path(), "agent");
    let mut reloader = Reloader::new(args(&[&labels], &name));
    if poll_only {
        reloader = reloader.poll_only();
    }
    let reloader = Running::start_reloader(reloader);

    publish(
        "..2026_11_22_04_01_00.000000002",
        "app=\"vrouter\"\ngeneration=\"2\"\n",
    );
    std::fs::remove_dir_all(volume.join("..2026_11_22_04_00_00.000000001")).unwrap();
    assert_eq!(std::fs::symlink_metadata(&labels).unwrap().ino(), inode);
    assert!(wait_until(|| agent.signals() >= 1), "the swap was not seen");
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1);

    // A swap to a new directory with the same content: nothing.
    publish(
        "..2026_11_22_04_02_00.000000003",
        "app=\"vrouter\"\ngeneration=\"2\"\n",
    );
    std::fs::remove_dir_all(volume.join("..2026_11_22_04_01_00.000000002")).unwrap();
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1);
    assert_eq!(reloader.sent(), 1);
}

/// With the default --debounce (500ms) and a poll far too slow to matter,
/// a change still arrives within a second: inotify wakes the reloader.
#[test]
fn reloader_with_the_default_debounce_a_change_arrives_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("in");
    let script = hup_script(dir.path(), &name);
    let agent = Recorder::start(&script, dir.path(), "agent");
    let file = dir.path().join("labels");
    write_atomically(&file, "generation=1");
    let mut a = args(&[&file], &name);
    a.debounce = Duration::from_millis(500);
    a.poll = Duration::from_secs(60);
    let reloader = Running::start(a);

    for generation in 2..=3 {
        let changed = Instant::now();
        write_atomically(&file, &format!("generation={generation}"));
        assert!(
            wait_until(|| agent.signals() >= generation - 1),
            "no signal"
        );
        let latency = changed.elapsed();
        eprintln!("signal latency with --debounce 500ms: {latency:?}");
        assert!(latency < Duration::from_secs(1), "signal after {latency:?}");
        assert!(
            latency >= Duration::from_millis(500),
            "not debounced: {latency:?}"
        );
    }
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 2);
    assert_eq!(reloader.sent(), 2);
}

#[test]
fn reloader_every_matching_process_gets_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("tw");
    let script = hup_script(dir.path(), &name);
    let first = Recorder::start(&script, dir.path(), "first");
    let second = Recorder::start(&script, dir.path(), "second");
    let file = dir.path().join("labels");
    write_atomically(&file, "a");
    let reloader = Running::start(args(&[&file], &name));

    write_atomically(&file, "b");
    assert!(wait_until(|| first.signals() >= 1 && second.signals() >= 1));
    std::thread::sleep(QUIET);
    assert_eq!((first.signals(), second.signals()), (1, 1));
    assert_eq!(reloader.sent(), 2);
}

/// A change that found no process is not delivered to a process that starts
/// later (it read the new content when it started); that process gets the
/// next change.
#[test]
fn reloader_a_process_that_starts_later_gets_the_next_change() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("la");
    let script = hup_script(dir.path(), &name);
    let file = dir.path().join("labels");
    write_atomically(&file, "generation=1");
    let reloader = Running::start(args(&[&file], &name));

    write_atomically(&file, "generation=2");
    let m = &reloader.metrics;
    assert!(
        wait_until(|| m.changes.get() == 1 && m.pending.get() == 1),
        "the change did not become pending"
    );
    assert_eq!(reloader.sent(), 0);

    let agent = Recorder::start(&script, dir.path(), "agent");
    assert!(
        wait_until(|| m.pending.get() == 0),
        "the pending change was not settled once the process appeared"
    );
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 0, "a late process got an old change");

    write_atomically(&file, "generation=3");
    assert!(
        wait_until(|| agent.signals() >= 1),
        "no signal for the next change"
    );
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1);
    assert_eq!(reloader.sent(), 1);
    assert_eq!(m.changes.get(), 2);
}

/// An entrypoint that runs under another name and exec's into the process
/// after the change (same pid, forked before the change) read the new
/// content at its exec: it is not signalled for that change, only for the
/// next.
#[test]
fn reloader_a_process_that_execs_into_the_name_after_the_change_gets_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("ex");
    let script = hup_script(dir.path(), &name);
    let entrypoint = dir.path().join(unique_name("en"));
    std::fs::write(
        &entrypoint,
        "#!/bin/sh\nwhile [ ! -e \"$4\" ]; do sleep 0.02; done\nexec \"$3\" \"$1\" \"$2\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&entrypoint, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (log, ready, go) = (
        dir.path().join("agent.log"),
        dir.path().join("agent.ready"),
        dir.path().join("go"),
    );
    let agent = Recorder {
        child: spawn(
            Command::new(&entrypoint)
                .arg(&log)
                .arg(&ready)
                .arg(&script)
                .arg(&go),
        ),
        log,
    };
    let file = dir.path().join("labels");
    write_atomically(&file, "generation=1");
    let reloader = Running::start(args(&[&file], &name));

    write_atomically(&file, "generation=2");
    let m = &reloader.metrics;
    assert!(
        wait_until(|| m.changes.get() == 1 && m.pending.get() == 1),
        "the change did not become pending"
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_until(|| ready.exists()), "the entrypoint did not exec");
    assert!(
        wait_until(|| m.pending.get() == 0),
        "the pending change was not settled once the process appeared"
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        agent.signals(),
        0,
        "a process exec'd after the change got it"
    );
    assert_eq!(reloader.sent(), 0);

    write_atomically(&file, "generation=3");
    assert!(
        wait_until(|| agent.signals() >= 1),
        "no signal for the next change"
    );
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1);
    assert_eq!(reloader.sent(), 1);
}

/// A file missing at start is waited for; its first content is the
/// baseline; the next change is signalled. A file that disappears sends
/// nothing, nor does its return with the same content.
#[test]
fn reloader_a_missing_file_is_waited_for_and_its_first_content_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("mi");
    let script = hup_script(dir.path(), &name);
    let agent = Recorder::start(&script, dir.path(), "agent");
    let file = dir.path().join("later");
    let reloader = Running::start(args(&[&file], &name));
    let present = reloader.metrics.files_present.clone();

    write_atomically(&file, "first");
    assert!(wait_until(|| present.get() == 1));
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 0, "the first appearance sent a signal");

    std::fs::remove_file(&file).unwrap();
    assert!(wait_until(|| present.get() == 0));
    write_atomically(&file, "first");
    assert!(wait_until(|| present.get() == 1));
    std::thread::sleep(QUIET);
    assert_eq!(
        agent.signals(),
        0,
        "disappearing and coming back unchanged sent a signal"
    );

    write_atomically(&file, "second");
    assert!(wait_until(|| agent.signals() >= 1));
    std::thread::sleep(QUIET);
    assert_eq!(agent.signals(), 1);
    assert_eq!(reloader.sent(), 1);
}

/// With --pid-file and --process, only the pid in the file is signalled, and
/// only while its name matches.
#[test]
fn reloader_a_pid_file_picks_one_process_of_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique_name("pf");
    let script = hup_script(dir.path(), &name);
    let master = Recorder::start(&script, dir.path(), "master");
    let worker = Recorder::start(&script, dir.path(), "worker");
    let pid_file = dir.path().join("agent.pid");
    std::fs::write(&pid_file, format!("{}\n", master.pid())).unwrap();
    let file = dir.path().join("conf");
    write_atomically(&file, "1");
    let mut a = args(&[&file], &name);
    a.pid_file = Some(pid_file.clone());
    let reloader = Running::start(a);

    write_atomically(&file, "2");
    assert!(wait_until(|| master.signals() >= 1));
    std::thread::sleep(QUIET);
    assert_eq!((master.signals(), worker.signals()), (1, 0));

    // A pid file naming a process of another name (a stale pid, reused):
    // nobody is signalled, the change waits.
    let mut stranger = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(&pid_file, format!("{}\n", stranger.id())).unwrap();
    write_atomically(&file, "3");
    let m = &reloader.metrics;
    assert!(wait_until(|| m.changes.get() == 2 && m.pending.get() == 1));
    std::thread::sleep(QUIET);
    assert_eq!((master.signals(), worker.signals()), (1, 0));
    assert_eq!(reloader.sent(), 1);
    let _ = stranger.kill();
    let _ = stranger.wait();
}
