//! The records of the maintenance operations (issue 33): cleanup after a
//! scale-up, upgradesstables after a major upgrade, scheduled repairs. The
//! controller decides which member runs what, one member at a time, and
//! asks it on its member Service ([`REQUEST`]); the member's sidecar runs
//! the operation through Jolokia and records where it stands
//! ([`RECORD`]), and what it finished ([`REPAIRED`], [`OLD_FORMAT_SSTABLES`]).
//! Everything either side needs to resume after a crash is on these
//! records (and, for the sidecar, a marker on its data volume): the
//! controller keeps no state of its own. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse_time;

/// Annotation, written by the controller on the member Service of every
/// member in the ring before it scales a rack up (the value: when, RFC
/// 3339): the member will give ranges away, and keeps their data until a
/// cleanup. Removed by the controller, with the request, once the
/// member's cleanup is done. Written before the scale-up, because after it
/// nothing says who gave ranges away.
pub const CLEANUP_DUE: &str = "cassandra.rook.io/cleanup-due";

/// Annotation, written by the controller: the operation the member's
/// sidecar is asked to run, a [`Request`] as JSON. One member at a time
/// holds one, in the whole cluster. The controller removes it once the
/// sidecar's [`RECORD`] says the request is `done` (or, for a repair, to
/// stop it: the sidecar then stops and keeps its progress).
pub const REQUEST: &str = "cassandra.rook.io/maintenance-request";

/// Annotation, written by the sidecar: where the request it runs (or ran
/// last) stands, a [`Record`] as JSON. Rewritten when its state or
/// progress changes, kept after the request goes (the last operation's
/// outcome).
pub const RECORD: &str = "cassandra.rook.io/maintenance";

/// Annotation, written by the sidecar once its node completed the repair
/// of a cycle: a [`Repaired`] as JSON. The controller derives every
/// repair figure from these (the share of the cycle repaired, when each
/// keyspace was last fully repaired), so they survive any restart.
pub const REPAIRED: &str = "cassandra.rook.io/repaired";

/// Annotation, written by the sidecar while its node is NORMAL, when the
/// count changes: how many of the node's sstables are in a format older
/// than the release it runs (the `/metrics` gauge
/// `cassandra_operator_member_sstables_old_format`), a decimal integer.
/// After a major upgrade the controller asks the members whose count is
/// above 0 to run upgradesstables, one at a time.
pub const OLD_FORMAT_SSTABLES: &str = "cassandra.rook.io/old-format-sstables";

/// What the controller asks a member to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// `nodetool cleanup` of every non-system keyspace
    /// (`StorageService.forceKeyspaceCleanup`).
    Cleanup,
    /// `nodetool upgradesstables` of every keyspace
    /// (`StorageService.upgradeSSTables`, old-format files only).
    Upgradesstables,
    /// A repair of the node's primary ranges of every non-system keyspace,
    /// in subranges (`StorageService.repairAsync` with `ranges`), for the
    /// [`Request::cycle`].
    Repair,
}

impl Operation {
    /// The word records, Events and status use.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Cleanup => "cleanup",
            Operation::Upgradesstables => "upgradesstables",
            Operation::Repair => "repair",
        }
    }
}

/// The controller's request ([`REQUEST`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Names this request; the sidecar's [`Record`] quotes it. A new id is
    /// a new run (a cleanup asked again runs again).
    pub id: String,
    pub operation: Operation,
    /// When the request was made (RFC 3339).
    pub requested_at: String,
    /// Repairs only: the start of the schedule's cycle this repair belongs
    /// to (RFC 3339). The sidecar's progress marker is kept per cycle: a
    /// repair stopped and asked again in the same cycle resumes with the
    /// subranges left; a new cycle starts afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<String>,
}

/// Where a request stands, as the sidecar records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// The sidecar runs it.
    Running,
    /// It completed on every keyspace.
    Done,
    /// It failed (`error` says why); the sidecar tries again with a
    /// growing delay while the request stands.
    Failed,
    /// The request was withdrawn while it ran (repairs only); the progress
    /// is kept on the data volume for the next request of the same cycle.
    Stopped,
}

/// The sidecar's record of a request ([`RECORD`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The [`Request::id`] it answers.
    pub request: String,
    pub operation: Operation,
    pub state: State,
    /// The keyspace the operation works on now, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<String>,
    /// The keyspaces completed so far under this request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyspaces_done: Vec<String>,
    /// Repairs: the subranges repaired so far in this cycle, and how many
    /// there are in all (every keyspace's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges_done: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges_total: Option<u64>,
    /// What failed, in Cassandra's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the sidecar started the request (RFC 3339).
    pub started_at: String,
    /// When this was recorded (RFC 3339).
    pub at: String,
}

/// What a member last repaired ([`REPAIRED`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Repaired {
    /// The cycle ([`Request::cycle`]) whose repair the node completed.
    pub cycle: String,
    /// Per keyspace, when the node's repair of its primary ranges of it
    /// completed (RFC 3339). A keyspace was fully repaired by the time
    /// every member's record names it: the earliest of these times.
    pub keyspaces: BTreeMap<String, String>,
    /// When the node completed the cycle's repair (RFC 3339).
    pub finished_at: String,
}

macro_rules! json_record {
    ($type:ty, $valid:expr) => {
        impl $type {
            /// The annotation's value.
            pub fn to_annotation(&self) -> String {
                serde_json::to_string(self).expect("a record serializes")
            }

            /// From the annotation's value; `None` when it is not one
            /// (unreadable JSON, an empty id, an unreadable time).
            pub fn from_annotation(value: &str) -> Option<Self> {
                let record: Self = serde_json::from_str(value).ok()?;
                let valid: fn(&Self) -> bool = $valid;
                valid(&record).then_some(record)
            }
        }
    };
}

json_record!(Request, |r| !r.id.is_empty()
    && parse_time(&r.requested_at).is_some()
    && r.cycle.as_deref().is_none_or(|c| parse_time(c).is_some())
    && (r.operation == Operation::Repair) == r.cycle.is_some());
json_record!(Record, |r| !r.request.is_empty()
    && parse_time(&r.started_at).is_some()
    && parse_time(&r.at).is_some());
json_record!(Repaired, |r| parse_time(&r.cycle).is_some()
    && parse_time(&r.finished_at).is_some()
    && r.keyspaces.values().all(|t| parse_time(t).is_some()));

/// The old-format count a member recorded ([`OLD_FORMAT_SSTABLES`]);
/// `None` when absent or unreadable (unknown: not 0).
pub fn old_format_sstables(value: Option<&str>) -> Option<u64> {
    value?.trim().parse().ok()
}

/// Whether a keyspace is one the maintenance operations leave alone: the
/// node-local and system keyspaces Cassandra maintains itself (cleanup
/// refuses them; nodetool repair without a keyspace skips the local ones).
/// `system_auth`, `system_distributed` and `system_traces` are replicated
/// and repaired like the user's; they are cleaned up too.
pub fn is_local_system_keyspace(keyspace: &str) -> bool {
    matches!(
        keyspace,
        "system" | "system_schema" | "system_virtual_schema" | "system_views"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2026-11-27T10:00:00Z";

    /// A request reads back as written, a repair needs its cycle and
    /// nothing else carries one, and junk is no request.
    #[test]
    fn requests_read_back_and_junk_is_none() {
        let cleanup = Request {
            id: "r1".into(),
            operation: Operation::Cleanup,
            requested_at: T.into(),
            cycle: None,
        };
        assert_eq!(
            Request::from_annotation(&cleanup.to_annotation()),
            Some(cleanup.clone())
        );
        assert!(
            cleanup
                .to_annotation()
                .contains("\"operation\":\"cleanup\""),
            "{}",
            cleanup.to_annotation()
        );
        let repair_without_cycle = Request {
            operation: Operation::Repair,
            ..cleanup.clone()
        };
        assert_eq!(
            Request::from_annotation(&repair_without_cycle.to_annotation()),
            None
        );
        let repair = Request {
            cycle: Some(T.into()),
            ..repair_without_cycle
        };
        assert_eq!(
            Request::from_annotation(&repair.to_annotation()),
            Some(repair)
        );
        let cleanup_with_cycle = Request {
            cycle: Some(T.into()),
            ..cleanup
        };
        assert_eq!(
            Request::from_annotation(&cleanup_with_cycle.to_annotation()),
            None
        );
        for junk in [
            "",
            "cleanup",
            "{}",
            r#"{"id":"","operation":"cleanup","requestedAt":"2026-11-27T10:00:00Z"}"#,
            r#"{"id":"x","operation":"compact","requestedAt":"2026-11-27T10:00:00Z"}"#,
        ] {
            assert_eq!(Request::from_annotation(junk), None, "{junk}");
        }
    }

    /// The sidecar's records read back as written, with camelCase keys the
    /// README documents.
    #[test]
    fn records_read_back() {
        let record = Record {
            request: "r1".into(),
            operation: Operation::Repair,
            state: State::Running,
            keyspace: Some("ks".into()),
            keyspaces_done: vec!["a".into()],
            ranges_done: Some(3),
            ranges_total: Some(48),
            error: None,
            started_at: T.into(),
            at: T.into(),
        };
        let text = record.to_annotation();
        assert!(
            text.contains("\"rangesDone\":3") && text.contains("\"state\":\"running\""),
            "{text}"
        );
        assert_eq!(Record::from_annotation(&text), Some(record));
        let repaired = Repaired {
            cycle: T.into(),
            keyspaces: [("ks".to_string(), T.to_string())].into(),
            finished_at: T.into(),
        };
        assert_eq!(
            Repaired::from_annotation(&repaired.to_annotation()),
            Some(repaired)
        );
        assert_eq!(
            Repaired::from_annotation(
                r#"{"cycle":"soon","keyspaces":{},"finishedAt":"2026-11-27T10:00:00Z"}"#
            ),
            None
        );
        assert_eq!(old_format_sstables(Some(" 12")), Some(12));
        assert_eq!(old_format_sstables(Some("many")), None);
        assert_eq!(old_format_sstables(None), None);
    }

    #[test]
    fn local_system_keyspaces_are_left_alone_replicated_ones_are_not() {
        for local in [
            "system",
            "system_schema",
            "system_views",
            "system_virtual_schema",
        ] {
            assert!(is_local_system_keyspace(local), "{local}");
        }
        for replicated in ["system_auth", "system_distributed", "system_traces", "ks"] {
            assert!(!is_local_system_keyspace(replicated), "{replicated}");
        }
    }
}
