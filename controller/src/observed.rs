//! What a reconcile observed of a Cluster's objects, as decide reads it:
//! members (Pods, member Services and their records of intent, claims,
//! volumes), racks (StatefulSets), and what stands in the way. The types
//! only, and the judgements decide needs of them. Pure; a leaf of the
//! controller crate (observe fills it, decide reads it).

use std::collections::{BTreeMap, BTreeSet};

use crds::contract::maintenance::{Record, Repaired, Request};
use crds::contract::{Decommission, DecommissionConfirmation, DecommissionRequest, GossipView};
use crds::versions::Version;

use crate::confirmation::{self, Leaving, Verdict};

/// What the caches show of one member (one ordinal of a rack).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberObserved {
    /// Its member Service, if it exists.
    pub service: Option<ServiceObserved>,
    /// Its Pod exists.
    pub pod_exists: bool,
    /// Its Pod's UID, when it exists.
    pub pod_uid: Option<String>,
    /// Its Pod is Ready (the sidecar reports operation mode NORMAL).
    pub pod_ready: bool,
    /// The major version of the database image its Pod runs, when known.
    pub pod_major: Option<u32>,
    /// The database version its Pod runs (major and minor), when its image
    /// tag names one.
    pub pod_version: Option<Version>,
    /// Its PersistentVolumeClaims that exist (`<template>-<pod>`).
    pub claims: Vec<String>,
    /// One of its claims is bound to a local PersistentVolume whose node
    /// affinity names only Nodes that no longer exist: the disk is gone.
    pub disk_lost: bool,
    /// The StatefulSet revision its Pod runs (`controller-revision-hash`).
    pub revision: Option<String>,
    /// Its Pod is being deleted (evicted and draining).
    pub pod_terminating: bool,
    /// When its Pod was created (seconds since the epoch).
    pub pod_created: Option<i64>,
    /// The Node its Pod is bound to, once scheduled.
    pub pod_node: Option<String>,
    /// Its Pod's IP, once it has one (where the controller reaches its
    /// CQL port).
    pub pod_ip: Option<String>,
    /// Its restart (a roll) has not brought it back (Ready, and seen up by
    /// every member) within the bound:
    /// set by [`crate::observe::overdue_restarts`].
    pub restart_overdue: bool,
}

impl MemberObserved {
    /// Its Pod runs a revision other than the rack's update revision: the
    /// rack's template changed since it started.
    pub fn outdated(&self, rack: &RackObserved) -> bool {
        match (&self.revision, &rack.update_revision) {
            (Some(runs), Some(wanted)) => self.pod_exists && runs != wanted,
            _ => false,
        }
    }
}

/// The records of intent on a member Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceObserved {
    /// The `cassandra.rook.io/decommissioned` label, if present.
    pub decommissioned: Option<String>,
    /// The `cassandra.rook.io/replace` label, if present.
    pub replace: Option<String>,
    /// The sidecar claimed the decommission (`decommission-started`).
    pub decommission_started: bool,
    /// Cassandra refused or failed the decommission: its reason.
    pub decommission_refused: Option<String>,
    /// The sidecar does not start the database: what its Node lacks.
    pub start_refused: Option<String>,
    /// The sidecar asks for a replace (empty disk, ring knows the member).
    pub replace_requested: Option<String>,
    /// The Service's ClusterIP: the member's address in the ring.
    pub cluster_ip: Option<String>,
    /// Its resourceVersion, to guard writes that race the sidecar.
    pub resource_version: Option<String>,
    /// The controller's record of a restart under way (a roll evicts the
    /// member): when it was recorded, RFC 3339.
    pub restarting: Option<String>,
    /// The gossip generation the member ran when the roll took it down.
    pub restarted_from_generation: Option<i64>,
    /// What the member's gossip says, as its sidecar recorded it.
    pub gossip: Option<GossipView>,
    /// The controller's decommission request, when it holds a readable one.
    pub decommission_request: Option<DecommissionRequest>,
    /// The sidecar's confirmation, when it holds a readable one.
    pub decommission_confirmation: Option<DecommissionConfirmation>,
    /// When the controller asked this member to record its ring again.
    pub ring_record_requested: Option<String>,
    /// The controller's record that the member gave ranges away to a new
    /// member and keeps their data until a cleanup (`cleanup-due`): when.
    pub cleanup_due: Option<String>,
    /// The maintenance the controller asked of the member, when it holds
    /// a readable request.
    pub maintenance_request: Option<Request>,
    /// The sidecar's record of the request it runs or ran last, when
    /// readable.
    pub maintenance_record: Option<Record>,
    /// What the member last repaired, when readable.
    pub repaired: Option<Repaired>,
    /// How many sstables of an older format the member holds, as its
    /// sidecar recorded it (unknown: `None`).
    pub old_format_sstables: Option<u64>,
}

impl ServiceObserved {
    /// What the judgement of a decommission reads of the member: its
    /// records, and whether its Pod is Ready (`ready`).
    pub fn leaving(&self, ready: bool) -> Leaving<'_> {
        Leaving {
            address: self.cluster_ip.as_deref(),
            request: self.decommission_request.as_ref(),
            confirmation: self.decommission_confirmation.as_ref(),
            own_record: self.gossip.as_ref(),
            ready,
        }
    }

    /// The decommission record, as the contract reads it.
    pub fn decommission(&self) -> Decommission {
        Decommission::from_label(self.decommissioned.as_deref())
    }
}

/// What the caches show of one rack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RackObserved {
    /// `spec.replicas` of its StatefulSet, if the StatefulSet exists.
    pub replicas: Option<i32>,
    /// The database version of its StatefulSet's Pod template, when the
    /// image tag names one: what its next Pods will run.
    pub template_version: Option<Version>,
    /// The encryption its StatefulSet's Pod template gives its members
    /// (`crate::encryption::template_encryption`); none without TLS.
    pub template_encryption: Option<crds::contract::tls::Encryption>,
    /// What its StatefulSet's volumeClaimTemplates ask for (immutable in a
    /// StatefulSet), when the StatefulSet exists.
    pub claim_templates: Option<Vec<ClaimTemplate>>,
    /// Its members by ordinal (Pods, member Services and claims found).
    pub members: BTreeMap<i32, MemberObserved>,
    /// Its StatefulSet's `status.updateRevision`: the revision of its
    /// current template, which every member should run.
    pub update_revision: Option<String>,
    /// Its StatefulSet's status is behind its spec (`observedGeneration`
    /// below `generation`): `update_revision` may not be the template's.
    pub status_stale: bool,
    /// Its StatefulSet differs from what the builders make of the spec
    /// (its applied hash is another): set by
    /// `observe::outdated_statefulsets` from what the builders make of the
    /// spec.
    pub statefulset_outdated: bool,
}

/// What a volumeClaimTemplate asks for, as far as the spec can say it: the
/// fields a user sets, so that the API server's defaults do not count as
/// changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimTemplate {
    pub name: String,
    pub storage_class: Option<String>,
    /// Sorted.
    pub access_modes: Vec<String>,
    /// The storage request in bytes, when it parses.
    pub storage_bytes: Option<u64>,
}

impl ClaimTemplate {
    /// The shape of a claim template (from the spec or a StatefulSet).
    pub fn of(claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> ClaimTemplate {
        let spec = claim.spec.clone().unwrap_or_default();
        let mut access_modes = spec.access_modes.unwrap_or_default();
        access_modes.sort();
        ClaimTemplate {
            name: claim.metadata.name.clone().unwrap_or_default(),
            storage_class: spec.storage_class_name,
            access_modes,
            storage_bytes: spec
                .resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
                .and_then(|q| crds::quantity::Quantity::parse(&q.0).ok())
                .map(|q| q.ceil_units()),
        }
    }
}

/// An object with one of the cluster's names that the Cluster does not own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
}

/// What stands in the way of the supporting objects (client Service,
/// members' RBAC, PodDisruptionBudget), found by a read of their names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InTheWay {
    /// A name held by an object the Cluster does not own.
    Foreign(ForeignObject),
    /// The members' Role or RoleBinding is the user's own (as Rook's
    /// example brings it) and does not give members what they need:
    /// `missing` says what.
    InsufficientRbac {
        kind: String,
        name: String,
        missing: String,
    },
}

/// Everything the decision looks at besides the spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Racks by name: the spec's racks and any rack whose StatefulSet exists.
    pub racks: BTreeMap<String, RackObserved>,
    /// Objects in the way.
    pub foreign: Vec<ForeignObject>,
    /// The first supporting object, in the order they are applied, whose
    /// name is in the way: nothing is written for the cluster while one is.
    pub supporting_in_the_way: Option<InTheWay>,
    /// The supporting objects (`Kind/name`) held by objects the Cluster
    /// does not own, in the way or usable as they are (the members' RBAC a
    /// user made): apply leaves them alone.
    pub supporting_unowned: BTreeSet<String>,
    /// Datacenter names on the cluster's StatefulSets that differ from the
    /// spec's (a renamed datacenter).
    pub other_datacenters: Vec<String>,
    /// Racks whose overrides ConfigMap sets keys the operator refuses.
    pub refused_overrides: BTreeMap<String, RefusedOverrides>,
    /// Racks whose overrides set the token allocator's replication factor
    /// (`allocate_tokens_for_local_replication_factor`), and its value.
    pub token_allocation_factors: BTreeMap<String, u32>,
    /// The Nodes marked unschedulable (cordoned: drained for an upgrade, a
    /// repair or a scale-down of the node pool).
    pub unschedulable_nodes: BTreeSet<String>,
    /// When this was observed (seconds since the epoch): the clock the
    /// repair schedule is read against, taken once at observe time so
    /// that the decision stays a function of what it is given.
    pub now: i64,
    /// When the Cluster was created (seconds since the epoch): where an
    /// interval schedule counts its cycles from.
    pub created: Option<i64>,
}

/// How data moves between members while a topology change runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Movement {
    /// A new member bootstraps: it streams its ranges from the others.
    Joining,
    /// A member replaces its lost self: it streams everything it held.
    Replacing,
    /// A member decommissions: it streams its ranges to the others.
    Leaving,
}

impl Movement {
    /// What the member does, for messages.
    pub fn doing(self) -> &'static str {
        match self {
            Movement::Joining => "joins the ring (bootstrap streaming)",
            Movement::Replacing => "is being replaced (streaming its data back)",
            Movement::Leaving => "is decommissioning (streaming its data away)",
        }
    }
}

/// A member whose data moves now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataMoving {
    pub rack: String,
    pub member: i32,
    pub movement: Movement,
}

/// A member on a cordoned Node while data moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberOnDrainedNode {
    pub rack: String,
    pub member: i32,
    pub node: String,
}

/// The keys a rack's overrides ConfigMap sets that the operator refuses
/// (`crds::overrides::REFUSED_KEYS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedOverrides {
    /// The ConfigMap's name.
    pub config_map: String,
    /// Its key the sidecar reads (`cassandra.yaml` or `scylla.yaml`).
    pub file: &'static str,
    /// The refused keys it sets, in the fragment's order (never empty).
    pub keys: Vec<&'static crds::overrides::RefusedKey>,
}

impl Observed {
    /// The replicas a (re-)created StatefulSet of `rack` needs so that it
    /// adopts the members that exist instead of deleting them: one past
    /// the highest ordinal with a Pod, a Service or a claim, except
    /// members whose decommission is confirmed (they are leftovers, not
    /// members).
    pub fn members_to_keep(&self, rack: &str) -> i32 {
        let Some(observed_rack) = self.racks.get(rack) else {
            return 0;
        };
        observed_rack
            .members
            .iter()
            .filter(|&(&ordinal, m)| {
                !self.decommission_confirmed(rack, ordinal)
                    && (m.pod_exists || m.service.is_some() || !m.claims.is_empty())
            })
            .map(|(&ordinal, _)| ordinal + 1)
            .max()
            .unwrap_or(0)
    }

    /// Every other member's last record of its ring.
    fn rings_besides(&self, rack: &str, member: i32) -> Vec<&GossipView> {
        self.racks
            .iter()
            .flat_map(|(name, r)| r.members.iter().map(move |(&i, m)| (name, i, m)))
            .filter(|&(name, i, _)| !(name == rack && i == member))
            .filter_map(|(_, _, m)| m.service.as_ref()?.gossip.as_ref())
            .collect()
    }

    /// What `member` of `rack` is, as the judgement of its decommission
    /// record reads it.
    fn leaving(&self, rack: &str, member: i32) -> Option<Leaving<'_>> {
        let state = self.racks.get(rack)?.members.get(&member)?;
        Some(state.service.as_ref()?.leaving(state.pod_ready))
    }

    /// The judgement of the `decommissioned=true` of `member` of `rack`
    /// (a member without one, or without a Service, is `Stale`), and
    /// whether the member is in the ring.
    pub fn decommission_verdict(&self, rack: &str, member: i32) -> (Verdict, bool) {
        let Some(leaving) = self.leaving(rack, member) else {
            return (Verdict::Stale("no member Service".into()), false);
        };
        let others = self.rings_besides(rack, member);
        (
            confirmation::judge(&leaving, others.iter().copied()),
            leaving.in_ring(others.iter().copied()),
        )
    }

    /// The host ID of `member` of `rack`: from its decommission request,
    /// its own record of its ring, or, when it has recorded none yet (it
    /// just joined), the token owners another member's ring lists at its
    /// address.
    pub fn host_id_of(&self, rack: &str, member: i32) -> Option<String> {
        let service = self
            .racks
            .get(rack)?
            .members
            .get(&member)?
            .service
            .as_ref()?;
        service
            .decommission_request
            .as_ref()
            .and_then(|r| r.host_id.clone())
            .or_else(|| service.gossip.as_ref().and_then(|g| g.host_id.clone()))
            .or_else(|| {
                let address = service.cluster_ip.as_deref()?;
                self.rings_besides(rack, member)
                    .into_iter()
                    .find_map(|g| g.owners.as_ref()?.get(address).cloned())
            })
    }

    /// The judgement of a member asked to leave whose disk was lost with
    /// its Node ([`confirmation::judge_removed`]).
    pub fn removal_verdict(&self, rack: &str, member: i32) -> Verdict {
        let Some(leaving) = self.leaving(rack, member) else {
            return Verdict::Stale("no member Service".into());
        };
        let others = self.rings_besides(rack, member);
        confirmation::judge_removed(&leaving, others.iter().copied())
    }

    /// The first member (racks and ordinals in order) whose data moves:
    /// one being replaced (its `replace` record), one asked to leave and
    /// not yet confirmed gone (`decommissioned=false`), or one joining: its
    /// Pod runs, not Ready, and its Service holds no record of its gossip
    /// (a sidecar records it only once its node is NORMAL, so a member
    /// that never finished a bootstrap has none) while another member's
    /// does (there is a ring to stream from: a new cluster's first member
    /// streams nothing). A member restarted by a roll has its earlier
    /// record: its data stays where it is.
    pub fn data_moving(&self) -> Option<DataMoving> {
        let ring_exists = self
            .racks
            .values()
            .flat_map(|r| r.members.values())
            .any(|m| m.service.as_ref().is_some_and(|s| s.gossip.is_some()));
        self.racks.iter().find_map(|(rack, observed_rack)| {
            observed_rack.members.iter().find_map(|(&member, m)| {
                let service = m.service.as_ref()?;
                let movement = if service.replace.is_some() {
                    Movement::Replacing
                } else if service.decommission() == Decommission::Requested {
                    Movement::Leaving
                } else if m.pod_exists && !m.pod_ready && service.gossip.is_none() && ring_exists {
                    Movement::Joining
                } else {
                    return None;
                };
                Some(DataMoving {
                    rack: rack.clone(),
                    member,
                    movement,
                })
            })
        })
    }

    /// The members whose Pods run on a cordoned Node, while data moves: a
    /// drain that will evict them once the PodDisruptionBudget's hold is
    /// ignored (GKE's node upgrades and auto-repair wait for it about one
    /// hour, then drain anyway).
    pub fn drained_while_data_moves(&self) -> Option<(DataMoving, Vec<MemberOnDrainedNode>)> {
        let moving = self.data_moving()?;
        let drained: Vec<MemberOnDrainedNode> = self
            .racks
            .iter()
            .flat_map(|(rack, r)| r.members.iter().map(move |(&member, m)| (rack, member, m)))
            .filter_map(|(rack, member, m)| {
                let node = m.pod_node.as_ref()?;
                self.unschedulable_nodes
                    .contains(node)
                    .then(|| MemberOnDrainedNode {
                        rack: rack.clone(),
                        member,
                        node: node.clone(),
                    })
            })
            .collect();
        (!drained.is_empty()).then_some((moving, drained))
    }

    /// Whether `member` of `rack` carries `decommissioned=true` and the
    /// judgement confirms it.
    pub fn decommission_confirmed(&self, rack: &str, member: i32) -> bool {
        let labelled = self
            .racks
            .get(rack)
            .and_then(|r| r.members.get(&member))
            .and_then(|m| m.service.as_ref())
            .is_some_and(|s| s.decommission() == Decommission::Confirmed);
        labelled && self.decommission_verdict(rack, member).0 == Verdict::Confirmed
    }
}
