use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
}

#[test]
fn help_lists_every_role() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for role in [
        "controller",
        "sidecar",
        "install",
        "nodetool",
        "reloader",
        "crd",
        "config",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(role)),
            "{role} missing from --help:\n{help}"
        );
    }
    let out = bin().args(["config", "--help"]).output().unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("render"));
}

#[test]
fn crd_subcommand_prints_the_committed_crd() {
    let out = bin().arg("crd").output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crds/cassandra.rook.io_clusters.yaml"
    ))
    .unwrap();
    assert!(
        printed == committed,
        "crds/cassandra.rook.io_clusters.yaml differs from `cassandra-operator crd`: regenerate it"
    );
}

#[test]
fn install_copies_the_running_binary() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("shared");
    let out = bin()
        .args(["install", "--target"])
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = std::fs::read(target.join("cassandra-operator")).unwrap();
    let original = std::fs::read(env!("CARGO_BIN_EXE_cassandra-operator")).unwrap();
    assert!(
        installed == original,
        "installed binary differs from the running one"
    );
    // The installed copy runs.
    let out = Command::new(target.join("cassandra-operator"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn install_target_comes_from_the_environment_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .arg("install")
        .env("INSTALL_TARGET", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("cassandra-operator").is_file());
}

#[test]
fn kube_client_builds_with_the_one_crypto_provider() {
    // Building a TLS client panics when rustls cannot pick a crypto provider,
    // which happens as soon as a second one (aws-lc-rs, reqwest's default) is
    // linked in. No provider is installed here on purpose: the crate features
    // alone must decide.
    let kubeconfig = r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: "t"}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: default}
current-context: x
"#;
    let kubeconfig: kube::config::Kubeconfig =
        kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).expect("kube client with rustls and ring");
    });
}

#[test]
fn controller_refuses_a_reconcile_concurrency_outside_its_range() {
    for bad in ["0", "257", "many"] {
        let out = bin()
            .args(["controller", "--concurrent-reconciles", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--concurrent-reconciles {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--concurrent-reconciles"),
            "the error names the flag: {err}"
        );
    }
    let help = bin().args(["controller", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("CONCURRENT_RECONCILES") && help.contains("[default: 32]"),
        "{help}"
    );
}

#[test]
fn controller_needs_its_namespace_and_a_lifetime_it_can_read() {
    // Without --operator-namespace (POD_NAMESPACE): no start, the flag named.
    let out = bin()
        .arg("controller")
        .env_remove("POD_NAMESPACE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--operator-namespace"), "{err}");
    for bad in ["30", "1d", "30s", "10m5h"] {
        let out = bin()
            .args(["controller", "--operator-namespace", "ops"])
            .args(["--member-certificate-lifetime", bad])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "--member-certificate-lifetime {bad}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--member-certificate-lifetime"), "{err}");
    }
    let help = bin().args(["controller", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("POD_NAMESPACE")
            && help.contains("[default: 720h]")
            && help.contains("[default: cluster.local]"),
        "{help}"
    );
}
