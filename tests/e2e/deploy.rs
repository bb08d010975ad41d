//! Deploys that must succeed.

use crate::harness::{
    TestEnv, assert_no_ansi, config, corpus_file, deployment_available, list, small_app,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microservices_demo_deploys_to_three_clusters() {
    let Some(manifests) = corpus_file(
        "microservices_demo_deploys_to_three_clusters",
        "microservices-demo/release/kubernetes-manifests.yaml",
    ) else {
        return;
    };
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "90s"));
    env.write("k8s/kubernetes-manifests.yaml", &manifests);
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["eu", "us", "ap"] {
        assert_eq!(run.outcome(name), "deployed", "{}", run.output());
        let phases = run.target(name)["phases"]
            .as_array()
            .expect("phases")
            .clone();
        assert!(
            phases.iter().any(|p| p["name"] == "wait"),
            "phases: {phases:?}"
        );
    }
    let report = run.report.as_ref().expect("report");
    assert_eq!(report["version"], 1);
    assert_eq!(report["app"], "shop");
    assert_eq!(report["outcome"], "deployed");
    for cluster in 1..=3 {
        let client = env.client(cluster).await;
        let deployments = list(&client, "apps/v1", "Deployment", "deployments", "shop").await;
        assert_eq!(
            deployments.len(),
            12,
            "every Deployment of the demo is in sim-{cluster}"
        );
        for d in &deployments {
            assert!(
                deployment_available(d),
                "sim-{cluster}: {} not available: {:#}",
                d["metadata"]["name"],
                d["status"]
            );
        }
    }
    assert_no_ansi(&run);
    // Every log line of a target names it.
    for line in run.stderr.lines().filter(|l| l.contains("applied")) {
        assert!(
            line.contains("target"),
            "log line without its target: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_percent_503_still_deploys() {
    let env = TestEnv::start(3, "").await;
    for i in 0..3usize {
        env.cluster(i + 1).set_faults(kube_sim::faults::Faults {
            error_rate: 0.3,
            error_status: 503,
            ..Default::default()
        });
    }
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["eu", "us", "ap"] {
        assert_eq!(run.outcome(name), "deployed", "{}", run.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "30s"));
    // The namespace exists, so the dry run can check every object.
    env.write(
        "k8s/app.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\n{}",
            small_app("example.com/web:v1")
        ),
    );
    let before = env.writes(1);
    let run = env.deploy(&["--dry-run"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.report.as_ref().expect("report")["dry_run"], true);
    assert_eq!(env.writes(1), before, "a dry run stores nothing");
}

#[cfg(feature = "demo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_catches_the_bad_image_and_rolls_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = crate::harness::rollguard(&["demo".to_string()], dir.path(), &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(
        run.stderr.contains("us: ImagePullBackOff caught"),
        "{}",
        run.output()
    );
    // Issue 16: a time it quotes says the simulation's time scale, and the apply is
    // counted as it goes (its four objects), not left at 0/4.
    // The line after the catch says the time scale (two lines, to fit 80 columns).
    let caught: Vec<&str> = run
        .stderr
        .lines()
        .skip_while(|l| !l.contains("ImagePullBackOff caught"))
        .take(2)
        .collect();
    assert!(
        caught
            .get(1)
            .is_some_and(|l| l.contains("(simulated time runs 5× faster;")),
        "{caught:?}"
    );
    for target in ["eu", "us", "ap"] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.contains(&format!(" {target} ")) && l.ends_with("applying 4/4")),
            "{target}: {}",
            run.stderr
        );
    }
    // One number per run: v2 on all three, each rolled back to v1 as v3; the two that did
    // not fail say why they were rolled back (stopped by the policy, at the time it decided).
    assert_eq!(
        run.stdout.matches("rolled back 2 → 1 (as 3)").count(),
        3,
        "{}",
        run.output()
    );
    // The policy rolled them back at us's failure (stopped mid-wait, or healthy by then).
    for target in ["eu", "ap"] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{target} "))
                    && l.contains("policy rollback-all: us failed")),
            "{target}: {}",
            run.output()
        );
    }
    // Caught from the pods (the line above), not at a deadline: no wall-clock bound here,
    // which a busy machine would break.
    assert_no_ansi(&run);
}

/// A build without the `demo` feature (`cargo test --no-default-features`) has no kube-sim
/// inside: `rollguard demo` says so and how to get it, and touches nothing.
#[cfg(not(feature = "demo"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_demo_feature_the_demo_says_how_to_get_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = crate::harness::rollguard(&["demo".to_string()], dir.path(), &[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("without the `demo` feature")
            && run.stderr.contains("cargo run --release -- demo"),
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_flag_picks_targets_and_kubeconfig_env_holds_a_whole_kubeconfig() {
    use base64::Engine as _;
    let env = TestEnv::start(2, "").await;
    // Target `us` reads its kubeconfig from an environment variable, base64 as CI secrets hold it.
    env.write(
        "rollguard.yaml",
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: sim-1\n  - name: us\n    context: sim-2\n    kubeconfig_env: KC_US\n",
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let kubeconfig = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let encoded = base64::engine::general_purpose::STANDARD.encode(kubeconfig);
    let args: Vec<String> = [
        "deploy",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--report",
        &env.path("report.json").display().to_string(),
        "--context",
        "sim-2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // No --kubeconfig and no KUBECONFIG: only the env variable can reach sim-2.
    let mut run = crate::harness::rollguard(&args, env.dir.path(), &[("KC_US", &encoded)]).await;
    run.report = std::fs::read_to_string(env.path("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    assert_eq!(run.code, 0, "{}", run.output());
    let targets = run.report.as_ref().expect("report")["targets"]
        .as_array()
        .expect("targets")
        .clone();
    assert_eq!(targets.len(), 1, "only the picked target runs: {targets:?}");
    assert_eq!(run.outcome("us"), "deployed");
    assert_eq!(env.writes(1), 0, "sim-1 was not picked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watch_streams_are_resumed() {
    let env = TestEnv::start(1, "").await;
    env.cluster(1).set_faults(kube_sim::faults::Faults {
        drop_watch_after_events: Some(2),
        ..Default::default()
    });
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed");
}
