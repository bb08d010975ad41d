//! rollguard.yaml -> `Config`: the file is walked by hand over a line-aware YAML tree (not
//! derived serde) so that every error names file and line, unknown keys suggest the nearest
//! known key, and all problems are reported at once. The accepted keys are the `*_KEYS` lists
//! below; the JSON Schema is checked against them by a test.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::model::*;
use super::names::{dns_label_problem, nearest, target_name_problem};
use super::overrides::{Overrides, apply_overrides, env_setting};
use super::pipeline::{
    DEFAULT_KILL_GRACE, DEFAULT_SCRIPT_TIMEOUT, PipelineStage, RESERVED_NAMES, SCRIPT_KEYS, Scope,
    ScriptCommand, ScriptStage, default_pipeline, script_stages,
};
use crate::util::bounded as capped;
use crate::util::duration::{bounded, parse_duration};
use crate::util::yaml::{self, Node, Tree};

pub(super) const TOP_KEYS: &[&str] = &[
    "app",
    "namespace",
    "manifests",
    "render",
    "targets",
    "wait",
    "concurrency",
    "memory_budget",
    "waves",
    "history",
    "on_failure",
    "on_cancel",
    "render_hooks",
    "rollback",
    "rollback_order",
    "lock",
    "pipeline",
    "github",
    "preflight",
    "checks",
    "prune",
];
/// Keys that were accepted once and are now refused with a pointer to their replacement.
const RETIRED_TOP_KEYS: &[&str] = &["stages"];
pub(super) const TARGET_KEYS: &[&str] = &[
    "name",
    "context",
    "kubeconfig",
    "kubeconfig_env",
    "namespace",
    "environment",
    "wave",
    "vars",
];
pub(super) const WAIT_KEYS: &[&str] = &["timeout", "fail_fast", "bake", "log_lines"];
pub(super) const WAVE_KEYS: &[&str] = &["wave", "bake", "max_parallel", "checks"];
pub(super) const FAIL_FAST_KEYS: &[&str] = &[
    "reasons",
    "pull_grace",
    "crash_loop_restarts",
    "unschedulable",
    "unschedulable_grace",
];
/// Fail-fast keys refused with a pointer to their replacement (see `fail_fast`).
const RETIRED_FAIL_FAST_KEYS: &[&str] = &["err_image_pull_grace"];
pub(super) const HISTORY_KEYS: &[&str] = &["namespace", "keep", "secrets"];
pub(super) const ROLLBACK_KEYS: &[&str] = &["timeout"];
pub(super) const LOCK_KEYS: &[&str] = &["timeout"];
pub(super) const GITHUB_KEYS: &[&str] = &["deployments", "timeout"];

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
    let text = match capped::read_file(path, capped::MAX_CONFIG_FILE, "the config file") {
        Ok(text) => text,
        Err(capped::ReadError::Io(source)) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
        Err(e) => {
            let location = match e.line() {
                0 => path.display().to_string(),
                line => format!("{}:{line}", path.display()),
            };
            return Err(ConfigError::Invalid(vec![ConfigIssue {
                location,
                message: e.to_string(),
            }]));
        }
    };
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
        env_issues: Vec::new(),
    };
    let root = match yaml::parse_single(text) {
        Ok(root) => root,
        Err(e) => {
            ctx.at(e.line, format!("not valid YAML: {}", e.message));
            return Err(ConfigError::Invalid(ctx.issues));
        }
    };
    let mut config = ctx.config(&root, base_dir, source.to_path_buf(), env);
    config.check_env_issues = std::mem::take(&mut ctx.env_issues);
    apply_overrides(&mut ctx.issues, &mut config, overrides, env);
    if ctx.issues.is_empty() {
        Ok(config)
    } else {
        let file = ctx.file.clone();
        capped::cap_issues(&mut ctx.issues, |more| ConfigIssue {
            location: file,
            message: format!(
                "... and {more} more problems (only the first {} are shown)",
                capped::MAX_ISSUES_PER_FILE
            ),
        });
        Err(ConfigError::Invalid(ctx.issues))
    }
}

/// The config before the file is read: every default, and no app, manifests or targets.
fn defaults(base_dir: PathBuf, source: PathBuf, env: &dyn Fn(&str) -> Option<String>) -> Config {
    Config {
        app: String::new(),
        namespace: None,
        manifests: ManifestSource::Paths(Vec::new()),
        targets: Vec::new(),
        wait: WaitConfig::default(),
        concurrency: 64,
        concurrency_set_by: None,
        memory_budget: crate::util::size::DEFAULT_MEMORY_BUDGET,
        waves: Vec::new(),
        first_wave: 0,
        earlier_waves: Vec::new(),
        checks: Vec::new(),
        check_env_issues: Vec::new(),
        history: HistoryConfig::default(),
        on_failure: FailurePolicy::default(),
        on_cancel: CancelPolicy::default(),
        render_hooks: RenderHooks::default(),
        rollback: RollbackConfig::default(),
        rollback_order: RollbackOrder::default(),
        lock: LockConfig::default(),
        github: GithubConfig::default(),
        pipeline: default_pipeline(),
        base_dir,
        source,
        kubeconfig: None,
        preflight: true,
        prune: false,
        // A bad value was refused when the command started (commands/mod.rs), before any
        // config is read.
        git_timeout: crate::util::git::timeout_from_env(env)
            .unwrap_or(crate::util::git::DEFAULT_TIMEOUT),
    }
}

/// A target's kubeconfig file is relative to the config file, like the manifests.
fn relative_kubeconfigs(config: &mut Config) {
    for t in &mut config.targets {
        if let Some(k) = &t.kubeconfig
            && k.is_relative()
            && config.base_dir != Path::new(".")
        {
            t.kubeconfig = Some(config.base_dir.join(k));
        }
    }
}

/// Collects issues while walking the tree.
pub(super) struct Ctx {
    file: String,
    issues: Vec<ConfigIssue>,
    /// Unset variables of the checks (`url_env`, `token_env`, ...): see
    /// [`Config::check_env_issues`].
    env_issues: Vec<ConfigIssue>,
}

impl Ctx {
    /// The items of an optional list key: none when the key is absent or null; when it is
    /// not a list, none and the issue "`{what}`, not a map" (`what` says what it must be).
    pub(super) fn optional_list<'n>(&mut self, node: Option<&'n Node>, what: &str) -> &'n [Node] {
        let Some(node) = node else {
            return &[];
        };
        match &node.value {
            Tree::Seq(items) => items,
            Tree::Null => &[],
            other => {
                self.at(node.line, format!("{what}, not {}", other.kind_name()));
                &[]
            }
        }
    }

    pub(super) fn at(&mut self, line: usize, message: impl Into<String>) {
        let issue = self.issue(line, message);
        self.issues.push(issue);
    }

    /// An issue at `line` of the file, not recorded.
    pub(super) fn issue(&self, line: usize, message: impl Into<String>) -> ConfigIssue {
        let location = if line > 0 {
            format!("{}:{line}", self.file)
        } else {
            self.file.clone()
        };
        ConfigIssue {
            location,
            message: message.into(),
        }
    }

    /// A check's variable that is not set: bad input for the commands that run checks only.
    pub(super) fn env_at(&mut self, line: usize, message: impl Into<String>) {
        let issue = self.issue(line, message);
        self.env_issues.push(issue);
    }

    /// Reports keys not in `allowed`, suggesting the nearest one. Returns the entries.
    pub(super) fn mapping<'a>(
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
    pub(super) fn text(&mut self, node: Option<&Node>, what: &str) -> Option<(String, usize)> {
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

    pub(super) fn duration(&mut self, node: Option<&Node>, what: &str) -> Option<Duration> {
        let node = node?;
        let parsed = match &node.value {
            Tree::Null => return None,
            Tree::Int(i) if *i >= 0 => {
                bounded(Duration::from_secs(i.unsigned_abs()), &i.to_string())
                    .map_err(|e| e.to_string())
            }
            Tree::UInt(u) => {
                bounded(Duration::from_secs(*u), &u.to_string()).map_err(|e| e.to_string())
            }
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

    pub(super) fn integer(&mut self, node: Option<&Node>, what: &str, min: i64) -> Option<i64> {
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

    pub(super) fn parsed<T: FromStr<Err: std::fmt::Display>>(
        &mut self,
        node: Option<&Node>,
        what: &str,
    ) -> Option<T> {
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

    pub(super) fn strings(
        &mut self,
        node: Option<&Node>,
        what: &str,
    ) -> Option<Vec<(String, usize)>> {
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

    pub(super) fn command(&mut self, node: Option<&Node>, what: &str) -> Option<ScriptCommand> {
        let node = node?;
        match &node.value {
            Tree::Null => None,
            Tree::Seq(items) => {
                let texts: Vec<(String, usize)> = items
                    .iter()
                    .filter_map(|i| self.text(Some(i), what))
                    .collect();
                let count = texts.len();
                let argv: Vec<String> = texts
                    .into_iter()
                    .filter(|(t, line)| self.passable(*line, what, t))
                    .map(|(t, _)| t)
                    .collect();
                if argv.len() < count {
                    return None;
                }
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
                self.passable(line, what, &text)
                    .then_some(ScriptCommand::Shell(text))
            }
        }
    }

    /// Whether `text` can reach a child process as an argument or environment value: the
    /// OS cannot pass a NUL byte, so such a script would only fail when it starts, after
    /// the deploy's first writes. Says so at `line` when it cannot.
    fn passable(&mut self, line: usize, what: &str, text: &str) -> bool {
        if !text.contains('\0') {
            return true;
        }
        self.at(
            line,
            format!(
                "{what} contains a NUL byte (\\0), which no program can receive as an argument or environment value; remove it"
            ),
        );
        false
    }

    fn config(
        &mut self,
        root: &Node,
        base_dir: PathBuf,
        source: PathBuf,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Config {
        let mut config = defaults(base_dir, source, env);
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
        if let Some(manifests) = self.manifests(root) {
            config.manifests = manifests;
        }
        config.targets = self.targets(get("targets"));
        relative_kubeconfigs(&mut config);
        self.wait_and_capacity(root, &mut config);
        self.checks_and_waves(root, &mut config, env);
        self.policies(root, &mut config);
        // The key's own line: its value (a list) starts on the next one.
        if let Tree::Map(entries) = &root.value
            && let Some((key, _)) = entries.iter().find(|(k, _)| k.key_text() == "stages")
        {
            self.old_stages_key(key);
        }
        config.pipeline = self.pipeline(get("pipeline"), &config.base_dir);
        config
    }

    /// `manifests:` (files, folders, globs) or `render:` (a command), exactly one of them.
    /// None: neither is usable (an issue says why).
    fn manifests(&mut self, root: &Node) -> Option<ManifestSource> {
        let get = |key: &str| root.get(key);
        let paths = self.strings(get("manifests"), "manifests entry");
        let render = self.text(get("render"), "render");
        match (paths, render) {
            (Some(_), Some((_, line))) => {
                self.at(
                    line,
                    "use either `manifests` (files, folders, globs) or `render` (a command), not both",
                );
                None
            }
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
                Some(ManifestSource::Paths(
                    paths.into_iter().map(|(p, _)| p).collect(),
                ))
            }
            (None, Some((command, line))) => {
                if command.trim().is_empty() {
                    self.at(line, "render must not be empty");
                }
                Some(ManifestSource::Render { command })
            }
            (None, None) => {
                self.at(
                    0,
                    "missing required key \"manifests\" (e.g. `manifests: [k8s/]`) or \"render\" (e.g. `render: kustomize build k8s`)",
                );
                None
            }
        }
    }

    /// `wait:`, `concurrency` and `memory_budget`.
    fn wait_and_capacity(&mut self, root: &Node, config: &mut Config) {
        let get = |key: &str| root.get(key);
        if let Some(wait) = get("wait")
            && self.mapping(wait, "wait", WAIT_KEYS).is_some()
        {
            if let Some(t) = self.duration(wait.get("timeout"), "wait.timeout") {
                config.wait.timeout = t;
            }
            if let Some(ff) = wait.get("fail_fast") {
                config.wait.fail_fast = self.fail_fast(ff);
            }
            if let Some(b) = self.duration(wait.get("bake"), "wait.bake") {
                config.wait.bake = b;
            }
            if let Some(n) = self.integer(wait.get("log_lines"), "wait.log_lines", 0) {
                config.wait.log_lines = u32::try_from(n).unwrap_or(u32::MAX);
            }
        }
        if let Some(c) = self.integer(get("concurrency"), "concurrency", 1) {
            config.concurrency = usize::try_from(c).unwrap_or(usize::MAX);
            let line = get("concurrency").map_or(0, |n| n.line);
            config.concurrency_set_by = Some(self.issue(line, "").location);
        }
        if let Some(node) = get("memory_budget") {
            match &node.value {
                Tree::Str(s) => match crate::util::size::parse_size(s) {
                    Ok(bytes) => config.memory_budget = bytes,
                    Err(e) => self.at(node.line, format!("memory_budget: {e}")),
                },
                Tree::Null => {}
                other => self.at(
                    node.line,
                    format!(
                        "memory_budget must be a size like \"512MiB\" or \"1GiB\", not {}",
                        other.kind_name()
                    ),
                ),
            }
        }
    }

    /// `checks:` and `waves:` (with their checks), and the templates of every check against
    /// the targets it runs on.
    fn checks_and_waves(
        &mut self,
        root: &Node,
        config: &mut Config,
        env: &dyn Fn(&str) -> Option<String>,
    ) {
        let get = |key: &str| root.get(key);
        config.checks = self.checks(get("checks"), "checks", &[], env);
        config.waves = self.waves(get("waves"), &config.targets, &config.checks, env);
        let all: Vec<&TargetConfig> = config.targets.iter().collect();
        self.check_templates(&config.checks, &all);
        for wave in &config.waves {
            let targets: Vec<&TargetConfig> = config
                .targets
                .iter()
                .filter(|t| t.wave == wave.wave)
                .collect();
            self.check_templates(&wave.checks, &targets);
        }
        config.first_wave = config.targets.iter().map(|t| t.wave).min().unwrap_or(0);
    }

    /// `history`, the policies (`on_failure`, `on_cancel`, `render_hooks`, `rollback_order`),
    /// `preflight`, `prune`, `rollback`, `lock` and `github`.
    fn policies(&mut self, root: &Node, config: &mut Config) {
        let get = |key: &str| root.get(key);
        if let Some(history) = get("history")
            && self.mapping(history, "history", HISTORY_KEYS).is_some()
        {
            config.history.namespace =
                self.dns_label(history.get("namespace"), "history.namespace");
            if let Some(keep) = self.integer(history.get("keep"), "history.keep", 1) {
                config.history.keep = usize::try_from(keep).unwrap_or(usize::MAX);
            }
            if let Some(p) = self.parsed(history.get("secrets"), "history.secrets") {
                config.history.secrets = p;
            }
        }
        if let Some(p) = self.parsed(get("on_failure"), "on_failure") {
            config.on_failure = p;
        }
        if let Some(p) = self.boolean(get("preflight"), "preflight") {
            config.preflight = p;
        }
        if let Some(p) = self.boolean(get("prune"), "prune") {
            config.prune = p;
        }
        if let Some(p) = self.parsed(get("on_cancel"), "on_cancel") {
            config.on_cancel = p;
        }
        if let Some(h) = self.parsed(get("render_hooks"), "render_hooks") {
            config.render_hooks = h;
        }
        if let Some(rb) = get("rollback")
            && self.mapping(rb, "rollback", ROLLBACK_KEYS).is_some()
        {
            config.rollback.timeout = self.duration(rb.get("timeout"), "rollback.timeout");
        }
        if let Some(o) = self.parsed(get("rollback_order"), "rollback_order") {
            config.rollback_order = o;
        }
        if let Some(lock) = get("lock")
            && self.mapping(lock, "lock", LOCK_KEYS).is_some()
            && let Some(t) = self.duration(lock.get("timeout"), "lock.timeout")
        {
            config.lock.timeout = t;
        }
        if let Some(github) = get("github")
            && self.mapping(github, "github", GITHUB_KEYS).is_some()
        {
            if let Some(on) = self.boolean(github.get("deployments"), "github.deployments") {
                config.github.deployments = on;
            }
            if let Some(t) = self.positive_duration(github.get("timeout"), "github.timeout") {
                config.github.timeout = t;
            }
        }
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
            if let Some(target) = self.target(item, index, &mut seen) {
                targets.push(target);
            }
        }
        targets
    }

    /// One entry of `targets:`; None when it is not a mapping. `seen`: the names so far
    /// and their lines (names must be unique).
    fn target(
        &mut self,
        item: &Node,
        index: usize,
        seen: &mut BTreeMap<String, usize>,
    ) -> Option<TargetConfig> {
        let what = format!("targets[{index}]");
        if self.mapping(item, &what, TARGET_KEYS).is_none() {
            if matches!(item.value, Tree::Null) {
                self.at(item.line, format!("{what} is empty"));
            }
            return None;
        }
        let name = self.target_name(item, &what, seen);
        let label = if name.is_empty() {
            what.clone()
        } else {
            format!("target {name:?}")
        };
        let (context, kubeconfig, kubeconfig_env) = self.target_access(item, &label);
        let namespace = self.dns_label(item.get("namespace"), "target namespace");
        let environment =
            self.text(item.get("environment"), "environment")
                .and_then(|(env, line)| {
                    if env.trim().is_empty()
                        || env.len() > 255
                        || env.chars().any(char::is_control)
                    {
                        self.at(
                            line,
                            format!("{label}: environment must be a GitHub environment name (1 to 255 characters, one line)"),
                        );
                        None
                    } else {
                        Some(env)
                    }
                });
        let wave = self
            .wave_number(item.get("wave"), &format!("{label} wave"))
            .unwrap_or(0);
        let vars = self.vars(item.get("vars"), &label);
        Some(TargetConfig {
            name,
            vars,
            context,
            kubeconfig,
            kubeconfig_env,
            namespace,
            environment,
            wave,
            line: item.line,
        })
    }

    /// A target's `name`: valid, and unique (`seen`); empty when missing (an issue says so).
    fn target_name(
        &mut self,
        item: &Node,
        what: &str,
        seen: &mut BTreeMap<String, usize>,
    ) -> String {
        match self.text(item.get("name"), "target name") {
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
        }
    }

    /// A target's `context`, `kubeconfig` and `kubeconfig_env`: at least one, not both files.
    fn target_access(
        &mut self,
        item: &Node,
        label: &str,
    ) -> (Option<String>, Option<PathBuf>, Option<String>) {
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
        (context, kubeconfig, kubeconfig_env)
    }

    /// A wave number: an integer from 0 to 4294967295.
    fn wave_number(&mut self, node: Option<&Node>, what: &str) -> Option<u32> {
        let line = node.map_or(0, |n| n.line);
        let n = self.integer(node, what, 0)?;
        match u32::try_from(n) {
            Ok(wave) => Some(wave),
            Err(_) => {
                self.at(
                    line,
                    format!("{what} must be at most {}, not {n}", u32::MAX),
                );
                None
            }
        }
    }

    /// `waves:`, a list of `{wave: N, bake: DUR, max_parallel: N}`: each entry for a wave
    /// some target is in (an entry for no target is a typo that would quietly do nothing),
    /// each wave once.
    fn waves(
        &mut self,
        node: Option<&Node>,
        targets: &[TargetConfig],
        top_checks: &[CheckConfig],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<WaveConfig> {
        let items = self.optional_list(
            node,
            "waves must be a list of wave settings, e.g. `- {wave: 0, bake: 10m}`",
        );
        let used = wave_numbers(targets);
        let mut waves: Vec<WaveConfig> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("waves[{index}]");
            if self.mapping(item, &what, WAVE_KEYS).is_none() {
                if matches!(item.value, Tree::Null) {
                    self.at(item.line, format!("{what} is empty"));
                }
                continue;
            }
            let number_line = item.get("wave").map_or(item.line, |n| n.line);
            let Some(wave) = self.wave_number(item.get("wave"), &format!("{what}.wave")) else {
                if item.get("wave").is_none() {
                    self.at(
                        item.line,
                        format!("{what} needs `wave` (the number its targets set in `wave:`)"),
                    );
                }
                continue;
            };
            let label = format!("wave {wave}");
            let bake = self.duration(item.get("bake"), &format!("{label} bake"));
            let max_parallel = self
                .integer(
                    item.get("max_parallel"),
                    &format!("{label} max_parallel"),
                    1,
                )
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
            let checks = self.checks(
                item.get("checks"),
                &format!("{label} checks"),
                top_checks,
                env,
            );
            if let Some(first) = waves.iter().find(|w| w.wave == wave) {
                self.at(
                    number_line,
                    format!(
                        "duplicate entry for wave {wave} in waves (first at line {}); set each wave once",
                        first.line
                    ),
                );
                continue;
            }
            if !targets.is_empty() && !used.contains(&wave) {
                self.at(
                    number_line,
                    format!(
                        "waves: no target is in wave {wave} (the targets are in {}); set `wave: {wave}` on a target or remove this entry",
                        waves_text(&used)
                    ),
                );
            }
            waves.push(WaveConfig {
                wave,
                bake,
                max_parallel,
                checks,
                line: item.line,
            });
        }
        waves
    }

    fn fail_fast(&mut self, node: &Node) -> FailFastConfig {
        let mut ff = FailFastConfig::default();
        let keys: Vec<&str> = FAIL_FAST_KEYS
            .iter()
            .chain(RETIRED_FAIL_FAST_KEYS)
            .copied()
            .collect();
        if self.mapping(node, "wait.fail_fast", &keys).is_none() {
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
        if let Some(old) = node.get("err_image_pull_grace") {
            // It covered ErrImagePull only; `pull_grace` means more, so the old key is not
            // quietly read as the new one.
            self.at(
                old.line,
                "`wait.fail_fast.err_image_pull_grace` is gone: use `pull_grace` (default 60s), \
                 which tolerates pull errors that may pass (timeouts, 5xx, 429) across \
                 ErrImagePull and ImagePullBackOff from a container's first pull error; \
                 errors saying the image does not exist or access is denied fail at once",
            );
        }
        if let Some(d) = self.duration(node.get("pull_grace"), "wait.fail_fast.pull_grace") {
            ff.pull_grace = d;
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

// The `pipeline:` walk (the model and its schema are in pipeline.rs).
impl Ctx {
    /// The old `stages:` key (never ran anything): refused, pointing at `pipeline:`.
    pub(super) fn old_stages_key(&mut self, node: &Node) {
        self.at(
            node.line,
            "`stages:` is gone: list the stages in order under `pipeline:` instead, e.g. \
             `pipeline: [{script: {name: migrate, run: ./migrate.sh}}, apply, {script: {name: smoke, run: ./smoke.sh}}]` \
             (`when: before|after` becomes the position relative to `apply`)",
        );
    }

    pub(super) fn pipeline(&mut self, node: Option<&Node>, base_dir: &Path) -> Vec<PipelineStage> {
        let Some(node) = node else {
            return default_pipeline();
        };
        let items = match &node.value {
            Tree::Seq(items) if !items.is_empty() => items,
            Tree::Seq(_) | Tree::Null => {
                self.at(
                    node.line,
                    "pipeline must list its stages, at least `- apply`",
                );
                return default_pipeline();
            }
            other => {
                self.at(
                    node.line,
                    format!(
                        "pipeline must be a list of stages (`- apply`, `- script: {{...}}`), not {}",
                        other.kind_name()
                    ),
                );
                return default_pipeline();
            }
        };
        let mut stages = Vec::new();
        let mut apply_lines = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("pipeline[{index}]");
            match &item.value {
                Tree::Str(s) if s == "apply" => {
                    apply_lines.push(item.line);
                    stages.push(PipelineStage::Apply);
                }
                Tree::Map(entries) if entries.len() == 1 && entries[0].0.key_text() == "script" => {
                    if let Some(stage) =
                        self.script_stage(&entries[0].1, &what, base_dir, &mut seen)
                    {
                        stages.push(PipelineStage::Script(stage));
                    }
                }
                Tree::Map(entries) if entries.len() == 1 && entries[0].0.key_text() == "apply" => {
                    self.at(
                        item.line,
                        format!("{what}: `apply` takes no settings: write `- apply`"),
                    );
                }
                _ => {
                    let mut msg =
                        format!("{what} must be `apply` or `script: {{name: ..., run: ...}}`");
                    let word = match &item.value {
                        Tree::Str(s) => Some(s.clone()),
                        Tree::Map(entries) => entries.first().map(|(k, _)| k.key_text()),
                        _ => None,
                    };
                    if let Some(word) = word
                        && let Some(near) = nearest(&word, &["apply", "script"])
                    {
                        msg.push_str(&format!("; did you mean {near:?}?"));
                    }
                    self.at(item.line, msg);
                }
            }
        }
        match apply_lines.as_slice() {
            [] => self.at(
                node.line,
                "pipeline has no `apply` stage: list `- apply` exactly once (where the manifests are applied and waited for)",
            ),
            [_] => {}
            [first, rest @ ..] => {
                for line in rest {
                    self.at(
                        *line,
                        format!("`apply` may appear only once in pipeline (first at line {first})"),
                    );
                }
            }
        }
        stages
    }

    fn script_stage(
        &mut self,
        node: &Node,
        what: &str,
        base_dir: &Path,
        seen: &mut BTreeMap<String, usize>,
    ) -> Option<ScriptStage> {
        let section = format!("{what}.script");
        self.mapping(node, &section, SCRIPT_KEYS)?;
        let name = self.stage_name(node, &section, seen);
        let label = if name.is_empty() {
            section.clone()
        } else {
            format!("stage {name:?}")
        };
        let run = self.command(node.get("run"), &format!("{label} run"));
        if run.is_none() && node.get("run").is_none() {
            self.at(
                node.line,
                format!(
                    "{label} needs `run` (a shell command, or an argv list run without a shell)"
                ),
            );
        }
        let rollback = self.command(node.get("rollback"), &format!("{label} rollback"));
        let timeout = self
            .positive_duration(node.get("timeout"), &format!("{label} timeout"))
            .unwrap_or(DEFAULT_SCRIPT_TIMEOUT);
        let kill_grace = self
            .positive_duration(node.get("kill_grace"), &format!("{label} kill_grace"))
            .unwrap_or(DEFAULT_KILL_GRACE);
        let env = self.stage_env(node.get("env"), &label);
        let pass_env = self.pass_env(node.get("pass_env"), &label);
        let working_dir = self.working_dir(node, &label, base_dir);
        let shell = self.shell(node, &label);
        let continue_on_error = self
            .boolean(
                node.get("continue_on_error"),
                &format!("{label} continue_on_error"),
            )
            .unwrap_or(false);
        let dry_run = self
            .boolean(node.get("dry_run"), &format!("{label} dry_run"))
            .unwrap_or(false);
        let always = self
            .boolean(node.get("always"), &format!("{label} always"))
            .unwrap_or(false);
        let scope = self.scope(node, &label);
        Some(ScriptStage {
            name,
            run: run?,
            rollback,
            timeout,
            env,
            pass_env,
            working_dir,
            shell,
            continue_on_error,
            scope,
            kill_grace,
            dry_run,
            always,
            line: node.line,
        })
    }

    /// A script stage's `name`: valid, not reserved, unique (`seen`); empty when missing.
    fn stage_name(
        &mut self,
        node: &Node,
        section: &str,
        seen: &mut BTreeMap<String, usize>,
    ) -> String {
        match self.text(node.get("name"), "stage name") {
            Some((name, line)) => {
                if name.trim().is_empty() {
                    self.at(line, "stage name must not be empty");
                } else if RESERVED_NAMES.contains(&name.as_str()) {
                    self.at(
                        line,
                        format!(
                            "stage name {name:?} is reserved (it names a built-in phase: {}); pick another",
                            RESERVED_NAMES.join(", ")
                        ),
                    );
                } else if !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                {
                    self.at(
                        line,
                        format!(
                            "stage name {name:?} may only contain letters, digits, '-', '_' and '.'"
                        ),
                    );
                } else if let Some(first) = seen.get(&name) {
                    self.at(
                        line,
                        format!("duplicate stage name {name:?} (first at line {first})"),
                    );
                } else {
                    seen.insert(name.clone(), line);
                }
                name
            }
            None => {
                self.at(
                    node.line,
                    format!("{section} needs a `name` (used in logs and reports)"),
                );
                String::new()
            }
        }
    }

    /// `working_dir`, relative to the config file's folder (default: that folder).
    fn working_dir(&mut self, node: &Node, label: &str, base_dir: &Path) -> PathBuf {
        match self.text(node.get("working_dir"), &format!("{label} working_dir")) {
            Some((dir, line)) if dir.trim().is_empty() => {
                self.at(line, format!("{label} working_dir must not be empty"));
                base_dir.to_path_buf()
            }
            Some((dir, _)) => {
                let dir = PathBuf::from(dir);
                if dir.is_absolute() {
                    dir
                } else {
                    base_dir.join(dir)
                }
            }
            None => base_dir.to_path_buf(),
        }
    }

    /// `shell`: a string split on spaces ("bash -eu -c") or a list (default `sh -c`).
    fn shell(&mut self, node: &Node, label: &str) -> Vec<String> {
        match self.strings(node.get("shell"), &format!("{label} shell")) {
            None => vec!["sh".to_string(), "-c".to_string()],
            Some(parts) => {
                // A string is split on spaces ("bash -eu -c"); a list is taken as it is.
                let single = matches!(node.get("shell").map(|n| &n.value), Some(Tree::Str(_)));
                let what = format!("{label} shell");
                let parts: Vec<(String, usize)> = parts
                    .into_iter()
                    .filter(|(p, line)| self.passable(*line, &what, p))
                    .collect();
                let words: Vec<String> = if single {
                    parts
                        .iter()
                        .flat_map(|(p, _)| p.split_whitespace().map(str::to_string))
                        .collect()
                } else {
                    parts.into_iter().map(|(p, _)| p).collect()
                };
                if words.is_empty() || words[0].trim().is_empty() {
                    self.at(
                        node.get("shell").map_or(node.line, |n| n.line),
                        format!("{label} shell must name a program, e.g. `bash -c`"),
                    );
                }
                words
            }
        }
    }

    /// `scope`: target (default), fleet or wave.
    fn scope(&mut self, node: &Node, label: &str) -> Scope {
        match self.text(node.get("scope"), &format!("{label} scope")) {
            None => Scope::Target,
            Some((s, line)) => match s.as_str() {
                "target" => Scope::Target,
                "fleet" => Scope::Fleet,
                "wave" => Scope::Wave,
                other => {
                    let mut msg = format!(
                        "{label} scope must be \"target\" (once per target), \"fleet\" (once for the whole deploy) or \"wave\" (once per wave), not {other:?}"
                    );
                    if let Some(near) = nearest(other, &Scope::ALL.map(Scope::as_str)) {
                        msg.push_str(&format!("; did you mean {near:?}?"));
                    }
                    self.at(line, msg);
                    Scope::Target
                }
            },
        }
    }

    pub(super) fn positive_duration(
        &mut self,
        node: Option<&Node>,
        what: &str,
    ) -> Option<Duration> {
        let line = node.map_or(0, |n| n.line);
        let d = self.duration(node, what)?;
        if d.is_zero() {
            self.at(line, format!("{what} must be more than 0s"));
            return None;
        }
        Some(d)
    }

    fn boolean(&mut self, node: Option<&Node>, what: &str) -> Option<bool> {
        let node = node?;
        match &node.value {
            Tree::Null => None,
            Tree::Bool(b) => Some(*b),
            other => {
                self.at(
                    node.line,
                    format!("{what} must be true or false, not {}", other.kind_name()),
                );
                None
            }
        }
    }

    /// `pass_env`: a list of variable names, each once.
    fn pass_env(&mut self, node: Option<&Node>, label: &str) -> Vec<String> {
        let what = format!("{label} pass_env");
        if let Some(node) = node
            && !matches!(node.value, Tree::Seq(_) | Tree::Null)
        {
            self.at(
                node.line,
                format!(
                    "{what} must be a list of variable names, e.g. [GITHUB_TOKEN], not {}",
                    node.value.kind_name()
                ),
            );
            return Vec::new();
        }
        let mut names: Vec<String> = Vec::new();
        for (name, line) in self.strings(node, &what).unwrap_or_default() {
            if name.is_empty()
                || name.starts_with(|c: char| c.is_ascii_digit())
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                self.at(
                    line,
                    format!("{what}: {name:?} is not a valid variable name (letters, digits, '_')"),
                );
            } else if names.contains(&name) {
                self.at(line, format!("{what}: {name:?} is listed twice"));
            } else {
                names.push(name);
            }
        }
        names
    }

    fn stage_env(&mut self, node: Option<&Node>, label: &str) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        let Some(node) = node else { return env };
        match &node.value {
            Tree::Map(entries) => {
                let mut keys = HashSet::new();
                for (k, v) in entries {
                    let key = k.key_text();
                    if key.is_empty()
                        || key.starts_with(|c: char| c.is_ascii_digit())
                        || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        self.at(
                            k.line,
                            format!("{label}: env name {key:?} is not a valid variable name (letters, digits, '_')"),
                        );
                    } else if !keys.insert(key.clone()) {
                        self.at(k.line, format!("{label}: env {key:?} is set twice"));
                    }
                    let what = format!("{label}: env {key}");
                    let value = match &v.value {
                        Tree::Null => String::new(),
                        Tree::Bool(b) => b.to_string(),
                        _ => self
                            .text(Some(v), &what)
                            .filter(|(t, line)| self.passable(*line, &what, t))
                            .map(|(t, _)| t)
                            .unwrap_or_default(),
                    };
                    env.insert(key, value);
                }
            }
            Tree::Null => {}
            other => self.at(
                node.line,
                format!("{label}: env must be a mapping, not {}", other.kind_name()),
            ),
        }
        env
    }
}

/// Script stages with a string command (`run` or `rollback`) whose `shell` program cannot
/// be found (on the `PATH` the script gets: its stage's `env`, else rollguard's, as the
/// process is started): checked with the config, before any cluster is touched, as a
/// missing `working_dir` is.
pub fn missing_shells(
    config: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Vec<ConfigIssue> {
    let file = config.source.display().to_string();
    script_stages(&config.pipeline)
        .filter(|s| {
            std::iter::once(&s.run)
                .chain(&s.rollback)
                .any(|c| matches!(c, ScriptCommand::Shell(_)))
        })
        .filter_map(|s| {
            let program = s.shell.first()?;
            let path = |k: &str| match s.env.get(k) {
                Some(v) => Some(v.clone()),
                None => env(k),
            };
            // A relative path with a '/' is the working_dir's, where the script starts.
            let resolved = if program.contains('/') && Path::new(program).is_relative() {
                s.working_dir.join(program).display().to_string()
            } else {
                program.clone()
            };
            if crate::util::process_group::find_command(&resolved, &path).is_some() {
                return None;
            }
            let where_ = if program.contains('/') {
                "is not an executable file".to_string()
            } else {
                format!(
                    "is not on PATH ({})",
                    path("PATH").unwrap_or_else(|| "not set".into())
                )
            };
            Some(ConfigIssue {
                location: format!("{file}:{}", s.line),
                message: format!(
                    "stage {:?}: shell program {program:?} {where_}; install it, name it by its full path, or pick another `shell`",
                    s.name
                ),
            })
        })
        .collect()
}

/// Script stages whose `working_dir` is not a folder: checked with the config, before any
/// cluster is touched (a stage that cannot start would fail a deploy half-way).
pub fn missing_working_dirs(config: &Config) -> Vec<ConfigIssue> {
    let file = config.source.display().to_string();
    script_stages(&config.pipeline)
        .filter(|s| !s.working_dir.is_dir())
        .map(|s| ConfigIssue {
            location: format!("{file}:{}", s.line),
            message: format!(
                "stage {:?}: working_dir {} is not a folder; create it or fix `working_dir` (relative paths are relative to this file)",
                s.name,
                s.working_dir.display()
            ),
        })
        .collect()
}
