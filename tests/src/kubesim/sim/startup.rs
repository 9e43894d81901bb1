//! Startup probes as the kubelet runs them: while a container has a
//! `startupProbe` that has not succeeded, its status says `started:
//! false` and its liveness and readiness probes do not run; the first
//! success starts them; `failureThreshold` failures in a row (one every
//! `periodSeconds`, after `initialDelaySeconds`) kill the container, which
//! restarts per the Pod's `restartPolicy`, as a liveness failure does.
//! Periods and delays are capped by the sim's `max_probe_period`. I/O.

use super::probes::{self, Target};
use serde_json::Value;
use std::time::Duration;

/// The probe's timing with the sim's cap on periods and delays.
pub fn capped(probe: &Value, cap: Option<Duration>) -> probes::Timing {
    let mut timing = probes::timing(probe);
    if let Some(cap) = cap {
        timing.period = timing.period.min(cap);
        timing.initial_delay = timing.initial_delay.min(cap);
    }
    timing
}

/// Runs a startup probe until it succeeds (true) or fails
/// `failureThreshold` times in a row (false).
pub async fn passes(probe: &Value, target: &Target, cap: Option<Duration>) -> bool {
    let timing = capped(probe, cap);
    tokio::time::sleep(timing.initial_delay).await;
    let mut failures = 0;
    loop {
        if probes::run(probe, target, timing.timeout).await {
            return true;
        }
        failures += 1;
        if failures >= timing.failure_threshold {
            return false;
        }
        tokio::time::sleep(timing.period).await;
    }
}
