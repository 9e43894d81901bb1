//! The member's gossip record ([`contract::GOSSIP`]) on its member
//! Service: what its node's gossip says of every endpoint, each time that
//! changes while the node is NORMAL. A roll takes the next member down only
//! when every record shows every member up under the generation it runs
//! (DESIGN.md section 6): a Pod's readiness says how the node sees itself,
//! never how the others see it. The record also names the token owners, so
//! that the controller deletes a member's data only once another member's
//! ring no longer counts it, and is written again, unchanged, when the
//! controller asks for a record newer than a decommission's request
//! (`contract::RING_RECORD_REQUESTED`). Writes only on a change, so a steady ring
//! costs no writes. I/O (the node, the member Service).

use std::time::Duration;

use crds::contract::{self, GossipView};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::jolokia::OperationMode;
use crate::node::Node;

/// Every `every`, while the node is NORMAL: reads its gossip and records
/// it on the member Service (`service`, followed by a watch) when it
/// differs from what the Service holds. Runs until the task is dropped.
pub async fn record_gossip(
    node: Node,
    own_address: String,
    services: Api<Service>,
    service: watch::Receiver<Service>,
    name: String,
    every: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match node.operation_mode().await {
            Ok(OperationMode::Normal) => {}
            Ok(_) => continue,
            Err(e) => {
                debug!(error = %e, "gossip record: the node does not answer");
                continue;
            }
        }
        let view = match node.gossip_view(&own_address).await {
            Ok(Some(view)) => view,
            Ok(None) => continue,
            Err(e) => {
                debug!(error = %e, "gossip record: reading the node's gossip");
                continue;
            }
        };
        let (recorded, requested) = {
            let service = service.borrow();
            let requested = service
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(contract::RING_RECORD_REQUESTED))
                .cloned();
            (recorded(&service), requested)
        };
        if !view.to_record(recorded.as_ref(), requested.as_deref()) {
            continue;
        }
        // When it was seen: the controller accepts a decommission only on
        // a record of the ring made after its request.
        let at = contract::record_time(k8s_openapi::jiff::Timestamp::now(), requested.as_deref());
        let view = GossipView {
            at: Some(at.to_string()),
            ..view
        };
        let patch = serde_json::json!({"metadata": {"annotations": {
            contract::GOSSIP: view.to_annotation(),
        }}});
        match services
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!(
                member = %name,
                generation = view.generation,
                up = view.up.len(),
                down = ?view.down,
                "gossip record updated"
            ),
            Err(e) => warn!(member = %name, error = %e, "recording the gossip view"),
        }
    }
}

/// The gossip record a member Service holds, if readable.
fn recorded(service: &Service) -> Option<GossipView> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(contract::GOSSIP)
        .and_then(|v| GossipView::from_annotation(v))
}
