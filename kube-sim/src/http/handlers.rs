//! Resource requests: get, list, create, update, patch, apply, delete, deletecollection,
//! and reading the parameters of a watch (streamed by `watch`). Independent of HTTP plumbing: a parsed request in, a
//! reply out.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::controllers::logs;
use crate::controllers::rules::Rule;
use crate::http::table;
use crate::http::watch::WatchSpec;
use crate::model::error::ApiError;
use crate::model::resource::{ResourceType, metadata_mut};
use crate::semantics::apply;
use crate::semantics::event_views::{is_events_view, to_core_v1, to_events_v1};
use crate::semantics::selectors::{FieldSelector, LabelSelector};
use crate::storage::apply::ApplyRequest;
use crate::storage::registry::ResourceInfo;
use crate::storage::store::{DeleteOptions, Ownership, Propagation, Store, WriteOptions};

/// A resource path: `/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}` and friends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path form.
    pub watch_path: bool,
}

/// A request as the handlers see it.
pub struct ApiRequest<'a> {
    pub method: &'a str,
    pub query: &'a HashMap<String, String>,
    pub content_type: &'a str,
    pub accept: &'a str,
    pub user_agent: &'a str,
    pub body: &'a Bytes,
    /// The cluster's pod rules and name: what the simulated kubelet's containers log.
    pub rules: &'a [Rule],
    pub cluster: &'a str,
}

impl ApiRequest<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    fn dry_run(&self) -> bool {
        self.param("dryRun").is_some_and(|v| !v.is_empty())
    }

    /// The field manager: `?fieldManager=`, else the User-Agent's product name.
    fn manager(&self) -> String {
        if let Some(m) = self.param("fieldManager").filter(|m| !m.is_empty()) {
            return m.to_string();
        }
        let product = self.user_agent.split('/').next().unwrap_or("").trim();
        if product.is_empty() {
            "unknown".to_string()
        } else {
            product.to_string()
        }
    }
}

/// The outcome of a resource request.
pub enum Reply {
    Json {
        status: u16,
        body: Value,
        /// Content-Type to answer with (application/json unless a Table).
        content_type: &'static str,
        /// Texts of `Warning: 299` headers (fields dropped from a create or update).
        warnings: Vec<String>,
    },
    Watch(Box<WatchSpec>),
    /// A plain-text body (pod logs).
    Text(String),
    /// An already encoded body (large lists).
    Raw {
        status: u16,
        body: Bytes,
        content_type: &'static str,
    },
}

impl Reply {
    fn ok(body: Value) -> Self {
        Reply::Json {
            status: 200,
            body,
            content_type: "application/json",
            warnings: Vec::new(),
        }
    }

    fn with_warnings(mut self, new: Vec<String>) -> Self {
        if let Reply::Json { warnings, .. } = &mut self {
            warnings.extend(new);
        }
        self
    }

    fn created(body: Value) -> Self {
        Reply::Json {
            status: 201,
            body,
            content_type: "application/json",
            warnings: Vec::new(),
        }
    }
}

/// The verb a request counts as (for counters and authorization messages).
pub fn verb_of(
    method: &str,
    path: &ResourcePath,
    query: &HashMap<String, String>,
    content_type: &str,
) -> &'static str {
    let watch =
        path.watch_path || matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    match (method, path.name.is_some()) {
        ("GET", true) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) if media_type(content_type) == "application/apply-patch+yaml" => "apply",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

/// The media type without parameters, lowercased.
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn resource_path_error() -> ApiError {
    ApiError::unknown_path()
}

/// Serves one resource request.
pub fn handle(store: &Store, req: &ApiRequest<'_>, path: &ResourcePath) -> Result<Reply, ApiError> {
    let info = store
        .registry()
        .lookup(&path.group, &path.version, &path.resource)
        .filter(|i| i.is_storable())
        .ok_or_else(resource_path_error)?;
    // events.k8s.io/v1 Events are the core v1 Events, stored once and served in two shapes.
    let rt = if is_events_view(&info.group, &info.resource) {
        ResourceType::new("", "v1", "events")
    } else {
        info.resource_type()
    };
    if !info.namespaced && path.namespace.is_some() {
        return Err(resource_path_error());
    }
    if let Some(sub) = &path.subresource
        && !info.has_subresource(sub)
    {
        return Err(resource_path_error());
    }
    let namespace = path.namespace.clone().unwrap_or_default();
    if path.subresource.as_deref() == Some("log") && req.method == "GET" {
        return pod_log(
            store,
            req,
            &rt,
            &namespace,
            path.name.as_deref().unwrap_or_default(),
        );
    }
    if let Some(sub) = &path.subresource
        && !matches!(sub.as_str(), "status" | "scale")
    {
        return Err(ApiError::method_not_allowed());
    }
    let verb = verb_of(req.method, path, req.query, req.content_type);
    match (verb, path.name.as_deref()) {
        ("watch", name) => watch_spec(req, &info, path, name).map(|w| Reply::Watch(Box::new(w))),
        ("get", Some(name)) => {
            let reply = get(
                store,
                &rt,
                &info,
                &namespace,
                name,
                path.subresource.as_deref(),
            )?;
            if path.subresource.is_none()
                && table::wants_partial_metadata(req.accept)
                && let Reply::Json { body, .. } = &reply
            {
                return Ok(Reply::Json {
                    status: 200,
                    body: table::partial_metadata(body),
                    content_type: "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                    warnings: Vec::new(),
                });
            }
            Ok(reply)
        }
        ("list", None) => list(store, req, &rt, &info, path.namespace.as_deref()),
        ("create", None) => {
            if info.namespaced && path.namespace.is_none() {
                return Err(resource_path_error());
            }
            create(store, req, &rt, &info, &namespace)
        }
        ("update", Some(name)) => update(
            store,
            req,
            &rt,
            &info,
            &namespace,
            name,
            path.subresource.as_deref(),
        ),
        ("apply", Some(name)) => apply_patch(
            store,
            req,
            &rt,
            &info,
            &namespace,
            name,
            path.subresource.as_deref(),
        ),
        ("patch", Some(name)) => patch(
            store,
            req,
            &rt,
            &info,
            &namespace,
            name,
            path.subresource.as_deref(),
        ),
        ("delete", Some(name)) if path.subresource.is_none() => {
            delete(store, req, &rt, &info, &namespace, name)
        }
        ("deletecollection", None) => {
            delete_collection(store, req, &rt, &info, path.namespace.as_deref())
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// A container's log as the simulated kubelet serves it (see [`logs`]).
fn pod_log(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
) -> Result<Reply, ApiError> {
    let Some(pod) = store.get(rt, namespace, name) else {
        return Err(ApiError::not_found(rt, name));
    };
    let opts = logs::parse_options(req.query, name)?;
    let text = logs::pod_log(&pod, req.rules, req.cluster, &opts, jiff::Timestamp::now())?;
    Ok(Reply::Text(text))
}

fn get(
    store: &Store,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
) -> Result<Reply, ApiError> {
    let obj = store
        .get(rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(&info.resource_type(), name))?;
    if subresource == Some("scale") {
        return Ok(Reply::ok(scale_of(&obj, info)));
    }
    Ok(Reply::ok(served(info, obj)))
}

/// The autoscaling/v1 Scale of a workload.
fn scale_of(obj: &Value, _info: &ResourceInfo) -> Value {
    let meta = &obj["metadata"];
    let mut m = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k) {
            m.insert(k.to_string(), v.clone());
        }
    }
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector
        }
    })
}

/// A stored object as this resource serves it (events.k8s.io/v1 shows core Events in its
/// own shape; everything else is served as stored).
fn served(info: &ResourceInfo, obj: Value) -> Value {
    if is_events_view(&info.group, &info.resource) {
        to_events_v1(&obj)
    } else {
        obj
    }
}

fn served_ref<'a>(info: &ResourceInfo, obj: &'a Value) -> std::borrow::Cow<'a, Value> {
    if is_events_view(&info.group, &info.resource) {
        std::borrow::Cow::Owned(to_events_v1(obj))
    } else {
        std::borrow::Cow::Borrowed(obj)
    }
}

/// A body written through this resource as it is stored (the inverse of [`served`]).
fn stored(info: &ResourceInfo, obj: Value) -> Value {
    if is_events_view(&info.group, &info.resource) {
        to_core_v1(&obj)
    } else {
        obj
    }
}

fn selectors(
    req: &ApiRequest<'_>,
    info: &ResourceInfo,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(req.param("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        &info.group,
        &info.resource,
        req.param("fieldSelector").unwrap_or(""),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((labels, fields))
}

fn list(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: Option<&str>,
) -> Result<Reply, ApiError> {
    let (labels, fields) = selectors(req, info)?;
    let limit: usize = req
        .param("limit")
        .and_then(|l| l.parse::<u64>().ok())
        .filter(|l| *l > 0)
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    let start_after = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => Some(decode_continue(token)?),
        None => None,
    };
    let (items, rv) = store.list_shared(rt, namespace);
    let shape = if table::wants_partial_metadata(req.accept) {
        ListShape::Metadata
    } else if table::wants_table(req.accept) {
        ListShape::Table
    } else {
        ListShape::Full
    };
    // Each selected item is encoded (or reduced) as soon as it is decoded, so a large
    // list never holds all its objects parsed at once.
    let mut encoded: Vec<u8> = Vec::new();
    let mut reduced: Vec<Value> = Vec::new();
    let mut count = 0usize;
    let mut remaining = 0usize;
    let mut last_key = None;
    let strip_type = info.crd.is_none();
    for event in items {
        let obj = &*served_ref(info, &event.object);
        let key = object_key(obj);
        if let Some(after) = &start_after
            && key <= *after
        {
            continue;
        }
        if !labels.matches(obj) || !fields.matches(obj) {
            continue;
        }
        if count >= limit {
            remaining += 1;
            continue;
        }
        count += 1;
        last_key = Some(key);
        match shape {
            ListShape::Metadata => reduced.push(table::partial_metadata(obj)),
            ListShape::Table => {
                let one = table::table_for(info, &[obj], Value::Null, store.clock());
                if let Some(row) = one.get("rows").and_then(|r| r.get(0)) {
                    reduced.push(row.clone());
                }
            }
            ListShape::Full => {
                if !encoded.is_empty() {
                    encoded.push(b',');
                }
                // Built-in list items carry no kind/apiVersion, as the real server sends them.
                let written = if strip_type {
                    write_without_type_meta(&mut encoded, obj)
                } else {
                    serde_json::to_writer(&mut encoded, obj)
                };
                if written.is_err() {
                    return Err(ApiError::internal("encoding a list item"));
                }
            }
        }
    }
    let mut list_meta = Map::new();
    list_meta.insert("resourceVersion".into(), json!(rv.to_string()));
    if remaining > 0
        && let Some(key) = last_key
    {
        list_meta.insert("continue".into(), json!(encode_continue(rv, &key)));
        list_meta.insert("remainingItemCount".into(), json!(remaining));
    } else if info.crd.is_some() {
        list_meta.insert("continue".into(), json!(""));
    }
    match shape {
        ListShape::Metadata => Ok(Reply::Json {
            status: 200,
            body: json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta, "items": reduced}),
            content_type: "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            warnings: Vec::new(),
        }),
        ListShape::Table => {
            let mut body = table::table_for(info, &[], Value::Object(list_meta), store.clock());
            body["rows"] = Value::Array(reduced);
            Ok(Reply::Json {
                status: 200,
                body,
                content_type: "application/json;as=Table;v=v1;g=meta.k8s.io",
                warnings: Vec::new(),
            })
        }
        ListShape::Full => {
            let head = json!({"kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
                "metadata": list_meta});
            let mut body = serde_json::to_vec(&head).unwrap_or_default();
            // Replace the closing brace with the items.
            body.pop();
            body.extend_from_slice(b",\"items\":[");
            body.extend_from_slice(&encoded);
            body.extend_from_slice(b"]}");
            Ok(Reply::Raw {
                status: 200,
                body: Bytes::from(body),
                content_type: "application/json",
            })
        }
    }
}

/// Writes an object as compact JSON without its `kind` and `apiVersion` (the same bytes as
/// encoding a copy without them, without the copy).
fn write_without_type_meta(out: &mut Vec<u8>, obj: &Value) -> serde_json::Result<()> {
    let Some(map) = obj.as_object() else {
        return serde_json::to_writer(out, obj);
    };
    out.push(b'{');
    let mut first = true;
    for (key, value) in map {
        if key == "kind" || key == "apiVersion" {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, value)?;
    }
    out.push(b'}');
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ListShape {
    Full,
    Metadata,
    Table,
}

fn object_key(obj: &Value) -> String {
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{ns}/{name}")
}

fn encode_continue(rv: u64, key: &str) -> String {
    use base64::Engine;
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{key}\u{0}")});
    base64::engine::general_purpose::STANDARD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<String, ApiError> {
    use base64::Engine;
    let invalid = || ApiError::bad_request("continue key is not valid: invalid token");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(token))
        .map_err(|_| invalid())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(invalid)?;
    Ok(start.trim_end_matches('\u{0}').to_string())
}

/// Parses a body as JSON or (for application/yaml) YAML. POST/PUT accept both.
fn parse_body(req: &ApiRequest<'_>, info: &ResourceInfo) -> Result<Value, ApiError> {
    let media = media_type(req.content_type);
    let parsed = match media.as_str() {
        "" | "application/json" | "*/*" => {
            serde_json::from_slice::<Value>(req.body).map_err(BodyError::from)
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => parse_yaml_or_json(req.body),
        crate::http::protobuf::MEDIA_TYPE => {
            use crate::http::protobuf::{Refusal, decode};
            return decode(req.body, &info.api_version(), &info.kind).map_err(|e| match e {
                Refusal::Malformed(e) => ApiError::bad_request(format!("protobuf body: {e}")),
                Refusal::Unsupported(e) => {
                    ApiError::new(415, "UnsupportedMediaType", format!("protobuf body: {e}"))
                }
            });
        }
        _ => return Err(ApiError::unsupported_body_type()),
    };
    match parsed {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: expected an object",
            info.kind
        ))),
        Err(e) => {
            let snippet: String = String::from_utf8_lossy(req.body).chars().take(30).collect();
            Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {} ({snippet} ...)",
                info.kind,
                go_json_error(&e.to_string())
            )))
        }
    }
}

/// serde_json's message for truncated input, as Go words it.
fn go_json_error(e: &str) -> String {
    if e.contains("EOF while parsing") {
        "unexpected end of JSON input".to_string()
    } else {
        e.to_string()
    }
}

fn check_kind(body: &Value, info: &ResourceInfo) -> Result<(), ApiError> {
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): kind {kind} does not match",
            info.kind
        )));
    }
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && av != info.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    Ok(())
}

fn check_namespace(body: &mut Value, info: &ResourceInfo, namespace: &str) -> Result<(), ApiError> {
    if !info.namespaced {
        return Ok(());
    }
    let meta = metadata_mut(body);
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != namespace => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
    }
}

fn write_options(req: &ApiRequest<'_>) -> WriteOptions {
    WriteOptions {
        manager: req.manager(),
        dry_run: req.dry_run(),
        ownership: Ownership::Update,
        expected_resource_version: None,
    }
}

fn create(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
) -> Result<Reply, ApiError> {
    let mut body = parse_body(req, info)?;
    check_kind(&body, info)?;
    check_namespace(&mut body, info, namespace)?;
    check_decodes(info, &body)?;
    let warnings = drop_undeclared_fields(req, info, &mut body)?;
    let created = store.create_with(rt, stored(info, body), &write_options(req))?;
    Ok(Reply::created(served(info, created)).with_warnings(warnings))
}

/// A body the real server cannot decode into its type is refused with 400 before anything
/// else looks at it (e.g. a Secret value that is not base64).
fn check_decodes(info: &ResourceInfo, body: &Value) -> Result<(), ApiError> {
    // The kind's own decoding rules first: they name the field as Go does.
    let error = crate::semantics::decode::decode_error(&info.api_version(), &info.kind, body)
        .or_else(|| {
            info.declaration()
                .and_then(|d| crate::semantics::schema::type_error(d, body))
                .map(|e| e.go_message(&info.kind))
        });
    match error {
        Some(error) => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}",
            kind = info.kind,
            version = info.version,
        ))),
        None => Ok(()),
    }
}

/// A create or update with fields its kind does not declare: by `fieldValidation`, they are
/// dropped with a warning each (Warn, the default), dropped silently (Ignore), or the request
/// is refused (Strict), as a real server does. Returns the warnings.
fn drop_undeclared_fields(
    req: &ApiRequest<'_>,
    info: &ResourceInfo,
    body: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let Some(declaration) = info.declaration() else {
        return Ok(Vec::new());
    };
    let found = crate::semantics::schema::undeclared(declaration, body, true);
    let named: Vec<String> = found
        .iter()
        .map(|u| format!("unknown field \"{}\"", u.decoder_path))
        .collect();
    match req.query.get("fieldValidation").map(String::as_str) {
        Some("Strict") if !named.is_empty() => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            named.join(", "),
            kind = info.kind,
            version = info.version,
        ))),
        Some("Ignore") => Ok(Vec::new()),
        _ => Ok(named),
    }
}

fn update(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
) -> Result<Reply, ApiError> {
    let mut body = parse_body(req, info)?;
    if subresource == Some("scale") {
        let replicas = body.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
        let expected = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        return set_replicas(store, req, rt, info, namespace, name, replicas, expected);
    }
    check_kind(&body, info)?;
    check_namespace(&mut body, info, namespace)?;
    check_decodes(info, &body)?;
    let warnings = drop_undeclared_fields(req, info, &mut body)?;
    let body_name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if body_name.is_empty() {
        metadata_mut(&mut body).insert("name".into(), json!(name));
    } else if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let opts = write_options(req);
    let body = stored(info, body);
    let updated = if subresource == Some("status") {
        store.update_status_with(rt, body, &opts)?
    } else {
        store.update_with(rt, body, &opts)?
    };
    Ok(Reply::ok(served(info, updated)).with_warnings(warnings))
}

#[allow(clippy::too_many_arguments)]
fn set_replicas(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    replicas: Value,
    expected_rv: Option<String>,
) -> Result<Reply, ApiError> {
    if !replicas.is_i64() && !replicas.is_u64() {
        return Err(ApiError::bad_request("spec.replicas must be an integer"));
    }
    let mut obj = store
        .get(rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(rt, name))?;
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), replicas);
    }
    let mut opts = write_options(req);
    opts.expected_resource_version = expected_rv;
    let updated = store.update_with(rt, obj, &opts)?;
    Ok(Reply::ok(scale_of(&updated, info)))
}

fn apply_patch(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
) -> Result<Reply, ApiError> {
    if subresource == Some("scale") {
        return Err(ApiError::unsupported_patch_type());
    }
    let manager = req.param("fieldManager").unwrap_or("");
    if manager.is_empty() {
        return Err(ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\"",
            {
                let mut d = Map::new();
                d.insert("group".into(), json!("meta.k8s.io"));
                d.insert("kind".into(), json!("PatchOptions"));
                d
            },
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    let config = parse_yaml_or_json(req.body).map_err(|e| {
        ApiError::bad_request(format!(
            "error decoding YAML: error converting YAML to JSON: yaml: {e}"
        ))
    })?;
    let applied = crate::storage::apply::apply(
        store,
        ApplyRequest {
            resource: rt,
            namespace: if info.namespaced { namespace } else { "" },
            name,
            config: stored(info, config),
            manager,
            force: req.flag("force"),
            dry_run: req.dry_run(),
            subresource,
        },
    )?;
    Ok(if applied.created {
        Reply::created(served(info, applied.object))
    } else {
        Reply::ok(served(info, applied.object))
    })
}

fn patch(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
) -> Result<Reply, ApiError> {
    let media = media_type(req.content_type);
    let kind = match media.as_str() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" if info.crd.is_none() => PatchKind::Strategic,
        "application/json-patch+json" => PatchKind::Json,
        _ => return Err(ApiError::unsupported_patch_type()),
    };
    let patch: Value = serde_json::from_slice(req.body).map_err(|e| {
        ApiError::bad_request(format!(
            "error decoding patch: {}",
            go_json_error(&e.to_string())
        ))
    })?;
    let current = store
        .get(rt, namespace, name)
        .map(|obj| served(info, obj))
        .ok_or_else(|| ApiError::not_found(&info.resource_type(), name))?;
    let current_rv = current
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut target = if subresource == Some("scale") {
        scale_of(&current, info)
    } else {
        current.clone()
    };
    match kind {
        PatchKind::Merge => apply::merge_patch(&mut target, &patch),
        PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a strategic merge patch must be an object",
                ));
            }
            apply::strategic_merge_patch("", &mut target, &patch)
        }
        PatchKind::Json => apply::json_patch(&mut target, &patch).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?,
    }
    if !target.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: the patched object is not an object",
        ));
    }
    // A resourceVersion left in the patched object is a precondition.
    let expected = target
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(rv) = &expected
        && *rv != current_rv
    {
        return Err(ApiError::conflict(rt, name));
    }
    if subresource == Some("scale") {
        let replicas = target
            .pointer("/spec/replicas")
            .cloned()
            .unwrap_or(json!(0));
        return set_replicas(store, req, rt, info, namespace, name, replicas, expected);
    }
    let patched_name = target
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if patched_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({patched_name}) does not match the name on the URL ({name})"
        )));
    }
    // The patched object is judged as an update's body would be.
    check_decodes(info, &target)?;
    let warnings = drop_undeclared_fields(req, info, &mut target)?;
    let mut opts = write_options(req);
    opts.expected_resource_version = Some(current_rv);
    let target = stored(info, target);
    let updated = if subresource == Some("status") {
        store.update_status_with(rt, target, &opts)?
    } else {
        store.update_with(rt, target, &opts)?
    };
    Ok(Reply::ok(served(info, updated)).with_warnings(warnings))
}

enum PatchKind {
    Merge,
    Strategic,
    Json,
}

fn delete_options(req: &ApiRequest<'_>) -> Result<DeleteOptions, ApiError> {
    let body: Value = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(req.body).map_err(|e| {
            ApiError::bad_request(format!(
                "error decoding DeleteOptions: {}",
                go_json_error(&e.to_string())
            ))
        })?
    };
    let policy = req
        .param("propagationPolicy")
        .map(str::to_string)
        .or_else(|| {
            body.get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    let propagation = match policy.as_deref() {
        None | Some("") | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: \"{other}\""
            )));
        }
    };
    let orphan = body.get("orphanDependents").and_then(Value::as_bool) == Some(true);
    let body_dry_run = body
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    Ok(DeleteOptions {
        dry_run: req.dry_run() || body_dry_run,
        propagation: if orphan {
            Propagation::Orphan
        } else {
            propagation
        },
        expected_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        expected_resource_version: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        // The body's value wins over the query's, as on a real server.
        grace_period_seconds: body
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| req.param("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    })
}

fn delete(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
) -> Result<Reply, ApiError> {
    let opts = delete_options(req)?;
    let deleted = store.delete_with(rt, namespace, name, &opts).map_err(|e| {
        if e.code == 404 {
            ApiError::not_found(&info.resource_type(), name)
        } else {
            e
        }
    })?;
    if !deleted.finished {
        return Ok(Reply::ok(served(info, deleted.object)));
    }
    let mut details = Map::new();
    details.insert("name".into(), json!(name));
    if !info.group.is_empty() {
        details.insert("group".into(), json!(info.group));
    }
    details.insert("kind".into(), json!(info.resource));
    if let Some(uid) = deleted.object.pointer("/metadata/uid") {
        details.insert("uid".into(), uid.clone());
    }
    Ok(Reply::ok(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details
    })))
}

fn delete_collection(
    store: &Store,
    req: &ApiRequest<'_>,
    rt: &ResourceType,
    info: &ResourceInfo,
    namespace: Option<&str>,
) -> Result<Reply, ApiError> {
    let (labels, fields) = selectors(req, info)?;
    let opts = delete_options(req)?;
    let (items, rv) = store.list_shared(rt, namespace);
    let mut deleted = Vec::new();
    for event in items {
        let obj = &*served_ref(info, &event.object);
        if !labels.matches(obj) || !fields.matches(obj) {
            continue;
        }
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        match store.delete_with(rt, ns, name, &opts) {
            Ok(d) => deleted.push(served(info, d.object)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Reply::ok(json!({
        "kind": format!("{}List", info.kind),
        "apiVersion": info.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": deleted
    })))
}

fn watch_spec(
    req: &ApiRequest<'_>,
    info: &Arc<ResourceInfo>,
    path: &ResourcePath,
    name: Option<&str>,
) -> Result<WatchSpec, ApiError> {
    let (labels, mut fields) = selectors(req, info)?;
    if let Some(name) = name {
        // Watching one object: `/watch/.../name` or a `metadata.name` field selector.
        let extra = FieldSelector::parse(
            &info.group,
            &info.resource,
            &format!("metadata.name={name}"),
        )
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
        fields = if fields.is_empty() {
            extra
        } else {
            FieldSelector::parse(
                &info.group,
                &info.resource,
                &format!(
                    "{},metadata.name={name}",
                    req.param("fieldSelector").unwrap_or("")
                ),
            )
            .map_err(|e| ApiError::bad_request(e.to_string()))?
        };
    }
    let send_initial_events = req.flag("sendInitialEvents");
    let resource_version = match req.param("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(_) if send_initial_events => None,
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: \"{rv}\": must be an integer"
            ))
        })?),
    };
    let timeout_seconds = match req.param("timeoutSeconds") {
        None | Some("") => None,
        Some(t) => Some(t.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("timeoutSeconds: Invalid value: \"{t}\""))
        })?),
    };
    Ok(WatchSpec {
        resource: if is_events_view(&info.group, &info.resource) {
            ResourceType::new("", "v1", "events")
        } else {
            info.resource_type()
        },
        info: info.clone(),
        namespace: path.namespace.clone(),
        labels,
        fields,
        resource_version,
        send_initial_events,
        bookmarks: req.flag("allowWatchBookmarks"),
        timeout_seconds,
        metadata_only: table::wants_partial_metadata(req.accept),
        as_table: table::wants_table(req.accept),
        events_view: is_events_view(&info.group, &info.resource),
    })
}

/// Why a request body is not a JSON (or YAML) document; said inside the API server's words.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    #[error("{0}")]
    Yaml(#[from] serde_saphyr::Error),
}

/// Parses a request body as JSON, or else YAML, into a JSON value.
fn parse_yaml_or_json(body: &[u8]) -> Result<Value, BodyError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)?;
    Ok(serde_saphyr::from_str::<Value>(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(2316, "rec-x/web-544dd7f549");
        assert_eq!(decode_continue(&token).unwrap(), "rec-x/web-544dd7f549");
        assert!(decode_continue("!!!").is_err());
    }

    #[test]
    fn verbs_follow_method_and_query() {
        let path = ResourcePath {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: Some("x".into()),
            name: None,
            subresource: None,
            watch_path: false,
        };
        let mut q = HashMap::new();
        assert_eq!(verb_of("GET", &path, &q, ""), "list");
        q.insert("watch".to_string(), "1".to_string());
        assert_eq!(verb_of("GET", &path, &q, ""), "watch");
        assert_eq!(
            verb_of(
                "PATCH",
                &path,
                &q,
                "application/apply-patch+yaml; charset=utf-8"
            ),
            "apply"
        );
        assert_eq!(verb_of("DELETE", &path, &q, ""), "deletecollection");
    }
}
