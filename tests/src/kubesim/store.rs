//! The object store: every kind's objects, one global `resourceVersion`
//! counter (as etcd's revision), a bounded event history per kind (the
//! watch cache window), and change notifications for watchers and the
//! in-process controllers. The in-process API of kubesim: the HTTP layer
//! and the simulated controllers call these methods. No I/O; a
//! `std::sync::Mutex` guards the state and is never held across an await.

use super::convert;
use super::defaults;
use super::discovery::{self, ResourceType};
use super::patch::{self, PatchType};
use super::selectors::{FieldSelector, LabelSelector};
use super::{new_uid, now_rfc3339, random_suffix};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

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

fn details(rt: &ResourceType, name: &str) -> Value {
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

    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
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

type ObjKey = (String, String);
type TypeKey = (String, String);

pub(super) struct Table {
    pub(super) rt: Arc<ResourceType>,
    pub(super) objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    /// The oldest resourceVersion from which history is complete.
    window_start: u64,
}

pub(super) struct State {
    pub(super) rv: u64,
    pub(super) tables: BTreeMap<TypeKey, Table>,
    /// Kinds stored as another kind.
    aliases: Vec<Arc<ResourceType>>,
    window: usize,
    events: broadcast::Sender<Arc<Event>>,
    /// A kubelet runs (kubesim's sim): a DELETE of a scheduled Pod marks it
    /// and the kubelet removes it after the containers stopped.
    graceful_pods: bool,
}

/// The store; cheap to clone (shared).
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<Arc<Event>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// A Pod in graceful deletion: it goes when the kubelet says so.
fn graceful_pod(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.plural == "pods"
        && meta(obj)
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .is_some_and(|g| g > 0)
}

/// What a DELETE does to a Pod under graceful deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodGrace {
    /// Already terminating and not shortened: nothing changes (the API
    /// server's "graceful deletion pending").
    Pending,
    /// Marks it: `deletionTimestamp` at this Unix second, this
    /// `deletionGracePeriodSeconds` (0: removed at once after the mark).
    Mark(u64, u64),
    /// Removed from the store at once.
    Now,
}

/// The API server's graceful deletion of a Pod (`rest.BeforeDelete` and the
/// Pod strategy's `CheckGracefulDelete`): the grace is the DELETE's
/// `gracePeriodSeconds`, else `terminationGracePeriodSeconds` (default
/// 30); 0 for a Pod never scheduled or already terminated. A terminating
/// Pod's grace may only be shortened (its `deletionTimestamp` moves by the
/// difference); a DELETE without a shorter grace changes nothing, so only
/// `gracePeriodSeconds=0` (`--force --grace-period=0`, the kubelet's
/// final DELETE) removes it at once.
pub fn pod_grace(pod: &Value, requested: Option<i64>, now: u64) -> PodGrace {
    let requested = requested.map(|g| if g < 0 { 1 } else { g as u64 });
    let m = meta(pod);
    if m.get("deletionTimestamp").is_some() {
        let current = m
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if current == 0 {
            return PodGrace::Now;
        }
        return match requested {
            Some(g) if g < current => {
                let at = m
                    .get("deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(super::table::parse_rfc3339)
                    .map_or(now + current, |t| t.max(0) as u64);
                PodGrace::Mark(at.saturating_sub(current) + g, g)
            }
            _ => PodGrace::Pending,
        };
    }
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminated = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminated {
        return PodGrace::Now;
    }
    let grace = requested.unwrap_or_else(|| {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(30)
    });
    PodGrace::Mark(now + grace, grace)
}

/// The name of an object.
pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or_default()
}

/// The finalizers of an object.
pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

fn dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn dns_label(name: &str) -> bool {
    dns_subdomain(name) && name.len() <= 63 && !name.contains('.')
}

/// Removes `null`s and empty metadata collections, as a Go round trip of a
/// built-in kind does (`omitempty`).
fn normalize_builtin(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(normalize_builtin);
        }
        Value::Array(a) => a.iter_mut().for_each(normalize_builtin),
        _ => {}
    }
}

fn strip_empty_meta(obj: &mut Value) {
    let m = meta_mut(obj);
    for f in [
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "managedFields",
    ] {
        let empty = match m.get(f) {
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            m.remove(f);
        }
    }
    m.remove("selfLink");
}

/// Everything but metadata (and status when it is a subresource): what
/// `metadata.generation` counts changes of.
fn spec_part(rt: &ResourceType, obj: &Value) -> Value {
    let mut o = obj.as_object().cloned().unwrap_or_default();
    o.remove("metadata");
    o.remove("apiVersion");
    o.remove("kind");
    if rt.status_subresource {
        o.remove("status");
    }
    Value::Object(o)
}

impl Store {
    /// A store with the built-in kinds and the namespaces a cluster starts
    /// with (`default`, `kube-system`, `kube-public`, `kube-node-lease`).
    pub fn new(opts: StoreOptions) -> Store {
        let (events, _) = broadcast::channel(8192);
        let mut st = State {
            rv: 0,
            tables: BTreeMap::new(),
            aliases: Vec::new(),
            window: opts.watch_window.max(1),
            events: events.clone(),
            graceful_pods: false,
        };
        for rt in discovery::builtin_types() {
            st.register(rt);
        }
        let store = Store {
            state: Arc::new(Mutex::new(st)),
            events,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store
                .create(
                    &Target::new("", "v1", "namespaces", None),
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                    &WriteOptions::default(),
                )
                .expect("a fresh store accepts the initial namespaces");
        }
        store
            .create(
                &Target::new("", "v1", "services", Some("default")),
                json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                    "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": 6443}]}}),
                &WriteOptions::default(),
            )
            .expect("a fresh store accepts the kubernetes Service");
        store
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Graceful deletion of scheduled Pods (a kubelet confirms it).
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.lock().graceful_pods = on;
    }

    /// Change notifications: every event committed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// The current resourceVersion (etcd's revision).
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The served kinds.
    pub fn types(&self) -> Vec<Arc<ResourceType>> {
        let st = self.lock();
        let mut types: Vec<Arc<ResourceType>> = st.tables.values().map(|t| t.rt.clone()).collect();
        types.extend(st.aliases.iter().cloned());
        types
    }

    /// The kind served at a group, version and plural.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock().resolve(group, version, plural).ok()
    }

    /// Create.
    pub fn create(&self, t: &Target, obj: Value, opts: &WriteOptions) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        st.create(&rt, t, obj, opts)
    }

    /// Get one object.
    pub fn get(&self, t: &Target, name: &str) -> Result<Value, ApiError> {
        let st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        let ns = st.namespace_of(&rt, t)?;
        st.tables[&key(&rt)]
            .objects
            .get(&(ns, name.to_string()))
            .map(|o| present(&rt, &t.version, o))
            .ok_or_else(|| ApiError::not_found(&rt, name))
    }

    /// List, with selectors, pagination and resourceVersion semantics.
    pub fn list(&self, t: &Target, opts: &ListOptions) -> Result<Value, ApiError> {
        let st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        for term in &opts.field_selector.0 {
            if !rt.supports_field(&term.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    term.field
                )));
            }
        }
        let table = &st.tables[&key(&rt)];
        let (snapshot_rv, start) = match &opts.continue_token {
            Some(tok) => {
                let (rv, start) = decode_continue(tok)?;
                (Some(rv), Some(start))
            }
            None => {
                let exact = opts.resource_version_match.as_deref() == Some("Exact");
                match (&opts.resource_version, exact) {
                    (Some(rv), true) => (Some(parse_rv(rv)?), None),
                    (Some(rv), false) if rv != "0" && !rv.is_empty() => {
                        let want = parse_rv(rv)?;
                        if want > st.rv {
                            return Err(too_large(want, st.rv));
                        }
                        (None, None)
                    }
                    _ => (None, None),
                }
            }
        };
        let list_rv = snapshot_rv.unwrap_or(st.rv);
        let objects: BTreeMap<ObjKey, Arc<Value>> = match snapshot_rv {
            Some(rv) if rv < st.rv => table.snapshot(rv).ok_or_else(|| {
                if opts.continue_token.is_some() {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
                } else {
                    ApiError::expired(format!("too old resource version: {rv} ({})", table.window_start + 1))
                }
            })?,
            Some(rv) if rv > st.rv => return Err(too_large(rv, st.rv)),
            _ => table.objects.clone(),
        };
        let ns = t.namespace.clone().filter(|_| rt.namespaced);
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        for ((ons, oname), obj) in &objects {
            if ns.as_ref().is_some_and(|n| n != ons) {
                continue;
            }
            if let Some(s) = &start
                && format!("{ons}/{oname}\u{0}").as_str() <= s.as_str()
                && format!("{ons}/{oname}").as_str() < s.as_str()
            {
                continue;
            }
            let shown = present(&rt, &t.version, obj);
            if !opts.label_selector.matches_object(&shown)
                || !opts.field_selector.matches_object(&shown)
            {
                continue;
            }
            if opts.limit > 0 && items.len() == opts.limit {
                if next.is_none() {
                    let last: &Value = items.last().expect("limit > 0");
                    next = Some(format!(
                        "{}/{}\u{0}",
                        meta_str(last, "namespace").unwrap_or_default(),
                        name_of(last)
                    ));
                }
                remaining += 1;
                continue;
            }
            let mut item = shown;
            if !rt.custom
                && let Some(o) = item.as_object_mut()
            {
                o.remove("apiVersion");
                o.remove("kind");
            }
            items.push(item);
        }
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if let Some(start) = next {
            metadata["continue"] = json!(encode_continue(list_rv, &start));
            metadata["remainingItemCount"] = json!(remaining);
        }
        Ok(json!({
            "apiVersion": rt.api_version(&t.version),
            "kind": format!("{}List", rt.kind),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Replace (PUT) an object or its status.
    pub fn update(
        &self,
        t: &Target,
        name: &str,
        obj: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        st.update(&rt, t, name, obj, sub, opts)
    }

    /// Patch an object or its status. Server-side apply of a missing object
    /// creates it; the flag says whether it did.
    pub fn patch(
        &self,
        t: &Target,
        name: &str,
        kind: PatchType,
        body: &Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        let ns = st.namespace_of(&rt, t)?;
        let current = st.tables[&key(&rt)]
            .objects
            .get(&(ns, name.to_string()))
            .cloned();
        let manager = opts.field_manager.clone();
        if kind == PatchType::Apply && manager.as_deref().unwrap_or_default().is_empty() {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        if kind == PatchType::Strategic && rt.custom {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let Some(current) = current else {
            if kind == PatchType::Apply && sub == Subresource::Main {
                let mut obj = body.clone();
                let fields = patch::field_set(&obj, !rt.custom);
                set_apply_entry(
                    &mut obj,
                    manager.as_deref().unwrap_or_default(),
                    &rt.api_version(&t.version),
                    fields,
                    None,
                );
                let created = st.create(&rt, t, obj, &without_update_manager(opts))?;
                return Ok((created, true));
            }
            return Err(ApiError::not_found(&rt, name));
        };
        let mut next = present(&rt, &t.version, &current);
        match kind {
            PatchType::Merge => patch::merge_patch(&mut next, body),
            PatchType::Json => patch::json_patch(&mut next, body).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?,
            PatchType::Strategic => {
                patch::strategic_merge(&mut next, body).map_err(ApiError::bad_request)?
            }
            PatchType::Apply => {
                let m = manager.as_deref().unwrap_or_default();
                let subname = (sub == Subresource::Status).then_some("status");
                let new_fields = patch::field_set(body, !rt.custom);
                let mut entries = managed_fields(&next);
                // Fields another manager owns with another value conflict,
                // unless forced, which takes them over.
                let mut conflicts = Vec::new();
                for other in entries.iter_mut().filter(|e| !is_entry(e, m, subname)) {
                    let Some(theirs) = other.get("fieldsV1").cloned() else {
                        continue;
                    };
                    let who = other
                        .get("manager")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let av = other
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    for path in patch::overlaps(&new_fields, &theirs) {
                        if patch::lookup(body, &path) == patch::lookup(&next, &path) {
                            continue;
                        }
                        if opts.force {
                            if let Some(f) = other.get_mut("fieldsV1") {
                                patch::remove_path(f, &path);
                            }
                        } else {
                            conflicts.push((who.clone(), av.clone(), patch::path_string(&path)));
                        }
                    }
                }
                if !conflicts.is_empty() {
                    let msgs: Vec<String> = conflicts
                        .iter()
                        .map(|(who, av, f)| format!("conflict with \"{who}\" using {av}: {f}"))
                        .collect();
                    let n = conflicts.len();
                    let mut d = json!({"name": name, "kind": rt.plural, "causes": conflicts.iter().map(|(who, av, f)| json!({
                        "reason": "FieldManagerConflict",
                        "message": format!("conflict with \"{who}\" using {av}"),
                        "field": f,
                    })).collect::<Vec<_>>()});
                    if !rt.group.is_empty() {
                        d["group"] = json!(rt.group);
                    }
                    return Err(ApiError {
                        code: 409,
                        reason: "Conflict",
                        message: format!(
                            "Apply failed with {n} conflict{}: {}",
                            if n == 1 { "" } else { "s" },
                            msgs.join("\n")
                        ),
                        details: Some(d),
                    });
                }
                if opts.force {
                    meta_mut(&mut next)
                        .insert("managedFields".into(), Value::Array(entries.clone()));
                }
                let mut gone = entries
                    .iter()
                    .find(|e| is_entry(e, m, subname))
                    .and_then(|e| e.get("fieldsV1"))
                    .map(|old| patch::subtract(old, &new_fields))
                    .unwrap_or_else(|| json!({}));
                for other in entries.iter().filter(|e| !is_entry(e, m, subname)) {
                    if let Some(f) = other.get("fieldsV1") {
                        gone = patch::subtract(&gone, f);
                    }
                }
                patch::remove_fields(&mut next, &gone);
                patch::apply_merge(&mut next, body, !rt.custom).map_err(ApiError::bad_request)?;
                set_apply_entry(
                    &mut next,
                    m,
                    &rt.api_version(&t.version),
                    new_fields,
                    subname,
                );
            }
        }
        // A resourceVersion in a patch is a precondition; none means "latest".
        let body_rv = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if body_rv.is_none() {
            meta_mut(&mut next).insert("resourceVersion".into(), json!(current_rv(&current)));
        }
        if next.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let inner = if kind == PatchType::Apply {
            without_update_manager(opts)
        } else {
            opts.clone()
        };
        let updated = st.update(&rt, t, name, next, sub, &inner)?;
        Ok((updated, false))
    }

    /// Delete, honouring finalizers, preconditions and the propagation policy.
    pub fn delete(&self, t: &Target, name: &str, opts: &DeleteOptions) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        st.delete(&rt, t, name, opts)
    }

    /// Delete every object a list would return.
    pub fn delete_collection(
        &self,
        t: &Target,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let listed = self.list(
            t,
            &ListOptions {
                limit: 0,
                continue_token: None,
                ..list.clone()
            },
        )?;
        let mut st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        let mut items = Vec::new();
        for item in listed["items"].as_array().into_iter().flatten() {
            let ns = meta_str(item, "namespace").map(str::to_string);
            let target = Target {
                namespace: ns,
                ..t.clone()
            };
            match st.delete(&rt, &target, name_of(item), opts) {
                Ok(_) => items.push(item.clone()),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "apiVersion": rt.api_version(&t.version),
            "kind": format!("{}List", rt.kind),
            "metadata": {"resourceVersion": st.rv.to_string()},
            "items": items,
        }))
    }

    /// The events a watch from `rv` must replay (all of them after `rv`, for
    /// one kind), and a receiver of what comes next, taken atomically.
    /// `None` for `rv`: the current objects as synthetic ADDED events.
    pub fn watch_from(&self, t: &Target, rv: Option<u64>) -> Result<WatchStart, ApiError> {
        let st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        let table = &st.tables[&key(&rt)];
        let rx = st.events.subscribe();
        let replay = match rv {
            None => table
                .objects
                .values()
                .map(|o| {
                    Arc::new(Event {
                        rv: current_rv(o).parse().unwrap_or(0),
                        kind: EventType::Added,
                        group: rt.group.clone(),
                        plural: rt.plural.clone(),
                        object: o.clone(),
                        prev: None,
                    })
                })
                .collect(),
            Some(rv) => {
                if rv < table.window_start {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        table.window_start + 1
                    )));
                }
                table
                    .history
                    .iter()
                    .filter(|e| e.rv > rv)
                    .cloned()
                    .collect()
            }
        };
        Ok((rt, replay, st.rv, rx))
    }

    /// Runs a closure on the state (for the in-process controllers).
    pub(super) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.lock())
    }
}

fn too_large(want: u64, have: u64) -> ApiError {
    ApiError {
        details: Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
        ..ApiError::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {want}, current: {have}"),
        )
    }
}

fn current_rv(obj: &Value) -> String {
    meta_str(obj, "resourceVersion")
        .unwrap_or_default()
        .to_string()
}

fn managed_fields(obj: &Value) -> Vec<Value> {
    meta(obj)
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_entry(e: &Value, manager: &str, sub: Option<&str>) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(manager)
        && e.get("operation").and_then(Value::as_str) == Some("Apply")
        && e.get("subresource").and_then(Value::as_str) == sub
}

/// An apply records its own `Apply` entry, not an `Update` one.
fn without_update_manager(opts: &WriteOptions) -> WriteOptions {
    WriteOptions {
        update_manager: None,
        ..opts.clone()
    }
}

/// Records the fields a non-apply write set as owned by its manager
/// (operation `Update`), taking them from other managers, as the API
/// server's field manager does.
fn record_update(
    obj: &mut Value,
    old: Option<&Value>,
    manager: &str,
    api_version: &str,
    keyed: bool,
    sub: Option<&str>,
) {
    let mut body = obj.clone();
    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    let changed: Vec<Vec<String>> = patch::leaves(&patch::field_set(&body, keyed))
        .into_iter()
        .filter(|p| old.is_none_or(|o| patch::lookup(o, p) != patch::lookup(obj, p)))
        .collect();
    if changed.is_empty() {
        return;
    }
    let mut entries = managed_fields(obj);
    let mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str) == sub
    };
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        if let Some(f) = e.get_mut("fieldsV1") {
            for p in &changed {
                patch::remove_path(f, p);
            }
        }
    }
    let mut fields = entries
        .iter()
        .find(|e| mine(e))
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| json!({}));
    for p in &changed {
        patch::insert_path(&mut fields, p);
    }
    entries.retain(|e| {
        !mine(e)
            && e.get("fieldsV1")
                .is_some_and(|f| !patch::leaves(f).is_empty())
    });
    let mut entry = json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    entries.push(entry);
    meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
}

fn set_apply_entry(
    obj: &mut Value,
    manager: &str,
    api_version: &str,
    fields: Value,
    sub: Option<&str>,
) {
    let mut entries = managed_fields(obj);
    entries.retain(|e| !is_entry(e, manager, sub));
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    entries.push(entry);
    meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
}

/// An object as served at a version (custom resources are stored once and
/// served at every version with only `apiVersion` changed, as the API server
/// does with conversion strategy `None`).
pub fn present(rt: &ResourceType, version: &str, obj: &Value) -> Value {
    if rt.stored_as.is_some() {
        return convert::event_from_core(obj);
    }
    let mut o = obj.clone();
    o["apiVersion"] = json!(rt.api_version(version));
    o
}

/// The (group, plural) a kind's objects are stored under.
pub fn storage_key(rt: &ResourceType) -> TypeKey {
    rt.stored_as
        .clone()
        .unwrap_or_else(|| (rt.group.clone(), rt.plural.clone()))
}

fn key(rt: &ResourceType) -> TypeKey {
    storage_key(rt)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|b| *b == c)? as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// A continue token as the API server makes it: base64 of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the last item>"}`.
pub fn encode_continue(rv: u64, start: &str) -> String {
    base64_encode(
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
            .to_string()
            .as_bytes(),
    )
}

/// The snapshot resourceVersion and start key of a continue token.
pub fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let bytes = base64_decode(token).ok_or_else(bad)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad());
    }
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    Ok((rv, start))
}

impl Table {
    /// The objects as they were at resourceVersion `rv`, if the history
    /// reaches back that far.
    fn snapshot(&self, rv: u64) -> Option<BTreeMap<ObjKey, Arc<Value>>> {
        if rv < self.window_start {
            return None;
        }
        let mut objects = self.objects.clone();
        for e in self.history.iter().rev().take_while(|e| e.rv > rv) {
            let k = (e.namespace().to_string(), name_of(&e.object).to_string());
            match (e.kind, &e.prev) {
                (EventType::Added, _) => {
                    objects.remove(&k);
                }
                (EventType::Modified, Some(prev)) => {
                    objects.insert(k, prev.clone());
                }
                (EventType::Deleted, _) => {
                    objects.insert(k, e.object.clone());
                }
                (EventType::Modified, None) => {}
            }
        }
        Some(objects)
    }
}

impl State {
    pub(super) fn register(&mut self, rt: ResourceType) {
        if rt.stored_as.is_some() {
            self.aliases.push(Arc::new(rt));
            return;
        }
        let k = key(&rt);
        let rv = self.rv;
        match self.tables.get_mut(&k) {
            Some(t) => t.rt = Arc::new(rt),
            None => {
                self.tables.insert(
                    k,
                    Table {
                        rt: Arc::new(rt),
                        objects: BTreeMap::new(),
                        history: VecDeque::new(),
                        window_start: rv,
                    },
                );
            }
        }
    }

    pub(super) fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<Arc<ResourceType>, ApiError> {
        let served = |rt: &ResourceType| rt.versions.iter().any(|v| v == version);
        self.tables
            .get(&(group.to_string(), plural.to_string()))
            .filter(|t| served(&t.rt))
            .map(|t| t.rt.clone())
            .or_else(|| {
                self.aliases
                    .iter()
                    .find(|a| a.group == group && a.plural == plural && served(a))
                    .cloned()
            })
            .ok_or_else(ApiError::no_route)
    }

    fn namespace_of(&self, rt: &ResourceType, t: &Target) -> Result<String, ApiError> {
        if !rt.namespaced {
            return Ok(String::new());
        }
        t.namespace.clone().ok_or_else(|| {
            ApiError::bad_request(
                "the server could not find the requested resource: a namespace is required",
            )
        })
    }

    /// Commits a change: bumps the resourceVersion, stores it, records it in
    /// the kind's history (evicting past the window) and notifies.
    pub(super) fn commit(
        &mut self,
        rt: &ResourceType,
        kind: EventType,
        mut obj: Value,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let k = (
            meta_str(&obj, "namespace").unwrap_or_default().to_string(),
            name_of(&obj).to_string(),
        );
        let obj = Arc::new(obj);
        let window = self.window;
        let table = self
            .tables
            .get_mut(&key(rt))
            .expect("committing to a registered kind");
        let prev = match kind {
            EventType::Deleted => table.objects.remove(&k),
            _ => table.objects.insert(k, obj.clone()),
        };
        let (group, plural) = key(rt);
        let ev = Arc::new(Event {
            rv,
            kind,
            group,
            plural,
            object: obj.clone(),
            prev,
        });
        table.history.push_back(ev.clone());
        while table.history.len() > window {
            if let Some(old) = table.history.pop_front() {
                table.window_start = old.rv;
            }
        }
        // Nobody listening is fine.
        let _ = self.events.send(ev);
        obj
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str, creating: bool) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let nsrt = self.resolve("", "v1", "namespaces")?;
        match self.tables[&key(&nsrt)]
            .objects
            .get(&(String::new(), ns.to_string()))
        {
            None => Err(ApiError::not_found(&nsrt, ns)),
            Some(n) if creating && meta(n).get("deletionTimestamp").is_some() => Err(ApiError {
                details: Some(json!({"name": ns, "kind": "namespaces"})),
                ..ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.qualified(),
                    "",
                ))
            }),
            Some(_) => Ok(()),
        }
    }

    /// Checks a custom resource against its schema (pruning unknown fields
    /// and defaulting as the API server does).
    fn admit_custom(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<(), ApiError> {
        let Some(schema) = rt.schemas.get(version) else {
            return Ok(());
        };
        let Some(o) = obj.as_object_mut() else {
            return Err(ApiError::bad_request("the body is not an object"));
        };
        let keep: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
            .iter()
            .filter_map(|k| o.remove(*k).map(|v| (k.to_string(), v)))
            .collect();
        let (pruned, errors) = crate::schema::admit(schema, obj);
        if let Some(o) = obj.as_object_mut() {
            for (k, v) in keep {
                o.insert(k, v);
            }
        }
        if opts.field_validation.as_deref() == Some("Strict") && !pruned.is_empty() {
            let unknown: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "{} in version \"{version}\" cannot be handled as a {}: strict decoding error: {}",
                rt.kind,
                rt.kind,
                unknown.join(", ")
            )));
        }
        let mut causes: Vec<(String, &str, String)> = errors
            .iter()
            .map(|e| (e.field.clone(), e.reason.as_str(), e.message.clone()))
            .collect();
        if causes.is_empty() {
            // CEL rules run on a structurally valid object, as in the API server.
            for e in crate::cel::check(schema, obj, old) {
                let field = e
                    .split_once(": ")
                    .map(|(f, _)| f.to_string())
                    .unwrap_or_default();
                causes.push((field, "FieldValueInvalid", e));
            }
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(rt, name_of(obj), &causes))
    }

    /// The fields every write fixes: apiVersion, kind, namespace; strips
    /// what a Go round trip would.
    fn prepare(&self, rt: &ResourceType, t: &Target, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let want_av = rt.api_version(&t.version);
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && av != want_av
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        obj["apiVersion"] = json!(want_av);
        obj["kind"] = json!(rt.kind);
        if !rt.custom {
            normalize_builtin(obj);
            let (group, plural) = key(rt);
            defaults::apply(&group, &plural, obj);
        }
        let url_ns = self.namespace_of(rt, t)?;
        let m = meta_mut(obj);
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(url_ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        strip_empty_meta(obj);
        if rt.stored_as.is_some() {
            *obj = convert::event_to_core(obj);
        }
        Ok(())
    }

    pub(super) fn create(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.prepare(rt, t, &mut obj)?;
        let ns = self.namespace_of(rt, t)?;
        let m = meta_mut(&mut obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m.get("generateName").and_then(Value::as_str) {
                Some(g) if !g.is_empty() => {
                    name = format!("{g}{}", random_suffix());
                    m.insert("name".into(), json!(name));
                }
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        &[(
                            "metadata.name".into(),
                            "FieldValueRequired",
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        )],
                    ));
                }
            }
        }
        let name_ok = if rt.plural == "namespaces" || rt.plural == "services" {
            dns_label(&name)
        } else if rt.plural.ends_with("roles") || rt.plural.ends_with("rolebindings") {
            !name.is_empty() && !name.contains('/') && name != "." && name != ".."
        } else {
            dns_subdomain(&name)
        };
        if !name_ok {
            let rule = if rt.plural == "namespaces" || rt.plural == "services" {
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            } else {
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            };
            return Err(ApiError::invalid(
                rt,
                &name,
                &[(
                    "metadata.name".into(),
                    "FieldValueInvalid",
                    format!("metadata.name: Invalid value: \"{name}\": {rule}"),
                )],
            ));
        }
        self.check_namespace(rt, &ns, true)?;
        if self.tables[&key(rt)]
            .objects
            .contains_key(&(ns.clone(), name.clone()))
        {
            return Err(ApiError::already_exists(rt, &name));
        }
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("resourceVersion");
        if rt.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        match &rt.initial_status {
            Some(Value::Null) => {
                if let Some(o) = obj.as_object_mut() {
                    o.remove("status");
                }
            }
            Some(s) => obj["status"] = s.clone(),
            None => {}
        }
        if rt.custom {
            self.admit_custom(rt, &t.version, &mut obj, None, opts)?;
        }
        self.on_create_special(rt, &mut obj)?;
        if rt.group.is_empty() && rt.plural == "services" {
            let used: Vec<String> = self.tables[&key(rt)]
                .objects
                .values()
                .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            defaults::allocate_cluster_ip(&mut obj, &used).map_err(|e| {
                let field = e.split(':').next().unwrap_or("spec.clusterIPs").to_string();
                ApiError::invalid(rt, name_of(&obj), &[(field, "FieldValueInvalid", e)])
            })?;
        }
        if opts.dry_run {
            return Ok(present(rt, &t.version, &obj));
        }
        if let Some(m) = opts.update_manager.as_deref().filter(|m| !m.is_empty()) {
            record_update(
                &mut obj,
                None,
                m,
                &rt.api_version(&t.version),
                !rt.custom,
                None,
            );
        }
        let stored = self.commit(rt, EventType::Added, obj);
        self.after_write_special(rt, &stored);
        Ok(present(rt, &t.version, &stored))
    }

    /// What creating some kinds entails (namespaces' and CRDs' finalizers
    /// and status, CRD names).
    fn on_create_special(&mut self, rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "namespaces") => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                let name = name_of(obj).to_string();
                let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = json!(name);
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let ct = discovery::crd_type(obj).map_err(|e| {
                    ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "spec".into(),
                            "FieldValueInvalid",
                            format!("spec: Invalid value: {e}"),
                        )],
                    )
                })?;
                let want = format!("{}.{}", ct.plural, ct.group);
                if name_of(obj) != want {
                    return Err(ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "metadata.name".into(),
                            "FieldValueInvalid",
                            format!(
                                "metadata.name: Invalid value: \"{}\": must be spec.names.plural+\".\"+spec.group",
                                name_of(obj)
                            ),
                        )],
                    ));
                }
                if let Some(existing) = self.tables.get(&key(&ct))
                    && !existing.rt.custom
                {
                    return Err(ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "spec.group".into(),
                            "FieldValueInvalid",
                            "spec.group: Invalid value: the group and plural of a built-in kind"
                                .into(),
                        )],
                    ));
                }
                let m = meta_mut(obj);
                m.insert(
                    "finalizers".into(),
                    json!(["customresourcecleanup.apiextensions.k8s.io"]),
                );
                obj["status"] = crd_status(obj, &ct);
            }
            _ => {}
        }
        Ok(())
    }

    /// Serves or updates the kind of a CRD after it was written.
    fn after_write_special(&mut self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && meta(obj).get("deletionTimestamp").is_none()
            && let Ok(ct) = discovery::crd_type(obj)
        {
            self.register(ct);
        }
    }

    pub(super) fn update(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        name: &str,
        mut obj: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.prepare(rt, t, &mut obj)?;
        let ns = self.namespace_of(rt, t)?;
        match meta_str(&obj, "name") {
            Some(n) if n == name => {}
            Some("") | None => {
                meta_mut(&mut obj).insert("name".into(), json!(name));
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
        }
        let Some(old) = self.tables[&key(rt)]
            .objects
            .get(&(ns.clone(), name.to_string()))
            .cloned()
        else {
            return Err(ApiError::not_found(rt, name));
        };
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|r| !r.is_empty()) {
            if rv != current_rv(&old) {
                return Err(ApiError::stale(rt, name));
            }
        } else if rt.custom {
            // Custom resources do not allow unconditional updates.
            return Err(ApiError::invalid(
                rt,
                name,
                &[(
                    "metadata.resourceVersion".into(),
                    "FieldValueInvalid",
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                        .into(),
                )],
            ));
        }
        if let Some(uid) = meta_str(&obj, "uid").filter(|u| !u.is_empty())
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        let mut next = if sub == Subresource::Status {
            // A status write changes the status only.
            let mut n = (*old).clone();
            match obj.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = meta(&obj).get("managedFields") {
                meta_mut(&mut n).insert("managedFields".into(), mf.clone());
            }
            n
        } else {
            if rt.status_subresource {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(o) = obj.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            obj
        };
        // What clients cannot change.
        {
            let om = meta(&old).clone();
            let m = meta_mut(&mut next);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.insert("resourceVersion".into(), json!(current_rv(&old)));
        }
        strip_empty_meta(&mut next);
        if rt.plural == "namespaces" && rt.group.is_empty() {
            next["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
        }
        if rt.plural == "services" && rt.group.is_empty() && sub == Subresource::Main {
            // Allocated values an update leaves out are kept (the API
            // server's patchAllocatedValues).
            let unset = next
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if unset && next.get("spec").is_some_and(Value::is_object) {
                for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = old.get("spec").and_then(|s| s.get(f)) {
                        next["spec"][f] = v.clone();
                    }
                }
            }
        }
        if meta(&old).get("deletionTimestamp").is_some() {
            let before = finalizers(&old);
            if let Some(f) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    &[(
                        "metadata.finalizers".into(),
                        "FieldValueForbidden",
                        format!(
                            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{f}\"}}"
                        ),
                    )],
                ));
            }
        }
        if rt.custom {
            self.admit_custom(rt, &t.version, &mut next, Some(&old), opts)?;
        }
        if rt.generation && spec_part(rt, &next) != spec_part(rt, &old) {
            let g = meta(&old)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut next).insert("generation".into(), json!(g + 1));
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && sub == Subresource::Main
        {
            let ct = discovery::crd_type(&next).map_err(|e| {
                ApiError::invalid(
                    rt,
                    name,
                    &[(
                        "spec".into(),
                        "FieldValueInvalid",
                        format!("spec: Invalid value: {e}"),
                    )],
                )
            })?;
            next["status"] = crd_status(&next, &ct);
        }
        if let Some(m) = opts.update_manager.as_deref().filter(|m| !m.is_empty()) {
            let subname = (sub == Subresource::Status).then_some("status");
            record_update(
                &mut next,
                Some(&old),
                m,
                &rt.api_version(&t.version),
                !rt.custom,
                subname,
            );
        }
        let mut same = next.clone();
        let mut was = (*old).clone();
        for o in [&mut same, &mut was] {
            // A new owner of fields is a change; a new timestamp alone is not.
            if let Some(Value::Array(entries)) = o.pointer_mut("/metadata/managedFields") {
                for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
            if let Some(o) = o.as_object_mut() {
                o.remove("apiVersion");
            }
        }
        if same == was {
            // No change: the API server writes nothing and keeps the version.
            return Ok(present(rt, &t.version, &old));
        }
        if opts.dry_run {
            return Ok(present(rt, &t.version, &next));
        }
        let done = meta(&next).get("deletionTimestamp").is_some()
            && finalizers(&next).is_empty()
            && !graceful_pod(rt, &next);
        let stored = self.commit(
            rt,
            if done {
                EventType::Deleted
            } else {
                EventType::Modified
            },
            next,
        );
        self.after_write_special(rt, &stored);
        if done {
            self.after_delete_special(rt, &stored);
        }
        Ok(present(rt, &t.version, &stored))
    }

    pub(super) fn delete(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let ns = self.namespace_of(rt, t)?;
        let Some(old) = self.tables[&key(rt)]
            .objects
            .get(&(ns, name.to_string()))
            .cloned()
        else {
            return Err(ApiError::not_found(rt, name));
        };
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && *rv != current_rv(&old)
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current_rv(&old)
                ),
            ));
        }
        let mut next = (*old).clone();
        if rt.group.is_empty() && rt.plural == "pods" && self.graceful_pods {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            match pod_grace(&old, opts.grace_period, now) {
                PodGrace::Pending => return Ok(present(rt, &t.version, &old)),
                PodGrace::Mark(at, grace) => {
                    let m = meta_mut(&mut next);
                    m.insert("deletionTimestamp".into(), json!(super::rfc3339(at)));
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                    if grace > 0 {
                        if opts.dry_run {
                            return Ok(present(rt, &t.version, &next));
                        }
                        let stored = self.commit(rt, EventType::Modified, next);
                        return Ok(present(rt, &t.version, &stored));
                    }
                }
                PodGrace::Now => {
                    let m = meta_mut(&mut next);
                    if m.contains_key("deletionTimestamp") {
                        m.insert("deletionGracePeriodSeconds".into(), json!(0));
                    }
                }
            }
        }
        let mut fins = finalizers(&old);
        match opts.propagation {
            Some(Propagation::Foreground) if !fins.iter().any(|f| f == "foregroundDeletion") => {
                fins.retain(|f| f != "orphan");
                fins.push("foregroundDeletion".into());
            }
            Some(Propagation::Orphan) if !fins.iter().any(|f| f == "orphan") => {
                fins.retain(|f| f != "foregroundDeletion");
                fins.push("orphan".into());
            }
            _ => {}
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            next["status"] = json!({"phase": "Terminating"});
        }
        let has_spec_finalizers = rt.group.is_empty()
            && rt.plural == "namespaces"
            && next
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && !has_spec_finalizers {
            if opts.dry_run {
                return Ok(present(rt, &t.version, &old));
            }
            let stored = self.commit(rt, EventType::Deleted, next);
            self.after_delete_special(rt, &stored);
            if rt.return_deleted_object {
                return Ok(present(rt, &t.version, &stored));
            }
            let mut d = details(rt, name);
            d["uid"] = json!(meta_str(&stored, "uid"));
            return Ok(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}),
            );
        }
        {
            let m = meta_mut(&mut next);
            if !m.contains_key("deletionTimestamp") {
                m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            m.insert("finalizers".into(), json!(fins));
        }
        if next == *old {
            return Ok(present(rt, &t.version, &old));
        }
        if opts.dry_run {
            return Ok(present(rt, &t.version, &next));
        }
        let stored = self.commit(rt, EventType::Modified, next);
        Ok(present(rt, &t.version, &stored))
    }

    /// Stops serving the kind of a CRD that is gone.
    fn after_delete_special(&mut self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && let Ok(ct) = discovery::crd_type(obj)
        {
            let k = key(&ct);
            if self.tables.get(&k).is_some_and(|t| t.rt.custom) {
                self.tables.remove(&k);
            }
        }
    }
}

fn crd_status(crd: &Value, ct: &ResourceType) -> Value {
    let now = now_rfc3339();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(ct.singular);
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{}List", ct.kind));
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": accepted,
        "storedVersions": [ct.storage_version()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
    }

    fn cms() -> Target {
        Target::new("", "v1", "configmaps", Some("default"))
    }

    #[test]
    fn create_sets_identity_and_conflicts_on_duplicates() {
        let s = Store::new(StoreOptions::default());
        let rv0 = s.resource_version();
        let c = s
            .create(&cms(), cm("a", json!({})), &WriteOptions::default())
            .unwrap();
        assert_eq!(
            c["metadata"]["resourceVersion"],
            json!((rv0 + 1).to_string())
        );
        assert_eq!(c["metadata"]["namespace"], "default");
        assert_eq!(c["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert!(
            c["metadata"].get("labels").is_none(),
            "empty labels are dropped"
        );
        assert!(
            c["metadata"].get("generation").is_none(),
            "configmaps have no generation"
        );
        let e = s
            .create(&cms(), cm("a", json!({})), &WriteOptions::default())
            .unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(e.status()["reason"], "AlreadyExists");
        assert_eq!(e.message, "configmaps \"a\" already exists");
    }

    #[test]
    fn stale_update_is_a_conflict_and_noop_keeps_version() {
        let s = Store::new(StoreOptions::default());
        let c = s
            .create(&cms(), cm("a", json!({})), &WriteOptions::default())
            .unwrap();
        let mut changed = c.clone();
        changed["data"]["k"] = json!("w");
        let u = s
            .update(
                &cms(),
                "a",
                changed.clone(),
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap();
        assert_ne!(
            u["metadata"]["resourceVersion"],
            c["metadata"]["resourceVersion"]
        );
        let e = s
            .update(
                &cms(),
                "a",
                changed,
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(e.reason, "Conflict");
        let same = s
            .update(
                &cms(),
                "a",
                u.clone(),
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap();
        assert_eq!(
            same["metadata"]["resourceVersion"],
            u["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn generation_counts_spec_changes_only() {
        let s = Store::new(StoreOptions::default());
        let t = Target::new("apps", "v1", "statefulsets", Some("default"));
        let sts =
            json!({"metadata": {"name": "s"}, "spec": {"replicas": 1}, "status": {"replicas": 7}});
        let c = s.create(&t, sts, &WriteOptions::default()).unwrap();
        assert_eq!(c["metadata"]["generation"], 1);
        assert_eq!(c["status"], json!({"replicas": 0, "availableReplicas": 0}));
        let mut l = c.clone();
        l["metadata"]["labels"] = json!({"a": "b"});
        let l = s
            .update(&t, "s", l, Subresource::Main, &WriteOptions::default())
            .unwrap();
        assert_eq!(l["metadata"]["generation"], 1);
        let mut st = l.clone();
        st["status"]["replicas"] = json!(1);
        let st = s
            .update(&t, "s", st, Subresource::Status, &WriteOptions::default())
            .unwrap();
        assert_eq!(st["metadata"]["generation"], 1);
        assert_eq!(st["status"]["replicas"], 1);
        let mut sp = st.clone();
        sp["spec"]["replicas"] = json!(3);
        sp["status"]["replicas"] = json!(99);
        let sp = s
            .update(&t, "s", sp, Subresource::Main, &WriteOptions::default())
            .unwrap();
        assert_eq!(sp["metadata"]["generation"], 2);
        assert_eq!(
            sp["status"]["replicas"], 1,
            "the main resource ignores status"
        );
    }

    #[test]
    fn namespace_must_exist() {
        let s = Store::new(StoreOptions::default());
        let t = Target::new("", "v1", "configmaps", Some("nope"));
        let e = s
            .create(&t, cm("a", json!({})), &WriteOptions::default())
            .unwrap_err();
        assert_eq!(e.code, 404);
        assert_eq!(e.message, "namespaces \"nope\" not found");
    }

    #[test]
    fn pagination_is_a_consistent_snapshot() {
        let s = Store::new(StoreOptions::default());
        for n in ["a", "b", "c"] {
            s.create(&cms(), cm(n, json!({})), &WriteOptions::default())
                .unwrap();
        }
        let p1 = s
            .list(
                &cms(),
                &ListOptions {
                    limit: 2,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(p1["items"].as_array().unwrap().len(), 2);
        assert_eq!(p1["metadata"]["remainingItemCount"], 1);
        let tok = p1["metadata"]["continue"].as_str().unwrap().to_string();
        s.delete(&cms(), "c", &DeleteOptions::default()).unwrap();
        s.create(&cms(), cm("d", json!({})), &WriteOptions::default())
            .unwrap();
        let p2 = s
            .list(
                &cms(),
                &ListOptions {
                    limit: 2,
                    continue_token: Some(tok),
                    ..Default::default()
                },
            )
            .unwrap();
        let names: Vec<&str> = p2["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(name_of)
            .collect();
        assert_eq!(
            names,
            vec!["c"],
            "the second page sees the snapshot of the first"
        );
        assert!(p2["metadata"].get("continue").is_none());
        assert_eq!(
            p2["metadata"]["resourceVersion"],
            p1["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn watch_window_expires_old_versions() {
        let s = Store::new(StoreOptions { watch_window: 2 });
        let start = s.resource_version();
        for n in ["a", "b", "c"] {
            s.create(&cms(), cm(n, json!({})), &WriteOptions::default())
                .unwrap();
        }
        let e = s.watch_from(&cms(), Some(start)).unwrap_err();
        assert_eq!(e.code, 410);
        assert_eq!(e.reason, "Expired");
        assert_eq!(
            e.message,
            format!("too old resource version: {start} ({})", start + 2)
        );
        let (_, replay, _, _) = s.watch_from(&cms(), Some(start + 1)).unwrap();
        let names: Vec<&str> = replay.iter().map(|e| name_of(&e.object)).collect();
        assert_eq!(names, vec!["b", "c"]);
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "default/a\u{0}");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default/a\u{0}".to_string())
        );
        assert_eq!(decode_continue("!!").unwrap_err().code, 400);
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
    }

    #[test]
    fn finalizers_hold_deletion() {
        let s = Store::new(StoreOptions::default());
        let mut obj = cm("f", json!({}));
        obj["metadata"]["finalizers"] = json!(["x/y"]);
        s.create(&cms(), obj, &WriteOptions::default()).unwrap();
        let d = s.delete(&cms(), "f", &DeleteOptions::default()).unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string());
        let mut g = s.get(&cms(), "f").unwrap();
        g["metadata"]["finalizers"] = json!([]);
        s.update(&cms(), "f", g, Subresource::Main, &WriteOptions::default())
            .unwrap();
        assert_eq!(s.get(&cms(), "f").unwrap_err().code, 404);
    }

    #[test]
    fn pod_grace_is_the_api_servers() {
        let now = 1_000_000;
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1",
            "terminationGracePeriodSeconds": 60}, "status": {"phase": "Running"}});
        assert_eq!(pod_grace(&pod, None, now), PodGrace::Mark(now + 60, 60));
        assert_eq!(pod_grace(&pod, Some(5), now), PodGrace::Mark(now + 5, 5));
        assert_eq!(pod_grace(&pod, Some(0), now), PodGrace::Mark(now, 0));
        assert_eq!(pod_grace(&pod, Some(-3), now), PodGrace::Mark(now + 1, 1));
        let mut plain = pod.clone();
        plain["spec"] = json!({"nodeName": "n1"});
        assert_eq!(pod_grace(&plain, None, now), PodGrace::Mark(now + 30, 30));
        let mut unbound = pod.clone();
        unbound["spec"]["nodeName"] = json!("");
        assert_eq!(pod_grace(&unbound, None, now), PodGrace::Now);
        let mut done = pod.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(pod_grace(&done, None, now), PodGrace::Now);
        // Terminating since `now` with 60 s: only a shorter grace changes it,
        // counted from when the deletion began.
        let mut term = pod.clone();
        term["metadata"]["deletionTimestamp"] = json!(crate::kubesim::rfc3339(now + 60));
        term["metadata"]["deletionGracePeriodSeconds"] = json!(60);
        assert_eq!(pod_grace(&term, None, now + 10), PodGrace::Pending);
        assert_eq!(pod_grace(&term, Some(90), now + 10), PodGrace::Pending);
        assert_eq!(pod_grace(&term, Some(60), now + 10), PodGrace::Pending);
        assert_eq!(
            pod_grace(&term, Some(5), now + 10),
            PodGrace::Mark(now + 5, 5)
        );
        assert_eq!(pod_grace(&term, Some(0), now + 10), PodGrace::Mark(now, 0));
        term["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert_eq!(pod_grace(&term, None, now + 10), PodGrace::Now);
    }

    #[test]
    fn a_second_delete_leaves_a_terminating_pod() {
        let s = Store::new(StoreOptions::default());
        s.set_graceful_pod_deletion(true);
        let pods = Target::new("", "v1", "pods", Some("default"));
        let w = WriteOptions::default();
        s.create(
            &pods,
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1",
            "containers": [{"name": "c", "image": "busybox"}]}}),
            &w,
        )
        .unwrap();
        let d = s.delete(&pods, "p", &DeleteOptions::default()).unwrap();
        assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
        let again = s.delete(&pods, "p", &DeleteOptions::default()).unwrap();
        assert_eq!(again["metadata"]["deletionGracePeriodSeconds"], 30);
        let longer = DeleteOptions {
            grace_period: Some(45),
            ..Default::default()
        };
        s.delete(&pods, "p", &longer).unwrap();
        let shorter = DeleteOptions {
            grace_period: Some(5),
            ..Default::default()
        };
        let d = s.delete(&pods, "p", &shorter).unwrap();
        assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 5);
        assert_eq!(
            s.get(&pods, "p").unwrap()["metadata"]["deletionGracePeriodSeconds"],
            5
        );
        let force = DeleteOptions {
            grace_period: Some(0),
            ..Default::default()
        };
        s.delete(&pods, "p", &force).unwrap();
        assert_eq!(s.get(&pods, "p").unwrap_err().code, 404);
    }
}
