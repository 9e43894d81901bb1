//! Helpers shared by the end-to-end tests of the binary (the world's set-up
//! itself is `testworld::harness`).

use std::time::Duration;

use crds::Cluster;
use kube::Client;
use kube::api::{Api, PostParams};
use testworld::kubesim::KubeSim;

/// How many worlds of fake members run at once in this test binary
/// (`E2E_FAKE_WORLDS`, default 2): a fake world idles most of its time
/// (ring timings of hundreds of milliseconds, probes, watches), so two
/// share a CI machine's two cores beside a real world, and their fast
/// ring timings still hold; more would compete for the cores.
pub static FAKE_WORLDS: Worlds = Worlds(std::sync::LazyLock::new(|| {
    let worlds = std::env::var("E2E_FAKE_WORLDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2);
    tokio::sync::Semaphore::new(worlds)
}));

/// A bound on the worlds that run at once.
pub struct Worlds(std::sync::LazyLock<tokio::sync::Semaphore>);

impl Worlds {
    /// Waits for a world's turn; the turn ends when the permit drops.
    pub async fn lock(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.0
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }
}

/// One world of real Cassandra members at a time (tests/e2e/real*.rs):
/// three to five JVMs of about 650 MiB each, started one after the other,
/// already keep both cores of a CI machine busy. Such a world may run
/// beside [`FAKE_WORLDS`]'s.
pub static ONE_REAL_WORLD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A kube client through kubesim's kubeconfig.
pub async fn client(sim: &KubeSim) -> Client {
    testworld::harness::client(sim).await.unwrap()
}

/// A metrics address for one world's controller, of its own: port 8080
/// (the production one) on an address of the loopback interface no other
/// world of this process gets (all of 127.0.0.0/8 is local on Linux). On a
/// shared address, a world's test would read another world's controller.
pub fn own_metrics_address() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let process = std::process::id() % 250;
    format!("127.{}.{}.{}:8080", 1 + process, n / 250 % 250, 1 + n % 250)
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Creates a Cluster, retrying while the API server does not serve the
/// freshly installed CRD yet (a few hundred milliseconds); panics if it
/// never does.
pub async fn create_cluster(clusters: &Api<Cluster>, cluster: &Cluster) {
    for _ in 0..50 {
        if clusters
            .create(&PostParams::default(), cluster)
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Cluster was not created");
}

pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: the body comes whole, up to the close (an HTTP/1.1
    // server may answer in chunks, as the Jolokia agent does).
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}
