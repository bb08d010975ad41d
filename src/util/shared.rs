//! Test support: files of the shared folder (recordings, manifest corpus) beside the repository.

use std::path::{Path, PathBuf};

/// A file under the shared folder next to the workspace (`../shared` from the crate in
/// /work/main, `../../shared` from a worktree): the first ancestor that has it.
pub fn shared_path(rel: &str) -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .skip(1)
        .map(|a| a.join("shared").join(rel))
        .find(|p| p.exists())
        .unwrap_or_else(|| manifest_dir.join("../shared").join(rel))
}
