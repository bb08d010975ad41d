//! The preflight dry run (issue 26.8): every object is applied with `dryRun=All` on every
//! target before the first write anywhere, so a field the server refuses stops the deploy
//! with nothing written (exit 2); `preflight: false` skips it.

use crate::harness::{TestEnv, config, small_app};

/// Three targets on v1; then sim-2 alone gets a Deployment `web` with another selector (a
/// deploy there by hand), so that v2's selector is immutable on us only.
async fn three_targets_one_with_another_selector(extra_config: &str) -> TestEnv {
    let env = TestEnv::start(3, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}{extra_config}", config(3, "60s")),
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let body: serde_json::Value = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web", "tier": "front"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "web", "image": "example.com/web:v1"}]}
            }
        }
    });
    // Delete and recreate by hand: the selector cannot change in place.
    let client = env.client(2).await;
    let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "shop");
    api.delete("web", &Default::default())
        .await
        .expect("delete");
    env.apply_as(2, "rollguard-shop", &body).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    env
}

fn writes_before(env: &TestEnv) -> Vec<u64> {
    (1..=3).map(|n| env.writes_besides_locks(n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immutable_selector_on_one_of_three_targets_stops_the_deploy_before_any_write() {
    let env = three_targets_one_with_another_selector("").await;
    let before = writes_before(&env);
    // Under every policy: nothing was written, so nothing rolls back.
    for policy in ["rollback-all", "rollback-failed", "none"] {
        let run = env.deploy(&["--on-failure", policy]).await;
        assert_eq!(run.code, 2, "{policy}: {}", run.output());
        assert_eq!(writes_before(&env), before, "{policy}: {}", run.output());
        let failure = &run.target("us")["failures"][0];
        assert_eq!(failure["object"], "Deployment shop/web", "{}", run.output());
        let message = failure["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.selector: Invalid value")
                && message.contains("field is immutable"),
            "{}",
            run.output()
        );
        assert_eq!(run.outcome("us"), "failed");
        for other in ["eu", "ap"] {
            assert_eq!(run.outcome(other), "skipped", "{}", run.output());
            let said = run.target(other)["message"].as_str().unwrap_or_default();
            assert!(
                said.starts_with(
                    "not deployed: the preflight dry run refused Deployment shop/web on us"
                ),
                "{other}: {said}"
            );
            assert!(run.target(other)["rollback"].is_null(), "{}", run.output());
        }
        assert!(
            run.target("us")["message"].as_str().is_some_and(|m| m
                .starts_with("not deployed: the preflight dry run refused it")
                && m.contains("field is immutable")),
            "{}",
            run.output()
        );
        assert_eq!(run.report.as_ref().unwrap()["refused_in_preflight"], true);
        // The server's message is said once on each stream: the table's details, the live line.
        for (stream, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
            assert_eq!(
                text.matches("field is immutable").count(),
                1,
                "{stream}: {}",
                run.output()
            );
        }
        // No record was begun: the history still ends at v1 everywhere.
        for target in ["eu", "us", "ap"] {
            assert!(run.target(target)["revision"].is_null(), "{}", run.output());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_preflight_false_the_immutable_selector_fails_in_the_apply() {
    let env = three_targets_one_with_another_selector("preflight: false\n").await;
    let before = writes_before(&env);
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert!(run.report.as_ref().unwrap()["refused_in_preflight"].is_null());
    // The apply reached the servers: eu and ap were written to.
    let after = writes_before(&env);
    assert!(after[0] > before[0] && after[2] > before[2], "{after:?}");
    let failure = &run.target("us")["failures"][0];
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("field is immutable")),
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_of_the_wrong_type_is_refused_in_the_preflight() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    let app = small_app("example.com/web:v1");
    env.write("k8s/app.yaml", &app);
    assert_eq!(env.deploy(&[]).await.code, 0);
    let before = [env.writes_besides_locks(1), env.writes_besides_locks(2)];
    // The ConfigMap comes first and changes too: without the preflight it would be written.
    let quoted = small_app("example.com/web:v2")
        .replace("  greeting: hello\n", "  greeting: hi\n")
        .replace("  replicas: 2\n", "  replicas: \"2\"\n");
    assert!(quoted.contains("replicas: \"2\"") && quoted.contains("greeting: hi"));
    env.write("k8s/app.yaml", &quoted);
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    let after = [env.writes_besides_locks(1), env.writes_besides_locks(2)];
    assert_eq!(after, before, "{}", run.output());
    for target in ["eu", "us"] {
        let failure = &run.target(target)["failures"][0];
        assert_eq!(failure["reason"], "InvalidField", "{}", run.output());
        assert_eq!(failure["object"], "Deployment shop/web", "{}", run.output());
        assert!(run.target(target)["rollback"].is_null(), "{}", run.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preflight_passes_a_first_deploy_into_a_namespace_not_yet_there() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let phases: Vec<&str> = run.target("eu")["phases"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(phases.contains(&"preflight"), "{phases:?}");
    // The preflight's phase comes after the lock's and before the apply's.
    let at = |name| phases.iter().position(|p| *p == name);
    assert!(
        at("lock") < at("preflight") && at("preflight") < at("apply"),
        "{phases:?}"
    );
    let dry_runs: u64 = env
        .cluster(1)
        .counters()
        .counts
        .iter()
        .filter(|(k, _)| k.dry_run)
        .map(|(_, n)| n)
        .sum();
    assert!(dry_runs >= 2, "every object dry-run: {dry_runs}");
}

// ---------------------------------------------------------------------------------------
// A fleet diff a person can read (issue 26.6), and a plan's outputs.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_image_change_on_three_targets_is_printed_once_and_outputs_say_so() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    let run = env.command("diff", &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let once = "  ~ Deployment shop/web on eu, us, ap (";
    assert_eq!(run.stdout.matches(once).count(), 1, "{}", run.output());
    let added = run
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('+') && l.contains("image: example.com/web:v2"))
        .count();
    assert_eq!(added, 1, "one diff for the three:\n{}", run.output());
    // Unchanged objects are a count; -v names them.
    assert!(!run.stdout.contains("web-config"), "{}", run.output());
    let verbose = env.command("diff", &["-v"]).await;
    assert!(
        verbose
            .stdout
            .contains("  = unchanged: ConfigMap shop/web-config"),
        "{}",
        verbose.output()
    );
    // A dry run's live lines never say deployed.
    let dry = env.deploy(&["--dry-run"]).await;
    assert_eq!(dry.code, 0, "{}", dry.output());
    assert!(!dry.stderr.contains("deployed"), "{}", dry.output());
    assert!(
        dry.stderr.contains("planned: would change 1 object"),
        "{}",
        dry.output()
    );

    // The outputs are written whenever GITHUB_OUTPUT is set, --no-github included.
    for extra in [&[][..], &["--no-github"][..]] {
        let output = env.path("github_output");
        let summary = env.path("step_summary");
        let _ = std::fs::remove_file(&output);
        let _ = std::fs::remove_file(&summary);
        let run = env
            .command_env(
                "diff",
                extra,
                &[
                    ("GITHUB_ACTIONS", "true"),
                    ("GITHUB_OUTPUT", &output.display().to_string()),
                    ("GITHUB_STEP_SUMMARY", &summary.display().to_string()),
                ],
            )
            .await;
        assert_eq!(run.code, 0, "{extra:?}: {}", run.output());
        let outputs = env.read("github_output");
        for want in [
            "has_changes<<",
            "\ntrue\n",
            "changes<<",
            "targets_changed<<",
            "plan<<",
        ] {
            assert!(outputs.contains(want), "{extra:?}: {want}: {outputs}");
        }
        let value = |name: &str| {
            let mut lines = outputs.lines();
            lines.find(|l| l.starts_with(&format!("{name}<<")))?;
            lines.next().map(str::to_string)
        };
        assert_eq!(value("has_changes").as_deref(), Some("true"), "{outputs}");
        assert_eq!(value("changes").as_deref(), Some("3"), "{outputs}");
        assert_eq!(value("targets_changed").as_deref(), Some("3"), "{outputs}");
        let plan: serde_json::Value =
            serde_json::from_str(&value("plan").unwrap_or_default()).expect("plan JSON");
        assert_eq!(plan["us"]["update"], 1, "{outputs}");
        assert!(
            env.read("step_summary")
                .contains("Plan (server-side dry run)"),
            "{extra:?}: {}",
            env.read("step_summary")
        );
    }
}
