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
use crate::scenario::{cluster, secs, until_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_renders_starts_probes_and_stops_the_database() {
    let defaults = harness::fixtures().unwrap().join("cassandra/4.1");
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
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (log, mut stderr) = (log.clone(), sidecar.stderr.take().unwrap());
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
