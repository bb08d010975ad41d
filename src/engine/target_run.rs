//! One target, start to end: connect -> discover (every kind served) -> lock and pending
//! record -> apply -> wait, into a `TargetRun` (the report, the connection and what was
//! applied, for the conclusion).

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::TargetConfig;
use crate::engine::plan::Plan;
use crate::kube::apply::{
    AppliedObject, ApplyError, ApplyOptions, MAX_IN_FLIGHT, Resolution, apply_failures,
    apply_resolved, resolve_set,
};
use crate::kube::connect::{ClusterAccess, connect, target_failure};
use crate::kube::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::release::session::{PrepareError, TargetRelease, prepare};
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
struct PhaseClock {
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

/// A target that connected and served every kind of the manifests: nothing written yet.
pub struct Preflight {
    run: TargetRun,
    clock: PhaseClock,
    access: ClusterAccess,
    resolution: Resolution,
    started: Instant,
}

/// The first round trip of a target: connect and discover the kinds the manifests use.
/// Every target passes this before any target writes (see `fleet.rs`); a target that does
/// not comes back as its finished, failed (or cancelled) run.
pub async fn preflight(
    plan: &Plan,
    target: &TargetConfig,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<Preflight, Box<TargetRun>> {
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
        cancel,
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
    match resolve_set(&access.client, &plan.manifests, deadline, cancel).await {
        Ok(resolution) => Ok(Preflight {
            run,
            clock,
            access,
            resolution,
            started,
        }),
        Err(ApplyError::Cancelled) => Err(Box::new(finish(
            run,
            clock,
            progress,
            TargetOutcome::Cancelled,
        ))),
        Err(e) => {
            tracing::info!("{e}");
            run.report.failures = apply_failures(&e, &access.server);
            Err(Box::new(finish(
                run,
                clock,
                progress,
                TargetOutcome::Failed,
            )))
        }
    }
}

/// Runs one target after its preflight. Never panics on cluster errors: every problem ends
/// in the report.
pub async fn run_target(
    plan: &Plan,
    target: &TargetConfig,
    preflight: Preflight,
    cancel: &CancellationToken,
    progress: &Progress,
) -> TargetRun {
    let Preflight {
        mut run,
        mut clock,
        access,
        resolution,
        started,
    } = preflight;
    let deadline = started + plan.config.wait.timeout;
    let name = target.name.clone();
    let env = |k: &str| plan.env(k);

    // The lock, abandoned records, the last good record, this run's pending record.
    if !plan.options.dry_run {
        clock.start("lock");
        let prepared = match plan.recorded_manifests() {
            Ok(manifests) => {
                let commit = plan.commit.as_ref();
                prepare(
                    &plan.config,
                    target,
                    &access,
                    manifests,
                    commit,
                    &env,
                    cancel,
                )
                .await
            }
            Err(e) => Err(PrepareError::History(e)),
        };
        match prepared {
            Ok((release, notes)) => {
                run.report.revision = Some(release.record.revision);
                run.report.warnings.extend(notes);
                run.release = Some(release);
            }
            Err(PrepareError::Cancelled) => {
                return finish(run, clock, progress, TargetOutcome::Cancelled);
            }
            Err(e) => {
                tracing::info!("{e}");
                run.report.failures.push(e.failure(&access.server));
                return finish(run, clock, progress, TargetOutcome::Failed);
            }
        }
    }
    crate::error::test_panic_point("target");
    // The deadline is for apply and rollout: time spent waiting for the lock does not count.
    let deadline = if plan.options.dry_run {
        deadline
    } else {
        Instant::now() + plan.config.wait.timeout
    };

    clock.start("apply");
    progress.update(
        &name,
        Stage::Applying {
            done: 0,
            total: plan.manifests.objects.len(),
        },
    );
    let options = ApplyOptions {
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
        cancel,
        &report_progress,
    )
    .await;
    run.received_new_revision = !plan.options.dry_run && !outcome.applied.is_empty();
    run.report.warnings.extend(outcome.warnings);
    run.applied = outcome.applied;
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
        &access.watch_client,
        &run.applied,
        &wait_options,
        cancel,
        &report_wait,
    )
    .await;
    run.report.warnings.extend(waited.warnings);
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
