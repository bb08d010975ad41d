//! The bake: after a target's rollout is healthy, its wave's bake runs with the pods of the
//! new revision still watched. A fail-fast reason (judged as during the wait, pull grace
//! included), a restart count that grows, a container that exits, or a workload that loses
//! availability fails the target at once.
//!
//! The same stores as the wait (`wait::store`: reflector stores fed by watches, one per kind
//! and namespace, relisting after a dropped watch) and the same timer (the bake's end and the
//! next grace end); after each batch of events the pure rules below compare what is seen now
//! with what was seen when the bake started (the first complete list of every watch).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kube::Client;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::AppliedObject;
use crate::cluster::health::{self, Status, condition, int_at, str_at};
use crate::cluster::wait::{
    Alarm, Judged, ProblemClock, Snapshot, Stores, Timer, Tracked, WaitFailure, dedup_failures,
    explain, is_workload, store, watch_error_text,
};
use crate::config::FailFastConfig;
use crate::report::Failure;
use crate::util::duration::format_duration;

/// What a bake needs besides the objects.
#[derive(Debug, Clone)]
pub struct BakeOptions {
    /// How long the bake lasts (zero: no bake).
    pub bake: Duration,
    /// The same fail-fast rules as the wait's.
    pub fail_fast: FailFastConfig,
    /// The API server's URL, for messages about the watches.
    pub server: String,
    /// Last log lines read from each failing container (`wait.log_lines`; 0: none).
    pub log_lines: u32,
}

/// One change of a container since the bake started that fails it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerChange {
    /// `restartCount` grew from `before` to `now`; `last_exit` says how the last run ended.
    Restarted {
        container: String,
        before: i64,
        now: i64,
        last_exit: Option<String>,
    },
    /// A serving container has exited and not been restarted yet.
    Exited { container: String, exit: String },
}

/// How the containers of `pod` changed since the bake started. `before` is the same pod
/// then (None, or another uid: the pod came during the bake, every restart of it counts);
/// `serving`: its containers should run forever (not a Job's), so an exit counts too. A
/// pod being deleted is its controller's business (its containers stop as they should).
pub fn container_changes(
    before: Option<&Value>,
    pod: &Value,
    serving: bool,
) -> Vec<ContainerChange> {
    if str_at(pod, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return Vec::new();
    }
    let uid = str_at(pod, &["metadata", "uid"]);
    let before = before.filter(|b| str_at(b, &["metadata", "uid"]) == uid);
    let statuses = |p: &Value| -> Vec<Value> {
        p.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let earlier = before.map(statuses).unwrap_or_default();
    let mut changes = Vec::new();
    for cs in statuses(pod) {
        let Some(name) = str_at(&cs, &["name"]) else {
            continue;
        };
        let was = earlier.iter().find(|c| str_at(c, &["name"]) == Some(name));
        let restarts_before = was.and_then(|c| int_at(c, &["restartCount"])).unwrap_or(0);
        let restarts = int_at(&cs, &["restartCount"]).unwrap_or(0);
        let terminated = |c: &Value| c.pointer("/state/terminated").cloned();
        if restarts > restarts_before {
            changes.push(ContainerChange::Restarted {
                container: name.to_string(),
                before: restarts_before,
                now: restarts,
                last_exit: cs.pointer("/lastState/terminated").map(describe_exit),
            });
        } else if serving
            && let Some(t) = terminated(&cs)
            && was.and_then(terminated).is_none()
        {
            changes.push(ContainerChange::Exited {
                container: name.to_string(),
                exit: describe_exit(&t),
            });
        }
    }
    changes
}

/// "exit code 1 (Error)", "exit code 137 (OOMKilled): message".
fn describe_exit(terminated: &Value) -> String {
    let mut text = match int_at(terminated, &["exitCode"]) {
        Some(code) => format!("exit code {code}"),
        None => "exited".to_string(),
    };
    if let Some(reason) = str_at(terminated, &["reason"]) {
        text.push_str(&format!(" ({reason})"));
    }
    if let Some(message) = str_at(terminated, &["message"])
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        text.push_str(&format!(": {message}"));
    }
    text
}

/// (desired, available) replicas of a workload, for the kinds that serve; None for Jobs.
fn replicas(kind: &str, workload: &Value) -> Option<(i64, i64)> {
    let get = |path: &[&str]| int_at(workload, path);
    match kind {
        "Deployment" | "ReplicaSet" => Some((
            get(&["spec", "replicas"]).unwrap_or(1),
            get(&["status", "availableReplicas"]).unwrap_or(0),
        )),
        "StatefulSet" => Some((
            get(&["spec", "replicas"]).unwrap_or(1),
            get(&["status", "availableReplicas"])
                .or_else(|| get(&["status", "readyReplicas"]))
                .unwrap_or(0),
        )),
        "DaemonSet" => Some((
            get(&["status", "desiredNumberScheduled"]).unwrap_or(0),
            get(&["status", "numberAvailable"]).unwrap_or(0),
        )),
        _ => None,
    }
}

/// Why `now` has lost availability since the bake started (`before`), or None. Lost: a
/// Deployment's Available condition is False, or fewer replicas are available than both what
/// is desired now and what was available then (an autoscaler scaling up or down is no loss).
pub fn availability_lost(kind: &str, before: &Value, now: &Value) -> Option<String> {
    if kind == "Deployment"
        && let Some(c) = condition(now, "Available")
        && str_at(c, &["status"]) == Some("False")
    {
        let reason = str_at(c, &["reason"]).unwrap_or("no reason given");
        let message = str_at(c, &["message"]).unwrap_or("");
        return Some(format!(
            "condition Available is False ({reason}): {message}"
        ));
    }
    let (desired, available) = replicas(kind, now)?;
    let (_, available_before) = replicas(kind, before)?;
    (available < desired.min(available_before)).then(|| {
        format!(
            "{available} of {desired} replicas available, {available_before} when the bake started"
        )
    })
}

/// What kubectl command shows more: `kind` as kubectl names it, lowercased.
fn kubectl_object(object: &AppliedObject) -> String {
    let ns = object
        .namespace
        .as_deref()
        .map(|n| format!(" -n {n}"))
        .unwrap_or_default();
    format!(
        "kubectl describe {}{ns} {}",
        object.resource.kind.to_lowercase(),
        object.name
    )
}

/// Where in the bake: "during the bake, 3.2s after the rollout was healthy".
fn when(into_bake: Duration) -> String {
    format!(
        "during the bake, {} after the rollout was healthy",
        format_duration(into_bake)
    )
}

/// The report entry for one container change of `pod`.
pub fn change_failure(
    object: &AppliedObject,
    pod_object: &Value,
    change: &ContainerChange,
    into_bake: Duration,
) -> Failure {
    let ns = object.namespace.as_deref().unwrap_or("default");
    let pod = str_at(pod_object, &["metadata", "name"]).unwrap_or("");
    let (container, reason, message) = match change {
        ContainerChange::Restarted {
            container,
            before,
            now,
            last_exit,
        } => {
            let exit = last_exit
                .as_deref()
                .map(|e| format!(", last run ended with {e}"))
                .unwrap_or_default();
            (
                container,
                "Restarted",
                format!(
                    "restartCount {before} -> {now} {}{exit}; see `kubectl logs --previous -n {ns} {pod} -c {container}`",
                    when(into_bake)
                ),
            )
        }
        ContainerChange::Exited { container, exit } => (
            container,
            "Exited",
            format!(
                "{exit} {}; the kubelet restarts it; see `kubectl logs -n {ns} {pod} -c {container}`",
                when(into_bake)
            ),
        ),
    };
    // The same structured exit facts the wait reports (image, exit code, signal, restarts).
    let facts = pod_object
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|cs| str_at(cs, &["name"]) == Some(container))
        })
        .map(|cs| health::container_facts(pod_object, cs))
        .unwrap_or_default();
    Failure {
        object: object.display.clone(),
        pod: Some(pod.to_string()),
        container: Some(container.clone()),
        reason: reason.to_string(),
        message,
        events: Vec::new(),
        image: facts.image,
        exit_code: facts.exit_code,
        signal: facts.signal,
        restarts: facts.restarts,
        logs: Vec::new(),
    }
}

/// The report entry for a workload that lost availability (`why`) during the bake.
pub fn availability_failure(object: &AppliedObject, why: &str, into_bake: Duration) -> Failure {
    Failure {
        object: object.display.clone(),
        pod: None,
        container: None,
        reason: "AvailabilityLost".into(),
        message: format!(
            "lost availability {}: {}; see `{}` and the events of its pods",
            when(into_bake),
            why.trim_end_matches('.'),
            kubectl_object(object)
        ),
        events: Vec::new(),
        ..Default::default()
    }
}

/// A fail-fast problem seen during the bake: as the wait reports it, with where and what to
/// look at.
fn during_bake(mut failure: Failure, namespace: &str, into_bake: Duration) -> Failure {
    let pod = failure.pod.clone().unwrap_or_default();
    let hint = match (&failure.container, failure.reason.as_str()) {
        (Some(c), "CrashLoopBackOff" | "OOMKilled") => {
            format!("see `kubectl logs --previous -n {namespace} {pod} -c {c}`")
        }
        _ => format!("see `kubectl describe pod -n {namespace} {pod}`"),
    };
    failure.message = format!("{} ({}); {hint}", failure.message, when(into_bake));
    failure
}

/// What was seen when the bake started: the pods and workloads of the first complete lists.
struct Baseline {
    pods: HashMap<(String, String), Value>,
    workloads: HashMap<String, Value>,
}

/// The bake follows the applied workloads (healthy or not when applied), and the Pods (and
/// ReplicaSets, for Deployments) of their namespaces: the same watches as the wait's.
fn track(applied: &[AppliedObject]) -> Vec<Tracked<'_>> {
    applied
        .iter()
        .filter(|a| is_workload(&a.resource))
        .map(|applied| Tracked {
            applied,
            source: None,
            done: false,
            last_message: String::new(),
        })
        .collect()
}

fn baseline(tracked: &[Tracked<'_>], snapshot: &Snapshot) -> Baseline {
    let mut pods = HashMap::new();
    for (ns, list) in &snapshot.pods {
        for pod in list {
            let name = str_at(pod, &["metadata", "name"]).unwrap_or("").to_string();
            pods.insert((ns.clone(), name), pod.clone());
        }
    }
    let workloads = tracked
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.applied.display.clone(), snapshot.objects.get(&i)?.clone())))
        .collect();
    Baseline { pods, workloads }
}

/// Everything that fails the bake now, and when to look again for problems tolerated for a
/// while (pull errors within their grace).
fn decide(
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    baseline: &Baseline,
    problem_clock: &mut ProblemClock,
    options: &BakeOptions,
    (now, into_bake): (Instant, Duration),
) -> (Vec<Failure>, Option<Instant>) {
    let mut failures = Vec::new();
    let mut next: Option<Instant> = None;
    for (i, t) in tracked.iter().enumerate() {
        let a = t.applied;
        let ns = a.namespace.clone().unwrap_or_default();
        let Some(current) = snapshot.objects.get(&i) else {
            failures.push(Failure {
                object: a.display.clone(),
                pod: None,
                container: None,
                reason: "Deleted".into(),
                message: format!(
                    "no longer in the cluster {}; someone or something deleted it: see `kubectl get events -n {ns}`",
                    when(into_bake)
                ),
                events: Vec::new(),
                ..Default::default()
            });
            continue;
        };
        let kind = a.resource.kind.as_str();
        for pod in snapshot.new_revision_pods(kind, &ns, current) {
            let name = str_at(pod, &["metadata", "name"]).unwrap_or("");
            let before = baseline.pods.get(&(ns.clone(), name.to_string()));
            for change in container_changes(before, pod, kind != "Job") {
                failures.push(change_failure(a, pod, &change, into_bake));
            }
            for problem in health::pod_problems(pod, &options.fail_fast) {
                match problem_clock.judge(&a.display, &problem, &options.fail_fast, now) {
                    Judged::Fails(f) => failures.push(during_bake(f, &ns, into_bake)),
                    Judged::Tolerated(Some(due)) => {
                        next = Some(next.map_or(due, |n: Instant| n.min(due)));
                    }
                    Judged::Tolerated(None) | Judged::Warns(_) => {}
                }
            }
        }
        let assessment = health::assess_as(current, &a.resource.api_version, kind);
        let lost = if assessment.status == Status::Failed {
            Some(assessment.message)
        } else {
            baseline
                .workloads
                .get(&a.display)
                .and_then(|before| availability_lost(kind, before, current))
        };
        if let Some(why) = lost {
            failures.push(availability_failure(a, &why, into_bake));
        }
    }
    (failures, next)
}

/// Watches the pods and workloads of `applied` for `options.bake` from now (the moment the
/// rollout was healthy): Ok when the bake passes without a problem, `Failed` at the first
/// problem, `Cancelled` when `cancel` fires. `report(left)` is called about once a second
/// with the time left, for a countdown. A bake of zero passes at once.
pub async fn watch_bake(
    client: &Client,
    applied: &[AppliedObject],
    options: &BakeOptions,
    cancel: &CancellationToken,
    report: &(dyn Fn(Duration) + Sync),
) -> Result<(), WaitFailure> {
    if options.bake.is_zero() {
        return Ok(());
    }
    let started = Instant::now();
    let mut tracked = track(applied);
    let mut stores = Stores::open(client, &store::watches_for(&mut tracked));
    let mut problem_clock = ProblemClock::new(started);
    let mut timer = Timer::new(started + options.bake);
    let mut baseline: Option<Baseline> = None;
    let mut last_watch_error: Option<String> = None;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watching = true;
    loop {
        if stores.all_listed() {
            let now = Instant::now();
            let snapshot = stores.snapshot(&tracked);
            let base = baseline.get_or_insert_with(|| self::baseline(&tracked, &snapshot));
            let into_bake = now.saturating_duration_since(started);
            let (mut failures, next) = decide(
                &tracked,
                &snapshot,
                base,
                &mut problem_clock,
                options,
                (now, into_bake),
            );
            timer.set_grace_end(next);
            if !failures.is_empty() {
                dedup_failures(&mut failures);
                let lines = options.log_lines;
                explain(client, &mut failures, &tracked, &snapshot, lines, cancel).await;
                return Err(WaitFailure::Failed(failures));
            }
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(WaitFailure::Cancelled),
            alarm = timer.ring() => if alarm == Alarm::Deadline {
                return match baseline {
                    Some(_) => Ok(()),
                    None => Err(WaitFailure::Failed(unwatched(&tracked, options, last_watch_error))),
                };
            },
            _ = ticker.tick() => report(timer.deadline().saturating_duration_since(Instant::now())),
            batch = stores.next_batch(), if watching => match batch {
                Some(batch) => {
                    if let Some(e) = batch.errors.last() {
                        last_watch_error = Some(watch_error_text(e, &options.server));
                    }
                }
                // Every watch ended (none at all without workloads; else should not happen
                // with backoff): the deadline decides.
                None => watching = false,
            },
        }
    }
}

/// The bake ended without the watches ever listing the pods: nothing was watched, so it
/// did not pass.
fn unwatched(
    tracked: &[Tracked<'_>],
    options: &BakeOptions,
    error: Option<String>,
) -> Vec<Failure> {
    let objects: BTreeSet<&str> = tracked.iter().map(|t| t.applied.display.as_str()).collect();
    objects
        .into_iter()
        .map(|object| Failure {
            object: object.to_string(),
            pod: None,
            container: None,
            reason: "BakeNotWatched".into(),
            message: format!(
                "the bake ({}) ended before its watches could list the pods on {}{}; check that the cluster is reachable and deploy again",
                format_duration(options.bake),
                options.server,
                error.as_deref().map(|e| format!(" (last watch error: {e})")).unwrap_or_default()
            ),
            events: Vec::new(),
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::discovery::ApiResource;
    use serde_json::json;

    fn pod(uid: &str, containers: Value) -> Value {
        json!({"metadata": {"name": "web-1", "namespace": "shop", "uid": uid},
               "status": {"containerStatuses": containers}})
    }

    fn running(restarts: i64) -> Value {
        json!({"name": "web", "restartCount": restarts, "state": {"running": {}}})
    }

    #[test]
    fn container_changes_since_the_start() {
        let crashed = json!({"exitCode": 1, "reason": "Error"});
        let restarted = json!({"name": "web", "restartCount": 1, "state": {"running": {}},
                               "lastState": {"terminated": crashed}});
        let exited = json!({"name": "web", "restartCount": 0, "state": {"terminated": crashed}});
        let oom = json!({"name": "web", "restartCount": 0,
                         "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}});
        let start = pod("u1", json!([running(0)]));
        let restart = |before, now, last_exit: Option<&str>| ContainerChange::Restarted {
            container: "web".into(),
            before,
            now,
            last_exit: last_exit.map(str::to_string),
        };
        let exit = |text: &str| ContainerChange::Exited {
            container: "web".into(),
            exit: text.into(),
        };
        // (before, now, serving) -> changes
        let cases: Vec<(Option<Value>, Value, bool, Vec<ContainerChange>)> = vec![
            (Some(start.clone()), start.clone(), true, vec![]),
            (
                Some(start.clone()),
                pod("u1", json!([restarted])),
                true,
                vec![restart(0, 1, Some("exit code 1 (Error)"))],
            ),
            // Restarts the pod already had when the bake started do not count.
            (
                Some(pod("u1", json!([running(3)]))),
                pod("u1", json!([running(3)])),
                true,
                vec![],
            ),
            (
                Some(pod("u1", json!([running(3)]))),
                pod("u1", json!([running(4)])),
                true,
                vec![restart(3, 4, None)],
            ),
            // A pod that came during the bake: every restart counts.
            (
                None,
                pod("u2", json!([running(1)])),
                true,
                vec![restart(0, 1, None)],
            ),
            (None, pod("u2", json!([running(0)])), true, vec![]),
            // Same name, another uid (a StatefulSet's pod recreated): a new pod.
            (
                Some(pod("u1", json!([running(5)]))),
                pod("u2", json!([running(1)])),
                true,
                vec![restart(0, 1, None)],
            ),
            // An exit before the kubelet restarts the container.
            (
                Some(start.clone()),
                pod("u1", json!([exited])),
                true,
                vec![exit("exit code 1 (Error)")],
            ),
            (
                Some(start.clone()),
                pod("u1", json!([oom])),
                true,
                vec![exit("exit code 137 (OOMKilled)")],
            ),
            // A Job's container that ends is done, not broken.
            (
                Some(start.clone()),
                pod("u1", json!([exited])),
                false,
                vec![],
            ),
            // Already terminated at the start: not a change.
            (
                Some(pod("u1", json!([exited]))),
                pod("u1", json!([exited])),
                true,
                vec![],
            ),
        ];
        for (before, now, serving, want) in cases {
            assert_eq!(
                container_changes(before.as_ref(), &now, serving),
                want,
                "{before:?} -> {now}"
            );
        }
        // A pod being deleted stops its containers on purpose.
        let mut deleting = pod("u1", json!([exited]));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-12-02T00:00:00Z");
        assert!(container_changes(Some(&start), &deleting, true).is_empty());
    }

    #[test]
    fn availability_lost_against_the_start() {
        let deploy = |replicas: i64, available: Option<i64>, condition: &str| {
            let mut d = json!({"spec": {"replicas": replicas},
                "status": {"conditions": [{"type": "Available", "status": condition,
                    "reason": "MinimumReplicasUnavailable",
                    "message": "Deployment does not have minimum availability."}]}});
            if let Some(a) = available {
                d["status"]["availableReplicas"] = json!(a);
            }
            d
        };
        let sts = |replicas: i64, ready: i64| json!({"spec": {"replicas": replicas}, "status": {"readyReplicas": ready}});
        let ds = |desired: i64, available: i64| json!({"status": {"desiredNumberScheduled": desired, "numberAvailable": available}});
        // (kind, before, now) -> the reason, or None when availability holds.
        let cases: Vec<(&str, Value, Value, Option<&str>)> = vec![
            (
                "Deployment",
                deploy(3, Some(3), "True"),
                deploy(3, Some(3), "True"),
                None,
            ),
            (
                "Deployment",
                deploy(3, Some(3), "True"),
                deploy(3, Some(2), "True"),
                Some("2 of 3 replicas available, 3 when the bake started"),
            ),
            // availableReplicas is left out when zero.
            (
                "Deployment",
                deploy(1, Some(1), "True"),
                deploy(1, None, "True"),
                Some("0 of 1 replicas available, 1 when the bake started"),
            ),
            (
                "Deployment",
                deploy(3, Some(3), "True"),
                deploy(3, Some(3), "False"),
                Some(
                    "condition Available is False (MinimumReplicasUnavailable): Deployment does not have minimum availability.",
                ),
            ),
            // An autoscaler: scaling up is not a loss while the new replicas start ...
            (
                "Deployment",
                deploy(3, Some(3), "True"),
                deploy(5, Some(3), "True"),
                None,
            ),
            // ... and neither is scaling down.
            (
                "Deployment",
                deploy(3, Some(3), "True"),
                deploy(2, Some(2), "True"),
                None,
            ),
            // Fewer than desired at the start too: only a drop below that counts.
            (
                "Deployment",
                deploy(3, Some(2), "True"),
                deploy(3, Some(2), "True"),
                None,
            ),
            (
                "Deployment",
                deploy(3, Some(2), "True"),
                deploy(3, Some(1), "True"),
                Some("1 of 3 replicas available, 2 when the bake started"),
            ),
            ("StatefulSet", sts(2, 2), sts(2, 2), None),
            (
                "StatefulSet",
                sts(2, 2),
                sts(2, 1),
                Some("1 of 2 replicas available, 2 when the bake started"),
            ),
            ("DaemonSet", ds(3, 3), ds(3, 3), None),
            (
                "DaemonSet",
                ds(3, 3),
                ds(3, 2),
                Some("2 of 3 replicas available, 3 when the bake started"),
            ),
            // A node added: its new pod is not available yet, nothing was lost.
            ("DaemonSet", ds(3, 3), ds(4, 3), None),
            ("Job", json!({}), json!({}), None),
        ];
        for (kind, before, now, want) in cases {
            assert_eq!(
                availability_lost(kind, &before, &now).as_deref(),
                want,
                "{kind}: {before} -> {now}"
            );
        }
    }

    fn web() -> AppliedObject {
        AppliedObject {
            display: "Deployment shop/web".into(),
            resource: ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
            name: "web".into(),
            namespace: Some("shop".into()),
            response: None,
            note: None,
        }
    }

    #[test]
    fn failures_say_what_where_and_what_to_do() {
        let change = ContainerChange::Restarted {
            container: "web".into(),
            before: 0,
            now: 1,
            last_exit: Some("exit code 1 (Error)".into()),
        };
        let restarted = json!({"metadata": {"name": "web-7d9f-x"},
            "spec": {"containers": [{"name": "web", "image": "shop/web:v2"}]},
            "status": {"containerStatuses": [{"name": "web", "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}});
        let f = change_failure(&web(), &restarted, &change, Duration::from_millis(3200));
        assert_eq!(
            (
                f.image.as_deref(),
                f.exit_code,
                f.signal.as_deref(),
                f.restarts
            ),
            (Some("shop/web:v2"), Some(1), None, Some(1))
        );
        assert_eq!(
            f.headline(),
            "Deployment shop/web: pod web-7d9f-x container web: Restarted: restartCount 0 -> 1 \
             during the bake, 3.2s after the rollout was healthy, last run ended with exit code 1 \
             (Error); see `kubectl logs --previous -n shop web-7d9f-x -c web`"
        );
        let exited = ContainerChange::Exited {
            container: "web".into(),
            exit: "exit code 137 (OOMKilled)".into(),
        };
        let killed = json!({"metadata": {"name": "web-7d9f-x"},
            "status": {"containerStatuses": [{"name": "web", "restartCount": 0,
                "image": "shop/web:v2",
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}});
        let f = change_failure(&web(), &killed, &exited, Duration::from_secs(5));
        assert_eq!(
            (
                f.image.as_deref(),
                f.exit_code,
                f.signal.as_deref(),
                f.restarts
            ),
            (Some("shop/web:v2"), Some(137), Some("SIGKILL"), Some(0))
        );
        assert_eq!(
            f.headline(),
            "Deployment shop/web: pod web-7d9f-x container web: Exited: exit code 137 (OOMKilled) \
             during the bake, 5s after the rollout was healthy; the kubelet restarts it; see \
             `kubectl logs -n shop web-7d9f-x -c web`"
        );
        let problem = health::PodProblem {
            pod: "web-7d9f-x".into(),
            container: Some("web".into()),
            reason: "CrashLoopBackOff".into(),
            message: "back-off 20s; 2 restarts".into(),
            severity: health::Severity::Fatal,
            facts: health::ContainerFacts::default(),
        };
        let f = during_bake(
            problem.to_failure("Deployment shop/web"),
            "shop",
            Duration::from_secs(7),
        );
        assert_eq!(
            f.message,
            "back-off 20s; 2 restarts (during the bake, 7s after the rollout was healthy); see \
             `kubectl logs --previous -n shop web-7d9f-x -c web`"
        );
        assert_eq!(
            kubectl_object(&web()),
            "kubectl describe deployment -n shop web"
        );
        let f = availability_failure(
            &web(),
            "condition Available is False (MinimumReplicasUnavailable): Deployment does not have minimum availability.",
            Duration::from_millis(1400),
        );
        assert_eq!(
            f.headline(),
            "Deployment shop/web: AvailabilityLost: lost availability during the bake, 1.4s after \
             the rollout was healthy: condition Available is False (MinimumReplicasUnavailable): \
             Deployment does not have minimum availability; see `kubectl describe deployment -n \
             shop web` and the events of its pods"
        );
    }

    #[tokio::test]
    async fn a_zero_bake_passes_at_once_and_cancel_stops_one() {
        let cluster = crate::util::test_cluster::TestCluster::start().await;
        let client = cluster.client();
        let ticks = std::sync::Mutex::new(0);
        let report = |_: Duration| *ticks.lock().unwrap() += 1;
        let options = |bake| BakeOptions {
            bake,
            fail_fast: FailFastConfig::default(),
            server: "https://sim".into(),
            log_lines: 0,
        };
        let cancel = CancellationToken::new();
        let zero = watch_bake(
            &client,
            &[web()],
            &options(Duration::ZERO),
            &cancel,
            &report,
        )
        .await;
        assert!(zero.is_ok());
        assert_eq!(*ticks.lock().unwrap(), 0);
        cancel.cancel();
        let long = options(Duration::from_secs(600));
        let cancelled = watch_bake(&client, &[web()], &long, &cancel, &report).await;
        assert!(
            matches!(cancelled, Err(WaitFailure::Cancelled)),
            "{cancelled:?}"
        );
    }

    /// Applies a 2-replica Deployment `shop/web` of `image` and waits for its rollout.
    async fn healthy_web(
        cluster: &crate::util::test_cluster::TestCluster,
        image: &str,
    ) -> AppliedObject {
        cluster.add_namespace("shop");
        let resource = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(cluster.client(), "shop", &resource);
        let deployment: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}
        }))
        .expect("deployment");
        let created = api
            .create(&kube::api::PostParams::default(), &deployment)
            .await
            .expect("created");
        let applied = AppliedObject {
            response: Some(serde_json::to_value(created).expect("json").into()),
            ..web()
        };
        let options = crate::cluster::wait::WaitOptions {
            deadline: Instant::now() + Duration::from_secs(20),
            timeout: Duration::from_secs(20),
            fail_fast: FailFastConfig::default(),
            server: "https://sim".into(),
            log_lines: 0,
        };
        let outcome = crate::cluster::wait::wait_for_rollout(
            &cluster.client(),
            std::slice::from_ref(&applied),
            &options,
            &CancellationToken::new(),
            &|_| {},
        )
        .await;
        assert!(outcome.result.is_ok(), "rollout: {:?}", outcome.result);
        applied
    }

    #[tokio::test]
    async fn healthy_pods_pass_a_bake_with_a_countdown() {
        let cluster = crate::util::test_cluster::TestCluster::start().await;
        let applied = healthy_web(&cluster, "example/web:v2").await;
        let left = std::sync::Mutex::new(Vec::new());
        let options = BakeOptions {
            bake: Duration::from_secs(3),
            fail_fast: FailFastConfig::default(),
            server: "https://sim".into(),
            log_lines: 0,
        };
        let result = watch_bake(
            &cluster.client(),
            &[applied],
            &options,
            &CancellationToken::new(),
            &|l| left.lock().unwrap().push(l.as_secs_f64().ceil() as u64),
        )
        .await;
        assert!(result.is_ok(), "{result:?}");
        let left = left.into_inner().unwrap();
        // About once a second, counting down from the whole bake.
        assert_eq!(left.first(), Some(&3), "{left:?}");
        assert!(left.windows(2).all(|w| w[1] < w[0]), "{left:?}");
        assert!((3..=4).contains(&left.len()), "{left:?}");
    }

    #[tokio::test]
    async fn a_crash_after_a_healthy_start_fails_the_bake() {
        // Ready 1 s after the pod is created, crashes 3.5 s after (sim time, scale 1): the
        // rollout is healthy in between.
        let rules =
            kube_sim::rules::parse("- {image: \"*:v2\", behaviour: CrashLoopBackOff, after: 3s}")
                .expect("rules");
        let cluster = crate::util::test_cluster::TestCluster::start_with(rules).await;
        let applied = healthy_web(&cluster, "example/web:v2").await;
        let options = BakeOptions {
            bake: Duration::from_secs(30),
            fail_fast: FailFastConfig::default(),
            server: "https://sim".into(),
            log_lines: 0,
        };
        let result = watch_bake(
            &cluster.client(),
            &[applied],
            &options,
            &CancellationToken::new(),
            &|_| {},
        )
        .await;
        let Err(WaitFailure::Failed(failures)) = result else {
            panic!("the bake passed or ended otherwise: {result:?}");
        };
        let lines: Vec<String> = failures.iter().map(Failure::headline).collect();
        let crash = failures
            .iter()
            .find(|f| f.reason == "Exited" || f.reason == "Restarted")
            .unwrap_or_else(|| panic!("no pod named: {lines:#?}"));
        let pod = crash.pod.as_deref().unwrap_or_default();
        assert!(pod.starts_with("web-"), "{lines:#?}");
        assert_eq!(crash.container.as_deref(), Some("web"), "{lines:#?}");
        assert!(crash.message.contains("exit code 1 (Error)"), "{lines:#?}");
        assert!(crash.message.contains("during the bake"), "{lines:#?}");
        assert!(
            crash.message.contains("kubectl logs") && crash.message.contains(pod),
            "{lines:#?}"
        );
    }

    #[tokio::test]
    async fn readiness_lost_after_a_healthy_start_fails_the_bake_on_availability() {
        let rules = kube_sim::rules::parse("- {image: \"*:v2\", behaviour: NeverReady, after: 3s}")
            .expect("rules");
        let cluster = crate::util::test_cluster::TestCluster::start_with(rules).await;
        let applied = healthy_web(&cluster, "example/web:v2").await;
        let options = BakeOptions {
            bake: Duration::from_secs(30),
            fail_fast: FailFastConfig::default(),
            server: "https://sim".into(),
            log_lines: 0,
        };
        let cancel = CancellationToken::new();
        let result = watch_bake(&cluster.client(), &[applied], &options, &cancel, &|_| {}).await;
        let Err(WaitFailure::Failed(failures)) = result else {
            panic!("the bake passed or ended otherwise: {result:?}");
        };
        let lines: Vec<String> = failures.iter().map(Failure::headline).collect();
        // No container exited or restarted: the Deployment says what was lost.
        assert!(
            failures.iter().all(|f| f.reason == "AvailabilityLost"),
            "{lines:#?}"
        );
        assert_eq!(failures[0].object, "Deployment shop/web", "{lines:#?}");
        assert!(
            failures[0].message.contains("when the bake started")
                || failures[0].message.contains("condition Available is False"),
            "{lines:#?}"
        );
        assert!(
            failures[0]
                .message
                .contains("see `kubectl describe deployment -n shop web`"),
            "{lines:#?}"
        );
    }
}
