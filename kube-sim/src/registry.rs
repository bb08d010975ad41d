//! The table of served resources (built-in kinds plus the resources of created CRDs) and
//! the discovery documents built from it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use serde_json::Value;

use crate::store::ResourceType;

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
}

impl ResourceInfo {
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

#[derive(Default)]
struct Table {
    groups: Vec<GroupVersions>,
    resources: BTreeMap<ResourceType, Arc<ResourceInfo>>,
    /// Resources in discovery order (as recorded), CRD resources appended.
    order: Vec<ResourceType>,
}

/// The served resources of one cluster. CRDs add and remove entries while it runs.
pub struct Registry {
    table: RwLock<Table>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
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
        Self {
            table: RwLock::new(table),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
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
        let mut table = self.write();
        remove_crd(&mut table, &crd_name);
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

    /// Stops serving what a CRD served. Returns the resource types that went away.
    pub fn unregister_crd(&self, crd_name: &str) -> Vec<ResourceType> {
        let mut table = self.write();
        remove_crd(&mut table, crd_name)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
