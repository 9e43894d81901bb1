//! Test fixtures of the write side (tests only): Clusters and the objects
//! of their members built by name, a [`Context`] over caches the test
//! fills, and a mocked API server that verifies each request in order and
//! answers as the test scripts it (kube-rs's controller-rs does the same in
//! its `fixtures.rs`).
//!
//! ```ignore
//! let cluster = Cluster::test().rack("b", 3).version("4.1.8").build();
//! let (ctx, api) = fixtures::context();
//! let ctx = ctx.with_services([member(&cluster, "b", 2).asked().build()]);
//! let api = api.expect([
//!     Expect::merge_patch("/api/v1/namespaces/db/services/c-dc-b-2", json!({..}))
//!         .reply(Reply::conflict()),
//! ]);
//! let acted = act(&valid, "db", &rechecked, &build, &ctx).await;
//! api.done(ctx).await; // every request came, in order, and no other
//! ```
//!
//! The verifier ([`api_server`]) runs beside the code under test: a
//! request that differs from the script (method, path, query, content
//! type, body) fails the test with what differed, and so does a request
//! the script does not have, or one it has that never came.

use crds::contract::{self, DecommissionConfirmation, DecommissionRequest, GossipView};
use crds::v1alpha1::Cluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};

use crate::apply::{member_name, statefulset_name};
use crate::context::Context;
use crate::index::NameIndex;
use crate::resources::{self, BuildContext};
use crate::validated::ValidCluster;

mod api_server;
pub use api_server::{ApiServer, Expect, Reply};

/// When the controller asked a member to leave (the request's time).
pub const ASKED: &str = "2026-11-27T10:00:00Z";
/// When the other members recorded a ring without it: after the request,
/// before the answer (Cassandra's order, `crate::confirmation`).
pub const LEFT: &str = "2026-11-27T10:01:00Z";
/// When the member's sidecar confirmed it left.
pub const ANSWERED: &str = "2026-11-27T10:02:00Z";

// ---------------------------------------------------------------------------
// Clusters

/// `Cluster::test()`: a [`ClusterBuilder`] (a foreign type gets its
/// constructor through a trait).
pub trait TestCluster {
    /// Cluster `c` in namespace `db`, datacenter `dc`, version 4.1.8, no
    /// racks yet.
    fn test() -> ClusterBuilder;
}

impl TestCluster for Cluster {
    fn test() -> ClusterBuilder {
        ClusterBuilder {
            name: "c".into(),
            namespace: "db".into(),
            version: "4.1.8".into(),
            datacenter: "dc".into(),
            racks: Vec::new(),
            claim_templates: Vec::new(),
        }
    }
}

/// A Cluster as the API server would hand it to the controller (with a uid).
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    name: String,
    namespace: String,
    version: String,
    datacenter: String,
    racks: Vec<(String, i32)>,
    claim_templates: Vec<String>,
}

impl ClusterBuilder {
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn version(mut self, version: &str) -> Self {
        self.version = version.into();
        self
    }

    pub fn datacenter(mut self, datacenter: &str) -> Self {
        self.datacenter = datacenter.into();
        self
    }

    /// A rack of `members`, after those added before.
    pub fn rack(mut self, name: &str, members: i32) -> Self {
        self.racks.push((name.into(), members));
        self
    }

    /// A volume claim template (1Gi, ReadWriteOnce) in every rack.
    pub fn claim_template(mut self, name: &str) -> Self {
        self.claim_templates.push(name.into());
        self
    }

    pub fn build(self) -> Cluster {
        let templates: Vec<Value> = self
            .claim_templates
            .iter()
            .map(|name| {
                json!({
                    "metadata": {"name": name},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}},
                })
            })
            .collect();
        let racks: Vec<Value> = self
            .racks
            .iter()
            .map(|(name, members)| {
                json!({
                    "name": name,
                    "members": members,
                    "storage": {"volumeClaimTemplates": templates},
                })
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "cassandra.rook.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": format!("uid-{}", self.name),
                "resourceVersion": "1",
                "generation": 1,
            },
            "spec": {
                "version": self.version,
                "datacenter": {"name": self.datacenter, "racks": racks},
            },
        }))
        .expect("a Cluster")
    }
}

fn rack_index(cluster: &Cluster, rack: &str) -> usize {
    cluster
        .spec
        .datacenter
        .racks
        .iter()
        .position(|r| r.name == rack)
        .unwrap_or_else(|| panic!("the test cluster has no rack {rack}"))
}

fn rack_spec<'c>(cluster: &'c Cluster, rack: &str) -> &'c crds::v1alpha1::RackSpec {
    &cluster.spec.datacenter.racks[rack_index(cluster, rack)]
}

// ---------------------------------------------------------------------------
// The objects of a cluster, as the API server holds them

/// A member's address in the ring (its member Service's ClusterIP):
/// `10.96.<rack's position>.<ordinal>`.
pub fn address(cluster: &Cluster, rack: &str, ordinal: i32) -> String {
    format!("10.96.{}.{ordinal}", rack_index(cluster, rack))
}

/// A member Service, as built and then held by the API server (uid,
/// resourceVersion, ClusterIP), to which records of intent are added.
pub fn member(cluster: &Cluster, rack: &str, ordinal: i32) -> Member {
    let mut service = resources::hashed(resources::member_service(
        &ValidCluster::unchecked(cluster),
        rack_spec(cluster, rack),
        ordinal,
        contract::is_seed(ordinal),
    ));
    let name = service.name_any();
    service.metadata.uid = Some(format!("uid-{name}"));
    service.metadata.resource_version = Some("1".into());
    if let Some(spec) = service.spec.as_mut() {
        spec.cluster_ip = Some(address(cluster, rack, ordinal));
    }
    Member {
        service,
        ordinal,
        request: None,
    }
}

/// A member Service under construction ([`member`]).
#[derive(Debug, Clone)]
pub struct Member {
    service: Service,
    ordinal: i32,
    request: Option<DecommissionRequest>,
}

impl Member {
    pub fn resource_version(mut self, resource_version: &str) -> Self {
        self.service.metadata.resource_version = Some(resource_version.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.service
            .labels_mut()
            .insert(key.to_string(), value.to_string());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.service
            .annotations_mut()
            .insert(key.to_string(), value.to_string());
        self
    }

    /// The controller's request that it leave, made at [`ASKED`]:
    /// `decommissioned=false` and the request record.
    pub fn asked(mut self) -> Self {
        let pod_uid = format!("pod-{}", self.service.name_any());
        let request = DecommissionRequest {
            id: format!("{pod_uid}/{ASKED}"),
            pod_uid: Some(pod_uid),
            host_id: None,
            requested_at: ASKED.into(),
        };
        self = self
            .label(contract::DECOMMISSIONED, contract::DECOMMISSION_REQUESTED)
            .annotation(contract::DECOMMISSION_REQUEST, &request.to_annotation());
        self.request = Some(request);
        self
    }

    /// The sidecar's answer to that request, made at [`ANSWERED`]:
    /// `decommissioned=true` and the confirmation that names the request.
    pub fn confirmed(self) -> Self {
        let asked = self.asked();
        let confirmation = DecommissionConfirmation {
            request: asked.request.as_ref().expect("asked").id.clone(),
            host_id: None,
            confirmed_at: ANSWERED.into(),
            removed: None,
        };
        asked
            .label(contract::DECOMMISSIONED, contract::DECOMMISSION_DONE)
            .annotation(
                contract::DECOMMISSION_CONFIRMATION,
                &confirmation.to_annotation(),
            )
    }

    /// Its sidecar's record of the ring, made at `at`, whose token owners
    /// are `owners` (addresses; host IDs `h<ordinal>` by position).
    pub fn ring(self, at: &str, owners: &[String]) -> Self {
        let view = GossipView {
            generation: 1,
            up: owners.iter().map(|a| (a.clone(), 1)).collect(),
            host_id: Some(format!("h{}", self.ordinal)),
            owners: Some(
                owners
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (a.clone(), format!("h{i}")))
                    .collect(),
            ),
            at: Some(at.into()),
            ..GossipView::default()
        };
        self.annotation(contract::GOSSIP, &view.to_annotation())
    }

    /// Without the Cluster's owner reference: someone else's object.
    pub fn foreign(mut self) -> Self {
        self.service.metadata.owner_references = None;
        self
    }

    pub fn build(self) -> Service {
        self.service
    }
}

/// The member Services of a rack of `members` whose member `leaving` left
/// the ring as the safety rules want it seen: asked, confirmed, and every
/// other member's ring, recorded after the request, without it.
pub fn confirmed_decommission(
    cluster: &Cluster,
    rack: &str,
    members: i32,
    leaving: i32,
) -> Vec<Service> {
    let remaining: Vec<String> = (0..members)
        .filter(|&i| i != leaving)
        .map(|i| address(cluster, rack, i))
        .collect();
    (0..members)
        .map(|i| {
            if i == leaving {
                member(cluster, rack, i).confirmed().build()
            } else {
                member(cluster, rack, i).ring(LEFT, &remaining).build()
            }
        })
        .collect()
}

/// A rack's StatefulSet as created with `replicas`, then held by the API
/// server.
pub fn statefulset(cluster: &Cluster, rack: &str, replicas: i32) -> StatefulSet {
    let mut sts = resources::statefulset_for_rack(
        &ValidCluster::unchecked(cluster),
        rack_spec(cluster, rack),
        replicas,
        &BuildContext::default(),
    );
    sts.metadata.uid = Some(format!("uid-{}", statefulset_name(cluster, rack)));
    sts.metadata.resource_version = Some("1".into());
    sts
}

/// A member's claim of `template`, bound to `volume`.
pub fn claim(
    cluster: &Cluster,
    template: &str,
    rack: &str,
    ordinal: i32,
    volume: &str,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {
            "name": crds::names::pvc_name(template, &member_name(cluster, rack, ordinal)),
            "namespace": cluster.namespace(),
            "uid": format!("uid-{volume}-claim"),
        },
        "spec": {"volumeName": volume},
    }))
    .expect("a PersistentVolumeClaim")
}

/// A local volume, pinned to `node` by its hostname.
pub fn local_volume(name: &str, node: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]}}},
    }))
    .expect("a PersistentVolume")
}

pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Node")
}

// ---------------------------------------------------------------------------
// The Context, with caches filled by the test

/// A Context whose client talks to the returned mocked API server, with
/// empty caches (fill them with `with_*`).
pub fn context() -> (Context, ApiServer) {
    let (client, api) = ApiServer::pair();
    (Context::test(client), api)
}

/// A cache holding `objects`, as its watch would have filled it, and the
/// names a reconcile finds them by.
fn cache<K>(names: Option<&NameIndex>, objects: impl IntoIterator<Item = K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    for object in objects {
        let event = watcher::Event::Apply(object);
        if let Some(names) = names {
            names.apply(&event);
        }
        writer.apply_watcher_event(&event);
    }
    store
}

impl Context {
    pub fn with_services(mut self, objects: impl IntoIterator<Item = Service>) -> Self {
        self.services = cache(Some(&self.names.services), objects);
        self
    }

    pub fn with_statefulsets(mut self, objects: impl IntoIterator<Item = StatefulSet>) -> Self {
        self.statefulsets = cache(Some(&self.names.statefulsets), objects);
        self
    }

    pub fn with_service_accounts(
        mut self,
        objects: impl IntoIterator<Item = ServiceAccount>,
    ) -> Self {
        self.service_accounts = cache(None, objects);
        self
    }

    pub fn with_roles(mut self, objects: impl IntoIterator<Item = Role>) -> Self {
        self.roles = cache(None, objects);
        self
    }

    pub fn with_role_bindings(mut self, objects: impl IntoIterator<Item = RoleBinding>) -> Self {
        self.role_bindings = cache(None, objects);
        self
    }

    pub fn with_pdbs(mut self, objects: impl IntoIterator<Item = PodDisruptionBudget>) -> Self {
        self.pdbs = cache(None, objects);
        self
    }

    /// The CA Secrets of the operator's namespace.
    pub fn with_secrets(
        mut self,
        objects: impl IntoIterator<Item = k8s_openapi::api::core::v1::Secret>,
    ) -> Self {
        self.secrets = cache(None, objects);
        self
    }

    /// ConfigMaps as the metadata watch brings them.
    pub fn with_config_maps(
        mut self,
        objects: impl IntoIterator<Item = k8s_openapi::api::core::v1::ConfigMap>,
    ) -> Self {
        self.config_maps = cache(
            None,
            objects
                .into_iter()
                .map(|c| crate::cached::cached::<crate::cached::CachedConfigMap>(&c)),
        );
        self
    }

    pub fn with_cluster_role_bindings(
        mut self,
        objects: impl IntoIterator<Item = k8s_openapi::api::rbac::v1::ClusterRoleBinding>,
    ) -> Self {
        self.cluster_role_bindings = cache(None, objects);
        self
    }
}

/// An object's JSON, for an exact body.
pub fn to_json(object: &impl Serialize) -> Value {
    serde_json::to_value(object).expect("a serializable object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_cluster_is_valid_and_named_as_built() {
        let cluster = Cluster::test()
            .name("ring")
            .namespace("prod")
            .datacenter("eu")
            .version("4.1.8")
            .rack("a", 3)
            .rack("b", 1)
            .claim_template("data")
            .build();
        assert!(crate::validated::validate(&cluster).is_ok());
        assert_eq!(cluster.namespace().as_deref(), Some("prod"));
        assert_eq!(member_name(&cluster, "b", 0), "ring-eu-b-0");
        assert_eq!(cluster.spec.datacenter.racks[1].members, 1);
        assert_eq!(address(&cluster, "b", 2), "10.96.1.2");
    }
}
