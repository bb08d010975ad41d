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
    // Without it Nagle holds a request's body (its own TLS record after the headers) until
    // the server ACKs the headers, which a delayed ACK puts off by 40 ms: every apply took
    // 44 ms against a local server. Go's clients (kubectl) set it too.
    http.set_nodelay(true);
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(config)?)
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

/// TLS client settings already built in this process, by [`tls_key`].
type SharedTls = std::collections::HashMap<[u8; 32], rustls::ClientConfig>;
static SHARED_TLS: std::sync::Mutex<Option<SharedTls>> = std::sync::Mutex::new(None);

/// kube's TLS client settings for `config`, built once per distinct trust and identity (CA,
/// client certificate and key, `insecure-skip-tls-verify`) and shared: building them parses
/// the CA and the key and sets up a verifier and a session cache, and a fleet of 1,000
/// targets behind one CA would otherwise build 1,000. A user whose certificate comes from an
/// exec plugin (it may change) gets its own.
fn tls_config(config: &kube::Config) -> Result<rustls::ClientConfig, kube::Error> {
    let Some(key) = tls_key(config) else {
        return config.rustls_client_config();
    };
    let shared = |map: &Option<SharedTls>| map.as_ref().and_then(|m| m.get(&key).cloned());
    if let Some(found) = SHARED_TLS.lock().ok().and_then(|m| shared(&m)) {
        return Ok(found);
    }
    let built = config.rustls_client_config()?;
    if let Ok(mut map) = SHARED_TLS.lock() {
        map.get_or_insert_with(Default::default)
            .insert(key, built.clone());
    }
    Ok(built)
}

/// The digest of what kube's TLS client settings are built from; None when they cannot be
/// shared (an exec plugin).
fn tls_key(config: &kube::Config) -> Option<[u8; 32]> {
    use secrecy::ExposeSecret as _;
    use sha2::{Digest, Sha256};
    let auth = &config.auth_info;
    if auth.exec.is_some() {
        return None;
    }
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    for der in config.root_cert.iter().flatten() {
        part(der);
    }
    part(b"|");
    if let Some(file) = &config.root_cert_file {
        part(file.as_os_str().as_encoded_bytes());
    }
    part(&[u8::from(config.accept_invalid_certs)]);
    for text in [
        &auth.client_certificate,
        &auth.client_certificate_data,
        &auth.client_key,
    ] {
        part(text.as_deref().unwrap_or("\0").as_bytes());
    }
    part(
        auth.client_key_data
            .as_ref()
            .map_or("\0", |k| k.expose_secret())
            .as_bytes(),
    );
    Some(hash.finalize().into())
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
