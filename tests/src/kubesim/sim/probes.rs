//! Probes and exec hooks as the kubelet runs them: HTTP GET to
//! `<host or podIP>:<port><path>` (success: status 200-399), exec in the
//! container's namespaces (mount, PID, network) through `nsenter` with the container's
//! environment (success: exit 0); each bounded by `timeoutSeconds`. I/O.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

/// A probe's timing and thresholds (the API defaults when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    /// `initialDelaySeconds`
    pub initial_delay: Duration,
    /// `periodSeconds` (default 10)
    pub period: Duration,
    /// `timeoutSeconds` (default 1)
    pub timeout: Duration,
    /// `failureThreshold` (default 3)
    pub failure_threshold: u32,
    /// `successThreshold` (default 1)
    pub success_threshold: u32,
}

/// The timing of a probe object.
pub fn timing(probe: &Value) -> Timing {
    let n = |k: &str, d: u64| probe.get(k).and_then(Value::as_u64).unwrap_or(d);
    Timing {
        initial_delay: Duration::from_secs(n("initialDelaySeconds", 0)),
        period: Duration::from_secs(n("periodSeconds", 10).max(1)),
        timeout: Duration::from_secs(n("timeoutSeconds", 1).max(1)),
        failure_threshold: n("failureThreshold", 3).max(1) as u32,
        success_threshold: n("successThreshold", 1).max(1) as u32,
    }
}

/// Where a probe's container is.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pod IP.
    pub pod_ip: String,
    /// The container's PID 1, as the host sees it.
    pub pid: u32,
    /// The container's environment.
    pub env: BTreeMap<String, String>,
    /// The container's named ports.
    pub ports: BTreeMap<String, u16>,
    /// `setpriv` arguments that give a command the container's identity
    /// (its configured user, groups, capabilities), as the runtime runs
    /// an exec in the container; empty: as root.
    pub identity: Vec<String>,
}

fn port_of(v: &Value, ports: &BTreeMap<String, u16>) -> Option<u16> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(s) => s.parse().ok().or_else(|| ports.get(s).copied()),
        _ => None,
    }
}

/// Runs one probe (or handler): whether it succeeded.
pub async fn run(handler: &Value, target: &Target, timeout: Duration) -> bool {
    if let Some(get) = handler.get("httpGet") {
        let Some(port) = get.get("port").and_then(|p| port_of(p, &target.ports)) else {
            return false;
        };
        let host = get
            .get("host")
            .and_then(Value::as_str)
            .unwrap_or(&target.pod_ip);
        let path = get.get("path").and_then(Value::as_str).unwrap_or("/");
        let scheme = get
            .get("scheme")
            .and_then(Value::as_str)
            .unwrap_or("HTTP")
            .to_lowercase();
        // The kubelet probes directly, never through a proxy.
        let Ok(client) = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::limited(10))
            .build()
        else {
            return false;
        };
        let mut req = client.get(format!("{scheme}://{host}:{port}{path}"));
        for h in get
            .get("httpHeaders")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(n), Some(v)) = (h["name"].as_str(), h["value"].as_str()) {
                req = req.header(n, v);
            }
        }
        req.header("User-Agent", "kube-probe/1.33")
            .send()
            .await
            .is_ok_and(|r| (200..400).contains(&r.status().as_u16()))
    } else if let Some(cmd) = handler.pointer("/exec/command").and_then(Value::as_array) {
        let argv: Vec<String> = cmd
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        exec(&argv, target, timeout).await == Some(0)
    } else if let Some(sock) = handler.get("tcpSocket") {
        let Some(port) = sock.get("port").and_then(|p| port_of(p, &target.ports)) else {
            return false;
        };
        let host = sock
            .get("host")
            .and_then(Value::as_str)
            .unwrap_or(&target.pod_ip)
            .to_string();
        tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
            .await
            .is_ok_and(|r| r.is_ok())
    } else {
        false
    }
}

/// Runs a command in the container's mount, PID and network namespaces
/// with its environment and identity; its exit code, None on a timeout or
/// a failure to start.
pub async fn exec(argv: &[String], target: &Target, timeout: Duration) -> Option<i32> {
    if argv.is_empty() {
        return None;
    }
    let mut cmd = tokio::process::Command::new("nsenter");
    cmd.arg(format!("--target={}", target.pid))
        .args(["--mount", "--pid", "--net", "--"]);
    if !target.identity.is_empty() {
        cmd.arg("setpriv").args(&target.identity).arg("--");
    }
    cmd.args(argv)
        .env_clear()
        .envs(&target.env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().ok()?;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => status.code(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_ports() {
        let t = timing(&json!({"periodSeconds": 2}));
        assert_eq!(t.period, Duration::from_secs(2));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!(t.failure_threshold, 3);
        assert_eq!(t.success_threshold, 1);
        let ports = BTreeMap::from([("sidecar".to_string(), 8080)]);
        assert_eq!(port_of(&json!("sidecar"), &ports), Some(8080));
        assert_eq!(port_of(&json!(9042), &ports), Some(9042));
        assert_eq!(port_of(&json!("nope"), &ports), None);
    }
}
