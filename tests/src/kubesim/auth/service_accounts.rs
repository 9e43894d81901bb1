//! The API server's ServiceAccount admission for Pods
//! (plugin/pkg/admission/serviceaccount): a Pod without a ServiceAccount
//! runs as `default`; the ServiceAccount must exist; unless the Pod or its
//! ServiceAccount says `automountServiceAccountToken: false`, the Pod gets
//! the projected `kube-api-access-<suffix>` volume (a bound token, the
//! cluster's CA from the `kube-root-ca.crt` ConfigMap, the namespace) mounted
//! read-only at [`MOUNT_PATH`] in every container. Pure.

use serde_json::{Value, json};

/// Where every container finds its ServiceAccount's credentials.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The lifetime the API server gives the token of the projected volume
/// (an hour and a bit, so that a kubelet's refresh is visible).
pub const TOKEN_SECONDS: i64 = 3607;

/// The ConfigMap the root CA publisher writes into every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Admits a new Pod: `service_account` is its ServiceAccount as stored
/// (None: it does not exist); `suffix` names the volume. Err: the 403
/// message.
pub fn admit_pod(
    pod: &mut Value,
    service_account: Option<&Value>,
    suffix: &str,
) -> Result<(), String> {
    let ns = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let name = match pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        Some(n) => n.to_string(),
        None => {
            pod["spec"]["serviceAccountName"] = json!("default");
            "default".to_string()
        }
    };
    // The deprecated field follows the current one.
    pod["spec"]["serviceAccount"] = json!(name);
    let Some(sa) = service_account else {
        return Err(format!(
            "error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
        ));
    };
    let automount = pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let mounted = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| m["mountPath"] == MOUNT_PATH))
    };
    let volume = format!("kube-api-access-{suffix}");
    let mut any = false;
    for list in ["initContainers", "containers"] {
        // get_mut, not IndexMut: a Pod without init containers must not
        // be stored with `initContainers: null`.
        for c in pod["spec"]
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if mounted(c) {
                continue;
            }
            any = true;
            let mount = json!({"name": volume, "readOnly": true, "mountPath": MOUNT_PATH});
            match c["volumeMounts"].as_array_mut() {
                Some(ms) => ms.push(mount),
                None => c["volumeMounts"] = json!([mount]),
            }
        }
    }
    if !any {
        return Ok(());
    }
    let v = json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}});
    match pod["spec"]["volumes"].as_array_mut() {
        Some(vs) => vs.push(v),
        None => pod["spec"]["volumes"] = json!([v]),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn pods_get_the_default_account_and_its_token_volume() {
        let mut p = pod(
            json!({"containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]}),
        );
        admit_pod(&mut p, Some(&json!({})), "abcde").unwrap();
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        assert_eq!(p["spec"]["volumes"][0]["name"], "kube-api-access-abcde");
        assert_eq!(
            p["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["path"],
            "token"
        );
        for c in 0..2 {
            let ms = p["spec"]["containers"][c]["volumeMounts"]
                .as_array()
                .unwrap();
            let m = ms.last().unwrap();
            assert_eq!(
                (m["mountPath"].as_str(), m["readOnly"].as_bool()),
                (Some(MOUNT_PATH), Some(true))
            );
        }
    }

    #[test]
    fn automount_false_and_missing_accounts() {
        let mut p = pod(
            json!({"automountServiceAccountToken": false, "serviceAccountName": "m", "containers": [{"name": "a"}]}),
        );
        admit_pod(&mut p, Some(&json!({})), "x").unwrap();
        assert!(p["spec"]["volumes"].is_null());
        assert!(p["spec"]["containers"][0]["volumeMounts"].is_null());
        let mut p = pod(json!({"serviceAccountName": "m", "containers": [{"name": "a"}]}));
        admit_pod(
            &mut p,
            Some(&json!({"automountServiceAccountToken": false})),
            "x",
        )
        .unwrap();
        assert!(p["spec"]["volumes"].is_null());
        // The Pod's own setting wins over its account's.
        let mut p =
            pod(json!({"automountServiceAccountToken": true, "containers": [{"name": "a"}]}));
        admit_pod(
            &mut p,
            Some(&json!({"automountServiceAccountToken": false})),
            "x",
        )
        .unwrap();
        assert_eq!(p["spec"]["volumes"].as_array().unwrap().len(), 1);
        let mut p = pod(json!({"serviceAccountName": "gone", "containers": [{"name": "a"}]}));
        assert_eq!(
            admit_pod(&mut p, None, "x").unwrap_err(),
            "error looking up service account ns/gone: serviceaccount \"gone\" not found"
        );
    }
}
