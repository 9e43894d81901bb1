//! The member's side of the scale-down protocol (DESIGN.md sections 4 and 5):
//! the controller labels the member Service `decommissioned=false`; the
//! sidecar decommissions the node through Jolokia, confirms the operation
//! mode DECOMMISSIONED, and answers with `decommissioned=true`.
//!
//! This module is the pure decision: from the label, what Jolokia shows and
//! what survives a restart (a marker file on the data volume), the next
//! step. Either side may die at any moment; every combination below resumes:
//!
//! | crash point | what the restarted sidecar sees | step |
//! |---|---|---|
//! | before the call | label false, mode NORMAL | call decommission |
//! | during the call (Cassandra killed with the container) | label false, mode NORMAL again: an interrupted leave is abandoned by Cassandra | call decommission again |
//! | during the call (the sidecar alone restarted, the HTTP call lost) | label false, mode LEAVING | wait, do not call again |
//! | after DECOMMISSIONED, before the marker | label false; Cassandra refuses to start ("This node was decommissioned...") | write the marker, set the label |
//! | after the marker, before the label | label false, marker present | set the label; never start Cassandra again |
//! | after the label | label true | nothing |
//!
//! Trusting the call is not enough: a timeout or a lost connection says
//! nothing about the node, so the mode decides, never the call's result.

use crate::jolokia::OperationMode;

pub mod act;

/// What the controller asked for: the member Service's decommission record,
/// read as the controller reads it. An unknown value is no request: the safe
/// reading, since decommissioning is irreversible.
pub use crds::contract::Decommission as Intent;

/// What the sidecar knows of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Jolokia answered with this operation mode.
    Mode(OperationMode),
    /// Jolokia does not answer (Cassandra starting, stopped or restarting).
    Unreachable,
    /// Cassandra refused to start because the node was decommissioned.
    RefusedDecommissioned,
}

/// The next thing the sidecar does about the decommission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do.
    Idle,
    /// Call `decommission` through Jolokia (a long, blocking call; its result
    /// is not trusted: the next observation decides).
    CallDecommission,
    /// Record on the data volume that this node left the ring, so that a
    /// restart never starts it again and can still confirm.
    WriteMarker,
    /// Set the label to `"true"`.
    Confirm,
    /// Wait and look again; the reason is for the log.
    Wait(&'static str),
}

/// Decides the next step. `marker` is whether the data volume carries the
/// decommissioned marker; `call_in_flight` whether this sidecar process has a
/// decommission call running.
pub fn next_step(intent: Intent, node: &NodeState, marker: bool, call_in_flight: bool) -> Step {
    match intent {
        Intent::Serve | Intent::Confirmed | Intent::Unknown => return Step::Idle,
        Intent::Requested => {}
    }
    if marker {
        return Step::Confirm;
    }
    match node {
        NodeState::RefusedDecommissioned => Step::WriteMarker,
        NodeState::Unreachable => Step::Wait("cassandra does not answer through jolokia yet"),
        NodeState::Mode(mode) => match mode {
            OperationMode::Decommissioned => Step::WriteMarker,
            OperationMode::Normal if call_in_flight => {
                Step::Wait("decommission called: cassandra waits a ring delay before it leaves")
            }
            OperationMode::Normal => Step::CallDecommission,
            // 5.0 allows a retry from the failed state.
            OperationMode::DecommissionFailed if !call_in_flight => Step::CallDecommission,
            OperationMode::DecommissionFailed => {
                Step::Wait("the decommission call is still returning")
            }
            OperationMode::Leaving => {
                Step::Wait("leaving: streaming this node's ranges to the others")
            }
            OperationMode::Starting | OperationMode::Joining | OperationMode::Moving => {
                Step::Wait("the node must be NORMAL before it can leave")
            }
            OperationMode::JoiningFailed => {
                Step::Wait("the node failed to join; it cannot leave a ring it is not in")
            }
            OperationMode::Draining | OperationMode::Drained => {
                Step::Wait("the node is drained; it must restart before it can leave")
            }
            OperationMode::Other(_) => Step::Wait("unknown operation mode"),
        },
    }
}

/// Whether the sidecar may start Cassandra: never for a node that left the
/// ring (its data directory would refuse anyway, and overriding that would
/// bring a node back with stale data).
pub fn may_start_cassandra(marker: bool) -> bool {
    !marker
}

/// The line Cassandra logs when it refuses to start a decommissioned node
/// (StorageService, 3.11 to 5.0).
pub const REFUSED_DECOMMISSIONED_LOG: &str =
    "This node was decommissioned and will not rejoin the ring";

#[cfg(test)]
mod tests {
    use super::*;
    use OperationMode::*;

    fn mode(m: OperationMode) -> NodeState {
        NodeState::Mode(m)
    }

    #[test]
    fn label_values() {
        assert_eq!(Intent::from_label(None), Intent::Serve);
        assert_eq!(Intent::from_label(Some("false")), Intent::Requested);
        assert_eq!(Intent::from_label(Some("true")), Intent::Confirmed);
        assert_eq!(Intent::from_label(Some("yes")), Intent::Unknown);
    }

    #[test]
    fn no_request_no_action_whatever_the_node_does() {
        for node in [
            mode(Normal),
            mode(Leaving),
            mode(Decommissioned),
            NodeState::Unreachable,
        ] {
            assert_eq!(next_step(Intent::Serve, &node, false, false), Step::Idle);
            assert_eq!(next_step(Intent::Confirmed, &node, true, false), Step::Idle);
            assert_eq!(next_step(Intent::Unknown, &node, false, false), Step::Idle);
        }
    }

    #[test]
    fn the_happy_path() {
        let d = Intent::Requested;
        assert_eq!(
            next_step(d, &mode(Normal), false, false),
            Step::CallDecommission
        );
        assert!(matches!(
            next_step(d, &mode(Normal), false, true),
            Step::Wait(_)
        ));
        assert!(matches!(
            next_step(d, &mode(Leaving), false, true),
            Step::Wait(_)
        ));
        assert_eq!(
            next_step(d, &mode(Decommissioned), false, true),
            Step::WriteMarker
        );
        assert_eq!(
            next_step(d, &mode(Decommissioned), true, false),
            Step::Confirm
        );
    }

    #[test]
    fn crash_before_or_during_the_call_with_cassandra_restarted_calls_again() {
        // Cassandra died with the container: the interrupted leave is
        // abandoned and the node comes back NORMAL.
        assert_eq!(
            next_step(Intent::Requested, &NodeState::Unreachable, false, false),
            Step::Wait("cassandra does not answer through jolokia yet")
        );
        assert_eq!(
            next_step(Intent::Requested, &mode(Starting), false, false),
            Step::Wait("the node must be NORMAL before it can leave")
        );
        assert_eq!(
            next_step(Intent::Requested, &mode(Normal), false, false),
            Step::CallDecommission
        );
    }

    #[test]
    fn crash_of_the_sidecar_alone_during_the_call_does_not_call_twice() {
        // The new sidecar process has no call in flight, but the node is
        // already leaving: calling again would fail ("Node is still
        // decommissioning", 3.11) or be a no-op (5.0); waiting is right.
        assert!(matches!(
            next_step(Intent::Requested, &mode(Leaving), false, false),
            Step::Wait(_)
        ));
    }

    #[test]
    fn crash_after_decommissioned_before_the_marker_is_confirmed_from_the_refusal() {
        assert_eq!(
            next_step(
                Intent::Requested,
                &NodeState::RefusedDecommissioned,
                false,
                false
            ),
            Step::WriteMarker
        );
    }

    #[test]
    fn crash_after_the_marker_before_the_label_confirms_without_cassandra() {
        assert_eq!(
            next_step(Intent::Requested, &NodeState::Unreachable, true, false),
            Step::Confirm
        );
        assert!(!may_start_cassandra(true));
        assert!(may_start_cassandra(false));
    }

    #[test]
    fn a_failed_decommission_is_retried_on_5_0() {
        assert_eq!(
            next_step(Intent::Requested, &mode(DecommissionFailed), false, false),
            Step::CallDecommission
        );
        assert!(matches!(
            next_step(Intent::Requested, &mode(DecommissionFailed), false, true),
            Step::Wait(_)
        ));
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
            assert!(
                matches!(
                    next_step(Intent::Requested, &mode(m.clone()), false, false),
                    Step::Wait(_)
                ),
                "{m}"
            );
        }
    }
}
