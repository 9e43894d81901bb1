//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod help;
mod install;
mod manifests;
mod reloader;
mod render;
mod sidecar;
mod world;
