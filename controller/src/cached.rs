//! What the caches keep of Pods and PersistentVolumes: the fields observe
//! reads, deserialized straight from the watch. serde skips every other
//! field, so nothing else is allocated, not even for a moment. And of
//! ConfigMaps: the names and versions of all, the content of only those a
//! Cluster names ([`CachedConfigMap`], [`ConfigMapContents`]).
//!
//! k8s-openapi's types have room for every field of the API, set or not: a
//! `Pod` is 2,176 bytes before its first container (2,120 bytes more), a
//! `PersistentVolume` 3,472 bytes (each volume source is inline). At 1,000
//! clusters the controller's caches hold 3,000 of each, and those empty
//! fields were a fifth of its memory (README, "Benchmarks").
//!
//! The field names are the API's, so the code that reads them reads as it
//! would read the full objects.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, VolumeNodeAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use serde::Deserialize;

/// Makes a cached view a Kubernetes resource of the kind it views: kube's
/// watcher, reflector and `Api` then serve it as they serve the full type.
macro_rules! view_of {
    ($view:ty, $full:ty) => {
        impl k8s_openapi::Resource for $view {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }
        impl k8s_openapi::Metadata for $view {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Pod as the cache keeps it: its metadata, the containers' names and
/// images (observe finds the database's version by the container's name)
/// and its conditions (Ready).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<CachedPodStatus>,
}
view_of!(CachedPod, k8s_openapi::api::core::v1::Pod);

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPodSpec {
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
    /// The Node it is bound to (a drain of that Node evicts it).
    #[serde(rename = "nodeName")]
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainer {
    pub name: String,
    pub image: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPodStatus {
    pub conditions: Option<Vec<CachedCondition>>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
}

/// A condition's type and status: the reason, message and times are never
/// read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

/// A PersistentVolume as the cache keeps it: its name, the claim it is
/// bound to and the Nodes it is pinned to (a lost local disk is a volume
/// whose Nodes are all gone).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedVolume {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedVolumeSpec>,
}
view_of!(CachedVolume, k8s_openapi::api::core::v1::PersistentVolume);

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedVolumeSpec {
    pub claim_ref: Option<ObjectReference>,
    pub node_affinity: Option<VolumeNodeAffinity>,
}

/// A ConfigMap as the cache keeps it: its namespace, name and
/// resourceVersion, from a metadata-only watch
/// (`Accept: ...;as=PartialObjectMetadata`, so the API server never sends
/// the content). The racks' overrides ConfigMaps are the user's, named by
/// the Cluster and without our label, so the watch covers every ConfigMap
/// of the watched namespace(s): what changed is all it must tell. The
/// content of the ConfigMaps a Cluster names is read apart, once per
/// version ([`ConfigMapContents`]).
///
/// Not even the labels and annotations are allocated: `kubectl apply`
/// leaves the whole object in
/// `kubectl.kubernetes.io/last-applied-configuration`, so the metadata of
/// applied ConfigMaps carries their content again. Of the ConfigMaps the
/// controller writes itself (a TLS cluster's CA bundle), the owner
/// references and the applied hash (`crate::resources::APPLIED_HASH`) are
/// kept too: whether it is the Cluster's, and whether it differs from what
/// the controller would write, without reading it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedConfigMap {
    #[serde(default, deserialize_with = "names_and_version")]
    pub metadata: ObjectMeta,
}

/// The namespace, name and resourceVersion of an object's metadata, its
/// owner references and its applied hash; serde skips the rest without
/// allocating it.
fn names_and_version<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        owner_references:
            Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
        #[serde(default, deserialize_with = "applied_hash_only")]
        annotations: Option<std::collections::BTreeMap<String, String>>,
    }
    let kept = Kept::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: kept.name,
        namespace: kept.namespace,
        resource_version: kept.resource_version,
        owner_references: kept.owner_references,
        annotations: kept.annotations,
        ..ObjectMeta::default()
    })
}

/// Of an object's annotations, the applied hash only (None without it):
/// the other values are skipped unallocated.
fn applied_hash_only<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<std::collections::BTreeMap<String, String>>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Option<std::collections::BTreeMap<String, String>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("annotations")
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_map(self)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == crate::resources::APPLIED_HASH {
                    let value: String = map.next_value()?;
                    kept = Some(std::collections::BTreeMap::from([(
                        key.into_owned(),
                        value,
                    )]));
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(kept)
        }
    }
    deserializer.deserialize_option(Visitor)
}

/// A ConfigMap for kube, asked for as metadata only
/// ([`kube::Resource::metadata_api`], as kube's own `PartialObjectMeta`
/// is).
impl kube::Resource for CachedConfigMap {
    type DynamicType = ();
    type Scope = <ConfigMap as k8s_openapi::Resource>::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        <ConfigMap as k8s_openapi::Resource>::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        <ConfigMap as k8s_openapi::Resource>::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        <ConfigMap as k8s_openapi::Resource>::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <ConfigMap as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn metadata_api() -> bool {
        true
    }
}

/// (namespace, name)
type Key = (String, String);

/// The content of the overrides ConfigMaps that reconciles read, each at
/// the resourceVersion it was read at: a reconcile reads a ConfigMap a
/// Cluster names only when the watch shows a version this does not hold
/// ([`ConfigMapContents::get`]). Only what a Cluster names is ever here.
///
/// The watch's events drop what is no longer current
/// ([`ConfigMapContents::apply`]): a content whose ConfigMap changed
/// (another version) or went, or was not in a relist. So what this holds
/// is at most one version of each existing ConfigMap that a Cluster named
/// since it last changed.
#[derive(Debug, Clone, Default)]
pub struct ConfigMapContents(Arc<Mutex<Contents>>);

#[derive(Debug, Default)]
struct Contents {
    by_name: HashMap<Key, Arc<ConfigMap>>,
    /// A relist under way: the names it has brought so far.
    relist: Option<HashSet<Key>>,
}

fn key_of(meta: &ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl ConfigMapContents {
    fn lock(&self) -> std::sync::MutexGuard<'_, Contents> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The content of ConfigMap `name` of `namespace` if it was read at
    /// `resource_version`.
    pub fn get(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Option<Arc<ConfigMap>> {
        self.lock()
            .by_name
            .get(&(namespace.to_string(), name.to_string()))
            .filter(|c| c.metadata.resource_version.as_deref() == Some(resource_version))
            .cloned()
    }

    /// Keeps a ConfigMap as read: its content (`data`, `binaryData`) and
    /// immutability, with the namespace, name and resourceVersion of its
    /// metadata (nothing reads the rest).
    pub fn insert(&self, config_map: ConfigMap) -> Arc<ConfigMap> {
        let kept = Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: config_map.metadata.name,
                namespace: config_map.metadata.namespace,
                resource_version: config_map.metadata.resource_version,
                ..ObjectMeta::default()
            },
            data: config_map.data,
            binary_data: config_map.binary_data,
            immutable: config_map.immutable,
        });
        self.lock()
            .by_name
            .insert(key_of(&kept.metadata), kept.clone());
        kept
    }

    /// Follows one event of the ConfigMap watch: drops a content that is
    /// no longer the ConfigMap's.
    pub fn apply(&self, event: &Event<CachedConfigMap>) {
        let mut contents = self.lock();
        let outdated = |contents: &mut Contents, meta: &ObjectMeta| {
            let key = key_of(meta);
            if contents
                .by_name
                .get(&key)
                .is_some_and(|c| c.metadata.resource_version != meta.resource_version)
            {
                contents.by_name.remove(&key);
            }
        };
        match event {
            Event::Apply(object) => outdated(&mut contents, &object.metadata),
            Event::Delete(object) => {
                contents.by_name.remove(&key_of(&object.metadata));
            }
            Event::Init => contents.relist = Some(HashSet::new()),
            Event::InitApply(object) => {
                outdated(&mut contents, &object.metadata);
                contents
                    .relist
                    .get_or_insert_default()
                    .insert(key_of(&object.metadata));
            }
            Event::InitDone => {
                if let Some(listed) = contents.relist.take() {
                    contents.by_name.retain(|key, _| listed.contains(key));
                }
            }
        }
    }

    /// How many ConfigMaps' contents are held.
    pub fn len(&self) -> usize {
        self.lock().by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the cache would keep of a full object: it goes through JSON as it
/// does on the wire.
#[cfg(test)]
pub fn cached<T: serde::de::DeserializeOwned>(full: &impl serde::Serialize) -> T {
    serde_json::from_value(serde_json::to_value(full).expect("serializable"))
        .expect("a cached view reads every valid object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
    use kube::Resource;

    #[test]
    fn views_are_served_as_the_kinds_they_view() {
        assert_eq!(CachedPod::kind(&()), "Pod");
        assert_eq!(CachedPod::plural(&()), "pods");
        assert_eq!(CachedPod::api_version(&()), "v1");
        assert_eq!(CachedVolume::kind(&()), "PersistentVolume");
        assert_eq!(CachedVolume::plural(&()), "persistentvolumes");
        assert_eq!(
            kube::core::ApiResource::erase::<CachedVolume>(&()),
            kube::core::ApiResource::erase::<PersistentVolume>(&())
        );
    }

    #[test]
    fn a_pod_keeps_what_observe_reads_and_is_a_fraction_of_the_full_one() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-dc-a-0", "namespace": "db", "labels": {"a": "b"},
                "resourceVersion": "7", "uid": "u"},
            "spec": {"nodeName": "n0", "containers": [
                {"name": "cassandra", "image": "cassandra:4.1.5", "env": [{"name": "X", "value": "y"}],
                 "ports": [{"containerPort": 9042}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let kept: CachedPod = cached(&pod);
        assert_eq!(kept.metadata, pod.metadata);
        assert_eq!(
            kept.spec.unwrap().containers,
            vec![CachedContainer {
                name: "cassandra".into(),
                image: Some("cassandra:4.1.5".into()),
            }]
        );
        assert_eq!(
            kept.status.unwrap().conditions.unwrap(),
            vec![CachedCondition {
                type_: "Ready".into(),
                status: "True".into(),
            }]
        );
        assert!(std::mem::size_of::<CachedPod>() * 4 < std::mem::size_of::<Pod>());
        assert!(std::mem::size_of::<CachedVolume>() * 4 < std::mem::size_of::<PersistentVolume>());
    }

    #[test]
    fn a_pod_without_spec_or_status_is_read() {
        let kept: CachedPod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": {}}))
                .unwrap();
        assert_eq!(kept.spec, None);
        assert_eq!(kept.status.unwrap().conditions, None);
    }

    fn watched(namespace: &str, name: &str, version: &str) -> CachedConfigMap {
        CachedConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
        }
    }

    fn read(namespace: &str, name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: watched(namespace, name, version).metadata,
            data: Some([("cassandra.yaml".to_string(), format!("v: {version}\n"))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_config_map_keeps_its_name_and_version_only() {
        let applied = "x".repeat(500 * 1024);
        // As a metadata-only watch brings it.
        let kept: CachedConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "namespace": "db", "name": "tuning", "resourceVersion": "7", "uid": "u",
                "labels": {"app": "x"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            }
        }))
        .unwrap();
        assert_eq!(kept, watched("db", "tuning", "7"));
        assert_eq!(
            serde_json::to_value(&kept.metadata).unwrap(),
            serde_json::json!({"namespace": "db", "name": "tuning", "resourceVersion": "7"})
        );
        assert_eq!(CachedConfigMap::kind(&()), "ConfigMap");
        assert_eq!(CachedConfigMap::plural(&()), "configmaps");
        assert_eq!(CachedConfigMap::api_version(&()), "v1");
        assert!(
            CachedConfigMap::metadata_api(),
            "asked for as metadata only"
        );
    }

    /// Of a ConfigMap the controller writes (a TLS cluster's CA bundle):
    /// its owner references and its applied hash too, and still none of
    /// the other annotations.
    #[test]
    fn a_config_map_keeps_its_owner_and_applied_hash() {
        let owner = serde_json::json!({"apiVersion": "cassandra.rook.io/v1alpha1",
            "kind": "Cluster", "name": "c", "uid": "uid-c", "controller": true});
        let kept: CachedConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "db", "name": "c-ca", "resourceVersion": "8",
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(1000),
                    crate::resources::APPLIED_HASH: "0123456789abcdef",
                },
                "ownerReferences": [owner],
            }
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&kept.metadata).unwrap(),
            serde_json::json!({"namespace": "db", "name": "c-ca", "resourceVersion": "8",
                "annotations": {crate::resources::APPLIED_HASH: "0123456789abcdef"},
                "ownerReferences": [owner]})
        );
    }

    #[test]
    fn a_content_is_held_at_its_version_until_the_watch_shows_another() {
        let contents = ConfigMapContents::default();
        let kept = contents.insert(ConfigMap {
            metadata: ObjectMeta {
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..read("db", "tuning", "7").metadata
            },
            ..read("db", "tuning", "7")
        });
        assert_eq!(kept.metadata.annotations, None);
        assert_eq!(kept.data, read("db", "tuning", "7").data);
        assert!(contents.get("db", "tuning", "7").is_some());
        assert!(
            contents.get("db", "tuning", "8").is_none(),
            "another version"
        );
        assert!(
            contents.get("other", "tuning", "7").is_none(),
            "another namespace"
        );
        // The watch shows the version held: kept.
        contents.apply(&Event::Apply(watched("db", "tuning", "7")));
        assert!(contents.get("db", "tuning", "7").is_some());
        // Another ConfigMap's event changes nothing.
        contents.apply(&Event::Apply(watched("db", "other", "9")));
        contents.apply(&Event::Delete(watched("other", "tuning", "9")));
        assert_eq!(contents.len(), 1);
        // Changed: dropped.
        contents.apply(&Event::Apply(watched("db", "tuning", "8")));
        assert!(contents.is_empty());
        // Deleted: dropped.
        contents.insert(read("db", "tuning", "8"));
        contents.apply(&Event::Delete(watched("db", "tuning", "8")));
        assert!(contents.is_empty());
    }

    #[test]
    fn a_relist_drops_what_it_did_not_bring_once_complete() {
        let contents = ConfigMapContents::default();
        for (name, version) in [("a", "1"), ("b", "2"), ("c", "3")] {
            contents.insert(read("db", name, version));
        }
        // A relist after the watch expired: b went, c changed meanwhile.
        contents.apply(&Event::Init);
        contents.apply(&Event::InitApply(watched("db", "a", "1")));
        contents.apply(&Event::InitApply(watched("db", "c", "4")));
        assert!(contents.get("db", "b", "2").is_some(), "until it completes");
        contents.apply(&Event::InitDone);
        assert!(contents.get("db", "a", "1").is_some());
        assert!(contents.get("db", "b", "2").is_none());
        assert!(contents.get("db", "c", "3").is_none());
        assert_eq!(contents.len(), 1);
    }
}
