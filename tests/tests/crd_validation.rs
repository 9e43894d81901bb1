//! The Cluster API's validation, three ways: the CRD's structural schema (as
//! the API server applies it), its CEL rules (evaluated client-side), and the
//! controller's pure `validate()`. Every example manifest must pass all three;
//! every invalid manifest must be rejected by the schema or CEL *and* by
//! `validate()`, each naming the offending field.

use std::path::{Path, PathBuf};

use crds::Cluster;
use serde_json::{Value, json};
use testworld::{cel, schema};

#[allow(dead_code)]
mod support;
use support::valid_cluster;

fn openapi_schema() -> Value {
    let crd = crds::crd::definition();
    let version = &crd.spec.versions[0];
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the CRD has an openAPIV3Schema");
    serde_json::to_value(schema).unwrap()
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples")
}

/// Every `Cluster` document of a multi-document YAML file, as JSON.
fn clusters_in(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(doc).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .filter(|v| v["kind"] == "Cluster")
        .collect()
}

/// What the API server would say about a new object: schema errors after
/// null-dropping, pruning and defaulting, then CEL errors.
fn api_server_errors(object: &Value, old: Option<&Value>) -> (Value, Vec<String>, Vec<String>) {
    let schema = openapi_schema();
    let mut admitted = object.clone();
    let (pruned, errors) = schema::admit(&schema, &mut admitted);
    let mut messages: Vec<String> = errors.iter().map(|e| e.message.clone()).collect();
    if messages.is_empty() {
        let old = old.map(|o| {
            let mut o = o.clone();
            schema::admit(&schema, &mut o);
            o
        });
        let failed = cel::check(&schema, &admitted, old.as_ref());
        // kubesim evaluates the rules compiled once per CRD: the same
        // verdicts, word for word.
        let compiled = kube_cel::compile_schema(&schema);
        assert_eq!(
            cel::check_compiled(&compiled, &admitted, old.as_ref()),
            failed
        );
        messages.extend(failed);
    }
    (admitted, pruned, messages)
}

#[test]
fn example_manifests_are_accepted_unchanged() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for object in clusters_in(&path) {
            seen += 1;
            let (admitted, pruned, errors) = api_server_errors(&object, None);
            assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
            assert!(
                pruned.is_empty(),
                "{}: fields the CRD does not know (strict validation rejects them): {pruned:?}",
                path.display()
            );
            let cluster: Cluster = serde_json::from_value(admitted)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            crds::validate(&cluster).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    assert!(seen >= 4, "expected the example Clusters, found {seen}");
}

#[test]
fn rook_manifest_keeps_its_values() {
    let object = clusters_in(&examples_dir().join("rook-cluster.yaml")).remove(0);
    let (admitted, _, errors) = api_server_errors(&object, None);
    assert!(errors.is_empty(), "{errors:?}");
    // `annotations:` with no value is null: accepted (the field is nullable)
    // and read as "no annotations".
    assert!(admitted["spec"]["annotations"].is_null());
    let cluster: Cluster = serde_json::from_value(admitted).unwrap();
    assert_eq!(cluster.spec.annotations, None);
    let rack = &cluster.spec.datacenter.racks[0];
    assert_eq!(rack.members, 3);
    // `cpu: 1` is an integer in YAML and must survive as the quantity "1".
    let limits = rack.resources.limits.as_ref().unwrap();
    assert_eq!(limits["cpu"].0, "1");
    assert_eq!(limits["memory"].0, "2Gi");
    assert_eq!(
        rack.storage.volume_claim_templates[0]
            .metadata
            .name
            .as_deref(),
        Some("rook-cassandra-data")
    );
    let placement = rack.placement.as_ref().unwrap();
    assert_eq!(
        placement.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(
        cluster.database_image(),
        "my-private-repo.io/cassandra:3.11.1"
    );
}

#[test]
fn defaults_fill_mode_and_storage() {
    let mut object = valid_cluster();
    object["spec"].as_object_mut().unwrap().remove("mode");
    object["spec"]["datacenter"]["racks"][0]
        .as_object_mut()
        .unwrap()
        .remove("storage");
    let (admitted, _, errors) = api_server_errors(&object, None);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(admitted["spec"]["mode"], "cassandra");
    assert_eq!(
        admitted["spec"]["datacenter"]["racks"][0]["storage"],
        json!({"volumeClaimTemplates": []})
    );
}

type Mutation = fn(&mut Value);

/// (what is wrong, the change, the field the API server names, the field
/// `validate()` names)
const INVALID: &[(&str, Mutation, &str, &str)] = &[
    (
        "negative members",
        |v| v["spec"]["datacenter"]["racks"][0]["members"] = json!(-1),
        "spec.datacenter.racks[0].members",
        "spec.datacenter.racks[0].members",
    ),
    (
        "duplicate rack names",
        |v| {
            let rack = v["spec"]["datacenter"]["racks"][0].clone();
            v["spec"]["datacenter"]["racks"]
                .as_array_mut()
                .unwrap()
                .push(rack);
        },
        "spec.datacenter.racks",
        "spec.datacenter.racks[1].name",
    ),
    (
        "upper-case rack name",
        |v| v["spec"]["datacenter"]["racks"][0]["name"] = json!("Rack-A"),
        "spec.datacenter.racks[0].name",
        "spec.datacenter.racks[0].name",
    ),
    (
        "underscore in rack name",
        |v| v["spec"]["datacenter"]["racks"][0]["name"] = json!("rack_a"),
        "spec.datacenter.racks[0].name",
        "spec.datacenter.racks[0].name",
    ),
    (
        "rack name ending in a dash",
        |v| v["spec"]["datacenter"]["racks"][0]["name"] = json!("rack-"),
        "spec.datacenter.racks[0].name",
        "spec.datacenter.racks[0].name",
    ),
    (
        "empty rack name",
        |v| v["spec"]["datacenter"]["racks"][0]["name"] = json!(""),
        "spec.datacenter.racks[0].name",
        "spec.datacenter.racks[0].name",
    ),
    (
        "upper-case datacenter name",
        |v| v["spec"]["datacenter"]["name"] = json!("DC1"),
        "spec.datacenter.name",
        "spec.datacenter.name",
    ),
    (
        "empty datacenter name",
        |v| v["spec"]["datacenter"]["name"] = json!(""),
        "spec.datacenter.name",
        "spec.datacenter.name",
    ),
    (
        "datacenter name over 63 characters",
        |v| v["spec"]["datacenter"]["name"] = json!("d".repeat(64)),
        "spec.datacenter.name",
        "spec.datacenter.name",
    ),
    (
        "StatefulSet name over 52 characters",
        |v| {
            v["spec"]["datacenter"]["name"] = json!("datacenter-with-a-long-name");
            v["spec"]["datacenter"]["racks"][0]["name"] = json!("rack-with-long-name");
        },
        "spec.datacenter.racks",
        "spec.datacenter.racks[0].name",
    ),
    (
        "dot in the cluster name",
        |v| v["metadata"]["name"] = json!("my.cluster"),
        "metadata.name",
        "metadata.name",
    ),
    (
        "cluster name starting with a digit",
        |v| v["metadata"]["name"] = json!("1cassandra"),
        "metadata.name",
        "metadata.name",
    ),
    (
        "cluster name over 56 characters",
        |v| {
            v["metadata"]["name"] = json!("c".repeat(57));
            v["spec"]["datacenter"]["name"] = json!("d");
            v["spec"]["datacenter"]["racks"][0]["name"] = json!("r");
        },
        "metadata.name",
        "metadata.name",
    ),
    (
        "empty version",
        |v| v["spec"]["version"] = json!(""),
        "spec.version",
        "spec.version",
    ),
    (
        "space in the version",
        |v| v["spec"]["version"] = json!("3.11 .1"),
        "spec.version",
        "spec.version",
    ),
    (
        "version starting with a dot",
        |v| v["spec"]["version"] = json!(".3.11"),
        "spec.version",
        "spec.version",
    ),
    (
        "version over 128 characters",
        |v| v["spec"]["version"] = json!("1".repeat(129)),
        "spec.version",
        "spec.version",
    ),
    (
        "no racks",
        |v| v["spec"]["datacenter"]["racks"] = json!([]),
        "spec.datacenter.racks",
        "spec.datacenter.racks",
    ),
    (
        "more than 64 racks",
        |v| {
            let racks: Vec<Value> = (0..65)
                .map(|i| json!({"name": format!("r{i}"), "members": 0}))
                .collect();
            v["spec"]["datacenter"]["racks"] = json!(racks);
        },
        "spec.datacenter.racks",
        "spec.datacenter.racks",
    ),
    (
        "invalid ConfigMap name",
        |v| v["spec"]["datacenter"]["racks"][0]["configMapName"] = json!("My_Overrides"),
        "spec.datacenter.racks[0].configMapName",
        "spec.datacenter.racks[0].configMapName",
    ),
    (
        "invalid JMX exporter ConfigMap name",
        |v| v["spec"]["datacenter"]["racks"][0]["jmxExporterConfigMapName"] = json!("-exporter"),
        "spec.datacenter.racks[0].jmxExporterConfigMapName",
        "spec.datacenter.racks[0].jmxExporterConfigMapName",
    ),
    (
        "empty repository",
        |v| v["spec"]["repository"] = json!(""),
        "spec.repository",
        "spec.repository",
    ),
    (
        "invalid sidecar image tag",
        |v| {
            v["spec"]["sidecarImage"] =
                json!({"repository": "example.com/op", "version": "v1 beta"})
        },
        "spec.sidecarImage.version",
        "spec.sidecarImage.version",
    ),
    (
        "empty sidecar image repository",
        |v| v["spec"]["sidecarImage"] = json!({"repository": "", "version": "1.0"}),
        "spec.sidecarImage.repository",
        "spec.sidecarImage.repository",
    ),
    (
        "a repair interval of zero",
        |v| v["spec"]["maintenance"] = json!({"repair": {"schedule": "0m"}}),
        "spec.maintenance.repair.schedule",
        "spec.maintenance.repair.schedule",
    ),
    (
        "a repair schedule that is neither cron nor an interval",
        |v| v["spec"]["maintenance"] = json!({"repair": {"schedule": "weekly"}}),
        "spec.maintenance.repair.schedule",
        "spec.maintenance.repair.schedule",
    ),
    (
        "a cron schedule of four fields",
        |v| v["spec"]["maintenance"] = json!({"repair": {"schedule": "0 2 * *"}}),
        "spec.maintenance.repair.schedule",
        "spec.maintenance.repair.schedule",
    ),
    (
        "two members repairing at once",
        |v| v["spec"]["maintenance"] = json!({"repair": {"schedule": "7d", "parallelism": 2}}),
        "spec.maintenance.repair.parallelism",
        "spec.maintenance.repair.parallelism",
    ),
];

/// Repair schedules users write, as cron (UTC) or an interval: accepted
/// by the schema, the CEL rules and `validate()`, the defaults filled in.
#[test]
fn repair_schedules_in_cron_or_interval_are_accepted_with_defaults() {
    for schedule in ["0 2 * * 0", "7d", "36h", "1m", "*/15 * * * mon-fri"] {
        let mut object = valid_cluster();
        object["spec"]["maintenance"] = json!({"repair": {"schedule": schedule}});
        let (admitted, schema_errors, errors) = api_server_errors(&object, None);
        assert!(
            schema_errors.is_empty() && errors.is_empty(),
            "{schedule}: {schema_errors:?} {errors:?}"
        );
        let repair = &admitted["spec"]["maintenance"]["repair"];
        assert_eq!(repair["gcGraceSeconds"], json!(864_000), "{schedule}");
        assert_eq!(repair["parallelism"], json!(1), "{schedule}");
        let cluster: Cluster = serde_json::from_value(admitted).unwrap();
        crds::validate(&cluster).unwrap_or_else(|e| panic!("{schedule}: {e}"));
    }
}

#[test]
fn invalid_clusters_are_rejected_by_the_api_server_and_by_validate() {
    assert!(INVALID.len() >= 20);
    for (what, mutate, api_field, validate_field) in INVALID {
        let mut object = valid_cluster();
        mutate(&mut object);
        let (_, _, errors) = api_server_errors(&object, None);
        if std::env::var_os("SHOW_ERRORS").is_some() {
            eprintln!("{what}: {errors:?}");
        }
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("{api_field}:"))
                    || e.starts_with(&format!(".{api_field}:"))),
            "{what}: the API server must reject it naming {api_field}, said {errors:#?}"
        );

        let cluster: Cluster = serde_json::from_value(object)
            .unwrap_or_else(|e| panic!("{what}: deserialises (the rule is not a type rule): {e}"));
        let err = crds::validate(&cluster).expect_err(what);
        assert!(
            err.fields().contains(validate_field),
            "{what}: validate() must name {validate_field}, said {err}"
        );
    }
}

#[test]
fn the_error_messages_explain() {
    let mut object = valid_cluster();
    object["spec"]["datacenter"]["racks"][0]["members"] = json!(-1);
    let (_, _, errors) = api_server_errors(&object, None);
    assert_eq!(
        errors,
        vec![
            "spec.datacenter.racks[0].members: Invalid value: -1: spec.datacenter.racks[0].members in body should be greater than or equal to 0"
        ]
    );

    let mut object = valid_cluster();
    let rack = object["spec"]["datacenter"]["racks"][0].clone();
    object["spec"]["datacenter"]["racks"]
        .as_array_mut()
        .unwrap()
        .push(rack);
    let cluster: Cluster = serde_json::from_value(object).unwrap();
    assert_eq!(
        crds::validate(&cluster).unwrap_err().to_string(),
        "spec.datacenter.racks[1].name: rack names must be unique: \"europe-west1-b\" appears more than once"
    );
}

#[test]
fn type_errors_are_rejected_by_the_schema_and_by_deserialisation() {
    let cases: &[(Mutation, &str)] = &[
        (
            |v| v["spec"]["datacenter"]["racks"][0]["members"] = json!("three"),
            "spec.datacenter.racks[0].members",
        ),
        (|v| v["spec"]["mode"] = json!("cassandra2"), "spec.mode"),
        (
            |v| {
                v["spec"].as_object_mut().unwrap().remove("datacenter");
            },
            "spec.datacenter",
        ),
        (
            |v| {
                v["spec"].as_object_mut().unwrap().remove("version");
            },
            "spec.version",
        ),
        (
            |v| {
                v["spec"]["datacenter"]["racks"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("members");
            },
            "spec.datacenter.racks[0].members",
        ),
    ];
    for (mutate, field) in cases {
        let mut object = valid_cluster();
        mutate(&mut object);
        let (_, _, errors) = api_server_errors(&object, None);
        assert!(
            errors.iter().any(
                |e| e.starts_with(&format!("{field}:")) || e.starts_with(&format!(".{field}:"))
            ),
            "must name {field}: {errors:#?}"
        );
        assert!(serde_json::from_value::<Cluster>(object).is_err());
    }
}

#[test]
fn validate_catches_what_the_schema_cannot_say() {
    let cases: &[(Mutation, &str)] = &[
        (
            |v| v["spec"]["annotations"] = json!({"bad key": "x"}),
            "spec.annotations[bad key]",
        ),
        (
            |v| v["spec"]["datacenter"]["racks"][0]["annotations"] = json!({"example.com/": "x"}),
            "spec.datacenter.racks[0].annotations[example.com/]",
        ),
        (
            |v| {
                v["spec"]["datacenter"]["racks"][0]["resources"]["requests"]["memory"] =
                    json!("4Gi")
            },
            "spec.datacenter.racks[0].resources.requests.memory",
        ),
        (
            |v| v["spec"]["datacenter"]["racks"][0]["resources"]["limits"]["cpu"] = json!("two"),
            "spec.datacenter.racks[0].resources.limits.cpu",
        ),
        (
            |v| {
                v["spec"]["datacenter"]["racks"][0]["storage"]["volumeClaimTemplates"][0]["metadata"].as_object_mut().unwrap().remove("name");
            },
            "spec.datacenter.racks[0].storage.volumeClaimTemplates[0].metadata.name",
        ),
        (
            |v| v["spec"]["repository"] = json!("repo:tag"),
            "spec.repository",
        ),
    ];
    for (mutate, field) in cases {
        let mut object = valid_cluster();
        mutate(&mut object);
        let cluster: Cluster = serde_json::from_value(object).unwrap();
        let err = crds::validate(&cluster).unwrap_err();
        assert!(err.fields().contains(field), "must name {field}: {err}");
    }
}

#[test]
fn transitions_that_cassandra_cannot_follow_are_rejected() {
    let old = valid_cluster();
    let cases: &[(Mutation, &str)] = &[
        (|v| v["spec"]["mode"] = json!("scylla"), "spec.mode"),
        (
            |v| v["spec"]["datacenter"]["name"] = json!("europe-west2"),
            "spec.datacenter.name",
        ),
        // 4.1.8 → 4.0.13: a downgrade across minor versions
        (|v| v["spec"]["version"] = json!("4.0.13"), "spec.version"),
        // 4.1.8 → 6.0.0: over a major
        (|v| v["spec"]["version"] = json!("6.0.0"), "spec.version"),
        (
            |v| {
                v["spec"]["datacenter"]["racks"] = json!([{"name": "other", "members": 1}]);
            },
            "spec.datacenter.racks",
        ),
    ];
    for (mutate, field) in cases {
        let mut new = old.clone();
        mutate(&mut new);
        // valid on its own, so only the transition rules can object
        let (_, _, create_errors) = api_server_errors(&new, None);
        assert!(create_errors.is_empty(), "{create_errors:?}");
        let (_, _, errors) = api_server_errors(&new, Some(&old));
        assert!(
            errors.iter().any(
                |e| e.starts_with(&format!("{field}:")) || e.starts_with(&format!(".{field}:"))
            ),
            "must name {field}: {errors:#?}"
        );
        let old_cluster: Cluster = serde_json::from_value(old.clone()).unwrap();
        let new_cluster: Cluster = serde_json::from_value(new).unwrap();
        let err = crds::validate_update(&old_cluster, &new_cluster).unwrap_err();
        assert!(err.fields().contains(field), "must name {field}: {err}");
    }
}

#[test]
fn scaling_a_rack_to_zero_then_removing_it_is_allowed() {
    let mut old = valid_cluster();
    let mut second = old["spec"]["datacenter"]["racks"][0].clone();
    second["name"] = json!("europe-west1-c");
    second["members"] = json!(0);
    old["spec"]["datacenter"]["racks"]
        .as_array_mut()
        .unwrap()
        .push(second);
    let new = valid_cluster();
    let (_, _, errors) = api_server_errors(&new, Some(&old));
    assert!(errors.is_empty(), "{errors:?}");
    let old: Cluster = serde_json::from_value(old).unwrap();
    let new: Cluster = serde_json::from_value(new).unwrap();
    crds::validate_update(&old, &new).unwrap();
}

/// The version rules of Cassandra's upgrade notes, in the CRD's CEL where
/// it can say them and in `validate_update` (crds::versions): patch
/// releases in any order, the next minor or major line; neither a
/// downgrade across minors nor 3.11 → 5.0. ScyllaDB's versions and tags
/// that name no version are not judged.
#[test]
fn version_changes_follow_cassandras_upgrade_rules() {
    let with = |mode: &str, version: &str| {
        let mut v = valid_cluster();
        v["spec"]["mode"] = json!(mode);
        v["spec"]["version"] = json!(version);
        v
    };
    let judge = |mode: &str, from: &str, to: &str| {
        let (old, new) = (with(mode, from), with(mode, to));
        let (_, _, errors) = api_server_errors(&new, Some(&old));
        let old: Cluster = serde_json::from_value(old).unwrap();
        let new: Cluster = serde_json::from_value(new).unwrap();
        let rust = crds::validate_update(&old, &new);
        (errors, rust)
    };
    for (from, to) in [
        ("4.1.8", "4.1.3"),
        ("4.1.3", "4.1.8"),
        ("3.11.6", "4.0.13"),
        ("3.11.6", "4.1.8"),
        ("4.0.13", "4.1.8"),
        ("4.1.8", "5.0.3"),
        ("4.1.8", "latest"),
    ] {
        let (errors, rust) = judge("cassandra", from, to);
        assert!(errors.is_empty(), "{from} -> {to}: {errors:?}");
        rust.unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    }
    for (from, to) in [("3.11.6", "5.0.3"), ("5.0.3", "4.1.8"), ("4.1.8", "3.11.6")] {
        let (errors, rust) = judge("cassandra", from, to);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.version:") || e.starts_with(".spec.version:")),
            "{from} -> {to} must be refused by the CRD: {errors:?}"
        );
        let err = rust.unwrap_err();
        assert!(
            err.fields().contains(&"spec.version"),
            "{from} -> {to}: {err}"
        );
    }
    let (errors, rust) = judge("scylla", "6.2.3", "2025.1.0");
    assert!(errors.is_empty(), "{errors:?}");
    rust.unwrap();
}

/// The names `spec.security.tls` takes, its defaults, and the rules on it:
/// PEM files need Cassandra 4.1 (ScyllaDB reads them in every release), and
/// in place it can only be raised, in Cassandra mode (the operator moves
/// the members through the optional step), including by adding
/// `spec.security` to a cluster that had none.
#[test]
fn tls_is_accepted_from_cassandra_4_1_and_only_raised_in_place() {
    for (mode, version) in [
        ("cassandra", "4.1.8"),
        ("cassandra", "5.0.3"),
        ("scylla", "6.2.3"),
    ] {
        let mut object = valid_cluster();
        object["spec"]["mode"] = json!(mode);
        object["spec"]["version"] = json!(version);
        object["spec"]["security"] = json!({"tls": {"internode": "all"}});
        let (admitted, schema_errors, errors) = api_server_errors(&object, None);
        assert!(
            schema_errors.is_empty() && errors.is_empty(),
            "{version}: {schema_errors:?} {errors:?}"
        );
        let cluster: Cluster = serde_json::from_value(admitted).unwrap();
        let tls = &cluster.spec.security.as_ref().unwrap().tls;
        assert_eq!(tls.internode.as_str(), "all");
        assert_eq!(tls.client.as_str(), "none", "client defaults to none");
        crds::validate(&cluster).unwrap_or_else(|e| panic!("{version}: {e}"));
    }

    for (tls, version) in [
        (json!({"internode": "all"}), "4.0.13"),
        (json!({"client": "optional"}), "3.11.6"),
    ] {
        let mut object = valid_cluster();
        object["spec"]["version"] = json!(version);
        object["spec"]["security"] = json!({"tls": tls});
        let (_, _, errors) = api_server_errors(&object, None);
        assert!(
            errors
                .iter()
                .any(|e| names(e, "spec.security.tls") && e.contains("Cassandra 4.1 or later")),
            "{version}: {errors:#?}"
        );
        let cluster: Cluster = serde_json::from_value(object).unwrap();
        let err = crds::validate(&cluster).unwrap_err();
        assert_eq!(err.fields(), vec!["spec.security.tls"], "{err}");
    }
    let mut object = valid_cluster();
    object["spec"]["mode"] = json!("scylla");
    object["spec"]["version"] = json!("6.2.3");
    object["spec"]["security"] = json!({"tls": {"internode": "all", "client": "optional"}});
    let (_, _, errors) = api_server_errors(&object, None);
    assert!(
        errors
            .iter()
            .any(|e| names(e, "spec.security.tls.client") && e.contains("ScyllaDB")),
        "{errors:#?}"
    );
    let cluster: Cluster = serde_json::from_value(object).unwrap();
    let err = crds::validate(&cluster).unwrap_err();
    assert_eq!(err.fields(), vec!["spec.security.tls.client"], "{err}");
    // none on 3.11 is no TLS at all: accepted
    let mut object = valid_cluster();
    object["spec"]["version"] = json!("3.11.6");
    object["spec"]["security"] = json!({"tls": {"internode": "none", "client": "none"}});
    let (_, _, errors) = api_server_errors(&object, None);
    assert!(errors.is_empty(), "{errors:?}");

    let bad = {
        let mut o = valid_cluster();
        o["spec"]["security"] = json!({"tls": {"internode": "everything"}});
        o
    };
    let (_, schema_errors, errors) = api_server_errors(&bad, None);
    assert!(
        errors
            .iter()
            .any(|e| names(e, "spec.security.tls.internode")),
        "{schema_errors:?} {errors:?}"
    );

    let plain = valid_cluster();
    let mut with_tls = valid_cluster();
    with_tls["spec"]["security"] = json!({"tls": {"internode": "dc", "client": "required"}});
    let tls = |internode: &str, client: &str| {
        let mut o = valid_cluster();
        o["spec"]["security"] = json!({"tls": {"internode": internode, "client": client}});
        o
    };
    let scylla = |o: &serde_json::Value| {
        let mut o = o.clone();
        o["spec"]["mode"] = json!("scylla");
        o["spec"]["version"] = json!("6.2.3");
        o
    };
    // Raised: accepted by both sides.
    for (old, new) in [
        (&plain, &with_tls),
        (&plain, &tls("none", "optional")),
        (&tls("none", "optional"), &tls("all", "optional")),
        (&tls("all", "optional"), &tls("all", "required")),
        (&tls("rack", "none"), &tls("rack", "required")),
    ] {
        let (_, _, errors) = api_server_errors(new, Some(old));
        assert!(errors.is_empty(), "{old} -> {new}: {errors:#?}");
        let old: Cluster = serde_json::from_value(old.clone()).unwrap();
        let new: Cluster = serde_json::from_value(new.clone()).unwrap();
        crds::validate_update(&old, &new).unwrap();
    }
    // Lowered, switched, or in ScyllaDB mode: refused, with the reason.
    for (old, new, field, reason) in [
        (
            &with_tls,
            &plain,
            "spec.security.tls.internode",
            "only from none",
        ),
        (
            &with_tls,
            &plain,
            "spec.security.tls.client",
            "only be raised",
        ),
        (
            &with_tls,
            &tls("dc", "optional"),
            "spec.security.tls.client",
            "only be raised",
        ),
        (
            &tls("all", "none"),
            &tls("dc", "none"),
            "spec.security.tls.internode",
            "only from none",
        ),
        (
            &scylla(&plain),
            &scylla(&tls("all", "none")),
            "spec.security.tls.internode",
            "ScyllaDB",
        ),
        (
            &scylla(&plain),
            &scylla(&tls("none", "required")),
            "spec.security.tls.client",
            "ScyllaDB",
        ),
    ] {
        let (_, _, errors) = api_server_errors(new, Some(old));
        assert!(
            errors.iter().any(|e| names(e, field) && e.contains(reason)),
            "{field}: {errors:#?}"
        );
        let old: Cluster = serde_json::from_value(old.clone()).unwrap();
        let new: Cluster = serde_json::from_value(new.clone()).unwrap();
        let err = crds::validate_update(&old, &new).unwrap_err();
        assert!(err.fields().contains(&field), "{field}: {err}");
        assert!(err.to_string().contains(reason), "{err}");
    }
    // the same settings written out: no change
    let mut explicit = valid_cluster();
    explicit["spec"]["security"] = json!({"tls": {"internode": "none", "client": "none"}});
    let (_, _, errors) = api_server_errors(&explicit, Some(&plain));
    assert!(errors.is_empty(), "{errors:?}");
}

/// Whether an API server error names the field (with or without the
/// leading dot a rule's fieldPath gives).
fn names(error: &str, field: &str) -> bool {
    error.starts_with(&format!("{field}:")) || error.starts_with(&format!(".{field}:"))
}
