//! Structural-schema checks for custom resources: the one a server-side apply makes before it
//! builds its typed patch. A field the CRD's `openAPIV3Schema` does not declare fails the
//! apply with a 500 (`.spec.extra: field not declared in schema`), as recorded from a real
//! API server. Built-in kinds are not checked: the simulator serves no schemas for them.

use serde_json::Value;

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
    fn a_schema_that_preserves_unknown_fields_declares_everything() {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(undeclared_field(&schema, &json!({"spec": {"a": 1}})), None);
    }
}
