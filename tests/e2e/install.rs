//! The install a user runs, in the test world: `kubectl apply -k
//! manifests/` (the CRD, namespace, ServiceAccount, RBAC and the operator's
//! Deployment), the operator running from that Deployment's Pod template,
//! then every example of manifests/examples/ applied with kubectl, each in
//! its namespace and all at once, until each Cluster is Ready with all its
//! members.
//!
//! kubesim has no Deployment or DaemonSet controller: the test does what
//! they would, creating one Pod from the applied object's template.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use testworld::harness::{self, World, WorldOptions, container_logs};
use testworld::kubesim::KubeSim;
use testworld::kubesim::sim::default_operator_repository;

use crate::common::FAKE_WORLDS;
use crate::common::http_get;
use crate::scenario::{ring, secs, until_with};

fn manifests() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"))
}

/// `kubectl --kubeconfig <kubeconfig> args...`, which must succeed; its
/// stdout.
pub(crate) fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `to` as a path relative to `from` (kustomize refuses an absolute
/// path to a base): up to the root, then down.
fn relative_to_root(from: &Path, to: &Path) -> String {
    let from = from.canonicalize().unwrap();
    let to = to.canonicalize().unwrap();
    let up = "../".repeat(from.components().count() - 1);
    format!("{up}{}", to.strip_prefix("/").unwrap().display())
}

/// What the Deployment controller and its ReplicaSet would create: one Pod
/// of the applied Deployment's template.
async fn run_deployment(world: &Installed, namespace: &str, name: &str) -> String {
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), namespace);
    let deployment = deployments.get(name).await.unwrap();
    let template = deployment.spec.unwrap().template;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-0"), "namespace": namespace,
            "labels": template.metadata.as_ref().and_then(|m| m.labels.clone())},
        "spec": template.spec,
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), namespace);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    format!("{name}-0")
}

/// Waits until every named Cluster reports Ready with `members` members,
/// all ready; fails with every status, the Pods and the containers' logs.
async fn wait_converged(
    world: &Installed,
    work: &Path,
    clusters: &[(&str, &str, i32)],
    timeout: Duration,
) {
    until_with(
        "every Cluster Ready with all its members",
        timeout,
        || async {
            let mut pending = Vec::new();
            for &(namespace, name, members) in clusters {
                let api: Api<Cluster> = Api::namespaced(world.client.clone(), namespace);
                let status = api
                    .get_opt(name)
                    .await
                    .unwrap()
                    .and_then(|c| c.status)
                    .unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if !(ready && status.members == members && status.ready_members == members) {
                    pending.push(format!(
                        "{namespace}/{name}: {}/{} ready (want {members}), conditions {:?}",
                        status.ready_members, status.members, status.conditions
                    ));
                }
            }
            if pending.is_empty() {
                Ok(())
            } else {
                Err(pending.join("\n"))
            }
        },
        || {
            format!(
                "pods:\n{}\ncontainers:\n{}",
                kubectl(&world.kubeconfig, &["get", "pods", "-A", "-o", "wide"]),
                container_logs(work)
            )
        },
    )
    .await
}

/// A running world as the install tests use it: the API, the admin's
/// kubeconfig and client, the simulated cluster (dropped: every container
/// and kubesim stop).
pub(crate) struct Installed {
    pub sim: KubeSim,
    pub client: Client,
    pub kubeconfig: PathBuf,
}

/// A fresh world (`zones` of 3 Nodes) with the operator installed as a
/// user installs it: `kubectl apply -k manifests/`, then the operator's
/// Pod from its Deployment's template (its image is the binary under test,
/// run as the image's user 65532, with its probes), Ready.
async fn installed_world(zones: &[&str]) -> (tempfile::TempDir, Installed) {
    installed_world_from(zones, None).await
}

/// [`installed_world`], with the Deployment's image set to `image` by a
/// kustomization over manifests/ as `kustomize edit set image` writes it
/// (`images: [{name, newName, newTag}]`), and `image`'s repository known
/// to the test world as the operator's image (as a user pushes their own
/// build to their registry).
async fn installed_world_from(
    zones: &[&str],
    image: Option<(&str, &str)>,
) -> (tempfile::TempDir, Installed) {
    let work = tempfile::tempdir().unwrap();
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_cassandra-operator"));
    let fake = harness::beside(&operator, "fake-cassandra").unwrap();
    let mut opts = WorldOptions::new(operator, fake, harness::fixtures().unwrap(), zones);
    // The install is the test's: nothing of the operator's exists before it.
    opts.operator_rbac = false;
    if let Some((repository, _)) = image {
        opts.operator_images.push(repository.to_string());
    }
    let World {
        sim,
        client,
        kubeconfig,
        ..
    } = World::start(opts, work.path()).await.unwrap();
    let world = Installed {
        sim,
        client,
        kubeconfig,
    };
    let install = match image {
        None => manifests(),
        Some((repository, tag)) => {
            let overlay = work.path().join("install");
            std::fs::create_dir(&overlay).unwrap();
            std::fs::write(
                overlay.join("kustomization.yaml"),
                format!(
                    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                     resources:\n  - {}\n\
                     images:\n  - name: {}\n    newName: {repository}\n    newTag: {tag}\n",
                    relative_to_root(&overlay, &manifests()),
                    default_operator_repository(),
                ),
            )
            .unwrap();
            overlay
        }
    };

    let out = kubectl(&world.kubeconfig, &["apply", "-k", path(&install)]);
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/clusters.cassandra.rook.io created",
        "namespace/cassandra-operator created",
        "serviceaccount/cassandra-operator created",
        "clusterrole.rbac.authorization.k8s.io/cassandra-operator created",
        "clusterrolebinding.rbac.authorization.k8s.io/cassandra-operator created",
        "role.rbac.authorization.k8s.io/cassandra-operator-own-pod created",
        "rolebinding.rbac.authorization.k8s.io/cassandra-operator-own-pod created",
        "deployment.apps/cassandra-operator created",
    ] {
        assert!(out.contains(created), "{created} missing:\n{out}");
    }
    // a second install changes nothing
    let again = kubectl(&world.kubeconfig, &["apply", "-k", path(&install)]);
    assert!(
        again.lines().all(|l| l.ends_with(" unchanged")),
        "a second kubectl apply -k changed something:\n{again}"
    );
    kubectl(
        &world.kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd/clusters.cassandra.rook.io",
            "--timeout=30s",
        ],
    );
    let pod = run_deployment(&world, "cassandra-operator", "cassandra-operator").await;
    kubectl(
        &world.kubeconfig,
        &[
            "wait",
            "-n",
            "cassandra-operator",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=60s",
        ],
    );
    (work, world)
}

fn example(name: &str) -> PathBuf {
    manifests().join("examples").join(name)
}

/// The thesis's cluster: rack europe-west1-b, then the overlay that adds
/// rack europe-west1-c; one member per Node, each rack in its zone.
async fn the_thesis_example() {
    let (work, world) = installed_world(&["europe-west1-b", "europe-west1-c"]).await;
    kubectl(
        &world.kubeconfig,
        &["apply", "-k", path(&example("gke-local-ssd"))],
    );
    wait_converged(
        &world,
        work.path(),
        &[("cassandra", "cassandra", 3)],
        secs(240),
    )
    .await;
    let out = kubectl(
        &world.kubeconfig,
        &["apply", "-k", path(&example("gke-local-ssd-two-racks"))],
    );
    assert!(
        out.contains("cluster.cassandra.rook.io/cassandra configured"),
        "{out}"
    );
    wait_converged(
        &world,
        work.path(),
        &[("cassandra", "cassandra", 6)],
        secs(240),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "cassandra");
    let mut nodes = Vec::new();
    for pod in pods.list(&Default::default()).await.unwrap() {
        let name = pod.metadata.name.clone().unwrap();
        let node = pod.spec.unwrap().node_name.unwrap();
        let zone = if name.contains("europe-west1-b-") {
            "europe-west1-b"
        } else {
            "europe-west1-c"
        };
        assert!(
            node.starts_with(&format!("node-{zone}-")),
            "{name} on {node}"
        );
        nodes.push(node);
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 6, "{nodes:?}");
    let ring = ring(&world.sim);
    assert_eq!(ring.up(), 6, "{}", ring.text());
}

/// The laptop's cluster, with its overrides merged into cassandra.yaml.
async fn the_laptop_example() {
    let (work, world) = installed_world(&["local"]).await;
    kubectl(
        &world.kubeconfig,
        &["apply", "-k", path(&example("laptop"))],
    );
    wait_converged(&world, work.path(), &[("laptop", "laptop", 3)], secs(240)).await;
    let pod = std::fs::read_dir(work.path().join("pods"))
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("laptop_laptop-dc1-rack1-0_")
        })
        .map(|e| e.path())
        .expect("the laptop's first member's files");
    let rendered = std::fs::read_to_string(pod.join("volumes/shared/conf/cassandra.yaml")).unwrap();
    assert!(
        rendered.contains("concurrent_compactors: 1"),
        "the rack's ConfigMap was not merged:\n{rendered}"
    );
}

/// Rook's documented Cluster, with what it expects of the cluster: its
/// namespace, its StorageClass and an AWS cluster's old zone labels.
async fn rooks_documented_example() {
    let (work, world) = installed_world(&["us-east-1a"]).await;
    let prerequisites = work.path().join("rook-prerequisites.yaml");
    std::fs::write(
        &prerequisites,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: rook-cassandra}\n---\n\
         apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: my-storage-class}\n\
         provisioner: kubesim.io/network-disk\nvolumeBindingMode: Immediate\n",
    )
    .unwrap();
    kubectl(&world.kubeconfig, &["apply", "-f", path(&prerequisites)]);
    kubectl(
        &world.kubeconfig,
        &[
            "label",
            "nodes",
            "--all",
            "failure-domain.beta.kubernetes.io/region=us-east-1",
            "--overwrite",
        ],
    );
    kubectl(
        &world.kubeconfig,
        &["apply", "-f", path(&example("rook-cluster.yaml"))],
    );
    wait_converged(
        &world,
        work.path(),
        &[("rook-cassandra", "rook-cassandra", 3)],
        secs(240),
    )
    .await;
}

/// The value of an unlabelled series in a metrics text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The vRouter reloader: its DaemonSet's Pod on one Node, the reloader
/// reading both files the example mounts (the Pod's labels through the
/// downward API, the agent's ConfigMap), and a change of the Pod's label
/// reaching it. The agent container is left out: its image is a
/// placeholder kubesim cannot run, and kubesim does not simulate
/// `shareProcessNamespace` (tests/e2e/reloader.rs signals real processes).
async fn the_vrouter_example() {
    let (work, world) = installed_world(&["vrouter"]).await;
    let out = kubectl(
        &world.kubeconfig,
        &["apply", "-k", path(&example("vrouter-reloader"))],
    );
    assert!(
        out.contains("daemonset.apps/vrouter-agent created"),
        "{out}"
    );
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(world.client.clone(), "contrail");
    let template = daemonsets
        .get("vrouter-agent")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template;
    let mut spec = template.spec.unwrap();
    spec.containers.retain(|c| c.name == "reloader");
    spec.node_name = Some("node-vrouter-0".into());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "vrouter-agent-0", "namespace": "contrail",
            "labels": template.metadata.as_ref().and_then(|m| m.labels.clone())},
        "spec": spec,
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "contrail");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    kubectl(
        &world.kubeconfig,
        &[
            "wait",
            "-n",
            "contrail",
            "--for=condition=Ready",
            "pod/vrouter-agent-0",
            "--timeout=60s",
        ],
    );
    // the reloader's metrics, on its hostNetwork port
    let metrics = || {
        http_get("127.0.0.1:9102", "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    let until_metric = async |what: &str, want: f64| {
        until_with(
            &format!("{what} to reach {want}"),
            secs(30),
            || async {
                let text = metrics();
                if metric(&text, what).is_some_and(|v| v >= want) {
                    Ok(())
                } else {
                    Err(text)
                }
            },
            || container_logs(work.path()),
        )
        .await
    };
    until_metric("reloader_watched_files_present", 2.0).await;
    let before = metric(&metrics(), "reloader_changes_total").unwrap_or(0.0);
    kubectl(
        &world.kubeconfig,
        &[
            "label",
            "pod",
            "-n",
            "contrail",
            "vrouter-agent-0",
            "contrail.juniper.net/config-generation=2",
            "--overwrite",
        ],
    );
    // the new labels reach the file, the reloader sees the change (and,
    // with no agent to signal here, keeps it pending)
    until_metric("reloader_changes_total", before + 1.0).await;
}

/// Each example in a world of its own (a world's fake ring holds one
/// Cassandra cluster), the worlds side by side: each operator runs in its
/// own Pod's network namespace, so they share no port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_installs_the_operator_and_every_example_converges() {
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    tokio::join!(
        the_thesis_example(),
        the_laptop_example(),
        rooks_documented_example(),
        the_vrouter_example()
    );
    eprintln!(
        "install: four worlds, 12 members in 3 Clusters and the vRouter reloader ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One example alone in a fresh world with the operator installed.
async fn example_converges(name: &str, namespace: &str, cluster: &str, members: i32) {
    let _one = FAKE_WORLDS.lock().await;
    let (work, world) = installed_world(&["us-east-1a"]).await;
    kubectl(&world.kubeconfig, &["apply", "-k", path(&example(name))]);
    wait_converged(
        &world,
        work.path(),
        &[(namespace, cluster, members)],
        secs(180),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scylla_example_converges() {
    example_converges("scylla", "scylla", "scylla", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooks_own_example_converges_unchanged() {
    example_converges("rook", "rook-cassandra", "rook-cassandra", 3).await;
}

/// Members follow the operator's image (issue 30): the Deployment's image
/// changed as `kustomize edit set image` changes it, and nothing else (no
/// `--operator-image`, no `OPERATOR_IMAGE`): the controller reads its own
/// Pod (POD_NAME and POD_NAMESPACE from the downward API, `get` on Pods
/// of its namespace from the install's Role) and every member's `install`
/// init container runs that image. Before, the controller gave the
/// members the default image (which the test world runs too, so they
/// started): the assertion on their init containers fails on that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_follow_the_image_the_deployment_names() {
    const REPOSITORY: &str = "registry.example.com/me/cassandra-operator";
    const TAG: &str = "dev";
    let _one = FAKE_WORLDS.lock().await;
    let started = Instant::now();
    let (work, world) = installed_world_from(&["local"], Some((REPOSITORY, TAG))).await;
    let image = format!("{REPOSITORY}:{TAG}");
    // The install set no image of its own: the Deployment's container names
    // the new image, and neither the flag nor OPERATOR_IMAGE is set.
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), "cassandra-operator");
    let template = deployments
        .get("cassandra-operator")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let container = template
        .containers
        .iter()
        .find(|c| c.name == "operator")
        .unwrap();
    assert_eq!(container.image.as_deref(), Some(image.as_str()));
    assert!(
        container
            .args
            .iter()
            .flatten()
            .all(|a| !a.contains("operator-image")),
        "{:?}",
        container.args
    );
    assert!(
        container
            .env
            .iter()
            .flatten()
            .all(|e| e.name != "OPERATOR_IMAGE"),
        "{:?}",
        container.env
    );

    kubectl(
        &world.kubeconfig,
        &["apply", "-k", path(&example("laptop"))],
    );
    wait_converged(&world, work.path(), &[("laptop", "laptop", 3)], secs(240)).await;
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "laptop");
    let members = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(members.len(), 3, "{members:?}");
    for pod in members {
        let name = pod.metadata.name.clone().unwrap();
        let install = pod
            .spec
            .unwrap()
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == "install")
            .unwrap_or_else(|| panic!("{name} has no install init container"));
        assert_eq!(install.image.as_deref(), Some(image.as_str()), "{name}");
    }
    eprintln!(
        "install: members on the Deployment's image {image} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
