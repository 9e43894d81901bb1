//! The store's vocabulary: the API server's errors (a `Status` and its
//! code), watch events, targets, and the options of reads, writes and
//! deletes. Pure.

use super::*;

/// An error the API server answers with: a `Status` object and its code.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`
    pub reason: &'static str,
    /// `Status.message`
    pub message: String,
    /// `Status.details`, when the API server gives them.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub(super) fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": rt.plural});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

impl ApiError {
    /// The `Status` object of this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }

    pub(super) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 404 NotFound for an object.
    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError {
            details: Some(details(rt, name)),
            ..ApiError::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", rt.qualified()),
            )
        }
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError {
            details: Some(details(rt, name)),
            ..ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", rt.qualified()),
            )
        }
    }

    /// 409 Conflict on a stale `resourceVersion` or a failed precondition.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError {
            details: Some(details(rt, name)),
            ..ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    rt.qualified()
                ),
            )
        }
    }

    /// The Conflict of a stale update.
    pub fn stale(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per field error: (field, cause type, message).
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[(String, &str, String)]) -> ApiError {
        let msgs: Vec<&str> = causes.iter().map(|c| c.2.as_str()).collect();
        let joined = if msgs.len() == 1 {
            msgs[0].to_string()
        } else {
            format!("[{}]", msgs.join(", "))
        };
        let mut d = json!({"name": name, "kind": rt.kind, "causes": causes.iter().map(|(field, reason, message)| {
            // The cause message is the error without its field path.
            let m = message.strip_prefix(&format!("{field}: ")).unwrap_or(message);
            json!({"reason": reason, "message": m, "field": field})
        }).collect::<Vec<_>>()});
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        ApiError {
            details: Some(d),
            ..ApiError::new(
                422,
                "Invalid",
                format!("{} \"{name}\" is invalid: {joined}", rt.qualified_kind()),
            )
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 410 Expired (a watch or continue token too old for the window).
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    /// 404 NotFound for a path the API does not serve.
    pub fn no_route() -> ApiError {
        ApiError {
            details: Some(json!({})),
            ..ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }
}

/// A watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to the store.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion this change made.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// Group of the object's kind.
    pub group: String,
    /// Resource (plural) of the object's kind.
    pub plural: String,
    /// The object after the change (for DELETED: its last state).
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED and DELETED).
    pub prev: Option<Arc<Value>>,
    /// When the change was made (µs since the Unix epoch,
    /// [`crate::kubesim::now_us`]).
    pub at_us: u64,
}

impl Event {
    /// Namespace of the object ("" when cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Which kind, version and namespace a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// API group ("" for core).
    pub group: String,
    /// API version in the URL.
    pub version: String,
    /// Resource (plural).
    pub plural: String,
    /// Namespace in the URL (None: cluster-scoped or all namespaces).
    pub namespace: Option<String>,
}

impl Target {
    /// A target from its parts.
    pub fn new(group: &str, version: &str, plural: &str, namespace: Option<&str>) -> Target {
        Target {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: namespace.map(str::to_string),
        }
    }
}

/// The subresource a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    Main,
    /// `/status`
    Status,
    /// `/approval` (CertificateSigningRequests: their conditions only)
    Approval,
}

impl Subresource {
    /// The subresource's name in a URL and in `managedFields` (None: the
    /// object itself).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Approval => Some("approval"),
        }
    }
}

/// Options of create, update and patch.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldManager`
    pub field_manager: Option<String>,
    /// `force` (server-side apply)
    pub force: bool,
    /// `fieldValidation`: `Strict` refuses unknown fields of custom
    /// resources (which are otherwise pruned).
    pub field_validation: Option<String>,
    /// The manager recorded in `managedFields` (operation `Update`) for the
    /// fields a create, update or non-apply patch sets: `fieldManager`, or
    /// the client's user agent as the API server derives it.
    pub update_manager: Option<String>,
    /// Who writes, for the admission plugins that ask (None: the cluster's
    /// own controllers, which kubesim runs in process).
    pub admission: Option<Arc<Admission>>,
}

/// What the admission plugins know of a request besides the object: its
/// user and the authorizer (RBAC as the request found it); what they
/// leave: Warning headers and the authorization checks they made (for the
/// request log).
pub struct Admission {
    pub user: crate::kubesim::auth::authn::UserInfo,
    /// Whether the user may do what the attributes say.
    pub authorize: Box<dyn Fn(&crate::kubesim::auth::rbac::Attributes) -> bool + Send + Sync>,
    /// `Warning` headers for the response.
    pub warnings: Mutex<Vec<String>>,
    /// Authorization checks made by admission plugins: the plugin, the
    /// question and the answer.
    pub checks: Mutex<Vec<(&'static str, crate::kubesim::auth::rbac::Attributes, bool)>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("user", &self.user.name)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// An admission context for `user` with an authorizer.
    pub fn new(
        user: crate::kubesim::auth::authn::UserInfo,
        authorize: impl Fn(&crate::kubesim::auth::rbac::Attributes) -> bool + Send + Sync + 'static,
    ) -> Admission {
        Admission {
            user,
            authorize: Box::new(authorize),
            warnings: Mutex::new(Vec::new()),
            checks: Mutex::new(Vec::new()),
        }
    }

    /// Asks the authorizer for `plugin`, remembering the question.
    pub fn check(&self, plugin: &'static str, a: crate::kubesim::auth::rbac::Attributes) -> bool {
        let ok = (self.authorize)(&a);
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((plugin, a, ok));
        ok
    }

    /// Adds a Warning header.
    pub fn warn(&self, message: String) {
        self.warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }
}

/// The list parameters.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `labelSelector`
    pub label_selector: LabelSelector,
    /// `fieldSelector`
    pub field_selector: FieldSelector,
    /// `limit` (0: no limit)
    pub limit: usize,
    /// `continue`
    pub continue_token: Option<String>,
    /// `resourceVersion`
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`
    pub resource_version_match: Option<String>,
}

/// Cascading deletion policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Delete now, dependents later (the default).
    Background,
    /// Dependents first, the owner waits with the `foregroundDeletion` finalizer.
    Foreground,
    /// Dependents lose their owner reference.
    Orphan,
}

/// The DELETE options.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `propagationPolicy` (None: the kind's default, Background)
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`
    pub resource_version: Option<String>,
    /// `dryRun=All`
    pub dry_run: bool,
    /// `gracePeriodSeconds` (None: the object's default; negative counts
    /// as 1, as the API server has it)
    pub grace_period: Option<i64>,
    /// Who deletes (see [`WriteOptions::admission`]).
    pub admission: Option<Arc<Admission>>,
}

/// What a watch starts from: the kind, the events to replay, the
/// resourceVersion they reach, and the receiver of what comes next.
pub type WatchStart = (
    Arc<ResourceType>,
    Vec<Arc<Event>>,
    u64,
    broadcast::Receiver<Arc<Event>>,
);

/// Knobs of the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Events kept per kind for watches from an old resourceVersion and for
    /// continue tokens; older is 410 Expired.
    pub watch_window: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { watch_window: 1000 }
    }
}
