//! The object store: every kind's objects, one global `resourceVersion`
//! counter (as etcd's revision), a bounded event history per kind (the
//! watch cache window), and change notifications for watchers and the
//! in-process controllers. The in-process API of kubesim: the HTTP layer
//! and the simulated controllers call these methods. No I/O; a
//! `std::sync::Mutex` guards the state and is never held across an await.
//! The vocabulary (errors, events, options) is in [`types`], the
//! bookkeeping of versions, managed fields and continue tokens in
//! [`bookkeeping`], the tables and what happens around a write in
//! [`admission`], what CertificateSigningRequests add to it in
//! [`certificates`].

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

mod admission;
mod bookkeeping;
pub mod certificates;
pub mod pod_security;
mod types;
pub mod validation;
use bookkeeping::*;
pub use bookkeeping::{decode_continue, encode_continue, present, storage_key};
pub use types::*;

type ObjKey = (String, String);
type TypeKey = (String, String);

pub(super) struct Table {
    pub(super) rt: Arc<ResourceType>,
    pub(super) objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    /// The oldest resourceVersion from which history is complete.
    window_start: u64,
    /// The resourceVersion of the kind's last change (0: none yet).
    last_change: u64,
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

    /// The resourceVersion of the last change to any kind of an API group
    /// (0: none yet): what is derived from the group's objects is stale
    /// only when this moved.
    pub fn group_revision(&self, group: &str) -> u64 {
        let st = self.lock();
        st.tables
            .iter()
            .filter(|((g, _), _)| g == group)
            .map(|(_, t)| t.last_change)
            .max()
            .unwrap_or(0)
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
        let created = st.create(&rt, t, obj, opts)?;
        if rt.group.is_empty() && rt.plural == "namespaces" && !opts.dry_run {
            // The ServiceAccount controller's `default` account (at once
            // here, where the real one follows within a moment): Pods
            // without an account of their own run as it.
            let sa_t = Target::new("", "v1", "serviceaccounts", Some(name_of(&created)));
            let sa_rt = st.resolve("", "v1", "serviceaccounts")?;
            st.create(
                &sa_rt,
                &sa_t,
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
                &WriteOptions::default(),
            )?;
        }
        Ok(created)
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

    /// Every stored object of a kind, in every namespace, shared rather
    /// than copied: what the simulated controllers read at each pass.
    pub fn objects(&self, t: &Target) -> Result<Vec<Arc<Value>>, ApiError> {
        let st = self.lock();
        let rt = st.resolve(&t.group, &t.version, &t.plural)?;
        let ns = t.namespace.as_deref().filter(|_| rt.namespaced);
        Ok(st.tables[&key(&rt)]
            .objects
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .map(|(_, o)| o.clone())
            .collect())
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
        let snapshot: BTreeMap<ObjKey, Arc<Value>>;
        let objects: &BTreeMap<ObjKey, Arc<Value>> = match snapshot_rv {
            Some(rv) if rv < st.rv => {
                snapshot = table.snapshot(rv).ok_or_else(|| {
                if opts.continue_token.is_some() {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
                } else {
                    ApiError::expired(format!("too old resource version: {rv} ({})", table.window_start + 1))
                }
            })?;
                &snapshot
            }
            Some(rv) if rv > st.rv => return Err(too_large(rv, st.rv)),
            _ => &table.objects,
        };
        let ns = t.namespace.clone().filter(|_| rt.namespaced);
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        for ((ons, oname), obj) in objects {
            if ns.as_ref().is_some_and(|n| n != ons) {
                continue;
            }
            if let Some(s) = &start
                && format!("{ons}/{oname}\u{0}").as_str() <= s.as_str()
                && format!("{ons}/{oname}").as_str() < s.as_str()
            {
                continue;
            }
            // Labels are the same in every version: the selector is
            // matched before the object is converted (copied) for the list.
            if !opts.label_selector.matches_object(obj) {
                continue;
            }
            let shown = present(&rt, &t.version, obj);
            if !opts.field_selector.matches_object(&shown) {
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

    /// The `pods/binding` subresource (pkg/registry/core/pod/storage,
    /// `setPodHostAndAnnotations`): the one way a Pod's `spec.nodeName` is
    /// set after creation; 409 when the pod is bound already or being
    /// deleted.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let t = Target::new("", "v1", "pods", Some(namespace));
        let rt = st.resolve("", "v1", "pods")?;
        let Some(old) = st.tables[&key(&rt)]
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
        else {
            return Err(ApiError::not_found(&rt, name));
        };
        // errors.NewConflict(api.Resource("pods/binding"), ...)
        let conflict = |why: String| ApiError {
            details: Some(json!({"name": name, "kind": "pods/binding"})),
            ..ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
            )
        };
        if meta(&old).get("deletionTimestamp").is_some() {
            return Err(conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        let current = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !current.is_empty() {
            return Err(conflict(format!(
                "pod {name} is already assigned to node {current:?}"
            )));
        }
        let mut next = (*old).clone();
        next["spec"]["nodeName"] = json!(node);
        let stored = st.commit(&rt, EventType::Modified, next);
        Ok(present(&rt, &t.version, &stored))
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
                let subname = sub.name();
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
                        at_us: crate::kubesim::now_us(),
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
        let sts = json!({"metadata": {"name": "s"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"a": "s"}},
            "template": {"metadata": {"labels": {"a": "s"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"replicas": 7}});
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
    fn a_pod_is_bound_once_and_only_through_its_binding() {
        let s = Store::new(StoreOptions::default());
        let t = Target::new("", "v1", "pods", Some("default"));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "default",
            "containers": [{"name": "c", "image": "x"}]}});
        let sa = Target::new("", "v1", "serviceaccounts", Some("default"));
        let _ = s.create(
            &sa,
            json!({"metadata": {"name": "default"}}),
            &WriteOptions::default(),
        );
        s.create(&t, pod, &WriteOptions::default()).unwrap();
        let e = s
            .patch(
                &t,
                "p",
                PatchType::Merge,
                &json!({"spec": {"nodeName": "n1"}}),
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 422, "{}", e.message);
        let bound = s.bind_pod("default", "p", "n1").unwrap();
        assert_eq!(bound["spec"]["nodeName"], "n1");
        let again = s.bind_pod("default", "p", "n2").unwrap_err();
        assert_eq!(again.code, 409);
        assert!(
            again
                .message
                .contains("pod p is already assigned to node \"n1\""),
            "{}",
            again.message
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
