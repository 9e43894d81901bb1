//! Nodes, local SSDs and addresses in the simulated cluster, with real
//! processes: the local static provisioner's PVs (one per disk, none made
//! on demand: a Node whose disks are taken does not fit), a disk emptied
//! while its Node lives, a Released disk cleaned and published again,
//! `persistentVolumeClaimRetentionPolicy`, and random ClusterIPs.

use serde_json::{Value, json};
use std::time::Duration;
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::sim::disks;
use testworld::kubesim::store::{DeleteOptions, Store, Subresource, Target, WriteOptions};
use testworld::kubesim::{KubeSim, Options};

#[allow(dead_code)]
mod support;
use support::{db_statefulset, pod_ready as ready, start_sim};

fn t(group: &str, plural: &str, ns: Option<&str>) -> Target {
    Target::new(group, "v1", plural, ns)
}

/// The `db` set, its claims deleted with it and with each scaled-away
/// member.
fn statefulset(replicas: u64) -> Value {
    let mut sts = db_statefulset(replicas);
    sts["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenScaled": "Delete", "whenDeleted": "Delete"});
    sts
}

fn claim(store: &Store, name: &str) -> Option<Value> {
    store
        .get(&t("", "persistentvolumeclaims", Some("default")), name)
        .ok()
}

fn pv(store: &Store, name: &str) -> Option<Value> {
    store.get(&t("", "persistentvolumes", None), name).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_ssds_as_the_static_provisioner_publishes_them() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a", "b"], |o| {
        o.max_grace = Some(Duration::from_secs(2));
        o.local_ssds = 1;
    })
    .await;
    let store = sim.store().clone();
    let w = WriteOptions::default();

    // One PV per Node's disk, Available, named as the provisioner names it.
    for node in ["node-a-0", "node-b-0"] {
        let name = disks::pv_name(node, "/mnt/disks/ssd0");
        let published = until("the disk's PV", 10, || {
            pv(&store, &name).filter(|p| s(p, "/status/phase") == "Available")
        })
        .await;
        assert_eq!(disks::node_of_pv(&published), Some(node));
        assert_eq!(published["spec"]["capacity"]["storage"], "375Gi");
    }

    // Three members, two disks: the third does not fit anywhere.
    store
        .create(
            &t("apps", "statefulsets", Some("default")),
            statefulset(3),
            &w,
        )
        .unwrap();
    until("two members ready", 60, || {
        let n = (0..3)
            .filter(|i| {
                store
                    .get(&pods(), &format!("db-{i}"))
                    .is_ok_and(|p| ready(&p))
            })
            .count();
        (n == 2).then_some(())
    })
    .await;
    let (pending, message) = until("one member unschedulable", 30, || {
        (0..3).find_map(|i| {
            let p = store.get(&pods(), &format!("db-{i}")).ok()?;
            let cond = p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")?
                .clone();
            Some((format!("db-{i}"), s(&cond, "/message").to_string()))
        })
    })
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    let running: Vec<String> = (0..3)
        .map(|i| format!("db-{i}"))
        .filter(|p| *p != pending)
        .collect();

    // A disk swapped under a live Node: empty, behind the same PV and claim.
    let first = &running[0];
    let c = claim(&store, &format!("data-{first}")).unwrap();
    let bound = pv(&store, s(&c, "/spec/volumeName")).unwrap();
    let dir = disks::host_dir_of_pv(work.path(), &bound);
    assert!(dir.join("file").is_file());
    let node = disks::node_of_pv(&bound).unwrap().to_string();
    let url = format!("{}/sim/nodes/{node}/disks/0/wipe", sim.sim_url());
    let resp = reqwest::Client::new().post(&url).send().await.unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.text().await.unwrap()
    );
    assert!(!dir.join("file").exists(), "the disk is empty");
    let after = claim(&store, &format!("data-{first}")).unwrap();
    assert_eq!(after["metadata"]["uid"], c["metadata"]["uid"]);
    assert_eq!(after["spec"]["volumeName"], c["spec"]["volumeName"]);
    let missing = reqwest::Client::new()
        .post(format!("{}/sim/nodes/node-z-9/disks/0/wipe", sim.sim_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    // whenScaled: Delete. Scaling to one removes the claims of the
    // condemned members; their disks are cleaned and published again,
    // empty and Available under the same PV name.
    let condemned_pvs: Vec<String> = running
        .iter()
        .filter(|p| *p != "db-0")
        .map(|p| {
            let c = claim(&store, &format!("data-{p}")).unwrap();
            s(&c, "/spec/volumeName").to_string()
        })
        .collect();
    assert!(!condemned_pvs.is_empty());
    let sts_t = t("apps", "statefulsets", Some("default"));
    let mut sts = store.get(&sts_t, "db").unwrap();
    sts["spec"]["replicas"] = json!(1);
    store
        .update(&sts_t, "db", sts, Subresource::Main, &w)
        .unwrap();
    for condemned in ["data-db-1", "data-db-2"] {
        until("the condemned member's claim deleted", 30, || {
            claim(&store, condemned).is_none().then_some(())
        })
        .await;
    }
    for name in &condemned_pvs {
        let republished = until("the released disk published again", 30, || {
            pv(&store, name).filter(|p| {
                s(p, "/status/phase") == "Available" && p.pointer("/spec/claimRef").is_none()
            })
        })
        .await;
        let dir = disks::host_dir_of_pv(work.path(), &republished);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the provisioner cleaned the disk"
        );
    }

    // whenDeleted: Delete. The set goes, and the last claim with it.
    store
        .delete(
            &t("apps", "statefulsets", Some("default")),
            "db",
            &DeleteOptions::default(),
        )
        .unwrap();
    until("the last claim deleted with its set", 30, || {
        claim(&store, "data-db-0").is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_service_gets_a_new_random_cluster_ip() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let store = sim.store().clone();
    let svcs = t("", "services", Some("default"));
    let spec = json!({"metadata": {"name": "member-0"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 7000}]}});
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..5 {
        let created = store
            .create(&svcs, spec.clone(), &WriteOptions::default())
            .unwrap();
        let ip = s(&created, "/spec/clusterIP").to_string();
        let octets: Vec<u32> = ip.split('.').map(|o| o.parse().unwrap()).collect();
        assert!(octets[0] == 10 && (96..112).contains(&octets[1]), "{ip}");
        seen.insert(ip);
        store
            .delete(&svcs, "member-0", &DeleteOptions::default())
            .unwrap();
    }
    assert_eq!(seen.len(), 5, "never the old address again: {seen:?}");
}
