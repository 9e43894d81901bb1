//! Exact assertions on every builder: each object is compared whole, as JSON,
//! with what the API server will receive.

use serde_json::{Value, json};

use super::*;
// Named, not only through `super::*`: the tests read quantities whatever
// the builders import.
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn cluster(yaml: &str) -> Cluster {
    let mut cluster: Cluster = serde_norway::from_str(yaml).unwrap();
    cluster.metadata.uid = Some("uid-1".to_string());
    cluster
}

fn thesis() -> Cluster {
    cluster(
        r#"
apiVersion: cassandra.rook.io/v1alpha1
kind: Cluster
metadata: {name: cassandra, namespace: db}
spec:
  version: 3.11.6
  datacenter:
    name: europe-west1
    racks:
      - name: europe-west1-b
        members: 3
        configMapName: overrides
        storage:
          volumeClaimTemplates:
            - metadata: {name: data}
              spec:
                storageClassName: local-disks
                accessModes: [ReadWriteOnce]
                resources: {requests: {storage: 10Gi}}
        resources:
          requests: {cpu: 2, memory: 8Gi}
          limits: {cpu: 2, memory: 8Gi}
        annotations: {rack/note: b}
        placement:
          tolerations: [{key: dedicated, operator: Equal, value: cassandra, effect: NoSchedule}]
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [europe-west1-b]}]
  annotations: {cluster/note: a, rack/note: overridden}
"#,
    )
}

fn owner() -> Value {
    json!([{
        "apiVersion": "cassandra.rook.io/v1alpha1",
        "kind": "Cluster",
        "name": "cassandra",
        "uid": "uid-1",
        "controller": true,
        "blockOwnerDeletion": true
    }])
}

fn rack_labels() -> Value {
    json!({
        "app": "rook-cassandra",
        "cassandra.rook.io/cluster": "cassandra",
        "cassandra.rook.io/datacenter": "europe-west1",
        "cassandra.rook.io/rack": "europe-west1-b"
    })
}

fn to_json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
}

fn member_ports() -> Value {
    json!([
        {"name": "intra-node", "port": 7000, "protocol": "TCP", "targetPort": 7000},
        {"name": "tls-intra-node", "port": 7001, "protocol": "TCP", "targetPort": 7001},
        {"name": "cql", "port": 9042, "protocol": "TCP", "targetPort": 9042},
        {"name": "cql-ssl", "port": 9142, "protocol": "TCP", "targetPort": 9142},
        {"name": "thrift", "port": 9160, "protocol": "TCP", "targetPort": 9160}
    ])
}

/// A container's part of Pod Security "restricted", and a read-only root
/// filesystem (what is written goes to volumes).
fn restricted() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
           "readOnlyRootFilesystem": true})
}

#[test]
fn statefulset_of_the_thesis_rack() {
    let cluster = thesis();
    let rack = &cluster.spec.datacenter.racks[0];
    let sts = statefulset_for_rack(
        &ValidCluster::unchecked(&cluster),
        rack,
        0,
        &BuildContext::default(),
    );
    let env_field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let env_resource = |name: &str, res: &str| json!({"name": name, "valueFrom": {"resourceFieldRef": {"resource": res}}});
    let expected = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "cassandra-europe-west1-europe-west1-b",
            "namespace": "db",
            "labels": rack_labels(),
            "ownerReferences": owner()
        },
        "spec": {
            "replicas": 0,
            "serviceName": "cassandra-client",
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": rack_labels()},
            "template": {
                "metadata": {
                    "labels": rack_labels(),
                    "annotations": {"cluster/note": "a", "rack/note": "b"}
                },
                "spec": {
                    "serviceAccountName": "cassandra-member",
                    "terminationGracePeriodSeconds": 1800,
                    "securityContext": {
                        "runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": true, "fsGroup": 999,
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "initContainers": [{
                        "name": "install",
                        "image": "ghcr.io/cassandra-rook/cassandra-operator:0.1.0",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/usr/local/bin/cassandra-operator", "install", "--target", "/mnt/shared"],
                        "volumeMounts": [{"name": "shared", "mountPath": "/mnt/shared"}],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": "100m", "memory": "128Mi"}
                        },
                        "securityContext": restricted()
                    }],
                    "containers": [{
                        "name": "cassandra",
                        "image": "cassandra:3.11.6",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/mnt/shared/cassandra-operator", "sidecar"],
                        "env": [
                            env_field("POD_NAME", "metadata.name"),
                            env_field("POD_NAMESPACE", "metadata.namespace"),
                            env_field("POD_IP", "status.podIP"),
                            env_field("POD_CLUSTER", "metadata.labels['cassandra.rook.io/cluster']"),
                            env_field("POD_DATACENTER", "metadata.labels['cassandra.rook.io/datacenter']"),
                            env_field("POD_RACK", "metadata.labels['cassandra.rook.io/rack']"),
                            env_resource("CPU_LIMIT", "limits.cpu"),
                            env_resource("MEMORY_LIMIT", "limits.memory")
                        ],
                        "ports": [
                            {"name": "intra-node", "containerPort": 7000},
                            {"name": "tls-intra-node", "containerPort": 7001},
                            {"name": "cql", "containerPort": 9042},
                            {"name": "cql-ssl", "containerPort": 9142},
                            {"name": "thrift", "containerPort": 9160},
                            {"name": "sidecar", "containerPort": 8080}
                        ],
                        "resources": {
                            "requests": {"cpu": "2", "memory": "8Gi"},
                            "limits": {"cpu": "2", "memory": "8Gi"}
                        },
                        "volumeMounts": [
                            {"name": "shared", "mountPath": "/mnt/shared"},
                            {"name": "logs", "mountPath": "/var/log/cassandra"},
                            {"name": "tmp", "mountPath": "/tmp"},
                            {"name": "data", "mountPath": "/var/lib/cassandra"},
                            {"name": "overrides", "mountPath": "/mnt/overrides", "readOnly": true}
                        ],
                        "startupProbe": {
                            "httpGet": {"path": "/healthz", "port": 8080},
                            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 60
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": 8080},
                            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6
                        },
                        "readinessProbe": {
                            "httpGet": {"path": "/readyz", "port": 8080},
                            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3
                        },
                        "lifecycle": {"preStop": {"exec": {"command": ["/mnt/shared/cassandra-operator", "nodetool", "drain"]}}},
                        "securityContext": restricted()
                    }],
                    "volumes": [
                        {"name": "shared", "emptyDir": {}},
                        {"name": "logs", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "overrides", "configMap": {"name": "overrides", "optional": false}}
                    ],
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["europe-west1-b"]}]}
                        ]}}
                    },
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cassandra", "effect": "NoSchedule"}]
                }
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {
                    "storageClassName": "local-disks",
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}}
                }
            }]
        }
    });
    // The applied hash is checked by the next test: compare the rest.
    let mut built = to_json(&sts);
    let hash = built["metadata"]
        .as_object_mut()
        .and_then(|m| m.remove("annotations"))
        .expect("the applied hash");
    assert!(hash[APPLIED_HASH].is_string());
    assert_eq!(built, expected);
}

#[test]
fn the_applied_statefulset_leaves_replicas_out_and_hashes_itself() {
    let cluster = thesis();
    let rack = &cluster.spec.datacenter.racks[0];
    let ctx = BuildContext::default();
    let applied = applied_statefulset(&ValidCluster::unchecked(&cluster), rack, &ctx);
    assert_eq!(applied.spec.as_ref().and_then(|s| s.replicas), None);
    // The hash is of the object without it: the same spec, the same hash.
    let mut without = applied.clone();
    let hash = without
        .metadata
        .annotations
        .as_mut()
        .and_then(|a| a.remove(APPLIED_HASH))
        .expect("the applied hash");
    without.metadata.annotations = None;
    assert_eq!(
        hash,
        stable_hash(&serde_json::to_vec(&without).expect("serializes"))
    );
    // The created StatefulSet carries the same hash: no apply right after
    // a create.
    let created = statefulset_for_rack(&ValidCluster::unchecked(&cluster), rack, 2, &ctx);
    assert_eq!(applied_hash(&created), Some(hash.as_str()));
    assert_eq!(applied_hash(&applied), Some(hash.as_str()));
}

/// Every trigger of a roll changes the Pod template (and so the hash), and
/// only the template: an unchanged spec builds the identical object.
#[test]
fn each_roll_trigger_changes_the_template() {
    let base = thesis();
    let ctx = BuildContext::default();
    let template = |cluster: &Cluster, ctx: &BuildContext| {
        let sts = applied_statefulset(
            &ValidCluster::unchecked(cluster),
            &cluster.spec.datacenter.racks[0],
            ctx,
        );
        (
            applied_hash(&sts).map(str::to_string),
            to_json(&sts.spec.expect("a spec").template),
        )
    };
    let (base_hash, base_template) = template(&base, &ctx);
    assert_eq!(template(&base, &ctx).0, base_hash, "deterministic");
    let mut triggers: Vec<(&str, Cluster, BuildContext)> = Vec::new();
    let mut c = base.clone();
    c.spec.version = "3.11.7".into();
    triggers.push(("version", c, ctx.clone()));
    let mut c = base.clone();
    c.spec.datacenter.racks[0].resources.limits = None;
    triggers.push(("resources", c, ctx.clone()));
    let mut c = base.clone();
    c.spec.datacenter.racks[0].annotations = None;
    triggers.push(("annotations", c, ctx.clone()));
    let mut c = base.clone();
    c.spec.datacenter.racks[0].placement = None;
    triggers.push(("placement", c, ctx.clone()));
    let mut c = base.clone();
    c.spec.datacenter.racks[0].jmx_exporter_config_map_name = Some("exporter".into());
    triggers.push(("jmxExporterConfigMapName", c, ctx.clone()));
    let mut c = base.clone();
    c.spec.sidecar_image = Some(crds::v1alpha1::ImageSpec {
        version: "v0.2.0".into(),
        repository: "registry.example/cassandra-operator".into(),
    });
    triggers.push(("sidecarImage", c, ctx.clone()));
    let mut c = base.clone();
    c.metadata.annotations = Some(
        [(
            crds::labels::RESTARTED_AT.to_string(),
            "2026-11-24T08:00:00Z".to_string(),
        )]
        .into(),
    );
    triggers.push(("restartedAt", c, ctx.clone()));
    let mut hashed = ctx.clone();
    hashed
        .config_map_hashes
        .insert("overrides".into(), "0123456789abcdef".into());
    triggers.push(("overrides content", base.clone(), hashed.clone()));
    let mut other = ctx.clone();
    other
        .config_map_hashes
        .insert("overrides".into(), "fedcba9876543210".into());
    assert_ne!(
        template(&base, &hashed).1,
        template(&base, &other).1,
        "another content, another template"
    );
    for (trigger, cluster, ctx) in triggers {
        let (hash, built) = template(&cluster, &ctx);
        assert_ne!(built, base_template, "{trigger} changes the Pod template");
        assert_ne!(hash, base_hash, "{trigger} changes the applied hash");
    }
}

#[test]
fn a_config_map_hash_is_of_its_content() {
    let cm = |value: &str| k8s_openapi::api::core::v1::ConfigMap {
        data: Some([("cassandra.yaml".to_string(), value.to_string())].into()),
        ..Default::default()
    };
    assert_eq!(config_map_hash(&cm("a: 1")), config_map_hash(&cm("a: 1")));
    assert_ne!(config_map_hash(&cm("a: 1")), config_map_hash(&cm("a: 2")));
}

#[test]
fn scylla_rack_without_storage_or_placement() {
    let cluster = cluster(
        r#"
metadata: {name: sc, namespace: db}
spec:
  version: "6.2"
  mode: scylla
  sidecarImage: {repository: example.com/op, version: "2.0"}
  datacenter: {name: dc, racks: [{name: r, members: 1}]}
"#,
    );
    let sts = to_json(&statefulset_for_rack(
        &ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        2,
        &BuildContext::default(),
    ));
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 2);
    assert!(spec.get("volumeClaimTemplates").is_none());
    let pod = &spec["template"]["spec"];
    assert!(pod.get("securityContext").is_none());
    assert!(pod.get("affinity").is_none());
    assert!(spec["template"]["metadata"].get("annotations").is_none());
    assert_eq!(pod["initContainers"][0]["image"], "example.com/op:2.0");
    assert_eq!(pod["containers"][0]["name"], "scylla");
    assert_eq!(pod["containers"][0]["image"], "scylladb/scylla:6.2");
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{"name": "shared", "mountPath": "/mnt/shared"}])
    );
}

#[test]
fn member_services_of_seeds_and_others() {
    let cluster = thesis();
    let rack = &cluster.spec.datacenter.racks[0];
    let mut seed_labels = rack_labels();
    seed_labels["cassandra.rook.io/seed"] = json!("");
    assert_eq!(
        to_json(&member_service(
            &ValidCluster::unchecked(&cluster),
            rack,
            0,
            true
        )),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "cassandra-europe-west1-europe-west1-b-0",
                "namespace": "db",
                "labels": seed_labels,
                "ownerReferences": owner()
            },
            "spec": {
                "type": "ClusterIP",
                "selector": {"statefulset.kubernetes.io/pod-name": "cassandra-europe-west1-europe-west1-b-0"},
                "publishNotReadyAddresses": true,
                "ports": member_ports()
            }
        })
    );
    let other = to_json(&member_service(
        &ValidCluster::unchecked(&cluster),
        rack,
        2,
        false,
    ));
    assert_eq!(
        other["metadata"]["name"],
        "cassandra-europe-west1-europe-west1-b-2"
    );
    assert_eq!(other["metadata"]["labels"], rack_labels());
}

#[test]
fn client_service_is_headless_over_ready_members() {
    let cluster = thesis();
    assert_eq!(
        to_json(&client_service(&ValidCluster::unchecked(&cluster))),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "cassandra-client",
                "namespace": "db",
                "labels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"},
                "ownerReferences": owner()
            },
            "spec": {
                "clusterIP": "None",
                "selector": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"},
                "ports": [
                    {"name": "cql", "port": 9042, "protocol": "TCP", "targetPort": 9042},
                    {"name": "cql-ssl", "port": 9142, "protocol": "TCP", "targetPort": 9142},
                    {"name": "thrift", "port": 9160, "protocol": "TCP", "targetPort": 9160}
                ]
            }
        })
    );
}

/// One member down at a time; none while data moves. The unhealthy-Pod
/// policy is the one under which a held budget protects the streaming
/// member itself.
#[test]
fn pdb_allows_one_member_down_and_none_while_data_moves() {
    let cluster = thesis();
    for (hold, max_unavailable) in [(false, 1), (true, 0)] {
        assert_eq!(
            to_json(&pod_disruption_budget(
                &ValidCluster::unchecked(&cluster),
                hold
            )),
            json!({
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {
                    "name": "cassandra",
                    "namespace": "db",
                    "labels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"},
                    "ownerReferences": owner()
                },
                "spec": {
                    "maxUnavailable": max_unavailable,
                    "selector": {"matchLabels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"}},
                    "unhealthyPodEvictionPolicy": "IfHealthyBudget"
                }
            })
        );
    }
}

#[test]
fn member_rbac_is_least_privilege() {
    let cluster = thesis();
    let labels = json!({"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"});
    let meta = json!({"name": "cassandra-member", "namespace": "db", "labels": labels, "ownerReferences": owner()});
    assert_eq!(
        to_json(&member_service_account(&ValidCluster::unchecked(&cluster))),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    );
    assert_eq!(
        to_json(&member_role(&ValidCluster::unchecked(&cluster))),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "patch"]},
                {"apiGroups": ["cassandra.rook.io"], "resources": ["clusters"], "resourceNames": ["cassandra"], "verbs": ["get"]}
            ]
        })
    );
    assert_eq!(
        to_json(&member_role_binding(&ValidCluster::unchecked(&cluster))),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cassandra-member"},
            "subjects": [{"kind": "ServiceAccount", "name": "cassandra-member", "namespace": "db"}]
        })
    );
}

fn role(rules: Value) -> Role {
    serde_json::from_value(
        json!({"metadata": {"name": "cassandra-member", "namespace": "db"}, "rules": rules}),
    )
    .unwrap()
}

#[test]
fn a_provided_member_role_is_used_when_it_grants_what_members_need() {
    let needed = member_role(&ValidCluster::unchecked(&thesis()));
    // Rook's example Role: broader (any Cluster's name), and so enough.
    let rook = role(json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "patch", "watch"]},
        {"apiGroups": ["cassandra.rook.io"], "resources": ["clusters"], "verbs": ["get"]}
    ]));
    assert_eq!(missing_grants(&rook, &needed), Vec::<String>::new());
    let wildcard = role(json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]));
    assert_eq!(missing_grants(&wildcard, &needed), Vec::<String>::new());
}

#[test]
fn a_provided_member_role_that_lacks_a_grant_is_named() {
    let needed = member_role(&ValidCluster::unchecked(&thesis()));
    let short = role(json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
        // narrowed to another Cluster's name: does not cover this one
        {"apiGroups": ["cassandra.rook.io"], "resources": ["clusters"], "resourceNames": ["other"], "verbs": ["get"]}
    ]));
    assert_eq!(
        missing_grants(&short, &needed),
        vec!["patch services", "get clusters.cassandra.rook.io"]
    );
    // a rule narrowed to names cannot cover a need for any name
    let named = role(json!([
        {"apiGroups": [""], "resources": ["services"], "resourceNames": ["cassandra-client"], "verbs": ["*"]},
        {"apiGroups": ["cassandra.rook.io"], "resources": ["clusters"], "resourceNames": ["cassandra"], "verbs": ["get"]}
    ]));
    assert_eq!(
        missing_grants(&named, &needed),
        vec![
            "get services",
            "list services",
            "watch services",
            "patch services"
        ]
    );
}

#[test]
fn a_provided_member_role_binding_must_bind_the_members_account_to_the_role() {
    let needed = member_role_binding(&ValidCluster::unchecked(&thesis()));
    let binding = |role: &str, account: &str, namespace: Option<&str>| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": "cassandra-member", "namespace": "db"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        }))
        .unwrap()
    };
    assert!(binds_the_same(
        &binding("cassandra-member", "cassandra-member", Some("db")),
        &needed
    ));
    // a subject without a namespace is in the binding's own
    assert!(binds_the_same(
        &binding("cassandra-member", "cassandra-member", None),
        &needed
    ));
    assert!(!binds_the_same(
        &binding("edit", "cassandra-member", Some("db")),
        &needed
    ));
    assert!(!binds_the_same(
        &binding("cassandra-member", "default", Some("db")),
        &needed
    ));
    assert!(!binds_the_same(
        &binding("cassandra-member", "cassandra-member", Some("other")),
        &needed
    ));
}

#[test]
fn a_claim_template_without_access_modes_gets_read_write_once() {
    let cluster = cluster(
        r#"
metadata: {name: c, namespace: db}
spec:
  version: 4.1.5
  datacenter:
    name: dc
    racks:
      - name: r
        members: 1
        storage:
          volumeClaimTemplates:
            - metadata: {name: data}
              spec: {storageClassName: standard, resources: {requests: {storage: 1Gi}}}
"#,
    );
    let sts = to_json(&statefulset_for_rack(
        &ValidCluster::unchecked(&cluster),
        &cluster.spec.datacenter.racks[0],
        1,
        &BuildContext::default(),
    ));
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"],
        json!({"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}})
    );
}

/// The ports of a built Service, as `name=port`.
fn service_ports(service: &Service) -> Vec<String> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| format!("{}={}", p.name.as_deref().unwrap_or_default(), p.port))
        .collect()
}

/// The ports of the database container of a built rack, as `name=port`.
fn container_ports(sts: &StatefulSet) -> Vec<String> {
    let pod = sts
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a Pod template");
    pod.containers[0]
        .ports
        .iter()
        .flatten()
        .map(|p| {
            format!(
                "{}={}",
                p.name.as_deref().unwrap_or_default(),
                p.container_port
            )
        })
        .collect()
}

fn one_rack(mode: &str, version: &str) -> Cluster {
    cluster(&format!(
        r#"
metadata: {{name: c, namespace: db}}
spec:
  version: "{version}"
  mode: {mode}
  datacenter:
    name: dc
    racks:
      - name: r
        members: 3
        storage:
          volumeClaimTemplates:
            - metadata: {{name: data}}
              spec: {{resources: {{requests: {{storage: 1Gi}}}}}}
        resources:
          requests: {{cpu: 2, memory: 8Gi}}
          limits: {{cpu: 2, memory: 8Gi}}
"#
    ))
}

/// The ports of the member Service, the client Service and the database
/// container, for one Cluster.
fn ports_of(cluster: &Cluster) -> (Vec<String>, Vec<String>, Vec<String>) {
    let valid = ValidCluster::unchecked(cluster);
    let rack = &cluster.spec.datacenter.racks[0];
    (
        service_ports(&member_service(&valid, rack, 0, false)),
        service_ports(&client_service(&valid)),
        container_ports(&statefulset_for_rack(
            &valid,
            rack,
            1,
            &BuildContext::default(),
        )),
    )
}

/// Cassandra 4.0 and later: no Thrift port (4.0 removed Thrift: 4.1 and 5.0
/// refuse a cassandra.yaml with `rpc_port`, so nothing listens on 9160) and
/// no JMX port (JMX listens on the Pod's loopback, `LOCAL_JMX=yes`): on a
/// real cluster the Services forwarded both to nothing, and advertised a
/// JMX endpoint to whoever reads the Service. 3.11 keeps Thrift (off by
/// default, but an override may start it, and its clients then come to the
/// member Service's ClusterIP); JMX goes there too. A tag that names no
/// version is taken as current.
#[test]
fn cassandra_member_ports_are_those_the_release_listens_on() {
    let internode = ["intra-node=7000", "tls-intra-node=7001"];
    let cql = ["cql=9042", "cql-ssl=9142"];
    for version in ["4.1.8", "5.0.3", "4.0", "latest"] {
        let (member, client, container) = ports_of(&one_rack("cassandra", version));
        assert_eq!(member, [&internode[..], &cql[..]].concat(), "{version}");
        assert_eq!(client, cql, "{version}");
        assert_eq!(
            container,
            [&internode[..], &cql[..], &["sidecar=8080"]].concat(),
            "{version}"
        );
    }
    let (member, client, container) = ports_of(&one_rack("cassandra", "3.11.17"));
    assert_eq!(
        member,
        [&internode[..], &cql[..], &["thrift=9160"]].concat()
    );
    assert_eq!(client, [&cql[..], &["thrift=9160"]].concat());
    assert_eq!(
        container,
        [&internode[..], &cql[..], &["thrift=9160", "sidecar=8080"]].concat()
    );
}

/// ScyllaDB: its shard-aware CQL ports (19042, and 19142 under client TLS)
/// are on the member Service, which is the address a member broadcasts to
/// clients (`broadcast_rpc_address`): ScyllaDB's drivers open a connection
/// per shard to these ports at that address, and on a real cluster the
/// ClusterIP, which forwards only the ports it lists, refused them, so every
/// shard-aware driver fell back to routing through one shard. No Thrift and
/// no JMX: nothing listens there.
#[test]
fn scylla_member_ports_include_the_shard_aware_ones() {
    let (member, client, container) = ports_of(&one_rack("scylla", "6.2.3"));
    let clients = [
        "cql=9042",
        "cql-ssl=9142",
        "cql-shard=19042",
        "cql-ssl-shard=19142",
    ];
    assert_eq!(
        member,
        [
            &["intra-node=7000", "tls-intra-node=7001"][..],
            &clients[..]
        ]
        .concat()
    );
    assert_eq!(client, clients);
    assert_eq!(
        container,
        [
            &["intra-node=7000", "tls-intra-node=7001"][..],
            &clients[..],
            &["sidecar=8080"]
        ]
        .concat()
    );
}

/// The API server refuses a Pod template whose container port names are not
/// IANA service names (at most 15 characters of `a-z0-9-`, a letter among
/// them, no `--`, no `-` at either end) or repeat, or repeat a port: the
/// StatefulSet, and so every member, would be refused on a real cluster.
#[test]
fn container_port_names_are_valid_service_names() {
    for (mode, version) in [
        ("cassandra", "3.11.17"),
        ("cassandra", "5.0.3"),
        ("scylla", "6.2.3"),
    ] {
        let (_, _, container) = ports_of(&one_rack(mode, version));
        let mut names = std::collections::BTreeSet::new();
        let mut numbers = std::collections::BTreeSet::new();
        for port in &container {
            let (name, number) = port.split_once('=').unwrap();
            assert!(
                name.len() <= 15
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && name.bytes().any(|b| b.is_ascii_lowercase())
                    && !name.contains("--")
                    && !name.starts_with('-')
                    && !name.ends_with('-'),
                "{mode} {version}: {name}"
            );
            assert!(names.insert(name), "{mode} {version}: {name} twice");
            assert!(numbers.insert(number), "{mode} {version}: {number} twice");
        }
    }
}

/// `fsGroupChangePolicy: OnRootMismatch` beside `fsGroup`: on a real
/// cluster the kubelet otherwise changes the group and mode of every file of
/// the data volume at each start of the member's Pod, minutes on a full
/// 350 GiB disk before the database even starts, which a roll counts
/// against its restart timeout (and stops, `MemberRestartStuck`).
#[test]
fn the_data_volume_is_not_walked_at_every_start() {
    for version in ["3.11.17", "4.1.8", "5.0.3"] {
        let cluster = one_rack("cassandra", version);
        let sts = to_json(&statefulset_for_rack(
            &ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            1,
            &BuildContext::default(),
        ));
        let context = &sts["spec"]["template"]["spec"]["securityContext"];
        assert_eq!(context["fsGroup"], 999, "{version}");
        assert_eq!(
            context["fsGroupChangePolicy"], "OnRootMismatch",
            "{version}"
        );
    }
}

/// A Pod's QoS class as Kubernetes computes it (`ComputePodQOS` in
/// kubernetes/kubernetes `pkg/apis/core/helper/qos/qos.go`, on the Pod as
/// stored, that is after the API server's defaulting, which gives a
/// container's unset cpu or memory request its limit): only cpu and memory
/// count, and only positive quantities; every container, init containers
/// included, must have both a cpu and a memory limit for Guaranteed, and the
/// Pod's summed requests must equal its summed limits, resource by
/// resource; no request and no limit anywhere is BestEffort; anything else
/// is Burstable. (Pod-level `resources`, a newer feature the builders do not
/// use, are left out.)
fn qos_class(pod: &PodSpec) -> &'static str {
    use std::collections::BTreeMap;
    let millis = |q: &Quantity| {
        crds::quantity::Quantity::parse(&q.0)
            .map(|q| u128::from(q.ceil_millis()))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let mut requests: BTreeMap<&str, u128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, u128> = BTreeMap::new();
    let mut guaranteed = true;
    for container in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let resources = container.resources.clone().unwrap_or_default();
        let mut limited = 0;
        for resource in ["cpu", "memory"] {
            let limit = resources
                .limits
                .as_ref()
                .and_then(|l| l.get(resource))
                .map(millis)
                .filter(|m| *m > 0);
            // Defaulting: an unset request is the limit.
            let request = resources
                .requests
                .as_ref()
                .and_then(|r| r.get(resource))
                .map(millis)
                .or(limit)
                .filter(|m| *m > 0);
            if let Some(request) = request {
                *requests.entry(resource).or_default() += request;
            }
            if let Some(limit) = limit {
                *limits.entry(resource).or_default() += limit;
                limited += 1;
            }
        }
        if limited < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(r, q)| limits.get(r) == Some(q))
    {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn pod_of(yaml: &str) -> PodSpec {
    serde_norway::from_str(yaml).unwrap()
}

/// [`qos_class`] classifies as Kubernetes' documentation does ("Configure
/// Quality of Service for Pods"): the rule applies to init containers too,
/// and a limit alone stands for an equal request.
#[test]
fn the_qos_class_is_computed_as_kubernetes_does() {
    assert_eq!(qos_class(&pod_of("containers: [{name: a}]")), "BestEffort");
    assert_eq!(
        qos_class(&pod_of(
            "containers: [{name: a, resources: {requests: {cpu: 700m, memory: 200Mi}, limits: {cpu: 700m, memory: 200Mi}}}]"
        )),
        "Guaranteed"
    );
    assert_eq!(
        qos_class(&pod_of(
            "containers: [{name: a, resources: {limits: {cpu: '0.7', memory: 200Mi}}}]"
        )),
        "Guaranteed"
    );
    assert_eq!(
        qos_class(&pod_of(
            "containers: [{name: a, resources: {requests: {memory: 100Mi}, limits: {memory: 200Mi}}}]"
        )),
        "Burstable"
    );
    assert_eq!(
        qos_class(&pod_of(
            "containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}}]\n\
             initContainers: [{name: i}]"
        )),
        "Burstable",
        "an init container without limits"
    );
    assert_eq!(
        qos_class(&pod_of(
            "containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}}]\n\
             initContainers: [{name: i, resources: {limits: {cpu: 100m, memory: 64Mi}}}]"
        )),
        "Guaranteed"
    );
}

/// A member Pod is Guaranteed exactly when its rack's cpu and memory
/// requests equal its limits (or only limits are given), and Burstable
/// otherwise: on a real cluster, members were Burstable whatever the rack
/// asked (the init container had no resources), so under Node memory
/// pressure the kubelet could evict a Cassandra member before any
/// Guaranteed Pod, and the static CPU manager gave it no exclusive CPUs,
/// contrary to the GKE guide (`manifests/gke-local-ssd/README.md`).
#[test]
fn member_pods_are_guaranteed_when_the_rack_asks_for_limits_equal_to_requests() {
    let pod = |mode: &str, resources: &str| {
        let mut cluster = one_rack(mode, "5.0.3");
        cluster.spec.datacenter.racks[0].resources = serde_norway::from_str(resources).unwrap();
        statefulset_for_rack(
            &ValidCluster::unchecked(&cluster),
            &cluster.spec.datacenter.racks[0],
            1,
            &BuildContext::default(),
        )
        .spec
        .and_then(|s| s.template.spec)
        .expect("a Pod template")
    };
    for mode in ["cassandra", "scylla"] {
        for (resources, class) in [
            (
                "{requests: {cpu: 2, memory: 8Gi}, limits: {cpu: 2, memory: 8Gi}}",
                "Guaranteed",
            ),
            (
                "{requests: {cpu: 2000m, memory: 8192Mi}, limits: {cpu: '2', memory: 8Gi}}",
                "Guaranteed",
            ),
            ("{limits: {cpu: 4, memory: 16Gi}}", "Guaranteed"),
            (
                "{requests: {cpu: 1, memory: 8Gi}, limits: {cpu: 2, memory: 8Gi}}",
                "Burstable",
            ),
            (
                "{requests: {cpu: 2, memory: 8Gi}, limits: {memory: 8Gi}}",
                "Burstable",
            ),
            ("{requests: {cpu: 2, memory: 8Gi}}", "Burstable"),
            ("{}", "Burstable"),
        ] {
            let pod = pod(mode, resources);
            assert_eq!(qos_class(&pod), class, "{mode}: {resources}");
            // Every container carries cpu and memory limits equal to its
            // requests whenever the rack's are.
            if class == "Guaranteed" {
                for container in pod
                    .containers
                    .iter()
                    .chain(pod.init_containers.iter().flatten())
                {
                    let r = container.resources.as_ref().expect(&container.name);
                    for resource in ["cpu", "memory"] {
                        assert!(
                            r.limits.as_ref().is_some_and(|l| l.contains_key(resource)),
                            "{mode}: {} has no {resource} limit",
                            container.name
                        );
                    }
                }
            }
        }
    }
}

/// The thesis cluster on 4.1 with internode TLS.
fn with_tls() -> Cluster {
    let mut cluster = thesis();
    cluster.spec.version = "4.1.8".into();
    cluster.spec.security = Some(crds::v1alpha1::SecuritySpec {
        tls: crds::v1alpha1::TlsSpec {
            internode: crds::v1alpha1::InternodeEncryption::All,
            ..Default::default()
        },
        authentication: None,
    });
    cluster
}

#[test]
fn a_tls_clusters_members_get_a_memory_volume_for_their_key_and_others_nothing() {
    let rack = |c: &Cluster| c.spec.datacenter.racks[0].clone();
    let pod = |c: &Cluster| {
        statefulset_for_rack(
            &ValidCluster::unchecked(c),
            &rack(c),
            0,
            &BuildContext::default(),
        )
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
    };
    let tls = pod(&with_tls());
    let volume = tls
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "tls")
        .expect("the tls volume");
    assert_eq!(
        to_json(volume),
        json!({"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    );
    let mounts = tls.containers[0].volume_mounts.as_ref().unwrap();
    assert_eq!(
        to_json(mounts.iter().find(|m| m.name == "tls").unwrap()),
        json!({"name": "tls", "mountPath": crds::contract::tls::TLS_DIR})
    );
    assert!(
        tls.init_containers.as_ref().unwrap()[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.name != "tls"),
        "the init container never sees the key"
    );
    // Without TLS, the template is as it was: existing clusters do not roll.
    let mut plain = with_tls();
    plain.spec.security = None;
    let plain_pod = pod(&plain);
    assert!(
        plain_pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .all(|v| v.name != "tls")
    );
    let mut none = with_tls();
    none.spec.security = Some(Default::default());
    assert_eq!(
        to_json(&pod(&none)),
        to_json(&plain_pod),
        "tls: none is no TLS"
    );
}

#[test]
fn a_tls_clusters_members_may_read_their_ca_configmap_and_no_other() {
    let cluster = with_tls();
    let rules = to_json(&member_role(&ValidCluster::unchecked(&cluster)))["rules"].clone();
    assert_eq!(
        rules,
        json!([
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["cassandra.rook.io"], "resources": ["clusters"], "resourceNames": ["cassandra"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cassandra-ca"], "verbs": ["get", "list", "watch"]}
        ])
    );
}

#[test]
fn a_tls_clusters_ca_objects() {
    let cluster = with_tls();
    let valid = ValidCluster::unchecked(&cluster);
    assert_eq!(
        to_json(&ca_config_map(&valid, "-----BEGIN CERTIFICATE-----\n")),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cassandra-ca", "namespace": "db", "ownerReferences": owner(),
                         "labels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"}},
            "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}
        })
    );
    let outside = json!({"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra",
                         "cassandra.rook.io/namespace": "db"});
    assert_eq!(
        to_json(&member_csr_binding(&valid)),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "cassandra-member-uid-1", "labels": outside},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cassandra-operator-member-certificates"},
            "subjects": [{"kind": "ServiceAccount", "name": "cassandra-member", "namespace": "db"}]
        })
    );
    let authority = crate::certificates::Authority {
        cert_pem: "C".into(),
        key_pem: "K".into(),
    };
    assert_eq!(
        to_json(&ca_secret(&cluster, "ops", &authority)),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "cassandra-ca-uid-1", "namespace": "ops", "labels": outside},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "Qw==", "tls.key": "Sw=="}
        })
    );
}
