//! Issue 24 (items 3 and 4): a failing container's own last log lines and how it exited, in
//! the JSON report, the terminal output and the step summary; secret values scrubbed.

use serde_json::Value;

use crate::fake_github::FakeGithub;
use crate::github::{actions_env, deploy_in_actions};
use crate::harness::{Run, TestEnv, config};

const CRASH: &str = "example.com/web:crash";
const OOM: &str = "example.com/web:oom";
/// A manifest Secret's value that the crashing container prints.
const SECRET: &str = "p4ss_l0g_s3cr3t_x9";

/// A Secret `db` and a Deployment `web` of one replica of `image` with a 128Mi memory limit.
fn app(image: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: {SECRET}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: {image}
          resources:
            limits:
              memory: 128Mi
"
    )
}

/// Deploys `image` on one cluster under these rules, in GitHub Actions (for the step
/// summary); the target fails.
async fn failing_deploy(image: &str, rules: &str) -> (TestEnv, Run) {
    let env = TestEnv::start(1, rules).await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &app(image));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "push");
    let run = deploy_in_actions(&env, &vars, &["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    (env, run)
}

/// The first failure of eu that carries logs.
fn failure_with_logs(run: &Run) -> Value {
    run.target("eu")["failures"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["logs"].is_array()))
        .cloned()
        .unwrap_or_else(|| panic!("no failure with logs: {}", run.output()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_reports_its_last_log_lines_from_the_previous_instance() {
    let rules = format!(
        "- {{image: \"{CRASH}\", behaviour: CrashLoopBackOff, logs: [\"boot {{restart}}\", \
         \"connecting with password {SECRET}\", \"panic: database refused ```\"]}}\n"
    );
    let (env, run) = failing_deploy(CRASH, &rules).await;
    let failure = failure_with_logs(&run);
    assert_eq!(failure["reason"], "CrashLoopBackOff", "{failure:#}");
    assert_eq!(failure["container"], "web");
    assert_eq!(failure["image"], CRASH);
    assert_eq!(failure["exit_code"], 1);
    // Fails at the second restart (crash_loop_restarts: 2).
    assert_eq!(failure["restarts"], 2, "{failure:#}");
    assert!(failure.get("signal").is_none(), "{failure:#}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("; exit 1 after ") && m.ends_with(", restarted 2 times")),
        "{failure:#}"
    );
    let log = &failure["logs"][0];
    assert_eq!(log["container"], "web");
    assert_eq!(log["previous"], true, "{log:#}");
    let lines: Vec<&str> = log["lines"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The run that just exited: the second restart.
    assert_eq!(lines.len(), 3, "{log:#}");
    assert_eq!(lines[0], "boot 2");
    assert!(
        lines[1].starts_with("connecting with password <redacted"),
        "{log:#}"
    );
    assert_eq!(lines[2], "panic: database refused ```");

    // The terminal output shows them under the failure.
    let out = run.output();
    assert!(
        out.contains("log of pod ") && out.contains("container web, previous instance:"),
        "{out}"
    );
    assert!(out.contains("    | panic: database refused ```"), "{out}");
    // The step summary: collapsed, in a fence the backticks of the line cannot close.
    let summary = env.read("summary.md");
    let start = summary
        .find("<details><summary>log of pod ")
        .unwrap_or_else(|| panic!("{summary}"));
    let block = &summary[start..];
    assert!(
        block.contains("container web (previous instance)</summary>\n\n````text\nboot 2\n"),
        "{block}"
    );
    assert!(
        block.contains("panic: database refused ```\n````\n\n</details>"),
        "{block}"
    );
    // The Secret's value is nowhere.
    let report = run
        .report
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    for (name, text) in [
        ("report", report),
        ("stdout", run.stdout.clone()),
        ("stderr", run.stderr.clone()),
        ("step summary", summary),
    ] {
        assert!(
            !text.contains(SECRET),
            "the secret is in the {name}:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_container_says_so_with_its_exit_code_and_limit() {
    let rules = format!("- {{image: \"{OOM}\", behaviour: OomKilled}}\n");
    let (env, run) = failing_deploy(OOM, &rules).await;
    let failure = failure_with_logs(&run);
    assert_eq!(failure["reason"], "OOMKilled", "{failure:#}");
    assert_eq!(failure["exit_code"], 137);
    assert_eq!(failure["signal"], "SIGKILL");
    assert!(
        failure["message"].as_str().is_some_and(|m| m
            .contains("; exit 137 (OOMKilled, memory limit 128Mi) after ")
            && m.ends_with(", restarted 2 times")),
        "{failure:#}"
    );
    let lines = &failure["logs"][0]["lines"];
    assert_eq!(lines[1], "loading cache into memory", "{failure:#}");
    let out = run.output();
    assert!(out.contains("OOMKilled"), "{out}");
    assert!(env.read("summary.md").contains("memory limit 128Mi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_zero_reads_no_log() {
    let rules = format!("- {{image: \"{CRASH}\", behaviour: CrashLoopBackOff}}\n");
    let env = TestEnv::start(1, &rules).await;
    env.write(
        "rollguard.yaml",
        &config(1, "60s").replace("wait:\n", "wait:\n  log_lines: 0\n"),
    );
    env.write("k8s/app.yaml", &app(CRASH));
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    let failures = run.target("eu")["failures"].clone();
    assert_eq!(failures[0]["reason"], "CrashLoopBackOff", "{failures:#}");
    assert!(
        failures
            .as_array()
            .is_some_and(|fs| fs.iter().all(|f| f.get("logs").is_none())),
        "{failures:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_names_the_unready_pod_and_shows_its_current_log() {
    let image = "example.com/web:never";
    let env = TestEnv::start(
        1,
        &format!("- {{image: \"{image}\", behaviour: NeverReady}}\n"),
    )
    .await;
    env.write("rollguard.yaml", &config(1, "3s"));
    env.write("k8s/app.yaml", &app(image));
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    let failure = failure_with_logs(&run);
    assert_eq!(failure["reason"], "Timeout", "{failure:#}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("not ready after 3s") && message.contains("; not ready: pod web-"),
        "{failure:#}"
    );
    assert!(message.contains(": container web"), "{failure:#}");
    let log = &failure["logs"][0];
    assert_eq!(log["previous"], false, "{log:#}");
    assert_eq!(
        log["lines"][1], "waiting for a dependency: connection refused",
        "{log:#}"
    );
}
