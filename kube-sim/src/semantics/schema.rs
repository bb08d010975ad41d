//! Fields a kind does not declare. A server-side apply with any fails with a 500 naming them
//! (`.spec.extra: field not declared in schema`); a create, update or patch drops them with
//! a warning (`unknown field "spec.extra"`), or fails with 400 under `fieldValidation=Strict`:
//! all as recorded from a real API server. Custom resources are checked against their CRD's
//! `openAPIV3Schema`; built-in kinds against the Kubernetes types of k8s-openapi (its `v1_33`
//! API: fields added since then count as undeclared).

use serde_json::{Map, Value, json};

use crate::semantics::managed_fields::{ListType, item_key, list_type};

/// What declares the fields of a kind.
#[derive(Clone, Copy, Debug)]
pub enum Declaration<'a> {
    /// A CRD version's `openAPIV3Schema`.
    Crd(&'a Value),
    /// A built-in kind, by its k8s-openapi type.
    Builtin {
        group: &'a str,
        version: &'a str,
        kind: &'a str,
    },
}

/// One undeclared field, named both ways the server names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undeclared {
    /// As server-side apply says it: `.spec.template.spec.containers[name="web"].x`.
    pub apply_path: String,
    /// As the strict decoder says it: `spec.template.spec.containers[0].x`.
    pub decoder_path: String,
}

/// The fields of `object` its kind does not declare, in document order; with `prune`, they
/// are removed from `object` too. `apiVersion` and `kind` are always declared; a custom
/// resource's `metadata` is judged as an ObjectMeta. Built-in objects that do not even parse
/// as their type, and kinds not known here, are not judged.
pub fn undeclared(
    declaration: Declaration<'_>,
    object: &mut Value,
    prune: bool,
) -> Vec<Undeclared> {
    let mut walk = Walk {
        prune,
        path: Vec::new(),
        found: Vec::new(),
    };
    match declaration {
        Declaration::Crd(schema) => {
            // A custom resource's metadata is an ObjectMeta like any other.
            let metadata = object
                .get("metadata")
                .and_then(via::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>);
            if let Some(fields) = object.as_object_mut() {
                walk.object(fields, |key| match key {
                    "apiVersion" | "kind" => Some(Judge::Unchecked),
                    "metadata" => Some(metadata.as_ref().map_or(Judge::Unchecked, Judge::Kept)),
                    _ => declared(schema, key),
                });
            }
        }
        Declaration::Builtin {
            group,
            version,
            kind,
        } => {
            if let Some(kept) = typed_round_trip(group, version, kind, object) {
                walk.value(object, Judge::Kept(&kept));
            }
        }
    }
    walk.found
}

/// How the fields below one point are judged.
#[derive(Clone, Copy)]
enum Judge<'a> {
    /// By the same value after its round trip through the typed struct.
    Kept(&'a Value),
    /// By a structural schema.
    Schema(&'a Value),
    /// Kept without a schema of its own (`x-kubernetes-preserve-unknown-fields`, an embedded
    /// resource, an int-or-string, a map whose values are not described).
    Unchecked,
}

enum Step {
    Field(String),
    Item { index: usize, key: Option<String> },
}

struct Walk {
    prune: bool,
    path: Vec<Step>,
    found: Vec<Undeclared>,
}

impl Walk {
    fn value(&mut self, value: &mut Value, judge: Judge<'_>) {
        match (value, judge) {
            (_, Judge::Unchecked) => {}
            (Value::Object(fields), Judge::Kept(kept)) => {
                self.object(fields, |key| kept.get(key).map(Judge::Kept));
            }
            (Value::Object(fields), Judge::Schema(schema)) => {
                if is_opaque(schema) {
                    return;
                }
                // An embedded resource has its type and object meta besides its properties.
                let embedded = flag(schema, "x-kubernetes-embedded-resource");
                self.object(fields, |key| match key {
                    "apiVersion" | "kind" | "metadata" if embedded => Some(Judge::Unchecked),
                    _ => declared(schema, key),
                });
            }
            (Value::Array(items), judge) => {
                let field = match self.path.last() {
                    Some(Step::Field(f)) => f.clone(),
                    _ => String::new(),
                };
                // Items are named by their keys where the list has them: a built-in list by
                // Kubernetes' own table, a CRD's by its x-kubernetes-list-map-keys.
                let keys: Option<Vec<&str>> = match judge {
                    Judge::Kept(_) => match list_type(&field, items) {
                        ListType::Map(keys) => Some(keys),
                        _ => None,
                    },
                    Judge::Schema(schema)
                        if schema.get("x-kubernetes-list-type") == Some(&json!("map")) =>
                    {
                        schema
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
                    }
                    _ => None,
                };
                for (index, item) in items.iter_mut().enumerate() {
                    let item_judge = match judge {
                        Judge::Kept(kept) => match kept.get(index) {
                            Some(k) => Judge::Kept(k),
                            None => continue,
                        },
                        Judge::Schema(schema) => match schema.get("items") {
                            Some(s) => Judge::Schema(s),
                            None => continue,
                        },
                        Judge::Unchecked => continue,
                    };
                    let key = keys.as_ref().and_then(|k| item_key(k, item));
                    self.path.push(Step::Item { index, key });
                    self.value(item, item_judge);
                    self.path.pop();
                }
            }
            _ => {}
        }
    }

    /// `judge_field` says how a field is declared; None: not at all.
    fn object<'j>(
        &mut self,
        fields: &mut Map<String, Value>,
        judge_field: impl Fn(&str) -> Option<Judge<'j>>,
    ) {
        let mut doomed = Vec::new();
        for (key, child) in fields.iter_mut() {
            // A null is no value: the server treats it as absent.
            if child.is_null() {
                continue;
            }
            self.path.push(Step::Field(key.clone()));
            match judge_field(key) {
                None => {
                    self.found.push(self.here());
                    doomed.push(key.clone());
                }
                Some(judge) => self.value(child, judge),
            }
            self.path.pop();
        }
        if self.prune {
            for key in doomed {
                fields.remove(&key);
            }
        }
    }

    fn here(&self) -> Undeclared {
        let mut apply_path = String::new();
        let mut decoder_path = String::new();
        for step in &self.path {
            match step {
                Step::Field(f) => {
                    apply_path.push('.');
                    apply_path.push_str(f);
                    if !decoder_path.is_empty() {
                        decoder_path.push('.');
                    }
                    decoder_path.push_str(f);
                }
                Step::Item { index, key } => {
                    match key.as_deref().and_then(key_label) {
                        Some(label) => apply_path.push_str(&label),
                        None => apply_path.push_str(&format!("[{index}]")),
                    }
                    decoder_path.push_str(&format!("[{index}]"));
                }
            }
        }
        Undeclared {
            apply_path,
            decoder_path,
        }
    }
}

/// `[name="web"]` from an item key `k:{"name":"web"}`.
fn key_label(key: &str) -> Option<String> {
    let fields: Map<String, Value> = serde_json::from_str(key.strip_prefix("k:")?).ok()?;
    let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Some(format!("[{}]", parts.join(",")))
}

/// A value through the type `T` and back: what `T` does not declare is gone.
fn via<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Option<Value> {
    // Parsed from a borrow: no copy of the value.
    let typed = T::deserialize(value).ok()?;
    serde_json::to_value(&typed).ok()
}

/// The object through its k8s-openapi type and back: fields the type does not declare are
/// dropped (the types ignore unknown fields when they parse).
/// Whether the built-in kind has a type here to check its objects against.
pub fn has_builtin_type(group: &str, version: &str, kind: &str) -> bool {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
    typed_round_trip(group, version, kind, &object).is_some()
}

fn typed_round_trip(group: &str, version: &str, kind: &str, object: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        admissionregistration, apps, authentication, authorization, autoscaling, batch,
        certificates, coordination, core, discovery, events, flowcontrol, networking, node, policy,
        rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
    match (group, version, kind) {
        ("", "v1", "Binding") => via::<core::v1::Binding>(object),
        ("", "v1", "ComponentStatus") => via::<core::v1::ComponentStatus>(object),
        ("", "v1", "ConfigMap") => via::<core::v1::ConfigMap>(object),
        ("", "v1", "Event") => via::<core::v1::Event>(object),
        ("", "v1", "Node") => via::<core::v1::Node>(object),
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
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
            via::<admissionregistration::v1::MutatingWebhookConfiguration>(object)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
            via::<admissionregistration::v1::ValidatingWebhookConfiguration>(object)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
            via::<admissionregistration::v1::ValidatingAdmissionPolicy>(object)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
            via::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(object)
        }
        ("apiregistration.k8s.io", "v1", "APIService") => {
            via::<apiregistration::v1::APIService>(object)
        }
        ("authentication.k8s.io", "v1", "SelfSubjectReview") => {
            via::<authentication::v1::SelfSubjectReview>(object)
        }
        ("authentication.k8s.io", "v1", "TokenReview") => {
            via::<authentication::v1::TokenReview>(object)
        }
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview") => {
            via::<authorization::v1::LocalSubjectAccessReview>(object)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
            via::<authorization::v1::SelfSubjectAccessReview>(object)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectRulesReview") => {
            via::<authorization::v1::SelfSubjectRulesReview>(object)
        }
        ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
            via::<authorization::v1::SubjectAccessReview>(object)
        }
        ("certificates.k8s.io", "v1", "CertificateSigningRequest") => {
            via::<certificates::v1::CertificateSigningRequest>(object)
        }
        ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema") => {
            via::<flowcontrol::v1::FlowSchema>(object)
        }
        ("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration") => {
            via::<flowcontrol::v1::PriorityLevelConfiguration>(object)
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            via::<apiextensions::v1::CustomResourceDefinition>(object)
        }
        ("apps", "v1", "ControllerRevision") => via::<apps::v1::ControllerRevision>(object),
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
        ("events.k8s.io", "v1", "Event") => via::<events::v1::Event>(object),
        ("networking.k8s.io", "v1", "IPAddress") => via::<networking::v1::IPAddress>(object),
        ("networking.k8s.io", "v1", "Ingress") => via::<networking::v1::Ingress>(object),
        ("networking.k8s.io", "v1", "ServiceCIDR") => via::<networking::v1::ServiceCIDR>(object),
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
        ("storage.k8s.io", "v1", "CSIDriver") => via::<storage::v1::CSIDriver>(object),
        ("storage.k8s.io", "v1", "CSINode") => via::<storage::v1::CSINode>(object),
        ("storage.k8s.io", "v1", "CSIStorageCapacity") => {
            via::<storage::v1::CSIStorageCapacity>(object)
        }
        ("storage.k8s.io", "v1", "StorageClass") => via::<storage::v1::StorageClass>(object),
        ("storage.k8s.io", "v1", "VolumeAttachment") => {
            via::<storage::v1::VolumeAttachment>(object)
        }
        _ => None,
    }
}

/// How an object schema declares the field `key`; None: not at all.
fn declared<'a>(schema: &'a Value, key: &str) -> Option<Judge<'a>> {
    if let Some(child) = schema.pointer(&format!("/properties/{}", escape(key))) {
        return Some(Judge::Schema(child));
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(true)) => return Some(Judge::Unchecked),
        Some(child @ Value::Object(_)) => return Some(Judge::Schema(child)),
        _ => {}
    }
    flag(schema, "x-kubernetes-preserve-unknown-fields").then_some(Judge::Unchecked)
}

/// A schema that does not list an object's fields: an int-or-string, or an object kept as
/// it comes (preserve-unknown-fields or an embedded resource, without properties).
fn is_opaque(schema: &Value) -> bool {
    flag(schema, "x-kubernetes-int-or-string")
        || ((flag(schema, "x-kubernetes-preserve-unknown-fields")
            || flag(schema, "x-kubernetes-embedded-resource"))
            && schema.get("properties").is_none())
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name) == Some(&Value::Bool(true))
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
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
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
            (
                json!({"metadata": {"name": "w", "lables": {}}}),
                Some(".metadata.lables"),
            ),
            (
                json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "replicas": 1}}}),
                Some(".spec.template.replicas"),
            ),
        ];
        for (mut object, want) in cases {
            let found = undeclared(Declaration::Crd(&schema), &mut object, false);
            assert_eq!(
                found.first().map(|u| u.apply_path.as_str()),
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
            assert_eq!(
                first_builtin(&group, &version, &object).as_deref(),
                want,
                "{object}"
            );
        }
        // Kinds not known here, and bodies that are not even their type, are not judged.
        let odd = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"x": 1}});
        assert_eq!(first_builtin("example.com", "v1", &odd), None);
        let wrong_type =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "not a map", "bogus": 1});
        assert_eq!(first_builtin("", "v1", &wrong_type), None);
    }

    fn first_builtin(group: &str, version: &str, object: &Value) -> Option<String> {
        let declaration = Declaration::Builtin {
            group,
            version,
            kind: object["kind"].as_str().unwrap_or(""),
        };
        let mut object = object.clone();
        let found = undeclared(declaration, &mut object, false);
        found.into_iter().next().map(|u| u.apply_path)
    }

    #[test]
    fn prune_removes_every_undeclared_field_and_names_it_for_the_decoder() {
        let declaration = Declaration::Builtin {
            group: "apps",
            version: "v1",
            kind: "Deployment",
        };
        let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "bogus": 1,
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "a", "image": "a"},
                {"name": "b", "image": "b", "imagePullPolice": "Always"}]}}}});
        let found = undeclared(declaration, &mut object, true);
        let decoder: Vec<&str> = found.iter().map(|u| u.decoder_path.as_str()).collect();
        assert_eq!(
            decoder,
            ["bogus", "spec.template.spec.containers[1].imagePullPolice"]
        );
        assert_eq!(
            object,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}}}})
        );
        let mut widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1"}, "spec": {"size": 4, "extra": "x"}});
        let found = undeclared(Declaration::Crd(&widget_schema()), &mut widget, true);
        assert_eq!(found[0].decoder_path, "spec.extra");
        assert!(widget["spec"].get("extra").is_none());
    }

    /// Real manifests nobody here wrote must pass: a false "undeclared" would refuse them.
    #[test]
    fn every_object_of_the_corpus_declares_all_its_fields() {
        let corpus = crate::shared_dir()
            .expect("shared/ must be beside the repository")
            .join("corpus");
        let mut files = vec![corpus];
        let mut checked = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let name = path.to_string_lossy().to_string();
            if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in text.split("\n---") {
                let Ok(mut object) = serde_saphyr::from_str::<Value>(doc) else {
                    continue;
                };
                let (Some(api_version), Some(kind)) =
                    (object["apiVersion"].as_str(), object["kind"].as_str())
                else {
                    continue;
                };
                let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
                let (group, version, kind) =
                    (group.to_string(), version.to_string(), kind.to_string());
                let declaration = Declaration::Builtin {
                    group: &group,
                    version: &version,
                    kind: &kind,
                };
                let found = undeclared(declaration, &mut object, false);
                assert_eq!(found, vec![], "{name}: {kind}");
                checked += 1;
            }
        }
        assert!(checked >= 50, "only {checked} objects found in the corpus");
    }

    #[test]
    fn a_schema_that_preserves_unknown_fields_declares_everything() {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let mut object = json!({"spec": {"a": 1}});
        assert_eq!(
            undeclared(Declaration::Crd(&schema), &mut object, true),
            vec![]
        );
    }
}
