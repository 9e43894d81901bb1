//! Evaluation of a CRD's CEL rules (`x-kubernetes-validations`) the way the
//! API server runs them on create (`old` absent) and update (transition
//! rules with `oldSelf`), through kube-rs's client-side CEL evaluator. Pure.

use serde_json::Value;

/// One failed rule: `<field path>: <message>`.
pub type CelError = String;

/// Evaluates every rule of `schema` on `object` (and `old`, for transition
/// rules). Returns the failures as `<field>: <message>` lines.
pub fn check(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<CelError> {
    match kube_cel::Validator::new().validate(schema, object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}
