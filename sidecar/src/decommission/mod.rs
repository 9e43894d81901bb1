//! The member's side of the scale-down protocol (DESIGN.md sections 4 and 5):
//! the controller labels the member Service `decommissioned=false`; the
//! sidecar claims the decommission on the member Service, decommissions the
//! node (through Jolokia, or ScyllaDB's REST API in scylla mode), confirms
//! the operation mode DECOMMISSIONED, and answers with
//! `decommissioned=true` and a confirmation that names the controller's
//! request and the node's host ID (recorded on the data volume before the
//! claim: a node that left no longer knows its own).
//!
//! This module is the pure decision: from the records on the member Service,
//! what Jolokia shows, what this process knows of its last call and what
//! survives a restart (a marker file on the data volume), the next step.
//! Either side may die at any moment; every combination below resumes:
//!
//! | crash point | what the restarted sidecar sees | step |
//! |---|---|---|
//! | before the claim | label false, no `decommission-started` | record the host ID on the data volume, then claim (guarded by the Service's resourceVersion) |
//! | after the claim, before the call | label false, claimed, mode NORMAL | call decommission |
//! | during the call (Cassandra killed with the container) | label false, claimed, mode NORMAL again: an interrupted leave is abandoned by Cassandra | call decommission again |
//! | during the call (the sidecar alone restarted, the HTTP call lost) | label false, claimed, mode LEAVING | call again: Cassandra answers "still decommissioning" while it streams (not a failure), or resumes a leave whose stream failed |
//! | after a refusal or a failure, before the report | label false, claimed, no report, mode NORMAL or LEAVING | call again; the failure comes back and is reported |
//! | after DECOMMISSIONED, before the marker | Cassandra refuses to start ("This node was decommissioned...") | write the marker, set the label |
//! | after the marker, before the label | label false, marker present | set the label with the confirmation (guarded); never start Cassandra again |
//! | after the label | label true | nothing |
//!
//! The claim and the controller's withdrawal are both writes guarded by the
//! member Service's resourceVersion: the controller withdraws a request only
//! while no claim stands or Cassandra refused, so a withdrawal and a started
//! decommission cannot both win. A refusal is reported with Cassandra's
//! reason and retried after an exponential back-off; a retry is a new claim
//! (which clears the report), so the controller's window to withdraw stays
//! open during the back-off only. A withdrawn request clears the records,
//! and a node left LEAVING by a failed stream (3.11, 4.x) or
//! DECOMMISSION_FAILED (5.0) is restarted, which is how Cassandra returns to
//! NORMAL ("wait for status to become normal or restart").
//!
//! Trusting the call is not enough: a timeout or a lost connection says
//! nothing about the node, so the mode decides, never the call's result.

use std::time::Duration;

use crate::jolokia::OperationMode;

pub mod act;

/// What the controller asked for: the member Service's decommission record,
/// read as the controller reads it. An unknown value is no request: the safe
/// reading, since decommissioning is irreversible.
pub use crds::contract::Decommission as Intent;

/// What the sidecar knows of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// The node answered with this operation mode.
    Mode(OperationMode),
    /// The node does not answer (Cassandra starting, stopped or restarting).
    Unreachable,
    /// Cassandra refused to start because the node was decommissioned.
    RefusedDecommissioned,
}

/// The sidecar's own records on its member Service (annotations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claim {
    /// `decommission-started` is present.
    pub started: bool,
    /// `decommission-refused` is present.
    pub refused: bool,
}

impl Claim {
    /// The claim stands: the controller may not withdraw the request.
    pub fn stands(self) -> bool {
        self.started && !self.refused
    }
}

/// What this process knows of its last decommission call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastCall {
    /// None made since the last claim (or since this process started).
    None,
    /// A call is running.
    InFlight,
    /// The last call failed (Cassandra refused, or the stream failed).
    Failed {
        /// The back-off after it is not over yet.
        backing_off: bool,
    },
}

/// What the sidecar observed, all at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub intent: Intent,
    pub node: NodeState,
    /// The data volume carries the decommissioned marker.
    pub marker: bool,
    pub claim: Claim,
    pub last_call: LastCall,
}

/// The next thing the sidecar does about the decommission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until the intent changes.
    Idle,
    /// Claim the decommission on the member Service (`decommission-started`
    /// set, `decommission-refused` cleared) with a patch guarded by its
    /// resourceVersion; a conflict means the controller changed it: look
    /// again.
    Claim,
    /// Call `decommission` through Jolokia (a long, blocking call; its result
    /// is not trusted: the next observation decides).
    CallDecommission,
    /// Report on the member Service that Cassandra refused or failed the
    /// decommission, with its reason.
    ReportRefusal,
    /// Record on the data volume that this node left the ring, so that a
    /// restart never starts it again and can still confirm.
    WriteMarker,
    /// Set the label to `"true"`.
    Confirm,
    /// The request was withdrawn: remove the sidecar's records.
    ClearRecords,
    /// The request was withdrawn while the node is stuck LEAVING (or
    /// DECOMMISSION_FAILED): restart the database, which brings it back
    /// NORMAL.
    RestartDatabase,
    /// Wait and look again; the reason is for the log.
    Wait(&'static str),
}

/// Decides the next step.
pub fn next_step(o: &Observed) -> Step {
    // A node that left the ring is recorded whatever the intent: its data
    // must never serve again.
    if !o.marker
        && matches!(
            o.node,
            NodeState::RefusedDecommissioned | NodeState::Mode(OperationMode::Decommissioned)
        )
    {
        return Step::WriteMarker;
    }
    match o.intent {
        Intent::Confirmed | Intent::Unknown => Step::Idle,
        Intent::Serve => withdrawn(o),
        Intent::Requested => requested(o),
    }
}

fn withdrawn(o: &Observed) -> Step {
    if !(o.claim.started || o.claim.refused) {
        return Step::Idle;
    }
    match (&o.node, o.last_call) {
        (_, LastCall::InFlight) => {
            Step::Wait("the request was withdrawn while the decommission call runs")
        }
        (NodeState::Mode(OperationMode::Leaving | OperationMode::DecommissionFailed), _) => {
            Step::RestartDatabase
        }
        _ => Step::ClearRecords,
    }
}

fn requested(o: &Observed) -> Step {
    if o.marker {
        return Step::Confirm;
    }
    let NodeState::Mode(mode) = &o.node else {
        return Step::Wait("cassandra does not answer through jolokia yet");
    };
    if o.last_call == LastCall::InFlight {
        return match mode {
            OperationMode::Normal => {
                Step::Wait("decommission called: cassandra waits a ring delay before it leaves")
            }
            _ => Step::Wait("leaving: streaming this node's ranges to the others"),
        };
    }
    match mode {
        OperationMode::Normal | OperationMode::Leaving | OperationMode::DecommissionFailed => {}
        OperationMode::Starting | OperationMode::Joining | OperationMode::Moving => {
            return Step::Wait("the node must be NORMAL before it can leave");
        }
        OperationMode::JoiningFailed => {
            return Step::Wait("the node failed to join; it cannot leave a ring it is not in");
        }
        OperationMode::Draining | OperationMode::Drained => {
            return Step::Wait("the node is drained; it must restart before it can leave");
        }
        OperationMode::Decommissioned => return Step::WriteMarker,
        OperationMode::Other(_) => return Step::Wait("unknown operation mode"),
    }
    // DECOMMISSION_FAILED is a failure this process may not have seen (it
    // restarted): report it like one.
    let failed = match o.last_call {
        LastCall::Failed { backing_off } => Some(backing_off),
        _ if *mode == OperationMode::DecommissionFailed => Some(false),
        _ => None,
    };
    match failed {
        Some(_) if !o.claim.refused => Step::ReportRefusal,
        Some(true) => Step::Wait("cassandra refused the decommission: backing off"),
        _ if o.claim.stands() => Step::CallDecommission,
        _ => Step::Claim,
    }
}

/// Whether the sidecar may start Cassandra: never for a node that left the
/// ring (its data directory would refuse anyway, and overriding that would
/// bring a node back with stale data).
pub fn may_start_cassandra(marker: bool) -> bool {
    !marker
}

/// The back-off after the `failures`-th failed decommission in a row:
/// doubling from 5 s, capped at 5 minutes, so that a refusal is neither
/// retried in a tight loop nor left for long once its cause is gone.
pub fn backoff(failures: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << failures.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

/// Whether a decommission call's error says a decommission is already
/// running in this node (3.11, 4.x: "Node is still decommissioning. Check
/// nodetool netstats."): no failure, the leave goes on.
pub fn still_decommissioning(reason: &str) -> bool {
    reason.contains("still decommissioning")
}

/// The line Cassandra logs when it refuses to start a decommissioned node
/// (StorageService, 3.11 to 5.0).
pub const REFUSED_DECOMMISSIONED_LOG: &str =
    "This node was decommissioned and will not rejoin the ring";

#[cfg(test)]
mod tests {
    use super::*;
    use OperationMode::*;

    const CLAIMED: Claim = Claim {
        started: true,
        refused: false,
    };
    const REFUSED: Claim = Claim {
        started: true,
        refused: true,
    };
    const NONE: Claim = Claim {
        started: false,
        refused: false,
    };

    fn mode(m: OperationMode) -> NodeState {
        NodeState::Mode(m)
    }

    fn observed(intent: Intent, node: NodeState, claim: Claim, last_call: LastCall) -> Observed {
        Observed {
            intent,
            node,
            marker: false,
            claim,
            last_call,
        }
    }

    fn step(intent: Intent, node: NodeState, claim: Claim, last_call: LastCall) -> Step {
        next_step(&observed(intent, node, claim, last_call))
    }

    #[test]
    fn label_values() {
        assert_eq!(Intent::from_label(None), Intent::Serve);
        assert_eq!(Intent::from_label(Some("false")), Intent::Requested);
        assert_eq!(Intent::from_label(Some("true")), Intent::Confirmed);
        assert_eq!(Intent::from_label(Some("yes")), Intent::Unknown);
    }

    #[test]
    fn no_request_and_no_records_no_action_whatever_the_node_does() {
        for node in [
            mode(Normal),
            mode(Leaving),
            mode(DecommissionFailed),
            NodeState::Unreachable,
        ] {
            for last in [LastCall::None, LastCall::InFlight] {
                assert_eq!(step(Intent::Serve, node.clone(), NONE, last), Step::Idle);
                assert_eq!(
                    step(Intent::Unknown, node.clone(), CLAIMED, last),
                    Step::Idle
                );
                let mut o = observed(Intent::Confirmed, node.clone(), CLAIMED, last);
                o.marker = true;
                assert_eq!(next_step(&o), Step::Idle);
            }
        }
    }

    #[test]
    fn the_happy_path_claims_before_it_calls() {
        let d = Intent::Requested;
        assert_eq!(
            step(d, mode(Normal), NONE, LastCall::None),
            Step::Claim,
            "never a call without a standing claim"
        );
        assert_eq!(
            step(d, mode(Normal), CLAIMED, LastCall::None),
            Step::CallDecommission
        );
        assert!(matches!(
            step(d, mode(Normal), CLAIMED, LastCall::InFlight),
            Step::Wait(_)
        ));
        assert!(matches!(
            step(d, mode(Leaving), CLAIMED, LastCall::InFlight),
            Step::Wait(_)
        ));
        assert_eq!(
            step(d, mode(Decommissioned), CLAIMED, LastCall::InFlight),
            Step::WriteMarker
        );
        let mut o = observed(d, mode(Decommissioned), CLAIMED, LastCall::None);
        o.marker = true;
        assert_eq!(next_step(&o), Step::Confirm);
    }

    #[test]
    fn crash_before_or_during_the_call_with_cassandra_restarted_calls_again() {
        // Cassandra died with the container: the interrupted leave is
        // abandoned and the node comes back NORMAL; the claim stands.
        let d = Intent::Requested;
        assert_eq!(
            step(d, NodeState::Unreachable, CLAIMED, LastCall::None),
            Step::Wait("cassandra does not answer through jolokia yet")
        );
        assert_eq!(
            step(d, mode(Starting), CLAIMED, LastCall::None),
            Step::Wait("the node must be NORMAL before it can leave")
        );
        assert_eq!(
            step(d, mode(Normal), CLAIMED, LastCall::None),
            Step::CallDecommission
        );
    }

    #[test]
    fn crash_of_the_sidecar_alone_during_the_call_asks_cassandra_again() {
        // The new process has no call in flight and the node is LEAVING:
        // either it still streams (Cassandra answers "still
        // decommissioning", not a failure) or its stream failed (the call
        // resumes the leave).
        assert_eq!(
            step(Intent::Requested, mode(Leaving), CLAIMED, LastCall::None),
            Step::CallDecommission
        );
        assert!(still_decommissioning(
            "Node is still decommissioning. Check nodetool netstats."
        ));
        assert!(!still_decommissioning(
            "Not enough live nodes to maintain replication factor in keyspace ks"
        ));
    }

    #[test]
    fn crash_after_decommissioned_before_the_marker_is_confirmed_from_the_refusal() {
        for intent in [Intent::Requested, Intent::Serve, Intent::Confirmed] {
            assert_eq!(
                step(
                    intent,
                    NodeState::RefusedDecommissioned,
                    CLAIMED,
                    LastCall::None
                ),
                Step::WriteMarker,
                "{intent:?}"
            );
        }
    }

    #[test]
    fn crash_after_the_marker_before_the_label_confirms_without_cassandra() {
        let mut o = observed(
            Intent::Requested,
            NodeState::Unreachable,
            CLAIMED,
            LastCall::None,
        );
        o.marker = true;
        assert_eq!(next_step(&o), Step::Confirm);
        assert!(!may_start_cassandra(true));
        assert!(may_start_cassandra(false));
    }

    #[test]
    fn a_refusal_is_reported_then_retried_after_a_back_off_with_a_new_claim() {
        let d = Intent::Requested;
        // 4.x: refused at once, the mode stays NORMAL.
        let failed = LastCall::Failed { backing_off: true };
        assert_eq!(step(d, mode(Normal), CLAIMED, failed), Step::ReportRefusal);
        assert!(matches!(
            step(d, mode(Normal), REFUSED, failed),
            Step::Wait(_)
        ));
        let over = LastCall::Failed { backing_off: false };
        assert_eq!(
            step(d, mode(Normal), REFUSED, over),
            Step::Claim,
            "a retry is a new claim: never a call while the controller may withdraw"
        );
        // 3.11 and 4.x: a failed stream leaves the node LEAVING.
        assert_eq!(step(d, mode(Leaving), CLAIMED, failed), Step::ReportRefusal);
        assert_eq!(step(d, mode(Leaving), REFUSED, over), Step::Claim);
        // 5.0: DECOMMISSION_FAILED, even when this process did not see the
        // call fail.
        assert_eq!(
            step(d, mode(DecommissionFailed), CLAIMED, LastCall::None),
            Step::ReportRefusal
        );
        assert_eq!(
            step(d, mode(DecommissionFailed), REFUSED, LastCall::None),
            Step::Claim
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(20));
        assert_eq!(backoff(7), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn a_withdrawn_request_clears_the_records_and_restarts_a_stuck_node() {
        let s = Intent::Serve;
        for claim in [CLAIMED, REFUSED] {
            assert_eq!(
                step(s, mode(Normal), claim, LastCall::None),
                Step::ClearRecords
            );
            assert_eq!(
                step(s, NodeState::Unreachable, claim, LastCall::None),
                Step::ClearRecords
            );
            for stuck in [Leaving, DecommissionFailed] {
                assert_eq!(
                    step(
                        s,
                        mode(stuck),
                        claim,
                        LastCall::Failed { backing_off: true }
                    ),
                    Step::RestartDatabase
                );
            }
            assert!(matches!(
                step(s, mode(Leaving), claim, LastCall::InFlight),
                Step::Wait(_)
            ));
        }
        // A leave this sidecar never claimed (nodetool by hand) is not ours
        // to undo.
        assert_eq!(step(s, mode(Leaving), NONE, LastCall::None), Step::Idle);
    }

    #[test]
    fn a_node_that_cannot_leave_yet_waits() {
        for m in [
            Joining,
            JoiningFailed,
            Moving,
            Draining,
            Drained,
            Other("X".into()),
        ] {
            for claim in [NONE, CLAIMED] {
                assert!(
                    matches!(
                        step(Intent::Requested, mode(m.clone()), claim, LastCall::None),
                        Step::Wait(_)
                    ),
                    "{m}"
                );
            }
        }
    }
}
