//! The names a cache holds, in order, kept from the same watch events as
//! the cache itself. A reconcile finds one cluster's objects by their name
//! prefix (every object the operator makes for cluster `c` is named
//! `c-...`, or `<template>-c-...` for claims) instead of visiting every
//! object of every cluster: at a thousand clusters those visits were most
//! of the controller's CPU. What the prefix brings is a superset (cluster
//! `c-x`'s objects also begin with `c-`); observe filters it exactly as it
//! filtered the whole cache.

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

/// (namespace, name) pairs.
type Names = BTreeSet<(String, String)>;

/// The names of a cache's objects, shared between the watch stream that
/// keeps them and the reconciles that read them.
#[derive(Debug, Clone, Default)]
pub struct NameIndex(Arc<RwLock<Listing>>);

#[derive(Debug, Default)]
struct Listing {
    current: Names,
    /// A relist under way: the names it has brought so far. The current
    /// names stay visible until it is complete, as the cache's own do.
    next: Option<Names>,
}

fn key<K: Resource>(object: &K) -> (String, String) {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl NameIndex {
    /// Follows one watch event, as kube-runtime's reflector does with the
    /// cache.
    pub fn apply<K: Resource>(&self, event: &Event<K>) {
        let mut listing = self.0.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(object) => {
                listing.current.insert(key(object));
            }
            Event::Delete(object) => {
                listing.current.remove(&key(object));
            }
            Event::Init => listing.next = Some(Names::new()),
            Event::InitApply(object) => {
                listing.next.get_or_insert_default().insert(key(object));
            }
            Event::InitDone => {
                if let Some(next) = listing.next.take() {
                    listing.current = next;
                }
            }
        }
    }

    /// The names in `namespace` that begin with `prefix`, in order.
    pub fn with_prefix(&self, namespace: &str, prefix: &str) -> Vec<String> {
        let listing = self.0.read().unwrap_or_else(|e| e.into_inner());
        listing
            .current
            .range((namespace.to_string(), prefix.to_string())..)
            .take_while(|(ns, name)| ns == namespace && name.starts_with(prefix))
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The cached objects in `namespace` whose names begin with `prefix`
    /// (one that the cache no longer holds is left out).
    pub fn objects<K>(&self, store: &Store<K>, namespace: &str, prefix: &str) -> Vec<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        self.with_prefix(namespace, prefix)
            .iter()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(namespace)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;

    fn svc(ns: &str, name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_prefix_finds_its_names_in_its_namespace_only() {
        let index = NameIndex::default();
        for (ns, name) in [
            ("db", "c-dc-a-0"),
            ("db", "c-client"),
            ("db", "c2-dc-a-0"),
            ("db", "b-dc-a-0"),
            ("db", "c-x-dc-a-0"),
            ("other", "c-dc-a-0"),
        ] {
            index.apply(&Event::Apply(svc(ns, name)));
        }
        assert_eq!(
            index.with_prefix("db", "c-"),
            ["c-client", "c-dc-a-0", "c-x-dc-a-0"]
        );
        assert_eq!(index.with_prefix("other", "c-"), ["c-dc-a-0"]);
        assert!(index.with_prefix("none", "c-").is_empty());
        index.apply(&Event::Delete(svc("db", "c-client")));
        assert_eq!(index.with_prefix("db", "c-"), ["c-dc-a-0", "c-x-dc-a-0"]);
    }

    #[test]
    fn a_relist_replaces_the_names_once_complete() {
        let index = NameIndex::default();
        index.apply(&Event::Apply(svc("db", "c-dc-a-0")));
        index.apply(&Event::Apply(svc("db", "c-dc-a-1")));
        // A relist after a watch expired: c-dc-a-1 went meanwhile.
        index.apply(&Event::<Service>::Init);
        index.apply(&Event::InitApply(svc("db", "c-dc-a-0")));
        index.apply(&Event::InitApply(svc("db", "c-dc-a-2")));
        // Until it completes, the names before it stay.
        assert_eq!(index.with_prefix("db", "c-"), ["c-dc-a-0", "c-dc-a-1"]);
        index.apply(&Event::<Service>::InitDone);
        assert_eq!(index.with_prefix("db", "c-"), ["c-dc-a-0", "c-dc-a-2"]);
        // An empty relist empties it.
        index.apply(&Event::<Service>::Init);
        index.apply(&Event::<Service>::InitDone);
        assert!(index.with_prefix("db", "").is_empty());
    }
}
