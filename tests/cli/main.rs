//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod decommission;
mod help;
mod nodes;
mod outage;
mod reloader;
mod render;
mod rings;
mod sidecar;
mod world;
mod writes;
