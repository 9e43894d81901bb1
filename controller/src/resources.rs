//! The objects a Cluster is made of, built from its (validated) spec by plain
//! functions: no client, no I/O. Every builder sets the cluster's labels and a
//! controller owner reference to the Cluster, so that deleting the Cluster
//! garbage-collects them and the controller can tell its own objects from
//! foreign ones.

use std::collections::BTreeMap;

use crds::labels;
use crds::names;
use crds::v1alpha1::{Cluster, ClusterMode, RackSpec};

pub use crate::validated::ValidCluster;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, HTTPGetAction, Lifecycle,
    LifecycleHandler, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceFieldSelector, ResourceRequirements, SeccompProfile, Secret, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crds::contract::pod::{self, env, subcommand};
use crds::contract::tls::{self, Encryption};
use crds::contract::{
    self, INTERNODE_PORTS, JMX_EXPORTER_DIR, OVERRIDES_DIR, SHARED_DIR, SIDECAR_PORT, data_dir,
    member_ports,
};
/// How long a member may take to drain and stop: draining flushes every
/// memtable, which takes minutes on a loaded node.
pub const TERMINATION_GRACE_SECONDS: i64 = 1800;
/// The database user of the official cassandra images (`cassandra`,
/// uid and gid 999 in docker-library/cassandra's Dockerfile). Their
/// `bin/cassandra` refuses to run as root; the image's entrypoint steps
/// down to this user, but the sidecar replaces that entrypoint, so the
/// Pod runs as it from the start.
pub const CASSANDRA_UID: i64 = 999;
pub use crds::v1alpha1::DEFAULT_OPERATOR_IMAGE;

/// The database container's memory-backed volume at
/// [`crds::contract::tls::TLS_DIR`] (clusters with TLS only).
pub const TLS_VOLUME: &str = "tls";
/// Its size limit: a key, a certificate chain and a CA bundle or two take a
/// few KiB; a memory-backed volume counts against the container's memory.
pub const TLS_VOLUME_SIZE: &str = "1Mi";

/// The CPU of the `install` init container, its request and its limit.
pub const INSTALL_CPU: &str = "100m";
/// The memory of the `install` init container, its request and its limit.
pub const INSTALL_MEMORY: &str = "128Mi";

/// The `install` init container's resources: requests equal to limits, for
/// cpu and memory both, so that a member Pod is in the Guaranteed QoS class
/// whenever its rack's resources are (Kubernetes counts init containers: a
/// container without cpu and memory limits makes the whole Pod Burstable,
/// and a Burstable member is evicted under Node memory pressure before any
/// Guaranteed Pod, and gets no exclusive CPUs from the static CPU manager).
///
/// Small, and enough: `install` copies the binary (about 11 MiB, README
/// "Binary size") and the agent jar (0.5 MiB), holding a file and the
/// installed copy in memory to compare them. Measured with the 82 MB debug
/// build: 179 MiB peak RSS when it installs over an earlier copy (a
/// restarted Pod), about twice the binary and its mapped pages, and 0.2 s
/// of CPU; for the release binary that is about 40 MiB and 0.03 s, which a
/// tenth of a CPU runs in a few scheduling periods. 128Mi leaves room for a
/// binary twice as large: an init container killed for memory would keep
/// every member in `Init:CrashLoopBackOff`. The scheduler counts a Pod's
/// request as the larger of its largest init container's and the sum of its
/// containers', so these cost a Node nothing beside any database
/// container's resources.
///
/// The sidecar has no container of its own: it is the database container's
/// PID 1 (it starts the database as its child), so it lives within the
/// rack's resources, which that container carries as they are.
pub fn install_resources() -> ResourceRequirements {
    let both = BTreeMap::from([
        ("cpu".to_string(), Quantity(INSTALL_CPU.to_string())),
        ("memory".to_string(), Quantity(INSTALL_MEMORY.to_string())),
    ]);
    ResourceRequirements {
        requests: Some(both.clone()),
        limits: Some(both),
        ..ResourceRequirements::default()
    }
}

/// The StatefulSet annotation holding the hash of what the controller
/// applied (the object without replicas): the apply step compares it with
/// the hash of the desired object, so that an unchanged rack costs no write.
pub const APPLIED_HASH: &str = "cassandra.rook.io/applied-hash";
/// The Pod template annotation holding a hash of the rack's overrides
/// ConfigMap's content: a content change is a template change, and so a roll.
pub const OVERRIDES_HASH: &str = "cassandra.rook.io/overrides-hash";

/// What the builders need besides the Cluster.
#[derive(Debug, Clone)]
pub struct BuildContext {
    /// Image of the operator itself (the default sidecar image).
    pub operator_image: String,
    /// A hash of the content of each ConfigMap of the Cluster's namespace
    /// that a rack names as its overrides, by name (filled per reconcile
    /// from the cache; a missing ConfigMap has none).
    pub config_map_hashes: BTreeMap<String, String>,
    /// The encryption the members' Pod templates carry, filled per
    /// reconcile ([`crate::encryption::templates_encryption`]): the spec's,
    /// or a step of a running cluster's move to TLS. `None`: the spec's.
    pub encryption: Option<Encryption>,
}

impl Default for BuildContext {
    fn default() -> Self {
        BuildContext {
            operator_image: DEFAULT_OPERATOR_IMAGE.to_string(),
            config_map_hashes: BTreeMap::new(),
            encryption: None,
        }
    }
}

/// FNV-1a, 64 bits, in hex: a hash that stays the same across Rust
/// releases and operator restarts (std's `DefaultHasher` promises neither),
/// which the hashes stored in annotations need.
pub fn stable_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The hash of a ConfigMap's content (`data` and `binaryData`, keys sorted).
pub fn config_map_hash(config_map: &k8s_openapi::api::core::v1::ConfigMap) -> String {
    let content = serde_json::json!({
        "data": config_map.data,
        "binaryData": config_map.binary_data,
    });
    stable_hash(content.to_string().as_bytes())
}

fn cluster_name(cluster: &Cluster) -> &str {
    cluster.metadata.name.as_deref().unwrap_or_default()
}

/// The owner reference every object of the cluster carries.
pub fn owner_reference(cluster: &Cluster) -> OwnerReference {
    OwnerReference {
        api_version: Cluster::api_version(&()).into_owned(),
        kind: Cluster::kind(&()).into_owned(),
        name: cluster_name(cluster).to_string(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn meta(cluster: &Cluster, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![owner_reference(cluster)]),
        ..ObjectMeta::default()
    }
}

/// The StatefulSet of one rack as it is created, with the given number of
/// replicas (the members that exist, 0 for a new rack).
pub fn statefulset_for_rack(
    cluster: &ValidCluster<'_>,
    rack: &RackSpec,
    replicas: i32,
    ctx: &BuildContext,
) -> StatefulSet {
    let mut sts = applied_statefulset(cluster, rack, ctx);
    if let Some(spec) = sts.spec.as_mut() {
        spec.replicas = Some(replicas);
    }
    sts
}

/// The StatefulSet of one rack as the apply step writes it with
/// server-side apply: everything but `replicas`, which the
/// one-member-at-a-time steps own, and with the [`APPLIED_HASH`] of itself.
pub fn applied_statefulset(
    cluster: &ValidCluster<'_>,
    rack: &RackSpec,
    ctx: &BuildContext,
) -> StatefulSet {
    hashed(statefulset_without_hash(cluster, rack, ctx))
}

/// A desired object with the [`APPLIED_HASH`] of itself (of all but that
/// annotation): what the apply step writes, and compares with what the
/// cache holds to write only what changed.
pub fn hashed<K: Resource + serde::Serialize>(mut object: K) -> K {
    if let Some(annotations) = object.meta_mut().annotations.as_mut() {
        annotations.remove(APPLIED_HASH);
        if annotations.is_empty() {
            object.meta_mut().annotations = None;
        }
    }
    let hash = stable_hash(&serde_json::to_vec(&object).unwrap_or_default());
    object
        .meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(APPLIED_HASH.to_string(), hash);
    object
}

/// The [`APPLIED_HASH`] an object carries, if any.
pub fn applied_hash<K: Resource>(object: &K) -> Option<&str> {
    object
        .meta()
        .annotations
        .as_ref()?
        .get(APPLIED_HASH)
        .map(String::as_str)
}

fn statefulset_without_hash(cluster: &Cluster, rack: &RackSpec, ctx: &BuildContext) -> StatefulSet {
    let name = cluster_name(cluster);
    let dc = &cluster.spec.datacenter.name;
    let labels = labels::rack_labels(name, dc, &rack.name);
    StatefulSet {
        metadata: meta(
            cluster,
            names::statefulset_name(name, dc, &rack.name),
            labels.clone(),
        ),
        spec: Some(StatefulSetSpec {
            replicas: None,
            // The controller rolls members itself, one at a time, when the
            // whole cluster is ready (DESIGN.md): the StatefulSet controller
            // only recreates the Pods it deletes.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_string()),
                rolling_update: None,
            }),
            service_name: Some(names::client_service_name(name)),
            pod_management_policy: Some("OrderedReady".to_string()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                match_expressions: None,
            },
            template: pod_template(cluster, rack, labels, ctx),
            volume_claim_templates: Some(
                rack.storage
                    .volume_claim_templates
                    .iter()
                    .map(|template| {
                        let mut template = template.clone();
                        // A PVC template carries only what the StatefulSet
                        // controller copies to each claim.
                        template.status = None;
                        template.metadata.namespace = None;
                        // The API server refuses a claim without an access
                        // mode, and the StatefulSet controller would fail
                        // to create each member's claim from such a
                        // template (the Rook examples leave it out): a
                        // member's data volume has one writer.
                        if let Some(spec) = template.spec.as_mut()
                            && spec.access_modes.as_ref().is_none_or(Vec::is_empty)
                        {
                            spec.access_modes = Some(vec!["ReadWriteOnce".to_string()]);
                        }
                        template
                    })
                    .collect(),
            )
            .filter(|t: &Vec<_>| !t.is_empty()),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

fn pod_template(
    cluster: &Cluster,
    rack: &RackSpec,
    labels: BTreeMap<String, String>,
    ctx: &BuildContext,
) -> PodTemplateSpec {
    let mut annotations = cluster.spec.annotations.clone().unwrap_or_default();
    annotations.extend(rack.annotations.clone().unwrap_or_default());
    if let Some(hash) = rack
        .config_map_name
        .as_ref()
        .and_then(|name| ctx.config_map_hashes.get(name))
    {
        annotations.insert(OVERRIDES_HASH.to_string(), hash.clone());
    }
    // `kubectl rollout restart` for a Cluster: the request's time in the
    // template makes a new revision, which the controller rolls.
    if let Some(at) = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::RESTARTED_AT))
    {
        annotations.insert(labels::RESTARTED_AT.to_string(), at.clone());
    }
    let mode = cluster.spec.mode;
    let sidecar_image = cluster
        .spec
        .sidecar_image
        .as_ref()
        .map(|i| i.reference())
        .unwrap_or_else(|| ctx.operator_image.clone());
    let binary = pod::installed_binary();

    let mut volumes = vec![Volume {
        name: "shared".to_string(),
        empty_dir: Some(Default::default()),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "shared".to_string(),
        mount_path: SHARED_DIR.to_string(),
        ..VolumeMount::default()
    }];
    // Under readOnlyRootFilesystem the only writable paths are volumes:
    // Cassandra's logs (`$CASSANDRA_HOME/logs` links there; the JVM of 4.0+
    // refuses to start when it cannot open its GC log) and /tmp (the JVM's
    // perf data, JNA's native library). The configuration is rendered into
    // the shared volume, the data goes to the data volume.
    for (volume, dir) in scratch_dirs(mode) {
        volumes.push(Volume {
            name: volume.to_string(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: volume.to_string(),
            mount_path: dir.to_string(),
            ..VolumeMount::default()
        });
    }
    // The member's key, certificate chain and CA bundle: in memory only
    // (the key never touches a disk), written by the sidecar. Only for
    // clusters with TLS, so that other clusters' Pod templates, and so
    // their members, stay as they were.
    let encryption = ctx.encryption.or_else(|| {
        cluster
            .spec
            .security
            .as_ref()
            .and_then(|s| Encryption::of(&s.tls))
    });
    if encryption.is_some() {
        volumes.push(Volume {
            name: TLS_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(Quantity(TLS_VOLUME_SIZE.to_string())),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: TLS_VOLUME.to_string(),
            mount_path: tls::TLS_DIR.to_string(),
            ..VolumeMount::default()
        });
    }
    if let Some(template) = rack.storage.volume_claim_templates.first() {
        mounts.push(VolumeMount {
            name: template.metadata.name.clone().unwrap_or_default(),
            mount_path: data_dir(mode).to_string(),
            ..VolumeMount::default()
        });
    }
    for (volume, config_map, dir) in [
        ("overrides", &rack.config_map_name, OVERRIDES_DIR),
        (
            "jmx-exporter",
            &rack.jmx_exporter_config_map_name,
            JMX_EXPORTER_DIR,
        ),
    ] {
        if let Some(config_map) = config_map {
            volumes.push(Volume {
                name: volume.to_string(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.clone(),
                    // A member must not start without the overrides its
                    // rack asks for.
                    optional: Some(false),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            });
            mounts.push(VolumeMount {
                name: volume.to_string(),
                mount_path: dir.to_string(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
    }

    let http_probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::Int(SIDECAR_PORT.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(failures),
        ..Probe::default()
    };

    let mut ports: Vec<ContainerPort> = member_ports(mode, &cluster.spec.version)
        .iter()
        .map(|(name, port)| ContainerPort {
            name: Some(name.to_string()),
            container_port: i32::from(*port),
            ..ContainerPort::default()
        })
        .collect();
    ports.push(ContainerPort {
        name: Some("sidecar".to_string()),
        container_port: SIDECAR_PORT.into(),
        ..ContainerPort::default()
    });

    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            service_account_name: Some(names::member_service_account_name(cluster_name(cluster))),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            security_context: pod_security_context(mode),
            init_containers: Some(vec![Container {
                name: "install".to_string(),
                image: Some(sidecar_image),
                image_pull_policy: Some("IfNotPresent".to_string()),
                command: Some(vec![
                    pod::IMAGE_BINARY.to_string(),
                    subcommand::INSTALL.to_string(),
                    format!("--{}", subcommand::INSTALL_TARGET),
                    SHARED_DIR.to_string(),
                ]),
                volume_mounts: Some(vec![mounts[0].clone()]),
                resources: Some(install_resources()),
                security_context: container_security_context(mode),
                ..Container::default()
            }]),
            containers: vec![Container {
                name: mode.as_str().to_string(),
                image: Some(cluster.database_image()),
                image_pull_policy: Some("IfNotPresent".to_string()),
                command: Some(vec![binary.clone(), subcommand::SIDECAR.to_string()]),
                env: Some(
                    downward_env()
                        .into_iter()
                        .chain(encryption.map(|e| EnvVar {
                            name: tls::ENCRYPTION_ENV.to_string(),
                            value: Some(e.to_env()),
                            ..EnvVar::default()
                        }))
                        .collect(),
                ),
                ports: Some(ports),
                resources: Some(rack.resources.clone()),
                volume_mounts: Some(mounts),
                // The sidecar serves its probes once it knows its member
                // (its Service's address: it waits up to 10 minutes for
                // one), and /healthz answers all through iotune, a long
                // bootstrap or a start the Node refuses: the startup probe
                // gives it those 10 minutes, then the liveness probe
                // restarts a sidecar that stops answering for a minute.
                startup_probe: Some(http_probe("/healthz", 10, 60)),
                liveness_probe: Some(http_probe("/healthz", 10, 6)),
                readiness_probe: Some(http_probe("/readyz", 10, 3)),
                security_context: container_security_context(mode),
                lifecycle: Some(Lifecycle {
                    pre_stop: Some(LifecycleHandler {
                        exec: Some(ExecAction {
                            command: Some(vec![
                                binary,
                                subcommand::NODETOOL.to_string(),
                                subcommand::DRAIN.to_string(),
                            ]),
                        }),
                        ..LifecycleHandler::default()
                    }),
                    ..Lifecycle::default()
                }),
                ..Container::default()
            }],
            volumes: Some(volumes),
            affinity: rack.placement.as_ref().map(|p| Affinity {
                node_affinity: p.node_affinity.clone(),
                pod_affinity: p.pod_affinity.clone(),
                pod_anti_affinity: p.pod_anti_affinity.clone(),
            }),
            tolerations: rack.placement.as_ref().and_then(|p| p.tolerations.clone()),
            ..PodSpec::default()
        }),
    }
}

/// The Pod's security context. Cassandra: the image's database user
/// (never root: `bin/cassandra` refuses it), which also owns the volumes
/// (`fsGroup`), under the runtime's default seccomp profile, as Pod
/// Security "restricted" asks. Scylla's image starts as root and steps
/// down itself: left to the image.
///
/// `fsGroupChangePolicy: OnRootMismatch`: without it the kubelet walks the
/// whole data volume at every start of the Pod, changing the group and mode
/// of every file (the default policy, `Always`), which on a full 350 GiB
/// disk of sstables takes minutes, during which the member is not even
/// started, and which a roll counts against its restart timeout. With it the
/// kubelet changes nothing when the volume's root already has the group and
/// mode, which it has from the first start on: every file below was written
/// by the database user since.
fn pod_security_context(mode: ClusterMode) -> Option<PodSecurityContext> {
    match mode {
        ClusterMode::Cassandra => Some(PodSecurityContext {
            run_as_user: Some(CASSANDRA_UID),
            run_as_group: Some(CASSANDRA_UID),
            run_as_non_root: Some(true),
            fs_group: Some(CASSANDRA_UID),
            fs_group_change_policy: Some("OnRootMismatch".to_string()),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        ClusterMode::Scylla => None,
    }
}

/// The writable scratch directories (emptyDir volumes) of the database
/// container besides the shared and data volumes: (volume, path).
/// Scylla's image writes under /etc/scylla and runs as root: left to it.
pub fn scratch_dirs(mode: ClusterMode) -> &'static [(&'static str, &'static str)] {
    match mode {
        ClusterMode::Cassandra => &[("logs", "/var/log/cassandra"), ("tmp", "/tmp")],
        ClusterMode::Scylla => &[],
    }
}

/// Each container's: no privilege escalation, no capabilities (the sidecar
/// and Cassandra need none of them) and a read-only root filesystem (what
/// they write goes to volumes: [`scratch_dirs`], the shared and data
/// volumes).
fn container_security_context(mode: ClusterMode) -> Option<SecurityContext> {
    match mode {
        ClusterMode::Cassandra => Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Capabilities::default()
            }),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        }),
        ClusterMode::Scylla => None,
    }
}

fn downward_env() -> Vec<EnvVar> {
    let field = |name: &str, path: &str| EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    };
    let resource = |name: &str, resource: &str| EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: resource.to_string(),
                container_name: None,
                divisor: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    };
    vec![
        field(env::POD_NAME, "metadata.name"),
        field(env::POD_NAMESPACE, "metadata.namespace"),
        field(env::POD_IP, "status.podIP"),
        field(
            env::POD_CLUSTER,
            &format!("metadata.labels['{}']", labels::CLUSTER),
        ),
        field(
            env::POD_DATACENTER,
            &format!("metadata.labels['{}']", labels::DATACENTER),
        ),
        field(
            env::POD_RACK,
            &format!("metadata.labels['{}']", labels::RACK),
        ),
        resource(env::CPU_LIMIT, "limits.cpu"),
        resource(env::MEMORY_LIMIT, "limits.memory"),
    ]
}

/// The member Service of one member: its stable ClusterIP and identity,
/// carrying the seed label when the member is a seed.
pub fn member_service(
    cluster: &ValidCluster<'_>,
    rack: &RackSpec,
    ordinal: i32,
    seed: bool,
) -> Service {
    let name = cluster_name(cluster);
    let statefulset = names::statefulset_name(name, &cluster.spec.datacenter.name, &rack.name);
    let member = names::member_name(&statefulset, ordinal);
    let mut labels = labels::rack_labels(name, &cluster.spec.datacenter.name, &rack.name);
    if seed {
        labels.insert(contract::SEED.to_string(), String::new());
    }
    Service {
        metadata: meta(cluster, member.clone(), labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(BTreeMap::from([(labels::POD_NAME.to_string(), member)])),
            // Cassandra nodes must reach a member before it is ready: it
            // gossips and streams while joining.
            publish_not_ready_addresses: Some(true),
            ports: Some(
                member_ports(cluster.spec.mode, &cluster.spec.version)
                    .iter()
                    .map(|(port_name, port)| ServicePort {
                        name: Some(port_name.to_string()),
                        port: i32::from(*port),
                        target_port: Some(IntOrString::Int(i32::from(*port))),
                        protocol: Some("TCP".to_string()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The headless Service clients connect through: it selects the cluster's
/// ready members, with the client ports of [`member_ports`] (all but the
/// internode ones).
pub fn client_service(cluster: &ValidCluster<'_>) -> Service {
    let name = cluster_name(cluster);
    let labels = labels::cluster_labels(name);
    Service {
        metadata: meta(cluster, names::client_service_name(name), labels.clone()),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(labels),
            ports: Some(
                member_ports(cluster.spec.mode, &cluster.spec.version)
                    .iter()
                    .filter(|(_, port)| !INTERNODE_PORTS.contains(port))
                    .map(|(port_name, port)| ServicePort {
                        name: Some(port_name.to_string()),
                        port: i32::from(*port),
                        target_port: Some(IntOrString::Int(i32::from(*port))),
                        protocol: Some("TCP".to_string()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// At most one member of the cluster may be disrupted at a time: Cassandra's
/// usual replication factor of 3 keeps quorum with one replica down.
///
/// While data moves (`hold`: a member joins, is replaced or leaves), none
/// may be: with one member down already, `maxUnavailable: 1` still lets
/// the eviction API evict that member itself (an unhealthy Pod is evicted
/// whenever the healthy ones meet the budget, `IfHealthyBudget`), so a
/// drain of the Node where a replacement streams would kill the stream,
/// and with it hours of work. `maxUnavailable: 0` refuses every eviction
/// until the movement ends. The policy is spelt out: `AlwaysAllow` would
/// evict the streaming member whatever the budget.
pub fn pod_disruption_budget(cluster: &ValidCluster<'_>, hold: bool) -> PodDisruptionBudget {
    let name = cluster_name(cluster);
    let labels = labels::cluster_labels(name);
    PodDisruptionBudget {
        metadata: meta(cluster, names::pdb_name(name), labels.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(if hold { 0 } else { 1 })),
            selector: Some(LabelSelector {
                match_labels: Some(labels),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("IfHealthyBudget".to_string()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// The members' ServiceAccount.
pub fn member_service_account(cluster: &ValidCluster<'_>) -> ServiceAccount {
    let name = cluster_name(cluster);
    ServiceAccount {
        metadata: meta(
            cluster,
            names::member_service_account_name(name),
            labels::cluster_labels(name),
        ),
        ..ServiceAccount::default()
    }
}

/// What a member's sidecar may do, and nothing more: read its Cluster,
/// watch and label member Services (the shipped admission policy narrows
/// the labelling to its own Service's records of intent). Its Pod's labels
/// come from the downward API.
pub fn member_role(cluster: &ValidCluster<'_>) -> Role {
    let name = cluster_name(cluster);
    let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    Role {
        metadata: meta(
            cluster,
            names::member_service_account_name(name),
            labels::cluster_labels(name),
        ),
        rules: Some({
            let mut rules = vec![
                rule("", "services", &["get", "list", "watch", "patch"]),
                PolicyRule {
                    resource_names: Some(vec![name.to_string()]),
                    ..rule(crds::v1alpha1::GROUP, "clusters", &["get"])
                },
            ];
            // The CA bundle the sidecar trusts, and follows while a CA is
            // replaced: that one ConfigMap (a list or watch narrowed to its
            // name), no other.
            if tls_enabled(cluster) {
                rules.push(PolicyRule {
                    resource_names: Some(vec![tls::ca_config_map_name(name)]),
                    ..rule("", "configmaps", &["get", "list", "watch"])
                });
            }
            rules
        }),
    }
}

/// What a member Role the user provided (one the Cluster does not own, such
/// as the `rook-cassandra-member` Role of Rook's example) lacks of what
/// `needed` grants, as "verb resource" phrases: empty when members can work
/// with it. A rule covers a need when its groups, resources and verbs
/// include the need's (or `*`) and it is not narrowed to other names.
/// Pure.
pub fn missing_grants(provided: &Role, needed: &Role) -> Vec<String> {
    let has = |list: &Option<Vec<String>>, item: &str| {
        list.as_deref()
            .unwrap_or_default()
            .iter()
            .any(|x| x == item || x == "*")
    };
    let mut missing = Vec::new();
    for need in needed.rules.as_deref().unwrap_or_default() {
        let groups = need.api_groups.as_deref().unwrap_or_default();
        let resources = need.resources.as_deref().unwrap_or_default();
        let names = need.resource_names.as_deref().unwrap_or_default();
        for group in groups {
            for resource in resources {
                for verb in &need.verbs {
                    let covered = provided
                        .rules
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .any(|r| {
                            let allowed_names = r.resource_names.as_deref().unwrap_or_default();
                            has(&r.api_groups, group)
                                && has(&r.resources, resource)
                                && (r.verbs.iter().any(|v| v == verb || v == "*"))
                                && (allowed_names.is_empty()
                                    || (!names.is_empty()
                                        && names.iter().all(|n| allowed_names.contains(n))))
                        });
                    if !covered {
                        let qualified = if group.is_empty() {
                            resource.clone()
                        } else {
                            format!("{resource}.{group}")
                        };
                        missing.push(format!("{verb} {qualified}"));
                    }
                }
            }
        }
    }
    missing
}

/// Whether a RoleBinding the user provided binds what `needed` binds: the
/// same Role to the members' ServiceAccount in the Cluster's namespace.
/// Pure.
pub fn binds_the_same(provided: &RoleBinding, needed: &RoleBinding) -> bool {
    let same_subject = |a: &Subject, b: &Subject| {
        a.kind == b.kind
            && a.name == b.name
            && a.namespace
                .as_deref()
                .or(provided.metadata.namespace.as_deref())
                == b.namespace.as_deref()
    };
    provided.role_ref == needed.role_ref
        && needed
            .subjects
            .as_deref()
            .unwrap_or_default()
            .iter()
            .all(|want| {
                provided
                    .subjects
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|have| same_subject(have, want))
            })
}

/// Binds [`member_role`] to [`member_service_account`].
pub fn member_role_binding(cluster: &ValidCluster<'_>) -> RoleBinding {
    let name = cluster_name(cluster);
    let account = names::member_service_account_name(name);
    RoleBinding {
        metadata: meta(cluster, account.clone(), labels::cluster_labels(name)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: account.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: account,
            namespace: cluster.metadata.namespace.clone(),
            api_group: None,
        }]),
    }
}

/// Whether the Cluster's members get certificates (`spec.security.tls`).
pub fn tls_enabled(cluster: &Cluster) -> bool {
    cluster
        .spec
        .security
        .as_ref()
        .is_some_and(|s| s.tls.enabled())
}

/// The labels of what the controller keeps of a cluster outside its
/// namespace (its CA Secret, its members' ClusterRoleBinding), where no
/// owner reference can reach: the Cluster's name and namespace, by which
/// the sweep finds those of Clusters that are gone.
pub fn outside_labels(cluster: &Cluster) -> BTreeMap<String, String> {
    let mut labels = labels::cluster_labels(cluster_name(cluster));
    labels.insert(
        tls::CA_NAMESPACE_LABEL.to_string(),
        cluster.metadata.namespace.clone().unwrap_or_default(),
    );
    labels
}

/// The Secret of a cluster's certificate authority, in the operator's
/// namespace (where no user of the Cluster's namespace, and no member, can
/// read it), named by the Cluster's UID. Created once, never changed: a
/// new key would leave every member with certificates no peer trusts. No
/// owner reference (none crosses namespaces): the sweep deletes it once
/// its Cluster is gone.
pub fn ca_secret(
    cluster: &Cluster,
    operator_namespace: &str,
    authority: &crate::certificates::Authority,
) -> Secret {
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(tls::ca_secret_name(&uid)),
            namespace: Some(operator_namespace.to_string()),
            labels: Some(outside_labels(cluster)),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            (
                crate::certificates::CA_CERT_KEY.to_string(),
                k8s_openapi::ByteString(authority.cert_pem.clone().into_bytes()),
            ),
            (
                crate::certificates::CA_KEY_KEY.to_string(),
                k8s_openapi::ByteString(authority.key_pem.clone().into_bytes()),
            ),
        ])),
        ..Secret::default()
    }
}

/// The ConfigMap of the cluster's CA certificate, in its namespace, for
/// members and clients ([`tls::CA_BUNDLE_KEY`]).
pub fn ca_config_map(cluster: &ValidCluster<'_>, ca_pem: &str) -> ConfigMap {
    let name = cluster_name(cluster);
    ConfigMap {
        metadata: meta(
            cluster,
            tls::ca_config_map_name(name),
            labels::cluster_labels(name),
        ),
        data: Some(BTreeMap::from([(
            tls::CA_BUNDLE_KEY.to_string(),
            ca_pem.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

/// Binds the ClusterRole that lets members ask for certificates
/// ([`tls::MEMBER_CSR_CLUSTER_ROLE`]) to the members' ServiceAccount.
/// Cluster-scoped, so no owner reference: the sweep deletes it once its
/// Cluster is gone.
pub fn member_csr_binding(cluster: &ValidCluster<'_>) -> ClusterRoleBinding {
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(tls::member_csr_binding_name(&uid)),
            labels: Some(outside_labels(cluster)),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "ClusterRole".to_string(),
            name: tls::MEMBER_CSR_CLUSTER_ROLE.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: names::member_service_account_name(cluster_name(cluster)),
            namespace: cluster.metadata.namespace.clone(),
            api_group: None,
        }]),
    }
}

#[cfg(test)]
mod tests;
