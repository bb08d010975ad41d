//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.

pub mod git;
pub mod lock;
pub mod manage;
pub mod redact;
pub mod release;
pub mod rollback;
