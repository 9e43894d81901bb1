//! The rules of the CRD schema and its CEL rules, again as a pure function.
//!
//! The controller calls [`validate`] before it acts: a Cluster created before a
//! rule existed, or stored by an API server without CEL, must not slip
//! through. [`validate_update`] holds the transition rules (what may not
//! change). Both name the offending field in every error.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::names;
use crate::quantity::Quantity;
use crate::v1alpha1::{
    ClientEncryption, Cluster, ClusterMode, ClusterSpec, ImageSpec, InternodeEncryption, MAX_RACKS,
    MAX_STATEFULSET_NAME, RackSpec, RepairSpec, TlsSpec,
};
use crate::versions::{Version, cassandra_upgrade};

pub mod schedule;

/// One thing wrong with a Cluster, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `spec.datacenter.racks[1].name`.
    pub field: String,
    /// What is wrong, for people.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Everything wrong with a Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl std::fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for ValidationErrors {}

impl ValidationErrors {
    /// The fields named, in order.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.field.as_str()).collect()
    }
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    fn finish(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.0))
        }
    }
}

/// Checks a Cluster as the API server would with the CRD's schema and CEL
/// rules, plus what neither can say (quantities, annotation keys).
pub fn validate(cluster: &Cluster) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    if !is_dns1035_label(name) {
        errors.add(
            "metadata.name",
            format!("{name:?} must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter): it starts the name of every member Service"),
        );
    } else if name.len() > 56 {
        errors.add(
            "metadata.name",
            format!("must be at most 56 characters (is {}): the client Service is named <cluster>-client", name.len()),
        );
    }
    validate_spec(name, &cluster.spec, &mut errors);
    errors.finish()
}

fn validate_spec(cluster: &str, spec: &ClusterSpec, errors: &mut Errors) {
    check_tag("spec.version", &spec.version, errors);
    if let Some(repository) = &spec.repository {
        check_repository("spec.repository", repository, errors);
    }
    if let Some(annotations) = &spec.annotations {
        check_annotation_keys("spec.annotations", annotations.keys(), errors);
    }
    if let Some(image) = &spec.sidecar_image {
        check_image("spec.sidecarImage", image, errors);
    }
    if let Some(repair) = spec.maintenance.as_ref().and_then(|m| m.repair.as_ref()) {
        check_repair("spec.maintenance.repair", repair, errors);
    }
    if let Some(security) = &spec.security
        && spec.mode == ClusterMode::Scylla
        && security.tls.client == crate::v1alpha1::ClientEncryption::Optional
    {
        errors.add(
            "spec.security.tls.client",
            "ScyllaDB has no optional client encryption on one port (client_encryption_options has no optional): use required or none",
        );
    }
    if let Some(security) = &spec.security
        && security.tls.enabled()
        && spec.mode == ClusterMode::Cassandra
        && let Some(version) = Version::of_tag(&spec.version)
        && version < (Version { major: 4, minor: 1 })
    {
        errors.add(
            "spec.security.tls",
            format!("TLS needs Cassandra 4.1 or later (version {:?}): members read their key and certificates as PEM files, which Cassandra reads from 4.1 on (PEMBasedSslContextFactory); upgrade first, then create a cluster with TLS", spec.version),
        );
    }
    if let Some(name) = spec
        .security
        .as_ref()
        .and_then(|s| s.authentication.as_ref())
        .and_then(|a| a.superuser_secret_name.as_ref())
        && !is_dns1123_subdomain(name)
    {
        errors.add(
            "spec.security.authentication.superuserSecretName",
            format!("{name:?} is not a valid Secret name (a DNS-1123 subdomain: lower case letters, digits, '-' and '.', at most 253 characters)"),
        );
    }

    let dc = &spec.datacenter.name;
    if !is_dns1123_label(dc) {
        errors.add(
            "spec.datacenter.name",
            format!("{dc:?} must be a DNS-1123 label (at most 63 lower case letters, digits and '-', starting and ending with a letter or digit)"),
        );
    }

    let racks = &spec.datacenter.racks;
    if racks.is_empty() {
        errors.add(
            "spec.datacenter.racks",
            "a datacenter needs at least one rack",
        );
    }
    if racks.len() > MAX_RACKS {
        errors.add(
            "spec.datacenter.racks",
            format!(
                "at most {MAX_RACKS} racks are supported (found {})",
                racks.len()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, rack) in racks.iter().enumerate() {
        let field = format!("spec.datacenter.racks[{i}]");
        if !seen.insert(rack.name.as_str()) {
            errors.add(
                format!("{field}.name"),
                format!(
                    "rack names must be unique: {:?} appears more than once",
                    rack.name
                ),
            );
        }
        validate_rack(cluster, dc, &field, rack, errors);
    }
}

fn validate_rack(cluster: &str, dc: &str, field: &str, rack: &RackSpec, errors: &mut Errors) {
    if !is_dns1123_label(&rack.name) {
        errors.add(
            format!("{field}.name"),
            format!("{:?} must be a DNS-1123 label (at most 63 lower case letters, digits and '-', starting and ending with a letter or digit)", rack.name),
        );
    }
    if rack.members < 0 {
        errors.add(
            format!("{field}.members"),
            format!("must be 0 or more (is {})", rack.members),
        );
    }
    let statefulset = names::statefulset_name(cluster, dc, &rack.name);
    if statefulset.len() > MAX_STATEFULSET_NAME {
        errors.add(
            format!("{field}.name"),
            format!(
                "the StatefulSet name {statefulset:?} is {} characters; <cluster>-<datacenter>-<rack> must be at most {MAX_STATEFULSET_NAME}, so that pod names and the controller-revision-hash label stay within 63: shorten the cluster, datacenter or rack name",
                statefulset.len()
            ),
        );
    }
    for (key, value) in [
        ("configMapName", &rack.config_map_name),
        (
            "jmxExporterConfigMapName",
            &rack.jmx_exporter_config_map_name,
        ),
    ] {
        if let Some(value) = value.as_ref().filter(|v| !is_dns1123_subdomain(v)) {
            errors.add(
                format!("{field}.{key}"),
                format!("{value:?} is not a valid ConfigMap name (a DNS-1123 subdomain of at most 253 characters)"),
            );
        }
    }
    if let Some(annotations) = &rack.annotations {
        check_annotation_keys(&format!("{field}.annotations"), annotations.keys(), errors);
    }

    let templates = &rack.storage.volume_claim_templates;
    if templates.len() > 8 {
        errors.add(
            format!("{field}.storage.volumeClaimTemplates"),
            format!(
                "at most 8 volume claim templates are supported (found {})",
                templates.len()
            ),
        );
    }
    let mut template_names = BTreeSet::new();
    for (j, template) in templates.iter().enumerate() {
        let tfield = format!("{field}.storage.volumeClaimTemplates[{j}].metadata.name");
        match template.metadata.name.as_deref() {
            None | Some("") => errors.add(tfield, "every volume claim template needs a name"),
            Some(name) => {
                if !is_dns1123_label(name) {
                    errors.add(
                        tfield.clone(),
                        format!("{name:?} must be a DNS-1123 label: it starts the name of every member's PersistentVolumeClaim"),
                    );
                }
                if !template_names.insert(name) {
                    errors.add(tfield, format!("volume claim template names must be unique: {name:?} appears more than once"));
                }
            }
        }
    }

    let resources = &rack.resources;
    let parse_all =
        |kind: &str, list: &Option<BTreeMap<String, K8sQuantity>>, errors: &mut Errors| {
            let mut parsed = BTreeMap::new();
            for (resource, q) in list.iter().flatten() {
                match Quantity::parse(&q.0) {
                    Ok(v) => {
                        parsed.insert(resource.clone(), v);
                    }
                    Err(e) => errors.add(
                        format!("{field}.resources.{kind}.{resource}"),
                        e.to_string(),
                    ),
                }
            }
            parsed
        };
    let limits = parse_all("limits", &resources.limits, errors);
    let requests = parse_all("requests", &resources.requests, errors);
    for (resource, request) in &requests {
        if limits.get(resource).is_some_and(|limit| request > limit) {
            errors.add(
                format!("{field}.resources.requests.{resource}"),
                format!("must be less than or equal to the {resource} limit"),
            );
        }
    }
}

fn check_repair(field: &str, repair: &RepairSpec, errors: &mut Errors) {
    if let Err(why) = schedule::Schedule::parse(&repair.schedule) {
        errors.add(
            format!("{field}.schedule"),
            format!("{why}: schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, in UTC, e.g. \"0 2 * * 0\") or an interval of at least 1m (a number and m, h or d, e.g. 7d, 36h, 90m)"),
        );
    }
    if repair.gc_grace_seconds < 1 {
        errors.add(
            format!("{field}.gcGraceSeconds"),
            format!("must be 1 or more (is {})", repair.gc_grace_seconds),
        );
    }
    if repair.parallelism != 1 {
        errors.add(
            format!("{field}.parallelism"),
            format!(
                "only 1 is supported (one member repairs at a time), not {}",
                repair.parallelism
            ),
        );
    }
}

/// Checks what may not change between the stored Cluster and an update (the
/// CRD's transition rules): the mode, the datacenter name, racks removed
/// while they still had members, and version changes Cassandra does not
/// support (stricter than the CRD's CEL, which cannot list the lines each
/// major upgrades from).
pub fn validate_update(old: &Cluster, new: &Cluster) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    if old.spec.mode != new.spec.mode {
        errors.add(
            "spec.mode",
            format!(
                "mode is immutable: a cluster cannot change database (was {}, now {})",
                old.spec.mode, new.spec.mode
            ),
        );
    }
    if old.spec.datacenter.name != new.spec.datacenter.name {
        errors.add(
            "spec.datacenter.name",
            format!(
                "datacenter name is immutable: Cassandra cannot rename a datacenter (was {:?}, now {:?})",
                old.spec.datacenter.name, new.spec.datacenter.name
            ),
        );
    }
    if old.spec.mode == ClusterMode::Cassandra
        && new.spec.mode == ClusterMode::Cassandra
        && let (Some(from), Some(to)) = (
            Version::of_tag(&old.spec.version),
            Version::of_tag(&new.spec.version),
        )
        && let Err(why) = cassandra_upgrade(from, to)
    {
        errors.add("spec.version", why.to_string());
    }
    let tls = |c: &Cluster| {
        c.spec
            .security
            .as_ref()
            .map(|s| s.tls.clone())
            .unwrap_or_default()
    };
    let (old_tls, new_tls): (TlsSpec, TlsSpec) = (tls(old), tls(new));
    let cassandra = new.spec.mode == ClusterMode::Cassandra;
    let (from, to) = (old_tls.internode, new_tls.internode);
    if from != to && !(from == InternodeEncryption::None && cassandra) {
        errors.add(
            "spec.security.tls.internode",
            format!("spec.security.tls.internode can change on an existing cluster only from none, in Cassandra mode (was {}, now {}): the operator then moves the members to TLS in steps, one member at a time; turning it off, or switching between all, dc and rack, would leave members refusing each other's connections during the roll, and ScyllaDB has no transitional mode; create a new cluster with the setting", from.as_str(), to.as_str()),
        );
    }
    let (from, to) = (old_tls.client, new_tls.client);
    let raised = from == ClientEncryption::None
        || (from == ClientEncryption::Optional && to == ClientEncryption::Required);
    if from != to && !(raised && cassandra) {
        errors.add(
            "spec.security.tls.client",
            format!("spec.security.tls.client can only be raised on an existing cluster (none to optional or required, optional to required), in Cassandra mode (was {}, now {}): lowering it would send clients' data in clear text, and ScyllaDB has no optional client encryption to move through; create a new cluster with the setting", from.as_str(), to.as_str()),
        );
    }
    let authentication = |c: &Cluster| {
        c.spec
            .security
            .as_ref()
            .and_then(|s| s.authentication.clone())
            .unwrap_or_default()
    };
    let (old_auth, new_auth) = (authentication(old), authentication(new));
    if old_auth.enabled != new_auth.enabled {
        errors.add(
            "spec.security.authentication.enabled",
            format!("spec.security.authentication.enabled cannot be changed on an existing cluster yet (was {}, now {}): turning authentication on breaks every client that does not log in yet, and turning it off opens the data to anyone; create a new cluster with the setting", old_auth.enabled, new_auth.enabled),
        );
    }
    if old_auth.superuser_secret_name != new_auth.superuser_secret_name {
        errors.add(
            "spec.security.authentication.superuserSecretName",
            "spec.security.authentication.superuserSecretName cannot be changed on an existing cluster: the operator logs in with the superuser it created from that Secret; change the Secret's password with ALTER ROLE instead",
        );
    }
    for rack in &old.spec.datacenter.racks {
        if rack.members != 0
            && !new
                .spec
                .datacenter
                .racks
                .iter()
                .any(|r| r.name == rack.name)
        {
            errors.add(
                "spec.datacenter.racks",
                format!(
                    "rack {:?} can only be removed after its members were scaled down to 0",
                    rack.name
                ),
            );
        }
    }
    errors.finish()
}

fn check_tag(field: &str, tag: &str, errors: &mut Errors) {
    let valid = !tag.is_empty()
        && tag.len() <= 128
        && tag.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphanumeric() || c == '_' || (i > 0 && (c == '.' || c == '-'))
        });
    if !valid {
        errors.add(
            field,
            format!("{tag:?} is not a valid image tag (letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-')"),
        );
    }
}

fn check_repository(field: &str, repository: &str, errors: &mut Errors) {
    let valid = !repository.is_empty()
        && repository.len() <= 255
        && !repository.contains(['@', ' '])
        && repository
            .rsplit('/')
            .next()
            .is_some_and(|last| !last.contains(':'))
        && repository.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-:".contains(c))
        });
    if !valid {
        errors.add(
            field,
            format!(
                "{repository:?} is not a valid image repository (host/path without a tag or digest)"
            ),
        );
    }
}

fn check_image(field: &str, image: &ImageSpec, errors: &mut Errors) {
    check_tag(&format!("{field}.version"), &image.version, errors);
    check_repository(&format!("{field}.repository"), &image.repository, errors);
}

fn check_annotation_keys<'a>(
    field: &str,
    keys: impl Iterator<Item = &'a String>,
    errors: &mut Errors,
) {
    for key in keys {
        if !is_qualified_name(key) {
            errors.add(
                format!("{field}[{key}]"),
                "annotation keys must be qualified names: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            );
        }
    }
}

/// A DNS-1123 label: at most 63 lower case alphanumerics or '-', starting and
/// ending with an alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 in all.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A qualified name (label and annotation keys): `[prefix/]name`, the prefix
/// a DNS-1123 subdomain, the name at most 63 alphanumerics, '-', '_' or '.',
/// starting and ending with an alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
        return false;
    }
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_maintenance(maintenance: &str) -> Cluster {
        serde_norway::from_str(&format!(
            "metadata: {{name: c, namespace: db}}\nspec: {{version: 4.1.8, datacenter: {{name: dc, racks: [{{name: a, members: 3}}]}}, maintenance: {maintenance}}}"
        ))
        .expect("a Cluster")
    }

    /// Every maintenance field is optional and defaults as documented; a
    /// schedule that is no cron expression or interval, or a parallelism
    /// other than 1, is refused and named.
    #[test]
    fn maintenance_is_optional_and_its_schedule_checked() {
        let defaults = with_maintenance("{}");
        let maintenance = defaults.spec.maintenance.clone().unwrap();
        assert!(maintenance.cleanup_after_scale_up && maintenance.upgrade_sstables_after_upgrade);
        assert_eq!(maintenance.repair, None);
        assert_eq!(validate(&defaults), Ok(()));
        let repair = with_maintenance("{repair: {schedule: '0 2 * * 0'}}");
        let spec = repair.spec.maintenance.clone().unwrap().repair.unwrap();
        assert_eq!(
            (spec.gc_grace_seconds, spec.parallelism),
            (crate::v1alpha1::DEFAULT_GC_GRACE_SECONDS, 1)
        );
        assert_eq!(validate(&repair), Ok(()));
        assert_eq!(
            validate(&with_maintenance("{repair: {schedule: 90m}}")),
            Ok(())
        );
        for (bad, field) in [
            (
                "{repair: {schedule: weekly}}",
                "spec.maintenance.repair.schedule",
            ),
            (
                "{repair: {schedule: 0m}}",
                "spec.maintenance.repair.schedule",
            ),
            (
                "{repair: {schedule: '0 0 30 2 *'}}",
                "spec.maintenance.repair.schedule",
            ),
            (
                "{repair: {schedule: 7d, parallelism: 2}}",
                "spec.maintenance.repair.parallelism",
            ),
            (
                "{repair: {schedule: 7d, gcGraceSeconds: 0}}",
                "spec.maintenance.repair.gcGraceSeconds",
            ),
        ] {
            let errors = validate(&with_maintenance(bad)).expect_err(bad);
            assert_eq!(errors.fields(), vec![field], "{bad}: {errors}");
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("us-east-1a"));
        assert!(is_dns1123_label("1a"));
        assert!(!is_dns1123_label("Us"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1035_label("a1"));
        assert!(!is_dns1035_label("1a"));
        assert!(is_dns1123_subdomain("my.config-map"));
        assert!(!is_dns1123_subdomain("my..map"));
        assert!(is_qualified_name("example.com/team"));
        assert!(is_qualified_name("Team_A.b"));
        assert!(!is_qualified_name("example.com/"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("_a"));
    }
}
