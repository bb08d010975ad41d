//! One script as a child process, through the one runner (`util::runner`): a clean
//! environment, its own process group, a deadline and a kill of everything it started; here
//! only what is a script's own: its output is scrubbed of secret values before anything sees
//! it, and the last lines are kept for the report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::report::redact::Scrubber;
use crate::util::runner::{self, Capture, Env};
pub use crate::util::runner::{CANCEL_KILL_GRACE, End, Stream};

/// Lines of output kept for the report when a script fails or warns.
pub const TAIL_LINES: usize = 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub argv: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: BTreeMap<String, String>,
    pub working_dir: PathBuf,
    pub timeout: Duration,
    pub kill_grace: Duration,
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub end: End,
    pub elapsed: Duration,
    /// The last [`TAIL_LINES`] lines (stdout and stderr interleaved), secrets scrubbed, each
    /// cut at the runner's line cap.
    pub tail: Vec<String>,
    /// It exited but left processes running; they were killed.
    pub left_processes: bool,
}

/// Runs `spec` to its end. Every line of output is scrubbed of secret values, then given to
/// `on_line` as it comes. `stop` kills the script at once. Never panics.
pub async fn run(
    spec: &Spec,
    scrubber: &Scrubber,
    stop: &CancellationToken,
    on_line: &(dyn Fn(Stream, &str) + Sync),
) -> Outcome {
    let Some((program, args)) = spec.argv.split_first() else {
        return Outcome {
            end: End::NotStarted("the command is empty".into()),
            elapsed: Duration::ZERO,
            tail: Vec::new(),
            left_processes: false,
        };
    };
    let run_spec = runner::Spec {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        env: Env::Only(spec.env.clone()),
        dir: Some(spec.working_dir.clone()),
        timeout: spec.timeout,
        kill_grace: spec.kill_grace,
        stdout: Capture::Lines,
        stderr: Capture::Lines,
        tail_lines: TAIL_LINES,
    };
    // Text from a script is untrusted: scrubbed before the log, the tail and the report.
    let scrub = |line: &str| scrubber.scrub(line);
    let out = runner::run(&run_spec, stop, &scrub, on_line).await;
    Outcome {
        end: out.end,
        elapsed: out.elapsed,
        tail: out.tail,
        left_processes: out.left_processes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str, timeout: Duration) -> Spec {
        let mut env = BTreeMap::new();
        if let Ok(path) = std::env::var("PATH") {
            env.insert("PATH".to_string(), path);
        }
        env.insert("SECRET_ECHO".into(), "hunter2".into());
        Spec {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env,
            working_dir: std::env::temp_dir(),
            timeout,
            kill_grace: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn output_is_scrubbed_tailed_and_streamed() {
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"p": "hunter2"}});
        let scrubber = Scrubber::from_objects([&secret]);
        let seen = std::sync::Mutex::new(Vec::new());
        let on_line = |s: Stream, l: &str| {
            if let Ok(mut v) = seen.lock() {
                v.push(format!("{}:{l}", s.as_str()));
            }
        };
        let out = run(
            &spec(
                "for i in $(seq 1 25); do echo line $i; done; echo pw=$SECRET_ECHO >&2; exit 3",
                Duration::from_secs(30),
            ),
            &scrubber,
            &CancellationToken::new(),
            &on_line,
        )
        .await;
        assert_eq!(out.end, End::Exited(3));
        assert_eq!(out.tail.len(), TAIL_LINES);
        let pw = format!("pw={}", crate::report::redact::marker(b"hunter2"));
        assert_eq!(out.tail.last(), Some(&pw));
        let seen = seen.into_inner().unwrap_or_default();
        assert_eq!(seen.len(), 26);
        assert!(seen.contains(&format!("stderr:{pw}")));
        assert!(!seen.iter().any(|l| l.contains("hunter2")));
    }

    #[tokio::test]
    async fn missing_program_and_working_dir_are_not_started() {
        let mut s = spec("true", Duration::from_secs(5));
        s.working_dir = PathBuf::from("/nonexistent/dir");
        let out = run(
            &s,
            &Scrubber::default(),
            &CancellationToken::new(),
            &|_, _| {},
        )
        .await;
        assert!(matches!(out.end, End::NotStarted(ref why) if why.contains("/nonexistent/dir")));
    }

    #[tokio::test]
    async fn a_stopped_script_is_killed_with_its_group() {
        let stop = CancellationToken::new();
        stop.cancel();
        let out = run(
            &spec("sleep 30", Duration::from_secs(30)),
            &Scrubber::default(),
            &stop,
            &|_, _| {},
        )
        .await;
        assert_eq!(out.end, End::Stopped);
    }
}
