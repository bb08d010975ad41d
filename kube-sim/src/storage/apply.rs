//! Server-side apply as a store transaction: read the live object, merge the configuration
//! onto it (`semantics::apply`), write it under the resourceVersion it was read at, and
//! again when another writer came in between.

use serde_json::{Value, json};

use crate::model::clock::format_time;
use crate::model::error::ApiError;
use crate::model::resource::ResourceType;
use crate::semantics::apply::{Applier, Kind, merge_onto, new_object, prepare};
use crate::storage::store::{Ownership, Store, WriteOptions};

/// How often an apply is retried when another writer changed the object in between.
const MAX_ATTEMPTS: usize = 8;

/// One server-side apply request.
pub struct ApplyRequest<'a> {
    pub resource: &'a ResourceType,
    /// Namespace from the URL ("" for cluster-scoped resources).
    pub namespace: &'a str,
    /// Name from the URL.
    pub name: &'a str,
    /// The parsed apply configuration.
    pub config: Value,
    pub manager: &'a str,
    pub force: bool,
    pub dry_run: bool,
    /// `Some("status")` for an apply to the status subresource.
    pub subresource: Option<&'a str>,
}

/// The result of an apply: the object and whether it was created.
pub struct Applied {
    pub object: Value,
    pub created: bool,
}

/// Applies a configuration: creates the object (201) or merges it into the stored one,
/// again when another writer came in between.
pub fn apply(store: &Store, req: ApplyRequest<'_>) -> Result<Applied, ApiError> {
    let info = store
        .registry()
        .get(req.resource)
        .ok_or_else(ApiError::unknown_path)?;
    let api_version = info.api_version();
    let kind = Kind {
        api_version: api_version.clone(),
        kind: &info.kind,
        namespaced: info.namespaced,
        status_is_separate: info.has_status(),
        declaration: info.declaration(),
    };
    let prepared = prepare(&kind, req.namespace, req.name, req.config, req.subresource)?;
    let expected_rv = prepared.expected_resource_version.clone();
    let status_only = prepared.status_only;

    for _ in 0..MAX_ATTEMPTS {
        let now = format_time(store.clock().now());
        let by = Applier {
            manager: req.manager,
            subresource: req.subresource,
            force: req.force,
            api_version: &api_version,
            now: &now,
        };
        let Some(current) = store.get_shared(req.resource, req.namespace, req.name) else {
            if status_only {
                return Err(ApiError::not_found(req.resource, req.name));
            }
            let opts = WriteOptions {
                manager: req.manager.to_string(),
                dry_run: req.dry_run,
                ownership: Ownership::AsGiven,
                expected_resource_version: None,
            };
            match store.create_with(req.resource, new_object(&prepared, &by), &opts) {
                Ok(object) => {
                    return Ok(Applied {
                        object,
                        created: true,
                    });
                }
                Err(e) if e.reason == "AlreadyExists" => continue,
                Err(e) => return Err(e),
            }
        };
        let current_rv = current
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(expected) = &expected_rv
            && *expected != current_rv
        {
            return Err(ApiError::conflict(req.resource, req.name));
        }
        let mut merged = merge_onto(&current, &prepared, &by)?;
        if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(current_rv));
        }

        let opts = WriteOptions {
            manager: req.manager.to_string(),
            dry_run: req.dry_run,
            ownership: Ownership::AsGiven,
            expected_resource_version: Some(current_rv.clone()),
        };
        let known_rv = current_rv.parse::<u64>().unwrap_or(0);
        let result = store.update_known(
            req.resource,
            merged,
            &opts,
            status_only,
            (known_rv, current),
        );
        match result {
            Ok(object) => {
                return Ok(Applied {
                    object,
                    created: false,
                });
            }
            // Another writer came in between; apply again to the newer object.
            Err(e) if e.code == 409 && e.reason == "Conflict" && expected_rv.is_none() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(req.resource, req.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::clock::Clock;
    use crate::semantics::managed_fields::read_entries;

    fn deployments() -> ResourceType {
        ResourceType::new("apps", "v1", "deployments")
    }

    fn config(image: &str, replicas: Option<i64>) -> Value {
        let mut spec = json!({"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image,
                    "ports": [{"containerPort": 8080}]}]}}});
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": spec})
    }

    fn do_apply(
        store: &Store,
        cfg: Value,
        manager: &str,
        force: bool,
    ) -> Result<Applied, ApiError> {
        apply(
            store,
            ApplyRequest {
                resource: &deployments(),
                namespace: "default",
                name: "web",
                config: cfg,
                manager,
                force,
                dry_run: false,
                subresource: None,
            },
        )
    }

    #[test]
    fn create_update_and_noop() {
        let store = Store::new(Clock::default());
        let first = do_apply(&store, config("web:v1", Some(2)), "rollguard", false).unwrap();
        assert!(first.created);
        let mf = &first.object["metadata"]["managedFields"];
        assert_eq!(mf.as_array().unwrap().len(), 1);
        assert_eq!(mf[0]["operation"], "Apply");
        assert_eq!(first.object["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(first.object["status"], json!({}));
        let second = do_apply(&store, config("web:v2", Some(2)), "rollguard", false).unwrap();
        assert!(!second.created);
        assert_eq!(second.object["metadata"]["generation"], 2);
        let third = do_apply(&store, config("web:v2", Some(2)), "rollguard", false).unwrap();
        assert_eq!(
            third.object["metadata"]["resourceVersion"],
            second.object["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn conflicting_manager_gets_409_then_force_moves_ownership() {
        let store = Store::new(Clock::default());
        do_apply(&store, config("web:v1", Some(2)), "rollguard", false).unwrap();
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 3}});
        let err = do_apply(&store, other.clone(), "other", false)
            .err()
            .unwrap();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"rollguard\": .spec.replicas"
        );
        let forced = do_apply(&store, other, "other", true).unwrap();
        assert_eq!(forced.object["spec"]["replicas"], 3);
        let entries = read_entries(&forced.object);
        let replicas = vec!["f:spec".to_string(), "f:replicas".to_string()];
        let owner_of = |m: &str| {
            entries
                .iter()
                .find(|e| e.manager == m)
                .unwrap()
                .fields
                .contains_path(&replicas)
        };
        assert!(owner_of("other"));
        assert!(!owner_of("rollguard"));
    }

    #[test]
    fn same_value_is_shared_not_a_conflict() {
        let store = Store::new(Clock::default());
        do_apply(&store, config("web:v1", Some(2)), "rollguard", false).unwrap();
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 2}});
        assert!(do_apply(&store, other, "other", false).is_ok());
    }

    #[test]
    fn dropped_fields_are_removed() {
        let store = Store::new(Clock::default());
        let mut with_label = config("web:v1", Some(2));
        with_label["metadata"]["labels"]["tier"] = json!("frontend");
        do_apply(&store, with_label, "rollguard", false).unwrap();
        let after = do_apply(&store, config("web:v1", Some(2)), "rollguard", false).unwrap();
        assert!(after.object["metadata"]["labels"].get("tier").is_none());
        assert_eq!(after.object["metadata"]["labels"]["app"], "web");
    }

    #[test]
    fn two_field_conflict_message_matches_recording() {
        let store = Store::new(Clock::default());
        do_apply(&store, config("web:v1", Some(2)), "rollguard", false).unwrap();
        let err = do_apply(&store, config("web:v9", Some(7)), "other", false)
            .err()
            .unwrap();
        assert_eq!(
            err.message,
            "Apply failed with 2 conflicts: conflicts with \"rollguard\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"web\"].image"
        );
        assert_eq!(err.details.unwrap()["causes"].as_array().unwrap().len(), 2);
    }
}
