//! Watch streams: what a watch request asks for, the events it delivers (the current state
//! or a replay from a resourceVersion, then live events, selectors entering and leaving the
//! view, bookmarks, 410 when too old), and the faults that drop it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::http::faults::Faults;
use crate::http::table;
use crate::model::error::ApiError;
use crate::model::resource::ResourceType;
use crate::semantics::selectors::{FieldSelector, LabelSelector};
use crate::storage::registry::ResourceInfo;
use crate::storage::store::{EventKind, Store, WatchEvent};

/// How often a watch without a timeout sends a bookmark (when asked for bookmarks).
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// What a watch reads from its cluster.
pub trait Source: Send + Sync + 'static {
    fn store(&self) -> Arc<Store>;
    /// The faults in force now (re-read while streaming).
    fn faults(&self) -> Faults;
    fn event_lines(&self) -> &EventLineCache;
}

/// What to stream for a watch request.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    pub resource: ResourceType,
    pub info: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// None: start with the current state (ADDED events), as for no RV or "0".
    pub resource_version: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout_seconds: Option<u64>,
    /// Send objects as PartialObjectMetadata.
    pub metadata_only: bool,
    /// Send objects as one-row Tables (`kubectl get -w`).
    pub as_table: bool,
    /// Serve the stored core Events as events.k8s.io/v1 Events (`resource` is then the
    /// core `events`).
    pub events_view: bool,
}

impl WatchSpec {
    /// A stored object as this watch serves it.
    pub fn served<'a>(&self, obj: &'a Value) -> std::borrow::Cow<'a, Value> {
        if self.events_view {
            std::borrow::Cow::Owned(crate::semantics::event_views::to_events_v1(obj))
        } else {
            std::borrow::Cow::Borrowed(obj)
        }
    }

    /// Does the object (as served) match the watch's namespace and selectors?
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Whether objects can enter or leave this watch's view when they change.
    pub fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}

/// For a watch with selectors: the event type to send for a committed change (None: none)
/// and whether the object is in the client's view afterwards. An object that starts to
/// match arrives as ADDED and one that stops matching leaves as DELETED, as on a real server.
pub fn selector_transition(
    kind: EventKind,
    matches_now: bool,
    in_view: bool,
) -> (Option<&'static str>, bool) {
    match (kind, matches_now, in_view) {
        (EventKind::Deleted, now, before) => ((now || before).then_some("DELETED"), false),
        (_, true, false) => (Some("ADDED"), true),
        (kind, true, true) => (Some(kind.as_str()), true),
        (_, false, true) => (Some("DELETED"), false),
        (_, false, false) => (None, false),
    }
}

/// A BOOKMARK event's object: the kind with only metadata.resourceVersion (and, for the
/// kinds clients look at, the zero-valued spec/status the real server sends).
pub fn bookmark_object(info: &ResourceInfo, rv: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let mut obj =
        json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata});
    match (info.group.as_str(), info.resource.as_str()) {
        ("apps", "deployments") => {
            obj["spec"] = json!({"replicas": 0, "selector": null,
                "template": {"metadata": {}, "spec": {"containers": null}}, "strategy": {}});
            obj["status"] = json!({});
        }
        ("", "pods") => {
            obj["spec"] = json!({"containers": null});
            obj["status"] = json!({});
        }
        _ => {}
    }
    obj
}

/// One watch event line: `{"type":"ADDED","object":{...}}\n`.
pub fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut out, object).is_err() {
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// One watch event line around an object already encoded as JSON (as the store keeps it).
pub fn event_line_of_json(kind: &str, json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    if json.is_empty() {
        out.extend_from_slice(b"null");
    } else {
        out.extend_from_slice(json);
    }
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// The encoded lines of the most recent events: a hundred watchers of one resource
/// encode each event once, not a hundred times.
#[derive(Default)]
pub struct EventLineCache {
    recent: std::sync::Mutex<std::collections::VecDeque<(u64, &'static str, Bytes)>>,
}

impl EventLineCache {
    const KEEP: usize = 32;

    fn line(&self, resource_version: u64, kind: &'static str, json: &[u8]) -> Bytes {
        let lock = || self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, line)) = lock()
            .iter()
            .find(|(rv, k, _)| *rv == resource_version && *k == kind)
        {
            return line.clone();
        }
        let line = event_line_of_json(kind, json);
        let mut recent = lock();
        recent.push_back((resource_version, kind, line.clone()));
        if recent.len() > Self::KEEP {
            recent.pop_front();
        }
        line
    }
}

/// One watch stream: what it delivered so far, and where it ends.
struct WatchStream {
    spec: WatchSpec,
    tx: mpsc::Sender<Bytes>,
    source: Arc<dyn Source>,
    started: tokio::time::Instant,
    faults: Faults,
    sent_events: u64,
    /// Newest resourceVersion delivered to the client.
    delivered_rv: u64,
    /// Whether any event of the watched resource happened since the watch started (the
    /// watch cache of an active resource follows the global resourceVersion).
    resource_active: bool,
    /// For watches with selectors: the objects the client currently sees.
    view: Option<std::collections::HashSet<(String, String)>>,
}

fn object_key(obj: &Value) -> (String, String) {
    let meta = obj.get("metadata");
    let field = |f: &str| {
        meta.and_then(|m| m.get(f))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (field("namespace"), field("name"))
}

/// Why a watch stream stops.
struct Stop;

impl WatchStream {
    /// Sends one event line, honouring the drop-after faults.
    async fn emit(&mut self, kind: &str, object: &Value) -> Result<(), Stop> {
        if self.dropped() {
            return Err(Stop);
        }
        let line = if kind == "ERROR" || kind == "BOOKMARK" {
            event_line(kind, object)
        } else if self.spec.metadata_only {
            event_line(kind, &table::partial_metadata(object))
        } else if self.spec.as_table {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            let table = table::table_for(
                &self.spec.info,
                &[object],
                json!({ "resourceVersion": rv }),
                self.source.store().clock(),
            );
            event_line(kind, &table)
        } else {
            event_line(kind, object)
        };
        self.send_line(line, kind).await
    }

    async fn send_line(&mut self, line: Bytes, kind: &str) -> Result<(), Stop> {
        if self.dropped() {
            return Err(Stop);
        }
        self.tx.send(line).await.map_err(|_| Stop)?;
        if kind != "BOOKMARK" {
            self.sent_events += 1;
        }
        Ok(())
    }

    fn dropped(&self) -> bool {
        self.faults
            .drop_watch_after_events
            .is_some_and(|max| self.sent_events >= max)
            || self
                .faults
                .drop_watch_after_ms
                .is_some_and(|ms| self.started.elapsed() >= Duration::from_millis(ms))
    }

    /// Delivers a committed event if it is of the watched resource and matches.
    async fn deliver(&mut self, event: &WatchEvent) -> Result<(), Stop> {
        if event.resource != self.spec.resource {
            return Ok(());
        }
        self.resource_active = true;
        let served = self.spec.served(&event.object);
        let matches = self.spec.matches(&served);
        let send = match &mut self.view {
            None => matches.then_some(event.kind.as_str()),
            Some(view) => {
                let key = object_key(&event.object);
                let (send, in_view) = selector_transition(event.kind, matches, view.contains(&key));
                if in_view {
                    view.insert(key);
                } else {
                    view.remove(&key);
                }
                send
            }
        };
        if let Some(kind) = send {
            if self.spec.metadata_only || self.spec.as_table || self.spec.events_view {
                self.emit(kind, &served).await?;
            } else {
                let line =
                    self.source
                        .event_lines()
                        .line(event.resource_version, kind, &event.json);
                self.send_line(line, kind).await?;
            }
            self.delivered_rv = event.resource_version;
        }
        Ok(())
    }

    /// A BOOKMARK at the current resourceVersion, after delivering every event up to it,
    /// when that is newer than what the client already has.
    async fn bookmark(
        &mut self,
        rx: &mut tokio::sync::broadcast::Receiver<Arc<WatchEvent>>,
    ) -> Result<(), Stop> {
        if !self.spec.bookmarks || !self.resource_active {
            return Ok(());
        }
        let now_rv = self.source.store().resource_version();
        loop {
            match rx.try_recv() {
                Ok(event) => self.deliver(&event).await?,
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                Err(_) => return Err(Stop),
            }
        }
        let rv = now_rv.max(self.delivered_rv);
        if rv > self.delivered_rv {
            let bookmark = bookmark_object(&self.spec.info, rv, false);
            self.emit("BOOKMARK", &bookmark).await?;
            self.delivered_rv = rv;
        }
        Ok(())
    }
}

/// Streams a watch into `tx` until it ends (timeout, dropped by a fault, client gone, or
/// too far behind).
pub async fn run(source: Arc<dyn Source>, spec: WatchSpec, tx: mpsc::Sender<Bytes>) {
    let faults = source.faults();
    let mut stream = WatchStream {
        spec,
        tx,
        source,
        started: tokio::time::Instant::now(),
        faults,
        sent_events: 0,
        delivered_rv: 0,
        resource_active: false,
        view: None,
    };
    let _ = stream_events(&mut stream).await;
}

async fn stream_events(w: &mut WatchStream) -> Result<(), Stop> {
    let store = w.source.store();
    let mut rx = match w.spec.resource_version {
        None => {
            let (items, rv, rx) =
                store.list_and_subscribe(&w.spec.resource, w.spec.namespace.as_deref());
            if w.spec.has_selectors() {
                w.view = Some(std::collections::HashSet::new());
            }
            // The stored JSON goes out as it is unless the watch reshapes objects.
            let as_stored = !(w.spec.metadata_only || w.spec.as_table || w.spec.events_view);
            for event in items {
                let served = w.spec.served(&event.object);
                if w.spec.matches(&served) {
                    if let Some(view) = &mut w.view {
                        view.insert(object_key(&served));
                    }
                    if as_stored {
                        w.send_line(event_line_of_json("ADDED", &event.json), "ADDED")
                            .await?;
                    } else {
                        w.emit("ADDED", &served).await?;
                    }
                }
            }
            w.delivered_rv = rv;
            if w.spec.send_initial_events && w.spec.bookmarks {
                let bookmark = bookmark_object(&w.spec.info, rv, true);
                w.emit("BOOKMARK", &bookmark).await?;
            }
            rx
        }
        Some(from) => match store.watch_from_filtered(from, Some(&w.spec.resource)) {
            Err(oldest) => {
                let status = ApiError::expired(from, oldest).to_status();
                w.emit("ERROR", &status).await?;
                return Ok(());
            }
            Ok((replay, rx)) => {
                w.delivered_rv = from;
                if w.spec.has_selectors() {
                    // What the client saw at `from` is unknown here; the current matches
                    // are the closest view.
                    let (current, _) =
                        store.list_shared(&w.spec.resource, w.spec.namespace.as_deref());
                    w.view = Some(
                        current
                            .iter()
                            .filter(|e| w.spec.matches(&w.spec.served(&e.object)))
                            .map(|e| object_key(&e.object))
                            .collect(),
                    );
                }
                for event in replay {
                    w.deliver(&event).await?;
                }
                rx
            }
        },
    };

    let started = w.started;
    let timeout = w.spec.timeout_seconds.map(Duration::from_secs);
    let deadline = timeout.and_then(|t| started.checked_add(t));
    // Like the watch cache: a bookmark about 2 s before the deadline, else every minute.
    let mut next_bookmark = match timeout {
        Some(t) if t > Duration::from_secs(2) => started.checked_add(t - Duration::from_secs(2)),
        Some(_) => None,
        None => started.checked_add(BOOKMARK_INTERVAL),
    };
    let far = started + Duration::from_secs(365 * 24 * 3600);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if w.dropped() {
            return Ok(());
        }
        let wake = match (deadline, next_bookmark) {
            (Some(d), Some(b)) => d.min(b),
            (Some(d), None) => d,
            (None, Some(b)) => b,
            (None, None) => far,
        };
        tokio::select! {
            received = rx.recv() => match received {
                Ok(event) => w.deliver(&event).await?,
                // Fell too far behind or the store went away: end the stream; clients
                // watch again from the last resourceVersion they saw.
                Err(_) => return Ok(()),
            },
            _ = tokio::time::sleep_until(wake) => {
                if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    return Ok(());
                }
                w.bookmark(&mut rx).await?;
                next_bookmark = if timeout.is_some() {
                    None
                } else {
                    tokio::time::Instant::now().checked_add(BOOKMARK_INTERVAL)
                };
            }
            _ = tick.tick() => {
                w.faults = w.source.faults();
            }
            _ = w.tx.closed() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_transitions_table() {
        use EventKind::*;
        let cases = [
            (Added, true, false, Some("ADDED"), true),
            (Modified, true, true, Some("MODIFIED"), true),
            (Modified, true, false, Some("ADDED"), true),
            (Modified, false, true, Some("DELETED"), false),
            (Modified, false, false, None, false),
            (Deleted, false, true, Some("DELETED"), false),
            (Deleted, true, false, Some("DELETED"), false),
            (Deleted, false, false, None, false),
        ];
        for (kind, now, before, send, after) in cases {
            assert_eq!(
                selector_transition(kind, now, before),
                (send, after),
                "{kind:?} {now} {before}"
            );
        }
    }

    #[test]
    fn bookmark_matches_recording_shape() {
        let registry = crate::storage::registry::Registry::new();
        let info = registry.lookup("apps", "v1", "deployments").unwrap();
        let line = event_line("BOOKMARK", &bookmark_object(&info, 2123, false));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v,
            json!({"type":"BOOKMARK","object":{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"resourceVersion":"2123"},"spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}}})
        );
    }
}
