//! All targets at once, bounded by `config.concurrency`. Each target runs in its own task
//! inside a tracing span `target=<name>`, so every log line names its target; a target that
//! fails never stops the others. The results become one `Report`.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{FailurePolicy, TargetConfig};
use crate::engine::plan::Plan;
use crate::engine::target_run::{Preflight, TargetRun, preflight, run_target};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};

/// Runs every target of the plan and returns their runs in config order. First the
/// preflight of every target (connect, discover the kinds), all before any target writes;
/// under `rollback-all` a target failing it stops the run there, the others `skipped`:
/// nothing was written, so the fleet stays on one version with nothing to roll back.
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    let concurrency = plan.config.concurrency.max(1);
    let targets = plan.config.targets.clone();
    let checked: Vec<Result<Preflight, Box<TargetRun>>> = futures::stream::iter(targets.clone())
        .map(|target| {
            let (plan, cancel, task_progress) = (plan.clone(), cancel.clone(), progress.clone());
            in_task(target.name.clone(), progress.clone(), async move {
                if cancel.is_cancelled() {
                    return Err(Box::new(skipped(
                        &target.name,
                        TargetOutcome::Cancelled,
                        "cancelled before it started",
                    )));
                }
                preflight(&plan, &target, &cancel, &task_progress).await
            })
        })
        .buffered(concurrency)
        .map(|r| r.unwrap_or_else(Err))
        .collect()
        .await;

    if let Some(reason) = preflight_stop(plan.config.on_failure, &targets, &checked) {
        return checked
            .into_iter()
            .zip(&targets)
            .map(|(checked, target)| match checked {
                Err(run) => *run,
                Ok(_) => {
                    progress.update(
                        &target.name,
                        Stage::Finished {
                            outcome: TargetOutcome::Skipped,
                            message: Some(reason.clone()),
                        },
                    );
                    skipped(&target.name, TargetOutcome::Skipped, &reason)
                }
            })
            .collect();
    }

    futures::stream::iter(checked.into_iter().zip(targets))
        .map(|(checked, target)| {
            let (plan, cancel, task_progress) = (plan.clone(), cancel.clone(), progress.clone());
            in_task(target.name.clone(), progress.clone(), async move {
                match checked {
                    Err(run) => *run,
                    Ok(preflight) => {
                        run_target(&plan, &target, preflight, &cancel, &task_progress).await
                    }
                }
            })
        })
        .buffered(concurrency)
        .map(|r| r.unwrap_or_else(|run| *run))
        .collect()
        .await
}

/// Under `rollback-all`, why the targets that passed the preflight do not start: the names
/// of the targets that failed it. None: every target passed, the run was cancelled (the
/// cancel path says so), or the policy lets the reachable targets go on.
pub fn preflight_stop<T>(
    policy: FailurePolicy,
    targets: &[TargetConfig],
    checked: &[Result<T, Box<TargetRun>>],
) -> Option<String> {
    if policy != FailurePolicy::RollbackAll {
        return None;
    }
    let failed: Vec<&str> = checked
        .iter()
        .zip(targets)
        .filter_map(|(c, t)| match c {
            Err(run) if run.report.outcome == TargetOutcome::Failed => Some(t.name.as_str()),
            _ => None,
        })
        .collect();
    if failed.is_empty()
        || checked
            .iter()
            .any(|c| matches!(c, Err(r) if r.report.outcome == TargetOutcome::Cancelled))
    {
        return None;
    }
    Some(format!(
        "not deployed: {} failed the preflight and on_failure is rollback-all (the fleet stays on one version); fix {} and run again",
        failed.join(", "),
        if failed.len() == 1 { "it" } else { "them" }
    ))
}

/// Runs one target's step in its own task inside the span `target=<name>`. A panic in it
/// becomes that target's failed run (`Err`), so it never takes the fleet down.
fn in_task<T: Send + 'static>(
    name: String,
    progress: Progress,
    step: impl std::future::Future<Output = T> + Send + 'static,
) -> impl std::future::Future<Output = Result<T, Box<TargetRun>>> {
    // error level: the span (and so the target name) is on every line that is logged at all.
    let span = tracing::error_span!("target", target = %name);
    let task = tokio::spawn(step.instrument(span));
    async move {
        task.await.map_err(|e| {
            let message = format!("internal error: {e}");
            progress.update(
                &name,
                Stage::Finished {
                    outcome: TargetOutcome::Failed,
                    message: Some(message.clone()),
                },
            );
            let mut run = skipped(&name, TargetOutcome::Failed, &message);
            run.report.failures.push(Failure {
                object: "rollguard".into(),
                reason: "InternalError".into(),
                message,
                ..Default::default()
            });
            Box::new(run)
        })
    }
}

fn skipped(name: &str, outcome: TargetOutcome, message: &str) -> TargetRun {
    let mut report = TargetReport::new(name, outcome, Timestamp::now());
    report.message = Some(message.to_string());
    TargetRun {
        report,
        access: None,
        applied: Vec::new(),
        received_new_revision: false,
        release: None,
    }
}

/// Deploys the plan to every target and builds the report.
pub async fn deploy(plan: Arc<Plan>, cancel: CancellationToken, progress: Progress) -> Report {
    let started_at = Timestamp::now();
    let mut runs = run_targets(plan.clone(), cancel.clone(), progress.clone()).await;
    // Records, the failure policy (or on_cancel) and the rollbacks, all at once.
    crate::engine::conclude::conclude(&plan, &mut runs, &cancel, &progress).await;
    let targets: Vec<TargetReport> = runs.into_iter().map(|r| r.report).collect();
    build_report(&plan, targets, started_at)
}

/// The report of a run.
pub fn build_report(plan: &Plan, targets: Vec<TargetReport>, started_at: Timestamp) -> Report {
    let mut report = Report::new(
        plan.config.app.clone(),
        plan.commit.clone(),
        started_at,
        Timestamp::now(),
        targets,
    );
    report.dry_run = plan.options.dry_run;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(names: &[&str]) -> Vec<TargetConfig> {
        names
            .iter()
            .map(|n| TargetConfig {
                name: n.to_string(),
                context: None,
                kubeconfig: None,
                kubeconfig_env: None,
                namespace: None,
                line: 0,
            })
            .collect()
    }

    #[test]
    fn preflight_stops_only_rollback_all_on_a_failure() {
        let ts = targets(&["eu", "us", "ap"]);
        let ok = || Ok::<(), Box<TargetRun>>(());
        let failed = |n: &str| Err(Box::new(skipped(n, TargetOutcome::Failed, "down")));
        let cancelled = |n: &str| Err(Box::new(skipped(n, TargetOutcome::Cancelled, "cancelled")));
        use FailurePolicy::{RollbackAll, RollbackFailed, RollbackIfAllFail};
        type Checked = Vec<Result<(), Box<TargetRun>>>;
        let cases: Vec<(FailurePolicy, Checked, Option<&str>)> = vec![
            (RollbackAll, vec![ok(), ok(), ok()], None),
            (
                RollbackAll,
                vec![ok(), failed("us"), ok()],
                Some("us failed"),
            ),
            (
                RollbackAll,
                vec![failed("eu"), failed("us"), ok()],
                Some("eu, us failed"),
            ),
            (RollbackAll, vec![ok(), failed("us"), cancelled("ap")], None),
            (RollbackFailed, vec![ok(), failed("us"), ok()], None),
            (RollbackIfAllFail, vec![ok(), failed("us"), ok()], None),
            (FailurePolicy::None, vec![ok(), failed("us"), ok()], None),
        ];
        for (policy, checked, want) in cases {
            let got = preflight_stop(policy, &ts, &checked);
            match want {
                Some(part) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(part)),
                    "{policy:?}: {got:?}"
                ),
                None => assert_eq!(got, None, "{policy:?}"),
            }
        }
    }
}
