//! The renderer on the real default files of Cassandra 3.11, 4.1, 5.0 and
//! ScyllaDB (../shared/fixtures).

use serde_norway::{Mapping, Value};

use super::fixtures::{self, CASSANDRA_VERSIONS};
use super::*;

/// The keys the renderer may change (DESIGN.md section 6).
const CHANGED: [&str; 7] = [
    "cluster_name",
    "listen_address",
    "broadcast_address",
    "rpc_address",
    "broadcast_rpc_address",
    "endpoint_snitch",
    "seed_provider",
];

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn member(mode: ClusterMode) -> MemberConfig {
    MemberConfig {
        mode,
        cluster_name: "thesis".to_string(),
        pod_ip: "10.8.1.7".parse().unwrap(),
        broadcast_address: "10.96.0.12".parse().unwrap(),
        seeds: vec!["10.96.0.10".to_string(), "10.96.0.11".to_string()],
        datacenter: "europe-west1".to_string(),
        rack: "europe-west1-b".to_string(),
        memory_limit: Some(q("8Gi")),
        cpu_limit: Some(q("2")),
        node_cpu_cores: 32,
        replace_address: None,
        overrides: None,
        jolokia_agent_jar: DEFAULT_JOLOKIA_AGENT_JAR.to_string(),
        release: None,
        tls: None,
        authentication: false,
    }
}

/// (label, mode, default main file text) of every fixture.
fn every_fixture() -> Vec<(String, ClusterMode, String)> {
    let mut all: Vec<_> = CASSANDRA_VERSIONS
        .iter()
        .map(|v| {
            (
                format!("cassandra {v}"),
                ClusterMode::Cassandra,
                fixtures::read(&format!("cassandra/{v}/cassandra.yaml")),
            )
        })
        .collect();
    all.push((
        "scylla".to_string(),
        ClusterMode::Scylla,
        fixtures::read("scylla/scylla.yaml"),
    ));
    all
}

fn mapping(text: &str) -> Mapping {
    match serde_norway::from_str::<Value>(text).unwrap() {
        Value::Mapping(m) => m,
        other => panic!("not a mapping: {other:?}"),
    }
}

fn main_file(rendered: &Rendered, mode: ClusterMode) -> Mapping {
    mapping(
        rendered
            .file(main_file_name(mode))
            .expect("main file rendered"),
    )
}

fn configmap(text: &str) -> Option<Overrides> {
    Some(Overrides {
        origin: OverridesOrigin::ConfigMap("my-overrides".to_string()),
        text: text.to_string(),
    })
}

fn seeds_of(doc: &Mapping) -> &Value {
    &doc["seed_provider"][0]["parameters"][0]["seeds"]
}

#[test]
fn every_untouched_key_keeps_its_value_type_and_place() {
    for (label, mode, defaults) in every_fixture() {
        let default = mapping(&defaults);
        assert!(default.len() > 30, "{label}: only {} keys", default.len());
        let rendered = render(&member(mode), &defaults).unwrap();
        let out = main_file(&rendered, mode);
        for (key, value) in &default {
            let name = key.as_str().unwrap();
            if CHANGED.contains(&name) {
                continue;
            }
            assert_eq!(out.get(key), Some(value), "{label}: {name} changed");
        }
        // Same keys in the same order; the changed keys the default file
        // lacks (commented out) come last.
        let out_keys: Vec<&str> = out.keys().map(|k| k.as_str().unwrap()).collect();
        let default_keys: Vec<&str> = default.keys().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(out_keys[..default_keys.len()], default_keys[..], "{label}");
        for added in &out_keys[default_keys.len()..] {
            assert!(CHANGED.contains(added), "{label}: {added} added");
        }
    }
}

#[test]
fn fixtures_hold_the_types_the_preservation_test_relies_on() {
    // The preservation test is only as strong as the variety of the
    // default files: make sure they have ints, bools, nulls, lists, maps
    // and strings that look like numbers.
    for (label, _, defaults) in every_fixture() {
        let default = mapping(&defaults);
        let has = |pred: fn(&Value) -> bool| default.values().any(pred);
        assert!(has(|v| v.is_u64()), "{label}: no int");
        assert!(has(|v| v.is_bool()), "{label}: no bool");
        assert!(has(|v| v.is_sequence()), "{label}: no list");
        if !label.starts_with("scylla") {
            assert!(has(|v| v.is_mapping()), "{label}: no mapping");
        }
    }
    let scylla = mapping(&fixtures::read("scylla/scylla.yaml"));
    assert_eq!(scylla["commitlog_total_space_in_mb"], Value::from(-1));
    assert_eq!(scylla["audit"], Value::from("table"));
    let v311 = mapping(&fixtures::read("cassandra/3.11/cassandra.yaml"));
    assert!(v311["commitlog_sync_period_in_ms"].is_u64());
    let v41 = mapping(&fixtures::read("cassandra/4.1/cassandra.yaml"));
    assert!(
        v41["key_cache_size"].is_null(),
        "4.1 key_cache_size: {:?}",
        v41["key_cache_size"]
    );
}

#[test]
fn changed_keys_have_the_members_values() {
    for (label, mode, defaults) in every_fixture() {
        let rendered = render(&member(mode), &defaults).unwrap();
        let out = main_file(&rendered, mode);
        let expect = [
            ("cluster_name", "thesis"),
            ("listen_address", "10.8.1.7"),
            ("broadcast_address", "10.96.0.12"),
            ("rpc_address", "0.0.0.0"),
            ("broadcast_rpc_address", "10.96.0.12"),
            ("endpoint_snitch", "GossipingPropertyFileSnitch"),
        ];
        for (key, value) in expect {
            assert_eq!(out[key], Value::from(value), "{label}: {key}");
        }
        assert_eq!(
            seeds_of(&out),
            &Value::from("10.96.0.10,10.96.0.11"),
            "{label}"
        );
        assert_eq!(
            out["seed_provider"][0]["class_name"],
            Value::from("org.apache.cassandra.locator.SimpleSeedProvider"),
            "{label}"
        );
        assert_eq!(
            out["seed_provider"].as_sequence().unwrap().len(),
            1,
            "{label}"
        );
        assert!(!out.contains_key("listen_interface"), "{label}");
        assert!(!out.contains_key("rpc_interface"), "{label}");
    }
}

#[test]
fn identity_values_stay_strings_whatever_they_look_like() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.cluster_name = "1234".to_string();
    let out = main_file(&render(&config, &defaults).unwrap(), ClusterMode::Cassandra);
    assert_eq!(out["cluster_name"], Value::from("1234"));
}

#[test]
fn seed_provider_keeps_its_class_and_other_parameters() {
    let defaults = "seed_provider:\n  - class_name: com.example.K8sSeeds\n    parameters:\n      - seeds: \"127.0.0.1\"\n        service: cass\nnum_tokens: 16\n";
    let out = main_file(
        &render(&member(ClusterMode::Cassandra), defaults).unwrap(),
        ClusterMode::Cassandra,
    );
    let provider = &out["seed_provider"][0];
    assert_eq!(provider["class_name"], Value::from("com.example.K8sSeeds"));
    assert_eq!(provider["parameters"][0]["service"], Value::from("cass"));
    assert_eq!(seeds_of(&out), &Value::from("10.96.0.10,10.96.0.11"));
}

#[test]
fn missing_seed_provider_is_created() {
    let out = main_file(
        &render(&member(ClusterMode::Cassandra), "num_tokens: 16\n").unwrap(),
        ClusterMode::Cassandra,
    );
    assert_eq!(
        out["seed_provider"][0]["class_name"],
        Value::from("org.apache.cassandra.locator.SimpleSeedProvider")
    );
    assert_eq!(seeds_of(&out), &Value::from("10.96.0.10,10.96.0.11"));
    assert_eq!(out["num_tokens"], Value::from(16));
}

/// A running member's new seeds (`yaml::with_seeds`) leave the rendered
/// file as a render with those seeds would have written it, byte for byte,
/// on every default file, overrides included: only the seeds change.
#[test]
fn seeds_rewritten_in_place_change_nothing_else() {
    for (label, mode, defaults) in every_fixture() {
        let mut config = member(mode);
        config.overrides = configmap("concurrent_reads: 64\nnum_tokens: 8\n");
        let before = render(&config, &defaults).unwrap();
        let before = before.file(main_file_name(mode)).unwrap();
        config.seeds = vec![
            "10.96.0.10".into(),
            "10.96.0.11".into(),
            "10.96.0.14".into(),
        ];
        let wanted = render(&config, &defaults).unwrap();
        let wanted = wanted.file(main_file_name(mode)).unwrap();
        assert_ne!(before, wanted, "{label}");
        let rewritten =
            yaml::with_seeds(main_file_name(mode), before, &config.seeds.join(",")).unwrap();
        assert_eq!(rewritten, wanted, "{label}");
    }
}

#[test]
fn malformed_seed_provider_is_an_error() {
    let e = render(
        &member(ClusterMode::Cassandra),
        "seed_provider: org.apache.cassandra.locator.SimpleSeedProvider\n",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "default cassandra.yaml has a seed_provider the operator cannot set seeds in: it is not a list"
    );
}

#[test]
fn interfaces_in_the_default_file_give_way_to_the_addresses() {
    let defaults = "listen_address: localhost\nlisten_interface: eth0\nrpc_interface: eth1\nrpc_interface_prefer_ipv6: false\nnum_tokens: 16\n";
    let out = main_file(
        &render(&member(ClusterMode::Cassandra), defaults).unwrap(),
        ClusterMode::Cassandra,
    );
    assert!(!out.contains_key("listen_interface"));
    assert!(!out.contains_key("rpc_interface"));
    assert_eq!(out["rpc_interface_prefer_ipv6"], Value::Bool(false));
    assert_eq!(out["listen_address"], Value::from("10.8.1.7"));
}

#[test]
fn overrides_win_and_merge_deeply() {
    for (label, mode, defaults) in every_fixture() {
        let default = mapping(&defaults);
        // A nested mapping of the default file, to merge into (scylla.yaml
        // has none: the fragment then adds one).
        let (nested_key, nested) = default
            .iter()
            .find(|(_, v)| v.as_mapping().is_some_and(|m| m.len() >= 2))
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_string(),
                    v.as_mapping().unwrap().clone(),
                )
            })
            .unwrap_or_else(|| {
                assert_eq!(mode, ClusterMode::Scylla, "{label}: no nested mapping");
                let mut m = Mapping::new();
                m.insert(Value::from("enabled"), Value::Bool(false));
                m.insert(Value::from("kept"), Value::from(1));
                ("new_section".to_string(), m)
            });
        let (inner_key, _) = nested.iter().next().unwrap();
        let inner_key = inner_key.as_str().unwrap().to_string();
        let fragment = if default.contains_key(nested_key.as_str()) {
            format!(
                "num_tokens: 7\n{nested_key}:\n  {inner_key}: overridden\nbrand_new_setting: [a, b]\n"
            )
        } else {
            format!(
                "num_tokens: 7\n{nested_key}:\n  {inner_key}: overridden\n  kept: 1\nbrand_new_setting: [a, b]\n"
            )
        };
        let mut config = member(mode);
        config.overrides = configmap(&fragment);
        let out = main_file(&render(&config, &defaults).unwrap(), mode);
        assert_eq!(out["num_tokens"], Value::from(7), "{label}");
        assert_eq!(
            out["brand_new_setting"],
            Value::Sequence(vec![Value::from("a"), Value::from("b")]),
            "{label}"
        );
        let merged = out[nested_key.as_str()].as_mapping().unwrap();
        assert_eq!(
            merged[inner_key.as_str()],
            Value::from("overridden"),
            "{label}"
        );
        for (k, v) in nested.iter().skip(1) {
            assert_eq!(
                merged.get(k),
                Some(v),
                "{label}: {nested_key}.{k:?} lost in the merge"
            );
        }
        // The identity is untouched by the overrides.
        assert_eq!(out["listen_address"], Value::from("10.8.1.7"), "{label}");
    }
}

#[test]
fn overrides_replace_lists_and_may_set_null() {
    let defaults = "a:\n  b: [1, 2]\n  c: 3\nd: 4\n";
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap("a:\n  b: [9]\nd: null\n");
    let out = main_file(&render(&config, defaults).unwrap(), ClusterMode::Cassandra);
    assert_eq!(out["a"]["b"], Value::Sequence(vec![Value::from(9)]));
    assert_eq!(out["a"]["c"], Value::from(3));
    assert!(out["d"].is_null());
    assert!(out.contains_key("d"));
}

#[test]
fn empty_overrides_change_nothing() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let plain = render(&member(ClusterMode::Cassandra), &defaults).unwrap();
    for text in ["", "# only a comment\n", "---\n"] {
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(text);
        assert_eq!(render(&config, &defaults).unwrap(), plain, "{text:?}");
    }
}

#[test]
fn bad_overrides_are_errors_naming_the_configmap() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let cases = [
        (
            "- a\n- b\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml is not a YAML mapping (it is a list)",
        ),
        (
            "just words\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml is not a YAML mapping (it is a string)",
        ),
        (
            "listen_address: 1.2.3.4\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets listen_address, which the operator refuses: the operator sets it from the member's Pod and Service (its identity in the ring); remove it",
        ),
        (
            "num_tokens: 4\nseed_provider: []\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets seed_provider, which the operator refuses: the operator sets the seeds from the seed members' Services; other seeds can split the cluster or let a joining member skip its bootstrap; remove it",
        ),
        (
            "listen_interface: eth0\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets listen_interface, which the operator refuses: the operator sets it from the member's Pod and Service (its identity in the ring); remove it",
        ),
        (
            "auto_bootstrap: false\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets auto_bootstrap, which the operator refuses: a member that does not bootstrap owns token ranges whose data it never streamed (silent data loss); remove it",
        ),
        (
            "concurrent_reads: 64\nnative_transport_port: 9043\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets native_transport_port, which the operator refuses: the member Services expose the default port only, so another port makes the member unreachable; remove it",
        ),
        (
            "data_file_directories: [/tmp/data]\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets data_file_directories, which the operator refuses: it must stay on the member's persistent volume, or the data is lost with the container; remove it",
        ),
        (
            "1: one\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml has a key that is not a string: 1",
        ),
    ];
    for (text, message) in cases {
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(text);
        let e = render(&config, &defaults).unwrap_err();
        assert_eq!(e.to_string(), message, "{text:?}");
    }
    for text in [
        "num_tokens: [1\n",
        "a: 1\n---\nb: 2\n",
        "key: value\n  bad indent: 1\n",
    ] {
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(text);
        let e = render(&config, &defaults).unwrap_err();
        assert!(
            matches!(e, RenderError::ParseOverrides { .. }),
            "{text:?}: {e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("ConfigMap \"my-overrides\": key cassandra.yaml is not valid YAML: "),
            "{e}"
        );
    }
}

#[test]
fn scylla_overrides_are_named_by_their_scylla_key() {
    let defaults = fixtures::read("scylla/scylla.yaml");
    let mut config = member(ClusterMode::Scylla);
    config.overrides = configmap("[1]");
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "ConfigMap \"my-overrides\": key scylla.yaml is not a YAML mapping (it is a list)"
    );
}

#[test]
fn bad_default_files_are_errors() {
    let config = member(ClusterMode::Cassandra);
    let e = render(&config, "a: [1\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("default cassandra.yaml is not valid YAML: "),
        "{e}"
    );
    let e = render(&config, "- 1\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "default cassandra.yaml is not a YAML mapping (it is a list)"
    );
}

#[test]
fn rackdc_of_every_mode() {
    for (label, mode, defaults) in every_fixture() {
        let rendered = render(&member(mode), &defaults).unwrap();
        let rackdc = rendered.file(RACKDC_FILE).unwrap();
        let settings: Vec<&str> = rackdc.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            settings,
            [
                "dc=europe-west1",
                "rack=europe-west1-b",
                "prefer_local=false"
            ],
            "{label}"
        );
        let names: Vec<&str> = rendered.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, [main_file_name(mode), RACKDC_FILE], "{label}");
    }
}

#[test]
fn cassandra_environment_sizes_the_heap_and_binds_jolokia_to_loopback() {
    for version in CASSANDRA_VERSIONS {
        let defaults = fixtures::read(&format!("cassandra/{version}/cassandra.yaml"));
        let rendered = render(&member(ClusterMode::Cassandra), &defaults).unwrap();
        assert_eq!(
            rendered.env,
            [
                ("MAX_HEAP_SIZE".to_string(), "2048M".to_string()),
                ("HEAP_NEWSIZE".to_string(), "200M".to_string()),
                (
                    "JVM_EXTRA_OPTS".to_string(),
                    "-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof -javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false"
                        .to_string()
                ),
            ],
            "{version}"
        );
        assert_eq!(
            rendered.heap,
            Some(HeapSizes {
                max_heap_mb: 2048,
                new_size_mb: 200
            })
        );
        assert!(rendered.args.is_empty());
    }
}

#[test]
fn cpu_limits_round_up_and_the_node_counts_without_one() {
    let defaults = fixtures::read("cassandra/5.0/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.memory_limit = Some(q("16Gi"));
    config.cpu_limit = Some(q("1500m"));
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(rendered.env_var("MAX_HEAP_SIZE"), Some("4096M"));
    assert_eq!(rendered.env_var("HEAP_NEWSIZE"), Some("200M"));
    config.cpu_limit = None;
    config.node_cpu_cores = 6;
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(rendered.env_var("HEAP_NEWSIZE"), Some("600M"));
}

#[test]
fn without_a_memory_limit_cassandra_env_sizes_the_heap() {
    let defaults = fixtures::read("cassandra/3.11/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.memory_limit = None;
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(rendered.heap, None);
    assert_eq!(rendered.env_var("MAX_HEAP_SIZE"), None);
    assert_eq!(rendered.env_var("HEAP_NEWSIZE"), None);
    assert!(rendered.env_var("JVM_EXTRA_OPTS").is_some());
}

#[test]
fn replacing_cassandra_adds_the_first_boot_property() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.replace_address = Some("10.96.0.12".to_string());
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(
        rendered.env_var("JVM_EXTRA_OPTS"),
        Some(
            "-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof -javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false \
             -Dcassandra.replace_address_first_boot=10.96.0.12"
        )
    );
    // Replacing changes nothing in cassandra.yaml.
    assert_eq!(
        rendered.file("cassandra.yaml"),
        render(&member(ClusterMode::Cassandra), &defaults)
            .unwrap()
            .file("cassandra.yaml")
    );
    config.replace_address = Some("6f0c2e4e-1d0a-4a8e-9a52-3f1f1f2b7c11".to_string());
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "invalid replace address \"6f0c2e4e-1d0a-4a8e-9a52-3f1f1f2b7c11\": expected an IP address"
    );
}

#[test]
fn tiny_memory_limits_are_refused() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.memory_limit = Some(q("4Mi"));
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "memory limit of 4 MiB is too small: at least 8 MiB"
    );
    config.memory_limit = Some(q("8Mi"));
    assert_eq!(
        render(&config, &defaults).unwrap().env_var("MAX_HEAP_SIZE"),
        Some("4M")
    );
}

#[test]
fn scylla_entrypoint_arguments() {
    let defaults = fixtures::read("scylla/scylla.yaml");
    let rendered = render(&member(ClusterMode::Scylla), &defaults).unwrap();
    // 8Gi = 8192 MiB; reserve max(512, 819) = 819.
    assert_eq!(
        rendered.args,
        [
            "--log-to-syslog",
            "0",
            "--log-to-stdout",
            "1",
            "--default-log-level",
            "info",
            "--network-stack",
            "posix",
            "--listen-address",
            "10.8.1.7",
            "--rpc-address",
            "0.0.0.0",
            "--broadcast-address",
            "10.96.0.12",
            "--broadcast-rpc-address",
            "10.96.0.12",
            "--seed-provider-parameters",
            "seeds=10.96.0.10,10.96.0.11",
            "--api-address",
            "127.0.0.1",
            "--developer-mode",
            "0",
            "--overprovisioned",
            "--smp",
            "2",
            "--memory",
            "7373M",
        ]
    );
    assert!(rendered.env.is_empty());
    assert_eq!(rendered.heap, None);
}

#[test]
fn scylla_sizing_rule() {
    assert_eq!(scylla::scylla_memory_mb(1536).unwrap(), 1024);
    assert_eq!(scylla::scylla_memory_mb(4096).unwrap(), 3584);
    assert_eq!(scylla::scylla_memory_mb(5120).unwrap(), 4608);
    assert_eq!(scylla::scylla_memory_mb(5130).unwrap(), 4617);
    assert_eq!(scylla::scylla_memory_mb(65536).unwrap(), 58983);
    assert_eq!(
        scylla::scylla_memory_mb(1535).unwrap_err().to_string(),
        "memory limit of 1535 MiB is too small: at least 1536 MiB"
    );
    let defaults = fixtures::read("scylla/scylla.yaml");
    let mut config = member(ClusterMode::Scylla);
    config.cpu_limit = Some(q("2500m"));
    config.memory_limit = None;
    let args = render(&config, &defaults).unwrap().args;
    assert_eq!(args[args.len() - 2..], ["--smp", "3"]);
    config.cpu_limit = None;
    let args = render(&config, &defaults).unwrap().args;
    assert!(
        !args.iter().any(|a| a == "--smp" || a == "--memory"),
        "{args:?}"
    );
    // 8 shards in 7373 MiB: 921 MiB each, below ScyllaDB's 1 GiB.
    config.cpu_limit = Some(q("8"));
    config.memory_limit = Some(q("8Gi"));
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "--memory 7373M over --smp 8 leaves less than 1024 MiB per shard, which ScyllaDB refuses outside developer mode: raise the memory limit or lower the CPU limit"
    );
    config.cpu_limit = Some(q("7"));
    assert!(render(&config, &defaults).is_ok(), "1053 MiB per shard");
}

#[test]
fn replacing_scylla_by_address_or_host_id() {
    let defaults = fixtures::read("scylla/scylla.yaml");
    let mut config = member(ClusterMode::Scylla);
    config.replace_address = Some("10.96.0.12".to_string());
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(
        rendered.args[rendered.args.len() - 2..],
        ["--replace-address-first-boot", "10.96.0.12"]
    );
    config.replace_address = Some("6f0c2e4e-1d0a-4a8e-9a52-3f1f1f2b7c11".to_string());
    let rendered = render(&config, &defaults).unwrap();
    assert_eq!(
        rendered.args[rendered.args.len() - 2..],
        [
            "--replace-node-first-boot",
            "6f0c2e4e-1d0a-4a8e-9a52-3f1f1f2b7c11"
        ]
    );
    config.replace_address = Some("node-3".to_string());
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "invalid replace address \"node-3\": expected an IP address or a host ID"
    );
}

#[test]
fn settings_are_validated() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.seeds.clear();
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "no seeds given: a member needs at least one seed address"
    );
    config.seeds = vec!["10.0.0.1 10.0.0.2".to_string()];
    assert!(matches!(
        render(&config, &defaults),
        Err(RenderError::InvalidSeed(_))
    ));
    let mut config = member(ClusterMode::Cassandra);
    config.rack = " ".to_string();
    assert_eq!(
        render(&config, &defaults).unwrap_err().to_string(),
        "rack is empty"
    );
}

/// SnakeYAML (Cassandra) reads YAML 1.1, where plain `yes`, `on`, `off`
/// are booleans: no string of the rendered files may be written plain in
/// such a form.
#[test]
fn rendered_strings_read_back_as_strings_in_yaml_1_1() {
    for (label, mode, defaults) in every_fixture() {
        let rendered = render(&member(mode), &defaults).unwrap();
        let text = rendered.file(main_file_name(mode)).unwrap();
        for line in text.lines() {
            let Some((_, value)) = line.split_once(": ") else {
                continue;
            };
            let lower = value.trim().to_ascii_lowercase();
            assert!(
                !["y", "n", "yes", "no", "on", "off"].contains(&lower.as_str()),
                "{label}: {line:?} would be a boolean in YAML 1.1"
            );
        }
    }
}

fn render_args(out: &Path, overrides: Option<PathBuf>) -> RenderArgs {
    RenderArgs {
        mode: "cassandra".to_string(),
        defaults: fixtures::dir().join("cassandra/4.1"),
        out: out.to_path_buf(),
        cluster_name: "thesis".to_string(),
        pod_ip: "10.8.1.7".to_string(),
        broadcast_address: "10.96.0.12".to_string(),
        seeds: vec!["10.96.0.10".to_string()],
        dc: "dc1".to_string(),
        rack: "rack1".to_string(),
        memory_limit: Some("4Gi".to_string()),
        cpu_limit: Some("1".to_string()),
        overrides,
        replace_address: Some("10.96.0.12".to_string()),
        cassandra_version: Some("4.1.8".to_string()),
    }
}

#[test]
fn render_to_dir_writes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    let overrides = dir.path().join("overrides.yaml");
    std::fs::write(&overrides, "num_tokens: 8\n").unwrap();
    let report = render_to_dir(&render_args(&out, Some(overrides))).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cassandra-rackdc.properties",
            "cassandra.yaml",
            "entrypoint.env"
        ]
    );
    assert_eq!(report.written.len(), 3);
    let yaml = mapping(&std::fs::read_to_string(out.join("cassandra.yaml")).unwrap());
    assert_eq!(yaml["num_tokens"], Value::from(8));
    assert_eq!(yaml["listen_address"], Value::from("10.8.1.7"));
    assert_eq!(
        std::fs::read_to_string(out.join("entrypoint.env")).unwrap(),
        "MAX_HEAP_SIZE='1024M'\nHEAP_NEWSIZE='100M'\nJVM_EXTRA_OPTS='-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof -javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false -Dcassandra.replace_address_first_boot=10.96.0.12'\n"
    );
    assert_eq!(
        report.summary().lines().last(),
        Some("heap: MAX_HEAP_SIZE=1024M HEAP_NEWSIZE=100M")
    );
}

#[test]
fn render_to_dir_writes_nothing_on_a_bad_override() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("cassandra.yaml"), "old\n").unwrap();
    let overrides = dir.path().join("overrides.yaml");
    std::fs::write(&overrides, "- not\n- a mapping\n").unwrap();
    let e = render_to_dir(&render_args(&out, Some(overrides.clone()))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "overrides file {:?} is not a YAML mapping (it is a list)",
            overrides.display().to_string()
        )
    );
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert_eq!(names.len(), 1);
    assert_eq!(
        std::fs::read_to_string(out.join("cassandra.yaml")).unwrap(),
        "old\n"
    );
}

#[test]
fn render_to_dir_rejects_bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conf");
    let mut args = render_args(&out, None);
    args.memory_limit = Some("8GB".to_string());
    assert_eq!(
        render_to_dir(&args).unwrap_err().to_string(),
        "invalid memory limit: invalid quantity \"8GB\": unknown suffix"
    );
    let mut args = render_args(&out, None);
    args.pod_ip = "pod-1".to_string();
    assert_eq!(
        render_to_dir(&args).unwrap_err().to_string(),
        "invalid pod IP \"pod-1\": not an IP address"
    );
    let mut args = render_args(&out, None);
    args.mode = "mongo".to_string();
    assert_eq!(
        render_to_dir(&args).unwrap_err().to_string(),
        "unknown mode \"mongo\": expected cassandra or scylla"
    );
    let mut args = render_args(&out, None);
    args.defaults = dir.path().join("nowhere");
    assert!(
        render_to_dir(&args)
            .unwrap_err()
            .to_string()
            .starts_with(&format!(
                "reading {}",
                dir.path().join("nowhere/cassandra.yaml").display()
            ))
    );
    assert!(!out.exists());
}

#[test]
fn override_strings_reach_cassandra_as_strings() {
    let defaults = fixtures::read("cassandra/3.11/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap("mode_a: 'on'\nmode_b: 'yes'\nat: '12:30'\ncount: '1_000'\n");
    let rendered = render(&config, &defaults).unwrap();
    let text = rendered.file("cassandra.yaml").unwrap();
    for line in [
        "mode_a: 'on'",
        "mode_b: 'yes'",
        "at: '12:30'",
        "count: '1_000'",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing");
    }
}

/// The environment we render, given to the real `cassandra-env.sh` of every
/// version (with a stand-in `java`, a shell function that only answers
/// `-version`): the JVM
/// gets our heap and our flags, after the script's own.
#[test]
fn cassandra_env_sh_turns_the_environment_into_jvm_flags() {
    let dir = tempfile::tempdir().unwrap();
    for version in CASSANDRA_VERSIONS {
        let conf = fixtures::dir().join(format!("cassandra/{version}"));
        let mut config = member(ClusterMode::Cassandra);
        // 6000 MiB, 3 cores: 1500M heap, 300M young generation; sizes no
        // machine's own memory would give.
        config.memory_limit = Some(q("6000Mi"));
        config.cpu_limit = Some(q("2500m"));
        config.replace_address = Some("10.96.0.12".to_string());
        let rendered = render(
            &config,
            &fixtures::read(&format!("cassandra/{version}/cassandra.yaml")),
        )
        .unwrap();
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(
                r#"fake_java() {
                       echo 'openjdk version "11.0.20" 2023-07-18' >&2
                       echo 'OpenJDK Runtime Environment (build 11.0.20)' >&2
                       echo 'OpenJDK 64-Bit Server VM (build 11.0.20, mixed mode)' >&2
                   }
                   . "$CASSANDRA_CONF/cassandra-env.sh" >&2
                   printf '%s\n' $JVM_OPTS"#,
            )
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("JAVA", "fake_java")
            .env("CASSANDRA_CONF", &conf)
            .env("CASSANDRA_HOME", dir.path().join("home"))
            .env("CASSANDRA_LOG_DIR", dir.path().join("logs"))
            .envs(rendered.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("bash runs");
        assert!(
            output.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        let flags: Vec<&str> = stdout.lines().collect();
        let heap: Vec<&str> = flags
            .iter()
            .copied()
            .filter(|f| f.starts_with("-Xms") || f.starts_with("-Xmx") || f.starts_with("-Xmn"))
            .collect();
        // 3.11's jvm.options selects CMS, under which the script adds -Xmn;
        // from 4.0 the GC is chosen in jvm11-server.options (not read by
        // cassandra-env.sh).
        let expected: &[&str] = if version == "3.11" {
            &["-Xms1500M", "-Xmx1500M", "-Xmn300M"]
        } else {
            &["-Xms1500M", "-Xmx1500M"]
        };
        assert_eq!(heap, expected, "{version}");
        // The heap dump goes to the data volume: the only -XX:HeapDumpPath
        // the script passes is ours.
        assert_eq!(
            flags
                .iter()
                .copied()
                .filter(|f| f.starts_with("-XX:HeapDumpPath="))
                .collect::<Vec<_>>(),
            ["-XX:HeapDumpPath=/var/lib/cassandra/heapdump.hprof"],
            "{version}"
        );
        assert_eq!(
            flags[flags.len() - 2..],
            [
                "-javaagent:/mnt/shared/plugins/jolokia-jvm-agent.jar=port=8778,host=127.0.0.1,policyLocation=file:///mnt/shared/plugins/jolokia-access.xml,executor=fixed,threadNr=5,discoveryEnabled=false",
                "-Dcassandra.replace_address_first_boot=10.96.0.12",
            ],
            "{version}"
        );
    }
}

/// A sidecar that restarts may find its own rendered file where the
/// default was: rendering it again changes nothing.
#[test]
fn rendering_a_rendered_file_changes_nothing() {
    for (label, mode, defaults) in every_fixture() {
        let mut config = member(mode);
        config.overrides = configmap("num_tokens: 8\n");
        let once = render(&config, &defaults).unwrap();
        let twice = render(&config, once.file(main_file_name(mode)).unwrap()).unwrap();
        assert_eq!(once, twice, "{label}");
    }
}

#[test]
fn a_member_replaces_only_with_the_label_and_an_empty_data_directory() {
    assert_eq!(
        replace_address_for(Some("10.96.0.12"), true),
        Some("10.96.0.12".to_string())
    );
    assert_eq!(replace_address_for(Some("10.96.0.12"), false), None);
    assert_eq!(replace_address_for(None, true), None);
    assert_eq!(replace_address_for(Some(" "), true), None);
    // Not an address: no intent at all.
    assert_eq!(replace_address_for(Some("true"), true), None);
}

/// A rack's fragment written for Cassandra 3.11: a `_in_ms`, a `_in_kb`, a
/// `_in_mb`, a rate and a flag, each with a value other than the defaults.
const FRAGMENT_FOR_3_11: &str = "read_request_timeout_in_ms: 10000
column_index_cache_size_in_kb: 4
key_cache_size_in_mb: 64
compaction_throughput_mb_per_sec: 32
enable_materialized_views: true
";

/// (old name, new name, the fragment's value) of [`FRAGMENT_FOR_3_11`].
fn fragment_for_3_11_settings() -> [(&'static str, &'static str, Value); 5] {
    [
        (
            "read_request_timeout_in_ms",
            "read_request_timeout",
            Value::from(10000),
        ),
        (
            "column_index_cache_size_in_kb",
            "column_index_cache_size",
            Value::from(4),
        ),
        ("key_cache_size_in_mb", "key_cache_size", Value::from(64)),
        (
            "compaction_throughput_mb_per_sec",
            "compaction_throughput",
            Value::from(32),
        ),
        (
            "enable_materialized_views",
            "materialized_views_enabled",
            Value::Bool(true),
        ),
    ]
}

/// Cassandra 4.1 and 5.0 refuse a file with the old and the new name of one
/// setting ("Config contains both old and new keys for the same
/// configuration parameters"); their default files use the new names.
#[test]
fn a_fragment_written_for_3_11_leaves_one_name_of_each_setting_on_4_1_and_5_0() {
    for version in ["4.1", "5.0"] {
        let defaults = fixtures::read(&format!("cassandra/{version}/cassandra.yaml"));
        let default = mapping(&defaults);
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(FRAGMENT_FOR_3_11);
        let out = main_file(&render(&config, &defaults).unwrap(), ClusterMode::Cassandra);
        for (old, new, value) in fragment_for_3_11_settings() {
            assert!(
                default.contains_key(new),
                "{version}: the default file has no {new}: the case tests nothing"
            );
            assert_eq!(out.get(old), Some(&value), "{version}: {old}");
            assert!(
                !out.contains_key(new),
                "{version}: {new} beside {old}: {:?}",
                out.get(new)
            );
        }
        for r in crds::overrides::RENAMED_SETTINGS
            .iter()
            .filter(|r| r.section.is_none())
        {
            assert!(
                !(out.contains_key(r.old) && out.contains_key(r.new)),
                "{version}: both {} and {}",
                r.old,
                r.new
            );
        }
        // Everything else of the default file is still there, in place.
        let dropped: Vec<&str> = fragment_for_3_11_settings().map(|(_, new, _)| new).to_vec();
        for (key, value) in &default {
            let name = key.as_str().unwrap();
            if CHANGED.contains(&name) || dropped.contains(&name) {
                continue;
            }
            assert_eq!(out.get(key), Some(value), "{version}: {name}");
        }
    }
}

#[test]
fn a_fragment_written_for_3_11_renders_on_3_11_as_a_plain_merge() {
    let defaults = fixtures::read("cassandra/3.11/cassandra.yaml");
    let default = mapping(&defaults);
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap(FRAGMENT_FOR_3_11);
    let out = main_file(&render(&config, &defaults).unwrap(), ClusterMode::Cassandra);
    let mut expected = main_file(
        &render(&member(ClusterMode::Cassandra), &defaults).unwrap(),
        ClusterMode::Cassandra,
    );
    yaml::deep_merge(&mut expected, mapping(FRAGMENT_FOR_3_11));
    assert_eq!(out, expected);
    // Every key of 3.11's file stays, the fragment's in their places.
    let out_keys: Vec<&Value> = out.keys().collect();
    let default_keys: Vec<&Value> = default.keys().collect();
    assert_eq!(out_keys[..default_keys.len()], default_keys[..]);
    for (old, _, value) in fragment_for_3_11_settings() {
        assert_eq!(out.get(old), Some(&value), "{old}");
    }
}

#[test]
fn a_fragment_in_the_new_names_replaces_the_old_ones() {
    let defaults = "read_request_timeout_in_ms: 5000\nnum_tokens: 16\n\
                    server_encryption_options:\n  internode_encryption: none\n  enable_legacy_ssl_storage_port: false\n";
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap(
        "read_request_timeout: 10s\nserver_encryption_options:\n  legacy_ssl_storage_port_enabled: true\n",
    );
    let out = main_file(&render(&config, defaults).unwrap(), ClusterMode::Cassandra);
    assert!(!out.contains_key("read_request_timeout_in_ms"), "{out:?}");
    assert_eq!(out["read_request_timeout"], Value::from("10s"));
    assert_eq!(out["num_tokens"], Value::from(16));
    let tls = out["server_encryption_options"].as_mapping().unwrap();
    assert_eq!(
        tls.keys().map(|k| k.as_str().unwrap()).collect::<Vec<_>>(),
        ["internode_encryption", "legacy_ssl_storage_port_enabled"]
    );
    assert_eq!(tls["legacy_ssl_storage_port_enabled"], Value::Bool(true));
}

/// A 3.11 fragment that sets what 4.0 removed with Thrift: Cassandra 4.1
/// and 5.0 would not start on it ("Invalid yaml. Please remove properties
/// [start_rpc]"), so the sidecar refuses it for those releases, naming the
/// key and why, before anything is written; 3.11 reads it.
#[test]
fn a_fragment_that_sets_what_the_release_removed_is_refused() {
    let text = "concurrent_reads: 32\nstart_rpc: false\n";
    for (version, release) in [("4.1", "4.1.8"), ("5.0", "5.0.3")] {
        let defaults = fixtures::read(&format!("cassandra/{version}/cassandra.yaml"));
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(text);
        config.release = Some(release.to_string());
        let e = render(&config, &defaults).unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with(
                "ConfigMap \"my-overrides\": key cassandra.yaml sets start_rpc, which the operator refuses: Cassandra 4.0 removed it with Thrift"
            ),
            "{release}: {message}"
        );
        assert!(message.ends_with("; remove it"), "{message}");
    }
    let defaults = fixtures::read("cassandra/3.11/cassandra.yaml");
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap(text);
    config.release = Some("3.11.19".to_string());
    let out = main_file(&render(&config, &defaults).unwrap(), ClusterMode::Cassandra);
    assert_eq!(out["start_rpc"], Value::Bool(false));
}

#[test]
fn a_fragment_that_sets_both_names_of_a_setting_is_refused() {
    let defaults = fixtures::read("cassandra/4.1/cassandra.yaml");
    for (text, message) in [
        (
            "read_request_timeout_in_ms: 10000\nread_request_timeout: 10s\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets both read_request_timeout_in_ms and read_request_timeout, the old and the new name of one setting, which Cassandra 4.1 and 5.0 refuse to start with; keep one",
        ),
        (
            "server_encryption_options:\n  enable_legacy_ssl_storage_port: true\n  legacy_ssl_storage_port_enabled: true\n",
            "ConfigMap \"my-overrides\": key cassandra.yaml sets both enable_legacy_ssl_storage_port and legacy_ssl_storage_port_enabled, the old and the new name of one setting, which Cassandra 4.1 and 5.0 refuse to start with; keep one",
        ),
    ] {
        let mut config = member(ClusterMode::Cassandra);
        config.overrides = configmap(text);
        let e = render(&config, &defaults).unwrap_err();
        assert_eq!(e.to_string(), message, "{text:?}");
        // The controller finds the same pair in the ConfigMap.
        assert_eq!(crds::overrides::renamed_twice_in(text).len(), 1, "{text:?}");
    }
}

/// ScyllaDB kept 3.x's names: its file is merged as it is.
#[test]
fn scylla_keeps_both_names_it_was_given() {
    let defaults = fixtures::read("scylla/scylla.yaml");
    let mut config = member(ClusterMode::Scylla);
    config.overrides = configmap("read_request_timeout: 10s\n");
    let out = main_file(&render(&config, &defaults).unwrap(), ClusterMode::Scylla);
    assert_eq!(out["read_request_timeout_in_ms"], Value::from(5000));
    assert_eq!(out["read_request_timeout"], Value::from("10s"));
}

/// `spec.security.tls` renders the encryption settings over the defaults
/// and over an override that tries to turn them off, with key names each
/// release's own default file documents.
#[test]
fn tls_settings_replace_the_encryption_options_of_defaults_and_overrides() {
    use crds::v1alpha1::{ClientEncryption, InternodeEncryption};
    let tls = tls::TlsSettings {
        internode: InternodeEncryption::All,
        internode_optional: false,
        client: ClientEncryption::Optional,
        dir: PathBuf::from("/mnt/tls"),
    };
    let cases = [
        (
            "cassandra 4.1",
            ClusterMode::Cassandra,
            fixtures::read("cassandra/4.1/cassandra.yaml"),
        ),
        (
            "cassandra 5.0",
            ClusterMode::Cassandra,
            fixtures::read("cassandra/5.0/cassandra.yaml"),
        ),
        (
            "scylla",
            ClusterMode::Scylla,
            fixtures::read("scylla/scylla.yaml"),
        ),
    ];
    for (label, mode, defaults) in cases {
        let mut config = member(mode);
        config.tls = Some(tls.clone());
        config.overrides = configmap(
            "server_encryption_options:\n  internode_encryption: none\n  optional: true\n",
        );
        let doc = main_file(&render(&config, &defaults).unwrap(), mode);
        let server = doc["server_encryption_options"].as_mapping().unwrap();
        let client = doc["client_encryption_options"].as_mapping().unwrap();
        assert_eq!(
            server["internode_encryption"],
            Value::from("all"),
            "{label}"
        );
        assert_eq!(server["require_client_auth"], Value::from(true), "{label}");
        assert_eq!(client["enabled"], Value::from(true), "{label}");
        assert_eq!(client["require_client_auth"], Value::from(false), "{label}");
        // every key written is one the release's default file documents
        for key in server.keys().chain(client.keys()) {
            let key = key.as_str().unwrap();
            assert!(
                defaults.contains(key),
                "{label}: {key} is not in the default file"
            );
        }
        match mode {
            ClusterMode::Cassandra => {
                assert_eq!(
                    server["optional"],
                    Value::from(false),
                    "{label}: the override lost"
                );
                assert_eq!(client["optional"], Value::from(true), "{label}");
                assert_eq!(
                    server["keystore"],
                    Value::from("/mnt/tls/member.pem"),
                    "{label}"
                );
                assert_eq!(
                    server["truststore"],
                    Value::from("/mnt/tls/ca.crt"),
                    "{label}"
                );
                // checked inbound against the Pod IP (README, Security)
                assert_eq!(
                    server["require_endpoint_verification"],
                    Value::from(false),
                    "{label}"
                );
                assert_eq!(
                    server["ssl_context_factory"]["class_name"],
                    Value::from(tls::PEM_FACTORY),
                    "{label}"
                );
                assert!(
                    defaults.contains("org.apache.cassandra.security.PEMBasedSslContextFactory")
                );
            }
            ClusterMode::Scylla => {
                assert_eq!(
                    server["certificate"],
                    Value::from("/mnt/tls/member.crt"),
                    "{label}"
                );
                assert_eq!(
                    server["keyfile"],
                    Value::from("/mnt/tls/member.key"),
                    "{label}"
                );
                assert_eq!(
                    server["truststore"],
                    Value::from("/mnt/tls/ca.crt"),
                    "{label}"
                );
            }
        }
    }

    // no TLS asked for: the defaults' and overrides' own settings stay
    let mut config = member(ClusterMode::Cassandra);
    config.overrides = configmap("client_encryption_options:\n  enabled: true\n");
    let doc = main_file(
        &render(&config, &fixtures::read("cassandra/4.1/cassandra.yaml")).unwrap(),
        ClusterMode::Cassandra,
    );
    assert_eq!(
        doc["client_encryption_options"]["enabled"],
        Value::from(true)
    );
    assert_eq!(
        doc["client_encryption_options"]["keystore"],
        Value::from("conf/.keystore")
    );
    assert_eq!(
        doc["server_encryption_options"]["internode_encryption"],
        Value::from("none")
    );
}

/// The authentication settings of `spec.security.authentication`, as
/// `(key, value)` YAML pairs.
fn authentication_settings() -> Vec<(Value, Value)> {
    crds::contract::auth::SETTINGS
        .iter()
        .map(|(key, value)| (Value::from(*key), Value::from(*value)))
        .collect()
}

/// With `spec.security.authentication` on, every release's file holds
/// exactly the operator's three settings (cassandra.yaml in their place,
/// scylla.yaml, which has them only as comments, at the end), and nothing
/// else differs from the rendering without it.
#[test]
fn authentication_renders_its_three_settings_in_every_default_file() {
    for (label, mode, defaults) in every_fixture() {
        let mut config = member(mode);
        let off = main_file(&render(&config, &defaults).unwrap(), mode);
        config.authentication = true;
        let on = main_file(&render(&config, &defaults).unwrap(), mode);
        for (key, value) in authentication_settings() {
            assert_eq!(on.get(&key), Some(&value), "{label}: {key:?}");
        }
        // What they replace: the images' own, which turn it off.
        let default = mapping(&defaults);
        match mode {
            ClusterMode::Cassandra => {
                assert_eq!(
                    default["authenticator"],
                    Value::from("AllowAllAuthenticator"),
                    "{label}"
                );
                assert_eq!(
                    default["authorizer"],
                    Value::from("AllowAllAuthorizer"),
                    "{label}"
                );
                let on_keys: Vec<&Value> = on.keys().collect();
                let off_keys: Vec<&Value> = off.keys().collect();
                assert_eq!(on_keys, off_keys, "{label}: same keys, same order");
            }
            ClusterMode::Scylla => {
                // Commented out (role_manager not even mentioned): the
                // settings are added.
                for (key, _) in authentication_settings() {
                    assert!(!default.contains_key(&key), "{label}: {key:?} set");
                }
                assert!(defaults.contains("# authenticator: AllowAllAuthenticator"));
                assert!(defaults.contains("# authorizer: AllowAllAuthorizer"));
            }
        }
        for (key, value) in &on {
            if !authentication_settings().iter().any(|(k, _)| k == key) {
                assert_eq!(off.get(key), Some(value), "{label}: {key:?} changed");
            }
        }
        assert_eq!(
            on.len(),
            off.len() + usize::from(mode == ClusterMode::Scylla) * 3
        );
    }
}

/// Without it, the image's defaults and the rack's overrides stand, as
/// before authentication was a setting of the Cluster.
#[test]
fn without_authentication_the_defaults_and_overrides_stand() {
    for (label, mode, defaults) in every_fixture() {
        let default = mapping(&defaults);
        let mut config = member(mode);
        let out = main_file(&render(&config, &defaults).unwrap(), mode);
        for (key, _) in authentication_settings() {
            assert_eq!(out.get(&key), default.get(&key), "{label}: {key:?}");
        }
        config.overrides =
            configmap("authenticator: PasswordAuthenticator\nauthorizer: CassandraAuthorizer\n");
        let out = main_file(&render(&config, &defaults).unwrap(), mode);
        assert_eq!(
            out["authenticator"],
            Value::from("PasswordAuthenticator"),
            "{label}"
        );
        assert_eq!(
            out["authorizer"],
            Value::from("CassandraAuthorizer"),
            "{label}"
        );
    }
}

/// An authenticated Cluster's overrides may not set the authentication
/// settings, not even to the operator's values: the fragment is refused
/// with the ConfigMap, the key and why (the controller reports the same
/// keys from `crds::overrides`), as an override of the member's identity
/// is. Refused rather than overwritten: the user who asked for
/// `AllowAllAuthenticator` learns that it does not apply.
#[test]
fn an_authenticated_clusters_overrides_may_not_set_the_authentication_settings() {
    for (label, mode, defaults) in every_fixture() {
        let mut config = member(mode);
        config.authentication = true;
        config.overrides =
            configmap("concurrent_reads: 64\nauthenticator: AllowAllAuthenticator\n");
        let e = render(&config, &defaults).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "ConfigMap \"my-overrides\": key {} sets authenticator, which the operator refuses: spec.security.authentication is on, so the operator sets PasswordAuthenticator: another authenticator lets clients in without a password, or locks the operator out of the superuser it keeps; remove it",
                main_file_name(mode)
            ),
            "{label}"
        );
        for (key, value) in crds::contract::auth::SETTINGS {
            config.overrides = configmap(&format!("{key}: {value}\n"));
            match render(&config, &defaults) {
                Err(RenderError::OverrideRefusedKey { key: refused, .. }) => {
                    assert_eq!(refused, key, "{label}")
                }
                other => panic!("{label}: {key}: {other:?}"),
            }
        }
    }
    // The release's own refusals stay beside them.
    let mut config = member(ClusterMode::Cassandra);
    config.authentication = true;
    config.release = Some("4.1.8".to_string());
    config.overrides = configmap("start_rpc: false\n");
    match render(&config, &fixtures::read("cassandra/4.1/cassandra.yaml")) {
        Err(RenderError::OverrideRefusedKey { key, .. }) => assert_eq!(key, "start_rpc"),
        other => panic!("{other:?}"),
    }
}

/// The steps of a move to TLS render Cassandra's transitional mode: the
/// keys and `optional: true`, first with no internode encryption of its
/// own (it accepts TLS from members that open it), then with it (it still
/// accepts clear text); the settings come from the Pod template's value,
/// over the spec's.
#[test]
fn the_steps_of_a_move_to_tls_render_the_transitional_mode() {
    use crds::v1alpha1::{SecuritySpec, TlsSpec};
    let spec = SecuritySpec {
        tls: TlsSpec {
            internode: crds::v1alpha1::InternodeEncryption::All,
            client: crds::v1alpha1::ClientEncryption::Required,
        },
        authentication: None,
    };
    let dir = PathBuf::from("/mnt/tls");
    for (value, internode, optional, client_enabled, client_optional) in [
        (
            "internode=none+optional,client=optional",
            "none",
            true,
            true,
            true,
        ),
        (
            "internode=all+optional,client=required",
            "all",
            true,
            true,
            false,
        ),
        ("internode=all,client=required", "all", false, true, false),
        ("internode=none,client=none", "none", false, false, false),
    ] {
        let tls = tls::TlsSettings::of(Some(value), Some(&spec), &dir)
            .unwrap()
            .unwrap();
        let mut config = member(ClusterMode::Cassandra);
        config.tls = Some(tls);
        let doc = main_file(
            &render(&config, &fixtures::read("cassandra/4.1/cassandra.yaml")).unwrap(),
            ClusterMode::Cassandra,
        );
        let server = &doc["server_encryption_options"];
        let client = &doc["client_encryption_options"];
        assert_eq!(
            server["internode_encryption"],
            Value::from(internode),
            "{value}"
        );
        assert_eq!(server["optional"], Value::from(optional), "{value}");
        // TLS accepted from members is TLS from members of the cluster only
        assert_eq!(
            server["require_client_auth"],
            Value::from(internode != "none" || optional),
            "{value}"
        );
        assert_eq!(
            server["keystore"],
            Value::from("/mnt/tls/member.pem"),
            "{value}"
        );
        assert_eq!(client["enabled"], Value::from(client_enabled), "{value}");
        assert_eq!(client["optional"], Value::from(client_optional), "{value}");
    }
    // Without the template's value: the spec's.
    let of_spec = tls::TlsSettings::of(None, Some(&spec), &dir)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            of_spec.internode.as_str(),
            of_spec.internode_optional,
            of_spec.client.as_str()
        ),
        ("all", false, "required")
    );
    assert_eq!(tls::TlsSettings::of(None, None, &dir), Ok(None));
    let err =
        tls::TlsSettings::of(Some("internode=maybe,client=none"), Some(&spec), &dir).unwrap_err();
    assert!(err.contains("TLS_ENCRYPTION"), "{err}");
}

/// Authentication and TLS together: both sets of the operator's settings.
#[test]
fn authentication_and_tls_are_rendered_together() {
    use crds::v1alpha1::{ClientEncryption, InternodeEncryption};
    let mut config = member(ClusterMode::Cassandra);
    config.authentication = true;
    config.tls = Some(tls::TlsSettings {
        internode: InternodeEncryption::All,
        internode_optional: false,
        client: ClientEncryption::Required,
        dir: PathBuf::from("/mnt/tls"),
    });
    let doc = main_file(
        &render(&config, &fixtures::read("cassandra/5.0/cassandra.yaml")).unwrap(),
        ClusterMode::Cassandra,
    );
    assert_eq!(doc["authenticator"], Value::from("PasswordAuthenticator"));
    assert_eq!(
        doc["server_encryption_options"]["internode_encryption"],
        Value::from("all")
    );
}
