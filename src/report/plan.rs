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

/// Whether a planned change creates or updates its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    Create,
    Update,
}

impl Sign {
    fn mark(self) -> &'static str {
        match self {
            Sign::Create => "+",
            Sign::Update => "~",
        }
    }
}

/// One change as the fleet sees it: the same object, created or changed the same way (the
/// same note and the same diff), on these targets, in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetChange<'a> {
    pub sign: Sign,
    pub change: &'a PlannedChange,
    pub targets: Vec<&'a str>,
}

/// The changes of every target, each distinct change once with the targets it is on, in the
/// order they first appear (targets in config order, creates before updates). Pure.
pub fn group_changes(plan: &ChangePlan) -> Vec<FleetChange<'_>> {
    let mut groups: Vec<FleetChange> = Vec::new();
    for t in &plan.targets {
        let changes = t
            .create
            .iter()
            .map(|c| (Sign::Create, c))
            .chain(t.update.iter().map(|c| (Sign::Update, c)));
        for (sign, change) in changes {
            let same = |g: &&mut FleetChange| {
                g.sign == sign
                    && g.change.object == change.object
                    && g.change.note == change.note
                    && g.change.diff == change.diff
            };
            match groups.iter_mut().find(|g| same(g)) {
                Some(group) => group.targets.push(&t.name),
                None => groups.push(FleetChange {
                    sign,
                    change,
                    targets: vec![&t.name],
                }),
            }
        }
    }
    groups
}

/// ", 1 left in place, 1 to prune" after a target's counts (empty when neither).
fn left_and_pruned(t: &TargetPlan) -> String {
    let mut out = String::new();
    if !t.dropped.is_empty() {
        out.push_str(&format!(", {} left in place", t.dropped.len()));
    }
    if !t.prune.is_empty() {
        out.push_str(&format!(", {} to prune", t.prune.len()));
    }
    out
}

/// What a plan says of an object the manifests dropped that stays: a rollback's plan (`to`)
/// never prunes; a deploy's prunes with `prune: true` or `--prune` (when it is this app's).
pub fn left_note(t: &TargetPlan) -> &'static str {
    if t.to.is_some() {
        "no longer in the manifests; left in place (a rollback never prunes)"
    } else {
        "no longer in the manifests; left in place (`prune: true` or `--prune` deletes what is still this app's after a healthy deploy)"
    }
}

/// The plan for a terminal or a CI log: per target its counts (its errors, what is left in
/// place, its warnings), then each distinct change once with the targets it is on
/// (`~ Deployment shop/web on eu, us, ap`, updates with their diff, cut per object), then
/// the summary. Unchanged objects are a count; `verbose` also names them.
pub fn to_text(plan: &ChangePlan, style: DiffStyle, verbose: bool) -> String {
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
                left_and_pruned(t)
            )),
        }
        for e in &t.errors {
            out.push_str(&format!("  ! {}\n", e.headline()));
        }
        if verbose && !t.unchanged.is_empty() {
            out.push_str(&format!("  = unchanged: {}\n", t.unchanged.join(", ")));
        }
        for d in &t.dropped {
            out.push_str(&format!("  - {d}: {}\n", left_note(t)));
        }
        for p in &t.prune {
            out.push_str(&format!(
                "  x {p}: no longer in the manifests; pruned after a healthy deploy (prune is on)\n"
            ));
        }
        for w in &t.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    let groups = group_changes(plan);
    if !groups.is_empty() {
        out.push_str("changes:\n");
    }
    // One target: its name is already the only one above.
    let several = plan.targets.len() > 1;
    for g in groups {
        let on = if several {
            format!(" on {}", g.targets.join(", "))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  {} {}{on}{}\n",
            g.sign.mark(),
            g.change.object,
            suffix(g.change)
        ));
        if let Some(diff) = &g.change.diff {
            out.push_str(&render(diff, style, "    "));
        }
    }
    out.push_str(&plan.summary);
    out.push('\n');
    if let Some(digest) = &plan.saved_as {
        out.push_str(&format!("saved as plan {digest}\n"));
    }
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
                        "description": "objects the compared side (the last release, or a git ref) has and this one drops: left in place"},
            "prune": {"type": "array", "items": {"type": "string"},
                      "description": "with prune on: objects of the last release the manifests drop that the deploy would delete after a healthy deploy (still this app's)"},
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
            "targets": {"type": "array", "items": target},
            "saved_as": {"type": "string", "description": "sha256 of the plan file this dry run saved (`--out`; docs/plan-file-schema.json)"}
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
        let text = to_text(&sample(), DiffStyle::plain(), true);
        for want in [
            "target eu: 1 to create, 1 to update, 1 unchanged\n",
            "  + Widget shop/w1 on eu (k8s/w.yaml:1): would create (CRD not yet on the cluster)\n",
            "  ~ Deployment shop/web on eu (k8s/app.yaml:8)\n",
            "    -image: web:v1\n    +image: web:v2\n",
            "  = unchanged: ConfigMap shop/web-config\n",
            "target ap: could not be planned\n  ! cluster: ConnectionRefused: connection refused\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(text.ends_with("1 could not be planned: ap\n"), "{text}");
        // Unchanged objects are a count unless verbose.
        let short = to_text(&sample(), DiffStyle::plain(), false);
        assert!(!short.contains("web-config"), "{short}");
        assert!(short.contains("1 to update, 1 unchanged\n"), "{short}");
        let mut dropped = sample();
        dropped.targets[1].dropped.push("ConfigMap shop/old".into());
        let text = to_text(&dropped, DiffStyle::plain(), false);
        assert!(
            text.contains("  - ConfigMap shop/old: no longer in the manifests; left in place (`prune: true` or `--prune`"),
            "{text}"
        );
        assert!(text.contains(", 1 left in place\n"), "{text}");
        dropped.targets[1].to = Some("v3".into());
        dropped.targets[1]
            .prune
            .push("ConfigMap shop/legacy".into());
        let text = to_text(&dropped, DiffStyle::plain(), false);
        for want in [
            "  - ConfigMap shop/old: no longer in the manifests; left in place (a rollback never prunes)\n",
            ", 1 left in place, 1 to prune\n",
            "  x ConfigMap shop/legacy: no longer in the manifests; pruned after a healthy deploy",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }

    fn change(object: &str, diff: Option<&str>, note: Option<&str>) -> PlannedChange {
        PlannedChange {
            object: object.into(),
            origin: Some("k8s/app.yaml:8".into()),
            note: note.map(str::to_string),
            diff: diff.map(str::to_string),
        }
    }

    #[test]
    fn the_same_change_on_several_targets_is_one_group() {
        const IMAGE: &str = "--- live\n+++ dry run\n-image: v1\n+image: v2\n";
        const OTHER: &str = "--- live\n+++ dry run\n-image: v0\n+image: v2\n";
        let web = |diff| change("Deployment shop/web", Some(diff), None);
        let target = |name: &str, create: Vec<PlannedChange>, update: Vec<PlannedChange>| {
            let mut t = TargetPlan::new(name);
            t.create = create;
            t.update = update;
            t
        };
        let fresh = || change("ConfigMap shop/fresh", None, None);
        // (targets, the groups as (sign, object, targets))
        type Case = (
            Vec<TargetPlan>,
            Vec<(Sign, &'static str, Vec<&'static str>)>,
        );
        let cases: Vec<Case> = vec![
            (vec![], vec![]),
            (
                vec![target("eu", vec![], vec![]), target("us", vec![], vec![])],
                vec![],
            ),
            (
                vec![
                    target("eu", vec![], vec![web(IMAGE)]),
                    target("us", vec![], vec![web(IMAGE)]),
                    target("ap", vec![], vec![web(IMAGE)]),
                ],
                vec![(Sign::Update, "Deployment shop/web", vec!["eu", "us", "ap"])],
            ),
            // Another diff is another change; a create is never an update.
            (
                vec![
                    target("eu", vec![], vec![web(IMAGE)]),
                    target("us", vec![], vec![web(OTHER)]),
                    target("ap", vec![fresh()], vec![web(IMAGE)]),
                    target("sa", vec![fresh()], vec![]),
                ],
                vec![
                    (Sign::Update, "Deployment shop/web", vec!["eu", "ap"]),
                    (Sign::Update, "Deployment shop/web", vec!["us"]),
                    (Sign::Create, "ConfigMap shop/fresh", vec!["ap", "sa"]),
                ],
            ),
            // A create with a note (namespace not yet there) differs from one without.
            (
                vec![
                    target("eu", vec![fresh()], vec![]),
                    target(
                        "us",
                        vec![change(
                            "ConfigMap shop/fresh",
                            None,
                            Some("namespace shop not yet on the cluster"),
                        )],
                        vec![],
                    ),
                ],
                vec![
                    (Sign::Create, "ConfigMap shop/fresh", vec!["eu"]),
                    (Sign::Create, "ConfigMap shop/fresh", vec!["us"]),
                ],
            ),
        ];
        for (targets, want) in cases {
            let plan = ChangePlan::new("shop", PlanMode::DryRun, None, targets);
            let got: Vec<(Sign, &str, Vec<&str>)> = group_changes(&plan)
                .into_iter()
                .map(|g| (g.sign, g.change.object.as_str(), g.targets))
                .collect();
            assert_eq!(got, want);
        }
        let plan = ChangePlan::new(
            "shop",
            PlanMode::DryRun,
            None,
            ["eu", "us", "ap"]
                .iter()
                .map(|n| target(n, vec![], vec![web(IMAGE)]))
                .collect(),
        );
        let text = to_text(&plan, DiffStyle::plain(), false);
        assert_eq!(
            text.matches("~ Deployment shop/web on eu, us, ap (k8s/app.yaml:8)\n")
                .count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("+image: v2").count(), 1, "{text}");
    }

    /// docs/plan-schema.json is `plan_schema()`; regenerate with UPDATE_SCHEMAS=1.
    #[test]
    fn docs_schema_is_current() {
        crate::util::generated_docs::assert_current("plan-schema.json", &plan_schema());
    }
}
