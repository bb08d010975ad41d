//! Rollback: the decisions (which targets roll back under a policy, to which revision, what
//! stays in place) as pure functions, and the re-apply of the last good record of one target.
//!
//! A rollback never prunes: objects that the failed revision added and the last good one does
//! not have stay, and are listed so that a human can decide.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{CancelPolicy, Config, FailurePolicy, TargetConfig};
use crate::engine::target_run::{MAX_IN_FLIGHT, Plan, TargetRun, apply_failures};
use crate::kube::apply::{AppliedObject, ApplyOptions, apply_set};
use crate::kube::connect::{ClusterAccess, describe_error};
use crate::kube::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::manifests::{ManifestObject, ManifestSet, Origin};
use crate::release::lock::{Lock, LockError, LockGuard, LockOptions};
use crate::release::{
    EncodedManifests, ObjectRef, ReleaseDraft, ReleaseError, ReleaseOrigin, ReleaseRecord,
    ReleaseStatus, ReleaseStore, RunInfo,
};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, RollbackReport, TargetOutcome};
use crate::util::git::CommitInfo;

/// Across targets, after a failure: which targets roll back (`on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// If any target fails, every target that received the new revision rolls back.
    RollbackAll,
    /// Only the failed targets roll back.
    RollbackFailed,
    /// Only when every target failed (a partial failure is left as it is).
    RollbackIfAllFail,
    /// Never roll back automatically.
    None,
}

/// What the policy needs to know of one target after the deploy phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetState {
    /// At least one write of the new revision reached the cluster (it may be half-applied).
    pub received: bool,
    /// The target failed (apply error, fail-fast, timeout, unreachable).
    pub failed: bool,
}

/// For each target, whether it rolls back. A target that never received the new revision
/// has nothing to undo, whatever the policy.
pub fn targets_to_roll_back(policy: Policy, targets: &[TargetState]) -> Vec<bool> {
    let any_failed = targets.iter().any(|t| t.failed);
    let all_failed = !targets.is_empty() && targets.iter().all(|t| t.failed);
    targets
        .iter()
        .map(|t| {
            t.received
                && match policy {
                    Policy::RollbackAll => any_failed,
                    Policy::RollbackFailed => t.failed,
                    Policy::RollbackIfAllFail => all_failed,
                    Policy::None => false,
                }
        })
        .collect()
}

/// On cancellation (`on_cancel`): roll back every target that received the new revision,
/// or leave everything as it is.
pub fn targets_to_roll_back_on_cancel(rollback: bool, targets: &[TargetState]) -> Vec<bool> {
    targets.iter().map(|t| rollback && t.received).collect()
}

/// Objects the failed revision applied that the last good one does not have: they stay in
/// place (never pruned) and are reported. Compared by group, kind, namespace and name.
pub fn left_in_place(failed: &[ObjectRef], last_good: &[ObjectRef]) -> Vec<ObjectRef> {
    let good: HashSet<_> = last_good.iter().map(ObjectRef::identity).collect();
    let mut seen = HashSet::new();
    failed
        .iter()
        .filter(|o| !good.contains(&o.identity()) && seen.insert(o.identity()))
        .cloned()
        .collect()
}

/// The result of one target's rollback, for the summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackResult {
    pub target: String,
    pub ok: bool,
    /// Why it failed (first line), or a note.
    pub message: Option<String>,
}

/// "rolled back 2 of 3; eu: connection refused" (empty when nothing rolled back).
pub fn summary(results: &[RollbackResult]) -> String {
    if results.is_empty() {
        return String::new();
    }
    let ok = results.iter().filter(|r| r.ok).count();
    let mut text = format!("rolled back {ok} of {}", results.len());
    for failed in results.iter().filter(|r| !r.ok) {
        let why = failed
            .message
            .as_deref()
            .and_then(|m| m.lines().next())
            .unwrap_or("rollback failed");
        text.push_str(&format!("; {}: {why}", failed.target));
    }
    text
}

/// Why a manual rollback was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollbackChoiceError {
    #[error("there is no release history for this app here: nothing to roll back to")]
    NoHistory,
    #[error(
        "there is no earlier good revision to roll back to (good = deployed or superseded); name one with --revision"
    )]
    NoEarlierGood,
    #[error("revision {0} does not exist (see `rollguard history`)")]
    Missing(u64),
    #[error(
        "revision {revision} is {status}, not a revision that ran healthy; add --force to roll back to it anyway"
    )]
    NotGood {
        revision: u64,
        status: ReleaseStatus,
    },
}

/// The revision a manual rollback goes to. `requested`: `--revision N`; default the newest good
/// revision (deployed or superseded) older than the current (newest) one whose manifests
/// differ from the current ones.
pub fn choose_manual_target(
    records: &[ReleaseRecord],
    requested: Option<u64>,
    force: bool,
) -> Result<u64, RollbackChoiceError> {
    if records.is_empty() {
        return Err(RollbackChoiceError::NoHistory);
    }
    if let Some(revision) = requested {
        let record = records
            .iter()
            .find(|r| r.revision == revision)
            .ok_or(RollbackChoiceError::Missing(revision))?;
        if !record.status.was_good() && !force {
            return Err(RollbackChoiceError::NotGood {
                revision,
                status: record.status,
            });
        }
        return Ok(revision);
    }
    // The current revision is the newest one, whatever its status: after a failure that was
    // left in place, going back means the last good one before it.
    let current = records
        .iter()
        .max_by_key(|r| r.revision)
        .ok_or(RollbackChoiceError::NoHistory)?;
    records
        .iter()
        .filter(|r| r.revision < current.revision && r.status.was_good())
        // Going "back" to the same manifests would change nothing (e.g. the revision an
        // automatic rollback re-applied).
        .filter(|r| r.digest.is_none() || current.digest.is_none() || r.digest != current.digest)
        .max_by_key(|r| r.revision)
        .map(|r| r.revision)
        .ok_or(RollbackChoiceError::NoEarlierGood)
}

// ---------------------------------------------------------------------------------------
// The deploy flow: the lock and the record around one target's deploy (`prepare`), then the
// failure policy and the rollbacks across targets (`conclude`).
// ---------------------------------------------------------------------------------------

/// How long the rollbacks may take after a cancel signal: GitHub sends SIGKILL 10 s after
/// SIGINT, and the records and the report must be written before that.
pub const CANCEL_ROLLBACK_BUDGET: Duration = Duration::from_secs(4);

/// The release settings of the config, read in one place.
#[derive(Debug, Clone)]
pub struct ReleaseSettings {
    /// history.namespace (None: the target's default namespace).
    pub history_namespace: Option<String>,
    pub keep: usize,
    pub lock_timeout: Duration,
    pub rollback_timeout: Duration,
    pub on_failure: Policy,
    /// on_cancel: rollback (true) or leave.
    pub on_cancel_rollback: bool,
}

impl ReleaseSettings {
    pub fn from_config(config: &Config) -> ReleaseSettings {
        ReleaseSettings {
            history_namespace: config.history.namespace.clone(),
            keep: config.history.keep,
            lock_timeout: config.lock.timeout,
            rollback_timeout: config.rollback_timeout(),
            on_failure: match config.on_failure {
                FailurePolicy::RollbackAll => Policy::RollbackAll,
                FailurePolicy::RollbackFailed => Policy::RollbackFailed,
                FailurePolicy::RollbackIfAllFail => Policy::RollbackIfAllFail,
                FailurePolicy::None => Policy::None,
            },
            on_cancel_rollback: config.on_cancel == CancelPolicy::Rollback,
        }
    }
}

/// The namespace of a target's records and lock: history.namespace, else the target's default
/// namespace (the target's, the config's, else the kubeconfig context's).
pub fn history_namespace(config: &Config, target: &TargetConfig, access: &ClusterAccess) -> String {
    ReleaseSettings::from_config(config)
        .history_namespace
        .unwrap_or_else(|| {
            crate::engine::target_run::default_namespace(config, target, &access.context_namespace)
        })
}

/// The release side of one target's deploy: the held lock, the last good record, and this
/// run's record (pending until [`conclude`]). Neither record holds its manifests: a rollback
/// reads them when it needs them.
pub struct TargetRelease {
    pub store: ReleaseStore,
    lock: Option<LockGuard>,
    pub last_good: Option<ReleaseRecord>,
    pub record: ReleaseRecord,
    /// The namespace for namespaced objects without one on this target.
    pub default_namespace: String,
}

impl TargetRelease {
    /// Why this run no longer holds the target's lock, when it lost it.
    pub fn lock_lost(&self) -> Option<String> {
        self.lock.as_ref().and_then(LockGuard::lost_reason)
    }

    /// Fires when the lock is lost (never, once released).
    pub fn lost_token(&self) -> CancellationToken {
        self.lock
            .as_ref()
            .map(LockGuard::lost_token)
            .unwrap_or_default()
    }

    /// Release the lock (a failure only delays the next run until the lease lapses).
    pub async fn unlock(&mut self) -> Option<String> {
        let lock = self.lock.take()?;
        match lock.release().await {
            Ok(()) => None,
            Err(e) => Some(format!(
                "could not release the lock ({e}); it lapses by itself after its lease duration"
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("release history: {0}")]
    History(#[from] ReleaseError),
    #[error("cancelled while waiting for the lock")]
    Cancelled,
}

impl PrepareError {
    /// As a report failure; transport errors are described like other target errors.
    pub fn failure(&self, server: &str) -> Failure {
        let kube = match self {
            PrepareError::Lock(LockError::Kube { source, .. }) => Some(&**source),
            PrepareError::History(e) => e.kube_error(),
            _ => None,
        };
        let (object, reason) = match self {
            PrepareError::Lock(LockError::Timeout { .. }) => ("lock", "LockTimeout".to_string()),
            PrepareError::Lock(LockError::SameLease { .. }) => ("lock", "SameLock".to_string()),
            PrepareError::Lock(_) => ("lock", "LockError".to_string()),
            PrepareError::History(_) => ("release history", "HistoryError".to_string()),
            PrepareError::Cancelled => ("lock", "Cancelled".to_string()),
        };
        let reason = kube
            .map(|e| describe_error(e, server).reason)
            .unwrap_or(reason);
        Failure {
            object: object.to_string(),
            reason,
            message: self.to_string(),
            ..Failure::default()
        }
    }
}

/// An applied object as the record lists it.
pub fn applied_ref(applied: &AppliedObject) -> ObjectRef {
    ObjectRef {
        api_version: applied.resource.api_version.clone(),
        kind: applied.resource.kind.clone(),
        namespace: applied.namespace.clone(),
        name: applied.name.clone(),
    }
}

/// Who holds a target's lock: the run, and the target (two targets of one run never share a
/// Lease: validation refuses two targets on one cluster and namespace).
pub fn lock_holder(plan: &Plan, target: &TargetConfig) -> String {
    let env = |k: &str| plan.env(k);
    format!(
        "{} target {}",
        crate::release::lock::holder_identity(&env),
        target.name
    )
}

/// Take one target's lock, waiting up to `timeout` for another holder. Returns the guard and
/// a note when an expired lease was taken over.
pub async fn take_lock(
    plan: &Plan,
    target: &TargetConfig,
    access: &ClusterAccess,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(LockGuard, Vec<String>), PrepareError> {
    let env = |k: &str| plan.env(k);
    let namespace = history_namespace(&plan.config, target, access);
    let holder = lock_holder(plan, target);
    let options = LockOptions::from_env(timeout, &env);
    let lock = tokio::select! {
        lock = Lock::acquire(access.client.clone(), &plan.config.app, &namespace, &holder, &options) => lock?,
        _ = cancel.cancelled() => return Err(PrepareError::Cancelled),
    };
    let notes = lock
        .took_over_from()
        .map(|previous| format!("took over the lock from {previous}, whose lease had expired"))
        .into_iter()
        .collect();
    Ok((lock, notes))
}

/// With the lock held: mark records a dead run left pending as abandoned, read the last good
/// record and begin this run's record. Returns notes for the report (abandoned records).
/// On an error the lock is released.
pub async fn open_records(
    plan: &Plan,
    target: &TargetConfig,
    access: &ClusterAccess,
    default_namespace: &str,
    lock: LockGuard,
) -> Result<(TargetRelease, Vec<String>), PrepareError> {
    let settings = ReleaseSettings::from_config(&plan.config);
    let env = |k: &str| plan.env(k);
    let namespace = history_namespace(&plan.config, target, access);
    let app = &plan.config.app;
    let mut notes = Vec::new();
    let store = ReleaseStore::new(access.client.clone(), app, &namespace, settings.keep);
    let begun = async {
        for revision in store.mark_abandoned().await? {
            notes.push(format!(
                "release v{revision} was left pending by a run that died: marked failed (abandoned)"
            ));
        }
        for revision in store.repair().await? {
            notes.push(format!(
                "release v{revision} was still marked deployed beside a newer deployed one (an earlier run failed while tidying): marked superseded"
            ));
        }
        let records = store.list().await?;
        let last_good = crate::release::last_good(&records).cloned();
        let mut draft = ReleaseDraft::new(plan.recorded_manifests()?.clone());
        draft.commit = plan.commit.clone();
        draft.target = Some(target.name.clone());
        draft.default_namespace = Some(default_namespace.to_string());
        draft.run = RunInfo::from_env(&env);
        let record = store
            .begin_after(draft, ReleaseOrigin::Deploy, &records)
            .await?;
        Ok::<_, ReleaseError>((last_good, record))
    }
    .await;
    match begun {
        Ok((last_good, record)) => Ok((
            TargetRelease {
                store,
                lock: Some(lock),
                last_good,
                record,
                default_namespace: default_namespace.to_string(),
            },
            notes,
        )),
        Err(e) => {
            let _ = lock.release().await;
            Err(e.into())
        }
    }
}

/// After every target finished its deploy: write each target's record, decide with the
/// failure policy (or `on_cancel`) which targets roll back, run those rollbacks all at once
/// (one failing never stops the others), release the locks. The rollback summary
/// ("rolled back 2 of 3; eu: connection refused") is logged and returned.
pub async fn conclude(
    plan: &Plan,
    runs: &mut [TargetRun],
    cancel: &CancellationToken,
    progress: &Progress,
) -> String {
    let cancelled = cancel.is_cancelled();
    // A signal that arrives while the rollbacks run leaves them CANCEL_ROLLBACK_BUDGET to
    // finish, so that the records and the report are still written before a SIGKILL.
    let stop = CancellationToken::new();
    let stopper = tokio::spawn({
        let (cancel, stop) = (cancel.clone(), stop.clone());
        async move {
            cancel.cancelled().await;
            tokio::time::sleep(CANCEL_ROLLBACK_BUDGET).await;
            stop.cancel();
        }
    });
    let settings = ReleaseSettings::from_config(&plan.config);
    let states: Vec<TargetState> = runs
        .iter()
        .map(|r| TargetState {
            received: r.received_new_revision && r.release.is_some(),
            failed: matches!(
                r.report.outcome,
                TargetOutcome::Failed | TargetOutcome::RollbackFailed | TargetOutcome::Cancelled
            ),
        })
        .collect();
    let decisions = if cancelled {
        targets_to_roll_back_on_cancel(settings.on_cancel_rollback, &states)
    } else {
        targets_to_roll_back(settings.on_failure, &states)
    };
    // A target whose lock was lost belongs to another run now: it is never rolled back.
    let decisions: Vec<bool> = decisions
        .into_iter()
        .zip(runs.iter())
        .map(|(roll_back, run)| {
            roll_back && run.release.as_ref().is_none_or(|r| r.lock_lost().is_none())
        })
        .collect();
    let budget = if cancelled {
        settings.rollback_timeout.min(CANCEL_ROLLBACK_BUDGET)
    } else {
        settings.rollback_timeout
    };
    let context = Conclusion {
        plan,
        settings,
        cancelled,
        deadline: Instant::now() + budget,
        stop,
        progress,
    };
    let settle = runs
        .iter_mut()
        .zip(decisions)
        .map(|(run, roll_back)| settle_target(&context, run, roll_back));
    let results: Vec<RollbackResult> = futures::future::join_all(settle)
        .await
        .into_iter()
        .flatten()
        .collect();
    stopper.abort();
    let text = summary(&results);
    if !text.is_empty() {
        tracing::info!("{text}");
    }
    text
}

/// What every target's part of [`conclude`] shares.
struct Conclusion<'a> {
    plan: &'a Plan,
    settings: ReleaseSettings,
    cancelled: bool,
    deadline: Instant,
    stop: CancellationToken,
    progress: &'a Progress,
}

/// One target's part of [`conclude`].
async fn settle_target(
    context: &Conclusion<'_>,
    run: &mut TargetRun,
    roll_back: bool,
) -> Option<RollbackResult> {
    let release = run.release.as_mut()?;
    // The lock is someone else's now: their records are not ours to write.
    if let Some(why) = release.lock_lost() {
        tracing::info!("{why}: leaving the release records to the new holder");
        return None;
    }
    let (status, reason) = match run.report.outcome {
        TargetOutcome::Deployed => (ReleaseStatus::Deployed, None),
        TargetOutcome::Cancelled => (ReleaseStatus::Failed, Some("cancelled".to_string())),
        _ => (
            ReleaseStatus::Failed,
            Some(
                run.report
                    .failures
                    .first()
                    .map(Failure::headline)
                    .or_else(|| run.report.message.clone())
                    .unwrap_or_else(|| "failed".to_string()),
            ),
        ),
    };
    let applied: Vec<ObjectRef> = run.applied.iter().map(applied_ref).collect();
    match release
        .store
        .finish_with_objects(
            release.record.revision,
            status,
            reason,
            Some(applied.clone()),
        )
        .await
    {
        Ok(record) => release.record = record,
        Err(e) => run.report.warnings.push(format!(
            "could not write release record v{}: {e}",
            release.record.revision
        )),
    }
    let result = if roll_back {
        roll_back_target(context, run).await
    } else {
        None
    };
    if let Some(release) = run.release.as_ref() {
        run.report.warnings.extend(release.store.take_warnings());
    }
    if let Some(release) = run.release.as_mut()
        && let Some(warning) = release.unlock().await
    {
        run.report.warnings.push(warning);
    }
    result
}

/// Re-apply the last good record of one target and wait for it; updates the target's report.
/// None when there was nothing to roll back to (a first deploy: nothing is deleted either).
async fn roll_back_target(context: &Conclusion<'_>, run: &mut TargetRun) -> Option<RollbackResult> {
    let Conclusion {
        plan,
        settings,
        cancelled,
        deadline,
        stop,
        progress,
    } = context;
    let (plan, cancelled, deadline) = (*plan, *cancelled, *deadline);
    let name = run.report.name.clone();
    // What this run applied, as the server named it (the record may not have been updated
    // when the cluster stopped answering).
    let applied: Vec<ObjectRef> = run.applied.iter().map(applied_ref).collect();
    let release = run.release.as_mut()?;
    let failed_objects = if applied.is_empty() {
        release.record.objects.clone()
    } else {
        applied
    };
    let Some(good) = release.last_good.clone() else {
        run.report.rollback = Some(RollbackReport {
            to_revision: None,
            outcome: TargetOutcome::Failed,
            left_in_place: failed_objects.iter().map(ToString::to_string).collect(),
            message: Some(
                "nothing to roll back to: no earlier release was deployed here (first deploy); nothing was deleted"
                    .to_string(),
            ),
        });
        return None;
    };
    let left: Vec<String> = left_in_place(&failed_objects, &good.objects)
        .iter()
        .map(ToString::to_string)
        .collect();
    progress.update(&name, Stage::RollingBack(format!("to v{}", good.revision)));
    // Losing the lock mid-rollback stops it at once, like the end of the budget.
    let stop = stop.child_token();
    let _end = stop.clone().drop_guard();
    tokio::spawn({
        let (stop, lost) = (stop.clone(), release.lost_token());
        async move {
            tokio::select! {
                _ = lost.cancelled() => stop.cancel(),
                _ = stop.cancelled() => {}
            }
        }
    });
    let attempt = match run.access.as_ref() {
        None => Err(("no connection to the cluster".to_string(), false)),
        Some(access) => match stored_manifests(&release.store, &plan.config, &good, access).await {
            Err(why) => Err((why, false)),
            Ok(bodies) => {
                ReApply {
                    plan,
                    access,
                    store: &release.store,
                    target: &name,
                    default_namespace: good
                        .default_namespace
                        .clone()
                        .unwrap_or_else(|| release.default_namespace.clone()),
                    bodies,
                    commit: good.commit.clone(),
                    origin: ReleaseOrigin::Rollback { to: good.revision },
                    destination: format!("v{}", good.revision),
                    timeout: settings.rollback_timeout,
                    deadline,
                    cancelled,
                    stop: stop.clone(),
                    lost: release.lost_token(),
                }
                .run()
                .await
                .map_err(|(why, sent)| match release.lock_lost() {
                    Some(lost) => (format!("{why}; {lost}"), false),
                    None => (why, sent),
                })
            }
        },
    };
    let (outcome, ok, message) = match attempt {
        Ok(revision) => (
            TargetOutcome::RolledBack,
            true,
            format!("rolled back to v{} (as v{revision})", good.revision),
        ),
        // Cancelled while the rollback was still rolling out: it was sent, not verified.
        Err((why, true)) => (TargetOutcome::Cancelled, false, why),
        Err((why, false)) => (TargetOutcome::RollbackFailed, false, why),
    };
    run.report.rollback = Some(RollbackReport {
        to_revision: Some(good.revision),
        outcome,
        left_in_place: left,
        message: Some(message.clone()),
    });
    // A rollback that failed says so even after a cancel: the cluster is not where the
    // cancel left it to be (exit 3), and the message says what was re-applied and what not.
    if !cancelled || outcome == TargetOutcome::RollbackFailed {
        run.report.outcome = outcome;
    }
    run.report.finished_at = jiff::Timestamp::now();
    progress.update(
        &name,
        Stage::Finished {
            outcome: run.report.outcome,
            message: Some(message.clone()),
        },
    );
    Some(RollbackResult {
        target: name,
        ok,
        message: (!ok).then_some(message),
    })
}

/// The manifests of the revision `record` names, read from the cluster only now: a deploy
/// that succeeds never needs them.
async fn stored_manifests(
    store: &ReleaseStore,
    config: &Config,
    record: &ReleaseRecord,
    access: &ClusterAccess,
) -> Result<Vec<serde_json::Value>, String> {
    match store.get(record.revision).await {
        Ok(full) => record_manifests(config, &full),
        // Unreadable manifests: the record's commit can still rebuild them from git.
        Err(e @ ReleaseError::Corrupt { .. }) => {
            tracing::warn!(
                "{e}; rebuilding the manifests of v{} from git",
                record.revision
            );
            let mut head = record.clone();
            head.manifests = None;
            record_manifests(config, &head).map_err(|why| format!("{e}; and from git: {why}"))
        }
        Err(e) => {
            let why = match e.kube_error() {
                Some(k) => describe_error(k, &access.server).message,
                None => e.to_string(),
            };
            Err(format!("reading release v{}: {why}", record.revision))
        }
    }
}

/// The manifests of a record: as stored, else rebuilt from git at its commit.
pub fn record_manifests(
    config: &Config,
    record: &ReleaseRecord,
) -> Result<Vec<serde_json::Value>, String> {
    if let Some(bodies) = &record.manifests {
        return Ok(bodies.clone());
    }
    let commit = record.commit.as_ref().ok_or_else(|| {
        format!(
            "release v{} holds neither manifests nor a commit to rebuild them from",
            record.revision
        )
    })?;
    manifests_from_git(config, &commit.sha)
}

/// The manifests of the config's manifest source at commit `sha`, from a temporary checkout.
pub fn manifests_from_git(config: &Config, sha: &str) -> Result<Vec<serde_json::Value>, String> {
    let checkout =
        crate::util::git::Checkout::at(&config.base_dir, sha).map_err(|e| e.to_string())?;
    let mut at_commit = config.clone();
    at_commit.base_dir = checkout.map_path(&config.base_dir);
    let set = crate::manifests::load(&at_commit)
        .map_err(|e| format!("manifests at commit {sha}: {e}"))?;
    Ok(set.objects.into_iter().map(|o| o.body).collect())
}

/// A manifest set from stored bodies (in their stored, already sorted, order).
pub fn manifest_set_from_bodies(bodies: &[serde_json::Value], source: &str) -> ManifestSet {
    let objects = bodies
        .iter()
        .enumerate()
        .filter_map(|(i, body)| {
            let r = ObjectRef::from_body(body)?;
            Some(ManifestObject {
                api_version: r.api_version,
                kind: r.kind,
                name: r.name,
                namespace: r.namespace,
                origin: Origin {
                    file: std::path::PathBuf::from(format!("release {source}")),
                    line: i + 1,
                },
                body: body.clone(),
            })
        })
        .collect();
    ManifestSet { objects }
}

/// What an unfinished rollback did: "re-applied: ConfigMap web-config; not re-applied:
/// Deployment web" (by kind and name, in apply order).
pub fn rollback_progress(set: &ManifestSet, applied: &[AppliedObject]) -> String {
    let sent: HashSet<(&str, &str)> = applied
        .iter()
        .map(|a| (a.resource.kind.as_str(), a.name.as_str()))
        .collect();
    let (done, left): (Vec<&ManifestObject>, Vec<&ManifestObject>) = set
        .objects
        .iter()
        .partition(|o| sent.contains(&(o.kind.as_str(), o.name.as_str())));
    let names = |objects: &[&ManifestObject]| {
        if objects.is_empty() {
            "nothing".to_string()
        } else {
            objects
                .iter()
                .map(|o| format!("{} {}", o.kind, o.name))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    format!("re-applied: {}; not re-applied: {}", names(&done), names(&left))
}

/// One re-apply of stored (or rebuilt) manifests as a new revision on one target.
pub struct ReApply<'a> {
    pub plan: &'a Plan,
    pub access: &'a ClusterAccess,
    pub store: &'a ReleaseStore,
    pub target: &'a str,
    /// The namespace for namespaced objects without one.
    pub default_namespace: String,
    pub bodies: Vec<serde_json::Value>,
    pub commit: Option<CommitInfo>,
    pub origin: ReleaseOrigin,
    /// For messages: "v3" or "commit abc1234".
    pub destination: String,
    pub timeout: Duration,
    pub deadline: Instant,
    /// The run was cancelled: an unfinished rollout at the deadline is "sent, not verified".
    pub cancelled: bool,
    /// Stops the apply and the wait early (a late signal); the rollback then counts as sent.
    pub stop: CancellationToken,
    /// Fires when the target's lock is lost: the record is then left to the new holder.
    pub lost: CancellationToken,
}

impl ReApply<'_> {
    /// Record, apply (server-side, never pruning) and wait. Ok(new revision);
    /// Err((why, sent_but_unverified_because_cancelled)).
    pub async fn run(self) -> Result<u64, (String, bool)> {
        let access = self.access;
        let describe = |e: &ReleaseError| match e.kube_error() {
            Some(k) => describe_error(k, &access.server).message,
            None => e.to_string(),
        };
        let to = &self.destination;
        let manifests = EncodedManifests::encode(&self.bodies)
            .map_err(|e| (format!("rollback to {to}: {e}"), false))?;
        let mut draft = ReleaseDraft::new(manifests);
        draft.commit = self.commit.clone();
        draft.target = Some(self.target.to_string());
        draft.default_namespace = Some(self.default_namespace.clone());
        draft.run = RunInfo::from_env(&|k| self.plan.env(k));
        let record = self
            .store
            .begin(draft, self.origin)
            .await
            .map_err(|e| (format!("rollback to {to}: {}", describe(&e)), false))?;
        let revision = record.revision;
        let set = manifest_set_from_bodies(&self.bodies, to);
        let options = ApplyOptions {
            field_manager: crate::kube::apply::field_manager(&self.plan.config.app),
            force: self.plan.options.force_conflicts,
            dry_run: false,
            default_namespace: self.default_namespace.clone(),
            max_in_flight: MAX_IN_FLIGHT,
            deadline: self.deadline,
        };
        // The first signal cancelled the deploy; the rollback itself runs to its deadline or
        // until `stop` (a second signal ends the process).
        let keep_going = self.stop.clone();
        let applied = apply_set(&access.client, &set, &options, &keep_going, &|_, _| {}).await;
        let outcome = match &applied.result {
            Err(e) => {
                let why = apply_failures(e, &access.server)
                    .first()
                    .map(Failure::headline)
                    .unwrap_or_else(|| {
                        if self.stop.is_cancelled() {
                            "stopped: its time ran out".to_string()
                        } else {
                            e.to_string()
                        }
                    });
                Err((
                    format!(
                        "rollback to {to}: {why}; {}",
                        rollback_progress(&set, &applied.applied)
                    ),
                    false,
                ))
            }
            Ok(()) => {
                let wait = WaitOptions {
                    deadline: self.deadline,
                    timeout: self.timeout,
                    fail_fast: self.plan.config.wait.fail_fast.clone(),
                };
                let waited = wait_for_rollout(
                    &access.client,
                    &applied.applied,
                    &wait,
                    &keep_going,
                    &|_| {},
                )
                .await;
                match waited.result {
                    Ok(()) => Ok(()),
                    Err(WaitFailure::Timeout(_)) if self.cancelled => Err((
                        format!(
                            "rollback to {to} sent; not yet healthy when rollguard had to exit"
                        ),
                        true,
                    )),
                    Err(WaitFailure::Failed(f)) | Err(WaitFailure::Timeout(f)) => Err((
                        format!(
                            "rollback to {to}: {}",
                            f.first().map(Failure::headline).unwrap_or_default()
                        ),
                        false,
                    )),
                    Err(WaitFailure::Cancelled) => {
                        Err((format!("rollback to {to} cancelled"), true))
                    }
                }
            }
        };
        if self.lost.is_cancelled() {
            return Err((
                format!("rollback to {to} stopped: the lock was lost; its record v{revision} is left to the new holder"),
                false,
            ));
        }
        let objects = Some(applied.applied.iter().map(applied_ref).collect());
        let (status, reason) = match &outcome {
            Ok(()) => (ReleaseStatus::Deployed, None),
            Err((why, _)) => (ReleaseStatus::Failed, Some(why.clone())),
        };
        if let Err(e) = self
            .store
            .finish_with_objects(revision, status, reason, objects)
            .await
        {
            return Err((
                format!(
                    "rollback to {to} applied, but its record v{revision} could not be written: {}",
                    describe(&e)
                ),
                false,
            ));
        }
        outcome.map(|()| revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: TargetState = TargetState {
        received: true,
        failed: true,
    };
    const OK: TargetState = TargetState {
        received: true,
        failed: false,
    };
    /// Failed before anything was applied (unreachable, discovery error).
    const UNREACHED: TargetState = TargetState {
        received: false,
        failed: true,
    };

    #[test]
    fn policy_table() {
        use Policy::*;
        let cases: Vec<(Policy, Vec<TargetState>, Vec<bool>)> = vec![
            (RollbackAll, vec![OK, F, OK], vec![true, true, true]),
            (RollbackAll, vec![OK, OK, OK], vec![false, false, false]),
            (
                RollbackAll,
                vec![OK, UNREACHED, OK],
                vec![true, false, true],
            ),
            (RollbackFailed, vec![OK, F, OK], vec![false, true, false]),
            (RollbackFailed, vec![F, UNREACHED], vec![true, false]),
            (
                RollbackIfAllFail,
                vec![OK, F, OK],
                vec![false, false, false],
            ),
            (RollbackIfAllFail, vec![F, F, F], vec![true, true, true]),
            (RollbackIfAllFail, vec![F, UNREACHED], vec![true, false]),
            (None, vec![F, F], vec![false, false]),
            (RollbackAll, vec![], vec![]),
        ];
        for (policy, targets, want) in cases {
            assert_eq!(
                targets_to_roll_back(policy, &targets),
                want,
                "{policy:?} {targets:?}"
            );
        }
    }

    #[test]
    fn cancel_table() {
        assert_eq!(
            targets_to_roll_back_on_cancel(true, &[OK, UNREACHED, F]),
            vec![true, false, true]
        );
        assert_eq!(
            targets_to_roll_back_on_cancel(false, &[OK, F]),
            vec![false, false]
        );
    }

    fn obj(api: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn left_in_place_table() {
        let web = obj("apps/v1", "Deployment", Some("shop"), "web");
        let web_beta = obj("apps/v1beta1", "Deployment", Some("shop"), "web");
        let extra = obj("v1", "ConfigMap", Some("shop"), "extra");
        let other_ns = obj("v1", "ConfigMap", Some("other"), "extra");
        let cases = vec![
            (
                vec![web.clone(), extra.clone()],
                vec![web.clone()],
                vec![extra.clone()],
            ),
            (vec![web.clone()], vec![web_beta.clone()], vec![]),
            (
                vec![other_ns.clone()],
                vec![extra.clone()],
                vec![other_ns.clone()],
            ),
            (vec![], vec![web.clone()], vec![]),
            (
                vec![extra.clone(), extra.clone()],
                vec![],
                vec![extra.clone()],
            ),
        ];
        for (failed, good, want) in cases {
            assert_eq!(left_in_place(&failed, &good), want, "{failed:?} {good:?}");
        }
    }

    #[test]
    fn summary_table() {
        let r = |t: &str, ok: bool, m: Option<&str>| RollbackResult {
            target: t.into(),
            ok,
            message: m.map(Into::into),
        };
        let cases = vec![
            (vec![], ""),
            (
                vec![
                    r("us", true, None),
                    r("ap", true, None),
                    r("eu", false, Some("connection refused\nmore")),
                ],
                "rolled back 2 of 3; eu: connection refused",
            ),
            (
                vec![r("eu", false, None)],
                "rolled back 0 of 1; eu: rollback failed",
            ),
        ];
        for (results, want) in cases {
            assert_eq!(summary(&results), want);
        }
    }

    fn rec(revision: u64, status: ReleaseStatus, digest: &str) -> ReleaseRecord {
        ReleaseRecord {
            digest: Some(digest.into()),
            ..ReleaseRecord::for_test(revision, status)
        }
    }

    #[test]
    fn manual_target_table() {
        use ReleaseStatus::*;
        let history = vec![
            rec(1, Superseded, "a"),
            rec(2, Superseded, "b"),
            rec(3, Failed, "c"),
            // v4 is the automatic rollback to v2 (same manifests).
            rec(4, Deployed, "b"),
        ];
        let cases: Vec<(Option<u64>, bool, Result<u64, RollbackChoiceError>)> = vec![
            (None, false, Ok(1)),
            (Some(2), false, Ok(2)),
            (
                Some(3),
                false,
                Err(RollbackChoiceError::NotGood {
                    revision: 3,
                    status: Failed,
                }),
            ),
            (Some(3), true, Ok(3)),
            (Some(9), true, Err(RollbackChoiceError::Missing(9))),
        ];
        for (requested, force, want) in cases {
            assert_eq!(
                choose_manual_target(&history, requested, force),
                want,
                "{requested:?} force={force}"
            );
        }
        assert_eq!(
            choose_manual_target(&[], None, false),
            Err(RollbackChoiceError::NoHistory)
        );
        assert_eq!(
            choose_manual_target(&[rec(1, Deployed, "a")], None, false),
            Err(RollbackChoiceError::NoEarlierGood)
        );
        // A failure left in place: back to the last good one.
        let left = vec![rec(1, Deployed, "a"), rec(2, Failed, "b")];
        assert_eq!(choose_manual_target(&left, None, false), Ok(1));
        // Plain history: back to the previous one.
        let plain = vec![rec(1, Superseded, "a"), rec(2, Deployed, "b")];
        assert_eq!(choose_manual_target(&plain, None, false), Ok(1));
    }
}
