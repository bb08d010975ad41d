//! Every target's state machine and the failure policy, as one pure reducer: the fleet
//! coordinator feeds it one event at a time (a target changed something, became healthy,
//! baked, failed, stopped, finished its rollback; a signal) and sends the commands it returns
//! to the target executors (start, skip, stop, roll back, finish). No I/O and no clock: the
//! instant of an event comes with it, so every order of events, including the racy ones,
//! is a table test.
//!
//! The rules, in one place:
//! - Waves run in order: the targets of the lowest wave that is not over start, at most
//!   `concurrency` in flight over the fleet and `max_parallel` in the wave; a finished
//!   target's slot goes to the next queued one at once. A wave is over when every target of
//!   it is healthy and baked. A failure in a wave skips every later wave (no write there).
//! - `rollback-failed`: a failed target that changed something rolls back at once; the others
//!   go on. `none`: nothing rolls back. `rollback-if-all-fail`: failed targets wait for the
//!   last target; when every started target failed they all roll back.
//! - `rollback-all`: the first failure decides: queued targets are skipped, running ones are
//!   told to stop (and roll back once stopped if they changed something), healthy or baking
//!   ones roll back at once.
//! - Rollbacks run at once, at most `rollbacks_at_once` of them (what the memory budget
//!   holds: every target of most fleets); one past it waits for a rollback to end.
//! - A cancel stops everything; `on_cancel: rollback` rolls back what changed, `leave`
//!   keeps it. A target whose lock was lost belongs to another run: it is never rolled back.
//! - Healthy targets are finished (`deployed`, record written) when nothing can roll them
//!   back any more: when no target is queued, running or baking.

use std::fmt;

use jiff::Timestamp;

use crate::config::FailurePolicy;
use crate::report::TargetOutcome;

/// A target's index in the fleet (config order).
pub type TargetId = usize;

/// Where one target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for its wave or for a slot.
    Queued,
    /// Started: connecting, scripts, applying, waiting for the rollout.
    Running,
    /// Told to stop; the executor has not said it stopped yet.
    Stopping,
    /// Healthy; its wave's bake runs (pods still watched).
    Baking,
    /// Reached a fleet stage: waits (without a slot) for the rest of its wave.
    AtStage,
    /// Its wave's fleet stage runs.
    InStage,
    /// Healthy and baked; finished as `deployed` once nothing can roll it back.
    Healthy,
    /// Failed under `rollback-if-all-fail`: waits for the last target to decide.
    FailedPending,
    /// Its rollback waits for one of the others to end (`rollbacks_at_once`).
    RollbackQueued,
    /// Its rollback runs.
    RollingBack,
    /// Over, with its outcome.
    Ended(TargetOutcome),
}

impl Phase {
    /// Holds one of the fleet's slots (the concurrency bound).
    fn in_flight(self) -> bool {
        matches!(self, Phase::Running | Phase::Stopping | Phase::Baking)
    }
    /// Can still fail, or be told to stop.
    fn live(self) -> bool {
        matches!(
            self,
            Phase::Queued
                | Phase::Running
                | Phase::Stopping
                | Phase::Baking
                | Phase::AtStage
                | Phase::InStage
        )
    }
}

/// One target as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetState {
    pub name: String,
    pub wave: u32,
    pub phase: Phase,
    /// Something of the new revision reached the cluster (an object, or a script started):
    /// a rollback has something to undo.
    pub changed: bool,
    /// Why its rollback was decided, while it waits for its turn (`RollbackQueued`).
    pub rollback: Option<RollbackWhy>,
}

/// What happened, as the executors and the signal handler report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The target's first change of the new revision (an object written, a script started).
    Changed(TargetId),
    /// The target ran its part of the pipeline up to a fleet stage.
    Reached(TargetId),
    /// The fleet stage passed for this target: its next part of the pipeline may start.
    StagePassed(TargetId),
    /// The rollout is healthy and the pipeline done; the wave's bake starts (a bake of zero:
    /// `Baked` follows).
    Healthy(TargetId),
    /// The bake passed without a problem.
    Baked(TargetId),
    /// The target failed: apply error, fail-fast, timeout, a check during the bake, a
    /// script. `lock_lost`: another run holds its lock now.
    Failed { target: TargetId, lock_lost: bool },
    /// The executor stopped as it was told.
    Stopped(TargetId),
    /// The target's rollback ended.
    RollbackEnded { target: TargetId, ok: bool },
    /// SIGINT or SIGTERM.
    Cancel { signal: &'static str },
}

/// Why a target rolls back, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackWhy {
    /// It failed itself.
    Failed,
    /// Another target's failure under `rollback-all`.
    Policy { failed: String, at: Timestamp },
    /// `rollback-if-all-fail`, and every target failed.
    AllFailed,
    /// A signal, under `on_cancel: rollback`.
    Cancelled { signal: &'static str },
}

impl fmt::Display for RollbackWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackWhy::Failed => write!(f, "failed"),
            RollbackWhy::Policy { failed, at } => write!(
                f,
                "policy rollback-all: {failed} failed at {}",
                at.strftime("%H:%M:%S")
            ),
            RollbackWhy::AllFailed => write!(f, "policy rollback-if-all-fail: every target failed"),
            RollbackWhy::Cancelled { signal } => {
                write!(f, "cancelled by {signal} (on_cancel: rollback)")
            }
        }
    }
}

/// Why a target ends without being rolled back, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndWhy {
    /// Healthy, and nothing can roll it back any more.
    Deployed,
    /// Failed, and its policy does not roll it back (or there is nothing to undo).
    Failed,
    /// Never started, or stopped before it changed anything: another target failed.
    Policy { failed: String, at: Timestamp },
    /// Never started: an earlier wave failed.
    WaveFailed { wave: u32, failed: String },
    /// A signal stopped it (`on_cancel: leave`, or nothing to undo).
    Cancelled { signal: &'static str },
}

impl EndWhy {
    pub fn outcome(&self) -> TargetOutcome {
        match self {
            EndWhy::Deployed => TargetOutcome::Deployed,
            EndWhy::Failed => TargetOutcome::Failed,
            EndWhy::Policy { .. } | EndWhy::WaveFailed { .. } => TargetOutcome::Skipped,
            EndWhy::Cancelled { .. } => TargetOutcome::Cancelled,
        }
    }
}

impl fmt::Display for EndWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndWhy::Deployed => write!(f, "deployed"),
            EndWhy::Failed => write!(f, "failed"),
            EndWhy::Policy { failed, at } => write!(
                f,
                "not deployed: policy rollback-all: {failed} failed at {}",
                at.strftime("%H:%M:%S")
            ),
            EndWhy::WaveFailed { wave, failed } => {
                write!(f, "not deployed: wave {wave} failed ({failed})")
            }
            EndWhy::Cancelled { signal } => write!(f, "cancelled by {signal}"),
        }
    }
}

/// What the coordinator tells an executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the next part of the pipeline, up to the next fleet stage or the end (its lock is
    /// already held).
    Start(TargetId),
    /// Run the next fleet stage once for these targets (every live target of `wave`).
    FleetStage { wave: u32, targets: Vec<TargetId> },
    /// Stop applying or waiting; answer with `Stopped` (or `Failed`, if it failed first).
    Stop(TargetId),
    /// Roll back to the last good release; answer with `RollbackEnded`.
    RollBack { target: TargetId, why: RollbackWhy },
    /// The target is over: write its record with this outcome, release its lock.
    End { target: TargetId, why: EndWhy },
}

/// How the fleet runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub policy: FailurePolicy,
    /// `on_cancel: rollback`.
    pub rollback_on_cancel: bool,
    /// Targets in flight at once over the fleet.
    pub concurrency: usize,
    /// Targets in flight at once per wave, by wave number (absent: `concurrency`).
    pub max_parallel: Vec<(u32, usize)>,
    /// Rollbacks running at once (what the memory budget holds; not `concurrency`, which
    /// paces a rollout).
    pub rollbacks_at_once: usize,
}

/// The decision that stops the fleet's new starts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Halt {
    /// `rollback-all`: this target failed first.
    Policy {
        failed: String,
        at: Timestamp,
    },
    Cancelled {
        signal: &'static str,
    },
}

/// The fleet: every target's state machine and the run's settings.
#[derive(Debug, Clone)]
pub struct Fleet {
    settings: Settings,
    targets: Vec<TargetState>,
    halt: Option<Halt>,
    /// The first failure of a wave: later waves never start.
    failed_wave: Option<(u32, String)>,
}

impl Fleet {
    /// Every target queued. `targets`: (name, wave) in config order.
    pub fn new(settings: Settings, targets: Vec<(String, u32)>) -> Fleet {
        let targets = targets
            .into_iter()
            .map(|(name, wave)| TargetState {
                name,
                wave,
                phase: Phase::Queued,
                changed: false,
                rollback: None,
            })
            .collect();
        Fleet {
            settings,
            targets,
            halt: None,
            failed_wave: None,
        }
    }

    pub fn targets(&self) -> &[TargetState] {
        &self.targets
    }

    /// Every target ended.
    pub fn settled(&self) -> bool {
        self.targets
            .iter()
            .all(|t| matches!(t.phase, Phase::Ended(_)))
    }

    /// The first commands: the first wave's targets that fit the bounds.
    pub fn start(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        self.schedule(&mut out);
        out
    }

    /// One event in, the commands it calls for out. Events about a target that is already
    /// past the state they describe (a race with a command) are absorbed.
    pub fn handle(&mut self, event: Event, at: Timestamp) -> Vec<Command> {
        let mut out = Vec::new();
        match event {
            Event::Changed(t) => {
                if let Some(target) = self.targets.get_mut(t) {
                    target.changed = true;
                }
            }
            Event::Reached(t) => {
                if self.phase(t) == Some(Phase::Running) {
                    self.set(t, Phase::AtStage);
                }
            }
            Event::StagePassed(t) => {
                if self.phase(t) == Some(Phase::InStage) {
                    self.set(t, Phase::Queued);
                }
            }
            Event::Healthy(t) => self.healthy(t),
            Event::Baked(t) => {
                if self.phase(t) == Some(Phase::Baking) {
                    self.set(t, Phase::Healthy);
                }
            }
            Event::Failed { target, lock_lost } => self.failed(target, lock_lost, at, &mut out),
            Event::Stopped(t) => {
                if self.phase(t) == Some(Phase::Stopping) {
                    self.stopped(t, &mut out);
                }
            }
            Event::RollbackEnded { target, ok } => {
                if self.phase(target) == Some(Phase::RollingBack) {
                    let outcome = if ok {
                        TargetOutcome::RolledBack
                    } else {
                        TargetOutcome::RollbackFailed
                    };
                    self.set(target, Phase::Ended(outcome));
                }
            }
            Event::Cancel { signal } => self.cancel(signal, &mut out),
        }
        self.start_rollbacks(&mut out);
        self.schedule(&mut out);
        self.settle(&mut out);
        out
    }

    fn phase(&self, t: TargetId) -> Option<Phase> {
        self.targets.get(t).map(|target| target.phase)
    }

    fn set(&mut self, t: TargetId, phase: Phase) {
        if let Some(target) = self.targets.get_mut(t) {
            target.phase = phase;
        }
    }

    fn end(&mut self, t: TargetId, why: EndWhy, out: &mut Vec<Command>) {
        self.set(t, Phase::Ended(why.outcome()));
        out.push(Command::End { target: t, why });
    }

    /// Rolls `t` back now, or when a running rollback ends (`rollbacks_at_once`).
    fn roll_back(&mut self, t: TargetId, why: RollbackWhy, out: &mut Vec<Command>) {
        let running = self
            .targets
            .iter()
            .filter(|target| target.phase == Phase::RollingBack)
            .count();
        if running >= self.settings.rollbacks_at_once.max(1) {
            self.set(t, Phase::RollbackQueued);
            if let Some(target) = self.targets.get_mut(t) {
                target.rollback = Some(why);
            }
            return;
        }
        self.set(t, Phase::RollingBack);
        out.push(Command::RollBack { target: t, why });
    }

    /// The queued rollbacks that fit now, in config order.
    fn start_rollbacks(&mut self, out: &mut Vec<Command>) {
        for t in 0..self.targets.len() {
            if self.targets[t].phase != Phase::RollbackQueued {
                continue;
            }
            let Some(why) = self.targets[t].rollback.take() else {
                continue;
            };
            self.roll_back(t, why, out);
            if self.targets[t].phase == Phase::RollbackQueued {
                return;
            }
        }
    }

    /// A running target's rollout is healthy: its bake starts. One told to stop absorbs it
    /// (it answers `Stopped`).
    fn healthy(&mut self, t: TargetId) {
        if self.phase(t) == Some(Phase::Running) {
            self.set(t, Phase::Baking);
        }
    }

    /// Rolls back a target that changed something, else ends it.
    fn roll_back_or_end(
        &mut self,
        t: TargetId,
        rollback: RollbackWhy,
        end: EndWhy,
        out: &mut Vec<Command>,
    ) {
        if self.targets.get(t).is_some_and(|target| target.changed) {
            self.roll_back(t, rollback, out);
        } else {
            self.end(t, end, out);
        }
    }

    fn failed(&mut self, t: TargetId, lock_lost: bool, at: Timestamp, out: &mut Vec<Command>) {
        let Some(target) = self.targets.get(t).cloned() else {
            return;
        };
        if !matches!(
            target.phase,
            Phase::Running | Phase::Stopping | Phase::Baking | Phase::InStage
        ) {
            return;
        }
        if self.failed_wave.is_none() {
            self.failed_wave = Some((target.wave, target.name.clone()));
        }
        self.skip_later_waves(target.wave, out);
        if let Some(Halt::Cancelled { signal }) = self.halt {
            return self.cancel_one(t, signal, true, out);
        }
        match self.settings.policy {
            // Another run holds its lock now: its record and its rollback are not ours.
            _ if lock_lost => self.end(t, EndWhy::Failed, out),
            FailurePolicy::None => self.end(t, EndWhy::Failed, out),
            FailurePolicy::RollbackIfAllFail => self.set(t, Phase::FailedPending),
            FailurePolicy::RollbackFailed | FailurePolicy::RollbackAll => {
                self.roll_back_or_end(t, RollbackWhy::Failed, EndWhy::Failed, out)
            }
        }
        if self.settings.policy == FailurePolicy::RollbackAll && self.halt.is_none() {
            self.halt = Some(Halt::Policy {
                failed: target.name.clone(),
                at,
            });
            self.stop_others(out);
        }
    }

    /// `rollback-all` decided: every other live target stops, or rolls back at once when its
    /// rollout is already over.
    fn stop_others(&mut self, out: &mut Vec<Command>) {
        let Some(Halt::Policy { failed, at }) = self.halt.clone() else {
            return;
        };
        for t in 0..self.targets.len() {
            let rollback = RollbackWhy::Policy {
                failed: failed.clone(),
                at,
            };
            let end = EndWhy::Policy {
                failed: failed.clone(),
                at,
            };
            match self.targets[t].phase {
                Phase::Running => {
                    self.set(t, Phase::Stopping);
                    out.push(Command::Stop(t));
                }
                // Queued: never started, or between two parts of its pipeline.
                Phase::Queued | Phase::AtStage | Phase::Baking | Phase::Healthy => {
                    self.roll_back_or_end(t, rollback, end, out)
                }
                // A fleet stage in progress says how it ended for each of its targets.
                _ => {}
            }
        }
    }

    fn skip_later_waves(&mut self, wave: u32, out: &mut Vec<Command>) {
        let Some((_, failed)) = self.failed_wave.clone() else {
            return;
        };
        for t in 0..self.targets.len() {
            if self.targets[t].wave > wave && self.targets[t].phase == Phase::Queued {
                let why = EndWhy::WaveFailed {
                    wave,
                    failed: failed.clone(),
                };
                self.end(t, why, out);
            }
        }
    }

    fn stopped(&mut self, t: TargetId, out: &mut Vec<Command>) {
        match self.halt.clone() {
            Some(Halt::Policy { failed, at }) => self.roll_back_or_end(
                t,
                RollbackWhy::Policy {
                    failed: failed.clone(),
                    at,
                },
                EndWhy::Policy { failed, at },
                out,
            ),
            Some(Halt::Cancelled { signal }) => self.cancel_one(t, signal, false, out),
            // Only the two halts send Stop.
            None => self.end(t, EndWhy::Failed, out),
        }
    }

    fn cancel(&mut self, signal: &'static str, out: &mut Vec<Command>) {
        if matches!(self.halt, Some(Halt::Cancelled { .. })) {
            return;
        }
        self.halt = Some(Halt::Cancelled { signal });
        for t in 0..self.targets.len() {
            match self.targets[t].phase {
                Phase::Queued | Phase::AtStage | Phase::Healthy => {
                    self.cancel_one(t, signal, false, out)
                }
                Phase::Running | Phase::Baking => {
                    self.set(t, Phase::Stopping);
                    out.push(Command::Stop(t));
                }
                // The fleet stage sees the signal itself; its targets answer `Stopped`.
                Phase::InStage => self.set(t, Phase::Stopping),
                Phase::FailedPending => self.cancel_one(t, signal, true, out),
                _ => {}
            }
        }
    }

    /// A target that stopped, failed or was healthy when a signal came.
    fn cancel_one(
        &mut self,
        t: TargetId,
        signal: &'static str,
        failed: bool,
        out: &mut Vec<Command>,
    ) {
        let end = if failed {
            EndWhy::Failed
        } else if self.phase(t) == Some(Phase::Healthy) {
            EndWhy::Deployed
        } else {
            EndWhy::Cancelled { signal }
        };
        if self.settings.rollback_on_cancel {
            self.roll_back_or_end(t, RollbackWhy::Cancelled { signal }, end, out);
        } else {
            self.end(t, end, out);
        }
    }

    /// Starts queued targets of the current wave within the bounds.
    fn schedule(&mut self, out: &mut Vec<Command>) {
        if self.halt.is_some() {
            return;
        }
        // The current wave: the lowest with a target that is not healthy or over. Its
        // queued targets start; later waves wait for it.
        let Some(wave) = self
            .targets
            .iter()
            .filter(|t| !matches!(t.phase, Phase::Healthy | Phase::Ended(_)))
            .map(|t| t.wave)
            .min()
        else {
            return;
        };
        if self.failed_wave.as_ref().is_some_and(|(w, _)| *w < wave) {
            return;
        }
        if self.fleet_stage_due(wave, out) {
            return;
        }
        let max_parallel = self
            .settings
            .max_parallel
            .iter()
            .find(|(w, _)| *w == wave)
            .map_or(self.settings.concurrency, |(_, n)| *n);
        let mut fleet = self.targets.iter().filter(|t| t.phase.in_flight()).count();
        let mut in_wave = self
            .targets
            .iter()
            .filter(|t| t.wave == wave && t.phase.in_flight())
            .count();
        for t in 0..self.targets.len() {
            if fleet >= self.settings.concurrency.max(1) || in_wave >= max_parallel.max(1) {
                break;
            }
            if self.targets[t].wave == wave && self.targets[t].phase == Phase::Queued {
                self.set(t, Phase::Running);
                out.push(Command::Start(t));
                fleet += 1;
                in_wave += 1;
            }
        }
    }

    /// Every live target of `wave` reached its fleet stage: the stage runs once for them.
    fn fleet_stage_due(&mut self, wave: u32, out: &mut Vec<Command>) -> bool {
        let live: Vec<TargetId> = (0..self.targets.len())
            .filter(|&t| self.targets[t].wave == wave && self.targets[t].phase.live())
            .collect();
        if live.is_empty()
            || live
                .iter()
                .any(|&t| self.targets[t].phase != Phase::AtStage)
        {
            return false;
        }
        for &t in &live {
            self.set(t, Phase::InStage);
        }
        out.push(Command::FleetStage {
            wave,
            targets: live,
        });
        true
    }

    /// When nothing can fail any more: healthy targets are deployed, and
    /// `rollback-if-all-fail` decides its failed ones.
    fn settle(&mut self, out: &mut Vec<Command>) {
        if self.targets.iter().any(|t| t.phase.live()) {
            return;
        }
        let pending: Vec<TargetId> = (0..self.targets.len())
            .filter(|&t| self.targets[t].phase == Phase::FailedPending)
            .collect();
        if !pending.is_empty() {
            // Every target that started failed: none is healthy, deployed or rolled back.
            let all_failed = self.targets.iter().all(|t| {
                matches!(
                    t.phase,
                    Phase::FailedPending
                        | Phase::Ended(TargetOutcome::Failed | TargetOutcome::Skipped)
                )
            });
            for t in pending {
                if all_failed {
                    self.roll_back_or_end(t, RollbackWhy::AllFailed, EndWhy::Failed, out);
                } else {
                    self.end(t, EndWhy::Failed, out);
                }
            }
        }
        for t in 0..self.targets.len() {
            if self.targets[t].phase == Phase::Healthy {
                self.end(t, EndWhy::Deployed, out);
            }
        }
    }
}

#[cfg(test)]
mod tests;
