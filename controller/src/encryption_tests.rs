//! The templates' encryption read back from StatefulSets and Pods: a move
//! to TLS advances only once every member runs the last step, and a
//! controller that restarts anywhere on the way takes it up from there.

use super::*;
use crate::cached::cached;
use crate::observe::{Cached, REVISION_LABEL, observe_cached};
use crate::resources::{self, BuildContext, ValidCluster};
use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSetStatus;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;

fn cluster(tls: &str) -> Cluster {
    let mut cluster: Cluster = serde_norway::from_str(&format!(
        r#"
metadata: {{name: c, namespace: db, uid: u1}}
spec:
  version: 4.1.8
  datacenter: {{name: dc, racks: [{{name: a, members: 2}}, {{name: b, members: 1}}]}}
  security: {{tls: {tls}}}
"#
    ))
    .unwrap();
    cluster.metadata.uid = Some("u1".into());
    cluster
}

/// Each rack's StatefulSet built with `encryption`, its status at
/// revision `revision`.
fn statefulsets(
    cluster: &Cluster,
    encryption: Option<Encryption>,
    revision: &str,
) -> Vec<Arc<StatefulSet>> {
    let build = BuildContext {
        encryption,
        ..BuildContext::default()
    };
    cluster
        .spec
        .datacenter
        .racks
        .iter()
        .map(|rack| {
            let mut sts = resources::statefulset_for_rack(
                &ValidCluster::unchecked(cluster),
                rack,
                rack.members,
                &build,
            );
            sts.metadata.generation = Some(2);
            sts.status = Some(StatefulSetStatus {
                observed_generation: Some(2),
                update_revision: Some(revision.into()),
                ..StatefulSetStatus::default()
            });
            Arc::new(sts)
        })
        .collect()
}

fn pod(name: &str, revision: &str, ready: bool) -> Arc<crate::cached::CachedPod> {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("db".into()),
            labels: Some({
                // c-dc-<rack>-<ordinal>
                let rack = name.split('-').nth(2).unwrap();
                let mut labels = crds::labels::rack_labels("c", "dc", rack);
                labels.insert(REVISION_LABEL.to_string(), revision.to_string());
                labels
            }),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    };
    Arc::new(cached(&pod))
}

/// What the reconcile makes of the caches for `cluster`.
fn encryption_of(cluster: &Cluster, cached: &Cached) -> Option<Encryption> {
    templates_encryption(&cluster.spec, &observe_cached(cluster, cached, 0, 600))
}

fn cached_world(
    statefulsets: Vec<Arc<StatefulSet>>,
    pods: Vec<Arc<crate::cached::CachedPod>>,
) -> Cached {
    Cached {
        statefulsets,
        pods,
        ..Cached::default()
    }
}

const MEMBERS: [&str; 3] = ["c-dc-a-0", "c-dc-a-1", "c-dc-b-0"];

fn env(e: Option<Encryption>) -> Option<String> {
    e.map(|e| e.to_env())
}

#[test]
fn a_running_cluster_in_clear_text_moves_to_tls_one_settled_step_at_a_time() {
    let plain = cluster("{}");
    let target = cluster("{internode: all, client: optional}");
    let mut at: Option<Encryption> = None;
    let mut seen = Vec::new();
    for round in 0..6 {
        let sts = statefulsets(&plain, at, "r1");
        // A member on the old revision, or not Ready: the step holds (but
        // the first, which breaks nothing).
        let rolling = cached_world(
            sts.clone(),
            vec![
                pod(MEMBERS[0], "r1", true),
                pod(MEMBERS[1], "r0", true),
                pod(MEMBERS[2], "r1", true),
            ],
        );
        let unready = cached_world(
            sts.clone(),
            vec![
                pod(MEMBERS[0], "r1", true),
                pod(MEMBERS[1], "r1", false),
                pod(MEMBERS[2], "r1", true),
            ],
        );
        let missing = cached_world(
            sts.clone(),
            vec![pod(MEMBERS[0], "r1", true), pod(MEMBERS[1], "r1", true)],
        );
        if at.is_some() {
            for held in [&rolling, &unready, &missing] {
                assert_eq!(env(encryption_of(&target, held)), env(at), "round {round}");
            }
        }
        let settled = cached_world(sts, MEMBERS.iter().map(|m| pod(m, "r1", true)).collect());
        let next = encryption_of(&target, &settled);
        if next == at {
            break;
        }
        seen.push(env(next).unwrap());
        at = next;
    }
    assert_eq!(
        seen,
        [
            "internode=none+optional,client=optional",
            "internode=all+optional,client=optional",
            "internode=all,client=optional",
        ]
    );
}

#[test]
fn the_templates_say_what_they_carry() {
    let target = cluster("{internode: all, client: required}");
    let tls = target.spec.security.as_ref().unwrap().tls.clone();
    // Built from the spec alone: the target, written in the template.
    let sts = statefulsets(&target, None, "r1");
    let carried = template_encryption(&sts[0], &tls);
    assert_eq!(carried, Encryption::of(&tls));
    let pod = sts[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let written: Vec<_> = pod.containers[0]
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == ENCRYPTION_ENV)
        .collect();
    assert_eq!(written.len(), 1);
    assert_eq!(
        written[0].value.as_deref(),
        Some("internode=all,client=required")
    );
    // A cluster without TLS: no volume, no value, none read back.
    let plain = cluster("{}");
    let sts = statefulsets(&plain, None, "r1");
    assert_eq!(template_encryption(&sts[0], &TlsSpec::default()), None);
    let pod = sts[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert!(
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .all(|e| e.name != ENCRYPTION_ENV)
    );
    // A template of an older controller (the volume, no value): the spec's.
    let mut old = (*statefulsets(&target, None, "r1")[0]).clone();
    let container = &mut old
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container
        .env
        .as_mut()
        .unwrap()
        .retain(|e| e.name != ENCRYPTION_ENV);
    assert_eq!(template_encryption(&old, &tls), Encryption::of(&tls));
}

#[test]
fn a_new_cluster_starts_at_its_target_and_foreign_statefulsets_count_for_nothing() {
    let target = cluster("{internode: rack, client: required}");
    let tls = target.spec.security.as_ref().unwrap().tls.clone();
    assert_eq!(
        encryption_of(&target, &Cached::default()),
        Encryption::of(&tls)
    );
    // A StatefulSet of the same names that the cluster does not own.
    let plain = cluster("{}");
    let mut foreign = (*statefulsets(&plain, None, "r1")[0]).clone();
    foreign.metadata.owner_references = None;
    let world = cached_world(vec![Arc::new(foreign)], vec![]);
    assert_eq!(encryption_of(&target, &world), Encryption::of(&tls));
}

/// The controller's cache keeps a stripped StatefulSet: what it reads of
/// the template's encryption is the same as of the whole object.
#[test]
fn the_cached_statefulset_keeps_what_the_encryption_is_read_from() {
    let target = cluster("{internode: all, client: optional}");
    let tls = target.spec.security.as_ref().unwrap().tls.clone();
    let plain = cluster("{}");
    let step = Encryption::parse("internode=none+optional,client=optional").unwrap();
    for (built, of) in [(&target, None), (&plain, Some(step)), (&plain, None)] {
        let whole = (*statefulsets(built, of, "r1")[0]).clone();
        let mut stripped = whole.clone();
        crate::run::strip_statefulset(&mut stripped);
        assert_eq!(
            template_encryption(&stripped, &tls),
            template_encryption(&whole, &tls),
            "{of:?}"
        );
    }
    // And a move advances on the stripped objects as on the whole ones.
    let mut sts = (*statefulsets(&plain, Some(step), "r1")[0]).clone();
    crate::run::strip_statefulset(&mut sts);
    let mut world = cached_world(
        vec![Arc::new(sts)],
        MEMBERS.iter().map(|m| pod(m, "r1", true)).collect(),
    );
    world
        .statefulsets
        .extend(statefulsets(&plain, Some(step), "r1").into_iter().skip(1));
    assert_eq!(
        env(encryption_of(&target, &world)).as_deref(),
        Some("internode=all+optional,client=optional")
    );
}
