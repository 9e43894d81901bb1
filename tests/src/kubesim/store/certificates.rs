//! CertificateSigningRequests (`certificates.k8s.io/v1`) as the API
//! server serves them, around the store's generic write:
//!
//! - the strategy (pkg/registry/certificates/certificates/strategy.go):
//!   on create the requester's name, uid, groups and extra replace what
//!   the client wrote in the spec, and the status is cleared; a write to
//!   the main resource keeps spec and status (silently, as
//!   `PrepareForUpdate` does); `/status` keeps the spec and the Approved
//!   and Denied conditions; `/approval` changes the conditions only; both
//!   fill in the conditions' missing `lastUpdateTime` and
//!   `lastTransitionTime`;
//! - the validation (pkg/apis/certificates/validation/validation.go, with
//!   core's `ValidateSignerName`): the request's PEM, DER and signature
//!   ([`crate::kubesim::x509`]), usages, signer name, `expirationSeconds`,
//!   the conditions (known ones only `True`, Approved and Denied exclusive,
//!   types unique; Approved, Denied and Failed never removed; Approved and
//!   Denied only through `/approval`) and the certificate (PEM
//!   `CERTIFICATE` blocks, only through `/status`, never changed once
//!   set), each with the compatibility allowances for what a stored object
//!   already holds;
//! - the admission plugins (plugin/pkg/admission/certificates):
//!   CertificateApproval (`approve` on `signers` for the signer name, or
//!   `<domain>/*`), CertificateSigning (`sign`, when `/status` changes the
//!   certificate or the conditions) and CertificateSubjectRestriction (no
//!   `system:masters` organization for `kubernetes.io/kube-apiserver-client`).
//!
//! As upstream, nothing stops a signer from writing a certificate to a
//! request that is not approved: signers check the Approved condition
//! themselves. The 1.33 wording of the messages. Pure: the store calls
//! these under its lock.

use super::admission::Write;
use super::validation::Cause;
use super::*;
use crate::kubesim::auth::authn::UserInfo;
use crate::kubesim::auth::rbac::Attributes;
use crate::kubesim::x509;

/// The API group.
pub const GROUP: &str = "certificates.k8s.io";
/// The resource.
pub const PLURAL: &str = "certificatesigningrequests";

/// Whether `rt` is the built-in CertificateSigningRequest.
pub fn is_csr(rt: &ResourceType) -> bool {
    !rt.custom && rt.group == GROUP && rt.plural == PLURAL
}

/// The key usages a request may ask for (`allValidUsages`), sorted as
/// `sets.String.List()` lists them in messages.
const USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The signer name v1 refuses for new requests.
const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";

/// The fields that are `[]byte` in Go: base64 in JSON.
const BYTE_FIELDS: [(&str, &str); 2] = [
    (
        "/spec/request",
        "CertificateSigningRequestSpec.spec.request",
    ),
    (
        "/status/certificate",
        "CertificateSigningRequestStatus.status.certificate",
    ),
];

/// The bytes of a `[]byte` field (None: absent; undecodable counts as
/// absent, [`check_encoding`] refused it before).
fn bytes_at(obj: &Value, ptr: &str) -> Option<Vec<u8>> {
    obj.pointer(ptr)
        .and_then(Value::as_str)
        .and_then(|s| x509::go_base64_decode(s.as_bytes()).ok())
}

/// The API server decodes the body before anything else: a `[]byte`
/// field that is not base64 is a 400, as its JSON decoder words it.
pub(super) fn check_encoding(obj: &Value) -> Result<(), ApiError> {
    let refuse = |why: String| {
        ApiError::bad_request(format!(
            "CertificateSigningRequest in version \"v1\" cannot be handled as a CertificateSigningRequest: {why}"
        ))
    };
    for (ptr, go_field) in BYTE_FIELDS {
        match obj.pointer(ptr) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                x509::go_base64_decode(s.as_bytes())
                    .map_err(|at| refuse(format!("illegal base64 data at input byte {at}")))?;
            }
            Some(other) => {
                let kind = match other {
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::Array(_) => "array",
                    _ => "object",
                };
                return Err(refuse(format!(
                    "json: cannot unmarshal {kind} into Go struct field {go_field} of type []uint8"
                )));
            }
        }
    }
    Ok(())
}

/// Drops what Go's `omitempty` leaves out of the spec and status (empty
/// lists, maps, strings and bytes) and gives the status its `{}` (a
/// struct, always written).
fn normalize(obj: &mut Value) {
    for (part, fields) in [
        (
            "spec",
            &["request", "usages", "username", "uid", "groups", "extra"][..],
        ),
        ("status", &["conditions", "certificate"][..]),
    ] {
        if !obj.get(part).is_some_and(Value::is_object) {
            obj[part] = json!({});
        }
        if let Some(m) = obj[part].as_object_mut() {
            for f in fields {
                let empty = match m.get(*f) {
                    Some(Value::String(s)) => s.is_empty() && *f != "request",
                    Some(Value::Array(a)) => a.is_empty(),
                    Some(Value::Object(o)) => o.is_empty(),
                    _ => false,
                };
                if empty {
                    m.remove(*f);
                }
            }
        }
    }
}

/// `PrepareForCreate`: the requester (None: the cluster's own writes,
/// which carry no user) replaces what the client claimed, and a new
/// request is never approved nor issued.
pub(super) fn prepare_for_create(obj: &mut Value, user: Option<&UserInfo>) {
    normalize(obj);
    let Some(spec) = obj["spec"].as_object_mut() else {
        return;
    };
    for f in ["username", "uid", "groups", "extra"] {
        spec.remove(f);
    }
    if let Some(u) = user {
        spec.insert("username".into(), json!(u.name));
        spec.insert("uid".into(), json!(u.uid));
        spec.insert("groups".into(), json!(u.groups));
        spec.insert("extra".into(), json!(u.extra));
    }
    obj["status"] = json!({});
    normalize(obj);
}

fn conditions(obj: &Value) -> &[Value] {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The positions of a condition type.
fn indices(obj: &Value, kind: &str) -> Vec<usize> {
    (conditions(obj).iter().enumerate())
        .filter(|(_, c)| text(c, "type") == kind)
        .map(|(i, _)| i)
        .collect()
}

/// `preserveConditionInstances`: `/status` writes back the old Approved
/// (or Denied) conditions when it has as many; adding or removing one is
/// left for validation to refuse.
fn preserve_condition_instances(new: &mut Value, old: &Value, kind: &str) {
    let (from, to) = (indices(old, kind), indices(new, kind));
    if from.len() != to.len() {
        return;
    }
    let olds = conditions(old).to_vec();
    if let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for (o, n) in from.into_iter().zip(to) {
            list[n] = olds[o].clone();
        }
    }
}

/// `populateConditionTimestamps`: a condition without `lastUpdateTime`
/// gets now; without `lastTransitionTime`, the old one of a condition of
/// the same type and status, else now.
fn populate_condition_timestamps(new: &mut Value, old: &Value, now: &str) {
    let olds = conditions(old).to_vec();
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for c in list.iter_mut().filter_map(Value::as_object_mut) {
        let unset = |c: &Map<String, Value>, f: &str| c.get(f).is_none_or(Value::is_null);
        if unset(c, "lastUpdateTime") {
            c.insert("lastUpdateTime".into(), json!(now));
        }
        if unset(c, "lastTransitionTime") {
            let same = |o: &&Value| {
                o.get("type") == c.get("type")
                    && o.get("status") == c.get("status")
                    && o.get("lastTransitionTime").is_some_and(|t| !t.is_null())
            };
            let at = olds
                .iter()
                .find(same)
                .and_then(|o| o.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            c.insert("lastTransitionTime".into(), at);
        }
    }
}

fn set_or_remove(obj: &mut Value, key: &str, from: Option<&Value>) {
    match from {
        Some(v) => obj[key] = v.clone(),
        None => {
            if let Some(o) = obj.as_object_mut() {
                o.remove(key);
            }
        }
    }
}

/// `PrepareForUpdate` of the main resource, `/status` and `/approval`:
/// `new` (the client's object) keeps its metadata and gets the spec, and
/// the status but what the subresource may change, from `old`.
pub(super) fn prepare_for_update(sub: Subresource, new: &mut Value, old: &Value, now: &str) {
    set_or_remove(new, "spec", old.get("spec"));
    match sub {
        Subresource::Main => set_or_remove(new, "status", old.get("status")),
        Subresource::Status => {
            normalize(new);
            preserve_condition_instances(new, old, APPROVED);
            preserve_condition_instances(new, old, DENIED);
            populate_condition_timestamps(new, old, now);
        }
        Subresource::Approval => {
            normalize(new);
            populate_condition_timestamps(new, old, now);
            let wanted = new.pointer("/status/conditions").cloned();
            let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
            set_or_remove(&mut status, "conditions", wanted.as_ref());
            new["status"] = status;
        }
    }
    normalize(new);
}

/// What validation tolerates: what each path may set, and the flaws a
/// stored object already has (`certificateValidationOptions`).
#[derive(Debug, Default, Clone, Copy)]
struct Options {
    setting_approval_conditions: bool,
    setting_certificate: bool,
    both_approved_and_denied: bool,
    legacy_signer_name: bool,
    duplicate_condition_types: bool,
    empty_condition_type: bool,
    arbitrary_certificate: bool,
    unknown_usages: bool,
    duplicate_usages: bool,
}

fn usages(obj: &Value) -> Vec<&str> {
    obj.pointer("/spec/usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|u| u.as_str().unwrap_or_default())
        .collect()
}

fn has_duplicates<'a>(items: impl IntoIterator<Item = &'a str>) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    items.into_iter().any(|i| !seen.insert(i))
}

fn certificate_valid(obj: &Value) -> bool {
    bytes_at(obj, "/status/certificate")
        .filter(|b| !b.is_empty())
        .is_none_or(|b| x509::check_certificates(&b).is_ok())
}

/// `getValidationOptions`: allowances from the stored object (`old`;
/// None on create), none for what a subresource may set.
fn options(new: &Value, old: Option<&Value>) -> Options {
    let Some(old) = old else {
        return Options::default();
    };
    let types = || conditions(old).iter().map(|c| text(c, "type"));
    let unchanged = bytes_at(new, "/status/certificate") == bytes_at(old, "/status/certificate");
    Options {
        both_approved_and_denied: types().any(|t| t == APPROVED) && types().any(|t| t == DENIED),
        legacy_signer_name: old.pointer("/spec/signerName").and_then(Value::as_str)
            == Some(LEGACY_UNKNOWN),
        duplicate_condition_types: has_duplicates(types()),
        empty_condition_type: types().any(str::is_empty),
        arbitrary_certificate: unchanged || !certificate_valid(old),
        unknown_usages: usages(old).iter().any(|u| !USAGES.contains(u)),
        duplicate_usages: has_duplicates(usages(old)),
        ..Options::default()
    }
}

fn cause(field: &str, reason: &'static str, detail: String) -> Cause {
    (field.to_string(), reason, format!("{field}: {detail}"))
}

/// How Go's `%#v` prints a `[]byte` in an Invalid message.
fn go_bytes(b: Option<&[u8]>) -> String {
    match b {
        None => "[]byte(nil)".into(),
        Some(b) => format!(
            "[]byte{{{}}}",
            b.iter()
                .map(|x| format!("0x{x:x}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn quoted(list: &[&str]) -> String {
    list.iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const DNS_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn dns_label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `IsDNS1123Label`'s errors.
fn dns_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !dns_label_chars(s) {
        out.push(DNS_LABEL.to_string());
    }
    out
}

/// `IsDNS1123Subdomain`'s errors.
fn dns_subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if !s.split('.').all(dns_label_chars) {
        out.push(DNS_SUBDOMAIN.to_string());
    }
    out
}

/// Core's `ValidateSignerName`: `<domain with a dot>/<path>`, the domain
/// of DNS labels, the path of DNS subdomains separated by dots.
fn signer_name(name: &str) -> Vec<Cause> {
    const FIELD: &str = "spec.signerName";
    let invalid = |value: &str, detail: String| {
        cause(
            FIELD,
            "FieldValueInvalid",
            format!("Invalid value: {value:?}: {detail}"),
        )
    };
    let too_long = |max: usize| {
        cause(
            FIELD,
            "FieldValueTooLong",
            format!("Too long: may not be more than {max} bytes"),
        )
    };
    if name.is_empty() {
        return vec![cause(FIELD, "FieldValueRequired", "Required value".into())];
    }
    let segments: Vec<&str> = name.split('/').collect();
    let [domain, path] = segments[..] else {
        return vec![invalid(
            name,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'"
                .into(),
        )];
    };
    let mut out = Vec::new();
    if domain.len() > 253 {
        out.push(too_long(253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((label, errs)) = labels
        .iter()
        .map(|l| (l, dns_label_errors(l)))
        .find(|(_, e)| !e.is_empty())
    {
        for e in errs {
            out.push(invalid(domain, format!("validating label {label:?}: {e}")));
        }
    }
    if labels.len() < 2 {
        out.push(invalid(
            domain,
            "should be a domain with at least two segments separated by dots".into(),
        ));
    }
    if let Some((label, errs)) = path
        .split('.')
        .map(|l| (l, dns_subdomain_errors(l)))
        .find(|(_, e)| !e.is_empty())
    {
        for e in errs {
            out.push(invalid(path, format!("validating label {label:?}: {e}")));
        }
    }
    if name.len() > 253 + 63 + 1 + 253 + 1 {
        out.push(too_long(571));
    }
    out
}

/// `validateConditions`.
fn validate_conditions(obj: &Value, opts: Options) -> Vec<Cause> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(obj).iter().enumerate() {
        let at = format!("status.conditions[{i}]");
        let kind = text(c, "type");
        if kind.is_empty() && !opts.empty_condition_type {
            out.push(cause(
                &format!("{at}.type"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        }
        let allowed: &[&str] = if [APPROVED, DENIED, FAILED].contains(&kind) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status = text(c, "status");
        if status.is_empty() {
            out.push(cause(
                &format!("{at}.status"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        } else if !allowed.contains(&status) {
            out.push(cause(
                &format!("{at}.status"),
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {status:?}: supported values: {}",
                    quoted(allowed)
                ),
            ));
        }
        if !opts.both_approved_and_denied {
            // 1.33's path; later releases name `status.conditions`.
            let clash = match kind {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                out.push(cause(
                    &format!("{at}.type"),
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {kind:?}: Approved and Denied conditions are mutually exclusive"
                    ),
                ));
            }
        }
        if !opts.duplicate_condition_types && !seen.insert(kind) {
            out.push(cause(
                &format!("{at}.type"),
                "FieldValueDuplicate",
                format!("Duplicate value: {kind:?}"),
            ));
        }
    }
    out
}

/// `validateCertificateSigningRequest`.
fn validate(obj: &Value, opts: Options) -> Vec<Cause> {
    let mut out = Vec::new();
    let request = bytes_at(obj, "/spec/request");
    if let Err(e) = x509::parse_csr(request.as_deref().unwrap_or_default()) {
        out.push(cause(
            "spec.request",
            "FieldValueInvalid",
            format!("Invalid value: {}: {e}", go_bytes(request.as_deref())),
        ));
    }
    let usages = usages(obj);
    if usages.is_empty() {
        out.push(cause(
            "spec.usages",
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    if !opts.unknown_usages {
        for (i, u) in usages.iter().enumerate() {
            if !USAGES.contains(u) {
                out.push(cause(
                    &format!("spec.usages[{i}]"),
                    "FieldValueNotSupported",
                    format!(
                        "Unsupported value: {u:?}: supported values: {}",
                        quoted(&USAGES)
                    ),
                ));
            }
        }
    }
    if !opts.duplicate_usages {
        let mut seen = std::collections::BTreeSet::new();
        for (i, u) in usages.iter().enumerate() {
            if !seen.insert(*u) {
                out.push(cause(
                    &format!("spec.usages[{i}]"),
                    "FieldValueDuplicate",
                    format!("Duplicate value: {u:?}"),
                ));
            }
        }
    }
    let signer = obj
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if signer == LEGACY_UNKNOWN && !opts.legacy_signer_name {
        out.push(cause(
            "spec.signerName",
            "FieldValueInvalid",
            format!(
                "Invalid value: {signer:?}: the legacy signerName is not allowed via this API version"
            ),
        ));
    } else {
        out.extend(signer_name(signer));
    }
    if let Some(seconds) = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .filter(|s| *s < 600)
    {
        out.push(cause(
            "spec.expirationSeconds",
            "FieldValueInvalid",
            format!(
                "Invalid value: {seconds}: may not specify a duration less than 600 seconds (10 minutes)"
            ),
        ));
    }
    out.extend(validate_conditions(obj, opts));
    if !opts.arbitrary_certificate
        && let Some(cert) = bytes_at(obj, "/status/certificate").filter(|c| !c.is_empty())
        && let Err(e) = x509::check_certificates(&cert)
    {
        out.push(cause(
            "status.certificate",
            "FieldValueInvalid",
            format!("Invalid value: \"<certificate data>\": {e}"),
        ));
    }
    out
}

/// The causes of an invalid new request.
pub(super) fn validate_create(obj: &Value) -> Vec<Cause> {
    validate(obj, options(obj, None))
}

/// The causes of an invalid update through the main resource, `/status`
/// or `/approval` (`validateCertificateSigningRequestUpdate`).
pub(super) fn validate_update(sub: Subresource, old: &Value, new: &Value) -> Vec<Cause> {
    let mut opts = options(new, Some(old));
    match sub {
        Subresource::Main => {}
        Subresource::Status => opts.setting_certificate = true,
        Subresource::Approval => opts.setting_approval_conditions = true,
    }
    let mut out = validate(new, opts);
    let forbidden = |field: &str, detail: String| {
        cause(field, "FieldValueForbidden", format!("Forbidden: {detail}"))
    };
    for kind in [APPROVED, DENIED, FAILED] {
        if indices(new, kind).len() < indices(old, kind).len() {
            out.push(forbidden(
                "status.conditions",
                format!("updates may not remove a condition of type {kind:?}"),
            ));
        }
    }
    if !opts.setting_approval_conditions {
        for kind in [APPROVED, DENIED] {
            let pick = |o: &Value| -> Vec<Value> {
                (conditions(o).iter())
                    .filter(|c| text(c, "type") == kind)
                    .cloned()
                    .collect()
            };
            let (was, now) = (pick(old), pick(new));
            if now.len() > was.len() {
                out.push(forbidden(
                    "status.conditions",
                    format!("updates may not add a condition of type {kind:?}"),
                ));
            } else if now.len() == was.len() && now != was {
                // Go follows with a go-cmp diff of the conditions.
                out.push(forbidden(
                    "status.conditions",
                    format!("updates may not modify a condition of type {kind:?}"),
                ));
            }
        }
    }
    let (was, now) = (
        bytes_at(old, "/status/certificate").unwrap_or_default(),
        bytes_at(new, "/status/certificate").unwrap_or_default(),
    );
    if was != now {
        if !opts.setting_certificate {
            out.push(forbidden(
                "status.certificate",
                "updates may not set certificate content".into(),
            ));
        } else if !was.is_empty() {
            out.push(forbidden(
                "status.certificate",
                "updates may not modify existing certificate content".into(),
            ));
        }
    }
    out
}

/// `admission.NewForbidden` for a request.
fn forbidden(name: &str, why: String) -> ApiError {
    ApiError {
        details: Some(json!({"name": name, "group": GROUP, "kind": PLURAL})),
        ..ApiError::forbidden(format!("{PLURAL}.{GROUP} {name:?} is forbidden: {why}"))
    }
}

/// `IsAuthorizedForSignerName`: `verb` on the `signers` resource named
/// after the signer, or after its domain with `/*`.
fn authorized_for_signer(adm: &Admission, plugin: &'static str, verb: &str, signer: &str) -> bool {
    let attributes = |name: &str| {
        let mut a = Attributes::resource(verb, GROUP, "signers", "").named(name);
        a.api_version = "*".into();
        a
    };
    let domain = signer.split('/').next().unwrap_or_default();
    adm.check(plugin, attributes(signer)) || adm.check(plugin, attributes(&format!("{domain}/*")))
}

fn signer_of(obj: Option<&Value>) -> &str {
    obj.and_then(|o| o.pointer("/spec/signerName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The admission plugins of certificates on a client's write (`sub`: the
/// subresource's name, "" for the main resource).
pub(super) fn admit(w: &Write, sub: &str, adm: &Admission) -> Result<(), ApiError> {
    match (w.operation, sub) {
        ("CREATE", "") => {
            // CertificateSubjectRestriction.
            const CLIENT: &str = "kubernetes.io/kube-apiserver-client";
            if signer_of(w.object) != CLIENT {
                return Ok(());
            }
            let pem = w
                .object
                .and_then(|o| bytes_at(o, "/spec/request"))
                .unwrap_or_default();
            let csr = x509::parse_csr(&pem)
                .map_err(|e| forbidden(w.name, format!("failed to parse CSR: {e}")))?;
            if csr.organizations.iter().any(|o| o == "system:masters") {
                return Err(forbidden(
                    w.name,
                    format!("use of {CLIENT} signer with system:masters group is not allowed"),
                ));
            }
            Ok(())
        }
        ("UPDATE", "approval") => {
            // CertificateApproval: judged on the stored request's signer.
            let signer = signer_of(w.old);
            if authorized_for_signer(adm, "CertificateApproval", "approve", signer) {
                Ok(())
            } else {
                Err(forbidden(
                    w.name,
                    format!("user not permitted to approve requests with signerName {signer:?}"),
                ))
            }
        }
        ("UPDATE", "status") => {
            // CertificateSigning: only when the certificate or the
            // conditions change.
            let part = |o: Option<&Value>, p: &str| o.and_then(|o| o.pointer(p)).cloned();
            let same = ["/status/certificate", "/status/conditions"]
                .iter()
                .all(|p| part(w.object, p) == part(w.old, p));
            let signer = signer_of(w.old);
            if same || authorized_for_signer(adm, "CertificateSigning", "sign", signer) {
                Ok(())
            } else {
                Err(forbidden(
                    w.name,
                    format!("user not permitted to sign requests with signerName {signer:?}"),
                ))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn request_b64() -> String {
        let key = KeyPair::generate().unwrap();
        let pem = CertificateParams::new(vec!["c-0".into()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        x509::go_base64_encode(pem.as_bytes())
    }

    fn csr() -> Value {
        json!({"metadata": {"name": "c-0"}, "spec": {"request": request_b64(),
            "signerName": "cassandra.rook.io/member", "usages": ["digital signature", "server auth"]}})
    }

    fn messages(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.2.as_str()).collect()
    }

    #[test]
    fn the_requester_replaces_what_the_client_claims() {
        let mut obj = csr();
        obj["spec"]["username"] = json!("system:admin");
        obj["spec"]["groups"] = json!(["system:masters"]);
        obj["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        let user = UserInfo {
            name: "system:serviceaccount:db:member".into(),
            uid: "u-1".into(),
            groups: vec!["system:serviceaccounts".into()],
            extra: [(
                "authentication.kubernetes.io/pod-name".to_string(),
                vec!["c-0".to_string()],
            )]
            .into(),
        };
        prepare_for_create(&mut obj, Some(&user));
        assert_eq!(obj["spec"]["username"], "system:serviceaccount:db:member");
        assert_eq!(obj["spec"]["uid"], "u-1");
        assert_eq!(obj["spec"]["groups"], json!(["system:serviceaccounts"]));
        assert_eq!(
            obj["spec"]["extra"],
            json!({"authentication.kubernetes.io/pod-name": ["c-0"]})
        );
        assert_eq!(obj["status"], json!({}));
        assert_eq!(validate_create(&obj), vec![]);
        let mut anonymous = csr();
        anonymous["spec"]["username"] = json!("someone");
        prepare_for_create(&mut anonymous, None);
        assert!(anonymous["spec"].get("username").is_none());
    }

    #[test]
    fn the_spec_is_validated_as_upstream() {
        let mut obj = csr();
        obj["spec"]["request"] = json!(x509::go_base64_encode(b"-"));
        obj["spec"]["usages"] = json!(["server auth", "flying", "server auth"]);
        obj["spec"]["signerName"] = json!("example/Signer");
        obj["spec"]["expirationSeconds"] = json!(599);
        assert_eq!(
            messages(&validate_create(&obj)),
            vec![
                "spec.request: Invalid value: []byte{0x2d}: PEM block type must be CERTIFICATE REQUEST",
                &format!(
                    "spec.usages[1]: Unsupported value: \"flying\": supported values: {}",
                    quoted(&USAGES)
                ),
                "spec.usages[2]: Duplicate value: \"server auth\"",
                "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots",
                &format!(
                    "spec.signerName: Invalid value: \"Signer\": validating label \"Signer\": {DNS_SUBDOMAIN}"
                ),
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)",
            ]
        );
        let mut bare = csr();
        bare["spec"] = json!({});
        assert_eq!(
            messages(&validate_create(&bare)),
            vec![
                "spec.request: Invalid value: []byte(nil): PEM block type must be CERTIFICATE REQUEST",
                "spec.usages: Required value",
                "spec.signerName: Required value",
            ]
        );
        assert_eq!(
            messages(&signer_name("a/b/c")),
            vec![
                "spec.signerName: Invalid value: \"a/b/c\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
            ]
        );
        assert_eq!(
            check_encoding(&json!({"spec": {"request": "!!"}}))
                .unwrap_err()
                .message,
            "CertificateSigningRequest in version \"v1\" cannot be handled as a CertificateSigningRequest: illegal base64 data at input byte 0"
        );
    }

    #[test]
    fn approval_changes_conditions_only_and_status_keeps_them() {
        let now = "2026-01-01T00:00:00Z";
        let mut old = csr();
        prepare_for_create(&mut old, None);
        let mut approve = old.clone();
        approve["spec"]["signerName"] = json!("other.io/x");
        approve["status"] = json!({"certificate": "eA==", "conditions": [{"type": "Approved", "status": "True", "reason": "R"}]});
        prepare_for_update(Subresource::Approval, &mut approve, &old, now);
        assert_eq!(approve["spec"], old["spec"]);
        assert_eq!(
            approve["status"],
            json!({"conditions": [{"type": "Approved", "status": "True", "reason": "R",
                "lastUpdateTime": now, "lastTransitionTime": now}]})
        );
        assert_eq!(
            validate_update(Subresource::Approval, &old, &approve),
            vec![]
        );
        // Through /status, the Approved condition is the stored one and a
        // Denied one may not be added.
        let mut status = approve.clone();
        status["status"]["conditions"] = json!([
            {"type": "Approved", "status": "True", "reason": "changed"},
            {"type": "Denied", "status": "True"}]);
        prepare_for_update(Subresource::Status, &mut status, &approve, now);
        assert_eq!(
            status["status"]["conditions"][0],
            approve["status"]["conditions"][0]
        );
        assert_eq!(
            messages(&validate_update(Subresource::Status, &approve, &status)),
            vec![
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
                "status.conditions: Forbidden: updates may not add a condition of type \"Denied\"",
            ]
        );
        // The main resource keeps spec and status.
        let mut main = approve.clone();
        main["status"] = json!({});
        main["metadata"]["labels"] = json!({"a": "b"});
        prepare_for_update(Subresource::Main, &mut main, &approve, now);
        assert_eq!(main["status"], approve["status"]);
        assert_eq!(main["metadata"]["labels"], json!({"a": "b"}));
    }
}
