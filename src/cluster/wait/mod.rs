//! Watch-driven wait for a target's rollout, with one deadline, in three parts:
//!
//! - the stores (`store`): kube-runtime watches feeding reflector stores, one per kind and
//!   namespace of the applied objects not already Current, and typed Pod and ReplicaSet
//!   watches of the namespaces with workloads (narrowed by the workloads' label selector);
//!   `default_backoff()`, so a dropped watch relists;
//! - the evaluation (`evaluate`): after each batch of events, a pure function of what the
//!   stores hold (the kstatus rules per object, the pod rules for the pods of a workload's
//!   new revision) says what is done, what fails, and when the next grace ends;
//! - the timer (`timer`): the deadline, and the instant the next grace ends, so that a
//!   transient problem fails exactly when its grace is over, never by polling.

mod details;
pub mod evaluate;
pub(in crate::cluster) mod store;
mod timer;
mod tracked;

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Client;
use kube::runtime::watcher;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::AppliedObject;
use crate::cluster::health::{self, Status};
use crate::config::FailFastConfig;
use crate::report::Failure;
use crate::report::progress::WaitProgress;

pub(in crate::cluster) use details::explain;
pub use details::{InvolvedRef, event_is_about, unready_reasons, warning_events};
pub(in crate::cluster) use evaluate::{Judged, ProblemClock, Snapshot, dedup_failures, evaluate};
pub use evaluate::{owned_by, pod_of_workload, revision_for_pods};
pub(in crate::cluster) use store::Stores;
pub(in crate::cluster) use timer::{Alarm, Timer};
pub(in crate::cluster) use tracked::{Tracked, is_workload};

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

/// The objects to follow: those healthy when applied are done at once.
fn track(applied: &[AppliedObject]) -> Vec<Tracked<'_>> {
    applied
        .iter()
        .map(|a| {
            let assessment = match &a.response {
                Some(response) => {
                    let response = response.value();
                    health::assess_as(&response, &a.resource.api_version, &a.resource.kind)
                }
                None => health::Assessment::new(Status::Current, "healthy when applied"),
            };
            Tracked {
                applied: a,
                source: None,
                done: assessment.status == Status::Current,
                last_message: assessment.message,
            }
        })
        .collect()
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
    let mut tracked = track(applied);
    let mut stores = Stores::open(client, &store::watches_for(&mut tracked));
    let mut clock = ProblemClock::new(Instant::now());
    let mut timer = Timer::new(options.deadline);
    let mut warnings: BTreeSet<String> = BTreeSet::new();
    let mut last_watch_error: Option<String> = None;
    let mut last_progress: Option<WaitProgress> = None;
    let mut watching = true;
    let result = loop {
        // Decide with what is known now.
        let snapshot = stores.snapshot(&tracked);
        let found = evaluate(
            &tracked,
            &snapshot,
            &mut clock,
            &options.fail_fast,
            Instant::now(),
        );
        for (i, assessment) in found.assessed {
            tracked[i].done = assessment.status == Status::Current;
            tracked[i].last_message = assessment.message;
        }
        warnings.extend(found.warnings);
        timer.set_grace_end(found.next_grace_end);
        let progress = progress(&tracked);
        if last_progress.as_ref() != Some(&progress) {
            on_progress(progress.clone());
            last_progress = Some(progress);
        }
        if !found.failures.is_empty() {
            let mut failures = found.failures;
            let lines = options.log_lines;
            details::explain(client, &mut failures, &tracked, &snapshot, lines, cancel).await;
            break Err(WaitFailure::Failed(failures));
        }
        if tracked.iter().all(|t| t.done) {
            break Ok(());
        }
        // Not held while waiting: the stores are the memory of the wait.
        drop(snapshot);
        tokio::select! {
            _ = cancel.cancelled() => break Err(WaitFailure::Cancelled),
            alarm = timer.ring() => if alarm == Alarm::Deadline {
                let snapshot = stores.snapshot(&tracked);
                let error = last_watch_error.as_deref();
                let failures =
                    details::timeout_failures(client, &tracked, &snapshot, (options.timeout, options.log_lines), error, cancel)
                        .await;
                break Err(WaitFailure::Timeout(failures));
            },
            batch = stores.next_batch(), if watching => match batch {
                Some(batch) => {
                    if let Some(e) = batch.errors.last() {
                        last_watch_error = Some(watch_error_text(e, &options.server));
                    }
                }
                // Every watch ended (should not happen with backoff): the deadline decides.
                None => watching = false,
            },
        }
    };
    WaitOutcome {
        result,
        warnings: warnings.into_iter().collect(),
    }
}

/// How far the wait is: objects done, and the first one still in progress with its status.
fn progress(tracked: &[Tracked<'_>]) -> WaitProgress {
    WaitProgress {
        ready: tracked.iter().filter(|t| t.done).count(),
        total: tracked.len(),
        waiting_for: tracked.iter().find(|t| !t.done).map(|t| {
            if t.last_message.is_empty() {
                t.applied.display.clone()
            } else {
                format!("{}: {}", t.applied.display, t.last_message)
            }
        }),
    }
}

/// A watcher's error said as rollguard says a connection problem (one table of reasons, in
/// cluster/connect.rs), not as kube's chain, whose wording depends on which call of the watch
/// failed first.
pub(in crate::cluster) fn watch_error_text(e: &watcher::Error, server: &str) -> String {
    match e {
        watcher::Error::InitialListFailed(inner)
        | watcher::Error::WatchStartFailed(inner)
        | watcher::Error::WatchFailed(inner) => {
            crate::cluster::connect::describe_error(inner, server).message
        }
        other => other.to_string(),
    }
}
