//! A client that keeps writing while operations run: one key every
//! `interval` into a keyspace of one cluster's ring, at a consistency
//! level, as an application's driver would, counting the writes that
//! succeed and those that fail (UnavailableException: fewer live replicas
//! than the level needs, the pending ones included), so that a test can
//! assert that a scale-up, a decommission or a replacement cost no write.
//! I/O: a task over the ring service.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::ring_service::RingService;
use crate::ring::Consistency;

/// What the writer saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterReport {
    pub written: u64,
    pub failed: u64,
    /// The distinct errors a client got, in order.
    pub errors: Vec<String>,
    /// The keys written (`<prefix><n>`), for the data check.
    pub keys: Vec<String>,
}

#[derive(Debug, Default)]
struct Counts {
    written: AtomicU64,
    failed: AtomicU64,
    seen: Mutex<WriterReport>,
}

/// A running background writer; [`Writer::stop`] ends it with its report.
#[derive(Debug)]
pub struct Writer {
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl Writer {
    /// Starts writing `<prefix><n>` keys into `keyspace` of `cluster`'s
    /// ring (the world's first ring when None) every `interval`.
    pub fn start(
        service: Arc<RingService>,
        cluster: Option<String>,
        keyspace: &str,
        prefix: &str,
        consistency: Consistency,
        interval: Duration,
    ) -> Writer {
        let counts = Arc::new(Counts::default());
        let (keyspace, prefix, c) = (keyspace.to_string(), prefix.to_string(), counts.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for n in 0u64.. {
                tick.tick().await;
                let key = format!("{prefix}{n}");
                let write = |r: &mut crate::ring::Ring| r.write(&keyspace, &key, consistency);
                let result = match &cluster {
                    Some(name) => service
                        .with_cluster(name, write)
                        .unwrap_or(Err(crate::ring::RingError::Unavailable { consistency })),
                    None => service.with(write),
                };
                let mut seen = c.seen.lock().unwrap_or_else(|e| e.into_inner());
                match result {
                    Ok(()) => {
                        c.written.fetch_add(1, Ordering::Relaxed);
                        seen.keys.push(key);
                    }
                    Err(e) => {
                        c.failed.fetch_add(1, Ordering::Relaxed);
                        let e = e.to_string();
                        if !seen.errors.contains(&e) {
                            seen.errors.push(e);
                        }
                    }
                }
            }
        });
        Writer { counts, task }
    }

    /// The counts so far.
    pub fn report(&self) -> WriterReport {
        let seen = self.counts.seen.lock().unwrap_or_else(|e| e.into_inner());
        WriterReport {
            written: self.counts.written.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            errors: seen.errors.clone(),
            keys: seen.keys.clone(),
        }
    }

    /// Stops writing; the final report.
    pub fn stop(self) -> WriterReport {
        self.task.abort();
        self.report()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{NodeConfig, Options, Replication};

    #[tokio::test]
    async fn counts_writes_and_the_failures_a_client_sees() {
        let service = Arc::new(RingService::new(Options::default()));
        let seed = NodeConfig::new("c", "10.0.0.1", "dc1", "r1", &["10.0.0.1"], "/d1");
        let host = service.with(|r| r.start(&seed)).expect("starts").host_id;
        service
            .with(|r| r.create_keyspace("ks", Replication::simple(1)))
            .unwrap();
        let writer = Writer::start(
            service.clone(),
            None,
            "ks",
            "bg-",
            Consistency::One,
            Duration::from_millis(5),
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        let before = writer.report();
        assert!(before.written > 0 && before.failed == 0, "{before:?}");
        service.with(|r| r.kill(&host)).unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let after = writer.stop();
        assert!(after.failed > 0, "the only replica is down: {after:?}");
        assert_eq!(
            after.errors,
            ["Cannot achieve consistency level ONE".to_string()]
        );
        assert_eq!(after.keys.len() as u64, after.written);
    }
}
