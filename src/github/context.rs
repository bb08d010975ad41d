//! Where a run reports to: which repository, which API server, which pull request, which run.
//! Pure functions of the environment, the flags and the event payload.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// Settings from flags (`--github`, `--no-github`, `--github-token`, `--pr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GithubFlags {
    /// `--github` (true) or `--no-github` (false); None: on when `GITHUB_ACTIONS=true`.
    pub enabled: Option<bool>,
    pub token: Option<String>,
    pub pr: Option<u64>,
}

/// A repository, `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    pub owner: String,
    pub name: String,
}

impl Repo {
    /// From `GITHUB_REPOSITORY`; both parts must be plain GitHub names, since they go into
    /// API paths.
    pub fn parse(text: &str) -> Option<Repo> {
        let (owner, name) = text.split_once('/')?;
        let ok = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (ok(owner) && ok(name)).then(|| Repo {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }
}

impl std::fmt::Display for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// How the pull request of this run is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrSource {
    /// `--pr N`, or the number in a pull_request / pull_request_target event.
    Number(u64),
    /// A push or workflow_dispatch: the PRs associated with this commit.
    Commit(String),
    /// Nothing to find it by; the reason is said as a note.
    None(String),
}

/// Everything GitHub-related a run needs, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubContext {
    /// Talk to GitHub at all (the files and workflow commands are written in Actions even
    /// without a token).
    pub enabled: bool,
    /// Running inside GitHub Actions (`GITHUB_ACTIONS=true`): workflow commands on stdout.
    pub in_actions: bool,
    pub token: Option<String>,
    /// `GITHUB_API_URL` (GitHub Enterprise: `https://ghe.example.com/api/v3`).
    pub api_url: String,
    /// `GITHUB_SERVER_URL`.
    pub server_url: String,
    pub repo: Option<Repo>,
    pub pr: PrSource,
    /// The workflow run's page, only when it is on `server_url`.
    pub run_url: Option<String>,
    /// The commit sha deployments are made for.
    pub sha: Option<String>,
    pub step_summary: Option<PathBuf>,
    pub output: Option<PathBuf>,
    /// All GitHub calls of a run together stay within this.
    pub budget: Duration,
}

/// Default bound on all GitHub calls of one run, retries included.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(30);

impl GithubContext {
    /// Resolves the context. `read_event` reads `GITHUB_EVENT_PATH` (a seam for tests).
    pub fn resolve(
        flags: &GithubFlags,
        env: &HashMap<String, String>,
        read_event: &dyn Fn(&str) -> Option<String>,
        budget: Duration,
    ) -> GithubContext {
        let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        let in_actions = get("GITHUB_ACTIONS").as_deref() == Some("true");
        let enabled = flags.enabled.unwrap_or(in_actions);
        let server_url = get("GITHUB_SERVER_URL")
            .unwrap_or_else(|| "https://github.com".to_string())
            .trim_end_matches('/')
            .to_string();
        let api_url = get("GITHUB_API_URL")
            .unwrap_or_else(|| "https://api.github.com".to_string())
            .trim_end_matches('/')
            .to_string();
        let repo = get("GITHUB_REPOSITORY").and_then(|r| Repo::parse(&r));
        let sha = get("GITHUB_SHA");
        let pr = match flags.pr {
            Some(n) => PrSource::Number(n),
            None => pr_from_event(
                get("GITHUB_EVENT_NAME").as_deref(),
                get("GITHUB_EVENT_PATH")
                    .and_then(|p| read_event(&p))
                    .as_deref(),
                sha.as_deref(),
            ),
        };
        let run_url = match (&repo, get("GITHUB_RUN_ID")) {
            (Some(repo), Some(id)) if id.chars().all(|c| c.is_ascii_digit()) => {
                let url = format!("{server_url}/{repo}/actions/runs/{id}");
                same_origin(&url, &server_url).then_some(url)
            }
            _ => None,
        };
        GithubContext {
            enabled,
            in_actions,
            token: flags.token.clone().or_else(|| get("GITHUB_TOKEN")),
            api_url,
            server_url,
            repo,
            pr,
            run_url,
            sha,
            step_summary: get("GITHUB_STEP_SUMMARY").map(PathBuf::from),
            output: get("GITHUB_OUTPUT").map(PathBuf::from),
            budget,
        }
    }
}

/// The PR of an event: its number for pull_request and pull_request_target, the commit for
/// push and workflow_dispatch (whose PR is looked up), else none with the reason.
pub fn pr_from_event(
    event_name: Option<&str>,
    payload: Option<&str>,
    sha: Option<&str>,
) -> PrSource {
    let payload: Option<Value> = payload.and_then(|p| serde_json::from_str(p).ok());
    match event_name {
        Some("pull_request" | "pull_request_target") => {
            let number = payload.as_ref().and_then(|p| {
                p.pointer("/pull_request/number")
                    .or_else(|| p.get("number"))
                    .and_then(Value::as_u64)
            });
            match number {
                Some(n) => PrSource::Number(n),
                None => PrSource::None(
                    "the event payload (GITHUB_EVENT_PATH) names no pull request number".into(),
                ),
            }
        }
        Some("push" | "workflow_dispatch") => match sha {
            Some(sha) if is_hex_sha(sha) => PrSource::Commit(sha.to_string()),
            _ => PrSource::None(format!(
                "a {} event without a usable GITHUB_SHA",
                event_name.unwrap_or_default()
            )),
        },
        Some(other) => PrSource::None(format!(
            "a {other} event has no pull request; pass --pr N to comment on one"
        )),
        None => {
            PrSource::None("no GITHUB_EVENT_NAME; pass --pr N to comment on a pull request".into())
        }
    }
}

fn is_hex_sha(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Whether `url` is on the same scheme, host and port as `base` (and under its path), so a
/// link rollguard writes, or a `next` page it follows with the token, stays on that server.
pub fn same_origin(url: &str, base: &str) -> bool {
    let Some((scheme, rest)) = base.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let prefix = format!("{scheme}://{authority}");
    let Some(after) = url.strip_prefix(&prefix) else {
        return false;
    };
    let base_path = rest[authority.len()..].trim_end_matches('/');
    let Some(tail) = after.strip_prefix(base_path) else {
        return false;
    };
    !authority.is_empty()
        && (tail.is_empty() || tail.starts_with('/') || tail.starts_with('?'))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pr_from_event_table() {
        let pr = r#"{"number": 12, "pull_request": {"number": 12}}"#;
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let cases = [
            (Some("pull_request"), Some(pr), None, PrSource::Number(12)),
            (
                Some("pull_request_target"),
                Some(r#"{"pull_request": {"number": 5}}"#),
                None,
                PrSource::Number(5),
            ),
            (
                Some("push"),
                Some("{}"),
                Some(sha),
                PrSource::Commit(sha.into()),
            ),
            (
                Some("workflow_dispatch"),
                None,
                Some(sha),
                PrSource::Commit(sha.into()),
            ),
        ];
        for (name, payload, sha, want) in cases {
            assert_eq!(pr_from_event(name, payload, sha), want, "{name:?}");
        }
        for (name, payload, sha) in [
            (Some("pull_request"), Some("not json"), None),
            (Some("schedule"), None, Some(sha)),
            (None, None, None),
            (Some("push"), None, Some("main; rm -rf")),
        ] {
            assert!(
                matches!(pr_from_event(name, payload, sha), PrSource::None(_)),
                "{name:?}"
            );
        }
    }

    #[test]
    fn resolve_in_actions() {
        let e = env(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_TOKEN", "t0ken"),
            ("GITHUB_REPOSITORY", "octo/shop"),
            ("GITHUB_RUN_ID", "42"),
            ("GITHUB_SERVER_URL", "https://ghe.example.com/"),
            ("GITHUB_API_URL", "https://ghe.example.com/api/v3"),
            ("GITHUB_EVENT_NAME", "pull_request"),
            ("GITHUB_EVENT_PATH", "/ev.json"),
        ]);
        let read =
            |p: &str| (p == "/ev.json").then(|| r#"{"pull_request":{"number":9}}"#.to_string());
        let c = GithubContext::resolve(&GithubFlags::default(), &e, &read, DEFAULT_BUDGET);
        assert!(c.enabled && c.in_actions);
        assert_eq!(c.token.as_deref(), Some("t0ken"));
        assert_eq!(c.api_url, "https://ghe.example.com/api/v3");
        assert_eq!(c.pr, PrSource::Number(9));
        assert_eq!(
            c.run_url.as_deref(),
            Some("https://ghe.example.com/octo/shop/actions/runs/42")
        );
        // Flags win: --no-github, --pr, --github-token.
        let flags = GithubFlags {
            enabled: Some(false),
            token: Some("flag".into()),
            pr: Some(3),
        };
        let c = GithubContext::resolve(&flags, &e, &read, DEFAULT_BUDGET);
        assert!(!c.enabled);
        assert_eq!(
            (c.token.as_deref(), c.pr),
            (Some("flag"), PrSource::Number(3))
        );
        // Outside Actions it is off unless --github.
        let c = GithubContext::resolve(&GithubFlags::default(), &env(&[]), &read, DEFAULT_BUDGET);
        assert!(!c.enabled && !c.in_actions && c.run_url.is_none());
    }

    #[test]
    fn repo_parse_table() {
        assert_eq!(
            Repo::parse("octo/shop").map(|r| r.to_string()).as_deref(),
            Some("octo/shop")
        );
        for bad in [
            "octo",
            "octo/",
            "/shop",
            "octo/../x",
            "octo/sh op",
            "a/b/c",
            "../x",
        ] {
            assert_eq!(Repo::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn same_origin_table() {
        let cases = [
            (
                "https://github.com/o/r/actions/runs/1",
                "https://github.com",
                true,
            ),
            (
                "https://api.github.com/repositories/1/issues/2/comments?page=2",
                "https://api.github.com",
                true,
            ),
            (
                "https://ghe.example.com/api/v3/x?page=2",
                "https://ghe.example.com/api/v3",
                true,
            ),
            (
                "https://ghe.example.com/other/x",
                "https://ghe.example.com/api/v3",
                false,
            ),
            (
                "https://github.com.evil.example/o",
                "https://github.com",
                false,
            ),
            (
                "https://github.com@evil.example/o",
                "https://github.com",
                false,
            ),
            ("http://github.com/o", "https://github.com", false),
            ("http://127.0.0.1:9999/x", "http://127.0.0.1:9999", true),
            ("http://127.0.0.1:9998/x", "http://127.0.0.1:9999", false),
        ];
        for (url, base, want) in cases {
            assert_eq!(same_origin(url, base), want, "{url} on {base}");
        }
    }
}
