//! iotune, ScyllaDB's disk benchmark, as the sidecar runs it once per data
//! volume, with real processes (issue 30). Its own test binary: iotune is
//! spawned through the sidecar's reaper, which collects every child of the
//! process (other tests' `Command::output` included).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crds::v1alpha1::ClusterMode;
use sidecar::member::{MemberError, ensure_io_properties, io_properties_file};
use sidecar::node::Node;

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn data_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let data = root.join(name);
    std::fs::create_dir(&data).unwrap();
    data
}

/// The properties are measured once per data volume and kept on it; a
/// failing benchmark is an error that leaves nothing behind.
#[tokio::test]
async fn iotune_runs_once_per_data_volume() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path(), "data");
    let count = dir.path().join("count");
    let iotune = dir.path().join("iotune");
    // A stand-in that records its runs and writes what it is asked to.
    script(
        &iotune,
        &format!(
            "echo run >> {}\n[ \"$1\" = --evaluation-directory ] || exit 2\n[ \"$3\" = --properties-file ] || exit 2\necho 'disks: []' > \"$4\"",
            count.display()
        ),
    );
    let iotune = iotune.display().to_string();
    let first = ensure_io_properties(&iotune, &data).await.unwrap();
    assert_eq!(first, io_properties_file(&data));
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "disks: []\n");
    let again = ensure_io_properties(&iotune, &data).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "run\n");

    let other = data_dir(dir.path(), "other");
    match ensure_io_properties("false", &other).await {
        Err(MemberError::IoSetup(why)) => assert_eq!(why, "exit status 1"),
        other => panic!("{other:?}"),
    }
    assert!(!io_properties_file(&other).exists());
    // A command that does not exist says which.
    let missing = dir.path().join("no-such-iotune").display().to_string();
    match ensure_io_properties(&missing, &other).await {
        Err(e @ MemberError::File { .. }) => assert!(e.to_string().contains(&missing), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// `GET /healthz` on `addr`, answered within `limit`: its status line.
fn healthz(addr: &str, limit: Duration) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(limit)).unwrap();
    write!(stream, "GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("no answer within {limit:?}: {e}"))?;
    Ok(response.lines().next().unwrap_or_default().to_string())
}

/// The sidecar's runtime has one thread, which also serves the liveness
/// probe: while iotune measures (about two minutes outside developer
/// mode, here a few seconds) `/healthz` answers within a second each time.
/// Before issue 30's fix iotune's wait blocked that thread and no probe
/// was answered until it ended (the kubelet killed the container after
/// ~75 s, at every start).
#[test]
fn the_probes_answer_while_iotune_measures() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path(), "data");
    let iotune = dir.path().join("iotune");
    script(&iotune, "sleep 3\necho 'disks: []' > \"$4\"");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();

    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // The kubelet's side: probes from another thread, as long as iotune runs.
    let prober = {
        let (measuring, done) = (measuring.clone(), done.clone());
        let addr = addr.to_string();
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while !measuring.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
            while !done.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let answer = healthz(&addr, Duration::from_secs(1));
                answers.push((asked.elapsed(), answer));
                std::thread::sleep(Duration::from_millis(200));
            }
            answers
        })
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (took, result) = runtime.block_on(async {
        let node = Node::for_mode(
            ClusterMode::Scylla,
            "http://127.0.0.1:1/jolokia/",
            "http://127.0.0.1:1",
        )
        .unwrap();
        tokio::spawn(sidecar::probes::serve_probes(
            addr,
            node,
            Arc::new(AtomicBool::new(false)),
            sidecar::sstables::Gauge::default(),
        ));
        // Served before iotune starts.
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        measuring.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let result = ensure_io_properties(&iotune.display().to_string(), &data).await;
        (started.elapsed(), result)
    });
    done.store(true, Ordering::SeqCst);
    let answers = prober.join().unwrap();

    result.unwrap();
    assert!(took >= Duration::from_secs(3), "iotune ran {took:?}");
    // Asked every ~200 ms over 3 s: at least a handful, each answered.
    assert!(answers.len() >= 5, "{answers:?}");
    for (elapsed, answer) in &answers {
        assert_eq!(
            answer.as_deref().map(|line| line.split_whitespace().nth(1)),
            Ok(Some("200")),
            "after {elapsed:?}: {answers:?}"
        );
        assert!(*elapsed < Duration::from_secs(1), "{answers:?}");
    }
}

/// The Pod stops while iotune measures: the sidecar drops the wait, and
/// iotune is killed with it, and whatever it started, rather than left
/// measuring (and writing on the data volume) under a stopping Pod.
#[tokio::test]
async fn iotune_is_killed_when_its_wait_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path(), "data");
    let iotune = dir.path().join("iotune");
    let pid_file = dir.path().join("pid");
    // A wrapper that starts the measuring process and waits for it.
    script(
        &iotune,
        &format!(
            "sleep 60 &\necho \"$$ $!\" > {0}.tmp && mv {0}.tmp {0}\nwait",
            pid_file.display()
        ),
    );
    let iotune = iotune.display().to_string();
    let measure = ensure_io_properties(&iotune, &data);
    let stop = async {
        while !pid_file.is_file() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        result = measure => panic!("iotune ended: {result:?}"),
        _ = stop => {}
    }
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    // Killed, then reaped by the sidecar's reaper (the sidecar is a child
    // subreaper: the orphaned child lands on it too): the PIDs are gone.
    for pid in pids {
        let pid = nix::unistd::Pid::from_raw(pid);
        while nix::sys::signal::kill(pid, None).is_ok() {
            assert!(Instant::now() < deadline, "pid {pid} of iotune still runs");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(!io_properties_file(&data).exists());
}
