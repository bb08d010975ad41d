//! Manifests: load (files, folders, globs, or a render command), parse (multi-document YAML
//! and JSON, `*List` flattened), validate before any cluster is touched (collecting every
//! problem), and order for applying.

mod load;
mod model;
mod order;
mod parse;
mod render;
#[cfg(test)]
mod tests;

pub use load::{load, load_noting};
pub use model::*;
pub use order::{apply_rank, is_cluster_scoped_kind};
pub use parse::parse;
pub use render::{RENDER_ORIGIN, RENDER_TIMEOUT, render, render_with_timeout};
