//! Retries of transient Kubernetes API errors, bounded by the target's deadline: the cluster's
//! classifier ([`classify`], [`KubeRules`]) for the retry core in `util/retry.rs` (the loop,
//! backoff with jitter, deadline and Retry-After, shared with the GitHub sink).
//!
//! This is the one retry policy of every API call rollguard makes to a cluster (apply,
//! discovery, the Lease, the release records, events). kube's own retry layer is off for rollguard clients
//! (`cluster/connect.rs` builds them without one): its delays ignore the per-target deadline,
//! and a layer under this one would multiply attempts (one 503 cost 9 requests). Here every
//! attempt and every sleep stays inside the deadline, at most [`MAX_ATTEMPTS`] requests are
//! sent per call (besides those answered with a Retry-After), a 429 waits its Retry-After only
//! when that fits before the deadline,
//! nothing is sent once the deadline has passed, and 4xx answers other than 408 and 429 are
//! never retried. A server that accepted a request and then stays silent is cut off by the
//! client's read timeout (`ROLLGUARD_REQUEST_TIMEOUT`, `cluster/connect.rs`), which counts here
//! as an unanswered attempt.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::util::retry::{self, Cancel, Classifier, GaveUp, Verdict};
pub use crate::util::retry::{BOOKKEEPING_WINDOW, MAX_ATTEMPTS, RetryBudget, backoff_delay};

/// How an API error should be treated by a caller that may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth another attempt; `retry_after` is the server's hint when it gave one.
    Transient { retry_after: Option<Duration> },
    /// Retrying cannot help (bad request, forbidden, conflict, TLS, ...).
    Permanent,
}

/// Classifies a kube error. Pure; table-tested below.
pub fn classify(err: &kube::Error) -> ErrorClass {
    match err {
        kube::Error::Api(status) => classify_status(
            status.code,
            &status.message,
            status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .unwrap_or(0),
        ),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            if is_tls_problem(err) {
                ErrorClass::Permanent
            } else {
                ErrorClass::Transient { retry_after: None }
            }
        }
        _ => ErrorClass::Permanent,
    }
}

/// How the API server says that a server-side apply holds a field the kind's schema lacks.
pub const FIELD_NOT_DECLARED: &str = "field not declared in schema";

/// How the API server starts the 500 it answers for a server-side apply whose body does not
/// fit the kind's schema (an undeclared field, a wrongly typed value such as
/// `.spec.replicas: expected numeric (int or float), got string`): the manifest's fault.
pub const TYPED_PATCH_FAILED: &str = "failed to create typed patch object";

/// The decision for an HTTP status answered by the API server.
pub fn classify_status(code: u16, message: &str, retry_after_seconds: u32) -> ErrorClass {
    let retry_after =
        (retry_after_seconds > 0).then(|| Duration::from_secs(u64::from(retry_after_seconds)));
    match code {
        408 | 429 => ErrorClass::Transient { retry_after },
        // A server-side apply whose body does not fit the schema (a field unknown to it, a
        // value of the wrong type) answers 500 (see the apiserver recordings): that is the
        // manifest's fault, not transient.
        500 if message.contains(FIELD_NOT_DECLARED) || message.contains(TYPED_PATCH_FAILED) => {
            ErrorClass::Permanent
        }
        500 | 502 | 503 | 504 => ErrorClass::Transient { retry_after },
        _ => ErrorClass::Permanent,
    }
}

/// True when the error chain says the TLS handshake or certificate check failed.
pub fn is_tls_problem(err: &(dyn std::error::Error + 'static)) -> bool {
    let text = error_chain_text(err).to_ascii_lowercase();
    text.contains("certificate") || text.contains("tls") || text.contains("handshake")
}

/// All messages of an error's source chain, joined by ": ", without repeats.
pub fn error_chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// The innermost error of a chain, for wrappers whose own text repeats what the caller says.
pub fn root_cause_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// The first `std::io::Error` kind in an error's source chain.
pub fn io_error_kind(err: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = e.source();
    }
    None
}

/// Why a retried operation gave up.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// The last answer (or transport error). A 429 whose Retry-After did not fit before the
    /// deadline ends here too: [`rate_limited`] tells it apart.
    #[error("{0}")]
    Api(kube::Error),
    /// The deadline had passed before this request was sent: nothing reached the server.
    #[error("not sent: the deadline had passed")]
    NotSent,
    #[error("cancelled")]
    Cancelled,
}

impl RetryError {
    /// The error as a kube error (a deadline before sending becomes a timeout); None when
    /// cancelled.
    pub fn into_kube(self) -> Option<kube::Error> {
        match self {
            RetryError::Api(e) => Some(e),
            RetryError::NotSent => Some(timeout_error("not sent", Duration::ZERO)),
            RetryError::Cancelled => None,
        }
    }
}

/// One call that is not cancelled (the Lease, a release record) under the retry policy: the
/// error it ends with, as a kube error.
pub async fn retry_call<T, F, Fut>(
    what: &str,
    budget: &RetryBudget,
    op: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    with_retry(what, budget, &CancellationToken::new(), op)
        .await
        .map_err(|e| {
            e.into_kube()
                .unwrap_or_else(|| timeout_error(what, Duration::ZERO))
        })
}

/// The wait a 429 asked for (its Retry-After), when the error is one.
pub fn rate_limited(err: &kube::Error) -> Option<Duration> {
    match err {
        kube::Error::Api(status) if status.code == 429 => Some(Duration::from_secs(u64::from(
            status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .unwrap_or(0),
        ))),
        _ => None,
    }
}

/// A timeout of one attempt, as a kube error so that callers see one error type.
pub fn timeout_error(what: &str, after: Duration) -> kube::Error {
    let text = if after.is_zero() {
        format!("{what}: the deadline had passed")
    } else {
        format!("{what}: no answer within {}s", after.as_secs_f64())
    };
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        text,
    )))
}

/// "the server asked to wait 100s (429 Too Many Requests, Retry-After), which does not fit
/// before the deadline" — said the same way wherever a 429 ends a call.
pub fn rate_limited_message(wait: Duration) -> String {
    format!(
        "the API server answered 429 Too Many Requests and asked to wait {}s (Retry-After), longer than the time left before this target's deadline; retry later or raise wait.timeout",
        wait.as_secs()
    )
}

/// The cluster's rules for the retry core: [`classify`], and a kube error that got no
/// answer from the API server (no status) counts as unanswered.
pub struct KubeRules;

impl Classifier<kube::Error> for KubeRules {
    fn verdict(&self, err: &kube::Error) -> Verdict {
        match classify(err) {
            ErrorClass::Permanent => Verdict::Fatal,
            ErrorClass::Transient { retry_after: None } => Verdict::Retry,
            ErrorClass::Transient {
                retry_after: Some(wait),
            } => Verdict::RetryAfter(wait),
        }
    }

    fn answered(&self, err: &kube::Error) -> bool {
        matches!(err, kube::Error::Api(_))
    }

    fn timed_out(&self, what: &str, after: Duration) -> kube::Error {
        timeout_error(what, after)
    }
}

/// Runs a read `op` until it succeeds, fails permanently, the budget runs out or `cancel`
/// fires (at once, also mid-request).
pub async fn with_retry<T, F, Fut>(
    what: &str,
    budget: &RetryBudget,
    cancel: &CancellationToken,
    op: F,
) -> Result<T, RetryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    retry_kube(what, budget, Cancel::Read(cancel), op).await
}

/// The retry loop under the cluster's rules, its outcome as a [`RetryError`]. A write passes
/// [`Cancel::Write`]: a cancel lets the request in flight be answered first (within
/// [`retry::WRITE_CANCEL_GRACE`]), so that whether the server did it is known.
pub async fn retry_kube<T, F, Fut>(
    what: &str,
    budget: &RetryBudget,
    cancel: Cancel<'_>,
    op: F,
) -> Result<T, RetryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    retry::run(what, budget, &KubeRules, cancel, op)
        .await
        .map_err(|gave_up| match gave_up {
            GaveUp::Failed(err) | GaveUp::NoTime { last: err, .. } => RetryError::Api(err),
            GaveUp::Deadline { last: None } => RetryError::NotSent,
            GaveUp::Deadline { last: Some(_) } => {
                RetryError::Api(timeout_error(what, Duration::ZERO))
            }
            GaveUp::Cancelled => RetryError::Cancelled,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::time::Instant;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.to_string(),
            ..Default::default()
        }))
    }

    #[test]
    fn status_classes() {
        let table: &[(u16, &str, u32, ErrorClass)] = &[
            (
                429,
                "slow down",
                2,
                ErrorClass::Transient {
                    retry_after: Some(Duration::from_secs(2)),
                },
            ),
            (
                429,
                "slow down",
                0,
                ErrorClass::Transient { retry_after: None },
            ),
            (
                503,
                "unavailable",
                0,
                ErrorClass::Transient { retry_after: None },
            ),
            (502, "", 0, ErrorClass::Transient { retry_after: None }),
            (504, "", 0, ErrorClass::Transient { retry_after: None }),
            (
                500,
                "etcd leader changed",
                0,
                ErrorClass::Transient { retry_after: None },
            ),
            (
                500,
                ".spec.foo: field not declared in schema",
                0,
                ErrorClass::Permanent,
            ),
            (
                500,
                "failed to create typed patch object (shop/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string",
                0,
                ErrorClass::Permanent,
            ),
            (
                408,
                "timeout",
                0,
                ErrorClass::Transient { retry_after: None },
            ),
            (400, "bad", 0, ErrorClass::Permanent),
            (401, "Unauthorized", 0, ErrorClass::Permanent),
            (403, "forbidden", 0, ErrorClass::Permanent),
            (404, "not found", 0, ErrorClass::Permanent),
            (409, "conflict", 0, ErrorClass::Permanent),
            (422, "invalid", 0, ErrorClass::Permanent),
        ];
        for (code, message, retry_after, want) in table {
            assert_eq!(
                classify_status(*code, message, *retry_after),
                *want,
                "code {code} {message}"
            );
        }
    }

    #[test]
    fn kube_rules_table() {
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        )));
        let cases = [
            (
                too_many(3),
                Verdict::RetryAfter(Duration::from_secs(3)),
                true,
            ),
            (api_error(503, "busy"), Verdict::Retry, true),
            (api_error(403, "forbidden"), Verdict::Fatal, true),
            (refused, Verdict::Retry, false),
            (
                timeout_error("x", Duration::from_secs(1)),
                Verdict::Retry,
                false,
            ),
        ];
        for (err, verdict, answered) in cases {
            assert_eq!(KubeRules.verdict(&err), verdict, "{err}");
            assert_eq!(KubeRules.answered(&err), answered, "{err}");
        }
    }

    #[test]
    fn transport_errors_are_transient_except_tls() {
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error",
        )));
        assert_eq!(
            classify(&refused),
            ErrorClass::Transient { retry_after: None }
        );
        let tls = kube::Error::Service(Box::new(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        )));
        assert_eq!(classify(&tls), ErrorClass::Permanent);
        assert_eq!(
            io_error_kind(&refused),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }

    #[tokio::test]
    async fn retries_transient_then_succeeds() {
        let calls = Arc::new(AtomicU32::new(0));
        let budget = RetryBudget {
            base_delay: Duration::from_millis(1),
            ..RetryBudget::until(Instant::now() + Duration::from_secs(5))
        };
        let c = calls.clone();
        let result = with_retry("test", &budget, &CancellationToken::new(), move || {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) < 3 {
                    Err(api_error(503, "busy"))
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn permanent_errors_are_not_retried() {
        let calls = Arc::new(AtomicU32::new(0));
        let budget = RetryBudget::until(Instant::now() + Duration::from_secs(5));
        let c = calls.clone();
        let result: Result<(), _> =
            with_retry("test", &budget, &CancellationToken::new(), move || {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    Err(api_error(403, "forbidden"))
                }
            })
            .await;
        assert!(matches!(result, Err(RetryError::Api(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    fn too_many(retry_after: u32) -> kube::Error {
        kube::Error::Api(Box::new(
            serde_json::from_value(serde_json::json!({
                "code": 429, "message": "slow down", "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": retry_after}
            }))
            .expect("status"),
        ))
    }

    #[tokio::test]
    async fn a_429_whose_wait_does_not_fit_ends_at_once_as_rate_limited() {
        let calls = Arc::new(AtomicU32::new(0));
        let budget = RetryBudget::until(Instant::now() + Duration::from_secs(5));
        let c = calls.clone();
        let result: Result<(), _> =
            with_retry("test", &budget, &CancellationToken::new(), move || {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    Err(too_many(100))
                }
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let Err(RetryError::Api(err)) = result else {
            panic!("expected the 429")
        };
        assert_eq!(rate_limited(&err), Some(Duration::from_secs(100)));
        assert!(rate_limited_message(Duration::from_secs(100)).contains("wait 100s"));
    }

    #[tokio::test]
    async fn attempts_are_bounded_and_nothing_is_sent_past_the_deadline() {
        let calls = Arc::new(AtomicU32::new(0));
        let budget = RetryBudget {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..RetryBudget::until(Instant::now() + Duration::from_secs(30))
        };
        let c = calls.clone();
        let result: Result<(), _> =
            with_retry("test", &budget, &CancellationToken::new(), move || {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    Err(api_error(503, "busy"))
                }
            })
            .await;
        assert!(matches!(result, Err(RetryError::Api(_))));
        assert_eq!(calls.load(Ordering::SeqCst), MAX_ATTEMPTS);

        let past = RetryBudget::until(Instant::now());
        let result: Result<(), _> =
            with_retry("test", &past, &CancellationToken::new(), || async {
                panic!("sent past the deadline")
            })
            .await;
        assert!(matches!(result, Err(RetryError::NotSent)));
    }

    #[tokio::test]
    async fn first_contact_gives_up_after_three_unanswered_attempts_but_retries_5xx_longer() {
        let budget = |calls: Arc<AtomicU32>, answer: bool| {
            let c = calls.clone();
            move || {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    if answer {
                        Err::<(), _>(api_error(500, "busy"))
                    } else {
                        Err(kube::Error::Service(Box::new(std::io::Error::new(
                            std::io::ErrorKind::ConnectionRefused,
                            "refused",
                        ))))
                    }
                }
            }
        };
        let fast = |b: RetryBudget| RetryBudget {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..b
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let refused = Arc::new(AtomicU32::new(0));
        let _ = with_retry(
            "t",
            &fast(RetryBudget::first_contact(deadline)),
            &CancellationToken::new(),
            budget(refused.clone(), false),
        )
        .await;
        assert_eq!(refused.load(Ordering::SeqCst), 3);
        let busy = Arc::new(AtomicU32::new(0));
        let _ = with_retry(
            "t",
            &fast(RetryBudget::first_contact(deadline)),
            &CancellationToken::new(),
            budget(busy.clone(), true),
        )
        .await;
        assert_eq!(busy.load(Ordering::SeqCst), MAX_ATTEMPTS + 2);
    }

    #[tokio::test]
    async fn gives_up_at_the_deadline() {
        let budget = RetryBudget {
            base_delay: Duration::from_millis(20),
            ..RetryBudget::until(Instant::now() + Duration::from_millis(200))
        };
        let started = Instant::now();
        let result: Result<(), _> =
            with_retry("test", &budget, &CancellationToken::new(), || async {
                Err(api_error(503, "busy"))
            })
            .await;
        assert!(matches!(result, Err(RetryError::Api(_))));
        // Far below an unbounded retry loop; wide enough for a loaded CI machine.
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
