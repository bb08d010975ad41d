//! One target's executor: it runs what the coordinator tells it to (the next part of its
//! pipeline, its bake, its rollback, its end) and reports what happened as machine events.
//! It never decides an outcome: a failure is reported, and the coordinator's answer (roll
//! back, or end) comes back as a command. See `coordinator.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::engine::conclude::{Conclusion, settle_target};
use crate::engine::machine::{Command, EndWhy, Event, RollbackWhy, TargetId};
use crate::engine::plan::Plan;
use crate::engine::policy::RollbackResult;
use crate::engine::target_run::{TargetRun, complete, deploy_target, finish, run_stages};
use crate::kube::bake::{BakeOptions, watch_bake};
use crate::kube::wait::WaitFailure;
use crate::release::session::OpenHistory;
use crate::report::progress::{Progress, Stage};
use crate::report::{BAKE_PHASE, TargetOutcome};
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

    /// The wave's bake after a healthy rollout: the new revision's pods stay watched, and a
    /// problem fails the target as during the wait.
    async fn bake(&mut self) {
        if self.bake.is_zero() {
            return self.send(Event::Baked(self.id));
        }
        let (name, watch) = {
            let mut run = self.run.lock().await;
            run.clock.start(BAKE_PHASE);
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
        let report = |left: Duration| progress.update(&name, Stage::baking(left));
        let mut baked = Ok(());
        let worked = listen(
            async {
                match &watch {
                    Some((client, applied, options)) => {
                        baked = watch_bake(client, applied, options, &stop, &report).await;
                    }
                    None => {
                        tokio::select! {
                            _ = tokio::time::sleep(self.bake) => {}
                            _ = stop.cancelled() => baked = Err(WaitFailure::Cancelled),
                        }
                    }
                }
            },
            &mut self.commands,
            &stop,
        )
        .await;
        let mut run = self.run.lock().await;
        run.clock.stop();
        let event = match baked {
            _ if worked.stop_asked => Event::Stopped(self.id),
            Ok(()) => Event::Baked(self.id),
            Err(WaitFailure::Cancelled) => Event::Stopped(self.id),
            Err(WaitFailure::Failed(failures) | WaitFailure::Timeout(failures)) => {
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
            finish(run, &shared.progress, TargetOutcome::Failed);
        }
        // Healthy (or baking): its release was good here, the fleet goes back.
        RollbackWhy::Policy { .. } if !run.done => {
            run.report.message = Some(why.to_string());
            finish(run, &shared.progress, TargetOutcome::Deployed);
        }
        // Healthy when a signal came (on_cancel: rollback).
        _ if !run.done => finish(run, &shared.progress, TargetOutcome::Cancelled),
        _ => {}
    }
    let context = shared.conclusion();
    let started_at = jiff::Timestamp::now();
    let result = settle_target(&context, run, true).await;
    if let Some(rollback) = run.report.rollback.as_mut() {
        rollback.started_at = Some(started_at);
        rollback.why = Some(why.to_string());
    }
    result
}

/// Ends the target as the coordinator decided: its record written, its lock released.
pub(crate) async fn obey_end(shared: &Shared, run: &Mutex<TargetRun>, why: EndWhy) {
    let mut run = run.lock().await;
    let run = &mut *run;
    match &why {
        EndWhy::Deployed => complete(run, &shared.progress),
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
