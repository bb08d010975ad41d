//! API errors, answered as `kind: Status` bodies shaped like the real API server's.

use serde_json::{Map, Value, json};

use crate::model::resource::ResourceType;

/// An error answered to an API client as a `Status` object.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    /// Empty for errors that the real server answers without a reason (e.g. 500s from apply).
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

/// `deployments.apps` for grouped resources, `configmaps` for the core group.
pub fn qualified_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.resource.clone()
    } else {
        format!("{}.{}", rt.resource, rt.group)
    }
}

/// `details` as the server writes it for an object: name, group (when not core), kind
/// (the plural resource name, as the real server does).
fn object_details(rt: &ResourceType, name: &str) -> Map<String, Value> {
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !rt.group.is_empty() {
        details.insert("group".into(), json!(rt.group));
    }
    details.insert("kind".into(), json!(rt.resource));
    details
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `deployments.apps "nope" not found`
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified_resource(rt), name),
        )
        .with_details(Value::Object(object_details(rt, name)))
    }

    /// `namespaces "x" not found`, answered for writes into a missing namespace.
    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::not_found(&ResourceType::new("", "v1", "namespaces"), namespace)
    }

    /// A 404 for a path that names no served resource (the real server answers a bare
    /// `404 page not found` Status).
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// Optimistic-concurrency conflict (stale resourceVersion).
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified_resource(rt),
                name
            ),
        )
        .with_details(Value::Object(object_details(rt, name)))
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified_resource(rt), name),
        )
        .with_details(Value::Object(object_details(rt, name)))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 Invalid with one cause. `kind` and `name` name the object as the message does
    /// (`ConfigMap ""` or `leases.coordination.k8s.io "x"`); `details` carries the causes.
    pub fn invalid(
        subject: &str,
        mut details: Map<String, Value>,
        field: &str,
        cause_reason: &str,
        cause_message: &str,
    ) -> Self {
        details.insert(
            "causes".into(),
            json!([{ "reason": cause_reason, "message": cause_message, "field": field }]),
        );
        Self::new(
            422,
            "Invalid",
            format!("{subject} is invalid: {field}: {cause_message}"),
        )
        .with_details(Value::Object(details))
    }

    /// 422 Invalid for the field errors of one object, as the real server words it:
    /// `Deployment.apps "web" is invalid: spec.selector: ...`, several errors in brackets,
    /// one cause each; details.kind is the Kind.
    pub fn invalid_fields(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let subject = if group.is_empty() {
            format!("{kind} \"{name}\"")
        } else {
            format!("{kind}.{group} \"{name}\"")
        };
        let listed: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        let joined = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut details = Map::new();
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        details.insert("kind".into(), json!(kind));
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        details.insert("causes".into(), Value::Array(causes));
        Self::new(422, "Invalid", format!("{subject} is invalid: {joined}"))
            .with_details(Value::Object(details))
    }

    /// `Kind "" is invalid: metadata.name: Required value: name or generateName is required`
    pub fn name_required(kind: &str) -> Self {
        let mut details = Map::new();
        details.insert("kind".into(), json!(kind));
        Self::invalid(
            &format!("{kind} \"\""),
            details,
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        )
    }

    /// PUT without resourceVersion on a kind that refuses unconditional updates.
    pub fn resource_version_required(rt: &ResourceType, name: &str) -> Self {
        Self::invalid(
            &format!("{} \"{}\"", qualified_resource(rt), name),
            object_details(rt, name),
            "metadata.resourceVersion",
            "FieldValueInvalid",
            "Invalid value: 0: must be specified for an update",
        )
    }

    /// Create in a namespace that is being deleted.
    pub fn namespace_terminating(rt: &ResourceType, name: &str, namespace: &str) -> Self {
        let mut details = object_details(rt, name);
        details.insert(
            "causes".into(),
            json!([{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {namespace} is being terminated"),
                "field": "metadata.namespace"
            }]),
        );
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                qualified_resource(rt),
                name,
                namespace
            ),
        )
        .with_details(Value::Object(details))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// What an anonymous request gets: `namespaces is forbidden: User "system:anonymous" ...`.
    pub fn forbidden_anonymous(verb: &str, rt: Option<&ResourceType>, namespace: &str) -> Self {
        let Some(rt) = rt else {
            return Self::new(
                403,
                "Forbidden",
                "forbidden: User \"system:anonymous\" cannot get path \"/\"",
            )
            .with_details(json!({}));
        };
        let scope = if namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{namespace}\"")
        };
        let mut details = Map::new();
        if !rt.group.is_empty() {
            details.insert("group".into(), json!(rt.group));
        }
        details.insert("kind".into(), json!(rt.resource));
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} is forbidden: User \"system:anonymous\" cannot {} resource \"{}\" in API group \"{}\" {}",
                qualified_resource(rt),
                verb,
                rt.resource,
                rt.group,
                scope
            ),
        )
        .with_details(Value::Object(details))
    }

    /// 415 as answered for PATCH (bare message, empty details).
    pub fn unsupported_patch_type() -> Self {
        Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
            .with_details(json!({}))
    }

    /// 415 as answered for POST/PUT bodies.
    pub fn unsupported_body_type() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// A server-side apply with fields the resource's schema does not declare: a 500
    /// without a reason, as a real server answers (with or without fieldValidation=Strict).
    /// `object` is `namespace/name`, or `name` when cluster-scoped. Several fields are listed
    /// one per line after `errors:`, as structured-merge-diff joins them.
    pub fn undeclared_fields(
        object: &str,
        api_version: &str,
        kind: &str,
        paths: &[String],
    ) -> Self {
        let errors: Vec<String> = paths
            .iter()
            .map(|p| format!("{p}: field not declared in schema"))
            .collect();
        let listed = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("errors:\n  {}", many.join("\n  ")),
        };
        Self::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({object}; {api_version}, Kind={kind}): {listed}"
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// Watch from a resourceVersion older than the kept history.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// The `Status` body for this error.
    pub fn to_status(&self) -> Value {
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), json!({}));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            status.insert("reason".into(), json!(self.reason));
        }
        if let Some(details) = &self.details {
            status.insert("details".into(), details.clone());
        }
        status.insert("code".into(), json!(self.code));
        Value::Object(status)
    }
}

/// One field error, as `field.Error` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// `spec.selector`, `data[a b]`, `spec.containers[1].name`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// The error without its field: `Invalid value: {...}: field is immutable`.
    pub message: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", printed(value)),
        }
    }

    pub fn required(field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueRequired",
            message: "Required value".into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
        }
    }

    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max_bytes} bytes"),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {}", printed(value)),
        }
    }
}

/// A value as v1.36 prints it in an error: JSON (strings quoted, objects compact).
fn printed(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_recording() {
        let rt = ResourceType::new("apps", "v1", "deployments");
        let status = ApiError::not_found(&rt, "nope").to_status();
        assert_eq!(
            status,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"deployments.apps \"nope\" not found","reason":"NotFound",
                "details":{"name":"nope","group":"apps","kind":"deployments"},"code":404})
        );
    }

    #[test]
    fn core_group_has_no_group_detail() {
        let rt = ResourceType::new("", "v1", "configmaps");
        let status = ApiError::not_found(&rt, "cm1").to_status();
        assert_eq!(status["message"], "configmaps \"cm1\" not found");
        assert!(status["details"].get("group").is_none());
    }

    #[test]
    fn reasonless_errors_omit_reason() {
        let status = ApiError::new(500, "", "boom").to_status();
        assert!(status.get("reason").is_none());
    }

    #[test]
    fn resource_version_required_matches_recording() {
        let rt = ResourceType::new("coordination.k8s.io", "v1", "leases");
        let status = ApiError::resource_version_required(&rt, "rollguard-lock").to_status();
        assert_eq!(
            status["message"],
            "leases.coordination.k8s.io \"rollguard-lock\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueInvalid"
        );
    }
}
