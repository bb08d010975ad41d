//! One module per user command, and the dispatch from the parsed command line to them.

pub mod check;
#[cfg(feature = "demo")]
pub mod demo;
pub mod deploy;
pub mod diff;
pub mod init;
pub mod manual_report;
pub mod release;
pub mod saved_plan;
pub mod shards;
pub mod status;

use crate::cli::{Cli, Command};
use crate::config;
use crate::error::{Error, exit};

/// Before anything is printed or sent: in GitHub Actions, stdout and stderr are escaped for
/// the runner; the runner's credentials (`GITHUB_TOKEN`, `ACTIONS_*_TOKEN`, any `*_TOKEN`)
/// are known to the scrubber. The kubeconfigs' credentials are learned as they are read
/// (`kube::connect`), the manifests' Secret values as they are loaded.
fn learn_environment(env: &std::collections::HashMap<String, String>) {
    crate::report::redact::set_actions_log(env.get("GITHUB_ACTIONS").is_some_and(|v| v == "true"));
    for (name, value) in env {
        // Shorter values are flags ("true", "1"), not tokens: scrubbing them would garble
        // every log line.
        if crate::stages::env::is_withheld_credential(name) && value.trim().len() >= MIN_TOKEN_LEN {
            crate::report::redact::learn_value(value.trim().as_bytes());
        }
    }
}

/// The shortest environment value taken for a credential.
const MIN_TOKEN_LEN: usize = 8;

/// Runs a parsed command on `runtime` to its exit code: an error is printed (scrubbed) and
/// a panic (which the hook has said) is `INTERNAL`; then the Leases a panic dropped are given
/// back, bounded. Here, not in main, so that the whole run's futures are compiled once, in
/// this crate: driven from the binary, rustc compiled them again there (65 s of a release
/// build).
pub fn run_blocking(runtime: &tokio::runtime::Runtime, cli: Cli) -> i32 {
    let run = std::panic::AssertUnwindSafe(run(cli));
    let code = match runtime.block_on(futures::FutureExt::catch_unwind(run)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            // Errors may quote server text or a render command's stderr.
            crate::report::redact::print_err(&format!("rollguard: {e}"));
            e.exit_code()
        }
        Err(_) => exit::INTERNAL,
    };
    // Locks dropped by a panic (here or in a target's task) are being released: wait for
    // that, bounded; nothing to wait for without a panic.
    runtime.block_on(crate::release::lock::wait_for_panic_releases());
    code
}

/// Runs a parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32, Error> {
    let env = deploy::env_snapshot();
    learn_environment(&env);
    let lookup = |k: &str| env.get(k).cloned();
    // Refused here, before any command reads its config (which carries the value to every
    // git call as `Config::git_timeout`).
    crate::util::git::timeout_from_env(&lookup)
        .map_err(|e| Error::Usage(format!("$ROLLGUARD_GIT_TIMEOUT: {e}")))?;
    let mut command = cli.command;
    // `--shard I/N`, else $ROLLGUARD_SHARD: one slice of the fleet, its GitHub sinks left
    // to `report merge`.
    let shard = match &mut command {
        Command::Deploy(args) => Some((&mut args.shard, args.dry_run)),
        Command::Diff(args) => Some((&mut args.shard, true)),
        _ => None,
    };
    if let Some((shard, dry_run)) = shard {
        *shard = shards::resolve_shard(*shard, &env)?;
        if let Some(shard) = *shard {
            shards::say_sinks_left(shard, dry_run);
        }
    }
    match command {
        Command::Deploy(args) if args.dry_run => {
            let detailed = args.plan_output.exit_code;
            let dry_run = async {
                let plan = deploy::plan_off_runtime(&args, env).await?;
                if let Some(code) = deploy::empty_shard(&args, &plan) {
                    return Ok(code);
                }
                // A dry run writes nothing to hold back: it says what a deploy would refuse.
                if let Err(refused) = release::check_earlier_waves(&plan).await
                    && let Some(wave) = args.wave
                {
                    crate::report::redact::print_err(&format!(
                        "rollguard: warning: without --dry-run, deploy --wave {wave} would not start: {}",
                        refused.reasons()
                    ));
                }
                diff::dry_run_plan(args, plan).await
            };
            detailed_errors(detailed, dry_run.await)
        }
        Command::Deploy(args) => {
            let plan = deploy::plan_off_runtime(&args, env).await?;
            if let Some(code) = deploy::empty_shard(&args, &plan) {
                return Ok(code);
            }
            // `--plan`: refused here, before any cluster is asked, when it is not this
            // run's plan or the manifests moved.
            let plan = saved_plan::attach(&args, plan)?;
            // Before anything is written anywhere (GitHub included): `--wave N` follows the
            // waves before it only when they run this commit.
            release::check_earlier_waves(&plan).await?;
            deploy::deploy(args, plan).await
        }
        Command::Diff(args) => {
            let detailed = args.output.exit_code;
            detailed_errors(detailed, diff::diff(args, env).await)
        }
        Command::Plan(args) => {
            let detailed = args.diff.output.exit_code;
            detailed_errors(detailed, diff::plan(args, env).await)
        }
        Command::Check(args) => check::run(args, env).await,
        Command::Schema => {
            let schema = config::json_schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            Ok(exit::OK)
        }
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(args).await,
        #[cfg(not(feature = "demo"))]
        Command::Demo(_) => Err(Error::Usage(
            "this rollguard was built without the `demo` feature (a smaller binary for CI); \
             run the demo with a default build: `cargo run --release -- demo`"
                .into(),
        )),
        Command::Init(args) => init::run(args, env).await,
        Command::Release(command) => Ok(release::run(command, env).await),
        Command::Status(args) => Ok(status::run(args, env).await),
        Command::Report(crate::cli::ReportCommand::Merge(args)) => {
            shards::merge_reports(args, env).await
        }
        Command::Conclude(args) => shards::conclude(args, env).await,
    }
}

/// Under `--exit-code` (terraform's `-detailed-exitcode`) 2 means "there are changes", so an
/// error, bad input included, is 1 (a bug stays 4).
fn detailed_errors(detailed: bool, result: Result<i32, Error>) -> Result<i32, Error> {
    match result {
        Err(e) if detailed && e.exit_code() == exit::BAD_INPUT => {
            Err(Error::UnderExitCode(Box::new(e)))
        }
        other => other,
    }
}
