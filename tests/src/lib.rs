//! The test world (see DESIGN.md section 7).

pub mod cel;
pub mod schema;
