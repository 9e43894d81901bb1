//! The reloader's decisions, pure and clock-free (the caller passes the
//! time): what a file's new content means ([`WatchedFile`]), when a burst of
//! changes has settled ([`Debouncer`]), and which processes a change still
//! has to reach ([`Delivery`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::procs::Process;

/// What reading a watched file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Content(Vec<u8>),
    /// Missing or unreadable (the reason is for the log).
    Absent(String),
}

/// What an observation means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The first content ever seen: the baseline, never signalled.
    First,
    /// Same content as the previous read (timestamps do not matter).
    Unchanged,
    /// Different content from the previous read (possibly back to the
    /// delivered one: [`WatchedFile::differs`] decides).
    Changed,
    /// The file was there and is gone (or unreadable) now.
    Vanished,
    /// Still not there.
    StillAbsent,
}

/// One watched file: the content the signalled processes are assumed to
/// have (`delivered`) and the content last read (`current`).
///
/// A file missing at start is waited for, and its first content becomes the
/// baseline without a signal. A file that disappears later sends nothing
/// (there is no new configuration to reload) and keeps its delivered
/// content: when it comes back, it counts as a change only if its content
/// differs from that.
#[derive(Debug, Default)]
pub struct WatchedFile {
    delivered: Option<Vec<u8>>,
    current: Option<Vec<u8>>,
}

impl WatchedFile {
    pub fn observe(&mut self, observed: Observed) -> Seen {
        match observed {
            Observed::Content(content) => {
                if self.delivered.is_none() {
                    self.delivered = Some(content.clone());
                    self.current = Some(content);
                    Seen::First
                } else if self.current.as_ref() == Some(&content) {
                    Seen::Unchanged
                } else {
                    self.current = Some(content);
                    Seen::Changed
                }
            }
            Observed::Absent(_) => {
                if self.current.take().is_some() {
                    Seen::Vanished
                } else {
                    Seen::StillAbsent
                }
            }
        }
    }

    /// Whether the current content differs from the delivered one (an
    /// absent file never does).
    pub fn differs(&self) -> bool {
        matches!((&self.current, &self.delivered), (Some(c), Some(d)) if c != d)
    }

    /// The current content is now the delivered one.
    pub fn commit(&mut self) {
        if let Some(c) = &self.current {
            self.delivered = Some(c.clone());
        }
    }

    pub fn current(&self) -> Option<&[u8]> {
        self.current.as_deref()
    }
}

/// Trailing-edge debounce: fires once the files have been quiet for `quiet`
/// since the last change, or at the latest `max_delay` after the first change
/// of a burst (so that a file rewritten without pause still gets through).
#[derive(Debug)]
pub struct Debouncer {
    quiet: Duration,
    max_delay: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Debouncer {
    pub fn new(quiet: Duration, max_delay: Duration) -> Self {
        Debouncer {
            quiet,
            max_delay: max_delay.max(quiet),
            first: None,
            last: None,
        }
    }

    /// A change was seen at `now`.
    pub fn change(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the pending burst is due, if there is one.
    pub fn deadline(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        Some((last + self.quiet).min(first + self.max_delay))
    }

    /// Whether the pending burst is due at `now`; if so it is consumed.
    pub fn take_if_due(&mut self, now: Instant) -> bool {
        match self.deadline() {
            Some(deadline) if deadline <= now => {
                self.first = None;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

/// A change on its way to the processes. It is addressed to the matching
/// processes that were already running under that name when the change was
/// last seen (`addressees`, taken then): they may hold the old content. A
/// process that matches only later started, or exec'd into that name (an
/// entrypoint script that ends in `exec`), after the change and read the new
/// content as it started; a signal could moreover reach it before it has
/// installed its handler, and SIGHUP's default action is to terminate. So a
/// change that finds no addressee stays pending and each poll looks again;
/// once processes show up that are not addressees, it is complete without a
/// signal, and they get the next change. A failed signal (other than by the
/// process having exited) is retried each poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Identities (pid, start time) of the processes that matched when the
    /// change was last seen; `None` if they could not be listed then: every
    /// matching process is an addressee.
    addressees: Option<BTreeSet<(i32, u64)>>,
    /// Pids the signal has reached (or that exited since).
    done: BTreeSet<i32>,
}

/// What to do about a delivery, given the processes that match now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Signal these pids.
    Signal(Vec<i32>),
    /// Nothing matches yet: keep the change pending.
    Wait,
    /// Nothing is left to do; `late` are matching processes that were not
    /// running under that name when the change was seen, and so were not
    /// signalled.
    Complete { late: Vec<i32> },
}

impl Delivery {
    /// `running`: the matching processes when the change was last seen.
    pub fn new(running: Option<&[Process]>) -> Self {
        Delivery {
            addressees: running.map(|procs| procs.iter().map(Process::identity).collect()),
            done: BTreeSet::new(),
        }
    }

    pub fn plan(&self, matching: &[Process]) -> Plan {
        let addressed = |p: &&Process| {
            self.addressees
                .as_ref()
                .is_none_or(|a| a.contains(&p.identity()))
        };
        let to_signal: Vec<i32> = matching
            .iter()
            .filter(addressed)
            .filter(|p| !self.done.contains(&p.pid))
            .map(|p| p.pid)
            .collect();
        if !to_signal.is_empty() {
            return Plan::Signal(to_signal);
        }
        let late: Vec<i32> = matching
            .iter()
            .filter(|p| !addressed(p))
            .map(|p| p.pid)
            .collect();
        if self.done.is_empty() && late.is_empty() {
            Plan::Wait
        } else {
            Plan::Complete { late }
        }
    }

    /// The signal reached `pid`, or `pid` exited: either way it is done.
    pub fn reached(&mut self, pid: i32) {
        self.done.insert(pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(s: &str) -> Observed {
        Observed::Content(s.as_bytes().to_vec())
    }

    fn absent() -> Observed {
        Observed::Absent("No such file or directory".into())
    }

    #[test]
    fn first_content_is_the_baseline_and_same_content_is_no_change() {
        let mut f = WatchedFile::default();
        assert_eq!(f.observe(content("a")), Seen::First);
        assert!(!f.differs());
        assert_eq!(f.observe(content("a")), Seen::Unchanged);
        assert!(!f.differs());
        assert_eq!(f.observe(content("b")), Seen::Changed);
        assert!(f.differs());
        f.commit();
        assert!(!f.differs());
        assert_eq!(f.current(), Some(&b"b"[..]));
    }

    #[test]
    fn a_burst_back_to_the_delivered_content_is_no_change() {
        let mut f = WatchedFile::default();
        f.observe(content("a"));
        assert_eq!(f.observe(content("b")), Seen::Changed);
        assert_eq!(f.observe(content("a")), Seen::Changed);
        assert!(!f.differs());
    }

    #[test]
    fn a_file_missing_at_start_is_waited_for_without_a_signal() {
        let mut f = WatchedFile::default();
        assert_eq!(f.observe(absent()), Seen::StillAbsent);
        assert_eq!(f.observe(absent()), Seen::StillAbsent);
        assert_eq!(f.observe(content("a")), Seen::First);
        assert!(!f.differs());
    }

    #[test]
    fn a_file_that_vanishes_changes_nothing_until_it_returns_different() {
        let mut f = WatchedFile::default();
        f.observe(content("a"));
        assert_eq!(f.observe(absent()), Seen::Vanished);
        assert!(!f.differs());
        assert_eq!(f.observe(absent()), Seen::StillAbsent);
        assert_eq!(f.observe(content("a")), Seen::Changed);
        assert!(!f.differs(), "back with the delivered content");
        f.observe(absent());
        f.observe(content("c"));
        assert!(f.differs());
    }

    #[test]
    fn debounce_waits_for_quiet() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(500), ms(5000));
        assert_eq!(d.deadline(), None);
        assert!(!d.take_if_due(t0));
        // Ten changes 100 ms apart: one firing, 500 ms after the last.
        for i in 0..10 {
            let t = t0 + ms(100 * i);
            d.change(t);
            assert!(!d.take_if_due(t));
        }
        assert_eq!(d.deadline(), Some(t0 + ms(1400)));
        assert!(!d.take_if_due(t0 + ms(1399)));
        assert!(d.take_if_due(t0 + ms(1400)));
        assert!(!d.take_if_due(t0 + ms(1500)), "fires once");
        assert_eq!(d.deadline(), None);
    }

    #[test]
    fn debounce_fires_anyway_after_the_maximum_delay() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(500), ms(2000));
        let mut fired = Vec::new();
        for i in 0..50 {
            let t = t0 + ms(100 * i);
            d.change(t);
            if d.take_if_due(t) {
                fired.push(i);
            }
        }
        // At 2 s after the first change, then 2 s after the first change of
        // the next burst (the one at 2.1 s).
        assert_eq!(fired, vec![20, 41]);
    }

    #[test]
    fn zero_debounce_fires_at_once() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(Duration::ZERO, Duration::ZERO);
        d.change(t0);
        assert!(d.take_if_due(t0));
    }

    fn proc(pid: i32, start_ticks: u64) -> Process {
        Process {
            pid,
            comm: "agent".into(),
            start_ticks,
        }
    }

    #[test]
    fn delivery_signals_the_processes_running_when_the_change_was_seen() {
        let running = [proc(10, 50), proc(11, 100)];
        let mut d = Delivery::new(Some(&running));
        let now = [proc(10, 50), proc(11, 100), proc(12, 150)];
        assert_eq!(d.plan(&now), Plan::Signal(vec![10, 11]));
        d.reached(10);
        // 11's signal failed: it is retried, 10 is not signalled twice.
        assert_eq!(d.plan(&now), Plan::Signal(vec![11]));
        d.reached(11);
        assert_eq!(d.plan(&now), Plan::Complete { late: vec![12] });
    }

    #[test]
    fn delivery_waits_while_no_process_matches() {
        let d = Delivery::new(Some(&[]));
        assert_eq!(d.plan(&[]), Plan::Wait);
        assert_eq!(d.plan(&[]), Plan::Wait);
    }

    #[test]
    fn a_process_that_appears_after_the_change_is_not_signalled_for_it() {
        let d = Delivery::new(Some(&[]));
        assert_eq!(d.plan(&[]), Plan::Wait);
        assert_eq!(d.plan(&[proc(20, 120)]), Plan::Complete { late: vec![20] });
        // Even one that was forked before (an entrypoint that exec'd into the
        // name after the change): it read the new content at its exec.
        assert_eq!(d.plan(&[proc(21, 1)]), Plan::Complete { late: vec![21] });
    }

    #[test]
    fn a_reused_pid_is_another_process() {
        let d = Delivery::new(Some(&[proc(10, 50)]));
        assert_eq!(d.plan(&[proc(10, 400)]), Plan::Complete { late: vec![10] });
    }

    #[test]
    fn a_process_that_exits_before_its_signal_completes_the_delivery() {
        let mut d = Delivery::new(Some(&[proc(10, 1)]));
        assert_eq!(d.plan(&[proc(10, 1)]), Plan::Signal(vec![10]));
        d.reached(10); // ESRCH
        assert_eq!(d.plan(&[]), Plan::Complete { late: vec![] });
    }

    #[test]
    fn an_addressee_that_exits_unsignalled_leaves_the_change_pending() {
        let d = Delivery::new(Some(&[proc(10, 1)]));
        assert_eq!(d.plan(&[]), Plan::Wait);
    }

    #[test]
    fn when_the_processes_could_not_be_listed_every_match_is_signalled() {
        let d = Delivery::new(None);
        assert_eq!(
            d.plan(&[proc(1, 5), proc(2, u64::MAX)]),
            Plan::Signal(vec![1, 2])
        );
    }
}
