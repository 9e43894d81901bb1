//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod help;
mod lifecycle_sidecar;
mod reloader;
mod render;
mod sidecar;
mod world;
