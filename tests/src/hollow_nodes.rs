//! Hollow nodes on the real control plane (issue 29): the node agent's
//! side of the Kubernetes API, with no container behind it, as kubemark's
//! hollow kubelets are. Each node registers its Node through the real API
//! with a kubelet's own credential (`system:node:<name>`, so the Node
//! authorizer and NodeRestriction confine it as they confine a kubelet),
//! reports it Ready, renews its Lease in `kube-node-lease` as often as
//! the control plane's timings ask
//! ([`control_plane::NodeTimings::lease_renew`]: every 10 s by default,
//! as the kubelet, whose Lease lasts 40 s), watches the Pods bound to it and reports each one
//! running and Ready (an IP of the node's range, every container started,
//! init containers completed), and finishes the deletion of a Pod once it
//! is marked for deletion (at once: no process to stop). A node
//! [`HollowNodes::stop_reporting`] stops renewing its Lease and answering
//! for its Pods, as a Node that lost its network does, so that the real
//! node-lifecycle controller does what it does with one.
//!
//! Storage: [`PROVISIONER`] provisions the claims of a StorageClass that
//! names it, as an external provisioner does: once the real PV controller
//! annotated a claim with it and the scheduler chose its node
//! (`WaitForFirstConsumer`), a local PersistentVolume on that node, which
//! the real PV binder binds; a Released volume it provisioned with
//! `reclaimPolicy: Delete` is deleted. It runs with the admin credential
//! (a provisioner is a cluster component of its own).
//!
//! What the real node agent adds to this (running the containers,
//! volumes, probes, the kubelet's API) is the rest of issue 29's part 2.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::control_plane::{self, ControlPlane, ControlPlaneError};

/// The provisioner name a StorageClass names to get hollow local volumes.
pub const PROVISIONER: &str = "hollow.testworld.io/local";

/// The annotations the PV controller and the scheduler write on a claim
/// for an external provisioner.
const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// One hollow node: its name, zone and capacity.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    /// `topology.kubernetes.io/zone`; the region is the zone without its
    /// last `-x` (GKE's names: `europe-west1-b` is in `europe-west1`).
    pub zone: String,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
}

impl NodeSpec {
    /// A GKE-like node of 8 CPUs, 32 GiB and 110 Pods in `zone`.
    pub fn in_zone(name: &str, zone: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            zone: zone.to_string(),
            cpu: "8".into(),
            memory: "32Gi".into(),
            pods: 110,
        }
    }

    fn region(&self) -> &str {
        self.zone
            .rsplit_once('-')
            .map_or(self.zone.as_str(), |(r, _)| r)
    }
}

/// What went wrong starting hollow nodes.
#[derive(Debug, thiserror::Error)]
pub enum HollowError {
    #[error(transparent)]
    ControlPlane(#[from] ControlPlaneError),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> HollowError {
    let what = what.into();
    move |source| HollowError::Api { what, source }
}

/// What the hollow nodes did, for a test to check.
#[derive(Debug, Default)]
pub struct Seen {
    /// Pods reported running (namespace/name), each once.
    pub started: BTreeSet<String>,
    /// Pods whose deletion a node finished.
    pub deleted: BTreeSet<String>,
    /// Volumes provisioned, by claim (namespace/name) → (volume, node).
    pub provisioned: BTreeMap<String, (String, String)>,
    /// Requests the API server refused, with their reason.
    pub refused: Vec<String>,
}

/// Running hollow nodes and their provisioner; every task stops on drop.
pub struct HollowNodes {
    tasks: Vec<JoinHandle<()>>,
    reporting: BTreeMap<String, Arc<AtomicBool>>,
    seen: Arc<Mutex<Seen>>,
}

impl Drop for HollowNodes {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl HollowNodes {
    /// Registers `nodes` on `plane`, each through its own kubelet
    /// credential, waits until the API server holds each Node Ready, and
    /// starts their agents and the provisioner.
    pub async fn start(
        plane: &ControlPlane,
        nodes: &[NodeSpec],
    ) -> Result<HollowNodes, HollowError> {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let mut tasks = Vec::new();
        let mut reporting = BTreeMap::new();
        for (index, spec) in nodes.iter().enumerate() {
            let user = format!("system:node:{}", spec.name);
            let kubeconfig = plane.write_client_kubeconfig(&user, &["system:nodes"])?;
            let client = control_plane::client_from(&kubeconfig).await?;
            let address = format!("10.128.{}.{}", index / 250, index % 250 + 2);
            register(&client, spec, &address).await?;
            let on = Arc::new(AtomicBool::new(true));
            reporting.insert(spec.name.clone(), on.clone());
            let agent = Agent {
                client,
                renew: plane.timings().lease_renew(),
                node: spec.name.clone(),
                address,
                pod_range: index as u32,
                next_ip: Arc::new(AtomicU32::new(2)),
                reporting: on,
                seen: seen.clone(),
            };
            tasks.push(tokio::spawn(agent.clone().renew_lease()));
            tasks.push(tokio::spawn(agent.run_pods()));
        }
        let admin = plane.client().await?;
        tasks.push(tokio::spawn(provision(admin.clone(), seen.clone())));
        tasks.push(tokio::spawn(reclaim(admin, seen.clone())));
        Ok(HollowNodes {
            tasks,
            reporting,
            seen,
        })
    }

    /// Stops `node`'s Lease renewals and its answers for its Pods (a Node
    /// cut off from the control plane).
    pub fn stop_reporting(&self, node: &str) {
        if let Some(on) = self.reporting.get(node) {
            on.store(false, Ordering::SeqCst);
        }
    }

    /// Resumes `node`'s Lease renewals and answers (its network is back):
    /// it answers at once for the Pods bound to it meanwhile.
    pub fn resume_reporting(&self, node: &str) {
        if let Some(on) = self.reporting.get(node) {
            on.store(true, Ordering::SeqCst);
        }
    }

    /// What the nodes and the provisioner did so far.
    pub fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Creates the Node (labels as GKE sets them), then its status through
/// the status subresource (capacity, addresses, Ready), then its Lease.
async fn register(client: &Client, spec: &NodeSpec, address: &str) -> Result<(), HollowError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": spec.name, "labels": {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "n2-standard-8",
            "topology.kubernetes.io/zone": spec.zone,
            "topology.kubernetes.io/region": spec.region(),
        }},
    }))
    .expect("a Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(api_error(format!("registering Node {}", spec.name))(e)),
    }
    let now = Time(Timestamp::now());
    let resources = json!({"cpu": spec.cpu, "memory": spec.memory,
        "pods": spec.pods.to_string(), "ephemeral-storage": "100Gi"});
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason,
            "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "addresses": [{"type": "InternalIP", "address": address},
                      {"type": "Hostname", "address": spec.name}],
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", "True", "KubeletReady"),
        ],
        "nodeInfo": {
            "machineID": spec.name, "systemUUID": spec.name, "bootID": spec.name,
            "kernelVersion": "6.1.0", "osImage": "Container-Optimized OS (hollow)",
            "containerRuntimeVersion": "hollow://1", "kubeletVersion": control_plane::version()?,
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
        },
    }});
    nodes
        .patch_status(&spec.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(api_error(format!("reporting Node {}'s status", spec.name)))?;
    Ok(())
}

#[derive(Clone)]
struct Agent {
    client: Client,
    /// How often it renews its Lease (a quarter of the Lease's duration).
    renew: Duration,
    node: String,
    address: String,
    /// The node's Pod range: 10.(64 + range / 256).(range % 256).0/24.
    pod_range: u32,
    next_ip: Arc<AtomicU32>,
    reporting: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
}

impl Agent {
    fn refused(&self, what: String) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .refused
            .push(what);
    }

    /// Creates the node's Lease, then renews it every `renew` while the
    /// node reports; and reports the Node Ready again when the
    /// node-lifecycle controller marked it otherwise meanwhile (as the
    /// kubelet's status sync does: it posts what it knows when the API
    /// server's copy differs).
    async fn renew_lease(self) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let nodes: Api<Node> = Api::all(self.client.clone());
        loop {
            if self.reporting.load(Ordering::SeqCst) {
                if let Ok(node) = nodes.get(&self.node).await
                    && !node
                        .status
                        .and_then(|s| s.conditions)
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                {
                    let now = Time(Timestamp::now());
                    let ready = json!({"status": {"conditions": [{"type": "Ready",
                        "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
                    // A strategic merge: the conditions merge by type.
                    if let Err(e) = nodes
                        .patch_status(
                            &self.node,
                            &PatchParams::default(),
                            &Patch::Strategic(&ready),
                        )
                        .await
                    {
                        self.refused(format!("{}: reporting itself Ready: {e}", self.node));
                    }
                }
                let now = MicroTime(Timestamp::now());
                // A patch, and a create only when there is no Lease yet:
                // one request a renewal, as the kubelet's.
                let renewed = match leases
                    .patch(
                        &self.node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"renewTime": now}})),
                    )
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        let lease: Lease = serde_json::from_value(json!({
                            "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                            "spec": {"holderIdentity": self.node,
                                "leaseDurationSeconds": (self.renew * 4).as_secs().max(1),
                                "renewTime": now},
                        }))
                        .expect("a Lease");
                        leases
                            .create(&PostParams::default(), &lease)
                            .await
                            .map(|_| ())
                    }
                    other => other.map(|_| ()),
                };
                if let Err(e) = renewed {
                    self.refused(format!("{}: renewing its Lease: {e}", self.node));
                }
            }
            tokio::time::sleep(self.renew).await;
        }
    }

    /// Watches the Pods bound to the node (the field selector the Node
    /// authorizer allows a kubelet) and answers for each as it changes,
    /// and, every `renew`, again for those still to answer (what changed
    /// while the node did not report, say).
    async fn run_pods(self) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watcher(pods, config).boxed();
        let mut known: BTreeMap<String, Pod> = BTreeMap::new();
        let mut tick = tokio::time::interval(self.renew);
        loop {
            let changed = tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                        let key = pod.metadata.uid.clone().unwrap_or_default();
                        known.insert(key, pod.clone());
                        vec![pod]
                    }
                    Some(Ok(watcher::Event::Delete(pod))) => {
                        known.remove(pod.metadata.uid.as_deref().unwrap_or_default());
                        continue;
                    }
                    // The watcher retries by itself.
                    Some(_) => continue,
                    None => return,
                },
                _ = tick.tick() => known
                    .values()
                    .filter(|p| p.metadata.deletion_timestamp.is_some() || !ready(p))
                    .cloned()
                    .collect(),
            };
            if self.reporting.load(Ordering::SeqCst) {
                for pod in changed {
                    self.answer(&pod).await;
                }
            }
        }
    }

    async fn answer(&self, pod: &Pod) {
        let (Some(namespace), Some(name), Some(uid)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
            pod.metadata.uid.as_deref(),
        ) else {
            return;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let key = format!("{namespace}/{name}");
        if pod.metadata.deletion_timestamp.is_some() {
            // Nothing runs: the containers are stopped at once.
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match pods.delete(name, &params).await {
                Ok(_) => {
                    self.seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .deleted
                        .insert(key);
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => self.refused(format!("{}: finishing {key}'s deletion: {e}", self.node)),
            }
            return;
        }
        if ready(pod) {
            return;
        }
        let status = pod.status.as_ref();
        let ip = status.and_then(|s| s.pod_ip.clone()).unwrap_or_else(|| {
            let n = self.next_ip.fetch_add(1, Ordering::SeqCst);
            format!(
                "10.{}.{}.{}",
                64 + self.pod_range / 256,
                self.pod_range % 256,
                n.min(254)
            )
        });
        let now = Time(Timestamp::now());
        let spec = pod.spec.as_ref();
        let running = |c: &k8s_openapi::api::core::v1::Container| {
            json!({"name": c.name, "image": c.image, "imageID": c.image,
                "containerID": format!("hollow://{uid}/{}", c.name),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}}})
        };
        let completed = |c: &k8s_openapi::api::core::v1::Container| {
            json!({"name": c.name, "image": c.image, "imageID": c.image,
                "containerID": format!("hollow://{uid}/{}", c.name),
                "ready": true, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now}}})
        };
        let containers: Vec<Value> = spec
            .map(|s| s.containers.iter().map(running).collect())
            .unwrap_or_default();
        let init: Vec<Value> = spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|c| c.iter().map(completed).collect())
            .unwrap_or_default();
        let condition = |type_: &str| {
            json!({"type": type_, "status": "True", "lastProbeTime": null,
                "lastTransitionTime": now})
        };
        let body = json!({"status": {
            "phase": "Running",
            "hostIP": self.address,
            "hostIPs": [{"ip": self.address}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                condition("ContainersReady"), condition("Ready"), condition("PodScheduled")],
            "containerStatuses": containers,
            "initContainerStatuses": init,
        }});
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                self.seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .started
                    .insert(key);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => self.refused(format!("{}: reporting {key} running: {e}", self.node)),
        }
    }
}

/// Whether a Pod's status says Ready.
fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The provisioner: a local volume on the chosen node for each claim the
/// PV controller handed to [`PROVISIONER`].
async fn provision(admin: Client, seen: Arc<Mutex<Seen>>) {
    let claims: Api<PersistentVolumeClaim> = Api::all(admin.clone());
    let volumes: Api<PersistentVolume> = Api::all(admin);
    let mut events = watcher(claims, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let claim = match event {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
            _ => continue,
        };
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        let (Some(namespace), Some(name), Some(uid)) = (
            claim.metadata.namespace.as_deref(),
            claim.metadata.name.as_deref(),
            claim.metadata.uid.as_deref(),
        ) else {
            continue;
        };
        let spec = claim.spec.clone().unwrap_or_default();
        let Some(node) = annotations.get(SELECTED_NODE) else {
            continue;
        };
        if annotations.get(STORAGE_PROVISIONER).map(String::as_str) != Some(PROVISIONER)
            || spec.volume_name.is_some()
            || claim.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let size = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map_or_else(|| "1Gi".to_string(), |q| q.0.clone());
        let volume_name = format!("pvc-{uid}");
        let volume: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": volume_name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.storage_class_name,
                "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                "local": {"path": format!("/mnt/hollow/{volume_name}")},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": namespace, "name": name, "uid": uid},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        }))
        .expect("a PersistentVolume");
        match volumes.create(&PostParams::default(), &volume).await {
            Ok(_) => {
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .provisioned
                    .insert(format!("{namespace}/{name}"), (volume_name, node.clone()));
            }
            // Made at an earlier event of the claim.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .refused
                .push(format!("provisioning {namespace}/{name}: {e}")),
        }
    }
}

/// Deletes the Released volumes [`PROVISIONER`] made with `Delete`.
async fn reclaim(admin: Client, seen: Arc<Mutex<Seen>>) {
    let volumes: Api<PersistentVolume> = Api::all(admin);
    let mut events = watcher(volumes.clone(), watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let volume = match event {
            Ok(watcher::Event::Apply(v) | watcher::Event::InitApply(v)) => v,
            _ => continue,
        };
        let ours = volume
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVISIONED_BY))
            .is_some_and(|p| p == PROVISIONER);
        let released = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let delete = volume
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete");
        let Some(name) = volume.metadata.name.as_deref() else {
            continue;
        };
        if ours && released && delete {
            match volumes.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .refused
                    .push(format!("deleting Released {name}: {e}")),
            }
        }
    }
}

/// A StorageClass whose claims [`PROVISIONER`] provisions once their Pod
/// is scheduled (as GKE's and the local static provisioner's are).
pub fn storage_class(name: &str) -> k8s_openapi::api::storage::v1::StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .expect("a StorageClass")
}
