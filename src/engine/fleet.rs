//! All targets at once, bounded by `config.concurrency`. Each target runs in its own task
//! inside a tracing span `target=<name>`, so every log line names its target; a target that
//! fails never stops the others. Fleet stages run once, between the steps of every target.
//! The results become one `Report`.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{PipelineStage, TargetConfig};
use crate::engine::plan::Plan;
use crate::engine::scripts::fleet_script;
use crate::engine::target_run::{TargetRun, complete, finish, run_stages, run_target};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, Report, TargetOutcome, TargetReport};
use crate::stages::plan::{Step, steps};

/// Runs every target of the plan through the pipeline and returns their runs in config
/// order: each target runs its own stages in its own task, and at a fleet stage every target
/// waits for the others, the script runs once, then they go on.
pub async fn run_targets(
    plan: Arc<Plan>,
    cancel: CancellationToken,
    progress: Progress,
) -> Vec<TargetRun> {
    let mut runs: Option<Vec<TargetRun>> = None;
    for step in steps(&plan.config.pipeline) {
        match step {
            Step::Targets(stages) => {
                let stages = Arc::new(stages);
                let tasks: Vec<(String, TargetTask)> = match runs.take() {
                    None => plan
                        .config
                        .targets
                        .iter()
                        .map(|target| {
                            let (plan, cancel, progress) =
                                (plan.clone(), cancel.clone(), progress.clone());
                            let name = target.name.clone();
                            let (target, stages) = (target.clone(), stages.clone());
                            let task: TargetTask = Box::pin(async move {
                                if cancel.is_cancelled() {
                                    return skipped(
                                        &target,
                                        TargetOutcome::Cancelled,
                                        "cancelled before it started",
                                    );
                                }
                                run_target(&plan, &target, &cancel, &progress, &stages).await
                            });
                            (name, task)
                        })
                        .collect(),
                    Some(previous) => previous
                        .into_iter()
                        .map(|mut run| {
                            let (plan, cancel, progress) =
                                (plan.clone(), cancel.clone(), progress.clone());
                            let stages = stages.clone();
                            let name = run.target.name.clone();
                            let task: TargetTask = Box::pin(async move {
                                run_stages(&plan, &mut run, &stages, &cancel, &progress).await;
                                run
                            });
                            (name, task)
                        })
                        .collect(),
                };
                runs = Some(run_all(tasks, plan.config.concurrency.max(1), &progress).await);
            }
            Step::Fleet(index) => {
                let (Some(runs), Some(PipelineStage::Script(stage))) =
                    (runs.as_mut(), plan.config.pipeline.get(index))
                else {
                    continue;
                };
                if cancel.is_cancelled() {
                    for run in runs.iter_mut().filter(|r| !r.done) {
                        finish(run, &progress, TargetOutcome::Cancelled);
                    }
                    continue;
                }
                fleet_script(&plan, runs, stage, &cancel, &progress).await;
            }
        }
    }
    let mut runs = runs.unwrap_or_default();
    for run in &mut runs {
        complete(run, &progress);
    }
    runs
}

type TargetTask = std::pin::Pin<Box<dyn std::future::Future<Output = TargetRun> + Send>>;

/// Runs one task per target, at most `concurrency` at once, each in its own tokio task inside
/// the span `target=<name>`; results in the order given.
async fn run_all(
    tasks: Vec<(String, TargetTask)>,
    concurrency: usize,
    progress: &Progress,
) -> Vec<TargetRun> {
    futures::stream::iter(tasks)
        .map(|(name, task)| {
            // error level: the span (and so the target name) is on every line that is logged at all.
            let span = tracing::error_span!("target", target = %name);
            let handle = tokio::spawn(task.instrument(span));
            let progress = progress.clone();
            async move {
                match handle.await {
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
                        let target = TargetConfig {
                            name: name.clone(),
                            context: None,
                            kubeconfig: None,
                            kubeconfig_env: None,
                            namespace: None,
                            environment: None,
                            line: 0,
                        };
                        let mut run = skipped(&target, TargetOutcome::Failed, &message);
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

fn skipped(target: &TargetConfig, outcome: TargetOutcome, message: &str) -> TargetRun {
    let mut run = TargetRun::new(target, Timestamp::now());
    run.report.outcome = outcome;
    run.report.message = Some(message.to_string());
    run.done = true;
    run
}

/// Deploys the plan to every target and builds the report.
pub async fn deploy(plan: Arc<Plan>, cancel: CancellationToken, progress: Progress) -> Report {
    let started_at = Timestamp::now();
    let mut runs = run_targets(plan.clone(), cancel.clone(), progress.clone()).await;
    // Records, the failure policy (or on_cancel) and the rollbacks, all at once.
    crate::engine::conclude::conclude(&plan, &mut runs, &cancel, &progress).await;
    let change_plan = plan.options.dry_run.then(|| dry_run_plan(&plan, &mut runs));
    let targets: Vec<TargetReport> = runs.into_iter().map(|r| r.report).collect();
    let mut report = build_report(&plan, targets, started_at);
    if change_plan.is_some() {
        report.plan = change_plan;
        report.refresh();
    }
    report
}

/// A dry run's plan: every target's answer; a target that stopped before it was asked
/// (unreachable, a kind it does not serve, a script) is an error with its failures.
fn dry_run_plan(plan: &Plan, runs: &mut [TargetRun]) -> crate::report::ChangePlan {
    use crate::report::plan::{PlanMode, TargetPlan};
    let targets = runs
        .iter_mut()
        .map(|run| {
            let mut target = run
                .plan
                .take()
                .unwrap_or_else(|| TargetPlan::new(run.report.name.clone()));
            if target.errors.is_empty() && run.report.outcome != TargetOutcome::Deployed {
                target.errors = run.report.failures.clone();
                if target.errors.is_empty() {
                    target.errors.push(Failure {
                        object: "target".into(),
                        reason: run.report.outcome.as_str().to_string(),
                        message: run.report.reason().unwrap_or_default(),
                        ..Default::default()
                    });
                }
            }
            target
        })
        .collect();
    crate::report::ChangePlan::new(
        plan.config.app.clone(),
        PlanMode::DryRun,
        plan.commit.clone(),
        targets,
    )
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
