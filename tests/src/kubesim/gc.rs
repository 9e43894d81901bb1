//! The in-process controllers of the API server itself: the garbage
//! collector (owner references, background / foreground / orphan
//! cascading), the namespace controller (a deleted namespace is emptied,
//! then goes) and the CRD finalizer (a deleted CRD's objects go first).
//! Driven by the store's change notifications; each pass works under the
//! store lock through its in-process API.

use super::discovery::ResourceType;
use super::store::{
    DeleteOptions, Propagation, State, Store, Subresource, Target, WriteOptions, finalizers,
    name_of,
};
use super::store::{Event, EventType};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

type Entry = (Arc<ResourceType>, Arc<Value>);

fn uid(o: &Value) -> &str {
    o.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp").is_some()
}

/// An object's owner references, read in place (every sweep reads those
/// of every object).
fn owner_refs(o: &Value) -> &[Value] {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn target(rt: &ResourceType, o: &Value) -> Target {
    let ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
    Target::new(
        &rt.group,
        rt.storage_version(),
        &rt.plural,
        ns.filter(|_| rt.namespaced),
    )
}

fn delete(st: &mut State, e: &Entry, policy: Propagation) {
    let (rt, o) = e;
    let opts = DeleteOptions {
        propagation: Some(policy),
        uid: Some(uid(o).to_string()),
        ..Default::default()
    };
    // Gone already or changed under us: the next pass sees the truth.
    let _ = st.delete(rt, &target(rt, o), name_of(o), &opts);
}

fn rewrite(st: &mut State, e: &Entry, f: impl FnOnce(&mut Value)) {
    let (rt, o) = e;
    let mut next = (**o).clone();
    f(&mut next);
    let _ = st.update(
        rt,
        &target(rt, o),
        name_of(o),
        next,
        Subresource::Main,
        &WriteOptions::default(),
    );
}

fn without_finalizer(f: &str) -> impl FnOnce(&mut Value) + '_ {
    move |o| {
        let rest: Vec<String> = finalizers(o).into_iter().filter(|x| x != f).collect();
        o["metadata"]["finalizers"] = json!(rest);
    }
}

/// One pass over all objects; whether it changed anything.
pub(super) fn sweep(st: &mut State) -> bool {
    let rv = st.rv;
    let all: Vec<Entry> = st
        .tables
        .values()
        .flat_map(|t| t.objects.values().map(move |o| (t.rt.clone(), o.clone())))
        .collect();
    let by_uid: HashMap<&str, &Entry> = all.iter().map(|e| (uid(&e.1), e)).collect();
    let mut dependents: HashMap<&str, Vec<&Entry>> = HashMap::new();
    for e in &all {
        for r in owner_refs(&e.1) {
            if let Some(u) = r.get("uid").and_then(Value::as_str)
                && let Some(owner) = by_uid.get(u)
            {
                dependents.entry(uid(&owner.1)).or_default().push(e);
            }
        }
    }
    for e in &all {
        let refs = owner_refs(&e.1);
        if refs.is_empty() {
            continue;
        }
        let live = refs
            .iter()
            .filter(|r| {
                r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| by_uid.contains_key(u))
            })
            .count();
        if live == 0 {
            if !deleting(&e.1) {
                delete(st, e, Propagation::Background);
            }
        } else if live < refs.len() {
            rewrite(st, e, |o| {
                let kept: Vec<Value> = refs
                    .iter()
                    .filter(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| by_uid.contains_key(u))
                    })
                    .cloned()
                    .collect();
                o["metadata"]["ownerReferences"] = json!(kept);
            });
        }
    }
    for e in all.iter().filter(|e| deleting(&e.1)) {
        let fins = finalizers(&e.1);
        let deps = dependents.get(uid(&e.1)).cloned().unwrap_or_default();
        if fins.iter().any(|f| f == "foregroundDeletion") {
            for d in deps.iter().filter(|d| !deleting(&d.1)) {
                delete(st, d, Propagation::Foreground);
            }
            let blocking = deps.iter().any(|d| {
                owner_refs(&d.1).iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(uid(&e.1))
                        && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                })
            });
            if !blocking {
                rewrite(st, e, without_finalizer("foregroundDeletion"));
            }
        } else if fins.iter().any(|f| f == "orphan") {
            let owner = uid(&e.1).to_string();
            for d in &deps {
                rewrite(st, d, |o| {
                    let kept: Vec<Value> = owner_refs(o)
                        .iter()
                        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner.as_str()))
                        .cloned()
                        .collect();
                    o["metadata"]["ownerReferences"] = json!(kept);
                });
            }
            rewrite(st, e, without_finalizer("orphan"));
        }
        let (rt, o) = e;
        if rt.group.is_empty() && rt.plural == "namespaces" {
            let ns = name_of(o);
            let content: Vec<Entry> = all
                .iter()
                .filter(|c| {
                    c.0.namespaced
                        && c.1.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
                })
                .cloned()
                .collect();
            for c in content.iter().filter(|c| !deleting(&c.1)) {
                delete(st, c, Propagation::Background);
            }
            if content.is_empty() {
                let mut next = (**o).clone();
                next["spec"]["finalizers"] = json!([]);
                let kind = if finalizers(&next).is_empty() {
                    super::store::EventType::Deleted
                } else {
                    super::store::EventType::Modified
                };
                if o.pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
                {
                    st.commit(rt, kind, next);
                }
            }
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && fins
                .iter()
                .any(|f| f == "customresourcecleanup.apiextensions.k8s.io")
        {
            let group = o
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let plural = o
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let crs: Vec<Entry> = all
                .iter()
                .filter(|c| c.0.custom && c.0.group == group && c.0.plural == plural)
                .cloned()
                .collect();
            for c in crs.iter().filter(|c| !deleting(&c.1)) {
                delete(st, c, Propagation::Background);
            }
            if crs.is_empty() {
                rewrite(
                    st,
                    e,
                    without_finalizer("customresourcecleanup.apiextensions.k8s.io"),
                );
            }
        }
    }
    st.rv != rv
}

/// Whether a change can give the collectors work: a deletion, an object
/// being deleted (finalizers to act on), or owner references that appeared
/// or changed (a dangling owner). A Pod's status write, most of the traffic,
/// cannot.
fn matters(e: &Event) -> bool {
    match e.kind {
        EventType::Deleted => true,
        EventType::Added => deleting(&e.object) || !owner_refs(&e.object).is_empty(),
        EventType::Modified => {
            deleting(&e.object)
                || e.prev
                    .as_ref()
                    .is_none_or(|p| owner_refs(p) != owner_refs(&e.object))
        }
    }
}

/// Runs the controllers until the store's notifications end or the task is
/// aborted. A pass runs after each burst of changes that [`matters`], and
/// every `resync`. A pass reads every object under the store lock: passes
/// are spaced by four times what the last took (at least 20 ms), as the
/// API server's collector works from queues and lags the changes it acts
/// on, so that under a thousand clusters' worth of changes it does not hold
/// the lock (and a core) all the time.
pub async fn run(store: Store, resync: Duration) {
    let mut rx = store.subscribe();
    loop {
        let began = std::time::Instant::now();
        // Passes until nothing changes (a cascade takes several).
        for _ in 0..64 {
            if !store.with_state(sweep) {
                break;
            }
        }
        tokio::time::sleep((began.elapsed() * 4).max(Duration::from_millis(20))).await;
        // What queued up meanwhile: one pass covers it all.
        let mut due = false;
        loop {
            match rx.try_recv() {
                Ok(e) => due |= matters(&e),
                Err(TryRecvError::Lagged(_)) => due = true,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        if due {
            continue;
        }
        let next = async {
            loop {
                match rx.recv().await {
                    Ok(e) if matters(&e) => return true,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => return true,
                    Err(RecvError::Closed) => return false,
                }
            }
        };
        tokio::select! {
            open = next => if !open {
                return;
            },
            _ = tokio::time::sleep(resync) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubesim::store::StoreOptions;

    #[test]
    fn only_deletions_and_owner_changes_wake_the_collector() {
        let owned = json!({"metadata": {"name": "p", "uid": "1",
            "ownerReferences": [{"uid": "s", "controller": true}]}});
        let event = |kind, object: &Value, prev: Option<&Value>| Event {
            rv: 1,
            kind,
            group: String::new(),
            plural: "pods".into(),
            object: Arc::new(object.clone()),
            prev: prev.map(|p| Arc::new(p.clone())),
            at_us: 0,
        };
        let mut ready = owned.clone();
        ready["status"] = json!({"phase": "Running"});
        // A status write: nothing for the collector.
        assert!(!matters(&event(EventType::Modified, &ready, Some(&owned))));
        let plain = json!({"metadata": {"name": "c", "uid": "2"}});
        assert!(!matters(&event(EventType::Added, &plain, None)));
        // A dependent (its owner may be gone), a deletion, an object being
        // deleted, owner references changed.
        assert!(matters(&event(EventType::Added, &owned, None)));
        assert!(matters(&event(EventType::Deleted, &plain, Some(&plain))));
        let mut going = ready.clone();
        going["metadata"]["deletionTimestamp"] = json!("2026-11-24T00:00:00Z");
        assert!(matters(&event(EventType::Modified, &going, Some(&ready))));
        let mut orphaned = ready.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        assert!(matters(&event(
            EventType::Modified,
            &orphaned,
            Some(&ready)
        )));
    }

    fn settle(s: &Store) {
        for _ in 0..64 {
            if !s.with_state(sweep) {
                return;
            }
        }
        panic!("the garbage collector does not settle");
    }

    fn cms() -> Target {
        Target::new("", "v1", "configmaps", Some("default"))
    }

    fn owned(name: &str, owner: &Value, block: bool) -> Value {
        json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": name_of(owner), "uid": uid(owner), "blockOwnerDeletion": block
        }]}})
    }

    #[test]
    fn background_deletes_dependents_after_the_owner() {
        let s = Store::new(StoreOptions::default());
        let w = WriteOptions::default();
        let owner = s
            .create(&cms(), json!({"metadata": {"name": "owner"}}), &w)
            .unwrap();
        let child = s.create(&cms(), owned("child", &owner, false), &w).unwrap();
        s.create(&cms(), owned("grandchild", &child, false), &w)
            .unwrap();
        settle(&s);
        assert!(
            s.get(&cms(), "child").is_ok(),
            "a dependent of a live owner stays"
        );
        s.delete(&cms(), "owner", &DeleteOptions::default())
            .unwrap();
        settle(&s);
        assert_eq!(s.get(&cms(), "child").unwrap_err().code, 404);
        assert_eq!(s.get(&cms(), "grandchild").unwrap_err().code, 404);
    }

    #[test]
    fn foreground_waits_for_blocking_dependents() {
        let s = Store::new(StoreOptions::default());
        let w = WriteOptions::default();
        let owner = s
            .create(&cms(), json!({"metadata": {"name": "owner"}}), &w)
            .unwrap();
        let mut child = owned("child", &owner, true);
        child["metadata"]["finalizers"] = json!(["test/hold"]);
        s.create(&cms(), child, &w).unwrap();
        let d = s
            .delete(
                &cms(),
                "owner",
                &DeleteOptions {
                    propagation: Some(Propagation::Foreground),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(d["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        settle(&s);
        let c = s.get(&cms(), "child").unwrap();
        assert!(c["metadata"]["deletionTimestamp"].is_string());
        assert!(
            s.get(&cms(), "owner").is_ok(),
            "the owner waits for its blocking dependent"
        );
        let mut c = c;
        c["metadata"]["finalizers"] = json!([]);
        s.update(&cms(), "child", c, Subresource::Main, &w).unwrap();
        settle(&s);
        assert_eq!(s.get(&cms(), "owner").unwrap_err().code, 404);
    }

    #[test]
    fn orphan_keeps_dependents_without_the_reference() {
        let s = Store::new(StoreOptions::default());
        let w = WriteOptions::default();
        let owner = s
            .create(&cms(), json!({"metadata": {"name": "owner"}}), &w)
            .unwrap();
        s.create(&cms(), owned("child", &owner, false), &w).unwrap();
        s.delete(
            &cms(),
            "owner",
            &DeleteOptions {
                propagation: Some(Propagation::Orphan),
                ..Default::default()
            },
        )
        .unwrap();
        settle(&s);
        assert_eq!(s.get(&cms(), "owner").unwrap_err().code, 404);
        let c = s.get(&cms(), "child").unwrap();
        assert!(c["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn a_deleted_namespace_is_emptied_then_removed() {
        let s = Store::new(StoreOptions::default());
        let w = WriteOptions::default();
        let nss = Target::new("", "v1", "namespaces", None);
        s.create(&nss, json!({"metadata": {"name": "gone"}}), &w)
            .unwrap();
        let t = Target::new("", "v1", "configmaps", Some("gone"));
        s.create(&t, json!({"metadata": {"name": "a"}}), &w)
            .unwrap();
        let d = s.delete(&nss, "gone", &DeleteOptions::default()).unwrap();
        assert_eq!(d["status"]["phase"], "Terminating");
        assert_eq!(
            s.create(&t, json!({"metadata": {"name": "b"}}), &w)
                .unwrap_err()
                .code,
            403
        );
        settle(&s);
        assert_eq!(s.get(&t, "a").unwrap_err().code, 404);
        assert_eq!(s.get(&nss, "gone").unwrap_err().code, 404);
    }
}
