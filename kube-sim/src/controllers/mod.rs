//! The controllers and the kubelet stand-in of one simulated cluster.
//!
//! One task per cluster wakes on store events and on timers (time-driven transitions such
//! as a pod becoming Ready or a progress deadline), reconciles only the objects an event
//! touches (the object, its controlling owner, pods waiting for a ConfigMap), and writes
//! through the store as `kube-controller-manager` (workloads) or `kubelet` (pod status).
//! The decisions themselves are pure functions in the submodules.

pub mod crd;
pub mod daemonset;
pub mod deployment;
pub mod events;
pub mod job;
pub mod meta;
pub mod nodes;
pub mod pods;
pub mod replicaset;
pub mod statefulset;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::rules::{self, Rule};
use crate::store::{EventKind, ResourceType, Store, WatchEvent};

use deployment::Note;
use events::EventSpec;

/// What the controllers of one cluster need besides the store.
#[derive(Clone, Debug)]
pub struct ControllerContext {
    /// The cluster's name (kubeconfig context, e.g. `sim-2`), for per-cluster rules.
    pub cluster_name: String,
    pub clock: Clock,
    pub rules: Arc<Vec<Rule>>,
}

const CONTROLLER_MANAGER: &str = "kube-controller-manager";
const KUBELET: &str = "kubelet";

/// Starts the controllers and kubelet of one cluster. The task runs until aborted.
pub fn spawn(store: Arc<Store>, ctx: ControllerContext) -> tokio::task::JoinHandle<()> {
    // Subscribe before the first scan so no event falls between the two.
    let rx = store.subscribe();
    tokio::spawn(async move {
        let mut runner = Runner::new(store, ctx);
        runner.run(rx).await;
    })
}

/// The kinds the controllers act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Crd,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    ControllerRevision,
    Pod,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::Crd,
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::StatefulSet,
        Kind::DaemonSet,
        Kind::Job,
        Kind::ControllerRevision,
        Kind::Pod,
    ];

    fn rt(self) -> ResourceType {
        match self {
            Kind::Crd => {
                ResourceType::new("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            }
            Kind::Deployment => ResourceType::new("apps", "v1", "deployments"),
            Kind::ReplicaSet => ResourceType::new("apps", "v1", "replicasets"),
            Kind::StatefulSet => ResourceType::new("apps", "v1", "statefulsets"),
            Kind::DaemonSet => ResourceType::new("apps", "v1", "daemonsets"),
            Kind::Job => ResourceType::new("batch", "v1", "jobs"),
            Kind::ControllerRevision => ResourceType::new("apps", "v1", "controllerrevisions"),
            Kind::Pod => ResourceType::new("", "v1", "pods"),
        }
    }

    fn of(rt: &ResourceType) -> Option<Kind> {
        Some(match (rt.group.as_str(), rt.resource.as_str()) {
            ("apiextensions.k8s.io", "customresourcedefinitions") => Kind::Crd,
            ("apps", "deployments") => Kind::Deployment,
            ("apps", "replicasets") => Kind::ReplicaSet,
            ("apps", "statefulsets") => Kind::StatefulSet,
            ("apps", "daemonsets") => Kind::DaemonSet,
            ("batch", "jobs") => Kind::Job,
            ("apps", "controllerrevisions") => Kind::ControllerRevision,
            ("", "pods") => Kind::Pod,
            _ => return None,
        })
    }

    /// The kind of a controlling owner reference.
    fn of_owner(kind: &str) -> Option<Kind> {
        Some(match kind {
            "Deployment" => Kind::Deployment,
            "ReplicaSet" => Kind::ReplicaSet,
            "StatefulSet" => Kind::StatefulSet,
            "DaemonSet" => Kind::DaemonSet,
            "Job" => Kind::Job,
            _ => return None,
        })
    }

    fn component(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment-controller",
            Kind::ReplicaSet => "replicaset-controller",
            Kind::StatefulSet => "statefulset-controller",
            Kind::DaemonSet => "daemonset-controller",
            Kind::Job => "job-controller",
            _ => "kubelet",
        }
    }
}

type Key = (Kind, String, String);

fn key_of(kind: Kind, obj: &Value) -> Key {
    (
        kind,
        meta::namespace(obj).to_string(),
        meta::name(obj).to_string(),
    )
}

/// What the kubelet remembers about a pod it runs.
#[derive(Debug, Clone)]
struct KubeletPod {
    /// When the kubelet (re)started the pod's containers: the origin of its timeline.
    base: jiff::Timestamp,
    placement: pods::Placement,
    node_index: usize,
    /// Was a container blocked by a missing ConfigMap/Secret at the last sync?
    blocked: bool,
}

/// Counts of repeated events, so a repeat updates `count` instead of making a new Event.
#[derive(Debug, Clone)]
struct EventRecord {
    name: String,
    namespace: String,
    count: i64,
    first: String,
}

struct Runner {
    store: Arc<Store>,
    ctx: ControllerContext,
    nodes: Vec<daemonset::NodeInfo>,
    /// Owner uid -> keys of the objects it controls.
    children: HashMap<String, BTreeSet<Key>>,
    /// Object uid -> its key (for owners and children both).
    uid_keys: HashMap<String, Key>,
    queue: BTreeSet<Key>,
    /// Real-time deadlines of time-driven syncs.
    timers: BTreeMap<Instant, BTreeSet<Key>>,
    timer_of: HashMap<Key, Instant>,
    kubelet: HashMap<String, KubeletPod>,
    /// Namespace -> pods waiting for a ConfigMap/Secret to appear.
    waiting_config: HashMap<String, HashSet<String>>,
    node_load: Vec<u64>,
    pods_placed: u64,
    next_node: usize,
    /// Involved uid -> (reason, message) -> record.
    event_records: HashMap<String, HashMap<(String, String), EventRecord>>,
}

impl Runner {
    fn new(store: Arc<Store>, ctx: ControllerContext) -> Self {
        let nodes = nodes::node_infos(&ctx.cluster_name);
        let node_count = nodes.len();
        Self {
            store,
            ctx,
            nodes,
            children: HashMap::new(),
            uid_keys: HashMap::new(),
            queue: BTreeSet::new(),
            timers: BTreeMap::new(),
            timer_of: HashMap::new(),
            kubelet: HashMap::new(),
            waiting_config: HashMap::new(),
            node_load: vec![0; node_count],
            pods_placed: 0,
            next_node: 0,
            event_records: HashMap::new(),
        }
    }

    fn now(&self) -> jiff::Timestamp {
        self.ctx.clock.now()
    }

    async fn run(&mut self, mut rx: tokio::sync::broadcast::Receiver<Arc<WatchEvent>>) {
        self.create_nodes();
        self.rescan();
        loop {
            self.process_queue();
            let next_timer = self.timers.keys().next().copied();
            let event = match next_timer {
                Some(at) => tokio::select! {
                    event = rx.recv() => Some(event),
                    _ = tokio::time::sleep_until(at) => None,
                },
                None => Some(rx.recv().await),
            };
            match event {
                None => {}
                Some(Ok(event)) => self.observe(&event),
                Some(Err(RecvError::Lagged(_))) => self.rescan(),
                Some(Err(RecvError::Closed)) => return,
            }
            // Take every event already waiting, so one batch reconciles each object once.
            loop {
                match rx.try_recv() {
                    Ok(event) => self.observe(&event),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => self.rescan(),
                    Err(tokio::sync::broadcast::error::TryRecvError::Closed) => return,
                    Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                }
            }
            self.fire_due_timers();
        }
    }

    fn create_nodes(&mut self) {
        let rt = ResourceType::new("", "v1", "nodes");
        for index in 0..self.nodes.len() {
            let node = nodes::node_object(&self.ctx.cluster_name, index);
            let name = meta::name(&node).to_string();
            if self.store.get(&rt, "", &name).is_none() {
                let _ = self.store.create(&rt, node, KUBELET);
            }
            let status = nodes::node_status(index, self.now());
            if let Err(err) = self.store.update_status(&rt, "", &name, status, KUBELET) {
                tracing::warn!(node = %name, error = %err.message, "cannot write node status");
            }
        }
    }

    /// Rebuilds the indexes from the store and syncs everything (start, or a lagged stream).
    fn rescan(&mut self) {
        self.children.clear();
        self.uid_keys.clear();
        for kind in Kind::ALL {
            let (objects, _) = self.store.list_shared(&kind.rt(), None);
            for event in objects {
                self.index(kind, &event.object);
                if kind != Kind::ControllerRevision {
                    self.queue.insert(key_of(kind, &event.object));
                }
            }
        }
    }

    fn index(&mut self, kind: Kind, obj: &Value) {
        let key = key_of(kind, obj);
        self.uid_keys
            .insert(meta::uid(obj).to_string(), key.clone());
        if let Some(owner) = meta::controller_uid(obj) {
            self.children
                .entry(owner.to_string())
                .or_default()
                .insert(key);
        }
    }

    fn unindex(&mut self, kind: Kind, obj: &Value) {
        let key = key_of(kind, obj);
        self.uid_keys.remove(meta::uid(obj));
        if let Some(owner) = meta::controller_uid(obj)
            && let Some(set) = self.children.get_mut(owner)
        {
            set.remove(&key);
            if set.is_empty() {
                self.children.remove(owner);
            }
        }
    }

    /// The key of the object's controlling owner, if it is a kind we run.
    fn owner_key(obj: &Value) -> Option<Key> {
        let owner = obj["metadata"]["ownerReferences"]
            .as_array()?
            .iter()
            .find(|r| r["controller"].as_bool() == Some(true))?;
        let kind = Kind::of_owner(owner["kind"].as_str()?)?;
        Some((
            kind,
            meta::namespace(obj).to_string(),
            owner["name"].as_str()?.to_string(),
        ))
    }

    fn observe(&mut self, event: &WatchEvent) {
        let rt = &event.resource;
        let obj = &event.object;
        if rt.group.is_empty() && (rt.resource == "configmaps" || rt.resource == "secrets") {
            if let Some(waiting) = self.waiting_config.get(meta::namespace(obj)) {
                let ns = meta::namespace(obj).to_string();
                for pod in waiting {
                    self.queue.insert((Kind::Pod, ns.clone(), pod.clone()));
                }
            }
            return;
        }
        let Some(kind) = Kind::of(rt) else {
            return;
        };
        if event.kind == EventKind::Deleted {
            self.unindex(kind, obj);
            self.forget(kind, obj);
            self.collect_garbage(meta::uid(obj));
        } else {
            self.index(kind, obj);
            if kind != Kind::ControllerRevision {
                self.queue.insert(key_of(kind, obj));
            }
        }
        if let Some(owner) = Self::owner_key(obj) {
            self.queue.insert(owner);
        }
    }

    /// Drops what the kubelet and the event recorder remember about a deleted object.
    fn forget(&mut self, kind: Kind, obj: &Value) {
        let uid = meta::uid(obj);
        self.event_records.remove(uid);
        if kind == Kind::Pod {
            if let Some(state) = self.kubelet.remove(uid)
                && let Some(load) = self.node_load.get_mut(state.node_index)
            {
                *load = load.saturating_sub(1);
            }
            if let Some(waiting) = self.waiting_config.get_mut(meta::namespace(obj)) {
                waiting.remove(meta::name(obj));
            }
        }
    }

    /// Deletes what a deleted owner controlled (background propagation).
    fn collect_garbage(&mut self, owner_uid: &str) {
        let Some(children) = self.children.remove(owner_uid) else {
            return;
        };
        for (kind, namespace, name) in children {
            // The store may have collected it already; a 404 is fine.
            let _ = self.store.delete(&kind.rt(), &namespace, &name);
        }
    }

    fn schedule(&mut self, key: Key, after: Duration) {
        // A little real-time slack so the simulated clock is past the transition on wake-up.
        let at = Instant::now() + self.ctx.clock.real(after) + Duration::from_millis(5);
        if let Some(existing) = self.timer_of.get(&key) {
            if *existing <= at {
                return;
            }
            if let Some(set) = self.timers.get_mut(existing) {
                set.remove(&key);
                if set.is_empty() {
                    let existing = *existing;
                    self.timers.remove(&existing);
                }
            }
        }
        self.timer_of.insert(key.clone(), at);
        self.timers.entry(at).or_default().insert(key);
    }

    fn fire_due_timers(&mut self) {
        let now = Instant::now();
        while let Some((&at, _)) = self.timers.first_key_value() {
            if at > now {
                break;
            }
            if let Some(keys) = self.timers.remove(&at) {
                for key in keys {
                    self.timer_of.remove(&key);
                    self.queue.insert(key);
                }
            }
        }
    }

    fn process_queue(&mut self) {
        self.fire_due_timers();
        while let Some(key) = self.queue.pop_first() {
            let (kind, namespace, name) = &key;
            let Some(obj) = self.store.get(&kind.rt(), namespace, name) else {
                continue;
            };
            match kind {
                Kind::Crd => self.sync_crd(&obj),
                Kind::Deployment => self.sync_deployment(&obj),
                Kind::ReplicaSet => self.sync_replicaset(&obj),
                Kind::StatefulSet => self.sync_statefulset(&obj),
                Kind::DaemonSet => self.sync_daemonset(&obj),
                Kind::Job => self.sync_job(&obj),
                Kind::Pod => self.sync_pod(&obj),
                Kind::ControllerRevision => {}
            }
        }
    }

    /// The current objects of `kind` controlled by `owner`.
    fn owned(&self, owner: &Value, kind: Kind) -> Vec<Value> {
        let Some(keys) = self.children.get(meta::uid(owner)) else {
            return Vec::new();
        };
        keys.iter()
            .filter(|(k, _, _)| *k == kind)
            .filter_map(|(k, ns, name)| self.store.get(&k.rt(), ns, name))
            .filter(|child| meta::controller_uid(child) == Some(meta::uid(owner)))
            .collect()
    }

    fn create(&mut self, kind: Kind, obj: Value) -> Option<Value> {
        match self.store.create(&kind.rt(), obj, CONTROLLER_MANAGER) {
            Ok(created) => {
                // Index now, so a second sync before the ADDED event does not create twice.
                self.index(kind, &created);
                Some(created)
            }
            Err(err) => {
                if err.code != 409 {
                    tracing::warn!(kind = ?kind, error = %err.message, "controller create failed");
                }
                None
            }
        }
    }

    fn delete(&mut self, kind: Kind, namespace: &str, name: &str) {
        if let Some(obj) = self.store.get(&kind.rt(), namespace, name) {
            self.unindex(kind, &obj);
        }
        let _ = self.store.delete(&kind.rt(), namespace, name);
    }

    fn write_status(&self, kind: Kind, obj: &Value, status: Value, manager: &str) -> Option<Value> {
        if obj["status"] == status {
            return None;
        }
        match self.store.update_status(
            &kind.rt(),
            meta::namespace(obj),
            meta::name(obj),
            status,
            manager,
        ) {
            Ok(updated) => Some(updated),
            Err(err) => {
                if err.code != 404 {
                    tracing::warn!(kind = ?kind, name = meta::name(obj), error = %err.message, "status write failed");
                }
                None
            }
        }
    }

    fn record(&mut self, involved: &Value, spec: EventSpec) {
        let now = self.now();
        let uid = meta::uid(involved).to_string();
        let rt = ResourceType::new("", "v1", "events");
        let slot = (spec.reason.clone(), spec.message.clone());
        let existing = self
            .event_records
            .get(&uid)
            .and_then(|records| records.get(&slot))
            .cloned();
        match existing {
            Some(mut record) => {
                record.count += 1;
                let mut event =
                    events::event_object(involved, &spec, now, record.count, &record.first);
                event["metadata"]["name"] = json!(record.name);
                if let Some(mut stored) = self.store.get(&rt, &record.namespace, &record.name) {
                    for field in ["count", "lastTimestamp", "message"] {
                        stored[field] = event[field].clone();
                    }
                    let _ = self.store.update(&rt, stored, meta_component(&spec));
                }
                self.event_records
                    .entry(uid)
                    .or_default()
                    .insert(slot, record);
            }
            None => {
                let first = crate::clock::format_time(now);
                let event = events::event_object(involved, &spec, now, 1, &first);
                if let Ok(created) = self.store.create(&rt, event, meta_component(&spec)) {
                    let record = EventRecord {
                        name: meta::name(&created).to_string(),
                        namespace: meta::namespace(&created).to_string(),
                        count: 1,
                        first,
                    };
                    self.event_records
                        .entry(uid)
                        .or_default()
                        .insert(slot, record);
                }
            }
        }
    }

    fn record_notes(&mut self, kind: Kind, involved: &Value, notes: Vec<Note>) {
        for note in notes {
            let spec = EventSpec::new(note.kind, note.reason, note.message, kind.component());
            self.record(involved, spec);
        }
    }

    fn sync_crd(&mut self, crd: &Value) {
        if meta::is_deleting(crd) {
            return;
        }
        if let Some(status) = crd::established_status(crd, self.now()) {
            self.write_status(Kind::Crd, crd, status, "kube-apiserver");
        }
    }

    fn sync_deployment(&mut self, dep: &Value) {
        if meta::is_deleting(dep) {
            return;
        }
        let owned = self.owned(dep, Kind::ReplicaSet);
        let sync = deployment::reconcile(dep, &owned, self.now());
        let mut dep = dep.clone();
        if let Some(rs) = sync.create.clone() {
            self.create(Kind::ReplicaSet, rs);
        }
        if let Some(revision) = &sync.revision {
            dep = self.write_revision(&dep, revision, sync.early_status.clone());
        } else if let Some(early) = sync.early_status.clone()
            && let Some(updated) =
                self.write_status(Kind::Deployment, &dep, early, CONTROLLER_MANAGER)
        {
            dep = updated;
        }
        for rs in sync.update {
            if let Err(err) = self
                .store
                .update(&Kind::ReplicaSet.rt(), rs, CONTROLLER_MANAGER)
                && err.code != 404
            {
                tracing::warn!(error = %err.message, "replicaset update failed");
            }
        }
        for name in &sync.delete {
            self.delete(Kind::ReplicaSet, meta::namespace(&dep), name);
        }
        let mut status = sync.status;
        // The write above may have moved the generation on (see write_revision).
        if status.get("observedGeneration").is_some() {
            status["observedGeneration"] = json!(meta::generation(&dep));
        }
        self.write_status(Kind::Deployment, &dep, status, CONTROLLER_MANAGER);
        self.record_notes(Kind::Deployment, &dep, sync.events);
        if let Some(after) = sync.requeue_after {
            self.schedule(key_of(Kind::Deployment, &dep), after);
        }
    }

    /// Sets the Deployment's revision annotation. The real controller writes it through the
    /// status subresource, which for Deployments keeps annotation changes and does not
    /// bump the generation. When the store's status write drops annotations, fall back to
    /// a plain update (which then counts as a change of the Deployment).
    fn write_revision(
        &mut self,
        dep: &Value,
        revision: &str,
        early_status: Option<Value>,
    ) -> Value {
        let rt = Kind::Deployment.rt();
        let mut wanted = dep.clone();
        if !wanted["metadata"]["annotations"].is_object() {
            wanted["metadata"]["annotations"] = json!({});
        }
        wanted["metadata"]["annotations"][deployment::REVISION] = json!(revision);
        if let Some(status) = early_status {
            wanted["status"] = status;
        }
        let options = crate::store::WriteOptions::manager(CONTROLLER_MANAGER);
        let mut current = match self.store.update_status_with(&rt, wanted.clone(), &options) {
            Ok(updated) => updated,
            Err(_) => dep.clone(),
        };
        if meta::annotation(&current, deployment::REVISION) != Some(revision) {
            let mut plain = current.clone();
            plain["metadata"]["annotations"] = wanted["metadata"]["annotations"].clone();
            if let Some(m) = plain["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            if let Ok(updated) = self.store.update(&rt, plain, CONTROLLER_MANAGER) {
                current = updated;
            }
        }
        current
    }

    fn sync_replicaset(&mut self, rs: &Value) {
        if meta::is_deleting(rs) {
            return;
        }
        let owned = self.owned(rs, Kind::Pod);
        let sync = replicaset::reconcile(rs, &owned, self.now());
        let mut notes = sync.events;
        for pod in sync.create {
            if let Some(created) = self.create_pod(pod) {
                notes.push(Note {
                    kind: "Normal",
                    reason: "SuccessfulCreate",
                    message: format!("Created pod: {}", meta::name(&created)),
                });
            }
        }
        for name in &sync.delete {
            self.delete(Kind::Pod, meta::namespace(rs), name);
        }
        self.write_status(Kind::ReplicaSet, rs, sync.status, CONTROLLER_MANAGER);
        self.record_notes(Kind::ReplicaSet, rs, notes);
        if let Some(after) = sync.requeue_after {
            self.schedule(key_of(Kind::ReplicaSet, rs), after);
        }
    }

    fn sync_statefulset(&mut self, sts: &Value) {
        if meta::is_deleting(sts) {
            return;
        }
        let owned = self.owned(sts, Kind::Pod);
        let revisions = self.owned(sts, Kind::ControllerRevision);
        let sync = statefulset::reconcile(sts, &owned, &revisions, self.now());
        if let Some(revision) = sync.create_revision {
            self.create(Kind::ControllerRevision, revision);
        }
        for name in &sync.delete {
            self.delete(Kind::Pod, meta::namespace(sts), name);
        }
        for pod in sync.create {
            self.create_pod(pod);
        }
        self.write_status(Kind::StatefulSet, sts, sync.status, CONTROLLER_MANAGER);
        self.record_notes(Kind::StatefulSet, sts, sync.events);
    }

    fn sync_daemonset(&mut self, ds: &Value) {
        if meta::is_deleting(ds) {
            return;
        }
        let owned = self.owned(ds, Kind::Pod);
        let revisions = self.owned(ds, Kind::ControllerRevision);
        let sync = daemonset::reconcile(ds, &owned, &revisions, &self.nodes, self.now());
        if let Some(revision) = sync.create_revision {
            self.create(Kind::ControllerRevision, revision);
        }
        let mut notes = sync.events;
        for name in &sync.delete {
            self.delete(Kind::Pod, meta::namespace(ds), name);
        }
        for pod in sync.create {
            if let Some(created) = self.create_pod(pod) {
                notes.push(Note {
                    kind: "Normal",
                    reason: "SuccessfulCreate",
                    message: format!("Created pod: {}", meta::name(&created)),
                });
            }
        }
        self.write_status(Kind::DaemonSet, ds, sync.status, CONTROLLER_MANAGER);
        self.record_notes(Kind::DaemonSet, ds, notes);
    }

    fn sync_job(&mut self, job: &Value) {
        if meta::is_deleting(job) {
            return;
        }
        let owned = self.owned(job, Kind::Pod);
        let sync = job::reconcile(job, &owned, self.now());
        let mut notes = Vec::new();
        for name in &sync.delete {
            self.delete(Kind::Pod, meta::namespace(job), name);
        }
        for pod in sync.create {
            if let Some(created) = self.create_pod(pod) {
                notes.push(Note {
                    kind: "Normal",
                    reason: "SuccessfulCreate",
                    message: format!("Created pod: {}", meta::name(&created)),
                });
            }
        }
        notes.extend(sync.events);
        self.write_status(Kind::Job, job, sync.status, CONTROLLER_MANAGER);
        self.record_notes(Kind::Job, job, notes);
    }

    /// Picks the least loaded node (the scheduler's part) for pods without one.
    fn place(&mut self, node_name: Option<&str>) -> (usize, pods::Placement) {
        let index = node_name
            .and_then(|n| self.nodes.iter().position(|node| node.name == n))
            .unwrap_or_else(|| {
                (0..self.node_load.len())
                    .min_by_key(|&i| (self.node_load[i], i))
                    .unwrap_or(0)
            });
        if let Some(load) = self.node_load.get_mut(index) {
            *load += 1;
        }
        self.pods_placed += 1;
        let name = self
            .nodes
            .get(index)
            .map(|n| n.name.clone())
            .unwrap_or_default();
        (
            index,
            pods::Placement {
                node: name,
                host_ip: nodes::node_ip(index),
                pod_ip: nodes::pod_ip(index, self.pods_placed),
            },
        )
    }

    fn create_pod(&mut self, mut pod: Value) -> Option<Value> {
        // Spread controller pods over the nodes in turn (the scheduler's part).
        if pod["spec"]["nodeName"].is_null() && !self.nodes.is_empty() {
            self.next_node = (self.next_node + 1) % self.nodes.len();
            pod["spec"]["nodeName"] = json!(self.nodes[self.next_node].name);
        }
        self.create(Kind::Pod, pod)
    }

    /// The kubelet: advance the pod along its behaviour's timeline.
    fn sync_pod(&mut self, pod: &Value) {
        if meta::is_deleting(pod) {
            return;
        }
        let uid = meta::uid(pod).to_string();
        let now = self.now();
        let mut pod = pod.clone();
        if !self.kubelet.contains_key(&uid) {
            // Bind unscheduled pods to a node, as the scheduler would.
            let node_name = pod["spec"]["nodeName"].as_str().map(str::to_string);
            let (node_index, placement) = self.place(node_name.as_deref());
            if node_name.is_none() {
                pod["spec"]["nodeName"] = json!(placement.node);
                match self
                    .store
                    .update(&Kind::Pod.rt(), pod.clone(), "kube-scheduler")
                {
                    Ok(bound) => pod = bound,
                    Err(err) => {
                        tracing::warn!(pod = meta::name(&pod), error = %err.message, "cannot bind pod");
                        return;
                    }
                }
            }
            let base = meta::parse_time(&pod["status"]["startTime"]).unwrap_or(now);
            self.kubelet.insert(
                uid.clone(),
                KubeletPod {
                    base,
                    placement,
                    node_index,
                    blocked: false,
                },
            );
        }
        let namespace = meta::namespace(&pod).to_string();
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let store = self.store.clone();
        let lookup = |kind: &str, name: &str| -> Option<Vec<String>> {
            let rt = if kind == "ConfigMap" {
                ResourceType::new("", "v1", "configmaps")
            } else {
                ResourceType::new("", "v1", "secrets")
            };
            let obj = store.get(&rt, &namespace, name)?;
            let mut keys = Vec::new();
            for field in ["data", "binaryData", "stringData"] {
                if let Some(map) = obj[field].as_object() {
                    keys.extend(map.keys().cloned());
                }
            }
            Some(keys)
        };
        let blocked: Vec<Option<String>> = containers
            .iter()
            .map(|c| pods::missing_config(c, &namespace, &lookup))
            .collect();
        let any_blocked = blocked.iter().any(Option::is_some);
        let Some(state) = self.kubelet.get_mut(&uid) else {
            return;
        };
        if state.blocked && !any_blocked {
            // The missing configuration appeared: the containers start now.
            state.base = now;
        }
        state.blocked = any_blocked;
        let state = state.clone();
        let waiting = self.waiting_config.entry(namespace.clone()).or_default();
        if any_blocked {
            waiting.insert(meta::name(&pod).to_string());
        } else {
            waiting.remove(meta::name(&pod));
        }
        let behaviours: Vec<rules::Behaviour> = containers
            .iter()
            .map(|c| {
                rules::behaviour_for(
                    &self.ctx.rules,
                    &self.ctx.cluster_name,
                    c["image"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let view = pods::pod_status_at(
            &pod,
            &behaviours,
            &blocked,
            &state.placement,
            state.base,
            now,
        );
        let old_status = pod["status"].clone();
        if let Some(updated) = self.write_status(Kind::Pod, &pod, view.status.clone(), KUBELET) {
            for spec in
                events::kubelet_events(&updated, &old_status, &view.status, &state.placement.node)
            {
                self.record(&updated, spec);
            }
        }
        if let Some(after) = view.next_change {
            self.schedule(key_of(Kind::Pod, &pod), after);
        }
    }
}

fn meta_component(spec: &EventSpec) -> &'static str {
    spec.component
}
