//! Fields the real API server fills in: spec defaults (on every write) and the fields it
//! sets when an object is created (namespace phase, pod service-account volume, ...).

use serde_json::{Map, Value, json};

use crate::model::resource::{ResourceType, generated_name};

/// Sets `obj[key]` to `value` unless it is present (and not null).
fn default(obj: &mut Map<String, Value>, key: &str, value: Value) {
    match obj.get(key) {
        Some(v) if !v.is_null() => {}
        _ => {
            obj.insert(key.to_string(), value);
        }
    }
}

fn object_at<'a>(obj: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    obj.get_mut(key).and_then(Value::as_object_mut)
}

fn name_of(obj: &Value) -> String {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Defaults applied to every create and update (spec defaults).
pub fn on_write(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("apps", "deployments") => on_spec(obj, deployment_defaults),
        ("apps", "replicasets") => on_spec(obj, |spec| {
            default(spec, "replicas", json!(1));
            template_defaults(spec);
        }),
        ("apps", "statefulsets") => on_spec(obj, statefulset_defaults),
        ("apps", "daemonsets") => on_spec(obj, daemonset_defaults),
        ("batch", "jobs") => on_spec(obj, |spec| {
            job_spec_defaults(spec);
            // A default of the Job's own, owned by its creator (recordings 10 and 14).
            default(spec, "manualSelector", json!(false));
        }),
        ("batch", "cronjobs") => on_spec(obj, cronjob_defaults),
        ("", "pods") => on_spec(obj, |spec| {
            pod_spec_defaults(spec);
            // Pod-level defaulting (not templates): decoded before field ownership.
            default(spec, "enableServiceLinks", json!(true));
        }),
        ("", "namespaces") => namespace_defaults(obj),
        ("", "secrets") => secret_defaults(obj),
        ("", "services") => on_spec(obj, service_defaults),
        (
            "admissionregistration.k8s.io",
            resource @ ("validatingwebhookconfigurations" | "mutatingwebhookconfigurations"),
        ) => {
            let mutating = resource == "mutatingwebhookconfigurations";
            let Some(webhooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
                return;
            };
            for hook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
                webhook_defaults(hook, mutating);
            }
        }
        ("apiregistration.k8s.io", "apiservices") => on_spec(obj, |spec| {
            if let Some(service) = spec.get_mut("service").and_then(Value::as_object_mut) {
                default(service, "port", json!(443));
            }
        }),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => on_spec(obj, |spec| {
            default(spec, "matchingPrecedence", json!(1000));
        }),
        ("scheduling.k8s.io", "priorityclasses") => {
            if let Some(map) = obj.as_object_mut() {
                default(map, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => on_spec(obj, crd_defaults),
        _ => {}
    }
}

/// Runs `defaults` on the object's `spec`, when it has one.
fn on_spec(obj: &mut Value, defaults: impl FnOnce(&mut Map<String, Value>)) {
    if let Some(spec) = object_at(obj, "spec") {
        defaults(spec);
    }
}

fn deployment_defaults(spec: &mut Map<String, Value>) {
    default(spec, "replicas", json!(1));
    default(
        spec,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    );
    if let Some(strategy) = spec.get_mut("strategy").and_then(Value::as_object_mut) {
        default(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            default(strategy, "rollingUpdate", json!({}));
            if let Some(ru) = strategy
                .get_mut("rollingUpdate")
                .and_then(Value::as_object_mut)
            {
                default(ru, "maxUnavailable", json!("25%"));
                default(ru, "maxSurge", json!("25%"));
            }
        }
    }
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
    template_defaults(spec);
}

fn statefulset_defaults(spec: &mut Map<String, Value>) {
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    default(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    default(spec, "revisionHistoryLimit", json!(10));
    default(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    template_defaults(spec);
}

fn daemonset_defaults(spec: &mut Map<String, Value>) {
    default(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
    );
    default(spec, "revisionHistoryLimit", json!(10));
    template_defaults(spec);
}

fn cronjob_defaults(spec: &mut Map<String, Value>) {
    default(spec, "concurrencyPolicy", json!("Allow"));
    default(spec, "suspend", json!(false));
    default(spec, "successfulJobsHistoryLimit", json!(3));
    default(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job) = spec
        .get_mut("jobTemplate")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        job_spec_defaults(job);
    }
}

fn namespace_defaults(obj: &mut Value) {
    let name = name_of(obj);
    let meta = crate::model::resource::metadata_mut(obj);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

fn secret_defaults(obj: &mut Value) {
    if let Some(map) = obj.as_object_mut()
        && map
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        map.insert("type".into(), json!("Opaque"));
    }
}

fn service_defaults(spec: &mut Map<String, Value>) {
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            default(port, "protocol", json!("TCP"));
            if let Some(p) = port.get("port").cloned() {
                default(port, "targetPort", p);
            }
        }
    }
}

fn crd_defaults(spec: &mut Map<String, Value>) {
    default(spec, "conversion", json!({"strategy": "None"}));
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut)
        && let Some(kind) = names.get("kind").and_then(Value::as_str)
    {
        let list_kind = format!("{kind}List");
        let singular = kind.to_lowercase();
        default(names, "listKind", json!(list_kind));
        default(names, "singular", json!(singular));
    }
}

/// One webhook of a webhook configuration, as v1 defaults it.
fn webhook_defaults(hook: &mut Map<String, Value>, mutating: bool) {
    if let Some(service) = hook
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        default(service, "port", json!(443));
    }
    if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
        for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
            default(rule, "scope", json!("*"));
        }
    }
    default(hook, "failurePolicy", json!("Fail"));
    default(hook, "matchPolicy", json!("Equivalent"));
    default(hook, "namespaceSelector", json!({}));
    default(hook, "objectSelector", json!({}));
    default(hook, "timeoutSeconds", json!(10));
    if mutating {
        default(hook, "reinvocationPolicy", json!("Never"));
    }
}

/// Fields the server sets only when an object is created.
pub fn on_create(rt: &ResourceType, obj: &mut Value, _now: &str) {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "namespaces") => {
            let map = obj.as_object_mut();
            if let Some(map) = map {
                let spec = map.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    default(spec, "finalizers", json!(["kubernetes"]));
                }
                map.insert("status".into(), json!({"phase": "Active"}));
            }
        }
        ("", "pods") => pod_on_create(obj),
        ("", "events") => {
            // A core v1 Event always shows these, empty when the reporter left them out
            // (as the controllers' Events are recorded: eventTime null, reportingInstance
            // ""); nobody owns them then.
            if let Some(map) = obj.as_object_mut() {
                map.entry("eventTime").or_insert(Value::Null);
                map.entry("reportingInstance").or_insert_with(|| json!(""));
            }
        }
        ("", "services") => {
            if let Some(spec) = object_at(obj, "spec") {
                let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
                if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
                    if !headless {
                        let ip = format!(
                            "10.96.{}.{}",
                            rand::random_range(0..=255u8),
                            rand::random_range(1..=254u8)
                        );
                        default(spec, "clusterIP", json!(ip));
                    }
                    let ip = spec.get("clusterIP").cloned().unwrap_or(json!("None"));
                    default(spec, "clusterIPs", json!([ip]));
                    default(spec, "ipFamilies", json!(["IPv4"]));
                    default(spec, "ipFamilyPolicy", json!("SingleStack"));
                }
            }
            if let Some(map) = obj.as_object_mut() {
                map.insert("status".into(), json!({"loadBalancer": {}}));
            }
        }
        ("batch", "jobs") => job_on_create(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let storage: Vec<Value> = obj
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                        .filter_map(|v| v.get("name").cloned())
                        .collect()
                })
                .unwrap_or_default();
            if let Some(map) = obj.as_object_mut() {
                map.insert(
                    "status".into(),
                    json!({"conditions": null, "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": storage}),
                );
            }
        }
        _ => {}
    }
}

fn template_defaults(spec: &mut Map<String, Value>) {
    if let Some(pod_spec) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec_defaults(pod_spec);
    }
}

fn job_spec_defaults(spec: &mut Map<String, Value>) {
    default(spec, "parallelism", json!(1));
    let parallelism = spec.get("parallelism").cloned().unwrap_or(json!(1));
    default(spec, "completions", parallelism);
    default(spec, "backoffLimit", json!(6));
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    if let Some(pod_spec) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        // Jobs must say Never or OnFailure; the real server rejects Always.
        default(pod_spec, "restartPolicy", json!("Never"));
        pod_spec_defaults(pod_spec);
    }
}

/// A Job's selector and template labels are derived from its uid at creation.
fn job_on_create(obj: &mut Value) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = name_of(obj);
    let manual = obj.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true);
    if uid.is_empty() || manual {
        return;
    }
    let Some(spec) = object_at(obj, "spec") else {
        return;
    };
    default(
        spec,
        "selector",
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
    if let Some(template) = spec.get_mut("template").and_then(Value::as_object_mut) {
        let meta = template.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                for (k, v) in [
                    ("batch.kubernetes.io/controller-uid", &uid),
                    ("batch.kubernetes.io/job-name", &name),
                    ("controller-uid", &uid),
                    ("job-name", &name),
                ] {
                    labels.insert(k.into(), json!(v));
                }
            }
        }
    }
    // A Job without labels of its own gets its template's (recordings 10 and 14).
    let template_labels = obj.pointer("/spec/template/metadata/labels").cloned();
    if let (Some(labels), Some(meta)) = (template_labels, object_at(obj, "metadata")) {
        let has_labels = meta
            .get("labels")
            .and_then(Value::as_object)
            .is_some_and(|l| !l.is_empty());
        if !has_labels {
            meta.insert("labels".into(), labels);
        }
    }
}

fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                container_defaults(c);
            }
        }
    }
}

fn container_defaults(c: &mut Map<String, Value>) {
    default(c, "resources", json!({}));
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    default(c, "imagePullPolicy", json!(default_pull_policy(image)));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            default(p, "timeoutSeconds", json!(1));
            default(p, "periodSeconds", json!(10));
            default(p, "successThreshold", json!(1));
            default(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                default(h, "scheme", json!("HTTP"));
            }
        }
    }
    if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
        for e in env.iter_mut() {
            if let Some(field_ref) = e
                .get_mut("valueFrom")
                .and_then(|v| v.get_mut("fieldRef"))
                .and_then(Value::as_object_mut)
            {
                default(field_ref, "apiVersion", json!("v1"));
            }
        }
    }
}

/// `Always` for `:latest` or untagged images, else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// What the API server's admission adds to a new pod: service account, its token volume,
/// default tolerations, priority, and the initial status.
fn pod_on_create(obj: &mut Value) {
    let qos = qos_class(obj);
    let Some(spec) = object_at(obj, "spec") else {
        return;
    };
    pod_spec_defaults(spec);
    default(spec, "serviceAccountName", json!("default"));
    let sa = spec
        .get("serviceAccountName")
        .cloned()
        .unwrap_or(json!("default"));
    default(spec, "serviceAccount", sa);
    default(spec, "priority", json!(0));
    default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !t
                .iter()
                .any(|x| x.get("key").and_then(Value::as_str) == Some(key))
            {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        != Some(false);
    if automount {
        let volume_name = generated_name("kube-api-access-");
        let volume = json!({
            "name": volume_name,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ],
                "defaultMode": 420
            }
        });
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(volume);
        }
        if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
                if let Some(m) = mounts.as_array_mut() {
                    m.push(json!({"name": volume_name, "readOnly": true,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
                }
            }
        }
    }
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "status".into(),
            json!({"phase": "Pending", "qosClass": qos}),
        );
    }
}

/// BestEffort without any requests or limits, Guaranteed when every container's limits
/// equal its requests for cpu and memory, Burstable otherwise.
fn qos_class(pod: &Value) -> &'static str {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(res));
            let request = requests.and_then(|r| r.get(res)).or(limit);
            if limit.is_none() || limit != request {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("example/web:v1"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/web"), "Always");
        assert_eq!(default_pull_policy("a/b@sha256:00"), "IfNotPresent");
    }

    #[test]
    fn deployment_defaults_match_recording() {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
            "template": {"spec": {"containers": [{"name": "web", "image": "example/web:v1",
                "ports": [{"containerPort": 8080}]}]}}}});
        on_write(&ResourceType::new("apps", "v1", "deployments"), &mut d);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            d["spec"]["template"]["spec"]["schedulerName"],
            "default-scheduler"
        );
    }

    #[test]
    fn pods_get_admission_fields() {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}});
        on_create(&ResourceType::new("", "v1", "pods"), &mut p, "t");
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][0]["readOnly"],
            true
        );
    }
}
