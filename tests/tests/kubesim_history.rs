//! StatefulSet history with real processes: ControllerRevisions per
//! template, owned by the set and collected with it; a pod recreated
//! below the partition runs the current revision's template, one
//! recreated under `OnDelete` the update revision's; `currentRevision`
//! does not advance under `OnDelete` (as in 1.33); `revisionHistoryLimit`
//! prunes revisions no pod uses; going back to an older template
//! renumbers its revision; orphaned Pods are adopted by a set made again;
//! `maxUnavailable` is dropped (its feature gate
//! is off in 1.33). And the real kubectl's `rollout status|restart|
//! history|undo statefulset` (1.27 and 1.33).

use serde_json::{Value, json};
use std::time::Duration;
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::KubeSim;
use testworld::kubesim::patch::PatchType;
use testworld::kubesim::store::{
    DeleteOptions, ListOptions, Store, Subresource, Target, WriteOptions,
};

#[allow(dead_code)]
mod support;
use support::{Kubectl, container_pid, pod_ready, start_sim};

fn t(group: &str, plural: &str) -> Target {
    Target::new(group, "v1", plural, Some("default"))
}

fn sts_t() -> Target {
    t("apps", "statefulsets")
}

async fn start(work: &std::path::Path) -> KubeSim {
    start_sim(work, &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(5));
        o.restart_backoff = Duration::from_millis(100);
    })
    .await
}

/// A set whose container carries `VERSION` in its environment and exits
/// at once on SIGTERM.
fn statefulset(name: &str, replicas: u32, policy: &str, update: Value) -> Value {
    let mut sts = support::statefulset(
        name,
        replicas.into(),
        json!({
            "name": "app", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
            "env": [{"name": "VERSION", "value": "v1"}]
        }),
    );
    sts["spec"]["podManagementPolicy"] = json!(policy);
    sts["spec"]["updateStrategy"] = update;
    sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    sts
}

fn ready(pod: &Value) -> bool {
    s(pod, "/status/phase") == "Running" && pod_ready(pod)
}

/// `VERSION` in the environment of the pod's running container process.
fn running_version(pod: &Value) -> String {
    let pid = container_pid(pod);
    // A container is Running once its PID 1 is started, while that process
    // may still be exec'ing its way (setup script, setpriv) to the
    // container's command, as runc's init does after `start` returns; in
    // the middle of an exec the kernel shows an empty environment. Read
    // again for a moment before taking an empty one for an answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let version = environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("VERSION="));
        if let Some(version) = version {
            return version.to_string();
        }
        if std::time::Instant::now() > deadline {
            return String::new();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn revisions(store: &Store) -> Vec<Value> {
    let mut l: Vec<Value> = store
        .list(&t("apps", "controllerrevisions"), &ListOptions::default())
        .unwrap()["items"]
        .as_array()
        .unwrap()
        .clone();
    l.sort_by_key(|r| r["revision"].as_i64());
    l
}

fn names_and_numbers(store: &Store) -> Vec<(String, i64)> {
    revisions(store)
        .iter()
        .map(|r| {
            (
                s(r, "/metadata/name").to_string(),
                r["revision"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn patch(store: &Store, name: &str, body: Value) {
    store
        .patch(
            &sts_t(),
            name,
            PatchType::Merge,
            &body,
            Subresource::Main,
            &WriteOptions::default(),
        )
        .unwrap();
}

fn set_version(store: &Store, name: &str, v: &str) {
    patch(
        store,
        name,
        json!({"spec": {"template": {"spec": {"containers": [{
            "name": "app", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
            "env": [{"name": "VERSION", "value": v}]}]}}}}),
    );
}

fn pod(store: &Store, name: &str) -> Option<Value> {
    store.get(&pods(), name).ok()
}

fn uid(p: &Value) -> String {
    s(p, "/metadata/uid").to_string()
}

/// Deletes a pod and waits for the set to bring a new one up, ready.
async fn recreate(store: &Store, name: &str) -> Value {
    let old = uid(&pod(store, name).unwrap());
    store
        .delete(&pods(), name, &DeleteOptions::default())
        .unwrap();
    until(&format!("{name} back"), 30, || {
        pod(store, name).filter(|p| uid(p) != old && ready(p))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_partition_on_delete_and_history_limit() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let created = store
        .create(
            &sts_t(),
            statefulset(
                "hist",
                3,
                "Parallel",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2, "maxUnavailable": 2}}),
            ),
            &WriteOptions::default(),
        )
        .unwrap();
    assert_eq!(
        created["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}),
        "maxUnavailable is dropped while its feature gate is off"
    );

    // One revision, owned by the set, named <set>-<hash>; every pod made
    // from it.
    let sts = until("3 ready pods at the first revision", 30, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        (sts["status"]["readyReplicas"] == 3 && sts["status"]["updatedReplicas"] == 3)
            .then_some(sts)
    })
    .await;
    let r1 = s(&sts, "/status/updateRevision").to_string();
    assert_eq!(s(&sts, "/status/currentRevision"), r1);
    assert_eq!(sts["status"]["currentReplicas"], 3);
    let revs = revisions(&store);
    assert_eq!(names_and_numbers(&store), vec![(r1.clone(), 1)]);
    let rev1 = &revs[0];
    let hash = s(rev1, "/metadata/labels/controller.kubernetes.io~1hash");
    assert_eq!(r1, format!("hist-{hash}"));
    assert_eq!(rev1["metadata"]["labels"]["app"], "hist");
    assert_eq!(
        rev1["metadata"]["ownerReferences"][0]["uid"],
        sts["metadata"]["uid"]
    );
    assert_eq!(rev1["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(rev1["data"]["spec"]["template"]["$patch"], "replace");
    let mut uids = Vec::new();
    for i in 0..3 {
        let p = pod(&store, &format!("hist-{i}")).unwrap();
        assert_eq!(s(&p, "/metadata/labels/controller-revision-hash"), r1);
        assert_eq!(running_version(&p), "v1");
        uids.push(uid(&p));
    }

    // A new template rolls only the pods at or above the partition.
    set_version(&store, "hist", "v2");
    let sts = until("hist-2 at the second revision", 30, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        let p = pod(&store, "hist-2")?;
        (sts["status"]["updatedReplicas"] == 1 && ready(&p) && uid(&p) != uids[2]).then_some(sts)
    })
    .await;
    let r2 = s(&sts, "/status/updateRevision").to_string();
    assert_ne!(r2, r1);
    assert_eq!(s(&sts, "/status/currentRevision"), r1);
    assert_eq!(sts["status"]["currentReplicas"], 2);
    assert_eq!(
        names_and_numbers(&store),
        vec![(r1.clone(), 1), (r2.clone(), 2)]
    );
    let p2 = pod(&store, "hist-2").unwrap();
    assert_eq!(s(&p2, "/metadata/labels/controller-revision-hash"), r2);
    assert_eq!(running_version(&p2), "v2");

    // A pod below the partition comes back from the current revision's
    // template, not the newest.
    let p0 = recreate(&store, "hist-0").await;
    assert_eq!(s(&p0, "/metadata/labels/controller-revision-hash"), r1);
    assert_eq!(running_version(&p0), "v1");
    assert_eq!(
        uid(&pod(&store, "hist-1").unwrap()),
        uids[1],
        "below the partition stays"
    );

    // OnDelete: a deleted pod comes back from the update revision;
    // updatedReplicas follows, currentRevision stays (kubernetes#73492).
    patch(
        &store,
        "hist",
        json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}),
    );
    let p1 = recreate(&store, "hist-1").await;
    assert_eq!(s(&p1, "/metadata/labels/controller-revision-hash"), r2);
    assert_eq!(running_version(&p1), "v2");
    let sts = until("the status counts hist-1 as updated", 10, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        (sts["status"]["updatedReplicas"] == 2 && sts["status"]["readyReplicas"] == 3)
            .then_some(sts)
    })
    .await;
    assert_eq!(sts["status"]["currentReplicas"], 1);
    assert_eq!(s(&sts, "/status/currentRevision"), r1);

    // revisionHistoryLimit 0: a revision no pod uses goes as soon as it
    // is neither current nor update.
    patch(&store, "hist", json!({"spec": {"revisionHistoryLimit": 0}}));
    set_version(&store, "hist", "v3");
    let r3 = until("a third revision", 10, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        let u = s(&sts, "/status/updateRevision");
        (u != r2).then(|| u.to_string())
    })
    .await;
    set_version(&store, "hist", "v4");
    let r4 = until("a fourth revision, the third pruned", 10, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        let u = s(&sts, "/status/updateRevision").to_string();
        let names: Vec<String> = names_and_numbers(&store).into_iter().map(|r| r.0).collect();
        (u != r3 && !names.contains(&r3)).then_some(u)
    })
    .await;
    assert_eq!(
        names_and_numbers(&store),
        vec![(r1.clone(), 1), (r2.clone(), 2), (r4.clone(), 4)]
    );

    // Back to v2: its revision is renumbered, none is made.
    set_version(&store, "hist", "v2");
    until("v2's revision renumbered, the fourth pruned", 10, || {
        let sts = store.get(&sts_t(), "hist").ok()?;
        (s(&sts, "/status/updateRevision") == r2
            && names_and_numbers(&store) == vec![(r1.clone(), 1), (r2.clone(), 5)])
        .then_some(())
    })
    .await;
    for (i, u) in [(1, uid(&p1)), (2, uid(&p2))] {
        assert_eq!(
            uid(&pod(&store, &format!("hist-{i}")).unwrap()),
            u,
            "OnDelete touches no pod"
        );
    }

    // The garbage collector takes the revisions with the set.
    store
        .delete(&sts_t(), "hist", &DeleteOptions::default())
        .unwrap();
    until("the revisions collected", 30, || {
        revisions(&store).is_empty().then_some(())
    })
    .await;
}

impl Kubectl {
    /// `rollout history`'s revision numbers.
    fn history(&self) -> Vec<u32> {
        self.ok(&["rollout", "history", "statefulset/roll"])
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }
}

async fn rollout(version: &str) {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let k = Kubectl::new(version, &sim, work.path());
    store
        .create(
            &sts_t(),
            statefulset("roll", 2, "OrderedReady", json!({"type": "RollingUpdate"})),
            &WriteOptions::default(),
        )
        .unwrap();
    let status = ["rollout", "status", "statefulset/roll", "--timeout=60s"];
    assert!(
        k.ok(&status)
            .contains("partitioned roll out complete: 2 new pods have been updated..."),
        "{version}"
    );
    let before: Vec<String> = (0..2)
        .map(|i| uid(&pod(&store, &format!("roll-{i}")).unwrap()))
        .collect();
    assert_eq!(k.history(), vec![1], "{version}");

    // restart: a new template annotation, every pod replaced.
    assert!(
        k.ok(&["rollout", "restart", "statefulset/roll"])
            .contains("statefulset.apps/roll restarted"),
        "{version}"
    );
    let out = k.ok(&status);
    assert!(
        out.contains("partitioned roll out complete: 2 new pods have been updated..."),
        "{version}: {out}"
    );
    let sts = store.get(&sts_t(), "roll").unwrap();
    assert_eq!(
        s(&sts, "/status/currentRevision"),
        s(&sts, "/status/updateRevision")
    );
    for (i, old) in before.iter().enumerate() {
        let p = pod(&store, &format!("roll-{i}")).unwrap();
        assert_ne!(&uid(&p), old, "{version}: roll-{i} replaced");
        assert!(
            p["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string(),
            "{version}"
        );
        assert_eq!(
            s(&p, "/metadata/labels/controller-revision-hash"),
            s(&sts, "/status/updateRevision")
        );
    }
    assert_eq!(k.history(), vec![1, 2], "{version}");
    assert!(
        k.ok(&["rollout", "history", "statefulset/roll", "--revision=2"])
            .contains("kubectl.kubernetes.io/restartedAt"),
        "{version}"
    );

    // undo to the first template: its revision becomes the third.
    assert!(
        k.ok(&["rollout", "undo", "statefulset/roll", "--to-revision=1"])
            .contains("statefulset.apps/roll rolled back"),
        "{version}"
    );
    assert!(
        k.ok(&status)
            .contains("partitioned roll out complete: 2 new pods have been updated..."),
        "{version}"
    );
    assert_eq!(k.history(), vec![2, 3], "{version}");
    until("both pods back on the first template", 30, || {
        (0..2)
            .all(|i| {
                pod(&store, &format!("roll-{i}")).is_some_and(|p| {
                    ready(&p)
                        && p["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
                            .is_null()
                })
            })
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_rollout_statefulset() {
    rollout("1.27").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_rollout_statefulset() {
    rollout("1.33").await;
}

/// The controller reference of an object, if any.
fn controller_of(o: &Value) -> Option<String> {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| s(r, "/uid").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_made_again_adopts_its_orphaned_pods_and_scales_them() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store().clone();
    let make = |store: &Store| {
        store
            .create(
                &sts_t(),
                statefulset("adopt", 2, "Parallel", json!({"type": "OnDelete"})),
                &WriteOptions::default(),
            )
            .unwrap()
    };
    let first = make(&store);
    until("2 ready pods", 30, || {
        (0..2)
            .all(|i| pod(&store, &format!("adopt-{i}")).is_some_and(|p| ready(&p)))
            .then_some(())
    })
    .await;
    let uids: Vec<String> = (0..2)
        .map(|i| uid(&pod(&store, &format!("adopt-{i}")).unwrap()))
        .collect();

    // `kubectl delete sts --cascade=orphan`: the Pods lose their owner.
    store
        .delete(
            &sts_t(),
            "adopt",
            &DeleteOptions {
                propagation: Some(testworld::kubesim::store::Propagation::Orphan),
                ..DeleteOptions::default()
            },
        )
        .unwrap();
    until("the Pods orphaned", 30, || {
        (store.get(&sts_t(), "adopt").is_err()
            && (0..2).all(|i| {
                pod(&store, &format!("adopt-{i}")).is_some_and(|p| controller_of(&p).is_none())
            }))
        .then_some(())
    })
    .await;

    // Made again: the same Pods, now its own.
    let second = make(&store);
    let new_uid = s(&second, "/metadata/uid").to_string();
    assert_ne!(new_uid, s(&first, "/metadata/uid"));
    until("the Pods adopted", 30, || {
        (0..2)
            .all(|i| {
                pod(&store, &format!("adopt-{i}"))
                    .is_some_and(|p| controller_of(&p).as_deref() == Some(new_uid.as_str()))
            })
            .then_some(())
    })
    .await;
    let kept: Vec<String> = (0..2)
        .map(|i| uid(&pod(&store, &format!("adopt-{i}")).unwrap()))
        .collect();
    assert_eq!(kept, uids, "adopted, not made again");

    // Its own: a scale-down removes the highest.
    patch(&store, "adopt", json!({"spec": {"replicas": 1}}));
    until("adopt-1 removed", 30, || {
        pod(&store, "adopt-1").is_none().then_some(())
    })
    .await;
    assert_eq!(uid(&pod(&store, "adopt-0").unwrap()), uids[0]);
}
