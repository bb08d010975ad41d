//! The object store of one cluster: objects as JSON values keyed by resource type,
//! namespace and name; one global resourceVersion; a bounded event history for watches.
//!
//! All methods are synchronous and hold a std mutex only for the duration of the call, so
//! they may be called from async code but never hold the lock across an await.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::model::clock::{Clock, format_time};
use crate::model::error::ApiError;
use crate::model::resource::{ResourceType, generated_name, metadata_mut, new_uid};
use crate::semantics::managed_fields::{self, UpdateRecord};
use crate::semantics::validation;
use crate::semantics::{decode, defaults};
use crate::storage::registry::{Registry, ResourceInfo};

/// Events kept for watches that start from an older resourceVersion.
const HISTORY_LIMIT: usize = 10_000;
/// Capacity of the live event channel. Every event a slow subscriber has not read yet
/// stays in memory as a parsed object, so this stays small: a watcher that falls this far
/// behind is ended (clients watch again from their last resourceVersion) and the
/// controllers rescan.
const CHANNEL_CAPACITY: usize = 1_024;
/// The first resourceVersion handed out. Watches from below it are "too old", as on a real
/// server whose history has been compacted.
const FIRST_RESOURCE_VERSION: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// A committed change as the store keeps and publishes it: the object parsed once and as
/// compact JSON serialized once, both shared by the store, the history and every watcher.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub resource: ResourceType,
    pub kind: EventKind,
    pub object: Arc<Value>,
    pub resource_version: u64,
    /// `object` as compact JSON: what a JSON watch or list sends, without encoding again.
    pub json: Arc<[u8]>,
}

/// How a write records field ownership.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Ownership {
    /// Record an `Update` entry for the options' manager (the default).
    #[default]
    Update,
    /// Keep `metadata.managedFields` exactly as the object carries it (server-side apply
    /// computes it itself).
    AsGiven,
}

/// Options of one write.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub manager: String,
    /// Compute and return the result without storing it.
    pub dry_run: bool,
    pub ownership: Ownership,
    /// Only for updates: fail with 409 unless the stored resourceVersion is this one.
    pub expected_resource_version: Option<String>,
}

impl WriteOptions {
    pub fn manager(manager: &str) -> Self {
        Self {
            manager: manager.to_string(),
            ..Self::default()
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    pub propagation: Propagation,
    pub expected_uid: Option<String>,
    pub expected_resource_version: Option<String>,
    /// `gracePeriodSeconds`: for a pod on a node, how long its containers may take to stop
    /// (default: the pod's terminationGracePeriodSeconds, else 30); 0 removes it at once.
    pub grace_period_seconds: Option<i64>,
}

/// How long (simulated) a pod's containers take to stop after a graceful delete when its
/// grace period is longer: they handle SIGTERM.
const POD_STOP: std::time::Duration = std::time::Duration::from_secs(1);

/// The grace period of a pod's deletion: Some(seconds) when the pod terminates gracefully
/// (it is on a node, still running, and neither the request nor the pod asks for 0), as the
/// kubelet then has to stop its containers before the pod is removed.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> Option<i64> {
    pod.pointer("/spec/nodeName").and_then(Value::as_str)?;
    // Nothing runs in a pod that has finished.
    if matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    (grace > 0).then_some(grace)
}

/// What a delete did.
#[derive(Clone, Debug)]
pub struct Deleted {
    /// The object as last stored (or as marked for deletion).
    pub object: Value,
    /// False when the object stays for a while (namespaces terminating, foreground
    /// deletion, CRD cleanup): the API then answers with the object, not a Status.
    pub finished: bool,
}

type ObjectKey = (String, String);

/// The kept events after a resourceVersion, and a receiver for everything later.
pub type WatchStart = (EventList, broadcast::Receiver<Arc<WatchEvent>>);

/// Stored objects or kept events. Stored objects are shared as they are; an old history
/// entry (whose object is no longer current) is decoded only when iterated, so that
/// replaying ten thousand events never holds ten thousand parsed values at once.
#[derive(Clone, Debug, Default)]
pub struct EventList {
    items: Vec<ListItem>,
}

#[derive(Clone, Debug)]
enum ListItem {
    Shared(Arc<WatchEvent>),
    Raw(RawEvent),
}

#[derive(Clone, Debug)]
struct RawEvent {
    resource: Arc<ResourceType>,
    kind: EventKind,
    resource_version: u64,
    bytes: Arc<[u8]>,
}

impl ListItem {
    fn event(&self) -> Arc<WatchEvent> {
        match self {
            ListItem::Shared(event) => event.clone(),
            ListItem::Raw(raw) => Arc::new(WatchEvent {
                resource: (*raw.resource).clone(),
                kind: raw.kind,
                object: Arc::new(decode(&raw.bytes)),
                resource_version: raw.resource_version,
                json: raw.bytes.clone(),
            }),
        }
    }
}

impl EventList {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The events one by one (old history entries decoded as they come).
    pub fn iter(&self) -> impl Iterator<Item = Arc<WatchEvent>> + '_ {
        self.items.iter().map(ListItem::event)
    }
}

impl IntoIterator for EventList {
    type Item = Arc<WatchEvent>;
    type IntoIter = EventListIter;

    fn into_iter(self) -> EventListIter {
        EventListIter {
            inner: self.items.into_iter(),
        }
    }
}

/// Iterator over an [`EventList`], decoding as it goes.
pub struct EventListIter {
    inner: std::vec::IntoIter<ListItem>,
}

impl Iterator for EventListIter {
    type Item = Arc<WatchEvent>;

    fn next(&mut self) -> Option<Arc<WatchEvent>> {
        self.inner.next().map(|item| item.event())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// An object as kept: the event that wrote it (parsed object and its JSON, shared with the
/// watchers and the history entry), so that reading it parses and copies nothing.
#[derive(Clone, Debug)]
struct Stored {
    event: Arc<WatchEvent>,
    /// The uids its ownerReferences name (for garbage collection).
    owners: Box<[String]>,
}

impl Stored {
    fn resource_version(&self) -> u64 {
        self.event.resource_version
    }
}

/// A committed change kept for watches that start from an older resourceVersion: its JSON
/// (compact, a fraction of the memory of a parsed value), and the parsed event for as long
/// as anyone else (the store, a watcher) still holds it.
struct HistoryEntry {
    resource: Arc<ResourceType>,
    kind: EventKind,
    resource_version: u64,
    bytes: Arc<[u8]>,
    parsed: std::sync::Weak<WatchEvent>,
}

impl HistoryEntry {
    fn item(&self) -> ListItem {
        match self.parsed.upgrade() {
            Some(event) => ListItem::Shared(event),
            None => ListItem::Raw(RawEvent {
                resource: self.resource.clone(),
                kind: self.kind,
                resource_version: self.resource_version,
                bytes: self.bytes.clone(),
            }),
        }
    }
}

struct Inner {
    resource_version: u64,
    objects: HashMap<ResourceType, BTreeMap<ObjectKey, Stored>>,
    history: VecDeque<HistoryEntry>,
    /// Watches must start at or after this resourceVersion.
    oldest_watchable: u64,
    /// Owner uid -> objects whose ownerReferences name it.
    dependents: HashMap<String, BTreeSet<(ResourceType, ObjectKey)>>,
}

fn decode(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

fn owner_uids(obj: &Value) -> Box<[String]> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// How long (real time) namespaces, CRDs and foreground deletions stay terminating.
const LINGER: std::time::Duration = std::time::Duration::from_millis(300);

pub struct Store {
    self_ref: std::sync::OnceLock<std::sync::Weak<Store>>,
    clock: Clock,
    registry: Registry,
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<WatchEvent>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// Metadata fields that the server owns and a client cannot change on update.
const IMMUTABLE_METADATA: [&str; 4] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "generation",
];

impl Store {
    /// An empty store with the namespaces every cluster starts with.
    pub fn new(clock: Clock) -> Self {
        let (events, _) = broadcast::channel(CHANNEL_CAPACITY);
        let store = Self {
            self_ref: std::sync::OnceLock::new(),
            clock,
            registry: Registry::new(),
            inner: Mutex::new(Inner {
                resource_version: FIRST_RESOURCE_VERSION,
                objects: HashMap::new(),
                history: VecDeque::new(),
                oldest_watchable: FIRST_RESOURCE_VERSION,
                dependents: HashMap::new(),
            }),
            events,
        };
        let namespaces = ResourceType::new("", "v1", "namespaces");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            if let Err(e) = store.create(&namespaces, ns, "kube-apiserver") {
                tracing::error!("creating namespace {name}: {e}");
            }
        }
        store
    }

    /// A store shared as `Arc`, which lets deletions that linger (namespaces, CRDs,
    /// foreground) finish in the background.
    pub fn shared(clock: Clock) -> Arc<Store> {
        let store = Arc::new(Store::new(clock));
        let _ = store.self_ref.set(Arc::downgrade(&store));
        store
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The served resources (built-ins and those of created CRDs).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current (newest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// A copy of the stored object (for a caller that changes it; readers take
    /// [`Store::get_shared`]).
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.get_shared(rt, namespace, name)
            .map(Arc::unwrap_or_clone)
    }

    /// The stored object itself, shared: nothing is parsed or copied.
    pub fn get_shared(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get_stored(rt, &(namespace.to_string(), name.to_string()))
            .map(|(_, v)| v)
    }

    /// The stored object and its resourceVersion.
    fn get_stored(&self, rt: &ResourceType, key: &ObjectKey) -> Option<(u64, Arc<Value>)> {
        let inner = self.lock();
        let stored = inner.objects.get(rt)?.get(key)?;
        Some((stored.resource_version(), stored.event.object.clone()))
    }

    /// Names (namespace, name) of the stored objects of a type in one namespace or all.
    fn keys(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<ObjectKey> {
        let inner = self.lock();
        let Some(objects) = inner.objects.get(rt) else {
            return Vec::new();
        };
        match namespace {
            Some(ns) => objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(k, _)| k.clone())
                .collect(),
            None => objects.keys().cloned().collect(),
        }
    }

    /// Objects of a type, in one namespace or all (`None`), ordered by namespace and name,
    /// with the resourceVersion of the list.
    pub fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let (events, rv) = self.list_shared(rt, namespace);
        (
            events
                .into_iter()
                .map(|e| Arc::unwrap_or_clone(e).object)
                .map(Arc::unwrap_or_clone)
                .collect(),
            rv,
        )
    }

    /// Like `list`, but sharing the stored objects instead of copying them.
    pub fn list_shared(&self, rt: &ResourceType, namespace: Option<&str>) -> (EventList, u64) {
        let inner = self.lock();
        (list_raw(&inner, rt, namespace), inner.resource_version)
    }

    /// Number of stored objects of all types.
    pub fn object_count(&self) -> usize {
        self.lock().objects.values().map(BTreeMap::len).sum()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    /// For a watch from `resource_version`: the kept events after it and a receiver for
    /// everything later, with no gap and no overlap. Err(oldest) when it is too old.
    pub fn watch_from(&self, resource_version: u64) -> Result<WatchStart, u64> {
        self.watch_from_filtered(resource_version, None)
    }

    /// `watch_from`, replaying only events of one resource type when given.
    pub fn watch_from_filtered(
        &self,
        resource_version: u64,
        only: Option<&ResourceType>,
    ) -> Result<WatchStart, u64> {
        let inner = self.lock();
        if resource_version < inner.oldest_watchable {
            return Err(inner.oldest_watchable);
        }
        let start = inner
            .history
            .partition_point(|e| e.resource_version <= resource_version);
        let items = inner
            .history
            .iter()
            .skip(start)
            .filter(|e| only.is_none_or(|rt| *rt == *e.resource))
            .map(HistoryEntry::item)
            .collect();
        Ok((EventList { items }, self.events.subscribe()))
    }

    /// A snapshot of a type's objects plus a receiver for every later event, atomically.
    pub fn list_and_subscribe(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
    ) -> (EventList, u64, broadcast::Receiver<Arc<WatchEvent>>) {
        let inner = self.lock();
        let rx = self.events.subscribe();
        (list_raw(&inner, rt, namespace), inner.resource_version, rx)
    }

    fn info(&self, rt: &ResourceType) -> Result<Arc<ResourceInfo>, ApiError> {
        self.registry.get(rt).ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({rt})"),
            )
        })
    }

    fn now(&self) -> String {
        format_time(self.clock.now())
    }

    pub fn create(&self, rt: &ResourceType, obj: Value, manager: &str) -> Result<Value, ApiError> {
        self.create_with(rt, obj, &WriteOptions::manager(manager))
    }

    pub fn update(&self, rt: &ResourceType, obj: Value, manager: &str) -> Result<Value, ApiError> {
        self.update_with(rt, obj, &WriteOptions::manager(manager))
    }

    pub fn update_status(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        status: Value,
        manager: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let key = (namespace.to_string(), name.to_string());
        let Some((rv, current)) = self.get_stored(rt, &key) else {
            return Err(ApiError::not_found(rt, name));
        };
        // A status write carries only the status (and the resourceVersion it was read at):
        // the rest of the object is the stored one.
        let obj = json!({
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv.to_string()},
            "status": status,
        });
        self.replace(
            rt,
            obj,
            &WriteOptions::manager(manager),
            true,
            Some((rv, current)),
        )
    }

    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.delete_with(rt, namespace, name, &DeleteOptions::default())
            .map(|d| d.object)
    }

    /// Creates an object: fills server fields and defaults, checks the namespace.
    pub fn create_with(
        &self,
        rt: &ResourceType,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.create_shared(rt, obj, opts).map(Arc::unwrap_or_clone)
    }

    /// [`Store::create_with`] answering with the stored object itself, shared: for callers
    /// that only read it (the controllers' creates, a fifth of their writes, copied every
    /// object they made).
    pub(crate) fn create_shared(
        &self,
        rt: &ResourceType,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.info(rt)?;
        let Named {
            namespace,
            mut name,
            generate_name,
        } = as_created(&info, &mut obj, opts)?;
        let now = self.now();
        // Order as in the real server: defaulting, then field ownership, then what
        // admission and the create strategy add (which nobody owns).
        decode::merge_string_data(rt, &mut obj);
        defaults::on_write(rt, &mut obj);
        if opts.ownership == Ownership::Update {
            managed_fields::record_update(
                None,
                &mut obj,
                &UpdateRecord {
                    manager: &opts.manager,
                    subresource: None,
                    api_version: &info.api_version(),
                    time: &now,
                    status_in_main: !info.has_status(),
                },
            );
        }
        defaults::on_create(rt, &mut obj, &now);
        let errors = validation::on_create(rt, &obj);
        if !errors.is_empty() {
            return Err(ApiError::invalid_fields(
                &info.kind,
                &info.group,
                &name,
                &errors,
            ));
        }

        let mut inner = self.lock();
        if info.namespaced {
            check_namespace_writable(&inner, rt, &namespace, &name)?;
        }
        let objects = inner.objects.entry(rt.clone()).or_default();
        if name.is_empty() {
            name = unique_generated_name(&generate_name, |candidate| {
                objects.contains_key(&(namespace.clone(), candidate.to_string()))
            });
        }
        let key = (namespace.clone(), name.clone());
        if objects.contains_key(&key) {
            return Err(ApiError::already_exists(rt, &name));
        }
        let meta = metadata_mut(&mut obj);
        meta.insert("name".into(), json!(name));
        meta.insert("creationTimestamp".into(), json!(now));
        if info.has_generation() {
            meta.insert("generation".into(), json!(1));
        }
        order_metadata(&mut obj);
        if opts.dry_run {
            // A dry-run create has no resourceVersion yet.
            return Ok(Arc::new(obj));
        }
        let rv = inner.resource_version + 1;
        set_resource_version(&mut obj, rv);
        let event = self.commit(&mut inner, rt, key, EventKind::Added, obj);
        drop(inner);
        self.after_write(rt, &event.object, EventKind::Added);
        Ok(Arc::clone(&event.object))
    }

    /// Replaces an object's metadata, spec and other fields, keeping its status (for kinds
    /// with a status subresource). A write that changes nothing stores nothing.
    pub fn update_with(
        &self,
        rt: &ResourceType,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.replace(rt, obj, opts, false, None)
            .map(Arc::unwrap_or_clone)
    }

    /// Replaces only `.status` (and nothing else) of the stored object.
    pub fn update_status_with(
        &self,
        rt: &ResourceType,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.replace(rt, obj, opts, true, None)
            .map(Arc::unwrap_or_clone)
    }

    /// `update_with` / `update_status_with` for a caller that already read the stored
    /// object (`current`: its resourceVersion and value), saving a second read. A write in
    /// between is still detected.
    pub(crate) fn update_known(
        &self,
        rt: &ResourceType,
        obj: Value,
        opts: &WriteOptions,
        status_only: bool,
        current: (u64, Arc<Value>),
    ) -> Result<Value, ApiError> {
        self.replace(rt, obj, opts, status_only, Some(current))
            .map(Arc::unwrap_or_clone)
    }

    /// Every update ends here. Answers the stored object itself, shared: most writers (the
    /// controllers' status writes) drop the answer, and copying it was a tenth of kube-sim's
    /// CPU at 1,000 clusters.
    fn replace(
        &self,
        rt: &ResourceType,
        mut obj: Value,
        opts: &WriteOptions,
        status_only: bool,
        current: Option<(u64, Arc<Value>)>,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.info(rt)?;
        let target = UpdateTarget::of(rt, &info, &obj, opts, status_only)?;
        let (old_rv, old_value) = match current {
            Some(known) => known,
            None => self
                .get_stored(rt, &target.key)
                .ok_or_else(|| ApiError::not_found(rt, &target.key.1))?,
        };
        let old_obj: &Value = &old_value;
        if let Some(expected) = &target.expected_rv
            && *expected != old_rv.to_string()
        {
            return Err(ApiError::conflict(rt, &target.key.1));
        }
        set_type_meta(&mut obj, &info);
        let mut new = if status_only {
            status_write(&info, old_obj, obj, opts)
        } else {
            spec_write(rt, &info, old_obj, obj, opts, &target)?
        };
        set_resource_version(&mut new, old_rv);
        if !status_only && info.has_generation() && spec_changed(rt, old_obj, &new) {
            let generation = old_obj
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        if same_content(old_obj, &new) {
            return Ok(old_value);
        }
        if opts.ownership == Ownership::Update {
            managed_fields::record_update(
                Some(old_obj),
                &mut new,
                &UpdateRecord {
                    manager: &opts.manager,
                    subresource: status_only.then_some("status"),
                    api_version: &info.api_version(),
                    time: &self.now(),
                    status_in_main: !info.has_status(),
                },
            );
        }
        order_metadata(&mut new);
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        self.commit_update(rt, target, old_rv, new, opts, status_only)
    }

    /// Stores `new` over the version `old_rv` that it was computed from. When another write
    /// came in between, an update that named its resourceVersion conflicts; one that did not
    /// is computed again against the newer object.
    fn commit_update(
        &self,
        rt: &ResourceType,
        target: UpdateTarget,
        old_rv: u64,
        mut new: Value,
        opts: &WriteOptions,
        status_only: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let current_rv = inner
            .objects
            .get(rt)
            .and_then(|o| o.get(&target.key))
            .map(Stored::resource_version);
        if current_rv != Some(old_rv) {
            return match current_rv {
                None => Err(ApiError::not_found(rt, &target.key.1)),
                Some(_) if target.expected_rv.is_some() => {
                    Err(ApiError::conflict(rt, &target.key.1))
                }
                Some(_) => {
                    drop(inner);
                    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                    }
                    self.replace(rt, new, opts, status_only, None)
                }
            };
        }
        let rv = inner.resource_version + 1;
        set_resource_version(&mut new, rv);
        let event = self.commit(&mut inner, rt, target.key, EventKind::Modified, new);
        drop(inner);
        self.after_write(rt, &event.object, EventKind::Modified);
        Ok(Arc::clone(&event.object))
    }

    /// Deletes an object. Namespaces go Terminating first and disappear once their objects
    /// are gone; Foreground deletion and CRDs likewise answer with the object. Objects owned
    /// (ownerReferences) by the deleted one are deleted too unless propagation is Orphan.
    pub fn delete_with(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let info = self.info(rt)?;
        let namespace = if info.namespaced { namespace } else { "" };
        let key = (namespace.to_string(), name.to_string());
        let (existing_rv, existing) = self
            .get_stored(rt, &key)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let obj: &Value = &existing;
        if let Some(uid) = &opts.expected_uid
            && obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid.as_str())
        {
            return Err(ApiError::conflict(rt, name));
        }
        if let Some(rv) = &opts.expected_resource_version
            && *rv != existing_rv.to_string()
        {
            return Err(ApiError::conflict(rt, name));
        }
        let is_namespace = rt.group.is_empty() && rt.resource == "namespaces";
        let is_crd =
            rt.group == "apiextensions.k8s.io" && rt.resource == "customresourcedefinitions";
        let is_pod = rt.group.is_empty() && rt.resource == "pods";
        let pod_grace = is_pod
            .then(|| pod_grace_period(obj, opts.grace_period_seconds))
            .flatten();
        let lingers = is_namespace
            || is_crd
            || opts.propagation == Propagation::Foreground
            || pod_grace.is_some();
        if opts.dry_run {
            let mut marked = obj.clone();
            if lingers {
                self.mark_deleting(&mut marked, rt, opts.propagation, pod_grace);
            }
            return Ok(Deleted {
                object: marked,
                finished: !lingers,
            });
        }
        let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
        // A pod already terminating goes at once when asked with grace 0 (--force).
        let forced = is_pod && terminating && opts.grace_period_seconds == Some(0);
        if lingers || (terminating && !forced) {
            // Already terminating: answer with the object as it is.
            if terminating {
                return Ok(Deleted {
                    object: obj.clone(),
                    finished: false,
                });
            }
            let mut marked = obj.clone();
            self.mark_deleting(&mut marked, rt, opts.propagation, pod_grace);
            let marked = {
                let mut inner = self.lock();
                let rv = inner.resource_version + 1;
                set_resource_version(&mut marked, rv);
                (*self
                    .commit(&mut inner, rt, key.clone(), EventKind::Modified, marked)
                    .object)
                    .clone()
            };
            // The kubelet stops the containers (within the grace period), then the pod goes.
            let delay = match pod_grace {
                Some(grace) => self
                    .clock
                    .real(POD_STOP.min(std::time::Duration::from_secs(grace.unsigned_abs()))),
                None => LINGER,
            };
            let uid = marked
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string);
            self.finish_deletion_later(rt.clone(), key, uid, opts.propagation, delay);
            return Ok(Deleted {
                object: marked,
                finished: false,
            });
        }
        let removed = self
            .remove(rt, &key)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if opts.propagation != Propagation::Orphan {
            self.collect_garbage(&removed);
        }
        Ok(Deleted {
            object: removed,
            finished: true,
        })
    }

    /// Marks an object as being deleted. `pod_grace`: a pod's grace period, which the
    /// deletionTimestamp is set ahead by, as a real server does.
    fn mark_deleting(
        &self,
        obj: &mut Value,
        rt: &ResourceType,
        propagation: Propagation,
        pod_grace: Option<i64>,
    ) {
        let now = self.now();
        let is_namespace = rt.group.is_empty() && rt.resource == "namespaces";
        let is_crd = rt.group == "apiextensions.k8s.io";
        let meta = metadata_mut(obj);
        match pod_grace {
            Some(grace) => {
                // A real server sets the deletionTimestamp ahead by the grace period: the
                // moment the kubelet kills what is still running. Here that moment comes
                // `grace` simulated seconds on, which is `grace / scale` of wall time, so the
                // timestamp says when it really happens (kubectl's "Terminating (lasts ...)"
                // reads as on a real cluster at scale 1). It is the one timestamp a client
                // sees ahead of the wall clock, as on a real server.
                let now = self.clock.now();
                let ahead = self
                    .clock
                    .real(std::time::Duration::from_secs(grace.unsigned_abs()));
                let at = jiff::SignedDuration::try_from(ahead)
                    .ok()
                    .and_then(|d| now.checked_add(d).ok())
                    .unwrap_or(now);
                meta.insert("deletionTimestamp".into(), json!(format_time(at)));
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            None => {
                meta.insert("deletionTimestamp".into(), json!(now));
            }
        }
        if !is_namespace && !is_crd && pod_grace.is_none() {
            // As recorded for foreground deletion; namespaces and CRDs carry none.
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        let finalizer = if is_crd {
            Some("customresourcecleanup.apiextensions.k8s.io")
        } else if !is_namespace && propagation == Propagation::Foreground {
            Some("foregroundDeletion")
        } else {
            None
        };
        if let Some(f) = finalizer {
            let list = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(a) = list.as_array_mut()
                && !a.iter().any(|v| v == f)
            {
                a.push(json!(f));
            }
        }
        if is_namespace && let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("phase".into(), json!("Terminating"));
        }
        if is_crd && let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            let conditions = status.entry("conditions").or_insert_with(|| json!([]));
            if !conditions.is_array() {
                *conditions = json!([]);
            }
            if let Some(a) = conditions.as_array_mut() {
                a.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
                a.push(json!({
                    "type": "Terminating", "status": "True", "lastTransitionTime": now,
                    "reason": "InstanceDeletionPending",
                    "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon"
                }));
            }
        }
        order_metadata(obj);
    }

    /// Finishes a lingering deletion shortly after, in a task, when the store is shared
    /// (`Store::shared`) and a runtime runs; otherwise right away. Either way watchers see
    /// MODIFIED (terminating) and then DELETED, as on a real server.
    /// `uid`: the object being deleted; one created since under the same name stays.
    fn finish_deletion_later(
        &self,
        rt: ResourceType,
        key: ObjectKey,
        uid: Option<String>,
        propagation: Propagation,
        delay: std::time::Duration,
    ) {
        let shared = self.self_ref.get().and_then(std::sync::Weak::upgrade);
        match (shared, tokio::runtime::Handle::try_current()) {
            (Some(store), Ok(handle)) => {
                handle.spawn(async move {
                    tokio::time::sleep(delay).await;
                    store.finish_deletion(&rt, &key, uid.as_deref(), propagation);
                });
            }
            _ => self.finish_deletion(&rt, &key, uid.as_deref(), propagation),
        }
    }

    fn finish_deletion(
        &self,
        rt: &ResourceType,
        key: &ObjectKey,
        uid: Option<&str>,
        propagation: Propagation,
    ) {
        if let Some(uid) = uid
            && let Some((_, current)) = self.get_stored(rt, key)
            && current.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        {
            return;
        }
        let is_namespace = rt.group.is_empty() && rt.resource == "namespaces";
        let is_crd =
            rt.group == "apiextensions.k8s.io" && rt.resource == "customresourcedefinitions";
        if is_namespace {
            let ns = &key.1;
            let types: Vec<ResourceType> = {
                let inner = self.lock();
                inner.objects.keys().cloned().collect()
            };
            for t in types {
                if !self.registry.is_namespaced(&t) {
                    continue;
                }
                for key in self.keys(&t, Some(ns)) {
                    self.remove(&t, &key);
                }
            }
        }
        if is_crd {
            for served in self.registry.unregister_crd(&key.1) {
                for key in self.keys(&served, None) {
                    self.remove(&served, &key);
                }
            }
        }
        if let Some(removed) = self.remove(rt, key)
            && propagation != Propagation::Orphan
        {
            self.collect_garbage(&removed);
        }
    }

    /// Deletes objects whose ownerReferences point at `owner` (recursively).
    fn collect_garbage(&self, owner: &Value) {
        let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
            return;
        };
        let dependents: Vec<(ResourceType, ObjectKey)> = {
            let inner = self.lock();
            inner
                .dependents
                .get(uid)
                .map(|d| d.iter().cloned().collect())
                .unwrap_or_default()
        };
        for (rt, key) in dependents {
            if let Some(removed) = self.remove(&rt, &key) {
                self.collect_garbage(&removed);
            }
        }
    }

    /// Removes an object and publishes DELETED. Returns the object as deleted.
    fn remove(&self, rt: &ResourceType, key: &ObjectKey) -> Option<Value> {
        let mut inner = self.lock();
        let old = inner.objects.get_mut(rt)?.remove(key)?;
        unlink_owners(&mut inner, rt, key, &old.owners);
        let rv = inner.resource_version + 1;
        inner.resource_version = rv;
        let mut obj = Arc::unwrap_or_clone(old.event).object;
        set_resource_version(Arc::make_mut(&mut obj), rv);
        let event = self.publish(&mut inner, rt, EventKind::Deleted, rv, obj);
        drop(inner);
        Some((*event.object).clone())
    }

    /// Stores an object under a new resourceVersion (already set in `obj`) and publishes
    /// the event. Must be called with the lock held.
    fn commit(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        key: ObjectKey,
        kind: EventKind,
        obj: Value,
    ) -> Arc<WatchEvent> {
        let rv = inner.resource_version + 1;
        inner.resource_version = rv;
        let owners = owner_uids(&obj);
        for uid in owners.iter() {
            inner
                .dependents
                .entry(uid.clone())
                .or_default()
                .insert((rt.clone(), key.clone()));
        }
        let event = self.publish(inner, rt, kind, rv, Arc::new(obj));
        let still = owners.clone();
        let stored = Stored {
            event: event.clone(),
            owners,
        };
        let previous = inner
            .objects
            .entry(rt.clone())
            .or_default()
            .insert(key.clone(), stored);
        if let Some(previous) = previous {
            let gone: Vec<String> = previous
                .owners
                .iter()
                .filter(|u| !still.contains(u))
                .cloned()
                .collect();
            unlink_owners(inner, rt, &key, &gone);
        }
        event
    }

    /// Serializes a committed change once, keeps it in the history and sends it to every
    /// subscriber. Must be called with the lock held (the order of events is the order of
    /// resourceVersions).
    fn publish(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        kind: EventKind,
        rv: u64,
        object: Arc<Value>,
    ) -> Arc<WatchEvent> {
        let json: Arc<[u8]> = serde_json::to_vec(&*object).unwrap_or_default().into();
        let event = Arc::new(WatchEvent {
            resource: rt.clone(),
            kind,
            object,
            resource_version: rv,
            json: json.clone(),
        });
        if inner.history.len() >= HISTORY_LIMIT
            && let Some(dropped) = inner.history.pop_front()
        {
            inner.oldest_watchable = dropped.resource_version;
        }
        inner.history.push_back(HistoryEntry {
            resource: Arc::new(rt.clone()),
            kind,
            resource_version: rv,
            bytes: json,
            parsed: Arc::downgrade(&event),
        });
        // No receivers is fine.
        let _ = self.events.send(event.clone());
        event
    }

    /// Side effects of a committed write that the API server itself performs.
    fn after_write(&self, rt: &ResourceType, obj: &Value, kind: EventKind) {
        if rt.group == "apiextensions.k8s.io"
            && rt.resource == "customresourcedefinitions"
            && kind != EventKind::Deleted
            && obj.pointer("/metadata/deletionTimestamp").is_none()
        {
            self.registry.register_crd(obj);
        }
    }
}

/// The names a create gives its object.
struct Named {
    /// Empty for cluster-scoped kinds.
    namespace: String,
    /// Empty when the server is to generate it from `generate_name`.
    name: String,
    generate_name: String,
}

/// A create's body as the server takes it before defaulting: its type, namespace and
/// names checked, the fields a client may not set removed, a new uid, the status empty.
fn as_created(
    info: &ResourceInfo,
    obj: &mut Value,
    opts: &WriteOptions,
) -> Result<Named, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    }
    set_type_meta(obj, info);
    let meta = metadata_mut(obj);
    let namespace = if info.namespaced {
        meta.get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    } else {
        meta.remove("namespace");
        String::new()
    };
    if info.namespaced && namespace.is_empty() {
        return Err(ApiError::bad_request(
            "the server could not find the requested resource: a namespace is required",
        ));
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let generate_name = meta
        .get("generateName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.is_empty() && generate_name.is_empty() {
        return Err(ApiError::name_required(&info.kind));
    }
    // Clients may not set these on create.
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "generation",
        "selfLink",
    ] {
        meta.remove(field);
    }
    if opts.ownership == Ownership::Update {
        meta.remove("managedFields");
    }
    meta.insert("uid".into(), json!(new_uid()));
    if info.has_status()
        && let Some(map) = obj.as_object_mut()
    {
        // Status is written through the subresource only; a create starts it empty.
        if info.crd.is_some() {
            map.remove("status");
        } else {
            map.insert("status".into(), json!({}));
        }
    }
    Ok(Named {
        namespace,
        name,
        generate_name,
    })
}

/// Which object an update is for, and the resourceVersion it must find.
struct UpdateTarget {
    /// (namespace, name); the namespace is empty for cluster-scoped kinds.
    key: ObjectKey,
    expected_rv: Option<String>,
}

impl UpdateTarget {
    /// Reads the target from the body (and the options): a name is required, and a
    /// resourceVersion where the kind's update requires one.
    fn of(
        rt: &ResourceType,
        info: &ResourceInfo,
        obj: &Value,
        opts: &WriteOptions,
        status_only: bool,
    ) -> Result<UpdateTarget, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        let text = |pointer: &str| {
            obj.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let namespace = if info.namespaced {
            text("/metadata/namespace")
        } else {
            String::new()
        };
        let name = text("/metadata/name");
        if name.is_empty() {
            return Err(ApiError::name_required(&info.kind));
        }
        let body_rv = Some(text("/metadata/resourceVersion")).filter(|rv| !rv.is_empty());
        let expected_rv = opts.expected_resource_version.clone().or(body_rv);
        if expected_rv.is_none()
            && !status_only
            && opts.ownership == Ownership::Update
            && info.requires_resource_version_on_update()
        {
            return Err(ApiError::resource_version_required(rt, &name));
        }
        Ok(UpdateTarget {
            key: (namespace, name),
            expected_rv,
        })
    }
}

/// The object a status write leaves: the stored one with the body's status (and, for the
/// apps kinds, its annotations: their status strategies keep annotation changes made with a
/// status write, as the deployment controller's revision annotation is).
fn status_write(info: &ResourceInfo, old: &Value, mut body: Value, opts: &WriteOptions) -> Value {
    // The stored object but its status (which the write replaces), copied once.
    let mut new = Value::Object(
        old.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| *k != "status")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
    );
    // Taken, not copied: only the body's metadata is read below.
    let status = body
        .as_object_mut()
        .and_then(|m| m.remove("status"))
        .unwrap_or(json!({}));
    new.as_object_mut()
        .map(|m| m.insert("status".into(), status));
    if opts.ownership == Ownership::AsGiven
        && let Some(mf) = body.pointer("/metadata/managedFields")
    {
        metadata_mut(&mut new).insert("managedFields".into(), mf.clone());
    }
    if info.group == "apps"
        && let Some(annotations) = body.pointer("/metadata/annotations")
    {
        metadata_mut(&mut new).insert("annotations".into(), annotations.clone());
    }
    new
}

/// The object an update of the main resource leaves: the body with the stored status, the
/// stored immutable metadata (and managedFields, which the write's record then updates),
/// defaulted, prepared and validated as the kind's update strategy does.
fn spec_write(
    rt: &ResourceType,
    info: &ResourceInfo,
    old: &Value,
    mut obj: Value,
    opts: &WriteOptions,
    target: &UpdateTarget,
) -> Result<Value, ApiError> {
    if info.has_status() {
        match old.get("status") {
            Some(status) => {
                obj.as_object_mut()
                    .map(|m| m.insert("status".into(), status.clone()));
            }
            None => {
                obj.as_object_mut().map(|m| m.remove("status"));
            }
        }
    }
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let meta = metadata_mut(&mut obj);
    for field in IMMUTABLE_METADATA {
        match old_meta.and_then(|m| m.get(field)) {
            Some(v) => {
                meta.insert(field.into(), v.clone());
            }
            None => {
                meta.remove(field);
            }
        }
    }
    if opts.ownership == Ownership::Update {
        match old_meta.and_then(|m| m.get("managedFields")) {
            Some(v) => meta.insert("managedFields".into(), v.clone()),
            None => meta.remove("managedFields"),
        };
    }
    if info.namespaced {
        meta.insert("namespace".into(), json!(target.key.0));
    } else {
        meta.remove("namespace");
    }
    decode::merge_string_data(rt, &mut obj);
    defaults::on_write(rt, &mut obj);
    // As the update strategy prepares it, then validation: the same answer for PUT, every
    // patch type and server-side apply, which all end here.
    validation::prepare_update(rt, old, &mut obj);
    let errors = validation::on_update(rt, old, &obj);
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(
            &info.kind,
            &info.group,
            &target.key.1,
            &errors,
        ));
    }
    Ok(obj)
}

/// Whether a write changes what generation counts: everything but metadata and status;
/// for Deployments also annotations (as the real server does).
fn spec_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) else {
        return true;
    };
    let ignored = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    let keys = old_map.keys().chain(new_map.keys()).filter(|k| !ignored(k));
    for k in keys {
        if old_map.get(k) != new_map.get(k) {
            return true;
        }
    }
    if rt.group == "apps" && rt.resource == "deployments" {
        return old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations");
    }
    false
}

/// Equal apart from resourceVersion (and managedFields timestamps, which follow changes).
fn same_content(old: &Value, new: &Value) -> bool {
    let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) else {
        return false;
    };
    if old_map.len() != new_map.len() {
        return false;
    }
    // Everything but metadata first: a status or spec write differs there, cheaply.
    let rest_same = old_map
        .iter()
        .filter(|(k, _)| *k != "metadata")
        .all(|(k, v)| new_map.get(k) == Some(v));
    if !rest_same {
        return false;
    }
    match (old_map.get("metadata"), new_map.get("metadata")) {
        (Some(Value::Object(om)), Some(Value::Object(nm))) => same_metadata(om, nm),
        (o, n) => o == n,
    }
}

/// Metadata equal apart from resourceVersion and the times of managedFields entries.
fn same_metadata(om: &Map<String, Value>, nm: &Map<String, Value>) -> bool {
    let skip = |f: &str| f == "resourceVersion" || f == "managedFields";
    let same = om.iter().filter(|(f, _)| !skip(f)).count()
        == nm.iter().filter(|(f, _)| !skip(f)).count()
        && om
            .iter()
            .filter(|(f, _)| !skip(f))
            .all(|(f, ov)| nm.get(f) == Some(ov));
    if !same {
        return false;
    }
    match (managed_entries(om), managed_entries(nm)) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(e, f)| same_apart_from_time(e, f))
        }
        _ => false,
    }
}

/// The entries of `managedFields` (None without the field; none when it is no list).
fn managed_entries(meta: &Map<String, Value>) -> Option<&[Value]> {
    meta.get("managedFields")
        .map(|mf| mf.as_array().map_or(&[][..], Vec::as_slice))
}

/// Two managedFields entries equal apart from their `time`.
fn same_apart_from_time(e: &Value, f: &Value) -> bool {
    let (Some(a), Some(b)) = (e.as_object(), f.as_object()) else {
        return e == f;
    };
    let timeless = |m: &'_ Map<String, Value>| m.iter().filter(|(k, _)| *k != "time").count();
    timeless(a) == timeless(b)
        && a.iter()
            .filter(|(k, _)| *k != "time")
            .all(|(k, v)| b.get(k) == Some(v))
}

/// The stored objects of a type (one namespace or all), shared.
fn list_raw(inner: &Inner, rt: &ResourceType, namespace: Option<&str>) -> EventList {
    let Some(objects) = inner.objects.get(rt) else {
        return EventList::default();
    };
    let item = |s: &Stored| ListItem::Shared(s.event.clone());
    let items = match namespace {
        Some(ns) => objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, s)| item(s))
            .collect(),
        None => objects.values().map(item).collect(),
    };
    EventList { items }
}

fn unlink_owners(inner: &mut Inner, rt: &ResourceType, key: &ObjectKey, owners: &[String]) {
    for uid in owners {
        if let Some(set) = inner.dependents.get_mut(uid) {
            set.remove(&(rt.clone(), key.clone()));
            if set.is_empty() {
                inner.dependents.remove(uid);
            }
        }
    }
}

fn check_namespace_writable(
    inner: &Inner,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
) -> Result<(), ApiError> {
    let ns = inner
        .objects
        .get(&ResourceType::new("", "v1", "namespaces"))
        .and_then(|o| o.get(&(String::new(), namespace.to_string())));
    match ns.map(|stored| &stored.event.object) {
        None => Err(ApiError::namespace_not_found(namespace)),
        Some(ns) if ns.pointer("/metadata/deletionTimestamp").is_some() => {
            Err(ApiError::namespace_terminating(rt, name, namespace))
        }
        Some(_) => Ok(()),
    }
}

fn set_type_meta(obj: &mut Value, info: &ResourceInfo) {
    if let Some(map) = obj.as_object_mut() {
        map.insert("kind".into(), json!(info.kind));
        map.insert("apiVersion".into(), json!(info.api_version()));
    }
}

fn set_resource_version(obj: &mut Value, rv: u64) {
    metadata_mut(obj).insert("resourceVersion".into(), json!(rv.to_string()));
}

/// Keeps `metadata.managedFields` last within metadata, as the server orders it (only
/// visible when JSON object order is preserved).
fn order_metadata(obj: &mut Value) {
    let meta = metadata_mut(obj);
    if let Some(mf) = meta.remove("managedFields") {
        meta.insert("managedFields".into(), mf);
    }
}

fn unique_generated_name(prefix: &str, taken: impl Fn(&str) -> bool) -> String {
    loop {
        let name = generated_name(prefix);
        if !taken(&name) {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(Clock::default())
    }

    fn deployments() -> ResourceType {
        ResourceType::new("apps", "v1", "deployments")
    }

    fn deployment(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}}})
    }

    #[test]
    fn starts_with_the_standard_namespaces() {
        let s = store();
        let (items, _) = s.list(&ResourceType::new("", "v1", "namespaces"), None);
        let names: Vec<&str> = items
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["default", "kube-node-lease", "kube-public", "kube-system"]
        );
        assert_eq!(items[0]["status"]["phase"], "Active");
    }

    #[test]
    fn create_sets_server_fields() {
        let s = store();
        let created = s.create(&deployments(), deployment("a:1"), "test").unwrap();
        let meta = &created["metadata"];
        assert_eq!(meta["generation"], 1);
        assert_eq!(meta["uid"].as_str().unwrap().len(), 36);
        assert!(meta["creationTimestamp"].is_string());
        assert_eq!(meta["managedFields"][0]["manager"], "test");
        assert_eq!(meta["managedFields"][0]["operation"], "Update");
        assert_eq!(created["spec"]["revisionHistoryLimit"], 10);
        let again = s
            .create(&deployments(), deployment("a:1"), "test")
            .unwrap_err();
        assert_eq!(again.code, 409);
        assert_eq!(again.reason, "AlreadyExists");
    }

    /// A shared create answers with the stored object itself (no copy), the plain create
    /// with an equal value; a dry run answers with the object it would store, storing nothing.
    #[test]
    fn a_shared_create_answers_with_the_stored_object() {
        let s = store();
        let opts = WriteOptions::manager("test");
        let created = s
            .create_shared(&deployments(), deployment("a:1"), &opts)
            .unwrap();
        let stored = s.get_shared(&deployments(), "default", "web").unwrap();
        assert!(Arc::ptr_eq(&created, &stored));
        assert_eq!(
            created["metadata"]["resourceVersion"],
            stored["metadata"]["resourceVersion"]
        );

        let mut other = deployment("a:1");
        other["metadata"]["name"] = json!("api");
        let plain = s.create_with(&deployments(), other, &opts).unwrap();
        assert_eq!(
            plain,
            *s.get_shared(&deployments(), "default", "api").unwrap()
        );

        let mut dry = deployment("a:1");
        dry["metadata"]["name"] = json!("dry");
        let dry_opts = WriteOptions {
            dry_run: true,
            ..WriteOptions::manager("test")
        };
        let answer = s.create_shared(&deployments(), dry, &dry_opts).unwrap();
        assert_eq!(answer["metadata"]["name"], "dry");
        assert!(answer["metadata"].get("resourceVersion").is_none());
        assert!(s.get_shared(&deployments(), "default", "dry").is_none());
    }

    #[test]
    fn admission_fields_of_pods_are_not_owned() {
        let s = store();
        let pods = ResourceType::new("", "v1", "pods");
        let pod = json!({"metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "example/web:v1",
                "ports": [{"containerPort": 8080}]}]}});
        let created = s.create(&pods, pod, "kube-controller-manager").unwrap();
        let fields = &created["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(fields["f:spec"].get("f:volumes").is_none());
        assert!(fields["f:spec"].get("f:tolerations").is_none());
        assert!(fields["f:spec"].get("f:serviceAccountName").is_none());
        assert_eq!(fields["f:spec"]["f:dnsPolicy"], json!({}));
        assert_eq!(fields["f:spec"]["f:enableServiceLinks"], json!({}));
        assert!(fields["f:spec"].get("f:priority").is_none());
        let container = &fields["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
        assert_eq!(container["f:ports"]["."], json!({}));
        assert!(container.get("f:volumeMounts").is_none());
        assert!(created["spec"]["volumes"].is_array());
        assert_eq!(created["status"]["phase"], "Pending");
    }

    #[test]
    fn missing_namespace_is_404() {
        let s = store();
        let mut d = deployment("a:1");
        d["metadata"]["namespace"] = json!("nope");
        let err = s.create(&deployments(), d, "test").unwrap_err();
        assert_eq!(err.code, 404);
        assert_eq!(err.message, "namespaces \"nope\" not found");
    }

    #[test]
    fn generate_name_makes_a_name() {
        let s = store();
        let cms = ResourceType::new("", "v1", "configmaps");
        let cm = json!({"metadata": {"generateName": "cfg-", "namespace": "default"}});
        let created = s.create(&cms, cm, "test").unwrap();
        let name = created["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");
        assert!(created["metadata"].get("generation").is_none());
    }

    #[test]
    fn update_bumps_generation_only_for_spec_changes() {
        let s = store();
        let created = s.create(&deployments(), deployment("a:1"), "test").unwrap();
        let rv1 = created["metadata"]["resourceVersion"].clone();
        // No change: same RV, no event.
        let same = s.update(&deployments(), deployment("a:1"), "test").unwrap();
        assert_eq!(same["metadata"]["resourceVersion"], rv1);
        // Label change: new RV, same generation.
        let mut labelled = deployment("a:1");
        labelled["metadata"]["labels"]["tier"] = json!("x");
        let labelled = s.update(&deployments(), labelled, "test").unwrap();
        assert_ne!(labelled["metadata"]["resourceVersion"], rv1);
        assert_eq!(labelled["metadata"]["generation"], 1);
        // Spec change: generation 2.
        let mut changed = deployment("a:2");
        changed["metadata"]["labels"]["tier"] = json!("x");
        let changed = s.update(&deployments(), changed, "test").unwrap();
        assert_eq!(changed["metadata"]["generation"], 2);
        // Annotation change on a Deployment: generation 3.
        let mut annotated = changed.clone();
        annotated["metadata"]["annotations"] = json!({"a": "b"});
        let annotated = s.update(&deployments(), annotated, "test").unwrap();
        assert_eq!(annotated["metadata"]["generation"], 3);
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let s = store();
        let created = s.create(&deployments(), deployment("a:1"), "test").unwrap();
        let mut first = created.clone();
        first["spec"]["replicas"] = json!(3);
        s.update(&deployments(), first, "test").unwrap();
        let mut stale = created;
        stale["spec"]["replicas"] = json!(4);
        let err = s.update(&deployments(), stale, "test").unwrap_err();
        assert_eq!(err.code, 409);
        assert!(err.message.contains("the object has been modified"));
    }

    #[test]
    fn status_updates_keep_generation_and_spec() {
        let s = store();
        s.create(&deployments(), deployment("a:1"), "test").unwrap();
        let updated = s
            .update_status(
                &deployments(),
                "default",
                "web",
                json!({"replicas": 2}),
                "ctrl",
            )
            .unwrap();
        assert_eq!(updated["status"]["replicas"], 2);
        assert_eq!(updated["metadata"]["generation"], 1);
        let entries = updated["metadata"]["managedFields"].as_array().unwrap();
        let entry = entries.iter().find(|e| e["manager"] == "ctrl").unwrap();
        assert_eq!(entry["subresource"], "status");
        // A spec update keeps the status.
        let after = s.update(&deployments(), deployment("a:2"), "test").unwrap();
        assert_eq!(after["status"]["replicas"], 2);
    }

    #[test]
    fn deployment_status_writes_keep_annotations_without_new_generation() {
        let s = store();
        let mut d = s.create(&deployments(), deployment("a:1"), "test").unwrap();
        d["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
        d["status"] = json!({"observedGeneration": 1});
        let updated = s
            .update_status_with(&deployments(), d, &WriteOptions::manager("ctrl"))
            .unwrap();
        assert_eq!(
            updated["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
            "1"
        );
        assert_eq!(updated["metadata"]["generation"], 1);
        let entries = updated["metadata"]["managedFields"].as_array().unwrap();
        let ctrl = entries.iter().find(|e| e["manager"] == "ctrl").unwrap();
        assert!(ctrl["fieldsV1"]["f:metadata"]["f:annotations"].is_object());
    }

    #[test]
    fn same_content_ignores_only_resource_version_and_entry_times() {
        let base = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "1",
            "managedFields": [{"manager": "kubelet", "time": "2026-12-02T10:00:00Z"}]},
            "spec": {"a": 1}, "status": {"phase": "Pending"}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            v
        };
        let cases: [(&str, Value, bool); 6] = [
            ("identical", base.clone(), true),
            (
                "resourceVersion",
                with(&|v| v["metadata"]["resourceVersion"] = json!("2")),
                true,
            ),
            (
                "entry time",
                with(&|v| v["metadata"]["managedFields"][0]["time"] = json!("x")),
                true,
            ),
            (
                "entry manager",
                with(&|v| v["metadata"]["managedFields"][0]["manager"] = json!("m")),
                false,
            ),
            (
                "status",
                with(&|v| v["status"]["phase"] = json!("Running")),
                false,
            ),
            (
                "label",
                with(&|v| v["metadata"]["labels"] = json!({"a": "b"})),
                false,
            ),
        ];
        for (what, new, same) in cases {
            assert_eq!(same_content(&base, &new), same, "{what}");
        }
    }

    #[test]
    fn reads_share_the_stored_object_and_events_carry_its_json() {
        let s = store();
        let mut rx = s.subscribe();
        let created = s.create(&deployments(), deployment("a:1"), "test").unwrap();
        let first = s.get_shared(&deployments(), "default", "web").unwrap();
        let again = s.get_shared(&deployments(), "default", "web").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "a read copies nothing");
        assert_eq!(*first, created);
        let event = rx.try_recv().unwrap();
        assert!(
            Arc::ptr_eq(&event.object, &first),
            "the event is the stored object"
        );
        let json: Value = serde_json::from_slice(&event.json).unwrap();
        assert_eq!(json, created);
        // A replay of a current object shares it; one of an old version decodes its JSON.
        s.update(&deployments(), deployment("a:2"), "test").unwrap();
        let (replay, _) = s.watch_from(event.resource_version - 1).unwrap();
        let replayed: Vec<Arc<WatchEvent>> = replay.iter().collect();
        assert_eq!(replayed.len(), 2);
        assert_eq!(*replayed[0].object, created);
        let now = s.get_shared(&deployments(), "default", "web").unwrap();
        assert!(Arc::ptr_eq(&replayed[1].object, &now));
    }

    #[test]
    fn watch_replays_from_a_resource_version() {
        let s = store();
        let start = s.resource_version();
        s.create(&deployments(), deployment("a:1"), "test").unwrap();
        s.delete(&deployments(), "default", "web").unwrap();
        let (events, _rx) = s.watch_from(start).unwrap();
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Added, EventKind::Deleted]);
        assert!(s.watch_from(1).is_err());
    }

    #[test]
    fn deleting_a_namespace_removes_its_objects() {
        let s = store();
        let namespaces = ResourceType::new("", "v1", "namespaces");
        s.create(&namespaces, json!({"metadata": {"name": "x"}}), "t")
            .unwrap();
        let mut d = deployment("a:1");
        d["metadata"]["namespace"] = json!("x");
        s.create(&deployments(), d, "t").unwrap();
        let deleted = s
            .delete_with(&namespaces, "", "x", &DeleteOptions::default())
            .unwrap();
        assert!(!deleted.finished);
        assert_eq!(deleted.object["status"]["phase"], "Terminating");
        assert!(s.get(&deployments(), "x", "web").is_none());
        assert!(s.get(&namespaces, "", "x").is_none());
    }

    #[test]
    fn owned_objects_are_garbage_collected() {
        let s = store();
        let owner = s.create(&deployments(), deployment("a:1"), "t").unwrap();
        let rs = ResourceType::new("apps", "v1", "replicasets");
        let child = json!({"metadata": {"name": "web-1", "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": owner["metadata"]["uid"], "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}}});
        s.create(&rs, child, "t").unwrap();
        s.delete(&deployments(), "default", "web").unwrap();
        assert!(s.get(&rs, "default", "web-1").is_none());
    }

    #[test]
    fn crd_creation_serves_its_resource() {
        let s = store();
        let crds = ResourceType::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let crd = json!({"metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}});
        s.create(&crds, crd, "t").unwrap();
        let widgets = ResourceType::new("example.com", "v1", "widgets");
        let w = json!({"metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 1}});
        let created = s.create(&widgets, w, "t").unwrap();
        assert_eq!(created["kind"], "Widget");
        assert_eq!(created["metadata"]["generation"], 1);
        s.delete(&crds, "", "widgets.example.com").unwrap();
        assert!(s.registry().get(&widgets).is_none());
    }
}
