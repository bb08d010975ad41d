//! The narrow seam to GitHub's REST API: one `send` per request (octocrab in production, a
//! fake in unit tests), and on top of it the retry rules and the one deadline of a run.
//!
//! Retried: 5xx, 429 and a rate-limited 403 (waiting for `Retry-After` or
//! `x-ratelimit-reset` when that fits in the time left), and a dropped connection once or
//! twice. Never retried: 401, other 403s, 404, 422. Every attempt has a deadline, and all of
//! them together stay within the run's budget (default 30 s), so a slow GitHub delays the
//! end of a run by at most that.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// HTTP methods the GitHub sink uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Patch,
}

/// One request: a path below the API base (`/repos/o/r/...`), optionally with a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
}

/// One answer, whatever its status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl ApiResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The request never got an answer (connection refused, reset, TLS, DNS, timeout).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// Sends one request. Implementations do no retries of their own.
pub trait Transport: Send + Sync {
    fn send(
        &self,
        request: ApiRequest,
    ) -> impl Future<Output = Result<ApiResponse, TransportError>> + Send;
}

/// Why talking to GitHub did not work; always said as a warning, never an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GithubError {
    #[error(
        "no token: set GITHUB_TOKEN (e.g. `env: GITHUB_TOKEN: ${{{{ github.token }}}}`) or pass --github-token"
    )]
    NoToken,
    #[error("no repository: GITHUB_REPOSITORY is not set or not `owner/name`")]
    NoRepository,
    #[error("cannot {what}: 401 Unauthorized ({message}); the token is invalid or expired")]
    Unauthorized { what: String, message: String },
    #[error(
        "cannot {what}: 403 Forbidden ({message}); give the workflow the permission it needs (`permissions: pull-requests: write` for the comment, `deployments: write` for Deployments)"
    )]
    Forbidden { what: String, message: String },
    #[error(
        "cannot {what}: 404 Not Found ({message}); check the repository, the pull request number and that the token can see them"
    )]
    NotFound { what: String, message: String },
    #[error("cannot {what}: rate limited by GitHub ({status}), {wait}")]
    RateLimited {
        what: String,
        status: u16,
        wait: String,
    },
    #[error("cannot {what}: GitHub answered {status} ({message})")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    #[error("cannot {what}: GitHub is unreachable at {api}: {reason}")]
    Unreachable {
        what: String,
        api: String,
        reason: String,
    },
    #[error(
        "cannot {what}: out of time (GitHub calls of a run are bounded to {} in all; github.timeout sets it)",
        crate::util::duration::format_duration(*budget)
    )]
    OutOfTime { what: String, budget: Duration },
    #[error("cannot {what}: unexpected answer from GitHub: {reason}")]
    BadResponse { what: String, reason: String },
}

/// Attempts for a request that got no answer at all.
const TRANSPORT_ATTEMPTS: u32 = 3;
/// One attempt never waits longer than this.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// First backoff; doubled per attempt, with jitter.
const BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// A GitHub API client: a transport, the run's deadline and the retry rules.
pub struct Client<T> {
    transport: T,
    /// Reset by [`Client::restart_budget`] when the run's report is ready: the deploy's own
    /// length never eats the report's budget.
    deadline: std::sync::Mutex<Instant>,
    budget: Duration,
    /// The API base, for messages.
    api: String,
}

impl<T: Transport> Client<T> {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A whole budget again from now: the end of a run (comment, statuses) gets the same
    /// bound as its start, however long the deploy took in between.
    pub fn restart_budget(&self) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now() + self.budget;
    }

    pub fn new(transport: T, api: impl Into<String>, budget: Duration) -> Self {
        Client {
            transport,
            deadline: std::sync::Mutex::new(Instant::now() + budget),
            budget,
            api: api.into(),
        }
    }

    /// Sends `request` and returns a 2xx answer, retrying what may pass; `what` names the
    /// action in errors ("update the PR comment on octo/shop#12").
    pub async fn call(&self, what: &str, request: ApiRequest) -> Result<ApiResponse, GithubError> {
        let mut attempt: u32 = 0;
        let mut transport_failures = 0;
        loop {
            attempt += 1;
            let left = self.deadline().saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.out_of_time(what));
            }
            let answer = tokio::time::timeout(
                left.min(ATTEMPT_TIMEOUT),
                self.transport.send(request.clone()),
            )
            .await;
            let response = match answer {
                Err(_) => Err(TransportError(format!(
                    "no answer within {}",
                    crate::util::duration::format_duration(left.min(ATTEMPT_TIMEOUT))
                ))),
                Ok(r) => r,
            };
            // How long to wait before the next try, and the status when a rate limit said so.
            let (wait, limited) = match response {
                Err(e) => {
                    transport_failures += 1;
                    if transport_failures >= TRANSPORT_ATTEMPTS {
                        return Err(GithubError::Unreachable {
                            what: what.to_string(),
                            api: self.api.clone(),
                            reason: e.0,
                        });
                    }
                    (backoff(attempt), None)
                }
                Ok(r) if (200..300).contains(&r.status) => return Ok(r),
                Ok(r) => match decide(&r, unix_now()) {
                    Decision::GiveUp => return Err(classify(what, &r)),
                    Decision::RetryAfter(wait) => (
                        wait.unwrap_or_else(|| backoff(attempt)),
                        matches!(r.status, 403 | 429).then_some(r.status),
                    ),
                },
            };
            let left = self.deadline().saturating_duration_since(Instant::now());
            if wait >= left {
                return Err(match limited {
                    Some(status) => GithubError::RateLimited {
                        what: what.to_string(),
                        status,
                        wait: format!(
                            "to retry after {}, more than is left of the {} bound on GitHub calls (github.timeout)",
                            crate::util::duration::format_duration(wait),
                            crate::util::duration::format_duration(self.budget)
                        ),
                    },
                    None => self.out_of_time(what),
                });
            }
            tracing::debug!(what, ?wait, attempt, "retrying a GitHub call");
            tokio::time::sleep(wait).await;
        }
    }

    /// `call`, then the answer's JSON.
    pub async fn json(
        &self,
        what: &str,
        request: ApiRequest,
    ) -> Result<(Value, ApiResponse), GithubError> {
        let response = self.call(what, request).await?;
        let value = serde_json::from_str(&response.body).map_err(|e| GithubError::BadResponse {
            what: what.to_string(),
            reason: format!("not JSON: {e}"),
        })?;
        Ok((value, response))
    }

    fn out_of_time(&self, what: &str) -> GithubError {
        GithubError::OutOfTime {
            what: what.to_string(),
            budget: self.budget,
        }
    }

    /// The transport (tests look at what was sent).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Time left of the budget.
    pub fn time_left(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }
}

/// What to do with a non-2xx answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    GiveUp,
    /// Retry; after this long when the server said so.
    RetryAfter(Option<Duration>),
}

/// The retry rule, a pure function of the answer and the clock (unix seconds).
pub fn decide(r: &ApiResponse, now_unix: u64) -> Decision {
    let server_wait = || {
        if let Some(secs) = r
            .header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            return Some(Duration::from_secs(secs));
        }
        if r.header("x-ratelimit-remaining").map(str::trim) == Some("0") {
            let reset = r.header("x-ratelimit-reset")?.trim().parse::<u64>().ok()?;
            return Some(Duration::from_secs(reset.saturating_sub(now_unix).max(1)));
        }
        None
    };
    match r.status {
        429 => Decision::RetryAfter(server_wait()),
        403 if is_rate_limit(r) => Decision::RetryAfter(server_wait()),
        500..=599 => Decision::RetryAfter(server_wait()),
        _ => Decision::GiveUp,
    }
}

/// A 403 that is a (primary or secondary) rate limit rather than a missing permission.
fn is_rate_limit(r: &ApiResponse) -> bool {
    r.header("x-ratelimit-remaining").map(str::trim) == Some("0")
        || r.header("retry-after").is_some()
        || message_of(&r.body)
            .to_ascii_lowercase()
            .contains("rate limit")
}

fn classify(what: &str, r: &ApiResponse) -> GithubError {
    let what = what.to_string();
    let message = message_of(&r.body);
    match r.status {
        401 => GithubError::Unauthorized { what, message },
        403 if is_rate_limit(r) => GithubError::RateLimited {
            what,
            status: 403,
            wait: "and the limit resets later than this run can wait".into(),
        },
        403 => GithubError::Forbidden { what, message },
        404 => GithubError::NotFound { what, message },
        429 => GithubError::RateLimited {
            what,
            status: 429,
            wait: "and the limit resets later than this run can wait".into(),
        },
        status => GithubError::Status {
            what,
            status,
            message,
        },
    }
}

/// GitHub's `{"message": ...}`, else the start of the body.
fn message_of(body: &str) -> String {
    let text = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| body.chars().take(200).collect());
    text.replace(['\r', '\n'], " ")
}

fn backoff(attempt: u32) -> Duration {
    let base = BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(6))
        .min(MAX_BACKOFF);
    // Up to a quarter more, so that many runs do not retry in step.
    base + base.mul_f64(rand::random::<f64>() / 4.0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `next` page of a `Link` header.
pub fn next_link(link: Option<&str>) -> Option<String> {
    link?.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// The production transport: octocrab (rustls, no OpenSSL) with the token and API base.
pub struct Octo {
    client: octocrab::Octocrab,
}

impl Octo {
    pub fn new(api_url: &str, token: &str) -> Result<Octo, GithubError> {
        let bad = |reason: String| GithubError::BadResponse {
            what: "set up the GitHub client".into(),
            reason,
        };
        // octocrab panics on a token a header cannot carry (a pasted newline, say): refuse it here.
        let token = token.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                "the token is empty or has characters an HTTP header cannot carry (spaces, line breaks); check GITHUB_TOKEN / --github-token".into(),
            ));
        }
        let client = octocrab::Octocrab::builder()
            .base_uri(api_url)
            .map_err(|e| bad(format!("GITHUB_API_URL {api_url:?} is not a URL: {e}")))?
            .personal_token(token.to_string())
            .set_connect_timeout(Some(Duration::from_secs(5)))
            .set_read_timeout(Some(ATTEMPT_TIMEOUT))
            .set_write_timeout(Some(ATTEMPT_TIMEOUT))
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(Octo { client })
    }
}

impl Transport for Octo {
    async fn send(&self, request: ApiRequest) -> Result<ApiResponse, TransportError> {
        let failed = |e: octocrab::Error| TransportError(transport_reason(&e));
        let path = request.path.as_str();
        let response = match request.method {
            Method::Get => self.client._get(path).await,
            Method::Post => self.client._post(path, request.body.as_ref()).await,
            Method::Patch => self.client._patch(path, request.body.as_ref()).await,
        }
        .map_err(failed)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().ok()?.to_string(),
                ))
            })
            .collect();
        let body = self.client.body_to_string(response).await.map_err(failed)?;
        Ok(ApiResponse {
            status,
            headers,
            body,
        })
    }
}

/// The innermost cause of a transport error ("Connection refused (os error 111)").
fn transport_reason(e: &octocrab::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A transport that answers from a script and records the requests.
    pub struct Scripted {
        pub answers: Mutex<Vec<Result<ApiResponse, TransportError>>>,
        pub seen: Mutex<Vec<ApiRequest>>,
    }

    impl Scripted {
        pub fn new(answers: Vec<Result<ApiResponse, TransportError>>) -> Self {
            Scripted {
                answers: Mutex::new(answers.into_iter().rev().collect()),
                seen: Mutex::new(Vec::new()),
            }
        }
    }

    impl Transport for Scripted {
        async fn send(&self, request: ApiRequest) -> Result<ApiResponse, TransportError> {
            self.seen.lock().unwrap().push(request);
            self.answers
                .lock()
                .unwrap()
                .pop()
                .unwrap_or_else(|| Err(TransportError("script exhausted".into())))
        }
    }

    pub fn answer(
        status: u16,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<ApiResponse, TransportError> {
        Ok(ApiResponse {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_string(),
        })
    }

    fn get() -> ApiRequest {
        ApiRequest {
            method: Method::Get,
            path: "/x".into(),
            body: None,
        }
    }

    #[test]
    fn decide_table() {
        let now = 1_000;
        let r =
            |status, headers: &[(&str, &str)], body: &str| answer(status, headers, body).unwrap();
        let cases = [
            (r(500, &[], ""), Decision::RetryAfter(None)),
            (
                r(502, &[("retry-after", "2")], ""),
                Decision::RetryAfter(Some(Duration::from_secs(2))),
            ),
            (
                r(429, &[("retry-after", "3")], ""),
                Decision::RetryAfter(Some(Duration::from_secs(3))),
            ),
            (
                r(
                    429,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1005"),
                    ],
                    "",
                ),
                Decision::RetryAfter(Some(Duration::from_secs(5))),
            ),
            (
                r(
                    403,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1010"),
                    ],
                    "",
                ),
                Decision::RetryAfter(Some(Duration::from_secs(10))),
            ),
            (
                r(
                    403,
                    &[],
                    r#"{"message":"You have exceeded a secondary rate limit"}"#,
                ),
                Decision::RetryAfter(None),
            ),
            (
                r(
                    403,
                    &[],
                    r#"{"message":"Resource not accessible by integration"}"#,
                ),
                Decision::GiveUp,
            ),
            (r(401, &[], ""), Decision::GiveUp),
            (r(404, &[], ""), Decision::GiveUp),
            (r(422, &[], ""), Decision::GiveUp),
        ];
        for (response, want) in cases {
            assert_eq!(decide(&response, now), want, "{response:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_5xx_then_succeeds() {
        let t = Scripted::new(vec![
            answer(503, &[], ""),
            answer(502, &[], ""),
            answer(200, &[], "{}"),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        assert_eq!(c.call("x", get()).await.unwrap().status, 200);
        assert_eq!(c.transport.seen.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn forbidden_is_not_retried() {
        let t = Scripted::new(vec![answer(
            403,
            &[],
            r#"{"message":"Resource not accessible by integration"}"#,
        )]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let e = c
            .call("update the PR comment on o/r#1", get())
            .await
            .unwrap_err();
        assert!(matches!(e, GithubError::Forbidden { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("update the PR comment on o/r#1")
                && text.contains("pull-requests: write"),
            "{text}"
        );
        assert_eq!(c.transport.seen.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_rate_limit_gives_up_at_once() {
        let t = Scripted::new(vec![answer(429, &[("retry-after", "3600")], "")]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let e = c.call("x", get()).await.unwrap_err();
        assert!(matches!(e, GithubError::RateLimited { .. }), "{e}");
        assert!(c.time_left() > Duration::from_secs(29), "did not wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_deploy_leaves_the_end_a_whole_budget() {
        let c = Client::new(
            Scripted::new(vec![]),
            "https://api.github.com",
            Duration::from_secs(30),
        );
        tokio::time::sleep(Duration::from_secs(45)).await;
        assert_eq!(c.time_left(), Duration::ZERO, "the start's budget is spent");
        c.restart_budget();
        assert_eq!(c.time_left(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_stop_within_the_budget() {
        let t = Scripted::new((0..100).map(|_| answer(500, &[], "")).collect());
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let started = Instant::now();
        let e = c.call("x", get()).await.unwrap_err();
        assert!(matches!(e, GithubError::OutOfTime { .. }), "{e}");
        assert!(started.elapsed() <= Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_after_a_few_tries() {
        let t = Scripted::new(
            (0..5)
                .map(|_| Err(TransportError("Connection refused".into())))
                .collect(),
        );
        let c = Client::new(t, "http://127.0.0.1:1", Duration::from_secs(30));
        let e = c.call("x", get()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot x: GitHub is unreachable at http://127.0.0.1:1: Connection refused"
        );
        assert_eq!(c.transport.seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn next_link_table() {
        let link = r#"<https://api.github.com/repositories/1/issues/2/comments?page=2>; rel="next", <https://api.github.com/repositories/1/issues/2/comments?page=3>; rel="last""#;
        assert_eq!(
            next_link(Some(link)).as_deref(),
            Some("https://api.github.com/repositories/1/issues/2/comments?page=2")
        );
        assert_eq!(next_link(Some(r#"<https://x/?page=1>; rel="prev""#)), None);
        assert_eq!(next_link(None), None);
    }
}
