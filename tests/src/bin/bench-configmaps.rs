//! The controller's memory beside many large ConfigMaps that are none of
//! its business (issue 30: it used to watch and cache every ConfigMap of
//! the cluster whole, under a 128Mi limit).
//!
//! ```text
//! cargo build --bin cassandra-operator --bin fake-cassandra --bin bench-configmaps
//! target/debug/bench-configmaps [--count 200] [--kib 500] [--applied] [--operator PATH]
//! ```
//!
//! One world on hollow kubelets (Pods Ready at once, no processes): a
//! Cluster of 3 members whose rack names the overrides ConfigMap
//! `tuning`, the controller running as the operator's ServiceAccount.
//! Measured, as the controller's VmRSS (mean over 5 s) and VmHWM (its
//! peak so far), from /proc:
//!
//! 1. the Cluster Ready, no other ConfigMap;
//! 2. then `--count` ConfigMaps of `--kib` KiB each created while the
//!    controller runs (half in the Cluster's namespace, half in another),
//!    none named by a Cluster; with `--applied`, each also carries the
//!    `kubectl.kubernetes.io/last-applied-configuration` annotation that
//!    `kubectl apply` writes (the whole object again, in the metadata; the
//!    API server refuses annotations over 256 KiB in all, so `--applied`
//!    takes at most `--kib 250`);
//! 3. the controller restarted among them (its first list holds them all).
//!
//! Then a change of `tuning`'s content must reach the rack's template
//! (the overrides hash), within 30 s: the named ConfigMap's content is
//! still read. `--operator PATH` measures another build of the operator
//! (the one before a change, say); the default is the one beside this
//! binary.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::json;
use testworld::harness::{self, Process, World, WorldOptions};

type Error = Box<dyn std::error::Error>;

const NS: &str = "db";
/// The namespace of the other half of the unrelated ConfigMaps.
const OTHER_NS: &str = "apps";
/// The overrides-hash annotation on the rack's Pod template
/// (controller::resources::OVERRIDES_HASH).
const OVERRIDES_HASH: &str = "cassandra.rook.io/overrides-hash";

struct Options {
    count: usize,
    kib: usize,
    applied: bool,
    operator: Option<PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut o = Options {
        count: 200,
        kib: 500,
        applied: false,
        operator: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--count" => o.count = value()?.parse()?,
            "--kib" => o.kib = value()?.parse()?,
            "--applied" => o.applied = true,
            "--operator" => o.operator = Some(PathBuf::from(value()?)),
            _ => {
                return Err(format!(
                    "unknown option {a}; usage: bench-configmaps [--count N] [--kib S] [--applied] [--operator PATH]"
                )
                .into());
            }
        }
    }
    if o.applied && o.kib > 250 {
        return Err("--applied: kubectl apply cannot write the annotation of a ConfigMap over 256 KiB (the API server's limit on annotations): use --kib 250 or less".into());
    }
    Ok(o)
}

/// (mean VmRSS over `secs` s, VmHWM) in MiB.
async fn memory(pid: u32, secs: u64) -> (f64, f64) {
    let mut samples = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        samples.extend(harness::proc_status_kib(pid, "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64 / 1024.0;
    let hwm = harness::proc_status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    (rss, hwm)
}

async fn until<T, F, Fut>(what: &str, secs: u64, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {secs} s waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cluster() -> Result<Cluster, Error> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "cassandra.rook.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"version": "4.1.8", "datacenter": {"name": "dc", "racks": [{
            "name": "r", "members": 3, "configMapName": "tuning",
            "storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}}}]},
            "resources": {"limits": {"cpu": "100m", "memory": "256Mi"}}}]}}
    }))?)
}

fn overrides(text: &str) -> Result<ConfigMap, Error> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "tuning", "namespace": NS},
        "data": {"cassandra.yaml": text}
    }))?)
}

/// An unrelated ConfigMap of `kib` KiB of data (and, `applied`, the same
/// again in the annotation `kubectl apply` writes).
fn unrelated(namespace: &str, i: usize, kib: usize, applied: bool) -> Result<ConfigMap, Error> {
    // Text that does not compress to nothing: 64-character lines of a
    // counter's digits.
    let line = |n: usize| format!("{:0>63}\n", n.wrapping_mul(2_654_435_761));
    let text: String = (0..kib * 1024 / 64).map(line).collect();
    let name = format!("unrelated-{i}");
    let mut object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "someone-else"}},
        "data": {"payload.txt": text}
    });
    if applied {
        let last_applied = object.to_string();
        object["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
    }
    Ok(serde_json::from_value(object)?)
}

async fn ready(clusters: &Api<Cluster>) -> Option<()> {
    let status = clusters.get("c").await.ok()?.status?;
    (status.ready_members == 3 && status.members == 3).then_some(())
}

async fn template_hash(sets: &Api<StatefulSet>) -> Option<String> {
    sets.get("c-dc-r")
        .await
        .ok()?
        .spec?
        .template
        .metadata?
        .annotations?
        .get(OVERRIDES_HASH)
        .cloned()
}

fn start(world: &World, log: &std::path::Path) -> Result<Process, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let metrics = format!("127.0.0.1:{}", l.local_addr()?.port());
    drop(l);
    Ok(world.start_controller(log, Some(&metrics))?)
}

fn main() -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(run());
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn run() -> Result<(), Error> {
    let o = options()?;
    harness::require_root()?;
    let exe = std::env::current_exe()?;
    let operator = match o.operator.clone() {
        Some(path) => path,
        None => harness::beside(&exe, "cassandra-operator")?,
    };
    let mut opts = WorldOptions::new(
        operator.clone(),
        harness::beside(&exe, "fake-cassandra")?,
        harness::fixtures()?,
        &["a"],
    );
    opts.hollow = true;
    let work = tempfile::tempdir()?;
    let world = World::start(opts, work.path()).await?;
    world.install(NS).await?;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": OTHER_NS}}))?;
    Api::<Namespace>::all(world.client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let config_maps = |ns: &str| Api::<ConfigMap>::namespaced(world.client.clone(), ns);
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    let sets: Api<StatefulSet> = Api::namespaced(world.client.clone(), NS);
    config_maps(NS)
        .create(
            &PostParams::default(),
            &overrides("concurrent_reads: 16\n")?,
        )
        .await?;
    let log = work.path().join("controller.log");
    let mut controller = start(&world, &log)?;
    let started = Instant::now();
    // The CRD may not be served at once.
    until("the Cluster created", 30, || async {
        clusters
            .create(&PostParams::default(), &cluster().ok()?)
            .await
            .ok()
    })
    .await?;
    let fail =
        |e: Error| -> Error { format!("{e}\ncontroller log:\n{}", harness::tail(&log)).into() };
    until("the Cluster Ready", 120, || ready(&clusters))
        .await
        .map_err(fail)?;
    eprintln!(
        "bench-configmaps: Cluster Ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let alone = memory(controller.0.id(), 5).await;

    let created = Instant::now();
    for i in 0..o.count {
        let ns = if i % 2 == 0 { NS } else { OTHER_NS };
        config_maps(ns)
            .create(&PostParams::default(), &unrelated(ns, i, o.kib, o.applied)?)
            .await?;
    }
    eprintln!(
        "bench-configmaps: {} ConfigMaps of {} KiB{} created in {:.1} s",
        o.count,
        o.kib,
        if o.applied { " (+ last-applied)" } else { "" },
        created.elapsed().as_secs_f64()
    );
    // The watch's events reach the controller within moments; a few
    // seconds more for its allocator to settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let watched = memory(controller.0.id(), 5).await;

    drop(controller);
    controller = start(&world, &log)?;
    let restarted = Instant::now();
    // Synced and reconciling: the overrides changed, the rack's template
    // follows (the content of the named ConfigMap is read).
    let before = template_hash(&sets).await.ok_or("no overrides hash")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let relisted = memory(controller.0.id(), 5).await;
    config_maps(NS)
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("concurrent_reads: 32\n")?,
        )
        .await?;
    let changed = Instant::now();
    let after = until("the overrides hash to follow the change", 30, || async {
        template_hash(&sets).await.filter(|h| *h != before)
    })
    .await
    .map_err(fail)?;
    let followed = changed.elapsed().as_secs_f64();
    eprintln!(
        "bench-configmaps: restarted {:.1} s ago; overrides hash {before} -> {after} in {followed:.2} s",
        restarted.elapsed().as_secs_f64()
    );
    drop(controller);

    println!(
        "controller memory, {} unrelated ConfigMaps of {} KiB{} ({})",
        o.count,
        o.kib,
        if o.applied { " + last-applied" } else { "" },
        operator.display()
    );
    println!("| phase | VmRSS mean 5 s | VmHWM |");
    println!("|---|---|---|");
    for (phase, (rss, hwm)) in [
        ("Cluster Ready, no other ConfigMap", alone),
        ("ConfigMaps created while it runs", watched),
        ("restarted among them", relisted),
    ] {
        println!("| {phase} | {rss:.1} MiB | {hwm:.1} MiB |");
    }
    println!("overrides change reached the template in {followed:.2} s");
    Ok(())
}
