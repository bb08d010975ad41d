//! Parse one file: multi-document YAML (line-aware) or JSON, `*List` objects flattened, each
//! document validated into objects or issues, all problems of the file together.

use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

use super::model::*;
use crate::util::bounded;
use crate::util::yaml::{self, Node, Tree};

/// Parses one file's text: multi-document YAML, or JSON (one value or a stream) for *.json.
/// All problems of the file are returned together.
pub fn parse(text: &str, file: &Path) -> Result<Vec<ManifestObject>, ManifestError> {
    yaml::on_parser_stack(|| parse_here(text, file)).unwrap_or_else(|e| {
        Err(ManifestError::Invalid(vec![ManifestIssue {
            origin: Origin {
                file: file.to_path_buf(),
                line: 0,
            },
            message: e.to_string(),
        }]))
    })
}

fn parse_here(text: &str, file: &Path) -> Result<Vec<ManifestObject>, ManifestError> {
    let mut objects = Vec::new();
    let mut issues = Vec::new();
    let issue = |line: usize, message: String| ManifestIssue {
        origin: Origin {
            file: file.to_path_buf(),
            line,
        },
        message,
    };

    if is_kustomization_file(file) {
        return Err(ManifestError::Invalid(vec![issue(
            1,
            KUSTOMIZE_MESSAGE.to_string(),
        )]));
    }

    let is_json = file.extension().is_some_and(|e| e == "json");
    if is_json {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<StrictValue>();
        loop {
            let start_line = line_of_offset(text, skip_ws(text, stream.byte_offset()));
            match stream.next() {
                None => break,
                Some(Ok(StrictValue(value))) => match yaml::json_number_problem(&value) {
                    Some(problem) => issues.push(issue(start_line, problem)),
                    None => collect(&value, start_line, None, file, &mut objects, &mut issues),
                },
                Some(Err(e)) => {
                    issues.push(issue(e.line(), format!("not valid JSON: {e}")));
                    break;
                }
            }
        }
    } else {
        let docs = match yaml::split_documents(text) {
            Ok(docs) => docs,
            Err(e) => {
                issues.push(issue(e.line, e.message));
                Vec::new()
            }
        };
        for doc in docs {
            match yaml::parse_document(&doc) {
                Ok(node) => {
                    if matches!(node.value, Tree::Null) {
                        continue;
                    }
                    let value = node.to_json();
                    collect(
                        &value,
                        node.line,
                        Some(&node),
                        file,
                        &mut objects,
                        &mut issues,
                    );
                }
                Err(e) => issues.push(issue(e.line, format!("not valid YAML: {}", e.message))),
            }
        }
    }
    let last_line = issues
        .get(bounded::MAX_ISSUES_PER_FILE)
        .map_or(0, |i| i.origin.line);
    bounded::cap_issues(&mut issues, |more| {
        issue(
            last_line,
            format!(
                "... and {more} more problems in this file (only the first {} are shown)",
                bounded::MAX_ISSUES_PER_FILE
            ),
        )
    });
    if issues.is_empty() {
        Ok(objects)
    } else {
        Err(ManifestError::Invalid(issues))
    }
}

const KUSTOMIZE_MESSAGE: &str = "is a kustomize input, not a manifest: use `render: kustomize build <dir>` in rollguard.yaml instead of listing it";

fn is_kustomization_file(file: &Path) -> bool {
    matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("kustomization.yaml" | "kustomization.yml" | "Kustomization")
    )
}

fn skip_ws(text: &str, offset: usize) -> usize {
    let rest = &text[offset.min(text.len())..];
    offset + (rest.len() - rest.trim_start().len())
}

fn line_of_offset(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Validates one document (flattening `*List` objects) into `objects`, or explains in `issues`.
fn collect(
    value: &Value,
    line: usize,
    node: Option<&Node>,
    file: &Path,
    objects: &mut Vec<ManifestObject>,
    issues: &mut Vec<ManifestIssue>,
) {
    let mut problem = |message: String| {
        issues.push(ManifestIssue {
            origin: Origin {
                file: file.to_path_buf(),
                line,
            },
            message,
        })
    };
    let Some(map) = value.as_object() else {
        let what = match value {
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            _ => "null",
        };
        problem(format!(
            "this document is {what}, not a Kubernetes object (a mapping with apiVersion, kind and metadata.name)"
        ));
        return;
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.starts_with("kustomize.config.k8s.io/") {
        problem(format!("{kind} {KUSTOMIZE_MESSAGE}"));
        return;
    }
    // `kind: List` (and `DeploymentList` etc.): flatten its items, nested lists too.
    if kind.ends_with("List")
        && let Some(items) = map.get("items").and_then(Value::as_array)
    {
        let item_nodes = node.and_then(|n| match &n.get("items")?.value {
            Tree::Seq(nodes) => Some(nodes),
            _ => None,
        });
        for (i, item) in items.iter().enumerate() {
            let item_node = item_nodes.and_then(|nodes| nodes.get(i));
            let item_line = item_node.map_or(line, |n| n.line);
            collect(item, item_line, item_node, file, objects, issues);
        }
        return;
    }
    let mut missing = Vec::new();
    if api_version.is_empty() {
        missing.push("apiVersion");
    }
    if kind.is_empty() {
        missing.push("kind");
    }
    let metadata = map.get("metadata").and_then(Value::as_object);
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let generate_name = metadata
        .and_then(|m| m.get("generateName"))
        .and_then(Value::as_str);
    let label = if kind.is_empty() {
        "object".to_string()
    } else {
        kind.to_string()
    };
    if name.is_empty() {
        if let Some(prefix) = generate_name {
            problem(format!(
                "{label} with generateName {prefix:?} cannot be applied: server-side apply needs metadata.name; give it a fixed name"
            ));
            return;
        }
        missing.push("metadata.name");
    }
    if !missing.is_empty() {
        let named = if name.is_empty() {
            String::new()
        } else {
            format!(" {name:?}")
        };
        problem(format!("{label}{named} is missing {}", missing.join(", ")));
        return;
    }
    let namespace = match metadata.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) if !ns.is_empty() => Some(ns.clone()),
        Some(other) => {
            problem(format!(
                "{kind} {name:?}: metadata.namespace must be a non-empty string, not {other}"
            ));
            return;
        }
    };
    let mut body = value.clone();
    // Exported objects (`kubectl get -o yaml`) carry managedFields, which apply refuses.
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    objects.push(ManifestObject {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace,
        origin: Origin {
            file: file.to_path_buf(),
            line,
        },
        body,
        source: node.map(|n| Arc::new(n.clone())),
    });
}

/// A JSON value whose objects may not repeat a key: serde_json keeps the last one silently,
/// and the YAML reader refuses the same (a key given twice is a mistake, with its line).
struct StrictValue(Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.insert(key.clone(), value).is_some() {
                return Err(serde::de::Error::custom(format!(
                    "key {key:?} is given twice in one object; keep one"
                )));
            }
        }
        Ok(Value::Object(object))
    }
}
