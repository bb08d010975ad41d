//! One target: connect -> discover/validate ([`preflight`], no write); then, once the
//! fleet took every target's lock in its one global order, record + its stages of the
//! pipeline (apply + wait, target scripts) ([`deploy_target`]), into a `TargetReport`. Fleet
//! stages, which every target reaches first, are run by `fleet.rs` between calls of
//! [`run_stages`].

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::{
    AppliedObject, ApplyError, ApplyOptions, Resolution, apply_failures, apply_resolved,
    field_manager, resolve_set,
};
use crate::cluster::connect::{ClusterAccess, connect, target_failure};
use crate::cluster::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::config::{PipelineStage, ScriptStage, TargetConfig};
use crate::engine::plan::Plan;
use crate::release::ReleaseRecord;
use crate::release::session::{OpenHistory, PrepareError, TargetRelease, begin_record};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, PhaseTiming, TargetOutcome, TargetReport};
use crate::report::{StageOutcome, StageResult};
use crate::stages::env::{Deployment, RollbackReason};
use crate::stages::{self, Which, plan as decide};

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
    /// A dry run's answer: what the apply stage would change on this target.
    pub plan: Option<crate::report::plan::TargetPlan>,
    /// The deploy changes nothing here: no record, only `always` stages run.
    pub unchanged: Option<Unchanged>,
    /// Why the target rolls back, once that is decided.
    pub rollback_reason: Option<RollbackReason>,
    /// The preflight dry run's answer (`engine::preflight`), when it ran and passed: what
    /// the apply will change, which the no-op check reuses instead of asking again.
    pub preflight: Option<crate::report::plan::TargetPlan>,
    /// The server refused an object of the set in the preflight dry run (exit 2).
    pub refused_in_preflight: bool,
    /// `deploy --plan`: how this target's objects moved since the plan (the run stopped).
    pub plan_moved: Vec<String>,
    /// `deploy --plan --replan`: the plan no longer held and the new one was applied.
    pub replanned: bool,
}

/// A target on which the deploy changes nothing.
pub struct Unchanged {
    /// The last good release, whose manifests are this deploy's and which the cluster runs.
    pub last_good: ReleaseRecord,
    /// The target's lock, held until the run ends (its `always` stages run under it).
    pub history: Option<OpenHistory>,
}

impl TargetRun {
    /// A run of `target` that has done nothing yet.
    pub fn new(target: &TargetConfig, at: Timestamp) -> TargetRun {
        let mut report = TargetReport::new(target.name.clone(), TargetOutcome::Failed, at);
        report.wave = target.wave;
        TargetRun {
            report,
            access: None,
            applied: Vec::new(),
            received_new_revision: false,
            release: None,
            target: target.clone(),
            resolution: None,
            clock: PhaseClock::new(),
            done: false,
            plan: None,
            unchanged: None,
            rollback_reason: None,
            preflight: None,
            refused_in_preflight: false,
            plan_moved: Vec::new(),
            replanned: false,
        }
    }

    /// Discovery's result, until the apply stage takes it.
    pub(crate) fn resolution(&self) -> Option<&Resolution> {
        self.resolution.as_ref()
    }

    /// The last good release of the target before this run, when it was read.
    pub fn last_good(&self) -> Option<&ReleaseRecord> {
        match (&self.release, &self.unchanged) {
            (Some(release), _) => release.last_good.as_ref(),
            (None, Some(unchanged)) => Some(&unchanged.last_good),
            (None, None) => None,
        }
    }

    /// The revision this run stands for: the one it records, or on a target where it
    /// changes nothing, the last good one (which the cluster runs).
    pub fn revision(&self) -> Option<u64> {
        self.report
            .revision
            .or_else(|| self.unchanged.as_ref().map(|u| u.last_good.revision))
    }

    /// Whether this run skips a stage on a target where it changes nothing: every stage but
    /// a script with `always: true`.
    pub fn skips(&self, always: bool) -> bool {
        self.unchanged.is_some() && !always
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

/// The first round trip of a target: connect, then discover and check that the target
/// serves every kind, with no write. Every target passes this before any target writes (see
/// `fleet.rs`); a target that does not is `done` (failed, or cancelled). A run that is not
/// `done` afterwards waits for the fleet's lock step, then goes on with [`deploy_target`].
/// Never panics on cluster errors: every problem ends in the report.
pub async fn preflight(
    plan: &Plan,
    target: &TargetConfig,
    cancel: &CancellationToken,
    progress: &Progress,
) -> TargetRun {
    let mut run = TargetRun::new(target, Timestamp::now());
    connect_and_discover(plan, &mut run, cancel, progress).await;
    run
}

/// The rest of a preflighted target's run up to its first fleet stage, with its lock held
/// and its history read (None in a dry run), and the run's revision: the release record,
/// then `stages` (indices into the pipeline). A run that is not `done` afterwards goes on
/// with [`run_stages`].
pub async fn deploy_target(
    plan: &Plan,
    run: &mut TargetRun,
    history: Option<(OpenHistory, u64)>,
    stages: &[usize],
    cancel: &CancellationToken,
    progress: &Progress,
) {
    if let Some((history, revision)) = history {
        match unchanged_since(plan, run, &history, cancel).await {
            Some(last_good) => {
                // Nothing to apply and nothing to record: the lock is kept for the
                // `always` stages and given back when the run ends.
                run.resolution = None;
                run.report.unchanged = true;
                run.unchanged = Some(Unchanged {
                    last_good,
                    history: Some(history),
                });
                run.clock.stop();
            }
            None => open(plan, run, history, revision, progress).await,
        }
    }
    crate::util::fault::test_panic_point("target");
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

async fn connect_and_discover(
    plan: &Plan,
    run: &mut TargetRun,
    cancel: &CancellationToken,
    progress: &Progress,
) {
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
        &plan.kubeconfigs,
        cancel,
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
    match resolve_set(
        &access.client,
        plan.manifests_for(&run.target.name),
        deadline,
        cancel,
    )
    .await
    {
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
    // The fleet takes the locks next, in its one global order (none in a dry run).
    run.clock.stop();
}

/// The last good release when this deploy would change nothing on the target (and is not
/// `--force`d): its record keeps the digest of these very manifests, and the server's dry
/// run of them matches the live objects (the `diff` command's own comparison). A dry run that
/// cannot tell (an error, a cancel) means "deploy".
async fn unchanged_since(
    plan: &Plan,
    run: &TargetRun,
    history: &OpenHistory,
    cancel: &CancellationToken,
) -> Option<ReleaseRecord> {
    let (access, resolution) = (run.access.as_ref()?, run.resolution.as_ref()?);
    let last_good = same_last_good(plan, run, history)?;
    let default_namespace = history.default_namespace().to_string();
    // The preflight asked the same question moments ago, under the same lock.
    if let Some(found) = run.preflight.as_ref().filter(|p| {
        default_namespace
            == plan
                .config
                .default_namespace(&run.target, &access.context_namespace)
            && p.name == run.target.name
    }) {
        return changes_nothing(found).then(|| last_good.clone());
    }
    let deadline = Instant::now() + plan.config.wait.timeout;
    let (found, cancelled) = plan
        .server_dry_run(
            &run.target.name,
            access,
            resolution,
            default_namespace,
            deadline,
            cancel,
        )
        .await;
    (!cancelled && changes_nothing(&found)).then(|| last_good.clone())
}

/// Whether the no-op check ([`unchanged_since`]) will compare this target's live objects
/// with the server's dry run: not `--force`d, and the last good release applied these very
/// manifests. The preflight then compares them itself (the check re-uses its answer);
/// elsewhere it only asks what the server refuses.
pub fn may_change_nothing(plan: &Plan, run: &TargetRun, history: &OpenHistory) -> bool {
    same_last_good(plan, run, history).is_some()
}

/// The last good release of `history` when it applied the manifests of this deploy (same
/// digest, same default namespace) and the deploy is not `--force`d.
fn same_last_good<'h>(
    plan: &Plan,
    run: &TargetRun,
    history: &'h OpenHistory,
) -> Option<&'h ReleaseRecord> {
    let access = run.access.as_ref()?;
    let history_namespace = plan
        .config
        .history_namespace(&run.target, &access.context_namespace);
    let default_namespace = history.default_namespace();
    let manifests = plan
        .recorded_manifests(&run.target.name, &history_namespace, default_namespace)
        .ok()?;
    let digest = crate::release::release_digest(&manifests.digest, Some(default_namespace));
    let last_good = history.last_good()?;
    same_as_last_good(plan.options.force, last_good, &digest).then_some(last_good)
}

/// Whether a deploy of manifests with this record `digest` may be a no-op: not `--force`d,
/// and the last good release applied the same manifests (with the same default namespace).
pub fn same_as_last_good(force: bool, last_good: &ReleaseRecord, digest: &str) -> bool {
    !force && last_good.digest.as_deref() == Some(digest)
}

/// Whether the server's dry run found nothing to create or update, and no error.
pub fn changes_nothing(found: &crate::report::plan::TargetPlan) -> bool {
    found.errors.is_empty() && found.changes() == 0
}

/// With the lock held and the history read: the last good record and this run's pending
/// record at the run's `revision`.
async fn open(
    plan: &Plan,
    run: &mut TargetRun,
    history: OpenHistory,
    revision: u64,
    progress: &Progress,
) {
    let Some(access) = run.access.clone() else {
        history.release().await;
        return;
    };
    let target = run.target.clone();
    let env = |k: &str| plan.env(k);
    // Secrets of other namespaces are recorded by digest (history.secrets: digest): which
    // ones those are depends on this target's history and default namespaces.
    let history_namespace = plan
        .config
        .history_namespace(&target, &access.context_namespace);
    let default_namespace = plan
        .config
        .default_namespace(&target, &access.context_namespace);
    let opened = match plan.recorded_manifests(&target.name, &history_namespace, &default_namespace)
    {
        Ok(manifests) => {
            begin_record(
                history,
                &target,
                &manifests,
                plan.commit_for(&target.name),
                plan.origin_for(&target.name),
                &env,
                revision,
            )
            .await
        }
        Err(e) => {
            history.release().await;
            Err(PrepareError::History(e))
        }
    };
    match opened {
        Ok(release) => {
            run.report.revision = Some(release.record.revision);
            run.report.warnings.extend(crate::release::revision_moved(
                "this deploy",
                revision,
                release.record.revision,
            ));
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

/// A child of `parent` that is also cancelled when the lock is `lost`, with the guard that
/// ends the watching task (and the child) when the stage that holds it returns.
pub(crate) fn stopped_when_lost(
    parent: &CancellationToken,
    lost: CancellationToken,
) -> (CancellationToken, tokio_util::sync::DropGuard) {
    let stop = parent.child_token();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::select! {
                _ = lost.cancelled() => stop.cancel(),
                _ = stop.cancelled() => {}
            }
        }
    });
    let end = stop.clone().drop_guard();
    (stop, end)
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
        let stage = plan.config.pipeline.get(index);
        if run.skips(matches!(stage, Some(PipelineStage::Script(s)) if s.always)) {
            continue;
        }
        match stage {
            Some(PipelineStage::Apply) => apply_and_wait(plan, run, cancel, progress).await,
            Some(PipelineStage::Script(stage)) => {
                target_script(plan, run, stage, cancel, progress).await
            }
            None => {}
        }
    }
}

/// Marks a run that went through its whole pipeline as deployed.
pub fn complete(run: &mut TargetRun, progress: &Progress) {
    if !run.done {
        if let Some(unchanged) = &run.unchanged {
            run.report.message = Some(unchanged_message(unchanged.last_good.revision));
        }
        finish(run, progress, TargetOutcome::Deployed);
    }
}

/// What the apply-and-wait steps of one target share.
struct Step<'a> {
    plan: &'a Plan,
    access: &'a ClusterAccess,
    /// For apply and rollout together.
    deadline: Instant,
    /// The run's cancel, or the lock lost.
    stop: &'a CancellationToken,
    progress: &'a Progress,
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
    let name = run.target.name.clone();
    // Losing the lock stops this target's apply and wait at once, like a cancel.
    let lost = run
        .release
        .as_ref()
        .map(TargetRelease::lost_token)
        .unwrap_or_default();
    let (stop, _end) = stopped_when_lost(cancel, lost);
    let step = Step {
        plan,
        access: &access,
        // The deadline is for apply and rollout: time spent waiting for the lock or in
        // scripts does not count.
        deadline: Instant::now() + plan.config.wait.timeout,
        stop: &stop,
        progress,
    };
    run.clock.start("apply");
    progress.update(
        &name,
        Stage::Applying {
            done: 0,
            total: plan.manifests_for(&name).objects.len(),
        },
    );
    if plan.options.dry_run {
        return ask_dry_run(&step, run, &resolution).await;
    }
    if apply_objects(&step, run, resolution).await {
        wait_until_healthy(&step, run).await;
    }
}

/// A dry run asks the server what the apply would change (GETs and dryRun=All applies, no
/// namespace created, no CRD established) and waits for nothing.
async fn ask_dry_run(step: &Step<'_>, run: &mut TargetRun, resolution: &Resolution) {
    let Step {
        plan,
        access,
        deadline,
        stop,
        progress,
    } = *step;
    let target = run.target.clone();
    let name = target.name.clone();
    let default_namespace = plan
        .config
        .default_namespace(&target, &access.context_namespace);
    let (mut found, cancelled) = plan
        .server_dry_run(&name, access, resolution, default_namespace, deadline, stop)
        .await;
    if !cancelled && found.errors.is_empty() {
        crate::engine::prune::plan_dropped(plan, &target, access, resolution, &mut found, stop)
            .await;
    }
    let errors = found.errors.clone();
    run.plan = Some(found);
    if cancelled {
        return finish(run, progress, TargetOutcome::Cancelled);
    }
    if !errors.is_empty() {
        run.report.failures = errors;
        return finish(run, progress, TargetOutcome::Failed);
    }
    run.clock.stop();
}

/// Applies the target's manifests; false when the target finished there (failed, cancelled,
/// or its lock lost).
async fn apply_objects(step: &Step<'_>, run: &mut TargetRun, resolution: Resolution) -> bool {
    let Step {
        plan,
        access,
        deadline,
        stop,
        progress,
    } = *step;
    let name = run.target.name.clone();
    let options = ApplyOptions {
        field_manager: field_manager(&plan.config.app),
        force: plan.options.force_conflicts,
        dry_run: false,
        default_namespace: plan
            .config
            .default_namespace(&run.target, &access.context_namespace),
        in_flight: plan.in_flight(),
        deadline,
    };
    let report_progress =
        |done: usize, total: usize| progress.update(&name, Stage::Applying { done, total });
    let outcome = apply_resolved(
        &access.client,
        plan.manifests_for(&name),
        resolution,
        &options,
        stop,
        &report_progress,
    )
    .await;
    run.received_new_revision = !outcome.applied.is_empty() || outcome.unanswered > 0;
    run.report.warnings.extend(outcome.warnings);
    run.applied = outcome.applied;
    if let Some(why) = lock_lost(run) {
        run.report.failures = vec![lock_lost_failure(&why)];
        finish(run, progress, TargetOutcome::Failed);
        return false;
    }
    if let Err(e) = outcome.result {
        if matches!(e, ApplyError::Cancelled) {
            finish(run, progress, TargetOutcome::Cancelled);
            return false;
        }
        tracing::info!("apply failed: {e}");
        run.report.failures = apply_failures(&e, &access.server);
        finish(run, progress, TargetOutcome::Failed);
        return false;
    }
    tracing::info!(objects = run.applied.len(), "applied");
    true
}

/// Waits for the rollout of what was applied; finishes the target when it did not become
/// healthy (or the lock was lost meanwhile).
async fn wait_until_healthy(step: &Step<'_>, run: &mut TargetRun) {
    let Step {
        plan,
        access,
        deadline,
        stop,
        progress,
    } = *step;
    let name = run.target.name.clone();
    run.clock.start("wait");
    let wait_options = WaitOptions {
        deadline,
        timeout: plan.config.wait.timeout,
        fail_fast: plan.config.wait.fail_fast.clone(),
        server: access.server.clone(),
        log_lines: plan.config.wait.log_lines,
    };
    let report_wait = |p| progress.update(&name, Stage::Waiting(p));
    let waited = wait_for_rollout(
        &access.watch_client,
        &run.applied,
        &wait_options,
        stop,
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
        Ok(()) => tracing::info!("rollout healthy"),
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

/// What a target on which the deploy changed nothing says.
fn unchanged_message(last_good: u64) -> String {
    format!(
        "no changes: the manifests are those of v{last_good} and the cluster matches them, so nothing was applied or recorded and no stage ran but `always` ones (`--force` deploys anyway)"
    )
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
            TargetOutcome::Cancelled => Some(crate::util::process_group::cancelled_words()),
            _ => run.report.failures.first().map(Failure::headline),
        };
    }
    // Stopped with no signal: the coordinator stopped it (the failure policy), and says its
    // end itself (rolled back, skipped); "cancelled" would be neither.
    if outcome == TargetOutcome::Cancelled && crate::util::process_group::cancel_signal().is_none()
    {
        return;
    }
    // A dry run deploys nothing: its live view says what it would change.
    let stage = match (&run.plan, outcome) {
        (Some(found), TargetOutcome::Deployed) => Stage::Planned {
            changes: found.changes(),
        },
        _ => Stage::Finished {
            outcome,
            message: run.report.message.clone(),
        },
    };
    progress.update(&run.report.name, stage);
}

// ---------------------------------------------------------------------------------------
// A target's own script stages (fleet scripts and rollback commands: `scripts.rs`).
// ---------------------------------------------------------------------------------------

pub(crate) const DRY_RUN_NOTE: &str =
    "not run in a dry run (set `dry_run: true` on the stage to run it)";

/// The deployment a target's script runs in.
pub(crate) fn target_deployment(
    plan: &Plan,
    run: &TargetRun,
    stage: &str,
    rollback: bool,
) -> Deployment {
    let namespace = match (&run.release, &run.access) {
        (Some(release), _) => Some(release.default_namespace.clone()),
        (None, Some(access)) => Some(
            plan.config
                .default_namespace(&run.target, &access.context_namespace),
        ),
        (None, None) => plan.config.namespace.clone(),
    };
    let last_good = run.last_good();
    // A rollback not decided by conclude or by hand (none today) counts as the target's own.
    let reason = rollback.then(|| run.rollback_reason.unwrap_or(RollbackReason::Failed));
    Deployment {
        app: plan.config.app.clone(),
        target: Some(run.target.name.clone()),
        targets: vec![run.target.name.clone()],
        namespace,
        revision: run.revision(),
        commit: plan.commit_for(&run.target.name).map(|c| c.sha.clone()),
        previous_commit: last_good.and_then(|g| g.commit.as_ref().map(|c| c.sha.clone())),
        previous_revision: last_good.map(|g| g.revision),
        stage: stage.to_string(),
        scope: crate::config::Scope::Target,
        is_rollback: rollback,
        dry_run: plan.options.dry_run,
        failed_stage: reason
            .and_then(|reason| decide::rollback_failed_stage(reason, &run.report.stages)),
        failure: rollback.then(|| failure_text(run)),
        rollback_reason: reason,
    }
}

/// Why a target is rolled back, in one line (ROLLGUARD_FAILURE).
pub(crate) fn failure_text(run: &TargetRun) -> String {
    run.report
        .failures
        .first()
        .map(Failure::headline)
        .or_else(|| run.report.message.clone())
        .unwrap_or_else(|| match run.report.outcome {
            TargetOutcome::Cancelled => crate::util::process_group::cancelled_words(),
            _ => "another target failed".to_string(),
        })
}

/// Records the result of a stage's `run` on a target; ends the run when it failed.
pub(crate) fn record_run(
    plan: &Plan,
    run: &mut TargetRun,
    stage: &ScriptStage,
    result: StageResult,
    progress: &Progress,
) {
    run.clock.script(&result);
    let outcome = result.outcome;
    let message = result.message.clone().unwrap_or_default();
    let scope = match stage.scope {
        crate::config::Scope::Fleet => " (fleet)",
        crate::config::Scope::Wave => " (wave)",
        crate::config::Scope::Target => "",
    };
    let where_ = format!("{}:{}", plan.config.source.display(), stage.line);
    run.report.stages.push(result);
    match outcome {
        StageOutcome::Warned => run.report.warnings.push(format!(
            "stage {}{scope} {message}; continue_on_error is set, so the deploy went on (its last lines are in the report)",
            stage.name
        )),
        StageOutcome::Stopped => finish(run, progress, TargetOutcome::Cancelled),
        StageOutcome::Failed | StageOutcome::TimedOut => {
            run.report.failures.push(Failure {
                object: format!("stage {}{scope}", stage.name),
                reason: match outcome {
                    StageOutcome::TimedOut => "ScriptTimeout".to_string(),
                    _ => "ScriptFailed".to_string(),
                },
                message: format!(
                    "{message} (stage at {where_}); its output is in the log (stage={}) and its last lines in the report",
                    stage.name
                ),
                ..Failure::default()
            });
            finish(run, progress, TargetOutcome::Failed);
        }
        StageOutcome::Succeeded | StageOutcome::NotRun => {}
    }
}

/// A target-scoped script stage of one target.
pub async fn target_script(
    plan: &Plan,
    run: &mut TargetRun,
    stage: &ScriptStage,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    if plan.options.dry_run && !stage.dry_run {
        run.report
            .stages
            .push(stages::not_run(stage, Which::Run, DRY_RUN_NOTE));
        return;
    }
    let Some(access) = run.access.clone() else {
        return;
    };
    // Cancelled before it started: it never ran, so it has nothing to roll back.
    if cancel.is_cancelled() {
        return finish(run, progress, TargetOutcome::Cancelled);
    }
    progress.update(&run.target.name, Stage::Script(stage.name.clone()));
    // The stage's phase is the runner's timing (`record_run`): no phase of the clock's own.
    run.clock.stop();
    let deployment = target_deployment(plan, run, &stage.name, false);
    let (result, _) = stages::run_command(
        stage,
        Which::Run,
        &access.script_kubeconfig,
        &deployment,
        &plan.scripts,
        cancel,
        None,
    )
    .await;
    record_run(plan, run, stage, result, progress);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::ReleaseStatus;
    use crate::report::Failure;
    use crate::report::PlannedChange;
    use crate::report::plan::TargetPlan;

    #[test]
    fn a_deploy_is_a_no_op_only_with_the_last_good_manifests_unforced() {
        let record = |digest: Option<&str>| {
            let mut r = ReleaseRecord::for_test(3, ReleaseStatus::Deployed);
            r.digest = digest.map(str::to_string);
            r
        };
        let cases = [
            (false, Some("sha256:a"), "sha256:a", true),
            (true, Some("sha256:a"), "sha256:a", false),
            (false, Some("sha256:b"), "sha256:a", false),
            // A record without a digest (an old rollguard's) cannot vouch for anything.
            (false, None, "sha256:a", false),
        ];
        for (force, kept, digest, want) in cases {
            assert_eq!(
                same_as_last_good(force, &record(kept), digest),
                want,
                "{force} {kept:?} {digest}"
            );
        }
    }

    #[test]
    fn only_a_dry_run_without_changes_or_errors_changes_nothing() {
        let change = PlannedChange {
            object: "ConfigMap shop/x".into(),
            origin: None,
            note: None,
            diff: None,
        };
        let mut unchanged = TargetPlan::new("eu");
        unchanged.unchanged.push("ConfigMap shop/x".into());
        let mut create = TargetPlan::new("eu");
        create.create.push(change.clone());
        let mut update = TargetPlan::new("eu");
        update.update.push(change);
        let mut error = TargetPlan::new("eu");
        error.errors.push(Failure::default());
        for (plan, want) in [
            (unchanged, true),
            (create, false),
            (update, false),
            (error, false),
        ] {
            assert_eq!(changes_nothing(&plan), want, "{plan:?}");
        }
    }
}
