//! Helpers shared by the end-to-end tests of the binary (the world's set-up
//! itself is `testworld::harness`).

use kube::Client;
use testworld::kubesim::KubeSim;

/// One world at a time in this test binary: each runs its controller on
/// the production metrics address (0.0.0.0:8080) of the host.
pub static ONE_WORLD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A kube client through kubesim's kubeconfig.
pub async fn client(sim: &KubeSim) -> Client {
    testworld::harness::client(sim).await.unwrap()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
