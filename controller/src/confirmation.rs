//! What a `decommissioned=true` on a member Service is worth (DESIGN.md
//! section 5): a decommission counts as confirmed only when the controller
//! asked this member to leave (its request record), the sidecar answered
//! that request (its confirmation names it, and the host ID of the node
//! that left), and the ring agrees (another member's record of its ring,
//! made after the request, no longer counts the node among the token
//! owners). The label alone is never enough: several principals can write
//! it (the member's own token, anyone who may patch Services, a GitOps
//! tool re-applying an old manifest, a restore of objects from a backup).
//!
//! One judgement for the caches (decide) and for the fresh reads taken
//! just before a StatefulSet shrinks or a claim is deleted (reconcile).
//! Pure.
//!
//! The ring's record must be newer than the request, not than the
//! confirmation: Cassandra announces that the node left, and the others drop
//! it from their token metadata, a ring delay before the leaving node's own
//! operation mode reads DECOMMISSIONED, and a sidecar records its ring only
//! when it changes; so the records that say the node left are made before
//! the confirmation. A record made after the confirmation that still counts
//! the node contradicts it.

use crds::contract::{DecommissionConfirmation, DecommissionRequest, GossipView, parse_time};
use k8s_openapi::jiff::Timestamp;

/// The judgement of a `decommissioned=true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Asked, answered, and the ring agrees: the member left the ring.
    Confirmed,
    /// Asked and answered; the ring has not said so yet: `why`.
    Pending(String),
    /// Asked and answered; no other member has recorded its ring since the
    /// request (a sidecar records only what changes: ask one to).
    Unrecorded,
    /// Not a decommission: what is missing or contradicts it.
    Stale(String),
}

/// What the judgement reads of the member itself.
#[derive(Debug, Clone, Copy)]
pub struct Leaving<'a> {
    /// Its address in the ring (its member Service's ClusterIP).
    pub address: Option<&'a str>,
    /// The controller's request on its Service.
    pub request: Option<&'a DecommissionRequest>,
    /// The sidecar's confirmation on its Service.
    pub confirmation: Option<&'a DecommissionConfirmation>,
    /// Its own last record of the ring (it names its host ID).
    pub own_record: Option<&'a GossipView>,
    /// Its Pod is Ready: its node is NORMAL, in the ring.
    pub ready: bool,
}

impl Leaving<'_> {
    /// The host ID of the node, from the first record that names it.
    fn host_id(&self) -> Option<&str> {
        self.request
            .and_then(|r| r.host_id.as_deref())
            .or_else(|| self.confirmation.and_then(|c| c.host_id.as_deref()))
            .or_else(|| self.own_record.and_then(|g| g.host_id.as_deref()))
    }

    /// Whether some other member's ring counts the node among the token
    /// owners (whenever recorded), or its Pod is Ready.
    pub fn in_ring<'g>(&self, others: impl IntoIterator<Item = &'g GossipView>) -> bool {
        self.ready
            || others
                .into_iter()
                .any(|view| view.counts_owner(self.address, self.host_id()) == Some(true))
    }
}

/// Judges a `decommissioned=true` on `member` against the records of the
/// other members (`others`: every other member's last record of its ring).
pub fn judge<'g>(
    member: &Leaving<'_>,
    others: impl IntoIterator<Item = &'g GossipView>,
) -> Verdict {
    let Some(request) = member.request else {
        return Verdict::Stale("no decommission request of the controller".into());
    };
    let Some(confirmation) = member.confirmation else {
        return Verdict::Stale(format!(
            "no confirmation of the member's sidecar answers request {}",
            request.id
        ));
    };
    if confirmation.request != request.id {
        return Verdict::Stale(format!(
            "the confirmation answers request {}, not the controller's {}",
            confirmation.request, request.id
        ));
    }
    if let Some(asked) = request.host_id.as_deref()
        && confirmation.host_id.as_deref() != Some(asked)
    {
        return Verdict::Stale(format!(
            "the confirmation names host ID {}, the request {asked}",
            confirmation.host_id.as_deref().unwrap_or("none")
        ));
    }
    if member.ready {
        return Verdict::Stale("the member is Ready: its node serves in the ring".into());
    }
    let (Some(requested), Some(confirmed)) = (
        parse_time(&request.requested_at),
        parse_time(&confirmation.confirmed_at),
    ) else {
        return Verdict::Stale("the request or the confirmation has no readable time".into());
    };
    let mut agrees = false;
    let mut counted_before = None;
    for (at, counts) in rings_since(member, requested, others) {
        match counts {
            None => {}
            Some(false) => agrees = true,
            Some(true) if at > confirmed => {
                return Verdict::Stale(format!(
                    "the ring still counts the node: a member's record made at {at}, after the confirmation, lists it among the token owners"
                ));
            }
            Some(true) => counted_before = Some(at),
        }
    }
    match (agrees, counted_before) {
        (true, _) => Verdict::Confirmed,
        (false, Some(at)) => Verdict::Pending(format!(
            "the ring still counted the node when last recorded ({at})"
        )),
        (false, None) => Verdict::Unrecorded,
    }
}

/// Judges a member asked to leave whose disk was lost with its Node (it
/// cannot answer: the node is gone for good): it left the ring only when
/// another member's ring, recorded after the request, no longer counts it
/// (someone ran `nodetool removenode`), and no ring recorded after the
/// request still does. `Pending` while one does.
pub fn judge_removed<'g>(
    member: &Leaving<'_>,
    others: impl IntoIterator<Item = &'g GossipView>,
) -> Verdict {
    let Some(request) = member.request else {
        return Verdict::Stale("no decommission request of the controller".into());
    };
    let Some(requested) = parse_time(&request.requested_at) else {
        return Verdict::Stale("the request has no readable time".into());
    };
    let mut agrees = false;
    for (at, counts) in rings_since(member, requested, others) {
        match counts {
            None => {}
            Some(false) => agrees = true,
            Some(true) => {
                return Verdict::Pending(format!(
                    "the ring still counts the node (a member's record made at {at})"
                ));
            }
        }
    }
    if agrees {
        Verdict::Confirmed
    } else {
        Verdict::Unrecorded
    }
}

/// The other members' ring records made after `requested`, each with
/// its time and whether it counts the member among the token owners
/// (`None`: a record without owners says nothing).
fn rings_since<'a, 'g: 'a>(
    member: &'a Leaving<'a>,
    requested: Timestamp,
    others: impl IntoIterator<Item = &'g GossipView> + 'a,
) -> impl Iterator<Item = (Timestamp, Option<bool>)> + 'a {
    let (address, host_id) = (member.address, member.host_id());
    others.into_iter().filter_map(move |view| {
        let at = view.at.as_deref().and_then(parse_time)?;
        (at > requested).then(|| (at, view.counts_owner(address, host_id)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASKED: &str = "2026-11-27T10:00:00Z";
    const BEFORE: &str = "2026-11-27T09:59:00Z";
    const LEFT: &str = "2026-11-27T10:01:00Z";
    const ANSWERED: &str = "2026-11-27T10:02:00Z";
    const AFTER: &str = "2026-11-27T10:03:00Z";

    fn request(id: &str, host_id: Option<&str>) -> DecommissionRequest {
        DecommissionRequest {
            id: id.into(),
            pod_uid: Some("uid-2".into()),
            host_id: host_id.map(str::to_string),
            requested_at: ASKED.into(),
        }
    }

    fn confirmation(request: &str, host_id: Option<&str>) -> DecommissionConfirmation {
        DecommissionConfirmation {
            request: request.into(),
            host_id: host_id.map(str::to_string),
            confirmed_at: ANSWERED.into(),
            removed: None,
        }
    }

    /// Another member's ring, recorded at `at`, with these owners.
    fn ring(at: &str, owners: &[(&str, &str)]) -> GossipView {
        GossipView {
            owners: Some(
                owners
                    .iter()
                    .map(|(a, h)| (a.to_string(), h.to_string()))
                    .collect(),
            ),
            at: Some(at.into()),
            ..GossipView::default()
        }
    }

    const WITHOUT: &[(&str, &str)] = &[("10.96.0.0", "h0"), ("10.96.0.1", "h1")];
    const WITH: &[(&str, &str)] = &[
        ("10.96.0.0", "h0"),
        ("10.96.0.1", "h1"),
        ("10.96.0.2", "h2"),
    ];

    #[test]
    fn a_decommission_is_confirmed_by_the_request_the_answer_and_the_ring() {
        let asked = request("r1", Some("h2"));
        let answered = confirmation("r1", Some("h2"));
        let member = |request, confirmation, ready| Leaving {
            address: Some("10.96.0.2"),
            request,
            confirmation,
            own_record: None,
            ready,
        };
        let stale = |v: Verdict| matches!(v, Verdict::Stale(_));
        let pending = |v: Verdict| matches!(v, Verdict::Pending(_));
        let genuine = member(Some(&asked), Some(&answered), false);
        // (what, verdict)
        let cases: Vec<(&str, bool)> = vec![
            (
                "asked, answered, the ring dropped it after the request",
                judge(&genuine, &[ring(LEFT, WITHOUT)]) == Verdict::Confirmed,
            ),
            (
                "one member's ring is enough, if none made later contradicts it",
                judge(&genuine, &[ring(LEFT, WITHOUT), ring(LEFT, WITH)]) == Verdict::Confirmed,
            ),
            (
                "a label without a request: stale",
                stale(judge(
                    &member(None, Some(&answered), false),
                    &[ring(LEFT, WITHOUT)],
                )),
            ),
            (
                "a request without a confirmation: stale",
                stale(judge(
                    &member(Some(&asked), None, false),
                    &[ring(LEFT, WITHOUT)],
                )),
            ),
            (
                "a confirmation of another request: stale",
                stale(judge(
                    &member(Some(&asked), Some(&confirmation("r0", Some("h2"))), false),
                    &[ring(LEFT, WITHOUT)],
                )),
            ),
            (
                "a confirmation by another node: stale",
                stale(judge(
                    &member(Some(&asked), Some(&confirmation("r1", Some("h9"))), false),
                    &[ring(LEFT, WITHOUT)],
                )),
            ),
            (
                "a Ready member: stale, whatever the records say",
                stale(judge(
                    &member(Some(&asked), Some(&answered), true),
                    &[ring(LEFT, WITHOUT)],
                )),
            ),
            (
                "the ring counts it in a record made after the confirmation: stale",
                stale(judge(&genuine, &[ring(LEFT, WITHOUT), ring(AFTER, WITH)])),
            ),
            (
                "the ring counts it by host ID under another address: stale",
                stale(judge(
                    &genuine,
                    &[ring(AFTER, &[("10.96.0.0", "h0"), ("10.96.0.9", "h2")])],
                )),
            ),
            (
                "a ring recorded before the request says nothing: unrecorded",
                judge(&genuine, &[ring(BEFORE, WITHOUT)]) == Verdict::Unrecorded,
            ),
            (
                "a ring that still counted it before the confirmation: pending",
                pending(judge(&genuine, &[ring(LEFT, WITH)])),
            ),
            (
                "a record that names no owners says nothing: unrecorded",
                judge(
                    &genuine,
                    &[GossipView {
                        at: Some(LEFT.into()),
                        ..GossipView::default()
                    }],
                ) == Verdict::Unrecorded,
            ),
            (
                "no other record: unrecorded",
                judge(&genuine, &[]) == Verdict::Unrecorded,
            ),
        ];
        for (what, holds) in cases {
            assert!(holds, "{what}");
        }
    }

    #[test]
    fn a_request_without_a_host_id_is_answered_by_any_node_the_ring_dropped() {
        let asked = request("r1", None);
        let answered = confirmation("r1", Some("h2"));
        let member = Leaving {
            address: Some("10.96.0.2"),
            request: Some(&asked),
            confirmation: Some(&answered),
            own_record: None,
            ready: false,
        };
        assert_eq!(judge(&member, &[ring(LEFT, WITHOUT)]), Verdict::Confirmed);
        // The host ID the confirmation names is looked for in the ring too.
        assert!(matches!(
            judge(&member, &[ring(AFTER, &[("10.96.0.7", "h2")])]),
            Verdict::Stale(_)
        ));
    }

    #[test]
    fn a_member_lost_while_leaving_left_once_the_ring_recorded_after_the_request_drops_it() {
        let asked = request("r1", Some("h2"));
        let member = Leaving {
            address: Some("10.96.0.2"),
            request: Some(&asked),
            confirmation: None,
            own_record: None,
            ready: false,
        };
        assert_eq!(
            judge_removed(&member, &[ring(LEFT, WITHOUT)]),
            Verdict::Confirmed
        );
        assert!(matches!(
            judge_removed(&member, &[ring(LEFT, WITHOUT), ring(AFTER, WITH)]),
            Verdict::Pending(_)
        ));
        assert_eq!(
            judge_removed(&member, &[ring(BEFORE, WITHOUT)]),
            Verdict::Unrecorded
        );
        let bare = Leaving {
            request: None,
            ..member
        };
        assert!(matches!(
            judge_removed(&bare, &[ring(LEFT, WITHOUT)]),
            Verdict::Stale(_)
        ));
    }

    #[test]
    fn a_member_is_in_the_ring_while_ready_or_counted_by_another() {
        let member = |ready| Leaving {
            address: Some("10.96.0.2"),
            request: None,
            confirmation: None,
            own_record: None,
            ready,
        };
        assert!(member(true).in_ring(&[]));
        assert!(member(false).in_ring(&[ring(BEFORE, WITH)]));
        assert!(!member(false).in_ring(&[ring(BEFORE, WITHOUT)]));
        assert!(!member(false).in_ring(&[]));
    }
}
