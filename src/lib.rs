//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod apply;
pub mod cli;
pub mod config;
pub mod demo;
pub mod duration;
pub mod error;
#[cfg(test)]
mod fake_api;
pub mod fleet;
#[cfg(test)]
mod generated_docs;
pub mod git;
pub mod health;
pub mod lock;
pub mod manage;
pub mod manifest;
pub mod normalize;
pub mod pipeline;
pub mod progress;
pub mod redact;
pub mod release;
pub mod report;
pub mod retry;
pub mod rollback;
pub mod target;
pub mod wait;
pub mod yaml;
