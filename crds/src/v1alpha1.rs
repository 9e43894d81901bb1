//! The `cassandra.rook.io/v1alpha1` `Cluster` resource, field for field the
//! Rook Cassandra operator's API (so that its manifests apply unchanged), with
//! the schema constraints and CEL rules that reject bad input at the API
//! server. Pure data: no I/O.
//!
//! Every `///` comment on a field becomes its `kubectl explain` text.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeAffinity, PersistentVolumeClaim, PodAffinity, PodAntiAffinity, ResourceRequirements,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every resource this operator serves.
pub const GROUP: &str = "cassandra.rook.io";
/// The API version of [`Cluster`].
pub const VERSION: &str = "v1alpha1";

/// The longest StatefulSet name that leaves room for the
/// `controller-revision-hash` label (`<statefulset>-<10 character hash>`, a
/// label value of at most 63 characters) and for the member Pod and Service
/// names (`<statefulset>-<ordinal>`, DNS-1035 labels of at most 63).
pub const MAX_STATEFULSET_NAME: usize = 52;

/// The most racks one datacenter may have: a bound the API server needs to
/// estimate the cost of the CEL rules that walk the rack list.
pub const MAX_RACKS: usize = 64;

/// Regular expression of a DNS-1123 label (RFC 1123), the form of rack and
/// datacenter names (they become parts of object names and label values).
pub const DNS1123_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Regular expression of a DNS-1035 label, the form of a Service name: the
/// Cluster's name starts every member Service name.
pub const DNS1035_LABEL: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// Regular expression of a DNS-1123 subdomain, the form of a ConfigMap name.
pub const DNS1123_SUBDOMAIN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Regular expression of a container image tag.
pub const IMAGE_TAG: &str = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$";
/// Regular expression of an image repository (registry host, optional port,
/// path), without a tag or digest.
pub const IMAGE_REPOSITORY: &str =
    "^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$";
/// Regular expression of an annotation key: an optional DNS-1123 subdomain
/// prefix and a slash, then a name of up to 63 characters.
pub const QUALIFIED_NAME: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A Cassandra (or ScyllaDB) cluster: one datacenter made of racks, each rack a
/// StatefulSet, each member a Pod with its own ClusterIP Service as its
/// identity.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cassandra.rook.io",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    singular = "cluster",
    namespaced,
    status = "ClusterStatus",
    derive = "PartialEq",
    shortname = "cass",
    category = "cassandra",
    doc = "A Cassandra or ScyllaDB cluster managed by the cassandra.rook.io operator: one datacenter of racks, each rack a StatefulSet, each member a Pod with a ClusterIP Service as its stable identity.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode", description = "cassandra or scylla", priority = 1),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version", description = "The database version (image tag)"),
    printcolumn(name = "Members", type_ = "integer", json_path = ".status.members", description = "Members in all racks"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyMembers", description = "Members that are ready"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason", description = "Why the cluster is or is not ready"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    // The rules of metadata.name name it as their field: the schema
    // declares metadata.name for that (crds::crd::definition), or the API
    // server refuses the whole CRD ("must be a valid path").
    validation = Rule::new("!self.metadata.name.contains('.') && self.metadata.name.matches('^[a-z]')")
        .message("metadata.name must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter): it starts the name of every member Service")
        .field_path(".metadata.name"),
    validation = Rule::new("size(self.metadata.name) <= 56")
        .message("metadata.name must be at most 56 characters: the client Service is named <cluster>-client")
        .field_path(".metadata.name"),
    validation = Rule::new("self.spec.datacenter.racks.all(r, size(self.metadata.name) + size(self.spec.datacenter.name) + size(r.name) + 2 <= 52)")
        .message("the StatefulSet name <cluster>-<datacenter>-<rack> must be at most 52 characters, so that pod names and the controller-revision-hash label stay within 63: shorten the cluster, datacenter or rack name")
        .field_path(".spec.datacenter.racks"),
    // Cassandra's upgrade rules as far as CEL can say them (the controller
    // also judges against what runs: crds::versions).
    validation = Rule::new("self.spec.mode != 'cassandra' || oldSelf.spec.mode != 'cassandra' || !self.spec.version.matches('^[0-9]+[.][0-9]+') || !oldSelf.spec.version.matches('^[0-9]+[.][0-9]+') || int(self.spec.version.find('^[0-9]+')) * 1000 + int(self.spec.version.find('^[0-9]+[.][0-9]+').split('.')[1]) >= int(oldSelf.spec.version.find('^[0-9]+')) * 1000 + int(oldSelf.spec.version.find('^[0-9]+[.][0-9]+').split('.')[1])")
        .message("a downgrade across minor versions is not supported by Cassandra (a node cannot read data written by a newer version)")
        .field_path(".spec.version"),
    validation = Rule::new("self.spec.mode != 'cassandra' || oldSelf.spec.mode != 'cassandra' || !self.spec.version.matches('^[0-9]+[.][0-9]+') || !oldSelf.spec.version.matches('^[0-9]+[.][0-9]+') || int(self.spec.version.find('^[0-9]+')) - int(oldSelf.spec.version.find('^[0-9]+')) <= 1")
        .message("an upgrade may not skip a major version (e.g. 3.11 goes to 4.0 or 4.1 before 5.0)")
        .field_path(".spec.version"),
    // Members read their key and certificates as PEM files, which
    // Cassandra reads from 4.1 on (PEMBasedSslContextFactory).
    validation = Rule::new("self.spec.mode != 'cassandra' || !has(self.spec.security) || !has(self.spec.security.tls) || ((!has(self.spec.security.tls.internode) || self.spec.security.tls.internode == 'none') && (!has(self.spec.security.tls.client) || self.spec.security.tls.client == 'none')) || !self.spec.version.matches('^[0-9]+[.][0-9]+') || int(self.spec.version.find('^[0-9]+')) * 1000 + int(self.spec.version.find('^[0-9]+[.][0-9]+').split('.')[1]) >= 4001")
        .message("TLS needs Cassandra 4.1 or later: members read their key and certificates as PEM files, which Cassandra reads from 4.1 on (PEMBasedSslContextFactory); upgrade first, then create a cluster with TLS")
        .field_path(".spec.security.tls"),
    validation = Rule::new("self.spec.mode != 'scylla' || !has(self.spec.security) || !has(self.spec.security.tls) || !has(self.spec.security.tls.client) || self.spec.security.tls.client != 'optional'")
        .message("ScyllaDB has no optional client encryption on one port (client_encryption_options has no optional): use required or none")
        .field_path(".spec.security.tls.client"),
    // At the root, so that adding spec.security to a cluster that had none
    // is judged too (a rule on the field runs only when both have it).
    validation = Rule::new("(has(self.spec.security) && has(self.spec.security.tls) && has(self.spec.security.tls.internode) ? self.spec.security.tls.internode : 'none') == (has(oldSelf.spec.security) && has(oldSelf.spec.security.tls) && has(oldSelf.spec.security.tls.internode) ? oldSelf.spec.security.tls.internode : 'none') || ((has(oldSelf.spec.security) && has(oldSelf.spec.security.tls) && has(oldSelf.spec.security.tls.internode) ? oldSelf.spec.security.tls.internode : 'none') == 'none' && self.spec.mode == 'cassandra')")
        .message("spec.security.tls.internode can change on an existing cluster only from none, in Cassandra mode (the operator then moves the members to TLS in steps, one member at a time): turning it off, or switching between all, dc and rack, would leave members refusing each other's connections during the roll, and ScyllaDB has no transitional mode; create a new cluster with the setting")
        .field_path(".spec.security.tls.internode"),
    // At the root, so that adding spec.security to a cluster that had none
    // is judged too (a rule on the field runs only when both have it).
    validation = Rule::new("(has(self.spec.security) && has(self.spec.security.tls) && has(self.spec.security.tls.client) ? self.spec.security.tls.client : 'none') == (has(oldSelf.spec.security) && has(oldSelf.spec.security.tls) && has(oldSelf.spec.security.tls.client) ? oldSelf.spec.security.tls.client : 'none') || (self.spec.mode == 'cassandra' && ((has(oldSelf.spec.security) && has(oldSelf.spec.security.tls) && has(oldSelf.spec.security.tls.client) ? oldSelf.spec.security.tls.client : 'none') == 'none' || ((has(oldSelf.spec.security) && has(oldSelf.spec.security.tls) && has(oldSelf.spec.security.tls.client) ? oldSelf.spec.security.tls.client : 'none') == 'optional' && (has(self.spec.security) && has(self.spec.security.tls) && has(self.spec.security.tls.client) ? self.spec.security.tls.client : 'none') == 'required')))")
        .message("spec.security.tls.client can only be raised on an existing cluster (none to optional or required, optional to required), in Cassandra mode: lowering it would send clients' data in clear text, and ScyllaDB has no optional client encryption to move through; create a new cluster with the setting")
        .field_path(".spec.security.tls.client"),
    // At the root, so that adding spec.security to a cluster that had none
    // is judged too (a rule on the field runs only when both have it).
    validation = Rule::new("(has(self.spec.security) && has(self.spec.security.authentication) && has(self.spec.security.authentication.enabled) && self.spec.security.authentication.enabled) == (has(oldSelf.spec.security) && has(oldSelf.spec.security.authentication) && has(oldSelf.spec.security.authentication.enabled) && oldSelf.spec.security.authentication.enabled)")
        .message("spec.security.authentication.enabled cannot be changed on an existing cluster yet: turning authentication on breaks every client that does not log in yet, and turning it off opens the data to anyone; create a new cluster with the setting")
        .field_path(".spec.security.authentication.enabled"),
    validation = Rule::new("(has(self.spec.security) && has(self.spec.security.authentication) && has(self.spec.security.authentication.superuserSecretName) ? self.spec.security.authentication.superuserSecretName : '') == (has(oldSelf.spec.security) && has(oldSelf.spec.security.authentication) && has(oldSelf.spec.security.authentication.superuserSecretName) ? oldSelf.spec.security.authentication.superuserSecretName : '')")
        .message("spec.security.authentication.superuserSecretName cannot be changed on an existing cluster: the operator logs in with the superuser it created from that Secret; change the Secret's password with ALTER ROLE instead")
        .field_path(".spec.security.authentication.superuserSecretName"),
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Version of Cassandra or ScyllaDB to run: the tag of the database image,
    /// for example `3.11.6`, `4.1.8` or `5.0.3`. Changing it rolls the members
    /// one at a time.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    )]
    pub version: String,

    /// Repository of the database image, without a tag. Defaults to `cassandra`
    /// in cassandra mode and `scylladb/scylla` in scylla mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub repository: Option<String>,

    /// Which database the members run: `cassandra` (Apache Cassandra) or
    /// `scylla` (ScyllaDB). Cannot be changed after creation.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("mode is immutable: a cluster cannot change database"))]
    pub mode: ClusterMode,

    /// Annotations added to every member Pod of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,

    /// The datacenter this cluster is made of.
    pub datacenter: DatacenterSpec,

    /// Image of the sidecar (the init container that installs the operator
    /// binary into the member Pods). Defaults to the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_image: Option<ImageSpec>,

    /// Maintenance the operator runs by itself, one member at a time: a
    /// cleanup after a scale-up, upgradesstables after a major upgrade,
    /// and, when `repair` is set, scheduled repairs. Cassandra mode only:
    /// in scylla mode nothing is run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,

    /// Encryption of the traffic between members and from clients, with
    /// certificates the operator issues to each member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SecuritySpec>,
}

/// Security of a cluster.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecuritySpec {
    /// TLS between members and for clients. Each member makes its own
    /// private key, which never leaves its Pod, and gets its certificate
    /// from the operator's certificate authority for this cluster through
    /// a Kubernetes CertificateSigningRequest (signer
    /// `cassandra.rook.io/member`); clients find that authority's
    /// certificate in the ConfigMap `<cluster>-ca`.
    /// On a running Cassandra cluster it can be raised (internode from
    /// `none`, client from `none` or to `required`): the operator moves
    /// the members through Cassandra's transitional (`optional`) mode, a
    /// roll at a time, one member at a time. It cannot be lowered.
    #[serde(default)]
    pub tls: TlsSpec,

    /// Password authentication of clients (`PasswordAuthenticator` and
    /// `CassandraAuthorizer`), with a superuser the operator creates and
    /// keeps in a Secret. Cannot be changed after creation yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationSpec>,
}

impl SecuritySpec {
    /// Whether clients must log in.
    pub fn authentication_enabled(&self) -> bool {
        self.authentication.as_ref().is_some_and(|a| a.enabled)
    }
}

/// Authentication settings.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationSpec {
    /// Whether clients must log in with a password (`PasswordAuthenticator`,
    /// with `CassandraAuthorizer` for permissions). When on, the operator
    /// creates a superuser whose name and password are in the Secret
    /// `superuserSecretName` (created with a random password when it does
    /// not exist), disables the default `cassandra` login once its own
    /// works, and keeps `system_auth` replicated at min(3, members) in the
    /// datacenter. Off by default until the operator can turn it on for a
    /// running cluster.
    #[serde(default)]
    pub enabled: bool,

    /// The Secret (type `kubernetes.io/basic-auth`, keys `username` and
    /// `password`) of the superuser the operator logs in as, in the
    /// Cluster's namespace. Defaults to `<cluster>-superuser`, which the
    /// operator creates; a Secret named here that does not exist is
    /// created the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub superuser_secret_name: Option<String>,
}

/// TLS settings.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Which traffic between members is encrypted: `all`, `dc` (between
    /// datacenters), `rack` (between racks) or `none` (the default, for
    /// now). When not `none`,
    /// every member must present a certificate of the cluster's authority:
    /// a node without one cannot join the ring.
    #[serde(default)]
    pub internode: InternodeEncryption,

    /// Encryption of client (CQL) connections: `required` (TLS only),
    /// `optional` (TLS and clear text on the same port, so that drivers
    /// can move to TLS one application at a time) or `none` (the default).
    #[serde(default)]
    pub client: ClientEncryption,
}

impl TlsSpec {
    /// Whether members need certificates at all.
    pub fn enabled(&self) -> bool {
        self.internode != InternodeEncryption::None || self.client != ClientEncryption::None
    }
}

/// Which traffic between members is encrypted (Cassandra's
/// `internode_encryption`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InternodeEncryption {
    /// Every connection between members.
    All,
    /// Connections between datacenters.
    Dc,
    /// Connections between racks.
    Rack,
    /// No connection.
    #[default]
    None,
}

impl InternodeEncryption {
    /// The value of `internode_encryption` in cassandra.yaml and scylla.yaml.
    pub fn as_str(self) -> &'static str {
        match self {
            InternodeEncryption::All => "all",
            InternodeEncryption::Dc => "dc",
            InternodeEncryption::Rack => "rack",
            InternodeEncryption::None => "none",
        }
    }
}

/// Encryption of client connections.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClientEncryption {
    /// TLS only.
    Required,
    /// TLS and clear text on the same port.
    Optional,
    /// Clear text only.
    #[default]
    None,
}

impl ClientEncryption {
    /// The API's name of the value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientEncryption::Required => "required",
            ClientEncryption::Optional => "optional",
            ClientEncryption::None => "none",
        }
    }
}

/// Maintenance the operator runs on the members: never two members at
/// once, never while a topology change or a roll runs, and resumed after
/// any restart of the controller or of a member.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// Run `nodetool cleanup` on every member that gave ranges away to a
    /// new member (a scale-up, a new rack), once the ring is settled, one
    /// member at a time. Default true.
    #[serde(default = "enabled")]
    pub cleanup_after_scale_up: bool,

    /// Run `nodetool upgradesstables` on every member that holds sstables
    /// of an older format, once every member runs the same major version,
    /// one member at a time. Default true.
    #[serde(default = "enabled", rename = "upgradeSSTablesAfterUpgrade")]
    pub upgrade_sstables_after_upgrade: bool,

    /// Scheduled repairs: every member repairs its primary token ranges
    /// of every replicated keyspace once per cycle of the schedule, in
    /// subranges, one member at a time, pausing (and resuming where it
    /// stopped) while a topology change or roll runs. Repairs run only
    /// when this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairSpec>,
}

impl Default for MaintenanceSpec {
    fn default() -> Self {
        MaintenanceSpec {
            cleanup_after_scale_up: true,
            upgrade_sstables_after_upgrade: true,
            repair: None,
        }
    }
}

fn enabled() -> bool {
    true
}

/// The default of `gcGraceSeconds`: Cassandra's default
/// `gc_grace_seconds` (10 days).
pub const DEFAULT_GC_GRACE_SECONDS: i64 = 864_000;

/// Scheduled repairs.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RepairSpec {
    /// When a repair cycle starts: a 5-field cron expression (minute hour
    /// day-of-month month day-of-week, in UTC, e.g. `0 2 * * 0` for Sundays
    /// at 02:00), or an interval counted from the Cluster's creation: a
    /// number and `m`, `h` or `d` (e.g. `7d`, `36h`, `90m`; at least `1m`).
    /// Every member is repaired once per cycle; a cycle must be shorter
    /// than `gcGraceSeconds`.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new(r"self.matches('^\\s*[0-9]{1,5}[mhd]\\s*$') ? !self.matches('^\\s*0+[mhd]\\s*$') : self.matches('^\\s*[0-9A-Za-z*,/-]+(\\s+[0-9A-Za-z*,/-]+){4}\\s*$')").message("schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, in UTC, e.g. \"0 2 * * 0\") or an interval of at least 1m (a number and m, h or d, e.g. 7d, 36h, 90m)"))]
    pub schedule: String,

    /// The smallest `gc_grace_seconds` of the keyspaces' tables: a keyspace
    /// not fully repaired for longer is reported (condition Degraded,
    /// reason `RepairOverdue`, and a Warning Event), since deleted data
    /// can come back after that. Default 864000 (10 days, Cassandra's
    /// default).
    #[serde(default = "default_gc_grace_seconds")]
    #[schemars(range(min = 1))]
    pub gc_grace_seconds: i64,

    /// How many members repair at once. Only 1 is supported.
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = 1))]
    #[x_kube(validation = Rule::new("self <= 1").message("parallelism: only 1 is supported (one member repairs at a time)"))]
    pub parallelism: i32,
}

fn default_gc_grace_seconds() -> i64 {
    DEFAULT_GC_GRACE_SECONDS
}

fn default_parallelism() -> i32 {
    1
}

/// Which database a cluster runs.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// Apache Cassandra.
    #[default]
    Cassandra,
    /// ScyllaDB.
    Scylla,
}

impl ClusterMode {
    /// The name used in the API (`cassandra` or `scylla`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Cassandra => "cassandra",
            ClusterMode::Scylla => "scylla",
        }
    }

    /// The image repository used when the spec names none.
    pub fn default_repository(self) -> &'static str {
        match self {
            ClusterMode::Cassandra => "cassandra",
            ClusterMode::Scylla => "scylladb/scylla",
        }
    }
}

impl std::fmt::Display for ClusterMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The datacenter of a cluster, made of racks.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatacenterSpec {
    /// Name of the Cassandra datacenter, written to cassandra-rackdc.properties
    /// and part of every StatefulSet name. A DNS-1123 label. Cannot be changed
    /// after creation (Cassandra cannot rename a datacenter).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("datacenter name is immutable: Cassandra cannot rename a datacenter"))]
    pub name: String,

    /// Racks of the datacenter, each run as one StatefulSet. Rack names must be
    /// unique. A rack can only be removed from the list once its members were
    /// scaled down to 0.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(
        validation = Rule::new("self.all(r, self.exists_one(s, s.name == r.name))").message("rack names must be unique"),
        validation = Rule::new("oldSelf.all(o, o.members == 0 || self.exists(r, r.name == o.name))").message("a rack can only be removed after its members were scaled down to 0")
    )]
    pub racks: Vec<RackSpec>,
}

/// A rack: one StatefulSet of members that share placement, resources and
/// storage, and one Cassandra rack name.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RackSpec {
    /// Name of the Cassandra rack, written to cassandra-rackdc.properties and
    /// part of the StatefulSet name. A DNS-1123 label.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// Number of Cassandra members in this rack. Members are added one at a
    /// time; lowering it decommissions members one at a time, highest ordinal
    /// first.
    #[schemars(range(min = 0))]
    pub members: i32,

    /// Name of a ConfigMap whose `cassandra.yaml` (or `scylla.yaml`) key holds a
    /// fragment merged on top of the generated configuration of every member
    /// of this rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub config_map_name: Option<String>,

    /// Name of a ConfigMap holding the configuration of the Prometheus JMX
    /// exporter agent of this rack's members (its `config.yaml` key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub jmx_exporter_config_map_name: Option<String>,

    /// Storage of the members: the PersistentVolumeClaims of each member.
    #[serde(default)]
    pub storage: StorageSpec,

    /// Annotations added to every member Pod of this rack, on top of (and
    /// winning over) the cluster's annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,

    /// Where the members may be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,

    /// Compute resources of the database container. The memory limit sizes the
    /// JVM heap (or Scylla's memory) and the CPU limit its thread pools.
    #[serde(default)]
    pub resources: ResourceRequirements,
}

/// Storage of a rack's members.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Claims every member gets, named `<template>-<pod>`. The first one holds
    /// the data directory (`/var/lib/cassandra`). With a local-disk storage
    /// class, a member whose Node is deleted is replaced and streams its data
    /// back from the other replicas.
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub volume_claim_templates: Vec<PersistentVolumeClaim>,
}

/// Scheduling constraints of a rack's members.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Node affinity of the members, e.g. the zone of the rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// Pod affinity of the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_affinity: Option<PodAffinity>,
    /// Pod anti-affinity of the members, e.g. one member per Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    /// Taints of dedicated Nodes that the members tolerate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

/// A container image.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Tag of the image.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    )]
    pub version: String,
    /// Repository of the image, without a tag.
    #[schemars(length(min = 1, max = 255))]
    pub repository: String,
}

/// The image the operator is released as: the controller runs it, and it
/// is the init container of every member unless `sidecarImage` names
/// another (the test world's kubelet also needs to recognise it).
pub const DEFAULT_OPERATOR_IMAGE: &str = "ghcr.io/cassandra-rook/cassandra-operator:0.1.0";

impl ImageSpec {
    /// `repository:version`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.repository, self.version)
    }
}

/// The observed state of a cluster, written by the controller only.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Status of each rack, by rack name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub racks: BTreeMap<String, RackStatus>,
    /// Members in all racks (the sum of the racks' members).
    #[serde(default)]
    pub members: i32,
    /// Ready members in all racks.
    #[serde(default)]
    pub ready_members: i32,
    /// Conditions of the cluster: `Ready`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` of the spec this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The maintenance the operator runs (`spec.maintenance`): what runs
    /// now and how far the repairs are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceStatus>,
}

/// Where the maintenance stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// The cleanup running now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<RunningMaintenance>,
    /// The upgradesstables running now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgradesstables: Option<RunningMaintenance>,
    /// True once every member records no sstable in a format older than
    /// the version it runs (after a major upgrade: upgradesstables is
    /// complete); false while one does; absent while a member has not
    /// recorded its count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sstables_upgraded: Option<bool>,
    /// The scheduled repairs, when `spec.maintenance.repair` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairStatus>,
}

/// A maintenance operation running on a member.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunningMaintenance {
    /// The member (its Pod's name).
    pub member: String,
    /// The keyspace it works on now, as its sidecar recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<String>,
    /// When it started (RFC 3339): the sidecar's start, or the request's
    /// time until the sidecar took it up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

/// The scheduled repairs.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RepairStatus {
    /// The start of the current cycle (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<String>,
    /// The share of the cluster's token ranges repaired in the current
    /// cycle, in percent (rounded down): each member that completed the
    /// cycle counts whole, the one repairing by the share of its subranges
    /// done.
    pub repaired_percent: i32,
    /// The member repairing now (its Pod's name), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Every keyspace the members repaired, and when it was last fully
    /// repaired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyspaces: Vec<KeyspaceRepair>,
}

/// When a keyspace was last fully repaired.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeyspaceRepair {
    /// The keyspace.
    pub name: String,
    /// When every member had repaired its primary ranges of it (the
    /// earliest of their times, RFC 3339); absent until every member has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_full_repair: Option<String>,
}

/// The observed state of one rack.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RackStatus {
    /// Members the rack's StatefulSet runs.
    pub members: i32,
    /// Members that are ready (operation mode NORMAL).
    pub ready_members: i32,
    /// Conditions of the rack, e.g. `MemberLeaving` or `MemberReplacing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RackCondition>,
}

/// An observation about a rack.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RackCondition {
    /// Type of the condition: `MemberLeaving` (a member is being
    /// decommissioned), `MemberReplacing` (a member whose disk was lost is
    /// being replaced), `DecommissionRefused` (Cassandra refused a requested
    /// decommission) or `OverridesRefused` (the rack's overrides ConfigMap
    /// sets a key the operator refuses; nothing changes until it is removed).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// One word, in PascalCase, saying why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The status of a condition.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known whether the condition holds.
    Unknown,
}

/// Rack condition type: a member of the rack is being decommissioned.
pub const RACK_CONDITION_MEMBER_LEAVING: &str = "MemberLeaving";
/// Rack condition type: a member of the rack is being replaced.
pub const RACK_CONDITION_MEMBER_REPLACING: &str = "MemberReplacing";
/// Rack condition type: Cassandra refused (or failed) a requested
/// decommission; its message quotes Cassandra's reason.
pub const RACK_CONDITION_DECOMMISSION_REFUSED: &str = "DecommissionRefused";
/// Rack condition type: the rack's overrides ConfigMap sets a key the
/// operator refuses (`crds::overrides::REFUSED_KEYS`); its message names the
/// key, the ConfigMap and why. Nothing changes until the key is removed.
pub const RACK_CONDITION_OVERRIDES_REFUSED: &str = "OverridesRefused";
/// Rack condition type: a member's sidecar does not start the database
/// because its Node cannot give it what it needs (ScyllaDB: free AIO
/// events); its message is the sidecar's, naming what is short and the fix.
pub const RACK_CONDITION_START_REFUSED: &str = "StartRefused";
/// Cluster condition type: every member of every rack is ready.
pub const CONDITION_READY: &str = "Ready";
/// Cluster condition type: the controller is changing the topology.
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Cluster condition type: the controller cannot act (invalid spec, foreign
/// objects, failed members).
pub const CONDITION_DEGRADED: &str = "Degraded";

impl Cluster {
    /// The image the members run: `repository:version`, the repository
    /// defaulting per mode.
    pub fn database_image(&self) -> String {
        let repository = self
            .spec
            .repository
            .as_deref()
            .unwrap_or_else(|| self.spec.mode.default_repository());
        format!("{repository}:{}", self.spec.version)
    }
}
