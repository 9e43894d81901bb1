//! The member's side of the scale-down protocol at work: a watch on the
//! member Service (that one object) for the controller's records, and the
//! loop that observes the node (through Jolokia, or ScyllaDB's REST API),
//! asks [`super::next_step`] what to do and does it (claim, call
//! decommission, report a refusal, write the marker, confirm, clear the
//! records, restart the database).
//! I/O.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crds::contract;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use super::{Claim, Intent, LastCall, NodeState, Observed, Step};
use crate::markers;
use crate::node::Node;

/// Follows the member Service (that one object) into `service`.
pub async fn watch_own_service(
    services: Api<Service>,
    name: String,
    service: watch::Sender<Service>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(services, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(seen) => {
                service.send_replace(seen);
            }
            Err(e) => warn!(error = %e, "watching the member service"),
        }
    }
}

/// The sidecar's own records on a member Service.
pub fn claim_of(service: &Service) -> Claim {
    let annotations = service.metadata.annotations.as_ref();
    let has = |key| annotations.is_some_and(|a| a.contains_key(key));
    Claim {
        started: has(contract::DECOMMISSION_STARTED),
        refused: has(contract::DECOMMISSION_REFUSED),
    }
}

/// What the loop learned from its last decommission call.
#[derive(Debug, Clone, Default)]
struct Calls {
    in_flight: bool,
    /// Cassandra's reason for the last failure, while not yet retried.
    failure: Option<String>,
    /// Failures in a row (for the back-off), reset by a success.
    failures: u32,
    retry_at: Option<Instant>,
}

impl Calls {
    fn last_call(&self, now: Instant) -> LastCall {
        if self.in_flight {
            LastCall::InFlight
        } else if self.failure.is_some() {
            LastCall::Failed {
                backing_off: self.retry_at.is_some_and(|at| now < at),
            }
        } else {
            LastCall::None
        }
    }
}

/// What the loop shares with the rest of the sidecar.
pub struct Links {
    /// The local node.
    pub node: Node,
    pub services: Api<Service>,
    pub name: String,
    pub marker: PathBuf,
    /// The record of this node's host ID, made before the claim.
    pub leaving: PathBuf,
    /// Cassandra refused to start: the node was decommissioned.
    pub refused_decommissioned: Arc<AtomicBool>,
    /// Asks the sidecar to restart the database.
    pub restart: Arc<Notify>,
}

/// Drives the decommission from the member Service's records and the node's
/// operation mode until the task is dropped.
pub async fn decommission_loop(links: Links, mut service: watch::Receiver<Service>) {
    let Links {
        node: db,
        services,
        name,
        marker,
        leaving,
        refused_decommissioned,
        restart,
    } = links;
    let calls = Arc::new(Mutex::new(Calls::default()));
    let mut last_reason = "";
    // The API server's answer to our own last write, until the watch brings
    // something newer: deciding on it avoids acting twice on the version
    // before it (a stale decision would only meet a 409 anyway).
    let mut own_write: Option<Service> = None;
    loop {
        if service.has_changed().unwrap_or(true) {
            own_write = None;
        }
        let snapshot = match &own_write {
            Some(updated) => updated.clone(),
            None => service.borrow_and_update().clone(),
        };
        let intent = Intent::of(&snapshot.metadata);
        let claim = claim_of(&snapshot);
        let node = if refused_decommissioned.load(Ordering::Relaxed) {
            NodeState::RefusedDecommissioned
        } else if intent == Intent::Requested || claim.started || claim.refused {
            match db.operation_mode().await {
                Ok(mode) => NodeState::Mode(mode),
                Err(_) => NodeState::Unreachable,
            }
        } else {
            NodeState::Unreachable
        };
        let (last_call, failure) = {
            let c = calls.lock().unwrap_or_else(|e| e.into_inner());
            (c.last_call(Instant::now()), c.failure.clone())
        };
        let observed = Observed {
            intent,
            node: node.clone(),
            marker: marker.exists(),
            claim,
            last_call,
        };
        let mut pause = Duration::from_secs(2);
        match super::next_step(&observed) {
            Step::Idle => {
                let _ = service.changed().await;
                continue;
            }
            Step::Claim => {
                // The node is NORMAL: the last moment its host ID is sure
                // to be known, and the confirmation names it.
                match db.local_host_id().await {
                    Ok(Some(host_id)) if !host_id.is_empty() => {
                        if let Err(e) = markers::write_marker(&leaving, &host_id) {
                            warn!(error = %e, "recording the host id before the decommission");
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                    }
                    other => {
                        info!(member = %name, result = ?other, "the node's host id is not known yet; claiming later");
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
                let annotations = serde_json::json!({
                    contract::DECOMMISSION_STARTED: now_rfc3339(),
                    contract::DECOMMISSION_REFUSED: null,
                });
                match guarded_patch(&services, &snapshot, annotations).await {
                    Ok(updated) => {
                        info!(member = %name, "decommission claimed on the member service");
                        let mut c = calls.lock().unwrap_or_else(|e| e.into_inner());
                        c.failure = None;
                        drop(c);
                        // Decide again on what the API server answered.
                        own_write = Some(updated);
                        continue;
                    }
                    Err(e) => {
                        // 409: the controller changed the Service (maybe
                        // withdrew the request): look again.
                        info!(member = %name, error = %e, "the claim lost a race; deciding again");
                        pause = Duration::from_millis(200);
                    }
                }
            }
            Step::CallDecommission => {
                info!(member = %name, "decommissioning: streaming this node's data to the others");
                calls.lock().unwrap_or_else(|e| e.into_inner()).in_flight = true;
                let (db, calls, name) = (db.clone(), calls.clone(), name.clone());
                tokio::spawn(async move {
                    let result = db.decommission().await;
                    let mut c = calls.lock().unwrap_or_else(|e| e.into_inner());
                    c.in_flight = false;
                    match result {
                        Ok(()) => {
                            c.failures = 0;
                        }
                        // Cassandra refused, or the stream failed: what the
                        // MBean threw is the reason. Anything else (a
                        // timeout, a lost connection) says nothing: the mode
                        // decides.
                        Err(e) => match e.thrown_message() {
                            Some(reason) if !super::still_decommissioning(reason) => {
                                c.failures = c.failures.saturating_add(1);
                                let wait = super::backoff(c.failures);
                                warn!(member = %name, %reason, retry_in = ?wait, "cassandra refused the decommission");
                                c.failure = Some(reason.to_string());
                                c.retry_at = Some(Instant::now() + wait);
                            }
                            _ => {
                                info!(member = %name, error = %e, "the decommission call returned")
                            }
                        },
                    }
                });
            }
            Step::ReportRefusal => {
                let reason = failure.unwrap_or_else(|| match &node {
                    NodeState::Mode(mode) => format!("operation mode {mode}"),
                    other => format!("{other:?}"),
                });
                {
                    // DECOMMISSION_FAILED seen without a call of ours: back
                    // off like after one.
                    let mut c = calls.lock().unwrap_or_else(|e| e.into_inner());
                    if c.failure.is_none() {
                        c.failures = c.failures.saturating_add(1);
                        c.failure = Some(reason.clone());
                        c.retry_at = Some(Instant::now() + super::backoff(c.failures));
                    }
                }
                let annotations = serde_json::json!({contract::DECOMMISSION_REFUSED: reason});
                match guarded_patch(&services, &snapshot, annotations).await {
                    Ok(updated) => {
                        warn!(member = %name, %reason, "decommission refusal reported on the member service");
                        own_write = Some(updated);
                        continue;
                    }
                    Err(e) => warn!(member = %name, error = %e, "reporting the refusal"),
                }
            }
            Step::WriteMarker => {
                info!(member = %name, "the node left the ring (DECOMMISSIONED)");
                if let Err(e) = markers::write_marker(&marker, "") {
                    warn!(error = %e, "writing the decommission marker");
                }
                continue;
            }
            Step::Confirm => match confirm(&services, &snapshot, &leaving).await {
                Ok(()) => {
                    info!(member = %name, "decommission confirmed on the member service");
                    continue;
                }
                Err(e) => warn!(error = %e, "confirming the decommission"),
            },
            Step::ClearRecords => {
                let annotations = serde_json::json!({
                    contract::DECOMMISSION_STARTED: null,
                    contract::DECOMMISSION_REFUSED: null,
                });
                match guarded_patch(&services, &snapshot, annotations).await {
                    Ok(updated) => {
                        info!(member = %name, "decommission request withdrawn: records cleared");
                        *calls.lock().unwrap_or_else(|e| e.into_inner()) = Calls::default();
                        own_write = Some(updated);
                        continue;
                    }
                    Err(e) => {
                        info!(member = %name, error = %e, "clearing the records; deciding again")
                    }
                }
            }
            Step::RestartDatabase => {
                warn!(member = %name, mode = ?node, "decommission withdrawn while the node is stuck leaving: restarting the database, which brings it back NORMAL");
                restart.notify_one();
                pause = Duration::from_secs(10);
            }
            Step::Wait(reason) => {
                if reason != last_reason {
                    info!(member = %name, mode = ?node, "{reason}");
                    last_reason = reason;
                }
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Sets annotations on the member Service with a merge patch that carries
/// the resourceVersion the decision was made on: the API server answers 409
/// Conflict if anything changed since (the controller's write won), and the
/// loop decides again.
async fn guarded_patch(
    services: &Api<Service>,
    seen: &Service,
    annotations: serde_json::Value,
) -> Result<Service, kube::Error> {
    let name = seen.metadata.name.clone().unwrap_or_default();
    let patch = guarded(seen.metadata.resource_version.as_deref(), annotations);
    services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// A merge patch of annotations that the API server applies only to the
/// given resourceVersion (409 Conflict otherwise). Without a
/// resourceVersion (never from the API server) it would be unguarded, so it
/// carries an empty one that matches nothing.
pub fn guarded(
    resource_version: Option<&str>,
    annotations: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"metadata": {
        "resourceVersion": resource_version.unwrap_or("0"),
        "annotations": annotations,
    }})
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Sets `decommissioned=true` on the member Service with the confirmation
/// that answers the request it holds: the node left the ring (operation
/// mode DECOMMISSIONED was read back, the marker written). Guarded by the
/// resourceVersion read, so that it answers the request it read and no
/// later one.
pub async fn confirm(
    services: &Api<Service>,
    seen: &Service,
    leaving: &std::path::Path,
) -> Result<(), kube::Error> {
    let name = seen.metadata.name.clone().unwrap_or_default();
    let host_id = std::fs::read_to_string(leaving)
        .ok()
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty());
    let patch = confirmation(
        seen,
        host_id,
        k8s_openapi::jiff::Timestamp::now().to_string(),
    );
    services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// The confirmation of a decommission, as a patch of the member Service
/// `seen`: the label `"true"` and the record that names the request it
/// holds (an empty name when it holds none: the controller then takes it
/// for no confirmation) and the node's host ID. Pure.
pub fn confirmation(seen: &Service, host_id: Option<String>, at: String) -> serde_json::Value {
    let request = seen
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(contract::DECOMMISSION_REQUEST))
        .and_then(|r| contract::DecommissionRequest::from_annotation(r))
        .map(|r| r.id)
        .unwrap_or_default();
    let record = contract::DecommissionConfirmation {
        request,
        host_id,
        confirmed_at: at,
        removed: None,
    };
    serde_json::json!({"metadata": {
        "resourceVersion": seen.metadata.resource_version.as_deref().unwrap_or("0"),
        "labels": {contract::DECOMMISSIONED: contract::DECOMMISSION_DONE},
        "annotations": {contract::DECOMMISSION_CONFIRMATION: record.to_annotation()},
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Service {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let mut s = Service::default();
        s.metadata.labels = map(labels);
        s.metadata.annotations = map(annotations);
        s
    }

    #[test]
    fn a_claim_is_guarded_by_the_version_it_was_decided_on() {
        let patch = guarded(
            Some("42"),
            serde_json::json!({contract::DECOMMISSION_STARTED: "t", contract::DECOMMISSION_REFUSED: null}),
        );
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"resourceVersion": "42", "annotations": {
                "cassandra.rook.io/decommission-started": "t",
                "cassandra.rook.io/decommission-refused": null}}})
        );
        // Never unguarded.
        assert_eq!(
            guarded(None, serde_json::json!({}))["metadata"]["resourceVersion"],
            "0"
        );
    }

    #[test]
    fn a_confirmation_answers_the_request_it_read_guarded_by_its_version() {
        let request = contract::DecommissionRequest {
            id: "uid-1/2026-11-27T08:00:00Z".into(),
            requested_at: "2026-11-27T08:00:00Z".into(),
            ..Default::default()
        };
        let mut s = service(
            &[(contract::DECOMMISSIONED, "false")],
            &[(contract::DECOMMISSION_REQUEST, &request.to_annotation())],
        );
        s.metadata.resource_version = Some("17".into());
        let patch = confirmation(&s, Some("host-a".into()), "2026-11-27T08:05:00Z".into());
        assert_eq!(patch["metadata"]["resourceVersion"], "17");
        assert_eq!(
            patch["metadata"]["labels"][contract::DECOMMISSIONED],
            contract::DECOMMISSION_DONE
        );
        let record = contract::DecommissionConfirmation::from_annotation(
            patch["metadata"]["annotations"][contract::DECOMMISSION_CONFIRMATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(record.request, request.id);
        assert_eq!(record.host_id.as_deref(), Some("host-a"));
        // Without a request, it names none: the controller reads no
        // confirmation in it.
        let bare = confirmation(
            &service(&[(contract::DECOMMISSIONED, "false")], &[]),
            None,
            "2026-11-27T08:05:00Z".into(),
        );
        let value = bare["metadata"]["annotations"][contract::DECOMMISSION_CONFIRMATION]
            .as_str()
            .unwrap();
        assert_eq!(
            contract::DecommissionConfirmation::from_annotation(value),
            None
        );
    }

    #[test]
    fn the_records_read_from_the_member_service() {
        let s = service(
            &[(contract::DECOMMISSIONED, "false")],
            &[(contract::DECOMMISSION_STARTED, "t")],
        );
        assert_eq!(Intent::of(&s.metadata), Intent::Requested);
        assert_eq!(
            claim_of(&s),
            Claim {
                started: true,
                refused: false
            }
        );
        assert!(claim_of(&s).stands());
        let s = service(
            &[],
            &[
                (contract::DECOMMISSION_STARTED, "t"),
                (contract::DECOMMISSION_REFUSED, "Not enough live nodes"),
            ],
        );
        assert_eq!(Intent::of(&s.metadata), Intent::Serve);
        assert!(!claim_of(&s).stands());
        assert_eq!(claim_of(&Service::default()), Claim::default());
    }
}
