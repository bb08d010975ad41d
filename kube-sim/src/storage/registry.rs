//! The table of served resources (built-in kinds plus the resources of created CRDs) and
//! the discovery documents built from it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::model::resource::ResourceType;

/// The built-in resources, taken from the recorded aggregated discovery of a v1.36 server.
const BUILTIN_RESOURCES: &str = include_str!("builtin_resources.json");

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct SubresourceInfo {
    pub name: String,
    /// Group and version of the response kind; empty when it is the parent's.
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    pub kind: String,
    pub verbs: Vec<String>,
}

/// Everything the server knows about one served resource.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub short_names: Vec<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    #[serde(default)]
    pub subresources: Vec<SubresourceInfo>,
    #[serde(default)]
    pub storage_version_hash: Option<String>,
    /// Name of the CRD that serves this resource; None for built-ins.
    #[serde(skip)]
    pub crd: Option<String>,
    /// A CRD version's additionalPrinterColumns (for Table responses).
    #[serde(skip)]
    pub printer_columns: Vec<PrinterColumn>,
    /// A CRD version's `schema.openAPIV3Schema`; None for built-ins (their k8s-openapi types
    /// declare their fields, see `declaration`).
    #[serde(skip)]
    pub schema: Option<Arc<Value>>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl ResourceInfo {
    /// What declares this resource's fields: its CRD's schema, or its built-in type. None
    /// for a CRD version without a schema.
    pub fn declaration(&self) -> Option<crate::semantics::schema::Declaration<'_>> {
        match (&self.schema, &self.crd) {
            (Some(schema), _) => Some(crate::semantics::schema::Declaration::Crd(schema)),
            (None, None) => Some(crate::semantics::schema::Declaration::Builtin {
                group: &self.group,
                version: &self.version,
                kind: &self.kind,
            }),
            (None, Some(_)) => None,
        }
    }

    pub fn resource_type(&self) -> ResourceType {
        ResourceType::new(&self.group, &self.version, &self.resource)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.name == name)
    }

    /// Whether `.status` is only written through the status subresource.
    pub fn has_status(&self) -> bool {
        self.has_subresource("status")
    }

    /// Whether objects carry `metadata.generation` (kinds with a spec that controllers
    /// observe; Leases, Services, ConfigMaps and the like do not).
    pub fn has_generation(&self) -> bool {
        if self.crd.is_some() {
            return true;
        }
        matches!(
            (self.group.as_str(), self.resource.as_str()),
            (
                "apps",
                "deployments" | "replicasets" | "statefulsets" | "daemonsets"
            ) | ("batch", "jobs" | "cronjobs")
                | ("", "pods")
                | ("autoscaling", "horizontalpodautoscalers")
                | ("policy", "poddisruptionbudgets")
                | ("networking.k8s.io", "ingresses" | "networkpolicies")
                | ("apiextensions.k8s.io", "customresourcedefinitions")
                | ("admissionregistration.k8s.io", _)
                | ("flowcontrol.apiserver.k8s.io", _)
                | ("scheduling.k8s.io", "priorityclasses")
        )
    }

    /// Whether a PUT must carry metadata.resourceVersion (recorded for Leases).
    pub fn requires_resource_version_on_update(&self) -> bool {
        self.group == "coordination.k8s.io" && self.resource == "leases"
    }

    /// Whether the resource can be read and written as objects (not e.g. `bindings`).
    pub fn is_storable(&self) -> bool {
        self.verbs.iter().any(|v| v == "get" || v == "list")
    }
}

#[derive(Deserialize)]
struct BuiltinTable {
    groups: Vec<GroupVersions>,
    resources: Vec<ResourceInfo>,
}

/// A group and its versions, preferred version first.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct GroupVersions {
    pub name: String,
    pub versions: Vec<String>,
}

#[derive(Clone, Default)]
struct Table {
    groups: Vec<GroupVersions>,
    resources: BTreeMap<ResourceType, Arc<ResourceInfo>>,
    /// Resources in discovery order (as recorded), CRD resources appended.
    order: Vec<ResourceType>,
    /// Counts the changes, for the cached discovery documents.
    generation: u64,
}

/// The served resources of one cluster. CRDs add and remove entries while it runs.
pub struct Registry {
    /// Shared with every cluster whose CRDs changed nothing yet (a copy per cluster was a
    /// third of an idle cluster's memory); a change copies it first.
    table: RwLock<Arc<Table>>,
    /// The aggregated discovery documents (core, groups) as served once a CRD changed the
    /// table (before that, every cluster serves `builtin_document`'s), built on first use
    /// after each change: every client of every cluster asks for them, and building,
    /// serializing and hashing them per cluster was an eighth of the simulator's CPU at
    /// 1,000 clusters.
    aggregated: Mutex<[CachedDocument; 2]>,
}

/// The aggregated documents of a registry no CRD changed (core, groups): the same in every
/// cluster, so one process serving a thousand clusters builds them once, not per cluster.
fn builtin_document(core: bool) -> Arc<AggregatedDocument> {
    static BUILTIN: std::sync::OnceLock<[Arc<AggregatedDocument>; 2]> = std::sync::OnceLock::new();
    let docs = BUILTIN.get_or_init(|| {
        let registry = Registry::new();
        [
            registry.build_document(true),
            registry.build_document(false),
        ]
    });
    docs[usize::from(!core)].clone()
}

/// A served document and the generation of the table it was built from.
type CachedDocument = Option<(u64, Arc<AggregatedDocument>)>;

/// An aggregated discovery document as served: its JSON and its ETag.
pub struct AggregatedDocument {
    pub json: bytes::Bytes,
    pub etag: String,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self {
            table: RwLock::new(builtin_table().clone()),
            aggregated: Mutex::default(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Arc<Table>> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes this cluster's table (its own copy from then on).
    fn write<R>(&self, change: impl FnOnce(&mut Table) -> R) -> R {
        let mut shared = self.table.write().unwrap_or_else(|e| e.into_inner());
        let table = Arc::make_mut(&mut shared);
        table.generation += 1;
        change(table)
    }

    /// [`Registry::aggregated_discovery`] serialized, with its ETag (the hash of the JSON,
    /// as the real server's discovery manager sets it).
    pub fn aggregated_document(&self, core: bool) -> Arc<AggregatedDocument> {
        let slot = usize::from(!core);
        // Read before building: a change while building leaves a document of an older
        // generation, which is never served.
        let generation = self.read().generation;
        if generation == 0 {
            return builtin_document(core);
        }
        let cached = |cache: &[CachedDocument; 2]| {
            cache[slot]
                .as_ref()
                .filter(|(g, _)| *g == generation)
                .map(|(_, doc)| doc.clone())
        };
        if let Some(doc) = cached(&self.aggregated.lock().unwrap_or_else(|e| e.into_inner())) {
            return doc;
        }
        let doc = self.build_document(core);
        self.aggregated.lock().unwrap_or_else(|e| e.into_inner())[slot] =
            Some((generation, doc.clone()));
        doc
    }

    /// The aggregated document, built and hashed now.
    fn build_document(&self, core: bool) -> Arc<AggregatedDocument> {
        use sha2::Digest;
        let json = serde_json::to_vec(&self.aggregated_discovery(core)).unwrap_or_default();
        Arc::new(AggregatedDocument {
            etag: format!("\"{}\"", hex::encode_upper(sha2::Sha512::digest(&json))),
            json: json.into(),
        })
    }

    pub fn get(&self, rt: &ResourceType) -> Option<Arc<ResourceInfo>> {
        self.read().resources.get(rt).cloned()
    }

    /// Finds a resource by group, version and plural name.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.get(&ResourceType::new(group, version, resource))
    }

    /// Whether objects of this type live in namespaces (unknown types count as namespaced).
    pub fn is_namespaced(&self, rt: &ResourceType) -> bool {
        self.get(rt).map(|i| i.namespaced).unwrap_or(true)
    }

    /// All served resources, in discovery order.
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        let table = self.read();
        table
            .order
            .iter()
            .filter_map(|rt| table.resources.get(rt).cloned())
            .collect()
    }

    /// All served groups (core is ""), with versions, preferred first.
    pub fn groups(&self) -> Vec<GroupVersions> {
        self.read().groups.clone()
    }

    pub fn group(&self, name: &str) -> Option<GroupVersions> {
        self.read().groups.iter().find(|g| g.name == name).cloned()
    }

    /// Serves the resources that a CRD object defines (every served version). Replaces what
    /// the same CRD served before. Returns the served resource types.
    pub fn register_crd(&self, crd: &Value) -> Vec<ResourceType> {
        let Some(infos) = crd_resources(crd) else {
            return Vec::new();
        };
        let crd_name = infos
            .first()
            .and_then(|i| i.crd.clone())
            .unwrap_or_default();
        self.write(|table| serve_crd(table, &crd_name, infos))
    }

    /// Stops serving what a CRD served. Returns the resource types that went away.
    pub fn unregister_crd(&self, crd_name: &str) -> Vec<ResourceType> {
        self.write(|table| remove_crd(table, crd_name))
    }
}

/// The builtin table, parsed once per process: every cluster starts from it.
fn builtin_table() -> &'static Arc<Table> {
    static BUILTIN: std::sync::OnceLock<Arc<Table>> = std::sync::OnceLock::new();
    BUILTIN.get_or_init(|| {
        let builtin: BuiltinTable =
            serde_json::from_str(BUILTIN_RESOURCES).expect("builtin_resources.json is valid");
        let mut table = Table {
            groups: builtin.groups,
            ..Table::default()
        };
        for info in builtin.resources {
            let rt = info.resource_type();
            table.order.push(rt.clone());
            table.resources.insert(rt, Arc::new(info));
        }
        Arc::new(table)
    })
}

/// Serves a CRD's resources in `table`, replacing what the same CRD served before.
fn serve_crd(table: &mut Table, crd_name: &str, infos: Vec<ResourceInfo>) -> Vec<ResourceType> {
    remove_crd(table, crd_name);
    let mut served = Vec::new();
    let group = infos[0].group.clone();
    let versions: Vec<String> = infos.iter().map(|i| i.version.clone()).collect();
    for info in infos {
        let rt = info.resource_type();
        if table.resources.get(&rt).is_some_and(|i| i.crd.is_none()) {
            continue; // never shadow a built-in
        }
        table.order.push(rt.clone());
        table.resources.insert(rt.clone(), Arc::new(info));
        served.push(rt);
    }
    if let Some(existing) = table.groups.iter_mut().find(|g| g.name == group) {
        for v in versions {
            if !existing.versions.contains(&v) {
                existing.versions.push(v);
            }
        }
    } else if !served.is_empty() {
        table.groups.push(GroupVersions {
            name: group,
            versions,
        });
    }
    served
}

fn remove_crd(table: &mut Table, crd_name: &str) -> Vec<ResourceType> {
    let gone: Vec<ResourceType> = table
        .resources
        .iter()
        .filter(|(_, i)| i.crd.as_deref() == Some(crd_name))
        .map(|(rt, _)| rt.clone())
        .collect();
    for rt in &gone {
        table.resources.remove(rt);
    }
    table.order.retain(|rt| !gone.contains(rt));
    // Drop versions (and groups) that no resource serves any more.
    let served: Vec<(String, String)> = table
        .resources
        .keys()
        .map(|rt| (rt.group.clone(), rt.version.clone()))
        .collect();
    for g in table.groups.iter_mut() {
        g.versions
            .retain(|v| served.iter().any(|(sg, sv)| *sg == g.name && sv == v));
    }
    table.groups.retain(|g| !g.versions.is_empty());
    gone
}

/// The resources a CRD object serves, one per served version. None when the CRD is
/// malformed (missing group, names or versions).
pub fn crd_resources(crd: &Value) -> Option<Vec<ResourceInfo>> {
    let name = crd.pointer("/metadata/name")?.as_str()?.to_string();
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let names = spec.get("names")?;
    let plural = names.get("plural")?.as_str()?.to_lowercase();
    let kind = names.get("kind")?.as_str()?.to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings(names.get("shortNames"));
    let categories = strings(names.get("categories"));
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let mut out = Vec::new();
    for version in spec.get("versions")?.as_array()? {
        if version.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let Some(v) = version.get("name").and_then(Value::as_str) else {
            continue;
        };
        let printer_columns = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .filter_map(|c| {
                        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                        let json_path = text("jsonPath");
                        (!text("name").is_empty() && !json_path.is_empty()).then(|| PrinterColumn {
                            name: text("name"),
                            kind: text("type"),
                            format: text("format"),
                            description: {
                                let d = text("description");
                                if d.is_empty() {
                                    format!("Custom resource definition column (in JSONPath format): {json_path}")
                                } else {
                                    d
                                }
                            },
                            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            json_path,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut subresources = Vec::new();
        let subs = version.get("subresources");
        let sub_verbs = vec!["get".to_string(), "patch".into(), "update".into()];
        if subs.and_then(|s| s.get("status")).is_some() {
            subresources.push(SubresourceInfo {
                name: "status".into(),
                group: group.clone(),
                version: v.to_string(),
                kind: kind.clone(),
                verbs: sub_verbs.clone(),
            });
        }
        if subs.and_then(|s| s.get("scale")).is_some() {
            subresources.push(SubresourceInfo {
                name: "scale".into(),
                group: "autoscaling".into(),
                version: "v1".into(),
                kind: "Scale".into(),
                verbs: sub_verbs.clone(),
            });
        }
        out.push(ResourceInfo {
            group: group.clone(),
            version: v.to_string(),
            resource: plural.clone(),
            kind: kind.clone(),
            singular: singular.clone(),
            namespaced,
            // The order a real server lists for custom resources.
            verbs: [
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            short_names: short_names.clone(),
            categories: categories.clone(),
            subresources,
            storage_version_hash: Some(storage_version_hash(&group, v, &plural)),
            crd: Some(name.clone()),
            printer_columns,
            schema: version
                .pointer("/schema/openAPIV3Schema")
                .map(|schema| Arc::new(schema.clone())),
        });
    }
    if out.is_empty() { None } else { Some(out) }
}

/// A stable 8-byte hash, base64 encoded, in the shape of the real storageVersionHash.
fn storage_version_hash(group: &str, version: &str, resource: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{group}/{version}/{resource}"));
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// `GET /version`, as the recorded v1.36 server answers (build fields are the recorded
/// build's).
pub fn version_document() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.2",
        "gitCommit": "98b35193b2ac7a23a673325f5e9b830ecd5ba406",
        "gitTreeState": "clean",
        "buildDate": "2026-11-30T00:00:00Z",
        "goVersion": "go1.26.4",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api` (legacy).
pub fn api_versions_document(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_entry(g: &GroupVersions) -> Value {
    let versions: Vec<Value> = g
        .versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{}/{}", g.name, v), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": g.name, "versions": versions, "preferredVersion": preferred})
}

impl Registry {
    /// `GET /apis` (legacy APIGroupList).
    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .filter(|g| !g.name.is_empty())
            .map(group_entry)
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/{group}`.
    pub fn api_group(&self, name: &str) -> Option<Value> {
        let g = self.group(name).filter(|g| !g.name.is_empty())?;
        let mut doc = json!({"kind": "APIGroup", "apiVersion": "v1"});
        if let (Some(map), Value::Object(entry)) = (doc.as_object_mut(), group_entry(&g)) {
            map.extend(entry);
        }
        Some(doc)
    }

    /// `GET /api/v1` or `GET /apis/{group}/{version}` (APIResourceList).
    pub fn api_resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut infos: Vec<Arc<ResourceInfo>> = self
            .resources()
            .into_iter()
            .filter(|i| i.group == group && i.version == version)
            .collect();
        if infos.is_empty() {
            return None;
        }
        infos.sort_by(|a, b| a.resource.cmp(&b.resource));
        let mut resources = Vec::new();
        for info in infos {
            let mut entry = Map::new();
            entry.insert("name".into(), json!(info.resource));
            entry.insert("singularName".into(), json!(info.singular));
            entry.insert("namespaced".into(), json!(info.namespaced));
            entry.insert("kind".into(), json!(info.kind));
            entry.insert("verbs".into(), json!(info.verbs));
            if !info.short_names.is_empty() {
                entry.insert("shortNames".into(), json!(info.short_names));
            }
            if !info.categories.is_empty() {
                entry.insert("categories".into(), json!(info.categories));
            }
            if let Some(h) = &info.storage_version_hash {
                entry.insert("storageVersionHash".into(), json!(h));
            }
            resources.push(Value::Object(entry));
            let mut subs = info.subresources.clone();
            subs.sort_by(|a, b| a.name.cmp(&b.name));
            for sub in subs {
                let mut entry = Map::new();
                entry.insert(
                    "name".into(),
                    json!(format!("{}/{}", info.resource, sub.name)),
                );
                entry.insert("singularName".into(), json!(""));
                entry.insert("namespaced".into(), json!(info.namespaced));
                // Group and version only when the response kind is from another group.
                if !sub.group.is_empty() && sub.group != info.group {
                    entry.insert("group".into(), json!(sub.group));
                    entry.insert("version".into(), json!(sub.version));
                }
                entry.insert("kind".into(), json!(sub.kind));
                entry.insert("verbs".into(), json!(sub.verbs));
                resources.push(Value::Object(entry));
            }
        }
        let group_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        let mut doc = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources
        });
        if group.is_empty()
            && let Some(map) = doc.as_object_mut()
        {
            // The real server leaves apiVersion out of the core list.
            map.remove("apiVersion");
        }
        Some(doc)
    }

    /// Aggregated discovery (apidiscovery.k8s.io/v2 APIGroupDiscoveryList) for `/api`
    /// (`core = true`) or `/apis`.
    pub fn aggregated_discovery(&self, core: bool) -> Value {
        let resources = self.resources();
        let mut items = Vec::new();
        for g in self.groups() {
            if g.name.is_empty() != core {
                continue;
            }
            let mut versions = Vec::new();
            for v in &g.versions {
                let mut infos: Vec<&Arc<ResourceInfo>> = resources
                    .iter()
                    .filter(|i| i.group == g.name && &i.version == v)
                    .collect();
                infos.sort_by(|a, b| a.resource.cmp(&b.resource));
                let entries: Vec<Value> = infos.iter().map(|i| aggregated_resource(i)).collect();
                versions.push(json!({"version": v, "resources": entries, "freshness": "Current"}));
            }
            let metadata = if g.name.is_empty() {
                json!({})
            } else {
                json!({"name": g.name})
            };
            items.push(json!({"metadata": metadata, "versions": versions}));
        }
        json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": items
        })
    }
}

fn aggregated_resource(info: &ResourceInfo) -> Value {
    // Built-ins leave responseKind group/version empty; custom resources name them.
    let (kind_group, kind_version) = if info.crd.is_some() {
        (info.group.clone(), info.version.clone())
    } else {
        (String::new(), String::new())
    };
    let mut entry = Map::new();
    entry.insert("resource".into(), json!(info.resource));
    entry.insert(
        "responseKind".into(),
        json!({"group": kind_group, "version": kind_version, "kind": info.kind}),
    );
    entry.insert(
        "scope".into(),
        json!(if info.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }),
    );
    entry.insert("singularResource".into(), json!(info.singular));
    entry.insert("verbs".into(), json!(info.verbs));
    if !info.short_names.is_empty() {
        entry.insert("shortNames".into(), json!(info.short_names));
    }
    if !info.categories.is_empty() {
        entry.insert("categories".into(), json!(info.categories));
    }
    if !info.subresources.is_empty() {
        let mut subs = info.subresources.clone();
        subs.sort_by(|a, b| a.name.cmp(&b.name));
        let subs: Vec<Value> = subs
            .iter()
            .map(|s| {
                let (g, v) = if s.group == info.group && info.crd.is_none() {
                    (String::new(), String::new())
                } else {
                    (s.group.clone(), s.version.clone())
                };
                json!({"subresource": s.name, "responseKind": {"group": g, "version": v, "kind": s.kind}, "verbs": s.verbs})
            })
            .collect();
        entry.insert("subresources".into(), Value::Array(subs));
    }
    Value::Object(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in kind the simulator serves is checked, but for the one whose v1 type is
    /// newer than the k8s-openapi API used here.
    #[test]
    fn every_served_builtin_kind_has_a_type() {
        const NEWER_THAN_1_33: [&str; 7] = [
            "VolumeAttributesClass",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "DeviceClass",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourceSlice",
        ];
        let registry = Registry::new();
        for info in registry.resources() {
            if info.crd.is_some() || NEWER_THAN_1_33.contains(&info.kind.as_str()) {
                continue;
            }
            assert!(
                crate::semantics::schema::has_builtin_type(&info.group, &info.version, &info.kind),
                "{} {} has no type here",
                info.api_version(),
                info.kind
            );
        }
    }

    use serde_json::json;

    #[test]
    fn builtins_have_the_recorded_shape() {
        let registry = Registry::new();
        let deployments = registry.lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(deployments.kind, "Deployment");
        assert!(deployments.namespaced);
        assert!(deployments.has_status());
        assert!(deployments.has_subresource("scale"));
        assert_eq!(deployments.short_names, vec!["deploy"]);
        let namespaces = registry.lookup("", "v1", "namespaces").unwrap();
        assert!(!namespaces.namespaced);
        assert!(
            registry
                .lookup("autoscaling", "v2", "horizontalpodautoscalers")
                .is_some()
        );
        assert!(registry.lookup("apps", "v1", "nothings").is_none());
    }

    /// Compares our discovery documents with the recorded ones for the groups we serve.
    fn recording(name: &str) -> Value {
        let dir = crate::shared_dir()
            .expect("the test checked for shared/")
            .join("apiserver-recordings");
        let text = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("recording {name} cannot be read: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("recording {name}: {e}"))
    }

    #[test]
    fn legacy_group_version_documents_match_recordings() {
        let Some(_shared) =
            crate::shared_for_test("legacy_group_version_documents_match_recordings")
        else {
            return;
        };
        let registry = Registry::new();
        for (file, group) in [
            ("01-discovery-apis-apps-v1.json", "apps"),
            ("01-discovery-apis-batch-v1.json", "batch"),
            (
                "01-discovery-apis-coordination-v1.json",
                "coordination.k8s.io",
            ),
            (
                "01-discovery-apis-apiextensions-v1.json",
                "apiextensions.k8s.io",
            ),
            ("01-discovery-api-v1.json", ""),
        ] {
            let recorded = recording(file);
            let ours = registry.api_resource_list(group, "v1").unwrap();
            assert_eq!(ours, recorded, "{file}");
        }
        let recorded = recording("01-discovery-apis-apps.json");
        assert_eq!(registry.api_group("apps").unwrap(), recorded);
    }

    #[test]
    fn aggregated_core_matches_recording() {
        let Some(_shared) = crate::shared_for_test("aggregated_core_matches_recording") else {
            return;
        };
        let recorded = recording("01-discovery-api-aggregated.json");
        assert_eq!(Registry::new().aggregated_discovery(true), recorded);
    }

    #[test]
    fn crd_is_served_and_removed() {
        let registry = Registry::new();
        let crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wg"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "subresources": {"status": {}}}]}
        });
        let served = registry.register_crd(&crd);
        assert_eq!(
            served,
            vec![ResourceType::new("example.com", "v1", "widgets")]
        );
        let info = registry.lookup("example.com", "v1", "widgets").unwrap();
        assert!(!info.namespaced);
        assert_eq!(info.singular, "widget");
        assert!(info.has_status());
        assert!(registry.group("example.com").is_some());
        registry.unregister_crd("widgets.example.com");
        assert!(registry.lookup("example.com", "v1", "widgets").is_none());
        assert!(registry.group("example.com").is_none());
    }

    /// Clusters share the builtin table until a CRD changes one of them, and a change stays
    /// in the cluster that made it.
    #[test]
    fn a_crd_changes_only_its_own_clusters_table() {
        let (one, other) = (Registry::new(), Registry::new());
        assert!(
            Arc::ptr_eq(&one.read(), &other.read()),
            "one table for both"
        );
        one.register_crd(&json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}
        }));
        assert!(one.lookup("example.com", "v1", "widgets").is_some());
        assert!(other.lookup("example.com", "v1", "widgets").is_none());
        assert!(other.group("example.com").is_none());
        assert!(Arc::ptr_eq(&other.read(), &Registry::new().read()));
        assert_eq!((one.read().generation, other.read().generation), (1, 0));
    }

    #[test]
    fn the_served_discovery_document_follows_crds() {
        let registry = Registry::new();
        let served = |core| {
            let doc = registry.aggregated_document(core);
            let json: Value = serde_json::from_slice(&doc.json).expect("JSON");
            (doc, json)
        };
        let (before, json) = served(false);
        assert_eq!(json, registry.aggregated_discovery(false));
        assert!(Arc::ptr_eq(&before, &served(false).0), "built once");
        assert!(
            Arc::ptr_eq(&before, &Registry::new().aggregated_document(false)),
            "one document for every cluster no CRD changed"
        );
        let (core, json) = served(true);
        assert_eq!(json, registry.aggregated_discovery(true));
        assert_ne!(core.etag, before.etag);
        registry.register_crd(&json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}
        }));
        let (after, json) = served(false);
        assert_eq!(json, registry.aggregated_discovery(false));
        assert!(String::from_utf8_lossy(&after.json).contains("\"widgets\""));
        assert_ne!(after.etag, before.etag);
        registry.unregister_crd("widgets.example.com");
        assert_eq!(served(false).0.etag, before.etag);
    }
}
