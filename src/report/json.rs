//! The `--report` JSON file.
//!
//! Fields (schema version 1; `report_schema()` is the machine-readable form):
//! - `version` (1), `app`, `commit` ({`sha`, `ref`?, `message`?, `dirty`?} or null), `outcome`, `summary`,
//!   `started_at`, `finished_at` (RFC 3339), `dry_run`, `run_url`?, `refused_in_preflight`?
//!   (true: a server refused an object in the preflight dry run; nothing was written)
//! - `targets[]`: `name`, `wave` (0 when the config sets none; absent in reports of older
//!   versions, read as 0), `outcome` (`deployed` | `failed` | `rolled-back` | `rollback-failed` |
//!   `skipped` | `cancelled`), `revision` (number or null), `started_at`, `finished_at`,
//!   `phases[]` {`name` (`connect`, `apply`, `wait`, `bake`, `rollback`, a script stage's name,
//!   ...), `seconds`, `script`? (scope of a script stage), `exit_code`?},
//!   `failures[]` {`object`, `pod`, `container`, `reason`,
//!   `message`, `events`?, `image`?, `exit_code`?, `signal`?, `restarts`?, `logs`?[] {`pod`,
//!   `container`, `previous`, `lines`?, `error`?}}, `warnings[]`, `message`, `rollback` (null or {`to_revision`,
//!   `outcome`, `left_in_place[]`, `message`, `to_commit`?, `as_revision`?, `started_at`? (when
//!   the fleet decided the rollback), `why`? (e.g. `policy rollback-all: us failed at 12:03:04`)}),
//!   `abandoned_revisions`? (revisions a dead run left pending, now marked failed),
//!   `dropped[]`? {`object`, `fate` (`left-in-place` | `pruned` | `kept` | `prune-failed`),
//!   `note`?} (objects of the previous release the manifests no longer declare),
//!   `stages[]`? {`name`, `scope`, `rollback`?, `outcome` (`succeeded` | `failed` | `timed-out` |
//!   `warned` | `stopped` | `not-run`), `exit_code`?, `seconds`, `message`?, `output[]`? (the
//!   last 20 lines of a failed or warned script, secret values redacted)}, `unchanged`? (true:
//!   nothing would change there, so nothing was recorded and only `always` stages ran),
//!   `checks[]`? (the `checks:` run from healthy to the end of the bake, in config order)
//!   {`name`, `kind` (`prometheus` | `http`), `verdict` (`passed` | `failed` | `inconclusive` |
//!   `not-run`), `fail_if`? (as written: `> 0.01`), `threshold`? (its number), `source` (the
//!   rendered query or URL, credentials masked), `samples[]` {`time`, `value` (number or null:
//!   no data, an error), `verdict`, `note`?}, `message`? (why it failed the target)}.
//! - `plan`? (dry runs): the plan, as `rollguard diff -o json` prints it (`plan_schema`).
//! - `shard`? (`deploy --shard I/N`): {`index`, `count`, `digest`? (of the manifests)}.
//! - `saved_plan`? (`deploy --plan`): {`digest`, `made_at`, `pr`?, `replanned`, `mismatches`?[]}.
//! - `concurrency`? (deploy, diff): {`value`, `memory_budget_bytes`?, `per_target_bytes`?,
//!   `reason`} (how many targets ran at once, and why).

use super::clean::Clean;
use super::model::Report;
use super::plan::ChangePlan;
use serde_json::{Value, json};

/// The report as pretty-printed JSON.
pub fn to_json(report: &Clean<Report>) -> String {
    pretty(&**report, &report.app)
}

/// A dry run's plan as pretty-printed JSON (`rollguard diff -o json`).
pub fn plan_to_json(plan: &Clean<ChangePlan>) -> String {
    pretty(&**plan, &plan.app)
}

fn pretty(value: &impl serde::Serialize, app: &str) -> String {
    // Serializing plain data with string keys cannot fail; fall back to a minimal document anyway.
    serde_json::to_string_pretty(value).unwrap_or_else(|e| {
        format!(
            "{{\"version\":1,\"app\":{},\"error\":{}}}",
            Value::String(app.to_string()),
            Value::String(e.to_string())
        )
    })
}

/// JSON Schema (draft 2020-12) of the report file.
pub fn report_schema() -> Value {
    // A dry run's plan, as `rollguard diff -o json` prints it (docs/plan-schema.json).
    let mut plan = super::plan::plan_schema();
    if let Some(map) = plan.as_object_mut() {
        map.remove("$schema");
        map.remove("$id");
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:rollguard:report:v1",
        "title": "rollguard report",
        "type": "object",
        "required": ["version", "app", "commit", "outcome", "summary", "started_at", "finished_at", "targets"],
        "properties": {
            "version": {"const": 1},
            "app": {"type": "string"},
            "commit": commit_schema(),
            "outcome": outcome_schema(),
            "summary": {"type": "string"},
            "started_at": time_schema(),
            "finished_at": time_schema(),
            "dry_run": {"type": "boolean"},
            "run_url": {"type": "string"},
            "refused_in_preflight": {"type": "boolean", "description": "a server refused an object in the preflight dry run: nothing was written anywhere (exit 2); absent otherwise"},
            "targets": {"type": "array", "items": target_schema()},
            "plan": plan,
            "shard": shard_schema(),
            "saved_plan": saved_plan_schema(),
            "concurrency": concurrency_schema()
        }
    })
}

/// A target's or the run's outcome.
fn outcome_schema() -> Value {
    json!({
        "type": "string",
        "enum": ["deployed", "failed", "rolled-back", "rollback-failed", "skipped", "cancelled"]
    })
}

fn time_schema() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn opt_string_schema() -> Value {
    json!({"type": ["string", "null"]})
}

/// The commit deployed.
fn commit_schema() -> Value {
    json!({
        "type": ["object", "null"],
        "required": ["sha"],
        "properties": {
            "sha": {"type": "string"},
            "ref": {"type": "string"},
            "message": {"type": "string", "description": "first line of the commit message"},
            "dirty": {"type": "boolean", "description": "true when the working tree had uncommitted changes to tracked files (commit taken from git); absent when clean"}
        }
    })
}

/// The slice of the fleet a sharded run deployed.
fn shard_schema() -> Value {
    json!({
        "type": "object",
        "description": "the slice of the fleet a `deploy --shard I/N` run deployed; absent for a whole-fleet run",
        "required": ["index", "count"],
        "properties": {
            "index": {"type": "integer", "minimum": 1, "description": "I, from 1"},
            "count": {"type": "integer", "minimum": 1, "description": "N, the number of shards"},
            "digest": {"type": "string", "description": "the digest of the manifests deployed, the same in every shard of one deploy"}
        }
    })
}

/// The saved plan a `deploy --plan` ran.
fn saved_plan_schema() -> Value {
    json!({
        "type": "object",
        "description": "the saved plan a `deploy --plan` ran (docs/plan-file-schema.json); absent without one",
        "required": ["digest", "made_at", "replanned"],
        "properties": {
            "digest": {"type": "string", "description": "sha256 of the plan file"},
            "made_at": time_schema(),
            "pr": {"type": "integer", "minimum": 1, "description": "the pull request the plan was made on"},
            "replanned": {"type": "boolean", "description": "the plan no longer held and --replan applied a new one"},
            "mismatches": {"type": "array", "items": {"type": "string"}, "description": "what moved since the plan when it no longer held: nothing was written (exit 2)"}
        }
    })
}

/// How many targets ran at once, and why.
fn concurrency_schema() -> Value {
    json!({
        "type": "object",
        "description": "how many targets ran at once, and why: set (`--concurrency`, `concurrency:`) or what the memory budget holds",
        "required": ["value", "reason"],
        "properties": {
            "value": {"type": "integer", "minimum": 1, "description": "targets in flight at once, at most"},
            "memory_budget_bytes": {"type": "integer", "minimum": 1, "description": "the memory budget it follows from (`--memory-budget`); absent when set explicitly"},
            "per_target_bytes": {"type": "integer", "minimum": 1, "description": "the estimated memory of one target in flight; absent when set explicitly"},
            "reason": {"type": "string", "description": "e.g. \"concurrency 1820 (memory budget 512 MiB / 0.28 MiB per target of 4 objects)\""}
        }
    })
}

/// One target of the run.
fn target_schema() -> Value {
    json!({
        "type": "object",
        "required": ["name", "outcome", "revision", "started_at", "finished_at", "phases", "failures"],
        "properties": {
            "name": {"type": "string"},
            "wave": {"type": "integer", "minimum": 0, "description": "the target's wave (`wave:` in the config, 0 when none is set); always written, absent in reports of older versions (read as 0)"},
            "outcome": outcome_schema(),
            "revision": {"type": ["integer", "null"], "minimum": 1},
            "started_at": time_schema(),
            "finished_at": time_schema(),
            "phases": phases_schema(),
            "failures": {"type": "array", "items": failure_schema()},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "message": opt_string_schema(),
            "rollback": rollback_schema(),
            "abandoned_revisions": {"type": "array", "items": {"type": "integer"}},
            "dropped": dropped_schema(),
            "checks": {
                "type": "array",
                "description": "the checks (`checks:`) run on this target from healthy to the end of its bake, in config order, each with every value it read",
                "items": check_schema()
            },
            "unchanged": {"type": "boolean", "description": "true: nothing would change here (the manifests are the last good release's and the cluster matches them), so nothing was recorded and only `always` stages ran"},
            "stages": stages_schema()
        }
    })
}

/// The timeline of a target: its phases, in order.
fn phases_schema() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name", "seconds"],
            "properties": {
                "name": {"type": "string", "description": "connect, lock, apply, wait, bake (a healthy target watched before the next wave), rollback, or a script stage's name"},
                "seconds": {"type": "number"},
                "script": {"enum": ["target", "fleet", "wave"], "description": "a script stage, and its scope"},
                "exit_code": {"type": "integer", "description": "a script stage's exit code"}
            }
        }
    })
}

/// A target's rollback.
fn rollback_schema() -> Value {
    json!({
        "type": ["object", "null"],
        "required": ["to_revision", "outcome", "left_in_place"],
        "properties": {
            "to_revision": {"type": ["integer", "null"]},
            "outcome": outcome_schema(),
            "left_in_place": {"type": "array", "items": {"type": "string"}},
            "message": opt_string_schema(),
            "to_commit": opt_string_schema(),
            "as_revision": {"type": ["integer", "null"]},
            "started_at": {"type": "string", "format": "date-time", "description": "when the fleet decided to roll this target back"},
            "why": {"type": "string", "description": "why it was rolled back, e.g. \"policy rollback-all: us failed at 12:03:04\", \"failed\", \"cancelled by SIGTERM (on_cancel: rollback)\""}
        }
    })
}

/// What became of the objects a revision no longer declares.
fn dropped_schema() -> Value {
    json!({
        "type": "array",
        "description": "objects of the target's previous release that this revision's manifests no longer declare, and what became of each",
        "items": {
            "type": "object",
            "required": ["object", "fate"],
            "properties": {
                "object": {"type": "string", "description": "Kind namespace/name, e.g. \"ConfigMap shop/legacy\""},
                "fate": {"enum": ["left-in-place", "pruned", "kept", "prune-failed"], "description": "left-in-place: prune off, or the target did not end deployed; pruned: deleted after the healthy deploy; kept: prune on but not this app's to delete; prune-failed: the delete failed (still there)"},
                "note": {"type": "string", "description": "why it was kept, or why the delete failed and what to do"}
            }
        }
    })
}

/// The script stages run for a target.
fn stages_schema() -> Value {
    json!({
        "type": "array",
        "description": "script stages and rollback commands run for this target, in the order they ran",
        "items": {
            "type": "object",
            "required": ["name", "scope", "outcome", "seconds"],
            "properties": {
                "name": {"type": "string"},
                "scope": {"enum": ["target", "fleet", "wave"]},
                "rollback": {"type": "boolean", "description": "the stage's rollback command"},
                "outcome": {"enum": ["succeeded", "failed", "timed-out", "warned", "stopped", "not-run"]},
                "exit_code": {"type": "integer"},
                "seconds": {"type": "number"},
                "message": {"type": "string"},
                "output": {"type": "array", "items": {"type": "string"}, "description": "last 20 lines of a failed or warned script, secret values redacted"}
            }
        }
    })
}

/// Why a target failed: one object, with its pod, container, events and logs.
fn failure_schema() -> Value {
    json!({
        "type": "object",
        "required": ["object", "pod", "container", "reason", "message"],
        "properties": {
            "object": {"type": "string", "description": "Kind namespace/name, e.g. \"Deployment shop/web\""},
            "pod": opt_string_schema(),
            "container": opt_string_schema(),
            "reason": {"type": "string", "description": "e.g. ImagePullBackOff, ProgressDeadlineExceeded, Timeout"},
            "message": {"type": "string"},
            "events": {"type": "array", "items": {"type": "string"}, "description": "recent Warning events"},
            "image": {"type": "string", "description": "the failing container's image"},
            "exit_code": {"type": "integer", "description": "exit code of the container's last termination"},
            "signal": {"type": "string", "description": "the signal that ended it (exit code 128 + N), e.g. SIGKILL"},
            "restarts": {"type": "integer", "minimum": 0, "description": "the container's restart count"},
            "logs": {"type": "array", "items": container_log_schema(), "description": "the last lines of the failing containers' logs (at most 3 pods per target), secret values redacted"}
        }
    })
}

/// The last lines of a failing container's log.
fn container_log_schema() -> Value {
    json!({
        "type": "object",
        "required": ["pod", "container", "previous"],
        "properties": {
            "pod": {"type": "string"},
            "container": {"type": "string"},
            "previous": {"type": "boolean", "description": "true: the instance that exited (kubectl logs --previous); false: the running one"},
            "lines": {"type": "array", "items": {"type": "string"}, "description": "the last lines, oldest first (wait.log_lines)"},
            "error": {"type": "string", "description": "why the log could not be read"}
        }
    })
}

/// A check run on a target, with every value it read.
fn check_schema() -> Value {
    let check_verdict = json!({"enum": ["passed", "failed", "inconclusive", "not-run"]});
    json!({
        "type": "object",
        "required": ["name", "kind", "verdict", "source", "samples"],
        "properties": {
            "name": {"type": "string"},
            "kind": {"enum": ["prometheus", "http"]},
            "verdict": check_verdict,
            "fail_if": {"type": "string", "description": "the condition that fails a sample, as written, e.g. \"> 0.01\"; for HTTP \"status != 200\""},
            "threshold": {"type": "number", "description": "the number in fail_if (Prometheus checks)"},
            "source": {"type": "string", "description": "the rendered query or URL, credentials masked"},
            "samples": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["time", "value", "verdict"],
                    "properties": {
                        "time": time_schema(),
                        "value": {"type": ["number", "null"], "description": "the value read (an HTTP check: the status); null without one (no data, an error, a timeout)"},
                        "verdict": check_verdict,
                        "note": {"type": "string", "description": "why the sample is not a plain value, e.g. \"no data\", \"Prometheus answered 503\""}
                    }
                }
            },
            "message": {"type": "string", "description": "why the check failed the target, e.g. \"error-rate = 0.043 > 0.01 at 12:03:10\""}
        }
    })
}

/// The walk of a serialized value against its JSON Schema, for the tests of every schema the
/// project writes (the report, the saved plan).
#[cfg(test)]
pub(crate) mod schema_walk {
    use serde_json::Value;

    /// Every key written is declared, required keys are written; `free_form` says which
    /// object schemas declare no keys (not walked), `leaf` checks each other value.
    pub(crate) fn check(
        value: &Value,
        schema: &Value,
        path: &str,
        free_form: &dyn Fn(&Value) -> bool,
        leaf: &dyn Fn(&Value, &Value, &str),
    ) {
        if let Some(obj) = value.as_object() {
            if free_form(schema) {
                return;
            }
            let props = schema["properties"].as_object().expect(path);
            for (key, child) in obj {
                let sub = props
                    .get(key)
                    .unwrap_or_else(|| panic!("{path}.{key} not in schema"));
                check(child, sub, &format!("{path}.{key}"), free_form, leaf);
            }
            for req in schema["required"].as_array().into_iter().flatten() {
                let key = req.as_str().unwrap();
                assert!(obj.contains_key(key), "{path}.{key} required but missing");
            }
        } else if let Some(items) = value.as_array() {
            for item in items {
                check(
                    item,
                    &schema["items"],
                    &format!("{path}[]"),
                    free_form,
                    leaf,
                );
            }
        } else {
            leaf(value, schema, path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::tests::{image_failure, report, target};
    use crate::report::model::*;

    fn full_report() -> Report {
        let mut us = target("us", TargetOutcome::RolledBack);
        us.revision = Some(5);
        us.wave = 1;
        us.phases.push(PhaseTiming::new(BAKE_PHASE, 10.0));
        let mut failure = image_failure();
        failure.events = vec!["Failed: pull failed".into()];
        failure.image = Some("example/web:v2".into());
        failure.exit_code = Some(137);
        failure.signal = Some("SIGKILL".into());
        failure.restarts = Some(3);
        failure.logs = vec![
            ContainerLog {
                pod: "web-7d9f-x".into(),
                container: "web".into(),
                previous: true,
                lines: vec!["boot".into()],
                error: None,
            },
            ContainerLog {
                pod: "web-7d9f-y".into(),
                container: "web".into(),
                previous: false,
                lines: Vec::new(),
                error: Some("timed out".into()),
            },
        ];
        us.failures.push(failure.clone());
        us.phases.push(PhaseTiming::new("apply", 1.5));
        us.phases.push(PhaseTiming {
            name: "smoke".into(),
            seconds: 0.5,
            script: Some("target".into()),
            exit_code: Some(1),
        });
        us.stages.push(StageResult {
            name: "smoke".into(),
            scope: "target".into(),
            rollback: false,
            outcome: StageOutcome::Failed,
            exit_code: Some(1),
            seconds: 0.5,
            message: Some("exited with code 1".into()),
            output: vec!["curl: (7) refused".into()],
        });
        us.warnings.push("pod unschedulable".into());
        us.message = Some("m".into());
        us.abandoned_revisions = vec![4];
        let mut failed =
            crate::report::check_view::tests::error_rate(&[0.002, 0.043], CheckVerdict::Failed);
        failed.message = Some("error-rate = 0.043 > 0.01 at 08:00:07".into());
        failed.samples[1].note = Some("above the threshold".into());
        let healthz = crate::report::check_view::tests::healthz(
            &[Some(200.0), None],
            CheckVerdict::Inconclusive,
        );
        us.checks = vec![failed, healthz];
        us.rollback = Some(RollbackReport {
            started_at: Some(crate::report::model::tests::ts(3)),
            why: Some("policy rollback-all: eu failed at 08:00:02".into()),
            to_commit: None,
            as_revision: None,
            to_revision: Some(3),
            outcome: TargetOutcome::RolledBack,
            left_in_place: vec!["ConfigMap shop/new".into()],
            message: Some("ok".into()),
        });
        let mut r = report(vec![target("eu", TargetOutcome::Deployed), us]);
        r.run_url = Some("https://ci/run/1".into());
        r.shard = Some(ShardInfo {
            index: 2,
            count: 3,
            digest: Some("sha256:abc".into()),
        });
        r.concurrency = Some(ConcurrencyInfo {
            value: 2,
            memory_budget_bytes: Some(1 << 20),
            per_target_bytes: Some(1 << 19),
            reason: "concurrency 2 (memory budget 1 MiB / 0.5 MiB per target of 4 objects)".into(),
        });
        r
    }

    /// Every key the serializer writes is declared in the schema, and required keys are written.
    fn check(value: &Value, schema: &Value, path: &str) {
        crate::report::json::schema_walk::check(value, schema, path, &|_| false, &|_, _, _| {});
    }

    #[test]
    fn serialized_report_matches_schema() {
        let value: Value = serde_json::from_str(&to_json(&Clean::new(&full_report()))).unwrap();
        check(&value, &report_schema(), "$");
        assert_eq!(value["targets"][1]["outcome"], "rolled-back");
        assert_eq!(value["commit"]["ref"], "main");
        assert_eq!(value["targets"][1]["failures"][0]["pod"], "web-7d9f-x");
        assert_eq!(value["started_at"], "2027-01-15T08:00:00Z");
        assert_eq!(value["targets"][1]["wave"], 1);
        let check = &value["targets"][1]["checks"][0];
        assert_eq!(check["verdict"], "failed");
        assert_eq!(check["kind"], "prometheus");
        assert_eq!(check["threshold"], 0.01);
        assert_eq!(check["samples"][1]["value"], 0.043);
        assert_eq!(check["samples"][1]["time"], "2027-01-15T08:00:07Z");
        assert_eq!(
            value["targets"][1]["checks"][1]["samples"][1]["value"],
            Value::Null
        );
        assert_eq!(value["targets"][1]["checks"][1]["verdict"], "inconclusive");
        // A target without checks writes none.
        assert!(value["targets"][0].get("checks").is_none());
        assert_eq!(
            value["targets"][1]["rollback"]["started_at"],
            "2027-01-15T08:00:03Z"
        );
    }

    /// docs/report-schema.json is `report_schema()`; regenerate with UPDATE_SCHEMAS=1.
    #[test]
    fn docs_schema_is_current() {
        crate::util::generated_docs::assert_current("report-schema.json", &report_schema());
    }

    #[test]
    fn round_trips() {
        let r = full_report();
        let back: Report = serde_json::from_str(&to_json(&Clean::new(&r))).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn serialized_plan_matches_schema_and_round_trips() {
        let plan = crate::report::plan::tests::sample();
        let value: Value = serde_json::from_str(&plan_to_json(&Clean::new(&plan))).unwrap();
        check(&value, &crate::report::plan::plan_schema(), "$");
        assert_eq!(value["mode"], "dry-run");
        assert_eq!(value["targets"][2]["status"], "error");
        let back: ChangePlan = serde_json::from_str(&plan_to_json(&Clean::new(&plan))).unwrap();
        assert_eq!(back, plan);
    }
}
