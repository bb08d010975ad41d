//! Fewer connections and requests (issue 25.3): a target's applies and watches share one HTTP/2
//! connection when the server offers h2 by ALPN, HTTP/1.1 still works when it does not, and
//! the wait watches the pods of a namespace once, whatever the number of workloads in it.

use crate::harness::{TIME_SCALE, TestEnv, config};

/// `configmaps` ConfigMaps and `deployments` Deployments (one replica each), one document.
fn objects(configmaps: usize, deployments: usize) -> String {
    let mut text = String::new();
    for i in 0..configmaps {
        text.push_str(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf-{i}\ndata:\n  n: \"{i}\"\n---\n"
        ));
    }
    for i in 0..deployments {
        text.push_str(&format!(
            "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{i}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web-{i}
  template:
    metadata:
      labels:
        app: web-{i}
    spec:
      containers:
        - name: web
          image: example.com/web:v1
---
"
        ));
    }
    text
}

/// One simulated cluster; `http1_only` makes it offer no h2, as a server without HTTP/2.
async fn start(http1_only: bool) -> TestEnv {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let options = kube_sim::SimOptions {
        clusters: 1,
        time_scale: TIME_SCALE,
        http1_only,
        ..Default::default()
    };
    let sim = kube_sim::Sim::start_with_kubeconfig(options, &kubeconfig)
        .await
        .expect("kube-sim starts and writes its kubeconfig");
    TestEnv {
        dir,
        kubeconfig,
        sim,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_of_100_objects_uses_one_http2_connection() {
    let env = start(false).await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // 95 + 5 = 100 objects: applies in parallel, then watches of three kinds.
    env.write("k8s/app.yaml", &objects(95, 5));
    env.cluster(1).reset_counters();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(env.cluster(1).counters().verb("apply") >= 100);
    let connections = env.cluster(1).connections();
    assert_eq!(
        (connections.accepted, connections.http2, connections.http1),
        (1, 1, 0),
        "one connection, HTTP/2, for every request of the deploy ({} requests)",
        env.requests(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_http2_is_deployed_to_over_http1() {
    let env = start(true).await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &objects(10, 2));
    env.cluster(1).reset_counters();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    let connections = env.cluster(1).connections();
    assert_eq!(connections.http2, 0, "{connections:?}");
    assert!(connections.http1 >= 1, "{connections:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_deployments_in_one_namespace_share_one_pod_watch() {
    let env = start(false).await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &objects(0, 4));
    env.cluster(1).reset_counters();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let counters = env.cluster(1).counters();
    assert!(counters.verb("apply") >= 4);
    assert_eq!(
        counters.get("watch", "pods"),
        1,
        "one pod watch for 4 Deployments: {:#}",
        counters.to_json()
    );
    assert_eq!(
        counters.get("watch", "replicasets.apps"),
        1,
        "{:#}",
        counters.to_json()
    );
}

/// The lock and the history cost few round trips (each is 20 ms or more to a real cluster,
/// and all of them are spent before the first apply or after the rollout): the Lease is
/// created without a read first, released by the version last written, the history is
/// listed once under the lock and not again to tidy it, and the run's record is finished
/// without reading it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_and_the_history_take_few_requests() {
    let env = start(false).await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // The second deploy also patches the first one's record, to mark it superseded.
    for (deploy, creates, configmaps, patches) in [("first", 2, 1, 1), ("second", 1, 2, 2)] {
        // The second deploy changes something, so that it writes a record too.
        env.write("k8s/app.yaml", &objects(configmaps, 1));
        env.cluster(1).reset_counters();
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 0, "{}", run.output());
        let counters = env.cluster(1).counters();
        let json = counters.to_json();
        // The first deploy's Lease create finds no namespace (404), creates it, and again.
        assert_eq!(
            (
                counters.get("get", "leases.coordination.k8s.io"),
                counters.get("create", "leases.coordination.k8s.io"),
                counters.get("delete", "leases.coordination.k8s.io"),
            ),
            (0, creates, 1),
            "{deploy} deploy: {json:#}"
        );
        // Listed once under the lock; the run's record created, and finished (a patch)
        // without reading any record back.
        assert_eq!(
            (
                counters.get("list", "secrets"),
                counters.get("create", "secrets"),
                counters.get("patch", "secrets"),
                counters.get("get", "secrets"),
            ),
            (1, 1, patches, 0),
            "{deploy} deploy: {json:#}"
        );
    }
}

/// Discovery is `/api` and `/apis` once each, aggregated; a server without aggregated
/// discovery (before v1.26) is read group by group, and the deploy is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_two_aggregated_requests_or_group_by_group_on_an_older_server() {
    for legacy in [false, true] {
        let env = start(false).await;
        env.cluster(1).set_faults(kube_sim::Faults {
            legacy_discovery: legacy,
            ..Default::default()
        });
        env.write("rollguard.yaml", &config(1, "60s"));
        env.write("k8s/app.yaml", &objects(1, 1));
        env.cluster(1).reset_counters();
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 0, "legacy {legacy}: {}", run.output());
        let counters = env.cluster(1).counters();
        assert_eq!(
            counters.get("apply", "deployments.apps"),
            1,
            "legacy {legacy}"
        );
        let (api, apis) = (
            counters.get("discovery", "/api"),
            counters.get("discovery", "/apis"),
        );
        let by_group =
            counters.get("discovery", "/api/v1") + counters.get("discovery", "/apis/apps/v1");
        if legacy {
            assert!(by_group >= 2, "the groups one by one: {counters:?}");
        } else {
            assert_eq!((api, apis, by_group), (1, 1, 0), "{counters:?}");
        }
    }
}
