//! One target, start to end, in two parts around the fleet's lock step: connect -> discover
//! (every kind served, no write) [`reach_target`]; then, with the lock held, pending record
//! -> apply -> wait [`deploy_target`], into a `TargetRun` (the report, the connection and
//! what was applied, for the conclusion).

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::TargetConfig;
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
    /// The lock and release record of this run (None in a dry run or before the lock was
    /// taken).
    pub release: Option<TargetRelease>,
}

/// Phase timings, in order.
pub struct PhaseClock {
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
    fn start(&mut self, name: &str) {
        self.stop();
        self.current = Some((name.to_string(), Instant::now()));
    }
    fn stop(&mut self) {
        if let Some((name, at)) = self.current.take() {
            self.phases.push(PhaseTiming {
                name,
                seconds: round_ms(at.elapsed()),
            });
        }
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A target that answered: connected, every kind resolved, nothing written yet.
pub struct Reached {
    run: TargetRun,
    clock: PhaseClock,
    access: ClusterAccess,
    resolution: Resolution,
    /// When the target started, for the dry run's deadline.
    started: Instant,
}

impl Reached {
    pub fn access(&self) -> &ClusterAccess {
        &self.access
    }

    /// Notes for the target's report.
    pub fn warn(&mut self, notes: Vec<String>) {
        self.run.report.warnings.extend(notes);
    }

    /// The target did not get its lock (or was stopped before it): it ends here, with
    /// nothing written by this run.
    pub fn stop(
        mut self,
        progress: &Progress,
        outcome: TargetOutcome,
        failure: Option<Failure>,
        message: Option<String>,
    ) -> TargetRun {
        self.run.report.failures.extend(failure);
        self.run.report.message = message;
        finish(self.run, self.clock, progress, outcome)
    }
}

/// The first part of one target's run: connect, then discover and check that the target
/// serves every kind, with no write. Err: the target's finished run (it failed or was
/// cancelled). Never panics on cluster errors: every problem ends in the report.
pub async fn reach_target(
    plan: &Plan,
    target: &TargetConfig,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<Reached, Box<TargetRun>> {
    let started_at = Timestamp::now();
    let started = Instant::now();
    let deadline = started + plan.config.wait.timeout;
    let mut clock = PhaseClock::new();
    let mut run = TargetRun {
        report: TargetReport::new(target.name.clone(), TargetOutcome::Failed, started_at),
        access: None,
        applied: Vec::new(),
        received_new_revision: false,
        release: None,
    };
    let name = target.name.clone();

    progress.update(&name, Stage::Connecting);
    clock.start("connect");
    let env = |k: &str| plan.env(k);
    let access = match connect(
        target,
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
            return Err(Box::new(finish(
                run,
                clock,
                progress,
                TargetOutcome::Failed,
            )));
        }
    };
    run.access = Some(access.clone());

    // Discovery: the first request (an unreachable target fails here, in seconds) and the
    // check that the target serves every kind, before anything is written to it.
    clock.start("discover");
    let resolution = match resolve_set(&access.client, &plan.manifests, deadline, cancel).await {
        Ok(resolution) => resolution,
        Err(ApplyError::Cancelled) => {
            return Err(Box::new(finish(
                run,
                clock,
                progress,
                TargetOutcome::Cancelled,
            )));
        }
        Err(e) => {
            tracing::info!("{e}");
            run.report.failures = apply_failures(&e, &access.server);
            return Err(Box::new(finish(
                run,
                clock,
                progress,
                TargetOutcome::Failed,
            )));
        }
    };
    if !plan.options.dry_run {
        clock.start("lock");
    }
    Ok(Reached {
        run,
        clock,
        access,
        resolution,
        started,
    })
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

/// The rest of one target's run, with its lock held (None in a dry run): open the release
/// record, apply, wait. Losing the lock stops the target at once (`LockLost`).
pub async fn deploy_target(
    plan: &Plan,
    target: &TargetConfig,
    reached: Reached,
    lock: Option<LockGuard>,
    cancel: &CancellationToken,
    progress: &Progress,
) -> TargetRun {
    let Reached {
        mut run,
        mut clock,
        access,
        resolution,
        started,
    } = reached;
    let name = target.name.clone();
    let env = |k: &str| plan.env(k);
    // Abandoned records, the last good record, this run's pending record.
    if let Some(lock) = lock {
        let opened = match plan.recorded_manifests() {
            Ok(manifests) => {
                open_records(
                    &plan.config,
                    target,
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
                return finish(run, clock, progress, TargetOutcome::Failed);
            }
        }
    }
    // The deadline is for apply and rollout: time spent waiting for the lock does not count.
    let deadline = if plan.options.dry_run {
        started + plan.config.wait.timeout
    } else {
        Instant::now() + plan.config.wait.timeout
    };
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
    // Ends the task above when this target's run returns.
    let _end = stop.clone().drop_guard();
    let lost_now = |run: &TargetRun| run.release.as_ref().and_then(TargetRelease::lock_lost);

    clock.start("apply");
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
            .default_namespace(target, &access.context_namespace),
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
        &stop,
        &report_progress,
    )
    .await;
    run.received_new_revision = !plan.options.dry_run && !outcome.applied.is_empty();
    run.report.warnings.extend(outcome.warnings);
    run.applied = outcome.applied;
    if let Some(why) = lost_now(&run) {
        run.report.failures = vec![lock_lost_failure(&why)];
        return finish(run, clock, progress, TargetOutcome::Failed);
    }
    if let Err(e) = outcome.result {
        if matches!(e, ApplyError::Cancelled) {
            return finish(run, clock, progress, TargetOutcome::Cancelled);
        }
        tracing::info!("apply failed: {e}");
        run.report.failures = apply_failures(&e, &access.server);
        return finish(run, clock, progress, TargetOutcome::Failed);
    }
    tracing::info!(objects = run.applied.len(), "applied");

    if plan.options.dry_run {
        return finish(run, clock, progress, TargetOutcome::Deployed);
    }

    clock.start("wait");
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
        &stop,
        &report_wait,
    )
    .await;
    run.report.warnings.extend(waited.warnings);
    if let Some(why) = lost_now(&run) {
        run.report.failures = vec![lock_lost_failure(&why)];
        return finish(run, clock, progress, TargetOutcome::Failed);
    }
    let outcome = match waited.result {
        Ok(()) => TargetOutcome::Deployed,
        Err(WaitFailure::Cancelled) => TargetOutcome::Cancelled,
        Err(WaitFailure::Failed(failures)) | Err(WaitFailure::Timeout(failures)) => {
            for f in &failures {
                tracing::info!("{}", f.headline());
            }
            run.report.failures = failures;
            TargetOutcome::Failed
        }
    };
    // The record is finished and the lock released in the conclusion, after the policy.
    finish(run, clock, progress, outcome)
}

fn finish(
    mut run: TargetRun,
    mut clock: PhaseClock,
    progress: &Progress,
    outcome: TargetOutcome,
) -> TargetRun {
    clock.stop();
    run.report.phases = clock.phases;
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
    run
}
