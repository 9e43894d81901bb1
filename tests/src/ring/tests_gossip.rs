//! Gossip at model level: generations, and each node's lagging view of
//! the others (what a rolling restart has to wait for).

use super::tests::{addr, config, three_nodes};
use super::*;

/// Every (observer, subject) pair of `ids` sees the subject UP.
fn all_see_all(ring: &Ring, ids: &[HostId]) -> bool {
    ids.iter().all(|o| ids.iter().all(|s| ring.sees_up(o, s)))
}

/// The three-node ring, settled: every node sees every other UP.
fn settled() -> (Ring, Vec<HostId>) {
    let (mut ring, ids) = three_nodes(Version::V4_1);
    ring.advance(ring.options().timing.gossip_lag_ms);
    assert!(
        all_see_all(&ring, &ids),
        "{:?}",
        ring.gossip_disagreements()
    );
    assert!(ring.gossip_disagreements().is_empty());
    (ring, ids)
}

#[test]
fn a_restarted_node_is_seen_up_only_after_the_lag_and_sees_the_others_down_at_first() {
    let (mut ring, ids) = settled();
    let lag = ring.options().timing.gossip_lag_ms;
    assert_eq!(lag, 1_000, "the default lag");
    let old = ring.generation(&ids[1]).expect("a generation");
    ring.kill(&ids[1]).expect("kill");
    assert!(!ring.sees_up(&ids[0], &ids[1]), "down is seen at once");
    ring.start(&config(2, &["10.0.0.1"])).expect("restarts");
    let new = ring.generation(&ids[1]).expect("a generation");
    assert!(new > old, "{new} > {old}");

    // The global truth has it up at once; no observer does yet.
    assert!(ring.node(&ids[1]).expect("member").is_up());
    assert!(!ring.sees_up(&ids[0], &ids[1]));
    assert!(!ring.sees_up(&ids[2], &ids[1]));
    // It sees itself, and the others DOWN until it heard from them.
    assert!(ring.sees_up(&ids[1], &ids[1]));
    assert!(!ring.sees_up(&ids[1], &ids[0]));
    assert!(!ring.sees_up(&ids[1], &ids[2]));
    // The others still hold the old generation.
    let held = ring.endpoint_state(&ids[0], &ids[1]).expect("known");
    assert_eq!(held.generation, old);
    let own = ring.endpoint_state(&ids[1], &ids[1]).expect("itself");
    assert_eq!(own.generation, new);
    let disagreements = ring.gossip_disagreements();
    assert!(
        disagreements.contains(&format!("{} sees {} DOWN", addr(1), addr(2))),
        "{disagreements:?}"
    );

    // Not before half the lag, everyone by the whole lag.
    ring.advance(lag / 2 - 1);
    assert!(!ring.sees_up(&ids[0], &ids[1]));
    assert!(!ring.sees_up(&ids[1], &ids[2]));
    ring.advance(lag / 2 + 1);
    assert!(
        all_see_all(&ring, &ids),
        "{:?}",
        ring.gossip_disagreements()
    );
    assert_eq!(
        ring.endpoint_state(&ids[0], &ids[1])
            .expect("known")
            .generation,
        new
    );
    assert!(ring.gossip_disagreements().is_empty());
}

#[test]
fn views_differ_per_observer() {
    let (mut ring, ids) = settled();
    ring.kill(&ids[0]).expect("kill");
    ring.start(&config(1, &["10.0.0.1"])).expect("restarts");
    let generation = ring.generation(&ids[0]).expect("a generation");
    let lags: Vec<u64> = [&ids[1], &ids[2]]
        .iter()
        .map(|o| ring.gossip_lag(o, &ids[0], generation))
        .collect();
    assert_ne!(lags[0], lags[1], "two observers, two lags");
    let lag = ring.options().timing.gossip_lag_ms;
    assert!(lags.iter().all(|l| (lag / 2..=lag).contains(l)), "{lags:?}");
    // Between the two lags, one observer sees it UP and the other not.
    ring.advance(lags[0].min(lags[1]));
    let seen: Vec<bool> = [&ids[1], &ids[2]]
        .iter()
        .map(|o| ring.sees_up(o, &ids[0]))
        .collect();
    assert_eq!(
        seen,
        if lags[0] < lags[1] {
            [true, false]
        } else {
            [false, true]
        }
    );
    let views = ring.gossip_views();
    let of = |h: &str| views.iter().find(|v| v.host_id == h).expect("a view");
    assert_ne!(of(&ids[1]).up, of(&ids[2]).up);
    // A new generation draws new lags.
    assert_ne!(
        ring.gossip_lag(&ids[1], &ids[0], generation),
        ring.gossip_lag(&ids[1], &ids[0], generation + 1),
    );
}

#[test]
fn generations_follow_the_clock_and_always_grow() {
    let (mut ring, ids) = settled();
    let epoch = ring.options().epoch_s;
    // Started at model time 0.
    assert_eq!(ring.generation(&ids[0]), Some(epoch));
    // Restarted in the model's second 1, twice: the second restart still
    // takes a greater one.
    assert_eq!(ring.now_ms() / 1000, 1);
    for expected in [epoch + 1, epoch + 2] {
        ring.kill(&ids[0]).expect("kill");
        ring.start(&config(1, &["10.0.0.1"])).expect("restarts");
        assert_eq!(ring.generation(&ids[0]), Some(expected));
    }
    // Later, the clock's second.
    ring.advance(60_000);
    ring.kill(&ids[0]).expect("kill");
    assert_eq!(ring.generation(&ids[0]), Some(epoch + 2), "the last one");
    ring.start(&config(1, &["10.0.0.1"])).expect("restarts");
    let now_s = (ring.now_ms() / 1000) as i64;
    assert_eq!(ring.generation(&ids[0]), Some(epoch + now_s));
    // The data directory remembers it.
    let dir = ring.data_dir("pvc-1").expect("the directory");
    assert_eq!(dir.generation, Some(epoch + now_s));
}

#[test]
fn a_drained_or_stopped_node_is_seen_down_at_once_with_its_shutdown() {
    let (mut ring, ids) = settled();
    ring.drain(&ids[2]).expect("drain");
    assert!(!ring.sees_up(&ids[0], &ids[2]));
    let held = ring.endpoint_state(&ids[0], &ids[2]).expect("known");
    assert_eq!(held.status, GossipStatus::Shutdown);
    assert_eq!(held.heartbeat, HEARTBEAT_SHUTDOWN);
    // Still drained and running: it counts itself live.
    assert!(ring.sees_up(&ids[2], &ids[2]));

    ring.stop(&ids[1]).expect("stop");
    assert!(!ring.sees_up(&ids[0], &ids[1]));
    let held = ring.endpoint_state(&ids[0], &ids[1]).expect("known");
    assert_eq!(held.status, GossipStatus::Shutdown);
    // A killed one keeps its last status and heartbeat.
    ring.kill(&ids[0]).expect("kill");
    let held = ring.endpoint_state(&ids[2], &ids[0]).expect("known");
    assert!(
        matches!(held.status, GossipStatus::Normal { .. }),
        "{held:?}"
    );
    assert!(held.heartbeat < HEARTBEAT_SHUTDOWN);
    // Not running, a node sees nothing.
    assert!(!ring.sees_up(&ids[0], &ids[0]));
    assert_eq!(ring.gossip_views().len(), 1, "only the drained one runs");
}

#[test]
fn a_replacement_at_the_same_address_is_seen_up_after_its_hibernation() {
    let (mut ring, ids) = settled();
    let lag = ring.options().timing.gossip_lag_ms;
    ring.kill(&ids[2]).expect("kill");
    ring.wipe_data_dir("pvc-3");
    let mut c = config(3, &["10.0.0.1"]);
    c.replace_address_first_boot = Some(addr(3));
    let started = ring.start(&c).expect("replaces");
    assert_eq!(started.host_id, ids[2]);
    // Within the replacement's streaming (2 s).
    assert!(lag < ring.options().timing.replace_ms);
    ring.advance(lag);
    assert!(!ring.sees_up(&ids[0], &ids[2]), "hibernating");
    let held = ring.endpoint_state(&ids[0], &ids[2]).expect("known");
    assert_eq!(held.status, GossipStatus::Hibernate, "its state is heard");
    ring.finish(&ids[2]).expect("replaced");
    assert!(!ring.sees_up(&ids[0], &ids[2]), "NORMAL not heard yet");
    ring.advance(lag);
    assert!(
        all_see_all(&ring, &ids),
        "{:?}",
        ring.gossip_disagreements()
    );
    let held = ring.endpoint_state(&ids[0], &ids[2]).expect("known");
    assert!(matches!(held.status, GossipStatus::Normal { .. }));
    assert!(held.status_version > INITIAL_STATUS_VERSION);
}

#[test]
fn a_cut_network_keeps_one_observer_seeing_a_peer_down_until_healed() {
    let (mut ring, ids) = settled();
    ring.cut_gossip(&ids[0], &ids[1], true);
    assert!(
        !ring.sees_up(&ids[0], &ids[1]),
        "cut: DOWN for the observer"
    );
    assert!(ring.sees_up(&ids[1], &ids[0]), "one way only");
    assert!(ring.sees_up(&ids[2], &ids[1]), "the others still see it");
    ring.advance(10 * ring.options().timing.gossip_lag_ms);
    assert!(!ring.sees_up(&ids[0], &ids[1]), "time does not heal it");
    assert_eq!(
        ring.gossip_disagreements(),
        vec![format!("{} sees {} DOWN", addr(1), addr(2))]
    );
    ring.cut_gossip(&ids[0], &ids[1], false);
    assert!(ring.sees_up(&ids[0], &ids[1]), "healed");
    assert!(all_see_all(&ring, &ids));
}
