//! Writes keep working through topology changes: a client writing at
//! QUORUM with RF 3 all through a scale-up sees no failed write, and every
//! key it wrote is fully replicated at the end.

use std::time::Duration;

use serde_json::json;
use testworld::fake_cassandra::writer::Writer;
use testworld::ring::{Consistency, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{cluster, secs, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_writer_sees_no_failure_through_a_scale_up() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().start().await;
    let c = cluster("c")
        .rack("r", 3)
        .with_rack(json!({"resources": {"limits": {"cpu": "500m"}}}));
    s.create(&c).await;
    s.until_ready("c", 3, secs(180)).await;
    let ring = s.sim().ring().clone();
    ring.with(|r| r.create_keyspace("app", Replication::simple(3)))
        .unwrap();
    let writer = Writer::start(
        ring,
        Some("c".into()),
        "app",
        "w-",
        Consistency::Quorum,
        Duration::from_millis(20),
    );
    // The writer writes before, during and after the scale-up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.patch_cluster("c", c.with_rack(json!({"members": 4})).racks_patch())
        .await;
    s.until_ready("c", 4, secs(120)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = writer.stop();
    assert_eq!(report.failed, 0, "writes failed: {:?}", report.errors);
    assert!(report.written > 50, "the writer ran: {report:?}");
    s.ring().assert_intact(4);
}
