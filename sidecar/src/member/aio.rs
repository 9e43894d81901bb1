//! ScyllaDB's Linux AIO needs, checked before it starts (issue 30). I/O at
//! the edges ([`Capacity::read`], [`wait_for_capacity`]); the arithmetic is
//! pure.
//!
//! Seastar's linux-aio reactor backend (ScyllaDB's default) sets up, on
//! every shard, kernel AIO contexts (`io_setup`) whose events count against
//! `fs.aio-max-nr`, a limit of the whole Node (the kernel's, not the
//! container's: every ScyllaDB process on the Node shares it, and
//! `fs.aio-nr` counts what is taken). Per shard (the sources read, none
//! copied):
//! - 1024 events for the storage context (`aio_storage_context::max_aio`
//!   in Seastar's reactor_backend.hh);
//! - 2 more for the reactor's own contexts (the per-shard sum
//!   "10000 + 1024 + 2", 88208 for 8 shards, that Seastar's warning prints
//!   as "requested", as quoted by projects built on Seastar);
//! - the networking control blocks, `--max-networking-io-control-blocks`:
//!   Seastar's default is 10000 (`app_template::config`), ScyllaDB's 50000
//!   (`app_cfg.max_networking_aio_io_control_blocks` in its main.cc).
//!
//! When `fs.aio-max-nr` − `fs.aio-nr` is short of that, Seastar (since
//! scylladb/scylladb#9096: "read (aio-max-nr - aio-nr) and divide by the
//! number of shards") lowers the networking blocks to what is free, with
//! the warnings "Requested AIO slots too large" and
//! "max-networking-io-control-blocks adjusted from ... to ...": the member
//! starts, taking every free event of the Node. Below the storage and
//! reactor contexts plus one networking block per shard, it cannot: it
//! exits with "Could not setup Async I/O" / "Your system does not satisfy
//! minimum AIO requirements" (scylladb/scylladb#15010), and the container
//! would restart forever. On a default Node (`fs.aio-max-nr` 65536, GKE's
//! included) the first member of two shards takes all 65536, so a second
//! member on that Node can never start. ScyllaDB's own packages raise the
//! limit (`dist/common/sysctl.d/99-scylla-aio.conf`: 30000000 since 5.0),
//! as scylla-operator's NodeConfig sysctls do on Kubernetes; nothing does
//! on a plain GKE Node.
//!
//! So before it starts ScyllaDB, the sidecar compares the free events with
//! the minimum this member needs: short, it does not start it, says why
//! (log and the member Service's [`START_REFUSED`] annotation, which the
//! controller reports) and looks again every so often, so that a Node the
//! admin fixes lets the member start without a restart. Between the
//! minimum and the full need it starts ScyllaDB and warns that it will take
//! what is left. The io_uring backend uses no AIO contexts: no check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tracing::{error, info, warn};

/// Where the kernel shows `aio-max-nr` and `aio-nr`.
pub const DEFAULT_PROC_SYS_FS: &str = "/proc/sys/fs";
/// The record of a refused start on the member Service (the contract's):
/// the controller turns it into a rack condition and a Warning Event.
pub use crds::contract::START_REFUSED;

/// Events of the storage context of one shard (Seastar's
/// `aio_storage_context::max_aio`).
pub const STORAGE_EVENTS_PER_SHARD: u64 = 1024;
/// Events of the reactor's other contexts of one shard.
pub const REACTOR_EVENTS_PER_SHARD: u64 = 2;
/// ScyllaDB's default `--max-networking-io-control-blocks` (its main.cc).
pub const SCYLLA_NETWORKING_BLOCKS: u64 = 50_000;
/// The value the guide's DaemonSet sets, as ScyllaDB's packages do
/// (99-scylla-aio.conf).
pub const RECOMMENDED_AIO_MAX_NR: u64 = 30_000_000;

/// What one ScyllaDB process will ask of the Node's AIO events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Its shards (`--smp`, or every CPU it may use).
    pub shards: u64,
    /// Its networking control blocks per shard.
    pub networking: u64,
}

impl Need {
    /// What a command line of `scylla` will need, `cpus` being the CPUs the
    /// process may use (its shards without `--smp`). None when it will use
    /// no AIO contexts (`--reactor-backend io_uring`). The last occurrence
    /// of an option counts, as ScyllaDB's parser reads a repeated one.
    pub fn of_command(command: &[String], cpus: u32) -> Option<Need> {
        let shards = option(command, "--smp")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(u64::from(cpus.max(1)));
        let networking = option(command, "--max-networking-io-control-blocks")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(SCYLLA_NETWORKING_BLOCKS);
        match option(command, "--reactor-backend") {
            Some("io_uring") => None,
            _ => Some(Need { shards, networking }),
        }
    }

    /// Below this, Seastar cannot start: the storage and reactor contexts
    /// of every shard and one networking block each.
    pub fn minimum(&self) -> u64 {
        self.shards * (STORAGE_EVENTS_PER_SHARD + REACTOR_EVENTS_PER_SHARD + 1)
    }

    /// What it asks for: with less (but at least [`Need::minimum`]) it
    /// starts with fewer networking blocks and takes every free event.
    pub fn full(&self) -> u64 {
        self.shards * (STORAGE_EVENTS_PER_SHARD + REACTOR_EVENTS_PER_SHARD + self.networking)
    }
}

/// The value of `--name value` or `--name=value`, the last one given.
fn option<'a>(command: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut words = command.iter();
    while let Some(word) = words.next() {
        if word == name {
            found = words.next().map(String::as_str);
        } else if let Some(value) = word.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            found = Some(value);
        }
    }
    found
}

/// The Node's AIO events as the kernel shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// `fs.aio-max-nr`.
    pub max: u64,
    /// `fs.aio-nr`: taken by the processes running on the Node.
    pub used: u64,
}

impl Capacity {
    /// Reads `aio-max-nr` and `aio-nr` under `dir` (/proc/sys/fs).
    pub fn read(dir: &Path) -> Result<Capacity, (PathBuf, std::io::Error)> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .and_then(|text| {
                    text.trim().parse::<u64>().map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                    })
                })
                .map_err(|e| (path, e))
        };
        Ok(Capacity {
            max: read("aio-max-nr")?,
            used: read("aio-nr")?,
        })
    }

    /// Free events.
    pub fn free(&self) -> u64 {
        self.max.saturating_sub(self.used)
    }
}

/// What the free events allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything it asks for.
    Enough,
    /// It starts with fewer networking blocks and takes every free event:
    /// no other ScyllaDB process on the Node can start after it. The
    /// message says so.
    Degraded(String),
    /// It cannot start. The message says why and what fixes it.
    Short(String),
}

/// Judges `need` against `capacity`. Pure.
pub fn judge(need: Need, capacity: Capacity) -> Verdict {
    let free = capacity.free();
    let (minimum, full) = (need.minimum(), need.full());
    let numbers = format!(
        "fs.aio-max-nr is {} and fs.aio-nr {} (the Node's ScyllaDB processes hold them), so {free} AIO events are free",
        capacity.max, capacity.used
    );
    if free < minimum {
        Verdict::Short(format!(
            "ScyllaDB cannot start on this Node: its {} shard(s) need at least {minimum} free AIO events ({full} for {} networking control blocks per shard) and {numbers}; raise fs.aio-max-nr on the Node (sysctl -w fs.aio-max-nr={RECOMMENDED_AIO_MAX_NR}, e.g. with the DaemonSet of the GKE guide) or keep one ScyllaDB member per Node (podAntiAffinity); the member starts by itself once there is room",
            need.shards, need.networking
        ))
    } else if free < full {
        Verdict::Degraded(format!(
            "ScyllaDB asks for {full} AIO events for its {} shard(s) and {numbers}: it starts with fewer networking control blocks and takes all of them, so no other ScyllaDB member can start on this Node; raise fs.aio-max-nr on the Node (sysctl -w fs.aio-max-nr={RECOMMENDED_AIO_MAX_NR})",
            need.shards
        ))
    } else {
        Verdict::Enough
    }
}

/// Where the sidecar reports, and how often it looks again.
pub struct Report<'a> {
    /// The member Services of the namespace.
    pub services: &'a Api<Service>,
    /// This member's (its Pod's name).
    pub name: &'a str,
    /// The [`START_REFUSED`] annotation the member Service carries now.
    pub recorded: Option<String>,
    /// How long between two looks at the Node's events.
    pub interval: Duration,
}

/// Returns once the Node has the free AIO events `need` cannot start
/// without; until then, says why on the log and the member Service, and
/// looks again every `report.interval`. When the kernel's files cannot be
/// read there is nothing to judge: it returns, and ScyllaDB decides.
pub async fn wait_for_capacity(dir: &Path, need: Need, report: Report<'_>) {
    let mut recorded = report.recorded;
    loop {
        match Capacity::read(dir) {
            Err((path, e)) => {
                warn!(path = %path.display(), error = %e, "cannot read the Node's AIO events: starting ScyllaDB unchecked");
                break;
            }
            Ok(capacity) => match judge(need, capacity) {
                Verdict::Enough => break,
                Verdict::Degraded(message) => {
                    warn!(free = capacity.free(), needed = need.full(), "{message}");
                    break;
                }
                Verdict::Short(message) => {
                    if recorded.as_deref() != Some(message.as_str()) {
                        error!(free = capacity.free(), needed = need.minimum(), "{message}");
                        if annotate(report.services, report.name, Some(&message)).await {
                            recorded = Some(message);
                        }
                    }
                    tokio::time::sleep(report.interval).await;
                }
            },
        }
    }
    if recorded.is_some() && annotate(report.services, report.name, None).await {
        info!("the Node has the AIO events ScyllaDB needs now: starting it");
    }
}

/// Writes (or removes, with None) [`START_REFUSED`] on the member Service;
/// whether the write was made. A failed write is retried at the next look.
async fn annotate(services: &Api<Service>, name: &str, message: Option<&str>) -> bool {
    let patch = serde_json::json!({"metadata": {"annotations": {START_REFUSED: message}}});
    match services
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            warn!(member = %name, error = %e, "recording why ScyllaDB is not started");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_need_comes_from_the_command_line() {
        let need = Need::of_command(&words("scylla --developer-mode 0 --smp 2"), 16).unwrap();
        assert_eq!(
            need,
            Need {
                shards: 2,
                networking: 50_000
            }
        );
        // Without --smp, every CPU it may use is a shard.
        assert_eq!(
            Need::of_command(&words("scylla --overprovisioned"), 4)
                .unwrap()
                .shards,
            4
        );
        // The last occurrence counts, in either spelling.
        let need = Need::of_command(
            &words("scylla --smp 8 --smp=3 --max-networking-io-control-blocks=1000"),
            1,
        )
        .unwrap();
        assert_eq!(
            need,
            Need {
                shards: 3,
                networking: 1000
            }
        );
        // An unreadable --smp or 0: every CPU.
        assert_eq!(
            Need::of_command(&words("scylla --smp x"), 2)
                .unwrap()
                .shards,
            2
        );
        assert_eq!(
            Need::of_command(&words("scylla --smp 0"), 0)
                .unwrap()
                .shards,
            1
        );
        // io_uring uses no AIO contexts.
        assert_eq!(
            Need::of_command(&words("scylla --reactor-backend io_uring"), 2),
            None
        );
        assert!(Need::of_command(&words("scylla --reactor-backend=linux-aio"), 2).is_some());
    }

    #[test]
    fn the_arithmetic_is_seastars() {
        // Seastar's own default of 10000 blocks on 8 shards: the 88208 its
        // warning prints as "requested".
        let seastar = Need {
            shards: 8,
            networking: 10_000,
        };
        assert_eq!(seastar.full(), 88_208);
        let one = Need {
            shards: 1,
            networking: SCYLLA_NETWORKING_BLOCKS,
        };
        assert_eq!(one.full(), 51_026);
        assert_eq!(one.minimum(), 1_027);
        let two = Need {
            shards: 2,
            networking: SCYLLA_NETWORKING_BLOCKS,
        };
        assert_eq!((two.minimum(), two.full()), (2_054, 102_052));
    }

    #[test]
    fn a_second_member_on_a_default_node_is_refused() {
        let need = Need {
            shards: 2,
            networking: SCYLLA_NETWORKING_BLOCKS,
        };
        let fresh = Capacity {
            max: 65_536,
            used: 0,
        };
        // The first member starts, short of its full need: it will take
        // every free event, and says so.
        let Verdict::Degraded(message) = judge(need, fresh) else {
            panic!("{:?}", judge(need, fresh))
        };
        assert!(message.contains("no other ScyllaDB member"), "{message}");
        // Seastar then holds all 65536: the second cannot start.
        let full = Capacity {
            max: 65_536,
            used: 65_536,
        };
        let Verdict::Short(message) = judge(need, full) else {
            panic!("{:?}", judge(need, full))
        };
        for part in [
            "at least 2054 free AIO events",
            "fs.aio-max-nr is 65536 and fs.aio-nr 65536",
            "so 0 AIO events are free",
            "sysctl -w fs.aio-max-nr=30000000",
            "podAntiAffinity",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        // One event short of the minimum is short; the minimum is enough
        // to start.
        let edge = |free: u64| Capacity {
            max: 65_536,
            used: 65_536 - free,
        };
        assert!(matches!(judge(need, edge(2_053)), Verdict::Short(_)));
        assert!(matches!(judge(need, edge(2_054)), Verdict::Degraded(_)));
        let enough = Capacity {
            max: 102_052 + 1_000,
            used: 1_000,
        };
        assert_eq!(judge(need, enough), Verdict::Enough);
        let one_short = Capacity {
            max: 102_051 + 1_000,
            used: 1_000,
        };
        assert!(matches!(judge(need, one_short), Verdict::Degraded(_)));
        // aio-nr above aio-max-nr (the limit lowered under running
        // processes): nothing is free.
        assert_eq!(Capacity { max: 10, used: 20 }.free(), 0);
        // A Node raised as the guide says holds many members.
        let raised = Capacity {
            max: RECOMMENDED_AIO_MAX_NR,
            used: 5 * need.full(),
        };
        assert_eq!(judge(need, raised), Verdict::Enough);
    }

    #[test]
    fn the_kernels_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Capacity::read(dir.path()).is_err());
        std::fs::write(dir.path().join("aio-max-nr"), "65536\n").unwrap();
        std::fs::write(dir.path().join("aio-nr"), "51026\n").unwrap();
        assert_eq!(
            Capacity::read(dir.path()).unwrap(),
            Capacity {
                max: 65_536,
                used: 51_026
            }
        );
        std::fs::write(dir.path().join("aio-nr"), "many\n").unwrap();
        let (path, _) = Capacity::read(dir.path()).unwrap_err();
        assert_eq!(path, dir.path().join("aio-nr"));
    }
}
