//! A fake GitHub REST API in the test process (plain HTTP on loopback, a small hyper
//! server): issue comments with pagination, the PRs of a commit, Deployments and their
//! statuses, and faults. Enough for rollguard's GitHub sink, checked the way GitHub answers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub const TOKEN: &str = "ghs_faketoken0123456789";

#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    pub issue: u64,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub deployment: u64,
    pub environment: String,
    pub state: String,
    pub description: String,
    pub log_url: Option<String>,
}

#[derive(Debug, Default)]
pub struct State {
    pub comments: Vec<Comment>,
    next_id: u64,
    /// commit sha -> PR numbers.
    pub commit_prs: HashMap<String, Vec<u64>>,
    /// (id, environment, ref).
    pub deployments: Vec<(u64, String, String)>,
    pub statuses: Vec<Status>,
    /// "METHOD path?query", in order.
    pub requests: Vec<String>,
    /// Answer every comment write (POST/PATCH) with this status.
    pub fail_comment_writes: Option<u16>,
}

pub struct FakeGithub {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

impl FakeGithub {
    pub async fn start() -> FakeGithub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State {
            next_id: 1000,
            ..Default::default()
        }));
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(req, addr, &state).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeGithub { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("state")
    }

    /// Adds a comment by someone else.
    pub fn add_comment(&self, issue: u64, body: &str) {
        let mut s = self.state();
        s.next_id += 1;
        let id = s.next_id;
        s.comments.push(Comment {
            id,
            issue,
            body: body.to_string(),
        });
    }

    pub fn comments_on(&self, issue: u64) -> Vec<Comment> {
        self.state()
            .comments
            .iter()
            .filter(|c| c.issue == issue)
            .cloned()
            .collect()
    }
}

fn answer(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

async fn handle(
    req: Request<Incoming>,
    addr: SocketAddr,
    state: &Mutex<State>,
) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {TOKEN}") || v == format!("token {TOKEN}"));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut s = state.lock().expect("state");
    s.requests.push(if query.is_empty() {
        format!("{method} {path}")
    } else {
        format!("{method} {path}?{query}")
    });
    if !authorized {
        return answer(401, json!({"message": "Bad credentials"}));
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<usize>().ok())
    };
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["repos", o, r, "issues", n, "comments"]) => {
            let issue: u64 = n.parse().unwrap_or(0);
            let per_page = param("per_page").unwrap_or(30).clamp(1, 100);
            let page = param("page").unwrap_or(1).max(1);
            let all: Vec<&Comment> = s.comments.iter().filter(|c| c.issue == issue).collect();
            let items: Vec<Value> = all
                .iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(|c| json!({"id": c.id, "body": c.body, "user": {"login": "someone"}}))
                .collect();
            let mut response = answer(200, Value::Array(items));
            if page * per_page < all.len() {
                let next = format!(
                    "<http://{addr}/repos/{o}/{r}/issues/{issue}/comments?per_page={per_page}&page={}>; rel=\"next\"",
                    page + 1
                );
                response
                    .headers_mut()
                    .insert("link", next.parse().expect("header"));
            }
            response
        }
        ("POST", ["repos", _, _, "issues", n, "comments"]) => {
            if let Some(status) = s.fail_comment_writes {
                return answer(
                    status,
                    json!({"message": "Resource not accessible by integration"}),
                );
            }
            s.next_id += 1;
            let id = s.next_id;
            let comment = Comment {
                id,
                issue: n.parse().unwrap_or(0),
                body: body["body"].as_str().unwrap_or_default().to_string(),
            };
            s.comments.push(comment);
            answer(201, json!({"id": id}))
        }
        ("PATCH", ["repos", _, _, "issues", "comments", id]) => {
            if let Some(status) = s.fail_comment_writes {
                return answer(
                    status,
                    json!({"message": "Resource not accessible by integration"}),
                );
            }
            let id: u64 = id.parse().unwrap_or(0);
            let text = body["body"].as_str().unwrap_or_default().to_string();
            match s.comments.iter_mut().find(|c| c.id == id) {
                Some(c) => {
                    c.body = text;
                    answer(200, json!({"id": id}))
                }
                None => answer(404, json!({"message": "Not Found"})),
            }
        }
        ("GET", ["repos", _, _, "commits", sha, "pulls"]) => {
            let prs: Vec<Value> = s
                .commit_prs
                .get(*sha)
                .map(|ns| {
                    ns.iter()
                        .map(|n| json!({"number": n, "state": "open"}))
                        .collect()
                })
                .unwrap_or_default();
            answer(200, Value::Array(prs))
        }
        ("POST", ["repos", _, _, "deployments"]) => {
            s.next_id += 1;
            let id = s.next_id;
            let environment = body["environment"].as_str().unwrap_or_default().to_string();
            let reference = body["ref"].as_str().unwrap_or_default().to_string();
            s.deployments.push((id, environment, reference));
            answer(201, json!({"id": id}))
        }
        ("POST", ["repos", _, _, "deployments", id, "statuses"]) => {
            let id: u64 = id.parse().unwrap_or(0);
            let Some(environment) = s
                .deployments
                .iter()
                .find(|d| d.0 == id)
                .map(|d| d.1.clone())
            else {
                return answer(404, json!({"message": "Not Found"}));
            };
            let description = body["description"].as_str().unwrap_or_default().to_string();
            if description.chars().count() > 140 {
                return answer(
                    422,
                    json!({"message": "description is too long (maximum is 140 characters)"}),
                );
            }
            s.statuses.push(Status {
                deployment: id,
                environment,
                state: body["state"].as_str().unwrap_or_default().to_string(),
                description,
                log_url: body["log_url"].as_str().map(str::to_string),
            });
            answer(201, json!({"id": id}))
        }
        _ => answer(404, json!({"message": "Not Found"})),
    }
}
