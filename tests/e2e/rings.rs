//! Two Cassandra clusters side by side in one test world: each Cluster's
//! members gossip only with their own (Cassandra drops gossip of another
//! cluster name), so each has its own ring and its own data check.

use serde_json::json;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{cluster, secs, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_side_by_side_each_with_its_own_ring() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().start().await;
    for (name, version) in [("alpha", "3.11.6"), ("beta", "4.1.8")] {
        let half_a_cpu = json!({"resources": {"limits": {"cpu": "500m"}}});
        s.create(
            &cluster(name)
                .version(version)
                .rack("r", 2)
                .with_rack(half_a_cpu),
        )
        .await;
    }
    s.until_ready("alpha", 2, secs(180)).await;
    s.until_ready("beta", 2, secs(180)).await;

    let ring = s.sim().ring();
    let mut names = ring.clusters();
    names.sort();
    assert_eq!(names, ["alpha", "beta"]);
    let mut addresses = Vec::new();
    for name in ["alpha", "beta"] {
        let (up, members, clean) = ring
            .with_cluster(name, |r| {
                r.create_keyspace("ks", Replication::simple(2)).unwrap();
                r.write_keys("ks", name, 100, Consistency::All).unwrap();
                let status = r.status(None).unwrap();
                let up = status
                    .rows
                    .iter()
                    .filter(|row| row.status == NodeStatus::UN)
                    .count();
                let members: Vec<String> = r.nodes().map(|n| n.address.clone()).collect();
                (up, members, r.check())
            })
            .expect("a ring per cluster");
        assert_eq!(up, 2, "{name}: its own two members, none of the other's");
        assert_eq!(members.len(), 2, "{name}: {members:?}");
        assert!(clean.is_clean() && clean.keys == 100, "{name}: {clean}");
        addresses.extend(members);
    }
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 4, "no member in both rings");
    // Each ring's data check sees its own keys only.
    let alpha_keys = ring
        .with_cluster("alpha", |r| r.keyspace("ks").unwrap().keys.len())
        .unwrap();
    assert_eq!(alpha_keys, 100);
}
