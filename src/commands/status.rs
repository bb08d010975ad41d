//! `rollguard status`: what runs on every target now, one row each. The reads are the
//! release records (as `history`), the lock (as `unlock` reads it), one GET of every object
//! of the current revision (judged by the pure kstatus rules, without waiting) and, with
//! `--drift`, the same server-side dry run as `rollguard diff` of the current revision's
//! manifests. Every target is asked at once (bounded), each under its own deadline; a target
//! that cannot be read is a row with the reason. Rows, the mixed-fleet line, the table and the
//! exit code are pure functions of what was read.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::{StatusArgs, StatusFormat};
use crate::cluster::apply::{ApplyError, dynamic_api, resolve_set};
use crate::cluster::health::{Assessment, Status, assess_as};
use crate::cluster::retry::{RetryBudget, RetryError, with_retry};
use crate::commands::release::{
    Connected, Env, RenderError, TargetFailure, TargetProblem, connect_all, load_config,
};
use crate::config::Config;
use crate::error::exit;
use crate::release::lock::{self, LeaseState};
use crate::release::{ReleaseKind, ReleaseRecord, ReleaseStatus};
use crate::report::diff::{DiffStyle, render};
use crate::report::plan::TargetPlan;
use crate::report::{clip_columns, display_width, redact};
use crate::util::git::{self, CommitInfo};
use crate::util::in_order::in_order;

/// Objects of one target read at once.
const OBJECTS_AT_ONCE: usize = 8;
/// Lines of one object's drift diff shown in the table output (the JSON has it whole).
const DRIFT_DIFF_LINES: usize = 20;
/// Width of the table when stdout is no terminal and `COLUMNS` is unset (a CI log).
const PIPE_COLUMNS: usize = 200;
/// The narrowest a clipped column gets (8 columns of 8 fit 80).
const MIN_COLUMN: usize = 8;
/// Schema version of the `-o json|yaml` document.
pub const STATUS_VERSION: u32 = 1;

/// One target's row: the `-o json|yaml` shape (documented in the README). Every key is always
/// present (null when unknown), so that scripts can rely on the shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetStatus {
    pub target: String,
    /// Its records and lock could be read.
    pub reachable: bool,
    /// Why not, when not reachable.
    pub error: Option<String>,
    /// The newest revision (what the cluster was last told to run).
    pub revision: Option<u64>,
    pub status: Option<ReleaseStatus>,
    pub kind: Option<ReleaseKind>,
    pub commit: Option<CommitInfo>,
    /// When that revision finished (started, while it runs).
    pub deployed_at: Option<Timestamp>,
    /// The CI run URL that made it, else its host.
    pub deployed_by: Option<String>,
    /// The newest revision with status `deployed`.
    pub last_good: Option<u64>,
    pub last_good_commit: Option<String>,
    /// The newest revision is the last good one.
    pub on_last_good: bool,
    /// The deploy lock, null when free.
    pub lock: Option<LockStatus>,
    /// The current revision's objects as they are now; null without a revision.
    pub health: Option<Health>,
    /// With `--drift` only.
    pub drift: Option<Drift>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockStatus {
    pub holder: Option<String>,
    pub since: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
    /// Its last renewal plus its duration is past by this machine's clock: a hint only (the
    /// holder's clock wrote `renewTime`); a deploy takes it over after watching it unchanged
    /// for its whole duration.
    pub expired: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Healthy,
    Progressing,
    Unhealthy,
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::Progressing => "progressing",
            Verdict::Unhealthy => "unhealthy",
            Verdict::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    pub verdict: Verdict,
    /// One line: "healthy", or the first object that is not and how many more.
    pub summary: String,
    /// Every recorded object with its kstatus status (empty when they could not be read).
    pub objects: Vec<ObjectHealth>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectHealth {
    /// "Deployment shop/web"
    pub object: String,
    /// kstatus: Current, InProgress, Failed, Terminating, NotFound, Unknown.
    pub status: String,
    pub reason: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// Something differs from the current revision (or could not be compared).
    pub drifted: bool,
    /// Objects whose live state differs from what the revision applies, with the diff
    /// (live -> revision; Secret values redacted).
    pub changed: Vec<DriftedObject>,
    /// Objects the revision declares that are not in the cluster.
    pub missing: Vec<String>,
    /// What could not be compared, and why.
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftedObject {
    pub object: String,
    pub diff: String,
}

/// The whole `-o json|yaml` document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusDocument {
    pub version: u32,
    pub app: String,
    /// The commits the reachable targets run, most targets first.
    pub versions: Vec<FleetVersion>,
    /// "2 versions across 3 targets: ..." when they run more than one; else null.
    pub mixed: Option<String>,
    pub targets: Vec<TargetStatus>,
    /// What the exit code is.
    pub exit_code: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetVersion {
    /// The short sha ("(dirty)" appended for a dirty tree), or null: no release, or a
    /// release without a commit.
    pub commit: Option<String>,
    pub targets: Vec<String>,
}

/// What one target's reads found, before it becomes a row.
#[derive(Debug, Default)]
pub struct Observed {
    /// Oldest first, without manifests.
    pub records: Vec<ReleaseRecord>,
    pub lock: Option<LeaseState>,
    /// The current revision's objects now, or why they could not be read.
    pub objects: Option<Result<Vec<ObjectHealth>, ApplyError>>,
    pub drift: Option<Drift>,
}

/// The row of one target (pure): `observed` is its reads or why they failed; `subjects` are
/// commit subjects git knows, by full sha, for records that have none.
pub fn build_row(
    target: &str,
    observed: Result<Observed, StatusError>,
    subjects: &HashMap<String, String>,
    now: Timestamp,
) -> TargetStatus {
    let mut row = TargetStatus {
        target: target.to_string(),
        reachable: false,
        error: None,
        revision: None,
        status: None,
        kind: None,
        commit: None,
        deployed_at: None,
        deployed_by: None,
        last_good: None,
        last_good_commit: None,
        on_last_good: false,
        lock: None,
        health: None,
        drift: None,
    };
    let observed = match observed {
        Ok(o) => o,
        Err(why) => {
            row.error = Some(format!("{}: {why}", why.state()));
            return row;
        }
    };
    row.reachable = true;
    row.lock = observed.lock.as_ref().and_then(|l| lock_status(l, now));
    row.drift = observed.drift;
    let current = observed.records.iter().max_by_key(|r| r.revision);
    let good = crate::release::last_good(&observed.records);
    row.last_good = good.map(|g| g.revision);
    row.last_good_commit = good.and_then(|g| g.commit.as_ref().map(CommitInfo::label));
    let Some(current) = current else {
        return row;
    };
    row.revision = Some(current.revision);
    row.status = Some(current.status);
    row.kind = Some(current.kind);
    row.commit = current.commit.clone().map(|mut c| {
        if c.message.as_deref().is_none_or(str::is_empty)
            && let Some(subject) = subjects.get(&c.sha)
        {
            c.message = Some(subject.clone());
        }
        c
    });
    row.deployed_at = Some(current.finished_at.unwrap_or(current.started_at));
    row.deployed_by = current
        .run
        .url
        .clone()
        .or_else(|| Some(current.run.host.clone()).filter(|h| !h.is_empty()));
    row.on_last_good =
        current.status == ReleaseStatus::Deployed && row.last_good == Some(current.revision);
    row.health = observed.objects.map(|objects| match objects {
        Ok(objects) => health_of(objects),
        Err(why) => Health {
            verdict: Verdict::Unknown,
            summary: format!("unknown: {why}"),
            objects: Vec::new(),
        },
    });
    row
}

/// The lock as shown (pure): None when there is none or nobody holds it.
pub fn lock_status(lease: &LeaseState, now: Timestamp) -> Option<LockStatus> {
    let holder = lease.holder.clone()?;
    let expires_at = lease.expires_at();
    Some(LockStatus {
        holder: Some(holder),
        since: lease.acquired_at,
        expires_at,
        expired: expires_at.is_some_and(|at| at <= now),
    })
}

/// How bad a kstatus status is for the verdict, and the verdict it gives.
fn verdict_of(status: &str) -> Verdict {
    match status {
        "Current" => Verdict::Healthy,
        "InProgress" | "Terminating" => Verdict::Progressing,
        "Failed" | "NotFound" => Verdict::Unhealthy,
        _ => Verdict::Unknown,
    }
}

fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Healthy => 0,
        Verdict::Progressing => 1,
        Verdict::Unknown => 2,
        Verdict::Unhealthy => 3,
    }
}

/// The verdict over a revision's objects (pure): the worst of theirs, with the first object
/// of that verdict named.
pub fn health_of(objects: Vec<ObjectHealth>) -> Health {
    let worst = objects
        .iter()
        .map(|o| verdict_of(&o.status))
        .max_by_key(|v| rank(*v))
        .unwrap_or(Verdict::Healthy);
    let bad: Vec<&ObjectHealth> = objects
        .iter()
        .filter(|o| verdict_of(&o.status) != Verdict::Healthy)
        .collect();
    let summary = match bad.iter().find(|o| verdict_of(&o.status) == worst) {
        None => "healthy".to_string(),
        Some(first) => {
            let why = first
                .reason
                .as_deref()
                .filter(|r| *r != first.status)
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let more = match bad.len() - 1 {
                0 => String::new(),
                n => format!(" (+{n} more)"),
            };
            format!(
                "{}: {} {}{why}: {}{more}",
                worst.as_str(),
                first.object,
                first.status,
                one_line(&first.message)
            )
        }
    };
    Health {
        verdict: worst,
        summary,
        objects,
    }
}

/// The drift of one target from its dry-run plan (pure): updates are changed objects,
/// creates are missing ones, errors could not be compared.
pub fn drift_of(plan: &TargetPlan) -> Drift {
    let changed: Vec<DriftedObject> = plan
        .update
        .iter()
        .map(|c| DriftedObject {
            object: c.object.clone(),
            diff: c.diff.clone().unwrap_or_default(),
        })
        .collect();
    let missing: Vec<String> = plan.create.iter().map(|c| c.object.clone()).collect();
    let errors: Vec<String> = plan
        .errors
        .iter()
        .map(|e| one_line(&e.headline()))
        .collect();
    Drift {
        drifted: !changed.is_empty() || !missing.is_empty() || !errors.is_empty(),
        changed,
        missing,
        errors,
    }
}

/// The commits the reachable targets run (pure), most targets first, then in row order.
pub fn fleet_versions(rows: &[TargetStatus]) -> Vec<FleetVersion> {
    let mut versions: Vec<FleetVersion> = Vec::new();
    for row in rows.iter().filter(|r| r.reachable) {
        let commit = row.commit.as_ref().map(CommitInfo::label);
        match versions.iter_mut().find(|v| v.commit == commit) {
            Some(v) => v.targets.push(row.target.clone()),
            None => versions.push(FleetVersion {
                commit,
                targets: vec![row.target.clone()],
            }),
        }
    }
    // Stable: equal counts keep their first appearance.
    versions.sort_by_key(|v| std::cmp::Reverse(v.targets.len()));
    versions
}

/// "2 versions across 5 targets: a1b2c3d on eu, us; e4f5a6b on ap" when the reachable
/// targets run more than one commit (pure); None when they agree.
pub fn mixed_fleet_line(versions: &[FleetVersion]) -> Option<String> {
    if versions.len() < 2 {
        return None;
    }
    let known = versions.iter().filter(|v| v.commit.is_some()).count();
    let targets: usize = versions.iter().map(|v| v.targets.len()).sum();
    let parts: Vec<String> = versions
        .iter()
        .map(|v| match &v.commit {
            Some(c) => format!("{c} on {}", v.targets.join(", ")),
            None => format!("no recorded commit on {}", v.targets.join(", ")),
        })
        .collect();
    Some(format!(
        "{known} {} across {targets} targets: {}",
        if known == 1 { "version" } else { "versions" },
        parts.join("; ")
    ))
}

/// The exit code (pure): 0 when every target is reachable, healthy, on its last good
/// revision, without drift (when asked), and all run one commit; else 1.
pub fn exit_code(rows: &[TargetStatus]) -> i32 {
    let each_ok = rows.iter().all(|r| {
        r.reachable
            && r.on_last_good
            && r.health
                .as_ref()
                .is_some_and(|h| h.verdict == Verdict::Healthy)
            && r.drift.as_ref().is_none_or(|d| !d.drifted)
    });
    if each_ok && fleet_versions(rows).len() <= 1 {
        exit::OK
    } else {
        exit::FAILED
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// A time as the table shows it: "2026-12-02 05:40Z".
fn short_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d %H:%MZ").to_string()
}

/// The cells of a reachable row, in the table's column order.
fn cells(row: &TargetStatus, drift: bool) -> Vec<String> {
    let revision = match (row.revision, row.status) {
        (Some(rev), Some(status)) => format!("v{rev} {status}"),
        _ => "no release".to_string(),
    };
    let commit = match &row.commit {
        Some(c) => match &c.message {
            Some(m) if !m.is_empty() => one_line(&format!("{} {m}", c.label())),
            _ => c.label(),
        },
        None => "-".to_string(),
    };
    let deployed = match (row.deployed_at, &row.deployed_by) {
        (Some(at), Some(by)) => format!("{} by {by}", short_time(at)),
        (Some(at), None) => short_time(at),
        _ => "-".to_string(),
    };
    let last_good = match (row.last_good, row.on_last_good) {
        (_, true) => "-".to_string(),
        (Some(rev), false) => match &row.last_good_commit {
            Some(c) => format!("v{rev} ({c})"),
            None => format!("v{rev}"),
        },
        (None, false) => "none".to_string(),
    };
    let lock = match &row.lock {
        None => "free".to_string(),
        Some(l) => {
            let holder = l.holder.as_deref().unwrap_or("?");
            let since = l
                .since
                .map(|s| format!(" since {}", short_time(s)))
                .unwrap_or_default();
            if l.expired {
                format!("expired ({holder}{since})")
            } else {
                format!("held by {holder}{since}")
            }
        }
    };
    let health = row
        .health
        .as_ref()
        .map(|h| one_line(&h.summary))
        .unwrap_or_else(|| "-".to_string());
    let mut out = vec![
        row.target.clone(),
        revision,
        commit,
        deployed,
        last_good,
        lock,
        health,
    ];
    if drift {
        out.push(match &row.drift {
            None => "-".to_string(),
            Some(d) if !d.drifted => "none".to_string(),
            Some(d) => drift_cell(d),
        });
    }
    out
}

fn drift_cell(d: &Drift) -> String {
    let mut parts = Vec::new();
    if !d.changed.is_empty() {
        parts.push(format!("{} changed", d.changed.len()));
    }
    if !d.missing.is_empty() {
        parts.push(format!("{} missing", d.missing.len()));
    }
    if !d.errors.is_empty() {
        parts.push(format!("{} not compared", d.errors.len()));
    }
    parts.join(", ")
}

/// Columns that give way, widest first, when the table is wider than the terminal (every
/// one but TARGET).
const FLEXIBLE: [usize; 7] = [1, 2, 3, 4, 5, 6, 7];

/// Column widths that fit `width` (pure): the natural widths, the flexible columns cut one
/// column at a time (widest first) down to [`MIN_COLUMN`].
fn fit_widths(mut widths: Vec<usize>, width: usize) -> Vec<usize> {
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len();
    while total(&widths) > width {
        let widest = FLEXIBLE
            .iter()
            .filter(|&&i| i < widths.len() && widths[i] > MIN_COLUMN)
            .max_by_key(|&&i| widths[i]);
        match widest {
            Some(&i) => widths[i] -= 1,
            None => break,
        }
    }
    widths
}

/// The table (pure): a header and one line per target, cells clipped so that no line is
/// wider than `width`. A target that could not be read says why across its row.
pub fn status_table(rows: &[TargetStatus], drift: bool, width: usize) -> String {
    let mut header: Vec<String> = [
        "TARGET",
        "REVISION",
        "COMMIT",
        "DEPLOYED",
        "LAST GOOD",
        "LOCK",
        "HEALTH",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if drift {
        header.push("DRIFT".into());
    }
    let lines: Vec<Option<Vec<String>>> = rows
        .iter()
        .map(|r| r.reachable.then(|| cells(r, drift)))
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| display_width(h)).collect();
    for row in lines.iter().flatten() {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(display_width(cell));
        }
    }
    for r in rows {
        widths[0] = widths[0].max(display_width(&r.target));
    }
    let widths = fit_widths(widths, width);
    let render_line = |cells: &[String]| {
        let mut line = String::from(" ");
        for (i, cell) in cells.iter().enumerate() {
            let cell = clip_columns(cell, widths[i]);
            line.push(' ');
            line.push_str(&cell);
            if i + 1 < cells.len() {
                line.push_str(&" ".repeat(widths[i] - display_width(&cell) + 1));
            }
        }
        line.trim_end().to_string()
    };
    let mut out = render_line(&header);
    out.push('\n');
    for (row, cells) in rows.iter().zip(&lines) {
        let line = match cells {
            Some(cells) => render_line(cells),
            None => {
                let name = &row.target;
                let lead = format!("  {name}{}  ", " ".repeat(widths[0] - display_width(name)));
                let why = one_line(row.error.as_deref().unwrap_or("no answer"));
                let room = width.saturating_sub(display_width(&lead)).max(MIN_COLUMN);
                format!("{lead}{}", clip_columns(&why, room))
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The drift of every target that has some, for the terminal (pure): changed objects with
/// their diff (cut), missing objects, what could not be compared.
pub fn drift_text(rows: &[TargetStatus], style: DiffStyle) -> String {
    let mut out = String::new();
    for row in rows {
        let Some(drift) = row.drift.as_ref().filter(|d| d.drifted) else {
            continue;
        };
        let revision = row
            .revision
            .map(|r| format!("v{r}"))
            .unwrap_or_else(|| "its revision".into());
        out.push_str(&format!(
            "target {}: drift from {revision} ({}):\n",
            row.target,
            drift_cell(drift)
        ));
        for c in &drift.changed {
            out.push_str(&format!("  ~ {}: changed in the cluster\n", c.object));
            out.push_str(&render(&c.diff, style, "    "));
        }
        for m in &drift.missing {
            out.push_str(&format!(
                "  - {m}: missing (declared by {revision}, not in the cluster)\n"
            ));
        }
        for e in &drift.errors {
            out.push_str(&format!("  ! {e}\n"));
        }
    }
    out
}

/// The `-o json|yaml` document (pure).
pub fn document(app: &str, rows: Vec<TargetStatus>) -> StatusDocument {
    let versions = fleet_versions(&rows);
    StatusDocument {
        version: STATUS_VERSION,
        app: app.to_string(),
        mixed: mixed_fleet_line(&versions),
        versions,
        exit_code: exit_code(&rows),
        targets: rows,
    }
}

// ---------------------------------------------------------------------------------------
// I/O: the reads of one target, and the command.
// ---------------------------------------------------------------------------------------

/// Why a status read failed (said in the target's row).
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("{0}")]
    Release(#[from] crate::release::ReleaseError),
    #[error("{0}")]
    Lock(#[from] crate::release::lock::LockError),
    #[error("no answer within {}: raise --timeout, or check the cluster", crate::util::duration::format_duration(*.0))]
    Deadline(Duration),
    /// The first contact failed, or connecting did (kube::connect's reasons, with the
    /// server's address).
    #[error("{0}")]
    Unreachable(crate::cluster::connect::TargetError),
    /// Anything else the release commands say of a target.
    #[error("{}", problem_text(.0))]
    Other(Box<TargetProblem>),
}

impl StatusError {
    /// What a row without figures says first: a refused credential is not a network problem.
    fn state(&self) -> &'static str {
        match self {
            StatusError::Unreachable(e) => match e.reason.as_str() {
                "Unauthorized" => "credentials refused",
                "Forbidden" => "access denied",
                "Kubeconfig" | "ContextNotFound" => "not configured",
                _ => "unreachable",
            },
            StatusError::Deadline(_) => "timed out",
            StatusError::Release(_) | StatusError::Lock(_) | StatusError::Other(_) => "unreadable",
        }
    }
}

/// A release command's problem without its "target NAME: " (the row names the target).
fn problem_text(problem: &TargetProblem) -> String {
    match problem {
        TargetProblem::Target { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The current revision's objects, each read once (GET) and judged as it is now.
async fn objects_now(
    c: &Connected,
    record: &ReleaseRecord,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<Vec<ObjectHealth>, ApplyError> {
    let bodies: Vec<Value> = record
        .objects
        .iter()
        .map(|o| {
            let mut metadata = json!({"name": o.name});
            if let Some(ns) = &o.namespace {
                metadata["namespace"] = json!(ns);
            }
            json!({"apiVersion": o.api_version, "kind": o.kind, "metadata": metadata})
        })
        .collect();
    let set =
        crate::engine::reapply::manifest_set_from_bodies(&bodies, &format!("v{}", record.revision));
    let resolution = resolve_set(&c.access.client, &set, deadline, cancel).await?;
    let budget = RetryBudget::until(deadline);
    let reads = set.objects.iter().map(|obj| {
        let (resolution, budget) = (&resolution, &budget);
        async move {
            let shown = crate::release::ObjectRef::from_body(&obj.body)
                .map(|r| r.to_string())
                .unwrap_or_else(|| obj.display_name());
            let assessment = match resolution.resolved(obj) {
                None => Assessment::new(Status::Unknown, "its kind is not served"),
                Some(resolved) => {
                    let api = dynamic_api(&c.access.client, resolved, obj.namespace.as_deref());
                    match with_retry("get", budget, cancel, || api.get_opt(&obj.name)).await {
                        Ok(Some(live)) => {
                            let live = serde_json::to_value(live).unwrap_or(Value::Null);
                            assess_as(&live, &obj.api_version, &obj.kind)
                        }
                        Ok(None) => Assessment::not_found(&obj.kind, &obj.name),
                        Err(RetryError::Api(e)) => Assessment::new(
                            Status::Unknown,
                            crate::cluster::connect::describe_error(&e, &c.access.server)
                                .to_string(),
                        ),
                        Err(_) => Assessment::new(Status::Unknown, "not read (deadline)"),
                    }
                }
            };
            ObjectHealth {
                object: shown,
                status: assessment.status.as_str().to_string(),
                reason: assessment.reason,
                message: assessment.message,
            }
        }
    });
    Ok(in_order(reads.collect(), OBJECTS_AT_ONCE).await)
}

/// The current revision's manifests against the live objects: the dry run `rollguard diff`
/// makes, with rollguard's field manager, forced so that a field another manager took shows
/// as the change it is rather than as a conflict.
async fn drift_now(
    config: &Config,
    c: &Connected,
    revision: u64,
    (deadline, at_once): (Instant, usize),
    cancel: &CancellationToken,
) -> Drift {
    let not_compared = |why: String| Drift {
        drifted: true,
        changed: Vec::new(),
        missing: Vec::new(),
        errors: vec![why],
    };
    let record = match c.store.get(revision).await {
        Ok(record) => record,
        Err(e) => return not_compared(e.to_string()),
    };
    let bodies =
        match crate::engine::reapply::record_manifests(config, &record, Some(deadline)).await {
            Ok(bodies) => bodies,
            Err(e) => return not_compared(e.to_string()),
        };
    // The scrubber knows the revision's Secret values before any diff is printed.
    redact::learn(bodies.iter());
    let label = format!("v{revision}");
    let set = crate::engine::reapply::manifest_set_from_bodies(&bodies, &label);
    let default_namespace = record
        .default_namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace(&c.target, &c.access.context_namespace));
    let plan = crate::commands::diff::diff_target(
        &c.access,
        &set,
        default_namespace,
        true,
        crate::cluster::apply::field_manager(&config.app),
        deadline,
        // Up to `at_once` targets read their drift together: their shares make the
        // fleet's bound.
        crate::util::in_order::Window::of(crate::cluster::apply::in_flight_per_target(at_once)),
        ("live".to_string(), label),
        cancel,
        TargetPlan::new(c.target.name.clone()),
    )
    .await;
    drift_of(&plan)
}

/// Everything `status` reads of one target but its drift, within `timeout`; and what is
/// left of it, for the drift.
async fn observe(
    config: &Config,
    c: &Connected,
    timeout: Duration,
) -> Result<(Observed, Duration), StatusError> {
    let deadline = Instant::now() + timeout;
    let cancel = CancellationToken::new();
    // A cluster that does not answer fails in a few quick attempts (as a deploy's first
    // contact), not after the records' longer retries.
    let budget = RetryBudget::first_contact(deadline);
    let client = &c.access.client;
    match with_retry("contact", &budget, &cancel, || client.apiserver_version()).await {
        Ok(_) => {}
        Err(RetryError::Api(e)) => {
            return Err(StatusError::Unreachable(
                crate::cluster::connect::describe_error(&e, &c.access.server),
            ));
        }
        Err(_) => return Err(StatusError::Deadline(timeout)),
    }
    let records = c.store.list().await?;
    let lock = lock::inspect(
        c.access.client.clone(),
        &c.access.server,
        &config.app,
        &c.namespace,
    )
    .await?;
    let mut observed = Observed {
        lock,
        ..Observed::default()
    };
    if let Some(current) = records.iter().max_by_key(|r| r.revision) {
        observed.objects = Some(objects_now(c, current, deadline, &cancel).await);
    }
    observed.records = records;
    Ok((observed, deadline.saturating_duration_since(Instant::now())))
}

/// Commit subjects git knows for the records that carry none, by full sha (a shallow clone
/// or no repository: none, said nowhere; the sha is shown anyway).
async fn subjects(config: &Config, shas: Vec<String>) -> HashMap<String, String> {
    if shas.is_empty() {
        return HashMap::new();
    }
    let (dir, git_timeout) = (config.base_dir.clone(), config.git_timeout);
    let found =
        tokio::task::spawn_blocking(move || subjects_from_git(&dir, shas, git_timeout)).await;
    match found {
        Ok(found) => found,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => HashMap::new(),
        },
    }
}

/// [`subjects`]' git calls, on a blocking thread (git may take seconds).
fn subjects_from_git(
    dir: &std::path::Path,
    shas: Vec<String>,
    git_timeout: std::time::Duration,
) -> HashMap<String, String> {
    shas.into_iter()
        .filter_map(|sha| {
            let info = git::commit_info(dir, &sha, git_timeout).ok()?;
            Some((sha, info.message?))
        })
        .collect()
}

/// The table's width: stdout's terminal, else `COLUMNS`, else [`PIPE_COLUMNS`].
fn table_width(env: &Env) -> usize {
    crate::report::progress::stdout_columns()
        .or_else(|| {
            env.get("COLUMNS")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|&c| c > 0)
        })
        .unwrap_or(PIPE_COLUMNS)
}

/// `rollguard status`; returns the exit code (bad config 2, else [`exit_code`]).
pub async fn run(args: StatusArgs, env: Env) -> i32 {
    let config = match load_config(&args.selection, &env) {
        Ok(config) => config,
        Err(e) => {
            redact::print_err(&format!("rollguard: {e}"));
            return e.exit_code();
        }
    };
    let rows = read_rows(&config, &env, &args).await;
    for row in rows.iter().filter(|r| !r.reachable) {
        redact::print_err(&format!(
            "target {}: {}",
            row.target,
            row.error.as_deref().unwrap_or("no answer")
        ));
    }
    let doc = document(&config.app, rows);
    let code = doc.exit_code;
    match args.output {
        StatusFormat::Table => {
            if let Some(line) = &doc.mixed {
                redact::print_out(line);
            }
            let table = status_table(&doc.targets, args.drift, table_width(&env));
            redact::print_out(table.trim_end());
            let color = crate::report::progress::stdout_columns().is_some()
                && !env.contains_key("NO_COLOR");
            let style = DiffStyle {
                color,
                max_lines: DRIFT_DIFF_LINES,
            };
            let drift = drift_text(&doc.targets, style);
            if !drift.is_empty() {
                redact::print_out(drift.trim_end());
            }
            code
        }
        format => match render_document(&doc, format) {
            Ok(text) => {
                redact::print_out(text.trim_end());
                code
            }
            Err(why) => {
                redact::print_err(&format!("rollguard: cannot render the status: {why}"));
                exit::FAILED
            }
        },
    }
}

/// The document as JSON or YAML, scrubbed before a serializer escapes a value the scrubber
/// would then miss.
fn render_document(doc: &StatusDocument, format: StatusFormat) -> Result<String, RenderError> {
    let mut value = serde_json::to_value(doc)?;
    crate::report::clean::scrub_tree(&mut value);
    Ok(match format {
        StatusFormat::Yaml => serde_saphyr::to_string(&value)?,
        _ => serde_json::to_string_pretty(&value)?,
    })
}

/// Targets read at once: the deploy's rule (a `concurrency` someone set, else what the memory
/// budget holds at the memory of a target of `objects` objects), not a fixed few, which read
/// 1,000 targets in 63 rounds.
fn targets_at_once(config: &Config, objects: usize) -> usize {
    crate::engine::budget::choose(&crate::engine::budget::Source::of(config), objects).value
}

/// A target's reads so far: its connection, what was read, and what is left of its
/// `--timeout`.
type Read = Result<(Connected, Observed, Duration), StatusError>;

/// Every selected target's row, in the config's order, each within `--timeout` (its time
/// waiting for its turn not counted). Two passes, each as many targets at once as the memory
/// budget holds: the records, lock and objects of every target, then (`--drift`) each
/// one's drift, once the largest current revision's object count says what a target holds.
async fn read_rows(config: &Config, env: &Env, args: &StatusArgs) -> Vec<TargetStatus> {
    let timeout = args.timeout;
    let connected = connect_all(config, env).await;
    let names: Vec<String> = config.targets.iter().map(|t| t.name.clone()).collect();
    let reads = connected.into_iter().map(|c| async move {
        let c = match c {
            Ok(c) => c,
            Err(TargetProblem::Target {
                source: TargetFailure::Connect(e),
                ..
            }) => return Err(StatusError::Unreachable(e)),
            Err(problem) => return Err(StatusError::Other(Box::new(problem))),
        };
        // The reads stop at the deadline; this bounds anything that does not.
        match tokio::time::timeout(
            timeout + Duration::from_secs(1),
            observe(config, &c, timeout),
        )
        .await
        {
            Ok(Ok((observed, left))) => Ok((c, observed, left)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StatusError::Deadline(timeout)),
        }
    });
    let mut read: Vec<Read> = in_order(reads.collect(), targets_at_once(config, 0)).await;
    if args.drift {
        compare_drift(config, &mut read, timeout).await;
    }
    let observed: Vec<Result<Observed, StatusError>> = read
        .into_iter()
        .map(|r| r.map(|(_, observed, _)| observed))
        .collect();
    let missing_subjects: Vec<String> = observed
        .iter()
        .flatten()
        .filter_map(|o| o.records.iter().max_by_key(|r| r.revision))
        .filter_map(|r| r.commit.as_ref())
        .filter(|c| c.message.as_deref().is_none_or(str::is_empty))
        .map(|c| c.sha.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let subjects = subjects(config, missing_subjects).await;
    let now = Timestamp::now();
    names
        .iter()
        .zip(observed)
        .map(|(name, o)| build_row(name, o, &subjects, now))
        .collect()
}

/// Each read target's drift against its current revision, within what is left of its
/// `timeout`.
async fn compare_drift(config: &Config, read: &mut [Read], timeout: Duration) {
    fn current(o: &Observed) -> Option<&ReleaseRecord> {
        o.records.iter().max_by_key(|r| r.revision)
    }
    let objects = read
        .iter()
        .flatten()
        .filter_map(|(_, o, _)| current(o))
        .map(|r| r.objects.len())
        .max()
        .unwrap_or(0);
    let at_once = targets_at_once(config, objects);
    let drifts = read.iter().map(|r| async move {
        let (c, o, left) = r.as_ref().ok()?;
        let revision = current(o)?.revision;
        let deadline = Instant::now() + *left;
        let cancel = CancellationToken::new();
        let drift = drift_now(config, c, revision, (deadline, at_once), &cancel);
        Some(
            match tokio::time::timeout(*left + Duration::from_secs(1), drift).await {
                Ok(drift) => drift,
                Err(_) => Drift {
                    drifted: true,
                    changed: Vec::new(),
                    missing: Vec::new(),
                    errors: vec![StatusError::Deadline(timeout).to_string()],
                },
            },
        )
    });
    let drifts: Vec<Option<Drift>> = in_order(drifts.collect(), at_once).await;
    for (r, drift) in read.iter_mut().zip(drifts) {
        if let Ok((_, observed, _)) = r {
            observed.drift = drift;
        }
    }
}

#[cfg(test)]
mod tests;
