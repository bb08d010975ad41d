//! The release side of one target's deploy: the release settings, the lock and this run's
//! pending record taken before the apply (`take_lock`, `open_records`), and the lock given
//! back after.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cluster::apply::AppliedObject;
use crate::cluster::connect::{ClusterAccess, describe_error};
use crate::config::{CancelPolicy, Config, FailurePolicy, TargetConfig};
use crate::release::lock::{Lock, LockError, LockGuard, LockOptions};
use crate::release::{
    EncodedManifests, ObjectRef, ReleaseDraft, ReleaseError, ReleaseOrigin, ReleaseRecord,
    ReleaseStore, RunInfo,
};
use crate::report::Failure;
use crate::util::git::CommitInfo;

/// The release settings of the config, read in one place.
#[derive(Debug, Clone)]
pub struct ReleaseSettings {
    pub keep: usize,
    pub lock_timeout: Duration,
    pub rollback_timeout: Duration,
    pub on_failure: FailurePolicy,
    /// on_cancel: rollback (true) or leave.
    pub on_cancel_rollback: bool,
}

impl ReleaseSettings {
    pub fn from_config(config: &Config) -> ReleaseSettings {
        ReleaseSettings {
            keep: config.history.keep,
            lock_timeout: config.lock.timeout,
            rollback_timeout: config.rollback_timeout(),
            on_failure: config.on_failure,
            on_cancel_rollback: config.on_cancel == CancelPolicy::Rollback,
        }
    }
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
    /// The other records' revisions and statuses, as read with the lock held: what
    /// finishing this record tidies (without listing them again).
    others: Vec<(u64, crate::release::ReleaseStatus)>,
    /// This record as written when it began (None: unknown), to finish it without a read.
    written: Option<crate::release::Written>,
    /// The last good record's version as read, to supersede it without a read.
    last_good_written: Option<crate::release::Written>,
}

impl TargetRelease {
    /// What this run knows of the history since it began the record, for finishing it.
    pub fn known(&self) -> crate::release::Known<'_> {
        crate::release::Known {
            others: &self.others,
            record: &self.record,
            written: self.written.as_ref(),
            last_good: self.last_good.as_ref().zip(self.last_good_written.as_ref()),
        }
    }

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
pub fn lock_holder(target: &TargetConfig, env: &(dyn Fn(&str) -> Option<String> + Sync)) -> String {
    format!(
        "{} target {}",
        crate::release::lock::holder_identity(env),
        target.name
    )
}

/// Take one target's lock, waiting up to `timeout` for another holder. Returns the guard and
/// a note when an expired lease was taken over.
pub async fn take_lock(
    config: &Config,
    target: &TargetConfig,
    access: &ClusterAccess,
    timeout: Duration,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cancel: &CancellationToken,
) -> Result<(LockGuard, Vec<String>), PrepareError> {
    let namespace = config.history_namespace(target, &access.context_namespace);
    let holder = lock_holder(target, env);
    let options = LockOptions::from_env(timeout, env);
    let lock = tokio::select! {
        lock = Lock::acquire(access.client.clone(), &access.server, &config.app, &namespace, &holder, &options) => lock?,
        _ = cancel.cancelled() => return Err(PrepareError::Cancelled),
    };
    let notes = lock
        .took_over_from()
        .map(|previous| format!("took over the lock from {previous}, whose lease had expired"))
        .into_iter()
        .collect();
    Ok((lock, notes))
}

/// One target's history, read with its lock held, before its record is begun: the fleet
/// reads every target's first, so that the run's one revision is above all of them.
pub struct OpenHistory {
    store: ReleaseStore,
    lock: LockGuard,
    records: Vec<ReleaseRecord>,
    /// The records' versions as read, by revision.
    written: BTreeMap<u64, crate::release::Written>,
    default_namespace: String,
    /// What was repaired on the way (records a dead run left), for the report.
    pub notes: Vec<String>,
    /// The records a dead run left pending, marked abandoned on the way.
    pub abandoned: Vec<u64>,
}

impl OpenHistory {
    /// The target's records, oldest first, as read with the lock held.
    pub fn records(&self) -> &[ReleaseRecord] {
        &self.records
    }

    /// Cancelled when the lock is lost (another run took the Lease).
    pub fn lost_token(&self) -> CancellationToken {
        self.lock.lost_token()
    }

    /// The revisions kept on this target.
    pub fn revisions(&self) -> Vec<u64> {
        self.records.iter().map(|r| r.revision).collect()
    }

    /// The newest `deployed` record of this target.
    pub fn last_good(&self) -> Option<&ReleaseRecord> {
        crate::release::last_good(&self.records)
    }

    /// The default namespace of the target's objects, as its records keep it.
    pub fn default_namespace(&self) -> &str {
        &self.default_namespace
    }

    /// Gives the lock back without beginning a record.
    pub async fn release(self) {
        let _ = self.lock.release().await;
    }
}

/// With the lock held: mark records a dead run left pending as abandoned, supersede
/// `deployed` records an interrupted run left beside a newer one, and read the history. On an
/// error the lock is released.
pub async fn read_history(
    config: &Config,
    target: &TargetConfig,
    access: &ClusterAccess,
    lock: LockGuard,
) -> Result<OpenHistory, PrepareError> {
    let settings = ReleaseSettings::from_config(config);
    let default_namespace = config.default_namespace(target, &access.context_namespace);
    let namespace = config.history_namespace(target, &access.context_namespace);
    let mut notes = Vec::new();
    let mut marked = Vec::new();
    let store = ReleaseStore::for_access(access, &config.app, &namespace, settings.keep);
    let read = async {
        let crate::release::Opened {
            abandoned,
            repaired,
            records,
            written,
        } = store.open().await?;
        marked.clone_from(&abandoned);
        for revision in abandoned {
            notes.push(match records.iter().find(|r| r.revision == revision) {
                Some(r) => crate::release::abandoned_note(r, lock.took_over_from().is_some()),
                None => format!(
                    "release v{revision} was left pending by a run that did not finish it: marked failed (abandoned)"
                ),
            });
        }
        for revision in repaired {
            notes.push(format!(
                "release v{revision} was still marked deployed beside a newer deployed one (an earlier run stopped while tidying): marked superseded"
            ));
        }
        Ok::<_, ReleaseError>((records, written))
    }
    .await;
    match read {
        Ok((records, written)) => Ok(OpenHistory {
            store,
            written,
            lock,
            records,
            default_namespace,
            notes,
            abandoned: marked,
        }),
        Err(e) => {
            let _ = lock.release().await;
            Err(e.into())
        }
    }
}

/// Begins this run's record at the run's `revision` (a target whose history is past it
/// takes its own next one: see [`crate::release::revision_on_target`]), and reads the last
/// good record. `manifests` are the run's manifests as records store them (encoded once);
/// `origin` is what the record says it is (a deploy, or a manual rollback's re-apply).
/// On an error the lock is released.
pub async fn begin_record(
    history: OpenHistory,
    target: &TargetConfig,
    manifests: &EncodedManifests,
    commit: Option<&CommitInfo>,
    origin: ReleaseOrigin,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    revision: u64,
) -> Result<TargetRelease, PrepareError> {
    let OpenHistory {
        store,
        lock,
        records,
        written: mut versions,
        default_namespace,
        notes: _,
        abandoned: _,
    } = history;
    let last_good = crate::release::last_good(&records).cloned();
    let last_good_written = last_good
        .as_ref()
        .and_then(|good| versions.remove(&good.revision));
    let mut draft = ReleaseDraft::new(manifests.clone());
    draft.commit = commit.cloned();
    draft.target = Some(target.name.clone());
    draft.default_namespace = Some(default_namespace.clone());
    draft.run = RunInfo::from_env(env);
    match store
        .begin_after(draft, origin, &records, Some(revision))
        .await
    {
        Ok((record, written)) => Ok(TargetRelease {
            store,
            lock: Some(lock),
            last_good,
            others: crate::release::statuses_of(&records),
            written,
            last_good_written,
            record,
            default_namespace,
        }),
        Err(e) => {
            let _ = lock.release().await;
            Err(e.into())
        }
    }
}
