//! Kubernetes resource quantities (`8Gi`, `1500m`, `2`, `1e3`), as the API
//! server writes them: the controller compares them, the sidecar sizes the
//! heap and thread pools from them. Pure.

use thiserror::Error;

/// A quantity that could not be parsed.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {text:?}: {reason}")]
pub struct ParseQuantityError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed quantity, in base units (bytes for memory, cores for CPU).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Quantity(f64);

impl Quantity {
    /// Parses the canonical and the accepted forms of the API server: an
    /// optionally signed decimal number followed by a binary-SI suffix (`Ki`
    /// .. `Ei`), a decimal-SI suffix (`n`, `u`, `m`, `k`, `M` .. `E`), a decimal
    /// exponent (`e3`, `E-2`), or nothing.
    pub fn parse(text: &str) -> Result<Quantity, ParseQuantityError> {
        let err = |reason| ParseQuantityError {
            text: text.to_string(),
            reason,
        };
        let s = text.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let number_end = s
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
            .map_or(s.len(), |(i, _)| i);
        let (number, suffix) = s.split_at(number_end);
        if number.is_empty() || number == "+" || number == "-" || number.matches('.').count() > 1 {
            return Err(err("no number"));
        }
        let value: f64 = number.parse().map_err(|_| err("no number"))?;
        let multiplier = match suffix {
            "" => 1.0,
            "Ki" => 1024f64,
            "Mi" => 1024f64.powi(2),
            "Gi" => 1024f64.powi(3),
            "Ti" => 1024f64.powi(4),
            "Pi" => 1024f64.powi(5),
            "Ei" => 1024f64.powi(6),
            "n" => 1e-9,
            "u" => 1e-6,
            "m" => 1e-3,
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            "E" => 1e18,
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().map_err(|_| err("bad exponent"))?;
                10f64.powi(e)
            }
            _ => return Err(err("unknown suffix")),
        };
        Ok(Quantity(value * multiplier))
    }

    /// The value in base units.
    pub fn value(self) -> f64 {
        self.0
    }

    /// Whole base units, rounded up as the API server's `Value()` does
    /// (memory in bytes).
    pub fn ceil_units(self) -> u64 {
        self.0.max(0.0).ceil() as u64
    }

    /// Thousandths of a unit, rounded up as `MilliValue()` does (CPU in
    /// millicores).
    pub fn ceil_millis(self) -> u64 {
        (self.0.max(0.0) * 1000.0 - 1e-6).ceil().max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn binary_suffixes_are_powers_of_1024() {
        assert_eq!(q("8Gi").ceil_units(), 8 * 1024 * 1024 * 1024);
        assert_eq!(q("512Mi").ceil_units(), 512 * 1024 * 1024);
        assert_eq!(q("1.5Gi").ceil_units(), 1536 * 1024 * 1024);
        assert_eq!(q("3Ki").ceil_units(), 3072);
    }

    #[test]
    fn decimal_suffixes_and_exponents() {
        assert_eq!(q("2").ceil_millis(), 2000);
        assert_eq!(q("1500m").ceil_millis(), 1500);
        assert_eq!(q("0.5").ceil_millis(), 500);
        assert_eq!(q("2G").ceil_units(), 2_000_000_000);
        assert_eq!(q("1e3").ceil_units(), 1000);
        assert_eq!(q("5E-1").ceil_millis(), 500);
        assert_eq!(q("100k").ceil_units(), 100_000);
    }

    #[test]
    fn millis_round_up_like_the_api_server() {
        assert_eq!(q("1n").ceil_millis(), 1);
        assert_eq!(q("1u").ceil_millis(), 1);
        assert_eq!(q("1m").ceil_units(), 1);
    }

    #[test]
    fn nonsense_is_rejected_with_the_text() {
        for bad in ["", "Gi", "8GB", "1.2.3", "-", "8 Gi x", "1ex"] {
            let e = Quantity::parse(bad).unwrap_err();
            assert_eq!(e.text, bad);
        }
    }
}
