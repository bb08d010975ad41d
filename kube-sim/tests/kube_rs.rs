//! kube-rs (the client rollguard uses) against kube-sim over HTTPS: discovery, server-side
//! apply, list, a watcher stream, status written by the controllers, delete.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use kube_sim::{Sim, SimOptions};
use serde_json::json;

async fn client(sim: &Sim, context: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).unwrap();
    let options = kube::config::KubeConfigOptions {
        context: Some(context.into()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn deployment(image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}}
        }
    })
}

#[tokio::test]
async fn kube_rs_apply_watch_status_delete() {
    let sim = Sim::start(SimOptions {
        clusters: 2,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let client = client(&sim, "sim-2").await;

    // Aggregated discovery through kube's Discovery.
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let apps = discovery.get("apps").expect("apps group");
    let (deploy_resource, caps) = apps
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == "Deployment")
        .unwrap();
    assert_eq!(deploy_resource.plural, "deployments");
    assert_eq!(caps.scope, Scope::Namespaced);

    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let events = watcher(api.clone(), watcher::Config::default()).boxed();
    let collector = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut events = events;
        while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(20), events.try_next())
            .await
            .map(|r| r.unwrap_or(None))
        {
            match event {
                watcher::Event::Apply(d) => {
                    seen.push(format!("apply:{}", d.metadata.name.unwrap_or_default()))
                }
                watcher::Event::Delete(d) => {
                    seen.push(format!("delete:{}", d.metadata.name.unwrap_or_default()));
                    break;
                }
                _ => {}
            }
        }
        seen
    });

    let params = PatchParams::apply("rollguard").force();
    let applied = api
        .patch("web", &params, &Patch::Apply(deployment("example/web:v1")))
        .await
        .unwrap();
    assert_eq!(applied.metadata.generation, Some(1));
    let managers: Vec<String> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["rollguard"]);

    // Dynamic apply of a ConfigMap, the way rollguard applies arbitrary manifests.
    let (cm_resource, _) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "ConfigMap"))
        .unwrap();
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm_resource);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
    dynamic
        .patch("cfg", &params, &Patch::Apply(cm))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert_eq!(cms.get("cfg").await.unwrap().data.unwrap()["a"], "1");

    let listed = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());

    // The controllers roll it out: status as the deployment controller writes it.
    let mut available = false;
    for _ in 0..100 {
        let d = api.get_status("web").await.unwrap();
        let status = d.status.unwrap_or_default();
        if status.observed_generation == Some(1) && status.available_replicas == Some(2) {
            available = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(available, "deployment did not become available");

    api.delete("web", &DeleteParams::default()).await.unwrap();
    let seen = collector.await.unwrap();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("apply:web"),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("delete:web"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn kube_rs_watcher_recovers_from_a_dropped_stream() {
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let client = client(&sim, "sim-1").await;
    sim.clusters()[0].set_faults(kube_sim::Faults {
        drop_watch_after_events: Some(1),
        ..Default::default()
    });
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = watcher(cms.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    let params = PatchParams::apply("rollguard");
    for name in ["one", "two", "three"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        cms.patch(name, &params, &Patch::Apply(cm)).await.unwrap();
    }
    let mut names = std::collections::BTreeSet::new();
    while names.len() < 3 {
        let next = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("watcher kept delivering")
            .unwrap();
        if let Ok(cm) = next {
            names.insert(cm.metadata.name.unwrap_or_default());
        }
    }
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["one", "three", "two"]
    );
}

#[tokio::test]
async fn a_hundred_watchers_on_one_client() {
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let client = client(&sim, "sim-1").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut streams = Vec::new();
    for _ in 0..100 {
        let stream = cms
            .watch(&kube::api::WatchParams::default().timeout(30), &rv)
            .await
            .unwrap()
            .boxed();
        streams.push(stream);
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fanout"}});
    cms.patch("fanout", &PatchParams::apply("t"), &Patch::Apply(cm))
        .await
        .unwrap();
    let mut delivered = 0;
    for mut stream in streams {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("event within 10 s")
            .expect("stream open")
            .unwrap();
        if let kube::api::WatchEvent::Added(cm) = event {
            assert_eq!(cm.metadata.name.as_deref(), Some("fanout"));
            delivered += 1;
        }
    }
    assert_eq!(delivered, 100);
    assert_eq!(sim.clusters()[0].counters().verb("watch"), 100);
}

/// `Sim::stop` returns once the clusters' memory is freed, with a client's watch open (the
/// connection and the watch stream hold the cluster's state too); dropping the `Sim` would
/// leave the freeing to the runtime's workers, after this returns.
#[tokio::test]
async fn stopping_frees_the_clusters_while_a_watch_is_open() {
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let client = client(&sim, "sim-1").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = watcher(api, watcher::Config::default()).boxed();
    // The first event means the list and the watch are being served.
    events.try_next().await.unwrap();
    let store = std::sync::Arc::downgrade(&sim.clusters()[0].store());
    assert!(
        sim.stop(Duration::from_secs(10)).await,
        "freed before the deadline"
    );
    assert!(store.upgrade().is_none(), "the store is freed");
    drop(events);
}
