//! Evaluation of a CRD's CEL rules (`x-kubernetes-validations`) the way the
//! API server runs them on create (`old` absent) and update (transition
//! rules with `oldSelf`), through kube-rs's client-side CEL evaluator. Pure.

use serde_json::Value;

thread_local! {
    /// The CEL context with Kubernetes' functions, registered once a thread.
    static VALIDATOR: kube_cel::Validator = kube_cel::Validator::new();
}

/// One failed rule: `<field path>: <message>`.
pub type CelError = String;

/// Evaluates every rule of `schema` on `object` (and `old`, for transition
/// rules). Returns the failures as `<field>: <message>` lines.
pub fn check(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<CelError> {
    lines(VALIDATOR.with(|v| v.validate(schema, object, old)))
}

/// [`check`] with the rules compiled beforehand ([`kube_cel::compile_schema`]):
/// the same evaluation without parsing every rule again.
pub fn check_compiled(
    compiled: &kube_cel::CompiledSchema,
    object: &Value,
    old: Option<&Value>,
) -> Vec<CelError> {
    lines(VALIDATOR.with(|v| v.validate_compiled(compiled, object, old)))
}

/// A validation's failures, one line each.
fn lines(result: Result<(), kube_cel::ValidationErrors>) -> Vec<CelError> {
    match result {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}
