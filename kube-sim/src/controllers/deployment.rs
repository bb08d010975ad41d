//! The deployment controller as a pure function: Deployment + its ReplicaSets -> what to
//! create, scale and delete, and the Deployment's new status, as kube-controller-manager
//! computes them (rolling update with maxSurge/maxUnavailable, Recreate, progress deadline,
//! revisions and rollback by template).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::meta::{self, annotation, find_condition, int_or_percent, put_nonzero};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const HASH_LABEL: &str = "pod-template-hash";

/// Annotations of a Deployment that are not copied to its ReplicaSets.
const NOT_COPIED: [&str; 5] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS,
    MAX_REPLICAS,
];

/// An event the controller records about the Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub kind: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What one sync of a Deployment decides.
#[derive(Debug, Default)]
pub struct DeploymentSync {
    /// The Deployment's `deployment.kubernetes.io/revision` annotation, when it must change.
    pub revision: Option<String>,
    /// A new ReplicaSet to create.
    pub create: Option<Value>,
    /// The status written right after creating a ReplicaSet (condition NewReplicaSetCreated),
    /// before the full status, as the real controller does.
    pub early_status: Option<Value>,
    /// Existing ReplicaSets with a new `spec.replicas` and/or annotations.
    pub update: Vec<Value>,
    /// Old ReplicaSets beyond `revisionHistoryLimit`, to delete.
    pub delete: Vec<String>,
    pub status: Value,
    pub events: Vec<Note>,
    /// Sync again after this long (progress deadline check), if nothing else happens first.
    pub requeue_after: Option<Duration>,
}

fn revision_of(rs: &Value) -> i64 {
    annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn is_rolling(dep: &Value) -> bool {
    dep["spec"]["strategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        != "Recreate"
}

/// maxSurge and maxUnavailable resolved against `replicas` (surge rounds up, unavailable
/// down; both zero means one unavailable), as Kubernetes' `ResolveFenceposts`.
pub fn fenceposts(dep: &Value) -> (i64, i64) {
    if !is_rolling(dep) {
        return (0, 0);
    }
    let replicas = meta::spec_replicas(dep);
    let rolling = &dep["spec"]["strategy"]["rollingUpdate"];
    let surge = int_or_percent(&rolling["maxSurge"], replicas, true, "25%");
    let unavailable = int_or_percent(&rolling["maxUnavailable"], replicas, false, "25%");
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

fn max_unavailable(dep: &Value) -> i64 {
    let replicas = meta::spec_replicas(dep);
    if !is_rolling(dep) || replicas == 0 {
        return 0;
    }
    fenceposts(dep).1.min(replicas)
}

fn condition(kind: &str, status: &str, reason: &str, message: String, now: &str) -> Value {
    json!({
        "type": kind,
        "status": status,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}

/// Kubernetes' `SetDeploymentCondition`: no change if status and reason are equal; keeps the
/// transition time when only the reason changes; moves the condition to the end.
fn set_condition(conditions: &mut Vec<Value>, mut cond: Value) {
    let kind = cond["type"].as_str().unwrap_or_default().to_string();
    if let Some(current) = find_condition(conditions, &kind) {
        if current["status"] == cond["status"] && current["reason"] == cond["reason"] {
            return;
        }
        if current["status"] == cond["status"] {
            cond["lastTransitionTime"] = current["lastTransitionTime"].clone();
        }
    }
    conditions.retain(|c| c["type"] != kind.as_str());
    conditions.push(cond);
}

/// The pod template of a ReplicaSet without the hash label, for comparing with the
/// Deployment's template.
fn template_without_hash(rs: &Value) -> Value {
    let mut template = rs["spec"]["template"].clone();
    if let Some(labels) = template["metadata"]["labels"].as_object_mut() {
        labels.remove(HASH_LABEL);
    }
    template
}

fn labels_without_hash_equal(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove(HASH_LABEL);
            if m.is_empty() {
                return Value::Null;
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// Is `rs` running the Deployment's current template?
fn is_new_rs(dep: &Value, rs: &Value, hash: &str) -> bool {
    if meta::label(rs, HASH_LABEL) == Some(hash) {
        return true;
    }
    let mut ours = dep["spec"]["template"].clone();
    let mut theirs = template_without_hash(rs);
    let ours_labels = ours["metadata"]["labels"].take();
    let theirs_labels = theirs["metadata"]["labels"].take();
    ours == theirs && labels_without_hash_equal(&ours_labels, &theirs_labels)
}

/// Deployment annotations copied to ReplicaSets, plus the replica annotations.
fn rs_annotations(
    dep: &Value,
    existing: &Value,
    revision: i64,
    replicas: i64,
    surge: i64,
) -> Value {
    let mut out: BTreeMap<String, Value> = existing
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if let Some(theirs) = dep["metadata"]["annotations"].as_object() {
        for (k, v) in theirs {
            if !NOT_COPIED.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert(DESIRED_REPLICAS.into(), json!(replicas.to_string()));
    out.insert(MAX_REPLICAS.into(), json!((replicas + surge).to_string()));
    out.insert(REVISION.into(), json!(revision.to_string()));
    Value::Object(out.into_iter().collect())
}

fn set_replica_annotations(rs: &mut Value, replicas: i64, surge: i64) {
    if !rs["metadata"]["annotations"].is_object() {
        rs["metadata"]["annotations"] = json!({});
    }
    let annotations = &mut rs["metadata"]["annotations"];
    annotations[DESIRED_REPLICAS] = json!(replicas.to_string());
    annotations[MAX_REPLICAS] = json!((replicas + surge).to_string());
    // Keep Go's sorted map order.
    if let Some(map) = annotations.as_object() {
        let sorted: BTreeMap<String, Value> =
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        *annotations = Value::Object(sorted.into_iter().collect());
    }
}

fn new_replica_set(dep: &Value, hash: &str, replicas: i64, annotations: Value) -> Value {
    let mut template = dep["spec"]["template"].clone();
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = dep["spec"]["selector"].clone();
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let mut spec = Map::new();
    spec.insert("replicas".into(), json!(replicas));
    if let Some(min_ready) = dep["spec"]["minReadySeconds"].as_i64().filter(|&m| m > 0) {
        spec.insert("minReadySeconds".into(), json!(min_ready));
    }
    spec.insert("selector".into(), selector);
    spec.insert("template".into(), template.clone());
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", meta::name(dep)),
            "namespace": meta::namespace(dep),
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
            "ownerReferences": [meta::controller_ref(dep, "apps/v1", "Deployment")],
        },
        "spec": spec,
    })
}

struct Counts {
    /// Sum of the ReplicaSets' `spec.replicas` as read at the start of the sync (what
    /// Kubernetes counts unavailable replicas against).
    desired: i64,
    replicas: i64,
    updated: i64,
    ready: i64,
    available: i64,
    terminating: i64,
}

fn counts(all: &[&Value], new_rs: Option<&Value>) -> Counts {
    let sum = |field: &str| {
        all.iter()
            .map(|rs| meta::status_i64(rs, field))
            .sum::<i64>()
    };
    Counts {
        desired: all.iter().map(|rs| meta::spec_replicas(rs)).sum(),
        replicas: sum("replicas"),
        updated: new_rs.map_or(0, |rs| meta::status_i64(rs, "replicas")),
        ready: sum("readyReplicas"),
        available: sum("availableReplicas"),
        terminating: sum("terminatingReplicas"),
    }
}

/// One sync of a Deployment against the ReplicaSets it controls.
pub fn reconcile<P: Borrow<Value>>(
    dep: &Value,
    owned: &[P],
    now: jiff::Timestamp,
) -> DeploymentSync {
    let mut out = DeploymentSync::default();
    if !meta::well_formed(dep) {
        return out;
    }
    let owned: Vec<&Value> = owned
        .iter()
        .map(Borrow::borrow)
        .filter(|rs| meta::well_formed(rs))
        .collect();
    let plan = SyncPlan::new(dep, now);
    let live: Vec<&Value> = owned
        .iter()
        .copied()
        .filter(|rs| !meta::is_deleting(rs))
        .collect();
    let new_existing = live
        .iter()
        .copied()
        .find(|rs| is_new_rs(dep, rs, &plan.hash));
    let mut olds: Vec<Value> = live
        .iter()
        .filter(|rs| new_existing.is_none_or(|n| meta::uid(n) != meta::uid(rs)))
        .map(|rs| (*rs).clone())
        .collect();
    olds.sort_by_key(|rs| (meta::creation_time(rs), meta::name(rs).to_string()));
    let max_old_revision = olds.iter().map(revision_of).max().unwrap_or(0);
    let mut conditions: Vec<Value> = dep["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();

    let mut new_rs =
        new_existing.map(|rs| sync_new_rs(&plan, rs, max_old_revision, &mut conditions, &mut out));
    let mut desired: BTreeMap<String, i64> = live
        .iter()
        .map(|rs| (meta::name(rs).to_string(), meta::spec_replicas(rs)))
        .collect();
    let mut scale = Scale {
        olds: &olds,
        max_old_revision,
        new_rs: &mut new_rs,
        desired: &mut desired,
        conditions: &mut conditions,
        out: &mut out,
    };
    if plan.paused {
        set_condition(
            scale.conditions,
            condition(
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
                &plan.now_text,
            ),
        );
    } else if is_rolling(dep) {
        scale_rolling(&plan, &mut scale);
    } else {
        scale_recreate(&plan, &mut scale);
    }

    let mut all_for_status = emit_updates(&plan, &live, new_rs.as_ref(), &desired, &mut out);
    size_created(&desired, &mut out);
    out.delete = history_to_delete(&plan, &olds, &desired);
    let new_for_status = out.create.as_ref().or(new_existing);
    if let Some(created) = out.create.as_ref() {
        all_for_status.push(created);
    }
    let c = counts(&all_for_status, new_for_status);
    let target = match new_for_status {
        Some(rs) => format!("ReplicaSet \"{}\"", meta::name(rs)),
        None => format!("Deployment \"{}\"", meta::name(dep)),
    };
    out.status = rollout_status(&plan, &c, &target, conditions, &mut out.requeue_after);
    out
}

/// What one sync reads from the Deployment before it changes anything.
struct SyncPlan<'a> {
    dep: &'a Value,
    now: jiff::Timestamp,
    now_text: String,
    replicas: i64,
    surge: i64,
    collision: Option<i64>,
    hash: String,
    paused: bool,
    has_deadline: bool,
}

impl<'a> SyncPlan<'a> {
    fn new(dep: &'a Value, now: jiff::Timestamp) -> Self {
        let collision = dep["status"]["collisionCount"].as_i64();
        SyncPlan {
            dep,
            now,
            now_text: crate::model::clock::format_time(now),
            replicas: meta::spec_replicas(dep),
            surge: fenceposts(dep).0,
            collision,
            hash: meta::pod_template_hash(&dep["spec"]["template"], collision),
            paused: dep["spec"]["paused"].as_bool() == Some(true),
            has_deadline: dep["spec"]["progressDeadlineSeconds"].as_i64().is_some(),
        }
    }
}

/// The existing new ReplicaSet with its annotations synced (revision bumped on
/// rollback) and minReadySeconds following the Deployment.
fn sync_new_rs(
    plan: &SyncPlan,
    existing: &Value,
    max_old_revision: i64,
    conditions: &mut Vec<Value>,
    out: &mut DeploymentSync,
) -> Value {
    let dep = plan.dep;
    let mut rs = existing.clone();
    let mut revision = revision_of(&rs);
    if revision <= max_old_revision {
        revision = max_old_revision + 1;
    }
    rs["metadata"]["annotations"] = rs_annotations(
        dep,
        &rs["metadata"]["annotations"],
        revision,
        plan.replicas,
        plan.surge,
    );
    // minReadySeconds follows the Deployment without a new ReplicaSet.
    let min_ready = dep["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    if rs["spec"]["minReadySeconds"].as_i64().unwrap_or(0) != min_ready {
        if min_ready > 0 {
            rs["spec"]["minReadySeconds"] = json!(min_ready);
        } else if let Some(spec) = rs["spec"].as_object_mut() {
            spec.remove("minReadySeconds");
        }
    }
    if annotation(dep, REVISION) != Some(revision.to_string().as_str()) {
        out.revision = Some(revision.to_string());
    }
    if plan.has_deadline && find_condition(conditions, "Progressing").is_none() && !plan.paused {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "True",
                "FoundNewReplicaSet",
                format!("Found new replica set \"{}\"", meta::name(&rs)),
                &plan.now_text,
            ),
        );
    }
    rs
}

/// The state the scaling step changes.
struct Scale<'s> {
    olds: &'s [Value],
    max_old_revision: i64,
    new_rs: &'s mut Option<Value>,
    desired: &'s mut BTreeMap<String, i64>,
    conditions: &'s mut Vec<Value>,
    out: &'s mut DeploymentSync,
}

impl Scale<'_> {
    /// Creates the new ReplicaSet with `initial` replicas.
    fn create_new(&mut self, plan: &SyncPlan, initial: i64) {
        let revision = self.max_old_revision + 1;
        let annotations =
            rs_annotations(plan.dep, &Value::Null, revision, plan.replicas, plan.surge);
        let rs = new_replica_set(plan.dep, &plan.hash, initial, annotations);
        self.desired.insert(meta::name(&rs).to_string(), initial);
        created(
            self.out,
            self.conditions,
            plan.dep,
            &rs,
            revision,
            &plan.now_text,
        );
        *self.new_rs = Some(rs);
    }
}

/// RollingUpdate: the new ReplicaSet up within the surge, then the old ones down.
fn scale_rolling(plan: &SyncPlan, s: &mut Scale) {
    let replicas = plan.replicas;
    let total_desired = |desired: &BTreeMap<String, i64>| desired.values().sum::<i64>();
    if s.new_rs.is_none() {
        let current = total_desired(s.desired);
        let initial = (replicas + plan.surge - current).clamp(0, replicas);
        s.create_new(plan, initial);
    }
    let new_name = s
        .new_rs
        .as_ref()
        .map(|rs| meta::name(rs).to_string())
        .unwrap_or_default();
    let new_current = s.desired.get(&new_name).copied().unwrap_or(0);
    // reconcileNewReplicaSet
    let mut scaled_up = false;
    if new_current > replicas {
        s.desired.insert(new_name.clone(), replicas);
    } else if new_current < replicas {
        let max_total = replicas + plan.surge;
        let current = total_desired(s.desired);
        if current < max_total {
            let up = (max_total - current).min(replicas - new_current);
            s.desired.insert(new_name.clone(), new_current + up);
            scaled_up = s.out.create.is_none();
        }
    }
    // reconcileOldReplicaSets (only when the new one was not scaled up in this sync)
    if !scaled_up {
        scale_down_old(plan.dep, s.olds, s.new_rs.as_ref(), s.desired, replicas);
    }
}

/// Recreate: old ReplicaSets to zero, wait for their pods to go, then the new one up.
fn scale_recreate(plan: &SyncPlan, s: &mut Scale) {
    let mut scaled_down = false;
    for rs in s.olds {
        if s.desired.get(meta::name(rs)).copied().unwrap_or(0) > 0 {
            s.desired.insert(meta::name(rs).to_string(), 0);
            scaled_down = true;
        }
    }
    let old_pods_running = s.olds.iter().any(|rs| meta::status_i64(rs, "replicas") > 0);
    if scaled_down || old_pods_running {
        return;
    }
    match s.new_rs.as_ref().map(|rs| meta::name(rs).to_string()) {
        None => s.create_new(plan, plan.replicas),
        Some(name) => {
            s.desired.insert(name, plan.replicas);
        }
    }
}

/// Emits updates for every existing ReplicaSet whose replicas or annotations change;
/// returns the live ReplicaSets as read, for the status.
fn emit_updates<'v>(
    plan: &SyncPlan,
    live: &[&'v Value],
    new_rs: Option<&Value>,
    desired: &BTreeMap<String, i64>,
    out: &mut DeploymentSync,
) -> Vec<&'v Value> {
    let mut all_for_status: Vec<&Value> = Vec::new();
    for rs in live.iter().copied() {
        let name = meta::name(rs);
        let is_new = new_rs.is_some_and(|n| meta::name(n) == name);
        let mut updated = if is_new {
            new_rs.cloned().unwrap_or_else(|| rs.clone())
        } else {
            rs.clone()
        };
        let before = meta::spec_replicas(rs);
        let after = desired.get(name).copied().unwrap_or(before);
        if before != after {
            updated["spec"]["replicas"] = json!(after);
            set_replica_annotations(&mut updated, plan.replicas, plan.surge);
            let direction = if after > before {
                "Scaled up"
            } else {
                "Scaled down"
            };
            out.events.push(Note {
                kind: "Normal",
                reason: "ScalingReplicaSet",
                message: format!("{direction} replica set {name} from {before} to {after}"),
            });
        }
        if updated != *rs {
            out.update.push(updated);
        }
        all_for_status.push(rs);
    }
    all_for_status
}

/// Gives a ReplicaSet created in this sync the replicas the scaling step chose.
fn size_created(desired: &BTreeMap<String, i64>, out: &mut DeploymentSync) {
    let Some(created) = out.create.as_mut() else {
        return;
    };
    let name = meta::name(created).to_string();
    let initial = meta::spec_replicas(created);
    let wanted = desired.get(&name).copied().unwrap_or(initial);
    created["spec"]["replicas"] = json!(wanted);
    if wanted > 0 {
        out.events.push(Note {
            kind: "Normal",
            reason: "ScalingReplicaSet",
            message: format!("Scaled up replica set {name} from 0 to {wanted}"),
        });
    }
}

/// Revision history: the oldest idle ReplicaSets beyond the limit, to delete.
fn history_to_delete(
    plan: &SyncPlan,
    olds: &[Value],
    desired: &BTreeMap<String, i64>,
) -> Vec<String> {
    let limit = plan.dep["spec"]["revisionHistoryLimit"]
        .as_i64()
        .unwrap_or(10)
        .max(0) as usize;
    let mut idle: Vec<&Value> = olds
        .iter()
        .filter(|rs| {
            desired.get(meta::name(rs)).copied().unwrap_or(0) == 0
                && meta::status_i64(rs, "replicas") == 0
        })
        .collect();
    if idle.len() <= limit || plan.paused {
        return Vec::new();
    }
    idle.sort_by_key(|rs| revision_of(rs));
    let excess = idle.len() - limit;
    idle[..excess]
        .iter()
        .map(|rs| meta::name(rs).to_string())
        .collect()
}

/// Status (calculateStatus + syncRolloutStatus); sets `requeue_after` while the
/// progress deadline runs.
fn rollout_status(
    plan: &SyncPlan,
    c: &Counts,
    target: &str,
    mut conditions: Vec<Value>,
    requeue_after: &mut Option<Duration>,
) -> Value {
    let dep = plan.dep;
    let mut status = Map::new();
    put_nonzero(&mut status, "observedGeneration", meta::generation(dep));
    put_nonzero(&mut status, "replicas", c.replicas);
    put_nonzero(&mut status, "updatedReplicas", c.updated);
    put_nonzero(&mut status, "readyReplicas", c.ready);
    put_nonzero(&mut status, "availableReplicas", c.available);
    put_nonzero(
        &mut status,
        "unavailableReplicas",
        (c.desired - c.available).max(0),
    );
    status.insert("terminatingReplicas".into(), json!(c.terminating));
    set_condition(&mut conditions, available_condition(plan, c));
    if !plan.has_deadline {
        conditions.retain(|c| c["type"] != "Progressing");
    } else if !plan.paused {
        progress(plan, c, target, &mut conditions, requeue_after);
    }
    status.insert("conditions".into(), Value::Array(conditions));
    if let Some(collision) = plan.collision {
        status.insert("collisionCount".into(), json!(collision));
    }
    Value::Object(status)
}

fn available_condition(plan: &SyncPlan, c: &Counts) -> Value {
    if c.available >= plan.replicas - max_unavailable(plan.dep) {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            &plan.now_text,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            &plan.now_text,
        )
    }
}

/// The Progressing condition: complete, progressing, or past its deadline.
fn progress(
    plan: &SyncPlan,
    c: &Counts,
    target: &str,
    conditions: &mut Vec<Value>,
    requeue_after: &mut Option<Duration>,
) {
    let (dep, replicas, now, now_text) = (plan.dep, plan.replicas, plan.now, &plan.now_text);
    let complete = c.updated == replicas && c.replicas == replicas && c.available == replicas;
    let current = find_condition(conditions, "Progressing").cloned();
    let old = &dep["status"];
    let old_old = meta::status_i64(dep, "replicas") - meta::status_i64(dep, "updatedReplicas");
    let progressing = c.updated > old["updatedReplicas"].as_i64().unwrap_or(0)
        || c.replicas - c.updated < old_old
        || c.ready > old["readyReplicas"].as_i64().unwrap_or(0)
        || c.available > old["availableReplicas"].as_i64().unwrap_or(0);
    if complete {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                format!("{target} has successfully progressed."),
                now_text,
            ),
        );
    } else if progressing {
        let mut cond = condition(
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("{target} is progressing."),
            now_text,
        );
        if let Some(cur) = &current {
            if cur["status"] == "True" {
                cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
            }
            conditions.retain(|c| c["type"] != "Progressing");
        }
        set_condition(conditions, cond);
    } else if deadline_remaining(dep, conditions, now).is_some_and(|r| r.is_zero()) {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("{target} has timed out progressing."),
                now_text,
            ),
        );
    }
    if !complete
        && let Some(remaining) = deadline_remaining(dep, conditions, now)
        && !remaining.is_zero()
    {
        *requeue_after = Some(remaining + Duration::from_secs(1));
    }
}

/// Time left before the progress deadline passes (zero once passed), or None when no
/// deadline applies (no condition, complete, or already timed out).
fn deadline_remaining(dep: &Value, conditions: &[Value], now: jiff::Timestamp) -> Option<Duration> {
    let deadline = dep["spec"]["progressDeadlineSeconds"].as_i64()?;
    let cond = find_condition(conditions, "Progressing")?;
    match cond["reason"].as_str() {
        Some("NewReplicaSetAvailable")
        | Some("ProgressDeadlineExceeded")
        | Some("DeploymentPaused") => None,
        _ => {
            let from = meta::parse_time(&cond["lastUpdateTime"])?;
            let until = meta::add(from, Duration::from_secs(deadline.max(0) as u64));
            // Timed out strictly after the deadline, as Kubernetes' `Before`.
            if until < now {
                Some(Duration::ZERO)
            } else {
                Some(meta::since(until, now).max(Duration::from_millis(1)))
            }
        }
    }
}

/// Records a ReplicaSet created in this sync: the revision, and the NewReplicaSetCreated
/// condition written at once (before the full status), as the real controller does.
fn created(
    out: &mut DeploymentSync,
    conditions: &mut Vec<Value>,
    dep: &Value,
    rs: &Value,
    revision: i64,
    now: &str,
) {
    out.create = Some(rs.clone());
    if annotation(dep, REVISION) != Some(revision.to_string().as_str()) {
        out.revision = Some(revision.to_string());
    }
    if dep["spec"]["progressDeadlineSeconds"].as_i64().is_some() {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set \"{}\"", meta::name(rs)),
                now,
            ),
        );
        let mut early = dep["status"].as_object().cloned().unwrap_or_default();
        early.insert("conditions".into(), Value::Array(conditions.clone()));
        out.early_status = Some(Value::Object(early));
    }
}

/// reconcileOldReplicaSets: scale old ReplicaSets down without going below
/// `replicas - maxUnavailable` available pods (unhealthy ones first).
fn scale_down_old(
    dep: &Value,
    olds: &[Value],
    new_rs: Option<&Value>,
    desired: &mut BTreeMap<String, i64>,
    replicas: i64,
) {
    let old_total: i64 = olds
        .iter()
        .map(|rs| desired.get(meta::name(rs)).copied().unwrap_or(0))
        .sum();
    if old_total == 0 {
        return;
    }
    let all_total: i64 = desired.values().sum();
    let min_available = replicas - max_unavailable(dep);
    let new_unavailable = new_rs.map_or(0, |rs| {
        let name = meta::name(rs);
        (desired.get(name).copied().unwrap_or(0) - meta::status_i64(rs, "availableReplicas")).max(0)
    });
    let max_scaled_down = all_total - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return;
    }
    // cleanupUnhealthyReplicas: oldest first.
    let mut budget = max_scaled_down;
    for rs in olds {
        if budget == 0 {
            break;
        }
        let name = meta::name(rs);
        let current = desired.get(name).copied().unwrap_or(0);
        let unhealthy = (current - meta::status_i64(rs, "availableReplicas")).max(0);
        let down = unhealthy.min(budget);
        if down > 0 {
            desired.insert(name.to_string(), current - down);
            budget -= down;
        }
    }
    // scaleDownOldReplicaSetsForRollingUpdate: keep at least min_available available.
    let mut available: i64 = olds
        .iter()
        .map(|rs| meta::status_i64(rs, "availableReplicas"))
        .sum();
    available += new_rs.map_or(0, |rs| meta::status_i64(rs, "availableReplicas"));
    if available <= min_available {
        return;
    }
    let mut remaining = available - min_available;
    for rs in olds {
        if remaining == 0 {
            break;
        }
        let name = meta::name(rs);
        let current = desired.get(name).copied().unwrap_or(0);
        let down = current.min(remaining);
        if down > 0 {
            desired.insert(name.to_string(), current - down);
            remaining -= down;
        }
    }
}

#[cfg(test)]
mod tests;
