//! Exact assertions on every builder: each object is compared whole, as JSON,
//! with what the API server will receive.

use serde_json::{Value, json};

use super::*;

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
        {"name": "jmx", "port": 7199, "protocol": "TCP", "targetPort": 7199},
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
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "initContainers": [{
                        "name": "install",
                        "image": "ghcr.io/cassandra-rook/cassandra-operator:0.1.0",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/usr/local/bin/cassandra-operator", "install", "--target", "/mnt/shared"],
                        "volumeMounts": [{"name": "shared", "mountPath": "/mnt/shared"}],
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
                            {"name": "jmx", "containerPort": 7199},
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
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": 8080},
                            "initialDelaySeconds": 15, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6
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

#[test]
fn pdb_allows_one_member_down() {
    let cluster = thesis();
    assert_eq!(
        to_json(&pod_disruption_budget(&ValidCluster::unchecked(&cluster))),
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
                "maxUnavailable": 1,
                "selector": {"matchLabels": {"app": "rook-cassandra", "cassandra.rook.io/cluster": "cassandra"}}
            }
        })
    );
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
