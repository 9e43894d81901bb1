//! Who this member is, gathered once at start-up (Rook's
//! `MemberController`): its Pod, namespace and member Service, the Cluster,
//! datacenter and rack it belongs to, its own ClusterIP (its address in the
//! ring), its data directory and the database it runs; and the seeds it
//! starts with. I/O (reads the Kubernetes API), with the seed rule itself in
//! [`super::seeds`] and `crds::contract`.

use std::path::PathBuf;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use crds::contract;
use crds::labels;
use crds::v1alpha1::{Cluster, ClusterMode};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::ListParams;
use tracing::info;

use super::{MemberError, SidecarArgs};

/// This member, as the sidecar knows it for its whole life.
#[derive(Debug, Clone)]
pub struct Member {
    /// The Pod's name, which is also the member Service's.
    pub pod: String,
    pub namespace: String,
    /// The Cluster object (its spec names the rack's overrides).
    pub cluster: Cluster,
    pub cluster_name: String,
    pub dc: String,
    pub rack: String,
    /// The member Service's ClusterIP: the member's address in the ring.
    pub own_ip: String,
    pub data_dir: PathBuf,
    pub mode: ClusterMode,
    /// The member Service as it was read at start-up (its records of intent
    /// then).
    pub service: Service,
}

/// The ClusterIP of a Service, when it has a usable one.
pub fn cluster_ip(service: &Service) -> Option<String> {
    service
        .spec
        .as_ref()?
        .cluster_ip
        .clone()
        .filter(|ip| !ip.is_empty() && ip != "None")
}

impl Member {
    /// Waits for the member Service and its ClusterIP (the member's
    /// identity), then takes the Pod's labels (from the downward API) and
    /// reads the Cluster.
    pub async fn gather(
        args: &SidecarArgs,
        services: &Api<Service>,
        clusters: &Api<Cluster>,
    ) -> Result<Member, MemberError> {
        let name = args.pod_name.clone();
        let service = (|| async {
            let service = services.get(&name).await.map_err(|e| e.to_string())?;
            match cluster_ip(&service) {
                Some(_) => Ok(service),
                None => Err(format!("member service {name} has no ClusterIP yet")),
            }
        })
        .retry(
            ExponentialBuilder::default()
                .with_max_delay(Duration::from_secs(10))
                .with_max_times(60),
        )
        .notify(|e, after| info!(error = %e, ?after, "waiting for the member service"))
        .await
        .map_err(|_| MemberError::NoClusterIp(name.clone()))?;
        let own_ip = cluster_ip(&service).ok_or_else(|| MemberError::NoClusterIp(name.clone()))?;

        let need = |value: &str, key: &'static str| {
            Some(value.to_string())
                .filter(|v| !v.is_empty())
                .ok_or(MemberError::MissingLabel {
                    pod: name.clone(),
                    label: key,
                })
        };
        let (cluster_name, dc, rack) = (
            need(&args.pod_cluster, labels::CLUSTER)?,
            need(&args.pod_datacenter, labels::DATACENTER)?,
            need(&args.pod_rack, labels::RACK)?,
        );
        let cluster = clusters
            .get(&cluster_name)
            .await
            .map_err(|source| MemberError::Read {
                what: format!("cluster {cluster_name}"),
                source,
            })?;
        let mode = cluster.spec.mode;
        let data_dir = args
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(contract::data_dir(mode)));
        Ok(Member {
            pod: name,
            namespace: args.pod_namespace.clone(),
            cluster,
            cluster_name,
            dc,
            rack,
            own_ip,
            data_dir,
            mode,
            service,
        })
    }

    /// A label of the member Service as read at start-up.
    pub fn service_label(&self, key: &str) -> Option<&str> {
        self.service
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    }

    /// An annotation of the member Service as read at start-up.
    pub fn service_annotation(&self, key: &str) -> Option<&str> {
        self.service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// The seeds this member starts with (DESIGN.md section 4,
    /// [`super::seeds`]), from the member Services of the whole cluster;
    /// `bootstrapped` is whether its data volume records a completed
    /// bootstrap.
    pub async fn seeds(
        &self,
        services: &Api<Service>,
        bootstrapped: bool,
    ) -> Result<Vec<String>, MemberError> {
        let members = services
            .list(&ListParams::default().labels(&format!(
                "{}={}",
                labels::CLUSTER,
                self.cluster_name
            )))
            .await
            .map_err(|source| MemberError::Read {
                what: "member services".into(),
                source,
            })?;
        Ok(super::seeds::seeds_of(self, &members.items, bootstrapped))
    }
}
