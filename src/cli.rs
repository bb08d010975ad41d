//! The command line: `rollguard deploy | schema | demo` (history, show, rollback and unlock
//! come with the release work), and the code that runs each command.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Overrides};
use crate::engine::target_run::{DeployOptions, Plan};
use crate::error::{Error, exit};
use crate::manifests;
use crate::report::progress;
use crate::report::{self, Report};

#[derive(Debug, Parser)]
#[command(
    name = "rollguard",
    version,
    about = "Deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the manifests to every target at once and wait for the rollout.
    Deploy(DeployArgs),
    /// Print the JSON Schema of rollguard.yaml (for editors).
    Schema,
    /// Start three simulated clusters and show a deploy, a fast failure and the report.
    Demo(DemoArgs),
    #[command(flatten)]
    Release(crate::commands::release::ReleaseCommand),
}

#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    /// The config file [default: ./rollguard.yaml; env ROLLGUARD_CONFIG]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Kubeconfig for targets that name none (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Deploy only to the targets with this context (or target name); repeatable.
    #[arg(long = "context", value_name = "NAME")]
    pub contexts: Vec<String>,
    /// Deadline per target for apply and rollout, e.g. 90s, 5m.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// The commit being deployed (default: $GITHUB_SHA, then `git rev-parse HEAD`).
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// Write the JSON report here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Take ownership of fields that another field manager owns.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Send every apply with dryRun=All: nothing is stored, nothing is waited for.
    #[arg(long)]
    pub dry_run: bool,
    /// rollback-all | rollback-failed | rollback-if-all-fail | none
    #[arg(long, value_name = "POLICY")]
    pub on_failure: Option<String>,
    /// How many targets run at once.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// How long to wait for another run's deploy lock, e.g. 2m (lock.timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub lock_timeout: Option<Duration>,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Simulated seconds per real second in the demo clusters.
    #[arg(long, default_value_t = 5.0)]
    pub time_scale: f64,
    /// Write the demo's JSON report here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
}

fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    crate::util::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// The process environment as a map (one snapshot, so a run sees one consistent view).
pub fn env_snapshot() -> HashMap<String, String> {
    std::env::vars().collect()
}

/// Runs a parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32, Error> {
    let env = env_snapshot();
    match cli.command {
        Command::Deploy(args) => deploy(args, env).await,
        Command::Schema => {
            let schema = config::json_schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            Ok(exit::OK)
        }
        Command::Demo(args) => crate::commands::demo::run(args).await,
        Command::Release(command) => Ok(crate::commands::release::run(command, env).await),
    }
}

/// Loads and validates everything; no cluster is touched here.
pub fn plan(args: &DeployArgs, env: HashMap<String, String>) -> Result<Plan, Error> {
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(args.config.as_deref(), &lookup);
    let on_failure = match &args.on_failure {
        Some(text) => Some(
            text.parse::<config::FailurePolicy>()
                .map_err(|why| Error::Usage(format!("--on-failure: {why}")))?,
        ),
        None => None,
    };
    if args.concurrency == Some(0) {
        return Err(Error::Usage("--concurrency must be at least 1".into()));
    }
    let overrides = Overrides {
        kubeconfig: args.kubeconfig.clone(),
        contexts: args.contexts.clone(),
        timeout: args.timeout,
        on_failure,
        concurrency: args.concurrency,
        lock_timeout: args.lock_timeout,
        ..Default::default()
    };
    let config = config::load(&path, &overrides, &lookup)?;
    refuse_overlapping_targets(&config, &path, &lookup)?;
    let manifests = manifests::load(&config)?;
    let commit = crate::util::git::detect_commit(args.commit.as_deref(), &lookup, &config.base_dir);
    let options = DeployOptions {
        force_conflicts: args.force_conflicts,
        dry_run: args.dry_run,
        cli_kubeconfig: config.kubeconfig.clone(),
    };
    Ok(Plan::new(config, manifests, commit, options, env))
}

/// Two targets that resolve (offline, from their kubeconfigs) to one cluster and namespace
/// are refused before any cluster is touched. A target whose kubeconfig cannot be read here
/// is left to fail on its own when it connects.
fn refuse_overlapping_targets(
    config: &config::Config,
    path: &std::path::Path,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(), Error> {
    use crate::engine::overlap::{Placement, describe, overlapping};
    let placements: Vec<Placement> = config
        .targets
        .iter()
        .filter_map(|t| {
            let (server, context_ns) = crate::kube::connect::locate_offline(
                t,
                config.kubeconfig.as_deref(),
                &config.base_dir,
                lookup,
            )
            .ok()?;
            let namespace = config
                .namespace_for(t)
                .map(str::to_string)
                .or(context_ns)
                .unwrap_or_else(|| "default".to_string());
            let history_namespace = config
                .history
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.clone());
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
    Err(Error::Usage(describe(
        &pairs,
        &path.display().to_string(),
    )))
}

/// Cancels on the first SIGINT/SIGTERM; a second signal exits at once with 130.
pub fn cancel_on_signals() -> CancellationToken {
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            wait_for_signal().await;
            count += 1;
            if count == 1 {
                eprintln!("rollguard: cancelling (a second signal stops at once)");
                token.cancel();
            } else {
                std::process::exit(exit::CANCELLED);
            }
        }
    });
    cancel
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// `rollguard deploy`.
pub async fn deploy(args: DeployArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    let plan = Arc::new(plan(&args, env)?);
    let cancel = cancel_on_signals();
    let report = run_plan(plan.clone(), cancel.clone()).await;
    finish_report(&report, args.report.as_ref(), &plan.env)?;
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

/// Runs a plan with live progress on stderr.
pub async fn run_plan(plan: Arc<Plan>, cancel: CancellationToken) -> Report {
    let lookup = |k: &str| plan.env.get(k).cloned();
    let names = plan.config.targets.iter().map(|t| t.name.clone()).collect();
    let (progress, renderer) = progress::start(names, progress::detect_mode(&lookup));
    let report = crate::engine::fleet::deploy(plan.clone(), cancel, progress).await;
    let _ = renderer.await;
    report
}

/// Prints the final table on stdout and writes the JSON report when asked.
pub fn finish_report(
    report: &Report,
    path: Option<&PathBuf>,
    env: &HashMap<String, String>,
) -> Result<(), Error> {
    let lookup = |k: &str| env.get(k).cloned();
    println!(
        "{}",
        report::to_table(report, progress::table_color(&lookup))
    );
    if let Some(path) = path {
        std::fs::write(path, report::to_json(report)).map_err(|source| Error::WriteReport {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_flags_parse() {
        let cli = Cli::try_parse_from([
            "rollguard",
            "deploy",
            "--config",
            "x.yaml",
            "--context",
            "a",
            "--context",
            "b",
            "--timeout",
            "30s",
            "--force-conflicts",
            "--dry-run",
            "--on-failure",
            "none",
            "--concurrency",
            "4",
            "--report",
            "r.json",
        ])
        .expect("parses");
        let Command::Deploy(args) = cli.command else {
            panic!("deploy expected")
        };
        assert_eq!(args.contexts, vec!["a", "b"]);
        assert_eq!(args.timeout, Some(Duration::from_secs(30)));
        assert!(args.force_conflicts && args.dry_run);
        assert_eq!(args.concurrency, Some(4));
        assert!(Cli::try_parse_from(["rollguard", "deploy", "--timeout", "soon"]).is_err());
    }
}
