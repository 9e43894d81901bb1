//! What each destructive write reads afresh before it is made, and what a
//! fresh read that disagrees with the caches stops: the exact reads, in
//! order, against a mocked API server, and that no write follows.

use super::*;
use crate::decide::Action;
use crate::fixtures::{
    self, ApiServer, Expect, Reply, TestCluster, claim, confirmed_decommission, local_volume,
    member, node, statefulset,
};
use kube::api::Preconditions;

/// A [`Rechecked`] as the fresh reads would have made it, for `act`'s
/// tests: `service`, the preconditions of a DeleteLeftovers' Service.
pub(crate) fn agreed(action: &Action, service: Option<Preconditions>) -> Rechecked<'_> {
    Rechecked { action, service }
}

const SERVICES: &str = "/api/v1/namespaces/db/services";
const SELECTOR: &str = "cassandra.rook.io/cluster=c";
const STATEFULSET_B: &str = "/apis/apps/v1/namespaces/db/statefulsets/c-dc-b";

fn cluster() -> Cluster {
    Cluster::test().rack("b", 3).claim_template("data").build()
}

fn describe(recheck: &Recheck<'_>) -> String {
    match recheck {
        Recheck::Agrees(rechecked) => format!(
            "agrees with {:?} (service {:?})",
            rechecked.action(),
            rechecked.service_preconditions()
        ),
        Recheck::Wait(reason) => format!("waits: {reason:?}"),
        Recheck::Defer => "defers".into(),
    }
}

/// Rechecks `action` against the script; the verdict, once every request
/// of the script came and no other.
async fn rechecked<'a>(
    cluster: &Cluster,
    action: &'a Action,
    script: Vec<Expect>,
) -> Result<Recheck<'a>, Error> {
    let (ctx, api): (Context, ApiServer) = fixtures::context();
    let api = api.expect(script);
    let verdict = recheck(cluster, "db", action, &ctx).await;
    api.done(ctx).await;
    verdict
}

fn scale_down() -> Action {
    Action::ScaleDown {
        rack: "b".into(),
        replicas: 2,
    }
}

#[tokio::test]
async fn a_scale_down_waits_when_the_fresh_services_show_no_confirmation() {
    let cluster = cluster();
    let action = scale_down();
    // The caches showed a confirmed decommission; the API server holds
    // only the request (the confirmation was taken back meanwhile).
    let services = vec![
        member(&cluster, "b", 0).build(),
        member(&cluster, "b", 1).build(),
        member(&cluster, "b", 2).asked().build(),
    ];
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::list(SERVICES, SELECTOR).reply(Reply::list(&services))],
    )
    .await
    .unwrap();
    // No write follows (the script ends with the read).
    match verdict {
        Recheck::Wait(reason) => assert_eq!(
            reason,
            WaitReason::MemberLeaving {
                rack: "b".into(),
                member: 2
            }
        ),
        other => panic!("expected a wait, got: {}", describe(&other)),
    }
}

#[tokio::test]
async fn a_scale_down_waits_when_the_ring_does_not_yet_agree() {
    let cluster = cluster();
    let action = scale_down();
    // Asked and answered, but no other member recorded a ring since.
    let services = vec![
        member(&cluster, "b", 0).build(),
        member(&cluster, "b", 1).build(),
        member(&cluster, "b", 2).confirmed().build(),
    ];
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::list(SERVICES, SELECTOR).reply(Reply::list(&services))],
    )
    .await
    .unwrap();
    assert!(
        matches!(verdict, Recheck::Wait(WaitReason::MemberLeaving { .. })),
        "{}",
        describe(&verdict)
    );
}

#[tokio::test]
async fn a_scale_down_agrees_when_request_answer_and_ring_are_read_afresh() {
    let cluster = cluster();
    let action = scale_down();
    let services = confirmed_decommission(&cluster, "b", 3, 2);
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::list(SERVICES, SELECTOR).reply(Reply::list(&services))],
    )
    .await
    .unwrap();
    match verdict {
        Recheck::Agrees(rechecked) => {
            assert_eq!(rechecked.action(), &action);
            assert_eq!(rechecked.service_preconditions(), None);
        }
        other => panic!("expected agreement, got: {}", describe(&other)),
    }
}

fn leftovers() -> Action {
    Action::DeleteLeftovers {
        rack: "b".into(),
        member: 2,
        claims: vec!["data-c-dc-b-2".into()],
    }
}

#[tokio::test]
async fn leftovers_are_deferred_while_the_statefulset_still_counts_the_member() {
    let cluster = cluster();
    let action = leftovers();
    // The caches showed replicas 2; the API server still has 3.
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::get(STATEFULSET_B).reply(Reply::ok(&statefulset(&cluster, "b", 3)))],
    )
    .await
    .unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

#[tokio::test]
async fn leftovers_are_deferred_when_the_statefulset_is_gone() {
    let cluster = cluster();
    let action = leftovers();
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::get(STATEFULSET_B).reply(Reply::not_found())],
    )
    .await
    .unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

#[tokio::test]
async fn leftovers_are_deferred_when_the_fresh_services_show_no_confirmation() {
    let cluster = cluster();
    let action = leftovers();
    let services = vec![
        member(&cluster, "b", 0).build(),
        member(&cluster, "b", 1).build(),
        member(&cluster, "b", 2).asked().build(),
    ];
    let verdict = rechecked(
        &cluster,
        &action,
        vec![
            Expect::get(STATEFULSET_B).reply(Reply::ok(&statefulset(&cluster, "b", 2))),
            Expect::list(SERVICES, SELECTOR).reply(Reply::list(&services)),
        ],
    )
    .await
    .unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

/// The deletion carries the uid and resourceVersion of the very Service
/// the fresh list judged: one read, no window between judging and keeping.
#[tokio::test]
async fn leftovers_agree_with_the_uid_and_resource_version_of_the_service_read_afresh() {
    let cluster = cluster();
    let action = leftovers();
    let mut services = confirmed_decommission(&cluster, "b", 3, 2);
    services[2].metadata.resource_version = Some("207".into());
    let verdict = rechecked(
        &cluster,
        &action,
        vec![
            Expect::get(STATEFULSET_B).reply(Reply::ok(&statefulset(&cluster, "b", 2))),
            Expect::list(SERVICES, SELECTOR).reply(Reply::list(&services)),
        ],
    )
    .await
    .unwrap();
    match verdict {
        Recheck::Agrees(rechecked) => assert_eq!(
            rechecked.service_preconditions(),
            Some(&Preconditions {
                uid: Some("uid-c-dc-b-2".into()),
                resource_version: Some("207".into()),
            })
        ),
        other => panic!("expected agreement, got: {}", describe(&other)),
    }
}

fn lost_disk() -> Action {
    Action::DeleteLostDisk {
        rack: "b".into(),
        member: 1,
        claims: vec!["data-c-dc-b-1".into()],
    }
}

/// The reads of a lost disk: the claim, its volume, the volume's Node.
fn disk_reads(cluster: &Cluster, node_reply: Reply) -> Vec<Expect> {
    vec![
        Expect::get("/api/v1/namespaces/db/persistentvolumeclaims/data-c-dc-b-1")
            .reply(Reply::ok(&claim(cluster, "data", "b", 1, "pv-1"))),
        Expect::get("/api/v1/persistentvolumes/pv-1")
            .reply(Reply::ok(&local_volume("pv-1", "node-1"))),
        Expect::get("/api/v1/nodes/node-1").reply(node_reply),
    ]
}

#[tokio::test]
async fn a_lost_disk_is_deferred_when_its_node_exists_again() {
    let cluster = cluster();
    let action = lost_disk();
    let verdict = rechecked(
        &cluster,
        &action,
        disk_reads(&cluster, Reply::ok(&node("node-1"))),
    )
    .await
    .unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

/// No Node by that name: a Node whose hostname label says it is looked
/// for too, the name a volume's affinity gives being the label's.
fn hostname_read(nodes: &[Node]) -> Expect {
    Expect::list("/api/v1/nodes", "kubernetes.io/hostname=node-1")
        .query(&[
            ("labelSelector", "kubernetes.io/hostname=node-1"),
            ("limit", "1"),
        ])
        .reply(Reply::list(nodes))
}

#[tokio::test]
async fn a_lost_disk_is_deferred_when_a_node_of_another_name_has_its_hostname() {
    let cluster = cluster();
    let action = lost_disk();
    let mut elsewhere = node("gke-pool-1-abcd");
    elsewhere
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("kubernetes.io/hostname".into(), "node-1".into());
    let mut reads = disk_reads(&cluster, Reply::not_found());
    reads.push(hostname_read(&[elsewhere]));
    let verdict = rechecked(&cluster, &action, reads).await.unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

#[tokio::test]
async fn a_lost_disk_agrees_when_no_node_of_its_volume_exists() {
    let cluster = cluster();
    let action = lost_disk();
    let mut reads = disk_reads(&cluster, Reply::not_found());
    reads.push(hostname_read(&[]));
    let verdict = rechecked(&cluster, &action, reads).await.unwrap();
    assert!(
        matches!(&verdict, Recheck::Agrees(r) if r.action() == &action),
        "{}",
        describe(&verdict)
    );
}

#[tokio::test]
async fn a_lost_disk_whose_claim_is_gone_is_deferred() {
    let cluster = cluster();
    let action = lost_disk();
    let verdict = rechecked(
        &cluster,
        &action,
        vec![Expect::get(
            "/api/v1/namespaces/db/persistentvolumeclaims/data-c-dc-b-1",
        )],
    )
    .await
    .unwrap();
    assert!(matches!(verdict, Recheck::Defer), "{}", describe(&verdict));
}

#[tokio::test]
async fn a_write_that_destroys_nothing_is_not_read_again() {
    let cluster = cluster();
    let (rack, member) = ("b".to_string(), 1);
    let actions = [
        Action::CreateStatefulSets {
            racks: vec![(rack.clone(), 0)],
        },
        Action::UpdateStatefulSets {
            racks: vec![rack.clone()],
        },
        Action::RestartMember {
            rack: rack.clone(),
            member,
            resource_version: "1".into(),
            generation: None,
        },
        Action::EvictMember {
            rack: rack.clone(),
            member,
        },
        Action::FinishRestart {
            rack: rack.clone(),
            member,
        },
        Action::CreateMemberService {
            rack: rack.clone(),
            member,
            seed: false,
        },
        Action::ScaleUp {
            rack: rack.clone(),
            replicas: 4,
        },
        Action::RequestDecommission {
            rack: rack.clone(),
            member,
            resource_version: "1".into(),
            pod_uid: None,
            host_id: None,
        },
        Action::ClearStaleDecommission {
            rack: rack.clone(),
            member,
            missing: "a request".into(),
            restore_request: true,
            resource_version: "1".into(),
        },
        Action::WithdrawDecommission {
            rack: rack.clone(),
            member,
            resource_version: "1".into(),
        },
        Action::StartReplace {
            rack: rack.clone(),
            member,
            address: "10.96.0.1".into(),
            resource_version: "1".into(),
        },
        Action::FinishReplace {
            rack: rack.clone(),
            member,
        },
        Action::Converged,
    ];
    for action in &actions {
        let verdict = rechecked(&cluster, action, vec![]).await.unwrap();
        assert!(
            matches!(&verdict, Recheck::Agrees(r) if r.action() == action && r.service_preconditions().is_none()),
            "{action:?}: {}",
            describe(&verdict)
        );
    }
}

#[tokio::test]
async fn a_failed_fresh_read_is_an_error_and_nothing_is_written() {
    let cluster = cluster();
    let action = scale_down();
    let result = rechecked(
        &cluster,
        &action,
        vec![Expect::list(SERVICES, SELECTOR).reply(Reply::Status(500, "InternalError"))],
    )
    .await;
    assert!(
        matches!(
            result,
            Err(Error::GetObject {
                kind: "Service",
                ..
            })
        ),
        "{:?}",
        result.map(|r| describe(&r))
    );
}
