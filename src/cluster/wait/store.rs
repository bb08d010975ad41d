//! The stores: kube-runtime watches (`default_backoff()`, so a dropped watch relists), each
//! feeding a reflector store. Applied objects of any kind are `DynamicObject` reflectors,
//! one per kind and namespace; the Pods and ReplicaSets of a namespace with workloads are
//! typed reflectors (`Api<Pod>`, `Api<ReplicaSet>`), one per namespace, narrowed by the
//! workloads' label selector when one selector covers them all.
//!
//! Memory matters (one wait per target, a thousand targets at once): what is stored drops
//! `managedFields`, and a pod keeps only what the rules read (metadata, status, and each
//! container's name, image and memory limit) and a ReplicaSet its pod template's digest in
//! place of the template, stripped by the watch's `.modify()` hook before the reflector
//! stores it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::pin::Pin;

use futures::stream::SelectAll;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, TypeMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use super::evaluate::Snapshot;
use super::tracked::{Tracked, is_workload};
use crate::cluster::apply::AppliedObject;
use crate::cluster::health;

/// One watch to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::cluster) enum Watch {
    /// Applied objects of one kind in one namespace (None: cluster-scoped).
    Objects {
        namespace: Option<String>,
        resource: ApiResource,
    },
    /// The pods of a namespace, narrowed by `selector` when known.
    Pods {
        namespace: String,
        selector: Option<String>,
    },
    /// The ReplicaSets of a namespace (for its Deployments), narrowed as its pods.
    ReplicaSets {
        namespace: String,
        selector: Option<String>,
    },
}

/// The watches for `tracked` (the objects not done yet, and the workloads among them), and
/// each tracked object's source: its index among the `Objects` watches.
pub(in crate::cluster) fn watches_for(tracked: &mut [Tracked<'_>]) -> Vec<Watch> {
    let mut watches: Vec<Watch> = Vec::new();
    let mut object_sources: Vec<(Option<String>, ApiResource)> = Vec::new();
    for t in tracked.iter_mut().filter(|t| !t.done) {
        let key = (t.applied.namespace.clone(), t.applied.resource.clone());
        let found = object_sources.iter().position(|k| k == &key);
        t.source = Some(found.unwrap_or_else(|| {
            object_sources.push(key.clone());
            watches.push(Watch::Objects {
                namespace: key.0,
                resource: key.1,
            });
            object_sources.len() - 1
        }));
    }
    // Pods (and ReplicaSets, for Deployments) of namespaces with pending workloads.
    let mut namespaces: BTreeMap<String, (Vec<&AppliedObject>, bool)> = BTreeMap::new();
    for t in tracked
        .iter()
        .filter(|t| !t.done && is_workload(&t.applied.resource))
    {
        let entry = namespaces
            .entry(t.applied.namespace.clone().unwrap_or_default())
            .or_default();
        entry.0.push(t.applied);
        entry.1 |= t.applied.resource.kind == "Deployment";
    }
    for (namespace, (workloads, deployments)) in namespaces {
        let selector = namespace_selector(&workloads);
        watches.push(Watch::Pods {
            namespace: namespace.clone(),
            selector: selector.clone(),
        });
        if deployments {
            watches.push(Watch::ReplicaSets {
                namespace,
                selector,
            });
        }
    }
    watches
}

/// One label selector that every pod (and ReplicaSet) of `workloads` matches, for the one
/// watch of their namespace: the workload's own selector when it is alone, else
/// `key in (v1,v2,..)` over a `matchLabels` key they all have. None (watch the whole
/// namespace) when a workload's selector is not known (it was healthy when applied, so its
/// body was dropped to save memory) or no one selector covers them: a label selector cannot
/// say "or", and one watch per workload would multiply the watches of a namespace. The
/// revision's `pod-template-hash` is not known when the watch starts (the controller has not
/// made the new ReplicaSet yet): the evaluation narrows to the revision's pods.
pub fn namespace_selector(workloads: &[&AppliedObject]) -> Option<String> {
    let bodies: Vec<Value> = workloads
        .iter()
        .map(|w| w.response.as_ref().map(|r| r.value()))
        .collect::<Option<_>>()?;
    if let [only] = bodies.as_slice() {
        return health::label_selector(only);
    }
    let labels: Vec<&serde_json::Map<String, Value>> = bodies
        .iter()
        .map(|b| {
            b.pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object)
        })
        .collect::<Option<_>>()?;
    let first = labels.first()?;
    let key = first.keys().find(|k| {
        labels
            .iter()
            .all(|l| l.get(*k).is_some_and(Value::is_string))
    })?;
    let values: BTreeSet<&str> = labels
        .iter()
        .filter_map(|l| l.get(key).and_then(Value::as_str))
        .collect();
    Some(format!(
        "{key} in ({})",
        values.into_iter().collect::<Vec<_>>().join(",")
    ))
}

/// Drops what is never read and most of an object's size: managedFields, and a workload's
/// pod template (its digest stays, see `health::slim_template`).
fn strip_object(object: &mut DynamicObject, resource: &ApiResource) {
    object.metadata.managed_fields = None;
    if let Some(digest) = health::take_template(&mut object.data) {
        keep_template_digest(&mut object.metadata, digest);
    }
    // Items of a LIST (the watcher's initial list) carry no apiVersion/kind: the health
    // rules read them.
    object.types.get_or_insert_with(|| TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
}

/// Pod problems are read from metadata and status; the spec (containers, volumes,
/// tolerations) is most of a pod: only each container's name, image and memory limit are
/// kept, for the exit details.
pub(super) fn slim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(slim_pod_spec(spec));
    }
}

fn slim_pod_spec(spec: PodSpec) -> PodSpec {
    let slim = |c: Container| {
        let memory = c
            .resources
            .and_then(|r| r.limits)
            .and_then(|mut l| l.remove("memory"));
        Container {
            name: c.name,
            image: c.image,
            resources: memory.map(|m| ResourceRequirements {
                limits: Some([("memory".to_string(), m)].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    PodSpec {
        containers: spec.containers.into_iter().map(slim).collect(),
        init_containers: spec
            .init_containers
            .map(|list| list.into_iter().map(slim).collect()),
        ..Default::default()
    }
}

/// A ReplicaSet is read for its owner, revision and pod-template-hash; its pod template,
/// most of it, only to be compared with its Deployment's when the revision annotation is
/// missing: a digest of the template stands in for it.
fn slim_replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
    let Some(template) = rs.spec.as_mut().and_then(|spec| spec.template.take()) else {
        return;
    };
    if let Ok(template) = serde_json::to_value(&template) {
        keep_template_digest(&mut rs.metadata, health::template_digest(&template));
    }
}

/// Puts a pod template's digest where the health rules look for it.
fn keep_template_digest(metadata: &mut ObjectMeta, digest: String) {
    metadata
        .annotations
        .get_or_insert_default()
        .insert(health::TEMPLATE_DIGEST_ANNOTATION.to_string(), digest);
}

/// What a watch said: its store changed (true once its first list is complete), or an error
/// (the watcher retries with backoff).
type Said = (usize, Result<bool, watcher::Error>);
type WatchStream = Pin<Box<dyn Stream<Item = Said> + Send>>;

/// A reflector on `api`: every event is in `writer`'s store before the stream yields it.
fn reflect<K>(
    index: usize,
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    strip: impl FnMut(&mut K) + Send + 'static,
) -> WatchStream
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync,
    K: 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .map(move |event| (index, event.map(|e| matches!(e, watcher::Event::InitDone))));
    Box::pin(stream)
}

/// Batches of watch events, already in their stores.
pub(in crate::cluster) struct Batch {
    /// Errors among them (the watchers retry with backoff).
    pub errors: Vec<watcher::Error>,
}

/// The reflector stores of a wait (or a bake) and the merged stream of their watches.
pub(in crate::cluster) struct Stores {
    /// Per `Watch::Objects`, in plan order (a tracked object's `source`).
    objects: Vec<Store<DynamicObject>>,
    pods: HashMap<String, Store<Pod>>,
    replica_sets: HashMap<String, Store<ReplicaSet>>,
    /// Per watch: its first list is complete.
    listed: Vec<bool>,
    events: SelectAll<WatchStream>,
}

impl Stores {
    /// Opens the watches of `plan`; nothing is read until `next_batch` polls them.
    pub(in crate::cluster) fn open(client: &Client, plan: &[Watch]) -> Stores {
        let mut stores = Stores {
            objects: Vec::new(),
            pods: HashMap::new(),
            replica_sets: HashMap::new(),
            listed: vec![false; plan.len()],
            events: SelectAll::new(),
        };
        let config = |selector: &Option<String>| match selector {
            Some(s) => watcher::Config::default().labels(s),
            None => watcher::Config::default(),
        };
        for (i, watch) in plan.iter().enumerate() {
            let stream = match watch {
                Watch::Objects {
                    namespace,
                    resource,
                } => {
                    let api: Api<DynamicObject> = match namespace {
                        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
                        None => Api::all_with(client.clone(), resource),
                    };
                    let writer = reflector::store::Writer::new(resource.clone());
                    stores.objects.push(writer.as_reader());
                    let resource = resource.clone();
                    let strip = move |o: &mut DynamicObject| strip_object(o, &resource);
                    reflect(i, api, watcher::Config::default(), writer, strip)
                }
                Watch::Pods {
                    namespace,
                    selector,
                } => {
                    let (reader, writer) = reflector::store();
                    stores.pods.insert(namespace.clone(), reader);
                    let api = Api::<Pod>::namespaced(client.clone(), namespace);
                    reflect(i, api, config(selector), writer, slim_pod)
                }
                Watch::ReplicaSets {
                    namespace,
                    selector,
                } => {
                    let (reader, writer) = reflector::store();
                    stores.replica_sets.insert(namespace.clone(), reader);
                    let api = Api::<ReplicaSet>::namespaced(client.clone(), namespace);
                    reflect(i, api, config(selector), writer, slim_replica_set)
                }
            };
            stores.events.push(stream);
        }
        stores
    }

    /// True once every watch's first list is complete.
    pub(in crate::cluster) fn all_listed(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// Waits for the next watch event and takes every one already queued behind it (all of
    /// them in their stores before deciding again). None when every watch has ended.
    pub(in crate::cluster) async fn next_batch(&mut self) -> Option<Batch> {
        let first = self.events.next().await?;
        let mut batch = Batch { errors: Vec::new() };
        let mut take = |(source, said): Said| match said {
            Ok(listed) => self.listed[source] |= listed,
            Err(e) => {
                tracing::debug!(source, error = %e, "watch error; the watcher retries with backoff");
                batch.errors.push(e);
            }
        };
        take(first);
        while let Some(Some(said)) = futures::FutureExt::now_or_never(self.events.next()) {
            take(said);
        }
        Some(batch)
    }

    /// What the stores hold now for `tracked`, as the rules read it: each object not done
    /// (from its store), and the pods and ReplicaSets of the namespaces of those that are
    /// workloads.
    pub(in crate::cluster) fn snapshot(&self, tracked: &[Tracked<'_>]) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (i, t) in tracked.iter().enumerate().filter(|(_, t)| !t.done) {
            let a = t.applied;
            let Some(store) = t.source.and_then(|s| self.objects.get(s)) else {
                continue;
            };
            let key = reflector::ObjectRef::new_with(&a.name, a.resource.clone())
                .within(a.namespace.as_deref().unwrap_or_default());
            if let Some(object) = store.get(&key) {
                let value = serde_json::to_value(&*object).unwrap_or(Value::Null);
                snapshot.objects.insert(i, value);
            }
            if !is_workload(&a.resource) {
                continue;
            }
            let ns = a.namespace.clone().unwrap_or_default();
            if let Some(pods) = self.pods.get(&ns)
                && !snapshot.pods.contains_key(&ns)
            {
                snapshot.pods.insert(ns.clone(), values(pods));
            }
            if let Some(sets) = self.replica_sets.get(&ns)
                && !snapshot.replica_sets.contains_key(&ns)
            {
                snapshot.replica_sets.insert(ns, values(sets));
            }
        }
        snapshot
    }
}

fn values<K>(store: &Store<K>) -> Vec<Value>
where
    K: kube::Resource + Clone + serde::Serialize + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .filter_map(|o| serde_json::to_value(&**o).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slim_pod_keeps_what_exit_details_read() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "managedFields": [{"manager": "kubelet"}]},
            "spec": {"containers": [{"name": "web", "image": "x:1", "args": ["a"],
                "resources": {"limits": {"memory": "128Mi", "cpu": "1"}}},
                {"name": "side", "image": "y:1"}], "volumes": [{"name": "v"}],
                "nodeName": "n1"},
            "status": {"phase": "Running"}}))
        .expect("a pod");
        slim_pod(&mut pod);
        assert_eq!(
            serde_json::to_value(&pod).expect("serializes"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"},
                "spec": {"containers": [
                    {"name": "web", "image": "x:1", "resources": {"limits": {"memory": "128Mi"}}},
                    {"name": "side", "image": "y:1"}]},
                "status": {"phase": "Running"}})
        );
        let mut bare = Pod::default();
        slim_pod(&mut bare);
        assert!(bare.spec.is_none());
    }

    /// Real ReplicaSets, typed and slimmed as the store keeps them, are still told apart
    /// by template when their revision annotations are gone.
    #[test]
    fn a_slim_replica_set_keeps_its_template_as_a_digest() {
        let Some(_shared) = crate::util::shared::shared_for_test(
            "a_slim_replica_set_keeps_its_template_as_a_digest",
        ) else {
            return;
        };
        let recording = |name: &str| -> Value {
            let path = crate::util::shared::shared_path(&format!("apiserver-recordings/{name}"));
            serde_json::from_str(&std::fs::read_to_string(path).expect("a recording"))
                .expect("JSON")
        };
        let unannotated = |mut v: Value| {
            if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
                a.remove("deployment.kubernetes.io/revision");
            }
            v
        };
        let deploy = recording("02-ssa-apply2-get-after-7.5s.json");
        let full = recording("02-replicasets-list.json")["items"]
            .as_array()
            .expect("items")
            .clone();
        let want = health::new_revision_selector(&deploy, &full).expect("the new ReplicaSet");
        let slim: Vec<Value> = full
            .into_iter()
            .map(|rs| {
                let mut typed: ReplicaSet = serde_json::from_value(rs).expect("a ReplicaSet");
                slim_replica_set(&mut typed);
                assert!(typed.spec.as_ref().is_some_and(|s| s.template.is_none()));
                unannotated(serde_json::to_value(&typed).expect("serializes"))
            })
            .collect();
        assert_eq!(
            health::new_revision_selector(&unannotated(deploy), &slim),
            Some(want)
        );
    }

    fn workload(name: &str, selector: Option<Value>) -> AppliedObject {
        AppliedObject {
            display: format!("Deployment shop/{name}"),
            resource: ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
            name: name.into(),
            namespace: Some("shop".into()),
            response: selector.map(|s| json!({"spec": {"selector": s}}).into()),
            note: None,
        }
    }

    #[test]
    fn one_selector_per_namespace_when_one_covers_its_workloads() {
        let labels = |l: Value| Some(json!({"matchLabels": l}));
        let web = workload("web", labels(json!({"app": "web", "tier": "front"})));
        let api = workload("api", labels(json!({"app": "api"})));
        let db = workload("db", labels(json!({"role": "db"})));
        let unknown = workload("old", None);
        let exprs = workload(
            "x",
            Some(json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]})),
        );
        // (workloads, the namespace's selector)
        let cases: Vec<(Vec<&AppliedObject>, Option<&str>)> = vec![
            (vec![&web], Some("app=web,tier=front")),
            (vec![&exprs], Some("app in (x)")),
            (vec![&web, &api], Some("app in (api,web)")),
            (vec![&api, &api], Some("app in (api)")),
            // No key in common, a selector not known, expressions only: the whole namespace.
            (vec![&web, &db], None),
            (vec![&web, &unknown], None),
            (vec![&unknown], None),
            (vec![&web, &exprs], None),
        ];
        for (workloads, want) in cases {
            let names: Vec<&str> = workloads.iter().map(|w| w.name.as_str()).collect();
            assert_eq!(namespace_selector(&workloads).as_deref(), want, "{names:?}");
        }
    }
}
