//! Test support: files of the shared folder (recordings, manifest corpus) beside the
//! repository. Found by kube-sim's rule, the one rule of the workspace: a test that needs it
//! calls [`shared_for_test`] first and skips, saying why, when it is missing; with
//! `ROLLGUARD_REQUIRE_SHARED=1` (CI) a missing folder fails it instead. `ROLLGUARD_SHARED_DIR`
//! points the lookup elsewhere.

use std::path::PathBuf;

pub use kube_sim::shared_for_test;

/// A file under the shared folder, for a test that has checked [`shared_for_test`].
pub fn shared_path(rel: &str) -> PathBuf {
    kube_sim::shared_dir()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
        .join(rel)
}
