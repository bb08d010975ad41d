//! End-to-end tests: the real `rollguard` binary against kube-sim clusters started in this
//! process, over real HTTPS. Each test starts its own clusters on ephemeral ports, so the
//! tests run in parallel. Cluster access goes through `harness` only.

mod action;
mod apply;
mod checks;
mod concurrency;
mod connections;
mod credentials;
mod deploy;
mod diff;
mod failures;
mod fake_github;
mod github;
mod harness;
mod hostile;
mod init;
mod input;
mod logs;
mod manual_engine;
mod manual_plan;
mod messages;
mod preflight;
mod prometheus;
mod prune;
mod pulls;
mod rbac;
mod real;
mod release;
mod runtime_root;
mod saved_plan;
mod scale;
mod secrets;
mod shards;
mod stages;
mod stalled;
mod status;
// `rollguard demo` in a pseudo-terminal: the demo needs the `demo` feature (on by default).
#[cfg(feature = "demo")]
mod terminal;
mod waves;
