//! The HTTP probe: one GET within its `timeout`, judged by `expect_status` and `expect_body`.
//! Not retried: what the probe measures is whether the service answers, and a retry would
//! hide exactly the flakiness it looks for (`failures_allowed` is the tolerance).

use super::client::{CallError, HttpClient};
use super::judge::Reading;
use crate::config::HttpProbe;
use crate::report::redact;

/// Probes `url` (rendered) as `probe` says; None when cancelled.
pub async fn read(client: &HttpClient, url: &str, probe: &HttpProbe) -> Option<Reading> {
    match client.get_once(url, &[], probe.timeout).await {
        Ok(answer) => Some(Reading::Http {
            status: answer.status,
            body_problem: body_problem(probe.expect_body.as_deref(), &answer.body),
        }),
        Err(CallError::Cancelled) => None,
        Err(e) => Some(Reading::Error(redact::scrub(&e.to_string()))),
    }
}

/// Why `body` does not match `pattern` (None: it does, or there is no pattern).
pub fn body_problem(pattern: Option<&str>, body: &str) -> Option<String> {
    let pattern = pattern?;
    match regex::Regex::new(pattern) {
        Ok(re) if re.is_match(body) => None,
        Ok(_) => Some(format!("the body does not match {pattern:?}")),
        // Checked when the config was read; said rather than hidden if it ever happens.
        Err(e) => Some(format!(
            "expect_body {pattern:?} is not a regular expression: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_matched_by_regex() {
        assert_eq!(body_problem(None, "anything"), None);
        assert_eq!(body_problem(Some("^ok"), "ok: all good"), None);
        assert_eq!(
            body_problem(Some("\"status\":\\s*\"UP\""), r#"{"status": "UP"}"#),
            None
        );
        assert_eq!(
            body_problem(Some("^ok"), "not ok"),
            Some("the body does not match \"^ok\"".into())
        );
    }
}
