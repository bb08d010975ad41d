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
pub mod protobuf;
pub mod registry;
pub mod rules;
pub mod schema;
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
