//! Saved plans (issue 26.1-5): `diff --out plan.json` keeps what the clusters said, and
//! `deploy --plan plan.json` applies exactly that, or nothing: refused before the first
//! write when a live object or a manifest moved, when the plan is another app's or too old.

use serde_json::{Value, json};

use crate::harness::{Run, TestEnv, config, small_app};

/// `rollguard diff --out plan.json`: the run and the plan's digest it printed.
async fn diff_out(env: &TestEnv) -> (Run, String) {
    let plan = env.path("plan.json").display().to_string();
    let run = env.command("diff", &["--out", &plan]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let digest = run
        .stderr
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_hexdigit())
                .to_string()
        })
        .unwrap_or_else(|| panic!("no digest printed:\n{}", run.output()));
    assert!(
        run.stdout.contains(&format!("saved as plan {digest}")),
        "{}",
        run.output()
    );
    (run, digest)
}

fn plan_file(env: &TestEnv) -> Value {
    serde_json::from_str(&env.read("plan.json")).expect("the plan file is JSON")
}

/// Object `name` of the plan's target `i`.
fn object_of<'a>(saved: &'a Value, i: usize, name: &str) -> &'a Value {
    saved["targets"][i]["objects"]
        .as_array()
        .and_then(|os| os.iter().find(|o| o["object"] == name))
        .unwrap_or_else(|| panic!("no {name} in {saved:#}"))
}

fn writes(env: &TestEnv, clusters: usize) -> Vec<u64> {
    (1..=clusters)
        .map(|n| env.writes_besides_locks(n))
        .collect()
}

/// Whether every field of `want` is in `got` with the same value (the plan holds the body
/// as applied; the stored object adds the server's fields).
fn holds(got: &Value, want: &Value, path: &str) -> Result<(), String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w.iter().try_for_each(|(k, v)| {
            let path = format!("{path}.{k}");
            holds(g.get(k).unwrap_or(&Value::Null), v, &path)
        }),
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .try_for_each(|(i, (g, w))| holds(g, w, &format!("{path}[{i}]"))),
        _ if got == want => Ok(()),
        _ => Err(format!("{path}: stored {got}, the plan has {want}")),
    }
}

/// A live object of cluster `sim-N` as kube-sim stores it.
async fn stored(env: &TestEnv, cluster: usize, object: &Value) -> Value {
    let client = env.client(cluster).await;
    let api_version = object["api_version"].as_str().expect("api_version");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: kube::Api<kube::api::DynamicObject> = match object["namespace"].as_str() {
        Some(ns) => kube::Api::namespaced_with(client, ns, &resource),
        None => kube::Api::all_with(client, &resource),
    };
    let name = object["name"].as_str().expect("name");
    serde_json::to_value(api.get(name).await.expect("the object is stored")).expect("json")
}

async fn v1_deployed_then_v2(clusters: usize, extra: &str) -> TestEnv {
    let env = TestEnv::start(clusters, "").await;
    env.write("rollguard.yaml", &config(clusters, "60s"));
    env.write(
        "k8s/app.yaml",
        &format!("{extra}{}", small_app("example.com/web:v1")),
    );
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write(
        "k8s/app.yaml",
        &format!("{extra}{}", small_app("example.com/web:v2")),
    );
    env
}

/// Another field manager's edit of Deployment shop/web on cluster `sim-N`: a field rollguard
/// does not own, so that a re-plan can still apply.
async fn edit_by_hand(env: &TestEnv, cluster: usize) {
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"edited": "by hand"}}
    });
    env.apply_as(cluster, "kubectl-edit", &body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_nothing_moved_since_is_applied_byte_for_byte() {
    let env = v1_deployed_then_v2(2, "").await;
    let (_, digest) = diff_out(&env).await;
    let saved = plan_file(&env);
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["app"], "shop");
    let web = object_of(&saved, 0, "Deployment shop/web");
    assert_eq!(web["object"], "Deployment shop/web", "{saved:#}");
    assert_eq!(web["action"], "update");
    assert!(web["live"]["resource_version"].is_string(), "{saved:#}");
    // v1 is recorded everywhere: the deploy of this plan records v2.
    assert_eq!(saved["revision"], 2, "{saved:#}");
    assert_eq!(saved["targets"][0]["history_head"], 1, "{saved:#}");

    let run = env
        .deploy(&["--plan", env.path("plan.json").to_str().unwrap()])
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let report = run.report.as_ref().expect("a report");
    assert_eq!(
        report["saved_plan"]["digest"],
        digest.as_str(),
        "{report:#}"
    );
    assert_eq!(report["saved_plan"]["replanned"], false);
    assert!(
        run.stdout
            .contains(&format!("applied plan {digest} made at ")),
        "{}",
        run.output()
    );
    for (i, target) in saved["targets"].as_array().unwrap().iter().enumerate() {
        assert_eq!(run.outcome(target["name"].as_str().unwrap()), "deployed");
        for object in target["objects"].as_array().unwrap() {
            let live = stored(&env, i + 1, object).await;
            holds(&live, &object["body"], "$").unwrap_or_else(|e| panic!("{object}: {e}"));
        }
    }

    // The same plan again: nothing it would apply moved, but its v2 is recorded now, so
    // the plan no longer says what a deploy would record: refused, nothing written.
    let before = writes(&env, 2);
    let again = env
        .deploy(&["--plan", env.path("plan.json").to_str().unwrap()])
        .await;
    assert_eq!(again.code, 2, "{}", again.output());
    assert_eq!(writes(&env, 2), before, "{}", again.output());
    assert!(
        again.output().contains(
            "moved since the plan: its newest revision was v1, now v2 (another deploy or rollback ran)"
        ),
        "{}",
        again.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_another_manager_moved_refuses_the_plan_with_no_write_then_replan_applies() {
    let env = v1_deployed_then_v2(3, "").await;
    diff_out(&env).await;
    edit_by_hand(&env, 2).await;
    let before = writes(&env, 3);
    let plan = env.path("plan.json").display().to_string();
    let run = env.deploy(&["--plan", &plan]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert_eq!(
        writes(&env, 3),
        before,
        "no write anywhere: {}",
        run.output()
    );
    let message = run.target("us")["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Deployment shop/web changed since the plan: resourceVersion ")
            && message.contains(", by manager kubectl-edit"),
        "{}",
        run.output()
    );
    assert_eq!(
        run.target("us")["failures"][0]["object"],
        "Deployment shop/web"
    );
    for other in ["eu", "ap"] {
        assert_eq!(run.outcome(other), "skipped", "{}", run.output());
    }
    let mismatches = &run.report.as_ref().unwrap()["saved_plan"]["mismatches"];
    assert_eq!(mismatches.as_array().map(Vec::len), Some(1), "{mismatches}");

    // --replan without a terminal and without --yes: still nothing written.
    let unconfirmed = env.deploy(&["--plan", &plan, "--replan"]).await;
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.output());
    assert_eq!(writes(&env, 3), before, "{}", unconfirmed.output());

    let replanned = env.deploy(&["--plan", &plan, "--replan", "--yes"]).await;
    assert_eq!(replanned.code, 0, "{}", replanned.output());
    assert!(
        replanned.stderr.contains("the new plan:"),
        "{}",
        replanned.output()
    );
    let report = replanned.report.as_ref().unwrap();
    assert_eq!(report["saved_plan"]["replanned"], true, "{report:#}");
    assert!(
        replanned.stdout.contains("re-planned"),
        "{}",
        replanned.output()
    );
    for target in ["eu", "us", "ap"] {
        assert_eq!(replanned.outcome(target), "deployed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_edited_since_the_plan_is_refused_naming_its_file() {
    let env = v1_deployed_then_v2(1, "").await;
    // `deploy --dry-run --out` saves the same plan as `diff --out`; without --dry-run,
    // --out is refused.
    let out = env.path("plan.json").display().to_string();
    let dry = env.deploy(&["--dry-run", "--out", &out]).await;
    assert_eq!(dry.code, 0, "{}", dry.output());
    assert!(
        dry.stdout.contains("saved as plan sha256:"),
        "{}",
        dry.output()
    );
    assert_eq!(plan_file(&env)["version"], 1);
    let refused = env.deploy(&["--out", &out]).await;
    assert_eq!(refused.code, 2, "{}", refused.output());
    assert!(
        refused.stderr.contains("add --dry-run"),
        "{}",
        refused.output()
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let before = writes(&env, 1);
    let run = env
        .deploy(&["--plan", env.path("plan.json").to_str().unwrap()])
        .await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("Deployment web (")
            && run.stderr.contains("app.yaml:")
            && run.stderr.contains("changed since the plan"),
        "{}",
        run.output()
    );
    assert_eq!(writes(&env, 1), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_keeps_a_secret_by_digest_and_the_deploy_applies_its_value() {
    let value = "pl4n-s3cret-v4lue-77";
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {value}\n---\n"
    );
    let env = v1_deployed_then_v2(1, &secret).await;
    diff_out(&env).await;
    let bytes = std::fs::read(env.path("plan.json")).expect("the plan file");
    let encoded = base64_of(value.as_bytes());
    for needle in [value, encoded.as_str()] {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "the plan file holds {needle}"
        );
    }
    let saved = plan_file(&env);
    let db = object_of(&saved, 0, "Secret shop/db");
    assert_eq!(db["object"], "Secret shop/db", "{saved:#}");
    assert!(db.get("body").is_none() && db["sha256"].is_string(), "{db}");

    let run = env
        .deploy(&["--plan", env.path("plan.json").to_str().unwrap()])
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let live = stored(&env, 1, db).await;
    assert_eq!(live["data"]["password"], encoded.as_str(), "{live}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_of_another_app_an_old_one_or_another_version_is_refused() {
    let env = v1_deployed_then_v2(1, "").await;
    diff_out(&env).await;
    let saved = plan_file(&env);
    let before = writes(&env, 1);
    let edited = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut plan = saved.clone();
        edit(&mut plan);
        env.write(name, &plan.to_string());
        env.path(name).display().to_string()
    };
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (
            edited("app.json", &|p| p["app"] = json!("cart")),
            vec![],
            "the plan is for app cart, this config deploys app shop",
        ),
        (
            edited("old.json", &|p| {
                p["made_at"] = json!("2020-01-01T00:00:00Z")
            }),
            vec![],
            "more than --plan-max-age 24h",
        ),
        (
            edited("v2.json", &|p| p["version"] = json!(2)),
            vec![],
            "has version 2; this rollguard reads version 1 only",
        ),
        (
            edited("mars.json", &|p| p["targets"][0]["name"] = json!("mars")),
            vec![],
            "the plan has no part for target eu: it was made for mars",
        ),
    ];
    for (path, extra, want) in cases {
        let mut args = vec!["--plan", path.as_str()];
        args.extend(extra);
        let run = env.deploy(&args).await;
        assert_eq!(run.code, 2, "{want}: {}", run.output());
        assert!(run.stderr.contains(want), "{want}: {}", run.output());
    }
    // Made a while ago, and --plan-max-age says how long a plan stays good.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let plan = env.path("plan.json").display().to_string();
    let old = env.deploy(&["--plan", &plan, "--plan-max-age", "1s"]).await;
    assert_eq!(old.code, 2, "{}", old.output());
    assert!(
        old.stderr.contains("more than --plan-max-age 1s"),
        "{}",
        old.output()
    );
    assert_eq!(writes(&env, 1), before);
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
