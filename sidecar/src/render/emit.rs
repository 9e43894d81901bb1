//! Writes a YAML value the way both readers of the rendered files read it
//! back unchanged: Cassandra's SnakeYAML (YAML 1.1) and serde_norway
//! (YAML 1.2). Pure.
//!
//! serde_norway's own writer follows YAML 1.2 only: it writes the strings
//! `yes`, `on`, `off`, `y`, `1_000` or `12:30` plain, which YAML 1.1 reads
//! as booleans and integers, so a quoted `'on'` of an override would reach
//! Cassandra as `true`. Here a string is written plain only when it is
//! unambiguous in both versions; otherwise it is single-quoted (or
//! double-quoted when it holds control characters). Floats always carry a
//! `.` and a signed exponent, as YAML 1.1 requires of a float.

use serde_norway::{Mapping, Number, Value};

/// A value YAML cannot carry as a configuration setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EmitError {
    #[error("a tagged value ({0}) cannot be written")]
    Tagged(String),
    #[error("a mapping key that is a list or a mapping cannot be written")]
    ComplexKey,
}

/// The YAML text of a mapping (block style, two-space indentation).
pub fn mapping_to_yaml(doc: &Mapping) -> Result<String, EmitError> {
    let mut out = String::new();
    if doc.is_empty() {
        out.push_str("{}\n");
    } else {
        write_mapping(&mut out, doc, 0)?;
    }
    Ok(out)
}

fn write_mapping(out: &mut String, map: &Mapping, indent: usize) -> Result<(), EmitError> {
    for (key, value) in map {
        if is_block(key) {
            return Err(EmitError::ComplexKey);
        }
        pad(out, indent);
        out.push_str(&inline(key)?);
        out.push(':');
        write_value_after_key(out, value, indent)?;
    }
    Ok(())
}

/// After `key:`: a block on the next lines, or ` scalar` on this one.
fn write_value_after_key(out: &mut String, value: &Value, indent: usize) -> Result<(), EmitError> {
    match value {
        Value::Mapping(m) if !m.is_empty() => {
            out.push('\n');
            write_mapping(out, m, indent + 2)
        }
        // Lists sit at the key's indentation, as serde_norway and the
        // default files write them.
        Value::Sequence(s) if !s.is_empty() => {
            out.push('\n');
            write_sequence(out, s, indent)
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other)?);
            out.push('\n');
            Ok(())
        }
    }
}

fn write_sequence(out: &mut String, items: &[Value], indent: usize) -> Result<(), EmitError> {
    for item in items {
        pad(out, indent);
        out.push_str("- ");
        match item {
            Value::Mapping(m) if !m.is_empty() => {
                // The first entry goes on the dash's line.
                let mut block = String::new();
                write_mapping(&mut block, m, indent + 2)?;
                out.push_str(&block[indent + 2..]);
            }
            Value::Sequence(s) if !s.is_empty() => {
                let mut block = String::new();
                write_sequence(&mut block, s, indent + 2)?;
                out.push_str(&block[indent + 2..]);
            }
            other => {
                out.push_str(&inline(other)?);
                out.push('\n');
            }
        }
    }
    Ok(())
}

fn is_block(value: &Value) -> bool {
    matches!(value, Value::Mapping(m) if !m.is_empty())
        || matches!(value, Value::Sequence(s) if !s.is_empty())
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A scalar, or an empty collection, on one line.
fn inline(value: &Value) -> Result<String, EmitError> {
    Ok(match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => string(s),
        Value::Mapping(m) if m.is_empty() => "{}".to_string(),
        Value::Sequence(s) if s.is_empty() => "[]".to_string(),
        Value::Mapping(_) | Value::Sequence(_) => return Err(EmitError::ComplexKey),
        Value::Tagged(t) => return Err(EmitError::Tagged(t.tag.to_string())),
    })
}

fn number(n: &Number) -> String {
    let text = n.to_string();
    if !n.is_f64() || text.contains("inf") || text.contains("nan") {
        return text;
    }
    // YAML 1.1 floats need a `.` and a signed exponent: 1e20 -> 1.0e+20.
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m.to_string(), Some(e.to_string())),
        None => (text.clone(), None),
    };
    let mantissa = if mantissa.contains('.') {
        mantissa
    } else {
        format!("{mantissa}.0")
    };
    match exponent {
        None => mantissa,
        Some(e) if e.starts_with(['+', '-']) => format!("{mantissa}e{e}"),
        Some(e) => format!("{mantissa}e+{e}"),
    }
}

/// YAML 1.1 booleans and nulls, and YAML 1.2's (matched without case).
const RESERVED_WORDS: &[&str] = &[
    "y", "n", "yes", "no", "true", "false", "on", "off", "null", "~",
];

fn string(s: &str) -> String {
    if is_plain_safe(s) {
        return s.to_string();
    }
    if s.chars().any(char::is_control) {
        // JSON's escapes are YAML double-quoted escapes.
        return serde_json::to_string(s).unwrap_or_else(|_| format!("'{}'", s.replace('\'', "''")));
    }
    format!("'{}'", s.replace('\'', "''"))
}

/// Written plain, the string reads back as this same string in YAML 1.1
/// and 1.2: a conservative set of characters, no indicator first, no
/// reserved word, nothing that is or resembles a number.
fn is_plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphanumeric() || first == '_' || first == '/') {
        return false;
    }
    if s.ends_with(' ')
        || !s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '+' | ',' | ' ')
        })
    {
        return false;
    }
    if RESERVED_WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return false;
    }
    // Numbers of either version (YAML 1.1 allows `_` in numbers), and
    // anything that starts like one and could be read as one: decimals
    // with exponents (`1.5e3`), radix prefixes (`0x1F`, `0o17`, `0b101`).
    if first.is_ascii_digit() {
        let lower = s.to_ascii_lowercase();
        let radix = ["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p))
            && lower[2..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '_');
        let decimal = lower
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '_' | '.' | '+' | '-' | 'e'))
            && lower.matches('.').count() <= 1;
        if radix || decimal {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(value: &Value) -> Value {
        let Value::Mapping(m) = value else {
            panic!("not a mapping")
        };
        let text = mapping_to_yaml(m).unwrap();
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
    }

    fn doc(entries: &[(&str, Value)]) -> Mapping {
        let mut m = Mapping::new();
        for (k, v) in entries {
            m.insert(Value::from(*k), v.clone());
        }
        m
    }

    #[test]
    fn strings_ambiguous_in_yaml_1_1_are_quoted() {
        for s in [
            "yes", "No", "ON", "off", "y", "N", "true", "null", "~", "1_000", "12:30", "0777",
            "7000", "1.5", ".inf", "0x1F", "1e3", "-1", "+1", "=", "<<", "", " x", "x ", "a: b",
            "a #b", "*ref", "&anchor", "!tag", "@x", "`x", "%x", "|", ">", "[a]", "{a}", "'q'",
            "\"q\"", "10:30:00", "1_0.5", "0o17", "0b101", ",a",
        ] {
            let text = string(s);
            assert!(
                text.starts_with('\'') || text.starts_with('"'),
                "{s:?} written plain"
            );
            let back: Value = serde_norway::from_str(&format!("k: {text}\n")).unwrap();
            assert_eq!(back["k"], Value::from(s), "{s:?} as {text}");
        }
    }

    #[test]
    fn ordinary_strings_stay_plain() {
        for s in [
            "Test Cluster",
            "org.apache.cassandra.locator.SimpleSeedProvider",
            "10.96.0.12",
            "0.0.0.0",
            "/var/lib/cassandra/data",
            "GossipingPropertyFileSnitch",
            "periodic",
            "3h",
            "64MiB",
            "10.96.0.10",
            "1d",
            "7d",
            "2d3",
            "0xZ",
        ] {
            assert_eq!(string(s), s);
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(string("a\nb\tc"), "\"a\\nb\\tc\"");
        assert_eq!(string("it's"), "'it''s'");
    }

    #[test]
    fn floats_read_as_floats_in_yaml_1_1() {
        let f = |x: f64| number(&Number::from(x));
        assert_eq!(f(2.0), "2.0");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(1e20), "1.0e+20");
        assert_eq!(f(1.5e-7), "1.5e-7");
        assert_eq!(f(f64::INFINITY), ".inf");
        assert_eq!(number(&Number::from(-3i64)), "-3");
    }

    #[test]
    fn nested_structures_round_trip() {
        let mut inner = Mapping::new();
        inner.insert(Value::from("seeds"), Value::from("10.0.0.1,10.0.0.2"));
        inner.insert(
            Value::from("extra"),
            Value::Sequence(vec![Value::from(1), Value::from("on")]),
        );
        let mut provider = Mapping::new();
        provider.insert(Value::from("class_name"), Value::from("x.Y"));
        provider.insert(
            Value::from("parameters"),
            Value::Sequence(vec![Value::Mapping(inner)]),
        );
        let value = Value::Mapping(doc(&[
            (
                "seed_provider",
                Value::Sequence(vec![Value::Mapping(provider)]),
            ),
            (
                "matrix",
                Value::Sequence(vec![
                    Value::Sequence(vec![Value::from(1), Value::from(2)]),
                    Value::Sequence(vec![]),
                ]),
            ),
            ("empty_map", Value::Mapping(Mapping::new())),
            ("empty_list", Value::Sequence(vec![])),
            ("nothing", Value::Null),
            ("flag", Value::Bool(false)),
            ("ratio", Value::from(0.25)),
            ("text", Value::from("line one\nline two")),
            ("unicode", Value::from("em — dash")),
            (
                "nested",
                Value::Mapping(doc(&[(
                    "deeper",
                    Value::Mapping(doc(&[("x", Value::from(-1))])),
                )])),
            ),
        ]));
        assert_eq!(roundtrip(&value), value);
        let Value::Mapping(m) = &value else {
            unreachable!()
        };
        let text = mapping_to_yaml(m).unwrap();
        assert!(
            text.starts_with(
                "seed_provider:\n- class_name: x.Y\n  parameters:\n  - seeds: 10.0.0.1,10.0.0.2\n    extra:\n    - 1\n    - 'on'\nmatrix:\n- - 1\n  - 2\n- []\nempty_map: {}\nempty_list: []\nnothing: null\nflag: false\nratio: 0.25\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn tagged_values_are_refused() {
        let value: Value = serde_norway::from_str("k: !custom 3\n").unwrap();
        let Value::Mapping(m) = value else {
            unreachable!()
        };
        assert_eq!(
            mapping_to_yaml(&m),
            Err(EmitError::Tagged("!custom".to_string()))
        );
    }
}
