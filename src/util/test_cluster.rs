//! Test support: one kube-sim cluster in this process, a kube `Client` for it, and direct
//! access to its store, for the unit tests of code that talks to a cluster (release records,
//! the lock). kube-sim answers like a real kube-apiserver (409 on a second create or a stale
//! resourceVersion, label selectors, ...), so these tests need no fake of their own.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sim::{ResourceType, Sim, SimOptions};
use serde_json::Value;

pub struct TestCluster {
    /// Kept for as long as the test runs: dropping it stops the server.
    sim: Sim,
    client: kube::Client,
}

impl TestCluster {
    /// Starts one cluster (context `sim-1`) and connects to it over HTTPS on loopback.
    pub async fn start() -> TestCluster {
        Self::start_with(Vec::new()).await
    }

    /// Starts one cluster whose kubelet follows `rules` (what images do, e.g. a crash loop
    /// `after:` a healthy start), at time scale 1.
    pub async fn start_with(rules: Vec<kube_sim::rules::Rule>) -> TestCluster {
        let sim = Sim::start(SimOptions {
            clusters: 1,
            rules,
            ..SimOptions::default()
        })
        .await
        .expect("kube-sim starts");
        let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("client config");
        let client = kube::Client::try_from(config).expect("client");
        TestCluster { sim, client }
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Switches kube-sim faults on (or off, with `Faults::default()`).
    pub fn set_faults(&self, faults: kube_sim::Faults) {
        self.sim.clusters()[0].set_faults(faults);
    }

    /// The requests the cluster has answered since it started or since the last reset.
    pub fn counters(&self) -> kube_sim::Counters {
        self.sim.clusters()[0].counters()
    }

    pub fn reset_counters(&self) {
        self.sim.clusters()[0].reset_counters();
    }

    fn store(&self) -> std::sync::Arc<kube_sim::Store> {
        self.sim.clusters()[0].store()
    }

    pub fn add_namespace(&self, name: &str) {
        let namespace = serde_json::json!({"metadata": {"name": name}});
        self.store()
            .create(
                &ResourceType::new("", "v1", "namespaces"),
                namespace,
                "test",
            )
            .expect("namespace created");
    }

    pub fn has_namespace(&self, name: &str) -> bool {
        self.store()
            .get(&ResourceType::new("", "v1", "namespaces"), "", name)
            .is_some()
    }

    /// The object `name` in a collection given by its API path, e.g.
    /// "/api/v1/namespaces/shop/secrets".
    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        let (rt, namespace) = collection_of(collection);
        self.store().get(&rt, &namespace, name)
    }

    /// Stores `value` as `name` in the collection, as is (created, or replaced when it exists),
    /// bypassing rollguard's client: for records and leases that another run left.
    pub fn put_raw(&self, collection: &str, name: &str, mut value: Value) {
        let (rt, namespace) = collection_of(collection);
        if let Some(meta) = value.as_object_mut().and_then(|o| {
            o.entry("metadata")
                .or_insert_with(|| serde_json::json!({}))
                .as_object_mut()
        }) {
            meta.insert("name".into(), name.into());
            meta.insert("namespace".into(), namespace.clone().into());
            // A replacement is unconditional.
            meta.remove("resourceVersion");
        }
        let store = self.store();
        if let Some(existing) = store.get(&rt, &namespace, name) {
            if let (Some(rv), Some(meta)) = (
                existing.pointer("/metadata/resourceVersion").cloned(),
                value.get_mut("metadata").and_then(Value::as_object_mut),
            ) {
                meta.insert("resourceVersion".into(), rv);
            }
            store.update(&rt, value, "test").expect("object replaced");
        } else {
            store.create(&rt, value, "test").expect("object created");
        }
    }

    /// Names of the objects in a collection.
    pub fn names(&self, collection: &str) -> Vec<String> {
        let (rt, namespace) = collection_of(collection);
        self.store()
            .list(&rt, Some(&namespace))
            .0
            .iter()
            .filter_map(|o| o.pointer("/metadata/name")?.as_str().map(str::to_string))
            .collect()
    }
}

/// "/api/v1/namespaces/NS/RES" or "/apis/GROUP/VERSION/namespaces/NS/RES".
fn collection_of(path: &str) -> (ResourceType, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", version, "namespaces", ns, resource] => {
            (ResourceType::new("", version, resource), ns.to_string())
        }
        ["apis", group, version, "namespaces", ns, resource] => {
            (ResourceType::new(group, version, resource), ns.to_string())
        }
        _ => panic!("not a namespaced collection path: {path}"),
    }
}
