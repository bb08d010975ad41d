//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod apply;
pub mod cli;
pub mod config;
pub mod demo;
pub mod duration;
pub mod error;
pub mod fleet;
pub mod health;
pub mod manifest;
pub mod pipeline;
pub mod progress;
pub mod report;
pub mod retry;
pub mod target;
pub mod wait;
pub mod yaml;
