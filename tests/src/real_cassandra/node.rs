//! One real Cassandra node: started as the official image starts it
//! (`cassandra -f` as uid 999, with the image's environment), with the
//! Jolokia JVM agent on loopback, and stopped with SIGTERM. Process and
//! HTTP I/O.
//!
//! Test-only settings go where a user could put them: the heap in
//! `MAX_HEAP_SIZE`/`HEAP_NEWSIZE`, the agent, the JMX port and the ring
//! timings in `JVM_EXTRA_OPTS` (`cassandra-env.sh` appends it last, so a
//! `-D` there wins over the script's own).

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::image::{CASSANDRA_GID, CASSANDRA_UID};
use super::{Error, Image, NodeAddresses, Release, render_cassandra_yaml};

/// The StorageService MBean (JMX-FACTS.md section 1).
pub const STORAGE_SERVICE: &str = "org.apache.cassandra.db:type=StorageService";

/// How long one Jolokia request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(250);
/// Lines of the node's output an error shows.
const OUTPUT_TAIL: usize = 40;

/// The ports of one node on the shared loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// `storage_port`.
    pub storage: u16,
    /// `native_transport_port`.
    pub native: u16,
    /// The local JMX port (`cassandra.jmx.local.port`; 7199 in the image).
    pub jmx: u16,
    /// The Jolokia agent's port (8778 in a member Pod).
    pub jolokia: u16,
}

impl Ports {
    /// Four ports free on 127.0.0.1 now (held together while chosen, so
    /// they differ).
    pub fn free() -> Result<Ports, Error> {
        let listeners = (0..4)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::FreePort)?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::FreePort)?;
        Ok(Ports {
            storage: ports[0],
            native: ports[1],
            jmx: ports[2],
            jolokia: ports[3],
        })
    }
}

/// How a test node is configured and started.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// listen and rpc address.
    pub address: String,
    pub ports: Ports,
    /// Seeds (`host:storage_port`); the node itself when empty.
    pub seeds: Vec<String>,
    /// `MAX_HEAP_SIZE`.
    pub max_heap_size: String,
    /// `HEAP_NEWSIZE` (the young generation under CMS, 4.1's default GC).
    pub heap_newsize: String,
    /// `-Dcassandra.ring_delay_ms` (30 s by default).
    pub ring_delay_ms: u64,
    /// Jolokia agent options after `host=...,port=...`.
    pub jolokia_options: Vec<String>,
    /// More flags for `JVM_EXTRA_OPTS`.
    pub extra_jvm_opts: Vec<String>,
}

impl NodeOptions {
    /// A lone node on 127.0.0.1: a small heap and short ring timings.
    pub fn single(ports: Ports) -> NodeOptions {
        NodeOptions {
            address: "127.0.0.1".into(),
            ports,
            seeds: Vec::new(),
            max_heap_size: "512M".into(),
            heap_newsize: "128M".into(),
            ring_delay_ms: 1000,
            // No multicast discovery listener (the 1.x default): nothing
            // in the test world may answer outside the loopback.
            jolokia_options: vec!["discoveryEnabled=false".into()],
            extra_jvm_opts: Vec::new(),
        }
    }

    fn addresses(&self) -> NodeAddresses {
        let seeds = if self.seeds.is_empty() {
            vec![format!("{}:{}", self.address, self.ports.storage)]
        } else {
            self.seeds.clone()
        };
        NodeAddresses {
            address: self.address.clone(),
            storage_port: self.ports.storage,
            native_port: self.ports.native,
            seeds,
        }
    }

    /// `JVM_EXTRA_OPTS`.
    pub fn jvm_extra_opts(&self, jolokia_agent: &std::path::Path) -> String {
        let mut agent = vec![
            format!("host={}", self.address),
            format!("port={}", self.ports.jolokia),
        ];
        agent.extend(self.jolokia_options.iter().cloned());
        let mut opts = vec![
            format!("-javaagent:{}={}", jolokia_agent.display(), agent.join(",")),
            // cassandra-env.sh sets JMX_PORT="7199" itself: an inherited
            // JMX_PORT is overwritten, so the port goes in as the property.
            format!("-Dcassandra.jmx.local.port={}", self.ports.jmx),
            format!("-Dcassandra.ring_delay_ms={}", self.ring_delay_ms),
            "-Dcassandra.skip_wait_for_gossip_to_settle=0".into(),
        ];
        opts.extend(self.extra_jvm_opts.iter().cloned());
        opts.join(" ")
    }
}

/// A running node. Dropping it kills the process.
#[derive(Debug)]
pub struct Node {
    child: Child,
    started: Instant,
    jolokia_url: String,
    output: PathBuf,
    client: reqwest::Client,
}

impl Node {
    /// Render `cassandra.yaml` into the image's `/etc/cassandra` and start
    /// `/opt/cassandra/bin/cassandra -f` as the image's cassandra user
    /// (uid 999, as its entrypoint does through gosu; so no `-R`). The
    /// node's stdout and stderr go to `<root>/cassandra.out`.
    pub fn start(image: &Image, release: &Release, options: &NodeOptions) -> Result<Node, Error> {
        let yaml_path = image.conf().join("cassandra.yaml");
        let default = std::fs::read_to_string(&yaml_path).map_err(|source| Error::LayOut {
            path: yaml_path.clone(),
            source,
        })?;
        let rendered = render_cassandra_yaml(&default, &options.addresses())?;
        std::fs::write(&yaml_path, rendered).map_err(|source| Error::LayOut {
            path: yaml_path.clone(),
            source,
        })?;

        let output = image.root().join("cassandra.out");
        let out = File::create(&output).map_err(|source| Error::LayOut {
            path: output.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| Error::LayOut {
            path: output.clone(),
            source,
        })?;
        let program = image.cassandra_home().join("bin/cassandra");
        let child = Command::new(&program)
            .arg("-f")
            .env_clear()
            .envs(image.env())
            .env("MAX_HEAP_SIZE", &options.max_heap_size)
            .env("HEAP_NEWSIZE", &options.heap_newsize)
            .env("LOCAL_JMX", "yes")
            .env(
                "JVM_EXTRA_OPTS",
                options.jvm_extra_opts(&release.jolokia_agent),
            )
            .current_dir(image.root())
            .uid(CASSANDRA_UID)
            .gid(CASSANDRA_GID)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| Error::Start {
                path: program.clone(),
                source,
            })?;
        Ok(Node {
            child,
            started: Instant::now(),
            jolokia_url: format!(
                "http://{}:{}/jolokia/",
                options.address, options.ports.jolokia
            ),
            output,
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()
                .expect("a reqwest client without TLS settings builds"),
        })
    }

    /// The process id (the JVM's: `bin/cassandra` execs it).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The Jolokia agent's base URL.
    pub fn jolokia_url(&self) -> &str {
        &self.jolokia_url
    }

    /// Read one MBean attribute through Jolokia.
    pub async fn read(&self, mbean: &str, attribute: &str) -> Result<Value, Error> {
        self.request(json!({"type": "read", "mbean": mbean, "attribute": attribute}))
            .await
    }

    /// One Jolokia request (a JSON object); the `value` of a response whose
    /// `status` is 200.
    pub async fn request(&self, request: Value) -> Result<Value, Error> {
        let failed = |detail: String| Error::Jolokia {
            request: request.to_string(),
            detail,
        };
        let response: Value = self
            .client
            .post(&self.jolokia_url)
            .json(&request)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?
            .json()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if response["status"] != 200 {
            return Err(failed(response.to_string()));
        }
        Ok(response["value"].clone())
    }

    /// The user id the process runs as (the owner of `/proc/<pid>`).
    pub fn uid(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{}", self.pid()))
            .ok()
            .map(|m| m.uid())
    }

    /// Wait until StorageService's `OperationMode` is `mode`; the time since
    /// the start.
    pub async fn wait_for_mode(
        &mut self,
        mode: &str,
        timeout: Duration,
    ) -> Result<Duration, Error> {
        let waited_for = format!("OperationMode {mode}");
        loop {
            if let Some(status) = self.child.try_wait().map_err(Error::Wait)? {
                return Err(Error::Exited {
                    status: status.to_string(),
                    waited_for,
                    output: self.output_tail(),
                });
            }
            let last = match self.read(STORAGE_SERVICE, "OperationMode").await {
                Ok(value) if value == mode => return Ok(self.started.elapsed()),
                Ok(value) => value.to_string(),
                Err(e) => e.to_string(),
            };
            if self.started.elapsed() > timeout {
                return Err(Error::Timeout {
                    waited_for,
                    seconds: timeout.as_secs(),
                    last,
                    output: self.output_tail(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The process's resident set size in KiB (`VmRSS`), while it runs.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    /// SIGTERM (what the kubelet sends), then wait for the exit; its status
    /// and how long the node took.
    pub async fn stop(mut self, timeout: Duration) -> Result<(ExitStatus, Duration), Error> {
        let pid = self.pid();
        kill(Pid::from_raw(pid), Signal::SIGTERM)
            .map_err(|source| Error::Signal { pid, source })?;
        let asked = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().map_err(Error::Wait)? {
                return Ok((status, asked.elapsed()));
            }
            if asked.elapsed() > timeout {
                return Err(Error::Timeout {
                    waited_for: "stopped after SIGTERM".into(),
                    seconds: timeout.as_secs(),
                    last: "still running".into(),
                    output: self.output_tail(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The last lines of the node's stdout and stderr.
    pub fn output_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.output).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(OUTPUT_TAIL)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}
