//! Markdown of a report: the sticky PR comment, the GitHub step summary and
//! `--report-markdown`. One body for all three, so that what a PR shows is what the job shows.
//!
//! Everything that comes from a cluster, a manifest, a script or git goes through
//! [`super::escape`]. The body never exceeds the limit it is given: details are cut first
//! (the oldest Warning events, then script log tails, then the charts of checks, then the
//! sections of targets that only have checks to show, then per-pod lines, then the timeline,
//! then whole sections), and a note says what was cut and where the full report is.

use std::fmt::Write as _;

use super::check_view;
use super::clean::Clean;
use super::escape::{code, code_block, html_text, link_url, mermaid, text};
use super::model::{
    BAKE_PHASE, ChangePlan, ContainerLog, Failure, PlanMode, PlanStatus, PlannedChange,
    ROLLBACK_PHASE, Report, StageOutcome, StageResult, TargetOutcome, TargetPlan, TargetReport,
    clip, cut_to,
};
use crate::util::duration::format_duration;

/// GitHub's limit for an issue or PR comment body (characters; this module counts bytes,
/// which are never fewer).
pub const COMMENT_LIMIT: usize = 65_536;
/// GitHub's limit for `GITHUB_STEP_SUMMARY` per step.
pub const STEP_SUMMARY_LIMIT: usize = 1024 * 1024;

/// Script output lines shown per failed script before any cut.
const LOG_TAIL_LINES: usize = 20;
/// Characters of one failure message, event or log line.
const MESSAGE_CHARS: usize = 1000;
const EVENT_CHARS: usize = 300;
const LOG_LINE_CHARS: usize = 300;
/// Room kept for the truncation note when the table itself must be cut.
const NOTE_RESERVE: usize = 600;

/// Where the full report is, named in the note when the body had to be cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FullReport {
    /// The workflow run whose step summary has the whole report.
    pub run_url: Option<String>,
    /// The JSON report file (`--report`).
    pub json_path: Option<String>,
}

/// How to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownOptions {
    /// At most this many bytes.
    pub limit: usize,
    pub full_report: FullReport,
}

/// How much detail one rendering keeps; `usize::MAX` is "all".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Detail {
    /// Newest Warning events kept per failure.
    events: usize,
    /// Last lines kept of each failed script's output.
    log_lines: usize,
    /// The charts of Prometheus checks (their verdict lines stay).
    charts: bool,
    /// Failure (pod/container) lines kept per target.
    failures: usize,
    gantt: bool,
    /// Detail sections of problem targets kept (in target order).
    sections: usize,
    /// The sections of targets that have only their checks to show.
    check_sections: bool,
}

const FULL: Detail = Detail {
    events: usize::MAX,
    log_lines: LOG_TAIL_LINES,
    charts: true,
    failures: usize::MAX,
    gantt: true,
    sections: usize::MAX,
    check_sections: true,
};

/// What a rendering left out compared with the full one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cut {
    events: usize,
    log_lines: usize,
    charts: usize,
    failures: usize,
    gantt: bool,
    sections: usize,
    check_sections: usize,
    table_rows: usize,
}

impl Cut {
    fn any(&self) -> bool {
        *self != Cut::default()
    }
}

/// Renders the report in at most `options.limit` bytes.
pub fn to_markdown(report: &Clean<Report>, options: &MarkdownOptions) -> String {
    let limit = options.limit;
    let fits = |d: Detail| {
        let body = render(report, d, options);
        (body.len() <= limit).then_some(body)
    };
    if let Some(body) = fits(FULL) {
        return body;
    }
    // Cut in the documented order; each step keeps what the previous one cut.
    let mut d = FULL;
    for events in [3, 1, 0] {
        d.events = events;
        if let Some(body) = fits(d) {
            return body;
        }
    }
    for log_lines in [5, 0] {
        d.log_lines = log_lines;
        if let Some(body) = fits(d) {
            return body;
        }
    }
    d.charts = false;
    if let Some(body) = fits(d) {
        return body;
    }
    d.check_sections = false;
    if let Some(body) = fits(d) {
        return body;
    }
    let most_failures = report
        .targets
        .iter()
        .map(|t| t.failures.len())
        .max()
        .unwrap_or(0);
    if let Some(k) = largest_fitting(most_failures, |k| {
        fits(Detail { failures: k, ..d }).is_some()
    }) {
        d.failures = k;
        if let Some(body) = fits(d) {
            return body;
        }
    }
    d.failures = 0;
    d.gantt = false;
    if let Some(body) = fits(d) {
        return body;
    }
    let sections = report.targets.iter().filter(|t| is_problem(t)).count();
    if let Some(s) = largest_fitting(sections, |s| fits(Detail { sections: s, ..d }).is_some()) {
        d.sections = s;
        if let Some(body) = fits(d) {
            return body;
        }
    }
    d.sections = 0;
    table_only(report, d, options)
}

/// The largest `k` in `0..=max` for which `ok(k)` holds, assuming `ok` is monotone.
fn largest_fitting(max: usize, ok: impl Fn(usize) -> bool) -> Option<usize> {
    if !ok(0) {
        return None;
    }
    let (mut lo, mut hi) = (0, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid) { lo = mid } else { hi = mid - 1 }
    }
    Some(lo)
}

/// A fleet so large that not even the table fits: the rows of the targets that failed
/// themselves and as many of their sections as fit beside them (1,000 rolled back by the
/// policy must not push out the one that caused it), then the others' rows until the limit,
/// then the note.
fn table_only(report: &Report, d: Detail, options: &MarkdownOptions) -> String {
    let head = head(report);
    let ordered: Vec<&TargetReport> = report
        .failed_first()
        .into_iter()
        .map(|i| &report.targets[i])
        .collect();
    let rows: Vec<String> = ordered.iter().map(|t| row(report, t)).collect();
    let own = ordered.iter().take_while(|t| t.failed_itself()).count();
    let sections_of = |d: Detail| -> String {
        shown_sections(report, d)
            .map(|t| details(t, d))
            .collect::<String>()
    };
    let fixed = head.len() + TABLE_HEADER.len() + NOTE_RESERVE;
    let own_rows: usize = rows[..own].iter().map(String::len).sum();
    let fits = |d: Detail| fixed + own_rows + sections_of(d).len() <= options.limit;
    // As many of their sections as fit, then as many of their failing pods' lines as fit
    // (an earlier step of the cut took those from every section).
    let sections = largest_fitting(own, |k| fits(Detail { sections: k, ..d })).unwrap_or(0);
    let mut d = Detail { sections, ..d };
    let most_failures = ordered[..own].iter().map(|t| t.failures.len()).max();
    if let Some(f) = largest_fitting(most_failures.unwrap_or(0), |f| {
        fits(Detail { failures: f, ..d })
    }) {
        d.failures = f;
    }
    let sections = sections_of(d);
    let mut cut = cut_of(report, d);
    let mut out = head;
    out.push_str(TABLE_HEADER);
    let mut shown = 0;
    for r in &rows {
        if out.len() + r.len() + sections.len() + NOTE_RESERVE > options.limit {
            break;
        }
        out.push_str(r);
        shown += 1;
    }
    out.push_str(&sections);
    cut.table_rows = rows.len() - shown;
    out.push_str(&note(&cut, options));
    cut_to(out, options.limit)
}

fn render(report: &Report, d: Detail, options: &MarkdownOptions) -> String {
    let mut out = head(report);
    out.push_str(TABLE_HEADER);
    for t in &report.targets {
        out.push_str(&row(report, t));
    }
    for t in shown_sections(report, d) {
        out.push_str(&details(t, d));
    }
    if d.gantt {
        out.push_str(&gantt(report));
    }
    let cut = cut_of(report, d);
    if cut.any() {
        out.push_str(&note(&cut, options));
    }
    out
}

/// What `d` leaves out of this report.
fn cut_of(report: &Report, d: Detail) -> Cut {
    let mut cut = Cut::default();
    let problems = report.targets.iter().filter(|t| is_problem(t)).count();
    cut.sections = problems.saturating_sub(d.sections);
    if !d.check_sections {
        cut.check_sections = report
            .targets
            .iter()
            .filter(|t| !is_problem(t) && !t.checks.is_empty())
            .count();
    }
    for t in shown_sections(report, d) {
        cut.failures += t.failures.len().saturating_sub(d.failures);
        for f in t.failures.iter().take(d.failures) {
            cut.events += f.events.len().saturating_sub(d.events);
            for log in &f.logs {
                cut.log_lines += log
                    .lines
                    .len()
                    .min(LOG_TAIL_LINES)
                    .saturating_sub(d.log_lines);
            }
        }
        for s in failed_scripts(t) {
            cut.log_lines += s
                .output
                .len()
                .min(LOG_TAIL_LINES)
                .saturating_sub(d.log_lines);
        }
        if !d.charts {
            cut.charts += check_view::charted(t);
        }
    }
    cut.gantt = !d.gantt && has_gantt(report);
    cut
}

fn note(cut: &Cut, options: &MarkdownOptions) -> String {
    let mut parts = Vec::new();
    if cut.events > 0 {
        parts.push(format!("{} older Warning event(s)", cut.events));
    }
    if cut.log_lines > 0 {
        parts.push(format!("{} script or container log line(s)", cut.log_lines));
    }
    if cut.charts > 0 {
        parts.push(format!("{} check chart(s)", cut.charts));
    }
    if cut.failures > 0 {
        parts.push(format!("{} failing pod/container line(s)", cut.failures));
    }
    if cut.gantt {
        parts.push("the timeline".to_string());
    }
    if cut.check_sections > 0 {
        parts.push(format!(
            "the check section(s) of {} target(s) without a problem",
            cut.check_sections
        ));
    }
    if cut.sections > 0 {
        parts.push(format!("{} target detail section(s)", cut.sections));
    }
    if cut.table_rows > 0 {
        parts.push(format!("{} table row(s)", cut.table_rows));
    }
    let mut places = Vec::new();
    if let Some(url) = options.full_report.run_url.as_deref().and_then(link_url) {
        places.push(format!("the step summary of [the workflow run]({url})"));
    }
    if let Some(path) = &options.full_report.json_path {
        places.push(format!("the JSON report `{}`", code(path)));
    }
    places.push("the job log".to_string());
    format!(
        "\n> [!NOTE]\n> Cut to stay under {} characters: {} left out. The full report is in {}.\n",
        options.limit,
        parts.join(", "),
        places.join(", ")
    )
}

/// A target whose section says what went wrong (or what to look at).
fn is_problem(t: &TargetReport) -> bool {
    t.outcome.is_problem()
        || !t.failures.is_empty()
        || !t.warnings.is_empty()
        || !t.dropped.is_empty()
        || !t.abandoned_revisions.is_empty()
        || failed_scripts(t).next().is_some()
}

/// The targets whose section `d` shows, in target order: `d.sections` problem targets (those
/// that failed themselves first), and with `d.check_sections` every other target that ran
/// checks.
fn shown_sections(report: &Report, d: Detail) -> impl Iterator<Item = &TargetReport> {
    let mut kept = vec![false; report.targets.len()];
    for i in report
        .failed_first()
        .into_iter()
        .filter(|&i| is_problem(&report.targets[i]))
        .take(d.sections)
    {
        kept[i] = true;
    }
    report
        .targets
        .iter()
        .zip(kept)
        .filter_map(move |(t, kept)| {
            let shown = if is_problem(t) {
                kept
            } else {
                d.check_sections && !t.checks.is_empty()
            };
            shown.then_some(t)
        })
}

/// Script runs of a target that did not succeed and left output to show.
fn failed_scripts(t: &TargetReport) -> impl Iterator<Item = &StageResult> {
    t.stages.iter().filter(|s| {
        !matches!(s.outcome, StageOutcome::Succeeded | StageOutcome::NotRun) && !s.output.is_empty()
    })
}

/// The icon shown before an outcome.
pub fn icon(outcome: TargetOutcome) -> &'static str {
    match outcome {
        TargetOutcome::Deployed => "✅",
        TargetOutcome::Failed => "❌",
        TargetOutcome::RolledBack => "↩️",
        TargetOutcome::RollbackFailed => "🔥",
        TargetOutcome::Skipped => "⏭️",
        TargetOutcome::Cancelled => "⏹️",
    }
}

fn head(report: &Report) -> String {
    let mut out = String::new();
    let dry = if report.dry_run { " (dry run)" } else { "" };
    let _ = writeln!(
        out,
        "### {} rollguard: `{}` {}{dry}\n",
        icon(report.outcome),
        code(&report.app),
        report.outcome
    );
    let _ = writeln!(out, "**{}**\n", text(&report.summary));
    let mut facts = Vec::new();
    if let Some(commit) = &report.commit {
        let mut c = format!("commit `{}`", code(commit.short_sha()));
        if commit.dirty {
            c.push_str(" (dirty: uncommitted changes were deployed)");
        }
        if let Some(r) = &commit.r#ref {
            let _ = write!(c, " on `{}`", code(r));
        }
        if let Some(m) = &commit.message {
            let _ = write!(c, ": {}", text(&clip(m, 100)));
        }
        facts.push(c);
    }
    facts.push(format!("took {}", format_duration(report.duration())));
    if let Some(url) = report.run_url.as_deref().and_then(link_url) {
        facts.push(format!("[workflow run]({url})"));
    }
    facts.push(format!(
        "updated {}",
        report.finished_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ));
    out.push_str(&facts.join(" · "));
    out.push_str("\n\n");
    // `deploy --plan`: ties the deploy to the plan comment a reviewer approved.
    if let Some(saved) = &report.saved_plan {
        let _ = writeln!(out, "{}\n", text(&saved.line()));
    }
    out
}

const TABLE_HEADER: &str = "| target | outcome | revision | commit | duration | reason | went back to | left in place |\n\
                            |---|---|---:|---|---:|---|---|---|\n";

fn row(report: &Report, t: &TargetReport) -> String {
    let revision = t.revision.map(|r| format!("v{r}")).unwrap_or_default();
    let commit = match (&report.commit, t.revision) {
        (Some(c), Some(_)) if c.dirty => format!("`{}` (dirty)", code(c.short_sha())),
        (Some(c), Some(_)) => format!("`{}`", code(c.short_sha())),
        _ => String::new(),
    };
    let said = t.reason();
    let reason = said
        .as_deref()
        .map(|r| text(&clip(r, 200)))
        .unwrap_or_default();
    let (back, left) = match &t.rollback {
        Some(rb) => {
            // "v5 (`3a30e4b`)": the revision gone back to and its commit.
            let commit = rb
                .to_commit
                .as_deref()
                .map(|c| format!(" (`{}`)", code(c)))
                .unwrap_or_default();
            let back = match rb.to_revision {
                Some(rev) if rb.outcome == TargetOutcome::RolledBack => format!("v{rev}{commit}"),
                Some(rev) => format!("v{rev}{commit} ({})", rb.outcome),
                None => "nothing to go back to".to_string(),
            };
            // Why it went back ("policy rollback-all: us failed at 12:03:04"), when known and
            // not already the row's reason (a rollback by the policy says it there).
            let back = match &rb.why {
                Some(why) if said.as_deref() != Some(why.as_str()) => {
                    format!("{back}: {}", text(&clip(why, 200)))
                }
                _ => back,
            };
            let left = match rb.left_in_place.len() {
                0 => String::new(),
                1 => text(&rb.left_in_place[0]),
                n => format!("{n} objects"),
            };
            (back, left)
        }
        None => (String::new(), String::new()),
    };
    format!(
        "| {} | {} {} | {revision} | {commit} | {} | {reason} | {back} | {left} |\n",
        text(&t.name),
        icon(t.outcome),
        t.outcome,
        format_duration(t.duration()),
    )
}

fn details(t: &TargetReport, d: Detail) -> String {
    let mut out = format!(
        "\n<details><summary>{} <b>{}</b>: {}{}</summary>\n\n",
        icon(t.outcome),
        html_text(&t.name),
        t.outcome,
        check_view::summary_suffix(t)
    );
    if let Some(message) = &t.message {
        let _ = writeln!(out, "{}\n", text(&clip(message, MESSAGE_CHARS)));
    }
    if !t.failures.is_empty() {
        out.push_str("**Failing:**\n\n");
        for f in t.failures.iter().take(d.failures) {
            failure_line(&mut out, f, d.events);
        }
        let hidden = t.failures.len().saturating_sub(d.failures);
        if hidden > 0 {
            let _ = writeln!(out, "- and {hidden} more (cut, see the note below)");
        }
        out.push('\n');
        for f in t.failures.iter().take(d.failures) {
            for log in &f.logs {
                container_log(&mut out, log, d.log_lines);
            }
        }
    }
    out.push_str(&check_view::markdown(t, d.charts));
    for s in failed_scripts(t) {
        let which = if s.rollback {
            "rollback of script"
        } else {
            "script"
        };
        let _ = write!(
            out,
            "**{which} `{}`**: {}",
            code(&s.name),
            s.outcome.as_str()
        );
        if let Some(m) = &s.message {
            let _ = write!(out, ": {}", text(&clip(m, MESSAGE_CHARS)));
        }
        out.push_str("\n\n");
        let lines = tail(&s.output, d.log_lines);
        if !lines.is_empty() {
            out.push_str(&code_block(&lines));
            out.push('\n');
        }
    }
    if !t.abandoned_revisions.is_empty() {
        let revs: Vec<String> = t
            .abandoned_revisions
            .iter()
            .map(|r| format!("v{r}"))
            .collect();
        let _ = writeln!(
            out,
            "Revision(s) {} were left pending by a run that did not finish them (the warnings say which run and whether it ended) and are now marked failed (abandoned).\n",
            revs.join(", ")
        );
    }
    if let Some(rb) = &t.rollback {
        match (rb.to_revision, &rb.message) {
            (Some(rev), Some(m)) => {
                let _ = write!(out, "**Rollback** to v{rev}: {}: {}", rb.outcome, text(m));
            }
            (Some(rev), None) => {
                let _ = write!(out, "**Rollback** to v{rev}: {}", rb.outcome);
            }
            (None, _) => out.push_str(
                "**Rollback:** there was no earlier good release to go back to; nothing was deleted",
            ),
        }
        out.push_str("\n\n");
        let when = rb
            .started_at
            .map(|at| format!(" at {}", at.strftime("%H:%M:%S UTC")));
        match (when, &rb.why) {
            (None, None) => {}
            (when, why) => {
                let why = why
                    .as_deref()
                    .map(|w| format!(": {}", text(&clip(w, MESSAGE_CHARS))))
                    .unwrap_or_default();
                let _ = writeln!(out, "Rollback started{}{why}\n", when.unwrap_or_default());
            }
        }
        if !rb.left_in_place.is_empty() {
            out.push_str("Left in place (rollback never prunes; delete by hand if unwanted):\n\n");
            for obj in &rb.left_in_place {
                let _ = writeln!(out, "- `{}`", code(obj));
            }
            out.push('\n');
        }
    }
    if !t.dropped.is_empty() {
        out.push_str("**Dropped from the manifests:**\n\n");
        for d in &t.dropped {
            let _ = writeln!(out, "- {}", text(&clip(&d.line(), 500)));
        }
        out.push('\n');
    }
    if !t.warnings.is_empty() {
        out.push_str("**Warnings:**\n\n");
        for w in &t.warnings {
            let _ = writeln!(out, "- {}", text(&clip(w, 500)));
        }
        out.push('\n');
    }
    out.push_str("</details>\n");
    out
}

fn failure_line(out: &mut String, f: &Failure, events: usize) {
    let _ = write!(out, "- `{}`", code(&f.object));
    if let Some(pod) = &f.pod {
        let _ = write!(out, " pod `{}`", code(pod));
    }
    if let Some(c) = &f.container {
        let _ = write!(out, " container `{}`", code(c));
    }
    let _ = write!(out, ": **{}**", text(&f.reason));
    if !f.message.is_empty() && f.message != f.reason {
        let _ = write!(out, ": {}", text(&clip(&f.message, MESSAGE_CHARS)));
    }
    out.push('\n');
    // Events are oldest first: keep the newest.
    let skip = f.events.len().saturating_sub(events);
    for e in f.events.iter().skip(skip) {
        let _ = writeln!(out, "  - event: {}", text(&clip(e, EVENT_CHARS)));
    }
}

/// The last `keep` lines of a log (at most [`LOG_TAIL_LINES`]), each clipped.
fn tail(lines: &[String], keep: usize) -> Vec<String> {
    let skip = lines.len().saturating_sub(keep.min(LOG_TAIL_LINES));
    lines[skip..]
        .iter()
        .map(|l| clip(l, LOG_LINE_CHARS))
        .collect()
}

/// The end of one container's log, collapsed: its lines in a code block whose fence no line
/// can close (a line with ``` or </details> stays text), or why it could not be read.
fn container_log(out: &mut String, log: &ContainerLog, keep: usize) {
    let instance = if log.previous {
        "previous instance"
    } else {
        "current instance"
    };
    let _ = write!(
        out,
        "<details><summary>log of pod {} container {} ({instance})</summary>\n\n",
        html_text(&log.pod),
        html_text(&log.container)
    );
    if let Some(error) = &log.error {
        let _ = writeln!(out, "{}\n", text(&clip(error, MESSAGE_CHARS)));
    }
    let lines = tail(&log.lines, keep);
    if !lines.is_empty() {
        out.push_str(&code_block(&lines));
        out.push('\n');
    } else if log.error.is_none() && log.lines.is_empty() {
        out.push_str("(the log is empty)\n\n");
    } else if log.error.is_none() {
        out.push_str("(cut, see the note below)\n\n");
    }
    out.push_str("</details>\n\n");
}

fn has_gantt(report: &Report) -> bool {
    report.targets.iter().any(has_bars)
}

/// A target has something to draw: timed phases, or a rollback that started.
fn has_bars(t: &TargetReport) -> bool {
    !t.phases.is_empty()
        || t.rollback
            .as_ref()
            .is_some_and(|rb| rb.started_at.is_some())
}

/// A Mermaid gantt chart of every target's phases, in a collapsed section. Times are
/// milliseconds since the run started (`dateFormat x`), so the chart needs no time zone.
/// One section per target; with more than one wave, one section per wave whose bars name
/// their target. A bake is its own bar (`active`), a rollback a `crit` bar from the moment
/// the fleet decided it. Every name goes through [`mermaid`]: it cannot end a bar or a section.
fn gantt(report: &Report) -> String {
    if !has_gantt(report) {
        return String::new();
    }
    let mut out = String::from(
        "\n<details><summary>Timeline</summary>\n\n```mermaid\ngantt\n  dateFormat x\n  axisFormat %M:%S\n",
    );
    let run_start = report.started_at.as_millisecond();
    let waves = report.waves();
    if waves.len() > 1 {
        for wave in &waves {
            let shown: Vec<&TargetReport> = wave
                .targets
                .iter()
                .copied()
                .filter(|t| has_bars(t))
                .collect();
            if shown.is_empty() {
                continue;
            }
            let _ = writeln!(out, "  section wave {}", wave.number);
            for t in shown {
                bars(&mut out, t, run_start, Some(&t.name));
            }
        }
    } else {
        for t in report.targets.iter().filter(|t| has_bars(t)) {
            let _ = writeln!(out, "  section {}", mermaid(&t.name));
            bars(&mut out, t, run_start, None);
        }
    }
    out.push_str("```\n\n</details>\n");
    out
}

/// The bars of one target, each labelled `prefix phase` (the target's name when the section
/// is a wave's).
fn bars(out: &mut String, t: &TargetReport, run_start: i64, prefix: Option<&str>) {
    let label = |name: &str| match prefix {
        Some(p) => mermaid(&format!("{p} {name}")),
        None => mermaid(name),
    };
    let offset = |ts: jiff::Timestamp| (ts.as_millisecond() - run_start).max(0);
    let mut at = offset(t.started_at);
    let end = offset(t.finished_at);
    let rollback_at = t.rollback.as_ref().and_then(|rb| rb.started_at).map(offset);
    let mut rollback_drawn = false;
    for (i, p) in t.phases.iter().enumerate() {
        let ms = (p.seconds * 1000.0).round().max(1.0) as i64;
        let tag = match p.name.as_str() {
            BAKE_PHASE => "active, ",
            ROLLBACK_PHASE => "crit, ",
            _ => "",
        };
        if p.name == ROLLBACK_PHASE {
            match rollback_at {
                Some(start) => {
                    at = start;
                    rollback_drawn = true;
                }
                // Not known when it started: it runs once the fleet has decided, after a
                // pause, so it ends when the target finished, not right after the phase
                // before it.
                None if i + 1 == t.phases.len() => at = at.max(end - ms),
                None => {}
            }
        }
        let _ = writeln!(out, "  {} :{tag}{at}, {}", label(&p.name), at + ms);
        at += ms;
    }
    if let Some(start) = rollback_at
        && !rollback_drawn
    {
        // Started but not timed (still going when the run ended, or cut short): from the
        // decision to the target's end.
        let _ = writeln!(
            out,
            "  {} :crit, {start}, {}",
            label(ROLLBACK_PHASE),
            end.max(start + 1)
        );
    }
}

/// The plan as Markdown for the PR's plan comment (and step summary), at most `limit` bytes,
/// from a plan already scrubbed of every known secret value (escaping comes after):
/// a table of counts per target, then per target the changes, each update's diff in a
/// collapsed block cut per object past [`super::diff::MAX_DIFF_LINES`] lines with a note;
/// sections that do not fit are left out with a note, never silently.
pub fn plan_to_markdown(plan: &Clean<ChangePlan>, limit: usize) -> String {
    // The comment's hidden marker (github::comments::marker, Purpose::Plan) is put first by
    // the poster.
    let mut head = String::new();
    let what = match plan.mode {
        PlanMode::DryRun => "Plan (server-side dry run)",
        PlanMode::Offline => "Plan (offline)",
        PlanMode::Rollback => "Rollback plan",
    };
    head.push_str(&format!(
        "### rollguard: {} of `{}`\n\n",
        what,
        code(&plan.app)
    ));
    if let Some(commit) = &plan.commit {
        head.push_str(&format!("Commit `{}`", commit.short_sha()));
        if let Some(against) = &plan.against {
            head.push_str(&format!(" compared with `{}`", against.short_sha()));
        }
        head.push_str("\n\n");
    }
    head.push_str(&format!("**{}**\n\n", text(&plan.summary)));
    if let Some(digest) = &plan.saved_as {
        head.push_str(&format!(
            "Saved as plan `{}`: `rollguard deploy --plan` applies exactly this, or nothing.\n\n",
            code(digest)
        ));
    }
    head.push_str("| target | create | update | unchanged | left in place | status |\n|---|---:|---:|---:|---:|---|\n");
    for t in &plan.targets {
        let status = match t.status {
            PlanStatus::Changes => "changes",
            PlanStatus::NoChanges => "no changes",
            PlanStatus::Error => "error",
        };
        head.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            text(&t.name),
            t.create.len(),
            t.update.len(),
            t.unchanged.len(),
            t.dropped.len(),
            status
        ));
    }
    let sections: Vec<String> = plan
        .targets
        .iter()
        .filter(|t| t.changes() > 0 || !t.errors.is_empty() || !t.dropped.is_empty())
        .map(plan_section)
        .collect();
    let mut out = cut_to(head, limit.saturating_sub(NOTE_RESERVE));
    let mut left_out = 0;
    for section in &sections {
        if left_out == 0 && out.len() + section.len() + NOTE_RESERVE <= limit {
            out.push_str(section);
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out.push_str(&format!(
            "\n_Plan truncated to stay under {limit} characters: {left_out} target section(s) left out. \
             `rollguard diff -o json` and the job log have everything._\n"
        ));
    }
    cut_to(out, limit)
}

fn plan_section(t: &TargetPlan) -> String {
    let mut out = format!("\n#### {}\n\n", text(&t.name));
    for e in &t.errors {
        out.push_str(&format!("- :x: {}\n", text(&e.headline())));
    }
    let line = |sign: &str, c: &PlannedChange| {
        let mut l = format!("- {sign} `{}`", code(&c.object));
        if let Some(note) = &c.note {
            l.push_str(&format!(": would create ({})", text(note)));
        }
        l.push('\n');
        l
    };
    for c in &t.create {
        out.push_str(&line("create", c));
    }
    for c in &t.update {
        out.push_str(&line("update", c));
        if let Some(diff) = &c.diff {
            let shown = super::diff::render(diff, super::diff::DiffStyle::plain(), "");
            // A fence longer than any run of backticks in the diff, so it cannot end early.
            let longest = shown.split(|ch| ch != '`').map(str::len).max().unwrap_or(0);
            let fence = "`".repeat(longest.max(2) + 1);
            out.push_str(&format!(
                "\n  <details><summary>diff</summary>\n\n{fence}diff\n{shown}{fence}\n\n  </details>\n\n"
            ));
        }
    }
    for d in &t.dropped {
        out.push_str(&format!(
            "- left in place `{}`: {}\n",
            code(d),
            super::plan::left_note(t)
        ));
    }
    for p in &t.prune {
        out.push_str(&format!(
            "- prune `{}`: no longer in the manifests; deleted after a healthy deploy (prune is on)\n",
            code(p)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::tests::{image_failure, report, target};
    use crate::report::model::*;

    fn options(limit: usize) -> MarkdownOptions {
        MarkdownOptions {
            limit,
            full_report: FullReport {
                run_url: Some("https://github.com/o/r/actions/runs/7".into()),
                json_path: Some("report.json".into()),
            },
        }
    }

    fn three_targets() -> Report {
        let mut eu = target("eu", TargetOutcome::RollbackFailed);
        eu.revision = Some(4);
        eu.failures.push(image_failure());
        eu.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: Some(3),
            outcome: TargetOutcome::RollbackFailed,
            left_in_place: vec![],
            message: Some("connection refused".into()),
        });
        let mut us = target("us", TargetOutcome::RolledBack);
        us.revision = Some(7);
        us.message = Some("policy rollback-all: eu failed".into());
        us.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: Some("3a30e4b".into()),
            as_revision: Some(8),
            to_revision: Some(6),
            outcome: TargetOutcome::RolledBack,
            left_in_place: vec!["ConfigMap shop/new-config".into()],
            message: None,
        });
        let mut ap = target("ap", TargetOutcome::Deployed);
        ap.revision = Some(2);
        ap.phases = vec![
            PhaseTiming::new("connect", 0.25),
            PhaseTiming::new("apply", 1.5),
        ];
        let mut r = report(vec![eu, us, ap]);
        r.run_url = Some("https://github.com/o/r/actions/runs/7".into());
        r
    }

    #[test]
    fn snapshot_three_targets() {
        insta::assert_snapshot!(to_markdown(
            &Clean::new(&three_targets()),
            &options(COMMENT_LIMIT)
        ));
    }

    #[test]
    fn snapshot_three_waves() {
        insta::assert_snapshot!(to_markdown(
            &Clean::new(&crate::report::model::tests::three_waves()),
            &options(COMMENT_LIMIT)
        ));
    }

    #[test]
    fn snapshot_checks() {
        insta::assert_snapshot!(to_markdown(
            &Clean::new(&crate::report::check_view::tests::checked_fleet()),
            &options(COMMENT_LIMIT)
        ));
    }

    #[test]
    fn the_canarys_chart_has_its_values_and_the_threshold_line() {
        let md = to_markdown(
            &Clean::new(&crate::report::check_view::tests::checked_fleet()),
            &options(COMMENT_LIMIT),
        );
        // Opened for the failed check, collapsed for the passing ones; one per target.
        let canary = md
            .split("<details open><summary>error-rate over the bake (fails above 0.01)</summary>")
            .nth(1)
            .unwrap_or_default();
        assert!(
            canary.contains(
                "xychart-beta\n  title \"error-rate and its threshold, fails above 0.01\"\n"
            ),
            "{md}"
        );
        assert!(
            canary.contains("  line [0.001, 0.002, 0.002, 0.004, 0.009, 0.021, 0.043]\n  line [0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]\n```"),
            "{md}"
        );
        assert_eq!(md.matches("xychart-beta").count(), 3, "{md}");
        assert_eq!(md.matches("<details><summary>error-rate over").count(), 2);
        // The verdicts: said in each target's summary and per check.
        assert!(
            md.contains("<summary>↩️ <b>canary</b>: rolled-back · checks: error-rate failed (0.043 &gt; 0.01), 1 passed</summary>"),
            "{md}"
        );
        assert!(
            md.contains("- ❌ `error-rate` failed (0\\.043 &gt; 0.01 at 08:00:32): 7 sample(s), fails if `> 0.01`\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "- ✅ `healthz` passed: 3 × 200, 1 × 503 · `https://canary.shop.example.com/healthz`\n"
            ),
            "{md}"
        );
        assert!(md.contains("<summary>✅ <b>eu</b>: deployed · checks: 2 passed</summary>"));
        // The failure's message once in the details (the failure line), not again per check.
        let details = md.split("<summary>↩️").nth(1).unwrap_or_default();
        assert_eq!(
            details
                .matches("error-rate = 0.043 &gt; 0.01 at 08:00:32")
                .count(),
            1,
            "{md}"
        );
    }

    #[test]
    fn hostile_check_text_cannot_break_the_markdown_or_the_chart() {
        let hostile =
            "x```\n</details>\n%%{init: {'theme':'dark'}}%%\n::error::pwned\n<b>@admin #1";
        let mut r = crate::report::check_view::tests::checked_fleet();
        for t in &mut r.targets {
            for c in &mut t.checks {
                c.name = format!("{}{hostile}", c.name);
                c.source = hostile.into();
                c.fail_if = Some(hostile.into());
                c.message = Some(hostile.into());
                for s in &mut c.samples {
                    s.note = Some(hostile.into());
                }
            }
        }
        r.targets[0].checks[0].samples[3].value = Some(f64::INFINITY);
        r.targets[1].checks[0].threshold = Some(f64::NAN);
        let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
        // Fences: three charts and the timeline, each opened and closed once; backticks
        // elsewhere only inside a <summary> (raw HTML, where markdown is not read).
        let fences: Vec<&str> = md.lines().filter(|l| l.starts_with("```")).collect();
        assert_eq!(fences, ["```mermaid", "```"].repeat(4), "{md}");
        for line in md
            .lines()
            .filter(|l| l.contains("```") && !l.starts_with("```"))
        {
            assert!(line.starts_with("<details"), "{line:?}");
        }
        // Every <details> is closed by our own line, and no other line closes one.
        assert_eq!(
            md.matches("<details").count(),
            md.lines().filter(|l| *l == "</details>").count(),
            "{md}"
        );
        for line in md.lines() {
            let line = line.trim_start();
            assert!(!line.starts_with("</") || line == "</details>", "{line:?}");
            // No line is a workflow command.
            assert!(!line.starts_with("::"), "{line:?}");
        }
        // Outside code spans (where GitHub shows text as it is): no raw HTML, mention or
        // reference.
        let prose: String = md
            .lines()
            .filter(|l| !l.starts_with("```"))
            .map(|l| {
                // An escaped backtick is a backtick, not the start of a span.
                l.replace("\\`", "")
                    .split('`')
                    .step_by(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n");
        for bad in ["<b>@", "@admin", "#1", "\n%%", "</details> "] {
            assert!(!prose.contains(bad), "{bad:?} in\n{prose}");
        }
        // Inside a chart: only its statements, numbers and cleaned names.
        let mut rest = md.as_str();
        while let Some(i) = rest.find("```mermaid\nxychart-beta\n") {
            let body = &rest[i + "```mermaid\n".len()..];
            let end = body.find("```").unwrap_or(body.len());
            let lines: Vec<&str> = body[..end].lines().collect();
            assert!(lines.len() == 5 || lines.len() == 6, "{lines:?}");
            for line in &lines[1..] {
                let statement = line.trim_start().split(' ').next().unwrap_or_default();
                assert!(
                    ["title", "x-axis", "y-axis", "line"].contains(&statement),
                    "{line:?}"
                );
                assert!(!line.contains(['%', '{', '}', '`', ':', '<']), "{line:?}");
                // Quotes only around whole labels: an even number.
                assert_eq!(line.matches('"').count() % 2, 0, "{line:?}");
            }
            rest = &body[end..];
        }
    }

    #[test]
    fn charts_go_before_pod_lines_when_a_large_fleet_must_be_cut() {
        let mut r = big_report(40, 0);
        for t in &mut r.targets {
            let mut c = crate::report::check_view::tests::error_rate(
                &[0.0012345; 300],
                CheckVerdict::Passed,
            );
            for (i, s) in c.samples.iter_mut().enumerate() {
                s.time = crate::report::model::tests::ts(i as i64 * 10);
            }
            t.checks = vec![c];
        }
        let full = to_markdown(&Clean::new(&r), &options(STEP_SUMMARY_LIMIT));
        assert_eq!(full.matches("xychart-beta").count(), 40);
        // 60 points per chart at most, for 300 samples.
        assert!(full.contains(&format!("  line [{}]\n", vec!["0.0012345"; 60].join(", "))));
        let md = to_markdown(&Clean::new(&r), &options(20_000));
        assert!(md.len() <= 20_000);
        assert!(!md.contains("xychart-beta"), "{md}");
        assert!(md.contains("40 check chart(s)"), "{md}");
        // The verdict lines stay.
        assert_eq!(md.matches("- ✅ `error-rate` passed").count(), 40, "{md}");
    }

    #[test]
    fn a_healthy_fleets_check_sections_go_before_a_problems_section() {
        let mut targets: Vec<TargetReport> = (0..300)
            .map(|i| {
                let mut t = target(&format!("cluster-{i:03}"), TargetOutcome::Deployed);
                t.checks = vec![
                    crate::report::check_view::tests::error_rate(
                        &[0.001, 0.002, 0.001],
                        CheckVerdict::Passed,
                    ),
                    crate::report::check_view::tests::healthz(&[Some(200.0)], CheckVerdict::Passed),
                ];
                t
            })
            .collect();
        let mut last = target("last", TargetOutcome::Failed);
        last.failures.push(image_failure());
        targets.push(last);
        let md = to_markdown(&Clean::new(&report(targets)), &options(COMMENT_LIMIT));
        assert!(md.len() <= COMMENT_LIMIT);
        assert!(
            md.contains("<summary>❌ <b>last</b>: failed</summary>"),
            "{md}"
        );
        assert!(!md.contains("<b>cluster-000</b>"), "{md}");
        assert!(
            md.contains(": the check section(s) of 300 target(s) without a problem left out."),
            "{md}"
        );
        // Where it fits, every target with checks has its section, in target order.
        let small = report(vec![
            crate::report::check_view::tests::checked_fleet().targets[1].clone(),
            {
                let mut t = target("last", TargetOutcome::Failed);
                t.failures.push(image_failure());
                t
            },
        ]);
        let md = to_markdown(&Clean::new(&small), &options(COMMENT_LIMIT));
        let eu = md.find("<b>eu</b>").unwrap_or(usize::MAX);
        let last = md.find("<b>last</b>").unwrap_or(0);
        assert!(eu < last, "{md}");
    }

    /// The Mermaid chart of a body, between its fences.
    fn chart(md: &str) -> &str {
        let start = md
            .find("```mermaid\n")
            .map_or(0, |i| i + "```mermaid\n".len());
        let end = md[start..].find("```").map_or(md.len(), |i| start + i);
        &md[start..end]
    }

    /// Wave 0 (canary) deployed and baked 10 s; in wave 1, us failed at 14 s and, under
    /// rollback-all, the canary and us rolled back from 15 s; wave 2 was skipped.
    fn policy_waves() -> Report {
        let at = crate::report::model::tests::ts;
        let mut canary = target("canary", TargetOutcome::RolledBack);
        canary.phases = vec![
            PhaseTiming::new("apply", 1.0),
            PhaseTiming::new("wait", 1.0),
            PhaseTiming::new(BAKE_PHASE, 10.0),
            PhaseTiming::new(ROLLBACK_PHASE, 2.0),
        ];
        canary.finished_at = at(17);
        let rollback = |started: i64, why: &str| {
            Some(RollbackReport {
                started_at: Some(at(started)),
                why: Some(why.into()),
                as_revision: Some(5),
                ..RollbackReport::new(TargetOutcome::RolledBack, Some(3))
            })
        };
        canary.rollback = rollback(15, "policy rollback-all: us failed at 08:00:14");
        let mut us = target("us", TargetOutcome::RolledBack);
        us.wave = 1;
        us.started_at = at(12);
        us.finished_at = at(16);
        us.phases = vec![
            PhaseTiming::new("apply", 1.0),
            PhaseTiming::new("wait", 1.0),
        ];
        // Its rollback phase was not timed (cut short): the bar runs to its end.
        us.rollback = rollback(15, "failed");
        let mut sa = target("sa", TargetOutcome::Skipped);
        sa.wave = 2;
        report(vec![canary, us, sa])
    }

    #[test]
    fn gantt_has_a_section_per_wave_a_bake_bar_and_rollbacks_from_their_start() {
        let md = to_markdown(&Clean::new(&policy_waves()), &options(COMMENT_LIMIT));
        assert_eq!(
            chart(&md),
            "gantt
  dateFormat x
  axisFormat %M:%S
  section wave 0
  canary apply :0, 1000
  canary wait :1000, 2000
  canary bake :active, 2000, 12000
  canary rollback :crit, 15000, 17000
  section wave 1
  us apply :12000, 13000
  us wait :13000, 14000
  us rollback :crit, 15000, 16000
",
            "{md}"
        );
        // The table says why each went back.
        assert!(
            md.contains("| v3: policy rollback-all: us failed at 08:00:14 |"),
            "{md}"
        );
        assert!(md.contains("| v3: failed |"), "{md}");
        assert!(
            md.contains(
                "Rollback started at 08:00:15 UTC: policy rollback-all: us failed at 08:00:14\n"
            ),
            "{md}"
        );
    }

    #[test]
    fn one_wave_keeps_a_section_per_target_and_marks_bake_and_rollback() {
        let mut r = policy_waves();
        r.targets.iter_mut().for_each(|t| t.wave = 0);
        r.targets.truncate(2);
        if let Some(rb) = r.targets[0].rollback.as_mut() {
            // Not known when it started: the rollback ends when the target did.
            rb.started_at = None;
        }
        let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
        assert_eq!(
            chart(&md),
            "gantt
  dateFormat x
  axisFormat %M:%S
  section canary
  apply :0, 1000
  wait :1000, 2000
  bake :active, 2000, 12000
  rollback :crit, 15000, 17000
  section us
  apply :12000, 13000
  wait :13000, 14000
  rollback :crit, 15000, 16000
",
            "{md}"
        );
    }

    #[test]
    fn a_target_name_cannot_break_the_chart() {
        let hostile = "eu: 0, 1; x #1\nsection evil\n  end :crit, 0, 9\n%%{init}%%";
        for waves in [true, false] {
            let mut r = policy_waves();
            r.targets[1].name = hostile.into();
            if !waves {
                r.targets.iter_mut().for_each(|t| t.wave = 0);
            }
            let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
            // The only fence is the chart's, opened and closed once.
            assert_eq!(md.matches("```").count(), 2, "{md}");
            let lines: Vec<&str> = chart(&md).lines().collect();
            let sections = lines.iter().filter(|l| l.starts_with("  section ")).count();
            let bars: Vec<&str> = lines.iter().copied().filter(|l| l.contains(" :")).collect();
            // Exactly what was drawn: 2 sections, 4 + 3 bars; nothing the name made up.
            assert_eq!(
                (lines.len(), sections, bars.len()),
                (3 + 2 + 7, 2, 7),
                "{md}"
            );
            for line in &lines[3..] {
                let Some(rest) = line.strip_prefix("  ") else {
                    panic!("{line:?} in\n{md}");
                };
                if let Some(section) = rest.strip_prefix("section ") {
                    assert!(!section.contains([':', ';', '#', '%', '`']), "{line:?}");
                    continue;
                }
                let (label, times) = rest.split_once(" :").unwrap_or_default();
                assert!(
                    !label.is_empty() && !label.contains([':', ';', '#', '%', '`', ',']),
                    "{line:?}"
                );
                // Tags, then two numbers: the name cannot add a tag or a time.
                let parts: Vec<&str> = times.split(", ").collect();
                let (tags, numbers) = parts.split_at(parts.len().saturating_sub(2));
                assert!(
                    tags.iter().all(|t| ["active", "crit"].contains(t)),
                    "{line:?}"
                );
                assert!(
                    numbers.len() == 2 && numbers.iter().all(|n| n.parse::<i64>().is_ok()),
                    "{line:?}"
                );
            }
        }
    }

    #[test]
    fn an_unchanged_target_says_no_changes_in_the_summary_and_its_row() {
        let mut eu = target("eu", TargetOutcome::Deployed);
        eu.unchanged = true;
        eu.message = Some("no changes: the manifests are those of v3".into());
        let mut us = target("us", TargetOutcome::Deployed);
        us.revision = Some(4);
        let md = to_markdown(&Clean::new(&report(vec![eu, us])), &options(COMMENT_LIMIT));
        assert!(md.contains("no changes on 1 of 2"), "{md}");
        let row = md
            .lines()
            .find(|l| l.starts_with("| eu |"))
            .unwrap_or_default();
        assert!(
            row.contains("no changes: the manifests are those of v3"),
            "{md}"
        );
    }

    #[test]
    fn container_logs_are_collapsed_and_cannot_break_the_markdown() {
        let mut eu = target("eu", TargetOutcome::Failed);
        let mut f = image_failure();
        f.reason = "CrashLoopBackOff".into();
        f.logs = vec![ContainerLog {
            pod: "web-<b>1".into(),
            container: "web".into(),
            previous: true,
            lines: vec![
                "boot".into(),
                "```".into(),
                "</details>".into(),
                "<!-- x".into(),
                "ok ````".into(),
            ],
            error: None,
        }];
        eu.failures.push(f);
        let md = to_markdown(&Clean::new(&report(vec![eu])), &options(COMMENT_LIMIT));
        let start = md
            .find("<details><summary>log of pod web-&lt;b&gt;1 container web (previous instance)</summary>")
            .unwrap_or_else(|| panic!("{md}"));
        let block = &md[start..];
        // The fence is longer than any backtick run in the lines: nothing inside closes it.
        assert!(
            block
                .contains("`````text\nboot\n```\n</details>\n<!-- x\nok ````\n`````\n\n</details>"),
            "{block}"
        );
    }

    #[test]
    fn a_dirty_tree_is_said_in_the_header_and_the_table() {
        let mut r = three_targets();
        let clean = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
        assert!(!clean.contains("dirty"), "{clean}");
        if let Some(c) = r.commit.as_mut() {
            c.dirty = true;
        }
        let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
        assert!(
            md.contains("commit `0123456` (dirty: uncommitted changes were deployed)"),
            "{md}"
        );
        assert!(md.contains("| `0123456` (dirty) |"), "{md}");
    }

    #[test]
    fn a_failed_script_shows_its_tail_in_a_fence_it_cannot_close() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.stages.push(StageResult {
            name: "migrate".into(),
            scope: "target".into(),
            rollback: false,
            outcome: StageOutcome::Failed,
            exit_code: Some(3),
            seconds: 1.0,
            message: Some("exited with code 3".into()),
            output: (0..30)
                .map(|i| format!("line {i}"))
                .chain(["```".to_string(), "@admin <b>".to_string()])
                .collect(),
        });
        let md = to_markdown(&Clean::new(&report(vec![t])), &options(COMMENT_LIMIT));
        assert!(
            md.contains("**script `migrate`**: failed: exited with code 3\n\n````text\n"),
            "{md}"
        );
        // The last 20 lines, as they were, inside a fence longer than any backtick run.
        assert!(
            !md.contains("line 11\n")
                && md.contains("line 12\n")
                && md.contains("```\n@admin <b>\n````\n"),
            "{md}"
        );
        // Cut after the events: a note counts the log lines left out.
        let tight = to_markdown(
            &Clean::new(&report(vec![{
                let mut t = target("eu", TargetOutcome::Failed);
                t.stages = vec![StageResult {
                    output: vec!["x".repeat(200); 20],
                    ..report_stage()
                }];
                t
            }])),
            &options(2_000),
        );
        assert!(tight.len() <= 2_000);
        assert!(tight.contains("script or container log line(s)"), "{tight}");
    }

    fn report_stage() -> StageResult {
        StageResult {
            name: "smoke".into(),
            scope: "target".into(),
            rollback: false,
            outcome: StageOutcome::Failed,
            exit_code: Some(1),
            seconds: 1.0,
            message: None,
            output: vec![],
        }
    }

    #[test]
    fn first_deploy_failure_says_nothing_was_deleted() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.failures.push(image_failure());
        t.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: None,
            outcome: TargetOutcome::Failed,
            left_in_place: vec!["Deployment shop/web".into()],
            message: None,
        });
        let md = to_markdown(&Clean::new(&report(vec![t])), &options(COMMENT_LIMIT));
        assert!(
            md.contains("there was no earlier good release to go back to; nothing was deleted\n"),
            "{md}"
        );
        assert!(
            md.contains("Left in place (rollback never prunes; delete by hand if unwanted):\n\n- `Deployment shop/web`\n"),
            "{md}"
        );
        assert!(
            md.contains("| nothing to go back to | Deployment shop/web |"),
            "{md}"
        );
    }

    #[test]
    fn hostile_text_is_inert() {
        let mut t = target("eu|<b>x</b>", TargetOutcome::Failed);
        t.message =
            Some("<script> a|b\n::set-output name=x::y @admin #1 [l](https://e.x) ![i](j)".into());
        t.failures.push(Failure {
            object: "Deployment shop/we`b".into(),
            reason: "**Bad**".into(),
            message: "end\n```\n<img src=x>".into(),
            ..Default::default()
        });
        t.phases.push(PhaseTiming::new("x\nend", 1.0));
        let mut r = report(vec![t]);
        r.run_url = Some("javascript:alert(1)".into());
        let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
        for bad in [
            "<script>",
            "<b>x",
            "<img",
            "@admin",
            "#1 ",
            "](https://",
            "![",
            "\n::set-output",
            "javascript:",
            "we`b",
            "\nend\n",
            "**Bad**",
        ] {
            assert!(!md.contains(bad), "{bad:?} in\n{md}");
        }
        // The only code fence is the Mermaid chart's, opened and closed once.
        assert_eq!(md.matches("```").count(), 2, "{md}");
    }

    fn big_report(targets: usize, failures: usize) -> Report {
        let ts: Vec<_> = (0..targets)
            .map(|i| {
                let mut t = target(&format!("cluster-{i:03}"), TargetOutcome::Failed);
                t.phases.push(PhaseTiming::new("apply", 1.0));
                for j in 0..failures {
                    let mut f = image_failure();
                    f.pod = Some(format!("web-{j}"));
                    f.message = "é".repeat(400);
                    f.events = (0..20).map(|k| format!("event {k}")).collect();
                    t.failures.push(f);
                }
                t
            })
            .collect();
        report(ts)
    }

    #[test]
    fn truncation_keeps_under_limit_with_note() {
        for (targets, failures, limit) in [
            (1, 200, COMMENT_LIMIT),
            (50, 20, COMMENT_LIMIT),
            (300, 20, COMMENT_LIMIT),
            (3000, 1, COMMENT_LIMIT),
            (50, 20, 5_000),
            (5, 1, 1_500),
        ] {
            let md = to_markdown(&Clean::new(&big_report(targets, failures)), &options(limit));
            assert!(
                md.len() <= limit,
                "{targets}x{failures}: {} > {limit}",
                md.len()
            );
            assert!(md.starts_with("### ❌ rollguard"), "{md}");
            assert!(
                md.contains("Cut to stay under"),
                "{targets}x{failures}@{limit}"
            );
            assert!(
                md.contains("The full report is in the step summary of [the workflow run](https://github.com/o/r/actions/runs/7), the JSON report `report.json`, the job log."),
                "{targets}x{failures}@{limit}: {md}"
            );
        }
    }

    #[test]
    fn events_go_before_pod_lines() {
        // One target, 200 failing pods: events are cut first, then pod lines.
        let md = to_markdown(&Clean::new(&big_report(1, 200)), &options(COMMENT_LIMIT));
        assert!(!md.contains("event: event"), "events should be cut first");
        let shown = md.matches("pod `web-").count();
        // Events are counted for the pods shown; a cut pod line takes its events along.
        assert!(
            md.contains(&format!("{} older Warning event(s)", shown * 20)),
            "{md}"
        );
        assert!(shown > 10 && shown < 200, "{shown}");
        assert!(md.contains(&format!("{} failing pod/container line(s)", 200 - shown)));
        assert!(md.contains(&format!("- and {} more", 200 - shown)));
        // The timeline survives a cut of details.
        assert!(md.contains("```mermaid"));
    }

    #[test]
    fn oldest_events_are_cut_first() {
        // Just over the limit: only some events go, and those are the oldest.
        let r = big_report(3, 2);
        let full = to_markdown(&Clean::new(&r), &options(STEP_SUMMARY_LIMIT));
        assert!(!full.contains("Cut to stay"));
        assert!(full.contains("event: event 0\n") && full.contains("event: event 19\n"));
        let md = to_markdown(&Clean::new(&r), &options(full.len() - 1));
        assert!(
            md.contains("event: event 19\n") && !md.contains("event: event 0\n"),
            "{md}"
        );
        assert!(md.contains("older Warning event(s)"));
    }

    /// 1,000 targets rolled back because one failed: a cut comment still shows that one's
    /// row and its failure, not only the first rows of those that went along.
    #[test]
    fn a_cut_report_keeps_the_target_that_failed() {
        let targets = (0..1000)
            .map(|i| {
                let mut t = target(&format!("cluster-{i:04}"), TargetOutcome::RolledBack);
                let why = "policy rollback-all: cluster-0500 failed at 05:31:14";
                t.message = Some(why.into());
                let mut rollback = RollbackReport::new(TargetOutcome::RolledBack, Some(1));
                rollback.why = Some(why.into());
                t.rollback = Some(rollback);
                if i == 500 {
                    t.failures.push(image_failure());
                }
                t
            })
            .collect();
        let report = report(targets);
        for limit in [COMMENT_LIMIT, 20_000] {
            let md = to_markdown(&Clean::new(&report), &options(limit));
            assert!(md.len() <= limit, "{}", md.len());
            assert!(md.contains("table row(s)"), "the table was cut at {limit}");
            assert!(md.contains("| cluster-0500 |"), "its row at {limit}");
            assert!(md.contains("web-7d9f-x"), "its failing pod at {limit}");
            // Its section too, with its failing pod's line.
            assert!(md.contains("<b>cluster-0500</b>: rolled-back"), "{md}");
            assert!(md.contains("999 target detail section(s)"), "{md}");
            assert!(!md.contains("failing pod/container line(s)"), "{md}");
            // A rollback by the policy says why once, in the reason, not again after "v1".
            assert!(
                md.contains("| policy rollback-all: cluster-0500 failed at 05:31:14 | v1 |  |\n"),
                "{md}"
            );
        }
    }

    #[test]
    fn table_is_whole_when_sections_go() {
        let md = to_markdown(&Clean::new(&big_report(50, 20)), &options(COMMENT_LIMIT));
        for i in 0..50 {
            assert!(md.contains(&format!("| cluster-{i:03} |")));
        }
    }

    #[test]
    fn largest_fitting_table() {
        assert_eq!(largest_fitting(10, |k| k <= 4), Some(4));
        assert_eq!(largest_fitting(10, |_| true), Some(10));
        assert_eq!(largest_fitting(10, |_| false), None);
        assert_eq!(largest_fitting(0, |_| true), Some(0));
    }

    #[test]
    fn plan_comment_has_diffs_notes_and_limit() {
        let plan = crate::report::plan::tests::sample();
        let md = plan_to_markdown(&Clean::new(&plan), COMMENT_LIMIT);
        assert!(
            md.starts_with("### rollguard: Plan (server-side dry run) of `shop`"),
            "{md}"
        );
        assert!(md.contains("| eu | 1 | 1 | 1 | 0 | changes |"), "{md}");
        assert!(md.contains("```diff\n--- live\n"), "{md}");
        assert!(md.contains("+image: web:v2\n"), "{md}");
        assert!(
            md.contains("would create (CRD not yet on the cluster)"),
            "{md}"
        );
        assert!(md.contains(":x: cluster: ConnectionRefused"), "{md}");
        let mut big = plan.clone();
        big.targets[0].update[0].diff = Some("+x\n".repeat(5000));
        let md = plan_to_markdown(&Clean::new(&big), 900);
        assert!(md.len() <= 900, "{}", md.len());
        assert!(md.contains("Plan truncated"), "{md}");
        let md = plan_to_markdown(&Clean::new(&big), COMMENT_LIMIT);
        assert!(md.contains("diff cut here: 4800 more line(s)"), "{md}");
    }

    #[test]
    fn plan_comment_says_what_is_left_in_place_and_what_would_be_pruned() {
        let mut plan = crate::report::plan::tests::sample();
        plan.targets[1].dropped.push("ConfigMap shop/kept".into());
        plan.targets[1].prune.push("ConfigMap shop/legacy".into());
        let md = plan_to_markdown(&Clean::new(&plan), COMMENT_LIMIT);
        for want in [
            "- left in place `ConfigMap shop/kept`: no longer in the manifests; left in place (`prune: true` or `--prune`",
            "- prune `ConfigMap shop/legacy`: no longer in the manifests; deleted after a healthy deploy (prune is on)\n",
        ] {
            assert!(md.contains(want), "{want:?} not in\n{md}");
        }
    }

    #[test]
    fn a_deployed_target_with_dropped_objects_gets_a_section_saying_them() {
        let mut t = target("eu", TargetOutcome::Deployed);
        t.dropped.push(DroppedObject {
            object: "ConfigMap shop/legacy".into(),
            fate: DroppedFate::Pruned,
            note: None,
        });
        let md = to_markdown(&Clean::new(&report(vec![t])), &options(COMMENT_LIMIT));
        assert!(
            md.contains("**Dropped from the manifests:**\n\n- pruned: ConfigMap shop/legacy, dropped from the manifests in this revision\n"),
            "{md}"
        );
    }

    #[test]
    fn a_saved_plan_is_named_by_its_digest_in_the_plan_and_the_deploy_comment() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let mut plan = crate::report::plan::tests::sample();
        let md = plan_to_markdown(&Clean::new(&plan), COMMENT_LIMIT);
        assert!(!md.contains("Saved as plan"), "{md}");
        plan.saved_as = Some(digest.clone());
        let md = plan_to_markdown(&Clean::new(&plan), COMMENT_LIMIT);
        assert!(md.contains(&format!("Saved as plan `{digest}`")), "{md}");

        let mut r = three_targets();
        let used = |replanned: bool, mismatches: Vec<String>| SavedPlanUse {
            digest: digest.clone(),
            made_at: "2027-01-15T07:00:00Z".parse().unwrap(),
            pr: Some(42),
            replanned,
            mismatches,
        };
        // (what the deploy did with the plan, the line every sink says)
        let cases = [
            (
                used(false, vec![]),
                format!("applied plan {digest} made at 2027-01-15 07:00:00 UTC on PR #42"),
            ),
            (
                used(true, vec![]),
                format!(
                    "re-planned: plan {digest} made at 2027-01-15 07:00:00 UTC on PR #42 no longer held"
                ),
            ),
            (
                used(false, vec!["Deployment shop/web changed".into()]),
                format!("refused plan {digest} made at 2027-01-15 07:00:00 UTC on PR #42: 1 moved"),
            ),
        ];
        for (saved, line) in cases {
            r.saved_plan = Some(saved);
            let md = to_markdown(&Clean::new(&r), &options(COMMENT_LIMIT));
            // `#42` is escaped in markdown (no autolink from a value rollguard was given).
            assert!(md.contains(&text(&line)), "{line}\n{md}");
            let table = crate::report::terminal::to_table(&Clean::new(&r), false, Some(120));
            assert!(table.contains(&line), "{line}\n{table}");
        }
        r.saved_plan = Some(used(false, vec!["x".into()]));
        assert_eq!(exit_code(&r), 2);
    }
}
