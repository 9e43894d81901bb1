//! Label and field selectors, parsed and matched as the API server does
//! (`k8s.io/apimachinery/pkg/labels` and `.../fields`). Pure: no I/O.

use serde_json::Value;
use std::collections::BTreeMap;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` or `key==value`
    Equals(String, String),
    /// `key!=value` (also matches when the label is absent)
    NotEquals(String, String),
    /// `key in (a,b)`
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches when the label is absent)
    NotIn(String, Vec<String>),
    /// `key`
    Exists(String),
    /// `!key`
    DoesNotExist(String),
    /// `key>N`
    GreaterThan(String, i64),
    /// `key<N`
    LessThan(String, i64),
}

/// A parsed label selector: all requirements must hold. Empty matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(key: &str) -> bool {
    // A qualified name with an optional DNS-subdomain prefix.
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    });
    name_ok && prefix_ok
}

fn valid_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            format!("unable to parse requirement: found '{rest}', expected: '(' in {whole}")
        })?;
    let mut values = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_value(v) {
            return Err(format!("invalid label value: \"{v}\""));
        }
        values.push(v.to_string());
    }
    Ok(values)
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("found '', expected: identifier in selector {s:?}"));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('>') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid number {v:?}"))?;
                Requirement::GreaterThan(k.trim().into(), n)
            } else if let Some((k, v)) = part.split_once('<') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid number {v:?}"))?;
                Requirement::LessThan(k.trim().into(), n)
            } else {
                let mut words = part.splitn(2, char::is_whitespace);
                let key = words.next().unwrap_or_default().to_string();
                let rest = words.next().unwrap_or_default().trim_start();
                if rest.is_empty() {
                    Requirement::Exists(key)
                } else if let Some(set) = rest.strip_prefix("notin") {
                    Requirement::NotIn(key, parse_set(set, s)?)
                } else if let Some(set) = rest.strip_prefix("in") {
                    Requirement::In(key, parse_set(set, s)?)
                } else {
                    return Err(format!("unable to parse requirement: {part:?}"));
                }
            };
            let (key, value) = match &req {
                Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, Some(v)),
                Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k)
                | Requirement::GreaterThan(k, _)
                | Requirement::LessThan(k, _) => (k, None),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key \"{key}\""));
            }
            if let Some(v) = value
                && !valid_value(v)
            {
                return Err(format!("invalid label value: \"{v}\""));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether a set of labels satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_by(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels `label` looks up satisfy every requirement.
    fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::DoesNotExist(k) => label(k).is_none(),
            Requirement::GreaterThan(k, n) => label(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l > *n),
            Requirement::LessThan(k, n) => label(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l < *n),
        })
    }

    /// Whether an object's `metadata.labels` satisfy the selector (read in
    /// place: the store matches every object of a kind on each list).
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches_by(|k| label_of(obj, k))
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions`), as used by StatefulSets and PodDisruptionBudgets.
    pub fn from_object(selector: &Value) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if let Some(m) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Equals(
                    k.clone(),
                    v.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        for e in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(LabelSelector(reqs))
    }
}

/// The labels of an object.
/// One label of an object, read in place (a value that is not a string
/// reads as empty, as in [`labels_of`]).
pub fn label_of<'v>(obj: &'v Value, key: &str) -> Option<&'v str> {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .map(|v| v.as_str().unwrap_or_default())
}

pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// Dotted field path, e.g. `metadata.name`.
    pub field: String,
    /// Wanted value.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A parsed field selector: all terms must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<FieldTerm>);

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter. Values may escape `\,`,
    /// `\=` and `\\` as `fields.EscapeValue` does.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(terms));
        }
        for part in split_unescaped(s, ',') {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            terms.push(FieldTerm {
                field: field.trim().to_string(),
                value: unescape(value),
                negated,
            });
        }
        Ok(FieldSelector(terms))
    }

    /// The value wanted for a field by an equality term, if any: the store
    /// uses `metadata.name` to answer with one object.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }

    /// Whether an object's fields satisfy the selector.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.0.iter().all(|t| {
            let actual = field_value(obj, &t.field);
            (actual == t.value) != t.negated
        })
    }
}

/// The string form of a field of an object (empty when absent), as the field
/// label conversion functions of the API server give it.
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            cur.push(c);
            if let Some(n) = chars.next() {
                cur.push(n);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_equality_and_set_based_requirements() {
        let sel = LabelSelector::parse(
            "app=cassandra, tier!=web,env in (prod, qa),!canary,zone,x notin (a),n>3",
        )
        .unwrap();
        assert_eq!(
            sel.0,
            vec![
                Requirement::Equals("app".into(), "cassandra".into()),
                Requirement::NotEquals("tier".into(), "web".into()),
                Requirement::In("env".into(), vec!["prod".into(), "qa".into()]),
                Requirement::DoesNotExist("canary".into()),
                Requirement::Exists("zone".into()),
                Requirement::NotIn("x".into(), vec!["a".into()]),
                Requirement::GreaterThan("n".into(), 3),
            ]
        );
    }

    #[test]
    fn double_equals_and_prefixed_keys() {
        let sel = LabelSelector::parse("cassandra.rook.io/cluster==c1").unwrap();
        assert_eq!(
            sel.0,
            vec![Requirement::Equals(
                "cassandra.rook.io/cluster".into(),
                "c1".into()
            )]
        );
    }

    #[test]
    fn rejects_malformed_selectors() {
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a=b,,c=d").is_err());
        assert!(LabelSelector::parse("Bad Key=x").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
    }

    #[test]
    fn matching_follows_absent_label_rules() {
        let l = labels(&[("app", "cassandra"), ("env", "prod"), ("n", "5")]);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m(""));
        assert!(m("app=cassandra"));
        assert!(!m("app=scylla"));
        assert!(m("tier!=web"), "!= matches an absent label");
        assert!(!m("app!=cassandra"));
        assert!(m("env in (prod,qa)"));
        assert!(!m("tier in (web)"), "in does not match an absent label");
        assert!(m("tier notin (web)"), "notin matches an absent label");
        assert!(!m("env notin (prod)"));
        assert!(m("app") && !m("tier"));
        assert!(m("!tier") && !m("!app"));
        assert!(m("n>4") && !m("n>5") && m("n<6") && !m("app>1"));
        assert!(!m("app=cassandra,env=qa"));
    }

    #[test]
    fn selector_object_with_expressions() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "c"},
            "matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]
        }))
        .unwrap();
        assert!(sel.matches(&labels(&[("app", "c"), ("rack", "r2")])));
        assert!(!sel.matches(&labels(&[("app", "c"), ("rack", "r3")])));
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions": [{"key": "a", "operator": "Nope"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p1", "namespace": "ns"}, "spec": {"nodeName": "n1", "hostNetwork": true}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches_object(&pod);
        assert!(m("metadata.name=p1"));
        assert!(m("metadata.name==p1,metadata.namespace=ns"));
        assert!(!m("metadata.namespace!=ns"));
        assert!(m("spec.nodeName!=n2"));
        assert!(m("spec.hostNetwork=true"));
        assert!(m("status.phase="), "an absent field is the empty string");
        assert!(FieldSelector::parse("metadata.name").is_err());
        let sel = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert_eq!(sel.exact("metadata.name"), Some("a,b"));
    }
}
