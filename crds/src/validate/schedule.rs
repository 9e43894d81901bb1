//! The repair schedule of `spec.maintenance.repair.schedule`: a 5-field
//! cron expression (minute hour day-of-month month day-of-week, in UTC)
//! or an interval (`90m`, `36h`, `7d`). What the controller needs of it
//! is the start of the cycle a moment belongs to (the latest fire time at
//! or before it; for an interval, the Cluster's creation plus a whole
//! number of intervals) and the next start (to wake up for it).
//!
//! A small evaluator of its own rather than a cron crate: the ones kept up
//! (`cron`, `croner`) bring `chrono` and a time-zone database into the
//! operator's binary, which otherwise has neither, for the 5 fields in UTC
//! this needs. Pure.

/// The shortest interval: short enough for tests to run whole cycles,
/// long enough that a repair has time to start.
pub const MIN_INTERVAL_SECONDS: i64 = 60;

/// The longest an expression may go without firing: a schedule that names
/// a day that never comes (`0 0 30 2 *`) is refused. Eight years cover a
/// 29 February across a century year that is no leap year.
const HORIZON_DAYS: i64 = 8 * 366;

const DAY: i64 = 86_400;

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// A cron expression.
    Cron(Cron),
    /// Every so many seconds, counted from the Cluster's creation.
    Interval(i64),
}

/// The five fields of a cron expression, as sets of the values they
/// admit (bit `n` set: value `n` admitted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// The day-of-month field was `*` (or `?`-less `*/1`): with a
    /// restricted day-of-week, only the latter decides (cron's rule: when
    /// both are restricted, a day matches either).
    any_day_of_month: bool,
    any_day_of_week: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    /// Parses a schedule; the error says what is wrong, for people.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if let Some(interval) = parse_interval(text)? {
            return Ok(Schedule::Interval(interval));
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "{text:?} is neither an interval (a number and m, h or d, e.g. 7d, 36h, 90m) nor a cron expression of 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 2 * * 0\")"
            ));
        }
        let field = |i: usize, name: &str, min: u32, max: u32, names: &[&str]| {
            parse_field(fields[i], min, max, names)
                .map_err(|e| format!("{text:?}: the {name} field {:?} {e}", fields[i]))
        };
        let minutes = field(0, "minute", 0, 59, &[])?;
        let hours = field(1, "hour", 0, 23, &[])?;
        let days_of_month = field(2, "day-of-month", 1, 31, &[])?;
        let months = field(3, "month", 1, 12, &MONTHS)?;
        // 7 is Sunday too.
        let mut days_of_week = field(4, "day-of-week", 0, 7, &WEEKDAYS)?;
        if days_of_week & (1 << 7) != 0 {
            days_of_week |= 1;
        }
        let cron = Cron {
            minutes,
            hours: hours as u32,
            days_of_month: days_of_month as u32,
            months: months as u16,
            days_of_week: (days_of_week & 0x7f) as u8,
            any_day_of_month: fields[2].starts_with('*'),
            any_day_of_week: fields[4].starts_with('*'),
        };
        let schedule = Schedule::Cron(cron);
        // Any moment will do: an expression that fires never fires from
        // any of them within the horizon.
        if schedule.next_start(0, 0).is_none() {
            return Err(format!(
                "{text:?} names no day that exists: it would never fire"
            ));
        }
        Ok(schedule)
    }

    /// The start of the cycle `now` belongs to (seconds since the epoch):
    /// for a cron expression the latest fire time at or before `now`, for
    /// an interval `origin` (the Cluster's creation) plus the largest
    /// whole number of intervals that does not pass `now`. `None` before
    /// the first start.
    pub fn cycle_start(&self, origin: i64, now: i64) -> Option<i64> {
        match self {
            Schedule::Interval(every) => {
                (now >= origin).then(|| origin + (now - origin) / every * every)
            }
            Schedule::Cron(cron) => cron.latest_at_or_before(now),
        }
    }

    /// The first cycle start after `now`.
    pub fn next_start(&self, origin: i64, now: i64) -> Option<i64> {
        match self {
            Schedule::Interval(_) if now < origin => Some(origin),
            Schedule::Interval(every) => Some(origin + ((now - origin) / every + 1) * every),
            Schedule::Cron(cron) => cron.earliest_after(now),
        }
    }
}

/// `90m`, `36h`, `7d`: `Some(seconds)`; `Ok(None)` for what is no
/// interval at all (a cron expression), an error for an interval that is
/// too short or too long.
fn parse_interval(text: &str) -> Result<Option<i64>, String> {
    let Some(unit) = text.chars().last() else {
        return Ok(None);
    };
    let digits = &text[..text.len() - unit.len_utf8()];
    let seconds = match unit {
        'm' => 60,
        'h' => 3_600,
        'd' => DAY,
        _ => return Ok(None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    let count: i64 = digits
        .parse()
        .ok()
        .filter(|n| *n <= 99_999)
        .ok_or_else(|| format!("{text:?}: an interval of at most 99999 units"))?;
    let interval = count * seconds;
    if interval < MIN_INTERVAL_SECONDS {
        return Err(format!(
            "{text:?}: the shortest interval is 1m ({MIN_INTERVAL_SECONDS} seconds)"
        ));
    }
    Ok(Some(interval))
}

/// One cron field: `*`, a value, a range `a-b`, any of them with a step
/// `/n`, or a list of those separated by commas; months and days of the
/// week also by their English three-letter names.
fn parse_field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let value = |word: &str| -> Result<u32, String> {
        let lower = word.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            // Months are 1-based, weekdays 0-based.
            return Ok(i as u32 + min);
        }
        match word.parse::<u32>() {
            Ok(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(format!("has {word:?}, not a value from {min} to {max}")),
        }
    };
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 =
                    step.parse().ok().filter(|s| *s >= 1).ok_or_else(|| {
                        format!("has the step {step:?}, not a number of 1 or more")
                    })?;
                (range, step)
            }
            None => (part, 1),
        };
        let (from, to) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `5/15`: from 5 to the end, every 15.
            (v, if part.contains('/') { max } else { v })
        };
        if from > to {
            return Err(format!("has the range {range:?}, which runs backwards"));
        }
        let mut v = from;
        while v <= to {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

/// Days since 1970-01-01 → (year, month 1-12, day 1-31) (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Cron {
    fn day_matches(&self, days: i64) -> bool {
        let (_, month, day) = civil_from_days(days);
        // 1970-01-01 was a Thursday (4).
        let weekday = (days + 4).rem_euclid(7) as u32;
        let dom = self.days_of_month & (1 << day) != 0;
        let dow = self.days_of_week & (1 << weekday) != 0;
        let day_ok = match (self.any_day_of_month, self.any_day_of_week) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            (false, false) => dom || dow,
        };
        self.months & (1 << month) != 0 && day_ok
    }

    /// The latest minute of the day (seconds into it) at or before
    /// `limit` seconds into it that matches.
    fn latest_in_day(&self, limit: i64) -> Option<i64> {
        (0..24i64)
            .rev()
            .filter(|h| self.hours & (1 << h) != 0)
            .flat_map(|h| {
                (0..60i64)
                    .rev()
                    .filter(|m| self.minutes & (1 << m) != 0)
                    .map(move |m| h * 3_600 + m * 60)
            })
            .find(|s| *s <= limit)
    }

    fn earliest_in_day(&self, after: i64) -> Option<i64> {
        (0..24i64)
            .filter(|h| self.hours & (1 << h) != 0)
            .flat_map(|h| {
                (0..60i64)
                    .filter(|m| self.minutes & (1 << m) != 0)
                    .map(move |m| h * 3_600 + m * 60)
            })
            .find(|s| *s > after)
    }

    fn latest_at_or_before(&self, now: i64) -> Option<i64> {
        let today = now.div_euclid(DAY);
        let into = now.rem_euclid(DAY);
        (0..HORIZON_DAYS).find_map(|back| {
            let day = today - back;
            if !self.day_matches(day) {
                return None;
            }
            let limit = if back == 0 { into } else { DAY - 1 };
            self.latest_in_day(limit).map(|s| day * DAY + s)
        })
    }

    fn earliest_after(&self, now: i64) -> Option<i64> {
        let today = now.div_euclid(DAY);
        let into = now.rem_euclid(DAY);
        (0..HORIZON_DAYS).find_map(|ahead| {
            let day = today + ahead;
            if !self.day_matches(day) {
                return None;
            }
            let after = if ahead == 0 { into } else { -1 };
            self.earliest_in_day(after).map(|s| day * DAY + s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_second()
    }

    fn cycle(schedule: &str, now: &str) -> String {
        let s = Schedule::parse(schedule).unwrap();
        let start = s.cycle_start(0, at(now)).unwrap();
        k8s_openapi::jiff::Timestamp::from_second(start)
            .unwrap()
            .to_string()
    }

    fn next(schedule: &str, now: &str) -> String {
        let s = Schedule::parse(schedule).unwrap();
        let start = s.next_start(0, at(now)).unwrap();
        k8s_openapi::jiff::Timestamp::from_second(start)
            .unwrap()
            .to_string()
    }

    /// The cycle of a moment is the latest fire time at or before it, in
    /// UTC, and the next one the first after it; Sunday is 0 and 7.
    #[test]
    fn cron_cycles_start_at_the_latest_fire_time() {
        // 2026-11-27 is a Friday.
        assert_eq!(
            cycle("0 2 * * 0", "2026-11-27T10:00:00Z"),
            "2026-11-22T02:00:00Z"
        );
        assert_eq!(
            cycle("0 2 * * 7", "2026-11-27T10:00:00Z"),
            "2026-11-22T02:00:00Z"
        );
        assert_eq!(
            cycle("0 2 * * sun", "2026-11-22T02:00:00Z"),
            "2026-11-22T02:00:00Z",
            "a fire time is the start of its own cycle"
        );
        assert_eq!(
            cycle("0 2 * * 0", "2026-11-22T01:59:59Z"),
            "2026-11-15T02:00:00Z"
        );
        assert_eq!(
            next("0 2 * * 0", "2026-11-22T02:00:00Z"),
            "2026-11-29T02:00:00Z"
        );
        assert_eq!(
            cycle("*/15 * * * *", "2026-11-27T10:44:59Z"),
            "2026-11-27T10:30:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-11-27T10:45:00Z"),
            "2026-11-27T11:00:00Z"
        );
        assert_eq!(
            cycle("30 4 1,15 * *", "2026-11-14T00:00:00Z"),
            "2026-11-01T04:30:00Z"
        );
        assert_eq!(
            cycle("0 0 1 jan *", "2026-11-27T10:00:00Z"),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            cycle("0 3 * * mon-fri", "2026-11-29T12:00:00Z"),
            "2026-11-27T03:00:00Z",
            "Sunday: the last weekday was Friday"
        );
        // Both days restricted: either matches (cron's rule). The 13th of
        // November 2026 is a Friday, the 1st a Sunday.
        assert_eq!(
            cycle("0 0 1 * 5", "2026-11-12T00:00:00Z"),
            "2026-11-06T00:00:00Z"
        );
        assert_eq!(
            cycle("0 0 29 2 *", "2026-11-27T00:00:00Z"),
            "2024-02-29T00:00:00Z",
            "a leap day"
        );
        assert_eq!(
            cycle("5/20 * * * *", "2026-11-27T10:44:00Z"),
            "2026-11-27T10:25:00Z"
        );
    }

    /// An interval's cycles are counted from the Cluster's creation.
    #[test]
    fn interval_cycles_count_from_the_origin() {
        let s = Schedule::parse("7d").unwrap();
        assert_eq!(s, Schedule::Interval(7 * DAY));
        let origin = at("2026-11-01T12:00:00Z");
        assert_eq!(s.cycle_start(origin, origin), Some(origin));
        assert_eq!(
            s.cycle_start(origin, at("2026-11-27T10:00:00Z")),
            Some(at("2026-11-22T12:00:00Z"))
        );
        assert_eq!(
            s.next_start(origin, at("2026-11-27T10:00:00Z")),
            Some(at("2026-11-29T12:00:00Z"))
        );
        assert_eq!(s.cycle_start(origin, origin - 1), None);
        assert_eq!(s.next_start(origin, origin - 1), Some(origin));
        assert_eq!(Schedule::parse("90m").unwrap(), Schedule::Interval(90 * 60));
        assert_eq!(
            Schedule::parse("36h").unwrap(),
            Schedule::Interval(36 * 3600)
        );
        assert_eq!(Schedule::parse("1m").unwrap(), Schedule::Interval(60));
    }

    /// What is no schedule is refused with a reason.
    #[test]
    fn bad_schedules_are_refused_with_a_reason() {
        for (bad, says) in [
            ("", "neither an interval"),
            ("weekly", "neither an interval"),
            ("0m", "shortest interval is 1m"),
            ("7w", "neither an interval"),
            ("0 2 * *", "5 fields"),
            ("0 2 * * * *", "5 fields"),
            ("60 2 * * 0", "minute field"),
            ("0 24 * * 0", "hour field"),
            ("0 2 0 * *", "day-of-month field"),
            ("0 2 * 13 *", "month field"),
            ("0 2 * * 8", "day-of-week field"),
            ("0 2 * * mon-sun", "day-of-week field"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "backwards"),
            ("0 0 30 2 *", "never fire"),
            ("0 0 31 4,6,9,11 *", "never fire"),
        ] {
            let error = Schedule::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }
}
