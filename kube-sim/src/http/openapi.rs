//! A minimal, honest OpenAPI v3: the index and, per group-version, the PATCH operation of
//! every served resource with its group-version-kind and query parameters. That is what
//! `kubectl apply` reads to learn that the server validates fields itself. Schemas are not
//! served; the simulator checks fields itself (`semantics::schema`).

use serde_json::{Map, Value, json};
use sha2::Digest;

use crate::storage::registry::Registry;

/// The path key of a group-version in the index: `api/v1`, `apis/apps/v1`.
fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Uppercase hex SHA-512, the hash format the real index uses.
pub fn hash(bytes: &[u8]) -> String {
    hex::encode_upper(sha2::Sha512::digest(bytes))
}

/// `GET /openapi/v3`.
pub fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for g in registry.groups() {
        for v in &g.versions {
            let key = gv_key(&g.name, v);
            if let Some(doc) = group_version_document(registry, &g.name, v) {
                let body = serde_json::to_vec(&doc).unwrap_or_default();
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&body))}),
                );
            }
        }
    }
    json!({ "paths": paths })
}

fn query_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
        "schema": {"type": "string", "uniqueItems": true}})
}

/// `GET /openapi/v3/{api/v1 | apis/group/version}`, or None when not served.
pub fn group_version_document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    for info in registry.resources() {
        if info.group != group
            || info.version != version
            || !info.verbs.iter().any(|v| v == "patch")
        {
            continue;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if info.namespaced {
            format!(
                "{prefix}/namespaces/{{namespace}}/{}/{{name}}",
                info.resource
            )
        } else {
            format!("{prefix}/{}/{{name}}", info.resource)
        };
        let patch = json!({
            "description": format!("partially update the specified {}", info.kind),
            "parameters": [
                query_parameter("dryRun", "When present, indicates that modifications should not be persisted."),
                query_parameter("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
                query_parameter("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields."),
                {"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}
            ],
            "requestBody": {"content": {
                "application/apply-patch+yaml": {"schema": {"type": "object"}},
                "application/json-patch+json": {"schema": {"type": "object"}},
                "application/merge-patch+json": {"schema": {"type": "object"}},
                "application/strategic-merge-patch+json": {"schema": {"type": "object"}}
            }, "required": true},
            "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version, "kind": info.kind}
        });
        paths.insert(path, json!({ "patch": patch }));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.2"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_points_at_served_group_versions() {
        let registry = Registry::new();
        let idx = index(&registry);
        let apps = idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(apps.starts_with("/openapi/v3/apis/apps/v1?hash="));
        assert!(idx["paths"]["api/v1"].is_object());
    }

    #[test]
    fn patch_operations_declare_field_validation() {
        let registry = Registry::new();
        let doc = group_version_document(&registry, "apps", "v1").unwrap();
        let op = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        let names: Vec<&str> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        assert!(group_version_document(&registry, "nope", "v1").is_none());
    }
}
