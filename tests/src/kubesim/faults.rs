//! Fault injection for chaos tests (rates of 409s, 500s, 429s, dropped
//! watches, slow responses, writes committed whose response is lost, and
//! watches that deliver their events late), hooks that kill or freeze a
//! registered process right after its Nth matching write commits, and the
//! request log tests read to count the writes an operator makes. Rates and
//! the log are set and read in process or through the admin endpoints
//! `/sim/faults` and `/sim/requests`; hooks in process. No I/O (the HTTP
//! layer sends the signals).

use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// What to inject, each a probability per request in `[0, 1]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultConfig {
    /// 409 Conflict on writes (create, update, patch, delete).
    pub conflict_rate: f64,
    /// 500 InternalError on any resource request.
    pub error_rate: f64,
    /// 429 TooManyRequests (with `Retry-After: 1`) on any resource request.
    pub throttle_rate: f64,
    /// A watch is closed by the server after a random delay up to
    /// `drop_watch_after_ms`.
    pub drop_watch_rate: f64,
    /// Longest time before a dropped watch is closed.
    pub drop_watch_after_ms: u64,
    /// A response is delayed by `slow_ms`.
    pub slow_rate: f64,
    /// Delay of a slow response.
    pub slow_ms: u64,
    /// A write that succeeded is answered 504 Timeout, as when the API
    /// server's response is lost after the store changed: the client must
    /// not take the write for undone.
    pub lost_response_rate: f64,
    /// A watch delivers every event (and bookmark) `late_watch_ms` after it
    /// happened: a stale cache the client acts on.
    pub late_watch_rate: f64,
    /// The delay of a late watch.
    pub late_watch_ms: u64,
    /// Only requests with these verbs (get, list, watch, create, update,
    /// patch, delete, deletecollection) are affected; empty: all.
    pub verbs: Vec<String>,
    /// Only requests for these resources (plural) are affected; empty: all.
    pub resources: Vec<String>,
}

/// The fault chosen for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 409
    Conflict,
    /// 500
    Error,
    /// 429
    Throttle,
}

/// What a [`WriteHook`] does to its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessAction {
    /// SIGKILL: a crash.
    Kill,
    /// SIGSTOP: a frozen process (a long GC pause, a stalled node); the
    /// test resumes it with SIGCONT.
    Freeze,
}

/// Kill or freeze a process right after the `nth` (from 1) write that
/// matches `verb`, `resource` and (when given) `name` has committed, before
/// its response is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteHook {
    /// The host pid of the process.
    pub pid: u32,
    /// create, update, patch, delete or deletecollection.
    pub verb: String,
    /// The resource (plural), e.g. `statefulsets`: writes to the object
    /// itself; `plural/subresource` (e.g. `clusters/status`): writes to
    /// that subresource only.
    pub resource: String,
    /// The object's name; None: any.
    pub name: Option<String>,
    /// Only writes by this user (e.g. the operator's ServiceAccount,
    /// `system:serviceaccount:<ns>:<name>`); None: anyone's.
    pub user: Option<String>,
    /// Only writes whose committed object, as JSON text, contains this
    /// (e.g. `"reason":"MemberReplaced"` for one Event among many); None:
    /// any.
    pub contains: Option<String>,
    pub nth: u32,
    pub action: ProcessAction,
}

/// When process `pid` started (clock ticks since boot, field 22 of
/// `/proc/PID/stat`): with the pid, it names one process, not whichever
/// holds the pid later. None when no such process runs.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// One committed write, as the hooks match it.
#[derive(Debug, Clone, Copy)]
pub struct CommittedWrite<'a> {
    pub user: &'a str,
    pub verb: &'a str,
    pub resource: &'a str,
    /// "" for the object itself.
    pub subresource: &'a str,
    pub name: &'a str,
    /// The committed object as the response carries it ("" when not JSON).
    pub body: &'a str,
}

impl WriteHook {
    fn matches(&self, w: &CommittedWrite) -> bool {
        let resource_matches = match self.resource.split_once('/') {
            Some((plural, sub)) => plural == w.resource && sub == w.subresource,
            None => self.resource == w.resource && w.subresource.is_empty(),
        };
        self.verb == w.verb
            && resource_matches
            && self.name.as_deref().is_none_or(|n| n == w.name)
            && self.user.as_deref().is_none_or(|u| u == w.user)
            && self.contains.as_deref().is_none_or(|c| w.body.contains(c))
    }
}

/// The faults in force, with a deterministic random source.
#[derive(Debug, Default)]
pub struct Faults {
    inner: Mutex<(FaultConfig, u64)>,
    /// Hooks, with the matching writes seen so far and the start time of
    /// their process when registered (see [`process_start`]).
    hooks: Mutex<Vec<(WriteHook, u32, Option<u64>)>>,
}

/// The verbs that write.
pub const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

impl Faults {
    /// Faults with a configuration.
    pub fn new(cfg: FaultConfig) -> Faults {
        Faults {
            inner: Mutex::new((cfg, 0x2545_F491_4F6C_DD1D)),
            hooks: Mutex::default(),
        }
    }

    /// Registers a hook.
    pub fn add_hook(&self, hook: WriteHook) {
        let started = process_start(hook.pid);
        self.hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((hook, 0, started));
    }

    /// Counts a committed write; the hooks it fires (removed: each fires
    /// once). A hook whose process has exited since it was registered is
    /// dropped unfired: its pid may belong to another process by now (a
    /// container's, or a command the kubelet waits for), which a SIGKILL
    /// or a SIGSTOP meant for the old one must not reach.
    pub fn fire_hooks(&self, write: &CommittedWrite) -> Vec<WriteHook> {
        let mut hooks = self.hooks.lock().unwrap_or_else(|e| e.into_inner());
        let mut fired = Vec::new();
        hooks.retain_mut(|(h, seen, started)| {
            if h.matches(write) {
                if started.is_none() || process_start(h.pid) != *started {
                    return false;
                }
                *seen += 1;
                if *seen >= h.nth {
                    fired.push(h.clone());
                    return false;
                }
            }
            true
        });
        fired
    }

    /// Whether the response to a successful write is to be lost.
    pub fn lose_response(&self, verb: &str, resource: &str) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cfg, state) = &mut *g;
        WRITES.contains(&verb)
            && Self::applies(cfg, verb, resource)
            && cfg.lost_response_rate > 0.0
            && Self::roll(state) < cfg.lost_response_rate
    }

    /// How late a new watch delivers its events, if it is to be late.
    pub fn late_watch(&self, resource: &str) -> Option<std::time::Duration> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cfg, state) = &mut *g;
        (Self::applies(cfg, "watch", resource)
            && cfg.late_watch_rate > 0.0
            && Self::roll(state) < cfg.late_watch_rate)
            .then(|| std::time::Duration::from_millis(cfg.late_watch_ms))
    }

    /// Replaces the configuration.
    pub fn set(&self, cfg: FaultConfig) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0 = cfg;
    }

    /// The configuration in force.
    pub fn get(&self) -> FaultConfig {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    fn roll(state: &mut u64) -> f64 {
        // xorshift64*
        let mut x = *state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn applies(cfg: &FaultConfig, verb: &str, resource: &str) -> bool {
        (cfg.verbs.is_empty() || cfg.verbs.iter().any(|v| v == verb))
            && (cfg.resources.is_empty() || cfg.resources.iter().any(|r| r == resource))
    }

    /// The delay to add to a request, if it is to be slow.
    pub fn delay(&self, verb: &str, resource: &str) -> Option<std::time::Duration> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cfg, state) = &mut *g;
        (Self::applies(cfg, verb, resource)
            && cfg.slow_rate > 0.0
            && Self::roll(state) < cfg.slow_rate)
            .then(|| std::time::Duration::from_millis(cfg.slow_ms))
    }

    /// The error to answer a request with instead of serving it, if any.
    pub fn pick(&self, verb: &str, resource: &str) -> Option<Fault> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cfg, state) = &mut *g;
        if !Self::applies(cfg, verb, resource) {
            return None;
        }
        if cfg.throttle_rate > 0.0 && Self::roll(state) < cfg.throttle_rate {
            return Some(Fault::Throttle);
        }
        if cfg.error_rate > 0.0 && Self::roll(state) < cfg.error_rate {
            return Some(Fault::Error);
        }
        if WRITES.contains(&verb)
            && cfg.conflict_rate > 0.0
            && Self::roll(state) < cfg.conflict_rate
        {
            return Some(Fault::Conflict);
        }
        None
    }

    /// When to drop a new watch, if it is to be dropped.
    pub fn drop_watch_after(&self, resource: &str) -> Option<std::time::Duration> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cfg, state) = &mut *g;
        if !Self::applies(cfg, "watch", resource)
            || cfg.drop_watch_rate <= 0.0
            || Self::roll(state) >= cfg.drop_watch_rate
        {
            return None;
        }
        let ms = (Self::roll(state) * cfg.drop_watch_after_ms as f64) as u64;
        Some(std::time::Duration::from_millis(ms))
    }
}

/// One request the API served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// Order of arrival, from 1.
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Query string ("" when none).
    pub query: String,
    /// Kubernetes verb (get, list, watch, create, update, patch, delete,
    /// deletecollection) or "" for non-resource requests.
    pub verb: String,
    /// API group of the resource ("" for core).
    pub group: String,
    /// Resource (plural), "" for non-resource requests.
    pub resource: String,
    /// Subresource ("status", "scale") or "".
    pub subresource: String,
    /// Namespace or "".
    pub namespace: String,
    /// Object name or "".
    pub name: String,
    /// `User-Agent` header.
    pub user_agent: String,
    /// `Content-Type` of the request body ("" when none).
    pub content_type: String,
    /// Status code answered.
    pub code: u16,
    /// The user the request was made as (after impersonation), "" on the
    /// test world's own endpoints.
    #[serde(default)]
    pub user: String,
    /// When the request arrived, in microseconds since the Unix epoch
    /// (the benchmark's reaction times).
    #[serde(default)]
    pub at_us: u64,
}

impl RequestRecord {
    /// Whether the request could change state.
    pub fn is_write(&self) -> bool {
        WRITES.contains(&self.verb.as_str())
    }
}

/// The log of requests.
#[derive(Debug, Default)]
pub struct RequestLog {
    inner: Mutex<(u64, Vec<RequestRecord>)>,
}

impl RequestLog {
    /// Appends a record, numbering it.
    pub fn push(&self, mut r: RequestRecord) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        r.seq = g.0;
        g.1.push(r);
    }

    /// The records with a sequence number above `since`.
    pub fn since(&self, since: u64) -> Vec<RequestRecord> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.1.iter().filter(|r| r.seq > since).cloned().collect()
    }

    /// Forgets the records (numbering goes on).
    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmap_create() -> CommittedWrite<'static> {
        CommittedWrite {
            user: "u",
            verb: "create",
            resource: "configmaps",
            subresource: "",
            name: "c",
            body: "",
        }
    }

    fn hook_for(pid: u32) -> WriteHook {
        WriteHook {
            pid,
            verb: "create".into(),
            resource: "configmaps".into(),
            name: None,
            user: None,
            contains: None,
            nth: 1,
            action: ProcessAction::Kill,
        }
    }

    #[test]
    fn a_hook_whose_process_exited_never_fires() {
        let f = Faults::default();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        f.add_hook(hook_for(gone.id()));
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        f.add_hook(hook_for(live.id()));
        let fired = f.fire_hooks(&configmap_create());
        let _ = live.kill();
        let _ = live.wait();
        assert_eq!(
            fired.iter().map(|h| h.pid).collect::<Vec<_>>(),
            vec![live.id()],
            "only the live process's hook fires"
        );
        assert!(
            f.fire_hooks(&configmap_create()).is_empty(),
            "each fires once, and the dead one is gone"
        );
    }

    #[test]
    fn a_process_start_names_one_process() {
        let me = std::process::id();
        assert!(process_start(me).is_some());
        assert_eq!(process_start(me), process_start(me));
        assert_eq!(process_start(u32::MAX), None);
    }

    #[test]
    fn a_hook_matches_a_subresource_and_text_only_when_asked() {
        let mut hook = hook_for(std::process::id());
        hook.verb = "patch".into();
        hook.resource = "clusters/status".into();
        hook.contains = Some("\"reason\":\"MemberLeaving\"".into());
        let write = |subresource, body| CommittedWrite {
            user: "u",
            verb: "patch",
            resource: "clusters",
            subresource,
            name: "c",
            body,
        };
        assert!(hook.matches(&write("status", r#"{"reason":"MemberLeaving"}"#)));
        assert!(!hook.matches(&write("status", r#"{"reason":"Converged"}"#)));
        assert!(!hook.matches(&write("", r#"{"reason":"MemberLeaving"}"#)));
        hook.resource = "clusters".into();
        assert!(!hook.matches(&write("status", r#"{"reason":"MemberLeaving"}"#)));
        assert!(hook.matches(&write("", r#"{"reason":"MemberLeaving"}"#)));
    }

    #[test]
    fn rates_zero_and_one_are_exact() {
        let f = Faults::new(FaultConfig::default());
        assert!(
            (0..100)
                .all(|_| f.pick("create", "pods").is_none() && f.delay("get", "pods").is_none())
        );
        f.set(FaultConfig {
            conflict_rate: 1.0,
            ..Default::default()
        });
        assert_eq!(f.pick("update", "pods"), Some(Fault::Conflict));
        assert_eq!(f.pick("get", "pods"), None, "conflicts are for writes only");
        f.set(FaultConfig {
            throttle_rate: 1.0,
            resources: vec!["configmaps".into()],
            ..Default::default()
        });
        assert_eq!(f.pick("get", "configmaps"), Some(Fault::Throttle));
        assert_eq!(f.pick("get", "pods"), None);
    }

    #[test]
    fn a_rate_is_roughly_kept() {
        let f = Faults::new(FaultConfig {
            error_rate: 0.3,
            ..Default::default()
        });
        let n = (0..10_000)
            .filter(|_| f.pick("get", "pods") == Some(Fault::Error))
            .count();
        assert!((2700..3300).contains(&n), "{n} errors of 10000 at rate 0.3");
    }

    #[test]
    fn config_json_is_camel_case_with_defaults() {
        let cfg: FaultConfig =
            serde_json::from_str(r#"{"errorRate": 0.5, "verbs": ["list"]}"#).unwrap();
        assert_eq!(cfg.error_rate, 0.5);
        assert_eq!(cfg.conflict_rate, 0.0);
        assert_eq!(cfg.verbs, vec!["list".to_string()]);
    }

    #[test]
    fn log_numbers_and_filters() {
        let log = RequestLog::default();
        let rec = |verb: &str| RequestRecord {
            seq: 0,
            method: "GET".into(),
            path: "/".into(),
            query: String::new(),
            verb: verb.into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            user_agent: "t".into(),
            content_type: String::new(),
            code: 200,
            user: "u".into(),
            at_us: 0,
        };
        log.push(rec("get"));
        log.push(rec("patch"));
        let all = log.since(0);
        assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(all.iter().filter(|r| r.is_write()).count(), 1);
        assert_eq!(log.since(1).len(), 1);
        log.clear();
        log.push(rec("get"));
        assert_eq!(log.since(0)[0].seq, 3);
    }
}
