//! TLS on real Apache Cassandra 4.1 (issue 32): a Cluster that asks for
//! internode TLS and required client TLS comes up with certificates of its
//! own authority, made by the controller from each member's request
//! (its key never leaves its Pod); the members form their ring over TLS
//! (Cassandra logs its listener "encrypted", not "optionally"); a client
//! that trusts the published CA (`<cluster>-ca`) reads and writes, while
//! one in clear text or trusting another authority is refused; and with
//! a member certificate lifetime of 90 s, each member's certificate is
//! renewed and served while an application writes at QUORUM, with no
//! failed request and no container restarted. Two members, the keyspace
//! on both: QUORUM needs each.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use serde_json::json;
use testworld::cql::{CaBundle, Client, ConnectOptions, served_certificate};

use crate::real::{brought_up, cluster_ips, member, real_cluster, real_image};
use crate::real_data::{CQL_PORT, app_netns, stop_and_check, until_driver_sees};
use crate::scenario::{container_pid, secs, setup};

/// Two members (a third JVM would add a minute of CI for nothing TLS
/// does differently).
const MEMBERS: i32 = 2;

/// The member certificates' lifetime: renewed after 60 s.
const LIFETIME: &str = "90s";

/// The serial numbers of the certificates signed for each member, by Pod
/// name (the request names are `cassandra.<namespace>.<pod>.<key digest>`),
/// as lower-case hex without leading zeros.
async fn issued_serials(
    requests: &Api<CertificateSigningRequest>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut issued: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let list = requests
        .list(&ListParams::default().labels("cassandra.rook.io/cluster=c"))
        .await
        .unwrap();
    for csr in list.items {
        let name = csr.metadata.name.unwrap_or_default();
        let pod = name.split('.').nth(2).unwrap_or_default().to_string();
        let Some(chain) = csr.status.and_then(|s| s.certificate) else {
            continue;
        };
        let (_, pem) = x509_parser::pem::parse_x509_pem(&chain.0).unwrap();
        let leaf = pem.parse_x509().unwrap();
        issued
            .entry(pod)
            .or_default()
            .insert(normal_serial(&leaf.serial.to_str_radix(16)));
    }
    issued
}

fn normal_serial(hex: &str) -> String {
    let lower = hex.to_ascii_lowercase().replace(':', "");
    let trimmed = lower.trim_start_matches('0');
    if trimmed.is_empty() {
        "0".into()
    } else {
        trimmed.to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_members_speak_tls_with_their_own_keys_and_renew_certificates_without_a_restart() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = setup()
        .options(|o| o.real_cassandra = Some(real_image()))
        .controller_args(&["--member-certificate-lifetime", LIFETIME])
        .start()
        .await;
    scenario
        .create(
            real_cluster(3).with_spec(
                json!({"security": {"tls": {"internode": "all", "client": "required"}}}),
            ),
        )
        .await;
    scenario.until_ready("c", MEMBERS, secs(600)).await;
    let names: Vec<String> = (0..MEMBERS).map(member).collect();
    let ips = cluster_ips(&scenario, &names).await;
    let ips_text: Vec<String> = ips.iter().map(ToString::to_string).collect();
    brought_up(&scenario, &names, &ips_text).await;
    for name in &names {
        let logs = scenario.pod_logs(name);
        assert!(
            logs.contains("encryption: encrypted"),
            "{name}: Cassandra's internode listener is not encrypted:\n{}",
            &logs[logs.len().saturating_sub(3000)..]
        );
        assert!(!logs.contains("optionally encrypted"), "{name}");
    }

    let configmaps: Api<ConfigMap> = scenario.api();
    let published = configmaps.get("c-ca").await.unwrap();
    let ca = CaBundle(published.data.unwrap()["ca.crt"].clone().into_bytes());
    let netns = app_netns(&scenario).await;
    let contact: Vec<SocketAddr> = ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, CQL_PORT))
        .collect();

    // Clear text, or trust in another authority: refused.
    let plain = Client::connect(netns.clone(), &contact).await;
    assert!(plain.is_err(), "a clear-text client was let in");
    let other = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap()
        .pem();
    let stranger = ConnectOptions {
        tls: Some(CaBundle(other.clone().into_bytes())),
        credentials: None,
    };
    assert!(
        Client::connect_with(netns.clone(), &contact, &stranger)
            .await
            .is_err(),
        "a client trusting another authority was let in"
    );
    let refused = served_certificate(&netns, contact[0], &CaBundle(other.into_bytes()))
        .await
        .unwrap_err();
    assert!(refused.contains("certificate verify failed"), "{refused}");

    // With the cluster's CA: reads and writes, all the while the
    // certificates are renewed.
    let options = ConnectOptions {
        tls: Some(ca.clone()),
        credentials: None,
    };
    let client = Client::connect_with(netns.clone(), &contact, &options)
        .await
        .unwrap();
    until_driver_sees(&scenario, &client, &ips).await;
    // Replicated on both: QUORUM is every member, so a renewal that broke
    // a member's connections would fail requests.
    let table = client
        .keyspace("secure", &[("dc", MEMBERS.unsigned_abs())])
        .await
        .unwrap();
    let writer = table.writer("renewals").unwrap();

    let mut first = BTreeMap::new();
    for address in &contact {
        let served = served_certificate(&netns, *address, &ca).await.unwrap();
        first.insert(*address, served);
    }
    let pods: Api<Pod> = scenario.api();
    let mut pids = BTreeMap::new();
    for name in &names {
        pids.insert(name.clone(), container_pid(&pods.get(name).await.unwrap()));
    }
    let requests: Api<CertificateSigningRequest> = Api::all(scenario.client());

    // Each member renews (a new key, a new request signed by the
    // controller) and serves the new certificate on its client port.
    let mut renewed = BTreeMap::new();
    for address in &contact {
        let was = first[address].clone();
        let now = scenario
            .until(
                &format!("{address} to serve a renewed certificate"),
                secs(150),
                || async {
                    match served_certificate(&netns, *address, &ca).await {
                        Ok(served) if served != was => Ok(served),
                        Ok(same) => Err(format!("still {same:?}")),
                        Err(e) => Err(e),
                    }
                },
            )
            .await;
        eprintln!("{address}: {was:?} -> {now:?}");
        renewed.insert(*address, (was, now));
    }
    let issued = issued_serials(&requests).await;
    for (name, ip) in names.iter().zip(&ips) {
        let (was, now) = &renewed[&SocketAddr::new(*ip, CQL_PORT)];
        let theirs = issued.get(name).cloned().unwrap_or_default();
        for served in [was, now] {
            assert!(
                theirs.contains(&normal_serial(&served.serial)),
                "{name} serves {served:?}, which no request of its own was issued: {theirs:?}"
            );
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;

    // No container restarted: the same database processes serve the new
    // certificates.
    for name in &names {
        let pod = pods.get(name).await.unwrap();
        assert_eq!(
            container_pid(&pod),
            pids[name],
            "{name}: its container restarted"
        );
        let restarts: i32 = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 0, "{name}");
    }
    stop_and_check(writer, &table, &BTreeMap::new()).await;
}
