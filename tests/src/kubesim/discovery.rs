//! The kinds kubesim serves: the built-in table, the kinds a
//! CustomResourceDefinition declares, and the discovery documents (`/api`,
//! `/api/v1`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`) built
//! from them. Pure: no I/O.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Where the replica count of a scalable kind lives (JSON pointers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// e.g. `/spec/replicas`
    pub spec_replicas: String,
    /// e.g. `/status/replicas`
    pub status_replicas: String,
    /// e.g. `/status/selector` (a string selector), when declared
    pub label_selector: Option<String>,
}

/// One kind of object the API serves.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// Served versions, the preferred (storage) one first.
    pub versions: Vec<String>,
    /// Resource name in URLs, e.g. `pods`.
    pub plural: String,
    /// e.g. `pod`
    pub singular: String,
    /// e.g. `Pod`
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: Vec<String>,
    /// kubectl categories (`all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource: the main resource ignores status changes.
    pub status_subresource: bool,
    /// Has a `/scale` subresource.
    pub scale: Option<ScalePaths>,
    /// `metadata.generation` is kept and bumped on spec changes.
    pub generation: bool,
    /// Status given to a new object (`None`: keep what the client sent;
    /// `Some(Null)`: drop it).
    pub initial_status: Option<Value>,
    /// DELETE answers with the deleted object rather than a success Status.
    pub return_deleted_object: bool,
    /// A custom resource (served from a CRD): JSON merge patches only, no
    /// strategic merge, schema validation.
    pub custom: bool,
    /// openAPIV3Schema per version, for custom resources.
    pub schemas: BTreeMap<String, Value>,
    /// The same schemas' CEL rules, compiled once when the CRD is read
    /// (every write of a custom resource evaluates them).
    pub compiled: BTreeMap<String, std::sync::Arc<kube_cel::CompiledSchema>>,
    /// Field selectors accepted besides `metadata.name` and
    /// `metadata.namespace`.
    pub field_labels: Vec<String>,
    /// A CRD's `additionalPrinterColumns`, per version.
    pub printer_columns: BTreeMap<String, Vec<Value>>,
    /// Stored as another kind (group, plural) and converted on the way in
    /// and out (events.k8s.io Events are core Events).
    pub stored_as: Option<(String, String)>,
}

impl ResourceType {
    /// `pods` or `statefulsets.apps`: how the API server names a resource in
    /// its messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Pod` or `Cluster.cassandra.rook.io`: how Invalid errors name a kind.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// `v1` or `apps/v1` for a version.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// The storage version.
    pub fn storage_version(&self) -> &str {
        &self.versions[0]
    }

    /// Has an `/approval` subresource (CertificateSigningRequests).
    pub fn approval_subresource(&self) -> bool {
        !self.custom
            && self.group == "certificates.k8s.io"
            && self.plural == "certificatesigningrequests"
    }

    /// Whether a field selector on this field is supported.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || field == "metadata.namespace"
            || self.field_labels.iter().any(|f| f == field)
    }
}

struct Builtin<'a> {
    group: &'a str,
    version: &'a str,
    plural: &'a str,
    kind: &'a str,
    namespaced: bool,
    short: &'a [&'a str],
}

fn builtin(b: Builtin<'_>) -> ResourceType {
    ResourceType {
        group: b.group.into(),
        versions: vec![b.version.into()],
        plural: b.plural.into(),
        singular: b.kind.to_lowercase(),
        kind: b.kind.into(),
        namespaced: b.namespaced,
        short_names: b.short.iter().map(|s| s.to_string()).collect(),
        categories: vec![],
        status_subresource: false,
        scale: None,
        generation: false,
        initial_status: None,
        return_deleted_object: false,
        custom: false,
        schemas: BTreeMap::new(),
        compiled: BTreeMap::new(),
        field_labels: vec![],
        printer_columns: BTreeMap::new(),
        stored_as: None,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The built-in kinds the operator and kubectl use.
pub fn builtin_types() -> Vec<ResourceType> {
    let b = |group, version, plural, kind, namespaced, short| {
        builtin(Builtin {
            group,
            version,
            plural,
            kind,
            namespaced,
            short,
        })
    };
    let mut ns = b("", "v1", "namespaces", "Namespace", false, &["ns"]);
    ns.status_subresource = true;
    ns.initial_status = Some(json!({"phase": "Active"}));
    ns.return_deleted_object = true;
    ns.field_labels = strings(&["status.phase"]);
    let mut node = b("", "v1", "nodes", "Node", false, &["no"]);
    node.status_subresource = true;
    node.return_deleted_object = true;
    node.field_labels = strings(&["spec.unschedulable"]);
    let mut pod = b("", "v1", "pods", "Pod", true, &["po"]);
    pod.categories = strings(&["all"]);
    pod.status_subresource = true;
    pod.generation = true;
    pod.initial_status = Some(json!({"phase": "Pending"}));
    pod.return_deleted_object = true;
    pod.field_labels = strings(&[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ]);
    let mut svc = b("", "v1", "services", "Service", true, &["svc"]);
    svc.categories = strings(&["all"]);
    svc.status_subresource = true;
    svc.initial_status = Some(json!({"loadBalancer": {}}));
    svc.return_deleted_object = true;
    let ep = b("", "v1", "endpoints", "Endpoints", true, &["ep"]);
    let mut pv = b(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"],
    );
    pv.status_subresource = true;
    pv.initial_status = Some(json!({"phase": "Pending"}));
    pv.return_deleted_object = true;
    let mut pvc = b(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
    );
    pvc.status_subresource = true;
    pvc.initial_status = Some(json!({"phase": "Pending"}));
    pvc.return_deleted_object = true;
    let cm = b("", "v1", "configmaps", "ConfigMap", true, &["cm"]);
    let mut secret = b("", "v1", "secrets", "Secret", true, &[]);
    secret.field_labels = strings(&["type"]);
    let sa = b("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"]);
    let mut ev = b("", "v1", "events", "Event", true, &["ev"]);
    ev.field_labels = strings(&[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]);
    let mut ev2 = b("events.k8s.io", "v1", "events", "Event", true, &["ev"]);
    ev2.stored_as = Some((String::new(), "events".into()));
    ev2.field_labels = strings(&[
        "regarding.kind",
        "regarding.name",
        "regarding.namespace",
        "reason",
        "type",
    ]);
    let mut sts = b("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"]);
    sts.categories = strings(&["all"]);
    sts.status_subresource = true;
    sts.generation = true;
    sts.initial_status = Some(json!({"replicas": 0, "availableReplicas": 0}));
    sts.scale = Some(ScalePaths {
        spec_replicas: "/spec/replicas".into(),
        status_replicas: "/status/replicas".into(),
        label_selector: None,
    });
    let cr = b(
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
    );
    // Stored and served only (no controller runs them): the install
    // manifests and examples use them.
    let replicas_scale = || ScalePaths {
        spec_replicas: "/spec/replicas".into(),
        status_replicas: "/status/replicas".into(),
        label_selector: None,
    };
    let mut deploy = b("apps", "v1", "deployments", "Deployment", true, &["deploy"]);
    deploy.categories = strings(&["all"]);
    deploy.status_subresource = true;
    deploy.generation = true;
    deploy.initial_status = Some(json!({}));
    deploy.scale = Some(replicas_scale());
    let mut rs = b("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"]);
    rs.categories = strings(&["all"]);
    rs.status_subresource = true;
    rs.generation = true;
    rs.initial_status = Some(json!({"replicas": 0}));
    rs.scale = Some(replicas_scale());
    let mut ds = b("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"]);
    ds.categories = strings(&["all"]);
    ds.status_subresource = true;
    ds.generation = true;
    ds.initial_status = Some(
        json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
    );
    let role = b(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
    );
    let rb = b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
    );
    let crole = b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
    );
    let crb = b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
    );
    let mut pdb = b(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
    );
    pdb.status_subresource = true;
    pdb.generation = true;
    pdb.initial_status = Some(
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
    );
    let lease = b("coordination.k8s.io", "v1", "leases", "Lease", true, &[]);
    let mut crd = b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
    );
    crd.status_subresource = true;
    crd.generation = true;
    crd.return_deleted_object = true;
    let sc = b(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"],
    );
    // Evaluated on every client's write by crate::kubesim::admission_policy.
    let mut vap = b(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        false,
        &[],
    );
    vap.status_subresource = true;
    vap.generation = true;
    vap.categories = strings(&["api-extensions"]);
    let mut vapb = b(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        false,
        &[],
    );
    vapb.generation = true;
    vapb.categories = strings(&["api-extensions"]);
    // Members' TLS certificates (crate::kubesim::store::certificates):
    // `/status` for the signer, `/approval` for the approver.
    let mut csr = b(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        &["csr"],
    );
    csr.status_subresource = true;
    csr.initial_status = Some(json!({}));
    csr.field_labels = strings(&["spec.signerName"]);
    vec![
        ns, node, pod, svc, ep, pv, pvc, cm, secret, sa, ev, ev2, sts, cr, deploy, rs, ds, role,
        rb, crole, crb, pdb, lease, crd, sc, vap, vapb, csr,
    ]
}

/// The schema node a CEL rule's `fieldPath` names, from the node that
/// holds the rule (apiextensions' `validFieldPath`): `.name` and
/// `['name']` go through `properties` (or `additionalProperties`), `[N]`
/// through `items`. `None`: not a valid path.
fn rule_field_path_target<'a>(node: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = node;
    let mut rest = path;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let child = |node: &'a Value, key: &str| {
            node.pointer(&format!("/properties/{key}"))
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
        };
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            if key.is_empty() {
                return None;
            }
            node = child(node, key)?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']")?;
            node = child(node, &after[..end])?;
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            after[..end].parse::<usize>().ok()?;
            node = node.get("items")?;
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(node)
}

/// The API server's refusals of `fieldPath`s of a schema's CEL rules that
/// name no node of the schema, for every node that holds rules (`at`: the
/// node's path in the message). A CRD's schema describes no `metadata`
/// beyond what it declares, so `.metadata.name` is refused at the root.
fn rule_field_path_errors(node: &Value, at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, rule) in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(path) = rule.get("fieldPath").and_then(Value::as_str)
            && rule_field_path_target(node, path).is_none()
        {
            errors.push(format!(
                "spec.validation.{at}.x-kubernetes-validations[{i}].fieldPath: Invalid value: \"{path}\": must be a valid path"
            ));
        }
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            errors.extend(rule_field_path_errors(
                child,
                &format!("{at}.properties[{name}]"),
            ));
        }
    }
    for (key, shown) in [
        ("items", "items"),
        ("additionalProperties", "additionalProperties"),
    ] {
        if let Some(child) = node.get(key).filter(|c| c.is_object()) {
            errors.extend(rule_field_path_errors(child, &format!("{at}.{shown}")));
        }
    }
    errors
}

/// The kind a CustomResourceDefinition declares, or why it cannot be served.
pub fn crd_type(crd: &Value) -> Result<ResourceType, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let names = spec.get("names").cloned().unwrap_or(Value::Null);
    let group = s(spec.get("group"));
    let plural = s(names.get("plural"));
    let kind = s(names.get("kind"));
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Err("spec.group, spec.names.plural and spec.names.kind are required".into());
    }
    let mut versions = Vec::new();
    let mut schemas = BTreeMap::new();
    let mut printer_columns = BTreeMap::new();
    let mut status_subresource = false;
    let mut scale = None;
    let mut field_labels = Vec::new();
    let mut storage = None;
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(v.get("name"));
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage = Some(name.clone());
        }
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            printer_columns.insert(name.clone(), cols.clone());
        }
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            if let Some(e) = rule_field_path_errors(schema, "openAPIV3Schema").first() {
                return Err(e.clone());
            }
            schemas.insert(name.clone(), schema.clone());
        }
        if let Some(sub) = v.get("subresources") {
            status_subresource |= sub.get("status").is_some();
            if let Some(sc) = sub.get("scale") {
                let ptr = |p: Option<&Value>| {
                    p.and_then(Value::as_str)
                        .map(|p| p.trim_start_matches('.').replace('.', "/"))
                };
                scale = Some(ScalePaths {
                    spec_replicas: format!(
                        "/{}",
                        ptr(sc.get("specReplicasPath")).unwrap_or_default()
                    ),
                    status_replicas: format!(
                        "/{}",
                        ptr(sc.get("statusReplicasPath")).unwrap_or_default()
                    ),
                    label_selector: ptr(sc.get("labelSelectorPath")).map(|p| format!("/{p}")),
                });
            }
        }
        for f in v
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            field_labels.push(s(f.get("jsonPath")).trim_start_matches('.').to_string());
        }
        versions.push(name);
    }
    if versions.is_empty() {
        return Err(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
                .into(),
        );
    }
    if let Some(storage) = storage
        && let Some(i) = versions.iter().position(|v| *v == storage)
    {
        let v = versions.remove(i);
        versions.insert(0, v);
    }
    let list = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    Ok(ResourceType {
        singular: Some(s(names.get("singular")))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: list(names.get("shortNames")),
        categories: list(names.get("categories")),
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        group,
        versions,
        plural,
        kind,
        status_subresource,
        scale,
        generation: true,
        initial_status: if status_subresource {
            Some(Value::Null)
        } else {
            None
        },
        return_deleted_object: true,
        custom: true,
        compiled: schemas
            .iter()
            .map(|(v, s)| (v.clone(), std::sync::Arc::new(kube_cel::compile_schema(s))))
            .collect(),
        schemas,
        field_labels,
        printer_columns,
        stored_as: None,
    })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// An `APIResourceList` for one group version.
pub fn resource_list(group: &str, version: &str, types: &[&ResourceType]) -> Value {
    let mut resources = Vec::new();
    for t in types {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.approval_subresource() {
            resources.push(json!({
                "name": format!("{}/approval", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if t.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if t.group.is_empty() && t.plural == "pods" {
            resources.push(json!({
                "name": "pods/log",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get"],
            }));
        }
        if t.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// The `APIGroup` of a named group with its versions (preferred first).
pub fn api_group(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// The `APIGroupList` of `/apis` from (group, versions) pairs.
pub fn api_group_list(groups: &[(String, Vec<String>)]) -> Value {
    let gs: Vec<Value> = groups
        .iter()
        .map(|(g, vs)| {
            let mut v = api_group(g, vs);
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            v
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// The `APIVersions` of `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// The `/version` document.
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kubesim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_field_path_must_name_a_node_of_the_schema() {
        let schema = json!({"type": "object",
            "x-kubernetes-validations": [
                {"rule": "true", "fieldPath": ".spec.racks"},
                {"rule": "true", "fieldPath": ".spec.labels['a.b']"},
                {"rule": "true", "fieldPath": ".spec.racks[0].name"}],
            "properties": {"spec": {"type": "object", "properties": {
                "racks": {"type": "array", "items": {"type": "object",
                    "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}});
        assert_eq!(
            rule_field_path_errors(&schema, "openAPIV3Schema"),
            Vec::<String>::new()
        );
        // What the real API server refused in the operator's CRD: the
        // schema declares no metadata.
        let mut bad = schema.clone();
        bad["x-kubernetes-validations"][1]["fieldPath"] = json!(".metadata.name");
        bad["properties"]["spec"]["x-kubernetes-validations"] =
            json!([{"rule": "true", "fieldPath": ".rack"}]);
        assert_eq!(
            rule_field_path_errors(&bad, "openAPIV3Schema"),
            vec![
                "spec.validation.openAPIV3Schema.x-kubernetes-validations[1].fieldPath: Invalid value: \".metadata.name\": must be a valid path".to_string(),
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].fieldPath: Invalid value: \".rack\": must be a valid path".to_string(),
            ]
        );
    }

    #[test]
    fn crd_declares_a_served_kind() {
        let crd = serde_json::to_value(crds::crd::definition()).unwrap();
        let t = crd_type(&crd).unwrap();
        assert_eq!(t.group, "cassandra.rook.io");
        assert_eq!(t.versions, vec!["v1alpha1".to_string()]);
        assert_eq!(t.plural, "clusters");
        assert_eq!(t.kind, "Cluster");
        assert!(t.namespaced);
        assert!(t.status_subresource);
        assert!(t.schemas.contains_key("v1alpha1"));
        assert_eq!(t.qualified(), "clusters.cassandra.rook.io");
        assert_eq!(t.qualified_kind(), "Cluster.cassandra.rook.io");
    }

    #[test]
    fn storage_version_comes_first_and_unserved_are_hidden() {
        let crd = json!({"spec": {"group": "g.io", "scope": "Cluster", "names": {"plural": "ws", "kind": "W"},
            "versions": [
                {"name": "v1", "served": true, "storage": false},
                {"name": "v2", "served": true, "storage": true,
                 "subresources": {"scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}}},
                {"name": "v0", "served": false, "storage": false}]}});
        let t = crd_type(&crd).unwrap();
        assert_eq!(t.versions, vec!["v2".to_string(), "v1".to_string()]);
        assert!(!t.namespaced);
        assert_eq!(t.singular, "w");
        let scale = t.scale.unwrap();
        assert_eq!(scale.spec_replicas, "/spec/size");
        assert_eq!(scale.status_replicas, "/status/size");
        assert_eq!(scale.label_selector, None);
    }

    #[test]
    fn resource_list_has_subresources() {
        let types = builtin_types();
        let sts = types.iter().find(|t| t.plural == "statefulsets").unwrap();
        let list = resource_list("apps", "v1", &[sts]);
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["statefulsets", "statefulsets/status", "statefulsets/scale"]
        );
        assert_eq!(list["groupVersion"], "apps/v1");
        assert_eq!(list["resources"][2]["kind"], "Scale");
    }
}
