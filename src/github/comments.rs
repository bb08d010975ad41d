//! The sticky PR comment: one per app and purpose, found again by a hidden marker on its
//! first line, created the first time and updated afterwards, however many other comments
//! (bots, people) came in between and however many pages they fill.

use super::api::{Client, GithubError, Op, PER_PAGE, Reply, Transport};
use super::context::Repo;
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

/// Pages read at most (10,000 comments): a bound, not a limit anyone meets.
const MAX_PAGES: u32 = 100;

/// Posts `body` as the comment of `marker` on PR `pr`: updates the comment whose first line
/// is the marker, else creates one. The marker is put first when the body lacks it. The
/// caller has escaped and scrubbed `body`.
pub async fn post_sticky<T: Transport>(
    client: &Client<T>,
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
    match find_by_marker(client, repo, pr, marker).await? {
        Some(id) => {
            let what = format!("update the PR comment on {repo}#{pr}");
            let op = Op::UpdateComment {
                repo: repo.clone(),
                id,
                body,
            };
            client.call(&what, op).await?;
            Ok(Posted::Updated(id))
        }
        None => {
            let what = format!("create the PR comment on {repo}#{pr}");
            let op = Op::CreateComment {
                repo: repo.clone(),
                pr,
                body,
            };
            match client.call(&what, op).await? {
                Reply::Created(id) => Ok(Posted::Created(id)),
                _ => Err(GithubError::BadResponse {
                    what,
                    reason: "the created comment has no id".into(),
                }),
            }
        }
    }
}

/// The id of the comment whose first line is `marker` (the oldest, if several).
async fn find_by_marker<T: Transport>(
    client: &Client<T>,
    repo: &Repo,
    pr: u64,
    marker: &str,
) -> Result<Option<u64>, GithubError> {
    let what = format!("read the comments of {repo}#{pr}");
    for page in 1..=MAX_PAGES {
        let op = Op::ListComments {
            repo: repo.clone(),
            pr,
            page,
        };
        let Reply::Comments(comments) = client.call(&what, op).await? else {
            return Err(GithubError::BadResponse {
                what,
                reason: "the comment list is not a list".into(),
            });
        };
        if let Some(id) = first_marked(&comments, marker) {
            return Ok(Some(id));
        }
        // A short page is the last one: pages are counted here rather than by following
        // GitHub's next link, so the token never goes to a host a Link header names.
        if comments.len() < usize::from(PER_PAGE) {
            return Ok(None);
        }
    }
    Ok(None)
}

/// The id of the first comment whose first line is `marker`. Pure.
fn first_marked(comments: &[(u64, Option<String>)], marker: &str) -> Option<u64> {
    comments.iter().find_map(|(id, body)| {
        let first = body.as_deref()?.lines().next()?.trim();
        (first == marker).then_some(*id)
    })
}

/// The pull request a commit belongs to: the open one first, else the newest; None when the
/// commit is on no PR.
pub async fn pr_for_commit<T: Transport>(
    client: &Client<T>,
    repo: &Repo,
    sha: &str,
) -> Result<Option<u64>, GithubError> {
    let what = format!("find the pull request of commit {sha} in {repo}");
    let op = Op::CommitPulls {
        repo: repo.clone(),
        sha: sha.to_string(),
    };
    let prs = match client.call(&what, op).await? {
        Reply::Pulls(prs) => prs,
        _ => Vec::new(),
    };
    let open = prs.iter().find(|(_, open)| *open).map(|(n, _)| *n);
    Ok(open.or_else(|| prs.iter().map(|(n, _)| *n).max()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::api::tests::Scripted;
    use std::time::Duration;

    fn repo() -> Repo {
        Repo::parse("octo/shop").unwrap()
    }

    /// A page of `n` comments from `start` that quote the marker but do not start with it,
    /// then `with`.
    fn page(n: u64, start: u64, with: Option<(u64, &str)>) -> Reply {
        let mut items: Vec<(u64, Option<String>)> = (0..n)
            .map(|i| {
                let body = format!("comment {i} <!-- rollguard:deploy:app=shop -->");
                (start + i, Some(body))
            })
            .collect();
        if let Some((id, body)) = with {
            items.push((id, Some(body.to_string())));
        }
        Reply::Comments(items)
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

    #[test]
    fn first_marked_table() {
        let m = "<!-- rollguard:deploy:app=shop -->";
        let c = |id: u64, body: Option<&str>| (id, body.map(str::to_string));
        type Page<'a> = &'a [(u64, Option<String>)];
        let cases: &[(Page, Option<u64>)] = &[
            (&[], None),
            (&[c(1, None), c(2, Some("hello"))], None),
            (&[c(1, Some(&format!("quoted {m}")))], None),
            (&[c(1, Some(&format!("  {m}  \nreport")))], Some(1)),
            (&[c(3, Some(m)), c(4, Some(m))], Some(3)),
        ];
        for (comments, want) in cases {
            assert_eq!(first_marked(comments, m), *want, "{comments:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn updates_the_marked_comment_on_the_second_page() {
        let m = marker(Purpose::Deploy, "shop");
        let mine = format!("{m}\nold report");
        let t = Scripted::new(vec![
            Ok(page(100, 1, None)),
            Ok(page(49, 101, Some((777, &mine)))),
            Ok(Reply::Done),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let posted = post_sticky(&c, &repo(), 12, &m, "new report")
            .await
            .unwrap();
        assert_eq!(posted, Posted::Updated(777));
        let seen = c_seen(&c);
        assert_eq!(
            seen[1],
            Op::ListComments {
                repo: repo(),
                pr: 12,
                page: 2
            }
        );
        assert_eq!(
            seen[2],
            Op::UpdateComment {
                repo: repo(),
                id: 777,
                body: format!("{m}\nnew report")
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn creates_when_no_comment_has_the_marker_first() {
        let m = marker(Purpose::Deploy, "shop");
        let t = Scripted::new(vec![
            Ok(page(100, 1, None)),
            Ok(page(
                3,
                101,
                Some((9, "<!-- rollguard:plan:app=shop -->\nplan")),
            )),
            Ok(Reply::Created(555)),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        let body = format!("{m}\nreport");
        let posted = post_sticky(&c, &repo(), 12, &m, &body).await.unwrap();
        assert_eq!(posted, Posted::Created(555));
        let seen = c_seen(&c);
        assert_eq!(seen.len(), 3, "a short page is the last: {seen:?}");
        assert_eq!(
            seen[2],
            Op::CreateComment {
                repo: repo(),
                pr: 12,
                body
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pr_for_commit_prefers_the_open_one() {
        let t = Scripted::new(vec![
            Ok(Reply::Pulls(vec![(3, false), (8, true)])),
            Ok(Reply::Pulls(vec![(3, false), (5, false)])),
            Ok(Reply::Pulls(vec![])),
        ]);
        let c = Client::new(t, "https://api.github.com", Duration::from_secs(30));
        assert_eq!(
            pr_for_commit(&c, &repo(), "abc1234").await.unwrap(),
            Some(8)
        );
        assert_eq!(
            pr_for_commit(&c, &repo(), "abc1234").await.unwrap(),
            Some(5)
        );
        assert_eq!(pr_for_commit(&c, &repo(), "abc1234").await.unwrap(), None);
    }

    fn c_seen(c: &Client<Scripted>) -> Vec<Op> {
        c.transport().seen.lock().unwrap().clone()
    }
}
