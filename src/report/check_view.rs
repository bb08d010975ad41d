//! How the checks of a target (`checks:`, issue 23) read in the final table and in the
//! markdown of the PR comment and step summary: a short verdict, one line per check, and for a
//! Prometheus check a Mermaid `xychart-beta` chart of its values over the bake with its
//! threshold as a second line.
//!
//! Check names are config, but notes, sources and messages come from a cluster or a check
//! source: in markdown every one goes through [`super::escape`]; a chart holds only numbers,
//! fixed words and the name through [`mermaid`], so nothing can end its block or its details.

use std::fmt::Write as _;

use super::escape::{code, html_text, mermaid, text};
use super::model::{CheckKind, CheckReport, CheckSample, CheckVerdict, TargetReport, clip};

/// Points drawn per chart at most: a long bake at a short interval is bucketed, each bucket
/// drawn by its worst value, so that a spike stays visible and the comment stays small.
pub const MAX_POINTS: usize = 60;

/// Characters of a check's message, note or source in markdown.
const NOTE_CHARS: usize = 300;
const SOURCE_CHARS: usize = 500;

/// A value as people read it: at most `digits` significant digits, no exponent, no trailing
/// zeros ("0.043", "1250", "0.00012"); "NaN" and "inf" as such.
pub fn format_value(v: f64, digits: i32) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(0, 15) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".to_string() } else { s }
}

/// The comparison operator `fail_if` starts with (`>`, `>=`, `<`, `<=`, `==`, `!=`).
fn operator(fail_if: &str) -> Option<&'static str> {
    let s = fail_if.trim_start();
    [">=", "<=", "==", "!=", ">", "<"]
        .into_iter()
        .find(|op| s.starts_with(op))
}

/// How a threshold reads in words: "fails above 0.01".
fn threshold_words(c: &CheckReport) -> Option<String> {
    let t = c.threshold.filter(|t| t.is_finite())?;
    let words = match c.fail_if.as_deref().and_then(operator) {
        Some(">") => "fails above",
        Some(">=") => "fails at or above",
        Some("<") => "fails below",
        Some("<=") => "fails at or below",
        Some("==") => "fails at",
        Some("!=") => "fails unless",
        _ => "threshold",
    };
    Some(format!("{words} {}", format_value(t, 6)))
}

/// The sample that failed the check: the last failing one.
fn failing_sample(c: &CheckReport) -> Option<&CheckSample> {
    c.samples
        .iter()
        .rev()
        .find(|s| s.verdict == CheckVerdict::Failed)
}

/// Why a failed check failed, in short: "0.043 > 0.01" (Prometheus), "status 503" (HTTP),
/// "no value" (a failing sample without one: no data or an error under `fail`).
fn failed_short(c: &CheckReport) -> Option<String> {
    let s = failing_sample(c)?;
    Some(match (c.kind, s.value.filter(|v| v.is_finite())) {
        (_, None) => "no value".to_string(),
        (CheckKind::Http, Some(v)) => format!("status {}", format_value(v, 6)),
        (CheckKind::Prometheus, Some(v)) => match &c.fail_if {
            Some(cond) => format!("{} {}", format_value(v, 4), one_line(cond.trim())),
            None => format_value(v, 4),
        },
    })
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// The short verdict of a target's checks, for the final table: "2 passed",
/// "error-rate failed (0.043 > 0.01), 1 passed", "healthz inconclusive"; None without checks.
pub fn short_verdict(checks: &[CheckReport]) -> Option<String> {
    if checks.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for c in checks.iter().filter(|c| c.verdict == CheckVerdict::Failed) {
        let name = one_line(&c.name);
        parts.push(match failed_short(c) {
            Some(why) => format!("{name} failed ({why})"),
            None => format!("{name} failed"),
        });
    }
    for c in checks
        .iter()
        .filter(|c| c.verdict == CheckVerdict::Inconclusive)
    {
        parts.push(format!("{} inconclusive", one_line(&c.name)));
    }
    let count = |v: CheckVerdict| checks.iter().filter(|c| c.verdict == v).count();
    for (verdict, words) in [
        (CheckVerdict::Passed, "passed"),
        (CheckVerdict::NotRun, "not run"),
    ] {
        let n = count(verdict);
        if n > 0 {
            parts.push(format!("{n} {words}"));
        }
    }
    Some(parts.join(", "))
}

/// Whether a failure of the target (the `AnalysisFailed` failure the check raised) or its
/// message already says `message`, so that it is said once in full, not twice.
fn said_by_a_failure(t: &TargetReport, message: &str) -> bool {
    t.failures.iter().any(|f| f.message.contains(message))
        || t.message.as_deref().is_some_and(|m| m.contains(message))
}

/// The last note of a check's samples ("no data", "Prometheus answered 503").
fn last_note(c: &CheckReport) -> Option<&str> {
    c.samples.iter().rev().find_map(|s| s.note.as_deref())
}

/// Lines for the terminal's details block: a failed check's message when no failure says it,
/// and why a check was inconclusive. Plain text (the terminal shows it as it is, on one line).
pub fn terminal_details(t: &TargetReport) -> Vec<String> {
    let mut lines = Vec::new();
    for c in &t.checks {
        match c.verdict {
            CheckVerdict::Failed => {
                if let Some(m) = c.message.as_deref().filter(|m| !said_by_a_failure(t, m)) {
                    lines.push(format!("check {}: failed: {}", c.name, m));
                }
            }
            CheckVerdict::Inconclusive => {
                let why = last_note(c).unwrap_or("no value");
                lines.push(format!("check {}: inconclusive: {why}", c.name));
            }
            CheckVerdict::Passed | CheckVerdict::NotRun => {}
        }
    }
    lines.into_iter().map(|l| one_line(&l)).collect()
}

/// An HTTP check's results counted by status, most frequent first: "12 × 200, 1 × 503";
/// results without a status are "n × no answer".
pub fn http_counts(c: &CheckReport) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut none = 0;
    for s in &c.samples {
        match s.value.filter(|v| v.is_finite()) {
            Some(v) => {
                let status = format_value(v, 6);
                match counts.iter_mut().find(|(k, _)| *k == status) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((status, 1)),
                }
            }
            None => none += 1,
        }
    }
    // Most frequent first; a tie in order of first appearance (the sort is stable).
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(status, n)| format!("{n} × {status}"))
        .collect();
    if none > 0 {
        parts.push(format!("{none} × no answer"));
    }
    if parts.is_empty() {
        "no results".to_string()
    } else {
        parts.join(", ")
    }
}

fn verdict_icon(v: CheckVerdict) -> &'static str {
    match v {
        CheckVerdict::Passed => "✅",
        CheckVerdict::Failed => "❌",
        CheckVerdict::Inconclusive => "❔",
        CheckVerdict::NotRun => "⏭️",
    }
}

fn verdict_word(v: CheckVerdict) -> &'static str {
    match v {
        CheckVerdict::Passed => "passed",
        CheckVerdict::Failed => "failed",
        CheckVerdict::Inconclusive => "inconclusive",
        CheckVerdict::NotRun => "not run",
    }
}

/// The verdict of a target's checks for a `<summary>`: "checks: 2 passed".
pub fn summary_suffix(t: &TargetReport) -> String {
    short_verdict(&t.checks)
        .map(|v| format!(" · checks: {}", html_text(&clip(&v, 200))))
        .unwrap_or_default()
}

/// Prometheus checks of a target that get a chart.
pub fn charted(t: &TargetReport) -> usize {
    t.checks.iter().filter(|c| chart(c).is_some()).count()
}

/// A target's checks in markdown: one line per check, then, with `charts`, each Prometheus
/// check's chart in a `<details>` (open when the check failed). Empty without checks.
pub fn markdown(t: &TargetReport, charts: bool) -> String {
    if t.checks.is_empty() {
        return String::new();
    }
    let mut out = String::from("**Checks:**\n\n");
    for c in &t.checks {
        check_line(&mut out, t, c, charts);
    }
    out.push('\n');
    if charts {
        for c in &t.checks {
            if let Some(chart) = chart(c) {
                chart_details(&mut out, c, &chart);
            }
        }
    }
    out
}

/// "- ❌ `error-rate` failed (0.043 > 0.01 at 08:00:40): 8 sample(s), fails if `> 0.01`", then
/// a message no failure says, the last note of a check that did not pass, and the source
/// where no chart shows it.
fn check_line(out: &mut String, t: &TargetReport, c: &CheckReport, charts: bool) {
    let _ = write!(
        out,
        "- {} `{}` {}",
        verdict_icon(c.verdict),
        code(&c.name),
        verdict_word(c.verdict)
    );
    if c.verdict == CheckVerdict::Failed
        && let Some(why) = failed_short(c)
    {
        let at = failing_sample(c)
            .map(|s| format!(" at {}", s.time.strftime("%H:%M:%S")))
            .unwrap_or_default();
        let _ = write!(out, " ({}{at})", text(&why));
    }
    match c.kind {
        CheckKind::Http => {
            let _ = write!(out, ": {}", text(&http_counts(c)));
        }
        CheckKind::Prometheus => {
            let values = c.samples.iter().filter(|s| s.value.is_some()).count();
            let _ = write!(out, ": {} sample(s)", c.samples.len());
            if values < c.samples.len() {
                let _ = write!(out, ", {} without a value", c.samples.len() - values);
            }
            if let Some(cond) = &c.fail_if {
                let _ = write!(out, ", fails if `{}`", code(cond));
            }
        }
    }
    if let Some(m) = c.message.as_deref().filter(|m| !said_by_a_failure(t, m)) {
        let _ = write!(out, " · {}", text(&clip(m, NOTE_CHARS)));
    }
    if c.verdict != CheckVerdict::Passed
        && let Some(note) = last_note(c)
    {
        let _ = write!(out, " · last note: {}", text(&clip(note, NOTE_CHARS)));
    }
    let charted = charts && chart(c).is_some();
    if !charted && !c.source.is_empty() {
        let _ = write!(out, " · `{}`", code(&clip(&c.source, SOURCE_CHARS)));
    }
    out.push('\n');
}

fn chart_details(out: &mut String, c: &CheckReport, chart: &str) {
    let open = if c.verdict == CheckVerdict::Failed {
        " open"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "<details{open}><summary>{} over the bake{}</summary>\n",
        html_text(&c.name),
        threshold_words(c)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default()
    );
    if !c.source.is_empty() {
        let _ = writeln!(out, "Query: `{}`\n", code(&clip(&c.source, SOURCE_CHARS)));
    }
    out.push_str(chart);
    out.push_str("\n</details>\n\n");
}

/// One point of a chart: seconds since the first sample, and the value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    second: i64,
    value: f64,
}

/// Which of two values is worse for this check: the higher under `>`/`>=`, the lower under
/// `<`/`<=`, else the one farther from the threshold.
fn worse(c: &CheckReport, a: f64, b: f64) -> bool {
    match c.fail_if.as_deref().and_then(operator) {
        Some(">" | ">=") => a > b,
        Some("<" | "<=") => a < b,
        _ => match c.threshold.filter(|t| t.is_finite()) {
            Some(t) => (a - t).abs() > (b - t).abs(),
            None => a > b,
        },
    }
}

/// The points of a check's chart: valued samples by whole second since its first sample
/// (several in one second drawn by the worst), bucketed to at most [`MAX_POINTS`].
fn points(c: &CheckReport) -> Vec<Point> {
    let Some(first) = c.samples.iter().map(|s| s.time).min() else {
        return Vec::new();
    };
    let mut merged: Vec<Point> = Vec::new();
    let mut valued: Vec<Point> = c
        .samples
        .iter()
        .filter_map(|s| {
            let value = s.value.filter(|v| v.is_finite())?;
            let ms = s.time.as_millisecond() - first.as_millisecond();
            Some(Point {
                second: (ms + 500).div_euclid(1000),
                value,
            })
        })
        .collect();
    valued.sort_by_key(|p| p.second);
    for p in valued {
        match merged.last_mut() {
            Some(last) if last.second == p.second => {
                if worse(c, p.value, last.value) {
                    last.value = p.value;
                }
            }
            _ => merged.push(p),
        }
    }
    if merged.len() <= MAX_POINTS {
        return merged;
    }
    merged
        .chunks(merged.len().div_ceil(MAX_POINTS))
        .filter_map(|bucket| {
            bucket
                .iter()
                .copied()
                .reduce(|a, b| if worse(c, b.value, a.value) { b } else { a })
        })
        .collect()
}

/// The y axis range: every value and the threshold, with a margin, rounded outward; from 0
/// when no value is negative and the lowest is at most half the highest.
fn y_range(values: &[f64]) -> (String, String) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.1
    } else if hi != 0.0 {
        hi.abs() * 0.1
    } else {
        1.0
    };
    let step = 10f64.powf(pad.log10().floor());
    // A hair of slack so that float noise (109.00000001) does not add a step.
    let mut bottom = ((lo - pad) / step + 1e-9).floor() * step;
    // Values near zero (error rates) read best from zero.
    if lo >= 0.0 && (bottom < 0.0 || lo <= hi / 2.0) {
        bottom = 0.0;
    }
    let top = ((hi + pad) / step - 1e-9).ceil() * step;
    let decimals = (-step.log10().floor()).clamp(0.0, 15.0) as usize;
    let show = |v: f64| {
        let s = format!("{v:.decimals$}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.')
        } else {
            &s
        };
        if s == "-0" {
            "0".to_string()
        } else {
            s.to_string()
        }
    };
    (show(bottom), show(top))
}

/// A Mermaid `xychart-beta` of a Prometheus check: its values over the bake (x: seconds since
/// its first sample) and its threshold as a second, flat line. None for an HTTP check or
/// fewer than two values.
pub fn chart(c: &CheckReport) -> Option<String> {
    if c.kind != CheckKind::Prometheus {
        return None;
    }
    let points = points(c);
    if points.len() < 2 {
        return None;
    }
    let name = mermaid(&c.name);
    let threshold = c.threshold.filter(|t| t.is_finite());
    let mut all: Vec<f64> = points.iter().map(|p| p.value).collect();
    all.extend(threshold);
    let (bottom, top) = y_range(&all);
    let join = |items: Vec<String>| items.join(", ");
    let labels = join(points.iter().map(|p| format!("\"{}\"", p.second)).collect());
    let values = join(points.iter().map(|p| format_value(p.value, 6)).collect());
    let title = match threshold_words(c) {
        Some(words) => format!("{name} and its threshold, {words}"),
        None => name.clone(),
    };
    let mut out = format!(
        "```mermaid\nxychart-beta\n  title \"{title}\"\n  x-axis \"seconds since the first sample\" [{labels}]\n  y-axis \"{name}\" {bottom} --> {top}\n  line [{values}]\n"
    );
    if let Some(t) = threshold {
        let flat = join(vec![format_value(t, 6); points.len()]);
        let _ = writeln!(out, "  line [{flat}]");
    }
    out.push_str("```\n");
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::model::tests::{target, ts};
    use crate::report::model::{Failure, TargetOutcome};

    pub fn sample(secs: i64, value: Option<f64>, verdict: CheckVerdict) -> CheckSample {
        CheckSample {
            time: ts(secs),
            value,
            verdict,
            note: value.is_none().then(|| "no data".to_string()),
        }
    }

    /// error-rate every 5 s from 2 s: `values`, judged against `> 0.01`.
    pub fn error_rate(values: &[f64], verdict: CheckVerdict) -> CheckReport {
        let samples = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let judged = if v > 0.01 {
                    CheckVerdict::Failed
                } else {
                    CheckVerdict::Passed
                };
                sample(2 + 5 * i as i64, Some(v), judged)
            })
            .collect();
        CheckReport {
            name: "error-rate".into(),
            kind: CheckKind::Prometheus,
            verdict,
            fail_if: Some("> 0.01".into()),
            threshold: Some(0.01),
            source: "sum(rate(http_requests_total{cluster=\"eu\",code=~\"5..\"}[1m]))".into(),
            samples,
            message: None,
        }
    }

    /// healthz: `statuses` (None: no answer), failing on anything but 200.
    pub fn healthz(statuses: &[Option<f64>], verdict: CheckVerdict) -> CheckReport {
        let samples = statuses
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let judged = match s {
                    Some(200.0) => CheckVerdict::Passed,
                    Some(_) => CheckVerdict::Failed,
                    None => CheckVerdict::Inconclusive,
                };
                CheckSample {
                    note: s.is_none().then(|| "timeout after 5s".to_string()),
                    ..sample(2 + 5 * i as i64, s, judged)
                }
            })
            .collect();
        CheckReport {
            name: "healthz".into(),
            kind: CheckKind::Http,
            verdict,
            fail_if: Some("status != 200".into()),
            threshold: None,
            source: "https://eu.shop.example.com/healthz".into(),
            samples,
            message: None,
        }
    }

    /// The canary's error rate rises above 0.01 during its bake, the check fails it
    /// (`AnalysisFailed`) and it rolls back; eu and us pass both checks.
    pub fn checked_fleet() -> crate::report::model::Report {
        use crate::report::model::{BAKE_PHASE, PhaseTiming, ROLLBACK_PHASE, RollbackReport};
        let mut canary = target("canary", TargetOutcome::RolledBack);
        canary.revision = Some(4);
        canary.phases = vec![
            PhaseTiming::new("apply", 1.0),
            PhaseTiming::new("wait", 1.0),
            PhaseTiming::new(BAKE_PHASE, 30.0),
            PhaseTiming::new(ROLLBACK_PHASE, 2.0),
        ];
        let mut error = error_rate(
            &[0.001, 0.002, 0.002, 0.004, 0.009, 0.021, 0.043],
            CheckVerdict::Failed,
        );
        error.message = Some("error-rate = 0.043 > 0.01 at 08:00:32".into());
        canary.failures.push(Failure {
            object: "check error-rate".into(),
            reason: "AnalysisFailed".into(),
            message: "error-rate = 0.043 > 0.01 at 08:00:32".into(),
            ..Default::default()
        });
        canary.checks = vec![
            error,
            CheckReport {
                source: "https://canary.shop.example.com/healthz".into(),
                ..healthz(
                    &[Some(200.0), Some(200.0), Some(503.0), Some(200.0)],
                    CheckVerdict::Passed,
                )
            },
        ];
        canary.rollback = Some(RollbackReport {
            started_at: Some(ts(33)),
            why: Some("failed".into()),
            to_commit: Some("3a30e4b".into()),
            as_revision: Some(5),
            ..RollbackReport::new(TargetOutcome::RolledBack, Some(3))
        });
        canary.finished_at = ts(35);
        let healthy = |name: &str, revision: u64| {
            let mut t = target(name, TargetOutcome::Deployed);
            t.revision = Some(revision);
            t.checks = vec![
                error_rate(&[0.001, 0.0, 0.002, 0.001], CheckVerdict::Passed),
                CheckReport {
                    source: format!("https://{name}.shop.example.com/healthz"),
                    ..healthz(&[Some(200.0); 4], CheckVerdict::Passed)
                },
            ];
            t
        };
        let mut r =
            crate::report::model::tests::report(vec![canary, healthy("eu", 7), healthy("us", 9)]);
        r.finished_at = ts(35);
        r
    }

    #[test]
    fn format_value_table() {
        let cases = [
            (0.043, 4, "0.043"),
            (0.01, 6, "0.01"),
            (0.0431234, 4, "0.04312"),
            (123.456, 4, "123.5"),
            (12345.6, 4, "12346"),
            (200.0, 6, "200"),
            (1e-9, 4, "0.000000001"),
            (-0.5, 4, "-0.5"),
            (0.0, 4, "0"),
            // Below the 15 decimals shown: zero, without a sign.
            (-0.00000000000000001, 4, "0"),
            (0.1 + 0.2, 6, "0.3"),
            (f64::NAN, 4, "NaN"),
            (f64::INFINITY, 4, "inf"),
        ];
        for (v, digits, want) in cases {
            assert_eq!(format_value(v, digits), want, "{v}");
        }
    }

    #[test]
    fn short_verdict_table() {
        use CheckVerdict::*;
        let mut failed = error_rate(&[0.001, 0.043], Failed);
        failed.message = Some("error-rate = 0.043 > 0.01 at 08:00:07".into());
        let mut no_value = error_rate(&[], Failed);
        no_value.samples = vec![sample(2, None, Failed)];
        let inconclusive = CheckReport {
            name: "latency".into(),
            ..error_rate(&[], Inconclusive)
        };
        let cases: Vec<(Vec<CheckReport>, Option<&str>)> = vec![
            (vec![], None),
            (
                vec![
                    error_rate(&[0.001], Passed),
                    healthz(&[Some(200.0)], Passed),
                ],
                Some("2 passed"),
            ),
            (
                vec![failed.clone(), healthz(&[Some(200.0)], Passed)],
                Some("error-rate failed (0.043 > 0.01), 1 passed"),
            ),
            (
                vec![healthz(&[Some(200.0), Some(503.0)], Failed)],
                Some("healthz failed (status 503)"),
            ),
            (vec![no_value], Some("error-rate failed (no value)")),
            (
                vec![healthz(&[None], Inconclusive)],
                Some("healthz inconclusive"),
            ),
            (
                vec![inconclusive, error_rate(&[], NotRun)],
                Some("latency inconclusive, 1 not run"),
            ),
        ];
        for (checks, want) in cases {
            assert_eq!(short_verdict(&checks).as_deref(), want, "{checks:?}");
        }
    }

    #[test]
    fn http_counts_table() {
        use CheckVerdict::*;
        let mut statuses = vec![Some(200.0); 12];
        statuses.insert(3, Some(503.0));
        let cases: Vec<(Vec<Option<f64>>, &str)> = vec![
            (statuses, "12 × 200, 1 × 503"),
            (
                vec![Some(503.0), None, Some(200.0), Some(200.0), None],
                "2 × 200, 1 × 503, 2 × no answer",
            ),
            (vec![], "no results"),
        ];
        for (s, want) in cases {
            assert_eq!(http_counts(&healthz(&s, Passed)), want);
        }
    }

    #[test]
    fn chart_of_a_rising_error_rate_has_the_threshold_line() {
        let c = error_rate(&[0.002, 0.004, 0.02, 0.043], CheckVerdict::Failed);
        assert_eq!(
            chart(&c).as_deref(),
            Some(
                "```mermaid
xychart-beta
  title \"error-rate and its threshold, fails above 0.01\"
  x-axis \"seconds since the first sample\" [\"0\", \"5\", \"10\", \"15\"]
  y-axis \"error-rate\" 0 --> 0.048
  line [0.002, 0.004, 0.02, 0.043]
  line [0.01, 0.01, 0.01, 0.01]
```
"
            )
        );
    }

    #[test]
    fn no_chart_without_two_values_or_for_http() {
        use CheckVerdict::*;
        assert_eq!(chart(&error_rate(&[0.1], Failed)), None);
        let mut gaps = error_rate(&[0.1], Failed);
        gaps.samples.push(sample(9, None, Inconclusive));
        gaps.samples.push(sample(10, Some(f64::NAN), Inconclusive));
        assert_eq!(chart(&gaps), None);
        assert_eq!(chart(&healthz(&[Some(200.0), Some(200.0)], Passed)), None);
    }

    #[test]
    fn y_range_covers_values_and_threshold() {
        // (values, bottom, top)
        let cases: Vec<(Vec<f64>, &str, &str)> = vec![
            (vec![0.002, 0.043, 0.01], "0", "0.048"),
            (vec![0.001, 0.001, 0.01], "0", "0.0109"),
            (vec![1000.01, 1000.02], "1000.009", "1000.021"),
            (vec![0.0, 0.0], "0", "1"),
            (vec![5.0, 5.0], "4.5", "5.5"),
            (vec![-2.0, 3.0], "-2.5", "3.5"),
            (vec![250.0, 900.0, 500.0], "0", "970"),
        ];
        for (values, bottom, top) in cases {
            let (b, t) = y_range(&values);
            assert_eq!((b.as_str(), t.as_str()), (bottom, top), "{values:?}");
            let (b, t): (f64, f64) = (b.parse().unwrap(), t.parse().unwrap());
            assert!(values.iter().all(|v| b <= *v && *v <= t), "{values:?}");
        }
    }

    #[test]
    fn a_long_bake_is_bucketed_by_its_worst_values() {
        // 600 samples, one second apart, one spike: 60 points, the spike among them.
        let mut values = vec![0.001; 600];
        values[333] = 0.5;
        let mut c = error_rate(&values, CheckVerdict::Failed);
        for (i, s) in c.samples.iter_mut().enumerate() {
            s.time = ts(i as i64);
        }
        let p = points(&c);
        assert_eq!(p.len(), MAX_POINTS);
        assert!(p.iter().any(|p| p.value == 0.5), "{p:?}");
        // Under `< 0.5` the worst is the lowest.
        c.fail_if = Some("< 0.5".into());
        c.samples[100].value = Some(-1.0);
        assert!(points(&c).iter().any(|p| p.value == -1.0));
        assert!(!points(&c).iter().any(|p| p.value == 0.5));
    }

    #[test]
    fn samples_in_one_second_are_one_point() {
        let mut c = error_rate(&[0.002, 0.03, 0.001], CheckVerdict::Failed);
        c.samples[1].time = ts(2);
        c.samples[2].time = ts(3);
        assert_eq!(
            points(&c),
            vec![
                Point {
                    second: 0,
                    value: 0.03
                },
                Point {
                    second: 1,
                    value: 0.001
                }
            ]
        );
    }

    #[test]
    fn a_check_without_a_chart_names_its_source_and_why_it_was_inconclusive() {
        let mut t = target("eu", TargetOutcome::Deployed);
        let mut down = error_rate(&[], CheckVerdict::Inconclusive);
        down.samples = vec![CheckSample {
            note: Some("Prometheus answered 503".into()),
            ..sample(2, None, CheckVerdict::Inconclusive)
        }];
        t.checks = vec![down, error_rate(&[0.001, 0.002], CheckVerdict::Passed)];
        let md = markdown(&t, true);
        assert_eq!(
            md.lines().nth(2),
            Some(
                "- ❔ `error-rate` inconclusive: 1 sample(s), 1 without a value, fails if `> 0.01` \
                 · last note: Prometheus answered 503 \
                 · `sum(rate(http_requests_total{cluster=\"eu\",code=~\"5..\"}[1m]))`"
            ),
            "{md}"
        );
        // The charted one says its source above its chart, not in its line.
        assert_eq!(
            md.lines().nth(3),
            Some("- ✅ `error-rate` passed: 2 sample(s), fails if `> 0.01`"),
            "{md}"
        );
        assert_eq!(md.matches("Query: `sum(rate(").count(), 1, "{md}");
        // Without charts (cut), every line names its source.
        let cut = markdown(&t, false);
        assert!(!cut.contains("xychart") && !cut.contains("Query:"), "{cut}");
        assert_eq!(cut.matches("· `sum(rate(").count(), 2, "{cut}");
    }

    #[test]
    fn an_analysis_failure_is_said_once_in_the_details() {
        let mut t = target("canary", TargetOutcome::RolledBack);
        let mut c = error_rate(&[0.002, 0.043], CheckVerdict::Failed);
        c.message = Some("error-rate = 0.043 > 0.01 at 08:00:07".into());
        t.checks = vec![c, healthz(&[None], CheckVerdict::Inconclusive)];
        // No failure says it: the details do.
        assert_eq!(
            terminal_details(&t),
            vec![
                "check error-rate: failed: error-rate = 0.043 > 0.01 at 08:00:07",
                "check healthz: inconclusive: timeout after 5s",
            ]
        );
        t.failures.push(Failure {
            object: "check error-rate".into(),
            reason: "AnalysisFailed".into(),
            message: "error-rate = 0.043 > 0.01 at 08:00:07".into(),
            ..Default::default()
        });
        assert_eq!(
            terminal_details(&t),
            vec!["check healthz: inconclusive: timeout after 5s"]
        );
    }
}
