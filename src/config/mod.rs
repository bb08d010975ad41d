//! rollguard.yaml + command-line overrides + `ROLLGUARD_*` / `INPUT_*` environment -> `Config`.
//!
//! The file is walked by hand over a line-aware YAML tree (not derived serde) so that every
//! error names file and line, unknown keys suggest the nearest known key, and all problems are
//! reported at once. The accepted keys are the `*_KEYS` lists below; `json_schema()` is checked
//! against them by a test.

mod pipeline;
pub use pipeline::{
    DEFAULT_KILL_GRACE, DEFAULT_SCRIPT_TIMEOUT, PipelineStage, Scope, ScriptStage,
    default_pipeline, missing_working_dirs, script_stages,
};

use crate::util::duration::parse_duration;
use crate::util::yaml::{self, Node, Tree};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The default config file name, looked up in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "rollguard.yaml";

const TOP_KEYS: &[&str] = &[
    "app",
    "namespace",
    "manifests",
    "render",
    "targets",
    "wait",
    "concurrency",
    "history",
    "on_failure",
    "on_cancel",
    "rollback",
    "lock",
    "pipeline",
];
/// Keys that were accepted once and are now refused with a pointer to their replacement.
const RETIRED_TOP_KEYS: &[&str] = &["stages"];
const TARGET_KEYS: &[&str] = &[
    "name",
    "context",
    "kubeconfig",
    "kubeconfig_env",
    "namespace",
];
const WAIT_KEYS: &[&str] = &["timeout", "fail_fast"];
const FAIL_FAST_KEYS: &[&str] = &[
    "reasons",
    "err_image_pull_grace",
    "crash_loop_restarts",
    "unschedulable",
    "unschedulable_grace",
];
const HISTORY_KEYS: &[&str] = &["namespace", "keep"];
const ROLLBACK_KEYS: &[&str] = &["timeout"];
const LOCK_KEYS: &[&str] = &["timeout"];

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
    /// The targets to deploy to, after `--context` selection.
    pub targets: Vec<TargetConfig>,
    pub wait: WaitConfig,
    /// Targets processed at once.
    pub concurrency: usize,
    pub history: HistoryConfig,
    pub on_failure: FailurePolicy,
    pub on_cancel: CancelPolicy,
    pub rollback: RollbackConfig,
    pub lock: LockConfig,
    /// The stages of a deploy in order: `apply` once, script stages around it.
    pub pipeline: Vec<PipelineStage>,
    /// Folder of the config file; manifest paths and render commands are relative to it.
    pub base_dir: PathBuf,
    /// The config file's path as given, for messages.
    pub source: PathBuf,
    /// Global kubeconfig from `--kubeconfig` / `ROLLGUARD_KUBECONFIG` / `INPUT_KUBECONFIG`
    /// (None: `$KUBECONFIG` or `~/.kube/config`, as kubectl does).
    pub kubeconfig: Option<PathBuf>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Line of this target in the config file (0 when unknown), for messages.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WaitConfig {
    /// Deadline per target for apply + rollout (default 5m).
    pub timeout: Duration,
    pub fail_fast: FailFastConfig,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            timeout: Duration::from_secs(300),
            fail_fast: FailFastConfig::default(),
        }
    }
}

/// Which pod problems fail a target before its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct FailFastConfig {
    /// Container waiting reasons that fail the target (see `DEFAULT_FAIL_FAST_REASONS`).
    pub reasons: Vec<String>,
    /// How long ErrImagePull may persist before it fails the target (10s).
    pub err_image_pull_grace: Duration,
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
            err_image_pull_grace: Duration::from_secs(10),
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
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            namespace: None,
            keep: 10,
        }
    }
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

impl FailurePolicy {
    pub const ALL: [FailurePolicy; 4] = [
        FailurePolicy::RollbackAll,
        FailurePolicy::RollbackFailed,
        FailurePolicy::RollbackIfAllFail,
        FailurePolicy::None,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::RollbackAll => "rollback-all",
            FailurePolicy::RollbackFailed => "rollback-failed",
            FailurePolicy::RollbackIfAllFail => "rollback-if-all-fail",
            FailurePolicy::None => "none",
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FailurePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        FailurePolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == wanted)
            .ok_or_else(|| one_of_message(s, &FailurePolicy::ALL.map(FailurePolicy::as_str)))
    }
}

/// `FailurePolicy::from_str` without the message (for flag parsers that report their own).
pub fn parse_failure_policy(s: &str) -> Option<FailurePolicy> {
    s.parse().ok()
}

/// What happens on SIGINT/SIGTERM to targets that received the new revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CancelPolicy {
    #[default]
    Rollback,
    Leave,
}

impl CancelPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelPolicy::Rollback => "rollback",
            CancelPolicy::Leave => "leave",
        }
    }
}

impl fmt::Display for CancelPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CancelPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "rollback" => Ok(CancelPolicy::Rollback),
            "leave" => Ok(CancelPolicy::Leave),
            _ => Err(one_of_message(s, &["rollback", "leave"])),
        }
    }
}

impl FromStr for UnschedulablePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "warn" => Ok(UnschedulablePolicy::Warn),
            "fail" => Ok(UnschedulablePolicy::Fail),
            _ => Err(one_of_message(s, &["warn", "fail"])),
        }
    }
}

fn one_of_message(got: &str, choices: &[&str]) -> String {
    let mut msg = format!("{got:?} is not one of {}", choices.join(", "));
    if let Some(near) = nearest(got, choices) {
        msg.push_str(&format!("; did you mean {near:?}?"));
    }
    msg
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

/// A command of a script stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptCommand {
    /// Run with `sh -c`.
    Shell(String),
    /// Run directly, no shell.
    Argv(Vec<String>),
}

/// Settings given on the command line (filled by cli.rs); they win over env and file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub kubeconfig: Option<PathBuf>,
    /// Pick targets by target name or context name (`--context a,b` or repeated).
    pub contexts: Vec<String>,
    pub timeout: Option<Duration>,
    pub on_failure: Option<FailurePolicy>,
    pub on_cancel: Option<CancelPolicy>,
    pub concurrency: Option<usize>,
    pub lock_timeout: Option<Duration>,
    pub rollback_timeout: Option<Duration>,
    pub namespace: Option<String>,
    pub history_namespace: Option<String>,
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

/// The config file to read: the flag, else `ROLLGUARD_CONFIG`, else `INPUT_CONFIG`, else
/// `./rollguard.yaml`.
pub fn config_path(flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| env_setting(env, "CONFIG").map(|(v, _)| PathBuf::from(v)))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE))
}

/// Reads, validates and overrides the config file at `path`.
pub fn load(
    path: &Path,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path, overrides, env)
}

/// Validates config text as if read from `source` (its folder is the base dir).
pub fn parse(
    text: &str,
    source: &Path,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let base_dir = match source.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut ctx = Ctx {
        file: source.display().to_string(),
        issues: Vec::new(),
    };
    let root = match yaml::parse_single(text) {
        Ok(root) => root,
        Err(e) => {
            ctx.at(e.line, format!("not valid YAML: {}", e.message));
            return Err(ConfigError::Invalid(ctx.issues));
        }
    };
    let mut config = ctx.config(&root, base_dir, source.to_path_buf());
    apply_overrides(&mut ctx, &mut config, overrides, env);
    if ctx.issues.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid(ctx.issues))
    }
}

/// Collects issues while walking the tree.
struct Ctx {
    file: String,
    issues: Vec<ConfigIssue>,
}

impl Ctx {
    fn at(&mut self, line: usize, message: impl Into<String>) {
        let location = if line > 0 {
            format!("{}:{line}", self.file)
        } else {
            self.file.clone()
        };
        self.issues.push(ConfigIssue {
            location,
            message: message.into(),
        });
    }

    /// Reports keys not in `allowed`, suggesting the nearest one. Returns the entries.
    fn mapping<'a>(
        &mut self,
        node: &'a Node,
        section: &str,
        allowed: &[&str],
    ) -> Option<&'a [(Node, Node)]> {
        match &node.value {
            Tree::Map(entries) => {
                for (key, _) in entries {
                    let name = key.key_text();
                    if !allowed.contains(&name.as_str()) {
                        let mut msg = format!("unknown key {name:?} in {section}");
                        match nearest(&name, allowed) {
                            Some(near) => msg.push_str(&format!("; did you mean {near:?}?")),
                            None => msg.push_str(&format!(" (known keys: {})", allowed.join(", "))),
                        }
                        self.at(key.line, msg);
                    }
                }
                Some(entries)
            }
            Tree::Null => None,
            other => {
                self.at(
                    node.line,
                    format!("{section} must be a mapping, not {}", other.kind_name()),
                );
                None
            }
        }
    }

    /// A scalar as text; null is "not set".
    fn text(&mut self, node: Option<&Node>, what: &str) -> Option<(String, usize)> {
        let node = node?;
        let text = match &node.value {
            Tree::Null => return None,
            Tree::Str(s) => s.clone(),
            Tree::Seq(_) | Tree::Map(_) => {
                self.at(
                    node.line,
                    format!("{what} must be a string, not {}", node.value.kind_name()),
                );
                return None;
            }
            _ => node.key_text(),
        };
        Some((text, node.line))
    }

    fn duration(&mut self, node: Option<&Node>, what: &str) -> Option<Duration> {
        let node = node?;
        let parsed = match &node.value {
            Tree::Null => return None,
            Tree::Int(i) if *i >= 0 => Ok(Duration::from_secs(i.unsigned_abs())),
            Tree::UInt(u) => Ok(Duration::from_secs(*u)),
            Tree::Str(s) => parse_duration(s).map_err(|e| e.to_string()),
            other => Err(format!(
                "must be a duration like \"90s\" or \"5m\", not {}",
                other.kind_name()
            )),
        };
        match parsed {
            Ok(d) => Some(d),
            Err(e) => {
                self.at(node.line, format!("{what}: {e}"));
                None
            }
        }
    }

    fn integer(&mut self, node: Option<&Node>, what: &str, min: i64) -> Option<i64> {
        let node = node?;
        let value = match &node.value {
            Tree::Null => return None,
            Tree::Int(i) => Some(*i),
            Tree::UInt(u) => i64::try_from(*u).ok(),
            Tree::Str(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        match value {
            Some(v) if v >= min => Some(v),
            Some(v) => {
                self.at(node.line, format!("{what} must be at least {min}, not {v}"));
                None
            }
            None => {
                self.at(
                    node.line,
                    format!("{what} must be an integer, not {}", node.value.kind_name()),
                );
                None
            }
        }
    }

    fn parsed<T: FromStr<Err = String>>(&mut self, node: Option<&Node>, what: &str) -> Option<T> {
        let (text, line) = self.text(node, what)?;
        match text.parse() {
            Ok(v) => Some(v),
            Err(e) => {
                self.at(line, format!("{what}: {e}"));
                None
            }
        }
    }

    fn dns_label(&mut self, node: Option<&Node>, what: &str) -> Option<String> {
        let (text, line) = self.text(node, what)?;
        match dns_label_problem(&text) {
            None => Some(text),
            Some(problem) => {
                self.at(line, format!("{what} {text:?} {problem}"));
                None
            }
        }
    }

    fn strings(&mut self, node: Option<&Node>, what: &str) -> Option<Vec<(String, usize)>> {
        let node = node?;
        match &node.value {
            Tree::Null => None,
            Tree::Seq(items) => Some(
                items
                    .iter()
                    .filter_map(|item| self.text(Some(item), what))
                    .collect(),
            ),
            _ => self.text(Some(node), what).map(|t| vec![t]),
        }
    }

    fn command(&mut self, node: Option<&Node>, what: &str) -> Option<ScriptCommand> {
        let node = node?;
        match &node.value {
            Tree::Null => None,
            Tree::Seq(items) => {
                let argv: Vec<String> = items
                    .iter()
                    .filter_map(|i| self.text(Some(i), what).map(|(t, _)| t))
                    .collect();
                if argv.is_empty() {
                    self.at(node.line, format!("{what} must not be an empty list"));
                    return None;
                }
                Some(ScriptCommand::Argv(argv))
            }
            _ => {
                let (text, line) = self.text(Some(node), what)?;
                if text.trim().is_empty() {
                    self.at(line, format!("{what} must not be empty"));
                    return None;
                }
                Some(ScriptCommand::Shell(text))
            }
        }
    }

    fn config(&mut self, root: &Node, base_dir: PathBuf, source: PathBuf) -> Config {
        let mut config = Config {
            app: String::new(),
            namespace: None,
            manifests: ManifestSource::Paths(Vec::new()),
            targets: Vec::new(),
            wait: WaitConfig::default(),
            concurrency: 64,
            history: HistoryConfig::default(),
            on_failure: FailurePolicy::default(),
            on_cancel: CancelPolicy::default(),
            rollback: RollbackConfig::default(),
            lock: LockConfig::default(),
            pipeline: default_pipeline(),
            base_dir,
            source,
            kubeconfig: None,
        };
        if matches!(root.value, Tree::Null) {
            self.at(
                0,
                "the file is empty: it needs at least `app`, `manifests` and `targets`",
            );
            return config;
        }
        let top_keys: Vec<&str> = TOP_KEYS.iter().chain(RETIRED_TOP_KEYS).copied().collect();
        if self.mapping(root, "the top level", &top_keys).is_none() {
            return config;
        }
        let get = |key: &str| root.get(key);

        match self.dns_label(get("app"), "app") {
            Some(app) => config.app = app,
            None if get("app").is_none() => self.at(
                0,
                "missing required key \"app\" (the app's name, e.g. `app: shop`)",
            ),
            None => {}
        }
        config.namespace = self.dns_label(get("namespace"), "namespace");

        let paths = self.strings(get("manifests"), "manifests entry");
        let render = self.text(get("render"), "render");
        match (paths, render) {
            (Some(_), Some((_, line))) => self.at(
                line,
                "use either `manifests` (files, folders, globs) or `render` (a command), not both",
            ),
            (Some(paths), None) => {
                if paths.is_empty() {
                    self.at(
                        get("manifests").map_or(0, |n| n.line),
                        "manifests must list at least one file, folder or glob",
                    );
                }
                for (p, line) in &paths {
                    if p.trim().is_empty() {
                        self.at(*line, "manifests entry must not be empty");
                    }
                }
                config.manifests = ManifestSource::Paths(paths.into_iter().map(|(p, _)| p).collect());
            }
            (None, Some((command, line))) => {
                if command.trim().is_empty() {
                    self.at(line, "render must not be empty");
                }
                config.manifests = ManifestSource::Render { command };
            }
            (None, None) => self.at(
                0,
                "missing required key \"manifests\" (e.g. `manifests: [k8s/]`) or \"render\" (e.g. `render: kustomize build k8s`)",
            ),
        }

        config.targets = self.targets(get("targets"));
        // A target's kubeconfig file is relative to the config file, like the manifests.
        for t in &mut config.targets {
            if let Some(k) = &t.kubeconfig
                && k.is_relative()
                && config.base_dir != Path::new(".")
            {
                t.kubeconfig = Some(config.base_dir.join(k));
            }
        }

        if let Some(wait) = get("wait")
            && self.mapping(wait, "wait", WAIT_KEYS).is_some()
        {
            if let Some(t) = self.duration(wait.get("timeout"), "wait.timeout") {
                config.wait.timeout = t;
            }
            if let Some(ff) = wait.get("fail_fast") {
                config.wait.fail_fast = self.fail_fast(ff);
            }
        }
        if let Some(c) = self.integer(get("concurrency"), "concurrency", 1) {
            config.concurrency = usize::try_from(c).unwrap_or(usize::MAX);
        }
        if let Some(history) = get("history")
            && self.mapping(history, "history", HISTORY_KEYS).is_some()
        {
            config.history.namespace =
                self.dns_label(history.get("namespace"), "history.namespace");
            if let Some(keep) = self.integer(history.get("keep"), "history.keep", 1) {
                config.history.keep = usize::try_from(keep).unwrap_or(usize::MAX);
            }
        }
        if let Some(p) = self.parsed(get("on_failure"), "on_failure") {
            config.on_failure = p;
        }
        if let Some(p) = self.parsed(get("on_cancel"), "on_cancel") {
            config.on_cancel = p;
        }
        if let Some(rb) = get("rollback")
            && self.mapping(rb, "rollback", ROLLBACK_KEYS).is_some()
        {
            config.rollback.timeout = self.duration(rb.get("timeout"), "rollback.timeout");
        }
        if let Some(lock) = get("lock")
            && self.mapping(lock, "lock", LOCK_KEYS).is_some()
            && let Some(t) = self.duration(lock.get("timeout"), "lock.timeout")
        {
            config.lock.timeout = t;
        }
        // The key's own line: its value (a list) starts on the next one.
        if let Tree::Map(entries) = &root.value
            && let Some((key, _)) = entries.iter().find(|(k, _)| k.key_text() == "stages")
        {
            self.old_stages_key(key);
        }
        config.pipeline = self.pipeline(get("pipeline"), &config.base_dir);
        config
    }

    fn targets(&mut self, node: Option<&Node>) -> Vec<TargetConfig> {
        let Some(node) = node else {
            self.at(
                0,
                "missing required key \"targets\" (a list of clusters: `- name: eu` with `context: ...`)",
            );
            return Vec::new();
        };
        let items = match &node.value {
            Tree::Seq(items) if !items.is_empty() => items,
            Tree::Seq(_) | Tree::Null => {
                self.at(node.line, "targets must list at least one target");
                return Vec::new();
            }
            other => {
                self.at(
                    node.line,
                    format!("targets must be a list, not {}", other.kind_name()),
                );
                return Vec::new();
            }
        };
        let mut targets = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("targets[{index}]");
            if self.mapping(item, &what, TARGET_KEYS).is_none() {
                if matches!(item.value, Tree::Null) {
                    self.at(item.line, format!("{what} is empty"));
                }
                continue;
            }
            let name = match self.text(item.get("name"), "target name") {
                Some((name, line)) => {
                    if let Some(problem) = target_name_problem(&name) {
                        self.at(line, format!("target name {name:?} {problem}"));
                    } else if let Some(first) = seen.get(&name) {
                        self.at(
                            line,
                            format!("duplicate target name {name:?} (first at line {first}); names must be unique"),
                        );
                    } else {
                        seen.insert(name.clone(), line);
                    }
                    name
                }
                None => {
                    self.at(
                        item.line,
                        format!("{what} needs a `name` (used in every report)"),
                    );
                    String::new()
                }
            };
            let label = if name.is_empty() {
                what.clone()
            } else {
                format!("target {name:?}")
            };
            let context = self.text(item.get("context"), "context").map(|(t, _)| t);
            let kubeconfig = self
                .text(item.get("kubeconfig"), "kubeconfig")
                .map(|(t, _)| PathBuf::from(t));
            let kubeconfig_env = self
                .text(item.get("kubeconfig_env"), "kubeconfig_env")
                .map(|(t, _)| t);
            if kubeconfig.is_some() && kubeconfig_env.is_some() {
                self.at(
                    item.line,
                    format!("{label}: set `kubeconfig` or `kubeconfig_env`, not both"),
                );
            }
            if context.is_none() && kubeconfig.is_none() && kubeconfig_env.is_none() {
                self.at(
                    item.line,
                    format!(
                        "{label} needs one of `context` (a context of --kubeconfig / $KUBECONFIG), \
                         `kubeconfig` (a file) or `kubeconfig_env` (an environment variable holding a kubeconfig)"
                    ),
                );
            }
            if let Some(var) = &kubeconfig_env
                && !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                self.at(
                    item.line,
                    format!(
                        "{label}: kubeconfig_env must be an environment variable name, not {var:?}"
                    ),
                );
            }
            let namespace = self.dns_label(item.get("namespace"), "target namespace");
            targets.push(TargetConfig {
                name,
                context,
                kubeconfig,
                kubeconfig_env,
                namespace,
                line: item.line,
            });
        }
        targets
    }

    fn fail_fast(&mut self, node: &Node) -> FailFastConfig {
        let mut ff = FailFastConfig::default();
        if self
            .mapping(node, "wait.fail_fast", FAIL_FAST_KEYS)
            .is_none()
        {
            return ff;
        }
        if let Some(reasons) = self.strings(node.get("reasons"), "wait.fail_fast.reasons entry") {
            for (reason, line) in &reasons {
                if !DEFAULT_FAIL_FAST_REASONS.contains(&reason.as_str())
                    && let Some(near) = nearest(reason, DEFAULT_FAIL_FAST_REASONS)
                    && near != reason
                {
                    self.at(
                        *line,
                        format!("unknown fail-fast reason {reason:?}; did you mean {near:?}?"),
                    );
                }
            }
            ff.reasons = reasons.into_iter().map(|(r, _)| r).collect();
        }
        if let Some(d) = self.duration(
            node.get("err_image_pull_grace"),
            "wait.fail_fast.err_image_pull_grace",
        ) {
            ff.err_image_pull_grace = d;
        }
        if let Some(n) = self.integer(
            node.get("crash_loop_restarts"),
            "wait.fail_fast.crash_loop_restarts",
            0,
        ) {
            ff.crash_loop_restarts = i32::try_from(n).unwrap_or(i32::MAX);
        }
        if let Some(p) = self.parsed(node.get("unschedulable"), "wait.fail_fast.unschedulable") {
            ff.unschedulable = p;
        }
        if let Some(d) = self.duration(
            node.get("unschedulable_grace"),
            "wait.fail_fast.unschedulable_grace",
        ) {
            ff.unschedulable_grace = d;
        }
        ff
    }
}

/// Looks a setting up as `ROLLGUARD_<NAME>`, then `INPUT_<NAME>` (GitHub Action inputs).
/// Empty values count as unset: GitHub passes every declared input, empty when not given.
fn env_setting(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<(String, String)> {
    [format!("ROLLGUARD_{name}"), format!("INPUT_{name}")]
        .into_iter()
        .find_map(|var| {
            env(&var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .map(|v| (v, format!("${var}")))
        })
}

fn apply_overrides(
    ctx: &mut Ctx,
    config: &mut Config,
    flags: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut issue = |location: String, message: String| {
        ctx.issues.push(ConfigIssue { location, message });
    };
    // Each setting: the flag if given, else the environment, parsed with its location.
    macro_rules! setting {
        ($flag:expr, $name:literal, $parse:expr) => {
            match $flag {
                Some(v) => Some(v),
                None => env_setting(env, $name).and_then(|(text, location)| {
                    match $parse(text.as_str()) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            issue(location, e);
                            None
                        }
                    }
                }),
            }
        };
    }
    let duration = |s: &str| parse_duration(s).map_err(|e| e.to_string());
    let label = |s: &str| match dns_label_problem(s) {
        None => Ok(s.to_string()),
        Some(p) => Err(format!("{s:?} {p}")),
    };

    if let Some(t) = setting!(flags.timeout, "TIMEOUT", duration) {
        config.wait.timeout = t;
    }
    if let Some(p) = setting!(flags.on_failure, "ON_FAILURE", FailurePolicy::from_str) {
        config.on_failure = p;
    }
    if let Some(p) = setting!(flags.on_cancel, "ON_CANCEL", CancelPolicy::from_str) {
        config.on_cancel = p;
    }
    let concurrency = |s: &str| match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "concurrency must be a whole number of at least 1, not {s:?}"
        )),
    };
    if let Some(c) = setting!(flags.concurrency, "CONCURRENCY", concurrency) {
        config.concurrency = c.max(1);
    }
    if let Some(t) = setting!(flags.lock_timeout, "LOCK_TIMEOUT", duration) {
        config.lock.timeout = t;
    }
    if let Some(t) = setting!(flags.rollback_timeout, "ROLLBACK_TIMEOUT", duration) {
        config.rollback.timeout = Some(t);
    }
    if let Some(ns) = setting!(flags.namespace.clone(), "NAMESPACE", label) {
        config.namespace = Some(ns);
    }
    if let Some(ns) = setting!(flags.history_namespace.clone(), "HISTORY_NAMESPACE", label) {
        config.history.namespace = Some(ns);
    }
    let path = |s: &str| Ok::<_, String>(PathBuf::from(s));
    config.kubeconfig = setting!(flags.kubeconfig.clone(), "KUBECONFIG", path);

    // Target selection: flags, else ROLLGUARD_CONTEXTS / INPUT_CONTEXTS (also *_CONTEXT).
    let (wanted, location) = if !flags.contexts.is_empty() {
        (flags.contexts.clone(), "--context".to_string())
    } else if let Some((text, location)) =
        env_setting(env, "CONTEXTS").or_else(|| env_setting(env, "CONTEXT"))
    {
        (vec![text], location)
    } else {
        (Vec::new(), String::new())
    };
    let wanted: Vec<String> = wanted
        .iter()
        .flat_map(|w| w.split([',', '\n', ' ']))
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    if !wanted.is_empty() && !config.targets.is_empty() {
        let known: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
        for w in &wanted {
            let matches = config
                .targets
                .iter()
                .any(|t| &t.name == w || t.context.as_deref() == Some(w.as_str()));
            if !matches {
                let mut msg = format!(
                    "no target is named {w:?} or uses context {w:?}; targets: {}",
                    known.join(", ")
                );
                if let Some(near) = nearest(w, &known) {
                    msg.push_str(&format!("; did you mean {near:?}?"));
                }
                issue(location.clone(), msg);
            }
        }
        config.targets.retain(|t| {
            wanted
                .iter()
                .any(|w| &t.name == w || t.context.as_deref() == Some(w.as_str()))
        });
    }
}

/// Why `s` is not a DNS label (RFC 1123: what Kubernetes names of namespaces need), if it isn't.
pub fn dns_label_problem(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("must not be empty");
    }
    if s.len() > 63 {
        return Some("is longer than 63 characters");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Some("must be a DNS label: lowercase letters, digits and '-'");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// Target names end up in lock and record names and in reports.
fn target_name_problem(s: &str) -> Option<&'static str> {
    if s.trim().is_empty() {
        return Some("must not be empty");
    }
    if s.len() > 63 {
        return Some("is longer than 63 characters");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("may only contain letters, digits, '-', '_' and '.'");
    }
    None
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word_lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&word_lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.chars().count().max(word.chars().count()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// JSON Schema (draft 2020-12) of rollguard.yaml, for `rollguard schema` and editors.
pub fn json_schema() -> Value {
    let duration = json!({
        "description": "a duration: \"90s\", \"5m\", \"1h30m\", \"250ms\", or a number of seconds",
        "anyOf": [
            {"type": "string", "pattern": "^\\s*(\\d+|((\\d+(\\.\\d+)?)(ms|s|m|h|d))+)\\s*$"},
            {"type": "integer", "minimum": 0}
        ]
    });
    let dns_label = json!({
        "type": "string",
        "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    });
    let command = json!({
        "anyOf": [
            {"type": "string", "minLength": 1, "description": "run with sh -c"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "argv, no shell"}
        ]
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:rollguard:config:v1",
        "title": "rollguard.yaml",
        "description": "Deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.",
        "type": "object",
        "additionalProperties": false,
        "required": ["app", "targets"],
        "oneOf": [{"required": ["manifests"]}, {"required": ["render"]}],
        "properties": {
            "app": {"description": "the app's name (a DNS label); one release history per app and target", "allOf": [dns_label]},
            "namespace": {"description": "default namespace for namespaced objects without one", "allOf": [dns_label]},
            "manifests": {
                "description": "files, folders (*.yaml, *.yml, *.json, recursively) and globs, relative to this file",
                "anyOf": [
                    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                    {"type": "string", "minLength": 1}
                ]
            },
            "render": {"type": "string", "minLength": 1, "description": "a command (sh -c, in this file's folder) whose stdout is the manifests, e.g. \"kustomize build k8s\""},
            "targets": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name"],
                    "anyOf": [{"required": ["context"]}, {"required": ["kubeconfig"]}, {"required": ["kubeconfig_env"]}],
                    "not": {"required": ["kubeconfig", "kubeconfig_env"]},
                    "properties": {
                        "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,63}$", "description": "the name used in every report (unique)"},
                        "context": {"type": "string", "description": "a context of --kubeconfig / $KUBECONFIG (or of this target's kubeconfig)"},
                        "kubeconfig": {"type": "string", "description": "path of this target's kubeconfig file"},
                        "kubeconfig_env": {"type": "string", "pattern": "^[A-Za-z0-9_]+$", "description": "environment variable holding a whole kubeconfig (raw or base64)"},
                        "namespace": {"description": "default namespace on this target", "allOf": [dns_label]}
                    }
                }
            },
            "wait": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "timeout": {"description": "deadline per target (default 5m)", "allOf": [duration]},
                    "fail_fast": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "reasons": {"type": "array", "items": {"type": "string"}, "description": "container waiting reasons that fail a target", "default": DEFAULT_FAIL_FAST_REASONS},
                            "err_image_pull_grace": {"description": "how long ErrImagePull may persist (default 10s)", "allOf": [duration]},
                            "crash_loop_restarts": {"type": "integer", "minimum": 0, "default": 2, "description": "CrashLoopBackOff fails at this restart count"},
                            "unschedulable": {"enum": ["warn", "fail"], "default": "warn"},
                            "unschedulable_grace": {"description": "with unschedulable: fail, how long a pod may stay unschedulable (default 60s)", "allOf": [duration]}
                        }
                    }
                }
            },
            "concurrency": {"type": "integer", "minimum": 1, "default": 64, "description": "targets at once"},
            "history": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "namespace": {"description": "namespace of the release records (default: the app's namespace)", "allOf": [dns_label]},
                    "keep": {"type": "integer", "minimum": 1, "default": 10}
                }
            },
            "on_failure": {"enum": ["rollback-all", "rollback-failed", "rollback-if-all-fail", "none"], "default": "rollback-all"},
            "on_cancel": {"enum": ["rollback", "leave"], "default": "rollback"},
            "rollback": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"timeout": {"description": "deadline of a rollback (default: wait.timeout)", "allOf": [duration]}}
            },
            "lock": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"timeout": {"description": "how long to wait for another run's lock (default 2m)", "allOf": [duration]}}
            },
            "pipeline": pipeline::pipeline_schema(&duration, &command)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse_ok(text: &str) -> Config {
        parse(
            text,
            Path::new("rollguard.yaml"),
            &Overrides::default(),
            &no_env,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn errors(text: &str) -> Vec<String> {
        match parse(
            text,
            Path::new("rollguard.yaml"),
            &Overrides::default(),
            &no_env,
        ) {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(e) => e.issues().iter().map(|i| i.to_string()).collect(),
        }
    }

    const MINIMAL: &str = r#"app: shop
namespace: shop            # default namespace for namespaced objects without one
manifests: [k8s/]          # files, folders, globs; or `render: "kustomize build k8s"`,
                           # a command whose stdout is the manifests
targets:
  - name: eu               # the name used in every report
    context: sim-1         # a context of --kubeconfig / $KUBECONFIG
  - name: us
    kubeconfig_env: KUBECONFIG_US   # whole kubeconfig in an env var (raw or base64), as CI secrets hold it
wait:
  timeout: 5m
"#;

    #[test]
    fn minimal_file_from_the_issue() {
        let c = parse_ok(MINIMAL);
        assert_eq!(c.app, "shop");
        assert_eq!(c.namespace.as_deref(), Some("shop"));
        assert_eq!(c.manifests, ManifestSource::Paths(vec!["k8s/".into()]));
        assert_eq!(c.targets.len(), 2);
        assert_eq!(c.targets[0].name, "eu");
        assert_eq!(c.targets[0].context.as_deref(), Some("sim-1"));
        assert_eq!(c.targets[0].line, 6);
        assert_eq!(
            c.targets[1].kubeconfig_env.as_deref(),
            Some("KUBECONFIG_US")
        );
        assert_eq!(c.wait.timeout, Duration::from_secs(300));
        assert_eq!(c.concurrency, 64);
        assert_eq!(c.history.keep, 10);
        assert_eq!(c.on_failure, FailurePolicy::RollbackAll);
        assert_eq!(c.on_cancel, CancelPolicy::Rollback);
        assert_eq!(c.lock.timeout, Duration::from_secs(120));
        assert_eq!(c.rollback_timeout(), Duration::from_secs(300));
        assert_eq!(c.history_namespace(&c.targets[0], "ctx"), "shop");
        assert_eq!(c.history_namespace(&c.targets[1], "ctx"), "shop");
        assert_eq!(c.wait.fail_fast, FailFastConfig::default());
        assert_eq!(c.base_dir, PathBuf::from("."));
        assert_eq!(c.pipeline, default_pipeline());
    }

    #[test]
    fn full_file() {
        let c = parse_ok(
            r#"
app: shop
render: "kustomize build k8s"
targets:
  - {name: eu, context: ctx-eu, namespace: shop-eu}
  - {name: us, kubeconfig: clusters/us.yaml, context: admin}
wait:
  timeout: 90s
  fail_fast:
    reasons: [ImagePullBackOff, CrashLoopBackOff]
    err_image_pull_grace: 20s
    crash_loop_restarts: 3
    unschedulable: fail
    unschedulable_grace: 2m
concurrency: 4
history: {namespace: rollguard-system, keep: 5}
on_failure: rollback-if-all-fail
on_cancel: leave
rollback: {timeout: 3m}
lock: {timeout: 30}
pipeline:
  - script:
      name: migrate
      run: ["./migrate.sh", "--up"]
      rollback: ./migrate.sh --down
      timeout: 10m
      env: {DB: main, RETRIES: 3}
  - apply
  - script: {name: smoke, run: curl -fsS https://shop.example.com/healthz}
"#,
        );
        assert_eq!(
            c.manifests,
            ManifestSource::Render {
                command: "kustomize build k8s".into()
            }
        );
        assert_eq!(c.targets[0].namespace.as_deref(), Some("shop-eu"));
        assert_eq!(
            c.targets[1].kubeconfig,
            Some(PathBuf::from("clusters/us.yaml"))
        );
        assert_eq!(c.wait.timeout, Duration::from_secs(90));
        let ff = &c.wait.fail_fast;
        assert_eq!(ff.reasons, vec!["ImagePullBackOff", "CrashLoopBackOff"]);
        assert_eq!(ff.err_image_pull_grace, Duration::from_secs(20));
        assert_eq!(ff.crash_loop_restarts, 3);
        assert_eq!(ff.unschedulable, UnschedulablePolicy::Fail);
        assert_eq!(ff.unschedulable_grace, Duration::from_secs(120));
        assert_eq!(c.concurrency, 4);
        assert_eq!(
            c.history_namespace(&c.targets[1], "ctx"),
            "rollguard-system"
        );
        assert_eq!(c.namespace_for(&c.targets[0]), Some("shop-eu"));
        assert_eq!(c.namespace_for(&c.targets[1]), None);
        assert_eq!(
            c.history_namespace(&c.targets[0], "ctx"),
            "rollguard-system"
        );
        assert_eq!(c.default_namespace(&c.targets[0], "ctx"), "shop-eu");
        assert_eq!(c.default_namespace(&c.targets[1], "ctx"), "ctx");
        assert_eq!(c.history.keep, 5);
        assert_eq!(c.on_failure, FailurePolicy::RollbackIfAllFail);
        assert_eq!(c.on_cancel, CancelPolicy::Leave);
        assert_eq!(c.rollback_timeout(), Duration::from_secs(180));
        assert_eq!(c.lock.timeout, Duration::from_secs(30));
        assert_eq!(c.pipeline.len(), 3);
        let scripts: Vec<&ScriptStage> = script_stages(&c.pipeline).collect();
        let m = scripts[0];
        assert_eq!(
            m.run,
            ScriptCommand::Argv(vec!["./migrate.sh".into(), "--up".into()])
        );
        assert_eq!(
            m.rollback,
            Some(ScriptCommand::Shell("./migrate.sh --down".into()))
        );
        assert_eq!(c.pipeline[1], PipelineStage::Apply);
        assert_eq!(m.timeout, Duration::from_secs(600));
        assert_eq!(m.env.get("RETRIES").map(String::as_str), Some("3"));
        assert_eq!(scripts[1].name, "smoke");
    }

    #[test]
    fn error_table() {
        let base = "app: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: c\n";
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{base}wait:\n  timout: 5m\n"),
                "rollguard.yaml:7: unknown key \"timout\" in wait; did you mean \"timeout\"?",
            ),
            (
                format!("{base}targts: []\n"),
                "rollguard.yaml:6: unknown key \"targts\" in the top level; did you mean \"targets\"?",
            ),
            (
                format!("{base}  - name: us\n    contxt: c2\n"),
                "rollguard.yaml:7: unknown key \"contxt\" in targets[1]; did you mean \"context\"?",
            ),
            (
                format!("{base}zzz: 1\n"),
                "rollguard.yaml:6: unknown key \"zzz\" in the top level (known keys: app,",
            ),
            (
                base.replace("app: shop", "app: Shop_1"),
                "rollguard.yaml:1: app \"Shop_1\" must be a DNS label",
            ),
            (
                format!("{base}  - name: eu\n    context: c2\n"),
                "rollguard.yaml:6: duplicate target name \"eu\" (first at line 4)",
            ),
            (
                format!("{base}  - name: \"\"\n    context: c2\n"),
                "rollguard.yaml:6: target name \"\" must not be empty",
            ),
            (
                format!("{base}  - name: us\n"),
                "rollguard.yaml:6: target \"us\" needs one of `context`",
            ),
            (
                format!("{base}  - name: us\n    kubeconfig: a\n    kubeconfig_env: B\n"),
                "rollguard.yaml:6: target \"us\": set `kubeconfig` or `kubeconfig_env`, not both",
            ),
            (
                format!("{base}  - context: c2\n"),
                "rollguard.yaml:6: targets[1] needs a `name`",
            ),
            (
                format!("{base}wait:\n  timeout: 5 minutes\n"),
                "rollguard.yaml:7: wait.timeout: invalid duration \"5 minutes\"",
            ),
            (
                format!("{base}history:\n  keep: 0\n"),
                "rollguard.yaml:7: history.keep must be at least 1, not 0",
            ),
            (
                format!("{base}concurrency: many\n"),
                "rollguard.yaml:6: concurrency must be an integer, not a string",
            ),
            (
                format!("{base}on_failure: rollback-al\n"),
                "rollguard.yaml:6: on_failure: \"rollback-al\" is not one of rollback-all, rollback-failed, rollback-if-all-fail, none; did you mean \"rollback-all\"?",
            ),
            (
                format!("{base}wait:\n  fail_fast:\n    unschedulable: maybe\n"),
                "rollguard.yaml:8: wait.fail_fast.unschedulable: \"maybe\" is not one of warn, fail",
            ),
            (
                format!("{base}wait:\n  fail_fast:\n    reasons: [ImagePullBackof]\n"),
                "rollguard.yaml:8: unknown fail-fast reason \"ImagePullBackof\"; did you mean \"ImagePullBackOff\"?",
            ),
            (
                format!("{base}render: make manifests\n"),
                "rollguard.yaml:6: use either `manifests` (files, folders, globs) or `render` (a command), not both",
            ),
            (
                "app: shop\ntargets:\n  - {name: eu, context: c}\n".into(),
                "rollguard.yaml: missing required key \"manifests\"",
            ),
            (
                "app: shop\nmanifests: [k8s]\n".into(),
                "rollguard.yaml: missing required key \"targets\"",
            ),
            (
                "app: shop\nmanifests: [k8s]\ntargets: []\n".into(),
                "rollguard.yaml:3: targets must list at least one target",
            ),
            ("".into(), "rollguard.yaml: the file is empty"),
            (
                "- a\n- b\n".into(),
                "rollguard.yaml:1: the top level must be a mapping, not a list",
            ),
            ("app: shop\n  bad: [\n".into(), "rollguard.yaml:"),
            (
                format!("{base}stages:\n  - name: m\n    script: x\n    when: before\n"),
                "rollguard.yaml:6: `stages:` is gone: list the stages in order under `pipeline:`",
            ),
        ];
        for (text, want) in cases {
            let errs = errors(&text);
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "want {want:?}\ngot {errs:#?}\nfor:\n{text}"
            );
        }
    }

    #[test]
    fn all_errors_are_reported_at_once() {
        let errs = errors(
            "app: Bad\nmanifests: [k8s]\ntargets:\n  - name: eu\nwait:\n  timout: 1\nconcurency: 2\n",
        );
        assert_eq!(errs.len(), 4, "{errs:#?}");
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn precedence_flags_over_rollguard_env_over_input_env_over_file() {
        let file = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\nwait: {timeout: 1m}\non_failure: none\n";
        let src = Path::new("rollguard.yaml");
        type Case = (
            Overrides,
            &'static [(&'static str, &'static str)],
            u64,
            FailurePolicy,
        );
        let cases: Vec<Case> = vec![
            (Overrides::default(), &[], 60, FailurePolicy::None),
            (
                Overrides::default(),
                &[
                    ("INPUT_TIMEOUT", "2m"),
                    ("INPUT_ON_FAILURE", "rollback-failed"),
                ],
                120,
                FailurePolicy::RollbackFailed,
            ),
            (
                Overrides::default(),
                &[("INPUT_TIMEOUT", "2m"), ("ROLLGUARD_TIMEOUT", "3m")],
                180,
                FailurePolicy::None,
            ),
            (
                Overrides::default(),
                &[("INPUT_TIMEOUT", ""), ("INPUT_ON_FAILURE", "")],
                60,
                FailurePolicy::None,
            ),
            (
                Overrides {
                    timeout: Some(Duration::from_secs(240)),
                    on_failure: Some(FailurePolicy::RollbackAll),
                    ..Default::default()
                },
                &[
                    ("INPUT_TIMEOUT", "2m"),
                    ("ROLLGUARD_TIMEOUT", "3m"),
                    ("ROLLGUARD_ON_FAILURE", "none"),
                ],
                240,
                FailurePolicy::RollbackAll,
            ),
        ];
        for (flags, env, secs, policy) in cases {
            let c = parse(file, src, &flags, &env_of(env)).unwrap();
            assert_eq!(c.wait.timeout, Duration::from_secs(secs), "{env:?}");
            assert_eq!(c.on_failure, policy, "{env:?}");
        }
    }

    #[test]
    fn env_overrides_other_settings_and_errors() {
        let file = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\n";
        let env = env_of(&[
            ("INPUT_CONCURRENCY", "3"),
            ("ROLLGUARD_ON_CANCEL", "leave"),
            ("INPUT_LOCK_TIMEOUT", "10s"),
            ("INPUT_ROLLBACK_TIMEOUT", "1m"),
            ("INPUT_KUBECONFIG", "/tmp/kc"),
            ("INPUT_NAMESPACE", "web"),
        ]);
        let c = parse(
            file,
            Path::new("x/rollguard.yaml"),
            &Overrides::default(),
            &env,
        )
        .unwrap();
        assert_eq!(c.concurrency, 3);
        assert_eq!(c.on_cancel, CancelPolicy::Leave);
        assert_eq!(c.lock.timeout, Duration::from_secs(10));
        assert_eq!(c.rollback.timeout, Some(Duration::from_secs(60)));
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(c.namespace.as_deref(), Some("web"));
        assert_eq!(c.base_dir, PathBuf::from("x"));

        let with_kc = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, kubeconfig: kc/eu.yaml}, {name: us, kubeconfig: /abs/us.yaml}]\n";
        let c = parse(
            with_kc,
            Path::new("deploy/rollguard.yaml"),
            &Overrides::default(),
            &no_env,
        )
        .unwrap();
        assert_eq!(
            c.targets[0].kubeconfig,
            Some(PathBuf::from("deploy/kc/eu.yaml"))
        );
        assert_eq!(c.targets[1].kubeconfig, Some(PathBuf::from("/abs/us.yaml")));

        let bad = env_of(&[("INPUT_TIMEOUT", "soon"), ("ROLLGUARD_CONCURRENCY", "0")]);
        let err = parse(
            file,
            Path::new("rollguard.yaml"),
            &Overrides::default(),
            &bad,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("$INPUT_TIMEOUT: invalid duration \"soon\""),
            "{text}"
        );
        assert!(
            text.contains("$ROLLGUARD_CONCURRENCY: concurrency must be"),
            "{text}"
        );
    }

    #[test]
    fn context_selection() {
        let file = "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: sim-1}\n  - {name: us, context: sim-2}\n  - {name: ap, context: sim-3}\n";
        let src = Path::new("rollguard.yaml");
        let names = |flags: Overrides,
                     env: &'static [(&'static str, &'static str)]|
         -> Result<Vec<String>, String> {
            parse(file, src, &flags, &env_of(env))
                .map(|c| c.targets.into_iter().map(|t| t.name).collect())
                .map_err(|e| e.to_string())
        };
        let flags = |c: &[&str]| Overrides {
            contexts: c.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert_eq!(names(flags(&[]), &[]).unwrap(), vec!["eu", "us", "ap"]);
        assert_eq!(names(flags(&["us"]), &[]).unwrap(), vec!["us"]);
        assert_eq!(
            names(flags(&["sim-3", "eu"]), &[]).unwrap(),
            vec!["eu", "ap"]
        );
        assert_eq!(names(flags(&["eu,us"]), &[]).unwrap(), vec!["eu", "us"]);
        assert_eq!(
            names(flags(&[]), &[("INPUT_CONTEXTS", "ap\nus")]).unwrap(),
            vec!["us", "ap"]
        );
        assert_eq!(
            names(flags(&["eu"]), &[("INPUT_CONTEXTS", "ap")]).unwrap(),
            vec!["eu"]
        );
        let err = names(flags(&["ue"]), &[]).unwrap_err();
        assert!(
            err.starts_with("--context: no target is named \"ue\""),
            "{err}"
        );
        assert!(err.contains("did you mean \"us\"?"), "{err}");
    }

    #[test]
    fn config_path_precedence() {
        assert_eq!(config_path(None, &no_env), PathBuf::from("rollguard.yaml"));
        assert_eq!(
            config_path(None, &env_of(&[("INPUT_CONFIG", "deploy/rg.yaml")])),
            PathBuf::from("deploy/rg.yaml")
        );
        assert_eq!(
            config_path(
                Some(Path::new("a.yaml")),
                &env_of(&[("INPUT_CONFIG", "b.yaml")])
            ),
            PathBuf::from("a.yaml")
        );
    }

    #[test]
    fn load_reads_file_and_reports_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollguard.yaml");
        std::fs::write(&path, MINIMAL).unwrap();
        let c = load(&path, &Overrides::default(), &no_env).unwrap();
        assert_eq!(c.base_dir, dir.path());
        let err = load(
            &dir.path().join("nope.yaml"),
            &Overrides::default(),
            &no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("cannot read config file"), "{err}");
    }

    #[test]
    fn nearest_table() {
        let keys = TOP_KEYS;
        let cases = [
            ("timout", Some("timeout"), &["timeout"][..]),
            ("targets", Some("targets"), keys),
            ("targts", Some("targets"), keys),
            ("Namespace", Some("namespace"), keys),
            ("onfailure", Some("on_failure"), keys),
            ("xyz", None, keys),
            ("histroy", Some("history"), keys),
        ];
        for (word, want, candidates) in cases {
            assert_eq!(nearest(word, candidates), want, "{word}");
        }
    }

    /// Every key the parser accepts is in the schema, and nothing else.
    #[test]
    fn schema_matches_parser_keys() {
        let schema = json_schema();
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            k.sort();
            k
        };
        let sorted = |k: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = k.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        };
        let p = &schema["properties"];
        assert_eq!(keys(&schema), sorted(TOP_KEYS));
        assert_eq!(keys(&p["targets"]["items"]), sorted(TARGET_KEYS));
        assert_eq!(keys(&p["wait"]), sorted(WAIT_KEYS));
        assert_eq!(
            keys(&p["wait"]["properties"]["fail_fast"]),
            sorted(FAIL_FAST_KEYS)
        );
        assert_eq!(keys(&p["history"]), sorted(HISTORY_KEYS));
        assert_eq!(keys(&p["rollback"]), sorted(ROLLBACK_KEYS));
        assert_eq!(keys(&p["lock"]), sorted(LOCK_KEYS));
        assert_eq!(
            keys(&p["pipeline"]["items"]["oneOf"][1]["properties"]["script"]),
            sorted(pipeline::SCRIPT_KEYS)
        );
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let policies: Vec<&str> = FailurePolicy::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            parse_failure_policy("rollback_failed"),
            Some(FailurePolicy::RollbackFailed)
        );
        assert_eq!(parse_failure_policy("sometimes"), None);
        assert_eq!(p["on_failure"]["enum"], json!(policies));
    }

    /// docs/config-schema.json is `json_schema()`; regenerate with UPDATE_SCHEMAS=1.
    #[test]
    fn docs_schema_is_current() {
        crate::util::generated_docs::assert_current("config-schema.json", &json_schema());
    }
}
