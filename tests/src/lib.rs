//! The test world (see DESIGN.md section 7).
