//! The top-level error of a rollguard run and the process exit codes.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::manifests::ManifestError;

/// Process exit codes (documented in the README).
pub mod exit {
    /// Every target deployed.
    pub const OK: i32 = 0;
    /// A target failed (and, with rollback, got back).
    pub const FAILED: i32 = 1;
    /// Bad input or configuration: nothing was applied anywhere.
    pub const BAD_INPUT: i32 = 2;
    /// A rollback failed.
    pub const ROLLBACK_FAILED: i32 = 3;
    /// An internal error (a bug): rollguard stopped where it was.
    pub const INTERNAL: i32 = 4;
    /// Cancelled by SIGINT or SIGTERM.
    pub const CANCELLED: i32 = 130;

    /// Every exit code and what it means, for every command: docs/exit-codes.md's table is
    /// [`markdown_table`] (a generated section; a test keeps the two equal).
    pub const TABLE: [(i32, &str); 6] = [
        (
            OK,
            "success: every target deployed, or the command did what it was asked on every target",
        ),
        (
            FAILED,
            "a target failed: apply error, fail-fast pod problem, timeout, unreachable cluster, credentials refused (401/403); `deploy --wave N`: a target of an earlier wave does not run this commit, or cannot be read (nothing was written); `diff --exit-code`: an error; `status`: a target unreachable, not healthy, not on its last good revision or drifted (`--drift`), or the targets on more than one commit",
        ),
        (
            BAD_INPUT,
            "bad input, found before anything was written anywhere: the config, a flag, a manifest, a manifest a server refused in the deploy's preflight dry run, a saved plan that is not this run's or no longer holds (`deploy --plan`), a target's kubeconfig, context or credentials file, a revision that does not exist (`show`, `rollback`) or that a rollback refuses, `deploy --wave N` with no commit to check the earlier waves against; `diff --exit-code`: there are changes",
        ),
        (
            ROLLBACK_FAILED,
            "a rollback failed (the automatic one of a deploy, or `rollback`)",
        ),
        (
            INTERNAL,
            "internal error (a bug): said in one line with its place; a panic in one target fails only that target (exit 1), elsewhere the run stops here; the locks it held are released",
        ),
        (CANCELLED, "cancelled (SIGINT / SIGTERM)"),
    ];

    /// The exit code of a command line clap refuses: bad input, but [`FAILED`] under
    /// `--exit-code`, where [`BAD_INPUT`] says "there are changes".
    pub fn refused_command_line(args: &[String]) -> i32 {
        if args.iter().any(|a| a == "--exit-code") {
            FAILED
        } else {
            BAD_INPUT
        }
    }

    /// [`TABLE`] as docs/exit-codes.md shows it.
    pub fn markdown_table() -> String {
        let mut out = String::from("| code | meaning |\n|---:|---|\n");
        for (code, meaning) in TABLE {
            out.push_str(&format!("| {code} | {meaning} |\n"));
        }
        out
    }
}

/// Says a panic as one line that names the place and asks for a report (not Rust's
/// "thread 'x' panicked" text). A panic in one target's task fails that target only (the
/// others go on, records and locks are settled); anywhere else the binary exits with
/// [`exit::INTERNAL`].
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "rollguard: internal error{location}: {message}. This is a bug: please report it with this line. Locks lapse by themselves after their lease; a record left pending is marked abandoned by the next run."
        );
    }));
}

/// Errors that end a run before or outside the per-target work (per-target failures go into
/// the report instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A flag or flag combination that cannot work.
    #[error("{0}")]
    Usage(String),
    #[error("cannot write the report to {}: {source}", path.display())]
    WriteReport {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("demo: {0}")]
    Demo(String),
    /// Reading another commit's manifests with git failed (`plan --offline`): git or the
    /// network, never bad input.
    #[error(transparent)]
    Git(#[from] crate::engine::reapply::ManifestsError),
    /// `plan --offline --against REF`: git cannot read the ref.
    #[error("--against {reference}: {source}. Name a commit, branch or tag of this repository")]
    Against {
        reference: String,
        #[source]
        source: crate::util::git::GitError,
    },
    /// `deploy --wave N` did not start: an earlier wave is not on this commit (exit 1: the
    /// clusters' state, not the input), or the deploy has no commit to check (exit 2).
    #[error(transparent)]
    WaveRefused(#[from] crate::engine::wave_gate::WaveRefused),
    /// A plan file that cannot be read, made or written (`diff --out`, `deploy --plan`).
    #[error(transparent)]
    SavedPlan(#[from] crate::engine::saved_plan::SavedPlanError),
    /// `deploy --plan`: the plan is not this run's, or the manifests moved since it was
    /// made; nothing was written anywhere.
    #[error("deploy --plan {}: refused, nothing was written anywhere:\n{}", path.display(), reasons.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n"))]
    PlanRefused { path: PathBuf, reasons: Vec<String> },
    /// Bad input under `--exit-code`, where 2 says "there are changes": exit 1.
    #[error(transparent)]
    UnderExitCode(Box<Error>),
    /// A blocking task of the run ended without an answer (the runtime is shutting down).
    #[error("internal error: {what} stopped: {source}")]
    Internal {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// The end of a blocking task that did not return: a panic goes on unwinding (`main` has
/// the hook's one line and exits [`exit::INTERNAL`]: a bug is never "bad input"), anything
/// else is an internal error.
pub fn join_failed(what: &'static str, e: tokio::task::JoinError) -> Error {
    match e.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(source) => Error::Internal { what, source },
    }
}

impl Error {
    /// The exit code for this error: input problems are 2 (nothing was applied).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) | Error::Manifest(_) | Error::Usage(_) => exit::BAD_INPUT,
            Error::PlanRefused { .. } => exit::BAD_INPUT,
            Error::SavedPlan(
                crate::engine::saved_plan::SavedPlanError::Write { .. }
                | crate::engine::saved_plan::SavedPlanError::Incomplete { .. },
            ) => exit::FAILED,
            Error::SavedPlan(_) => exit::BAD_INPUT,
            Error::WriteReport { .. }
            | Error::Demo(_)
            | Error::Git(_)
            | Error::Against { .. }
            | Error::UnderExitCode(_) => exit::FAILED,
            Error::Internal { .. } => exit::INTERNAL,
            Error::WaveRefused(crate::engine::wave_gate::WaveRefused::NoCommit { .. }) => {
                exit::BAD_INPUT
            }
            Error::WaveRefused(_) => exit::FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_says_the_exit_codes_of_the_code() {
        crate::util::generated_docs::assert_doc_section(
            "docs/exit-codes.md",
            "exit-codes",
            &exit::markdown_table(),
        );
        let mut codes: Vec<i32> = exit::TABLE.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), exit::TABLE.len(), "a code listed twice");
    }

    #[test]
    fn input_errors_exit_2() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
        assert_eq!(Error::Demo("x".into()).exit_code(), 1);
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let refused = exit::refused_command_line;
        assert_eq!(refused(&args(&["rollguard", "diff", "--bogus"])), 2);
        assert_eq!(
            refused(&args(&["rollguard", "diff", "--exit-code", "--bogus"])),
            1
        );
        // `deploy --wave N`: no commit to check is input (pass --commit); an earlier wave on
        // another commit is the clusters' state.
        use crate::engine::wave_gate::WaveRefused;
        assert_eq!(
            Error::from(WaveRefused::NoCommit { wave: 1 }).exit_code(),
            2
        );
        let behind = WaveRefused::Behind {
            wave: 1,
            behind: Vec::new(),
        };
        assert_eq!(Error::from(behind).exit_code(), 1);
        let under = Error::UnderExitCode(Box::new(Error::Usage("x".into())));
        assert_eq!(under.exit_code(), 1);
        assert_eq!(under.to_string(), "x");
    }
}
