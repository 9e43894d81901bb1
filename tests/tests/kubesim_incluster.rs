//! Pods get the in-cluster configuration a real kubelet gives them and
//! nothing else: the projected ServiceAccount volume (a token bound to the
//! Pod and refreshed before it expires, the cluster's CA, the namespace),
//! `KUBERNETES_SERVICE_HOST`/`_PORT` at kubesim's API, no `KUBECONFIG`;
//! `automountServiceAccountToken: false` is honoured, and a Pod whose
//! ServiceAccount does not exist is refused as the API server does.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use testworld::harness::{pods, str_at as s};
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{Store, Target, WriteOptions};

#[allow(dead_code)]
mod support;
use support::{assert_pod_bound_user, client_for, pod_dir, run_to_end, start_sim};

async fn start(work: &Path) -> KubeSim {
    start_sim(work, &["a"], |opts| {
        opts.max_grace = Some(Duration::from_secs(2));
        opts.restart_backoff = Duration::from_millis(100);
        // Tokens of 3 s: the kubelet must refresh them within the test.
        opts.max_token_lifetime = Some(Duration::from_secs(3));
    })
    .await
}

/// Creates a pod and waits until it has run to completion; its log.
async fn run(store: &Store, work: &Path, pod: Value) -> String {
    let done = run_to_end(store, pod).await;
    let log =
        std::fs::read_to_string(pod_dir(work, &done).join("logs/c/0.log")).unwrap_or_default();
    assert_eq!(s(&done, "/status/phase"), "Succeeded", "{log}");
    log
}

fn line<'a>(log: &'a str, key: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("{key} not in\n{log}"))
}

const SCRIPT: &str = r#"d=/var/run/secrets/kubernetes.io/serviceaccount
echo "NS=$(cat $d/namespace)"
echo "T1=$(cat $d/token)"
echo "CA=$(head -1 $d/ca.crt)"
sleep 4
echo "T2=$(cat $d/token)"
echo "HOST=$KUBERNETES_SERVICE_HOST"
echo "PORT=$KUBERNETES_SERVICE_PORT"
echo "KUBECONFIG=${KUBECONFIG:-none}"
"#;

#[tokio::test]
async fn pods_get_a_refreshed_bound_token_the_ca_and_the_apis_address() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store();
    store
        .create(
            &Target::new("", "v1", "serviceaccounts", Some("default")),
            json!({"metadata": {"name": "member"}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let log = run(
        store,
        work.path(),
        json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"restartPolicy": "Never", "serviceAccountName": "member",
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", SCRIPT]}]}}),
    )
    .await;
    assert_eq!(line(&log, "NS="), "default");
    assert_eq!(line(&log, "CA="), "-----BEGIN CERTIFICATE-----");
    let api = sim.pod_api().unwrap();
    assert_eq!(line(&log, "HOST="), api.ip().to_string());
    assert_eq!(line(&log, "PORT="), api.port().to_string());
    assert_eq!(
        line(&log, "KUBECONFIG="),
        "none",
        "no kubeconfig in a container"
    );
    let (t1, t2) = (line(&log, "T1="), line(&log, "T2="));
    assert_eq!(t1.split('.').count(), 3, "{log}");
    assert_ne!(t1, t2, "the kubelet refreshes a token before it expires");

    // The token is the member's, bound to the Pod.
    let pod = store.get(&pods(), "p").unwrap();
    let client = client_for(&sim.kubeconfig_with_token(t2)).await;
    assert_pod_bound_user(
        &client,
        "system:serviceaccount:default:member",
        "p",
        s(&pod, "/metadata/uid"),
    )
    .await;
    // It may do nothing its account's roles do not grant.
    let e = Api::<Pod>::default_namespaced(client)
        .get("p")
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 403),
        "{e:?}"
    );
}

#[tokio::test]
async fn automount_false_and_missing_accounts() {
    let work = tempfile::tempdir().unwrap();
    let sim = start(work.path()).await;
    let store = sim.store();
    let log = run(
        store,
        work.path(),
        json!({"metadata": {"name": "q", "namespace": "default"},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c",
                    "[ -e /var/run/secrets/kubernetes.io/serviceaccount/token ] && echo TOKEN=yes || echo TOKEN=no"]}]}}),
    )
    .await;
    assert_eq!(line(&log, "TOKEN="), "no");
    let q = store.get(&pods(), "q").unwrap();
    assert_eq!(s(&q, "/spec/serviceAccountName"), "default");
    assert!(q.pointer("/spec/volumes").is_none(), "{q:#}");

    let e = store
        .create(
            &pods(),
            json!({"metadata": {"name": "r", "namespace": "default"},
                "spec": {"serviceAccountName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}}),
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        r#"pods "r" is forbidden: error looking up service account default/nobody: serviceaccount "nobody" not found"#
    );
}
