//! Tests of the `cassandra-operator` binary's command line.

mod common;
mod controller;
mod crash;
mod decommission;
mod help;
mod install;
mod lifecycle;
mod lifecycle_crash;
mod lifecycle_sidecar;
mod majors;
mod manifests;
mod member_token;
mod nodes;
mod outage;
mod rbac;
mod reloader;
mod render;
mod rings;
mod roll;
mod safety;
mod scylla;
mod sidecar;
mod stale_decommission;
mod unreachable;
mod world;
mod writes;
