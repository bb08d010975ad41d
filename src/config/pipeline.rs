//! `pipeline:` in rollguard.yaml: the ordered stages of one deploy, `apply` (exactly once)
//! and `script` stages (migrations, smoke tests) with their own rollback commands.
//!
//! The model lives here, with the rest of the config, because the engine, the stage runner
//! and the release records all read it; the runner itself is `crate::stages`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::ScriptCommand;
use super::parse::Ctx;
use crate::util::yaml::{Node, Tree};

/// Keys of a `script:` stage.
pub(super) const SCRIPT_KEYS: &[&str] = &[
    "name",
    "run",
    "rollback",
    "timeout",
    "env",
    "working_dir",
    "shell",
    "continue_on_error",
    "scope",
    "kill_grace",
    "dry_run",
];

/// A script's timeout when it names none.
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);
/// Between SIGTERM and SIGKILL of a script's process group, when the stage names none.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Names the report already uses for a target's phases; a stage may not take them.
const RESERVED_NAMES: &[&str] = &["apply", "connect", "discover", "lock", "wait", "rollback"];

/// One stage of the pipeline, in order.
// A config holds a handful of these, read everywhere by reference: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineStage {
    /// Server-side apply, then wait for the rollout.
    Apply,
    Script(ScriptStage),
}

/// Where a script stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Once per target, inside that target's pipeline.
    #[default]
    Target,
    /// Once for the whole deploy: every target reaches it first, then all go on.
    Fleet,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Target => "target",
            Scope::Fleet => "fleet",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A script stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptStage {
    pub name: String,
    pub run: ScriptCommand,
    /// Run when the target rolls back after this stage started.
    pub rollback: Option<ScriptCommand>,
    pub timeout: Duration,
    /// Overrides the variables rollguard sets.
    pub env: BTreeMap<String, String>,
    /// Absolute, or relative to the process's directory like `base_dir`.
    pub working_dir: PathBuf,
    /// The shell a string command runs with, e.g. `["sh", "-c"]`.
    pub shell: Vec<String>,
    pub continue_on_error: bool,
    pub scope: Scope,
    pub kill_grace: Duration,
    /// Run in `deploy --dry-run` too (with ROLLGUARD_DRY_RUN=true).
    pub dry_run: bool,
    /// Line in the config file, for messages.
    pub line: usize,
}

impl ScriptStage {
    /// The argv of `command` (a string goes through `shell`).
    pub fn argv(&self, command: &ScriptCommand) -> Vec<String> {
        match command {
            ScriptCommand::Argv(argv) => argv.clone(),
            ScriptCommand::Shell(text) => {
                let mut argv = self.shell.clone();
                argv.push(text.clone());
                argv
            }
        }
    }
}

/// The pipeline when `pipeline:` is not given.
pub fn default_pipeline() -> Vec<PipelineStage> {
    vec![PipelineStage::Apply]
}

/// The script stages of a pipeline, in order.
pub fn script_stages(pipeline: &[PipelineStage]) -> impl Iterator<Item = &ScriptStage> {
    pipeline.iter().filter_map(|s| match s {
        PipelineStage::Script(s) => Some(s),
        PipelineStage::Apply => None,
    })
}

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
                        && let Some(near) = super::nearest(&word, &["apply", "script"])
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
        let name = match self.text(node.get("name"), "stage name") {
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
        };
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
        let working_dir = match self.text(node.get("working_dir"), &format!("{label} working_dir"))
        {
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
        };
        let shell = match self.strings(node.get("shell"), &format!("{label} shell")) {
            None => vec!["sh".to_string(), "-c".to_string()],
            Some(parts) => {
                // A string is split on spaces ("bash -eu -c"); a list is taken as it is.
                let single = matches!(node.get("shell").map(|n| &n.value), Some(Tree::Str(_)));
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
        };
        let continue_on_error = self
            .boolean(
                node.get("continue_on_error"),
                &format!("{label} continue_on_error"),
            )
            .unwrap_or(false);
        let dry_run = self
            .boolean(node.get("dry_run"), &format!("{label} dry_run"))
            .unwrap_or(false);
        let scope = match self.text(node.get("scope"), &format!("{label} scope")) {
            None => Scope::Target,
            Some((s, line)) => match s.as_str() {
                "target" => Scope::Target,
                "fleet" => Scope::Fleet,
                other => {
                    let mut msg = format!(
                        "{label} scope must be \"target\" (once per target) or \"fleet\" (once for the whole deploy), not {other:?}"
                    );
                    if let Some(near) = super::nearest(other, &["target", "fleet"]) {
                        msg.push_str(&format!("; did you mean {near:?}?"));
                    }
                    self.at(line, msg);
                    Scope::Target
                }
            },
        };
        Some(ScriptStage {
            name,
            run: run?,
            rollback,
            timeout,
            env,
            working_dir,
            shell,
            continue_on_error,
            scope,
            kill_grace,
            dry_run,
            line: node.line,
        })
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

    pub(super) fn boolean(&mut self, node: Option<&Node>, what: &str) -> Option<bool> {
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
                    let value = match &v.value {
                        Tree::Null => String::new(),
                        Tree::Bool(b) => b.to_string(),
                        _ => self
                            .text(Some(v), &format!("{label}: env {key}"))
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

/// Script stages whose `working_dir` is not a folder: checked with the config, before any
/// cluster is touched (a stage that cannot start would fail a deploy half-way).
pub fn missing_working_dirs(config: &super::Config) -> Vec<super::ConfigIssue> {
    let file = config.source.display().to_string();
    script_stages(&config.pipeline)
        .filter(|s| !s.working_dir.is_dir())
        .map(|s| super::ConfigIssue {
            location: format!("{file}:{}", s.line),
            message: format!(
                "stage {:?}: working_dir {} is not a folder; create it or fix `working_dir` (relative paths are relative to this file)",
                s.name,
                s.working_dir.display()
            ),
        })
        .collect()
}

/// The `pipeline` part of `rollguard schema`.
pub(super) fn pipeline_schema(duration: &Value, command: &Value) -> Value {
    json!({
        "type": "array",
        "minItems": 1,
        "description": "the stages of a deploy, in order: `apply` exactly once, and script stages around it (default: [apply])",
        "items": {
            "oneOf": [
                {"const": "apply", "description": "server-side apply, then wait for the rollout"},
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["script"],
                    "properties": {
                        "script": {
                            "type": "object",
                            "additionalProperties": false,
                            "required": ["name", "run"],
                            "properties": {
                                "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$", "not": {"enum": RESERVED_NAMES}},
                                "run": command,
                                "rollback": command,
                                "timeout": {"description": "default 10m; past it the process group is killed and the stage fails", "allOf": [duration]},
                                "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}, "description": "overrides the ROLLGUARD_* variables"},
                                "working_dir": {"type": "string", "description": "default: the folder of rollguard.yaml"},
                                "shell": {
                                    "description": "the shell a string command runs with (default \"sh -c\")",
                                    "anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
                                },
                                "continue_on_error": {"type": "boolean", "default": false, "description": "a failure is a warning, not a failed target"},
                                "scope": {"enum": ["target", "fleet"], "default": "target", "description": "once per target, or once for the whole deploy"},
                                "kill_grace": {"description": "between SIGTERM and SIGKILL (default 5s)", "allOf": [duration]},
                                "dry_run": {"type": "boolean", "default": false, "description": "run in deploy --dry-run too"}
                            }
                        }
                    }
                }
            ]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, parse};

    const BASE: &str = "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: a}\n";

    fn parse_text(text: &str) -> Result<Vec<PipelineStage>, Vec<String>> {
        parse(
            text,
            Path::new("ci/rollguard.yaml"),
            &Overrides::default(),
            &|_| None,
        )
        .map(|c| c.pipeline)
        .map_err(|e| e.issues().iter().map(ToString::to_string).collect())
    }

    fn script(stage: &PipelineStage) -> &ScriptStage {
        match stage {
            PipelineStage::Script(s) => s,
            PipelineStage::Apply => panic!("script stage expected"),
        }
    }

    #[test]
    fn the_issue_example_and_defaults() {
        let text = format!(
            "{BASE}pipeline:
  - script: {{name: migrate, run: ./db/migrate up, rollback: ./db/migrate down, timeout: 2m, scope: fleet}}
  - apply
  - script: {{name: smoke, run: [./scripts/smoke.sh, --fast], timeout: 1m}}
"
        );
        let p = parse_text(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        assert_eq!(p.len(), 3);
        assert_eq!(p[1], PipelineStage::Apply);
        let m = script(&p[0]);
        assert_eq!(m.name, "migrate");
        assert_eq!(m.scope, Scope::Fleet);
        assert_eq!(m.timeout, Duration::from_secs(120));
        assert_eq!(
            m.rollback,
            Some(ScriptCommand::Shell("./db/migrate down".into()))
        );
        assert_eq!(m.argv(&m.run), vec!["sh", "-c", "./db/migrate up"]);
        assert_eq!(m.working_dir, PathBuf::from("ci"));
        assert_eq!(m.kill_grace, DEFAULT_KILL_GRACE);
        assert!(!m.continue_on_error && !m.dry_run);
        let s = script(&p[2]);
        assert_eq!(s.scope, Scope::Target);
        assert_eq!(s.argv(&s.run), vec!["./scripts/smoke.sh", "--fast"]);
        assert_eq!(s.rollback, None);
        // Without `pipeline:` there is only the apply stage.
        assert_eq!(parse_text(BASE).unwrap_or_default(), default_pipeline());
    }

    #[test]
    fn every_key() {
        let text = format!(
            "{BASE}pipeline:
  - apply
  - script:
      name: smoke
      run: ./smoke
      timeout: 30s
      env: {{URL: http://x, RETRIES: 3, LOUD: true}}
      working_dir: /srv
      shell: bash -eu -c
      continue_on_error: true
      scope: target
      kill_grace: 1s
      dry_run: true
"
        );
        let p = parse_text(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        let s = script(&p[1]);
        assert_eq!(s.timeout, Duration::from_secs(30));
        assert_eq!(s.env.get("RETRIES").map(String::as_str), Some("3"));
        assert_eq!(s.env.get("LOUD").map(String::as_str), Some("true"));
        assert_eq!(s.working_dir, PathBuf::from("/srv"));
        assert_eq!(s.argv(&s.run), vec!["bash", "-eu", "-c", "./smoke"]);
        assert!(s.continue_on_error && s.dry_run);
        assert_eq!(s.kill_grace, Duration::from_secs(1));
    }

    #[test]
    fn errors_name_file_and_line() {
        let p = |body: &str| format!("{BASE}pipeline:\n{body}");
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{BASE}stages:\n  - name: m\n    script: x\n    when: before\n"),
                "ci/rollguard.yaml:5: `stages:` is gone: list the stages in order under `pipeline:`",
            ),
            (
                p("  - script: {name: m, run: x}\n"),
                "ci/rollguard.yaml:6: pipeline has no `apply` stage",
            ),
            (
                p("  - apply\n  - apply\n"),
                "ci/rollguard.yaml:7: `apply` may appear only once in pipeline (first at line 6)",
            ),
            (
                p("  - aply\n"),
                "ci/rollguard.yaml:6: pipeline[0] must be `apply` or `script: {name: ..., run: ...}`; did you mean \"apply\"?",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timout: 1m}\n"),
                "ci/rollguard.yaml:7: unknown key \"timout\" in pipeline[1].script; did you mean \"timeout\"?",
            ),
            (
                p("  - apply\n  - script: {run: x}\n"),
                "ci/rollguard.yaml:7: pipeline[1].script needs a `name`",
            ),
            (
                p("  - apply\n  - script: {name: s}\n"),
                "ci/rollguard.yaml:7: stage \"s\" needs `run`",
            ),
            (
                p("  - apply\n  - script: {name: wait, run: x}\n"),
                "ci/rollguard.yaml:7: stage name \"wait\" is reserved",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x}\n  - script: {name: s, run: y}\n"),
                "ci/rollguard.yaml:8: duplicate stage name \"s\" (first at line 7)",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, scope: fleat}\n"),
                "ci/rollguard.yaml:7: stage \"s\" scope must be \"target\"",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timeout: soon}\n"),
                "ci/rollguard.yaml:7: stage \"s\" timeout:",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timeout: 0s}\n"),
                "ci/rollguard.yaml:7: stage \"s\" timeout must be more than 0s",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, continue_on_error: yes please}\n"),
                "ci/rollguard.yaml:7: stage \"s\" continue_on_error must be true or false",
            ),
            (
                p("  - apply\n  - script: {name: s, run: []}\n"),
                "ci/rollguard.yaml:7: stage \"s\" run must not be an empty list",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, env: {1X: y}}\n"),
                "ci/rollguard.yaml:7: stage \"s\": env name \"1X\" is not a valid variable name",
            ),
            (
                p("  - {apply: {}}\n"),
                "ci/rollguard.yaml:6: pipeline[0]: `apply` takes no settings",
            ),
            (
                format!("{BASE}pipeline: apply\n"),
                "ci/rollguard.yaml:5: pipeline must be a list of stages",
            ),
        ];
        for (text, want) in cases {
            let errs = parse_text(&text).expect_err(&text);
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "want {want:?}\ngot {errs:#?}\nfor:\n{text}"
            );
        }
    }
}
