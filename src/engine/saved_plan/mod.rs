//! Saved plans: `diff --out plan.json` keeps what the dry run saw and would apply
//! (`model`); `deploy --plan plan.json` applies it only while it still holds (`verify`,
//! pure), which it checks with every lock held and before the first write anywhere
//! (`check` reads the live objects; `engine::fleet` stops the run). The file's JSON Schema
//! is `schema::plan_file_schema` (docs/plan-file-schema.json).

pub mod check;
pub mod model;
pub mod schema;
pub mod verify;

pub use model::{
    PlannedAction, PlannedManifest, PlannedObject, PlannedTarget, Provenance, SavedPlan,
    SavedPlanError, VERSION, config_digest, planned_manifests,
};

/// A plan file a deploy applies, already checked against the run and the manifests.
#[derive(Debug, Clone)]
pub struct PlanToApply {
    pub plan: SavedPlan,
    /// The plan's digest, as `diff --out` printed it.
    pub digest: String,
    /// `--replan`: when the plan no longer holds, show the new diff and go on when confirmed.
    pub replan: bool,
    /// `--yes`: the confirmation of a re-plan, given beforehand.
    pub yes: bool,
}

/// How the plan check stops the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStop {
    /// What each target whose objects moved says, by name.
    pub moved: Vec<(String, String)>,
    /// What every other target says.
    pub others: String,
}

/// Whether the plan check stops the run, and what each target says (pure). `found`: per
/// target, how its objects moved since the plan (each as a sentence).
pub fn plan_stop(found: &[(&str, Vec<String>)], hint: &str) -> Option<PlanStop> {
    let moved: Vec<&(&str, Vec<String>)> = found.iter().filter(|(_, m)| !m.is_empty()).collect();
    if moved.is_empty() {
        return None;
    }
    let names: Vec<&str> = moved.iter().map(|(n, _)| *n).collect();
    Some(PlanStop {
        moved: moved
            .iter()
            .map(|(name, what)| {
                let more = match what.len() {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                (
                    name.to_string(),
                    format!(
                        "not deployed: the plan no longer holds: {}{more}; nothing was written anywhere: {hint}",
                        what[0]
                    ),
                )
            })
            .collect(),
        others: format!(
            "not deployed: the plan no longer holds on {}; nothing was written anywhere: {hint}",
            names.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_that_moved_anywhere_stops_every_target() {
        let none: Vec<(&str, Vec<String>)> = vec![("eu", vec![]), ("us", vec![])];
        assert_eq!(plan_stop(&none, "h"), None);
        assert_eq!(plan_stop(&[], "h"), None);
        let found = vec![
            ("eu", vec![]),
            ("us", vec!["Deployment shop/web changed".into(), "x".into()]),
            ("ap", vec!["ConfigMap shop/c changed".into()]),
        ];
        let stop = plan_stop(&found, "make the plan again").expect("stops");
        assert_eq!(stop.moved.len(), 2);
        assert_eq!(stop.moved[0].0, "us");
        assert_eq!(
            stop.moved[0].1,
            "not deployed: the plan no longer holds: Deployment shop/web changed (and 1 more); nothing was written anywhere: make the plan again"
        );
        assert!(
            stop.others.contains("no longer holds on us, ap;"),
            "{}",
            stop.others
        );
    }
}
