//! Pod Security Admission (k8s.io/pod-security-admission, the built-in
//! admission plugin): a namespace labelled
//! `pod-security.kubernetes.io/enforce: baseline` or `restricted` refuses
//! the creation of a Pod that violates the level, with the plugin's
//! message: `pods "x" is forbidden: violates PodSecurity
//! "restricted:latest": <check> (<detail>), ...`, the checks in the order
//! of their IDs. Pure.
//!
//! The checks modelled (Pod Security Standards, latest): baseline: host
//! namespaces, privileged containers, non-default capabilities, hostPath
//! volumes, host ports, `Unconfined` seccomp; restricted on top: volume
//! types, `allowPrivilegeEscalation`, capabilities (drop ALL, add at most
//! NET_BIND_SERVICE), `runAsNonRoot`, `runAsUser=0`, seccomp
//! `RuntimeDefault` or `Localhost`. Not modelled: AppArmor, SELinux,
//! `/proc` mount, sysctls, Windows host process, version pinning
//! (`enforce-version`: always `latest`), exemptions, and the `warn` and
//! `audit` modes.

use serde_json::Value;

/// The enforce label.
pub const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// A Pod Security level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// The level a namespace's labels enforce (an unknown value is
    /// refused by the API server when the label is written; here it counts
    /// as privileged).
    pub fn enforced(namespace: &Value) -> Level {
        match namespace
            .pointer("/metadata/labels")
            .and_then(|l| l.get(ENFORCE))
            .and_then(Value::as_str)
        {
            Some("restricted") => Level::Restricted,
            Some("baseline") => Level::Baseline,
            _ => Level::Privileged,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// The capabilities baseline allows adding (the container runtimes' defaults).
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The volume types restricted allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn quote(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn containers_phrase(names: &[String]) -> String {
    let word = if names.len() == 1 {
        "container"
    } else {
        "containers"
    };
    format!("{word} {}", quote(names))
}

fn pod_or_containers_phrase(names: &[String]) -> String {
    format!("pod or {}", containers_phrase(names))
}

/// Every container of a Pod (init, regular, ephemeral): (name, container).
fn containers(spec: &Value) -> Vec<(String, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
        .map(|c| {
            (
                c.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                c,
            )
        })
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The violated checks of `pod` for `level`, as (check, detail), in the
/// order of the checks' IDs.
pub fn violations(level: Level, pod: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(&str, String, String)> = Vec::new();
    if level == Level::Privileged {
        return Vec::new();
    }
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let psc = spec.get("securityContext").unwrap_or(&Value::Null);
    let all = containers(spec);
    let csc = |c: &Value| c.get("securityContext").cloned().unwrap_or(Value::Null);
    let restricted = level == Level::Restricted;

    if restricted {
        let bad: Vec<String> = all
            .iter()
            .filter(|(_, c)| csc(c).get("allowPrivilegeEscalation") != Some(&Value::Bool(false)))
            .map(|(n, _)| n.clone())
            .collect();
        if !bad.is_empty() {
            out.push((
                "allowPrivilegeEscalation",
                "allowPrivilegeEscalation != false".into(),
                format!(
                    "{} must set securityContext.allowPrivilegeEscalation=false",
                    containers_phrase(&bad)
                ),
            ));
        }
    }
    // capabilities_baseline
    {
        let mut names = Vec::new();
        let mut caps: Vec<String> = Vec::new();
        for (n, c) in &all {
            let added = strings(csc(c).pointer("/capabilities/add"));
            let forbidden: Vec<String> = added
                .into_iter()
                .filter(|a| !BASELINE_CAPS.contains(&a.as_str()))
                .collect();
            if !forbidden.is_empty() {
                names.push(n.clone());
                for f in forbidden {
                    if !caps.contains(&f) {
                        caps.push(f);
                    }
                }
            }
        }
        if !names.is_empty() {
            out.push((
                "capabilities_baseline",
                "non-default capabilities".into(),
                format!(
                    "{} must not include {} in securityContext.capabilities.add",
                    containers_phrase(&names),
                    quote(&caps)
                ),
            ));
        }
    }
    if restricted {
        let mut details = Vec::new();
        let no_drop: Vec<String> = all
            .iter()
            .filter(|(_, c)| !strings(csc(c).pointer("/capabilities/drop")).contains(&"ALL".into()))
            .map(|(n, _)| n.clone())
            .collect();
        if !no_drop.is_empty() {
            details.push(format!(
                "{} must set securityContext.capabilities.drop=[\"ALL\"]",
                containers_phrase(&no_drop)
            ));
        }
        let mut names = Vec::new();
        let mut caps: Vec<String> = Vec::new();
        for (n, c) in &all {
            let forbidden: Vec<String> = strings(csc(c).pointer("/capabilities/add"))
                .into_iter()
                .filter(|a| a != "NET_BIND_SERVICE")
                .collect();
            if !forbidden.is_empty() {
                names.push(n.clone());
                for f in forbidden {
                    if !caps.contains(&f) {
                        caps.push(f);
                    }
                }
            }
        }
        if !names.is_empty() {
            details.push(format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers_phrase(&names),
                quote(&caps)
            ));
        }
        if !details.is_empty() {
            out.push((
                "capabilities_restricted",
                "unrestricted capabilities".into(),
                details.join("; "),
            ));
        }
    }
    let host: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|k| spec.get(**k) == Some(&Value::Bool(true)))
        .map(|k| format!("{k}=true"))
        .collect();
    if !host.is_empty() {
        out.push(("hostNamespaces", "host namespaces".into(), host.join(", ")));
    }
    let volumes: Vec<(String, String)> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| {
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let kind = v
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_default();
            (name, kind)
        })
        .collect();
    let host_paths: Vec<String> = volumes
        .iter()
        .filter(|(_, k)| k == "hostPath")
        .map(|(n, _)| n.clone())
        .collect();
    if !host_paths.is_empty() {
        let word = if host_paths.len() == 1 {
            "volume"
        } else {
            "volumes"
        };
        out.push((
            "hostPathVolumes",
            "hostPath volumes".into(),
            format!("{word} {}", quote(&host_paths)),
        ));
    }
    let ports: Vec<String> = all
        .iter()
        .flat_map(|(n, c)| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
                .filter(|p| *p != 0)
                .map(move |p| format!("container {n:?} uses hostPort {p}"))
        })
        .collect();
    if !ports.is_empty() {
        out.push(("hostPorts", "hostPort".into(), ports.join(", ")));
    }
    let privileged: Vec<String> = all
        .iter()
        .filter(|(_, c)| csc(c).get("privileged") == Some(&Value::Bool(true)))
        .map(|(n, _)| n.clone())
        .collect();
    if !privileged.is_empty() {
        out.push((
            "privileged",
            "privileged".into(),
            format!(
                "{} must not set securityContext.privileged=true",
                containers_phrase(&privileged)
            ),
        ));
    }
    if restricted {
        let bad: Vec<(String, String)> = volumes
            .iter()
            .filter(|(_, k)| !RESTRICTED_VOLUMES.contains(&k.as_str()))
            .cloned()
            .collect();
        if !bad.is_empty() {
            let names: Vec<String> = bad.iter().map(|(n, _)| n.clone()).collect();
            let mut kinds: Vec<String> = Vec::new();
            for (_, k) in &bad {
                if !kinds.contains(k) {
                    kinds.push(k.clone());
                }
            }
            let detail = if names.len() == 1 {
                format!(
                    "volume {} uses restricted volume type {}",
                    quote(&names),
                    quote(&kinds)
                )
            } else {
                format!(
                    "volumes {} use restricted volume {} {}",
                    quote(&names),
                    if kinds.len() == 1 { "type" } else { "types" },
                    quote(&kinds)
                )
            };
            out.push((
                "restrictedVolumes",
                "restricted volume types".into(),
                detail,
            ));
        }
        // runAsNonRoot
        let pod_value = psc.get("runAsNonRoot").and_then(Value::as_bool);
        let mut details = Vec::new();
        if pod_value == Some(false) {
            details.push("pod must not set securityContext.runAsNonRoot=false".to_string());
        }
        let explicit_false: Vec<String> = all
            .iter()
            .filter(|(_, c)| csc(c).get("runAsNonRoot") == Some(&Value::Bool(false)))
            .map(|(n, _)| n.clone())
            .collect();
        if !explicit_false.is_empty() {
            details.push(format!(
                "{} must not set securityContext.runAsNonRoot=false",
                containers_phrase(&explicit_false)
            ));
        }
        if pod_value != Some(true) {
            let unset: Vec<String> = all
                .iter()
                .filter(|(_, c)| {
                    csc(c)
                        .get("runAsNonRoot")
                        .and_then(Value::as_bool)
                        .is_none()
                })
                .map(|(n, _)| n.clone())
                .collect();
            if !unset.is_empty() && pod_value.is_none() {
                details.push(format!(
                    "{} must set securityContext.runAsNonRoot=true",
                    pod_or_containers_phrase(&unset)
                ));
            }
        }
        if !details.is_empty() {
            out.push((
                "runAsNonRoot",
                "runAsNonRoot != true".into(),
                details.join("; "),
            ));
        }
        // runAsUser
        let mut details = Vec::new();
        if psc.get("runAsUser").and_then(Value::as_i64) == Some(0) {
            details.push("pod must not set runAsUser=0".to_string());
        }
        let root: Vec<String> = all
            .iter()
            .filter(|(_, c)| csc(c).get("runAsUser").and_then(Value::as_i64) == Some(0))
            .map(|(n, _)| n.clone())
            .collect();
        if !root.is_empty() {
            details.push(format!(
                "{} must not set runAsUser=0",
                containers_phrase(&root)
            ));
        }
        if !details.is_empty() {
            out.push(("runAsUser", "runAsUser=0".into(), details.join("; ")));
        }
    }
    // seccomp: baseline refuses Unconfined, restricted asks for RuntimeDefault
    // or Localhost (on the Pod or on every container).
    {
        let kind = |v: &Value| {
            v.pointer("/seccompProfile/type")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let pod_kind = kind(psc);
        let allowed = |k: &str| {
            if restricted {
                k == "RuntimeDefault" || k == "Localhost"
            } else {
                k != "Unconfined"
            }
        };
        let mut details = Vec::new();
        if let Some(k) = pod_kind.as_deref().filter(|k| !allowed(k)) {
            details.push(format!(
                "pod must not set securityContext.seccompProfile.type to {k:?}"
            ));
        }
        let mut bad: Vec<String> = Vec::new();
        let mut bad_kinds: Vec<String> = Vec::new();
        for (n, c) in &all {
            if let Some(k) = kind(&csc(c)).filter(|k| !allowed(k)) {
                bad.push(n.clone());
                if !bad_kinds.contains(&k) {
                    bad_kinds.push(k);
                }
            }
        }
        if !bad.is_empty() {
            details.push(format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                containers_phrase(&bad),
                quote(&bad_kinds)
            ));
        }
        if restricted && pod_kind.is_none() {
            let unset: Vec<String> = all
                .iter()
                .filter(|(_, c)| kind(&csc(c)).is_none())
                .map(|(n, _)| n.clone())
                .collect();
            if !unset.is_empty() {
                details.push(format!(
                    "{} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                    pod_or_containers_phrase(&unset)
                ));
            }
        }
        if !details.is_empty() {
            let id = if restricted {
                "seccompProfile_restricted"
            } else {
                "seccompProfile_baseline"
            };
            out.push((id, "seccompProfile".into(), details.join("; ")));
        }
    }
    out.sort_by(|a, b| a.0.cmp(b.0));
    out.into_iter().map(|(_, c, d)| (c, d)).collect()
}

/// The API server's refusal, when `pod` violates the level its namespace
/// enforces.
pub fn refusal(namespace: &Value, pod: &Value) -> Option<String> {
    let level = Level::enforced(namespace);
    let found = violations(level, pod);
    if found.is_empty() {
        return None;
    }
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Some(format!(
        "pods {name:?} is forbidden: violates PodSecurity \"{}:latest\": {}",
        level.as_str(),
        found
            .iter()
            .map(|(c, d)| format!("{c} ({d})"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ns(level: &str) -> Value {
        json!({"metadata": {"name": "db", "labels": {ENFORCE: level}}})
    }

    /// The example of the Kubernetes documentation (an nginx Pod without a
    /// securityContext in a restricted namespace), word for word.
    #[test]
    fn the_documented_refusal() {
        let pod = json!({"metadata": {"name": "nginx"}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}});
        assert_eq!(
            refusal(&ns("restricted"), &pod).unwrap(),
            "pods \"nginx\" is forbidden: violates PodSecurity \"restricted:latest\": \
             allowPrivilegeEscalation != false (container \"nginx\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"nginx\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"nginx\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"nginx\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        // Baseline admits it; no label admits everything.
        assert_eq!(refusal(&ns("baseline"), &pod), None);
        assert_eq!(refusal(&json!({"metadata": {"name": "db"}}), &pod), None);
    }

    #[test]
    fn baseline_refuses_privileged_host_access() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "hostNetwork": true,
            "containers": [{"name": "c", "securityContext": {"privileged": true,
                "capabilities": {"add": ["NET_ADMIN"]}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}});
        assert_eq!(
            refusal(&ns("baseline"), &pod).unwrap(),
            "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": \
             non-default capabilities (container \"c\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), \
             host namespaces (hostNetwork=true), hostPath volumes (volume \"root\"), \
             hostPort (container \"c\" uses hostPort 80), \
             privileged (container \"c\" must not set securityContext.privileged=true)"
        );
    }

    #[test]
    fn a_compliant_pod_is_admitted() {
        let restricted =
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
        let pod = json!({"metadata": {"name": "m"}, "spec": {
            "securityContext": {"runAsUser": 999, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{"name": "i", "securityContext": restricted}],
            "containers": [{"name": "c", "securityContext": restricted}],
            "volumes": [{"name": "d", "emptyDir": {}}, {"name": "o", "configMap": {"name": "o"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]}});
        assert_eq!(refusal(&ns("restricted"), &pod), None);
        // Root, or one container left out, is not.
        let mut root = pod.clone();
        root["spec"]["securityContext"]["runAsUser"] = json!(0);
        root["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        assert_eq!(
            refusal(&ns("restricted"), &root).unwrap(),
            "pods \"m\" is forbidden: violates PodSecurity \"restricted:latest\": \
             allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             runAsUser=0 (pod must not set runAsUser=0)"
        );
    }
}
