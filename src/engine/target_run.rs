//! One target: connect -> discover/validate -> lock + record, then its stages of the
//! pipeline (apply + wait, target scripts), into a `TargetReport`. Fleet stages, which every
//! target reaches first, are run by `fleet.rs` between calls of [`run_stages`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PipelineStage, TargetConfig};
use crate::kube::apply::{
    AppliedObject, ApplyError, ApplyOptions, Resolution, apply_resolved, resolve_set,
};
use crate::kube::connect::{ClusterAccess, TargetError, connect, describe_error};
use crate::kube::wait::{WaitFailure, WaitOptions, wait_for_rollout};
use crate::manifests::ManifestSet;
use crate::release::{EncodedManifests, ReleaseError};
use crate::report::progress::{Progress, Stage};
use crate::report::{Failure, PhaseTiming, TargetOutcome, TargetReport};
use crate::util::git::CommitInfo;

/// Requests in flight per target within an apply phase.
pub const MAX_IN_FLIGHT: usize = 8;

/// Options of a deploy that come from flags, not from the config file.
#[derive(Debug, Clone, Default)]
pub struct DeployOptions {
    pub force_conflicts: bool,
    pub dry_run: bool,
    /// `--kubeconfig`, for targets that name no kubeconfig of their own.
    pub cli_kubeconfig: Option<PathBuf>,
}

/// Everything a deploy needs, validated before any cluster is touched.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: Config,
    pub manifests: ManifestSet,
    pub commit: Option<CommitInfo>,
    pub options: DeployOptions,
    /// A snapshot of the environment (kubeconfig_env variables, KUBECONFIG, HOME).
    pub env: HashMap<String, String>,
    /// The manifests as release records store them: encoded once, shared by every target.
    recorded: OnceLock<Result<EncodedManifests, String>>,
    /// What every script stage run shares: the secret scrubber, the environment.
    pub scripts: crate::stages::Shared,
}

impl Plan {
    pub fn new(
        config: Config,
        manifests: ManifestSet,
        commit: Option<CommitInfo>,
        options: DeployOptions,
        env: HashMap<String, String>,
    ) -> Plan {
        let scripts = crate::stages::Shared {
            scrubber: crate::report::redact::Scrubber::from_objects(
                manifests.objects.iter().map(|o| &o.body),
            ),
            inherited: env.clone(),
            // Other targets' credentials must not reach a target's scripts.
            hidden: config
                .targets
                .iter()
                .filter_map(|t| t.kubeconfig_env.clone())
                .collect(),
        };
        Plan {
            config,
            manifests,
            commit,
            options,
            env,
            recorded: OnceLock::new(),
            scripts,
        }
    }

    /// The manifests encoded for the release records (the first target to ask encodes them).
    pub fn recorded_manifests(&self) -> Result<&EncodedManifests, ReleaseError> {
        self.recorded
            .get_or_init(|| {
                let bodies: Vec<&serde_json::Value> =
                    self.manifests.objects.iter().map(|o| &o.body).collect();
                EncodedManifests::encode(&bodies).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| ReleaseError::Encode(e.clone()))
    }

    pub fn env(&self, key: &str) -> Option<String> {
        self.env.get(key).cloned()
    }
}

/// The result of one target's run, with what the rollback step needs.
pub struct TargetRun {
    pub report: TargetReport,
    /// The connection, when one was made (the rollback reuses it).
    pub access: Option<ClusterAccess>,
    /// Objects applied (the server's answers).
    pub applied: Vec<AppliedObject>,
    /// True once any object of the new revision was written to this target.
    pub received_new_revision: bool,
    /// The lock and release record of this run (rg-release; None in a dry run or before
    /// the lock was taken).
    pub release: Option<crate::engine::conclude::TargetRelease>,
    /// The target as configured.
    pub target: TargetConfig,
    /// Discovery's result, until the apply stage uses it.
    resolution: Option<Resolution>,
    pub(crate) clock: PhaseClock,
    /// The run ended (failed, cancelled or stopped): later stages do not run.
    pub done: bool,
}

impl TargetRun {
    /// A run of `target` that has done nothing yet.
    pub fn new(target: &TargetConfig, at: Timestamp) -> TargetRun {
        TargetRun {
            report: TargetReport::new(target.name.clone(), TargetOutcome::Failed, at),
            access: None,
            applied: Vec::new(),
            received_new_revision: false,
            release: None,
            target: target.clone(),
            resolution: None,
            clock: PhaseClock::new(),
            done: false,
        }
    }

    /// Whether the run changed anything on its target: objects of the new revision, or a
    /// script stage that started (a rollback then has something to undo).
    pub fn changed_something(&self) -> bool {
        self.received_new_revision || self.report.stages.iter().any(|s| s.outcome.started())
    }
}

/// Phase timings, in order.
pub(crate) struct PhaseClock {
    phases: Vec<PhaseTiming>,
    current: Option<(String, Instant)>,
}

impl PhaseClock {
    fn new() -> Self {
        PhaseClock {
            phases: Vec::new(),
            current: None,
        }
    }
    pub(crate) fn start(&mut self, name: &str) {
        self.stop();
        self.current = Some((name.to_string(), Instant::now()));
    }
    pub(crate) fn stop(&mut self) {
        if let Some((name, at)) = self.current.take() {
            self.phases
                .push(PhaseTiming::new(name, round_ms(at.elapsed())));
        }
    }
    /// A script stage's phase, timed by its runner.
    pub(crate) fn script(&mut self, result: &crate::report::StageResult) {
        self.stop();
        self.phases.push(PhaseTiming {
            name: result.name.clone(),
            seconds: result.seconds,
            script: Some(result.scope.clone()),
            exit_code: result.exit_code,
        });
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// The namespace for namespaced objects without one: the target's, else the config's, else
/// the kubeconfig context's.
pub fn default_namespace(
    config: &Config,
    target: &TargetConfig,
    context_namespace: &str,
) -> String {
    config
        .namespace_for(target)
        .unwrap_or(context_namespace)
        .to_string()
}

fn target_failure(object: &str, e: &TargetError) -> Failure {
    Failure {
        object: object.to_string(),
        reason: e.reason.clone(),
        message: e.message.clone(),
        ..Default::default()
    }
}

/// The headline already names the object, so the message says only what to do.
const UNSERVED_KIND_HINT: &str =
    "the cluster does not serve this kind; install its CRD or fix the apiVersion/kind";

/// Apply errors as report failures.
pub fn apply_failures(err: &ApplyError, server: &str) -> Vec<Failure> {
    let plain = |object: &str, reason: &str, message: String| Failure {
        object: object.to_string(),
        reason: reason.to_string(),
        message,
        ..Default::default()
    };
    match err {
        ApplyError::UnservedKinds(kinds) => kinds
            .iter()
            .map(|k| plain(k, "KindNotServed", UNSERVED_KIND_HINT.to_string()))
            .collect(),
        ApplyError::Objects(failures) => failures
            .iter()
            .map(|f| {
                plain(
                    &f.object,
                    &f.reason,
                    format!("{} ({})", f.message, f.origin),
                )
            })
            .collect(),
        ApplyError::Discovery(e) => vec![target_failure("cluster", &describe_error(e, server))],
        ApplyError::Namespace { name, source } => {
            let described = describe_error(source, server);
            vec![plain(
                &format!("Namespace {name}"),
                &described.reason,
                described.message,
            )]
        }
        ApplyError::CrdNotEstablished { name, message } => {
            vec![plain(
                &format!("CustomResourceDefinition {name}"),
                "NotEstablished",
                message.clone(),
            )]
        }
        ApplyError::Cancelled => Vec::new(),
    }
}

/// Runs one target up to its first fleet stage: connect, discover, lock and record, then
/// `stages` (indices into the pipeline). Never panics on cluster errors: every problem ends in
/// the report. A run that is not `done` afterwards goes on with [`run_stages`].
pub async fn run_target(
    plan: &Plan,
    target: &TargetConfig,
    cancel: &CancellationToken,
    progress: &Progress,
    stages: &[usize],
) -> TargetRun {
    let mut run = TargetRun::new(target, Timestamp::now());
    start(plan, &mut run, cancel, progress).await;
    run_stages(plan, &mut run, stages, cancel, progress).await;
    run
}

async fn start(plan: &Plan, run: &mut TargetRun, cancel: &CancellationToken, progress: &Progress) {
    let target = run.target.clone();
    let deadline = Instant::now() + plan.config.wait.timeout;
    let name = target.name.clone();

    progress.update(&name, Stage::Connecting);
    run.clock.start("connect");
    let env = |k: &str| plan.env(k);
    let access = match connect(
        &target,
        plan.options.cli_kubeconfig.as_deref(),
        &plan.config.base_dir,
        &env,
    )
    .await
    {
        Ok(access) => access,
        Err(e) => {
            // Target failures are logged at info: the progress line and the final table say them.
            tracing::info!(reason = %e.reason, "{}", e.message);
            run.report.failures.push(target_failure("cluster", &e));
            return finish(run, progress, TargetOutcome::Failed);
        }
    };
    run.access = Some(access.clone());

    // Discovery: the first request (an unreachable target fails here, in seconds) and the
    // check that the target serves every kind, before anything is written to it.
    run.clock.start("discover");
    match resolve_set(&access.client, &plan.manifests, deadline, cancel).await {
        Ok(resolution) => run.resolution = Some(resolution),
        Err(ApplyError::Cancelled) => {
            return finish(run, progress, TargetOutcome::Cancelled);
        }
        Err(e) => {
            tracing::info!("{e}");
            run.report.failures = apply_failures(&e, &access.server);
            return finish(run, progress, TargetOutcome::Failed);
        }
    };

    // rg-release: lock, abandoned records, last good, this run's pending record.
    if !plan.options.dry_run {
        run.clock.start("lock");
        let namespace = default_namespace(&plan.config, &target, &access.context_namespace);
        match crate::engine::conclude::prepare(plan, &target, &access, &namespace, cancel).await {
            Ok((release, notes)) => {
                run.report.revision = Some(release.record.revision);
                run.report.warnings.extend(notes);
                run.release = Some(release);
            }
            Err(crate::engine::conclude::PrepareError::Cancelled) => {
                return finish(run, progress, TargetOutcome::Cancelled);
            }
            Err(e) => {
                tracing::info!("{e}");
                run.report.failures.push(e.failure(&access.server));
                return finish(run, progress, TargetOutcome::Failed);
            }
        }
    }
    run.clock.stop();
}

/// Runs the target-scoped `stages` (indices into the pipeline) of a run that is not done.
pub async fn run_stages(
    plan: &Plan,
    run: &mut TargetRun,
    stages: &[usize],
    cancel: &CancellationToken,
    progress: &Progress,
) {
    for &index in stages {
        if run.done {
            return;
        }
        match plan.config.pipeline.get(index) {
            Some(PipelineStage::Apply) => apply_and_wait(plan, run, cancel, progress).await,
            Some(PipelineStage::Script(stage)) => {
                crate::engine::scripts::target_script(plan, run, stage, cancel, progress).await
            }
            None => {}
        }
    }
}

/// Marks a run that went through its whole pipeline as deployed.
pub fn complete(run: &mut TargetRun, progress: &Progress) {
    if !run.done {
        finish(run, progress, TargetOutcome::Deployed);
    }
}

async fn apply_and_wait(
    plan: &Plan,
    run: &mut TargetRun,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    let (Some(access), Some(resolution)) = (run.access.clone(), run.resolution.take()) else {
        return;
    };
    let target = run.target.clone();
    let name = target.name.clone();
    // The deadline is for apply and rollout: time spent waiting for the lock or in scripts
    // does not count.
    let deadline = Instant::now() + plan.config.wait.timeout;

    run.clock.start("apply");
    progress.update(
        &name,
        Stage::Applying {
            done: 0,
            total: plan.manifests.objects.len(),
        },
    );
    let options = ApplyOptions {
        force: plan.options.force_conflicts,
        dry_run: plan.options.dry_run,
        default_namespace: default_namespace(&plan.config, &target, &access.context_namespace),
        max_in_flight: MAX_IN_FLIGHT,
        deadline,
    };
    let report_progress =
        |done: usize, total: usize| progress.update(&name, Stage::Applying { done, total });
    let outcome = apply_resolved(
        &access.client,
        &plan.manifests,
        resolution,
        &options,
        cancel,
        &report_progress,
    )
    .await;
    run.received_new_revision = !plan.options.dry_run && !outcome.applied.is_empty();
    run.report.warnings.extend(outcome.warnings);
    run.applied = outcome.applied;
    if let Err(e) = outcome.result {
        if matches!(e, ApplyError::Cancelled) {
            return finish(run, progress, TargetOutcome::Cancelled);
        }
        tracing::info!("apply failed: {e}");
        run.report.failures = apply_failures(&e, &access.server);
        return finish(run, progress, TargetOutcome::Failed);
    }
    tracing::info!(objects = run.applied.len(), "applied");

    if plan.options.dry_run {
        run.clock.stop();
        return;
    }

    run.clock.start("wait");
    let wait_options = WaitOptions {
        deadline,
        timeout: plan.config.wait.timeout,
        fail_fast: plan.config.wait.fail_fast.clone(),
    };
    let report_wait = |p| progress.update(&name, Stage::Waiting(p));
    let waited = wait_for_rollout(
        &access.client,
        &run.applied,
        &wait_options,
        cancel,
        &report_wait,
    )
    .await;
    run.report.warnings.extend(waited.warnings);
    run.clock.stop();
    match waited.result {
        Ok(()) => {}
        Err(WaitFailure::Cancelled) => finish(run, progress, TargetOutcome::Cancelled),
        Err(WaitFailure::Failed(failures)) | Err(WaitFailure::Timeout(failures)) => {
            for f in &failures {
                tracing::info!("{}", f.headline());
            }
            run.report.failures = failures;
            finish(run, progress, TargetOutcome::Failed)
        }
    }
}

/// Ends a run with `outcome`: later stages do not run.
pub fn finish(run: &mut TargetRun, progress: &Progress, outcome: TargetOutcome) {
    run.clock.stop();
    run.done = true;
    run.report.phases = run.clock.phases.clone();
    run.report.outcome = outcome;
    run.report.finished_at = Timestamp::now();
    if run.report.message.is_none() {
        run.report.message = match outcome {
            TargetOutcome::Cancelled => Some("cancelled".to_string()),
            _ => run.report.failures.first().map(Failure::headline),
        };
    }
    progress.update(
        &run.report.name,
        Stage::Finished {
            outcome,
            message: run.report.message.clone(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::apply::ObjectFailure;

    #[test]
    fn apply_errors_become_failures() {
        let unserved =
            ApplyError::UnservedKinds(vec!["example.com/v1 Widget (k8s/w.yaml:1)".into()]);
        let f = apply_failures(&unserved, "https://x");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].reason, "KindNotServed");
        let objects = ApplyError::Objects(vec![ObjectFailure {
            object: "Deployment shop/web".into(),
            origin: "k8s/web.yaml:3".into(),
            reason: "Conflict".into(),
            message: "fields owned by another field manager: .spec.replicas".into(),
        }]);
        let f = apply_failures(&objects, "https://x");
        assert_eq!(f[0].object, "Deployment shop/web");
        assert!(f[0].message.ends_with("(k8s/web.yaml:3)"));
        assert!(apply_failures(&ApplyError::Cancelled, "https://x").is_empty());
    }
}
