//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod help;
mod install;
mod lifecycle;
mod lifecycle_sidecar;
mod manifests;
mod nodes;
mod reloader;
mod render;
mod sidecar;
mod world;
