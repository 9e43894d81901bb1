//! A replacement's writes: the `replace` record (guarded by the
//! resourceVersion the decision read), the lost disk's claims then its Pod,
//! and the record removed once the member is back.

use serde_json::json;

use super::*;
use crate::fixtures::{Reply, member};

fn start_replace() -> Action {
    Action::StartReplace {
        rack: "b".into(),
        member: 1,
        address: "10.96.1.1".into(),
        resource_version: "121".into(),
    }
}

fn replace_record() -> Expect {
    Expect::merge_patch(
        &service_path("c-dc-b-1"),
        json!({"metadata": {"resourceVersion": "121",
                            "labels": {contract::REPLACE: "10.96.1.1"}}}),
    )
}

#[tokio::test]
async fn a_replace_starts_with_the_address_recorded_guarded_by_the_resource_version() {
    let run = act_on(start_replace())
        .expect(vec![
            replace_record().reply(Reply::ok(&member(&cluster(), "b", 1).build())),
            event("Normal", "MemberReplacing"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_replace_record_on_a_service_changed_meanwhile_is_a_conflict() {
    let run = act_on(start_replace())
        .expect(vec![replace_record().reply(Reply::conflict())])
        .await;
    assert_eq!(
        run.acted(),
        wait(WaitReason::MemberReplacing {
            rack: "b".into(),
            member: 1
        })
    );
}

#[tokio::test]
async fn a_replace_finishes_by_removing_its_record_and_ends_the_operation() {
    let run = act_on(Action::FinishReplace {
        rack: "b".into(),
        member: 1,
    })
    .expect(vec![
        Expect::merge_patch(
            &service_path("c-dc-b-1"),
            json!({"metadata": {"labels": {contract::REPLACE: null}}}),
        )
        .reply(Reply::ok(&member(&cluster(), "b", 1).build())),
        event("Normal", "MemberReplaced"),
    ])
    .await;
    assert_eq!(
        run.ended,
        Ended {
            decommissions: 0,
            replaces: 1
        }
    );
    assert_eq!(run.acted(), Acted::Done);
}

fn lost_disk(claims: &[&str]) -> Action {
    Action::DeleteLostDisk {
        rack: "b".into(),
        member: 1,
        claims: claims.iter().map(|c| c.to_string()).collect(),
    }
}

#[tokio::test]
async fn a_lost_disk_deletes_the_claims_then_the_pod_and_a_claim_gone_already_is_fine() {
    let run = act_on(lost_disk(&["data-c-dc-b-1", "logs-c-dc-b-1"]))
        .expect(vec![
            Expect::delete(&format!("{CLAIMS}/data-c-dc-b-1"))
                .body(json!({}))
                .reply(Reply::success()),
            Expect::delete(&format!("{CLAIMS}/logs-c-dc-b-1")).reply(Reply::not_found()),
            Expect::delete(&format!("{PODS}/c-dc-b-1"))
                .body(json!({}))
                .reply(Reply::success()),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_lost_disk_whose_pod_is_gone_already_is_no_error() {
    let run = act_on(lost_disk(&["data-c-dc-b-1"]))
        .expect(vec![
            Expect::delete(&format!("{CLAIMS}/data-c-dc-b-1")).reply(Reply::success()),
            Expect::delete(&format!("{PODS}/c-dc-b-1")).reply(Reply::not_found()),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_lost_disk_whose_claim_cannot_be_deleted_leaves_the_pod_and_is_an_error() {
    let run = act_on(lost_disk(&["data-c-dc-b-1"]))
        .expect(vec![
            Expect::delete(&format!("{CLAIMS}/data-c-dc-b-1"))
                .reply(Reply::Status(403, "Forbidden")),
        ])
        .await;
    assert!(
        matches!(
            &run.acted,
            Err(Error::DeleteObject {
                kind: "PersistentVolumeClaim",
                ..
            })
        ),
        "{:?}",
        run.acted
    );
}
