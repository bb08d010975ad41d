//! The field check a server-side apply makes before it builds its typed patch: a field the
//! kind's schema does not declare fails the apply with a 500 (`.spec.extra: field not
//! declared in schema`), as recorded from a real API server. Custom resources are checked
//! against their CRD's `openAPIV3Schema`; built-in kinds against the Kubernetes types of
//! k8s-openapi (its `v1_33` API: fields added since then are refused).

use serde_json::Value;

use crate::managed_fields::{ListType, display_path, item_key, list_type};

/// The path of the first field of `object` that `schema` does not declare, such as
/// `.spec.extra` or `.spec.items[1].name`. `apiVersion`, `kind` and `metadata` are always
/// declared at the root.
pub fn undeclared_field(schema: &Value, object: &Value) -> Option<String> {
    let fields = object.as_object()?;
    for (key, value) in fields {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let path = format!(".{key}");
        match declared(schema, key) {
            Declared::No => return Some(path),
            Declared::Unchecked => {}
            Declared::By(child) => {
                if let Some(found) = check(child, value, &path) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// The path of the first field of a built-in object that its Kubernetes type does not
/// declare, such as `.spec.template.spec.containers[name="web"].imagePullPolice`. None for
/// kinds not known here and for objects that do not even parse as their type (those fail
/// elsewhere).
pub fn undeclared_builtin_field(
    group: &str,
    version: &str,
    kind: &str,
    object: &Value,
) -> Option<String> {
    let kept = typed_round_trip(group, version, kind, object)?;
    let mut path = Vec::new();
    first_dropped(object, &kept, "", &mut path).then(|| display_path(&path))
}

/// The object through its k8s-openapi type and back: fields the type does not declare are
/// dropped (the types ignore unknown fields when they parse).
fn typed_round_trip(group: &str, version: &str, kind: &str, object: &Value) -> Option<Value> {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Option<Value> {
        let typed: T = serde_json::from_value(object.clone()).ok()?;
        serde_json::to_value(&typed).ok()
    }
    use k8s_openapi::api::{
        apps, autoscaling, batch, coordination, core, discovery, networking, node, policy, rbac,
        scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    match (group, version, kind) {
        ("", "v1", "ConfigMap") => via::<core::v1::ConfigMap>(object),
        ("", "v1", "Endpoints") => via::<core::v1::Endpoints>(object),
        ("", "v1", "LimitRange") => via::<core::v1::LimitRange>(object),
        ("", "v1", "Namespace") => via::<core::v1::Namespace>(object),
        ("", "v1", "PersistentVolume") => via::<core::v1::PersistentVolume>(object),
        ("", "v1", "PersistentVolumeClaim") => via::<core::v1::PersistentVolumeClaim>(object),
        ("", "v1", "Pod") => via::<core::v1::Pod>(object),
        ("", "v1", "PodTemplate") => via::<core::v1::PodTemplate>(object),
        ("", "v1", "ReplicationController") => via::<core::v1::ReplicationController>(object),
        ("", "v1", "ResourceQuota") => via::<core::v1::ResourceQuota>(object),
        ("", "v1", "Secret") => via::<core::v1::Secret>(object),
        ("", "v1", "Service") => via::<core::v1::Service>(object),
        ("", "v1", "ServiceAccount") => via::<core::v1::ServiceAccount>(object),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            via::<apiextensions::v1::CustomResourceDefinition>(object)
        }
        ("apps", "v1", "DaemonSet") => via::<apps::v1::DaemonSet>(object),
        ("apps", "v1", "Deployment") => via::<apps::v1::Deployment>(object),
        ("apps", "v1", "ReplicaSet") => via::<apps::v1::ReplicaSet>(object),
        ("apps", "v1", "StatefulSet") => via::<apps::v1::StatefulSet>(object),
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => {
            via::<autoscaling::v1::HorizontalPodAutoscaler>(object)
        }
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            via::<autoscaling::v2::HorizontalPodAutoscaler>(object)
        }
        ("batch", "v1", "CronJob") => via::<batch::v1::CronJob>(object),
        ("batch", "v1", "Job") => via::<batch::v1::Job>(object),
        ("coordination.k8s.io", "v1", "Lease") => via::<coordination::v1::Lease>(object),
        ("discovery.k8s.io", "v1", "EndpointSlice") => via::<discovery::v1::EndpointSlice>(object),
        ("networking.k8s.io", "v1", "Ingress") => via::<networking::v1::Ingress>(object),
        ("networking.k8s.io", "v1", "IngressClass") => via::<networking::v1::IngressClass>(object),
        ("networking.k8s.io", "v1", "NetworkPolicy") => {
            via::<networking::v1::NetworkPolicy>(object)
        }
        ("node.k8s.io", "v1", "RuntimeClass") => via::<node::v1::RuntimeClass>(object),
        ("policy", "v1", "PodDisruptionBudget") => via::<policy::v1::PodDisruptionBudget>(object),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => via::<rbac::v1::ClusterRole>(object),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            via::<rbac::v1::ClusterRoleBinding>(object)
        }
        ("rbac.authorization.k8s.io", "v1", "Role") => via::<rbac::v1::Role>(object),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => via::<rbac::v1::RoleBinding>(object),
        ("scheduling.k8s.io", "v1", "PriorityClass") => {
            via::<scheduling::v1::PriorityClass>(object)
        }
        ("storage.k8s.io", "v1", "StorageClass") => via::<storage::v1::StorageClass>(object),
        _ => None,
    }
}

/// Walks `given` beside `kept` (the same object after the round trip) and leaves in `path`
/// the first field `given` has and `kept` lost. Null values count as absent, as the server
/// treats them. `field` names the list being walked, for its item keys.
fn first_dropped(given: &Value, kept: &Value, field: &str, path: &mut Vec<String>) -> bool {
    match (given, kept) {
        (Value::Object(given), Value::Object(kept)) => {
            for (key, value) in given {
                if value.is_null() {
                    continue;
                }
                path.push(format!("f:{key}"));
                let lost = match kept.get(key) {
                    None => true,
                    Some(kept_value) => first_dropped(value, kept_value, key, path),
                };
                if lost {
                    return true;
                }
                path.pop();
            }
            false
        }
        (Value::Array(given), Value::Array(kept)) => {
            for (i, (item, kept_item)) in given.iter().zip(kept).enumerate() {
                path.push(item_label(field, given, item, i));
                if first_dropped(item, kept_item, "", path) {
                    return true;
                }
                path.pop();
            }
            false
        }
        _ => false,
    }
}

/// How the server names a list item in a path: by its keys (`[name="web"]`) in a keyed
/// list, else by its index.
fn item_label(field: &str, items: &[Value], item: &Value, index: usize) -> String {
    if let ListType::Map(keys) = list_type(field, items)
        && let Some(key) = item_key(&keys, item)
    {
        return key;
    }
    format!("[{index}]")
}

enum Declared<'a> {
    /// Not in the schema.
    No,
    /// Kept without a schema of its own (`x-kubernetes-preserve-unknown-fields`, or a map
    /// whose values are not described).
    Unchecked,
    /// Declared by this schema.
    By(&'a Value),
}

/// Whether an object schema declares the field `key`.
fn declared<'a>(schema: &'a Value, key: &str) -> Declared<'a> {
    if let Some(child) = schema.pointer(&format!("/properties/{}", escape(key))) {
        return Declared::By(child);
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(true)) => return Declared::Unchecked,
        Some(child @ Value::Object(_)) => return Declared::By(child),
        _ => {}
    }
    if preserves_unknown(schema) {
        Declared::Unchecked
    } else {
        Declared::No
    }
}

fn check(schema: &Value, value: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(fields) => {
            // An embedded object or an int-or-string is described elsewhere, not here.
            if schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true))
                || schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            {
                return None;
            }
            for (key, child_value) in fields {
                let child_path = format!("{path}.{key}");
                match declared(schema, key) {
                    Declared::No => return Some(child_path),
                    Declared::Unchecked => {}
                    Declared::By(child) => {
                        if let Some(found) = check(child, child_value, &child_path) {
                            return Some(found);
                        }
                    }
                }
            }
            None
        }
        Value::Array(items) => {
            let item_schema = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, item)| check(item_schema, item, &format!("{path}[{i}]")))
        }
        _ => None,
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// A JSON pointer token (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn widget_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "size": {"type": "integer"},
                    "color": {"type": "string"},
                    "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "target": {"x-kubernetes-int-or-string": true},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true}
                }},
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    #[test]
    fn undeclared_field_table() {
        let schema = widget_schema();
        let cases = [
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "labels": {"a": "b"}},
                "spec": {"size": 4, "color": "blue"}}),
                None,
            ),
            (
                json!({"spec": {"size": 4, "extra": "not-in-schema"}}),
                Some(".spec.extra"),
            ),
            (json!({"spek": {}}), Some(".spek")),
            (
                json!({"spec": {"ports": [{"port": 80}, {"port": 81, "name": "x"}]}}),
                Some(".spec.ports[1].name"),
            ),
            (
                json!({"spec": {"labels": {"any": "thing", "more": "keys"}}}),
                None,
            ),
            (json!({"spec": {"raw": {"whatever": {"deep": 1}}}}), None),
            (json!({"spec": {"target": "50%"}}), None),
            (
                json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "spec": {}}}}),
                None,
            ),
            (
                json!({"status": {"ready": true, "phase": "x"}}),
                Some(".status.phase"),
            ),
        ];
        for (object, want) in cases {
            assert_eq!(
                undeclared_field(&schema, &object).as_deref(),
                want,
                "{object}"
            );
        }
    }

    #[test]
    fn undeclared_builtin_field_table() {
        let deployment = |spec: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": null}, "spec": spec})
        };
        let pod_spec = |container: Value| {
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "sidecar", "image": "s"}, container]}}})
        };
        let cases = [
            (
                deployment(pod_spec(
                    json!({"name": "web", "image": "w", "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "100m"}}, "env": [{"name": "A", "value": "1"}]}),
                )),
                None,
            ),
            // The recorded case: an unknown field beside missing required ones.
            (
                deployment(json!({"bogusField": 1})),
                Some(".spec.bogusField"),
            ),
            (
                deployment(pod_spec(
                    json!({"name": "web", "image": "w", "imagePullPolice": "Always"}),
                )),
                Some(".spec.template.spec.containers[name=\"web\"].imagePullPolice"),
            ),
            (
                deployment(pod_spec(
                    json!({"name": "web", "image": "w", "ports": [{"containerPort": 80, "protocl": "TCP"}]}),
                )),
                Some(
                    ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"].protocl",
                ),
            ),
            (
                deployment(
                    json!({"replicas": 2, "strategy": {"type": "Recreate", "rollingUpdate": null}}),
                ),
                None,
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "lables": {}}, "data": {"any": "key"}}),
                Some(".metadata.lables"),
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "date": {}}),
                Some(".date"),
            ),
        ];
        for (object, want) in cases {
            let (group, version) = match object["apiVersion"].as_str().unwrap_or("").split_once('/')
            {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), "v1".to_string()),
            };
            let kind = object["kind"].as_str().unwrap_or("");
            assert_eq!(
                undeclared_builtin_field(&group, &version, kind, &object).as_deref(),
                want,
                "{object}"
            );
        }
        // Kinds not known here, and bodies that are not even their type, are not judged.
        let odd = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"x": 1}});
        assert_eq!(
            undeclared_builtin_field("example.com", "v1", "Widget", &odd),
            None
        );
        let wrong_type =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "not a map", "bogus": 1});
        assert_eq!(
            undeclared_builtin_field("", "v1", "ConfigMap", &wrong_type),
            None
        );
    }

    #[test]
    fn a_schema_that_preserves_unknown_fields_declares_everything() {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(undeclared_field(&schema, &json!({"spec": {"a": 1}})), None);
    }
}
