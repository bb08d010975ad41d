//! The JSON Schema (draft 2020-12) of rollguard.yaml, for `rollguard schema` and editors.

use serde_json::{Value, json};

use super::model::{
    CancelPolicy, DEFAULT_FAIL_FAST_REASONS, FailurePolicy, RenderHooks, RollbackOrder,
    UnschedulablePolicy,
};
use super::names::choice_names;

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
    let mut schema = json!({
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
            "targets": targets_schema(&dns_label),
            "wait": wait_schema(&duration),
            "concurrency": {"type": "integer", "minimum": 1, "description": "targets at once (default: what memory_budget holds)"},
            "memory_budget": {"type": "string", "pattern": "^\\s*[0-9.]+\\s*(KiB|MiB|GiB|TiB|Ki|Mi|Gi|Ti)\\s*$", "default": "512MiB", "description": "the memory the targets in flight may use; the default concurrency is what it holds at the measured memory per target (e.g. 512MiB, 1GiB)"},
            "history": history_schema(&dns_label),
            "on_failure": {"enum": choice_names::<FailurePolicy>(), "default": "rollback-all"},
            "preflight": {"type": "boolean", "default": true, "description": "before the first write, dry-run (dryRun=All) every object on every target; any refusal stops the deploy with exit 2 and nothing written"},
            "prune": {"type": "boolean", "default": false, "description": "after a healthy deploy of a target, delete the objects of its previous release that the manifests no longer declare, when this app's field manager still owns them and no other manager applies them (never on a failed or rolled-back target); --prune for one run"},
            "on_cancel": {"enum": choice_names::<CancelPolicy>(), "default": "rollback"},
            "render_hooks": {"enum": choice_names::<RenderHooks>(), "default": "skip", "description": "objects with a helm.sh/hook annotation (helm template output): left out with a warning, or applied as ordinary objects"},
            "rollback": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"timeout": {"description": "deadline of a rollback (default: wait.timeout)", "allOf": [duration]}}
            },
            "rollback_order": {"enum": choice_names::<RollbackOrder>(), "default": "pipeline", "description": "order of the script stages' rollback commands: pipeline order (PipeCD's SCRIPT_RUN order), or reverse (last-first)"},
            "lock": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"timeout": {"description": "how long to wait for another run's lock (default 2m)", "allOf": [duration]}}
            },
            "pipeline": super::pipeline::pipeline_schema(&duration, &command)
        }
    });
    let checks = super::check_parse::checks_schema(&duration);
    schema["properties"]["checks"] = checks.clone();
    schema["properties"]["targets"]["items"]["properties"]["vars"] = json!({
        "type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
        "description": "this target's values for the checks' {{vars.KEY}} templates"
    });
    schema["properties"]["github"] = github_schema(&duration);
    schema["properties"]["waves"] = waves_schema(&duration);
    schema["properties"]["waves"]["items"]["properties"]["checks"] = checks;
    schema["properties"]["targets"]["items"]["properties"]["wave"] = json!({
        "type": "integer", "minimum": 0, "maximum": u32::MAX, "default": 0,
        "description": "the wave this target deploys in; waves run in ascending order"
    });
    schema["properties"]["targets"]["items"]["properties"]["environment"] = json!({
        "type": "string", "minLength": 1, "maxLength": 255,
        "description": "GitHub environment of this target's deployment (default <app>/<name>)"
    });
    schema
}

/// `targets:` (its `vars`, `wave` and `environment` are added by [`json_schema`]).
fn targets_schema(dns_label: &Value) -> Value {
    json!({
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
    })
}

/// `wait:`, with `fail_fast`.
fn wait_schema(duration: &Value) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "timeout": {"description": "deadline per target (default 5m)", "allOf": [duration]},
            "bake": {"description": "the bake of waves whose `waves:` entry sets none (default 0)", "allOf": [duration]},
            "log_lines": {"type": "integer", "minimum": 0, "default": 20, "description": "last log lines of each failing container put in the report (at most 3 pods per target); 0 reads none"},
            "fail_fast": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "reasons": {"type": "array", "items": {"type": "string"}, "description": "container waiting reasons that fail a target", "default": DEFAULT_FAIL_FAST_REASONS},
                    "pull_grace": {"description": "how long a container's pull errors that may pass (timeouts, 5xx, 429) are tolerated, from its first pull error, across ErrImagePull and ImagePullBackOff (default 60s); errors saying the image does not exist or access is denied fail at once", "allOf": [duration]},
                    "crash_loop_restarts": {"type": "integer", "minimum": 0, "default": 2, "description": "CrashLoopBackOff fails at this restart count"},
                    "unschedulable": {"enum": choice_names::<UnschedulablePolicy>(), "default": "warn"},
                    "unschedulable_grace": {"description": "with unschedulable: fail, how long a pod may stay unschedulable (default 60s)", "allOf": [duration]}
                }
            }
        }
    })
}

/// `history:`.
fn history_schema(dns_label: &Value) -> Value {
    // `secrets` lists the default first (the schema as published); the names are those of
    // `SecretsPolicy` (a test checks).
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "namespace": {"description": "namespace of the release records (default: the app's namespace)", "allOf": [dns_label]},
            "keep": {"type": "integer", "minimum": 1, "default": 10},
            "secrets": {"enum": ["digest", "store"], "default": "digest", "description": "Secrets of other namespaces in a release record: only a digest (re-read from git on rollback), or stored"}
        }
    })
}

/// `github:`.
fn github_schema(duration: &Value) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "deployments": {"type": "boolean", "description": "one GitHub deployment per target, with in_progress/success/failure statuses (default false)"},
            "timeout": {"description": "bound on all GitHub calls of a run, retries included (default 30s)", "allOf": [duration]}
        }
    })
}

/// `waves:` (each entry's `checks` is added by [`json_schema`]).
fn waves_schema(duration: &Value) -> Value {
    json!({
        "type": "array",
        "description": "settings of waves by number; waves run in ascending order, each once the one before is healthy and baked",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["wave"],
            "properties": {
                "wave": {"type": "integer", "minimum": 0, "maximum": u32::MAX, "description": "the wave these settings are for (a `wave:` some target sets; each wave once)"},
                "bake": {"description": "how long the wave's pods stay watched once healthy, before the next wave starts (default: wait.bake)", "allOf": [duration]},
                "max_parallel": {"type": "integer", "minimum": 1, "description": "targets of this wave at once (default: concurrency)"}
            }
        }
    })
}
