//! The `sidecar` subcommand, run for real against kubesim: it waits for its
//! member Service, renders the configuration from the image's defaults (the
//! real Cassandra 4.1 files), starts the database command with it, serves
//! probes, and stops the database with the signal it got.

use std::io::Read;
use std::process::{Command, Stdio};

use controller::resources;
use crds::Cluster;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::harness;
use testworld::kubesim::{KubeSim, Options};

use crate::common::{client, create_cluster, free_port};
use crate::scenario::{annotation, cluster, secs, until_with};

/// A child's log as it comes, read on a thread of its own until the
/// child closes it: what it saw is read while it runs.
fn collect_log(
    mut stderr: std::process::ChildStderr,
) -> (
    std::sync::Arc<std::sync::Mutex<String>>,
    std::thread::JoinHandle<()>,
) {
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    (log, reader)
}

/// An API server (no controllers) with namespace `db` and the shipped CRD,
/// its admin client, a work directory and the kubeconfig written there.
async fn api_with_the_crd() -> (KubeSim, kube::Client, tempfile::TempDir, std::path::PathBuf) {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let client = client(&sim).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sim.write_kubeconfig(dir.path()).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "db"}})).unwrap(),
        )
        .await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &crds::crd::definition())
        .await
        .unwrap();
    (sim, client, dir, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_renders_starts_probes_and_stops_the_database() {
    let defaults = harness::fixtures().unwrap().join("cassandra/4.1");
    let (_sim, client, dir, kubeconfig) = api_with_the_crd().await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
    create_cluster(&clusters, &cluster("c").rack("r", 1).build()).await;
    let cluster = clusters.get("c").await.unwrap();

    // the member Service (with the replace label: the data dir is empty) and Pod
    let rack = &cluster.spec.datacenter.racks[0];
    let valid = controller::validated::validate(&cluster).expect("a valid Cluster");
    let mut service = resources::member_service(&valid, rack, 0, true);
    service.spec.as_mut().unwrap().cluster_ip = Some("127.2.0.10".into());
    service
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(crds::contract::REPLACE.into(), "127.2.0.10".into());
    let services: Api<Service> = Api::namespaced(client.clone(), "db");
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let mut pod_labels = crds::labels::rack_labels("c", "dc", "r");
    pod_labels.insert(crds::labels::POD_NAME.into(), "c-dc-r-0".into());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "c-dc-r-0", "namespace": "db", "labels": pod_labels},
        "spec": {"containers": [{"name": "cassandra", "image": "cassandra:4.1.8"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "db")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();

    // the "database": records its environment and waits to be stopped
    let env_file = dir.path().join("database.env");
    let script = dir.path().join("database.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv > {}.tmp && mv {0}.tmp {0}\nexec sleep 600\n",
            env_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let probe = format!("127.0.0.1:{}", free_port());
    let conf = dir.path().join("conf");
    let mut sidecar = Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
        .arg("sidecar")
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "c-dc-r-0")
        .env("POD_NAMESPACE", "db")
        .env("POD_CLUSTER", "c")
        .env("POD_DATACENTER", "dc")
        .env("POD_RACK", "r")
        .env("POD_IP", "127.1.0.10")
        .env("CPU_LIMIT", "2")
        .env("MEMORY_LIMIT", "2147483648")
        .env("PROBE_ADDR", &probe)
        .env(
            "JOLOKIA_URL",
            format!("http://127.0.0.1:{}/jolokia/", free_port()),
        )
        .env("CONFIG_DEFAULTS_DIR", &defaults)
        .env("CONFIG_DIR", &conf)
        .env("DATA_DIR", dir.path().join("data"))
        .env("OVERRIDES_DIR", dir.path().join("overrides"))
        .env("DATABASE_COMMAND", &script)
        .env("DRAIN_TIMEOUT_SECONDS", "5")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sidecar's log as it comes: what it saw is read while it runs.
    let (log, reader) = collect_log(sidecar.stderr.take().unwrap());
    let logged = |what: &str| log.lock().unwrap().contains(what);
    // What a failed wait shows: the sidecar's log so far.
    let seen = || format!("the sidecar's log:\n{}", log.lock().unwrap());

    until_with(
        "the database to start",
        secs(60),
        || async { env_file.is_file() },
        seen,
    )
    .await;
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(
        env.lines()
            .any(|l| l == format!("CASSANDRA_CONF={}", conf.display())),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "MAX_HEAP_SIZE=1024M"), "{env}");
    assert!(env.lines().any(|l| l == "HEAP_NEWSIZE=200M"), "{env}");
    let jvm = env
        .lines()
        .find(|l| l.starts_with("JVM_EXTRA_OPTS="))
        .expect("JVM_EXTRA_OPTS");
    assert!(
        jvm.contains(
            "-javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml"
        ),
        "{jvm}"
    );
    assert!(
        jvm.contains("-Dcassandra.replace_address_first_boot=127.2.0.10"),
        "{jvm}"
    );

    let yaml: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(conf.join("cassandra.yaml")).unwrap())
            .unwrap();
    assert_eq!(yaml["cluster_name"], "c");
    assert_eq!(yaml["listen_address"], "127.1.0.10");
    assert_eq!(yaml["broadcast_address"], "127.2.0.10");
    assert_eq!(
        yaml["seed_provider"][0]["parameters"][0]["seeds"],
        "127.2.0.10"
    );
    let rackdc = std::fs::read_to_string(conf.join("cassandra-rackdc.properties")).unwrap();
    assert!(
        rackdc.contains("dc=dc") && rackdc.contains("rack=r"),
        "{rackdc}"
    );
    // the image's other files are there too: CASSANDRA_CONF replaces the directory
    assert!(conf.join("cassandra-env.sh").is_file());
    assert!(conf.join("jvm-server.options").is_file());

    until_with(
        "the probes",
        secs(10),
        || async { crate::common::http_get(&probe, "/healthz").map(|r| r.0) == Some(200) },
        seen,
    )
    .await;
    assert_eq!(
        crate::common::http_get(&probe, "/readyz").map(|r| r.0),
        Some(503),
        "not ready while Jolokia does not answer"
    );

    // a label change reaches the sidecar through its watch; with no Jolokia
    // it waits (never confirms a decommission it did not see)
    services
        .patch(
            "c-dc-r-0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {crds::contract::DECOMMISSIONED: "false"}}}),
            ),
        )
        .await
        .unwrap();
    // It saw the request through its watch (it asks Jolokia for the
    // operation mode only then), and it did not confirm it.
    until_with(
        "the sidecar to see the request",
        secs(10),
        || async { logged("cassandra does not answer through jolokia yet") },
        seen,
    )
    .await;
    let labels = services
        .get("c-dc-r-0")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(labels[crds::contract::DECOMMISSIONED], "false");

    // SIGTERM: no drain possible, then the database gets the signal, and the
    // sidecar exits with its status (sleep killed by SIGTERM: 143)
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sidecar.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = until_with(
        "the sidecar to stop",
        secs(30),
        || std::future::ready(sidecar.try_wait().unwrap()),
        seen,
    )
    .await;
    reader.join().unwrap();
    let stderr = log.lock().unwrap().clone();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("configuration rendered"), "{stderr}");
}

/// A scylla-mode member's sidecar run for real against kubesim's API
/// server: its Cluster, member Service and Pod, the Node's AIO files
/// (`PROC_SYS_FS`), an `iotune` that takes its time and a "database"
/// that records its command line.
struct ScyllaSidecar {
    _sim: KubeSim,
    services: Api<Service>,
    dir: tempfile::TempDir,
    process: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    probe: String,
}

const SCYLLA_MEMBER: &str = "c-dc-r-0";

impl ScyllaSidecar {
    /// Starts the sidecar with the Node's AIO events at `aio_max_nr` and
    /// `aio_nr`, and an iotune that measures for `iotune_seconds`.
    async fn start(aio_max_nr: u64, aio_nr: u64, iotune_seconds: u64) -> ScyllaSidecar {
        let defaults = harness::fixtures().unwrap().join("scylla");
        let (sim, client, dir, kubeconfig) = api_with_the_crd().await;
        let clusters: Api<Cluster> = Api::namespaced(client.clone(), "db");
        let spec = cluster("c")
            .version("6.2.3")
            .with_spec(json!({"mode": "scylla"}))
            .rack("r", 1)
            .build();
        create_cluster(&clusters, &spec).await;
        let cluster = clusters.get("c").await.unwrap();
        let rack = &cluster.spec.datacenter.racks[0];
        let valid = controller::validated::validate(&cluster).expect("a valid Cluster");
        let mut service = resources::member_service(&valid, rack, 0, true);
        service.spec.as_mut().unwrap().cluster_ip = Some("127.2.0.11".into());
        let services: Api<Service> = Api::namespaced(client.clone(), "db");
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();

        let fs = dir.path().join("proc-sys-fs");
        std::fs::create_dir(&fs).unwrap();
        std::fs::write(fs.join("aio-max-nr"), format!("{aio_max_nr}\n")).unwrap();
        std::fs::write(fs.join("aio-nr"), format!("{aio_nr}\n")).unwrap();
        let executable = |name: &str, body: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            path
        };
        // iotune: says when it starts (its PID), measures, writes iotune's file.
        let iotune = executable(
            "iotune",
            format!(
                "echo $$ > {0}.tmp && mv {0}.tmp {0}\nsleep {iotune_seconds}\necho 'disks: []' > \"$4\"",
                dir.path().join("iotune.pid").display()
            ),
        );
        // the "database": records its command line and waits to be stopped.
        let database = executable(
            "scylla",
            format!(
                "echo \"$@\" > {0}.tmp && mv {0}.tmp {0}\nexec sleep 600",
                dir.path().join("database.args").display()
            ),
        );
        let probe = format!("127.0.0.1:{}", free_port());
        let mut process = Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
            .arg("sidecar")
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", SCYLLA_MEMBER)
            .env("POD_NAMESPACE", "db")
            .env("POD_CLUSTER", "c")
            .env("POD_DATACENTER", "dc")
            .env("POD_RACK", "r")
            .env("POD_IP", "127.1.0.11")
            .env("CPU_LIMIT", "2")
            .env("MEMORY_LIMIT", "4Gi")
            .env("PROBE_ADDR", &probe)
            .env(
                "SCYLLA_API_URL",
                format!("http://127.0.0.1:{}", free_port()),
            )
            .env("CONFIG_DEFAULTS_DIR", &defaults)
            .env("CONFIG_DIR", dir.path().join("conf"))
            .env("DATA_DIR", dir.path().join("data"))
            .env("OVERRIDES_DIR", dir.path().join("overrides"))
            .env("DATABASE_COMMAND", &database)
            .env("IOTUNE_COMMAND", &iotune)
            .env("PROC_SYS_FS", &fs)
            .env("AIO_CHECK_SECONDS", "1")
            .env("DRAIN_TIMEOUT_SECONDS", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (log, reader) = collect_log(process.stderr.take().unwrap());
        ScyllaSidecar {
            _sim: sim,
            services,
            dir,
            process,
            log,
            reader: Some(reader),
            probe,
        }
    }

    fn seen(&self) -> String {
        format!("the sidecar's log:\n{}", self.log.lock().unwrap())
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    async fn start_refused(&self) -> Option<String> {
        annotation(
            &self.services.get(SCYLLA_MEMBER).await.unwrap().metadata,
            sidecar::member::START_REFUSED,
        )
    }

    /// `/healthz`, answered within a second (the kubelet's probe has a
    /// timeout of 1 s by default): its status.
    fn healthz(&self) -> Option<u16> {
        let probe = self.probe.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(crate::common::http_get(&probe, "/healthz").map(|r| r.0));
        });
        rx.recv_timeout(std::time::Duration::from_secs(1))
            .ok()
            .flatten()
    }

    /// SIGTERM, as the kubelet stops the container; how long until the
    /// sidecar exited, and its status.
    async fn stop(mut self) -> (std::time::Duration, std::process::ExitStatus) {
        let asked = std::time::Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.process.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let log = self.log.clone();
        let status = until_with(
            "the sidecar to stop",
            secs(30),
            || std::future::ready(self.process.try_wait().unwrap()),
            || format!("the sidecar's log:\n{}", log.lock().unwrap()),
        )
        .await;
        let took = asked.elapsed();
        // Its standard error ends when every process that inherited it
        // (the database, iotune and whatever they started) is gone.
        if let Some(reader) = self.reader.take() {
            let (done, ended) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = done.send(reader.join());
            });
            assert!(
                ended
                    .recv_timeout(std::time::Duration::from_secs(5))
                    .is_ok(),
                "something the sidecar started outlived it by 5 s, holding its standard error"
            );
        }
        (took, status)
    }
}

/// ScyllaDB's AIO events (issue 30), with the real sidecar: on a Node whose
/// `fs.aio-max-nr` is used up by another ScyllaDB (65536 of 65536, as the
/// first member of two shards leaves a default GKE Node), the sidecar
/// does not start ScyllaDB (which would fail with "Could not setup Async
/// I/O" and restart forever): it stays alive, says why with both numbers
/// and the fix on its log and its member Service, and looks again; once
/// the admin raises the limit it measures the disk and starts ScyllaDB,
/// without a restart, and withdraws what it said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scylla_member_waits_for_the_nodes_aio_events_and_starts_once_raised() {
    let member = ScyllaSidecar::start(65_536, 65_536, 0).await;
    let refused = until_with(
        "the refusal on the member Service",
        secs(60),
        || member.start_refused(),
        || member.seen(),
    )
    .await;
    for part in [
        "its 2 shard(s) need at least 2054 free AIO events",
        "fs.aio-max-nr is 65536 and fs.aio-nr 65536",
        "so 0 AIO events are free",
        "raise fs.aio-max-nr on the Node",
        "podAntiAffinity",
    ] {
        assert!(refused.contains(part), "{part:?} in {refused}");
    }
    assert!(
        member.log.lock().unwrap().contains(&refused),
        "{}",
        member.seen()
    );
    // Alive (the liveness probe passes) and nothing started, a while on.
    tokio::time::sleep(secs(3)).await;
    assert_eq!(member.healthz(), Some(200), "{}", member.seen());
    assert!(!member.path("iotune.pid").exists(), "{}", member.seen());
    assert!(!member.path("database.args").exists(), "{}", member.seen());

    // The admin raises the Node's limit (the DaemonSet of the GKE guide).
    std::fs::write(member.path("proc-sys-fs/aio-max-nr"), "30000000\n").unwrap();
    until_with(
        "the database to start",
        secs(30),
        || std::future::ready(member.path("database.args").is_file()),
        || member.seen(),
    )
    .await;
    let args = std::fs::read_to_string(member.path("database.args")).unwrap();
    assert!(args.contains("--smp 2"), "{args}");
    until_with(
        "the refusal withdrawn",
        secs(10),
        || async { member.start_refused().await.is_none() },
        || member.seen(),
    )
    .await;
    let (_, status) = member.stop().await;
    assert_eq!(status.code(), Some(143));
}

/// iotune off the runtime's thread (issue 30): while it measures (about
/// two minutes outside developer mode; 8 s here) the liveness probe
/// answers within a second every time, where it used to go unanswered
/// until iotune ended and the kubelet killed the container after ~75 s;
/// and the Pod's stop stops the sidecar at once, iotune with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_while_iotune_measures_and_a_stop_ends_it() {
    let member = ScyllaSidecar::start(65_536, 0, 8).await;
    let pid_file = member.path("iotune.pid");
    until_with(
        "iotune to start",
        secs(60),
        || std::future::ready(pid_file.is_file()),
        || member.seen(),
    )
    .await;
    let iotune: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let started = std::time::Instant::now();
    let mut answered = 0;
    while started.elapsed() < secs(4) {
        assert_eq!(
            member.healthz(),
            Some(200),
            "probe {answered} unanswered within 1 s while iotune measures\n{}",
            member.seen()
        );
        answered += 1;
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(
        member
            .log
            .lock()
            .unwrap()
            .contains("measuring the data volume"),
        "{}",
        member.seen()
    );
    assert!(!member.path("database.args").exists());
    let (took, status) = member.stop().await;
    assert!(took < secs(3), "the sidecar took {took:?} to stop");
    assert_eq!(status.code(), Some(0));
    // iotune was killed with it (nothing reaps it in this test process but
    // the kernel once its parent is gone: the PID disappears or is a
    // zombie of the init of the host).
    let gone = || {
        std::fs::read_to_string(format!("/proc/{iotune}/stat"))
            .map(|stat| stat.split_whitespace().nth(2) == Some("Z"))
            .unwrap_or(true)
    };
    until_with(
        "iotune to be gone",
        secs(5),
        || std::future::ready(gone()),
        String::new,
    )
    .await;
}
