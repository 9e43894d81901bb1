//! What act creates and applies: a member Service (a scale-up's first
//! step), the scale-up itself, the racks' StatefulSets, created as built
//! by the operator's field manager or server-side applied with force, and
//! a name held by someone else refused before anything is written.

use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{Reply, member, statefulset, to_json};

#[tokio::test]
async fn a_scale_up_tests_the_replicas_it_grows_in_the_same_write() {
    let run = act_on(Action::ScaleUp {
        rack: "b".into(),
        replicas: 4,
    })
    .expect(vec![
        Expect::json_patch(
            &statefulset_path("c-dc-b"),
            json!([
                {"op": "test", "path": "/spec/replicas", "value": 3},
                {"op": "replace", "path": "/spec/replicas", "value": 4},
            ]),
        )
        .reply(Reply::ok(&statefulset(&cluster(), "b", 4))),
        event("Normal", "RackScaledUp"),
    ])
    .await;
    assert_eq!(run.acted(), Acted::Done);
}

/// A cache behind the StatefulSet (replicas already past the count it
/// shows) must never set them back: the test fails (422), nothing else is
/// written, and the next reconcile decides on what the API server holds.
#[tokio::test]
async fn a_scale_up_from_a_stale_count_is_a_conflict_and_shrinks_nothing() {
    for reply in [Reply::unprocessable(), Reply::conflict()] {
        let run = act_on(Action::ScaleUp {
            rack: "b".into(),
            replicas: 4,
        })
        .expect(vec![
            Expect::json_patch(
                &statefulset_path("c-dc-b"),
                json!([
                    {"op": "test", "path": "/spec/replicas", "value": 3},
                    {"op": "replace", "path": "/spec/replicas", "value": 4},
                ]),
            )
            .reply(reply),
        ])
        .await;
        assert_eq!(
            run.acted(),
            Acted::Conflict(Conflict::Wait(WaitReason::StatefulSetNotObserved {
                rack: "b".into()
            }))
        );
    }
}

fn create_member_service() -> Action {
    Action::CreateMemberService {
        rack: "b".into(),
        member: 3,
        seed: false,
    }
}

/// Member 3 of rack b's Service as built, hashed: what a creation sends.
fn built_member_service() -> Value {
    let cluster = cluster();
    let valid = validate(&cluster).expect("valid");
    to_json(&resources::hashed(resources::member_service(
        &valid,
        rack_spec(&valid, "b"),
        3,
        false,
    )))
}

#[tokio::test]
async fn a_member_service_the_caches_lack_is_read_then_created_as_built_by_the_field_manager() {
    let built = built_member_service();
    assert_eq!(built["metadata"]["name"], json!("c-dc-b-3"));
    let run = act_on(create_member_service())
        .expect(vec![
            Expect::get(&service_path("c-dc-b-3")).reply(Reply::not_found()),
            Expect::create(SERVICES, built.clone()).reply(Reply::Object(built)),
        ])
        .await;
    // The scale-up it prepares may follow in the same reconcile.
    assert_eq!(run.acted(), Acted::ServiceCreated);
}

#[tokio::test]
async fn a_member_service_the_caches_hold_costs_no_request() {
    let run = act_on(create_member_service())
        .caches(|ctx| ctx.with_services([member(&cluster(), "b", 3).build()]))
        .expect(vec![])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_member_service_name_held_by_a_foreign_object_is_refused_and_nothing_is_written() {
    let theirs = member(&cluster(), "b", 3).foreign().build();
    let run = act_on(create_member_service())
        .expect(vec![
            Expect::get(&service_path("c-dc-b-3")).reply(Reply::ok(&theirs)),
        ])
        .await;
    assert_eq!(run.acted(), foreign("Service", "c-dc-b-3"));
}

#[tokio::test]
async fn a_member_service_name_taken_meanwhile_is_no_error() {
    let run = act_on(create_member_service())
        .expect(vec![
            Expect::get(&service_path("c-dc-b-3")).reply(Reply::not_found()),
            Expect::create(SERVICES, built_member_service()).reply(Reply::conflict()),
        ])
        .await;
    // The next reconcile reads who holds the name.
    assert_eq!(run.acted(), Acted::Done);
}

/// A rack's StatefulSet as built with `replicas`: what a creation sends.
fn built_statefulset(rack: &str, replicas: i32) -> Value {
    let cluster = cluster();
    let valid = validate(&cluster).expect("valid");
    to_json(&resources::statefulset_for_rack(
        &valid,
        rack_spec(&valid, rack),
        replicas,
        &BuildContext::default(),
    ))
}

fn create_statefulsets(racks: &[(&str, i32)]) -> Action {
    Action::CreateStatefulSets {
        racks: racks.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
    }
}

#[tokio::test]
async fn new_racks_get_their_statefulsets_created_as_built_each_with_its_event() {
    let (a, b) = (built_statefulset("a", 0), built_statefulset("b", 0));
    assert_eq!(a["spec"]["replicas"], json!(0));
    let run = act_on(create_statefulsets(&[("a", 0), ("b", 0)]))
        .expect(vec![
            Expect::get(&statefulset_path("c-dc-a")).reply(Reply::not_found()),
            Expect::create(STATEFULSETS, a.clone()).reply(Reply::Object(a)),
            event("Normal", "RackCreated"),
            Expect::get(&statefulset_path("c-dc-b")).reply(Reply::not_found()),
            Expect::create(STATEFULSETS, b.clone()).reply(Reply::Object(b)),
            event("Normal", "RackCreated"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_statefulset_deleted_with_its_members_left_is_recreated_with_their_count() {
    let b = built_statefulset("b", 3);
    assert_eq!(b["spec"]["replicas"], json!(3));
    let run = act_on(create_statefulsets(&[("b", 3)]))
        .expect(vec![
            Expect::get(&statefulset_path("c-dc-b")).reply(Reply::not_found()),
            Expect::create(STATEFULSETS, b.clone()).reply(Reply::Object(b)),
            event("Normal", "RackRecreated"),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_statefulset_the_caches_hold_is_not_created_again() {
    let run = act_on(create_statefulsets(&[("b", 0)]))
        .caches(|ctx| ctx.with_statefulsets([statefulset(&cluster(), "b", 3)]))
        .expect(vec![])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_statefulset_name_held_by_a_foreign_object_is_refused_and_nothing_is_written() {
    let mut theirs = statefulset(&cluster(), "b", 1);
    theirs.metadata.owner_references = None;
    // Rack a comes first and exists; rack b's name is someone else's.
    let run = act_on(create_statefulsets(&[("a", 0), ("b", 0)]))
        .caches(|ctx| ctx.with_statefulsets([statefulset(&cluster(), "a", 3), theirs]))
        .expect(vec![])
        .await;
    assert_eq!(run.acted(), foreign("StatefulSet", "c-dc-b"));
}

/// A rack's StatefulSet as applied: all but the replicas, hashed.
fn applied(rack: &str) -> Value {
    let cluster = cluster();
    let valid = validate(&cluster).expect("valid");
    to_json(&resources::applied_statefulset(
        &valid,
        rack_spec(&valid, rack),
        &BuildContext::default(),
    ))
}

fn update_statefulsets() -> Action {
    Action::UpdateStatefulSets {
        racks: vec!["b".into()],
    }
}

#[tokio::test]
async fn changed_statefulsets_are_server_side_applied_without_replicas_by_the_field_manager_with_force()
 {
    let body = applied("b");
    assert_eq!(
        body["spec"].get("replicas"),
        None,
        "replicas are not applied"
    );
    let run = act_on(update_statefulsets())
        .caches(|ctx| ctx.with_statefulsets([statefulset(&cluster(), "b", 3)]))
        .expect(vec![
            Expect::apply(&statefulset_path("c-dc-b"), body).reply(Reply::ok(&statefulset(
                &cluster(),
                "b",
                3,
            ))),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn a_statefulset_made_with_rolling_updates_is_switched_to_on_delete_before_the_apply() {
    let mut rolling: StatefulSet = statefulset(&cluster(), "b", 3);
    rolling.spec.as_mut().expect("a spec").update_strategy = serde_json::from_value(json!(
        {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    ))
    .expect("a strategy");
    let run = act_on(update_statefulsets())
        .caches(|ctx| ctx.with_statefulsets([rolling]))
        .expect(vec![
            Expect::merge_patch(
                &statefulset_path("c-dc-b"),
                json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}),
            )
            .reply(Reply::ok(&statefulset(&cluster(), "b", 3))),
            Expect::apply(&statefulset_path("c-dc-b"), applied("b"))
                .reply(Reply::ok(&statefulset(&cluster(), "b", 3))),
        ])
        .await;
    assert_eq!(run.acted(), Acted::Done);
}

#[tokio::test]
async fn an_apply_the_api_server_refuses_is_an_error_to_retry() {
    let run = act_on(update_statefulsets())
        .expect(vec![
            Expect::apply(&statefulset_path("c-dc-b"), applied("b"))
                .reply(Reply::Status(422, "Invalid")),
        ])
        .await;
    assert!(
        matches!(&run.acted, Err(Error::ApplyStatefulSet { name, .. }) if name == "c-dc-b"),
        "{:?}",
        run.acted
    );
}
