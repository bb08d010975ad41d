//! What the real server refuses with 422 Invalid: create-time rules of the common kinds and
//! the fields an update may not change. Functions of the defaulted object (and, for an
//! update, the stored one); the store turns the errors into one Status, as the real server
//! does, so every write method (PUT, each patch type, server-side apply) answers the same.

use serde_json::{Map, Value, json};

use crate::model::error::FieldError;
use crate::model::resource::ResourceType;
use crate::semantics::selectors::selector_matches;

const IMMUTABLE: &str = "field is immutable";

/// The StatefulSet spec fields an update may change.
const STATEFULSET_MUTABLE: [&str; 7] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

const STATEFULSET_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

const PVC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// The most a ConfigMap's or Secret's data may hold.
const MAX_DATA_BYTES: usize = 1024 * 1024;
/// The most all annotations of an object may hold, keys and values.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The bytes of a map's values; `base64`: as decoded.
fn value_bytes(obj: &Value, field: &str, base64: bool) -> usize {
    let Some(values) = obj.get(field).and_then(Value::as_object) else {
        return 0;
    };
    values
        .values()
        .filter_map(Value::as_str)
        .map(|v| {
            if base64 {
                let padding = v.bytes().rev().take_while(|b| *b == b'=').count();
                (v.len() / 4 * 3).saturating_sub(padding)
            } else {
                v.len()
            }
        })
        .sum()
}

fn annotations_size(obj: &Value, errors: &mut Vec<FieldError>) {
    let Some(annotations) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    else {
        return;
    };
    let size: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATIONS_BYTES {
        errors.push(FieldError::too_long(
            "metadata.annotations",
            MAX_ANNOTATIONS_BYTES,
        ));
    }
}

fn is_workload(rt: &ResourceType) -> bool {
    rt.group == "apps"
        && matches!(
            rt.resource.as_str(),
            "deployments" | "replicasets" | "daemonsets" | "statefulsets"
        )
}

/// Errors of an object as it would be stored (defaults applied).
pub fn on_create(rt: &ResourceType, obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    annotations_size(obj, &mut errors);
    if is_workload(rt) {
        workload_selector(rt, obj, &mut errors);
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "services") => service_ports(obj, &mut errors),
        ("", "configmaps") => {
            config_keys(obj, "data", &mut errors);
            config_keys(obj, "binaryData", &mut errors);
            let size = value_bytes(obj, "data", false) + value_bytes(obj, "binaryData", true);
            if size > MAX_DATA_BYTES {
                errors.push(FieldError::too_long("[]", MAX_DATA_BYTES));
            }
        }
        ("", "secrets") => {
            config_keys(obj, "data", &mut errors);
            if value_bytes(obj, "data", true) > MAX_DATA_BYTES {
                errors.push(FieldError::too_long("data", MAX_DATA_BYTES));
            }
        }
        ("", "pods") => {
            if let Some(spec) = obj.get("spec") {
                container_names(spec, "spec", &mut errors);
            }
        }
        _ => {}
    }
    errors
}

/// Errors of an update: the new object's own, then the fields it may not change.
pub fn on_update(rt: &ResourceType, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = on_create(rt, new);
    let old_spec = old.get("spec").unwrap_or(&Value::Null);
    let new_spec = new.get("spec").unwrap_or(&Value::Null);
    let changed = |key: &str| old_spec.get(key) != new_spec.get(key);
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("apps", "deployments" | "replicasets" | "daemonsets") if changed("selector") => {
            errors.push(FieldError::invalid(
                "spec.selector",
                new_spec.get("selector").unwrap_or(&Value::Null),
                IMMUTABLE,
            ));
        }
        ("apps", "statefulsets") => {
            let rest = |spec: &Value| -> Map<String, Value> {
                let mut map = spec.as_object().cloned().unwrap_or_default();
                map.retain(|k, _| !STATEFULSET_MUTABLE.contains(&k.as_str()));
                map
            };
            if rest(old_spec) != rest(new_spec) {
                errors.push(FieldError::forbidden("spec", STATEFULSET_FORBIDDEN));
            }
        }
        ("batch", "jobs") => {
            if changed("selector") {
                errors.push(FieldError::invalid(
                    "spec.selector",
                    new_spec.get("selector").unwrap_or(&Value::Null),
                    IMMUTABLE,
                ));
            }
            if changed("template") {
                // The real server prints the internal Go type here; the JSON form is the
                // closest this can say.
                errors.push(FieldError::invalid(
                    "spec.template",
                    new_spec.get("template").unwrap_or(&Value::Null),
                    IMMUTABLE,
                ));
            }
        }
        ("", "services") => service_cluster_ips(old_spec, new_spec, &mut errors),
        ("", "persistentvolumeclaims") => {
            let rest = |spec: &Value| -> Value {
                let mut spec = spec.clone();
                if let Some(map) = spec.as_object_mut() {
                    map.remove("volumeAttributesClassName");
                    if let Some(resources) = map.get_mut("resources").and_then(Value::as_object_mut)
                    {
                        resources.remove("requests");
                    }
                }
                spec
            };
            if rest(old_spec) != rest(new_spec) {
                errors.push(FieldError::forbidden("spec", PVC_FORBIDDEN));
            }
        }
        _ => {}
    }
    errors
}

/// An update as the server prepares it before validation: a Service's changed singular
/// `clusterIP` is copied into `clusterIPs`, and one a PUT leaves out keeps its value.
pub fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value) {
    if !(rt.group.is_empty() && rt.resource == "services") {
        return;
    }
    let old_spec = old.get("spec").cloned().unwrap_or(Value::Null);
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let external = |s: Option<&Value>| s.and_then(Value::as_str) == Some("ExternalName");
    if external(old_spec.get("type")) || external(spec.get("type")) {
        return;
    }
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v.as_str() == Some(""));
    if unset(spec.get("clusterIP"))
        && let Some(ip) = old_spec.get("clusterIP")
    {
        spec.insert("clusterIP".into(), ip.clone());
    }
    if spec.get("clusterIPs").is_none_or(Value::is_null)
        && let Some(ips) = old_spec.get("clusterIPs")
    {
        spec.insert("clusterIPs".into(), ips.clone());
    }
    let ip = spec.get("clusterIP").cloned();
    if ip.as_ref() != old_spec.get("clusterIP")
        && spec.get("clusterIPs") == old_spec.get("clusterIPs")
        && let (Some(ip), Some(ips)) =
            (ip, spec.get_mut("clusterIPs").and_then(Value::as_array_mut))
        && !ips.is_empty()
    {
        ips[0] = ip;
    }
}

fn service_cluster_ips(old_spec: &Value, new_spec: &Value, errors: &mut Vec<FieldError>) {
    let first = |spec: &Value| spec.pointer("/clusterIPs/0").cloned();
    let Some(new_first) = first(new_spec) else {
        return;
    };
    if new_spec.get("clusterIP").is_some_and(|ip| *ip != new_first) {
        errors.push(FieldError::invalid(
            "spec.clusterIPs",
            new_spec.get("clusterIPs").unwrap_or(&Value::Null),
            "first value must match `clusterIP`",
        ));
        return;
    }
    if first(old_spec).is_some_and(|old| old != new_first) {
        errors.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            new_spec.get("clusterIPs").unwrap_or(&Value::Null),
            "may not change once set",
        ));
    }
}

fn workload_selector(rt: &ResourceType, obj: &Value, errors: &mut Vec<FieldError>) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let labels = spec
        .pointer("/template/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let selector = spec.get("selector").filter(|s| !s.is_null());
    let Some(selector) = selector else {
        errors.push(FieldError::required("spec.selector"));
        errors.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &labels,
            "`selector` does not match template `labels`",
        ));
        return;
    };
    let empty = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
        && selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
    if empty {
        // An empty selector is refused on its own; the template check needs a selector.
        let kind = rt.resource.trim_end_matches('s');
        errors.push(FieldError::invalid(
            "spec.selector",
            selector,
            &format!("empty selector is invalid for {kind}"),
        ));
    } else if !selector_matches(selector, &labels) {
        errors.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &labels,
            "`selector` does not match template `labels`",
        ));
    }
}

fn service_ports(obj: &Value, errors: &mut Vec<FieldError>) {
    let Some(ports) = obj.pointer("/spec/ports").and_then(Value::as_array) else {
        return;
    };
    for (i, port) in ports.iter().enumerate() {
        let value = port.get("port").cloned().unwrap_or(json!(0));
        if !value.as_i64().is_some_and(|p| (1..=65535).contains(&p)) {
            errors.push(FieldError::invalid(
                format!("spec.ports[{i}].port"),
                &value,
                "must be between 1 and 65535, inclusive",
            ));
        }
    }
}

fn config_keys(obj: &Value, field: &str, errors: &mut Vec<FieldError>) {
    let Some(data) = obj.get(field).and_then(Value::as_object) else {
        return;
    };
    for key in data.keys() {
        let valid = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            errors.push(FieldError::invalid(
                format!("{field}[{key}]"),
                &json!(key),
                CONFIG_KEY,
            ));
        }
    }
}

fn container_names(spec: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            let Some(name) = container.get("name").and_then(Value::as_str) else {
                continue;
            };
            if !seen.insert(name.to_string()) {
                errors.push(FieldError::duplicate(
                    format!("{path}.{list}[{i}].name"),
                    &json!(name),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployments() -> ResourceType {
        ResourceType::new("apps", "v1", "deployments")
    }

    fn deployment(selector: Value, labels: Value) -> Value {
        json!({"spec": {"selector": selector, "template": {"metadata": {"labels": labels}}}})
    }

    #[test]
    fn workload_selectors_table() {
        let cases = [
            (
                json!({"matchLabels": {"app": "a"}}),
                json!({"app": "a"}),
                vec![],
            ),
            (
                json!({"matchLabels": {"app": "b"}}),
                json!({"app": "a"}),
                vec!["spec.template.metadata.labels"],
            ),
            (
                Value::Null,
                json!({"app": "a"}),
                vec!["spec.selector", "spec.template.metadata.labels"],
            ),
            (json!({}), json!({"app": "a"}), vec!["spec.selector"]),
        ];
        for (selector, labels, fields) in cases {
            let errors = on_create(&deployments(), &deployment(selector.clone(), labels));
            let got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, fields, "{selector}");
        }
    }

    #[test]
    fn immutable_fields_table() {
        let sts = ResourceType::new("apps", "v1", "statefulsets");
        let jobs = ResourceType::new("batch", "v1", "jobs");
        let pvcs = ResourceType::new("", "v1", "persistentvolumeclaims");
        let cases = [
            (
                deployments(),
                deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"})),
                deployment(
                    json!({"matchLabels": {"app": "a", "t": "w"}}),
                    json!({"app": "a", "t": "w"}),
                ),
                vec!["spec.selector"],
            ),
            (
                sts.clone(),
                json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {"labels": {"a": "1"}}}, "replicas": 1, "serviceName": "x"}}),
                json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {"labels": {"a": "1"}}}, "replicas": 3, "serviceName": "x"}}),
                vec![],
            ),
            (
                sts,
                json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {"labels": {"a": "1"}}}, "serviceName": "x"}}),
                json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {"labels": {"a": "1"}}}, "serviceName": "y"}}),
                vec!["spec"],
            ),
            (
                jobs,
                json!({"spec": {"template": {"spec": {"containers": [{"image": "a"}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"image": "b"}]}}}}),
                vec!["spec.template"],
            ),
            (
                pvcs.clone(),
                json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
                json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
                vec![],
            ),
            (
                pvcs,
                json!({"spec": {"accessModes": ["ReadWriteOnce"]}}),
                json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
                vec!["spec"],
            ),
        ];
        for (rt, old, new, fields) in cases {
            let errors = on_update(&rt, &old, &new);
            let got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, fields, "{rt} {new}");
        }
    }

    #[test]
    fn a_changed_cluster_ip_is_reported_on_cluster_ips() {
        let services = ResourceType::new("", "v1", "services");
        let old = json!({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}});
        let mut new = json!({"spec": {"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.1"]}});
        prepare_update(&services, &old, &mut new);
        let errors = on_update(&services, &old, &new);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.clusterIPs[0]");
        assert_eq!(
            errors[0].message,
            r#"Invalid value: ["10.0.0.2"]: may not change once set"#
        );

        let mut only_list = json!({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"]}});
        prepare_update(&services, &old, &mut only_list);
        let errors = on_update(&services, &old, &only_list);
        assert_eq!(errors[0].field, "spec.clusterIPs");

        // A PUT that leaves the allocated address out keeps it.
        let mut without = json!({"spec": {"ports": [{"port": 80}]}});
        prepare_update(&services, &old, &mut without);
        assert!(on_update(&services, &old, &without).is_empty());
    }

    #[test]
    fn size_limits_table() {
        let big = "x".repeat(MAX_DATA_BYTES + 1);
        let cases = [
            (
                ResourceType::new("", "v1", "configmaps"),
                json!({"data": {"a": big}}),
                vec!["[]"],
            ),
            (
                ResourceType::new("", "v1", "configmaps"),
                json!({"data": {"a": "x".repeat(MAX_DATA_BYTES)}}),
                vec![],
            ),
            (
                ResourceType::new("", "v1", "secrets"),
                json!({"data": {"a": "eHh4".repeat(MAX_DATA_BYTES / 3 + 1)}}),
                vec!["data"],
            ),
            (
                ResourceType::new("", "v1", "services"),
                json!({"metadata": {"annotations": {"a": "x".repeat(MAX_ANNOTATIONS_BYTES)}}}),
                vec!["metadata.annotations"],
            ),
        ];
        for (rt, obj, fields) in cases {
            let errors = on_create(&rt, &obj);
            let got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, fields, "{rt}");
        }
        assert_eq!(
            FieldError::too_long("data", MAX_DATA_BYTES).message,
            "Too long: may not be more than 1048576 bytes"
        );
    }

    #[test]
    fn create_time_rules_table() {
        let cases = [
            (
                ResourceType::new("", "v1", "services"),
                json!({"spec": {"ports": [{"port": 0}]}}),
                vec!["spec.ports[0].port"],
            ),
            (
                ResourceType::new("", "v1", "configmaps"),
                json!({"data": {"a b": "x", "ok.key": "y"}}),
                vec!["data[a b]"],
            ),
            (
                ResourceType::new("", "v1", "pods"),
                json!({"spec": {"containers": [{"name": "web"}, {"name": "web"}]}}),
                vec!["spec.containers[1].name"],
            ),
        ];
        for (rt, obj, fields) in cases {
            let errors = on_create(&rt, &obj);
            let got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, fields, "{rt}");
        }
    }
}
