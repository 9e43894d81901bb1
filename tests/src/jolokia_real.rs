//! A real Jolokia to test against: `tests/jolokia/FakeCassandraJolokia.java`
//! (jolokia-core 1.7.1 from Debian's `libjolokia-core-java`, in the JDK's
//! HTTP server, in front of MBeans with the JMX signatures of Cassandra 3.11,
//! 4.1 or 5.0), compiled with `javac` once per source version and started as
//! a child process. I/O: files under the target directory and processes.
//!
//! Nothing here skips: a missing `java`, `javac` or jar is an error that
//! names the Debian packages to install.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The Debian packages that provide what the real Jolokia needs (the JDK
/// only where `javac` is missing).
pub const APT_PACKAGES: &str = "libjolokia-core-java libjson-simple-java openjdk-17-jdk-headless";

/// jolokia-core 1.7.1 (`libjolokia-core-java`).
pub const JOLOKIA_CORE_JAR: &str = "/usr/share/java/jolokia-core.jar";
/// json-simple, jolokia-core's only dependency (`libjson-simple-java`).
pub const JSON_SIMPLE_JAR: &str = "/usr/share/java/json-simple.jar";

const SOURCE_NAME: &str = "FakeCassandraJolokia.java";
const MAIN_CLASS: &str = "FakeCassandraJolokia";

/// How long a JVM may take to print `ready <port>`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of preparing or starting the real Jolokia.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{what} is missing ({detail}): install it with `apt-get update && apt-get install -y {APT_PACKAGES}`"
    )]
    FindPrerequisite { what: String, detail: String },
    #[error("reading the java source {path} failed: {source}")]
    ReadSource {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("preparing the class directory {path} failed: {source}")]
    PrepareClassDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("javac failed on {path}:\n{stderr}")]
    Compile { path: PathBuf, stderr: String },
    #[error("starting java failed: {source}")]
    StartJava { source: std::io::Error },
    #[error(
        "the Jolokia JVM agent is not at {path}: fetch it with `scripts/fetch-cassandra <version>` (e.g. 4.1.8)"
    )]
    FindAgentJar { path: PathBuf },
    #[error("the jvm with the Jolokia agent did not print the agent's URL: {detail}")]
    AwaitAgent { detail: String },
    #[error("the fake cassandra jvm ({version}) did not print `ready <port>`: {detail}")]
    AwaitReady { version: String, detail: String },
}

/// The Java source of the program.
pub fn source_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("jolokia")
        .join(SOURCE_NAME)
}

/// Check that both jars are there (cheap: done before every start).
fn check_jars() -> Result<(), Error> {
    for jar in [JOLOKIA_CORE_JAR, JSON_SIMPLE_JAR] {
        if !Path::new(jar).is_file() {
            return Err(Error::FindPrerequisite {
                what: jar.to_string(),
                detail: "no such file".to_string(),
            });
        }
    }
    Ok(())
}

/// Check that `java`, `javac` and both jars are there.
pub fn check_prerequisites() -> Result<(), Error> {
    check_jars()?;
    for tool in ["java", "javac"] {
        let probe = Command::new(tool)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match probe {
            Ok(status) if status.success() => {}
            Ok(status) => {
                return Err(Error::FindPrerequisite {
                    what: tool.to_string(),
                    detail: format!("`{tool} -version` exited with {status}"),
                });
            }
            Err(e) => {
                return Err(Error::FindPrerequisite {
                    what: tool.to_string(),
                    detail: e.to_string(),
                });
            }
        }
    }
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        })
}

/// FNV-1a: a cache key that is stable across Rust versions.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Compile the program unless this exact source was compiled before; the
/// directory holding its classes. Safe to call from parallel tests and
/// processes: each compiles into its own directory and renames it into
/// place.
pub fn compile() -> Result<PathBuf, Error> {
    check_jars()?;
    let source = source_path();
    let text = std::fs::read(&source).map_err(|e| Error::ReadSource {
        path: source.clone(),
        source: e,
    })?;
    let base = target_dir().join("jolokia-contract");
    let classes = base.join(format!("classes-{:016x}", fnv1a(&text)));
    if classes.join(format!("{MAIN_CLASS}.class")).is_file() {
        return Ok(classes);
    }
    check_prerequisites()?;
    let scratch = base.join(format!(
        "tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let prepare = |path: &Path, e| Error::PrepareClassDir {
        path: path.to_path_buf(),
        source: e,
    };
    std::fs::create_dir_all(&scratch).map_err(|e| prepare(&scratch, e))?;
    let output = Command::new("javac")
        .arg("-nowarn")
        .arg("-d")
        .arg(&scratch)
        .arg("-cp")
        .arg(format!("{JOLOKIA_CORE_JAR}:{JSON_SIMPLE_JAR}"))
        .arg(&source)
        .output()
        .map_err(|e| Error::FindPrerequisite {
            what: "javac".to_string(),
            detail: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::Compile {
            path: source,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    match std::fs::rename(&scratch, &classes) {
        Ok(()) => Ok(classes),
        // Another test won the race: its classes are the same.
        Err(_) if classes.join(format!("{MAIN_CLASS}.class")).is_file() => {
            let _ = std::fs::remove_dir_all(&scratch);
            Ok(classes)
        }
        Err(e) => Err(prepare(&classes, e)),
    }
}

/// The Cassandra versions the program can imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CassandraLine {
    V3_11,
    V4_1,
    V5_0,
}

impl CassandraLine {
    pub const ALL: [CassandraLine; 3] = [
        CassandraLine::V3_11,
        CassandraLine::V4_1,
        CassandraLine::V5_0,
    ];

    /// The program's version argument.
    pub fn arg(self) -> &'static str {
        match self {
            CassandraLine::V3_11 => "3.11",
            CassandraLine::V4_1 => "4.1",
            CassandraLine::V5_0 => "5.0",
        }
    }

    /// The `ReleaseVersion` the program reports.
    pub fn release_version(self) -> &'static str {
        match self {
            CassandraLine::V3_11 => "3.11.19",
            CassandraLine::V4_1 => "4.1.8",
            CassandraLine::V5_0 => "5.0.3",
        }
    }
}

/// How to start one fake node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    pub line: CassandraLine,
    /// The other nodes: `(ip, state, rack)` with state UN, DN, UJ, UL or UM.
    /// This node is 10.0.0.1, UN, rack1, datacenter dc1.
    pub peers: Vec<(String, String, String)>,
    /// Replication factor of the one user keyspace (4.x/5.0 refuse a
    /// non-forced decommission when the ring has no more nodes than that).
    pub rf: u32,
    /// How long decommission blocks (LEAVING) before DECOMMISSIONED.
    pub decommission: Duration,
    /// How long drain blocks (DRAINING) before DRAINED.
    pub drain: Duration,
    /// The agent option `policyLocation` (a Jolokia access policy, e.g.
    /// `file:///…/jolokia-access.xml`); `None`: no policy (allow all).
    pub policy_location: Option<String>,
}

impl NodeConfig {
    pub fn new(line: CassandraLine) -> Self {
        NodeConfig {
            line,
            peers: Vec::new(),
            rf: 1,
            decommission: Duration::from_millis(1500),
            drain: Duration::from_millis(300),
            policy_location: None,
        }
    }

    /// Start the agent with this access policy file.
    pub fn policy(mut self, path: &Path) -> Self {
        self.policy_location = Some(format!("file://{}", path.display()));
        self
    }

    pub fn peer(mut self, ip: &str, state: &str, rack: &str) -> Self {
        self.peers
            .push((ip.to_string(), state.to_string(), rack.to_string()));
        self
    }

    pub fn rf(mut self, rf: u32) -> Self {
        self.rf = rf;
        self
    }

    pub fn decommission_time(mut self, duration: Duration) -> Self {
        self.decommission = duration;
        self
    }
}

/// A running fake Cassandra JVM with a real Jolokia. Killed on drop.
#[derive(Debug)]
pub struct RealJolokia {
    child: Child,
    port: u16,
    /// How long the JVM took from spawn to `ready`.
    pub started_in: Duration,
}

impl RealJolokia {
    /// Compile (cached) and start a node; returns once Jolokia listens.
    pub fn start(config: &NodeConfig) -> Result<Self, Error> {
        let classes = compile()?;
        let peers = config
            .peers
            .iter()
            .map(|(ip, state, rack)| format!("{ip}:{state}:{rack}"))
            .collect::<Vec<_>>()
            .join(",");
        let began = Instant::now();
        let mut child = Command::new("java")
            // A small, quick JVM: these are tests, not a database.
            .args([
                "-Xmx64m",
                "-Xss512k",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
            ])
            .arg("-cp")
            .arg(format!(
                "{}:{JOLOKIA_CORE_JAR}:{JSON_SIMPLE_JAR}",
                classes.display()
            ))
            .arg(MAIN_CLASS)
            .arg(config.line.arg())
            .args(["--port", "0"])
            .args(["--rf", &config.rf.to_string()])
            .args(["--peers", &peers])
            .args([
                "--decommission-ms",
                &config.decommission.as_millis().to_string(),
            ])
            .args(["--drain-ms", &config.drain.as_millis().to_string()])
            .args(
                config
                    .policy_location
                    .iter()
                    .flat_map(|p| ["--policy-location", p.as_str()]),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => Error::FindPrerequisite {
                    what: "java".to_string(),
                    detail: source.to_string(),
                },
                _ => Error::StartJava { source },
            })?;
        let version = config.line.arg().to_string();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::AwaitReady {
                version,
                detail: "no stdout pipe".to_string(),
            });
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so that the JVM never blocks on a full pipe.
            for _ in lines {}
        });
        let port = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(Ok(line))) => line
                .strip_prefix("ready ")
                .and_then(|p| p.trim().parse::<u16>().ok())
                .ok_or_else(|| format!("first line was {line:?}")),
            Ok(Some(Err(e))) => Err(format!("reading stdout failed: {e}")),
            Ok(None) => Err("the jvm exited (see its stderr above)".to_string()),
            Err(_) => Err(format!("nothing within {START_TIMEOUT:?}")),
        };
        match port {
            Ok(port) => Ok(RealJolokia {
                child,
                port,
                started_in: began.elapsed(),
            }),
            Err(detail) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::AwaitReady { version, detail })
            }
        }
    }

    /// The Jolokia base URL, e.g. `http://127.0.0.1:41234/jolokia/`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/jolokia/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RealJolokia {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Jolokia JVM agent the operator image ships (`init/Dockerfile`:
/// `org.jolokia:jolokia-jvm:1.7.2`, its main artifact), where
/// `scripts/fetch-cassandra` puts it.
pub fn jolokia_agent_jar() -> PathBuf {
    target_dir()
        .join("cassandra")
        .join("jolokia")
        .join("jolokia-jvm-1.7.2.jar")
}

/// A JVM with the real Jolokia agent loaded by `-javaagent`, as Cassandra
/// loads it, in front of a StorageService MBean whose `drain` blocks: the
/// agent's HTTP server, executor and policy restrictor are the shipped
/// ones, only the MBean is a stand-in (a real node cannot be made to drain
/// for a chosen time). Killed on drop.
#[derive(Debug)]
pub struct AgentJvm {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

const AGENT_PROGRAM: &str = "BlockingStorageService";

/// Its source: the StorageService attributes the readiness probe reads,
/// and a `drain()` that blocks for the time given as the first argument.
const AGENT_PROGRAM_SOURCE: &str = r#"import java.lang.management.ManagementFactory;
import javax.management.ObjectName;
import javax.management.StandardMBean;

public class BlockingStorageService {
    public interface StorageServiceMBean {
        String getOperationMode();
        String getReleaseVersion();
        void drain() throws InterruptedException;
    }

    static long drainMillis;
    static volatile String mode = "NORMAL";

    public static class StorageService implements StorageServiceMBean {
        public String getOperationMode() { return mode; }
        public String getReleaseVersion() { return "4.1.8"; }
        public void drain() throws InterruptedException {
            mode = "DRAINING";
            Thread.sleep(drainMillis);
            mode = "DRAINED";
        }
    }

    public static void main(String[] args) throws Exception {
        drainMillis = Long.parseLong(args[0]);
        ManagementFactory.getPlatformMBeanServer().registerMBean(
            new StandardMBean(new StorageService(), StorageServiceMBean.class),
            new ObjectName("org.apache.cassandra.db:type=StorageService"));
        System.out.println("registered");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
"#;

/// Compiles [`AGENT_PROGRAM_SOURCE`] once (per source text) under the
/// target directory; the directory holding its classes.
fn compile_agent_program() -> Result<PathBuf, Error> {
    let base = target_dir().join("jolokia-agent");
    let classes = base.join(format!(
        "classes-{:016x}",
        fnv1a(AGENT_PROGRAM_SOURCE.as_bytes())
    ));
    if classes.join(format!("{AGENT_PROGRAM}.class")).is_file() {
        return Ok(classes);
    }
    let prepare = |path: &Path, e| Error::PrepareClassDir {
        path: path.to_path_buf(),
        source: e,
    };
    let scratch = base.join(format!(
        "tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&scratch).map_err(|e| prepare(&scratch, e))?;
    let source = scratch.join(format!("{AGENT_PROGRAM}.java"));
    std::fs::write(&source, AGENT_PROGRAM_SOURCE).map_err(|e| prepare(&source, e))?;
    let output = Command::new("javac")
        .arg("-nowarn")
        .arg("-d")
        .arg(&scratch)
        .arg(&source)
        .output()
        .map_err(|e| Error::FindPrerequisite {
            what: "javac".to_string(),
            detail: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::Compile {
            path: source,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    match std::fs::rename(&scratch, &classes) {
        Ok(()) => Ok(classes),
        Err(_) if classes.join(format!("{AGENT_PROGRAM}.class")).is_file() => {
            let _ = std::fs::remove_dir_all(&scratch);
            Ok(classes)
        }
        Err(e) => Err(prepare(&classes, e)),
    }
}

impl AgentJvm {
    /// Starts the JVM with `-javaagent:<jar>=<options>`, where `options`
    /// gets the path the agent jar has in this JVM's own directory (the
    /// sidecar writes the access policy beside the jar: give `options` the
    /// path, as the renderer takes it) and `policy` is written where
    /// [`sidecar::jolokia_access::policy_path`] puts it. Returns once the
    /// agent printed its URL and the MBean is registered.
    pub fn start(
        options: impl FnOnce(&str) -> String,
        policy: &str,
        drain: Duration,
    ) -> Result<Self, Error> {
        let agent = jolokia_agent_jar();
        if !agent.is_file() {
            return Err(Error::FindAgentJar { path: agent });
        }
        let classes = compile_agent_program()?;
        let dir = tempfile::tempdir().map_err(|e| Error::PrepareClassDir {
            path: std::env::temp_dir(),
            source: e,
        })?;
        // The jar in a directory of its own, so that the policy goes beside
        // it as on a member's shared volume.
        let jar = dir.path().join("jolokia-jvm-agent.jar");
        std::fs::copy(&agent, &jar).map_err(|e| Error::PrepareClassDir {
            path: jar.clone(),
            source: e,
        })?;
        let jar = jar.display().to_string();
        let policy_path = PathBuf::from(sidecar::jolokia_access::policy_path(&jar));
        std::fs::write(&policy_path, policy).map_err(|e| Error::PrepareClassDir {
            path: policy_path.clone(),
            source: e,
        })?;
        let javaagent = format!("-javaagent:{jar}={}", options(&jar));
        let mut child = Command::new("java")
            .args(["-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg(&javaagent)
            .arg("-cp")
            .arg(&classes)
            .arg(AGENT_PROGRAM)
            .arg(drain.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| Error::StartJava { source })?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::AwaitAgent {
                detail: "no stdout pipe".to_string(),
            });
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut url = None;
            let mut registered = false;
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("Jolokia: Agent started with URL ") {
                    url = Some(rest.trim().to_string());
                }
                registered |= line == "registered";
                if registered && url.is_some() {
                    break;
                }
            }
            let _ = tx.send(url.filter(|_| registered));
            for _ in lines {}
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(url)) => Ok(AgentJvm {
                child,
                url,
                _dir: dir,
            }),
            outcome => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::AwaitAgent {
                    detail: match outcome {
                        Ok(_) => format!("the jvm exited (see its stderr above): {javaagent}"),
                        Err(_) => format!("nothing within {START_TIMEOUT:?}: {javaagent}"),
                    },
                })
            }
        }
    }

    /// The agent's URL, e.g. `http://127.0.0.1:41234/jolokia/`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for AgentJvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_names_the_packages_to_install() {
        let err = Error::FindPrerequisite {
            what: JOLOKIA_CORE_JAR.to_string(),
            detail: "no such file".to_string(),
        };
        assert_eq!(
            err.to_string(),
            "/usr/share/java/jolokia-core.jar is missing (no such file): install it with \
             `apt-get update && apt-get install -y libjolokia-core-java libjson-simple-java \
             openjdk-17-jdk-headless`"
        );
    }

    #[test]
    fn the_cache_key_follows_the_source() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(b"class A {}"), fnv1a(b"class B {}"));
        assert!(source_path().is_file(), "{}", source_path().display());
    }
}
