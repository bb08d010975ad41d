//! What a failure says besides its reason: the recent Warning events of the object, its
//! ReplicaSets and its pod, why each pod is not ready (for a timeout), and the last log lines
//! of the failing containers. Read once, when the wait (or the bake) fails.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::evaluate::Snapshot;
use super::tracked::Tracked;
use crate::cluster::health::{self, str_at};
use crate::cluster::retry::{RetryBudget, with_retry};
use crate::report::Failure;

/// Adds the events, then the logs, that say more about `failures`.
pub(in crate::cluster) async fn explain(
    client: &Client,
    failures: &mut [Failure],
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    log_lines: u32,
    cancel: &CancellationToken,
) {
    add_events(client, failures, tracked, snapshot, cancel).await;
    add_logs(client, failures, tracked, snapshot, log_lines, cancel).await;
}

/// The tracked object a failure is about, with its index.
fn tracked_of<'t, 'a>(tracked: &'t [Tracked<'a>], f: &Failure) -> Option<(usize, &'t Tracked<'a>)> {
    tracked
        .iter()
        .enumerate()
        .find(|(_, t)| t.applied.display == f.object)
}

/// The failures of a wait whose deadline passed: one per object still in progress, saying
/// how it stands and why its pods are not ready, with events and logs.
pub(in crate::cluster) async fn timeout_failures(
    client: &Client,
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    (timeout, log_lines): (Duration, u32),
    watch_error: Option<&str>,
    cancel: &CancellationToken,
) -> Vec<Failure> {
    let mut failures: Vec<Failure> = tracked
        .iter()
        .filter(|t| !t.done)
        .map(|t| Failure {
            object: t.applied.display.clone(),
            pod: None,
            container: None,
            reason: "Timeout".into(),
            message: timeout_message(timeout, &t.last_message, watch_error),
            events: Vec::new(),
            ..Default::default()
        })
        .collect();
    add_events(client, &mut failures, tracked, snapshot, cancel).await;
    // With a watch that lost the cluster, what is known of the pods may be stale and their
    // logs cannot be read: the watch error says it all.
    if watch_error.is_some() {
        return failures;
    }
    for f in failures.iter_mut() {
        let Some((i, t)) = tracked_of(tracked, f) else {
            continue;
        };
        let pods = unready_pods(i, t, snapshot);
        let reasons = unready_reasons(&pods, &f.events);
        if !reasons.is_empty() {
            f.message
                .push_str(&format!("; not ready: {}", reasons.join("; ")));
        }
    }
    add_logs(client, &mut failures, tracked, snapshot, log_lines, cancel).await;
    failures
}

fn timeout_message(timeout: Duration, last: &str, watch_error: Option<&str>) -> String {
    let mut text = format!(
        "not ready after {}",
        crate::util::duration::format_duration(timeout)
    );
    if !last.is_empty() {
        text.push_str(": ");
        text.push_str(last);
    }
    if let Some(e) = watch_error {
        text.push_str(&format!(" (last watch error: {e})"));
    }
    text
}

/// How many Warning events a failure carries (the newest).
const EVENTS_PER_FAILURE: usize = 8;

/// An object that events can be about, as an event's `involvedObject` names it. The uid
/// tells a Deployment `web` from the Service `web` beside it and from an earlier,
/// deleted `web` (empty: not known, matched by kind, namespace and name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvolvedRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl InvolvedRef {
    fn of(kind: &str, namespace: &str, object: &Value) -> Option<InvolvedRef> {
        Some(InvolvedRef {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: str_at(object, &["metadata", "name"])?.to_string(),
            uid: str_at(object, &["metadata", "uid"])
                .unwrap_or_default()
                .to_string(),
        })
    }
}

/// What a failure's events are about: the object itself, the ReplicaSets it owns and the
/// failing pod, nothing else.
fn involved_refs(i: usize, t: &Tracked<'_>, f: &Failure, snapshot: &Snapshot) -> Vec<InvolvedRef> {
    let a = t.applied;
    let ns = a.namespace.clone().unwrap_or_default();
    let uid = snapshot
        .object(i, t)
        .and_then(|c| str_at(&c, &["metadata", "uid"]).map(str::to_string))
        .unwrap_or_default();
    let mut refs = vec![InvolvedRef {
        kind: a.resource.kind.clone(),
        namespace: ns.clone(),
        name: a.name.clone(),
        uid: uid.clone(),
    }];
    refs.extend(
        snapshot
            .owned_replica_sets(&ns, &uid)
            .filter_map(|r| InvolvedRef::of("ReplicaSet", &ns, r)),
    );
    if let Some(pod) = &f.pod {
        let known = snapshot
            .pod(&ns, pod)
            .and_then(|p| InvolvedRef::of("Pod", &ns, p));
        refs.push(known.unwrap_or_else(|| InvolvedRef {
            kind: "Pod".into(),
            namespace: ns.clone(),
            name: pod.clone(),
            uid: String::new(),
        }));
    }
    refs
}

/// Adds the recent Warning events of each failed object, its ReplicaSets and its pod.
async fn add_events(
    client: &Client,
    failures: &mut [Failure],
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    cancel: &CancellationToken,
) {
    let budget = RetryBudget {
        max_attempts: Some(2),
        attempt_timeout: Duration::from_secs(3),
        ..RetryBudget::until(Instant::now() + Duration::from_secs(5))
    };
    for f in failures.iter_mut() {
        let Some((i, t)) = tracked_of(tracked, f) else {
            continue;
        };
        let refs = involved_refs(i, t, f, snapshot);
        let mut values: Vec<Value> = Vec::new();
        for r in &refs {
            let api: Api<k8s_openapi::api::core::v1::Event> =
                Api::namespaced(client.clone(), &r.namespace);
            // The server narrows by kind and name; uid and namespace are checked below.
            let params = ListParams::default().fields(&format!(
                "involvedObject.kind={},involvedObject.name={}",
                r.kind, r.name
            ));
            if let Ok(list) = with_retry("list events", &budget, cancel, || api.list(&params)).await
            {
                values.extend(
                    list.items
                        .iter()
                        .filter_map(|e| serde_json::to_value(e).ok()),
                );
            }
        }
        f.events = warning_events(&values, &refs, EVENTS_PER_FAILURE);
    }
}

/// The pods of `t`'s new revision (index `i`) that are not Ready (none when `t` has no pods).
fn unready_pods<'s>(i: usize, t: &Tracked<'_>, snapshot: &'s Snapshot) -> Vec<&'s Value> {
    let a = t.applied;
    let ns = a.namespace.as_deref().unwrap_or_default();
    let Some(current) = snapshot.objects.get(&i) else {
        return Vec::new();
    };
    snapshot
        .new_revision_pods(&a.resource.kind, ns, current)
        .into_iter()
        .filter(|p| !health::condition_is(p, "Ready", "True"))
        .collect()
}

/// Pods named in a timeout's message, at most.
const UNREADY_PODS_NAMED: usize = 3;

/// Why each pod is not ready, for a timeout: "pod web-1: container web: Readiness probe
/// failed: HTTP probe failed with statuscode: 503", "pod web-2: Unschedulable: 0/3 nodes are
/// available: ...". The readiness probe's message comes from the pod's Unhealthy events.
pub fn unready_reasons(pods: &[&Value], events: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for pod in pods.iter().take(UNREADY_PODS_NAMED) {
        let name = str_at(pod, &["metadata", "name"]).unwrap_or_default();
        out.push(format!("pod {name}: {}", why_not_ready(pod, name, events)));
    }
    if pods.len() > UNREADY_PODS_NAMED {
        out.push(format!("{} more pods", pods.len() - UNREADY_PODS_NAMED));
    }
    out
}

fn why_not_ready(pod: &Value, name: &str, events: &[String]) -> String {
    if let Some(c) = health::condition(pod, "PodScheduled")
        && str_at(c, &["status"]) == Some("False")
    {
        let reason = str_at(c, &["reason"]).unwrap_or("not scheduled");
        return match str_at(c, &["message"]) {
            Some(m) => format!("{reason}: {m}"),
            None => reason.to_string(),
        };
    }
    let probe = format!("pod {name}: Unhealthy: ");
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // The first container that is not ready says why.
    if let Some(cs) = statuses
        .iter()
        .find(|cs| cs["ready"].as_bool() != Some(true))
    {
        let container = str_at(cs, &["name"]).unwrap_or_default();
        if let Some(reason) = str_at(cs, &["state", "waiting", "reason"]) {
            return format!("container {container} waiting: {reason}");
        }
        if let Some(message) = events.iter().rev().find_map(|e| e.strip_prefix(&probe)) {
            return format!("container {container}: {message}");
        }
        return format!("container {container} is running but not ready");
    }
    match health::condition(pod, "Ready") {
        Some(c) => {
            let reason = str_at(c, &["reason"]).unwrap_or("not Ready");
            match str_at(c, &["message"]) {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_string(),
            }
        }
        None => str_at(pod, &["status", "phase"])
            .unwrap_or("no status yet")
            .to_string(),
    }
}

/// Adds the last log lines of the containers the failures are about (see `cluster::logs`):
/// the pod a failure names, or for a failure of the whole object (a timeout) its new
/// revision's pods that are not ready.
async fn add_logs(
    client: &Client,
    failures: &mut [Failure],
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    lines: u32,
    cancel: &CancellationToken,
) {
    if lines == 0 {
        return;
    }
    let mut candidates: Vec<(usize, String, Value)> = Vec::new();
    for (index, f) in failures.iter().enumerate() {
        if !crate::cluster::logs::wants_logs(&f.reason) {
            continue;
        }
        let Some((i, t)) = tracked_of(tracked, f) else {
            continue;
        };
        let ns = t.applied.namespace.clone().unwrap_or_default();
        let pods: Vec<&Value> = match &f.pod {
            Some(pod) => snapshot.pod(&ns, pod).into_iter().collect(),
            None => unready_pods(i, t, snapshot),
        };
        candidates.extend(pods.into_iter().map(|p| (index, ns.clone(), p.clone())));
    }
    crate::cluster::logs::read_logs(client, failures, &candidates, lines, cancel).await;
}

/// True when `event` is about `r`: same kind, namespace and name, and the same uid when
/// both sides know it.
pub fn event_is_about(event: &Value, r: &InvolvedRef) -> bool {
    let involved = |field: &str| str_at(event, &["involvedObject", field]);
    let namespace = involved("namespace")
        .or_else(|| str_at(event, &["metadata", "namespace"]))
        .unwrap_or_default();
    let uid = involved("uid").unwrap_or_default();
    involved("kind") == Some(r.kind.as_str())
        && involved("name") == Some(r.name.as_str())
        && namespace == r.namespace
        && (uid.is_empty() || r.uid.is_empty() || uid == r.uid)
}

/// The newest `limit` Warning events about any of `refs`, oldest first, each once, as
/// "kind name: Reason: message (xN)".
pub fn warning_events(events: &[Value], refs: &[InvolvedRef], limit: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut warnings: Vec<(&str, String)> = events
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("Warning"))
        .filter(|e| refs.iter().any(|r| event_is_about(e, r)))
        .filter(|e| {
            let id = (
                str_at(e, &["metadata", "namespace"]).unwrap_or_default(),
                str_at(e, &["metadata", "name"]).unwrap_or_default(),
            );
            id.1.is_empty() || seen.insert(id)
        })
        .map(|e| {
            let when = str_at(e, &["lastTimestamp"])
                .or_else(|| str_at(e, &["eventTime"]))
                .or_else(|| str_at(e, &["metadata", "creationTimestamp"]))
                .unwrap_or("");
            let text = health::warning_event_line(e).unwrap_or_default();
            (when, text)
        })
        .collect();
    warnings.sort_by(|a, b| a.0.cmp(b.0));
    let skip = warnings.len().saturating_sub(limit);
    warnings.into_iter().skip(skip).map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_timeout_says_why_each_pod_is_not_ready() {
        let pod = |name: &str, status: Value| json!({"metadata": {"name": name}, "status": status});
        let unschedulable = pod(
            "web-1",
            json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
        );
        let probing = pod(
            "web-2",
            json!({"phase": "Running", "containerStatuses": [
            {"name": "web", "ready": false, "state": {"running": {}}}]}),
        );
        let waiting = pod(
            "web-3",
            json!({"containerStatuses": [
            {"name": "web", "ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        let quiet = pod(
            "web-4",
            json!({"phase": "Running", "containerStatuses": [
            {"name": "web", "ready": false, "state": {"running": {}}}]}),
        );
        let events = vec![
            "pod web-2: Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 503 (x4)".to_string(),
        ];
        assert_eq!(
            unready_reasons(&[&unschedulable, &probing, &waiting, &quiet], &events),
            vec![
                "pod web-1: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
                "pod web-2: container web: Readiness probe failed: HTTP probe failed with statuscode: 503 (x4)",
                "pod web-3: container web waiting: ContainerCreating",
                "1 more pods",
            ]
        );
        assert_eq!(
            unready_reasons(&[&quiet], &[]),
            vec!["pod web-4: container web is running but not ready"]
        );
        let odd = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
            "reason": "ContainersNotReady", "message": "containers with unready status: [web]"}]}});
        assert_eq!(
            unready_reasons(&[&odd], &[]),
            vec!["pod : ContainersNotReady: containers with unready status: [web]"]
        );
    }

    #[test]
    fn warning_events_newest_last_and_limited() {
        let pod = |name: &str, uid: &str| InvolvedRef {
            kind: "Pod".into(),
            namespace: "shop".into(),
            name: name.into(),
            uid: uid.into(),
        };
        let ev = |kind: &str, name: &str, ns: &str, uid: &str, reason: &str, at: u32| {
            json!({"type": "Warning", "reason": reason, "message": "m",
                "metadata": {"name": format!("{name}.{reason}"), "namespace": ns},
                "involvedObject": {"kind": kind, "name": name, "namespace": ns, "uid": uid},
                "lastTimestamp": format!("2026-01-01T00:00:0{at}Z")})
        };
        let events = vec![
            ev("Pod", "p", "shop", "u1", "Failed", 2),
            json!({"type": "Normal", "reason": "Pulling", "message": "x", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "shop"}, "lastTimestamp": "2026-01-01T00:00:03Z"}),
            ev("Pod", "p", "shop", "u1", "BackOff", 4),
            ev("Pod", "q", "shop", "u9", "Other", 5),
            ev("Pod", "p", "shop", "u1", "Old", 1),
            // Same name, another kind, namespace or uid (a deleted, earlier pod): not ours.
            ev(
                "Service",
                "p",
                "shop",
                "s1",
                "FailedToUpdateEndpointSlices",
                6,
            ),
            ev("Pod", "p", "other", "u1", "Elsewhere", 7),
            ev("Pod", "p", "shop", "u0", "Stale", 8),
            // The same event listed twice (it matched two refs) counts once.
            ev("Pod", "p", "shop", "u1", "BackOff", 4),
        ];
        let p = |limit| warning_events(&events, &[pod("p", "u1")], limit);
        assert_eq!(p(2), vec!["pod p: Failed: m", "pod p: BackOff: m"]);
        assert_eq!(p(10).len(), 3, "{:?}", p(10));
        // A uid not known yet matches by kind, namespace and name.
        let unknown = warning_events(&events, &[pod("p", "")], 10);
        assert!(unknown.iter().any(|e| e.contains("Stale")), "{unknown:?}");
        assert!(
            !unknown
                .iter()
                .any(|e| e.contains("Endpoint") || e.contains("Elsewhere"))
        );
    }
}
