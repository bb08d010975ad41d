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
                Child::Metadata(v).build(mode)
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
        let (member, children) = node(field, value, mode);
        let mut set = FieldSet {
            member,
            children: BTreeMap::new(),
        };
        for (key, child) in children {
            set.children.insert(key, child.build(mode));
        }
        set
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

/// One child of a field set's node, made into a set only when it is needed: the diff of two
/// objects walks only where they differ, and building both whole sets was most of the cost
/// of a status write.
#[derive(Clone, Copy)]
enum Child<'a> {
    /// A field and its value.
    Field(&'a str, &'a Value),
    /// An object's metadata: the fields a manager can own.
    Metadata(&'a Value),
    /// A keyed list item: a member, with the item's fields.
    Item(&'a Value),
    /// A set element or an atomic item (an owner reference): one member.
    Leaf,
}

impl<'a> Child<'a> {
    fn node(self, mode: SetMode) -> (bool, Vec<(String, Child<'a>)>) {
        match self {
            Child::Field(name, value) => node(name, value, mode),
            Child::Metadata(meta) => (
                false,
                meta.as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| !is_server_metadata(k))
                    .map(|(k, v)| (format!("f:{k}"), Child::Field(k, v)))
                    .collect(),
            ),
            Child::Item(item) => (true, node("", item, mode).1),
            Child::Leaf => (true, Vec::new()),
        }
    }

    fn build(self, mode: SetMode) -> FieldSet {
        match self {
            Child::Field(name, value) => FieldSet::of_value(name, value, mode),
            Child::Metadata(_) => {
                let mut meta = FieldSet::default();
                for (key, child) in self.node(mode).1 {
                    let set = child.build(mode);
                    if !set.is_empty() {
                        meta.children.insert(key, set);
                    }
                }
                meta
            }
            Child::Item(item) => {
                let mut set = FieldSet::of_value("", item, mode);
                set.member = true;
                set
            }
            Child::Leaf => FieldSet::leaf(),
        }
    }

    /// The value the child's node is made from.
    fn value(self) -> Option<&'a Value> {
        match self {
            Child::Field(_, v) | Child::Metadata(v) | Child::Item(v) => Some(v),
            Child::Leaf => None,
        }
    }
}

/// The member flag and the children of the node a set made from `value` (the value of
/// `field`) has: the one definition of a field set's shape.
fn node<'a>(field: &str, value: &'a Value, mode: SetMode) -> (bool, Vec<(String, Child<'a>)>) {
    match value {
        Value::Object(map) if !map.is_empty() && !is_atomic_map(field) => {
            let member = match mode {
                SetMode::All => true,
                SetMode::Update => !is_always_present_struct(field),
                SetMode::Apply => false,
            };
            let children = map
                .iter()
                .map(|(k, v)| (format!("f:{k}"), Child::Field(k, v)))
                .collect();
            (member, children)
        }
        Value::Array(items) if !items.is_empty() => match list_type(field, items) {
            ListType::Atomic => (true, Vec::new()),
            ListType::Set => (
                mode != SetMode::Apply,
                items
                    .iter()
                    .map(|item| (format!("v:{item}"), Child::Leaf))
                    .collect(),
            ),
            ListType::Map(keys) => {
                let member = matches!(mode, SetMode::All)
                    || (mode == SetMode::Update && field != "containers");
                let children = items
                    .iter()
                    .filter_map(|item| {
                        let key = item_key(&keys, item)?;
                        // Owner references are atomic structs: the item is one field.
                        let child = if field == "ownerReferences" {
                            Child::Leaf
                        } else {
                            Child::Item(item)
                        };
                        Some((key, child))
                    })
                    .collect();
                (member, children)
            }
        },
        _ => (true, Vec::new()),
    }
}

/// The children of a node by path element; a later duplicate replaces an earlier one, as in
/// a set.
fn by_element<'a>(children: Vec<(String, Child<'a>)>) -> BTreeMap<String, Child<'a>> {
    let mut map = BTreeMap::new();
    for (key, child) in children {
        map.insert(key, child);
    }
    map
}

/// The paths (in Update mode) whose values differ between `old` and `new`, including
/// everything that `new` adds. Only the parts that differ are made into sets.
pub fn changed_fields(old: &Value, new: &Value, with_status: bool, only_status: bool) -> FieldSet {
    let keep = |k: &str| {
        if only_status {
            k == "status"
        } else {
            k != "status" || with_status
        }
    };
    changed_top(old, new, keep)
}

/// [`changed_fields`] over the top-level fields `keep` names.
fn changed_top(old: &Value, new: &Value, keep: impl Fn(&str) -> bool) -> FieldSet {
    let mut out = FieldSet::default();
    diff_children(
        by_element(top_children(new, &keep)),
        &by_element(top_children(old, &keep)),
        old,
        new,
        &mut out,
    );
    out
}

/// The top-level children of an object's set: the fields `keep` names but apiVersion and kind.
fn top_children<'a>(obj: &'a Value, keep: &impl Fn(&str) -> bool) -> Vec<(String, Child<'a>)> {
    obj.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "apiVersion" && *k != "kind" && keep(k))
        .map(|(k, v)| {
            let child = if k == "metadata" {
                Child::Metadata(v)
            } else {
                Child::Field(k, v)
            };
            (format!("f:{k}"), child)
        })
        .collect()
}

/// For each child of the new node (Update mode): everything when the old node (All mode) has
/// no such child, the leaf when its value changed, else what differs below it.
fn diff_children(
    new_children: BTreeMap<String, Child<'_>>,
    old_children: &BTreeMap<String, Child<'_>>,
    old: &Value,
    new: &Value,
    out: &mut FieldSet,
) {
    for (key, child) in new_children {
        let new_v = element_value(new, &key);
        let old_v = element_value(old, &key);
        let mut child_out = FieldSet::default();
        match (old_children.get(&key), old_v) {
            (Some(old_child), Some(old_v)) => {
                let unchanged = new_v.is_some_and(|n| {
                    n == old_v
                        && child.value().is_some_and(|c| std::ptr::eq(c, n))
                        && old_child.value().is_some_and(|c| std::ptr::eq(c, old_v))
                });
                if unchanged {
                    // Equal values made both nodes: nothing below them differs.
                    continue;
                }
                let (member, grandchildren) = child.node(SetMode::Update);
                if member && grandchildren.is_empty() {
                    child_out.member = new_v.is_some_and(|n| n != old_v);
                } else {
                    diff_children(
                        by_element(grandchildren),
                        &by_element(old_child.node(SetMode::All).1),
                        old_v,
                        new_v.unwrap_or(&Value::Null),
                        &mut child_out,
                    );
                }
            }
            _ => child_out = child.build(SetMode::Update),
        }
        if !child_out.is_empty() {
            out.children.insert(key, child_out);
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
    match old {
        Some(old) if record.subresource == Some("status") && entries_kept_as_written(old, new) => {
            record_status_update(old, new, record);
        }
        _ => record_whole_update(old, new, record),
    }
}

/// Whether `new` carries `old`'s managedFields, every entry as [`write_entries`] writes it:
/// then a status write can edit them where they are.
fn entries_kept_as_written(old: &Value, new: &Value) -> bool {
    let entries = old.pointer("/metadata/managedFields");
    if entries != new.pointer("/metadata/managedFields") {
        return false;
    }
    let Some(entries) = entries else {
        return true;
    };
    entries.as_array().is_some_and(|entries| {
        entries.iter().all(|e| {
            e.as_object().is_some_and(|e| {
                let text = |k: &str| e.get(k).is_some_and(Value::is_string);
                text("manager")
                    && text("operation")
                    && text("apiVersion")
                    && text("time")
                    && e.get("fieldsType").is_some_and(|t| t == "FieldsV1")
                    && e.get("fieldsV1").is_some_and(Value::is_object)
                    && e.get("subresource").is_none_or(Value::is_string)
                    && e.len() == 6 + usize::from(e.contains_key("subresource"))
            })
        })
    })
}

/// [`record_update`] for a status write: only the `f:status` and `f:metadata` parts of each
/// entry are read and rewritten, in place; the rest (the spec owners' sets) stays as it is.
/// Reading and writing every entry whole was most of the cost of a kubelet's status write.
fn record_status_update(old: &Value, new: &mut Value, record: &UpdateRecord<'_>) {
    const TOUCHED: [&str; 2] = ["f:status", "f:metadata"];
    let touched = |k: &str| k == "status" || k == "metadata";
    let changed = changed_top(old, new, touched);
    let existing = FieldSet::of_fields(new, SetMode::All, touched);
    let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut entries = match meta.remove("managedFields") {
        Some(Value::Array(entries)) => entries,
        _ => Vec::new(),
    };
    for entry in &mut entries {
        let Some(fields) = entry.get_mut("fieldsV1").and_then(Value::as_object_mut) else {
            continue;
        };
        fields.remove(".");
        for key in TOUCHED {
            let Some(mut child) = fields.get(key).map(child_of_fields_v1) else {
                continue;
            };
            child = match (changed.children.get(key), existing.children.get(key)) {
                (_, None) => FieldSet::default(),
                (Some(gone), Some(there)) => child.difference(gone).intersection(there),
                (None, Some(there)) => child.intersection(there),
            };
            if child.is_empty() {
                fields.remove(key);
            } else {
                fields.insert(key.into(), child.to_fields_v1());
            }
        }
    }
    if !changed.is_empty() {
        let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        let writer = entries.iter_mut().find(|e| {
            text(e, "manager").as_deref() == Some(record.manager)
                && text(e, "operation").as_deref() == Some("Update")
                && text(e, "subresource").as_deref() == Some("status")
        });
        match writer.and_then(Value::as_object_mut) {
            Some(entry) => {
                if let Some(fields) = entry.get_mut("fieldsV1").and_then(Value::as_object_mut) {
                    for (key, set) in &changed.children {
                        let merged = match fields.get(key) {
                            Some(raw) => child_of_fields_v1(raw).union(set),
                            None => set.clone(),
                        };
                        fields.insert(key.clone(), merged.to_fields_v1());
                    }
                }
                entry.insert("time".into(), json!(record.time));
                entry.insert("apiVersion".into(), json!(record.api_version));
            }
            None => entries.push(
                ManagedEntry {
                    manager: record.manager.to_string(),
                    operation: "Update".into(),
                    api_version: record.api_version.to_string(),
                    time: record.time.to_string(),
                    subresource: Some("status".into()),
                    fields: changed,
                }
                .to_json(),
            ),
        }
    }
    entries.retain(|e| {
        e.get("fieldsV1")
            .is_some_and(|f| f.as_object().is_some_and(|f| !f.is_empty()))
    });
    // The server's order, as write_entries keeps it.
    let order = |e: &Value| {
        let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        (
            text("operation"),
            text("time"),
            text("manager"),
            text("subresource"),
        )
    };
    entries.sort_by_cached_key(order);
    if !entries.is_empty() {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// A child of a `fieldsV1` map as [`FieldSet::from_fields_v1`] reads it (a node without
/// children is a member).
fn child_of_fields_v1(raw: &Value) -> FieldSet {
    let mut child = FieldSet::from_fields_v1(raw);
    if child.children.is_empty() {
        child.member = true;
    }
    child
}

/// [`record_update`] for any write: every entry is read, changed and written whole.
fn record_whole_update(old: Option<&Value>, new: &mut Value, record: &UpdateRecord<'_>) {
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

    /// What `changed_fields` was before it made only the differing parts into sets: both
    /// whole sets, then a walk of the new one. The lazy walk must give the same sets.
    fn changed_fields_by_whole_sets(
        old: &Value,
        new: &Value,
        with_status: bool,
        only_status: bool,
    ) -> FieldSet {
        fn walk(
            new_set: &FieldSet,
            old_all: &FieldSet,
            old: &Value,
            new: &Value,
            out: &mut FieldSet,
        ) {
            for (k, child) in &new_set.children {
                let new_v = element_value(new, k);
                let old_v = element_value(old, k);
                let mut child_out = FieldSet::default();
                match (old_all.children.get(k), old_v) {
                    (Some(old_child), Some(old_v)) => {
                        if child.member && child.children.is_empty() {
                            child_out.member = new_v.is_some_and(|n| n != old_v);
                        } else {
                            walk(
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
        let new_set = FieldSet::of_object(new, SetMode::Update, with_status, only_status);
        let old_all = FieldSet::of_object(old, SetMode::All, with_status, only_status);
        let mut out = FieldSet::default();
        walk(&new_set, &old_all, old, new, &mut out);
        out
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "x", "labels": {"app": "web"},
                "annotations": {"a": "1"}, "finalizers": ["f1", "f2"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                    "uid": "u1", "controller": true}]},
            "spec": {"containers": [{"name": "web", "image": "web:v1",
                "ports": [{"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}],
                "env": [{"name": "A", "value": "1"}]}],
                "selector": {"matchLabels": {"app": "web"}}},
            "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"},
                               {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "t"}}, "lastState": {}}]}
        })
    }

    /// Every node's path under `value` (object keys and array indexes).
    fn node_paths(value: &Value, prefix: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        out.push(prefix.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    prefix.push(json!(k));
                    node_paths(v, prefix, out);
                    prefix.pop();
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    prefix.push(json!(i));
                    node_paths(v, prefix, out);
                    prefix.pop();
                }
            }
            _ => {}
        }
    }

    fn at<'a>(value: &'a mut Value, path: &[Value]) -> &'a mut Value {
        path.iter().fold(value, |v, p| match p {
            Value::String(k) => &mut v[k.as_str()],
            _ => &mut v[p.as_u64().unwrap_or(0) as usize],
        })
    }

    /// One random change somewhere under `root`'s top-level `field`: a scalar changed, a key
    /// added or removed, a list item duplicated, dropped or re-keyed, a node's type changed.
    fn mutate(obj: &mut Value, field: &str, rng: &mut impl rand::Rng) {
        let mut paths = Vec::new();
        node_paths(&obj[field], &mut vec![json!(field)], &mut paths);
        let path = paths[rng.random_range(0..paths.len())].clone();
        let n: u32 = rng.random_range(0..1000);
        let node = at(obj, &path);
        match (rng.random_range(0..6), &mut *node) {
            (0, Value::Object(map)) if !map.is_empty() => {
                let key = map
                    .keys()
                    .nth(n as usize % map.len())
                    .cloned()
                    .unwrap_or_default();
                map.remove(&key);
            }
            (1, Value::Object(map)) => {
                let value = if n.is_multiple_of(2) {
                    json!(n)
                } else {
                    json!({"name": "web", "n": n})
                };
                map.insert(format!("k{}", n % 3), value);
            }
            (2, Value::Array(items)) if !items.is_empty() => {
                let item = items[n as usize % items.len()].clone();
                items.push(item);
            }
            (3, Value::Array(items)) if !items.is_empty() => {
                items.remove(n as usize % items.len());
            }
            (4, _) => {
                *node = if n.is_multiple_of(2) {
                    json!({})
                } else {
                    json!([])
                }
            }
            (_, Value::Object(map)) if !map.is_empty() => {
                let key = map
                    .keys()
                    .nth(n as usize % map.len())
                    .cloned()
                    .unwrap_or_default();
                map.insert(key, json!(format!("v{}", n % 4)));
            }
            _ => *node = json!(n % 3),
        }
    }

    #[test]
    fn the_lazy_diff_gives_the_sets_of_the_whole_diff() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(25);
        for base in [pod(), deployment()] {
            for _ in 0..400 {
                let mut old = base.clone();
                let mut new = base.clone();
                for _ in 0..rng.random_range(0..3) {
                    mutate(
                        &mut old,
                        ["metadata", "spec"][rng.random_range(0..2)],
                        &mut rng,
                    );
                }
                if old.get("status").is_some() {
                    mutate(&mut old, "status", &mut rng);
                }
                for _ in 0..rng.random_range(1..4) {
                    let field = ["metadata", "spec", "status"][rng.random_range(0..3)];
                    if new.get(field).is_some() {
                        mutate(&mut new, field, &mut rng);
                    }
                }
                for (with_status, only_status) in [(false, false), (true, false), (false, true)] {
                    for (a, b) in [(&old, &new), (&new, &old), (&json!({}), &new)] {
                        assert_eq!(
                            changed_fields(a, b, with_status, only_status),
                            changed_fields_by_whole_sets(a, b, with_status, only_status),
                            "old {a}\nnew {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_status_write_in_place_records_what_a_whole_rewrite_records() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(26);
        let update = |manager, subresource, time| UpdateRecord {
            manager,
            subresource,
            api_version: "v1",
            time,
            status_in_main: false,
        };
        let (mut in_place, mut moved) = (0, 0);
        for _ in 0..500 {
            // A history of writers: a creator, a spec writer, two status writers.
            let mut old = pod();
            record_whole_update(None, &mut old, &update("creator", None, "t1"));
            for (manager, subresource, time) in [
                ("a", None, "t2"),
                ("kubelet", Some("status"), "t3"),
                ("b", Some("status"), "t4"),
            ] {
                let mut next = old.clone();
                let field = if subresource.is_some() {
                    "status"
                } else {
                    "spec"
                };
                mutate(&mut next, field, &mut rng);
                record_whole_update(Some(&old), &mut next, &update(manager, subresource, time));
                old = next;
            }
            // The status write as the store makes it: the stored object, a new status, and
            // (as the apps strategies keep them) maybe new annotations.
            let mut new = old.clone();
            for _ in 0..rng.random_range(1..4) {
                mutate(&mut new, "status", &mut rng);
            }
            if rng.random_range(0..3) == 0 {
                new["metadata"]["annotations"]["rev"] = json!(rng.random_range(0..2).to_string());
            }
            let manager = ["kubelet", "b", "c"][rng.random_range(0..3)];
            let record = update(
                manager,
                Some("status"),
                ["t5", "t0"][rng.random_range(0..2)],
            );
            assert!(entries_kept_as_written(&old, &new));
            let mut whole = new.clone();
            record_whole_update(Some(&old), &mut whole, &record);
            record_update(Some(&old), &mut new, &record);
            assert_eq!(new, whole, "old {old}");
            in_place += 1;
            moved += usize::from(read_entries(&whole).len() != read_entries(&old).len());
        }
        // The histories must exercise entries that appear and vanish, not only edits.
        assert!(
            in_place == 500 && moved > 50,
            "{moved} of {in_place} changed the entries"
        );
    }
}
