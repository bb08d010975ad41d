//! What a diff compares: an object without what the server owns, Secret values redacted, and
//! without the fields server defaulting filled in identically on both sides. Pure functions,
//! tested by table; the dry run, the offline plan and `rollback --dry-run` all use them.

use serde_json::{Map, Value};

use crate::report::redact;

/// Metadata the server writes on every change; it says nothing about what would change.
const SERVER_METADATA: [&str; 7] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
    "deletionGracePeriodSeconds",
];

/// A copy without server-owned fields (`status`, `metadata.managedFields`,
/// `resourceVersion`, `uid`, `generation`, `creationTimestamp`, the last-applied annotation),
/// with Secret values redacted and every map's keys in order.
pub fn normalize(obj: &Value) -> Value {
    let mut out = redact::redact_object(obj);
    if let Some(map) = out.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_METADATA {
                meta.remove(field);
            }
            if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                annotations.remove(redact::LAST_APPLIED);
                if annotations.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
    sorted(out)
}

/// Every map with its keys sorted, so that two servers' key orders never show as a change.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Where in the object a map is: identity fields are kept at the top and in metadata.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Inner,
}

/// Fields that identify the object: kept even when equal, so a diff says what it is about.
fn is_identity(level: Level, key: &str) -> bool {
    match level {
        Level::Top => matches!(key, "apiVersion" | "kind" | "metadata"),
        Level::Metadata => matches!(key, "name" | "namespace"),
        Level::Inner => false,
    }
}

/// Removes from both sides the fields the manifest does not set and that are equal on both
/// sides: what server defaulting (or another controller) filled in and the change leaves as
/// it is (`terminationMessagePath`, `dnsPolicy`, a Deployment's revision annotation...).
/// What the manifest sets, and anything that differs, stays.
pub fn drop_unchanged_defaults(before: &mut Value, after: &mut Value, manifest: &Value) {
    prune(before, after, Some(manifest), Level::Top);
}

fn prune(before: &mut Value, after: &mut Value, manifest: Option<&Value>, level: Level) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let keys: Vec<String> = a.keys().cloned().collect();
            for key in keys {
                let set = manifest.and_then(|m| m.get(&key));
                let (Some(bv), Some(av)) = (b.get_mut(&key), a.get_mut(&key)) else {
                    continue;
                };
                if is_identity(level, &key) {
                    if level == Level::Top && key == "metadata" {
                        prune(bv, av, set, Level::Metadata);
                    }
                    continue;
                }
                if set.is_none() && bv == av {
                    b.remove(&key);
                    a.remove(&key);
                    continue;
                }
                let had = (is_filled(bv), is_filled(av));
                prune(bv, av, set, Level::Inner);
                // A map or list that pruning emptied on one side says nothing: drop it there.
                if had.0 && !is_filled(bv) {
                    b.remove(&key);
                }
                if had.1 && !is_filled(av) {
                    a.remove(&key);
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter_mut().zip(a.iter_mut()).enumerate() {
                let set = manifest.and_then(|m| matching_item(m, av, i));
                prune(bv, av, set, Level::Inner);
            }
        }
        _ => {}
    }
}

fn is_filled(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// The manifest's item for a list item: by `name` when items have one (containers, ports,
/// env), else by position.
fn matching_item<'m>(manifest: &'m Value, item: &Value, index: usize) -> Option<&'m Value> {
    let items = manifest.as_array()?;
    match item.get("name").and_then(Value::as_str) {
        Some(name) => items
            .iter()
            .find(|m| m.get("name").and_then(Value::as_str) == Some(name)),
        None => items.get(index),
    }
}

/// The two sides of a diff, ready to print: normalised, with unchanged defaults dropped.
/// `before` is None for an object that does not exist yet.
pub fn comparable(
    before: Option<&Value>,
    after: &Value,
    manifest: &Value,
) -> (Option<Value>, Value) {
    let mut after = normalize(after);
    let Some(before) = before else {
        return (None, after);
    };
    let mut before = normalize(before);
    drop_unchanged_defaults(&mut before, &mut after, &normalize(manifest));
    (Some(before), after)
}

/// An object as YAML for a diff (JSON, which is YAML too, if it cannot be written as YAML).
pub fn to_yaml(obj: &Value) -> String {
    match serde_saphyr::to_string(obj) {
        Ok(mut text) => {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text
        }
        Err(_) => format!(
            "{}\n",
            serde_json::to_string_pretty(obj).unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalize_table() {
        let cases = vec![
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                        "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                        "managedFields": [{"manager": "rollguard"}],
                        "annotations": {(redact::LAST_APPLIED): "{}"}},
                    "data": {"b": "2", "a": "1"}, "status": {"x": 1}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "shop"}, "data": {"a": "1", "b": "2"}}),
            ),
            // Other annotations stay; Secret values become markers.
            (
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "s", "annotations": {"team": "web"}},
                    "data": {"p": "aHVudGVyMg=="}}),
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "s", "annotations": {"team": "web"}},
                    "data": {"p": redact::marker(b"hunter2")}}),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(&input), want, "{input}");
        }
    }

    fn deployment(image: &str, extra_annotation: bool) -> Value {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"deployment.kubernetes.io/revision": "1"}},
            "spec": {"replicas": 2, "revisionHistoryLimit": 10,
                "strategy": {"type": "RollingUpdate"},
                "template": {"spec": {"dnsPolicy": "ClusterFirst", "containers": [
                    {"name": "web", "image": image, "terminationMessagePath": "/dev/termination-log"}]}}}});
        if extra_annotation {
            d["metadata"]["annotations"]["note"] = json!("x");
        }
        d
    }

    #[test]
    fn unchanged_defaults_are_dropped_on_both_sides() {
        let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "web", "image": "web:v2"}]}}}});
        let (before, after) = comparable(
            Some(&deployment("web:v1", true)),
            &deployment("web:v2", false),
            &manifest,
        );
        let want_before = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"note": "x"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "web", "image": "web:v1"}]}}}});
        let want_after = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "web", "image": "web:v2"}]}}}});
        assert_eq!(before, Some(want_before));
        assert_eq!(after, want_after);
    }

    #[test]
    fn prune_table() {
        // (before, after, manifest, want before, want after)
        let cases = vec![
            // Equal and not in the manifest: gone from both.
            (
                json!({"kind": "X", "spec": {"a": 1, "d": 5}}),
                json!({"kind": "X", "spec": {"a": 2, "d": 5}}),
                json!({"spec": {"a": 2}}),
                json!({"kind": "X", "spec": {"a": 1}}),
                json!({"kind": "X", "spec": {"a": 2}}),
            ),
            // Not in the manifest but different: kept (someone else changed it).
            (
                json!({"spec": {"d": 5}}),
                json!({"spec": {"d": 6}}),
                json!({}),
                json!({"spec": {"d": 5}}),
                json!({"spec": {"d": 6}}),
            ),
            // In the manifest and equal: kept as context.
            (
                json!({"spec": {"a": 1}}),
                json!({"spec": {"a": 1}}),
                json!({"spec": {"a": 1}}),
                json!({"spec": {"a": 1}}),
                json!({"spec": {"a": 1}}),
            ),
            // Only on one side: kept (a removal or an addition).
            (
                json!({"spec": {"old": 1}}),
                json!({"spec": {}}),
                json!({"spec": {}}),
                json!({"spec": {"old": 1}}),
                json!({"spec": {}}),
            ),
            // Lists by name, else by position.
            (
                json!({"c": [{"name": "b", "x": 1, "d": 0}, {"name": "a", "x": 1, "d": 0}]}),
                json!({"c": [{"name": "b", "x": 2, "d": 0}, {"name": "a", "x": 1, "d": 0}]}),
                json!({"c": [{"name": "a", "x": 1}, {"name": "b", "x": 2}]}),
                json!({"c": [{"name": "b", "x": 1}, {"name": "a", "x": 1}]}),
                json!({"c": [{"name": "b", "x": 2}, {"name": "a", "x": 1}]}),
            ),
            // The identity stays even when the manifest leaves it out.
            (
                json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "namespace": "s", "uid": "1"}}),
                json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "namespace": "s", "uid": "1"}}),
                json!({}),
                json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "namespace": "s"}}),
                json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "namespace": "s"}}),
            ),
        ];
        for (mut before, mut after, manifest, want_before, want_after) in cases {
            drop_unchanged_defaults(&mut before, &mut after, &manifest);
            assert_eq!((&before, &after), (&want_before, &want_after), "{manifest}");
        }
    }
}
