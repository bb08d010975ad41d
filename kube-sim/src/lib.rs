//! kube-sim: a simulated Kubernetes API server, with controllers and pods, for tests and demos.
//!
//! Each cluster is an in-memory [`Store`] (objects, one global resourceVersion, a bounded
//! event history), the controllers and kubelet stand-in that act on it, and an HTTPS (or
//! plain HTTP) server on 127.0.0.1 that answers like kube-apiserver v1.36: discovery,
//! CRUD, patches, server-side apply with managedFields, watches, `kind: Status` errors.
//! Tests switch on faults and read request counters per cluster.
//!
//! ```ignore
//! let sim = kube_sim::Sim::start(kube_sim::SimOptions { clusters: 2, ..Default::default() }).await?;
//! sim.write_kubeconfig(&path)?;                 // contexts sim-1, sim-2
//! sim.clusters()[1].set_faults(kube_sim::Faults { error_rate: 0.5, error_status: 503, ..Default::default() });
//! assert_eq!(sim.clusters()[0].counters().writes(), 0);
//! ```
//!
//! The same over the wire: `GET/POST /_sim/faults`, `GET /_sim/counters`,
//! `POST /_sim/counters/reset` (bearer token required; never faulted).

pub mod controllers;
pub mod http;
pub mod model;
pub mod semantics;
pub mod sim;
pub mod storage;

// The paths rollguard, its tests and benches use.
pub use controllers::rules;
pub use http::faults;
pub use model::clock;
pub use sim::cluster;
pub use storage::store;

pub use http::faults::{Connections, Counters, Faults};
pub use model::clock::Clock;
pub use model::error::ApiError;
pub use model::resource::ResourceType;
pub use sim::cluster::{Cluster, Sim, SimError, SimOptions};
pub use storage::store::{EventKind, Store, WatchEvent};

/// The allocator a process hosting simulated clusters should run on (`kube-sim serve`, the
/// bench): their controllers churn through small JSON values on many threads, and glibc's
/// malloc, with its arena locks, took about a quarter of `serve`'s CPU at 1,000 clusters
/// (mimalloc: 10 % less CPU for the same deploy, 6.4-7.5 CPU-s against 7.1-8.7, three
/// alternating pairs) and 40 % in the bench's 50-cluster bad deploy.
pub type Allocator = mimalloc::MiMalloc;

/// The `shared/` folder (recordings and manifest corpus) beside the repository: the first
/// ancestor of this crate's directory that has one, or the folder `ROLLGUARD_SHARED_DIR` names
/// (which replaces the search: pointing it at an empty folder shows what a plain clone does).
/// Used by tests. When it is missing and `ROLLGUARD_REQUIRE_SHARED=1` is set (CI), this
/// panics: a run that must compare with the recordings never skips them.
pub fn shared_dir() -> Option<std::path::PathBuf> {
    let has_recordings = |dir: &std::path::Path| dir.join("apiserver-recordings").is_dir();
    let found = match std::env::var_os("ROLLGUARD_SHARED_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Some(std::path::PathBuf::from(dir)).filter(|d| has_recordings(d)),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|dir| dir.join("shared"))
            .find(|dir| has_recordings(dir)),
    };
    if found.is_none() && std::env::var("ROLLGUARD_REQUIRE_SHARED").as_deref() == Ok("1") {
        panic!(
            "ROLLGUARD_REQUIRE_SHARED=1, but no shared/apiserver-recordings was found (searched \
             the ancestors of {}, or ROLLGUARD_SHARED_DIR when set): put the shared folder \
             beside the repository, or unset the variable to skip these tests",
            env!("CARGO_MANIFEST_DIR")
        );
    }
    found
}

/// For a test that needs `shared/`: the folder, or None after saying why `test` skips.
pub fn shared_for_test(test: &str) -> Option<std::path::PathBuf> {
    let found = shared_dir();
    if found.is_none() {
        skip_test(
            test,
            "no shared/apiserver-recordings beside the repository \
             (set ROLLGUARD_REQUIRE_SHARED=1 to make this a failure)",
        );
    }
    found
}

/// The tests of this process that skipped, with why.
static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Says that `test` skips (it returns at once and counts as passed) and why, where `cargo
/// test` shows it: libtest captures what a passing test prints, so this writes to the
/// process's stderr itself, and once more, counted, after the test binary's summary.
pub fn skip_test(test: &str, reason: &str) {
    use std::io::Write;
    let line = format!("skipped: {test}: {reason}");
    let _ = writeln!(std::io::stderr(), "{line}");
    let mut skipped = SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if skipped.is_empty() {
        // SAFETY: atexit only registers a function; print_skipped is extern "C" and does
        // not unwind (it ignores a failed write).
        unsafe {
            libc::atexit(print_skipped);
        }
    }
    skipped.push(line);
}

/// At exit: how many tests skipped, and why (after libtest's "test result" line).
extern "C" fn print_skipped() {
    use std::io::Write;
    let skipped = SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut text = format!(
        "\n{} test{} passed by skipping (not run here):\n",
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" }
    );
    for line in skipped.iter() {
        text.push_str(&format!("  {line}\n"));
    }
    let _ = std::io::stderr().write_all(text.as_bytes());
}
