//! One target's executor: it runs what the coordinator tells it to (the next part of its
//! pipeline, its bake, its rollback, its end) and reports what happened as machine events.
//! It never decides an outcome: a failure is reported, and the coordinator's answer (roll
//! back, or end) comes back as a command. See `coordinator.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::checks::{self, CheckRunner, PreparedCheck, run::ChecksOutcome};
use crate::cluster::bake::{BakeOptions, watch_bake};
use crate::cluster::wait::WaitFailure;
use crate::engine::conclude::{Conclusion, end_stage, settle_target};
use crate::engine::machine::{Command, EndWhy, Event, RollbackWhy, TargetId};
use crate::engine::plan::Plan;
use crate::engine::policy::RollbackResult;
use crate::engine::target_run::{TargetRun, complete, deploy_target, finish, run_stages};
use crate::release::session::OpenHistory;
use crate::report::progress::{Progress, Stage};
use crate::report::{BAKE_PHASE, Failure, TargetOutcome};
use crate::stages::env::RollbackReason;

/// What every executor of a run shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub plan: Arc<Plan>,
    pub progress: Progress,
    /// The run's cancel (a signal).
    pub cancel: CancellationToken,
    /// Cancelled when a signal's rollback budget is over.
    pub rollback_stop: CancellationToken,
    /// The number of every rollback record of this run.
    pub rollback_revision: u64,
    pub events: mpsc::UnboundedSender<Event>,
}

impl Shared {
    /// What a target's end or rollback needs, as of now (after a signal: its budget).
    fn conclusion(&self) -> Conclusion<'_> {
        Conclusion::new(
            &self.plan,
            &self.progress,
            self.rollback_revision,
            &self.cancel,
            self.rollback_stop.clone(),
        )
    }
}

/// One target's executor.
pub(crate) struct Executor {
    pub id: TargetId,
    pub run: Arc<Mutex<TargetRun>>,
    /// The target's history with its lock held, and the run's revision (None in a dry run).
    pub history: Option<(OpenHistory, u64)>,
    /// The parts of its pipeline (indices of its target stages), split at fleet stages.
    pub parts: Vec<Vec<usize>>,
    /// Its wave's bake.
    pub bake: Duration,
    pub commands: mpsc::UnboundedReceiver<Command>,
    pub shared: Shared,
}

/// How a piece of work ended while the executor listened for a `Stop`.
struct Worked {
    stop_asked: bool,
}

impl Executor {
    /// Obeys commands until the target is over (ended or rolled back). Returns the result of
    /// its rollback, if it rolled back.
    pub async fn run(mut self) -> Option<RollbackResult> {
        let mut next = 0;
        while let Some(command) = self.commands.recv().await {
            match command {
                Command::Start(_) => {
                    let part = self.parts.get(next).cloned().unwrap_or_default();
                    next += 1;
                    let last = next >= self.parts.len();
                    self.start(part, next == 1, last).await;
                }
                // Idle (waiting at a fleet stage, baked, or already stopped): nothing to stop.
                Command::Stop(_) => self.send(Event::Stopped(self.id)),
                Command::RollBack { why, .. } => {
                    let result = obey_rollback(&self.shared, &self.run, why).await;
                    let ok = result.as_ref().is_none_or(|r| r.ok);
                    self.send(Event::RollbackEnded {
                        target: self.id,
                        ok,
                    });
                    return result;
                }
                Command::End { why, .. } => {
                    obey_end(&self.shared, &self.run, why).await;
                    return None;
                }
                // Run by the coordinator.
                Command::FleetStage { .. } => {}
            }
        }
        None
    }

    fn send(&self, event: Event) {
        // The coordinator outlives every executor; a closed channel means the run is over.
        let _ = self.shared.events.send(event);
    }

    /// Runs the next part of the pipeline, then (the last part) the bake, and says how it
    /// went.
    async fn start(&mut self, part: Vec<usize>, first: bool, last: bool) {
        let stop = self.shared.cancel.child_token();
        let history = self.history.take();
        let run = self.run.clone();
        let plan = self.shared.plan.clone();
        let progress = self.shared.progress.clone();
        let worked = {
            let mut run = run.lock().await;
            let work = async {
                if first {
                    deploy_target(&plan, &mut run, history, &part, &stop, &progress).await;
                } else {
                    run_stages(&plan, &mut run, &part, &stop, &progress).await;
                }
            };
            listen(work, &mut self.commands, &stop).await
        };
        let (changed, done, outcome, lock_lost) = {
            let run = run.lock().await;
            (
                run.changed_something() && run.release.is_some(),
                run.done,
                run.report.outcome,
                run.report.failures.iter().any(|f| f.reason == "LockLost"),
            )
        };
        if changed {
            self.send(Event::Changed(self.id));
        }
        let event = match (done, outcome) {
            (true, TargetOutcome::Cancelled) => Event::Stopped(self.id),
            (true, _) => Event::Failed {
                target: self.id,
                lock_lost,
            },
            (false, _) if worked.stop_asked => Event::Stopped(self.id),
            (false, _) if !last => Event::Reached(self.id),
            (false, _) => Event::Healthy(self.id),
        };
        let healthy = event == Event::Healthy(self.id);
        self.send(event);
        if healthy {
            self.bake().await;
        }
    }

    /// Healthy and baked: its line says so before the coordinator hears it (which may end
    /// the target at once: its end must be the last line).
    async fn baked(&self) {
        let name = self.run.lock().await.target.name.clone();
        self.shared.progress.update(&name, Stage::Healthy);
        self.send(Event::Baked(self.id));
    }

    /// The wave's bake after a healthy rollout: the new revision's pods stay watched, and a
    /// problem fails the target as during the wait. The target's checks (`checks:`) run
    /// beside it, from now until the bake ends (once, without a bake); one that fails the
    /// target ends the bake as a pod problem would.
    async fn bake(&mut self) {
        let checks = self.prepared_checks().await;
        if self.bake.is_zero() && checks.is_empty() {
            return self.baked().await;
        }
        let (name, watch) = {
            let mut run = self.run.lock().await;
            // Checks without a bake run once: that is no bake.
            if !self.bake.is_zero() {
                run.clock.start(BAKE_PHASE);
            }
            // Nothing of the new revision to watch (a dry run, a no-op deploy): the bake
            // only waits.
            let watch = run
                .access
                .as_ref()
                .filter(|_| !run.applied.is_empty())
                .map(|access| {
                    (
                        access.watch_client.clone(),
                        run.applied.clone(),
                        BakeOptions {
                            bake: self.bake,
                            fail_fast: self.shared.plan.config.wait.fail_fast.clone(),
                            server: access.server.clone(),
                            log_lines: self.shared.plan.config.wait.log_lines,
                        },
                    )
                });
            (run.target.name.clone(), watch)
        };
        let stop = self.shared.cancel.child_token();
        let progress = self.shared.progress.clone();
        let last_values: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
        let report = |left: Duration| {
            let values = last_values.lock().ok().and_then(|v| v.clone());
            progress.update(&name, Stage::baking_with(left, values));
        };
        let live = |values: String| {
            if let Ok(mut slot) = last_values.lock() {
                *slot = Some(values);
            }
        };
        let bake = self.bake;
        let mut baked = Ok(());
        let mut outcome = None;
        let worked = listen(
            async {
                let bake_stop = stop.child_token();
                let watched = async {
                    match &watch {
                        _ if bake.is_zero() => Ok(()),
                        Some((client, applied, options)) => {
                            watch_bake(client, applied, options, &bake_stop, &report).await
                        }
                        None => {
                            tokio::select! {
                                _ = tokio::time::sleep(bake) => Ok(()),
                                _ = bake_stop.cancelled() => Err(WaitFailure::Cancelled),
                            }
                        }
                    }
                };
                let (b, o) =
                    bake_beside_checks(watched, &bake_stop, &checks, bake.is_zero(), &stop, &live)
                        .await;
                baked = b;
                outcome = o;
            },
            &mut self.commands,
            &stop,
        )
        .await;
        let mut run = self.run.lock().await;
        if !bake.is_zero() {
            run.clock.stop();
        }
        let failed_check = outcome.as_ref().and_then(|o| o.failed.clone());
        if let Some(outcome) = outcome {
            run.report.checks = outcome.reports;
        }
        let event = match (baked, failed_check) {
            _ if worked.stop_asked => Event::Stopped(self.id),
            (_, Some(message)) => {
                tracing::info!("AnalysisFailed: {message}");
                run.report.failures = vec![Failure {
                    object: "checks".into(),
                    reason: "AnalysisFailed".into(),
                    message,
                    ..Failure::default()
                }];
                finish(&mut run, &self.shared.progress, TargetOutcome::Failed);
                Event::Failed {
                    target: self.id,
                    lock_lost: false,
                }
            }
            (Ok(()), None) => {
                drop(run);
                return self.baked().await;
            }
            (Err(WaitFailure::Cancelled), None) => Event::Stopped(self.id),
            (Err(WaitFailure::Failed(failures) | WaitFailure::Timeout(failures)), None) => {
                for f in &failures {
                    tracing::info!("{}", f.headline());
                }
                run.report.failures = failures;
                finish(&mut run, &self.shared.progress, TargetOutcome::Failed);
                Event::Failed {
                    target: self.id,
                    lock_lost: false,
                }
            }
        };
        drop(run);
        self.send(event);
    }

    /// The target's checks rendered for it (none in a dry run: nothing new runs there).
    async fn prepared_checks(&self) -> Vec<PreparedCheck> {
        let plan = &self.shared.plan;
        if plan.options.dry_run {
            return Vec::new();
        }
        let run = self.run.lock().await;
        let revision = run.release.as_ref().map(|r| r.record.revision);
        let commit = plan.commit.as_ref().map(|c| c.sha.as_str());
        let values = checks::run::values(&plan.config, &run.target, revision, commit);
        checks::prepare(&plan.config, &run.target, &values)
    }
}

/// Runs the bake (`watched`, ended by `bake_stop`) and the checks together: the checks end
/// with the bake, and a check that fails the target ends the bake at once. Without a bake
/// (`once`), each check runs one time.
async fn bake_beside_checks(
    watched: impl std::future::Future<Output = Result<(), WaitFailure>>,
    bake_stop: &CancellationToken,
    checks: &[PreparedCheck],
    once: bool,
    stop: &CancellationToken,
    live: &(dyn Fn(String) + Sync),
) -> (Result<(), WaitFailure>, Option<ChecksOutcome>) {
    if checks.is_empty() {
        return (watched.await, None);
    }
    let runner = CheckRunner::new();
    let checks_stop = stop.child_token();
    let checked = runner.run(checks, once, &checks_stop, live);
    tokio::pin!(watched, checked);
    tokio::select! {
        baked = &mut watched => {
            // A bake that ended (passed or failed) ends the checks; without a bake they
            // finish their one run.
            if !once || baked.is_err() {
                checks_stop.cancel();
            }
            (baked, Some(checked.await))
        }
        outcome = &mut checked => {
            if outcome.failed.is_some() {
                bake_stop.cancel();
            }
            let baked = watched.await;
            (baked, Some(outcome))
        }
    }
}

/// Drives `work` to its end while listening for a `Stop`, which cancels `stop` (the work's
/// own token) and lets the work wind down.
async fn listen(
    work: impl std::future::Future<Output = ()>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    stop: &CancellationToken,
) -> Worked {
    tokio::pin!(work);
    let mut stop_asked = false;
    let mut open = true;
    loop {
        tokio::select! {
            _ = &mut work => return Worked { stop_asked },
            command = commands.recv(), if open => match command {
                Some(Command::Stop(_)) => {
                    stop_asked = true;
                    stop.cancel();
                }
                // The coordinator sends nothing else to a working target.
                Some(_) => {}
                None => {
                    open = false;
                    stop.cancel();
                }
            },
        }
    }
}

/// Rolls the target back: its record written as failed, its manifests re-applied, its
/// rollback commands run, its lock released.
pub(crate) async fn obey_rollback(
    shared: &Shared,
    run: &Mutex<TargetRun>,
    why: RollbackWhy,
) -> Option<RollbackResult> {
    let mut run = run.lock().await;
    let run = &mut *run;
    // Whether the target's end is said below, once its rollback is settled: the policy's
    // decision, not an intermediate outcome ("deployed", "failed: stopped") said first.
    let mut said_below = false;
    run.rollback_reason = Some(match why {
        RollbackWhy::Failed | RollbackWhy::AllFailed => RollbackReason::Failed,
        RollbackWhy::Policy { .. } | RollbackWhy::Cancelled { .. } => RollbackReason::Policy,
    });
    match &why {
        // Stopped by the policy: its record says why it failed.
        RollbackWhy::Policy { .. }
            if run.done && run.report.outcome == TargetOutcome::Cancelled =>
        {
            run.report.message = Some(format!("stopped: {why}"));
            finish(run, &Progress::quiet(), TargetOutcome::Failed);
            said_below = true;
        }
        // Healthy (or baking): its release was good here, the fleet goes back.
        RollbackWhy::Policy { .. } if !run.done => {
            run.report.message = Some(why.to_string());
            finish(run, &Progress::quiet(), TargetOutcome::Deployed);
            said_below = true;
        }
        // Healthy when a signal came (on_cancel: rollback).
        _ if !run.done => finish(run, &shared.progress, TargetOutcome::Cancelled),
        _ => {}
    }
    if said_below {
        // At once: writing its record comes before the rollback's own line.
        shared
            .progress
            .update(&run.report.name, Stage::RollingBack(why.to_string()));
    }
    let context = shared.conclusion();
    let started_at = jiff::Timestamp::now();
    let result = settle_target(&context, run, true).await;
    if let Some(rollback) = run.report.rollback.as_mut() {
        rollback.started_at = Some(started_at);
        rollback.why = Some(why.to_string());
    }
    // Said again for a target with no record or lock to settle (its lock lost), which got
    // no line of its end from the rollback.
    if said_below {
        shared.progress.update(&run.report.name, end_stage(run));
    }
    result
}

/// Ends the target as the coordinator decided: its record written, its lock released.
pub(crate) async fn obey_end(shared: &Shared, run: &Mutex<TargetRun>, why: EndWhy) {
    let mut run = run.lock().await;
    let run = &mut *run;
    match &why {
        EndWhy::Deployed => {
            // Nothing can roll it back any more: what the manifests dropped goes now (with
            // prune on), under its lock, before its record is written.
            if !run.done {
                note_dropped(shared, run, true).await;
            }
            complete(run, &shared.progress)
        }
        EndWhy::Failed if run.report.rollback.is_none() => {
            if !run.done {
                finish(run, &shared.progress, TargetOutcome::Failed);
            }
            // Failed and not rolled back: what its manifests dropped stays, listed.
            note_dropped(shared, run, false).await;
        }
        // Never started, or stopped before it changed anything.
        EndWhy::Policy { .. } | EndWhy::WaveFailed { .. }
            if !run.done || run.report.outcome == TargetOutcome::Cancelled =>
        {
            run.report.message = Some(why.to_string());
            finish(run, &shared.progress, TargetOutcome::Skipped);
        }
        EndWhy::Cancelled { .. } if !run.done => {
            finish(run, &shared.progress, TargetOutcome::Cancelled)
        }
        EndWhy::Failed if !run.done => finish(run, &shared.progress, TargetOutcome::Failed),
        _ => {}
    }
    let context = shared.conclusion();
    settle_target(&context, run, false).await;
}

/// What the target's manifests dropped of its previous release, into its report (deployed
/// and with prune on: deleted when still this app's, timed as the `prune` phase).
async fn note_dropped(shared: &Shared, run: &mut TargetRun, deployed: bool) {
    if run.release.is_none() || run.access.is_none() {
        return;
    }
    if deployed && shared.plan.options.prune {
        run.clock.start("prune");
    }
    let (Some(release), Some(access)) = (&run.release, &run.access) else {
        return;
    };
    let (dropped, warnings) = crate::engine::prune::after_end(
        &shared.plan,
        &run.target.name,
        access,
        release,
        &run.applied,
        deployed,
        &shared.cancel,
    )
    .await;
    run.report.dropped = dropped;
    run.report.warnings.extend(warnings);
}
