//! The Jolokia access policy of the fake node's agent, as jolokia-core
//! 1.7.1 applies it (`RestrictorFactory`, `PolicyRestrictor`,
//! `RequestTypeChecker`, `MBeanAccessChecker`): the agent option
//! `policyLocation=file://…` names a `jolokia-access.xml`; no option, no
//! policy (allow all); a file that cannot be read refuses every request
//! ("Denying all access to MBeans for security reasons"). Pure, but for
//! [`Policy::load`] which reads the file.
//!
//! The rules modelled: a request type listed under `<commands>` is allowed
//! unless the `<deny>` section names the MBean and the attribute or
//! operation; a type left out (and with no `<commands>` section, none is
//! left out) is refused unless the `<allow>` section names them. MBean
//! names are exact or ObjectName patterns, attribute and operation names
//! exact or with `*`; `<attribute mode="read">` allows reading only. The
//! operation is matched as the request names it (with its signature, when
//! it has one). Refusals are Jolokia's: status 403, `java.lang.Exception`
//! and its messages (checked against the real core by
//! `tests/tests/jolokia_policy.rs`).

use serde_json::Value;

use super::jolokia::JavaError;

/// One `<mbean>` of an `<allow>` or `<deny>` section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MBeanRule {
    pub name: String,
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub operations: Vec<String>,
}

/// The restrictor an agent runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// No policy: everything is allowed.
    AllowAll,
    /// The policy file could not be read: nothing is allowed.
    DenyAll,
    /// A policy file.
    Rules {
        /// `None`: no `<commands>` section (every type allowed).
        commands: Option<Vec<String>>,
        allow: Vec<MBeanRule>,
        deny: Vec<MBeanRule>,
    },
}

/// A minimal XML element: enough for Jolokia's policy format.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
    text: String,
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Parses the document's root element (comments, the XML declaration and
/// white space between elements skipped).
fn parse_xml(text: &str) -> Result<Element, String> {
    let mut rest = text;
    let mut stack: Vec<Element> = vec![Element::default()];
    while let Some(start) = rest.find('<') {
        let before = &rest[..start];
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&unescape(before));
        }
        rest = &rest[start..];
        if let Some(after) = rest.strip_prefix("<!--") {
            let end = after.find("-->").ok_or("an unterminated comment")?;
            rest = &after[end + 3..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("<?") {
            let end = after.find("?>").ok_or("an unterminated declaration")?;
            rest = &after[end + 2..];
            continue;
        }
        let end = rest.find('>').ok_or("an unterminated tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let done = stack.pop().ok_or("an unbalanced end tag")?;
            if done.name != name.trim() {
                return Err(format!("</{}> closes <{}>", name.trim(), done.name));
            }
            stack
                .last_mut()
                .ok_or("an unbalanced end tag")?
                .children
                .push(done);
            continue;
        }
        let (tag, empty) = match tag.strip_suffix('/') {
            Some(t) => (t, true),
            None => (tag, false),
        };
        let mut words = tag.split_whitespace();
        let mut element = Element {
            name: words.next().ok_or("an empty tag")?.to_string(),
            ..Element::default()
        };
        for word in words {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| format!("attribute {word:?} without a value"))?;
            element.attributes.push((
                k.to_string(),
                unescape(v.trim_matches(|c| c == '"' || c == '\'')),
            ));
        }
        if empty {
            stack.last_mut().ok_or("no parent")?.children.push(element);
        } else {
            stack.push(element);
        }
    }
    let mut document = stack.pop().ok_or("no document")?;
    if !stack.is_empty() {
        return Err("an unclosed element".to_string());
    }
    document
        .children
        .pop()
        .filter(|_| document.children.is_empty())
        .ok_or_else(|| "not one root element".to_string())
}

fn mbean_rules(section: &Element) -> Result<Vec<MBeanRule>, String> {
    let mut rules = Vec::new();
    for mbean in &section.children {
        if mbean.name != "mbean" {
            return Err(format!("<{}> where <mbean> was expected", mbean.name));
        }
        let mut rule = MBeanRule::default();
        for part in &mbean.children {
            let value = part.text.trim().to_string();
            match part.name.as_str() {
                "name" => rule.name = value,
                "attribute" => {
                    let read_only = part
                        .attributes
                        .iter()
                        .any(|(k, v)| k == "mode" && v.eq_ignore_ascii_case("read"));
                    if !read_only {
                        rule.write.push(value.clone());
                    }
                    rule.read.push(value);
                }
                "operation" => rule.operations.push(value),
                other => return Err(format!("Tag <{other}> invalid")),
            }
        }
        if rule.name.is_empty() {
            return Err("No <name> given for <mbean>".to_string());
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// `*` matches any run of characters, as Jolokia's `wildcardMatch`.
fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

/// Whether an MBean rule's name (exact, or an ObjectName pattern) names `mbean`.
fn names(rule: &str, mbean: &str) -> bool {
    if rule == mbean {
        return true;
    }
    let (Some((rd, rp)), Some((md, mp))) = (rule.split_once(':'), mbean.split_once(':')) else {
        return false;
    };
    if !glob(rd, md) {
        return false;
    }
    let props: Vec<(&str, &str)> = mp.split(',').filter_map(|kv| kv.split_once('=')).collect();
    let mut any_more = false;
    for kv in rp.split(',') {
        if kv == "*" {
            any_more = true;
            continue;
        }
        let Some((k, v)) = kv.split_once('=') else {
            return false;
        };
        if !props.iter().any(|(pk, pv)| *pk == k && glob(v, pv)) {
            return false;
        }
    }
    any_more || props.len() == rp.split(',').count()
}

impl Policy {
    /// Parses a policy file's text; an invalid file is an error, as the
    /// agent's `SecurityException`.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let root = parse_xml(text)?;
        if root.name != "restrict" {
            return Err(format!(
                "the root element is <{}>, not <restrict>",
                root.name
            ));
        }
        let mut commands = None;
        let (mut allow, mut deny) = (Vec::new(), Vec::new());
        for section in &root.children {
            match section.name.as_str() {
                "commands" => {
                    commands.get_or_insert_with(Vec::new).extend(
                        section
                            .children
                            .iter()
                            .map(|c| c.text.trim().to_ascii_lowercase()),
                    );
                }
                "allow" | "mbeans" => allow.extend(mbean_rules(section)?),
                "deny" => deny.extend(mbean_rules(section)?),
                // Host, HTTP method and CORS checks: every request of the
                // test world comes from the Pod's loopback.
                "remote" | "http" | "cors" => {}
                other => return Err(format!("Tag <{other}> invalid")),
            }
        }
        Ok(Policy::Rules {
            commands,
            allow,
            deny,
        })
    }

    /// The agent's restrictor for its `policyLocation` option.
    pub fn load(location: Option<&str>) -> Policy {
        let Some(location) = location else {
            return Policy::AllowAll;
        };
        let path = location.strip_prefix("file://").unwrap_or(location);
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::parse(&text).unwrap_or_else(|e| {
                eprintln!("jolokia: invalid access policy {location}: {e}");
                Policy::DenyAll
            }),
            Err(e) => {
                eprintln!(
                    "jolokia: Error while accessing access restrictor at {location}. Denying all access to MBeans for security reasons. Exception: {e}"
                );
                Policy::DenyAll
            }
        }
    }

    fn type_allowed(&self, kind: &str) -> bool {
        match self {
            Policy::AllowAll => true,
            Policy::DenyAll => false,
            Policy::Rules { commands, .. } => commands
                .as_ref()
                .is_none_or(|c| c.iter().any(|c| c == kind)),
        }
    }

    /// `MBeanAccessChecker.check` for one attribute or operation.
    fn allowed(&self, kind: &str, mbean: &str, value: &str) -> bool {
        let Policy::Rules { allow, deny, .. } = self else {
            return self.type_allowed(kind);
        };
        let matches = |rules: &[MBeanRule]| {
            let rule = rules
                .iter()
                .find(|r| r.name == mbean)
                .or_else(|| rules.iter().find(|r| names(&r.name, mbean)));
            rule.is_some_and(|r| {
                let values = match kind {
                    "read" => &r.read,
                    "write" => &r.write,
                    _ => &r.operations,
                };
                values.iter().any(|v| v == value || glob(v, value))
            })
        };
        if self.type_allowed(kind) {
            !matches(deny)
        } else {
            matches(allow)
        }
    }

    /// Checks one request before the agent handles it; `attributes` gives
    /// an MBean's attributes (a read without `attribute` reads them all).
    pub fn check(
        &self,
        request: &Value,
        attributes: &dyn Fn(&str) -> Vec<&'static str>,
    ) -> Result<(), JavaError> {
        if *self == Policy::AllowAll {
            return Ok(());
        }
        let kind = request
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let mbean = request.get("mbean").and_then(Value::as_str).unwrap_or("");
        let refuse = |message: String| Err(JavaError::new(403, "java.lang.Exception", message));
        match kind.as_str() {
            "read" => {
                let names: Vec<String> = match request.get("attribute") {
                    Some(Value::String(a)) => vec![a.clone()],
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect(),
                    _ => attributes(mbean).into_iter().map(str::to_string).collect(),
                };
                for name in names {
                    if !self.allowed("read", mbean, &name) {
                        return refuse(format!(
                            "Reading attribute {name} is forbidden for MBean {mbean}"
                        ));
                    }
                }
                Ok(())
            }
            "write" => {
                let name = request
                    .get("attribute")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if self.allowed("write", mbean, name) {
                    Ok(())
                } else {
                    refuse(format!(
                        "Writing attribute {name} forbidden for MBean {mbean}"
                    ))
                }
            }
            "exec" => {
                let operation = request
                    .get("operation")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if self.allowed("exec", mbean, operation) {
                    Ok(())
                } else {
                    refuse(format!("Operation {operation} forbidden for MBean {mbean}"))
                }
            }
            other => {
                if self.type_allowed(other) {
                    Ok(())
                } else {
                    refuse(format!(
                        "Command type {} not allowed due to policy used",
                        other.to_ascii_uppercase()
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POLICY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- a comment -->
<restrict>
  <commands>
    <command>version</command>
    <command>write</command>
  </commands>
  <allow>
    <mbean>
      <name>a:type=A</name>
      <attribute mode="read">X</attribute>
      <operation>go</operation>
    </mbean>
    <mbean>
      <name>b:*</name>
      <attribute>*</attribute>
    </mbean>
  </allow>
  <deny>
    <mbean>
      <name>a:type=A</name>
      <attribute>Secret</attribute>
    </mbean>
  </deny>
</restrict>
"#;

    fn error(policy: &Policy, request: Value) -> Option<String> {
        policy
            .check(&request, &|_| vec!["X", "Y"])
            .err()
            .map(|e| format!("{} {} : {}", e.status, e.class, e.message))
    }

    #[test]
    fn allow_opens_types_left_out_and_deny_closes_listed_ones() {
        let p = Policy::parse(POLICY).unwrap();
        assert_eq!(
            error(
                &p,
                json!({"type": "read", "mbean": "a:type=A", "attribute": "X"})
            ),
            None
        );
        assert_eq!(
            error(
                &p,
                json!({"type": "read", "mbean": "a:type=A", "attribute": ["X", "Y"]})
            ),
            Some(
                "403 java.lang.Exception : Reading attribute Y is forbidden for MBean a:type=A"
                    .into()
            )
        );
        assert_eq!(
            error(&p, json!({"type": "read", "mbean": "a:type=A"})),
            Some(
                "403 java.lang.Exception : Reading attribute Y is forbidden for MBean a:type=A"
                    .into()
            )
        );
        assert_eq!(
            error(
                &p,
                json!({"type": "exec", "mbean": "a:type=A", "operation": "go"})
            ),
            None
        );
        assert_eq!(
            error(
                &p,
                json!({"type": "exec", "mbean": "a:type=A", "operation": "go(int)"})
            ),
            Some("403 java.lang.Exception : Operation go(int) forbidden for MBean a:type=A".into())
        );
        assert_eq!(
            error(
                &p,
                json!({"type": "read", "mbean": "b:type=B,name=n", "attribute": "Q"})
            ),
            None
        );
        // write is listed: only the deny section counts.
        assert_eq!(
            error(
                &p,
                json!({"type": "write", "mbean": "c:type=C", "attribute": "Q"})
            ),
            None
        );
        assert_eq!(
            error(
                &p,
                json!({"type": "write", "mbean": "a:type=A", "attribute": "Secret"})
            ),
            Some(
                "403 java.lang.Exception : Writing attribute Secret forbidden for MBean a:type=A"
                    .into()
            )
        );
        assert_eq!(error(&p, json!({"type": "version"})), None);
        assert_eq!(
            error(&p, json!({"type": "search", "mbean": "*:*"})),
            Some(
                "403 java.lang.Exception : Command type SEARCH not allowed due to policy used"
                    .into()
            )
        );
    }

    #[test]
    fn no_policy_allows_all_and_an_unreadable_one_denies_all() {
        let read = json!({"type": "read", "mbean": "a:type=A", "attribute": "X"});
        assert_eq!(error(&Policy::load(None), read.clone()), None);
        let missing = Policy::load(Some("file:///nonexistent/jolokia-access.xml"));
        assert_eq!(missing, Policy::DenyAll);
        assert!(error(&missing, read).is_some());
        assert!(error(&missing, json!({"type": "version"})).is_some());
    }

    #[test]
    fn object_name_patterns() {
        assert!(names("b:*", "b:type=B"));
        assert!(names("*:*", "a:type=A"));
        assert!(names("a:type=A,*", "a:type=A,name=n"));
        assert!(!names("a:type=A", "a:type=A,name=n"));
        assert!(!names("a:type=B,*", "a:type=A,name=n"));
        assert!(
            Policy::parse("<restrict><allow><mbean><bogus/></mbean></allow></restrict>").is_err()
        );
    }
}
