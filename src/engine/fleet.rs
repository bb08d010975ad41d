//! All targets at once, bounded by `config.concurrency`. Each target runs in its own task
//! inside a tracing span `target=<name>`, so every log line names its target; a target that
//! fails never stops the others. The results become one `Report`.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::TargetConfig;
use crate::engine::plan::Plan;
use crate::engine::target_run::{Reached, TargetRun, deploy_target, reach_target};
use crate::release::lock::{LockError, LockGuard, lock_key, lock_order};
use crate::release::session::{PrepareError, ReleaseSettings, take_lock};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};

/// Runs one piece of a target's work in its own task, inside the span `target=<name>`; a
/// panic there fails that target only.
async fn in_target_task<F>(name: &str, progress: &Progress, work: F) -> TargetRun
where
    F: std::future::Future<Output = TargetRun> + Send + 'static,
{
    // error level: the span (and so the target name) is on every line that is logged at all.
    let span = tracing::error_span!("target", target = %name);
    match tokio::spawn(work.instrument(span)).await {
        Ok(run) => run,
        Err(e) => {
            let message = format!("internal error: {e}");
            progress.update(
                name,
                Stage::Finished {
                    outcome: TargetOutcome::Failed,
                    message: Some(message.clone()),
                },
            );
            let mut run = skipped(name, TargetOutcome::Failed, &message);
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

/// Runs every target of the plan and returns their runs in config order, in three steps:
/// every target is reached (connect, discover; no write) at once; then every reached
/// target's lock is taken, one after another in the global lock order ([`take_locks`]);
/// then every locked target deploys at once.
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    let concurrency = plan.config.concurrency.max(1);
    let targets = plan.config.targets.clone();
    // Ok: reached; Err: finished already.
    let reached: Vec<Result<Reached, Box<TargetRun>>> = futures::stream::iter(targets.clone())
        .map(|target| {
            let plan = plan.clone();
            let cancel = cancel.clone();
            let progress = progress.clone();
            async move {
                let name = target.name.clone();
                if cancel.is_cancelled() {
                    return Err(Box::new(skipped(
                        &target.name,
                        TargetOutcome::Cancelled,
                        "cancelled before it started",
                    )));
                }
                let span = tracing::error_span!("target", target = %target.name);
                let task = tokio::spawn(
                    async move { reach_target(&plan, &target, &cancel, &progress).await }
                        .instrument(span),
                );
                task.await.unwrap_or_else(|e| {
                    Err(Box::new(skipped(
                        &name,
                        TargetOutcome::Failed,
                        &format!("internal error: {e}"),
                    )))
                })
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    let locks = if plan.options.dry_run {
        reached.iter().map(|_| Ok(None)).collect()
    } else {
        take_locks(&plan, &targets, &reached, &cancel).await
    };
    futures::stream::iter(reached.into_iter().zip(locks).zip(targets))
        .map(|((reached, lock), target)| {
            let plan = plan.clone();
            let cancel = cancel.clone();
            let progress = progress.clone();
            async move {
                let mut reached = match reached {
                    Ok(reached) => reached,
                    Err(done) => return *done,
                };
                let lock = match lock {
                    Ok(Some((lock, notes))) => {
                        reached.warn(notes);
                        Some(lock)
                    }
                    Ok(None) => None,
                    Err(stopped) => {
                        let LockRefusal {
                            outcome,
                            failure,
                            message,
                        } = *stopped;
                        return reached.stop(&progress, outcome, failure, message);
                    }
                };
                let name = target.name.clone();
                let task_progress = progress.clone();
                in_target_task(&name, &progress, async move {
                    deploy_target(&plan, &target, reached, lock, &cancel, &task_progress).await
                })
                .await
            }
        })
        .buffered(concurrency)
        .collect()
        .await
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
    targets: &[TargetConfig],
    reached: &[Result<Reached, Box<TargetRun>>],
    cancel: &CancellationToken,
) -> Vec<Result<Option<HeldLock>, Box<LockRefusal>>> {
    let mut locks: Vec<Option<Result<Option<HeldLock>, Box<LockRefusal>>>> =
        reached.iter().map(|_| None).collect();
    let candidates: Vec<usize> = (0..reached.len()).filter(|i| reached[*i].is_ok()).collect();
    let keys: Vec<(String, String)> = candidates
        .iter()
        .filter_map(|i| reached[*i].as_ref().ok())
        .zip(&candidates)
        .map(|(r, i)| {
            let namespace = plan
                .config
                .history_namespace(&targets[*i], &r.access().context_namespace);
            lock_key(&r.access().server, &namespace)
        })
        .collect();
    let timeout = ReleaseSettings::from_config(&plan.config).lock_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut abort: Option<(TargetOutcome, String)> = None;
    let mut previous: Option<usize> = None;
    for position in lock_order(&keys) {
        let i = candidates[position];
        let Ok(r) = &reached[i] else { continue };
        let target = &targets[i];
        // Validation refuses such configs; a kubeconfig read differently at run time must
        // still not make a run wait for its own Lease.
        if let Some(before) = previous.filter(|p| keys[*p] == keys[position]) {
            let e = LockError::SameLease {
                first: targets[candidates[before]].name.clone(),
                second: target.name.clone(),
                lease: crate::release::lock::lease_name(&plan.config.app),
                namespace: keys[position].1.clone(),
                server: r.access().server.clone(),
            };
            locks[i] = Some(Err(Box::new(LockRefusal {
                outcome: TargetOutcome::Failed,
                failure: Some(PrepareError::Lock(e).failure(&r.access().server)),
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
        let taken = take_lock(&plan.config, target, r.access(), left, &env, cancel)
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
                let failure = e.failure(&r.access().server);
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

fn skipped(name: &str, outcome: TargetOutcome, message: &str) -> TargetRun {
    let mut report = TargetReport::new(name, outcome, Timestamp::now());
    report.message = Some(message.to_string());
    TargetRun {
        report,
        access: None,
        applied: Vec::new(),
        received_new_revision: false,
        release: None,
    }
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
