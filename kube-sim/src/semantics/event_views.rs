//! One storage, two views of Events: the server stores core v1 Events (what the controllers
//! and kubelets write) and serves the same objects through `events.k8s.io/v1` in that
//! group's shape, as a real kube-apiserver does (section 15 of the recordings).

use serde_json::{Map, Value, json};

/// Is this the `events.k8s.io` view of the core Events?
pub fn is_events_view(group: &str, resource: &str) -> bool {
    group == "events.k8s.io" && resource == "events"
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_i64() != Some(0),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Bool(_) => true,
    })
}

/// A stored core v1 Event as events.k8s.io/v1 serves it: fields renamed (inserted in the
/// Go type's order, which shows only where JSON object order is kept); empty ones omitted,
/// except `eventTime`, which is always there (null when unset).
pub fn to_events_v1(core: &Value) -> Value {
    let Some(obj) = core.as_object() else {
        return core.clone();
    };
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    if let Some(meta) = obj.get("metadata") {
        out.insert("metadata".into(), meta.clone());
    }
    out.insert(
        "eventTime".into(),
        obj.get("eventTime").cloned().unwrap_or(Value::Null),
    );
    let fields = [
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
        ("involvedObject", "regarding"),
        ("related", "related"),
        ("message", "note"),
        ("type", "type"),
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
    ];
    for (from, to) in fields {
        if let Some(v) = present(obj.get(from)) {
            out.insert(to.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 Event (a create or update through that group) as stored: core v1.
pub fn to_core_v1(view: &Value) -> Value {
    let Some(obj) = view.as_object() else {
        return view.clone();
    };
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!("v1"));
    if let Some(meta) = obj.get("metadata") {
        out.insert("metadata".into(), meta.clone());
    }
    let fields = [
        ("regarding", "involvedObject"),
        ("reason", "reason"),
        ("note", "message"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ];
    for (from, to) in fields {
        if let Some(v) = obj.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core() -> Value {
        json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": "web.18ed17a64aaf5b74", "namespace": "shop"},
            "involvedObject": {"kind": "Deployment", "namespace": "shop", "name": "web", "uid": "u", "apiVersion": "apps/v1", "resourceVersion": "7"},
            "reason": "ScalingReplicaSet",
            "message": "Scaled up replica set web-6478c67864 from 0 to 1",
            "source": {"component": "deployment-controller"},
            "firstTimestamp": "2026-12-01T09:37:09Z", "lastTimestamp": "2026-12-01T09:37:09Z",
            "count": 1, "type": "Normal", "eventTime": null,
            "reportingComponent": "deployment-controller", "reportingInstance": "",
        })
    }

    #[test]
    fn the_view_renames_and_omits_what_is_empty() {
        let view = to_events_v1(&core());
        let mut keys: Vec<&str> = view
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut want = [
            "kind",
            "apiVersion",
            "metadata",
            "eventTime",
            "reportingController",
            "reason",
            "regarding",
            "note",
            "type",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(view["regarding"], core()["involvedObject"]);
        assert_eq!(view["note"], core()["message"]);
        assert!(view["eventTime"].is_null());
    }

    #[test]
    fn a_view_goes_back_to_what_is_stored() {
        let back = to_core_v1(&to_events_v1(&core()));
        for key in [
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "reportingComponent",
        ] {
            assert_eq!(back[key], core()[key], "{key}");
        }
    }
}
