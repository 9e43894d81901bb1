//! Parsing of the reloader's flag values: durations (`500ms`, `1s`, `2m`,
//! `1m30s`) and signal names (`HUP`, `SIGHUP`, `usr1`, `1`). Pure.

use std::str::FromStr;
use std::time::Duration;

use nix::sys::signal::Signal;

/// Parses a duration written as one or more `<number><unit>` terms, as Go's
/// `time.ParseDuration` and Kubernetes manifests write them: `500ms`, `1s`,
/// `2m`, `1h`, `1m30s`, `1.5s`. Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`,
/// `h`. A bare `0` is zero; any other number needs a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(format!("invalid duration {text:?}: expected a number"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit (ms, s, m or h) after {number}"
                ));
            }
            other => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {other:?} (use ns, us, ms, s, m or h)"
                ));
            }
        };
        total = total
            .checked_add(
                scale(number, nanos_per_unit)
                    .ok_or_else(|| format!("invalid duration {text:?}: bad number {number:?}"))?,
            )
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000)
        .map_err(|_| format!("duration {text:?} is too long"))?;
    // The remainder is below 10^9 and fits.
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// `number` (digits with at most one `.`) times `unit` nanoseconds; decimals
/// beyond a nanosecond are truncated.
fn scale(number: &str, unit: u128) -> Option<u128> {
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    let int_value: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut value = int_value.checked_mul(unit)?;
    let mut place = unit;
    for digit in frac.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        value = value.checked_add(u128::from(digit - b'0') * place)?;
    }
    Some(value)
}

/// Like [`parse_duration`], but zero is refused (a poll interval of zero
/// would spin).
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("{text:?}: must be longer than zero"));
    }
    Ok(d)
}

/// Parses a signal given as `HUP`, `SIGHUP`, `hup` or its number (`1`).
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    let s = text.trim();
    if let Ok(number) = s.parse::<i32>() {
        return Signal::try_from(number).map_err(|_| format!("unknown signal number {number}"));
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&name).map_err(|_| format!("unknown signal {text:?} (e.g. HUP, USR1, USR2)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_the_usual_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(".25s"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 20ms "), Ok(Duration::from_millis(20)));
    }

    #[test]
    fn bad_durations_are_refused_with_a_reason() {
        for bad in ["", "5", "ms", "1x", "1.2.3s", "-1s", "1 s", "s1", "."] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_duration("5").unwrap_err().contains("missing unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(
            parse_duration("99999999999999999999999h")
                .unwrap_err()
                .contains("bad number")
                || parse_duration("99999999999999999999999h")
                    .unwrap_err()
                    .contains("too long")
        );
    }

    #[test]
    fn poll_interval_must_be_positive() {
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(parse_positive_duration("1s"), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn signals_by_short_name_full_name_or_number() {
        assert_eq!(parse_signal("HUP"), Ok(Signal::SIGHUP));
        assert_eq!(parse_signal("SIGHUP"), Ok(Signal::SIGHUP));
        assert_eq!(parse_signal("hup"), Ok(Signal::SIGHUP));
        assert_eq!(parse_signal("USR1"), Ok(Signal::SIGUSR1));
        assert_eq!(parse_signal("sigusr2"), Ok(Signal::SIGUSR2));
        assert_eq!(parse_signal("1"), Ok(Signal::SIGHUP));
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("999").is_err());
        assert!(parse_signal("").is_err());
    }
}
