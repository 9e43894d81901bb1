//! Password authentication (`spec.security.authentication`): the settings
//! of [`crds::contract::auth::SETTINGS`], the same names in cassandra.yaml
//! (3.11 to 5.0) and scylla.yaml. Pure.
//!
//! While authentication is on they are the operator's: they replace the
//! image's defaults (scylla.yaml has them only as comments, so they are
//! added), and a rack's overrides may not set them
//! ([`crds::overrides::AUTHENTICATION_KEYS`]: refused by the sidecar and
//! reported by the controller, as the member's identity is), so that an
//! override can neither let clients in without a password nor lock the
//! operator out of the superuser it keeps. Off, nothing is written: the
//! defaults and the overrides stand.

use serde_norway::{Mapping, Value};

/// The main file's authentication settings: the three of
/// [`crds::contract::auth::SETTINGS`] when clients must log in, none
/// otherwise.
pub fn settings(authentication: bool) -> Mapping {
    if !authentication {
        return Mapping::new();
    }
    crds::contract::auth::SETTINGS
        .iter()
        .map(|(key, value)| (Value::from(*key), Value::from(*value)))
        .collect()
}
