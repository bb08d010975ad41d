//! kube-sim: a simulated Kubernetes API server, with controllers and pods, for tests and demos.

pub mod apply;
pub mod clock;
pub mod controllers;
pub mod defaults;
pub mod error;
pub mod managed_fields;
pub mod registry;
pub mod rules;
pub mod store;

pub use clock::Clock;
pub use error::ApiError;
pub use store::{EventKind, ResourceType, Store, WatchEvent};
