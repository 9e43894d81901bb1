//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`) as the
//! API server's plugin evaluates it (apiserver's
//! `admission/plugin/policy/validating`): a policy's `matchConstraints`,
//! each binding's `matchResources`, `paramKind` with the binding's
//! `paramRef` (one evaluation per parameter object), `matchConditions`,
//! `variables`, `validations` (`expression`, `message`,
//! `messageExpression`, `reason`), `failurePolicy` on a runtime error, and
//! the binding's `validationActions` (Deny, Warn; Audit leaves no trace
//! here). CEL through kube-cel's `cel` and its Kubernetes functions. Not
//! modelled: `auditAnnotations`, `authorizer`, `matchPolicy: Equivalent`
//! conversions, type checking at policy creation. Pure.

use crate::kubesim::auth::authn::UserInfo;
use crate::kubesim::selectors::LabelSelector;
use crate::kubesim::store::ApiError;
use kube_cel::KubeCelExt;
use kube_cel::cel::{self, Context, Program};
use serde_json::{Value, json};
use std::sync::Arc;

/// The request under admission.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// CREATE, UPDATE or DELETE.
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    /// Plural, e.g. `services`.
    pub resource: &'a str,
    /// "" for the main resource.
    pub subresource: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    /// "" for cluster-scoped objects.
    pub namespace: &'a str,
    pub user: &'a UserInfo,
    pub dry_run: bool,
    /// The object after the write (None on DELETE).
    pub object: Option<&'a Value>,
    /// The object before it (None on CREATE).
    pub old_object: Option<&'a Value>,
}

/// What the plugin reads besides the request: namespaces (for
/// `namespaceSelector` and `namespaceObject`) and parameter objects.
pub trait Lookup {
    /// The Namespace object named so.
    fn namespace(&self, name: &str) -> Option<Value>;
    /// The objects of `kind` (`apiVersion`) in `namespace` (None: cluster
    /// scope, or the kind is cluster-scoped) named `name` or matching
    /// `selector`; Err when no such kind is served.
    fn params(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Value>, String>;
}

/// The plugin's verdict: the refusal (the first denied decision, as the API
/// server reports it) and the Warning headers of `Warn` bindings.
#[derive(Debug, Default)]
pub struct Verdict {
    pub denied: Option<ApiError>,
    pub warnings: Vec<String>,
}

/// One failed decision before it is reported.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: &'static str,
}

/// Evaluates every policy with its bindings on a request.
pub fn evaluate(
    policies: &[Arc<Value>],
    bindings: &[Arc<Value>],
    req: &Request,
    lookup: &dyn Lookup,
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut denials: Vec<Denial> = Vec::new();
    for policy in policies {
        let pname = policy["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let spec = &policy["spec"];
        let fail = spec["failurePolicy"].as_str() != Some("Ignore");
        if !matches(&spec["matchConstraints"], req, lookup, true) {
            continue;
        }
        for binding in bindings
            .iter()
            .filter(|b| b["spec"]["policyName"].as_str() == Some(pname.as_str()))
        {
            let bname = binding["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let bspec = &binding["spec"];
            if bspec.get("matchResources").is_some_and(|m| !m.is_null())
                && !matches(&bspec["matchResources"], req, lookup, false)
            {
                continue;
            }
            let actions: Vec<&str> = bspec["validationActions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let config_error = |message: String, denials: &mut Vec<Denial>| {
                if fail {
                    denials.push(Denial {
                        policy: pname.clone(),
                        binding: Some(bname.clone()),
                        message: format!("failed to configure binding: {message}"),
                        reason: "Invalid",
                    });
                }
            };
            let params = match collect_params(spec, bspec, req, lookup) {
                Ok(p) => p,
                Err(e) => {
                    config_error(e, &mut denials);
                    continue;
                }
            };
            for param in params {
                for d in validate(spec, req, param.as_ref(), lookup, fail) {
                    for action in &actions {
                        match *action {
                            "Deny" => denials.push(Denial {
                                policy: pname.clone(),
                                binding: Some(bname.clone()),
                                message: d.0.clone(),
                                reason: d.1,
                            }),
                            "Warn" => verdict.warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {}",
                                d.0
                            )),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    if let Some(d) = denials.first() {
        verdict.denied = Some(refusal(d, req));
    }
    verdict
}

/// The parameter objects a binding names: `[None]` without a `paramKind`;
/// with one, the objects `paramRef` selects (in the request's namespace
/// unless it names one), or `[None]` when there are none and
/// `parameterNotFoundAction` is `Allow`.
fn collect_params(
    spec: &Value,
    bspec: &Value,
    req: &Request,
    lookup: &dyn Lookup,
) -> Result<Vec<Option<Value>>, String> {
    let Some(kind) = spec.get("paramKind").filter(|k| !k.is_null()) else {
        return Ok(vec![None]);
    };
    let pref = &bspec["paramRef"];
    if pref.is_null() {
        return Err("no paramRef in binding".into());
    }
    let namespace = pref["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or((!req.namespace.is_empty()).then_some(req.namespace));
    let selector = match pref.get("selector") {
        Some(s) if !s.is_null() => LabelSelector::from_object(s)?,
        _ => LabelSelector::default(),
    };
    let found = lookup.params(
        kind["apiVersion"].as_str().unwrap_or_default(),
        kind["kind"].as_str().unwrap_or_default(),
        namespace,
        pref["name"].as_str(),
        &selector,
    )?;
    if found.is_empty() {
        return match pref["parameterNotFoundAction"].as_str() {
            Some("Allow") => Ok(Vec::new()),
            _ => Err(format!(
                "no params found for policy binding with `Deny` parameterNotFoundAction: {}",
                kind["kind"].as_str().unwrap_or_default()
            )),
        };
    }
    Ok(found.into_iter().map(Some).collect())
}

/// The API server's refusal for a denied decision: Forbidden's message and
/// details, with the validation's reason and its code.
fn refusal(d: &Denial, req: &Request) -> ApiError {
    let message = match &d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.message
        ),
    };
    let qualified = if req.group.is_empty() {
        req.resource.to_string()
    } else {
        format!("{}.{}", req.resource, req.group)
    };
    let name = if req.name.is_empty() {
        req.object
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or_default()
    } else {
        req.name
    };
    let code = match d.reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        "Invalid" => 422,
        _ => 400,
    };
    let mut details = json!({"name": name, "kind": req.resource,
        "causes": [{"message": message}]});
    if !req.group.is_empty() {
        details["group"] = json!(req.group);
    }
    ApiError {
        code,
        reason: d.reason,
        message: format!("{qualified} \"{name}\" is forbidden: {message}"),
        details: Some(details),
    }
}

/// `matchConstraints` (`policy`: resourceRules required) or a binding's
/// `matchResources`: selectors and rules, less the excluded rules.
fn matches(m: &Value, req: &Request, lookup: &dyn Lookup, policy: bool) -> bool {
    let rules = m["resourceRules"].as_array();
    if policy && rules.is_none_or(Vec::is_empty) {
        return false;
    }
    if let Some(rules) = rules
        && !rules.iter().any(|r| rule_matches(r, req))
    {
        return false;
    }
    if m["excludeResourceRules"]
        .as_array()
        .is_some_and(|ex| ex.iter().any(|r| rule_matches(r, req)))
    {
        return false;
    }
    selector_matches(&m["namespaceSelector"], req, lookup)
        && object_selector_matches(&m["objectSelector"], req)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A NamedRuleWithOperations.
fn rule_matches(rule: &Value, req: &Request) -> bool {
    let any = |list: Vec<&str>, want: &str| list.iter().any(|x| *x == "*" || *x == want);
    if !any(strings(&rule["apiGroups"]), req.group)
        || !any(strings(&rule["apiVersions"]), req.version)
        || !any(strings(&rule["operations"]), req.operation)
    {
        return false;
    }
    let resource_ok = strings(&rule["resources"]).iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        let res_ok = res == "*" || res == req.resource;
        let sub_ok = match sub {
            "" => req.subresource.is_empty(),
            "*" => true,
            s => s == req.subresource,
        };
        res_ok && sub_ok
    });
    if !resource_ok {
        return false;
    }
    let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => req.namespace.is_empty(),
        "Namespaced" => !req.namespace.is_empty(),
        _ => true,
    };
    let names = strings(&rule["resourceNames"]);
    scope_ok && (names.is_empty() || names.contains(&req.name))
}

/// `namespaceSelector`: a namespaced object's Namespace's labels (a
/// Namespace's own); other cluster-scoped objects always match.
fn selector_matches(sel: &Value, req: &Request, lookup: &dyn Lookup) -> bool {
    if sel.is_null() {
        return true;
    }
    let Ok(s) = LabelSelector::from_object(sel) else {
        return false;
    };
    let ns_obj = if req.group.is_empty() && req.resource == "namespaces" {
        req.object.or(req.old_object).cloned()
    } else if req.namespace.is_empty() {
        return true;
    } else {
        lookup.namespace(req.namespace)
    };
    ns_obj.is_some_and(|n| s.matches_object(&n))
}

/// `objectSelector`: the object's or the old object's labels.
fn object_selector_matches(sel: &Value, req: &Request) -> bool {
    if sel.is_null() {
        return true;
    }
    let Ok(s) = LabelSelector::from_object(sel) else {
        return false;
    };
    [req.object, req.old_object]
        .into_iter()
        .flatten()
        .any(|o| s.matches_object(o))
}

/// The `request` variable (admission.k8s.io/v1 AdmissionRequest).
fn request_value(req: &Request) -> Value {
    let mut user = json!({"username": req.user.name, "groups": req.user.groups});
    if !req.user.uid.is_empty() {
        user["uid"] = json!(req.user.uid);
    }
    if !req.user.extra.is_empty() {
        user["extra"] = json!(req.user.extra);
    }
    let gvk = json!({"group": req.group, "version": req.version, "kind": req.kind});
    let gvr = json!({"group": req.group, "version": req.version, "resource": req.resource});
    let mut r = json!({
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": req.name, "namespace": req.namespace, "operation": req.operation,
        "userInfo": user, "dryRun": req.dry_run,
    });
    if !req.subresource.is_empty() {
        r["subResource"] = json!(req.subresource);
        r["requestSubResource"] = json!(req.subresource);
    }
    r
}

fn to_cel(v: &Value) -> cel::Value {
    cel::to_value(v).unwrap_or(cel::Value::Null)
}

/// An expression's value, or the API server's error text for it.
fn run(ctx: &Context, expression: &str) -> Result<cel::Value, String> {
    let program = Program::compile(expression)
        .map_err(|e| format!("compilation failed: {expression}: {e}"))?;
    program
        .execute(ctx)
        .map_err(|e| format!("expression '{expression}' resulted in error: {e}"))
}

/// The decisions that deny (message, reason) of one evaluation of a
/// policy: its matchConditions, then its validations.
fn validate(
    spec: &Value,
    req: &Request,
    param: Option<&Value>,
    lookup: &dyn Lookup,
    fail: bool,
) -> Vec<(String, &'static str)> {
    // The variables an expression may read, each converted to CEL only
    // when named: most requests a policy matches fail a matchCondition
    // that reads `request` alone (the member policy and the controller's
    // writes), and converting whole objects for them was half of
    // kubesim's CPU with 1,000 clusters (a name that only looks used costs
    // time, never a different result).
    let context = |names: &dyn Fn(&str) -> bool| {
        let mut ctx = Context::default().with_all();
        if names("object") {
            ctx.add_variable_from_value(
                "object",
                req.object.map(to_cel).unwrap_or(cel::Value::Null),
            );
        }
        if names("oldObject") {
            ctx.add_variable_from_value(
                "oldObject",
                req.old_object.map(to_cel).unwrap_or(cel::Value::Null),
            );
        }
        ctx.add_variable_from_value("request", to_cel(&request_value(req)));
        if names("params") {
            ctx.add_variable_from_value("params", param.map(to_cel).unwrap_or(cel::Value::Null));
        }
        if names("namespaceObject") {
            let ns = if req.namespace.is_empty() {
                None
            } else {
                lookup.namespace(req.namespace)
            };
            // namespaceObject carries the Namespace's metadata, spec and
            // status.
            let ns = ns.map(
                |n| json!({"metadata": n["metadata"], "spec": n["spec"], "status": n["status"]}),
            );
            ctx.add_variable_from_value(
                "namespaceObject",
                ns.as_ref().map(to_cel).unwrap_or(cel::Value::Null),
            );
        }
        ctx
    };
    let conditions: Vec<&Value> = spec["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let named_by_conditions = |name: &str| {
        conditions
            .iter()
            .any(|c| c["expression"].as_str().unwrap_or_default().contains(name))
    };
    let error = |message: String| {
        if fail {
            vec![(message, "Invalid")]
        } else {
            vec![]
        }
    };

    // matchConditions: any false skips the policy; otherwise an error
    // counts under the failure policy.
    let mut condition_error = None;
    let conditions_ctx = context(&named_by_conditions);
    for c in &conditions {
        let expr = c["expression"].as_str().unwrap_or_default();
        match run(&conditions_ctx, expr) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Vec::new(),
            Ok(other) => {
                condition_error.get_or_insert(format!(
                    "matchCondition '{}' resulted in a non-boolean: {other:?}",
                    c["name"].as_str().unwrap_or_default()
                ));
            }
            Err(e) => {
                condition_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = condition_error {
        return error(e);
    }
    let mut ctx = context(&|_| true);

    // variables, in order, each seeing the ones before it; one whose
    // evaluation fails is left out, so that only an expression that uses it
    // fails (the API server evaluates them lazily).
    let mut vars = std::collections::HashMap::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or_default().to_string();
        ctx.add_variable_from_value("variables", variables_value(&vars));
        if let Ok(value) = run(&ctx, v["expression"].as_str().unwrap_or_default()) {
            vars.insert(name, value);
        }
    }
    ctx.add_variable_from_value("variables", variables_value(&vars));

    let mut out = Vec::new();
    for v in spec["validations"].as_array().into_iter().flatten() {
        let expr = v["expression"].as_str().unwrap_or_default();
        match run(&ctx, expr) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let from_expression = v["messageExpression"]
                    .as_str()
                    .and_then(|me| match run(&ctx, me) {
                        Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
                        _ => None,
                    })
                    .filter(|m| !m.is_empty() && !m.contains('\n'));
                let message = from_expression
                    .or_else(|| {
                        v["message"]
                            .as_str()
                            .map(|m| m.trim().to_string())
                            .filter(|m| !m.is_empty())
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", expr.trim()));
                let reason = match v["reason"].as_str() {
                    Some("Forbidden") => "Forbidden",
                    Some("Unauthorized") => "Unauthorized",
                    Some("RequestEntityTooLarge") => "RequestEntityTooLarge",
                    _ => "Invalid",
                };
                out.push((message, reason));
            }
            Ok(other) => out.extend(error(format!(
                "expression '{expr}' resulted in error: no such overload: {other:?} is not a bool"
            ))),
            Err(e) => out.extend(error(e)),
        }
    }
    out
}

fn variables_value(vars: &std::collections::HashMap<String, cel::Value>) -> cel::Value {
    let map: std::collections::HashMap<cel::objects::Key, cel::Value> = vars
        .iter()
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), v.clone()))
        .collect();
    cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
}

#[cfg(test)]
mod tests;
