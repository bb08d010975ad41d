//! One target: connect -> discover/validate ([`reach_target`], no write); then, once the
//! fleet took every target's lock in its one global order, record + its stages of the
//! pipeline (apply + wait, target scripts) ([`deploy_target`]), into a `TargetReport`. Fleet
//! stages, which every target reaches first, are run by `fleet.rs` between calls of
//! [`run_stages`].

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{PipelineStage, TargetConfig};
use crate::engine::plan::Plan;
use crate::kube::apply::{
    AppliedObject, ApplyError, ApplyOptions, MAX_IN_FLIGHT, Resolution, apply_failures,
    apply_resolved, field_manager, resolve_set,
};
use crate::kube::connect::{ClusterAccess, connect, target_failure};
use crate::kube::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::release::lock::LockGuard;
use crate::release::session::{PrepareError, TargetRelease, open_records};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, PhaseTiming, TargetOutcome, TargetReport};

/// The result of one target's run, with what the rollback step needs.
pub struct TargetRun {
    pub report: TargetReport,
    /// The connection, when one was made (the rollback reuses it).
    pub access: Option<ClusterAccess>,
    /// Objects applied (the server's answers).
    pub applied: Vec<AppliedObject>,
    /// True once any object of the new revision was written to this target.
    pub received_new_revision: bool,
    /// The lock and release record of this run (rg-release; None in a dry run or before
    /// the lock was taken).
    pub release: Option<TargetRelease>,
    /// The target as configured.
    pub target: TargetConfig,
    /// Discovery's result, until the apply stage uses it.
    resolution: Option<Resolution>,
    pub(crate) clock: PhaseClock,
    /// The run ended (failed, cancelled or stopped): later stages do not run.
    pub done: bool,
}

impl TargetRun {
    /// A run of `target` that has done nothing yet.
    pub fn new(target: &TargetConfig, at: Timestamp) -> TargetRun {
        TargetRun {
            report: TargetReport::new(target.name.clone(), TargetOutcome::Failed, at),
            access: None,
            applied: Vec::new(),
            received_new_revision: false,
            release: None,
            target: target.clone(),
            resolution: None,
            clock: PhaseClock::new(),
            done: false,
        }
    }

    /// Whether the run changed anything on its target: objects of the new revision, or a
    /// script stage that started (a rollback then has something to undo).
    pub fn changed_something(&self) -> bool {
        self.received_new_revision || self.report.stages.iter().any(|s| s.outcome.started())
    }
}

/// Phase timings, in order.
pub(crate) struct PhaseClock {
    phases: Vec<PhaseTiming>,
    current: Option<(String, Instant)>,
}

impl PhaseClock {
    fn new() -> Self {
        PhaseClock {
            phases: Vec::new(),
            current: None,
        }
    }
    pub(crate) fn start(&mut self, name: &str) {
        self.stop();
        self.current = Some((name.to_string(), Instant::now()));
    }
    pub(crate) fn stop(&mut self) {
        if let Some((name, at)) = self.current.take() {
            self.phases
                .push(PhaseTiming::new(name, round_ms(at.elapsed())));
        }
    }
    /// A script stage's phase, timed by its runner.
    pub(crate) fn script(&mut self, result: &crate::report::StageResult) {
        self.stop();
        self.phases.push(PhaseTiming {
            name: result.name.clone(),
            seconds: result.seconds,
            script: Some(result.scope.clone()),
            exit_code: result.exit_code,
        });
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// The first part of one target's run: connect, then discover and check that the target
/// serves every kind, with no write. A run that is not `done` afterwards waits for the
/// fleet's lock step, then goes on with [`deploy_target`]. Never panics on cluster errors:
/// every problem ends in the report.
pub async fn reach_target(
    plan: &Plan,
    target: &TargetConfig,
    cancel: &CancellationToken,
    progress: &Progress,
) -> TargetRun {
    let mut run = TargetRun::new(target, Timestamp::now());
    reach(plan, &mut run, cancel, progress).await;
    run
}

/// The rest of a reached target's run up to its first fleet stage, with its lock held (None
/// in a dry run): the release record, then `stages` (indices into the pipeline). A run that
/// is not `done` afterwards goes on with [`run_stages`].
pub async fn deploy_target(
    plan: &Plan,
    run: &mut TargetRun,
    lock: Option<LockGuard>,
    stages: &[usize],
    cancel: &CancellationToken,
    progress: &Progress,
) {
    if let Some(lock) = lock {
        open(plan, run, lock, progress).await;
    }
    run_stages(plan, run, stages, cancel, progress).await;
}

/// The target did not get its lock (or was stopped before it): it ends here, with nothing
/// written by this run.
pub fn stop_unlocked(
    run: &mut TargetRun,
    progress: &Progress,
    outcome: TargetOutcome,
    failure: Option<Failure>,
    message: Option<String>,
) {
    run.report.failures.extend(failure);
    run.report.message = message;
    finish(run, progress, outcome);
}

async fn reach(plan: &Plan, run: &mut TargetRun, cancel: &CancellationToken, progress: &Progress) {
    let target = run.target.clone();
    let deadline = Instant::now() + plan.config.wait.timeout;
    let name = target.name.clone();

    progress.update(&name, Stage::Connecting);
    run.clock.start("connect");
    let env = |k: &str| plan.env(k);
    let access = match connect(
        &target,
        plan.options.cli_kubeconfig.as_deref(),
        &plan.config.base_dir,
        &env,
    )
    .await
    {
        Ok(access) => access,
        Err(e) => {
            // Target failures are logged at info: the progress line and the final table say them.
            tracing::info!(reason = %e.reason, "{}", e.message);
            run.report.failures.push(target_failure("cluster", &e));
            return finish(run, progress, TargetOutcome::Failed);
        }
    };
    run.access = Some(access.clone());

    // Discovery: the first request (an unreachable target fails here, in seconds) and the
    // check that the target serves every kind, before anything is written to it.
    run.clock.start("discover");
    match resolve_set(&access.client, &plan.manifests, deadline, cancel).await {
        Ok(resolution) => run.resolution = Some(resolution),
        Err(ApplyError::Cancelled) => {
            return finish(run, progress, TargetOutcome::Cancelled);
        }
        Err(e) => {
            tracing::info!("{e}");
            run.report.failures = apply_failures(&e, &access.server);
            return finish(run, progress, TargetOutcome::Failed);
        }
    };

    // The fleet takes the locks next, in its one global order.
    if !plan.options.dry_run {
        run.clock.start("lock");
    }
}

/// With the lock held: abandoned records, the last good record, this run's pending record.
async fn open(plan: &Plan, run: &mut TargetRun, lock: LockGuard, progress: &Progress) {
    let Some(access) = run.access.clone() else {
        return;
    };
    let target = run.target.clone();
    let env = |k: &str| plan.env(k);
    let opened = match plan.recorded_manifests() {
        Ok(manifests) => {
            open_records(
                &plan.config,
                &target,
                &access,
                lock,
                manifests,
                plan.commit.as_ref(),
                &env,
            )
            .await
        }
        Err(e) => {
            let _ = lock.release().await;
            Err(PrepareError::History(e))
        }
    };
    match opened {
        Ok((release, notes)) => {
            run.report.revision = Some(release.record.revision);
            run.report.warnings.extend(notes);
            run.release = Some(release);
        }
        Err(e) => {
            tracing::info!("{e}");
            run.report.failures.push(e.failure(&access.server));
            return finish(run, progress, TargetOutcome::Failed);
        }
    }
    run.clock.stop();
}

/// The failure of a target whose lock was lost: it stopped at once, and nothing more was
/// written for it (no apply, no rollback, no record).
pub fn lock_lost_failure(why: &str) -> Failure {
    Failure {
        object: "lock".into(),
        reason: "LockLost".into(),
        message: format!(
            "{why}. rollguard stopped this target at once: nothing more was applied, nothing rolled back and no record written, so the new holder's deploy stands"
        ),
        ..Default::default()
    }
}

/// Why the run no longer holds its target's lock, when it lost it.
fn lock_lost(run: &TargetRun) -> Option<String> {
    run.release.as_ref().and_then(TargetRelease::lock_lost)
}

/// Runs the target-scoped `stages` (indices into the pipeline) of a run that is not done.
pub async fn run_stages(
    plan: &Plan,
    run: &mut TargetRun,
    stages: &[usize],
    cancel: &CancellationToken,
    progress: &Progress,
) {
    for &index in stages {
        if run.done {
            return;
        }
        match plan.config.pipeline.get(index) {
            Some(PipelineStage::Apply) => apply_and_wait(plan, run, cancel, progress).await,
            Some(PipelineStage::Script(stage)) => {
                crate::engine::scripts::target_script(plan, run, stage, cancel, progress).await
            }
            None => {}
        }
    }
}

/// Marks a run that went through its whole pipeline as deployed.
pub fn complete(run: &mut TargetRun, progress: &Progress) {
    if !run.done {
        finish(run, progress, TargetOutcome::Deployed);
    }
}

async fn apply_and_wait(
    plan: &Plan,
    run: &mut TargetRun,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    let (Some(access), Some(resolution)) = (run.access.clone(), run.resolution.take()) else {
        return;
    };
    let target = run.target.clone();
    let name = target.name.clone();
    // The deadline is for apply and rollout: time spent waiting for the lock or in scripts
    // does not count.
    let deadline = Instant::now() + plan.config.wait.timeout;

    // Losing the lock stops this target's apply and wait at once, like a cancel.
    let stop = cancel.child_token();
    let lost = run
        .release
        .as_ref()
        .map(TargetRelease::lost_token)
        .unwrap_or_default();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::select! {
                _ = lost.cancelled() => stop.cancel(),
                _ = stop.cancelled() => {}
            }
        }
    });
    // Ends the task above when this stage returns.
    let _end = stop.clone().drop_guard();
    let cancel = &stop;

    run.clock.start("apply");
    progress.update(
        &name,
        Stage::Applying {
            done: 0,
            total: plan.manifests.objects.len(),
        },
    );
    let options = ApplyOptions {
        field_manager: field_manager(&plan.config.app),
        force: plan.options.force_conflicts,
        dry_run: plan.options.dry_run,
        default_namespace: plan
            .config
            .default_namespace(&target, &access.context_namespace),
        max_in_flight: MAX_IN_FLIGHT,
        deadline,
    };
    let report_progress =
        |done: usize, total: usize| progress.update(&name, Stage::Applying { done, total });
    let outcome = apply_resolved(
        &access.client,
        &plan.manifests,
        resolution,
        &options,
        cancel,
        &report_progress,
    )
    .await;
    run.received_new_revision = !plan.options.dry_run && !outcome.applied.is_empty();
    run.report.warnings.extend(outcome.warnings);
    run.applied = outcome.applied;
    if let Some(why) = lock_lost(run) {
        run.report.failures = vec![lock_lost_failure(&why)];
        return finish(run, progress, TargetOutcome::Failed);
    }
    if let Err(e) = outcome.result {
        if matches!(e, ApplyError::Cancelled) {
            return finish(run, progress, TargetOutcome::Cancelled);
        }
        tracing::info!("apply failed: {e}");
        run.report.failures = apply_failures(&e, &access.server);
        return finish(run, progress, TargetOutcome::Failed);
    }
    tracing::info!(objects = run.applied.len(), "applied");

    if plan.options.dry_run {
        run.clock.stop();
        return;
    }

    run.clock.start("wait");
    let wait_options = WaitOptions {
        deadline,
        timeout: plan.config.wait.timeout,
        fail_fast: plan.config.wait.fail_fast.clone(),
    };
    let report_wait = |p| progress.update(&name, Stage::Waiting(p));
    let waited = wait_for_rollout(
        &access.client,
        &run.applied,
        &wait_options,
        cancel,
        &report_wait,
    )
    .await;
    run.report.warnings.extend(waited.warnings);
    run.clock.stop();
    if let Some(why) = lock_lost(run) {
        run.report.failures = vec![lock_lost_failure(&why)];
        return finish(run, progress, TargetOutcome::Failed);
    }
    match waited.result {
        Ok(()) => {}
        Err(WaitFailure::Cancelled) => finish(run, progress, TargetOutcome::Cancelled),
        Err(WaitFailure::Failed(failures)) | Err(WaitFailure::Timeout(failures)) => {
            for f in &failures {
                tracing::info!("{}", f.headline());
            }
            run.report.failures = failures;
            finish(run, progress, TargetOutcome::Failed)
        }
    }
}

/// Ends a run with `outcome`: later stages do not run.
pub fn finish(run: &mut TargetRun, progress: &Progress, outcome: TargetOutcome) {
    run.clock.stop();
    run.done = true;
    run.report.phases = run.clock.phases.clone();
    run.report.outcome = outcome;
    run.report.finished_at = Timestamp::now();
    if run.report.message.is_none() {
        run.report.message = match outcome {
            TargetOutcome::Cancelled => Some("cancelled".to_string()),
            _ => run.report.failures.first().map(Failure::headline),
        };
    }
    progress.update(
        &run.report.name,
        Stage::Finished {
            outcome,
            message: run.report.message.clone(),
        },
    );
}
