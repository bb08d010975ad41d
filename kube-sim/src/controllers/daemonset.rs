//! The DaemonSet controller as a pure function: one pod per (matching) simulated node,
//! rolling update limited by maxUnavailable.

use serde_json::{Map, Value, json};
use std::borrow::Borrow;

use super::deployment::Note;
use super::meta;
use super::pods;

pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// Tolerations the DaemonSet controller adds to its pods.
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// A simulated node as the controllers see it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub labels: Value,
}

#[derive(Debug, Default)]
pub struct DaemonSetSync {
    pub create: Vec<Value>,
    pub delete: Vec<String>,
    pub create_revision: Option<Value>,
    pub status: Value,
    pub events: Vec<Note>,
}

fn node_selected(ds: &Value, node: &NodeInfo) -> bool {
    ds["spec"]["template"]["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| node.labels[k] == *v)
}

/// What one sync reads from the DaemonSet, its pods and the nodes before it changes anything.
struct SyncPlan<'a> {
    ds: &'a Value,
    name: &'a str,
    owned_pods: Vec<&'a Value>,
    /// The nodes the DaemonSet's nodeSelector picks.
    wanted: Vec<&'a NodeInfo>,
    hash: String,
    min_ready: i64,
    now: jiff::Timestamp,
}

impl<'a> SyncPlan<'a> {
    /// Active pods bound to `node`.
    fn on_node(&self, node: &str) -> Vec<&'a Value> {
        self.owned_pods
            .iter()
            .copied()
            .filter(|p| pods::is_active(p) && p["spec"]["nodeName"].as_str() == Some(node))
            .collect()
    }

    /// Whether the pod runs the current template.
    fn is_updated(&self, p: &Value) -> bool {
        meta::label(p, REVISION_LABEL) == Some(self.hash.as_str())
    }

    /// Whether the pod has been Ready for minReadySeconds.
    fn is_available(&self, p: &Value) -> bool {
        pods::availability(p, self.min_ready, self.now).is_ok()
    }

    /// The daemon pod for `node`, built from the template.
    fn new_pod(&self, node: &NodeInfo) -> Value {
        let ds = self.ds;
        let mut pod = pods::pod_from_template(
            ds,
            "apps/v1",
            "DaemonSet",
            &ds["spec"]["template"],
            pods::PodName::Generated(format!("{}-", self.name)),
            &[
                (REVISION_LABEL, self.hash.clone()),
                (TEMPLATE_GENERATION_LABEL, meta::generation(ds).to_string()),
            ],
        );
        // As the real controller: pinned to its node by affinity, tolerating the node
        // conditions a daemon must survive; the node is bound right away.
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}]}}});
        let mut tolerations = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (key, effect) in DAEMON_TOLERATIONS {
            if !tolerations.iter().any(|t| t["key"] == key) {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
            }
        }
        pod["spec"]["tolerations"] = Value::Array(tolerations);
        pod["spec"]["nodeName"] = json!(node.name);
        pod
    }

    /// Rolling update: deletes old pods, keeping at most maxUnavailable nodes unavailable.
    fn roll(&self, out: &mut DaemonSetSync) {
        let ds = self.ds;
        let max_unavailable = meta::int_or_percent(
            &ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
            self.wanted.len() as i64,
            true,
            "1",
        )
        .max(1);
        let mut unavailable = self
            .wanted
            .iter()
            .filter(|n| {
                !self
                    .on_node(&n.name)
                    .into_iter()
                    .any(|p| self.is_available(p))
            })
            .count() as i64;
        // Unavailable old pods go first, then available ones within the budget.
        let mut old: Vec<&Value> = self
            .owned_pods
            .iter()
            .copied()
            .filter(|p| {
                pods::is_active(p)
                    && !self.is_updated(p)
                    && !out.delete.iter().any(|d| d == meta::name(p))
            })
            .collect();
        old.sort_by_key(|p| self.is_available(p));
        for pod in old {
            if !self.is_available(pod) {
                out.delete.push(meta::name(pod).to_string());
            } else if unavailable < max_unavailable {
                out.delete.push(meta::name(pod).to_string());
                unavailable += 1;
            }
        }
    }

    /// The status, counting the active pods this sync does not delete.
    fn status(&self, delete: &[String]) -> Value {
        let live: Vec<&Value> = self
            .owned_pods
            .iter()
            .copied()
            .filter(|p| pods::is_active(p) && !delete.iter().any(|d| d == meta::name(p)))
            .collect();
        let scheduled = self
            .wanted
            .iter()
            .filter(|n| {
                live.iter()
                    .any(|p| p["spec"]["nodeName"].as_str() == Some(n.name.as_str()))
            })
            .count() as i64;
        let ready = live
            .iter()
            .filter(|p| pods::ready_since(p).is_some())
            .count() as i64;
        let available = live.iter().filter(|p| self.is_available(p)).count() as i64;
        let updated = live.iter().filter(|p| self.is_updated(p)).count() as i64;
        let desired = self.wanted.len() as i64;
        let mut status = Map::new();
        status.insert("currentNumberScheduled".into(), json!(scheduled));
        status.insert("numberMisscheduled".into(), json!(0));
        status.insert("desiredNumberScheduled".into(), json!(desired));
        status.insert("numberReady".into(), json!(ready));
        meta::put_nonzero(&mut status, "observedGeneration", meta::generation(self.ds));
        meta::put_nonzero(&mut status, "updatedNumberScheduled", updated);
        meta::put_nonzero(&mut status, "numberAvailable", available);
        meta::put_nonzero(
            &mut status,
            "numberUnavailable",
            (desired - available).max(0),
        );
        Value::Object(status)
    }
}

/// One sync of a DaemonSet against its pods and the nodes.
pub fn reconcile<P: Borrow<Value>, R: Borrow<Value>>(
    ds: &Value,
    owned_pods: &[P],
    revisions: &[R],
    nodes: &[NodeInfo],
    now: jiff::Timestamp,
) -> DaemonSetSync {
    let owned_pods: Vec<&Value> = owned_pods.iter().map(Borrow::borrow).collect();
    let revisions: Vec<&Value> = revisions.iter().map(Borrow::borrow).collect();
    let mut out = DaemonSetSync::default();
    if !meta::well_formed(ds) {
        return out;
    }
    let name = meta::name(ds);
    let hash = meta::pod_template_hash(
        &ds["spec"]["template"],
        ds["status"]["collisionCount"].as_i64(),
    );
    let revision_name = format!("{name}-{hash}");
    let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    if let Some(revision) = meta::new_controller_revision(
        ds,
        "DaemonSet",
        &revision_name,
        REVISION_LABEL,
        &hash,
        &revisions,
    ) {
        out.create_revision = Some(revision);
    }

    let wanted: Vec<&NodeInfo> = nodes.iter().filter(|n| node_selected(ds, n)).collect();
    let plan = SyncPlan {
        ds,
        name,
        owned_pods,
        wanted,
        hash,
        min_ready,
        now,
    };

    for node in &plan.wanted {
        if plan.on_node(&node.name).is_empty() {
            out.create.push(plan.new_pod(node));
        }
    }
    // Pods on nodes that no longer match.
    for pod in plan.owned_pods.iter().filter(|p| pods::is_active(p)) {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        if !plan.wanted.iter().any(|n| n.name == node) {
            out.delete.push(meta::name(pod).to_string());
        }
    }
    // Rolling update: replace old pods while at most maxUnavailable are unavailable.
    let rolling = ds["spec"]["updateStrategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling {
        plan.roll(&mut out);
    }
    for pod_name in &out.delete {
        out.events.push(Note {
            kind: "Normal",
            reason: "SuccessfulDelete",
            message: format!("Deleted pod: {pod_name}"),
        });
    }

    out.status = plan.status(&out.delete);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No owned objects.
    const NONE: &[Value] = &[];

    fn nodes() -> Vec<NodeInfo> {
        (1..=3)
            .map(|i| NodeInfo {
                name: format!("n{i}"),
                labels: json!({"kubernetes.io/hostname": format!("n{i}")}),
            })
            .collect()
    }

    fn ds(image: &str) -> Value {
        json!({"metadata": {"name": "agent", "namespace": "ns", "uid": "d1", "generation": 1},
               "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": image}]}}},
               "status": {}})
    }

    fn now() -> jiff::Timestamp {
        "2026-11-30T08:05:00Z".parse().unwrap()
    }

    fn ready(mut pod: Value, i: usize) -> Value {
        pod["metadata"]["name"] = json!(format!("agent-{i}"));
        pod["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T08:00:00Z"}]});
        pod
    }

    #[test]
    fn one_pod_per_node_and_counts() {
        let set = ds("agent:1");
        let out = reconcile(&set, NONE, NONE, &nodes(), now());
        assert_eq!(out.create.len(), 3);
        let placed: Vec<&str> = out
            .create
            .iter()
            .map(|p| p["spec"]["nodeName"].as_str().unwrap())
            .collect();
        assert_eq!(placed, ["n1", "n2", "n3"]);
        assert!(meta::label(&out.create[0], REVISION_LABEL).is_some());
        assert_eq!(out.status["desiredNumberScheduled"], 3);
        assert_eq!(out.status["currentNumberScheduled"], 0);
        assert_eq!(out.status["numberUnavailable"], 3);
        let pods: Vec<Value> = out
            .create
            .into_iter()
            .enumerate()
            .map(|(i, p)| ready(p, i))
            .collect();
        let revisions = vec![out.create_revision.unwrap()];
        let out = reconcile(&set, &pods, &revisions, &nodes(), now());
        assert!(out.create.is_empty() && out.delete.is_empty());
        assert_eq!(
            out.status,
            json!({"currentNumberScheduled": 3, "numberMisscheduled": 0, "desiredNumberScheduled": 3,
            "numberReady": 3, "observedGeneration": 1, "updatedNumberScheduled": 3, "numberAvailable": 3})
        );
    }

    #[test]
    fn rolling_update_replaces_one_node_at_a_time() {
        let set = ds("agent:1");
        let out = reconcile(&set, NONE, NONE, &nodes(), now());
        let pods: Vec<Value> = out
            .create
            .into_iter()
            .enumerate()
            .map(|(i, p)| ready(p, i))
            .collect();
        let updated = ds("agent:2");
        let out = reconcile(&updated, &pods, NONE, &nodes(), now());
        assert_eq!(out.delete.len(), 1, "maxUnavailable 1");
        assert_eq!(out.status["updatedNumberScheduled"], Value::Null);
    }
}
