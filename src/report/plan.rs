//! The plan: what a deploy (or a rollback) would change on each target, computed by the
//! clusters themselves (server-side apply with `dryRun=All`) or offline against a git ref.
//! One model for every sink: the terminal text (`to_text`), `-o json` (`to_json`, schema
//! `plan_schema`, version 1), the PR plan comment (`markdown::plan_to_markdown`), and the
//! `plan` field of the report. Diffs in it are of normalised, redacted objects.

use serde_json::{Value, json};

use super::diff::{DiffStyle, render};
// The plan's types live with the rest of the report model (the report carries a plan).
pub use super::model::{
    ChangePlan, PlanMode, PlanStatus, PlannedChange, TargetPlan, plan_summary_line,
};

/// The plan for a terminal or a CI log: per target the counts, each change (updates with
/// their diff, cut per object), what stays and what is left in place, then the summary.
pub fn to_text(plan: &ChangePlan, style: DiffStyle) -> String {
    let mut out = String::new();
    if let Some(against) = &plan.against {
        out.push_str(&format!(
            "compared with {}{}\n",
            against.short_sha(),
            against
                .r#ref
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ));
    }
    for t in &plan.targets {
        out.push_str(&format!("target {}", t.name));
        if let Some(to) = &t.to {
            out.push_str(&format!(" (back to {to})"));
        }
        match t.status {
            PlanStatus::Error => out.push_str(": could not be planned\n"),
            _ => out.push_str(&format!(
                ": {} to create, {} to update, {} unchanged{}\n",
                t.create.len(),
                t.update.len(),
                t.unchanged.len(),
                if t.dropped.is_empty() {
                    String::new()
                } else {
                    format!(", {} left in place", t.dropped.len())
                }
            )),
        }
        for e in &t.errors {
            out.push_str(&format!("  ! {}\n", e.headline()));
        }
        for c in &t.create {
            out.push_str(&format!("  + {}{}\n", c.object, suffix(c)));
        }
        for c in &t.update {
            out.push_str(&format!("  ~ {}{}\n", c.object, suffix(c)));
            if let Some(diff) = &c.diff {
                out.push_str(&render(diff, style, "    "));
            }
        }
        if !t.unchanged.is_empty() {
            out.push_str(&format!("  = unchanged: {}\n", t.unchanged.join(", ")));
        }
        for d in &t.dropped {
            out.push_str(&format!(
                "  - {d}: no longer in the manifests; left in place (rollguard never prunes)\n"
            ));
        }
        for w in &t.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    out.push_str(&plan.summary);
    out.push('\n');
    out
}

fn suffix(c: &PlannedChange) -> String {
    let mut out = String::new();
    if let Some(origin) = &c.origin {
        out.push_str(&format!(" ({origin})"));
    }
    if let Some(note) = &c.note {
        out.push_str(&format!(": would create ({note})"));
    }
    out
}

/// JSON Schema (draft 2020-12) of the plan (`-o json`, and the report's `plan`).
pub fn plan_schema() -> Value {
    let opt_string = json!({"type": ["string", "null"]});
    let commit = json!({
        "type": ["object", "null"],
        "required": ["sha"],
        "properties": {
            "sha": {"type": "string"},
            "ref": {"type": "string"},
            "message": {"type": "string", "description": "first line of the commit message"},
                    "dirty": {"type": "boolean", "description": "true when the working tree had uncommitted changes to tracked files (commit taken from git); absent when clean"}
        }
    });
    let change = json!({
        "type": "object",
        "required": ["object"],
        "properties": {
            "object": {"type": "string", "description": "Kind namespace/name, e.g. \"Deployment shop/web\""},
            "origin": {"type": "string", "description": "file:line of the manifest"},
            "note": {"type": "string", "description": "why the server could not check it, e.g. \"CRD not yet on the cluster\""},
            "diff": {"type": "string", "description": "unified diff of the normalised objects, Secret values redacted (updates)"}
        }
    });
    let failure = json!({
        "type": "object",
        "required": ["object", "pod", "container", "reason", "message"],
        "properties": {
            "object": {"type": "string"},
            "pod": opt_string,
            "container": opt_string,
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "events": {"type": "array", "items": {"type": "string"}}
        }
    });
    let names = json!({"type": "array", "items": {"type": "string"}});
    let target = json!({
        "type": "object",
        "required": ["name", "status", "create", "update", "unchanged", "dropped", "errors", "warnings"],
        "properties": {
            "name": {"type": "string"},
            "status": {"type": "string", "enum": ["changes", "no-changes", "error"]},
            "to": {"type": "string", "description": "a rollback's destination revision, e.g. \"v3\""},
            "create": {"type": "array", "items": change},
            "update": {"type": "array", "items": change},
            "unchanged": names,
            "dropped": {"type": "array", "items": {"type": "string"},
                        "description": "objects the compared side has and this one drops: left in place, never pruned"},
            "errors": {"type": "array", "items": failure},
            "warnings": names
        }
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:rollguard:plan:v1",
        "title": "rollguard plan",
        "type": "object",
        "required": ["version", "app", "mode", "commit", "summary", "changes", "targets_changed", "targets"],
        "properties": {
            "version": {"const": 1},
            "app": {"type": "string"},
            "mode": {"type": "string", "enum": ["dry-run", "offline", "rollback"]},
            "commit": commit,
            "against": commit,
            "summary": {"type": "string"},
            "changes": {"type": "integer", "minimum": 0},
            "targets_changed": {"type": "integer", "minimum": 0},
            "targets": {"type": "array", "items": target}
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::model::Failure;

    pub fn sample() -> ChangePlan {
        let mut eu = TargetPlan::new("eu");
        eu.update.push(PlannedChange {
            object: "Deployment shop/web".into(),
            origin: Some("k8s/app.yaml:8".into()),
            note: None,
            diff: Some(
                "--- live\n+++ dry run\n@@ -1,2 +1,2 @@\n kind: Deployment\n-image: web:v1\n+image: web:v2\n"
                    .into(),
            ),
        });
        eu.create.push(PlannedChange {
            object: "Widget shop/w1".into(),
            origin: Some("k8s/w.yaml:1".into()),
            note: Some("CRD not yet on the cluster".into()),
            diff: None,
        });
        eu.unchanged.push("ConfigMap shop/web-config".into());
        let mut us = TargetPlan::new("us");
        us.unchanged.push("ConfigMap shop/web-config".into());
        let mut ap = TargetPlan::new("ap");
        ap.errors.push(Failure {
            object: "cluster".into(),
            reason: "ConnectionRefused".into(),
            message: "connection refused".into(),
            ..Default::default()
        });
        ChangePlan::new("shop", PlanMode::DryRun, None, vec![eu, us, ap])
    }

    #[test]
    fn counts_summary_and_exit_codes() {
        let plan = sample();
        assert_eq!((plan.changes, plan.targets_changed), (2, 1));
        assert_eq!(
            plan.summary,
            "would change 2 objects on 1 of 3 targets; 1 could not be planned: ap"
        );
        assert_eq!(plan.targets[1].status, PlanStatus::NoChanges);
        assert_eq!(plan.exit_code(true), 1);
        let ok = |targets| ChangePlan::new("shop", PlanMode::DryRun, None, targets);
        let changed = ok(vec![sample().targets[0].clone()]);
        assert_eq!(changed.summary, "would change 2 objects on 1 of 1 target");
        assert_eq!((changed.exit_code(true), changed.exit_code(false)), (2, 0));
        let same = ok(vec![TargetPlan::new("eu"), TargetPlan::new("us")]);
        assert_eq!(same.summary, "would change 0 objects on 0 of 2 targets");
        assert_eq!(same.exit_code(true), 0);
    }

    #[test]
    fn text_lists_every_kind_of_change() {
        let text = to_text(&sample(), DiffStyle::plain());
        for want in [
            "target eu: 1 to create, 1 to update, 1 unchanged\n",
            "  + Widget shop/w1 (k8s/w.yaml:1): would create (CRD not yet on the cluster)\n",
            "  ~ Deployment shop/web (k8s/app.yaml:8)\n",
            "    -image: web:v1\n    +image: web:v2\n",
            "  = unchanged: ConfigMap shop/web-config\n",
            "target ap: could not be planned\n  ! cluster: ConnectionRefused: connection refused\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(text.ends_with("1 could not be planned: ap\n"), "{text}");
        let mut dropped = sample();
        dropped.targets[1].dropped.push("ConfigMap shop/old".into());
        let text = to_text(&dropped, DiffStyle::plain());
        assert!(
            text.contains("  - ConfigMap shop/old: no longer in the manifests; left in place (rollguard never prunes)"),
            "{text}"
        );
    }

    /// docs/plan-schema.json is `plan_schema()`; regenerate with UPDATE_SCHEMAS=1.
    #[test]
    fn docs_schema_is_current() {
        crate::util::generated_docs::assert_current("plan-schema.json", &plan_schema());
    }
}
