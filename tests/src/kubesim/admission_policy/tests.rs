use super::*;
use crds::contract::{
    DECOMMISSION_CONFIRMATION, DECOMMISSION_REQUEST, DECOMMISSIONED, DecommissionConfirmation,
    DecommissionRequest, GOSSIP,
};
use std::collections::BTreeMap;

/// Namespaces `db` (label team=a) and `other`; ServiceAccounts as params.
struct World {
    accounts: Vec<Value>,
}

impl Lookup for World {
    fn namespace(&self, name: &str) -> Option<Value> {
        let labels = if name == "db" {
            json!({"team": "a"})
        } else {
            json!({})
        };
        Some(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}, "spec": {}, "status": {"phase": "Active"}}))
    }

    fn params(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Value>, String> {
        if (api_version, kind) != ("v1", "ServiceAccount") {
            return Err(format!("{kind} is not served"));
        }
        Ok(self
            .accounts
            .iter()
            .filter(|a| namespace.is_none_or(|n| a["metadata"]["namespace"] == n))
            .filter(|a| name.is_none_or(|n| a["metadata"]["name"] == n))
            .filter(|a| selector.matches_object(a))
            .cloned()
            .collect())
    }
}

fn world() -> World {
    let sa = |ns: &str, name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": labels}})
    };
    World {
        accounts: vec![
            sa(
                "db",
                "c-member",
                json!({"app": "rook-cassandra", "cassandra.rook.io/cluster": "c"}),
            ),
            sa("db", "app", json!({})),
        ],
    }
}

fn user(name: &str, pod: Option<&str>) -> UserInfo {
    let mut extra = BTreeMap::new();
    if let Some(p) = pod {
        extra.insert(
            "authentication.kubernetes.io/pod-name".to_string(),
            vec![p.to_string()],
        );
    }
    UserInfo {
        name: name.into(),
        groups: vec!["system:authenticated".into()],
        extra,
        ..Default::default()
    }
}

fn service(name: &str, labels: Value, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "db", "labels": labels, "uid": "u1", "resourceVersion": "7"},
        "spec": spec})
}

fn update<'a>(user: &'a UserInfo, old: &'a Value, new: &'a Value) -> Request<'a> {
    Request {
        operation: "UPDATE",
        group: "",
        version: "v1",
        resource: "services",
        subresource: "",
        kind: "Service",
        name: new["metadata"]["name"].as_str().unwrap(),
        namespace: "db",
        user,
        dry_run: false,
        object: Some(new),
        old_object: Some(old),
    }
}

fn policy(spec: Value) -> Arc<Value> {
    Arc::new(json!({"metadata": {"name": "p"}, "spec": spec}))
}

fn binding(spec: Value) -> Arc<Value> {
    let mut s = json!({"policyName": "p", "validationActions": ["Deny"]});
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    Arc::new(json!({"metadata": {"name": "b"}, "spec": s}))
}

fn services_rule(ops: Value) -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops, "resources": ["services"]}]})
}

fn one(spec: Value, bspec: Value, req: &Request) -> Verdict {
    evaluate(&[policy(spec)], &[binding(bspec)], req, &world())
}

#[test]
fn a_false_validation_is_refused_with_the_api_servers_message_and_422() {
    let u = user("alice", None);
    let old = service("s", json!({}), json!({"type": "ClusterIP"}));
    let new = service("s", json!({}), json!({"type": "NodePort"}));
    let spec = json!({"matchConstraints": services_rule(json!(["UPDATE"])),
        "validations": [{"expression": "object.spec.type == oldObject.spec.type", "message": "type is fixed"}]});
    let v = one(spec.clone(), json!({}), &update(&u, &old, &new));
    let e = v.denied.expect("denied");
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert_eq!(
        e.message,
        "services \"s\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: type is fixed"
    );
    let d = e.details.unwrap();
    assert_eq!(d["kind"], "services");
    assert_eq!(d["name"], "s");
    assert_eq!(
        d["causes"][0]["message"],
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: type is fixed"
    );
    // The same change allowed when the expression holds.
    assert!(
        one(spec, json!({}), &update(&u, &old, &old))
            .denied
            .is_none()
    );
}

#[test]
fn reason_message_expression_and_the_default_message() {
    let u = user("alice", None);
    let old = service("s", json!({}), json!({}));
    let spec = json!({"matchConstraints": services_rule(json!(["*"])),
    "validations": [
        {"expression": "false", "messageExpression": "'no, ' + request.userInfo.username", "reason": "Forbidden"},
    ]});
    let e = one(spec, json!({}), &update(&u, &old, &old))
        .denied
        .unwrap();
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert!(
        e.message.ends_with("denied request: no, alice"),
        "{}",
        e.message
    );
    let spec = json!({"matchConstraints": services_rule(json!(["*"])),
        "validations": [{"expression": "1 == 2"}]});
    let e = one(spec, json!({}), &update(&u, &old, &old))
        .denied
        .unwrap();
    assert!(
        e.message
            .ends_with("denied request: failed expression: 1 == 2")
    );
}

#[test]
fn rules_select_group_resource_operation_and_subresource() {
    let u = user("alice", None);
    let old = service("s", json!({}), json!({}));
    let deny = |m: Value| json!({"matchConstraints": m, "validations": [{"expression": "false"}]});
    let req = update(&u, &old, &old);
    assert!(
        one(deny(services_rule(json!(["CREATE"]))), json!({}), &req)
            .denied
            .is_none()
    );
    let pods = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]});
    assert!(one(deny(pods), json!({}), &req).denied.is_none());
    let apps = json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]});
    assert!(one(deny(apps), json!({}), &req).denied.is_none());
    let all = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]});
    assert!(one(deny(all.clone()), json!({}), &req).denied.is_some());
    // "*" is every resource but no subresource; "*/*" both.
    let mut status = req.clone();
    status.subresource = "status";
    assert!(one(deny(all), json!({}), &status).denied.is_none());
    let all_sub = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]});
    assert!(one(deny(all_sub), json!({}), &status).denied.is_some());
    // Excluded, or cut down by resourceNames.
    let mut m = services_rule(json!(["*"]));
    m["excludeResourceRules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["services"], "resourceNames": ["s"]}]);
    assert!(one(deny(m), json!({}), &req).denied.is_none());
}

#[test]
fn namespace_and_object_selectors_of_policy_and_binding() {
    let u = user("alice", None);
    let old = service("s", json!({"tier": "db"}), json!({}));
    let req = update(&u, &old, &old);
    let with = |m: Value| {
        let mut rule = services_rule(json!(["*"]));
        for (k, v) in m.as_object().unwrap() {
            rule[k] = v.clone();
        }
        json!({"matchConstraints": rule, "validations": [{"expression": "false"}]})
    };
    assert!(
        one(
            with(json!({"namespaceSelector": {"matchLabels": {"team": "a"}}})),
            json!({}),
            &req
        )
        .denied
        .is_some()
    );
    assert!(
        one(
            with(json!({"namespaceSelector": {"matchLabels": {"team": "b"}}})),
            json!({}),
            &req
        )
        .denied
        .is_none()
    );
    assert!(
        one(
            with(json!({"objectSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}})),
            json!({}),
            &req
        )
        .denied
        .is_none()
    );
    // The binding narrows further.
    let all = with(json!({}));
    assert!(
        one(
            all,
            json!({"matchResources": {"objectSelector": {"matchLabels": {"tier": "web"}}}}),
            &req
        )
        .denied
        .is_none()
    );
}

#[test]
fn match_conditions_variables_and_the_request() {
    let member = user("system:serviceaccount:db:c-member", Some("c-0"));
    let old = service("c-0", json!({}), json!({}));
    let spec = json!({"matchConstraints": services_rule(json!(["UPDATE"])),
        "matchConditions": [{"name": "sa", "expression": "request.userInfo.username.startsWith('system:serviceaccount:')"}],
        "variables": [
            {"name": "pod", "expression": "request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]"},
            {"name": "same", "expression": "variables.pod == object.metadata.name"},
        ],
        "validations": [{"expression": "variables.same && request.operation == 'UPDATE' && request.namespace == 'db' && request.resource.resource == 'services' && namespaceObject.metadata.labels.team == 'a'"}]});
    assert!(
        one(spec.clone(), json!({}), &update(&member, &old, &old))
            .denied
            .is_none()
    );
    let other = service("c-1", json!({}), json!({}));
    assert!(
        one(spec.clone(), json!({}), &update(&member, &other, &other))
            .denied
            .is_some()
    );
    // Not a ServiceAccount: the condition is false, the policy skipped.
    let admin = user("admin", None);
    assert!(
        one(spec, json!({}), &update(&admin, &other, &other))
            .denied
            .is_none()
    );
}

#[test]
fn old_object_is_null_on_create() {
    let u = user("alice", None);
    let new = service("s", json!({}), json!({}));
    let mut req = update(&u, &new, &new);
    req.operation = "CREATE";
    req.old_object = None;
    let spec = json!({"matchConstraints": services_rule(json!(["CREATE"])),
        "validations": [{"expression": "oldObject == null && object.metadata.name == 's'"}]});
    assert!(one(spec, json!({}), &req).denied.is_none());
}

#[test]
fn failure_policy_decides_on_a_runtime_error() {
    let u = user("alice", None);
    let old = service("s", json!({}), json!({}));
    let req = update(&u, &old, &old);
    let spec = |fp: &str| {
        json!({"failurePolicy": fp, "matchConstraints": services_rule(json!(["*"])),
            "validations": [{"expression": "object.spec.nothing == 1", "message": "m"}]})
    };
    let e = one(spec("Fail"), json!({}), &req)
        .denied
        .expect("Fail denies");
    assert!(
        e.message
            .contains("denied request: expression 'object.spec.nothing == 1' resulted in error"),
        "{}",
        e.message
    );
    assert!(one(spec("Ignore"), json!({}), &req).denied.is_none());
    // An error in a match condition counts the same way.
    let cond = |fp: &str| {
        json!({"failurePolicy": fp, "matchConstraints": services_rule(json!(["*"])),
            "matchConditions": [{"name": "x", "expression": "object.nothing"}],
            "validations": [{"expression": "true"}]})
    };
    assert!(one(cond("Fail"), json!({}), &req).denied.is_some());
    assert!(one(cond("Ignore"), json!({}), &req).denied.is_none());
}

#[test]
fn warn_and_audit_actions_do_not_refuse() {
    let u = user("alice", None);
    let old = service("s", json!({}), json!({}));
    let req = update(&u, &old, &old);
    let spec = json!({"matchConstraints": services_rule(json!(["*"])),
        "validations": [{"expression": "false", "message": "careful"}]});
    let v = one(
        spec.clone(),
        json!({"validationActions": ["Warn", "Audit"]}),
        &req,
    );
    assert!(v.denied.is_none());
    assert_eq!(
        v.warnings,
        vec!["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': careful"]
    );
    let v = one(spec, json!({"validationActions": ["Deny", "Warn"]}), &req);
    assert!(v.denied.is_some());
    assert_eq!(v.warnings.len(), 1);
    // A policy without a binding does nothing.
    let lone = evaluate(
        &[policy(
            json!({"matchConstraints": services_rule(json!(["*"])), "validations": [{"expression": "false"}]}),
        )],
        &[],
        &req,
        &world(),
    );
    assert!(lone.denied.is_none());
}

#[test]
fn params_each_evaluated_and_not_found_allowed_or_denied() {
    let old = service("s", json!({}), json!({}));
    let spec = json!({"paramKind": {"apiVersion": "v1", "kind": "ServiceAccount"},
        "matchConstraints": services_rule(json!(["*"])),
        "matchConditions": [{"name": "me", "expression": "request.userInfo.username == 'system:serviceaccount:' + params.metadata.namespace + ':' + params.metadata.name"}],
        "validations": [{"expression": "false", "messageExpression": "'as ' + params.metadata.name"}]});
    let sel = |allow: &str| json!({"paramRef": {"selector": {"matchLabels": {"app": "rook-cassandra"}}, "parameterNotFoundAction": allow}});
    let member = user("system:serviceaccount:db:c-member", None);
    let e = one(spec.clone(), sel("Allow"), &update(&member, &old, &old))
        .denied
        .unwrap();
    assert!(e.message.ends_with("denied request: as c-member"));
    let app = user("system:serviceaccount:db:app", None);
    assert!(
        one(spec.clone(), sel("Allow"), &update(&app, &old, &old))
            .denied
            .is_none()
    );
    // Another namespace: no params there.
    let mut elsewhere = update(&member, &old, &old);
    elsewhere.namespace = "other";
    assert!(one(spec.clone(), sel("Allow"), &elsewhere).denied.is_none());
    let e = one(spec, sel("Deny"), &elsewhere).denied.unwrap();
    assert!(
        e.message
            .contains("failed to configure binding: no params found")
    );
}

/// The policy the operator ships, from manifests/operator/.
fn shipped() -> (Arc<Value>, Arc<Value>) {
    let objects = crate::harness::manifest_objects(include_str!(
        "../../../../manifests/operator/member-policy.yaml"
    ))
    .unwrap();
    let find = |kind: &str| Arc::new(objects.iter().find(|o| o["kind"] == kind).cloned().unwrap());
    (
        find("ValidatingAdmissionPolicy"),
        find("ValidatingAdmissionPolicyBinding"),
    )
}

fn member_service(name: &str) -> Value {
    service(
        name,
        json!({"app": "rook-cassandra", "cassandra.rook.io/cluster": "c", "cassandra.rook.io/rack": "r"}),
        json!({"clusterIP": "10.96.0.9", "ports": [{"name": "cql", "port": 9042}], "selector": {"statefulset.kubernetes.io/pod-name": name}}),
    )
}

fn shipped_verdict(user: &UserInfo, old: &Value, new: &Value) -> Verdict {
    let (p, b) = shipped();
    evaluate(&[p], &[b], &update(user, old, new), &world())
}

#[test]
fn the_shipped_policy_lets_a_member_write_its_records_of_intent_only() {
    let member = user("system:serviceaccount:db:c-member", Some("c-r-0"));
    // The controller asked this member to decommission: it may answer.
    let mut old = member_service("c-r-0");
    old["metadata"]["labels"][DECOMMISSIONED] = json!("false");
    let mut new = old.clone();
    new["metadata"]["labels"][DECOMMISSIONED] = json!("true");
    new["metadata"]["annotations"] = json!({"cassandra.rook.io/decommission-started": "x"});
    new["metadata"]["managedFields"] = json!([{"manager": "sidecar"}]);
    let v = shipped_verdict(&member, &old, &new);
    assert!(v.denied.is_none(), "{:?}", v.denied);

    let refused = |new: &Value, why: &str| {
        let e = shipped_verdict(&member, &old, new)
            .denied
            .unwrap_or_else(|| panic!("{why}: allowed"));
        assert_eq!(e.code, 403, "{why}: {}", e.message);
        e.message
    };
    let mut other = member_service("c-r-1");
    let other_old = other.clone();
    other["metadata"]["labels"]["cassandra.rook.io/decommissioned"] = json!("false");
    let e = shipped_verdict(&member, &other_old, &other).denied.unwrap();
    assert!(
        e.message
            .contains("a member may change only its own member Service, not c-r-1"),
        "{}",
        e.message
    );
    let mut ips = old.clone();
    ips["spec"]["externalIPs"] = json!(["1.2.3.4"]);
    refused(&ips, "externalIPs");
    let mut sel = old.clone();
    sel["spec"]["selector"] = json!({"app": "web"});
    refused(&sel, "selector");
    let mut foreign_label = old.clone();
    foreign_label["metadata"]["labels"]["app"] = json!("web");
    refused(&foreign_label, "a label outside cassandra.rook.io/");
    let mut seed = old.clone();
    seed["metadata"]["labels"]["cassandra.rook.io/seed"] = json!("");
    refused(&seed, "the seed label");
    let mut gone = old.clone();
    gone["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("cassandra.rook.io/cluster");
    refused(&gone, "an identity label removed");
    let mut owners = old.clone();
    owners["metadata"]["ownerReferences"] = json!([{"name": "x"}]);
    refused(&owners, "ownerReferences");
    let mut ann = old.clone();
    ann["metadata"]["annotations"] = json!({"example.com/x": "y"});
    refused(&ann, "a foreign annotation");
    // A token not bound to a Pod changes nothing.
    let unbound = user("system:serviceaccount:db:c-member", None);
    let e = shipped_verdict(&unbound, &old, &new).denied.unwrap();
    assert!(
        e.message
            .contains("a member may change only its own member Service"),
        "{}",
        e.message
    );
}

/// The refusals of the decommission records, as the shipped policy words
/// them.
const ONLY_FALSE_TO_TRUE: &str = "a member may change its cassandra.rook.io/decommissioned label only from \"false\" to \"true\" (to confirm the decommission the controller requested)";
const NO_REQUEST: &str = "a member may not add, change or remove the cassandra.rook.io/decommission-request annotation (the controller's request)";
const CONFIRMATION_WITH_TRUE: &str = "a member may write the cassandra.rook.io/decommission-confirmation annotation only in the request that changes its cassandra.rook.io/decommissioned label from \"false\" to \"true\"";

/// A member Service with these decommission records: the label's value,
/// the request and the confirmation annotations (None: absent).
fn with_records(label: Option<&str>, request: Option<&str>, confirmation: Option<&str>) -> Value {
    let mut s = member_service("c-r-0");
    if let Some(v) = label {
        s["metadata"]["labels"][DECOMMISSIONED] = json!(v);
    }
    let mut annotations = serde_json::Map::new();
    annotations.insert(GOSSIP.into(), json!("{}"));
    if let Some(v) = request {
        annotations.insert(DECOMMISSION_REQUEST.into(), json!(v));
    }
    if let Some(v) = confirmation {
        annotations.insert(DECOMMISSION_CONFIRMATION.into(), json!(v));
    }
    s["metadata"]["annotations"] = Value::Object(annotations);
    s
}

#[test]
fn the_shipped_policy_lets_a_member_only_answer_a_decommission_request() {
    let member = user("system:serviceaccount:db:c-member", Some("c-r-0"));
    let request = DecommissionRequest {
        id: "c-dc-r-0/1".into(),
        requested_at: "2026-11-27T10:00:00Z".into(),
        ..Default::default()
    }
    .to_annotation();
    let other_request = DecommissionRequest {
        id: "c-dc-r-0/2".into(),
        requested_at: "2026-11-27T11:00:00Z".into(),
        ..Default::default()
    }
    .to_annotation();
    let confirmation = DecommissionConfirmation {
        request: "c-dc-r-0/1".into(),
        host_id: Some("6d1c5b7e-0000-4000-8000-000000000001".into()),
        confirmed_at: "2026-11-27T10:05:00Z".into(),
        removed: None,
    }
    .to_annotation();
    let (req, other_req, conf) = (
        Some(request.as_str()),
        Some(other_request.as_str()),
        Some(confirmation.as_str()),
    );
    let rec = with_records;
    // (case, old records, new records, the refusal or None: allowed)
    let cases: Vec<(&str, Value, Value, Option<&str>)> = vec![
        (
            "true answers false, with the confirmation",
            rec(Some("false"), req, None),
            rec(Some("true"), req, conf),
            None,
        ),
        (
            "true answers false, without a confirmation",
            rec(Some("false"), req, None),
            rec(Some("true"), req, None),
            None,
        ),
        (
            "the records unchanged, another annotation written",
            rec(Some("true"), req, conf),
            {
                let mut s = rec(Some("true"), req, conf);
                s["metadata"]["annotations"][GOSSIP] = json!("{\"up\":[]}");
                s
            },
            None,
        ),
        (
            "true from absent",
            rec(None, None, None),
            rec(Some("true"), None, None),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "true from absent, with a confirmation",
            rec(None, None, None),
            rec(Some("true"), None, conf),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "false from absent",
            rec(None, None, None),
            rec(Some("false"), None, None),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "false removed",
            rec(Some("false"), req, None),
            rec(None, req, None),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "true removed",
            rec(Some("true"), req, conf),
            rec(None, req, conf),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "true back to false",
            rec(Some("true"), req, conf),
            rec(Some("false"), req, conf),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "false to another value",
            rec(Some("false"), req, None),
            rec(Some("yes"), req, None),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "false to empty",
            rec(Some("false"), req, None),
            rec(Some(""), req, None),
            Some(ONLY_FALSE_TO_TRUE),
        ),
        (
            "the request added",
            rec(Some("false"), None, None),
            rec(Some("false"), req, None),
            Some(NO_REQUEST),
        ),
        (
            "the request changed",
            rec(Some("false"), req, None),
            rec(Some("false"), other_req, None),
            Some(NO_REQUEST),
        ),
        (
            "the request removed",
            rec(Some("false"), req, None),
            rec(Some("false"), None, None),
            Some(NO_REQUEST),
        ),
        (
            "the request rewritten with the confirming true",
            rec(Some("false"), req, None),
            rec(Some("true"), other_req, conf),
            Some(NO_REQUEST),
        ),
        (
            "the confirmation without the label change",
            rec(Some("false"), req, None),
            rec(Some("false"), req, conf),
            Some(CONFIRMATION_WITH_TRUE),
        ),
        (
            "the confirmation with no request at all",
            rec(None, None, None),
            rec(None, None, conf),
            Some(CONFIRMATION_WITH_TRUE),
        ),
        (
            "the confirmation changed after true",
            rec(Some("true"), req, conf),
            rec(Some("true"), req, Some("{}")),
            Some(CONFIRMATION_WITH_TRUE),
        ),
        (
            "the confirmation removed",
            rec(Some("true"), req, conf),
            rec(Some("true"), req, None),
            Some(CONFIRMATION_WITH_TRUE),
        ),
    ];
    for (case, old, new, refusal) in cases {
        let v = shipped_verdict(&member, &old, &new);
        match (refusal, v.denied) {
            (None, None) => {}
            (None, Some(e)) => panic!("{case}: refused: {}", e.message),
            (Some(why), None) => panic!("{case}: allowed, expected {why:?}"),
            (Some(why), Some(e)) => {
                assert_eq!(
                    (e.code, e.reason),
                    (403, "Forbidden"),
                    "{case}: {}",
                    e.message
                );
                assert_eq!(
                    e.message,
                    format!(
                        "services \"c-r-0\" is forbidden: ValidatingAdmissionPolicy 'cassandra-member-service' with binding 'cassandra-member-service' denied request: {why}"
                    ),
                    "{case}"
                );
            }
        }
    }
    // The operator writes the request and withdraws it: untouched.
    let operator = user(
        "system:serviceaccount:cassandra-operator:cassandra-operator",
        None,
    );
    for (old, new) in [
        (rec(None, None, None), rec(Some("false"), req, None)),
        (rec(Some("false"), req, None), rec(None, None, None)),
    ] {
        let v = shipped_verdict(&operator, &old, &new);
        assert!(v.denied.is_none(), "{:?}", v.denied);
    }
}

/// The maintenance records: the controller's (the request, the mark that
/// a cleanup is due) are not a member's to write; the sidecar's answers
/// (where the operation stands, what it repaired, its old-format count)
/// are. A member that could drop its own `cleanup-due` would keep the
/// data of the ranges it gave away; one that could ask itself for a
/// request would run operations the controller holds back.
#[test]
fn the_shipped_policy_keeps_the_maintenance_requests_the_controllers() {
    use crds::contract::maintenance::{
        CLEANUP_DUE, OLD_FORMAT_SSTABLES, RECORD, REPAIRED, REQUEST,
    };
    const NO_MAINTENANCE_REQUEST: &str = "a member may not add, change or remove the cassandra.rook.io/maintenance-request annotation (the controller's request)";
    const NO_CLEANUP_DUE: &str = "a member may not add, change or remove the cassandra.rook.io/cleanup-due annotation (the controller's record that the member gave ranges away)";
    let member = user("system:serviceaccount:db:c-member", Some("c-r-0"));
    let operator = user(
        "system:serviceaccount:cassandra-operator:cassandra-operator",
        None,
    );
    let with = |annotations: &[(&str, &str)]| {
        let mut s = member_service("c-r-0");
        let map: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        s["metadata"]["annotations"] = Value::Object(map);
        s
    };
    let request =
        r#"{"id":"c-r-0/cleanup/1","operation":"cleanup","requestedAt":"2026-11-27T10:00:00Z"}"#;
    let other = r#"{"id":"c-r-0/repair/2","operation":"repair","requestedAt":"2026-11-27T11:00:00Z","cycle":"2026-11-27T11:00:00Z"}"#;
    let due = "2026-11-27T09:00:00Z";
    let record = r#"{"request":"c-r-0/cleanup/1","operation":"cleanup","state":"done","startedAt":"2026-11-27T10:00:01Z","at":"2026-11-27T10:00:09Z"}"#;
    // (case, old annotations, new annotations, the member's refusal)
    type Annotations<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(&str, Annotations, Annotations, Option<&str>)> = vec![
        (
            "the request added",
            vec![],
            vec![(REQUEST, request)],
            Some(NO_MAINTENANCE_REQUEST),
        ),
        (
            "the request changed",
            vec![(REQUEST, request)],
            vec![(REQUEST, other)],
            Some(NO_MAINTENANCE_REQUEST),
        ),
        (
            "the request removed",
            vec![(REQUEST, request)],
            vec![],
            Some(NO_MAINTENANCE_REQUEST),
        ),
        (
            "the mark added",
            vec![],
            vec![(CLEANUP_DUE, due)],
            Some(NO_CLEANUP_DUE),
        ),
        (
            "the mark removed",
            vec![(CLEANUP_DUE, due)],
            vec![],
            Some(NO_CLEANUP_DUE),
        ),
        (
            "the answer written, the request and mark untouched",
            vec![(REQUEST, request), (CLEANUP_DUE, due)],
            vec![
                (REQUEST, request),
                (CLEANUP_DUE, due),
                (RECORD, record),
                (OLD_FORMAT_SSTABLES, "0"),
            ],
            None,
        ),
        (
            "what it repaired written",
            vec![],
            vec![(
                REPAIRED,
                r#"{"cycle":"2026-11-27T11:00:00Z","keyspaces":{},"finishedAt":"2026-11-27T11:30:00Z"}"#,
            )],
            None,
        ),
    ];
    for (case, old, new, refusal) in cases {
        let (old, new) = (with(&old), with(&new));
        let v = shipped_verdict(&member, &old, &new);
        match (refusal, v.denied) {
            (None, None) => {}
            (None, Some(e)) => panic!("{case}: refused: {}", e.message),
            (Some(why), None) => panic!("{case}: allowed, expected {why:?}"),
            (Some(why), Some(e)) => assert!(e.message.ends_with(why), "{case}: {}", e.message),
        }
        // The controller writes and clears both: untouched.
        let v = shipped_verdict(&operator, &old, &new);
        assert!(v.denied.is_none(), "{case}, the operator: {:?}", v.denied);
    }
}

#[test]
fn the_shipped_policy_touches_no_other_user() {
    let mut ips = member_service("c-r-0");
    let old = ips.clone();
    ips["spec"]["externalIPs"] = json!(["1.2.3.4"]);
    for who in [
        "system:serviceaccount:cassandra-operator:cassandra-operator",
        "system:serviceaccount:db:app",
        // Named like a member account, but not labelled as one.
        "system:serviceaccount:db:x-member",
        "kubernetes-admin",
    ] {
        let u = user(who, Some("c-r-0"));
        let v = shipped_verdict(&u, &old, &ips);
        assert!(v.denied.is_none(), "{who}: {:?}", v.denied);
    }
}
