//! The report model: per target the outcome, failures, rollback, timings, warnings; the run's
//! overall outcome, exit code, summary line and step outputs.

use crate::util::git::CommitInfo;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What became of one target (or, aggregated, of the whole run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetOutcome {
    /// The new revision is applied and healthy.
    Deployed,
    /// The new revision failed and was not rolled back (policy, or nothing to roll back to).
    Failed,
    /// The target went back to its last good release, which is healthy.
    RolledBack,
    /// Going back to the last good release failed too.
    RollbackFailed,
    /// Nothing was done on this target (not selected, or stopped before it started).
    Skipped,
    /// The run was cancelled (SIGINT/SIGTERM) while this target was in progress.
    Cancelled,
}

impl TargetOutcome {
    /// The kebab-case word used in JSON, tables and comments.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetOutcome::Deployed => "deployed",
            TargetOutcome::Failed => "failed",
            TargetOutcome::RolledBack => "rolled-back",
            TargetOutcome::RollbackFailed => "rollback-failed",
            TargetOutcome::Skipped => "skipped",
            TargetOutcome::Cancelled => "cancelled",
        }
    }

    /// Higher wins when outcomes are aggregated over targets.
    pub(crate) fn severity(self) -> u8 {
        match self {
            TargetOutcome::Skipped => 0,
            TargetOutcome::Deployed => 1,
            TargetOutcome::RolledBack => 2,
            TargetOutcome::Failed => 3,
            TargetOutcome::RollbackFailed => 4,
            TargetOutcome::Cancelled => 5,
        }
    }

    /// True for outcomes that need a human's attention in reports.
    pub fn is_problem(self) -> bool {
        !matches!(self, TargetOutcome::Deployed | TargetOutcome::Skipped)
    }
}

impl std::fmt::Display for TargetOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of the phase in which a healthy target of a wave is watched before the next wave
/// starts (`bake:`); the renderers show it as the wave's bake.
pub const BAKE_PHASE: &str = "bake";

/// The name of the phase in which a target goes back to its last good release.
pub const ROLLBACK_PHASE: &str = "rollback";

/// How long one step of a target took (connect, lock, apply, wait, rollback, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTiming {
    pub name: String,
    pub seconds: f64,
    /// For a script stage: its scope (`target` or `fleet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// For a script stage that exited by itself: its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

impl PhaseTiming {
    /// A phase that is not a script stage.
    pub fn new(name: impl Into<String>, seconds: f64) -> PhaseTiming {
        PhaseTiming {
            name: name.into(),
            seconds,
            script: None,
            exit_code: None,
        }
    }
}

/// How a script stage (or its rollback command) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageOutcome {
    Succeeded,
    /// Exited non-zero (or was killed by a signal, or could not start).
    Failed,
    /// Ran past its timeout and was killed.
    TimedOut,
    /// Failed or timed out under `continue_on_error`: the deploy went on.
    Warned,
    /// Killed because rollguard was cancelled.
    Stopped,
    /// Not run: a dry run, or a rollback command with no time left in the cancel budget.
    NotRun,
}

impl StageOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            StageOutcome::Succeeded => "succeeded",
            StageOutcome::Failed => "failed",
            StageOutcome::TimedOut => "timed-out",
            StageOutcome::Warned => "warned",
            StageOutcome::Stopped => "stopped",
            StageOutcome::NotRun => "not-run",
        }
    }

    /// The stage's command started (so its rollback command is due on a rollback).
    pub fn started(self) -> bool {
        self != StageOutcome::NotRun
    }
}

/// One run of a script stage's command on a target (or once for the fleet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    pub name: String,
    /// `target` or `fleet`.
    pub scope: String,
    /// True for the stage's `rollback` command.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
    pub outcome: StageOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub seconds: f64,
    /// What happened, e.g. "exited with code 3".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last 20 lines of output of a failed or warned run, secret values redacted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<String>,
}

/// What a check concluded on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckVerdict {
    /// Every result passed (or failed no more than `failures_allowed` times in a row).
    Passed,
    /// More than `failures_allowed` failing results in a row: the target failed on it.
    Failed,
    /// No data, or the source could not be read, and the check's settings do not count that
    /// as a failure.
    Inconclusive,
    /// The check never ran (the target failed or was stopped before it was healthy).
    NotRun,
}

/// Where a check reads its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    Prometheus,
    Http,
}

/// One result of a check: its time, the value read (a Prometheus value; an HTTP status),
/// and how it was judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckSample {
    pub time: Timestamp,
    /// None when there was no value (no data, an error, a timeout).
    #[serde(default)]
    pub value: Option<f64>,
    pub verdict: CheckVerdict,
    /// Why the sample is not a plain value, scrubbed: "no data", "Prometheus answered 503".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One check on one target (`checks:` entry), with every sample it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub name: String,
    pub kind: CheckKind,
    pub verdict: CheckVerdict,
    /// The condition that fails a sample, as written: "> 0.01"; for HTTP "status != 200".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_if: Option<String>,
    /// The threshold of `fail_if` as a number, for charts (None for HTTP checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The rendered query or URL, credentials masked.
    pub source: String,
    #[serde(default)]
    pub samples: Vec<CheckSample>,
    /// The one-line reason when the check failed the target:
    /// "error-rate = 0.043 > 0.01 at 12:03:10".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why a target failed: one unhealthy object, pod or container.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Failure {
    /// "Deployment shop/web" (kind namespace/name), or the stage name for non-object failures.
    pub object: String,
    #[serde(default)]
    pub pod: Option<String>,
    #[serde(default)]
    pub container: Option<String>,
    /// Short machine-ish reason: "ImagePullBackOff", "ProgressDeadlineExceeded", "Timeout".
    pub reason: String,
    /// Human message, e.g. the kubelet's `Back-off pulling image "nginx:doesnotexist"`.
    pub message: String,
    /// Recent Warning events of the object and its pods, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The failing container's image (pod problems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The exit code of the container's last termination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The signal that ended it ("SIGKILL"), when the exit code is 128 + a signal number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// How many times the kubelet restarted the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i64>,
    /// The last lines of the failing containers' logs (at most 3 pods), secret values redacted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<ContainerLog>,
}

/// The end of one container instance's log, read when a target failed on it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContainerLog {
    pub pod: String,
    pub container: String,
    /// True for the instance that exited (`kubectl logs --previous`), false for the current one.
    pub previous: bool,
    /// The last lines, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// Why the log could not be read, in one line (then `lines` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Failure {
    /// One line saying what, where and why:
    /// `Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image "x"`.
    pub fn headline(&self) -> String {
        let mut line = self.object.clone();
        if let Some(pod) = &self.pod {
            line.push_str(": pod ");
            line.push_str(pod);
            if let Some(container) = &self.container {
                line.push_str(" container ");
                line.push_str(container);
            }
        } else if let Some(container) = &self.container {
            line.push_str(": container ");
            line.push_str(container);
        }
        if !self.reason.is_empty() {
            line.push_str(": ");
            line.push_str(&self.reason);
        }
        if !self.message.is_empty() && self.message != self.reason {
            line.push_str(": ");
            line.push_str(&self.message);
        }
        line
    }
}

/// What the automatic (or manual) rollback of a target did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackReport {
    /// The last good revision whose manifests were re-applied; None when there was none.
    pub to_revision: Option<u64>,
    /// RolledBack, RollbackFailed, or Failed when there was nothing to roll back to.
    pub outcome: TargetOutcome,
    /// Objects the failed revision created that the last good one lacks; rollback never prunes.
    #[serde(default)]
    pub left_in_place: Vec<String>,
    /// What happened, e.g. "connection refused" or why the rollback's rollout failed.
    #[serde(default)]
    pub message: Option<String>,
    /// The commit (short sha) of the revision gone back to, when its record names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_commit: Option<String>,
    /// The revision the rollback itself was recorded as (the run's revision + 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_revision: Option<u64>,
    /// When the fleet decided to roll this target back (the rollback's first step started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// Why it was rolled back: "failed", "policy rollback-all: us failed at 12:03:04",
    /// "cancelled by SIGTERM (on_cancel: rollback)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl RollbackReport {
    /// A rollback with only its outcome and destination known yet; the rest is filled in as
    /// the rollback goes.
    pub fn new(outcome: TargetOutcome, to_revision: Option<u64>) -> RollbackReport {
        RollbackReport {
            to_revision,
            outcome,
            left_in_place: Vec::new(),
            message: None,
            to_commit: None,
            as_revision: None,
            started_at: None,
            why: None,
        }
    }

    /// The `why` of a rollback the failure policy ordered because another target failed:
    /// "policy rollback-all: us failed at 12:03:04" (UTC, to the second).
    pub fn policy_why(policy: &str, failed: &str, at: Timestamp) -> String {
        format!(
            "policy {policy}: {failed} failed at {}",
            at.strftime("%H:%M:%S")
        )
    }
}

/// One target's part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    pub name: String,
    /// The wave this target belongs to (`wave:` in the config; 0 when none is set). Waves run
    /// in order, each after the previous one's targets are healthy and baked.
    #[serde(default)]
    pub wave: u32,
    pub outcome: TargetOutcome,
    /// The revision recorded for this deploy (None when nothing was recorded).
    pub revision: Option<u64>,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    #[serde(default)]
    pub phases: Vec<PhaseTiming>,
    #[serde(default)]
    pub failures: Vec<Failure>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// A one-line explanation when there is no object-level failure, e.g. "connection refused".
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub rollback: Option<RollbackReport>,
    /// Revisions left `pending` by a run that died, marked failed (abandoned) by this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned_revisions: Vec<u64>,
    /// The script stages (and rollback commands) run for this target, in the order they ran;
    /// a fleet stage appears on every target that took part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageResult>,
    /// The deploy changed nothing here (the manifests are the last good release's and the
    /// cluster matches them): nothing was recorded and only `always` stages ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
    /// The checks (`checks:`) run on this target from healthy to the end of its bake, in
    /// config order, each with every value it read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckReport>,
    /// Objects of the target's previous release that this revision's manifests no longer
    /// declare, and what became of each (left in place, pruned, kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedObject>,
}

/// What became of an object the manifests dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DroppedFate {
    /// Still on the cluster: prune is off, or the target did not deploy healthy.
    LeftInPlace,
    /// Deleted after the healthy deploy (`prune: true` / `--prune`).
    Pruned,
    /// Prune is on, but the object is not this app's to delete (`note` says why).
    Kept,
    /// Prune is on and the delete failed (`note` says why and what to do).
    PruneFailed,
}

/// One object of the previous release that the manifests no longer declare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedObject {
    /// "ConfigMap shop/legacy"
    pub object: String,
    pub fate: DroppedFate,
    /// Why it was kept, or why its delete failed and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl DroppedObject {
    /// One line for people: `left in place: ConfigMap shop/legacy, dropped from the manifests
    /// in this revision`.
    pub fn line(&self) -> String {
        let what = match self.fate {
            DroppedFate::LeftInPlace | DroppedFate::PruneFailed => "left in place",
            DroppedFate::Pruned => "pruned",
            DroppedFate::Kept => "kept",
        };
        let note = self
            .note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default();
        format!(
            "{what}: {}, dropped from the manifests in this revision{note}",
            self.object
        )
    }
}

impl TargetReport {
    /// Whether this target has a problem of its own, not only a rollback the fleet's failure
    /// policy made: what the summary line names, and what a long report shows first.
    pub fn failed_itself(&self) -> bool {
        self.outcome.is_problem()
            && (self.outcome != TargetOutcome::RolledBack || !self.failures.is_empty())
    }

    /// A target report with no phases, failures or rollback yet.
    pub fn new(name: impl Into<String>, outcome: TargetOutcome, at: Timestamp) -> Self {
        TargetReport {
            name: name.into(),
            wave: 0,
            outcome,
            revision: None,
            started_at: at,
            finished_at: at,
            phases: Vec::new(),
            failures: Vec::new(),
            warnings: Vec::new(),
            message: None,
            rollback: None,
            abandoned_revisions: Vec::new(),
            stages: Vec::new(),
            unchanged: false,
            checks: Vec::new(),
            dropped: Vec::new(),
        }
    }

    /// Wall time of this target.
    pub fn duration(&self) -> Duration {
        elapsed(self.started_at, self.finished_at)
    }

    /// How long this target baked (its [`BAKE_PHASE`] phases), None when it did not bake.
    pub fn bake(&self) -> Option<Duration> {
        let seconds: f64 = self
            .phases
            .iter()
            .filter(|p| p.name == BAKE_PHASE)
            .map(|p| p.seconds)
            .sum();
        // A report read back from JSON may hold anything: no panic on NaN or overflow.
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// The shortest useful answer to "why is this target not deployed?".
    /// The short form of [`TargetReport::reason`], for the table and the summary line: the
    /// first failure's reason class (`ImagePullBackOff`, `ScriptFailed`), else the message's
    /// first line. The full text is said once, in the details.
    pub fn short_reason(&self) -> Option<String> {
        let rollback = || {
            self.rollback
                .as_ref()
                .and_then(|r| r.message.as_deref().map(first_line))
        };
        let own = || {
            self.failures
                .first()
                .map(|f| f.reason.clone())
                .or_else(|| self.message.as_deref().map(first_line))
        };
        // A failed rollback is what a reader must act on first, as in `reason`.
        match self.outcome {
            TargetOutcome::RollbackFailed => rollback().or_else(own),
            _ => own().or_else(rollback),
        }
        .filter(|r| !r.is_empty())
    }

    pub fn reason(&self) -> Option<String> {
        let own = || {
            self.failures
                .first()
                .map(Failure::headline)
                .or_else(|| self.message.clone())
        };
        match self.outcome {
            TargetOutcome::Deployed | TargetOutcome::Skipped => self.message.clone(),
            TargetOutcome::RollbackFailed => self
                .rollback
                .as_ref()
                .and_then(|r| r.message.clone())
                .or_else(own),
            TargetOutcome::Failed | TargetOutcome::RolledBack | TargetOutcome::Cancelled => own(),
        }
    }
}

/// The whole run. Serialized as the `--report` JSON (schema version 1, see `report_schema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Schema version of this document; 1.
    pub version: u32,
    pub app: String,
    pub commit: Option<CommitInfo>,
    /// Aggregated over targets with `overall_outcome`.
    pub outcome: TargetOutcome,
    /// One line, e.g. "rolled back 2 of 3; eu: connection refused" (see `summary_line`).
    pub summary: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub targets: Vec<TargetReport>,
    #[serde(default)]
    pub dry_run: bool,
    /// Where the run happened (CI run URL) when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_url: Option<String>,
    /// What a dry run found would change (`rollguard diff`, `deploy --dry-run`): the source
    /// of the PR's plan comment (`plan_to_markdown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ChangePlan>,
    /// A server refused an object in the preflight dry run: nothing was written anywhere,
    /// and the exit code is 2 (bad input).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused_in_preflight: bool,
    /// The slice of the fleet a `deploy --shard I/N` run deployed (`report merge` combines
    /// the shards' reports); absent for a whole-fleet run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The saved plan a `deploy --plan` ran (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_plan: Option<SavedPlanUse>,
    /// How many targets ran at once, and why (set, or what the memory budget holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<ConcurrencyInfo>,
}

/// What a `deploy --plan` did with its plan file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPlanUse {
    /// `sha256:<hex>` of the plan file.
    pub digest: String,
    pub made_at: Timestamp,
    /// The pull request the plan was made on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr: Option<u64>,
    /// The clusters or manifests moved since the plan and `--replan` went on with a new one.
    #[serde(default)]
    pub replanned: bool,
    /// The plan no longer held and nothing was written (exit 2): what moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<String>,
}

impl SavedPlanUse {
    /// "applied plan sha256:… made at … on PR #N" (or "re-planned: plan … no longer held").
    pub fn line(&self) -> String {
        let pr = self.pr.map(|n| format!(" on PR #{n}")).unwrap_or_default();
        let made = self.made_at.strftime("%Y-%m-%d %H:%M:%S UTC");
        if !self.mismatches.is_empty() {
            format!(
                "refused plan {} made at {made}{pr}: {} moved since the plan, nothing was written",
                self.digest,
                self.mismatches.len()
            )
        } else if self.replanned {
            format!(
                "re-planned: plan {} made at {made}{pr} no longer held, applied the new plan",
                self.digest
            )
        } else {
            format!("applied plan {} made at {made}{pr}", self.digest)
        }
    }
}

/// The concurrency of a run and why: `concurrency 64 (memory budget 512 MiB / 8 MiB per
/// target of 4 objects)`, or `concurrency 8 (set by --concurrency)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcurrencyInfo {
    /// Targets in flight at once, at most.
    pub value: usize,
    /// The memory budget it follows from, in bytes (absent: set explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget_bytes: Option<u64>,
    /// The estimated memory of one target in flight, in bytes (absent: set explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_target_bytes: Option<u64>,
    /// One line: the value and where it came from.
    pub reason: String,
}

/// Which shard of a `--shard I/N` deploy a report is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// I, from 1.
    pub index: u32,
    /// N, the number of shards.
    pub count: u32,
    /// The digest of the manifests deployed: the same in every shard of one deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Report {
    /// Indices of the targets, those that failed themselves first (each part in config
    /// order): the order a long report gives them when it cannot give them all whole.
    pub fn failed_first(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.targets.len()).collect();
        order.sort_by_key(|&i| !self.targets[i].failed_itself());
        order
    }

    /// Builds a report from finished targets, computing outcome and summary.
    pub fn new(
        app: impl Into<String>,
        commit: Option<CommitInfo>,
        started_at: Timestamp,
        finished_at: Timestamp,
        targets: Vec<TargetReport>,
    ) -> Self {
        let mut report = Report {
            version: 1,
            app: app.into(),
            commit,
            outcome: overall_outcome(&targets),
            summary: String::new(),
            started_at,
            finished_at,
            targets,
            dry_run: false,
            run_url: None,
            plan: None,
            shard: None,
            refused_in_preflight: false,
            saved_plan: None,
            concurrency: None,
        };
        report.summary = summary_line(&report);
        report
    }

    pub fn duration(&self) -> Duration {
        elapsed(self.started_at, self.finished_at)
    }

    /// The targets by wave, waves in order and targets in config order within each.
    pub fn waves(&self) -> Vec<Wave<'_>> {
        let mut numbers: Vec<u32> = self.targets.iter().map(|t| t.wave).collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
            .into_iter()
            .map(|number| Wave {
                number,
                targets: self.targets.iter().filter(|t| t.wave == number).collect(),
            })
            .collect()
    }

    /// Recomputes `outcome` and `summary` after targets or `dry_run` changed. An outcome set
    /// by hand that is more serious than the targets' (a cancelled run) is kept.
    pub fn refresh(&mut self) {
        let from_targets = overall_outcome(&self.targets);
        if from_targets.severity() >= self.outcome.severity() {
            self.outcome = from_targets;
        }
        self.summary = summary_line(self);
    }
}

/// The targets of one wave of a report ([`Report::waves`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Wave<'a> {
    pub number: u32,
    pub targets: Vec<&'a TargetReport>,
}

impl Wave<'_> {
    /// How long the wave baked: the longest bake of its targets (they bake together).
    pub fn bake(&self) -> Option<Duration> {
        self.targets.iter().filter_map(|t| t.bake()).max()
    }

    /// "wave 1", or "wave 1 (bake 10m)" when its targets baked.
    pub fn heading(&self) -> String {
        match self.bake() {
            Some(bake) => format!(
                "wave {} (bake {})",
                self.number,
                crate::util::duration::format_duration(bake)
            ),
            None => format!("wave {}", self.number),
        }
    }
}

fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    let nanos = to.as_nanosecond() - from.as_nanosecond();
    Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
}

/// The run's outcome: the most serious of the targets' outcomes
/// (cancelled > rollback-failed > failed > rolled-back > deployed > skipped).
/// No targets at all counts as skipped.
pub fn overall_outcome(targets: &[TargetReport]) -> TargetOutcome {
    targets
        .iter()
        .map(|t| t.outcome)
        .max_by_key(|o| o.severity())
        .unwrap_or(TargetOutcome::Skipped)
}

/// Process exit code: 0 every target deployed (or skipped); 130 cancelled; 3 a rollback failed;
/// 1 any other failure; 2 a server refused the manifests in the preflight dry run (other bad
/// input is decided before a report exists).
pub fn exit_code(report: &Report) -> i32 {
    let from_targets = overall_outcome(&report.targets);
    let outcome = if report.outcome.severity() > from_targets.severity() {
        report.outcome
    } else {
        from_targets
    };
    let plan_refused = report
        .saved_plan
        .as_ref()
        .is_some_and(|p| !p.mismatches.is_empty());
    if (report.refused_in_preflight || plan_refused) && outcome != TargetOutcome::Cancelled {
        return 2;
    }
    match outcome {
        TargetOutcome::Deployed | TargetOutcome::Skipped => 0,
        TargetOutcome::Cancelled => 130,
        TargetOutcome::RollbackFailed => 3,
        TargetOutcome::Failed | TargetOutcome::RolledBack => 1,
    }
}

/// How many per-target reasons the summary line names before "and N more".
const SUMMARY_REASONS: usize = 3;
const SUMMARY_REASON_CHARS: usize = 120;

/// One line for logs, step outputs and headlines:
/// "deployed to 3 of 3", "rolled back 2 of 3; eu: connection refused",
/// "deployed to 2 of 3, 1 failed; us: Deployment shop/web: ...: ImagePullBackOff: ...".
pub fn summary_line(report: &Report) -> String {
    // A dry run's summary is its plan's: "would change N objects on K of M targets".
    if let Some(plan) = &report.plan {
        return plan.summary.clone();
    }
    let targets = &report.targets;
    let total = targets.len();
    let count = |o: TargetOutcome| targets.iter().filter(|t| t.outcome == o).count();
    // Deployed targets that changed nothing are said apart: "no changes on 2 of 3".
    let unchanged = targets
        .iter()
        .filter(|t| t.outcome == TargetOutcome::Deployed && t.unchanged)
        .count();
    let deployed = count(TargetOutcome::Deployed) - unchanged;
    let failed = count(TargetOutcome::Failed);
    let rolled_back = count(TargetOutcome::RolledBack);
    let rollback_failed = count(TargetOutcome::RollbackFailed);
    let cancelled = count(TargetOutcome::Cancelled);
    let skipped = count(TargetOutcome::Skipped);

    if total == 0 {
        return "no targets".to_string();
    }
    let verb = if report.dry_run {
        "dry run: would deploy to"
    } else {
        "deployed to"
    };
    let mut parts: Vec<String> = Vec::new();
    if cancelled > 0 {
        parts.push(format!("cancelled on {cancelled} of {total}"));
    }
    if rolled_back + rollback_failed > 0 {
        parts.push(format!(
            "rolled back {rolled_back} of {}",
            rolled_back + rollback_failed
        ));
    }
    if deployed > 0 && (deployed < total || parts.is_empty()) {
        parts.push(format!("{verb} {deployed} of {total}"));
    }
    if unchanged > 0 {
        parts.push(format!("no changes on {unchanged} of {total}"));
    }
    if failed > 0 {
        parts.push(format!("{failed} failed"));
    }
    if skipped > 0
        && skipped < total
        && deployed + unchanged + failed + rolled_back + rollback_failed > 0
    {
        parts.push(format!("{skipped} skipped"));
    }
    if parts.is_empty() {
        parts.push(format!("skipped {skipped} of {total}"));
    }
    let mut line = parts.join(", ");

    let reasons: Vec<String> = targets
        .iter()
        // A target rolled back only because of the fleet policy has no reason of its own.
        .filter(|t| t.failed_itself())
        .filter_map(|t| {
            t.short_reason()
                .map(|r| format!("{}: {}", t.name, clip(&r, SUMMARY_REASON_CHARS)))
        })
        .collect();
    for reason in reasons.iter().take(SUMMARY_REASONS) {
        line.push_str("; ");
        line.push_str(reason);
    }
    if reasons.len() > SUMMARY_REASONS {
        line.push_str(&format!("; and {} more", reasons.len() - SUMMARY_REASONS));
    }
    line
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Cuts text to at most `limit` bytes, on a char boundary (a last-resort guard for bodies
/// with a byte limit).
pub fn cut_to(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// How many terminal columns `text` takes (wide characters two, combining marks none).
pub fn display_width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// Cuts text to at most `columns` terminal columns, marking the cut with an ellipsis (for
/// table cells and live lines that must not wrap: a live line that wraps breaks the redraw,
/// which moves the cursor up by lines, not by rows; [`clip`] counts characters, for limits in
/// characters). At 0 columns nothing fits, not even the ellipsis.
pub fn clip_columns(text: &str, columns: usize) -> String {
    if display_width(text) <= columns {
        return text.to_string();
    }
    let budget = columns.saturating_sub(1);
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > budget {
            break;
        }
        used += w;
        out.push(c);
    }
    if columns > 0 {
        out.push('…');
    }
    out
}

/// Cuts text to at most `max` characters, marking the cut with an ellipsis.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

// ---------------------------------------------------------------------------------------
// The plan: what a deploy (or a rollback) would change on each target, computed by the
// clusters themselves (server-side apply with `dryRun=All`) or offline against a git ref.
// Rendered by `plan.rs` (text, JSON, schema) and `markdown.rs` (the PR plan comment).
// ---------------------------------------------------------------------------------------

/// How the plan was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanMode {
    /// `rollguard diff` / `deploy --dry-run`: each cluster's dry-run answer vs its live objects.
    DryRun,
    /// `rollguard plan --offline`: this commit's manifests vs those of a git ref; no cluster.
    Offline,
    /// `rollguard rollback --dry-run`: the live objects vs the revision a rollback would apply.
    Rollback,
}

/// What the plan says of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanStatus {
    /// Something would be created or updated.
    Changes,
    /// Everything is as it would be after the deploy.
    NoChanges,
    /// The plan could not be computed for this target (see `errors`).
    Error,
}

/// One object that would be created or updated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedChange {
    /// "Deployment shop/web"
    pub object: String,
    /// Where it is written: "k8s/web.yaml:12" (None for objects of a record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Why the server could not check it, e.g. "CRD not yet on the cluster".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The unified diff of the normalised objects (updates only; whole, never cut here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One target's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetPlan {
    pub name: String,
    pub status: PlanStatus,
    /// A rollback's destination, e.g. "v3".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default)]
    pub create: Vec<PlannedChange>,
    #[serde(default)]
    pub update: Vec<PlannedChange>,
    #[serde(default)]
    pub unchanged: Vec<String>,
    /// Objects the compared side has and this one does not: left in place.
    #[serde(default)]
    pub dropped: Vec<String>,
    /// Objects of the last release the manifests drop that a deploy with `prune` would
    /// delete after a healthy deploy (only when prune is on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prune: Vec<String>,
    #[serde(default)]
    pub errors: Vec<Failure>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Every manifest object as the dry run saw it, for a saved plan (`diff --out`); not
    /// part of the plan's JSON.
    #[serde(skip)]
    pub seen: Vec<SeenObject>,
    /// The newest revision of the target's release history as the dry run read it (None:
    /// none, or not read), for a saved plan: the revision a deploy would record is above it.
    #[serde(skip)]
    pub history_head: Option<u64>,
}

/// One manifest object of a dry run, as a saved plan keeps it: the body it would apply
/// (none for a Secret: its digest only, so no value reaches the model) and the live object
/// the dry run compared it with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeenObject {
    /// "Deployment shop/web", as the plan names it.
    pub object: String,
    pub api_version: String,
    pub kind: String,
    /// Where it is applied (None: cluster-scoped).
    pub namespace: Option<String>,
    pub name: String,
    /// "k8s/web.yaml:12".
    pub origin: String,
    /// `sha256:<hex>` of the body as applied (canonical JSON).
    pub sha256: String,
    /// The body as applied; None for a Secret.
    pub body: Option<serde_json::Value>,
    /// The live object the dry run saw; None: it would be created.
    pub live: Option<LiveIdentity>,
}

/// A live object's identity and version, as a read of it saw them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveIdentity {
    pub uid: String,
    pub resource_version: String,
}

impl TargetPlan {
    pub fn new(name: impl Into<String>) -> TargetPlan {
        TargetPlan {
            name: name.into(),
            status: PlanStatus::NoChanges,
            to: None,
            create: Vec::new(),
            update: Vec::new(),
            unchanged: Vec::new(),
            dropped: Vec::new(),
            prune: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            seen: Vec::new(),
            history_head: None,
        }
    }

    /// Objects that would change (created, updated, or pruned).
    pub fn changes(&self) -> usize {
        self.create.len() + self.update.len() + self.prune.len()
    }

    /// Sets `status` from what was found.
    pub fn settle(&mut self) {
        self.status = if !self.errors.is_empty() {
            PlanStatus::Error
        } else if self.changes() > 0 {
            PlanStatus::Changes
        } else {
            PlanStatus::NoChanges
        };
    }
}

/// The plan of a run (`-o json`, schema version 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangePlan {
    /// Schema version of this document; 1.
    pub version: u32,
    pub app: String,
    pub mode: PlanMode,
    pub commit: Option<CommitInfo>,
    /// Offline: the ref compared with (its commit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<CommitInfo>,
    /// "would change 3 objects on 2 of 3 targets" (see `summary_line`).
    pub summary: String,
    /// Objects that would change, over all targets.
    pub changes: usize,
    /// Targets with at least one change.
    pub targets_changed: usize,
    pub targets: Vec<TargetPlan>,
    /// `sha256:<hex>` of the plan file this dry run saved (`--out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_as: Option<String>,
}

impl ChangePlan {
    /// A plan of finished targets, with counts and summary computed.
    pub fn new(
        app: impl Into<String>,
        mode: PlanMode,
        commit: Option<CommitInfo>,
        mut targets: Vec<TargetPlan>,
    ) -> ChangePlan {
        targets.iter_mut().for_each(TargetPlan::settle);
        let mut plan = ChangePlan {
            version: 1,
            app: app.into(),
            mode,
            commit,
            against: None,
            summary: String::new(),
            changes: targets.iter().map(TargetPlan::changes).sum(),
            targets_changed: targets.iter().filter(|t| t.changes() > 0).count(),
            targets,
            saved_as: None,
        };
        plan.summary = plan_summary_line(&plan);
        plan
    }

    pub fn has_errors(&self) -> bool {
        self.targets.iter().any(|t| t.status == PlanStatus::Error)
    }

    /// The exit code: 1 when a target could not be planned; with `detailed` (`--exit-code`,
    /// terraform's `-detailed-exitcode`) 2 for changes and 0 for none, else 0.
    pub fn exit_code(&self, detailed: bool) -> i32 {
        if self.has_errors() {
            1
        } else if detailed && self.changes > 0 {
            2
        } else {
            0
        }
    }
}

/// "would change N objects on K of M targets", then the targets that could not be planned.
pub fn plan_summary_line(plan: &ChangePlan) -> String {
    let total = plan.targets.len();
    let objects = if plan.changes == 1 {
        "object"
    } else {
        "objects"
    };
    let targets = if total == 1 { "target" } else { "targets" };
    let mut line = if total == 0 {
        "no targets".to_string()
    } else {
        format!(
            "would change {} {objects} on {} of {total} {targets}",
            plan.changes, plan.targets_changed
        )
    };
    let failed: Vec<&TargetPlan> = plan
        .targets
        .iter()
        .filter(|t| t.status == PlanStatus::Error)
        .collect();
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|t| t.name.as_str()).collect();
        line.push_str(&format!(
            "; {} could not be planned: {}",
            failed.len(),
            names.join(", ")
        ));
    }
    line
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    pub fn target(name: &str, outcome: TargetOutcome) -> TargetReport {
        let mut t = TargetReport::new(name, outcome, ts(0));
        t.finished_at = ts(12);
        t
    }

    #[test]
    fn clip_columns_counts_terminal_columns() {
        // (text, columns, clipped)
        let cases = [
            ("short", 10, "short"),
            ("exactly ten", 11, "exactly ten"),
            ("abcdefghij", 5, "abcd…"),
            // Wide characters take two columns: 4 of them fill 8, the ellipsis one more.
            ("日本語のノート", 9, "日本語の…"),
            ("日本語のノート", 8, "日本語…"),
            ("", 3, ""),
            ("", 0, ""),
            ("abcdef", 6, "abcdef"),
            ("abcdef", 4, "abc…"),
            ("abcdef", 1, "…"),
            // Not even the ellipsis fits in no column.
            ("abcdef", 0, ""),
            // Two columns per CJK character: 5 columns hold two of them and the ellipsis.
            ("日本語テキスト", 5, "日本…"),
            ("日本語", 6, "日本語"),
            // A combining accent takes no column.
            ("e\u{301}e\u{301}e\u{301}", 3, "e\u{301}e\u{301}e\u{301}"),
        ];
        for (text, columns, want) in cases {
            let got = clip_columns(text, columns);
            assert_eq!(got, want, "{text:?} in {columns}");
            assert!(display_width(&got) <= columns, "{got:?}");
        }
    }

    pub fn image_failure() -> Failure {
        Failure {
            object: "Deployment shop/web".into(),
            pod: Some("web-7d9f-x".into()),
            container: Some("web".into()),
            reason: "ImagePullBackOff".into(),
            message: "Back-off pulling image \"nginx:doesnotexist\"".into(),
            events: vec![],
            ..Default::default()
        }
    }

    pub fn report(targets: Vec<TargetReport>) -> Report {
        Report::new(
            "shop",
            Some(CommitInfo {
                sha: "0123456789abcdef0123456789abcdef01234567".into(),
                r#ref: Some("main".into()),
                message: Some("Bump web to v2".into()),
                dirty: false,
            }),
            ts(0),
            ts(20),
            targets,
        )
    }

    /// Three waves (canary; eu, us; ap, sa): the canary's pods crash-loop 5 s into its bake,
    /// it rolls back, the later waves are skipped.
    pub fn three_waves() -> Report {
        let mut canary = target("canary", TargetOutcome::RolledBack);
        canary.revision = Some(4);
        canary.failures.push(Failure {
            reason: "CrashLoopBackOff".into(),
            message: "back-off restarting failed container".into(),
            ..image_failure()
        });
        canary.phases = vec![
            PhaseTiming::new("connect", 0.25),
            PhaseTiming::new("apply", 1.0),
            PhaseTiming::new("wait", 2.0),
            PhaseTiming::new(BAKE_PHASE, 5.0),
            PhaseTiming::new(ROLLBACK_PHASE, 2.5),
        ];
        canary.rollback = Some(RollbackReport {
            to_commit: Some("3a30e4b".into()),
            as_revision: Some(5),
            started_at: Some(ts(9)),
            why: Some("failed".into()),
            ..RollbackReport::new(TargetOutcome::RolledBack, Some(3))
        });
        let skipped = |name: &str, wave: u32| {
            let mut t = TargetReport::new(name, TargetOutcome::Skipped, ts(9));
            t.wave = wave;
            t.message = Some("wave 0 failed (canary): this wave did not start".into());
            t
        };
        report(vec![
            canary,
            skipped("eu", 1),
            skipped("us", 1),
            skipped("ap", 2),
            skipped("sa", 2),
        ])
    }

    #[test]
    fn policy_why_names_the_policy_the_failed_target_and_the_second() {
        assert_eq!(
            RollbackReport::policy_why("rollback-all", "us", ts(9)),
            "policy rollback-all: us failed at 08:00:09"
        );
    }

    #[test]
    fn waves_are_in_order_with_targets_in_config_order() {
        let mut r = three_waves();
        // Config order need not follow the waves: us, eu, ap, sa, canary.
        r.targets.rotate_left(1);
        r.targets.swap(0, 1);
        let waves: Vec<(u32, Vec<&str>)> = r
            .waves()
            .iter()
            .map(|w| {
                (
                    w.number,
                    w.targets.iter().map(|t| t.name.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            waves,
            vec![
                (0, vec!["canary"]),
                (1, vec!["us", "eu"]),
                (2, vec!["ap", "sa"]),
            ]
        );
        let headings: Vec<String> = r.waves().iter().map(Wave::heading).collect();
        assert_eq!(headings, ["wave 0 (bake 5s)", "wave 1", "wave 2"]);
        assert!(report(vec![]).waves().is_empty());
    }

    #[test]
    fn a_wave_bakes_as_long_as_its_longest_bake() {
        let baked = |name: &str, seconds: f64| {
            let mut t = target(name, Deployed);
            t.phases = vec![
                PhaseTiming::new("wait", 30.0),
                PhaseTiming::new(BAKE_PHASE, seconds),
            ];
            t
        };
        let r = report(vec![baked("eu", 600.0), baked("us", 599.5)]);
        assert_eq!(r.waves()[0].heading(), "wave 0 (bake 10m)");
        // (bake phase seconds, bake): a report read back may hold anything.
        let cases = [
            (0.0, None),
            (-1.0, None),
            (f64::NAN, None),
            (f64::INFINITY, None),
            (1.5, Some(Duration::from_millis(1500))),
        ];
        for (seconds, want) in cases {
            assert_eq!(baked("eu", seconds).bake(), want, "{seconds}");
        }
        assert_eq!(target("eu", Deployed).bake(), None);
    }

    #[test]
    fn wave_and_rollback_why_in_json_and_old_reports_read_back() {
        let r = three_waves();
        let value = serde_json::to_value(&r).unwrap();
        assert_eq!(value["targets"][0]["wave"], 0, "always written");
        assert_eq!(value["targets"][4]["wave"], 2);
        let rollback = &value["targets"][0]["rollback"];
        assert_eq!(rollback["why"], "failed");
        assert_eq!(rollback["started_at"], "2027-01-15T08:00:09Z");
        // None is left out, not written as null.
        let mut none = r.clone();
        if let Some(rb) = none.targets[0].rollback.as_mut() {
            rb.why = None;
            rb.started_at = None;
        }
        let value = serde_json::to_value(&none).unwrap();
        let rollback = value["targets"][0]["rollback"].as_object().unwrap();
        assert!(!rollback.contains_key("why") && !rollback.contains_key("started_at"));
        // A report of an older version: no wave, no started_at or why.
        let mut old = serde_json::to_value(&none).unwrap();
        for t in old["targets"].as_array_mut().unwrap() {
            t.as_object_mut().unwrap().remove("wave");
        }
        let back: Report = serde_json::from_value(old).unwrap();
        assert!(back.targets.iter().all(|t| t.wave == 0));
        assert_eq!(back.targets[0].rollback, none.targets[0].rollback);
    }

    use TargetOutcome::*;

    #[test]
    fn overall_outcome_table() {
        let cases: &[(&[TargetOutcome], TargetOutcome)] = &[
            (&[], Skipped),
            (&[Deployed, Deployed], Deployed),
            (&[Deployed, Skipped], Deployed),
            (&[Skipped, Skipped], Skipped),
            (&[Deployed, Failed], Failed),
            (&[RolledBack, RolledBack, RolledBack], RolledBack),
            (&[RolledBack, Failed], Failed),
            (&[RolledBack, RollbackFailed, Deployed], RollbackFailed),
            (&[RollbackFailed, Cancelled], Cancelled),
        ];
        for (outcomes, want) in cases {
            let targets: Vec<_> = outcomes.iter().map(|o| target("t", *o)).collect();
            assert_eq!(overall_outcome(&targets), *want, "{outcomes:?}");
        }
    }

    #[test]
    fn exit_code_table() {
        let cases: &[(&[TargetOutcome], i32)] = &[
            (&[Deployed, Deployed, Deployed], 0),
            (&[Skipped], 0),
            (&[Deployed, Failed], 1),
            (&[RolledBack, Deployed], 1),
            (&[RolledBack, RollbackFailed], 3),
            (&[Failed, RollbackFailed], 3),
            (&[Cancelled, Deployed], 130),
            (&[Cancelled, RollbackFailed], 130),
        ];
        for (outcomes, want) in cases {
            let targets: Vec<_> = outcomes.iter().map(|o| target("t", *o)).collect();
            assert_eq!(exit_code(&report(targets)), *want, "{outcomes:?}");
        }
    }

    #[test]
    fn exit_code_respects_a_cancelled_run_outcome() {
        let mut r = report(vec![target("eu", Skipped)]);
        r.outcome = Cancelled;
        assert_eq!(exit_code(&r), 130);
    }

    fn unchanged(name: &str) -> TargetReport {
        let mut t = target(name, Deployed);
        t.unchanged = true;
        t
    }

    #[test]
    fn summary_line_table() {
        let mut eu = target("eu", RollbackFailed);
        eu.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: Some(3),
            outcome: RollbackFailed,
            left_in_place: vec![],
            message: Some("connection refused".into()),
        });
        let mut us_failed = target("us", Failed);
        us_failed.failures.push(image_failure());
        let mut down = target("ap", Failed);
        down.message = Some("connection refused\nmore detail".into());

        let cases: Vec<(Vec<TargetReport>, &str)> = vec![
            (
                vec![
                    target("eu", Deployed),
                    target("us", Deployed),
                    target("ap", Deployed),
                ],
                "deployed to 3 of 3",
            ),
            (
                vec![
                    eu.clone(),
                    target("us", RolledBack),
                    target("ap", RolledBack),
                ],
                "rolled back 2 of 3; eu: connection refused",
            ),
            (
                vec![
                    target("eu", Deployed),
                    us_failed.clone(),
                    target("ap", Deployed),
                ],
                // The short form: the failure in full is in the table's details.
                "deployed to 2 of 3, 1 failed; us: ImagePullBackOff",
            ),
            (
                vec![target("eu", Deployed), down.clone()],
                "deployed to 1 of 2, 1 failed; ap: connection refused",
            ),
            (
                vec![target("eu", Cancelled), target("us", RolledBack)],
                "cancelled on 1 of 2, rolled back 1 of 1",
            ),
            (vec![target("eu", Skipped)], "skipped 1 of 1"),
            (vec![], "no targets"),
            (
                vec![target("eu", Deployed), target("us", Skipped)],
                "deployed to 1 of 2, 1 skipped",
            ),
            (
                vec![unchanged("eu"), unchanged("us")],
                "no changes on 2 of 2",
            ),
            (
                vec![
                    target("eu", Deployed),
                    unchanged("us"),
                    target("ap", Skipped),
                ],
                "deployed to 1 of 3, no changes on 1 of 3, 1 skipped",
            ),
        ];
        for (targets, want) in cases {
            assert_eq!(report(targets).summary, want);
        }
    }

    #[test]
    fn summary_line_caps_reasons() {
        let targets: Vec<_> = (0..5)
            .map(|i| {
                let mut t = target(&format!("t{i}"), Failed);
                t.message = Some("x".repeat(500));
                t
            })
            .collect();
        let line = report(targets).summary;
        assert!(line.starts_with("5 failed; t0: xxx"), "{line}");
        assert!(line.ends_with("; and 2 more"), "{line}");
        assert!(line.chars().count() < 500, "{}", line.len());
    }

    #[test]
    fn dry_run_summary() {
        let mut r = report(vec![target("eu", Deployed)]);
        r.dry_run = true;
        assert_eq!(summary_line(&r), "dry run: would deploy to 1 of 1");
        r.refresh();
        assert_eq!(r.summary, "dry run: would deploy to 1 of 1");
    }

    #[test]
    fn refresh_recomputes_and_keeps_cancel() {
        let mut r = report(vec![target("eu", Deployed)]);
        r.targets[0].outcome = RolledBack;
        r.refresh();
        assert_eq!(
            (r.outcome, r.summary.as_str()),
            (RolledBack, "rolled back 1 of 1")
        );
        r.outcome = Cancelled;
        r.refresh();
        assert_eq!(r.outcome, Cancelled);
    }

    #[test]
    fn headline_table() {
        let full = image_failure();
        let cases = vec![
            (
                full.clone(),
                "Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"",
            ),
            (
                Failure {
                    container: None,
                    ..full.clone()
                },
                "Deployment shop/web: pod web-7d9f-x: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"",
            ),
            (
                Failure {
                    object: "Deployment shop/stuck".into(),
                    reason: "ProgressDeadlineExceeded".into(),
                    message: "ReplicaSet \"stuck-1\" has timed out progressing.".into(),
                    ..Default::default()
                },
                "Deployment shop/stuck: ProgressDeadlineExceeded: ReplicaSet \"stuck-1\" has timed out progressing.",
            ),
            (
                Failure {
                    object: "Job shop/migrate".into(),
                    reason: "Timeout".into(),
                    message: String::new(),
                    ..Default::default()
                },
                "Job shop/migrate: Timeout",
            ),
        ];
        for (failure, want) in cases {
            assert_eq!(failure.headline(), want);
        }
    }

    #[test]
    fn outcome_words_match_serde() {
        for o in [
            Deployed,
            Failed,
            RolledBack,
            RollbackFailed,
            Skipped,
            Cancelled,
        ] {
            assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::Value::String(o.as_str().into())
            );
        }
    }

    #[test]
    fn a_dropped_object_says_what_became_of_it() {
        let dropped = |fate, note: Option<&str>| DroppedObject {
            object: "ConfigMap shop/legacy".into(),
            fate,
            note: note.map(str::to_string),
        };
        let cases = [
            (
                dropped(DroppedFate::LeftInPlace, None),
                "left in place: ConfigMap shop/legacy, dropped from the manifests in this revision",
            ),
            (
                dropped(DroppedFate::Pruned, None),
                "pruned: ConfigMap shop/legacy, dropped from the manifests in this revision",
            ),
            (
                dropped(DroppedFate::Kept, Some("now managed by \"kubectl\"")),
                "kept: ConfigMap shop/legacy, dropped from the manifests in this revision: now managed by \"kubectl\"",
            ),
            (
                dropped(
                    DroppedFate::PruneFailed,
                    Some("the delete failed: Forbidden"),
                ),
                "left in place: ConfigMap shop/legacy, dropped from the manifests in this revision: the delete failed: Forbidden",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(object.line(), want);
        }
        let json = serde_json::to_value(dropped(DroppedFate::PruneFailed, None)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"object": "ConfigMap shop/legacy", "fate": "prune-failed"})
        );
    }
}
