//! The `pods/log` subresource (`GET /api/v1/namespaces/NS/pods/NAME/log`,
//! what `kubectl logs` reads): the log files the sim's kubelet writes
//! (`<sim dir>/pods/<ns>_<pod>_<uid>/logs/<container>/<restartCount>.log`,
//! stdout and stderr of one run of a container), with `container`,
//! `previous`, `tailLines`, `limitBytes` and `follow`, and the errors of
//! the API server (which container) and of the kubelet (which run of it),
//! both 400 BadRequest as the API server relays them. Not modelled:
//! `timestamps` (the files hold the raw output, not the CRI log format,
//! so there is no time per line) and `sinceSeconds`/`sinceTime`.
//! [`pick`] and [`tail`] are pure; [`handle`] does I/O.

use super::http::Body;
use super::store::{ApiError, Store, Target};
use bytes::Bytes;
use hyper::Response;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn names(pod: &Value, list: &str) -> Vec<String> {
    pod.pointer(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| s(c, "/name").to_string())
        .collect()
}

/// Which container, and which run of it (the number of its log file), a
/// request designates: the API server's `validateContainer` then the
/// kubelet's `validateContainerLogStatus`.
pub fn pick(
    pod: &Value,
    container: Option<&str>,
    previous: bool,
) -> Result<(String, u64), ApiError> {
    let pod_name = s(pod, "/metadata/name");
    let main = names(pod, "/spec/containers");
    let init = names(pod, "/spec/initContainers");
    let container = match container.filter(|c| !c.is_empty()) {
        Some(c) if main.iter().chain(&init).any(|n| n == c) => c.to_string(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {pod_name}"
            )));
        }
        None if main.len() == 1 => main[0].clone(),
        None if main.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}"
            )));
        }
        None => {
            // Init containers first, as the API server visits them.
            let all: Vec<&str> = init.iter().chain(&main).map(String::as_str).collect();
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                all.join(" ")
            )));
        }
    };
    let status = ["/status/containerStatuses", "/status/initContainerStatuses"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .find(|c| c["name"] == container.as_str())
        .cloned()
        .unwrap_or(Value::Null);
    let restarts = status
        .get("restartCount")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // The sim's kubelet numbers runs by restartCount at their start; the
    // last terminated run (lastState) is the one before the count.
    let last = status.pointer("/lastState/terminated").is_some() && restarts > 0;
    let state = status.get("state").cloned().unwrap_or(Value::Null);
    if previous {
        if !last {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
        return Ok((container, restarts - 1));
    }
    if state.get("running").is_some() || state.get("terminated").is_some() {
        return Ok((container, restarts));
    }
    if last {
        return Ok((container, restarts - 1));
    }
    let reason = match s(&state, "/waiting/reason") {
        "" => "ContainerCreating",
        r => r,
    };
    Err(ApiError::bad_request(format!(
        "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
    )))
}

/// The last `lines` lines of `text` (a last line without its newline
/// counts).
pub fn tail(text: &[u8], lines: Option<usize>) -> &[u8] {
    let Some(n) = lines else { return text };
    if n == 0 {
        return &text[text.len()..];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

fn log_path(sim_dir: &Path, pod: &Value, container: &str, run: u64) -> PathBuf {
    sim_dir
        .join("pods")
        .join(format!(
            "{}_{}_{}",
            s(pod, "/metadata/namespace"),
            s(pod, "/metadata/name"),
            s(pod, "/metadata/uid")
        ))
        .join("logs")
        .join(container)
        .join(format!("{run}.log"))
}

fn text_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    r
}

fn number<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    k: &str,
) -> Result<Option<T>, ApiError> {
    q.get(k)
        .map(|v| {
            v.parse::<T>()
                .map_err(|_| ApiError::bad_request(format!("invalid {k}: {v:?}")))
        })
        .transpose()
}

/// Serves `GET .../pods/NAME/log`; `sim_dir` is the sim's work directory
/// (None without the sim: no container ever ran).
pub fn handle(
    store: &Store,
    sim_dir: Option<&Path>,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let pods = Target::new("", "v1", "pods", Some(ns));
    let pod = store.get(&pods, name)?;
    let tail_lines: Option<i64> = number(q, "tailLines")?;
    let limit: Option<usize> = number(q, "limitBytes")?;
    let truthy = |k: &str| q.get(k).is_some_and(|v| v == "true" || v == "1");
    let (container, run) = pick(
        &pod,
        q.get("container").map(String::as_str),
        truthy("previous"),
    )?;
    let Some(dir) = sim_dir else {
        return Ok(text_response(Body::Full(Some(Bytes::new()))));
    };
    let path = log_path(dir, &pod, &container, run);
    let text = std::fs::read(&path).unwrap_or_default();
    let lines = tail_lines.map(|n| n.max(0) as usize);
    let mut out = tail(&text, lines).to_vec();
    if let Some(l) = limit {
        out.truncate(l);
    }
    if !truthy("follow") || truthy("previous") {
        return Ok(text_response(Body::Full(Some(Bytes::from(out)))));
    }
    // Follow: what is written next, until this run of the container ends
    // (or the Pod goes, or the client leaves).
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let store = store.clone();
    let uid = s(&pod, "/metadata/uid").to_string();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut sent = text.len();
        if tx.send(Bytes::from(out)).await.is_err() {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let current = store
                .get(&pods, &name)
                .ok()
                .filter(|p| s(p, "/metadata/uid") == uid);
            let same_run = current.as_ref().is_some_and(|p| {
                pick(p, Some(&container), false).is_ok_and(|(_, r)| r == run)
                    && ["/status/containerStatuses", "/status/initContainerStatuses"]
                        .iter()
                        .filter_map(|k| p.pointer(k).and_then(Value::as_array))
                        .flatten()
                        .any(|c| {
                            c["name"] == container.as_str() && c["state"].get("running").is_some()
                        })
            });
            let now = std::fs::read(&path).unwrap_or_default();
            if now.len() > sent {
                if tx.send(Bytes::copy_from_slice(&now[sent..])).await.is_err() {
                    return;
                }
                sent = now.len();
            }
            if !same_run {
                return;
            }
        }
    });
    Ok(text_response(Body::Stream(rx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(statuses: Value) -> Value {
        json!({"metadata": {"name": "db-0", "namespace": "default", "uid": "u"},
            "spec": {"initContainers": [{"name": "install"}], "containers": [{"name": "cassandra"}]},
            "status": {"containerStatuses": statuses,
                "initContainerStatuses": [{"name": "install", "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0}}}]}})
    }

    #[test]
    fn which_container_and_which_run() {
        let running = pod(json!([{"name": "cassandra", "restartCount": 2,
            "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 137}}}]));
        assert_eq!(
            pick(&running, None, false).unwrap(),
            ("cassandra".into(), 2)
        );
        assert_eq!(pick(&running, None, true).unwrap(), ("cassandra".into(), 1));
        assert_eq!(
            pick(&running, Some("install"), false).unwrap(),
            ("install".into(), 0)
        );
        let e = pick(&running, Some("install"), true).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "previous terminated container \"install\" in pod \"db-0\" not found"
        );
        let e = pick(&running, Some("nope"), false).unwrap_err();
        assert_eq!(e.message, "container nope is not valid for pod db-0");
        // Crash-looping: the current run is the last terminated one.
        let waiting = pod(json!([{"name": "cassandra", "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}]));
        assert_eq!(
            pick(&waiting, None, false).unwrap(),
            ("cassandra".into(), 2)
        );
        let fresh = pod(json!([{"name": "cassandra", "restartCount": 0,
            "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}]));
        assert_eq!(
            pick(&fresh, None, false).unwrap_err().message,
            "container \"cassandra\" in pod \"db-0\" is waiting to start: PodInitializing"
        );
        let mut two = running.clone();
        two["spec"]["containers"] = json!([{"name": "cassandra"}, {"name": "exporter"}]);
        assert_eq!(
            pick(&two, None, false).unwrap_err().message,
            "a container name must be specified for pod db-0, choose one of: [install cassandra exporter]"
        );
    }

    #[test]
    fn tails() {
        assert_eq!(tail(b"a\nb\nc\n", Some(2)), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", Some(2)), b"b\nc");
        assert_eq!(tail(b"a\nb\n", Some(5)), b"a\nb\n");
        assert_eq!(tail(b"a\nb\n", Some(0)), b"");
        assert_eq!(tail(b"a\nb\n", None), b"a\nb\n");
    }
}
