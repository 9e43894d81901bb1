//! Helpers shared by the end-to-end tests of the binary (the world's set-up
//! itself is `testworld::harness`).

use kube::Client;
use testworld::kubesim::KubeSim;

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
