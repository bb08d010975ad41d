//! Credentials that outlive the run: an exec plugin's token is fetched again when its
//! `expirationTimestamp` is near and after a 401, a token file is read again after a 401 (and
//! at most a minute after the last read, as kube does), for every request of both of a
//! target's clients (apply, waits, the Lease renewals, the rollback, the records).
//!
//! kube 5 refreshes an exec token on expiry only, runs the plugin on a blocking thread with
//! no deadline, and never on a 401; so rollguard's clients carry this tower layer instead of
//! kube's auth for those two sources. Like client-go, a refused token is refreshed once per
//! token (concurrent 401s share one plugin run); unlike client-go, the refused request is
//! sent again once with the new token when its body can be replayed (all of kube's can), so
//! a rotation costs no failed call.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode, header::AUTHORIZATION};
use jiff::Timestamp;
use kube::client::Body;
use kube::config::AuthInfo;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Layer, Service, ServiceExt as _};

use crate::cluster::error::TargetError;
use crate::cluster::exec_auth::{self, Fetched};

/// A token is fetched again this long before it expires.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// On expiry grounds, a plugin is not run again sooner than this after its last run (a
/// plugin that hands out tokens about to expire would otherwise run for every request).
const MIN_REFETCH: Duration = Duration::from_secs(5);
/// A token file is read again at least this often, as kube does.
const FILE_RELOAD: Duration = Duration::from_secs(60);

/// Where a refreshable token comes from.
enum Source {
    Exec {
        auth: Box<AuthInfo>,
        user: String,
        /// `PATH` when the run started: where the plugin is found.
        path: Option<String>,
        timeout: Duration,
    },
    File(PathBuf),
}

/// The token in use and when it was fetched.
struct Current {
    token: String,
    expires_at: Option<Timestamp>,
    fetched_at: Timestamp,
    /// Bumped at every fetch: a 401 refreshes only the token it was answered to.
    generation: u64,
}

/// One target's refreshable credential, shared by its clients.
pub struct Refresher {
    source: Source,
    current: Mutex<Current>,
    fetches: AtomicU64,
}

/// Whether a token fetched at `fetched_at` that expires at `expires_at` must be fetched again
/// before a request sent at `now`. Pure.
pub fn needs_refresh(
    now: Timestamp,
    expires_at: Option<Timestamp>,
    fetched_at: Timestamp,
    reload_every: Option<Duration>,
) -> bool {
    let since = now.duration_since(fetched_at);
    let at_least = |d: Duration| since >= jiff::SignedDuration::try_from(d).unwrap_or_default();
    if let Some(every) = reload_every
        && at_least(every)
    {
        return true;
    }
    let Some(expires_at) = expires_at else {
        return false;
    };
    let margin = jiff::SignedDuration::try_from(EXPIRY_MARGIN).unwrap_or_default();
    now + margin >= expires_at && at_least(MIN_REFETCH)
}

impl Refresher {
    /// For a user with an exec plugin: runs it once now (stopped by `cancel`). A plugin that
    /// gives a client certificate instead of a token gives back the user to connect with.
    pub async fn exec(
        auth: &AuthInfo,
        user: &str,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Result<Arc<Refresher>, Box<AuthInfo>>, TargetError> {
        let (token, expires_at) = match exec_auth::fetch(auth, user, env, timeout, cancel).await? {
            Fetched::Token { token, expires_at } => (token, expires_at),
            Fetched::Certificate(user) => return Ok(Err(user)),
        };
        let source = Source::Exec {
            auth: Box::new(auth.clone()),
            user: user.to_string(),
            path: env("PATH"),
            timeout,
        };
        Ok(Ok(Arc::new(Refresher::new(source, token, expires_at))))
    }

    /// For a user with a token file: reads it now.
    pub fn file(path: PathBuf) -> Result<Arc<Refresher>, TargetError> {
        let token = read_token_file(&path)?;
        Ok(Arc::new(Refresher::new(Source::File(path), token, None)))
    }

    fn new(source: Source, token: String, expires_at: Option<Timestamp>) -> Refresher {
        Refresher {
            source,
            current: Mutex::new(Current {
                token,
                expires_at,
                fetched_at: Timestamp::now(),
                generation: 0,
            }),
            fetches: AtomicU64::new(1),
        }
    }

    /// How many times the credential was fetched (the first included).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The token for a request, fetched again first when it is about to expire; with its
    /// generation.
    async fn token(&self) -> Result<(String, u64), TargetError> {
        let mut current = self.current.lock().await;
        let reload = matches!(self.source, Source::File(_)).then_some(FILE_RELOAD);
        if needs_refresh(
            Timestamp::now(),
            current.expires_at,
            current.fetched_at,
            reload,
        ) {
            self.refetch(&mut current).await?;
        }
        Ok((current.token.clone(), current.generation))
    }

    /// After a 401 to the token of `generation`: fetches it again unless another request
    /// already did; the token to try next.
    async fn refused(&self, generation: u64) -> Result<String, TargetError> {
        let mut current = self.current.lock().await;
        if current.generation == generation {
            tracing::info!("the cluster refused the credentials (401): fetching them again");
            self.refetch(&mut current).await?;
        }
        Ok(current.token.clone())
    }

    async fn refetch(&self, current: &mut Current) -> Result<(), TargetError> {
        let (token, expires_at) = match &self.source {
            Source::File(path) => (read_token_file(path)?, None),
            Source::Exec {
                auth,
                user,
                path,
                timeout,
            } => {
                let env = |k: &str| if k == "PATH" { path.clone() } else { None };
                // Not the run's cancel: a rollback after a cancel needs its credentials too;
                // the plugin's deadline bounds it.
                let never = CancellationToken::new();
                match exec_auth::fetch(auth, user, &env, *timeout, &never).await? {
                    Fetched::Token { token, expires_at } => (token, expires_at),
                    Fetched::Certificate(_) => {
                        return Err(TargetError::new(
                            "Credentials",
                            format!(
                                "exec credential plugin of user {user:?} gave a client certificate where it gave a token before"
                            ),
                        ));
                    }
                }
            }
        };
        self.fetches.fetch_add(1, Ordering::Relaxed);
        current.token = token;
        current.expires_at = expires_at;
        current.fetched_at = Timestamp::now();
        current.generation += 1;
        Ok(())
    }
}

fn read_token_file(path: &std::path::Path) -> Result<String, TargetError> {
    let text = crate::cluster::known::read_small(path).ok_or_else(|| {
        TargetError::new(
            "Credentials",
            format!("token file {} cannot be read", path.display()),
        )
    })?;
    crate::report::redact::learn_value(text.trim().as_bytes());
    Ok(text.trim().to_string())
}

/// The tower layer that puts the [`Refresher`]'s token on every request.
#[derive(Clone)]
pub struct AuthLayer {
    refresher: Arc<Refresher>,
}

impl AuthLayer {
    pub fn new(refresher: Arc<Refresher>) -> AuthLayer {
        AuthLayer { refresher }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;
    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner: Arc::new(Mutex::new(inner)),
            refresher: self.refresher.clone(),
        }
    }
}

/// See [`AuthLayer`]. The inner stack (kube's, not `Clone`) is shared so that a refused
/// request can be sent again from the response future.
pub struct AuthService<S> {
    inner: Arc<Mutex<S>>,
    refresher: Arc<Refresher>,
}

impl<S, B> Service<Request<Body>> for AuthService<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness of the inner stack is awaited when the request is sent.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let refresher = self.refresher.clone();
        Box::pin(async move {
            let (token, generation) = refresher.token().await.map_err(BoxError::from)?;
            let again = replayable(&request);
            let response = send(&inner, with_bearer(request, &token)?).await?;
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }
            let token = match refresher.refused(generation).await {
                Ok(token) => token,
                Err(e) => {
                    tracing::warn!("{}", e.message);
                    return Ok(response);
                }
            };
            match again {
                Some(request) => send(&inner, with_bearer(request, &token)?).await,
                None => Ok(response),
            }
        })
    }
}

async fn send<S, B>(inner: &Mutex<S>, request: Request<Body>) -> Result<Response<B>, BoxError>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
{
    let future = {
        let mut service = inner.lock().await;
        service.ready().await.map_err(Into::into)?;
        service.call(request)
    };
    future.await.map_err(Into::into)
}

/// A copy of `request` to send again, when its body is in memory (kube's always are).
fn replayable(request: &Request<Body>) -> Option<Request<Body>> {
    let body = request.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
}

fn with_bearer(mut request: Request<Body>, token: &str) -> Result<Request<Body>, BoxError> {
    let mut value = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|_| BoxError::from("the credential is not a valid bearer token"))?;
    value.set_sensitive(true);
    request.headers_mut().insert(AUTHORIZATION, value);
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that accepts only the token in `accepted`, counting requests.
    fn server(
        accepted: Arc<std::sync::Mutex<String>>,
        requests: Arc<AtomicU64>,
    ) -> impl Service<
        Request<Body>,
        Response = Response<String>,
        Error = BoxError,
        Future = BoxFuture<'static, Result<Response<String>, BoxError>>,
    > + Send
    + 'static {
        tower::service_fn(move |request: Request<Body>| {
            let accepted = accepted.clone();
            let requests = requests.clone();
            let fut: BoxFuture<'static, Result<Response<String>, BoxError>> =
                Box::pin(async move {
                    requests.fetch_add(1, Ordering::SeqCst);
                    let want = format!(
                        "Bearer {}",
                        accepted.lock().map(|a| a.clone()).unwrap_or_default()
                    );
                    let ok = request
                        .headers()
                        .get(AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        == Some(want.as_str());
                    let mut response = Response::new(String::new());
                    if !ok {
                        *response.status_mut() = StatusCode::UNAUTHORIZED;
                    }
                    Ok(response)
                });
            fut
        })
    }

    #[tokio::test]
    async fn a_refused_token_is_read_again_once_and_the_request_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "first-token-1\n").unwrap();
        let refresher = Refresher::file(file.clone()).unwrap();
        let accepted = Arc::new(std::sync::Mutex::new("first-token-1".to_string()));
        let requests = Arc::new(AtomicU64::new(0));
        let mut service =
            AuthLayer::new(refresher.clone()).layer(server(accepted.clone(), requests.clone()));
        let get = || Request::get("/api").body(Body::empty()).unwrap();
        assert_eq!(service.call(get()).await.unwrap().status(), StatusCode::OK);
        assert_eq!(refresher.fetches(), 1);

        // Rotated: one refused request, the file read again, the request sent again.
        std::fs::write(&file, "second-token-2").unwrap();
        *accepted.lock().unwrap() = "second-token-2".into();
        requests.store(0, Ordering::SeqCst);
        let calls: Vec<_> = (0..4).map(|_| service.call(get())).collect();
        for response in futures::future::join_all(calls).await {
            assert_eq!(response.unwrap().status(), StatusCode::OK);
        }
        // Concurrent 401s share one read of the file.
        assert_eq!(refresher.fetches(), 2);
        assert!(requests.load(Ordering::SeqCst) <= 8);

        // A token that stays refused: the 401 is the answer, after one more read.
        *accepted.lock().unwrap() = "someone-elses".into();
        let response = service.call(get()).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(refresher.fetches(), 3);
    }

    #[test]
    fn needs_refresh_table() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let minute = Some(Duration::from_secs(60));
        // (now, expires_at, fetched_at, reload_every, refresh?)
        let cases = [
            // No expiry, no reload: the token is kept (a 401 refreshes it).
            (at(3600), None, at(0), None, false),
            // Far from expiry.
            (at(10), Some(at(900)), at(0), None, false),
            // Inside the margin, or past it.
            (at(850), Some(at(900)), at(0), None, true),
            (at(1000), Some(at(900)), at(0), None, true),
            // Just fetched a token that is already near its end: not again at once.
            (at(2), Some(at(30)), at(0), None, false),
            (at(6), Some(at(30)), at(0), None, true),
            // A token file is read again after a minute.
            (at(59), None, at(0), minute, false),
            (at(60), None, at(0), minute, true),
        ];
        for (now, expires_at, fetched_at, reload, want) in cases {
            assert_eq!(
                needs_refresh(now, expires_at, fetched_at, reload),
                want,
                "now {now} expires {expires_at:?}"
            );
        }
    }
}
