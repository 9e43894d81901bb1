//! The simulated kubelet applies `securityContext` to real processes
//! (issue 10): runAsUser/runAsGroup/fsGroup (the process's ids, its
//! volumes' group and setgid directories), runAsNonRoot
//! (`CreateContainerConfigError`, no process), readOnlyRootFilesystem,
//! capabilities and no_new_privs; and the cassandra image's files are
//! laid out and owned as in the official image.

use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{Store, Target, WriteOptions};

#[allow(dead_code)]
mod support;
use support::{pod_dir, run_to_end, start_sim};

fn t(group: &str, plural: &str, ns: Option<&str>) -> Target {
    Target::new(group, "v1", plural, ns)
}

async fn start(work: &Path) -> KubeSim {
    start_sim(work, &["a"], |opts| {
        opts.fixtures = Some(testworld::harness::fixtures().unwrap());
        opts.max_grace = Some(Duration::from_secs(2));
        opts.restart_backoff = Duration::from_millis(100);
    })
    .await
}

/// Creates a pod and waits until it has run to completion.
async fn run_to_completion(store: &Store, pod: Value) -> Value {
    let done = run_to_end(store, pod).await;
    assert_eq!(
        s(&done, "/status/phase"),
        "Succeeded",
        "every container exits 0: {:#}",
        done["status"]
    );
    done
}

fn log(work: &Path, pod: &Value, container: &str) -> String {
    std::fs::read_to_string(pod_dir(work, pod).join(format!("logs/{container}/0.log")))
        .unwrap_or_default()
}

/// The value of a `/proc/self/status` field in a log.
fn field<'a>(log: &'a str, name: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {name} in {log}"))
}

fn owner(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

const STATUS: &str = "grep -E '^(Uid|Gid|Groups|CapEff|CapBnd|NoNewPrivs):' /proc/self/status";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_user_writes_its_fs_group_volumes() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    store
        .create(
            &t("", "persistentvolumeclaims", Some("default")),
            json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let script = format!(
        "{STATUS}; mkdir /scratch/d /data/d && echo x > /scratch/d/f && echo y > /data/d/f && echo WROTE; \
         touch /etc/kubesim-not-root 2>/dev/null || echo DENIED"
    );
    let pod = run_to_completion(
        &store,
        json!({"metadata": {"name": "ids", "namespace": "default"},
            "spec": {"restartPolicy": "Never",
                "securityContext": {"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456},
                "volumes": [{"name": "scratch", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                        {"name": "data", "mountPath": "/data"}]}]}}),
    )
    .await;
    let out = log(work.path(), &pod, "c");
    assert_eq!(field(&out, "Uid"), "1234\t1234\t1234\t1234", "{out}");
    assert_eq!(field(&out, "Gid"), "2345\t2345\t2345\t2345", "{out}");
    assert_eq!(field(&out, "Groups"), "2345 3456", "{out}");
    assert_eq!(
        field(&out, "CapEff"),
        "0000000000000000",
        "non-root: no capabilities"
    );
    assert!(out.contains("WROTE"), "{out}");
    assert!(
        out.contains("DENIED"),
        "a non-root process cannot write /etc: {out}"
    );
    assert!(!Path::new("/etc/kubesim-not-root").exists());

    let scratch = pod_dir(work.path(), &pod).join("volumes/scratch");
    assert_eq!(
        owner(&scratch),
        (0, 3456, 0o2777),
        "emptyDir: 0777, fsGroup, setgid"
    );
    assert_eq!(
        owner(&scratch.join("d")).1,
        3456,
        "new directories inherit the group"
    );
    assert_eq!(owner(&scratch.join("d")).2 & 0o2000, 0o2000);
    assert_eq!(owner(&scratch.join("d/f")).0, 1234);
    assert_eq!(owner(&scratch.join("d/f")).1, 3456);
    let pvc = store
        .get(&t("", "persistentvolumeclaims", Some("default")), "data")
        .unwrap();
    let pv = work.path().join("pvs").join(s(&pvc, "/spec/volumeName"));
    assert_eq!(
        owner(&pv),
        (0, 3456, 0o2775),
        "the PV's root: fsGroup, group rw, setgid"
    );
    let f = owner(&pv.join("d/f"));
    assert_eq!((f.0, f.1), (1234, 3456), "written by 1234, group fsGroup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_on_a_root_image_never_starts() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let marker = work.path().join("started");
    store
        .create(
            &pods(),
            json!({"metadata": {"name": "rootless", "namespace": "default"},
                "spec": {"securityContext": {"runAsNonRoot": true},
                    "containers": [{"name": "cassandra", "image": "cassandra:4.1.4",
                        "command": ["sh", "-c", format!("touch {}; sleep 30", marker.display())]}]}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let pod = until("CreateContainerConfigError", 30, || {
        let p = store.get(&pods(), "rootless").ok()?;
        (s(&p, "/status/containerStatuses/0/state/waiting/reason") == "CreateContainerConfigError")
            .then_some(p)
    })
    .await;
    let uid = s(&pod, "/metadata/uid");
    assert_eq!(
        s(&pod, "/status/containerStatuses/0/state/waiting/message"),
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"rootless_default({uid})\", container: cassandra)"
        )
    );
    // The kubelet retries; it never starts a process.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = store.get(&pods(), "rootless").unwrap();
    assert_eq!(s(&pod, "/status/phase"), "Pending");
    assert_eq!(
        s(&pod, "/status/containerStatuses/0/state/waiting/reason"),
        "CreateContainerConfigError"
    );
    assert!(
        pod.pointer("/status/containerStatuses/0/containerID")
            .is_none()
    );
    assert!(!marker.exists(), "no process ran");
    assert!(!pod_dir(work.path(), &pod).join("logs/cassandra").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_image_files_as_user_999() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let script = format!(
        "{STATUS}; stat -c '%n %u %g %a' /etc/cassandra /var/lib/cassandra /var/log/cassandra /opt/cassandra; \
         readlink /opt/cassandra/data /opt/cassandra/logs /opt/cassandra/conf; \
         echo x > /var/lib/cassandra/kubesim-probe && echo x > /etc/cassandra/kubesim-probe && echo WROTE"
    );
    let pod = run_to_completion(
        &store,
        json!({"metadata": {"name": "db", "namespace": "default"},
            "spec": {"restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": true, "runAsUser": 999},
                "containers": [{"name": "cassandra", "image": "cassandra:4.1.4",
                    "command": ["sh", "-c", script]}]}}),
    )
    .await;
    let out = log(work.path(), &pod, "cassandra");
    assert_eq!(field(&out, "Uid"), "999\t999\t999\t999", "{out}");
    assert_eq!(
        field(&out, "Gid"),
        "999\t999\t999\t999",
        "the image's group of 999"
    );
    for line in [
        "/etc/cassandra 999 999 1777",
        "/var/lib/cassandra 999 999 1777",
        "/var/log/cassandra 999 999 1777",
        "/opt/cassandra 0 0 755",
        "/var/lib/cassandra\n/var/log/cassandra\n/etc/cassandra\n",
        "WROTE",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    // Without a volume, /var/lib/cassandra is the container's, not the host's.
    assert!(!Path::new("/var/lib/cassandra/kubesim-probe").exists());
    let layer = pod_dir(work.path(), &pod).join("containers/cassandra");
    assert_eq!(owner(&layer.join("var/lib/cassandra/kubesim-probe")).0, 999);
    assert_eq!(owner(&layer.join("etc/cassandra/cassandra.yaml")).0, 999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_root_capabilities_and_no_new_privs() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let outside = work.path().join("outside");
    let ro_script = format!(
        "touch {} 2>/dev/null && echo WROTE-ROOT || echo ROOT-READ-ONLY; \
         echo x > /scratch/f && echo WROTE-VOLUME; \
         echo x > /var/lib/cassandra/f && echo WROTE-IMAGE-VOLUME",
        outside.display()
    );
    let pod = run_to_completion(
        &store,
        json!({"metadata": {"name": "caps", "namespace": "default"},
        "spec": {"restartPolicy": "Never",
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "ro", "image": "cassandra:4.1.4", "command": ["sh", "-c", ro_script],
                    "securityContext": {"readOnlyRootFilesystem": true},
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
                {"name": "nnp", "image": "busybox", "command": ["sh", "-c", STATUS],
                    "securityContext": {"allowPrivilegeEscalation": false}},
                {"name": "dropped", "image": "busybox", "command": ["sh", "-c", STATUS],
                    "securityContext": {"capabilities": {"drop": ["ALL"]}}},
                {"name": "default", "image": "busybox", "command": ["sh", "-c", STATUS]}
            ]}}),
    )
    .await;
    let ro = log(work.path(), &pod, "ro");
    assert!(ro.contains("ROOT-READ-ONLY"), "{ro}");
    assert!(!outside.exists(), "the write outside volumes failed");
    assert!(ro.contains("WROTE-VOLUME"), "{ro}");
    assert!(
        ro.contains("WROTE-IMAGE-VOLUME"),
        "the image's VOLUME stays writable: {ro}"
    );

    let nnp = log(work.path(), &pod, "nnp");
    assert_eq!(field(&nnp, "NoNewPrivs"), "1");
    let dropped = log(work.path(), &pod, "dropped");
    assert_eq!(field(&dropped, "Uid"), "0\t0\t0\t0");
    assert_eq!(field(&dropped, "CapEff"), "0000000000000000");
    assert_eq!(field(&dropped, "NoNewPrivs"), "0");
    let default = log(work.path(), &pod, "default");
    // containerd's default set: root keeps exactly these.
    assert_eq!(field(&default, "CapEff"), "00000000a80425fb");
    assert_eq!(field(&default, "CapBnd"), "00000000a80425fb");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_probes_run_as_the_container_user() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    store
        .create(
            &pods(),
            json!({"metadata": {"name": "probed", "namespace": "default"},
                "spec": {"securityContext": {"runAsUser": 1234, "fsGroup": 3456},
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "30"],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "readinessProbe": {"periodSeconds": 1, "exec": {"command": ["sh", "-c",
                            "[ \"$(id -u) $(id -G)\" = '1234 0 3456' ] && touch /scratch/probed"]}}}]}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let pod = until("probed ready", 30, || {
        let p = store.get(&pods(), "probed").ok()?;
        (p.pointer("/status/containerStatuses/0/ready") == Some(&json!(true))).then_some(p)
    })
    .await;
    let f = owner(&pod_dir(work.path(), &pod).join("volumes/scratch/probed"));
    assert_eq!(
        (f.0, f.1),
        (1234, 3456),
        "the probe ran as the container's user"
    );
}

/// Pod Security Admission: a namespace labelled
/// `pod-security.kubernetes.io/enforce: restricted` refuses a Pod that
/// violates the level with the plugin's message (403), admits one that
/// meets it (the members' securityContext), and a StatefulSet whose Pods
/// are refused gets the StatefulSet controller's `FailedCreate` Warning
/// Event; `baseline` admits the plain Pod but not a privileged one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_security_admission_enforces_the_namespace_level() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store();
    for (name, level) in [("strict", "restricted"), ("base", "baseline")] {
        store
            .create(
                &t("", "namespaces", None),
                json!({"metadata": {"name": name,
                    "labels": {"pod-security.kubernetes.io/enforce": level}}}),
                &WriteOptions::default(),
            )
            .unwrap();
    }
    let plain = |name: &str| {
        json!({"metadata": {"name": name},
               "spec": {"containers": [{"name": "nginx", "image": "busybox", "command": ["sleep", "1"]}]}})
    };
    let pods_in = |ns: &str| t("", "pods", Some(ns));
    let err = store
        .create(&pods_in("strict"), plain("nginx"), &WriteOptions::default())
        .expect_err("refused");
    assert_eq!((err.code, err.reason), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "pods \"nginx\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"nginx\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"nginx\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"nginx\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"nginx\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    // What the operator gives its members is admitted.
    let member = json!({"metadata": {"name": "member"}, "spec": {
        "securityContext": {"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": true,
            "fsGroup": 999, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "cassandra", "image": "busybox", "command": ["sleep", "1"],
            "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true}}],
        "volumes": [{"name": "shared", "emptyDir": {}}]}});
    store
        .create(&pods_in("strict"), member, &WriteOptions::default())
        .expect("a restricted Pod is admitted");
    // Baseline: the plain Pod is fine, a privileged one is not.
    store
        .create(&pods_in("base"), plain("plain"), &WriteOptions::default())
        .expect("baseline admits it");
    let mut privileged = plain("priv");
    privileged["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let err = store
        .create(&pods_in("base"), privileged, &WriteOptions::default())
        .expect_err("refused");
    assert_eq!(
        err.message,
        "pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": \
         privileged (container \"nginx\" must not set securityContext.privileged=true)"
    );

    // A StatefulSet whose template violates the level: no Pod, a FailedCreate.
    store
        .create(
            &Target::new("apps", "v1", "statefulsets", Some("strict")),
            json!({"metadata": {"name": "web"}, "spec": {
                "replicas": 1, "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "busybox", "command": ["sleep", "60"]}]}}}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let event = until("a FailedCreate Event", 30, || {
        let list = store
            .list(&t("", "events", Some("strict")), &Default::default())
            .ok()?;
        list["items"]
            .as_array()?
            .iter()
            .find(|e| s(e, "/reason") == "FailedCreate")
            .cloned()
    })
    .await;
    assert_eq!(s(&event, "/type"), "Warning");
    assert_eq!(s(&event, "/involvedObject/kind"), "StatefulSet");
    assert_eq!(s(&event, "/involvedObject/name"), "web");
    assert!(
        s(&event, "/message").starts_with(
            "create Pod web-0 in StatefulSet web failed error: pods \"web-0\" is forbidden: \
             violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{event:#}"
    );
    assert!(store.get(&pods_in("strict"), "web-0").is_err());
}
