//! Password authentication on real Apache Cassandra 4.1 (issue 32), with
//! TLS between members and for clients as a secure cluster runs: the
//! operator makes the superuser Secret (`c-superuser`, a random
//! password), creates that role through the default superuser of the new
//! ring, then takes login and superuser away from the default one; a
//! client without credentials, or with the default ones, is refused,
//! while the Secret's role reads and writes over TLS. `system_auth`
//! follows the datacenter's members: NetworkTopologyStrategy at 2 once two
//! members run (recorded on the Cluster once its rows were read at ALL),
//! lowered to 1 before the decommission of the second, which Cassandra
//! would refuse otherwise, and the decommission goes through.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::api::{Api, ListParams};
use serde_json::json;
use testworld::cql::{CaBundle, Client, ConnectOptions, Consistency};

use crate::real::{cluster_ips, member, real_cluster, real_image};
use crate::real_data::{CQL_PORT, app_netns, until_driver_sees};
use crate::scenario::{secs, setup};

/// The Cluster's record of the system_auth replication it read at ALL.
const RECORD: &str = "cassandra.rook.io/system-auth-replication";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_members_require_the_operators_superuser_and_system_auth_follows_the_members() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = setup()
        .options(|o| o.real_cassandra = Some(real_image()))
        .start()
        .await;
    scenario
        .create(real_cluster(2).with_spec(json!({"security": {
            "tls": {"internode": "all", "client": "required"},
            "authentication": {"enabled": true}}})))
        .await;
    scenario.until_ready("c", 2, secs(600)).await;

    // The Secret the operator made: Kubernetes' basic-auth type, labelled
    // with the Cluster but not owned by it (it outlives the Cluster, as
    // the data volumes whose roles it logs in to may), a role named after
    // it and a random password.
    let secrets: Api<Secret> = scenario.api();
    let secret = secrets.get("c-superuser").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(secret.metadata.owner_references, None);
    assert_eq!(
        secret
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("cassandra.rook.io/cluster")
            .map(String::as_str),
        Some("c")
    );
    let data = secret.data.unwrap();
    let field = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    let (username, password) = (field("username"), field("password"));
    assert_eq!(username, "c-superuser");
    assert!(
        password.len() >= 32 && password.chars().all(|c| c.is_ascii_alphanumeric()),
        "{password:?}"
    );

    // Two members: system_auth at 2 in the datacenter, recorded.
    let clusters = scenario.clusters();
    scenario
        .until("system_auth recorded at 2 replicas", secs(180), || async {
            let c = clusters.get("c").await.map_err(|e| e.to_string())?;
            match c.metadata.annotations.unwrap_or_default().get(RECORD) {
                Some(v) if v == "2" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;

    let names: Vec<String> = (0..2).map(member).collect();
    let ips = cluster_ips(&scenario, &names).await;
    let contact: Vec<SocketAddr> = ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, CQL_PORT))
        .collect();
    let configmaps: Api<ConfigMap> = scenario.api();
    let ca = CaBundle(
        configmaps.get("c-ca").await.unwrap().data.unwrap()["ca.crt"]
            .clone()
            .into_bytes(),
    );
    let netns = app_netns(&scenario).await;
    let with = |credentials: Option<(&str, &str)>| ConnectOptions {
        tls: Some(ca.clone()),
        credentials: credentials.map(|(u, p)| (u.to_string(), p.to_string())),
    };

    // No credentials, or the default superuser's: refused.
    for (what, options) in [
        ("no credentials", with(None)),
        (
            "the default superuser",
            with(Some(("cassandra", "cassandra"))),
        ),
        ("a wrong password", with(Some((&username, "wrong")))),
    ] {
        let refused = Client::connect_with(netns.clone(), &contact, &options).await;
        assert!(refused.is_err(), "a client with {what} was let in");
    }
    // The Secret's role: in, and it reads and writes.
    let client = Client::connect_with(netns.clone(), &contact, &with(Some((&username, &password))))
        .await
        .unwrap();
    until_driver_sees(&scenario, &client, &ips).await;
    let replication = client.replication("system_auth").await.unwrap();
    assert!(
        replication["class"].ends_with("NetworkTopologyStrategy"),
        "{replication:?}"
    );
    assert_eq!(replication.get("dc").map(String::as_str), Some("2"));
    let table = client.keyspace("app", &[("dc", 1)]).await.unwrap();
    table.write("k", "v", Consistency::Quorum).await.unwrap();
    assert_eq!(
        table
            .read("k", Consistency::Quorum)
            .await
            .unwrap()
            .as_deref(),
        Some("v")
    );

    // One member leaves: system_auth is lowered to 1 first, and the
    // decommission (which Cassandra refuses while system_auth has as many
    // replicas as live nodes) goes through.
    scenario
        .patch_cluster("c", real_cluster(1).racks_patch())
        .await;
    scenario.until_service_gone(&member(1), secs(300)).await;
    scenario
        .until("system_auth recorded at 1 replica", secs(120), || async {
            let c = clusters.get("c").await.map_err(|e| e.to_string())?;
            match c.metadata.annotations.unwrap_or_default().get(RECORD) {
                Some(v) if v == "1" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let events: Api<Event> = scenario.api();
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in [
        "SuperuserSecretCreated",
        "SuperuserCreated",
        "DefaultSuperuserDisabled",
        "SystemAuthReplicationChanged",
        "SystemAuthReplicationLowered",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }
    let single = Client::connect_with(
        netns.clone(),
        &contact[..1],
        &with(Some((&username, &password))),
    )
    .await
    .unwrap();
    let replication = single.replication("system_auth").await.unwrap();
    assert_eq!(replication.get("dc").map(String::as_str), Some("1"));

    // The operator's ClusterRole allowed every call, and the rules only
    // authentication needs were each used.
    let (ns, sa) = testworld::harness::OPERATOR_ACCOUNT;
    let user = format!("system:serviceaccount:{ns}:{sa}");
    let calls: Vec<_> = scenario
        .sim()
        .requests()
        .into_iter()
        .filter(|r| r.user == user && !r.resource.is_empty())
        .collect();
    let denied: Vec<String> = calls
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect();
    assert!(denied.is_empty(), "denied: {denied:?}");
    let manifest =
        testworld::harness::manifest_objects(testworld::harness::OPERATOR_MANIFEST).unwrap();
    let role = crate::rbac::operator_cluster_role(&manifest);
    let rules = role["rules"].as_array().unwrap();
    for (group, resource, verb) in crate::rbac::AUTH_RULES {
        assert!(
            crate::rbac::triples(rules).contains(&(group.into(), resource.into(), verb.into())),
            "the ClusterRole lacks {group}/{resource} {verb}"
        );
        let single = json!({"apiGroups": [group], "resources": [resource], "verbs": [verb]});
        assert!(
            calls
                .iter()
                .any(|c| testworld::kubesim::auth::rbac::rule_allows(
                    &single,
                    &crate::rbac::attributes(c)
                )),
            "no call of the controller used {group}/{resource} {verb}"
        );
    }
}
