//! The two timelines of the controller loop (see [`crate::model::clock`]): objects carry
//! wall-clock timestamps, the pure controllers decide in simulated time. These helpers map
//! the timestamps of an object between the two, field by field.

use serde_json::Value;

use crate::model::clock::format_time;

/// The fields holding the timestamps the controllers read or write (conditions, container
/// states, pod and job times) and `creationTimestamp`, which they sort and fall back on.
const TIME_FIELDS: [&str; 9] = [
    "lastTransitionTime",
    "lastUpdateTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "startTime",
    "startedAt",
    "finishedAt",
    "completionTime",
    "creationTimestamp",
];

/// Maps every timestamp under a time field in `value` (at any depth) through `f`, written
/// back as Kubernetes writes `Time` fields (whole seconds). Other values are left alone.
pub fn map_times(value: &mut Value, f: &dyn Fn(jiff::Timestamp) -> jiff::Timestamp) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if TIME_FIELDS.contains(&key.as_str())
                    && let Some(ts) = field.as_str().and_then(|s| s.parse().ok())
                {
                    *field = Value::String(format_time(f(ts)));
                } else if field.is_object() || field.is_array() {
                    map_times(field, f);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                map_times(item, f);
            }
        }
        _ => {}
    }
}

/// The object with its status times and creationTimestamp mapped through `f`; spec and the
/// rest of the metadata are the user's and stay as they are.
pub fn map_object_times(obj: &mut Value, f: &dyn Fn(jiff::Timestamp) -> jiff::Timestamp) {
    if let Some(status) = obj.get_mut("status") {
        map_times(status, f);
    }
    if let Some(created) = obj.pointer_mut("/metadata/creationTimestamp")
        && let Some(ts) = created.as_str().and_then(|s| s.parse().ok())
    {
        *created = Value::String(format_time(f(ts)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_at_any_depth_are_mapped_and_nothing_else() {
        let mut status = json!({
            "startTime": "2026-11-30T08:00:00Z",
            "conditions": [{"type": "Ready", "lastTransitionTime": "2026-11-30T08:00:10Z", "message": "2026-11-30T08:00:10Z"}],
            "containerStatuses": [{"state": {"running": {"startedAt": "2026-11-30T08:00:01Z"}},
                                   "lastState": {"terminated": {"startedAt": "x", "finishedAt": "2026-11-30T08:00:02Z"}}}],
        });
        let shift =
            |ts: jiff::Timestamp| ts.checked_add(jiff::SignedDuration::from_secs(60)).unwrap();
        map_times(&mut status, &shift);
        assert_eq!(status["startTime"], "2026-11-30T08:01:00Z");
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2026-11-30T08:01:10Z"
        );
        assert_eq!(status["conditions"][0]["message"], "2026-11-30T08:00:10Z");
        let c = &status["containerStatuses"][0];
        assert_eq!(c["state"]["running"]["startedAt"], "2026-11-30T08:01:01Z");
        assert_eq!(c["lastState"]["terminated"]["startedAt"], "x");
        assert_eq!(
            c["lastState"]["terminated"]["finishedAt"],
            "2026-11-30T08:01:02Z"
        );
    }

    #[test]
    fn an_object_maps_its_status_and_creation_time_only() {
        let mut obj = json!({
            "metadata": {"creationTimestamp": "2026-11-30T08:00:00Z", "annotations": {"startTime": "2026-11-30T08:00:00Z"}},
            "spec": {"startTime": "2026-11-30T08:00:00Z"},
            "status": {"startTime": "2026-11-30T08:00:00Z"},
        });
        let shift =
            |ts: jiff::Timestamp| ts.checked_add(jiff::SignedDuration::from_secs(1)).unwrap();
        map_object_times(&mut obj, &shift);
        assert_eq!(obj["metadata"]["creationTimestamp"], "2026-11-30T08:00:01Z");
        assert_eq!(obj["status"]["startTime"], "2026-11-30T08:00:01Z");
        assert_eq!(obj["spec"]["startTime"], "2026-11-30T08:00:00Z");
        assert_eq!(
            obj["metadata"]["annotations"]["startTime"],
            "2026-11-30T08:00:00Z"
        );
    }
}
