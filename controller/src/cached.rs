//! What the caches keep of Pods and PersistentVolumes: the fields observe
//! reads, deserialized straight from the watch. serde skips every other
//! field, so nothing else is allocated, not even for a moment.
//!
//! k8s-openapi's types have room for every field of the API, set or not: a
//! `Pod` is 2,176 bytes before its first container (2,120 bytes more), a
//! `PersistentVolume` 3,472 bytes (each volume source is inline). At 1,000
//! clusters the controller's caches hold 3,000 of each, and those empty
//! fields were a fifth of its memory (README, "Benchmarks").
//!
//! The field names are the API's, so the code that reads them reads as it
//! would read the full objects.

use k8s_openapi::api::core::v1::{ObjectReference, VolumeNodeAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainer {
    pub name: String,
    pub image: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPodStatus {
    pub conditions: Option<Vec<CachedCondition>>,
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
}
