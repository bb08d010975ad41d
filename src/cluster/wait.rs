//! Watch-driven wait for a target's rollout, with one deadline.
//!
//! Every applied object that is not already Current is watched (one kube-runtime watcher per
//! kind and namespace, with `default_backoff()` so a dropped watch relists), and so are the
//! ReplicaSets and Pods of namespaces with workloads. After each event the pure rules decide:
//! `health::assess` per object, and `health::pod_problems` for the pods of the workload's
//! NEW revision only. Fatal pod problems fail at once; transient ones (Unschedulable, pull
//! errors that may pass) fail when they persist past their grace, checked by a timer at the
//! exact instant the grace ends, never by polling. Pull errors are judged by what they say
//! (`health::pulls`), their grace counted per container from the first pull error this
//! watcher saw, on its monotonic clock (never a node's timestamps).

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::time::Duration;

use futures::stream::SelectAll;
use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::AppliedObject;
use crate::cluster::health::pulls::{self, PullVerdict, PullWatch};
use crate::cluster::health::{self, RevisionSelector, Severity, Status, str_at};
use crate::cluster::retry::{RetryBudget, with_retry};
use crate::config::FailFastConfig;
use crate::report::Failure;
use crate::report::progress::WaitProgress;

/// What waiting needs besides the objects.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    pub deadline: Instant,
    /// The configured timeout, for messages.
    pub timeout: Duration,
    pub fail_fast: FailFastConfig,
    /// The API server's URL, for messages about the watches.
    pub server: String,
    /// Last log lines read from each failing container (`wait.log_lines`; 0: none).
    pub log_lines: u32,
}

/// Why a wait did not end with everything Current.
#[derive(Debug)]
pub enum WaitFailure {
    /// An object failed or a pod of a new revision cannot start.
    Failed(Vec<Failure>),
    /// The deadline passed; one failure per object still in progress.
    Timeout(Vec<Failure>),
    Cancelled,
}

#[derive(Debug)]
pub struct WaitOutcome {
    pub result: Result<(), WaitFailure>,
    /// Non-fatal problems seen on the way (e.g. unschedulable pods under the warn policy).
    pub warnings: Vec<String>,
}

const WORKLOAD_KINDS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
];

pub(super) fn is_workload(resource: &ApiResource) -> bool {
    (resource.group == "apps" || resource.group == "batch")
        && WORKLOAD_KINDS.contains(&resource.kind.as_str())
}

/// True when `obj` has an owner reference with this uid.
pub fn owned_by(obj: &Value, owner_uid: &str) -> bool {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
        })
}

/// True when the pod carries every label of the workload's `spec.selector.matchLabels` and,
/// when given, the label of the new revision.
pub fn pod_of_workload(pod: &Value, workload: &Value, revision: Option<&RevisionSelector>) -> bool {
    let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
    let has = |k: &str, v: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v);
    let Some(match_labels) = workload
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
    else {
        return false;
    };
    if match_labels.is_empty()
        || !match_labels
            .iter()
            .all(|(k, v)| v.as_str().is_some_and(|v| has(k, v)))
    {
        return false;
    }
    revision.is_none_or(|r| health::pod_matches(pod, r))
}

/// The revision whose pods count for fail-fast, or None when it is not known yet (then no
/// pod is judged: old pods must never fail a new rollout). Jobs and bare ReplicaSets have
/// one revision: all their pods count.
pub fn revision_for_pods(
    kind: &str,
    workload: &Value,
    owned: &[Value],
) -> Option<Option<RevisionSelector>> {
    match kind {
        "Job" | "ReplicaSet" => Some(None),
        _ => health::new_revision_selector(workload, owned).map(Some),
    }
}

/// A watched stream: which source it is and its events.
pub(super) type SourceStream = Pin<
    Box<dyn Stream<Item = (usize, Result<watcher::Event<DynamicObject>, watcher::Error>)> + Send>,
>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SourceKind {
    Tracked,
    ReplicaSets,
    Pods,
}

pub(super) struct Source {
    pub(super) kind: SourceKind,
    pub(super) namespace: Option<String>,
    pub(super) resource: ApiResource,
}

/// Objects seen by the watches, per source, by (namespace, name).
#[derive(Default)]
pub(super) struct Store {
    objects: HashMap<usize, HashMap<(String, String), Value>>,
    init: HashMap<usize, HashMap<(String, String), Value>>,
}

fn key_of(v: &Value) -> (String, String) {
    (
        str_at(v, &["metadata", "namespace"])
            .unwrap_or("")
            .to_string(),
        str_at(v, &["metadata", "name"]).unwrap_or("").to_string(),
    )
}

impl Store {
    /// Applies a watch event. Items of a LIST (the watcher's initial list) carry no
    /// apiVersion/kind: they are set from the watched resource, for the health rules.
    pub(super) fn apply(
        &mut self,
        source: usize,
        resource: &ApiResource,
        event: watcher::Event<DynamicObject>,
    ) {
        let to_value = |mut o: DynamicObject| {
            // Never read here, and most of an object's size.
            o.metadata.managed_fields = None;
            let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                // Pod problems are read from metadata and status; the spec (containers,
                // volumes, tolerations) is most of a pod: only each container's name, image
                // and memory limit are kept, for the exit details.
                if resource.kind == "Pod"
                    && let Some(spec) = obj.remove("spec")
                {
                    obj.insert("spec".into(), slim_pod_spec(&spec));
                }
                obj.entry("apiVersion")
                    .or_insert_with(|| Value::String(resource.api_version.clone()));
                obj.entry("kind")
                    .or_insert_with(|| Value::String(resource.kind.clone()));
            }
            v
        };
        match event {
            watcher::Event::Apply(o) => {
                let v = to_value(o);
                self.objects
                    .entry(source)
                    .or_default()
                    .insert(key_of(&v), v);
            }
            watcher::Event::Delete(o) => {
                let v = to_value(o);
                self.objects.entry(source).or_default().remove(&key_of(&v));
            }
            watcher::Event::Init => {
                self.init.insert(source, HashMap::new());
            }
            watcher::Event::InitApply(o) => {
                let v = to_value(o);
                self.init.entry(source).or_default().insert(key_of(&v), v);
            }
            watcher::Event::InitDone => {
                let listed = self.init.remove(&source).unwrap_or_default();
                self.objects.insert(source, listed);
            }
        }
    }

    pub(super) fn get(&self, source: usize, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&source)?
            .get(&(namespace.to_string(), name.to_string()))
    }

    pub(super) fn all(&self, source: usize) -> impl Iterator<Item = &Value> {
        self.objects
            .get(&source)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// True once the source's first list is in.
    pub(super) fn listed(&self, source: usize) -> bool {
        self.objects.contains_key(&source)
    }

    /// The pods of `workload`'s new revision seen by the watches (`sources`: its namespace's
    /// ReplicaSet and Pod sources); none while the revision is not known yet.
    pub(super) fn new_revision_pods(
        &self,
        kind: &str,
        workload: &Value,
        sources: (Option<usize>, Option<usize>),
    ) -> Vec<&Value> {
        let (rs_source, pod_source) = sources;
        let uid = str_at(workload, &["metadata", "uid"]).unwrap_or("");
        let owned: Vec<Value> = rs_source
            .map(|s| {
                self.all(s)
                    .filter(|rs| !uid.is_empty() && owned_by(rs, uid))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let (Some(revision), Some(pods)) = (revision_for_pods(kind, workload, &owned), pod_source)
        else {
            return Vec::new();
        };
        self.all(pods)
            .filter(|p| pod_of_workload(p, workload, revision.as_ref()))
            .collect()
    }
}

/// One kube-runtime watcher per source (with `default_backoff()`, so a dropped watch
/// relists), merged into one stream of (source index, event).
pub(super) fn open_watches(client: &Client, sources: &[Source]) -> SelectAll<SourceStream> {
    let streams: Vec<SourceStream> = sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let api: Api<DynamicObject> = match &s.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &s.resource),
                None => Api::all_with(client.clone(), &s.resource),
            };
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |e| (i, e));
            Box::pin(stream) as SourceStream
        })
        .collect();
    futures::stream::select_all(streams)
}

pub(super) struct Tracked<'a> {
    pub(super) applied: &'a AppliedObject,
    pub(super) source: Option<usize>,
    pub(super) done: bool,
    pub(super) last_message: String,
}

/// Waits until every applied object is Current, something fails, the deadline passes or
/// `cancel` fires.
pub async fn wait_for_rollout(
    client: &Client,
    applied: &[AppliedObject],
    options: &WaitOptions,
    cancel: &CancellationToken,
    on_progress: &(dyn Fn(WaitProgress) + Sync),
) -> WaitOutcome {
    let mut sources: Vec<Source> = Vec::new();
    let mut tracked: Vec<Tracked> = Vec::new();
    for a in applied {
        let assessment = match &a.response {
            Some(response) => {
                health::assess_as(response, &a.resource.api_version, &a.resource.kind)
            }
            None => health::Assessment::new(Status::Current, "healthy when applied"),
        };
        let done = assessment.status == Status::Current;
        let source = if done {
            None
        } else {
            let found = sources.iter().position(|s| {
                s.kind == SourceKind::Tracked
                    && s.namespace == a.namespace
                    && s.resource == a.resource
            });
            Some(found.unwrap_or_else(|| {
                sources.push(Source {
                    kind: SourceKind::Tracked,
                    namespace: a.namespace.clone(),
                    resource: a.resource.clone(),
                });
                sources.len() - 1
            }))
        };
        tracked.push(Tracked {
            applied: a,
            source,
            done,
            last_message: assessment.message,
        });
    }
    // Pods (and ReplicaSets, for Deployments) of namespaces with pending workloads.
    let workload_namespaces: BTreeSet<(String, bool)> = tracked
        .iter()
        .filter(|t| !t.done && is_workload(&t.applied.resource))
        .map(|t| {
            (
                t.applied.namespace.clone().unwrap_or_default(),
                t.applied.resource.kind == "Deployment",
            )
        })
        .collect();
    let mut pod_sources: HashMap<String, usize> = HashMap::new();
    let mut rs_sources: HashMap<String, usize> = HashMap::new();
    for (ns, deployment) in workload_namespaces {
        if !pod_sources.contains_key(&ns) {
            sources.push(Source {
                kind: SourceKind::Pods,
                namespace: Some(ns.clone()),
                resource: ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            });
            pod_sources.insert(ns.clone(), sources.len() - 1);
        }
        if deployment && !rs_sources.contains_key(&ns) {
            sources.push(Source {
                kind: SourceKind::ReplicaSets,
                namespace: Some(ns.clone()),
                resource: ApiResource::erase::<k8s_openapi::api::apps::v1::ReplicaSet>(&()),
            });
            rs_sources.insert(ns, sources.len() - 1);
        }
    }

    let mut events = open_watches(client, &sources);
    let mut store = Store::default();
    let mut problem_clock = ProblemClock::new(Instant::now());
    let mut warnings: BTreeSet<String> = BTreeSet::new();
    let mut last_watch_error: Option<String> = None;
    let mut last_progress: Option<WaitProgress> = None;

    loop {
        // Decide with what is known now.
        let now = Instant::now();
        let mut failures: Vec<Failure> = Vec::new();
        let mut next_escalation: Option<Instant> = None;
        for t in tracked.iter_mut().filter(|t| !t.done) {
            let a = t.applied;
            let ns = a.namespace.clone().unwrap_or_default();
            let Some(current) = t
                .source
                .and_then(|s| store.get(s, &ns, &a.name))
                .or(a.response.as_ref())
            else {
                // Only objects healthy when applied have neither, and those are done.
                continue;
            };
            let assessment = health::assess_as(current, &a.resource.api_version, &a.resource.kind);
            t.last_message = assessment.message.clone();
            match assessment.status {
                Status::Current => {
                    t.done = true;
                    continue;
                }
                Status::Failed => failures.push(Failure {
                    object: a.display.clone(),
                    pod: None,
                    container: None,
                    reason: failed_reason(&assessment.message),
                    message: assessment.message.clone(),
                    events: Vec::new(),
                    ..Default::default()
                }),
                _ => {}
            }
            if !is_workload(&a.resource) {
                continue;
            }
            let sources = (rs_sources.get(&ns).copied(), pod_sources.get(&ns).copied());
            for pod in store.new_revision_pods(&a.resource.kind, current, sources) {
                for problem in health::pod_problems(pod, &options.fail_fast) {
                    match problem_clock.judge(&a.display, &problem, &options.fail_fast, now) {
                        Judged::Fails(failure) => failures.push(failure),
                        Judged::Warns(line) => {
                            warnings.insert(line);
                        }
                        Judged::Tolerated(Some(due)) => {
                            next_escalation =
                                Some(next_escalation.map_or(due, |n: Instant| n.min(due)));
                        }
                        Judged::Tolerated(None) => {}
                    }
                }
            }
        }
        let total = tracked.len();
        let ready = tracked.iter().filter(|t| t.done).count();
        let progress = WaitProgress {
            ready,
            total,
            waiting_for: tracked.iter().find(|t| !t.done).map(|t| {
                if t.last_message.is_empty() {
                    t.applied.display.clone()
                } else {
                    format!("{}: {}", t.applied.display, t.last_message)
                }
            }),
        };
        if last_progress.as_ref() != Some(&progress) {
            on_progress(progress.clone());
            last_progress = Some(progress);
        }
        if !failures.is_empty() {
            dedup_failures(&mut failures);
            add_events(
                client,
                &mut failures,
                &tracked,
                (&store, &pod_sources, &rs_sources),
                cancel,
            )
            .await;
            add_logs(
                client,
                &mut failures,
                &tracked,
                (&store, &pod_sources, &rs_sources),
                options.log_lines,
                cancel,
            )
            .await;
            return WaitOutcome {
                result: Err(WaitFailure::Failed(failures)),
                warnings: warnings.into_iter().collect(),
            };
        }
        if ready == total {
            return WaitOutcome {
                result: Ok(()),
                warnings: warnings.into_iter().collect(),
            };
        }

        let escalation = async {
            match next_escalation {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => {
                return WaitOutcome { result: Err(WaitFailure::Cancelled), warnings: warnings.into_iter().collect() };
            }
            _ = tokio::time::sleep_until(options.deadline) => {
                let mut failures: Vec<Failure> = tracked
                    .iter()
                    .filter(|t| !t.done)
                    .map(|t| Failure {
                        object: t.applied.display.clone(),
                        pod: None,
                        container: None,
                        reason: "Timeout".into(),
                        message: timeout_message(options.timeout, &t.last_message, last_watch_error.as_deref()),
                        events: Vec::new(),
                        ..Default::default()
                    })
                    .collect();
                add_events(
                client,
                &mut failures,
                &tracked,
                (&store, &pod_sources, &rs_sources),
                cancel,
            )
            .await;
                // With a watch that lost the cluster, what is known of the pods may be stale
                // and their logs cannot be read: the watch error says it all.
                let lines = if last_watch_error.is_some() { 0 } else { options.log_lines };
                for f in failures.iter_mut().filter(|_| last_watch_error.is_none()) {
                    let Some(t) = tracked.iter().find(|t| t.applied.display == f.object) else {
                        continue;
                    };
                    let pods = unready_pods(t, &store, &pod_sources, &rs_sources);
                    let reasons = unready_reasons(&pods, &f.events);
                    if !reasons.is_empty() {
                        f.message.push_str(&format!("; not ready: {}", reasons.join("; ")));
                    }
                }
                add_logs(
                    client,
                    &mut failures,
                    &tracked,
                    (&store, &pod_sources, &rs_sources),
                    lines,
                    cancel,
                )
                .await;
                return WaitOutcome { result: Err(WaitFailure::Timeout(failures)), warnings: warnings.into_iter().collect() };
            }
            _ = escalation => {}
            next = events.next() => match next {
                Some((source, Ok(event))) => {
                    store.apply(source, &sources[source].resource, event);
                    // Take every event already queued before deciding again.
                    while let Some(Some((source, item))) = events.now_or_never_ready() {
                        match item {
                            Ok(event) => store.apply(source, &sources[source].resource, event),
                            Err(e) => last_watch_error = Some(watch_error_text(&e, &options.server)),
                        }
                    }
                }
                Some((source, Err(e))) => {
                    tracing::debug!(source, error = %e, "watch error; the watcher retries with backoff");
                    last_watch_error = Some(watch_error_text(&e, &options.server));
                }
                None => {
                    // Every watch ended (should not happen with backoff): wait for the deadline.
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep_until(options.deadline) => {}
                    }
                }
            }
        }
    }
}

/// What a pod problem means now, judged as the wait judges it.
// Short-lived (one per decision, consumed at once): boxing the failure would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Judged {
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
pub(super) struct ProblemClock {
    started: Instant,
    transient_since: HashMap<(String, Option<String>, String), Instant>,
    pulls: HashMap<(String, Option<String>), PullWatch>,
}

impl ProblemClock {
    pub(super) fn new(started: Instant) -> Self {
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
    pub(super) fn judge(
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

/// Polls a stream once without waiting: `Some(item)` when one is ready now.
pub(super) trait NowOrNever: Stream + Unpin {
    fn now_or_never_ready(&mut self) -> Option<Option<Self::Item>> {
        futures::FutureExt::now_or_never(self.next())
    }
}
impl<S: Stream + Unpin> NowOrNever for S {}

fn failed_reason(message: &str) -> String {
    if message.contains("ProgressDeadlineExceeded") {
        "ProgressDeadlineExceeded".into()
    } else {
        "Failed".into()
    }
}

/// A watcher's error said as rollguard says a connection problem (one table of reasons, in
/// cluster/connect.rs), not as kube's chain, whose wording depends on which call of the watch
/// failed first.
pub(super) fn watch_error_text(e: &watcher::Error, server: &str) -> String {
    match e {
        watcher::Error::InitialListFailed(inner)
        | watcher::Error::WatchStartFailed(inner)
        | watcher::Error::WatchFailed(inner) => {
            crate::cluster::connect::describe_error(inner, server).message
        }
        other => other.to_string(),
    }
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

/// One failure per (object, pod, container, reason): several pods of a Deployment with the
/// same problem say it once per pod, several problems of one pod stay apart.
pub(super) fn dedup_failures(failures: &mut Vec<Failure>) {
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
fn involved_refs(
    t: &Tracked<'_>,
    f: &Failure,
    store: &Store,
    pod_sources: &HashMap<String, usize>,
    rs_sources: &HashMap<String, usize>,
) -> Vec<InvolvedRef> {
    let a = t.applied;
    let ns = a.namespace.clone().unwrap_or_default();
    let current = t
        .source
        .and_then(|s| store.get(s, &ns, &a.name))
        .or(a.response.as_ref());
    let uid = current
        .and_then(|c| str_at(c, &["metadata", "uid"]))
        .unwrap_or_default()
        .to_string();
    let mut refs = vec![InvolvedRef {
        kind: a.resource.kind.clone(),
        namespace: ns.clone(),
        name: a.name.clone(),
        uid: uid.clone(),
    }];
    if let Some(&rs) = rs_sources.get(&ns)
        && !uid.is_empty()
    {
        refs.extend(
            store
                .all(rs)
                .filter(|r| owned_by(r, &uid))
                .filter_map(|r| InvolvedRef::of("ReplicaSet", &ns, r)),
        );
    }
    if let Some(pod) = &f.pod {
        let known = pod_sources
            .get(&ns)
            .and_then(|&s| store.get(s, &ns, pod))
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
pub(super) async fn add_events(
    client: &Client,
    failures: &mut [Failure],
    tracked: &[Tracked<'_>],
    related: (&Store, &HashMap<String, usize>, &HashMap<String, usize>),
    cancel: &CancellationToken,
) {
    let (store, pod_sources, rs_sources) = related;
    let budget = RetryBudget {
        max_attempts: Some(2),
        attempt_timeout: Duration::from_secs(3),
        ..RetryBudget::until(Instant::now() + Duration::from_secs(5))
    };
    for f in failures.iter_mut() {
        let Some(t) = tracked.iter().find(|t| t.applied.display == f.object) else {
            continue;
        };
        let refs = involved_refs(t, f, store, pod_sources, rs_sources);
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

/// The part of a pod's spec the exit details read: containers' name, image, memory limit.
fn slim_pod_spec(spec: &Value) -> Value {
    let slim = |key: &str| -> Value {
        let list = spec[key].as_array().map(Vec::as_slice).unwrap_or_default();
        list.iter()
            .map(|c| {
                let mut kept = serde_json::json!({"name": c["name"], "image": c["image"]});
                let memory = &c["resources"]["limits"]["memory"];
                if !memory.is_null() {
                    kept["resources"] = serde_json::json!({"limits": {"memory": memory}});
                }
                kept
            })
            .collect()
    };
    serde_json::json!({"containers": slim("containers"), "initContainers": slim("initContainers")})
}

/// The pods of `t`'s new revision that are not Ready (none when `t` has no pods).
fn unready_pods<'s>(
    t: &Tracked<'_>,
    store: &'s Store,
    pod_sources: &HashMap<String, usize>,
    rs_sources: &HashMap<String, usize>,
) -> Vec<&'s Value> {
    let a = t.applied;
    let ns = a.namespace.clone().unwrap_or_default();
    let Some(pod_source) = pod_sources.get(&ns).copied() else {
        return Vec::new();
    };
    let Some(current) = t.source.and_then(|s| store.get(s, &ns, &a.name)) else {
        return Vec::new();
    };
    let sources = (rs_sources.get(&ns).copied(), Some(pod_source));
    store
        .new_revision_pods(&a.resource.kind, current, sources)
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

/// Adds the last log lines of the containers the failures are about (see `kube::logs`): the
/// pod a failure names, or for a failure of the whole object (a timeout) its new revision's
/// pods that are not ready.
pub(super) async fn add_logs(
    client: &Client,
    failures: &mut [Failure],
    tracked: &[Tracked<'_>],
    related: (&Store, &HashMap<String, usize>, &HashMap<String, usize>),
    lines: u32,
    cancel: &CancellationToken,
) {
    if lines == 0 {
        return;
    }
    let (store, pod_sources, rs_sources) = related;
    let mut candidates: Vec<(usize, String, Value)> = Vec::new();
    for (index, f) in failures.iter().enumerate() {
        if !crate::cluster::logs::wants_logs(&f.reason) {
            continue;
        }
        let Some(t) = tracked.iter().find(|t| t.applied.display == f.object) else {
            continue;
        };
        let a = t.applied;
        let ns = a.namespace.clone().unwrap_or_default();
        let Some(pod_source) = pod_sources.get(&ns).copied() else {
            continue;
        };
        let pods: Vec<&Value> = match &f.pod {
            Some(pod) => store.get(pod_source, &ns, pod).into_iter().collect(),
            None => unready_pods(t, store, pod_sources, rs_sources),
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
    fn a_slim_pod_spec_keeps_what_exit_details_read() {
        let spec = json!({"containers": [{"name": "web", "image": "x:1", "args": ["a"],
            "resources": {"limits": {"memory": "128Mi", "cpu": "1"}}},
            {"name": "side", "image": "y:1"}], "volumes": [{"name": "v"}]});
        assert_eq!(
            slim_pod_spec(&spec),
            json!({"containers": [
                {"name": "web", "image": "x:1", "resources": {"limits": {"memory": "128Mi"}}},
                {"name": "side", "image": "y:1"}], "initContainers": []})
        );
        assert_eq!(
            slim_pod_spec(&json!("odd")),
            json!({"containers": [], "initContainers": []})
        );
    }

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
    fn ownership() {
        let rs = json!({"metadata": {"ownerReferences": [{"uid": "u1", "kind": "Deployment"}]}});
        assert!(owned_by(&rs, "u1"));
        assert!(!owned_by(&rs, "u2"));
        assert!(!owned_by(&json!({}), "u1"));
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
