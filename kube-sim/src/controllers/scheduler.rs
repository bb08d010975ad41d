//! The scheduler's part: which simulated nodes a pod may run on (nodeSelector and required
//! node affinity), and the status of a pod that fits none.

use serde_json::{Value, json};

use super::daemonset::NodeInfo;
use super::meta;

/// Does one node selector term (`matchExpressions` on labels, `matchFields` on the name)
/// select the node? An empty term selects nothing, as in Kubernetes.
fn term_matches(term: &Value, node: &NodeInfo) -> bool {
    let expressions = term["matchExpressions"].as_array();
    let fields = term["matchFields"].as_array();
    if expressions.is_none_or(Vec::is_empty) && fields.is_none_or(Vec::is_empty) {
        return false;
    }
    let labels_ok = expressions.is_none_or(|e| {
        e.is_empty()
            || crate::semantics::selectors::selector_matches(
                &json!({"matchExpressions": e}),
                &node.labels,
            )
    });
    let fields_ok = fields.into_iter().flatten().all(|f| {
        let values: Vec<&str> = f["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let name_in = values.contains(&node.name.as_str());
        match (f["key"].as_str(), f["operator"].as_str()) {
            (Some("metadata.name"), Some("In")) => name_in,
            (Some("metadata.name"), Some("NotIn")) => !name_in,
            _ => false,
        }
    });
    labels_ok && fields_ok
}

/// May the pod run on this node?
pub fn fits(pod: &Value, node: &NodeInfo) -> bool {
    let spec = &pod["spec"];
    let selector_ok = spec["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| node.labels[k] == *v);
    let required = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let affinity_ok = match required.as_array() {
        Some(terms) if !terms.is_empty() => terms.iter().any(|t| term_matches(t, node)),
        _ => true,
    };
    selector_ok && affinity_ok
}

/// The scheduler's message when no node fits (all nodes fail on the selector/affinity).
pub fn unschedulable_message(nodes: usize) -> String {
    format!(
        "0/{nodes} nodes are available: {nodes} node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
}

/// The status the scheduler writes for a pod no node fits.
pub fn unschedulable_status(pod: &Value, nodes: usize, now: jiff::Timestamp) -> Value {
    let mut status = json!({
        "phase": "Pending",
        "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": null,
            "lastTransitionTime": crate::model::clock::format_time(now),
            "reason": "Unschedulable",
            "message": unschedulable_message(nodes),
        }],
    });
    // Keep the transition time once set, so repeated attempts do not rewrite the status.
    if let Some(existing) = pod["status"]["conditions"]
        .as_array()
        .and_then(|c| meta::find_condition(c, "PodScheduled"))
        && existing["reason"] == "Unschedulable"
    {
        status["conditions"][0]["lastTransitionTime"] = existing["lastTransitionTime"].clone();
    }
    status["qosClass"] = json!(super::pods::qos_class(pod));
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            labels: json!({"kubernetes.io/os": "linux", "kubernetes.io/hostname": name, "zone": zone}),
        }
    }

    #[test]
    fn selectors_and_affinity() {
        let a = node("n1", "a");
        let cases = [
            (json!({}), true),
            (json!({"nodeSelector": {"kubernetes.io/os": "linux"}}), true),
            (
                json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
                false,
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}),
                true,
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}}),
                false,
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}),
                true,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(fits(&json!({"spec": spec}), &a), want, "{spec}");
        }
    }

    #[test]
    fn unschedulable_status_keeps_its_transition_time() {
        let now: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let later: jiff::Timestamp = "2026-11-30T08:05:00Z".parse().unwrap();
        let mut pod = json!({"spec": {"containers": []}});
        let first = unschedulable_status(&pod, 3, now);
        assert_eq!(first["conditions"][0]["reason"], "Unschedulable");
        assert!(
            first["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("0/3 nodes are available")
        );
        pod["status"] = first.clone();
        assert_eq!(unschedulable_status(&pod, 3, later), first);
    }
}
