//! The main configuration file (cassandra.yaml, scylla.yaml): the image's
//! default file with the member's identity set and the rack's overrides
//! merged on top, keeping one name of each renamed setting. Pure.
//!
//! The file goes through a YAML value and back, so the default file's
//! comments and formatting are not kept; every key, its position, its
//! value and its type are (an int stays an int, `null` stays null, a quoted
//! `'7000'` stays a string), for Cassandra's YAML 1.1 reader too
//! ([`super::emit`]).

use crds::overrides::{RefusedKey, RenamedSetting};
use serde_norway::{Mapping, Value};

use super::emit::mapping_to_yaml;
use super::{Overrides, RenderError};

/// The class Cassandra and Scylla ship as their seed provider.
pub const SIMPLE_SEED_PROVIDER: &str = "org.apache.cassandra.locator.SimpleSeedProvider";
/// The snitch that reads cassandra-rackdc.properties and gossips it.
pub const SNITCH: &str = "GossipingPropertyFileSnitch";
/// Clients connect on every interface of the Pod.
pub const RPC_ADDRESS: &str = "0.0.0.0";

/// Keys that conflict with an address the operator sets: Cassandra refuses
/// to start with both `listen_address` and `listen_interface` (and the same
/// for rpc). A default file that sets one loses it.
const CONFLICTING_KEYS: &[&str] = &["listen_interface", "rpc_interface"];

/// The member's identity, as written into the main file.
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    pub cluster_name: &'a str,
    pub listen_address: String,
    pub broadcast_address: String,
    pub seeds: String,
}

/// Renders the main file: defaults, identity, overrides. `renamed`: the
/// settings whose two names may not stand side by side in this file
/// (Cassandra: [`crds::overrides::RENAMED_SETTINGS`]; ScyllaDB: none).
/// `refused`: the settings this cluster's overrides may not set besides
/// [`crds::overrides::REFUSED_KEYS`] ([`crds::overrides::refused_by_cluster`]:
/// those the release no longer reads, the authentication settings when
/// clients must log in). `managed`: top-level keys the operator sets whole,
/// over the defaults and the overrides (the encryption settings,
/// [`super::tls`], and the authentication settings, [`super::auth`]).
/// Every check runs before anything is returned, so an error leaves nothing
/// half-rendered.
pub fn render_main_file(
    file_name: &str,
    defaults: &str,
    identity: &Identity<'_>,
    overrides: Option<&Overrides>,
    renamed: &[RenamedSetting],
    refused: &[&'static RefusedKey],
    managed: Mapping,
) -> Result<String, RenderError> {
    let mut doc = parse_defaults(file_name, defaults)?;
    let fragment = match overrides {
        Some(o) => Some(parse_overrides(file_name, o, renamed, refused)?),
        None => None,
    };
    apply_identity(file_name, &mut doc, identity)?;
    if let Some(fragment) = fragment {
        drop_other_names(&mut doc, &fragment, renamed);
        deep_merge(&mut doc, fragment);
    }
    // The operator's own settings (TLS, authentication) replace whole
    // keys, last: neither the image's defaults nor an override can weaken
    // them.
    for (key, value) in managed {
        doc.insert(key, value);
    }
    emit_main_file(file_name, &doc)
}

/// A rendered main file with other seeds, the rest as it was: what a
/// running member writes when the addresses it should list change
/// (`crate::member::seeds`; Cassandra reads the file again on
/// `reloadSeeds`). The file is one this module rendered, so parsing it and
/// emitting it again reproduces it but for the seeds.
pub fn with_seeds(file_name: &str, rendered: &str, seeds: &str) -> Result<String, RenderError> {
    let mut doc = parse_defaults(file_name, rendered)?;
    set_seeds(file_name, &mut doc, seeds)?;
    emit_main_file(file_name, &doc)
}

fn emit_main_file(file_name: &str, doc: &Mapping) -> Result<String, RenderError> {
    let body = mapping_to_yaml(doc).map_err(|source| RenderError::WriteYaml {
        file: file_name.to_string(),
        source,
    })?;
    Ok(format!(
        "# Rendered by cassandra-operator from the image's default {file_name}:\n\
         # the member's identity set, the rack's overrides merged on top.\n\
         # The default file's comments are not kept.\n{body}"
    ))
}

fn parse_defaults(file_name: &str, text: &str) -> Result<Mapping, RenderError> {
    let value: Value =
        serde_norway::from_str(text).map_err(|source| RenderError::ParseDefaults {
            file: file_name.to_string(),
            source,
        })?;
    match value {
        Value::Mapping(m) => Ok(m),
        other => Err(RenderError::DefaultsNotMapping {
            file: file_name.to_string(),
            found: kind(&other),
        }),
    }
}

/// Parses the rack's fragment. Empty (or only comments) is no override.
fn parse_overrides(
    file_name: &str,
    overrides: &Overrides,
    renamed: &[RenamedSetting],
    refused: &[&'static RefusedKey],
) -> Result<Mapping, RenderError> {
    let origin = overrides.origin.describe(file_name);
    let value: Value =
        serde_norway::from_str(&overrides.text).map_err(|source| RenderError::ParseOverrides {
            origin: origin.clone(),
            source,
        })?;
    let fragment = match value {
        Value::Mapping(m) => m,
        Value::Null => Mapping::new(),
        other => {
            return Err(RenderError::OverridesNotMapping {
                origin,
                found: kind(&other),
            });
        }
    };
    for key in fragment.keys() {
        let Some(name) = key.as_str() else {
            return Err(RenderError::OverrideKeyNotString {
                origin,
                key: serde_norway::to_string(key)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            });
        };
        // The member's identity, what would defeat the safety rules, what
        // the release removed and what the Cluster's security makes the
        // operator's (the lists the controller reports from).
        if let Some(refusal) = crds::overrides::refused_for(name, refused) {
            return Err(RenderError::OverrideRefusedKey {
                origin,
                key: name.to_string(),
                reason: refusal.reason,
            });
        }
    }
    // Which of two names the user meant is not ours to guess.
    if let Some(twice) = renamed
        .iter()
        .find(|r| level(&fragment, r.section).is_some_and(|m| holds_both(m, r)))
    {
        return Err(RenderError::OverrideSetsBothNames {
            origin,
            old: twice.old.to_string(),
            new: twice.new.to_string(),
        });
    }
    Ok(fragment)
}

/// The mapping a renamed setting's names sit in: the file itself, or one of
/// its sections.
fn level<'a>(doc: &'a Mapping, section: Option<&str>) -> Option<&'a Mapping> {
    match section {
        None => Some(doc),
        Some(section) => doc.get(section).and_then(Value::as_mapping),
    }
}

fn holds_both(map: &Mapping, renamed: &RenamedSetting) -> bool {
    map.contains_key(renamed.old) && map.contains_key(renamed.new)
}

/// Removes from the rendered file the other name of each renamed setting
/// the fragment sets, so that the merge leaves one name of it: the
/// fragment's, with the fragment's value.
///
/// Dropping the default file's entry rather than translating the
/// fragment's (`read_request_timeout_in_ms: 10000` to
/// `read_request_timeout: 10000ms`): Cassandra 4.1 and 5.0 read an old name
/// alone and convert its value with the old unit themselves (the converter
/// of its `@Replaces`; `deprecated = true` only logs a warning), so the
/// file says what the user wrote and no unit rule is copied here; the
/// default's value is the release's default, which the fragment overrides
/// anyway. Only the pairs of the table go. A pair of one release only (5.0
/// made 4.1's `compaction_tombstone_warning_threshold` an old name of
/// `partition_tombstones_warn_threshold`) could drop a setting the other
/// release keeps apart; on the real default files it cannot: where one
/// release's file holds a name of such a pair, that file never mentions
/// the other name (`crds` tests it), so a fragment naming it is one that
/// release refuses anyway.
fn drop_other_names(doc: &mut Mapping, fragment: &Mapping, renamed: &[RenamedSetting]) {
    for r in renamed {
        let Some(set) = level(fragment, r.section) else {
            continue;
        };
        let other = if set.contains_key(r.old) {
            r.new
        } else if set.contains_key(r.new) {
            r.old
        } else {
            continue;
        };
        let below = match r.section {
            None => Some(&mut *doc),
            Some(section) => doc.get_mut(section).and_then(Value::as_mapping_mut),
        };
        if let Some(below) = below {
            below.shift_remove(other);
        }
    }
}

fn apply_identity(
    file_name: &str,
    doc: &mut Mapping,
    identity: &Identity<'_>,
) -> Result<(), RenderError> {
    for key in CONFLICTING_KEYS {
        if doc.get(*key).is_some_and(|v| !v.is_null()) {
            doc.shift_remove(*key);
        }
    }
    set(doc, "cluster_name", identity.cluster_name);
    set(doc, "listen_address", &identity.listen_address);
    set(doc, "broadcast_address", &identity.broadcast_address);
    set(doc, "rpc_address", RPC_ADDRESS);
    set(doc, "broadcast_rpc_address", &identity.broadcast_address);
    set(doc, "endpoint_snitch", SNITCH);
    set_seeds(file_name, doc, &identity.seeds)
}

/// Sets a key in place (or at the end when the default file has none).
fn set(doc: &mut Mapping, key: &str, value: &str) {
    doc.insert(Value::from(key), Value::from(value));
}

/// Sets `seed_provider[0].parameters[0].seeds`, keeping the provider's class
/// and any other parameter.
fn set_seeds(file_name: &str, doc: &mut Mapping, seeds: &str) -> Result<(), RenderError> {
    let malformed = |reason: &'static str| RenderError::MalformedSeedProvider {
        file: file_name.to_string(),
        reason,
    };
    let provider = doc
        .entry(Value::from("seed_provider"))
        .or_insert(Value::Null);
    if provider.is_null() {
        *provider = Value::Sequence(vec![Value::Mapping(Mapping::new())]);
    }
    let Value::Sequence(providers) = provider else {
        return Err(malformed("it is not a list"));
    };
    if providers.is_empty() {
        providers.push(Value::Mapping(Mapping::new()));
    }
    let Value::Mapping(first) = &mut providers[0] else {
        return Err(malformed("its first entry is not a mapping"));
    };
    match first.get("class_name") {
        None | Some(Value::Null) => {
            first.insert(Value::from("class_name"), Value::from(SIMPLE_SEED_PROVIDER));
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err(malformed("its class_name is not a string")),
    }
    let parameters = first
        .entry(Value::from("parameters"))
        .or_insert(Value::Null);
    if parameters.is_null() {
        *parameters = Value::Sequence(vec![Value::Mapping(Mapping::new())]);
    }
    let Value::Sequence(parameters) = parameters else {
        return Err(malformed("its parameters are not a list"));
    };
    if parameters.is_empty() {
        parameters.push(Value::Mapping(Mapping::new()));
    }
    let Value::Mapping(parameters) = &mut parameters[0] else {
        return Err(malformed("its first parameters entry is not a mapping"));
    };
    parameters.insert(Value::from("seeds"), Value::from(seeds));
    Ok(())
}

/// Merges `top` into `base`: mappings merge key by key, recursively; any
/// other value (scalar, list, null) replaces the one below.
pub fn deep_merge(base: &mut Mapping, top: Mapping) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(Value::Mapping(below)), Value::Mapping(above)) => deep_merge(below, above),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// A word for the kind of a YAML value, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Sequence(_) => "list",
        Value::Mapping(_) => "mapping",
        Value::Tagged(_) => "tagged value",
    }
}
