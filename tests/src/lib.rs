//! The test world (see DESIGN.md section 7).

pub mod bench;
pub mod cel;
pub mod control_plane;
pub mod cql;
pub mod fake_cassandra;
pub mod fake_scylla;
pub mod harness;
pub mod hollow_nodes;
pub mod jolokia_contract;
pub mod jolokia_real;
pub mod kubesim;
pub mod real_cassandra;
pub mod ring;
pub mod schema;
