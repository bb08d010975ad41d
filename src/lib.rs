//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod config;
pub mod duration;
pub mod health;
pub mod manifest;
pub mod report;
pub mod yaml;
