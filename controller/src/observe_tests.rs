//! The observation of cached objects, table-tested: what observe makes of
//! Pods, member Services, claims, volumes and Nodes.

use super::*;
use crate::cached::cached;
use crate::resources::{self, BuildContext};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

fn cluster() -> Cluster {
    let mut cluster: Cluster = serde_norway::from_str(
        r#"
metadata: {name: c, namespace: db, uid: u1}
spec:
  version: 4.1.8
  datacenter: {name: dc, racks: [{name: a, members: 3}, {name: b, members: 1}]}
"#,
    )
    .unwrap();
    cluster.metadata.uid = Some("u1".into());
    cluster
}

fn pod(name: &str, ready: bool) -> CachedPod {
    cached(&full_pod(name, ready))
}

fn full_pod(name: &str, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("db".into()),
            labels: Some(labels::rack_labels("c", "dc", "a")),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

#[test]
fn members_are_gathered_from_owned_objects() {
    let cluster = cluster();
    let ctx = BuildContext::default();
    let rack_a = &cluster.spec.datacenter.racks[0];
    let sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        2,
        &ctx,
    );
    let mut leaving = resources::member_service(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        1,
        true,
    );
    leaving
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(contract::DECOMMISSIONED.into(), "false".into());
    let services = [
        resources::member_service(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            0,
            true,
        ),
        leaving,
    ];
    let pods = [pod("c-dc-a-0", true), pod("c-dc-a-1", false)];

    let observed = observe(&cluster, [&sts], &services, &pods, &Storage::default());
    assert!(observed.foreign.is_empty());
    let a = &observed.racks["a"];
    assert_eq!(a.replicas, Some(2));
    assert_eq!(
        a.members[&0],
        MemberObserved {
            service: Some(ServiceObserved::default()),
            pod_exists: true,
            pod_ready: true,
            ..MemberObserved::default()
        }
    );
    assert_eq!(
        a.members[&1],
        MemberObserved {
            service: Some(ServiceObserved {
                decommissioned: Some("false".into()),
                ..ServiceObserved::default()
            }),
            pod_exists: true,
            pod_ready: false,
            ..MemberObserved::default()
        }
    );
    // rack b has no StatefulSet yet
    assert_eq!(observed.racks["b"], RackObserved::default());
}

#[test]
fn objects_with_our_names_and_another_owner_are_foreign() {
    let cluster = cluster();
    let ctx = BuildContext::default();
    let rack_a = &cluster.spec.datacenter.racks[0];
    let mut sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        0,
        &ctx,
    );
    sts.metadata.owner_references = None;
    let mut service = resources::member_service(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        0,
        true,
    );
    service.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    let mut client = resources::client_service(&resources::ValidCluster::unchecked(&cluster));
    client.metadata.owner_references = None;
    // objects of other namespaces are ignored whatever their names
    let mut elsewhere = resources::client_service(&resources::ValidCluster::unchecked(&cluster));
    elsewhere.metadata.namespace = Some("other".into());
    elsewhere.metadata.owner_references = None;

    let observed = observe(
        &cluster,
        [&sts],
        &[service, client, elsewhere],
        &[],
        &Storage::default(),
    );
    assert_eq!(
        observed.foreign,
        vec![
            ForeignObject {
                kind: "StatefulSet".into(),
                name: "c-dc-a".into()
            },
            ForeignObject {
                kind: "Service".into(),
                name: "c-dc-a-0".into()
            },
            ForeignObject {
                kind: "Service".into(),
                name: "c-client".into()
            },
        ]
    );
}

#[test]
fn statefulsets_of_another_datacenter_name_are_reported() {
    let mut cluster = cluster();
    let ctx = BuildContext::default();
    let sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        3,
        &ctx,
    );
    cluster.spec.datacenter.name = "renamed".into();
    let observed = observe(&cluster, [&sts], &[], &[], &Storage::default());
    assert_eq!(observed.other_datacenters, vec!["dc".to_string()]);
    assert_eq!(observed.racks["a"].replicas, None);
}

#[test]
fn a_statefulset_stripped_for_the_cache_is_observed_as_in_full() {
    let cluster = cluster();
    let ctx = BuildContext::default();
    let mut sts = resources::hashed(resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        3,
        &ctx,
    ));
    sts.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
        observed_generation: Some(1),
        update_revision: Some("c-dc-a-1234".into()),
        ..Default::default()
    });
    sts.metadata.generation = Some(2);
    let mut stripped = sts.clone();
    crate::run::strip_statefulset(&mut stripped);
    let size = |s: &StatefulSet| serde_json::to_vec(s).unwrap().len();
    assert!(
        size(&stripped) * 3 < size(&sts),
        "{} of {} bytes kept",
        size(&stripped),
        size(&sts)
    );
    let (full, kept) = (
        observe(&cluster, [&sts], &[], &[], &Storage::default()),
        observe(&cluster, [&stripped], &[], &[], &Storage::default()),
    );
    assert_eq!(kept, full);
    assert!(full.racks["a"].template_version.is_some());
    assert!(full.racks["a"].status_stale);
    assert_eq!(
        resources::applied_hash(&stripped),
        resources::applied_hash(&sts)
    );
}

#[test]
fn members_stripped_for_the_caches_are_observed_as_in_full() {
    use crate::run::{strip_claim, strip_pod, strip_service, strip_volume};
    let mut cluster = cluster();
    let rack_a = &mut cluster.spec.datacenter.racks[0];
    rack_a.storage.volume_claim_templates =
        vec![serde_json::from_value(serde_json::json!({"metadata": {"name": "data"}})).unwrap()];
    let rack_a = &cluster.spec.datacenter.racks[0];
    let valid = resources::ValidCluster::unchecked(&cluster);
    let ctx = BuildContext::default();
    let sts = resources::statefulset_for_rack(&valid, rack_a, 2, &ctx);
    let mut services = Vec::new();
    let mut pods = Vec::new();
    let mut claims = Vec::new();
    let mut volumes = Vec::new();
    for (ordinal, node) in [(0, "n0"), (1, "gone")] {
        let member = format!("c-dc-a-{ordinal}");
        let mut service =
            resources::hashed(resources::member_service(&valid, rack_a, ordinal, true));
        service.metadata.resource_version = Some(format!("4{ordinal}"));
        service
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(contract::RESTARTING.into(), "t".into());
        let spec = service.spec.as_mut().unwrap();
        spec.cluster_ip = Some(format!("10.96.0.{ordinal}"));
        spec.cluster_ips = Some(vec![format!("10.96.0.{ordinal}")]);
        services.push(service);

        let mut pod = full_pod(&member, ordinal == 0);
        pod.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        pod.spec = sts.spec.clone().unwrap().template.spec;
        pods.push(pod);

        claims.push(
            serde_json::from_value::<PersistentVolumeClaim>(serde_json::json!({
                "metadata": {"name": format!("data-{member}"), "namespace": "db",
                    "labels": labels::rack_labels("c", "dc", "a"),
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                    "finalizers": ["kubernetes.io/pvc-protection"]},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                    "resources": {"requests": {"storage": "10Gi"}}, "volumeName": format!("pv{ordinal}")},
                "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}}
            }))
            .unwrap(),
        );
        volumes.push(
            serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolume>(
                serde_json::json!({
                    "metadata": {"name": format!("pv{ordinal}"), "labels": {"l": "v"},
                        "finalizers": ["kubernetes.io/pv-protection"]},
                    "spec": {"capacity": {"storage": "10Gi"}, "local": {"path": "/mnt/disks/x"},
                        "claimRef": {"namespace": "db", "name": format!("data-{member}")},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
                    "status": {"phase": "Bound"}
                }),
            )
            .unwrap(),
        );
    }
    let nodes = [node("n0")];
    let full_pods: Vec<CachedPod> = pods.iter().map(cached).collect();
    let full_volumes: Vec<CachedVolume> = volumes.iter().map(cached).collect();
    let full = observe(
        &cluster,
        [&sts],
        &services,
        &full_pods,
        &Storage {
            claims: claims.iter().collect(),
            volumes: full_volumes.iter().collect(),
            nodes: Some(nodes.iter().collect()),
        },
    );

    let mut kept_services = services.clone();
    kept_services.iter_mut().for_each(strip_service);
    let mut kept_pods = full_pods.clone();
    kept_pods.iter_mut().for_each(strip_pod);
    let mut kept_claims = claims.clone();
    kept_claims.iter_mut().for_each(strip_claim);
    let mut kept_volumes = full_volumes.clone();
    kept_volumes.iter_mut().for_each(strip_volume);
    let kept = observe(
        &cluster,
        [&sts],
        &kept_services,
        &kept_pods,
        &Storage {
            claims: kept_claims.iter().collect(),
            volumes: kept_volumes.iter().collect(),
            nodes: Some(nodes.iter().collect()),
        },
    );
    assert_eq!(kept, full);
    for (kept, full) in kept_services.iter().zip(&services) {
        assert_eq!(resources::applied_hash(kept), resources::applied_hash(full));
        assert!(owned_by(&kept.metadata, &cluster));
    }
    // What the comparison covers: every member field a kept object feeds.
    let (m0, m1) = (&full.racks["a"].members[&0], &full.racks["a"].members[&1]);
    assert!(m0.pod_ready && !m1.pod_ready);
    assert!(m0.pod_version.is_some() && m0.revision.is_none());
    let service = m0.service.as_ref().unwrap();
    assert_eq!(service.cluster_ip.as_deref(), Some("10.96.0.0"));
    assert_eq!(service.resource_version.as_deref(), Some("40"));
    assert_eq!(service.restarting.as_deref(), Some("t"));
    assert_eq!(m1.claims, vec!["data-c-dc-a-1".to_string()]);
    assert!(!m0.disk_lost && m1.disk_lost, "pv1's Node is gone");
}

#[test]
fn a_pod_being_deleted_is_not_ready() {
    let cluster = cluster();
    let ctx = BuildContext::default();
    let sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        1,
        &ctx,
    );
    let mut p = pod("c-dc-a-0", true);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    let observed = observe(&cluster, [&sts], &[], &[p], &Storage::default());
    assert!(!observed.racks["a"].members[&0].pod_ready);
}

fn claim(name: &str, volume: &str) -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "db", "labels": labels::rack_labels("c", "dc", "a")},
        "spec": {"volumeName": volume}
    }))
    .unwrap()
}

fn local_volume(name: &str, node: &str) -> CachedVolume {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"local": {"path": "/mnt/disks/x"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}
    }))
    .unwrap()
}

#[test]
fn a_volume_concerns_the_claim_it_is_bound_to_and_the_node_it_is_pinned_to() {
    let mut pv = local_volume("pv0", "n0");
    assert_eq!(claim_of_volume(&pv), None, "not bound");
    pv.spec.as_mut().unwrap().claim_ref = Some(
        serde_json::from_value(serde_json::json!({"namespace": "db", "name": "data-c-dc-a-0"}))
            .unwrap(),
    );
    assert_eq!(
        claim_of_volume(&pv),
        Some(("db".to_string(), "data-c-dc-a-0".to_string()))
    );
    assert!(volume_pinned_to(&pv, &node("n0")));
    assert!(!volume_pinned_to(&pv, &node("n1")));
    // A Node named otherwise whose hostname label is the pinned one.
    let mut renamed = node("n1");
    renamed.metadata.labels =
        Some([("kubernetes.io/hostname".to_string(), "n0".to_string())].into());
    assert!(volume_pinned_to(&pv, &renamed));
    let mut unpinned = pv.clone();
    unpinned.spec.as_mut().unwrap().node_affinity = None;
    assert!(!volume_pinned_to(&unpinned, &node("n0")));
}

#[test]
fn claims_and_lost_disks_are_found_per_member() {
    let mut cluster = cluster();
    cluster.spec.datacenter.racks[0]
        .storage
        .volume_claim_templates =
        vec![serde_json::from_value(serde_json::json!({"metadata": {"name": "data"}})).unwrap()];
    let ctx = BuildContext::default();
    let sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        3,
        &ctx,
    );
    let claims = [
        claim("data-c-dc-a-0", "pv0"),
        claim("data-c-dc-a-1", "pv1"),
        // another template's name, or another cluster's claim: not ours
        claim("logs-c-dc-a-0", "pv0"),
    ];
    let mut foreign = claim("data-c-dc-a-2", "pv2");
    foreign.metadata.labels = None;
    let volumes = [
        local_volume("pv0", "n0"),
        local_volume("pv1", "gone"),
        local_volume("pv2", "gone"),
    ];
    let nodes = [node("n0"), node("n1")];
    let mut storage = Storage {
        claims: claims.iter().chain([&foreign]).collect(),
        volumes: volumes.iter().collect(),
        nodes: Some(nodes.iter().collect()),
    };
    let observed = observe(&cluster, [&sts], &[], &[], &storage);
    let a = &observed.racks["a"];
    assert_eq!(a.members[&0].claims, vec!["data-c-dc-a-0".to_string()]);
    assert!(!a.members[&0].disk_lost);
    assert_eq!(a.members[&1].claims, vec!["data-c-dc-a-1".to_string()]);
    assert!(a.members[&1].disk_lost, "pv1's Node is gone");
    assert!(!a.members.contains_key(&2));

    // Nodes unknown, or an empty list: never a loss.
    storage.nodes = None;
    let observed = observe(&cluster, [&sts], &[], &[], &storage);
    assert!(!observed.racks["a"].members[&1].disk_lost);
    storage.nodes = Some(vec![]);
    let observed = observe(&cluster, [&sts], &[], &[], &storage);
    assert!(!observed.racks["a"].members[&1].disk_lost);
}

#[test]
fn the_sidecars_annotations_and_the_address_are_read() {
    let cluster = cluster();
    let ctx = BuildContext::default();
    let rack_a = &cluster.spec.datacenter.racks[0];
    let sts = resources::statefulset_for_rack(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        1,
        &ctx,
    );
    let mut service = resources::member_service(
        &resources::ValidCluster::unchecked(&cluster),
        rack_a,
        0,
        true,
    );
    service.metadata.resource_version = Some("42".into());
    service.metadata.annotations = Some(BTreeMap::from([
        (contract::DECOMMISSION_STARTED.to_string(), "t".to_string()),
        (
            contract::DECOMMISSION_REFUSED.to_string(),
            "Not enough live nodes".to_string(),
        ),
        (contract::REPLACE_REQUESTED.to_string(), "empty".to_string()),
    ]));
    service.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.7".into());
    let mut p = full_pod("c-dc-a-0", true);
    p.spec = Some(
        resources::statefulset_for_rack(
            &resources::ValidCluster::unchecked(&cluster),
            rack_a,
            1,
            &ctx,
        )
        .spec
        .unwrap()
        .template
        .spec
        .unwrap(),
    );
    let observed = observe(
        &cluster,
        [&sts],
        &[service],
        &[cached(&p)],
        &Storage::default(),
    );
    let m = &observed.racks["a"].members[&0];
    assert_eq!(
        m.service,
        Some(ServiceObserved {
            decommission_started: true,
            decommission_refused: Some("Not enough live nodes".into()),
            replace_requested: Some("empty".into()),
            cluster_ip: Some("10.96.0.7".into()),
            resource_version: Some("42".into()),
            ..ServiceObserved::default()
        })
    );
    assert_eq!(m.pod_major, Some(4));
}

fn config_map(namespace: &str, name: &str, key: &str, text: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_string(), text.to_string())])),
        ..ConfigMap::default()
    }
}

/// From a rack's overrides ConfigMap to the decision and the status,
/// once per refused family: the decision refuses (no member starts with
/// it), the rack's `OverridesRefused` condition and the Degraded
/// condition (whose message becomes the Warning Event) name the key, the
/// ConfigMap and why; the same ConfigMap without the key refuses nothing.
#[test]
fn each_refused_family_is_reported_naming_key_and_config_map() {
    use crate::decide::{Action, Refusal, decide};
    use crate::status::{Outcome, compute_status};
    let mut cluster = cluster();
    cluster.spec.datacenter.racks[0].config_map_name = Some("tuning".into());
    // 3.11: the two racks of the fixture are no concern of its token
    // allocation, so fixed overrides let the racks go on.
    cluster.spec.version = "3.11.6".into();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(10).unwrap(),
    );
    for (family, key, value) in [
        ("bootstrap", "auto_bootstrap", "false"),
        ("ports", "storage_port", "7001"),
        ("ports", "ssl_storage_port", "7002"),
        ("ports", "native_transport_port", "9043"),
        ("directories", "data_file_directories", "[/tmp/data]"),
        ("directories", "commitlog_directory", "/tmp/commitlog"),
        ("directories", "hints_directory", "/tmp/hints"),
        ("directories", "saved_caches_directory", "/tmp/caches"),
        ("directories", "cdc_raw_directory", "/tmp/cdc"),
        ("addresses", "listen_address", "10.0.0.1"),
        ("addresses", "broadcast_address", "10.0.0.1"),
        ("addresses", "rpc_address", "0.0.0.0"),
        ("addresses", "broadcast_rpc_address", "10.0.0.1"),
        (
            "seed_provider",
            "seed_provider",
            "[{class_name: org.apache.cassandra.locator.SimpleSeedProvider, parameters: [{seeds: 10.0.0.9}]}]",
        ),
        ("endpoint_snitch", "endpoint_snitch", "SimpleSnitch"),
        ("cluster_name", "cluster_name", "other"),
    ] {
        let fragment = format!("concurrent_reads: 16\n{key}: {value}\n");
        let maps = [
            config_map("db", "tuning", "cassandra.yaml", &fragment),
            // Same name, another namespace: not this cluster's.
            config_map(
                "other",
                "tuning",
                "cassandra.yaml",
                "auto_bootstrap: true\n",
            ),
        ];
        let mut observed = observe(&cluster, [], [], [], &Storage::default());
        observed.refused_overrides = refused_overrides(&cluster, &maps);
        let action = decide(&cluster.spec, &observed);
        assert!(
            matches!(&action, Action::Refuse(Refusal::OverridesRefused { rack, .. }) if rack == "a"),
            "{family} {key}: {action:?}"
        );
        let status = compute_status(&cluster, &observed, &Outcome::Decided(action), &now);
        let reason = crds::overrides::refused(key).unwrap().reason;
        let named = format!(
            "ConfigMap \"tuning\": key cassandra.yaml sets {key}, which the operator refuses: {reason}"
        );
        let rack = &status.racks["a"];
        let condition = rack
            .conditions
            .iter()
            .find(|c| c.type_ == crds::v1alpha1::RACK_CONDITION_OVERRIDES_REFUSED)
            .unwrap_or_else(|| panic!("{family} {key}: no condition in {rack:?}"));
        assert_eq!(condition.message.as_deref(), Some(named.as_str()));
        let degraded = status
            .conditions
            .iter()
            .find(|c| c.type_ == crds::v1alpha1::CONDITION_DEGRADED)
            .unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "OverridesRefused"),
            "{family} {key}"
        );
        assert!(degraded.message.contains(&named), "{}", degraded.message);
        assert!(!status.racks.contains_key("b"), "rack b was not refused");

        // The ConfigMap without the key: nothing refused, the rack goes on.
        let fixed = [config_map(
            "db",
            "tuning",
            "cassandra.yaml",
            "concurrent_reads: 16\n",
        )];
        observed.refused_overrides = refused_overrides(&cluster, &fixed);
        assert!(observed.refused_overrides.is_empty());
        assert!(!matches!(
            decide(&cluster.spec, &observed),
            Action::Refuse(_)
        ));
    }
}

#[test]
fn only_the_key_of_the_mode_and_the_named_config_map_count() {
    let mut cluster = cluster();
    cluster.spec.datacenter.racks[1].config_map_name = Some("tuning-b".into());
    let maps = [
        // Rack a names none: its ConfigMap is not read.
        config_map("db", "tuning", "cassandra.yaml", "auto_bootstrap: false\n"),
        // Rack b's, at a key the sidecar does not read in cassandra mode.
        config_map("db", "tuning-b", "scylla.yaml", "auto_bootstrap: false\n"),
    ];
    assert!(refused_overrides(&cluster, &maps).is_empty());
    assert!(!references_config_map(&cluster, &maps[0]));
    assert!(references_config_map(&cluster, &maps[1]));
    cluster.spec.mode = crds::v1alpha1::ClusterMode::Scylla;
    let refused = refused_overrides(&cluster, &maps);
    assert_eq!(refused["b"].file, "scylla.yaml");
    assert_eq!(refused["b"].keys[0].key, "auto_bootstrap");
}

/// An upgrade from 3.11 with overrides that set what 4.0 removed
/// (`start_rpc`, Thrift's): the 3.11 cluster is refused nothing, and the
/// change of `spec.version` to 4.1 is refused as a whole, before any
/// StatefulSet changes, since no 4.1 member would start on that file.
#[test]
fn overrides_are_judged_for_the_release_the_spec_asks_for() {
    use crate::decide::{Action, Refusal, decide};
    let mut cluster = cluster();
    cluster.spec.datacenter.racks[0].config_map_name = Some("tuning".into());
    let maps = [config_map(
        "db",
        "tuning",
        "cassandra.yaml",
        "start_rpc: false\nconcurrent_reads: 16\n",
    )];
    cluster.spec.version = "3.11.19".into();
    assert!(refused_overrides(&cluster, &maps).is_empty());
    cluster.spec.version = "4.1.8".into();
    let refused = refused_overrides(&cluster, &maps);
    assert_eq!(refused["a"].keys.len(), 1, "{refused:?}");
    assert_eq!(refused["a"].keys[0].key, "start_rpc");
    assert!(refused["a"].keys[0].reason.contains("Thrift"));
    let mut observed = observe(&cluster, [], [], [], &Storage::default());
    observed.refused_overrides = refused;
    assert!(matches!(
        decide(&cluster.spec, &observed),
        Action::Refuse(Refusal::OverridesRefused { .. })
    ));
    // ScyllaDB kept 3.x's names: nothing removed there.
    cluster.spec.mode = crds::v1alpha1::ClusterMode::Scylla;
    let scylla = [config_map(
        "db",
        "tuning",
        "scylla.yaml",
        "start_rpc: false\n",
    )];
    assert!(refused_overrides(&cluster, &scylla).is_empty());
}

/// A Cluster whose clients must log in refuses overrides that set the
/// authentication settings the sidecar renders for it (the sidecar refuses
/// the same file); another Cluster may set them.
#[test]
fn an_authenticated_clusters_overrides_may_not_set_the_authenticator() {
    use crds::v1alpha1::{AuthenticationSpec, SecuritySpec};
    let mut cluster = cluster();
    cluster.spec.datacenter.racks[0].config_map_name = Some("tuning".into());
    let maps = [config_map(
        "db",
        "tuning",
        "cassandra.yaml",
        "authenticator: AllowAllAuthenticator\n",
    )];
    assert!(refused_overrides(&cluster, &maps).is_empty());
    cluster.spec.security = Some(SecuritySpec {
        authentication: Some(AuthenticationSpec {
            enabled: true,
            superuser_secret_name: None,
        }),
        ..SecuritySpec::default()
    });
    let refused = refused_overrides(&cluster, &maps);
    assert_eq!(refused["a"].keys.len(), 1, "{refused:?}");
    assert_eq!(refused["a"].keys[0].key, "authenticator");
}

#[test]
fn a_restart_is_overdue_when_not_back_within_the_bound() {
    let recorded = "2026-01-01T00:00:00Z";
    let t = recorded
        .parse::<k8s_openapi::jiff::Timestamp>()
        .expect("a time")
        .as_second();
    let observed = |revision: Option<&str>, created: Option<i64>, ready: bool| {
        let member = MemberObserved {
            service: Some(ServiceObserved {
                restarting: Some(recorded.into()),
                ..ServiceObserved::default()
            }),
            pod_exists: created.is_some(),
            pod_ready: ready,
            pod_created: created,
            revision: revision.map(str::to_string),
            ..MemberObserved::default()
        };
        let rack = RackObserved {
            replicas: Some(1),
            update_revision: Some("new".into()),
            members: [(0, member)].into(),
            ..RackObserved::default()
        };
        Observed {
            racks: [("a".to_string(), rack)].into(),
            ..Observed::default()
        }
    };
    let overdue = |mut o: Observed, now: i64| {
        overdue_restarts(&mut o, now, 60);
        o.racks["a"].members[&0].restart_overdue
    };
    // no Pod yet: counted from the record
    assert!(!overdue(observed(None, None, false), t + 60));
    assert!(overdue(observed(None, None, false), t + 61));
    // on the new template: counted from its Pod's creation (an eviction
    // the budget held back does not count)
    assert!(!overdue(
        observed(Some("new"), Some(t + 100), false),
        t + 150
    ));
    assert!(overdue(
        observed(Some("new"), Some(t + 100), false),
        t + 161
    ));
    // still the old Pod: from the record
    assert!(overdue(observed(Some("old"), Some(t - 500), false), t + 61));
    // Ready is not back by itself (the ring must see it up too, which
    // the decision judges): the bound counts on
    assert!(!overdue(observed(Some("new"), Some(t), true), t + 60));
    assert!(overdue(observed(Some("new"), Some(t), true), t + 61));
}

#[test]
fn a_statefulset_of_ours_with_another_applied_hash_is_outdated() {
    let cluster = cluster();
    let valid = resources::ValidCluster::unchecked(&cluster);
    let rack = &cluster.spec.datacenter.racks[0];
    let ctx = BuildContext::default();
    let desired: BTreeMap<String, StatefulSet> = [(
        rack.name.clone(),
        resources::applied_statefulset(&valid, rack, &ctx),
    )]
    .into();
    let ours = resources::statefulset_for_rack(&valid, rack, 3, &ctx);
    let mut changed = ours.clone();
    changed
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(resources::APPLIED_HASH.into(), "another".into());
    let mut foreign = changed.clone();
    foreign.metadata.owner_references = None;
    for (sts, outdated) in [(&ours, false), (&changed, true), (&foreign, false)] {
        let mut observed = observe(&cluster, [sts], &[], &[], &Storage::default());
        outdated_statefulsets(&mut observed, &cluster, [sts], &desired);
        assert_eq!(observed.racks["a"].statefulset_outdated, outdated);
    }
}

/// The maintenance records on a member Service are read as the contract
/// writes them; an unreadable request or count is none (a junk request is
/// no request: nothing holds on it), and the clock and the Cluster's
/// creation are taken at observe time.
#[test]
fn maintenance_records_are_read_from_the_member_service() {
    use crds::contract::maintenance::{self, Operation, Request};
    let request = Request {
        id: "r1".into(),
        operation: Operation::Repair,
        requested_at: "2026-11-27T10:00:00Z".into(),
        cycle: Some("2026-11-22T02:00:00Z".into()),
    };
    let service = |annotations: &[(&str, &str)]| Service {
        metadata: ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Service::default()
    };
    let read = service_observed(&service(&[
        (maintenance::CLEANUP_DUE, "2026-11-27T09:00:00Z"),
        (maintenance::REQUEST, &request.to_annotation()),
        (
            maintenance::RECORD,
            r#"{"request":"r1","operation":"repair","state":"running","rangesDone":3,"rangesTotal":48,"startedAt":"2026-11-27T10:00:01Z","at":"2026-11-27T10:05:00Z"}"#,
        ),
        (
            maintenance::REPAIRED,
            r#"{"cycle":"2026-11-15T02:00:00Z","keyspaces":{"ks":"2026-11-15T05:00:00Z"},"finishedAt":"2026-11-15T05:00:00Z"}"#,
        ),
        (maintenance::OLD_FORMAT_SSTABLES, "7"),
    ]));
    assert_eq!(read.cleanup_due.as_deref(), Some("2026-11-27T09:00:00Z"));
    assert_eq!(read.maintenance_request, Some(request));
    let record = read.maintenance_record.expect("a record");
    assert_eq!(
        (record.ranges_done, record.ranges_total),
        (Some(3), Some(48))
    );
    assert_eq!(
        read.repaired.expect("a repaired record").cycle,
        "2026-11-15T02:00:00Z"
    );
    assert_eq!(read.old_format_sstables, Some(7));
    let junk = service_observed(&service(&[
        (maintenance::REQUEST, "cleanup please"),
        (maintenance::OLD_FORMAT_SSTABLES, "many"),
    ]));
    assert_eq!(
        (junk.maintenance_request, junk.old_format_sstables),
        (None, None)
    );

    let mut cluster = cluster();
    cluster.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-01T12:00:00Z".parse().unwrap(),
        ));
    let observed = observe_cached(&cluster, &Cached::default(), 1_800_000_000, 600);
    assert_eq!(observed.now, 1_800_000_000);
    assert_eq!(observed.created, Some(1_793_534_400));
}
