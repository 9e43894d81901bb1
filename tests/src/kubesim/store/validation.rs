//! Validation of built-in kinds as the API server's
//! pkg/apis/*/validation does it, for what the operator and its users
//! write: a Pod's immutable spec (`ValidatePodUpdate`), a Service's
//! cluster IPs (`validateUpgradeDowngradeClusterIPs`), a RoleBinding's
//! roleRef, a ControllerRevision's data, and the required fields and
//! formats of Pods, Services, StatefulSets (selector, template labels,
//! update strategy), PVCs, PDBs, ConfigMaps and Roles. Each check gives the
//! causes of a 422 (field path, reason, `<field>: <message>`), worded as
//! the real messages are. Pure: no I/O.

use serde_json::Value;

/// One cause of an Invalid error.
pub type Cause = (String, &'static str, String);

fn required(field: &str, detail: &str) -> Cause {
    let m = if detail.is_empty() {
        format!("{field}: Required value")
    } else {
        format!("{field}: Required value: {detail}")
    };
    (field.to_string(), "FieldValueRequired", m)
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    (
        field.to_string(),
        "FieldValueInvalid",
        format!("{field}: Invalid value: {value}: {detail}"),
    )
}

fn forbidden(field: &str, detail: &str) -> Cause {
    (
        field.to_string(),
        "FieldValueForbidden",
        format!("{field}: Forbidden: {detail}"),
    )
}

/// How Go's `%#v` and `%q` print a value in an Invalid message.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) if a.iter().all(Value::is_string) => format!(
            "[]string{{{}}}",
            a.iter()
                .map(|s| format!("{:?}", s.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

const DNS_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `ValidatePodSpec`, the part the operator's pods exercise: containers
/// present, named as DNS labels, unique, with an image.
fn pod_spec(spec: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    let containers = arr(spec, "/containers");
    if containers.is_empty() {
        out.push(required(&format!("{path}.containers"), ""));
    }
    let mut seen = Vec::new();
    for (kind, list) in [
        ("initContainers", arr(spec, "/initContainers")),
        ("containers", containers),
    ] {
        for (i, c) in list.iter().enumerate() {
            let f = format!("{path}.{kind}[{i}]");
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                out.push(required(&format!("{f}.name"), ""));
            } else if !is_dns_label(name) {
                out.push(invalid(
                    &format!("{f}.name"),
                    &go_value(&c["name"]),
                    DNS_LABEL,
                ));
            } else if seen.contains(&name) {
                out.push((
                    format!("{f}.name"),
                    "FieldValueDuplicate",
                    format!("{f}.name: Duplicate value: {name:?}"),
                ));
            } else {
                seen.push(name);
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(|i| i.trim().is_empty())
            {
                out.push(required(&format!("{f}.image"), ""));
            }
        }
    }
    out
}

/// The causes of an invalid new object of kind (group, plural).
pub fn on_create(group: &str, plural: &str, obj: &Value) -> Vec<Cause> {
    match (group, plural) {
        ("", "pods") => pod_spec(obj.get("spec").unwrap_or(&Value::Null), "spec"),
        ("", "services") => service(obj),
        ("apps", "statefulsets") => statefulset(obj),
        ("", "persistentvolumeclaims") => pvc(obj),
        ("policy", "poddisruptionbudgets") => pdb(obj),
        ("", "configmaps") => config_map(obj),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => role(obj),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => binding(obj),
        _ => Vec::new(),
    }
}

/// The causes of an invalid update (main resource) of kind (group, plural).
pub fn on_update(group: &str, plural: &str, old: &Value, new: &Value) -> Vec<Cause> {
    let mut out = on_create(group, plural, new);
    match (group, plural) {
        ("", "pods") => out.extend(pod_update(old, new)),
        ("", "services") => out.extend(service_update(old, new)),
        // ValidateControllerRevisionUpdate: the data is immutable (the
        // revision number may change: a rollback renumbers).
        ("apps", "controllerrevisions") if old.get("data") != new.get("data") => {
            let raw = new.get("data").map(Value::to_string).unwrap_or_default();
            let bytes: Vec<String> = raw.bytes().map(|b| format!("0x{b:x}")).collect();
            out.push(invalid(
                "data",
                &format!(
                    "runtime.RawExtension{{Raw:[]uint8{{{}}}, Object:runtime.Object(nil)}}",
                    bytes.join(", ")
                ),
                "field is immutable",
            ));
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings")
            if old.get("roleRef") != new.get("roleRef") =>
        {
            out.push(invalid(
                "roleRef",
                &go_role_ref(new.get("roleRef").unwrap_or(&Value::Null)),
                "cannot change roleRef",
            ));
        }
        _ => {}
    }
    out
}

fn go_role_ref(r: &Value) -> String {
    let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    format!(
        "rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}",
        f("apiGroup"),
        f("kind"),
        f("name")
    )
}

/// The message of `ValidatePodUpdate` when the spec changed beyond what
/// may change (Kubernetes 1.27 to 1.33; the API server follows it with a
/// go-cmp diff of the internal PodSpec, which kubesim sums up as the
/// changed fields).
pub const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate`: the new spec with what may change (images, a
/// lower `activeDeadlineSeconds`, added tolerations, a negative grace
/// period set to 1, removed scheduling gates) taken back from the old
/// one must equal the old one.
fn pod_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let (Some(old_spec), Some(new_spec)) = (old.get("spec"), new.get("spec")) else {
        return out;
    };
    // Go decodes an explicit null as an absent field.
    let (old_spec, new_spec) = (&without_nulls(old_spec), &without_nulls(new_spec));
    let mut munged = new_spec.clone();
    for kind in ["containers", "initContainers"] {
        let olds = arr(old_spec, &format!("/{kind}"));
        if let Some(list) = munged.get_mut(kind).and_then(Value::as_array_mut) {
            for (i, c) in list.iter_mut().enumerate() {
                if let Some(o) = olds.get(i) {
                    c["image"] = o.get("image").cloned().unwrap_or(Value::Null);
                }
            }
        }
    }
    match (
        old_spec
            .get("activeDeadlineSeconds")
            .and_then(Value::as_i64),
        new_spec
            .get("activeDeadlineSeconds")
            .and_then(Value::as_i64),
    ) {
        (Some(_), None) => out.push(invalid(
            "spec.activeDeadlineSeconds",
            "null",
            "must not update from a positive integer to nil value",
        )),
        (Some(o), Some(n)) if n > o => out.push(invalid(
            "spec.activeDeadlineSeconds",
            &n.to_string(),
            "must be less than or equal to previous value",
        )),
        _ => {}
    }
    if let Some(v) = old_spec.get("activeDeadlineSeconds") {
        munged["activeDeadlineSeconds"] = v.clone();
    } else if let Some(m) = munged.as_object_mut() {
        m.remove("activeDeadlineSeconds");
    }
    // validateOnlyAddedTolerations
    let new_tolerations = arr(new_spec, "/tolerations");
    for t in arr(old_spec, "/tolerations") {
        if !new_tolerations.contains(t) {
            out.push(forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            break;
        }
    }
    set_or_remove(&mut munged, "tolerations", old_spec.get("tolerations"));
    let old_grace = old_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0)
        && new_spec
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(1)
    {
        set_or_remove(
            &mut munged,
            "terminationGracePeriodSeconds",
            old_spec.get("terminationGracePeriodSeconds"),
        );
    }
    // validateOnlyDeletedSchedulingGates
    let old_gates = arr(old_spec, "/schedulingGates");
    if arr(new_spec, "/schedulingGates")
        .iter()
        .all(|g| old_gates.contains(g))
    {
        set_or_remove(
            &mut munged,
            "schedulingGates",
            old_spec.get("schedulingGates"),
        );
    } else {
        out.push(forbidden(
            "spec.schedulingGates",
            "only deletion is allowed, but found new scheduling gate",
        ));
    }
    if munged != *old_spec {
        let changed: Vec<String> = keys(old_spec)
            .chain(keys(&munged))
            .filter(|k| old_spec.get(k) != munged.get(k))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|k| format!("  \t{}: ...", go_field(&k)))
            .collect();
        out.push(forbidden(
            "spec",
            &format!(
                "{POD_UPDATE_FORBIDDEN}\n  core.PodSpec{{\n{}\n  }}\n",
                changed.join("\n")
            ),
        ));
    }
    out
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn keys(v: &Value) -> impl Iterator<Item = String> + '_ {
    v.as_object().into_iter().flat_map(|m| m.keys().cloned())
}

/// `nodeName` → `NodeName`, as the internal Go struct names it.
fn go_field(k: &str) -> String {
    let mut c = k.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn set_or_remove(v: &mut Value, key: &str, from: Option<&Value>) {
    match from {
        Some(x) => v[key] = x.clone(),
        None => {
            if let Some(m) = v.as_object_mut() {
                m.remove(key);
            }
        }
    }
}

fn headless(svc: &Value) -> bool {
    svc.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None")
}

/// `ValidateService`, in part: ports (required unless headless or
/// ExternalName; numbers in range; named when more than one).
fn service(svc: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let ports = arr(svc, "/spec/ports");
    let external = svc.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if ports.is_empty() && !headless(svc) && !external {
        out.push(required("spec.ports", ""));
    }
    for (i, p) in ports.iter().enumerate() {
        let f = format!("spec.ports[{i}]");
        if ports.len() > 1
            && p.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            out.push(required(&format!("{f}.name"), ""));
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            out.push(invalid(
                &format!("{f}.port"),
                &port.to_string(),
                "must be between 1 and 65535, inclusive",
            ));
        }
    }
    out
}

/// `validateUpgradeDowngradeClusterIPs`: a set cluster IP never changes
/// (nor does a headless service get one, or lose "None").
fn service_update(old: &Value, new: &Value) -> Vec<Cause> {
    let ext = |s: &Value| s.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if ext(old) || ext(new) || (headless(old) && headless(new)) {
        return Vec::new();
    }
    let ips = |s: &Value| -> Vec<Value> {
        let l = arr(s, "/spec/clusterIPs").to_vec();
        if l.is_empty() {
            s.pointer("/spec/clusterIP")
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                .map(|v| vec![v.clone()])
                .unwrap_or_default()
        } else {
            l
        }
    };
    // normalizeClusterIPs: a change of clusterIP alone is a change of
    // clusterIPs[0].
    let mut new_ips = ips(new);
    if let (Some(ip), Some(first)) = (new.pointer("/spec/clusterIP"), new_ips.first_mut())
        && arr(new, "/spec/clusterIPs") == arr(old, "/spec/clusterIPs")
        && ip.as_str().is_some_and(|s| !s.is_empty())
    {
        *first = ip.clone();
    }
    let old_ips = ips(old);
    let shown = go_value(&Value::Array(new_ips.clone()));
    if new_ips.is_empty() && !old_ips.is_empty() {
        return vec![invalid(
            "spec.clusterIPs[0]",
            &shown,
            "primary clusterIP can not be unset",
        )];
    }
    old_ips
        .iter()
        .zip(&new_ips)
        .enumerate()
        .filter(|(_, (o, n))| o != n)
        .map(|(i, _)| {
            invalid(
                &format!("spec.clusterIPs[{i}]"),
                &shown,
                "may not change once set",
            )
        })
        .collect()
}

/// `ValidateStatefulSetSpec`, in part: a selector that is not empty and
/// selects the template's labels, replicas not negative, the pod spec.
fn statefulset(sts: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let selector = sts.pointer("/spec/selector");
    let empty = selector.is_none_or(|s| {
        s.get("matchLabels")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty())
            && arr(s, "/matchExpressions").is_empty()
    });
    if empty {
        out.push(required(
            "spec.selector",
            "empty selector is invalid for statefulset",
        ));
    } else if let Some(sel) = selector
        && let Ok(sel) = crate::kubesim::selectors::LabelSelector::from_object(sel)
    {
        let labels: std::collections::BTreeMap<String, String> = sts
            .pointer("/spec/template/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        if !sel.matches(&labels) {
            let shown = format!(
                "map[string]string{{{}}}",
                labels
                    .iter()
                    .map(|(k, v)| format!("{k:?}:{v:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            out.push(invalid(
                "spec.template.metadata.labels",
                &shown,
                "`selector` does not match template `labels`",
            ));
        }
    }
    if let Some(r) = sts.pointer("/spec/replicas").and_then(Value::as_i64)
        && r < 0
    {
        out.push(invalid(
            "spec.replicas",
            &r.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    // ValidateStatefulSetUpdateStrategy
    let strategy = sts.pointer("/spec/updateStrategy");
    let rolling = strategy.and_then(|s| s.get("rollingUpdate"));
    match strategy
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate")
    {
        "RollingUpdate" => {
            if let Some(p) = rolling
                .and_then(|r| r.get("partition"))
                .and_then(Value::as_i64)
                .filter(|p| *p < 0)
            {
                out.push(invalid(
                    "spec.updateStrategy.rollingUpdate.partition",
                    &p.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        "OnDelete" => {
            if let Some(r) = rolling {
                out.push(invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &format!("&apps.RollingUpdateStatefulSetStrategy{r}"),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        other => out.push((
            "spec.updateStrategy".into(),
            "FieldValueInvalid",
            format!(
                "spec.updateStrategy: Invalid value: apps.StatefulSetUpdateStrategy{{Type:{other:?}}}: must be 'RollingUpdate' or 'OnDelete'"
            ),
        )),
    }
    let restart = sts
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if restart != "Always" {
        out.push((
            "spec.template.spec.restartPolicy".into(),
            "FieldValueNotSupported",
            format!(
                "spec.template.spec.restartPolicy: Unsupported value: {restart:?}: supported values: \"Always\""
            ),
        ));
    }
    out.extend(pod_spec(
        sts.pointer("/spec/template/spec").unwrap_or(&Value::Null),
        "spec.template.spec",
    ));
    out
}

/// `ValidatePersistentVolumeClaimSpec`, in part: access modes and a
/// storage request.
fn pvc(c: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if arr(c, "/spec/accessModes").is_empty() {
        out.push(required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    if c.pointer("/spec/resources/requests/storage").is_none() {
        out.push(required("spec.resources[storage]", ""));
    }
    out
}

/// `ValidatePodDisruptionBudgetSpec`: not both minAvailable and
/// maxUnavailable.
fn pdb(p: &Value) -> Vec<Cause> {
    let spec = p.get("spec").unwrap_or(&Value::Null);
    if spec.get("minAvailable").is_some() && spec.get("maxUnavailable").is_some() {
        return vec![invalid(
            "spec",
            &format!("{spec}"),
            "minAvailable and maxUnavailable cannot be both set",
        )];
    }
    Vec::new()
}

/// `ValidateConfigMap`: keys are config keys, none in both data and
/// binaryData.
fn config_map(cm: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    const RULE: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    let data = cm.get("data").and_then(Value::as_object);
    for (field, map) in [
        ("data", data),
        (
            "binaryData",
            cm.get("binaryData").and_then(Value::as_object),
        ),
    ] {
        for k in map.into_iter().flat_map(|m| m.keys()) {
            let ok = !k.is_empty()
                && k.len() <= 253
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && k != "."
                && k != ".."
                && !k.starts_with("..");
            if !ok {
                out.push(invalid(&format!("{field}[{k}]"), &format!("{k:?}"), RULE));
            } else if field == "binaryData" && data.is_some_and(|d| d.contains_key(k)) {
                out.push(invalid(
                    &format!("data[{k}]"),
                    &format!("{k:?}"),
                    "duplicate of key present in binaryData",
                ));
            }
        }
    }
    out
}

/// `ValidatePolicyRule`: verbs, and API groups with resources.
fn role(r: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for (i, rule) in arr(r, "/rules").iter().enumerate() {
        let f = format!("rules[{i}]");
        if arr(rule, "/verbs").is_empty() {
            out.push(required(
                &format!("{f}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        let non_resource = !arr(rule, "/nonResourceURLs").is_empty();
        if !non_resource && !arr(rule, "/resources").is_empty() && rule.get("apiGroups").is_none() {
            out.push(required(
                &format!("{f}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
    }
    out
}

/// `ValidateRoleBinding`: a roleRef of a Role or ClusterRole, named.
fn binding(b: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let kind = b
        .pointer("/roleRef/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let cluster = b.get("kind").and_then(Value::as_str) == Some("ClusterRoleBinding");
    let allowed: &[&str] = if cluster {
        &["ClusterRole"]
    } else {
        &["Role", "ClusterRole"]
    };
    if !allowed.contains(&kind) {
        let supported = allowed
            .iter()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push((
            "roleRef.kind".into(),
            "FieldValueNotSupported",
            format!("roleRef.kind: Unsupported value: {kind:?}: supported values: {supported}"),
        ));
    }
    if b.pointer("/roleRef/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        out.push(required("roleRef.name", ""));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(image: &str) -> Value {
        json!({"spec": {"containers": [{"name": "c", "image": image}],
            "tolerations": [{"key": "a", "operator": "Exists"}], "nodeName": "n1"}})
    }

    #[test]
    fn a_pod_may_change_its_image_and_add_tolerations_only() {
        assert!(pod_update(&pod("a"), &pod("b")).is_empty());
        let mut more = pod("a");
        more["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "b", "operator": "Exists"}));
        assert!(pod_update(&pod("a"), &more).is_empty());
        let e = pod_update(&more, &pod("a"));
        assert_eq!(e[0].0, "spec.tolerations");
        let mut moved = pod("a");
        moved["spec"]["nodeName"] = json!("n2");
        let e = pod_update(&pod("a"), &moved);
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].0.as_str(), e[0].1), ("spec", "FieldValueForbidden"));
        assert!(
            e[0].2
                .starts_with(&format!("spec: Forbidden: {POD_UPDATE_FORBIDDEN}\n")),
            "{}",
            e[0].2
        );
        assert!(e[0].2.contains("NodeName"), "{}", e[0].2);
    }

    #[test]
    fn a_cluster_ip_never_changes() {
        let svc = |ip: &str| json!({"spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"port": 80}]}});
        assert!(service_update(&svc("10.0.0.1"), &svc("10.0.0.1")).is_empty());
        let e = service_update(&svc("10.0.0.1"), &svc("10.0.0.2"));
        assert_eq!(
            e[0].2,
            "spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.2\"}: may not change once set"
        );
        // clusterIP alone changed: normalizeClusterIPs makes it clusterIPs[0].
        let mut only = svc("10.0.0.1");
        only["spec"]["clusterIP"] = json!("10.0.0.9");
        assert_eq!(
            service_update(&svc("10.0.0.1"), &only)[0].0,
            "spec.clusterIPs[0]"
        );
        assert!(service_update(&svc("None"), &svc("None")).is_empty());
        assert_eq!(service_update(&svc("None"), &svc("10.0.0.3")).len(), 1);
    }

    #[test]
    fn required_fields() {
        let e = on_create("", "services", &json!({"spec": {"type": "ClusterIP"}}));
        assert_eq!(e, vec![required("spec.ports", "")]);
        assert!(on_create("", "services", &json!({"spec": {"clusterIP": "None"}})).is_empty());
        let e = on_create("", "persistentvolumeclaims", &json!({"spec": {}}));
        assert_eq!(e.len(), 2);
        let e = on_create(
            "apps",
            "statefulsets",
            &json!({"spec": {"selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "c"}}, "spec": {"containers": [{"name": "Bad", "image": "x"}]}}}}),
        );
        let fields: Vec<&str> = e.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.template.metadata.labels",
                "spec.template.spec.containers[0].name"
            ]
        );
        assert_eq!(
            e[0].2,
            "spec.template.metadata.labels: Invalid value: map[string]string{\"a\":\"c\"}: `selector` does not match template `labels`"
        );
        assert_eq!(
            on_create("", "configmaps", &json!({"data": {"bad key": "x"}}))[0].0,
            "data[bad key]"
        );
        assert_eq!(
            on_create(
                "policy",
                "poddisruptionbudgets",
                &json!({"spec": {"minAvailable": 1, "maxUnavailable": 1}})
            )
            .len(),
            1
        );
        let ondelete = json!({"spec": {"selector": {"matchLabels": {"a": "b"}},
            "updateStrategy": {"type": "OnDelete", "rollingUpdate": {"partition": 1}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        assert_eq!(
            on_create("apps", "statefulsets", &ondelete)[0].0,
            "spec.updateStrategy.rollingUpdate"
        );
        let cr = |d: Value| json!({"data": d, "revision": 1});
        assert!(
            on_update(
                "apps",
                "controllerrevisions",
                &cr(json!({"a": 1})),
                &cr(json!({"a": 1}))
            )
            .is_empty()
        );
        let e = on_update(
            "apps",
            "controllerrevisions",
            &cr(json!({"a": 1})),
            &cr(json!({"a": 2})),
        );
        assert!(
            e[0].2
                .starts_with("data: Invalid value: runtime.RawExtension{Raw:[]uint8{0x7b, 0x22"),
            "{}",
            e[0].2
        );
        assert!(e[0].2.ends_with(": field is immutable"));
        let rb = |name: &str| json!({"kind": "RoleBinding", "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}});
        assert!(
            on_update(
                "rbac.authorization.k8s.io",
                "rolebindings",
                &rb("a"),
                &rb("a")
            )
            .is_empty()
        );
        assert_eq!(
            on_update(
                "rbac.authorization.k8s.io",
                "rolebindings",
                &rb("a"),
                &rb("b")
            )[0]
            .2,
            "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"b\"}: cannot change roleRef"
        );
    }
}
