//! The simulated cluster end to end with real processes: a 3-replica
//! StatefulSet on local disks comes up in order, each pod on its PV's
//! node; a graceful pod deletion runs SIGTERM through the container's PID
//! 1; deleting a Node kills its processes and destroys its local SSDs, its
//! pod cannot come back while its local PV is bound to the gone node, and
//! deleting the claim of that unscheduled pod completes at once (the real
//! PVC protection rule) and the StatefulSet makes a new claim for it,
//! which binds to a free disk elsewhere. And the image contract
//! the sidecar is built against, with stand-ins for the operator binary
//! and the fake Cassandra: the install init container, the database
//! image's configuration directory, the `cassandra` program, the sim's
//! environment, HTTP readiness, a restart, preStop and SIGTERM.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::store::{
    DeleteOptions, EventType, ListOptions, Store, Target, WriteOptions,
};

#[allow(dead_code)]
mod support;
use support::{container_pid, pod_dir, pod_ready, start_sim, statefulset_on_local_disks};

fn t(group: &str, plural: &str, ns: Option<&str>) -> Target {
    Target::new(group, "v1", plural, ns)
}

fn ready(pod: &Value) -> bool {
    s(pod, "/status/phase") == "Running" && pod_ready(pod)
}

fn pid_alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| {
            st.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The container (`$$$$` is the shell's `$$` after the kubelet's `$(VAR)`
/// expansion): writes who it is to its data volume, then waits; on
/// SIGTERM it writes `bye` and exits.
const SCRIPT: &str = r#"echo "$POD_NAME $POD_IP $$$$ $CPU $NODE" > /data/hello
trap 'echo bye > /data/bye; exit 0' TERM
while :; do sleep 0.1; done"#;

/// Three members, one after the other, each with a claim on a local SSD.
fn statefulset() -> Value {
    let mut sts = statefulset_on_local_disks(
        "web",
        3,
        "1Gi",
        json!({
            "name": "app", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", SCRIPT],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
            ],
            "resources": {"limits": {"cpu": "1500m", "memory": "64Mi"}},
            "readinessProbe": {"exec": {"command": ["cat", "/data/hello"]}, "periodSeconds": 1}
        }),
    );
    sts["spec"]["podManagementPolicy"] = json!("OrderedReady");
    sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(30);
    sts
}

/// The claim `name` and the PersistentVolume it is bound to.
fn claim_and_volume(store: &Store, name: &str) -> (Value, Value) {
    let pvc = store
        .get(&t("", "persistentvolumeclaims", Some("default")), name)
        .unwrap();
    let pv = store
        .get(
            &t("", "persistentvolumes", None),
            s(&pvc, "/spec/volumeName"),
        )
        .unwrap();
    (pvc, pv)
}

fn pv_dir(work: &Path, store: &Store, pod: &str) -> PathBuf {
    let (_, pv) = claim_and_volume(store, &format!("data-{pod}"));
    testworld::kubesim::sim::disks::host_dir_of_pv(work, &pv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_on_local_disks_and_a_lost_node() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a", "b", "c"], |o| {
        o.max_grace = Some(Duration::from_secs(5));
        // A spare disk per Node: the lost member needs a free one elsewhere.
        o.local_ssds = 2;
    })
    .await;
    let store = sim.store().clone();
    let w = WriteOptions::default();
    let started = Instant::now();

    // Services: a headless one keeps no address, a ClusterIP one gets one.
    let svcs = t("", "services", Some("default"));
    store
        .create(&svcs, json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "None",
            "publishNotReadyAddresses": true, "selector": {"app": "web"}, "ports": [{"port": 80}]}}), &w)
        .unwrap();
    store
        .create(
            &svcs,
            json!({"metadata": {"name": "web-0"}, "spec": {
            "selector": {"statefulset.kubernetes.io/pod-name": "web-0"}, "ports": [{"port": 80}]}}),
            &w,
        )
        .unwrap();

    // Every pod that appears must find its predecessor Running and Ready.
    let mut events = store.subscribe();
    let order_store = store.clone();
    let order = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let Ok(e) = events.recv().await else { break };
            if e.plural != "pods" || e.kind != EventType::Added {
                continue;
            }
            let name = s(&e.object, "/metadata/name").to_string();
            let ord: usize = name.trim_start_matches("web-").parse().unwrap();
            let before = (ord > 0).then(|| order_store.get(&pods(), &format!("web-{}", ord - 1)));
            let prev_ready = before.is_none_or(|p| p.as_ref().is_ok_and(ready));
            seen.push((name, prev_ready));
        }
        seen
    });
    store
        .create(
            &t("apps", "statefulsets", Some("default")),
            statefulset(),
            &w,
        )
        .unwrap();

    let running: Vec<Value> = until("three ready pods", 60, || {
        let all: Vec<Value> = (0..3)
            .map(|i| store.get(&pods(), &format!("web-{i}")).ok())
            .collect::<Option<_>>()?;
        all.iter().all(ready).then_some(all)
    })
    .await;
    let up = started.elapsed();
    let seen = order.await.unwrap();
    assert_eq!(
        seen,
        vec![
            ("web-0".to_string(), true),
            ("web-1".to_string(), true),
            ("web-2".to_string(), true)
        ],
        "created in order, each after the previous was Running and Ready"
    );

    let sts = until("statefulset status", 10, || {
        let sts = store
            .get(&t("apps", "statefulsets", Some("default")), "web")
            .ok()?;
        (sts["status"]["readyReplicas"] == 3).then_some(sts)
    })
    .await;
    assert_eq!(sts["status"]["replicas"], 3);
    assert_eq!(sts["status"]["currentReplicas"], 3);
    assert_eq!(sts["status"]["updatedReplicas"], 3);
    assert_eq!(sts["status"]["observedGeneration"], 1);
    assert_eq!(
        sts["status"]["currentRevision"],
        sts["status"]["updateRevision"]
    );

    let mut ips = std::collections::BTreeSet::new();
    let mut nodes = std::collections::BTreeSet::new();
    for (i, pod) in running.iter().enumerate() {
        let name = format!("web-{i}");
        let node = s(pod, "/spec/nodeName").to_string();
        let ip = s(pod, "/status/podIP").to_string();
        let net = sim.network().expect("the sim runs");
        assert!(net.contains(ip.parse().unwrap()), "{ip}");
        ips.insert(ip.clone());
        nodes.insert(node.clone());
        // The claim is bound to a local PV on the pod's node.
        let (pvc, pv) = claim_and_volume(&store, &format!("data-{name}"));
        assert_eq!(s(&pvc, "/status/phase"), "Bound");
        assert_eq!(s(&pv, "/status/phase"), "Bound");
        assert_eq!(s(&pv, "/spec/storageClassName"), "local-disks");
        assert_eq!(
            pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
            json!([node])
        );
        // The process ran as PID 1 of its container with the downward API
        // environment, and wrote through its volume mount into the PV.
        let hello =
            std::fs::read_to_string(pv_dir(work.path(), &store, &name).join("hello")).unwrap();
        assert_eq!(hello.trim(), format!("{name} {ip} 1 2 {node}"));
        assert!(pid_alive(container_pid(pod)));
        let conds: Vec<(String, String)> = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (s(c, "/type").to_string(), s(c, "/status").to_string()))
            .collect();
        for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert!(
                conds.contains(&(kind.to_string(), "True".to_string())),
                "{kind}: {conds:?}"
            );
        }
    }
    assert_eq!(ips.len(), 3);
    assert_eq!(nodes.len(), 3, "the scheduler spreads the pods");
    let web0 = store.get(&svcs, "web-0").unwrap();
    let cluster_ip: std::net::Ipv4Addr = s(&web0, "/spec/clusterIP").parse().unwrap();
    assert_eq!(web0["spec"]["clusterIPs"], json!([cluster_ip.to_string()]));
    assert_eq!(
        s(&store.get(&svcs, "web").unwrap(), "/spec/clusterIP"),
        "None"
    );
    let expected: Vec<Value> = running
        .iter()
        .map(|p| json!([s(p, "/status/podIP"), s(p, "/spec/hostname")]))
        .collect();
    until("the headless service's endpoints", 10, || {
        let ep = store
            .get(&t("", "endpoints", Some("default")), "web")
            .ok()?;
        let mut got: Vec<Value> = ep["subsets"][0]["addresses"]
            .as_array()?
            .iter()
            .map(|a| json!([a["ip"], a["hostname"]]))
            .collect();
        got.sort_by_key(|v| v[1].to_string());
        (got == expected).then_some(())
    })
    .await;

    // Graceful deletion: SIGTERM reaches the container's PID 1, the pod
    // comes back on the same node with the same disk.
    let old2 = running[2].clone();
    let pid2 = container_pid(&old2);
    let marked = store
        .delete(&pods(), "web-2", &DeleteOptions::default())
        .unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let dir2 = pv_dir(work.path(), &store, "web-2");
    until("web-2 said bye", 20, || {
        dir2.join("bye").exists().then_some(())
    })
    .await;
    let back = until("web-2 back and ready", 60, || {
        let p = store.get(&pods(), "web-2").ok()?;
        (p["metadata"]["uid"] != old2["metadata"]["uid"] && ready(&p)).then_some(p)
    })
    .await;
    assert!(!pid_alive(pid2));
    assert_eq!(s(&back, "/spec/nodeName"), s(&old2, "/spec/nodeName"));
    assert_ne!(
        s(&back, "/status/podIP"),
        s(&old2, "/status/podIP"),
        "the node's IPAM hands out the next address, not the old one"
    );
    assert_eq!(pv_dir(work.path(), &store, "web-2"), dir2, "the same PV");

    // A lost machine: its processes die, the pod is replaced and cannot be
    // placed while its local PV is on the gone node.
    let lost = running[1].clone();
    let lost_node = s(&lost, "/spec/nodeName").to_string();
    let lost_pid = container_pid(&lost);
    let lost_disk = pv_dir(work.path(), &store, "web-1");
    assert!(lost_disk.join("hello").is_file());
    let survivors: Vec<u32> = [&running[0], &back]
        .iter()
        .map(|p| container_pid(p))
        .collect();
    store
        .delete(&t("", "nodes", None), &lost_node, &DeleteOptions::default())
        .unwrap();
    until("the lost node's process to die", 10, || {
        (!pid_alive(lost_pid)).then_some(())
    })
    .await;
    let pending = until("web-1 replaced and unschedulable", 20, || {
        let p = store.get(&pods(), "web-1").ok()?;
        let cond = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (p["metadata"]["uid"] != lost["metadata"]["uid"] && cond["status"] == "False")
            .then_some((p, cond))
    })
    .await;
    until("the lost node's local SSD destroyed", 10, || {
        (std::fs::read_dir(&lost_disk).map_or(0, |d| d.count()) == 0).then_some(())
    })
    .await;
    assert!(
        dir2.join("hello").is_file(),
        "the disks of other nodes keep their data"
    );
    let (p, cond) = pending;
    let pending_uid = p["metadata"]["uid"].clone();
    assert_eq!(s(&p, "/status/phase"), "Pending");
    assert_eq!(s(&p, "/spec/nodeName"), "");
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(
        cond["message"],
        "0/2 nodes are available: 2 node(s) had volume node affinity conflict. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    // The claim still names the PV on the gone node.
    let (pvc, pv) = claim_and_volume(&store, "data-web-1");
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!([lost_node])
    );
    for pid in &survivors {
        assert!(pid_alive(*pid), "pods on other nodes keep running");
    }
    let listed = store.list(&pods(), &ListOptions::default()).unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3);

    // The replace workflow (DESIGN.md section 5): delete the claim. No Pod
    // bound to a Node uses it (the replacement Pod is unscheduled), so it
    // goes at once (pvcprotection's podUsesPVC); the StatefulSet makes a
    // new one for the Pending Pod (1.27+), which binds to a free disk on a
    // live node, and the same Pod runs there.
    let claims = t("", "persistentvolumeclaims", Some("default"));
    let old_pv = s(&pvc, "/spec/volumeName").to_string();
    let old_claim_uid = pvc["metadata"]["uid"].clone();
    store
        .delete(&claims, "data-web-1", &DeleteOptions::default())
        .unwrap();
    let fresh = until("a new claim for the pending pod", 10, || {
        let c = store.get(&claims, "data-web-1").ok()?;
        (c["metadata"]["uid"] != old_claim_uid).then_some(c)
    })
    .await;
    assert!(fresh["metadata"]["deletionTimestamp"].is_null());
    let replaced = until("web-1 running elsewhere", 30, || {
        let p = store.get(&pods(), "web-1").ok()?;
        ready(&p).then_some(p)
    })
    .await;
    assert_eq!(
        replaced["metadata"]["uid"], pending_uid,
        "the pending pod itself, once its new claim bound"
    );
    let new_node = s(&replaced, "/spec/nodeName").to_string();
    assert_ne!(new_node, lost_node);
    let pvc = store.get(&claims, "data-web-1").unwrap();
    assert_ne!(s(&pvc, "/spec/volumeName"), old_pv);
    let stale = store
        .get(&t("", "persistentvolumes", None), &old_pv)
        .unwrap();
    assert_eq!(
        s(&stale, "/status/phase"),
        "Released",
        "the old local PV stays: the provisioner of the gone node cannot clean it"
    );
    let hello =
        std::fs::read_to_string(pv_dir(work.path(), &store, "web-1").join("hello")).unwrap();
    assert!(hello.trim().ends_with(&format!(" 2 {new_node}")), "{hello}");
    let survivors: Vec<u32> = survivors
        .into_iter()
        .chain([container_pid(&replaced)])
        .collect();

    eprintln!(
        "three pods ready in {up:?}; whole scenario {:?}",
        started.elapsed()
    );
    // Stopping kubesim kills every container.
    drop(sim);
    until("every container to die", 10, || {
        survivors.iter().all(|p| !pid_alive(*p)).then_some(())
    })
    .await;
}

/// The operator binary's stand-in: `install` copies itself, `sidecar`
/// records what it sees and supervises `cassandra`, `nodetool` records the
/// preStop call.
const OPERATOR: &str = r#"#!/bin/sh
case "$1" in
install)
  cp "$0" "$3/cassandra-operator"; echo installed into "$3" ;;
sidecar)
  { echo "pid=$$"; env | sort; } > /var/lib/cassandra/sidecar-env
  ls /etc/cassandra > /var/lib/cassandra/config-files
  command -v cassandra > /var/lib/cassandra/cassandra-path
  readlink /opt/cassandra/data > /var/lib/cassandra/home-data
  cassandra -f &
  child=$!
  trap 'echo "term after $(cat /var/lib/cassandra/prestop)" > /var/lib/cassandra/term; kill $child; exit 0' TERM
  wait $child
  exit $? ;;
nodetool)
  echo "$@" > /var/lib/cassandra/prestop ;;
esac
"#;

/// The fake Cassandra's stand-in: fails its first start, then serves HTTP
/// on port 8080 of every address of its Pod.
const CASSANDRA: &str = r#"#!/bin/sh
n=$(cat /var/lib/cassandra/starts 2>/dev/null || echo 0)
n=$((n+1))
echo $n > /var/lib/cassandra/starts
echo "$*" > /var/lib/cassandra/cassandra-args
[ "$n" = 1 ] && exit 3
exec python3 -m http.server --bind 0.0.0.0 8080 --directory /var/lib/cassandra
"#;

fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn member_statefulset() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {
            "replicas": 1, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "volumes": [{"name": "shared", "emptyDir": {}}],
                    "initContainers": [{
                        "name": "install",
                        "image": testworld::kubesim::sim::default_operator_repository() + ":0.1.0",
                        "command": ["/usr/local/bin/cassandra-operator", "install", "--target", "/mnt/shared"],
                        "volumeMounts": [{"name": "shared", "mountPath": "/mnt/shared"}]
                    }],
                    "containers": [{
                        "name": "cassandra", "image": "cassandra:4.1.5",
                        "command": ["/mnt/shared/cassandra-operator", "sidecar"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}
                        ],
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                        "ports": [{"name": "sidecar", "containerPort": 8080}],
                        "volumeMounts": [
                            {"name": "shared", "mountPath": "/mnt/shared"},
                            {"name": "data", "mountPath": "/var/lib/cassandra"}
                        ],
                        "readinessProbe": {"httpGet": {"path": "/starts", "port": "sidecar"}, "periodSeconds": 10},
                        "lifecycle": {"preStop": {"exec": {"command": ["/mnt/shared/cassandra-operator", "nodetool", "drain"]}}}
                    }]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                    "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_contract() {
    let fixtures = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures"
    ));
    assert!(
        fixtures.join("cassandra/4.1/cassandra.yaml").is_file(),
        "the fixtures are missing at {}",
        fixtures.display()
    );
    let work = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.operator_binary = Some(script(bin.path(), "cassandra-operator", OPERATOR));
        o.fake_cassandra = Some(script(bin.path(), "fake-cassandra", CASSANDRA));
        o.fixtures = Some(fixtures.to_path_buf());
        o.max_grace = Some(Duration::from_secs(5));
        o.max_probe_period = Some(Duration::from_millis(200));
        o.restart_backoff = Duration::from_millis(100);
    })
    .await;
    let store = sim.store().clone();
    store
        .create(
            &t("apps", "statefulsets", Some("default")),
            member_statefulset(),
            &WriteOptions::default(),
        )
        .unwrap();
    let pod = until("db-0 ready", 60, || {
        let p = store.get(&pods(), "db-0").ok()?;
        ready(&p).then_some(p)
    })
    .await;
    let ip = s(&pod, "/status/podIP").to_string();
    let data = pv_dir(work.path(), &store, "db-0");

    // The init container ran the operator binary and completed first.
    let init = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(init["state"]["terminated"]["exitCode"], 0);
    assert_eq!(init["state"]["terminated"]["reason"], "Completed");
    let pod_dir = work
        .path()
        .join("pods")
        .join(format!("default_db-0_{}", s(&pod, "/metadata/uid")));
    assert_eq!(
        std::fs::read_to_string(pod_dir.join("logs/install/0.log")).unwrap(),
        "installed into /mnt/shared\n"
    );
    // The database crashed once and was restarted; ready only through the
    // HTTP probe on the pod IP.
    let main = &pod["status"]["containerStatuses"][0];
    assert_eq!(main["restartCount"], 1);
    assert_eq!(main["lastState"]["terminated"]["exitCode"], 3);
    assert!(main["state"]["running"].is_object());
    assert_eq!(std::fs::read_to_string(data.join("starts")).unwrap(), "2\n");
    assert_eq!(
        std::fs::read_to_string(data.join("cassandra-args")).unwrap(),
        "-f\n"
    );

    // What the sidecar saw: PID 1, the sim's environment, the image's
    // configuration at /etc/cassandra.
    let env = std::fs::read_to_string(data.join("sidecar-env")).unwrap();
    let pod_url = sim.pod_url().expect("the sim runs");
    let api = sim.pod_api().expect("the sim runs");
    for line in [
        "pid=1".to_string(),
        "CONFIG_DEFAULTS_DIR=/etc/cassandra".into(),
        "CASSANDRA_HOME=/opt/cassandra".into(),
        "CASSANDRA_CONF=/etc/cassandra".into(),
        format!("KUBERNETES_SERVICE_HOST={}", api.ip()),
        format!("KUBERNETES_SERVICE_PORT={}", api.port()),
        format!("KUBESIM_URL={pod_url}"),
        format!("POD_IP={ip}"),
        "CASSANDRA_VERSION=4.1.5".into(),
        "MEMORY_LIMIT=1073741824".into(),
        "HOSTNAME=db-0".into(),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in\n{env}");
    }
    // Nothing a real kubelet would not set.
    for var in [
        "JOLOKIA_URL=",
        "KUBESIM_JOLOKIA_HOST=",
        "PROBE_ADDR=",
        "KUBECONFIG=",
    ] {
        assert!(!env.lines().any(|l| l.starts_with(var)), "{var} in\n{env}");
    }
    let mut expected: Vec<String> = std::fs::read_dir(fixtures.join("cassandra/4.1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    expected.sort();
    let seen: Vec<String> = std::fs::read_to_string(data.join("config-files"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(
        std::fs::read_to_string(data.join("cassandra-path")).unwrap(),
        "/opt/cassandra/bin/cassandra\n"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("home-data")).unwrap(),
        "/var/lib/cassandra\n"
    );

    // A network disk: bound at once, no node affinity.
    let (_, pv) = claim_and_volume(&store, "data-db-0");
    assert_eq!(s(&pv, "/spec/storageClassName"), "standard");
    assert!(pv["spec"].get("nodeAffinity").is_none());

    // Deletion: preStop first, then SIGTERM to the container's PID 1.
    store
        .delete(&pods(), "db-0", &DeleteOptions::default())
        .unwrap();
    until("db-0 gone", 20, || {
        store
            .get(&pods(), "db-0")
            .ok()
            .is_none_or(|p| p["metadata"]["uid"] != pod["metadata"]["uid"])
            .then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(data.join("term")).unwrap(),
        "term after nodetool drain\n"
    );
}

fn rolling_statefulset() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "roll", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "roll"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"app": "roll"}},
                "spec": {
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [{
                        "name": "app", "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c",
                            "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                        "livenessProbe": {"exec": {"command": ["/bin/sh", "-c", "! rm /scratch/die 2>/dev/null"]},
                            "periodSeconds": 1, "failureThreshold": 1}
                    }]
                }
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_rolling_update_and_scale_down() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(5));
        o.max_probe_period = Some(Duration::from_millis(200));
        o.restart_backoff = Duration::from_millis(100);
    })
    .await;
    let store = sim.store().clone();
    let sts_t = t("apps", "statefulsets", Some("default"));
    store
        .create(&sts_t, rolling_statefulset(), &WriteOptions::default())
        .unwrap();
    let both = |store: &Store| -> Option<Vec<Value>> {
        let all: Vec<Value> = (0..2)
            .map(|i| store.get(&pods(), &format!("roll-{i}")).ok())
            .collect::<Option<_>>()?;
        all.iter().all(ready).then_some(all)
    };
    let first = until("two ready pods", 30, || both(&store)).await;

    // A failing liveness probe restarts the container, not the pod (the
    // probe fails once: it takes the marker away).
    let pod0 = &first[0];
    let die = work
        .path()
        .join("pods")
        .join(format!("default_roll-0_{}", s(pod0, "/metadata/uid")))
        .join("volumes/scratch/die");
    std::fs::write(&die, "").unwrap();
    let restarted = until("roll-0 restarted", 20, || {
        let p = store.get(&pods(), "roll-0").ok()?;
        (p["status"]["containerStatuses"][0]["restartCount"] == 1 && ready(&p)).then_some(p)
    })
    .await;
    assert_eq!(restarted["metadata"]["uid"], pod0["metadata"]["uid"]);
    assert_eq!(
        restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 0,
        "the script exits 0 on SIGTERM"
    );
    assert!(!die.exists());

    // A template change rolls the pods from the highest ordinal down.
    let mut deleted = Vec::new();
    let mut events = store.subscribe();
    let sts = store.get(&sts_t, "roll").unwrap();
    let old_rev = s(&sts, "/status/updateRevision").to_string();
    store
        .patch(
            &sts_t,
            "roll",
            testworld::kubesim::patch::PatchType::Merge,
            &json!({"spec": {"template": {"metadata": {"annotations": {"roll": "2"}}}}}),
            testworld::kubesim::store::Subresource::Main,
            &WriteOptions::default(),
        )
        .unwrap();
    let rolled = until("the rollout", 30, || {
        while let Ok(e) = events.try_recv() {
            if e.plural == "pods" && e.kind == EventType::Deleted {
                deleted.push(s(&e.object, "/metadata/name").to_string());
            }
        }
        let sts = store.get(&sts_t, "roll").ok()?;
        let st = &sts["status"];
        (st["updatedReplicas"] == 2
            && st["readyReplicas"] == 2
            && st["currentRevision"] == st["updateRevision"]
            && st["observedGeneration"] == 2)
            .then_some(sts)
    })
    .await;
    assert_ne!(s(&rolled, "/status/updateRevision"), old_rev);
    assert_eq!(deleted, vec!["roll-1", "roll-0"]);
    for p in both(&store).expect("both ready after the rollout") {
        assert_eq!(
            s(&p, "/metadata/labels/controller-revision-hash"),
            s(&rolled, "/status/updateRevision")
        );
        assert_eq!(p["metadata"]["annotations"]["roll"], "2");
    }

    // Scale down: the highest ordinal goes.
    let pid1 = container_pid(&store.get(&pods(), "roll-1").unwrap());
    store
        .patch(
            &sts_t,
            "roll",
            testworld::kubesim::patch::PatchType::Merge,
            &json!({"spec": {"replicas": 1}}),
            testworld::kubesim::store::Subresource::Main,
            &WriteOptions::default(),
        )
        .unwrap();
    until("roll-1 gone", 20, || {
        store.get(&pods(), "roll-1").is_err().then_some(())
    })
    .await;
    assert!(!pid_alive(pid1));
    assert!(ready(&store.get(&pods(), "roll-0").unwrap()));
    until("status of one replica", 10, || {
        let sts = store.get(&sts_t, "roll").ok()?;
        (sts["status"]["replicas"] == 1 && sts["status"]["readyReplicas"] == 1).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_and_downward_api_volumes_follow_their_sources() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(5));
    })
    .await;
    let store = sim.store().clone();
    let w = WriteOptions::default();
    let cms = t("", "configmaps", Some("default"));
    store
        .create(
            &cms,
            json!({"metadata": {"name": "cfg"}, "data": {"key": "one"}}),
            &w,
        )
        .unwrap();
    // The container copies what it sees into its scratch volume.
    store
        .create(
            &pods(),
            json!({"metadata": {"name": "watcher", "labels": {"intent": "a"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "info", "downwardAPI": {"items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "scratch", "emptyDir": {}}
                ],
                "containers": [{
                    "name": "c", "image": "busybox",
                    "command": ["/bin/sh", "-c",
                        "trap 'exit 0' TERM; while :; do cat /cfg/key > /scratch/key.tmp; mv /scratch/key.tmp /scratch/key; cat /info/labels > /scratch/labels.tmp; mv /scratch/labels.tmp /scratch/labels; sleep 0.1; done"],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/cfg", "readOnly": true},
                        {"name": "info", "mountPath": "/info"},
                        {"name": "scratch", "mountPath": "/scratch"}
                    ]
                }]
            }}),
            &w,
        )
        .unwrap();
    let pod = until("watcher ready", 20, || {
        let p = store.get(&pods(), "watcher").ok()?;
        ready(&p).then_some(p)
    })
    .await;
    let dir = pod_dir(work.path(), &pod);
    let seen = |f: &str| std::fs::read_to_string(dir.join("volumes/scratch").join(f)).ok();
    until("the first content", 10, || {
        (seen("key").as_deref() == Some("one") && seen("labels").as_deref() == Some("intent=\"a\""))
            .then_some(())
    })
    .await;
    let data_link = std::fs::read_link(dir.join("volumes/cfg/..data")).unwrap();
    store
        .patch(
            &cms,
            "cfg",
            testworld::kubesim::patch::PatchType::Merge,
            &json!({"data": {"key": "two"}}),
            testworld::kubesim::store::Subresource::Main,
            &w,
        )
        .unwrap();
    store
        .patch(
            &pods(),
            "watcher",
            testworld::kubesim::patch::PatchType::Merge,
            &json!({"metadata": {"labels": {"intent": "b"}}}),
            testworld::kubesim::store::Subresource::Main,
            &w,
        )
        .unwrap();
    until("the running container sees the new content", 10, || {
        (seen("key").as_deref() == Some("two") && seen("labels").as_deref() == Some("intent=\"b\""))
            .then_some(())
    })
    .await;
    assert_ne!(
        std::fs::read_link(dir.join("volumes/cfg/..data")).unwrap(),
        data_link,
        "swapped by the ..data symlink"
    );
    assert_eq!(
        std::fs::read_link(dir.join("volumes/cfg/key")).unwrap(),
        Path::new("..data/key")
    );
    assert_eq!(
        store.get(&pods(), "watcher").unwrap()["status"]["containerStatuses"][0]["restartCount"],
        0
    );
}
