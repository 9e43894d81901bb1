//! The full outage: every member Pod of a converged cluster deleted at
//! once (a zone's power lost, a careless `kubectl delete pods --all`). The
//! StatefulSet brings them back one at a time (`OrderedReady`); each member
//! has its data and must come back as itself (same host ID, no bootstrap),
//! without losing a key.

use std::collections::BTreeMap;
use std::future::ready;

use serde_json::json;
use testworld::ring::{Consistency, Replication};

use crate::common::FAKE_WORLDS;
use crate::scenario::{cluster, secs, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_deleted_at_once_comes_back_as_itself() {
    let _one = FAKE_WORLDS.lock().await;
    let s = setup().start().await;
    // On the Nodes' local disks: a member's data stays on its Node.
    let local_disks = json!({"storage": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"storageClassName": "local-disks", "resources": {"requests": {"storage": "1Gi"}}}}]}});
    s.create(&cluster("c").rack("r", 3).with_rack(local_disks))
        .await;
    s.until_ready("c", 3, secs(180)).await;
    s.ring()
        .write("ks", Replication::simple(3), 300, Consistency::Quorum);
    let members: Vec<String> = (0..3).map(|i| format!("c-dc-r-{i}")).collect();
    // Who each member is: its address (ClusterIP) and host ID.
    let mut identities = BTreeMap::new();
    for member in &members {
        let ip = s.service(member).await.spec.unwrap().cluster_ip.unwrap();
        let host = s
            .sim()
            .ring()
            .with(|r| r.node_by_address(&ip).map(|n| n.host_id.clone()))
            .expect("a member of the ring");
        identities.insert(ip, host);
    }

    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    s.delete_pods(&members).await;
    s.until("the outage (members down)", secs(60), || {
        ready(s.ring().up() < 3)
    })
    .await;

    // Back within the time three restarts take, not a deadlock.
    s.until_ready("c", 3, secs(120)).await;
    s.ring().assert_intact(3);
    for (ip, host) in &identities {
        let now = s
            .sim()
            .ring()
            .with(|r| r.node_by_address(ip).map(|n| n.host_id.clone()));
        assert_eq!(now.as_ref(), Some(host), "{ip} came back as itself");
    }
    let nodes = s.sim().ring().with(|r| r.nodes().count());
    assert_eq!(
        nodes,
        3,
        "no member joined as a new node\n{}",
        s.ring().text()
    );
}
