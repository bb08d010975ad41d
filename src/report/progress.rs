//! Live per-target progress on stderr: redrawn lines, cut to the terminal's width, on a
//! terminal that can move the cursor; concise periodic lines otherwise (CI logs, pipes,
//! `TERM=dumb`). `NO_COLOR` turns colour off, not the redraw.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::report::TargetOutcome;
use crate::report::model::{clip_columns, display_width};
use crate::util::duration::format_duration;

mod fleet;
mod stage;

use fleet::LiveRow;
pub use stage::{Stage, WaitProgress, describe_stage};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Redraw one line per target (a terminal).
    Live { color: bool },
    /// A line per change and a periodic summary (CI logs, pipes).
    Lines,
    /// Nothing (tests of the library, `--quiet`).
    Quiet,
}

/// Live redrawn lines on a terminal that can move the cursor; plain lines otherwise. `TERM`
/// unset, empty or `dumb` means a terminal without cursor movement (an editor's shell, a
/// serial console). `NO_COLOR` (set and not empty, as no-color.org defines it) turns colour
/// off and nothing else.
pub fn decide_mode(stderr_is_terminal: bool, term: Option<&str>, no_color: Option<&str>) -> Mode {
    if stderr_is_terminal && capable(term) {
        Mode::Live {
            color: !no_color_set(no_color),
        }
    } else {
        Mode::Lines
    }
}

/// Whether output to a stream may use ANSI colour: a terminal that is not dumb, and no
/// `NO_COLOR`. The one rule for the progress view, the final table, diffs and log lines.
pub fn color_allowed(is_terminal: bool, term: Option<&str>, no_color: Option<&str>) -> bool {
    is_terminal && capable(term) && !no_color_set(no_color)
}

fn capable(term: Option<&str>) -> bool {
    !matches!(term, None | Some("" | "dumb"))
}

fn no_color_set(no_color: Option<&str>) -> bool {
    no_color.is_some_and(|v| !v.is_empty())
}

/// The mode for this process's stderr.
pub fn detect_mode(env: &dyn Fn(&str) -> Option<String>) -> Mode {
    decide_mode(
        std::io::stderr().is_terminal(),
        env("TERM").as_deref(),
        env("NO_COLOR").as_deref(),
    )
}

/// Whether the final table may use colour (it goes to stdout).
pub fn table_color(env: &dyn Fn(&str) -> Option<String>) -> bool {
    color_allowed(
        std::io::stdout().is_terminal(),
        env("TERM").as_deref(),
        env("NO_COLOR").as_deref(),
    )
}

/// Columns of the live view: the terminal's own width when it tells one, else `COLUMNS`, else
/// 80. Asked again at every redraw, so that a resized window is followed.
pub fn decide_width(terminal_columns: Option<u16>, columns_var: Option<&str>) -> usize {
    told(terminal_columns, columns_var).unwrap_or(80)
}

/// A size the terminal tells, else the one its variable (`COLUMNS`, `LINES`) says; zero is
/// no answer.
fn told(terminal: Option<u16>, var: Option<&str>) -> Option<usize> {
    terminal.filter(|&n| n > 0).map(usize::from).or_else(|| {
        var.and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
    })
}

/// Lines a live frame may take: the terminal's height (else `LINES`, else 24) but the line
/// the cursor rests on, so that drawing the frame never scrolls its first line away (the
/// cursor cannot go back above the screen to redraw it).
pub fn decide_room(terminal_rows: Option<u16>, lines_var: Option<&str>) -> usize {
    told(terminal_rows, lines_var)
        .unwrap_or(24)
        .saturating_sub(1)
}

/// The width stderr's terminal reports (TIOCGWINSZ), if it is one.
fn stderr_columns() -> Option<u16> {
    terminal_size(libc::STDERR_FILENO).map(|s| s.ws_col)
}

/// The height stderr's terminal reports, if it is one.
fn stderr_rows() -> Option<u16> {
    terminal_size(libc::STDERR_FILENO).map(|s| s.ws_row)
}

/// The width of the terminal stdout is (for the final table), None when it is not one.
pub fn stdout_columns() -> Option<usize> {
    terminal_size(libc::STDOUT_FILENO)
        .map(|s| s.ws_col)
        .filter(|&c| c > 0)
        .map(usize::from)
}

fn terminal_size(fd: libc::c_int) -> Option<libc::winsize> {
    // SAFETY: TIOCGWINSZ only writes a `winsize` into the struct we pass; the fd stays ours.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    ok.then_some(size)
}

fn colored(stage: &Stage, text: String) -> String {
    let code = match stage {
        Stage::Finished {
            outcome: TargetOutcome::Deployed | TargetOutcome::RolledBack,
            ..
        }
        | Stage::Planned { .. }
        | Stage::Healthy => "32",
        Stage::Finished {
            outcome: TargetOutcome::Skipped | TargetOutcome::Cancelled,
            ..
        } => "33",
        Stage::Finished { .. } => "31",
        _ => "36",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Whether a stage gets a line of its own in CI logs: a new kind of stage, or apply progress
/// that reached another quarter of the objects (so "applying 3/7" is counted as it goes
/// without a line per object). In a `fleet` (more targets than a summary names) only a
/// target's end gets a line, which says what it ended as and why: nine lines a target made a
/// 1,000-target log 9,000 lines (two for each of 999 targets rolled back by the policy), and
/// the periodic tally already counts the targets by stage.
fn worth_a_line(before: Option<&Stage>, now: &Stage, fleet: bool) -> bool {
    let news = || match (before, now) {
        (Some(Stage::Applying { done: was, .. }), Stage::Applying { done, total }) => {
            let quarter = |n: usize| (n * 4).checked_div(*total).unwrap_or(0);
            done > was && (done == total || quarter(*done) > quarter(*was))
        }
        (Some(before), now) => std::mem::discriminant(before) != std::mem::discriminant(now),
        (None, _) => true,
    };
    let ends = matches!(now, Stage::Finished { .. } | Stage::Planned { .. });
    (ends || !fleet) && news()
}

/// `text` padded with spaces to `width` display columns.
fn pad(text: &str, width: usize) -> String {
    let fill = width.saturating_sub(display_width(text));
    format!("{text}{}", " ".repeat(fill))
}

/// One live line: the name column, then the stage's words, together at most `width` columns.
fn live_line(target: &str, stage: &Stage, width_name: usize, width: usize, color: bool) -> String {
    // Stage messages quote servers and pods: scrubbed of known secret values.
    let words = super::redact::scrub(&describe_stage(stage)).replace(['\r', '\n', '\t'], " ");
    let head = format!("{}  ", pad(target, width_name));
    if display_width(&head) >= width {
        return clip_columns(target, width);
    }
    let text = clip_columns(&words, width - display_width(&head));
    let text = if color { colored(stage, text) } else { text };
    format!("{head}{text}")
}

/// The sending side, cloned into every target task.
#[derive(Clone)]
pub struct Progress {
    tx: Option<mpsc::UnboundedSender<(String, Stage)>>,
}

impl Progress {
    /// A sink that shows nothing.
    pub fn quiet() -> Self {
        Progress { tx: None }
    }

    pub fn update(&self, target: &str, stage: Stage) {
        if let Some(tx) = &self.tx {
            let _ = tx.send((target.to_string(), stage));
        }
    }
}

/// Starts the renderer for these targets. Drop every `Progress` clone, then await the handle.
/// Starts the progress view of `targets` (name, wave), in config order.
pub fn start(targets: Vec<(String, u32)>, mode: Mode) -> (Progress, JoinHandle<()>) {
    if mode == Mode::Quiet {
        return (Progress::quiet(), tokio::spawn(async {}));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(render(std::io::stderr(), targets, mode, rx));
    (Progress { tx: Some(tx) }, handle)
}

/// Draws the progress on `stderr`. Each batch of lines goes out in one write: formatted
/// straight into an unbuffered stderr, a line was ten system calls (100,000 in a
/// 1,000-target deploy), and a log line could land inside it.
async fn render(
    mut stderr: impl Write + Send,
    waved: Vec<(String, u32)>,
    mode: Mode,
    mut rx: mpsc::UnboundedReceiver<(String, Stage)>,
) {
    let rows = live_rows(&waved);
    let targets: Vec<String> = waved.into_iter().map(|(name, _)| name).collect();
    let width_name = targets
        .iter()
        .map(|t| display_width(t))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut stages: HashMap<String, Stage> =
        targets.iter().map(|t| (t.clone(), Stage::Queued)).collect();
    let fleet = targets.len() > fleet::SUMMARY_TARGETS;
    let started = Instant::now();
    let (redraw_every, summary_every) = (Duration::from_millis(150), Duration::from_secs(10));
    let mut ticker = tokio::time::interval(match mode {
        Mode::Live { .. } => redraw_every,
        _ => summary_every,
    });
    ticker.tick().await;
    let mut drawn = 0usize;
    let mut dirty = true;
    // The terminal's size, asked again at every redraw: a resized window is followed.
    let view = || {
        let var = |name: &str| std::env::var(name).ok();
        (
            decide_width(stderr_columns(), var("COLUMNS").as_deref()),
            decide_room(stderr_rows(), var("LINES").as_deref()),
        )
    };
    let line = |elapsed: &str, target: &str, stage: &Stage| {
        let text = super::redact::log_text(&describe_stage(stage));
        format!("[{elapsed:>6}] {target:<width_name$}  {text}\n")
    };
    loop {
        tokio::select! {
            msg = rx.recv() => {
                let Some(first) = msg else { break };
                // With it, every change already sent: one write for them all.
                let elapsed = format_duration(started.elapsed());
                let mut lines = String::new();
                let mut next = Some(first);
                while let Some((target, stage)) = next {
                    let worthy = mode == Mode::Lines
                        && worth_a_line(stages.get(&target), &stage, fleet)
                        && (stage != Stage::Healthy || fleet::others_live(&stages, &target));
                    if worthy {
                        lines.push_str(&line(&elapsed, &target, &stage));
                    }
                    stages.insert(target, stage);
                    dirty = true;
                    next = rx.try_recv().ok();
                }
                write_whole(&mut stderr, &lines);
            },
            _ = ticker.tick() => {
                match mode {
                    Mode::Live { color } if dirty => {
                        drawn = draw_live(&mut stderr, &rows, &stages, (width_name, view()), color, drawn);
                        dirty = false;
                    }
                    Mode::Lines => {
                        let elapsed = format_duration(started.elapsed());
                        let mut lines = String::new();
                        let (named, more) = fleet::under_way(&targets, &stages);
                        if more > 0 {
                            let tally = fleet::tally(targets.iter().filter_map(|t| stages.get(t)));
                            lines.push_str(&format!("[{elapsed:>6}] {tally}\n"));
                        }
                        for (t, stage) in named {
                            lines.push_str(&line(&elapsed, t, stage));
                        }
                        if more > 0 {
                            lines.push_str(&format!("[{elapsed:>6}] and {more} more under way\n"));
                        }
                        write_whole(&mut stderr, &lines);
                    }
                    _ => {}
                }
            }
        }
    }
    if let Mode::Live { color } = mode {
        draw_live(
            &mut stderr,
            &rows,
            &stages,
            (width_name, view()),
            color,
            drawn,
        );
    }
    let _ = stderr.flush();
}

/// Writes `text` in one call (nothing when it is empty).
fn write_whole(out: &mut impl Write, text: &str) {
    if !text.is_empty() {
        let _ = out.write_all(text.as_bytes());
    }
}

/// The live view's lines: the targets in config order, grouped by wave in wave order under a
/// heading each when there is more than one wave.
fn live_rows(targets: &[(String, u32)]) -> Vec<LiveRow> {
    let mut waves: Vec<u32> = targets.iter().map(|(_, w)| *w).collect();
    waves.sort_unstable();
    waves.dedup();
    if waves.len() <= 1 {
        return targets
            .iter()
            .map(|(name, _)| LiveRow::Target(name.clone()))
            .collect();
    }
    let mut rows = Vec::new();
    for wave in waves {
        rows.push(LiveRow::Wave(wave));
        rows.extend(
            targets
                .iter()
                .filter(|(_, w)| *w == wave)
                .map(|(name, _)| LiveRow::Target(name.clone())),
        );
    }
    rows
}

/// Draws a frame of the live view over the last one (`previously_drawn` lines), in
/// `(width_name, (width, room))`: every line cut to `width` columns, and no more lines than
/// `room` (past it, a tally of the fleet and the targets under way or failed).
fn draw_live(
    out: &mut impl Write,
    rows: &[LiveRow],
    stages: &HashMap<String, Stage>,
    (width_name, (width, room)): (usize, (usize, usize)),
    color: bool,
    previously_drawn: usize,
) -> usize {
    let mut frame = String::new();
    if previously_drawn > 0 {
        // Back to the first line of the last frame, and clear everything below it: a frame
        // drawn before a resize may have left longer lines behind.
        frame.push_str(&format!("\x1b[{previously_drawn}F\x1b[J"));
    }
    let lines = fleet::fit(rows, stages, room);
    for line in &lines {
        match line {
            fleet::FrameRow::Row(LiveRow::Wave(wave)) if color => {
                frame.push_str(&format!("\x1b[1mwave {wave}\x1b[0m"));
            }
            fleet::FrameRow::Row(LiveRow::Wave(wave)) => frame.push_str(&format!("wave {wave}")),
            fleet::FrameRow::Row(LiveRow::Target(t)) => {
                let stage = stages.get(t).cloned().unwrap_or(Stage::Queued);
                frame.push_str(&live_line(t, &stage, width_name, width, color));
            }
            fleet::FrameRow::Tally(tally) => frame.push_str(&clip_columns(tally, width)),
            fleet::FrameRow::More(n) => {
                frame.push_str(&clip_columns(
                    &format!("and {n} more under way or failed"),
                    width,
                ));
            }
        }
        frame.push('\n');
    }
    let _ = out.write_all(frame.as_bytes());
    let _ = out.flush();
    lines.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every write call it is given, kept apart.
    #[derive(Clone, Default)]
    struct Writes(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Write for Writes {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let mut writes = self.0.lock().expect("not poisoned");
            writes.push(String::from_utf8_lossy(data).into_owned());
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Lines go out whole, and the changes sent together in one write: a line in pieces is
    /// a system call per piece, and another writer's line could land inside it.
    #[tokio::test]
    async fn progress_lines_are_written_whole_and_together() {
        let (tx, rx) = mpsc::unbounded_channel();
        let targets = vec![("eu".to_string(), 0), ("us-east".to_string(), 0)];
        for (target, stage) in [
            ("eu", Stage::Connecting),
            ("us-east", Stage::Connecting),
            ("eu", Stage::Preflight),
        ] {
            tx.send((target.to_string(), stage))
                .expect("the renderer listens");
        }
        drop(tx);
        let writes = Writes::default();
        render(writes.clone(), targets, Mode::Lines, rx).await;
        let writes = writes.0.lock().expect("not poisoned").clone();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let lines: Vec<&str> = writes[0].lines().collect();
        assert_eq!(lines.len(), 3, "{writes:?}");
        for (line, (target, what)) in lines.iter().zip([
            ("eu     ", "connecting"),
            ("us-east", "connecting"),
            ("eu     ", "preflight: dry run of every object"),
        ]) {
            assert!(line.ends_with(&format!("] {target}  {what}")), "{line}");
        }
        assert!(writes[0].ends_with('\n'));
    }

    /// A healthy target gets a line while it waits for another; alone, its end follows at
    /// once and says more.
    #[tokio::test]
    async fn a_healthy_line_only_while_another_target_is_under_way() {
        let waiting = Stage::Waiting(WaitProgress {
            ready: 0,
            total: 2,
            waiting_for: None,
        });
        for (names, want) in [
            (vec!["eu"], vec!["eu    waiting 0/2 ready"]),
            (
                vec!["eu", "us"],
                vec![
                    "eu    waiting 0/2 ready",
                    "us    waiting 0/2 ready",
                    "eu    healthy, waiting for the other targets",
                ],
            ),
        ] {
            let (tx, rx) = mpsc::unbounded_channel();
            for name in &names {
                tx.send((name.to_string(), waiting.clone()))
                    .expect("the renderer listens");
            }
            tx.send(("eu".to_string(), Stage::Healthy))
                .expect("the renderer listens");
            drop(tx);
            let targets = names.iter().map(|n| (n.to_string(), 0)).collect();
            let writes = Writes::default();
            render(writes.clone(), targets, Mode::Lines, rx).await;
            let text = writes.0.lock().expect("not poisoned").concat();
            let lines: Vec<&str> = text.lines().map(|l| &l[9..]).collect();
            assert_eq!(lines, want, "{text}");
        }
    }

    /// A CI log: a line per change of stage and a summary every 10 s for a few targets; for a
    /// fleet, a line only when a target ends (nine lines a target before: 9,000 lines for
    /// 1,000), and a summary of the tally, the first ones under way and how many more (1,000
    /// lines every 10 s before).
    #[tokio::test(start_paused = true)]
    async fn a_fleets_log_is_its_ends_and_a_tally() {
        let n_fleet = fleet::SUMMARY_TARGETS + 30;
        // (targets, change lines, summary lines)
        for (n, want_changes, want_summary) in
            [(3, 3 * 4 + 1, 2), (n_fleet, 1, fleet::SUMMARY_TARGETS + 2)]
        {
            let (tx, rx) = mpsc::unbounded_channel();
            let targets: Vec<(String, u32)> = (0..n).map(|i| (format!("t{i}"), 0)).collect();
            let waiting = Stage::Waiting(WaitProgress {
                ready: 0,
                total: 2,
                waiting_for: None,
            });
            let applying = |done| Stage::Applying { done, total: 4 };
            for (t, _) in &targets {
                for stage in [Stage::Connecting, applying(0), applying(4), waiting.clone()] {
                    tx.send((t.clone(), stage)).expect("the renderer listens");
                }
            }
            let failed = Stage::Finished {
                outcome: TargetOutcome::Failed,
                message: Some("ImagePullBackOff".into()),
            };
            let last = format!("t{}", n - 1);
            tx.send((last.clone(), failed))
                .expect("the renderer listens");
            let writes = Writes::default();
            let renderer = tokio::spawn(render(writes.clone(), targets, Mode::Lines, rx));
            tokio::time::sleep(Duration::from_millis(10_500)).await;
            drop(tx);
            renderer.await.expect("the renderer ends");
            let writes = writes.0.lock().expect("not poisoned").clone();
            let [changes, summary] = writes.as_slice() else {
                panic!("the changes, then one summary: {writes:?}");
            };
            assert_eq!(changes.lines().count(), want_changes, "{changes}");
            assert!(
                changes.ends_with(&format!("] {last:<4}  failed: ImagePullBackOff\n")),
                "{changes}"
            );
            let lines: Vec<&str> = summary.lines().collect();
            assert_eq!(lines.len(), want_summary, "{summary}");
            assert!(
                lines.iter().all(|l| l.starts_with("[   10s] ")),
                "{summary}"
            );
            if n > fleet::SUMMARY_TARGETS {
                assert!(
                    lines[0].ends_with(&format!("] {n} targets: {} waiting, 1 failed", n - 1)),
                    "{}",
                    lines[0]
                );
                assert!(
                    lines[1].ends_with("] t0    waiting 0/2 ready"),
                    "{}",
                    lines[1]
                );
                assert!(lines[want_summary - 1].ends_with("] and 29 more under way"));
            } else {
                assert!(
                    lines[0].ends_with("] t0    waiting 0/2 ready"),
                    "{}",
                    lines[0]
                );
            }
        }
    }

    /// In a fleet a target's line is its end; a few targets get every change.
    #[test]
    fn a_fleet_gets_a_line_when_a_target_ends() {
        let waiting = Stage::Waiting(WaitProgress {
            ready: 0,
            total: 1,
            waiting_for: None,
        });
        let deployed = Stage::Finished {
            outcome: TargetOutcome::Deployed,
            message: None,
        };
        let rolling_back = Stage::RollingBack("v1".into());
        let cases = [
            (None, Stage::Connecting, true, false),
            (Some(Stage::Connecting), Stage::Preflight, true, false),
            (
                Some(Stage::Preflight),
                Stage::Applying { done: 0, total: 4 },
                true,
                false,
            ),
            (
                Some(Stage::Applying { done: 4, total: 4 }),
                waiting.clone(),
                true,
                false,
            ),
            (
                Some(waiting.clone()),
                Stage::baking(Duration::from_secs(30)),
                true,
                false,
            ),
            (
                Some(Stage::Connecting),
                Stage::Script("smoke".into()),
                true,
                false,
            ),
            (Some(waiting.clone()), deployed.clone(), true, true),
            (Some(waiting.clone()), rolling_back.clone(), true, false),
            (
                Some(rolling_back.clone()),
                rolling_back.clone(),
                false,
                false,
            ),
            (
                Some(Stage::Preflight),
                Stage::Planned { changes: 2 },
                true,
                true,
            ),
            (Some(deployed.clone()), deployed, false, false),
        ];
        for (before, now, few, fleet) in cases {
            assert_eq!(
                worth_a_line(before.as_ref(), &now, false),
                few,
                "{before:?} -> {now:?}"
            );
            assert_eq!(
                worth_a_line(before.as_ref(), &now, true),
                fleet,
                "{before:?} -> {now:?} in a fleet"
            );
        }
    }

    /// A frame taller than the terminal could not be redrawn in place: it keeps to the room,
    /// a tally first.
    #[test]
    fn a_live_frame_keeps_to_the_terminals_height() {
        let waved: Vec<(String, u32)> = (0..100).map(|i| (format!("t{i}"), i % 2)).collect();
        let rows = live_rows(&waved);
        let stages: HashMap<String, Stage> = waved
            .iter()
            .map(|(t, _)| (t.clone(), Stage::Connecting))
            .collect();
        let mut out = Vec::new();
        let drawn = draw_live(&mut out, &rows, &stages, (4, (40, 9)), false, 9);
        let text = String::from_utf8(out).expect("utf8");
        let text = text
            .strip_prefix("\x1b[9F\x1b[J")
            .expect("over the last frame");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(drawn, 9);
        assert_eq!(lines.len(), 9, "{text}");
        assert_eq!(lines[0], "100 targets: 100 connecting");
        assert_eq!(lines[1], "t0    connecting");
        assert_eq!(
            lines[2], "t2    connecting",
            "wave 0's first, in config order"
        );
        assert_eq!(lines[8], "and 93 more under way or failed");
        let mut out = Vec::new();
        assert_eq!(
            draw_live(&mut out, &rows, &stages, (4, (10, 9)), false, 0),
            9
        );
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.lines().all(|l| display_width(l) <= 10), "{text}");
    }

    #[test]
    fn the_live_view_groups_targets_by_wave_only_with_waves() {
        let t = |name: &str| LiveRow::Target(name.to_string());
        let waved = |list: &[(&str, u32)]| -> Vec<(String, u32)> {
            list.iter().map(|(n, w)| (n.to_string(), *w)).collect()
        };
        assert_eq!(
            live_rows(&waved(&[("eu", 0), ("us", 0)])),
            vec![t("eu"), t("us")]
        );
        assert_eq!(live_rows(&waved(&[("eu", 3)])), vec![t("eu")]);
        assert_eq!(
            live_rows(&waved(&[("us", 1), ("canary", 0), ("ap", 1), ("sa", 2)])),
            vec![
                LiveRow::Wave(0),
                t("canary"),
                LiveRow::Wave(1),
                t("us"),
                t("ap"),
                LiveRow::Wave(2),
                t("sa")
            ]
        );
        let mut frame = Vec::new();
        let stages = HashMap::new();
        let rows = live_rows(&waved(&[("eu", 1), ("canary", 0)]));
        assert_eq!(
            draw_live(&mut frame, &rows, &stages, (6, (80, 23)), false, 0),
            4
        );
        let text = String::from_utf8(frame).expect("utf-8");
        assert!(text.starts_with("wave 0\ncanary"), "{text:?}");
    }

    #[test]
    fn stage_words() {
        assert_eq!(
            describe_stage(&Stage::Applying { done: 3, total: 9 }),
            "applying 3/9"
        );
        let w = Stage::Waiting(WaitProgress {
            ready: 1,
            total: 4,
            waiting_for: Some("Deployment a/b: 0/2".into()),
        });
        assert_eq!(describe_stage(&w), "waiting 1/4 ready; Deployment a/b: 0/2");
        let f = Stage::Finished {
            outcome: TargetOutcome::Failed,
            message: Some("ImagePullBackOff".into()),
        };
        assert_eq!(describe_stage(&f), "failed: ImagePullBackOff");
        let c = Stage::Finished {
            outcome: TargetOutcome::Cancelled,
            message: Some("cancelled by SIGTERM".into()),
        };
        assert_eq!(describe_stage(&c), "cancelled by SIGTERM");
        let baking = |left_secs| {
            describe_stage(&Stage::Baking {
                left_secs,
                checks: None,
            })
        };
        assert_eq!(
            describe_stage(&Stage::baking_with(
                Duration::from_secs(5),
                Some("error-rate 0.02".into())
            )),
            "baking, 5s left; error-rate 0.02"
        );
        assert_eq!(baking(7), "baking, 7s left");
        assert_eq!(baking(0), "baking, 0s left");
        assert_eq!(baking(600), "baking, 10m left");
        assert_eq!(baking(90), "baking, 1m30s left");
        let rounded = |ms| Stage::baking(Duration::from_millis(ms));
        assert_eq!(
            rounded(6_200),
            Stage::Baking {
                left_secs: 7,
                checks: None
            }
        );
        assert_eq!(
            rounded(7_000),
            Stage::Baking {
                left_secs: 7,
                checks: None
            }
        );
        assert_eq!(
            rounded(1),
            Stage::Baking {
                left_secs: 1,
                checks: None
            }
        );
        assert_eq!(
            rounded(0),
            Stage::Baking {
                left_secs: 0,
                checks: None
            }
        );
    }

    /// The countdown ticks every second: CI logs get a line when the bake starts, then the
    /// periodic summary, not a line per second.
    #[test]
    fn a_bake_countdown_gets_one_line() {
        let baking = |left_secs| Stage::Baking {
            left_secs,
            checks: None,
        };
        let waiting = Stage::Waiting(WaitProgress {
            ready: 1,
            total: 1,
            waiting_for: None,
        });
        assert!(worth_a_line(Some(&waiting), &baking(10), false));
        assert!(!worth_a_line(Some(&baking(10)), &baking(9), false));
        assert!(worth_a_line(
            Some(&baking(1)),
            &Stage::Finished {
                outcome: TargetOutcome::Deployed,
                message: None
            },
            false
        ));
        let line = live_line("canary", &baking(7), 6, 80, true);
        assert_eq!(line, "canary  \x1b[36mbaking, 7s left\x1b[0m");
    }

    #[test]
    fn apply_progress_gets_a_line_per_quarter_and_at_the_end() {
        let applying = |done, total| Stage::Applying { done, total };
        let cases = [
            (None, applying(0, 7), true),
            (Some(Stage::Connecting), applying(0, 7), true),
            (Some(applying(0, 7)), applying(1, 7), false),
            (Some(applying(1, 7)), applying(2, 7), true),
            (Some(applying(2, 7)), applying(3, 7), false),
            (Some(applying(3, 7)), applying(4, 7), true),
            (Some(applying(6, 7)), applying(7, 7), true),
            (Some(applying(0, 2)), applying(1, 2), true),
            (Some(applying(0, 1)), applying(1, 1), true),
            (Some(applying(3, 3)), applying(3, 3), false),
            (Some(applying(0, 0)), applying(0, 0), false),
            (Some(applying(7, 7)), Stage::Connecting, true),
            (Some(Stage::Connecting), Stage::Connecting, false),
        ];
        for (before, now, want) in cases {
            assert_eq!(
                worth_a_line(before.as_ref(), &now, false),
                want,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[test]
    fn live_frame_redraws_in_place_and_plain_has_no_color() {
        let targets = live_rows(&[("eu".to_string(), 0), ("us".to_string(), 0)]);
        let stages: HashMap<String, Stage> = [("eu".to_string(), Stage::Connecting)]
            .into_iter()
            .collect();
        let mut out = Vec::new();
        assert_eq!(
            draw_live(&mut out, &targets, &stages, (4, (80, 23)), false, 2),
            2
        );
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.starts_with("\x1b[2F\x1b[J"), "{text:?}");
        assert!(text.contains("eu    connecting\n"), "{text:?}");
        assert!(
            !text.contains("\x1b[3"),
            "no color codes when color is off: {text:?}"
        );
        let mut out = Vec::new();
        draw_live(&mut out, &targets, &stages, (4, (80, 23)), true, 0);
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.starts_with("eu    \x1b[36mconnecting\x1b[0m\n"),
            "{text:?}"
        );
    }

    #[test]
    fn mode_from_terminal_term_and_no_color() {
        use Mode::*;
        // (stderr is a terminal, TERM, NO_COLOR) -> mode, colour allowed
        type Case = (bool, Option<&'static str>, Option<&'static str>, Mode, bool);
        let cases: [Case; 10] = [
            // (stderr is a terminal, TERM, NO_COLOR) -> mode, colour allowed
            (
                true,
                Some("xterm-256color"),
                None,
                Live { color: true },
                true,
            ),
            (true, Some("xterm"), Some("1"), Live { color: false }, false),
            // NO_COLOR set but empty does not count (no-color.org).
            (true, Some("xterm"), Some(""), Live { color: true }, true),
            (true, Some("dumb"), None, Lines, false),
            (true, Some("dumb"), Some("1"), Lines, false),
            (true, Some(""), None, Lines, false),
            (true, None, None, Lines, false),
            (false, Some("xterm"), None, Lines, false),
            (false, Some("xterm"), Some("1"), Lines, false),
            (false, None, None, Lines, false),
        ];
        for (tty, term, no_color, mode, color) in cases {
            assert_eq!(
                decide_mode(tty, term, no_color),
                mode,
                "{tty} {term:?} {no_color:?}"
            );
            assert_eq!(
                color_allowed(tty, term, no_color),
                color,
                "{tty} {term:?} {no_color:?}"
            );
        }
    }

    /// The width from the terminal, then `COLUMNS`, then 80; the room from the terminal, then
    /// `LINES`, then 24, less the cursor's line.
    #[test]
    fn size_from_the_terminal_then_its_variable_then_a_default() {
        let cases: [(Option<u16>, Option<&str>, usize, usize); 8] = [
            (Some(132), None, 132, 131),
            (Some(132), Some("60"), 132, 131),
            (Some(0), Some("60"), 60, 59),
            (None, Some(" 72 "), 72, 71),
            (None, Some("0"), 80, 23),
            (None, Some("wide"), 80, 23),
            (None, Some("-5"), 80, 23),
            (None, None, 80, 23),
        ];
        for (tty, var, width, room) in cases {
            assert_eq!(decide_width(tty, var), width, "{tty:?} {var:?}");
            assert_eq!(decide_room(tty, var), room, "{tty:?} {var:?}");
        }
    }

    #[test]
    fn a_live_line_never_exceeds_the_width() {
        let failed = Stage::Finished {
            outcome: TargetOutcome::Failed,
            message: Some(format!(
                "Deployment shop/web: ImagePullBackOff: {}",
                "x".repeat(200)
            )),
        };
        for width in [1, 5, 10, 40, 80, 200] {
            for color in [false, true] {
                for name in ["eu", "a-very-long-target-name-of-a-cluster", "東京"] {
                    let line = live_line(name, &failed, 6, width, color);
                    let plain = line.replace("\x1b[31m", "").replace("\x1b[0m", "");
                    assert!(
                        display_width(&plain) <= width,
                        "{name} at {width}: {} columns: {plain:?}",
                        display_width(&plain)
                    );
                    assert!(!plain.contains('\n'), "{plain:?}");
                }
            }
        }
        assert_eq!(
            live_line("eu", &failed, 4, 30, false),
            "eu    failed: Deployment shop…"
        );
        let multi = Stage::Script("smoke\nsecond line".into());
        assert_eq!(
            live_line("eu", &multi, 4, 80, false),
            "eu    running script stage smoke second line"
        );
    }
}
