//! `cassandra.yaml` for a test node: the release's default file with the
//! addresses and ports changed, so that nodes share the host's loopback.
//! Pure.
//!
//! The official image's entrypoint changes the same keys with `sed`
//! (`listen_address`, `rpc_address`, the seeds); the ports are the test
//! world's own, as a user could set them. Every other key keeps the
//! release's default value (the comments are lost: the file is re-emitted).

use serde_norway::{Mapping, Value};

use super::Error;

/// Where a test node listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddresses {
    /// `listen_address` and `rpc_address`.
    pub address: String,
    /// `storage_port` (gossip and streaming).
    pub storage_port: u16,
    /// `native_transport_port` (CQL).
    pub native_port: u16,
    /// The seeds, `host:storage_port` each.
    pub seeds: Vec<String>,
}

/// The release's default `cassandra.yaml` with the addresses of `node`.
pub fn render_cassandra_yaml(default: &str, node: &NodeAddresses) -> Result<String, Error> {
    let render = |e: String| Error::RenderConfig(e);
    let mut doc: Value = serde_norway::from_str(default).map_err(|e| render(e.to_string()))?;
    let top = doc
        .as_mapping_mut()
        .ok_or_else(|| render("the default is not a mapping".into()))?;
    set(top, "listen_address", Value::from(node.address.clone()));
    set(top, "rpc_address", Value::from(node.address.clone()));
    set(top, "storage_port", Value::from(node.storage_port));
    set(top, "native_transport_port", Value::from(node.native_port));
    // seed_provider: [{class_name: ..., parameters: [{seeds: "a:7000,b:7000"}]}]
    let parameters = top
        .get_mut("seed_provider")
        .and_then(Value::as_sequence_mut)
        .and_then(|s| s.first_mut())
        .and_then(|p| p.get_mut("parameters"))
        .and_then(Value::as_sequence_mut)
        .and_then(|s| s.first_mut())
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| render("the default has no seed_provider parameters".into()))?;
    set(parameters, "seeds", Value::from(node.seeds.join(",")));
    serde_norway::to_string(&doc).map_err(|e| render(e.to_string()))
}

fn set(map: &mut Mapping, key: &str, value: Value) {
    map.insert(Value::from(key), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_4_1() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/cassandra/4.1/cassandra.yaml"
        );
        std::fs::read_to_string(path).unwrap()
    }

    fn node() -> NodeAddresses {
        NodeAddresses {
            address: "127.0.0.1".into(),
            storage_port: 17000,
            native_port: 19042,
            seeds: vec!["127.0.0.1:17000".into()],
        }
    }

    #[test]
    fn only_the_addresses_ports_and_seeds_differ_from_the_default() {
        let default = default_4_1();
        let rendered = render_cassandra_yaml(&default, &node()).unwrap();
        let before: Value = serde_norway::from_str(&default).unwrap();
        let after: Value = serde_norway::from_str(&rendered).unwrap();
        let (before, after) = (before.as_mapping().unwrap(), after.as_mapping().unwrap());
        let mut changed: Vec<&str> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        changed.sort();
        assert_eq!(
            changed,
            [
                "listen_address",
                "native_transport_port",
                "rpc_address",
                "seed_provider",
                "storage_port"
            ]
        );
        assert_eq!(before.len(), after.len());
        assert_eq!(after["storage_port"], Value::from(17000));
        assert_eq!(
            after["seed_provider"][0]["parameters"][0]["seeds"],
            Value::from("127.0.0.1:17000")
        );
        assert_eq!(
            after["seed_provider"][0]["class_name"],
            before["seed_provider"][0]["class_name"]
        );
    }
}
