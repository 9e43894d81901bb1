//! `cassandra-operator`: one binary for every role of the operator (DESIGN.md
//! section 1). This file only parses the command line, sets up logging and
//! dispatches to the role crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// A Kubernetes operator for Apache Cassandra and ScyllaDB
/// (cassandra.rook.io/v1alpha1 Cluster).
#[derive(Parser, Debug)]
#[command(name = "cassandra-operator", version, about, propagate_version = true)]
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
    Sidecar(sidecar::SidecarArgs),
    /// Init container: copy this binary (and plugins such as the Jolokia
    /// agent) into the volume shared with the database container.
    Install(init::InstallArgs),
    /// A small nodetool over Jolokia: status, info, operation mode, drain,
    /// decommission, version.
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
            let code = runtime.block_on(sidecar::member::run(args))?;
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
