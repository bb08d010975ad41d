//! One script as a child process: its own process group, stdin closed, a clean environment,
//! output read line by line, a deadline, and a kill of the whole group (SIGTERM, then SIGKILL
//! after a grace) on timeout, on cancel, and for anything a script left running behind it.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::report::redact::Scrubber;
use crate::util::process_group::{GroupGuard, group_alive, signal_group};

/// Lines of output kept for the report when a script fails or warns.
pub const TAIL_LINES: usize = 20;
/// Grace between SIGTERM and SIGKILL when rollguard is cancelled: the whole rollback must fit
/// in the cancel budget, so a script gets at most this long to clean up.
pub const CANCEL_KILL_GRACE: Duration = Duration::from_secs(1);
/// How long output may still arrive after the process group is gone (a process that escaped
/// the group with setsid may hold the pipes open).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);
/// Between checks whether a signalled process group is gone.
const GROUP_POLL: Duration = Duration::from_millis(25);

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

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// How a script ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It exited by itself with this code.
    Exited(i32),
    /// It was ended by a signal it did not get from us.
    Signalled(i32),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// rollguard was cancelled (or ran out of time) and killed it.
    Stopped,
    /// It could not be started (no such program, working_dir missing, ...).
    NotStarted(String),
}

impl End {
    pub fn succeeded(&self) -> bool {
        matches!(self, End::Exited(0))
    }

    /// The exit code, when it exited by itself.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            End::Exited(code) => Some(*code),
            _ => None,
        }
    }

    /// "exited with code 3", "timed out after 1m", ... for messages.
    pub fn describe(&self, timeout: Duration) -> String {
        match self {
            End::Exited(code) => format!("exited with code {code}"),
            End::Signalled(sig) => format!("was killed by signal {sig}"),
            End::TimedOut => format!(
                "ran past its timeout of {} and was killed",
                crate::util::duration::format_duration(timeout)
            ),
            End::Stopped => "was stopped (rollguard was cancelled)".to_string(),
            End::NotStarted(why) => format!("could not be started: {why}"),
        }
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub end: End,
    pub elapsed: Duration,
    /// The last [`TAIL_LINES`] lines (stdout and stderr interleaved), secrets scrubbed.
    pub tail: Vec<String>,
    /// It exited but left processes running in its group; they were killed.
    pub left_processes: bool,
}

/// The last `n` lines.
#[derive(Debug)]
struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    fn push(&mut self, line: String) {
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
}

async fn read_lines(
    reader: impl AsyncRead + Unpin,
    stream: Stream,
    sender: mpsc::Sender<(Stream, String)>,
) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                let line = text.trim_end_matches(['\n', '\r']).to_string();
                if sender.send((stream, line)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs `spec` to its end. Every line of output is scrubbed of secret values, then given to
/// `on_line` as it comes. `stop` kills the script at once (SIGTERM, SIGKILL after at most
/// [`CANCEL_KILL_GRACE`]). Never panics; every way it can end is an [`End`].
pub async fn run(
    spec: &Spec,
    scrubber: &Scrubber,
    stop: &CancellationToken,
    on_line: &(dyn Fn(Stream, &str) + Sync),
) -> Outcome {
    let started = Instant::now();
    let mut tail = Tail {
        lines: VecDeque::new(),
    };
    let not_started = |why: String, started: Instant| Outcome {
        end: End::NotStarted(why),
        elapsed: started.elapsed(),
        tail: Vec::new(),
        left_processes: false,
    };
    let Some((program, args)) = spec.argv.split_first() else {
        return not_started("the command is empty".into(), started);
    };
    if stop.is_cancelled() {
        return Outcome {
            end: End::Stopped,
            elapsed: Duration::ZERO,
            tail: Vec::new(),
            left_processes: false,
        };
    }
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&spec.env)
        .current_dir(&spec.working_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that one signal reaches everything it starts.
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return not_started(
                format!(
                    "{program}: {e} (working_dir {})",
                    spec.working_dir.display()
                ),
                started,
            );
        }
    };
    let Some(pgid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        let _ = child.start_kill();
        return not_started("it exited before it could be watched".into(), started);
    };
    let mut guard = GroupGuard::new(pgid);
    let (sender, mut lines) = mpsc::channel::<(Stream, String)>(256);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(read_lines(out, Stream::Stdout, sender.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(read_lines(err, Stream::Stderr, sender.clone()));
    }
    drop(sender);
    let mut handle = |(stream, line): (Stream, String)| {
        let line = scrubber.scrub(&line);
        on_line(stream, &line);
        tail.push(line);
    };

    let deadline = started + spec.timeout;
    let mut lines_open = true;
    // Phase 1: until it exits, times out, or we are told to stop.
    let mut end = loop {
        tokio::select! {
            status = child.wait() => {
                break match status {
                    Ok(status) => exit_end(status),
                    Err(e) => End::NotStarted(format!("waiting for it failed: {e}")),
                };
            }
            _ = tokio::time::sleep_until(deadline) => break End::TimedOut,
            _ = stop.cancelled() => break End::Stopped,
            line = lines.recv(), if lines_open => match line {
                Some(line) => handle(line),
                None => lines_open = false,
            },
        }
    };
    // Phase 2: nothing of its group may survive it, whether it was killed or exited and left
    // background processes.
    let exited = matches!(end, End::Exited(_) | End::Signalled(_));
    let left_processes = exited && group_alive(pgid);
    if !exited || left_processes {
        let grace = if stop.is_cancelled() {
            spec.kill_grace.min(CANCEL_KILL_GRACE)
        } else {
            spec.kill_grace
        };
        signal_group(pgid, libc::SIGTERM);
        let killed_at = Instant::now() + grace;
        let mut reaped = exited;
        loop {
            if reaped && !group_alive(pgid) {
                break;
            }
            if Instant::now() >= killed_at {
                signal_group(pgid, libc::SIGKILL);
                if !reaped {
                    let _ = child.wait().await;
                }
                break;
            }
            tokio::select! {
                status = child.wait(), if !reaped => {
                    reaped = true;
                    if let (End::TimedOut | End::Stopped, Err(e)) = (&end, &status) {
                        tracing::debug!("waiting for a killed script: {e}");
                    }
                }
                _ = tokio::time::sleep(GROUP_POLL) => {}
                _ = stop.cancelled(), if !stop.is_cancelled() => {}
                line = lines.recv(), if lines_open => match line {
                    Some(line) => handle(line),
                    None => lines_open = false,
                },
            }
            // A cancel during the grace of a timeout shortens it.
            if stop.is_cancelled() && killed_at > Instant::now() + CANCEL_KILL_GRACE {
                signal_group(pgid, libc::SIGKILL);
                if !reaped {
                    let _ = child.wait().await;
                }
                break;
            }
        }
        if stop.is_cancelled() && end == End::TimedOut {
            end = End::Stopped;
        }
    }
    guard.done();
    drop(guard);
    // Phase 3: what is still in the pipes.
    let drain_until = Instant::now() + DRAIN_TIMEOUT;
    while lines_open {
        match tokio::time::timeout_at(drain_until, lines.recv()).await {
            Ok(Some(line)) => handle(line),
            Ok(None) | Err(_) => lines_open = false,
        }
    }
    Outcome {
        end,
        elapsed: started.elapsed(),
        tail: tail.lines.into_iter().collect(),
        left_processes,
    }
}

fn exit_end(status: std::process::ExitStatus) -> End {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => End::Exited(code),
        (None, Some(sig)) => End::Signalled(sig),
        (None, None) => End::Exited(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_words() {
        let t = Duration::from_secs(60);
        assert_eq!(End::Exited(3).describe(t), "exited with code 3");
        assert!(End::TimedOut.describe(t).contains("timeout of 1m"));
        assert!(End::Exited(0).succeeded() && !End::Exited(1).succeeded());
        assert_eq!(End::TimedOut.exit_code(), None);
    }

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
