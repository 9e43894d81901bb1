//! Validation of objects against a CRD's structural `openAPIV3Schema`, as the
//! API server does it for custom resources: drop nulls of non-nullable fields,
//! find (and prune) unknown fields, apply defaults, then check types,
//! `required`, `enum`, bounds, lengths, `pattern`, item and property counts.
//! Error messages follow the API server's `field.Error` wording, so a test can
//! assert on what `kubectl apply` would print. Pure: no I/O.
//!
//! CEL rules (`x-kubernetes-validations`) are not evaluated here; see
//! [`crate::cel`].

use regex::Regex;
use serde_json::{Map, Value};

/// Why a field is invalid, as the API server's `metav1.CauseType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `FieldValueRequired`
    Required,
    /// `FieldValueInvalid`
    Invalid,
    /// `FieldValueNotSupported`
    NotSupported,
    /// `FieldValueTooLong`
    TooLong,
    /// `FieldValueTooMany`
    TooMany,
    /// `FieldValueTypeInvalid`
    TypeInvalid,
}

impl Reason {
    /// The cause type string of the API server's Status objects.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Required => "FieldValueRequired",
            Reason::Invalid => "FieldValueInvalid",
            Reason::NotSupported => "FieldValueNotSupported",
            Reason::TooLong => "FieldValueTooLong",
            Reason::TooMany => "FieldValueTooMany",
            Reason::TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Path of the field, e.g. `spec.datacenter.racks[0].members`.
    pub field: String,
    /// Cause type.
    pub reason: Reason,
    /// The API server's message, starting with the field path.
    pub message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Removes the null values of fields that are not `nullable`, as the API server
/// does before defaulting and validation.
pub fn drop_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let Some(sub) = property_schema(schema, &key) else {
                    continue;
                };
                if map.get(&key).is_some_and(Value::is_null) && !is_nullable(sub) {
                    map.remove(&key);
                } else if let Some(child) = map.get_mut(&key) {
                    drop_nulls(sub, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    drop_nulls(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Paths of the fields the schema does not know (what `kubectl apply` with
/// strict field validation reports, and what pruning removes).
pub fn unknown_fields(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_unknown(schema, value, "", &mut out);
    out
}

/// Removes the fields the schema does not know (pruning), returning their
/// paths.
pub fn prune(schema: &Value, value: &mut Value) -> Vec<String> {
    let unknown = unknown_fields(schema, value);
    prune_in_place(schema, value);
    unknown
}

fn prune_in_place(schema: &Value, value: &mut Value) {
    if preserves_unknown(schema) {
        return;
    }
    match value {
        Value::Object(map) => {
            map.retain(|key, _| property_schema(schema, key).is_some() || is_meta_key(schema, key));
            for (key, child) in map.iter_mut() {
                // The root's metadata is pruned by ObjectMeta's own rules,
                // never by the schema, which may only restrict its name
                // and generateName (apiextensions' pruning skips it).
                if is_meta_key(schema, key) {
                    continue;
                }
                if let Some(sub) = property_schema(schema, key) {
                    prune_in_place(sub, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune_in_place(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

fn walk_unknown(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if preserves_unknown(schema) {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = join(path, key);
                if is_meta_key(schema, key) {
                    continue;
                }
                match property_schema(schema, key) {
                    Some(sub) => walk_unknown(sub, child, &child_path, out),
                    None if is_meta_key(schema, key) => {}
                    None => out.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk_unknown(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Applies the schema's `default`s to absent fields, recursively (defaults
/// are themselves defaulted, as the API server does).
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (key, sub) in props {
                    if !map.contains_key(key)
                        && let Some(default) = sub.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                }
            }
            for (key, child) in map.iter_mut() {
                if let Some(sub) = property_schema(schema, key) {
                    apply_defaults(sub, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Validates a value (after [`drop_nulls`] and [`apply_defaults`]) against
/// the schema. `root` is the path prefix (empty for a whole object).
pub fn validate(schema: &Value, value: &Value) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    check(schema, value, "", &mut errors);
    errors
}

/// The whole admission pipeline of a custom resource's body: drop nulls,
/// prune unknown fields, default, validate. Returns the pruned field paths
/// and the errors.
pub fn admit(schema: &Value, value: &mut Value) -> (Vec<String>, Vec<SchemaError>) {
    drop_nulls(schema, value);
    let pruned = prune(schema, value);
    apply_defaults(schema, value);
    (pruned, validate(schema, value))
}

fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if is_nullable(schema) || schema.get("type").is_none() {
            return;
        }
        errors.push(type_error(
            shown,
            value,
            schema_type(schema).unwrap_or("object"),
        ));
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if int_or_string {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(SchemaError {
                field: shown.to_string(),
                reason: Reason::TypeInvalid,
                message: format!(
                    "{shown}: Invalid value: \"{}\": {shown} in body must be of type integer,string: \"{}\"",
                    json_type(value),
                    json_type(value)
                ),
            });
            return;
        }
    } else if let Some(expected) = schema_type(schema) {
        let ok = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !ok {
            errors.push(type_error(shown, value, expected));
            return;
        }
    }

    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        errors.push(SchemaError {
            field: shown.to_string(),
            reason: Reason::NotSupported,
            message: format!(
                "{shown}: Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        });
    }

    match value {
        Value::Object(map) => check_object(schema, map, path, shown, errors),
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(SchemaError {
                    field: shown.to_string(),
                    reason: Reason::TooMany,
                    message: format!(
                        "{shown}: Too many: {}: must have at most {max} items",
                        items.len()
                    ),
                });
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errors.push(invalid(
                    shown,
                    value,
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                errors.push(SchemaError {
                    field: shown.to_string(),
                    reason: Reason::TooLong,
                    message: format!("{shown}: Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errors.push(invalid(
                    shown,
                    value,
                    format!("{shown} in body should be at least {min} chars long"),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => {
                        errors.push(invalid(
                            shown,
                            value,
                            format!("{shown} in body should match '{pattern}'"),
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(invalid(
                        shown,
                        value,
                        format!("the schema's pattern does not compile: {e}"),
                    )),
                }
            }
        }
        Value::Number(n) => {
            if let (Some(v), Some(min)) =
                (n.as_f64(), schema.get("minimum").and_then(Value::as_f64))
            {
                let exclusive = schema
                    .get("exclusiveMinimum")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if v < min || (exclusive && v == min) {
                    let op = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errors.push(invalid(
                        shown,
                        value,
                        format!("{shown} in body should be {op} {}", number(min)),
                    ));
                }
            }
            if let (Some(v), Some(max)) =
                (n.as_f64(), schema.get("maximum").and_then(Value::as_f64))
            {
                let exclusive = schema
                    .get("exclusiveMaximum")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if v > max || (exclusive && v == max) {
                    let op = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errors.push(invalid(
                        shown,
                        value,
                        format!("{shown} in body should be {op} {}", number(max)),
                    ));
                }
            }
        }
        _ => {}
    }
}

fn check_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    shown: &str,
    errors: &mut Vec<SchemaError>,
) {
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                let field = join(path, key);
                errors.push(SchemaError {
                    message: format!("{field}: Required value"),
                    field,
                    reason: Reason::Required,
                });
            }
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && map.len() as u64 > max
    {
        errors.push(SchemaError {
            field: shown.to_string(),
            reason: Reason::TooMany,
            message: format!(
                "{shown}: Too many: {}: must have at most {max} items",
                map.len()
            ),
        });
    }
    for (key, child) in map {
        if let Some(sub) = property_schema(schema, key) {
            check(sub, child, &join(path, key), errors);
        }
    }
}

fn property_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    if let Some(sub) = schema.get("properties").and_then(|p| p.get(key)) {
        return Some(sub);
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(true)) => Some(&Value::Null),
        Some(sub @ Value::Object(_)) => Some(sub),
        _ => None,
    }
}

/// `apiVersion`, `kind` and `metadata` of the root object (and of embedded
/// resources) are not part of the structural schema the user writes.
fn is_meta_key(schema: &Value, key: &str) -> bool {
    let root_like = schema
        .get("properties")
        .is_some_and(|p| p.get("spec").is_some() || p.get("status").is_some())
        || schema
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    root_like && matches!(key, "apiVersion" | "kind" | "metadata")
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.is_null()
        || schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

fn is_nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn schema_type(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(shown: &str, value: &Value, expected: &str) -> SchemaError {
    SchemaError {
        field: shown.to_string(),
        reason: Reason::TypeInvalid,
        message: format!(
            "{shown}: Invalid value: \"{}\": {shown} in body must be of type {expected}: \"{}\"",
            json_type(value),
            json_type(value)
        ),
    }
}

fn invalid(shown: &str, value: &Value, detail: String) -> SchemaError {
    SchemaError {
        field: shown.to_string(),
        reason: Reason::Invalid,
        message: format!("{shown}: Invalid value: {value}: {detail}"),
    }
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as i64)
    } else {
        v.to_string()
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 5, "minLength": 1, "pattern": "^[a-z]+$"},
                        "count": {"type": "integer", "minimum": 0, "maximum": 3},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "list": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "integer"}},
                        "qty": {"x-kubernetes-int-or-string": true},
                        "opt": {"type": "string", "nullable": true},
                        "strict": {"type": "string"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn run(mut v: Value) -> (Value, Vec<String>, Vec<String>) {
        let (pruned, errors) = admit(&schema(), &mut v);
        // Object keys may iterate in insertion or sorted order depending on
        // serde_json's features: compare sorted.
        let mut errors: Vec<String> = errors.into_iter().map(|e| e.message).collect();
        errors.sort();
        (v, pruned, errors)
    }

    #[test]
    fn valid_object_gets_defaults() {
        let (v, pruned, errors) = run(
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"name": "abc", "qty": 2}}),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert!(pruned.is_empty());
        assert_eq!(v["spec"]["mode"], "a");
        assert_eq!(v["metadata"]["name"], "n");
    }

    /// A schema that declares the root's `metadata.name` (so that CEL rules
    /// may name it as their field) prunes nothing else of the metadata:
    /// the API server leaves metadata to ObjectMeta's rules.
    #[test]
    fn a_declared_metadata_name_prunes_no_other_metadata() {
        let schema = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let mut v = json!({"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "n", "namespace": "db", "labels": {"l": "v"}},
            "spec": {"a": "x", "b": "y"}});
        assert_eq!(prune(&schema, &mut v), vec!["spec.b".to_string()]);
        assert_eq!(v["metadata"]["namespace"], "db");
        assert_eq!(v["metadata"]["labels"]["l"], "v");
    }

    #[test]
    fn every_constraint_reports_its_field_like_the_api_server() {
        let (_, _, errors) = run(json!({"spec": {
            "name": "ABCDEFG", "count": -1, "mode": "c", "list": [1, 2, 3], "qty": 1.5
        }}));
        assert_eq!(
            errors,
            vec![
                "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
                "spec.list: Too many: 3: must have at most 2 items",
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
                "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
                "spec.name: Too long: may not be more than 5 bytes",
                "spec.qty: Invalid value: \"number\": spec.qty in body must be of type integer,string: \"number\"",
            ]
        );
    }

    #[test]
    fn required_type_and_max() {
        let (_, _, errors) = run(json!({"spec": {"count": "x", "list": []}}));
        assert_eq!(
            errors,
            vec![
                "spec.count: Invalid value: \"string\": spec.count in body must be of type integer: \"string\"",
                "spec.list: Invalid value: []: spec.list in body should have at least 1 items",
                "spec.name: Required value",
            ]
        );
        let (_, _, errors) = run(json!({"spec": {"name": "a", "count": 4}}));
        assert_eq!(
            errors,
            vec![
                "spec.count: Invalid value: 4: spec.count in body should be less than or equal to 3"
            ]
        );
    }

    #[test]
    fn nulls_of_non_nullable_fields_are_dropped_and_unknown_fields_pruned() {
        let (v, mut pruned, errors) = run(
            json!({"spec": {"name": "a", "opt": null, "strict": null, "extra": 1, "free": {"x": 1}}, "other": true}),
        );
        assert!(errors.is_empty(), "{errors:?}");
        pruned.sort();
        assert_eq!(pruned, vec!["other".to_string(), "spec.extra".to_string()]);
        assert_eq!(v["spec"]["opt"], Value::Null);
        assert!(v["spec"].get("strict").is_none());
        assert!(v["spec"].get("extra").is_none());
        assert_eq!(v["spec"]["free"]["x"], 1);
    }
}
