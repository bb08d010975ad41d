//! The narrow seam to GitHub's REST API: one `send` per call ([`Op`]; octocrab's typed APIs
//! in production, a fake in unit tests), and on top of it GitHub's retry rules (the
//! classifier [`GithubRules`] for the retry core in `util/retry.rs`) and the one deadline of
//! a run.
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

use super::context::Repo;
use crate::util::retry::{self, Classifier, GaveUp, Jitter, RetryBudget, Verdict};

/// One call the GitHub sink makes, by what it does; the production transport maps each to
/// octocrab's typed API of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One page of a pull request's comments, oldest first ([`PER_PAGE`] a page).
    ListComments {
        repo: Repo,
        pr: u64,
        page: u32,
    },
    CreateComment {
        repo: Repo,
        pr: u64,
        body: String,
    },
    UpdateComment {
        repo: Repo,
        id: u64,
        body: String,
    },
    /// The pull requests a commit belongs to (at most [`PER_PAGE`]).
    CommitPulls {
        repo: Repo,
        sha: String,
    },
    CreateDeployment {
        repo: Repo,
        sha: String,
        environment: String,
        description: String,
    },
    SetDeploymentStatus {
        repo: Repo,
        id: u64,
        state: DeploymentState,
        environment: String,
        description: String,
        log_url: Option<String>,
    },
}

/// Items per page of a list call (GitHub's maximum).
pub const PER_PAGE: u8 = 100;

/// A deployment state GitHub knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentState {
    InProgress,
    Success,
    Failure,
}

impl DeploymentState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::InProgress => "in_progress",
            DeploymentState::Success => "success",
            DeploymentState::Failure => "failure",
        }
    }
}

/// What a call that succeeded returned, as much of it as the sink reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// (id, body) of each comment of the page.
    Comments(Vec<(u64, Option<String>)>),
    /// The id of what was created (a comment, a deployment).
    Created(u64),
    /// (number, open) of each pull request.
    Pulls(Vec<(u64, bool)>),
    Done,
}

/// One non-2xx answer: its status, headers and GitHub's message.
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

/// Makes one call. Implementations do no retries of their own.
pub trait Transport: Send + Sync {
    fn send(&self, op: Op) -> impl Future<Output = Result<Reply, Failure>> + Send;
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
/// First backoff; doubled per attempt, with up to a quarter more as jitter.
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

    /// Makes the call `op`, retrying what may pass; `what` names the action in errors
    /// ("update the PR comment on octo/shop#12"). The run's deadline is read as the call
    /// starts: a [`Client::restart_budget`] counts for the calls after it.
    pub async fn call(&self, what: &str, op: Op) -> Result<Reply, GithubError> {
        let budget = RetryBudget {
            max_attempts: None,
            max_unanswered: Some(TRANSPORT_ATTEMPTS),
            attempt_timeout: ATTEMPT_TIMEOUT,
            base_delay: BACKOFF,
            max_delay: MAX_BACKOFF,
            jitter: Jitter::Above,
            ..RetryBudget::until(self.deadline())
        };
        retry::run(what, &budget, &GithubRules, retry::Cancel::Never, || {
            self.transport.send(op.clone())
        })
        .await
        .map_err(|gave_up| self.gave_up(what, gave_up))
    }

    /// The warning for a call the retry loop gave up on.
    fn gave_up(&self, what: &str, gave_up: GaveUp<Failure>) -> GithubError {
        match gave_up {
            GaveUp::Failed(Failure::Answer(r)) => classify(what, &r),
            GaveUp::Failed(Failure::BadAnswer(reason)) => GithubError::BadResponse {
                what: what.to_string(),
                reason,
            },
            GaveUp::Failed(Failure::Transport(e)) => GithubError::Unreachable {
                what: what.to_string(),
                api: self.api.clone(),
                reason: e.0,
            },
            GaveUp::NoTime {
                last: Failure::Answer(r),
                wait,
            } if matches!(r.status, 403 | 429) => GithubError::RateLimited {
                what: what.to_string(),
                status: r.status,
                wait: format!(
                    "to retry after {}, more than is left of the {} bound on GitHub calls (github.timeout)",
                    crate::util::duration::format_duration(wait),
                    crate::util::duration::format_duration(self.budget)
                ),
            },
            GaveUp::NoTime { .. } | GaveUp::Deadline { .. } | GaveUp::Cancelled => {
                self.out_of_time(what)
            }
        }
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

/// A failed attempt: an answer that is not 2xx, none at all, or a 2xx whose body is not
/// what GitHub's API documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Answer(ApiResponse),
    Transport(TransportError),
    BadAnswer(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Answer(r) => write!(f, "{} {}", r.status, message_of(&r.body)),
            Failure::Transport(e) => write!(f, "{e}"),
            Failure::BadAnswer(reason) => write!(f, "unexpected answer: {reason}"),
        }
    }
}

/// GitHub's rules for the retry core: [`decide`] on answers; an attempt without an answer is
/// retried, at most [`TRANSPORT_ATTEMPTS`] of them.
pub struct GithubRules;

impl Classifier<Failure> for GithubRules {
    fn verdict(&self, err: &Failure) -> Verdict {
        match err {
            Failure::Answer(r) => decide(r, unix_now()),
            Failure::Transport(_) => Verdict::Retry,
            Failure::BadAnswer(_) => Verdict::Fatal,
        }
    }

    fn answered(&self, err: &Failure) -> bool {
        !matches!(err, Failure::Transport(_))
    }

    fn timed_out(&self, _what: &str, after: Duration) -> Failure {
        Failure::Transport(TransportError(format!(
            "no answer within {}",
            crate::util::duration::format_duration(after)
        )))
    }
}

/// The retry rule for a non-2xx answer, a pure function of the answer and the clock (unix
/// seconds).
pub fn decide(r: &ApiResponse, now_unix: u64) -> Verdict {
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
    let retry = || server_wait().map_or(Verdict::Retry, Verdict::RetryAfter);
    match r.status {
        429 => retry(),
        403 if is_rate_limit(r) => retry(),
        500..=599 => retry(),
        _ => Verdict::Fatal,
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

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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

/// Every call through octocrab's typed API of it (issues, repos' commits and deployments);
/// octocrab sends the token, the API version header and the JSON body.
impl Transport for Octo {
    async fn send(&self, op: Op) -> Result<Reply, Failure> {
        let c = &self.client;
        match op {
            Op::ListComments { repo, pr, page } => {
                let page = c
                    .issues(&repo.owner, &repo.name)
                    .list_comments(pr)
                    .per_page(PER_PAGE)
                    .page(page)
                    .send()
                    .await
                    .map_err(failure)?;
                Ok(Reply::Comments(
                    page.items
                        .into_iter()
                        .map(|c| (c.id.into_inner(), c.body))
                        .collect(),
                ))
            }
            Op::CreateComment { repo, pr, body } => {
                let created = c
                    .issues(&repo.owner, &repo.name)
                    .create_comment(pr, body)
                    .await
                    .map_err(failure)?;
                Ok(Reply::Created(created.id.into_inner()))
            }
            Op::UpdateComment { repo, id, body } => {
                // octocrab sends this as POST, which GitHub takes for PATCH on every endpoint.
                c.issues(&repo.owner, &repo.name)
                    .update_comment(octocrab::models::CommentId(id), body)
                    .await
                    .map_err(failure)?;
                Ok(Reply::Done)
            }
            Op::CommitPulls { repo, sha } => {
                let pulls = c
                    .repos(&repo.owner, &repo.name)
                    .list_pulls(sha)
                    .per_page(PER_PAGE)
                    .send()
                    .await
                    .map_err(failure)?;
                Ok(Reply::Pulls(
                    pulls
                        .items
                        .into_iter()
                        .map(|p| {
                            let open = p.state == Some(octocrab::models::IssueState::Open);
                            (p.number, open)
                        })
                        .collect(),
                ))
            }
            Op::CreateDeployment {
                repo,
                sha,
                environment,
                description,
            } => {
                let created = c
                    .repos(&repo.owner, &repo.name)
                    .deployments()
                    .create(sha)
                    .environment(environment)
                    .description(description)
                    // The deploy itself is rollguard's job; no merge, no required checks.
                    .auto_merge(false)
                    .required_contexts(Vec::<String>::new())
                    .task("deploy")
                    .send()
                    .await
                    .map_err(failure)?;
                Ok(Reply::Created(created.id.into_inner()))
            }
            Op::SetDeploymentStatus {
                repo,
                id,
                state,
                environment,
                description,
                log_url,
            } => {
                use octocrab::models::repos::DeploymentStatusState as S;
                let state = match state {
                    DeploymentState::InProgress => S::InProgress,
                    DeploymentState::Success => S::Success,
                    DeploymentState::Failure => S::Failure,
                };
                let repos = c.repos(&repo.owner, &repo.name);
                let mut status = repos
                    .deployments()
                    .statuses(octocrab::models::DeploymentId(id))
                    .create(state)
                    .description(description)
                    .environment(environment)
                    .auto_inactive(true);
                if let Some(url) = log_url {
                    status = status.log_url(url);
                }
                status.send().await.map_err(failure)?;
                Ok(Reply::Done)
            }
        }
    }
}

/// An octocrab error as the retry rules see it: GitHub's answer (status, headers, message), a
/// 2xx body that does not fit GitHub's documented shape, or no answer.
fn failure(e: octocrab::Error) -> Failure {
    match e {
        octocrab::Error::GitHub { source, .. } => Failure::Answer(ApiResponse {
            status: source.status_code.as_u16(),
            headers: source
                .headers
                .iter()
                .flatten()
                .filter_map(|(k, v)| {
                    Some((
                        k.as_str().to_ascii_lowercase(),
                        v.to_str().ok()?.to_string(),
                    ))
                })
                .collect(),
            body: serde_json::json!({ "message": source.message }).to_string(),
        }),
        octocrab::Error::Serde { source, .. } => Failure::BadAnswer(source.to_string()),
        octocrab::Error::Json { source, .. } => {
            Failure::BadAnswer(format!("{} at {}", source.inner(), source.path()))
        }
        other => Failure::Transport(TransportError(transport_reason(&other))),
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

    /// A transport that answers from a script and records the calls.
    pub struct Scripted {
        pub answers: Mutex<Vec<Result<Reply, Failure>>>,
        pub seen: Mutex<Vec<Op>>,
    }

    impl Scripted {
        pub fn new(answers: Vec<Result<Reply, Failure>>) -> Self {
            Scripted {
                answers: Mutex::new(answers.into_iter().rev().collect()),
                seen: Mutex::new(Vec::new()),
            }
        }
    }

    impl Transport for Scripted {
        async fn send(&self, op: Op) -> Result<Reply, Failure> {
            self.seen.lock().unwrap().push(op);
            self.answers.lock().unwrap().pop().unwrap_or_else(|| {
                Err(Failure::Transport(TransportError(
                    "script exhausted".into(),
                )))
            })
        }
    }

    /// A non-2xx answer.
    pub fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> ApiResponse {
        ApiResponse {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_string(),
        }
    }

    /// A failed attempt with a non-2xx answer.
    pub fn refused(status: u16, headers: &[(&str, &str)], body: &str) -> Result<Reply, Failure> {
        Err(Failure::Answer(answer(status, headers, body)))
    }

    fn get() -> Op {
        Op::CommitPulls {
            repo: Repo::parse("o/r").unwrap(),
            sha: "abc".into(),
        }
    }

    #[test]
    fn decide_table() {
        let now = 1_000;
        let r = answer;
        let cases = [
            (r(500, &[], ""), Verdict::Retry),
            (
                r(502, &[("retry-after", "2")], ""),
                Verdict::RetryAfter(Duration::from_secs(2)),
            ),
            (
                r(429, &[("retry-after", "3")], ""),
                Verdict::RetryAfter(Duration::from_secs(3)),
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
                Verdict::RetryAfter(Duration::from_secs(5)),
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
                Verdict::RetryAfter(Duration::from_secs(10)),
            ),
            (
                r(
                    403,
                    &[],
                    r#"{"message":"You have exceeded a secondary rate limit"}"#,
                ),
                Verdict::Retry,
            ),
            (
                r(
                    403,
                    &[],
                    r#"{"message":"Resource not accessible by integration"}"#,
                ),
                Verdict::Fatal,
            ),
            (r(401, &[], ""), Verdict::Fatal),
            (r(404, &[], ""), Verdict::Fatal),
            (r(422, &[], ""), Verdict::Fatal),
        ];
        for (response, want) in cases {
            assert_eq!(decide(&response, now), want, "{response:?}");
        }
    }

    #[test]
    fn failures_table() {
        let cases = [
            (
                Failure::Transport(TransportError("reset".into())),
                Verdict::Retry,
                false,
            ),
            (
                Failure::BadAnswer("missing field".into()),
                Verdict::Fatal,
                true,
            ),
            (Failure::Answer(answer(502, &[], "")), Verdict::Retry, true),
            (Failure::Answer(answer(404, &[], "")), Verdict::Fatal, true),
        ];
        for (failure, verdict, answered) in cases {
            assert_eq!(GithubRules.verdict(&failure), verdict, "{failure}");
            assert_eq!(GithubRules.answered(&failure), answered, "{failure}");
        }
        let cut = GithubRules.timed_out("x", Duration::from_secs(10));
        assert!(!GithubRules.answered(&cut) && cut.to_string().contains("no answer within"));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_5xx_then_succeeds() {
        let t = Scripted::new(vec![
            refused(503, &[], ""),
            refused(502, &[], ""),
            Ok(Reply::Done),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        assert_eq!(c.call("x", get()).await.unwrap(), Reply::Done);
        assert_eq!(c.transport.seen.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn forbidden_is_not_retried() {
        let t = Scripted::new(vec![refused(
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
    async fn an_answer_of_the_wrong_shape_is_not_retried() {
        let t = Scripted::new(vec![Err(Failure::BadAnswer("missing field `id`".into()))]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let e = c
            .call("create the PR comment on o/r#1", get())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create the PR comment on o/r#1: unexpected answer from GitHub: missing field `id`"
        );
        assert_eq!(c.transport.seen.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_that_fits_is_waited_for() {
        let t = Scripted::new(vec![
            refused(429, &[("retry-after", "5")], ""),
            Ok(Reply::Done),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let started = Instant::now();
        assert_eq!(c.call("x", get()).await.unwrap(), Reply::Done);
        // The asked wait, plus up to half of it (the retry core spreads server waits).
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(5) && waited <= Duration::from_millis(7500),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_rate_limit_gives_up_at_once() {
        let t = Scripted::new(vec![refused(429, &[("retry-after", "3600")], "")]);
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
        let t = Scripted::new((0..100).map(|_| refused(500, &[], "")).collect());
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
                .map(|_| {
                    Err(Failure::Transport(TransportError(
                        "Connection refused".into(),
                    )))
                })
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
}
