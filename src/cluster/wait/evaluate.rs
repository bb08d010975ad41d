//! The evaluation: what the stores hold now, judged by the pure rules. `health::assess` per
//! object, and `health::pod_problems` for the pods of a workload's NEW revision only (old
//! pods must never fail a new rollout). Fatal pod problems fail at once; transient ones
//! (Unschedulable, pull errors that may pass) fail once they have lasted their grace, and
//! the evaluation says the next instant a grace ends so that the timer wakes exactly then.
//! Pull errors are judged by what they say (`health::pulls`), their grace counted per
//! container from the first pull error this watcher saw, on its monotonic clock (never a
//! node's timestamps).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use tokio::time::Instant;

use super::tracked::{Tracked, is_workload};
use crate::cluster::health::pulls::{self, PullVerdict, PullWatch};
use crate::cluster::health::{self, Assessment, RevisionSelector, Severity, Status, str_at};
use crate::config::FailFastConfig;
use crate::report::Failure;

/// What the stores hold at one instant, as the rules read it (JSON, as the API serves it).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Per tracked object (by its index), the object as its watch last saw it.
    pub objects: HashMap<usize, Value>,
    /// Per namespace, the pods its watch sees.
    pub pods: HashMap<String, Vec<Value>>,
    /// Per namespace, the ReplicaSets its watch sees (namespaces with Deployments).
    pub replica_sets: HashMap<String, Vec<Value>>,
}

impl Snapshot {
    /// The object `t` (index `i`) as last seen: its watch's, else the apply's response.
    pub(in crate::cluster) fn object<'s>(
        &'s self,
        i: usize,
        t: &Tracked<'_>,
    ) -> Option<Cow<'s, Value>> {
        match self.objects.get(&i) {
            Some(seen) => Some(Cow::Borrowed(seen)),
            None => t.applied.response.as_ref().map(|r| Cow::Owned(r.value())),
        }
    }

    /// The pod `name` of `namespace`, when its watch sees it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.pods
            .get(namespace)?
            .iter()
            .find(|p| str_at(p, &["metadata", "name"]) == Some(name))
    }

    /// The ReplicaSets of `namespace` that `uid` owns.
    pub fn owned_replica_sets<'s>(
        &'s self,
        namespace: &str,
        uid: &'s str,
    ) -> impl Iterator<Item = &'s Value> {
        self.replica_sets
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(move |rs| !uid.is_empty() && owned_by(rs, uid))
    }

    /// The pods of `workload`'s new revision (a `kind` in `namespace`) seen by the watches;
    /// none while the revision is not known yet.
    pub fn new_revision_pods(&self, kind: &str, namespace: &str, workload: &Value) -> Vec<&Value> {
        let uid = str_at(workload, &["metadata", "uid"]).unwrap_or("");
        let owned: Vec<&Value> = self.owned_replica_sets(namespace, uid).collect();
        let (Some(revision), Some(pods), Some(wanted)) = (
            revision_for_pods(kind, workload, &owned),
            self.pods.get(namespace),
            match_labels(workload),
        ) else {
            return Vec::new();
        };
        // Every pod of the namespace, for every workload of it: the selector is read once.
        pods.iter()
            .filter(|p| has_labels(p, wanted) && of_revision(p, revision.as_ref()))
            .collect()
    }
}

/// True when `obj` has an owner reference with this uid.
pub fn owned_by(obj: &Value, owner_uid: &str) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
        })
}

/// True when the pod carries every label of the workload's `spec.selector.matchLabels` and,
/// when given, the label of the new revision.
pub fn pod_of_workload(pod: &Value, workload: &Value, revision: Option<&RevisionSelector>) -> bool {
    match_labels(workload).is_some_and(|wanted| has_labels(pod, wanted))
        && of_revision(pod, revision)
}

/// The workload's `spec.selector.matchLabels`, when it has some (an empty one selects no
/// pod here: every workload kind rollguard waits for requires a selector).
fn match_labels(workload: &Value) -> Option<&serde_json::Map<String, Value>> {
    workload
        .get("spec")?
        .get("selector")?
        .get("matchLabels")?
        .as_object()
        .filter(|m| !m.is_empty())
}

fn has_labels(pod: &Value, wanted: &serde_json::Map<String, Value>) -> bool {
    let labels = pod
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object);
    wanted.iter().all(|(k, v)| {
        v.as_str()
            .is_some_and(|v| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v))
    })
}

fn of_revision(pod: &Value, revision: Option<&RevisionSelector>) -> bool {
    revision.is_none_or(|r| health::pod_matches(pod, r))
}

/// The revision whose pods count for fail-fast, or None when it is not known yet (then no
/// pod is judged: old pods must never fail a new rollout). Jobs and bare ReplicaSets have
/// one revision: all their pods count.
pub fn revision_for_pods(
    kind: &str,
    workload: &Value,
    owned: &[impl std::borrow::Borrow<Value>],
) -> Option<Option<RevisionSelector>> {
    match kind {
        "Job" | "ReplicaSet" => Some(None),
        _ => health::new_revision_selector(workload, owned).map(Some),
    }
}

/// What a pod problem means now, judged as the wait judges it.
// Short-lived (one per decision, consumed at once): boxing the failure would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(in crate::cluster) enum Judged {
    /// Fails the target.
    Fails(Failure),
    /// Reported, never fails (e.g. unschedulable under the warn policy): the headline.
    Warns(String),
    /// Not yet: decide again at this instant (None: when the pod changes).
    Tolerated(Option<Instant>),
}

/// What a watcher remembers of pod problems between its decisions, on its own monotonic
/// clock (never a node's timestamps): when each transient problem was first seen, and each
/// container's pull errors. One per wait, one per bake: a bake's graces count from its
/// start.
pub(in crate::cluster) struct ProblemClock {
    started: Instant,
    transient_since: HashMap<(String, Option<String>, String), Instant>,
    pulls: HashMap<(String, Option<String>), PullWatch>,
}

impl ProblemClock {
    pub(in crate::cluster) fn new(started: Instant) -> Self {
        ProblemClock {
            started,
            transient_since: HashMap::new(),
            pulls: HashMap::new(),
        }
    }

    /// Judges one problem of a pod of `object` at `now`: fatal ones fail at once; pull
    /// errors by what they say, with `pull_grace` from the container's first pull error;
    /// other transient ones once they have lasted their grace (a transient problem without
    /// a grace, CrashLoopBackOff below the restart threshold, is decided by later pod
    /// states, not by time).
    pub(in crate::cluster) fn judge(
        &mut self,
        object: &str,
        problem: &health::PodProblem,
        fail_fast: &FailFastConfig,
        now: Instant,
    ) -> Judged {
        let failure = problem.to_failure(object);
        if problem.is_pull() {
            let key = (problem.pod.clone(), problem.container.clone());
            let seen = now.saturating_duration_since(self.started);
            let (watch, verdict) = pulls::judge(
                self.pulls.get(&key),
                &problem.reason,
                &problem.message,
                seen,
                fail_fast.pull_grace,
            );
            self.pulls.insert(key, watch);
            return match verdict {
                PullVerdict::Fails(message) | PullVerdict::GraceOver(message) => {
                    Judged::Fails(Failure { message, ..failure })
                }
                PullVerdict::Tolerated { until } => Judged::Tolerated(Some(self.started + until)),
            };
        }
        match problem.severity {
            Severity::Fatal => Judged::Fails(failure),
            Severity::Warning => Judged::Warns(failure.headline()),
            Severity::Transient => {
                let Some(grace) = problem.grace(fail_fast) else {
                    return Judged::Tolerated(None);
                };
                let key = (
                    problem.pod.clone(),
                    problem.container.clone(),
                    problem.reason.clone(),
                );
                let since = *self.transient_since.entry(key).or_insert(now);
                let due = since + grace;
                if due <= now {
                    Judged::Fails(Failure {
                        message: format!(
                            "{} (for more than {})",
                            failure.message,
                            crate::util::duration::format_duration(grace)
                        ),
                        ..failure
                    })
                } else {
                    Judged::Tolerated(Some(due))
                }
            }
        }
    }
}

/// What the evaluation found at one instant.
#[derive(Debug, Default)]
pub struct Evaluation {
    /// Each object not done before and seen, by its index: how it stands now (Current:
    /// done).
    pub assessed: Vec<(usize, Assessment)>,
    /// What fails the target now (empty: nothing yet).
    pub failures: Vec<Failure>,
    /// Problems that never fail (the warn policy), as headlines.
    pub warnings: Vec<String>,
    /// The next instant a tolerated problem's grace ends (None: no grace running).
    pub next_grace_end: Option<Instant>,
}

/// Judges every object of `tracked` not done yet with what `snapshot` holds at `now`.
pub(in crate::cluster) fn evaluate(
    tracked: &[Tracked<'_>],
    snapshot: &Snapshot,
    clock: &mut ProblemClock,
    fail_fast: &FailFastConfig,
    now: Instant,
) -> Evaluation {
    let mut out = Evaluation::default();
    for (i, t) in tracked.iter().enumerate().filter(|(_, t)| !t.done) {
        let a = t.applied;
        let Some(current) = snapshot.object(i, t) else {
            // Only objects healthy when applied have neither, and those are done.
            continue;
        };
        let current = &*current;
        let assessment = health::assess_as(current, &a.resource.api_version, &a.resource.kind);
        let status = assessment.status;
        if status == Status::Failed {
            out.failures.push(Failure {
                object: a.display.clone(),
                pod: None,
                container: None,
                reason: failed_reason(&assessment.message),
                message: assessment.message.clone(),
                events: Vec::new(),
                ..Default::default()
            });
        }
        out.assessed.push((i, assessment));
        if status == Status::Current || !is_workload(&a.resource) {
            continue;
        }
        let ns = a.namespace.as_deref().unwrap_or_default();
        for pod in snapshot.new_revision_pods(&a.resource.kind, ns, current) {
            for problem in health::pod_problems(pod, fail_fast) {
                match clock.judge(&a.display, &problem, fail_fast, now) {
                    Judged::Fails(failure) => out.failures.push(failure),
                    Judged::Warns(line) => out.warnings.push(line),
                    Judged::Tolerated(Some(due)) => {
                        out.next_grace_end = Some(out.next_grace_end.map_or(due, |n| n.min(due)));
                    }
                    Judged::Tolerated(None) => {}
                }
            }
        }
    }
    dedup_failures(&mut out.failures);
    out
}

fn failed_reason(message: &str) -> String {
    if message.contains("ProgressDeadlineExceeded") {
        "ProgressDeadlineExceeded".into()
    } else {
        "Failed".into()
    }
}

/// One failure per (object, pod, container, reason): several pods of a Deployment with the
/// same problem say it once per pod, several problems of one pod stay apart.
pub(in crate::cluster) fn dedup_failures(failures: &mut Vec<Failure>) {
    let mut seen = BTreeSet::new();
    failures.retain(|f| {
        seen.insert((
            f.object.clone(),
            f.pod.clone(),
            f.container.clone(),
            f.reason.clone(),
        ))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_match_selector_and_revision() {
        let deploy = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        let new_pod = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "new"}}});
        let old_pod = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "old"}}});
        let other = json!({"metadata": {"labels": {"app": "db", "pod-template-hash": "new"}}});
        let sel = RevisionSelector::PodTemplateHash("new".into());
        assert!(pod_of_workload(&new_pod, &deploy, Some(&sel)));
        assert!(!pod_of_workload(&old_pod, &deploy, Some(&sel)));
        assert!(!pod_of_workload(&other, &deploy, Some(&sel)));
        assert!(pod_of_workload(&old_pod, &deploy, None));
        let sts_sel = RevisionSelector::ControllerRevisionHash("web-5".into());
        let sts_pod =
            json!({"metadata": {"labels": {"app": "web", "controller-revision-hash": "web-5"}}});
        assert!(pod_of_workload(&sts_pod, &deploy, Some(&sts_sel)));
        assert!(
            !pod_of_workload(&new_pod, &json!({"spec": {}}), None),
            "no selector matches nothing"
        );
    }

    #[test]
    fn ownership() {
        let rs = json!({"metadata": {"ownerReferences": [{"uid": "u1", "kind": "Deployment"}]}});
        assert!(owned_by(&rs, "u1"));
        assert!(!owned_by(&rs, "u2"));
        assert!(!owned_by(&json!({}), "u1"));
    }

    use crate::cluster::apply::AppliedObject;
    use crate::config::UnschedulablePolicy;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use kube::discovery::ApiResource;
    use std::time::Duration;

    fn applied(kind: &str, response: Value) -> AppliedObject {
        let resource = match kind {
            "Job" => ApiResource::erase::<Job>(&()),
            _ => ApiResource::erase::<Deployment>(&()),
        };
        AppliedObject {
            display: format!("{kind} shop/app"),
            resource,
            name: "app".into(),
            namespace: Some("shop".into()),
            response: Some(response.into()),
            note: None,
        }
    }

    fn tracking(a: &AppliedObject) -> Vec<Tracked<'_>> {
        vec![Tracked {
            applied: a,
            source: Some(0),
            done: false,
            last_message: String::new(),
        }]
    }

    /// A Job in progress ("active"), complete or failed.
    fn job(state: &str) -> Value {
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "app", "namespace": "shop", "uid": "job-uid"},
            "spec": {"selector": {"matchLabels": {"job": "app"}}}, "status": {"active": 1}});
        if state != "active" {
            job["status"]["conditions"] = json!([{"type": state, "status": "True"}]);
        }
        job
    }

    /// A Deployment at revision 2, rolling out (no replica updated yet).
    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "app", "namespace": "shop", "uid": "d-uid", "generation": 2,
                "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 0}})
    }

    fn replica_set(hash: &str, revision: &str) -> Value {
        json!({"metadata": {"name": format!("app-{hash}"), "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": hash},
            "annotations": {"deployment.kubernetes.io/revision": revision},
            "ownerReferences": [{"uid": "d-uid", "kind": "Deployment", "name": "app"}]}})
    }

    /// A pod with `labels` whose container waits for `reason` (after `restarts` restarts).
    fn waiting(name: &str, labels: Value, reason: &str, message: &str, restarts: i64) -> Value {
        json!({"metadata": {"name": name, "namespace": "shop", "labels": labels},
            "status": {"containerStatuses": [{"name": "app", "restartCount": restarts,
                "state": {"waiting": {"reason": reason, "message": message}}}]}})
    }

    fn unschedulable(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "shop", "labels": {"job": "app"}},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}})
    }

    struct Case {
        name: &'static str,
        object: Value,
        replica_sets: Vec<Value>,
        pods: Vec<Value>,
        policy: FailFastConfig,
        /// (status, failed pods (None: the object), warnings, next grace end)
        want: (Status, Vec<Option<&'static str>>, usize, Option<Instant>),
    }

    /// Evaluates each case once, at `start`, with a fresh clock.
    fn check(start: Instant, cases: Vec<Case>) {
        for case in cases {
            let kind = str_at(&case.object, &["kind"])
                .unwrap_or_default()
                .to_string();
            let a = applied(&kind, json!({}));
            let tracked = tracking(&a);
            let snapshot = Snapshot {
                objects: HashMap::from([(0, case.object)]),
                pods: HashMap::from([("shop".to_string(), case.pods)]),
                replica_sets: HashMap::from([("shop".to_string(), case.replica_sets)]),
            };
            let mut clock = ProblemClock::new(start);
            let found = evaluate(&tracked, &snapshot, &mut clock, &case.policy, start);
            let statuses: Vec<Status> = found.assessed.iter().map(|(_, a)| a.status).collect();
            let failed: Vec<Option<&str>> =
                found.failures.iter().map(|f| f.pod.as_deref()).collect();
            assert_eq!(
                (statuses, failed, found.warnings.len(), found.next_grace_end),
                (vec![case.want.0], case.want.1, case.want.2, case.want.3),
                "{}",
                case.name
            );
        }
    }

    fn crash(labels: &Value) -> Value {
        waiting("p1", labels.clone(), "CrashLoopBackOff", "back-off", 3)
    }

    #[test]
    fn evaluation_of_a_job_and_its_pods() {
        let start = Instant::now();
        let secs = |s| start + Duration::from_secs(s);
        let warn = FailFastConfig::default();
        let fail = FailFastConfig {
            unschedulable: UnschedulablePolicy::Fail,
            ..FailFastConfig::default()
        };
        let job_pod = json!({"job": "app"});
        let timeout = "rpc error: dial tcp: i/o timeout";
        let cases = vec![
            Case {
                name: "a completed Job is done",
                object: job("Complete"),
                replica_sets: vec![],
                pods: vec![crash(&job_pod)],
                policy: warn.clone(),
                want: (Status::Current, vec![], 0, None),
            },
            Case {
                name: "a failed Job fails as an object",
                object: job("Failed"),
                replica_sets: vec![],
                pods: vec![],
                policy: warn.clone(),
                want: (Status::Failed, vec![None], 0, None),
            },
            Case {
                name: "a running Job with a healthy pod is pending",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![json!({"metadata": {"name": "p1", "labels": {"job": "app"}}})],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 0, None),
            },
            Case {
                name: "a crash loop past the threshold fails, once per pod",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![crash(&job_pod), crash(&job_pod)],
                policy: warn.clone(),
                want: (Status::InProgress, vec![Some("p1")], 0, None),
            },
            Case {
                name: "a pod of another workload is not judged",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![crash(&json!({"job": "other"}))],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 0, None),
            },
            Case {
                name: "a pull error that may pass is tolerated until its grace ends",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![waiting("p1", job_pod.clone(), "ErrImagePull", timeout, 0)],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 0, Some(secs(60))),
            },
            Case {
                name: "unschedulable under warn: a warning",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![unschedulable("p1")],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 1, None),
            },
            Case {
                name: "unschedulable under fail: tolerated for its grace",
                object: job("active"),
                replica_sets: vec![],
                pods: vec![unschedulable("p1")],
                policy: fail.clone(),
                want: (Status::InProgress, vec![], 0, Some(secs(60))),
            },
        ];
        check(start, cases);
    }

    #[test]
    fn evaluation_of_a_deployment_judges_its_new_revision_only() {
        let start = Instant::now();
        let warn = FailFastConfig::default();
        let new = json!({"app": "web", "pod-template-hash": "new"});
        let old = json!({"app": "web", "pod-template-hash": "old"});
        let both_sets = vec![replica_set("old", "1"), replica_set("new", "2")];
        let cases = vec![
            Case {
                name: "a crashing pod of the new revision fails a Deployment",
                object: deployment(),
                replica_sets: both_sets.clone(),
                pods: vec![crash(&new)],
                policy: warn.clone(),
                want: (Status::InProgress, vec![Some("p1")], 0, None),
            },
            Case {
                name: "a crashing pod of the old revision never fails a new rollout",
                object: deployment(),
                replica_sets: both_sets.clone(),
                pods: vec![crash(&old)],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 0, None),
            },
            Case {
                name: "the new revision not known yet (no ReplicaSet): no pod is judged",
                object: deployment(),
                replica_sets: vec![replica_set("old", "1")],
                pods: vec![crash(&new), crash(&old)],
                policy: warn.clone(),
                want: (Status::InProgress, vec![], 0, None),
            },
        ];
        check(start, cases);
    }

    #[test]
    fn a_grace_fails_exactly_when_it_ends() {
        let start = Instant::now();
        let secs = |s| start + Duration::from_secs(s);
        let policy = FailFastConfig::default();
        let a = applied("Job", job("active"));
        let tracked = tracking(&a);
        let pull = waiting(
            "p1",
            json!({"job": "app"}),
            "ErrImagePull",
            "i/o timeout",
            0,
        );
        // Only the apply's response: the store has not seen the Job yet.
        let snapshot = Snapshot {
            objects: HashMap::new(),
            pods: HashMap::from([("shop".to_string(), vec![pull])]),
            replica_sets: HashMap::new(),
        };
        let mut clock = ProblemClock::new(start);
        // (now, failed, next grace end): the grace counts from the first pull error seen.
        let steps = [
            (secs(10), false, Some(secs(70))),
            (secs(69), false, Some(secs(70))),
            (secs(70), true, None),
        ];
        for (now, fails, grace_end) in steps {
            let found = evaluate(&tracked, &snapshot, &mut clock, &policy, now);
            assert_eq!(
                (!found.failures.is_empty(), found.next_grace_end),
                (fails, grace_end),
                "at {:?}",
                now - start
            );
        }
        // Nothing to judge without the object.
        let bare = AppliedObject {
            response: None,
            ..applied("Job", json!({}))
        };
        let found = evaluate(&tracking(&bare), &snapshot, &mut clock, &policy, secs(80));
        assert!(found.assessed.is_empty() && found.failures.is_empty());
    }
}
