//! The final table printed at the end of a run.

use super::check_view;
use super::clean::Clean;
use super::model::{
    ContainerLog, Report, TargetOutcome, TargetReport, clip, clip_columns, display_width,
};
use crate::util::duration::format_duration;

/// The table's short reason (the reason class); the full text is in the details below it.
const REASON_CHARS: usize = 48;

/// The narrowest the reason column gets on a narrow terminal.
const MIN_REASON_COLUMNS: usize = 12;

/// Where the CHECKS column goes (before the reason, which is cut first on a narrow terminal),
/// and its widest.
const CHECKS_COLUMN: usize = 4;
const CHECKS_COLUMNS: usize = 48;

/// A plain-text table, one row per target ([`table_row`]; under a heading per wave, "wave 1
/// (bake 10m)", when the run has more than one; with a CHECKS column of each target's short
/// check verdict when any ran checks), the details of every failure in full, then
/// the summary line. With `color`, what happened is colored with ANSI SGR codes;
/// without, the output has no escape codes at all (not a TTY, or NO_COLOR set). With
/// `columns` (stdout is a terminal that wide), the reason column is cut so that rows do not
/// wrap; the details below still say every reason in full.
pub fn to_table(report: &Clean<Report>, color: bool, columns: Option<usize>) -> String {
    // A CHECKS column (the short verdict of `checks:`) only when some target ran checks.
    let with_checks = report.targets.iter().any(|t| !t.checks.is_empty());
    let mut headers = vec!["TARGET", "HAPPENED", "RUNS NOW", "DURATION", "REASON"];
    if with_checks {
        headers.insert(CHECKS_COLUMN, "CHECKS");
    }
    let mut rows: Vec<Vec<String>> = report
        .targets
        .iter()
        .map(|t| {
            let mut row = table_row(report, t).to_vec();
            if with_checks {
                let verdict = check_view::short_verdict(&t.checks)
                    .map(|v| clip_columns(&v, CHECKS_COLUMNS))
                    .unwrap_or_default();
                row.insert(CHECKS_COLUMN, verdict);
            }
            row
        })
        .collect();
    let reason = headers.len() - 1;
    let widths_of = |rows: &[Vec<String>]| {
        let mut widths: Vec<usize> = headers.iter().map(|h| display_width(h)).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(display_width(cell));
            }
        }
        widths
    };
    let mut widths = widths_of(&rows);
    if let Some(columns) = columns {
        // The columns and their two-space gaps before the reason.
        let before: usize = widths[..reason].iter().sum::<usize>() + reason * 2;
        let room = columns.saturating_sub(before).max(MIN_REASON_COLUMNS);
        if widths[reason] > room {
            for row in &mut rows {
                row[reason] = clip_columns(&row[reason], room);
            }
            widths = widths_of(&rows);
        }
    }

    let mut out = String::new();
    let header: Vec<String> = headers
        .iter()
        .zip(&widths)
        .map(|(h, w)| pad(h, *w))
        .collect();
    push_line(&mut out, &header, color.then_some("1"));
    let push_row = |out: &mut String, i: usize| {
        let (Some(row), Some(target)) = (rows.get(i), report.targets.get(i)) else {
            return;
        };
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                let padded = pad(cell, *w);
                match (i, color) {
                    (1, true) => paint(&padded, outcome_color(target.outcome)),
                    _ => padded,
                }
            })
            .collect();
        push_line(out, &cells, None);
    };
    let waves = report.waves();
    if waves.len() > 1 {
        // A heading per wave, its targets under it in config order.
        for wave in &waves {
            push_line(&mut out, &[wave.heading()], color.then_some("1"));
            for (i, _) in report
                .targets
                .iter()
                .enumerate()
                .filter(|(_, t)| t.wave == wave.number)
            {
                push_row(&mut out, i);
            }
        }
    } else {
        (0..rows.len()).for_each(|i| push_row(&mut out, i));
    }
    out.push('\n');
    let details = failure_details(report);
    if !details.is_empty() {
        out.push_str(&details);
        out.push('\n');
    }
    if let Some(saved) = &report.saved_plan {
        out.push_str(&saved.line());
        out.push('\n');
    }
    // Said only when targets waited for a slot: then the bound explains the wall time.
    if let Some(c) = &report.concurrency
        && c.value < report.targets.len()
    {
        out.push_str(&format!(
            "{} of {} targets at once: {}\n",
            c.value,
            report.targets.len(),
            c.reason
        ));
    }
    let summary = format!("{}: {}", report.app, report.summary);
    if color {
        out.push_str(&paint(&summary, outcome_color(report.outcome)));
    } else {
        out.push_str(&summary);
    }
    out.push('\n');
    out
}

/// One target's row: its name, what happened (`deployed 7`, `rolled back 7 → 5 (as 8)`),
/// what it runs now (`v8 (3a30e4b)`: the revision and its commit; `-` when not known), the
/// duration and the short reason.
pub fn table_row(report: &Report, t: &TargetReport) -> [String; 5] {
    let revision = |r: Option<u64>| r.map(|r| format!(" {r}")).unwrap_or_default();
    let back = t.rollback.as_ref().filter(|rb| {
        rb.to_revision.is_some()
            && matches!(
                rb.outcome,
                TargetOutcome::RolledBack | TargetOutcome::RollbackFailed
            )
    });
    let went_back = |rb: &super::model::RollbackReport| {
        let to = rb
            .to_revision
            .map(|r| format!(" → {r}"))
            .unwrap_or_default();
        let as_ = rb
            .as_revision
            .map(|r| format!(" (as {r})"))
            .unwrap_or_default();
        format!("{to}{as_}")
    };
    let new = revision(t.revision);
    let happened = match (t.outcome, back) {
        (TargetOutcome::Deployed, _) => format!("deployed{new}"),
        (TargetOutcome::RolledBack, Some(rb)) => format!("rolled back{new}{}", went_back(rb)),
        (TargetOutcome::RolledBack, None) => format!("rolled back{new}"),
        (TargetOutcome::RollbackFailed, Some(rb)) => {
            format!("rollback failed{new}{}", went_back(rb))
        }
        (TargetOutcome::RollbackFailed, None) => format!("rollback failed{new}"),
        (TargetOutcome::Cancelled, Some(rb)) if rb.outcome == TargetOutcome::RolledBack => {
            format!("cancelled{new}, rolled back{}", went_back(rb))
        }
        (TargetOutcome::Cancelled, _) => format!("cancelled{new}"),
        (TargetOutcome::Failed, _) => format!("failed{new}"),
        (TargetOutcome::Skipped, _) => "skipped".to_string(),
    };
    let with_commit = |rev: u64, commit: Option<&str>| match commit {
        Some(c) => format!("v{rev} ({c})"),
        None => format!("v{rev}"),
    };
    let ours = report.commit.as_ref().map(|c| c.short_sha());
    // A rollback that stopped after re-applying all the failed revision had sent leaves
    // the target failed, on the good revision (policy::unfinished_rollback_outcome).
    let rolled_back = t.rollback.as_ref().filter(|rb| {
        rb.outcome == TargetOutcome::RolledBack
            || (rb.outcome == TargetOutcome::Failed
                && t.outcome == TargetOutcome::Failed
                && rb.to_revision.is_some())
    });
    let runs_now = match (t.outcome, rolled_back) {
        (TargetOutcome::Skipped | TargetOutcome::RollbackFailed, _) => None,
        (_, Some(rb)) => rb
            .as_revision
            .or(rb.to_revision)
            .map(|rev| with_commit(rev, rb.to_commit.as_deref())),
        (_, None) => t.revision.map(|rev| with_commit(rev, ours)),
    }
    .unwrap_or_else(|| "-".to_string());
    [
        t.name.clone(),
        happened,
        runs_now,
        format_duration(t.duration()),
        t.short_reason()
            .map(|r| clip(&r.replace(['\r', '\n'], " "), REASON_CHARS))
            .unwrap_or_default(),
    ]
}

/// Most recent Warning events shown per failure (the JSON report has them all).
const EVENTS_SHOWN: usize = 5;

/// Last lines of a failed script shown under its failure (the JSON report has 20).
const OUTPUT_SHOWN: usize = 10;

/// The captured last lines of the script stage a failure names ("stage smoke",
/// "stage migrate (fleet)"); empty for any other failure.
fn script_output<'a>(target: &'a TargetReport, object: &str) -> &'a [String] {
    let Some(name) = object.strip_prefix("stage ") else {
        return &[];
    };
    let name = name.strip_suffix(" (fleet)").unwrap_or(name);
    target
        .stages
        .iter()
        .rev()
        .find(|s| s.name == name && !s.rollback)
        .map_or(&[], |s| s.output.as_slice())
}

/// The end of one container's log under its failure: a heading line, then its lines
/// (control characters shown as spaces), or why it could not be read.
fn container_log(log: &ContainerLog) -> String {
    let instance = if log.previous {
        ", previous instance"
    } else {
        ""
    };
    let mut out = format!(
        "    log of pod {} container {}{instance}:\n",
        log.pod, log.container
    );
    if let Some(error) = &log.error {
        out.push_str(&format!("    | ({error})\n"));
    }
    if log.lines.is_empty() && log.error.is_none() {
        out.push_str("    | (empty)\n");
    }
    for line in &log.lines {
        let shown: String = line
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        out.push_str(&format!("    | {shown}\n"));
    }
    out
}

/// The shortest event text taken for a repeat of the headline (shorter ones may match by
/// chance).
const MIN_REPEAT_CHARS: usize = 20;

/// Whether an event (`pod NAME: Reason: message`) only repeats its failure's headline: the
/// kubelet says a pull error both in the container's status (the headline) and in `Failed`
/// events (`Failed to pull image "x": <the same error>`, `Error: ErrImagePull`). Said once is
/// enough; an event that adds anything stays.
pub(crate) fn repeats_headline(event: &str, headline: &str) -> bool {
    let message = event.splitn(3, ": ").nth(2).unwrap_or(event);
    if let Some(reason) = message.strip_prefix("Error: ") {
        return !reason.contains(' ') && headline.contains(reason);
    }
    let core = message.split_once("\": ").map_or(message, |(_, rest)| rest);
    core.chars().count() >= MIN_REPEAT_CHARS && headline.contains(core)
}

/// Every failure in full, once: each target's failures (with their Warning events), a failed
/// rollback's message, a reason the table could only give in short, and what became of the
/// objects the manifests dropped. One block per target, those that failed themselves first
/// (before a thousand stopped by the policy).
fn failure_details(report: &Report) -> String {
    let mut out = String::new();
    for target in report
        .failed_first()
        .into_iter()
        .map(|i| &report.targets[i])
    {
        let mut block = String::new();
        for failure in &target.failures {
            block.push_str(&format!("  {}\n", failure.headline()));
            let headline = failure.headline();
            let events: Vec<&String> = failure
                .events
                .iter()
                .filter(|e| !repeats_headline(e, &headline))
                .collect();
            let skip = events.len().saturating_sub(EVENTS_SHOWN);
            for event in &events[skip..] {
                block.push_str(&format!("    event: {event}\n"));
            }
            for log in &failure.logs {
                block.push_str(&container_log(log));
            }
            // A failed script's last lines: on a terminal its output is logged nowhere else.
            let output = script_output(target, &failure.object);
            for line in &output[output.len().saturating_sub(OUTPUT_SHOWN)..] {
                block.push_str(&format!("    | {line}\n"));
            }
        }
        if target.failures.is_empty()
            && let Some(message) = &target.message
            && (message.lines().count() > 1 || message.chars().count() > REASON_CHARS)
        {
            block.push_str(&format!("  {message}\n"));
        }
        if target.outcome == TargetOutcome::RollbackFailed
            && let Some(why) = target.rollback.as_ref().and_then(|r| r.message.as_ref())
        {
            block.push_str(&format!("  rollback: {why}\n"));
        }
        // A check's failure that no failure above says, and why a check was inconclusive.
        for line in check_view::terminal_details(target) {
            block.push_str(&format!("  {line}\n"));
        }
        // What the manifests dropped: left in place, pruned or kept, one line each.
        for dropped in &target.dropped {
            block.push_str(&format!("  {}\n", dropped.line()));
        }
        if !block.is_empty() {
            out.push_str(&format!("{}:\n{block}", target.name));
        }
    }
    out
}

fn push_line(out: &mut String, cells: &[String], sgr: Option<&str>) {
    let line = cells.join("  ");
    let line = line.trim_end();
    match sgr {
        Some(code) => out.push_str(&paint(line, code)),
        None => out.push_str(line),
    }
    out.push('\n');
}

fn pad(text: &str, width: usize) -> String {
    let len = display_width(text);
    format!("{text}{}", " ".repeat(width.saturating_sub(len)))
}

fn paint(text: &str, sgr: &str) -> String {
    format!("\x1b[{sgr}m{text}\x1b[0m")
}

fn outcome_color(outcome: TargetOutcome) -> &'static str {
    match outcome {
        TargetOutcome::Deployed => "32",
        TargetOutcome::Failed | TargetOutcome::RollbackFailed => "31",
        TargetOutcome::RolledBack | TargetOutcome::Cancelled => "33",
        TargetOutcome::Skipped => "2",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_events_that_repeat_the_headline_are_left_out() {
        let headline = "Deployment shop/web: pod web-5-x container web: ImagePullBackOff: Back-off pulling image \"a:v2\": ErrImagePull: rpc error: code = NotFound desc = a:v2: not found (cannot succeed: the image or tag does not exist)";
        let cases = [
            (
                "pod web-5-x: Failed: Failed to pull image \"a:v2\": rpc error: code = NotFound desc = a:v2: not found",
                true,
            ),
            ("pod web-5-x: Failed: Error: ErrImagePull", true),
            ("pod web-5-x: Failed: Error: ImagePullBackOff", true),
            // Anything the headline does not say stays.
            (
                "pod web-5-x: FailedMount: MountVolume.SetUp failed for volume \"cfg\": configmap \"cfg\" not found",
                false,
            ),
            ("pod web-5-x: Failed: Error: ErrImageNeverPull", false),
            ("pod web-5-x: Failed: Error: something went wrong", false),
            ("Warning Failed pod/web-7d9f-x: pull 3", false),
            ("pod web-5-x: Failed: not found", false),
        ];
        for (event, repeats) in cases {
            assert_eq!(repeats_headline(event, headline), repeats, "{event}");
        }
    }
    use crate::report::model::tests::{image_failure, report, target};
    use crate::report::model::*;

    fn sample() -> Report {
        let mut us = target("us-east", TargetOutcome::Failed);
        us.revision = Some(12);
        us.failures.push(image_failure());
        let mut eu = target("eu", TargetOutcome::Deployed);
        eu.revision = Some(3);
        report(vec![eu, us])
    }

    #[test]
    fn golden_plain_table() {
        // The failure in full once, in the details; the table and the summary in short.
        let want = "\
TARGET   HAPPENED    RUNS NOW       DURATION  REASON
eu       deployed 3  v3 (0123456)   12s
us-east  failed 12   v12 (0123456)  12s       ImagePullBackOff

us-east:
  Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"

shop: deployed to 1 of 2, 1 failed; us-east: ImagePullBackOff
";
        assert_eq!(to_table(&Clean::new(&sample()), false, None), want);
    }

    #[test]
    fn golden_table_by_wave() {
        // A heading per wave (with its bake), targets under it in config order; the widths
        // are the whole table's.
        let mut r = crate::report::model::tests::three_waves();
        // Config order need not follow the waves: us is listed first.
        r.targets.swap(0, 2);
        let want = "\
TARGET  HAPPENED                  RUNS NOW      DURATION  REASON
wave 0 (bake 5s)
canary  rolled back 4 → 3 (as 5)  v5 (3a30e4b)  12s       CrashLoopBackOff
wave 1
us      skipped                   -             0ms       wave 0 failed (canary): this wave did not start
eu      skipped                   -             0ms       wave 0 failed (canary): this wave did not start
wave 2
ap      skipped                   -             0ms       wave 0 failed (canary): this wave did not start
sa      skipped                   -             0ms       wave 0 failed (canary): this wave did not start

canary:
  Deployment shop/web: pod web-7d9f-x container web: CrashLoopBackOff: back-off restarting failed container

shop: rolled back 1 of 1, 4 skipped; canary: CrashLoopBackOff
";
        assert_eq!(to_table(&Clean::new(&r), false, None), want);
        let colored = to_table(&Clean::new(&r), true, None);
        assert!(colored.contains("\x1b[1mwave 1\x1b[0m\n"), "{colored:?}");
    }

    #[test]
    fn one_wave_has_no_heading_whatever_its_number() {
        let plain = to_table(&Clean::new(&sample()), false, None);
        let mut r = sample();
        r.targets.iter_mut().for_each(|t| t.wave = 3);
        assert_eq!(to_table(&Clean::new(&r), false, None), plain);
        assert!(!plain.contains("wave"), "{plain}");
    }

    #[test]
    fn rows_say_what_runs_now_and_what_happened() {
        let rollback = |outcome, to: Option<u64>, as_revision: Option<u64>| RollbackReport {
            started_at: None,
            why: None,
            to_revision: to,
            outcome,
            left_in_place: vec![],
            message: None,
            to_commit: Some("3a30e4b".into()),
            as_revision,
        };
        let with =
            |outcome, revision: Option<u64>, rb: Option<RollbackReport>, message: Option<&str>| {
                let mut t = target("eu", outcome);
                t.revision = revision;
                t.rollback = rb;
                t.message = message.map(String::from);
                t
            };
        use TargetOutcome::*;
        let cases: Vec<(TargetReport, [&str; 3])> = vec![
            (
                with(Deployed, Some(7), None, None),
                ["deployed 7", "v7 (abc1234)", ""],
            ),
            (
                with(
                    RolledBack,
                    Some(7),
                    Some(rollback(RolledBack, Some(5), Some(8))),
                    Some("policy rollback-all: us failed"),
                ),
                [
                    "rolled back 7 → 5 (as 8)",
                    "v8 (3a30e4b)",
                    "policy rollback-all: us failed",
                ],
            ),
            (
                with(
                    RollbackFailed,
                    Some(7),
                    Some(RollbackReport {
                        started_at: None,
                        why: None,
                        message: Some("connection refused".into()),
                        ..rollback(RollbackFailed, Some(5), None)
                    }),
                    None,
                ),
                ["rollback failed 7 → 5", "-", "connection refused"],
            ),
            (
                with(
                    Cancelled,
                    Some(7),
                    Some(rollback(RolledBack, Some(5), Some(8))),
                    Some("cancelled by SIGTERM"),
                ),
                [
                    "cancelled 7, rolled back → 5 (as 8)",
                    "v8 (3a30e4b)",
                    "cancelled by SIGTERM",
                ],
            ),
            (
                with(Cancelled, Some(7), None, Some("cancelled by SIGINT")),
                ["cancelled 7", "v7 (abc1234)", "cancelled by SIGINT"],
            ),
            // First deploy failing: nothing to go back to.
            (
                with(Failed, Some(1), Some(rollback(Failed, None, None)), None),
                ["failed 1", "v1 (abc1234)", ""],
            ),
            // The rollback stopped having re-applied all that v7 had sent: v5 runs.
            (
                with(Failed, Some(7), Some(rollback(Failed, Some(5), None)), None),
                ["failed 7", "v5 (3a30e4b)", ""],
            ),
            (
                with(Failed, None, None, Some("connection refused")),
                ["failed", "-", "connection refused"],
            ),
            (
                with(Skipped, None, None, Some("not deployed")),
                ["skipped", "-", "not deployed"],
            ),
        ];
        let mut r = report(vec![]);
        r.commit = Some(crate::util::git::CommitInfo {
            sha: "abc1234def".into(),
            r#ref: None,
            message: None,
            dirty: false,
        });
        for (t, want) in cases {
            let row = table_row(&r, &t);
            assert_eq!(
                [row[1].as_str(), row[2].as_str(), row[4].as_str()],
                want,
                "{t:?}"
            );
        }
    }

    #[test]
    fn a_long_failure_is_short_in_the_row_and_full_in_the_details() {
        let mut us = target("us", TargetOutcome::Failed);
        us.failures.push(Failure {
            object: "stage smoke".into(),
            reason: "ScriptFailed".into(),
            message: "x".repeat(300),
            ..Default::default()
        });
        let r = report(vec![us]);
        let table = to_table(&Clean::new(&r), false, None);
        assert_eq!(table.matches(&"x".repeat(300)).count(), 1, "{table}");
        assert_eq!(table_row(&r, &r.targets[0])[4], "ScriptFailed");
    }

    /// Targets stopped by the policy say so in the details too (their reason is long); the
    /// one that failed comes first, not after a thousand of them.
    #[test]
    fn the_target_that_failed_comes_first_in_the_details() {
        let stopped = |name: &str| {
            let mut t = target(name, TargetOutcome::RolledBack);
            t.message = Some("stopped: policy rollback-all: us failed at 05:31:52".into());
            t
        };
        let mut us = target("us", TargetOutcome::RolledBack);
        us.failures = vec![image_failure()];
        let got = failure_details(&report(vec![stopped("eu"), us, stopped("ap")]));
        let order: Vec<&str> = got.lines().filter(|l| !l.starts_with(' ')).collect();
        assert_eq!(order, ["us:", "eu:", "ap:"], "{got}");
    }

    #[test]
    fn details_show_what_the_table_leaves_out() {
        let with_events = Failure {
            events: (1..=7)
                .map(|i| format!("Warning Failed pod/web-7d9f-x: pull {i}"))
                .collect(),
            ..image_failure()
        };
        let second = Failure {
            object: "Deployment shop/api".into(),
            pod: None,
            container: None,
            reason: "Timeout".into(),
            message: "2 of 3 updated replicas are available".into(),
            events: vec![],
            ..Default::default()
        };
        let mut eu = target("eu", TargetOutcome::Failed);
        eu.failures = vec![image_failure(), second];
        let mut us = target("us", TargetOutcome::Failed);
        us.failures = vec![with_events];
        let plain = target("ap", TargetOutcome::Failed);
        let mut only_one = target("sa", TargetOutcome::Failed);
        only_one.failures = vec![image_failure()];
        let got = failure_details(&report(vec![eu, us, plain, only_one]));
        let want = "\
eu:
  Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"
  Deployment shop/api: Timeout: 2 of 3 updated replicas are available
us:
  Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"
    event: Warning Failed pod/web-7d9f-x: pull 3
    event: Warning Failed pod/web-7d9f-x: pull 4
    event: Warning Failed pod/web-7d9f-x: pull 5
    event: Warning Failed pod/web-7d9f-x: pull 6
    event: Warning Failed pod/web-7d9f-x: pull 7
sa:
  Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"
";
        assert_eq!(got, want);
    }

    #[test]
    fn a_failed_scripts_last_lines_go_under_its_failure() {
        let stage =
            |name: &str, rollback: bool, lines: std::ops::RangeInclusive<u32>| StageResult {
                name: name.into(),
                scope: "target".into(),
                rollback,
                outcome: StageOutcome::Failed,
                exit_code: Some(1),
                seconds: 0.1,
                message: Some("exited with code 1".into()),
                output: lines.map(|i| format!("{name} line {i}")).collect(),
            };
        let mut eu = target("eu", TargetOutcome::RolledBack);
        eu.failures.push(Failure {
            object: "stage smoke".into(),
            reason: "ScriptFailed".into(),
            message: "exited with code 1".into(),
            ..Default::default()
        });
        eu.stages = vec![stage("smoke", false, 1..=12), stage("smoke", true, 1..=1)];
        let got = failure_details(&report(vec![eu]));
        let shown: Vec<&str> = got.lines().filter(|l| l.starts_with("    | ")).collect();
        // The last ten lines of the run, not the rollback command's.
        assert_eq!(shown.len(), 10, "{got}");
        assert_eq!(shown[0], "    | smoke line 3", "{got}");
        assert_eq!(shown[9], "    | smoke line 12", "{got}");
        let mut fleet = target("us", TargetOutcome::Failed);
        fleet.failures.push(Failure {
            object: "stage migrate (fleet)".into(),
            ..Default::default()
        });
        fleet.stages = vec![stage("migrate", false, 1..=1)];
        assert!(failure_details(&report(vec![fleet])).contains("    | migrate line 1"),);
    }

    #[test]
    fn container_logs_go_under_their_failure() {
        let mut eu = target("eu", TargetOutcome::Failed);
        eu.failures.push(Failure {
            object: "Deployment shop/web".into(),
            pod: Some("web-1".into()),
            container: Some("web".into()),
            reason: "CrashLoopBackOff".into(),
            logs: vec![
                ContainerLog {
                    pod: "web-1".into(),
                    container: "web".into(),
                    previous: true,
                    lines: vec!["boot 2".into(), "panic:\x1b[31m boom".into()],
                    error: None,
                },
                ContainerLog {
                    pod: "web-2".into(),
                    container: "web".into(),
                    previous: false,
                    lines: vec![],
                    error: Some("cannot read the log of pod web-2 container web: timed out".into()),
                },
            ],
            ..Default::default()
        });
        let got = failure_details(&report(vec![eu]));
        let want = "    log of pod web-1 container web, previous instance:\n    | boot 2\n    | panic: [31m boom\n    log of pod web-2 container web:\n    | (cannot read the log of pod web-2 container web: timed out)\n";
        assert!(got.contains(want), "{got}");
    }

    #[test]
    fn on_a_narrow_terminal_the_reason_is_cut_to_fit() {
        let mut r = sample();
        r.targets[1].failures.clear();
        r.targets[1].message =
            Some("the pods of Deployment shop/web never became ready in 10m0s, twice".into());
        let wide = to_table(&Clean::new(&r), false, None);
        // (terminal columns, widest row at most)
        for (columns, widest) in [(200, None), (80, Some(80)), (60, Some(60)), (10, None)] {
            let table = to_table(&Clean::new(&r), false, Some(columns));
            let rows: Vec<&str> = table.lines().take(1 + r.targets.len()).collect();
            let max = rows.iter().map(|l| display_width(l)).max().unwrap();
            let cut = rows.iter().any(|l| l.ends_with('…'));
            match widest {
                Some(w) => assert!(max <= w && cut, "{columns}: {max}\n{table}"),
                // Wide enough: as without a terminal.
                None if columns > 100 => assert_eq!(table, wide),
                // Too narrow to help: the reason keeps 12 columns, ellipsis included.
                None => assert!(
                    cut && rows.iter().any(|l| l.ends_with("the pods of…")),
                    "{columns}\n{table}"
                ),
            }
            // The details below the table keep every reason in full.
            assert_eq!(
                table.lines().skip(1 + r.targets.len()).collect::<Vec<_>>(),
                wide.lines().skip(1 + r.targets.len()).collect::<Vec<_>>(),
                "{columns}"
            );
        }
    }

    #[test]
    fn golden_table_with_check_verdicts() {
        // A CHECKS column before the reason; the AnalysisFailed message said once, in the
        // details; an inconclusive check says why there.
        let mut r = crate::report::check_view::tests::checked_fleet();
        r.targets[2].checks[1] = crate::report::check_view::tests::healthz(
            &[Some(200.0), None],
            CheckVerdict::Inconclusive,
        );
        let want = "\
TARGET  HAPPENED                  RUNS NOW      DURATION  CHECKS                                      REASON
canary  rolled back 4 → 3 (as 5)  v5 (3a30e4b)  35s       error-rate failed (0.043 > 0.01), 1 passed  AnalysisFailed
eu      deployed 7                v7 (0123456)  12s       2 passed
us      deployed 9                v9 (0123456)  12s       healthz inconclusive, 1 passed

canary:
  check error-rate: AnalysisFailed: error-rate = 0.043 > 0.01 at 08:00:32
us:
  check healthz: inconclusive: timeout after 5s

shop: rolled back 1 of 1, deployed to 2 of 3; canary: AnalysisFailed
";
        let table = to_table(&Clean::new(&r), false, None);
        assert_eq!(table, want);
        assert_eq!(table.matches("0.043 > 0.01 at").count(), 1);
        // On a narrow terminal the reason is cut first; the verdict keeps its column.
        let narrow = to_table(&Clean::new(&r), false, Some(100));
        assert!(
            narrow.lines().nth(1).is_some_and(
                |l| l.ends_with("error-rate failed (0.043 > 0.01), 1 passed  AnalysisFai…")
            ),
            "{narrow}"
        );
        // Without checks anywhere, no column.
        assert!(!to_table(&Clean::new(&sample()), false, None).contains("CHECKS"));
    }

    #[test]
    fn a_check_failure_no_failure_names_is_said_in_the_details() {
        let mut r = crate::report::check_view::tests::checked_fleet();
        r.targets[0].failures.clear();
        r.targets[0].message = None;
        r.targets[0].checks[0].message = Some("error-rate = 0.043 > 0.01 at 08:00:32".into());
        let table = to_table(&Clean::new(&r), false, None);
        assert!(
            table.contains(
                "canary:\n  check error-rate: failed: error-rate = 0.043 > 0.01 at 08:00:32\n"
            ),
            "{table}"
        );
        // The target's own message saying it counts as said (short in the table, in full
        // in the details, as any message).
        r.targets[0].message = Some(
            "AnalysisFailed: error-rate = 0.043 > 0.01 at 08:00:32, and more words to be long"
                .into(),
        );
        let table = to_table(&Clean::new(&r), false, None);
        assert!(!table.contains("check error-rate: failed"), "{table}");
        assert_eq!(
            table.matches("0.043 > 0.01 at 08:00:32, and more").count(),
            1,
            "{table}"
        );
    }

    #[test]
    fn color_only_when_asked() {
        assert!(!to_table(&Clean::new(&sample()), false, None).contains('\x1b'));
        let colored = to_table(&Clean::new(&sample()), true, None);
        assert!(colored.contains("\x1b[31mfailed 12 \x1b[0m"), "{colored:?}");
        assert!(colored.contains("\x1b[32mdeployed 3\x1b[0m"), "{colored:?}");
    }
}
