//! The judges of the controllers: the real `kubectl rollout status` and a kube-rs watcher,
//! against a kube-sim cluster served over HTTP. These fail when kubectl is missing.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kube_sim::cluster::{Sim, SimOptions};

/// One simulated cluster (HTTPS, its controllers) and a kubeconfig for it.
struct TestCluster {
    _sim: Sim,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

async fn start(scale: f64) -> TestCluster {
    let sim = Sim::start(SimOptions {
        time_scale: scale,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    TestCluster {
        _sim: sim,
        _dir: dir,
        kubeconfig,
    }
}

/// Runs the real kubectl (it must be on the PATH) against the cluster.
async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<String>) -> Output {
    let mut command = tokio::process::Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .expect("kubectl must be on the PATH for this test");
    if let Some(input) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
    }
    drop(child.stdin.take());
    tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("kubectl finished in time")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn deployment_yaml(name: &str, image: &str, deadline: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 3\n  \
         progressDeadlineSeconds: {deadline}\n  selector:\n    matchLabels:\n      app: {name}\n  \
         template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n      \
         - name: main\n        image: {image}\n"
    )
}

async fn apply(cluster: &TestCluster, yaml: String) {
    let out = kubectl(
        &cluster.kubeconfig,
        &["apply", "--server-side", "--validate=false", "-f", "-"],
        Some(yaml),
    )
    .await;
    assert!(
        out.status.success(),
        "kubectl apply failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_succeeds_for_a_good_image() {
    let cluster = start(10.0).await;
    apply(&cluster, deployment_yaml("web", "example/web:v1", 600)).await;
    let out = kubectl(
        &cluster.kubeconfig,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
        None,
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("deployment \"web\" successfully rolled out"),
        "{stdout}"
    );

    // A new image rolls out again, through the old and new ReplicaSets.
    apply(&cluster, deployment_yaml("web", "example/web:v2", 600)).await;
    let out = kubectl(
        &cluster.kubeconfig,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
        None,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(
        &cluster.kubeconfig,
        &["get", "replicasets", "-o", "name"],
        None,
    )
    .await;
    assert_eq!(
        text(&out.stdout).lines().count(),
        2,
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_fails_at_the_progress_deadline() {
    let cluster = start(10.0).await;
    apply(
        &cluster,
        deployment_yaml("stuck", "example/doesnotexist:v1", 30),
    )
    .await;
    let started = std::time::Instant::now();
    let out = kubectl(
        &cluster.kubeconfig,
        &["rollout", "status", "deployment/stuck", "--timeout=60s"],
        None,
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}{stderr}", text(&out.stdout));
    assert!(
        stderr.contains("error: deployment \"stuck\" exceeded its progress deadline"),
        "{stderr}"
    );
    // 30 simulated seconds at scale 10: about 3 s of real time, not 30.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_watches_a_deployment_to_completion() {
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, PostParams};
    use kube::runtime::{WatchStreamExt, watcher};

    let cluster = start(10.0).await;
    let options = kube::config::KubeConfigOptions::default();
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let deployment: Deployment =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "rs-watch"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs-watch"}},
                     "template": {"metadata": {"labels": {"app": "rs-watch"}},
                                  "spec": {"containers": [{"name": "main", "image": "example/web:v1"}]}}}
        }))
        .unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let config = watcher::Config::default().fields("metadata.name=rs-watch");
    let mut stream = watcher(api.clone(), config).applied_objects().boxed();
    let complete = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = stream.next().await {
            let dep = event.expect("watch event");
            let generation = dep.metadata.generation.unwrap_or_default();
            let Some(status) = dep.status else { continue };
            let progressing = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Progressing");
            if status.observed_generation.unwrap_or_default() >= generation
                && status.updated_replicas == Some(2)
                && status.available_replicas == Some(2)
                && progressing
                    .is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"))
            {
                return true;
            }
        }
        false
    })
    .await
    .expect("the Deployment completed in time");
    assert!(complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_microservices_demo_deployment_rolls_out() {
    let Some(_shared) = kube_sim::shared_for_test("every_microservices_demo_deployment_rolls_out")
    else {
        return;
    };
    let manifests = kube_sim::shared_dir()
        .expect("the shared corpus beside the repository")
        .join("corpus/microservices-demo/release/kubernetes-manifests.yaml");
    let yaml = std::fs::read_to_string(&manifests).unwrap();
    // Readiness probes wait up to 20 simulated seconds; scale 20 makes that one second.
    let cluster = start(20.0).await;
    apply(&cluster, yaml).await;
    let out = kubectl(
        &cluster.kubeconfig,
        &["get", "deployments", "-o", "name"],
        None,
    )
    .await;
    let names: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in &names {
        let out = kubectl(
            &cluster.kubeconfig,
            &["rollout", "status", name, "--timeout=60s"],
            None,
        )
        .await;
        assert!(
            out.status.success(),
            "{name}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("successfully rolled out"),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_follows_statefulsets_and_daemonsets() {
    let cluster = start(10.0).await;
    let yaml = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  replicas: 3\n  \
        serviceName: db\n  selector:\n    matchLabels:\n      app: db\n  template:\n    metadata:\n      \
        labels:\n        app: db\n    spec:\n      containers:\n      - name: db\n        image: example/db:v1\n\
        ---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: agent\nspec:\n  selector:\n    \
        matchLabels:\n      app: agent\n  template:\n    metadata:\n      labels:\n        app: agent\n    \
        spec:\n      containers:\n      - name: agent\n        image: example/agent:v1\n";
    apply(&cluster, yaml.to_string()).await;
    for (target, expected) in [
        // The API server defaults partition to 0, so kubectl reports a partitioned roll out.
        (
            "statefulset/db",
            "partitioned roll out complete: 3 new pods have been updated",
        ),
        (
            "daemonset/agent",
            "daemon set \"agent\" successfully rolled out",
        ),
    ] {
        let out = kubectl(
            &cluster.kubeconfig,
            &["rollout", "status", target, "--timeout=60s"],
            None,
        )
        .await;
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{target}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(stdout.contains(expected), "{target}: {stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_the_last_good_manifest_rolls_back_to_its_replica_set() {
    let cluster = start(10.0).await;
    let status = |name: &'static str| {
        let kubeconfig = cluster.kubeconfig.clone();
        async move {
            kubectl(
                &kubeconfig,
                &["rollout", "status", name, "--timeout=60s"],
                None,
            )
            .await
        }
    };
    apply(&cluster, deployment_yaml("app", "example/app:v1", 30)).await;
    assert!(status("deployment/app").await.status.success());
    apply(
        &cluster,
        deployment_yaml("app", "example/doesnotexist:v2", 30),
    )
    .await;
    let failed = status("deployment/app").await;
    assert!(
        text(&failed.stderr).contains("exceeded its progress deadline"),
        "{}",
        text(&failed.stderr)
    );
    // What rollguard does on failure: apply the last good manifest again.
    apply(&cluster, deployment_yaml("app", "example/app:v1", 30)).await;
    let out = status("deployment/app").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(
        &cluster.kubeconfig,
        &["get", "replicasets", "-o", "jsonpath={range .items[*]}{.metadata.annotations.deployment\\.kubernetes\\.io/revision} {.spec.template.spec.containers[0].image} {.spec.replicas}{\"\\n\"}{end}"],
        None,
    )
    .await;
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["2 example/doesnotexist:v2 0", "3 example/app:v1 3"]);
    let out = kubectl(
        &cluster.kubeconfig,
        &[
            "get",
            "deployment",
            "app",
            "-o",
            "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}",
        ],
        None,
    )
    .await;
    assert_eq!(text(&out.stdout), "3");
}
