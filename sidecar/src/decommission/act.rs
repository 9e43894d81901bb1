//! The member's side of the scale-down protocol at work: a watch on the
//! member Service (that one object) for the controller's intent, and the
//! loop that observes the node through Jolokia, asks [`super::next_step`]
//! what to do and does it (call decommission, write the marker, confirm on
//! the member Service). I/O.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crds::contract;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{Intent, NodeState, Step};
use crate::jolokia::{Jolokia, StorageService};
use crate::markers;

/// Follows the member Service's decommission record into `intent`.
pub async fn watch_own_service(
    services: Api<Service>,
    name: String,
    intent: watch::Sender<Intent>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(services, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(service) => {
                let value = Intent::from_label(
                    service
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(contract::DECOMMISSIONED))
                        .map(String::as_str),
                );
                intent.send_if_modified(|current| {
                    let changed = *current != value;
                    *current = value;
                    changed
                });
            }
            Err(e) => warn!(error = %e, "watching the member service"),
        }
    }
}

/// Drives the decommission from the intent and the node's operation mode
/// until the task is dropped.
pub async fn decommission_loop(
    jolokia: Jolokia,
    mut intent: watch::Receiver<Intent>,
    services: Api<Service>,
    name: String,
    marker: PathBuf,
    refused: Arc<AtomicBool>,
) {
    let in_flight = Arc::new(AtomicBool::new(false));
    let mut last_reason = "";
    loop {
        let current = *intent.borrow_and_update();
        let node = if refused.load(Ordering::Relaxed) {
            NodeState::RefusedDecommissioned
        } else if current == Intent::Requested {
            match StorageService::new(jolokia.clone()).operation_mode().await {
                Ok(mode) => NodeState::Mode(mode),
                Err(_) => NodeState::Unreachable,
            }
        } else {
            NodeState::Unreachable
        };
        match super::next_step(
            current,
            &node,
            marker.exists(),
            in_flight.load(Ordering::Relaxed),
        ) {
            Step::Idle => {
                let _ = intent.changed().await;
                continue;
            }
            Step::CallDecommission => {
                info!(member = %name, "decommissioning: streaming this node's data to the others");
                in_flight.store(true, Ordering::Relaxed);
                let (jolokia, in_flight) = (jolokia.clone(), in_flight.clone());
                tokio::spawn(async move {
                    // The result says little (a timeout is not a failure):
                    // the operation mode decides.
                    if let Err(e) = StorageService::new(jolokia).decommission().await {
                        warn!(error = %e, "the decommission call returned an error");
                    }
                    in_flight.store(false, Ordering::Relaxed);
                });
            }
            Step::WriteMarker => {
                info!(member = %name, "the node left the ring (DECOMMISSIONED)");
                if let Err(e) = markers::write_marker(&marker, "") {
                    warn!(error = %e, "writing the decommission marker");
                }
                continue;
            }
            Step::Confirm => match confirm(&services, &name).await {
                Ok(()) => {
                    info!(member = %name, "decommission confirmed on the member service");
                    continue;
                }
                Err(e) => warn!(error = %e, "confirming the decommission"),
            },
            Step::Wait(reason) => {
                if reason != last_reason {
                    info!(member = %name, mode = ?node, "{reason}");
                    last_reason = reason;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Sets `decommissioned=true` on the member Service: the node left the ring
/// (operation mode DECOMMISSIONED was read back, the marker written).
pub async fn confirm(services: &Api<Service>, name: &str) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"metadata": {"labels": {contract::DECOMMISSIONED: contract::DECOMMISSION_DONE}}});
    services
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}
