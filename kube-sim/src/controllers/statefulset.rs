//! The StatefulSet controller as a pure function: ordered pods `<name>-<ordinal>`,
//! ControllerRevisions, OrderedReady creation, rolling update from the highest ordinal down
//! to `partition`.

use serde_json::{Map, Value, json};
use std::borrow::Borrow;
use std::collections::BTreeMap;

use super::deployment::Note;
use super::meta;
use super::pods;

pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

#[derive(Debug, Default)]
pub struct StatefulSetSync {
    pub create: Vec<Value>,
    pub delete: Vec<String>,
    /// A ControllerRevision for the current template, when none exists yet.
    pub create_revision: Option<Value>,
    pub status: Value,
    pub events: Vec<Note>,
}

/// Marks which volumeClaimTemplate a claim came from (kube-sim's own label, to find the
/// pod volume it backs).
const CLAIM_TEMPLATE_LABEL: &str = "kube-sim.io/claim-template";

/// The PersistentVolumeClaims pod `ordinal` needs (`<template>-<sts>-<ordinal>`), as the
/// StatefulSet controller creates them before the pod.
pub fn claims_for(sts: &Value, ordinal: i64) -> Vec<Value> {
    let name = meta::name(sts);
    sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|template| {
            let template_name = template["metadata"]["name"].as_str().unwrap_or_default();
            let mut labels = sts["spec"]["selector"]["matchLabels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if let Some(own) = template["metadata"]["labels"].as_object() {
                labels.extend(own.clone());
            }
            labels.insert(CLAIM_TEMPLATE_LABEL.into(), json!(template_name));
            let mut spec = template["spec"].clone();
            if !spec.is_object() {
                spec = json!({});
            }
            if spec["volumeMode"].is_null() {
                spec["volumeMode"] = json!("Filesystem");
            }
            json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": format!("{template_name}-{name}-{ordinal}"),
                    "namespace": meta::namespace(sts),
                    "labels": labels,
                },
                "spec": spec,
            })
        })
        .collect()
}

/// The status of a claim once a volume is bound to it.
pub fn bound_claim_status(claim: &Value) -> Value {
    let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
    json!({
        "phase": "Bound",
        "accessModes": claim["spec"]["accessModes"],
        "capacity": {"storage": storage},
    })
}

fn add_claim_volume(pod: &mut Value, template_name: &Value, claim_name: &str) {
    if !pod["spec"]["volumes"].is_array() {
        pod["spec"]["volumes"] = json!([]);
    }
    if let Some(volumes) = pod["spec"]["volumes"].as_array_mut() {
        volumes.retain(|v| v["name"] != *template_name);
        volumes.push(
            json!({"name": template_name, "persistentVolumeClaim": {"claimName": claim_name}}),
        );
    }
}

/// The revision name `<sts>-<hash>` of the StatefulSet's current template.
pub fn update_revision(sts: &Value) -> (String, String) {
    // Always hashed with the count (0 when absent) so the first status write, which sets
    // collisionCount: 0, does not change the revision.
    let collision = sts["status"]["collisionCount"].as_i64().unwrap_or(0);
    let hash = meta::pod_template_hash(&sts["spec"]["template"], Some(collision));
    (format!("{}-{hash}", meta::name(sts)), hash)
}

fn ordinal(sts: &Value, pod: &Value) -> Option<i64> {
    meta::name(pod)
        .strip_prefix(meta::name(sts))?
        .strip_prefix('-')?
        .parse()
        .ok()
}

fn is_ready(pod: &Value) -> bool {
    pods::is_active(pod) && pods::ready_since(pod).is_some()
}

/// Pods by ordinal, for those named `<sts>-<ordinal>`.
type ByOrdinal<'a> = BTreeMap<i64, &'a Value>;

/// What one sync reads from the StatefulSet's spec before it changes anything.
struct SyncPlan<'a> {
    sts: &'a Value,
    name: &'a str,
    replicas: i64,
    update_rev: String,
    hash: String,
    parallel: bool,
    on_delete: bool,
    partition: i64,
    min_ready: i64,
}

impl<'a> SyncPlan<'a> {
    /// Reads the spec: replica count, revision, pod management and update strategy.
    fn new(sts: &'a Value) -> Self {
        let (update_rev, hash) = update_revision(sts);
        SyncPlan {
            sts,
            name: meta::name(sts),
            replicas: meta::spec_replicas(sts),
            update_rev,
            hash,
            parallel: sts["spec"]["podManagementPolicy"].as_str() == Some("Parallel"),
            on_delete: sts["spec"]["updateStrategy"]["type"].as_str() == Some("OnDelete"),
            partition: sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
                .as_i64()
                .unwrap_or(0),
            min_ready: sts["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
        }
    }

    /// Pod `<sts>-<i>` from the template, with its claims' volumes, hostname and subdomain.
    fn new_pod(&self, i: i64) -> Value {
        let (sts, name) = (self.sts, self.name);
        let pod_name = format!("{name}-{i}");
        let mut pod = pods::pod_from_template(
            sts,
            "apps/v1",
            "StatefulSet",
            &sts["spec"]["template"],
            pods::PodName::Fixed(pod_name.clone()),
            &[
                (REVISION_LABEL, self.update_rev.clone()),
                (POD_NAME_LABEL, pod_name.clone()),
                (POD_INDEX_LABEL, i.to_string()),
            ],
        );
        for claim in claims_for(sts, i) {
            let template_name = claim["metadata"]["labels"]
                .get(CLAIM_TEMPLATE_LABEL)
                .cloned()
                .unwrap_or(Value::Null);
            add_claim_volume(&mut pod, &template_name, meta::name(&claim));
        }
        pod["spec"]["hostname"] = json!(pod_name);
        if let Some(service) = sts["spec"]["serviceName"].as_str() {
            pod["spec"]["subdomain"] = json!(service);
        }
        pod
    }

    /// Creates missing pods in order; true when OrderedReady must wait (nothing more this sync).
    fn create_missing(&self, by_ordinal: &ByOrdinal, out: &mut StatefulSetSync) -> bool {
        let (name, parallel) = (self.name, self.parallel);
        let mut blocked = false;
        for i in 0..self.replicas {
            match by_ordinal.get(&i) {
                None if out.create.len() as i64 >= super::replicaset::BURST_REPLICAS => break,
                None => {
                    out.create.push(self.new_pod(i));
                    out.events.push(Note {
                        kind: "Normal",
                        reason: "SuccessfulCreate",
                        message: format!("Create Pod {name}-{i} in StatefulSet {name} successful"),
                    });
                    if !parallel {
                        blocked = true;
                        break;
                    }
                }
                Some(pod) if !parallel && !is_ready(pod) => {
                    blocked = true;
                    break;
                }
                Some(_) => {}
            }
        }
        blocked
    }

    /// Deletes pod `ordinal`, with the controller's Event.
    fn delete(&self, ordinal: i64, pod: &Value, out: &mut StatefulSetSync) {
        let name = self.name;
        out.delete.push(meta::name(pod).to_string());
        out.events.push(Note {
            kind: "Normal",
            reason: "SuccessfulDelete",
            message: format!("Delete Pod {name}-{ordinal} in StatefulSet {name} successful"),
        });
    }

    /// Scales down from the highest ordinal, one at a time unless Parallel; true if any deleted.
    fn scale_down(&self, by_ordinal: &ByOrdinal, out: &mut StatefulSetSync) -> bool {
        let mut blocked = false;
        let mut extra: Vec<(&i64, &&Value)> = by_ordinal
            .iter()
            .filter(|(i, p)| **i >= self.replicas && !meta::is_deleting(p))
            .collect();
        extra.reverse();
        let take = if self.parallel { extra.len() } else { 1 };
        for (i, pod) in extra.into_iter().take(take) {
            self.delete(*i, pod, out);
            blocked = true;
        }
        blocked
    }

    /// Deletes the highest-ordinal outdated pod at or above the partition, to be recreated.
    fn roll_one(&self, by_ordinal: &ByOrdinal, out: &mut StatefulSetSync) {
        for i in (self.partition.max(0)..self.replicas).rev() {
            if let Some(pod) = by_ordinal.get(&i)
                && meta::label(pod, REVISION_LABEL) != Some(self.update_rev.as_str())
            {
                self.delete(i, pod, out);
                break;
            }
        }
    }

    /// The status, counting the pods this sync keeps; currentRevision catches up when all updated.
    fn status(
        &self,
        by_ordinal: &ByOrdinal,
        delete: &[String],
        current_rev: String,
        now: jiff::Timestamp,
    ) -> Value {
        let (sts, replicas, update_rev) = (self.sts, self.replicas, &self.update_rev);
        let live: Vec<&Value> = by_ordinal
            .values()
            .copied()
            .filter(|p| pods::is_active(p) && !delete.iter().any(|d| d == meta::name(p)))
            .collect();
        let count = |rev: &str| {
            live.iter()
                .filter(|p| meta::label(p, REVISION_LABEL) == Some(rev))
                .count() as i64
        };
        let ready = live.iter().filter(|p| is_ready(p)).count() as i64;
        let available = live
            .iter()
            .filter(|p| pods::availability(p, self.min_ready, now).is_ok())
            .count() as i64;
        let updated = count(update_rev);
        let mut current = count(&current_rev);
        let mut current_rev = current_rev;
        let replicas_now = live.len() as i64;
        if updated == replicas && ready == replicas && replicas_now == replicas {
            current_rev = update_rev.clone();
            current = updated;
        }
        let mut status = Map::new();
        meta::put_nonzero(&mut status, "observedGeneration", meta::generation(sts));
        status.insert("replicas".into(), json!(replicas_now));
        meta::put_nonzero(&mut status, "readyReplicas", ready);
        meta::put_nonzero(&mut status, "currentReplicas", current);
        meta::put_nonzero(&mut status, "updatedReplicas", updated);
        status.insert("currentRevision".into(), json!(current_rev));
        status.insert("updateRevision".into(), json!(update_rev));
        status.insert(
            "collisionCount".into(),
            json!(sts["status"]["collisionCount"].as_i64().unwrap_or(0)),
        );
        status.insert("availableReplicas".into(), json!(available));
        Value::Object(status)
    }
}

/// One sync of a StatefulSet against its pods and ControllerRevisions.
pub fn reconcile<P: Borrow<Value>, R: Borrow<Value>>(
    sts: &Value,
    owned_pods: &[P],
    revisions: &[R],
    now: jiff::Timestamp,
) -> StatefulSetSync {
    let owned_pods: Vec<&Value> = owned_pods.iter().map(Borrow::borrow).collect();
    let revisions: Vec<&Value> = revisions.iter().map(Borrow::borrow).collect();
    let mut out = StatefulSetSync::default();
    if !meta::well_formed(sts) {
        return out;
    }
    let plan = SyncPlan::new(sts);

    if let Some(revision) = meta::new_controller_revision(
        sts,
        "StatefulSet",
        &plan.update_rev,
        "controller.kubernetes.io/hash",
        &plan.hash,
        &revisions,
    ) {
        out.create_revision = Some(revision);
    }
    let current_rev = sts["status"]["currentRevision"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| plan.update_rev.clone());

    let mut by_ordinal: ByOrdinal = Default::default();
    for pod in owned_pods {
        if let Some(i) = ordinal(sts, pod) {
            by_ordinal.insert(i, pod);
        }
    }

    let mut blocked = plan.create_missing(&by_ordinal, &mut out);
    if !blocked {
        blocked = plan.scale_down(&by_ordinal, &mut out);
    }
    // Rolling update: highest ordinal first, down to the partition, one pod at a time, only
    // when every pod is Ready.
    let all_ready = (0..plan.replicas).all(|i| by_ordinal.get(&i).is_some_and(|p| is_ready(p)));
    if !blocked && !plan.on_delete && all_ready {
        plan.roll_one(&by_ordinal, &mut out);
    }

    out.status = plan.status(&by_ordinal, &out.delete, current_rev, now);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No owned objects.
    const NONE: &[Value] = &[];

    fn sts(replicas: i64, image: &str, partition: i64) -> Value {
        json!({
            "metadata": {"name": "db", "namespace": "ns", "uid": "s1", "generation": 1},
            "spec": {"replicas": replicas, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": image}]}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}},
            "status": {}
        })
    }

    fn ready(mut pod: Value) -> Value {
        pod["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T08:00:00Z"}]});
        pod
    }

    fn now() -> jiff::Timestamp {
        "2026-11-30T08:05:00Z".parse().unwrap()
    }

    /// Runs syncs, making every pod ready right away, until nothing changes.
    fn converge(
        set: &mut Value,
        pods: &mut Vec<Value>,
        revisions: &mut Vec<Value>,
        order: &mut Vec<String>,
    ) {
        for _ in 0..50 {
            let out = reconcile(set, pods, revisions, now());
            if let Some(r) = out.create_revision.clone() {
                revisions.push(r);
            }
            let quiet = out.create.is_empty() && out.delete.is_empty();
            pods.retain(|p| !out.delete.iter().any(|d| d == meta::name(p)));
            for p in out.create {
                order.push(meta::name(&p).to_string());
                pods.push(ready(p));
            }
            set["status"] = out.status;
            if quiet {
                return;
            }
        }
        panic!("did not converge");
    }

    #[test]
    fn pods_are_created_one_by_one_in_order() {
        let set = sts(3, "db:1", 0);
        let out = reconcile(&set, NONE, NONE, now());
        assert_eq!(
            out.create.len(),
            1,
            "OrderedReady creates one pod at a time"
        );
        let pod = &out.create[0];
        assert_eq!(meta::name(pod), "db-0");
        assert_eq!(pod["spec"]["hostname"], "db-0");
        assert_eq!(pod["spec"]["subdomain"], "db");
        assert_eq!(meta::label(pod, POD_INDEX_LABEL), Some("0"));
        let revision = out.create_revision.expect("a ControllerRevision");
        assert_eq!(
            meta::label(pod, REVISION_LABEL),
            Some(meta::name(&revision))
        );
        assert_eq!(revision["revision"], 1);
        // db-0 not ready yet: no db-1.
        let out = reconcile(&set, std::slice::from_ref(pod), &[revision], now());
        assert!(out.create.is_empty());

        let (mut set, mut pods, mut revisions, mut order) = (set, vec![], vec![], vec![]);
        converge(&mut set, &mut pods, &mut revisions, &mut order);
        assert_eq!(order, ["db-0", "db-1", "db-2"]);
        assert_eq!(set["status"]["readyReplicas"], 3);
        assert_eq!(
            set["status"]["currentRevision"],
            set["status"]["updateRevision"]
        );
    }

    #[test]
    fn rolling_update_goes_down_to_the_partition() {
        let (mut set, mut pods, mut revisions, mut order) =
            (sts(4, "db:1", 0), vec![], vec![], vec![]);
        converge(&mut set, &mut pods, &mut revisions, &mut order);
        let first_rev = set["status"]["currentRevision"]
            .as_str()
            .unwrap()
            .to_string();
        set["spec"]["template"]["spec"]["containers"][0]["image"] = json!("db:2");
        set["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
        order.clear();
        converge(&mut set, &mut pods, &mut revisions, &mut order);
        assert_eq!(
            order,
            ["db-3", "db-2"],
            "highest ordinal first, stop at the partition"
        );
        assert_eq!(set["status"]["updatedReplicas"], 2);
        assert_eq!(set["status"]["currentReplicas"], 2);
        assert_eq!(set["status"]["currentRevision"], first_rev.as_str());
        assert_ne!(set["status"]["updateRevision"], first_rev.as_str());
        set["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(0);
        order.clear();
        converge(&mut set, &mut pods, &mut revisions, &mut order);
        assert_eq!(order, ["db-1", "db-0"]);
        assert_eq!(
            set["status"]["currentRevision"],
            set["status"]["updateRevision"]
        );
        assert_eq!(set["status"]["currentReplicas"], 4);
    }

    #[test]
    fn volume_claim_templates_give_each_pod_its_claim() {
        let mut set = sts(2, "db:1", 0);
        set["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
        let claims = claims_for(&set, 1);
        assert_eq!(meta::name(&claims[0]), "data-db-1");
        assert_eq!(claims[0]["metadata"]["labels"]["app"], "db");
        assert_eq!(bound_claim_status(&claims[0])["capacity"]["storage"], "1Gi");
        let out = reconcile(&set, NONE, NONE, now());
        let volumes = out.create[0]["spec"]["volumes"].as_array().unwrap();
        assert_eq!(
            volumes[0],
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}})
        );
    }

    #[test]
    fn scale_down_removes_the_highest_ordinal_first() {
        let (mut set, mut pods, mut revisions, mut order) =
            (sts(3, "db:1", 0), vec![], vec![], vec![]);
        converge(&mut set, &mut pods, &mut revisions, &mut order);
        set["spec"]["replicas"] = json!(1);
        let out = reconcile(&set, &pods, &revisions, now());
        assert_eq!(out.delete, ["db-2"]);
    }
}
