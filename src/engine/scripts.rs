//! Script stages across targets: fleet scripts once between the steps of every target, and
//! the rollback commands after a target's manifests were rolled back (a target's own scripts
//! run in `target_run`). Running a command is `crate::stages`; the decisions are `stages::plan`.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{PipelineStage, ScriptStage};
use crate::engine::plan::Plan;
use crate::engine::target_run::{
    DRY_RUN_NOTE, TargetRun, failure_text, finish, record_run, target_deployment,
};
use crate::report::progress::{Progress, Stage};
use crate::report::{StageOutcome, StageResult, TargetOutcome};
use crate::stages::env::{Deployment, RollbackReason, common};
use crate::stages::{self, Which, plan as decide};

/// Less than this left of the cancel budget: a rollback command is not started at all.
const MIN_COMMAND_TIME: Duration = Duration::from_millis(200);

/// The deployment a fleet script runs in: what all its targets share.
fn fleet_deployment(plan: &Plan, runs: &[&TargetRun], stage: &str, rollback: bool) -> Deployment {
    let last_goods: Vec<_> = runs.iter().map(|r| r.last_good()).collect();
    // A fleet rollback is for its own failure when any target taking part failed itself.
    let reason_of = |r: &TargetRun| r.rollback_reason.unwrap_or(RollbackReason::Failed);
    let why = runs
        .iter()
        .find(|r| reason_of(r) == RollbackReason::Failed)
        .or(runs.first())
        .map(|r| (*r, reason_of(r)));
    Deployment {
        app: plan.config.app.clone(),
        target: None,
        targets: runs.iter().map(|r| r.target.name.clone()).collect(),
        namespace: plan.config.namespace.clone(),
        revision: common(&runs.iter().map(|r| r.revision()).collect::<Vec<_>>()),
        commit: plan.commit.as_ref().map(|c| c.sha.clone()),
        previous_commit: common(
            &last_goods
                .iter()
                .map(|g| g.and_then(|g| g.commit.as_ref().map(|c| c.sha.clone())))
                .collect::<Vec<_>>(),
        ),
        previous_revision: common(
            &last_goods
                .iter()
                .map(|g| g.map(|g| g.revision))
                .collect::<Vec<_>>(),
        ),
        stage: stage.to_string(),
        // A shared stage's scope (`fleet` or `wave`) as the pipeline sets it.
        scope: plan
            .config
            .pipeline
            .iter()
            .find_map(|s| match s {
                PipelineStage::Script(s) if s.name == stage => Some(s.scope),
                _ => None,
            })
            .unwrap_or(crate::config::Scope::Fleet),
        is_rollback: rollback,
        dry_run: plan.options.dry_run,
        failed_stage: rollback
            .then(|| {
                let (run, reason) = why?;
                decide::rollback_failed_stage(reason, &run.report.stages)
            })
            .flatten(),
        failure: rollback
            .then(|| why.map(|(r, _)| failure_text(r)))
            .flatten(),
        rollback_reason: rollback.then(|| why.map(|(_, reason)| reason)).flatten(),
    }
}

/// A fleet stage, once for `members` (the coordinator chose them: every live target of the
/// wave); its result is recorded on each of them, and a failure fails all of them.
pub async fn fleet_stage(
    plan: &Plan,
    members: &mut [&mut TargetRun],
    stage: &ScriptStage,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    // A target on which the deploy changes nothing takes part only in an `always` stage.
    let mut taking_part: Vec<&mut TargetRun> = members
        .iter_mut()
        .filter(|r| !r.done && !r.skips(stage.always))
        .map(|r| &mut **r)
        .collect();
    if taking_part.is_empty() {
        return;
    }
    if cancel.is_cancelled() {
        for run in taking_part {
            finish(run, progress, TargetOutcome::Cancelled);
        }
        return;
    }
    if plan.options.dry_run && !stage.dry_run {
        for run in taking_part {
            run.report
                .stages
                .push(stages::not_run(stage, Which::Run, DRY_RUN_NOTE));
        }
        return;
    }
    let kubeconfig = fleet_kubeconfig(&taking_part.iter().map(|r| &**r).collect::<Vec<_>>());
    let deployment = fleet_deployment(
        plan,
        &taking_part.iter().map(|r| &**r).collect::<Vec<_>>(),
        &stage.name,
        false,
    );
    for run in taking_part.iter_mut() {
        progress.update(&run.target.name, Stage::Script(stage.name.clone()));
        run.clock.stop();
    }
    let span = tracing::error_span!("fleet", targets = %deployment.targets.join(" "));
    let (result, _) = stages::run_command(
        stage,
        Which::Run,
        &kubeconfig,
        &deployment,
        &plan.scripts,
        cancel,
        None,
    )
    .instrument(span)
    .await;
    for run in taking_part {
        record_run(plan, run, stage, result.clone(), progress);
    }
}

/// Every target's context in one kubeconfig, each named after its target.
fn fleet_kubeconfig(runs: &[&TargetRun]) -> ::kube::config::Kubeconfig {
    let parts: Vec<::kube::config::Kubeconfig> = runs
        .iter()
        .filter_map(|r| {
            let access = r.access.as_ref()?;
            let ctx = access.script_kubeconfig.current_context.as_deref();
            crate::cluster::connect::single_context(
                &access.script_kubeconfig,
                ctx,
                Some(&r.target.name),
            )
            .ok()
        })
        .collect();
    stages::kubeconfig::merged(parts.iter())
}

/// How long a rollback command may take: up to `deadline` when the run was cancelled (the
/// cancel budget), else its own timeout. None: no time left, do not start it.
fn command_cap(cancelled: bool, deadline: Instant) -> Option<Option<Duration>> {
    if !cancelled {
        return Some(None);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    (left >= MIN_COMMAND_TIME).then_some(Some(left))
}

const NO_TIME: &str = "not run: no time was left in the cancel budget";

/// The rollback commands of a target's script stages that started, in `rollback_order`, after
/// its manifests were rolled back. Every one runs even when an earlier one failed. Returns
/// the names of those that failed or could not run.
pub async fn roll_back_target_stages(
    plan: &Plan,
    run: &mut TargetRun,
    cancelled: bool,
    deadline: Instant,
    stop: &CancellationToken,
    progress: &Progress,
) -> Vec<String> {
    let due = decide::target_rollbacks(
        &plan.config.pipeline,
        &run.report.stages,
        plan.config.rollback_order,
    );
    let mut bad = Vec::new();
    let Some(access) = run.access.clone() else {
        return bad;
    };
    for index in due {
        let Some(PipelineStage::Script(stage)) = plan.config.pipeline.get(index) else {
            continue;
        };
        let Some(cap) = command_cap(cancelled, deadline) else {
            tracing::warn!(stage = %stage.name, "rollback command of stage {} {NO_TIME}", stage.name);
            run.report
                .stages
                .push(stages::not_run(stage, Which::Rollback, NO_TIME));
            bad.push(format!("{} (not run)", stage.name));
            continue;
        };
        progress.update(
            &run.target.name,
            Stage::Script(format!("{} (rollback)", stage.name)),
        );
        let deployment = target_deployment(plan, run, &stage.name, true);
        let (result, _) = stages::run_command(
            stage,
            Which::Rollback,
            &access.script_kubeconfig,
            &deployment,
            &plan.scripts,
            stop,
            cap,
        )
        .await;
        if result.outcome != StageOutcome::Succeeded {
            bad.push(describe_bad(stage, &result));
        }
        run.report.stages.push(result);
    }
    bad
}

fn describe_bad(stage: &ScriptStage, result: &StageResult) -> String {
    match result.outcome {
        StageOutcome::Stopped => format!(
            "{} (not run to its end: the cancel budget ran out)",
            stage.name
        ),
        _ => format!(
            "{} ({})",
            stage.name,
            result.message.as_deref().unwrap_or("failed")
        ),
    }
}

/// The rollback commands of the fleet stages that started, once each, after every rolled-back
/// target's own rollback; `rolled_back[i]` says whether `runs[i]` rolled back. A stage's
/// rollback runs only when no target that took part in it is still on the new revision
/// (`plan::fleet_rollback_decision`); otherwise it is recorded as not run, with who holds it,
/// on each rolled-back target that took part. A failure makes every rolled-back target that
/// took part in the stage `rollback-failed`.
pub async fn roll_back_fleet_stages(
    plan: &Plan,
    runs: &mut [TargetRun],
    rolled_back: &[bool],
    cancelled: bool,
    deadline: Instant,
    stop: &CancellationToken,
) {
    let due = decide::fleet_rollbacks(
        &plan.config.pipeline,
        runs.iter()
            .zip(rolled_back)
            .filter(|(_, rb)| **rb)
            .map(|(r, _)| r.report.stages.as_slice()),
        plan.config.rollback_order,
    );
    for index in due {
        let Some(PipelineStage::Script(stage)) = plan.config.pipeline.get(index) else {
            continue;
        };
        let took_part = |r: &TargetRun| {
            r.report
                .stages
                .iter()
                .any(|s| s.name == stage.name && !s.rollback && s.outcome.started())
        };
        let participants: Vec<(&str, decide::Standing)> = runs
            .iter()
            .filter(|r| took_part(r))
            .map(|r| (r.target.name.as_str(), standing(r)))
            .collect();
        let decision = decide::fleet_rollback_decision(&participants);
        let members: Vec<usize> = (0..runs.len())
            .filter(|&i| rolled_back.get(i).copied().unwrap_or(false) && took_part(&runs[i]))
            .collect();
        if let decide::FleetRollback::Hold { still_on } = decision {
            hold_fleet_rollback(runs, &members, stage, &still_on);
            continue;
        }
        let result = match command_cap(cancelled, deadline) {
            None => {
                tracing::warn!(stage = %stage.name, "rollback command of fleet stage {} {NO_TIME}", stage.name);
                stages::not_run(stage, Which::Rollback, NO_TIME)
            }
            Some(cap) => {
                let member_runs: Vec<&TargetRun> = members.iter().map(|&i| &runs[i]).collect();
                let kubeconfig = fleet_kubeconfig(&member_runs);
                let deployment = fleet_deployment(plan, &member_runs, &stage.name, true);
                let span = tracing::error_span!("fleet", targets = %deployment.targets.join(" "));
                stages::run_command(
                    stage,
                    Which::Rollback,
                    &kubeconfig,
                    &deployment,
                    &plan.scripts,
                    stop,
                    cap,
                )
                .instrument(span)
                .await
                .0
            }
        };
        let failed = result.outcome != StageOutcome::Succeeded;
        let why = describe_bad(stage, &result);
        for &i in &members {
            let run = &mut runs[i];
            run.report.stages.push(result.clone());
            if failed {
                mark_rollback_failed(
                    run,
                    &format!("fleet stage rollback failed: {why}"),
                    cancelled,
                );
            }
        }
    }
}

/// Where a target that took part in a fleet stage stands, from what its run knows.
fn standing(run: &TargetRun) -> decide::Standing {
    // `as_revision` is set only once the re-apply of the release before finished.
    let manifests_back = run
        .report
        .rollback
        .as_ref()
        .is_some_and(|r| r.as_revision.is_some());
    decide::standing(
        run.received_new_revision,
        run.unchanged.is_some(),
        manifests_back,
    )
}

/// A fleet stage's rollback held back because `still_on` still run the new revision: said
/// once in the log with what to do, and on each rolled-back target that took part, as a
/// not-run stage result and in its rollback's message. The target's outcome stays: its own
/// rollback did what it should.
fn hold_fleet_rollback(
    runs: &mut [TargetRun],
    members: &[usize],
    stage: &ScriptStage,
    still_on: &[String],
) {
    tracing::warn!(stage = %stage.name, "{}", decide::held_warning(&stage.name, still_on));
    let note = decide::held_note(still_on);
    let result = stages::not_run(stage, Which::Rollback, &note);
    for &i in members {
        let run = &mut runs[i];
        run.report.stages.push(result.clone());
        if let Some(rollback) = run.report.rollback.as_mut() {
            let said = format!("the rollback command of fleet stage {} {note}", stage.name);
            rollback.message = Some(match rollback.message.take() {
                Some(m) => format!("{m}; {said}"),
                None => said,
            });
        }
    }
}

/// A rollback command failed: the target is `rollback-failed` (its rollback report says why).
pub fn mark_rollback_failed(run: &mut TargetRun, why: &str, cancelled: bool) {
    if let Some(rollback) = run.report.rollback.as_mut() {
        rollback.outcome = TargetOutcome::RollbackFailed;
        rollback.message = Some(match rollback.message.take() {
            Some(m) => format!("{m}; {why}"),
            None => why.to_string(),
        });
    } else {
        run.report.rollback = Some(crate::report::RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: None,
            outcome: TargetOutcome::RollbackFailed,
            left_in_place: Vec::new(),
            message: Some(why.to_string()),
        });
    }
    if !cancelled {
        run.report.outcome = TargetOutcome::RollbackFailed;
    }
}

/// A target of a manual rollback whose rollback commands are due.
pub struct ManualTarget {
    pub target: crate::config::TargetConfig,
    pub access: crate::cluster::connect::ClusterAccess,
    /// The revision rolled back from.
    pub revision: u64,
    /// The stages that revision ran.
    pub ran: Vec<StageResult>,
    /// The revision its re-apply was recorded as; None when the re-apply did not finish (the
    /// target may still run the revision it left).
    pub recorded_as: Option<u64>,
}

/// A target outside a manual rollback (`--target` chose others) that still runs a release
/// being rolled back: a fleet stage that release ran waits for it.
pub struct StillOn {
    pub target: crate::config::TargetConfig,
    /// The stages its record of that release lists.
    pub ran: Vec<StageResult>,
}

/// After a manual rollback (`rollguard rollback`) away from revisions whose records list
/// `ran`: the rollback commands of those stages, per target at once, then the fleet ones
/// once, unless a target that took part still runs that release (`others`, or a target here
/// whose re-apply did not finish). Returns, per target of `targets`, the rollback commands'
/// results.
pub async fn manual_stage_rollbacks(
    plan: &Plan,
    targets: Vec<ManualTarget>,
    others: Vec<StillOn>,
    stop: &CancellationToken,
) -> Vec<Vec<StageResult>> {
    let selected = targets.len();
    let mut runs: Vec<TargetRun> = targets
        .into_iter()
        .map(|t| {
            let mut run = TargetRun::new(&t.target, jiff::Timestamp::now());
            run.access = Some(t.access);
            run.received_new_revision = true;
            run.report.revision = Some(t.revision);
            run.report.stages = t.ran;
            run.report.message = Some("rolled back by hand (rollguard rollback)".to_string());
            run.report.rollback = t
                .recorded_as
                .map(|as_revision| crate::report::RollbackReport {
                    as_revision: Some(as_revision),
                    ..crate::report::RollbackReport::new(TargetOutcome::RolledBack, None)
                });
            run.rollback_reason = Some(RollbackReason::Manual);
            run
        })
        .collect();
    // The others only count in the fleet stages' decision: no command runs for them.
    runs.extend(others.into_iter().map(|o| {
        let mut run = TargetRun::new(&o.target, jiff::Timestamp::now());
        run.received_new_revision = true;
        run.report.stages = o.ran;
        run
    }));
    let before: Vec<usize> = runs.iter().map(|r| r.report.stages.len()).collect();
    let deadline = Instant::now() + plan.config.rollback_timeout();
    let progress = Progress::quiet();
    // `stop` (a signal) kills the running commands; the ones after it are not started.
    futures::future::join_all(runs.iter_mut().take(selected).map(|run| {
        let span = tracing::error_span!("target", target = %run.target.name);
        roll_back_target_stages(plan, run, false, deadline, stop, &progress).instrument(span)
    }))
    .await;
    let rolled_back: Vec<bool> = (0..runs.len()).map(|i| i < selected).collect();
    roll_back_fleet_stages(plan, &mut runs, &rolled_back, false, deadline, stop).await;
    runs.into_iter()
        .zip(before)
        .take(selected)
        .map(|(run, n)| run.report.stages.into_iter().skip(n).collect())
        .collect()
}
