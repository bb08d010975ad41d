//! JSON Schema (draft 2020-12) of the plan file (docs/plan-file-schema.json).

use serde_json::{Value, json};

/// The plan file's schema, version 1.
pub fn plan_file_schema() -> Value {
    let digest = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"});
    let commit = json!({
        "type": ["object", "null"],
        "required": ["sha"],
        "properties": {
            "sha": {"type": "string"},
            "ref": {"type": "string"},
            "message": {"type": "string", "description": "first line of the commit message"},
            "dirty": {"type": "boolean", "description": "true when the working tree had uncommitted changes to tracked files"}
        }
    });
    let manifest = json!({
        "type": "object",
        "required": ["object", "origin", "sha256"],
        "properties": {
            "object": {"type": "string", "description": "Kind name or Kind namespace/name, as written"},
            "origin": {"type": "string", "description": "file:line of the manifest"},
            "sha256": digest.clone()
        }
    });
    let object = json!({
        "type": "object",
        "required": ["object", "api_version", "kind", "name", "origin", "action", "sha256"],
        "properties": {
            "object": {"type": "string", "description": "Kind namespace/name as applied, e.g. \"Deployment shop/web\""},
            "api_version": {"type": "string"},
            "kind": {"type": "string"},
            "namespace": {"type": "string", "description": "absent for cluster-scoped objects"},
            "name": {"type": "string"},
            "origin": {"type": "string", "description": "file:line of the manifest"},
            "action": {"type": "string", "enum": ["create", "update", "unchanged"]},
            "sha256": {"description": "of the body as applied (JSON, keys sorted)", "type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "body": {"type": "object", "description": "the body as applied; absent for a Secret, kept by its digest only"},
            "live": {
                "type": "object",
                "description": "the live object as the dry run saw it; absent: it would be created",
                "required": ["uid", "resource_version"],
                "properties": {
                    "uid": {"type": "string"},
                    "resource_version": {"type": "string"}
                }
            }
        }
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:rollguard:plan-file:v1",
        "title": "rollguard plan file (diff --out, deploy --plan)",
        "type": "object",
        "required": ["version", "app", "commit", "config_digest", "made_at", "manifests", "targets"],
        "properties": {
            "version": {"const": 1, "description": "the file's format; another version is refused"},
            "app": {"type": "string"},
            "commit": commit,
            "config_digest": {"description": "sha256 of the config file's bytes", "type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "made_at": {"type": "string", "format": "date-time"},
            "pr": {"type": "integer", "minimum": 1, "description": "the pull request the plan was made on"},
            "manifests": {"type": "array", "items": manifest},
            "revision": {"type": "integer", "minimum": 1, "description": "the revision a deploy of the plan records (above every target's history_head); a target whose history moved since refuses the plan"},
            "prune": {"type": "boolean", "description": "prune was on (`prune: true`, `--prune`) when the plan was made; a deploy of the plan must run with the same setting (absent: off)"},
            "targets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "objects"],
                    "properties": {
                        "name": {"type": "string"},
                        "history_head": {"type": "integer", "minimum": 1, "description": "the newest revision of the target's release history when the plan was made; absent: none yet"},
                        "objects": {"type": "array", "items": object},
                        "dropped": {"type": "array", "items": {"type": "string"},
                                    "description": "objects of the last release the manifests drop that stay on the target (prune off, or no longer this app's), as \"Kind namespace/name\"; absent: none"},
                        "prune": {"type": "array", "items": {"type": "string"},
                                  "description": "with prune on (`prune: true`, `--prune`): objects of the last release the manifests drop that a deploy would delete after a healthy deploy (still this app's); absent: none"}
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::saved_plan::model::{
        PlannedAction, PlannedManifest, PlannedObject, PlannedTarget, SavedPlan, VERSION,
    };
    use crate::report::LiveIdentity;
    use std::path::Path;

    /// Every key written is declared, required keys are written, and digests match their
    /// pattern.
    fn check(value: &Value, schema: &Value, path: &str) {
        let body = |schema: &Value| {
            schema["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("the body as applied"))
        };
        let digest = |value: &Value, schema: &Value, path: &str| {
            if let (Some(text), Some(_)) = (value.as_str(), schema.get("pattern")) {
                assert!(
                    text.starts_with("sha256:") && text.len() == 71,
                    "{path}: {text}"
                );
            }
        };
        crate::report::json::schema_walk::check(value, schema, path, &body, &digest);
    }

    pub fn sample() -> SavedPlan {
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        SavedPlan {
            version: VERSION,
            app: "shop".into(),
            commit: Some(crate::util::git::CommitInfo {
                sha: "abc".into(),
                ..Default::default()
            }),
            config_digest: d('c'),
            made_at: "2026-12-01T10:00:00Z".parse().unwrap(),
            pr: Some(12),
            revision: Some(4),
            prune: true,
            manifests: vec![PlannedManifest {
                object: "Deployment web".into(),
                origin: "k8s/app.yaml:8".into(),
                sha256: d('1'),
            }],
            targets: vec![PlannedTarget {
                history_head: Some(3),
                name: "eu".into(),
                objects: vec![PlannedObject {
                    object: "Deployment shop/web".into(),
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                    origin: "k8s/app.yaml:8".into(),
                    action: PlannedAction::Update,
                    sha256: d('2'),
                    body: Some(json!({"kind": "Deployment", "spec": {"replicas": 2}})),
                    live: Some(LiveIdentity {
                        uid: "u1".into(),
                        resource_version: "4411".into(),
                    }),
                }],
                dropped: vec!["ConfigMap shop/kept".into()],
                prune: vec!["ConfigMap shop/legacy".into()],
            }],
        }
    }

    #[test]
    fn a_written_plan_matches_the_schema_and_reads_back_with_its_digest() {
        let plan = sample();
        let text = plan.to_text();
        let value: Value = serde_json::from_str(&text).unwrap();
        check(&value, &plan_file_schema(), "$");
        let back = SavedPlan::parse(&text, Path::new("plan.json")).unwrap();
        assert_eq!(back, plan);
        assert_eq!(back.digest(), plan.digest());
        assert!(plan.digest().starts_with("sha256:") && plan.digest().len() == 71);
        // Any edit changes the digest.
        let mut edited = plan.clone();
        edited.targets[0].objects[0].live = None;
        assert_ne!(edited.digest(), plan.digest());
    }

    #[test]
    fn an_unknown_version_or_another_file_is_refused() {
        let path = Path::new("plan.json");
        let mut value = serde_json::to_value(sample()).unwrap();
        value["version"] = json!(2);
        let err = SavedPlan::parse(&value.to_string(), path).unwrap_err();
        assert!(
            err.to_string()
                .contains("plan.json has version 2; this rollguard reads version 1 only"),
            "{err}"
        );
        let err = SavedPlan::parse("{\"app\": \"shop\"}", path).unwrap_err();
        assert!(err.to_string().contains("has version none"), "{err}");
        let err = SavedPlan::parse("not json", path).unwrap_err();
        assert!(err.to_string().contains("is not a rollguard plan"), "{err}");
    }

    /// docs/plan-file-schema.json is `plan_file_schema()`; regenerate with UPDATE_SCHEMAS=1.
    #[test]
    fn docs_schema_is_current() {
        crate::util::generated_docs::assert_current("plan-file-schema.json", &plan_file_schema());
    }
}
