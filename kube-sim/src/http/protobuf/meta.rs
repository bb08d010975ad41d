//! The apimachinery types every kind uses: ObjectMeta, LabelSelector, Time, IntOrString and
//! Quantity, from their k8s-pb messages to their JSON form.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, LabelSelector, LabelSelectorRequirement, ManagedFieldsEntry, ObjectMeta,
    OwnerReference, Time,
};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::json::{Obj, Refusal, Result, Zero, join};

pub fn object_meta(meta: ObjectMeta, path: &str) -> Result<Value> {
    let ObjectMeta {
        name,
        generate_name,
        namespace,
        self_link,
        uid,
        resource_version,
        generation,
        creation_timestamp,
        deletion_timestamp,
        deletion_grace_period_seconds,
        labels,
        annotations,
        owner_references,
        finalizers,
        managed_fields,
    } = meta;
    let mut o = Obj::new();
    o.str("name", name);
    o.str("generateName", generate_name);
    o.str("namespace", namespace);
    o.str("selfLink", self_link);
    o.str("uid", uid);
    o.str("resourceVersion", resource_version);
    o.int("generation", generation);
    // A non-pointer metav1.Time: the zero time is left out (as the server's JSON does).
    if let Some(t) = creation_timestamp.map(|t| time(t, &join(path, "creationTimestamp"))) {
        let t = t?;
        if !t.is_null() {
            o.put("creationTimestamp", t);
        }
    }
    o.msg(path, "deletionTimestamp", deletion_timestamp, time)?;
    o.int_ptr("deletionGracePeriodSeconds", deletion_grace_period_seconds);
    o.str_map("labels", labels);
    o.str_map("annotations", annotations);
    o.list(path, "ownerReferences", owner_references, owner_reference)?;
    o.strs("finalizers", finalizers);
    o.list(path, "managedFields", managed_fields, managed_fields_entry)?;
    Ok(o.done())
}

fn owner_reference(r: OwnerReference, _path: &str) -> Result<Value> {
    let OwnerReference {
        api_version,
        kind,
        name,
        uid,
        controller,
        block_owner_deletion,
    } = r;
    let mut o = Obj::new();
    o.str_always("apiVersion", api_version);
    o.str_always("kind", kind);
    o.str_always("name", name);
    o.str_always("uid", uid);
    o.bool_ptr("controller", controller);
    o.bool_ptr("blockOwnerDeletion", block_owner_deletion);
    Ok(o.done())
}

fn managed_fields_entry(e: ManagedFieldsEntry, path: &str) -> Result<Value> {
    let ManagedFieldsEntry {
        manager,
        operation,
        api_version,
        time: at,
        fields_type,
        fields_v1,
        subresource,
    } = e;
    let mut o = Obj::new();
    o.str("manager", manager);
    o.str("operation", operation);
    o.str("apiVersion", api_version);
    o.msg(path, "time", at, time)?;
    o.str("fieldsType", fields_type);
    o.msg(path, "fieldsV1", fields_v1, |f: FieldsV1, p| {
        let FieldsV1 { raw } = f;
        // FieldsV1 carries its JSON as bytes.
        serde_json::from_slice(raw.as_deref().unwrap_or(b"{}"))
            .map_err(|e| Refusal::Malformed(format!("{p} is not JSON: {e}")))
    })?;
    o.str("subresource", subresource);
    Ok(o.done())
}

/// A metav1.Time: RFC 3339 in whole seconds, as its JSON form is (the nanoseconds are not
/// part of it), and `null` for the zero time.
pub fn time(t: Time, path: &str) -> Result<Value> {
    let Time { seconds, nanos } = t;
    let (seconds, nanos) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    if seconds == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let at = jiff::Timestamp::from_second(seconds)
        .map_err(|e| Refusal::Malformed(format!("{path}: {e}")))?;
    Ok(json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

/// An IntOrString: its JSON form is the number or the string, by its type.
pub fn int_or_string(v: IntOrString, path: &str) -> Result<Value> {
    let IntOrString {
        r#type,
        int_val,
        str_val,
    } = v;
    match r#type.unwrap_or(0) {
        0 if str_val.is_zero() => Ok(json!(int_val.unwrap_or(0))),
        1 if int_val.is_zero() => Ok(json!(str_val.unwrap_or_default())),
        _ => Err(Refusal::Malformed(format!(
            "{path}: not a valid IntOrString (type {type:?}, intVal {int_val:?}, strVal {str_val:?})",
            r#type = r#type,
        ))),
    }
}

pub fn quantity(q: Quantity, _path: &str) -> Result<Value> {
    Ok(quantity_value(q))
}

/// A Quantity's JSON form: its string.
fn quantity_value(q: Quantity) -> Value {
    let Quantity { string } = q;
    json!(string.unwrap_or_default())
}

/// A `map<string, Quantity>` (resource lists), with `omitempty`.
pub fn quantities(o: &mut Obj, key: &str, map: BTreeMap<String, Quantity>) {
    if map.is_empty() {
        return;
    }
    let m: Map<String, Value> = map
        .into_iter()
        .map(|(k, q)| (k, quantity_value(q)))
        .collect();
    o.put(key, Value::Object(m));
}

/// A `map<string, bytes>`: base64 strings in JSON, with `omitempty`.
pub fn bytes_map(o: &mut Obj, key: &str, map: BTreeMap<String, Vec<u8>>) {
    if map.is_empty() {
        return;
    }
    let m: Map<String, Value> = map
        .into_iter()
        .map(|(k, b)| {
            let v = json!(base64::engine::general_purpose::STANDARD.encode(b));
            (k, v)
        })
        .collect();
    o.put(key, Value::Object(m));
}

pub fn label_selector(s: LabelSelector, path: &str) -> Result<Value> {
    let LabelSelector {
        match_labels,
        match_expressions,
    } = s;
    let mut o = Obj::new();
    o.str_map("matchLabels", match_labels);
    o.list(path, "matchExpressions", match_expressions, |r, _| {
        let LabelSelectorRequirement {
            key,
            operator,
            values,
        } = r;
        let mut o = Obj::new();
        o.str_always("key", key);
        o.str_always("operator", operator);
        o.strs("values", values);
        Ok(o.done())
    })?;
    Ok(o.done())
}
