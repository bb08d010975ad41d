//! What a release record is: its labels and keys, status, kind and origin, the commit and run
//! it came from, the objects it applied; the release errors; and the pure decisions over
//! records (next revision, last good, what to prune, supersede or mark abandoned).

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

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
    pub(super) fn kind(self) -> ReleaseKind {
        match self {
            ReleaseOrigin::Deploy => ReleaseKind::Deploy,
            ReleaseOrigin::Rollback { .. } => ReleaseKind::Rollback,
            ReleaseOrigin::ManualRollback { .. } | ReleaseOrigin::ManualFromGit => {
                ReleaseKind::ManualRollback
            }
        }
    }

    pub(super) fn rollback_of(self) -> Option<u64> {
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
    /// This process's run, to tell apart runs that share a revision number on different
    /// targets (records written before it have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl RunInfo {
    /// From GitHub Actions variables when present (GITHUB_SERVER_URL/GITHUB_REPOSITORY/
    /// actions/runs/GITHUB_RUN_ID), always with the host name.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> RunInfo {
        RunInfo {
            url: ci_run_url(env),
            host: host_name(env),
            id: Some(run_id().to_string()),
        }
    }
}

/// An id of this process's run, the same for every record it writes: its start time and pid.
/// Process-wide on purpose: one rollguard process is one run.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        format!(
            "{}-{}",
            jiff::Timestamp::now().as_nanosecond(),
            std::process::id()
        )
    })
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
    /// Secrets of namespaces other than the history namespace: stored, or only digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_namespace_secrets: Option<super::OtherNamespaceSecrets>,
    /// The script stages this revision ran and how they ended (without their output), so that
    /// a later manual rollback knows whose rollback commands are due.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::report::StageResult>,
}

/// Why a record's Secret data does not read as a record.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("no `{key}` key")]
    MissingKey { key: &'static str },
    #[error("not gzip: {0}")]
    NotGzip(#[source] std::io::Error),
    #[error("not a release record: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("`{key}` key: {source}")]
    InKey {
        key: &'static str,
        #[source]
        source: Box<DecodeError>,
    },
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
            other_namespace_secrets: None,
            stages: Vec::new(),
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
        if let Some(o) = &self.other_namespace_secrets
            && o.kept == "digest"
        {
            parts.push(format!(
                "Secrets of other namespaces kept as digests: {}",
                o.names.join(", ")
            ));
        }
        parts.join("; ")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    // Said as the connect errors are (reason, server, then what to do), not as kube's chain.
    #[error(
        "{action} in namespace {namespace}: {}",
        crate::cluster::connect::describe_error(source, server)
    )]
    Kube {
        action: String,
        namespace: String,
        /// The API server's URL, for the message.
        server: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cancelled while {action} in namespace {namespace}")]
    Cancelled { action: String, namespace: String },
    #[error("release record {name} in namespace {namespace} is unreadable: {reason}")]
    Corrupt {
        name: String,
        namespace: String,
        #[source]
        reason: DecodeError,
    },
    #[error(
        "revision {revision} of app {app} does not exist in namespace {namespace} (see `rollguard history`)"
    )]
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
    Encode(#[from] EncodeError),
    #[error(
        "could not encode release record: no free revision number after v{revision} for app {app}"
    )]
    NoFreeRevision { revision: u64, app: String },
}

/// Why a record or its manifests could not be encoded as gzip'd JSON. Clone (its sources
/// shared) so that manifests encoded once for several targets keep their error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EncodeError {
    #[error("{0}")]
    Json(#[source] std::sync::Arc<serde_json::Error>),
    #[error("{0}")]
    Gzip(#[source] std::sync::Arc<std::io::Error>),
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

/// The revision of a whole run: one above the highest revision of the app on any of its
/// targets, so that one number names one run everywhere (`rollback --revision N` and
/// `show --revision N` mean the same deploy on every target); a target's own numbers may
/// skip. `histories`: the revisions kept on each target.
pub fn fleet_revision(histories: &[Vec<u64>]) -> u64 {
    next_revision(&histories.iter().flatten().copied().collect::<Vec<u64>>())
}

/// The number a new record gets on one target: the run's (`wanted`), unless this target's
/// own history is already past it, for numbers on a target only ever increase.
pub fn revision_on_target(existing: &[u64], wanted: Option<u64>) -> u64 {
    let next = next_revision(existing);
    wanted.map_or(next, |w| w.max(next))
}

/// Why a target's record did not get the run's number `wanted` (it got `got`), for the
/// report; None when it did. `what`: "this deploy" or "the rollback".
pub fn revision_moved(what: &str, wanted: u64, got: u64) -> Option<String> {
    (got != wanted).then(|| {
        format!(
            "{what} is recorded as v{got} on this target, not v{wanted} as on the others: v{wanted} was taken here (a record rollguard could not read, or another run's); `rollguard history` shows both"
        )
    })
}

/// What a record says of the run that wrote it, for people: "deploy of 3a30e4b",
/// "rollback to v3 (after a failed deploy)", "manual rollback to v3".
pub fn run_description(record: &ReleaseRecord) -> String {
    let commit = record
        .commit
        .as_ref()
        .map(|c| format!(" of {}", c.short_sha()))
        .unwrap_or_default();
    let to = record
        .rollback_of
        .map(|v| format!(" to v{v}"))
        .unwrap_or_default();
    let what = match record.kind {
        ReleaseKind::Deploy => format!("deploy{commit}"),
        ReleaseKind::Rollback => format!("rollback{to} (after a failed deploy)"),
        ReleaseKind::ManualRollback => format!("manual rollback{to}{commit}"),
    };
    format!("{what}, started {:.0}", record.started_at)
}

/// When revision `revision` names different runs on different targets (a `--target` deploy
/// numbers only its own targets' histories), the refusal naming each target's run; None when
/// every target's record is of one run: the same run id (of the process that wrote it; older
/// records have none), kind, destination and commit.
pub fn ambiguous_revision(revision: u64, records: &[(&str, &ReleaseRecord)]) -> Option<String> {
    let identity = |r: &ReleaseRecord| {
        (
            r.run.id.clone(),
            r.kind,
            r.rollback_of,
            r.commit.as_ref().map(|c| c.sha.clone()),
        )
    };
    let first = identity(records.first()?.1);
    if records.iter().all(|(_, r)| identity(r) == first) {
        return None;
    }
    let runs: Vec<String> = records
        .iter()
        .map(|(target, r)| format!("{target}: {}", run_description(r)))
        .collect();
    Some(format!(
        "v{revision} names different runs on different targets ({}): pick the target with --target",
        runs.join("; ")
    ))
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

/// What a run says of a record it found `pending` and marked abandoned: the run that wrote
/// it (its CI URL, else its host), when it started, and what the lock tells of its end:
/// a Lease left to expire means that run died or lost this cluster before it ended; a
/// released one means it ended but could not finish the record.
pub fn abandoned_note(record: &ReleaseRecord, lock_expired: bool) -> String {
    let run = match (&record.run.url, record.run.host.as_str()) {
        (Some(url), "") => format!("run {url}"),
        (Some(url), host) => format!("run {url} (host {host})"),
        (None, "") => "a run of unknown origin".to_string(),
        (None, host) => format!("a run on host {host}"),
    };
    let ended = if lock_expired {
        "its lock expired unreleased, so it died or lost this cluster before it ended"
    } else {
        "its lock was released, so it ended but could not finish the record"
    };
    format!(
        "release v{} was left pending by {run}, started {:.0}: {ended}; marked failed (abandoned)",
        record.revision, record.started_at
    )
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
