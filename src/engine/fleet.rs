//! All targets at once, bounded by `config.concurrency`. Each target runs in its own task
//! inside a tracing span `target=<name>`, so every log line names its target; a target that
//! fails never stops the others. Fleet stages run once, between the steps of every target.
//! The results become one `Report`.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{PipelineStage, TargetConfig};
use crate::engine::plan::Plan;
use crate::engine::scripts::fleet_script;
use crate::engine::target_run::{
    TargetRun, complete, deploy_target, finish, reach_target, run_stages, stop_unlocked,
};
use crate::release::lock::{LockError, LockGuard, lock_key, lock_order};
use crate::release::session::{PrepareError, ReleaseSettings, take_lock};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};
use crate::stages::plan::{Step, steps};

/// Runs every target of the plan through the pipeline and returns their runs in config
/// order: each target runs its own stages in its own task, and at a fleet stage every target
/// waits for the others, the script runs once, then they go on. Before the first stage every
/// target is reached (no write), then every target's lock is taken in the one global lock
/// order ([`take_locks`]), so nothing is written anywhere before all locks are held.
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    let mut runs: Option<Vec<TargetRun>> = None;
    for step in steps(&plan.config.pipeline) {
        match step {
            Step::Targets(stages) => {
                let stages = Arc::new(stages);
                let tasks: Vec<(String, TargetTask)> = match runs.take() {
                    None => {
                        let reached = reach_all(&plan, &cancel, &progress).await;
                        let locks = if plan.options.dry_run {
                            reached.iter().map(|_| Ok(None)).collect()
                        } else {
                            take_locks(&plan, &reached, &cancel).await
                        };
                        reached
                            .into_iter()
                            .zip(locks)
                            .map(|(mut run, lock)| {
                                let (plan, cancel, progress) =
                                    (plan.clone(), cancel.clone(), progress.clone());
                                let stages = stages.clone();
                                let name = run.target.name.clone();
                                let task: TargetTask = Box::pin(async move {
                                    if run.done {
                                        return run;
                                    }
                                    let lock = match lock {
                                        Ok(Some((lock, notes))) => {
                                            run.report.warnings.extend(notes);
                                            Some(lock)
                                        }
                                        Ok(None) => None,
                                        Err(refusal) => {
                                            let LockRefusal {
                                                outcome,
                                                failure,
                                                message,
                                            } = *refusal;
                                            stop_unlocked(
                                                &mut run, &progress, outcome, failure, message,
                                            );
                                            return run;
                                        }
                                    };
                                    deploy_target(
                                        &plan, &mut run, lock, &stages, &cancel, &progress,
                                    )
                                    .await;
                                    run
                                });
                                (name, task)
                            })
                            .collect()
                    }
                    Some(previous) => previous
                        .into_iter()
                        .map(|mut run| {
                            let (plan, cancel, progress) =
                                (plan.clone(), cancel.clone(), progress.clone());
                            let stages = stages.clone();
                            let name = run.target.name.clone();
                            let task: TargetTask = Box::pin(async move {
                                run_stages(&plan, &mut run, &stages, &cancel, &progress).await;
                                run
                            });
                            (name, task)
                        })
                        .collect(),
                };
                runs = Some(run_all(tasks, plan.config.concurrency.max(1), &progress).await);
            }
            Step::Fleet(index) => {
                let (Some(runs), Some(PipelineStage::Script(stage))) =
                    (runs.as_mut(), plan.config.pipeline.get(index))
                else {
                    continue;
                };
                if cancel.is_cancelled() {
                    for run in runs.iter_mut().filter(|r| !r.done) {
                        finish(run, &progress, TargetOutcome::Cancelled);
                    }
                    continue;
                }
                fleet_script(&plan, runs, stage, &cancel, &progress).await;
            }
        }
    }
    let mut runs = runs.unwrap_or_default();
    for run in &mut runs {
        complete(run, &progress);
    }
    runs
}

type TargetTask = std::pin::Pin<Box<dyn std::future::Future<Output = TargetRun> + Send>>;

/// Every target reached at once (connect, discover: no write); a run that failed there is
/// `done`.
async fn reach_all(
    plan: &Arc<Plan>,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Vec<TargetRun> {
    let tasks: Vec<(String, TargetTask)> = plan
        .config
        .targets
        .iter()
        .map(|target| {
            let (plan, cancel, progress) = (plan.clone(), cancel.clone(), progress.clone());
            let name = target.name.clone();
            let target = target.clone();
            let task: TargetTask = Box::pin(async move {
                if cancel.is_cancelled() {
                    return skipped(
                        &target,
                        TargetOutcome::Cancelled,
                        "cancelled before it started",
                    );
                }
                reach_target(&plan, &target, &cancel, &progress).await
            });
            (name, task)
        })
        .collect();
    run_all(tasks, plan.config.concurrency.max(1), progress).await
}

/// A lock taken, with the notes for the report (a lease taken over).
type HeldLock = (LockGuard, Vec<String>);

/// Why a reached target does not go on to deploy.
pub struct LockRefusal {
    outcome: TargetOutcome,
    failure: Option<Failure>,
    message: Option<String>,
}

/// Takes the lock of every reached target before anything is written anywhere, one Lease at
/// a time in the one global order ([`lock_order`]: by cluster server, then namespace), all
/// within one lock timeout. Waiting for a held Lease, a run holds only Leases earlier in
/// that order, which the holder, having passed them, never waits for: two runs over the
/// same clusters can therefore never wait for each other in a cycle (the deadlock in which
/// both timed out and rolled back). When one lock cannot be taken in time the run deploys
/// nothing: it releases what it holds and every target reports why, so a run never rolls
/// back targets another run is deploying.
async fn take_locks(
    plan: &Plan,
    reached: &[TargetRun],
    cancel: &CancellationToken,
) -> Vec<Result<Option<HeldLock>, Box<LockRefusal>>> {
    let mut locks: Vec<Option<Result<Option<HeldLock>, Box<LockRefusal>>>> =
        reached.iter().map(|_| None).collect();
    let candidates: Vec<usize> = (0..reached.len())
        .filter(|i| !reached[*i].done && reached[*i].access.is_some())
        .collect();
    let keys: Vec<(String, String)> = candidates
        .iter()
        .filter_map(|i| {
            let run = &reached[*i];
            let access = run.access.as_ref()?;
            let namespace = plan
                .config
                .history_namespace(&run.target, &access.context_namespace);
            Some(lock_key(&access.server, &namespace))
        })
        .collect();
    let timeout = ReleaseSettings::from_config(&plan.config).lock_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut abort: Option<(TargetOutcome, String)> = None;
    let mut previous: Option<usize> = None;
    for position in lock_order(&keys) {
        let i = candidates[position];
        let run = &reached[i];
        let Some(access) = run.access.as_ref() else {
            continue;
        };
        let target = &run.target;
        // Validation refuses such configs; a kubeconfig read differently at run time must
        // still not make a run wait for its own Lease.
        if let Some(before) = previous.filter(|p| keys[*p] == keys[position]) {
            let e = LockError::SameLease {
                first: reached[candidates[before]].target.name.clone(),
                second: target.name.clone(),
                lease: crate::release::lock::lease_name(&plan.config.app),
                namespace: keys[position].1.clone(),
                server: access.server.clone(),
            };
            locks[i] = Some(Err(Box::new(LockRefusal {
                outcome: TargetOutcome::Failed,
                failure: Some(PrepareError::Lock(e).failure(&access.server)),
                message: None,
            })));
            continue;
        }
        previous = Some(position);
        if let Some((outcome, why)) = &abort {
            locks[i] = Some(Err(Box::new(LockRefusal {
                outcome: *outcome,
                failure: None,
                message: Some(why.clone()),
            })));
            continue;
        }
        let span = tracing::error_span!("target", target = %target.name);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let env = |k: &str| plan.env(k);
        let taken = take_lock(&plan.config, target, access, left, &env, cancel)
            .instrument(span)
            .await;
        locks[i] = Some(match taken {
            Ok((guard, notes)) => Ok(Some((guard, notes))),
            Err(PrepareError::Cancelled) => {
                abort = Some((
                    TargetOutcome::Cancelled,
                    "cancelled while waiting for the locks".into(),
                ));
                Err(Box::new(LockRefusal {
                    outcome: TargetOutcome::Cancelled,
                    failure: None,
                    message: Some("cancelled while waiting for its lock".into()),
                }))
            }
            Err(e) => {
                let failure = e.failure(&access.server);
                tracing::info!("{e}");
                if matches!(e, PrepareError::Lock(LockError::Timeout { .. })) {
                    abort = Some((
                        TargetOutcome::Skipped,
                        format!(
                            "not deployed: the lock of target {} could not be taken in time (see there); a run takes every target's lock before its first write, so it deployed nowhere",
                            target.name
                        ),
                    ));
                }
                Err(Box::new(LockRefusal {
                    outcome: TargetOutcome::Failed,
                    failure: Some(failure),
                    message: None,
                }))
            }
        });
    }
    // A run that gives up deploys nowhere: the locks it took go back, for the other run.
    if let Some((outcome, why)) = &abort {
        for slot in locks.iter_mut() {
            if let Some(Ok(Some(_))) = slot {
                if let Some(Ok(Some((guard, _)))) = slot.take() {
                    let _ = guard.release().await;
                }
                *slot = Some(Err(Box::new(LockRefusal {
                    outcome: *outcome,
                    failure: None,
                    message: Some(why.clone()),
                })));
            }
        }
    }
    locks
        .into_iter()
        .map(|slot| slot.unwrap_or(Ok(None)))
        .collect()
}

/// Runs one task per target, at most `concurrency` at once, each in its own tokio task inside
/// the span `target=<name>`; results in the order given.
async fn run_all(
    tasks: Vec<(String, TargetTask)>,
    concurrency: usize,
    progress: &Progress,
) -> Vec<TargetRun> {
    futures::stream::iter(tasks)
        .map(|(name, task)| {
            // error level: the span (and so the target name) is on every line that is logged at all.
            let span = tracing::error_span!("target", target = %name);
            let handle = tokio::spawn(task.instrument(span));
            let progress = progress.clone();
            async move {
                match handle.await {
                    Ok(run) => run,
                    Err(e) => {
                        // A panic in one target's task must not take the fleet down.
                        let message = format!("internal error: {e}");
                        progress.update(
                            &name,
                            Stage::Finished {
                                outcome: TargetOutcome::Failed,
                                message: Some(message.clone()),
                            },
                        );
                        let target = TargetConfig {
                            name: name.clone(),
                            context: None,
                            kubeconfig: None,
                            kubeconfig_env: None,
                            namespace: None,
                            environment: None,
                            line: 0,
                        };
                        let mut run = skipped(&target, TargetOutcome::Failed, &message);
                        run.report.failures.push(Failure {
                            object: "rollguard".into(),
                            reason: "InternalError".into(),
                            message,
                            ..Default::default()
                        });
                        run
                    }
                }
            }
        })
        .buffered(concurrency)
        .collect()
        .await
}

fn skipped(target: &TargetConfig, outcome: TargetOutcome, message: &str) -> TargetRun {
    let mut run = TargetRun::new(target, Timestamp::now());
    run.report.outcome = outcome;
    run.report.message = Some(message.to_string());
    run.done = true;
    run
}

/// Deploys the plan to every target and builds the report.
pub async fn deploy(plan: Arc<Plan>, cancel: CancellationToken, progress: Progress) -> Report {
    let started_at = Timestamp::now();
    let mut runs = run_targets(plan.clone(), cancel.clone(), progress.clone()).await;
    // Records, the failure policy (or on_cancel) and the rollbacks, all at once.
    crate::engine::conclude::conclude(&plan, &mut runs, &cancel, &progress).await;
    let targets: Vec<TargetReport> = runs.into_iter().map(|r| r.report).collect();
    build_report(&plan, targets, started_at)
}

/// The report of a run.
pub fn build_report(plan: &Plan, targets: Vec<TargetReport>, started_at: Timestamp) -> Report {
    let mut report = Report::new(
        plan.config.app.clone(),
        plan.commit.clone(),
        started_at,
        Timestamp::now(),
        targets,
    );
    report.dry_run = plan.options.dry_run;
    report
}
