//! Tests of the `cassandra-operator` binary's command line.

mod help;
mod render;
