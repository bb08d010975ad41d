//! kube-sim: a simulated Kubernetes API server, with controllers and pods, for tests and demos.

pub mod apply;
pub mod clock;
pub mod cluster;
pub mod controllers;
pub mod defaults;
pub mod error;
pub mod faults;
pub mod handlers;
pub mod kubeconfig;
pub mod managed_fields;
pub mod openapi;
pub mod registry;
pub mod rules;
pub mod selectors;
pub mod server;
pub mod store;
pub mod table;
pub mod tls;

pub use clock::Clock;
pub use cluster::{Cluster, Sim, SimError, SimOptions};
pub use error::ApiError;
pub use faults::{Counters, Faults};
pub use store::{EventKind, ResourceType, Store, WatchEvent};

/// The `shared/` folder (recordings and manifest corpus) beside the repository: the first
/// ancestor of this crate's directory that has one. Used by tests.
pub fn shared_dir() -> Option<std::path::PathBuf> {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared"))
        .find(|dir| dir.join("apiserver-recordings").is_dir())
}
