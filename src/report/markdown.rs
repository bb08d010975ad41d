//! Markdown for the sticky PR comment and the GitHub step summary.

use super::model::{Failure, Report, TargetReport, clip};
use crate::util::duration::format_duration;

/// GitHub's limit for an issue or PR comment body.
pub const COMMENT_LIMIT: usize = 65_536;
/// GitHub's limit for `GITHUB_STEP_SUMMARY` per step.
pub const STEP_SUMMARY_LIMIT: usize = 1024 * 1024;

/// Events shown per failure; the JSON report has them all.
const EVENTS_PER_FAILURE: usize = 5;
/// Failures shown per target before "and N more".
const FAILURES_PER_TARGET: usize = 10;
/// Room kept for the truncation note.
const NOTE_RESERVE: usize = 200;

/// The hidden first line by which the sticky comment of an app is found again.
pub fn marker(app: &str) -> String {
    format!("<!-- rollguard:app={app} -->")
}

/// Renders the report for a PR comment or step summary, at most `limit` bytes long
/// (bytes, not characters, so a multi-byte text never exceeds a character limit either).
/// When the details do not fit, whole sections are left out and a note says so.
pub fn to_markdown(report: &Report, limit: usize) -> String {
    let head = head(report);
    let details: Vec<String> = report
        .targets
        .iter()
        .filter(|t| needs_details(t))
        .map(details)
        .collect();

    let note = |left_out: usize| {
        format!(
            "\n_Report truncated to stay under {limit} characters: {left_out} section(s) left out. \
             The JSON report (`--report`) and the job log have everything._\n"
        )
    };

    let mut out = String::new();
    if head.len() + NOTE_RESERVE > limit {
        // A fleet so large that even the table does not fit: keep whole lines of it.
        for line in head.split_inclusive('\n') {
            if out.len() + line.len() + NOTE_RESERVE > limit {
                break;
            }
            out.push_str(line);
        }
        let note = format!(
            "\n_Report truncated to stay under {limit} characters: the table is cut short and {} detail section(s) left out. \
             The JSON report (`--report`) and the job log have everything._\n",
            details.len()
        );
        if out.len() + note.len() <= limit {
            out.push_str(&note);
        }
        return cut_to(out, limit);
    }
    out.push_str(&head);
    let mut left_out = 0;
    for section in &details {
        if left_out == 0 && out.len() + section.len() + NOTE_RESERVE <= limit {
            out.push_str(section);
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out.push_str(&note(left_out));
    }
    cut_to(out, limit)
}

/// Last-resort guard: never return more than `limit` bytes, cutting on a char boundary.
fn cut_to(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

fn needs_details(target: &TargetReport) -> bool {
    target.outcome.is_problem()
        || !target.failures.is_empty()
        || !target.warnings.is_empty()
        || !target.abandoned_revisions.is_empty()
}

fn head(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&marker(&report.app));
    out.push('\n');
    let dry = if report.dry_run { " (dry run)" } else { "" };
    out.push_str(&format!(
        "### rollguard: `{}` {}{dry}\n\n",
        inline(&report.app),
        report.outcome
    ));
    out.push_str(&format!("**{}**\n\n", text(&report.summary)));
    let mut facts = Vec::new();
    if let Some(commit) = &report.commit {
        let mut c = format!("commit `{}`", commit.short_sha());
        if let Some(r) = &commit.r#ref {
            c.push_str(&format!(" on `{}`", inline(r)));
        }
        if let Some(m) = &commit.message {
            c.push_str(&format!(": {}", text(&clip(m, 100))));
        }
        facts.push(c);
    }
    facts.push(format!(
        "finished {}",
        report.finished_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ));
    facts.push(format!("took {}", format_duration(report.duration())));
    if let Some(url) = &report.run_url {
        facts.push(format!("[run]({url})"));
    }
    out.push_str(&facts.join(" · "));
    out.push_str("\n\n");
    out.push_str("| target | outcome | revision | duration | reason |\n");
    out.push_str("|---|---|---:|---:|---|\n");
    for t in &report.targets {
        let revision = t.revision.map(|r| r.to_string()).unwrap_or_default();
        let reason = t.reason().map(|r| cell(&clip(&r, 200))).unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            cell(&t.name),
            t.outcome,
            revision,
            format_duration(t.duration()),
            reason
        ));
    }
    out
}

fn details(t: &TargetReport) -> String {
    let mut out = format!("\n#### {}: {}\n\n", text(&t.name), t.outcome);
    if let Some(message) = &t.message {
        out.push_str(&format!("{}\n\n", text(message)));
    }
    if !t.failures.is_empty() {
        out.push_str("Failures:\n");
        failure_list(&mut out, &t.failures);
        out.push('\n');
    }
    if !t.abandoned_revisions.is_empty() {
        let revs: Vec<String> = t.abandoned_revisions.iter().map(u64::to_string).collect();
        out.push_str(&format!(
            "Revision(s) {} were left pending by a run that died and are now marked failed (abandoned).\n\n",
            revs.join(", ")
        ));
    }
    if let Some(rb) = &t.rollback {
        match (rb.to_revision, &rb.message) {
            (Some(rev), Some(m)) => out.push_str(&format!(
                "Rollback to revision {rev}: {}: {}",
                rb.outcome,
                text(m)
            )),
            (Some(rev), None) => {
                out.push_str(&format!("Rollback to revision {rev}: {}", rb.outcome))
            }
            (None, Some(m)) => out.push_str(&format!("Rollback: {}: {}", rb.outcome, text(m))),
            (None, None) => out.push_str(&format!(
                "Rollback: {}: there was no earlier good release to roll back to; nothing was deleted",
                rb.outcome
            )),
        }
        out.push_str("\n\n");
        if !rb.left_in_place.is_empty() {
            out.push_str("Left in place (rollback never prunes; delete by hand if unwanted):\n");
            for obj in &rb.left_in_place {
                out.push_str(&format!("- `{}`\n", inline(obj)));
            }
            out.push('\n');
        }
    }
    if !t.warnings.is_empty() {
        out.push_str("Warnings:\n");
        for w in &t.warnings {
            out.push_str(&format!("- {}\n", text(&clip(w, 500))));
        }
        out.push('\n');
    }
    out
}

fn failure_list(out: &mut String, failures: &[Failure]) {
    for f in failures.iter().take(FAILURES_PER_TARGET) {
        out.push_str(&format!("- `{}`", inline(&f.object)));
        if let Some(pod) = &f.pod {
            out.push_str(&format!(" pod `{}`", inline(pod)));
        }
        if let Some(c) = &f.container {
            out.push_str(&format!(" container `{}`", inline(c)));
        }
        out.push_str(&format!(": **{}**", text(&f.reason)));
        if !f.message.is_empty() && f.message != f.reason {
            out.push_str(&format!(": {}", text(&clip(&f.message, 1000))));
        }
        out.push('\n');
        let skip = f.events.len().saturating_sub(EVENTS_PER_FAILURE);
        for e in f.events.iter().skip(skip) {
            out.push_str(&format!("  - event: {}\n", text(&clip(e, 300))));
        }
    }
    if failures.len() > FAILURES_PER_TARGET {
        out.push_str(&format!(
            "- and {} more\n",
            failures.len() - FAILURES_PER_TARGET
        ));
    }
}

/// Plain text on one line that must not turn into HTML or break the list it sits in.
fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace(['\r', '\n'], " ")
}

/// A table cell: plain text without pipes.
fn cell(s: &str) -> String {
    text(s).replace('|', "\\|")
}

/// Text inside backticks: backticks would end the code span early.
fn inline(s: &str) -> String {
    s.replace('`', "'").replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::tests::{image_failure, report, target};
    use crate::report::model::*;

    fn three_targets() -> Report {
        let mut eu = target("eu", TargetOutcome::RollbackFailed);
        eu.revision = Some(4);
        eu.failures.push(image_failure());
        eu.rollback = Some(RollbackReport {
            to_revision: Some(3),
            outcome: TargetOutcome::RollbackFailed,
            left_in_place: vec![],
            message: Some("connection refused".into()),
        });
        let mut us = target("us", TargetOutcome::RolledBack);
        us.revision = Some(7);
        us.message = Some("rolled back because eu failed (on_failure: rollback-all)".into());
        us.rollback = Some(RollbackReport {
            to_revision: Some(6),
            outcome: TargetOutcome::RolledBack,
            left_in_place: vec!["ConfigMap shop/new-config".into()],
            message: None,
        });
        let mut ap = target("ap", TargetOutcome::RolledBack);
        ap.revision = Some(2);
        ap.rollback = Some(RollbackReport {
            to_revision: Some(1),
            outcome: TargetOutcome::RolledBack,
            left_in_place: vec![],
            message: None,
        });
        report(vec![eu, us, ap])
    }

    #[test]
    fn golden_rollback_comment() {
        let md = to_markdown(&three_targets(), COMMENT_LIMIT);
        let want = r#"<!-- rollguard:app=shop -->
### rollguard: `shop` rollback-failed

**rolled back 2 of 3; eu: connection refused**

commit `0123456` on `main`: Bump web to v2 · finished 2027-01-15 08:00:20 UTC · took 20s

| target | outcome | revision | duration | reason |
|---|---|---:|---:|---|
| eu | rollback-failed | 4 | 12s | connection refused |
| us | rolled-back | 7 | 12s | rolled back because eu failed (on_failure: rollback-all) |
| ap | rolled-back | 2 | 12s |  |

#### eu: rollback-failed

Failures:
- `Deployment shop/web` pod `web-7d9f-x` container `web`: **ImagePullBackOff**: Back-off pulling image "nginx:doesnotexist"

Rollback to revision 3: rollback-failed: connection refused


#### us: rolled-back

rolled back because eu failed (on_failure: rollback-all)

Rollback to revision 6: rolled-back

Left in place (rollback never prunes; delete by hand if unwanted):
- `ConfigMap shop/new-config`


#### ap: rolled-back

Rollback to revision 1: rolled-back

"#;
        assert_eq!(md, want);
    }

    #[test]
    fn golden_all_deployed() {
        let r = report(vec![
            target("eu", TargetOutcome::Deployed),
            target("us", TargetOutcome::Deployed),
        ]);
        let md = to_markdown(&r, COMMENT_LIMIT);
        let want = r#"<!-- rollguard:app=shop -->
### rollguard: `shop` deployed

**deployed to 2 of 2**

commit `0123456` on `main`: Bump web to v2 · finished 2027-01-15 08:00:20 UTC · took 20s

| target | outcome | revision | duration | reason |
|---|---|---:|---:|---|
| eu | deployed |  | 12s |  |
| us | deployed |  | 12s |  |
"#;
        assert_eq!(md, want);
    }

    #[test]
    fn first_deploy_failure_says_nothing_was_deleted() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.failures.push(image_failure());
        t.rollback = Some(RollbackReport {
            to_revision: None,
            outcome: TargetOutcome::Failed,
            left_in_place: vec!["Deployment shop/web".into()],
            message: None,
        });
        let md = to_markdown(&report(vec![t]), COMMENT_LIMIT);
        assert!(md.contains("Rollback: failed: there was no earlier good release to roll back to; nothing was deleted\n"), "{md}");
        assert!(md.contains("Left in place (rollback never prunes; delete by hand if unwanted):\n- `Deployment shop/web`\n"), "{md}");
    }

    #[test]
    fn escapes_html_and_pipes() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.message = Some("<script> a|b\nnext".into());
        let md = to_markdown(&report(vec![t]), COMMENT_LIMIT);
        assert!(!md.contains("<script>"), "{md}");
        assert!(md.contains("&lt;script&gt; a\\|b next"), "{md}");
    }

    fn big_report(targets: usize, failures: usize) -> Report {
        let ts: Vec<_> = (0..targets)
            .map(|i| {
                let mut t = target(&format!("cluster-{i:03}"), TargetOutcome::Failed);
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
            (50, 20, COMMENT_LIMIT),
            (300, 20, COMMENT_LIMIT),
            (3000, 1, COMMENT_LIMIT),
            (50, 20, 5_000),
            (5, 1, 300),
        ] {
            let md = to_markdown(&big_report(targets, failures), limit);
            assert!(
                md.len() <= limit,
                "{targets}x{failures}: {} > {limit}",
                md.len()
            );
            assert!(md.starts_with("<!-- rollguard:app=shop -->\n"));
            assert!(
                md.contains("Report truncated"),
                "{targets}x{failures}@{limit}"
            );
        }
    }

    #[test]
    fn truncation_drops_whole_sections() {
        let r = big_report(50, 20);
        let md = to_markdown(&r, COMMENT_LIMIT);
        // The table is whole: every target has its row.
        for i in 0..50 {
            assert!(md.contains(&format!("| cluster-{i:03} |")));
        }
        // Shown sections are complete: each one that starts has its last failure line.
        let shown = md.matches("\n#### ").count();
        assert!(shown > 0 && shown < 50, "{shown}");
        assert_eq!(md.matches("- and 10 more").count(), shown);
        assert!(md.contains(&format!("{} section(s) left out", 50 - shown)));
    }

    #[test]
    fn small_reports_are_not_truncated() {
        let md = to_markdown(&big_report(3, 2), STEP_SUMMARY_LIMIT);
        assert!(!md.contains("truncated"));
        // Only the last EVENTS_PER_FAILURE events are shown.
        assert!(md.contains("event: event 19") && !md.contains("event: event 14\n"));
    }
}
