//! A deploy across the fleet: every target's preflight (no write), every lock in one global
//! order, every history; then the coordinator (`coordinator.rs`) runs the targets; the
//! results become one `Report`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{FailurePolicy, TargetConfig};
use crate::engine::coordinator::{Entrant, coordinate};
use crate::engine::plan::Plan;
use crate::engine::saved_plan::verify::ObjectMoved;
use crate::engine::saved_plan::{PlanStop, PlanToApply, plan_stop};
use crate::engine::target_run::{TargetRun, finish, may_change_nothing, preflight, stop_unlocked};
use crate::release::lock::{LockError, LockGuard, lock_key, lock_order};
use crate::release::session::{
    OpenHistory, PrepareError, ReleaseSettings, read_history, take_lock,
};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};
use crate::util::in_order::in_order;

/// Runs every target of the plan through the pipeline and returns their runs in config
/// order. First the preflight of every target (connect, discover the kinds), all before any
/// target writes; under `rollback-all` a target failing it stops the run there, the others
/// `skipped`: nothing was written, so the fleet stays on one version with nothing to roll
/// back. Then every target's lock is taken in the one global lock order ([`take_locks`]), so
/// nothing is written anywhere before all locks are held, and every history is read. Then
/// the coordinator runs the targets that go on (waves, the bound, the failure policy, fleet
/// stages, rollbacks, records).
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    run_targets_checked(plan, cancel, progress, None).await
}

/// A look at a target's history, read under its lock, before anything is written to any
/// target (a manual rollback's: the history still says what the person confirmed). Err: why
/// this target must not go on.
/// It may borrow what the caller holds (`'a`).
pub type HistoryCheck<'a> =
    dyn Fn(&TargetRun, &OpenHistory) -> Result<(), Box<Failure>> + Send + Sync + 'a;

/// [`run_targets`], with `check` run on every history once all are read: when it refuses
/// one, no target goes on (all or none, as the locks), every lock is released and each
/// target says why.
pub async fn run_targets_checked(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
    check: Option<&HistoryCheck<'_>>,
) -> Vec<TargetRun> {
    let mut checked = preflight_all(&plan, &cancel, &progress).await;
    // A dry run writes nothing, so nothing needs to stay on one version: every reachable
    // target is still planned.
    let stop = (!plan.options.dry_run)
        .then(|| preflight_stop(plan.config.on_failure, &checked))
        .flatten();
    if let Some(reason) = stop {
        for run in checked.iter_mut().filter(|r| !r.done) {
            run.report.message = Some(reason.clone());
            finish(run, &progress, TargetOutcome::Skipped);
        }
        return checked;
    }
    let locks = if plan.options.dry_run {
        checked.iter().map(|_| Ok(None)).collect()
    } else {
        for run in checked.iter_mut().filter(|r| !r.done) {
            run.clock.start("lock");
        }
        let locks = take_locks(&plan, &checked, &cancel).await;
        let mut locks = read_histories(&plan, &checked, locks).await;
        if let Some(refused) = check.and_then(|check| refused_histories(check, &checked, &locks)) {
            stop_all(&mut checked, locks, refused, &progress).await;
            return checked;
        }
        // With a saved plan, its check is the preflight (`deploy --plan`).
        if let Some(saved) = plan.options.saved_plan.clone() {
            if check_saved_plan(&plan, &saved, &mut checked, &mut locks, &cancel, &progress).await {
                return checked;
            }
        } else if plan.config.preflight
            && preflight_dry_run(&plan, &mut checked, &mut locks, false, &cancel, &progress).await
        {
            return checked;
        }
        locks
    };
    // One number for the whole run, above every target's history.
    let revision = crate::release::fleet_revision(
        &locks
            .iter()
            .filter_map(|l| l.as_ref().ok()?.as_ref().map(|(h, _)| h.revisions()))
            .collect::<Vec<_>>(),
    );
    let mut slots: Vec<Option<TargetRun>> = Vec::new();
    let mut entrants = Vec::new();
    let mut places = Vec::new();
    for (mut run, lock) in checked.into_iter().zip(locks) {
        if run.done {
            slots.push(Some(run));
            continue;
        }
        let history = match lock {
            Ok(Some((history, notes))) => {
                run.report.warnings.extend(notes);
                Some(history)
            }
            Ok(None) => None,
            Err(refusal) => {
                let LockRefusal {
                    outcome,
                    failure,
                    message,
                } = *refusal;
                stop_unlocked(&mut run, &progress, outcome, failure, message);
                slots.push(Some(run));
                continue;
            }
        };
        places.push(slots.len());
        slots.push(None);
        entrants.push(Entrant { run, history });
    }
    let ran = coordinate(&plan, entrants, revision, &cancel, &progress).await;
    for (place, run) in places.into_iter().zip(ran) {
        slots[place] = Some(run);
    }
    slots.into_iter().flatten().collect()
}

/// Under `rollback-all`, why the targets that passed the preflight do not start: the names
/// of the targets that failed it. None: every target passed, the run was cancelled (the
/// cancel path says so), or the policy lets the reachable targets go on.
pub fn preflight_stop(policy: FailurePolicy, checked: &[TargetRun]) -> Option<String> {
    if policy != FailurePolicy::RollbackAll
        || checked
            .iter()
            .any(|r| r.done && r.report.outcome == TargetOutcome::Cancelled)
    {
        return None;
    }
    let failed: Vec<&str> = checked
        .iter()
        .filter(|r| r.done && r.report.outcome == TargetOutcome::Failed)
        .map(|r| r.target.name.as_str())
        .collect();
    if failed.is_empty() {
        return None;
    }
    Some(format!(
        "not deployed: {} failed the preflight and on_failure is rollback-all (the fleet stays on one version); fix {} and run again",
        failed.join(", "),
        if failed.len() == 1 { "it" } else { "them" }
    ))
}

/// Which targets a check before the first write asks (those going on, with their lock held);
/// their clocks start the check's phase, their live lines say so.
fn start_asking(
    runs: &mut [TargetRun],
    locks: &[Result<Option<HeldHistory>, Box<LockRefusal>>],
    phase: &str,
    progress: &Progress,
) -> Vec<bool> {
    let asked: Vec<bool> = runs
        .iter()
        .zip(locks.iter())
        .map(|(run, lock)| !run.done && matches!(lock, Ok(Some(_))))
        .collect();
    for (run, _) in runs.iter_mut().zip(&asked).filter(|(_, a)| **a) {
        run.clock.start(phase);
        progress.update(&run.target.name, Stage::Preflight);
    }
    asked
}

/// The preflight dry run ([`crate::engine::preflight`]) of every target whose lock is held,
/// before the first write anywhere. True when it stopped the run: then every lock is given
/// back and every target that was going on says why it was not deployed (a refused one with
/// the server's message), whatever `on_failure` says, since nothing was written.
/// `compare_all`: every target's answers are compared with its live objects and kept (the
/// re-plan shows them); else only where the no-op check will read them.
async fn preflight_dry_run(
    plan: &Arc<Plan>,
    runs: &mut [TargetRun],
    locks: &mut [Result<Option<HeldHistory>, Box<LockRefusal>>],
    compare_all: bool,
    cancel: &CancellationToken,
    progress: &Progress,
) -> bool {
    use crate::engine::preflight::{Ask, Checked, dry_run_all, preflight_verdict, stopped_outcome};
    let asking = start_asking(runs, locks, "preflight", progress);
    // The live objects are read and compared only where something reads the answer: the
    // re-plan's display (`compare_all`), a target's no-op check. Elsewhere one dry-run apply
    // per object says what the server refuses.
    let asked: Vec<Ask> = runs
        .iter()
        .zip(locks.iter())
        .zip(&asking)
        .map(|((run, lock), asks)| match lock {
            _ if !asks => Ask::Nothing,
            Ok(Some(_)) if compare_all => Ask::Compare,
            Ok(Some((history, _))) if may_change_nothing(plan, run, history) => Ask::Compare,
            _ => Ask::Refusals,
        })
        .collect();
    let found = dry_run_all(plan, runs, &asked, cancel).await;
    let views: Vec<(&str, &Checked)> = runs
        .iter()
        .map(|r| r.target.name.as_str())
        .zip(found.iter())
        .collect();
    let Some(stop) = preflight_verdict(&views) else {
        for (run, checked) in runs.iter_mut().zip(found) {
            if let Checked::Passed(answer) = checked {
                run.clock.stop();
                run.preflight = answer.map(|a| *a);
            }
        }
        return false;
    };
    for lock in locks.iter_mut() {
        if let Ok(Some((history, _))) = std::mem::replace(lock, Ok(None)) {
            history.release().await;
        }
    }
    for (run, checked) in runs.iter_mut().zip(found) {
        if run.done {
            continue;
        }
        let outcome = stopped_outcome(&stop, &checked);
        if let Checked::Refused(failures) = checked {
            run.refused_in_preflight = failures
                .iter()
                .any(|f| crate::engine::preflight::is_refusal(&f.reason));
            // The server's message, said once on each stream (the live line, the table).
            let headline = failures.first().map(Failure::headline).unwrap_or_default();
            run.report.message = Some(format!("{}: {headline}", stop.refused_message));
            run.report.failures = failures;
        } else {
            run.report.message = Some(stop.message.clone());
        }
        finish(run, progress, outcome);
    }
    true
}

/// The saved plan's check (`deploy --plan`), with every lock held and before the first write
/// anywhere: on every target that goes on, each object would get the plan's body and its
/// live object is as the plan saw it. True when it stopped the run (every lock given back,
/// every target saying why). With `--replan`, a plan that moved is replaced by the
/// preflight dry run's answers, shown, and applied once confirmed.
async fn check_saved_plan(
    plan: &Arc<Plan>,
    saved: &PlanToApply,
    runs: &mut [TargetRun],
    locks: &mut [Result<Option<HeldHistory>, Box<LockRefusal>>],
    cancel: &CancellationToken,
    progress: &Progress,
) -> bool {
    let asked = start_asking(runs, locks, "plan check", progress);
    // Each target's history head as read under its lock.
    let heads: Vec<Option<u64>> = locks
        .iter()
        .map(|l| match l {
            Ok(Some((history, _))) => history.revisions().into_iter().max(),
            _ => None,
        })
        .collect();
    let checks = runs
        .iter()
        .zip(&asked)
        .zip(heads)
        .map(|((run, &asked), head)| async move {
            if !asked {
                return Vec::new();
            }
            moved_since_plan(plan, saved, run, head, cancel).await
        });
    let found: Vec<Vec<ObjectMoved>> = in_order(checks.collect(), plan.config.concurrency).await;
    for (run, _) in runs.iter_mut().zip(&asked).filter(|(_, a)| **a) {
        run.clock.stop();
    }
    let views: Vec<(&str, Vec<String>)> = runs
        .iter()
        .zip(&found)
        .map(|(r, f)| {
            (
                r.target.name.as_str(),
                f.iter().map(|m| m.to_string()).collect(),
            )
        })
        .collect();
    let hint = if saved.replan {
        "the re-plan was not confirmed: pass --yes to apply it"
    } else {
        "make the plan again (`rollguard diff --out`), or pass --replan to see the new diff and apply it"
    };
    let Some(stop) = plan_stop(&views, hint) else {
        return false;
    };
    if saved.replan {
        for (name, moved) in &views {
            for m in moved {
                crate::report::redact::print_err(&format!("rollguard: {name}: {m}"));
            }
        }
        if preflight_dry_run(plan, runs, locks, true, cancel, progress).await {
            return true;
        }
        say_new_plan(plan, runs);
        if confirm_replan(saved.yes).await {
            for (run, moved) in runs.iter_mut().zip(&found).filter(|(r, _)| !r.done) {
                run.replanned = true;
                if !moved.is_empty() {
                    run.report.warnings.push(format!(
                        "re-planned: the plan no longer held ({}); applied the new plan",
                        moved[0]
                    ));
                }
            }
            return false;
        }
    }
    stop_for_plan(runs, locks, &stop, found, progress).await;
    true
}

/// How one target's objects moved since the plan (empty: the plan holds there).
async fn moved_since_plan(
    plan: &Plan,
    saved: &PlanToApply,
    run: &TargetRun,
    head: Option<u64>,
    cancel: &CancellationToken,
) -> Vec<ObjectMoved> {
    use crate::engine::saved_plan::check::{Place, objects_now};
    use crate::engine::saved_plan::verify::objects_moved;
    let (Some(access), Some(resolution)) = (run.access.as_ref(), run.resolution()) else {
        return Vec::new();
    };
    let name = &run.target.name;
    let Some(part) = saved.plan.target(name) else {
        return vec![ObjectMoved::NotPlanned {
            object: format!("target {name}"),
            origin: "the plan has no part for it".into(),
        }];
    };
    let default_namespace = plan
        .config
        .default_namespace(&run.target, &access.context_namespace);
    let now = objects_now(
        &access.client,
        plan.manifests_for(name),
        resolution,
        Place {
            default_namespace: &default_namespace,
            field_manager: &crate::cluster::apply::field_manager(&plan.config.app),
        },
        tokio::time::Instant::now() + plan.config.wait.timeout,
        &plan.in_flight(),
        cancel,
    )
    .instrument(tracing::error_span!("target", target = %name))
    .await;
    let mut moved = objects_moved(&part.objects, &now);
    // A plan that names the revision it would record also holds each history's head.
    if saved.plan.revision.is_some()
        && let Some(m) =
            crate::engine::saved_plan::verify::history_moved(name, part.history_head, head)
    {
        moved.insert(0, m);
    }
    moved
}

/// The re-plan's diff, on stderr (the preflight dry run's answers).
fn say_new_plan(plan: &Plan, runs: &[TargetRun]) {
    use crate::report::plan::{ChangePlan, PlanMode, to_text};
    let targets = runs.iter().filter_map(|r| r.preflight.clone()).collect();
    let new_plan = ChangePlan::new(
        plan.config.app.clone(),
        PlanMode::DryRun,
        plan.commit.clone(),
        targets,
    );
    let text = to_text(
        &crate::report::Clean::new(&new_plan),
        crate::report::diff::DiffStyle::plain(),
        false,
    );
    crate::report::redact::print_err(&format!("rollguard: the new plan:\n{}", text.trim_end()));
}

/// Whether the re-plan goes on: `--yes`, else a person's "y" on a terminal.
async fn confirm_replan(yes: bool) -> bool {
    use std::io::IsTerminal;
    if yes {
        return true;
    }
    if !std::io::stdin().is_terminal() {
        crate::report::redact::print_err(
            "rollguard: --replan without --yes and no terminal to confirm: not applying the new plan",
        );
        return false;
    }
    let answer = tokio::task::spawn_blocking(|| {
        eprint!("rollguard: apply the new plan? [y/N] ");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    matches!(answer, Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes"))
}

/// Stops every run because the plan no longer holds: every lock given back, each moved
/// target failed with what moved, every other target skipped naming them.
async fn stop_for_plan(
    runs: &mut [TargetRun],
    locks: &mut [Result<Option<HeldHistory>, Box<LockRefusal>>],
    stop: &PlanStop,
    found: Vec<Vec<ObjectMoved>>,
    progress: &Progress,
) {
    for lock in locks.iter_mut() {
        if let Ok(Some((history, _))) = std::mem::replace(lock, Ok(None)) {
            history.release().await;
        }
    }
    for (run, moved) in runs.iter_mut().zip(found) {
        if run.done {
            continue;
        }
        let said = stop.moved.iter().find(|(n, _)| *n == run.target.name);
        let Some((_, message)) = said else {
            run.report.message = Some(stop.others.clone());
            finish(run, progress, TargetOutcome::Skipped);
            continue;
        };
        run.report.message = Some(message.clone());
        run.plan_moved = moved.iter().map(ToString::to_string).collect();
        run.report.failures = moved
            .iter()
            .map(|m| Failure {
                object: m.object().to_string(),
                reason: "ChangedSincePlan".into(),
                message: m.to_string(),
                ..Default::default()
            })
            .collect();
        finish(run, progress, TargetOutcome::Failed);
    }
}

type TargetTask = std::pin::Pin<Box<dyn std::future::Future<Output = TargetRun> + Send>>;

/// The preflight of every target at once (connect, discover: no write); a run that failed
/// there is `done`.
async fn preflight_all(
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
                preflight(&plan, &target, &cancel, &progress).await
            });
            (name, task)
        })
        .collect();
    run_all(tasks, plan.config.concurrency.max(1), progress).await
}

/// A lock taken, with the notes for the report (a lease taken over).
type HeldLock = (LockGuard, Vec<String>);

/// A target's history read with its lock held, with the notes for the report.
type HeldHistory = (OpenHistory, Vec<String>);

/// With every lock held: each locked target's history, all at once (records a dead run left
/// are repaired on the way), so that the run's revision can be above all of them. A target
/// whose history cannot be read gives its lock back and fails.
async fn read_histories(
    plan: &Plan,
    runs: &[TargetRun],
    locks: Vec<Result<Option<HeldLock>, Box<LockRefusal>>>,
) -> Vec<Result<Option<HeldHistory>, Box<LockRefusal>>> {
    let reads = runs.iter().zip(locks).map(|(run, lock)| async move {
        let Some((guard, mut notes)) = lock? else {
            return Ok(None);
        };
        let Some(access) = run.access.as_ref() else {
            let _ = guard.release().await;
            return Ok(None);
        };
        let span = tracing::error_span!("target", target = %run.target.name);
        match read_history(&plan.config, &run.target, access, guard)
            .instrument(span)
            .await
        {
            Ok(mut history) => {
                notes.append(&mut history.notes);
                Ok(Some((history, notes)))
            }
            Err(e) => {
                tracing::info!("{e}");
                Err(Box::new(LockRefusal {
                    outcome: TargetOutcome::Failed,
                    failure: Some(e.failure(&access.server)),
                    message: None,
                }))
            }
        }
    });
    futures::future::join_all(reads).await
}

/// Each run's refusal by `check` (None: not refused, or no history to look at); None when
/// no history was refused.
fn refused_histories(
    check: &HistoryCheck<'_>,
    runs: &[TargetRun],
    histories: &[Result<Option<HeldHistory>, Box<LockRefusal>>],
) -> Option<Vec<Option<Failure>>> {
    let refused: Vec<Option<Failure>> = runs
        .iter()
        .zip(histories)
        .map(|(run, held)| match held {
            Ok(Some((history, _))) if !run.done => check(run, history).err().map(|f| *f),
            _ => None,
        })
        .collect();
    refused.iter().any(Option::is_some).then_some(refused)
}

/// Stops every run before any write because `refused` (by run) turned some history down:
/// every held lock released, a refused target failed with its failure, a refused lock said
/// as the coordinator says it, every other target skipped naming the refused ones.
async fn stop_all(
    runs: &mut [TargetRun],
    histories: Vec<Result<Option<HeldHistory>, Box<LockRefusal>>>,
    refused: Vec<Option<Failure>>,
    progress: &Progress,
) {
    let names: Vec<&str> = runs
        .iter()
        .zip(&refused)
        .filter(|(_, r)| r.is_some())
        .map(|(run, _)| run.target.name.as_str())
        .collect();
    let because = format!(
        "not started: {} refused before anything was written, so no target goes on",
        names.join(", ")
    );
    for ((run, held), refusal) in runs.iter_mut().zip(histories).zip(refused) {
        match held {
            Ok(Some((history, _))) => history.release().await,
            Ok(None) => {}
            Err(lock) => {
                if !run.done {
                    let LockRefusal {
                        outcome,
                        failure,
                        message,
                    } = *lock;
                    stop_unlocked(run, progress, outcome, failure, message);
                }
                continue;
            }
        }
        if run.done {
            continue;
        }
        match refusal {
            Some(failure) => {
                stop_unlocked(run, progress, TargetOutcome::Failed, Some(failure), None)
            }
            None => stop_unlocked(
                run,
                progress,
                TargetOutcome::Skipped,
                None,
                Some(because.clone()),
            ),
        }
    }
}

/// Why a reached target does not go on to deploy.
pub struct LockRefusal {
    outcome: TargetOutcome,
    failure: Option<Failure>,
    message: Option<String>,
}

/// Takes the lock of every reached target before anything is written anywhere, within one
/// lock timeout, in two passes. First every Lease is tried at once, waiting for none (a
/// fleet of 50 clusters takes its locks in one round trip, not 50). If one is held by
/// another run, the locks after the first held one in the one global order ([`lock_order`]:
/// by cluster server, then namespace) are given back, and from there the Leases are taken
/// one at a time in that order, waiting for each. So a run waits for a Lease only while
/// holding Leases earlier in that order, which the holder, having passed them, never waits
/// for (the first pass waits for nothing): two runs over the same clusters can never wait
/// for each other in a cycle (the deadlock in which both timed out and rolled back). When
/// one lock cannot be taken, for whatever reason, the run deploys nothing ([`lock_stop`]):
/// it releases what it holds and every target reports why, so a run never leaves the fleet
/// split nor rolls back targets another run is deploying.
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
    let keys = lock_keys(plan, reached, &candidates);
    let timeout = ReleaseSettings::from_config(&plan.config).lock_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let env = |k: &str| plan.env(k);
    let attempt = |position: usize, wait: Duration| {
        let run = &reached[candidates[position]];
        let span = tracing::error_span!("target", target = %run.target.name);
        let env = &env;
        async move {
            let Some(access) = run.access.as_ref() else {
                return Err(PrepareError::Cancelled);
            };
            take_lock(&plan.config, &run.target, access, wait, env, cancel)
                .instrument(span)
                .await
        }
    };

    let to_take = refuse_shared_leases(plan, reached, &candidates, &keys, &mut locks);

    // First pass: all at once, waiting for none.
    let mut taken: Vec<(usize, Option<Result<HeldLock, PrepareError>>)> =
        futures::future::join_all(to_take.iter().map(|&position| async move {
            (position, Some(attempt(position, Duration::ZERO).await))
        }))
        .await;
    let busy = |t: &Option<Result<HeldLock, PrepareError>>| {
        matches!(t, Some(Err(PrepareError::Lock(LockError::Timeout { .. }))))
    };
    // A lock that failed for any other reason (a 403, a timeout, 5xx past the retries, two
    // targets on one Lease) stops the run here: waiting for the busy ones would gain nothing.
    let mut stopped = locks.iter().any(Option::is_some)
        || taken
            .iter()
            .any(|(_, t)| matches!(t, Some(Err(_))) && !busy(t));
    if let Some(first_busy) = taken.iter().position(|(_, t)| busy(t)) {
        give_back(&mut taken[first_busy..]).await;
    }

    // Second pass (only after a held Lease): one at a time in the order, waiting for each,
    // until one fails.
    for (position, slot) in taken {
        let i = candidates[position];
        let result = match slot {
            Some(result) => result,
            // Left untried: the verdict below says why.
            None if stopped => continue,
            None => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                attempt(position, left).await
            }
        };
        stopped |= result.is_err();
        let server = reached[i].access.as_ref().map(|a| a.server.as_str());
        locks[i] = Some(lock_entry(result, server.unwrap_or_default()));
    }
    settle_locks(reached, &candidates, &mut locks).await;
    locks
        .into_iter()
        .map(|slot| slot.unwrap_or(Ok(None)))
        .collect()
}

/// The Lease each candidate's lock is: (server, history namespace).
fn lock_keys(plan: &Plan, reached: &[TargetRun], candidates: &[usize]) -> Vec<(String, String)> {
    candidates
        .iter()
        .filter_map(|i| {
            let run = &reached[*i];
            let access = run.access.as_ref()?;
            let namespace = plan
                .config
                .history_namespace(&run.target, &access.context_namespace);
            Some(lock_key(&access.server, &namespace))
        })
        .collect()
}

/// Refuses (in `locks`) every candidate whose Lease an earlier one in the lock order also
/// takes; returns the positions (in `candidates`) left to take, in that order. Validation
/// refuses two targets on one Lease; a kubeconfig read differently at run time must still
/// not make a run wait for its own Lease.
fn refuse_shared_leases(
    plan: &Plan,
    reached: &[TargetRun],
    candidates: &[usize],
    keys: &[(String, String)],
    locks: &mut [Option<Result<Option<HeldLock>, Box<LockRefusal>>>],
) -> Vec<usize> {
    let order = lock_order(keys);
    let mut to_take = Vec::new();
    for (n, &position) in order.iter().enumerate() {
        let i = candidates[position];
        match n
            .checked_sub(1)
            .map(|m| order[m])
            .filter(|p| keys[*p] == keys[position])
        {
            Some(before) => {
                let e = LockError::SameLease {
                    first: reached[candidates[before]].target.name.clone(),
                    second: reached[i].target.name.clone(),
                    lease: crate::release::lock::lease_name(&plan.config.app),
                    namespace: keys[position].1.clone(),
                    server: reached[i]
                        .access
                        .as_ref()
                        .map(|a| a.server.clone())
                        .unwrap_or_default(),
                };
                let server = reached[i].access.as_ref().map(|a| a.server.as_str());
                locks[i] = Some(Err(Box::new(LockRefusal {
                    outcome: TargetOutcome::Failed,
                    failure: Some(PrepareError::Lock(e).failure(server.unwrap_or_default())),
                    message: None,
                })));
            }
            None => to_take.push(position),
        }
    }
    to_take
}

/// Gives back the locks held in `taken` (what comes after the first held Lease), to take them
/// again in order; keeps the failures other than a held Lease.
async fn give_back(taken: &mut [(usize, Option<Result<HeldLock, PrepareError>>)]) {
    for (_, slot) in taken {
        match slot.take() {
            Some(Ok((guard, _))) => {
                let _ = guard.release().await;
            }
            Some(Err(PrepareError::Lock(LockError::Timeout { .. }))) | None => {}
            other => *slot = other,
        }
    }
}

/// A lock attempt as the run keeps it: the lock held, or why not.
fn lock_entry(
    result: Result<HeldLock, PrepareError>,
    server: &str,
) -> Result<Option<HeldLock>, Box<LockRefusal>> {
    match result {
        Ok(held) => Ok(Some(held)),
        Err(PrepareError::Cancelled) => Err(Box::new(LockRefusal {
            outcome: TargetOutcome::Cancelled,
            failure: None,
            message: Some("cancelled while waiting for its lock".into()),
        })),
        Err(e) => {
            tracing::info!("{e}");
            Err(Box::new(LockRefusal {
                outcome: TargetOutcome::Failed,
                failure: Some(e.failure(server)),
                message: None,
            }))
        }
    }
}

/// Applies [`lock_stop`] to the candidates' locks: when the run cannot take every lock it
/// writes nowhere, so the locks it holds go back (for the other run) and every candidate
/// whose own lock did not fail says why it did not start.
async fn settle_locks(
    reached: &[TargetRun],
    candidates: &[usize],
    locks: &mut [Option<Result<Option<HeldLock>, Box<LockRefusal>>>],
) {
    let attempts: Vec<(&str, LockAttempt)> = candidates
        .iter()
        .map(|&i| {
            let attempt = match &locks[i] {
                Some(Ok(_)) => LockAttempt::Held,
                Some(Err(r)) if r.outcome == TargetOutcome::Cancelled => LockAttempt::Cancelled,
                Some(Err(r)) => LockAttempt::Failed {
                    reason: r
                        .failure
                        .as_ref()
                        .map_or_else(|| "LockError".to_string(), |f| f.reason.clone()),
                },
                None => LockAttempt::Untried,
            };
            (reached[i].target.name.as_str(), attempt)
        })
        .collect();
    let Some((outcome, why)) = lock_stop(&attempts) else {
        return;
    };
    for (&i, (_, attempt)) in candidates.iter().zip(&attempts) {
        if matches!(attempt, LockAttempt::Failed { .. }) {
            continue;
        }
        if let Some(Ok(Some((guard, _)))) = locks[i].take() {
            let _ = guard.release().await;
        }
        locks[i] = Some(Err(Box::new(LockRefusal {
            outcome,
            failure: None,
            message: Some(why.clone()),
        })));
    }
}

/// How one target's lock attempt ended, for [`lock_stop`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    Held,
    /// Its failure's reason (`Forbidden`, `LockTimeout`, ...); the target says it in full.
    Failed {
        reason: String,
    },
    Cancelled,
    /// Not tried (or given back untried) because the run had stopped taking locks.
    Untried,
}

/// Whether a run that tried its targets' locks stops before its first write, and then the
/// outcome and message of every target whose own lock did not fail. None: every lock is
/// held. A run writes nothing until it holds every lock, whatever made one fail, so that it
/// never leaves the fleet split (a failed lock under `rollback-failed` once let the others
/// deploy) and never rolls back targets another run is deploying.
pub fn lock_stop(attempts: &[(&str, LockAttempt)]) -> Option<(TargetOutcome, String)> {
    if attempts.iter().all(|(_, a)| *a == LockAttempt::Held) {
        return None;
    }
    if attempts.iter().any(|(_, a)| *a == LockAttempt::Cancelled) {
        return Some((
            TargetOutcome::Cancelled,
            "cancelled while waiting for the locks".into(),
        ));
    }
    let mut names = Vec::new();
    let mut reasons: Vec<&str> = Vec::new();
    for (name, attempt) in attempts {
        if let LockAttempt::Failed { reason } = attempt {
            names.push(*name);
            if !reasons.contains(&reason.as_str()) {
                reasons.push(reason);
            }
        }
    }
    let (lock, it) = match names.len() {
        0 => {
            return Some((
                TargetOutcome::Skipped,
                "not started: not every target's lock was taken, and a run writes nothing before it holds them all; run again".into(),
            ));
        }
        1 => (format!("the lock of target {}", names[0]), "it"),
        _ => (format!("the locks of targets {}", names.join(", ")), "them"),
    };
    Some((
        TargetOutcome::Skipped,
        format!(
            "not started: {lock} could not be taken ({}: see {it} for why); a run takes every target's lock before its first write, so nothing was written anywhere: fix {it} and run again",
            reasons.join(", ")
        ),
    ))
}

/// Runs one task per target, at most `concurrency` at once, each in its own tokio task inside
/// the span `target=<name>`; results in the order given. The bound is a bound, not batches:
/// a target that ends gives its slot to the next one at once, whatever the targets before it
/// are still doing (an ordered `buffered` would hold the slot of every finished target until
/// the slowest one before it ended).
async fn run_all(
    tasks: Vec<(String, TargetTask)>,
    concurrency: usize,
    progress: &Progress,
) -> Vec<TargetRun> {
    let mut done: Vec<(usize, TargetRun)> = futures::stream::iter(tasks.into_iter().enumerate())
        .map(|(index, (name, task))| {
            // error level: the span (and so the target name) is on every line that is logged at all.
            let span = tracing::error_span!("target", target = %name);
            let handle = tokio::spawn(task.instrument(span));
            let progress = progress.clone();
            async move {
                let run = match handle.await {
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
                            ..Default::default()
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
                };
                (index, run)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, run)| run).collect()
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
    let change_plan = plan.options.dry_run.then(|| dry_run_plan(&plan, &mut runs));
    let refused_in_preflight = runs.iter().any(|r| r.refused_in_preflight);
    let saved_plan = plan
        .options
        .saved_plan
        .as_ref()
        .map(|saved| crate::report::SavedPlanUse {
            digest: saved.digest.clone(),
            made_at: saved.plan.made_at,
            pr: saved.plan.pr,
            replanned: runs.iter().any(|r| r.replanned),
            mismatches: runs.iter().flat_map(|r| r.plan_moved.clone()).collect(),
        });
    let targets: Vec<TargetReport> = runs.into_iter().map(|r| r.report).collect();
    let mut report = build_report(&plan, targets, started_at);
    report.refused_in_preflight = refused_in_preflight;
    report.saved_plan = saved_plan;
    if change_plan.is_some() {
        report.plan = change_plan;
        report.refresh();
    }
    report
}

/// A dry run's plan: every target's answer; a target that stopped before it was asked
/// (unreachable, a kind it does not serve, a script) is an error with its failures.
fn dry_run_plan(plan: &Plan, runs: &mut [TargetRun]) -> crate::report::ChangePlan {
    use crate::report::plan::{PlanMode, TargetPlan};
    let targets = runs
        .iter_mut()
        .map(|run| {
            let mut target = run
                .plan
                .take()
                .unwrap_or_else(|| TargetPlan::new(run.report.name.clone()));
            if target.errors.is_empty() && run.report.outcome != TargetOutcome::Deployed {
                target.errors = run.report.failures.clone();
                if target.errors.is_empty() {
                    target.errors.push(Failure {
                        object: "target".into(),
                        reason: run.report.outcome.as_str().to_string(),
                        message: run.report.reason().unwrap_or_default(),
                        ..Default::default()
                    });
                }
            }
            target
        })
        .collect();
    crate::report::ChangePlan::new(
        plan.config.app.clone(),
        PlanMode::DryRun,
        plan.commit.clone(),
        targets,
    )
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
    report.concurrency = Some(plan.concurrency.clone());
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, outcome: Option<TargetOutcome>) -> TargetRun {
        let target = TargetConfig {
            name: name.to_string(),
            ..Default::default()
        };
        match outcome {
            Some(outcome) => skipped(&target, outcome, "x"),
            None => TargetRun::new(&target, Timestamp::now()),
        }
    }

    #[test]
    fn a_run_starts_only_with_every_lock_held() {
        use LockAttempt::{Cancelled, Held, Untried};
        let failed = |reason: &str| LockAttempt::Failed {
            reason: reason.to_string(),
        };
        // (attempts, outcome of the others, what their message says)
        type Case<'a> = (
            Vec<(&'a str, LockAttempt)>,
            Option<(TargetOutcome, &'a str)>,
        );
        let cases: Vec<Case> = vec![
            (vec![("eu", Held), ("us", Held)], None),
            (vec![], None),
            (
                vec![("eu", Held), ("us", failed("Forbidden")), ("ap", Held)],
                Some((
                    TargetOutcome::Skipped,
                    "not started: the lock of target us could not be taken (Forbidden: see it for why)",
                )),
            ),
            (
                vec![("eu", failed("LockTimeout")), ("us", Untried)],
                Some((
                    TargetOutcome::Skipped,
                    "the lock of target eu could not be taken",
                )),
            ),
            (
                vec![
                    ("eu", failed("Timeout")),
                    ("us", failed("Forbidden")),
                    ("ap", failed("Forbidden")),
                    ("sa", Held),
                ],
                Some((
                    TargetOutcome::Skipped,
                    "the locks of targets eu, us, ap could not be taken (Timeout, Forbidden: see them",
                )),
            ),
            (
                vec![("eu", Held), ("us", Cancelled), ("ap", failed("Forbidden"))],
                Some((
                    TargetOutcome::Cancelled,
                    "cancelled while waiting for the locks",
                )),
            ),
            (
                vec![("eu", Held), ("us", Untried)],
                Some((TargetOutcome::Skipped, "not every target's lock was taken")),
            ),
        ];
        for (attempts, want) in cases {
            let got = lock_stop(&attempts);
            match (want, &got) {
                (None, None) => {}
                (Some((outcome, part)), Some((got_outcome, message))) => {
                    assert_eq!(*got_outcome, outcome, "{attempts:?}");
                    assert!(message.contains(part), "{attempts:?}: {message}");
                    if outcome == TargetOutcome::Skipped {
                        assert!(message.contains("run again"), "{message}");
                    }
                }
                _ => panic!("{attempts:?}: got {got:?}"),
            }
        }
    }

    #[test]
    fn preflight_stops_only_rollback_all_on_a_failure() {
        use FailurePolicy::{RollbackAll, RollbackFailed, RollbackIfAllFail};
        let ok = |n| run(n, None);
        let failed = |n| run(n, Some(TargetOutcome::Failed));
        let cancelled = |n| run(n, Some(TargetOutcome::Cancelled));
        let cases: Vec<(FailurePolicy, Vec<TargetRun>, Option<&str>)> = vec![
            (RollbackAll, vec![ok("eu"), ok("us"), ok("ap")], None),
            (
                RollbackAll,
                vec![ok("eu"), failed("us"), ok("ap")],
                Some("us failed"),
            ),
            (
                RollbackAll,
                vec![failed("eu"), failed("us"), ok("ap")],
                Some("eu, us failed"),
            ),
            (
                RollbackAll,
                vec![ok("eu"), failed("us"), cancelled("ap")],
                None,
            ),
            (RollbackFailed, vec![ok("eu"), failed("us"), ok("ap")], None),
            (
                RollbackIfAllFail,
                vec![ok("eu"), failed("us"), ok("ap")],
                None,
            ),
            (
                FailurePolicy::None,
                vec![ok("eu"), failed("us"), ok("ap")],
                None,
            ),
        ];
        for (policy, checked, want) in cases {
            let got = preflight_stop(policy, &checked);
            match want {
                Some(part) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(part)),
                    "{policy:?}: {got:?}"
                ),
                None => assert_eq!(got, None, "{policy:?}"),
            }
        }
    }
}
