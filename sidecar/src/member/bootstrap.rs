//! Records on the data volume that this member's bootstrap is complete, the
//! first time the sidecar sees its node NORMAL (DESIGN.md section 4): from
//! then on the member may list itself as a seed, so that it can start when
//! no other member is up (a full outage). Never earlier: a member killed in
//! the middle of its bootstrap must resume it on restart, and a node that is
//! its own seed skips even an interrupted bootstrap. I/O (Jolokia, the data
//! volume, the member Service).

use std::path::PathBuf;
use std::time::Duration;

use crds::contract;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::jolokia::{Jolokia, OperationMode, StorageService};
use crate::markers;

/// Watches the operation mode until it is NORMAL, then writes the
/// bootstrapped marker (atomically, synced) and withdraws a fulfilled
/// replace request from the member Service (`service`, followed by a
/// watch). Returns at once when the marker is already there.
pub async fn record_bootstrap(
    jolokia: Jolokia,
    data_dir: PathBuf,
    services: Api<Service>,
    service: watch::Receiver<Service>,
    name: String,
) {
    let marker = contract::bootstrapped_marker(&data_dir);
    if marker.is_file() {
        return;
    }
    let storage = StorageService::new(jolokia.with_timeout(Duration::from_secs(5)));
    loop {
        if let Ok(OperationMode::Normal) = storage.operation_mode().await {
            match markers::write_marker(&marker, "NORMAL\n") {
                Ok(()) => {
                    info!(member = %name, marker = %marker.display(), "bootstrap complete: recorded on the data volume");
                    break;
                }
                Err(e) => warn!(member = %name, error = %e, "recording the completed bootstrap"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The member joined: a replace request it made is fulfilled. Without
    // one there is nothing to write (the member Service is not touched on
    // every bootstrap).
    let requested = service
        .borrow()
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(contract::REPLACE_REQUESTED));
    if !requested {
        return;
    }
    let patch =
        serde_json::json!({"metadata": {"annotations": {contract::REPLACE_REQUESTED: null}}});
    if let Err(e) = services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        warn!(member = %name, error = %e, "withdrawing the replace request");
    }
}
