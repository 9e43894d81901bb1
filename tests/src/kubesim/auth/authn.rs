//! Authentication of a request as the API server does it: the admin's
//! bearer token, ServiceAccount tokens (checked against the live
//! ServiceAccount and, for a bound token, the live Pod), anonymous
//! requests, and impersonation headers. Reads the store; no other I/O.

use super::Authority;
use super::tokens::{Claims, TokenError};
use crate::kubesim::store::{Store, Target};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The user a request is made as (`authentication.k8s.io/v1` UserInfo).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The UserInfo as the API returns it (TokenReview, SelfSubjectReview,
    /// admission requests).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }

    /// Whether the user is in `system:masters` (the cluster admins).
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// The user of the admin kubeconfig kubesim writes.
pub const ADMIN: &str = "kubernetes-admin";

/// The anonymous user (no credentials).
pub fn anonymous() -> UserInfo {
    UserInfo {
        name: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
        ..Default::default()
    }
}

/// The groups of a ServiceAccount's user.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]
}

/// Why a credential is refused: answered with 401 Unauthorized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthenticateError {
    #[error("invalid bearer token: {0}")]
    Token(#[from] TokenError),
    #[error("service account {0} has been deleted or replaced")]
    ServiceAccountGone(String),
    #[error("pod {0} has been deleted or replaced")]
    PodGone(String),
    #[error("unsupported credentials")]
    Unsupported,
}

/// The API server's answer to a refused credential.
pub fn unauthorized_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

/// The user behind an `Authorization` header value ("" when none).
pub fn authenticate(
    authority: &Authority,
    store: &Store,
    authorization: &str,
    now: u64,
) -> Result<UserInfo, AuthenticateError> {
    if authorization.is_empty() {
        return Ok(anonymous());
    }
    let Some(token) = authorization
        .strip_prefix("Bearer ")
        .or_else(|| authorization.strip_prefix("bearer "))
        .map(str::trim)
    else {
        return Err(AuthenticateError::Unsupported);
    };
    if token == authority.admin_token() {
        return Ok(UserInfo {
            name: ADMIN.into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..Default::default()
        });
    }
    let claims = authority.signer().verify(token, now)?;
    check_live(store, &claims, now)?;
    Ok(service_account_user(&claims))
}

/// A token outlives neither its ServiceAccount nor its Pod: the API server
/// looks both up (a deleted object stays valid for 60 s after its
/// deletion started, for graceful shutdowns).
fn check_live(store: &Store, c: &Claims, now: u64) -> Result<(), AuthenticateError> {
    let gone = |obj: &Value, uid: &str| {
        obj["metadata"]["uid"] != uid
            || obj["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(crate::kubesim::table::parse_rfc3339)
                .is_some_and(|t| t + 60 < now as i64)
    };
    let sa_t = Target::new("", "v1", "serviceaccounts", Some(&c.namespace));
    match store.get(&sa_t, &c.service_account) {
        Ok(sa) if !gone(&sa, &c.service_account_uid) => {}
        _ => {
            return Err(AuthenticateError::ServiceAccountGone(format!(
                "{}/{}",
                c.namespace, c.service_account
            )));
        }
    }
    if let Some((pod, uid)) = &c.pod {
        let pods = Target::new("", "v1", "pods", Some(&c.namespace));
        match store.get(&pods, pod) {
            Ok(p) if !gone(&p, uid) => {}
            _ => return Err(AuthenticateError::PodGone(format!("{}/{pod}", c.namespace))),
        }
    }
    Ok(())
}

/// The user of a valid ServiceAccount token, with the Pod and Node the
/// token is bound to in the extra, as the API server sets them.
pub fn service_account_user(c: &Claims) -> UserInfo {
    let mut extra = BTreeMap::new();
    if let Some((name, uid)) = &c.pod {
        extra.insert(
            "authentication.kubernetes.io/pod-name".into(),
            vec![name.clone()],
        );
        extra.insert(
            "authentication.kubernetes.io/pod-uid".into(),
            vec![uid.clone()],
        );
    }
    if let Some((name, uid)) = &c.node {
        extra.insert(
            "authentication.kubernetes.io/node-name".into(),
            vec![name.clone()],
        );
        extra.insert(
            "authentication.kubernetes.io/node-uid".into(),
            vec![uid.clone()],
        );
    }
    if !c.id.is_empty() {
        extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", c.id)],
        );
    }
    UserInfo {
        name: c.username(),
        uid: c.service_account_uid.clone(),
        groups: service_account_groups(&c.namespace),
        extra,
    }
}

/// What the impersonation headers of a request ask for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Impersonation {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Impersonation {
    /// The impersonation headers of a request, if any.
    pub fn from_headers(headers: &hyper::HeaderMap) -> Option<Impersonation> {
        let mut imp = Impersonation::default();
        let mut any = false;
        for (name, value) in headers {
            let Ok(value) = value.to_str() else { continue };
            let name = name.as_str().to_ascii_lowercase();
            if name == "impersonate-user" {
                imp.user = value.to_string();
            } else if name == "impersonate-uid" {
                imp.uid = value.to_string();
            } else if name == "impersonate-group" {
                imp.groups.push(value.to_string());
            } else if let Some(key) = name.strip_prefix("impersonate-extra-") {
                imp.extra
                    .entry(crate::kubesim::http::percent_decode(key))
                    .or_default()
                    .push(value.to_string());
            } else {
                continue;
            }
            any = true;
        }
        any.then_some(imp)
    }

    /// The user impersonated (what the API server then authorizes the
    /// request as).
    pub fn user(&self) -> UserInfo {
        let mut groups = self.groups.clone();
        if let Some(sa) = self.user.strip_prefix("system:serviceaccount:")
            && let Some((ns, _)) = sa.split_once(':')
        {
            for g in service_account_groups(ns) {
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
        } else if self.user != "system:anonymous"
            && !groups.iter().any(|g| g == "system:authenticated")
        {
            groups.push("system:authenticated".into());
        }
        UserInfo {
            name: self.user.clone(),
            uid: self.uid.clone(),
            groups,
            extra: self.extra.clone(),
        }
    }
}
