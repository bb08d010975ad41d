//! `rollguard deploy`: load and validate everything into a plan (no cluster touched), run it
//! across the fleet with live progress, print the table, write the JSON report, exit code.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cli::{DeployArgs, GithubArgs};
use crate::config::{self, Overrides};
use crate::engine::plan::{DeployOptions, Plan};
use crate::error::{Error, exit};
use crate::github::{
    self,
    context::{GithubContext, GithubFlags},
    deployments::{Planned, environment},
    workflow::SourceLine,
};
use crate::manifests;
use crate::report::progress;
use crate::report::{self, COMMENT_LIMIT, FullReport, Report};

/// The process environment as a map (one snapshot, so a run sees one consistent view).
pub fn env_snapshot() -> HashMap<String, String> {
    std::env::vars().collect()
}

/// Loads and validates everything; no cluster is touched here.
pub fn plan(args: &DeployArgs, env: HashMap<String, String>) -> Result<Plan, Error> {
    crate::util::fault::test_panic_point("plan");
    read_plan(args, env, Access::Check)
}

/// Whether [`read_plan`] checks every target's kubeconfig and credentials offline: every
/// command that talks to clusters does; `plan --offline` asks none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Check,
    NotNeeded,
}

/// The config, the manifests and the commit, validated (and, with [`Access::Check`], every
/// target's access): everything a run needs before it touches a cluster.
pub fn read_plan(
    args: &DeployArgs,
    env: HashMap<String, String>,
    access: Access,
) -> Result<Plan, Error> {
    if let Some(token) = &args.github.github_token {
        crate::report::redact::learn_value(token.trim().as_bytes());
    }
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(args.selection.files.config.as_deref(), &lookup);
    if args.concurrency == Some(0) {
        return Err(Error::Usage("--concurrency must be at least 1".into()));
    }
    let overrides = Overrides {
        kubeconfig: args.selection.files.kubeconfig.clone(),
        targets: args.selection.targets.clone(),
        timeout: args.timeout,
        on_failure: args.on_failure,
        concurrency: args.concurrency,
        memory_budget: args.memory_budget,
        lock_timeout: args.lock_timeout,
        wave: args.wave,
        ..Default::default()
    };
    let mut config = config::load(&path, &overrides, &lookup)?;
    // `--shard I/N`: this job's slice, before any target's access is checked (a matrix job
    // may hold only its own targets' credentials).
    if let Some(shard) = args.shard {
        let targets = std::mem::take(&mut config.targets);
        config.targets = shard.slice(targets, |t| t.name.as_str());
    }
    // The checks' unset variables first: the checks run (or are listed) in this command.
    let mut missing = config.check_env_issues.clone();
    missing.extend(config::missing_working_dirs(&config));
    missing.extend(config::missing_shells(&config, &lookup));
    if !missing.is_empty() {
        return Err(config::ConfigError::Invalid(missing).into());
    }
    // Every target's kubeconfig is checked offline first (bad access is bad input), then
    // targets that share one cluster and namespace are refused: not for `plan --offline`,
    // which asks no cluster.
    let kubeconfigs = crate::cluster::connect::KubeconfigCache::default();
    if access == Access::Check {
        crate::cluster::connect::check_targets(&config, &config.targets, &lookup, &kubeconfigs)?;
        refuse_overlapping_targets(&config, &path, &lookup, &kubeconfigs)?;
    }
    let (manifests, warnings) = manifests::load_noting(&config)?;
    // Said once, before anything runs (the live view and the report are per target).
    for warning in warnings {
        crate::report::redact::print_err(&format!("warning: {warning}"));
    }
    // Every secret value of the manifests is known to the scrubber before anything can
    // print one.
    crate::report::redact::learn(manifests.objects.iter().map(|o| &o.body));
    // The manifest files read (not a render command's output): one not in the commit is
    // deployed all the same, so the commit is marked dirty.
    let mut files: Vec<&std::path::Path> = manifests
        .objects
        .iter()
        .map(|o| o.origin.file.as_path())
        .filter(|f| f.is_file())
        .collect();
    files.dedup();
    let commit = crate::util::git::detect_commit(
        args.commit.as_deref(),
        &lookup,
        &config.base_dir,
        &files,
        config.git_timeout,
    );
    let options = DeployOptions {
        force_conflicts: args.force_conflicts,
        dry_run: args.dry_run,
        force: args.force,
        prune: args.prune || config.prune,
        cli_kubeconfig: config.kubeconfig.clone(),
        wave: args.wave,
        saved_plan: None,
    };
    Ok(Plan::new(config, manifests, commit, options, env).with_kubeconfigs(kubeconfigs))
}

/// Cancels on the first SIGINT/SIGTERM; a second signal exits at once with 130.
pub fn cancel_on_signals() -> CancellationToken {
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            let signal = wait_for_signal().await;
            count += 1;
            if count == 1 {
                crate::util::process_group::note_cancel_signal(signal);
                eprintln!("rollguard: cancelling (a second signal stops at once)");
                token.cancel();
            } else {
                // No destructor runs after exit: stop the scripts and remove their
                // kubeconfigs first.
                crate::util::process_group::kill_all_now();
                crate::stages::kubeconfig::remove_all_now();
                std::process::exit(exit::CANCELLED);
            }
        }
    });
    cancel
}

/// Waits for SIGINT or SIGTERM; returns its name.
#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// [`plan`] on a blocking thread: a `render:` command and git block, and the async
/// runtime's threads must not (a test keeps every such call site off them).
pub async fn plan_off_runtime(
    args: &DeployArgs,
    env: HashMap<String, String>,
) -> Result<Plan, Error> {
    let args = args.clone();
    tokio::task::spawn_blocking(move || plan(&args, env))
        .await
        .map_err(|e| crate::error::join_failed("reading the inputs", e))?
}

/// `rollguard deploy` of a plan from [`plan_off_runtime`] that passed the checks that read
/// clusters before any write (`--wave N`: `release::check_earlier_waves`, called by the
/// dispatch in `commands`).
pub async fn deploy(args: DeployArgs, plan: Plan) -> Result<i32, Error> {
    let plan = Arc::new(plan);
    // GitHub starts after validation (bad input reaches no sink) and never holds up the deploy.
    let ctx = github_context(&args, &plan);
    let in_actions = ctx.in_actions;
    let sink = github::Sink::start(ctx, sink_options(&plan));
    let cancel = cancel_on_signals();
    let mut report = run_plan(plan.clone(), cancel.clone()).await;
    report.run_url = sink.run_url();
    report.shard = args.shard.map(|shard| shard_info(shard, &plan));
    let origin = |object: &str| manifest_line(&plan, object);
    publish(
        &report,
        sink,
        Outputs {
            report: args.report.as_ref(),
            report_markdown: args.github.report_markdown.as_ref(),
            env: &plan.env,
            in_actions,
            origin: &origin,
        },
    )
    .await;
    // A rollback that failed after a cancel is the more serious outcome: exit 3, not 130.
    let rollback_failed = report
        .targets
        .iter()
        .any(|t| t.outcome == report::TargetOutcome::RollbackFailed);
    Ok(if cancel.is_cancelled() && !rollback_failed {
        exit::CANCELLED
    } else {
        report::exit_code(&report)
    })
}

pub(crate) fn github_context(args: &DeployArgs, plan: &Plan) -> GithubContext {
    let mut ctx = resolve_github(&args.github, &plan.env, plan.config.github.timeout);
    // A shard deploys a slice: its PR comment, step summary and Deployments would stand for
    // the whole fleet, so `report merge` posts them once (the outputs stay per job).
    if args.shard.is_some() {
        ctx.enabled = false;
        ctx.step_summary = None;
    }
    ctx
}

/// The GitHub flags as the context reads them (`deploy`, `diff`, `report merge`).
pub(crate) fn github_flags(github: &GithubArgs) -> GithubFlags {
    GithubFlags {
        enabled: if github.no_github {
            Some(false)
        } else if github.github {
            Some(true)
        } else {
            None
        },
        token: github.github_token.clone(),
        pr: github.pr,
    }
}

/// The GitHub context of a run with these flags (deploy, manual rollback).
pub(crate) fn resolve_github(
    github: &GithubArgs,
    env: &HashMap<String, String>,
    timeout: std::time::Duration,
) -> GithubContext {
    GithubContext::resolve(
        &github_flags(github),
        env,
        &|path| std::fs::read_to_string(path).ok(),
        timeout,
    )
}

/// Where a finished run's report goes besides GitHub: the files asked for, and what the
/// sinks need to say it.
pub(crate) struct Outputs<'a> {
    /// `--report`: the JSON report.
    pub report: Option<&'a PathBuf>,
    /// `--report-markdown`: the PR comment's body.
    pub report_markdown: Option<&'a PathBuf>,
    pub env: &'a HashMap<String, String>,
    pub in_actions: bool,
    /// Where a failed object's manifest is (file and line).
    pub origin: &'a dyn Fn(&str) -> Option<SourceLine>,
}

/// Every sink of a finished run, in one order for every command that runs the engine
/// (deploy, manual rollback): the final table and the JSON report, the markdown, then
/// GitHub (step summary, outputs, PR comment, Deployments' statuses). A sink that fails is
/// a warning, never the run's outcome.
pub(crate) async fn publish(report: &Report, sink: github::Sink, out: Outputs<'_>) {
    // A report file that cannot be written is a warning: the other sinks still get the
    // report (without a pointer to the missing file) and the exit code stays the run's.
    let written = finish_report(report, out.report, out.env, out.in_actions);
    let report_path = out
        .report
        .filter(|_| written)
        .map(|p| p.display().to_string());
    // rollguard's one value scrubber (every secret value the run has seen), on every body
    // that leaves for GitHub or a file: API comments do not pass the runner's masking.
    let scrub = crate::report::redact::scrub;
    if let Some(path) = out.report_markdown {
        let full_report = FullReport {
            run_url: None,
            json_path: report_path.clone(),
        };
        let body = github::report_body(report, COMMENT_LIMIT, full_report, &scrub);
        write_report_file(path, &body, out.in_actions);
    }
    // After the run's own work (rollbacks, records): GitHub is only told what happened.
    let logs = |target: &str| github::logs::store().lines(target);
    sink.finish(github::Finish {
        report,
        report_path: report_path.as_deref(),
        origin: out.origin,
        logs: &logs,
        scrub: &scrub,
    })
    .await;
}

fn sink_options(plan: &Plan) -> github::SinkOptions {
    let app = &plan.config.app;
    // A dry run deploys nothing, so it makes no Deployments.
    let deployments = (plan.config.github.deployments && !plan.options.dry_run).then(|| {
        plan.config
            .targets
            .iter()
            .map(|t| Planned {
                target: t.name.clone(),
                environment: environment(app, &t.name, t.environment.as_deref()),
            })
            .collect()
    });
    github::SinkOptions {
        app: app.clone(),
        deployments,
    }
}

/// The manifest file and line of a failure's object ("Deployment shop/web"), matched by kind
/// and name (the namespace may have come from the target).
fn manifest_line(plan: &Plan, object: &str) -> Option<SourceLine> {
    let (kind, rest) = object.split_once(' ')?;
    let name = rest.rsplit('/').next()?;
    let found = plan
        .manifests
        .objects
        .iter()
        .find(|o| o.kind == kind && o.name == name)?;
    Some(SourceLine {
        file: found.origin.file.display().to_string(),
        line: found.origin.line,
    })
}

/// What the report says of a shard's run.
pub fn shard_info(shard: crate::util::shard::Shard, plan: &Plan) -> report::ShardInfo {
    report::ShardInfo {
        index: shard.index,
        count: shard.count,
        digest: Some(plan.manifests.digest()),
    }
}

/// A shard with no target succeeds at once, saying so, and still writes its report (the
/// merge job counts a shard without one as failed). None when the shard has targets.
pub fn empty_shard(args: &DeployArgs, plan: &Plan) -> Option<i32> {
    let shard = args.shard?;
    if !plan.config.targets.is_empty() {
        return None;
    }
    println!(
        "rollguard: shard {shard} has no target (rendezvous hashing put every selected target in another shard): nothing to deploy"
    );
    if let Some(path) = &args.report {
        let now = jiff::Timestamp::now();
        let mut report = Report::new(
            plan.config.app.clone(),
            plan.commit.clone(),
            now,
            now,
            Vec::new(),
        );
        report.dry_run = args.dry_run;
        report.shard = Some(shard_info(shard, plan));
        let json = report::to_json(&report::Clean::new(&report));
        let in_actions = plan.env.get("GITHUB_ACTIONS").is_some_and(|v| v == "true");
        write_report_file(path, &json, in_actions);
    }
    Some(exit::OK)
}

/// Runs a plan with live progress on stderr.
pub async fn run_plan(plan: Arc<Plan>, cancel: CancellationToken) -> Report {
    let lookup = |k: &str| plan.env.get(k).cloned();
    let names = plan
        .config
        .targets
        .iter()
        .map(|t| (t.name.clone(), t.wave))
        .collect();
    let (progress, renderer) = progress::start(names, progress::detect_mode(&lookup));
    let report = crate::engine::fleet::deploy(plan.clone(), cancel, progress).await;
    // The records, rollbacks and locks are settled; a panic in the live view is still a
    // bug (exit 4), not something to hide.
    if let Err(e) = renderer.await
        && let Ok(panic) = e.try_into_panic()
    {
        std::panic::resume_unwind(panic);
    }
    report
}

/// Prints the final table on stdout and writes the JSON report when asked; whether it was
/// written (a file that cannot be is one warning).
pub fn finish_report(
    report: &Report,
    path: Option<&PathBuf>,
    env: &HashMap<String, String>,
    in_actions: bool,
) -> bool {
    let lookup = |k: &str| env.get(k).cloned();
    let clean = report::Clean::new(report);
    crate::report::redact::print_out(&report::to_table(
        &clean,
        progress::table_color(&lookup),
        progress::stdout_columns(),
    ));
    path.is_some_and(|path| {
        // Scrubbed again as a whole: the second line (see report::Clean).
        let json = crate::report::redact::scrub(&report::to_json(&clean));
        write_report_file(path, &json, in_actions)
    })
}

/// Writes one of the run's report files (`--report`, `--report-markdown`); whether it was
/// written. A file is a sink like GitHub: one that cannot be written is one warning (a
/// `::warning` in GitHub Actions), never the run's outcome.
pub fn write_report_file(path: &std::path::Path, text: &str, in_actions: bool) -> bool {
    let Err(source) = std::fs::write(path, text) else {
        return true;
    };
    let e = Error::WriteReport {
        path: path.to_path_buf(),
        source,
    };
    let text = format!(
        "{e}. The run's outcome and exit code do not depend on it and the other reports were written; pass a path in a folder that exists and is writable"
    );
    if in_actions {
        println!("{}", github::workflow::warning("rollguard: report", &text));
    } else {
        crate::report::redact::print_err(&format!("rollguard: warning: {text}"));
    }
    false
}

/// Two targets that resolve (offline, from their kubeconfigs) to one cluster and namespace
/// are refused before any cluster is touched. Runs after
/// [`check_targets`](crate::cluster::connect::check_targets), so every kubeconfig reads here.
fn refuse_overlapping_targets(
    config: &config::Config,
    path: &std::path::Path,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
    kubeconfigs: &crate::cluster::connect::KubeconfigCache,
) -> Result<(), Error> {
    use crate::engine::overlap::{Placement, describe, overlapping};
    let placements: Vec<Placement> = config
        .targets
        .iter()
        .filter_map(|t| {
            let (server, context_ns) = crate::cluster::connect::locate_offline(
                t,
                config.kubeconfig.as_deref(),
                &config.base_dir,
                lookup,
                kubeconfigs,
            )
            .ok()?;
            // As kube does: a context without a namespace means "default".
            let context_ns = context_ns.unwrap_or_else(|| "default".to_string());
            let namespace = config.default_namespace(t, &context_ns);
            let history_namespace = config.history_namespace(t, &context_ns);
            Some(Placement {
                target: t.name.clone(),
                line: t.line,
                server,
                namespace,
                history_namespace,
            })
        })
        .collect();
    let pairs = overlapping(&placements);
    if pairs.is_empty() {
        return Ok(());
    }
    Err(Error::Usage(describe(&pairs, &path.display().to_string())))
}
