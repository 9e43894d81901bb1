//! `kubesim serve --dir DIR [--zones a,b] [--nodes-per-zone N]`: the
//! Kubernetes API emulator as a process. Serves HTTPS on 127.0.0.1, writes
//! `DIR/kubeconfig` (an admin's: the CA and an admin token) and `DIR/sim-url`
//! (the test world's plain-HTTP endpoints, `/sim/...`), prints `ready` once
//! it accepts requests, and runs until
//! SIGTERM (or SIGINT). The simulated cluster runs too (its files under
//! `DIR/sim`; its flags are `testworld::kubesim::sim::FLAGS`).
//!
//! `kubesim ring [--url SIM_URL | --dir DIR] [--cluster NAME] [--check]`:
//! prints the fake Cassandra ring of a running kubesim (of cluster NAME,
//! each cluster has its own; the first by default) like `nodetool
//! status`; with
//! `--check`, also the data check, exiting 1 when any key has fewer live
//! copies than its replication factor (the keys are named); with
//! `--gossip`, also each running node's own (lagging) view: whom it sees UP
//! and DOWN, at which gossip generation.
//!
//! `kubesim node recreate NAME [--url URL | --dir DIR]`: GKE auto-repair,
//! the Node re-created under its name on a new machine with empty local
//! SSDs behind its unchanged PVs. `kubesim node wipe-disk NAME INDEX
//! [--url URL | --dir DIR]`: one local SSD of a live Node comes back empty.
//! `kubesim node unreachable NAME [--freeze]`: the Node's kubelet is cut
//! off from the API server (with `--freeze`, its Pods' processes are
//! stopped too, as on a hung machine); `kubesim node not-ready NAME`: its
//! kubelet posts `Ready=False`; `kubesim node reachable NAME`: healthy
//! again (each with `--url URL | --dir DIR`).

use std::path::PathBuf;
use std::time::Duration;
use testworld::kubesim::faults::FaultConfig;
use testworld::kubesim::{KubeSim, Options};

const USAGE: &str = "usage: kubesim serve --dir DIR [--zones a,b] [--nodes-per-zone N] [--port P] [--watch-window N] [--bookmark-interval-ms MS] [--conflict-rate R] [--error-rate R] [--throttle-rate R] [--drop-watch-rate R] [--slow-rate R] [--slow-ms MS] [sim flags: see testworld::kubesim::sim::FLAGS]";

fn parse_args(args: &[String]) -> Result<(PathBuf, Options), String> {
    let mut it = args.iter();
    if it.next().map(String::as_str) != Some("serve") {
        return Err(USAGE.into());
    }
    let mut dir = None;
    let mut opts = Options::default();
    let mut faults = FaultConfig::default();
    let mut sim = testworld::kubesim::sim::Flags::default();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        if testworld::kubesim::sim::Flags::is_switch(&flag) {
            sim.take(&flag, "")?;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?
                .clone(),
        };
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        let int = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--dir" => {
                dir = Some(std::path::absolute(&value).unwrap_or_else(|_| PathBuf::from(&value)))
            }
            "--zones" => {
                opts.zones = value
                    .split(',')
                    .filter(|z| !z.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "--nodes-per-zone" => opts.nodes_per_zone = int(&value)? as usize,
            "--port" => opts.port = int(&value)? as u16,
            "--watch-window" => opts.watch_window = int(&value)? as usize,
            "--bookmark-interval-ms" => {
                opts.bookmark_interval = Duration::from_millis(int(&value)?)
            }
            "--conflict-rate" => faults.conflict_rate = num(&value)?,
            "--error-rate" => faults.error_rate = num(&value)?,
            "--throttle-rate" => faults.throttle_rate = num(&value)?,
            "--drop-watch-rate" => {
                faults.drop_watch_rate = num(&value)?;
                if faults.drop_watch_after_ms == 0 {
                    faults.drop_watch_after_ms = 2000;
                }
            }
            "--slow-rate" => faults.slow_rate = num(&value)?,
            "--slow-ms" => faults.slow_ms = int(&value)?,
            other => {
                if !sim.take(other, &value)? {
                    return Err(format!("unknown flag {other}\n{USAGE}"));
                }
            }
        }
    }
    opts.faults = faults;
    let dir = dir.ok_or_else(|| format!("--dir is required\n{USAGE}"))?;
    opts.sim = sim.options(&dir);
    Ok((dir, opts))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("ring") {
        return ring_command(&args[1..]).await;
    }
    if args.first().map(String::as_str) == Some("node") {
        return node_command(&args[1..]).await;
    }
    let (dir, opts) = match parse_args(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("kubesim: creating {}: {e}", dir.display());
        return std::process::ExitCode::FAILURE;
    }
    let sim = match KubeSim::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubesim: starting: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Err(e) = sim.write_kubeconfig(&dir) {
        eprintln!("kubesim: writing the kubeconfig: {e}");
        return std::process::ExitCode::FAILURE;
    }
    eprintln!(
        "kubesim: serving {} (kubeconfig {}; the test world's endpoints at {}, also in {})",
        sim.url(),
        dir.join("kubeconfig").display(),
        sim.sim_url(),
        dir.join("sim-url").display()
    );
    println!("ready");
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubesim: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    sim.stop();
    std::process::ExitCode::SUCCESS
}

const RING_USAGE: &str =
    "usage: kubesim ring [--url URL | --dir DIR] [--cluster NAME] [--check] [--gossip]";

/// The test world's URL that `serve` wrote to `DIR/sim-url`.
fn url_of_dir(dir: &str) -> Result<String, String> {
    let path = PathBuf::from(dir).join("sim-url");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Some(text.trim().to_string())
        .filter(|u| !u.is_empty())
        .ok_or_else(|| format!("{} names no URL", path.display()))
}

/// What `kubesim ring` shows.
struct RingArgs {
    url: String,
    /// `cluster=NAME` or empty.
    cluster: String,
    check: bool,
    gossip: bool,
}

fn parse_ring_args(args: &[String]) -> Result<RingArgs, String> {
    let mut url = None;
    let mut cluster = String::new();
    let mut check = false;
    let mut gossip = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (flag.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value\n{RING_USAGE}"))
        };
        match flag {
            "--url" => url = Some(value()?),
            "--dir" => url = Some(url_of_dir(&value()?)?),
            "--check" => check = true,
            "--gossip" => gossip = true,
            "--cluster" => cluster = format!("cluster={}", value()?),
            other => return Err(format!("unknown flag {other}\n{RING_USAGE}")),
        }
    }
    let url = url.ok_or_else(|| format!("--url or --dir is required\n{RING_USAGE}"))?;
    Ok(RingArgs {
        url: url.trim_end_matches('/').to_string(),
        cluster,
        check,
        gossip,
    })
}

const NODE_USAGE: &str = "usage: kubesim node recreate NAME [--url URL | --dir DIR]\n       kubesim node wipe-disk NAME INDEX [--url URL | --dir DIR]\n       kubesim node unreachable NAME [--freeze] [--url URL | --dir DIR]\n       kubesim node not-ready NAME [--url URL | --dir DIR]\n       kubesim node reachable NAME [--url URL | --dir DIR]";

/// The `/sim/nodes/...` path and the server of a `kubesim node` command.
fn parse_node_args(args: &[String]) -> Result<(String, String), String> {
    let mut url = None;
    let mut freeze = false;
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--freeze" {
            freeze = true;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value\n{NODE_USAGE}"))
        };
        match flag {
            "--url" => url = Some(value()?),
            "--dir" => url = Some(url_of_dir(&value()?)?),
            f if f.starts_with("--") => return Err(format!("unknown flag {f}\n{NODE_USAGE}")),
            _ => words.push(arg.clone()),
        }
    }
    let path = match words.as_slice() {
        [cmd, name] if cmd == "recreate" && !freeze => format!("nodes/{name}/recreate"),
        [cmd, name] if cmd == "unreachable" => {
            format!("nodes/{name}/unreachable?freeze={freeze}")
        }
        [cmd, name] if (cmd == "not-ready" || cmd == "reachable") && !freeze => {
            format!("nodes/{name}/{cmd}")
        }
        [cmd, name, index] if cmd == "wipe-disk" && !freeze => {
            let i: usize = index
                .parse()
                .map_err(|_| format!("INDEX must be a number\n{NODE_USAGE}"))?;
            format!("nodes/{name}/disks/{i}/wipe")
        }
        _ => return Err(NODE_USAGE.to_string()),
    };
    let url = url.ok_or_else(|| format!("--url or --dir is required\n{NODE_USAGE}"))?;
    Ok((format!("{}/sim/{path}", url.trim_end_matches('/')), path))
}

async fn node_command(args: &[String]) -> std::process::ExitCode {
    let (url, _) = match parse_node_args(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let answer = match reqwest::Client::builder().no_proxy().build() {
        Ok(c) => c.post(&url).send().await,
        Err(e) => {
            eprintln!("kubesim node: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match answer {
        Ok(resp) => {
            let ok = resp.status().is_success();
            let text = resp.text().await.unwrap_or_default();
            if ok {
                println!("{text}");
                std::process::ExitCode::SUCCESS
            } else {
                eprintln!("kubesim node: {text}");
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("kubesim node: POST {url}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn get_text(client: &reqwest::Client, url: &str) -> Result<(u16, String), String> {
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    Ok((status, text))
}

async fn ring_command(args: &[String]) -> std::process::ExitCode {
    let RingArgs {
        url,
        cluster,
        check,
        gossip,
    } = match parse_ring_args(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let client = match reqwest::Client::builder().no_proxy().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubesim ring: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // The ring's status, then (--gossip) each node's view: printed, or
    // what failed.
    let mut pages = vec![format!("{url}/sim/ring/status?{cluster}")];
    if gossip {
        pages.push(format!("{url}/sim/ring/gossip?format=text&{cluster}"));
    }
    for (i, page) in pages.iter().enumerate() {
        match get_text(&client, page).await {
            Ok((200, text)) => {
                if i > 0 {
                    println!();
                }
                print!("{text}");
            }
            Ok((status, text)) => {
                eprintln!("kubesim ring: {status}: {text}");
                return std::process::ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("kubesim ring: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    if !check {
        return std::process::ExitCode::SUCCESS;
    }
    match get_text(
        &client,
        &format!("{url}/sim/ring/check?format=text&{cluster}"),
    )
    .await
    {
        Ok((status, text)) => {
            println!();
            print!("{text}");
            if status == 200 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("kubesim ring: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
