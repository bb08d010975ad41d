//! Health rules: pure functions of Kubernetes objects (as JSON), no I/O.
//!
//! `assess` follows kstatus (kubernetes-sigs/cli-utils) with kubectl's rollout-status order of
//! checks for workloads; `pods` adds fail-fast on pods of the new revision.

mod kstatus;
mod pods;

pub use kstatus::assess;
pub use pods::{
    PodProblem, RevisionSelector, Severity, label_selector, new_revision_selector, pod_matches,
    pod_problems,
};

use serde_json::Value;

/// Where an object stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Reconciled and healthy.
    Current,
    /// Still changing; keep waiting.
    InProgress,
    /// Will not become healthy without a change (e.g. progress deadline exceeded).
    Failed,
    /// Being deleted.
    Terminating,
    /// Not in the cluster.
    NotFound,
    /// Could not be decided.
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub status: Status,
    /// kubectl-like sentence: "Waiting for deployment \"web\" rollout to finish: ...".
    pub message: String,
    /// For Failed (and some InProgress) verdicts, a short reason such as
    /// "ProgressDeadlineExceeded", "JobFailed", "Stalled".
    pub reason: Option<String>,
}

impl Assessment {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Assessment {
            status,
            message: message.into(),
            reason: None,
        }
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    pub fn not_found(kind: &str, name: &str) -> Self {
        Assessment::new(Status::NotFound, format!("{kind} {name:?} not found"))
    }
}

/// `a.b.c` lookups on JSON without panics.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(key))
}

pub(crate) fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(|x| {
        x.as_i64()
            .or_else(|| x.as_f64().map(|f| f as i64))
            .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
    })
}

pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

/// The condition of `type` in `status.conditions`.
pub(crate) fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    at(obj, &["status", "conditions"])
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub(crate) fn condition_is(obj: &Value, kind: &str, status: &str) -> bool {
    condition(obj, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some(status)
}

pub(crate) fn cond_field<'a>(cond: &'a Value, field: &str) -> &'a str {
    cond.get(field).and_then(Value::as_str).unwrap_or("")
}
