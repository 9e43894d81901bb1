//! The sidecar as init, with real processes: exit codes pass through, a
//! shutdown drains before it signals, orphans are reaped.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use sidecar::supervise::{Child, supervise};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

fn never() -> impl std::future::Future<Output = Signal> {
    std::future::pending()
}

#[tokio::test]
async fn exit_codes_pass_through() {
    let child = Child::spawn(sh("exit 3")).unwrap();
    let code = supervise(&child, never(), || async {}, Duration::from_secs(1)).await;
    assert_eq!(code, 3);

    let child = Child::spawn(sh("kill -9 $$")).unwrap();
    let code = supervise(&child, never(), || async {}, Duration::from_secs(1)).await;
    assert_eq!(code, 128 + 9);
}

#[tokio::test]
async fn shutdown_drains_then_forwards_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 0' TERM; echo started >> {log}; while true; do sleep 0.05; done",
        log = log.display()
    );
    let child = Child::spawn(sh(&script)).unwrap();
    // wait until the trap is installed
    for _ in 0..200 {
        if std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("started")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain_log = log.clone();
    let code = supervise(
        &child,
        async { Signal::SIGTERM },
        || async move {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&drain_log)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"drained\n"))
                .unwrap();
        },
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "started\ndrained\nterm\n"
    );
}

#[tokio::test]
async fn a_hung_drain_does_not_keep_the_signal_from_the_database() {
    let child = Child::spawn(sh("while true; do sleep 0.05; done")).unwrap();
    let started = std::time::Instant::now();
    let code = supervise(
        &child,
        async { Signal::SIGTERM },
        std::future::pending::<()>,
        Duration::from_millis(300),
    )
    .await;
    // sh without a trap dies of SIGTERM
    assert_eq!(code, 128 + 15);
    assert!(started.elapsed() < Duration::from_secs(10));
}

fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str()) {
            zombies.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
        }
    }
    zombies
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn orphans_are_adopted_and_reaped() {
    // The child leaves a grandchild behind; as subreaper the sidecar inherits
    // it, and must reap it when it ends, or it stays a zombie.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    let child = Child::spawn(sh(&format!(
        "sleep 0.5 & echo $! > {}; exit 0",
        pid_file.display()
    )))
    .unwrap();
    assert_eq!(
        supervise(&child, never(), || async {}, Duration::from_secs(1)).await,
        0
    );
    let grandchild: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        parent_of(grandchild),
        Some(std::process::id() as i32),
        "the orphan must be re-parented to the sidecar"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let zombies = zombie_children();
        if zombies.is_empty() && parent_of(grandchild).is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zombies left: {zombies:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
