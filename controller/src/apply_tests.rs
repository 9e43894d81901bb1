//! What observe reads and the apply step writes of the supporting objects,
//! against a mocked API server: nothing for an object as built (the same
//! applied hash), a server-side apply by the operator's one field manager,
//! with force, for one that differs, a read then a creation for one
//! missing; a name held by someone else is found by observe's read, and
//! then nothing at all is written.

use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::Value;

use super::*;
use crate::fixtures::{self, ApiServer, Expect, Reply, TestCluster, member, to_json};
use crate::observe::observe_supporting;
use crate::observed::{InTheWay, Observed};
use crate::validated::validate;

const CLIENT_SERVICE: &str = "/api/v1/namespaces/db/services/c-client";
const PDB: &str = "/apis/policy/v1/namespaces/db/poddisruptionbudgets/c";

fn cluster() -> Cluster {
    Cluster::test().rack("b", 3).build()
}

/// The supporting objects as built, hashed: what the caches hold of a
/// cluster whose objects are up to date.
struct Built {
    client_service: Service,
    service_account: ServiceAccount,
    role: Role,
    role_binding: RoleBinding,
    pdb: PodDisruptionBudget,
}

fn built(cluster: &Cluster) -> Built {
    let valid = validate(cluster).expect("a valid test cluster");
    Built {
        client_service: resources::hashed(resources::client_service(&valid)),
        service_account: resources::hashed(resources::member_service_account(&valid)),
        role: resources::hashed(resources::member_role(&valid)),
        role_binding: resources::hashed(resources::member_role_binding(&valid)),
        pdb: resources::hashed(resources::pod_disruption_budget(&valid, false)),
    }
}

/// The member Services of rack b as the API server holds them, with the
/// records of intent the sidecars and decisions wrote.
fn members(cluster: &Cluster) -> Vec<Service> {
    vec![
        member(cluster, "b", 0).resource_version("300").build(),
        member(cluster, "b", 1)
            .ring(fixtures::LEFT, &[fixtures::address(cluster, "b", 0)])
            .build(),
        member(cluster, "b", 2).asked().build(),
    ]
}

/// A Context whose caches hold `built` and `members`.
fn cached(built: Built, members: Vec<Service>) -> (Context, ApiServer) {
    let (ctx, api) = fixtures::context();
    let mut services = members;
    services.push(built.client_service);
    let ctx = ctx
        .with_services(services)
        .with_service_accounts([built.service_account])
        .with_roles([built.role])
        .with_role_bindings([built.role_binding])
        .with_pdbs([built.pdb]);
    (ctx, api)
}

/// Observes the supporting objects' names then, when none is in the way,
/// applies them, as the reconcile does, against the script; what stood in
/// the way, once every request of the script came and no other.
async fn apply(
    cluster: &Cluster,
    ctx: Context,
    api: ApiServer,
    script: Vec<Expect>,
) -> Result<Option<InTheWay>, Error> {
    let valid = validate(cluster).expect("a valid test cluster");
    let api = api.expect(script);
    let mut observed = Observed::default();
    let mut applied = observe_supporting(&mut observed, &valid, "db", &ctx).await;
    if applied.is_ok() && observed.supporting_in_the_way.is_none() {
        applied = apply_supporting_objects(&valid, "db", &ctx, &observed).await;
    }
    api.done(ctx).await;
    applied.map(|()| observed.supporting_in_the_way)
}

fn stale<K: Resource>(mut object: K) -> K {
    object
        .meta_mut()
        .annotations
        .get_or_insert_with(Default::default)
        .insert(resources::APPLIED_HASH.into(), "an older build".into());
    object
}

#[tokio::test]
async fn objects_as_built_cost_no_request() {
    let cluster = cluster();
    let (ctx, api) = cached(built(&cluster), members(&cluster));
    assert_eq!(apply(&cluster, ctx, api, vec![]).await.unwrap(), None);
}

#[tokio::test]
async fn a_changed_object_is_server_side_applied_by_the_field_manager_with_force() {
    let cluster = cluster();
    let mut objects = built(&cluster);
    let desired = to_json(&objects.client_service);
    objects.client_service = stale(objects.client_service);
    let (ctx, api) = cached(objects, members(&cluster));
    let applied = apply(
        &cluster,
        ctx,
        api,
        vec![Expect::apply(CLIENT_SERVICE, desired.clone()).reply(Reply::Object(desired))],
    )
    .await;
    assert_eq!(applied.unwrap(), None);
}

#[tokio::test]
async fn a_changed_member_service_is_applied_as_built_leaving_its_records_alone() {
    let cluster = cluster();
    let mut members = members(&cluster);
    let desired = {
        let valid = validate(&cluster).expect("valid");
        to_json(&resources::hashed(resources::member_service(
            &valid,
            &cluster.spec.datacenter.racks[0],
            2,
            false,
        )))
    };
    members[2] = stale(members[2].clone());
    let (ctx, api) = cached(built(&cluster), members);
    let applied = apply(
        &cluster,
        ctx,
        api,
        vec![
            Expect::apply("/api/v1/namespaces/db/services/c-dc-b-2", desired.clone())
                .body_where(move |body| {
                    assert_eq!(*body, desired, "the member Service as built");
                    // Fields an apply does not name stay their writers'.
                    assert_eq!(
                        body["metadata"]["labels"].get(contract::DECOMMISSIONED),
                        None,
                        "the request's label is not applied"
                    );
                    assert_eq!(
                        body["metadata"]["annotations"].get(contract::DECOMMISSION_REQUEST),
                        None
                    );
                })
                .reply(Reply::ok(&member(&cluster, "b", 2).asked().build())),
        ],
    )
    .await;
    assert_eq!(applied.unwrap(), None);
}

#[tokio::test]
async fn a_missing_object_is_read_then_created_by_the_field_manager() {
    let cluster = cluster();
    let objects = built(&cluster);
    let pdb: Value = to_json(&objects.pdb);
    // The cache has no PodDisruptionBudget: one was deleted.
    let (ctx, api) = fixtures::context();
    let mut services = members(&cluster);
    services.push(objects.client_service);
    let ctx = ctx
        .with_services(services)
        .with_service_accounts([objects.service_account])
        .with_roles([objects.role])
        .with_role_bindings([objects.role_binding]);
    let applied = apply(
        &cluster,
        ctx,
        api,
        vec![
            Expect::get(PDB).reply(Reply::not_found()),
            Expect::create(
                "/apis/policy/v1/namespaces/db/poddisruptionbudgets",
                pdb.clone(),
            )
            .reply(Reply::Object(pdb)),
        ],
    )
    .await;
    assert_eq!(applied.unwrap(), None);
}

#[tokio::test]
async fn a_name_held_by_a_foreign_object_is_in_the_way_and_nothing_is_written() {
    let cluster = cluster();
    let mut theirs = built(&cluster).client_service;
    theirs.metadata.owner_references = None;
    // Nothing else is cached either: each name is read, and nothing is
    // written, not even the objects that are missing.
    let (ctx, api) = fixtures::context();
    let applied = apply(
        &cluster,
        ctx,
        api,
        vec![
            Expect::get(CLIENT_SERVICE).reply(Reply::ok(&theirs)),
            Expect::get("/api/v1/namespaces/db/serviceaccounts/c-member").reply(Reply::not_found()),
            Expect::get("/apis/rbac.authorization.k8s.io/v1/namespaces/db/roles/c-member")
                .reply(Reply::not_found()),
            Expect::get("/apis/rbac.authorization.k8s.io/v1/namespaces/db/rolebindings/c-member")
                .reply(Reply::not_found()),
            Expect::get(PDB).reply(Reply::not_found()),
        ],
    )
    .await;
    assert_eq!(
        applied.unwrap(),
        Some(InTheWay::Foreign(ForeignObject {
            kind: "Service".into(),
            name: "c-client".into(),
        }))
    );
}

#[tokio::test]
async fn the_members_own_role_is_in_the_way_when_it_lacks_a_grant() {
    let cluster = cluster();
    let mut objects = built(&cluster);
    objects.role.metadata.owner_references = None;
    objects.role.rules = Some(Vec::new());
    let (ctx, api) = cached(objects, members(&cluster));
    let applied = apply(&cluster, ctx, api, vec![]).await.unwrap();
    assert!(
        matches!(
            &applied,
            Some(InTheWay::InsufficientRbac { kind, name, missing })
                if kind == "Role" && name == "c-member" && !missing.is_empty()
        ),
        "{applied:?}"
    );
}

#[tokio::test]
async fn the_members_own_rbac_that_grants_enough_is_used_as_it_is() {
    let cluster = cluster();
    let mut objects = built(&cluster);
    for meta in [
        &mut objects.service_account.metadata,
        &mut objects.role.metadata,
        &mut objects.role_binding.metadata,
    ] {
        meta.owner_references = None;
        meta.annotations = None;
    }
    // Stale as they are (another build's hash), they are not applied.
    let objects = Built {
        service_account: stale(objects.service_account),
        role: stale(objects.role),
        role_binding: stale(objects.role_binding),
        ..objects
    };
    let (ctx, api) = cached(objects, members(&cluster));
    assert_eq!(apply(&cluster, ctx, api, vec![]).await.unwrap(), None);
}

#[tokio::test]
async fn an_apply_the_api_server_refuses_is_an_error() {
    let cluster = cluster();
    let mut objects = built(&cluster);
    let desired = to_json(&objects.client_service);
    objects.client_service = stale(objects.client_service);
    let (ctx, api) = cached(objects, members(&cluster));
    let applied = apply(
        &cluster,
        ctx,
        api,
        vec![Expect::apply(CLIENT_SERVICE, desired).reply(Reply::Status(500, "InternalError"))],
    )
    .await;
    assert!(
        matches!(&applied, Err(Error::ApplyObject { kind: "Service", name, .. }) if name == "c-client"),
        "{applied:?}"
    );
}
