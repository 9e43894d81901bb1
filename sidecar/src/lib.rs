//! The sidecar crate: everything that runs inside a member Pod or next to a
//! process that reloads on a signal.
//!
//! - [`render`]: configuration rendering (`sidecar`, `config render`).
//! - [`decommission`]: the member's side of the scale-down protocol (the pure
//!   decision, and its loop in `decommission::act`).
//! - [`markers`]: what the sidecar records on the data volume.
//! - [`probes`]: `/healthz`, `/readyz` and `/metrics`.
//! - [`sstables`]: the old-format sstables gauge (`/metrics`).
//! - [`supervise`]: the sidecar as the container's init (child, signals, reaping).
//! - [`member`]: the `sidecar` subcommand: start-up, the database, probes, intent.
//! - [`jolokia`]: the Jolokia client and the StorageService facade.
//! - [`nodetool`]: a small nodetool over Jolokia.
//! - [`reloader`]: the SIGHUP watcher (`cassandra-operator reloader`).

pub mod decommission;
pub mod jolokia;
pub mod jolokia_access;
pub mod markers;
pub mod member;
pub mod nodetool;
pub mod probes;
pub mod reloader;
pub mod render;
pub mod sstables;
pub mod supervise;

pub use member::SidecarArgs;
