//! The controllers and the kubelet stand-in of one simulated cluster.
//!
//! One task per cluster wakes on store events and on timers (time-driven transitions such
//! as a pod becoming Ready or a progress deadline), reconciles only the objects an event
//! touches (the object, its controlling owner, pods waiting for a ConfigMap), and writes
//! through the store as `kube-controller-manager` (workloads) or `kubelet` (pod status).
//! The decisions themselves are pure functions in the submodules.
//!
//! What runs: Deployments (rolling update and Recreate, revisions, rollback by template,
//! progress deadline), ReplicaSets, StatefulSets (OrderedReady or Parallel, partition,
//! ControllerRevisions, volume claims), DaemonSets (one pod per simulated node), Jobs,
//! CRD establishment, PersistentVolumeClaim binding, Events, and three Nodes per cluster
//! (garbage collection by owner is the store's). The controllers decide in simulated time and
//! write wall-clock timestamps (see [`crate::model::clock`]); the runner maps between the two.
//!
//! Pods follow the behaviour of their image (see [`crate::controllers::rules`]), in simulated time from
//! when the kubelet takes the pod:
//!
//! | image contains | what the pod does |
//! |---|---|
//! | (anything else) | ContainerCreating for 0.5 s, Running, Ready 0.5 s later (or after `readinessProbe.initialDelaySeconds`) |
//! | `doesnotexist` | ErrImagePull for 2 s, then ImagePullBackOff for 10, 20, 40 ... 300 s, alternating |
//! | `crashloop` | runs 1 s, exits 1, restarts after 1 s, then CrashLoopBackOff 10, 20 ... 300 s; restartCount 2 at ~13.5 s |
//! | `neverready` | Running, never Ready |
//! | `slowstart` | Running, Ready at 20 s (a `SlowStart` rule with `after: 60s`: Ready 60 s after the start) |
//!
//! A container whose env/envFrom names a missing ConfigMap or Secret (or key) waits in
//! CreateContainerConfigError until it exists. Pods with restartPolicy Never/OnFailure run
//! 2 s to completion (Succeeded) or fail (Failed). Init containers run first, in order.

pub mod crd;
pub mod daemonset;
pub mod deployment;
pub mod events;
pub mod job;
pub mod logs;
pub mod meta;
pub mod nodes;
pub mod pods;
pub mod replicaset;
pub mod rules;
pub mod scheduler;
pub mod statefulset;
pub mod timeline;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::model::clock::Clock;
use crate::model::resource::ResourceType;
use crate::storage::store::{EventKind, Store, WatchEvent, WriteOptions};
use rules::Rule;

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
/// How long (real time) an owner waits after a change of one of its children before it
/// syncs, so that a burst of pod changes costs one ReplicaSet sync.
const OWNER_COALESCE: Duration = Duration::from_millis(10);

/// Starts the controllers and kubelet of one cluster. The task runs until aborted.
pub fn spawn(store: Arc<Store>, ctx: ControllerContext) -> tokio::task::JoinHandle<()> {
    // Subscribe before the first scan so no event falls between the two.
    let rx = store.subscribe();
    tokio::spawn(async move {
        let mut runner = Runner::new(store, ctx);
        runner.run(rx).await;
    })
}

/// The kinds the controllers act on. The order is the order of work within a batch:
/// Deployments react to their ReplicaSets before the ReplicaSet controller has acted on
/// its pods, as in a real controller-manager (one API call against two).
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
    Claim,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Crd,
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::StatefulSet,
        Kind::DaemonSet,
        Kind::Job,
        Kind::ControllerRevision,
        Kind::Pod,
        Kind::Claim,
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
            Kind::Claim => ResourceType::new("", "v1", "persistentvolumeclaims"),
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
            ("", "persistentvolumeclaims") => Kind::Claim,
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

/// A stored version of an object and its [`Runner::sim_view`].
type SimView = (Arc<Value>, Arc<Value>);

/// The field manager of an Event's writes: the binary of the component that reports it
/// (controllers' events are written by kube-controller-manager, as recorded).
fn event_manager(component: &str) -> &'static str {
    match component {
        "kubelet" => KUBELET,
        "default-scheduler" => "kube-scheduler",
        _ => CONTROLLER_MANAGER,
    }
}

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
    /// Object uid -> (status as stored, the same status in simulated time): the status the
    /// runner last wrote, so that reading it back costs no precision (a stored timestamp is
    /// whole wall seconds, which at time scale 100 is 100 simulated seconds).
    written: HashMap<String, (Value, Value)>,
    /// Object uid -> (the stored version, its [`Runner::sim_view`]): the view of a version is
    /// made once, since the controllers read an object many times between its writes (owners
    /// read all their children per sync) and the mapping of times never changes.
    views: RefCell<HashMap<String, SimView>>,
    /// When the last Event was made (UnixNano): the next is made at least a nanosecond
    /// later, so that names (which are made of it) never collide.
    last_event_at: i128,
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
            written: HashMap::new(),
            views: RefCell::default(),
            last_event_at: 0,
        }
    }

    /// The simulated now, which the pure controllers decide in.
    fn now(&self) -> jiff::Timestamp {
        self.ctx.clock.sim_now()
    }

    /// The wall-clock now, for what is written without passing through [`Runner::sim_view`]
    /// (Events, Node heartbeats).
    fn wall_now(&self) -> jiff::Timestamp {
        self.ctx.clock.now()
    }

    fn scaled(&self) -> bool {
        self.ctx.clock.scale() != 1.0
    }

    /// The object as the controllers see it: its status times and creationTimestamp in
    /// simulated time. A status the runner wrote itself comes back exactly as computed.
    fn sim_view(&self, mut obj: Value) -> Value {
        if !self.scaled() {
            return obj;
        }
        let status = self
            .written
            .get(meta::uid(&obj))
            .filter(|(stored, _)| *stored == obj["status"])
            .map(|(_, sim)| sim.clone());
        let clock = &self.ctx.clock;
        timeline::map_object_times(&mut obj, &|ts| clock.sim_of(ts));
        if let Some(sim) = status {
            obj["status"] = sim;
        }
        obj
    }

    /// [`Runner::sim_view`] of a stored object, which is shared as it is when simulated time
    /// is wall time (no copy: the controllers read far more objects than they write), and
    /// made once per stored version otherwise.
    fn shared_view(&self, stored: Arc<Value>) -> Arc<Value> {
        if !self.scaled() {
            return stored;
        }
        let uid = meta::uid(&stored);
        if let Some((version, view)) = self.views.borrow().get(uid)
            && Arc::ptr_eq(version, &stored)
        {
            return Arc::clone(view);
        }
        let view = Arc::new(self.sim_view(Value::clone(&stored)));
        self.views
            .borrow_mut()
            .insert(uid.to_string(), (stored, Arc::clone(&view)));
        view
    }

    /// Maps simulated times back to wall times, never after the wall clock.
    fn to_wall(&self, value: &mut Value, whole_object: bool) {
        if !self.scaled() {
            return;
        }
        let clock = &self.ctx.clock;
        let now = clock.now();
        let f = |ts| clock.wall_of(ts).min(now);
        if whole_object {
            timeline::map_object_times(value, &f);
        } else {
            timeline::map_times(value, &f);
        }
    }

    /// Remembers the status just written (`stored`: the object the store returned; `sim`:
    /// the status in simulated time), for [`Runner::sim_view`].
    fn remember(&mut self, stored: &Value, sim: Value) {
        if self.scaled() {
            // An unchanged write keeps the stored version, whose view may hold the old
            // simulated status.
            self.views.get_mut().remove(meta::uid(stored));
            self.written.insert(
                meta::uid(stored).to_string(),
                (stored["status"].clone(), sim),
            );
        }
    }

    async fn run(&mut self, mut rx: tokio::sync::broadcast::Receiver<Arc<WatchEvent>>) {
        self.create_nodes();
        self.rescan();
        loop {
            self.process_queue().await;
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
            if self.store.get_shared(&rt, "", &name).is_none() {
                let _ = self.store.create(&rt, node, KUBELET);
            }
            let status = nodes::node_status(index, self.wall_now());
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
            // The store collects its dependents (garbage collection happens there, once).
            self.forget(kind, obj);
        } else {
            self.index(kind, obj);
            if kind != Kind::ControllerRevision {
                self.queue.insert(key_of(kind, obj));
            }
        }
        if let Some(owner) = Self::owner_key(obj) {
            if kind == Kind::Pod {
                // Pods change in bursts; one owner sync per burst.
                self.schedule_at(owner, Instant::now() + OWNER_COALESCE);
            } else {
                self.queue.insert(owner);
            }
        }
    }

    /// Drops what the kubelet and the event recorder remember about a deleted object.
    fn forget(&mut self, kind: Kind, obj: &Value) {
        let uid = meta::uid(obj);
        self.event_records.remove(uid);
        self.written.remove(uid);
        self.views.get_mut().remove(uid);
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

    fn schedule(&mut self, key: Key, after: Duration) {
        // A little real-time slack so the simulated clock is past the transition on wake-up.
        let at = Instant::now() + self.ctx.clock.real(after) + Duration::from_millis(5);
        self.schedule_at(key, at);
    }

    /// Keeps the earliest wake-up per key. Replacing a later one is safe: every sync sets
    /// its own next wake-up again.
    fn schedule_at(&mut self, key: Key, at: Instant) {
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

    async fn process_queue(&mut self) {
        self.fire_due_timers();
        let mut done = 0u32;
        while let Some(key) = self.queue.pop_first() {
            // Stay cooperative: a big batch must not stall the API server on this runtime.
            done += 1;
            if done.is_multiple_of(32) {
                tokio::task::yield_now().await;
            }
            let (kind, namespace, name) = &key;
            let Some(obj) = self.store.get_shared(&kind.rt(), namespace, name) else {
                continue;
            };
            let obj = self.shared_view(obj);
            if !meta::well_formed(&obj) {
                tracing::warn!(kind = ?kind, namespace = %namespace, name = %name, "malformed object; controllers leave it alone");
                continue;
            }
            // An object shaped in a way no real API server would accept must not stop the
            // controllers of the whole cluster: report it and go on.
            let kind = *kind;
            let synced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match kind {
                Kind::Crd => self.sync_crd(&obj),
                Kind::Deployment => self.sync_deployment(&obj),
                Kind::ReplicaSet => self.sync_replicaset(&obj),
                Kind::StatefulSet => self.sync_statefulset(&obj),
                Kind::DaemonSet => self.sync_daemonset(&obj),
                Kind::Job => self.sync_job(&obj),
                Kind::Pod => self.sync_pod(&obj),
                Kind::Claim => self.sync_claim(&obj),
                Kind::ControllerRevision => {}
            }));
            if synced.is_err() {
                tracing::error!(kind = ?kind, namespace = %key.1, name = %key.2, "controller failed on this object; skipped");
            }
        }
    }

    /// The current objects of `kind` controlled by `owner`.
    fn owned(&self, owner: &Value, kind: Kind) -> Vec<Arc<Value>> {
        let Some(keys) = self.children.get(meta::uid(owner)) else {
            return Vec::new();
        };
        keys.iter()
            .filter(|(k, _, _)| *k == kind)
            .filter_map(|(k, ns, name)| self.store.get_shared(&k.rt(), ns, name))
            .filter(|child| meta::controller_uid(child) == Some(meta::uid(owner)))
            .map(|child| self.shared_view(child))
            .collect()
    }

    fn create(&mut self, kind: Kind, obj: Value) -> Option<Arc<Value>> {
        let opts = WriteOptions::manager(CONTROLLER_MANAGER);
        match self.store.create_shared(&kind.rt(), obj, &opts) {
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
        let Some(obj) = self.store.get(&kind.rt(), namespace, name) else {
            return;
        };
        self.unindex(kind, &obj);
        if self.store.delete(&kind.rt(), namespace, name).is_ok() && kind == Kind::Pod {
            let node = obj["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for spec in events::killing_events(&obj, &node) {
                self.record(&obj, spec);
            }
        }
    }

    /// Writes a status computed in simulated time (`obj`: as the controllers see it) and
    /// returns the stored object (wall times; [`Runner::sim_view`] maps it), or None when
    /// nothing changed.
    fn write_status(
        &mut self,
        kind: Kind,
        obj: &Value,
        status: Value,
        manager: &str,
    ) -> Option<Arc<Value>> {
        if obj["status"] == status {
            return None;
        }
        // The status in wall time, and in simulated time when the two differ (copied only then).
        let (wall, sim) = if self.scaled() {
            let mut wall = status.clone();
            self.to_wall(&mut wall, false);
            (wall, Some(status))
        } else {
            (status, None)
        };
        match self.store.update_status(
            &kind.rt(),
            meta::namespace(obj),
            meta::name(obj),
            wall,
            manager,
        ) {
            Ok(updated) => {
                if let Some(sim) = sim {
                    self.remember(&updated, sim);
                }
                Some(updated)
            }
            Err(err) => {
                if err.code != 404 {
                    tracing::warn!(kind = ?kind, name = meta::name(obj), error = %err.message, "status write failed");
                }
                None
            }
        }
    }

    fn record(&mut self, involved: &Value, spec: EventSpec) {
        let wall = self.wall_now();
        let at = wall.as_nanosecond().max(self.last_event_at + 1);
        self.last_event_at = at;
        let now = jiff::Timestamp::from_nanosecond(at).unwrap_or(wall);
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
                    let _ = self
                        .store
                        .update(&rt, stored, event_manager(spec.component));
                }
                self.event_records
                    .entry(uid)
                    .or_default()
                    .insert(slot, record);
            }
            None => {
                let first = crate::model::clock::format_time(now);
                let event = events::event_object(involved, &spec, now, 1, &first);
                let opts = WriteOptions::manager(event_manager(spec.component));
                if let Ok(created) = self.store.create_shared(&rt, event, &opts) {
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

    /// The volume binder: every claim is bound at once, as with a default StorageClass
    /// that provisions immediately.
    fn sync_claim(&mut self, claim: &Value) {
        if meta::is_deleting(claim) || claim["status"]["phase"] == "Bound" {
            return;
        }
        let status = statefulset::bound_claim_status(claim);
        self.write_status(Kind::Claim, claim, status, "kube-controller-manager");
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
            dep = self.sim_view(Arc::unwrap_or_clone(updated));
        }
        for mut rs in sync.update {
            self.to_wall(&mut rs, true);
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
    /// status subresource, whose strategy for Deployments keeps annotation changes without
    /// a new generation. Should a store drop them, fall back to a plain update.
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
        let sim_status = wanted["status"].clone();
        let mut dep_wall = dep.clone();
        self.to_wall(&mut dep_wall, true);
        self.to_wall(&mut wanted, true);
        let options = WriteOptions::manager(CONTROLLER_MANAGER);
        let mut current = match self.store.update_status_with(&rt, wanted.clone(), &options) {
            Ok(updated) => {
                self.remember(&updated, sim_status);
                updated
            }
            Err(_) => dep_wall,
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
        self.sim_view(current)
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
        let mut notes = sync.events;
        for pod in sync.create {
            let ordinal = meta::name(&pod)
                .rsplit('-')
                .next()
                .and_then(|o| o.parse().ok())
                .unwrap_or(0);
            notes.extend(self.ensure_claims(sts, ordinal, meta::name(&pod)));
            self.create_pod(pod);
        }
        self.write_status(Kind::StatefulSet, sts, sync.status, CONTROLLER_MANAGER);
        self.record_notes(Kind::StatefulSet, sts, notes);
    }

    /// Creates (and binds) the claims of a StatefulSet pod that do not exist yet.
    fn ensure_claims(&mut self, sts: &Value, ordinal: i64, pod_name: &str) -> Vec<Note> {
        let rt = ResourceType::new("", "v1", "persistentvolumeclaims");
        let mut notes = Vec::new();
        for claim in statefulset::claims_for(sts, ordinal) {
            let name = meta::name(&claim).to_string();
            if self
                .store
                .get_shared(&rt, meta::namespace(sts), &name)
                .is_some()
            {
                continue;
            }
            let status = statefulset::bound_claim_status(&claim);
            if let Ok(created) = self.store.create(&rt, claim, CONTROLLER_MANAGER) {
                let _ = self.store.update_status(
                    &rt,
                    meta::namespace(&created),
                    &name,
                    status,
                    "kube-controller-manager",
                );
                notes.push(Note {
                    kind: "Normal",
                    reason: "SuccessfulCreate",
                    message: format!(
                        "Create Claim {name} Pod {pod_name} in StatefulSet {} success",
                        meta::name(sts)
                    ),
                });
            }
        }
        notes
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
        if let Some(after) = sync.requeue_after {
            self.schedule(key_of(Kind::Job, job), after);
        }
    }

    /// Picks the least loaded node (the scheduler's part) for pods without one.
    /// The node for a pod (its own, or the least loaded one it fits), None if none fits.
    fn place(&mut self, pod: &Value) -> Option<(usize, pods::Placement)> {
        let index = match pod["spec"]["nodeName"].as_str() {
            Some(name) => self.nodes.iter().position(|node| node.name == name)?,
            None => (0..self.nodes.len())
                .filter(|&i| scheduler::fits(pod, &self.nodes[i]))
                .min_by_key(|&i| (self.node_load.get(i).copied().unwrap_or(0), i))?,
        };
        if let Some(load) = self.node_load.get_mut(index) {
            *load += 1;
        }
        self.pods_placed += 1;
        let name = self
            .nodes
            .get(index)
            .map(|n| n.name.clone())
            .unwrap_or_default();
        Some((
            index,
            pods::Placement {
                node: name,
                host_ip: nodes::node_ip(index),
                pod_ip: nodes::pod_ip(index, self.pods_placed),
            },
        ))
    }

    fn create_pod(&mut self, mut pod: Value) -> Option<Arc<Value>> {
        // Spread controller pods over the nodes they fit, in turn (the scheduler's part).
        // A pod that fits none stays unbound; the kubelet side reports it Unschedulable.
        if pod["spec"]["nodeName"].is_null() && !self.nodes.is_empty() {
            for _ in 0..self.nodes.len() {
                self.next_node = (self.next_node + 1) % self.nodes.len();
                if scheduler::fits(&pod, &self.nodes[self.next_node]) {
                    pod["spec"]["nodeName"] = json!(self.nodes[self.next_node].name);
                    break;
                }
            }
        }
        self.create(Kind::Pod, pod)
    }

    fn report_unschedulable(&mut self, pod: &Value) {
        let status = scheduler::unschedulable_status(pod, self.nodes.len(), self.now());
        if let Some(updated) = self.write_status(Kind::Pod, pod, status, "kube-scheduler") {
            let spec = EventSpec::new(
                "Warning",
                "FailedScheduling",
                scheduler::unschedulable_message(self.nodes.len()),
                "default-scheduler",
            );
            self.record(&updated, spec);
        }
    }

    /// The kubelet: advance the pod along its behaviour's timeline.
    fn sync_pod(&mut self, pod: &Value) {
        if meta::is_deleting(pod) {
            return;
        }
        let uid = meta::uid(pod).to_string();
        let now = self.now();
        // The pod as bound to its node, when this sync binds it.
        let Some(bound_pod) = self.admit_pod(pod, &uid, now) else {
            return;
        };
        let pod = bound_pod.as_ref().unwrap_or(pod);
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let blocked = self.missing_config(pod, &containers);
        let Some(state) = self.note_blocked(pod, &uid, &blocked, now) else {
            return;
        };
        let behaviour_of = |list: &[Value]| -> Vec<rules::ImageScript> {
            list.iter()
                .map(|c| {
                    rules::script_for(
                        &self.ctx.rules,
                        &self.ctx.cluster_name,
                        c["image"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        };
        let behaviours = behaviour_of(&containers);
        let init_behaviours = behaviour_of(
            pod["spec"]["initContainers"]
                .as_array()
                .map_or(&[], Vec::as_slice),
        );
        let view = pods::pod_status_at(
            pod,
            &init_behaviours,
            &behaviours,
            &blocked,
            &state.placement,
            state.base,
            now,
        );
        let old_status = pod["status"].clone();
        if let Some(updated) = self.write_status(Kind::Pod, pod, view.status.clone(), KUBELET) {
            let never_ready: Vec<bool> = behaviours
                .iter()
                .map(|b| b.behaviour == rules::Behaviour::NeverReady)
                .collect();
            self.record_kubelet_events(&updated, &old_status, &view.status, &state, &never_ready);
        }
        if let Some(after) = view.next_change {
            self.schedule(key_of(Kind::Pod, pod), after);
        }
    }

    /// A pod the kubelet does not run yet: placed on a node (bound to it, as the scheduler
    /// would, when it has none) and taken on by that node's kubelet. None when it cannot
    /// run (unschedulable, or the binding failed); else the pod as bound by this sync, if
    /// it bound it.
    fn admit_pod(&mut self, pod: &Value, uid: &str, now: jiff::Timestamp) -> Option<Option<Value>> {
        if self.kubelet.contains_key(uid) {
            return Some(None);
        }
        let node_name = pod["spec"]["nodeName"].as_str().map(str::to_string);
        let Some((node_index, placement)) = self.place(pod) else {
            if node_name.is_none() {
                self.report_unschedulable(pod);
            }
            return None;
        };
        let mut bound_pod = None;
        if node_name.is_none() {
            let mut wall = pod.clone();
            wall["spec"]["nodeName"] = json!(placement.node);
            self.to_wall(&mut wall, true);
            match self.store.update(&Kind::Pod.rt(), wall, "kube-scheduler") {
                Ok(bound) => bound_pod = Some(self.sim_view(bound)),
                Err(err) => {
                    tracing::warn!(pod = meta::name(pod), error = %err.message, "cannot bind pod");
                    return None;
                }
            }
        }
        let bound = bound_pod.as_ref().unwrap_or(pod);
        let base = meta::parse_time(&bound["status"]["startTime"]).unwrap_or(now);
        self.kubelet.insert(
            uid.to_string(),
            KubeletPod {
                base,
                placement,
                node_index,
                blocked: false,
            },
        );
        Some(bound_pod)
    }

    /// Per container, the ConfigMap or Secret (or key of one) it needs that is missing.
    fn missing_config(&self, pod: &Value, containers: &[Value]) -> Vec<Option<String>> {
        let namespace = meta::namespace(pod);
        let lookup = |kind: &str, name: &str| -> Option<Vec<String>> {
            let rt = if kind == "ConfigMap" {
                ResourceType::new("", "v1", "configmaps")
            } else {
                ResourceType::new("", "v1", "secrets")
            };
            let obj = self.store.get_shared(&rt, namespace, name)?;
            let mut keys = Vec::new();
            for field in ["data", "binaryData", "stringData"] {
                if let Some(map) = obj[field].as_object() {
                    keys.extend(map.keys().cloned());
                }
            }
            Some(keys)
        };
        containers
            .iter()
            .map(|c| pods::missing_config(c, namespace, &lookup))
            .collect()
    }

    /// Notes whether the pod waits for missing configuration (its containers start when it
    /// appears) and returns the kubelet's state of it.
    fn note_blocked(
        &mut self,
        pod: &Value,
        uid: &str,
        blocked: &[Option<String>],
        now: jiff::Timestamp,
    ) -> Option<KubeletPod> {
        let any_blocked = blocked.iter().any(Option::is_some);
        let state = self.kubelet.get_mut(uid)?;
        if state.blocked && !any_blocked {
            // The missing configuration appeared: the containers start now.
            state.base = now;
        }
        state.blocked = any_blocked;
        let state = state.clone();
        let waiting = self
            .waiting_config
            .entry(meta::namespace(pod).to_string())
            .or_default();
        if any_blocked {
            waiting.insert(meta::name(pod).to_string());
        } else {
            waiting.remove(meta::name(pod));
        }
        Some(state)
    }

    /// The kubelet's events for a status it wrote: containers pulled, started, failing, and
    /// readiness probes failing (`never_ready`: per container, its image never gets ready).
    fn record_kubelet_events(
        &mut self,
        updated: &Value,
        old_status: &Value,
        status: &Value,
        state: &KubeletPod,
        never_ready: &[bool],
    ) {
        let node = &state.placement.node;
        for spec in events::kubelet_events(updated, old_status, status, node) {
            self.record(updated, spec);
        }
        for spec in events::readiness_failures(updated, old_status, status, node, never_ready) {
            self.record(updated, spec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects shaped as no API server would accept them: the pure controllers must cope.
    fn odd_objects() -> Vec<Value> {
        let shapes = [
            json!(null),
            json!("text"),
            json!([1, 2]),
            json!({}),
            json!({"metadata": "x", "spec": "y", "status": 3}),
            json!({"metadata": {"name": 5, "annotations": "a", "labels": []},
                   "spec": {"replicas": "many", "template": "t", "selector": 1,
                            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "x%", "maxUnavailable": [1]}}}}),
            json!({"metadata": {"name": "w"}, "spec": {"replicas": -5, "template": {"metadata": "m", "spec": {"containers": "c"}}}}),
            json!({"metadata": {"name": "w"}, "spec": {"replicas": 2, "template": {"spec": {"containers": [null, 1, {"name": 2, "image": []}],
                   "initContainers": {"a": 1}}}, "volumeClaimTemplates": [null, {"metadata": 1, "spec": 2}],
                   "progressDeadlineSeconds": -1, "minReadySeconds": i64::MAX, "revisionHistoryLimit": -3}}),
            json!({"metadata": {"name": "w"}, "spec": {"replicas": 9_000_000_000i64, "completions": i64::MAX, "parallelism": i64::MAX,
                   "updateStrategy": {"rollingUpdate": {"partition": i64::MIN}}, "template": null}}),
        ];
        shapes.to_vec()
    }

    #[test]
    fn odd_objects_do_not_panic_the_controllers() {
        let now: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let nodes = nodes::node_infos("sim-1");
        let placement = pods::Placement {
            node: "n".into(),
            host_ip: "1.2.3.4".into(),
            pod_ip: "10.0.0.1".into(),
        };
        for obj in odd_objects() {
            let others = odd_objects();
            let _ = deployment::reconcile(&obj, &others, now);
            let _ = replicaset::reconcile(&obj, &others, now);
            let _ = statefulset::reconcile(&obj, &others, &others, now);
            let _ = daemonset::reconcile(&obj, &others, &others, &nodes, now);
            let _ = job::reconcile(&obj, &others, now);
            let _ = crd::established_status(&obj, now);
            let _ = statefulset::claims_for(&obj, 0);
            let behaviours = [
                rules::Behaviour::CrashLoopBackOff.into(),
                rules::Behaviour::ImagePullBackOff.into(),
                rules::ImageScript {
                    behaviour: rules::Behaviour::ImagePullBackOff,
                    failing_pulls: Some(1),
                    pull_message: Some("503 Service Unavailable".into()),
                    ..rules::ImageScript::default()
                },
            ];
            for age in [0, 1, 100, 100_000] {
                let later = meta::add(now, Duration::from_secs(age));
                let _ = pods::pod_status_at(
                    &obj,
                    &behaviours,
                    &behaviours,
                    &[None],
                    &placement,
                    now,
                    later,
                );
            }
            for old in odd_objects() {
                let _ = events::kubelet_events(&obj, &old, &obj, "n");
            }
        }
    }

    #[test]
    fn a_stored_version_has_one_simulated_view_until_the_runner_writes_its_status() {
        let clock = Clock::new(10.0);
        let store = Arc::new(Store::new(clock.clone()));
        let rt = Kind::Pod.rt();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        store.create(&rt, pod, KUBELET).unwrap();
        let mut runner = Runner::new(
            Arc::clone(&store),
            ControllerContext {
                cluster_name: "sim-1".into(),
                clock: clock.clone(),
                rules: Arc::default(),
            },
        );
        let read =
            |runner: &Runner| runner.shared_view(store.get_shared(&rt, "default", "p").unwrap());
        let first = read(&runner);
        assert!(
            Arc::ptr_eq(&first, &read(&runner)),
            "an unchanged version is mapped once"
        );

        let started = clock.sim_now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let status = json!({"phase": "Running", "startTime": started});
        runner
            .write_status(Kind::Pod, &first, status.clone(), KUBELET)
            .unwrap();
        let after = read(&runner);
        assert!(!Arc::ptr_eq(&first, &after));
        assert_eq!(
            after["status"], status,
            "the runner reads back the status it wrote"
        );
    }
}
