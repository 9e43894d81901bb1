//! Disruptions while data moves, with the whole operator in the test world:
//! while a new member streams its ranges (a bootstrap lasting long enough
//! to look at), the PodDisruptionBudget allows no eviction at all, not even
//! of the streaming member itself (which `maxUnavailable: 1` lets go, it
//! being the one member down); a Node cordoned meanwhile (GKE's upgrade or
//! auto-repair starting a drain, which it forces after about one hour)
//! degrades the Cluster with a Warning Event naming it; once the member
//! joined, one member may go again, and the cordon alone degrades nothing.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::common::FAKE_WORLDS;
use crate::lifecycle::condition;
use crate::scenario::{Scenario, cluster, secs, setup};

/// The Cluster's budget's `maxUnavailable`, once the disruption controller
/// has counted the Pods under it (its status is of its generation: the
/// eviction API judges an unready Pod by that status).
async fn max_unavailable(s: &Scenario) -> Option<IntOrString> {
    let pdb = s.api::<PodDisruptionBudget>().get("c").await.ok()?;
    let counted = pdb.status.as_ref()?.observed_generation == pdb.metadata.generation;
    counted.then_some(())?;
    pdb.spec?.max_unavailable
}

/// The notes of the Events of `reason`.
async fn events_of(s: &Scenario, reason: &str) -> Vec<String> {
    s.api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// A client that makes each eviction once, as `kubectl drain` does (it
/// retries by itself, every 5 s): kube's client retries a 429 up to 15
/// times, minutes.
async fn drain_client(s: &Scenario) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&s.sim().kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn cordon(s: &Scenario, node: &str, unschedulable: bool) {
    Api::<Node>::all(s.client())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_eviction_while_a_member_streams_and_a_drain_meanwhile_is_warned_of() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().start().await;
    let c = cluster("c").version("4.1.8").rack("r", 3);
    s.create(c.clone()).await;
    s.until_ready("c", 3, secs(180)).await;
    s.until("one member down allowed", secs(30), || async {
        (max_unavailable(&s).await == Some(IntOrString::Int(1))).then_some(())
    })
    .await;

    // A bootstrap long enough to look at, then the scale-up.
    s.sim().ring().with(|r| {
        let mut timing = r.options().timing;
        timing.bootstrap_ms = 45_000;
        r.set_timing(timing);
    });
    s.patch_cluster("c", c.with_rack(json!({"members": 4})).racks_patch())
        .await;
    let joining = "c-dc-r-3";
    s.until(
        "the joining member running, no member down allowed",
        secs(60),
        || async {
            // Running: a Pending Pod (its init container still at work) is
            // evicted whatever the budget, as eviction.go's canIgnorePDB
            // says, and nothing streams yet.
            let pod = s.api::<Pod>().get(joining).await.ok()?;
            let running = pod.status?.phase.as_deref() == Some("Running");
            (running && max_unavailable(&s).await == Some(IntOrString::Int(0))).then_some(())
        },
    )
    .await;
    s.until("the hold announced", secs(20), || async {
        let held = events_of(&s, "DisruptionsHeld").await;
        if held
            .iter()
            .any(|n| n.starts_with("Member 3 of rack r joins the ring"))
        {
            Ok(())
        } else {
            Err(format!("{held:?}"))
        }
    })
    .await;

    // The joining member is the one member down: under the usual budget
    // the eviction API would let it go (kubesim's eviction does as
    // eviction.go does); held, it refuses, once the budget's status
    // counted the change.
    let drain: Api<Pod> = Api::namespaced(drain_client(&s).await, "db");
    let refused = s
        .until(
            "the joining member's eviction refused",
            secs(30),
            || async {
                let budget = s.api::<PodDisruptionBudget>().get("c").await.ok();
                let pod = s.api::<Pod>().get(joining).await.ok();
                match drain.evict(joining, &EvictParams::default()).await {
                    Err(kube::Error::Api(e)) if e.code == 429 => Ok(e.message),
                    other => Err(format!(
                        "{other:?} with the budget {:?} {:?} and the Pod {:?}",
                        budget.as_ref().map(|b| b.metadata.generation),
                        budget.and_then(|b| b.status),
                        pod.and_then(|p| p.status).map(|s| (s.phase, s.conditions))
                    )),
                }
            },
        )
        .await;
    assert!(refused.contains("disruption budget"), "{refused}");
    assert!(
        s.api::<Pod>()
            .get(joining)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none(),
        "the streaming member runs on"
    );

    // A drain starts on another member's Node while the member streams.
    let node = s
        .api::<Pod>()
        .get("c-dc-r-0")
        .await
        .unwrap()
        .spec
        .unwrap()
        .node_name
        .unwrap();
    cordon(&s, &node, true).await;
    let degraded = s
        .until("the drain warned of", secs(40), || async {
            let c = s.clusters().get("c").await.ok()?;
            match condition(&c, "Degraded") {
                Some((status, reason, message))
                    if status == "True" && reason == "NodeDrainedWhileDataMoves" =>
                {
                    Some(message)
                }
                _ => None,
            }
        })
        .await;
    // Every member on the cordoned Node is named (the joining one may
    // share it: 4 members on 3 Nodes).
    assert!(
        degraded.starts_with(&format!("Node(s) {node} (member 0 of rack r)"))
            && degraded.contains("cordoned while member 3 of rack r joins the ring"),
        "{degraded}"
    );
    s.until("its Warning Event", secs(20), || async {
        let notes = events_of(&s, "NodeDrainedWhileDataMoves").await;
        notes.iter().any(|n| n == &degraded).then_some(())
    })
    .await;
    assert_eq!(
        s.api::<Pod>()
            .get(joining)
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .unwrap_or_default()
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.as_str()),
        Some("False"),
        "all of this happened while the member streamed"
    );

    // Joined: one member down allowed again, and a cordon alone (nothing
    // moves) degrades nothing.
    s.until_ready("c", 4, secs(120)).await;
    s.until("one member down allowed again", secs(30), || async {
        (max_unavailable(&s).await == Some(IntOrString::Int(1))).then_some(())
    })
    .await;
    s.until("the Degraded condition gone", secs(30), || async {
        let c = s.clusters().get("c").await.ok()?;
        condition(&c, "Degraded")
            .is_some_and(|(status, _, _)| status == "False")
            .then_some(())
    })
    .await;
    s.until("the end of the hold announced", secs(20), || async {
        (!events_of(&s, "DisruptionsAllowed").await.is_empty()).then_some(())
    })
    .await;
    cordon(&s, &node, false).await;
    s.ring().assert_intact(4);
}
