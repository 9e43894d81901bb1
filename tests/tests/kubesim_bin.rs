//! The `kubesim serve` binary: starts, writes its kubeconfig, says `ready`,
//! serves the real kube client through that kubeconfig, stops on SIGTERM.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn serve_writes_a_kubeconfig_says_ready_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["serve", "--dir"])
        .arg(dir.path())
        .args(["--zones", "a,b", "--nodes-per-zone", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubesim starts");
    let stdout = child.stdout.take().unwrap();
    let first_line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(10), first_line)
        .await
        .expect("ready in time")
        .unwrap()
        .unwrap();
    assert_eq!(line, "ready\n");
    let ready_after = started.elapsed();
    eprintln!("kubesim ready after {ready_after:?}");

    let kc =
        Kubeconfig::read_from(dir.path().join("kubeconfig")).expect("DIR/kubeconfig is written");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(cfg.cluster_url.host(), Some("127.0.0.1"));
    let nodes: Api<Node> = Api::all(Client::try_from(cfg).unwrap());
    let list = nodes
        .list(&ListParams::default().labels("topology.kubernetes.io/zone=b"))
        .await
        .unwrap();
    let names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, vec!["node-b-0", "node-b-1", "node-b-2"]);

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "kubesim exits cleanly on SIGTERM: {status:?}"
    );
}

#[test]
fn bad_flags_are_refused_with_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["serve", "--zones", "a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir is required"));
}
