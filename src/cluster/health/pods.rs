//! Fail fast on pods of the new revision: which pods belong to it, and what is wrong with them.

use super::exits::{self, ContainerFacts};
use super::kstatus::infer_type;
use super::pulls;
use super::status::{at, cond_field, condition, int_at, str_at};
use crate::config::{FailFastConfig, UnschedulablePolicy};
use crate::report::Failure;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Identifies the pods of a workload's new revision by a label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RevisionSelector {
    /// Deployment: `pod-template-hash` of the new ReplicaSet.
    PodTemplateHash(String),
    /// StatefulSet (`status.updateRevision`) or DaemonSet (newest ControllerRevision):
    /// the pods' `controller-revision-hash` label.
    ControllerRevisionHash(String),
    /// DaemonSet without ControllerRevisions at hand: `pod-template-generation` label.
    PodTemplateGeneration(i64),
}

impl RevisionSelector {
    /// The label this selector matches, as `key=value` for a list call's labelSelector.
    pub fn label(&self) -> String {
        match self {
            RevisionSelector::PodTemplateHash(h) => format!("pod-template-hash={h}"),
            RevisionSelector::ControllerRevisionHash(h) => format!("controller-revision-hash={h}"),
            RevisionSelector::PodTemplateGeneration(g) => format!("pod-template-generation={g}"),
        }
    }
}

const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// The selector of the new revision's pods, or None while it is not known yet (the
/// controller has not observed the latest spec, or has not created the new ReplicaSet).
///
/// `owned`: for a Deployment its ReplicaSets; for a DaemonSet its ControllerRevisions
/// (may be empty); ignored for StatefulSets. Objects not owned by `workload` are skipped.
pub fn new_revision_selector(
    workload: &Value,
    owned: &[impl std::borrow::Borrow<Value>],
) -> Option<RevisionSelector> {
    // A workload from a LIST has no kind; its shape tells.
    let kind = match str_at(workload, &["kind"]) {
        Some(kind) => kind,
        None => infer_type(workload)?.1,
    };
    let generation = int_at(workload, &["metadata", "generation"]);
    let observed = int_at(workload, &["status", "observedGeneration"]);
    if let (Some(g), Some(o)) = (generation, observed)
        && o < g
    {
        return None;
    }
    let mine: Vec<&Value> = owned
        .iter()
        .map(|o| o.borrow())
        .filter(|o| is_owned_by(o, workload))
        .collect();
    match kind {
        "Deployment" => {
            let revision = str_at(workload, &["metadata", "annotations", REVISION_ANNOTATION]);
            let by_revision = revision.and_then(|rev| {
                mine.iter().find(|rs| {
                    str_at(rs, &["metadata", "annotations", REVISION_ANNOTATION]) == Some(rev)
                })
            });
            let rs = by_revision.or_else(|| {
                let want = template_digest_of(workload)?;
                mine.iter()
                    .find(|rs| template_digest_of(rs).as_ref() == Some(&want))
            })?;
            str_at(rs, &["metadata", "labels", "pod-template-hash"])
                .map(|h| RevisionSelector::PodTemplateHash(h.to_string()))
        }
        "StatefulSet" => str_at(workload, &["status", "updateRevision"])
            .filter(|r| !r.is_empty())
            .map(|r| RevisionSelector::ControllerRevisionHash(r.to_string())),
        "DaemonSet" => {
            let newest = mine
                .iter()
                // Kindless list items count when shaped like a ControllerRevision.
                .filter(|r| match str_at(r, &["kind"]) {
                    Some(kind) => kind == "ControllerRevision",
                    None => r.get("revision").is_some(),
                })
                .max_by_key(|r| int_at(r, &["revision"]).unwrap_or(0));
            match newest {
                Some(rev) => {
                    let hash = str_at(rev, &["metadata", "labels", "controller-revision-hash"])
                        .map(str::to_string)
                        .or_else(|| {
                            // The ControllerRevision is named "<daemonset>-<hash>".
                            let name = str_at(rev, &["metadata", "name"])?;
                            let prefix = format!("{}-", str_at(workload, &["metadata", "name"])?);
                            name.strip_prefix(&prefix).map(str::to_string)
                        })?;
                    Some(RevisionSelector::ControllerRevisionHash(hash))
                }
                None => generation.map(RevisionSelector::PodTemplateGeneration),
            }
        }
        _ => None,
    }
}

/// True when `child` names `owner` as an owner (by uid when both have one, else kind + name).
fn is_owned_by(child: &Value, owner: &Value) -> bool {
    let owner_uid = str_at(owner, &["metadata", "uid"]);
    let owner_kind = str_at(owner, &["kind"]);
    let owner_name = str_at(owner, &["metadata", "name"]);
    let Some(refs) = at(child, &["metadata", "ownerReferences"]).and_then(Value::as_array) else {
        return false;
    };
    refs.iter().any(|r| match (owner_uid, str_at(r, &["uid"])) {
        (Some(a), Some(b)) => a == b,
        _ => str_at(r, &["kind"]) == owner_kind && str_at(r, &["name"]) == owner_name,
    })
}

/// The annotation a kept workload or ReplicaSet carries in place of its pod template (see
/// [`slim_template`]): a template is most of such an object, and a fleet's waits hold
/// thousands of them only to compare templates when the revision annotation is missing.
pub const TEMPLATE_DIGEST_ANNOTATION: &str = "rollguard.dev/template-digest";

/// A pod template's digest under Kubernetes' own comparison of a ReplicaSet's template with
/// its Deployment's: without the `pod-template-hash` label, and with no `labels` when none is
/// left. Equal digests, equal templates (serde_json's maps are sorted: the text is canonical).
pub fn template_digest(template: &Value) -> String {
    let mut template = template.clone();
    if let Some(metadata) = template.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut)
    {
        labels.remove("pod-template-hash");
        if labels.is_empty() {
            metadata.remove("labels");
        }
    }
    hex::encode(Sha256::digest(template.to_string().as_bytes()))
}

/// The digest of an object's pod template: of `spec.template`, else the one kept in its
/// place ([`slim_template`]).
fn template_digest_of(object: &Value) -> Option<String> {
    match at(object, &["spec", "template"]) {
        Some(template) => Some(template_digest(template)),
        None => str_at(
            object,
            &["metadata", "annotations", TEMPLATE_DIGEST_ANNOTATION],
        )
        .map(str::to_string),
    }
}

/// Takes the pod template (`spec.template`) out of an object, or out of a DynamicObject's
/// data, and returns its digest. None when it has none.
pub fn take_template(object: &mut Value) -> Option<String> {
    let template = object
        .get_mut("spec")?
        .as_object_mut()?
        .remove("template")?;
    Some(template_digest(&template))
}

/// Replaces a workload's pod template by its digest, in the annotation
/// [`TEMPLATE_DIGEST_ANNOTATION`]: for copies kept only to be judged by these rules, which
/// read the template only to find the ReplicaSet that runs it.
pub fn slim_template(object: &mut Value) {
    let Some(digest) = take_template(object) else {
        return;
    };
    if let Some(Value::Object(annotations)) = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .map(|m| {
            m.entry("annotations")
                .or_insert_with(|| Value::Object(Default::default()))
        })
    {
        annotations.insert(
            TEMPLATE_DIGEST_ANNOTATION.to_string(),
            Value::String(digest),
        );
    }
}

/// True when `pod` belongs to the revision `selector` names.
pub fn pod_matches(pod: &Value, selector: &RevisionSelector) -> bool {
    let label = |key: &str| str_at(pod, &["metadata", "labels", key]);
    match selector {
        RevisionSelector::PodTemplateHash(h) => label("pod-template-hash") == Some(h),
        RevisionSelector::ControllerRevisionHash(h) => label("controller-revision-hash") == Some(h),
        RevisionSelector::PodTemplateGeneration(g) => {
            label("pod-template-generation").and_then(|v| v.parse::<i64>().ok()) == Some(*g)
        }
    }
}

/// The workload's pod selector as a labelSelector string (`matchLabels` and the
/// `In`/`NotIn`/`Exists`/`DoesNotExist` expressions), for listing or watching its pods.
pub fn label_selector(workload: &Value) -> Option<String> {
    let selector = at(workload, &["spec", "selector"])?;
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    for expr in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = str_at(expr, &["key"])?;
        let values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match str_at(expr, &["operator"])? {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => return None,
        }
    }
    if parts.is_empty() {
        None
    } else {
        Some(parts.join(","))
    }
}

/// How a pod problem affects the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Fails the target now.
    Fatal,
    /// Fails the target if it persists past its grace (a pull error that may pass,
    /// CrashLoopBackOff below the restart threshold, Unschedulable with `unschedulable: fail`).
    Transient,
    /// Reported, never fails the target.
    Warning,
}

/// One thing wrong with one pod (or one of its containers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProblem {
    pub pod: String,
    pub container: Option<String>,
    /// "ImagePullBackOff", "CrashLoopBackOff", "Unschedulable", ...
    pub reason: String,
    pub message: String,
    pub severity: Severity,
    /// The container's image, last exit and restarts (empty for pod-level problems).
    pub facts: ContainerFacts,
}

impl PodProblem {
    /// The report entry for this problem under `object` ("Deployment shop/web").
    pub fn to_failure(&self, object: &str) -> Failure {
        Failure {
            object: object.to_string(),
            pod: Some(self.pod.clone()),
            container: self.container.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            events: Vec::new(),
            image: self.facts.image.clone(),
            exit_code: self.facts.exit_code,
            signal: self.facts.signal.clone(),
            restarts: self.facts.restarts,
            logs: Vec::new(),
        }
    }

    /// True for ErrImagePull and ImagePullBackOff: one pull error that the kubelet shows
    /// under two reasons, judged by its message (see `pulls`).
    pub fn is_pull(&self) -> bool {
        matches!(self.reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
    }

    /// How long this problem may persist before the waiter fails the target; None for
    /// problems that never do (warnings) and Some(0) for fatal ones.
    pub fn grace(&self, policy: &FailFastConfig) -> Option<std::time::Duration> {
        match self.severity {
            Severity::Fatal => Some(std::time::Duration::ZERO),
            Severity::Warning => None,
            Severity::Transient if self.reason == "Unschedulable" => {
                Some(policy.unschedulable_grace)
            }
            Severity::Transient if self.is_pull() => Some(policy.pull_grace),
            // CrashLoopBackOff below the restart threshold: decided by restarts, not time.
            Severity::Transient => None,
        }
    }
}

/// Everything wrong with `pod` according to `policy`: waiting reasons of init and app
/// containers, and scheduling. A reason not listed in `policy.reasons` is ignored.
pub fn pod_problems(pod: &Value, policy: &FailFastConfig) -> Vec<PodProblem> {
    let pod_name = str_at(pod, &["metadata", "name"]).unwrap_or("").to_string();
    let mut problems = Vec::new();
    // A pod on its way out is replaced by its controller; what it suffers no longer matters.
    if str_at(pod, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return problems;
    }
    for field in ["initContainerStatuses", "containerStatuses"] {
        for cs in at(pod, &["status", field])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(reason) = str_at(cs, &["state", "waiting", "reason"]) else {
                continue;
            };
            if !policy.reasons.iter().any(|r| r == reason) {
                continue;
            }
            let restarts = int_at(cs, &["restartCount"]).unwrap_or(0);
            let message_now = str_at(cs, &["state", "waiting", "message"]).unwrap_or("");
            let severity = match reason {
                // A pull error fails at once only when it says the pull cannot succeed, and
                // once the kubelet backs off from it (see `pulls::judge`).
                "ImagePullBackOff" => match pulls::classify(reason, message_now) {
                    pulls::PullClass::Definitive(_) => Severity::Fatal,
                    _ => Severity::Transient,
                },
                "ErrImagePull" => Severity::Transient,
                "CrashLoopBackOff" if restarts < i64::from(policy.crash_loop_restarts) => {
                    Severity::Transient
                }
                _ => Severity::Fatal,
            };
            let facts = exits::container_facts(pod, cs);
            let (reason, message) = if reason == "CrashLoopBackOff" {
                crash_details(&facts, message_now)
            } else {
                (reason.to_string(), message_now.to_string())
            };
            problems.push(PodProblem {
                pod: pod_name.clone(),
                container: str_at(cs, &["name"]).map(str::to_string),
                reason,
                message,
                severity,
                facts,
            });
        }
    }
    if let Some(c) = condition(pod, "PodScheduled")
        && cond_field(c, "status") == "False"
        && cond_field(c, "reason") == "Unschedulable"
    {
        problems.push(PodProblem {
            pod: pod_name,
            container: None,
            reason: "Unschedulable".to_string(),
            message: cond_field(c, "message").to_string(),
            severity: match policy.unschedulable {
                UnschedulablePolicy::Warn => Severity::Warning,
                UnschedulablePolicy::Fail => Severity::Transient,
            },
            facts: ContainerFacts::default(),
        });
    }
    problems
}

/// The kubelet's CrashLoopBackOff message says only "back-off 40s restarting failed
/// container"; the last termination says why it crashed. A container killed for its memory
/// is reported as OOMKilled: the back-off is the kubelet's answer, not the cause.
fn crash_details(facts: &ContainerFacts, waiting_message: &str) -> (String, String) {
    let reason = if facts.oom_killed() {
        "OOMKilled"
    } else {
        "CrashLoopBackOff"
    };
    let message = [waiting_message.to_string(), facts.summary()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    (reason.to_string(), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Failure;
    use serde_json::json;
    use std::time::Duration;

    fn recording(name: &str) -> Value {
        let path = crate::util::shared::shared_path(&format!("apiserver-recordings/{name}"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn recorded_deployment_finds_its_new_replicaset() {
        let Some(_shared) =
            crate::util::shared::shared_for_test("recorded_deployment_finds_its_new_replicaset")
        else {
            return;
        };
        // After revision 2: two ReplicaSets, the new one at revision 2.
        let deploy = recording("02-ssa-apply2-get-after-7.5s.json");
        let list = recording("02-replicasets-list.json");
        let rss = list["items"].as_array().unwrap().clone();
        let sel = new_revision_selector(&deploy, &rss).expect("selector");
        let new_rs = rss
            .iter()
            .find(|rs| rs["metadata"]["annotations"][REVISION_ANNOTATION] == "2")
            .unwrap();
        let hash = new_rs["metadata"]["labels"]["pod-template-hash"]
            .as_str()
            .unwrap();
        assert_eq!(sel, RevisionSelector::PodTemplateHash(hash.to_string()));

        // The pod created by the ReplicaSet controller carries the hash of its ReplicaSet.
        let pod = recording("02-pod-created-by-replicaset.json");
        let pod_hash = pod["metadata"]["labels"]["pod-template-hash"]
            .as_str()
            .unwrap();
        let pod_sel = RevisionSelector::PodTemplateHash(pod_hash.to_string());
        assert!(pod_matches(&pod, &pod_sel));
        assert!(!pod_matches(
            &pod,
            &RevisionSelector::PodTemplateHash("other".into())
        ));
    }

    #[test]
    fn recorded_deployment_after_revision_4() {
        let Some(_shared) =
            crate::util::shared::shared_for_test("recorded_deployment_after_revision_4")
        else {
            return;
        };
        let deploy = recording("02-deployment-final-get.json");
        let list = recording("02-replicasets-list-after-revision-4.json");
        let rss = list["items"].as_array().unwrap().clone();
        let rev = deploy["metadata"]["annotations"][REVISION_ANNOTATION]
            .as_str()
            .unwrap();
        let sel = new_revision_selector(&deploy, &rss).expect("selector");
        let want = rss
            .iter()
            .find(|rs| rs["metadata"]["annotations"][REVISION_ANNOTATION] == rev)
            .map(|rs| {
                rs["metadata"]["labels"]["pod-template-hash"]
                    .as_str()
                    .unwrap()
                    .to_string()
            });
        assert_eq!(Some(sel), want.map(RevisionSelector::PodTemplateHash));
    }

    fn deployment(generation: i64, observed: i64, rev: Option<&str>) -> Value {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "d-1", "generation": generation, "annotations": {}},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:v2"}]}}},
            "status": {"observedGeneration": observed}});
        if let Some(r) = rev {
            d["metadata"]["annotations"][REVISION_ANNOTATION] = json!(r);
        }
        d
    }

    fn rs(hash: &str, rev: &str, owner_uid: &str, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("web-{hash}"), "labels": {"app": "web", "pod-template-hash": hash},
                "annotations": {REVISION_ANNOTATION: rev},
                "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": owner_uid, "controller": true}]},
            "spec": {"template": {"metadata": {"labels": {"app": "web", "pod-template-hash": hash}},
                "spec": {"containers": [{"name": "web", "image": image}]}}}})
    }

    fn slim(mut object: Value) -> Value {
        slim_template(&mut object);
        assert!(object["spec"].get("template").is_none());
        object
    }

    #[test]
    fn selector_table() {
        let rss = vec![
            rs("aaa", "1", "d-1", "web:v1"),
            rs("bbb", "2", "d-1", "web:v2"),
            rs("ccc", "2", "other-uid", "web:v2"),
        ];
        let sts = json!({"kind": "StatefulSet", "metadata": {"name": "db", "generation": 2},
            "status": {"observedGeneration": 2, "updateRevision": "db-7f9c", "currentRevision": "db-5d4b"}});
        let ds = json!({"kind": "DaemonSet", "metadata": {"name": "agent", "uid": "ds-1", "generation": 4},
            "status": {"observedGeneration": 4}});
        let cr = |name: &str, rev: i64, hash: Option<&str>| {
            let mut v = json!({"kind": "ControllerRevision", "revision": rev,
                "metadata": {"name": name, "labels": {}, "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "uid": "ds-1"}]}});
            if let Some(h) = hash {
                v["metadata"]["labels"]["controller-revision-hash"] = json!(h);
            }
            v
        };
        use RevisionSelector::*;
        let cases: Vec<(&str, Value, Vec<Value>, Option<RevisionSelector>)> = vec![
            (
                "by revision annotation",
                deployment(2, 2, Some("2")),
                rss.clone(),
                Some(PodTemplateHash("bbb".into())),
            ),
            (
                "by template when no annotation",
                deployment(2, 2, None),
                rss.clone(),
                Some(PodTemplateHash("bbb".into())),
            ),
            (
                "by the digests kept in place of the templates",
                slim(deployment(2, 2, None)),
                rss.iter().cloned().map(slim).collect(),
                Some(PodTemplateHash("bbb".into())),
            ),
            (
                "a kept digest against a whole template",
                deployment(2, 2, None),
                rss.iter().cloned().map(slim).collect(),
                Some(PodTemplateHash("bbb".into())),
            ),
            (
                "not observed yet",
                deployment(3, 2, Some("2")),
                rss.clone(),
                None,
            ),
            (
                "new RS not created yet",
                deployment(2, 2, Some("3")),
                vec![rss[0].clone()],
                None,
            ),
            (
                "not owned",
                deployment(2, 2, Some("2")),
                vec![rss[2].clone()],
                None,
            ),
            (
                "statefulset",
                sts,
                vec![],
                Some(ControllerRevisionHash("db-7f9c".into())),
            ),
            (
                "daemonset newest revision",
                ds.clone(),
                vec![
                    cr("agent-111", 1, Some("111")),
                    cr("agent-222", 2, Some("222")),
                ],
                Some(ControllerRevisionHash("222".into())),
            ),
            (
                "daemonset hash from name",
                ds.clone(),
                vec![cr("agent-333", 3, None)],
                Some(ControllerRevisionHash("333".into())),
            ),
            (
                "daemonset without revisions",
                ds,
                vec![],
                Some(PodTemplateGeneration(4)),
            ),
            (
                "kindless deployment and ReplicaSets from lists",
                {
                    let mut d = deployment(2, 2, Some("2"));
                    d["spec"]["strategy"] = json!({});
                    d.as_object_mut().unwrap().remove("kind");
                    d
                },
                rss.iter()
                    .map(|r| {
                        let mut r = r.clone();
                        r.as_object_mut().unwrap().remove("kind");
                        r
                    })
                    .collect(),
                Some(PodTemplateHash("bbb".into())),
            ),
        ];
        for (what, workload, owned, want) in cases {
            assert_eq!(new_revision_selector(&workload, &owned), want, "{what}");
        }
    }

    #[test]
    fn pod_matches_table() {
        let pod = json!({"metadata": {"labels": {"pod-template-hash": "bbb", "controller-revision-hash": "db-7f9c", "pod-template-generation": "4"}}});
        use RevisionSelector::*;
        assert!(pod_matches(&pod, &PodTemplateHash("bbb".into())));
        assert!(!pod_matches(&pod, &PodTemplateHash("aaa".into())));
        assert!(pod_matches(&pod, &ControllerRevisionHash("db-7f9c".into())));
        assert!(pod_matches(&pod, &PodTemplateGeneration(4)));
        assert!(!pod_matches(&pod, &PodTemplateGeneration(3)));
        assert!(!pod_matches(&json!({}), &PodTemplateHash("bbb".into())));
        assert_eq!(
            PodTemplateHash("bbb".into()).label(),
            "pod-template-hash=bbb"
        );
    }

    #[test]
    fn label_selector_table() {
        let cases = vec![
            (
                json!({"spec": {"selector": {"matchLabels": {"app": "web", "tier": "fe"}}}}),
                Some("app=web,tier=fe"),
            ),
            (
                json!({"spec": {"selector": {"matchExpressions": [
                {"key": "env", "operator": "In", "values": ["a", "b"]},
                {"key": "x", "operator": "Exists"}, {"key": "y", "operator": "DoesNotExist"},
                {"key": "z", "operator": "NotIn", "values": ["c"]}]}}}),
                Some("env in (a,b),x,!y,z notin (c)"),
            ),
            (json!({"spec": {}}), None),
        ];
        for (w, want) in cases {
            assert_eq!(label_selector(&w).as_deref(), want);
        }
    }

    fn pod_with(statuses: Value, init: Value, conditions: Value) -> Value {
        json!({"metadata": {"name": "web-7d9f-x"},
               "status": {"containerStatuses": statuses, "initContainerStatuses": init, "conditions": conditions}})
    }

    fn waiting(name: &str, reason: &str, message: &str, restarts: i64) -> Value {
        json!({"name": name, "restartCount": restarts, "state": {"waiting": {"reason": reason, "message": message}}})
    }

    type Want = Vec<(&'static str, Option<&'static str>, Severity)>;

    /// Checks `pod_problems` on each (pod, policy, wanted problems) case.
    fn check_pod_problems(cases: Vec<(Value, FailFastConfig, Want)>) {
        for (pod, policy, want) in cases {
            let got: Vec<_> = pod_problems(&pod, &policy)
                .into_iter()
                .map(|p| (p.reason.clone(), p.container.clone(), p.severity))
                .collect();
            let want: Vec<_> = want
                .into_iter()
                .map(|(r, c, s)| (r.to_string(), c.map(str::to_string), s))
                .collect();
            assert_eq!(got, want, "{pod}");
        }
    }

    /// Image pulls: fatal when the registry says not found, else transient.
    #[test]
    fn pod_problems_image_pulls() {
        let policy = FailFastConfig::default();
        use Severity::*;
        check_pod_problems(vec![
            (
                pod_with(
                    json!([waiting(
                        "web",
                        "ImagePullBackOff",
                        "Back-off pulling image \"nginx:doesnotexist\": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/library/nginx:doesnotexist\": failed to resolve reference \"docker.io/library/nginx:doesnotexist\": docker.io/library/nginx:doesnotexist: not found",
                        0
                    )]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("ImagePullBackOff", Some("web"), Fatal)],
            ),
            (
                pod_with(
                    json!([waiting(
                        "web",
                        "ImagePullBackOff",
                        "Back-off pulling image \"nginx:1.27\": ErrImagePull: pulling from host docker.io failed with status code [manifests 1.27]: 503 Service Unavailable",
                        0
                    )]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("ImagePullBackOff", Some("web"), Transient)],
            ),
            (
                pod_with(
                    json!([waiting(
                        "web",
                        "ImagePullBackOff",
                        "Back-off pulling image \"nginx:doesnotexist\"",
                        0
                    )]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("ImagePullBackOff", Some("web"), Transient)],
            ),
            (
                pod_with(
                    json!([waiting("web", "ErrImagePull", "pull failed", 0)]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("ErrImagePull", Some("web"), Transient)],
            ),
        ]);
    }

    /// Crash loops, config errors, bad image names, failing init containers.
    #[test]
    fn pod_problems_container_states() {
        let policy = FailFastConfig::default();
        use Severity::*;
        check_pod_problems(vec![
            (
                pod_with(
                    json!([waiting("web", "CrashLoopBackOff", "back-off 10s", 1)]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("CrashLoopBackOff", Some("web"), Transient)],
            ),
            (
                pod_with(
                    json!([waiting("web", "CrashLoopBackOff", "back-off 20s", 2)]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("CrashLoopBackOff", Some("web"), Fatal)],
            ),
            (
                pod_with(
                    json!([waiting(
                        "web",
                        "CreateContainerConfigError",
                        "secret \"db\" not found",
                        0
                    )]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("CreateContainerConfigError", Some("web"), Fatal)],
            ),
            (
                pod_with(
                    json!([
                        waiting("web", "InvalidImageName", "", 0),
                        waiting("side", "ContainerCreating", "", 0)
                    ]),
                    json!([]),
                    json!([]),
                ),
                policy.clone(),
                vec![("InvalidImageName", Some("web"), Fatal)],
            ),
            (
                pod_with(
                    json!([waiting("web", "PodInitializing", "", 0)]),
                    json!([waiting("init-db", "RunContainerError", "exec failed", 0)]),
                    json!([]),
                ),
                policy.clone(),
                vec![("RunContainerError", Some("init-db"), Fatal)],
            ),
        ]);
    }

    /// Unschedulable pods and the fail-fast settings.
    #[test]
    fn pod_problems_scheduling_and_policy() {
        let policy = FailFastConfig::default();
        use Severity::*;
        check_pod_problems(vec![
            (
                pod_with(
                    json!([]),
                    json!([]),
                    json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]),
                ),
                policy.clone(),
                vec![("Unschedulable", None, Warning)],
            ),
            (
                pod_with(
                    json!([]),
                    json!([]),
                    json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
                ),
                FailFastConfig {
                    unschedulable: UnschedulablePolicy::Fail,
                    ..policy.clone()
                },
                vec![("Unschedulable", None, Transient)],
            ),
            (
                pod_with(
                    json!([waiting("web", "ImagePullBackOff", "", 0)]),
                    json!([]),
                    json!([]),
                ),
                FailFastConfig {
                    reasons: vec!["CrashLoopBackOff".into()],
                    ..policy.clone()
                },
                vec![],
            ),
        ]);
    }

    /// Pods without problems, or being deleted.
    #[test]
    fn pod_problems_none() {
        let policy = FailFastConfig::default();
        check_pod_problems(vec![
            (
                json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}),
                policy.clone(),
                vec![],
            ),
            (json!({"metadata": {"name": "p"}}), policy.clone(), vec![]),
            (
                json!({"metadata": {"name": "p", "deletionTimestamp": "2026-11-30T10:00:00Z"},
                       "status": {"containerStatuses": [waiting("web", "ImagePullBackOff", "", 0)]}}),
                policy.clone(),
                vec![],
            ),
        ]);
    }

    #[test]
    fn failure_headline_from_problem() {
        let pod = pod_with(
            json!([waiting(
                "web",
                "ImagePullBackOff",
                "Back-off pulling image \"nginx:doesnotexist\"",
                0
            )]),
            json!([]),
            json!([]),
        );
        let problems = pod_problems(&pod, &FailFastConfig::default());
        let failure: Failure = problems[0].to_failure("Deployment shop/web");
        assert_eq!(
            failure.headline(),
            "Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\""
        );
    }

    #[test]
    fn crash_loop_message_says_why() {
        let mut cs = waiting(
            "web",
            "CrashLoopBackOff",
            "back-off 40s restarting failed container=web",
            3,
        );
        cs["lastState"] = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
            "startedAt": "2026-01-01T00:00:01Z", "finishedAt": "2026-01-01T00:00:03Z"}});
        let mut pod = pod_with(json!([cs.clone()]), json!([]), json!([]));
        pod["spec"]["containers"] = json!([{"name": "web", "image": "example/web:v2",
            "resources": {"limits": {"memory": "128Mi"}}}]);
        let p = &pod_problems(&pod, &FailFastConfig::default())[0];
        // Killed for its memory: reported as OOMKilled, with the limit it hit.
        assert_eq!(p.reason, "OOMKilled");
        assert_eq!(
            p.message,
            "back-off 40s restarting failed container=web; exit 137 (OOMKilled, memory limit \
             128Mi) after 2s, restarted 3 times"
        );
        let f = p.to_failure("Deployment shop/web");
        assert_eq!(
            (
                f.image.as_deref(),
                f.exit_code,
                f.signal.as_deref(),
                f.restarts
            ),
            (Some("example/web:v2"), Some(137), Some("SIGKILL"), Some(3))
        );
        // Any other exit stays a CrashLoopBackOff, with the exit said.
        cs["lastState"]["terminated"]["exitCode"] = json!(1);
        cs["lastState"]["terminated"]["reason"] = json!("Error");
        pod["status"]["containerStatuses"] = json!([cs]);
        let p = &pod_problems(&pod, &FailFastConfig::default())[0];
        assert_eq!(p.reason, "CrashLoopBackOff");
        assert_eq!(
            p.message,
            "back-off 40s restarting failed container=web; exit 1 after 2s, restarted 3 times"
        );
    }

    #[test]
    fn graces() {
        let policy = FailFastConfig::default();
        let p = |reason: &str, severity| PodProblem {
            facts: ContainerFacts::default(),
            pod: "p".into(),
            container: None,
            reason: reason.into(),
            message: String::new(),
            severity,
        };
        assert_eq!(
            p("ImagePullBackOff", Severity::Fatal).grace(&policy),
            Some(Duration::ZERO)
        );
        for pull in ["ErrImagePull", "ImagePullBackOff"] {
            assert_eq!(
                p(pull, Severity::Transient).grace(&policy),
                Some(Duration::from_secs(60)),
                "{pull}"
            );
        }
        assert_eq!(
            p("Unschedulable", Severity::Transient).grace(&policy),
            Some(Duration::from_secs(60))
        );
        assert_eq!(p("Unschedulable", Severity::Warning).grace(&policy), None);
        assert_eq!(
            p("CrashLoopBackOff", Severity::Transient).grace(&policy),
            None
        );
    }
}
