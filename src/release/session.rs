//! The release side of one target's deploy: the release settings, the lock and this run's
//! pending record taken before the apply (`prepare`), and the lock given back after.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{CancelPolicy, Config, FailurePolicy, TargetConfig};
use crate::kube::apply::AppliedObject;
use crate::kube::connect::{ClusterAccess, describe_error};
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
}

impl TargetRelease {
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

/// Before applying to a target: take the lock (waiting up to lock.timeout), mark records a
/// dead run left pending as abandoned, read the last good record and begin this run's
/// record. Returns notes for the report (a lock taken over, abandoned records).
/// `manifests` are the run's manifests as records store them (encoded once per run).
pub async fn prepare(
    config: &Config,
    target: &TargetConfig,
    access: &ClusterAccess,
    manifests: &EncodedManifests,
    commit: Option<&CommitInfo>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cancel: &CancellationToken,
) -> Result<(TargetRelease, Vec<String>), PrepareError> {
    let settings = ReleaseSettings::from_config(config);
    let default_namespace = config.default_namespace(target, &access.context_namespace);
    let namespace = config.history_namespace(target, &access.context_namespace);
    // Per target, so two targets that share a cluster and namespace never share the lock.
    let holder = format!(
        "{} target {}",
        crate::release::lock::holder_identity(env),
        target.name
    );
    let options = LockOptions::from_env(settings.lock_timeout, env);
    let app = &config.app;
    let lock = tokio::select! {
        lock = Lock::acquire(access.client.clone(), &access.server, app, &namespace, &holder, &options) => lock?,
        _ = cancel.cancelled() => return Err(PrepareError::Cancelled),
    };
    let mut notes = Vec::new();
    if let Some(previous) = lock.took_over_from() {
        notes.push(format!(
            "took over the lock from {previous}, whose lease had expired"
        ));
    }
    let store = ReleaseStore::for_access(access, app, &namespace, settings.keep);
    let begun = async {
        for revision in store.mark_abandoned().await? {
            notes.push(format!(
                "release v{revision} was left pending by a run that died: marked failed (abandoned)"
            ));
        }
        let records = store.list().await?;
        let last_good = crate::release::last_good(&records).cloned();
        let mut draft = ReleaseDraft::new(manifests.clone());
        draft.commit = commit.cloned();
        draft.target = Some(target.name.clone());
        draft.default_namespace = Some(default_namespace.clone());
        draft.run = RunInfo::from_env(env);
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
                default_namespace,
            },
            notes,
        )),
        Err(e) => {
            let _ = lock.release().await;
            Err(e.into())
        }
    }
}
