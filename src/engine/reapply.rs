//! Re-apply of stored (or rebuilt-from-git) manifests as a new revision on one target:
//! record, server-side apply without pruning, wait, finish the record. Used by the automatic
//! rollback and by `rollguard rollback`.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::{AppliedObject, ApplyOptions, apply_failures, apply_set};
use crate::cluster::connect::{ClusterAccess, describe_error};
use crate::cluster::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::config::{Config, FailFastConfig, SecretsPolicy};
use crate::manifests::{ManifestObject, ManifestSet, Origin};
use crate::release::session::applied_ref;
use crate::release::{
    EncodedManifests, ObjectRef, ReleaseDraft, ReleaseError, ReleaseOrigin, ReleaseRecord,
    ReleaseStatus, ReleaseStore, RunInfo, fill_secret_stubs, other_namespace_secrets, stub_digest,
};
use crate::report::Failure;
use crate::util::git::{CommitInfo, GitError};

/// Why the manifests of an earlier revision or commit could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ManifestsError {
    /// git could not give the commit (no git, not a repository, a fetch that failed): a
    /// failure of the environment, never bad input.
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("manifests at commit {sha}: {source}")]
    Load {
        sha: String,
        #[source]
        source: crate::manifests::ManifestError,
    },
    #[error(
        "release v{revision} keeps Secrets of other namespaces only as digests (history.secrets: digest) and has no commit to re-read them from git: restore them by hand or roll back to another revision"
    )]
    DigestsWithoutCommit { revision: u64 },
    /// A Secret kept only as a digest is not at the commit as the release applied it.
    #[error("release v{revision}: {source}")]
    Stubs {
        revision: u64,
        #[source]
        source: crate::release::StubError,
    },
    #[error("release v{revision} holds neither manifests nor a commit to rebuild them from")]
    Empty { revision: u64 },
    /// The stored manifests are unreadable, and git could not rebuild them either.
    #[error("{corrupt}; and from git: {source}")]
    CorruptAndGit {
        corrupt: ReleaseError,
        #[source]
        source: Box<ManifestsError>,
    },
    /// The cluster did not give the record (`why` as the cluster errors are described).
    #[error("reading release v{revision}: {why}")]
    Read {
        revision: u64,
        why: String,
        #[source]
        source: ReleaseError,
    },
    /// git and the render command did not finish within the rollback's time budget.
    #[error("reading the manifests from git did not finish within the rollback's time budget")]
    OutOfTime,
    /// The blocking task that reads git ended without an answer (the runtime is stopping).
    #[error("internal error reading the manifests from git: {0}")]
    Stopped(#[source] tokio::task::JoinError),
}

impl ManifestsError {
    /// Whether the revision itself cannot be rolled back to (what it keeps is not enough):
    /// a refusal of the input (exit 2). git, the manifests at a commit and the cluster are
    /// failures (exit 1): a failed `git fetch` is never bad input.
    pub fn is_refusal(&self) -> bool {
        match self {
            ManifestsError::DigestsWithoutCommit { .. }
            | ManifestsError::Stubs { .. }
            | ManifestsError::Empty { .. } => true,
            ManifestsError::Git(GitError::Unreachable { detail, .. }) => {
                remote_lacks_commit(detail)
            }
            ManifestsError::Git(_)
            | ManifestsError::Load { .. }
            | ManifestsError::CorruptAndGit { .. }
            | ManifestsError::Read { .. }
            | ManifestsError::OutOfTime
            | ManifestsError::Stopped(_) => false,
        }
    }
}

/// Whether git's answer to fetching one commit says that origin has no such commit (the
/// name is wrong: bad input), rather than that origin could not be reached (a failure).
pub fn remote_lacks_commit(git_stderr: &str) -> bool {
    [
        "not our ref",
        "couldn't find remote ref",
        "unadvertised object",
        "fetch succeeded but the commit is still missing",
    ]
    .iter()
    .any(|m| git_stderr.contains(m))
}

/// The manifests of the revision `record` names, read from the cluster only now: a deploy
/// that succeeds never needs them.
pub async fn stored_manifests(
    store: &ReleaseStore,
    config: &Config,
    record: &ReleaseRecord,
    access: &ClusterAccess,
    until: Option<Instant>,
) -> Result<Vec<serde_json::Value>, ManifestsError> {
    match store.get(record.revision).await {
        Ok(full) => record_manifests(config, &full, until).await,
        // Unreadable manifests: the record's commit can still rebuild them from git.
        Err(e @ ReleaseError::Corrupt { .. }) => {
            tracing::warn!(
                "{e}; rebuilding the manifests of v{} from git",
                record.revision
            );
            let mut head = record.clone();
            head.manifests = None;
            record_manifests(config, &head, until)
                .await
                .map_err(|source| ManifestsError::CorruptAndGit {
                    corrupt: e,
                    source: Box::new(source),
                })
        }
        Err(e) => {
            let why = match e.kube_error() {
                Some(k) => describe_error(k, &access.server).message,
                None => e.to_string(),
            };
            Err(ManifestsError::Read {
                revision: record.revision,
                why,
                source: e,
            })
        }
    }
}

/// The manifests of a record: as stored (Secrets kept only as digests re-read from git at
/// its commit), else rebuilt from git at its commit.
pub async fn record_manifests(
    config: &Config,
    record: &ReleaseRecord,
    until: Option<Instant>,
) -> Result<Vec<serde_json::Value>, ManifestsError> {
    let revision = record.revision;
    if let Some(bodies) = &record.manifests {
        let mut bodies = bodies.clone();
        if bodies.iter().any(|b| stub_digest(b).is_some()) {
            let commit = record
                .commit
                .as_ref()
                .ok_or(ManifestsError::DigestsWithoutCommit { revision })?;
            let from_git = manifests_from_git_off_runtime(config, &commit.sha, until).await?;
            let default_namespace = record.default_namespace.clone().unwrap_or_default();
            fill_secret_stubs(&mut bodies, &from_git, &default_namespace, &commit.sha)
                .map_err(|source| ManifestsError::Stubs { revision, source })?;
        }
        return Ok(bodies);
    }
    let commit = record
        .commit
        .as_ref()
        .ok_or(ManifestsError::Empty { revision })?;
    manifests_from_git_off_runtime(config, &commit.sha, until).await
}

/// [`manifests_from_git`] on a blocking thread: git and a `render:` command block, and the
/// async runtime's threads must not (a test keeps every such call site off them). With
/// `until`, every git and render command it runs is due by then, and so is its answer.
pub async fn manifests_from_git_off_runtime(
    config: &Config,
    sha: &str,
    until: Option<Instant>,
) -> Result<Vec<serde_json::Value>, ManifestsError> {
    let (config, sha) = (config.clone(), sha.to_string());
    let std_until = until.map(Instant::into_std);
    let work =
        tokio::task::spawn_blocking(move || manifests_from_git_until(&config, &sha, std_until));
    let done = match until {
        Some(until) => tokio::time::timeout_at(until, work)
            .await
            .map_err(|_| ManifestsError::OutOfTime)?,
        None => work.await,
    };
    match done {
        Ok(result) => result,
        // A panic goes on unwinding: it is a bug (exit 4), not a failed rollback.
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => Err(ManifestsError::Stopped(e)),
        },
    }
}

/// [`manifests_from_git`] with every git and render command due by `until`.
pub fn manifests_from_git_until(
    config: &Config,
    sha: &str,
    until: Option<std::time::Instant>,
) -> Result<Vec<serde_json::Value>, ManifestsError> {
    crate::util::runner::within(until, || manifests_from_git(config, sha))
}

/// The manifests of the config's manifest source at commit `sha`, from a temporary checkout.
pub fn manifests_from_git(
    config: &Config,
    sha: &str,
) -> Result<Vec<serde_json::Value>, ManifestsError> {
    let set = manifests_at_commit(config, sha)?;
    Ok(set.objects.into_iter().map(|o| o.body).collect())
}

/// The validated manifest set of the config's source at commit `sha` (a `render:` command
/// runs in the checkout), read from a temporary checkout that is removed afterwards.
pub fn manifests_at_commit(config: &Config, sha: &str) -> Result<ManifestSet, ManifestsError> {
    let checkout = crate::util::git::Checkout::at(&config.base_dir, sha, config.git_timeout)?;
    let mut at_commit = config.clone();
    at_commit.base_dir = checkout.map_path(&config.base_dir);
    crate::manifests::load(&at_commit).map_err(|source| ManifestsError::Load {
        sha: sha.to_string(),
        source,
    })
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
                source: None,
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
    format!(
        "re-applied: {}; not re-applied: {}",
        names(&done),
        names(&left)
    )
}

/// One re-apply of stored (or rebuilt) manifests as a new revision on one target.
pub struct ReApply<'a> {
    pub access: &'a ClusterAccess,
    pub store: &'a ReleaseStore,
    pub target: &'a str,
    /// The namespace for namespaced objects without one.
    pub default_namespace: String,
    pub bodies: Vec<serde_json::Value>,
    pub commit: Option<CommitInfo>,
    pub origin: ReleaseOrigin,
    /// The number the run gives this rollback on every target it rolls back (None: this
    /// target's next one).
    pub revision: Option<u64>,
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
    /// The app's field manager.
    pub field_manager: String,
    /// `--force-conflicts` of the run.
    pub force_conflicts: bool,
    /// Requests in flight at once (the run's share per target, and the fleet's bound).
    pub in_flight: crate::util::in_order::Window,
    pub fail_fast: FailFastConfig,
    /// Where the new record says it ran.
    pub run: RunInfo,
    /// `history.secrets`: how the new record keeps Secrets of other namespaces.
    pub secrets: SecretsPolicy,
}

/// Why a re-apply did not end healthy. `to` is where it went: "v3" or "commit abc1234".
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error("rollback to {to}: {source}")]
    Encode {
        to: String,
        #[source]
        source: ReleaseError,
    },
    /// Its record could not be begun (`why` as the cluster errors are described).
    #[error("rollback to {to}: {why}")]
    Begin {
        to: String,
        why: String,
        #[source]
        source: ReleaseError,
    },
    /// The apply stopped: the first failure, then what was and was not re-applied.
    #[error("rollback to {to}: {why}; {progress}")]
    Apply {
        to: String,
        why: String,
        progress: String,
        /// What was re-applied before it stopped.
        reapplied: Vec<ObjectRef>,
    },
    /// The run was cancelled and the rollout had not finished when rollguard had to exit.
    #[error("rollback to {to} sent; not yet healthy when rollguard had to exit")]
    SentUnverified { to: String },
    /// Re-applied, but the rollout failed or timed out.
    #[error("rollback to {to}: {why}")]
    Unhealthy { to: String, why: String },
    #[error("rollback to {to} cancelled")]
    Cancelled { to: String },
    #[error(
        "rollback to {to} stopped: the lock was lost; its record v{revision} is left to the new holder"
    )]
    LockLost { to: String, revision: u64 },
    #[error("rollback to {to} applied, but its record v{revision} could not be written: {why}")]
    Record {
        to: String,
        revision: u64,
        why: String,
        #[source]
        source: ReleaseError,
    },
}

impl RollbackError {
    /// Sent, but not seen healthy because the run was cancelled: the outcome is
    /// `cancelled`, not `rollback-failed`.
    pub fn sent_unverified(&self) -> bool {
        matches!(
            self,
            RollbackError::SentUnverified { .. } | RollbackError::Cancelled { .. }
        )
    }

    /// What it had re-applied when its apply stopped (None: it stopped elsewhere).
    pub fn stopped_after(&self) -> Option<&[ObjectRef]> {
        match self {
            RollbackError::Apply { reapplied, .. } => Some(reapplied),
            RollbackError::Encode { .. } | RollbackError::Begin { .. } => Some(&[]),
            _ => None,
        }
    }
}

impl ReApply<'_> {
    /// Record, apply (server-side, never pruning) and wait. Ok(new revision).
    pub async fn run(self) -> Result<u64, RollbackError> {
        let access = self.access;
        let to = &self.destination;
        let revision = self.begin_record().await?;
        let set = manifest_set_from_bodies(&self.bodies, to);
        let options = ApplyOptions {
            field_manager: self.field_manager.clone(),
            force: self.force_conflicts,
            dry_run: false,
            default_namespace: self.default_namespace.clone(),
            in_flight: self.in_flight.clone(),
            deadline: self.deadline,
        };
        // The first signal cancelled the deploy; the rollback itself runs to its deadline or
        // until `stop` (a second signal ends the process).
        let applied = apply_set(&access.client, &set, &options, &self.stop, &|_, _| {}).await;
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
                Err(RollbackError::Apply {
                    to: to.clone(),
                    why,
                    progress: rollback_progress(&set, &applied.applied),
                    reapplied: applied.applied.iter().map(applied_ref).collect(),
                })
            }
            Ok(()) => self.wait_healthy(&applied.applied).await,
        };
        if self.lost.is_cancelled() {
            return Err(RollbackError::LockLost {
                to: to.clone(),
                revision,
            });
        }
        let objects = Some(applied.applied.iter().map(applied_ref).collect());
        let (status, reason) = match &outcome {
            Ok(()) => (ReleaseStatus::Deployed, None),
            Err(e) => (ReleaseStatus::Failed, Some(e.to_string())),
        };
        if let Err(e) = self
            .store
            .finish_with_objects(revision, status, reason, objects)
            .await
        {
            return Err(RollbackError::Record {
                to: to.clone(),
                revision,
                why: self.describe(&e),
                source: e,
            });
        }
        outcome.map(|()| revision)
    }

    /// A history error as the cluster's answer says it, else as the store does.
    fn describe(&self, e: &ReleaseError) -> String {
        match e.kube_error() {
            Some(k) => describe_error(k, &self.access.server).message,
            None => e.to_string(),
        }
    }

    /// Encodes the manifests for the history and begins the rollback's record: its revision.
    async fn begin_record(&self) -> Result<u64, RollbackError> {
        let to = &self.destination;
        let others = other_namespace_secrets(
            &self.bodies,
            self.store.namespace(),
            &self.default_namespace,
        );
        let manifests = EncodedManifests::encode_for_history(
            &self.bodies,
            &others,
            self.secrets,
            &self.default_namespace,
        )
        .map_err(|e| RollbackError::Encode {
            to: to.clone(),
            source: e.into(),
        })?;
        let mut draft = ReleaseDraft::new(manifests);
        draft.commit = self.commit.clone();
        draft.target = Some(self.target.to_string());
        draft.default_namespace = Some(self.default_namespace.clone());
        draft.run = self.run.clone();
        let record = self
            .store
            .begin_numbered(draft, self.origin, self.revision)
            .await
            .map_err(|source| RollbackError::Begin {
                to: to.clone(),
                why: self.describe(&source),
                source,
            })?;
        Ok(record.revision)
    }

    /// Waits for the rollout of what was re-applied.
    async fn wait_healthy(&self, applied: &[AppliedObject]) -> Result<(), RollbackError> {
        let to = &self.destination;
        let wait = WaitOptions {
            deadline: self.deadline,
            timeout: self.timeout,
            fail_fast: self.fail_fast.clone(),
            server: self.access.server.clone(),
            // The rollback's own wait: its failures are about the old revision,
            // whose logs the failed deploy's report already holds.
            log_lines: 0,
        };
        let waited = wait_for_rollout(
            &self.access.watch_client,
            applied,
            &wait,
            &self.stop,
            &|_| {},
        )
        .await;
        match waited.result {
            Ok(()) => Ok(()),
            Err(WaitFailure::Timeout(_)) if self.cancelled => {
                Err(RollbackError::SentUnverified { to: to.clone() })
            }
            Err(WaitFailure::Failed(f)) | Err(WaitFailure::Timeout(f)) => {
                Err(RollbackError::Unhealthy {
                    to: to.clone(),
                    why: f.first().map(Failure::headline).unwrap_or_default(),
                })
            }
            Err(WaitFailure::Cancelled) => Err(RollbackError::Cancelled { to: to.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::remote_lacks_commit;

    #[test]
    fn a_missing_commit_is_told_apart_from_an_unreachable_origin() {
        // git 2.47's answers.
        let cases = [
            (
                "fatal: remote error: upload-pack: not our ref 0123456789abcdef0123456789abcdef01234567",
                true,
            ),
            ("fatal: couldn't find remote ref nosuchref", true),
            (
                "error: Server does not allow request for unadvertised object 0123456789abcdef",
                true,
            ),
            ("fetch succeeded but the commit is still missing", true),
            (
                "fatal: unable to access 'https://127.0.0.1:1/x.git/': Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server",
                false,
            ),
            (
                "fatal: '/nonexistent/origin.git' does not appear to be a git repository\nfatal: Could not read from remote repository.",
                false,
            ),
            (
                "fatal: unable to access 'https://github.com/o/r/': Could not resolve host: github.com",
                false,
            ),
        ];
        for (stderr, missing) in cases {
            assert_eq!(remote_lacks_commit(stderr), missing, "{stderr}");
        }
    }
}
