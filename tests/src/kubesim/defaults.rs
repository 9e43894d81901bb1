//! The API server's defaulting of built-in kinds (`SetDefaults_*` of
//! core/v1 and apps/v1, plus the admission that every cluster runs on Pods:
//! priority and the not-ready/unreachable tolerations), and ClusterIP
//! allocation for Services. An operator that compares what it wants with
//! what it reads sees the same filled-in objects as on a real cluster.
//! Pure: no I/O (the allocator takes the IPs in use).

use serde_json::{Map, Value, json};

fn obj(v: &mut Value) -> Option<&mut Map<String, Value>> {
    v.as_object_mut()
}

fn default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), value);
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tagged = last.contains(':') && !last.ends_with(":latest");
    if image.contains('@') || tagged {
        "IfNotPresent"
    } else {
        "Always"
    }
}

fn probe(p: &mut Value) {
    let Some(m) = obj(p) else { return };
    default(m, "timeoutSeconds", json!(1));
    default(m, "periodSeconds", json!(10));
    default(m, "successThreshold", json!(1));
    default(m, "failureThreshold", json!(3));
    if let Some(h) = m.get_mut("httpGet").and_then(obj) {
        default(h, "scheme", json!("HTTP"));
        default(h, "path", json!("/"));
    }
}

fn container(c: &mut Value) {
    let Some(m) = obj(c) else { return };
    default(m, "terminationMessagePath", json!("/dev/termination-log"));
    default(m, "terminationMessagePolicy", json!("File"));
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    default(m, "imagePullPolicy", json!(image_pull_policy(&image)));
    default(m, "resources", json!({}));
    for p in m
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(pm) = obj(p) {
            default(pm, "protocol", json!("TCP"));
        }
    }
    for e in m
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(f) = e.pointer_mut("/valueFrom/fieldRef").and_then(obj) {
            default(f, "apiVersion", json!("v1"));
        }
    }
    for k in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = m.get_mut(k) {
            probe(p);
        }
    }
}

fn volume(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    for k in ["configMap", "secret", "downwardAPI", "projected"] {
        if let Some(s) = m.get_mut(k).and_then(obj) {
            default(s, "defaultMode", json!(420));
        }
    }
    if let Some(items) = m
        .get_mut("downwardAPI")
        .and_then(|d| d.get_mut("items"))
        .and_then(Value::as_array_mut)
    {
        for i in items {
            if let Some(f) = i.pointer_mut("/fieldRef").and_then(obj) {
                default(f, "apiVersion", json!("v1"));
            }
        }
    }
    if let Some(h) = m.get_mut("hostPath").and_then(obj) {
        default(h, "type", json!(""));
    }
}

/// Defaults of a PodSpec (also of the templates of StatefulSets).
pub fn pod_spec(spec: &mut Value) {
    let Some(m) = obj(spec) else { return };
    default(m, "restartPolicy", json!("Always"));
    default(m, "terminationGracePeriodSeconds", json!(30));
    default(m, "dnsPolicy", json!("ClusterFirst"));
    default(m, "securityContext", json!({}));
    default(m, "schedulerName", json!("default-scheduler"));
    default(m, "enableServiceLinks", json!(true));
    for k in ["containers", "initContainers"] {
        for c in m
            .get_mut(k)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            container(c);
        }
    }
    for v in m
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        volume(v);
    }
}

/// What the admission plugins of every cluster add to a Pod (priority,
/// DefaultTolerationSeconds).
fn pod_admission(spec: &mut Value) {
    let Some(m) = obj(spec) else { return };
    default(m, "priority", json!(0));
    default(m, "preemptionPolicy", json!("PreemptLowerPriority"));
    let tolerations = m.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            // TolerationsTolerateTaint: an empty key with Exists tolerates
            // every taint, an empty effect every effect.
            let has = t.iter().any(|x| {
                let k = x.get("key").and_then(Value::as_str).unwrap_or("");
                let op = x.get("operator").and_then(Value::as_str).unwrap_or("Equal");
                (k == key || (k.is_empty() && op == "Exists"))
                    && x.get("effect")
                        .and_then(Value::as_str)
                        .is_none_or(|e| e.is_empty() || e == "NoExecute")
            });
            if !has {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

fn pvc_spec(spec: &mut Value) {
    if let Some(m) = obj(spec) {
        default(m, "volumeMode", json!("Filesystem"));
    }
}

/// Applies the defaults of a built-in kind (group, plural) to an object.
pub fn apply(group: &str, plural: &str, o: &mut Value) {
    match (group, plural) {
        ("", "pods") => {
            if let Some(spec) = o.get_mut("spec") {
                pod_spec(spec);
                pod_admission(spec);
            }
        }
        ("apps", "statefulsets") => {
            let Some(spec) = o.get_mut("spec").and_then(obj) else {
                return;
            };
            default(spec, "replicas", json!(1));
            default(spec, "podManagementPolicy", json!("OrderedReady"));
            default(spec, "revisionHistoryLimit", json!(10));
            default(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
            if let Some(us) = spec.get_mut("updateStrategy").and_then(obj)
                && us.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            {
                let ru = us.entry("rollingUpdate").or_insert_with(|| json!({}));
                if let Some(ru) = obj(ru) {
                    default(ru, "partition", json!(0));
                }
            }
            // pkg/registry/apps/statefulset/strategy.go,
            // dropStatefulSetDisabledFields: `maxUnavailable` is dropped
            // while the MaxUnavailableStatefulSet gate is off (alpha, off
            // by default from 1.24 through 1.34; kubesim is 1.33).
            if let Some(ru) = spec
                .get_mut("updateStrategy")
                .and_then(|u| u.get_mut("rollingUpdate"))
                .and_then(obj)
            {
                ru.remove("maxUnavailable");
            }
            default(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                pod_spec(ps);
            }
            for t in spec
                .get_mut("volumeClaimTemplates")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(tm) = obj(t) {
                    default(tm, "apiVersion", json!("v1"));
                    default(tm, "kind", json!("PersistentVolumeClaim"));
                    default(tm, "status", json!({"phase": "Pending"}));
                    if let Some(s) = tm.get_mut("spec") {
                        pvc_spec(s);
                    }
                }
            }
        }
        ("apps", "deployments" | "daemonsets" | "replicasets") => {
            let Some(spec) = o.get_mut("spec").and_then(obj) else {
                return;
            };
            if plural != "daemonsets" {
                default(spec, "replicas", json!(1));
            }
            if plural == "deployments" {
                default(spec, "progressDeadlineSeconds", json!(600));
                default(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
            }
            if plural == "daemonsets" {
                default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                );
            }
            if plural != "replicasets" {
                default(spec, "revisionHistoryLimit", json!(10));
            }
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                pod_spec(ps);
            }
        }
        ("", "services") => {
            let Some(spec) = o.get_mut("spec").and_then(obj) else {
                return;
            };
            default(spec, "type", json!("ClusterIP"));
            default(spec, "sessionAffinity", json!("None"));
            default(spec, "internalTrafficPolicy", json!("Cluster"));
            for p in spec
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(pm) = obj(p) {
                    default(pm, "protocol", json!("TCP"));
                    if let Some(port) = pm.get("port").cloned() {
                        default(pm, "targetPort", port);
                    }
                }
            }
        }
        ("", "persistentvolumeclaims") => {
            if let Some(spec) = o.get_mut("spec") {
                pvc_spec(spec);
            }
        }
        ("", "persistentvolumes") => {
            let Some(spec) = o.get_mut("spec").and_then(obj) else {
                return;
            };
            default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            default(spec, "volumeMode", json!("Filesystem"));
        }
        ("", "secrets") => {
            if let Some(m) = obj(o) {
                default(m, "type", json!("Opaque"));
            }
        }
        _ => {}
    }
}

/// A free address of 10.96.0.0/12 as the API server's allocator picks it
/// (pkg/registry/core/service/ipallocator/bitmap.go, `randomScanStrategy`,
/// with the 1.27+ static sub-range of KEP-3070): at random in the upper
/// band (above the first 256 addresses, which are kept for Services that
/// ask for an address), scanning on from the random start when taken; the
/// lower band only when the upper one is full. A re-created Service gets
/// a new address. Pure: `random` is the caller's.
pub fn random_cluster_ip(used: &[String], random: u64) -> Option<String> {
    const SIZE: u32 = 1 << 20;
    const STATIC: u32 = 256;
    let ip = |n: u32| format!("10.{}.{}.{}", 96 + (n >> 16), (n >> 8) & 0xff, n & 0xff);
    let upper = SIZE - 1 - STATIC;
    let start = (random % u64::from(upper)) as u32;
    (0..upper)
        .map(|i| STATIC + (start + i) % upper)
        // 10.96.0.1 is the kubernetes Service's.
        .chain(2..STATIC)
        .map(ip)
        .find(|candidate| !used.contains(candidate))
}

/// Gives a new Service its cluster IP(s) from 10.96.0.0/12, as the API
/// server's allocator does ([`random_cluster_ip`]); headless Services (`clusterIP: None`) keep
/// `None`. `used` are the IPs taken.
pub fn allocate_cluster_ip(svc: &mut Value, used: &[String]) -> Result<(), String> {
    let Some(spec) = svc.get_mut("spec").and_then(obj) else {
        return Ok(());
    };
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ip = if requested == "None" {
        requested
    } else if !requested.is_empty() {
        if used.contains(&requested) {
            return Err(format!(
                "spec.clusterIPs: Invalid value: []string{{\"{requested}\"}}: failed to allocate IP {requested}: provided IP is already allocated"
            ));
        }
        requested
    } else {
        random_cluster_ip(used, crate::kubesim::random_u64())
            .ok_or("the service IP range is full")?
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    if ip != "None" || spec.get("ipFamilies").is_none() {
        default(spec, "ipFamilies", json!(["IPv4"]));
        default(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ips_are_random_in_the_upper_band_and_never_taken() {
        let a = random_cluster_ip(&[], 1).unwrap();
        let b = random_cluster_ip(&[], 987_654_321).unwrap();
        assert_ne!(a, b, "another draw, another address");
        for ip in [&a, &b] {
            let o: Vec<u32> = ip.split('.').map(|x| x.parse().unwrap()).collect();
            let n = ((o[1] - 96) << 16) | (o[2] << 8) | o[3];
            assert!(o[0] == 10 && (96..112).contains(&o[1]) && n >= 256, "{ip}");
        }
        // Taken: the scan goes on from the random start.
        let next = random_cluster_ip(std::slice::from_ref(&a), 1).unwrap();
        assert_ne!(next, a);
    }

    #[test]
    fn pod_defaults_and_admission() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "c", "image": "cassandra:3.11", "ports": [{"containerPort": 9042}],
             "readinessProbe": {"httpGet": {"port": 8080}}},
            {"name": "s", "image": "busybox"}
        ], "volumes": [{"name": "cfg", "configMap": {"name": "x"}}]}});
        apply("", "pods", &mut pod);
        let s = &pod["spec"];
        assert_eq!(s["restartPolicy"], "Always");
        assert_eq!(s["dnsPolicy"], "ClusterFirst");
        assert_eq!(s["terminationGracePeriodSeconds"], 30);
        assert_eq!(s["schedulerName"], "default-scheduler");
        assert_eq!(s["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(s["containers"][1]["imagePullPolicy"], "Always");
        assert_eq!(s["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            s["containers"][0]["readinessProbe"],
            json!({"httpGet": {"port": 8080, "scheme": "HTTP", "path": "/"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(s["volumes"][0]["configMap"]["defaultMode"], 420);
        assert_eq!(s["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(s["priority"], 0);
        // A Pod that tolerates every taint gets no default toleration.
        let mut tolerant = json!({"spec": {"tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}]}});
        apply("", "pods", &mut tolerant);
        assert_eq!(
            tolerant["spec"]["tolerations"],
            json!([{"operator": "Exists"}])
        );
        let again = pod.clone();
        apply("", "pods", &mut pod);
        assert_eq!(pod, again, "defaulting is idempotent");
    }

    #[test]
    fn statefulset_and_service_defaults() {
        let mut sts = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        apply("apps", "statefulsets", &mut sts);
        let s = &sts["spec"];
        assert_eq!(s["replicas"], 1);
        assert_eq!(s["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            s["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(s["revisionHistoryLimit"], 10);
        assert_eq!(
            s["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        assert_eq!(
            s["volumeClaimTemplates"][0]["kind"],
            "PersistentVolumeClaim"
        );
        assert!(
            s["template"]["spec"].get("tolerations").is_none(),
            "admission is for Pods only"
        );

        let mut deploy = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "op:1"}]}}}});
        apply("apps", "deployments", &mut deploy);
        assert_eq!(deploy["spec"]["replicas"], 1);
        assert_eq!(
            deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            "25%"
        );
        assert_eq!(
            deploy["spec"]["template"]["spec"]["restartPolicy"],
            "Always"
        );

        let mut svc = json!({"spec": {"ports": [{"port": 9042}]}});
        apply("", "services", &mut svc);
        allocate_cluster_ip(&mut svc, &["10.96.0.2".into()]).unwrap();
        let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.starts_with("10.") && ip != "10.96.0.2", "{ip}");
        assert_eq!(svc["spec"]["clusterIPs"], json!([ip]));
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 9042, "protocol": "TCP", "targetPort": 9042})
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        allocate_cluster_ip(&mut headless, &[]).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        let mut taken = json!({"spec": {"clusterIP": "10.96.0.3"}});
        assert!(allocate_cluster_ip(&mut taken, &["10.96.0.3".into()]).is_err());
    }
}
