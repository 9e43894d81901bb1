//! `cassandra-operator`: one binary for every role of the operator (DESIGN.md
//! section 1). This file only parses the command line, sets up logging and
//! dispatches to the role crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use crds::contract::pod::subcommand;
use tracing_subscriber::EnvFilter;

/// A Kubernetes operator for Apache Cassandra and ScyllaDB
/// (cassandra.rook.io/v1alpha1 Cluster).
#[derive(Parser, Debug)]
#[command(name = crds::contract::pod::BINARY_NAME, version, about, propagate_version = true)]
struct Cli {
    /// Log format. The level comes from RUST_LOG (default: info).
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator: reconcile Cluster objects into StatefulSets,
    /// Services, status and Events.
    Controller(controller::ControllerArgs),
    /// Run as the database container's entrypoint: render the configuration,
    /// start and supervise Cassandra (or Scylla), serve probes, act on the
    /// controller's records of intent.
    #[command(name = subcommand::SIDECAR)]
    // Boxed: the largest arguments by far, parsed once.
    Sidecar(Box<sidecar::SidecarArgs>),
    /// Init container: copy this binary (and plugins such as the Jolokia
    /// agent) into the volume shared with the database container.
    #[command(name = subcommand::INSTALL)]
    Install(init::InstallArgs),
    /// A small nodetool over Jolokia: status, info, operation mode, drain,
    /// decommission, version.
    #[command(name = subcommand::NODETOOL)]
    Nodetool(sidecar::nodetool::NodetoolArgs),
    /// Watch files and send a signal (SIGHUP) to a process when their content
    /// changes (for processes that reload their configuration on a signal).
    Reloader(sidecar::reloader::ReloaderArgs),
    /// Print the CustomResourceDefinition of cassandra.rook.io/v1alpha1
    /// Cluster as YAML.
    Crd,
    /// Work with member configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Render a member's configuration files offline, from the image's
    /// defaults and the given inputs, as the sidecar would.
    Render(sidecar::render::RenderArgs),
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Crd => {
            print!("{}", crds::crd::yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Install(args) => {
            init::install(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Controller(args) => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(controller::run::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sidecar(args) => {
            // One thread: the sidecar runs in every Cassandra Pod, and its
            // work (a watch, probes, a few Jolokia calls) needs no more.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = runtime.block_on(sidecar::member::run(*args))?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Command::Nodetool(args) => Ok(sidecar::nodetool::main(&args)),
        Command::Reloader(args) => {
            sidecar::reloader::run_blocking(args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Render(args)) => {
            let report = sidecar::render::render_to_dir(&args)?;
            print!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // One TLS crypto provider for the whole process (kube's rustls uses ring;
    // nothing else in the binary links a TLS stack).
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    //! The member Pod as the controller builds it, run through this
    //! binary's own parser: the controller and the sidecar never see each
    //! other's code (DESIGN.md section 5), and this is where both are.

    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use clap::{CommandFactory, FromArgMatches};
    use controller::resources::{self, BuildContext};
    use crds::contract::{self, pod};
    use crds::quantity::Quantity;
    use k8s_openapi::api::core::v1::{Container, EnvVar};
    use sidecar::nodetool::NodetoolCommand;

    use super::*;

    /// The member whose Pod is parsed, and the address the kubelet gives it.
    const ORDINAL: i32 = 2;
    const POD_IP: &str = "10.244.1.7";

    fn cluster(mode: &str) -> crds::Cluster {
        serde_norway::from_str(&format!(
            r#"
apiVersion: cassandra.rook.io/v1alpha1
kind: Cluster
metadata: {{name: orders, namespace: shop, uid: uid-1}}
spec:
  version: "{version}"
  mode: {mode}
  datacenter:
    name: europe-west1
    racks:
      - name: europe-west1-c
        members: 3
        configMapName: orders-overrides
        storage:
          volumeClaimTemplates:
            - metadata: {{name: data}}
              spec:
                accessModes: [ReadWriteOnce]
                resources: {{requests: {{storage: 10Gi}}}}
        resources:
          requests: {{cpu: 1500m, memory: 6Gi}}
          limits: {{cpu: 1500m, memory: 6Gi}}
"#,
            version = if mode == "scylla" { "6.2" } else { "4.1.8" },
        ))
        .expect("a Cluster")
    }

    /// What the kubelet puts in an environment variable: a literal value,
    /// or what the downward API resolves for this member's Pod (its name
    /// and namespace, its labels as the template sets them, an address, and
    /// a resource limit in whole units, the default divisor of 1).
    fn env_value(
        var: &EnvVar,
        pod_name: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        container: &Container,
    ) -> String {
        if let Some(value) = &var.value {
            return value.clone();
        }
        let from = var.value_from.as_ref().expect("a value or a source");
        if let Some(field) = &from.field_ref {
            let path = field.field_path.as_str();
            if let Some(key) = path
                .strip_prefix("metadata.labels['")
                .and_then(|rest| rest.strip_suffix("']"))
            {
                return labels
                    .get(key)
                    .unwrap_or_else(|| panic!("{}: the Pod has no label {key}", var.name))
                    .clone();
            }
            return match path {
                "metadata.name" => pod_name.to_string(),
                "metadata.namespace" => namespace.to_string(),
                "status.podIP" => POD_IP.to_string(),
                other => panic!("{}: a field the test cannot resolve: {other}", var.name),
            };
        }
        let resource = from
            .resource_field_ref
            .as_ref()
            .expect("a field or a resource");
        let limit = resource
            .resource
            .strip_prefix("limits.")
            .unwrap_or_else(|| panic!("{}: not a limit: {}", var.name, resource.resource));
        let quantity = &container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(limit))
            .unwrap_or_else(|| panic!("{}: the container has no {limit} limit", var.name))
            .0;
        Quantity::parse(quantity).unwrap().ceil_units().to_string()
    }

    /// This binary's parser, fed a command line and an environment, and
    /// nothing of the test process's own environment: each variable is
    /// given as the flag of the argument that reads it, after the word of
    /// its (sub)command. With `every_variable_read`, a variable that no
    /// argument reads fails the test.
    fn parse(argv: &[String], env: &[(String, String)], every_variable_read: bool) -> Cli {
        let command = Cli::command();
        let mut read = Vec::new();
        let mut flags = |scope: &clap::Command| -> Vec<String> {
            let mut flags = Vec::new();
            for (name, value) in env {
                let arg = scope
                    .get_arguments()
                    .find(|a| a.get_env().is_some_and(|e| e == name.as_str()));
                if let Some(arg) = arg {
                    let long = arg
                        .get_long()
                        .expect("an argument with a variable has a flag");
                    flags.push(format!("--{long}={value}"));
                    read.push(name.as_str());
                }
            }
            flags
        };
        let mut line = vec![argv[0].clone()];
        line.extend(flags(&command));
        let mut scope = &command;
        for word in &argv[1..] {
            line.push(word.clone());
            if let Some(sub) = scope.find_subcommand(word) {
                scope = sub;
                line.extend(flags(scope));
            }
        }
        if every_variable_read {
            for (name, _) in env {
                assert!(read.contains(&name.as_str()), "{argv:?} reads no {name}");
            }
        }
        let matches = without_env(command)
            .try_get_matches_from(&line)
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        Cli::from_arg_matches(&matches).unwrap()
    }

    fn without_env(command: clap::Command) -> clap::Command {
        command
            .mut_args(|a| a.env(None))
            .mut_subcommands(without_env)
    }

    #[test]
    fn the_member_pod_runs_what_the_controller_meant() {
        for mode in [
            crds::v1alpha1::ClusterMode::Cassandra,
            crds::v1alpha1::ClusterMode::Scylla,
        ] {
            let cluster = cluster(mode.as_str());
            let valid = controller::validated::validate(&cluster).expect("a valid Cluster");
            let rack = &cluster.spec.datacenter.racks[0];
            let sts = resources::statefulset_for_rack(&valid, rack, 3, &BuildContext::default());
            let pod_name = format!("{}-{ORDINAL}", sts.metadata.name.as_deref().unwrap());
            let namespace = sts.metadata.namespace.clone().unwrap();
            let template = sts.spec.unwrap().template;
            let labels = template.metadata.unwrap().labels.unwrap();
            let spec = template.spec.unwrap();
            let [install] = spec.init_containers.as_deref().unwrap() else {
                panic!("one init container");
            };
            let [database] = spec.containers.as_slice() else {
                panic!("one container");
            };
            let mounted = |container: &Container, path: &Path| {
                container
                    .volume_mounts
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .find(|m| path.starts_with(&m.mount_path))
                    .map(|m| m.name.clone())
            };

            // The init container installs into the volume the database
            // container runs the binary from.
            let Command::Install(installed) =
                parse(install.command.as_ref().unwrap(), &[], true).command
            else {
                panic!("{mode:?}: the init container does not run install");
            };
            let binary = PathBuf::from(&database.command.as_ref().unwrap()[0]);
            assert_eq!(binary, installed.target.join(pod::BINARY_NAME), "{mode:?}");
            assert_eq!(
                mounted(install, &installed.target),
                mounted(database, &binary),
                "{mode:?}: both containers mount the shared volume there"
            );
            assert!(installed.plugins.is_none() && installed.source.is_none());

            // The database container's entrypoint, with its environment.
            let env: Vec<(String, String)> = database
                .env
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|v| {
                    (
                        v.name.clone(),
                        env_value(v, &pod_name, &namespace, &labels, database),
                    )
                })
                .collect();
            let Command::Sidecar(args) =
                parse(database.command.as_ref().unwrap(), &env, true).command
            else {
                panic!("{mode:?}: the database container does not run the sidecar");
            };
            assert_eq!(args.pod_name, pod_name);
            assert_eq!(args.pod_namespace, "shop");
            assert_eq!(args.pod_ip.to_string(), POD_IP);
            assert_eq!(args.pod_cluster, "orders");
            assert_eq!(args.pod_datacenter, "europe-west1");
            assert_eq!(args.pod_rack, "europe-west1-c");
            assert_eq!(args.cpu_limit.as_deref(), Some("2"));
            assert_eq!(args.memory_limit.as_deref(), Some("6442450944"));
            // The paths the sidecar assumes are where the controller mounts.
            assert_eq!(
                mounted(database, &args.overrides_dir).as_deref(),
                Some("overrides"),
                "{mode:?}"
            );
            let data_dir = args
                .data_dir
                .clone()
                .unwrap_or_else(|| contract::data_dir(mode).into());
            assert_eq!(
                mounted(database, &data_dir).as_deref(),
                Some("data"),
                "{mode:?}"
            );
            for path in [&args.config_dir, &PathBuf::from(&args.jolokia_agent_jar)] {
                assert_eq!(
                    mounted(database, path),
                    mounted(database, &binary),
                    "{mode:?}: {} is on the shared volume",
                    path.display()
                );
            }
            assert!(
                Path::new(&args.jolokia_agent_jar)
                    .starts_with(installed.target.join(contract::PLUGINS)),
                "{mode:?}: the agent is where install copies plugins"
            );

            // The preStop hook drains the database the sidecar runs: it tells
            // Cassandra from ScyllaDB by what the sidecar rendered.
            let hook = database
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .and_then(|h| h.exec.as_ref())
                .and_then(|e| e.command.as_ref())
                .unwrap();
            // It inherits the container's environment, and reads of it what
            // it needs.
            let Command::Nodetool(nodetool) = parse(hook, &env, false).command else {
                panic!("{mode:?}: the preStop hook does not run nodetool");
            };
            assert!(matches!(nodetool.command, NodetoolCommand::Drain));
            assert_eq!(nodetool.mode, "auto");
            assert_eq!(nodetool.config_dir, args.config_dir);
            assert_eq!(nodetool.jolokia, args.jolokia_url);
            assert_eq!(nodetool.scylla_api, args.scylla_api_url);
        }
    }
}
