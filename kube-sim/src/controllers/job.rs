//! The Job controller as a pure function: run pods to `completions`, fail after
//! `backoffLimit` failures, with the conditions v1.36 writes (SuccessCriteriaMet + Complete,
//! FailureTarget + Failed).

use std::borrow::Borrow;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::deployment::Note;
use super::meta;
use super::pods;

#[derive(Debug, Default)]
pub struct JobSync {
    pub create: Vec<Value>,
    pub delete: Vec<String>,
    pub status: Value,
    pub events: Vec<Note>,
    /// Sync again after this long (the back-off before replacing a failed pod).
    pub requeue_after: Option<Duration>,
}

/// The Job controller's back-off after `failures` failed pods: 10 s doubling, capped at 6 min.
pub fn failure_backoff(failures: i64) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let shift = (failures - 1).min(6) as u32;
    Duration::from_secs(10u64 << shift).min(Duration::from_secs(360))
}

/// Time left before a failed pod may be replaced, if any.
fn backoff_remaining(owned: &[&Value], failed: i64, now: jiff::Timestamp) -> Option<Duration> {
    if failed == 0 {
        return None;
    }
    let last_failure = owned
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed")
        .filter_map(|p| {
            let finished = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| meta::parse_time(&c["state"]["terminated"]["finishedAt"]))
                .max();
            finished.or_else(|| meta::creation_time(p))
        })
        .max()?;
    let until = meta::add(last_failure, failure_backoff(failed));
    (until > now).then(|| meta::since(until, now))
}

fn finished(job: &Value) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
}

fn job_condition(kind: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message})
}

/// What one sync counts from the Job's pods.
struct PodCounts<'a> {
    succeeded: i64,
    failed_pods: i64,
    /// Failed pods plus, with restartPolicy OnFailure, container restarts.
    failed: i64,
    active: Vec<&'a Value>,
    ready: i64,
}

/// Counts the Job's pods by phase, failures (restarts included) and readiness.
fn count_pods<'a>(job: &Value, owned: &[&'a Value]) -> PodCounts<'a> {
    let on_failure = job["spec"]["template"]["spec"]["restartPolicy"].as_str() == Some("OnFailure");
    let phase = |p: &Value| {
        p["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let succeeded = owned.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
    let failed_pods = owned.iter().filter(|p| phase(p) == "Failed").count() as i64;
    // With restartPolicy OnFailure, container restarts count against the back-off limit.
    let restarts: i64 = if on_failure {
        owned
            .iter()
            .flat_map(|p| {
                p["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c["restartCount"].as_i64().unwrap_or(0))
            .sum()
    } else {
        0
    };
    let failed = failed_pods + restarts;
    let active: Vec<&Value> = owned
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let ready = active
        .iter()
        .filter(|p| pods::ready_since(p).is_some())
        .count() as i64;
    PodCounts {
        succeeded,
        failed_pods,
        failed,
        active,
        ready,
    }
}

/// Marks the Job Failed (FailureTarget + Failed) and deletes its active pods.
fn fail(conditions: &mut Vec<Value>, active: &[&Value], now_text: &str, out: &mut JobSync) {
    let message = "Job has reached the specified backoff limit";
    conditions.push(job_condition(
        "FailureTarget",
        "BackoffLimitExceeded",
        message,
        now_text,
    ));
    conditions.push(job_condition(
        "Failed",
        "BackoffLimitExceeded",
        message,
        now_text,
    ));
    out.delete = active.iter().map(|p| meta::name(p).to_string()).collect();
    out.events.push(Note {
        kind: "Warning",
        reason: "BackoffLimitExceeded",
        message: message.into(),
    });
}

/// Marks the Job complete (SuccessCriteriaMet + Complete).
fn complete(conditions: &mut Vec<Value>, now_text: &str, out: &mut JobSync) {
    let message = "Reached expected number of succeeded pods";
    conditions.push(job_condition(
        "SuccessCriteriaMet",
        "CompletionsReached",
        message,
        now_text,
    ));
    conditions.push(job_condition(
        "Complete",
        "CompletionsReached",
        message,
        now_text,
    ));
    out.events.push(Note {
        kind: "Normal",
        reason: "Completed",
        message: "Job completed".into(),
    });
}

/// Creates pods from the template until `wanted` are active (at most a burst per sync).
fn create_pods(job: &Value, wanted: i64, active_count: i64, out: &mut JobSync) {
    let name = meta::name(job);
    let wanted = wanted.min(active_count + super::replicaset::BURST_REPLICAS);
    for _ in active_count..wanted {
        let uid = meta::uid(job).to_string();
        out.create.push(pods::pod_from_template(
            job,
            "batch/v1",
            "Job",
            &job["spec"]["template"],
            pods::PodName::Generated(format!("{name}-")),
            &[
                ("batch.kubernetes.io/controller-uid", uid.clone()),
                ("batch.kubernetes.io/job-name", name.to_string()),
                ("controller-uid", uid),
                ("job-name", name.to_string()),
            ],
        ));
    }
}

/// The Job's status after this sync.
fn status(
    job: &Value,
    conditions: Vec<Value>,
    completion_time: Value,
    active_count: i64,
    counts: &PodCounts,
    now_text: &str,
) -> Value {
    let mut status = Map::new();
    if !conditions.is_empty() {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    let start = if job["status"]["startTime"].is_string() {
        job["status"]["startTime"].clone()
    } else {
        json!(now_text)
    };
    status.insert("startTime".into(), start);
    if completion_time.is_string() {
        status.insert("completionTime".into(), completion_time);
    }
    meta::put_nonzero(&mut status, "active", active_count);
    meta::put_nonzero(&mut status, "succeeded", counts.succeeded);
    meta::put_nonzero(&mut status, "failed", counts.failed);
    status.insert("terminating".into(), json!(0));
    status.insert("uncountedTerminatedPods".into(), json!({}));
    status.insert(
        "ready".into(),
        json!(if active_count == 0 { 0 } else { counts.ready }),
    );
    Value::Object(status)
}

/// One sync of a Job against its pods.
pub fn reconcile<P: Borrow<Value>>(job: &Value, owned: &[P], now: jiff::Timestamp) -> JobSync {
    let owned: Vec<&Value> = owned.iter().map(Borrow::borrow).collect();
    let mut out = JobSync::default();
    if !meta::well_formed(job) {
        return out;
    }
    let now_text = crate::model::clock::format_time(now);
    let completions = job["spec"]["completions"].as_i64().unwrap_or(1).max(0);
    let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff_limit = job["spec"]["backoffLimit"].as_i64().unwrap_or(6);
    let counts = count_pods(job, &owned);

    let mut conditions: Vec<Value> = job["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut completion_time = job["status"]["completionTime"].clone();
    let was_finished = finished(job);
    let mut active_count = counts.active.len() as i64;
    if !was_finished {
        if counts.failed > backoff_limit {
            fail(&mut conditions, &counts.active, &now_text, &mut out);
            active_count = 0;
        } else if counts.succeeded >= completions {
            complete(&mut conditions, &now_text, &mut out);
            completion_time = json!(now_text);
        } else if let Some(wait) = backoff_remaining(&owned, counts.failed_pods, now) {
            // Failed pods are replaced only after the back-off (10 s doubling, 6 min cap).
            out.requeue_after = Some(wait);
        } else if job["spec"]["suspend"].as_bool() != Some(true) {
            let wanted = parallelism.min(completions - counts.succeeded);
            create_pods(job, wanted, active_count, &mut out);
        }
    }

    out.status = status(
        job,
        conditions,
        completion_time,
        active_count,
        &counts,
        &now_text,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No owned objects.
    const NONE: &[Value] = &[];

    fn job(completions: i64, backoff: i64) -> Value {
        json!({"metadata": {"name": "migrate", "namespace": "ns", "uid": "j1"},
               "spec": {"completions": completions, "parallelism": 1, "backoffLimit": backoff,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x"}]}}},
               "status": {}})
    }

    fn pod(phase: &str) -> Value {
        json!({"metadata": {"name": format!("migrate-{phase}")}, "status": {"phase": phase}})
    }

    fn now() -> jiff::Timestamp {
        "2026-11-30T08:05:00Z".parse().unwrap()
    }

    #[test]
    fn starts_pods_then_completes() {
        let j = job(2, 6);
        let out = reconcile(&j, NONE, now());
        assert_eq!(out.create.len(), 1);
        assert_eq!(out.create[0]["metadata"]["labels"]["job-name"], "migrate");
        assert_eq!(out.create[0]["spec"]["restartPolicy"], "Never");
        let out = reconcile(&j, &[pod("Succeeded")], now());
        assert_eq!(out.create.len(), 1, "one more for the second completion");
        let out = reconcile(&j, &[pod("Succeeded"), pod("Succeeded")], now());
        let types: Vec<&str> = out.status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(out.status["succeeded"], 2);
        assert_eq!(out.status["completionTime"], "2026-11-30T08:05:00Z");
        assert_eq!(out.events[0].reason, "Completed");
    }

    #[test]
    fn fails_after_backoff_limit() {
        let j = job(1, 2);
        let out = reconcile(&j, &[pod("Failed"), pod("Failed")], now());
        assert_eq!(
            out.create.len(),
            1,
            "two failures are within backoffLimit 2"
        );
        let out = reconcile(&j, &[pod("Failed"), pod("Failed"), pod("Failed")], now());
        assert!(out.create.is_empty());
        let conditions = out.status["conditions"].as_array().unwrap();
        assert_eq!(conditions[1]["type"], "Failed");
        assert_eq!(conditions[1]["reason"], "BackoffLimitExceeded");
        assert_eq!(
            conditions[1]["message"],
            "Job has reached the specified backoff limit"
        );
        assert_eq!(out.status["failed"], 3);
    }

    #[test]
    fn failed_pods_are_replaced_after_a_backoff() {
        let j = job(1, 6);
        let mut failed = pod("Failed");
        failed["status"]["containerStatuses"] =
            json!([{"state": {"terminated": {"finishedAt": "2026-11-30T08:04:55Z"}}}]);
        let out = reconcile(&j, std::slice::from_ref(&failed), now());
        assert!(
            out.create.is_empty(),
            "10 s back-off after the first failure"
        );
        assert_eq!(out.requeue_after, Some(Duration::from_secs(5)));
        let later: jiff::Timestamp = "2026-11-30T08:05:06Z".parse().unwrap();
        assert_eq!(reconcile(&j, &[failed], later).create.len(), 1);
        assert_eq!(failure_backoff(1), Duration::from_secs(10));
        assert_eq!(failure_backoff(3), Duration::from_secs(40));
        assert_eq!(failure_backoff(30), Duration::from_secs(360));
    }

    #[test]
    fn finished_jobs_stay_finished() {
        let mut j = job(1, 6);
        let done = reconcile(&j, &[pod("Succeeded")], now());
        j["status"] = done.status.clone();
        let again = reconcile(&j, &[pod("Succeeded")], now());
        assert_eq!(again.status, done.status);
        assert!(again.create.is_empty() && again.events.is_empty());
    }
}
