//! `fake-cassandra`: the test world's Cassandra process, in the place of the
//! official `cassandra` image's `bin/cassandra` (the sidecar under test
//! runs `cassandra -f`). Started under the name `scylla`, it is the fake
//! ScyllaDB node instead ([`testworld::fake_scylla`]). Reads `CASSANDRA_CONF`/cassandra.yaml and
//! cassandra-rackdc.properties, `MAX_HEAP_SIZE`, `HEAP_NEWSIZE`,
//! `JVM_EXTRA_OPTS`, `CASSANDRA_HOME`, `CASSANDRA_VERSION`, joins the ring
//! of kubesim at `KUBESIM_URL` (the fake image's own setting), serves
//! Jolokia where `-javaagent:` says, and runs until SIGTERM or SIGINT (exit
//! 143/130, down in the ring, data kept). A start Cassandra refuses logs
//! its message and exits 3; a bad configuration exits 1.
//!
//! What it does as the image and its launcher do (Apache Cassandra 3.11,
//! 4.1 and 5.0 `bin/cassandra` and `bin/cassandra.in.sh`; the official
//! image of docker-library/cassandra, whose Dockerfile sets
//! `CASSANDRA_HOME=/opt/cassandra`, `CASSANDRA_CONF=/etc/cassandra` and
//! links `$CASSANDRA_HOME/data` to `/var/lib/cassandra`, its volume):
//! - root refused: `bin/cassandra` exits 1 with its two-line message when
//!   `id -u` or `id -g` is 0 and `-R` was not given (the image's
//!   entrypoint steps down to the `cassandra` user, 999:999, with gosu
//!   before it runs the launcher). Checked before anything is read.
//! - the JVM's properties in the launcher's order (see
//!   [`testworld::fake_cassandra::config`]): `JVM_EXTRA_OPTS`, then the
//!   launcher's `-Dcassandra.storagedir=$CASSANDRA_HOME/data`, then the
//!   command line's `-D` options; the last one wins.
//! - the directories of `DatabaseDescriptor` (from cassandra.yaml, else
//!   under the storage dir), created and checked as
//!   `StartupChecks.checkDataDirs` does: "Has no permission to create
//!   directory X" or "Insufficient permissions on directory X", exit 3
//!   (`StartupException.ERR_WRONG_DISK_STATE`).
//!
//! - encryption (4.1 and 5.0, [`testworld::fake_cassandra::tls`]):
//!   `DatabaseDescriptor.applySslContext` before the StartupChecks: an
//!   unknown `ssl_context_factory`, or a keystore or truststore the
//!   factory cannot build from, is `ConfigurationException` on stdout and
//!   in the log with its causes, exit 3. An encrypting node serves TLS
//!   handshakes on `listen_address:storage_port` and
//!   `rpc_address:native_transport_port` with the material it holds
//!   (`MessagingService.reloadSslCertificates` and the hot-reload task,
//!   every 600 s or `FAKE_CASSANDRA_SSL_RELOAD_MS`, read the files again).
//!
//! The first data directory's identity in the ring is
//! `<path>@<dev>:<inode>`; a marker file (`.fake-cassandra-host-id`) tells
//! a used directory from an empty one (empty: the ring forgets what it
//! knew of it). The process holds a lease by reading its view every
//! 250 ms, and exits (1) when the ring has it down (killed behind its
//! back, disk lost) or kubesim has been unreachable for 10 s.
//!
//! Its sstables: one per keyspace whose copies changed, flushed every
//! second and on shutdown, named as its line names them
//! ([`testworld::fake_cassandra::sstables`]). With `FAKE_CASSANDRA_JMX`
//! set, it also serves the stand-in of the local JMX port nodetool uses
//! (see `main`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use testworld::fake_cassandra::MARKER;
use testworld::fake_cassandra::config::{self, FakeConfig};
use testworld::fake_cassandra::jolokia::Identity;
use testworld::fake_cassandra::node::Seeds;
use testworld::fake_cassandra::node::{
    FakeNode, NodeError, RingClient, serve_jolokia, serve_jolokia_pooled,
};
use testworld::fake_cassandra::process::{Stop, data_dir_identity, wait_for_signal, watch_ring};
use testworld::fake_cassandra::ring_service::StartRequest;
use testworld::fake_cassandra::sstables::{self, Sstables};
use testworld::fake_cassandra::tls::{Policy, Side, SslState, hot_reload_period};
use testworld::fake_cassandra::tls_wire;

fn log(level: &str, message: &str) {
    println!("{level:<5} [main] {message}");
}

/// `extra`: `-D` options of the command line (`bin/cassandra` passes them
/// to the JVM after its own).
fn read_config(extra: &[String]) -> Result<FakeConfig, String> {
    let conf = std::env::var("CASSANDRA_CONF").map_err(|_| "CASSANDRA_CONF is not set")?;
    let conf = PathBuf::from(conf);
    let yaml_path = conf.join("cassandra.yaml");
    let yaml = std::fs::read_to_string(&yaml_path)
        .map_err(|e| format!("reading {}: {e}", yaml_path.display()))?;
    let rackdc = std::fs::read_to_string(conf.join("cassandra-rackdc.properties")).ok();
    let env = |name: &str| std::env::var(name).ok();
    config::parse(&yaml, rackdc.as_deref(), &env, extra).map_err(|e| e.to_string())
}

/// `bin/cassandra`'s refusal of root (user or group) without `-R`.
fn refuses_root(allow_root: bool) -> bool {
    !allow_root && (nix::unistd::getuid().is_root() || nix::unistd::getgid().as_raw() == 0)
}

/// `StartupChecks.checkDataDirs`: each directory exists (made if missing)
/// and the process may read, write and enter it.
fn check_directories(dirs: &[&str]) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    for dir in dirs {
        let path = std::path::Path::new(dir);
        if !path.exists() && std::fs::create_dir_all(path).is_err() {
            return Err(format!("Has no permission to create directory {dir}"));
        }
        if access(
            path,
            AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK,
        )
        .is_err()
        {
            return Err(format!("Insufficient permissions on directory {dir}"));
        }
    }
    Ok(())
}

/// The JVM's GC log in `cassandra.logdir`, as cassandra-env.sh sets it:
/// Java 11+ (Cassandra 4.0+: `-Xlog:gc…:file=$CASSANDRA_LOG_DIR/gc.log`)
/// refuses to start when it cannot open the file (a read-only root
/// filesystem without a logs volume); Java 8 (3.11: `-Xloggc`) warns and
/// goes on. A directory that does not exist at all is left alone: outside
/// an image (the fake run on the host) there is none. False: the JVM exits.
fn open_logs(dir: &str, release: &str) -> bool {
    let dir = std::path::Path::new(dir);
    if !dir.exists() {
        return true;
    }
    let gc_log = dir.join("gc.log");
    let Err(e) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&gc_log)
    else {
        return true;
    };
    let reason = e
        .raw_os_error()
        .map(|code| nix::errno::Errno::from_raw(code).desc().to_string())
        .unwrap_or_else(|| e.to_string());
    let gc_log = gc_log.display();
    if release
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        < Some(4)
    {
        eprintln!("OpenJDK 64-Bit Server VM warning: Cannot open file {gc_log} due to {reason}\n");
        return true;
    }
    eprintln!("[0.004s][error][logging] Error opening log file '{gc_log}': {reason}");
    eprintln!(
        "[0.004s][error][logging] Initialization of output 'file={gc_log}' using options 'filecount=10,filesize=10485760' failed."
    );
    eprintln!(
        "Invalid -Xlog option '-Xlog:gc=info,heap*=trace,age*=debug,safepoint=info,promotion*=trace:file={gc_log}:time,uptime,pid,tid,level:filecount=10,filesize=10485760', see error log for details."
    );
    eprintln!("Error: Could not create the Java Virtual Machine.");
    eprintln!("Error: A fatal exception has occurred. Program will exit.");
    false
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Started as `scylla` (the kubelet's link in scylladb/scylla images):
    // the fake ScyllaDB node.
    let program = std::env::args().next().unwrap_or_default();
    if std::path::Path::new(&program).file_name() == Some(std::ffi::OsStr::new("scylla")) {
        return testworld::fake_scylla::process::main(args).await;
    }
    if args
        .iter()
        .any(|a| a != "-f" && a != "-R" && !a.starts_with("-D"))
    {
        eprintln!(
            "usage: fake-cassandra -f [-R] [-Dname=value]... (the configuration comes from CASSANDRA_CONF and the environment)"
        );
        return ExitCode::from(1);
    }
    if refuses_root(args.iter().any(|a| a == "-R")) {
        // bin/cassandra echoes this to stdout and exits 1.
        println!(
            "Running Cassandra as root user or group is not recommended - please start Cassandra using a different system user."
        );
        println!(
            "If you really want to force running Cassandra as root, use -R command line option."
        );
        return ExitCode::from(1);
    }
    let defines: Vec<String> = args
        .iter()
        .filter(|a| a.starts_with("-D"))
        .cloned()
        .collect();
    let config = match read_config(&defines) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ERROR [main] Fatal configuration error: {e}");
            return ExitCode::from(1);
        }
    };
    let Some(kubesim) = std::env::var("KUBESIM_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("ERROR [main] KUBESIM_URL is not set: the fake node keeps its ring in kubesim");
        return ExitCode::from(1);
    };
    let identity = match Identity::new(&config.release, config.storage_port) {
        Some(i) => i,
        None => {
            eprintln!("ERROR [main] invalid CASSANDRA_VERSION {}", config.release);
            return ExitCode::from(1);
        }
    };
    log(
        "INFO",
        &format!(
            "Cassandra version: {}; cluster {}; listen {}; broadcast {}; dc {} rack {}; heap {} (new {})",
            config.release,
            config.node.cluster_name,
            config.listen_address,
            config.node.address,
            config.node.dc,
            config.node.rack,
            config.max_heap_size.as_deref().unwrap_or("auto"),
            config.heap_newsize.as_deref().unwrap_or("auto"),
        ),
    );

    if let Some(dir) = &config.log_dir
        && !open_logs(dir, &config.release)
    {
        return ExitCode::from(1);
    }
    // DatabaseDescriptor.daemonInitialization (applyConfig of the
    // encryption options, applySslContext) comes before CassandraDaemon's
    // StartupChecks.
    let ssl = match &config.tls {
        Some(tls) => match SslState::start(tls) {
            Ok(state) => Some(Arc::new(state)),
            Err(e) => {
                // CassandraDaemon.activate's catch: stdout, the log with the
                // exception's trace, exit 3.
                let message = if e.message.is_empty() {
                    "null"
                } else {
                    &e.message
                };
                println!(
                    "Exception ({}) encountered during startup: {message}",
                    e.class
                );
                eprintln!(
                    "ERROR [main] Exception encountered during startup\n{}",
                    e.trace()
                );
                return ExitCode::from(3);
            }
        },
        None => None,
    };
    if let Err(e) = check_directories(&config.directories.all()) {
        eprintln!("ERROR [main] {e}");
        return ExitCode::from(3);
    }
    let data_dir = PathBuf::from(&config.node.data_dir);
    let marker = data_dir.join(MARKER);
    let data_dir_empty = !marker.exists();
    let mut config = config;
    match data_dir_identity(&data_dir) {
        Ok(id) => config.node.data_dir = id,
        Err(e) => {
            eprintln!(
                "ERROR [main] cannot read the data directory {}: {e}",
                data_dir.display()
            );
            return ExitCode::from(3);
        }
    }
    let ring = RingClient::new(&kubesim);
    let started = match ring
        .start(&StartRequest {
            lease: true,
            ..StartRequest::of(&config.node, &config.release, data_dir_empty)
        })
        .await
    {
        Ok(s) => s,
        Err(NodeError::Refused(r)) => {
            eprintln!(
                "ERROR [main] Exception encountered during startup: {}: {}",
                r.error_type, r.message
            );
            return ExitCode::from(3);
        }
        Err(e) => {
            eprintln!("ERROR [main] {e}");
            return ExitCode::from(1);
        }
    };
    let host_id = started["host_id"].as_str().unwrap_or_default().to_string();
    for line in started["log"].as_array().into_iter().flatten() {
        log("INFO", line.as_str().unwrap_or_default());
    }
    if let Err(e) = std::fs::write(&marker, &host_id) {
        eprintln!("ERROR [main] writing {}: {e}", marker.display());
    }
    log(
        "INFO",
        &format!(
            "Node /{} state jump to {} (host id {host_id}, {})",
            config.node.address,
            started["mode"].as_str().unwrap_or_default(),
            started["startup"]
        ),
    );

    // The StorageService MBean registers a moment after the agent answers
    // (FAKE_CASSANDRA_STARTING_MS, 300 ms by default).
    let starting = std::env::var("FAKE_CASSANDRA_STARTING_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let sstables = Arc::new(std::sync::Mutex::new(Sstables::open(
        &data_dir,
        sstables::format_of(&config),
    )));
    let fake = Arc::new(FakeNode {
        ring: ring.clone(),
        host_id: host_id.clone(),
        identity,
        storage_service_at: Instant::now() + Duration::from_millis(starting),
        policy: testworld::fake_cassandra::policy::Policy::load(config.jolokia_policy.as_deref()),
        repairs: Default::default(),
        sstables: Some(sstables.clone()),
        seeds: std::env::var("CASSANDRA_CONF").ok().map(|conf| {
            Seeds::read(
                PathBuf::from(conf).join("cassandra.yaml"),
                &config.node.address,
            )
        }),
        tls: ssl.clone(),
    });
    let server = match &config.jolokia {
        Some((host, port)) => match tokio::net::TcpListener::bind((host.as_str(), *port)).await {
            Ok(listener) => {
                log(
                    "INFO",
                    &format!("Jolokia: Agent started with URL http://{host}:{port}/jolokia/"),
                );
                Some(tokio::spawn(serve_jolokia_pooled(
                    listener,
                    fake.clone(),
                    config.jolokia_threads,
                )))
            }
            Err(e) => {
                eprintln!("ERROR [main] Jolokia: cannot bind {host}:{port}: {e}");
                let _ = ring.stop(&host_id).await;
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    // FAKE_CASSANDRA_JMX=<host:port>: a stand-in for Cassandra's local JMX
    // port (cassandra-env.sh: 7199, LOCAL_JMX=yes, so localhost only and no
    // authentication), which real nodetool uses: the same MBeans as the
    // agent's, without the agent's access policy, in Jolokia's JSON (the
    // test world has no JVM to speak RMI). Off unless set.
    let jmx = match std::env::var("FAKE_CASSANDRA_JMX")
        .ok()
        .filter(|a| !a.is_empty())
    {
        Some(address) => match tokio::net::TcpListener::bind(address.as_str()).await {
            Ok(listener) => {
                log("INFO", &format!("JMX (stand-in) listening on {address}"));
                let unrestricted = Arc::new(FakeNode {
                    policy: testworld::fake_cassandra::policy::Policy::AllowAll,
                    ..(*fake).clone()
                });
                Some(tokio::spawn(serve_jolokia(listener, unrestricted)))
            }
            Err(e) => {
                eprintln!("ERROR [main] JMX: cannot bind {address}: {e}");
                None
            }
        },
        None => None,
    };

    let fronts = match &ssl {
        Some(ssl) => tls_fronts(ssl, &config).await,
        None => Vec::new(),
    };

    let code = tokio::select! {
        stop = wait_for_signal() => match stop {
            // The JVM's exit codes: 128 + the signal.
            Stop::Term => 143,
            Stop::Interrupt => 130,
            Stop::NoHandler => 1,
        },
        reason = watch_ring(&ring, &host_id, {
            // Memtables flush as they fill; here every second, from the
            // view the lease just read. A streaming operation that failed
            // is logged once, as StorageService logs it.
            let sstables = sstables.clone();
            let mut tick = 0u64;
            let mut failure: Option<String> = None;
            move |view| {
                tick += 1;
                if tick.is_multiple_of(4) {
                    let mut sstables = sstables.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) = sstables.flush(&view.copies) {
                        eprintln!("ERROR [MemtableFlushWriter] {e}");
                    }
                }
                if view.failure.is_some() && view.failure != failure {
                    eprintln!(
                        "ERROR [StreamReceiveTask] {}",
                        view.failure.as_deref().unwrap_or_default()
                    );
                }
                failure.clone_from(&view.failure);
            }
        }) => {
            eprintln!("ERROR [main] {reason}: exiting");
            for s in [server, jmx].into_iter().flatten().chain(fronts) {
                s.abort();
            }
            return ExitCode::from(1);
        }
    };
    log("INFO", "Cassandra shutting down...");
    // StorageService's shutdown hook flushes the memtables.
    flush(&ring, &host_id, &sstables).await;
    if let Err(e) = ring.stop(&host_id).await {
        eprintln!("WARN  [StorageServiceShutdownHook] {e}");
    }
    for s in [server, jmx].into_iter().flatten().chain(fronts) {
        s.abort();
    }
    ExitCode::from(code)
}

/// The TLS fronts of an encrypting node (internode on
/// `listen_address:storage_port`, clients on
/// `rpc_address:native_transport_port`), serving what its contexts hold at
/// each connection, and the hot-reload task (`SSLFactory.initHotReloading`).
/// A port that cannot be bound is a warning: the fake does not bind them
/// without encryption either.
async fn tls_fronts(ssl: &Arc<SslState>, config: &FakeConfig) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(tls) = &config.tls else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for (side, address) in [
        (
            Side::Server,
            format!("{}:{}", config.listen_address, config.storage_port),
        ),
        (
            Side::Client,
            format!("{}:{}", tls.rpc_address, tls.native_transport_port),
        ),
    ] {
        let policy = ssl.policy(side);
        if policy == Policy::Unencrypted {
            continue;
        }
        let listener = match tls_wire::bind(&address).await {
            Ok(l) => l,
            Err(e) => {
                println!("WARN  [main] {e}: this node serves no TLS there");
                continue;
            }
        };
        let shown = listener
            .local_addr()
            .map_or(address.clone(), |a| a.to_string());
        match side {
            // InboundConnectionInitiator's line (less its nic).
            Side::Server => log(
                "INFO",
                &format!(
                    "Listening on address: (/{shown}), encryption: {}(openssl)",
                    policy.description()
                ),
            ),
            Side::Client => log(
                "INFO",
                &format!(
                    "Starting listening for CQL clients on /{shown} ({})...",
                    policy.description()
                ),
            ),
        }
        let state = ssl.clone();
        let current: Arc<dyn Fn() -> Option<tls_wire::Served> + Send + Sync> =
            Arc::new(move || state.served(side));
        let refused: Arc<dyn Fn(std::net::SocketAddr, String) + Send + Sync> = Arc::new(
            move |peer, e| match side {
                Side::Server => eprintln!(
                    "ERROR [Messaging-EventLoop-3-1] Failed to properly handshake with peer /{peer}. Closing the channel.\njavax.net.ssl.SSLHandshakeException: {e}"
                ),
                Side::Client => eprintln!(
                    "WARN  [epollEventLoopGroup-5-1] TLS handshake with /{peer} failed: {e}"
                ),
            },
        );
        tasks.push(tokio::spawn(tls_wire::serve(listener, current, refused)));
    }
    let state = ssl.clone();
    tasks.push(tokio::spawn(async move {
        let period = hot_reload_period();
        loop {
            tokio::time::sleep(period).await;
            let state = state.clone();
            let _ = tokio::task::spawn_blocking(move || state.periodic_check()).await;
        }
    }));
    tasks
}

/// Writes the sstables of what the node's data directory gained.
async fn flush(ring: &RingClient, host_id: &str, sstables: &std::sync::Mutex<Sstables>) {
    let Ok(view) = ring.view(host_id).await else {
        return;
    };
    let mut sstables = sstables.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = sstables.flush(&view.copies) {
        eprintln!("ERROR [MemtableFlushWriter] {e}");
    }
}
