//! The fleet coordinator: one loop over the executors' events and the run's cancel. The
//! machine (`machine.rs`) decides; the coordinator sends its commands to the executors
//! (`executor.rs`), runs the fleet stages, and is the only place a target's outcome is
//! decided. Modelled on cargo-nextest's dispatcher: executors report, one loop decides.

use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{PipelineStage, Scope};
use crate::engine::executor::{Executor, Shared, obey_end, obey_rollback};
use crate::engine::machine::{Command, EndWhy, Event, Fleet, RollbackWhy, Settings, TargetId};
use crate::engine::plan::Plan;
use crate::engine::policy::RollbackResult;
use crate::engine::target_run::TargetRun;
use crate::release::session::{OpenHistory, ReleaseSettings};
use crate::report::progress::Progress;
use crate::report::{Failure, TargetOutcome};
use crate::stages::plan::{Step, steps};

/// A target that goes on to deploy: its run (preflighted) and its history with its lock held
/// (None in a dry run).
pub struct Entrant {
    pub run: TargetRun,
    pub history: Option<OpenHistory>,
}

/// Runs the entrants through the pipeline under the machine's rules and returns their runs
/// (in the order given) when every one of them is over, fleet stages rolled back included.
pub async fn coordinate(
    plan: &Arc<Plan>,
    entrants: Vec<Entrant>,
    revision: u64,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Vec<TargetRun> {
    let (rollback_stop, stopper) = crate::engine::conclude::rollback_stop(cancel);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Shared {
        plan: plan.clone(),
        progress: progress.clone(),
        cancel: cancel.clone(),
        rollback_stop: rollback_stop.clone(),
        rollback_revision: crate::release::fleet_revision(&[vec![revision]]),
        events: events_tx,
    };
    let first_wave = plan.config.first_wave;
    let mut fleet = Fleet::new(
        machine_settings(plan),
        entrants
            .iter()
            .map(|e| (e.run.target.name.clone(), wave_of(&e.run)))
            .collect(),
    );
    let mut crew = Crew::default();
    for (id, entrant) in entrants.into_iter().enumerate() {
        crew.spawn(id, entrant, revision, first_wave, &shared);
    }
    let mut stages_run: Vec<(u32, usize)> = Vec::new();
    let mut queue = fleet.start();
    let mut cancel_seen = false;
    loop {
        let mut follow = Vec::new();
        for command in queue.drain(..) {
            crew.dispatch(command, &shared, &mut stages_run, &mut follow)
                .await;
        }
        for event in follow {
            queue.extend(fleet.handle(event, Timestamp::now()));
        }
        if !queue.is_empty() {
            continue;
        }
        if fleet.settled() {
            break;
        }
        let event = tokio::select! {
            got = events.recv() => match got {
                Some(event) => event,
                None => break,
            },
            _ = cancel.cancelled(), if !cancel_seen => {
                cancel_seen = true;
                Event::Cancel { signal: signal_name() }
            }
        };
        queue.extend(fleet.handle(event, Timestamp::now()));
    }
    let results = crew.join().await;
    let mut runs = crew.into_runs().await;
    let rolled_back: Vec<bool> = (0..runs.len())
        .map(|i| results.iter().any(|(id, _)| *id == i))
        .collect();
    let results: Vec<RollbackResult> = results.into_iter().filter_map(|(_, r)| r).collect();
    crate::engine::conclude::roll_back_fleet(
        plan,
        &mut runs,
        &rolled_back,
        results,
        cancel,
        &rollback_stop,
    )
    .await;
    stopper.abort();
    runs
}

fn signal_name() -> &'static str {
    crate::util::process_group::cancel_signal().unwrap_or("a signal")
}

fn wave_of(run: &TargetRun) -> u32 {
    run.target.wave
}

fn machine_settings(plan: &Plan) -> Settings {
    let settings = ReleaseSettings::from_config(&plan.config);
    Settings {
        // A dry run writes nothing: every reachable target is planned, whatever fails.
        policy: if plan.options.dry_run {
            crate::config::FailurePolicy::None
        } else {
            settings.on_failure
        },
        rollback_on_cancel: settings.on_cancel_rollback,
        concurrency: plan.config.concurrency.max(1),
        max_parallel: plan
            .config
            .wave_numbers()
            .into_iter()
            .map(|wave| (wave, plan.config.max_parallel(wave)))
            .collect(),
        rollbacks_at_once: plan.rollback_bound().value,
    }
}

/// The parts of a target's pipeline between its fleet stages, and those fleet stages. A
/// `scope: fleet` stage runs once per deploy, with the first wave; the targets of later waves
/// go past it.
pub fn parts(pipeline: &[PipelineStage], first_wave: bool) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut parts = vec![Vec::new()];
    let mut barriers = Vec::new();
    for step in steps(pipeline) {
        match step {
            Step::Targets(stages) => {
                if let Some(part) = parts.last_mut() {
                    part.extend(stages);
                }
            }
            Step::Fleet(index) => {
                let once = matches!(pipeline.get(index), Some(PipelineStage::Script(s)) if s.scope == Scope::Fleet);
                if first_wave || !once {
                    barriers.push(index);
                    parts.push(Vec::new());
                }
            }
        }
    }
    (parts, barriers)
}

/// The executors of a run and what the coordinator keeps of each.
#[derive(Default)]
struct Crew {
    runs: Vec<Arc<Mutex<TargetRun>>>,
    commands: Vec<mpsc::UnboundedSender<Command>>,
    tasks: Vec<tokio::task::JoinHandle<Option<RollbackResult>>>,
    /// Each target's wave and the fleet stages it stops at.
    barriers: Vec<(u32, Vec<usize>)>,
    /// Targets told to roll back.
    rolling_back: Vec<TargetId>,
    /// Fleet stages in progress or done.
    stages: Vec<tokio::task::JoinHandle<()>>,
}

impl Crew {
    fn spawn(
        &mut self,
        id: TargetId,
        entrant: Entrant,
        revision: u64,
        first_wave: u32,
        shared: &Shared,
    ) {
        let wave = wave_of(&entrant.run);
        let (parts, barriers) = parts(&shared.plan.config.pipeline, wave == first_wave);
        let name = entrant.run.target.name.clone();
        let mut entrant = entrant;
        // Until its bake runs them, the target's checks have not run (it may fail before).
        if !shared.plan.options.dry_run {
            let config = &shared.plan.config;
            let values = crate::checks::run::values(config, &entrant.run.target, None, None);
            entrant.run.report.checks = crate::checks::run::not_run(&crate::checks::prepare(
                config,
                &entrant.run.target,
                &values,
            ));
        }
        let run = Arc::new(Mutex::new(entrant.run));
        let (tx, rx) = mpsc::unbounded_channel();
        let executor = Executor {
            id,
            run: run.clone(),
            history: entrant.history.map(|h| (h, revision)),
            parts,
            // A dry run deploys nothing, so nothing bakes.
            bake: if shared.plan.options.dry_run {
                std::time::Duration::ZERO
            } else {
                shared.plan.config.bake(wave)
            },
            commands: rx,
            shared: shared.clone(),
        };
        // error level: the span (and so the target name) is on every line that is logged at all.
        let span = tracing::error_span!("target", target = %name);
        let inner = tokio::spawn(executor.run().instrument(span));
        // A panic in the executor fails its target; the coordinator answers for it after.
        let task = tokio::spawn({
            let (run, events) = (run.clone(), shared.events.clone());
            async move {
                match inner.await {
                    Ok(result) => result,
                    Err(e) => {
                        internal_error(&mut *run.lock().await, &e.to_string());
                        let _ = events.send(Event::Failed {
                            target: id,
                            lock_lost: false,
                        });
                        None
                    }
                }
            }
        });
        self.runs.push(run);
        self.commands.push(tx);
        self.tasks.push(task);
        self.barriers.push((wave, barriers));
    }

    /// Sends a command to its executor. An executor that is gone (a panic in its task) is
    /// answered for: its target fails, and the coordinator ends or rolls it back itself.
    async fn dispatch(
        &mut self,
        command: Command,
        shared: &Shared,
        stages_run: &mut Vec<(u32, usize)>,
        follow: &mut Vec<Event>,
    ) {
        match command {
            Command::FleetStage { wave, targets } => {
                let done = stages_run.iter().filter(|(w, _)| *w == wave).count();
                let Some(&index) = targets
                    .first()
                    .and_then(|&t| self.barriers.get(t))
                    .and_then(|(_, b)| b.get(done))
                else {
                    return;
                };
                stages_run.push((wave, index));
                self.fleet_stage(index, targets, shared);
            }
            Command::RollBack { target, why } => {
                self.rolling_back.push(target);
                if let Err(e) = self.send(target, Command::RollBack { target, why }) {
                    let Command::RollBack { why, .. } = e else {
                        return;
                    };
                    self.stand_in(target, StandIn::RollBack(why), shared);
                }
            }
            Command::End { target, why } => {
                if let Err(e) = self.send(target, Command::End { target, why }) {
                    let Command::End { why, .. } = e else {
                        return;
                    };
                    self.stand_in(target, StandIn::End(why), shared);
                }
            }
            Command::Start(t) | Command::Stop(t) => {
                let start = matches!(command, Command::Start(_));
                if self.send(t, command).is_err() {
                    follow.push(if start {
                        Event::Failed {
                            target: t,
                            lock_lost: false,
                        }
                    } else {
                        Event::Stopped(t)
                    });
                }
            }
        }
    }

    fn send(&self, target: TargetId, command: Command) -> Result<(), Command> {
        match self.commands.get(target) {
            Some(tx) => tx.send(command).map_err(|e| e.0),
            None => Err(command),
        }
    }

    /// Does what a dead executor was told, in a task of its own.
    fn stand_in(&mut self, target: TargetId, what: StandIn, shared: &Shared) {
        let Some(run) = self.runs.get(target).cloned() else {
            return;
        };
        let shared = shared.clone();
        let task = tokio::spawn(async move {
            match what {
                StandIn::RollBack(why) => {
                    let result = obey_rollback(&shared, &run, why).await;
                    let ok = result.as_ref().is_none_or(|r| r.ok);
                    let _ = shared.events.send(Event::RollbackEnded { target, ok });
                    result
                }
                StandIn::End(why) => {
                    obey_end(&shared, &run, why).await;
                    None
                }
            }
        });
        if let Some(slot) = self.tasks.get_mut(target) {
            *slot = task;
        }
    }

    /// Runs a fleet stage once for `targets` in a task of its own; each target's result comes
    /// back as its event.
    fn fleet_stage(&mut self, index: usize, targets: Vec<TargetId>, shared: &Shared) {
        let Some(PipelineStage::Script(stage)) = shared.plan.config.pipeline.get(index).cloned()
        else {
            return;
        };
        let runs: Vec<(TargetId, Arc<Mutex<TargetRun>>)> = targets
            .iter()
            .filter_map(|&t| Some((t, self.runs.get(t)?.clone())))
            .collect();
        let shared = shared.clone();
        let span = tracing::error_span!("fleet", stage = %stage.name);
        let task = tokio::spawn(
            async move {
                let mut guards = Vec::new();
                for (_, run) in &runs {
                    guards.push(run.lock().await);
                }
                let mut members: Vec<&mut TargetRun> =
                    guards.iter_mut().map(|g| &mut **g).collect();
                crate::engine::scripts::fleet_stage(
                    &shared.plan,
                    &mut members,
                    &stage,
                    &shared.cancel,
                    &shared.progress,
                )
                .await;
                for ((t, _), run) in runs.iter().zip(&members) {
                    let event = match (run.done, run.report.outcome) {
                        (true, TargetOutcome::Cancelled) => Event::Stopped(*t),
                        (true, _) => Event::Failed {
                            target: *t,
                            lock_lost: false,
                        },
                        (false, _) => Event::StagePassed(*t),
                    };
                    let _ = shared.events.send(event);
                }
            }
            .instrument(span),
        );
        self.stages.push(task);
    }

    /// Waits for every executor; a panicked one's target says so. Returns the targets told
    /// to roll back, with their rollback's result.
    async fn join(&mut self) -> Vec<(TargetId, Option<RollbackResult>)> {
        for task in std::mem::take(&mut self.stages) {
            let _ = task.await;
        }
        let mut results = Vec::new();
        for (id, task) in std::mem::take(&mut self.tasks).into_iter().enumerate() {
            // The monitor above answered for a panic already.
            let result = task.await.ok().flatten();
            if self.rolling_back.contains(&id) {
                results.push((id, result));
            }
        }
        results
    }

    /// Every run, once every task that used one ended.
    async fn into_runs(self) -> Vec<TargetRun> {
        let mut runs = Vec::new();
        for run in self.runs {
            runs.push(match Arc::try_unwrap(run) {
                Ok(run) => run.into_inner(),
                // Not reached: every task holding it was joined. Take a copy's place.
                Err(shared) => {
                    let mut run = shared.lock().await;
                    let target = run.target.clone();
                    std::mem::replace(&mut *run, TargetRun::new(&target, Timestamp::now()))
                }
            });
        }
        runs
    }
}

/// What the coordinator does for a dead executor.
enum StandIn {
    RollBack(RollbackWhy),
    End(EndWhy),
}

/// A panic in a target's task fails that target, not the fleet.
fn internal_error(run: &mut TargetRun, what: &str) {
    let message = format!("internal error: {what}");
    run.report.failures.push(Failure {
        object: "rollguard".into(),
        reason: "InternalError".into(),
        message: message.clone(),
        ..Default::default()
    });
    run.report.outcome = TargetOutcome::Failed;
    run.report.message = Some(message);
}
