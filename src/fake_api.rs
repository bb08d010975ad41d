//! Test-only: an in-memory API server for Secrets, Leases and Namespaces, with the
//! behaviours the release and lock code rely on (recorded from a real v1.36 server):
//! 409 AlreadyExists on a second create, 409 Conflict on a stale resourceVersion, 422 on a
//! PUT without one, 404 for a namespaced create in a missing namespace, label selectors.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

#[derive(Default)]
pub struct State {
    /// (collection path, name) -> object. Collection e.g. "/api/v1/namespaces/shop/secrets".
    objects: BTreeMap<(String, String), Value>,
    namespaces: BTreeMap<String, Value>,
    rv: u64,
    /// Requests seen, as "METHOD path".
    pub requests: Vec<String>,
    /// When set, every request fails with 503.
    pub down: bool,
    /// Random failures, when set.
    pub faults: Option<Faults>,
}

/// Random failures of requests, from a seeded generator (reproducible).
pub struct Faults {
    pub rng: rand::rngs::StdRng,
    /// Share of requests answered 500 without doing anything.
    pub fail_before: f64,
    /// Share of writes that are done and then answered 500 (the answer was "lost").
    pub fail_after: f64,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    pub state: Arc<Mutex<State>>,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl FakeApi {
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let (code, value) = api.handle(
                    parts.method.as_str(),
                    parts.uri.path(),
                    parts.uri.query().unwrap_or(""),
                    &bytes,
                );
                let response = Response::builder()
                    .status(StatusCode::from_u16(code).unwrap())
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(value.to_string())))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    pub fn add_namespace(&self, name: &str) {
        let mut s = self.state.lock().unwrap();
        s.namespaces.insert(
            name.to_string(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        );
    }

    pub fn has_namespace(&self, name: &str) -> bool {
        self.state.lock().unwrap().namespaces.contains_key(name)
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        let s = self.state.lock().unwrap();
        s.objects
            .get(&(collection.to_string(), name.to_string()))
            .cloned()
    }

    pub fn put_raw(&self, collection: &str, name: &str, value: Value) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let mut value = value;
        value["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        s.objects
            .insert((collection.to_string(), name.to_string()), value);
    }

    pub fn names(&self, collection: &str) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.objects
            .keys()
            .filter(|(c, _)| c == collection)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Fail requests at random from now on (see [`Faults`]).
    pub fn set_faults(&self, seed: u64, fail_before: f64, fail_after: f64) {
        use rand::SeedableRng;
        self.state.lock().unwrap().faults = Some(Faults {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            fail_before,
            fail_after,
        });
    }

    pub fn clear_faults(&self) {
        self.state.lock().unwrap().faults = None;
    }

    fn handle(&self, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
        use rand::Rng;
        let (before, after) = {
            let mut s = self.state.lock().unwrap();
            s.requests.push(format!("{method} {path}"));
            if s.down {
                return status(503, "ServiceUnavailable", "down");
            }
            match s.faults.as_mut() {
                Some(f) => {
                    let before = f.rng.random::<f64>() < f.fail_before;
                    let after = method != "GET" && f.rng.random::<f64>() < f.fail_after;
                    (before, after)
                }
                None => (false, false),
            }
        };
        if before {
            return status(500, "InternalError", "injected failure");
        }
        let answer = self.handle_ok(method, path, query, body);
        if after {
            return status(500, "InternalError", "injected failure after the write");
        }
        answer
    }

    fn handle_ok(&self, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
        let mut s = self.state.lock().unwrap();
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        // Namespaces.
        if let Some(rest) = path.strip_prefix("/api/v1/namespaces") {
            let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
            if rest.is_empty() || rest == "/" {
                if method == "POST" {
                    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
                    if s.namespaces.contains_key(&name) {
                        return status(409, "AlreadyExists", "namespace exists");
                    }
                    s.namespaces.insert(name, body.clone());
                    return (201, body);
                }
            } else if parts.len() == 1 {
                return match s.namespaces.get(parts[0]) {
                    Some(ns) => (200, ns.clone()),
                    None => status(404, "NotFound", "namespace not found"),
                };
            }
        }
        // Namespaced collections: secrets and leases.
        let (collection, name) = split_path(path);
        let Some(namespace) = namespace_of(&collection) else {
            return status(404, "NotFound", &format!("no route {path}"));
        };
        let key = (collection.clone(), name.clone().unwrap_or_default());
        match (method, name) {
            ("GET", None) => {
                let selector = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("labelSelector="))
                    .map(percent_decode)
                    .unwrap_or_default();
                let items: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|((c, _), o)| c == &collection && matches_selector(o, &selector))
                    .map(|(_, o)| o.clone())
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "List",
                           "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
                )
            }
            ("GET", Some(_)) => match s.objects.get(&key) {
                Some(o) => (200, o.clone()),
                None => status(404, "NotFound", "not found"),
            },
            ("POST", None) => {
                if !s.namespaces.contains_key(&namespace) {
                    return status(
                        404,
                        "NotFound",
                        &format!("namespaces \"{namespace}\" not found"),
                    );
                }
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
                let key = (collection.clone(), name);
                if s.objects.contains_key(&key) {
                    return status(409, "AlreadyExists", "already exists");
                }
                s.rv += 1;
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                obj["metadata"]["uid"] = json!(format!("uid-{}", s.rv));
                s.objects.insert(key, obj.clone());
                (201, obj)
            }
            ("PUT", Some(_)) => {
                let Some(current) = s.objects.get(&key).cloned() else {
                    return status(404, "NotFound", "not found");
                };
                let Some(rv) = body["metadata"]["resourceVersion"].as_str() else {
                    return status(
                        422,
                        "Invalid",
                        "metadata.resourceVersion: must be specified for an update",
                    );
                };
                if Some(rv) != current["metadata"]["resourceVersion"].as_str() {
                    return status(409, "Conflict", "the object has been modified");
                }
                s.rv += 1;
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
                s.objects.insert(key, obj.clone());
                (200, obj)
            }
            ("DELETE", Some(_)) => {
                let Some(current) = s.objects.get(&key).cloned() else {
                    return status(404, "NotFound", "not found");
                };
                if let Some(rv) = body["preconditions"]["resourceVersion"].as_str()
                    && Some(rv) != current["metadata"]["resourceVersion"].as_str()
                {
                    return status(409, "Conflict", "precondition failed");
                }
                s.objects.remove(&key);
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                )
            }
            _ => status(405, "MethodNotAllowed", "method not allowed"),
        }
    }
}

fn split_path(path: &str) -> (String, Option<String>) {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let last = parts.last().copied().unwrap_or("");
    if last == "secrets" || last == "leases" {
        (path.trim_end_matches('/').to_string(), None)
    } else {
        (parts[..parts.len() - 1].join("/"), Some(last.to_string()))
    }
}

fn namespace_of(collection: &str) -> Option<String> {
    let parts: Vec<&str> = collection.split('/').collect();
    let i = parts.iter().position(|p| *p == "namespaces")?;
    parts.get(i + 1).map(|s| s.to_string())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

fn matches_selector(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let Some((k, v)) = term.split_once('=') else {
            return false;
        };
        obj["metadata"]["labels"][k].as_str() == Some(v)
    })
}
