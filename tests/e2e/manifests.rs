//! What a user applies, checked without a cluster: `manifests/operator.yaml`
//! is what `kubectl kustomize manifests/` renders, every manifest and every
//! rendered kustomization validates against Kubernetes 1.30's schemas
//! (`kubernetes-validate`, installed by scripts/test) and every Cluster
//! against our CRD (schema, CEL rules and `validate()`), and the GKE guide's
//! scripts pass `bash -n` and shellcheck.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use testworld::{cel, schema};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifests() -> PathBuf {
    repo().join("manifests")
}

/// Runs a command and returns its stdout; fails the test with its stderr.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test installs what the tests need)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn kustomize(dir: &Path) -> String {
    run(Command::new("kubectl").arg("kustomize").arg(dir))
}

/// Every directory under manifests/ with a kustomization.yaml.
fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("kustomization.yaml").is_file() {
            out.push(dir.to_path_buf());
        }
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                walk(&path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&manifests(), &mut out);
    out.sort();
    out
}

/// Every YAML file of Kubernetes objects under manifests/ (not the
/// kustomizations, their patches, or the links kept for `kubectl apply -f`).
fn object_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_symlink() {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
            if !yaml || name == "kustomization.yaml" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // a JSON patch (a list) is not an object
            if documents(&text).iter().all(|d| d.get("kind").is_some()) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&manifests(), &mut out);
    out.sort();
    out
}

fn documents(text: &str) -> Vec<Value> {
    let mut docs = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else {
            docs.last_mut().unwrap().push_str(line);
        }
    }
    docs.iter()
        .map(|d| serde_norway::from_str::<Value>(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn operator_yaml_is_what_kustomize_renders() {
    let crd = std::fs::read_to_string(repo().join("crds/cassandra.rook.io_clusters.yaml")).unwrap();
    let copy =
        std::fs::read_to_string(manifests().join("crd/cassandra.rook.io_clusters.yaml")).unwrap();
    assert!(
        crd == copy,
        "manifests/crd/ holds a stale copy of the CRD: run scripts/render-manifests"
    );
    let committed = std::fs::read_to_string(manifests().join("operator.yaml")).unwrap();
    let body: String = committed
        .split_inclusive('\n')
        .skip_while(|l| l.starts_with('#'))
        .collect();
    assert!(
        body == kustomize(&manifests()),
        "manifests/operator.yaml differs from `kubectl kustomize manifests/`: run scripts/render-manifests"
    );
    // every kubectl the machine image carries renders the same install
    // (each has its own kustomize)
    for version in ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"] {
        let kubectl = testworld::harness::kubectl_binary(version);
        assert!(
            body == run(Command::new(&kubectl).arg("kustomize").arg(manifests())),
            "kubectl {version} renders manifests/ differently"
        );
    }
    // what it installs
    let kinds: Vec<String> = documents(&body)
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for want in [
        "CustomResourceDefinition/clusters.cassandra.rook.io",
        "Namespace/cassandra-operator",
        "ServiceAccount/cassandra-operator",
        "ClusterRole/cassandra-operator",
        "ClusterRoleBinding/cassandra-operator",
        "Deployment/cassandra-operator",
    ] {
        assert!(kinds.iter().any(|k| k == want), "{want} missing: {kinds:?}");
    }
}

/// What the API server would say of a Cluster: schema errors after pruning
/// and defaulting, fields it would prune, CEL errors; then `validate()`.
fn cluster_errors(object: &Value) -> Vec<String> {
    let crd = crds::crd::definition();
    let openapi = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap(),
    )
    .unwrap();
    let mut admitted = object.clone();
    let (pruned, errors) = schema::admit(&openapi, &mut admitted);
    let mut out: Vec<String> = errors.iter().map(|e| e.message.clone()).collect();
    out.extend(pruned.iter().map(|p| format!("unknown field {p}")));
    if out.is_empty() {
        out.extend(cel::check(&openapi, &admitted, None).iter().cloned());
    }
    if out.is_empty() {
        match serde_json::from_value::<crds::Cluster>(admitted) {
            Ok(cluster) => {
                if let Err(e) = crds::validate(&cluster) {
                    out.push(e.to_string());
                }
            }
            Err(e) => out.push(e.to_string()),
        }
    }
    out
}

#[test]
fn every_manifest_validates_against_kubernetes_1_30() {
    // the files, and what each kustomization renders (overlays make objects
    // no file holds)
    let dir = tempfile::tempdir().unwrap();
    let mut files = object_files();
    for k in kustomizations() {
        let rel = k
            .strip_prefix(manifests())
            .unwrap()
            .to_string_lossy()
            .replace('/', "_");
        let out = dir.path().join(format!("kustomize-{rel}.yaml"));
        std::fs::write(&out, kustomize(&k)).unwrap();
        files.push(out);
    }
    assert!(files.len() >= 15, "{files:?}");

    // built-in kinds: Kubernetes 1.30's OpenAPI schemas, strictly (no
    // unknown field); kubernetes-validate skips custom resources with a
    // warning, so they are checked below
    let out = run(Command::new("kubernetes-validate")
        .args(["--kubernetes-version", "1.30.0", "--strict", "--no-warn"])
        .args(&files));
    let passed = out
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    assert!(passed >= 20, "{out}");

    // custom resources: Clusters against our CRD; others (the Prometheus
    // operator's) must at least name their kind and name
    let mut clusters = 0;
    for file in &files {
        for doc in documents(&std::fs::read_to_string(file).unwrap()) {
            let api = doc["apiVersion"].as_str().unwrap_or_default();
            assert!(
                doc["metadata"]["name"].is_string(),
                "{}: an object without a name",
                file.display()
            );
            if api == "cassandra.rook.io/v1alpha1" {
                assert_eq!(doc["kind"], "Cluster", "{}", file.display());
                let errors = cluster_errors(&doc);
                assert!(errors.is_empty(), "{}: {errors:#?}", file.display());
                clusters += 1;
            }
        }
    }
    assert!(clusters >= 11, "found {clusters} Clusters");
}

#[test]
fn the_gke_guides_scripts_pass_bash_n_and_shellcheck() {
    let dir = manifests().join("gke-local-ssd");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 5, "{scripts:?}");
    for script in &scripts {
        run(Command::new("bash").arg("-n").arg(script));
    }
    // -x follows `. env.sh`; the guide's scripts and the repository's own
    run(Command::new("shellcheck")
        .arg("-x")
        .current_dir(&dir)
        .args(scripts.iter().map(|s| s.file_name().unwrap()))
        .arg("../../scripts/test")
        .arg("../../scripts/soak")
        .arg("../../scripts/render-manifests"));
}

/// Every repository path the user-facing documents name exists (a renamed
/// example or script breaks a test, not a reader).
#[test]
fn the_paths_the_guides_name_exist() {
    let re = regex_lite(r"(manifests|scripts|crds)/[A-Za-z0-9_./-]+");
    for doc in ["README.md", "manifests/gke-local-ssd/README.md"] {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        let mut seen = 0;
        for found in re(&text) {
            let path = found.trim_end_matches(['.', ',', ')']);
            assert!(
                repo().join(path).exists(),
                "{doc} names {path}, which does not exist"
            );
            seen += 1;
        }
        assert!(seen >= 3, "{doc}: {seen} paths");
    }
}

/// The matches of a pattern of the form `(a|b|c)/[class]+`, without a regex
/// dependency: each alternative followed by '/' and a run of the class.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> Vec<String> {
    let (alts, _) = pattern[1..].split_once(')').unwrap();
    let prefixes: Vec<String> = alts.split('|').map(|a| format!("{a}/")).collect();
    move |text: &str| {
        let mut out = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < text.len() {
            if !text.is_char_boundary(i) {
                i += 1;
                continue;
            }
            let at_word_start = i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'/'
                    || bytes[i - 1] == b'-'
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b'.');
            if at_word_start
                && let Some(p) = prefixes.iter().find(|p| text[i..].starts_with(p.as_str()))
            {
                let end = text[i + p.len()..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
                    .map_or(text.len(), |e| i + p.len() + e);
                out.push(text[i..end].to_string());
                i = end;
            } else {
                i += 1;
            }
        }
        out
    }
}

/// The sample names the controller's registry exports, every family with
/// one series.
fn exported_metrics() -> Vec<String> {
    use controller::metrics::{ClusterLabels, ErrorLabels, MemberOperationLabels, Metrics};
    let m = Metrics::new();
    let labels = ClusterLabels {
        namespace: "db".into(),
        cluster: "c".into(),
    };
    m.reconciles.inc();
    m.errors
        .get_or_create(&ErrorLabels {
            kind: "PatchStatus".into(),
        })
        .inc();
    m.duration.observe(0.01);
    m.members.get_or_create(&labels).set(3);
    m.ready_members.get_or_create(&labels).set(2);
    m.members_on_old_template.get_or_create(&labels).set(1);
    m.set_operation(&labels, "Converged");
    m.set_member_operations(
        &labels,
        vec![(
            MemberOperationLabels {
                namespace: "db".into(),
                cluster: "c".into(),
                kind: "decommission".into(),
                rack: "r".into(),
                member: "2".into(),
            },
            1_700_000_000,
        )],
    );
    m.count_operation(&labels, "decommission", true);
    m.count_operation(&labels, "decommission", false);
    m.set_maintenance(
        &labels,
        controller::metrics::MaintenanceGauges {
            running: vec![("repair".into(), true)],
            repair: Some(controller::metrics::RepairGauges {
                repaired: 0.5,
                gc_grace_seconds: 864_000,
                last_full_repair: vec![("ks".into(), 1_700_000_000)],
            }),
        },
    );
    // and the members' sidecar (the old-format sstables gauge)
    let sidecar = sidecar::sstables::Gauge::default();
    sidecar.set(&std::collections::BTreeMap::from([(
        ("ks".to_string(), "t".to_string()),
        1,
    )]));
    (m.encode() + &sidecar.render())
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

#[test]
fn the_alert_rules_use_the_metrics_the_controller_exports() {
    let exported = exported_metrics();
    let text = std::fs::read_to_string(manifests().join("prometheus/alerts.yaml")).unwrap();
    let rule = &documents(&text)[0];
    assert_eq!(rule["kind"], "PrometheusRule");
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            let alert = r["alert"].as_str().expect("an alert name").to_string();
            let expr = r["expr"].as_str().expect("an expr");
            assert!(r["for"].is_string(), "{alert}: no `for`");
            assert!(r["labels"]["severity"].is_string(), "{alert}: no severity");
            assert!(
                r["annotations"]["summary"].is_string(),
                "{alert}: no summary"
            );
            // balanced brackets and quotes: a PromQL expression at least parses
            let mut stack = Vec::new();
            let mut quoted = false;
            for c in expr.chars() {
                match c {
                    '"' => quoted = !quoted,
                    '(' | '[' | '{' if !quoted => stack.push(c),
                    ')' | ']' | '}' if !quoted => {
                        let open = stack.pop();
                        assert_eq!(
                            open,
                            Some(match c {
                                ')' => '(',
                                ']' => '[',
                                _ => '{',
                            }),
                            "{alert}: unbalanced {expr}"
                        );
                    }
                    _ => {}
                }
            }
            assert!(stack.is_empty() && !quoted, "{alert}: unbalanced {expr}");
            // every cassandra_operator_ series exists
            for (i, _) in expr.match_indices("cassandra_operator_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    exported.contains(&name),
                    "{alert}: {name} is not exported by the controller: {exported:?}"
                );
            }
            alerts.push(alert);
        }
    }
    for want in [
        "CassandraMemberNotReady",
        "CassandraClusterRefused",
        "CassandraDecommissionRefused",
        "CassandraMemberOperationStuck",
        "CassandraClusterNotConverged",
    ] {
        assert!(
            alerts.iter().any(|a| a == want),
            "{want} missing: {alerts:?}"
        );
    }
    // the operations the refusal rule names are the controller's reasons
    let refused = std::fs::read_to_string(repo().join("controller/src/status.rs")).unwrap();
    for reason in [
        "ForeignObject",
        "DatacenterChanged",
        "RackRemovedWithMembers",
        "DecommissionedBelowTheTop",
        "UnreadableDecommission",
        "DecommissionRefused",
    ] {
        assert!(
            refused.contains(&format!("\"{reason}\"")),
            "{reason} is no longer a refusal reason of the controller"
        );
    }
}

#[test]
fn the_pod_monitor_scrapes_ports_that_serve_metrics() {
    let text = std::fs::read_to_string(manifests().join("prometheus/podmonitor.yaml")).unwrap();
    let monitors = documents(&text);
    let deployment =
        &documents(&std::fs::read_to_string(manifests().join("operator/deployment.yaml")).unwrap())
            [0];
    let operator = &deployment["spec"]["template"]["spec"]["containers"][0];
    let reloader = documents(
        &std::fs::read_to_string(
            manifests().join("examples/vrouter-reloader/vrouter-reloader.yaml"),
        )
        .unwrap(),
    )
    .into_iter()
    .find(|d| d["kind"] == "DaemonSet")
    .unwrap();
    let reloader = reloader["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "reloader")
        .unwrap()
        .clone();
    for (monitor, container, labels) in [
        (
            &monitors[0],
            operator,
            &deployment["spec"]["template"]["metadata"]["labels"],
        ),
        (&monitors[1], &reloader, &json_labels_of_daemonset()),
    ] {
        let port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
            .as_str()
            .unwrap();
        assert!(
            container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == port),
            "{}: no port {port} in {container}",
            monitor["metadata"]["name"]
        );
        for (k, v) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(
                &labels[k], v,
                "{}: selector {k}",
                monitor["metadata"]["name"]
            );
        }
    }
    // the members' sidecar: its container port `sidecar` (the probes'
    // port, where it serves /metrics too), on every member Pod
    let members = &monitors[2];
    assert_eq!(
        members["spec"]["podMetricsEndpoints"][0]["port"], "sidecar",
        "{members}"
    );
    let member_labels = crds::labels::rack_labels("c", "dc", "r");
    for (k, v) in members["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(member_labels.get(k).map(String::as_str), v.as_str(), "{k}");
    }
    // the controller's port is where it serves /metrics (METRICS_ADDR's default)
    assert_eq!(operator["ports"][0]["containerPort"], 8080);
    assert!(
        reloader["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.ends_with(":9102")))
    );
}

fn json_labels_of_daemonset() -> Value {
    let text = std::fs::read_to_string(
        manifests().join("examples/vrouter-reloader/vrouter-reloader.yaml"),
    )
    .unwrap();
    documents(&text)
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap()["spec"]["template"]["metadata"]["labels"]
        .clone()
}

/// The README's first commands are the demo and the test command, and CI
/// runs that same test command.
#[test]
fn the_readme_starts_with_the_demo_and_the_test_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a first sh block");
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .collect();
    assert_eq!(
        commands,
        ["cargo run -p testworld --bin demo", "scripts/test"],
        "{block}"
    );
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "scripts/test"),
        ".ci/run does not run scripts/test"
    );
}
