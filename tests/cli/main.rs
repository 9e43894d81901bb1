//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod crash;
mod help;
mod rbac;
mod reloader;
mod render;
mod sidecar;
mod world;
