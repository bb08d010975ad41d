//! The words of the health rules (an object's `Status`, an `Assessment` with its reason),
//! Warning events as report lines, and the small readers of JSON fields both rule sets use.

use crate::report::Failure;
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

    /// The report entry for an object that ends (failed, or at the deadline) with this
    /// verdict: reason from the verdict, else the status ("InProgress" at a timeout).
    pub fn to_failure(&self, object: &str) -> Failure {
        Failure {
            object: object.to_string(),
            pod: None,
            container: None,
            reason: self
                .reason
                .clone()
                .unwrap_or_else(|| self.status.as_str().to_string()),
            message: self.message.clone(),
            events: Vec::new(),
            ..Default::default()
        }
    }
}

/// One line for a Warning event (core/v1 `Event` or `events.k8s.io/v1`), as shown under a
/// failure: `pod web-7d9f-x: Failed: Failed to pull image "x": not found (x3)`.
/// None for events that are not warnings.
pub fn warning_event_line(event: &Value) -> Option<String> {
    if str_at(event, &["type"]) != Some("Warning") {
        return None;
    }
    let regarding = at(event, &["involvedObject"]).or_else(|| at(event, &["regarding"]));
    let subject = regarding.map(|r| {
        let kind = str_at(r, &["kind"])
            .unwrap_or("object")
            .to_ascii_lowercase();
        let name = str_at(r, &["name"]).unwrap_or("");
        format!("{kind} {name}")
    });
    let reason = str_at(event, &["reason"]).unwrap_or("");
    let message = str_at(event, &["message"])
        .or_else(|| str_at(event, &["note"]))
        .unwrap_or("")
        .trim();
    let count = int_at(event, &["count"])
        .or_else(|| int_at(event, &["series", "count"]))
        .unwrap_or(1);
    let mut line = String::new();
    if let Some(s) = subject {
        line.push_str(&s);
        line.push_str(": ");
    }
    line.push_str(reason);
    if !message.is_empty() {
        if !reason.is_empty() {
            line.push_str(": ");
        }
        line.push_str(message);
    }
    if count > 1 {
        line.push_str(&format!(" (x{count})"));
    }
    Some(line)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn warning_event_lines() {
        let cases = vec![
            (
                json!({"type": "Warning", "reason": "Failed", "message": "Failed to pull image \"nginx:doesnotexist\": not found",
                    "count": 3, "involvedObject": {"kind": "Pod", "name": "web-7d9f-x"}}),
                Some(
                    "pod web-7d9f-x: Failed: Failed to pull image \"nginx:doesnotexist\": not found (x3)",
                ),
            ),
            (
                json!({"type": "Warning", "reason": "BackOff", "note": "Back-off restarting failed container",
                    "series": {"count": 5}, "regarding": {"kind": "Pod", "name": "p"}}),
                Some("pod p: BackOff: Back-off restarting failed container (x5)"),
            ),
            (
                json!({"type": "Warning", "reason": "ProgressDeadlineExceeded"}),
                Some("ProgressDeadlineExceeded"),
            ),
            (json!({"type": "Normal", "reason": "Pulled"}), None),
        ];
        for (event, want) in cases {
            assert_eq!(warning_event_line(&event).as_deref(), want);
        }
    }

    #[test]
    fn assessment_to_failure() {
        let a = Assessment::new(
            Status::InProgress,
            "Waiting for deployment \"web\" rollout to finish: 1 of 3 updated replicas are available...",
        );
        let f = a.to_failure("Deployment shop/web");
        assert_eq!(f.reason, "InProgress");
        let f = a
            .with_reason("ProgressDeadlineExceeded")
            .to_failure("Deployment shop/web");
        assert_eq!(
            f.headline(),
            "Deployment shop/web: ProgressDeadlineExceeded: Waiting for deployment \"web\" rollout to finish: 1 of 3 updated replicas are available..."
        );
    }
}
