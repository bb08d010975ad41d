//! The sticky PR comment: one per app and purpose, found again by a hidden marker on its
//! first line, created the first time and updated afterwards, however many other comments
//! (bots, people) came in between and however many pages they fill.

use serde_json::{Value, json};

use super::api::{ApiRequest, Client, GithubError, Method, Transport, next_link};
use super::context::{Repo, same_origin};
use crate::report::escape::comment_word;

/// What a sticky comment is for; each has its own marker, so a PR shows one plan comment and
/// one deploy comment per app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The report of `rollguard deploy`.
    Deploy,
    /// The plan of `rollguard diff`.
    Plan,
}

/// The hidden first line of an app's comment: `<!-- rollguard:deploy:app=shop -->`.
pub fn marker(purpose: Purpose, app: &str) -> String {
    let purpose = match purpose {
        Purpose::Deploy => "deploy",
        Purpose::Plan => "plan",
    };
    format!("<!-- rollguard:{purpose}:app={} -->", comment_word(app))
}

/// What posting did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    Created(u64),
    Updated(u64),
}

/// Comments per page when looking for the marker (GitHub's maximum).
const PER_PAGE: u32 = 100;
/// Pages read at most (10,000 comments): a bound, not a limit anyone meets.
const MAX_PAGES: u32 = 100;

/// Posts `body` as the comment of `marker` on PR `pr`: updates the comment whose first line
/// is the marker, else creates one. The marker is put first when the body lacks it. The
/// caller has escaped and scrubbed `body`.
pub async fn post_sticky<T: Transport>(
    client: &Client<T>,
    api_url: &str,
    repo: &Repo,
    pr: u64,
    marker: &str,
    body: &str,
) -> Result<Posted, GithubError> {
    let body = if body.starts_with(marker) {
        body.to_string()
    } else {
        format!("{marker}\n{body}")
    };
    match find_by_marker(client, api_url, repo, pr, marker).await? {
        Some(id) => {
            let what = format!("update the PR comment on {repo}#{pr}");
            client
                .call(
                    &what,
                    ApiRequest {
                        method: Method::Patch,
                        path: format!("/repos/{repo}/issues/comments/{id}"),
                        body: Some(json!({ "body": body })),
                    },
                )
                .await?;
            Ok(Posted::Updated(id))
        }
        None => {
            let what = format!("create the PR comment on {repo}#{pr}");
            let (created, _) = client
                .json(
                    &what,
                    ApiRequest {
                        method: Method::Post,
                        path: format!("/repos/{repo}/issues/{pr}/comments"),
                        body: Some(json!({ "body": body })),
                    },
                )
                .await?;
            let id = created.get("id").and_then(Value::as_u64).ok_or_else(|| {
                GithubError::BadResponse {
                    what,
                    reason: "the created comment has no id".into(),
                }
            })?;
            Ok(Posted::Created(id))
        }
    }
}

/// The id of the comment whose first line is `marker` (the oldest, if several).
async fn find_by_marker<T: Transport>(
    client: &Client<T>,
    api_url: &str,
    repo: &Repo,
    pr: u64,
    marker: &str,
) -> Result<Option<u64>, GithubError> {
    let what = format!("read the comments of {repo}#{pr}");
    let mut path = format!("/repos/{repo}/issues/{pr}/comments?per_page={PER_PAGE}&page=1");
    for page in 1..=MAX_PAGES {
        let (comments, response) = client
            .json(
                &what,
                ApiRequest {
                    method: Method::Get,
                    path: path.clone(),
                    body: None,
                },
            )
            .await?;
        let comments = comments
            .as_array()
            .ok_or_else(|| GithubError::BadResponse {
                what: what.clone(),
                reason: "the comment list is not an array".into(),
            })?;
        if let Some(id) = comments.iter().find_map(|c| {
            let body = c.get("body").and_then(Value::as_str)?;
            (body.lines().next().map(str::trim) == Some(marker))
                .then(|| c.get("id").and_then(Value::as_u64))
                .flatten()
        }) {
            return Ok(Some(id));
        }
        if comments.len() < PER_PAGE as usize {
            return Ok(None);
        }
        // Follow GitHub's own next link when it stays on the API server (the token goes with
        // it); else count pages ourselves.
        path = match next_link(response.header("link")) {
            Some(next) if same_origin(&next, api_url) => next,
            Some(_) | None => {
                format!(
                    "/repos/{repo}/issues/{pr}/comments?per_page={PER_PAGE}&page={}",
                    page + 1
                )
            }
        };
    }
    Ok(None)
}

/// The pull request a commit belongs to: the open one first, else the newest; None when the
/// commit is on no PR.
pub async fn pr_for_commit<T: Transport>(
    client: &Client<T>,
    repo: &Repo,
    sha: &str,
) -> Result<Option<u64>, GithubError> {
    let what = format!("find the pull request of commit {sha} in {repo}");
    let (prs, _) = client
        .json(
            &what,
            ApiRequest {
                method: Method::Get,
                path: format!("/repos/{repo}/commits/{sha}/pulls?per_page={PER_PAGE}"),
                body: None,
            },
        )
        .await?;
    let prs = prs.as_array().cloned().unwrap_or_default();
    let number = |p: &Value| p.get("number").and_then(Value::as_u64);
    let open = prs
        .iter()
        .find(|p| p.get("state").and_then(Value::as_str) == Some("open"))
        .and_then(number);
    Ok(open.or_else(|| prs.iter().filter_map(number).max()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::api::tests::{Scripted, answer};
    use std::time::Duration;

    fn repo() -> Repo {
        Repo::parse("octo/shop").unwrap()
    }

    fn page(n: usize, start: u64, with: Option<(u64, &str)>) -> String {
        let mut items: Vec<Value> = (0..n as u64)
            .map(|i| json!({"id": start + i, "body": format!("comment {i} <!-- rollguard:deploy:app=shop -->")}))
            .collect();
        if let Some((id, body)) = with {
            items.push(json!({"id": id, "body": body}));
        }
        Value::Array(items).to_string()
    }

    #[test]
    fn markers_differ_by_purpose_and_app() {
        assert_eq!(
            marker(Purpose::Deploy, "shop"),
            "<!-- rollguard:deploy:app=shop -->"
        );
        assert_eq!(
            marker(Purpose::Plan, "shop"),
            "<!-- rollguard:plan:app=shop -->"
        );
        assert_ne!(
            marker(Purpose::Deploy, "shop"),
            marker(Purpose::Deploy, "shop2")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn updates_the_marked_comment_on_the_second_page() {
        let m = marker(Purpose::Deploy, "shop");
        let mine = format!("{m}\nold report");
        let t = Scripted::new(vec![
            answer(
                200,
                &[(
                    "link",
                    "<https://api.github.com/repositories/1/issues/12/comments?per_page=100&page=2>; rel=\"next\"",
                )],
                &page(100, 1, None),
            ),
            answer(200, &[], &page(49, 101, Some((777, &mine)))),
            answer(200, &[], "{}"),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let posted = post_sticky(&c, "https://api.github.com", &repo(), 12, &m, "new report")
            .await
            .unwrap();
        assert_eq!(posted, Posted::Updated(777));
        let seen = c_seen(&c);
        assert_eq!(
            seen[1].path,
            "https://api.github.com/repositories/1/issues/12/comments?per_page=100&page=2"
        );
        assert_eq!(seen[2].method, Method::Patch);
        assert_eq!(seen[2].path, "/repos/octo/shop/issues/comments/777");
        assert_eq!(
            seen[2].body,
            Some(json!({"body": format!("{m}\nnew report")}))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn creates_when_no_comment_has_the_marker_first() {
        let m = marker(Purpose::Deploy, "shop");
        let t = Scripted::new(vec![
            // A next link to another host is not followed with the token.
            answer(
                200,
                &[("link", "<https://evil.example/x?page=2>; rel=\"next\"")],
                &page(100, 1, None),
            ),
            answer(
                200,
                &[],
                &page(3, 101, Some((9, "<!-- rollguard:plan:app=shop -->\nplan"))),
            ),
            answer(201, &[], r#"{"id": 555}"#),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let body = format!("{m}\nreport");
        let posted = post_sticky(&c, "https://api.github.com", &repo(), 12, &m, &body)
            .await
            .unwrap();
        assert_eq!(posted, Posted::Created(555));
        let seen = c_seen(&c);
        assert_eq!(
            seen[1].path,
            "/repos/octo/shop/issues/12/comments?per_page=100&page=2"
        );
        assert_eq!(
            (seen[2].method, seen[2].path.as_str()),
            (Method::Post, "/repos/octo/shop/issues/12/comments")
        );
        assert_eq!(seen[2].body, Some(json!({"body": body})));
    }

    #[tokio::test(start_paused = true)]
    async fn pr_for_commit_prefers_the_open_one() {
        let t = Scripted::new(vec![
            answer(
                200,
                &[],
                r#"[{"number": 3, "state": "closed"}, {"number": 8, "state": "open"}]"#,
            ),
            answer(200, &[], "[]"),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        assert_eq!(
            pr_for_commit(&c, &repo(), "abc1234").await.unwrap(),
            Some(8)
        );
        assert_eq!(pr_for_commit(&c, &repo(), "abc1234").await.unwrap(), None);
    }

    fn c_seen(c: &Client<Scripted>) -> Vec<ApiRequest> {
        c.transport().seen.lock().unwrap().clone()
    }
}
