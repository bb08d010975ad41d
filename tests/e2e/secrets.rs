//! Issue 20, end to end: no credential and no Secret value in any output (scripts printing
//! their environment, server messages quoting a value), no text from a cluster run as a
//! workflow command, and credentials that outlive the run (a token rotated mid-wait).

use std::os::unix::fs::PermissionsExt;

use base64::Engine as _;
use serde_json::Value;

use crate::fake_github::{FakeGithub, TOKEN};
use crate::github::{PR, SHA, actions_env, deploy_in_actions};
use crate::harness::{Run, TestEnv, config, create, list, small_app};

/// `value` percent-encoded as a query string would carry it.
fn url_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Every form of `secret` a leak could take.
fn forms(secret: &str) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    vec![
        secret.to_string(),
        b64.clone(),
        url_encoded(secret),
        url_encoded(&b64),
    ]
}

/// Asserts that no form of any of `secrets` is in any of `texts` (name, text).
fn assert_nowhere(secrets: &[&str], texts: &[(&str, String)]) {
    for secret in secrets {
        for form in forms(secret) {
            for (name, text) in texts {
                assert!(
                    !text.contains(&form),
                    "{form:?} (a form of a credential) is in the {name}:\n{text}"
                );
            }
        }
    }
}

/// Replaces the token of sim-1's kubeconfig user (and what sim-1 accepts) by `token`.
fn set_kubeconfig_token(env: &TestEnv, token: &str) {
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&text).expect("kubeconfig yaml");
    for user in kc["users"].as_array_mut().expect("users") {
        if user["name"].as_str().is_some_and(|n| n.contains('1')) {
            user["user"]["token"] = Value::String(token.to_string());
        }
    }
    std::fs::write(&env.kubeconfig, serde_json::to_string(&kc).expect("json")).expect("write");
    env.cluster(1).set_tokens(vec![token.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_printing_its_environment_and_kubeconfig_leaks_no_credential() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    // A token with characters that base64 and URL encoding change.
    let kube_token = "kube+tok/en=s3cr3t_4f9a";
    set_kubeconfig_token(&env, kube_token);
    // `peek` shows what a stage without `pass_env` gets; `leak` asks for the token and
    // prints everything it can find, in every form, then fails.
    let pipeline = r#"pipeline:
  - script:
      name: peek
      run: 'echo "token=[$GITHUB_TOKEN] [$ACTIONS_RUNTIME_TOKEN]" > peek.txt'
  - script:
      name: leak
      pass_env: [GITHUB_TOKEN]
      run: |
        env
        cat "$KUBECONFIG"
        echo
        echo "github: $GITHUB_TOKEN"
        T=$(grep -o '"token": *"[^"]*"' "$KUBECONFIG" | sed 's/.*: *"//; s/"$//')
        echo "raw: $T"
        printf %s "$T" | base64
        printf '%s\n' "$T" | sed 's/+/%2B/g; s#/#%2F#g; s/=/%3D/g'
        echo "query: ?token=$(printf %s "$T" | base64 | sed 's/+/%2B/g; s#/#%2F#g; s/=/%3D/g')"
        exit 3
  - apply
"#;
    env.write("rollguard.yaml", &format!("{}{pipeline}", config(1, "60s")));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let gh = FakeGithub::start().await;
    let mut vars = actions_env(&env, &gh.url(), "pull_request");
    let runtime = "actions-runtime-token-77e1";
    vars.push(("ACTIONS_RUNTIME_TOKEN".into(), runtime.into()));
    vars.push(("RUST_LOG".into(), "trace".into()));
    let markdown = env.path("report.md");
    let markdown_arg = markdown.display().to_string();
    let run = deploy_in_actions(&env, &vars, &["--report-markdown", &markdown_arg]).await;

    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    assert_eq!(
        env.read("peek.txt").trim(),
        "token=[] []",
        "withheld without pass_env"
    );
    // The script did print them: scrubbed, they are markers.
    assert!(
        run.stderr.contains("raw: <redacted sha256:"),
        "{}",
        run.output()
    );
    let comments: Vec<String> = gh.comments_on(PR).into_iter().map(|c| c.body).collect();
    assert!(!comments.is_empty(), "a PR comment: {}", run.output());
    let report = run
        .report
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(
        report.contains("ScriptFailed") || report.contains("leak"),
        "{report}"
    );
    assert_nowhere(
        &[TOKEN, kube_token, runtime],
        &[
            ("stdout", run.stdout.clone()),
            ("stderr", run.stderr.clone()),
            ("report", report),
            (
                "markdown",
                std::fs::read_to_string(&markdown).unwrap_or_default(),
            ),
            ("step summary", env.read("summary.md")),
            ("outputs", env.read("output.txt")),
            ("PR comment", comments.join("\n")),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_value_quoted_in_a_conflict_is_in_no_plan_comment_and_no_history() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // Underscores: escaped for markdown they would hide the value from a late scrubber.
    let value = "p4ss_w0rd_s3cr3t_x1";
    let manifests = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {value}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keys\ndata:\n  {value}: \"mine\"\n---\n{}",
        small_app("example.com/web:v1")
    );
    // v1 deploys without the ConfigMap; then another manager owns its key, so applying
    // rollguard's ConfigMap conflicts on a field path that quotes the value.
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "keys", "namespace": "shop"}, "data": {value: "theirs"}});
    env.apply_as(1, "someone-else", &cm).await;
    env.write("k8s/app.yaml", &manifests);

    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let diff = env.command_env("diff", &["--commit", SHA], &pairs).await;
    let plans: Vec<String> = gh
        .comments_on(PR)
        .into_iter()
        .filter(|c| c.body.starts_with("<!-- rollguard:plan:app=shop -->"))
        .map(|c| c.body)
        .collect();
    assert_eq!(plans.len(), 1, "{}", diff.output());
    assert!(
        plans[0].to_ascii_lowercase().contains("conflict"),
        "the plan shows the conflict:\n{}",
        plans[0]
    );

    // The deploy is refused in the preflight dry run: exit 2, nothing written or recorded.
    let refused = env.deploy(&[]).await;
    assert_eq!(refused.code, 2, "{}", refused.output());
    assert!(refused.stdout.contains("Conflict"), "{}", refused.output());
    // Without the preflight the apply fails on the conflict; its record keeps the server's
    // message.
    env.write(
        "rollguard.yaml",
        &format!("{}preflight: false\n", config(1, "60s")),
    );
    let failed = env.deploy(&[]).await;
    assert_eq!(failed.code, 1, "{}", failed.output());
    let json = env.command("history", &["-o", "json"]).await;
    let yaml = env.command("history", &["-o", "yaml"]).await;
    assert_eq!(
        (json.code, yaml.code),
        (0, 0),
        "{}\n{}",
        json.output(),
        yaml.output()
    );
    assert!(json.stdout.contains("\"revision\": 2"), "{}", json.output());
    // The stored message is there, its value a marker.
    for run in [&json, &yaml] {
        assert!(
            run.stdout.contains("conflict") && run.stdout.contains("<redacted sha256:"),
            "{}",
            run.output()
        );
    }

    let escaped = value.replace('_', "\\_");
    for (name, text) in [
        ("plan comment", plans[0].clone()),
        ("diff output", diff.stdout.clone() + &diff.stderr),
        ("history -o json", json.stdout.clone()),
        ("history -o yaml", yaml.stdout.clone()),
        (
            "refused deploy output",
            refused.stdout.clone() + &refused.stderr,
        ),
        ("deploy output", failed.stdout.clone() + &failed.stderr),
    ] {
        assert!(
            !text.contains(value) && !text.contains(&escaped),
            "the secret value is in the {name}:\n{text}"
        );
    }
}

/// Whether any line of `text` starts (after blanks) with one of `forged`, outside a
/// `::stop-commands::rollguard-...` block of rollguard's own.
fn forged_command_lines(text: &str, forged: &[&str]) -> Vec<String> {
    let mut stopped: Option<String> = None;
    let mut found = Vec::new();
    for line in text.split(['\n', '\r']) {
        let trimmed = line.trim_start();
        if let Some(token) = &stopped {
            if trimmed == format!("::{token}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(token) = trimmed.strip_prefix("::stop-commands::")
            && token.starts_with("rollguard-")
            && token.len() > "rollguard-".len() + 16
        {
            stopped = Some(token.to_string());
            continue;
        }
        if forged.iter().any(|f| trimmed.starts_with(f)) {
            found.push(line.to_string());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_message_cannot_become_a_workflow_command() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "5m"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let client = env.client(1).await;
    let uid = list(&client, "apps/v1", "Deployment", "deployments", "shop")
        .await
        .iter()
        .find(|d| d["metadata"]["name"] == "web")
        .and_then(|d| d["metadata"]["uid"].as_str().map(str::to_string))
        .expect("web has a uid");
    let message = "pull failed\n::error title=X::y\n::stop-commands::t\n::add-mask::rollguard";
    let event = serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.forged", "namespace": "shop"},
        "involvedObject": {"kind": "Deployment", "apiVersion": "apps/v1", "name": "web",
                           "namespace": "shop", "uid": uid},
        "reason": "Forged", "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
        "source": {"component": "test"},
    });
    create(&client, "v1", "Event", "events", "shop", event).await;

    env.write("k8s/app.yaml", &small_app("nginx:doesnotexist"));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "push");
    let run: Run = deploy_in_actions(&env, &vars, &["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let report = run
        .report
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(
        report.contains("::error title=X::y"),
        "the event is reported: {report}"
    );
    // The message was printed where a line starts, neutralised (so this test can fail).
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains(":\u{200B}:error title=X::y"),
        "{}",
        run.output()
    );
    let forged = ["::error title=X", "::stop-commands::t", "::add-mask::"];
    for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        let lines = forged_command_lines(text, &forged);
        assert!(
            lines.is_empty(),
            "{name} has forged workflow commands {lines:?}:\n{}",
            run.output()
        );
    }
}

/// Makes sim-1's user an exec plugin that prints the token in `token_file` and appends its
/// parent's pid to `runs` (so that rollguard's runs are counted apart from the harness's).
fn use_rotating_plugin(env: &TestEnv, token_file: &str, runs: &str) {
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&text).expect("kubeconfig yaml");
    let user = kc["users"]
        .as_array_mut()
        .expect("users")
        .iter_mut()
        .find(|u| u["name"].as_str().is_some_and(|n| n.contains('1')))
        .expect("user of sim-1");
    let token = user["user"]["token"].as_str().expect("token").to_string();
    env.write(token_file, &token);
    let plugin = env.path("plugin.sh");
    let body = format!(
        "#!/bin/sh\necho \"$PPID\" >> {runs}\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\"}}}}' \"$(cat {token_file})\"\n",
        runs = env.path(runs).display(),
        token_file = env.path(token_file).display(),
    );
    std::fs::write(&plugin, body).expect("plugin");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    user["user"] = serde_json::json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": plugin.display().to_string(),
        "interactiveMode": "Never",
    }});
    std::fs::write(&env.kubeconfig, serde_json::to_string(&kc).expect("json")).expect("write");
}

/// Deploys a revision that never becomes ready with sim-1's user set up by `credentials`,
/// rotates the token (in `token.txt` and on the server) while rollguard waits, and checks
/// that the rollback, the records and the unlock all got through. Returns rollguard's pid
/// and run.
async fn rotate_mid_wait(credentials: fn(&TestEnv)) -> (TestEnv, String, Run) {
    use crate::release::{first_good_deploy, records, statuses, wait_for_pending};
    use rollguard::release::ReleaseStatus;
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "6s"));
    first_good_deploy(&env).await;
    credentials(&env);
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let child = env.spawn_deploy(&[("ROLLGUARD_LEASE_SECONDS", "2")]);
    let pid = child.id().expect("running").to_string();
    wait_for_pending(&env, 1, 2).await;
    // Rotated while rollguard waits for the rollout: the old token is refused from now on.
    let rotated = format!("rotated-{:032x}", rand::random::<u128>());
    env.write("token.txt", &rotated);
    env.cluster(1).set_tokens(vec![rotated]);

    let run = env.finish(child, "report.json").await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    let recs = records(&env, 1).await;
    assert_eq!(
        statuses(&recs),
        vec![
            (1, ReleaseStatus::Superseded),
            (2, ReleaseStatus::Failed),
            (3, ReleaseStatus::Deployed)
        ],
        "{}",
        run.output()
    );
    let leases = list(
        &env.client(1).await,
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        "shop",
    )
    .await;
    assert!(leases.is_empty(), "the lock was released: {leases:?}");
    (env, pid, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotated_mid_wait_still_rolls_back_records_and_unlocks() {
    let (env, pid, run) =
        rotate_mid_wait(|env| use_rotating_plugin(env, "token.txt", "runs.txt")).await;
    let ran = env
        .read("runs.txt")
        .lines()
        .filter(|l| l.trim() == pid)
        .count();
    assert_eq!(
        ran,
        2,
        "rollguard ran the plugin at connect and after the 401\n{}",
        run.output()
    );
}

/// Makes sim-1's user read its token from `token.txt` (a `tokenFile`).
fn use_token_file(env: &TestEnv) {
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&text).expect("kubeconfig yaml");
    let user = kc["users"]
        .as_array_mut()
        .expect("users")
        .iter_mut()
        .find(|u| u["name"].as_str().is_some_and(|n| n.contains('1')))
        .expect("user of sim-1");
    let token = user["user"]["token"].as_str().expect("token").to_string();
    env.write("token.txt", &token);
    user["user"] = serde_json::json!({"tokenFile": env.path("token.txt").display().to_string()});
    std::fs::write(&env.kubeconfig, serde_json::to_string(&kc).expect("json")).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_is_read_again_after_a_401() {
    let (_env, _pid, run) = rotate_mid_wait(use_token_file).await;
    assert!(
        run.stderr
            .contains("refused the credentials (401): fetching them again"),
        "{}",
        run.output()
    );
}
