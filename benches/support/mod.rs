//! Helpers shared by the benchmark sections.

pub mod fixtures;
pub mod http;
pub mod procs;
pub mod table;
