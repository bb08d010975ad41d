//! core/v1 Events as the kubelet and the controllers record them.

use serde_json::{Value, json};

use super::meta;

/// An event to record: who reports it, about what, and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    pub kind: &'static str,
    pub reason: String,
    pub message: String,
    /// `spec.containers{name}` for container events.
    pub field_path: Option<String>,
    /// `kubelet`, `deployment-controller`, ...
    pub component: &'static str,
    /// The node, for kubelet events.
    pub host: Option<String>,
}

impl EventSpec {
    pub fn new(kind: &'static str, reason: &str, message: String, component: &'static str) -> Self {
        Self {
            kind,
            reason: reason.to_string(),
            message,
            field_path: None,
            component,
            host: None,
        }
    }
}

/// The Event object for `spec` about `involved` (an object with apiVersion/kind/metadata),
/// made at `now`. Its name is `<involvedObject.name>.<now in UnixNano, as hex>`, as a real
/// event recorder names it; a repeat keeps the name (the caller updates `count` and
/// `lastTimestamp`), so the caller must not make two Events in one nanosecond.
pub fn event_object(
    involved: &Value,
    spec: &EventSpec,
    now: jiff::Timestamp,
    count: i64,
    first: &str,
) -> Value {
    let mut involved_ref = json!({
        "kind": involved["kind"],
        "namespace": meta::namespace(involved),
        "name": meta::name(involved),
        "uid": meta::uid(involved),
        "apiVersion": involved["apiVersion"],
        "resourceVersion": involved["metadata"]["resourceVersion"],
    });
    if let Some(path) = &spec.field_path {
        involved_ref["fieldPath"] = json!(path);
    }
    let mut source = json!({"component": spec.component});
    if let Some(host) = &spec.host {
        source["host"] = json!(host);
    }
    let now_text = crate::model::clock::format_time(now);
    // eventTime and an empty reportingInstance are left out, as the controllers' event
    // recorder sends them; the server shows them (null and "") and nobody owns them.
    let mut event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{:x}", meta::name(involved), now.as_nanosecond()),
            "namespace": meta::namespace(involved),
        },
        "involvedObject": involved_ref,
        "reason": spec.reason,
        "message": spec.message,
        "source": source,
        "firstTimestamp": first,
        "lastTimestamp": now_text,
        "count": count,
        "type": spec.kind,
        "reportingComponent": spec.component,
    });
    if let Some(host) = &spec.host {
        event["reportingInstance"] = json!(host);
    }
    event
}

fn waiting_reason(container: &Value) -> Option<&str> {
    container["state"]["waiting"]["reason"].as_str()
}

/// The kubelet's events for a pod whose status went from `old` to `new`: Scheduled, Pulling,
/// Pulled, Created, Started, Failed (ErrImagePull, CreateContainerConfigError), BackOff.
pub fn kubelet_events(pod: &Value, old: &Value, new: &Value, node: &str) -> Vec<EventSpec> {
    let mut out = Vec::new();
    if old["startTime"].is_null() && !new["startTime"].is_null() {
        out.push(EventSpec::new(
            "Normal",
            "Scheduled",
            format!(
                "Successfully assigned {}/{} to {node}",
                meta::namespace(pod),
                meta::name(pod)
            ),
            "default-scheduler",
        ));
    }
    // Init containers first (their events come first on a real node), then the containers.
    for (statuses, specs) in [
        ("initContainerStatuses", "initContainers"),
        ("containerStatuses", "containers"),
    ] {
        container_events(pod, old, new, node, statuses, specs, &mut out);
    }
    out
}

/// The kubelet's events for one list of containers (`containers` or `initContainers`).
fn container_events(
    pod: &Value,
    old: &Value,
    new: &Value,
    node: &str,
    statuses: &str,
    specs: &str,
    out: &mut Vec<EventSpec>,
) {
    let empty = Vec::new();
    let old_statuses = old[statuses].as_array().unwrap_or(&empty);
    for (i, now) in new[statuses]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        let name = now["name"].as_str().unwrap_or_default();
        let say = Kubelet {
            node,
            field_path: format!("spec.{specs}{{{name}}}"),
            name,
            image: pod["spec"][specs][i]["image"].as_str().unwrap_or_default(),
        };
        let before = old_statuses
            .iter()
            .find(|c| c["name"] == now["name"])
            .cloned()
            .unwrap_or(Value::Null);
        let reason_now = waiting_reason(now);
        let reason_before = waiting_reason(&before);
        if reason_now == Some("PodInitializing") {
            // Not started yet: the kubelet has not looked at this container.
            continue;
        }
        let first_seen = before.is_null() || reason_before == Some("PodInitializing");
        if first_seen {
            out.push(say.pulling());
        }
        started_events(&say, now, &before, out);
        if reason_now != reason_before {
            waiting_events(&say, pod, now, first_seen, out);
        }
    }
}

/// The kubelet speaking of one container: its events carry the container's field path.
struct Kubelet<'a> {
    node: &'a str,
    field_path: String,
    name: &'a str,
    image: &'a str,
}

impl Kubelet<'_> {
    fn event(&self, kind: &'static str, reason: &str, message: String) -> EventSpec {
        EventSpec {
            kind,
            reason: reason.to_string(),
            message,
            field_path: Some(self.field_path.clone()),
            component: "kubelet",
            host: Some(self.node.to_string()),
        }
    }

    fn pulling(&self) -> EventSpec {
        let image = self.image;
        self.event("Normal", "Pulling", format!("Pulling image \"{image}\""))
    }
}

/// A container that started (or restarted) since `before`: its pull (again, after a pull
/// back-off), Created and Started.
fn started_events(say: &Kubelet<'_>, now: &Value, before: &Value, out: &mut Vec<EventSpec>) {
    let started_now = now["state"]["running"].is_object();
    let restarted = now["restartCount"].as_i64() > before["restartCount"].as_i64();
    if !(started_now && (!before["state"]["running"].is_object() || restarted)) {
        return;
    }
    let (name, image) = (say.name, say.image);
    if matches!(
        waiting_reason(before),
        Some("ImagePullBackOff" | "ErrImagePull")
    ) {
        // The retry after a back-off that pulled the image.
        out.push(say.pulling());
    }
    if before["containerID"].is_null() {
        out.push(say.event(
            "Normal",
            "Pulled",
            format!("Successfully pulled image \"{image}\" in 412ms (412ms including waiting). Image size: 12345678 bytes."),
        ));
    } else {
        out.push(say.event(
            "Normal",
            "Pulled",
            format!("Container image \"{image}\" already present on machine"),
        ));
    }
    out.push(say.event("Normal", "Created", format!("Created container: {name}")));
    out.push(say.event("Normal", "Started", format!("Started container {name}")));
}

/// A container that waits for a new reason: the kubelet's words for it (nothing for a
/// reason it does not report).
fn waiting_events(
    say: &Kubelet<'_>,
    pod: &Value,
    now: &Value,
    first_seen: bool,
    out: &mut Vec<EventSpec>,
) {
    let (name, image) = (say.name, say.image);
    let message = now["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    match waiting_reason(now) {
        Some("ErrImagePull") => {
            if !first_seen {
                out.push(say.pulling());
            }
            out.push(say.event(
                "Warning",
                "Failed",
                format!("Failed to pull image \"{image}\": {message}"),
            ));
            out.push(say.event("Warning", "Failed", "Error: ErrImagePull".into()));
        }
        Some("ImagePullBackOff") => {
            out.push(say.event(
                "Normal",
                "BackOff",
                format!("Back-off pulling image \"{image}\""),
            ));
            out.push(say.event("Warning", "Failed", "Error: ImagePullBackOff".into()));
        }
        Some("CrashLoopBackOff") => {
            out.push(say.event(
                "Warning",
                "BackOff",
                format!(
                    "Back-off restarting failed container {name} in pod {}_{}({})",
                    meta::name(pod),
                    meta::namespace(pod),
                    meta::uid(pod)
                ),
            ));
        }
        Some("InvalidImageName") => {
            let text = "Error: InvalidImageName".to_string();
            out.push(say.event("Warning", "InspectFailed", text));
        }
        Some("CreateContainerConfigError" | "CreateContainerError") => {
            out.push(say.event("Warning", "Failed", format!("Error: {message}")));
        }
        _ => {}
    }
}

/// The kubelet's `Killing` events for the running containers of a pod being deleted.
pub fn killing_events(pod: &Value, node: &str) -> Vec<EventSpec> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["state"]["running"].is_object())
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default();
            EventSpec {
                kind: "Normal",
                reason: "Killing".to_string(),
                message: format!("Stopping container {name}"),
                field_path: Some(format!("spec.containers{{{name}}}")),
                component: "kubelet",
                host: Some(node.to_string()),
            }
        })
        .collect()
}

/// The kubelet's readiness-probe failure for containers that never pass it (`never_ready`
/// per container), recorded when such a container starts running. Containers without a
/// readiness probe have nothing to fail.
pub fn readiness_failures(
    pod: &Value,
    old: &Value,
    new: &Value,
    node: &str,
    never_ready: &[bool],
) -> Vec<EventSpec> {
    let empty = Vec::new();
    let old_statuses = old["containerStatuses"].as_array().unwrap_or(&empty);
    let mut out = Vec::new();
    for (i, now) in new["containerStatuses"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        let container = &pod["spec"]["containers"][i];
        let probe = &container["readinessProbe"];
        if !never_ready.get(i).copied().unwrap_or(false) || !probe.is_object() {
            continue;
        }
        let before = old_statuses.iter().find(|c| c["name"] == now["name"]);
        let was_running = before.is_some_and(|c| c["state"]["running"].is_object());
        if !now["state"]["running"].is_object() || was_running {
            continue;
        }
        let detail = if probe["httpGet"].is_object() {
            "HTTP probe failed with statuscode: 503".to_string()
        } else if probe["tcpSocket"].is_object() {
            let port = &probe["tcpSocket"]["port"];
            let port = port
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| port.to_string());
            format!(
                "dial tcp {}:{port}: connect: connection refused",
                new["podIP"].as_str().unwrap_or_default()
            )
        } else if probe["grpc"].is_object() {
            "timeout: failed to connect service within 1s".to_string()
        } else {
            String::new()
        };
        let name = now["name"].as_str().unwrap_or_default();
        out.push(EventSpec {
            kind: "Warning",
            reason: "Unhealthy".to_string(),
            message: format!("Readiness probe failed: {detail}"),
            field_path: Some(format!("spec.containers{{{name}}}")),
            component: "kubelet",
            host: Some(node.to_string()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
               "spec": {"containers": [{"name": "web", "image": "example/doesnotexist:v1"}]}})
    }

    fn status(waiting: &str, restarts: i64) -> Value {
        json!({"startTime": "2026-11-30T08:00:00Z", "containerStatuses": [{"name": "web", "restartCount": restarts, "state": {"waiting": {"reason": waiting, "message": "boom"}}}]})
    }

    fn reasons(events: &[EventSpec]) -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{} {}", e.kind, e.reason))
            .collect()
    }

    #[test]
    fn image_pull_failure_events() {
        let events = kubelet_events(&pod(), &json!({}), &status("ErrImagePull", 0), "n1");
        assert_eq!(
            reasons(&events),
            [
                "Normal Scheduled",
                "Normal Pulling",
                "Warning Failed",
                "Warning Failed"
            ]
        );
        assert_eq!(
            events[2].message,
            "Failed to pull image \"example/doesnotexist:v1\": boom"
        );
        assert_eq!(events[3].message, "Error: ErrImagePull");
        assert_eq!(
            events[2].field_path.as_deref(),
            Some("spec.containers{web}")
        );
        let events = kubelet_events(
            &pod(),
            &status("ErrImagePull", 0),
            &status("ImagePullBackOff", 0),
            "n1",
        );
        assert_eq!(reasons(&events), ["Normal BackOff", "Warning Failed"]);
        assert_eq!(
            events[0].message,
            "Back-off pulling image \"example/doesnotexist:v1\""
        );
        // Nothing new, nothing recorded.
        assert!(
            kubelet_events(
                &pod(),
                &status("ImagePullBackOff", 0),
                &status("ImagePullBackOff", 0),
                "n1"
            )
            .is_empty()
        );
        // A retry that pulls the image (a scripted `times: N`): pulling, pulled, started.
        let running = json!({"startTime": "2026-11-30T08:00:00Z", "containerStatuses": [{"name": "web", "restartCount": 0,
            "containerID": "containerd://abc", "state": {"running": {"startedAt": "2026-11-30T08:00:35Z"}}}]});
        let events = kubelet_events(&pod(), &status("ImagePullBackOff", 0), &running, "n1");
        assert_eq!(
            reasons(&events),
            [
                "Normal Pulling",
                "Normal Pulled",
                "Normal Created",
                "Normal Started"
            ]
        );
        assert!(events[1].message.starts_with("Successfully pulled image"));
    }

    #[test]
    fn crash_loop_events() {
        let events = kubelet_events(
            &pod(),
            &status("ContainerCreating", 1),
            &status("CrashLoopBackOff", 1),
            "n1",
        );
        assert_eq!(reasons(&events), ["Warning BackOff"]);
        assert_eq!(
            events[0].message,
            "Back-off restarting failed container web in pod web-1_ns(u1)"
        );
    }

    #[test]
    fn init_containers_come_first_and_waiting_containers_are_quiet() {
        let mut p = pod();
        p["spec"]["initContainers"] = json!([{"name": "setup", "image": "busybox"}]);
        let new = json!({"startTime": "2026-11-30T08:00:00Z",
            "initContainerStatuses": [{"name": "setup", "restartCount": 0, "state": {"running": {}}}],
            "containerStatuses": [{"name": "web", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]});
        let events = kubelet_events(&p, &json!({}), &new, "n1");
        assert_eq!(
            reasons(&events),
            [
                "Normal Scheduled",
                "Normal Pulling",
                "Normal Pulled",
                "Normal Created",
                "Normal Started"
            ]
        );
        assert_eq!(
            events[1].field_path.as_deref(),
            Some("spec.initContainers{setup}")
        );
        assert_eq!(events[1].message, "Pulling image \"busybox\"");
    }

    #[test]
    fn never_ready_containers_with_a_probe_fail_it() {
        let mut p = pod();
        p["spec"]["containers"][0]["readinessProbe"] =
            json!({"httpGet": {"path": "/", "port": 8080}});
        let running = json!({"podIP": "10.0.0.1", "containerStatuses": [{"name": "web", "state": {"running": {}}}]});
        let events =
            readiness_failures(&p, &status("ContainerCreating", 0), &running, "n1", &[true]);
        assert_eq!(
            events[0].message,
            "Readiness probe failed: HTTP probe failed with statuscode: 503"
        );
        assert_eq!(events[0].reason, "Unhealthy");
        assert!(
            readiness_failures(
                &p,
                &status("ContainerCreating", 0),
                &running,
                "n1",
                &[false]
            )
            .is_empty()
        );
        assert!(readiness_failures(&p, &running, &running, "n1", &[true]).is_empty());
    }

    #[test]
    fn deleting_a_running_pod_stops_its_containers() {
        let running = json!({"status": {"containerStatuses": [
            {"name": "web", "state": {"running": {}}},
            {"name": "side", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let events = killing_events(&running, "n1");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].message, "Stopping container web");
    }

    #[test]
    fn event_object_shape() {
        let spec = EventSpec::new(
            "Normal",
            "ScalingReplicaSet",
            "Scaled up replica set web-abc from 0 to 2".into(),
            "deployment-controller",
        );
        let now: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let event = event_object(&pod(), &spec, now, 1, "2026-11-30T08:00:00Z");
        assert_eq!(event["involvedObject"]["kind"], "Pod");
        assert_eq!(event["involvedObject"]["uid"], "u1");
        assert_eq!(event["source"]["component"], "deployment-controller");
        assert_eq!(event["type"], "Normal");
        assert!(
            event["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("web-1.")
        );
    }

    #[test]
    fn event_names_are_the_creation_time_in_unix_nanos() {
        // As recorded: rec-events.18ed17a64aaf5b74 was made at 09:37:09.3757 UTC.
        let spec = EventSpec::new("Normal", "X", "one message".into(), "deployment-controller");
        let other = EventSpec::new("Normal", "X", "another".into(), "deployment-controller");
        let now = jiff::Timestamp::from_nanosecond(0x18ed17a64aaf5b74).unwrap();
        assert_eq!(
            crate::model::clock::format_time(now),
            "2026-12-01T09:37:09Z"
        );
        for spec in [spec, other] {
            let event = event_object(&pod(), &spec, now, 1, "2026-12-01T09:37:09Z");
            assert_eq!(event["metadata"]["name"], "web-1.18ed17a64aaf5b74");
            assert_eq!(event["lastTimestamp"], "2026-12-01T09:37:09Z");
        }
    }
}
