//! The checks' one HTTP client: hyper with rustls (ring, the system's roots), the stack kube
//! already brings. Prometheus calls go through kube's retry policy (`kube::retry`): its
//! errors are expressed as kube errors so that the one policy classifies them (5xx, 408
//! and 429 and an unanswered request are retried; other 4xx and TLS problems are not).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::retry::{self, ErrorClass, RetryBudget, RetryError};
use crate::report::redact;

/// The most of an answer's body that is read (a Prometheus result of one series is small).
const MAX_BODY: usize = 4 << 20;

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Why a call got no usable answer; its text is scrubbed of credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("{url} is not a URL rollguard can call: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("no answer from {host}: {reason}")]
    Unreachable { host: String, reason: String },
    #[error("{host} answered {status}: {body}")]
    Status {
        host: String,
        status: u16,
        body: String,
    },
    #[error("no answer from {host} within {}", crate::util::duration::format_duration(*after))]
    Timeout { host: String, after: Duration },
    #[error("cannot set up an HTTP client: {0}")]
    Setup(String),
    #[error("cancelled")]
    Cancelled,
}

/// An HTTP(S) client shared by every check of a run.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl HttpClient {
    pub fn new() -> Result<HttpClient, CallError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        // A missing or unreadable system store leaves https unusable, not http: the error
        // then comes with the first https call.
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CallError::Setup(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Client::builder(TokioExecutor::new()).build(https);
        Ok(HttpClient { inner })
    }

    /// One GET of `url` with `headers`, within `timeout`: any status is an answer.
    pub async fn get_once(
        &self,
        url: &str,
        headers: &[(http::HeaderName, String)],
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| CallError::BadUrl {
                url: redact::scrub(url),
                reason: e.to_string(),
            })?;
        let host = uri.host().unwrap_or_default().to_string();
        let mut request = http::Request::get(uri);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| CallError::BadUrl {
                url: redact::scrub(url),
                reason: e.to_string(),
            })?;
        let call = async {
            let response = self
                .inner
                .request(request)
                .await
                .map_err(|e| unreachable(&host, &e))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| CallError::Unreachable {
                    host: host.clone(),
                    reason: redact::scrub(&e.to_string()),
                })?
                .to_bytes();
            Ok(Answer {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout {
                host,
                after: timeout,
            }),
        }
    }

    /// GET under rollguard's retry policy, every attempt and backoff within `deadline`: an
    /// answer that is not worth retrying (2xx, most 4xx) is returned as it is.
    pub async fn get(
        &self,
        url: &str,
        headers: &[(http::HeaderName, String)],
        deadline: Duration,
        cancel: &CancellationToken,
    ) -> Result<Answer, CallError> {
        let host = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .unwrap_or_default();
        let budget = RetryBudget {
            attempt_timeout: deadline,
            max_unanswered: Some(3),
            ..RetryBudget::until(Instant::now() + deadline)
        };
        // The last error by its own type: the retry engine only sees it as a kube error.
        let last = std::sync::Mutex::new(None::<CallError>);
        let remember = |e: CallError| {
            if let Ok(mut slot) = last.lock() {
                *slot = Some(e);
            }
        };
        let result = retry::with_retry("the check's query", &budget, cancel, || async {
            // An attempt cut off by the engine's own deadline leaves no stale error behind.
            remember(CallError::Timeout {
                host: host.clone(),
                after: deadline,
            });
            match self.get_once(url, headers, deadline).await {
                Ok(a) if !is_transient(a.status) => Ok(a),
                Ok(a) => {
                    let err = status_error(a.status);
                    remember(CallError::Status {
                        host: host.clone(),
                        status: a.status,
                        body: snippet(&a.body),
                    });
                    Err(err)
                }
                Err(e @ (CallError::BadUrl { .. } | CallError::Setup(_))) => {
                    remember(e);
                    Err(status_error(400))
                }
                Err(e) => {
                    let err = kube::Error::Service(Box::new(std::io::Error::other(e.to_string())));
                    remember(e);
                    Err(err)
                }
            }
        })
        .await;
        match result {
            Ok(answer) => Ok(answer),
            Err(RetryError::Cancelled) => Err(CallError::Cancelled),
            Err(RetryError::NotSent | RetryError::Api(_)) => {
                Err(last.lock().ok().and_then(|mut slot| slot.take()).unwrap_or(
                    CallError::Timeout {
                        host,
                        after: deadline,
                    },
                ))
            }
        }
    }
}

/// Whether the retry policy retries an answer with `status`.
fn is_transient(status: u16) -> bool {
    matches!(
        retry::classify_status(status, "", 0),
        ErrorClass::Transient { .. }
    )
}

fn status_error(code: u16) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code,
        ..Default::default()
    }))
}

fn unreachable(host: &str, e: &(dyn std::error::Error + 'static)) -> CallError {
    CallError::Unreachable {
        host: host.to_string(),
        reason: redact::scrub(&retry::root_cause_text(e)),
    }
}

/// The start of a body for a message: one line, at most 200 characters, scrubbed.
pub fn snippet(body: &str) -> String {
    let line: String = body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect();
    redact::scrub(&line)
}
