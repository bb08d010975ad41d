//! Live per-target progress on stderr: redrawn lines on a terminal, concise periodic lines
//! otherwise (CI logs). ANSI codes only on a terminal and never with NO_COLOR.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::report::TargetOutcome;
use crate::util::duration::format_duration;

/// Progress of a wait, for the live display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitProgress {
    pub ready: usize,
    pub total: usize,
    /// The first object still in progress and why, e.g. "Deployment shop/web: 1/3 ready".
    pub waiting_for: Option<String>,
}

/// Where a target is.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    Queued,
    Connecting,
    Applying {
        done: usize,
        total: usize,
    },
    Waiting(WaitProgress),
    /// Rolling back (used by the rollback step).
    RollingBack(String),
    /// A script stage (or its rollback command) is running.
    Script(String),
    Finished {
        outcome: TargetOutcome,
        message: Option<String>,
    },
}

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

/// Terminal on stderr -> live; otherwise lines. Color unless NO_COLOR is set (any value).
pub fn detect_mode(env: &dyn Fn(&str) -> Option<String>) -> Mode {
    if std::io::stderr().is_terminal() {
        Mode::Live {
            color: env("NO_COLOR").is_none(),
        }
    } else {
        Mode::Lines
    }
}

/// Whether the final table may use color: only on a terminal stdout, never with NO_COLOR.
pub fn table_color(env: &dyn Fn(&str) -> Option<String>) -> bool {
    std::io::stdout().is_terminal() && env("NO_COLOR").is_none()
}

/// The words for a stage, without color.
pub fn describe_stage(stage: &Stage) -> String {
    match stage {
        Stage::Queued => "queued".into(),
        Stage::Connecting => "connecting".into(),
        Stage::Applying { done, total } => format!("applying {done}/{total}"),
        Stage::Waiting(p) => match &p.waiting_for {
            Some(w) => format!("waiting {}/{} ready; {w}", p.ready, p.total),
            None => format!("waiting {}/{} ready", p.ready, p.total),
        },
        Stage::RollingBack(what) => format!("rolling back: {what}"),
        Stage::Script(name) => format!("running script stage {name}"),
        Stage::Finished { outcome, message } => {
            let word = outcome_word(*outcome);
            match message {
                // "cancelled by SIGTERM", not "cancelled: cancelled by SIGTERM".
                Some(m) if m.starts_with(word) => m.clone(),
                Some(m) => format!("{word}: {m}"),
                None => word.to_string(),
            }
        }
    }
}

pub fn outcome_word(outcome: TargetOutcome) -> &'static str {
    match outcome {
        TargetOutcome::Deployed => "deployed",
        TargetOutcome::Failed => "failed",
        TargetOutcome::RolledBack => "rolled-back",
        TargetOutcome::RollbackFailed => "rollback-failed",
        TargetOutcome::Skipped => "skipped",
        TargetOutcome::Cancelled => "cancelled",
    }
}

fn colored(stage: &Stage, text: String) -> String {
    let code = match stage {
        Stage::Finished {
            outcome: TargetOutcome::Deployed | TargetOutcome::RolledBack,
            ..
        } => "32",
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
/// without a line per object).
fn worth_a_line(before: Option<&Stage>, now: &Stage) -> bool {
    match (before, now) {
        (Some(Stage::Applying { done: was, .. }), Stage::Applying { done, total }) => {
            let quarter = |n: usize| (n * 4).checked_div(*total).unwrap_or(0);
            done > was && (done == total || quarter(*done) > quarter(*was))
        }
        (Some(before), now) => std::mem::discriminant(before) != std::mem::discriminant(now),
        (None, _) => true,
    }
}

/// Cuts a line to `width` characters (live lines must not wrap, or redraw breaks).
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
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
pub fn start(targets: Vec<String>, mode: Mode) -> (Progress, JoinHandle<()>) {
    if mode == Mode::Quiet {
        return (Progress::quiet(), tokio::spawn(async {}));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(render(targets, mode, rx));
    (Progress { tx: Some(tx) }, handle)
}

async fn render(
    targets: Vec<String>,
    mode: Mode,
    mut rx: mpsc::UnboundedReceiver<(String, Stage)>,
) {
    let width_name = targets.iter().map(String::len).max().unwrap_or(4).max(4);
    let mut stages: HashMap<String, Stage> =
        targets.iter().map(|t| (t.clone(), Stage::Queued)).collect();
    let started = Instant::now();
    let (redraw_every, summary_every) = (Duration::from_millis(150), Duration::from_secs(10));
    let mut ticker = tokio::time::interval(match mode {
        Mode::Live { .. } => redraw_every,
        _ => summary_every,
    });
    ticker.tick().await;
    let mut drawn = 0usize;
    let mut dirty = true;
    let mut stderr = std::io::stderr();
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some((target, stage)) => {
                    if mode == Mode::Lines && worth_a_line(stages.get(&target), &stage) {
                        let elapsed = format_duration(started.elapsed());
                        let _ = writeln!(stderr, "[{elapsed:>6}] {target:<width_name$}  {}", super::redact::scrub(&describe_stage(&stage)));
                    }
                    stages.insert(target, stage);
                    dirty = true;
                }
                None => break,
            },
            _ = ticker.tick() => {
                match mode {
                    Mode::Live { color } if dirty => {
                        drawn = draw_live(&mut stderr, &targets, &stages, width_name, color, drawn);
                        dirty = false;
                    }
                    Mode::Lines => {
                        let elapsed = format_duration(started.elapsed());
                        for t in &targets {
                            if let Some(stage @ (Stage::Waiting(_) | Stage::Applying { .. } | Stage::RollingBack(_))) = stages.get(t) {
                                let _ = writeln!(stderr, "[{elapsed:>6}] {t:<width_name$}  {}", super::redact::scrub(&describe_stage(stage)));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if let Mode::Live { color } = mode {
        draw_live(&mut stderr, &targets, &stages, width_name, color, drawn);
    }
    let _ = stderr.flush();
}

fn draw_live(
    out: &mut impl Write,
    targets: &[String],
    stages: &HashMap<String, Stage>,
    width_name: usize,
    color: bool,
    previously_drawn: usize,
) -> usize {
    let mut frame = String::new();
    if previously_drawn > 0 {
        frame.push_str(&format!("\x1b[{previously_drawn}F"));
    }
    for t in targets {
        let stage = stages.get(t).cloned().unwrap_or(Stage::Queued);
        // Stage messages quote servers and pods: scrubbed of known secret values.
        let text = fit(&super::redact::scrub(&describe_stage(&stage)), 100);
        let text = if color { colored(&stage, text) } else { text };
        frame.push_str(&format!("\x1b[2K{t:<width_name$}  {text}\n"));
    }
    let _ = out.write_all(frame.as_bytes());
    let _ = out.flush();
    targets.len()
}

#[cfg(test)]
mod tests {
    use super::*;

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
                worth_a_line(before.as_ref(), &now),
                want,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[test]
    fn live_frame_redraws_in_place_and_plain_has_no_color() {
        let targets = vec!["eu".to_string(), "us".to_string()];
        let stages: HashMap<String, Stage> = [("eu".to_string(), Stage::Connecting)]
            .into_iter()
            .collect();
        let mut out = Vec::new();
        assert_eq!(draw_live(&mut out, &targets, &stages, 4, false, 2), 2);
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.starts_with("\x1b[2F"));
        assert!(text.contains("eu    connecting"));
        assert!(
            !text.contains("\x1b[3"),
            "no color codes when color is off: {text:?}"
        );
        assert_eq!(fit("abcdef", 4), "abc…");
    }
}
