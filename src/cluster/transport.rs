//! The HTTP side of a target's clients: one connection pool per target, HTTP/2 where the API
//! server offers it.
//!
//! kube's own `ClientBuilder` speaks HTTP/1.1 only, so every in-flight apply and every open
//! watch takes its own TCP + TLS connection. Here the TLS client offers `h2` and `http/1.1`
//! by ALPN (every kube-apiserver picks `h2`; a server that does not falls back to HTTP/1.1,
//! as does plain `http://`), and the request client and the watch client share one hyper
//! client, so a target's applies and watches are streams of one connection.
//!
//! The rest of kube's stack is kept through [`ConfigExt`]: the base URI, kube's auth
//! (static tokens, basic auth; client certificates in TLS), impersonation and extra headers,
//! the connect timeout over TCP and TLS. kube's retry layer is not added (rollguard's own
//! retry knows the deadline), nor its trace layer (debug spans only). A read timeout on the
//! connection, as kube sets one, would cut every stream of a shared HTTP/2 connection when a
//! watch is quiet; it is per request here instead ([`ReadTimeoutLayer`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt as _};

/// Why a target's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("tls-server-name {name:?} is not a valid server name: {source}")]
    ServerName {
        name: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
}

/// The request client (each read of an answer within `request_timeout`) and the watch
/// client (no read timeout: a watch is bounded by its caller's deadline), over one pool.
pub fn build_clients(
    config: &kube::Config,
    request_timeout: Duration,
) -> Result<(ClientBuilder<Stack>, ClientBuilder<Stack>), TransportError> {
    let hyper_client = hyper_client(config)?;
    let build = |read_timeout| -> Result<ClientBuilder<Stack>, TransportError> {
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .layer(ReadTimeoutLayer { read_timeout })
            .service(hyper_client.clone())
            .map_err(BoxError::from)
            .boxed();
        Ok(ClientBuilder::new(
            service,
            config.default_namespace.clone(),
        ))
    };
    Ok((build(Some(request_timeout))?, build(None)?))
}

/// What [`build_clients`] gives: kube's layers over the shared hyper client.
pub type Stack = tower::util::BoxService<Request<Body>, Response<TimedBody>, BoxError>;

/// TCP, then TLS offering h2 and http/1.1 (kube's TLS settings: CA, client certificate,
/// `insecure-skip-tls-verify`, `tls-server-name`), the whole connect bounded by the
/// config's connect timeout; HTTP/2 when ALPN says so.
fn hyper_client(
    config: &kube::Config,
) -> Result<
    hyper_util::client::legacy::Client<
        hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>,
        Body,
    >,
    TransportError,
> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let server_name =
            rustls::pki_types::ServerName::try_from(name.clone()).map_err(|source| {
                TransportError::ServerName {
                    name: name.clone(),
                    source,
                }
            })?;
        builder = builder
            .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server_name));
    }
    let https = builder.enable_all_versions().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_write_timeout(config.write_timeout);
    Ok(hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector))
}

/// Fails a request whose answer does not start, or does not go on, within `read_timeout`
/// (None: no limit, for watches): what a read timeout on the connection did over HTTP/1.1,
/// per request, so that one quiet stream does not cut the others of its connection.
#[derive(Clone, Copy)]
pub struct ReadTimeoutLayer {
    read_timeout: Option<Duration>,
}

impl<S> Layer<S> for ReadTimeoutLayer {
    type Service = ReadTimeout<S>;
    fn layer(&self, inner: S) -> ReadTimeout<S> {
        ReadTimeout {
            inner,
            read_timeout: self.read_timeout,
        }
    }
}

#[derive(Clone)]
pub struct ReadTimeout<S> {
    inner: S,
    read_timeout: Option<Duration>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<Body>> for ReadTimeout<S>
where
    S: Service<Request<Body>, Response = Response<Incoming>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = Response<TimedBody>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Response<TimedBody>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let read_timeout = self.read_timeout;
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = match read_timeout {
                None => response.await.map_err(Into::into)?,
                Some(limit) => tokio::time::timeout(limit, response)
                    .await
                    .map_err(|_| timed_out(limit))?
                    .map_err(Into::into)?,
            };
            Ok(response.map(|body| TimedBody::new(body, read_timeout)))
        })
    }
}

/// What the read timeout says: an I/O timeout, as kube's connection timeout said it, so
/// that the retry and the error messages (`retry.rs`, `describe_error`) treat it the same.
fn timed_out(limit: Duration) -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the server sent nothing for {}s (the request timeout; $ROLLGUARD_REQUEST_TIMEOUT changes it)",
            limit.as_secs_f64()
        ),
    ))
}

/// A response body whose every frame must come within the read timeout of the one before.
pub struct TimedBody {
    inner: Incoming,
    read_timeout: Option<Duration>,
    /// Armed while a frame is awaited.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl TimedBody {
    fn new(inner: Incoming, read_timeout: Option<Duration>) -> TimedBody {
        TimedBody {
            inner,
            read_timeout,
            sleep: None,
        }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.sleep = None;
                Poll::Ready(frame.map(|f| f.map_err(BoxError::from)))
            }
            Poll::Pending => {
                let Some(limit) = this.read_timeout else {
                    return Poll::Pending;
                };
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.sleep = None;
                        Poll::Ready(Some(Err(timed_out(limit))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
