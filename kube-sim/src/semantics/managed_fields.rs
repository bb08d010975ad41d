//! Field sets in the `FieldsV1` encoding and the `metadata.managedFields` bookkeeping that
//! the API server does on every write.
//!
//! A field set is a tree of path elements (`f:name`, `k:{"name":"web"}`, `v:"x"`); a node is a
//! member when that path itself is owned. Lists are keyed the way Kubernetes types declare
//! them (containers by name, ports by containerPort+protocol, ...), or are sets (finalizers),
//! or atomic (owned as one field).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

/// Which nodes count as members when a set is made from an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    /// The set an apply configuration claims: leaves and keyed list items.
    Apply,
    /// The set an update claims: leaves, list items and optional maps (`"."` entries).
    Update,
    /// Every node present in the object (to test whether a path still exists).
    All,
}

/// How the items of a list are identified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Items are identified by these fields (`k:{...}`).
    Map(Vec<&'static str>),
    /// Items are scalars identified by value (`v:...`).
    Set,
    /// The list is one field.
    Atomic,
}

/// The list type Kubernetes declares for a list field (by field name and item shape).
pub fn list_type(field: &str, items: &[Value]) -> ListType {
    let first = items.first();
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "webhooks" => ListType::Map(vec!["name"]),
        "volumeMounts" => ListType::Map(vec!["mountPath"]),
        "volumeDevices" => ListType::Map(vec!["devicePath"]),
        "conditions" => ListType::Map(vec!["type"]),
        "ownerReferences" => ListType::Map(vec!["uid"]),
        "hostAliases" => ListType::Map(vec!["ip"]),
        "topologySpreadConstraints" => ListType::Map(vec!["topologyKey", "whenUnsatisfiable"]),
        "finalizers" if first.is_none_or(Value::is_string) => ListType::Set,
        "ports" => {
            if first.is_some_and(|i| i.get("containerPort").is_some()) {
                ListType::Map(vec!["containerPort", "protocol"])
            } else if first.is_some_and(|i| i.get("port").is_some()) {
                ListType::Map(vec!["port", "protocol"])
            } else {
                ListType::Atomic
            }
        }
        _ => ListType::Atomic,
    }
}

/// Maps that are owned as a whole.
fn is_atomic_map(field: &str) -> bool {
    // LabelSelectors are atomic structs, and so is an Event's ObjectReference.
    matches!(
        field,
        "selector" | "objectSelector" | "namespaceSelector" | "involvedObject" | "regarding"
    )
}

/// Struct fields that are always present (not `omitempty`), so an update never "adds" them
/// and their node carries no `"."` in an Update entry.
fn is_always_present_struct(field: &str) -> bool {
    matches!(
        field,
        "metadata"
            | "spec"
            | "status"
            | "template"
            | "strategy"
            | "names"
            | "updateStrategy"
            | "resources"
            | "jobTemplate"
            | "acceptedNames"
            | "loadBalancer"
            | "priorityLevelConfiguration"
            // An Event's EventSource.
            | "source"
    )
}

/// The `k:` element of a keyed list item. Missing `protocol` counts as TCP, as the server
/// defaults it before computing keys.
pub fn item_key(keys: &[&str], item: &Value) -> Option<String> {
    let mut key = Map::new();
    for k in keys {
        match item.get(*k) {
            Some(v) => {
                key.insert((*k).to_string(), v.clone());
            }
            None if *k == "protocol" => {
                key.insert("protocol".into(), json!("TCP"));
            }
            None if keys.len() > 1 => {}
            None => return None,
        }
    }
    Some(format!("k:{}", Value::Object(key)))
}

/// Metadata fields the server owns; they are never part of a manager's set.
fn is_server_metadata(field: &str) -> bool {
    matches!(
        field,
        "name"
            | "namespace"
            | "uid"
            | "resourceVersion"
            | "generation"
            | "creationTimestamp"
            | "managedFields"
            | "deletionTimestamp"
            | "deletionGracePeriodSeconds"
            | "selfLink"
    )
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    fn leaf() -> Self {
        Self {
            member: true,
            children: BTreeMap::new(),
        }
    }

    /// The set of an object's top-level fields, skipping apiVersion, kind and server-owned
    /// metadata. `status` is included only when `with_status`; `only_status` keeps only it.
    pub fn of_object(obj: &Value, mode: SetMode, with_status: bool, only_status: bool) -> Self {
        Self::of_fields(obj, mode, |k| {
            if only_status {
                k == "status"
            } else {
                k != "status" || with_status
            }
        })
    }

    /// The set of the top-level fields `keep` names, skipping apiVersion, kind and
    /// server-owned metadata.
    fn of_fields(obj: &Value, mode: SetMode, keep: impl Fn(&str) -> bool) -> Self {
        let mut set = FieldSet::default();
        let Some(map) = obj.as_object() else {
            return set;
        };
        for (k, v) in map {
            if k == "apiVersion" || k == "kind" || !keep(k) {
                continue;
            }
            let child = if k == "metadata" {
                let mut meta = FieldSet::default();
                if let Some(m) = v.as_object() {
                    for (mk, mv) in m {
                        if is_server_metadata(mk) {
                            continue;
                        }
                        let c = Self::of_value(mk, mv, mode);
                        if !c.is_empty() {
                            meta.children.insert(format!("f:{mk}"), c);
                        }
                    }
                }
                meta
            } else {
                Self::of_value(k, v, mode)
            };
            if !child.is_empty() {
                set.children.insert(format!("f:{k}"), child);
            }
        }
        set
    }

    /// The set of one field's value.
    pub fn of_value(field: &str, value: &Value, mode: SetMode) -> Self {
        match value {
            Value::Object(map) if !map.is_empty() && !is_atomic_map(field) => {
                let mut set = FieldSet {
                    member: match mode {
                        SetMode::All => true,
                        SetMode::Update => !is_always_present_struct(field),
                        SetMode::Apply => false,
                    },
                    children: BTreeMap::new(),
                };
                for (k, v) in map {
                    set.children
                        .insert(format!("f:{k}"), Self::of_value(k, v, mode));
                }
                set
            }
            Value::Array(items) if !items.is_empty() => match list_type(field, items) {
                ListType::Atomic => Self::leaf(),
                ListType::Set => {
                    let mut set = FieldSet {
                        member: mode != SetMode::Apply,
                        children: BTreeMap::new(),
                    };
                    for item in items {
                        set.children.insert(format!("v:{item}"), Self::leaf());
                    }
                    set
                }
                ListType::Map(keys) => {
                    let mut set = FieldSet {
                        member: matches!(mode, SetMode::All)
                            || (mode == SetMode::Update && field != "containers"),
                        children: BTreeMap::new(),
                    };
                    for item in items {
                        let Some(key) = item_key(&keys, item) else {
                            continue;
                        };
                        // Owner references are atomic structs: the item is one field.
                        let mut item_set = if field == "ownerReferences" {
                            Self::leaf()
                        } else {
                            Self::of_value("", item, mode)
                        };
                        item_set.member = true;
                        set.children.insert(key, item_set);
                    }
                    set
                }
            },
            _ => Self::leaf(),
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(existing) => existing.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    /// Paths of `self` that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let child = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !child.is_empty() {
                out.children.insert(k.clone(), child);
            }
        }
        out
    }

    /// Paths of `self` that are also in `other`.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let child = v.intersection(o);
                if !child.is_empty() {
                    out.children.insert(k.clone(), child);
                }
            }
        }
        out
    }

    /// Every member path, as lists of path elements.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    pub fn contains_path(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self
                .children
                .get(first)
                .is_some_and(|c| c.contains_path(rest)),
        }
    }

    /// The `fieldsV1` JSON.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, v) in &self.children {
            map.insert(k.clone(), v.to_fields_v1());
        }
        Value::Object(map)
    }

    /// Parses `fieldsV1` JSON; unknown shapes give an empty set.
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Some(map) = value.as_object() {
            for (k, v) in map {
                if k == "." {
                    set.member = true;
                    continue;
                }
                let mut child = Self::from_fields_v1(v);
                if child.children.is_empty() {
                    child.member = true;
                }
                set.children.insert(k.clone(), child);
            }
        }
        set
    }
}

/// The paths (in Update mode) whose values differ between `old` and `new`, including
/// everything that `new` adds.
pub fn changed_fields(old: &Value, new: &Value, with_status: bool, only_status: bool) -> FieldSet {
    let new_set = FieldSet::of_object(new, SetMode::Update, with_status, only_status);
    let old_all = FieldSet::of_object(old, SetMode::All, with_status, only_status);
    let mut out = FieldSet::default();
    diff_into(&new_set, &old_all, old, new, &mut out);
    out
}

/// Walks `new_set`; keeps members whose value is absent from `old` or differs.
fn diff_into(new_set: &FieldSet, old_all: &FieldSet, old: &Value, new: &Value, out: &mut FieldSet) {
    for (k, child) in &new_set.children {
        let new_v = element_value(new, k);
        let old_v = element_value(old, k);
        let mut child_out = FieldSet::default();
        match (old_all.children.get(k), old_v) {
            (Some(old_child), Some(old_v)) => {
                if child.member && child.children.is_empty() {
                    if new_v.is_some_and(|n| n != old_v) {
                        child_out.member = true;
                    }
                } else {
                    diff_into(
                        child,
                        old_child,
                        old_v,
                        new_v.unwrap_or(&Value::Null),
                        &mut child_out,
                    );
                }
            }
            _ => child_out = child.clone(),
        }
        if !child_out.is_empty() {
            out.children.insert(k.clone(), child_out);
        }
    }
}

/// The value a path element names inside `value`.
pub fn element_value<'a>(value: &'a Value, element: &str) -> Option<&'a Value> {
    if let Some(field) = element.strip_prefix("f:") {
        return value.get(field);
    }
    if let Some(key) = element.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        return value.as_array()?.iter().find(|item| {
            key.iter().all(|(k, v)| match item.get(k) {
                Some(found) => found == v,
                None => k == "protocol" && v == "TCP",
            })
        });
    }
    if let Some(scalar) = element.strip_prefix("v:") {
        let scalar: Value = serde_json::from_str(scalar).ok()?;
        return value.as_array()?.iter().find(|item| **item == scalar);
    }
    None
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl ManagedEntry {
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        m.insert("time".into(), json!(self.time));
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    pub fn from_json(v: &Value) -> Option<ManagedEntry> {
        Some(ManagedEntry {
            manager: v.get("manager")?.as_str()?.to_string(),
            operation: v
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or("Update")
                .to_string(),
            api_version: v
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: v
                .get("time")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            subresource: v
                .get("subresource")
                .and_then(Value::as_str)
                .map(str::to_string),
            fields: v
                .get("fieldsV1")
                .map(FieldSet::from_fields_v1)
                .unwrap_or_default(),
        })
    }
}

/// The entries of an object's `metadata.managedFields`.
pub fn read_entries(obj: &Value) -> Vec<ManagedEntry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(ManagedEntry::from_json).collect())
        .unwrap_or_default()
}

/// Writes entries into `metadata.managedFields` (removing the field when there are none).
pub fn write_entries(obj: &mut Value, entries: &[ManagedEntry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut kept: Vec<&ManagedEntry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    // The server's order: Apply before Update, then by time, manager, subresource.
    kept.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager, &a.subresource).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.subresource,
        ))
    });
    let entries: Vec<Value> = kept.into_iter().map(ManagedEntry::to_json).collect();
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// Records an Update-style write by `manager` into `new`'s managedFields: the manager takes
/// the changed fields, others lose them, and fields that no longer exist leave every set.
pub struct UpdateRecord<'a> {
    pub manager: &'a str,
    pub subresource: Option<&'a str>,
    pub api_version: &'a str,
    pub time: &'a str,
    /// Whether `.status` belongs to the main resource (kinds without a status subresource).
    pub status_in_main: bool,
}

pub fn record_update(old: Option<&Value>, new: &mut Value, record: &UpdateRecord<'_>) {
    let only_status = record.subresource == Some("status");
    let with_status = record.status_in_main;
    let empty = json!({});
    let old_v = old.unwrap_or(&empty);
    let mut changed = changed_fields(old_v, new, with_status, only_status);
    if only_status {
        // Status writers may also set annotations (the deployment controller's revision).
        let meta_changed =
            changed_fields(&owned_metadata(old_v), &owned_metadata(new), false, false);
        changed = changed.union(&meta_changed);
    }
    let mut entries = old.map(read_entries).unwrap_or_default();
    if only_status {
        // A status write changes the status and the metadata only: the rest of every entry
        // stays as it is (the whole object's set per status write was most of its cost).
        let touched = |k: &str| k == "status" || k == "metadata";
        let existing = FieldSet::of_fields(new, SetMode::All, touched);
        for e in entries.iter_mut() {
            e.fields.member = false;
            e.fields.children.retain(|k, child| {
                if let Some(field) = k.strip_prefix("f:")
                    && touched(field)
                {
                    *child = match (changed.children.get(k), existing.children.get(k)) {
                        (_, None) => FieldSet::default(),
                        (Some(gone), Some(there)) => child.difference(gone).intersection(there),
                        (None, Some(there)) => child.intersection(there),
                    };
                }
                !child.is_empty()
            });
        }
    } else {
        let existing = FieldSet::of_object(new, SetMode::All, true, false);
        for e in entries.iter_mut() {
            e.fields = e.fields.difference(&changed).intersection(&existing);
        }
    }
    if !changed.is_empty() {
        let subresource = record.subresource.map(str::to_string);
        match entries.iter_mut().find(|e| {
            e.manager == record.manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(entry) => {
                entry.fields = entry.fields.union(&changed);
                entry.time = record.time.to_string();
                entry.api_version = record.api_version.to_string();
            }
            None => entries.push(ManagedEntry {
                manager: record.manager.to_string(),
                operation: "Update".into(),
                api_version: record.api_version.to_string(),
                time: record.time.to_string(),
                subresource,
                fields: changed,
            }),
        }
    }
    write_entries(new, &entries);
}

/// `{"metadata": ...}` with the metadata fields a manager can own: the field sets skip the
/// server's (managedFields is most of a pod's metadata, so it is not copied).
fn owned_metadata(obj: &Value) -> Value {
    let owned: Map<String, Value> = obj
        .get("metadata")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !is_server_metadata(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({ "metadata": owned })
}

/// A human path for a field set path, as conflict messages print it:
/// `.spec.template.spec.containers[name="web"].image`.
pub fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(f) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = element.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = element.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else {
            out.push_str(element);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "rec-x", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "example/web:v1",
                        "ports": [{"containerPort": 8080}]}]}
                }
            }
        })
    }

    #[test]
    fn apply_set_matches_recording() {
        let set = FieldSet::of_object(&deployment(), SetMode::Apply, false, false);
        let expected = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}}}
                    }}}
                }
            }
        });
        assert_eq!(set.to_fields_v1(), expected);
    }

    #[test]
    fn update_set_marks_optional_maps() {
        let ns = json!({"metadata": {"name": "x", "labels": {"kubernetes.io/metadata.name": "x"}},
            "spec": {"finalizers": ["kubernetes"]}});
        let set = changed_fields(&json!({}), &ns, false, false);
        let v1 = set.to_fields_v1();
        assert_eq!(v1["f:metadata"]["f:labels"]["."], json!({}));
        assert!(v1["f:metadata"].get(".").is_none());
    }

    #[test]
    fn owner_references_are_atomic_items() {
        let rs = json!({"metadata": {"name": "web-1", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "u1", "controller": true, "blockOwnerDeletion": true}]}});
        let set = changed_fields(&json!({}), &rs, false, false).to_fields_v1();
        assert_eq!(
            set["f:metadata"]["f:ownerReferences"],
            json!({".": {}, "k:{\"uid\":\"u1\"}": {}})
        );
    }

    #[test]
    fn fields_v1_round_trips() {
        let set = FieldSet::of_object(&deployment(), SetMode::Update, false, false);
        let back = FieldSet::from_fields_v1(&set.to_fields_v1());
        assert_eq!(back, set);
    }

    #[test]
    fn update_moves_changed_fields_to_the_writer() {
        let mut old = deployment();
        record_update(
            None,
            &mut old,
            &UpdateRecord {
                manager: "a",
                subresource: None,
                api_version: "apps/v1",
                time: "t1",
                status_in_main: false,
            },
        );
        let mut new = old.clone();
        new["spec"]["replicas"] = json!(5);
        record_update(
            Some(&old),
            &mut new,
            &UpdateRecord {
                manager: "b",
                subresource: None,
                api_version: "apps/v1",
                time: "t2",
                status_in_main: false,
            },
        );
        let entries = read_entries(&new);
        assert_eq!(entries.len(), 2);
        let replicas = vec!["f:spec".to_string(), "f:replicas".to_string()];
        assert!(!entries[0].fields.contains_path(&replicas));
        assert!(entries[1].fields.contains_path(&replicas));
        assert_eq!(entries[0].time, "t1");
    }

    #[test]
    fn a_status_write_moves_status_fields_and_leaves_the_spec_owners_alone() {
        let entry = |manager: &str, subresource: Option<&str>, fields: Value| ManagedEntry {
            manager: manager.into(),
            operation: if subresource.is_some() {
                "Update"
            } else {
                "Apply"
            }
            .into(),
            api_version: "apps/v1".into(),
            time: "t1".into(),
            subresource: subresource.map(str::to_string),
            fields: FieldSet::from_fields_v1(&fields),
        };
        let mut old = deployment();
        old["status"] = json!({"replicas": 1, "unavailableReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "True"}]});
        let applied = FieldSet::of_object(&old, SetMode::Apply, false, false).to_fields_v1();
        write_entries(
            &mut old,
            &[
                entry("rollguard", None, applied.clone()),
                entry(
                    "kcm",
                    Some("status"),
                    json!({"f:status": {"f:replicas": {}, "f:conditions": {}}}),
                ),
                entry(
                    "other",
                    Some("status"),
                    json!({"f:status": {"f:unavailableReplicas": {}}}),
                ),
            ],
        );
        let mut new = old.clone();
        new["status"] = json!({"replicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True"}]});
        record_update(
            Some(&old),
            &mut new,
            &UpdateRecord {
                manager: "kcm",
                subresource: Some("status"),
                api_version: "apps/v1",
                time: "t2",
                status_in_main: false,
            },
        );
        let entries = read_entries(&new);
        let by = |m: &str| entries.iter().find(|e| e.manager == m);
        assert_eq!(
            by("rollguard").map(|e| e.fields.to_fields_v1()),
            Some(applied)
        );
        assert!(by("other").is_none(), "its only field is gone: {entries:?}");
        let kcm = by("kcm").expect("the writer's entry");
        let path = |f: &str| vec!["f:status".to_string(), format!("f:{f}")];
        assert!(kcm.fields.contains_path(&path("replicas")));
        assert!(kcm.fields.contains_path(&path("readyReplicas")));
        assert!(!kcm.fields.contains_path(&path("unavailableReplicas")));
        assert_eq!(kcm.time, "t2");
    }

    #[test]
    fn conflict_paths_display_like_the_server() {
        let path: Vec<String> = [
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"web\"}",
            "f:image",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            display_path(&path),
            ".spec.template.spec.containers[name=\"web\"].image"
        );
    }
}
