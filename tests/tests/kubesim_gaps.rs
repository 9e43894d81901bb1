//! The smaller gaps of the simulated cluster, end to end with real
//! processes and the real kubectl: a SIGKILLed fake Cassandra is down in
//! the ring at once (the kubelet's death report) and comes back after its
//! restart; `kubectl logs` (`--tail`, `--previous`, `-c`) reads the
//! kubelet's log files; graceful deletion honours `--grace-period` and a
//! second DELETE does not cut a terminating Pod's grace; the scheduler
//! keeps a Pod with required anti-affinity Pending when every node has a
//! match; startup probes gate liveness and restart a container that never
//! starts; a Pod whose volume cannot be set up yet waits in
//! ContainerCreating and starts once it can.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::sim::SimOptions;
use testworld::kubesim::store::{DeleteOptions, Store, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{Kubectl, container_pid};

async fn start_sim(work: &Path, tune: impl FnOnce(&mut SimOptions)) -> KubeSim {
    support::start_sim(work, &["a"], |o| {
        o.fake_cassandra = Some(PathBuf::from(env!("CARGO_BIN_EXE_fake-cassandra")));
        o.fixtures = Some(testworld::harness::fixtures().unwrap());
        o.max_probe_period = Some(Duration::from_millis(200));
        o.restart_backoff = Duration::from_millis(100);
        tune(o);
    })
    .await
}

fn create(store: &Store, pod: Value) {
    store
        .create(&pods(), pod, &WriteOptions::default())
        .unwrap();
}

fn running(pod: &Value, restarts: u64) -> bool {
    let c = &pod["status"]["containerStatuses"][0];
    c["state"]["running"].is_object() && c["restartCount"] == restarts
}

/// The address the fake announces: not the pod IP, so that the kubelet
/// must know the node by its data directory.
const ADDRESS: &str = "10.250.0.1";

/// A member-like Pod: an init container, then the database image's
/// `cassandra -f` (the fake) as the container's PID 1, as the image's
/// database user (bin/cassandra refuses root), its data on a volume at
/// /var/lib/cassandra.
fn member_pod() -> Value {
    let setup = format!(
        "sed -i -e 's/^listen_address:.*/listen_address: {ADDRESS}/' -e 's/- seeds: .*/- seeds: \"{ADDRESS}\"/' /etc/cassandra/cassandra.yaml && exec cassandra -f"
    );
    json!({
        "metadata": {"name": "db-0", "namespace": "default"},
        "spec": {
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "prepare", "image": "busybox:1.36",
                "command": ["sh", "-c", "echo prepared"]}],
            "containers": [{"name": "cassandra", "image": "cassandra:4.1.5",
                "command": ["sh", "-c", setup],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/cassandra"}]}]
        }
    })
}

/// (host id, up, state) of the ring member at `address`.
fn member(sim: &KubeSim, address: &str) -> Option<(String, bool, String)> {
    sim.ring().with(|r| {
        r.nodes()
            .find(|n| n.address == address)
            .map(|n| (n.host_id.clone(), n.is_up(), format!("{:?}", n.state)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_fake_is_down_at_once_and_kubectl_logs_reads_its_runs() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), |_| {}).await;
    let store = sim.store().clone();
    create(&store, member_pod());
    let pod = until("db-0 running", 60, || {
        let p = store.get(&pods(), "db-0").ok()?;
        running(&p, 0).then_some(p)
    })
    .await;
    let (host_id, _, _) = until("the fake up and normal in the ring", 60, || {
        member(&sim, ADDRESS).filter(|(_, up, state)| *up && state == "Normal")
    })
    .await;

    // SIGKILL behind the kubelet's back: no lease to wait for.
    let pid = container_pid(&pod);
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let killed = Instant::now();
    until("the fake down in the ring", 5, || {
        member(&sim, ADDRESS).filter(|(_, up, _)| !up)
    })
    .await;
    assert!(
        killed.elapsed() < Duration::from_secs(1),
        "down only after {:?}",
        killed.elapsed()
    );
    // The container restarts (restartPolicy Always) on the same data: the
    // same member comes back up.
    let pod = until("db-0 restarted", 60, || {
        let p = store.get(&pods(), "db-0").ok()?;
        running(&p, 1).then_some(p)
    })
    .await;
    // (The exit code is not checked: `unshare --fork` turns a child's
    // death by signal into exit 1, where a real runtime reports 137.)
    assert!(pod["status"]["containerStatuses"][0]["lastState"]["terminated"].is_object());
    until("the same member up again", 60, || {
        member(&sim, ADDRESS).filter(|(h, up, state)| *h == host_id && *up && state == "Normal")
    })
    .await;

    // kubectl logs: the current run, the previous (killed) one, a tail,
    // the init container; the kubelet's error for a run that never was.
    let logs = work.path().join(format!(
        "pods/default_db-0_{}/logs/cassandra",
        s(&pod, "/metadata/uid")
    ));
    let dir = tempfile::tempdir().unwrap();
    for v in ["1.33", "1.27"] {
        let k = Kubectl::new(v, &sim, dir.path());
        let (ok, current, err) = k.run(&["logs", "db-0"]);
        assert!(ok, "{v}: {err}");
        assert!(
            current.contains(&format!("broadcast {ADDRESS}")),
            "{v}: {current}"
        );
        let file = std::fs::read_to_string(logs.join("1.log")).unwrap();
        assert!(
            file.starts_with(&current),
            "{v}: {current:?} is not the start of {file:?}"
        );
        let (ok, previous, err) = k.run(&["logs", "db-0", "-c", "cassandra", "--previous"]);
        assert!(ok, "{v}: {err}");
        assert_eq!(
            previous,
            std::fs::read_to_string(logs.join("0.log")).unwrap(),
            "{v}"
        );
        let (ok, last, err) = k.run(&["logs", "db-0", "--tail=1"]);
        assert!(ok, "{v}: {err}");
        assert_eq!(last.lines().count(), 1, "{v}: {last}");
        assert!(current.contains(&last), "{v}: {last}");
        let (ok, init, err) = k.run(&["logs", "db-0", "-c", "prepare"]);
        assert!(ok, "{v}: {err}");
        assert_eq!(init, "prepared\n", "{v}");
        // --follow: what is there, then what comes, until kubectl is
        // stopped (the container runs on).
        let mut follow = k
            .command(&["logs", "db-0", "-f"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(follow.try_wait().unwrap().is_none(), "{v}: -f ended early");
        follow.kill().unwrap();
        let out = follow.wait_with_output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with(&current),
            "{v}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let (ok, _, err) = k.run(&["logs", "db-0", "-c", "prepare", "--previous"]);
        assert!(!ok);
        assert!(
            err.contains(
                "Error from server (BadRequest): previous terminated container \"prepare\" in pod \"db-0\" not found"
            ),
            "{v}: {err}"
        );
    }
}

/// A container whose PID 1 has no SIGTERM handler: only SIGKILL ends it.
fn stubborn(name: &str, grace: Option<u64>) -> Value {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
            "command": ["sleep", "1000"]}]}
    });
    if let Some(g) = grace {
        p["spec"]["terminationGracePeriodSeconds"] = json!(g);
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_deletion_honours_the_grace_period_asked_for() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), |_| {}).await;
    let store = sim.store().clone();
    create(&store, stubborn("short", None));
    create(&store, stubborn("long", None));
    for name in ["short", "long"] {
        until("running", 30, || {
            let p = store.get(&pods(), name).ok()?;
            running(&p, 0).then_some(())
        })
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new("1.33", &sim, dir.path());

    // --grace-period=5: SIGKILL after 5 s (not 30, not at once).
    let began = Instant::now();
    let (ok, out, err) = k.run(&["delete", "pod", "short", "--grace-period=5"]);
    let took = began.elapsed();
    assert!(ok, "{err}");
    assert!(out.contains("pod \"short\" deleted"), "{out}");
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(8),
        "deleted after {took:?}"
    );

    // The default 30 s: a second plain DELETE leaves it terminating.
    for _ in 0..2 {
        let (ok, _, err) = k.run(&["delete", "pod", "long", "--wait=false"]);
        assert!(ok, "{err}");
    }
    store
        .delete(&pods(), "long", &DeleteOptions::default())
        .unwrap();
    // A longer grace is refused silently: still 30.
    store
        .delete(
            &pods(),
            "long",
            &DeleteOptions {
                grace_period: Some(60),
                ..Default::default()
            },
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = store.get(&pods(), "long").expect("still terminating");
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(running(&p, 0), "{p}");
    // --force --grace-period=0 removes it from the store at once.
    let (ok, _, err) = k.run(&["delete", "pod", "long", "--force", "--grace-period=0"]);
    assert!(ok, "{err}");
    assert_eq!(store.get(&pods(), "long").unwrap_err().code, 404);
}

/// A `sleep` Pod requesting `cpu`, with hostname anti-affinity to its
/// `app` when `anti`.
fn sleeper(name: &str, app: &str, cpu: &str, anti: bool) -> Value {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "busybox:1.36",
            "command": ["sleep", "1000"], "resources": {"requests": {"cpu": cpu}}}]}
    });
    if anti {
        p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}});
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_affinity_and_requests_keep_a_pod_pending_until_room_is_made() {
    let work = tempfile::tempdir().unwrap();
    let sim = KubeSim::start(Options {
        zones: vec!["a".into(), "b".into(), "c".into()],
        nodes_per_zone: 2,
        sim: Some(SimOptions::new(work.path())),
        ..Default::default()
    })
    .await
    .unwrap();
    let store = sim.store().clone();
    // Three nodes nearly full, three with one member each.
    for i in 0..3 {
        create(&store, sleeper(&format!("big-{i}"), "big", "7500m", false));
    }
    for i in 0..3 {
        create(&store, sleeper(&format!("db-{i}"), "db", "1", true));
    }
    let mut hosts = std::collections::BTreeSet::new();
    for name in ["big-0", "big-1", "big-2", "db-0", "db-1", "db-2"] {
        let node = until("bound", 20, || {
            let p = store.get(&pods(), name).ok()?;
            Some(s(&p, "/spec/nodeName").to_string()).filter(|n| !n.is_empty())
        })
        .await;
        hosts.insert(node);
    }
    assert_eq!(hosts.len(), 6, "one pod per node: {hosts:?}");
    let db0_node = s(&store.get(&pods(), "db-0").unwrap(), "/spec/nodeName").to_string();

    // A fourth member fits nowhere: the real scheduler's reasons.
    create(&store, sleeper("db-3", "db", "1", true));
    let cond = until("db-3 unschedulable", 20, || {
        let p = store.get(&pods(), "db-3").ok()?;
        p.pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
            .cloned()
    })
    .await;
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(
        cond["message"],
        "0/6 nodes are available: 3 Insufficient cpu, 3 node(s) didn't match pod anti-affinity rules. preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let p = store.get(&pods(), "db-3").unwrap();
    assert_eq!(s(&p, "/spec/nodeName"), "", "still Pending");
    assert_eq!(s(&p, "/status/phase"), "Pending");

    // A member goes: the pending one takes its place (and only there).
    store
        .delete(
            &pods(),
            "db-0",
            &DeleteOptions {
                grace_period: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let node = until("db-3 bound", 20, || {
        let p = store.get(&pods(), "db-3").ok()?;
        Some(s(&p, "/spec/nodeName").to_string()).filter(|n| !n.is_empty())
    })
    .await;
    assert_eq!(node, db0_node);
}

/// A container that is up (a marker in its volume) after `delay` seconds,
/// with a startup probe allowing `threshold` failures one second apart,
/// and a liveness probe that would kill it at once until then.
fn slow_starter(name: &str, delay: &str, threshold: u64) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "volumes": [{"name": "state", "emptyDir": {}}],
            "containers": [{"name": "app", "image": "busybox:1.36",
                "command": ["sh", "-c", format!("echo run >> /state/runs; sleep {delay}; touch /state/up; exec sleep 1000")],
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                "startupProbe": {"exec": {"command": ["test", "-e", "/state/up"]},
                    "periodSeconds": 1, "failureThreshold": threshold},
                "livenessProbe": {"exec": {"command": ["test", "-e", "/state/up"]},
                    "periodSeconds": 1, "failureThreshold": 1}}]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_probes_hold_liveness_back_or_restart_the_container() {
    let work = tempfile::tempdir().unwrap();
    // Probe periods at their real 1 s, so that the thresholds mean time.
    let sim = start_sim(work.path(), |o| {
        o.max_probe_period = None;
        o.max_grace = Some(Duration::from_secs(1));
    })
    .await;
    let store = sim.store().clone();
    // Up after 2 s, allowed 8 failures: liveness (which would kill it at
    // its first failure) waits; started, then ready, no restart.
    create(&store, slow_starter("patient", "2", 8));
    // Up after 60 s, allowed 3 failures: killed and restarted.
    create(&store, slow_starter("hasty", "60", 3));
    let status = |name: &str| {
        store
            .get(&pods(), name)
            .ok()
            .map(|p| p["status"]["containerStatuses"][0].clone())
    };
    let early = until("patient running", 20, || {
        status("patient").filter(|c| c["state"]["running"].is_object())
    })
    .await;
    assert_eq!(early["started"], false, "{early}");
    assert_eq!(early["ready"], false, "{early}");
    let started = until("patient started", 20, || {
        status("patient").filter(|c| c["started"] == true)
    })
    .await;
    assert_eq!(started["restartCount"], 0, "{started}");
    assert_eq!(started["ready"], true, "{started}");
    let restarted = until("hasty restarted", 30, || {
        status("hasty").filter(|c| c["restartCount"].as_u64() >= Some(1))
    })
    .await;
    assert!(
        restarted["lastState"]["terminated"].is_object(),
        "{restarted}"
    );
    assert_eq!(restarted["started"], false, "{restarted}");
    // Three failures a second apart (then the grace): it ran 2 s at
    // least, not killed at the first failure.
    let at = |k: &str| {
        testworld::kubesim::table::parse_rfc3339(s(
            &restarted,
            &format!("/lastState/terminated/{k}"),
        ))
        .expect("a time")
    };
    assert!(at("finishedAt") - at("startedAt") >= 2, "{restarted}");
    let pod = store.get(&pods(), "hasty").unwrap();
    let ran = |name: &str| -> usize {
        let p = store.get(&pods(), name).unwrap();
        std::fs::read_to_string(work.path().join(format!(
            "pods/default_{name}_{}/volumes/state/runs",
            s(&p, "/metadata/uid")
        )))
        .unwrap_or_default()
        .lines()
        .count()
    };
    assert!(ran("hasty") >= 1, "{pod}");
    let final_patient = status("patient").unwrap();
    assert_eq!(final_patient["restartCount"], 0, "{final_patient}");
    assert_eq!(ran("patient"), 1);
}

/// A Pod whose volume cannot be set up yet (its ConfigMap is missing)
/// waits in ContainerCreating, saying why, and runs once the ConfigMap
/// exists. (The kubelet once held its own lock while reporting the wait,
/// and the Pod's task, with a worker thread of the runtime, hung for
/// good: a member whose claim was still being deleted never started.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_volume_is_not_ready_waits_then_runs() {
    // A hung kubelet blocks the runtime's timers too: a watchdog thread
    // fails the test instead of letting it hang.
    let (done, watched) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            watched.recv_timeout(Duration::from_secs(60))
        {
            eprintln!("the kubelet hung: the Pod neither waited visibly nor ran in 60 s");
            std::process::exit(101);
        }
    });
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), |_| {}).await;
    let store = sim.store();
    create(
        store,
        json!({"metadata": {"name": "p"}, "spec": {
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
            "containers": [{"name": "c", "image": "busybox",
                "command": ["/bin/sh", "-c", "exec sleep 60"],
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}]}}),
    );
    until("waiting in ContainerCreating", 20, || {
        let p = store.get(&pods(), "p").ok()?;
        (s(&p, "/status/containerStatuses/0/state/waiting/reason") == "ContainerCreating"
            && s(&p, "/status/containerStatuses/0/state/waiting/message")
                .contains("configmap \"cfg\" not found"))
        .then_some(())
    })
    .await;
    store
        .create(
            &testworld::kubesim::store::Target::new("", "v1", "configmaps", Some("default")),
            json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}),
            &WriteOptions::default(),
        )
        .unwrap();
    until("running once its volume can be set up", 20, || {
        let p = store.get(&pods(), "p").ok()?;
        p.pointer("/status/containerStatuses/0/state/running")
            .is_some()
            .then_some(())
    })
    .await;
    let _ = done.send(());
}
