//! The configuration as rollguard uses it: `Config` and its parts (targets, wait and fail-fast
//! rules, history, policies, lock, stages), their defaults, and the issues a bad config has.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use super::checks::*;
use super::names::named_choices;
use super::pipeline::PipelineStage;

/// The default config file name, looked up in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "rollguard.yaml";

/// Pod waiting reasons that fail a target (ErrImagePull only after its grace).
pub const DEFAULT_FAIL_FAST_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "RunContainerError",
    "ErrImageNeverPull",
];

/// The validated configuration of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The app's name, a DNS label; names the release history and lock.
    pub app: String,
    /// Default namespace for namespaced objects without one.
    pub namespace: Option<String>,
    pub manifests: ManifestSource,
    /// The targets to deploy to, after `--target` selection, then `--wave` selection.
    pub targets: Vec<TargetConfig>,
    pub wait: WaitConfig,
    /// Targets processed at once. Set by `--concurrency`, its variable or the file (then
    /// `concurrency_set_by` says where); otherwise the plan derives it from `memory_budget`
    /// (`engine::budget`).
    pub concurrency: usize,
    /// Where `concurrency` was set (`--concurrency`, `$ROLLGUARD_CONCURRENCY`,
    /// `rollguard.yaml:7`); None: it follows from `memory_budget`.
    pub concurrency_set_by: Option<String>,
    /// `--memory-budget` / `memory_budget:` in bytes (default 512 MiB): the default
    /// concurrency is what it holds at the measured memory per target.
    pub memory_budget: u64,
    /// The settings of waves by number (`waves:`), one entry per wave at most, each for a
    /// wave some target is in. A wave without an entry has the defaults (see [`Config::bake`]
    /// and [`Config::max_parallel`]).
    pub waves: Vec<WaveConfig>,
    /// The lowest wave of every target of the file, before `--target` or `--wave` narrow the
    /// targets down: a `scope: fleet` stage runs once per deploy, with this wave.
    pub first_wave: u32,
    /// `deploy --wave N`: every target of the file in a wave below N (whatever `--target`
    /// selected), whose records must say they run this deploy's commit before wave N starts
    /// (see `engine::wave_gate`). Empty without `--wave`.
    pub earlier_waves: Vec<TargetConfig>,
    /// The top-level `checks:`, run on every target (see [`Config::checks_for`]).
    pub checks: Vec<CheckConfig>,
    /// The checks' variables (`url_env`, `token_env`, `user_env`, `password_env`) that are
    /// not set, each at its line: bad input for the commands that run or render checks
    /// (deploy, diff, plan, check), which say them before anything is written; the release
    /// commands (history, rollback, ...) run no check and ignore them. A check with such a
    /// variable is left out of `checks`.
    pub check_env_issues: Vec<ConfigIssue>,
    pub history: HistoryConfig,
    pub on_failure: FailurePolicy,
    pub on_cancel: CancelPolicy,
    /// What happens to objects with a `helm.sh/hook` annotation (`helm template` output).
    pub render_hooks: RenderHooks,
    pub rollback: RollbackConfig,
    /// The order in which script stages' rollback commands run.
    pub rollback_order: RollbackOrder,
    pub lock: LockConfig,
    pub github: GithubConfig,
    /// The stages of a deploy in order: `apply` once, script stages around it.
    pub pipeline: Vec<PipelineStage>,
    /// Folder of the config file; manifest paths and render commands are relative to it.
    pub base_dir: PathBuf,
    /// The config file's path as given, for messages.
    pub source: PathBuf,
    /// Global kubeconfig from `--kubeconfig` / `ROLLGUARD_KUBECONFIG` / `INPUT_KUBECONFIG`
    /// (None: `$KUBECONFIG` or `~/.kube/config`, as kubectl does).
    pub kubeconfig: Option<PathBuf>,
    /// `preflight:` (default true): before the first write, every object is applied with
    /// `dryRun=All` on every target, and any refusal stops the deploy (exit 2).
    pub preflight: bool,
    /// `prune:` (default false): after a healthy deploy of a target, delete the objects of
    /// its previous release that the manifests no longer declare and that are still this
    /// app's (`release::dropped`). `--prune` turns it on for one run.
    pub prune: bool,
    /// How long one git command may run (`ROLLGUARD_GIT_TIMEOUT`, default 60 s): every git
    /// call of the run (commit detection, a rollback's checkout) is given it.
    pub git_timeout: Duration,
}

impl Config {
    /// The default namespace on `target`: its own `namespace`, else the app's.
    pub fn namespace_for<'a>(&'a self, target: &'a TargetConfig) -> Option<&'a str> {
        target.namespace.as_deref().or(self.namespace.as_deref())
    }

    /// The namespace for namespaced objects without one on `target`: the target's
    /// `namespace`, else the app's, else the kubeconfig context's.
    pub fn default_namespace(&self, target: &TargetConfig, context_namespace: &str) -> String {
        self.namespace_for(target)
            .unwrap_or(context_namespace)
            .to_string()
    }

    /// The one rule for where the app's release records and lock live on `target`:
    /// `history.namespace`, else the app's namespace there ([`Config::default_namespace`]).
    pub fn history_namespace(&self, target: &TargetConfig, context_namespace: &str) -> String {
        match &self.history.namespace {
            Some(namespace) => namespace.clone(),
            None => self.default_namespace(target, context_namespace),
        }
    }

    /// The rollback's own timeout (default: the wait timeout).
    pub fn rollback_timeout(&self) -> Duration {
        self.rollback.timeout.unwrap_or(self.wait.timeout)
    }

    /// The entry of `waves:` for `wave`, if there is one.
    pub fn wave_config(&self, wave: u32) -> Option<&WaveConfig> {
        self.waves.iter().find(|w| w.wave == wave)
    }

    /// How long `wave` bakes once its targets are healthy: its entry's `bake`, else
    /// `wait.bake` (default 0: the next wave starts at once).
    pub fn bake(&self, wave: u32) -> Duration {
        self.wave_config(wave)
            .and_then(|w| w.bake)
            .unwrap_or(self.wait.bake)
    }

    /// How many targets of `wave` run at once: its entry's `max_parallel`, else
    /// `concurrency`.
    pub fn max_parallel(&self, wave: u32) -> usize {
        self.wave_config(wave)
            .and_then(|w| w.max_parallel)
            .unwrap_or(self.concurrency)
    }

    /// The checks `target` runs: the top-level ones, then its wave's.
    pub fn checks_for(&self, target: &TargetConfig) -> Vec<&CheckConfig> {
        let wave = self.wave_config(target.wave).map(|w| w.checks.as_slice());
        self.checks.iter().chain(wave.unwrap_or_default()).collect()
    }

    /// The waves the targets are in, in the order they run (ascending), each once.
    pub fn wave_numbers(&self) -> Vec<u32> {
        wave_numbers(&self.targets)
    }
}

/// The waves `targets` are in, ascending, each once.
pub fn wave_numbers(targets: &[TargetConfig]) -> Vec<u32> {
    let mut waves: Vec<u32> = targets.iter().map(|t| t.wave).collect();
    waves.sort_unstable();
    waves.dedup();
    waves
}

/// Waves as words for messages: "no wave", "wave 0", "waves 0, 1 and 3".
pub fn waves_text(waves: &[u32]) -> String {
    let words: Vec<String> = waves.iter().map(u32::to_string).collect();
    match words.split_last() {
        None => "no wave".to_string(),
        Some((last, [])) => format!("wave {last}"),
        Some((last, rest)) => format!("waves {} and {last}", rest.join(", ")),
    }
}

/// One entry of `waves:`: the settings of the targets with `wave: <wave>`.
#[derive(Debug, Clone, PartialEq)]
pub struct WaveConfig {
    /// The wave number the entry is for (targets' `wave:`).
    pub wave: u32,
    /// How long the wave's pods stay watched after they are healthy, before the next wave
    /// starts (None: `wait.bake`).
    pub bake: Option<Duration>,
    /// Targets of this wave at once, at least 1 (None: `concurrency`).
    pub max_parallel: Option<usize>,
    /// This wave's own `checks:`, run on its targets after the top-level ones.
    pub checks: Vec<CheckConfig>,
    /// Line of the entry in the config file, for messages.
    pub line: usize,
}

/// Where the manifests come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestSource {
    /// Files, folders and globs, relative to `base_dir`.
    Paths(Vec<String>),
    /// A command run with `sh -c` in `base_dir`; its stdout is the manifests.
    Render { command: String },
}

/// One cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetConfig {
    /// Name used in every report.
    pub name: String,
    /// A context of the kubeconfig (global, or this target's own).
    pub context: Option<String>,
    /// This target's kubeconfig file, relative paths resolved against `base_dir`.
    pub kubeconfig: Option<PathBuf>,
    /// An environment variable holding a whole kubeconfig (raw YAML or base64).
    pub kubeconfig_env: Option<String>,
    /// Overrides `Config::namespace` on this target.
    pub namespace: Option<String>,
    /// The GitHub environment of this target's deployment (default `<app>/<name>`).
    pub environment: Option<String>,
    /// The wave this target deploys in (default 0); waves run in ascending order.
    pub wave: u32,
    /// The target's own `vars:`, for the checks' `{{vars.KEY}}` templates.
    pub vars: std::collections::BTreeMap<String, String>,
    /// Line of this target in the config file (0 when unknown), for messages.
    pub line: usize,
}

/// `wait.log_lines` when the config sets none.
pub const DEFAULT_LOG_LINES: u32 = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct WaitConfig {
    /// Deadline per target for apply + rollout (default 5m).
    pub timeout: Duration,
    pub fail_fast: FailFastConfig,
    /// The bake of waves whose `waves:` entry sets none (default 0).
    pub bake: Duration,
    /// Last log lines read from each failing container (default 20; 0: none are read).
    pub log_lines: u32,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            timeout: Duration::from_secs(300),
            fail_fast: FailFastConfig::default(),
            bake: Duration::ZERO,
            log_lines: DEFAULT_LOG_LINES,
        }
    }
}

/// Which pod problems fail a target before its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct FailFastConfig {
    /// Container waiting reasons that fail the target (see `DEFAULT_FAIL_FAST_REASONS`).
    pub reasons: Vec<String>,
    /// How long a container's pull errors that may pass (timeouts, 5xx, 429, ...) are
    /// tolerated, from its first pull error, across ErrImagePull and ImagePullBackOff (60s).
    /// Errors that say the pull cannot succeed (not found, denied) fail at once.
    pub pull_grace: Duration,
    /// CrashLoopBackOff fails once restartCount reaches this (2).
    pub crash_loop_restarts: i32,
    pub unschedulable: UnschedulablePolicy,
    /// With `unschedulable: fail`, how long a pod may stay unschedulable (default 60s).
    pub unschedulable_grace: Duration,
}

impl Default for FailFastConfig {
    fn default() -> Self {
        FailFastConfig {
            reasons: DEFAULT_FAIL_FAST_REASONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            pull_grace: Duration::from_secs(60),
            crash_loop_restarts: 2,
            unschedulable: UnschedulablePolicy::Warn,
            unschedulable_grace: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnschedulablePolicy {
    /// Report a warning and keep waiting (cluster autoscalers take minutes).
    #[default]
    Warn,
    /// Fail the target once the grace has passed.
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Namespace of the release records (default: the app's namespace).
    pub namespace: Option<String>,
    /// Records kept per app and target (10, at least 1).
    pub keep: usize,
    /// How records keep Secrets of namespaces other than the history namespace.
    pub secrets: SecretsPolicy,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            namespace: None,
            keep: 10,
            secrets: SecretsPolicy::default(),
        }
    }
}

/// `history.secrets`: what a release record keeps of a Secret whose namespace is not the
/// history namespace. A copy would let whoever reads Secrets in the history namespace read
/// it, hence the default: a digest, and the Secret re-read from git on rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecretsPolicy {
    Store,
    #[default]
    Digest,
}

/// What happens across targets when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Every target that received the new revision rolls back.
    #[default]
    RollbackAll,
    /// Only failed targets roll back.
    RollbackFailed,
    /// Roll back only when every target failed; a partial failure stays as it is.
    RollbackIfAllFail,
    /// Never roll back.
    None,
}

/// The order of the rollback commands of script stages (a target's own, then the fleet
/// stages' once): `pipeline` is PipeCD's SCRIPT_RUN order, which rollguard follows;
/// `reverse` is last-first, undo as a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RollbackOrder {
    #[default]
    Pipeline,
    Reverse,
}

/// Objects with a `helm.sh/hook` annotation: Helm runs them around its own install (test
/// Pods, migration Jobs); applied as ordinary objects they would pile up on every deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenderHooks {
    /// Left out of the deploy, with one warning naming them.
    #[default]
    Skip,
    /// Applied as ordinary objects.
    Apply,
}

/// What happens on SIGINT/SIGTERM to targets that received the new revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CancelPolicy {
    #[default]
    Rollback,
    Leave,
}

named_choices!(UnschedulablePolicy {
    Warn => "warn",
    Fail => "fail",
});
named_choices!(SecretsPolicy {
    Store => "store",
    Digest => "digest",
});
// The underscore spellings: the file's keys are snake_case, and were accepted before.
named_choices!(FailurePolicy {
    RollbackAll => "rollback-all" | "rollback_all",
    RollbackFailed => "rollback-failed" | "rollback_failed",
    RollbackIfAllFail => "rollback-if-all-fail" | "rollback_if_all_fail",
    None => "none",
});
named_choices!(RollbackOrder {
    Pipeline => "pipeline",
    Reverse => "reverse",
});
named_choices!(RenderHooks {
    Skip => "skip",
    Apply => "apply",
});
named_choices!(CancelPolicy {
    Rollback => "rollback",
    Leave => "leave",
});

/// `FailurePolicy::from_str` without the message (for flag parsers that report their own).
pub fn parse_failure_policy(s: &str) -> Option<FailurePolicy> {
    s.parse().ok()
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RollbackConfig {
    /// Deadline of a rollback's rollout (default: `wait.timeout`).
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfig {
    /// How long to wait for another run's lock (2m).
    pub timeout: Duration,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            timeout: Duration::from_secs(120),
        }
    }
}

/// The GitHub sink (`github:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubConfig {
    /// One GitHub deployment per target, with its statuses (default false).
    pub deployments: bool,
    /// All GitHub calls of a run together, retries included (default 30s).
    pub timeout: Duration,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            deployments: false,
            timeout: Duration::from_secs(30),
        }
    }
}

/// One problem with the configuration, located as precisely as possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// "rollguard.yaml:7", "rollguard.yaml", "--timeout" or "$ROLLGUARD_TIMEOUT".
    pub location: String,
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {}: {source} (pass --config PATH, or create rollguard.yaml; `rollguard schema` describes it)",
        path.display()
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", issues_text(.0))]
    Invalid(Vec<ConfigIssue>),
}

impl ConfigError {
    /// The individual problems (empty for a read error).
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            ConfigError::Invalid(issues) => issues,
            ConfigError::Read { .. } => &[],
        }
    }
}

fn issues_text(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(ConfigIssue::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
