//! kube-sim: a simulated Kubernetes API server, with controllers and pods, for tests and demos.

pub mod clock;

pub mod controllers;
pub mod rules;
