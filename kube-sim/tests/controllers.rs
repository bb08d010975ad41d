//! The controllers and kubelet of kube-sim against a real Store, in simulated time.

use std::sync::Arc;
use std::time::Duration;

use kube_sim::clock::Clock;
use kube_sim::controllers::{self, ControllerContext};
use kube_sim::rules::{self, Rule};
use kube_sim::{ResourceType, Store};
use serde_json::{Value, json};

fn rt(group: &str, resource: &str) -> ResourceType {
    let version = "v1";
    ResourceType::new(group, version, resource)
}

fn deployments() -> ResourceType {
    rt("apps", "deployments")
}
fn replicasets() -> ResourceType {
    rt("apps", "replicasets")
}
fn pods() -> ResourceType {
    rt("", "pods")
}

struct Cluster {
    store: Arc<Store>,
    clock: Clock,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn start(name: &str, scale: f64, rules: Vec<Rule>) -> Cluster {
    let clock = Clock::new(scale);
    let store = Store::shared(clock.clone());
    let task = controllers::spawn(
        store.clone(),
        ControllerContext {
            cluster_name: name.to_string(),
            clock: clock.clone(),
            rules: Arc::new(rules),
        },
    );
    Cluster { store, clock, task }
}

/// Polls until `check` returns Some, or panics after `real` time with the last object seen.
async fn wait_until<T>(
    what: &str,
    real: Duration,
    mut check: impl FnMut() -> (Option<T>, String),
) -> T {
    let deadline = tokio::time::Instant::now() + real;
    loop {
        let (found, last) = check();
        if let Some(found) = found {
            return found;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": image}]}}
        }
    })
}

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn pods_of(store: &Store, label: &str) -> Vec<Value> {
    let (all, _) = store.list(&pods(), Some("default"));
    all.into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == label)
        .collect()
}

fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready")["status"] == "True"
}

#[tokio::test]
async fn deployment_rolls_out_to_ready_with_real_status() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    store
        .create(
            &deployments(),
            deployment("web", 3, "example/web:v1"),
            "test",
        )
        .unwrap();
    let dep = wait_until("web available", Duration::from_secs(10), || {
        let dep = store.get(&deployments(), "default", "web").unwrap();
        let done = condition(&dep, "Progressing")["reason"] == "NewReplicaSetAvailable";
        (done.then(|| dep.clone()), dep.to_string())
    })
    .await;
    let status = &dep["status"];
    assert_eq!(status["observedGeneration"], dep["metadata"]["generation"]);
    // The revision annotation goes through the status subresource: no new generation.
    assert_eq!(dep["metadata"]["generation"], 1);
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["updatedReplicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["availableReplicas"], 3);
    assert_eq!(
        condition(&dep, "Available")["reason"],
        "MinimumReplicasAvailable"
    );
    assert_eq!(
        dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    let (sets, _) = store.list(&replicasets(), Some("default"));
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["status"]["readyReplicas"], 3);
    assert_eq!(
        rs["metadata"]["ownerReferences"][0]["uid"],
        dep["metadata"]["uid"]
    );

    let pods = pods_of(store, "web");
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with(&format!("web-{hash}-"))
                && name.len() == format!("web-{hash}-").len() + 5,
            "{name}"
        );
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .unwrap()
                .starts_with("sim-1-node-")
        );
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(pod_ready(pod));
        assert_eq!(pod["status"]["containerStatuses"][0]["started"], true);
        assert!(
            pod["status"]["podIP"]
                .as_str()
                .unwrap()
                .starts_with("10.244.")
        );
    }
    let nodes: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 3, "pods are spread over the nodes");

    let (events, _) = store.list(&rt("", "events"), Some("default"));
    let scaled = events
        .iter()
        .find(|e| e["reason"] == "ScalingReplicaSet")
        .expect("ScalingReplicaSet event");
    assert_eq!(
        scaled["message"],
        format!("Scaled up replica set web-{hash} from 0 to 3")
    );
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "Started" && e["source"]["component"] == "kubelet")
    );
    let (nodes, _) = store.list(&rt("", "nodes"), None);
    assert_eq!(nodes.len(), 3);
    assert_eq!(condition(&nodes[0], "Ready")["status"], "True");
}

#[tokio::test]
async fn rolling_update_stays_within_surge_and_unavailable() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let mut dep = deployment("api", 4, "example/api:v1");
    dep["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}});
    store.create(&deployments(), dep, "test").unwrap();
    wait_until("api v1 available", Duration::from_secs(10), || {
        let dep = store.get(&deployments(), "default", "api").unwrap();
        (
            (condition(&dep, "Progressing")["reason"] == "NewReplicaSetAvailable").then_some(()),
            dep.to_string(),
        )
    })
    .await;
    let mut current = store.get(&deployments(), "default", "api").unwrap();
    current["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/api:v2");
    current["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    store.update(&deployments(), current, "test").unwrap();

    let (mut max_pods, mut min_ready) = (0, usize::MAX);
    wait_until("api v2 rolled out", Duration::from_secs(20), || {
        // Surge counts pods that are not terminating, as the real controller does.
        let pods: Vec<Value> = pods_of(store, "api")
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        max_pods = max_pods.max(pods.len());
        min_ready = min_ready.min(pods.iter().filter(|p| pod_ready(p)).count());
        let dep = store.get(&deployments(), "default", "api").unwrap();
        let done = dep["status"]["observedGeneration"] == dep["metadata"]["generation"]
            && dep["status"]["updatedReplicas"] == 4
            && dep["status"]["replicas"] == 4
            && dep["status"]["availableReplicas"] == 4;
        (done.then_some(()), dep["status"].to_string())
    })
    .await;
    assert!(
        max_pods <= 5,
        "maxSurge 1 of 4 allows 5 pods, saw {max_pods}"
    );
    assert!(
        min_ready >= 3,
        "maxUnavailable 1 of 4 keeps 3 ready, saw {min_ready}"
    );
    let dep = store.get(&deployments(), "default", "api").unwrap();
    assert_eq!(
        dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    // The old pods terminate for a moment after the rollout, then only v2 is left.
    wait_until("old pods gone", Duration::from_secs(5), || {
        let pods = pods_of(store, "api");
        let images: Vec<String> = pods
            .iter()
            .map(|p| p["spec"]["containers"][0]["image"].to_string())
            .collect();
        (
            (pods.len() == 4
                && pods
                    .iter()
                    .all(|p| p["spec"]["containers"][0]["image"] == "example/api:v2"))
            .then_some(()),
            format!("{images:?}"),
        )
    })
    .await;
}

/// At time scale 100 a whole wall second of a stored timestamp is 100 simulated seconds:
/// the deadline is still kept to the simulated second (the controllers keep their own
/// writes' simulated times), and the condition's times are wall-clock times.
#[tokio::test]
async fn progress_deadline_is_kept_at_time_scale_100() {
    let cluster = start("sim-1", 100.0, vec![]);
    let store = &cluster.store;
    let mut dep = deployment("stuck", 1, "example/doesnotexist:v1");
    dep["spec"]["progressDeadlineSeconds"] = json!(120);
    store.create(&deployments(), dep, "test").unwrap();
    let started = cluster.clock.sim_now();
    let dep = wait_until("deadline exceeded", Duration::from_secs(10), || {
        let dep = store.get(&deployments(), "default", "stuck").unwrap();
        (
            (condition(&dep, "Progressing")["reason"] == "ProgressDeadlineExceeded")
                .then(|| dep.clone()),
            dep["status"].to_string(),
        )
    })
    .await;
    let elapsed = cluster.clock.sim_now().duration_since(started);
    assert!(
        elapsed >= jiff::SignedDuration::from_secs(120),
        "flipped after {elapsed:?} simulated"
    );
    // Late by scheduling only (a second of real time is 100 simulated seconds here).
    assert!(
        elapsed < jiff::SignedDuration::from_secs(240),
        "flipped only after {elapsed:?} simulated"
    );
    let flipped: jiff::Timestamp = condition(&dep, "Progressing")["lastUpdateTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let now = jiff::Timestamp::now();
    assert!(flipped <= now, "{flipped} after {now}");
    assert!(now.duration_since(flipped) < jiff::SignedDuration::from_secs(5));
}

#[tokio::test]
async fn progress_deadline_passes_in_simulated_time() {
    let scale = 20.0;
    let cluster = start("sim-1", scale, vec![]);
    let store = &cluster.store;
    let mut dep = deployment("stuck", 2, "example/doesnotexist:v1");
    dep["spec"]["progressDeadlineSeconds"] = json!(30);
    store.create(&deployments(), dep, "test").unwrap();
    let started = cluster.clock.sim_now();
    let dep = wait_until("deadline exceeded", Duration::from_secs(10), || {
        let dep = store.get(&deployments(), "default", "stuck").unwrap();
        (
            (condition(&dep, "Progressing")["reason"] == "ProgressDeadlineExceeded")
                .then(|| dep.clone()),
            dep["status"].to_string(),
        )
    })
    .await;
    let elapsed = cluster.clock.sim_now().duration_since(started);
    assert!(
        elapsed >= jiff::SignedDuration::from_secs(30),
        "flipped after {elapsed:?} simulated"
    );
    assert!(
        elapsed < jiff::SignedDuration::from_secs(45),
        "flipped only after {elapsed:?} simulated"
    );
    let cond = condition(&dep, "Progressing");
    assert_eq!(cond["status"], "False");
    let rs_name = store.list(&replicasets(), Some("default")).0[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        cond["message"],
        format!("ReplicaSet \"{rs_name}\" has timed out progressing.")
    );
    assert_eq!(condition(&dep, "Available")["status"], "False");
    // The pods show the pull failure, with the kubelet's events.
    let pod = &pods_of(store, "stuck")[0];
    let waiting = &pod["status"]["containerStatuses"][0]["state"]["waiting"];
    assert!(
        waiting["reason"] == "ErrImagePull" || waiting["reason"] == "ImagePullBackOff",
        "{waiting}"
    );
    let (events, _) = store.list(&rt("", "events"), Some("default"));
    let failed = events
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .unwrap()
                .starts_with("Failed to pull image \"example/doesnotexist:v1\"")
        })
        .expect("a Failed to pull event");
    assert_eq!(failed["type"], "Warning");
    assert_eq!(failed["reason"], "Failed");
    assert!(events.iter().any(|e| e["message"] == "Error: ErrImagePull"));
}

fn bare_pod(name: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
           "spec": {"containers": [{"name": "main", "image": image}]}})
}

fn container(store: &Store, name: &str) -> Value {
    store.get(&pods(), "default", name).unwrap()["status"]["containerStatuses"][0].clone()
}

#[tokio::test]
async fn image_words_script_the_kubelet() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    for (name, image) in [
        ("good", "nginx:1.27"),
        ("missing", "example/doesnotexist:v1"),
        ("crash", "example/crashloop:v1"),
        ("never", "example/neverready:v1"),
        ("slow", "example/slowstart:v1"),
    ] {
        store
            .create(&pods(), bare_pod(name, image), "test")
            .unwrap();
    }
    let start = cluster.clock.sim_now();
    let sim_elapsed = || cluster.clock.sim_now().duration_since(start).as_secs_f64();

    wait_until("good ready", Duration::from_secs(2), || {
        let pod = store.get(&pods(), "default", "good").unwrap();
        (pod_ready(&pod).then_some(()), pod["status"].to_string())
    })
    .await;
    assert!(
        sim_elapsed() < 5.0,
        "a good image is Ready within about a second"
    );
    let good = container(store, "good");
    assert_eq!(good["image"], "docker.io/library/nginx:1.27");
    assert!(
        good["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );

    wait_until("crash restarted twice", Duration::from_secs(3), || {
        let c = container(store, "crash");
        (
            (c["restartCount"].as_i64() >= Some(2)).then_some(()),
            c.to_string(),
        )
    })
    .await;
    assert!(
        sim_elapsed() < 16.0,
        "restartCount 2 within ~15 s, took {}",
        sim_elapsed()
    );
    let crash = wait_until("crash in back-off", Duration::from_secs(3), || {
        let c = container(store, "crash");
        (
            (c["state"]["waiting"]["reason"] == "CrashLoopBackOff").then(|| c.clone()),
            c.to_string(),
        )
    })
    .await;
    assert_eq!(crash["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(crash["lastState"]["terminated"]["reason"], "Error");
    assert!(
        crash["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off ")
    );
    assert!(
        crash["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("restarting failed container=main pod=crash_default(")
    );

    let missing = wait_until("missing in back-off", Duration::from_secs(3), || {
        let c = container(store, "missing");
        (
            (c["state"]["waiting"]["reason"] == "ImagePullBackOff").then(|| c.clone()),
            c.to_string(),
        )
    })
    .await;
    assert!(
        missing["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Back-off pulling image \"example/doesnotexist:v1\"")
    );
    assert_eq!(
        store.get(&pods(), "default", "missing").unwrap()["status"]["phase"],
        "Pending"
    );

    // slowstart is not Ready before 20 s simulated, and is after.
    let slow = store.get(&pods(), "default", "slow").unwrap();
    if sim_elapsed() < 19.0 {
        assert!(!pod_ready(&slow));
    }
    wait_until("slow ready", Duration::from_secs(4), || {
        let pod = store.get(&pods(), "default", "slow").unwrap();
        (pod_ready(&pod).then_some(()), pod["status"].to_string())
    })
    .await;
    assert!(sim_elapsed() >= 20.0);
    let never = store.get(&pods(), "default", "never").unwrap();
    assert_eq!(never["status"]["phase"], "Running");
    assert!(!pod_ready(&never));
    assert_eq!(condition(&never, "Ready")["reason"], "ContainersNotReady");
}

#[tokio::test]
async fn rules_make_an_image_fail_in_one_cluster_only() {
    let rules =
        rules::parse("- {cluster: sim-2, image: \"*:v2\", behaviour: ImagePullBackOff}").unwrap();
    let one = start("sim-1", 10.0, rules.clone());
    let two = start("sim-2", 10.0, rules);
    for cluster in [&one, &two] {
        cluster
            .store
            .create(&pods(), bare_pod("web", "example/web:v2"), "test")
            .unwrap();
    }
    wait_until("sim-1 ready", Duration::from_secs(3), || {
        let pod = one.store.get(&pods(), "default", "web").unwrap();
        (pod_ready(&pod).then_some(()), pod["status"].to_string())
    })
    .await;
    wait_until("sim-2 pull error", Duration::from_secs(3), || {
        let c = container(&two.store, "web");
        (
            (c["state"]["waiting"]["reason"] == "ErrImagePull").then_some(()),
            c.to_string(),
        )
    })
    .await;
}

#[tokio::test]
async fn missing_config_map_blocks_until_it_appears() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let mut pod = bare_pod("app", "example/app:v1");
    pod["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "app-config"}}]);
    store.create(&pods(), pod, "test").unwrap();
    let c = wait_until("config error", Duration::from_secs(3), || {
        let c = container(store, "app");
        (
            (c["state"]["waiting"]["reason"] == "CreateContainerConfigError").then(|| c.clone()),
            c.to_string(),
        )
    })
    .await;
    assert_eq!(
        c["state"]["waiting"]["message"],
        "configmap \"app-config\" not found"
    );
    store
        .create(&rt("", "configmaps"), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": "default"}, "data": {"a": "1"}}), "test")
        .unwrap();
    wait_until("app ready", Duration::from_secs(3), || {
        let pod = store.get(&pods(), "default", "app").unwrap();
        (pod_ready(&pod).then_some(()), pod["status"].to_string())
    })
    .await;
}

fn statefulset(replicas: i64, image: &str, partition: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": "default"},
           "spec": {"replicas": replicas, "serviceName": "db",
                    "selector": {"matchLabels": {"app": "db"}},
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [{"name": "db", "image": image}]}}}})
}

#[tokio::test]
async fn statefulset_pods_come_in_order_and_respect_the_partition() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let sts_rt = rt("apps", "statefulsets");
    let mut rx = store.subscribe();
    store
        .create(&sts_rt, statefulset(3, "db:1", 0), "test")
        .unwrap();
    let sts = wait_until("db ready", Duration::from_secs(10), || {
        let sts = store.get(&sts_rt, "default", "db").unwrap();
        (
            (sts["status"]["readyReplicas"] == 3
                && sts["status"]["currentRevision"] == sts["status"]["updateRevision"])
                .then(|| sts.clone()),
            sts["status"].to_string(),
        )
    })
    .await;
    let mut added = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if event.resource.resource == "pods" && event.kind == kube_sim::store::EventKind::Added {
            added.push(
                event.object["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    assert_eq!(added, ["db-0", "db-1", "db-2"]);
    let claim = store
        .get(&rt("", "persistentvolumeclaims"), "default", "data-db-2")
        .expect("a claim per pod");
    assert_eq!(claim["status"]["phase"], "Bound");
    let db0 = store.get(&pods(), "default", "db-0").unwrap();
    assert!(
        db0["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == "data-db-0")
    );
    let first_revision = sts["status"]["currentRevision"]
        .as_str()
        .unwrap()
        .to_string();
    let (revisions, _) = store.list(&rt("apps", "controllerrevisions"), Some("default"));
    assert_eq!(revisions.len(), 1);
    assert_eq!(revisions[0]["metadata"]["name"], first_revision.as_str());

    let mut updated = sts.clone();
    updated["spec"] = statefulset(3, "db:2", 2)["spec"].clone();
    updated["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    store.update(&sts_rt, updated, "test").unwrap();
    let sts = wait_until("partitioned update", Duration::from_secs(10), || {
        let sts = store.get(&sts_rt, "default", "db").unwrap();
        (
            (sts["status"]["updatedReplicas"] == 1 && sts["status"]["readyReplicas"] == 3)
                .then(|| sts.clone()),
            sts["status"].to_string(),
        )
    })
    .await;
    assert_eq!(sts["status"]["currentRevision"], first_revision.as_str());
    assert_ne!(sts["status"]["updateRevision"], first_revision.as_str());
    let image = |n: &str| {
        store.get(&pods(), "default", n).unwrap()["spec"]["containers"][0]["image"].clone()
    };
    assert_eq!(image("db-2"), "db:2");
    assert_eq!(image("db-1"), "db:1");
    assert_eq!(image("db-0"), "db:1");
}

#[tokio::test]
async fn daemonset_runs_one_pod_per_node() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let ds_rt = rt("apps", "daemonsets");
    store
        .create(&ds_rt, json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}}), "test")
        .unwrap();
    let ds = wait_until("agent ready", Duration::from_secs(5), || {
        let ds = store.get(&ds_rt, "default", "agent").unwrap();
        (
            (ds["status"]["numberAvailable"] == 3).then(|| ds.clone()),
            ds["status"].to_string(),
        )
    })
    .await;
    assert_eq!(ds["status"]["desiredNumberScheduled"], 3);
    assert_eq!(ds["status"]["currentNumberScheduled"], 3);
    assert_eq!(ds["status"]["numberReady"], 3);
    assert_eq!(ds["status"]["updatedNumberScheduled"], 3);
    assert!(ds["status"].get("numberUnavailable").is_none());
    let pods = pods_of(store, "agent");
    let nodes: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 3);
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["labels"]["controller-revision-hash"].is_string())
    );
}

fn job(name: &str, image: &str, backoff: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
           "spec": {"backoffLimit": backoff,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": image}]}}}})
}

#[tokio::test]
async fn jobs_complete_or_fail() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let jobs = rt("batch", "jobs");
    store
        .create(&jobs, job("migrate", "example/migrate:v1", 6), "test")
        .unwrap();
    store
        .create(&jobs, job("broken", "example/crashloop:v1", 2), "test")
        .unwrap();
    let done = wait_until("migrate complete", Duration::from_secs(5), || {
        let job = store.get(&jobs, "default", "migrate").unwrap();
        (
            (condition(&job, "Complete")["status"] == "True").then(|| job.clone()),
            job["status"].to_string(),
        )
    })
    .await;
    assert_eq!(done["status"]["succeeded"], 1);
    assert!(done["status"]["completionTime"].is_string());
    assert_eq!(condition(&done, "SuccessCriteriaMet")["status"], "True");
    let failed = wait_until("broken failed", Duration::from_secs(10), || {
        let job = store.get(&jobs, "default", "broken").unwrap();
        (
            (condition(&job, "Failed")["status"] == "True").then(|| job.clone()),
            job["status"].to_string(),
        )
    })
    .await;
    assert_eq!(
        condition(&failed, "Failed")["reason"],
        "BackoffLimitExceeded"
    );
    assert_eq!(failed["status"]["failed"], 3);
}

#[tokio::test]
async fn deleting_a_deployment_collects_its_replicasets_and_pods() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    store
        .create(
            &deployments(),
            deployment("gone", 2, "example/gone:v1"),
            "test",
        )
        .unwrap();
    wait_until("pods exist", Duration::from_secs(5), || {
        let n = pods_of(store, "gone").len();
        ((n == 2).then_some(()), n.to_string())
    })
    .await;
    store.delete(&deployments(), "default", "gone").unwrap();
    wait_until("everything gone", Duration::from_secs(5), || {
        let sets = store.list(&replicasets(), Some("default")).0.len();
        let pods = pods_of(store, "gone").len();
        (
            (sets == 0 && pods == 0).then_some(()),
            format!("{sets} sets, {pods} pods"),
        )
    })
    .await;
}

#[tokio::test]
async fn new_crd_becomes_established() {
    let cluster = start("sim-1", 1.0, vec![]);
    let store = &cluster.store;
    let crds = rt("apiextensions.k8s.io", "customresourcedefinitions");
    store
        .create(&crds, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}}), "test")
        .unwrap();
    let crd = wait_until("established", Duration::from_secs(2), || {
        let crd = store.get(&crds, "", "widgets.example.com").unwrap();
        (
            (condition(&crd, "Established")["status"] == "True").then(|| crd.clone()),
            crd["status"].to_string(),
        )
    })
    .await;
    assert_eq!(condition(&crd, "NamesAccepted")["reason"], "NoConflicts");
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
}

/// A Deployment status reduced to what does not depend on the moment it was recorded:
/// counts, whether the generation was observed, the revision, and the conditions in order.
fn status_shape(dep: &Value) -> String {
    let mut status = dep["status"].as_object().cloned().unwrap_or_default();
    let conditions: Vec<String> = status
        .remove("conditions")
        .and_then(|c| c.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            format!(
                "{}={}({})",
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
                c["reason"].as_str().unwrap()
            )
        })
        .collect();
    let observed =
        status.remove("observedGeneration") == Some(dep["metadata"]["generation"].clone());
    let counts: std::collections::BTreeMap<String, Value> = status.into_iter().collect();
    format!(
        "observed={observed} {} {conditions:?}",
        serde_json::to_string(&counts).unwrap()
    )
}

#[tokio::test]
async fn rolling_update_writes_the_recorded_status_sequence() {
    let Some(_shared) =
        kube_sim::shared_for_test("rolling_update_writes_the_recorded_status_sequence")
    else {
        return;
    };
    let recording = kube_sim::shared_dir()
        .expect("shared recordings")
        .join("apiserver-recordings/04-watch-deployments-from-list-rv.txt");
    let recorded: Vec<String> = std::fs::read_to_string(recording)
        .unwrap()
        .lines()
        .map(|line| status_shape(&serde_json::from_str::<Value>(line).unwrap()["object"]))
        .collect();

    // The recording's pods became Ready about 1 s after creation, like ours at scale 1.
    let cluster = start("sim-1", 1.0, vec![]);
    let store = &cluster.store;
    store
        .create(
            &deployments(),
            deployment("web", 2, "example/web:v1"),
            "test",
        )
        .unwrap();
    wait_until("web available", Duration::from_secs(10), || {
        let dep = store.get(&deployments(), "default", "web").unwrap();
        (
            (condition(&dep, "Progressing")["reason"] == "NewReplicaSetAvailable").then_some(()),
            dep.to_string(),
        )
    })
    .await;
    let mut rx = store.subscribe();
    let mut dep = store.get(&deployments(), "default", "web").unwrap();
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v2");
    dep["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    store.update(&deployments(), dep, "test").unwrap();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let event = rx.recv().await.unwrap();
            if event.resource == deployments() {
                seen.push(status_shape(&event.object));
                if seen.last().unwrap().contains("NewReplicaSetAvailable") && seen.len() > 2 {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("rollout did not finish: {seen:#?}"));
    // The recording's pods were never scheduled (no kubelet), so the server removed each at
    // once; ours are on nodes and terminate gracefully. Seen as the recording would show
    // them: no pod terminating, and the statuses that differed only in that merged.
    assert!(
        seen.iter().any(|s| s.contains("\"terminatingReplicas\":1")),
        "old pods terminate gracefully: {seen:#?}"
    );
    let mut without_terminating: Vec<String> = seen
        .iter()
        .map(|s| s.replace("\"terminatingReplicas\":1", "\"terminatingReplicas\":0"))
        .collect();
    without_terminating.dedup();
    assert_eq!(without_terminating, recorded);
}

#[tokio::test]
async fn progress_deadline_writes_the_recorded_status_sequence() {
    let Some(_shared) =
        kube_sim::shared_for_test("progress_deadline_writes_the_recorded_status_sequence")
    else {
        return;
    };
    let recording = kube_sim::shared_dir()
        .expect("shared recordings")
        .join("apiserver-recordings/03-progress-deadline-watch-deployment.txt");
    let recorded: Vec<String> = std::fs::read_to_string(recording)
        .unwrap()
        .lines()
        .map(|line| status_shape(&serde_json::from_str::<Value>(line).unwrap()["object"]))
        .collect();

    let cluster = start("sim-1", 5.0, vec![]);
    let store = &cluster.store;
    let mut rx = store.subscribe();
    let body: Value = serde_json::from_str(
        &std::fs::read_to_string(
            kube_sim::shared_dir()
                .unwrap()
                .join("apiserver-recordings/03-progress-deadline-request-body.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut dep = body.clone();
    dep["metadata"]["namespace"] = json!("default");
    store.create(&deployments(), dep, "test").unwrap();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = rx.recv().await.unwrap();
            if event.resource == deployments() {
                seen.push(status_shape(&event.object));
                if seen.last().unwrap().contains("ProgressDeadlineExceeded") {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no deadline: {seen:#?}"));
    assert_eq!(seen, recorded);
}

#[tokio::test]
async fn claims_are_bound() {
    let cluster = start("sim-1", 1.0, vec![]);
    let store = &cluster.store;
    let claims = rt("", "persistentvolumeclaims");
    store
        .create(&claims, json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}), "test")
        .unwrap();
    let claim = wait_until("bound", Duration::from_secs(2), || {
        let claim = store.get(&claims, "default", "data").unwrap();
        (
            (claim["status"]["phase"] == "Bound").then(|| claim.clone()),
            claim["status"].to_string(),
        )
    })
    .await;
    assert_eq!(claim["status"]["capacity"]["storage"], "5Gi");
    assert_eq!(claim["status"]["accessModes"], json!(["ReadWriteOnce"]));
}

#[tokio::test]
async fn pods_that_fit_no_node_stay_pending_unschedulable() {
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let mut dep = deployment("win", 2, "example/win:v1");
    dep["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "windows"});
    store.create(&deployments(), dep, "test").unwrap();
    let pod = wait_until("unschedulable pod", Duration::from_secs(3), || {
        let pods = pods_of(store, "win");
        let found = pods
            .iter()
            .find(|p| condition(p, "PodScheduled")["reason"] == "Unschedulable")
            .cloned();
        (found, format!("{pods:?}"))
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Pending");
    assert!(pod["spec"]["nodeName"].is_null());
    assert!(
        condition(&pod, "PodScheduled")["message"]
            .as_str()
            .unwrap()
            .starts_with(
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
            )
    );
    let (events, _) = store.list(&rt("", "events"), Some("default"));
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "FailedScheduling" && e["type"] == "Warning")
    );
    // A selector that matches runs as usual.
    let mut linux = deployment("linux", 1, "example/linux:v1");
    linux["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    store.create(&deployments(), linux, "test").unwrap();
    wait_until("linux ready", Duration::from_secs(3), || {
        let pods = pods_of(store, "linux");
        (
            (pods.len() == 1 && pod_ready(&pods[0])).then_some(()),
            format!("{pods:?}"),
        )
    })
    .await;
}

#[tokio::test]
async fn a_pod_on_a_node_terminates_gracefully() {
    use kube_sim::store::DeleteOptions;
    let cluster = start("sim-1", 10.0, vec![]);
    let store = &cluster.store;
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "web", "image": "example/web:v1"}]}})
    };
    for name in ["a", "b"] {
        store.create(&pods(), pod(name), "test").unwrap();
    }
    wait_until("pods on a node", Duration::from_secs(10), || {
        let (all, _) = store.list(&pods(), Some("default"));
        let bound = all
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count();
        ((bound == 2).then_some(()), format!("{bound} bound"))
    })
    .await;
    let mut events = store.subscribe();

    // A delete marks the pod: deletionTimestamp is the grace period ahead, and the answer
    // is the pod itself, not a Status.
    let deleted = store
        .delete_with(&pods(), "default", "a", &DeleteOptions::default())
        .unwrap();
    assert!(!deleted.finished);
    assert_eq!(deleted.object["metadata"]["deletionGracePeriodSeconds"], 30);
    let marked_at: jiff::Timestamp = deleted.object["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // 30 simulated seconds ahead, which at ten times real time is 3 s of wall time (less
    // the whole-second rounding and what passed since): when the grace period really ends.
    let ahead = marked_at.duration_since(store.clock().now());
    assert!(
        ahead.as_millis() >= 1000 && ahead.as_millis() <= 3000,
        "deletionTimestamp {ahead:?} ahead"
    );
    // Asked again, it answers with the pod as it is; it is still there.
    let again = store
        .delete_with(&pods(), "default", "a", &DeleteOptions::default())
        .unwrap();
    assert_eq!(
        again.object["metadata"]["resourceVersion"],
        deleted.object["metadata"]["resourceVersion"]
    );
    // Watchers see it terminating, then gone once its containers stopped.
    let mut kinds = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let event = events.recv().await.unwrap();
            if event.resource == pods() && event.object["metadata"]["name"] == "a" {
                kinds.push(format!("{:?}", event.kind));
                if kinds.last().is_some_and(|k| k == "Deleted") {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("pod a never went: {kinds:?}"));
    assert_eq!(kinds.first().map(String::as_str), Some("Modified"));

    // A pod already terminating goes at once when forced, and a new pod of the same name
    // made right after is not taken by the first deletion's cleanup.
    store.create(&pods(), pod("c"), "test").unwrap();
    wait_until("c on a node", Duration::from_secs(10), || {
        let c = store.get(&pods(), "default", "c").unwrap();
        (
            c["spec"]["nodeName"].is_string().then_some(()),
            c.to_string(),
        )
    })
    .await;
    let force = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    assert!(
        !store
            .delete_with(&pods(), "default", "c", &DeleteOptions::default())
            .unwrap()
            .finished
    );
    assert!(
        store
            .delete_with(&pods(), "default", "c", &force)
            .unwrap()
            .finished
    );
    let new_c = store.create(&pods(), pod("c"), "test").unwrap();
    // Well past the first deletion's cleanup (a simulated second, 0.1 s here).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let c = store
        .get(&pods(), "default", "c")
        .expect("the new pod c stays");
    assert_eq!(c["metadata"]["uid"], new_c["metadata"]["uid"]);

    // Grace 0 (kubectl delete --grace-period=0 --force) removes a running pod at once.
    let forced = store
        .delete_with(
            &pods(),
            "default",
            "b",
            &DeleteOptions {
                grace_period_seconds: Some(0),
                ..DeleteOptions::default()
            },
        )
        .unwrap();
    assert!(forced.finished);
    assert!(store.get(&pods(), "default", "b").is_none());
}

/// `after:` runs the container healthy first: the Deployment becomes Available, then the
/// container crashes `after` into its run, the pod turns not Ready, the Deployment loses
/// availability and the restart count grows.
#[tokio::test]
async fn a_delayed_crash_loop_breaks_a_healthy_deployment() {
    let rules =
        rules::parse("- {image: \"*:v2\", behaviour: CrashLoopBackOff, after: 3s}").unwrap();
    let cluster = start("sim-1", 10.0, rules);
    let store = &cluster.store;
    store
        .create(
            &deployments(),
            deployment("web", 2, "example/web:v2"),
            "test",
        )
        .unwrap();
    let available = |store: &Store| {
        let dep = store.get(&deployments(), "default", "web").unwrap();
        let ok = condition(&dep, "Available")["status"] == "True"
            && dep["status"]["availableReplicas"] == 2;
        (ok, dep["status"].to_string())
    };
    let healthy_at = wait_until("available", Duration::from_secs(3), || {
        let (ok, last) = available(store);
        (ok.then(|| cluster.clock.elapsed()), last)
    })
    .await;
    let restarted = |store: &Store| {
        pods_of(store, "web").iter().all(|p| {
            p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .is_some_and(|n| n >= 1)
        })
    };
    assert!(!restarted(store), "no restart while healthy");
    let lost_at = wait_until("availability lost", Duration::from_secs(3), || {
        let (ok, last) = available(store);
        (
            (!ok && pods_of(store, "web").iter().all(|p| !pod_ready(p)))
                .then(|| cluster.clock.elapsed()),
            last,
        )
    })
    .await;
    // Ready at 1 s (created 0.5 s, ready 0.5 s later), crashed at 3.5 s: about 2.5 s of
    // simulated time healthy.
    let healthy_for = lost_at.saturating_sub(healthy_at);
    assert!(
        healthy_for >= Duration::from_millis(1500),
        "healthy for {healthy_for:?} only"
    );
    wait_until("restarted", Duration::from_secs(3), || {
        let pods = pods_of(store, "web");
        (restarted(store).then_some(()), format!("{pods:?}"))
    })
    .await;
}
