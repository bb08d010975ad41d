//! The report of a manual rollback (`rollguard rollback --report FILE`): the same JSON
//! document a deploy writes, each target `rolled-back` (or `rollback-failed`, `cancelled`)
//! with its rollback's destination, the revision it was recorded as, its rollback commands
//! and why: by hand. Pure: the command gathers what happened, this says it.

use jiff::Timestamp;

use crate::report::{
    Report, RollbackReport, StageOutcome, StageResult, TargetOutcome, TargetReport,
};

/// The `why` of every target's rollback in a manual rollback's report.
pub fn why(destination: &str) -> String {
    format!("rolled back by hand (rollguard rollback) to {destination}")
}

/// Why a target's manual rollback did not re-apply its manifests, worded as the rollback's
/// own errors are ("rollback to v1: ..."), never as a deploy to roll back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReapplyError {
    #[error("rollback to {destination} cancelled")]
    Cancelled { destination: String },
    /// `why`: the first failure's headline, else the report's message, else its outcome.
    #[error("rollback to {destination}: {why}")]
    Failed { destination: String, why: String },
    /// The coordinator gave no report for the target.
    #[error("rollback to {destination}: not run")]
    NotRun { destination: String },
}

/// What the coordinator's run of one target's rollback (its `report`, the manifests of
/// `destination` re-applied as a deploy) means for [`ManualTarget::applied`]: deployed is
/// the revision it was recorded as; anything else is why not.
pub fn applied_by_coordinator(
    report: &TargetReport,
    destination: &str,
) -> Result<u64, ReapplyError> {
    let destination = destination.to_string();
    match (report.outcome, report.revision) {
        (TargetOutcome::Deployed, Some(revision)) => Ok(revision),
        (TargetOutcome::Cancelled, _) => Err(ReapplyError::Cancelled { destination }),
        (outcome, _) => {
            let why = report
                .failures
                .first()
                .map(crate::report::Failure::headline)
                .or_else(|| report.message.clone())
                .unwrap_or_else(|| outcome.as_str().to_string());
            Err(ReapplyError::Failed { destination, why })
        }
    }
}

/// What one target's manual rollback did.
#[derive(Debug, Clone)]
pub struct ManualTarget {
    pub name: String,
    pub wave: u32,
    /// "v1" or "commit abc1234".
    pub destination: String,
    /// The revision gone back to (None: a commit's manifests from git).
    pub to_revision: Option<u64>,
    /// Short sha of the commit gone back to, when known.
    pub to_commit: Option<String>,
    /// Objects of the release rolled back from that the destination lacks.
    pub left_in_place: Vec<String>,
    /// Records of a run that died, marked abandoned under the lock.
    pub abandoned: Vec<u64>,
    /// The re-apply: the revision it was recorded as, or why it failed.
    pub applied: Result<u64, ReapplyError>,
    /// Its rollback commands, as they ran.
    pub commands: Vec<StageResult>,
    /// Whether a signal stopped the rollback.
    pub cancelled: bool,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
}

/// Whether a rollback command counts as done: succeeded, held back (a fleet stage waiting for
/// targets still on the release), or stopped by the signal that cancelled the run.
pub fn command_ok(result: &StageResult, cancelled: bool) -> bool {
    result.outcome == StageOutcome::Succeeded
        || (result.outcome == StageOutcome::Stopped && cancelled)
        || crate::stages::plan::is_held(result)
}

/// One target's entry: rolled back when its manifests were re-applied and every rollback
/// command is done; cancelled when a signal stopped what did not finish; else rollback failed.
pub fn target_report(t: ManualTarget) -> TargetReport {
    let commands_ok = t.commands.iter().all(|r| command_ok(r, t.cancelled));
    let outcome = match (&t.applied, commands_ok) {
        (Ok(_), true) => TargetOutcome::RolledBack,
        _ if t.cancelled => TargetOutcome::Cancelled,
        _ => TargetOutcome::RollbackFailed,
    };
    let failed_commands: Vec<&str> = t
        .commands
        .iter()
        .filter(|r| !command_ok(r, t.cancelled))
        .map(|r| r.name.as_str())
        .collect();
    let message = match &t.applied {
        Err(why) => Some(why.to_string()),
        Ok(_) if !failed_commands.is_empty() => Some(format!(
            "the rollback commands of {} failed: see stages",
            failed_commands.join(", ")
        )),
        Ok(_) => None,
    };
    let recorded = t.applied.as_ref().ok().copied();
    let mut report = TargetReport::new(t.name, outcome, t.started_at);
    report.wave = t.wave;
    report.finished_at = t.finished_at;
    report.revision = recorded;
    report.message = message.clone();
    report.abandoned_revisions = t.abandoned;
    report.stages = t.commands;
    report.rollback = Some(RollbackReport {
        to_revision: t.to_revision,
        outcome,
        left_in_place: t.left_in_place,
        message,
        to_commit: t.to_commit,
        as_revision: recorded,
        started_at: Some(t.started_at),
        why: Some(why(&t.destination)),
    });
    report
}

/// The whole manual rollback's report: the targets in the order given, the commit gone back
/// to when every target went back to the same one.
pub fn report(
    app: &str,
    commit: Option<crate::util::git::CommitInfo>,
    started_at: Timestamp,
    targets: Vec<ManualTarget>,
) -> Report {
    let finished_at = targets
        .iter()
        .map(|t| t.finished_at)
        .max()
        .unwrap_or(started_at);
    let targets = targets.into_iter().map(target_report).collect();
    Report::new(app, commit, started_at, finished_at, targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinated_rollback_is_its_record_or_why_not_in_the_rollbacks_words() {
        let report = |outcome, revision, failure: Option<&str>, message: Option<&str>| {
            let mut r = TargetReport::new("eu", outcome, Timestamp::UNIX_EPOCH);
            r.revision = revision;
            r.failures = failure
                .map(|object| crate::report::Failure {
                    object: object.into(),
                    ..Default::default()
                })
                .into_iter()
                .collect();
            r.message = message.map(str::to_string);
            r
        };
        let cases = [
            (report(TargetOutcome::Deployed, Some(7), None, None), Ok(7)),
            (
                report(
                    TargetOutcome::Failed,
                    Some(7),
                    Some("Deployment/web"),
                    Some("m"),
                ),
                Err("rollback to v1: Deployment/web"),
            ),
            (
                report(TargetOutcome::Skipped, None, None, Some("not started")),
                Err("rollback to v1: not started"),
            ),
            (
                report(TargetOutcome::Cancelled, Some(7), None, None),
                Err("rollback to v1 cancelled"),
            ),
            // Deployed without a record is no rollback (a no-op is never skipped, so not seen).
            (
                report(TargetOutcome::Deployed, None, None, None),
                Err("rollback to v1: deployed"),
            ),
        ];
        for (r, want) in cases {
            let got = applied_by_coordinator(&r, "v1").map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_string), "{r:?}");
        }
    }

    fn command(name: &str, outcome: StageOutcome) -> StageResult {
        StageResult {
            name: name.into(),
            scope: "target".into(),
            rollback: true,
            outcome,
            exit_code: None,
            seconds: 0.0,
            message: None,
            output: Vec::new(),
        }
    }

    fn target(applied: Result<u64, ReapplyError>, commands: Vec<StageResult>) -> ManualTarget {
        let at = Timestamp::UNIX_EPOCH;
        ManualTarget {
            name: "eu".into(),
            wave: 0,
            destination: "v1".into(),
            to_revision: Some(1),
            to_commit: Some("abc1234".into()),
            left_in_place: vec!["ConfigMap shop/new".into()],
            abandoned: vec![],
            applied,
            commands,
            cancelled: false,
            started_at: at,
            finished_at: at,
        }
    }

    #[test]
    fn each_target_says_what_its_rollback_did_and_why() {
        use StageOutcome::{Failed, Succeeded};
        // (re-apply, commands, cancelled, outcome, message)
        type Case = (
            Result<u64, ReapplyError>,
            Vec<StageResult>,
            bool,
            TargetOutcome,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (Ok(3), vec![], false, TargetOutcome::RolledBack, None),
            (
                Ok(3),
                vec![command("migrate", Succeeded)],
                false,
                TargetOutcome::RolledBack,
                None,
            ),
            (
                Ok(3),
                vec![command("migrate", Failed)],
                false,
                TargetOutcome::RollbackFailed,
                Some("the rollback commands of migrate failed: see stages"),
            ),
            (
                Err(ReapplyError::Failed {
                    destination: "v1".into(),
                    why: "connection refused".into(),
                }),
                vec![],
                false,
                TargetOutcome::RollbackFailed,
                Some("rollback to v1: connection refused"),
            ),
            (
                Err(ReapplyError::Cancelled {
                    destination: "v1".into(),
                }),
                vec![],
                true,
                TargetOutcome::Cancelled,
                Some("rollback to v1 cancelled"),
            ),
            (
                Ok(3),
                vec![command("migrate", StageOutcome::Stopped)],
                true,
                TargetOutcome::RolledBack,
                None,
            ),
        ];
        for (applied, commands, cancelled, outcome, message) in cases {
            let mut t = target(applied.clone(), commands);
            t.cancelled = cancelled;
            let r = target_report(t);
            assert_eq!(r.outcome, outcome, "{applied:?}");
            assert_eq!(r.message.as_deref(), message, "{applied:?}");
            assert_eq!(r.revision, applied.as_ref().ok().copied());
            let rollback = r.rollback.expect("a rollback entry");
            assert_eq!(rollback.outcome, outcome);
            assert_eq!(rollback.to_revision, Some(1));
            assert_eq!(rollback.as_revision, applied.ok());
            assert_eq!(
                rollback.why.as_deref(),
                Some("rolled back by hand (rollguard rollback) to v1")
            );
            assert_eq!(rollback.left_in_place, vec!["ConfigMap shop/new"]);
        }
    }

    #[test]
    fn the_report_is_the_worst_target_and_ends_with_the_last() {
        let late = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(5);
        let mut eu = target(Ok(3), vec![]);
        eu.finished_at = late;
        let refused = ReapplyError::Failed {
            destination: "v1".into(),
            why: "connection refused".into(),
        };
        let mut us = target(Err(refused), vec![]);
        us.name = "us".into();
        let r = report("shop", None, Timestamp::UNIX_EPOCH, vec![eu, us]);
        assert_eq!(r.outcome, TargetOutcome::RollbackFailed);
        assert_eq!(r.finished_at, late);
        let names: Vec<&str> = r.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["eu", "us"]);
    }
}
