//! Fields a kind does not declare. A server-side apply with any fails with a 500 naming them
//! (`.spec.extra: field not declared in schema`); a create, update or patch drops them with
//! a warning (`unknown field "spec.extra"`), or fails with 400 under `fieldValidation=Strict`:
//! all as recorded from a real API server. Custom resources are checked against their CRD's
//! `openAPIV3Schema`; built-in kinds against the Kubernetes types of k8s-openapi (its `v1_33`
//! API: fields added since then count as undeclared).

use serde_json::{Map, Value, json};

use crate::semantics::managed_fields::{ListType, item_key, list_type};

/// Calls the generic function `$f::<T>($object)` with the k8s-openapi type `T` of a built-in
/// kind, or gives None for a kind without one here: the one list of typed kinds.
macro_rules! with_builtin_type {
    ($group:expr, $version:expr, $kind:expr, $f:ident, $object:expr) => {{
        use k8s_openapi::api::{
            admissionregistration, apps, authentication, authorization, autoscaling, batch,
            certificates, coordination, core, discovery, events, flowcontrol, networking, node,
            policy, rbac, scheduling, storage,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
        use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
        match ($group, $version, $kind) {
            ("", "v1", "Binding") => $f::<core::v1::Binding>($object),
            ("", "v1", "ComponentStatus") => $f::<core::v1::ComponentStatus>($object),
            ("", "v1", "ConfigMap") => $f::<core::v1::ConfigMap>($object),
            ("", "v1", "Event") => $f::<core::v1::Event>($object),
            ("", "v1", "Node") => $f::<core::v1::Node>($object),
            ("", "v1", "Endpoints") => $f::<core::v1::Endpoints>($object),
            ("", "v1", "LimitRange") => $f::<core::v1::LimitRange>($object),
            ("", "v1", "Namespace") => $f::<core::v1::Namespace>($object),
            ("", "v1", "PersistentVolume") => $f::<core::v1::PersistentVolume>($object),
            ("", "v1", "PersistentVolumeClaim") => $f::<core::v1::PersistentVolumeClaim>($object),
            ("", "v1", "Pod") => $f::<core::v1::Pod>($object),
            ("", "v1", "PodTemplate") => $f::<core::v1::PodTemplate>($object),
            ("", "v1", "ReplicationController") => $f::<core::v1::ReplicationController>($object),
            ("", "v1", "ResourceQuota") => $f::<core::v1::ResourceQuota>($object),
            ("", "v1", "Secret") => $f::<core::v1::Secret>($object),
            ("", "v1", "Service") => $f::<core::v1::Service>($object),
            ("", "v1", "ServiceAccount") => $f::<core::v1::ServiceAccount>($object),
            ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
                $f::<admissionregistration::v1::MutatingWebhookConfiguration>($object)
            }
            ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
                $f::<admissionregistration::v1::ValidatingWebhookConfiguration>($object)
            }
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
                $f::<admissionregistration::v1::ValidatingAdmissionPolicy>($object)
            }
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
                $f::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>($object)
            }
            ("apiregistration.k8s.io", "v1", "APIService") => {
                $f::<apiregistration::v1::APIService>($object)
            }
            ("authentication.k8s.io", "v1", "SelfSubjectReview") => {
                $f::<authentication::v1::SelfSubjectReview>($object)
            }
            ("authentication.k8s.io", "v1", "TokenReview") => {
                $f::<authentication::v1::TokenReview>($object)
            }
            ("authorization.k8s.io", "v1", "LocalSubjectAccessReview") => {
                $f::<authorization::v1::LocalSubjectAccessReview>($object)
            }
            ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
                $f::<authorization::v1::SelfSubjectAccessReview>($object)
            }
            ("authorization.k8s.io", "v1", "SelfSubjectRulesReview") => {
                $f::<authorization::v1::SelfSubjectRulesReview>($object)
            }
            ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
                $f::<authorization::v1::SubjectAccessReview>($object)
            }
            ("certificates.k8s.io", "v1", "CertificateSigningRequest") => {
                $f::<certificates::v1::CertificateSigningRequest>($object)
            }
            ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema") => {
                $f::<flowcontrol::v1::FlowSchema>($object)
            }
            ("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration") => {
                $f::<flowcontrol::v1::PriorityLevelConfiguration>($object)
            }
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
                $f::<apiextensions::v1::CustomResourceDefinition>($object)
            }
            ("apps", "v1", "ControllerRevision") => $f::<apps::v1::ControllerRevision>($object),
            ("apps", "v1", "DaemonSet") => $f::<apps::v1::DaemonSet>($object),
            ("apps", "v1", "Deployment") => $f::<apps::v1::Deployment>($object),
            ("apps", "v1", "ReplicaSet") => $f::<apps::v1::ReplicaSet>($object),
            ("apps", "v1", "StatefulSet") => $f::<apps::v1::StatefulSet>($object),
            ("autoscaling", "v1", "HorizontalPodAutoscaler") => {
                $f::<autoscaling::v1::HorizontalPodAutoscaler>($object)
            }
            ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
                $f::<autoscaling::v2::HorizontalPodAutoscaler>($object)
            }
            ("batch", "v1", "CronJob") => $f::<batch::v1::CronJob>($object),
            ("batch", "v1", "Job") => $f::<batch::v1::Job>($object),
            ("coordination.k8s.io", "v1", "Lease") => $f::<coordination::v1::Lease>($object),
            ("discovery.k8s.io", "v1", "EndpointSlice") => {
                $f::<discovery::v1::EndpointSlice>($object)
            }
            ("events.k8s.io", "v1", "Event") => $f::<events::v1::Event>($object),
            ("networking.k8s.io", "v1", "IPAddress") => $f::<networking::v1::IPAddress>($object),
            ("networking.k8s.io", "v1", "Ingress") => $f::<networking::v1::Ingress>($object),
            ("networking.k8s.io", "v1", "ServiceCIDR") => {
                $f::<networking::v1::ServiceCIDR>($object)
            }
            ("networking.k8s.io", "v1", "IngressClass") => {
                $f::<networking::v1::IngressClass>($object)
            }
            ("networking.k8s.io", "v1", "NetworkPolicy") => {
                $f::<networking::v1::NetworkPolicy>($object)
            }
            ("node.k8s.io", "v1", "RuntimeClass") => $f::<node::v1::RuntimeClass>($object),
            ("policy", "v1", "PodDisruptionBudget") => {
                $f::<policy::v1::PodDisruptionBudget>($object)
            }
            ("rbac.authorization.k8s.io", "v1", "ClusterRole") => {
                $f::<rbac::v1::ClusterRole>($object)
            }
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
                $f::<rbac::v1::ClusterRoleBinding>($object)
            }
            ("rbac.authorization.k8s.io", "v1", "Role") => $f::<rbac::v1::Role>($object),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding") => {
                $f::<rbac::v1::RoleBinding>($object)
            }
            ("scheduling.k8s.io", "v1", "PriorityClass") => {
                $f::<scheduling::v1::PriorityClass>($object)
            }
            ("storage.k8s.io", "v1", "CSIDriver") => $f::<storage::v1::CSIDriver>($object),
            ("storage.k8s.io", "v1", "CSINode") => $f::<storage::v1::CSINode>($object),
            ("storage.k8s.io", "v1", "CSIStorageCapacity") => {
                $f::<storage::v1::CSIStorageCapacity>($object)
            }
            ("storage.k8s.io", "v1", "StorageClass") => $f::<storage::v1::StorageClass>($object),
            ("storage.k8s.io", "v1", "VolumeAttachment") => {
                $f::<storage::v1::VolumeAttachment>($object)
            }
            _ => None,
        }
    }};
}

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
        paths_of(&self.path)
    }
}

/// A field's path both ways the server writes it.
fn paths_of(steps: &[Step]) -> Undeclared {
    let mut apply_path = String::new();
    let mut decoder_path = String::new();
    for step in steps {
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

/// A field whose value is not of the type its kind declares (or out of its range).
#[derive(Clone, Debug, PartialEq)]
pub struct TypeError {
    /// Where, both ways the server writes it.
    pub path: Undeclared,
    /// The value found there.
    pub value: Value,
    /// The declared type in Go's words (`int32`, `string`, `bool`), or as the type is named.
    pub expected: String,
    /// A number of the right kind but too large (or fractional) for the declared type.
    pub out_of_range: bool,
}

impl TypeError {
    /// The JSON type of the value as Go's decoder names it (`string`, `number`, ...).
    pub fn found(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// The declared type as structured-merge-diff names it in a typed-patch error.
    pub fn schema_type(&self) -> &str {
        match self.expected.as_str() {
            "int32" | "int64" | "float64" => "numeric (int or float)",
            "bool" => "boolean",
            "string" => "string",
            "array" => "list",
            other => other,
        }
    }

    /// Go's decoder on this value: `json: cannot unmarshal string into Go struct field
    /// Deployment.spec.replicas of type int32` (the real server names the innermost Go
    /// struct, e.g. `DeploymentSpec`; here the kind stands for it).
    pub fn go_message(&self, kind: &str) -> String {
        let found = if self.out_of_range {
            format!("number {}", self.value)
        } else {
            self.found().to_string()
        };
        format!(
            "json: cannot unmarshal {found} into Go struct field {kind}.{} of type {}",
            self.path.decoder_path, self.expected
        )
    }

    /// What structured-merge-diff calls the value it got instead.
    pub fn schema_found(&self) -> &'static str {
        match self.value {
            Value::Bool(_) => "boolean",
            Value::Number(_) => "numeric",
            Value::Array(_) => "list",
            Value::Object(_) => "map",
            _ => self.found(),
        }
    }
}

/// The first field of a built-in object that does not parse as its declared type: a string
/// where an int32 belongs, a number too large for it, a list where a string belongs. From
/// the same k8s-openapi types the undeclared-field check uses; None for custom resources
/// (their schemas are not type-checked here) and kinds without a type here.
pub fn type_error(declaration: Declaration<'_>, object: &Value) -> Option<TypeError> {
    let Declaration::Builtin {
        group,
        version,
        kind,
    } = declaration
    else {
        return None;
    };
    let (segments, message) = with_builtin_type!(group, version, kind, first_error, object)??;
    // Walk the object along the failed path, naming keyed list items as the server does.
    let mut steps = Vec::new();
    let mut here = object;
    for segment in segments {
        match segment {
            PathPart::Key(key) => {
                here = here.get(&key).unwrap_or(&Value::Null);
                steps.push(Step::Field(key));
            }
            PathPart::Index(index) => {
                let field = match steps.last() {
                    Some(Step::Field(f)) => f.clone(),
                    _ => String::new(),
                };
                let items = here.as_array().map(Vec::as_slice).unwrap_or_default();
                let key = match list_type(&field, items) {
                    ListType::Map(keys) => items.get(index).and_then(|i| item_key(&keys, i)),
                    _ => None,
                };
                here = items.get(index).unwrap_or(&Value::Null);
                steps.push(Step::Item { index, key });
            }
        }
    }
    let expected_rust = message.rsplit_once(", expected ").map(|(_, e)| e)?;
    let expected = match expected_rust.trim() {
        "i32" => "int32",
        "i64" => "int64",
        "f64" => "float64",
        "a string" | "string" => "string",
        "a boolean" | "bool" => "bool",
        "a sequence" => "array",
        "a map" => "object",
        other => other,
    }
    .to_string();
    let out_of_range = here.is_number() && matches!(expected.as_str(), "int32" | "int64");
    Some(TypeError {
        path: paths_of(&steps),
        value: here.clone(),
        expected,
        out_of_range,
    })
}

enum PathPart {
    Key(String),
    Index(usize),
}

/// Where and why `T` refuses `value`, or None when it parses.
fn first_error<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> Option<Option<(Vec<PathPart>, String)>> {
    let Err(error) = serde_path_to_error::deserialize::<_, T>(value) else {
        return Some(None);
    };
    let parts = error
        .path()
        .iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(PathPart::Key(key.clone())),
            serde_path_to_error::Segment::Seq { index } => Some(PathPart::Index(*index)),
            _ => None,
        })
        .collect();
    Some(Some((parts, error.inner().to_string())))
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

/// The object through its k8s-openapi type and back: fields the type does not declare are
/// dropped (the types ignore unknown fields when they parse).
fn typed_round_trip(group: &str, version: &str, kind: &str, object: &Value) -> Option<Value> {
    with_builtin_type!(group, version, kind, via, object)
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

    #[test]
    fn type_errors_table() {
        let deployment = Declaration::Builtin {
            group: "apps",
            version: "v1",
            kind: "Deployment",
        };
        let template = json!({"metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{"name": "web", "image": "w", "ports": [{"containerPort": "80"}]}]}});
        let cases = [
            (json!({"spec": {"replicas": 2}}), None),
            (
                json!({"spec": {"replicas": "2"}}),
                Some((".spec.replicas", "spec.replicas", "int32", false)),
            ),
            (
                json!({"spec": {"replicas": 99999999999i64}}),
                Some((".spec.replicas", "spec.replicas", "int32", true)),
            ),
            (
                json!({"spec": {"paused": "yes"}}),
                Some((".spec.paused", "spec.paused", "bool", false)),
            ),
            (
                json!({"spec": {"template": template}}),
                Some((
                    ".spec.template.spec.containers[name=\"web\"].ports[containerPort=\"80\",protocol=\"TCP\"].containerPort",
                    "spec.template.spec.containers[0].ports[0].containerPort",
                    "int32",
                    false,
                )),
            ),
        ];
        for (object, want) in cases {
            let got = type_error(deployment, &object);
            let got = got.as_ref().map(|e| {
                (
                    e.path.apply_path.as_str(),
                    e.path.decoder_path.as_str(),
                    e.expected.as_str(),
                    e.out_of_range,
                )
            });
            assert_eq!(got, want, "{object}");
        }
    }
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
        let Some(_shared) =
            crate::shared_for_test("every_object_of_the_corpus_declares_all_its_fields")
        else {
            return;
        };
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
