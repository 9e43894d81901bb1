//! The real kubectl against kubesim, the oldest and the newest of the
//! versions on the machine image (the Google Cloud SDK ships `kubectl.1.27`
//! to `kubectl.1.33` beside `kubectl`): every verb a person uses on a
//! Cassandra cluster.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use testworld::kubesim::patch::PatchType;
use testworld::kubesim::store::{Subresource, Target, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{Kubectl, write_file as write};

/// The words of line `n` of kubectl's table `out` (0: the header).
fn columns(out: &str, n: usize) -> Vec<&str> {
    out.lines()
        .nth(n)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

async fn suite(version: &str) {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new(version, &sim, dir.path());
    let v = version;

    // apply, client-side: the CRD, then the multi-rack example
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/cassandra.rook.io_clusters.yaml"
    );
    assert!(
        k.ok(&["apply", "-f", crd]).contains(
            "customresourcedefinition.apiextensions.k8s.io/clusters.cassandra.rook.io created"
        ),
        "{v}"
    );
    k.ok(&["create", "namespace", "databases"]);
    // a generator that sends protobuf: create service clusterip
    assert!(
        k.ok(&["create", "service", "clusterip", "web", "--tcp=5678:8080"])
            .contains("service/web created"),
        "{v}"
    );
    let web: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "service", "web", "-o", "json"])).unwrap();
    assert_eq!(
        web["spec"]["ports"],
        json!([{"name": "5678-8080", "protocol": "TCP", "port": 5678, "targetPort": 8080}]),
        "{v}"
    );
    assert_eq!(web["spec"]["selector"], json!({"app": "web"}), "{v}");
    assert_eq!(web["spec"]["type"], "ClusterIP", "{v}");
    assert!(
        web["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "{v}"
    );
    // get events: the API server's columns, in both APIs
    sim.store()
        .create(
            &Target::new("", "v1", "events", Some("default")),
            json!({"metadata": {"name": "db-0.1"},
                "involvedObject": {"kind": "Pod", "name": "db-0", "namespace": "default"},
                "reason": "MemberReplacing", "message": "replacing db-0 ", "type": "Warning",
                "source": {"component": "cassandra-operator"},
                "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:00Z", "count": 2}),
            &WriteOptions::default(),
        )
        .unwrap();
    for resource in ["events", "events.v1.events.k8s.io"] {
        let out = k.ok(&["get", resource]);
        assert_eq!(
            columns(&out, 0),
            ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            "{v} {resource}:\n{out}"
        );
        assert_eq!(
            columns(&out, 1)[1..],
            [
                "Warning",
                "MemberReplacing",
                "pod/db-0",
                "replacing",
                "db-0"
            ],
            "{v} {resource}:\n{out}"
        );
    }
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/examples/multi-rack.yaml"
    );
    let mut applied = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    // the custom resource is served once the CRD is established
    while !applied.contains("cluster.cassandra.rook.io/orders created") {
        let out = k.command(&["apply", "-f", example]).output().unwrap();
        applied = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            Instant::now() < deadline,
            "{v}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        k.ok(&["apply", "-f", example])
            .contains("cluster.cassandra.rook.io/orders unchanged"),
        "{v}"
    );

    // apply, server-side
    let cm = write(
        dir.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: overrides, namespace: databases}\ndata: {k: \"1\"}\n",
    );
    assert!(
        k.ok(&["apply", "--server-side", "-f", &cm])
            .contains("configmap/overrides serverside-applied"),
        "{v}"
    );

    // get: a table with the CRD's printer columns, the short name
    let table = k.ok(&["get", "clusters.cassandra.rook.io", "-A"]);
    assert_eq!(
        columns(&table, 0),
        [
            "NAMESPACE",
            "NAME",
            "VERSION",
            "MEMBERS",
            "READY",
            "STATUS",
            "AGE"
        ],
        "{v}: {table}"
    );
    assert!(
        k.ok(&["get", "cass", "-n", "databases", "-o", "name"])
            .contains("cluster.cassandra.rook.io/orders"),
        "{v}"
    );

    // describe and explain
    let describe = k.ok(&["describe", "cass", "-n", "databases", "orders"]);
    assert!(
        describe.contains("Jmx Exporter Config Map Name:  orders-jmx-exporter"),
        "{v}: {describe}"
    );
    let explain = k.ok(&["explain", "clusters.spec.datacenter.racks.members"]);
    assert!(
        explain.contains("Number of Cassandra members in this rack"),
        "{v}: {explain}"
    );

    // label, annotate, the three patch types
    assert!(
        k.ok(&[
            "label",
            "cm",
            "overrides",
            "-n",
            "databases",
            "team=payments"
        ])
        .contains("configmap/overrides labeled"),
        "{v}"
    );
    assert!(
        k.ok(&[
            "annotate",
            "cm",
            "overrides",
            "-n",
            "databases",
            "owner=sre"
        ])
        // 1.27 says "annotate", later versions "annotated"
        .contains("configmap/overrides annotate"),
        "{v}"
    );
    let patch_overrides = |kind: &str, patch: &str| {
        k.ok(&[
            "patch",
            "cm",
            "overrides",
            "-n",
            "databases",
            "--type",
            kind,
            "-p",
            patch,
        ]);
    };
    patch_overrides("merge", r#"{"data":{"k":"2"}}"#);
    patch_overrides("json", r#"[{"op":"add","path":"/data/j","value":"3"}]"#);
    let data = k.ok(&[
        "get",
        "cm",
        "overrides",
        "-n",
        "databases",
        "-o",
        "jsonpath={.data.k},{.data.j},{.metadata.labels.team},{.metadata.annotations.owner}",
    ]);
    assert_eq!(data, "2,3,payments,sre", "{v}");
    let sts = write(
        dir.path(),
        "sts.yaml",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: web, namespace: databases}\nspec:\n  replicas: 1\n  serviceName: web\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - {name: a, image: busybox, env: [{name: X, value: \"1\"}]}\n      - {name: b, image: busybox}\n",
    );
    k.ok(&["apply", "-f", &sts]);
    // strategic merge: containers merge by name, env by name
    k.ok(&["patch", "statefulset", "web", "-n", "databases", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"b","env":[{"name":"Y","value":"2"}]}]}}}}"#]);
    let env = k.ok(&["get", "sts", "web", "-n", "databases", "-o", "jsonpath={.spec.template.spec.containers[*].name}|{.spec.template.spec.containers[0].env[0].name}|{.spec.template.spec.containers[1].env[0].name}"]);
    assert_eq!(env, "a b|X|Y", "{v}");

    // scale
    assert!(
        k.ok(&[
            "scale",
            "statefulset",
            "web",
            "-n",
            "databases",
            "--replicas=3"
        ])
        .contains("statefulset.apps/web scaled"),
        "{v}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "sts",
            "web",
            "-n",
            "databases",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3",
        "{v}"
    );

    // get -w sees a change as it happens
    let mut watch = k
        .command(&[
            "get",
            "cm",
            "overrides",
            "-n",
            "databases",
            "-w",
            "-o",
            "jsonpath={.data.k}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(2)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_millis(500));
    patch_overrides("merge", r#"{"data":{"k":"watched"}}"#);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{v}: kubectl get -w did not show the change"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(reader.join().unwrap(), ["2", "watched"], "{v}");

    // wait --for=condition, on the Cluster's status written by its controller
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "AllMembersReady",
        "message": "every member of every rack is ready", "lastTransitionTime": "2026-11-22T00:00:00Z"}]}});
    let clusters = Target::new(
        "cassandra.rook.io",
        "v1alpha1",
        "clusters",
        Some("databases"),
    );
    let waiter = {
        let k = k.clone();
        std::thread::spawn(move || {
            k.run(&[
                "wait",
                "--for=condition=Ready",
                "cass/orders",
                "-n",
                "databases",
                "--timeout=20s",
            ])
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let opts = WriteOptions::default();
    sim.store()
        .patch(
            &clusters,
            "orders",
            PatchType::Merge,
            &status,
            Subresource::Status,
            &opts,
        )
        .unwrap();
    let (ok, out, err) = waiter.join().unwrap();
    assert!(ok, "{v}: {err}");
    assert!(
        out.contains("cluster.cassandra.rook.io/orders condition met"),
        "{v}"
    );

    // delete
    assert!(
        k.ok(&["delete", "cm", "overrides", "-n", "databases"])
            .contains("configmap \"overrides\" deleted"),
        "{v}"
    );
    assert!(
        k.ok(&["delete", "-f", example])
            .contains("cluster.cassandra.rook.io \"orders\" deleted"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_works_against_kubesim() {
    suite("1.27").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_works_against_kubesim() {
    suite("1.33").await;
}
