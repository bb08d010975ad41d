//! The last log lines of the containers a target failed on, read once it failed: what
//! `kubectl logs --previous` would show, so that a report says why a container crashed.
//!
//! Which instances to read is decided by pure functions of the pods (`instances_to_read`,
//! `wants_logs`); the reads go through the same client and retry as every other cluster
//! call, with a short deadline and a byte cap, so a slow or huge log never holds a report up.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, LogParams};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::health::str_at;
use crate::cluster::retry::{RetryBudget, RetryError, with_retry};
use crate::report::{ContainerLog, Failure};

/// Pods whose logs are read per target, at most.
pub const MAX_PODS: usize = 3;
/// Bytes read per container instance, at most.
pub const MAX_BYTES: i64 = 16 * 1024;
/// How long reading all of a target's logs may take.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Failure reasons where a container ran and its log can say why it failed.
const REASONS_WITH_LOGS: &[&str] = &[
    "CrashLoopBackOff",
    "OOMKilled",
    "Error",
    "Exited",
    "Restarted",
    "Timeout",
    "ProgressDeadlineExceeded",
];

/// True when a failure with this reason is about a container that ran.
pub fn wants_logs(reason: &str) -> bool {
    REASONS_WITH_LOGS.contains(&reason)
}

/// One container instance to read: `previous` is the one that exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub container: String,
    pub previous: bool,
}

/// The instances of `pod` worth reading: of `container` when the failure names one, else of
/// every container that is not ready. The previous instance when there is one (it exited:
/// its end says why), and the current one when it runs or ran (a container that is waiting
/// in a back-off has no current instance of its own: the kubelet would serve the previous).
pub fn instances_to_read(pod: &Value, container: Option<&str>) -> Vec<Instance> {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = Vec::new();
    for cs in statuses {
        let Some(name) = str_at(cs, &["name"]) else {
            continue;
        };
        let chosen = match container {
            Some(c) => c == name,
            None => cs["ready"].as_bool() != Some(true),
        };
        if !chosen {
            continue;
        }
        if cs["lastState"]["terminated"].is_object() {
            out.push(Instance {
                container: name.to_string(),
                previous: true,
            });
        }
        let state = &cs["state"];
        if state["running"].is_object() || state["terminated"].is_object() {
            out.push(Instance {
                container: name.to_string(),
                previous: false,
            });
        }
    }
    out
}

/// The last `keep` lines of a log text (a cut first line, from the byte cap, is kept: it is
/// still the text the container wrote).
pub fn last_lines(text: &str, keep: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(keep);
    lines[skip..].iter().map(|l| l.to_string()).collect()
}

/// One line saying why a log could not be read.
fn why_unreadable(err: RetryError, what: &str) -> String {
    match err {
        RetryError::Api(kube::Error::Api(status)) => {
            format!("cannot read the log of {what}: {}", status.message)
        }
        RetryError::Api(e) => format!("cannot read the log of {what}: {e}"),
        RetryError::NotSent => format!(
            "cannot read the log of {what}: no time left of the {}s for logs",
            DEADLINE.as_secs()
        ),
        RetryError::Cancelled => format!("cannot read the log of {what}: cancelled"),
    }
}

/// Reads the last `lines` lines of each instance of `pods` (namespace, pod) into
/// `failure.logs`: `candidates` pairs a failure's index with a pod it is about and the
/// container it names. At most [`MAX_PODS`] pods, within [`DEADLINE`] for all of them.
pub async fn read_logs(
    client: &Client,
    failures: &mut [Failure],
    candidates: &[(usize, String, Value)],
    lines: u32,
    cancel: &CancellationToken,
) {
    if lines == 0 {
        return;
    }
    let deadline = Instant::now() + DEADLINE;
    let budget = RetryBudget {
        max_attempts: Some(2),
        attempt_timeout: Duration::from_secs(3),
        ..RetryBudget::until(deadline)
    };
    let mut pods_read: Vec<String> = Vec::new();
    for (index, namespace, pod) in candidates {
        let Some(failure) = failures.get_mut(*index) else {
            continue;
        };
        let Some(pod_name) = str_at(pod, &["metadata", "name"]) else {
            continue;
        };
        if !pods_read.iter().any(|p| p == pod_name) {
            if pods_read.len() >= MAX_PODS {
                continue;
            }
            pods_read.push(pod_name.to_string());
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        for instance in instances_to_read(pod, failure.container.as_deref()) {
            let params = LogParams {
                container: Some(instance.container.clone()),
                previous: instance.previous,
                tail_lines: Some(i64::from(lines)),
                limit_bytes: Some(MAX_BYTES),
                ..LogParams::default()
            };
            let read = tokio::time::timeout_at(
                deadline,
                with_retry("read logs", &budget, cancel, || api.logs(pod_name, &params)),
            )
            .await;
            let what = format!(
                "pod {pod_name} container {}{}",
                instance.container,
                if instance.previous { " (previous)" } else { "" }
            );
            let mut log = ContainerLog {
                pod: pod_name.to_string(),
                container: instance.container.clone(),
                previous: instance.previous,
                ..ContainerLog::default()
            };
            match read {
                Ok(Ok(text)) => {
                    log.lines = last_lines(&text, lines as usize)
                        .iter()
                        .map(|l| crate::report::redact::scrub(l))
                        .collect();
                    // The current instance is shown only when it has something to say.
                    if log.lines.is_empty() && !instance.previous {
                        continue;
                    }
                }
                Ok(Err(e)) => log.error = Some(why_unreadable(e, &what)),
                Err(_) => {
                    log.error = Some(format!(
                        "cannot read the log of {what}: no answer within {}s",
                        DEADLINE.as_secs()
                    ))
                }
            }
            failure.logs.push(log);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(statuses: Value) -> Value {
        json!({"metadata": {"name": "web-1"}, "status": {"containerStatuses": statuses}})
    }

    fn inst(container: &str, previous: bool) -> Instance {
        Instance {
            container: container.into(),
            previous,
        }
    }

    #[test]
    fn instances_worth_reading() {
        let backing_off = json!({"name": "web", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1}}});
        let rerunning = json!({"name": "web", "ready": false, "restartCount": 1,
            "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1}}});
        let never_ready = json!({"name": "web", "ready": false, "restartCount": 0,
            "state": {"running": {}}, "lastState": {}});
        let creating = json!({"name": "web", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}});
        let sidecar = json!({"name": "proxy", "ready": true, "restartCount": 0,
            "state": {"running": {}}, "lastState": {}});
        let cases: Vec<(Value, Option<&str>, Vec<Instance>)> = vec![
            (json!([backing_off]), Some("web"), vec![inst("web", true)]),
            (
                json!([rerunning]),
                Some("web"),
                vec![inst("web", true), inst("web", false)],
            ),
            (
                json!([never_ready.clone(), sidecar.clone()]),
                None,
                vec![inst("web", false)],
            ),
            (
                json!([sidecar.clone()]),
                Some("proxy"),
                vec![inst("proxy", false)],
            ),
            (json!([creating, sidecar]), None, vec![]),
            (json!([never_ready]), Some("other"), vec![]),
            (json!("odd"), None, vec![]),
        ];
        for (statuses, container, want) in cases {
            assert_eq!(
                instances_to_read(&pod(statuses.clone()), container),
                want,
                "{statuses} {container:?}"
            );
        }
    }

    #[test]
    fn the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), vec!["b", "c"]);
        assert_eq!(last_lines("a\nb", 5), vec!["a", "b"]);
        assert_eq!(last_lines("", 5), Vec::<String>::new());
        assert_eq!(last_lines("a\r\nb\r\n", 1), vec!["b"]);
    }

    #[test]
    fn reasons_with_logs() {
        for (reason, want) in [
            ("CrashLoopBackOff", true),
            ("OOMKilled", true),
            ("Timeout", true),
            ("ImagePullBackOff", false),
            ("Unschedulable", false),
            ("CreateContainerConfigError", false),
        ] {
            assert_eq!(wants_logs(reason), want, "{reason}");
        }
    }
}
