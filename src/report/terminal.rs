//! The final table printed at the end of a run.

use super::model::{Report, TargetOutcome, clip};
use crate::util::duration::format_duration;

const REASON_CHARS: usize = 160;

/// A plain-text table, one row per target, then the summary line. With `color`, outcomes are
/// colored with ANSI SGR codes; without, the output has no escape codes at all (not a TTY, or
/// NO_COLOR set).
pub fn to_table(report: &Report, color: bool) -> String {
    let headers = ["TARGET", "OUTCOME", "REVISION", "DURATION", "REASON"];
    let rows: Vec<[String; 5]> = report
        .targets
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.outcome.to_string(),
                t.revision
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                format_duration(t.duration()),
                t.reason()
                    .map(|r| clip(&r.replace(['\r', '\n'], " "), REASON_CHARS))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }

    let mut out = String::new();
    let header: Vec<String> = headers.iter().zip(widths).map(|(h, w)| pad(h, w)).collect();
    push_line(&mut out, &header, color.then_some("1"));
    for (row, target) in rows.iter().zip(&report.targets) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                let padded = pad(cell, w);
                match (i, color) {
                    (1, true) => paint(&padded, outcome_color(target.outcome)),
                    _ => padded,
                }
            })
            .collect();
        push_line(&mut out, &cells, None);
    }
    out.push('\n');
    let details = failure_details(report);
    if !details.is_empty() {
        out.push_str(&details);
        out.push('\n');
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

/// Most recent Warning events shown per failure (the JSON report has them all).
const EVENTS_SHOWN: usize = 5;

/// What the table's one-line reasons leave out: the failures after a target's first, a
/// reason the table had to clip, and the Warning events. One block per target.
fn failure_details(report: &Report) -> String {
    let mut out = String::new();
    for target in &report.targets {
        let in_table = target
            .reason()
            .filter(|r| r.chars().count() <= REASON_CHARS);
        let mut block = String::new();
        for failure in &target.failures {
            let headline = failure.headline();
            if failure.events.is_empty() && in_table.as_deref() == Some(headline.as_str()) {
                continue;
            }
            block.push_str(&format!("  {headline}\n"));
            let skip = failure.events.len().saturating_sub(EVENTS_SHOWN);
            for event in &failure.events[skip..] {
                block.push_str(&format!("    event: {event}\n"));
            }
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
    let len = text.chars().count();
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
        let want = "\
TARGET   OUTCOME   REVISION  DURATION  REASON
eu       deployed  3         12s
us-east  failed    12        12s       Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"

shop: deployed to 1 of 2, 1 failed; us-east: Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"
";
        assert_eq!(to_table(&sample(), false), want);
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
  Deployment shop/api: Timeout: 2 of 3 updated replicas are available
us:
  Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"
    event: Warning Failed pod/web-7d9f-x: pull 3
    event: Warning Failed pod/web-7d9f-x: pull 4
    event: Warning Failed pod/web-7d9f-x: pull 5
    event: Warning Failed pod/web-7d9f-x: pull 6
    event: Warning Failed pod/web-7d9f-x: pull 7
";
        assert_eq!(got, want);
    }

    #[test]
    fn color_only_when_asked() {
        assert!(!to_table(&sample(), false).contains('\x1b'));
        let colored = to_table(&sample(), true);
        assert!(colored.contains("\x1b[31mfailed  \x1b[0m"), "{colored:?}");
        assert!(colored.contains("\x1b[32mdeployed\x1b[0m"), "{colored:?}");
    }
}
