//! The rows a section measures and how they print: the goal beside the measured value.

use std::fmt::Write as _;

/// What a row says about its goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Miss,
    /// A figure shown for context, with no goal of its own.
    Info,
    /// The measurement could not be made (the reason is in the measured column).
    Skipped,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::Info => "info",
            Verdict::Skipped => "SKIPPED",
        }
    }

    /// PASS when `ok`, else MISS.
    pub fn of(ok: bool) -> Verdict {
        if ok { Verdict::Pass } else { Verdict::Miss }
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub metric: String,
    pub goal: String,
    pub measured: String,
    pub verdict: Verdict,
}

impl Row {
    pub fn goal(
        metric: impl Into<String>,
        goal: impl Into<String>,
        measured: impl Into<String>,
        ok: bool,
    ) -> Row {
        Row {
            metric: metric.into(),
            goal: goal.into(),
            measured: measured.into(),
            verdict: Verdict::of(ok),
        }
    }

    pub fn info(metric: impl Into<String>, measured: impl Into<String>) -> Row {
        Row {
            metric: metric.into(),
            goal: "-".into(),
            measured: measured.into(),
            verdict: Verdict::Info,
        }
    }

    pub fn skipped(metric: impl Into<String>, why: impl Into<String>) -> Row {
        Row {
            metric: metric.into(),
            goal: "-".into(),
            measured: format!("SKIPPED: {}", why.into()),
            verdict: Verdict::Skipped,
        }
    }
}

/// A section's table: metric | goal | measured | result.
pub fn render(rows: &[Row]) -> String {
    let width =
        |f: &dyn Fn(&Row) -> usize, title: usize| rows.iter().map(f).max().unwrap_or(0).max(title);
    let w_metric = width(&|r| r.metric.chars().count(), 6);
    let w_goal = width(&|r| r.goal.chars().count(), 4);
    let w_measured = width(&|r| r.measured.chars().count(), 8);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<w_metric$}  {:<w_goal$}  {:<w_measured$}  result",
        "metric", "goal", "measured"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "  {:<w_metric$}  {:<w_goal$}  {:<w_measured$}  {}",
            r.metric,
            r.goal,
            r.measured,
            r.verdict.word()
        );
    }
    out
}

/// Formats seconds with a precision that suits their size.
pub fn secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.3} s")
    } else {
        format!("{s:.1} s")
    }
}

pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The value at quantile `q` (0..=1) of sorted samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(samples: &[f64]) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The text of a failure for a row or a line: the error's own words, then its cause's, as
/// the bench has always printed them ("spawning ...: No such file or directory"). One level
/// only, and not when the error's words already end with its cause's (kube-sim's errors
/// print their cause themselves and also give it as their source).
pub fn why(err: &(dyn std::error::Error + 'static)) -> String {
    let text = err.to_string();
    match err.source().map(|cause| cause.to_string()) {
        Some(cause) if !text.ends_with(&cause) => format!("{text}: {cause}"),
        _ => text,
    }
}
