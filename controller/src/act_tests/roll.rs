//! A roll's writes: the record of a restart (guarded by the
//! resourceVersion the decision read), the eviction the
//! PodDisruptionBudget may refuse (a wait, not an error), and the record
//! removed once the member is back.

use serde_json::{Value, json};

use super::*;
use crate::fixtures::{Reply, member};

fn restart(generation: Option<i64>) -> Action {
    Action::RestartMember {
        rack: "b".into(),
        member: 2,
        resource_version: "131".into(),
        generation,
    }
}

fn evict() -> Action {
    Action::EvictMember {
        rack: "b".into(),
        member: 2,
    }
}

/// The record of a restart: when, and from which gossip generation,
/// guarded by the resourceVersion the decision read; nothing else.
fn restart_record(generation: Value) -> Expect {
    Expect::merge_patch(&service_path("c-dc-b-2"), Value::Null).body_where(move |body| {
        assert_keys(body, &["metadata"], "the patch");
        let metadata = &body["metadata"];
        assert_keys(metadata, &["resourceVersion", "annotations"], "metadata");
        assert_eq!(metadata["resourceVersion"], json!("131"), "the guard");
        let annotations = &metadata["annotations"];
        assert_keys(
            annotations,
            &[contract::RESTARTING, contract::RESTARTED_FROM_GENERATION],
            "annotations",
        );
        assert_now(&annotations[contract::RESTARTING], "restarting");
        assert_eq!(
            annotations[contract::RESTARTED_FROM_GENERATION],
            generation,
            "the generation"
        );
    })
}

fn eviction() -> Expect {
    Expect::evict("db", "c-dc-b-2")
}

fn recorded() -> Reply {
    Reply::ok(&member(&cluster(), "b", 2).build())
}

fn eviction_refused() -> Acted {
    wait(WaitReason::EvictionRefused {
        rack: "b".into(),
        member: 2,
    })
}

#[tokio::test]
async fn a_restart_records_itself_guarded_by_the_resource_version_then_evicts_the_pod() {
    let run = act_on(restart(Some(1_764_000_000)))
        .expect(vec![
            restart_record(json!("1764000000")).reply(recorded()),
            eviction(),
            event("Normal", "MemberRestarting"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_restart_without_a_known_generation_removes_an_old_one() {
    let run = act_on(restart(None))
        .expect(vec![
            restart_record(Value::Null).reply(recorded()),
            eviction(),
            event("Normal", "MemberRestarting"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_restart_on_a_service_changed_meanwhile_is_a_conflict_and_evicts_nothing() {
    let run = act_on(restart(Some(1)))
        .expect(vec![restart_record(json!("1")).reply(Reply::conflict())])
        .await;
    assert_eq!(
        run.acted(),
        wait(WaitReason::MemberRestarting {
            rack: "b".into(),
            member: 2
        })
    );
}

#[tokio::test]
async fn an_eviction_the_disruption_budget_refuses_is_a_conflict_not_an_error() {
    // After the record of the restart...
    let run = act_on(restart(Some(1)))
        .expect(vec![
            restart_record(json!("1")).reply(recorded()),
            eviction().reply(Reply::too_many_requests()),
        ])
        .await;
    assert_eq!(run.acted(), eviction_refused());
    // ...and when the member is evicted again.
    let run = act_on(evict())
        .expect(vec![eviction().reply(Reply::too_many_requests())])
        .await;
    assert_eq!(run.acted(), eviction_refused());
}

#[tokio::test]
async fn a_member_evicted_again_gets_only_the_eviction() {
    let run = act_on(evict())
        .expect(vec![eviction(), event("Normal", "MemberRestarting")])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn an_eviction_of_a_pod_gone_already_is_no_error() {
    let run = act_on(evict())
        .expect(vec![
            eviction().reply(Reply::not_found()),
            event("Normal", "MemberRestarting"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn an_eviction_the_api_server_fails_is_an_error_to_retry() {
    let run = act_on(evict())
        .expect(vec![eviction().reply(Reply::Status(500, "InternalError"))])
        .await;
    assert!(
        matches!(&run.acted, Err(Error::EvictPod { name, .. }) if name == "c-dc-b-2"),
        "{:?}",
        run.acted
    );
}

#[tokio::test]
async fn a_restart_finishes_by_removing_its_record() {
    let run = act_on(Action::FinishRestart {
        rack: "b".into(),
        member: 2,
    })
    .expect(vec![
        Expect::merge_patch(
            &service_path("c-dc-b-2"),
            json!({"metadata": {"annotations": {
                contract::RESTARTING: null,
                contract::RESTARTED_FROM_GENERATION: null,
            }}}),
        )
        .reply(recorded()),
        event("Normal", "MemberRestarted"),
    ])
    .await;
    assert_eq!(run.acted(), Acted::Done);
}
