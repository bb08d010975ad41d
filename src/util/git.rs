//! Git at the edges: the commit being deployed, and the files of an older commit.
//!
//! A record too large for a Secret keeps only its commit, and `rollguard rollback --from-git`
//! names one; in both cases the manifests are read from a temporary worktree of that commit.
//! CI checkouts are shallow, so a missing commit is fetched alone (`git fetch --depth 1
//! origin SHA`). Everything runs the `git` binary (no libgit2, a C build) through the one
//! child-process runner, each command under a deadline (`ROLLGUARD_GIT_TIMEOUT`, default
//! 60 s) and within the cancel budget of its caller ([`runner::within`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::util::runner::{self, Capture, End, Env, Spec, run_blocking};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("could not run git in {dir}: {detail}. Is git installed?")]
    Spawn { dir: PathBuf, detail: String },
    #[error(
        "git {args} in {dir} did not finish within {} and was stopped (ROLLGUARD_GIT_TIMEOUT sets that deadline; a remote that does not answer?)",
        crate::util::duration::format_duration(*timeout)
    )]
    TimedOut {
        args: String,
        dir: PathBuf,
        timeout: Duration,
    },
    #[error("{dir} is not inside a git repository: {detail}")]
    NotARepo { dir: PathBuf, detail: String },
    #[error(
        "commit {sha} is not in the repository at {dir} and could not be fetched from origin: {detail}. \
         Check that the commit exists on the remote (a force-push may have removed it)"
    )]
    Unreachable {
        sha: String,
        dir: PathBuf,
        detail: String,
    },
    #[error(
        "commit {sha} is not in the clone at {dir}, and this git cannot fetch it: it has no HTTPS \
         transport (git-remote-https; the rollguard image leaves it out unless built with \
         GIT_HTTPS=1). Check out enough history before rollguard runs (GitLab: GIT_DEPTH: 0; \
         actions/checkout: fetch-depth: 0; Tekton git-clone: depth \"0\"), or use the image's \
         -git-https tag"
    )]
    NoHttpsTransport { sha: String, dir: PathBuf },
    #[error("git {args} failed in {dir}: {detail}")]
    Failed {
        args: String,
        dir: PathBuf,
        detail: String,
    },
    #[error("could not create a temporary directory: {0}")]
    Temp(#[source] std::io::Error),
}

/// A commit: the one being deployed (in the report), the one a release was built from (in
/// its record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CommitInfo {
    /// Full hex sha.
    pub sha: String,
    /// Branch or tag name when known (GITHUB_REF_NAME).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub r#ref: Option<String>,
    /// First line of the commit message when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The working tree had uncommitted changes to tracked files: what was deployed is not
    /// exactly this commit. Records written before this field read as clean.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dirty: bool,
}

impl CommitInfo {
    /// The first 7 characters of the sha, as git shows it.
    pub fn short_sha(&self) -> &str {
        self.sha.get(..7).unwrap_or(&self.sha)
    }

    /// The short sha for people: `3a30e4b`, or `3a30e4b (dirty)`.
    pub fn label(&self) -> String {
        if self.dirty {
            format!("{} (dirty)", self.short_sha())
        } else {
            self.short_sha().to_string()
        }
    }
}

/// Whether `git status --porcelain --untracked-files=no` output lists any change.
pub fn porcelain_is_dirty(status: &str) -> bool {
    status.lines().any(|line| !line.trim().is_empty())
}

/// How long one git command may run unless `ROLLGUARD_GIT_TIMEOUT` says otherwise (a fetch
/// of one commit takes seconds; a remote that never answers must not hold the run).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The most a git command may print on stdout that rollguard keeps (shas, a subject line).
const MAX_STDOUT: usize = 4 * 1024 * 1024;

/// The git deadline from the environment: `ROLLGUARD_GIT_TIMEOUT` (a duration, e.g. `30s`),
/// else [`DEFAULT_TIMEOUT`]. Read once when a command starts, so a bad value is bad input;
/// the value goes with the config (`Config::git_timeout`) to every git call.
pub fn timeout_from_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Duration, crate::util::duration::DurationError> {
    match env("ROLLGUARD_GIT_TIMEOUT").filter(|v| !v.trim().is_empty()) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(text) => crate::util::duration::parse_duration(&text),
    }
}

/// How a git command that ran ended badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitExit {
    /// It exited with this code (0 only when its stdout overflowed).
    Code(i32),
    /// A signal it did not get from us ended it.
    Signal(i32),
}

/// A git command that ran and did not succeed: how it ended and what it said on stderr
/// (trimmed). Its text is the stderr alone, as git's callers quote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{stderr}")]
struct GitFailure {
    status: GitExit,
    stderr: String,
}

/// Run git in `dir` under its deadline; Ok(stdout) on success, Err(the failure) when it ran
/// and exited non-zero; the outer error when it could not run or did not end in time.
fn git(
    dir: &Path,
    timeout: Duration,
    args: &[&str],
) -> Result<Result<String, GitFailure>, GitError> {
    let mut spec = Spec::new("git", timeout)
        .args(["-C".as_ref(), dir.as_os_str()])
        // Hooks of the user's repository have no business running during a rollback, and an
        // auto-gc must not be left running in the background.
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "advice.detachedHead=false",
            "-c",
            "gc.auto=0",
        ])
        .args(args);
    spec.env = Env::Inherit(vec![("GIT_TERMINAL_PROMPT".into(), "0".into())]);
    spec.stdout = Capture::Bytes(MAX_STDOUT);
    let timeout = runner::capped(spec.timeout);
    let out = run_blocking(&spec, &|line| line.to_string());
    let stderr = out.tail.join("\n").trim().to_string();
    match out.end {
        End::Exited(0) if !out.overflowed => {
            Ok(Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()))
        }
        End::Exited(code) => Ok(Err(GitFailure {
            status: GitExit::Code(code),
            stderr,
        })),
        End::Signalled(signal) => Ok(Err(GitFailure {
            status: GitExit::Signal(signal),
            stderr,
        })),
        End::NotStarted(why) => Err(GitError::Spawn {
            dir: dir.to_path_buf(),
            detail: why,
        }),
        End::TimedOut | End::Stopped if out.overflowed => Err(GitError::Failed {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            detail: format!("it printed more than {MAX_STDOUT} bytes and was stopped"),
        }),
        End::TimedOut | End::Stopped => Err(GitError::TimedOut {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            timeout,
        }),
    }
}

fn git_ok(dir: &Path, timeout: Duration, args: &[&str]) -> Result<String, GitError> {
    git(dir, timeout, args)?.map_err(|failure| GitError::Failed {
        args: args.join(" "),
        dir: dir.to_path_buf(),
        detail: failure.stderr,
    })
}

/// The top folder of the repository containing `dir`.
pub fn repo_root(dir: &Path, timeout: Duration) -> Result<PathBuf, GitError> {
    match git(dir, timeout, &["rev-parse", "--show-toplevel"])? {
        Ok(root) => Ok(PathBuf::from(root)),
        Err(failure) => Err(GitError::NotARepo {
            dir: dir.to_path_buf(),
            detail: failure.stderr,
        }),
    }
}

/// Whether the clone is shallow (CI checkouts usually are).
pub fn is_shallow(dir: &Path, timeout: Duration) -> Result<bool, GitError> {
    Ok(git_ok(dir, timeout, &["rev-parse", "--is-shallow-repository"])? == "true")
}

/// Whether the object database holds `rev` as a commit.
pub fn has_commit(dir: &Path, rev: &str, timeout: Duration) -> Result<bool, GitError> {
    Ok(git(
        dir,
        timeout,
        &["cat-file", "-e", &format!("{rev}^{{commit}}")],
    )?
    .is_ok())
}

/// Commit info of `rev` (sha, first line of the message). `r#ref` is the branch when `rev`
/// is HEAD on a branch.
pub fn commit_info(dir: &Path, rev: &str, timeout: Duration) -> Result<CommitInfo, GitError> {
    let sha = git_ok(
        dir,
        timeout,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )?;
    let message = git_ok(dir, timeout, &["log", "-1", "--format=%s", &sha])
        .ok()
        .filter(|m| !m.is_empty());
    let r#ref = if rev == "HEAD" {
        git(dir, timeout, &["symbolic-ref", "-q", "HEAD"])?.ok()
    } else {
        None
    };
    Ok(CommitInfo {
        sha,
        r#ref,
        message,
        dirty: false,
    })
}

/// The commit being deployed: `--commit`, else `GITHUB_SHA` (with `GITHUB_REF_NAME`), else
/// `git rev-parse HEAD` in `dir`. None without any of them (no git, not a repository).
/// `deployed`: the manifest files read; one that is not in the commit makes it dirty.
pub fn detect_commit(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    dir: &Path,
    deployed: &[&Path],
    timeout: Duration,
) -> Option<CommitInfo> {
    let non_empty = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    // Any failure (no git, not a repository, unknown sha) only leaves the field unknown.
    let git = |args: &[&str]| non_empty(git(dir, timeout, args).ok()?.ok());
    let subject = |sha: &str| git(&["log", "-1", "--format=%s", sha, "--"]);
    let branch = || git(&["rev-parse", "--abbrev-ref", "HEAD"]).filter(|r| r != "HEAD");
    let env_ref = non_empty(env("GITHUB_REF_NAME"));

    if let Some(sha) = non_empty(flag.map(str::to_string)) {
        let message = subject(&sha);
        return Some(CommitInfo {
            sha,
            r#ref: env_ref.or_else(branch),
            message,
            dirty: false,
        });
    }
    if let Some(sha) = non_empty(env("GITHUB_SHA")) {
        let message = subject(&sha);
        return Some(CommitInfo {
            sha,
            r#ref: env_ref,
            message,
            dirty: false,
        });
    }
    let sha = git(&["rev-parse", "HEAD"])?;
    let message = subject(&sha);
    // Uncommitted changes to tracked files are deployed too: say so. Other untracked files
    // are left out (build output, editor files), but not deployed manifests that are not in
    // the commit (untracked or ignored); a failing git leaves it clean.
    let status = self::git(
        dir,
        timeout,
        &["status", "--porcelain", "--untracked-files=no"],
    );
    let mut untracked = vec!["ls-files", "--others", "--"];
    untracked.extend(deployed.iter().filter_map(|p| p.to_str()));
    let dirty = matches!(status, Ok(Ok(out)) if porcelain_is_dirty(&out))
        || (!deployed.is_empty()
            && matches!(self::git(dir, timeout, &untracked), Ok(Ok(out)) if porcelain_is_dirty(&out)));
    Some(CommitInfo {
        sha,
        r#ref: env_ref.or_else(branch),
        message,
        dirty,
    })
}

/// The repository's default branch: origin's HEAD (`origin/main`), else a local `main` or
/// `master`. None when there is no such branch.
pub fn default_branch(dir: &Path, timeout: Duration) -> Result<Option<String>, GitError> {
    if let Ok(name) = git(
        dir,
        timeout,
        &["symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD"],
    )? && !name.is_empty()
    {
        return Ok(Some(name));
    }
    for branch in ["main", "master"] {
        if git(
            dir,
            timeout,
            &[
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/heads/{branch}"),
            ],
        )?
        .is_ok()
        {
            return Ok(Some(branch.to_string()));
        }
    }
    Ok(None)
}

/// What an offline plan compares with by default: the merge base of HEAD with the default
/// branch (a pull request's starting point), unless that is HEAD itself (on the default
/// branch, or no such branch), then `HEAD~1` (the last commit's change).
pub fn default_base(dir: &Path, timeout: Duration) -> Result<String, GitError> {
    let head = git_ok(dir, timeout, &["rev-parse", "--verify", "HEAD^{commit}"])?;
    if let Some(branch) = default_branch(dir, timeout)?
        && let Ok(base) = git(dir, timeout, &["merge-base", "HEAD", &branch])?
        && !base.is_empty()
        && base != head
    {
        return Ok(base);
    }
    match git(dir, timeout, &["rev-parse", "--verify", "-q", "HEAD~1^{commit}"])? {
        Ok(parent) => Ok(parent),
        Err(_) => Err(GitError::Failed {
            args: "rev-parse HEAD~1".into(),
            dir: dir.to_path_buf(),
            detail: "HEAD has no parent and no default branch to compare with; name a ref with --against".into(),
        }),
    }
}

/// Make sure `sha` is present, fetching that one commit from origin if needed.
pub fn ensure_commit(dir: &Path, sha: &str, timeout: Duration) -> Result<(), GitError> {
    if has_commit(dir, sha, timeout)? {
        return Ok(());
    }
    let mut tried = Vec::new();
    // A shallow clone must stay shallow: fetch just that commit. A full clone fetches normally.
    let depth_args: &[&str] = if is_shallow(dir, timeout)? {
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--depth",
            "1",
            "origin",
            sha,
        ]
    } else {
        &["fetch", "--quiet", "--no-tags", "origin", sha]
    };
    match git(dir, timeout, depth_args)? {
        Ok(_) if has_commit(dir, sha, timeout)? => return Ok(()),
        Ok(_) => tried.push("fetch succeeded but the commit is still missing".to_string()),
        Err(e) if lacks_https_transport(&e.stderr) => {
            return Err(GitError::NoHttpsTransport {
                sha: sha.to_string(),
                dir: dir.to_path_buf(),
            });
        }
        Err(e) => tried.push(e.stderr),
    }
    Err(GitError::Unreachable {
        sha: sha.to_string(),
        dir: dir.to_path_buf(),
        detail: tried.join("; "),
    })
}

/// True when git's stderr says that it has no helper for an http(s) remote, as git built or
/// installed without its curl-based transport answers (the slim image's git).
fn lacks_https_transport(stderr: &str) -> bool {
    [
        "'remote-https' is not a git command",
        "'remote-http' is not a git command",
    ]
    .iter()
    .any(|m| stderr.contains(m))
        || stderr.contains("Unable to find remote helper for 'http")
}

/// The files of one commit, in a temporary worktree removed on drop.
#[derive(Debug)]
pub struct Checkout {
    repo: PathBuf,
    worktree: PathBuf,
    sha: String,
    /// The deadline of each git command, for the removal on drop too.
    timeout: Duration,
    // Dropped last: the directory goes after `git worktree remove`.
    _temp: tempfile::TempDir,
}

impl Checkout {
    /// Check out `sha` of the repository containing `dir` into a temporary directory,
    /// fetching it first when the clone lacks it.
    pub fn at(dir: &Path, sha: &str, timeout: Duration) -> Result<Checkout, GitError> {
        let repo = repo_root(dir, timeout)?;
        ensure_commit(&repo, sha, timeout)?;
        let temp = tempfile::Builder::new()
            .prefix("rollguard-git-")
            .tempdir()
            .map_err(GitError::Temp)?;
        let worktree = temp.path().join("tree");
        let worktree_text = worktree.to_string_lossy().to_string();
        git_ok(
            &repo,
            timeout,
            &[
                "worktree",
                "add",
                "--detach",
                "--quiet",
                &worktree_text,
                sha,
            ],
        )?;
        Ok(Checkout {
            repo,
            worktree,
            sha: sha.to_string(),
            timeout,
            _temp: temp,
        })
    }

    /// The top of the checked-out tree.
    pub fn root(&self) -> &Path {
        &self.worktree
    }

    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// Where a path of the working copy lives in this checkout (e.g. the config's folder).
    /// Relative paths are taken relative to the repository's top.
    pub fn map_path(&self, original: &Path) -> PathBuf {
        let absolute = if original.is_absolute() {
            original.to_path_buf()
        } else {
            self.repo.join(original)
        };
        let absolute = absolute.canonicalize().unwrap_or(absolute);
        let repo = self
            .repo
            .canonicalize()
            .unwrap_or_else(|_| self.repo.clone());
        match absolute.strip_prefix(&repo) {
            Ok(relative) => self.worktree.join(relative),
            Err(_) => self.worktree.clone(),
        }
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let path = self.worktree.to_string_lossy().to_string();
        if let Ok(Err(e)) = git(
            &self.repo,
            self.timeout,
            &["worktree", "remove", "--force", &path],
        ) {
            tracing::debug!("git worktree remove {path}: {e}");
            let _ = git(&self.repo, self.timeout, &["worktree", "prune"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.com",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn commit(dir: &Path, file: &str, text: &str, message: &str) -> String {
        std::fs::create_dir_all(dir.join(file).parent().unwrap()).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
        run(dir, &["add", "."]);
        run(dir, &["commit", "-q", "-m", message]);
        run(dir, &["rev-parse", "HEAD"])
    }

    #[test]
    fn commit_info_and_checkout_in_shallow_clone() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        std::fs::create_dir_all(&origin).unwrap();
        run(&origin, &["init", "-q"]);
        let old = commit(
            &origin,
            "k8s/app.yaml",
            "image: v1\n",
            "first version\n\nbody",
        );
        let _new = commit(&origin, "k8s/app.yaml", "image: v2\n", "second version");
        let url = format!("file://{}", origin.display());
        let clone = tmp.path().join("clone");
        run(
            tmp.path(),
            &["clone", "-q", "--depth", "1", &url, clone.to_str().unwrap()],
        );
        assert!(is_shallow(&clone, DEFAULT_TIMEOUT).unwrap());
        assert!(!has_commit(&clone, &old, DEFAULT_TIMEOUT).unwrap());

        let info = commit_info(&clone, "HEAD", DEFAULT_TIMEOUT).unwrap();
        assert_eq!(info.message.as_deref(), Some("second version"));
        assert_eq!(info.r#ref.as_deref(), Some("refs/heads/main"));

        let checkout = Checkout::at(&clone.join("k8s"), &old, DEFAULT_TIMEOUT).unwrap();
        let k8s = checkout.map_path(&clone.join("k8s"));
        assert_eq!(
            std::fs::read_to_string(k8s.join("app.yaml")).unwrap(),
            "image: v1\n"
        );
        assert!(
            is_shallow(&clone, DEFAULT_TIMEOUT).unwrap(),
            "still shallow after the fetch"
        );
        let root = checkout.root().to_path_buf();
        drop(checkout);
        assert!(!root.exists());
        // The working copy is untouched.
        assert_eq!(
            std::fs::read_to_string(clone.join("k8s/app.yaml")).unwrap(),
            "image: v2\n"
        );
        let worktrees = run(&clone, &["worktree", "list"]);
        assert_eq!(worktrees.lines().count(), 1, "{worktrees}");

        let missing = "0123456789abcdef0123456789abcdef01234567";
        let err = Checkout::at(&clone, missing, DEFAULT_TIMEOUT).unwrap_err();
        assert!(matches!(err, GitError::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains(missing));
    }

    #[test]
    fn a_git_without_https_transport_is_told_apart() {
        for (stderr, lacks) in [
            (
                "git: 'remote-https' is not a git command. See 'git --help'.\nfatal: remote helper 'https' aborted session",
                true,
            ),
            ("git: 'remote-http' is not a git command.", true),
            ("fatal: Unable to find remote helper for 'https'", true),
            (
                "fatal: unable to access 'https://localhost:1/x.git/': Failed to connect to localhost port 1",
                false,
            ),
            ("fatal: remote error: upload-pack: not our ref abc", false),
        ] {
            assert_eq!(lacks_https_transport(stderr), lacks, "{stderr}");
        }
    }

    #[test]
    fn default_base_is_the_merge_base_else_the_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        run(dir, &["init", "-q"]);
        let first = commit(dir, "a.yaml", "1\n", "first");
        let second = commit(dir, "a.yaml", "2\n", "second");
        // On the default branch: the parent.
        assert_eq!(default_base(dir, DEFAULT_TIMEOUT).unwrap(), first);
        run(dir, &["checkout", "-q", "-b", "feature"]);
        commit(dir, "a.yaml", "3\n", "third");
        commit(dir, "a.yaml", "4\n", "fourth");
        // On a branch: where it left main.
        assert_eq!(
            default_branch(dir, DEFAULT_TIMEOUT).unwrap().as_deref(),
            Some("main")
        );
        assert_eq!(default_base(dir, DEFAULT_TIMEOUT).unwrap(), second);
        let lone = tempfile::tempdir().unwrap();
        run(lone.path(), &["init", "-q"]);
        commit(lone.path(), "a.yaml", "1\n", "only");
        let err = default_base(lone.path(), DEFAULT_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--against"), "{err}");
    }

    #[test]
    fn not_a_repo_is_clear() {
        let tmp = tempfile::tempdir().unwrap();
        let err = repo_root(tmp.path(), DEFAULT_TIMEOUT).unwrap_err();
        assert!(matches!(err, GitError::NotARepo { .. }), "{err}");
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn detect_commit_sources() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_of(&[("GITHUB_SHA", "abc123"), ("GITHUB_REF_NAME", "main")]);
        let c = detect_commit(Some("feedbeef"), &env, dir.path(), &[], DEFAULT_TIMEOUT).unwrap();
        assert_eq!(c.sha, "feedbeef");
        assert_eq!(c.r#ref.as_deref(), Some("main"));
        let c = detect_commit(None, &env, dir.path(), &[], DEFAULT_TIMEOUT).unwrap();
        assert_eq!(c.sha, "abc123");
        assert_eq!(c.message, None);
        // Not a git repository (or no git at all): unknown, and that is fine.
        assert_eq!(
            detect_commit(None, &no_env, dir.path(), &[], DEFAULT_TIMEOUT),
            None
        );
    }

    #[test]
    fn detect_commit_from_git() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        if !run(&["init", "-q", "-b", "trunk"]) {
            return; // no git on this machine
        }
        std::fs::write(dir.path().join("f"), "x").unwrap();
        assert!(run(&["add", "f"]));
        assert!(run(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "-m",
            "First commit\n\nbody"
        ]));
        let c = detect_commit(None, &no_env, dir.path(), &[], DEFAULT_TIMEOUT).unwrap();
        assert_eq!(c.sha.len(), 40);
        assert_eq!(c.message.as_deref(), Some("First commit"));
        assert_eq!(c.r#ref.as_deref(), Some("trunk"));
        assert!(!c.dirty, "{c:?}");
        // An untracked file leaves it clean, unless it is a deployed manifest; a change to a
        // tracked one makes it dirty.
        std::fs::write(dir.path().join("new"), "y").unwrap();
        let tracked = dir.path().join("f");
        assert!(
            !detect_commit(None, &no_env, dir.path(), &[&tracked], DEFAULT_TIMEOUT)
                .unwrap()
                .dirty
        );
        let new = dir.path().join("new");
        assert!(
            detect_commit(
                None,
                &no_env,
                dir.path(),
                &[&tracked, &new],
                DEFAULT_TIMEOUT
            )
            .unwrap()
            .dirty
        );
        std::fs::write(dir.path().join("f"), "changed").unwrap();
        let c = detect_commit(None, &no_env, dir.path(), &[], DEFAULT_TIMEOUT).unwrap();
        assert!(c.dirty, "{c:?}");
        assert_eq!(c.label(), format!("{} (dirty)", &c.sha[..7]));
        // A commit given from outside says nothing about this tree.
        assert!(
            !detect_commit(Some("feedbeef"), &no_env, dir.path(), &[], DEFAULT_TIMEOUT)
                .unwrap()
                .dirty
        );
    }

    #[test]
    fn porcelain_status_table() {
        let cases = [
            ("", false),
            ("\n", false),
            (" M src/main.rs", true),
            ("M  k8s/app.yaml\n", true),
            ("D  old.yaml", true),
            ("R  a.yaml -> b.yaml", true),
            ("UU conflict.yaml", true),
        ];
        for (status, want) in cases {
            assert_eq!(porcelain_is_dirty(status), want, "{status:?}");
        }
    }

    #[test]
    fn dirty_is_kept_and_old_records_read_clean() {
        let dirty = CommitInfo {
            sha: "3a30e4b0000000000000000000000000000000000".into(),
            dirty: true,
            ..Default::default()
        };
        let json = serde_json::to_value(&dirty).unwrap();
        assert_eq!(json["dirty"], true);
        assert_eq!(serde_json::from_value::<CommitInfo>(json).unwrap(), dirty);
        let old: CommitInfo = serde_json::from_str(r#"{"sha": "3a30e4b"}"#).unwrap();
        assert!(!old.dirty);
        assert_eq!(old.label(), "3a30e4b");
        let clean = serde_json::to_value(&old).unwrap();
        assert!(clean.get("dirty").is_none(), "{clean}");
    }
}
