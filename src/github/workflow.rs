//! The runner's side of GitHub Actions: workflow commands on stdout (annotations, log groups,
//! warnings), the `GITHUB_OUTPUT` file and the `GITHUB_STEP_SUMMARY` file. Pure text here;
//! the files are written by `super::publish`.
//!
//! Text from clusters is escaped as GitHub documents it for workflow commands: in a
//! command's message `%`, `\r` and `\n` become `%25`, `%0D`, `%0A` (so a message cannot end
//! the line and start a command of its own); in a property `:` and `,` too. A replayed log is
//! wrapped in `::stop-commands::<token>`, so no line of it is read as a command at all.

use std::collections::BTreeMap;

use crate::report::plan::ChangePlan;
use crate::report::{Clean, Report, TargetOutcome, TargetReport, exit_code};

/// A workflow command's message.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value (`title=`, `file=`).
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Where an annotation points in the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    pub file: String,
    pub line: usize,
}

/// `::error title=...,file=...,line=...::message` (one line).
pub fn error_annotation(title: &str, at: Option<&SourceLine>, message: &str) -> String {
    let mut props = vec![format!("title={}", escape_property(title))];
    if let Some(at) = at {
        props.push(format!("file={}", escape_property(&at.file)));
        props.push(format!("line={}", at.line));
    }
    format!("::error {}::{}", props.join(","), escape_data(message))
}

/// `::warning title=...::message` (one line).
pub fn warning(title: &str, message: &str) -> String {
    format!(
        "::warning title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

/// `::notice title=...::message` (one line).
pub fn notice(title: &str, message: &str) -> String {
    format!(
        "::notice title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

/// True for a target that failed on its own (not one only rolled back for the fleet).
pub fn failed_on_its_own(t: &TargetReport) -> bool {
    match t.outcome {
        TargetOutcome::Failed | TargetOutcome::RollbackFailed | TargetOutcome::Cancelled => true,
        TargetOutcome::RolledBack => !t.failures.is_empty(),
        TargetOutcome::Deployed | TargetOutcome::Skipped => false,
    }
}

/// One `::error` annotation per failed target, pointing at the failed object's manifest line
/// when `origin` knows it (`origin` maps a failure's object, e.g. "Deployment shop/web").
pub fn annotations(
    report: &Clean<Report>,
    origin: &dyn Fn(&str) -> Option<SourceLine>,
) -> Vec<String> {
    report
        .targets
        .iter()
        .filter(|t| failed_on_its_own(t))
        .map(|t| {
            let at = t.failures.first().and_then(|f| origin(&f.object));
            let title = format!("rollguard: {} {}", t.name, t.outcome);
            let message = t
                .reason()
                .unwrap_or_else(|| format!("target {} {}", t.name, t.outcome));
            error_annotation(&title, at.as_ref(), &message)
        })
        .collect()
}

/// Each target's log lines in a collapsed group of its own, so that the lines of targets that
/// ran at once do not interleave. `token` (random per run) switches command processing off
/// inside, so a log line such as `::set-output ...` from a cluster is shown, not run.
pub fn log_groups(groups: &[(String, TargetOutcome, Vec<String>)], token: &str) -> String {
    let mut out = String::new();
    for (name, outcome, lines) in groups {
        out.push_str(&format!(
            "::group::{}\n",
            escape_data(&format!("rollguard: {name} ({outcome})"))
        ));
        out.push_str(&format!("::stop-commands::{token}\n"));
        for line in lines {
            // One physical line per log line: a line break inside would start a fresh line.
            out.push_str(&line.replace(['\r', '\n'], " "));
            out.push('\n');
        }
        out.push_str(&format!("::{token}::\n"));
        out.push_str("::endgroup::\n");
    }
    out
}

/// Why an output could not be written in the heredoc form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the value of output {name:?} contains its delimiter")]
pub struct DelimiterInValue {
    pub name: String,
}

/// The step outputs: `outcome`, `exit_code`, `summary`, `report` (the JSON file, when
/// written), `targets` (JSON: target name -> outcome) and, per outcome, the comma-separated
/// target names (`deployed`, `failed`, `rolled_back`, `rollback_failed`, `skipped`,
/// `cancelled`).
pub fn outputs(report: &Clean<Report>, report_path: Option<&str>) -> Vec<(String, String)> {
    let targets: BTreeMap<&str, &str> = report
        .targets
        .iter()
        .map(|t| (t.name.as_str(), t.outcome.as_str()))
        .collect();
    let mut out = vec![
        ("outcome".to_string(), report.outcome.to_string()),
        ("exit_code".to_string(), exit_code(report).to_string()),
        ("summary".to_string(), report.summary.clone()),
        (
            "targets".to_string(),
            serde_json::to_string(&targets).unwrap_or_else(|_| "{}".into()),
        ),
    ];
    if let Some(path) = report_path {
        out.push(("report".to_string(), path.to_string()));
    }
    for (key, outcome) in [
        ("deployed", TargetOutcome::Deployed),
        ("failed", TargetOutcome::Failed),
        ("rolled_back", TargetOutcome::RolledBack),
        ("rollback_failed", TargetOutcome::RollbackFailed),
        ("skipped", TargetOutcome::Skipped),
        ("cancelled", TargetOutcome::Cancelled),
    ] {
        let names: Vec<&str> = report
            .targets
            .iter()
            .filter(|t| t.outcome == outcome)
            .map(|t| t.name.as_str())
            .collect();
        out.push((key.to_string(), names.join(",")));
    }
    out
}

/// The step outputs of a plan (`diff`, `deploy --dry-run`, `plan --offline`): `changes`
/// (objects that would be created or updated), `has_changes` (`true`/`false`),
/// `targets_changed`, `summary`, `exit_code`, and `plan` (JSON: target name -> its status
/// and counts: `{"eu": {"status": "changes", "create": 0, "update": 1, "unchanged": 1,
/// "dropped": 0, "errors": 0}}`). Pure.
pub fn plan_outputs(plan: &ChangePlan, exit_code: i32) -> Vec<(String, String)> {
    let targets: BTreeMap<&str, serde_json::Value> = plan
        .targets
        .iter()
        .map(|t| {
            let status = serde_json::to_value(t.status).unwrap_or_default();
            (
                t.name.as_str(),
                serde_json::json!({
                    "status": status,
                    "create": t.create.len(),
                    "update": t.update.len(),
                    "unchanged": t.unchanged.len(),
                    "dropped": t.dropped.len(),
                    "errors": t.errors.len(),
                }),
            )
        })
        .collect();
    vec![
        ("changes".to_string(), plan.changes.to_string()),
        ("has_changes".to_string(), (plan.changes > 0).to_string()),
        (
            "targets_changed".to_string(),
            plan.targets_changed.to_string(),
        ),
        ("summary".to_string(), plan.summary.clone()),
        ("exit_code".to_string(), exit_code.to_string()),
        (
            "plan".to_string(),
            serde_json::to_string(&targets).unwrap_or_else(|_| "{}".into()),
        ),
    ]
}

/// The `GITHUB_OUTPUT` text: every value in the documented heredoc form
/// (`name<<DELIM`, the value, `DELIM`), which any value, multi-line or not, survives.
/// `delimiter` must be random per run (`random_token`), so a value cannot guess it.
pub fn output_file(
    outputs: &[(String, String)],
    delimiter: &str,
) -> Result<String, DelimiterInValue> {
    let mut out = String::new();
    for (name, value) in outputs {
        if name.contains(delimiter) || value.contains(delimiter) {
            return Err(DelimiterInValue { name: name.clone() });
        }
        out.push_str(&format!("{name}<<{delimiter}\n{value}\n{delimiter}\n"));
    }
    Ok(out)
}

/// A random token for heredoc delimiters and `stop-commands`.
pub fn random_token(prefix: &str) -> String {
    format!("{prefix}{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{image_failure, report, target};

    #[test]
    fn a_plan_has_its_outputs() {
        use crate::report::plan::{PlanMode, PlannedChange, TargetPlan};
        let change = PlannedChange {
            object: "Deployment shop/web".into(),
            origin: None,
            note: None,
            diff: None,
        };
        let mut eu = TargetPlan::new("eu");
        eu.update.push(change.clone());
        eu.unchanged.push("ConfigMap shop/c".into());
        let mut us = TargetPlan::new("us");
        us.unchanged.push("ConfigMap shop/c".into());
        let cases = [
            (vec![eu.clone(), us.clone()], "1", "true", "1"),
            (vec![us.clone()], "0", "false", "0"),
            (vec![], "0", "false", "0"),
        ];
        for (targets, changes, has, changed) in cases {
            let plan = ChangePlan::new("shop", PlanMode::DryRun, None, targets);
            let out: BTreeMap<String, String> = plan_outputs(&plan, 0).into_iter().collect();
            assert_eq!(out["changes"], changes);
            assert_eq!(out["has_changes"], has);
            assert_eq!(out["targets_changed"], changed);
            assert_eq!(out["exit_code"], "0");
        }
        let plan = ChangePlan::new("shop", PlanMode::DryRun, None, vec![eu, us]);
        let out: BTreeMap<String, String> = plan_outputs(&plan, 2).into_iter().collect();
        let json: serde_json::Value = serde_json::from_str(&out["plan"]).expect("json");
        assert_eq!(json["eu"]["status"], "changes");
        assert_eq!(json["eu"]["update"], 1);
        assert_eq!(json["us"]["status"], "no-changes");
        assert_eq!(json["us"]["unchanged"], 1);
        assert_eq!(out["summary"], plan.summary);
    }

    #[test]
    fn escape_table() {
        let cases = [
            ("plain", "plain", "plain"),
            ("50%", "50%25", "50%25"),
            (
                "a\nb\r\n::set-output name=x::1",
                "a%0Ab%0D%0A::set-output name=x::1",
                "a%0Ab%0D%0A%3A%3Aset-output name=x%3A%3A1",
            ),
            (
                "k8s/app.yaml, line 3",
                "k8s/app.yaml, line 3",
                "k8s/app.yaml%2C line 3",
            ),
            ("%0A", "%250A", "%250A"),
        ];
        for (input, data, property) in cases {
            assert_eq!(escape_data(input), data, "{input:?}");
            assert_eq!(escape_property(input), property, "{input:?}");
        }
    }

    #[test]
    fn annotations_point_at_the_manifest() {
        let mut us = target("us", TargetOutcome::Failed);
        us.failures.push(image_failure());
        let mut down = target("ap", TargetOutcome::Failed);
        down.message = Some("connection refused\n::set-output name=x::y".into());
        let r = report(vec![
            target("eu", TargetOutcome::Deployed),
            us,
            down,
            target("sa", TargetOutcome::RolledBack),
        ]);
        let origin = |object: &str| {
            (object == "Deployment shop/web").then(|| SourceLine {
                file: "k8s/app.yaml".into(),
                line: 8,
            })
        };
        let lines = annotations(&Clean::new(&r), &origin);
        assert_eq!(
            lines,
            vec![
                "::error title=rollguard%3A us failed,file=k8s/app.yaml,line=8::Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"".to_string(),
                "::error title=rollguard%3A ap failed::connection refused%0A::set-output name=x::y".to_string(),
            ]
        );
    }

    #[test]
    fn log_groups_stop_commands_inside() {
        let groups = vec![(
            "eu".to_string(),
            TargetOutcome::Failed,
            vec![
                "INFO applied".to_string(),
                "::set-output name=x::y".to_string(),
                "a\nb".to_string(),
            ],
        )];
        assert_eq!(
            log_groups(&groups, "tok"),
            "::group::rollguard: eu (failed)\n::stop-commands::tok\nINFO applied\n::set-output name=x::y\na b\n::tok::\n::endgroup::\n"
        );
    }

    #[test]
    fn output_file_uses_heredocs() {
        let mut us = target("us", TargetOutcome::Failed);
        us.message = Some("line one\nline two".into());
        let r = report(vec![target("eu", TargetOutcome::Deployed), us]);
        let outs = outputs(&Clean::new(&r), Some("report.json"));
        let text = output_file(&outs, "EOF_x").unwrap();
        assert!(
            text.starts_with("outcome<<EOF_x\nfailed\nEOF_x\nexit_code<<EOF_x\n1\nEOF_x\n"),
            "{text}"
        );
        assert!(
            text.contains("targets<<EOF_x\n{\"eu\":\"deployed\",\"us\":\"failed\"}\nEOF_x\n"),
            "{text}"
        );
        assert!(text.contains("report<<EOF_x\nreport.json\nEOF_x\n"));
        assert!(text.contains("deployed<<EOF_x\neu\nEOF_x\nfailed<<EOF_x\nus\nEOF_x\n"));
        let bad = vec![("summary".to_string(), "x\nEOF_x\ny".to_string())];
        assert!(output_file(&bad, "EOF_x").is_err());
    }

    #[test]
    fn tokens_differ() {
        let (a, b) = (random_token("ghadelimiter_"), random_token("ghadelimiter_"));
        assert_ne!(a, b);
        assert!(a.starts_with("ghadelimiter_") && a.len() == 13 + 32);
    }
}
