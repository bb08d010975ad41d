//! The ReplicaSet controller as a pure function: a ReplicaSet + its pods -> pods to create or
//! delete and the ReplicaSet's status.

use std::borrow::Borrow;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::deployment::Note;
use super::meta::{self, put_nonzero};
use super::pods;

/// Most pods created or deleted in one sync (Kubernetes' `burstReplicas`).
pub const BURST_REPLICAS: i64 = 500;

#[derive(Debug, Default)]
pub struct ReplicaSetSync {
    /// Pods to create (generateName `<rs>-`, no nodeName yet).
    pub create: Vec<Value>,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    pub status: Value,
    pub events: Vec<Note>,
    /// Sync again after this long (a pod becomes available after minReadySeconds).
    pub requeue_after: Option<Duration>,
}

/// One sync of a ReplicaSet against the pods it controls.
pub fn reconcile<P: Borrow<Value>>(
    rs: &Value,
    owned: &[P],
    now: jiff::Timestamp,
) -> ReplicaSetSync {
    let owned: Vec<&Value> = owned.iter().map(Borrow::borrow).collect();
    let mut out = ReplicaSetSync::default();
    if !meta::well_formed(rs) {
        return out;
    }
    let want = meta::spec_replicas(rs);
    let min_ready = rs["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let mut active: Vec<&Value> = owned
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let terminating = owned.iter().filter(|p| meta::is_deleting(p)).count() as i64;
    let have = active.len() as i64;

    if have < want && !meta::is_deleting(rs) {
        // At most BURST_REPLICAS per sync, as the real controller; the pods' events bring
        // the next sync.
        for _ in have..want.min(have + BURST_REPLICAS) {
            out.create.push(pods::pod_from_template(
                rs,
                "apps/v1",
                "ReplicaSet",
                &rs["spec"]["template"],
                pods::PodName::Generated(format!("{}-", meta::name(rs))),
                &[],
            ));
        }
    } else if have > want {
        // Delete the least useful pods first: not ready before ready, then newest first.
        active.sort_by(|a, b| {
            let ready_a = pods::ready_since(a).is_some();
            let ready_b = pods::ready_since(b).is_some();
            ready_a
                .cmp(&ready_b)
                .then_with(|| meta::creation_time(b).cmp(&meta::creation_time(a)))
                .then_with(|| meta::name(b).cmp(meta::name(a)))
        });
        for pod in active
            .iter()
            .take((have - want).min(BURST_REPLICAS) as usize)
        {
            out.delete.push(meta::name(pod).to_string());
            out.events.push(Note {
                kind: "Normal",
                reason: "SuccessfulDelete",
                message: format!("Deleted pod: {}", meta::name(pod)),
            });
        }
        let deleted = &out.delete;
        active.retain(|p| !deleted.iter().any(|d| d == meta::name(p)));
    }

    let template_labels = &rs["spec"]["template"]["metadata"]["labels"];
    let fully_labeled = active
        .iter()
        .filter(|p| {
            template_labels
                .as_object()
                .into_iter()
                .flatten()
                .all(|(k, v)| p["metadata"]["labels"][k] == *v)
        })
        .count() as i64;
    let mut ready = 0;
    let mut available = 0;
    for pod in &active {
        match pods::availability(pod, min_ready, now) {
            Ok(()) => {
                ready += 1;
                available += 1;
            }
            Err(Some(wait)) => {
                ready += 1;
                out.requeue_after = Some(out.requeue_after.map_or(wait, |w| w.min(wait)));
            }
            Err(None) => {}
        }
    }
    // Status as the real controller writes it (counts from before this sync's writes, as
    // the informer cache it reads has not seen them yet).
    let mut status = Map::new();
    let counted = active.len() as i64;
    status.insert("replicas".into(), json!(counted));
    put_nonzero(&mut status, "fullyLabeledReplicas", fully_labeled);
    put_nonzero(&mut status, "readyReplicas", ready);
    put_nonzero(&mut status, "availableReplicas", available);
    status.insert("terminatingReplicas".into(), json!(terminating));
    put_nonzero(&mut status, "observedGeneration", meta::generation(rs));
    out.status = Value::Object(status);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No owned objects.
    const NONE: &[Value] = &[];

    fn rs(replicas: i64) -> Value {
        json!({
            "metadata": {"name": "web-abc", "namespace": "ns", "uid": "rs1", "generation": 2},
            "spec": {"replicas": replicas, "minReadySeconds": 0,
                     "selector": {"matchLabels": {"app": "web", "pod-template-hash": "abc"}},
                     "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                                  "spec": {"containers": [{"name": "web", "image": "x"}]}}}
        })
    }

    fn pod(name: &str, created: &str, ready: Option<&str>) -> Value {
        let mut conditions = vec![];
        if let Some(at) = ready {
            conditions.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": at}));
        }
        json!({"metadata": {"name": name, "creationTimestamp": created, "labels": {"app": "web", "pod-template-hash": "abc"}},
               "status": {"phase": "Running", "conditions": conditions}})
    }

    fn now() -> jiff::Timestamp {
        "2026-11-30T08:01:00Z".parse().unwrap()
    }

    #[test]
    fn creates_missing_pods_from_the_template() {
        let out = reconcile(&rs(3), &[pod("a", "2026-11-30T08:00:00Z", None)], now());
        assert_eq!(out.create.len(), 2);
        let created = &out.create[0];
        assert_eq!(created["metadata"]["generateName"], "web-abc-");
        assert_eq!(created["metadata"]["labels"]["pod-template-hash"], "abc");
        assert_eq!(
            created["metadata"]["ownerReferences"][0]["kind"],
            "ReplicaSet"
        );
        assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "rs1");
        assert_eq!(created["spec"]["containers"][0]["image"], "x");
        assert_eq!(
            out.status,
            json!({"replicas": 1, "fullyLabeledReplicas": 1, "terminatingReplicas": 0, "observedGeneration": 2})
        );
    }

    #[test]
    fn creates_at_most_a_burst_per_sync() {
        let out = reconcile(&rs(100_000), NONE, now());
        assert_eq!(out.create.len() as i64, BURST_REPLICAS);
    }

    #[test]
    fn scales_down_unready_then_newest() {
        let pods = [
            pod(
                "old-ready",
                "2026-11-30T08:00:00Z",
                Some("2026-11-30T08:00:01Z"),
            ),
            pod(
                "new-ready",
                "2026-11-30T08:00:30Z",
                Some("2026-11-30T08:00:31Z"),
            ),
            pod("unready", "2026-11-30T08:00:10Z", None),
        ];
        let out = reconcile(&rs(1), &pods, now());
        assert_eq!(out.delete, ["unready", "new-ready"]);
        assert_eq!(out.events[0].message, "Deleted pod: unready");
        assert_eq!(out.status["replicas"], 1);
        assert_eq!(out.status["availableReplicas"], 1);
    }

    #[test]
    fn min_ready_seconds_delays_availability() {
        let mut set = rs(1);
        set["spec"]["minReadySeconds"] = json!(30);
        let pods = [pod(
            "p",
            "2026-11-30T08:00:00Z",
            Some("2026-11-30T08:00:50Z"),
        )];
        let out = reconcile(&set, &pods, now());
        assert_eq!(out.status["readyReplicas"], 1);
        assert!(out.status.get("availableReplicas").is_none());
        assert_eq!(out.requeue_after, Some(Duration::from_secs(20)));
        let later: jiff::Timestamp = "2026-11-30T08:01:30Z".parse().unwrap();
        assert_eq!(reconcile(&set, &pods, later).status["availableReplicas"], 1);
    }
}
