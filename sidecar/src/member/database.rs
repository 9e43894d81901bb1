//! The database process: its configuration written from the image's
//! defaults and the rack's overrides, its command line, its standard error
//! (read for the refusals the sidecar acts on) and its drain before it
//! stops. I/O.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crds::quantity::Quantity;
use crds::v1alpha1::{Cluster, ClusterMode};
use tracing::{info, warn};

use super::{MemberError, SidecarArgs};
use crate::decommission;
use crate::jolokia::OperationMode;
use crate::node::Node;
use crate::render::{self, MemberConfig, Overrides, OverridesOrigin};
use crate::supervise::Child;

pub fn parse_limit(
    what: &'static str,
    value: Option<&str>,
) -> Result<Option<Quantity>, MemberError> {
    value
        .filter(|v| !v.trim().is_empty())
        .map(|v| Quantity::parse(v).map_err(|source| MemberError::Quantity { what, source }))
        .transpose()
}

/// The database's command line. Cassandra's: `cassandra -f` with the
/// storage directory on the data volume. The image's cassandra.yaml leaves
/// the data, commit log, hints and saved caches directories unset, so they
/// live under `cassandra.storagedir`; `bin/cassandra` appends its own
/// (`$CASSANDRA_HOME/data`) after `JVM_OPTS`, so only a `-D` of the command
/// line, which it passes last, decides it whatever the image links there.
///
/// ScyllaDB's: `scylla` with the rendered scylla.yaml (`--options-file`),
/// its work directory on the data volume (`--workdir`: the image's
/// scylla.yaml leaves it and the data directories unset) and the I/O
/// scheduler's properties measured for that volume
/// (`--io-properties-file`, see [`ensure_io_properties`]), then the
/// rendered arguments.
pub fn database_command(
    args: &SidecarArgs,
    mode: ClusterMode,
    extra: &[String],
    data_dir: &Path,
) -> Result<Vec<String>, MemberError> {
    let mut command: Vec<String> = match (&args.database_command, mode) {
        (Some(custom), _) => custom.split_whitespace().map(str::to_string).collect(),
        (None, ClusterMode::Cassandra) => vec![
            "cassandra".to_string(),
            "-f".to_string(),
            format!("-Dcassandra.storagedir={}", data_dir.display()),
        ],
        (None, ClusterMode::Scylla) => vec![
            "scylla".to_string(),
            "--options-file".to_string(),
            args.config_dir
                .join(render::main_file_name(mode))
                .display()
                .to_string(),
            "--workdir".to_string(),
            data_dir.display().to_string(),
            "--io-properties-file".to_string(),
            io_properties_file(data_dir).display().to_string(),
        ],
    };
    command.extend(extra.iter().cloned());
    if command.is_empty() {
        return Err(MemberError::NoCommand);
    }
    Ok(command)
}

/// The rack's overrides, from the mounted ConfigMap (when the rack names
/// one; a rack without `configMapName` has none even if the directory
/// exists).
pub fn read_overrides(
    cluster: &Cluster,
    rack: &str,
    dir: &Path,
    mode: ClusterMode,
) -> Result<Option<Overrides>, MemberError> {
    let Some(config_map) = cluster
        .spec
        .datacenter
        .racks
        .iter()
        .find(|r| r.name == rack)
        .and_then(|r| r.config_map_name.clone())
    else {
        return Ok(None);
    };
    let path = dir.join(render::main_file_name(mode));
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(Overrides {
            origin: OverridesOrigin::ConfigMap(config_map),
            text,
        })),
        // The ConfigMap has no key for the main file: nothing to merge.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MemberError::File {
            action: "reading",
            path,
            source,
        }),
    }
}

/// Copies the image's configuration directory (cassandra-env.sh, the JVM
/// options...) and writes the rendered files over it: CASSANDRA_CONF points
/// at one complete directory.
pub fn write_configuration(
    config: &MemberConfig,
    defaults_dir: &Path,
    out: &Path,
) -> Result<render::Rendered, MemberError> {
    let main = defaults_dir.join(render::main_file_name(config.mode));
    let defaults = std::fs::read_to_string(&main).map_err(|source| MemberError::File {
        action: "reading",
        path: main.clone(),
        source,
    })?;
    let rendered = render::render(config, &defaults)?;
    let mut files: Vec<(String, String)> = Vec::new();
    let entries = std::fs::read_dir(defaults_dir).map_err(|source| MemberError::File {
        action: "listing",
        path: defaults_dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !path.is_file() || rendered.files.iter().any(|f| f.name == name) {
            continue;
        }
        // Binary files are not configuration: skip what is not text.
        if let Ok(content) = std::fs::read_to_string(&path) {
            files.push((name, content));
        }
    }
    files.extend(
        rendered
            .files
            .iter()
            .map(|f| (f.name.clone(), f.content.clone())),
    );
    render::write_all(out, &files)?;
    if config.mode == ClusterMode::Cassandra {
        // The agent refuses everything the sidecar and nodetool do not use;
        // without the file it would refuse every MBean access.
        let policy = std::path::PathBuf::from(crate::jolokia_access::policy_path(
            &config.jolokia_agent_jar,
        ));
        let write = |path: &Path| -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, crate::jolokia_access::policy_xml())
        };
        write(&policy).map_err(|source| MemberError::File {
            action: "writing",
            path: policy.clone(),
            source,
        })?;
    }
    Ok(rendered)
}

/// Starts the database with the rendered configuration: `CASSANDRA_CONF` at
/// the written directory, the rendered environment (the JVM options the
/// container already passes kept), its standard error read for
/// `refusals` on the way to ours.
pub fn start(
    args: &SidecarArgs,
    mode: ClusterMode,
    rendered: &render::Rendered,
    data_dir: &Path,
    refusals: Arc<StartRefusals>,
) -> Result<Child, MemberError> {
    let command = database_command(args, mode, &rendered.args, data_dir)?;
    let mut process = std::process::Command::new(&command[0]);
    // Where each database reads its configuration directory (ScyllaDB's
    // GossipingPropertyFileSnitch reads cassandra-rackdc.properties there).
    let conf_variable = match mode {
        ClusterMode::Cassandra => "CASSANDRA_CONF",
        ClusterMode::Scylla => "SCYLLA_CONF",
    };
    process
        .args(&command[1..])
        .env(conf_variable, &args.config_dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    for (key, value) in &rendered.env {
        let mut value = value.clone();
        if key == "JVM_EXTRA_OPTS" && mode == ClusterMode::Cassandra {
            // Keep what the container already passes the JVM.
            let existing = std::env::var(key).unwrap_or_default();
            if !existing.trim().is_empty() {
                value = format!("{value} {}", existing.trim());
            }
        }
        process.env(key, value);
    }
    let mut child = Child::spawn(process)?;
    if let Some(stderr) = child.take_stderr() {
        std::thread::spawn(move || forward_stderr(stderr, &refusals));
    }
    Ok(child)
}

/// Why Cassandra refused to start, as its standard error says: the refusals
/// the sidecar answers.
#[derive(Debug, Default)]
pub struct StartRefusals {
    /// "This node was decommissioned and will not rejoin the ring".
    /// Shared with the decommission loop, which confirms from it.
    pub decommissioned: Arc<AtomicBool>,
    /// "A node with address ... already exists, cancelling join": an empty
    /// data directory at an address the ring still knows (the line).
    pub collision: Mutex<Option<String>>,
}

impl StartRefusals {
    /// The collision line, if Cassandra logged one.
    pub fn collision(&self) -> Option<String> {
        self.collision
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn read(&self, line: &str) {
        if line.contains(decommission::REFUSED_DECOMMISSIONED_LOG) {
            self.decommissioned.store(true, Ordering::Relaxed);
        }
        if is_endpoint_collision(line) {
            *self.collision.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(line.trim().to_string());
        }
    }
}

/// Whether a log line is Cassandra's refusal to join at an address the ring
/// still knows (`StorageService.checkForEndpointCollision`, 3.11 to 5.0).
pub fn is_endpoint_collision(line: &str) -> bool {
    line.contains("A node with address") && line.contains("already exists, cancelling join")
}

/// Copies the database's standard error to ours, reading the refusals in it.
pub fn forward_stderr(stderr: std::process::ChildStderr, refusals: &StartRefusals) {
    use std::io::{BufRead, Write};
    let reader = std::io::BufReader::new(stderr);
    for line in reader.lines().map_while(Result::ok) {
        refusals.read(&line);
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// Where the I/O scheduler's properties of a data volume are kept: on the
/// volume, since they describe its disk (a replaced disk is measured
/// again).
pub fn io_properties_file(data_dir: &Path) -> PathBuf {
    crds::contract::state_dir(data_dir).join("io_properties.yaml")
}

/// ScyllaDB refuses to start outside developer mode without its I/O
/// scheduler configured ("Bad I/O Scheduler configuration"). The image's
/// entrypoint runs `scylla_io_setup` (iotune) for that at every start; the
/// sidecar runs `iotune` once per data volume, on the data directory, and
/// keeps the result there ([`io_properties_file`]).
///
/// iotune measures for about two minutes outside developer mode: it runs
/// as a child the runtime awaits, never blocking it, since the sidecar's
/// runtime has one thread that also answers the liveness probe (issue 30:
/// a blocking wait let the kubelet kill the container after ~75 s, at
/// every start). Dropping the future (the Pod stops) kills iotune. It is
/// spawned as a [`Child`] like the database: the sidecar's reaper collects
/// every child's status, so a child spawned otherwise (tokio's own
/// process handling included) could lose its status to it.
pub async fn ensure_io_properties(iotune: &str, data_dir: &Path) -> Result<PathBuf, MemberError> {
    let target = io_properties_file(data_dir);
    if target.is_file() {
        return Ok(target);
    }
    let dir = crds::contract::state_dir(data_dir);
    std::fs::create_dir_all(&dir).map_err(|source| MemberError::File {
        action: "creating",
        path: dir.clone(),
        source,
    })?;
    let measuring = target.with_extension("measuring");
    info!(directory = %data_dir.display(), "measuring the data volume for scylla's i/o scheduler (iotune)");
    let mut command = std::process::Command::new(iotune);
    command
        .arg("--evaluation-directory")
        .arg(data_dir)
        .arg("--properties-file")
        .arg(&measuring)
        .stdin(Stdio::null());
    // Its own process group, so that a stop kills whatever it started too
    // (a wrapper script's children would otherwise outlive it).
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = Child::spawn(command).map_err(|e| match e {
        crate::supervise::SuperviseError::Spawn { source, .. } => MemberError::File {
            action: "running",
            path: PathBuf::from(iotune),
            source,
        },
        other => MemberError::Supervise(other),
    })?;
    let running = KillOnDrop(&child);
    let code = running.0.wait().await;
    if code != 0 {
        return Err(MemberError::IoSetup(format!("exit status {code}")));
    }
    std::fs::rename(&measuring, &target).map_err(|source| MemberError::File {
        action: "renaming over",
        path: target.clone(),
        source,
    })?;
    Ok(target)
}

/// A child, leader of its own process group, killed with its group when
/// its waiter goes away (a select that the Pod's stop won): iotune must not
/// outlive the sidecar's interest in it.
struct KillOnDrop<'a>(&'a Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        // Nothing to kill once it ended.
        if self.0.try_exit_code().is_none() {
            let group = nix::unistd::Pid::from_raw(self.0.pid());
            if let Err(e) = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL) {
                warn!(error = %e, "killing iotune");
            }
        }
    }
}

pub async fn drain(storage: Node) {
    match storage.operation_mode().await {
        // The preStop hook's `nodetool drain` ran first, as it should.
        Ok(OperationMode::Drained) => info!("drained already (the preStop hook)"),
        Ok(OperationMode::Decommissioned) => {}
        Ok(_) => {
            if let Err(e) = storage.drain().await {
                warn!(error = %e, "drain failed");
            } else {
                info!("drained");
            }
        }
        Err(e) => info!(error = %e, "not draining: the database does not answer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusals_are_read_from_cassandras_lines() {
        let refusals = StartRefusals::default();
        refusals.read("INFO  [main] Starting up server gossip");
        assert!(!refusals.decommissioned.load(Ordering::Relaxed));
        assert_eq!(refusals.collision(), None);
        // The lines as 3.11 to 5.0 log them (StorageService).
        let collision = "ERROR [main] Exception encountered during startup: java.lang.RuntimeException: A node with address /10.96.0.12:7000 already exists, cancelling join. Use cassandra.replace_address if you want to replace this node.";
        refusals.read(collision);
        assert_eq!(refusals.collision().as_deref(), Some(collision));
        refusals.read("ERROR [main] This node was decommissioned and will not rejoin the ring unless cassandra.override_decommission=true has been set, or all existing data is removed and the node is bootstrapped again");
        assert!(refusals.decommissioned.load(Ordering::Relaxed));
        // ScyllaDB's words (service/storage_service.cc) begin the same.
        let scylla = StartRefusals::default();
        scylla.read("ERROR 2025-01-20 10:00:00,000 [shard 0:main] storage_service - This node was decommissioned and will not rejoin the ring unless override_decommission=true has been set and consistent cluster management is not in use,or all existing data is removed and the node is bootstrapped again");
        assert!(scylla.decommissioned.load(Ordering::Relaxed));
        let line = "ERROR 2025-01-20 10:00:00,000 [shard 0:main] init - Startup failed: std::runtime_error (A node with address 10.96.0.12 already exists, cancelling join. Use replace_address if you want to replace this node.)";
        scylla.read(line);
        assert_eq!(scylla.collision().as_deref(), Some(line));
        assert!(!is_endpoint_collision(
            "A node with address 10.0.0.1 is joining"
        ));
    }
}
