//! Fixtures of the decision tests: specs, members and rings as the caches
//! would show them.

use std::collections::BTreeMap;

use crds::contract::GossipView;

use super::*;

use crds::contract::{DecommissionConfirmation, DecommissionRequest};

use crds::v1alpha1::{ClusterMode, DatacenterSpec, RackSpec};

fn spec(racks: &[(&str, i32)]) -> ClusterSpec {
    ClusterSpec {
        version: "3.11.6".into(),
        repository: None,
        mode: ClusterMode::Cassandra,
        annotations: None,
        datacenter: DatacenterSpec {
            name: "dc".into(),
            racks: racks
                .iter()
                .map(|(name, members)| RackSpec {
                    name: name.to_string(),
                    members: *members,
                    config_map_name: None,
                    jmx_exporter_config_map_name: None,
                    storage: Default::default(),
                    annotations: None,
                    placement: None,
                    resources: Default::default(),
                })
                .collect(),
        },
        sidecar_image: None,
        maintenance: None,
        security: None,
    }
}

/// A rack whose StatefulSet has `replicas`; `members` lists each
/// member's (has service, pod ready, decommissioned label, replace label).
fn rack(
    replicas: Option<i32>,
    members: &[(bool, bool, Option<&str>, Option<&str>)],
) -> RackObserved {
    RackObserved {
        replicas,
        template_version: None,
        claim_templates: None,
        members: members
            .iter()
            .enumerate()
            .map(|(i, (service, ready, decommissioned, replace))| {
                (
                    i as i32,
                    MemberObserved {
                        service: service.then(|| ServiceObserved {
                            decommissioned: decommissioned.map(str::to_string),
                            replace: replace.map(str::to_string),
                            cluster_ip: Some(format!("10.96.0.{i}")),
                            resource_version: Some(format!("{}", 100 + i)),
                            ..ServiceObserved::default()
                        }),
                        pod_exists: *ready,
                        pod_ready: *ready,
                        ..MemberObserved::default()
                    },
                )
            })
            .collect(),
        ..RackObserved::default()
    }
}

const READY: (bool, bool, Option<&str>, Option<&str>) = (true, true, None, None);

const STARTING: (bool, bool, Option<&str>, Option<&str>) = (true, false, None, None);

const SERVICE_ONLY: (bool, bool, Option<&str>, Option<&str>) = (true, false, None, None);

fn observed(racks: Vec<(&str, RackObserved)>) -> Observed {
    Observed {
        racks: racks.into_iter().map(|(n, r)| (n.to_string(), r)).collect(),
        ..Observed::default()
    }
}

/// A member for the lifecycle table: ready, with a Service, one claim.
fn member(i: i32) -> MemberObserved {
    MemberObserved {
        service: Some(ServiceObserved {
            cluster_ip: Some(format!("10.96.0.{i}")),
            resource_version: Some(format!("{}", 100 + i)),
            ..ServiceObserved::default()
        }),
        pod_exists: true,
        pod_uid: Some(format!("uid-{i}")),
        pod_ready: true,
        pod_major: Some(4),
        pod_version: None,
        claims: vec![format!("data-c-dc-b-{i}")],
        ..MemberObserved::default()
    }
}

fn with(mut m: MemberObserved, f: impl FnOnce(&mut MemberObserved)) -> MemberObserved {
    f(&mut m);
    m
}

fn label(m: MemberObserved, value: &str) -> MemberObserved {
    with(m, |m| {
        m.service.as_mut().unwrap().decommissioned = Some(value.to_string())
    })
}

const ASKED: &str = "2026-11-27T10:00:00Z";

const LEFT: &str = "2026-11-27T10:01:00Z";

const ANSWERED: &str = "2026-11-27T10:02:00Z";

/// The controller's request on the member's Service.
fn asked(m: MemberObserved) -> MemberObserved {
    let id = format!("{}/{ASKED}", m.pod_uid.clone().unwrap_or_default());
    with(label(m, "false"), |m| {
        m.service.as_mut().unwrap().decommission_request = Some(DecommissionRequest {
            id,
            requested_at: ASKED.into(),
            ..DecommissionRequest::default()
        })
    })
}

/// The sidecar's answer to that request: `true` and its confirmation.
fn confirmed(m: MemberObserved) -> MemberObserved {
    with(label(asked(m), "true"), |m| {
        let service = m.service.as_mut().unwrap();
        service.decommission_confirmation = Some(DecommissionConfirmation {
            request: service.decommission_request.as_ref().unwrap().id.clone(),
            host_id: None,
            confirmed_at: ANSWERED.into(),
            removed: None,
        })
    })
}

/// Every other member records, after the request, a ring whose token
/// owners are the members but `gone`.
fn left(observed: Observed, gone: i32) -> Observed {
    ring_at(observed, LEFT, |i| i != gone)
}

/// Every member records at `at` a ring whose owners are the members
/// for which `owns` holds.
fn ring_at(mut observed: Observed, at: &str, owns: impl Fn(i32) -> bool) -> Observed {
    let owners: BTreeMap<String, String> = observed
        .racks
        .values()
        .flat_map(|r| r.members.iter())
        .filter(|&(&i, _)| owns(i))
        .filter_map(|(&i, m)| Some((m.service.as_ref()?.cluster_ip.clone()?, format!("h{i}"))))
        .collect();
    for rack in observed.racks.values_mut() {
        for m in rack.members.values_mut() {
            if let Some(service) = m.service.as_mut() {
                let gossip = service.gossip.get_or_insert_with(GossipView::default);
                gossip.owners = Some(owners.clone());
                gossip.at = Some(at.into());
            }
        }
    }
    observed
}

fn started(m: MemberObserved) -> MemberObserved {
    with(m, |m| {
        m.service.as_mut().unwrap().decommission_started = true
    })
}

fn refused(m: MemberObserved, reason: &str) -> MemberObserved {
    with(m, |m| {
        m.service.as_mut().unwrap().decommission_refused = Some(reason.to_string())
    })
}

fn gone(m: MemberObserved) -> MemberObserved {
    with(m, |m| {
        m.pod_exists = false;
        m.pod_ready = false
    })
}

fn unready(m: MemberObserved) -> MemberObserved {
    with(m, |m| m.pod_ready = false)
}

fn racks(replicas: i32, members: Vec<MemberObserved>) -> Observed {
    let rack = RackObserved {
        replicas: Some(replicas),
        template_version: None,
        claim_templates: None,
        members: members
            .into_iter()
            .enumerate()
            .map(|(i, m)| (i as i32, m))
            .collect(),
        ..RackObserved::default()
    };
    observed(vec![("b", rack)])
}

fn with_member(o: &mut Observed, i: i32, f: impl FnOnce(&mut MemberObserved)) {
    f(o.racks.get_mut("b").unwrap().members.get_mut(&i).unwrap());
}

/// A member running revision `revision`.
fn on(m: MemberObserved, revision: &str) -> MemberObserved {
    with(m, |m| m.revision = Some(revision.to_string()))
}

/// A member whose restart the controller recorded.
/// A member whose restart the controller recorded when it ran gossip
/// generation 50 (older than any the members run in [`rolling`]).
fn restarting(m: MemberObserved) -> MemberObserved {
    with(m, |m| {
        let service = m.service.as_mut().expect("a Service");
        service.restarting = Some("2026-01-01T00:00:00Z".into());
        service.restarted_from_generation = Some(50);
    })
}

/// The gossip generation member `i` runs in a settled ring.
fn generation(i: i32) -> i64 {
    100 + i64::from(i)
}

/// Every member's gossip record shows every member up under the
/// generation it runs.
fn settled(mut observed: Observed) -> Observed {
    let up: BTreeMap<String, i64> = observed
        .racks
        .values()
        .flat_map(|r| r.members.iter())
        .filter_map(|(&i, m)| Some((m.service.as_ref()?.cluster_ip.clone()?, generation(i))))
        .collect();
    for rack in observed.racks.values_mut() {
        for (&i, m) in rack.members.iter_mut() {
            if let Some(service) = m.service.as_mut() {
                service.gossip = Some(GossipView {
                    generation: generation(i),
                    up: up.clone(),
                    ..GossipView::default()
                });
            }
        }
    }
    observed
}

/// Rack "b" of 3 replicas whose StatefulSet's update revision is "new",
/// its ring settled.
fn rolling(members: Vec<MemberObserved>) -> Observed {
    let mut observed = racks(members.len() as i32, members);
    observed.racks.get_mut("b").expect("rack b").update_revision = Some("new".into());
    settled(observed)
}

/// Changes what member `i`'s gossip record says.
fn gossip_of(mut observed: Observed, i: i32, f: impl FnOnce(&mut GossipView)) -> Observed {
    let service = observed
        .racks
        .get_mut("b")
        .and_then(|r| r.members.get_mut(&i))
        .and_then(|m| m.service.as_mut())
        .expect("member of rack b with a Service");
    f(service.gossip.as_mut().expect("a gossip record"));
    observed
}

/// Every member with a Service marked `cleanup-due` (as the controller
/// does before a scale-up): a scale-up goes on without marking again.
fn marked(mut observed: Observed) -> Observed {
    for rack in observed.racks.values_mut() {
        for m in rack.members.values_mut() {
            if let Some(service) = m.service.as_mut() {
                service.cleanup_due = Some(ASKED.into());
            }
        }
    }
    observed
}

mod decisions;
mod disruptions;
mod lifecycle;
mod maintenance;
mod records;
mod roll;
