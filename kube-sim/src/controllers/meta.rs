//! Small helpers over objects as JSON: metadata access, owner references, selectors,
//! int-or-percent values, conditions and the pod-template hash.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::model::clock::format_time;

/// The alphabet Kubernetes uses for generated name suffixes and hashes (no vowels, no
/// look-alike characters).
pub const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn generation(obj: &Value) -> i64 {
    obj["metadata"]["generation"].as_i64().unwrap_or(0)
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

pub fn creation_time(obj: &Value) -> Option<jiff::Timestamp> {
    parse_time(&obj["metadata"]["creationTimestamp"])
}

pub fn parse_time(value: &Value) -> Option<jiff::Timestamp> {
    value.as_str().and_then(|s| s.parse().ok())
}

/// Are the fields the controllers write into shaped as the API server guarantees (objects
/// where objects belong)? Objects that are not are left alone rather than half-handled.
pub fn well_formed(obj: &Value) -> bool {
    let object_or_null = |v: &Value| v.is_object() || v.is_null();
    let meta = &obj["metadata"];
    let spec = &obj["spec"];
    let template = &spec["template"];
    obj.is_object()
        && meta.is_object()
        && object_or_null(&meta["labels"])
        && object_or_null(&meta["annotations"])
        && object_or_null(spec)
        && object_or_null(&obj["status"])
        && object_or_null(template)
        && object_or_null(&template["metadata"])
        && object_or_null(&template["metadata"]["labels"])
        && object_or_null(&template["metadata"]["annotations"])
        && object_or_null(&template["spec"])
        && object_or_null(&spec["selector"])
        && object_or_null(&spec["selector"]["matchLabels"])
        && (spec["volumeClaimTemplates"].is_null()
            || spec["volumeClaimTemplates"]
                .as_array()
                .is_some_and(|claims| {
                    claims.iter().all(|c| {
                        c.is_object()
                            && object_or_null(&c["metadata"])
                            && object_or_null(&c["spec"])
                    })
                }))
}

/// `spec.replicas`, defaulting to 1 as the API server does.
pub fn spec_replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

pub fn status_i64(obj: &Value, field: &str) -> i64 {
    obj["status"][field].as_i64().unwrap_or(0)
}

/// The uid of the object's controlling owner, if any.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

/// Every owner uid of the object.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A controlling owner reference to `owner`, as the built-in controllers write it.
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Resolves an int-or-percent (`2`, `"25%"`) against `total`, rounding percentages up or
/// down as Kubernetes does (surge up, unavailable down). Missing values count as `default`.
pub fn int_or_percent(value: &Value, total: i64, round_up: bool, default: &str) -> i64 {
    let text = match value {
        Value::Number(n) => return n.as_i64().unwrap_or(0).max(0),
        Value::String(s) => s.as_str(),
        _ => default,
    };
    match text.strip_suffix('%') {
        Some(pct) => {
            let pct: i64 = pct.trim().parse().unwrap_or(0);
            let scaled = pct.saturating_mul(total);
            if round_up {
                scaled.saturating_add(99).div_euclid(100).max(0)
            } else {
                scaled.div_euclid(100).max(0)
            }
        }
        None => text.trim().parse::<i64>().unwrap_or(0).max(0),
    }
}

/// JSON with object keys sorted, so a hash does not depend on the order fields arrived in.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// FNV-1a, 32 bits: the hash family Kubernetes uses for pod-template hashes.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Maps each byte of `text` into the safe alphabet, as Kubernetes' `rand.SafeEncodeString`.
pub fn safe_encode(text: &str) -> String {
    text.bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// The `pod-template-hash` of a pod template: stable for equal templates, like Kubernetes'
/// (FNV-32a of the template plus the collision count, encoded in the safe alphabet).
pub fn pod_template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut text = canonical_json(template);
    if let Some(count) = collision_count {
        text.push_str(&count.to_string());
    }
    safe_encode(&fnv32a(text.as_bytes()).to_string())
}

/// A random suffix of `len` characters from the safe alphabet.
pub fn random_suffix(len: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| SAFE_ALPHABET[rng.random_range(0..SAFE_ALPHABET.len())] as char)
        .collect()
}

pub fn find_condition<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == kind)
}

pub fn time_string(ts: jiff::Timestamp) -> Value {
    Value::String(format_time(ts))
}

pub fn add(ts: jiff::Timestamp, d: Duration) -> jiff::Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| ts.checked_add(d).ok())
        .unwrap_or(ts)
}

/// `later - earlier`, zero when negative.
pub fn since(later: jiff::Timestamp, earlier: jiff::Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or(Duration::ZERO)
}

/// Inserts into a JSON object only when the value is non-zero, as Go's `omitempty` on ints.
pub fn put_nonzero(map: &mut Map<String, Value>, key: &str, value: i64) {
    if value != 0 {
        map.insert(key.to_string(), json!(value));
    }
}

/// The ControllerRevision a StatefulSet or DaemonSet records for its pod template, numbered
/// after the newest of `existing`; None when `revision_name` is recorded already.
pub fn new_controller_revision(
    owner: &Value,
    kind: &str,
    revision_name: &str,
    hash_label: &str,
    hash: &str,
    existing: &[&Value],
) -> Option<Value> {
    if existing.iter().any(|r| name(r) == revision_name) {
        return None;
    }
    let number = existing
        .iter()
        .filter_map(|r| r["revision"].as_i64())
        .max()
        .unwrap_or(0)
        + 1;
    let mut labels = owner["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(hash_label.into(), json!(hash));
    let mut template = owner["spec"]["template"].clone();
    template["$patch"] = json!("replace");
    Some(json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name,
            "namespace": namespace(owner),
            "labels": labels,
            "ownerReferences": [controller_ref(owner, "apps/v1", kind)],
        },
        "data": {"spec": {"template": template}},
        "revision": number,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_or_percent_rounds_like_kubernetes() {
        let cases = [
            (json!("25%"), 2, true, 1),
            (json!("25%"), 2, false, 0),
            (json!("25%"), 4, true, 1),
            (json!("25%"), 10, true, 3),
            (json!("25%"), 10, false, 2),
            (json!(3), 10, false, 3),
            (json!("3"), 10, false, 3),
            (json!("100%"), 7, false, 7),
            (Value::Null, 10, true, 3),
        ];
        for (value, total, up, want) in cases {
            assert_eq!(
                int_or_percent(&value, total, up, "25%"),
                want,
                "{value} of {total}"
            );
        }
    }

    #[test]
    fn template_hash_is_stable_and_key_order_free() {
        let a = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "x:1"}]}});
        let b: Value = serde_json::from_str(
            r#"{"spec": {"containers": [{"image": "x:1", "name": "web"}]}, "metadata": {"labels": {"app": "web"}}}"#,
        )
        .unwrap();
        let hash = pod_template_hash(&a, None);
        assert_eq!(hash, pod_template_hash(&b, None));
        assert!(hash.len() <= 10 && !hash.is_empty());
        assert!(hash.bytes().all(|c| SAFE_ALPHABET.contains(&c)));
        let c = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "x:2"}]}});
        assert_ne!(hash, pod_template_hash(&c, None));
        assert_ne!(hash, pod_template_hash(&a, Some(1)));
    }
}
