//! A target's end as the coordinator decided it: its record written, its rollback (manifests
//! re-applied, rollback commands), its lock released; then, once for the run, the fleet
//! stages' rollback commands and the summary.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::field_manager;
use crate::cluster::connect::ClusterAccess;
use crate::engine::plan::Plan;
use crate::engine::policy::{RollbackResult, left_in_place, summary};
use crate::engine::reapply::{ReApply, stored_manifests};
use crate::engine::target_run::{TargetRun, stopped_when_lost};
use crate::release::session::{ReleaseSettings, TargetRelease, applied_ref};
use crate::release::{ObjectRef, ReleaseOrigin, ReleaseRecord, ReleaseStatus, RunInfo};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, PhaseTiming, RollbackReport, TargetOutcome};
use crate::util::duration::format_duration;

/// How long the rollbacks may take after a cancel signal: GitHub sends SIGKILL 10 s after
/// SIGINT, and the records and the report must be written before that.
pub const CANCEL_ROLLBACK_BUDGET: Duration = Duration::from_secs(4);

/// How long writing a target's record, and then releasing its lock, may each take, so that
/// rollguard always exits: a stalled server costs at most this, then a warning.
pub const CONCLUDE_STEP_BUDGET: Duration = Duration::from_secs(15);
/// The same after a cancel signal, within GitHub's grace before SIGKILL.
pub const CANCEL_CONCLUDE_STEP_BUDGET: Duration = Duration::from_secs(2);

/// After every target settled: the rollback commands of the fleet stages of the targets
/// that rolled back (`rolled_back[i]` for `runs[i]`), once each, then the summary
/// ("rolled back 2 of 3; eu: connection refused"), logged and returned.
pub async fn roll_back_fleet(
    plan: &Plan,
    runs: &mut [TargetRun],
    rolled_back: &[bool],
    mut results: Vec<RollbackResult>,
    cancel: &CancellationToken,
    rollback_stop: &CancellationToken,
) -> String {
    crate::util::fault::test_panic_point("conclude");
    let cancelled = cancel.is_cancelled();
    let settings = ReleaseSettings::from_config(&plan.config);
    let deadline = Instant::now() + rollback_budget(&settings, cancelled);
    crate::engine::scripts::roll_back_fleet_stages(
        plan,
        runs,
        rolled_back,
        cancelled,
        deadline,
        rollback_stop,
    )
    .await;
    for result in &mut results {
        if let Some(run) = runs.iter().find(|r| r.report.name == result.target)
            && run.report.outcome == TargetOutcome::RollbackFailed
            && result.ok
        {
            result.ok = false;
            result.message = run.report.rollback.as_ref().and_then(|r| r.message.clone());
        }
    }
    let text = summary(&results);
    if !text.is_empty() {
        tracing::info!("{text}");
    }
    text
}

/// How long the rollbacks may take: their timeout, within the cancel budget after a signal.
fn rollback_budget(settings: &ReleaseSettings, cancelled: bool) -> Duration {
    if cancelled {
        settings.rollback_timeout.min(CANCEL_ROLLBACK_BUDGET)
    } else {
        settings.rollback_timeout
    }
}

/// A token cancelled [`CANCEL_ROLLBACK_BUDGET`] after `cancel`: a signal that arrives while
/// rollbacks run leaves them that long, so that the records and the report are still written
/// before a SIGKILL. The task ends when the returned guard drops.
pub fn rollback_stop(cancel: &CancellationToken) -> (CancellationToken, tokio::task::AbortHandle) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (cancel, stop) = (cancel.clone(), stop.clone());
        async move {
            cancel.cancelled().await;
            tokio::time::sleep(CANCEL_ROLLBACK_BUDGET).await;
            stop.cancel();
        }
    });
    (stop, task.abort_handle())
}

/// What a target's record, rollback and unlock need ([`settle_target`]).
pub(crate) struct Conclusion<'a> {
    plan: &'a Plan,
    settings: ReleaseSettings,
    /// The number of every rollback record this run writes.
    rollback_revision: u64,
    cancelled: bool,
    deadline: Instant,
    stop: CancellationToken,
    progress: &'a Progress,
}

impl<'a> Conclusion<'a> {
    /// The context of a target that ends or rolls back now: after a signal, the rollback
    /// gets what is left of the cancel budget.
    pub(crate) fn new(
        plan: &'a Plan,
        progress: &'a Progress,
        rollback_revision: u64,
        cancel: &CancellationToken,
        stop: CancellationToken,
    ) -> Self {
        let settings = ReleaseSettings::from_config(&plan.config);
        let cancelled = cancel.is_cancelled();
        let deadline = Instant::now() + rollback_budget(&settings, cancelled);
        Conclusion {
            plan,
            settings,
            rollback_revision,
            cancelled,
            deadline,
            stop,
            progress,
        }
    }
}

/// One target's end: its record written with its outcome, its rollback when `roll_back`,
/// its lock released.
pub(crate) async fn settle_target(
    context: &Conclusion<'_>,
    run: &mut TargetRun,
    roll_back: bool,
) -> Option<RollbackResult> {
    // A target the deploy changed nothing on has no record to write: only its lock.
    if let Some(history) = run.unchanged.as_mut().and_then(|u| u.history.take()) {
        history.release().await;
    }
    let release = run.release.as_mut()?;
    // The lock is someone else's now: their records are not ours to write.
    if let Some(why) = release.lock_lost() {
        tracing::info!("{why}: leaving the release records to the new holder");
        return None;
    }
    let (status, reason) = match run.report.outcome {
        TargetOutcome::Deployed => (ReleaseStatus::Deployed, None),
        TargetOutcome::Cancelled => (
            ReleaseStatus::Failed,
            Some(crate::util::process_group::cancelled_words()),
        ),
        _ => (
            ReleaseStatus::Failed,
            Some(
                run.report
                    .failures
                    .first()
                    .map(Failure::headline)
                    .or_else(|| run.report.message.clone())
                    .unwrap_or_else(|| "failed".to_string()),
            ),
        ),
    };
    let applied: Vec<ObjectRef> = run.applied.iter().map(applied_ref).collect();
    let step_budget = if context.cancelled {
        CANCEL_CONCLUDE_STEP_BUDGET
    } else {
        CONCLUDE_STEP_BUDGET
    };
    let finished = tokio::time::timeout(
        step_budget,
        release.store.finish_with_stages(
            release.record.revision,
            status,
            reason,
            Some(applied.clone()),
            run.report.stages.clone(),
            Some(release.known()),
        ),
    )
    .await;
    match finished {
        Ok(Ok(record)) => release.record = record,
        Ok(Err(e)) => run.report.warnings.push(format!(
            "could not write release record v{}: {e}",
            release.record.revision
        )),
        Err(_) => run.report.warnings.push(format!(
            "could not write release record v{} within {}: the cluster did not answer; the next run marks it abandoned",
            release.record.revision,
            format_duration(step_budget)
        )),
    }
    let result = if roll_back {
        roll_back_target(context, run).await
    } else {
        None
    };
    if let Some(release) = run.release.as_ref() {
        run.report.warnings.extend(release.store.take_warnings());
    }
    if let Some(release) = run.release.as_mut() {
        match tokio::time::timeout(step_budget, release.unlock()).await {
            Ok(None) => {}
            Ok(Some(warning)) => run.report.warnings.push(warning),
            // The lock is dropped with the future: its renewal stops, so it lapses.
            Err(_) => run.report.warnings.push(format!(
                "could not release the lock within {}: the cluster did not answer; it lapses by itself after its lease duration",
                format_duration(step_budget)
            )),
        }
    }
    result
}

/// One target's rollback: its manifests (when any of the new revision reached it), then the
/// rollback commands of its script stages that started, every one even when one fails (which
/// makes the target `rollback-failed`).
async fn roll_back_target(context: &Conclusion<'_>, run: &mut TargetRun) -> Option<RollbackResult> {
    let name = run.report.name.clone();
    let mut result = if run.received_new_revision {
        roll_back_manifests(context, run).await
    } else {
        // Only script stages ran here: no manifests of the new revision to undo, so the
        // outcome stays what it was; the rollback commands below still run.
        None
    };
    let before = run.report.stages.len();
    let bad = crate::engine::scripts::roll_back_target_stages(
        context.plan,
        run,
        context.cancelled,
        context.deadline,
        &context.stop,
        context.progress,
    )
    .await;
    if !run.received_new_revision && run.report.stages.len() > before {
        run.report.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: None,
            outcome: TargetOutcome::RolledBack,
            left_in_place: Vec::new(),
            message: Some(
                "no manifests of the new revision reached this target; the rollback commands of its script stages ran"
                    .to_string(),
            ),
        });
    }
    if !bad.is_empty() {
        let why = format!("rollback commands that failed: {}", bad.join(", "));
        crate::engine::scripts::mark_rollback_failed(run, &why, context.cancelled);
        result = Some(RollbackResult {
            target: name.clone(),
            ok: false,
            message: run.report.rollback.as_ref().and_then(|r| r.message.clone()),
        });
    }
    context.progress.update(&name, end_stage(run));
    result
}

/// A settled target's last line: its outcome, with what its rollback said (else its message).
pub(crate) fn end_stage(run: &TargetRun) -> Stage {
    Stage::Finished {
        outcome: run.report.outcome,
        message: run
            .report
            .rollback
            .as_ref()
            .and_then(|r| r.message.clone())
            .or_else(|| run.report.message.clone()),
    }
}

/// Re-apply the last good record of one target and wait for it; updates the target's report.
/// None when there was nothing to roll back to (a first deploy: nothing is deleted either).
async fn roll_back_manifests(
    context: &Conclusion<'_>,
    run: &mut TargetRun,
) -> Option<RollbackResult> {
    let name = run.report.name.clone();
    // What this run applied, as the server named it (the record may not have been updated
    // when the cluster stopped answering).
    let applied: Vec<ObjectRef> = run.applied.iter().map(applied_ref).collect();
    let release = run.release.as_ref()?;
    let failed_objects = if applied.is_empty() {
        release.record.objects.clone()
    } else {
        applied
    };
    let Some(good) = release.last_good.clone() else {
        run.report.rollback = Some(nothing_to_roll_back(&failed_objects));
        return None;
    };
    let left: Vec<String> = left_in_place(&failed_objects, &good.objects)
        .iter()
        .map(ToString::to_string)
        .collect();
    context
        .progress
        .update(&name, Stage::RollingBack(format!("to v{}", good.revision)));
    let rollback_started = Instant::now();
    let access = run.access.as_ref();
    let attempt = re_apply_good(context, release, access, &name, &good, &failed_objects).await;
    if let Ok(revision) = &attempt {
        run.report.warnings.extend(crate::release::revision_moved(
            "the rollback",
            context.rollback_revision,
            *revision,
        ));
    }
    let as_revision = attempt.as_ref().ok().copied();
    let (outcome, ok, message) = match attempt {
        Ok(revision) => {
            let message = format!("rolled back to v{} (as v{revision})", good.revision);
            tracing::info!("{message}");
            (TargetOutcome::RolledBack, true, message)
        }
        // Cancelled while the rollback was still rolling out: it was sent, not verified.
        // Failed: nothing of the new revision stayed (policy::unfinished_rollback_outcome).
        Err((why, outcome)) => (outcome, false, why),
    };
    run.report.rollback = Some(RollbackReport {
        started_at: None,
        why: None,
        to_commit: good.commit.as_ref().map(|c| c.short_sha().to_string()),
        as_revision,
        to_revision: Some(good.revision),
        outcome,
        left_in_place: left,
        message: Some(message.clone()),
    });
    // The timeline shows the rollback as the target's last phase.
    run.report.phases.push(PhaseTiming::new(
        "rollback",
        (rollback_started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    ));
    // A rollback that failed says so even after a cancel: the cluster is not where the
    // cancel left it to be (exit 3), and the message says what was re-applied and what not.
    if !context.cancelled || outcome == TargetOutcome::RollbackFailed {
        run.report.outcome = outcome;
    }
    run.report.finished_at = jiff::Timestamp::now();
    context.progress.update(
        &name,
        Stage::Finished {
            outcome: run.report.outcome,
            message: Some(message.clone()),
        },
    );
    Some(RollbackResult {
        target: name,
        ok,
        message: (!ok).then_some(message),
    })
}

/// The rollback of a target with no earlier release (a first deploy): nothing is deleted.
fn nothing_to_roll_back(failed_objects: &[ObjectRef]) -> RollbackReport {
    RollbackReport {
        started_at: None,
        why: None,
        to_commit: None,
        as_revision: None,
        to_revision: None,
        outcome: TargetOutcome::Failed,
        left_in_place: failed_objects.iter().map(ToString::to_string).collect(),
        message: Some(
            "nothing to roll back to: no earlier release was deployed here (first deploy); nothing was deleted"
                .to_string(),
        ),
    }
}

/// Re-applies the `good` release's stored manifests on the target and waits for them: the
/// revision the rollback was recorded as, or why not and how the target ends.
async fn re_apply_good(
    context: &Conclusion<'_>,
    release: &TargetRelease,
    access: Option<&ClusterAccess>,
    name: &str,
    good: &ReleaseRecord,
    failed_objects: &[ObjectRef],
) -> Result<u64, (String, TargetOutcome)> {
    let (plan, settings, deadline) = (context.plan, &context.settings, context.deadline);
    let Some(access) = access else {
        return Err((
            "no connection to the cluster".to_string(),
            TargetOutcome::RollbackFailed,
        ));
    };
    // Losing the lock mid-rollback stops it at once, like the end of the budget.
    let (stop, _end) = stopped_when_lost(&context.stop, release.lost_token());
    let bodies = stored_manifests(&release.store, &plan.config, good, access, Some(deadline))
        .await
        .map_err(|why| (why.to_string(), TargetOutcome::RollbackFailed))?;
    ReApply {
        access,
        store: &release.store,
        target: name,
        default_namespace: good
            .default_namespace
            .clone()
            .unwrap_or_else(|| release.default_namespace.clone()),
        bodies,
        commit: good.commit.clone(),
        origin: ReleaseOrigin::Rollback { to: good.revision },
        revision: Some(context.rollback_revision),
        destination: format!("v{}", good.revision),
        timeout: settings.rollback_timeout,
        deadline,
        cancelled: context.cancelled,
        stop: stop.clone(),
        lost: release.lost_token(),
        field_manager: field_manager(&plan.config.app),
        force_conflicts: plan.options.force_conflicts,
        in_flight: plan.in_flight(),
        fail_fast: plan.config.wait.fail_fast.clone(),
        run: RunInfo::from_env(&|k| plan.env(k)),
        secrets: plan.config.history.secrets,
    }
    .run()
    .await
    .map_err(|e| match release.lock_lost() {
        Some(lost) => (format!("{e}; {lost}"), TargetOutcome::RollbackFailed),
        None => {
            let outcome = crate::engine::policy::unfinished_rollback_outcome(
                e.sent_unverified(),
                failed_objects,
                e.stopped_after(),
            );
            (e.to_string(), outcome)
        }
    })
}
