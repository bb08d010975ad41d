//! kstatus-style status of one object. The order of checks for Deployments, StatefulSets and
//! DaemonSets is kubectl's rollout status; the generic rules (deletion, observedGeneration,
//! Reconciling/Stalled) and the other kinds follow kstatus, with the deviations noted inline.

use super::status::{Assessment, Status, at, cond_field, condition, condition_is, int_at, str_at};
use serde_json::Value;

/// The status of `obj` (any kind) as the cluster returned it.
///
/// Items of a LIST response carry no `apiVersion`/`kind` (a watcher's initial list included);
/// for those the type is inferred from fields the API server always defaults (see
/// `infer_type`). Prefer `assess_as` when the caller knows the type.
pub fn assess(obj: &Value) -> Assessment {
    match (str_at(obj, &["apiVersion"]), str_at(obj, &["kind"])) {
        (Some(api_version), Some(kind)) if !kind.is_empty() => assess_as(obj, api_version, kind),
        _ => match infer_type(obj) {
            Some((api_version, kind)) => assess_as(obj, api_version, kind),
            None => assess_as(obj, "", ""),
        },
    }
}

/// Guesses the type of a kindless object from its shape: the workload kinds (whose status
/// rules matter most) are told apart by fields the API server defaults on every object.
pub fn infer_type(obj: &Value) -> Option<(&'static str, &'static str)> {
    let spec = obj.get("spec")?;
    let has = |v: &Value, key: &str| v.get(key).is_some();
    let status = obj.get("status").unwrap_or(&Value::Null);
    if has(spec, "names") && has(spec, "group") && has(spec, "versions") {
        return Some(("apiextensions.k8s.io/v1", "CustomResourceDefinition"));
    }
    if has(spec, "containers") {
        return Some(("v1", "Pod"));
    }
    if has(spec, "jobTemplate") {
        return Some(("batch/v1", "CronJob"));
    }
    if has(spec, "template") {
        if has(spec, "podManagementPolicy")
            || has(spec, "serviceName")
            || has(spec, "volumeClaimTemplates")
            || has(status, "updateRevision")
        {
            return Some(("apps/v1", "StatefulSet"));
        }
        if has(spec, "strategy") || has(spec, "progressDeadlineSeconds") {
            return Some(("apps/v1", "Deployment"));
        }
        if has(spec, "updateStrategy") || has(status, "desiredNumberScheduled") {
            return Some(("apps/v1", "DaemonSet"));
        }
        if has(spec, "backoffLimit")
            || has(spec, "completions")
            || has(spec, "completionMode")
            || has(status, "startTime")
        {
            return Some(("batch/v1", "Job"));
        }
        return Some(("apps/v1", "ReplicaSet"));
    }
    if has(spec, "accessModes") && !has(spec, "capacity") {
        return Some(("v1", "PersistentVolumeClaim"));
    }
    None
}

/// The status of `obj`, whose type the caller knows (e.g. from the resource it watched).
pub fn assess_as(obj: &Value, api_version: &str, kind: &str) -> Assessment {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let name = str_at(obj, &["metadata", "name"]).unwrap_or("");

    if str_at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return Assessment::new(
            Status::Terminating,
            format!("{kind} {name:?} is being deleted"),
        );
    }

    let is_workload = matches!(
        (group, kind),
        (
            "apps" | "extensions",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
        )
    );
    let generation = int_at(obj, &["metadata", "generation"]);
    let observed = int_at(obj, &["status", "observedGeneration"]);
    match (generation, observed) {
        // kstatus compares with `!=`; kubectl with `>`: a controller never observes the future,
        // so only "behind" means waiting.
        (Some(g), Some(o)) if o < g => {
            let message = if is_workload {
                format!(
                    "Waiting for {} {name:?} spec update to be observed...",
                    kubectl_word(kind)
                )
            } else {
                format!("{kind} generation is {g}, but latest observed generation is {o}")
            };
            return Assessment::new(Status::InProgress, message)
                .with_reason("LatestGenerationNotObserved");
        }
        // A workload controller always writes observedGeneration; until it has, the status
        // is from nobody (kubectl waits too; kstatus only for DaemonSets).
        (Some(_), None) if is_workload => {
            return Assessment::new(
                Status::InProgress,
                format!(
                    "Waiting for {} {name:?} spec update to be observed...",
                    kubectl_word(kind)
                ),
            )
            .with_reason("NoObservedGeneration");
        }
        _ => {}
    }

    if let Some(c) = condition(obj, "Reconciling").filter(|c| cond_field(c, "status") == "True") {
        return Assessment::new(
            Status::InProgress,
            or(cond_field(c, "message"), "Reconciling"),
        )
        .with_reason(or(cond_field(c, "reason"), "Reconciling"));
    }
    if let Some(c) = condition(obj, "Stalled").filter(|c| cond_field(c, "status") == "True") {
        return Assessment::new(Status::Failed, or(cond_field(c, "message"), "Stalled"))
            .with_reason(or(cond_field(c, "reason"), "Stalled"));
    }

    match (group, kind) {
        ("apps" | "extensions", "Deployment") => deployment(obj, name),
        ("apps", "StatefulSet") => statefulset(obj, name),
        ("apps" | "extensions", "DaemonSet") => daemonset(obj, name),
        ("apps" | "extensions", "ReplicaSet") => replicaset(obj, name),
        ("batch", "Job") => job(obj, name),
        ("", "Pod") => pod(obj, name),
        ("", "PersistentVolumeClaim") => pvc(obj, name),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj, name),
        // LoadBalancer ingress is optional: a Service is usable through its ClusterIP, and
        // many clusters (and the simulator) never assign external addresses.
        ("", "Service") => Assessment::new(Status::Current, format!("service {name:?} is ready")),
        _ => generic(obj, kind, name),
    }
}

fn or<'a>(s: &'a str, fallback: &'a str) -> &'a str {
    if s.is_empty() { fallback } else { s }
}

/// kubectl's words in rollout messages.
fn kubectl_word(kind: &str) -> &'static str {
    match kind {
        "Deployment" => "deployment",
        "StatefulSet" => "statefulset",
        "DaemonSet" => "daemon set",
        "ReplicaSet" => "replica set",
        _ => "resource",
    }
}

fn waiting(message: String) -> Assessment {
    Assessment::new(Status::InProgress, message)
}

fn deployment(obj: &Value, name: &str) -> Assessment {
    if let Some(c) = condition(obj, "Progressing")
        && cond_field(c, "reason") == "ProgressDeadlineExceeded"
    {
        let detail = cond_field(c, "message");
        let mut message = format!("deployment {name:?} exceeded its progress deadline");
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        return Assessment::new(Status::Failed, message).with_reason("ProgressDeadlineExceeded");
    }
    let spec = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let replicas = int_at(obj, &["status", "replicas"]).unwrap_or(0);
    let updated = int_at(obj, &["status", "updatedReplicas"]).unwrap_or(0);
    let available = int_at(obj, &["status", "availableReplicas"]).unwrap_or(0);
    let prefix = format!("Waiting for deployment {name:?} rollout to finish");
    if updated < spec {
        return waiting(format!(
            "{prefix}: {updated} out of {spec} new replicas have been updated..."
        ));
    }
    if replicas > updated {
        return waiting(format!(
            "{prefix}: {} old replicas are pending termination...",
            replicas - updated
        ));
    }
    if available < updated {
        return waiting(format!(
            "{prefix}: {available} of {updated} updated replicas are available..."
        ));
    }
    Assessment::new(
        Status::Current,
        format!("deployment {name:?} successfully rolled out ({updated} replicas)"),
    )
}

fn statefulset(obj: &Value, name: &str) -> Assessment {
    let spec = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let replicas = int_at(obj, &["status", "replicas"]).unwrap_or(0);
    let ready = int_at(obj, &["status", "readyReplicas"]).unwrap_or(0);
    let updated = int_at(obj, &["status", "updatedReplicas"]).unwrap_or(0);
    let on_delete = str_at(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete");
    if replicas < spec {
        return waiting(format!(
            "Waiting for statefulset {name:?}: {replicas} of {spec} pods created..."
        ));
    }
    if ready < spec {
        return waiting(format!(
            "Waiting for statefulset {name:?}: {} pods to be ready...",
            spec - ready
        ));
    }
    if replicas > spec {
        return waiting(format!(
            "Waiting for statefulset {name:?}: {} pods pending termination...",
            replicas - spec
        ));
    }
    if on_delete {
        // Pods are replaced only when someone deletes them; there is no rollout to wait for.
        return Assessment::new(
            Status::Current,
            format!("statefulset {name:?} uses the OnDelete update strategy: {ready} pods ready"),
        );
    }
    let partition = int_at(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .unwrap_or(0);
    if partition > 0 {
        let want = (spec - partition).max(0);
        if updated < want {
            return waiting(format!(
                "Waiting for partitioned roll out of statefulset {name:?} to finish: {updated} out of {want} new pods have been updated..."
            ));
        }
        return Assessment::new(
            Status::Current,
            format!(
                "statefulset {name:?} partitioned roll out complete: {updated} new pods have been updated"
            ),
        );
    }
    let update_rev = str_at(obj, &["status", "updateRevision"]).unwrap_or("");
    let current_rev = str_at(obj, &["status", "currentRevision"]).unwrap_or("");
    if update_rev != current_rev {
        return waiting(format!(
            "Waiting for statefulset {name:?} rolling update to complete: {updated} pods at revision {update_rev}..."
        ));
    }
    Assessment::new(
        Status::Current,
        format!(
            "statefulset {name:?} rolling update complete: {replicas} pods at revision {update_rev}"
        ),
    )
}

fn daemonset(obj: &Value, name: &str) -> Assessment {
    let Some(desired) = int_at(obj, &["status", "desiredNumberScheduled"]) else {
        return waiting(format!(
            "Waiting for daemon set {name:?}: status not reported yet..."
        ));
    };
    let current = int_at(obj, &["status", "currentNumberScheduled"]).unwrap_or(0);
    let updated = int_at(obj, &["status", "updatedNumberScheduled"]).unwrap_or(0);
    let available = int_at(obj, &["status", "numberAvailable"]).unwrap_or(0);
    let on_delete = str_at(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete");
    let prefix = format!("Waiting for daemon set {name:?} rollout to finish");
    if current < desired {
        return waiting(format!(
            "{prefix}: {current} of {desired} pods are scheduled..."
        ));
    }
    if !on_delete && updated < desired {
        return waiting(format!(
            "{prefix}: {updated} out of {desired} new pods have been updated..."
        ));
    }
    if available < desired {
        return waiting(format!(
            "{prefix}: {available} of {desired} updated pods are available..."
        ));
    }
    Assessment::new(
        Status::Current,
        format!("daemon set {name:?} successfully rolled out ({desired} pods)"),
    )
}

fn replicaset(obj: &Value, name: &str) -> Assessment {
    if let Some(c) = condition(obj, "ReplicaFailure").filter(|c| cond_field(c, "status") == "True")
    {
        return waiting(format!(
            "replica set {name:?} cannot create pods: {}",
            or(cond_field(c, "message"), cond_field(c, "reason"))
        ))
        .with_reason(or(cond_field(c, "reason"), "ReplicaFailure"));
    }
    let spec = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let replicas = int_at(obj, &["status", "replicas"]).unwrap_or(0);
    let available = int_at(obj, &["status", "availableReplicas"]).unwrap_or(0);
    let ready = int_at(obj, &["status", "readyReplicas"]).unwrap_or(0);
    if available < spec {
        return waiting(format!(
            "Waiting for replica set {name:?}: {available} of {spec} replicas are available..."
        ));
    }
    if ready < spec {
        return waiting(format!(
            "Waiting for replica set {name:?}: {ready} of {spec} replicas are ready..."
        ));
    }
    if replicas > spec {
        return waiting(format!(
            "Waiting for replica set {name:?}: {} pods pending termination...",
            replicas - spec
        ));
    }
    Assessment::new(
        Status::Current,
        format!("replica set {name:?} is available ({spec} replicas)"),
    )
}

/// A Job must finish: unlike kstatus (which calls a running Job current), a deploy that
/// includes a Job (a migration, say) waits for it and fails when it fails.
fn job(obj: &Value, name: &str) -> Assessment {
    let parallelism = int_at(obj, &["spec", "parallelism"]).unwrap_or(1);
    let completions = int_at(obj, &["spec", "completions"]).unwrap_or(parallelism);
    let succeeded = int_at(obj, &["status", "succeeded"]).unwrap_or(0);
    let active = int_at(obj, &["status", "active"]).unwrap_or(0);
    let failed = int_at(obj, &["status", "failed"]).unwrap_or(0);
    for kind in ["FailureTarget", "Failed"] {
        if let Some(c) = condition(obj, kind).filter(|c| cond_field(c, "status") == "True") {
            let reason = or(cond_field(c, "reason"), "JobFailed");
            let mut message = format!("job {name:?} failed ({failed} failed pods)");
            let detail = cond_field(c, "message");
            if !detail.is_empty() {
                message.push_str(": ");
                message.push_str(detail);
            }
            return Assessment::new(Status::Failed, message).with_reason(reason);
        }
    }
    if condition_is(obj, "Complete", "True") || condition_is(obj, "SuccessCriteriaMet", "True") {
        return Assessment::new(
            Status::Current,
            format!("job {name:?} completed ({succeeded}/{completions} succeeded)"),
        );
    }
    if condition_is(obj, "Suspended", "True") {
        return Assessment::new(Status::Current, format!("job {name:?} is suspended"));
    }
    waiting(format!(
        "Waiting for job {name:?} to complete: {succeeded} of {completions} succeeded, {active} active, {failed} failed..."
    ))
}

/// A bare Pod in the manifests (not one of a workload's pods; those go through `pods.rs`).
fn pod(obj: &Value, name: &str) -> Assessment {
    match str_at(obj, &["status", "phase"]).unwrap_or("") {
        "Succeeded" => Assessment::new(Status::Current, format!("pod {name:?} completed")),
        // kstatus calls a Failed pod current (it is done); for a deploy it is a failure.
        "Failed" => {
            let reason = or(
                str_at(obj, &["status", "reason"]).unwrap_or(""),
                "PodFailed",
            );
            let detail = str_at(obj, &["status", "message"]).unwrap_or("");
            Assessment::new(
                Status::Failed,
                format!(
                    "pod {name:?} failed{}{detail}",
                    if detail.is_empty() { "" } else { ": " }
                ),
            )
            .with_reason(reason)
        }
        "Running" => {
            if condition_is(obj, "Ready", "True") {
                return Assessment::new(Status::Current, format!("pod {name:?} is ready"));
            }
            let looping = crash_looping(obj);
            if !looping.is_empty() {
                return Assessment::new(
                    Status::Failed,
                    format!(
                        "pod {name:?} containers in CrashLoopBackOff: {}",
                        looping.join(", ")
                    ),
                )
                .with_reason("CrashLoopBackOff");
            }
            waiting(format!("Waiting for pod {name:?} to be ready..."))
        }
        "Pending" => {
            if let Some(c) = condition(obj, "PodScheduled")
                && cond_field(c, "status") == "False"
                && cond_field(c, "reason") == "Unschedulable"
            {
                return waiting(format!(
                    "pod {name:?} is not scheduled yet: {}",
                    or(cond_field(c, "message"), "Unschedulable")
                ))
                .with_reason("Unschedulable");
            }
            waiting(format!("Waiting for pod {name:?}: pending..."))
        }
        _ => waiting(format!(
            "Waiting for pod {name:?}: phase not reported yet..."
        )),
    }
}

fn crash_looping(obj: &Value) -> Vec<String> {
    at(obj, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|cs| str_at(cs, &["state", "waiting", "reason"]) == Some("CrashLoopBackOff"))
        .filter_map(|cs| str_at(cs, &["name"]).map(str::to_string))
        .collect()
}

fn pvc(obj: &Value, name: &str) -> Assessment {
    match str_at(obj, &["status", "phase"]) {
        Some("Bound") => Assessment::new(Status::Current, format!("PVC {name:?} is Bound")),
        // A lost claim will not come back by waiting.
        Some("Lost") => Assessment::new(Status::Failed, format!("PVC {name:?} lost its volume"))
            .with_reason("ClaimLost"),
        phase => waiting(format!(
            "Waiting for PVC {name:?} to be Bound (phase: {})...",
            phase.unwrap_or("unknown")
        )),
    }
}

fn crd(obj: &Value, name: &str) -> Assessment {
    if let Some(c) = condition(obj, "NamesAccepted").filter(|c| cond_field(c, "status") == "False")
    {
        return Assessment::new(
            Status::Failed,
            format!(
                "CRD {name:?} names not accepted: {}",
                cond_field(c, "message")
            ),
        )
        .with_reason(or(cond_field(c, "reason"), "NamesNotAccepted"));
    }
    if let Some(c) = condition(obj, "Established") {
        match cond_field(c, "status") {
            "True" => {
                return Assessment::new(Status::Current, format!("CRD {name:?} is established"));
            }
            "False" if cond_field(c, "reason") != "Installing" => {
                return Assessment::new(
                    Status::Failed,
                    format!("CRD {name:?} not established: {}", cond_field(c, "message")),
                )
                .with_reason(or(cond_field(c, "reason"), "NotEstablished"));
            }
            _ => {}
        }
    }
    waiting(format!("Waiting for CRD {name:?} to be established..."))
}

/// Kinds without rules of their own: a `Ready` condition if the controller keeps one
/// (common among custom resources), else current as soon as it exists.
fn generic(obj: &Value, kind: &str, name: &str) -> Assessment {
    if let Some(c) = condition(obj, "Ready") {
        let detail = cond_field(c, "message");
        return match cond_field(c, "status") {
            "True" => Assessment::new(Status::Current, format!("{kind} {name:?} is ready")),
            _ => waiting(format!(
                "Waiting for {kind} {name:?} to be ready{}{detail}",
                if detail.is_empty() { "" } else { ": " }
            ))
            .with_reason(or(cond_field(c, "reason"), "NotReady")),
        };
    }
    Assessment::new(Status::Current, format!("{kind} {name:?} exists"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recording(name: &str) -> Value {
        let path = crate::util::shared::shared_path(&format!("apiserver-recordings/{name}"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap()
    }

    fn deploy(spec: i64, generation: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop", "generation": generation},
               "spec": {"replicas": spec}, "status": status})
    }

    #[test]
    fn deployment_table() {
        use Status::*;
        let cases: Vec<(Value, Status, &str)> = vec![
            (
                deploy(
                    3,
                    2,
                    json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
                ),
                InProgress,
                "Waiting for deployment \"web\" spec update to be observed...",
            ),
            (
                deploy(3, 1, json!({})),
                InProgress,
                "Waiting for deployment \"web\" spec update to be observed...",
            ),
            (
                deploy(
                    3,
                    2,
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2}),
                ),
                InProgress,
                "Waiting for deployment \"web\" rollout to finish: 1 out of 3 new replicas have been updated...",
            ),
            (
                deploy(
                    3,
                    2,
                    json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3}),
                ),
                InProgress,
                "Waiting for deployment \"web\" rollout to finish: 1 old replicas are pending termination...",
            ),
            (
                deploy(
                    3,
                    2,
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 1}),
                ),
                InProgress,
                "Waiting for deployment \"web\" rollout to finish: 1 of 3 updated replicas are available...",
            ),
            (
                deploy(
                    3,
                    2,
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
                ),
                Current,
                "deployment \"web\" successfully rolled out (3 replicas)",
            ),
            (
                deploy(0, 1, json!({"observedGeneration": 1})),
                Current,
                "deployment \"web\" successfully rolled out (0 replicas)",
            ),
            (
                deploy(
                    2,
                    1,
                    json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 0,
                "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."}]}),
                ),
                Failed,
                "deployment \"web\" exceeded its progress deadline: ReplicaSet \"web-1\" has timed out progressing.",
            ),
            // A deadline verdict from an older generation does not count.
            (
                deploy(
                    2,
                    2,
                    json!({"observedGeneration": 1,
                "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
                ),
                InProgress,
                "Waiting for deployment \"web\" spec update to be observed...",
            ),
        ];
        for (obj, status, message) in cases {
            let a = assess(&obj);
            assert_eq!((a.status, a.message.as_str()), (status, message), "{obj}");
        }
    }

    #[test]
    fn recorded_deployments() {
        let Some(_shared) = crate::util::shared::shared_for_test("recorded_deployments") else {
            return;
        };
        use Status::*;
        let cases = [
            ("02-ssa-apply1-response.json", InProgress),
            ("02-ssa-apply1-get-immediately.json", InProgress),
            ("02-ssa-apply1-get-after-5s.json", Current),
            ("02-ssa-apply2-image-response.json", InProgress),
            ("02-ssa-apply2-get-immediately.json", InProgress),
            ("02-ssa-apply2-get-after-1.5s.json", InProgress),
            ("02-ssa-apply2-get-after-7.5s.json", Current),
            ("02-deployment-final-get.json", Current),
            ("03-progress-deadline-status-at-2s.json", InProgress),
            ("03-progress-deadline-status-at-6s.json", InProgress),
            ("03-progress-deadline-status-at-15s.json", Failed),
            ("03-progress-deadline-status-at-25s.json", Failed),
            ("06-crd-get-established.json", Current),
            ("09-namespace-terminating-get.json", Terminating),
        ];
        for (file, want) in cases {
            let a = assess(&recording(file));
            assert_eq!(a.status, want, "{file}: {}", a.message);
        }
        let a = assess(&recording("03-progress-deadline-status-at-15s.json"));
        assert_eq!(a.reason.as_deref(), Some("ProgressDeadlineExceeded"));
        assert!(
            a.message.starts_with(
                "deployment \"stuck\" exceeded its progress deadline: ReplicaSet \"stuck-"
            ),
            "{}",
            a.message
        );
    }

    /// List items have no apiVersion/kind: the verdicts must not change without them.
    #[test]
    fn kindless_objects_from_lists() {
        let Some(_shared) = crate::util::shared::shared_for_test("kindless_objects_from_lists")
        else {
            return;
        };
        let strip = |mut v: Value| {
            let m = v.as_object_mut().unwrap();
            m.remove("kind");
            m.remove("apiVersion");
            v
        };
        for file in [
            "02-ssa-apply1-get-immediately.json",
            "02-ssa-apply2-get-after-1.5s.json",
            "02-ssa-apply2-get-after-7.5s.json",
            "03-progress-deadline-status-at-15s.json",
            "06-crd-get-established.json",
            "02-pod-created-by-replicaset.json",
        ] {
            let full = recording(file);
            let want = assess(&full);
            let kindless = strip(full.clone());
            assert_eq!(
                infer_type(&kindless).map(|t| t.1),
                full["kind"].as_str(),
                "{file}"
            );
            assert_eq!(assess(&kindless), want, "{file}");
        }
        for rs in recording("02-replicasets-list.json")["items"]
            .as_array()
            .unwrap()
        {
            assert_eq!(infer_type(rs), Some(("apps/v1", "ReplicaSet")));
        }
        let shapes = [
            (
                json!({"spec": {"template": {}, "podManagementPolicy": "OrderedReady", "updateStrategy": {}}}),
                "StatefulSet",
            ),
            (
                json!({"spec": {"template": {}, "updateStrategy": {"type": "RollingUpdate"}}}),
                "DaemonSet",
            ),
            (json!({"spec": {"template": {}, "backoffLimit": 6}}), "Job"),
            (json!({"spec": {"jobTemplate": {}}}), "CronJob"),
            (
                json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {}}}),
                "PersistentVolumeClaim",
            ),
        ];
        for (obj, kind) in shapes {
            assert_eq!(infer_type(&obj).map(|t| t.1), Some(kind), "{obj}");
        }
        assert_eq!(infer_type(&json!({"data": {"a": "b"}})), None);
        assert_eq!(
            assess_as(&json!({"metadata": {"name": "x"}}), "v1", "ConfigMap").status,
            Status::Current
        );
    }

    #[test]
    fn recorded_replicasets() {
        let Some(_shared) = crate::util::shared::shared_for_test("recorded_replicasets") else {
            return;
        };
        let list = recording("02-replicasets-list.json");
        for rs in list["items"].as_array().unwrap() {
            let a = assess(rs);
            assert_eq!(a.status, Status::Current, "{}", a.message);
        }
    }

    fn sts(spec: Value, status: Value) -> Value {
        let mut status = status;
        status["observedGeneration"] = json!(2);
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "db", "generation": 2}, "spec": spec, "status": status})
    }

    #[test]
    fn statefulset_table() {
        use Status::*;
        let full = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3,
                          "currentRevision": "db-2", "updateRevision": "db-2"});
        let cases = vec![
            (
                sts(
                    json!({"replicas": 3}),
                    json!({"replicas": 2, "readyReplicas": 2}),
                ),
                InProgress,
                "2 of 3 pods created",
            ),
            (
                sts(
                    json!({"replicas": 3}),
                    json!({"replicas": 3, "readyReplicas": 1}),
                ),
                InProgress,
                "2 pods to be ready",
            ),
            (
                sts(
                    json!({"replicas": 3}),
                    json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1,
                "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                InProgress,
                "1 pods at revision db-2",
            ),
            (
                sts(json!({"replicas": 3}), full.clone()),
                Current,
                "rolling update complete: 3 pods at revision db-2",
            ),
            (
                sts(
                    json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 0, "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                InProgress,
                "0 out of 1 new pods",
            ),
            (
                sts(
                    json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                Current,
                "partitioned roll out complete",
            ),
            (
                sts(
                    json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
                    json!({"replicas": 3, "readyReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                Current,
                "OnDelete",
            ),
            (
                sts(json!({"replicas": 2}), full),
                InProgress,
                "1 pods pending termination",
            ),
        ];
        for (obj, status, part) in cases {
            let a = assess(&obj);
            assert_eq!(a.status, status, "{}", a.message);
            assert!(a.message.contains(part), "{} !~ {part}", a.message);
        }
    }

    #[test]
    fn daemonset_table() {
        use Status::*;
        let ds = |status: Value| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "generation": 3}, "spec": {}, "status": status})
        };
        let cases = vec![
            (
                ds(json!({"observedGeneration": 3})),
                InProgress,
                "status not reported",
            ),
            (
                ds(json!({"observedGeneration": 2, "desiredNumberScheduled": 2})),
                InProgress,
                "spec update to be observed",
            ),
            (
                ds(
                    json!({"observedGeneration": 3, "desiredNumberScheduled": 3, "currentNumberScheduled": 2}),
                ),
                InProgress,
                "2 of 3 pods are scheduled",
            ),
            (
                ds(
                    json!({"observedGeneration": 3, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 1}),
                ),
                InProgress,
                "1 out of 3 new pods have been updated",
            ),
            (
                ds(
                    json!({"observedGeneration": 3, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}),
                ),
                InProgress,
                "2 of 3 updated pods are available",
            ),
            (
                ds(
                    json!({"observedGeneration": 3, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}),
                ),
                Current,
                "daemon set \"agent\" successfully rolled out",
            ),
        ];
        for (obj, status, part) in cases {
            let a = assess(&obj);
            assert_eq!(a.status, status, "{}", a.message);
            assert!(a.message.contains(part), "{} !~ {part}", a.message);
        }
    }

    /// Checks `assess` on each (object, status, reason) case; a reason of `None`
    /// is not checked.
    fn check_assess(cases: Vec<(Value, Status, Option<&str>)>) {
        for (obj, status, reason) in cases {
            let a = assess(&obj);
            assert_eq!(a.status, status, "{obj}: {}", a.message);
            if reason.is_some() {
                assert_eq!(a.reason.as_deref(), reason, "{obj}");
            }
        }
    }

    /// Jobs: running, complete, failed, failing.
    #[test]
    fn other_kinds_jobs() {
        use Status::*;
        let job = |conds: Value, status: Value| {
            let mut s = status;
            s["conditions"] = conds;
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"}, "spec": {"completions": 1}, "status": s})
        };
        check_assess(vec![
            (
                job(json!([]), json!({"active": 1, "startTime": "x"})),
                InProgress,
                None,
            ),
            (
                job(
                    json!([{"type": "Complete", "status": "True"}]),
                    json!({"succeeded": 1}),
                ),
                Current,
                None,
            ),
            (
                job(
                    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]),
                    json!({"failed": 7}),
                ),
                Failed,
                Some("BackoffLimitExceeded"),
            ),
            (
                job(
                    json!([{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]),
                    json!({}),
                ),
                Failed,
                Some("DeadlineExceeded"),
            ),
        ]);
    }

    /// Pods by phase, readiness, crash loops, scheduling.
    #[test]
    fn other_kinds_pods() {
        use Status::*;
        let pod = |status: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": status});
        check_assess(vec![
            (pod(json!({"phase": "Succeeded"})), Current, None),
            (
                pod(json!({"phase": "Failed", "reason": "Evicted"})),
                Failed,
                Some("Evicted"),
            ),
            (
                pod(
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                ),
                Current,
                None,
            ),
            (
                pod(
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
                ),
                InProgress,
                None,
            ),
            (
                pod(
                    json!({"phase": "Running", "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
                ),
                Failed,
                Some("CrashLoopBackOff"),
            ),
            (
                pod(
                    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
                ),
                InProgress,
                Some("Unschedulable"),
            ),
            (pod(json!({})), InProgress, None),
        ]);
    }

    /// PersistentVolumeClaims and CustomResourceDefinitions.
    #[test]
    fn other_kinds_claims_and_crds() {
        use Status::*;
        let crd = |conds: Value| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"}, "status": {"conditions": conds}})
        };
        check_assess(vec![
            (
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}, "status": {"phase": "Pending"}}),
                InProgress,
                None,
            ),
            (
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}, "status": {"phase": "Bound"}}),
                Current,
                None,
            ),
            (
                crd(
                    json!([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]),
                ),
                Current,
                None,
            ),
            (
                crd(
                    json!([{"type": "NamesAccepted", "status": "False", "reason": "KindConflict", "message": "kind Widget is already in use"}]),
                ),
                Failed,
                Some("KindConflict"),
            ),
            (
                crd(json!([{"type": "Established", "status": "False", "reason": "Installing"}])),
                InProgress,
                None,
            ),
            (crd(json!([])), InProgress, None),
        ]);
    }

    /// Services, ConfigMaps, custom resources (kstatus conditions), deletion, ReplicaSets.
    #[test]
    fn other_kinds_generic() {
        use Status::*;
        check_assess(vec![
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}}),
                Current,
                None,
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
                Current,
                None,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2}, "status": {"observedGeneration": 1}}),
                InProgress,
                Some("LatestGenerationNotObserved"),
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2}, "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False", "reason": "Waiting"}]}}),
                InProgress,
                Some("Waiting"),
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                Current,
                None,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "BadSpec", "message": "size must be positive"}]}}),
                Failed,
                Some("BadSpec"),
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": [{"type": "Reconciling", "status": "True"}]}}),
                InProgress,
                Some("Reconciling"),
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                Terminating,
                None,
            ),
            (
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "replicas": 2, "availableReplicas": 1, "readyReplicas": 2}}),
                InProgress,
                None,
            ),
            (
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}]}}),
                InProgress,
                Some("FailedCreate"),
            ),
        ]);
    }
}
