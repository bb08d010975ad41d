//! Everything that talks to a cluster: connect, retry, apply, wait, and the pure health rules.

pub mod apply;
pub mod bake;
pub mod connect;
pub mod credentials;
pub mod diff;
pub mod discovery;
pub mod error;
pub mod exec_auth;
pub mod health;
pub mod known;
pub mod logs;
pub mod normalize;
pub mod retry;
pub mod transport;
pub mod wait;
