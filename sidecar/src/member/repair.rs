//! The repair of a member replaced at its own address (issue 30). A
//! replacement started with `replace_address_first_boot=<its own address>`
//! streams each range from one replica, and while it does no write is
//! forwarded to it ("Writes will not be forwarded to this node during
//! replacement because it has the same address as the node to be
//! replaced"); hints older than `max_hint_window` (3 h) are gone. Cassandra
//! says so and leaves the repair to the operator: at low consistency
//! levels the member would serve stale data until one runs.
//!
//! So, once the replacement is NORMAL, the sidecar runs a full repair of
//! the node's ranges (not only its primary ranges: its copies of the
//! others' ranges missed the same writes) of every keyspace `nodetool
//! repair` repairs when it is given none (`NonLocalStrategyKeyspaces`:
//! the user's and the replicated system keyspaces, whose `system_auth`
//! rows are what logins read), one keyspace at a time, through
//! `StorageService.repairAsync` as nodetool starts it, and follows each by
//! `getParentRepairStatus` (4.0+; JMX notifications cannot reach a
//! client through Jolokia's reads). The repair is long; every call is
//! short, so the sidecar's runtime and the probes' Jolokia calls are never
//! held up.
//!
//! Crash safety: the marker [`markers::repair_marker`] is written on the
//! data volume before Cassandra starts to replace, records each keyspace
//! once its repair completed, and is removed only when all have: a sidecar
//! that restarts with it resumes (the keyspaces not yet repaired are
//! repaired again from the start). A failed repair (a replica down, a
//! stream broken) is logged and tried again with a growing delay. Where it
//! stands is recorded on the member Service ([`RECORD`]), for the
//! controller and the user: "repair pending after replace".
//!
//! ScyllaDB is left out: it replaces by host ID with repair-based node
//! operations (its default since 5.x), which reads every replica, and its
//! REST API's repair would need its own fake and test.
//!
//! The decisions (what the marker says, what a status means, the next
//! step of a repair, the delays) are pure and unit-tested; [`run`] does the
//! I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crds::v1alpha1::ClusterMode;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::jolokia::{self, OperationMode, StorageService};
use crate::markers::{self, MarkerError};
use crate::node::Node;

/// The member Service annotation where the sidecar records where the
/// repair after a replace stands (a JSON [`Record`]): the contract's.
pub use crds::contract::REPAIR_AFTER_REPLACE as RECORD;

/// The options of `repairAsync`, as `nodetool repair -full` sends them
/// (`RepairOption`'s keys, 4.1 jar): a full (not incremental) repair of
/// every range the node replicates (not only its primary ranges),
/// replicas validated in parallel, one job thread, no tracing.
pub fn repair_options() -> BTreeMap<String, String> {
    [
        ("parallelism", "parallel"),
        ("primaryRange", "false"),
        ("incremental", "false"),
        ("jobThreads", "1"),
        ("trace", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// What the marker holds: the address replaced, and the keyspaces whose
/// repair completed since.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub replaced: String,
    pub done: BTreeSet<String>,
}

impl Progress {
    /// A replace that starts now: nothing repaired yet.
    pub fn new(replaced: &str) -> Progress {
        Progress {
            replaced: replaced.to_string(),
            done: BTreeSet::new(),
        }
    }

    /// The marker's text: `replaced <address>`, then `done <keyspace>`
    /// per line. Pure.
    pub fn to_text(&self) -> String {
        let mut text = format!("replaced {}\n", self.replaced);
        for keyspace in &self.done {
            text.push_str(&format!("done {keyspace}\n"));
        }
        text
    }

    /// The marker's text read back; unknown lines are ignored (an empty
    /// or foreign marker still asks for the whole repair). Pure.
    pub fn parse(text: &str) -> Progress {
        let mut progress = Progress::default();
        for line in text.lines() {
            match line.trim().split_once(' ') {
                Some(("replaced", address)) => progress.replaced = address.trim().to_string(),
                Some(("done", keyspace)) => {
                    progress.done.insert(keyspace.trim().to_string());
                }
                _ => {}
            }
        }
        progress
    }
}

/// Whether this start owes a repair, writing the marker first when it
/// replaces (Cassandra only: see the module doc). Called before Cassandra
/// starts, so that a crash at any moment after the replace began leaves
/// the marker. A replace that starts again (it never reached NORMAL)
/// starts its progress afresh.
pub fn prepare(
    mode: ClusterMode,
    replace_address: Option<&str>,
    data_dir: &Path,
) -> Result<bool, MarkerError> {
    if mode != ClusterMode::Cassandra {
        return Ok(false);
    }
    let marker = markers::repair_marker(data_dir);
    if let Some(address) = replace_address {
        markers::write_marker(&marker, &Progress::new(address).to_text())?;
    }
    Ok(marker.is_file())
}

/// A repair command's state, from `getParentRepairStatus`
/// (`ActiveRepairService.ParentRepairStatus` of the 4.1 jar: the name,
/// then the messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The node does not know the command (null): not started yet (it
    /// waits in the repair executor's queue), or forgotten.
    Unknown,
    InProgress,
    Completed(String),
    Failed(String),
}

impl Status {
    /// Pure.
    pub fn of(answer: Option<Vec<String>>) -> Status {
        let Some(list) = answer else {
            return Status::Unknown;
        };
        let mut items = list.into_iter();
        let name = items.next().unwrap_or_default();
        let messages = items.collect::<Vec<_>>().join("; ");
        match name.as_str() {
            "IN_PROGRESS" => Status::InProgress,
            "COMPLETED" => Status::Completed(messages),
            "FAILED" => Status::Failed(messages),
            // An empty list or a name this code does not know: keep
            // waiting rather than take it for an outcome.
            _ => Status::Unknown,
        }
    }
}

/// What is done next about a started command, given its status now and
/// whether it was seen in progress before. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Wait,
    Completed,
    Failed(String),
}

pub fn next(status: &Status, seen_in_progress: bool) -> Next {
    match status {
        Status::Completed(_) => Next::Completed,
        Status::Failed(message) => Next::Failed(if message.is_empty() {
            "the repair failed".to_string()
        } else {
            message.clone()
        }),
        Status::InProgress => Next::Wait,
        // Known once, unknown now: its status was evicted (the node keeps
        // it a day) or the node is another process: start it again.
        Status::Unknown if seen_in_progress => {
            Next::Failed("the node no longer knows the repair".to_string())
        }
        Status::Unknown => Next::Wait,
    }
}

/// The keyspaces still to repair, in the node's order. Pure.
pub fn to_repair(keyspaces: &[String], progress: &Progress) -> Vec<String> {
    keyspaces
        .iter()
        .filter(|k| !progress.done.contains(*k))
        .cloned()
        .collect()
}

/// The delay before attempt `attempt + 1` after a failed one: 10 s,
/// doubling, at most 10 minutes. Pure.
pub fn backoff(attempt: u32) -> Duration {
    backoff_from(Duration::from_secs(10), attempt)
}

/// The same growth from another first delay (the maintenance operations'
/// is settable, for tests): `first` doubling per attempt, at most 10
/// minutes (or `first`, when it is longer). Pure.
pub fn backoff_from(first: Duration, attempt: u32) -> Duration {
    let delay = first.saturating_mul(1u32 << attempt.min(16));
    delay.min(Duration::from_secs(600).max(first))
}

/// Where the repair stands, as recorded on the member Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// `pending` (waiting for the node to be NORMAL), `running`,
    /// `retrying` (an attempt failed), `done`, `unsupported` (a Cassandra
    /// that cannot report a repair's status: run `nodetool repair -full`).
    pub state: String,
    /// The keyspace being repaired, when running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<String>,
    /// What failed, when retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The keyspaces repaired so far.
    #[serde(default)]
    pub repaired: Vec<String>,
    /// RFC 3339, when this was recorded.
    pub at: String,
}

impl Record {
    fn new(state: &str, progress: &Progress) -> Record {
        Record {
            state: state.to_string(),
            keyspace: None,
            error: None,
            repaired: progress.done.iter().cloned().collect(),
            at: k8s_openapi::jiff::Timestamp::now().to_string(),
        }
    }
}

/// How a started repair command is followed: `getParentRepairStatus`
/// (Cassandra's StorageService; a script in the tests). Shared with the
/// scheduled repairs of `member::maintenance`.
pub(crate) trait Statuses {
    async fn status(&self, cmd: i64) -> Result<Option<Vec<String>>, jolokia::Error>;
}

impl Statuses for StorageService {
    async fn status(&self, cmd: i64) -> Result<Option<Vec<String>>, jolokia::Error> {
        self.parent_repair_status(cmd).await
    }
}

/// The calls a repair after a replace makes to the node (Cassandra's
/// StorageService; a script in the tests).
pub(crate) trait Repairs: Statuses {
    async fn keyspaces(&self) -> Result<Vec<String>, jolokia::Error>;
    async fn start(&self, keyspace: &str) -> Result<i64, jolokia::Error>;
}

impl Repairs for StorageService {
    async fn keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
        self.non_local_strategy_keyspaces().await
    }

    async fn start(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
        self.repair_async(keyspace, &repair_options()).await
    }
}

/// How often the sidecar reads the node.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Between reads of a repair's status and of the operation mode.
    pub poll: Duration,
    /// A failed pass waits `backoff(attempt)` times this (1: as is).
    pub backoff_scale: u32,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            poll: Duration::from_secs(2),
            backoff_scale: 1,
        }
    }
}

/// Where a pass tells how it goes: the sidecar logs, records it on the
/// member Service and rewrites the marker; the tests collect it.
pub(crate) trait Report {
    /// A repair command started (0: nothing to repair).
    async fn started(&mut self, keyspace: &str, cmd: i64, progress: &Progress);
    /// A keyspace is repaired: `progress` has it.
    async fn completed(&mut self, keyspace: &str, cmd: i64, progress: &Progress);
}

/// One pass: repairs each keyspace not yet done, one after the other,
/// reporting each command started and each keyspace repaired (or with
/// nothing to repair). Keyspaces whose repair failed are left for the
/// next pass; their errors are returned.
pub(crate) async fn pass(
    node: &impl Repairs,
    progress: &mut Progress,
    pace: Pace,
    report: &mut impl Report,
) -> Result<(), Vec<String>> {
    let keyspaces = node
        .keyspaces()
        .await
        .map_err(|e| vec![format!("listing the keyspaces: {e}")])?;
    let mut failures = Vec::new();
    for keyspace in to_repair(&keyspaces, progress) {
        let cmd = match node.start(&keyspace).await {
            Ok(cmd) => cmd,
            Err(e) => {
                failures.push(format!("{keyspace}: {e}"));
                continue;
            }
        };
        report.started(&keyspace, cmd, progress).await;
        let outcome = if cmd == 0 {
            // StorageService.repair: fewer than 2 replicas, or no range
            // here: nothing to repair, and no status will ever be.
            Next::Completed
        } else {
            follow(node, cmd, pace).await
        };
        match outcome {
            Next::Completed => {
                progress.done.insert(keyspace.clone());
                report.completed(&keyspace, cmd, progress).await;
            }
            Next::Failed(message) => failures.push(format!("{keyspace} (#{cmd}): {message}")),
            Next::Wait => unreachable!("follow returns an outcome"),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
    }
}

/// Reads a command's status until it completed or failed. A read that
/// fails (the node busy, restarting) is read again; a node that stays
/// unreachable for a minute failed the command.
pub(crate) async fn follow(node: &impl Statuses, cmd: i64, pace: Pace) -> Next {
    let mut seen_in_progress = false;
    let mut unreachable_for = Duration::ZERO;
    loop {
        match node.status(cmd).await {
            Ok(answer) => {
                unreachable_for = Duration::ZERO;
                let status = Status::of(answer);
                seen_in_progress |= status == Status::InProgress;
                match next(&status, seen_in_progress) {
                    Next::Wait => {}
                    outcome => return outcome,
                }
            }
            Err(e) => {
                unreachable_for += pace.poll;
                if unreachable_for >= Duration::from_secs(60) {
                    return Next::Failed(format!("reading its status: {e}"));
                }
            }
        }
        tokio::time::sleep(pace.poll).await;
    }
}

/// The repair after a replace, for as long as it takes: waits until the
/// node is NORMAL, runs passes until one leaves nothing to repair (a
/// failed one is retried after [`backoff`]), then removes the marker.
/// Returns at once when there is no marker (or the node is ScyllaDB).
pub async fn run(node: Node, data_dir: PathBuf, services: Api<Service>, name: String, pace: Pace) {
    let Node::Cassandra(storage) = node.with_timeout(Duration::from_secs(10)) else {
        return;
    };
    let marker = markers::repair_marker(&data_dir);
    let Ok(text) = std::fs::read_to_string(&marker) else {
        return;
    };
    let mut progress = Progress::parse(&text);
    info!(member = %name, replaced = %progress.replaced, repaired = ?progress.done, "a repair is due after the replace: it runs once the node is NORMAL");
    let mut reporter = Reporter {
        services,
        name: name.clone(),
        marker: marker.clone(),
    };
    reporter.record(&Record::new("pending", &progress)).await;
    let mut attempt = 0u32;
    loop {
        wait_normal(&storage, pace).await;
        if let Ok(version) = storage.release_version().await
            && !version.has_parent_repair_status()
        {
            // 3.11 has no getParentRepairStatus: the outcome of a repair
            // reaches a client only as JMX notifications.
            warn!(member = %name, %version, "this Cassandra cannot report a repair's status over Jolokia: run `nodetool repair -full` on this member; the marker stays");
            reporter
                .record(&Record::new("unsupported", &progress))
                .await;
            return;
        }
        let outcome = pass(storage.as_ref(), &mut progress, pace, &mut reporter).await;
        match outcome {
            Ok(()) => break,
            Err(failures) => {
                let delay = backoff(attempt) * pace.backoff_scale.max(1);
                let error = failures.join("; ");
                warn!(member = %name, attempt = attempt + 1, retry_in = ?delay, %error, "repair after replace failed: retrying");
                let mut record = Record::new("retrying", &progress);
                record.error = Some(error);
                reporter.record(&record).await;
                attempt = attempt.saturating_add(1);
                tokio::time::sleep(delay).await;
            }
        }
    }
    match markers::remove_marker(&marker) {
        Ok(()) => {
            info!(member = %name, repaired = ?progress.done, "repair after replace complete: every keyspace repaired");
            // The controller and the user learn it here only: tried
            // again while the API server does not answer.
            for _ in 0..30 {
                if reporter.record(&Record::new("done", &progress)).await {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
        // The next start repairs again: harmless, only slow.
        Err(e) => warn!(member = %name, error = %e, "removing the repair marker"),
    }
}

async fn wait_normal(storage: &Arc<StorageService>, pace: Pace) {
    loop {
        if let Ok(OperationMode::Normal) = storage.operation_mode().await {
            return;
        }
        tokio::time::sleep(pace.poll).await;
    }
}

/// The sidecar's [`Report`]: the log, the member Service's record, the
/// marker.
struct Reporter {
    services: Api<Service>,
    name: String,
    marker: PathBuf,
}

impl Report for Reporter {
    async fn started(&mut self, keyspace: &str, cmd: i64, progress: &Progress) {
        info!(member = %self.name, %keyspace, cmd, "repair after replace: started");
        let mut record = Record::new("running", progress);
        record.keyspace = Some(keyspace.to_string());
        self.record(&record).await;
    }

    async fn completed(&mut self, keyspace: &str, cmd: i64, progress: &Progress) {
        info!(member = %self.name, %keyspace, cmd, "repair after replace: keyspace repaired");
        if let Err(e) = markers::write_marker(&self.marker, &progress.to_text()) {
            warn!(member = %self.name, error = %e, "recording the repair's progress");
        }
    }
}

impl Reporter {
    /// Writes the record on the member Service; a failure is logged (the
    /// repair goes on, the log says where it stands) and answered false.
    async fn record(&self, record: &Record) -> bool {
        let value = serde_json::to_string(record).unwrap_or_default();
        let patch = serde_json::json!({"metadata": {"annotations": {RECORD: value}}});
        match self
            .services
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                warn!(member = %self.name, error = %e, "recording the repair after replace");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_options_are_a_full_repair_of_every_range_of_the_node() {
        let options = repair_options();
        assert_eq!(options["incremental"], "false");
        assert_eq!(options["primaryRange"], "false");
        assert_eq!(options["parallelism"], "parallel");
        assert!(!options.contains_key("ranges"), "all of the node's ranges");
        assert!(
            !options.contains_key("dataCenters"),
            "with every datacenter"
        );
        let request = jolokia::repair_request("ks", &options);
        assert_eq!(
            request.body()["arguments"],
            serde_json::json!(["ks", {"parallelism": "parallel", "primaryRange": "false",
                "incremental": "false", "jobThreads": "1", "trace": "false"}])
        );
        assert_eq!(request.body()["operation"], "repairAsync");
    }

    #[test]
    fn the_marker_records_the_replace_and_the_keyspaces_repaired() {
        let mut progress = Progress::new("10.96.0.12");
        assert_eq!(progress.to_text(), "replaced 10.96.0.12\n");
        progress.done.insert("ks".into());
        progress.done.insert("system_auth".into());
        let text = progress.to_text();
        assert_eq!(text, "replaced 10.96.0.12\ndone ks\ndone system_auth\n");
        assert_eq!(Progress::parse(&text), progress);
        // A marker cut short or foreign still asks for the whole repair.
        assert_eq!(Progress::parse(""), Progress::default());
        assert_eq!(Progress::parse("garbage\n").done.len(), 0);
        let keyspaces: Vec<String> = ["system_auth", "ks", "other"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(to_repair(&keyspaces, &progress), vec!["other".to_string()]);
    }

    #[test]
    fn a_replacing_cassandra_start_writes_the_marker_before_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let marker = markers::repair_marker(data);
        // A normal start owes nothing.
        assert!(!prepare(ClusterMode::Cassandra, None, data).unwrap());
        assert!(!marker.exists());
        // ScyllaDB is left out (module doc).
        assert!(!prepare(ClusterMode::Scylla, Some("10.96.0.12"), data).unwrap());
        assert!(!marker.exists());
        // A replace writes it, progress empty.
        assert!(prepare(ClusterMode::Cassandra, Some("10.96.0.12"), data).unwrap());
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap(),
            "replaced 10.96.0.12\n"
        );
        // A later start without replace (the sidecar restarted after the
        // replace) still owes the repair, with what it had done.
        markers::write_marker(&marker, "replaced 10.96.0.12\ndone ks\n").unwrap();
        assert!(prepare(ClusterMode::Cassandra, None, data).unwrap());
        assert_eq!(
            Progress::parse(&std::fs::read_to_string(&marker).unwrap())
                .done
                .len(),
            1
        );
        // A replace started again (it never got NORMAL) starts afresh.
        assert!(prepare(ClusterMode::Cassandra, Some("10.96.0.12"), data).unwrap());
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap(),
            "replaced 10.96.0.12\n"
        );
    }

    #[test]
    fn statuses_as_the_4_1_mbean_answers_them() {
        assert_eq!(Status::of(None), Status::Unknown);
        assert_eq!(
            Status::of(Some(vec!["IN_PROGRESS".into()])),
            Status::InProgress
        );
        assert_eq!(
            Status::of(Some(vec![
                "COMPLETED".into(),
                "Repair completed successfully".into()
            ])),
            Status::Completed("Repair completed successfully".into())
        );
        assert_eq!(
            Status::of(Some(vec![
                "FAILED".into(),
                "Endpoint not alive: /10.0.0.2:7000".into(),
                "Repair command #4 finished with error".into()
            ])),
            Status::Failed(
                "Endpoint not alive: /10.0.0.2:7000; Repair command #4 finished with error".into()
            )
        );
        assert_eq!(Status::of(Some(vec![])), Status::Unknown);
        assert_eq!(next(&Status::Unknown, false), Next::Wait);
        assert_eq!(next(&Status::InProgress, true), Next::Wait);
        assert!(matches!(next(&Status::Unknown, true), Next::Failed(_)));
        assert_eq!(
            next(&Status::Completed(String::new()), true),
            Next::Completed
        );
        assert!(
            matches!(next(&Status::Failed(String::new()), false), Next::Failed(m) if !m.is_empty())
        );
    }

    #[test]
    fn failed_passes_are_retried_later_and_later() {
        assert_eq!(backoff(0), Duration::from_secs(10));
        assert_eq!(backoff(1), Duration::from_secs(20));
        assert_eq!(backoff(3), Duration::from_secs(80));
        assert_eq!(backoff(6), Duration::from_secs(600));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(600));
        let first = Duration::from_millis(100);
        assert_eq!(backoff_from(first, 0), first);
        assert_eq!(backoff_from(first, 2), Duration::from_millis(400));
        assert_eq!(backoff_from(first, 40), Duration::from_secs(600));
        // A first delay above the cap is kept, never shortened.
        let long = Duration::from_secs(900);
        assert_eq!(backoff_from(long, 3), long);
    }

    /// The answers of `getParentRepairStatus` to one command, in turn.
    type Answers = Vec<Option<Vec<String>>>;

    /// A node that answers from a script: per keyspace, the command number
    /// `repairAsync` gives and the statuses it then reports in turn (the
    /// last repeats).
    struct Script {
        keyspaces: Vec<String>,
        plans: Mutex<BTreeMap<String, Vec<(i64, Answers)>>>,
        statuses: Mutex<BTreeMap<i64, Answers>>,
        started: Mutex<Vec<String>>,
    }

    impl Repairs for Script {
        async fn keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
            Ok(self.keyspaces.clone())
        }
        async fn start(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
            self.started.lock().unwrap().push(keyspace.to_string());
            let (cmd, statuses) = self
                .plans
                .lock()
                .unwrap()
                .get_mut(keyspace)
                .expect("a plan")
                .remove(0);
            self.statuses.lock().unwrap().insert(cmd, statuses);
            Ok(cmd)
        }
    }

    impl Statuses for Script {
        async fn status(&self, cmd: i64) -> Result<Option<Vec<String>>, jolokia::Error> {
            let mut statuses = self.statuses.lock().unwrap();
            let list = statuses.get_mut(&cmd).expect("started");
            Ok(if list.len() > 1 {
                list.remove(0)
            } else {
                list[0].clone()
            })
        }
    }

    /// The markers a pass would write, in turn.
    #[derive(Default)]
    struct Written {
        markers: Vec<String>,
    }

    impl Report for Written {
        async fn started(&mut self, _: &str, _: i64, _: &Progress) {}
        async fn completed(&mut self, _: &str, _: i64, progress: &Progress) {
            self.markers.push(progress.to_text());
        }
    }

    fn s(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|i| i.to_string()).collect())
    }

    /// A pass repairs each keyspace once it is reported COMPLETED (after
    /// null while queued and IN_PROGRESS), takes command 0 as nothing to
    /// repair, leaves a FAILED one (or one the node forgot) for the next
    /// pass, and that pass repairs only what is left.
    #[tokio::test]
    async fn a_pass_follows_each_repair_to_its_end_and_the_next_resumes() {
        let pace = Pace {
            poll: Duration::from_millis(10),
            backoff_scale: 1,
        };
        let script = Script {
            keyspaces: ["system_auth", "ks", "flaky", "forgot"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            plans: Mutex::new(
                [
                    ("system_auth".to_string(), vec![(0, vec![None])]),
                    (
                        "ks".to_string(),
                        vec![(
                            1,
                            vec![
                                None,
                                s(&["IN_PROGRESS"]),
                                s(&["IN_PROGRESS"]),
                                s(&["COMPLETED", "Repair completed successfully"]),
                            ],
                        )],
                    ),
                    (
                        "flaky".to_string(),
                        vec![
                            (
                                2,
                                vec![
                                    s(&["IN_PROGRESS"]),
                                    s(&["FAILED", "Endpoint not alive: /10.0.0.2:7000"]),
                                ],
                            ),
                            (4, vec![s(&["COMPLETED", "ok"])]),
                        ],
                    ),
                    (
                        "forgot".to_string(),
                        vec![
                            (3, vec![s(&["IN_PROGRESS"]), None]),
                            (5, vec![s(&["COMPLETED", "ok"])]),
                        ],
                    ),
                ]
                .into(),
            ),
            statuses: Mutex::default(),
            started: Mutex::default(),
        };
        let mut progress = Progress::new("10.0.0.3");
        let mut written = Written::default();
        let first = pass(&script, &mut progress, pace, &mut written).await;
        let failures = first.expect_err("two keyspaces failed");
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("flaky (#2): Endpoint not alive"));
        assert!(failures[1].starts_with("forgot (#3): the node no longer knows"));
        assert_eq!(
            progress.done.iter().collect::<Vec<_>>(),
            vec!["ks", "system_auth"]
        );
        // The marker was rewritten after each keyspace.
        assert_eq!(
            written.markers,
            vec![
                "replaced 10.0.0.3\ndone system_auth\n",
                "replaced 10.0.0.3\ndone ks\ndone system_auth\n"
            ]
        );
        pass(&script, &mut progress, pace, &mut Written::default())
            .await
            .expect("the second pass repairs what was left");
        assert_eq!(progress.done.len(), 4);
        assert_eq!(
            *script.started.lock().unwrap(),
            vec!["system_auth", "ks", "flaky", "forgot", "flaky", "forgot"]
        );
    }
}
