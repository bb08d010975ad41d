//! Checks during the bake (`checks:`): Prometheus queries and HTTP probes run per target from
//! healthy to the end of its bake, judged by pure rules, kept as samples in the report.
//!
//! - `template`: `{{target}}` and friends, escaped for where they land (PromQL, URL).
//! - `judge`: pure rules: one result -> a sample, the consecutive-failure rule, the verdict.
//! - `client`: the one HTTP client (hyper + rustls, as kube's), under kube's retry policy.
//! - `prometheus`: `/api/v1/query` and its JSON.
//! - `probe`: the HTTP probe.
//! - `run`: a target's checks, each at its interval, until its bake ends.
//!
//! The model (`CheckConfig`) and its parsing are in `config::checks`: the config layer may not
//! import this one.

pub mod client;
pub mod judge;
pub mod probe;
pub mod prometheus;
pub mod run;
pub mod template;

pub use judge::{Reading, Streak};
pub use run::{CheckRunner, PreparedCheck, prepare};
