//! The one retry loop of rollguard's remote calls (the cluster's API server, GitHub's REST
//! API): attempts bounded in time and number, exponential backoff with jitter, a server's
//! Retry-After honoured only when it fits before the deadline (with a little jitter above it,
//! so that callers told the same wait do not come back in lockstep), nothing sent once the
//! deadline has passed. A cancel stops a read at once; a write in flight is given a short
//! grace to be answered, so that what it changed is known.
//!
//! What is worth another attempt is the caller's: it supplies a [`Classifier`] that turns its
//! own error type into a [`Verdict`] (the cluster's in `cluster/retry.rs`, GitHub's in
//! `github/api.rs`, each a pure function with its table tests). What the caller says when the
//! loop gives up is the caller's too: [`GaveUp`] tells it why, with the last error.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a classifier says about one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Retrying cannot help: give up with this error.
    Fatal,
    /// Worth another attempt after the backoff.
    Retry,
    /// Worth another attempt after the wait the server asked for (Retry-After and the like),
    /// when that wait fits before the deadline.
    RetryAfter(Duration),
}

/// A caller's rules for its own error type.
pub trait Classifier<E> {
    /// Whether and when to try again after `err`. Pure.
    fn verdict(&self, err: &E) -> Verdict;
    /// False when the attempt got no answer at all (refused, reset, timed out): those are
    /// counted against [`RetryBudget::max_unanswered`].
    fn answered(&self, err: &E) -> bool;
    /// The error that stands for an attempt cut off after `after` without an answer.
    fn timed_out(&self, what: &str, after: Duration) -> E;
}

/// Requests one retried call may send at most by default, whatever its deadline. Attempts
/// the server answered with the wait it wants (Retry-After) are not counted: the server
/// handled nothing and said when to come back, and the deadline bounds them.
pub const MAX_ATTEMPTS: u32 = 8;

/// How long a write in flight when the cancel comes may still take to be answered.
pub const WRITE_CANCEL_GRACE: Duration = Duration::from_secs(2);

/// How a cancel stops a retried call.
#[derive(Debug, Clone, Copy)]
pub enum Cancel<'a> {
    /// It cannot be cancelled.
    Never,
    /// At once, also mid-request: a read, whose dropped request changes nothing.
    Read(&'a CancellationToken),
    /// Between attempts; an attempt in flight gets [`WRITE_CANCEL_GRACE`] to be answered (a
    /// write: dropping it would leave unknown whether the server did it). Past the grace it
    /// counts as an attempt without an answer.
    Write(&'a CancellationToken),
}

impl Cancel<'_> {
    fn token(&self) -> Option<&CancellationToken> {
        match self {
            Cancel::Never => None,
            Cancel::Read(t) | Cancel::Write(t) => Some(t),
        }
    }

    async fn cancelled(&self) {
        match self.token() {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    }

    fn is_cancelled(&self) -> bool {
        self.token().is_some_and(CancellationToken::is_cancelled)
    }
}

/// How long a bookkeeping call (Lease, release record) keeps retrying.
pub const BOOKKEEPING_WINDOW: Duration = Duration::from_secs(20);

/// How the backoff is spread so that many callers do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Scaled into `[0.5, 1.0]` of the delay (the cluster's calls).
    Below,
    /// Up to a quarter more than the delay (GitHub's calls).
    Above,
}

/// Bounds of a retried operation.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Nothing is attempted or slept past this instant.
    pub deadline: Instant,
    /// At most this many attempts (None: until the deadline).
    pub max_attempts: Option<u32>,
    /// At most this many attempts that got no answer at all (refused, dropped, timed out):
    /// a server that answers 5xx is there and may recover, one that does not answer is
    /// likely down (None: no limit of its own).
    pub max_unanswered: Option<u32>,
    /// One attempt may take at most this long.
    pub attempt_timeout: Duration,
    pub base_delay: Duration,
    pub max_delay: Duration,
    pub jitter: Jitter,
}

impl RetryBudget {
    /// Retries until the deadline, at most [`MAX_ATTEMPTS`] requests.
    pub fn until(deadline: Instant) -> Self {
        RetryBudget {
            deadline,
            max_attempts: Some(MAX_ATTEMPTS),
            max_unanswered: None,
            attempt_timeout: Duration::from_secs(30),
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            jitter: Jitter::Below,
        }
    }

    /// The first contact with a cluster: a target that does not answer should fail in
    /// seconds (three unanswered attempts), not at the end of its deadline; one that answers
    /// 5xx gets a few more attempts, since one discovery attempt is two requests.
    pub fn first_contact(deadline: Instant) -> Self {
        RetryBudget {
            max_attempts: Some(MAX_ATTEMPTS + 2),
            max_unanswered: Some(3),
            attempt_timeout: Duration::from_secs(10),
            ..RetryBudget::until(deadline)
        }
    }

    /// For bookkeeping calls (the Lease, release records) that have no deadline of their own:
    /// a few seconds of retries, enough to ride out a burst of 5xx.
    pub fn bookkeeping() -> Self {
        RetryBudget {
            attempt_timeout: Duration::from_secs(10),
            ..RetryBudget::until(Instant::now() + BOOKKEEPING_WINDOW)
        }
    }

    /// The wait before attempt `attempt + 2`, `random` in `0..=1`.
    fn backoff(&self, attempt: u32, random: f64) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(20));
        let raw = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let random = random.clamp(0.0, 1.0);
        match self.jitter {
            Jitter::Below => raw.mul_f64(0.5 + 0.5 * random),
            Jitter::Above => raw + raw.mul_f64(random / 4.0),
        }
    }
}

/// Exponential backoff with jitter: `base * 2^attempt`, capped, then scaled into
/// `[0.5, 1.0]` of itself by `jitter` (0..=1) so that many targets do not retry in lockstep.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration, jitter: f64) -> Duration {
    RetryBudget {
        base_delay: base,
        max_delay: cap,
        ..RetryBudget::until(Instant::now())
    }
    .backoff(attempt, jitter)
}

/// Why the loop stopped without a success; the caller words it.
#[derive(Debug)]
pub enum GaveUp<E> {
    /// A fatal error, or the last one when the attempts (or unanswered attempts) ran out.
    Failed(E),
    /// The wait before the next attempt (the server's, or the backoff) does not fit before
    /// the deadline.
    NoTime {
        last: E,
        wait: Duration,
    },
    /// The deadline had passed before the next attempt; `last` is None when nothing was sent.
    Deadline {
        last: Option<E>,
    },
    Cancelled,
}

/// Runs `op` until it succeeds, the classifier calls its error fatal, the budget runs out or
/// `cancel` fires.
pub async fn run<T, E, C, F, Fut>(
    what: &str,
    budget: &RetryBudget,
    classifier: &C,
    cancel: Cancel<'_>,
    mut op: F,
) -> Result<T, GaveUp<E>>
where
    C: Classifier<E>,
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt: u32 = 0;
    let mut unanswered: u32 = 0;
    let mut last: Option<E> = None;
    loop {
        let remaining = budget.deadline.saturating_duration_since(Instant::now());
        // Past the deadline nothing is sent: the caller reports it as not done rather than
        // as a request of unknown fate.
        if remaining.is_zero() {
            return Err(GaveUp::Deadline { last });
        }
        if cancel.is_cancelled() {
            return Err(GaveUp::Cancelled);
        }
        let attempt_timeout = budget.attempt_timeout.min(remaining);
        let err = match attempt_once(what, attempt_timeout, classifier, cancel, op()).await {
            Attempt::Answer(Ok(value)) => return Ok(value),
            Attempt::Answer(Err(err)) => err,
            Attempt::Stopped => return Err(GaveUp::Cancelled),
            Attempt::CancelledUnanswered(err) => return Err(GaveUp::Failed(err)),
        };
        let server_wait = match classifier.verdict(&err) {
            Verdict::Fatal => return Err(GaveUp::Failed(err)),
            Verdict::Retry => None,
            Verdict::RetryAfter(wait) => Some(wait),
        };
        if server_wait.is_none() {
            attempt += 1;
        }
        if !classifier.answered(&err) {
            unanswered += 1;
        }
        if budget.max_attempts.is_some_and(|max| attempt >= max)
            || budget.max_unanswered.is_some_and(|max| unanswered >= max)
        {
            return Err(GaveUp::Failed(err));
        }
        let wait = match server_wait {
            Some(wait) => wait,
            None => budget.backoff(attempt.saturating_sub(1), rand::random()),
        };
        if Instant::now() + wait >= budget.deadline {
            return Err(GaveUp::NoTime { last: err, wait });
        }
        // A server's wait is a minimum: callers told the same wait spread out above it.
        let wait = match server_wait {
            Some(wait) => spread_above(wait, rand::random())
                .min(budget.deadline.saturating_duration_since(Instant::now())),
            None => wait,
        };
        tracing::debug!(what, attempt, wait_ms = wait.as_millis() as u64, error = %err, "transient error, retrying");
        last = Some(err);
        tokio::select! {
            _ = cancel.cancelled() => return Err(GaveUp::Cancelled),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// How one attempt ended.
enum Attempt<T, E> {
    /// An answer, or the error standing for none within the attempt's timeout.
    Answer(Result<T, E>),
    /// A cancel stopped it (a read, at once).
    Stopped,
    /// A write in flight when the cancel came got no answer within the grace: whether the
    /// server did it is unknown.
    CancelledUnanswered(E),
}

/// One attempt, cut off after `timeout` (as an error without an answer) or by the cancel as
/// `cancel` says.
async fn attempt_once<T, E, C: Classifier<E>>(
    what: &str,
    timeout: Duration,
    classifier: &C,
    cancel: Cancel<'_>,
    attempt: impl Future<Output = Result<T, E>>,
) -> Attempt<T, E> {
    let attempt = tokio::time::timeout(timeout, attempt);
    tokio::pin!(attempt);
    let answer = match cancel {
        Cancel::Never => attempt.await,
        Cancel::Read(token) => tokio::select! {
            _ = token.cancelled() => return Attempt::Stopped,
            r = &mut attempt => r,
        },
        Cancel::Write(token) => tokio::select! {
            _ = token.cancelled() => {
                let grace = WRITE_CANCEL_GRACE.min(timeout);
                match tokio::time::timeout(grace, &mut attempt).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Attempt::CancelledUnanswered(classifier.timed_out(what, grace));
                    }
                }
            }
            r = &mut attempt => r,
        },
    };
    Attempt::Answer(answer.unwrap_or_else(|_| Err(classifier.timed_out(what, timeout))))
}

/// `wait` plus up to half of it, `random` in `0..=1`.
fn spread_above(wait: Duration, random: f64) -> Duration {
    wait + wait.mul_f64(random.clamp(0.0, 1.0) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A test error: a status (0: no answer) and the server's wait.
    #[derive(Debug, Clone, PartialEq)]
    struct Failure(u16, Option<u64>);

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "status {}", self.0)
        }
    }

    struct Rules;

    impl Classifier<Failure> for Rules {
        fn verdict(&self, err: &Failure) -> Verdict {
            match (err.0, err.1) {
                (0 | 500..=599, _) => Verdict::Retry,
                (429, Some(secs)) => Verdict::RetryAfter(Duration::from_secs(secs)),
                (429, None) => Verdict::Retry,
                _ => Verdict::Fatal,
            }
        }
        fn answered(&self, err: &Failure) -> bool {
            err.0 != 0
        }
        fn timed_out(&self, _: &str, _: Duration) -> Failure {
            Failure(0, None)
        }
    }

    fn fast(deadline: Duration) -> RetryBudget {
        RetryBudget {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..RetryBudget::until(Instant::now() + deadline)
        }
    }

    /// Runs against a script of answers (None: success) and returns the outcome and the
    /// number of attempts.
    async fn scripted(
        budget: &RetryBudget,
        script: Vec<Option<Failure>>,
    ) -> (Result<u32, GaveUp<Failure>>, u32) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let script = Arc::new(script);
        let result = run("test", budget, &Rules, Cancel::Never, move || {
            let (c, script) = (c.clone(), script.clone());
            async move {
                let n = c.fetch_add(1, Ordering::SeqCst) as usize;
                match script.get(n.min(script.len() - 1)).cloned().flatten() {
                    None => Ok(7),
                    Some(e) => Err(e),
                }
            }
        })
        .await;
        (result, calls.load(Ordering::SeqCst))
    }

    #[test]
    fn backoff_grows_is_capped_and_jitters_per_caller() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(5);
        assert_eq!(backoff_delay(0, base, cap, 1.0), Duration::from_millis(100));
        assert_eq!(backoff_delay(3, base, cap, 1.0), Duration::from_millis(800));
        assert_eq!(backoff_delay(3, base, cap, 0.0), Duration::from_millis(400));
        assert_eq!(backoff_delay(30, base, cap, 1.0), cap);
        let above = RetryBudget {
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
            jitter: Jitter::Above,
            ..RetryBudget::until(Instant::now())
        };
        assert_eq!(above.backoff(1, 0.0), Duration::from_millis(500));
        assert_eq!(above.backoff(1, 1.0), Duration::from_millis(625));
        assert_eq!(above.backoff(9, 0.0), Duration::from_secs(8));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_what_the_classifier_allows_and_stops_at_a_fatal_error() {
        let busy = Some(Failure(503, None));
        let (result, calls) = scripted(&fast(Duration::from_secs(5)), vec![busy, None]).await;
        assert_eq!((result.ok(), calls), (Some(7), 2));
        let (result, calls) = scripted(
            &fast(Duration::from_secs(5)),
            vec![Some(Failure(403, None))],
        )
        .await;
        assert!(matches!(result, Err(GaveUp::Failed(Failure(403, _)))));
        assert_eq!(calls, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_wait_is_honoured_when_it_fits_and_ends_the_call_when_it_does_not() {
        let started = Instant::now();
        let slow = Some(Failure(429, Some(2)));
        let (result, calls) =
            scripted(&fast(Duration::from_secs(5)), vec![slow.clone(), None]).await;
        assert_eq!((result.ok(), calls), (Some(7), 2));
        assert!(started.elapsed() >= Duration::from_secs(2));
        let (result, calls) = scripted(
            &fast(Duration::from_secs(5)),
            vec![Some(Failure(429, Some(100)))],
        )
        .await;
        assert_eq!(calls, 1);
        let Err(GaveUp::NoTime { last, wait }) = result else {
            panic!("expected NoTime")
        };
        assert_eq!((last.0, wait), (429, Duration::from_secs(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_and_unanswered_attempts_are_bounded() {
        let (result, calls) = scripted(
            &fast(Duration::from_secs(30)),
            vec![Some(Failure(503, None))],
        )
        .await;
        assert!(matches!(result, Err(GaveUp::Failed(_))));
        assert_eq!(calls, MAX_ATTEMPTS);
        let budget = RetryBudget {
            max_unanswered: Some(3),
            ..fast(Duration::from_secs(30))
        };
        let (_, calls) = scripted(&budget, vec![Some(Failure(0, None))]).await;
        assert_eq!(calls, 3);
        let (_, calls) = scripted(&budget, vec![Some(Failure(500, None))]).await;
        assert_eq!(calls, MAX_ATTEMPTS);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_sent_past_the_deadline() {
        let (result, calls) = scripted(&fast(Duration::ZERO), vec![None]).await;
        assert!(matches!(result, Err(GaveUp::Deadline { last: None })));
        assert_eq!(calls, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_without_answer_is_cut_off_and_counted_as_unanswered() {
        let budget = RetryBudget {
            attempt_timeout: Duration::from_secs(1),
            max_unanswered: Some(2),
            ..fast(Duration::from_secs(30))
        };
        let result: Result<(), _> = run("test", &budget, &Rules, Cancel::Never, || {
            std::future::pending::<Result<(), Failure>>()
        })
        .await;
        assert!(matches!(result, Err(GaveUp::Failed(Failure(0, None)))));
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_stops_the_wait() {
        let token = CancellationToken::new();
        token.cancel();
        let result: Result<(), _> = run(
            "test",
            &fast(Duration::from_secs(30)),
            &Rules,
            Cancel::Read(&token),
            std::future::pending::<Result<(), Failure>>,
        )
        .await;
        assert!(matches!(result, Err(GaveUp::Cancelled)));
    }

    #[tokio::test(start_paused = true)]
    async fn server_waits_are_not_counted_as_attempts_and_spread_above_the_wait() {
        // Ten 429s asking for 1 s, then a success: more than MAX_ATTEMPTS requests, each
        // after at least the asked second, none past half a second more.
        let mut script = vec![Some(Failure(429, Some(1))); 10];
        script.push(None);
        let started = Instant::now();
        let (result, calls) = scripted(&fast(Duration::from_secs(60)), script).await;
        assert_eq!((result.ok(), calls), (Some(7), 11));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took <= Duration::from_secs(15),
            "{took:?}"
        );
        assert_eq!(
            spread_above(Duration::from_secs(2), 0.0),
            Duration::from_secs(2)
        );
        assert_eq!(
            spread_above(Duration::from_secs(2), 1.0),
            Duration::from_secs(3)
        );
    }

    /// A call whose cancel fires once its attempt is in flight; the attempt answers after
    /// `after`.
    async fn cancelled_in_flight(write: bool, after: Duration) -> Result<u32, GaveUp<Failure>> {
        let token = CancellationToken::new();
        let cancel = match write {
            true => Cancel::Write(&token),
            false => Cancel::Read(&token),
        };
        run(
            "test",
            &fast(Duration::from_secs(30)),
            &Rules,
            cancel,
            || {
                let token = token.clone();
                async move {
                    token.cancel();
                    tokio::time::sleep(after).await;
                    Ok::<u32, Failure>(7)
                }
            },
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_lets_a_write_in_flight_be_answered_and_stops_a_read_at_once() {
        let second = Duration::from_secs(1);
        assert!(matches!(cancelled_in_flight(true, second).await, Ok(7)));
        // No answer within the grace: an attempt of unknown fate, not a clean cancel.
        assert!(matches!(
            cancelled_in_flight(true, WRITE_CANCEL_GRACE * 2).await,
            Err(GaveUp::Failed(Failure(0, None)))
        ));
        assert!(matches!(
            cancelled_in_flight(false, second).await,
            Err(GaveUp::Cancelled)
        ));
    }
}
