//! Benchmark: the sidecar's footprint while the database runs.
//!
//! ```text
//! cargo build --release && target/release/bench-sidecar [--seconds 10] [--defaults DIR]
//! ```
//!
//! Starts kubesim in this process, creates a Cluster, a member Service and a
//! Pod, and runs the real `cassandra-operator sidecar` (the binary beside
//! this one) with a stand-in database (`sleep`), so that what is measured is
//! the sidecar alone: its start-up time (to the database's start), and its
//! resident memory (VmRSS sampled every 100 ms while probes are served, and
//! the peak VmHWM). Prints the figures; the goal is under 10 MiB resident.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use testworld::kubesim::{KubeSim, Options};

use testworld::harness::proc_status_kib as status_kib;

fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = arg("--seconds")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10);
    let defaults = arg("--defaults").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/cassandra/4.1"
        ))
    });
    if !defaults.join("cassandra.yaml").is_file() {
        return Err(format!(
            "no cassandra.yaml in {} (use --defaults DIR)",
            defaults.display()
        )
        .into());
    }
    let operator = std::env::current_exe()?.with_file_name("cassandra-operator");
    if !operator.is_file() {
        return Err(format!(
            "{} not found: build it first (cargo build --release)",
            operator.display()
        )
        .into());
    }

    let sim = KubeSim::start(Options::default()).await?;
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig())?;
    let client =
        Client::try_from(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = sim.write_kubeconfig(dir.path())?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "db"}}))?;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crds::crd::definition())
        .await?;
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "db"},
        "spec": {"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{"name": "r", "members": 1}]}}
    }))?;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    let mut created = None;
    for _ in 0..50 {
        match clusters.create(&PostParams::default(), &cluster).await {
            Ok(c) => {
                created = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let cluster = created.ok_or("the Cluster was not created")?;
    // The member Service as the controller makes it, as far as the sidecar
    // reads it (labels, the ClusterIP kubesim allocates): the benchmark
    // measures the sidecar alone, without a controller.
    let mut service_labels = crds::labels::rack_labels("c", "dc", "r");
    service_labels.insert(crds::contract::SEED.into(), String::new());
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "c-dc-r-0", "namespace": "db", "labels": service_labels,
            "ownerReferences": [{"apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
                "name": "c", "uid": cluster.metadata.uid, "controller": true}]},
        "spec": {"type": "ClusterIP", "publishNotReadyAddresses": true,
            "selector": {(crds::labels::POD_NAME): "c-dc-r-0"},
            "ports": [{"name": "cql", "port": 9042}]}
    }))?;
    Api::<Service>::namespaced(client.clone(), "db")
        .create(&PostParams::default(), &service)
        .await?;
    let mut labels = crds::labels::rack_labels("c", "dc", "r");
    labels.insert(crds::labels::POD_NAME.into(), "c-dc-r-0".into());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "c-dc-r-0", "namespace": "db", "labels": labels},
        "spec": {"containers": [{"name": "cassandra", "image": "cassandra:4.1.8"}]}
    }))?;
    Api::<Pod>::namespaced(client.clone(), "db")
        .create(&PostParams::default(), &pod)
        .await?;

    let probe = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("127.0.0.1:{}", l.local_addr()?.port())
    };
    let started = Instant::now();
    let mut sidecar = Command::new(&operator)
        .arg("sidecar")
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "c-dc-r-0")
        .env("POD_NAMESPACE", "db")
        .env("POD_CLUSTER", "c")
        .env("POD_DATACENTER", "dc")
        .env("POD_RACK", "r")
        .env("POD_IP", "127.0.0.1")
        .env("CPU_LIMIT", "2")
        .env("MEMORY_LIMIT", "8589934592")
        .env("PROBE_ADDR", &probe)
        .env("JOLOKIA_URL", "http://127.0.0.1:9/jolokia/")
        .env("CONFIG_DEFAULTS_DIR", &defaults)
        .env("CONFIG_DIR", dir.path().join("conf"))
        .env("DATA_DIR", dir.path().join("data"))
        .env("DATABASE_COMMAND", "sleep 3600")
        .env("DRAIN_TIMEOUT_SECONDS", "1")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = sidecar.id();

    // start-up: until the database process (the sidecar's child) exists
    let child_started = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if !children.trim().is_empty() {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = sidecar.kill();
            return Err("the sidecar did not start the database within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };

    let mut samples = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut probes = 0;
    while Instant::now() < end {
        if http_status(&probe, "/readyz").is_some() {
            probes += 1;
        }
        if let Some(rss) = status_kib(pid, "VmRSS:") {
            samples.push(rss);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hwm = status_kib(pid, "VmHWM:").unwrap_or(0);
    let anon = status_kib(pid, "RssAnon:").unwrap_or(0);
    let file = status_kib(pid, "RssFile:").unwrap_or(0);
    let threads = status_kib(pid, "Threads:").unwrap_or(0);
    let _ = nix_kill(pid);
    let _ = sidecar.wait();

    let mean = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64;
    let max = samples.iter().copied().max().unwrap_or(0);
    let size = std::fs::metadata(&operator)?.len();
    println!(
        "sidecar benchmark ({} samples over {seconds} s, {probes} readiness probes served)",
        samples.len()
    );
    println!(
        "  binary              {:.1} MiB  ({})",
        size as f64 / 1048576.0,
        operator.display()
    );
    println!(
        "  start-up            {:.0} ms   (process start to database start)",
        child_started.as_secs_f64() * 1000.0
    );
    println!("  resident, mean      {:.1} MiB", mean / 1024.0);
    println!("  resident, max       {:.1} MiB", max as f64 / 1024.0);
    println!(
        "  resident, peak HWM  {:.1} MiB  (goal: under 10 MiB)",
        hwm as f64 / 1024.0
    );
    println!(
        "  resident, at end    {:.1} MiB anonymous + {:.1} MiB file-backed (the binary's pages), {threads} threads",
        anon as f64 / 1024.0,
        file as f64 / 1024.0
    );
    Ok(())
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("kill failed"))
    }
}
