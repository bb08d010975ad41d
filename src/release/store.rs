//! The I/O of release records: [`ReleaseStore`] lists, reads, begins and finishes the records
//! of one app in one history namespace, and prunes them; the history namespace is created when
//! missing.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::cluster::retry::{RetryBudget, RetryError};
use crate::util::git::CommitInfo;

use super::codec::*;
use super::record::*;

/// What a new revision holds, given to [`ReleaseStore::begin`].
#[derive(Debug, Clone)]
pub struct ReleaseDraft {
    pub manifests: EncodedManifests,
    pub commit: Option<CommitInfo>,
    pub target: Option<String>,
    pub default_namespace: Option<String>,
    pub run: RunInfo,
}

impl ReleaseDraft {
    pub fn new(manifests: EncodedManifests) -> ReleaseDraft {
        ReleaseDraft {
            manifests,
            commit: None,
            target: None,
            default_namespace: None,
            run: RunInfo::default(),
        }
    }
}

/// Records of one app in one cluster's history namespace.
///
/// Every call retries transient errors (`cluster/retry.rs`). Writes are idempotent and ordered so
/// that the records stay consistent whatever fails when: a create whose answer was lost is
/// recognised as ours; status changes are conditional PUTs (resourceVersion) that only move
/// forward; a new record becomes `deployed` before older ones are `superseded`, so the
/// newest `deployed` record is always the last good one, and [`ReleaseStore::repair`] (run
/// at the start of every deploy) supersedes any older `deployed` record a failure left
/// behind; pruning is best effort and never fails the caller.
#[derive(Clone)]
pub struct ReleaseStore {
    client: Client,
    /// The API server's URL, for messages.
    server: String,
    app: String,
    namespace: String,
    keep: usize,
    /// Problems that did not fail the call (a prune or supersede that did not go through),
    /// for the report: see [`ReleaseStore::take_warnings`].
    warnings: Arc<std::sync::Mutex<Vec<String>>>,
    /// The first retry delay (tests shorten it).
    retry_base: std::time::Duration,
}

impl ReleaseStore {
    /// `keep`: history.keep (at most this many records stay; the last good one always stays).
    /// Errors name the server as "the API server"; [`ReleaseStore::for_access`] names it.
    pub fn new(client: Client, app: &str, namespace: &str, keep: usize) -> ReleaseStore {
        ReleaseStore {
            client,
            server: "the API server".to_string(),
            app: app.to_string(),
            namespace: namespace.to_string(),
            keep,
            warnings: Arc::default(),
            retry_base: std::time::Duration::from_millis(100),
        }
    }

    /// The same store with another first retry delay (tests: no sleeping through faults).
    pub fn with_retry_base(mut self, base: std::time::Duration) -> ReleaseStore {
        self.retry_base = base;
        self
    }

    /// The warnings collected so far (emptied).
    pub fn take_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }

    fn warn(&self, text: String) {
        tracing::warn!("{text}");
        if let Ok(mut w) = self.warnings.lock() {
            w.push(text);
        }
    }

    /// One API call under the retry policy (transient errors retried for a few seconds).
    async fn call<T, F, Fut>(&self, what: &str, op: F) -> std::result::Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
    {
        use crate::cluster::retry::retry_call;
        let budget = RetryBudget {
            base_delay: self.retry_base,
            max_delay: (self.retry_base * 20).min(RetryBudget::bookkeeping().max_delay),
            ..RetryBudget::bookkeeping()
        };
        retry_call(what, &budget, op).await
    }

    /// The records on a connected target; errors name its server's URL.
    pub fn for_access(
        access: &crate::cluster::connect::ClusterAccess,
        app: &str,
        namespace: &str,
        keep: usize,
    ) -> ReleaseStore {
        ReleaseStore {
            server: access.server.clone(),
            ..ReleaseStore::new(access.client.clone(), app, namespace, keep)
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn app(&self) -> &str {
        &self.app
    }

    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn kube_err(&self, action: impl Into<String>, source: kube::Error) -> ReleaseError {
        ReleaseError::Kube {
            action: action.into(),
            namespace: self.namespace.clone(),
            server: self.server.clone(),
            source: Box::new(source),
        }
    }

    fn selector(&self) -> String {
        format!("{LABEL_MANAGED_BY}=rollguard,{LABEL_APP}={}", self.app)
    }

    /// Every readable record, oldest first, without its manifests (read one with
    /// [`ReleaseStore::get`]). Unreadable ones are skipped with a warning (a corrupt record
    /// must not block deploys).
    pub async fn list(&self) -> Result<Vec<ReleaseRecord>> {
        self.list_decoded(false).await
    }

    /// [`ReleaseStore::list`] with every record's manifests (for `history`, whose scrubber
    /// must know the Secret values a stored message may quote).
    pub async fn list_with_manifests(&self) -> Result<Vec<ReleaseRecord>> {
        self.list_decoded(true).await
    }

    async fn list_decoded(&self, with_manifests: bool) -> Result<Vec<ReleaseRecord>> {
        Ok(self
            .list_stored(with_manifests)
            .await?
            .into_iter()
            .map(|(record, _)| record)
            .collect())
    }

    /// [`ReleaseStore::list_decoded`], each record with its version as stored.
    async fn list_stored(
        &self,
        with_manifests: bool,
    ) -> Result<Vec<(ReleaseRecord, Option<Written>)>> {
        let lp = ListParams::default().labels(&self.selector());
        let api = self.api();
        let list = match self.call("list release records", || api.list(&lp)).await {
            Ok(list) => list,
            // No namespace yet means no history yet.
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(self.kube_err("listing release records", e)),
        };
        let mut out = Vec::new();
        for secret in list.items {
            match self.decode_secret(&secret, with_manifests) {
                Ok(record) => {
                    let written = Written::of(&secret);
                    out.push((record, written));
                }
                Err(e) => tracing::warn!("{e}; skipping it"),
            }
        }
        out.sort_by_key(|(r, _)| r.revision);
        Ok(out)
    }

    fn decode_secret(&self, secret: &Secret, with_manifests: bool) -> Result<ReleaseRecord> {
        let empty = BTreeMap::new();
        record_from_data(secret.data.as_ref().unwrap_or(&empty), with_manifests).map_err(|reason| {
            ReleaseError::Corrupt {
                name: secret.metadata.name.clone().unwrap_or_default(),
                namespace: self.namespace.clone(),
                reason,
            }
        })
    }

    /// The record of one revision, with its manifests.
    pub async fn get(&self, revision: u64) -> Result<ReleaseRecord> {
        let secret = self.get_secret(revision).await?;
        self.decode_secret(&secret, true)
    }

    async fn get_secret(&self, revision: u64) -> Result<Secret> {
        let name = secret_name(&self.app, revision);
        let not_found = || ReleaseError::NotFound {
            app: self.app.clone(),
            namespace: self.namespace.clone(),
            revision,
        };
        let api = self.api();
        match self
            .call("read a release record", || api.get_opt(&name))
            .await
        {
            Ok(Some(secret)) => Ok(secret),
            Ok(None) => Err(not_found()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Err(not_found()),
            Err(e) => Err(self.kube_err(format!("reading release record {name}"), e)),
        }
    }

    /// The newest `deployed` record, with its manifests.
    pub async fn last_good(&self) -> Result<Option<ReleaseRecord>> {
        let records = self.list().await?;
        match last_good(&records) {
            Some(good) => self.get(good.revision).await.map(Some),
            None => Ok(None),
        }
    }

    /// Write a new `pending` record at the next revision (creating the history namespace
    /// if missing). Call with the lock held.
    pub async fn begin(&self, draft: ReleaseDraft, origin: ReleaseOrigin) -> Result<ReleaseRecord> {
        self.begin_numbered(draft, origin, None).await
    }

    /// [`ReleaseStore::begin`] at the run's revision `wanted` (see [`revision_on_target`]).
    pub async fn begin_numbered(
        &self,
        draft: ReleaseDraft,
        origin: ReleaseOrigin,
        wanted: Option<u64>,
    ) -> Result<ReleaseRecord> {
        ensure_namespace(&self.client, &self.server, &self.namespace).await?;
        let existing = self.list().await?;
        self.begin_after(draft, origin, &existing, wanted)
            .await
            .map(|(record, _)| record)
    }

    /// [`ReleaseStore::begin`] for a caller that just listed the records (and holds the lock,
    /// so the namespace exists): saves two requests. The record returned has no manifests;
    /// beside it, what finishing it needs to write it without reading it first (None when the
    /// server's answer to the create was lost).
    pub async fn begin_after(
        &self,
        draft: ReleaseDraft,
        origin: ReleaseOrigin,
        existing: &[ReleaseRecord],
        wanted: Option<u64>,
    ) -> Result<(ReleaseRecord, Option<Written>)> {
        let revisions: Vec<u64> = existing.iter().map(|r| r.revision).collect();
        let mut revision = revision_on_target(&revisions, wanted);
        let ReleaseDraft {
            manifests,
            commit,
            target,
            default_namespace,
            run,
        } = draft;
        let mut record = ReleaseRecord {
            app: self.app.clone(),
            target,
            revision,
            status: ReleaseStatus::Pending,
            reason: None,
            kind: origin.kind(),
            rollback_of: origin.rollback_of(),
            commit,
            started_at: Timestamp::now(),
            finished_at: None,
            run,
            digest: Some(release_digest(
                &manifests.digest,
                default_namespace.as_deref(),
            )),
            default_namespace,
            objects: manifests.objects,
            other_namespace_secrets: manifests.other_namespace_secrets.clone(),
            manifests: None,
            manifests_omitted: false,
            stages: Vec::new(),
        };
        // A name taken despite the lock (e.g. an unreadable record) moves to the next number.
        for _ in 0..5 {
            record.revision = revision;
            let secret = self.to_secret(&mut record, None, Some(manifests.gz.to_vec()))?;
            let api = self.api();
            let post = PostParams::default();
            let created = self
                .call("create a release record", || api.create(&post, &secret))
                .await;
            match created {
                Ok(created) => {
                    let written = created.metadata.resource_version.map(|version| Written {
                        version,
                        manifests_bytes: Written::manifests_bytes(&secret),
                    });
                    return Ok((record, written));
                }
                // A retried create whose first answer was lost finds its own record: done.
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    if self.is_ours(revision, &record).await {
                        return Ok((record, None));
                    }
                    revision += 1
                }
                Err(e) => {
                    return Err(self.kube_err(
                        format!("creating release record {}", record.secret_name()),
                        e,
                    ));
                }
            }
        }
        Err(ReleaseError::NoFreeRevision {
            revision,
            app: self.app.clone(),
        })
    }

    /// True when the stored record of `revision` is the one `mine` describes (same start
    /// time, digest and run): a create that went through although its answer was lost.
    async fn is_ours(&self, revision: u64, mine: &ReleaseRecord) -> bool {
        let Ok(secret) = self.get_secret(revision).await else {
            return false;
        };
        self.decode_secret(&secret, false).is_ok_and(|stored| {
            stored.started_at == mine.started_at
                && stored.digest == mine.digest
                && stored.run == mine.run
                && stored.target == mine.target
        })
    }

    /// Build the Secret for a record, on top of `base` (whose manifests it keeps unless new
    /// ones are given); sets `manifests_omitted` when they had to be left out.
    fn to_secret(
        &self,
        record: &mut ReleaseRecord,
        base: Option<&Secret>,
        manifests: Option<Vec<u8>>,
    ) -> Result<Secret> {
        let manifests = manifests.or_else(|| {
            base.and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(MANIFESTS_KEY))
                .map(|b| b.0.clone())
        });
        let (data, omitted) = secret_data(record, manifests)?;
        if omitted {
            tracing::warn!(
                "release record v{} of {} is over the Secret size limit: keeping the commit only",
                record.revision,
                self.app
            );
            record.manifests_omitted = true;
        }
        let labels = BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), "rollguard".to_string()),
            (LABEL_APP.to_string(), self.app.clone()),
            (LABEL_REVISION.to_string(), record.revision.to_string()),
            (LABEL_STATUS.to_string(), record.status.as_str().to_string()),
        ]);
        let mut metadata = base.map(|s| s.metadata.clone()).unwrap_or_default();
        metadata.name = Some(record.secret_name());
        metadata.namespace = Some(self.namespace.clone());
        metadata.managed_fields = None;
        let mut all_labels = metadata.labels.take().unwrap_or_default();
        all_labels.extend(labels);
        metadata.labels = Some(all_labels);
        Ok(Secret {
            metadata,
            type_: Some(RECORD_TYPE.to_string()),
            data: Some(data),
            ..Secret::default()
        })
    }

    /// Change a record's status (and reason, finish time...) with a conditional PUT, retrying
    /// on a conflict with a fresh read. Statuses only move forward ([`transition_allowed`]):
    /// e.g. a record another run marked abandoned is not turned into `deployed`. The
    /// manifests are carried over as stored, never decoded.
    async fn update(
        &self,
        revision: u64,
        status: ReleaseStatus,
        change: impl Fn(&mut ReleaseRecord),
    ) -> Result<ReleaseRecord> {
        for _ in 0..5 {
            let secret = self.get_secret(revision).await?;
            // A record written before the manifests had their own key moves them there.
            let legacy = secret
                .data
                .as_ref()
                .is_none_or(|d| !d.contains_key(MANIFESTS_KEY));
            let mut record = self.decode_secret(&secret, legacy)?;
            let moved = match record.manifests.take() {
                Some(bodies) => Some(gzip_json(&bodies)?),
                None => None,
            };
            if !transition_allowed(record.status, status) {
                return Err(ReleaseError::Transition {
                    name: record.secret_name(),
                    namespace: self.namespace.clone(),
                    from: record.status,
                    to: status,
                });
            }
            record.status = status;
            change(&mut record);
            let updated = self.to_secret(&mut record, Some(&secret), moved)?;
            drop(secret);
            let name = record.secret_name();
            let api = self.api();
            let post = PostParams::default();
            let replaced = self
                .call("update a release record", || {
                    api.replace(&name, &post, &updated)
                })
                .await;
            match replaced {
                Ok(_) => return Ok(record),
                // Someone changed it between our read and write: read again.
                Err(kube::Error::Api(status)) if status.is_conflict() => {}
                Err(e) => {
                    return Err(self.kube_err(format!("updating release record {name}"), e));
                }
            }
        }
        Err(ReleaseError::Conflict {
            name: secret_name(&self.app, revision),
            namespace: self.namespace.clone(),
        })
    }

    /// Finish a revision: set its status (and reason) and end time. On `deployed`, older
    /// `deployed` records become `superseded`. Then the history is pruned to `keep`.
    pub async fn finish(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
    ) -> Result<ReleaseRecord> {
        self.finish_with_objects(revision, status, reason, None)
            .await
    }

    /// [`ReleaseStore::finish`], replacing the object list with what was really applied.
    pub async fn finish_with_objects(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
        objects: Option<Vec<ObjectRef>>,
    ) -> Result<ReleaseRecord> {
        self.finish_with_stages(revision, status, reason, objects, Vec::new(), None)
            .await
    }

    /// [`ReleaseStore::finish_with_objects`], also recording the script stages that ran
    /// (their output is dropped: it belongs in the report, not in the cluster). `known`: what
    /// the caller knows of the history since it began this record with the lock held, which
    /// saves reading the record again and listing the others to tidy them (None: read both).
    /// Stale knowledge, after a lost lock, costs a read (the record changed: its version
    /// does not match) or tidies less (it misses newer records, never invents one).
    pub async fn finish_with_stages(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
        objects: Option<Vec<ObjectRef>>,
        stages: Vec<crate::report::StageResult>,
        known: Option<Known<'_>>,
    ) -> Result<ReleaseRecord> {
        let stages: Vec<_> = stages
            .into_iter()
            .map(|mut s| {
                s.output.clear();
                s.message = s.message.as_deref().map(crate::report::redact::scrub);
                s
            })
            .collect();
        // A record is a sink too: a message that quotes a secret value is stored scrubbed.
        let reason = reason.as_deref().map(crate::report::redact::scrub);
        let change = |r: &mut ReleaseRecord| {
            r.reason = reason.clone();
            r.finished_at = Some(Timestamp::now());
            if let Some(objects) = &objects {
                r.objects = objects.clone();
            }
            if !stages.is_empty() {
                r.stages = stages.clone();
            }
        };
        let begun = known
            .and_then(|k| Some((k.record, k.written?)))
            .filter(|(record, _)| record.revision == revision);
        let rewritten = match begun {
            Some((record, written)) => self.patch_known(record, written, status, &change).await?,
            None => None,
        };
        let record = match rewritten {
            Some(record) => record,
            None => self.update(revision, status, change).await?,
        };
        let others = known.map(|k| k.others);
        // The record is final from here: what follows is tidying, which a failure only
        // postpones (the newest `deployed` record is the last good one either way, and the
        // next deploy's repair supersedes what is left).
        let listed = match others {
            Some(others) => Ok(others
                .iter()
                .copied()
                .filter(|(r, _)| *r != revision)
                .chain([(revision, record.status)])
                .collect()),
            None => self.statuses().await,
        };
        let mut statuses = match listed {
            Ok(statuses) => statuses,
            Err(e) => {
                self.warn(format!(
                    "release history not tidied after v{revision}: {e}; the next deploy does it"
                ));
                return Ok(record);
            }
        };
        if status == ReleaseStatus::Deployed {
            for older in supersede_choice(&statuses, revision) {
                match self.supersede(older, known.as_ref()).await {
                    Ok(_) => {
                        for entry in statuses.iter_mut().filter(|(r, _)| *r == older) {
                            entry.1 = ReleaseStatus::Superseded;
                        }
                    }
                    Err(e) => self.warn(format!(
                        "release v{older} could not be marked superseded: {e}; v{revision} is the last good one all the same, and the next deploy marks it"
                    )),
                }
            }
        }
        if let Err(e) = self
            .delete_revisions(&prune_choice(&statuses, self.keep))
            .await
        {
            self.warn(format!(
                "old release records not pruned: {e}; the next deploy tries again"
            ));
        }
        Ok(record)
    }

    /// Marks `older` superseded: with a patch when it is the last good record as read under
    /// the lock, else read and updated.
    async fn supersede(&self, older: u64, known: Option<&Known<'_>>) -> Result<()> {
        let last_good = known
            .and_then(|k| k.last_good)
            .filter(|(good, _)| good.revision == older);
        if let Some((good, written)) = last_good
            && self
                .patch_known(good, written, ReleaseStatus::Superseded, &|_| {})
                .await?
                .is_some()
        {
            return Ok(());
        }
        self.update(older, ReleaseStatus::Superseded, |_| {})
            .await
            .map(|_| ())
    }

    /// Writes a record as this run knows it (read or written under the lock), without
    /// reading it again: a merge patch of the record's key and status label at the version
    /// known (the manifests' key stays as it is). None when it cannot (the status may not
    /// move so, the manifests would no longer fit, the role has no `patch`) or the record
    /// changed since (a conflict): the caller then reads it and writes it whole.
    async fn patch_known(
        &self,
        known: &ReleaseRecord,
        written: &Written,
        status: ReleaseStatus,
        change: &impl Fn(&mut ReleaseRecord),
    ) -> Result<Option<ReleaseRecord>> {
        if !transition_allowed(known.status, status) {
            return Ok(None);
        }
        let mut record = ReleaseRecord {
            manifests: None,
            ..known.clone()
        };
        record.status = status;
        change(&mut record);
        let (mut data, _) = secret_data(&record, None)?;
        let Some(bytes) = data.remove(DATA_KEY) else {
            return Ok(None);
        };
        if bytes.0.len() + written.manifests_bytes > MAX_RECORD_BYTES {
            return Ok(None);
        }
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": written.version,
                "labels": {LABEL_STATUS: status.as_str()},
            },
            "data": {DATA_KEY: bytes},
        });
        let name = record.secret_name();
        let api = self.api();
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        let patched = self
            .call("update a release record", || {
                api.patch(&name, &params, &patch)
            })
            .await;
        match patched {
            Ok(_) => Ok(Some(record)),
            // A role granted before records were patched has no `patch`: read and update.
            Err(kube::Error::Api(status)) if status.is_conflict() || status.code == 403 => Ok(None),
            Err(e) => Err(self.kube_err(format!("updating release record {name}"), e)),
        }
    }

    /// Supersedes every `deployed` record older than the newest one: a run that failed
    /// between marking its record deployed and superseding the older ones left them so.
    /// Call with the lock held. Returns the revisions marked.
    pub async fn repair(&self) -> Result<Vec<u64>> {
        self.repair_in(&self.statuses().await?).await
    }

    /// [`ReleaseStore::repair`] on statuses the caller just listed.
    async fn repair_in(&self, statuses: &[(u64, ReleaseStatus)]) -> Result<Vec<u64>> {
        let newest = statuses
            .iter()
            .filter(|(_, s)| *s == ReleaseStatus::Deployed)
            .map(|(r, _)| *r)
            .max();
        let Some(newest) = newest else {
            return Ok(Vec::new());
        };
        let stale = supersede_choice(statuses, newest);
        for older in &stale {
            self.update(*older, ReleaseStatus::Superseded, |_| {})
                .await?;
        }
        Ok(stale)
    }

    async fn statuses(&self) -> Result<Vec<(u64, ReleaseStatus)>> {
        Ok(statuses_of(&self.list().await?))
    }

    /// With the lock held, as a run opens the history: marks what a dead run left pending
    /// as abandoned and supersedes stale `deployed` records ([`ReleaseStore::mark_abandoned`],
    /// [`ReleaseStore::repair`]), and answers the history after that. One list when there
    /// is nothing to mark (the usual case; both choices read the same statuses, since
    /// abandoning touches `pending` records and repairing `deployed` ones).
    pub async fn open(&self) -> Result<Opened> {
        let mut stored = self.list_stored(false).await?;
        let statuses: Vec<_> = stored.iter().map(|(r, _)| (r.revision, r.status)).collect();
        let abandoned = self.mark_abandoned_in(&statuses).await?;
        let repaired = self.repair_in(&statuses).await?;
        if !abandoned.is_empty() || !repaired.is_empty() {
            stored = self.list_stored(false).await?;
        }
        let mut written = BTreeMap::new();
        let mut records = Vec::with_capacity(stored.len());
        for (record, version) in stored {
            if let Some(version) = version {
                written.insert(record.revision, version);
            }
            records.push(record);
        }
        Ok(Opened {
            abandoned,
            repaired,
            records,
            written,
        })
    }

    /// Delete the records beyond `keep` (see [`prune_choice`]). Returns what was deleted.
    pub async fn prune(&self) -> Result<Vec<u64>> {
        let doomed = prune_choice(&self.statuses().await?, self.keep);
        self.delete_revisions(&doomed).await?;
        Ok(doomed)
    }

    async fn delete_revisions(&self, doomed: &[u64]) -> Result<()> {
        for revision in doomed {
            let name = secret_name(&self.app, *revision);
            let api = self.api();
            let delete = DeleteParams::default();
            match self
                .call("prune a release record", || api.delete(&name, &delete))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(e) => return Err(self.kube_err(format!("pruning release record {name}"), e)),
            }
        }
        Ok(())
    }

    /// Mark records left `pending` by a run that died as `failed` (reason `abandoned`).
    /// Call with the lock held. Returns the revisions marked.
    pub async fn mark_abandoned(&self) -> Result<Vec<u64>> {
        self.mark_abandoned_in(&self.statuses().await?).await
    }

    /// [`ReleaseStore::mark_abandoned`] on statuses the caller just listed.
    async fn mark_abandoned_in(&self, statuses: &[(u64, ReleaseStatus)]) -> Result<Vec<u64>> {
        let pending = abandoned_choice(statuses);
        for revision in &pending {
            self.update(*revision, ReleaseStatus::Failed, |r| {
                r.reason = Some(ABANDONED.to_string());
                if r.finished_at.is_none() {
                    r.finished_at = Some(Timestamp::now());
                }
            })
            .await?;
        }
        Ok(pending)
    }
}

/// How long creating the history namespace may take, retries included.
const NAMESPACE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Creates the history namespace when missing (kube's one namespace creation, with the
/// errors said as release errors).
/// A record as this run wrote it: its version, and the size of the manifests it holds.
#[derive(Debug, Clone)]
pub struct Written {
    version: String,
    manifests_bytes: usize,
}

/// What a run knows of a target's history since it began its record with the lock held.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// The other records' revisions and statuses.
    pub others: &'a [(u64, ReleaseStatus)],
    /// The record as begun.
    pub record: &'a ReleaseRecord,
    /// Its version as written (None: unknown).
    pub written: Option<&'a Written>,
    /// The last good record as read under the lock, with its version: the one finishing a
    /// deployed record supersedes.
    pub last_good: Option<(&'a ReleaseRecord, &'a Written)>,
}

impl Written {
    /// A stored record's version and manifests' size (None: it has no version).
    fn of(secret: &Secret) -> Option<Written> {
        Some(Written {
            version: secret.metadata.resource_version.clone()?,
            manifests_bytes: Written::manifests_bytes(secret),
        })
    }

    fn manifests_bytes(secret: &Secret) -> usize {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(MANIFESTS_KEY))
            .map_or(0, |b| b.0.len())
    }
}

/// The history as [`ReleaseStore::open`] left it.
#[derive(Debug)]
pub struct Opened {
    /// Revisions found `pending` and marked failed (abandoned).
    pub abandoned: Vec<u64>,
    /// Revisions found `deployed` beside a newer one and marked superseded.
    pub repaired: Vec<u64>,
    /// Every readable record after that, oldest first, without manifests.
    pub records: Vec<ReleaseRecord>,
    /// Their versions as stored, by revision.
    pub written: BTreeMap<u64, Written>,
}

pub(crate) fn statuses_of(records: &[ReleaseRecord]) -> Vec<(u64, ReleaseStatus)> {
    records.iter().map(|r| (r.revision, r.status)).collect()
}

pub async fn ensure_namespace(client: &Client, server: &str, namespace: &str) -> Result<()> {
    let budget = RetryBudget::until(tokio::time::Instant::now() + NAMESPACE_DEADLINE);
    // Nothing cancels a record's namespace: the run's cancel is handled around it.
    let never = tokio_util::sync::CancellationToken::new();
    crate::cluster::apply::ensure_namespace(client, namespace, &budget, &never)
        .await
        .map_err(|(step, e)| {
            let action = format!("{step} the history namespace");
            let namespace = namespace.to_string();
            match e {
                RetryError::Api(source) => ReleaseError::Kube {
                    action,
                    namespace,
                    server: server.to_string(),
                    source: Box::new(source),
                },
                RetryError::Cancelled => ReleaseError::Cancelled { action, namespace },
                e @ RetryError::NotSent => ReleaseError::Kube {
                    action,
                    namespace,
                    server: server.to_string(),
                    source: Box::new(e.into_kube().unwrap_or_else(|| {
                        crate::cluster::retry::timeout_error("namespace", std::time::Duration::ZERO)
                    })),
                },
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::test_cluster::TestCluster;
    use ReleaseStatus::*;
    use serde_json::json;

    const SECRETS: &str = "/api/v1/namespaces/shop/secrets";

    fn draft(image: &str) -> ReleaseDraft {
        let bodies = [json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        })];
        let mut d = ReleaseDraft::new(EncodedManifests::encode(&bodies).unwrap());
        d.commit = Some(CommitInfo {
            sha: format!("sha-{image}"),
            r#ref: None,
            message: Some(format!("deploy {image}")),
            dirty: false,
        });
        d
    }

    async fn statuses(store: &ReleaseStore) -> Vec<(u64, ReleaseStatus)> {
        store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|r| (r.revision, r.status))
            .collect()
    }

    #[tokio::test]
    async fn lifecycle_supersede_prune_and_labels() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 3);
        assert!(
            store.list().await.unwrap().is_empty(),
            "no namespace: no history"
        );

        let r1 = store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r1.revision, 1);
        assert!(fake.has_namespace("shop"), "history namespace created");
        store.finish(1, Deployed, None).await.unwrap();

        let r2 = store
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r2.revision, 2);
        assert_eq!(store.last_good().await.unwrap().unwrap().revision, 1);
        // Lists carry no manifests; a status change kept v1's, which get() reads.
        assert!(
            store
                .list()
                .await
                .unwrap()
                .iter()
                .all(|r| r.manifests.is_none())
        );
        let v1 = store.get(1).await.unwrap().manifests.unwrap();
        assert_eq!(
            v1[0].pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("v1"))
        );
        store.finish(2, Deployed, None).await.unwrap();
        assert_eq!(statuses(&store).await, vec![(1, Superseded), (2, Deployed)]);

        // A failure, then its rollback to v2 as v4.
        store
            .begin(draft("bad"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        store
            .finish(3, Failed, Some("ImagePullBackOff".into()))
            .await
            .unwrap();
        let rb = store
            .begin(draft("v2"), ReleaseOrigin::Rollback { to: 2 })
            .await
            .unwrap();
        assert_eq!(
            (rb.revision, rb.rollback_of, rb.kind),
            (4, Some(2), ReleaseKind::Rollback)
        );
        store.finish(4, Deployed, None).await.unwrap();
        // keep 3: v1 pruned.
        assert_eq!(
            statuses(&store).await,
            vec![(2, Superseded), (3, Failed), (4, Deployed)]
        );
        assert_eq!(fake.names(SECRETS).len(), 3);

        let secret = fake.get(SECRETS, "rollguard.shop.v3").unwrap();
        assert_eq!(secret["type"], RECORD_TYPE);
        let labels = &secret["metadata"]["labels"];
        assert_eq!(labels[LABEL_STATUS], "failed");
        assert_eq!(labels[LABEL_REVISION], "3");
        assert_eq!(labels[LABEL_APP], "shop");
        assert_eq!(labels[LABEL_MANAGED_BY], "rollguard");

        let v3 = store.get(3).await.unwrap();
        assert_eq!(v3.reason.as_deref(), Some("ImagePullBackOff"));
        assert!(v3.finished_at.is_some());
        assert_eq!(v3.objects[0].to_string(), "Deployment shop/web");
        assert!(matches!(
            store.get(1).await,
            Err(ReleaseError::NotFound { revision: 1, .. })
        ));
    }

    #[tokio::test]
    async fn abandoned_records_are_marked_failed() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        store.finish(1, Deployed, None).await.unwrap();
        store
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        // The run died here. The next one:
        assert_eq!(store.mark_abandoned().await.unwrap(), vec![2]);
        let v2 = store.get(2).await.unwrap();
        assert_eq!((v2.status, v2.reason.as_deref()), (Failed, Some(ABANDONED)));
        assert_eq!(store.mark_abandoned().await.unwrap(), Vec::<u64>::new());
        assert_eq!(store.last_good().await.unwrap().unwrap().revision, 1);
    }

    /// Finishing a record this run began, as it knows it, writes it without reading it and
    /// keeps its manifests; when another run changed it meanwhile, it is read and the status
    /// still only moves forward.
    #[tokio::test]
    async fn a_known_record_is_finished_without_a_read_and_only_moves_forward() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        fake.add_namespace("shop");
        let finish = |record: ReleaseRecord, written: Option<Written>| {
            let store = store.clone();
            async move {
                let known = Known {
                    others: &[],
                    record: &record,
                    written: written.as_ref(),
                    last_good: None,
                };
                store
                    .finish_with_stages(
                        record.revision,
                        Deployed,
                        None,
                        None,
                        Vec::new(),
                        Some(known),
                    )
                    .await
            }
        };
        let (v1, written) = store
            .begin_after(draft("v1"), ReleaseOrigin::Deploy, &[], None)
            .await
            .unwrap();
        assert!(written.is_some());
        fake.reset_counters();
        let done = finish(v1, written).await.unwrap();
        assert_eq!(done.status, Deployed);
        let counters = fake.counters();
        assert_eq!(
            counters.get("get", "secrets"),
            0,
            "{:#}",
            counters.to_json()
        );
        let stored = store.get(1).await.unwrap();
        assert_eq!(stored.status, Deployed);
        assert!(stored.finished_at.is_some());
        assert!(stored.manifests.is_some(), "the manifests stay");
        let secret = fake.get(SECRETS, "rollguard.shop.v1").unwrap();
        assert_eq!(secret["metadata"]["labels"][LABEL_STATUS], "deployed");

        // Without the right to patch Secrets (a role granted before), it reads and updates.
        let (v2, written) = store
            .begin_after(
                draft("v2"),
                ReleaseOrigin::Deploy,
                &store.list().await.unwrap(),
                None,
            )
            .await
            .unwrap();
        fake.set_faults(kube_sim::Faults {
            error_rate: 1.0,
            error_status: 403,
            only_resources: vec!["secrets".into()],
            only_verbs: vec!["patch".into()],
            ..Default::default()
        });
        fake.reset_counters();
        let v2_revision = v2.revision;
        finish(v2, written).await.unwrap();
        fake.set_faults(kube_sim::Faults::default());
        let counters = fake.counters();
        let json = counters.to_json();
        assert_eq!(
            (
                counters.get("patch", "secrets"),
                counters.get("update", "secrets")
            ),
            (1, 1),
            "{json:#}"
        );
        assert_eq!(v2_revision, 2);
        assert_eq!(store.get(2).await.unwrap().status, Deployed);

        let (v3, written) = store
            .begin_after(
                draft("v3"),
                ReleaseOrigin::Deploy,
                &store.list().await.unwrap(),
                None,
            )
            .await
            .unwrap();
        // Another run, which took the lock over, marked it abandoned.
        store.mark_abandoned().await.unwrap();
        let err = finish(v3, written).await.unwrap_err();
        assert!(matches!(err, ReleaseError::Transition { .. }), "{err}");
        assert_eq!(store.get(3).await.unwrap().status, Failed);
    }

    #[tokio::test]
    async fn statuses_only_move_forward() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        // Another run marked it abandoned (our lease lapsed); we must not call it deployed.
        store.mark_abandoned().await.unwrap();
        let err = store.finish(1, Deployed, None).await.unwrap_err();
        assert!(matches!(err, ReleaseError::Transition { .. }), "{err}");
        assert_eq!(store.get(1).await.unwrap().status, Failed);
    }

    #[tokio::test]
    async fn other_apps_and_corrupt_records_are_ignored() {
        let fake = TestCluster::start().await;
        let shop = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        let blog = ReleaseStore::new(fake.client(), "blog", "shop", 10);
        shop.begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        blog.begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v7",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "rollguard.shop.v7", "namespace": "shop",
                                "labels": {LABEL_MANAGED_BY: "rollguard", LABEL_APP: "shop"}},
                   "data": {"release": "bm90IGd6aXA="}}),
        );
        let records = shop.list().await.unwrap();
        assert_eq!(
            records.len(),
            1,
            "blog's record and the corrupt one are not listed"
        );
        // The unreadable v7 is not counted (a collision with it would move on by one).
        let next = shop
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(next.revision, 2);
    }

    #[tokio::test]
    async fn a_record_with_its_manifests_inside_keeps_them_and_moves_them_on_update() {
        use base64::Engine;
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        // As rollguard wrote records before the manifests had a key of their own.
        let inline = ReleaseRecord {
            manifests: Some(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "old"}})]),
            ..ReleaseRecord::for_test(1, Pending)
        };
        let bytes = gzip_json(&inline).unwrap();
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v1",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "rollguard.shop.v1", "namespace": "shop",
                                "labels": {LABEL_MANAGED_BY: "rollguard", LABEL_APP: "shop"}},
                   "data": {DATA_KEY: base64::engine::general_purpose::STANDARD.encode(&bytes)}}),
        );
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        assert_eq!(store.get(1).await.unwrap().manifests, inline.manifests);
        store.finish(1, Deployed, None).await.unwrap();
        let after = store.get(1).await.unwrap();
        assert_eq!(after.status, Deployed);
        assert_eq!(
            after.manifests, inline.manifests,
            "a status change lost them"
        );
    }

    #[tokio::test]
    async fn the_runs_number_skips_ahead_and_a_taken_one_moves_on() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        let r = store
            .begin_numbered(draft("v1"), ReleaseOrigin::Deploy, Some(5))
            .await
            .unwrap();
        assert_eq!(r.revision, 5, "the run's number, skipping 1 to 4");
        // Another run's (or an unreadable) record holds v7: the rollback moves to v8.
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v7",
            json!({"metadata": {"name": "rollguard.shop.v7"}}),
        );
        let r = store
            .begin_numbered(draft("v1"), ReleaseOrigin::Rollback { to: 5 }, Some(7))
            .await
            .unwrap();
        assert_eq!(r.revision, 8);
        assert!(revision_moved("the rollback", 7, r.revision).is_some_and(|n| n.contains("v8")));
        // Never below what the target has.
        let r = store
            .begin_numbered(draft("v1"), ReleaseOrigin::Deploy, Some(2))
            .await
            .unwrap();
        assert_eq!(r.revision, 9);
        assert_eq!(revision_moved("this deploy", 9, 9), None);
    }

    #[tokio::test]
    async fn taken_name_moves_to_the_next_revision() {
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v1",
            json!({"metadata": {"name": "rollguard.shop.v1"}}),
        );
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        let r = store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r.revision, 2);
    }

    /// The record store driven through random failure points, against kube-sim with faults:
    /// every request may be answered 500 before it is done, and a write may be done and its
    /// answer lost (500); runs may die between opening and finishing their record. Over many
    /// cases (the seed, in the message, draws the plan: rates, runs, outcomes; kube-sim draws
    /// which requests fail), the invariants hold after every run:
    /// - statuses only move forward;
    /// - the newest `deployed` record is one a run meant to deploy, and a finish that
    ///   returned Ok for `deployed` made its record the last good one;
    /// - two `deployed` records remain only when that run warned, and the next run's repair
    ///   leaves at most one;
    /// - revisions are never reused by two runs, and the last good record is never pruned.
    #[tokio::test]
    async fn records_stay_consistent_under_random_failures() {
        use rand::{Rng, SeedableRng};
        let cluster = TestCluster::start().await;
        cluster.add_namespace("shop");
        let faults = |fail_before: f64, lost: f64| kube_sim::Faults {
            error_rate: fail_before,
            error_status: 500,
            lost_answer_rate: lost,
            ..Default::default()
        };
        for seed in 0..80u64 {
            let mut plan = rand::rngs::StdRng::seed_from_u64(seed);
            let fail_before = plan.random_range(0.0..0.5);
            let fail_after = plan.random_range(0.0..0.3);
            let keep = plan.random_range(1..5usize);
            let runs = plan.random_range(1..8usize);
            // One app per case: its own history in the one cluster.
            let app = format!("p{seed}");
            let store = ReleaseStore::new(cluster.client(), &app, "shop", keep)
                .with_retry_base(std::time::Duration::from_micros(100));
            let checker = ReleaseStore::new(cluster.client(), &app, "shop", keep);
            let mut seen: BTreeMap<u64, ReleaseStatus> = BTreeMap::new();
            let mut meant_deployed: Vec<u64> = Vec::new();
            let mut begun: Vec<u64> = Vec::new();
            let mut last_ok_deployed: Option<u64> = None;
            for run in 0..runs {
                let healthy = plan.random_bool(0.6);
                let dies = plan.random_bool(0.15);
                cluster.set_faults(faults(fail_before, fail_after));
                let _ = store.take_warnings();
                let opened = async {
                    store.mark_abandoned().await?;
                    store.repair().await?;
                    let records = store.list().await?;
                    store
                        .begin_after(
                            draft(&format!("v{run}")),
                            ReleaseOrigin::Deploy,
                            &records,
                            None,
                        )
                        .await
                        .map(|(record, written)| (record, written, statuses_of(&records)))
                }
                .await;
                // As a deploy finishes its record: with what it knows (odd runs read it).
                let use_known = run % 2 == 0;
                let mut finished_ok = false;
                if let Ok((record, written, others)) = &opened {
                    assert!(
                        !begun.contains(&record.revision),
                        "seed {seed}: revision {} reused",
                        record.revision
                    );
                    begun.push(record.revision);
                    if !dies {
                        let status = if healthy { Deployed } else { Failed };
                        if healthy {
                            meant_deployed.push(record.revision);
                        }
                        let known = use_known.then_some(Known {
                            others,
                            record,
                            written: written.as_ref(),
                            last_good: None,
                        });
                        finished_ok = store
                            .finish_with_stages(
                                record.revision,
                                status,
                                None,
                                None,
                                Vec::new(),
                                known,
                            )
                            .await
                            .is_ok();
                        if finished_ok && healthy {
                            last_ok_deployed = Some(record.revision);
                        }
                    }
                }
                let warned = !store.take_warnings().is_empty();
                cluster.set_faults(kube_sim::Faults::default());
                let now = statuses(&checker).await;
                for (revision, status) in &now {
                    if let Some(before) = seen.get(revision) {
                        assert!(
                            transition_allowed(*before, *status),
                            "seed {seed}: v{revision} went from {before} to {status}"
                        );
                    }
                    seen.insert(*revision, *status);
                }
                let deployed: Vec<u64> = now
                    .iter()
                    .filter(|(_, s)| *s == Deployed)
                    .map(|(r, _)| *r)
                    .collect();
                if let Some(newest) = deployed.iter().max() {
                    assert!(
                        meant_deployed.contains(newest),
                        "seed {seed}: v{newest} is deployed but its run did not deploy it: {now:?}"
                    );
                }
                if finished_ok && healthy && !dies {
                    assert_eq!(
                        deployed.iter().max().copied(),
                        opened.as_ref().ok().map(|(r, _, _)| r.revision),
                        "seed {seed}: {now:?}"
                    );
                }
                if let Some(good) = last_ok_deployed {
                    assert!(
                        deployed.iter().max().is_some_and(|newest| *newest >= good),
                        "seed {seed}: the last good v{good} is gone: {now:?}"
                    );
                }
                assert!(
                    deployed.len() <= 1 || warned || opened.is_err() || !finished_ok,
                    "seed {seed}: two deployed records without a warning: {now:?}"
                );
            }
            // The next run, without faults, repairs what is left.
            store.mark_abandoned().await.unwrap();
            store.repair().await.unwrap();
            let now = statuses(&checker).await;
            assert!(
                now.iter().filter(|(_, s)| *s == Deployed).count() <= 1,
                "seed {seed}: after repair: {now:?}"
            );
            assert!(
                now.iter().all(|(_, s)| *s != Pending),
                "seed {seed}: {now:?}"
            );
        }
    }
}
