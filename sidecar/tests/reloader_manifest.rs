//! manifests/examples/vrouter-reloader.yaml: every document is a valid
//! Kubernetes object (no field that the API types do not know), the
//! reloader's arguments are accepted by the real command line, and the
//! reloader container has only what signalling in a shared PID namespace
//! needs.

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace};
use serde_json::Value;
use sidecar::reloader::ReloaderArgs;

const MANIFEST: &str = include_str!("../../manifests/examples/vrouter-reloader.yaml");

fn documents() -> Vec<Value> {
    serde_norway::Deserializer::from_str(MANIFEST)
        .map(|doc| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(doc).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .collect()
}

/// Deserializes into the API type and checks that nothing was dropped (a
/// misspelt or misplaced field would be).
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> T {
    let object: T = serde_json::from_value(doc.clone()).unwrap();
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(
        &back, doc,
        "fields lost in a round trip through the API type"
    );
    object
}

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    args: ReloaderArgs,
}

fn container<'a>(ds: &'a DaemonSet, name: &str) -> &'a Container {
    ds.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

#[test]
fn reloader_vrouter_example_is_a_least_privilege_daemonset() {
    let docs = documents();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["apiVersion"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("v1", "Namespace"),
            ("v1", "ConfigMap"),
            ("apps/v1", "DaemonSet")
        ]
    );
    let _: Namespace = typed(&docs[0]);
    let config: ConfigMap = typed(&docs[1]);
    let ds: DaemonSet = typed(&docs[2]);

    let spec = ds.spec.as_ref().unwrap();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    for (k, v) in spec.selector.match_labels.as_ref().unwrap() {
        assert_eq!(
            labels.get(k),
            Some(v),
            "the selector does not select the Pods"
        );
    }
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.share_process_namespace, Some(true));

    // The downward-API volume of the Pod's labels.
    let podinfo = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "podinfo")
        .unwrap();
    let item = &podinfo
        .downward_api
        .as_ref()
        .unwrap()
        .items
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        item.field_ref.as_ref().unwrap().field_path,
        "metadata.labels"
    );

    // The reloader's arguments, as the binary parses them.
    let reloader = container(&ds, "reloader");
    let args = reloader.args.as_ref().unwrap();
    assert_eq!(args[0], "reloader");
    let parsed = Cli::try_parse_from(args.iter().map(String::as_str))
        .unwrap_or_else(|e| panic!("{e}"))
        .args;
    assert_eq!(parsed.process.as_deref(), Some("contrail-vrouter-agent"));
    let mounts = reloader.volume_mounts.as_ref().unwrap();
    let labels_path = std::path::Path::new("/etc/podinfo").join(&item.path);
    assert!(parsed.watch.contains(&labels_path));
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "podinfo" && m.mount_path == "/etc/podinfo")
    );
    let config_file = config.data.as_ref().unwrap().keys().next().unwrap();
    assert!(
        parsed
            .watch
            .contains(&std::path::Path::new("/etc/contrail").join(config_file))
    );

    // Least privilege: same user as the agent, no capability at all.
    let sc = reloader.security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_eq!(caps.add, None);
    let agent = container(&ds, "vrouter-agent");
    let agent_sc = agent.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_user, agent_sc.run_as_user);
    for c in &pod.containers {
        let privileged = c.security_context.as_ref().and_then(|s| s.privileged);
        assert_ne!(privileged, Some(true), "{} is privileged", c.name);
    }
}
