//! What the manifests no longer declare (issue 26.7), end to end: an object of the last
//! release that the new manifests drop is listed by `diff` and by the deploy report as left
//! in place; with `--prune` (or `prune: true`) it is deleted after a healthy deploy, kept
//! when the deploy rolls back, and kept when another field manager took it over.

use serde_json::{Value, json};

use crate::harness::{TestEnv, config, list, small_app};

const GOOD: &str = "example.com/web:v1";
const BAD: &str = "example.com/web:v2";

/// A ConfigMap of app `shop` in its namespace.
fn configmap(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: \"{value}\"\n")
}

/// One target (eu on sim-1) that runs GOOD, BAD cannot be pulled; v1 deployed with
/// ConfigMaps `legacy` and `old` beside the app.
async fn deployed_v1(extra_config: &str) -> TestEnv {
    let rules = format!(
        "- {{image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(1, &rules).await;
    env.write(
        "rollguard.yaml",
        &format!("{}{extra_config}", config(1, "30s")),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    env.write("k8s/legacy.yaml", &configmap("legacy", "1"));
    env.write("k8s/old.yaml", &configmap("old", "1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(
        run.target("eu").get("dropped").is_none(),
        "{}",
        run.output()
    );
    env
}

/// The names of the ConfigMaps in namespace shop on sim-1.
async fn configmaps(env: &TestEnv) -> Vec<String> {
    let client = env.client(1).await;
    list(&client, "v1", "ConfigMap", "configmaps", "shop")
        .await
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

fn deletes(env: &TestEnv) -> u64 {
    env.cluster(1).counters().get("delete", "configmaps")
}

fn dropped(run: &crate::harness::Run) -> Vec<(String, String)> {
    run.target("eu")["dropped"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|o| {
                    (
                        o["object"].as_str().unwrap_or("").to_string(),
                        o["fate"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn remove(env: &TestEnv, rel: &str) {
    std::fs::remove_file(env.path(rel)).expect("manifest removed");
}

/// The plan of `diff -o json` (plus `extra`) on target eu.
async fn diff_json(env: &TestEnv, extra: &[&str]) -> Value {
    let mut args = vec!["-o", "json"];
    args.extend_from_slice(extra);
    let run = env.command("diff", &args).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let plan: Value = serde_json::from_str(&run.stdout).expect("diff -o json is JSON");
    plan["targets"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_configmap_is_listed_as_left_in_place_by_diff_and_deploy() {
    let env = deployed_v1("").await;
    remove(&env, "k8s/legacy.yaml");
    let planned = diff_json(&env, &[]).await;
    assert_eq!(
        planned["dropped"],
        json!(["ConfigMap shop/legacy"]),
        "{planned:#}"
    );
    assert!(planned.get("prune").is_none(), "{planned:#}");
    let text = env.command("diff", &[]).await;
    assert!(
        text.stdout.contains(
            "  - ConfigMap shop/legacy: no longer in the manifests; left in place (`prune: true` or `--prune`"
        ),
        "{}",
        text.output()
    );

    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(
        dropped(&run),
        vec![(
            "ConfigMap shop/legacy".to_string(),
            "left-in-place".to_string()
        )],
        "{}",
        run.output()
    );
    assert!(
        run.output().contains(
            "left in place: ConfigMap shop/legacy, dropped from the manifests in this revision"
        ),
        "{}",
        run.output()
    );
    assert!(configmaps(&env).await.contains(&"legacy".to_string()));
    assert_eq!(deletes(&env), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_prune_a_dropped_configmap_is_deleted_after_a_healthy_deploy() {
    let env = deployed_v1("").await;
    remove(&env, "k8s/legacy.yaml");
    let planned = diff_json(&env, &["--prune"]).await;
    assert_eq!(
        planned["prune"],
        json!(["ConfigMap shop/legacy"]),
        "{planned:#}"
    );
    assert_eq!(planned["dropped"], json!([]), "{planned:#}");
    assert_eq!(deletes(&env), 0, "a diff deletes nothing");
    let dry = env.deploy(&["--dry-run", "--prune"]).await;
    assert_eq!(dry.code, 0, "{}", dry.output());
    let dry_plan = &dry.report.as_ref().expect("a dry run's report")["plan"]["targets"][0];
    assert_eq!(
        dry_plan["prune"],
        json!(["ConfigMap shop/legacy"]),
        "{}",
        dry.output()
    );
    assert!(
        dry.stdout.contains(
            "  x ConfigMap shop/legacy: no longer in the manifests; pruned after a healthy deploy"
        ),
        "{}",
        dry.output()
    );
    assert_eq!(deletes(&env), 0, "a dry run deletes nothing");

    let run = env.deploy(&["--prune"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed");
    assert_eq!(
        dropped(&run),
        vec![("ConfigMap shop/legacy".to_string(), "pruned".to_string())],
        "{}",
        run.output()
    );
    let names = configmaps(&env).await;
    assert!(!names.contains(&"legacy".to_string()), "{names:?}");
    assert!(names.contains(&"old".to_string()), "{names:?}");
    assert_eq!(deletes(&env), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_prune_nothing_is_deleted_when_the_deploy_rolls_back() {
    let env = deployed_v1("").await;
    remove(&env, "k8s/legacy.yaml");
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&["--prune"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    assert_eq!(dropped(&run), vec![], "{}", run.output());
    assert!(configmaps(&env).await.contains(&"legacy".to_string()));
    assert_eq!(deletes(&env), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_keeps_an_object_another_field_manager_took_over() {
    // `prune: true` in the config this time.
    let env = deployed_v1("prune: true\n").await;
    // Another tool takes every field of `legacy` over (as `kubectl apply --server-side
    // --force-conflicts` does); `old` stays rollguard's.
    let client = env.client(1).await;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "shop");
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "legacy", "namespace": "shop"},
        "data": {"a": "2"}
    });
    api.patch(
        "legacy",
        &kube::api::PatchParams::apply("other-tool").force(),
        &kube::api::Patch::Apply(&body),
    )
    .await
    .expect("the other tool applies");
    remove(&env, "k8s/legacy.yaml");
    remove(&env, "k8s/old.yaml");

    let planned = diff_json(&env, &[]).await;
    assert_eq!(
        planned["prune"],
        json!(["ConfigMap shop/old"]),
        "{planned:#}"
    );
    assert_eq!(
        planned["dropped"],
        json!(["ConfigMap shop/legacy"]),
        "{planned:#}"
    );

    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(
        dropped(&run),
        vec![
            ("ConfigMap shop/legacy".to_string(), "kept".to_string()),
            ("ConfigMap shop/old".to_string(), "pruned".to_string()),
        ],
        "{}",
        run.output()
    );
    let note = run.target("eu")["dropped"][0]["note"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(note.contains("\"other-tool\""), "{note}");
    let names = configmaps(&env).await;
    assert!(names.contains(&"legacy".to_string()), "{names:?}");
    assert!(!names.contains(&"old".to_string()), "{names:?}");
    assert_eq!(deletes(&env), 1);
}

/// The saved plan (`diff --out`) lists what the manifests dropped on each target: left in
/// place without prune, as to prune with `--prune`; nothing is deleted by either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_saved_plan_lists_what_would_be_pruned() {
    let env = deployed_v1("").await;
    remove(&env, "k8s/legacy.yaml");
    let path = env.path("plan.json").display().to_string();
    let saved = |env: &TestEnv| -> Value {
        serde_json::from_str(&env.read("plan.json")).expect("the plan file is JSON")
    };

    let run = env.command("diff", &["--out", &path]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let target = saved(&env)["targets"][0].clone();
    assert_eq!(target["name"], "eu", "{target:#}");
    assert_eq!(
        target["dropped"],
        json!(["ConfigMap shop/legacy"]),
        "{target:#}"
    );
    assert!(target.get("prune").is_none(), "{target:#}");

    let run = env.command("diff", &["--prune", "--out", &path]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let target = saved(&env)["targets"][0].clone();
    assert_eq!(
        target["prune"],
        json!(["ConfigMap shop/legacy"]),
        "{target:#}"
    );
    assert!(target.get("dropped").is_none(), "{target:#}");
    assert_eq!(deletes(&env), 0, "a plan deletes nothing");
    assert!(configmaps(&env).await.contains(&"legacy".to_string()));

    // The plan said "pruned": a deploy of it without --prune would leave the object in
    // place, so it is refused before any write; with --prune it goes on and prunes.
    let before = env.writes(1);
    let run = env.command("deploy", &["--plan", &path]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("made with prune on") && run.stderr.contains("--prune"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), before, "a refused plan writes nothing");
    let run = env.command("deploy", &["--plan", &path, "--prune"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(deletes(&env), 1, "{}", run.output());
    assert!(!configmaps(&env).await.contains(&"legacy".to_string()));
}
