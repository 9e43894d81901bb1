//! A decommission's writes: the request, its withdrawal, a stale `true`
//! taken back (records of intent on the member Service, each guarded by the
//! resourceVersion the decision read), the scale-down (a JSON patch that
//! tests the replicas it shrinks) and the leftovers (claims first, the
//! Service last, only as the recheck read it).

use serde_json::{Value, json};

use super::*;
use crate::fixtures::{Reply, member, statefulset};

const DECOMMISSIONED: &str = contract::DECOMMISSIONED;

fn request_decommission(pod_uid: Option<&str>) -> Action {
    Action::RequestDecommission {
        rack: "b".into(),
        member: 2,
        resource_version: "102".into(),
        pod_uid: pod_uid.map(str::to_string),
        host_id: Some("h2".into()),
    }
}

/// The request's merge patch: `false`, the request record (named after
/// `named`, the Pod or else the member Service), no earlier answer, and
/// the resourceVersion the decision read; nothing else.
fn request_patch(named: &'static str, pod_uid: Option<&'static str>) -> Expect {
    Expect::merge_patch(&service_path("c-dc-b-2"), Value::Null).body_where(move |body| {
        assert_keys(body, &["metadata"], "the patch");
        let metadata = &body["metadata"];
        assert_keys(
            metadata,
            &["resourceVersion", "labels", "annotations"],
            "metadata",
        );
        assert_eq!(metadata["resourceVersion"], json!("102"), "the guard");
        assert_eq!(metadata["labels"], json!({DECOMMISSIONED: "false"}));
        let annotations = &metadata["annotations"];
        assert_keys(
            annotations,
            &[
                contract::DECOMMISSION_REQUEST,
                contract::DECOMMISSION_CONFIRMATION,
            ],
            "annotations",
        );
        assert_eq!(
            annotations[contract::DECOMMISSION_CONFIRMATION],
            Value::Null,
            "an earlier answer goes in the same write"
        );
        let request = contract::DecommissionRequest::from_annotation(
            annotations[contract::DECOMMISSION_REQUEST]
                .as_str()
                .expect("the request record"),
        )
        .expect("a readable request");
        assert_eq!(request.pod_uid.as_deref(), pod_uid);
        assert_eq!(request.host_id.as_deref(), Some("h2"));
        assert_eq!(request.id, format!("{named}/{}", request.requested_at));
        assert_now(&json!(request.requested_at), "requestedAt");
    })
}

#[tokio::test]
async fn a_decommission_request_labels_false_records_the_request_and_clears_an_answer_guarded_by_the_resource_version()
 {
    let asked = member(&cluster(), "b", 2).asked().build();
    let run = act_on(request_decommission(Some("pod-uid-2")))
        .expect(vec![
            request_patch("pod-uid-2", Some("pod-uid-2")).reply(Reply::ok(&asked)),
            event("Normal", "MemberDecommissioning"),
        ])
        .await;
    assert_eq!(run.ended, Ended::default(), "nothing ended yet");
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_decommission_request_without_a_pod_is_named_after_the_member_service() {
    let asked = member(&cluster(), "b", 2).asked().build();
    let run = act_on(request_decommission(None))
        .expect(vec![
            request_patch("c-dc-b-2", None).reply(Reply::ok(&asked)),
            event("Normal", "MemberDecommissioning"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_decommission_request_on_a_service_changed_meanwhile_is_a_conflict_not_an_error() {
    // No Event: nothing was asked.
    let run = act_on(request_decommission(Some("pod-uid-2")))
        .expect(vec![
            request_patch("pod-uid-2", Some("pod-uid-2")).reply(Reply::conflict()),
        ])
        .await;
    assert_eq!(run.acted(), leaving("b", 2));
}

#[tokio::test]
async fn a_record_of_intent_the_api_server_fails_is_an_error_to_retry() {
    let run = act_on(request_decommission(Some("pod-uid-2")))
        .expect(vec![
            request_patch("pod-uid-2", Some("pod-uid-2"))
                .reply(Reply::Status(500, "InternalError")),
        ])
        .await;
    assert!(
        matches!(&run.acted, Err(Error::PatchMemberService { name, .. }) if name == "c-dc-b-2"),
        "{:?}",
        run.acted
    );
}

fn withdraw() -> Action {
    Action::WithdrawDecommission {
        rack: "b".into(),
        member: 2,
        resource_version: "105".into(),
    }
}

fn withdraw_patch() -> Expect {
    Expect::merge_patch(
        &service_path("c-dc-b-2"),
        json!({"metadata": {"resourceVersion": "105", "labels": {DECOMMISSIONED: null}}}),
    )
}

#[tokio::test]
async fn a_withdrawal_removes_the_label_guarded_by_the_resource_version() {
    let run = act_on(withdraw())
        .expect(vec![
            withdraw_patch().reply(Reply::ok(&member(&cluster(), "b", 2).build())),
            event("Normal", "DecommissionCancelled"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_withdrawal_the_sidecar_claimed_meanwhile_is_a_conflict() {
    let run = act_on(withdraw())
        .expect(vec![withdraw_patch().reply(Reply::conflict())])
        .await;
    assert_eq!(run.acted(), leaving("b", 2));
}

fn clear_stale(restore_request: bool) -> Action {
    Action::ClearStaleDecommission {
        rack: "b".into(),
        member: 1,
        missing: "no decommission request of the controller".into(),
        restore_request,
        resource_version: "111".into(),
    }
}

fn clear_stale_patch(label: Value) -> Expect {
    Expect::merge_patch(
        &service_path("c-dc-b-1"),
        json!({"metadata": {
            "resourceVersion": "111",
            "labels": {DECOMMISSIONED: label},
            "annotations": {contract::DECOMMISSION_CONFIRMATION: null},
        }}),
    )
}

#[tokio::test]
async fn a_stale_true_is_taken_back_by_removing_the_label_and_the_answer_guarded_by_the_resource_version()
 {
    let run = act_on(clear_stale(false))
        .expect(vec![
            clear_stale_patch(Value::Null).reply(Reply::ok(&member(&cluster(), "b", 1).build())),
            event("Warning", "StaleDecommissionRecord"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_stale_true_on_a_member_asked_to_leave_returns_to_the_standing_request() {
    let asked = member(&cluster(), "b", 1).asked().build();
    let run = act_on(clear_stale(true))
        .expect(vec![
            clear_stale_patch(json!("false")).reply(Reply::ok(&asked)),
            event("Warning", "StaleDecommissionRecord"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_stale_true_rewritten_meanwhile_is_a_conflict() {
    for restore_request in [false, true] {
        let label = if restore_request {
            json!("false")
        } else {
            Value::Null
        };
        let run = act_on(clear_stale(restore_request))
            .expect(vec![clear_stale_patch(label).reply(Reply::conflict())])
            .await;
        assert_eq!(run.acted(), leaving("b", 1), "restore: {restore_request}");
    }
}

fn scale_down() -> Action {
    Action::ScaleDown {
        rack: "b".into(),
        replicas: 2,
    }
}

/// A JSON patch that tests the replicas the decision read (member + 1)
/// in the same write that shrinks them past the member.
fn scale_down_patch() -> Expect {
    Expect::json_patch(
        &statefulset_path("c-dc-b"),
        json!([
            {"op": "test", "path": "/spec/replicas", "value": 3},
            {"op": "replace", "path": "/spec/replicas", "value": 2},
        ]),
    )
}

#[tokio::test]
async fn a_scale_down_tests_the_replicas_it_shrinks_in_the_same_write_and_ends_the_decommission() {
    let run = act_on(scale_down())
        .expect(vec![
            scale_down_patch().reply(Reply::ok(&statefulset(&cluster(), "b", 2))),
            event("Normal", "RackScaledDown"),
        ])
        .await;
    assert_eq!(
        run.ended,
        Ended {
            decommissions: 1,
            replaces: 0
        }
    );
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_scale_down_whose_test_fails_or_whose_object_changed_is_a_conflict_and_ends_nothing() {
    // 422: the replicas are not what the test says; 409: changed meanwhile.
    for refusal in [Reply::unprocessable(), Reply::conflict()] {
        let run = act_on(scale_down())
            .expect(vec![scale_down_patch().reply(refusal.clone())])
            .await;
        assert_eq!(run.ended, Ended::default(), "{refusal:?}");
        assert_eq!(run.acted(), leaving("b", 2), "{refusal:?}");
    }
}

#[tokio::test]
async fn a_scale_down_of_a_statefulset_gone_is_an_error_to_retry() {
    let run = act_on(scale_down())
        .expect(vec![scale_down_patch().reply(Reply::not_found())])
        .await;
    assert_eq!(run.ended, Ended::default());
    assert!(
        matches!(
            &run.acted,
            Err(Error::ScaleStatefulSet { name, replicas: 2, .. }) if name == "c-dc-b"
        ),
        "{:?}",
        run.acted
    );
}

fn leftovers() -> Action {
    Action::DeleteLeftovers {
        rack: "b".into(),
        member: 2,
        claims: vec!["data-c-dc-b-2".into()],
    }
}

/// The member Service as the recheck read it.
fn read_afresh() -> Preconditions {
    Preconditions {
        uid: Some("uid-c-dc-b-2".into()),
        resource_version: Some("207".into()),
    }
}

fn delete_claim() -> Expect {
    Expect::delete(&format!("{CLAIMS}/data-c-dc-b-2")).body(json!({}))
}

/// The Service's deletion, only if it is still the one the recheck read.
fn delete_service_read_afresh() -> Expect {
    Expect::delete(&service_path("c-dc-b-2")).body_where(|body| {
        assert_eq!(
            body["preconditions"],
            json!({"uid": "uid-c-dc-b-2", "resourceVersion": "207"}),
            "the uid and resourceVersion read afresh: {body}"
        )
    })
}

#[tokio::test]
async fn leftovers_are_deleted_claims_first_and_the_service_last_only_as_read_afresh() {
    let run = act_on(leftovers())
        .service_read_afresh(read_afresh())
        .expect(vec![
            delete_claim().reply(Reply::success()),
            delete_service_read_afresh().reply(Reply::success()),
            event("Normal", "MemberRemoved"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn leftovers_gone_already_are_no_error() {
    let run = act_on(leftovers())
        .service_read_afresh(read_afresh())
        .expect(vec![
            delete_claim().reply(Reply::not_found()),
            delete_service_read_afresh().reply(Reply::not_found()),
            event("Normal", "MemberRemoved"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn leftovers_without_a_service_read_afresh_delete_nothing() {
    let run = act_on(leftovers()).expect(vec![]).await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_claim_that_cannot_be_deleted_leaves_the_service_and_is_an_error() {
    let run = act_on(leftovers())
        .service_read_afresh(read_afresh())
        .expect(vec![delete_claim().reply(Reply::Status(403, "Forbidden"))])
        .await;
    assert!(
        matches!(
            &run.acted,
            Err(Error::DeleteObject { kind: "PersistentVolumeClaim", name, .. })
                if name == "data-c-dc-b-2"
        ),
        "{:?}",
        run.acted
    );
}

/// The Service changed since the recheck read it (its preconditions
/// failed: 409): a guarded write the API server refused, which act
/// documents as a conflict the next reconcile decides again, not an error.
#[tokio::test]
async fn leftovers_whose_service_changed_since_the_recheck_are_a_conflict() {
    let run = act_on(leftovers())
        .service_read_afresh(read_afresh())
        .expect(vec![
            delete_claim().reply(Reply::success()),
            delete_service_read_afresh().reply(Reply::conflict()),
        ])
        .await;
    assert_eq!(run.acted(), leaving("b", 2));
}

/// A decommission waits for a ring no one recorded since its request: the
/// witness's Service gets the time of the ask, unguarded (the sidecar only
/// reads it), and nothing else is written.
#[tokio::test]
async fn a_witness_is_asked_to_record_its_ring_with_the_time_of_the_ask() {
    let asked_from = k8s_openapi::jiff::Timestamp::now();
    let run = act_on(Action::RequestRingRecord {
        rack: "b".into(),
        member: 2,
        witness_rack: "b".into(),
        witness: 0,
    })
    .expect(vec![
        Expect::merge_patch(&service_path("c-dc-b-0"), json!({}))
            .body_where(move |body| {
                let keys: Vec<&String> = body["metadata"]["annotations"]
                    .as_object()
                    .expect("annotations")
                    .keys()
                    .collect();
                assert_eq!(keys, [contract::RING_RECORD_REQUESTED]);
                let at = body["metadata"]["annotations"][contract::RING_RECORD_REQUESTED]
                    .as_str()
                    .and_then(contract::parse_time)
                    .expect("an RFC 3339 time");
                assert!(at >= asked_from, "{at} is before the ask");
                assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
            })
            .reply(Reply::ok(&member(&cluster(), "b", 0).build())),
    ])
    .await;
    assert_eq!(run.acted(), Acted::Done);
}

fn record_removal() -> Action {
    Action::RecordRemoval {
        rack: "b".into(),
        member: 2,
        resource_version: "102".into(),
        request: "uid-2/2026-11-27T10:00:00Z".into(),
        host_id: Some("h2".into()),
        claims: vec!["data-c-dc-b-2".into()],
    }
}

/// A member lost while leaving and removed from the ring: its removal is
/// recorded as the confirmation of the controller's own request, marked
/// `removed`, guarded by the resourceVersion read; nothing is deleted.
#[tokio::test]
async fn a_removal_is_recorded_as_the_answer_to_the_request_guarded_by_the_resource_version() {
    let run = act_on(record_removal())
        .expect(vec![
            Expect::merge_patch(&service_path("c-dc-b-2"), json!({}))
                .body_where(|body| {
                    assert_eq!(body["metadata"]["resourceVersion"], "102");
                    assert_eq!(
                        body["metadata"]["labels"],
                        json!({contract::DECOMMISSIONED: contract::DECOMMISSION_DONE})
                    );
                    let record = contract::DecommissionConfirmation::from_annotation(
                        body["metadata"]["annotations"][contract::DECOMMISSION_CONFIRMATION]
                            .as_str()
                            .expect("a confirmation"),
                    )
                    .expect("a readable confirmation");
                    assert_eq!(record.request, "uid-2/2026-11-27T10:00:00Z");
                    assert_eq!(record.host_id.as_deref(), Some("h2"));
                    assert_eq!(record.removed, Some(true));
                })
                .reply(Reply::ok(&member(&cluster(), "b", 2).build())),
            event("Normal", "MemberRemovedFromRing"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_removal_on_a_service_changed_meanwhile_is_a_conflict() {
    let run = act_on(record_removal())
        .expect(vec![
            Expect::merge_patch(&service_path("c-dc-b-2"), json!({}))
                .body_where(|_| {})
                .reply(Reply::conflict()),
        ])
        .await;
    assert_eq!(run.acted(), leaving("b", 2));
}
