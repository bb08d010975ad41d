//! The one way rollguard runs a child process: script stages, exec credential plugins, the
//! `render:` command and git all come through [`run`] (or [`run_blocking`]).
//!
//! Every child gets a deadline, its own process group (registered, so that a second signal
//! kills every group at once), stdin closed, and a marker in its environment
//! ([`MARKER_VAR`]) that whatever it starts inherits, so a grandchild that left the group
//! with `setsid` (and was adopted by rollguard, its child subreaper) is found and killed too.
//! Its output is read in bounded memory: a line is cut at [`LINE_CAP`] bytes, at most
//! [`SHOWN_CAP`] bytes of lines are handed on per run, and a byte capture stops the child past
//! its own cap; what was cut is said.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::util::bounded::size_text;
pub use crate::util::process_group::MARKER_VAR;
use crate::util::process_group::{
    GroupGuard, descendants, group_alive, marked, processes, reap_adopted, signal_group, signal_pid,
};

/// The longest line kept: the rest of a longer line is dropped (and counted).
pub const LINE_CAP: usize = 4 * 1024;
/// Bytes a line keeps past [`LINE_CAP`] until it has been through the transform: a secret
/// value that crosses the cut is scrubbed whole first, then the line is cut (cut first, the
/// value's first part would show).
pub const SCRUB_SLACK: usize = 16 * 1024;
/// Bytes of lines handed on (logged) per run; past it lines are only counted.
pub const SHOWN_CAP: u64 = 4 * 1024 * 1024;
/// Grace between SIGTERM and SIGKILL when rollguard is cancelled: the whole rollback must fit
/// in the cancel budget, so a child gets at most this long to clean up.
pub const CANCEL_KILL_GRACE: Duration = Duration::from_secs(1);
/// How long output may still arrive after the process group is gone (a process that escaped
/// the group may hold the pipes open until it is killed).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);
/// Between checks whether a signalled child and what it started are gone.
const POLL: Duration = Duration::from_millis(25);
/// How long [`sweep`] waits for killed processes that left the group to be gone.
const SWEEP_GRACE: Duration = Duration::from_secs(1);

/// The child's environment.
#[derive(Debug, Clone)]
pub enum Env {
    /// Exactly these variables (scripts: a clean environment).
    Only(BTreeMap<String, String>),
    /// rollguard's own, with these set on top (git, plugins, render).
    Inherit(Vec<(String, String)>),
}

/// What is kept of one pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Every byte, up to this many; past it the child is stopped ([`Output::overflowed`]).
    Bytes(usize),
    /// Line by line: handed to `on_line`, the last ones kept in [`Output::tail`].
    Lines,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Env,
    pub dir: Option<PathBuf>,
    pub timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    pub stdout: Capture,
    pub stderr: Capture,
    /// Lines kept in [`Output::tail`].
    pub tail_lines: usize,
}

impl Spec {
    /// `program args...` inheriting rollguard's environment, both pipes as lines.
    pub fn new(program: impl Into<PathBuf>, timeout: Duration) -> Spec {
        Spec {
            program: program.into(),
            args: Vec::new(),
            env: Env::Inherit(Vec::new()),
            dir: None,
            timeout,
            kill_grace: CANCEL_KILL_GRACE,
            stdout: Capture::Lines,
            stderr: Capture::Lines,
            tail_lines: 20,
        }
    }

    pub fn args<I, A>(mut self, args: I) -> Spec
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
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

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It exited by itself with this code.
    Exited(i32),
    /// It was ended by a signal it did not get from us.
    Signalled(i32),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// rollguard was cancelled (or a byte capture overflowed) and killed it.
    Stopped,
    /// It could not be started (no such program, working directory missing, ...).
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
pub struct Output {
    pub end: End,
    pub elapsed: Duration,
    /// A [`Capture::Bytes`] stdout (empty otherwise, and after an overflow).
    pub stdout: Vec<u8>,
    /// The same for stderr.
    pub stderr: Vec<u8>,
    /// The last [`Spec::tail_lines`] lines of the [`Capture::Lines`] pipes, interleaved, as
    /// `transform` made them, with the note of what was cut last.
    pub tail: Vec<String>,
    /// A [`Capture::Bytes`] pipe passed its cap: the child was stopped there.
    pub overflowed: bool,
    /// It exited but left processes running (in its group, or started by it); they were
    /// killed.
    pub left_processes: bool,
}

/// Splits bytes into lines of at most [`LINE_CAP`] + [`SCRUB_SLACK`] bytes; what a longer
/// line has beyond that is dropped and counted. Pure, so that every shape is tested by table.
#[derive(Debug, Default)]
pub struct LineSplitter {
    line: Vec<u8>,
    dropped: u64,
    open: bool,
}

/// One line read, and how many of its bytes were dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub cut: u64,
}

impl LineSplitter {
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Line>) {
        while !bytes.is_empty() {
            self.open = true;
            let (chunk, newline) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            let room = (LINE_CAP + SCRUB_SLACK).saturating_sub(self.line.len());
            let take = room.min(chunk.len());
            self.line.extend_from_slice(&chunk[..take]);
            self.dropped += (chunk.len() - take) as u64;
            bytes = &bytes[chunk.len() + usize::from(newline)..];
            if newline {
                out.push(self.take());
            }
        }
    }

    /// The last line, when the output did not end with a newline.
    pub fn finish(&mut self) -> Option<Line> {
        self.open.then(|| self.take())
    }

    fn take(&mut self) -> Line {
        let text = String::from_utf8_lossy(&self.line)
            .trim_end_matches('\r')
            .to_string();
        let line = Line {
            text,
            cut: self.dropped,
        };
        self.line.clear();
        self.dropped = 0;
        self.open = false;
        line
    }
}

/// A line as it is shown: through `transform` (the scrubber) first, then cut at
/// [`LINE_CAP`] with a note of what was dropped.
pub fn shown_line(line: &Line, transform: &(dyn Fn(&str) -> String + Sync)) -> String {
    let text = transform(&line.text);
    if text.len() <= LINE_CAP {
        return line_text(&Line {
            text,
            cut: line.cut,
        });
    }
    let mut end = LINE_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    line_text(&Line {
        text: text[..end].to_string(),
        cut: line.cut + (text.len() - end) as u64,
    })
}

/// What a cut line reads like: its first [`LINE_CAP`] bytes and a note.
pub fn line_text(line: &Line) -> String {
    if line.cut == 0 {
        return line.text.clone();
    }
    format!(
        "{} [rollguard cut this line at {}: {} more dropped]",
        line.text,
        size_text(LINE_CAP as u64),
        size_text(line.cut)
    )
}

/// The note after a run whose lines passed [`SHOWN_CAP`].
pub fn unshown_note(lines: u64, bytes: u64) -> Option<String> {
    (lines > 0).then(|| {
        format!(
            "[rollguard did not log {lines} more lines ({}) of this output: past its cap of {} per run]",
            size_text(bytes),
            size_text(SHOWN_CAP)
        )
    })
}

enum Chunk {
    Line(Stream, Line),
    Overflow,
}

async fn read_lines(mut pipe: impl AsyncRead + Unpin, stream: Stream, sender: mpsc::Sender<Chunk>) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 8192];
    let mut lines = Vec::new();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        splitter.push(&buf[..n], &mut lines);
        for line in lines.drain(..) {
            if sender.send(Chunk::Line(stream, line)).await.is_err() {
                return;
            }
        }
    }
    if let Some(line) = splitter.finish() {
        let _ = sender.send(Chunk::Line(stream, line)).await;
    }
}

/// All of `pipe` up to `max` bytes; past it, says so (the child is then stopped) and keeps
/// draining without keeping anything.
async fn read_bytes(
    mut pipe: impl AsyncRead + Unpin,
    max: usize,
    sender: mpsc::Sender<Chunk>,
) -> Option<Vec<u8>> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut over = false;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) if !over && kept.len() + n <= max => kept.extend_from_slice(&buf[..n]),
            Ok(_) => {
                if !over {
                    over = true;
                    kept = Vec::new();
                    let _ = sender.send(Chunk::Overflow).await;
                }
            }
        }
    }
    (!over).then_some(kept)
}

/// A marker value unique to one run of this rollguard: `<pid>-<n>`.
fn new_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn command(spec: &Spec, marker: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&spec.program);
    command.args(&spec.args);
    match &spec.env {
        Env::Only(vars) => {
            command.env_clear().envs(vars);
        }
        Env::Inherit(vars) => {
            command.envs(vars.iter().map(|(k, v)| (k, v)));
        }
    }
    command.env(MARKER_VAR, marker);
    if let Some(dir) = &spec.dir {
        command.current_dir(dir);
    }
    let piped = |_: Capture| Stdio::piped();
    command
        .stdin(Stdio::null())
        .stdout(piped(spec.stdout))
        .stderr(piped(spec.stderr))
        .kill_on_drop(true)
        // Its own group, so that one signal reaches everything it starts.
        .process_group(0);
    command
}

/// Everything still running that `pgid`'s leader `leader` started: its group, its
/// descendants in other groups, and whatever carries `marker` (orphans included).
fn signal_everything(pgid: i32, leader: Option<i32>, marker: &str, signal: i32) {
    signal_group(pgid, signal);
    if let Some(leader) = leader {
        for pid in descendants(leader, &processes()) {
            signal_pid(pid, signal);
        }
    }
    for p in marked(marker, false) {
        signal_pid(p.pid, signal);
    }
}

fn anything_alive(pgid: i32, marker: &str) -> bool {
    group_alive(pgid) || !marked(marker, false).is_empty()
}

/// Kills and reaps whatever still carries `marker` (a grandchild that left the group and
/// outlived its parent): SIGKILL, as its run is over. A killed process shows as running in
/// /proc until the kernel has torn it down, which on a busy machine takes a while: it looks
/// again every [`POLL`] until nothing is left, for at most [`SWEEP_GRACE`].
async fn sweep(marker: &str) {
    let me = std::process::id() as i32;
    let until = Instant::now() + SWEEP_GRACE;
    // Adopted ones become our zombies, which /proc no longer shows with the marker.
    let mut adopted = Vec::new();
    loop {
        let left = marked(marker, false);
        for p in &left {
            signal_pid(p.pid, libc::SIGKILL);
        }
        for p in left.iter().filter(|p| p.ppid == me) {
            if !adopted.contains(&p.pid) {
                adopted.push(p.pid);
            }
        }
        adopted.retain(|pid| !reap_adopted(*pid));
        if (left.is_empty() && adopted.is_empty()) || Instant::now() >= until {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What a run keeps of its line pipes: the lines shown so far (up to [`SHOWN_CAP`]), what was
/// not shown for the cap, the last `tail_lines` lines, and whether a pipe overflowed.
struct Lines<'a> {
    transform: &'a (dyn Fn(&str) -> String + Sync),
    on_line: &'a (dyn Fn(Stream, &str) + Sync),
    tail_lines: usize,
    tail: VecDeque<String>,
    shown: u64,
    unshown_lines: u64,
    unshown_bytes: u64,
    overflowed: bool,
}

impl<'a> Lines<'a> {
    fn new(
        spec: &Spec,
        transform: &'a (dyn Fn(&str) -> String + Sync),
        on_line: &'a (dyn Fn(Stream, &str) + Sync),
    ) -> Lines<'a> {
        Lines {
            transform,
            on_line,
            tail_lines: spec.tail_lines,
            tail: VecDeque::new(),
            shown: 0,
            unshown_lines: 0,
            unshown_bytes: 0,
            overflowed: false,
        }
    }

    fn take(&mut self, chunk: Chunk) {
        match chunk {
            Chunk::Overflow => self.overflowed = true,
            Chunk::Line(stream, line) => {
                let text = shown_line(&line, self.transform);
                self.shown += text.len() as u64;
                if self.shown <= SHOWN_CAP {
                    (self.on_line)(stream, &text);
                } else {
                    self.unshown_lines += 1;
                    self.unshown_bytes += text.len() as u64;
                }
                self.keep_in_tail(text);
            }
        }
    }

    fn keep_in_tail(&mut self, text: String) {
        if self.tail_lines == 0 {
            return;
        }
        if self.tail.len() == self.tail_lines {
            self.tail.pop_front();
        }
        self.tail.push_back(text);
    }

    /// Says (on stderr and in the tail) how much the cap kept from being shown.
    fn note_unshown(&mut self) {
        if let Some(note) = unshown_note(self.unshown_lines, self.unshown_bytes) {
            (self.on_line)(Stream::Stderr, &note);
            self.keep_in_tail(note);
        }
    }
}

/// The child's output as it comes: its pipes' chunks and whether any is still open.
struct Pipes {
    chunks: mpsc::Receiver<Chunk>,
    open: bool,
    byte_readers: Vec<(Stream, tokio::task::JoinHandle<Option<Vec<u8>>>)>,
}

impl Pipes {
    /// Starts a reader per captured pipe of `child`: lines go through the channel as they
    /// come, bytes are kept whole by their reader.
    fn read(child: &mut tokio::process::Child, spec: &Spec) -> Pipes {
        let (sender, chunks) = mpsc::channel::<Chunk>(256);
        let mut byte_readers = Vec::new();
        for (stream, capture) in [(Stream::Stdout, spec.stdout), (Stream::Stderr, spec.stderr)] {
            let pipe: Option<Box<dyn AsyncRead + Unpin + Send>> = match stream {
                Stream::Stdout => child.stdout.take().map(|p| Box::new(p) as _),
                Stream::Stderr => child.stderr.take().map(|p| Box::new(p) as _),
            };
            let Some(pipe) = pipe else { continue };
            match capture {
                Capture::Lines => {
                    tokio::spawn(read_lines(pipe, stream, sender.clone()));
                }
                Capture::Bytes(max) => {
                    byte_readers
                        .push((stream, tokio::spawn(read_bytes(pipe, max, sender.clone()))));
                }
            }
        }
        Pipes {
            chunks,
            open: true,
            byte_readers,
        }
    }

    /// What is still in the line pipes, until they close or `until`.
    async fn drain(&mut self, lines: &mut Lines<'_>, until: Instant) {
        while self.open {
            match tokio::time::timeout_at(until, self.chunks.recv()).await {
                Ok(Some(chunk)) => lines.take(chunk),
                Ok(None) | Err(_) => self.open = false,
            }
        }
    }

    /// The bytes the byte readers kept (waiting for them until `until`), and whether any
    /// of them gave up (too much output, or not done in time).
    async fn bytes(self, until: Instant) -> (Vec<u8>, Vec<u8>, bool) {
        let (mut stdout, mut stderr, mut cut) = (Vec::new(), Vec::new(), false);
        for (stream, reader) in self.byte_readers {
            let kept = match tokio::time::timeout_at(until, reader).await {
                Ok(Ok(kept)) => kept,
                _ => None,
            };
            cut |= kept.is_none();
            let kept = kept.unwrap_or_default();
            match stream {
                Stream::Stdout => stdout = kept,
                Stream::Stderr => stderr = kept,
            }
        }
        (stdout, stderr, cut)
    }
}

/// The process group a run started, and the marker its processes carry in their environment.
struct Group<'a> {
    pgid: i32,
    marker: &'a str,
}

/// The output of a run that never got a child to watch.
fn unwatched(end: End) -> Output {
    Output {
        end,
        elapsed: Duration::ZERO,
        stdout: Vec::new(),
        stderr: Vec::new(),
        tail: Vec::new(),
        overflowed: false,
        left_processes: false,
    }
}

/// Starts the child in its own process group, or says why it did not start.
fn spawn_in_group(spec: &Spec, marker: &str) -> Result<(tokio::process::Child, i32), End> {
    let mut child = match command(spec, marker).spawn() {
        Ok(child) => child,
        Err(e) => {
            let dir = spec
                .dir
                .as_ref()
                .map(|d| format!(" (working_dir {})", d.display()))
                .unwrap_or_default();
            return Err(End::NotStarted(format!(
                "{}: {e}{dir}",
                spec.program.display()
            )));
        }
    };
    let Some(pgid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        let _ = child.start_kill();
        return Err(End::NotStarted(
            "it exited before it could be watched".into(),
        ));
    };
    Ok((child, pgid))
}

/// Shows the child's lines until it exits, times out, overflows, or we are told to stop.
async fn wait_for_end(
    child: &mut tokio::process::Child,
    deadline: Instant,
    stop: &CancellationToken,
    pipes: &mut Pipes,
    lines: &mut Lines<'_>,
) -> End {
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => exit_end(status),
                    Err(e) => End::NotStarted(format!("waiting for it failed: {e}")),
                };
            }
            _ = tokio::time::sleep_until(deadline) => return End::TimedOut,
            _ = stop.cancelled() => return End::Stopped,
            chunk = pipes.chunks.recv(), if pipes.open => match chunk {
                Some(Chunk::Overflow) => { lines.take(Chunk::Overflow); return End::Stopped; }
                Some(chunk) => lines.take(chunk),
                None => pipes.open = false,
            },
        }
    }
}

/// Ends everything in the group: SIGTERM, then SIGKILL after the grace (shortened by a
/// stop), still showing lines meanwhile. `exited`: the leader is already reaped.
async fn end_group(
    child: &mut tokio::process::Child,
    group: &Group<'_>,
    exited: bool,
    spec: &Spec,
    stop: &CancellationToken,
    pipes: &mut Pipes,
    lines: &mut Lines<'_>,
) {
    let (pgid, marker) = (group.pgid, group.marker);
    let grace = if stop.is_cancelled() {
        spec.kill_grace.min(CANCEL_KILL_GRACE)
    } else {
        spec.kill_grace
    };
    let leader = (!exited).then_some(pgid);
    signal_everything(pgid, leader, marker, libc::SIGTERM);
    let killed_at = Instant::now() + grace;
    let mut reaped = exited;
    loop {
        if reaped && !anything_alive(pgid, marker) {
            break;
        }
        // A cancel during the grace of a timeout shortens it.
        let cut_short = stop.is_cancelled() && killed_at > Instant::now() + CANCEL_KILL_GRACE;
        if Instant::now() >= killed_at || cut_short {
            signal_everything(pgid, (!reaped).then_some(pgid), marker, libc::SIGKILL);
            if !reaped {
                let _ = child.wait().await;
            }
            break;
        }
        tokio::select! {
            _ = child.wait(), if !reaped => reaped = true,
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.cancelled(), if !stop.is_cancelled() => {}
            chunk = pipes.chunks.recv(), if pipes.open => match chunk {
                Some(chunk) => lines.take(chunk),
                None => pipes.open = false,
            },
        }
    }
}

/// Runs `spec` to its end. Each line of a [`Capture::Lines`] pipe is cut at [`LINE_CAP`],
/// passed through `transform` (scripts: the secret scrubber), then given to `on_line` as it
/// comes, up to [`SHOWN_CAP`] bytes. `stop` kills the child at once (SIGTERM, SIGKILL after
/// at most [`CANCEL_KILL_GRACE`]). Never panics; every way it can end is an [`End`].
pub async fn run(
    spec: &Spec,
    stop: &CancellationToken,
    transform: &(dyn Fn(&str) -> String + Sync),
    on_line: &(dyn Fn(Stream, &str) + Sync),
) -> Output {
    let started = Instant::now();
    if stop.is_cancelled() {
        return unwatched(End::Stopped);
    }
    let marker = new_marker();
    let (mut child, pgid) = match spawn_in_group(spec, &marker) {
        Ok(spawned) => spawned,
        Err(end) => return unwatched(end),
    };
    // Held across every await below: if this future is dropped, the group is killed.
    let mut guard = GroupGuard::new(pgid);
    let mut pipes = Pipes::read(&mut child, spec);
    let mut lines = Lines::new(spec, transform, on_line);
    let deadline = started + spec.timeout;
    let mut end = wait_for_end(&mut child, deadline, stop, &mut pipes, &mut lines).await;
    // Nothing it started may survive it, whether it was killed or exited and left
    // processes behind.
    let exited = matches!(end, End::Exited(_) | End::Signalled(_));
    let left_processes = exited && anything_alive(pgid, &marker);
    if !exited || left_processes {
        let group = Group {
            pgid,
            marker: &marker,
        };
        end_group(
            &mut child, &group, exited, spec, stop, &mut pipes, &mut lines,
        )
        .await;
        if stop.is_cancelled() && end == End::TimedOut {
            end = End::Stopped;
        }
    }
    // Whatever left the group and outlived its parent (adopted by rollguard) goes too.
    sweep(&marker).await;
    guard.done();
    drop(guard);
    let drain_until = Instant::now() + DRAIN_TIMEOUT;
    pipes.drain(&mut lines, drain_until).await;
    lines.note_unshown();
    let (stdout, stderr, cut) = pipes.bytes(drain_until).await;
    Output {
        end,
        elapsed: started.elapsed(),
        stdout,
        stderr,
        tail: lines.tail.into_iter().collect(),
        overflowed: lines.overflowed || cut,
        left_processes,
    }
}

thread_local! {
    /// The deadline of the blocking work on this thread (see [`within`]).
    static UNTIL: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with every blocking child it starts on this thread ([`run_blocking`]: git, a
/// `render:` command) due by `until` at the latest: how a rollback's git fallback stays in
/// the cancel budget.
pub fn within<T>(until: Option<std::time::Instant>, f: impl FnOnce() -> T) -> T {
    let before = UNTIL.with(|u| u.replace(until));
    let result = f();
    UNTIL.with(|u| u.set(before));
    result
}

/// `timeout`, shortened to what is left before this thread's [`within`] deadline.
pub fn capped(timeout: Duration) -> Duration {
    match UNTIL.with(std::cell::Cell::get) {
        Some(until) => timeout.min(until.saturating_duration_since(std::time::Instant::now())),
        None => timeout,
    }
}

/// [`run`] for sync code (git, `render:`): on a thread of its own with a small runtime, so it
/// works from any thread that may block (a `spawn_blocking` thread, a test, `main`).
pub fn run_blocking(spec: &Spec, transform: &(dyn Fn(&str) -> String + Sync)) -> Output {
    let stop = CancellationToken::new();
    let failed = |why: String| Output {
        end: End::NotStarted(why),
        elapsed: Duration::ZERO,
        stdout: Vec::new(),
        stderr: Vec::new(),
        tail: Vec::new(),
        overflowed: false,
        left_processes: false,
    };
    let mut spec = spec.clone();
    spec.timeout = capped(spec.timeout);
    let spec = &spec;
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime for it: {e}"))?;
            Ok::<_, String>(runtime.block_on(run(spec, &stop, transform, &|_, _| {})))
        });
        match worker.join() {
            Ok(Ok(output)) => output,
            Ok(Err(why)) => failed(why),
            Err(_) => failed("its runner thread panicked".into()),
        }
    })
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

    #[test]
    fn lines_are_split_and_cut_table() {
        const KEPT: usize = LINE_CAP + SCRUB_SLACK;
        let long = vec![b'x'; KEPT + 10];
        // (chunks read, (length, bytes cut) of each line)
        type Case<'a> = (Vec<&'a [u8]>, Vec<(usize, u64)>);
        let cases: Vec<Case> = vec![
            (vec![b"a\nbc\n"], vec![(1, 0), (2, 0)]),
            (vec![b"a", b"b\nc"], vec![(2, 0), (1, 0)]),
            (vec![b"\r\n"], vec![(0, 0)]),
            (vec![&long, b"\nz\n"], vec![(KEPT, 10), (1, 0)]),
            (vec![&long[..KEPT], &long[..10]], vec![(KEPT, 10)]),
            (vec![b""], vec![]),
        ];
        for (chunks, want) in cases {
            let mut splitter = LineSplitter::default();
            let mut lines = Vec::new();
            for chunk in &chunks {
                splitter.push(chunk, &mut lines);
            }
            lines.extend(splitter.finish());
            let got: Vec<(usize, u64)> = lines.iter().map(|l| (l.text.len(), l.cut)).collect();
            assert_eq!(got, want, "{chunks:?}");
        }
    }

    #[test]
    fn a_secret_across_the_cut_is_scrubbed_before_the_line_is_cut() {
        let secret = "s3cr3t-".repeat(40);
        let scrub = |t: &str| t.replace(&secret, "<redacted>");
        // The value starts 100 bytes before the cut and ends well after it.
        let text = format!("{}{secret}{}", "x".repeat(LINE_CAP - 100), "y".repeat(50));
        let shown = shown_line(&Line { text, cut: 0 }, &scrub);
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        // Longer than the cap after scrubbing: cut, with the note.
        let long = shown_line(
            &Line {
                text: "z".repeat(LINE_CAP + 7),
                cut: 3,
            },
            &|t: &str| t.to_string(),
        );
        assert!(long.starts_with(&"z".repeat(LINE_CAP)), "{long}");
        assert!(long.contains("10 bytes more dropped"), "{long}");
    }

    #[test]
    fn cut_notes() {
        let cut = line_text(&Line {
            text: "abc".into(),
            cut: 5 * 1024 * 1024,
        });
        assert!(
            cut.starts_with("abc [rollguard cut this line at 4 KiB"),
            "{cut}"
        );
        assert!(cut.contains("5 MiB more dropped"), "{cut}");
        assert_eq!(unshown_note(0, 0), None);
        let note = unshown_note(3, 2048).unwrap_or_default();
        assert!(
            note.contains("3 more lines") && note.contains("4 MiB per run"),
            "{note}"
        );
    }

    fn sh(script: &str, timeout: Duration) -> Spec {
        let mut spec = Spec::new("sh", timeout).args(["-c", script]);
        spec.kill_grace = Duration::from_millis(200);
        spec
    }

    #[tokio::test]
    async fn a_huge_line_stays_bounded() {
        let spec = sh(
            "head -c 3000000 /dev/zero | tr '\\0' y; echo; echo after",
            Duration::from_secs(30),
        );
        let seen = std::sync::Mutex::new(Vec::new());
        let out = run(
            &spec,
            &CancellationToken::new(),
            &|l| l.to_string(),
            &|_, l| {
                if let Ok(mut v) = seen.lock() {
                    v.push(l.len());
                }
            },
        )
        .await;
        assert_eq!(out.end, End::Exited(0));
        assert!(out.tail[0].len() < LINE_CAP + 200, "{}", out.tail[0].len());
        assert!(out.tail[0].contains("rollguard cut this line"));
        assert_eq!(out.tail[1], "after");
    }

    #[tokio::test]
    async fn bytes_past_the_cap_stop_the_child() {
        let mut spec = sh("yes", Duration::from_secs(30));
        spec.stdout = Capture::Bytes(1000);
        let out = run(
            &spec,
            &CancellationToken::new(),
            &|l| l.to_string(),
            &|_, _| {},
        )
        .await;
        assert!(out.overflowed);
        assert!(out.stdout.is_empty());
    }

    #[tokio::test]
    async fn a_setsid_grandchild_is_killed_with_its_parent() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pidfile = dir.path().join("pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {}; trap \"\" TERM; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & sleep 30",
            pidfile.display()
        );
        let spec = sh(&script, Duration::from_millis(800));
        let out = run(
            &spec,
            &CancellationToken::new(),
            &|l| l.to_string(),
            &|_, _| {},
        )
        .await;
        assert_eq!(out.end, End::TimedOut);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(pid > 1, "the grandchild wrote its pid");
        let alive = processes().iter().any(|p| p.pid == pid && p.running());
        assert!(!alive, "grandchild {pid} survived");
    }

    #[test]
    fn blocking_runs_outside_a_runtime() {
        let mut spec = Spec::new("sh", Duration::from_secs(10)).args(["-c", "printf hi"]);
        spec.stdout = Capture::Bytes(100);
        let out = run_blocking(&spec, &|l| l.to_string());
        assert_eq!(out.end, End::Exited(0));
        assert_eq!(out.stdout, b"hi");
    }
}
