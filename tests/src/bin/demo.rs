//! The README's first command: the thesis scenario (section 5.2.1) as far as
//! the project runs it today.
//!
//! It takes the embedded GKE local-SSD Cluster manifest, admits it as the API
//! server would (schema, defaults, CEL rules) and as the controller does
//! (`validate()`), builds the objects the controller creates, and drives the
//! controller's real decision step through a scale-up of rack
//! `europe-west1-b` to 3 members and then of a second rack `europe-west1-c`
//! to 2, in a simulated world where a started member becomes ready at once.
//! Nothing is started and nothing is left running.
//!
//! When the test world (kubesim, fake Cassandra) lands, this becomes the full
//! demo with the real binary as controller and sidecar.

use std::process::ExitCode;

use controller::decide::{Action, Observed, ServiceObserved, WaitReason, decide};
use controller::resources::{self, BuildContext};
use crds::Cluster;
use serde_json::Value;
use testworld::{cel, schema};

const MANIFEST: &str = include_str!("../../../manifests/examples/gke-local-ssd.yaml");

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut object = cluster_document()?;
    let crd = crds::crd::definition();
    let openapi = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or("the CRD has no schema")?;
    let openapi = serde_json::to_value(openapi).map_err(|e| e.to_string())?;

    println!("== admission: manifests/examples/gke-local-ssd.yaml");
    let (pruned, errors) = schema::admit(&openapi, &mut object);
    let cel_errors = cel::check(&openapi, &object, None);
    if !errors.is_empty() || !cel_errors.is_empty() || !pruned.is_empty() {
        return Err(format!(
            "rejected: {errors:?} {cel_errors:?} unknown fields {pruned:?}"
        ));
    }
    println!(
        "   schema and CEL rules: accepted (mode defaulted to {})",
        object["spec"]["mode"]
    );
    let mut cluster: Cluster = serde_json::from_value(object).map_err(|e| e.to_string())?;
    cluster.metadata.uid = Some("demo".to_string());
    crds::validate(&cluster).map_err(|e| e.to_string())?;
    println!("   validate(): accepted");

    let ctx = BuildContext::default();
    println!(
        "\n== objects of cluster {}/{}",
        cluster.metadata.namespace.as_deref().unwrap_or("default"),
        cluster.metadata.name.as_deref().unwrap_or_default()
    );
    for (kind, name) in [
        (
            "Service (headless, ready members)",
            resources::client_service(&cluster).metadata.name,
        ),
        (
            "PodDisruptionBudget (maxUnavailable 1)",
            resources::pod_disruption_budget(&cluster).metadata.name,
        ),
        (
            "ServiceAccount/Role/RoleBinding",
            resources::member_role(&cluster).metadata.name,
        ),
    ] {
        println!("   {kind:<40} {}", name.unwrap_or_default());
    }

    let mut world = Observed::default();
    println!("\n== scale-up of rack europe-west1-b to 3 members, one at a time");
    converge(&cluster, &mut world, &ctx)?;

    println!("\n== a second rack, europe-west1-c, with 2 members");
    let mut second = cluster.spec.datacenter.racks[0].clone();
    second.name = "europe-west1-c".to_string();
    second.members = 2;
    cluster.spec.datacenter.racks.push(second);
    crds::validate(&cluster).map_err(|e| e.to_string())?;
    converge(&cluster, &mut world, &ctx)?;

    let members: i32 = world.racks.values().map(|r| r.replicas.unwrap_or(0)).sum();
    println!(
        "\n== converged: {members} members ready in {} racks",
        world.racks.len()
    );
    println!("   (next: the same scenario in the test world, with kubesim, the real");
    println!("    controller and sidecar binaries, and fake Cassandra nodes)");
    Ok(())
}

fn cluster_document() -> Result<Value, String> {
    for doc in serde_norway::Deserializer::from_str(MANIFEST) {
        let value: serde_norway::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        let value = serde_json::to_value(value).map_err(|e| e.to_string())?;
        if value["kind"] == "Cluster" {
            return Ok(value);
        }
    }
    Err("no Cluster in the manifest".to_string())
}

/// Runs the decision step until it converges, playing the part of the API
/// server, the StatefulSet controller and the kubelet in the simplest way:
/// whatever the controller asks for happens, and a started member is ready
/// at the next look.
fn converge(cluster: &Cluster, world: &mut Observed, ctx: &BuildContext) -> Result<(), String> {
    for step in 1..=100 {
        let action = decide(&cluster.spec, world);
        match &action {
            Action::CreateStatefulSets { racks } => {
                for rack in racks {
                    let spec = cluster
                        .spec
                        .datacenter
                        .racks
                        .iter()
                        .find(|r| &r.name == rack)
                        .ok_or("unknown rack")?;
                    let sts = resources::statefulset_for_rack(cluster, spec, 0, ctx);
                    println!(
                        "   {step:>2}. RackCreated       StatefulSet {} (0 replicas)",
                        sts.metadata.name.unwrap_or_default()
                    );
                    world.racks.entry(rack.clone()).or_default().replicas = Some(0);
                }
            }
            Action::CreateMemberService { rack, member, seed } => {
                let spec = cluster
                    .spec
                    .datacenter
                    .racks
                    .iter()
                    .find(|r| &r.name == rack)
                    .ok_or("unknown rack")?;
                let service = resources::member_service(cluster, spec, *member, *seed);
                println!(
                    "   {step:>2}. MemberService     {}{}",
                    service.metadata.name.unwrap_or_default(),
                    if *seed { " (seed)" } else { "" }
                );
                world
                    .racks
                    .entry(rack.clone())
                    .or_default()
                    .members
                    .entry(*member)
                    .or_default()
                    .service = Some(ServiceObserved::default());
            }
            Action::ScaleUp { rack, replicas } => {
                println!(
                    "   {step:>2}. RackScaledUp      {rack}: {} -> {replicas} members",
                    replicas - 1
                );
                let observed = world.racks.entry(rack.clone()).or_default();
                observed.replicas = Some(*replicas);
                observed.members.entry(replicas - 1).or_default().pod_exists = true;
            }
            Action::Wait(WaitReason::MemberNotReady { rack, member }) => {
                println!(
                    "   {step:>2}. Waiting           member {rack}-{member} is joining; it bootstraps and becomes Ready"
                );
                let m = world
                    .racks
                    .entry(rack.clone())
                    .or_default()
                    .members
                    .entry(*member)
                    .or_default();
                m.pod_exists = true;
                m.pod_ready = true;
            }
            Action::Converged => {
                println!("   {step:>2}. Converged         every rack has its members, all ready");
                return Ok(());
            }
            other => return Err(format!("unexpected step: {other:?}")),
        }
    }
    Err("did not converge in 100 steps".to_string())
}
