//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's typed
//! clients send them for `kubectl create <kind>`: decoded with the Kubernetes message
//! definitions as published (the k8s-pb crate, generated from the upstream .proto files,
//! so no field number is written here), then turned into the JSON object the rest of the
//! server works on, as the real server's JSON of the same Go object would read.
//!
//! Accepted kinds: Namespace, ConfigMap, Secret, ServiceAccount, Service, ResourceQuota,
//! Deployment, Job, CronJob, Role, RoleBinding, ClusterRole, ClusterRoleBinding,
//! PriorityClass, PodDisruptionBudget and Ingress (their v1 versions). Other kinds in
//! protobuf, a field kube-sim does not convert (see `kinds` and `pod`), or a field the
//! definitions do not know (a newer client) are refused with 415, naming what was not
//! understood: nothing in a body is dropped without a word (a status must be empty, since a
//! create ignores it; the nanoseconds of a Time have no place in its JSON form, as on the
//! real server). A kind or apiVersion in the envelope other than the URL's, or bytes that
//! are not a valid encoding, are refused with 400. Answers are always JSON.

mod json;
mod kinds;
mod meta;
mod pod;

use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{Value, json};

pub use json::Refusal;
use json::Zero;

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every Kubernetes protobuf body starts with, before its `runtime.Unknown` envelope.
const MAGIC: &[u8] = b"k8s\x00";

const ACCEPTED: &str = "Namespace, ConfigMap, Secret, ServiceAccount, Service, ResourceQuota, \
     Deployment, Job, CronJob, Role, RoleBinding, ClusterRole, ClusterRoleBinding, PriorityClass, \
     PodDisruptionBudget and Ingress";

/// Decodes a protobuf request body for the resource of `api_version` and `kind` (the URL's)
/// into its JSON form.
pub fn decode(body: &[u8], api_version: &str, kind: &str) -> Result<Value, Refusal> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        Refusal::Malformed(
            "the body does not start with the Kubernetes protobuf magic number".into(),
        )
    })?;
    let Unknown {
        type_meta,
        raw,
        content_encoding,
        content_type,
    } = read::<Unknown>(envelope, "the envelope")?;
    if !content_encoding.is_zero() {
        return Err(Refusal::Unsupported(format!(
            "contentEncoding {content_encoding:?} in the envelope is not supported"
        )));
    }
    if let Some(ct) = content_type.filter(|ct| !ct.is_empty() && ct != MEDIA_TYPE) {
        return Err(Refusal::Unsupported(format!(
            "contentType {ct:?} in the envelope is not supported"
        )));
    }
    let TypeMeta {
        api_version: body_api_version,
        kind: body_kind,
    } = type_meta.unwrap_or_default();
    if let Some(k) = body_kind.filter(|k| !k.is_empty() && k != kind) {
        return Err(Refusal::Malformed(format!(
            "the object provided is unrecognized (must be of type {kind}): kind {k} does not match"
        )));
    }
    if let Some(av) = body_api_version.filter(|av| !av.is_empty() && av != api_version) {
        return Err(Refusal::Malformed(format!(
            "the API version in the data ({av}) does not match the expected API version ({api_version})"
        )));
    }
    let raw = raw.ok_or_else(|| Refusal::Malformed("the envelope carries no object".into()))?;
    let object = match (api_version, kind) {
        ("v1", "Namespace") => kinds::namespace(read(&raw, kind)?),
        ("v1", "ConfigMap") => kinds::config_map(read(&raw, kind)?),
        ("v1", "Secret") => kinds::secret(read(&raw, kind)?),
        ("v1", "ServiceAccount") => kinds::service_account(read(&raw, kind)?),
        ("v1", "Service") => kinds::service(read(&raw, kind)?),
        ("v1", "ResourceQuota") => kinds::resource_quota(read(&raw, kind)?),
        ("apps/v1", "Deployment") => kinds::deployment(read(&raw, kind)?),
        ("batch/v1", "Job") => kinds::job(read(&raw, kind)?),
        ("batch/v1", "CronJob") => kinds::cron_job(read(&raw, kind)?),
        ("rbac.authorization.k8s.io/v1", "Role") => kinds::role(read(&raw, kind)?),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => kinds::role_binding(read(&raw, kind)?),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => kinds::cluster_role(read(&raw, kind)?),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            kinds::cluster_role_binding(read(&raw, kind)?)
        }
        ("scheduling.k8s.io/v1", "PriorityClass") => kinds::priority_class(read(&raw, kind)?),
        ("policy/v1", "PodDisruptionBudget") => kinds::pod_disruption_budget(read(&raw, kind)?),
        ("networking.k8s.io/v1", "Ingress") => kinds::ingress(read(&raw, kind)?),
        _ => {
            return Err(Refusal::Unsupported(format!(
                "protobuf bodies are accepted for {ACCEPTED}, not {api_version} {kind}; send JSON"
            )));
        }
    }?;
    let Value::Object(mut fields) = object else {
        return Err(Refusal::Malformed("the object is not an object".into()));
    };
    fields.insert("apiVersion".into(), json!(api_version));
    fields.insert("kind".into(), json!(kind));
    Ok(Value::Object(fields))
}

/// Decodes one message and checks that it holds everything the bytes carried.
fn read<T: Message + Default>(bytes: &[u8], what: &str) -> Result<T, Refusal> {
    let message = T::decode(bytes).map_err(|e| Refusal::Malformed(format!("{what}: {e}")))?;
    nothing_dropped(bytes, &message.encode_to_vec(), what)?;
    Ok(message)
}

/// prost skips the fields a message definition does not have. So that none is lost without a
/// word, the decoded message is encoded again and both encodings are compared: bytes that
/// are the same are the same, and where they differ, both are read as messages and compared
/// field by field, down to the leaf that one has and the other lacks. Empty fields are left
/// out on both sides, because Go writes the zero value of every non-pointer field while
/// prost leaves out empty map keys and values, and they carry nothing anyway.
fn nothing_dropped(original: &[u8], again: &[u8], what: &str) -> Result<(), Refusal> {
    let mut path = Vec::new();
    if same(original, again, &mut path) {
        return Ok(());
    }
    let path = path
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".");
    Err(Refusal::Unsupported(format!(
        "{what} carries a field (field numbers from the object down: {path}) that kube-sim's \
         Kubernetes protobuf definitions (k8s-pb 0.9.0) do not have, or carries one twice; \
         send this object as JSON"
    )))
}

/// How deep the comparison goes into nested messages (prost's own recursion limit).
const MAX_DEPTH: usize = 100;

/// Whether two encodings carry the same non-empty fields. When not, `path` is left at the
/// field numbers of the first difference.
fn same(a: &[u8], b: &[u8], path: &mut Vec<u64>) -> bool {
    if a == b {
        return true;
    }
    if path.len() >= MAX_DEPTH {
        return false;
    }
    let (Some(fa), Some(fb)) = (fields(a), fields(b)) else {
        return false;
    };
    let keep = |f: &(u64, u8, &[u8])| !empty(f.1, f.2, path.len());
    let (fa, fb): (Vec<_>, Vec<_>) = (
        fa.into_iter().filter(keep).collect(),
        fb.into_iter().filter(keep).collect(),
    );
    let mut numbers: Vec<u64> = fa.iter().chain(&fb).map(|f| f.0).collect();
    numbers.sort_unstable();
    numbers.dedup();
    for number in numbers {
        let la: Vec<_> = fa.iter().filter(|f| f.0 == number).collect();
        let mut lb: Vec<Option<_>> = fb.iter().filter(|f| f.0 == number).map(Some).collect();
        path.push(number);
        if la.len() != lb.len() {
            return false;
        }
        // Repeated fields and map entries come in the same order from Go and from prost;
        // any other order is matched entry by entry.
        for (i, x) in la.iter().enumerate() {
            let matches = |y: &(u64, u8, &[u8]), path: &mut Vec<u64>| {
                x.1 == y.1 && (x.2 == y.2 || (x.1 == 2 && same(x.2, y.2, path)))
            };
            let found = (i..lb.len())
                .chain(0..i)
                .find(|&j| lb[j].is_some_and(|y| matches(y, &mut path.clone())));
            match found {
                Some(j) => lb[j] = None,
                None => {
                    // Compared again on `path` itself, so that it ends at the difference.
                    if let Some(Some(y)) = lb.get(i) {
                        matches(y, path);
                    }
                    return false;
                }
            }
        }
        path.pop();
    }
    true
}

/// Whether a field carries nothing: a zero number, an empty string, or a message whose
/// fields all carry nothing.
fn empty(wire: u8, payload: &[u8], depth: usize) -> bool {
    match wire {
        0 => payload.iter().all(|b| *b & 0x7f == 0),
        1 | 5 => payload.iter().all(|b| *b == 0),
        _ if payload.is_empty() => true,
        _ if depth >= MAX_DEPTH => false,
        _ => fields(payload).is_some_and(|list| list.iter().all(|f| empty(f.1, f.2, depth + 1))),
    }
}

/// The fields of a message as (number, wire type, payload), or None when the bytes are not
/// one.
fn fields(bytes: &[u8]) -> Option<Vec<(u64, u8, &[u8])>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let (key, next) = varint(bytes, pos)?;
        pos = next;
        let number = key >> 3;
        if number == 0 {
            return None;
        }
        let wire = (key & 7) as u8;
        let start = pos;
        let end = match wire {
            0 => varint(bytes, pos)?.1,
            1 => pos.checked_add(8)?,
            5 => pos.checked_add(4)?,
            2 => {
                let (len, next) = varint(bytes, pos)?;
                let start_of_payload = next;
                let end = start_of_payload.checked_add(usize::try_from(len).ok()?)?;
                if end > bytes.len() {
                    return None;
                }
                out.push((number, wire, &bytes[start_of_payload..end]));
                pos = end;
                continue;
            }
            _ => return None,
        };
        if end > bytes.len() {
            return None;
        }
        out.push((number, wire, &bytes[start..end]));
        pos = end;
    }
    Some(out)
}

/// A varint at `pos`: its value and the position after it.
fn varint(bytes: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(pos)?;
        pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value, pos));
        }
    }
    None
}

#[cfg(test)]
mod tests;
