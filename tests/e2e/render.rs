//! `cassandra-operator config render` on the real default files of
//! Cassandra 4.1 and ScyllaDB (../shared/fixtures).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures"));
    assert!(
        dir.join("cassandra/4.1/cassandra.yaml").is_file(),
        "fixtures missing at {}: the shared fixtures must be checked out beside the repository",
        dir.display()
    );
    dir
}

fn render(defaults: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cassandra-operator"))
        .args(["config", "render", "--defaults"])
        .arg(defaults)
        .arg("--out")
        .arg(out)
        .args([
            "--cluster-name",
            "thesis",
            "--pod-ip",
            "10.8.1.7",
            "--broadcast-address",
            "10.96.0.12",
            "--seeds",
            "10.96.0.10,10.96.0.11",
            "--dc",
            "europe-west1",
            "--rack",
            "europe-west1-b",
            "--memory-limit",
            "8Gi",
            "--cpu-limit",
            "1500m",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn yaml(path: &Path) -> serde_norway::Value {
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn renders_cassandra_4_1_with_overrides_and_replace() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    let overrides = dir.path().join("overrides.yaml");
    std::fs::write(&overrides, "num_tokens: 8\nconcurrent_reads: 64\n").unwrap();
    let output = render(
        &fixtures().join("cassandra/4.1"),
        &out,
        &[
            "--overrides",
            overrides.to_str().unwrap(),
            "--replace-address",
            "10.96.0.12",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        files_in(&out),
        [
            "cassandra-rackdc.properties",
            "cassandra.yaml",
            "entrypoint.env"
        ]
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains(&format!("wrote {}", out.join("cassandra.yaml").display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("heap: MAX_HEAP_SIZE=2048M HEAP_NEWSIZE=200M"),
        "{stdout}"
    );

    let rendered = yaml(&out.join("cassandra.yaml"));
    let default = yaml(&fixtures().join("cassandra/4.1/cassandra.yaml"));
    assert_eq!(rendered["cluster_name"], "thesis");
    assert_eq!(rendered["listen_address"], "10.8.1.7");
    assert_eq!(rendered["broadcast_address"], "10.96.0.12");
    assert_eq!(rendered["rpc_address"], "0.0.0.0");
    assert_eq!(rendered["broadcast_rpc_address"], "10.96.0.12");
    assert_eq!(rendered["endpoint_snitch"], "GossipingPropertyFileSnitch");
    assert_eq!(
        rendered["seed_provider"][0]["parameters"][0]["seeds"],
        "10.96.0.10,10.96.0.11"
    );
    assert_eq!(rendered["num_tokens"], 8);
    assert_eq!(rendered["concurrent_reads"], 64);
    assert_eq!(rendered["commitlog_sync"], default["commitlog_sync"]);
    assert_eq!(rendered["partitioner"], default["partitioner"]);

    assert_eq!(
        std::fs::read_to_string(out.join("cassandra-rackdc.properties"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        [
            "dc=europe-west1",
            "rack=europe-west1-b",
            "prefer_local=false"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(out.join("entrypoint.env")).unwrap(),
        "MAX_HEAP_SIZE='2048M'\nHEAP_NEWSIZE='200M'\n\
         JVM_EXTRA_OPTS='-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof -javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false \
         -Dcassandra.replace_address_first_boot=10.96.0.12'\n"
    );
}

#[test]
fn renders_scylla_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    let output = render(&fixtures().join("scylla"), &out, &["--mode", "scylla"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        files_in(&out),
        [
            "cassandra-rackdc.properties",
            "entrypoint.args",
            "scylla.yaml"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(out.join("entrypoint.args")).unwrap(),
        "--log-to-syslog\n0\n--log-to-stdout\n1\n--default-log-level\ninfo\n--network-stack\nposix\n\
         --listen-address\n10.8.1.7\n--rpc-address\n0.0.0.0\n--broadcast-address\n10.96.0.12\n\
         --broadcast-rpc-address\n10.96.0.12\n--seed-provider-parameters\nseeds=10.96.0.10,10.96.0.11\n\
         --api-address\n127.0.0.1\n--developer-mode\n0\n--overprovisioned\n\
         --smp\n2\n--memory\n7373M\n"
    );
    let rendered = yaml(&out.join("scylla.yaml"));
    assert_eq!(rendered["cluster_name"], "thesis");
    assert_eq!(rendered["listen_address"], "10.8.1.7");
}

#[test]
fn a_bad_override_fails_naming_the_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    let overrides = dir.path().join("my-overrides.yaml");
    std::fs::write(&overrides, "num_tokens: 8\nlisten_address: 1.2.3.4\n").unwrap();
    let output = render(
        &fixtures().join("cassandra/4.1"),
        &out,
        &["--overrides", overrides.to_str().unwrap()],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: overrides file {:?} sets listen_address, which the operator refuses: the \
             operator sets it from the member's Pod and Service (its identity in the ring); \
             remove it",
            overrides.display().to_string()
        )
    );
    assert!(!out.exists(), "{} was created", out.display());

    std::fs::write(&overrides, "num_tokens: [8\n").unwrap();
    let output = render(
        &fixtures().join("cassandra/4.1"),
        &out,
        &["--overrides", overrides.to_str().unwrap()],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(&format!(
            "error: overrides file {:?} is not valid YAML: ",
            overrides.display().to_string()
        )),
        "{stderr}"
    );
    assert!(!out.exists());
}
