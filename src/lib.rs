//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod checks;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod engine;
pub mod error;
pub mod github;
pub mod manifests;
pub mod release;
pub mod report;
pub mod stages;
pub mod util;
