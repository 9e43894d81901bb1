//! The member's side of the maintenance operations (issue 33): cleanup
//! after a scale-up, upgradesstables after a major upgrade, scheduled
//! repairs. The controller asks one member at a time, on its member
//! Service (`cassandra.rook.io/maintenance-request`, a
//! [`Request`]); the sidecar runs it through Jolokia while the node is
//! NORMAL and records where it stands (`cassandra.rook.io/maintenance`, a
//! [`Record`]), until the record says `done` for that request. The
//! records are `crds::contract::maintenance`'s.
//!
//! - **cleanup**: `forceKeyspaceCleanup` of each keyspace `nodetool
//!   cleanup` covers when it is given none (`NonLocalStrategyKeyspaces`),
//!   one after the other, each recorded in `keyspacesDone` once its call
//!   returned status 0.
//! - **upgradesstables**: `upgradeSSTables(keyspace, excludeCurrentVersion
//!   = true, ...)` of each keyspace holding old-format sstables (the data
//!   directory's file names, as the `/metrics` gauge counts them), then
//!   the count again, recorded with `done`.
//! - **repair**: the node's primary ranges of every keyspace nodetool
//!   repairs, cut into subranges ([`ring`]), each repaired with
//!   `repairAsync` and followed with `getParentRepairStatus` as the repair
//!   after a replace is (`member::repair`); each subrange repaired is
//!   recorded in a marker on the data volume ([`cycle`]), so a stop or a
//!   crash resumes with what is left of the request's cycle. A request
//!   withdrawn while a repair runs stops it (`forceTerminateAllRepairSessions`)
//!   and is recorded `stopped`. On completion the sidecar writes
//!   `cassandra.rook.io/repaired` ([`Repaired`]) with the `done` record,
//!   in one patch.
//!
//! Crash safety: what a request has done is on its record
//! (`keyspacesDone`) and, for repairs, on the marker; a sidecar restarted
//! with the request standing and its record not `done` for it resumes
//! with what is left (the keyspace interrupted is upgraded again from the
//! start: idempotent; Cassandra itself restarted with the sidecar, its
//! container's init, so no call of the previous run is still going),
//! except a cleanup, which starts over: the node's commitlog replay
//! brings back what it had removed ([`resumed_keyspaces`]). A failure is recorded `failed`, with Cassandra's
//! words, and tried again after a growing delay while the request stands.
//!
//! One operation at a time: this task runs them one after the other, and
//! waits while the repair after a replace (`member::repair`) owes its
//! repair. The cleanup and upgradesstables calls block on the node for as
//! long as they run (hours on a large node): they are made on the
//! maintenance's own client (its own connections, a timeout of days), on
//! the async runtime (an HTTP request in flight holds no thread); the
//! Jolokia agent serves them on one of its pool's threads
//! (`render::jvm::JOLOKIA_THREADS`), while the probes, the gossip record
//! and the decommission protocol are served on the others.
//!
//! ScyllaDB is left out: a request is answered `failed` ("maintenance is
//! not supported in scylla mode yet"); the controller sends none.
//!
//! The decisions ([`decide`], the passes, the subranges, the marker) are
//! pure or run against the [`Maintained`] and [`Report`] traits, scripted
//! in the tests; [`run`] does the I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crds::contract::maintenance::{
    OLD_FORMAT_SSTABLES, Operation, RECORD, REPAIRED, REQUEST, Record, Repaired, Request, State,
    is_local_system_keyspace, old_format_sstables,
};
use crds::v1alpha1::ClusterMode;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::repair::{self, Next, Pace, Statuses};
use crate::jolokia::{self, CassandraVersion, Jolokia, OperationMode, StorageService};
use crate::markers;
use crate::node::Node;
use crate::sstables;

pub mod cycle;
pub mod ring;

pub use cycle::Cycle;
pub use ring::Subrange;

/// How many sstables a cleanup or upgradesstables rewrites at once:
/// nodetool's default (`-j 2`), which leaves the node's other compaction
/// threads to its own compactions.
pub const JOBS: u32 = 2;

/// How long a blocking call (a keyspace's cleanup or upgradesstables) may
/// take before the client gives up on it. Days: giving up would not stop
/// the node's work, and the retry would then run a second one beside it.
pub const LONG_CALL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// What Scylla-mode members answer to a request.
pub const SCYLLA_REFUSAL: &str = "maintenance is not supported in scylla mode yet";

/// The pace of the maintenance.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Between reads of a repair's status, and of the operation mode while
    /// waiting for NORMAL.
    pub poll: Duration,
    /// The delay before the first retry of a failed request, doubling
    /// after each further failure (at most 10 minutes).
    pub retry: Duration,
    /// How many subranges the node's primary ranges are cut into, per
    /// keyspace ([`ring`]).
    pub subranges: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            poll: Duration::from_secs(2),
            retry: Duration::from_secs(10),
            subranges: ring::DEFAULT_SUBRANGES,
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The controller's request on the member Service, if readable.
pub fn request_of(service: &Service) -> Option<Request> {
    annotation(service, REQUEST).and_then(Request::from_annotation)
}

/// The sidecar's record on the member Service, if readable.
pub fn record_of(service: &Service) -> Option<Record> {
    annotation(service, RECORD).and_then(Record::from_annotation)
}

/// Whether the request `id` still stands on the member Service.
fn stands(service: &Service, id: &str) -> bool {
    request_of(service).is_some_and(|r| r.id == id)
}

/// Returns once the request `id` no longer stands (withdrawn, or another
/// in its place).
async fn withdrawn(service: &mut watch::Receiver<Service>, id: &str) {
    loop {
        if !stands(&service.borrow_and_update(), id) {
            return;
        }
        if service.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What the sidecar does about the request on its member Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing asked, or the record says the request is done (or, in
    /// scylla mode, already refused).
    Idle,
    /// No request, and the record says one runs: it was withdrawn while
    /// the sidecar was down (the node restarted with it, so nothing
    /// runs). Record it `stopped`, as a withdrawal seen is.
    Abandoned(Record),
    /// Answer `failed`: scylla mode.
    Refuse(Request),
    /// Run the request: afresh, or resuming with the keyspaces its record
    /// has done and its start (a repair resumes from its marker instead).
    Run {
        request: Request,
        keyspaces_done: Vec<String>,
        started_at: Option<String>,
    },
}

/// The decision, from the request and the sidecar's record of it. A
/// record of the same request that is not `done` (`running` when the
/// sidecar crashed, `failed`, `stopped`) resumes it. Pure.
pub fn decide(request: Option<&Request>, record: Option<&Record>, mode: ClusterMode) -> Action {
    let Some(request) = request else {
        return match record {
            Some(r) if r.state == State::Running => Action::Abandoned(r.clone()),
            _ => Action::Idle,
        };
    };
    let same = record.filter(|r| r.request == request.id && r.operation == request.operation);
    if mode != ClusterMode::Cassandra {
        return match same {
            Some(r) if r.state == State::Failed => Action::Idle,
            _ => Action::Refuse(request.clone()),
        };
    }
    match same {
        Some(r) if r.state == State::Done => Action::Idle,
        Some(r) => Action::Run {
            request: request.clone(),
            keyspaces_done: r.keyspaces_done.clone(),
            started_at: Some(r.started_at.clone()),
        },
        None => Action::Run {
            request: request.clone(),
            keyspaces_done: Vec::new(),
            started_at: None,
        },
    }
}

/// The keyspaces a resumed request skips. A cleanup resumed from a record
/// an earlier run of the sidecar wrote starts over: the node restarted
/// with the sidecar (its container's init), and Cassandra's commitlog
/// replay brings back what the cleanup removed (a cleanup writes its
/// sstables without the commitlog positions of the ones it rewrites, so
/// the replay re-applies every mutation of the segments still on disk:
/// seen on real 4.1.8, "Log replay complete, 2351 replayed mutations",
/// every key the node had given away back on its disk). Cleaning a
/// keyspace again is idempotent and cheap once it is clean. An
/// upgradesstables resumes (the replay writes the current format), and a
/// repair resumes from its marker (a replay removes nothing it repaired).
/// Pure.
pub fn resumed_keyspaces(
    operation: Operation,
    keyspaces_done: Vec<String>,
    recorded_by_this_run: bool,
) -> Vec<String> {
    if operation == Operation::Cleanup && !recorded_by_this_run {
        Vec::new()
    } else {
        keyspaces_done
    }
}

/// Where a request stands while it runs: what its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub request: Request,
    pub started_at: String,
    pub keyspace: Option<String>,
    pub keyspaces_done: Vec<String>,
    /// Repairs: (subranges repaired, subranges in all).
    pub ranges: Option<(u64, u64)>,
}

impl Progress {
    /// The record of this progress in `state`.
    pub fn record(&self, state: State, error: Option<String>) -> Record {
        Record {
            request: self.request.id.clone(),
            operation: self.request.operation,
            state,
            keyspace: match state {
                State::Running | State::Failed => self.keyspace.clone(),
                State::Done | State::Stopped => None,
            },
            keyspaces_done: self.keyspaces_done.clone(),
            ranges_done: self.ranges.map(|(done, _)| done),
            ranges_total: self.ranges.map(|(_, total)| total),
            error,
            started_at: self.started_at.clone(),
            at: now(),
        }
    }
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every keyspace (subrange) done.
    Done,
    /// Cassandra's words.
    Failed(String),
    /// The request was withdrawn.
    Stopped,
}

/// The calls the maintenance makes to the node (Cassandra's
/// StorageService; a script in the tests).
pub(crate) trait Maintained: Statuses {
    async fn normal(&self) -> bool;
    /// The keyspaces cleanup and repair cover (`NonLocalStrategyKeyspaces`).
    async fn replicated_keyspaces(&self) -> Result<Vec<String>, jolokia::Error>;
    /// Every keyspace (`Keyspaces`).
    async fn all_keyspaces(&self) -> Result<Vec<String>, jolokia::Error>;
    async fn release(&self) -> Result<CassandraVersion, jolokia::Error>;
    /// Blocks until done; the status code.
    async fn cleanup_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error>;
    /// Blocks until done; the status code.
    async fn upgrade_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error>;
    /// The node's tokens and the ring's, Murmur3.
    async fn murmur3_ring(&self) -> Result<(Vec<i64>, Vec<i64>), String>;
    /// Starts the repair of a subrange; its command (0: nothing to repair).
    async fn repair(&self, keyspace: &str, range: Subrange) -> Result<i64, jolokia::Error>;
    async fn stop_repairs(&self) -> Result<(), jolokia::Error>;
}

/// The options of a subrange's `repairAsync`: as `nodetool repair -full
/// -iuk -st start -et end` sends them (`RepairOption.parse`'s keys), a
/// full repair of that range among all its replicas, in parallel.
/// `ignoreUnreplicatedKeyspaces` (4.0+): a range no other node replicates
/// (a cluster of one, a keyspace replicated elsewhere) has nothing to
/// repair; without it, 4.1 fails the command ("Nothing to repair for
/// (a,b] in system_distributed - aborting", seen on a one-node 4.1.8),
/// and the request would be retried forever.
pub fn subrange_options(range: Subrange) -> BTreeMap<String, String> {
    let mut options = repair::repair_options();
    options.insert("ranges".to_string(), range.to_string());
    options.insert(
        "ignoreUnreplicatedKeyspaces".to_string(),
        "true".to_string(),
    );
    options
}

impl Maintained for StorageService {
    async fn normal(&self) -> bool {
        matches!(self.operation_mode().await, Ok(OperationMode::Normal))
    }

    async fn replicated_keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
        self.non_local_strategy_keyspaces().await
    }

    async fn all_keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
        self.keyspaces().await
    }

    async fn release(&self) -> Result<CassandraVersion, jolokia::Error> {
        self.release_version().await.cloned()
    }

    async fn cleanup_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
        // Cleanup rewrites sstables only: what the memtables hold of the
        // ranges given away would be flushed after it and stay. Seen on
        // real 4.1.8 (CI): keys written just before a scale-up, cleaned
        // in 0.3 s, all still on the disk afterwards. nodetool's advice
        // too: flush, then cleanup.
        self.flush(keyspace).await?;
        self.cleanup_with_jobs(keyspace, JOBS).await
    }

    async fn upgrade_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
        self.upgrade_sstables(keyspace, JOBS).await
    }

    async fn murmur3_ring(&self) -> Result<(Vec<i64>, Vec<i64>), String> {
        let partitioner = self.partitioner_name().await.map_err(|e| message(&e))?;
        let own = self.tokens().await.map_err(|e| message(&e))?;
        let all = self.ring_tokens().await.map_err(|e| message(&e))?;
        Ok((
            ring::murmur3_tokens(&partitioner, &own)?,
            ring::murmur3_tokens(&partitioner, &all)?,
        ))
    }

    async fn repair(&self, keyspace: &str, range: Subrange) -> Result<i64, jolokia::Error> {
        self.repair_async(keyspace, &subrange_options(range)).await
    }

    async fn stop_repairs(&self) -> Result<(), jolokia::Error> {
        self.terminate_repairs().await
    }
}

/// What a call's failure says: Cassandra's own words when it threw.
fn message(error: &jolokia::Error) -> String {
    error
        .thrown_message()
        .map(str::to_string)
        .unwrap_or_else(|| error.to_string())
}

/// `CompactionManager.AllSSTableOpStatus` by its code.
fn status_name(code: i64) -> &'static str {
    match code {
        0 => "SUCCESSFUL",
        1 => "ABORTED",
        2 => "UNABLE_TO_CANCEL",
        _ => "unknown",
    }
}

/// Where a pass tells how it goes: the member Service's record and the
/// marker in the sidecar; collected in the tests.
pub(crate) trait Report {
    async fn record(&mut self, record: Record);
    /// A repair's progress, after each subrange.
    fn cycle(&mut self, cycle: &Cycle);
}

/// Cleanup or upgradesstables of `keyspaces`, one after the other, but
/// for those `progress` has done; stops between two keyspaces when the
/// request no longer stands (a keyspace's call cannot be stopped: it
/// returns when the node is done). A status other than 0 fails the pass.
pub(crate) async fn keyspace_pass(
    node: &impl Maintained,
    progress: &mut Progress,
    keyspaces: &[String],
    report: &mut impl Report,
    service: &watch::Receiver<Service>,
) -> Outcome {
    let operation = progress.request.operation;
    for keyspace in keyspaces {
        if progress.keyspaces_done.contains(keyspace) {
            continue;
        }
        if !stands(&service.borrow(), &progress.request.id) {
            return Outcome::Stopped;
        }
        progress.keyspace = Some(keyspace.clone());
        report.record(progress.record(State::Running, None)).await;
        let status = match operation {
            Operation::Cleanup => node.cleanup_keyspace(keyspace).await,
            Operation::Upgradesstables => node.upgrade_keyspace(keyspace).await,
            Operation::Repair => unreachable!("repairs go by subrange"),
        };
        match status {
            Ok(0) => progress.keyspaces_done.push(keyspace.clone()),
            Ok(code) => {
                return Outcome::Failed(format!(
                    "{} of {keyspace}: status {code} ({})",
                    operation.as_str(),
                    status_name(code)
                ));
            }
            Err(e) => {
                return Outcome::Failed(format!(
                    "{} of {keyspace}: {}",
                    operation.as_str(),
                    message(&e)
                ));
            }
        }
    }
    progress.keyspace = None;
    Outcome::Done
}

/// The keyspaces an upgradesstables covers: those with old-format files
/// (`old`, from the data directory), among the node's; every keyspace of
/// the node when the files could not be counted (a release the gauge does
/// not know). Pure.
pub fn upgrade_keyspaces(all: &[String], old: Option<&BTreeSet<String>>) -> Vec<String> {
    all.iter()
        .filter(|k| old.is_none_or(|old| old.contains(*k)))
        .cloned()
        .collect()
}

/// One pass of a repair over what is left of `plan` in `cycle`: each
/// subrange started, followed to its end, and recorded (marker, then
/// record); a failed one is left for the next pass, and the pass fails
/// once it went through the rest. The request withdrawn: the node's
/// repairs are terminated and the pass is stopped (the subrange under
/// way is not counted).
pub(crate) async fn repair_pass(
    node: &impl Maintained,
    progress: &mut Progress,
    cycle: &mut Cycle,
    plan: &[(String, Subrange)],
    pace: Pace,
    report: &mut impl Report,
    service: &mut watch::Receiver<Service>,
) -> Outcome {
    let id = progress.request.id.clone();
    let total = plan.len() as u64;
    let mut failures = Vec::new();
    let left: Vec<(String, Subrange)> = cycle.left(plan).into_iter().cloned().collect();
    for (keyspace, range) in left {
        if progress.keyspace.as_deref() != Some(keyspace.as_str()) {
            progress.keyspace = Some(keyspace.clone());
            report.record(progress.record(State::Running, None)).await;
        }
        let started = tokio::select! {
            biased;
            () = withdrawn(service, &id) => None,
            started = node.repair(&keyspace, range) => Some(started),
        };
        let Some(started) = started else {
            return stop(node).await;
        };
        let cmd = match started {
            Ok(cmd) => cmd,
            Err(e) => {
                failures.push(format!("{keyspace} {range}: {}", message(&e)));
                continue;
            }
        };
        let outcome = if cmd == 0 {
            // Fewer than 2 replicas, or no range here: nothing to repair,
            // and no status will ever be.
            Next::Completed
        } else {
            tokio::select! {
                biased;
                () = withdrawn(service, &id) => return stop(node).await,
                outcome = repair::follow(node, cmd, pace) => outcome,
            }
        };
        match outcome {
            Next::Completed => {
                cycle.complete(&keyspace, range, plan, &now());
                report.cycle(cycle);
                progress.ranges = Some((cycle.done_of(plan), total));
                progress.keyspaces_done = cycle.keyspaces_done(plan);
                report.record(progress.record(State::Running, None)).await;
            }
            Next::Failed(m) => failures.push(format!("{keyspace} {range} (#{cmd}): {m}")),
            Next::Wait => unreachable!("follow returns an outcome"),
        }
    }
    progress.keyspace = None;
    progress.ranges = Some((cycle.done_of(plan), total));
    progress.keyspaces_done = cycle.keyspaces_done(plan);
    if failures.is_empty() {
        Outcome::Done
    } else {
        let shown: Vec<&str> = failures.iter().take(3).map(String::as_str).collect();
        Outcome::Failed(format!(
            "{} of {} subrange repairs failed: {}",
            failures.len(),
            total,
            shown.join("; ")
        ))
    }
}

async fn stop(node: &impl Maintained) -> Outcome {
    if let Err(e) = node.stop_repairs().await {
        warn!(error = %e, "terminating the repair of a withdrawn request");
    }
    Outcome::Stopped
}

/// What a completed cycle records (`cassandra.rook.io/repaired`): every
/// keyspace of the plan, when it was finished (now for one the marker
/// does not say). Pure.
pub fn repaired(cycle: &Cycle, plan: &[(String, Subrange)], now: &str) -> Repaired {
    let keyspaces = plan
        .iter()
        .map(|(k, _)| {
            let at = cycle
                .finished
                .get(k)
                .cloned()
                .unwrap_or_else(|| now.to_string());
            (k.clone(), at)
        })
        .collect();
    Repaired {
        cycle: cycle.cycle.clone(),
        keyspaces,
        finished_at: now.to_string(),
    }
}

/// The old-format count to write on the member Service (the gauge's
/// count, when the recorded one differs or is unreadable); `None`: leave
/// it. Pure.
pub fn old_format_to_write(count: Option<u64>, recorded: Option<&str>) -> Option<String> {
    let count = count?;
    (old_format_sstables(recorded) != Some(count)).then(|| count.to_string())
}

/// The old-format sstables of the member: the gauge, and what it counts.
#[derive(Debug, Clone)]
pub struct OldFormat {
    pub gauge: sstables::Gauge,
    /// The data directory's `data` (`<keyspace>/<table>-<id>/`).
    pub data: PathBuf,
    pub latest: sstables::Latest,
}

impl OldFormat {
    /// Counts now (off the async threads: a listing may block on a slow
    /// disk), sets the gauge, and answers the keyspaces holding old
    /// files and the member's count.
    pub async fn recount(&self) -> Option<(BTreeSet<String>, u64)> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let counts = sstables::old_format_counts(&sstables::list(&this.data), &this.latest);
            this.gauge.set(&counts);
            let keyspaces = counts.keys().map(|(k, _)| k.clone()).collect();
            (keyspaces, counts.values().sum())
        })
        .await
        .ok()
    }
}

/// Records the member's old-format count on its member Service
/// ([`OLD_FORMAT_SSTABLES`]) every `every` while the node is NORMAL, when
/// it differs from the recorded one. The count is the gauge's (scanned
/// every `SSTABLE_SCAN_SECONDS`, and after an upgradesstables).
pub async fn record_old_format(
    node: Node,
    old: OldFormat,
    services: Api<Service>,
    service: watch::Receiver<Service>,
    name: String,
    every: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !matches!(node.operation_mode().await, Ok(OperationMode::Normal)) {
            continue;
        }
        let recorded = annotation(&service.borrow(), OLD_FORMAT_SSTABLES).map(str::to_string);
        let Some(value) = old_format_to_write(old.gauge.total(), recorded.as_deref()) else {
            continue;
        };
        let patch = serde_json::json!({"metadata": {"annotations": {OLD_FORMAT_SSTABLES: value}}});
        match services
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                info!(member = %name, old_format_sstables = %value, "old-format sstables recorded")
            }
            Err(e) => warn!(member = %name, error = %e, "recording the old-format sstables"),
        }
    }
}

/// The client the maintenance calls the node with: its own (its own
/// connections to the agent, not the probes'), whose blocking calls wait
/// for [`LONG_CALL`].
pub fn client(
    mode: ClusterMode,
    jolokia_url: &str,
    scylla_url: &str,
) -> Result<Node, crate::node::NodeError> {
    Ok(match mode {
        ClusterMode::Cassandra => {
            Node::cassandra(Jolokia::new(jolokia_url)?.with_long_timeout(LONG_CALL))
        }
        ClusterMode::Scylla => Node::for_mode(mode, jolokia_url, scylla_url)?,
    })
}

/// What [`run`] works with.
pub struct Links {
    /// The maintenance's client ([`client`]).
    pub node: Node,
    pub mode: ClusterMode,
    pub data_dir: PathBuf,
    pub services: Api<Service>,
    pub name: String,
    /// None when the release's sstable versions are unknown.
    pub old_format: Option<OldFormat>,
    pub settings: Settings,
}

/// The sidecar's records on the member Service.
struct Writer {
    services: Api<Service>,
    name: String,
    /// The last record written: newer than the watch's copy for a moment
    /// after each write (only the sidecar writes it).
    own: Option<Record>,
}

impl Writer {
    async fn patch(&self, annotations: &BTreeMap<&str, String>) -> bool {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        match self
            .services
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                warn!(member = %self.name, error = %e, "recording the maintenance");
                false
            }
        }
    }

    /// Writes the record (and `extra` annotations, in the same patch),
    /// tried again while the API server does not answer: the controller
    /// learns an outcome here only.
    async fn finish(&mut self, record: Record, extra: BTreeMap<&str, String>, poll: Duration) {
        self.own = Some(record.clone());
        let mut annotations = extra;
        annotations.insert(RECORD, record.to_annotation());
        for _ in 0..360 {
            if self.patch(&annotations).await {
                return;
            }
            tokio::time::sleep(poll * 5).await;
        }
    }
}

/// The sidecar's [`Report`]: the record on the member Service, the marker.
struct Reporter<'a> {
    writer: &'a mut Writer,
    marker: PathBuf,
}

impl Report for Reporter<'_> {
    async fn record(&mut self, record: Record) {
        self.writer.own = Some(record.clone());
        let annotations = BTreeMap::from([(RECORD, record.to_annotation())]);
        self.writer.patch(&annotations).await;
    }

    fn cycle(&mut self, cycle: &Cycle) {
        if let Err(e) = markers::write_marker(&self.marker, &cycle.to_text()) {
            warn!(error = %e, "recording the repair's progress");
        }
    }
}

/// Whether the repair after a replace can run on this node's release
/// (one that reports a repair's status); when the agent does not answer,
/// it is taken to (the node is not NORMAL then either).
async fn replace_repair_runs(node: &impl Maintained) -> bool {
    node.release()
        .await
        .map_or(true, |v| v.has_parent_repair_status())
}

/// Waits until the node is NORMAL and owes no repair after a replace
/// that can run on it; false when the request `id` is withdrawn
/// meanwhile. A release that cannot report a repair's status (3.11) never
/// runs that repair (`member::repair` records it `unsupported` and leaves
/// its marker for the administrator's `nodetool repair -full`): waiting
/// for it held every maintenance request, and with it every roll and
/// topology change, forever.
async fn ready(
    node: &impl Maintained,
    data_dir: &Path,
    service: &mut watch::Receiver<Service>,
    id: &str,
    poll: Duration,
) -> bool {
    let replace_repair = markers::repair_marker(data_dir);
    let mut said = false;
    loop {
        if !stands(&service.borrow(), id) {
            return false;
        }
        let owed = replace_repair.exists() && replace_repair_runs(node).await;
        if !owed && node.normal().await {
            return true;
        }
        if !said {
            info!(request = %id, repair_after_replace = owed, "maintenance: waiting for the node to be NORMAL, and for the repair after its replace");
            said = true;
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = withdrawn(service, id) => return false,
        }
    }
}

/// The maintenance, for as long as the sidecar runs: follows the member
/// Service (`service`, the watch the sidecar keeps) and runs each request
/// its record does not say `done`, one at a time.
pub async fn run(links: Links, mut service: watch::Receiver<Service>) {
    let Links {
        node,
        mode,
        data_dir,
        services,
        name,
        old_format,
        settings,
    } = links;
    let mut writer = Writer {
        services,
        name: name.clone(),
        own: None,
    };
    let mut failures: Option<(String, u32)> = None;
    loop {
        let (request, seen) = {
            let current = service.borrow_and_update();
            (request_of(&current), record_of(&current))
        };
        let recorded_by_this_run = writer.own.is_some();
        let record = writer.own.clone().or(seen);
        let action = match (&node, decide(request.as_ref(), record.as_ref(), mode)) {
            (Node::Scylla(_), Action::Run { request, .. }) => Action::Refuse(request),
            (_, action) => action,
        };
        let (request, keyspaces_done, started_at) = match action {
            Action::Idle => {
                if service.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Action::Abandoned(record) => {
                info!(member = %name, request = %record.request, operation = record.operation.as_str(), "maintenance: the request was withdrawn while the sidecar was down: stopped");
                let record = Record {
                    state: State::Stopped,
                    keyspace: None,
                    at: now(),
                    ..record
                };
                writer.finish(record, BTreeMap::new(), settings.poll).await;
                continue;
            }
            Action::Refuse(request) => {
                warn!(member = %name, request = %request.id, operation = request.operation.as_str(), "{SCYLLA_REFUSAL}");
                let progress = Progress {
                    started_at: now(),
                    request,
                    keyspace: None,
                    keyspaces_done: Vec::new(),
                    ranges: None,
                };
                let record = progress.record(State::Failed, Some(SCYLLA_REFUSAL.to_string()));
                writer.finish(record, BTreeMap::new(), settings.poll).await;
                continue;
            }
            Action::Run {
                request,
                keyspaces_done,
                started_at,
            } => {
                let done =
                    resumed_keyspaces(request.operation, keyspaces_done, recorded_by_this_run);
                (request, done, started_at)
            }
        };
        let Node::Cassandra(storage) = &node else {
            continue;
        };
        let id = request.id.clone();
        if !ready(
            storage.as_ref(),
            &data_dir,
            &mut service,
            &id,
            settings.poll,
        )
        .await
        {
            continue;
        }
        let mut progress = Progress {
            request,
            started_at: started_at.unwrap_or_else(now),
            keyspace: None,
            keyspaces_done,
            ranges: None,
        };
        let operation = progress.request.operation;
        info!(member = %name, request = %id, operation = operation.as_str(), done = ?progress.keyspaces_done, "maintenance: running");
        let mut reporter = Reporter {
            writer: &mut writer,
            marker: markers::repair_cycle_marker(&data_dir),
        };
        let (outcome, extra) = match operation {
            Operation::Cleanup => {
                let outcome = match storage.replicated_keyspaces().await {
                    Ok(keyspaces) => {
                        let keyspaces: Vec<String> = keyspaces
                            .into_iter()
                            .filter(|k| !is_local_system_keyspace(k))
                            .collect();
                        keyspace_pass(
                            storage.as_ref(),
                            &mut progress,
                            &keyspaces,
                            &mut reporter,
                            &service,
                        )
                        .await
                    }
                    Err(e) => Outcome::Failed(format!("listing the keyspaces: {}", message(&e))),
                };
                (outcome, BTreeMap::new())
            }
            Operation::Upgradesstables => {
                upgrade(
                    storage.as_ref(),
                    &mut progress,
                    old_format.as_ref(),
                    &mut reporter,
                    &service,
                )
                .await
            }
            Operation::Repair => {
                scheduled_repair(
                    storage.as_ref(),
                    &mut progress,
                    &data_dir,
                    settings,
                    &mut reporter,
                    &mut service,
                )
                .await
            }
        };
        match outcome {
            Outcome::Done => {
                failures = None;
                info!(member = %name, request = %id, operation = operation.as_str(), "maintenance: done");
                writer
                    .finish(progress.record(State::Done, None), extra, settings.poll)
                    .await;
            }
            Outcome::Stopped => {
                info!(member = %name, request = %id, operation = operation.as_str(), "maintenance: the request was withdrawn: stopped");
                writer
                    .finish(
                        progress.record(State::Stopped, None),
                        BTreeMap::new(),
                        settings.poll,
                    )
                    .await;
            }
            Outcome::Failed(error) => {
                let attempt = match &failures {
                    Some((failed, n)) if *failed == id => n + 1,
                    _ => 0,
                };
                failures = Some((id.clone(), attempt));
                let delay = repair::backoff_from(settings.retry, attempt);
                warn!(member = %name, request = %id, operation = operation.as_str(), attempt = attempt + 1, retry_in = ?delay, %error, "maintenance failed: retrying while the request stands");
                writer
                    .finish(
                        progress.record(State::Failed, Some(error)),
                        BTreeMap::new(),
                        settings.poll,
                    )
                    .await;
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = withdrawn(&mut service, &id) => {}
                }
            }
        }
    }
}

/// upgradesstables of the keyspaces with old-format files, then the count
/// again: recorded with `done`.
async fn upgrade(
    node: &impl Maintained,
    progress: &mut Progress,
    old_format: Option<&OldFormat>,
    report: &mut impl Report,
    service: &watch::Receiver<Service>,
) -> (Outcome, BTreeMap<&'static str, String>) {
    let all = match node.all_keyspaces().await {
        Ok(all) => all,
        Err(e) => {
            return (
                Outcome::Failed(format!("listing the keyspaces: {}", message(&e))),
                BTreeMap::new(),
            );
        }
    };
    let old = match old_format {
        Some(old) => old.recount().await.map(|(keyspaces, _)| keyspaces),
        None => None,
    };
    let keyspaces = upgrade_keyspaces(&all, old.as_ref());
    let outcome = keyspace_pass(node, progress, &keyspaces, report, service).await;
    let mut extra = BTreeMap::new();
    if outcome == Outcome::Done
        && let Some(old) = old_format
        && let Some((_, count)) = old.recount().await
    {
        extra.insert(OLD_FORMAT_SSTABLES, count.to_string());
    }
    (outcome, extra)
}

/// A scheduled repair's request: the plan of its cycle, resumed from the
/// marker, repaired in one pass; completed, the [`Repaired`] record.
async fn scheduled_repair(
    node: &impl Maintained,
    progress: &mut Progress,
    data_dir: &Path,
    settings: Settings,
    report: &mut impl Report,
    service: &mut watch::Receiver<Service>,
) -> (Outcome, BTreeMap<&'static str, String>) {
    let none = BTreeMap::new();
    match node.release().await {
        Ok(version) if !version.has_parent_repair_status() => {
            return (
                Outcome::Failed(format!(
                    "Cassandra {version} cannot report a repair's status over Jolokia (getParentRepairStatus is 4.0+): run `nodetool repair -pr` on each member"
                )),
                none,
            );
        }
        Ok(_) => {}
        Err(e) => {
            return (
                Outcome::Failed(format!("reading the release: {}", message(&e))),
                none,
            );
        }
    }
    let keyspaces: Vec<String> = match node.replicated_keyspaces().await {
        Ok(keyspaces) => keyspaces
            .into_iter()
            .filter(|k| !is_local_system_keyspace(k))
            .collect(),
        Err(e) => {
            return (
                Outcome::Failed(format!("listing the keyspaces: {}", message(&e))),
                none,
            );
        }
    };
    let (own, all) = match node.murmur3_ring().await {
        Ok(ring) => ring,
        Err(e) => {
            return (
                Outcome::Failed(format!("reading the ring's tokens: {e}")),
                none,
            );
        }
    };
    let plan = cycle::plan(&keyspaces, &ring::subranges(&own, &all, settings.subranges));
    let cycle_name = progress.request.cycle.clone().unwrap_or_default();
    let marker = markers::repair_cycle_marker(data_dir);
    let text = std::fs::read_to_string(&marker).ok();
    let mut cycle = Cycle::resume(text.as_deref(), &cycle_name);
    if text.is_none_or(|t| Cycle::parse(&t).cycle != cycle_name) {
        // A new cycle: the previous one's progress goes now.
        report.cycle(&cycle);
    }
    progress.ranges = Some((cycle.done_of(&plan), plan.len() as u64));
    progress.keyspaces_done = cycle.keyspaces_done(&plan);
    debug!(
        subranges = plan.len(),
        done = cycle.done_of(&plan),
        "maintenance: the repair's plan"
    );
    let pace = Pace {
        poll: settings.poll,
        backoff_scale: 1,
    };
    let outcome = repair_pass(node, progress, &mut cycle, &plan, pace, report, service).await;
    let mut extra = BTreeMap::new();
    if outcome == Outcome::Done {
        extra.insert(REPAIRED, repaired(&cycle, &plan, &now()).to_annotation());
    }
    (outcome, extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    const T: &str = "2026-11-27T10:00:00Z";
    const CYCLE: &str = "2026-11-27T00:00:00Z";

    fn request(id: &str, operation: Operation) -> Request {
        Request {
            id: id.into(),
            operation,
            requested_at: T.into(),
            cycle: (operation == Operation::Repair).then(|| CYCLE.to_string()),
        }
    }

    fn record(id: &str, operation: Operation, state: State, done: &[&str]) -> Record {
        Record {
            request: id.into(),
            operation,
            state,
            keyspace: None,
            keyspaces_done: done.iter().map(|s| s.to_string()).collect(),
            ranges_done: None,
            ranges_total: None,
            error: None,
            started_at: T.into(),
            at: T.into(),
        }
    }

    fn service_with(request: Option<&Request>) -> Service {
        let mut service = Service::default();
        if let Some(request) = request {
            service.metadata.annotations =
                Some([(REQUEST.to_string(), request.to_annotation())].into());
        }
        service
    }

    /// A cleanup recorded by an earlier run of the sidecar (the node
    /// restarted since, and its commitlog replay undid what was cleaned)
    /// starts over; one this run recorded (a failure retried, a keyspace
    /// after another) and the other operations resume.
    #[test]
    fn a_cleanup_resumed_after_a_restart_cleans_every_keyspace_again() {
        let done = || vec!["system_auth".to_string(), "app".to_string()];
        assert_eq!(
            resumed_keyspaces(Operation::Cleanup, done(), false),
            Vec::<String>::new()
        );
        assert_eq!(resumed_keyspaces(Operation::Cleanup, done(), true), done());
        for operation in [Operation::Upgradesstables, Operation::Repair] {
            assert_eq!(
                resumed_keyspaces(operation, done(), false),
                done(),
                "{operation:?}"
            );
        }
    }

    /// Every (request, record) pair: nothing asked is nothing to do; a
    /// request its record says done is left alone; the same request
    /// running (a crash), failed or stopped resumes with what its record
    /// has done, from its start; another request's record, or none,
    /// starts afresh; scylla refuses once.
    #[test]
    fn what_to_do_for_each_request_and_record() {
        use ClusterMode::{Cassandra, Scylla};
        let cleanup = request("r2", Operation::Cleanup);
        assert_eq!(decide(None, None, Cassandra), Action::Idle);
        let running = record("r2", Operation::Cleanup, State::Running, &["ks"]);
        assert_eq!(
            decide(None, Some(&running), Cassandra),
            Action::Abandoned(running.clone()),
            "a running record without its request: withdrawn while the sidecar was down"
        );
        for state in [State::Done, State::Failed, State::Stopped] {
            assert_eq!(
                decide(
                    None,
                    Some(&record("r2", Operation::Repair, state, &[])),
                    Cassandra
                ),
                Action::Idle,
                "{state:?}: the last outcome stays"
            );
        }
        let fresh = Action::Run {
            request: cleanup.clone(),
            keyspaces_done: vec![],
            started_at: None,
        };
        assert_eq!(decide(Some(&cleanup), None, Cassandra), fresh);
        assert_eq!(
            decide(
                Some(&cleanup),
                Some(&record("r1", Operation::Cleanup, State::Done, &["ks"])),
                Cassandra
            ),
            fresh,
            "a new id runs again"
        );
        assert_eq!(
            decide(
                Some(&cleanup),
                Some(&record("r2", Operation::Repair, State::Done, &[])),
                Cassandra
            ),
            fresh,
            "a record of another operation is not this request's"
        );
        assert_eq!(
            decide(
                Some(&cleanup),
                Some(&record("r2", Operation::Cleanup, State::Done, &["ks"])),
                Cassandra
            ),
            Action::Idle
        );
        for state in [State::Running, State::Failed, State::Stopped] {
            assert_eq!(
                decide(
                    Some(&cleanup),
                    Some(&record(
                        "r2",
                        Operation::Cleanup,
                        state,
                        &["system_auth", "ks"]
                    )),
                    Cassandra
                ),
                Action::Run {
                    request: cleanup.clone(),
                    keyspaces_done: vec!["system_auth".into(), "ks".into()],
                    started_at: Some(T.into()),
                },
                "{state:?}"
            );
        }
        assert_eq!(
            decide(Some(&cleanup), None, Scylla),
            Action::Refuse(cleanup.clone())
        );
        assert_eq!(
            decide(
                Some(&cleanup),
                Some(&record("r2", Operation::Cleanup, State::Failed, &[])),
                Scylla
            ),
            Action::Idle,
            "refused once"
        );
    }

    /// The records a request's progress makes: the keyspace under way
    /// only while running (or where it failed), the ranges for repairs.
    #[test]
    fn records_of_a_progress() {
        let progress = Progress {
            request: request("r1", Operation::Repair),
            started_at: T.into(),
            keyspace: Some("ks".into()),
            keyspaces_done: vec!["system_auth".into()],
            ranges: Some((3, 10)),
        };
        let running = progress.record(State::Running, None);
        assert_eq!(running.keyspace.as_deref(), Some("ks"));
        assert_eq!(
            (running.ranges_done, running.ranges_total),
            (Some(3), Some(10))
        );
        assert_eq!(
            Record::from_annotation(&running.to_annotation()),
            Some(running.clone())
        );
        let done = progress.record(State::Done, None);
        assert_eq!(done.keyspace, None);
        assert_eq!(done.started_at, T);
        let failed = progress.record(State::Failed, Some("Endpoint not alive".into()));
        assert_eq!(failed.keyspace.as_deref(), Some("ks"));
        assert_eq!(failed.error.as_deref(), Some("Endpoint not alive"));
    }

    /// The count is written when it differs from the recorded one or
    /// that is unreadable, never before a scan counted.
    #[test]
    fn the_old_format_count_is_written_when_it_changes() {
        assert_eq!(old_format_to_write(None, None), None, "no scan yet");
        assert_eq!(old_format_to_write(Some(4), None).as_deref(), Some("4"));
        assert_eq!(old_format_to_write(Some(4), Some("4")), None);
        assert_eq!(
            old_format_to_write(Some(0), Some("4")).as_deref(),
            Some("0")
        );
        assert_eq!(
            old_format_to_write(Some(0), Some("junk")).as_deref(),
            Some("0")
        );
    }

    #[test]
    fn upgradesstables_covers_the_keyspaces_with_old_files() {
        let all: Vec<String> = ["system", "system_auth", "ks", "other"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let old: BTreeSet<String> = [
            "system".to_string(),
            "ks".to_string(),
            "dropped".to_string(),
        ]
        .into();
        assert_eq!(upgrade_keyspaces(&all, Some(&old)), vec!["system", "ks"]);
        assert_eq!(
            upgrade_keyspaces(&all, None),
            all,
            "uncounted: every keyspace"
        );
    }

    #[test]
    fn a_completed_cycle_names_every_keyspace() {
        let r = |start, end| Subrange { start, end };
        let plan = cycle::plan(&["a".to_string(), "b".to_string()], &[r(0, 5)]);
        let mut cycle = Cycle::new(CYCLE);
        cycle.complete("a", r(0, 5), &plan, "2026-11-27T01:00:00Z");
        cycle.complete("b", r(0, 5), &plan, "2026-11-27T02:00:00Z");
        let record = repaired(&cycle, &plan, "2026-11-27T03:00:00Z");
        assert_eq!(record.cycle, CYCLE);
        assert_eq!(record.keyspaces["a"], "2026-11-27T01:00:00Z");
        assert_eq!(record.keyspaces["b"], "2026-11-27T02:00:00Z");
        assert_eq!(record.finished_at, "2026-11-27T03:00:00Z");
        assert!(Repaired::from_annotation(&record.to_annotation()).is_some());
    }

    #[test]
    fn a_subrange_is_repaired_as_nodetool_repair_full_st_et_asks() {
        let options = subrange_options(Subrange {
            start: i64::MIN,
            end: -6000,
        });
        assert_eq!(options["ranges"], "-9223372036854775808:-6000");
        assert_eq!(options["incremental"], "false");
        assert_eq!(options["primaryRange"], "false");
        assert_eq!(options["parallelism"], "parallel");
        assert_eq!(options["ignoreUnreplicatedKeyspaces"], "true");
    }

    /// The answers of `getParentRepairStatus` to one command, in turn (the
    /// last repeats).
    type Answers = Vec<Option<Vec<String>>>;

    /// Per (keyspace, subrange): the commands `repairAsync` gives, in
    /// turn, each with its answers.
    type Plans = BTreeMap<(String, Subrange), VecDeque<(i64, Answers)>>;

    /// A node that answers from a script.
    #[derive(Default)]
    struct Script {
        keyspaces: Vec<String>,
        /// Cleanup/upgrade status per keyspace, in turn.
        statuses_of: Mutex<BTreeMap<String, VecDeque<i64>>>,
        /// Per (keyspace, range): the command and its answers, in turn.
        repairs: Mutex<Plans>,
        followed: Mutex<BTreeMap<i64, Answers>>,
        calls: Mutex<Vec<String>>,
        /// The node's tokens and the ring's.
        ring: (Vec<i64>, Vec<i64>),
        /// The release it reports (4.1.8 when `None`).
        release: Option<&'static str>,
    }

    impl Statuses for Script {
        async fn status(&self, cmd: i64) -> Result<Option<Vec<String>>, jolokia::Error> {
            let mut followed = self.followed.lock().unwrap();
            let list = followed.get_mut(&cmd).expect("started");
            Ok(if list.len() > 1 {
                list.remove(0)
            } else {
                list[0].clone()
            })
        }
    }

    impl Maintained for Script {
        async fn normal(&self) -> bool {
            true
        }
        async fn replicated_keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
            Ok(self.keyspaces.clone())
        }
        async fn all_keyspaces(&self) -> Result<Vec<String>, jolokia::Error> {
            Ok(self.keyspaces.clone())
        }
        async fn release(&self) -> Result<CassandraVersion, jolokia::Error> {
            Ok(CassandraVersion::parse(self.release.unwrap_or("4.1.8")).unwrap())
        }
        async fn cleanup_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("cleanup {keyspace}"));
            Ok(self
                .statuses_of
                .lock()
                .unwrap()
                .get_mut(keyspace)
                .and_then(VecDeque::pop_front)
                .unwrap_or(0))
        }
        async fn upgrade_keyspace(&self, keyspace: &str) -> Result<i64, jolokia::Error> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("upgrade {keyspace}"));
            Ok(0)
        }
        async fn murmur3_ring(&self) -> Result<(Vec<i64>, Vec<i64>), String> {
            Ok(self.ring.clone())
        }
        async fn repair(&self, keyspace: &str, range: Subrange) -> Result<i64, jolokia::Error> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("repair {keyspace} {range}"));
            let (cmd, answers) = self
                .repairs
                .lock()
                .unwrap()
                .get_mut(&(keyspace.to_string(), range))
                .and_then(VecDeque::pop_front)
                .expect("a planned repair");
            self.followed.lock().unwrap().insert(cmd, answers);
            Ok(cmd)
        }
        async fn stop_repairs(&self) -> Result<(), jolokia::Error> {
            self.calls.lock().unwrap().push("terminate".to_string());
            Ok(())
        }
    }

    /// The records and markers a pass would write, in turn.
    #[derive(Default)]
    struct Written {
        records: Vec<Record>,
        markers: Vec<String>,
    }

    impl Report for Written {
        async fn record(&mut self, record: Record) {
            self.records.push(record);
        }
        fn cycle(&mut self, cycle: &Cycle) {
            self.markers.push(cycle.to_text());
        }
    }

    fn s(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|i| i.to_string()).collect())
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    /// A request waits for the repair owed after a replace where that
    /// repair runs (4.1), and not where it never will (3.11, which cannot
    /// report a repair's status: the demo's roll waited behind a cleanup
    /// held so, forever).
    #[tokio::test]
    async fn a_request_waits_for_the_replace_repair_only_where_it_can_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = markers::repair_marker(dir.path());
        std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
        std::fs::write(&marker, "owed").unwrap();
        let cleanup = request("r1", Operation::Cleanup);
        let (_tx, rx) = watch::channel(service_with(Some(&cleanup)));
        let old = Script {
            release: Some("3.11.6"),
            ..Script::default()
        };
        let mut service = rx.clone();
        let poll = Duration::from_millis(10);
        let at_once = tokio::time::timeout(
            Duration::from_secs(2),
            ready(&old, dir.path(), &mut service, "r1", poll),
        )
        .await;
        assert_eq!(at_once, Ok(true), "3.11 never runs it: no wait");
        let new = Script::default();
        let mut service = rx.clone();
        let waited = tokio::time::timeout(
            Duration::from_millis(200),
            ready(&new, dir.path(), &mut service, "r1", poll),
        )
        .await;
        assert!(waited.is_err(), "4.1 runs the repair: the request waits");
        std::fs::remove_file(&marker).unwrap();
        let mut service = rx.clone();
        assert!(ready(&new, dir.path(), &mut service, "r1", poll).await);
    }

    /// A cleanup goes keyspace by keyspace, recording each as it starts
    /// and listing it done once its call returned 0; a status other than
    /// 0 fails the pass at that keyspace; the next pass (as after a crash,
    /// from the record's keyspacesDone) cleans only what is left, the
    /// failed keyspace from its start; a withdrawn request stops between
    /// two keyspaces.
    #[tokio::test]
    async fn a_cleanup_resumes_with_the_keyspaces_left_and_stops_between_two() {
        let script = Script {
            keyspaces: strings(&["system_auth", "ks", "other"]),
            statuses_of: Mutex::new([("ks".to_string(), VecDeque::from([2, 0]))].into()),
            ..Script::default()
        };
        let cleanup = request("r1", Operation::Cleanup);
        let (tx, rx) = watch::channel(service_with(Some(&cleanup)));
        let mut progress = Progress {
            request: cleanup.clone(),
            started_at: T.into(),
            keyspace: None,
            keyspaces_done: vec![],
            ranges: None,
        };
        let mut written = Written::default();
        let keyspaces = script.keyspaces.clone();
        let outcome = keyspace_pass(&script, &mut progress, &keyspaces, &mut written, &rx).await;
        assert_eq!(
            outcome,
            Outcome::Failed("cleanup of ks: status 2 (UNABLE_TO_CANCEL)".into())
        );
        assert_eq!(progress.keyspaces_done, vec!["system_auth"]);
        assert_eq!(progress.keyspace.as_deref(), Some("ks"));
        let running: Vec<_> = written
            .records
            .iter()
            .map(|r| (r.state, r.keyspace.clone().unwrap(), r.keyspaces_done.len()))
            .collect();
        assert_eq!(
            running,
            vec![
                (State::Running, "system_auth".to_string(), 0),
                (State::Running, "ks".to_string(), 1)
            ]
        );
        // A restarted sidecar resumes from the record it wrote.
        let failed = progress.record(State::Failed, None);
        let Action::Run { keyspaces_done, .. } =
            decide(Some(&cleanup), Some(&failed), ClusterMode::Cassandra)
        else {
            panic!("resumes");
        };
        let mut resumed = Progress {
            keyspaces_done,
            ..progress.clone()
        };
        let outcome = keyspace_pass(
            &script,
            &mut resumed,
            &keyspaces,
            &mut Written::default(),
            &rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(resumed.keyspaces_done, vec!["system_auth", "ks", "other"]);
        assert_eq!(
            *script.calls.lock().unwrap(),
            vec![
                "cleanup system_auth",
                "cleanup ks",
                "cleanup ks",
                "cleanup other"
            ]
        );
        // Withdrawn: nothing more is started.
        tx.send_replace(service_with(None));
        let mut again = Progress {
            keyspaces_done: vec![],
            ..progress
        };
        assert_eq!(
            keyspace_pass(
                &script,
                &mut again,
                &keyspaces,
                &mut Written::default(),
                &rx
            )
            .await,
            Outcome::Stopped
        );
        assert_eq!(script.calls.lock().unwrap().len(), 4);
    }

    /// A repair pass follows each subrange's repair to its end (null
    /// while queued, IN_PROGRESS, COMPLETED), takes command 0 as nothing
    /// to repair, rewrites the marker after each subrange, goes on past a
    /// FAILED one and fails at the end; the next pass repairs only what
    /// is left. A request withdrawn while a subrange runs terminates the
    /// node's repairs and stops, the subrange not counted; the marker then
    /// resumes the cycle with it.
    #[tokio::test]
    async fn a_repair_pass_follows_each_subrange_and_the_next_resumes() {
        let pace = Pace {
            poll: Duration::from_millis(5),
            backoff_scale: 1,
        };
        let (a, b) = (
            Subrange {
                start: i64::MIN,
                end: 0,
            },
            Subrange { start: 0, end: 100 },
        );
        let keyspaces = strings(&["system_auth", "ks"]);
        let plan = cycle::plan(&keyspaces, &[a, b]);
        let done = s(&["COMPLETED", "Repair completed successfully"]);
        let script = Script {
            keyspaces: keyspaces.clone(),
            repairs: Mutex::new(
                [
                    (
                        ("system_auth".to_string(), a),
                        VecDeque::from([(0, vec![])]),
                    ),
                    (
                        ("system_auth".to_string(), b),
                        VecDeque::from([(1, vec![None, s(&["IN_PROGRESS"]), done.clone()])]),
                    ),
                    (
                        ("ks".to_string(), a),
                        VecDeque::from([
                            (
                                2,
                                vec![
                                    s(&["IN_PROGRESS"]),
                                    s(&["FAILED", "Endpoint not alive: /10.0.0.2:7000"]),
                                ],
                            ),
                            // withdrawn while it runs
                            (4, vec![s(&["IN_PROGRESS"])]),
                            (5, vec![done.clone()]),
                        ]),
                    ),
                    (
                        ("ks".to_string(), b),
                        VecDeque::from([(3, vec![done.clone()])]),
                    ),
                ]
                .into(),
            ),
            ..Script::default()
        };
        let repair = request("r1", Operation::Repair);
        let (tx, mut rx) = watch::channel(service_with(Some(&repair)));
        let mut progress = Progress {
            request: repair.clone(),
            started_at: T.into(),
            keyspace: None,
            keyspaces_done: vec![],
            ranges: None,
        };
        let mut cycle = Cycle::new(CYCLE);
        let mut written = Written::default();
        let outcome = repair_pass(
            &script,
            &mut progress,
            &mut cycle,
            &plan,
            pace,
            &mut written,
            &mut rx,
        )
        .await;
        let Outcome::Failed(error) = outcome else {
            panic!("ks {a} failed: {outcome:?}");
        };
        assert!(
            error.starts_with(
                "1 of 4 subrange repairs failed: ks -9223372036854775808:0 (#2): Endpoint not alive"
            ),
            "{error}"
        );
        assert_eq!(progress.ranges, Some((3, 4)));
        assert_eq!(progress.keyspaces_done, vec!["system_auth"]);
        // The marker after each subrange repaired.
        assert_eq!(written.markers.len(), 3);
        assert_eq!(
            written.markers[2],
            format!(
                "cycle {CYCLE}\ndone ks 0:100\ndone system_auth -9223372036854775808:0\ndone system_auth 0:100\nfinished system_auth {}\n",
                cycle.finished["system_auth"]
            )
        );
        let last = written.records.last().unwrap();
        assert_eq!((last.ranges_done, last.ranges_total), (Some(3), Some(4)));

        // The next pass: withdrawn while the one subrange left runs.
        let withdraw = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_replace(service_with(None));
            tx
        });
        let outcome = repair_pass(
            &script,
            &mut progress,
            &mut cycle,
            &plan,
            pace,
            &mut Written::default(),
            &mut rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Stopped);
        assert_eq!(
            cycle.done_of(&plan),
            3,
            "the subrange stopped is not counted"
        );
        assert_eq!(script.calls.lock().unwrap().last().unwrap(), "terminate");

        // Asked again in the same cycle: the marker's progress resumes.
        let tx = withdraw.await.unwrap();
        tx.send_replace(service_with(Some(&repair)));
        let mut resumed = Cycle::resume(Some(&cycle.to_text()), CYCLE);
        let outcome = repair_pass(
            &script,
            &mut progress,
            &mut resumed,
            &plan,
            pace,
            &mut Written::default(),
            &mut rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(progress.ranges, Some((4, 4)));
        assert_eq!(progress.keyspaces_done, vec!["system_auth", "ks"]);
        let repairs: Vec<String> = script
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("repair ks -9223372036854775808:0"))
            .cloned()
            .collect();
        assert_eq!(repairs.len(), 3, "failed, stopped, repaired");
        assert_eq!(
            script.calls.lock().unwrap().len(),
            4 + 1 + 1 + 1,
            "four subranges, the one left twice more, one terminate"
        );
    }

    /// A report that keeps the marker where the sidecar does, on the data
    /// volume, and collects the records.
    struct OnDisk {
        marker: PathBuf,
        records: Vec<Record>,
    }

    impl Report for OnDisk {
        async fn record(&mut self, record: Record) {
            self.records.push(record);
        }
        fn cycle(&mut self, cycle: &Cycle) {
            markers::write_marker(&self.marker, &cycle.to_text()).unwrap();
        }
    }

    /// A scheduled repair plans its cycle from the ring, keeps its
    /// progress on the data volume, and: stopped (its request withdrawn)
    /// then asked again in the same cycle under a new request (as after a
    /// controller's or a member's restart), repairs only the subrange left
    /// and records the cycle repaired; asked for the next cycle, starts
    /// afresh.
    #[tokio::test]
    async fn a_scheduled_repair_resumes_its_cycle_from_the_marker_and_a_new_cycle_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            poll: Duration::from_millis(5),
            retry: Duration::from_millis(5),
            subranges: 2,
        };
        // The node has token 100, the ring 0 and 100: its primary range
        // (0, 100], in two pieces.
        let (low, high) = (
            Subrange { start: 0, end: 50 },
            Subrange {
                start: 50,
                end: 100,
            },
        );
        let done = s(&["COMPLETED", "Repair completed successfully"]);
        let script = Script {
            keyspaces: strings(&["ks"]),
            ring: (vec![100], vec![0, 100]),
            repairs: Mutex::new(
                [
                    (
                        ("ks".to_string(), low),
                        VecDeque::from([(1, vec![done.clone()]), (4, vec![done.clone()])]),
                    ),
                    (
                        ("ks".to_string(), high),
                        VecDeque::from([
                            (2, vec![s(&["IN_PROGRESS"])]),
                            (3, vec![done.clone()]),
                            (5, vec![done.clone()]),
                        ]),
                    ),
                ]
                .into(),
            ),
            ..Script::default()
        };
        let marker = markers::repair_cycle_marker(dir.path());
        let mut report = OnDisk {
            marker: marker.clone(),
            records: vec![],
        };
        let progress_of = |request: &Request| Progress {
            request: request.clone(),
            started_at: T.into(),
            keyspace: None,
            keyspaces_done: vec![],
            ranges: None,
        };

        // r1: withdrawn while the second subrange runs.
        let r1 = request("r1", Operation::Repair);
        let (tx, mut rx) = watch::channel(service_with(Some(&r1)));
        let withdraw = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_replace(service_with(None));
            tx
        });
        let mut progress = progress_of(&r1);
        let (outcome, extra) = scheduled_repair(
            &script,
            &mut progress,
            dir.path(),
            settings,
            &mut report,
            &mut rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Stopped);
        assert!(extra.is_empty());
        assert_eq!(progress.ranges, Some((1, 2)));
        let text = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(text, format!("cycle {CYCLE}\ndone ks 0:50\n"));

        // r2, the same cycle: only the subrange left.
        let tx = withdraw.await.unwrap();
        let r2 = request("r2", Operation::Repair);
        tx.send_replace(service_with(Some(&r2)));
        let mut progress = progress_of(&r2);
        let (outcome, extra) = scheduled_repair(
            &script,
            &mut progress,
            dir.path(),
            settings,
            &mut report,
            &mut rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(progress.ranges, Some((2, 2)));
        assert_eq!(progress.keyspaces_done, vec!["ks"]);
        let repaired = Repaired::from_annotation(&extra[REPAIRED]).expect("a repaired record");
        assert_eq!(repaired.cycle, CYCLE);
        assert_eq!(repaired.keyspaces.keys().collect::<Vec<_>>(), vec!["ks"]);
        assert_eq!(
            script
                .calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| c.starts_with("repair"))
                .count(),
            3,
            "low once, high twice"
        );

        // r3, the next cycle: afresh, the previous cycle's progress gone
        // before the first subrange.
        let next = "2026-11-28T00:00:00Z";
        let r3 = Request {
            cycle: Some(next.to_string()),
            ..request("r3", Operation::Repair)
        };
        tx.send_replace(service_with(Some(&r3)));
        let mut progress = progress_of(&r3);
        let (outcome, extra) = scheduled_repair(
            &script,
            &mut progress,
            dir.path(),
            settings,
            &mut report,
            &mut rx,
        )
        .await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            Repaired::from_annotation(&extra[REPAIRED]).unwrap().cycle,
            next
        );
        assert_eq!(
            script
                .calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| c.starts_with("repair"))
                .count(),
            5
        );
        assert!(
            std::fs::read_to_string(&marker)
                .unwrap()
                .starts_with(&format!("cycle {next}\n"))
        );
        assert!(
            report
                .records
                .iter()
                .all(|r| r.state == State::Running && r.ranges_total == Some(2)),
            "{:?}",
            report.records
        );
    }
}
