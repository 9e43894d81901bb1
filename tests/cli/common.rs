//! Helpers shared by the end-to-end tests of the binary.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use testworld::kubesim::KubeSim;

/// A kube client through kubesim's kubeconfig.
pub async fn client(sim: &KubeSim) -> Client {
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig()).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
