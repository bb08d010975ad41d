//! The HTTP side of one cluster: listener (HTTPS or plain, HTTP/1.1 and HTTP/2), going
//! down and up on the same port, routing, bearer-token auth, faults, counters, discovery,
//! the `/_sim` control endpoint, and the response that carries a watch stream (`watch`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::controllers::rules::Rule;
use crate::http::faults::{ConnectionCounter, CounterSet, Faults, THROTTLED};
use crate::http::handlers::{self, ApiRequest, Reply, ResourcePath};
use crate::http::watch::{self as watches, EventLineCache, WatchSpec};
use crate::model::error::{ApiError, qualified_resource};
use crate::model::resource::new_uid;
use crate::storage::registry::AggregatedDocument;
use crate::storage::store::Store;

/// Largest request body accepted: the real server's default (`--max-request-body-bytes`).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// The shared state of one running cluster.
pub struct ClusterState {
    pub name: String,
    /// The pod rules, for what containers write to their logs.
    pub rules: Arc<Vec<Rule>>,
    pub store: Arc<Store>,
    /// The token of the kubeconfig written at start.
    pub token: String,
    /// After a rotation (`POST /_sim/tokens`), the tokens accepted instead of `token`.
    pub rotated: RwLock<Option<Vec<String>>>,
    pub faults: RwLock<Faults>,
    pub counters: CounterSet,
    /// Connections accepted and the HTTP version each spoke.
    pub connections: ConnectionCounter,
    /// Serve HTTP/1.1 only (no h2 by ALPN, no HTTP/2 preface), as an old proxy would.
    pub http1_only: bool,
    /// true while the cluster refuses connections.
    pub down: watch::Sender<bool>,
    /// true once the cluster shuts down for good.
    pub shutdown: watch::Sender<bool>,
    pub address: SocketAddr,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Encoded watch lines of the latest events, shared by all watchers of a cluster.
    pub event_lines: EventLineCache,
    /// Requests being answered now, for the max-in-flight limits.
    pub in_flight: InFlight,
}

/// Requests in flight, non-mutating and mutating apart, as the real server counts them.
#[derive(Debug, Default)]
pub struct InFlight {
    read_only: AtomicU32,
    mutating: AtomicU32,
}

/// A request's place under the max-in-flight limit, given back when it is dropped.
pub struct InFlightSlot<'a>(&'a AtomicU32);

impl Drop for InFlightSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InFlight {
    /// A slot when fewer than `limit` requests of this kind are in flight; None means the
    /// real server would answer 429.
    pub fn enter(&self, mutating: bool, limit: u32) -> Option<InFlightSlot<'_>> {
        let counter = if mutating {
            &self.mutating
        } else {
            &self.read_only
        };
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlightSlot(counter))
    }
}

impl watches::Source for ClusterState {
    fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    fn faults(&self) -> Faults {
        ClusterState::faults(self)
    }

    fn event_lines(&self) -> &EventLineCache {
        &self.event_lines
    }
}

impl ClusterState {
    pub fn faults(&self) -> Faults {
        self.faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.faults.write().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    pub fn set_down(&self, down: bool) {
        self.down.send_replace(down);
    }

    /// Only `tokens` are accepted from now on.
    pub fn set_tokens(&self, tokens: Vec<String>) {
        *self.rotated.write().unwrap_or_else(|e| e.into_inner()) = Some(tokens);
    }

    /// The tokens accepted now.
    pub fn accepted_tokens(&self) -> Vec<String> {
        self.rotated
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| vec![self.token.clone()])
    }
}

/// Binds a listening socket that can be bound again on the same port after going down.
fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

/// Holds `address` while the cluster is down: bound, not listening, so a client's connect
/// is refused (as by a stopped server) and no other listener on this machine (a parallel
/// test's cluster) can take the port and answer in its place. Binding an ephemeral port
/// never picks a port another socket holds.
fn reserve(address: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket)
}

/// Binds 127.0.0.1 on an ephemeral port.
pub fn bind_ephemeral() -> std::io::Result<TcpListener> {
    bind(SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// Serves connections until shutdown; closes the listener (and open connections) while
/// the cluster is down and binds the same port again when it comes back.
pub async fn run_listener(state: Arc<ClusterState>, first: TcpListener) {
    let mut down_rx = state.down.subscribe();
    let mut shutdown_rx = state.shutdown.subscribe();
    let mut listener = Some(first);
    let mut reserved: Option<TcpSocket> = None;
    loop {
        if *shutdown_rx.borrow() {
            return;
        }
        if *down_rx.borrow_and_update() {
            // The listener goes first (a listening socket's port cannot be bound again), the
            // reservation follows at once.
            listener = None;
            if reserved.is_none() {
                reserved = reserve(state.address)
                    .inspect_err(|e| {
                        tracing::warn!(cluster = %state.name, "reserving {} while down: {e}", state.address)
                    })
                    .ok();
            }
            tokio::select! {
                _ = down_rx.changed() => continue,
                _ = shutdown_rx.changed() => continue,
            }
        }
        // Up again: listen beside the reservation (both bound with SO_REUSEADDR, the
        // reservation not listening), then let the reservation go.
        let active = match listener.take() {
            Some(l) => l,
            None => match bind(state.address) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(cluster = %state.name, "binding {} again: {e}", state.address);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        reserved = None;
        loop {
            tokio::select! {
                accepted = active.accept() => {
                    match accepted {
                        Ok((stream, _)) => {
                            let state = state.clone();
                            tokio::spawn(serve_connection(state, stream));
                        }
                        Err(e) => {
                            tracing::debug!("accept: {e}");
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                _ = down_rx.changed() => {
                    if *down_rx.borrow() { break; }
                }
                _ = shutdown_rx.changed() => return,
            }
        }
        drop(active);
    }
}

async fn serve_connection(state: Arc<ClusterState>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut down_rx = state.down.subscribe();
    let mut shutdown_rx = state.shutdown.subscribe();
    let cut = async move {
        loop {
            tokio::select! {
                r = down_rx.changed() => {
                    if r.is_err() || *down_rx.borrow() { return; }
                }
                r = shutdown_rx.changed() => {
                    if r.is_err() || *shutdown_rx.borrow() { return; }
                }
            }
        }
    };
    state.connections.accepted();
    let service_state = state.clone();
    let first_request = Arc::new(std::sync::Once::new());
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let state = service_state.clone();
        first_request.call_once(|| state.connections.spoke(req.version()));
        async move { Ok::<_, Infallible>(handle(state, req).await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Clients multiplex many watches over one HTTP/2 connection (the real server allows
    // hundreds of streams per connection).
    builder.http2().max_concurrent_streams(1000);
    if state.http1_only {
        builder = builder.http1_only();
    }
    match &state.tls {
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
            let serve = async {
                let tls = match acceptor.accept(stream).await {
                    Ok(tls) => tls,
                    Err(e) => {
                        tracing::debug!("TLS handshake: {e}");
                        return;
                    }
                };
                if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                    tracing::debug!("connection: {e}");
                }
            };
            tokio::select! { _ = serve => {}, _ = cut => {} }
        }
        None => {
            let serve = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = serve => if let Err(e) = r { tracing::debug!("connection: {e}") },
                _ = cut => {}
            }
        }
    }
}

/// A response body: either complete or a stream of chunks from a channel.
pub enum ApiBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ApiBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ApiBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ApiBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ApiBody::Full(Some(d)) => hyper::body::SizeHint::with_exact(d.len() as u64),
            ApiBody::Full(None) => hyper::body::SizeHint::with_exact(0),
            ApiBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

fn response(status: u16, content_type: &str, body: Bytes) -> Response<ApiBody> {
    let mut resp = Response::new(ApiBody::Full(Some(body)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, v);
    }
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(v) = HeaderValue::from_str(&new_uid()) {
        headers.insert("audit-id", v);
    }
    resp
}

fn json_response(status: u16, body: &Value, pretty: bool) -> Response<ApiBody> {
    let bytes = if pretty {
        serde_json::to_vec_pretty(body)
    } else {
        serde_json::to_vec(body)
    }
    .unwrap_or_default();
    response(status, "application/json", Bytes::from(bytes))
}

fn error_response(err: &ApiError, pretty: bool) -> Response<ApiBody> {
    json_response(err.code, &err.to_status(), pretty)
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Root,
    Version,
    Health,
    Api,
    ApiGroupList,
    ApiGroup(String),
    ApiResourceList(String, String),
    Resource(ResourcePath),
    OpenApiIndex,
    OpenApiV3(String),
    OpenApiOther,
    Control(Vec<String>),
    NotFound,
}

fn parse_route(path: &str) -> Route {
    let mut segments = Vec::new();
    for raw in path.split('/').filter(|s| !s.is_empty()) {
        match percent_encoding::percent_decode_str(raw).decode_utf8() {
            Ok(s) => segments.push(s.into_owned()),
            Err(_) => return Route::NotFound,
        }
    }
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s.as_slice() {
        [] => Route::Root,
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["_sim", rest @ ..] => Route::Control(rest.iter().map(|x| x.to_string()).collect()),
        ["openapi", "v3"] => Route::OpenApiIndex,
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(rest.join("/")),
        ["openapi", ..] => Route::OpenApiOther,
        ["api"] => Route::Api,
        ["api", "v1"] => Route::ApiResourceList(String::new(), "v1".into()),
        ["api", "v1", rest @ ..] => resource_route("", "v1", rest),
        ["apis"] => Route::ApiGroupList,
        ["apis", g] => Route::ApiGroup(g.to_string()),
        ["apis", g, v] => Route::ApiResourceList(g.to_string(), v.to_string()),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let make = |namespace: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
            watch_path,
        })
    };
    let core = group.is_empty();
    match rest {
        // The namespace object itself and its subresources.
        ["namespaces", name] if core => make(None, "namespaces", Some(name), None),
        ["namespaces", name, sub @ ("status" | "finalize")] if core => {
            make(None, "namespaces", Some(name), Some(sub))
        }
        ["namespaces", ns, resource] => make(Some(ns), resource, None, None),
        ["namespaces", ns, resource, name] => make(Some(ns), resource, Some(name), None),
        ["namespaces", ns, resource, name, sub] => make(Some(ns), resource, Some(name), Some(sub)),
        [resource] => make(None, resource, None, None),
        [resource, name] => make(None, resource, Some(name), None),
        [resource, name, sub] => make(None, resource, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

fn header_str(req: &Request<Incoming>, name: header::HeaderName) -> &str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Whether the Accept header asks for aggregated discovery (apidiscovery.k8s.io/v2).
fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|part| {
        part.contains("g=apidiscovery.k8s.io")
            && part.contains("as=APIGroupDiscoveryList")
            && part.split(';').any(|p| p.trim() == "v=v2")
    })
}

enum Auth {
    Ok,
    Anonymous,
    Invalid,
}

fn authenticate(req: &Request<Incoming>, tokens: &[String]) -> Auth {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Auth::Anonymous;
    };
    let value = value.to_str().unwrap_or("");
    match value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    {
        Some(t)
            if tokens
                .iter()
                .any(|token| constant_time_eq(t.trim().as_bytes(), token.as_bytes())) =>
        {
            Auth::Ok
        }
        _ => Auth::Invalid,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Answers one HTTP request (and logs it at debug level).
pub async fn handle(state: Arc<ClusterState>, req: Request<Incoming>) -> Response<ApiBody> {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let path = uri.path();
    let is_api = path == "/api" || path.starts_with("/api/") || path.starts_with("/apis/");
    let is_write = matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
    let resp = answer(state.clone(), req).await;
    // A write that was done, answered with an error: the client cannot tell it happened.
    let faults = state.faults();
    let resp = if is_api && is_write && faults.roll_lost_answer() {
        injected_error(&faults, false)
    } else {
        resp
    };
    tracing::debug!(cluster = %state.name, "{method} {uri} -> {}", resp.status().as_u16());
    resp
}

/// What `answer` reads from a request before its body: path, query, route and headers.
struct RequestHead {
    path: String,
    query: HashMap<String, String>,
    pretty: bool,
    route: Route,
    method: String,
    content_type: String,
    accept: String,
    user_agent: String,
    /// The ETag a client has cached (`If-None-Match`), for aggregated discovery.
    if_none_match: String,
}

impl RequestHead {
    fn of(req: &Request<Incoming>) -> Self {
        let path = req.uri().path().to_string();
        let query: HashMap<String, String> = req
            .uri()
            .query()
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        let pretty = matches!(query.get("pretty").map(String::as_str), Some("true" | "1"));
        let route = parse_route(&path);
        Self {
            route,
            path,
            query,
            pretty,
            method: req.method().as_str().to_string(),
            content_type: header_str(req, header::CONTENT_TYPE).to_string(),
            accept: header_str(req, header::ACCEPT).to_string(),
            user_agent: header_str(req, header::USER_AGENT).to_string(),
            if_none_match: header_str(req, header::IF_NONE_MATCH).to_string(),
        }
    }

    /// The API proper (faults and counters apply to it only).
    fn is_api(&self) -> bool {
        let path = &self.path;
        path == "/api" || path.starts_with("/api/") || path == "/apis" || path.starts_with("/apis/")
    }
}

/// Answers one request: authentication, the `/_sim` control endpoint, admission (faults,
/// max-in-flight, counters), then the route.
async fn answer(state: Arc<ClusterState>, req: Request<Incoming>) -> Response<ApiBody> {
    let head = RequestHead::of(&req);
    if let Some(refused) = authenticate_request(&state, &req, &head) {
        return refused;
    }
    if let Route::Control(rest) = &head.route {
        return control(&state, req, rest).await;
    }
    // Held until the answer is made (a watch's stream goes on without it, as watches are
    // exempt from the real limit).
    let _held = match admit(&state, &head).await {
        Ok(slot) => slot,
        Err(refused) => return refused,
    };
    match &head.route {
        Route::Resource(p) => resource_answer(&state, req, p, &head).await,
        route => discovery_answer(&state, route, &head),
    }
}

/// None when the request may go on; else the 401 or 403 to answer. Health and version are
/// public, as with anonymous auth on.
fn authenticate_request(
    state: &ClusterState,
    req: &Request<Incoming>,
    head: &RequestHead,
) -> Option<Response<ApiBody>> {
    match authenticate(req, &state.accepted_tokens()) {
        Auth::Ok => None,
        Auth::Invalid => Some(error_response(&ApiError::unauthorized(), head.pretty)),
        Auth::Anonymous if matches!(head.route, Route::Health | Route::Version) => None,
        Auth::Anonymous => {
            let err = match &head.route {
                Route::Resource(p) => {
                    let verb = handlers::verb_of(&head.method, p, &head.query, &head.content_type);
                    let rt = crate::model::resource::ResourceType::new(
                        &p.group,
                        &p.version,
                        &p.resource,
                    );
                    ApiError::forbidden_anonymous(
                        verb,
                        Some(&rt),
                        p.namespace.as_deref().unwrap_or(""),
                    )
                }
                _ => ApiError::new(
                    403,
                    "Forbidden",
                    format!(
                        "forbidden: User \"system:anonymous\" cannot {} path \"{}\"",
                        head.method.to_ascii_lowercase(),
                        head.path
                    ),
                )
                .with_details(json!({})),
            };
            Some(error_response(&err, head.pretty))
        }
    }
}

/// What the cluster's faults and the max-in-flight filter do to an API request before it is
/// answered: counts it, holds its in-flight slot (Ok), or answers for it (Err: 429, an
/// injected error; a request of a cluster that never answers waits forever).
async fn admit<'a>(
    state: &'a ClusterState,
    head: &RequestHead,
) -> Result<Option<InFlightSlot<'a>>, Response<ApiBody>> {
    let is_api = head.is_api();
    if is_api && state.faults().never_answer {
        std::future::pending::<()>().await;
    }
    let faults = state.faults();
    let mut faulted_resource = None;
    let mut held = None;
    if let Route::Resource(p) = &head.route {
        let verb = handlers::verb_of(&head.method, p, &head.query, &head.content_type);
        let rt = crate::model::resource::ResourceType::new(&p.group, &p.version, &p.resource);
        let mut resource = qualified_resource(&rt);
        if let Some(sub) = &p.subresource {
            resource = format!("{resource}/{sub}");
        }
        if verb != "watch" {
            let mutating = head.method != "GET" && head.method != "HEAD";
            let Some(slot) = state
                .in_flight
                .enter(mutating, faults.in_flight_limit(mutating))
            else {
                state.counters.record(THROTTLED, &resource, false);
                return Err(too_many_requests(head.pretty));
            };
            held = Some(slot);
        }
        let dry_run = head.query.get("dryRun").is_some_and(|v| !v.is_empty());
        state
            .counters
            .record_in(verb, &resource, p.namespace.as_deref(), dry_run);
        faulted_resource = Some((verb, resource));
    } else if is_api {
        state.counters.record("discovery", &head.path, false);
        faulted_resource = Some(("discovery", head.path.clone()));
    }
    let faulted = faulted_resource
        .as_ref()
        .map(|(verb, resource)| (*verb, resource.as_str()));
    if is_api && faults.applies_to(faulted) {
        if faults.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
        }
        if faults.roll_error() {
            return Err(injected_error(&faults, head.pretty));
        }
    }
    Ok(held)
}

/// Everything but resources: discovery, version, health, OpenAPI, unknown paths.
fn discovery_answer(state: &ClusterState, route: &Route, head: &RequestHead) -> Response<ApiBody> {
    let pretty = head.pretty;
    let aggregated = wants_aggregated(&head.accept) && !state.faults().legacy_discovery;
    match route {
        Route::Root => json_response(
            200,
            &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
            pretty,
        ),
        Route::Health => response(200, "text/plain; charset=utf-8", Bytes::from_static(b"ok")),
        Route::Version => json_response(200, &crate::storage::registry::version_document(), pretty),
        Route::Api => {
            if aggregated {
                aggregated_response(&state.store.registry().aggregated_document(true), head)
            } else {
                let address = state.address.to_string();
                json_response(
                    200,
                    &crate::storage::registry::api_versions_document(&address),
                    pretty,
                )
            }
        }
        Route::ApiGroupList => {
            if aggregated {
                aggregated_response(&state.store.registry().aggregated_document(false), head)
            } else {
                json_response(200, &state.store.registry().api_group_list(), pretty)
            }
        }
        Route::ApiGroup(g) => match state.store.registry().api_group(g) {
            Some(doc) => json_response(200, &doc, pretty),
            None => not_found_page(),
        },
        Route::ApiResourceList(g, v) => match state.store.registry().api_resource_list(g, v) {
            Some(doc) => json_response(200, &doc, pretty),
            None => not_found_page(),
        },
        Route::OpenApiIndex => {
            let doc = crate::http::openapi::index(state.store.registry());
            let bytes = serde_json::to_vec(&doc).unwrap_or_default();
            // The real server labels the index text/plain.
            response(200, "text/plain; charset=utf-8", Bytes::from(bytes))
        }
        Route::OpenApiV3(gv) => openapi_document(state, gv),
        Route::OpenApiOther | Route::NotFound | Route::Control(_) | Route::Resource(_) => {
            not_found_page()
        }
    }
}

/// A request on a resource: its body (up to the real server's limit), the handler, and
/// the handler's reply as a response.
async fn resource_answer(
    state: &Arc<ClusterState>,
    req: Request<Incoming>,
    p: &ResourcePath,
    head: &RequestHead,
) -> Response<ApiBody> {
    let pretty = head.pretty;
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            let err = ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: limit is {MAX_BODY}"),
            );
            return error_response(&err, pretty);
        }
    };
    let api_req = ApiRequest {
        method: &head.method,
        query: &head.query,
        content_type: &head.content_type,
        accept: &head.accept,
        user_agent: &head.user_agent,
        body: &body,
        rules: &state.rules,
        cluster: &state.name,
    };
    // Handlers are synchronous and short; keep them off the reactor's hot path
    // only when they may be slow (large lists are fine inline at this scale).
    match handlers::handle(&state.store, &api_req, p) {
        Ok(Reply::Watch(spec)) => start_watch(state.clone(), *spec),
        Ok(reply) => reply_response(reply, pretty),
        Err(e) => error_response(&e, pretty),
    }
}

/// A handler's reply (other than a watch) as a response.
fn reply_response(reply: Reply, pretty: bool) -> Response<ApiBody> {
    match reply {
        Reply::Json {
            status,
            body,
            content_type,
            warnings,
        } => {
            let bytes = if pretty {
                serde_json::to_vec_pretty(&body)
            } else {
                serde_json::to_vec(&body)
            }
            .unwrap_or_default();
            let mut resp = response(status, content_type, Bytes::from(bytes));
            for text in warnings {
                // RFC 7234 warn-text: a quoted string.
                let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
                // from_bytes: a field name may hold UTF-8, as the real server sends it.
                let text = format!("299 - \"{quoted}\"");
                if let Ok(v) = HeaderValue::from_bytes(text.as_bytes()) {
                    resp.headers_mut().append(header::WARNING, v);
                }
            }
            resp
        }
        Reply::Text(text) => response(200, "text/plain", Bytes::from(text)),
        Reply::Raw {
            status,
            body,
            content_type,
        } => {
            if pretty {
                let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                json_response(status, &value, true)
            } else {
                response(status, content_type, body)
            }
        }
        // Watches are answered by `start_watch`; a stray one here is a plain 404.
        Reply::Watch(_) => not_found_page(),
    }
}

fn openapi_document(state: &ClusterState, gv: &str) -> Response<ApiBody> {
    let parts: Vec<&str> = gv.split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return not_found_page(),
    };
    let Some(doc) =
        crate::http::openapi::group_version_document(state.store.registry(), group, version)
    else {
        return not_found_page();
    };
    let bytes = serde_json::to_vec(&doc).unwrap_or_default();
    let etag = format!("\"{}\"", crate::http::openapi::hash(&bytes));
    let mut resp = response(200, "application/json", Bytes::from(bytes));
    let headers = resp.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, immutable"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    resp
}

/// The plain 404 the real server gives for paths it does not serve.
fn not_found_page() -> Response<ApiBody> {
    error_response(&ApiError::unknown_path(), false)
}

/// An aggregated discovery document, or 304 Not Modified with no body when the client's
/// `If-None-Match` is its ETag exactly, as the real server answers (`ServeHTTPWithETag`).
fn aggregated_response(doc: &AggregatedDocument, head: &RequestHead) -> Response<ApiBody> {
    let mut resp = if head.if_none_match == doc.etag {
        let mut resp = response(304, "", Bytes::new());
        resp.headers_mut().remove(header::CONTENT_TYPE);
        resp
    } else {
        response(
            200,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            doc.json.clone(),
        )
    };
    let headers = resp.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&doc.etag) {
        headers.insert(header::ETAG, v);
    }
    resp
}

fn injected_error(faults: &Faults, pretty: bool) -> Response<ApiBody> {
    let status = faults.status();
    let (reason, message) = match status {
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        500 => ("InternalError", "Internal error occurred: injected fault"),
        _ => ("", "injected fault"),
    };
    let mut err = ApiError::new(status, reason, message);
    let retry_after = faults.retry_after_seconds.max(u64::from(status == 429));
    if retry_after > 0 {
        err = err.with_details(json!({"retryAfterSeconds": retry_after}));
    }
    let mut resp = error_response(&err, pretty);
    if retry_after > 0
        && let Ok(v) = HeaderValue::from_str(&retry_after.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// The real max-in-flight filter's answer: 429 with `Retry-After: 1`.
fn too_many_requests(pretty: bool) -> Response<ApiBody> {
    let err = ApiError::new(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
    )
    .with_details(json!({"retryAfterSeconds": 1}));
    let mut resp = error_response(&err, pretty);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The `/_sim` control endpoint: faults, counters (`GET /_sim/connections`: connections
/// accepted and the HTTP version each spoke; reset with the counters) and token rotation
/// (`POST /_sim/tokens` with `{"tokens": ["..."]}`: only those are accepted from then on).
async fn control(
    state: &Arc<ClusterState>,
    req: Request<Incoming>,
    rest: &[String],
) -> Response<ApiBody> {
    let method = req.method().clone();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match (method.as_str(), rest.as_slice()) {
        ("GET", ["faults"]) => {
            let mut v = serde_json::to_value(state.faults()).unwrap_or(json!({}));
            v["down"] = json!(*state.down.borrow());
            json_response(200, &v, false)
        }
        ("POST" | "PUT", ["faults"]) => {
            let body = match Limited::new(req.into_body(), 1024 * 1024).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return error_response(&ApiError::bad_request(format!("body: {e}")), false);
                }
            };
            let value: Value = if body.is_empty() {
                json!({})
            } else {
                match serde_json::from_slice(&body) {
                    Ok(v) => v,
                    Err(e) => {
                        return error_response(
                            &ApiError::bad_request(format!("faults JSON: {e}")),
                            false,
                        );
                    }
                }
            };
            let down_for_ms = value.get("down_for_ms").and_then(Value::as_u64);
            let mut fields = value.clone();
            if let Some(m) = fields.as_object_mut() {
                m.remove("down_for_ms");
                m.remove("down");
            }
            let faults: Faults = match serde_json::from_value(fields) {
                Ok(f) => f,
                Err(e) => {
                    return error_response(
                        &ApiError::bad_request(format!("faults JSON: {e}")),
                        false,
                    );
                }
            };
            if !(0.0..=1.0).contains(&faults.error_rate) {
                return error_response(
                    &ApiError::bad_request("error_rate must be between 0 and 1"),
                    false,
                );
            }
            state.set_faults(faults.clone());
            if let Some(ms) = down_for_ms {
                let state = state.clone();
                tokio::spawn(async move {
                    // Let this response leave before the connection is cut.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    state.set_down(true);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    state.set_down(false);
                });
            }
            let mut v = serde_json::to_value(faults).unwrap_or(json!({}));
            v["down_for_ms"] = json!(down_for_ms);
            json_response(200, &v, false)
        }
        ("POST" | "PUT", ["tokens"]) => {
            let body = match Limited::new(req.into_body(), 64 * 1024).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return error_response(&ApiError::bad_request(format!("body: {e}")), false);
                }
            };
            let tokens: Vec<String> = match serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| serde_json::from_value(v.get("tokens")?.clone()).ok())
            {
                Some(tokens) => tokens,
                None => {
                    return error_response(
                        &ApiError::bad_request(r#"tokens JSON: want {"tokens": ["..."]}"#),
                        false,
                    );
                }
            };
            if tokens.is_empty() || tokens.iter().any(|t| t.trim().is_empty()) {
                return error_response(
                    &ApiError::bad_request("tokens must be a non-empty list of non-empty tokens"),
                    false,
                );
            }
            let count = tokens.len();
            state.set_tokens(tokens);
            json_response(200, &json!({"accepted": count}), false)
        }
        ("GET", ["counters"]) => json_response(200, &state.counters.snapshot().to_json(), false),
        ("GET", ["connections"]) => json_response(
            200,
            &serde_json::to_value(state.connections.snapshot()).unwrap_or(json!({})),
            false,
        ),
        ("POST", ["counters", "reset"]) => {
            state.counters.reset();
            state.connections.reset();
            json_response(200, &json!({}), false)
        }
        _ => not_found_page(),
    }
}

/// Starts streaming a watch; the response carries the event stream.
fn start_watch(state: Arc<ClusterState>, spec: WatchSpec) -> Response<ApiBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(watches::run(state, spec, tx));
    let mut resp = Response::new(ApiBody::Stream(rx));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(v) = HeaderValue::from_str(&new_uid()) {
        headers.insert("audit-id", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Route {
        Route::Resource(ResourcePath {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
            watch_path: false,
        })
    }

    #[test]
    fn routes() {
        assert_eq!(
            parse_route("/api/v1/namespaces"),
            res("", "namespaces", None, None, None)
        );
        assert_eq!(
            parse_route("/api/v1/namespaces/x"),
            res("", "namespaces", None, Some("x"), None)
        );
        assert_eq!(
            parse_route("/api/v1/namespaces/x/status"),
            res("", "namespaces", None, Some("x"), Some("status"))
        );
        assert_eq!(
            parse_route("/api/v1/namespaces/x/pods"),
            res("", "pods", Some("x"), None, None)
        );
        assert_eq!(
            parse_route("/apis/apps/v1/namespaces/x/deployments/web/scale"),
            res("apps", "deployments", Some("x"), Some("web"), Some("scale"))
        );
        assert_eq!(
            parse_route("/apis/apps/v1/deployments"),
            res("apps", "deployments", None, None, None)
        );
        assert_eq!(parse_route("/apis/apps"), Route::ApiGroup("apps".into()));
        assert_eq!(
            parse_route("/apis/apps/v1"),
            Route::ApiResourceList("apps".into(), "v1".into())
        );
        assert_eq!(parse_route("/api/v1/a/b/c/d/e/f/g"), Route::NotFound);
        assert_eq!(parse_route("/api/v1/%ff"), Route::NotFound);
        assert_eq!(
            parse_route("/_sim/faults"),
            Route::Control(vec!["faults".into()])
        );
    }

    #[test]
    fn in_flight_slots_are_bounded_apart_and_given_back() {
        let in_flight = InFlight::default();
        let a = in_flight.enter(true, 2);
        let b = in_flight.enter(true, 2);
        assert!(a.is_some() && b.is_some());
        assert!(
            in_flight.enter(true, 2).is_none(),
            "a third mutating request"
        );
        assert!(in_flight.enter(false, 1).is_some(), "reads count apart");
        drop(a);
        assert!(
            in_flight.enter(true, 2).is_some(),
            "a slot given back is free"
        );
        let faults = Faults::default();
        assert_eq!(faults.in_flight_limit(false), 400);
        assert_eq!(faults.in_flight_limit(true), 200);
    }

    #[test]
    fn aggregated_accept_is_detected() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json"));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        ));
    }
}
