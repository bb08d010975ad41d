//! Targets that must fail, fast and with the reason, while the others deploy.

use crate::harness::{TestEnv, assert_no_ansi, config, small_app};

/// Runs the small app with `image` on three clusters where `rules` make it fail on sim-2
/// only; returns the run.
async fn one_bad_cluster(
    image: &str,
    behaviour: &str,
    extra_manifest: &str,
) -> crate::harness::Run {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{image}\", behaviour: {behaviour}}}\n- {{image: \"{image}\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(3, &rules).await;
    env.write("rollguard.yaml", &config(3, "5m"));
    env.write(
        "k8s/app.yaml",
        &format!("{}{extra_manifest}", small_app(image)),
    );
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("ap"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
    assert_no_ansi(&run);
    run
}

fn first_failure(run: &crate::harness::Run, target: &str) -> serde_json::Value {
    run.target(target)["failures"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_backoff_fails_one_target_fast() {
    let run = one_bad_cluster("nginx:doesnotexist", "ImagePullBackOff", "").await;
    let failure = first_failure(&run, "us");
    assert_eq!(failure["reason"], "ImagePullBackOff", "{failure:#}");
    assert_eq!(failure["object"], "Deployment shop/web");
    assert_eq!(failure["container"], "web");
    assert!(
        failure["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("web-")),
        "{failure:#}"
    );
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("nginx:doesnotexist")),
        "{failure:#}"
    );
    // Decided by the pull error, not by the progress deadline (600 s simulated) or the wait
    // timeout: the reason above, and the message says the pull cannot succeed.
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("(cannot succeed: the image or tag does not exist)")),
        "{failure:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_fails_one_target() {
    let run = one_bad_cluster("example.com/web:crashy", "CrashLoopBackOff", "").await;
    let failure = first_failure(&run, "us");
    assert_eq!(failure["reason"], "CrashLoopBackOff", "{failure:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_container_config_error_fails_one_target() {
    let run = one_bad_cluster("example.com/web:cfg", "CreateContainerConfigError", "").await;
    let failure = first_failure(&run, "us");
    assert_eq!(
        failure["reason"], "CreateContainerConfigError",
        "{failure:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ready_times_out_with_what_was_pending() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "5m"));
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let run = env
        .deploy(&["--timeout", "3s", "--on-failure", "none"])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    let failure = run.target("eu")["failures"][0].clone();
    assert_eq!(failure["reason"], "Timeout", "{failure:#}");
    assert_eq!(failure["object"], "Deployment shop/web", "{failure:#}");
    // The flag's deadline ended the wait, not the config's 5m.
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("not ready after 3s")),
        "{failure:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_is_down_fails_and_the_others_deploy() {
    let env = TestEnv::start(3, "").await;
    env.cluster(3).set_down(true);
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("us"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("ap"), "failed", "{}", run.output());
    let failure = run.target("ap")["failures"][0].clone();
    // Refused (not a timeout, nor a TLS error from another server on its port).
    assert_eq!(failure["reason"], "ConnectionRefused", "{failure:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_reported_as_unauthorized() {
    let env = TestEnv::start(2, "").await;
    // Replace sim-2's token in the kubeconfig.
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let mut kc: serde_json::Value = serde_saphyr::from_str(&text).expect("kubeconfig yaml");
    let users = kc["users"].as_array_mut().expect("users");
    let user = users
        .iter_mut()
        .find(|u| u["name"].as_str().is_some_and(|n| n.contains('2')))
        .expect("user of sim-2");
    user["user"]["token"] = serde_json::Value::String("wrong-token".into());
    std::fs::write(&env.kubeconfig, serde_json::to_string(&kc).expect("json")).expect("write");
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    let failure = run.target("us")["failures"][0].clone();
    assert_eq!(failure["reason"], "Unauthorized", "{failure:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_rollback_all_a_target_failing_the_preflight_stops_the_run_before_any_write() {
    let env = TestEnv::start(3, "").await;
    env.cluster(2).set_down(true);
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
    assert_eq!(
        run.target("us")["failures"][0]["reason"],
        "ConnectionRefused",
        "{}",
        run.output()
    );
    for name in ["eu", "ap"] {
        assert_eq!(run.outcome(name), "skipped", "{}", run.output());
        let message = run.target(name)["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("us failed the preflight") && message.contains("rollback-all"),
            "{name}: {message}"
        );
    }
    // Not even the lock or a release record: nothing to roll back anywhere.
    assert_eq!(env.writes(1), 0, "{}", run.output());
    assert_eq!(env.writes(3), 0, "{}", run.output());

    // Other policies go on with the reachable targets.
    let run = env.deploy(&["--on-failure", "rollback-failed"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("ap"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
}

/// A Warning Event about `kind` shop/`name` with `uid`, as another controller records it.
fn warning_event(
    kind: &str,
    api_version: &str,
    name: &str,
    uid: &str,
    reason: &str,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{reason}"), "namespace": "shop"},
        "involvedObject": {"kind": kind, "apiVersion": api_version, "name": name, "namespace": "shop", "uid": uid},
        "reason": reason,
        "message": format!("{reason} happened"),
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "source": {"component": "test"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_shows_the_events_of_its_object_replicasets_and_pods_only() {
    use crate::harness::{create, list};
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "5m"));
    let service = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n";
    env.write(
        "k8s/app.yaml",
        &format!("{}{service}", small_app("example.com/web:v1")),
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());

    // A Service named like the Deployment with Warning events (the endpoints controller
    // records these on a real cluster), and an event of an earlier, deleted Deployment `web`.
    let client = env.client(1).await;
    let uid = |objects: Vec<serde_json::Value>| {
        objects
            .iter()
            .find(|o| o["metadata"]["name"] == "web")
            .and_then(|o| o["metadata"]["uid"].as_str())
            .expect("web has a uid")
            .to_string()
    };
    let service_uid = uid(list(&client, "v1", "Service", "services", "shop").await);
    let deployment_uid = uid(list(&client, "apps/v1", "Deployment", "deployments", "shop").await);
    for event in [
        warning_event(
            "Service",
            "v1",
            "web",
            &service_uid,
            "FailedToUpdateEndpointSlices",
        ),
        warning_event(
            "Deployment",
            "apps/v1",
            "web",
            "uid-of-a-deleted-web",
            "StaleDeploymentEvent",
        ),
        warning_event(
            "Deployment",
            "apps/v1",
            "web",
            &deployment_uid,
            "OwnDeploymentEvent",
        ),
    ] {
        create(&client, "v1", "Event", "events", "shop", event).await;
    }

    env.write(
        "k8s/app.yaml",
        &format!("{}{service}", small_app("nginx:doesnotexist")),
    );
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let failure = first_failure(&run, "eu");
    assert_eq!(failure["reason"], "ImagePullBackOff", "{failure:#}");
    let events: Vec<&str> = failure["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e.as_str()).collect())
        .unwrap_or_default();
    let pod = failure["pod"].as_str().unwrap_or_default();
    assert!(
        events
            .iter()
            .any(|e| e.starts_with(&format!("pod {pod}: "))),
        "the failing pod's events: {events:?}"
    );
    assert!(
        events.iter().any(|e| e.contains("OwnDeploymentEvent")),
        "the Deployment's own events: {events:?}"
    );
    for foreign in ["FailedToUpdateEndpointSlices", "StaleDeploymentEvent"] {
        assert!(
            !events.iter().any(|e| e.contains(foreign)),
            "{foreign} is not about this Deployment: {events:?}"
        );
        assert!(!run.stdout.contains(foreign), "{}", run.output());
    }
}
