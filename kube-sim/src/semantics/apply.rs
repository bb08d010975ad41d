//! Server-side apply (field ownership, conflicts, removal of fields a manager stopped
//! sending) and the other patch types: JSON merge patch, strategic merge patch, JSON patch.

use serde_json::{Map, Value, json};

use crate::model::error::ApiError;
use crate::model::resource::metadata_mut;
use crate::semantics::managed_fields::{
    FieldSet, ListType, ManagedEntry, SetMode, display_path, element_value, item_key, list_type,
    read_entries, write_entries,
};
use crate::semantics::schema::Declaration;

/// What an apply needs to know of the kind it writes.
pub struct Kind<'a> {
    pub api_version: String,
    pub kind: &'a str,
    pub namespaced: bool,
    /// Whether status is a subresource (then the main resource ignores it).
    pub status_is_separate: bool,
    /// What the kind declares, for the undeclared-field check (None: not checked).
    pub declaration: Option<Declaration<'a>>,
}

/// An apply configuration checked and reduced to what this apply owns.
pub struct Prepared {
    pub config: Value,
    /// The fields the configuration sets: what its manager owns afterwards.
    pub applied_set: FieldSet,
    /// The configuration's resourceVersion, a precondition when given.
    pub expected_resource_version: Option<String>,
    pub status_only: bool,
}

/// Checks a configuration against the kind and the URL (identity, undeclared fields) and
/// computes the field set it applies.
pub fn prepare(
    kind: &Kind<'_>,
    namespace: &str,
    name: &str,
    config: Value,
    subresource: Option<&str>,
) -> Result<Prepared, ApiError> {
    let mut config = config;
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the apply configuration must be an object",
        ));
    }
    check_identity(
        &mut config,
        &kind.api_version,
        kind.kind,
        namespace,
        name,
        kind.namespaced,
    )?;
    let object = if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    };
    let gvk = match kind.api_version.split_once('/') {
        Some(_) => format!("{}, Kind={}", kind.api_version, kind.kind),
        None => format!("/{}, Kind={}", kind.api_version, kind.kind),
    };
    // A value of the wrong type fails the typed patch, as structured-merge-diff says it.
    let type_error = kind
        .declaration
        .and_then(|d| crate::semantics::schema::type_error(d, &config));
    if let Some(e) = type_error.as_ref().filter(|e| !e.out_of_range) {
        return Err(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({object}; {}, Kind={}): {}: expected {}, got {}",
                kind.api_version,
                kind.kind,
                e.path.apply_path,
                e.schema_type(),
                e.schema_found()
            ),
        ));
    }
    // The server converts the merged object to its type: what does not decode is a 500.
    let decode_error = type_error
        .map(|e| e.go_message(kind.kind))
        .or_else(|| crate::semantics::decode::decode_error(&kind.api_version, kind.kind, &config));
    if let Some(error) = decode_error {
        return Err(ApiError::new(
            500,
            "",
            format!(
                "failed to convert new object ({object}; {gvk}) to proper version: unable to convert unstructured object to {gvk}: error decoding from json: {error}"
            ),
        ));
    }
    let undeclared: Vec<String> = kind
        .declaration
        .map(|d| crate::semantics::schema::undeclared(d, &mut config, false))
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.apply_path)
        .collect();
    if !undeclared.is_empty() {
        return Err(ApiError::undeclared_fields(
            &object,
            &kind.api_version,
            kind.kind,
            &undeclared,
        ));
    }
    let status_only = subresource == Some("status");
    let expected_resource_version = take_server_metadata(&mut config);
    if status_only {
        // Only status counts for an apply to /status.
        if let Some(map) = config.as_object_mut() {
            map.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.retain(|k, _| k == "name" || k == "namespace");
            }
        }
    } else if kind.status_is_separate
        && let Some(map) = config.as_object_mut()
    {
        map.remove("status");
    }
    let applied_set = FieldSet::of_object(
        &config,
        SetMode::Apply,
        !kind.status_is_separate,
        status_only,
    );
    Ok(Prepared {
        config,
        applied_set,
        expected_resource_version,
        status_only,
    })
}

/// Who applies, and when.
pub struct Applier<'a> {
    pub manager: &'a str,
    pub subresource: Option<&'a str>,
    pub force: bool,
    pub api_version: &'a str,
    /// The time recorded in managedFields.
    pub now: &'a str,
}

impl Applier<'_> {
    fn owns(&self, e: &ManagedEntry) -> bool {
        e.manager == self.manager
            && e.operation == "Apply"
            && e.subresource.as_deref() == self.subresource
    }
}

/// The object an apply creates: the configuration with its manager owning all of it.
pub fn new_object(prepared: &Prepared, by: &Applier<'_>) -> Value {
    let mut obj = prepared.config.clone();
    let entry = ManagedEntry {
        manager: by.manager.to_string(),
        operation: "Apply".into(),
        api_version: by.api_version.to_string(),
        time: by.now.to_string(),
        subresource: None,
        fields: prepared.applied_set.clone(),
    };
    // A real server decodes into its types, which have no null: `limits: null` is dropped.
    drop_nulls(&mut obj);
    write_entries(&mut obj, &[entry]);
    obj
}

/// Removes every map entry whose value is null, at any depth (list items are kept).
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Applies a configuration to the live object: 409 on fields another manager owns with a
/// different value (unless forced, which takes them over), else the merged object with its
/// managedFields, without the fields this manager stopped sending that nobody else owns.
pub fn merge_onto(
    current: &Value,
    prepared: &Prepared,
    by: &Applier<'_>,
) -> Result<Value, ApiError> {
    let config = &prepared.config;
    let applied_set = &prepared.applied_set;
    let mut entries = read_entries(current);

    // Conflicts: fields another manager owns with a different value.
    let mut conflicts: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if entry.manager == by.manager {
            continue;
        }
        let overlap = entry.fields.intersection(applied_set);
        for path in overlap.paths() {
            if !is_leaf(applied_set, &path) {
                continue;
            }
            if value_at(current, &path) != value_at(config, &path) {
                conflicts.push((i, path));
            }
        }
    }
    if !conflicts.is_empty() && !by.force {
        return Err(conflict_error(&entries, &conflicts));
    }

    // Merge the configuration into the live object.
    let mut merged = current.clone();
    merge_into("", &mut merged, config);
    // Nulls below fields the live object did not have yet arrive with them.
    drop_nulls(&mut merged);

    // Ownership after this apply.
    let previous = entries
        .iter()
        .find(|e| by.owns(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    if by.force {
        for (i, path) in &conflicts {
            let lost = single_path(path);
            entries[*i].fields = entries[*i].fields.difference(&lost);
        }
    }
    match entries.iter_mut().find(|e| by.owns(e)) {
        Some(e) => {
            e.fields = applied_set.clone();
            e.time = by.now.to_string();
            e.api_version = by.api_version.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: by.manager.to_string(),
            operation: "Apply".into(),
            api_version: by.api_version.to_string(),
            time: by.now.to_string(),
            subresource: by.subresource.map(str::to_string),
            fields: applied_set.clone(),
        }),
    }

    // Fields this manager stopped sending, that nobody else owns, go away.
    let others = entries
        .iter()
        .filter(|e| !by.owns(e))
        .fold(FieldSet::default(), |acc, e| acc.union(&e.fields));
    let mut dropped = previous.difference(applied_set).paths();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in dropped {
        if !owned_at_or_below(&others, &path) {
            remove_path(&mut merged, &path);
        }
    }
    let existing = FieldSet::of_object(&merged, SetMode::All, true, false);
    for e in entries.iter_mut() {
        e.fields = e.fields.intersection(&existing);
    }
    write_entries(&mut merged, &entries);
    Ok(merged)
}

/// Checks name, namespace, apiVersion and kind of an apply configuration against the URL
/// and fills in what the configuration leaves out.
fn check_identity(
    config: &mut Value,
    api_version: &str,
    kind: &str,
    namespace: &str,
    url_name: &str,
    namespaced: bool,
) -> Result<(), ApiError> {
    let body_api_version = config.get("apiVersion").and_then(Value::as_str);
    if let Some(v) = body_api_version
        && v != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = config.get("kind").and_then(Value::as_str)
        && k != kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({kind})"
        )));
    }
    if config.get("apiVersion").is_none() || config.get("kind").is_none() {
        return Err(ApiError::bad_request(
            "error decoding YAML: Object 'Kind' is missing in the apply configuration",
        ));
    }
    let meta = metadata_mut(config);
    let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
        )));
    }
    if name != url_name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({url_name})"
        )));
    }
    if meta.contains_key("managedFields") {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    if namespaced {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(ns) if !ns.is_empty() && ns != namespace => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(namespace));
            }
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

/// Removes server-owned metadata from a configuration; returns its resourceVersion, which
/// acts as a precondition.
fn take_server_metadata(config: &mut Value) -> Option<String> {
    let meta = metadata_mut(config);
    for field in [
        "uid",
        "creationTimestamp",
        "generation",
        "selfLink",
        "deletionTimestamp",
    ] {
        meta.remove(field);
    }
    meta.remove("resourceVersion")
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|v| !v.is_empty())
}

fn is_leaf(set: &FieldSet, path: &[String]) -> bool {
    let mut node = set;
    for element in path {
        match node.children.get(element) {
            Some(child) => node = child,
            None => return false,
        }
    }
    node.children.is_empty()
}

/// The set holding exactly one path.
fn single_path(path: &[String]) -> FieldSet {
    let mut root = FieldSet::default();
    let mut node = &mut root;
    for element in path {
        node = node.children.entry(element.clone()).or_default();
    }
    node.member = true;
    root
}

fn owned_at_or_below(set: &FieldSet, path: &[String]) -> bool {
    let mut node = set;
    for element in path {
        match node.children.get(element) {
            Some(child) => node = child,
            None => return false,
        }
    }
    !node.is_empty()
}

/// The value a field path names in an object.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = obj;
    for element in path {
        v = element_value(v, element)?;
    }
    Some(v)
}

/// Removes the field or list item a path names.
fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut v = obj;
    for element in parents {
        let next = match element_index(v, element) {
            Some(Step::Field(f)) => v.get_mut(&f),
            Some(Step::Index(i)) => v.get_mut(i),
            None => None,
        };
        match next {
            Some(n) => v = n,
            None => return,
        }
    }
    match element_index(v, last) {
        Some(Step::Field(f)) => {
            if let Some(m) = v.as_object_mut() {
                m.remove(&f);
            }
        }
        Some(Step::Index(i)) => {
            if let Some(a) = v.as_array_mut() {
                a.remove(i);
            }
        }
        None => {}
    }
}

enum Step {
    Field(String),
    Index(usize),
}

fn element_index(v: &Value, element: &str) -> Option<Step> {
    if let Some(f) = element.strip_prefix("f:") {
        return Some(Step::Field(f.to_string()));
    }
    let target = element_value(v, element)?;
    let index = v
        .as_array()?
        .iter()
        .position(|item| std::ptr::eq(item, target))?;
    Some(Step::Index(index))
}

/// Merges an apply configuration into a live value: maps field by field, keyed lists item
/// by item, set lists as a union, everything else replaced.
pub fn merge_into(field: &str, live: &mut Value, config: &Value) {
    match config {
        Value::Object(cfg) if field != "selector" => {
            if !live.is_object() {
                *live = json!({});
            }
            let Some(live_map) = live.as_object_mut() else {
                return;
            };
            for (k, v) in cfg {
                if v.is_null() {
                    live_map.remove(k);
                    continue;
                }
                match live_map.get_mut(k) {
                    Some(existing) => merge_into(k, existing, v),
                    None => {
                        live_map.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        Value::Array(items) => match list_type(field, items) {
            ListType::Map(keys) => {
                let Some(live_items) = live.as_array_mut() else {
                    *live = config.clone();
                    return;
                };
                let mut out: Vec<Value> = Vec::with_capacity(items.len());
                for item in items {
                    let key = item_key(&keys, item);
                    let pos = live_items
                        .iter()
                        .position(|l| key.is_some() && item_key(&keys, l) == key);
                    match pos {
                        Some(p) => {
                            let mut existing = live_items.remove(p);
                            merge_into("", &mut existing, item);
                            out.push(existing);
                        }
                        None => out.push(item.clone()),
                    }
                }
                // Items only the live object has stay, after the configured ones.
                out.append(live_items);
                *live = Value::Array(out);
            }
            ListType::Set => {
                let Some(live_items) = live.as_array_mut() else {
                    *live = config.clone();
                    return;
                };
                for item in items {
                    if !live_items.contains(item) {
                        live_items.push(item.clone());
                    }
                }
            }
            ListType::Atomic => *live = config.clone(),
        },
        _ => *live = config.clone(),
    }
}

fn conflict_error(entries: &[ManagedEntry], conflicts: &[(usize, Vec<String>)]) -> ApiError {
    let n = conflicts.len();
    let mut by_manager: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, path) in conflicts {
        let shown = display_path(path);
        match by_manager.iter_mut().find(|(m, _)| m == i) {
            Some((_, paths)) => paths.push(shown),
            None => by_manager.push((*i, vec![shown])),
        }
    }
    let manager_label = |i: usize| {
        let e = &entries[i];
        if e.operation == "Update" {
            format!("\"{}\" using {}", e.manager, e.api_version)
        } else {
            format!("\"{}\"", e.manager)
        }
    };
    let parts: Vec<String> = by_manager
        .iter()
        .map(|(i, paths)| {
            if paths.len() == 1 {
                format!("conflict with {}: {}", manager_label(*i), paths[0])
            } else {
                let lines: Vec<String> = paths.iter().map(|p| format!("- {p}")).collect();
                format!(
                    "conflicts with {}:\n{}",
                    manager_label(*i),
                    lines.join("\n")
                )
            }
        })
        .collect();
    let message = format!(
        "Apply failed with {n} conflict{}: {}",
        if n == 1 { "" } else { "s" },
        parts.join("\n")
    );
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(i, path)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", manager_label(*i)),
                "field": display_path(path),
            })
        })
        .collect();
    ApiError::new(409, "Conflict", message).with_details(json!({ "causes": causes }))
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target_map) = target.as_object_mut() else {
        return;
    };
    for (k, v) in patch_map {
        if v.is_null() {
            target_map.remove(k);
        } else {
            let entry = target_map.entry(k.clone()).or_insert(Value::Null);
            merge_patch(entry, v);
        }
    }
}

/// Strategic merge patch: a merge patch in which lists that Kubernetes keys (containers,
/// env, ports, volumes, ...) merge item by item; `$patch: delete` removes an item and
/// `$`-directives are otherwise ignored.
pub fn strategic_merge_patch(field: &str, target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch_map) => {
            if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
                let mut replacement = patch.clone();
                if let Some(m) = replacement.as_object_mut() {
                    m.remove("$patch");
                }
                *target = replacement;
                return;
            }
            if !target.is_object() {
                *target = json!({});
            }
            let Some(target_map) = target.as_object_mut() else {
                return;
            };
            for (k, v) in patch_map {
                if k.starts_with('$') {
                    continue;
                }
                if v.is_null() {
                    target_map.remove(k);
                    continue;
                }
                let entry = target_map.entry(k.clone()).or_insert(Value::Null);
                strategic_merge_patch(k, entry, v);
            }
        }
        Value::Array(items) => match list_type(field, items) {
            ListType::Map(keys) if target.is_array() => {
                let Some(live) = target.as_array_mut() else {
                    return;
                };
                for item in items {
                    let key = item_key(&keys, item);
                    let pos = live
                        .iter()
                        .position(|l| key.is_some() && item_key(&keys, l) == key);
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match (pos, delete) {
                        (Some(p), true) => {
                            live.remove(p);
                        }
                        (None, true) => {}
                        (Some(p), false) => strategic_merge_patch("", &mut live[p], item),
                        (None, false) => {
                            let mut clean = item.clone();
                            strip_directives(&mut clean);
                            live.push(clean);
                        }
                    }
                }
            }
            _ => {
                let mut clean = patch.clone();
                strip_directives(&mut clean);
                *target = clean;
            }
        },
        _ => *target = patch.clone(),
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Why a JSON patch (RFC 6902) does not apply, in the API server's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPatchError {
    #[error("a JSON patch must be a list of operations")]
    NotAList,
    /// An operation without a field it needs ("operation without op", "add without value").
    #[error("{0} without {1}")]
    Without(&'static str, &'static str),
    #[error("{op} operation does not apply: doc is missing path: {path}")]
    MissingPath { op: &'static str, path: String },
    #[error("copy from a missing path: {0}")]
    CopyFrom(String),
    #[error("testing value {0} failed")]
    TestFailed(String),
    #[error("unexpected operation {0:?}")]
    Operation(String),
    #[error("invalid path {0:?}")]
    Path(String),
    #[error("invalid index {0:?}")]
    Index(String),
    #[error("index {0} out of bounds")]
    OutOfBounds(usize),
    #[error("add operation does not apply at {0}")]
    AddAt(String),
}

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test).
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    use JsonPatchError::Without;
    let ops = patch.as_array().ok_or(JsonPatchError::NotAList)?;
    for op in ops {
        let text = |field: &'static str, what: &'static str| {
            op.get(field)
                .and_then(Value::as_str)
                .ok_or(Without(what, field))
        };
        let value = |what: &'static str| op.get("value").ok_or(Without(what, "value"));
        let kind = text("op", "operation")?;
        let path = text("path", "operation")?;
        match kind {
            "add" => pointer_add(target, path, value("add")?.clone())?,
            "remove" => {
                pointer_remove(target, path)?;
            }
            "replace" => {
                let value = value("replace")?.clone();
                let slot = target
                    .pointer_mut(path)
                    .ok_or_else(|| JsonPatchError::MissingPath {
                        op: "replace",
                        path: path.to_string(),
                    })?;
                *slot = value;
            }
            "move" | "copy" => {
                let from = text("from", "move/copy")?;
                let value = if kind == "move" {
                    pointer_remove(target, from)?
                } else {
                    target
                        .pointer(from)
                        .cloned()
                        .ok_or_else(|| JsonPatchError::CopyFrom(from.to_string()))?
                };
                pointer_add(target, path, value)?;
            }
            "test" => {
                if target.pointer(path) != Some(value("test")?) {
                    return Err(JsonPatchError::TestFailed(path.to_string()));
                }
            }
            other => return Err(JsonPatchError::Operation(other.to_string())),
        }
    }
    Ok(())
}

fn split_pointer(path: &str) -> Result<(String, String), JsonPatchError> {
    let idx = path
        .rfind('/')
        .ok_or_else(|| JsonPatchError::Path(path.to_string()))?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn pointer_add(target: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let parent_v = target
        .pointer_mut(&parent)
        .ok_or_else(|| JsonPatchError::MissingPath {
            op: "add",
            path: parent.clone(),
        })?;
    match parent_v {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| JsonPatchError::Index(last))?;
            if i > a.len() {
                return Err(JsonPatchError::OutOfBounds(i));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(JsonPatchError::AddAt(path.to_string())),
    }
}

fn pointer_remove(target: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let (parent, last) = split_pointer(path)?;
    let missing = || JsonPatchError::MissingPath {
        op: "remove",
        path: path.to_string(),
    };
    match target.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i < a.len() {
                Ok(a.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

/// Keeps only the given keys of a JSON object (used for tests and bookkeeping).
pub fn pick(obj: &Value, keys: &[&str]) -> Value {
    let mut out = Map::new();
    if let Some(m) = obj.as_object() {
        for k in keys {
            if let Some(v) = m.get(*k) {
                out.insert((*k).to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut t, &json!({"a": null, "b": {"c": 5}}));
        assert_eq!(t, json!({"b": {"c": 5, "d": 3}}));
    }

    #[test]
    fn strategic_patch_merges_containers_by_name() {
        let mut t =
            json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]});
        strategic_merge_patch(
            "",
            &mut t,
            &json!({"containers": [{"name": "b", "image": "z"}],
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}]}),
        );
        assert_eq!(t["containers"][0]["image"], "x");
        assert_eq!(t["containers"][1]["image"], "z");
    }

    #[test]
    fn an_apply_stores_no_null() {
        let config = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": null, "requests": {"cpu": "1"}}}]}});
        let prepared = Prepared {
            config: config.clone(),
            applied_set: FieldSet::default(),
            expected_resource_version: None,
            status_only: false,
        };
        let by = Applier {
            manager: "m",
            subresource: None,
            force: false,
            api_version: "v1",
            now: "2026-12-01T00:00:00Z",
        };
        let want = json!({"name": "a", "resources": {"requests": {"cpu": "1"}}});
        // Created, and merged onto an object without that part.
        let created = new_object(&prepared, &by);
        assert_eq!(created["spec"]["containers"][0], want, "{created:#}");
        let merged = merge_onto(&json!({"spec": {}}), &prepared, &by).expect("merges");
        assert_eq!(merged["spec"]["containers"][0], want, "{merged:#}");
    }

    #[test]
    fn json_patch_ops() {
        let mut t = json!({"a": [1, 2], "b": "x"});
        json_patch(
            &mut t,
            &json!([{"op": "add", "path": "/a/-", "value": 3},
            {"op": "replace", "path": "/b", "value": "y"}, {"op": "remove", "path": "/a/0"}]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": [2, 3], "b": "y"}));
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }

    /// A patch that does not apply is told in the API server's words (the 422's message).
    #[test]
    fn json_patch_refusals() {
        let cases = [
            (json!({}), "a JSON patch must be a list of operations"),
            (json!([{"path": "/a"}]), "operation without op"),
            (json!([{"op": "add"}]), "operation without path"),
            (json!([{"op": "add", "path": "/a"}]), "add without value"),
            (
                json!([{"op": "replace", "path": "/a"}]),
                "replace without value",
            ),
            (json!([{"op": "test", "path": "/a"}]), "test without value"),
            (
                json!([{"op": "move", "path": "/a"}]),
                "move/copy without from",
            ),
            (
                json!([{"op": "replace", "path": "/x", "value": 1}]),
                "replace operation does not apply: doc is missing path: /x",
            ),
            (
                json!([{"op": "add", "path": "/x/y", "value": 1}]),
                "add operation does not apply: doc is missing path: /x",
            ),
            (
                json!([{"op": "remove", "path": "/x"}]),
                "remove operation does not apply: doc is missing path: /x",
            ),
            (
                json!([{"op": "copy", "from": "/x", "path": "/y"}]),
                "copy from a missing path: /x",
            ),
            (
                json!([{"op": "test", "path": "/b", "value": "no"}]),
                "testing value /b failed",
            ),
            (
                json!([{"op": "merge", "path": "/a"}]),
                "unexpected operation \"merge\"",
            ),
            (json!([{"op": "remove", "path": "a"}]), "invalid path \"a\""),
            (
                json!([{"op": "add", "path": "/a/one", "value": 1}]),
                "invalid index \"one\"",
            ),
            (
                json!([{"op": "add", "path": "/a/9", "value": 1}]),
                "index 9 out of bounds",
            ),
            (
                json!([{"op": "add", "path": "/b/c", "value": 1}]),
                "add operation does not apply at /b/c",
            ),
        ];
        for (patch, want) in cases {
            let mut t = json!({"a": [1, 2], "b": "x"});
            let refused = json_patch(&mut t, &patch).expect_err("refused");
            assert_eq!(refused.to_string(), want, "{patch}");
        }
    }
}
