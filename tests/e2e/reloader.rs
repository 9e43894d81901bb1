//! `cassandra-operator reloader`, the real binary: a change of a watched file
//! reaches a real process through SIGHUP, the log and the metrics say so, and
//! SIGTERM stops it with exit code 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::free_port;
use crate::scenario::{until, until_with};

const PATIENCE: Duration = Duration::from_secs(15);
const QUIET: Duration = Duration::from_millis(800);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
}

/// A child that is killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A script named `name` that appends a line to `log` on each SIGHUP;
/// returns once its trap is installed.
// pre_exec, to give the recorder SIGHUP's default disposition (below).
#[allow(unsafe_code)]
async fn start_recorder(dir: &Path, name: &str, log: &Path) -> Reaped {
    let script = dir.join(name);
    std::fs::write(
        &script,
        "#!/bin/sh\ntrap 'echo hup >> \"$1\"' HUP\n: > \"$2\"\nwhile :; do sleep 1 & wait $!; done\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ready = dir.join(format!("{name}.ready"));
    let child = until("the recorder to start", PATIENCE, || {
        let mut command = Command::new(&script);
        command.arg(log).arg(&ready);
        // A shell started with SIGHUP ignored cannot trap it (POSIX: signals
        // ignored on entry to a non-interactive shell stay ignored), and a
        // test runner started under nohup passes SIGHUP on ignored: give the
        // recorder the default disposition, as a container's process has.
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (sigaction, sigprocmask)
        // between fork and exec.
        unsafe {
            command.pre_exec(|| {
                use nix::sys::signal::{
                    SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask,
                };
                signal(Signal::SIGHUP, SigHandler::SigDfl)?;
                let mut hup = SigSet::empty();
                hup.add(Signal::SIGHUP);
                sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&hup), None)?;
                Ok(())
            });
        }
        std::future::ready(match command.spawn() {
            Ok(child) => Ok(Reaped(child)),
            // ETXTBSY: another test thread forked while the script was open.
            Err(e) if e.raw_os_error() == Some(26) => Err(e.to_string()),
            Err(e) => panic!("cannot start {}: {e}", script.display()),
        })
    })
    .await;
    until(&format!("{name}'s trap"), PATIENCE, || async {
        ready.exists()
    })
    .await;
    child
}

fn lines_of(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// The reloader binary with its stderr collected line by line.
struct Reloader {
    child: Reaped,
    log: Arc<Mutex<Vec<String>>>,
}

impl Reloader {
    fn start(args: &[&str], watch: &Path) -> Reloader {
        let mut child = bin()
            .args(["--log-format", "json", "reloader"])
            .args(args)
            .arg("--watch")
            .arg(watch)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Reloader {
            child: Reaped(child),
            log,
        }
    }

    fn logged(&self, text: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    fn dump(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until `done`, showing the reloader's log if it never is.
    async fn until(&self, what: &str, done: impl Fn(&Reloader) -> bool) {
        until_with(
            what,
            PATIENCE,
            || std::future::ready(done(self)),
            || self.dump(),
        )
        .await
    }
}

fn get_metrics(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_signals_a_real_process_logs_counts_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("hupcli{}", std::process::id());
    let hups = dir.path().join("hups");
    let _agent = start_recorder(dir.path(), &name, &hups).await;
    let labels = dir.path().join("labels");
    std::fs::write(&labels, "generation=\"1\"\n").unwrap();
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{port}");

    let mut reloader = Reloader::start(
        &[
            "--process",
            &name,
            "--signal",
            "SIGHUP",
            "--poll",
            "50ms",
            "--debounce",
            "100ms",
            "--metrics-addr",
            &metrics_addr,
        ],
        &labels,
    );
    reloader
        .until("the baseline", |r| r.logged("watching file") == 1)
        .await;

    let tmp = dir.path().join("labels.tmp");
    std::fs::write(&tmp, "generation=\"2\"\n").unwrap();
    std::fs::rename(&tmp, &labels).unwrap();
    reloader.until("a SIGHUP", |_| lines_of(&hups) >= 1).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(lines_of(&hups), 1);
    reloader
        .until("the log of the signal", |r| r.logged("signal sent") == 1)
        .await;
    let sent_line = reloader
        .log
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("signal sent"))
        .cloned()
        .unwrap();
    assert!(sent_line.contains(&name), "{sent_line}");
    assert!(
        sent_line.contains("\"signals_sent_total\":1"),
        "{sent_line}"
    );

    let metrics = get_metrics(port).expect("no /metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("reloader_signals_sent_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("reloader_changes_total 1"), "{metrics}");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(reloader.child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = until("the reloader to stop after SIGTERM", PATIENCE, || {
        std::future::ready(reloader.child.0.try_wait().unwrap())
    })
    .await;
    assert_eq!(status.code(), Some(0), "{}", reloader.dump());
    reloader
        .until("the log of SIGTERM", |r| r.logged("SIGTERM received") == 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_waits_for_a_missing_process_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    let labels = dir.path().join("labels");
    std::fs::write(&labels, "a").unwrap();
    let mut reloader = Reloader::start(
        &[
            "--process",
            "no-such-process-anywhere",
            "--poll",
            "50ms",
            "--debounce",
            "0",
        ],
        &labels,
    );
    reloader
        .until("the baseline", |r| r.logged("watching file") == 1)
        .await;
    std::fs::write(&labels, "b").unwrap();
    reloader
        .until("the warning", |r| r.logged("no process to signal") == 1)
        .await;
    tokio::time::sleep(QUIET).await;
    assert!(
        reloader.child.0.try_wait().unwrap().is_none(),
        "the reloader exited:\n{}",
        reloader.dump()
    );
    // Warned once, not at every poll.
    assert_eq!(reloader.logged("no process to signal"), 1);
}

#[test]
fn reloader_refuses_bad_flags() {
    for (args, expected) in [
        (&["reloader", "--process", "x"][..], "--watch"),
        (&["reloader", "--watch", "/tmp/x"][..], "--process"),
        (
            &[
                "reloader",
                "--watch",
                "/x",
                "--process",
                "x",
                "--debounce",
                "5",
            ][..],
            "missing unit",
        ),
        (
            &[
                "reloader",
                "--watch",
                "/x",
                "--process",
                "x",
                "--poll",
                "0s",
            ][..],
            "longer than zero",
        ),
        (
            &[
                "reloader",
                "--watch",
                "/x",
                "--process",
                "x",
                "--signal",
                "NOPE",
            ][..],
            "unknown signal",
        ),
    ] {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn reloader_help_documents_every_flag() {
    let out = bin().args(["reloader", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--watch <PATH>",
        "--process <NAME>",
        "--signal <SIGNAL>",
        "--debounce <DURATION>",
        "--poll <DURATION>",
        "--pid-file <PATH>",
        "--metrics-addr <ADDR>",
        "[default: HUP]",
        "[default: 500ms]",
        "[default: 1s]",
    ] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
}
