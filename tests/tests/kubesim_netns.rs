//! Pod networking with real processes (issue 10 part 3): every Pod has its
//! own network namespace. Two Pods serving `0.0.0.0:8080` are both Ready,
//! each through a probe that reached its own Pod, while a third with
//! nothing on 8080 stays not Ready, all with a host process on
//! `0.0.0.0:8080` that answers anything (the controller's metrics server
//! once made members Ready); the host reaches Pod IPs, Pods reach each
//! other and kubesim; a Pod's namespace and veth are gone after it is
//! deleted, the bridge and every namespace after kubesim stops. ClusterIPs
//! route from inside Pods as kube-proxy makes them (a Service's ready
//! endpoint, the new one after its Pod is replaced, a refusal when it has
//! none). And the cost: creating a Pod's network, a Pod's start-up with
//! and without its own namespace, and an update of the Service rules.

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use testworld::harness::{pods, str_at as s, until};
use testworld::kubesim::store::{DeleteOptions, WriteOptions};

#[allow(dead_code)]
mod support;
use support::{container_pid, pod_ready as ready, start_sim};

/// `curl` run in the network namespace of the process `pid` with `args`
/// (a URL last).
fn curl_in(pid: u32, args: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args(["--net", "--", "curl", "-sf", "--noproxy", "*", "-m", "3"])
        .args(args)
        .output()
        .expect("nsenter runs")
}

/// [`curl_in`] of `url`: the body, or None when nothing answered.
fn curl_from(pid: u32, url: &str) -> Option<String> {
    let out = curl_in(pid, &[url]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `curl` from the host.
fn curl(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--noproxy", "*", "-m", "3", url])
        .output()
        .expect("curl runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The namespace a process is in, by the names `ip netns` knows.
fn netns_of(pid: u32) -> String {
    let out = Command::new("ip")
        .args(["netns", "identify", &pid.to_string()])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn netns_list() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

/// The ports of a bridge (None: no such bridge).
fn bridge_ports(bridge: &str) -> Option<usize> {
    let exists = Command::new("ip")
        .args(["link", "show", "dev", bridge])
        .output()
        .unwrap()
        .status
        .success();
    exists.then(|| {
        String::from_utf8_lossy(
            &Command::new("ip")
                .args(["-o", "link", "show", "master", bridge])
                .output()
                .unwrap()
                .stdout,
        )
        .lines()
        .count()
    })
}

/// A Pod whose container serves its `www` volume (holding `<name>.txt`)
/// on `0.0.0.0:8080`, or (`serve` false) serves nothing; ready when
/// `/<name>.txt` answers on 8080.
fn pod(name: &str, serve: bool) -> Value {
    let script = if serve {
        format!(
            "echo {name} > /www/{name}.txt; exec python3 -m http.server --bind 0.0.0.0 8080 --directory /www"
        )
    } else {
        "trap 'exit 0' TERM; while :; do sleep 0.1; done".to_string()
    };
    json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "www", "emptyDir": {}}],
            "containers": [{
                "name": "web", "image": "python:3",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                "readinessProbe": {"httpGet": {"path": format!("/{name}.txt"), "port": 8080},
                    "periodSeconds": 1}
            }]
        }
    })
}

/// A host process on `0.0.0.0:8080` answering 200 to anything, as the
/// controller's metrics server would answer a probe (None when another
/// program of this machine holds the port: the host then has a listener
/// on 8080 all the same).
async fn host_server() -> Option<tokio::task::JoinHandle<()>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 8080))
        .await
        .ok()?;
    Some(tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let _ = c
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhost\n",
                    )
                    .await;
            });
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_have_their_own_network_namespaces() {
    let host = host_server().await;
    if host.is_none() {
        eprintln!("0.0.0.0:8080 is held by another program of this machine");
    }
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(2));
    })
    .await;
    let net = sim.network().expect("the sim runs");
    let bridge = net.bridge().to_string();
    let store = sim.store().clone();
    for (name, serve) in [("a", true), ("b", true), ("c", false)] {
        store
            .create(&pods(), pod(name, serve), &WriteOptions::default())
            .unwrap();
    }
    let [a, b] = ["a", "b"].map(|n| {
        let store = store.clone();
        async move {
            until(&format!("{n} ready"), 30, || {
                let p = store.get(&pods(), n).ok()?;
                ready(&p).then_some(p)
            })
            .await
        }
    });
    let (a, b) = (a.await, b.await);
    let c = until("c running", 10, || {
        let p = store.get(&pods(), "c").ok()?;
        (s(&p, "/status/phase") == "Running").then_some(p)
    })
    .await;
    let ip = |p: &Value| s(p, "/status/podIP").to_string();
    let (ip_a, ip_b, ip_c) = (ip(&a), ip(&b), ip(&c));
    for ip in [&ip_a, &ip_b, &ip_c] {
        assert!(net.contains(ip.parse().unwrap()), "{ip} on the pod network");
    }
    assert!(ip_a != ip_b && ip_b != ip_c && ip_a != ip_c);

    // Each probe reached its own Pod: the servers' logs hold only their own
    // Pod's path (a probe of a at b would have failed, and the reverse).
    let log = |p: &Value| {
        std::fs::read_to_string(
            work.path()
                .join("pods")
                .join(format!(
                    "default_{}_{}",
                    s(p, "/metadata/name"),
                    s(p, "/metadata/uid")
                ))
                .join("logs/web/0.log"),
        )
        .unwrap()
    };
    let (log_a, log_b) = (log(&a), log(&b));
    assert!(
        log_a.contains("GET /a.txt") && !log_a.contains("/b.txt"),
        "{log_a}"
    );
    assert!(
        log_b.contains("GET /b.txt") && !log_b.contains("/a.txt"),
        "{log_b}"
    );

    // The host reaches each Pod at its IP, and finds there that Pod's
    // server (both listen on 0.0.0.0:8080).
    assert_eq!(
        curl(&format!("http://{ip_a}:8080/a.txt")).as_deref(),
        Some("a\n")
    );
    assert_eq!(
        curl(&format!("http://{ip_b}:8080/b.txt")).as_deref(),
        Some("b\n")
    );
    assert_eq!(curl(&format!("http://{ip_b}:8080/a.txt")), None);
    assert_eq!(curl(&format!("http://{ip_c}:8080/")), None, "nothing on c");

    // c has nothing on 8080 and stays not Ready, though the host answers
    // on 0.0.0.0:8080.
    if host.is_some() {
        assert_eq!(
            curl("http://127.0.0.1:8080/c.txt").as_deref(),
            Some("host\n")
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = store.get(&pods(), "c").unwrap();
    assert!(!ready(&c), "c is not ready: {}", c["status"]);
    assert_eq!(c["status"]["containerStatuses"][0]["ready"], false);

    // Inside c: its own loopback (nothing on 8080, not the host's), the
    // other Pods at their IPs, kubesim at the gateway; the host's
    // loopback-only kubesim address is not reachable from a Pod.
    let pid_c = container_pid(&c);
    assert_eq!(curl_from(pid_c, "http://127.0.0.1:8080/c.txt"), None);
    assert_eq!(
        curl_from(pid_c, &format!("http://{ip_a}:8080/a.txt")).as_deref(),
        Some("a\n")
    );
    assert_eq!(
        curl_from(pid_c, &format!("http://{ip_b}:8080/b.txt")).as_deref(),
        Some("b\n")
    );
    // A Pod reaches kubesim's API at the gateway, over TLS with the
    // cluster's CA (as in-cluster clients do), and the test world's
    // endpoints beside it; not kubesim's host address.
    let api = sim.pod_api().expect("the sim runs");
    assert_eq!(api.ip(), std::net::IpAddr::from(net.gateway()));
    let ca = work.path().join("ca.crt");
    std::fs::write(&ca, sim.authority().ca_pem()).unwrap();
    let out = curl_in(
        pid_c,
        &[
            "--cacert",
            &ca.to_string_lossy(),
            "-H",
            &format!("Authorization: Bearer {}", sim.authority().admin_token()),
            &format!("https://{api}/api/v1/namespaces/default/pods/a"),
        ],
    );
    assert!(out.status.success(), "a Pod reaches kubesim's API: {out:?}");
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["status"]["podIP"],
        ip_a
    );
    let pod_url = sim.pod_url().expect("the sim runs").to_string();
    assert!(pod_url.contains(&net.gateway().to_string()), "{pod_url}");
    assert!(curl_from(pid_c, &format!("{pod_url}/sim/faults")).is_some());
    assert_eq!(
        curl_from(pid_c, &format!("{}/sim/faults", sim.sim_url())),
        None
    );

    // Each Pod in a namespace of its own, each with a port on the bridge.
    let (pid_a, pid_b) = (container_pid(&a), container_pid(&b));
    let names = [netns_of(pid_a), netns_of(pid_b), netns_of(pid_c)];
    for n in &names {
        assert!(n.starts_with("ksim-"), "{names:?}");
    }
    assert!(names[0] != names[1] && names[1] != names[2] && names[0] != names[2]);
    assert_eq!(bridge_ports(&bridge), Some(3));

    // A deleted Pod's namespace and veth go.
    store
        .delete(&pods(), "a", &DeleteOptions::default())
        .unwrap();
    until("a gone with its network", 20, || {
        (store.get(&pods(), "a").is_err()
            && !netns_list().contains(&names[0])
            && bridge_ports(&bridge) == Some(2))
        .then_some(())
    })
    .await;
    assert_eq!(curl(&format!("http://{ip_a}:8080/a.txt")), None);

    // kubesim stops: every namespace and the bridge go.
    drop(store);
    drop(sim);
    let list = netns_list();
    for n in &names {
        assert!(!list.contains(n.as_str()), "{n} left in\n{list}");
    }
    assert_eq!(bridge_ports(&bridge), None, "the bridge is gone");
    if let Some(h) = host {
        h.abort();
    }
}

/// `curl` from the network namespace of `pid`: its exit code (0, 7 when
/// the connection was refused, 28 on a timeout) and the body.
fn curl_code_from(pid: u32, url: &str) -> (i32, String) {
    let out = Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args([
            "--net",
            "--",
            "curl",
            "-s",
            "--noproxy",
            "*",
            "-m",
            "3",
            url,
        ])
        .output()
        .expect("nsenter runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn services() -> testworld::kubesim::store::Target {
    testworld::kubesim::store::Target::new("", "v1", "services", Some("default"))
}

/// A Pod serving its name at `/name.txt` on 8080 (ready when it does),
/// labelled `app: <app>`.
fn web_pod(name: &str, app: &str) -> Value {
    let mut p = pod(name, true);
    p["metadata"]["labels"] = json!({ "app": app });
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ips_reach_a_ready_endpoint_from_inside_pods() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |o| {
        o.max_grace = Some(Duration::from_secs(1))
    })
    .await;
    let store = sim.store().clone();
    let create = |target: &testworld::kubesim::store::Target, body: Value| {
        store
            .create(target, body, &WriteOptions::default())
            .expect("created")
    };
    // A client Pod a, a server Pod b-1, a Service for b (80 → 8080) and one
    // that selects nothing.
    create(&pods(), pod("a", false));
    create(&pods(), web_pod("b-1", "b"));
    let svc = |name: &str, app: &str| {
        json!({"metadata": {"name": name}, "spec": {"selector": {"app": app},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    };
    let b = create(&services(), svc("b", "b"));
    let nobody = create(&services(), svc("nobody", "nobody"));
    let cluster_ip = |svc: &Value| s(svc, "/spec/clusterIP").to_string();
    let (ip_b, ip_nobody) = (cluster_ip(&b), cluster_ip(&nobody));
    assert!(ip_b.starts_with("10.") && ip_nobody.starts_with("10."));
    let running = |name: &str| {
        let store = store.clone();
        let name = name.to_string();
        async move {
            until(&format!("{name} ready"), 30, || {
                let p = store.get(&pods(), &name).ok()?;
                (ready(&p) || (name == "a" && s(&p, "/status/phase") == "Running")).then_some(p)
            })
            .await
        }
    };
    let a = running("a").await;
    let b1 = running("b-1").await;
    let pid_a = container_pid(&a);
    let url = format!("http://{ip_b}/b-1.txt");
    let answer = until("b's ClusterIP answers from a", 10, || {
        curl_from(pid_a, &url)
    })
    .await;
    assert_eq!(answer, "b-1\n");
    // Hairpin: b-1 reaches itself through its Service. Each Pod's
    // namespace gets the new table in turn (as each node's kube-proxy
    // syncs on its own), so b-1's may lag behind a's for a moment.
    let pid_b1 = container_pid(&b1);
    let answer = until("b's ClusterIP answers from b-1 itself", 10, || {
        curl_from(pid_b1, &url)
    })
    .await;
    assert_eq!(answer, "b-1\n");
    // A Service without a ready endpoint refuses at once (no timeout).
    let began = Instant::now();
    let (code, _) = curl_code_from(pid_a, &format!("http://{ip_nobody}/"));
    assert_eq!(code, 7, "connection refused");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    // A port the Service does not have is refused too.
    let (code, _) = curl_code_from(pid_a, &format!("http://{ip_b}:81/"));
    assert_eq!(code, 7, "connection refused");

    // b-1 is replaced by b-2 (another Pod IP): while nothing is ready the
    // ClusterIP refuses, then it reaches the new Pod.
    store
        .delete(&pods(), "b-1", &DeleteOptions::default())
        .unwrap();
    until("b-1 gone", 20, || {
        store.get(&pods(), "b-1").is_err().then_some(())
    })
    .await;
    let (code, _) = curl_code_from(pid_a, &url);
    assert_eq!(code, 7, "no endpoint: refused");
    create(&pods(), web_pod("b-2", "b"));
    let b2 = running("b-2").await;
    assert_ne!(s(&b1, "/status/podIP"), s(&b2, "/status/podIP"));
    let url = format!("http://{ip_b}/b-2.txt");
    let answer = until("b's ClusterIP reaches b-2", 10, || curl_from(pid_a, &url)).await;
    assert_eq!(answer, "b-2\n");
}

/// The cost of an update of the Service rules: one nft transaction that
/// replaces the table, per Pod namespace, for a world of 10 and of 200
/// Service ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_of_a_cluster_ip_update() {
    use testworld::kubesim::sim::proxy;
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |_| {}).await;
    let net = sim.network().expect("the sim runs");
    let pods_nets: Vec<_> = (0..5)
        .map(|i| {
            let ip = std::net::Ipv4Addr::from(u32::from(net.gateway()) + 100 + i);
            net.add_pod(ip).expect("a pod network")
        })
        .collect();
    let world = |n: u32| {
        let services: Vec<Value> = (0..n)
            .map(|i| {
                json!({"metadata": {"namespace": "db", "name": format!("m-{i}")},
                    "spec": {"clusterIP": format!("10.96.{}.{}", i / 200, i % 200 + 2),
                        "ports": [{"name": "gossip", "port": 7000}]}})
            })
            .collect();
        let endpoints: Vec<Value> = (0..n)
            .map(|i| {
                json!({"metadata": {"namespace": "db", "name": format!("m-{i}")},
                    "subsets": [{"addresses": [{"ip": format!("10.244.0.{}", i % 250 + 2)}],
                        "ports": [{"name": "gossip", "port": 7000}]}]})
            })
            .collect();
        proxy::ruleset(&services, &endpoints)
    };
    let mut figures = Vec::new();
    for n in [10, 200] {
        let script = world(n);
        let began = Instant::now();
        for p in &pods_nets {
            proxy::apply(&p.path(), &script).expect("the rules load");
        }
        let each = began.elapsed() / pods_nets.len() as u32;
        figures.push(format!("{n} Service ports: {each:?} per Pod namespace"));
        // What was loaded is what routes: the table holds every Service.
        let listed = Command::new("nsenter")
            .arg(format!("--net={}", pods_nets[0].path().display()))
            .args(["nft", "list", "map", "ip", "kubesim", "services"])
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert_eq!(listed.matches("goto svc-").count(), n as usize, "{listed}");
        assert!(each < Duration::from_millis(500), "{each:?}");
    }
    eprintln!("ClusterIP update: {}", figures.join("; "));
}

/// The cost of a Pod's own network: creating it (two `ip` batches), and a
/// Pod's start-up (created → container running) with its own namespace
/// and with `hostNetwork` (the kubelet's path before namespaces).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_of_a_pods_network() {
    let work = tempfile::tempdir().unwrap();
    let sim = start_sim(work.path(), &["a"], |_| {}).await;
    let net = sim.network().expect("the sim runs");
    let n = 10;
    let began = Instant::now();
    let made: Vec<_> = (0..n)
        .map(|i| {
            let ip = std::net::Ipv4Addr::from(u32::from(net.gateway()) + 100 + i);
            net.add_pod(ip).expect("a pod network")
        })
        .collect();
    let create = began.elapsed() / n;
    let began = Instant::now();
    drop(made);
    let remove = began.elapsed() / n;

    let store = sim.store().clone();
    let startup = |host_network: bool| {
        let store = store.clone();
        async move {
            let mut total = Duration::ZERO;
            for i in 0..5 {
                let name = format!("p-{host_network}-{i}");
                let began = Instant::now();
                store
                    .create(
                        &pods(),
                        json!({"metadata": {"name": name}, "spec": {
                            "hostNetwork": host_network,
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "c", "image": "busybox",
                                "command": ["/bin/sh", "-c", "exec sleep 60"]}]}}),
                        &WriteOptions::default(),
                    )
                    .unwrap();
                until("running", 20, || {
                    let p = store.get(&pods(), &name).ok()?;
                    p.pointer("/status/containerStatuses/0/state/running")
                        .is_some()
                        .then_some(())
                })
                .await;
                total += began.elapsed();
                store
                    .delete(&pods(), &name, &DeleteOptions::default())
                    .unwrap();
            }
            total / 5
        }
    };
    let host = startup(true).await;
    let own = startup(false).await;
    eprintln!(
        "pod network: create {create:?}, remove {remove:?}; pod start-up: hostNetwork {host:?}, own namespace {own:?}"
    );
    // Generous bounds on a shared 2-core machine: the network must stay a
    // small part of a Pod's start.
    assert!(create < Duration::from_millis(200), "{create:?}");
    assert!(
        own < host + Duration::from_millis(500),
        "{own:?} vs {host:?}"
    );
}

/// The names `ip` knows that a kubesim process made (bridges and veths by
/// `ip link`, namespaces by `ip netns`).
fn made_by(pid: u32) -> Vec<String> {
    let links = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .filter_map(|l| l.split(": ").nth(1))
    .map(|n| n.split('@').next().unwrap_or(n).to_string())
    .filter(|n| n.starts_with(&format!("ksb{pid:x}-")) || n.starts_with(&format!("ksv{pid:x}-")))
    .collect::<Vec<_>>();
    let spaces = netns_list()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("ksim-{pid}-")))
        .map(str::to_string)
        .collect::<Vec<_>>();
    links.into_iter().chain(spaces).collect()
}

/// Starts `kubesim serve` with the sim and waits for a Pod's network.
async fn serve_with_a_pod(dir: &std::path::Path) -> std::process::Child {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["serve", "--dir"])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubesim starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::default_namespaced(kube::Client::try_from(cfg).unwrap());
    let pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "command": ["sleep", "600"]}]}}))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    let pid = child.id();
    until("the pod's namespace", 20, || {
        let made = made_by(pid);
        (made.iter().any(|n| n.starts_with("ksim-")) && made.len() == 3).then_some(())
    })
    .await;
    child
}

/// `kubesim serve` removes its network on SIGTERM; after a SIGKILL the next
/// kubesim removes what the dead one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubesim_processes_leave_no_network_behind() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut first = serve_with_a_pod(d1.path()).await;
    let pid1 = first.id();
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(
        made_by(pid1).len(),
        3,
        "a SIGKILL leaves the bridge, veth and namespace"
    );

    let mut second = serve_with_a_pod(d2.path()).await;
    let pid2 = second.id();
    assert_eq!(
        made_by(pid1),
        Vec::<String>::new(),
        "the dead kubesim's network is cleaned"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid2 as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(second.wait().unwrap().success());
    assert_eq!(
        made_by(pid2),
        Vec::<String>::new(),
        "SIGTERM removes it all"
    );
}
