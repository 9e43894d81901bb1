//! The fake ScyllaDB node of the test world: the process the kubelet runs
//! as `scylla` in `scylladb/scylla` images. It reads Scylla's command line
//! and scylla.yaml ([`config`]), joins the same ring model as the fake
//! Cassandra (kubesim's `/sim/ring`, with the rules of Scylla's gossip
//! topology) and serves ScyllaDB's admin REST API ([`rest`], the facts in
//! tests/fixtures/scylla-rest/FACTS.md) on `--api-address:--api-port`
//! ([`node`]); [`process`] is its main. No JMX, no Jolokia. With
//! encryption on, it loads its TLS credentials as `scylla` does over
//! GnuTLS, watches their files and serves TLS handshakes on its SSL
//! storage and CQL ports ([`tls`]).

pub mod config;
pub mod node;
pub mod process;
pub mod rest;
pub mod tls;
