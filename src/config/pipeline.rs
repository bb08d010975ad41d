//! `pipeline:` in rollguard.yaml: the ordered stages of one deploy, `apply` (exactly once)
//! and `script` stages (migrations, smoke tests) with their own rollback commands.
//!
//! The model lives here, with the rest of the config, because the engine, the stage runner
//! and the release records all read it; `parse.rs` walks it out of the file (with file:line
//! errors), and `crate::stages` runs it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

/// Keys of a `script:` stage.
pub(crate) const SCRIPT_KEYS: &[&str] = &[
    "name",
    "run",
    "rollback",
    "timeout",
    "env",
    "pass_env",
    "working_dir",
    "shell",
    "continue_on_error",
    "scope",
    "kill_grace",
    "dry_run",
    "always",
];

/// A script's timeout when it names none.
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);
/// Between SIGTERM and SIGKILL of a script's process group, when the stage names none.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Names the report already uses for a target's phases; a stage may not take them.
pub(crate) const RESERVED_NAMES: &[&str] =
    &["apply", "connect", "discover", "lock", "wait", "rollback"];

/// A command of a script stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptCommand {
    /// Run with the stage's shell (default `sh -c`).
    Shell(String),
    /// Run directly, no shell.
    Argv(Vec<String>),
}

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
    /// Once per wave, for that wave's targets (`waves:`); outside the coordinator's waves it
    /// runs as a fleet stage.
    Wave,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Target, Scope::Fleet, Scope::Wave];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Target => "target",
            Scope::Fleet => "fleet",
            Scope::Wave => "wave",
        }
    }

    /// Whether the stage runs once for several targets (the ones that go on), rather than
    /// inside each target's own pipeline.
    pub fn is_shared(self) -> bool {
        match self {
            Scope::Target => false,
            Scope::Fleet | Scope::Wave => true,
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
    /// Credential variables of rollguard's environment (`GITHUB_TOKEN`, `*_TOKEN`) the
    /// script gets; without it, it gets none of them.
    pub pass_env: Vec<String>,
    /// Absolute, or relative to the process's directory like `base_dir`.
    pub working_dir: PathBuf,
    /// The shell a string command runs with, e.g. `["sh", "-c"]`.
    pub shell: Vec<String>,
    pub continue_on_error: bool,
    pub scope: Scope,
    pub kill_grace: Duration,
    /// Run in `deploy --dry-run` too (with ROLLGUARD_DRY_RUN=true).
    pub dry_run: bool,
    /// Run also when the deploy changes nothing on the target (otherwise such a deploy runs
    /// no stage; `--force` runs them all).
    pub always: bool,
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

/// The `pipeline` part of `rollguard schema`.
pub(crate) fn pipeline_schema(duration: &Value, command: &Value) -> Value {
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
                                "pass_env": {"type": "array", "uniqueItems": true, "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}, "description": "credential variables of rollguard's environment the script gets (GITHUB_TOKEN, ACTIONS_RUNTIME_TOKEN, any *_TOKEN): without this it gets none of them"},
                                "working_dir": {"type": "string", "description": "default: the folder of rollguard.yaml"},
                                "shell": {
                                    "description": "the shell a string command runs with (default \"sh -c\")",
                                    "anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
                                },
                                "continue_on_error": {"type": "boolean", "default": false, "description": "a failure is a warning, not a failed target"},
                                "scope": {"enum": Scope::ALL.map(Scope::as_str), "default": "target", "description": "once per target, once for the whole deploy (fleet), or once per wave for that wave's targets"},
                                "kill_grace": {"description": "between SIGTERM and SIGKILL (default 5s)", "allOf": [duration]},
                                "dry_run": {"type": "boolean", "default": false, "description": "run in deploy --dry-run too"},
                                "always": {"type": "boolean", "default": false, "description": "run also when the deploy changes nothing on the target"}
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

    #[test]
    fn a_string_runs_through_the_shell_a_list_does_not() {
        let stage = ScriptStage {
            name: "s".into(),
            run: ScriptCommand::Shell("echo hi".into()),
            rollback: None,
            timeout: DEFAULT_SCRIPT_TIMEOUT,
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            working_dir: PathBuf::from("."),
            shell: vec!["bash".into(), "-eu".into(), "-c".into()],
            continue_on_error: false,
            scope: Scope::Target,
            kill_grace: DEFAULT_KILL_GRACE,
            dry_run: false,
            always: false,
            line: 1,
        };
        assert_eq!(stage.argv(&stage.run), vec!["bash", "-eu", "-c", "echo hi"]);
        let argv = ScriptCommand::Argv(vec!["./x".into(), "a b".into()]);
        assert_eq!(stage.argv(&argv), vec!["./x", "a b"]);
    }
}
