//! Kubernetes resource quantities (`500m`, `2`, `8Gi`), as the downward
//! API's `resourceFieldRef` needs them. Pure.

/// A quantity in thousandths of its unit (`500m` → 500, `1Ki` → 1_024_000).
pub fn parse_milli(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: u128 = match suffix {
        "" => 1000,
        "m" => 1,
        "k" => 1000 * 1000,
        "M" => 1000 * 1_000_000,
        "G" => 1000 * 1_000_000_000,
        "T" => 1000 * 1_000_000_000_000,
        "Ki" => 1000 << 10,
        "Mi" => 1000 << 20,
        "Gi" => 1000 << 30,
        "Ti" => 1000 << 40,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut value = int * mult;
    let mut scale = mult;
    for d in frac.chars() {
        scale /= 10;
        value += u128::from(d.to_digit(10)?) * scale;
    }
    Some(value)
}

/// `value / divisor`, rounded up, as the downward API reports it (at least
/// 1 when the value is not zero).
pub fn divide_ceil(value: &str, divisor: &str) -> Option<u128> {
    let v = parse_milli(value)?;
    let d = parse_milli(divisor)?;
    if d == 0 {
        return None;
    }
    Some(v.div_ceil(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("1Ki"), Some(1_024_000));
        assert_eq!(parse_milli("x"), None);
        assert_eq!(divide_ceil("8Gi", "1"), Some(8 << 30));
        assert_eq!(divide_ceil("500m", "1"), Some(1));
        assert_eq!(divide_ceil("2", "1"), Some(2));
        assert_eq!(divide_ceil("1500m", "1m"), Some(1500));
        assert_eq!(divide_ceil("8Gi", "1Mi"), Some(8192));
    }
}
