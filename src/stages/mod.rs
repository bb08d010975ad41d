//! Script stages: child processes with the deployment in their environment and a kubeconfig
//! of their own target(s), deadlines, process-group kills, and output streamed to the log
//! (tagged with target and stage, secret values scrubbed). The engine decides when a stage
//! runs (`plan` holds those decisions as pure functions); this module runs it.

pub mod env;
pub mod kubeconfig;
pub mod plan;
pub mod process;

use std::collections::HashMap;
use std::time::Duration;

use ::kube::config::Kubeconfig;
use tokio_util::sync::CancellationToken;

use crate::config::{ScriptCommand, ScriptStage};
use crate::report::redact::Scrubber;
use crate::report::{StageOutcome, StageResult};
use env::Deployment;
use kubeconfig::TempKubeconfig;
use process::{End, Spec};

/// The tracing target of script output lines (shown by default in CI logs).
pub use crate::report::log_filter::SCRIPT_OUTPUT_TARGET as OUTPUT_LOG_TARGET;

/// What every script run of a deploy shares.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    pub scrubber: Scrubber,
    /// rollguard's environment.
    pub inherited: HashMap<String, String>,
    /// Variables scripts must not see (the targets' `kubeconfig_env`).
    pub hidden: Vec<String>,
}

/// Which of a stage's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Run,
    Rollback,
}

/// One command of `stage` to completion, as a [`StageResult`] (and the raw [`End`]).
/// `cap`: the most time it may take (the cancel budget), below the stage's own timeout.
pub async fn run_command(
    stage: &ScriptStage,
    which: Which,
    kubeconfig: &Kubeconfig,
    deployment: &Deployment,
    shared: &Shared,
    stop: &CancellationToken,
    cap: Option<Duration>,
) -> (StageResult, End) {
    let command: &ScriptCommand = match which {
        Which::Run => &stage.run,
        Which::Rollback => match &stage.rollback {
            Some(c) => c,
            None => {
                let end = End::Exited(0);
                return (result(stage, which, &end, 0.0, Vec::new(), None), end);
            }
        },
    };
    let what = match which {
        Which::Run => "",
        Which::Rollback => " rollback",
    };
    let temp = match TempKubeconfig::write(kubeconfig) {
        Ok(t) => t,
        Err(e) => {
            let end = End::NotStarted(format!(
                "cannot write its temporary kubeconfig in {}: {e}",
                std::env::temp_dir().display()
            ));
            let r = result(stage, which, &end, 0.0, Vec::new(), None);
            return (r, end);
        }
    };
    let timeout = cap.map_or(stage.timeout, |c| c.min(stage.timeout));
    let spec = Spec {
        argv: stage.argv(command),
        env: env::script_env(
            &shared.inherited,
            &shared.hidden,
            temp.path(),
            deployment,
            env::StageEnv {
                env: &stage.env,
                pass_env: &stage.pass_env,
            },
        ),
        working_dir: stage.working_dir.clone(),
        timeout,
        kill_grace: stage.kill_grace,
    };
    tracing::info!(stage = %stage.name, "stage {}{what} starting", stage.name);
    let on_line = |stream: process::Stream, line: &str| {
        tracing::info!(target: OUTPUT_LOG_TARGET, stage = %stage.name, stream = stream.as_str(), "{line}");
    };
    // Every value known when it starts: the manifests' Secrets and every credential (its own
    // kubeconfig's token, the runner's tokens), so that no log line or file gets one.
    let mut scrubber = crate::report::redact::snapshot();
    scrubber.merge(&shared.scrubber);
    let outcome = process::run(&spec, &scrubber, stop, &on_line).await;
    drop(temp);
    if outcome.left_processes {
        tracing::warn!(
            stage = %stage.name,
            "stage {}{what} exited but left processes running in its process group; they were stopped (SIGTERM, then SIGKILL)",
            stage.name
        );
    }
    // A kill for the cancel budget is not the stage's own timeout.
    let end = match outcome.end {
        End::TimedOut if cap.is_some_and(|c| c < stage.timeout) => End::Stopped,
        other => other,
    };
    let r = result(
        stage,
        which,
        &end,
        outcome.elapsed.as_secs_f64(),
        outcome.tail,
        Some(timeout),
    );
    (r, end)
}

fn result(
    stage: &ScriptStage,
    which: Which,
    end: &End,
    seconds: f64,
    tail: Vec<String>,
    timeout: Option<Duration>,
) -> StageResult {
    let outcome = plan::stage_outcome(end, stage.continue_on_error && which == Which::Run);
    let keep_output = !matches!(outcome, StageOutcome::Succeeded | StageOutcome::NotRun);
    StageResult {
        name: stage.name.clone(),
        scope: stage.scope.as_str().to_string(),
        rollback: which == Which::Rollback,
        outcome,
        exit_code: end.exit_code(),
        seconds: (seconds * 1000.0).round() / 1000.0,
        message: (!end.succeeded()).then(|| end.describe(timeout.unwrap_or(stage.timeout))),
        output: if keep_output { tail } else { Vec::new() },
    }
}

/// A stage that was not run (dry run, or no time left), as a result.
pub fn not_run(stage: &ScriptStage, which: Which, why: &str) -> StageResult {
    StageResult {
        name: stage.name.clone(),
        scope: stage.scope.as_str().to_string(),
        rollback: which == Which::Rollback,
        outcome: StageOutcome::NotRun,
        exit_code: None,
        seconds: 0.0,
        message: Some(why.to_string()),
        output: Vec::new(),
    }
}
