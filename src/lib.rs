//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod apply;
pub mod cli;
pub mod demo;
pub mod error;
#[cfg(test)]
mod fake_api;
pub mod fleet;
pub mod git;
pub mod lock;
pub mod manage;
pub mod pipeline;
pub mod progress;
pub mod redact;
pub mod release;
pub mod retry;
pub mod rollback;
pub mod shim;
pub mod target;
pub mod wait;
