//! The progress of a scheduled repair's cycle, as its marker on the data
//! volume holds it (`markers::repair_cycle_marker`): the cycle, each
//! (keyspace, subrange) repaired in it, and when each keyspace's repair
//! completed. Rewritten whole after each subrange; read back at the next
//! request: the same cycle resumes with what is left, another starts
//! afresh. The subranges are matched against the ones the ring gives now:
//! should the ring have changed since (a member added), what no longer
//! matches is repaired again (slower, never wrong). Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::ring::Subrange;

/// A cycle's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cycle {
    /// The request's cycle (RFC 3339), as the controller names it.
    pub cycle: String,
    /// The (keyspace, subrange) pairs repaired.
    pub done: BTreeSet<(String, Subrange)>,
    /// Per keyspace, when its last subrange was repaired (RFC 3339).
    pub finished: BTreeMap<String, String>,
}

impl Cycle {
    /// A cycle that starts now: nothing repaired.
    pub fn new(cycle: &str) -> Cycle {
        Cycle {
            cycle: cycle.to_string(),
            ..Cycle::default()
        }
    }

    /// The progress of `cycle` the marker's text holds: its own when it
    /// is of that cycle, none otherwise (a new cycle, or no marker).
    pub fn resume(text: Option<&str>, cycle: &str) -> Cycle {
        text.map(Cycle::parse)
            .filter(|c| c.cycle == cycle)
            .unwrap_or_else(|| Cycle::new(cycle))
    }

    /// `cycle <time>`, then `done <keyspace> <start>:<end>` and `finished
    /// <keyspace> <time>` per line.
    pub fn to_text(&self) -> String {
        let mut text = format!("cycle {}\n", self.cycle);
        for (keyspace, range) in &self.done {
            text.push_str(&format!("done {keyspace} {range}\n"));
        }
        for (keyspace, at) in &self.finished {
            text.push_str(&format!("finished {keyspace} {at}\n"));
        }
        text
    }

    /// Read back; lines it cannot read are left out (a subrange then is
    /// repaired again).
    pub fn parse(text: &str) -> Cycle {
        let mut cycle = Cycle::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("cycle"), Some(at), None, None) => cycle.cycle = at.to_string(),
                (Some("done"), Some(keyspace), Some(range), None) => {
                    if let Some(range) = Subrange::parse(range) {
                        cycle.done.insert((keyspace.to_string(), range));
                    }
                }
                (Some("finished"), Some(keyspace), Some(at), None) => {
                    cycle.finished.insert(keyspace.to_string(), at.to_string());
                }
                _ => {}
            }
        }
        cycle
    }

    /// What is left of `plan` (in its order).
    pub fn left<'a>(&self, plan: &'a [(String, Subrange)]) -> Vec<&'a (String, Subrange)> {
        plan.iter().filter(|p| !self.done.contains(*p)).collect()
    }

    /// How many of `plan` are repaired.
    pub fn done_of(&self, plan: &[(String, Subrange)]) -> u64 {
        plan.iter().filter(|p| self.done.contains(*p)).count() as u64
    }

    /// Records a repaired subrange at `now`; a keyspace whose every
    /// subrange of `plan` is now repaired is finished at `now`.
    pub fn complete(
        &mut self,
        keyspace: &str,
        range: Subrange,
        plan: &[(String, Subrange)],
        now: &str,
    ) {
        self.done.insert((keyspace.to_string(), range));
        let all = plan
            .iter()
            .filter(|(k, _)| k == keyspace)
            .all(|p| self.done.contains(p));
        if all {
            self.finished
                .entry(keyspace.to_string())
                .or_insert_with(|| now.to_string());
        }
    }

    /// The keyspaces of `plan` whose every subrange is repaired, in the
    /// plan's order.
    pub fn keyspaces_done(&self, plan: &[(String, Subrange)]) -> Vec<String> {
        let mut keyspaces: Vec<String> = Vec::new();
        for (keyspace, _) in plan {
            if !keyspaces.contains(keyspace) {
                keyspaces.push(keyspace.clone());
            }
        }
        keyspaces
            .into_iter()
            .filter(|k| {
                plan.iter()
                    .filter(|(p, _)| p == k)
                    .all(|p| self.done.contains(p))
            })
            .collect()
    }
}

/// Every keyspace's subranges, keyspace by keyspace: what a cycle repairs.
pub fn plan(keyspaces: &[String], subranges: &[Subrange]) -> Vec<(String, Subrange)> {
    keyspaces
        .iter()
        .flat_map(|k| subranges.iter().map(move |r| (k.clone(), *r)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: &str = "2026-11-27T00:00:00Z";
    const C2: &str = "2026-11-28T00:00:00Z";

    fn r(start: i64, end: i64) -> Subrange {
        Subrange { start, end }
    }

    /// The marker reads back as written; a marker of another cycle, none,
    /// or junk leaves nothing done: a new cycle starts afresh.
    #[test]
    fn the_marker_reads_back_and_a_new_cycle_starts_afresh() {
        let keyspaces = vec!["ks".to_string(), "system_auth".to_string()];
        let ranges = [r(i64::MIN, -5), r(-5, 10)];
        let plan = plan(&keyspaces, &ranges);
        assert_eq!(plan.len(), 4);
        let mut cycle = Cycle::new(C1);
        cycle.complete("ks", ranges[0], &plan, "t1");
        assert_eq!(cycle.keyspaces_done(&plan), Vec::<String>::new());
        cycle.complete("ks", ranges[1], &plan, "t2");
        assert_eq!(cycle.keyspaces_done(&plan), vec!["ks".to_string()]);
        assert_eq!(cycle.finished.get("ks").map(String::as_str), Some("t2"));
        let text = cycle.to_text();
        assert_eq!(
            text,
            "cycle 2026-11-27T00:00:00Z\n\
             done ks -9223372036854775808:-5\n\
             done ks -5:10\n\
             finished ks t2\n"
        );
        assert_eq!(Cycle::parse(&text), cycle);
        assert_eq!(Cycle::resume(Some(&text), C1), cycle);
        // The subranges left, in the plan's order.
        assert_eq!(
            cycle.left(&plan),
            vec![
                &("system_auth".to_string(), ranges[0]),
                &("system_auth".to_string(), ranges[1])
            ]
        );
        assert_eq!(cycle.done_of(&plan), 2);
        // Another cycle, no marker, junk: afresh.
        assert_eq!(Cycle::resume(Some(&text), C2), Cycle::new(C2));
        assert_eq!(Cycle::resume(None, C1), Cycle::new(C1));
        assert_eq!(
            Cycle::resume(Some("garbage\ndone ks 5:1\n"), C1),
            Cycle::new(C1)
        );
        // A cut-short line is left out, the rest kept.
        let cut = "cycle 2026-11-27T00:00:00Z\ndone ks -5:10\ndone system_auth -9";
        let resumed = Cycle::resume(Some(cut), C1);
        assert_eq!(resumed.done.len(), 1);
        assert_eq!(resumed.left(&plan).len(), 3);
    }

    /// The ring changed since the marker was written: the subranges that
    /// no longer match are repaired again, those that still do are not.
    #[test]
    fn subranges_of_another_ring_are_repaired_again() {
        let keyspaces = vec!["ks".to_string()];
        let before = plan(&keyspaces, &[r(0, 10), r(10, 20)]);
        let mut cycle = Cycle::new(C1);
        for (k, range) in before.clone() {
            cycle.complete(&k, range, &before, "t");
        }
        let after = plan(&keyspaces, &[r(0, 10), r(10, 15), r(15, 20)]);
        assert_eq!(cycle.done_of(&after), 1);
        assert_eq!(cycle.left(&after).len(), 2);
        assert!(cycle.keyspaces_done(&after).is_empty());
    }
}
