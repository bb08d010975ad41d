//! `rollguard diff` (and `deploy --dry-run`, the same thing) and `rollguard plan`: what a
//! deploy would change on each target, asked of every target at once with server-side
//! applies in `dryRun=All` (`kube::diff`), or, with `plan --offline`, computed without any
//! cluster by comparing the manifests with those of a git ref. Nothing is written anywhere:
//! no lock, no release record, no namespace, no script.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::{DeployArgs, DiffArgs, PlanArgs, PlanFormat};
use crate::cluster::apply::{ApplyError, apply_failures, resolve_set};
use crate::cluster::connect::ClusterAccess;
use crate::cluster::diff::{DiffOptions, Sides, compare_sets, plan_resolved};
use crate::engine::plan::Plan;
use crate::engine::reapply::ManifestsError;
use crate::error::{Error, exit};
use crate::manifests::ManifestSet;
use crate::report::diff::{DiffStyle, MAX_DIFF_LINES};
use crate::report::plan::{ChangePlan, PlanMode, TargetPlan, to_text};
use crate::report::redact;
use crate::report::{Clean, Failure, Report, TargetOutcome, TargetReport};
use crate::util::git;
use crate::util::in_order::Window;

/// The deploy flags `diff` stands for (the deploy's loader reads config and manifests).
fn as_deploy(args: &DiffArgs) -> DeployArgs {
    DeployArgs {
        selection: args.selection.clone(),
        timeout: args.timeout,
        commit: args.commit.clone(),
        report: args.report.clone(),
        force_conflicts: args.force_conflicts,
        dry_run: true,
        force: false,
        prune: args.prune,
        on_failure: None,
        concurrency: args.concurrency,
        memory_budget: args.memory_budget,
        lock_timeout: None,
        wave: None,
        shard: args.shard,
        plan_output: args.output.clone(),
        saved: Default::default(),
        github: args.github.clone(),
    }
}

/// `rollguard diff`.
pub async fn diff(args: DiffArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    dry_run(as_deploy(&args), env).await
}

/// `rollguard plan`: offline, or as `diff`.
pub async fn plan(args: PlanArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    if !args.offline {
        return diff(args.diff, env).await;
    }
    crate::commands::saved_plan::refuse_offline_out(args.diff.output.out.as_deref())?;
    let cluster_flags = [
        (
            "--kubeconfig",
            args.diff.selection.files.kubeconfig.is_some(),
        ),
        ("--timeout", args.diff.timeout.is_some()),
        ("--force-conflicts", args.diff.force_conflicts),
        ("--concurrency", args.diff.concurrency.is_some()),
        ("--memory-budget", args.diff.memory_budget.is_some()),
    ];
    if let Some((flag, _)) = cluster_flags.iter().find(|(_, set)| *set) {
        return Err(Error::Usage(format!(
            "{flag} is about clusters and `plan --offline` asks none: drop {flag}, or drop --offline"
        )));
    }
    offline(args, env).await
}

/// `rollguard deploy --dry-run` and `rollguard diff`: every target at once, through the
/// deploy's own pipeline with its apply stage asking the servers instead of writing (no lock,
/// no record, no namespace; script stages only listed, unless one says `dry_run: true`).
pub async fn dry_run(args: DeployArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    // The deploy's loader, off the runtime (render commands and git block); it also teaches
    // the scrubber every secret value of the manifests.
    let plan = crate::commands::deploy::plan_off_runtime(&args, env).await?;
    if let Some(code) = crate::commands::deploy::empty_shard(&args, &plan) {
        return Ok(code);
    }
    dry_run_plan(args, plan).await
}

/// [`dry_run`] of a plan already read (`deploy --dry-run --wave N` checks the earlier waves
/// in between).
pub async fn dry_run_plan(args: DeployArgs, plan: Plan) -> Result<i32, Error> {
    let plan = Arc::new(plan);
    for line in crate::stages::plan::describe_pipeline(&plan.config.pipeline) {
        redact::print_err(&line);
    }
    let commit = plan.commit.as_ref().map(|c| c.sha.as_str());
    for line in crate::checks::run::describe(&plan.config, commit) {
        redact::print_err(&line);
    }
    let cancel = crate::commands::deploy::cancel_on_signals();
    let report = crate::commands::deploy::run_plan(plan.clone(), cancel.clone()).await;
    if cancel.is_cancelled() {
        return Ok(exit::CANCELLED);
    }
    let mut report = report;
    let mut change_plan = report.plan.clone().unwrap_or_else(|| {
        ChangePlan::new(
            plan.config.app.clone(),
            PlanMode::DryRun,
            plan.commit.clone(),
            Vec::new(),
        )
    });
    // `--out`: the plan file first, so that its digest is in what is printed and posted.
    let saved = crate::commands::saved_plan::save(&args, &plan, &mut change_plan);
    if let Some(p) = report.plan.as_mut() {
        p.saved_as = change_plan.saved_as.clone();
    }
    let lookup = |k: &str| plan.env.get(k).cloned();
    print_plan_with(
        &change_plan,
        args.plan_output.format,
        args.plan_output.verbose,
        &lookup,
    );
    if let Some(path) = &args.report {
        let in_actions = crate::commands::deploy::github_context(&args, &plan).in_actions;
        write_json(
            &crate::report::to_json(&Clean::new(&report)),
            path,
            in_actions,
        );
    }
    let code = change_plan.exit_code(args.plan_output.exit_code);
    publish_plan(&change_plan, &args, &plan, code).await;
    saved?;
    Ok(code)
}

/// The plan as markdown: to `--report-markdown`, and as the plan's own sticky PR comment
/// (never its deploy comment) when GitHub is on. Both are sinks: their problems are warnings.
async fn publish_plan(change_plan: &ChangePlan, args: &DeployArgs, plan: &Plan, exit_code: i32) {
    let app = &plan.config.app;
    let marker = crate::github::comments::marker(crate::github::comments::Purpose::Plan, app);
    let limit = crate::report::COMMENT_LIMIT - marker.len() - 1;
    // Scrubbed before it is escaped (Clean), then once more as a whole: a comment posted
    // through the API passes no runner masking.
    let markdown_within = |limit: usize| {
        redact::scrub(&crate::report::plan_to_markdown(
            &Clean::new(change_plan),
            limit,
        ))
    };
    let markdown = markdown_within(limit);
    let ctx = crate::commands::deploy::github_context(args, plan);
    // The job's own files (step summary, outputs), GitHub on or off.
    crate::github::write_plan_files(&ctx, change_plan, exit_code, &markdown_within);
    if let Some(path) = &args.github.report_markdown {
        crate::commands::deploy::write_report_file(path, &markdown, ctx.in_actions);
    }
    crate::github::post_sticky_comment(
        &ctx,
        crate::github::comments::Purpose::Plan,
        app,
        &markdown,
    )
    .await;
}

/// Writes a JSON document, scrubbed of every known secret value (a file that cannot be
/// written is a warning).
fn write_json(text: &str, path: &Path, in_actions: bool) {
    crate::commands::deploy::write_report_file(path, &redact::scrub(text), in_actions);
}

/// Prints the plan on stdout (scrubbed): text, coloured on a terminal without NO_COLOR; or JSON.
/// Unchanged objects are named.
pub fn print_plan(plan: &ChangePlan, format: PlanFormat, env: &dyn Fn(&str) -> Option<String>) {
    print_plan_with(plan, format, true, env);
}

/// [`print_plan`]; unchanged objects named only when `verbose` (`-v`), else counted.
pub fn print_plan_with(
    plan: &ChangePlan,
    format: PlanFormat,
    verbose: bool,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let plan = Clean::new(plan);
    let text = match format {
        PlanFormat::Json => crate::report::plan_to_json(&plan),
        PlanFormat::Text => {
            let style = DiffStyle {
                color: crate::report::progress::table_color(env),
                max_lines: MAX_DIFF_LINES,
            };
            to_text(&plan, style, verbose)
        }
    };
    redact::print_out(text.trim_end());
}

/// The JSON report of a dry run: one target entry per target (deployed: it would deploy;
/// failed: it could not be planned), and the plan.
fn write_report(
    plan: &Plan,
    change_plan: &ChangePlan,
    started_at: Timestamp,
    path: &Path,
    in_actions: bool,
) {
    let targets = change_plan
        .targets
        .iter()
        .map(|t| {
            let outcome = if t.errors.is_empty() {
                TargetOutcome::Deployed
            } else {
                TargetOutcome::Failed
            };
            let mut report = TargetReport::new(t.name.clone(), outcome, started_at);
            report.finished_at = Timestamp::now();
            report.failures = t.errors.clone();
            report.warnings = t.warnings.clone();
            report.message = t.errors.first().map(Failure::headline);
            report
        })
        .collect();
    let mut report = Report::new(
        plan.config.app.clone(),
        plan.commit.clone(),
        started_at,
        Timestamp::now(),
        targets,
    );
    report.dry_run = true;
    report.plan = Some(change_plan.clone());
    report.refresh();
    write_json(
        &crate::report::to_json(&Clean::new(&report)),
        path,
        in_actions,
    );
}

/// The plan of one connected target for `set` (also `rollback --dry-run`'s, with the
/// revision's manifests): discovery, then the server's dry-run answers against live objects.
#[allow(clippy::too_many_arguments)]
pub async fn diff_target(
    access: &ClusterAccess,
    set: &ManifestSet,
    default_namespace: String,
    force: bool,
    field_manager: String,
    deadline: Instant,
    in_flight: Window,
    (before_label, after_label): (String, String),
    cancel: &CancellationToken,
    mut out: TargetPlan,
) -> TargetPlan {
    let resolution = match resolve_set(&access.client, set, deadline, cancel).await {
        Ok(resolution) => resolution,
        Err(ApplyError::Cancelled) => return out,
        Err(e) => {
            tracing::info!("{e}");
            out.errors = apply_failures(&e, &access.server);
            return out;
        }
    };
    let options = DiffOptions {
        default_namespace,
        force,
        field_manager,
        in_flight,
        deadline,
        before_label,
        after_label,
        compare: true,
    };
    let (mut planned, _) = plan_resolved(
        &out.name,
        &access.client,
        &access.server,
        set,
        &resolution,
        &options,
        cancel,
    )
    .await;
    planned.to = out.to.take();
    planned.dropped = std::mem::take(&mut out.dropped);
    planned
}

/// `rollguard plan --offline`: this commit's manifests (validated) against a git ref's. All
/// of it is files and git: it runs on a blocking thread.
async fn offline(args: PlanArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    let exit_code = args.diff.output.exit_code;
    let (change_plan, plan, deploy_args) =
        tokio::task::spawn_blocking(move || offline_blocking(args, env))
            .await
            .map_err(|e| crate::error::join_failed("planning offline", e))??;
    let code = change_plan.exit_code(exit_code);
    publish_plan(&change_plan, &deploy_args, &plan, code).await;
    Ok(code)
}

fn offline_blocking(
    args: PlanArgs,
    env: HashMap<String, String>,
) -> Result<(ChangePlan, Plan, DeployArgs), Error> {
    let deploy_args = as_deploy(&args.diff);
    let plan = crate::commands::deploy::read_plan(
        &deploy_args,
        env,
        crate::commands::deploy::Access::NotNeeded,
    )?;
    let dir = &plan.config.base_dir;
    let base = match &args.against {
        Some(reference) => reference.clone(),
        None => git::default_base(dir, plan.config.git_timeout).map_err(ManifestsError::from)?,
    };
    let against =
        git::commit_info(dir, &base, plan.config.git_timeout).map_err(|source| Error::Against {
            reference: base.clone(),
            source,
        })?;
    let mut against = against;
    if args.against.is_some() && against.r#ref.is_none() {
        against.r#ref = Some(base.clone());
    }
    let old = crate::engine::reapply::manifests_at_commit(&plan.config, &against.sha)?;
    redact::learn(old.objects.iter().map(|o| &o.body));
    let before = against.short_sha().to_string();
    let after = plan
        .commit
        .as_ref()
        .map(|c| format!("{} (working tree)", c.short_sha()))
        .unwrap_or_else(|| "working tree".to_string());
    let sides = Sides {
        before: &before,
        after: &after,
    };
    let targets = plan
        .config
        .targets
        .iter()
        .map(|t| {
            compare_sets(
                &old.objects,
                &plan.manifests.objects,
                plan.config.namespace_for(t),
                &t.name,
                sides,
            )
        })
        .collect();
    let mut change_plan = ChangePlan::new(
        plan.config.app.clone(),
        PlanMode::Offline,
        plan.commit.clone(),
        targets,
    );
    change_plan.against = Some(against);
    let commit = plan.commit.as_ref().map(|c| c.sha.as_str());
    for line in crate::checks::run::describe(&plan.config, commit) {
        redact::print_err(&line);
    }
    let lookup = |k: &str| plan.env.get(k).cloned();
    print_plan_with(
        &change_plan,
        args.diff.output.format,
        args.diff.output.verbose,
        &lookup,
    );
    if let Some(path) = &args.diff.report {
        let in_actions = crate::commands::deploy::github_context(&deploy_args, &plan).in_actions;
        write_report(&plan, &change_plan, Timestamp::now(), path, in_actions);
    }
    Ok((change_plan, plan, deploy_args))
}
