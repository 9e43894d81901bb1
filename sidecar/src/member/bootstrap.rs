//! Records on the data volume that this member's bootstrap is complete, the
//! first time the sidecar sees its node NORMAL (DESIGN.md section 4): from
//! then on the member may list itself as a seed, so that it can start when
//! no other member is up (a full outage). Never earlier: a member killed in
//! the middle of its bootstrap must resume it on restart, and a node that is
//! its own seed skips even an interrupted bootstrap. I/O (Jolokia, the data
//! volume, the member Service).
//!
//! In scylla mode it also records the node's host ID on its member Service
//! ([`contract::HOST_ID`]) at every start once NORMAL: ScyllaDB replaces a
//! lost node by host ID, and the replacement's sidecar reads it there.

use std::path::PathBuf;
use std::time::Duration;

use crds::contract;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::jolokia::OperationMode;
use crate::markers;
use crate::node::Node;

/// Watches the operation mode until it is NORMAL, then writes the
/// bootstrapped marker (atomically, synced) and withdraws a fulfilled
/// replace request from the member Service (`service`, followed by a
/// watch). Returns at once when the marker is already there.
pub async fn record_bootstrap(
    node: Node,
    data_dir: PathBuf,
    services: Api<Service>,
    service: watch::Receiver<Service>,
    name: String,
) {
    let marker = contract::bootstrapped_marker(&data_dir);
    if marker.is_file() {
        return;
    }
    let storage = node.with_timeout(Duration::from_secs(5));
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

/// Records this node's host ID on its member Service (annotation
/// [`contract::HOST_ID`]) once the node is NORMAL, unless it is there
/// already: the address stays with the member Service, the host ID is what
/// ScyllaDB replaces by.
pub async fn record_host_id(node: Node, service: Service, services: Api<Service>, name: String) {
    let node = node.with_timeout(Duration::from_secs(5));
    let recorded = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(contract::HOST_ID))
        .cloned();
    let host_id = loop {
        if let Ok(OperationMode::Normal) = node.operation_mode().await
            && let Ok(Some(id)) = node.local_host_id().await
        {
            break id;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    if recorded.as_deref() == Some(host_id.as_str()) {
        return;
    }
    let patch = serde_json::json!({"metadata": {"annotations": {contract::HOST_ID: host_id}}});
    match services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => info!(member = %name, %host_id, "host id recorded on the member service"),
        Err(e) => warn!(member = %name, error = %e, "recording the host id"),
    }
}
