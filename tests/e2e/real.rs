//! The suite against real clusters (kind on GitHub's runners, or any clusters you can
//! throw away a namespace in). Set `ROLLGUARD_E2E_KUBECONFIG` to a kubeconfig with two or
//! more contexts and, optionally, `ROLLGUARD_E2E_CONTEXTS` (comma-separated; default: every
//! context in the file). Without it every test here returns at once, so `cargo test` stays
//! local and quick. Run only these with `cargo test --test e2e real::`.
//!
//! Each test works in its own namespace and app (random suffix) and deletes the namespace at
//! the end, pass or fail. Images are real and public so that they start on any cluster
//! (`registry.k8s.io/pause`), or a tag of it that cannot exist, which no cluster can pull.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use kube::config::Kubeconfig;
use rollguard::release::{ReleaseKind, ReleaseStatus, ReleaseStore};
use serde_json::Value;
use tempfile::TempDir;

use crate::harness::{Run, client_for, deployment_available, list, rollguard, small_app};

const KUBECONFIG_VAR: &str = "ROLLGUARD_E2E_KUBECONFIG";
const CONTEXTS_VAR: &str = "ROLLGUARD_E2E_CONTEXTS";
/// Starts on every node: kind and most distributions already hold it as the sandbox image.
const GOOD_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Below the harness's 120 s limit on one run, so a hang shows up as rollguard's own timeout.
const WAIT_TIMEOUT: &str = "90s";

/// A scratch folder with config and manifests, aimed at the real contexts.
struct RealEnv {
    dir: TempDir,
    kubeconfig: PathBuf,
    contexts: Vec<String>,
    app: String,
    namespace: String,
}

impl RealEnv {
    /// None (and a note on stderr) when no real clusters are configured.
    fn from_env(test: &str) -> Option<RealEnv> {
        let Some(kubeconfig) = std::env::var_os(KUBECONFIG_VAR) else {
            kube_sim::skip_test(
                &format!("real::{test}"),
                &format!("{KUBECONFIG_VAR} not set"),
            );
            return None;
        };
        let kubeconfig = PathBuf::from(kubeconfig);
        let contexts = match std::env::var(CONTEXTS_VAR) {
            Ok(list) if !list.trim().is_empty() => list
                .split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect(),
            _ => Kubeconfig::read_from(&kubeconfig)
                .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()))
                .contexts
                .into_iter()
                .map(|c| c.name)
                .collect::<Vec<_>>(),
        };
        assert!(
            contexts.len() >= 2,
            "{KUBECONFIG_VAR} must give two or more contexts (set {CONTEXTS_VAR} to pick them); got {contexts:?}"
        );
        let suffix = format!("{:08x}", rand::random::<u32>());
        let name = format!("rg-e2e-{test}-{suffix}");
        Some(RealEnv {
            dir: tempfile::tempdir().expect("tempdir"),
            kubeconfig,
            contexts,
            app: name.clone(),
            namespace: name,
        })
    }

    /// Target names: the context names made into DNS labels (`kind-a`, `sim-1`).
    fn targets(&self) -> Vec<(String, String)> {
        self.contexts
            .iter()
            .enumerate()
            .map(|(i, context)| {
                let label: String = context
                    .to_ascii_lowercase()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                let label = label.trim_matches('-');
                let label = if label.is_empty() || label.len() > 40 {
                    format!("target-{}", i + 1)
                } else {
                    label.to_string()
                };
                (label, context.clone())
            })
            .collect()
    }

    fn write_config(&self) {
        self.write_config_with("", &|_| String::new());
    }

    /// The config with `top` added at the top level and `per_target(i)` lines added to the
    /// i-th target's entry (indented as its keys).
    fn write_config_with(&self, top: &str, per_target: &dyn Fn(usize) -> String) {
        let mut text = format!(
            "app: {}\nnamespace: {}\nmanifests: [k8s/]\nwait:\n  timeout: {WAIT_TIMEOUT}\n{top}targets:\n",
            self.app, self.namespace
        );
        for (i, (name, context)) in self.targets().into_iter().enumerate() {
            text.push_str(&format!("  - name: {name}\n    context: \"{context}\"\n"));
            text.push_str(&per_target(i));
        }
        self.write("rollguard.yaml", &text);
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// `rollguard <command> --config … --kubeconfig …` plus `extra`.
    async fn run(&self, command: &str, extra: &[&str]) -> Run {
        let mut args: Vec<String> = vec![
            command.into(),
            "--config".into(),
            self.dir.path().join("rollguard.yaml").display().to_string(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        rollguard(&args, self.dir.path(), &[]).await
    }

    /// `rollguard deploy` with a JSON report, read back into `Run::report`.
    async fn deploy(&self) -> Run {
        self.deploy_to("report.json").await
    }

    /// [`RealEnv::deploy`] with the report in `report` (runs at the same time).
    async fn deploy_to(&self, report: &str) -> Run {
        let report = self.dir.path().join(report);
        let _ = std::fs::remove_file(&report);
        let mut run = self
            .run("deploy", &["--report", &report.display().to_string()])
            .await;
        run.report = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        run
    }

    async fn client(&self, context: &str) -> kube::Client {
        client_for(&self.kubeconfig, context).await
    }

    /// The Deployment `web` of the small app on `context`.
    async fn web(&self, context: &str) -> Option<Value> {
        list(
            &self.client(context).await,
            "apps/v1",
            "Deployment",
            "deployments",
            &self.namespace,
        )
        .await
        .into_iter()
        .find(|d| d["metadata"]["name"] == "web")
    }

    /// Deletes the test's namespace everywhere; a namespace that never appeared is fine.
    async fn delete_namespace(&self) {
        for context in &self.contexts {
            let api: Api<Namespace> = Api::all(self.client(context).await);
            match api
                .delete(&self.namespace, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => eprintln!("{context}: deleting namespace {}: {e}", self.namespace),
            }
        }
    }
}

/// Runs `body`, then deletes the namespace whatever happened, then passes a panic on.
async fn run_then_clean<F, Fut>(env: RealEnv, body: F)
where
    F: FnOnce(Arc<RealEnv>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let env = Arc::new(env);
    let outcome = tokio::spawn(body(env.clone())).await;
    env.delete_namespace().await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("test task ended: {e}"),
        }
    }
}

fn image(d: &Value) -> &str {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

/// Deploys the small app with `GOOD_IMAGE`; every target must end `deployed`.
async fn deploy_good(env: &RealEnv) {
    env.write("k8s/app.yaml", &small_app(GOOD_IMAGE));
    let run = env.deploy().await;
    assert_eq!(run.code, 0, "{}", run.output());
    for (target, context) in env.targets() {
        assert_eq!(run.outcome(&target), "deployed", "{}", run.output());
        let web = env
            .web(&context)
            .await
            .unwrap_or_else(|| panic!("{context}: no Deployment web"));
        assert_eq!(image(&web), GOOD_IMAGE, "{context}");
        assert!(
            deployment_available(&web),
            "{context}: web not available: {:#}",
            web["status"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_app_deploys_to_every_context() {
    let Some(env) = RealEnv::from_env("deploy") else {
        return;
    };
    env.write_config();
    run_then_clean(env, |env| async move {
        deploy_good(&env).await;
        let run = env.run("history", &[]).await;
        assert_eq!(run.code, 0, "{}", run.output());
        assert_eq!(
            run.stdout.matches("deployed").count(),
            env.contexts.len(),
            "one deployed revision per target:\n{}",
            run.output()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_fails_fast_and_rolls_back_everywhere() {
    let Some(env) = RealEnv::from_env("pull") else {
        return;
    };
    env.write_config();
    run_then_clean(env, |env| async move {
        deploy_good(&env).await;
        let bad = format!(
            "registry.k8s.io/pause:doesnotexist-{:08x}",
            rand::random::<u32>()
        );
        env.write("k8s/app.yaml", &small_app(&bad));
        let run = env.deploy().await;
        assert_eq!(run.code, 1, "{}", run.output());
        let targets = env.targets();
        let mut named = 0;
        for (target, context) in &targets {
            assert_eq!(run.outcome(target), "rolled-back", "{}", run.output());
            let entry = run.target(target);
            assert_eq!(entry["rollback"]["to_revision"], 1, "{}", run.output());
            // Every target fails on the pull, unless rollback-all stopped it first because
            // another did (the policy acts at the first failure).
            let failure = &entry["failures"][0];
            if failure.is_null() {
                let message = entry["message"].as_str().unwrap_or_default();
                assert!(
                    message.starts_with("stopped: policy rollback-all:"),
                    "{target}: {}",
                    run.output()
                );
            } else {
                named += 1;
                let reason = failure["reason"].as_str().unwrap_or_default();
                assert!(
                    ["ErrImagePull", "ImagePullBackOff"].contains(&reason),
                    "{target}: failed for {reason:?}, not a pull error: {failure:#}"
                );
                assert_eq!(
                    failure["object"],
                    format!("Deployment {}/web", env.namespace)
                );
                assert!(
                    failure["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(&bad)),
                    "{target}: the message names the image: {failure:#}"
                );
            }

            // The cluster runs the good release again, and its records say how it got there.
            let web = env.web(context).await.expect("Deployment web");
            assert_eq!(image(&web), GOOD_IMAGE, "{context}: not rolled back");
            assert!(
                deployment_available(&web),
                "{context}: web not available after the rollback: {:#}",
                web["status"]
            );
            let records =
                ReleaseStore::new(env.client(context).await, &env.app, &env.namespace, 10)
                    .list()
                    .await
                    .expect("release records readable");
            let statuses: Vec<_> = records.iter().map(|r| (r.revision, r.status)).collect();
            assert_eq!(
                statuses,
                vec![
                    (1, ReleaseStatus::Superseded),
                    (2, ReleaseStatus::Failed),
                    (3, ReleaseStatus::Deployed)
                ],
                "{context}"
            );
            assert_eq!(records[2].kind, ReleaseKind::Rollback, "{context}");
            assert_eq!(records[2].rollback_of, Some(1), "{context}");
        }
        // Fail fast: the verdict came from the pods (a pull reason above, or a stop because
        // another target's pods failed), not from the wait timeout running out; no
        // wall-clock bound.
        assert!(
            named >= 1,
            "no target named the pull error:
{}",
            run.output()
        );
        let summary = run.report.as_ref().expect("report")["summary"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let n = targets.len();
        assert!(
            summary.contains(&format!("rolled back {n} of {n}")),
            "{summary}"
        );

        let history = env.run("history", &[]).await;
        assert_eq!(history.code, 0, "{}", history.output());
        assert_eq!(
            history.stdout.matches("rollback to v1").count(),
            n,
            "every target's history shows the rollback:\n{}",
            history.output()
        );
        // The table's NOTE is clipped to its column; the JSON has every record's reason whole.
        let json = env.run("history", &["-o", "json"]).await;
        assert_eq!(json.code, 0, "{}", json.output());
        let histories: serde_json::Value =
            serde_json::from_str(&json.stdout).expect("history -o json is one JSON document");
        let failed_with_reason = histories
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, records)| {
                // The pull error itself, or (a target that rollback-all stopped before its own
                // pull failed) the policy naming the target that failed first.
                records.as_array().into_iter().flatten().any(|r| {
                    r["status"] == "failed"
                        && r["reason"].as_str().is_some_and(|why| {
                            why.contains(&bad) || why.starts_with("stopped: policy rollback-all: ")
                        })
                })
            })
            .count();
        assert_eq!(
            failed_with_reason,
            n,
            "every target's history shows the failed revision and why:\n{}",
            json.output()
        );
        assert!(
            json.stdout.contains(&bad),
            "at least one history names the pull error:\n{}",
            json.output()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifest_writes_nothing() {
    let Some(env) = RealEnv::from_env("invalid") else {
        return;
    };
    env.write_config();
    env.write("k8s/a-good.yaml", &small_app(GOOD_IMAGE));
    // No metadata.name: refused before any cluster is touched.
    env.write(
        "k8s/b-bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n",
    );
    run_then_clean(env, |env| async move {
        let run = env.deploy().await;
        assert_eq!(run.code, 2, "{}", run.output());
        assert!(
            run.stderr.contains("b-bad.yaml"),
            "the message names the file: {}",
            run.output()
        );
        for context in &env.contexts {
            let client = env.client(context).await;
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let found = namespaces
                .get_opt(&env.namespace)
                .await
                .expect("namespace lookup");
            assert!(
                found.is_none(),
                "{context}: namespace {} was created",
                env.namespace
            );
            for (api_version, kind, plural) in [
                ("v1", "ConfigMap", "configmaps"),
                ("apps/v1", "Deployment", "deployments"),
            ] {
                let objects = list(&client, api_version, kind, plural, &env.namespace).await;
                assert!(objects.is_empty(), "{context}: {kind} written: {objects:?}");
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misspelt_field_is_refused_in_the_preflight_on_every_target_with_nothing_written() {
    let Some(env) = RealEnv::from_env("field") else {
        return;
    };
    env.write_config();
    let misspelt = small_app(GOOD_IMAGE).replace(
        &format!("image: {GOOD_IMAGE}\n"),
        &format!("image: {GOOD_IMAGE}\n          imagePullPolice: Always\n"),
    );
    assert_ne!(
        misspelt,
        small_app(GOOD_IMAGE),
        "small_app changed: fix this test"
    );
    env.write("k8s/app.yaml", &misspelt);
    run_then_clean(env, |env| async move {
        let run = env.deploy().await;
        // The preflight dry run asks every target before the first write: each refuses the
        // field, the deploy stops with exit 2 and no object of the set is written anywhere.
        assert_eq!(run.code, 2, "{}", run.output());
        for (target, context) in env.targets() {
            let failure = &run.target(&target)["failures"][0];
            assert_eq!(failure["reason"], "FieldNotDeclared", "{}", run.output());
            assert!(
                failure["message"].as_str().is_some_and(
                    |m| m.contains("imagePullPolice is not a field of apps/v1 Deployment")
                ),
                "{}",
                run.output()
            );
            assert!(
                run.target(&target)["rollback"].is_null(),
                "{}",
                run.output()
            );
            let client = env.client(&context).await;
            for (api_version, kind, plural) in [
                ("v1", "ConfigMap", "configmaps"),
                ("apps/v1", "Deployment", "deployments"),
            ] {
                let objects = list(&client, api_version, kind, plural, &env.namespace).await;
                assert!(objects.is_empty(), "{target}: {kind} written: {objects:?}");
            }
        }
    })
    .await;
}

/// The small app with `GOOD_IMAGE` whose pod template says `version` (a new version that
/// starts anywhere), and a 10 s progress deadline: a rollout that cannot create its pods
/// fails on the Deployment's own condition, not on rollguard's timeout.
fn versioned_app(version: &str) -> String {
    let app = small_app(GOOD_IMAGE);
    let versioned = app
        .replace(
            "  replicas: 2\n",
            "  replicas: 2\n  progressDeadlineSeconds: 10\n",
        )
        .replace(
            "      labels:\n        app: web\n    spec:",
            &format!(
                "      labels:\n        app: web\n      annotations:\n        rollguard-e2e/version: {version}\n    spec:"
            ),
        );
    assert_eq!(
        versioned
            .matches(&format!("rollguard-e2e/version: {version}"))
            .count()
            + versioned.matches("progressDeadlineSeconds").count(),
        2,
        "small_app changed: fix versioned_app"
    );
    versioned
}

/// The version `versioned_app` put in `web`'s pod template ("" for none).
fn version(d: &Value) -> &str {
    d["spec"]["template"]["metadata"]["annotations"]["rollguard-e2e/version"]
        .as_str()
        .unwrap_or_default()
}

/// A missing image under `GOOD_IMAGE`'s repository: no cluster can pull it.
fn missing_image() -> String {
    format!(
        "registry.k8s.io/pause:doesnotexist-{:08x}",
        rand::random::<u32>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_wave_stops_the_later_waves() {
    let Some(env) = RealEnv::from_env("waves") else {
        return;
    };
    // The first context is the canary (wave 0); every other one is wave 1.
    env.write_config_with("", &|i| {
        if i == 0 {
            String::new()
        } else {
            "    wave: 1\n".to_string()
        }
    });
    run_then_clean(env, |env| async move {
        deploy_good(&env).await;
        env.write("k8s/app.yaml", &small_app(&missing_image()));
        let run = env.deploy().await;
        assert_eq!(run.code, 1, "{}", run.output());
        let targets = env.targets();
        let (canary, canary_context) = &targets[0];
        assert_eq!(run.outcome(canary), "rolled-back", "{}", run.output());
        let web = env.web(canary_context).await.expect("Deployment web");
        assert_eq!(image(&web), GOOD_IMAGE, "{canary}: not rolled back");
        for (target, context) in &targets[1..] {
            assert_eq!(run.outcome(target), "skipped", "{}", run.output());
            let web = env.web(context).await.expect("Deployment web");
            assert_eq!(
                image(&web),
                GOOD_IMAGE,
                "{target}: the later wave was written"
            );
            assert!(deployment_available(&web), "{target}: {:#}", web["status"]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_failed_rolls_back_only_the_bad_cluster() {
    let Some(env) = RealEnv::from_env("rbfailed") else {
        return;
    };
    let marks = env.dir.path().join("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    let marks = marks.display().to_string();
    // The first cluster goes bad with v2: its post-apply check (`smoke`) fails there once the
    // mark exists, on kind and kube-sim alike; the others pass it.
    let targets = env.targets();
    let (bad, bad_context) = targets[0].clone();
    let pipeline = format!(
        "on_failure: rollback-failed\n\
         pipeline:\n\
         \x20 - apply\n\
         \x20 - script:\n\
         \x20     name: smoke\n\
         \x20     run: test \"$ROLLGUARD_TARGET\" != {bad} || test ! -e {marks}/fail\n"
    );
    env.write_config_with(&pipeline, &|_| String::new());
    run_then_clean(env, move |env| async move {
        env.write("k8s/app.yaml", &versioned_app("v1"));
        let first = env.deploy().await;
        assert_eq!(first.code, 0, "{}", first.output());
        std::fs::write(format!("{marks}/fail"), "").expect("write");
        env.write("k8s/app.yaml", &versioned_app("v2"));
        let run = env.deploy().await;
        assert_eq!(run.code, 1, "{}", run.output());
        assert_eq!(run.outcome(&bad), "rolled-back", "{}", run.output());
        let web = env.web(&bad_context).await.expect("Deployment web");
        assert_eq!(version(&web), "v1", "{bad}: not rolled back");
        for (target, context) in &targets[1..] {
            assert_eq!(run.outcome(target), "deployed", "{}", run.output());
            let web = env.web(context).await.expect("Deployment web");
            assert_eq!(
                version(&web),
                "v2",
                "{target}: rolled back with the bad one"
            );
            assert!(deployment_available(&web), "{target}: {:#}", web["status"]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_script_stage_rolls_back_and_runs_the_rollback_commands() {
    let Some(env) = RealEnv::from_env("stages") else {
        return;
    };
    let marks = env.dir.path().join("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    let marks = marks.display().to_string();
    // `note` runs before the apply and leaves a mark; its rollback command leaves another;
    // `smoke` fails after the apply of v2 only.
    let pipeline = format!(
        "pipeline:\n\
         \x20 - script:\n\
         \x20     name: note\n\
         \x20     run: echo \"$ROLLGUARD_REVISION\" >> {marks}/run-$ROLLGUARD_TARGET\n\
         \x20     rollback: echo \"$ROLLGUARD_ROLLBACK_REASON\" >> {marks}/undo-$ROLLGUARD_TARGET\n\
         \x20 - apply\n\
         \x20 - script:\n\
         \x20     name: smoke\n\
         \x20     run: test ! -e {marks}/fail\n"
    );
    env.write_config_with(&pipeline, &|_| String::new());
    run_then_clean(env, move |env| async move {
        env.write("k8s/app.yaml", &versioned_app("v1"));
        let first = env.deploy().await;
        assert_eq!(first.code, 0, "{}", first.output());
        std::fs::write(format!("{marks}/fail"), "").expect("write");
        env.write("k8s/app.yaml", &versioned_app("v2"));
        let run = env.deploy().await;
        assert_eq!(run.code, 1, "{}", run.output());
        let mut failed = 0;
        for (target, context) in env.targets() {
            assert_eq!(run.outcome(&target), "rolled-back", "{}", run.output());
            let web = env.web(&context).await.expect("Deployment web");
            assert_eq!(version(&web), "v1", "{target}: not rolled back");
            let ran = std::fs::read_to_string(format!("{marks}/run-{target}")).unwrap_or_default();
            assert_eq!(
                ran.lines().count(),
                2,
                "{target}: `note` ran once per deploy: {ran:?}"
            );
            let undone =
                std::fs::read_to_string(format!("{marks}/undo-{target}")).unwrap_or_default();
            // Its own smoke failed, or rollback-all stopped it first because another's did.
            let reasons: Vec<&str> = undone.lines().collect();
            assert!(
                reasons == ["failed"] || reasons == ["policy"],
                "{target}: the rollback command ran once: {reasons:?}\n{}",
                run.output()
            );
            failed += usize::from(reasons == ["failed"]);
        }
        assert!(
            failed >= 1,
            "no target failed on its smoke:\n{}",
            run.output()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_after_a_deploy_shows_no_phantom_changes() {
    let Some(env) = RealEnv::from_env("diff") else {
        return;
    };
    env.write_config();
    run_then_clean(env, |env| async move {
        deploy_good(&env).await;
        // What the server defaults and the controllers write is not a change.
        let run = env.run("diff", &["--exit-code", "-o", "json"]).await;
        assert_eq!(
            run.code,
            0,
            "changes right after the deploy:\n{}",
            run.output()
        );
        let plan: Value = serde_json::from_str(&run.stdout).expect("diff -o json is JSON");
        assert_eq!(plan["changes"], 0, "{plan:#}");
        for target in plan["targets"].as_array().expect("targets") {
            for key in ["create", "update"] {
                assert_eq!(
                    target[key].as_array().map_or(0, Vec::len),
                    0,
                    "{key}: {target:#}"
                );
            }
        }
        // A real change is one.
        env.write("k8s/app.yaml", &versioned_app("v2"));
        let run = env.run("diff", &["--exit-code"]).await;
        assert_eq!(run.code, 2, "{}", run.output());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_rollback_to_a_revision() {
    let Some(env) = RealEnv::from_env("revision") else {
        return;
    };
    env.write_config();
    run_then_clean(env, |env| async move {
        for v in ["v1", "v2", "v3"] {
            env.write("k8s/app.yaml", &versioned_app(v));
            let run = env.deploy().await;
            assert_eq!(run.code, 0, "{v}: {}", run.output());
        }
        let run = env.run("rollback", &["--revision", "1", "--yes"]).await;
        assert_eq!(run.code, 0, "{}", run.output());
        for (target, context) in env.targets() {
            let web = env.web(&context).await.expect("Deployment web");
            assert_eq!(version(&web), "v1", "{target}");
            assert!(deployment_available(&web), "{target}: {:#}", web["status"]);
        }
        let json = env.run("history", &["-o", "json"]).await;
        assert_eq!(json.code, 0, "{}", json.output());
        let histories: Value = serde_json::from_str(&json.stdout).expect("JSON");
        for (target, _) in env.targets() {
            let records = histories[&target].as_array().expect("records");
            let newest = records
                .iter()
                .max_by_key(|r| r["revision"].as_u64())
                .expect("a record");
            assert_eq!(newest["revision"], 4, "{target}: {records:#?}");
            assert_eq!(newest["status"], "deployed", "{target}");
            assert_eq!(newest["rollback_of"], 1, "{target}: {newest:#}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_contend_for_the_lock_and_one_release_is_recorded() {
    let Some(env) = RealEnv::from_env("lock") else {
        return;
    };
    env.write_config();
    env.write("k8s/app.yaml", &small_app(GOOD_IMAGE));
    run_then_clean(env, |env| async move {
        let (a, b) = tokio::join!(env.deploy_to("a.json"), env.deploy_to("b.json"));
        assert_eq!(a.code, 0, "{}", a.output());
        assert_eq!(b.code, 0, "{}", b.output());
        // One run held the lock and deployed; the other waited for it and found nothing to
        // change: one revision per target, never two interleaved applies.
        for (target, context) in env.targets() {
            let records =
                ReleaseStore::new(env.client(&context).await, &env.app, &env.namespace, 10)
                    .list()
                    .await
                    .expect("release records readable");
            let statuses: Vec<_> = records.iter().map(|r| (r.revision, r.status)).collect();
            assert_eq!(
                statuses,
                vec![(1, ReleaseStatus::Deployed)],
                "{target}:\n{}\n{}",
                a.output(),
                b.output()
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_drift_sees_a_scale_made_by_hand() {
    let Some(env) = RealEnv::from_env("drift") else {
        return;
    };
    env.write_config();
    run_then_clean(env, |env| async move {
        deploy_good(&env).await;
        let clean = env.run("status", &["--drift"]).await;
        assert_eq!(clean.code, 0, "{}", clean.output());
        // `kubectl scale deployment web --replicas 3` on the first cluster: its scale
        // subresource, as kubectl's field manager.
        let (target, context) = env.targets().remove(0);
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(env.client(&context).await, &env.namespace);
        api.patch_scale(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale");
        let run = env.run("status", &["--drift", "-o", "json"]).await;
        assert_eq!(run.code, 1, "{}", run.output());
        let status: Value = serde_json::from_str(&run.stdout).expect("status -o json is JSON");
        let rows = status["targets"].as_array().expect("targets");
        for row in rows {
            let changed: Vec<&str> = row["drift"]["changed"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["object"].as_str())
                .collect();
            if row["target"] == target.as_str() {
                assert_eq!(row["drift"]["drifted"], true, "{row:#}");
                assert_eq!(
                    changed,
                    [format!("Deployment {}/web", env.namespace)],
                    "{row:#}"
                );
            } else {
                assert_eq!(
                    row["drift"]["drifted"], false,
                    "no drift elsewhere: {row:#}"
                );
            }
        }
    })
    .await;
}
