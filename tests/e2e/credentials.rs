//! Exec credential plugins: a deadline, killed with their process group, their output
//! (the credential) never in any output, and "no credentials" said as such.

use std::os::unix::fs::PermissionsExt;

use crate::harness::{Run, TestEnv, config, small_app};

/// Turns sim-1's user into an exec plugin user running `script` (a sh script body), and
/// returns sim-1's real token.
fn use_plugin(env: &TestEnv, script: &str) -> String {
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let mut kc: serde_json::Value = serde_saphyr::from_str(&text).expect("kubeconfig yaml");
    let users = kc["users"].as_array_mut().expect("users");
    let user = users
        .iter_mut()
        .find(|u| u["name"].as_str().is_some_and(|n| n.contains('1')))
        .expect("user of sim-1");
    let token = user["user"]["token"].as_str().expect("token").to_string();
    let plugin = env.path("plugin.sh");
    std::fs::write(&plugin, format!("#!/bin/sh\n{script}\n")).expect("plugin");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    user["user"] = serde_json::json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": plugin.display().to_string(),
        "env": [{"name": "SIM_TOKEN", "value": token}],
        "interactiveMode": "Never",
    }});
    std::fs::write(&env.kubeconfig, serde_json::to_string(&kc).expect("json")).expect("write");
    token
}

fn assert_not_printed(run: &Run, secret: &str) {
    assert!(
        !run.stdout.contains(secret),
        "stdout has it:\n{}",
        run.output()
    );
    assert!(
        !run.stderr.contains(secret),
        "stderr has it:\n{}",
        run.output()
    );
    let report = run
        .report
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default();
    assert!(!report.contains(secret), "the report has it: {report}");
}

async fn deploy_with(script: &str, extra_env: &[(&str, &str)]) -> (TestEnv, Run, String) {
    let env = TestEnv::start(1, "").await;
    let token = use_plugin(&env, script);
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let report = env.path("report.json");
    let args: Vec<String> = [
        "deploy",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--kubeconfig",
        &env.kubeconfig.display().to_string(),
        "--report",
        &report.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut run = crate::harness::rollguard(&args, env.dir.path(), extra_env).await;
    run.report = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    (env, run, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_token_is_used_and_never_shown() {
    let (env, run, token) = deploy_with(
        r#"printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$SIM_TOKEN""#,
        &[("RUST_LOG", "debug")],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(env.writes(1) > 0);
    assert_not_printed(&run, &token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plugin_says_its_exit_code_and_stderr_never_its_stdout() {
    let (env, run, token) = deploy_with(
        r#"printf '{"status":{"token":"%s"' "$SIM_TOKEN"; echo "login expired for the account" >&2; exit 3"#,
        &[],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.output());
    let message = run.target("eu")["failures"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(
        message.contains("login expired for the account"),
        "{message}"
    );
    assert_not_printed(&run, &token);
    assert_eq!(env.writes(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_plugin_output_is_not_quoted() {
    let (_env, run, token) =
        deploy_with(r#"printf '{"status":{"token":"%s' "$SIM_TOKEN""#, &[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(
        run.stdout.contains("printed no ExecCredential JSON"),
        "{}",
        run.output()
    );
    assert_not_printed(&run, &token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_with_no_token_says_so_not_anonymous() {
    let (_env, run, _) = deploy_with(
        r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'"#,
        &[],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.output());
    let failure = &run.target("eu")["failures"][0];
    assert_eq!(failure["reason"], "Credentials", "{failure:#}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("returned no credentials")),
        "{failure:#}"
    );
    assert!(
        !run.output().contains("system:anonymous"),
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_exits_is_stopped_with_its_process_group() {
    let (env, run, _) = deploy_with(
        r#"sleep 1000 & echo $! > "$(dirname "$0")/child.pid"; wait"#,
        &[("ROLLGUARD_EXEC_TIMEOUT", "1s")],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.output());
    let message = run.target("eu")["failures"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("did not finish within"), "{message}");
    // The plugin's own child (same process group) is gone too; the kill is synchronous,
    // only the reaping of the orphan by init may lag.
    let pid = std::fs::read_to_string(env.path("child.pid")).expect("child pid");
    let stat = format!("/proc/{}/stat", pid.trim());
    let mut alive = true;
    for _ in 0..100 {
        alive = std::fs::read_to_string(&stat).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if !alive {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!alive, "the plugin's child {pid} still runs");
}
