//! The Jolokia contract against the test world's fake: the same checks as
//! `tests/jolokia_contract.rs` runs against the real jolokia-core 1.7.1,
//! version by version, answered by the fake node's Jolokia
//! (`testworld::fake_cassandra`) over a ring kept by kubesim.
//!
//! The real peer's Java program configures its peers directly; here the
//! same rings are built through the ring model: nodes started (seeds join
//! at once), a keyspace of the contract's replication factor, a peer killed
//! (DN) and one left bootstrapping (UJ, its streaming longer than the test).
//! One kubesim per ring, as each ring has its own 10.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use testworld::fake_cassandra::jolokia::Identity;
use testworld::fake_cassandra::node::{FakeNode, RingClient, serve_jolokia};
use testworld::fake_cassandra::policy::Policy;
use testworld::fake_cassandra::ring_service::StartRequest;
use testworld::jolokia_contract::{self as contract, RingSpec};
use testworld::jolokia_real::CassandraLine;
use testworld::kubesim::{KubeSim, Options};
use testworld::ring::{NodeConfig, Version};

/// How long a decommission blocks (as the real peer is configured).
const BLOCKING: Duration = Duration::from_millis(2500);

/// A fake node's Jolokia over its own kubesim ring.
struct Peer {
    _sim: KubeSim,
    _server: tokio::task::JoinHandle<()>,
    url: String,
}

fn peers(spec: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    spec.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

async fn post(url: &str, body: Value) -> Value {
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
        .post(url)
        .body(body.to_string())
        .send()
        .await
        .expect("kubesim answers");
    let status = resp.status().as_u16();
    let value: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status < 300, "POST {url}: {status} {value}");
    value
}

/// Builds `ring` (this node 10.0.0.1, UN, rack1) with a keyspace of `rf`
/// and serves the fake Jolokia of 10.0.0.1.
async fn peer(
    line: CassandraLine,
    ring: &RingSpec,
    rf: usize,
    decommission: Duration,
    policy: Policy,
) -> Peer {
    let mut opts = Options::default();
    opts.ring.system_keyspaces = false;
    opts.ring.timing.decommission_ms = decommission.as_millis() as u64;
    // A joining peer stays joining for the test.
    opts.ring.timing.bootstrap_ms = 3_600_000;
    let sim = KubeSim::start(opts).await.expect("kubesim");
    let base = sim.sim_url();
    let release = line.release_version();
    let version = Version::parse(release).expect("a version");
    let mut all = vec![(
        ring.self_ip.clone(),
        "UN".to_string(),
        ring.self_rack.clone(),
    )];
    all.extend(ring.peers.iter().cloned());
    let seeds: Vec<&str> = all
        .iter()
        .filter(|(_, state, _)| !state.ends_with('J'))
        .map(|(ip, _, _)| ip.as_str())
        .collect();
    let start = |ip: &str, rack: &str| {
        let mut config = NodeConfig::new(
            &ring.cluster_name,
            ip,
            &ring.datacenter,
            rack,
            &seeds,
            &format!("/data/{ip}"),
        );
        config.num_tokens = ring.num_tokens;
        config.version = version;
        let url = format!("{base}/sim/ring/nodes");
        let body = serde_json::to_value(StartRequest::of(&config, release, true)).expect("json");
        async move {
            post(&url, body).await["host_id"]
                .as_str()
                .expect("id")
                .to_string()
        }
    };
    // Members first, then the keyspace, then the joining ones (which would
    // otherwise finish).
    let mut host_ids = Vec::new();
    for (ip, state, rack) in all.iter().filter(|p| !p.1.ends_with('J')) {
        host_ids.push((ip.clone(), state.clone(), start(ip, rack).await));
    }
    post(
        &format!("{base}/sim/ring/keyspaces"),
        json!({"name": "ks", "replication": {"class": "SimpleStrategy", "replication_factor": rf}}),
    )
    .await;
    for (ip, state, rack) in all.iter().filter(|p| p.1.ends_with('J')) {
        host_ids.push((ip.clone(), state.clone(), start(ip, rack).await));
    }
    for (_, state, host_id) in &host_ids {
        if state.starts_with('D') {
            post(&format!("{base}/sim/ring/nodes/{host_id}/kill"), json!({})).await;
        }
    }
    let self_id = host_ids
        .iter()
        .find(|(ip, _, _)| *ip == ring.self_ip)
        .map(|(_, _, h)| h.clone())
        .expect("self");
    // The real peer is configured with its view; here gossip has to tell
    // this node of the others first, as in a real cluster just started.
    let up: Vec<&str> = all
        .iter()
        .filter(|(_, state, _)| state.starts_with('U'))
        .map(|(ip, _, _)| ip.as_str())
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let gossip: Value = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a client")
            .get(format!("{base}/sim/ring/gossip"))
            .send()
            .await
            .expect("kubesim answers")
            .json()
            .await
            .expect("json");
        let view = gossip["views"]
            .as_array()
            .and_then(|views| views.iter().find(|v| v["host_id"] == json!(self_id)))
            .cloned()
            .unwrap_or_default();
        if up.iter().all(|ip| view["up"].get(*ip).is_some()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} does not see {up:?} up: {gossip}",
            ring.self_ip
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let node = Arc::new(FakeNode {
        ring: RingClient::new(&base),
        host_id: self_id,
        identity: Identity::new(release, 7000).expect("an identity"),
        storage_service_at: std::time::Instant::now(),
        policy,
        repairs: Default::default(),
        sstables: None,
        seeds: None,
        tls: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!(
        "http://{}/jolokia/",
        listener.local_addr().expect("an address")
    );
    Peer {
        _sim: sim,
        _server: tokio::spawn(serve_jolokia(listener, node)),
        url,
    }
}

async fn contract_for(line: CassandraLine) {
    let ring = RingSpec::of(
        line,
        &peers(&[
            ("10.0.0.2", "UN", "rack2"),
            ("10.0.0.3", "DN", "rack1"),
            ("10.0.0.4", "UJ", "rack3"),
        ]),
    );
    let healthy = RingSpec::of(
        line,
        &peers(&[("10.0.0.2", "UN", "rack2"), ("10.0.0.3", "UN", "rack3")]),
    );
    let first = peer(line, &ring, 3, BLOCKING, Policy::AllowAll).await;
    let staged = peer(line, &healthy, 1, BLOCKING, Policy::AllowAll).await;
    let direct = peer(line, &healthy, 1, BLOCKING, Policy::AllowAll).await;

    contract::check_protocol(&first.url, &ring).await;
    contract::check_client(&first.url, &ring).await;
    contract::check_nodetool_reads(&first.url, &ring).await;
    contract::check_failure_detector(&first.url, &ring).await;
    if line != CassandraLine::V3_11 {
        contract::check_decommission_refused(&first.url, line).await;
    }
    contract::check_drain(&first.url).await;
    tokio::join!(
        contract::check_decommission(&staged.url, &healthy, BLOCKING),
        contract::check_facade_decommission(&direct.url, BLOCKING),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_cassandra_3_11() {
    contract_for(CassandraLine::V3_11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_cassandra_4_1() {
    contract_for(CassandraLine::V4_1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_cassandra_5_0() {
    contract_for(CassandraLine::V5_0).await;
}

/// Under the sidecar's shipped Jolokia access policy the fake answers as the
/// real agent does (`jolokia_policy.rs`): what the operator uses works, the
/// rest is refused with Jolokia's 403s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_cassandra_policy() {
    let policy = || {
        Policy::load(Some(&format!(
            "file://{}",
            contract::shipped_policy().display()
        )))
    };
    assert!(matches!(policy(), Policy::Rules { .. }));
    for line in [CassandraLine::V3_11, CassandraLine::V4_1] {
        let ring = RingSpec::of(
            line,
            &peers(&[("10.0.0.2", "UN", "rack2"), ("10.0.0.3", "DN", "rack1")]),
        );
        let node = peer(line, &ring, 3, BLOCKING, policy()).await;
        contract::check_policy(&node.url, &ring).await;
        contract::check_drain(&node.url).await;
    }
    let healthy = RingSpec::of(
        CassandraLine::V4_1,
        &peers(&[("10.0.0.2", "UN", "rack2"), ("10.0.0.3", "UN", "rack3")]),
    );
    let node = peer(
        CassandraLine::V4_1,
        &healthy,
        1,
        Duration::from_millis(500),
        policy(),
    )
    .await;
    contract::check_facade_decommission(&node.url, Duration::from_millis(500)).await;
}
