//! The benchmark's figures (`target/release/bench`, tests/src/bin/bench.rs):
//! what it measures, its goals, the table it prints, the JSON it writes
//! (the keys are an interface: issue 17), and the pure pairing of the
//! events in kubesim's logs into reaction times. Pure.

use serde_json::{Value, json};

/// p50 and p99 of a set of durations (ms), and how many there were.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub count: usize,
}

impl Percentiles {
    /// Nearest-rank percentiles (0 for an empty set).
    pub fn of(values: &[f64]) -> Percentiles {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[i.clamp(1, v.len()) - 1]
        };
        Percentiles {
            p50: rank(50.0),
            p99: rank(99.0),
            count: v.len(),
        }
    }
}

/// Everything one run of the benchmark measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// The stripped release binary.
    pub binary_size_mib: f64,
    /// The sidecar's VmRSS: mean while the database runs, the peak
    /// (VmHWM), the highest while decommissioning.
    pub sidecar_steady_mib: f64,
    pub sidecar_peak_mib: f64,
    pub sidecar_decommissioning_mib: f64,
    /// The controller's VmRSS managing 1, 100 and 1,000 clusters.
    pub controller_1_mib: f64,
    pub controller_100_mib: f64,
    pub controller_1000_mib: f64,
    /// Last member Ready → the controller's next scale-up write.
    pub scale_up_ms: Percentiles,
    /// Decommission label written on a member Service → the decommission
    /// reaching the ring through Jolokia.
    pub decommission_label_ms: Percentiles,
    /// The operator's requests (controller and sidecars) to bring up a
    /// 3-rack, 12-member cluster.
    pub bringup_reads: u64,
    pub bringup_writes: u64,
    /// Writes in a steady period with nothing to do, and its length.
    pub steady_writes: u64,
    pub steady_seconds: u64,
    /// Writes per reconcile of an unchanged cluster, and the reconciles.
    pub noop_reconcile_writes: f64,
    pub noop_reconciles: u64,
    /// 99 clusters created after the first, on hollow kubelets: until
    /// all 100 are Ready (printed beside the real control plane's, not
    /// in the JSON).
    pub hundred_ready_s: f64,
    /// 1,000 clusters created at once on hollow kubelets.
    pub first_steps_s: f64,
    pub all_ready_s: f64,
    pub controller_cpu_s: f64,
    /// Bring-up time of an N-member cluster minus N × bootstrap, per member.
    pub bringup_overhead_ms_per_member: f64,
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

impl Figures {
    /// The JSON of issue 17, exactly these keys.
    pub fn to_json(&self) -> Value {
        let p = |q: &Percentiles| json!({"p50": round(q.p50, 1), "p99": round(q.p99, 1)});
        json!({
            "binary_size_mib": round(self.binary_size_mib, 2),
            "sidecar_rss_mib": {
                "steady": round(self.sidecar_steady_mib, 2),
                "peak": round(self.sidecar_peak_mib, 2),
                "decommissioning": round(self.sidecar_decommissioning_mib, 2),
            },
            "controller_rss_mib": {
                "1": round(self.controller_1_mib, 1),
                "100": round(self.controller_100_mib, 1),
                "1000": round(self.controller_1000_mib, 1),
            },
            "reaction_ms": {
                "scale_up": p(&self.scale_up_ms),
                "decommission_label": p(&self.decommission_label_ms),
            },
            "api": {
                "bringup_reads": self.bringup_reads,
                "bringup_writes": self.bringup_writes,
                "steady_writes": self.steady_writes,
                "noop_reconcile_writes": round(self.noop_reconcile_writes, 2),
            },
            "scale_1000": {
                "first_steps_s": round(self.first_steps_s, 2),
                "all_ready_s": round(self.all_ready_s, 2),
                "controller_cpu_s": round(self.controller_cpu_s, 2),
            },
            "bringup_overhead_ms_per_member": round(self.bringup_overhead_ms_per_member, 1),
        })
    }

    /// The table: each figure, its goal, and whether it is met.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String, String, Option<bool>)> = Vec::new();
        let mut row = |name: &str, value: String, goal: &str, met: Option<bool>| {
            rows.push((name.to_string(), value, goal.to_string(), met));
        };
        row(
            "binary size",
            format!("{:.2} MiB", self.binary_size_mib),
            "<= 12 MiB",
            Some(self.binary_size_mib <= 12.0),
        );
        row(
            "sidecar RSS, steady",
            format!("{:.2} MiB", self.sidecar_steady_mib),
            "<= 10 MiB",
            Some(self.sidecar_steady_mib <= 10.0),
        );
        row(
            "sidecar RSS, peak",
            format!("{:.2} MiB", self.sidecar_peak_mib),
            "",
            None,
        );
        row(
            "sidecar RSS, decommissioning",
            format!("{:.2} MiB", self.sidecar_decommissioning_mib),
            "",
            None,
        );
        row(
            "controller RSS, 1 cluster",
            format!("{:.1} MiB", self.controller_1_mib),
            "<= 20 MiB",
            Some(self.controller_1_mib <= 20.0),
        );
        row(
            "controller RSS, 100 clusters",
            format!("{:.1} MiB", self.controller_100_mib),
            "",
            None,
        );
        row(
            "controller RSS, 1000 clusters",
            format!("{:.1} MiB", self.controller_1000_mib),
            "<= 100 MiB",
            Some(self.controller_1000_mib <= 100.0),
        );
        for (name, q) in [
            ("reaction, scale-up", &self.scale_up_ms),
            ("reaction, decommission label", &self.decommission_label_ms),
        ] {
            row(
                name,
                format!(
                    "p50 {:.1} ms, p99 {:.1} ms ({} events)",
                    q.p50, q.p99, q.count
                ),
                "p99 < 100 ms",
                Some(q.count > 0 && q.p99 < 100.0),
            );
        }
        row(
            "API, bring-up of 3 racks x 4",
            format!(
                "{} reads, {} writes",
                self.bringup_reads, self.bringup_writes
            ),
            "",
            None,
        );
        row(
            "API, steady writes",
            format!("{} in {} s", self.steady_writes, self.steady_seconds),
            "0",
            Some(self.steady_writes == 0),
        );
        row(
            "API, writes per no-op reconcile",
            format!(
                "{:.2} ({} reconciles)",
                self.noop_reconcile_writes, self.noop_reconciles
            ),
            "0",
            Some(self.noop_reconciles > 0 && self.noop_reconcile_writes == 0.0),
        );
        row(
            "1000 clusters, all first steps",
            format!("{:.2} s", self.first_steps_s),
            "<= 10 s",
            Some(self.first_steps_s <= 10.0),
        );
        row(
            "1000 clusters, all Ready",
            format!("{:.2} s", self.all_ready_s),
            "",
            None,
        );
        row(
            "1000 clusters, controller CPU",
            format!("{:.2} s", self.controller_cpu_s),
            "",
            None,
        );
        row(
            "bring-up overhead per member",
            format!("{:.1} ms", self.bringup_overhead_ms_per_member),
            "< 200 ms",
            Some(self.bringup_overhead_ms_per_member < 200.0),
        );
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let vwidth = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value, goal, met) in rows {
            let verdict = match met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "",
            };
            out.push_str(format!("{name:width$}  {value:vwidth$}  {goal:12} {verdict}").trim_end());
            out.push('\n');
        }
        out
    }
}

/// Pairs each action with the event that made it possible: for every
/// action `(key, at)` the latest cause `(key, at')` of the same key with
/// `at' <= at` that no earlier action already answered; the delays in ms.
/// Times in µs.
pub fn reactions(causes: &[(String, u64)], actions: &[(String, u64)]) -> Vec<f64> {
    let mut causes: Vec<&(String, u64)> = causes.iter().collect();
    causes.sort_by_key(|c| c.1);
    let mut actions: Vec<&(String, u64)> = actions.iter().collect();
    actions.sort_by_key(|a| a.1);
    let mut answered = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (key, at) in actions {
        let cause = causes
            .iter()
            .enumerate()
            .rev()
            .find(|(_, c)| &c.0 == key && c.1 <= *at);
        if let Some((i, c)) = cause
            && answered.insert(i)
        {
            out.push((at - c.1) as f64 / 1000.0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON has exactly the keys of issue 17, each a number.
    #[test]
    fn the_json_has_every_key_of_the_interface() {
        let expected = json!({
          "binary_size_mib": 0,
          "sidecar_rss_mib": {"steady": 0, "peak": 0, "decommissioning": 0},
          "controller_rss_mib": {"1": 0, "100": 0, "1000": 0},
          "reaction_ms": {"scale_up": {"p50": 0, "p99": 0}, "decommission_label": {"p50": 0, "p99": 0}},
          "api": {"bringup_reads": 0, "bringup_writes": 0, "steady_writes": 0, "noop_reconcile_writes": 0},
          "scale_1000": {"first_steps_s": 0, "all_ready_s": 0, "controller_cpu_s": 0},
          "bringup_overhead_ms_per_member": 0
        });
        fn same_shape(a: &Value, b: &Value, at: &str) {
            match (a, b) {
                (Value::Object(a), Value::Object(b)) => {
                    let ka: Vec<&String> = a.keys().collect();
                    let kb: Vec<&String> = b.keys().collect();
                    assert_eq!(ka, kb, "keys at {at}");
                    for (k, v) in a {
                        same_shape(v, &b[k], &format!("{at}/{k}"));
                    }
                }
                (a, b) => {
                    assert!(a.is_number(), "{at}: {a} is not a number");
                    assert!(b.is_number());
                }
            }
        }
        let figures = Figures {
            binary_size_mib: 9.87654,
            scale_up_ms: Percentiles::of(&[1.0, 2.0, 3.0]),
            bringup_writes: 17,
            ..Default::default()
        };
        let out = figures.to_json();
        same_shape(&out, &expected, "");
        assert_eq!(out["binary_size_mib"], 9.88);
        assert_eq!(out["reaction_ms"]["scale_up"]["p99"], 3.0);
        assert_eq!(out["api"]["bringup_writes"], 17);
        let table = figures.table();
        assert!(table.contains("binary size"), "{table}");
        assert!(table.contains("9.88 MiB"), "{table}");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        let p = Percentiles::of(&v);
        assert_eq!((p.p50, p.p99, p.count), (100.0, 198.0, 200));
        assert_eq!(Percentiles::of(&[]).p99, 0.0);
        assert_eq!(Percentiles::of(&[7.0]).p50, 7.0);
    }

    #[test]
    fn each_action_answers_the_latest_cause_of_its_key_once() {
        let c = |k: &str, t: u64| (k.to_string(), t);
        let causes = [c("a", 1_000), c("a", 5_000), c("b", 2_000)];
        let actions = [c("a", 6_000), c("b", 2_500), c("a", 7_000), c("c", 9_000)];
        // a@6000 answers a@5000 (1 ms); b@2500 answers b@2000 (0.5 ms);
        // a@7000 has no unanswered cause left; c has none.
        let mut r = reactions(&causes, &actions);
        r.sort_by(f64::total_cmp);
        assert_eq!(r, vec![0.5, 1.0]);
    }
}
