//! The writes of each action, exactly (method, path, query, content type,
//! body, the guard the API server checks, the Event beside it), against a
//! mocked API server, and what a refused write makes: a conflict the next
//! reconcile decides again (a guard that failed, a name taken, an
//! eviction refused), nothing (an object gone already), or an error to
//! retry. By family: [`decommission`], [`create`], [`replace`], [`roll`].

mod create;
mod decommission;
mod replace;
mod roll;

use k8s_openapi::jiff::Timestamp;
use kube::api::Preconditions;
use serde_json::Value;

use super::*;
use crate::fixtures::{self, ApiServer, Expect, TestCluster};
use crate::metrics::OperationKindLabels;
use crate::recheck::tests::agreed;
use crate::validated::validate;

const SERVICES: &str = "/api/v1/namespaces/db/services";
const STATEFULSETS: &str = "/apis/apps/v1/namespaces/db/statefulsets";
const CLAIMS: &str = "/api/v1/namespaces/db/persistentvolumeclaims";
const PODS: &str = "/api/v1/namespaces/db/pods";

/// Cluster `c` in namespace `db`: racks `a` and `b` of 3, claims `data`.
fn cluster() -> Cluster {
    Cluster::test()
        .rack("a", 3)
        .rack("b", 3)
        .claim_template("data")
        .build()
}

fn service_path(name: &str) -> String {
    format!("{SERVICES}/{name}")
}

fn statefulset_path(name: &str) -> String {
    format!("{STATEFULSETS}/{name}")
}

fn event(type_: &str, reason: &str) -> Expect {
    Expect::event("db", type_, reason)
}

/// `action`, about to be carried out against a mocked API server.
struct Acting {
    action: Action,
    service: Option<Preconditions>,
    ctx: Context,
    api: ApiServer,
}

/// What act returned, once every request of the script came, in order,
/// and no other.
struct Run {
    acted: Result<Acted, Error>,
    /// The member operations the metrics counted as ended.
    ended: Ended,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Ended {
    decommissions: u64,
    replaces: u64,
}

/// Carries out `action` as the recheck agreed it, with empty caches.
fn act_on(action: Action) -> Acting {
    let (ctx, api) = fixtures::context();
    Acting {
        action,
        service: None,
        ctx,
        api,
    }
}

impl Acting {
    /// With these objects in the caches.
    fn caches(mut self, fill: impl FnOnce(Context) -> Context) -> Acting {
        self.ctx = fill(self.ctx);
        self
    }

    /// The member Service a DeleteLeftovers depends on, as the recheck
    /// read it.
    fn service_read_afresh(mut self, preconditions: Preconditions) -> Acting {
        self.service = Some(preconditions);
        self
    }

    async fn expect(self, script: Vec<Expect>) -> Run {
        let cluster = cluster();
        let valid = validate(&cluster).expect("a valid test cluster");
        let api = self.api.expect(script);
        let rechecked = agreed(&self.action, self.service);
        let acted = act(
            &valid,
            "db",
            &rechecked,
            &BuildContext::default(),
            &self.ctx,
        )
        .await;
        let ended = Ended::of(&self.ctx);
        api.done(self.ctx).await;
        Run { acted, ended }
    }
}

impl Run {
    /// What act returned, which must not be an error.
    fn acted(self) -> Acted {
        self.acted.expect("no error")
    }
}

impl Ended {
    fn of(ctx: &Context) -> Ended {
        let count = |kind: &str| {
            let labels = OperationKindLabels {
                namespace: "db".into(),
                cluster: "c".into(),
                kind: kind.into(),
            };
            ctx.metrics
                .operations_completed
                .get_or_create(&labels)
                .get()
                + ctx.metrics.operations_failed.get_or_create(&labels).get()
        };
        Ended {
            decommissions: count("decommission"),
            replaces: count("replace"),
        }
    }
}

fn wait(reason: WaitReason) -> Acted {
    Acted::Conflict(Conflict::Wait(reason))
}

fn leaving(rack: &str, member: i32) -> Acted {
    wait(WaitReason::MemberLeaving {
        rack: rack.into(),
        member,
    })
}

fn foreign(kind: &str, name: &str) -> Acted {
    Acted::Conflict(Conflict::Refused(Refusal::ForeignObject(
        crate::observed::ForeignObject {
            kind: kind.into(),
            name: name.into(),
        },
    )))
}

/// A rack of the test cluster, validated, for the builders.
fn rack_spec<'c>(valid: &'c ValidCluster<'_>, rack: &str) -> &'c crds::v1alpha1::RackSpec {
    valid
        .spec
        .datacenter
        .racks
        .iter()
        .find(|r| r.name == rack)
        .expect("a rack of the test cluster")
}

/// Asserts that a record's time is now (within a minute).
fn assert_now(text: &Value, what: &str) {
    let at: Timestamp = text
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no time: {text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{what}: {text} is no time: {e}"));
    let age = Timestamp::now().duration_since(at);
    assert!((0..60).contains(&age.as_secs()), "{what}: {at} is not now");
}

/// Asserts that an object of the body has exactly these keys.
fn assert_keys(value: &Value, keys: &[&str], what: &str) {
    let mut found: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    found.sort_unstable();
    let mut expected = keys.to_vec();
    expected.sort_unstable();
    assert_eq!(found, expected, "{what}: {value}");
}

#[tokio::test]
async fn waits_refusals_and_convergence_write_nothing() {
    for action in [
        Action::Wait(WaitReason::MemberNotReady {
            rack: "b".into(),
            member: 1,
        }),
        Action::Refuse(Refusal::RackRemovedWithMembers {
            rack: "x".into(),
            members: 1,
        }),
        Action::Converged,
    ] {
        let run = act_on(action.clone()).expect(vec![]).await;
        assert_eq!(run.acted(), Acted::Done, "{action:?}");
    }
}
