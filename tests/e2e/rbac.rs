//! The operator's RBAC is enough and no more. The controller runs as the
//! ServiceAccount of manifests/operator.yaml, the members as the
//! ServiceAccount the controller gives them, both through kubesim's
//! authentication and RBAC; from kubesim's request log of an end-to-end
//! scenario (scale-up to two members, then a scale-down to one through
//! decommission), each role's API calls are checked against its rules both ways:
//! every call was allowed, and every rule (verb by verb) was used, or
//! [`NEEDED_ELSEWHERE`] names the feature that needs it. The rack names an
//! overrides ConfigMap, beside an unrelated one: the controller's only
//! ConfigMap calls are its watch (list, watch) and reads of the named
//! one's content, never of another's. The rules are read
//! from the manifest and from the Role the controller wrote, so that a
//! rule removed, added unused, or widened to a wildcard fails this test.
//! The calls include the authorization checks admission makes for a
//! request (kubesim logs them with method `ADMISSION`): OwnerReferences-
//! PermissionEnforcement's `delete` on what the operator creates with an
//! owner, and `update` on `clusters/finalizers` for `blockOwnerDeletion`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::PostParams;
use serde_json::{Value, json};
use testworld::harness;
use testworld::kubesim::auth::rbac::{Attributes, rule_allows};
use testworld::kubesim::faults::RequestRecord;
use testworld::kubesim::store::Target;

use crate::scenario::{ClusterSpec, Scenario, cluster, overrides, secs, setup};

/// A name the cache does not hold is read before anything is created, to
/// refuse a foreign object (controller.rs: a_foreign_object_is_never_adopted).
const FOREIGN: &str = "a name taken by a foreign object: read before creating";

/// The member Role grants it, and the API server refuses a Role that grants
/// what its creator does not hold (RBAC escalation prevention).
const GRANT: &str = "the member Role grants it: its creator must hold it";

/// A Cluster with TLS: its CA ConfigMap, the signer of its members'
/// certificates, its members' ClusterRoleBinding (tls.rs checks these
/// rules against that scenario's calls).
pub(crate) const TLS: &str = "a cluster with TLS: its CA ConfigMap, the members' certificate requests and ClusterRoleBinding (tls.rs)";

/// A Cluster with authentication: its superuser Secret, read and made by
/// name, and the Cluster's record of its system keyspaces' replication
/// (real_auth.rs checks these rules against that scenario's calls).
pub(crate) const AUTH: &str = "a cluster with authentication: its superuser Secret and the record of system_auth's replication (real_auth.rs)";

/// The rules only [`AUTH`] needs.
pub(crate) const AUTH_RULES: [(&str, &str, &str); 3] = [
    ("cassandra.rook.io", "clusters", "patch"),
    ("", "secrets", "get"),
    ("", "secrets", "create"),
];

/// Rules of the operator's ClusterRole that this scenario does not use,
/// each with the feature that needs it: (API group, resource, verb, why).
pub(crate) const NEEDED_ELSEWHERE: &[(&str, &str, &str, &str)] = &[
    ("cassandra.rook.io", "clusters", "patch", AUTH),
    ("", "secrets", "get", AUTH),
    ("", "secrets", "create", AUTH),
    ("", "configmaps", "get", TLS),
    ("", "configmaps", "create", TLS),
    ("", "configmaps", "patch", TLS),
    ("", "configmaps", "delete", TLS),
    (
        "certificates.k8s.io",
        "certificatesigningrequests",
        "list",
        TLS,
    ),
    (
        "certificates.k8s.io",
        "certificatesigningrequests",
        "watch",
        TLS,
    ),
    (
        "certificates.k8s.io",
        "certificatesigningrequests/approval",
        "update",
        TLS,
    ),
    (
        "certificates.k8s.io",
        "certificatesigningrequests/status",
        "update",
        TLS,
    ),
    ("certificates.k8s.io", "signers", "approve", TLS),
    ("certificates.k8s.io", "signers", "sign", TLS),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "get",
        TLS,
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "create",
        TLS,
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "patch",
        TLS,
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "delete",
        TLS,
    ),
    ("rbac.authorization.k8s.io", "clusterroles", "bind", TLS),
    ("cassandra.rook.io", "clusters", "get", GRANT),
    ("apps", "statefulsets", "get", FOREIGN),
    ("", "services", "get", FOREIGN),
    ("", "serviceaccounts", "get", FOREIGN),
    ("rbac.authorization.k8s.io", "roles", "get", FOREIGN),
    ("rbac.authorization.k8s.io", "rolebindings", "get", FOREIGN),
    ("policy", "poddisruptionbudgets", "get", FOREIGN),
    (
        "",
        "services",
        "patch",
        "intent labels on member Services: seed, decommission on scale-down, replace (DESIGN 4, 5)",
    ),
    (
        "",
        "services",
        "delete",
        "scale-down: the member Service of a decommissioned member (DESIGN 5)",
    ),
    (
        "",
        "pods",
        "delete",
        "local disk loss: the replaced member's Pod (DESIGN 5)",
    ),
    (
        "",
        "pods/eviction",
        "create",
        "rolls: each member is taken down through the Eviction API, so that the PodDisruptionBudget holds (roll.rs)",
    ),
    (
        "",
        "persistentvolumeclaims",
        "list",
        "scale-down and disk loss: the members' PVCs (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumeclaims",
        "watch",
        "scale-down and disk loss: the members' PVCs (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumeclaims",
        "delete",
        "scale-down and disk loss: a member's PVC (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumeclaims",
        "get",
        "scale-down and disk loss: the claim read again before it is deleted (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumes",
        "get",
        "disk loss: the claim's PV read again before the claim is deleted (DESIGN 5)",
    ),
    (
        "",
        "nodes",
        "get",
        "disk loss: the Node the PV names read again before the claim is deleted (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumes",
        "list",
        "disk loss: a member PV whose Node is gone (DESIGN 5)",
    ),
    (
        "",
        "persistentvolumes",
        "watch",
        "disk loss: a member PV whose Node is gone (DESIGN 5)",
    ),
    (
        "",
        "nodes",
        "list",
        "disk loss: the Node a member PV names no longer exists (DESIGN 5)",
    ),
    (
        "",
        "nodes",
        "watch",
        "disk loss: the Node a member PV names no longer exists (DESIGN 5)",
    ),
    (
        "",
        "serviceaccounts",
        "patch",
        "the apply step that writes what differs (STYLE: one apply step)",
    ),
    (
        "rbac.authorization.k8s.io",
        "roles",
        "patch",
        "the apply step that writes what differs (STYLE: one apply step)",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "patch",
        "the apply step that writes what differs (STYLE: one apply step)",
    ),
    (
        "policy",
        "poddisruptionbudgets",
        "patch",
        "the apply step that writes what differs (STYLE: one apply step)",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "a repeated Event is patched as a series (kube's Recorder)",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "get",
        "leader election, when the operator runs more than one replica (DESIGN 1)",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "create",
        "leader election, when the operator runs more than one replica (DESIGN 1)",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "update",
        "leader election, when the operator runs more than one replica (DESIGN 1)",
    ),
];

/// Rules of the member Role that this scenario does not use.
const MEMBER_NEEDED_ELSEWHERE: &[(&str, &str, &str, &str)] = &[];

/// (group, resource, verb) of every rule, refusing wildcards.
pub(crate) fn triples(rules: &[Value]) -> Vec<(String, String, String)> {
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for rule in rules {
        assert!(
            rule.get("nonResourceURLs").is_none(),
            "a namespaced operator needs no non-resource URL: {rule}"
        );
        let (groups, resources, verbs) = (
            strs(&rule["apiGroups"]),
            strs(&rule["resources"]),
            strs(&rule["verbs"]),
        );
        for x in groups.iter().chain(&resources).chain(&verbs) {
            assert!(
                !x.contains('*'),
                "no wildcards in a least-privilege role: {rule}"
            );
        }
        for g in &groups {
            for r in &resources {
                for v in &verbs {
                    out.push((g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
    out
}

pub(crate) fn attributes(r: &RequestRecord) -> Attributes {
    let mut a = Attributes::resource(&r.verb, &r.group, &r.resource, &r.namespace).named(&r.name);
    a.subresource = r.subresource.clone();
    a
}

/// Checks one role both ways; `rules` its PolicyRules.
fn check_role(
    who: &str,
    user: &str,
    rules: &[Value],
    log: &[RequestRecord],
    elsewhere: &[(&str, &str, &str, &str)],
) {
    let calls: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.user == user && !r.resource.is_empty())
        .collect();
    assert!(!calls.is_empty(), "{who} made no API call as {user}");
    let denied: Vec<String> = calls
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{} {} {}", r.verb, r.method, r.path))
        .collect();
    assert!(
        denied.is_empty(),
        "{who}: calls its rules do not allow:\n{}",
        denied.join("\n")
    );
    let mut unused = Vec::new();
    for (g, r, v) in triples(rules) {
        let single = json!({"apiGroups": [g], "resources": [r], "verbs": [v]});
        let used = calls.iter().any(|c| rule_allows(&single, &attributes(c)));
        let excused = elsewhere
            .iter()
            .any(|(eg, er, ev, _)| (*eg, *er, *ev) == (g.as_str(), r.as_str(), v.as_str()));
        if !used && !excused {
            unused.push(format!("(\"{g}\", \"{r}\", \"{v}\")"));
        }
    }
    assert!(
        unused.is_empty(),
        "{who}: rules nothing used (remove them, or name the feature that needs them):\n{}",
        unused.join("\n")
    );
    // An excuse must name a rule that exists: a rule removed from the
    // manifest fails here too.
    let all = triples(rules);
    for (g, r, v, why) in elsewhere {
        assert!(
            all.iter()
                .any(|(ag, ar, av)| (ag.as_str(), ar.as_str(), av.as_str()) == (*g, *r, *v)),
            "{who}: the rule {g}/{r} {v} ({why}) is missing"
        );
    }
}

/// Waits until Cluster `c` counts `members` members, all ready, and no
/// member Service beyond them; a call the rules refuse fails the test at
/// once rather than at the deadline.
async fn until_members(s: &Scenario, members: i32, timeout: Duration) {
    let (clusters, services) = (s.clusters(), s.api::<Service>());
    let beyond = format!("c-dc-r-{members}");
    s.until(&format!("{members} ready members"), timeout, || async {
        let denied: Vec<String> = s
            .sim()
            .requests()
            .iter()
            .filter(|r| r.code == 403)
            .map(|r| format!("{} {} {} {}", r.user, r.verb, r.method, r.path))
            .collect();
        assert!(denied.is_empty(), "calls refused:\n{}", denied.join("\n"));
        let status = clusters.get("c").await.unwrap().status.unwrap_or_default();
        if status.members != members || status.ready_members != members {
            Err(format!("{status:?}"))
        } else if services.get_opt(&beyond).await.unwrap().is_some() {
            Err(format!("the Service {beyond} remains"))
        } else {
            Ok(())
        }
    })
    .await
}

/// Cluster `c` of `members` members of 3.11, whose rack's overrides are
/// ConfigMap `tuning`.
fn rack(members: i32) -> ClusterSpec {
    cluster("c")
        .version("3.11.6")
        .rack("r", members)
        .with_rack(json!({"configMapName": "tuning"}))
}

/// The controller's ConfigMap calls: only list and watch (the metadata
/// watch of every ConfigMap, and a list narrowed to one name to read a
/// content), and the only name read is the overrides ConfigMap's,
/// `tuning`, at least once (its content is the rack's hash).
fn check_config_map_calls(log: &[RequestRecord], user: &str) {
    let calls: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.user == user && r.resource == "configmaps")
        .collect();
    let mut reads = 0;
    for call in &calls {
        assert!(
            call.verb == "list" || call.verb == "watch",
            "a ConfigMap call other than list or watch: {} {}?{}",
            call.method,
            call.path,
            call.query
        );
        let named = call
            .query
            .split('&')
            .find_map(|pair| pair.strip_prefix("fieldSelector="))
            .map(|selector| selector.replace("%3D", "="));
        match named {
            Some(selector) => {
                assert_eq!(
                    selector, "metadata.name=tuning",
                    "read a ConfigMap no Cluster names: {}?{}",
                    call.path, call.query
                );
                assert!(call.name.is_empty() && call.verb == "list");
                reads += 1;
            }
            None => assert!(call.name.is_empty(), "{}", call.path),
        }
    }
    assert!(
        reads >= 1,
        "the overrides ConfigMap's content was never read"
    );
}

/// The operator's ClusterRole in the manifest (beside it: the members'
/// certificate ClusterRole).
pub(crate) fn operator_cluster_role(manifest: &[Value]) -> &Value {
    manifest
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "cassandra-operator")
        .expect("the manifest has the operator's ClusterRole")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_roles_calls_match_its_rules_both_ways() {
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    // Not the production metrics address: other worlds of this binary run beside.
    let s = setup().metrics("127.0.0.1:0").start().await;
    let config_maps = s.api::<ConfigMap>();
    for (name, text) in [
        ("tuning", "concurrent_reads: 16\n"),
        ("unrelated", "not: ours\n"),
    ] {
        config_maps
            .create(&PostParams::default(), &overrides(name, text))
            .await
            .unwrap();
    }
    s.create(&rack(2)).await;
    until_members(&s, 2, secs(120)).await;
    // A scale-down: the controller asks member 1 to decommission (its
    // intent label), the sidecar claims and confirms it, the controller
    // shrinks the StatefulSet and deletes the member's claim and Service.
    s.patch_cluster("c", rack(1).racks_patch()).await;
    until_members(&s, 1, secs(90)).await;

    let requests = s.sim().requests();
    let manifest = harness::manifest_objects(harness::OPERATOR_MANIFEST).unwrap();
    let role = operator_cluster_role(&manifest);
    let (ns, sa) = harness::OPERATOR_ACCOUNT;
    check_role(
        "the controller",
        &format!("system:serviceaccount:{ns}:{sa}"),
        role["rules"].as_array().unwrap(),
        &requests,
        NEEDED_ELSEWHERE,
    );
    check_config_map_calls(&requests, &format!("system:serviceaccount:{ns}:{sa}"));
    let roles = s
        .sim()
        .store()
        .list(
            &Target::new("rbac.authorization.k8s.io", "v1", "roles", Some("db")),
            &Default::default(),
        )
        .unwrap();
    let member = &roles["items"][0];
    let account = member["metadata"]["name"].as_str().unwrap();
    check_role(
        "the members",
        &format!("system:serviceaccount:db:{account}"),
        member["rules"].as_array().unwrap(),
        &requests,
        MEMBER_NEEDED_ELSEWHERE,
    );
}
