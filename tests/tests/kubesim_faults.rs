//! Faults real clusters have and a controller must survive: a write that
//! commits but whose response is lost (504), a watch that delivers its
//! events late (a stale cache), and the hook that kills or freezes a
//! registered process right after its Nth matching write commits.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use testworld::kubesim::faults::{FaultConfig, ProcessAction, WriteHook};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{api_error, client_without_retries};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn a_lost_response_is_a_committed_write() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let cms: Api<ConfigMap> =
        Api::default_namespaced(client_without_retries(&sim.kubeconfig()).await);
    sim.set_faults(FaultConfig {
        lost_response_rate: 1.0,
        resources: vec!["configmaps".into()],
        ..Default::default()
    });
    let e = api_error(
        cms.create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    sim.set_faults(FaultConfig::default());
    // ... and yet it was written: a retry finds it.
    cms.get("a").await.expect("the write committed");
    let e = api_error(
        cms.create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
}

#[tokio::test]
async fn a_late_watch_delivers_its_events_late_and_in_order() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let cms: Api<ConfigMap> =
        Api::default_namespaced(client_without_retries(&sim.kubeconfig()).await);
    sim.set_faults(FaultConfig {
        late_watch_rate: 1.0,
        late_watch_ms: 700,
        ..Default::default()
    });
    let mut stream = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let created = Instant::now();
    for name in ["x", "y"] {
        cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match stream.next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => seen.push((o.metadata.name.unwrap(), created.elapsed())),
            WatchEvent::Bookmark(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen[0].0, "x");
    assert_eq!(seen[1].0, "y");
    assert!(seen[0].1 >= Duration::from_millis(650), "{seen:?}");
    assert!(
        seen[1].1 < Duration::from_millis(1500),
        "delays do not add up: {seen:?}"
    );
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[tokio::test]
async fn a_process_is_killed_or_frozen_after_its_nth_matching_write() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let cms: Api<ConfigMap> =
        Api::default_namespaced(client_without_retries(&sim.kubeconfig()).await);
    let mut victim = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut frozen = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    sim.on_write(WriteHook {
        pid: victim.id(),
        verb: "create".into(),
        resource: "configmaps".into(),
        name: None,
        user: None,
        contains: None,
        nth: 2,
        action: ProcessAction::Kill,
    });
    sim.on_write(WriteHook {
        pid: frozen.id(),
        verb: "create".into(),
        resource: "configmaps".into(),
        name: Some("c".into()),
        user: Some(testworld::kubesim::auth::authn::ADMIN.into()),
        contains: None,
        nth: 1,
        action: ProcessAction::Freeze,
    });
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert!(
        victim.try_wait().unwrap().is_none(),
        "not on the first write"
    );
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    let status = victim.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "SIGKILL after the second create");
    assert!(cms.get("b").await.is_ok(), "the write committed first");
    // Not stopped ('T'): asleep, or still running on a loaded machine
    // (a process spawned a moment ago may not have reached its sleep).
    assert_ne!(state(frozen.id()), Some('T'), "only the write of c freezes");
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    // SIGSTOP is delivered asynchronously: the sleeper wakes ('R') to take
    // it, then stops ('T'); on a loaded machine the first look can see 'R'.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while state(frozen.id()) != Some('T') && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state(frozen.id()), Some('T'), "stopped");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(frozen.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = frozen.wait();
}
