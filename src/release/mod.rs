//! Release records: one Secret per revision of an app, stored in the target cluster.
//!
//! A record is a gzip-compressed JSON document in the Secret's `release` key, and the
//! manifests it applied a gzip-compressed JSON array in its `manifests` key (Secrets, not
//! ConfigMaps, because manifests may contain Secrets). Two keys, so that a status change
//! carries the manifests' bytes over without decoding them, and so that every target of a
//! run shares one encoding of the manifests. The labels carry the app, revision and
//! status so that `kubectl get secrets -l rollguard.dev/app=shop` shows the history. The
//! decisions (next revision, what to prune, what to supersede, which record is last good) are
//! pure functions of the records; [`ReleaseStore`] does the I/O.

pub mod lock;
pub mod session;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::kube::retry::{RetryBudget, RetryError};
use crate::util::git::CommitInfo;

/// Secret `type` of a release record.
pub const RECORD_TYPE: &str = "rollguard.dev/release.v1";
/// Key of the Secret's data that holds the gzip'd JSON record (without its manifests).
pub const DATA_KEY: &str = "release";
/// Key of the Secret's data that holds the gzip'd JSON array of the manifests.
pub const MANIFESTS_KEY: &str = "manifests";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_APP: &str = "rollguard.dev/app";
pub const LABEL_REVISION: &str = "rollguard.dev/revision";
pub const LABEL_STATUS: &str = "rollguard.dev/status";
/// Reason written on a `pending` record whose run died before finishing it.
pub const ABANDONED: &str = "abandoned";

/// Kubernetes refuses Secrets whose data exceeds 1 MiB; keep room for metadata and labels.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024 - 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseStatus {
    Pending,
    Deployed,
    Superseded,
    Failed,
}

impl ReleaseStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseStatus::Pending => "pending",
            ReleaseStatus::Deployed => "deployed",
            ReleaseStatus::Superseded => "superseded",
            ReleaseStatus::Failed => "failed",
        }
    }

    /// A record that was running healthy at some point: a valid rollback destination.
    pub fn was_good(self) -> bool {
        matches!(self, ReleaseStatus::Deployed | ReleaseStatus::Superseded)
    }
}

impl fmt::Display for ReleaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What made a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseKind {
    /// A normal `rollguard deploy`.
    #[default]
    Deploy,
    /// An automatic rollback after a failed or cancelled deploy.
    Rollback,
    /// `rollguard rollback` by hand.
    ManualRollback,
}

/// Why a revision exists, given to [`ReleaseStore::begin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOrigin {
    Deploy,
    /// Re-applies the manifests of revision `to`.
    Rollback {
        to: u64,
    },
    ManualRollback {
        to: u64,
    },
    /// `rollguard rollback --from-git SHA`: manifests rebuilt from a commit, no revision.
    ManualFromGit,
}

impl ReleaseOrigin {
    fn kind(self) -> ReleaseKind {
        match self {
            ReleaseOrigin::Deploy => ReleaseKind::Deploy,
            ReleaseOrigin::Rollback { .. } => ReleaseKind::Rollback,
            ReleaseOrigin::ManualRollback { .. } | ReleaseOrigin::ManualFromGit => {
                ReleaseKind::ManualRollback
            }
        }
    }

    fn rollback_of(self) -> Option<u64> {
        match self {
            ReleaseOrigin::Deploy | ReleaseOrigin::ManualFromGit => None,
            ReleaseOrigin::Rollback { to } | ReleaseOrigin::ManualRollback { to } => Some(to),
        }
    }
}

/// Where a revision was made: the CI run URL when there is one, and the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub host: String,
}

impl RunInfo {
    /// From GitHub Actions variables when present (GITHUB_SERVER_URL/GITHUB_REPOSITORY/
    /// actions/runs/GITHUB_RUN_ID), always with the host name.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> RunInfo {
        RunInfo {
            url: ci_run_url(env),
            host: host_name(env),
        }
    }
}

/// `https://github.com/owner/repo/actions/runs/123` when all three variables are set.
pub fn ci_run_url(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let server = env("GITHUB_SERVER_URL").filter(|s| !s.is_empty())?;
    let repo = env("GITHUB_REPOSITORY").filter(|s| !s.is_empty())?;
    let run = env("GITHUB_RUN_ID").filter(|s| !s.is_empty())?;
    Some(format!(
        "{}/{}/actions/runs/{}",
        server.trim_end_matches('/'),
        repo,
        run
    ))
}

/// The machine's name, without a crate: the kernel's answer, else the usual variables.
pub fn host_name(env: &dyn Fn(&str) -> Option<String>) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| env("HOSTNAME").filter(|s| !s.is_empty()))
        .or_else(|| env("COMPUTERNAME").filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_string())
}

/// One applied object, enough to name it and to compare revisions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    /// The API group ("" for core), so that apps/v1 and apps/v1beta1 compare equal.
    pub fn group(&self) -> &str {
        match self.api_version.split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    /// Identity across API versions: group, kind, namespace, name.
    pub fn identity(&self) -> (String, String, Option<String>, String) {
        (
            self.group().to_string(),
            self.kind.clone(),
            self.namespace.clone(),
            self.name.clone(),
        )
    }

    /// From an object body (apiVersion, kind, metadata.name/namespace).
    pub fn from_body(body: &serde_json::Value) -> Option<ObjectRef> {
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        Some(ObjectRef {
            api_version: text(body.get("apiVersion")?)?,
            kind: text(body.get("kind")?)?,
            namespace: body.pointer("/metadata/namespace").and_then(text),
            name: text(body.pointer("/metadata/name")?)?,
        })
    }
}

impl fmt::Display for ObjectRef {
    /// "Deployment shop/web", or "Namespace shop" for cluster-scoped objects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The content of one release record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    pub app: String,
    /// The target name of the run that wrote it (informative; the cluster is the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub revision: u64,
    pub status: ReleaseStatus,
    /// Why it failed (e.g. `abandoned`, or the failure message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub kind: ReleaseKind,
    /// For a rollback: the revision whose manifests it re-applied (its origin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitInfo>,
    pub started_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    #[serde(default)]
    pub run: RunInfo,
    /// Digest of the manifest set as applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The namespace given to namespaced objects without one when they were applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<String>,
    /// Every object the revision applied, in apply order.
    #[serde(default)]
    pub objects: Vec<ObjectRef>,
    /// The object bodies as applied (namespaced objects without a namespace went to
    /// `default_namespace`), in apply order. Filled only by [`ReleaseStore::get`]: lists
    /// leave it `None`. Stored under [`MANIFESTS_KEY`], not in the record's own JSON; when
    /// they did not fit in a Secret they are rebuilt from git at `commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Vec<serde_json::Value>>,
    /// True when `manifests` were left out because of the Secret size limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifests_omitted: bool,
    /// The script stages this revision ran and how they ended (without their output), so that
    /// a later manual rollback knows whose rollback commands are due.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::report::StageResult>,
}

#[cfg(test)]
impl ReleaseRecord {
    /// A record of app `shop` with nothing but a revision and a status, for tests to adjust.
    pub(crate) fn for_test(revision: u64, status: ReleaseStatus) -> Self {
        ReleaseRecord {
            app: "shop".into(),
            target: None,
            revision,
            status,
            reason: None,
            kind: ReleaseKind::Deploy,
            rollback_of: None,
            commit: None,
            started_at: Timestamp::UNIX_EPOCH,
            finished_at: None,
            run: RunInfo::default(),
            digest: None,
            default_namespace: None,
            objects: vec![],
            manifests: None,
            manifests_omitted: false,
            stages: vec![],
        }
    }
}

impl ReleaseRecord {
    pub fn secret_name(&self) -> String {
        secret_name(&self.app, self.revision)
    }

    /// Wall time from start to finish, when finished.
    pub fn duration(&self) -> Option<std::time::Duration> {
        let finished = self.finished_at?;
        let span = finished.duration_since(self.started_at);
        std::time::Duration::try_from(span).ok()
    }

    /// A short human note for `history`: the reason, the rollback origin, omitted manifests.
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        match (self.kind, self.rollback_of) {
            (ReleaseKind::Rollback, Some(to)) => parts.push(format!("rollback to v{to}")),
            (ReleaseKind::ManualRollback, Some(to)) => {
                parts.push(format!("manual rollback to v{to}"))
            }
            (ReleaseKind::ManualRollback, None) => {
                parts.push("manual rollback from git".to_string())
            }
            _ => {}
        }
        if let Some(reason) = &self.reason {
            parts.push(reason.clone());
        }
        if self.manifests_omitted {
            parts.push("manifests not stored (too large): rebuilt from git".to_string());
        }
        parts.join("; ")
    }
}

/// The manifests of a revision, encoded once and shared by the records of every target.
#[derive(Debug, Clone)]
pub struct EncodedManifests {
    /// gzip'd JSON array of the bodies.
    gz: Arc<[u8]>,
    pub digest: String,
    pub objects: Vec<ObjectRef>,
}

impl EncodedManifests {
    /// From object bodies as they will be applied; the object list and digest are derived
    /// (the list is replaced by what was really applied when the record finishes).
    pub fn encode<B>(bodies: &[B]) -> Result<EncodedManifests>
    where
        B: std::borrow::Borrow<serde_json::Value> + Serialize,
    {
        Ok(EncodedManifests {
            gz: gzip_json(bodies)?.into(),
            digest: crate::manifests::digest_bodies(bodies),
            objects: bodies
                .iter()
                .filter_map(|b| ObjectRef::from_body(b.borrow()))
                .collect(),
        })
    }
}

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

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("{action} in namespace {namespace}: {source}")]
    Kube {
        action: String,
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cancelled while {action} in namespace {namespace}")]
    Cancelled { action: String, namespace: String },
    #[error("release record {name} in namespace {namespace} is unreadable: {reason}")]
    Corrupt {
        name: String,
        namespace: String,
        reason: String,
    },
    #[error("revision {revision} of app {app} not found in namespace {namespace}")]
    NotFound {
        app: String,
        namespace: String,
        revision: u64,
    },
    #[error(
        "release record {name} in namespace {namespace} kept changing under us; is another rollguard run writing it without the lock?"
    )]
    Conflict { name: String, namespace: String },
    #[error(
        "release record {name} in namespace {namespace} is {from} and cannot become {to}; did another run take the lock over?"
    )]
    Transition {
        name: String,
        namespace: String,
        from: ReleaseStatus,
        to: ReleaseStatus,
    },
    #[error("could not encode release record: {0}")]
    Encode(String),
}

impl ReleaseError {
    /// The API or transport error underneath, if any (to describe it like other target errors).
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            ReleaseError::Kube { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = ReleaseError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------------------
// Pure decisions
// ---------------------------------------------------------------------------------------

/// Give stored bodies without a namespace the one they were applied in (from the applied
/// objects), to show them as applied and name them fully. Records store them as given (with
/// their default namespace), so that equal manifests keep equal digests.
pub fn fill_namespaces(bodies: &mut [serde_json::Value], applied: &[ObjectRef]) {
    for body in bodies.iter_mut() {
        let Some(r) = ObjectRef::from_body(body) else {
            continue;
        };
        if r.namespace.is_some() {
            continue;
        }
        let found = applied.iter().find(|a| {
            a.namespace.is_some() && a.group() == r.group() && a.kind == r.kind && a.name == r.name
        });
        if let Some(namespace) = found.and_then(|a| a.namespace.clone())
            && let Some(metadata) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            metadata.insert(
                "namespace".to_string(),
                serde_json::Value::String(namespace),
            );
        }
    }
}

/// Secret name of a revision: `rollguard.<app>.v<revision>`.
pub fn secret_name(app: &str, revision: u64) -> String {
    format!("rollguard.{app}.v{revision}")
}

/// The next revision: one above the highest ever kept (pruning never drops the newest).
pub fn next_revision(existing: &[u64]) -> u64 {
    existing.iter().copied().max().unwrap_or(0) + 1
}

/// Last good: the newest record with status `deployed`.
pub fn last_good(records: &[ReleaseRecord]) -> Option<&ReleaseRecord> {
    records
        .iter()
        .filter(|r| r.status == ReleaseStatus::Deployed)
        .max_by_key(|r| r.revision)
}

/// Revisions to delete so that at most `keep` remain, never the last good one (newest
/// `deployed`) and never a `pending` one (a run may still be writing it). The newest are kept.
pub fn prune_choice(records: &[(u64, ReleaseStatus)], keep: usize) -> Vec<u64> {
    let keep = keep.max(1);
    let last_good = records
        .iter()
        .filter(|(_, s)| *s == ReleaseStatus::Deployed)
        .map(|(r, _)| *r)
        .max();
    // The newest stays too: the next revision is one above the highest kept, so dropping
    // it would hand its number out again.
    let newest = records.iter().map(|(r, _)| *r).max();
    let protected = |rev: u64, status: ReleaseStatus| {
        Some(rev) == last_good || Some(rev) == newest || status == ReleaseStatus::Pending
    };
    let mut newest_first: Vec<(u64, ReleaseStatus)> = records.to_vec();
    newest_first.sort_by_key(|(rev, _)| std::cmp::Reverse(*rev));
    let protected_count = newest_first
        .iter()
        .filter(|(r, s)| protected(*r, *s))
        .count();
    // Room for unprotected records once the protected ones are counted.
    let mut room = keep.saturating_sub(protected_count);
    let mut doomed = Vec::new();
    for (rev, status) in newest_first {
        if protected(rev, status) {
            continue;
        }
        if room > 0 {
            room -= 1;
        } else {
            doomed.push(rev);
        }
    }
    doomed.sort_unstable();
    doomed
}

/// After `revision` was deployed: the older `deployed` records that become `superseded`.
pub fn supersede_choice(records: &[(u64, ReleaseStatus)], revision: u64) -> Vec<u64> {
    let mut older: Vec<u64> = records
        .iter()
        .filter(|(r, s)| *r < revision && *s == ReleaseStatus::Deployed)
        .map(|(r, _)| *r)
        .collect();
    older.sort_unstable();
    older
}

/// Records a dead run left `pending` (to be marked failed/abandoned), oldest first.
pub fn abandoned_choice(records: &[(u64, ReleaseStatus)]) -> Vec<u64> {
    let mut pending: Vec<u64> = records
        .iter()
        .filter(|(_, s)| *s == ReleaseStatus::Pending)
        .map(|(r, _)| *r)
        .collect();
    pending.sort_unstable();
    pending
}

/// Whether a status change is allowed: records move forward only
/// (pending -> deployed|failed, deployed -> superseded, and a re-mark to the same status).
pub fn transition_allowed(from: ReleaseStatus, to: ReleaseStatus) -> bool {
    use ReleaseStatus::*;
    from == to
        || matches!(
            (from, to),
            (Pending, Deployed) | (Pending, Failed) | (Deployed, Superseded) | (Deployed, Failed)
        )
}

/// The data of a record's Secret: the record under [`DATA_KEY`] and, when given, the
/// encoded manifests under [`MANIFESTS_KEY`]. When both together are over
/// [`MAX_RECORD_BYTES`] the manifests are left out and the record says so (its commit
/// stays, so they can be rebuilt from git). The record's own `manifests` field is never
/// written. Returns the data and whether the manifests were left out.
pub fn secret_data(
    record: &ReleaseRecord,
    manifests: Option<Vec<u8>>,
) -> Result<(BTreeMap<String, ByteString>, bool)> {
    let head = |omitted: bool| {
        gzip_json(&ReleaseRecord {
            manifests: None,
            manifests_omitted: record.manifests_omitted || omitted,
            ..record.clone()
        })
    };
    let mut data = BTreeMap::new();
    let mut omitted = false;
    let mut record_bytes = head(false)?;
    if let Some(manifests) = manifests {
        if record_bytes.len() + manifests.len() <= MAX_RECORD_BYTES {
            data.insert(MANIFESTS_KEY.to_string(), ByteString(manifests));
        } else {
            omitted = true;
            record_bytes = head(true)?;
        }
    }
    data.insert(DATA_KEY.to_string(), ByteString(record_bytes));
    Ok((data, omitted))
}

/// Read a record from its Secret's data, with its manifests when `with_manifests`.
pub fn record_from_data(
    data: &BTreeMap<String, ByteString>,
    with_manifests: bool,
) -> std::result::Result<ReleaseRecord, String> {
    let bytes = data
        .get(DATA_KEY)
        .ok_or_else(|| format!("no `{DATA_KEY}` key"))?;
    let mut record: ReleaseRecord = gunzip_json(&bytes.0)?;
    match data.get(MANIFESTS_KEY) {
        Some(bytes) if with_manifests => {
            record.manifests =
                Some(gunzip_json(&bytes.0).map_err(|e| format!("`{MANIFESTS_KEY}` key: {e}"))?);
        }
        // Records of rollguard before 0.1's split hold their manifests inside the record.
        None if with_manifests => {}
        _ => record.manifests = None,
    }
    Ok(record)
}

/// The digest a record keeps: its manifests' digest, and the default namespace they were
/// applied with (the same manifests in another namespace are another release).
pub fn release_digest(manifests_digest: &str, default_namespace: Option<&str>) -> String {
    match default_namespace {
        None => manifests_digest.to_string(),
        Some(namespace) => {
            use sha2::Digest;
            let mut hasher = sha2::Sha256::new();
            hasher.update(manifests_digest.as_bytes());
            hasher.update(b"\nnamespace=");
            hasher.update(namespace.as_bytes());
            format!("sha256:{}", hex::encode(hasher.finalize()))
        }
    }
}

fn gzip_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let encode = |e: &dyn fmt::Display| ReleaseError::Encode(e.to_string());
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    serde_json::to_writer(&mut encoder, value).map_err(|e| encode(&e))?;
    encoder.finish().map_err(|e| encode(&e))
}

fn gunzip_json<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, String> {
    let mut json = Vec::new();
    // A bound on the inflated size guards against a hostile or corrupt record.
    flate2::read::GzDecoder::new(bytes)
        .take(256 * 1024 * 1024)
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    serde_json::from_slice(&json).map_err(|e| format!("not a release record: {e}"))
}

// ---------------------------------------------------------------------------------------
// I/O
// ---------------------------------------------------------------------------------------

/// Records of one app in one cluster's history namespace.
///
/// Every call retries transient errors (retry.rs). Writes are idempotent and ordered so that
/// the records stay consistent whatever fails when: a create whose answer was lost is
/// recognised as ours; status changes are conditional PUTs (resourceVersion) that only move
/// forward; a new record becomes `deployed` before older ones are `superseded`, so the
/// newest `deployed` record is always the last good one, and [`ReleaseStore::repair`] (run
/// at the start of every deploy) supersedes any older `deployed` record a failure left
/// behind; pruning is best effort and never fails the caller.
#[derive(Clone)]
pub struct ReleaseStore {
    client: Client,
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
    pub fn new(client: Client, app: &str, namespace: &str, keep: usize) -> ReleaseStore {
        ReleaseStore {
            client,
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
        use crate::kube::retry::{RetryBudget, retry_call};
        let budget = RetryBudget {
            base_delay: self.retry_base,
            max_delay: (self.retry_base * 20).min(RetryBudget::bookkeeping().max_delay),
            ..RetryBudget::bookkeeping()
        };
        retry_call(what, &budget, op).await
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
            match self.decode_secret(&secret, false) {
                Ok(record) => out.push(record),
                Err(e) => tracing::warn!("{e}; skipping it"),
            }
        }
        out.sort_by_key(|r| r.revision);
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
        ensure_namespace(&self.client, &self.namespace).await?;
        let existing = self.list().await?;
        self.begin_after(draft, origin, &existing).await
    }

    /// [`ReleaseStore::begin`] for a caller that just listed the records (and holds the lock,
    /// so the namespace exists): saves two requests. The record returned has no manifests.
    pub async fn begin_after(
        &self,
        draft: ReleaseDraft,
        origin: ReleaseOrigin,
        existing: &[ReleaseRecord],
    ) -> Result<ReleaseRecord> {
        let revisions: Vec<u64> = existing.iter().map(|r| r.revision).collect();
        let mut revision = next_revision(&revisions);
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
                Ok(_) => return Ok(record),
                // A retried create whose first answer was lost finds its own record: done.
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    if self.is_ours(revision, &record).await {
                        return Ok(record);
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
        Err(ReleaseError::Encode(format!(
            "no free revision number after v{revision} for app {}",
            self.app
        )))
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
        self.finish_with_stages(revision, status, reason, objects, Vec::new())
            .await
    }

    /// [`ReleaseStore::finish_with_objects`], also recording the script stages that ran
    /// (their output is dropped: it belongs in the report, not in the cluster).
    pub async fn finish_with_stages(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
        objects: Option<Vec<ObjectRef>>,
        stages: Vec<crate::report::StageResult>,
    ) -> Result<ReleaseRecord> {
        let stages: Vec<_> = stages
            .into_iter()
            .map(|mut s| {
                s.output.clear();
                s
            })
            .collect();
        let record = self
            .update(revision, status, |r| {
                r.reason = reason.clone();
                r.finished_at = Some(Timestamp::now());
                if let Some(objects) = &objects {
                    r.objects = objects.clone();
                }
                if !stages.is_empty() {
                    r.stages = stages.clone();
                }
            })
            .await?;
        // The record is final from here: what follows is tidying, which a failure only
        // postpones (the newest `deployed` record is the last good one either way, and the
        // next deploy's repair supersedes what is left).
        let mut statuses = match self.statuses().await {
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
                match self.update(older, ReleaseStatus::Superseded, |_| {}).await {
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

    /// Supersedes every `deployed` record older than the newest one: a run that failed
    /// between marking its record deployed and superseding the older ones left them so.
    /// Call with the lock held. Returns the revisions marked.
    pub async fn repair(&self) -> Result<Vec<u64>> {
        let statuses = self.statuses().await?;
        let newest = statuses
            .iter()
            .filter(|(_, s)| *s == ReleaseStatus::Deployed)
            .map(|(r, _)| *r)
            .max();
        let Some(newest) = newest else {
            return Ok(Vec::new());
        };
        let stale = supersede_choice(&statuses, newest);
        for older in &stale {
            self.update(*older, ReleaseStatus::Superseded, |_| {})
                .await?;
        }
        Ok(stale)
    }

    async fn statuses(&self) -> Result<Vec<(u64, ReleaseStatus)>> {
        Ok(self
            .list()
            .await?
            .iter()
            .map(|r| (r.revision, r.status))
            .collect())
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
        let pending = abandoned_choice(&self.statuses().await?);
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
pub async fn ensure_namespace(client: &Client, namespace: &str) -> Result<()> {
    let budget = RetryBudget::until(tokio::time::Instant::now() + NAMESPACE_DEADLINE);
    // Nothing cancels a record's namespace: the run's cancel is handled around it.
    let never = tokio_util::sync::CancellationToken::new();
    crate::kube::apply::ensure_namespace(client, namespace, &budget, &never)
        .await
        .map_err(|(step, e)| {
            let action = format!("{step} the history namespace");
            let namespace = namespace.to_string();
            match e {
                RetryError::Api(source) => ReleaseError::Kube {
                    action,
                    namespace,
                    source: Box::new(source),
                },
                RetryError::Cancelled => ReleaseError::Cancelled { action, namespace },
                e @ RetryError::NotSent => ReleaseError::Kube {
                    action,
                    namespace,
                    source: Box::new(e.into_kube().unwrap_or_else(|| {
                        crate::kube::retry::timeout_error("namespace", std::time::Duration::ZERO)
                    })),
                },
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReleaseStatus::*;

    #[test]
    fn next_revision_table() {
        let cases: &[(&[u64], u64)] = &[(&[], 1), (&[1], 2), (&[3, 1, 2], 4), (&[7, 9], 10)];
        for (existing, want) in cases {
            assert_eq!(next_revision(existing), *want, "{existing:?}");
        }
    }

    #[test]
    fn prune_table() {
        type Case<'a> = (&'a [(u64, ReleaseStatus)], usize, &'a [u64]);
        let cases: &[Case] = &[
            // Under the limit: nothing.
            (&[(1, Superseded), (2, Deployed)], 10, &[]),
            // Oldest go first.
            (&[(1, Superseded), (2, Superseded), (3, Deployed)], 2, &[1]),
            // The last good one stays even when it is the oldest.
            (
                &[(1, Deployed), (2, Failed), (3, Failed), (4, Failed)],
                2,
                &[2, 3],
            ),
            // keep 1 keeps the last good one, and the newest (so no revision repeats).
            (&[(1, Superseded), (2, Deployed), (3, Failed)], 1, &[1]),
            // Pending records are never pruned.
            (&[(1, Failed), (2, Failed), (3, Pending)], 1, &[1, 2]),
            // keep 0 is treated as 1.
            (&[(1, Failed), (2, Failed)], 0, &[1]),
            // No last good: newest stay.
            (&[(1, Failed), (2, Failed), (3, Failed)], 2, &[1]),
        ];
        for (records, keep, want) in cases {
            assert_eq!(
                prune_choice(records, *keep),
                want.to_vec(),
                "{records:?} keep {keep}"
            );
        }
    }

    #[test]
    fn supersede_and_abandon_table() {
        let records = [
            (1, Superseded),
            (2, Deployed),
            (3, Failed),
            (4, Pending),
            (5, Deployed),
            (6, Pending),
        ];
        assert_eq!(supersede_choice(&records, 5), vec![2]);
        assert_eq!(supersede_choice(&records, 7), vec![2, 5]);
        assert_eq!(supersede_choice(&records, 1), Vec::<u64>::new());
        assert_eq!(abandoned_choice(&records), vec![4, 6]);
    }

    #[test]
    fn transitions_table() {
        let cases = [
            (Pending, Deployed, true),
            (Pending, Failed, true),
            (Deployed, Superseded, true),
            (Deployed, Failed, true),
            (Superseded, Deployed, false),
            (Failed, Deployed, false),
            (Failed, Pending, false),
            (Failed, Failed, true),
        ];
        for (from, to, want) in cases {
            assert_eq!(transition_allowed(from, to), want, "{from} -> {to}");
        }
    }

    fn record(revision: u64, status: ReleaseStatus) -> ReleaseRecord {
        ReleaseRecord {
            commit: Some(CommitInfo {
                sha: "abc".into(),
                r#ref: Some("refs/heads/main".into()),
                message: Some("fix".into()),
            }),
            digest: Some("d".into()),
            manifests: Some(vec![serde_json::json!({"kind": "ConfigMap"})]),
            ..ReleaseRecord::for_test(revision, status)
        }
    }

    #[test]
    fn last_good_is_newest_deployed() {
        let records = vec![
            record(1, Deployed),
            record(2, Deployed),
            record(3, Failed),
            record(4, Superseded),
        ];
        assert_eq!(last_good(&records).map(|r| r.revision), Some(2));
        assert!(last_good(&[record(1, Failed)]).is_none());
    }

    fn bodies_of(record: &ReleaseRecord) -> Vec<serde_json::Value> {
        record.manifests.clone().unwrap_or_default()
    }

    #[test]
    fn secret_data_roundtrip_keeps_manifests_apart() {
        let full = record(1, Deployed);
        let manifests = EncodedManifests::encode(&bodies_of(&full)).unwrap();
        let (data, omitted) = secret_data(&full, Some(manifests.gz.to_vec())).unwrap();
        assert!(!omitted);
        assert_eq!(record_from_data(&data, true).unwrap(), full);
        // A list reads the record alone; its JSON never holds the manifests.
        let head = record_from_data(&data, false).unwrap();
        assert_eq!(head.manifests, None);
        assert_eq!(head.commit, full.commit);
        let record_json: serde_json::Value = gunzip_json(&data[DATA_KEY].0).unwrap();
        assert!(record_json.get("manifests").is_none());
    }

    #[test]
    fn manifests_over_the_size_limit_are_left_out() {
        // Random-ish text that gzip cannot shrink below the limit.
        let mut seed: u64 = 42;
        let noise: String = (0..2_000_000)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'!' + ((seed >> 33) % 90) as u8)
            })
            .collect();
        let big = [serde_json::json!({"kind": "ConfigMap", "data": {"x": noise}})];
        let manifests = EncodedManifests::encode(&big).unwrap();
        let record = record(2, Pending);
        let (data, omitted) = secret_data(&record, Some(manifests.gz.to_vec())).unwrap();
        assert!(omitted);
        assert!(!data.contains_key(MANIFESTS_KEY));
        assert!(data[DATA_KEY].0.len() <= MAX_RECORD_BYTES);
        let back = record_from_data(&data, true).unwrap();
        assert!(back.manifests.is_none() && back.manifests_omitted);
        assert_eq!(back.commit, record.commit);
    }

    #[test]
    fn the_digest_tells_namespaces_apart() {
        let m = "sha256:abc";
        assert_eq!(release_digest(m, None), m);
        assert_eq!(
            release_digest(m, Some("shop")),
            release_digest(m, Some("shop"))
        );
        assert_ne!(
            release_digest(m, Some("shop")),
            release_digest(m, Some("blog"))
        );
        assert_ne!(release_digest(m, Some("shop")), m);
    }

    #[test]
    fn unreadable_data_is_an_error() {
        let garbage = |key: &str| BTreeMap::from([(key.to_string(), ByteString(b"x".to_vec()))]);
        assert!(record_from_data(&garbage(DATA_KEY), false).is_err());
        assert!(record_from_data(&garbage("other"), false).is_err());
        let (mut data, _) = secret_data(&record(1, Deployed), None).unwrap();
        data.insert(MANIFESTS_KEY.to_string(), ByteString(b"x".to_vec()));
        assert!(
            record_from_data(&data, false).is_ok(),
            "a list skips the manifests"
        );
        assert!(record_from_data(&data, true).is_err());
    }

    #[test]
    fn run_url_and_notes() {
        let env = |k: &str| match k {
            "GITHUB_SERVER_URL" => Some("https://github.com/".to_string()),
            "GITHUB_REPOSITORY" => Some("acme/shop".to_string()),
            "GITHUB_RUN_ID" => Some("42".to_string()),
            _ => None,
        };
        assert_eq!(
            ci_run_url(&env).as_deref(),
            Some("https://github.com/acme/shop/actions/runs/42")
        );
        assert_eq!(ci_run_url(&|_| None), None);
        let mut r = record(3, Failed);
        r.kind = ReleaseKind::Rollback;
        r.rollback_of = Some(2);
        r.reason = Some("abandoned".into());
        assert_eq!(r.note(), "rollback to v2; abandoned");
    }

    #[test]
    fn namespaces_filled_from_what_was_applied() {
        let mut bodies = vec![
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}),
        ];
        let applied = vec![
            ObjectRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            },
            ObjectRef {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: "shop".into(),
            },
            ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("shop".into()),
                name: "c".into(),
            },
        ];
        fill_namespaces(&mut bodies, &applied);
        assert_eq!(bodies[0]["metadata"]["namespace"], "shop");
        assert!(bodies[1]["metadata"].get("namespace").is_none());
        assert_eq!(
            bodies[2]["metadata"]["namespace"], "other",
            "an explicit namespace stays"
        );
    }

    #[test]
    fn object_ref_from_body_and_display() {
        let body = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}});
        let r = ObjectRef::from_body(&body).unwrap();
        assert_eq!(r.to_string(), "Deployment shop/web");
        assert_eq!(r.group(), "apps");
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
        assert_eq!(
            ObjectRef::from_body(&ns).unwrap().to_string(),
            "Namespace shop"
        );
        assert!(ObjectRef::from_body(&serde_json::json!({"kind": "X"})).is_none());
    }
}

#[cfg(test)]
mod store_tests {
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
                        .begin_after(draft(&format!("v{run}")), ReleaseOrigin::Deploy, &records)
                        .await
                }
                .await;
                let mut finished_ok = false;
                if let Ok(record) = &opened {
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
                        finished_ok = store.finish(record.revision, status, None).await.is_ok();
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
                        opened.as_ref().ok().map(|r| r.revision),
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
