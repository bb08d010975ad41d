//! Simulated clusters put together: store, controllers and server per cluster, the
//! kubeconfig that reaches them and the certificates they serve.

pub mod cluster;
pub mod kubeconfig;
pub mod tls;
