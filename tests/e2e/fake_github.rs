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

/// A user as GitHub's API shows one (`simple-user`).
fn user(base: &str, login: &str, id: u64) -> Value {
    let url = format!("{base}/users/{login}");
    json!({
        "login": login, "id": id, "node_id": format!("U_{id}"),
        "avatar_url": format!("{base}/avatars/{login}"), "gravatar_id": "",
        "url": url, "html_url": format!("{base}/{login}"),
        "followers_url": format!("{url}/followers"),
        "following_url": format!("{url}/following{{/other_user}}"),
        "gists_url": format!("{url}/gists{{/gist_id}}"),
        "starred_url": format!("{url}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{url}/subscriptions"),
        "organizations_url": format!("{url}/orgs"),
        "repos_url": format!("{url}/repos"),
        "events_url": format!("{url}/events{{/privacy}}"),
        "received_events_url": format!("{url}/received_events"),
        "type": "Bot", "site_admin": false
    })
}

/// An issue comment as GitHub's API shows one.
fn comment_json(base: &str, repo: &str, c: &Comment) -> Value {
    json!({
        "id": c.id, "node_id": format!("IC_{}", c.id),
        "url": format!("{base}/repos/{repo}/issues/comments/{}", c.id),
        "html_url": format!("{base}/{repo}/pull/{}#issuecomment-{}", c.issue, c.id),
        "issue_url": format!("{base}/repos/{repo}/issues/{}", c.issue),
        "body": c.body,
        "user": user(base, "github-actions[bot]", 41898282),
        "author_association": "NONE",
        "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z"
    })
}

/// A deployment as GitHub's API shows one.
fn deployment_json(base: &str, repo: &str, id: u64, environment: &str, reference: &str) -> Value {
    let url = format!("{base}/repos/{repo}/deployments/{id}");
    json!({
        "url": url, "id": id, "node_id": format!("DE_{id}"), "sha": reference,
        "ref": reference, "task": "deploy", "payload": {}, "original_environment": environment,
        "environment": environment, "description": null,
        "creator": user(base, "github-actions[bot]", 41898282),
        "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
        "statuses_url": format!("{url}/statuses"),
        "repository_url": format!("{base}/repos/{repo}"),
        "transient_environment": false, "production_environment": false
    })
}

/// A deployment status as GitHub's API shows one.
fn status_json(base: &str, repo: &str, id: u64, status: &Status) -> Value {
    let deployment = format!("{base}/repos/{repo}/deployments/{}", status.deployment);
    json!({
        "url": format!("{deployment}/statuses/{id}"), "id": id,
        "node_id": format!("DES_{id}"), "state": status.state,
        "creator": user(base, "github-actions[bot]", 41898282),
        "description": status.description, "environment": status.environment,
        "target_url": status.log_url.clone().unwrap_or_default(),
        "log_url": status.log_url.clone().unwrap_or_default(),
        "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
        "deployment_url": deployment, "repository_url": format!("{base}/repos/{repo}")
    })
}

/// A pull request as the list of a commit's pull requests shows one (`pull-request-simple`,
/// the fields a reader may rely on).
fn pull_json(base: &str, repo: &str, number: u64, sha: &str) -> Value {
    json!({
        "url": format!("{base}/repos/{repo}/pulls/{number}"), "id": 5000 + number,
        "node_id": format!("PR_{number}"), "number": number, "state": "open", "locked": false,
        "title": format!("change {number}"),
        "user": user(base, "someone", 7),
        "head": {"label": "octo:feature", "ref": "feature", "sha": sha},
        "base": {"label": "octo:main", "ref": "main", "sha": "0000000000000000000000000000000000000000"}
    })
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
    let base = format!("http://{addr}");
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<usize>().ok())
    };
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["repos", o, r, "issues", n, "comments"]) => {
            let repo = format!("{o}/{r}");
            let issue: u64 = n.parse().unwrap_or(0);
            let per_page = param("per_page").unwrap_or(30).clamp(1, 100);
            let page = param("page").unwrap_or(1).max(1);
            let all: Vec<&Comment> = s.comments.iter().filter(|c| c.issue == issue).collect();
            let items: Vec<Value> = all
                .iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(|c| comment_json(&base, &repo, c))
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
        ("POST", ["repos", o, r, "issues", n, "comments"]) => {
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
            let created = comment_json(&base, &format!("{o}/{r}"), &comment);
            s.comments.push(comment);
            answer(201, created)
        }
        // GitHub takes POST wherever it documents PATCH (octocrab updates a comment so).
        ("PATCH" | "POST", ["repos", o, r, "issues", "comments", id]) => {
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
                    let updated = comment_json(&base, &format!("{o}/{r}"), c);
                    answer(200, updated)
                }
                None => answer(404, json!({"message": "Not Found"})),
            }
        }
        ("GET", ["repos", o, r, "commits", sha, "pulls"]) => {
            let repo = format!("{o}/{r}");
            let prs: Vec<Value> = s
                .commit_prs
                .get(*sha)
                .map(|ns| {
                    ns.iter()
                        .map(|n| pull_json(&base, &repo, *n, sha))
                        .collect()
                })
                .unwrap_or_default();
            answer(200, Value::Array(prs))
        }
        ("POST", ["repos", o, r, "deployments"]) => {
            s.next_id += 1;
            let id = s.next_id;
            let environment = body["environment"].as_str().unwrap_or_default().to_string();
            let reference = body["ref"].as_str().unwrap_or_default().to_string();
            let created = deployment_json(&base, &format!("{o}/{r}"), id, &environment, &reference);
            s.deployments.push((id, environment, reference));
            answer(201, created)
        }
        ("POST", ["repos", o, r, "deployments", id, "statuses"]) => {
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
            let status = Status {
                deployment: id,
                environment,
                state: body["state"].as_str().unwrap_or_default().to_string(),
                description,
                log_url: body["log_url"].as_str().map(str::to_string),
            };
            s.next_id += 1;
            let created = status_json(&base, &format!("{o}/{r}"), s.next_id, &status);
            s.statuses.push(status);
            answer(201, created)
        }
        _ => answer(404, json!({"message": "Not Found"})),
    }
}
