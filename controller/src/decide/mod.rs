//! The decision step of a reconcile: from the Cluster's spec and what the
//! caches show of its objects, the one next thing to do. Pure, and level
//! based: it looks only at the present state (labels and annotations on
//! member Services, StatefulSet replicas, Pods, claims, volumes, Nodes),
//! never at what it did before, so a controller that crashed between two
//! steps resumes where it was.
//!
//! One topology change at a time per cluster: while any member is not ready,
//! leaving or being replaced, nothing else starts. The safety rules of a
//! scale-down (DESIGN.md section 5) live here and are table-tested:
//! - a member's claims and Service are deleted only for an ordinal at or
//!   above the StatefulSet's replicas whose decommission is confirmed: the
//!   controller's request, the sidecar's answer to it and the ring's
//!   agreement ([`crate::confirmation`]), never the label alone;
//! - a StatefulSet shrinks only past a confirmed member;
//! - a `decommissioned=true` that is no confirmed decommission is taken
//!   back (or, off the ring, reported); a member's record the controller
//!   will not act on holds topology changes and rolls, not replacements;
//! - a decommission request on a member the spec still wants is withdrawn
//!   only while the sidecar has not claimed it and the member is ready
//!   (NORMAL), or when Cassandra refused it; one under way is finished
//!   first, and the scale-up waits;
//! - nothing starts while members run different major versions.
//!
//! Rolls (a rack's Pods not all on its StatefulSet's update revision, the
//! StatefulSets being `OnDelete`) take one member down at a time, highest
//! ordinal first, racks in spec order, only when every member is Ready and
//! no topology change is under way; no topology change starts while a
//! member runs an old template. The roll's only state is the record of a
//! restart on the member Service (`cassandra.rook.io/restarting`) and the
//! Pods' revision labels, so a controller restarted mid-roll resumes it.
//!
//! Maintenance (cleanup, upgradesstables, scheduled repairs) runs one
//! member at a time once the cluster is converged, and holds topology
//! changes and rolls while a cleanup or upgradesstables runs (a repair is
//! withdrawn instead): [`maintenance`].
//!
//! `decide` below is the precedence of the stages, first to last; each
//! stage lives in the file of its family: [`guards`], [`topology`],
//! [`replace`], [`roll`], [`maintenance`].

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use crds::contract::maintenance::Operation;
use crds::v1alpha1::ClusterSpec;
use crds::versions::Version;

pub use crate::observed::{
    ClaimTemplate, ForeignObject, MemberObserved, Observed, RackObserved, RefusedOverrides,
    ServiceObserved,
};
pub use roll::members_on_old_template;

mod guards;
pub mod maintenance;
mod replace;
mod roll;
#[cfg(test)]
mod tests;
mod topology;

/// Why the controller waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// A member is not ready yet (starting, joining, or failing).
    MemberNotReady { rack: String, member: i32 },
    /// A member is being decommissioned.
    MemberLeaving { rack: String, member: i32 },
    /// A member the spec wants again is decommissioning already (its sidecar
    /// claimed it): the decommission finishes, then the scale-up proceeds.
    DecommissionBeforeScaleUp { rack: String, member: i32 },
    /// A member is being replaced.
    MemberReplacing { rack: String, member: i32 },
    /// Before a member leaves: `system_auth` must first have no more
    /// replicas in the datacenter than members will remain (Cassandra
    /// refuses the decommission otherwise), and the controller could not
    /// lower it yet: `detail` says why.
    AuthReplicationBeforeDecommission {
        rack: String,
        member: i32,
        detail: String,
    },
    /// Members run different major versions: Cassandra cannot stream
    /// between majors, so no topology change starts.
    MixedMajorVersions { majors: Vec<u32> },
    /// A member was taken down by a roll and is not back Ready on the new
    /// template yet.
    MemberRestarting { rack: String, member: i32 },
    /// A rack's StatefulSet controller has not caught up with its spec:
    /// whether its members run its template is not known yet.
    StatefulSetNotObserved { rack: String },
    /// The PodDisruptionBudget does not allow the member's eviction now.
    EvictionRefused { rack: String, member: i32 },
    /// A roll waits for the ring: a member's gossip does not show every
    /// member up under the generation it runs (`detail` says which).
    RingNotSettled {
        rack: String,
        member: i32,
        detail: String,
    },
    /// A member Service changed between the decision's read and its
    /// guarded write: the next reconcile reads it again.
    MemberServiceChanged { rack: String, member: i32 },
    /// A cleanup or upgradesstables runs on a member: no topology change
    /// or roll starts until it is done (replacements do).
    MaintenanceRunning {
        rack: String,
        member: i32,
        operation: Operation,
    },
}

/// Why the controller refuses to act (until the spec or the objects change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An object the controller must create exists and belongs to someone else.
    ForeignObject(ForeignObject),
    /// `spec.version` asks for a change Cassandra does not support from a
    /// version the cluster runs (a downgrade across minors, a skipped major).
    VersionChangeRefused {
        running: String,
        spec: String,
        reason: String,
    },
    /// The members' Role or RoleBinding exists, made by the user (as Rook's
    /// example does), and does not give members what they need: `missing`
    /// says what.
    MemberRbacInsufficient {
        kind: String,
        name: String,
        missing: String,
    },
    /// The cluster runs members of another datacenter name than the spec's:
    /// Cassandra cannot rename a datacenter.
    DatacenterChanged { running: String, spec: String },
    /// The spec changes what a running StatefulSet cannot change (its
    /// volumeClaimTemplates): `field` names it, `detail` says how.
    SpecChangeUnsupported { field: String, detail: String },
    /// A rack was removed from the spec while its StatefulSet still runs members.
    RackRemovedWithMembers { rack: String, members: i32 },
    /// The spec would bootstrap a member of `rack` in a datacenter of
    /// `racks` racks, more than one but fewer than the token allocator's
    /// replication factor `factor`: Cassandra 4.0 and later refuse to
    /// allocate its tokens, and the member never joins.
    TooFewRacksForTokenAllocation {
        rack: String,
        racks: usize,
        factor: u32,
    },
    /// Cassandra refused (or failed) the decommission of a member: nothing
    /// is removed; raising the rack's members back cancels it.
    DecommissionRefused {
        rack: String,
        member: i32,
        reason: String,
    },
    /// A member below the highest one left the ring (confirmed by request,
    /// answer and ring): a StatefulSet can only remove its highest member.
    DecommissionedBelowTheTop { rack: String, member: i32 },
    /// A `decommissioned=true` that is no confirmed decommission (`missing`
    /// says what it lacks), on a member that is not in the ring either (it
    /// left without the controller's request?): nothing is deleted, and
    /// the label stays for someone to look at.
    StaleDecommissionRecord {
        rack: String,
        member: i32,
        missing: String,
    },
    /// A member asked to leave lost its Node and its local disk: its node
    /// cannot finish (or answer) the decommission. Its data is on the other
    /// replicas; it leaves the ring by `nodetool removenode <host ID>` run
    /// on another member, after which the controller finishes the
    /// scale-down. `detail` says what the ring shows.
    LeavingMemberLost {
        rack: String,
        member: i32,
        host_id: Option<String>,
        detail: String,
    },
    /// A `decommissioned` label with a value neither side acts on.
    UnreadableDecommission {
        rack: String,
        member: i32,
        value: String,
    },
    /// A rack's overrides ConfigMap sets a key that would defeat the safety
    /// rules or the member's identity: no member may start with it, so no
    /// topology change starts (members already running keep running).
    OverridesRefused {
        rack: String,
        overrides: RefusedOverrides,
    },
    /// A member a roll took down did not come back Ready within the bound:
    /// the roll stops there, nothing else is touched.
    MemberRestartStuck {
        rack: String,
        member: i32,
        since: String,
    },
    /// A cluster with TLS whose certificate authority cannot be made, read
    /// or published (`crate::authority`): no member could get a
    /// certificate, so nothing starts; `detail` says what failed.
    CertificateAuthorityUnavailable { detail: String },
    /// The superuser Secret of a cluster with authentication cannot be
    /// read, made or used (`detail` says why): nothing changes until it can.
    SuperuserSecretUnusable { detail: String },
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the StatefulSets of these racks, each with the replicas its
    /// existing members need (0 for a new rack).
    CreateStatefulSets { racks: Vec<(String, i32)> },
    /// Apply the desired StatefulSet (all but replicas) of these racks:
    /// what the spec asks for differs from what they hold.
    UpdateStatefulSets { racks: Vec<String> },
    /// Roll a member: record the restart on its Service (guarded by the
    /// resourceVersion read), then evict its Pod.
    RestartMember {
        rack: String,
        member: i32,
        resource_version: String,
        /// The gossip generation it runs, as its sidecar recorded it.
        generation: Option<i64>,
    },
    /// A member with a recorded restart still runs the old template: evict
    /// its Pod (again: the first eviction was refused or never sent).
    EvictMember { rack: String, member: i32 },
    /// A restarted member is back Ready on its rack's template: remove the
    /// record of its restart.
    FinishRestart { rack: String, member: i32 },
    /// Create the member Service of a member (before its Pod exists, or
    /// because it went missing).
    CreateMemberService {
        rack: String,
        member: i32,
        seed: bool,
    },
    /// Add one member to a rack: set its StatefulSet's replicas.
    ScaleUp { rack: String, replicas: i32 },
    /// Ask the highest member of a rack to leave the ring: label its Service
    /// `decommissioned=false`, guarded by the resourceVersion the decision
    /// read (a stale cache must never turn the sidecar's `true` back).
    RequestDecommission {
        rack: String,
        member: i32,
        resource_version: String,
        /// What the request names: the member's Pod and its node.
        pod_uid: Option<String>,
        host_id: Option<String>,
    },
    /// A `decommissioned=true` that is no confirmed decommission, on a
    /// member in the ring: report it (`missing` says what it lacks) and take
    /// it back, guarded by the resourceVersion read: the label goes, or
    /// returns to the controller's request (`"false"`) when the spec no
    /// longer wants the member and the request stands. Nothing is deleted.
    ClearStaleDecommission {
        rack: String,
        member: i32,
        missing: String,
        restore_request: bool,
        resource_version: String,
    },
    /// Remove a decommission request the sidecar has not claimed (or that
    /// Cassandra refused), guarded by the Service's resourceVersion.
    WithdrawDecommission {
        rack: String,
        member: i32,
        resource_version: String,
    },
    /// The highest member's decommission is confirmed: shrink the
    /// StatefulSet past it.
    ScaleDown { rack: String, replicas: i32 },
    /// A member above the replicas whose decommission was confirmed: delete
    /// its claims, then its Service (the Service holds the confirmation, so
    /// it goes last).
    DeleteLeftovers {
        rack: String,
        member: i32,
        claims: Vec<String>,
    },
    /// Record `replace=<address>` on a member's Service: its disk was lost,
    /// or its sidecar asked.
    StartReplace {
        rack: String,
        member: i32,
        address: String,
        resource_version: String,
    },
    /// A member being replaced still has claims on a lost disk: delete them,
    /// then its Pod, so that the StatefulSet makes both anew.
    DeleteLostDisk {
        rack: String,
        member: i32,
        claims: Vec<String>,
    },
    /// A member asked to leave lost its disk with its Node, and the ring
    /// (recorded after the request) no longer counts it: it was removed
    /// (`removenode`). Record that in its stead: `decommissioned=true` and a
    /// confirmation of the request marked `removed`, guarded by the
    /// resourceVersion read; the scale-down then proceeds as after a
    /// decommission.
    RecordRemoval {
        rack: String,
        member: i32,
        resource_version: String,
        request: String,
        host_id: Option<String>,
        claims: Vec<String>,
    },
    /// A member's decommission waits for the ring, and no other member has
    /// recorded its ring since the request: ask `witness` of `witness_rack`
    /// to record it again (`cassandra.rook.io/ring-record-requested`).
    RequestRingRecord {
        rack: String,
        member: i32,
        witness_rack: String,
        witness: i32,
    },
    /// The replaced member is ready: remove the `replace` record.
    FinishReplace { rack: String, member: i32 },
    /// Before a scale-up: record `cleanup-due` on the member Service of
    /// every member in the ring not marked yet (`(rack, member,
    /// resourceVersion)`), one patch per Service, each guarded by the
    /// resourceVersion read. The scale-up follows.
    MarkCleanupDue { members: Vec<(String, i32, String)> },
    /// Ask a member's sidecar to run a maintenance operation: write the
    /// request (`maintenance-request`), guarded by the resourceVersion
    /// read. `cycle`: a repair's cycle start (RFC 3339).
    RequestMaintenance {
        rack: String,
        member: i32,
        operation: Operation,
        cycle: Option<String>,
        resource_version: String,
    },
    /// The member's sidecar recorded the request `request` done: remove
    /// it (and, for a cleanup, the member's `cleanup-due`) in one patch
    /// guarded by the resourceVersion read. `cycle_completed`: a repair
    /// that was the last member's of the current cycle.
    FinishMaintenance {
        rack: String,
        member: i32,
        operation: Operation,
        request: String,
        resource_version: String,
        cycle_completed: bool,
    },
    /// Remove a request that is not done, guarded by the resourceVersion
    /// read: a repair stops (its sidecar keeps its progress for the next
    /// request of the cycle) because a topology change, roll or replace
    /// comes first, or the spec turned the operation off (`reason`).
    WithdrawMaintenance {
        rack: String,
        member: i32,
        operation: Operation,
        resource_version: String,
        reason: String,
    },
    /// Wait for the cluster to settle.
    Wait(WaitReason),
    /// Do nothing until something changes.
    Refuse(Refusal),
    /// Every rack has its members, all ready.
    Converged,
}

/// The decision once a scale-up's member Service exists: `observed`
/// shows the Service just created, and the scale-up it prepared is
/// returned when it is still what comes next. The caller carries it out in
/// the same reconcile, not after the Service's watch event and another
/// reconcile (each of which waits its turn among every cluster's).
pub fn after_member_service_created(
    spec: &ClusterSpec,
    observed: &mut Observed,
    rack: &str,
    member: i32,
) -> Option<Action> {
    observed
        .racks
        .get_mut(rack)?
        .members
        .entry(member)
        .or_default()
        .service
        .get_or_insert_with(ServiceObserved::default);
    match decide(spec, observed) {
        Action::ScaleUp {
            rack: next,
            replicas,
        } if next == rack && replicas == member + 1 => Some(Action::ScaleUp {
            rack: next,
            replicas,
        }),
        _ => None,
    }
}

/// Decides the next action.
pub fn decide(spec: &ClusterSpec, observed: &Observed) -> Action {
    // 1. Something stands in the way: nothing moves.
    if let Some(refusal) = guards::refusal(spec, observed) {
        return refusal;
    }
    // 2. A rack without its StatefulSet.
    if let Some(create) = topology::missing_statefulsets(spec, observed) {
        return create;
    }
    // 3. A rack's StatefulSet behind the spec (applied: `OnDelete`).
    if let Some(apply) = roll::outdated_templates(spec, observed) {
        return apply;
    }
    // 4. What confirmed decommissions left behind.
    if let Some(delete) = topology::leftovers(spec, observed) {
        return delete;
    }
    // 5. A running member without its Service.
    if let Some(create) = topology::missing_member_services(spec, observed) {
        return create;
    }
    // 6. Decommissions and replaces under way on running members, or a
    // member's record that holds the rest.
    let held = match topology::under_way(spec, observed) {
        ControlFlow::Break(action) => return action,
        ControlFlow::Continue(held) => held,
    };
    // 7. A restart under way (a roll took the member down): it comes back
    // on its rack's template, then its record goes.
    if let Some(restart) = roll::restart_under_way(spec, observed) {
        return restart;
    }
    // 8. A member whose Node or disk is lost is replaced, even while a
    // member's record holds the rest (or a cleanup runs; a repair is
    // withdrawn first).
    if let Some(replace) = replace::next_replace(spec, observed, held.as_ref().map(|h| h.1)) {
        if matches!(replace, Action::StartReplace { .. })
            && let Some(first) = maintenance::before_replace(spec, observed)
        {
            return first;
        }
        return replace;
    }
    // 9. Held by a member's record: no topology change, no roll.
    if let Some((refusal, _)) = held {
        return Action::Refuse(refusal);
    }
    // 10. One topology change at a time: every member Ready first, and no
    // Pod left above the replicas that did not confirm its decommission.
    if let Some(wait) = topology::not_ready_besides(spec, observed, &BTreeSet::new())
        .or_else(|| topology::unsettled_above_replicas(spec, observed))
    {
        return Action::Wait(wait);
    }
    // 11. Every member is Ready: roll the next one, if any runs an old
    // template, before any topology change starts (after the maintenance
    // under way: a cleanup or upgradesstables finishes, a repair stops).
    if let Some(restart) = roll::next_restart(spec, observed) {
        return maintenance::before_change(spec, observed, &restart).unwrap_or(restart);
    }
    // 12. One member more or less, towards the spec (the same; and before
    // a scale-up, the members that will give ranges away are marked for a
    // cleanup).
    match topology::scale(spec, observed) {
        // 13. Converged: the maintenance, one member at a time.
        Action::Converged => maintenance::next(spec, observed),
        step => maintenance::before_change(spec, observed, &step).unwrap_or(step),
    }
}

/// The major version in an image reference's tag (`cassandra:4.1.8` → 4);
/// `None` without a version tag (a digest, `latest`).
pub fn image_major(image: &str) -> Option<u32> {
    Version::of_image(image).map(|v| v.major)
}
