//! The decisions around script stages, as pure functions: how the pipeline splits at fleet
//! stages, how a run's end becomes a stage outcome, which targets go into a fleet stage, and
//! which rollback commands run, in which order.

use crate::config::{PipelineStage, RollbackOrder};
use crate::report::{StageOutcome, StageResult};

use super::process::End;

/// A step of the deploy across the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stages every target runs in its own task (indices into the pipeline), `apply` among
    /// them or not.
    Targets(Vec<usize>),
    /// A fleet script (index into the pipeline): every target got here first.
    Fleet(usize),
}

/// The pipeline as steps: runs of target-scoped stages, split by fleet stages. Never empty
/// (a pipeline that starts with a fleet stage starts with an empty `Targets` step, in which
/// the targets still connect and lock).
pub fn steps(pipeline: &[PipelineStage]) -> Vec<Step> {
    let mut steps = vec![Step::Targets(Vec::new())];
    for (i, stage) in pipeline.iter().enumerate() {
        // A wave stage runs as a fleet stage here: the coordinator gives it its waves.
        let fleet = matches!(stage, PipelineStage::Script(s) if s.scope.is_shared());
        if fleet {
            steps.push(Step::Fleet(i));
            steps.push(Step::Targets(Vec::new()));
        } else if let Some(Step::Targets(run)) = steps.last_mut() {
            run.push(i);
        }
    }
    if steps.last() == Some(&Step::Targets(Vec::new())) && steps.len() > 1 {
        steps.pop();
    }
    steps
}

/// How the end of a stage's command counts; `tolerated`: `continue_on_error` of a `run`.
pub fn stage_outcome(end: &End, tolerated: bool) -> StageOutcome {
    let outcome = match end {
        End::Exited(0) => StageOutcome::Succeeded,
        End::Exited(_) | End::Signalled(_) | End::NotStarted(_) => StageOutcome::Failed,
        End::TimedOut => StageOutcome::TimedOut,
        End::Stopped => StageOutcome::Stopped,
    };
    match outcome {
        StageOutcome::Failed | StageOutcome::TimedOut if tolerated => StageOutcome::Warned,
        other => other,
    }
}

/// Whether an outcome fails its target(s).
pub fn fails_target(outcome: StageOutcome) -> bool {
    matches!(
        outcome,
        StageOutcome::Failed | StageOutcome::TimedOut | StageOutcome::Stopped
    )
}

/// The rollback commands a target runs, in `order`: those of the target-scoped script stages
/// whose `run` started (including the one that failed) and that have a rollback command.
/// `ran`: the stage results of the deploy.
pub fn target_rollbacks(
    pipeline: &[PipelineStage],
    ran: &[StageResult],
    order: RollbackOrder,
) -> Vec<usize> {
    ordered(rollbacks(pipeline, ran, false), order)
}

/// The fleet stages' rollback commands due, in `order`, from the results of every target
/// that rolls back (a fleet stage shows on each target that took part). Whether one of them
/// runs is [`fleet_rollback_decision`]'s.
pub fn fleet_rollbacks<'a>(
    pipeline: &[PipelineStage],
    rolling_back: impl IntoIterator<Item = &'a [StageResult]>,
    order: RollbackOrder,
) -> Vec<usize> {
    let mut due: Vec<usize> = rolling_back
        .into_iter()
        .flat_map(|ran| rollbacks(pipeline, ran, true))
        .collect();
    due.sort_unstable();
    due.dedup();
    ordered(due, order)
}

/// Pipeline indices (ascending) in the rollback order: PipeCD's SCRIPT_RUN order (the
/// pipeline's) by default, last-first under `rollback_order: reverse`.
fn ordered(mut due: Vec<usize>, order: RollbackOrder) -> Vec<usize> {
    if order == RollbackOrder::Reverse {
        due.reverse();
    }
    due
}

/// `shared`: the rollbacks of stages run once for several targets (fleet, wave), else those
/// of target-scoped stages.
fn rollbacks(pipeline: &[PipelineStage], ran: &[StageResult], shared: bool) -> Vec<usize> {
    pipeline
        .iter()
        .enumerate()
        .filter_map(|(i, stage)| match stage {
            PipelineStage::Script(s)
                if s.scope.is_shared() == shared
                    && s.rollback.is_some()
                    && ran
                        .iter()
                        .any(|r| r.name == s.name && !r.rollback && r.outcome.started()) =>
            {
                Some(i)
            }
            _ => None,
        })
        .collect()
}

/// Where a target that took part in a fleet stage stands when that stage's rollback is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No manifest of the new revision reached it (it stopped before its apply wrote).
    NeverReceived,
    /// Its manifests went back to the release before (the re-apply finished).
    RolledBack,
    /// It runs the new revision: deployed, not rolled back (policy, cancel, lock lost), or
    /// its rollback did not finish.
    OnNewRevision,
}

/// A participant's standing from what its run knows. `received`: objects of the new
/// revision were written to it; `runs_new_manifests`: the deploy changed nothing there
/// because it already runs them; `manifests_back`: its rollback re-applied the release
/// before and finished (a failing rollback command after that does not undo it).
pub fn standing(received: bool, runs_new_manifests: bool, manifests_back: bool) -> Standing {
    if manifests_back {
        Standing::RolledBack
    } else if received || runs_new_manifests {
        Standing::OnNewRevision
    } else {
        Standing::NeverReceived
    }
}

/// Whether a fleet stage's rollback ("migrate down") runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetRollback {
    /// Every target that took part is off the new revision.
    Run,
    /// Not now: these participants still run the new revision, which the rollback would
    /// pull the ground from under.
    Hold { still_on: Vec<String> },
}

/// A fleet stage's rollback runs only when no target that took part in it is still on the
/// new revision: each either rolled its manifests back or never received them. Pure;
/// `participants` as (target name, standing).
pub fn fleet_rollback_decision(participants: &[(&str, Standing)]) -> FleetRollback {
    let still_on: Vec<String> = participants
        .iter()
        .filter(|(_, s)| *s == Standing::OnNewRevision)
        .map(|(name, _)| (*name).to_string())
        .collect();
    if still_on.is_empty() {
        FleetRollback::Run
    } else {
        FleetRollback::Hold { still_on }
    }
}

/// The note of a held fleet rollback, on its not-run stage result: `not run: eu, us still on
/// the new revision`.
pub fn held_note(still_on: &[String]) -> String {
    format!("not run: {}{HELD}", still_on.join(", "))
}

const HELD: &str = " still on the new revision";

/// Whether a stage result is a fleet rollback held by [`fleet_rollback_decision`] (not run
/// on purpose, not a failure: it runs with the rollback of the targets that hold it).
pub fn is_held(result: &StageResult) -> bool {
    result.rollback
        && result.outcome == StageOutcome::NotRun
        && result
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("not run: ") && m.ends_with(HELD))
}

/// The warning logged once for a held fleet rollback: what, and what to do.
pub fn held_warning(stage: &str, still_on: &[String]) -> String {
    let targets = still_on.join(",");
    format!(
        "the rollback command of fleet stage {stage} was not run: {} still on the new revision, which it would break; roll them back with `rollguard rollback --target {targets}`, and that rollback then runs it",
        still_on.join(", ")
    )
}

/// The lines the prompt shows for the rollback commands due after the manifests: one per
/// command, in the order they run. Pure; the commands come from the config by stage name.
pub fn rollback_command_lines(
    pipeline: &[PipelineStage],
    ran: &[StageResult],
    order: RollbackOrder,
) -> Vec<String> {
    let line = |i: usize, fleet: bool| match pipeline.get(i) {
        Some(PipelineStage::Script(stage)) => stage.rollback.as_ref().map(|c| {
            let text = match c {
                crate::config::ScriptCommand::Shell(text) => text.clone(),
                crate::config::ScriptCommand::Argv(argv) => argv.join(" "),
            };
            let once = if fleet {
                format!(" ({}, once)", stage.scope)
            } else {
                String::new()
            };
            format!(
                "  then the rollback command of stage {}{once}: {text}",
                stage.name
            )
        }),
        _ => None,
    };
    let mut lines: Vec<String> = target_rollbacks(pipeline, ran, order)
        .into_iter()
        .filter_map(|i| line(i, false))
        .collect();
    lines.extend(
        fleet_rollbacks(pipeline, [ran], order)
            .into_iter()
            .filter_map(|i| line(i, true)),
    );
    lines
}

/// The stage a failure came from, for ROLLGUARD_FAILED_STAGE: the first script whose `run`
/// failed, else `apply` (the apply or the rollout failed).
/// ROLLGUARD_FAILED_STAGE of a rollback command: the stage that failed, only when the
/// target's own failure is why it rolls back (a target rolled back by policy or by hand had
/// no failed stage).
pub fn rollback_failed_stage(
    reason: crate::stages::env::RollbackReason,
    ran: &[StageResult],
) -> Option<String> {
    (reason == crate::stages::env::RollbackReason::Failed).then(|| failed_stage(ran))
}

pub fn failed_stage(ran: &[StageResult]) -> String {
    ran.iter()
        .find(|r| !r.rollback && fails_target(r.outcome))
        .map_or_else(|| "apply".to_string(), |r| r.name.clone())
}

/// What `deploy --dry-run` says about the pipeline: the stages in order, with their scope,
/// and whether the dry run runs them.
pub fn describe_pipeline(pipeline: &[PipelineStage]) -> Vec<String> {
    let mut lines = vec!["dry run: the pipeline, in order:".to_string()];
    for (i, stage) in pipeline.iter().enumerate() {
        lines.push(match stage {
            PipelineStage::Apply => format!(
                "  {}. apply: server-side apply as a dry run (nothing is written), no wait",
                i + 1
            ),
            PipelineStage::Script(s) => format!(
                "  {}. script {} (scope {}{}): {}",
                i + 1,
                s.name,
                s.scope,
                if s.rollback.is_some() {
                    ", has a rollback command"
                } else {
                    ""
                },
                if s.dry_run {
                    "runs, with ROLLGUARD_DRY_RUN=true (dry_run: true)"
                } else {
                    "not run (set dry_run: true on the stage to run it in dry runs)"
                }
            ),
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Scope, ScriptCommand, ScriptStage};

    fn script(name: &str, scope: Scope, rollback: bool) -> PipelineStage {
        PipelineStage::Script(ScriptStage {
            name: name.into(),
            run: ScriptCommand::Shell("x".into()),
            rollback: rollback.then(|| ScriptCommand::Shell("undo".into())),
            timeout: std::time::Duration::from_secs(1),
            env: Default::default(),
            pass_env: Vec::new(),
            working_dir: ".".into(),
            shell: vec!["sh".into(), "-c".into()],
            continue_on_error: false,
            scope,
            kill_grace: std::time::Duration::from_secs(1),
            dry_run: false,
            always: false,
            line: 1,
        })
    }

    fn ran(name: &str, outcome: StageOutcome) -> StageResult {
        StageResult {
            name: name.into(),
            scope: "target".into(),
            rollback: false,
            outcome,
            exit_code: None,
            seconds: 0.0,
            message: None,
            output: vec![],
        }
    }

    #[test]
    fn steps_table() {
        use PipelineStage::Apply;
        let m = script("m", Scope::Fleet, true);
        let s = script("s", Scope::Target, true);
        let w = script("w", Scope::Wave, true);
        let cases = vec![
            (vec![Apply], vec![Step::Targets(vec![0])]),
            (
                vec![m.clone(), Apply, s.clone()],
                vec![
                    Step::Targets(vec![]),
                    Step::Fleet(0),
                    Step::Targets(vec![1, 2]),
                ],
            ),
            (
                vec![s.clone(), Apply, m.clone()],
                vec![Step::Targets(vec![0, 1]), Step::Fleet(2)],
            ),
            // A wave stage is a step of its own, as a fleet stage is.
            (
                vec![w.clone(), Apply, s.clone()],
                vec![
                    Step::Targets(vec![]),
                    Step::Fleet(0),
                    Step::Targets(vec![1, 2]),
                ],
            ),
        ];
        for (pipeline, want) in cases {
            assert_eq!(steps(&pipeline), want, "{pipeline:?}");
        }
    }

    #[test]
    fn dry_run_listing() {
        let mut smoke = script("smoke", Scope::Target, false);
        if let PipelineStage::Script(s) = &mut smoke {
            s.dry_run = true;
        }
        let lines = describe_pipeline(&[
            script("migrate", Scope::Fleet, true),
            PipelineStage::Apply,
            smoke,
        ]);
        assert_eq!(lines.len(), 4);
        assert!(
            lines[1]
                .starts_with("  1. script migrate (scope fleet, has a rollback command): not run"),
            "{lines:?}"
        );
        assert!(lines[2].starts_with("  2. apply"), "{lines:?}");
        assert!(
            lines[3].contains("smoke (scope target): runs, with ROLLGUARD_DRY_RUN=true"),
            "{lines:?}"
        );
    }

    #[test]
    fn outcome_table() {
        use StageOutcome::*;
        let cases = [
            (End::Exited(0), false, Succeeded),
            (End::Exited(0), true, Succeeded),
            (End::Exited(2), false, Failed),
            (End::Exited(2), true, Warned),
            (End::TimedOut, false, TimedOut),
            (End::TimedOut, true, Warned),
            (End::Signalled(9), false, Failed),
            (End::NotStarted("x".into()), true, Warned),
            // A cancel is never tolerated away: the run is ending.
            (End::Stopped, true, Stopped),
        ];
        for (end, tolerated, want) in cases {
            assert_eq!(stage_outcome(&end, tolerated), want, "{end:?} {tolerated}");
        }
        assert!(fails_target(Failed) && fails_target(TimedOut) && !fails_target(Warned));
    }

    #[test]
    fn rollback_order_table() {
        use StageOutcome::*;
        const P: RollbackOrder = RollbackOrder::Pipeline;
        let pipeline = vec![
            script("migrate", Scope::Fleet, true),
            script("prep", Scope::Target, true),
            script("norollback", Scope::Target, false),
            PipelineStage::Apply,
            script("smoke", Scope::Target, true),
            script("later", Scope::Target, true),
        ];
        // smoke failed: prep and smoke roll back, in pipeline order; later never started.
        let deploy = vec![
            ran("migrate", Succeeded),
            ran("prep", Succeeded),
            ran("norollback", Succeeded),
            ran("smoke", Failed),
            ran("later", NotRun),
        ];
        assert_eq!(target_rollbacks(&pipeline, &deploy, P), vec![1, 4]);
        assert_eq!(fleet_rollbacks(&pipeline, [&deploy[..]], P), vec![0]);
        assert_eq!(failed_stage(&deploy), "smoke");
        assert_eq!(
            rollback_command_lines(&pipeline, &deploy, P),
            vec![
                "  then the rollback command of stage prep: undo",
                "  then the rollback command of stage smoke: undo",
                "  then the rollback command of stage migrate (fleet, once): undo",
            ]
        );
        // A wave stage's rollback is due as a fleet stage's is, once, not per target.
        let waved = vec![
            script("warm", Scope::Wave, true),
            PipelineStage::Apply,
            script("smoke", Scope::Target, true),
        ];
        let wave_run = vec![ran("warm", Succeeded), ran("smoke", Failed)];
        assert_eq!(
            target_rollbacks(&waved, &wave_run, RollbackOrder::Pipeline),
            vec![2]
        );
        assert_eq!(
            fleet_rollbacks(&waved, [&wave_run[..]], RollbackOrder::Pipeline),
            vec![0]
        );
        assert_eq!(
            rollback_command_lines(&waved, &wave_run, RollbackOrder::Pipeline),
            vec![
                "  then the rollback command of stage smoke: undo",
                "  then the rollback command of stage warm (wave, once): undo",
            ]
        );
        // Only the apply failed: the scripts before it roll back.
        let apply_failed = vec![ran("migrate", Succeeded), ran("prep", Warned)];
        assert_eq!(target_rollbacks(&pipeline, &apply_failed, P), vec![1]);
        assert_eq!(failed_stage(&apply_failed), "apply");
        // Only the target's own failure names a failed stage.
        use crate::stages::env::RollbackReason::{Failed as OwnFailure, Manual, Policy};
        for (reason, ran, want) in [
            (OwnFailure, &deploy, Some("smoke")),
            (OwnFailure, &apply_failed, Some("apply")),
            (Policy, &apply_failed, None),
            (Manual, &deploy, None),
        ] {
            assert_eq!(
                rollback_failed_stage(reason, ran).as_deref(),
                want,
                "{reason:?}"
            );
        }
        // Nothing rolls back anywhere: no fleet rollback either.
        assert_eq!(
            fleet_rollbacks(&pipeline, std::iter::empty(), P),
            Vec::<usize>::new()
        );
        // A rollback command's own result does not count as the stage having run.
        let mut only_rollback = ran("smoke", Succeeded);
        only_rollback.rollback = true;
        assert_eq!(
            target_rollbacks(&pipeline, &[only_rollback], P),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn pipeline_or_reverse_order_table() {
        use RollbackOrder::{Pipeline, Reverse};
        use StageOutcome::*;
        let pipeline = vec![
            script("m1", Scope::Fleet, true),
            script("a", Scope::Target, true),
            script("b", Scope::Target, true),
            PipelineStage::Apply,
            script("c", Scope::Target, true),
            script("m2", Scope::Fleet, true),
        ];
        let all = vec![
            ran("m1", Succeeded),
            ran("a", Succeeded),
            ran("b", Warned),
            ran("c", Succeeded),
            ran("m2", Failed),
        ];
        let to_c = &all[..4];
        // (what ran, order, target stages due, fleet stages due)
        type Row<'a> = (&'a [StageResult], RollbackOrder, Vec<usize>, Vec<usize>);
        let cases: Vec<Row> = vec![
            (&all, Pipeline, vec![1, 2, 4], vec![0, 5]),
            (&all, Reverse, vec![4, 2, 1], vec![5, 0]),
            (to_c, Pipeline, vec![1, 2, 4], vec![0]),
            (to_c, Reverse, vec![4, 2, 1], vec![0]),
            (&all[..1], Reverse, vec![], vec![0]),
        ];
        for (ran, order, targets, fleet) in cases {
            assert_eq!(
                target_rollbacks(&pipeline, ran, order),
                targets,
                "{order:?} {ran:?}"
            );
            assert_eq!(
                fleet_rollbacks(&pipeline, [ran], order),
                fleet,
                "{order:?} {ran:?}"
            );
        }
        // The prompt lists them in the order they run.
        let names = |order| -> Vec<String> {
            rollback_command_lines(&pipeline, &all, order)
                .iter()
                .filter_map(|l| {
                    let name = l.split_whitespace().nth(6)?;
                    Some(name.trim_end_matches(':').to_string())
                })
                .collect()
        };
        assert_eq!(names(Pipeline), vec!["a", "b", "c", "m1", "m2"]);
        assert_eq!(names(Reverse), vec!["c", "b", "a", "m2", "m1"]);
    }

    #[test]
    fn fleet_rollback_runs_only_when_no_participant_is_still_on_the_new_revision() {
        use StageOutcome::NotRun;
        use Standing::*;
        let hold = |names: &[&str]| FleetRollback::Hold {
            still_on: names.iter().map(|n| n.to_string()).collect(),
        };
        // (case, participants as (name, received, unchanged, manifests back), decision)
        type Row = (
            &'static str,
            Vec<(&'static str, bool, bool, bool)>,
            FleetRollback,
        );
        let cases: Vec<Row> = vec![
            (
                "all rolled back",
                vec![("eu", true, false, true), ("us", true, false, true)],
                FleetRollback::Run,
            ),
            (
                "one still deployed (rollback-failed: only the other failed)",
                vec![("eu", true, false, false), ("us", true, false, true)],
                hold(&["eu"]),
            ),
            (
                "one never received (failed before its apply wrote), the other rolled back",
                vec![("eu", false, false, false), ("us", true, false, true)],
                FleetRollback::Run,
            ),
            (
                "cancelled before the apply, and cancelled then rolled back",
                vec![("eu", false, false, false), ("us", true, false, true)],
                FleetRollback::Run,
            ),
            (
                "cancelled after the apply and left (on_cancel: leave, or no time left)",
                vec![("eu", true, false, false), ("us", true, false, false)],
                hold(&["eu", "us"]),
            ),
            (
                "a rollback that failed to re-apply keeps the new revision",
                vec![("eu", true, false, true), ("us", true, false, false)],
                hold(&["us"]),
            ),
            (
                "a rollback command that failed after the manifests went back",
                vec![("eu", true, false, true)],
                FleetRollback::Run,
            ),
            (
                "a target the deploy changed nothing on runs the new manifests",
                vec![("eu", false, true, false), ("us", true, false, true)],
                hold(&["eu"]),
            ),
            ("nobody took part", vec![], FleetRollback::Run),
        ];
        for (case, rows, want) in cases {
            let participants: Vec<(&str, Standing)> = rows
                .iter()
                .map(|(n, received, unchanged, back)| (*n, standing(*received, *unchanged, *back)))
                .collect();
            assert_eq!(fleet_rollback_decision(&participants), want, "{case}");
        }
        assert_eq!(standing(true, false, true), RolledBack);
        assert_eq!(standing(false, false, false), NeverReceived);
        assert_eq!(standing(true, true, false), OnNewRevision);
        let note = held_note(&["eu".into(), "us".into()]);
        assert_eq!(note, "not run: eu, us still on the new revision");
        let mut held = ran("migrate", NotRun);
        held.message = Some(note);
        assert!(
            !is_held(&held),
            "a run that was not run is no held rollback"
        );
        held.rollback = true;
        assert!(is_held(&held));
        held.message = Some("not run: no time was left in the cancel budget".into());
        assert!(!is_held(&held));
        let warning = held_warning("migrate", &["eu".into(), "us".into()]);
        assert!(
            warning.contains("fleet stage migrate was not run: eu, us still on the new revision")
                && warning.contains("`rollguard rollback --target eu,us`"),
            "{warning}"
        );
    }
}
