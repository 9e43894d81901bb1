//! The API crate: the `cassandra.rook.io/v1alpha1` `Cluster` types, their
//! validation, and the names and labels that the controller and the sidecar
//! agree on. It depends on no other crate of the workspace.

pub mod contract;
pub mod crd;
pub mod http;
pub mod labels;
pub mod names;
pub mod overrides;
pub mod quantity;
pub mod v1alpha1;
pub mod validate;
pub mod versions;

pub use v1alpha1::{Cluster, ClusterSpec, ClusterStatus};
pub use validate::{FieldError, ValidationErrors, validate, validate_update};
