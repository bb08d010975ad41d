//! All targets at once, bounded by `config.concurrency`. Each target runs in its own task
//! inside a tracing span `target=<name>`, so every log line names its target; a target that
//! fails never stops the others. The results become one `Report`.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::engine::plan::Plan;
use crate::engine::target_run::{TargetRun, run_target};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};

/// Runs every target of the plan and returns their runs in config order.
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    let concurrency = plan.config.concurrency.max(1);
    let targets = plan.config.targets.clone();
    futures::stream::iter(targets)
        .map(|target| {
            let plan = plan.clone();
            let cancel = cancel.clone();
            let task_progress = progress.clone();
            // error level: the span (and so the target name) is on every line that is logged at all.
            let span = tracing::error_span!("target", target = %target.name);
            let name = target.name.clone();
            let task = tokio::spawn(
                async move {
                    if cancel.is_cancelled() {
                        return skipped(
                            &target.name,
                            TargetOutcome::Cancelled,
                            "cancelled before it started",
                        );
                    }
                    run_target(&plan, &target, &cancel, &task_progress).await
                }
                .instrument(span),
            );
            let progress = progress.clone();
            async move {
                match task.await {
                    Ok(run) => run,
                    Err(e) => {
                        // A panic in one target's task must not take the fleet down.
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
                        run
                    }
                }
            }
        })
        .buffered(concurrency)
        .collect()
        .await
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
