//! `kubesim serve --dir DIR [--zones a,b] [--nodes-per-zone N]`: the
//! Kubernetes API emulator as a process. Serves HTTP on 127.0.0.1, writes
//! `DIR/kubeconfig`, prints `ready` once it accepts requests, and runs until
//! SIGTERM (or SIGINT).

use std::path::PathBuf;
use std::time::Duration;
use testworld::kubesim::faults::FaultConfig;
use testworld::kubesim::{KubeSim, Options};

const USAGE: &str = "usage: kubesim serve --dir DIR [--zones a,b] [--nodes-per-zone N] [--port P] [--watch-window N] [--bookmark-interval-ms MS] [--conflict-rate R] [--error-rate R] [--throttle-rate R] [--drop-watch-rate R] [--slow-rate R] [--slow-ms MS]";

fn parse_args(args: &[String]) -> Result<(PathBuf, Options), String> {
    let mut it = args.iter();
    if it.next().map(String::as_str) != Some("serve") {
        return Err(USAGE.into());
    }
    let mut dir = None;
    let mut opts = Options::default();
    let mut faults = FaultConfig::default();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
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
            "--dir" => dir = Some(PathBuf::from(value)),
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
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    opts.faults = faults;
    let dir = dir.ok_or_else(|| format!("--dir is required\n{USAGE}"))?;
    Ok((dir, opts))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
        "kubesim: serving {} (kubeconfig {})",
        sim.url(),
        dir.join("kubeconfig").display()
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
