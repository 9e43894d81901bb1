//! The sidecar crate: everything that runs inside a member Pod or next to a
//! process that reloads on a signal.
//!
//! - [`render`]: configuration rendering (`sidecar`, `config render`).
//! - [`decommission`]: the member's side of the scale-down protocol (pure).
//! - [`supervise`]: the sidecar as the container's init (child, signals, reaping).
//! - [`member`]: the `sidecar` subcommand: start-up, the database, probes, intent.
//! - [`jolokia`]: the Jolokia client and the StorageService facade.
//! - [`nodetool`]: a small nodetool over Jolokia.
//! - [`reloader`]: the SIGHUP watcher (`cassandra-operator reloader`).

pub mod decommission;
pub mod jolokia;
pub mod member;
pub mod nodetool;
pub mod reloader;
pub mod render;
pub mod supervise;

pub use member::SidecarArgs;
