//! The authentication and authorization side of kubesim's HTTP face: the
//! request's attributes as the API server's RequestInfo derives them, the
//! check of every request (authenticate, impersonate, authorize), and the
//! APIs of that side: TokenRequest (`serviceaccounts/<sa>/token`),
//! SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview
//! (`kubectl auth whoami`). Reads and writes nothing but the request log.

use super::{Body, Shared, error_response, json_response, parse_body, parse_resource_path};
use crate::kubesim::auth::authn::{self, Impersonation, UserInfo};
use crate::kubesim::auth::rbac::{self, Attributes};
use crate::kubesim::auth::tokens::{Claims, ISSUER};
use crate::kubesim::store::{ApiError, Target};
use hyper::Response;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Seconds since the epoch.
pub(super) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What a request asks to do, from its method, path and query (the API
/// server's RequestInfoFactory: `/api/v1` and `/apis/<g>/<v>` alone are
/// non-resource discovery paths).
pub fn attributes(
    shared: &Shared,
    method: &str,
    path: &str,
    q: &HashMap<String, String>,
) -> Attributes {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => {
            let verb = match method {
                "HEAD" => "get".to_string(),
                m => m.to_ascii_lowercase(),
            };
            return Attributes::non_resource(&verb, path);
        }
    };
    let store = &shared.store;
    let Some(rp) = parse_resource_path(group, version, rest, |plural| {
        store
            .resolve(group, version, plural)
            .is_some_and(|t| t.namespaced)
    }) else {
        return Attributes::non_resource(&method.to_ascii_lowercase(), path);
    };
    let name = rp.name.clone().unwrap_or_default();
    let watch = rp.watch_prefix || q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method, name.is_empty(), watch) {
        ("GET" | "HEAD", _, true) => "watch",
        ("GET" | "HEAD", false, false) => "get",
        ("GET" | "HEAD", true, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", false, _) => "delete",
        ("DELETE", true, _) => "deletecollection",
        (m, _, _) => return Attributes::non_resource(&m.to_ascii_lowercase(), path),
    };
    let mut namespace = rp.target.namespace.clone().unwrap_or_default();
    if rp.target.plural == "namespaces" && namespace.is_empty() {
        // A Namespace is in itself, for authorization.
        namespace = name.clone();
    }
    let mut a = Attributes::resource(verb, group, &rp.target.plural, &namespace).named(&name);
    a.api_version = version.to_string();
    a.subresource = rp.subresource.clone().unwrap_or_default();
    a
}

/// Whether `user` may do `a`: members of `system:masters` always may (the
/// API server's privileged-group authorizer, before RBAC).
pub fn authorized(shared: &Shared, user: &UserInfo, a: &Attributes) -> bool {
    user.is_master() || shared.policy.current(&shared.store).allows(user, a)
}

/// Who a request is made as: its credentials, then its impersonation
/// headers, each checked as the API server does (401 for a bad
/// credential, 403 for an impersonation the requester may not do).
pub fn identify(shared: &Shared, headers: &hyper::HeaderMap) -> Result<UserInfo, ApiError> {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let user = authn::authenticate(&shared.authority, &shared.store, authorization, now())
        .map_err(|_| ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        })?;
    let Some(imp) = Impersonation::from_headers(headers) else {
        return Ok(user);
    };
    let mut checks: Vec<Attributes> = Vec::new();
    if let Some(sa) = imp.user.strip_prefix("system:serviceaccount:")
        && let Some((ns, name)) = sa.split_once(':')
    {
        checks.push(Attributes::resource("impersonate", "", "serviceaccounts", ns).named(name));
    } else {
        checks.push(Attributes::resource("impersonate", "", "users", "").named(&imp.user));
    }
    for g in &imp.groups {
        checks.push(Attributes::resource("impersonate", "", "groups", "").named(g));
    }
    if !imp.uid.is_empty() {
        checks.push(
            Attributes::resource("impersonate", "authentication.k8s.io", "uids", "")
                .named(&imp.uid),
        );
    }
    for (key, values) in &imp.extra {
        for v in values {
            checks.push(
                Attributes::resource(
                    "impersonate",
                    "authentication.k8s.io",
                    &format!("userextras/{key}"),
                    "",
                )
                .named(v),
            );
        }
    }
    for a in &checks {
        if !authorized(shared, &user, a) {
            return Err(rbac::forbidden(&user, a));
        }
    }
    Ok(imp.user())
}

/// RBAC's escalation prevention on a Role, ClusterRole or binding that
/// is created or replaced: its writer must hold every permission it
/// grants, or have `escalate` on the role (`bind` on the role a binding
/// names). Patches are not checked (kubesim would have to apply them
/// first).
pub fn check_escalation(
    shared: &Shared,
    user: &UserInfo,
    a: &Attributes,
    body: &Value,
) -> Result<(), ApiError> {
    if user.is_master()
        || a.api_group != "rbac.authorization.k8s.io"
        || !a.subresource.is_empty()
        || !matches!(a.verb.as_str(), "create" | "update")
    {
        return Ok(());
    }
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or(&a.name)
        .to_string();
    let policy = shared.policy.current(&shared.store);
    let holds = |x: &Attributes| policy.allows(user, x);
    let rules: Vec<Value> = match a.resource.as_str() {
        "roles" | "clusterroles" => {
            let escalate =
                Attributes::resource("escalate", &a.api_group, &a.resource, &a.namespace)
                    .named(&name);
            if holds(&escalate) {
                return Ok(());
            }
            body["rules"].as_array().cloned().unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let r = &body["roleRef"];
            let (kind, role) = (
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
            );
            let (plural, ns) = if kind == "Role" {
                ("roles", a.namespace.as_str())
            } else {
                ("clusterroles", "")
            };
            let bind = Attributes::resource("bind", &a.api_group, plural, ns).named(role);
            if holds(&bind) {
                return Ok(());
            }
            let t = Target::new(
                "rbac.authorization.k8s.io",
                "v1",
                plural,
                (!ns.is_empty()).then_some(ns),
            );
            match shared.store.get(&t, role) {
                Ok(r) => r["rules"].as_array().cloned().unwrap_or_default(),
                // The API server checks the role as it is: none, nothing granted.
                Err(_) => vec![],
            }
        }
        _ => return Ok(()),
    };
    let missing = rbac::not_held(&rules, &a.namespace, holds);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(rbac::escalation(user, &a.resource, &name, &missing))
    }
}

/// Issues a token for `namespace/service_account`, bound to `pod` (name,
/// uid) when given, valid for `seconds` (negative: already expired, for
/// tests of expiry). Returns the token and its expiry (seconds).
pub fn issue(
    store: &crate::kubesim::store::Store,
    authority: &crate::kubesim::auth::Authority,
    namespace: &str,
    service_account: &str,
    seconds: i64,
    pod: Option<&Value>,
) -> Result<(String, u64), ApiError> {
    let sa_t = Target::new("", "v1", "serviceaccounts", Some(namespace));
    let sa = store.get(&sa_t, service_account)?;
    let now = now();
    let expires_at = now.saturating_add_signed(seconds);
    let text = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let node = pod.and_then(|p| {
        let name = text(p, "/spec/nodeName");
        let n = store
            .get(&Target::new("", "v1", "nodes", None), &name)
            .ok()?;
        Some((name, text(&n, "/metadata/uid")))
    });
    let claims = Claims {
        namespace: namespace.into(),
        service_account: service_account.into(),
        service_account_uid: text(&sa, "/metadata/uid"),
        pod: pod.map(|p| (text(p, "/metadata/name"), text(p, "/metadata/uid"))),
        node,
        audiences: vec![ISSUER.into()],
        issued_at: now.min(expires_at),
        expires_at,
        id: crate::kubesim::new_uid(),
    };
    let token = authority
        .signer()
        .issue(&claims)
        .map_err(|e| ApiError::internal(format!("signing a token: {e}")))?;
    Ok((token, expires_at))
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<sa>/token`.
pub fn token_request(
    shared: &Shared,
    namespace: &str,
    service_account: &str,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    let seconds = body
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError {
            code: 422,
            reason: "Invalid",
            message: format!(
                "TokenRequest.authentication.k8s.io \"{service_account}\" is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
            ),
            details: Some(
                json!({"name": service_account, "group": "authentication.k8s.io",
                "kind": "TokenRequest", "causes": [{"reason": "FieldValueInvalid",
                "message": format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
                "field": "spec.expirationSeconds"}]}),
            ),
        });
    }
    let bound = body
        .pointer("/spec/boundObjectRef")
        .filter(|r| !r.is_null());
    let pod = match bound {
        Some(r) if r["kind"] == "Pod" => {
            let name = r["name"].as_str().unwrap_or_default();
            let pod = shared
                .store
                .get(&Target::new("", "v1", "pods", Some(namespace)), name)?;
            if let Some(uid) = r["uid"].as_str().filter(|u| !u.is_empty())
                && pod["metadata"]["uid"] != uid
            {
                return Err(ApiError::bad_request(format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                )));
            }
            Some(pod)
        }
        Some(r) => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {}",
                r["kind"].as_str().unwrap_or_default()
            )));
        }
        None => None,
    };
    let (token, expires_at) = issue(
        &shared.store,
        &shared.authority,
        namespace,
        service_account,
        seconds,
        pod.as_ref(),
    )?;
    let mut spec = body.get("spec").cloned().unwrap_or(json!({}));
    spec["audiences"] = json!([ISSUER]);
    spec["expirationSeconds"] = json!(seconds);
    Ok((
        201,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": service_account, "namespace": namespace,
                "creationTimestamp": Value::Null},
            "spec": spec,
            "status": {"token": token,
                "expirationTimestamp": crate::kubesim::rfc3339(expires_at)},
        }),
    ))
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`.
pub fn self_subject_access_review(shared: &Shared, user: &UserInfo, body: &Value) -> (u16, Value) {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let a = if let Some(r) = spec.get("resourceAttributes") {
        let t = |k: &str| r[k].as_str().unwrap_or_default();
        let mut a = Attributes::resource(t("verb"), t("group"), t("resource"), t("namespace"))
            .named(t("name"));
        a.subresource = t("subresource").into();
        a.api_version = t("version").into();
        a
    } else {
        let r = &spec["nonResourceAttributes"];
        Attributes::non_resource(
            r["verb"].as_str().unwrap_or_default(),
            r["path"].as_str().unwrap_or_default(),
        )
    };
    let allowed = authorized(shared, user, &a);
    let mut status = json!({"allowed": allowed});
    if allowed && !user.is_master() {
        status["reason"] = json!("RBAC: allowed by some binding");
    }
    (
        201,
        json!({
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": Value::Null},
            "spec": spec,
            "status": status,
        }),
    )
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`.
pub fn self_subject_review(user: &UserInfo) -> (u16, Value) {
    (
        201,
        json!({
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": Value::Null},
            "status": {"userInfo": user.to_json()},
        }),
    )
}

/// The APIs of authentication and authorization (TokenRequest and the
/// self reviews), None for any other path.
pub(super) fn auth_api(
    shared: &Shared,
    user: &crate::kubesim::auth::authn::UserInfo,
    path: &str,
    body: &[u8],
    content_type: &str,
) -> Option<Response<Body>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let parsed = || parse_body(body, content_type);
    let result = match segs.as_slice() {
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            sa,
            "token",
        ] => parsed().and_then(|b| token_request(shared, ns, sa, &b)),
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
        ] => parsed().map(|b| self_subject_access_review(shared, user, &b)),
        [
            "apis",
            "authentication.k8s.io",
            "v1" | "v1beta1",
            "selfsubjectreviews",
        ] => Ok(self_subject_review(user)),
        _ => return None,
    };
    Some(match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    })
}
