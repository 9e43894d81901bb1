//! The fake Cassandra node of the test world (DESIGN.md section 7): the
//! process the sidecar under test starts as `cassandra -f`. It reads what
//! the sidecar rendered ([`config`]), joins the ring model kept by kubesim
//! (`/sim/ring`, [`ring_service`]) and answers Jolokia like
//! jolokia-core 1.7.1 in front of the Cassandra version it runs as
//! ([`jolokia`], over the node's gossip [`view`]); [`node`] does the I/O.
//! With encryption on, it builds its SSL contexts as Cassandra 4.1 and 5.0
//! do, refusing to start on files they refuse and reloading them through
//! `reloadSslCertificates` and the hot-reload task ([`tls`]), and serves
//! TLS handshakes with what it holds on its storage and native ports
//! ([`tls_wire`], which also asks a node which certificate it serves).

pub mod config;
pub mod gossipinfo;
pub mod jolokia;
pub mod node;
pub mod policy;
pub mod process;
pub mod ring_service;
pub mod sstables;
pub mod tls;
pub mod tls_wire;
pub mod view;
pub mod writer;

/// The file the fake writes in its data directory on the first start: a
/// data directory without it is empty (new, or the disk was lost).
pub const MARKER: &str = ".fake-cassandra-host-id";
