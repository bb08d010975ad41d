//! Pipeline stages (issue 12), end to end: script stages around the apply, per target and
//! once for the fleet, with their rollback commands, against kube-sim clusters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rollguard::release::{ReleaseStatus, ReleaseStore};
use rollguard::report::StageOutcome;
use serde_json::Value;

use crate::harness::{Run, TestEnv, config, list, process_gone, signal, small_app};

const GOOD: &str = "example.com/web:v1";
const NEXT: &str = "example.com/web:v2";

/// Clusters with the config of `targets` targets, `extra` top-level YAML (e.g. on_failure)
/// and `pipeline` (the YAML list under `pipeline:`).
async fn env_with(targets: usize, extra: &str, pipeline: &str) -> TestEnv {
    let env = TestEnv::start(targets, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}{extra}pipeline:\n{pipeline}", config(targets, "60s")),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    env
}

fn image_of(d: &Value) -> String {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn web_image(env: &TestEnv, cluster: usize) -> String {
    let client = env.client(cluster).await;
    list(&client, "apps/v1", "Deployment", "deployments", "shop")
        .await
        .iter()
        .find(|d| d["metadata"]["name"] == "web")
        .map(image_of)
        .unwrap_or_default()
}

/// The report's stage results of a target, as (name, rollback, outcome).
fn stage_list(run: &Run, target: &str) -> Vec<(String, bool, String)> {
    run.target(target)["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                s["rollback"].as_bool().unwrap_or(false),
                s["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_apply_smoke_rolls_back_the_failed_cluster_in_order() {
    let env = env_with(
        2,
        "on_failure: rollback-failed\n",
        r#"  - script:
      name: migrate
      run: echo "migrate up $ROLLGUARD_TARGETS" >> order.log
      rollback: echo "migrate down $ROLLGUARD_TARGETS" >> order.log
      scope: fleet
  - apply
  - script:
      name: smoke
      run: ./smoke.sh
      rollback: echo "smoke rollback $ROLLGUARD_TARGET sees $(kubectl -n shop get deploy web -o jsonpath='{.spec.template.spec.containers[0].image}')" >> order.log
"#,
    )
    .await;
    env.write_script(
        "smoke.sh",
        r#"echo "smoke $ROLLGUARD_TARGET" >> order.log
if [ -e "fail-$ROLLGUARD_TARGET" ]; then echo "smoke: /healthz answered 503 on $ROLLGUARD_TARGET"; exit 1; fi"#,
    );
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("order.log", "");
    env.write("fail-us", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());

    let order = lines(&env.read("order.log"));
    // The two smoke tests run in parallel; everything else has one order.
    let mut middle = order.get(1..3).map(<[String]>::to_vec).unwrap_or_default();
    middle.sort();
    assert_eq!(order.len(), 4, "{order:#?}\n{}", run.output());
    assert_eq!(order[0], "migrate up eu us");
    assert_eq!(middle, vec!["smoke eu", "smoke us"]);
    // us rolled back its manifests first, then smoke's rollback ran there. migrate's
    // rollback did not run: eu still runs the new code, which needs the migrated database.
    // eu ran no rollback command.
    assert_eq!(order[3], format!("smoke rollback us sees {GOOD}"));
    assert_eq!(web_image(&env, 1).await, NEXT);
    assert_eq!(web_image(&env, 2).await, GOOD);

    assert_eq!(
        stage_list(&run, "us"),
        vec![
            ("migrate".into(), false, "succeeded".into()),
            ("smoke".into(), false, "failed".into()),
            ("smoke".into(), true, "succeeded".into()),
            ("migrate".into(), true, "not-run".into()),
        ],
        "{}",
        run.output()
    );
    let held = &run.target("us")["stages"][3];
    assert_eq!(held["message"], "not run: eu still on the new revision");
    let rollback_message = run.target("us")["rollback"]["message"].to_string();
    assert!(
        rollback_message.contains("fleet stage migrate not run: eu still on the new revision"),
        "{rollback_message}"
    );
    let warned: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("fleet stage migrate was not run: eu still on the new revision"))
        .collect();
    assert_eq!(warned.len(), 1, "{}", run.stderr);
    assert!(
        warned[0].contains("rollguard rollback --target eu"),
        "{}",
        warned[0]
    );
    assert_eq!(
        stage_list(&run, "eu"),
        vec![
            ("migrate".into(), false, "succeeded".into()),
            ("smoke".into(), false, "succeeded".into()),
        ]
    );
    let us = run.target("us");
    let smoke = &us["stages"][1];
    assert_eq!(smoke["exit_code"], 1);
    assert_eq!(
        smoke["output"],
        serde_json::json!(["smoke: /healthz answered 503 on us"]),
        "{us:#}"
    );
    assert_eq!(us["failures"][0]["object"], "stage smoke");
    assert_eq!(us["failures"][0]["reason"], "ScriptFailed");
    // The final output shows the script's last lines under its failure (on a terminal its
    // output is logged nowhere else).
    assert!(
        run.stdout
            .contains("    | smoke: /healthz answered 503 on us"),
        "{}",
        run.output()
    );
    // The timeline has the script stages with their exit codes.
    let phases: Vec<(String, Value, Value)> = us["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["script"].clone(),
                p["exit_code"].clone(),
            )
        })
        .collect();
    assert!(
        phases.contains(&("migrate".into(), "fleet".into(), 0.into()))
            && phases.contains(&("smoke".into(), "target".into(), 1.into()))
            && phases.iter().any(|p| p.0 == "apply"),
        "{phases:#?}"
    );
    // Each phase once (a target script stage was listed twice, once without its exit code).
    let mut names: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all, "{phases:#?}");
    // The record of v2 on us says which stages ran and how they ended.
    let records = ReleaseStore::new(env.client(2).await, "shop", "shop", 10)
        .list()
        .await
        .expect("records");
    let v2 = records.iter().find(|r| r.revision == 2).expect("v2");
    assert_eq!(v2.status, ReleaseStatus::Failed);
    let ran: Vec<(&str, StageOutcome)> = v2
        .stages
        .iter()
        .map(|s| (s.name.as_str(), s.outcome))
        .collect();
    assert_eq!(
        ran,
        vec![
            ("migrate", StageOutcome::Succeeded),
            ("smoke", StageOutcome::Failed)
        ]
    );
    // Script output reaches the log, tagged with target and stage.
    assert!(
        run.stderr.lines().any(|l| l.contains("target=us")
            && l.contains("stage=smoke")
            && l.contains("smoke: /healthz answered 503 on us")),
        "{}",
        run.stderr
    );

    // Rolling eu back by hand (us is back already, its records say so) runs migrate's
    // rollback: nobody is on the new revision any more.
    env.write("order.log", "");
    let back = env.command("rollback", &["--target", "eu", "--yes"]).await;
    assert_eq!(back.code, 0, "{}", back.output());
    assert_eq!(
        lines(&env.read("order.log")),
        vec![
            format!("smoke rollback eu sees {GOOD}"),
            "migrate down eu".into()
        ],
        "{}",
        back.output()
    );
    assert_eq!(web_image(&env, 1).await, GOOD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_kubectl_sees_only_its_own_cluster() {
    let env = env_with(
        2,
        "",
        r#"  - apply
  - script:
      name: look
      run: ./look.sh
"#,
    )
    .await;
    env.put_configmap(1, "only-in-sim-1").await;
    env.put_configmap(2, "only-in-sim-2").await;
    env.write_script(
        "look.sh",
        r#"set -e
t=$ROLLGUARD_TARGET
kubectl get deploy -n shop -o name > "deploy-$t.txt"
kubectl get configmap -n default -o name > "cm-$t.txt"
kubectl config get-contexts -o name > "contexts-$t.txt"
stat -c %a "$KUBECONFIG" > "mode-$t.txt"
echo "$KUBECONFIG" > "path-$t.txt""#,
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for (target, mine, other) in [
        ("eu", "only-in-sim-1", "only-in-sim-2"),
        ("us", "only-in-sim-2", "only-in-sim-1"),
    ] {
        assert_eq!(
            env.read(&format!("deploy-{target}.txt")).trim(),
            "deployment.apps/web"
        );
        let cms = env.read(&format!("cm-{target}.txt"));
        assert!(
            cms.contains(&format!("configmap/{mine}")),
            "{target}: {cms}"
        );
        assert!(
            !cms.contains(other),
            "{target} saw the other cluster: {cms}"
        );
        assert_eq!(lines(&env.read(&format!("contexts-{target}.txt"))).len(), 1);
        assert_eq!(env.read(&format!("mode-{target}.txt")).trim(), "600");
        let path = env.read(&format!("path-{target}.txt"));
        assert!(
            !path.trim().is_empty() && !std::path::Path::new(path.trim()).exists(),
            "temporary kubeconfig {path} left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_script_and_its_sigterm_ignoring_grandchild_are_killed() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: hang
      run: ./hang.sh
      timeout: 1s
      kill_grace: 1s
"#,
    )
    .await;
    env.write_script(
        "hang.sh",
        r#"sh -c 'trap "" TERM; echo $$ > grandchild.pid; while :; do sleep 1; done' &
echo $$ > child.pid
sleep 60"#,
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let target = run.target("eu");
    assert_eq!(
        target["failures"][0]["reason"], "ScriptTimeout",
        "{target:#}"
    );
    assert_eq!(target["stages"][0]["outcome"], "timed-out");
    for file in ["child.pid", "grandchild.pid"] {
        let pid: u32 = env
            .read(file)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{file}: {}", run.output()));
        assert!(process_gone(pid), "{file} {pid} still runs");
    }
}

/// The ROLLGUARD_* variables (and the stage's own env) a script saw, from its dump file.
fn dumped(env: &TestEnv, file: &str) -> BTreeMap<String, String> {
    env.read(file)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_get_the_deployment_in_their_environment() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: check
      run: ./dump.sh
      rollback: ./dump.sh
      env: {EXTRA: from-stage}
"#,
    )
    .await;
    env.write_script(
        "dump.sh",
        r#"env | grep -E '^(ROLLGUARD_|EXTRA=)' | sort > "env-$ROLLGUARD_IS_ROLLBACK.txt"
[ "$ROLLGUARD_IS_ROLLBACK" = true ] || [ ! -e fail ] || { echo "check failed on purpose"; exit 7; }"#,
    );
    let first = env.deploy(&["--commit", "aaaa111"]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("fail", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&["--commit", "bbbb222"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    let deploy = dumped(&env, "env-false.txt");
    let want = [
        ("ROLLGUARD_APP", "shop"),
        ("ROLLGUARD_TARGET", "eu"),
        ("ROLLGUARD_NAMESPACE", "shop"),
        ("ROLLGUARD_REVISION", "2"),
        ("ROLLGUARD_COMMIT", "bbbb222"),
        ("ROLLGUARD_PREVIOUS_COMMIT", "aaaa111"),
        ("ROLLGUARD_PREVIOUS_REVISION", "1"),
        ("ROLLGUARD_STAGE", "check"),
        ("ROLLGUARD_IS_ROLLBACK", "false"),
        ("ROLLGUARD_DRY_RUN", "false"),
        ("EXTRA", "from-stage"),
    ];
    for (key, value) in want {
        assert_eq!(
            deploy.get(key).map(String::as_str),
            Some(value),
            "{key}: {deploy:#?}"
        );
    }
    assert!(
        !deploy.contains_key("ROLLGUARD_FAILED_STAGE") && !deploy.contains_key("ROLLGUARD_TARGETS")
    );
    let rollback = dumped(&env, "env-true.txt");
    assert_eq!(
        rollback.get("ROLLGUARD_IS_ROLLBACK").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        rollback.get("ROLLGUARD_REVISION").map(String::as_str),
        Some("2")
    );
    assert_eq!(
        rollback.get("ROLLGUARD_FAILED_STAGE").map(String::as_str),
        Some("check")
    );
    assert_eq!(
        rollback
            .get("ROLLGUARD_ROLLBACK_REASON")
            .map(String::as_str),
        Some("failed")
    );
    let failure = rollback
        .get("ROLLGUARD_FAILURE")
        .cloned()
        .unwrap_or_default();
    assert!(
        failure.contains("stage check") && failure.contains("exited with code 7"),
        "{failure}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_rolled_back_by_policy_has_no_failed_stage() {
    let env = TestEnv::start(
        2,
        "- {cluster: sim-2, image: \"example.com/web:v2\", behaviour: ImagePullBackOff}\n- {image: \"*\", behaviour: Ready}\n",
    )
    .await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}on_failure: rollback-all\npipeline:\n{}",
            config(2, "60s"),
            r#"  - script:
      name: prep
      run: "true"
      rollback: echo "$ROLLGUARD_TARGET ${ROLLGUARD_FAILED_STAGE-unset} $ROLLGUARD_ROLLBACK_REASON" >> why.log
  - apply
"#
        ),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let mut why = lines(&env.read("why.log"));
    why.sort();
    // us failed its rollout; eu was healthy and rolled back only because of rollback-all.
    assert_eq!(
        why,
        vec!["eu unset policy", "us apply failed"],
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_on_error_is_a_warning_with_the_exit_code() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: optional
      run: echo "cache warm-up skipped"; exit 3
      continue_on_error: true
"#,
    )
    .await;
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let eu = run.target("eu");
    assert_eq!(eu["outcome"], "deployed");
    assert_eq!(eu["stages"][0]["outcome"], "warned");
    assert_eq!(eu["stages"][0]["exit_code"], 3);
    assert_eq!(
        eu["stages"][0]["output"],
        serde_json::json!(["cache warm-up skipped"])
    );
    let warnings = eu["warnings"].to_string();
    assert!(
        warnings.contains("stage optional exited with code 3"),
        "{warnings}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rollback_command_fails_the_rollback_and_the_next_still_runs() {
    let env = env_with(
        1,
        "",
        r#"  - script:
      name: first
      run: "true"
      rollback: echo first-down >> order.log; exit 4
  - apply
  - script:
      name: second
      run: test ! -e fail
      rollback: echo second-down >> order.log
"#,
    )
    .await;
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("fail", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 3, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rollback-failed", "{}", run.output());
    assert_eq!(
        lines(&env.read("order.log")),
        vec!["first-down", "second-down"]
    );
    // The manifests did go back; the report says which command failed.
    assert_eq!(web_image(&env, 1).await, GOOD);
    let message = run.target("eu")["rollback"]["message"].to_string();
    assert!(message.contains("first (exited with code 4)"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_script_kills_it_rolls_back_and_exits_130() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: slow
      run: if [ -e slow ]; then echo $$ > slow.pid; sleep 60; fi
      rollback: echo slow-rollback >> order.log
"#,
    )
    .await;
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("slow", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let child = env.spawn_deploy(&[]);
    // Wait until the script runs (a condition, bounded so a broken build cannot hang).
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.read("slow.pid").trim().is_empty() {
        assert!(Instant::now() < deadline, "the slow script never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid: u32 = env.read("slow.pid").trim().parse().expect("pid");
    signal(&child, "-TERM");
    // Whether it exits within GitHub's grace is its budgets' job (CANCEL_ROLLBACK_BUDGET,
    // CANCEL_CONCLUDE_STEP_BUDGET), not a wall-clock assert that a busy machine can fail:
    // this bound only keeps a hang from hanging the suite. What is checked is the order:
    // killed, rolled back, recorded, then exit 130.
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("rollguard exits after SIGTERM")
        .expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(process_gone(pid), "the script {pid} still runs");
    assert_eq!(
        lines(&env.read("order.log")),
        vec!["slow-rollback"],
        "{stderr}"
    );
    assert_eq!(web_image(&env, 1).await, GOOD);
    let report: Value = serde_json::from_str(&env.read("report.json")).expect("report");
    let eu = &report["targets"][0];
    assert_eq!(eu["outcome"], "cancelled", "{report:#}");
    assert_eq!(eu["stages"][0]["outcome"], "stopped", "{report:#}");
    assert_eq!(eu["rollback"]["to_revision"], 1, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_lists_the_stages_and_runs_only_dry_run_ones() {
    let env = env_with(
        1,
        "",
        r#"  - script:
      name: migrate
      run: touch migrated
      scope: fleet
  - apply
  - script:
      name: check
      run: echo "$ROLLGUARD_DRY_RUN" > checked
      dry_run: true
"#,
    )
    .await;
    let run = env.deploy(&["--dry-run"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(!env.path("migrated").exists(), "migrate ran in a dry run");
    assert_eq!(env.read("checked").trim(), "true");
    assert!(
        run.stderr.contains("1. script migrate (scope fleet)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("3. script check (scope target): runs"),
        "{}",
        run.stderr
    );
    assert_eq!(
        stage_list(&run, "eu"),
        vec![
            ("migrate".into(), false, "not-run".into()),
            ("check".into(), false, "succeeded".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_stages_key_is_refused_before_any_cluster_is_touched() {
    let env = TestEnv::start(1, "").await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}stages:\n  - name: migrate\n    script: ./migrate.sh\n    when: before\n",
            config(1, "60s")
        ),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("rollguard.yaml:9: `stages:` is gone"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("pipeline:"), "{}", run.stderr);
    assert_eq!(env.writes(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_and_a_manual_rollback_know_the_stages_a_revision_ran() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: smoke
      run: "true"
      rollback: echo "undo $ROLLGUARD_IS_ROLLBACK $ROLLGUARD_REVISION ${ROLLGUARD_FAILED_STAGE-unset} $ROLLGUARD_ROLLBACK_REASON" >> order.log
"#,
    )
    .await;
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app(NEXT));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    assert_eq!(
        env.read("order.log"),
        "",
        "a healthy deploy ran a rollback command"
    );

    let shown = env
        .command("show", &["--revision", "2", "-o", "json"])
        .await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    let shown: Value = serde_json::from_str(&shown.stdout).expect("show -o json is JSON");
    let record = &shown["eu"];
    assert_eq!(record["stages"][0]["name"], "smoke", "{record:#}");
    assert_eq!(record["stages"][0]["outcome"], "succeeded", "{record:#}");

    let back = env.command("rollback", &["--yes"]).await;
    assert_eq!(back.code, 0, "{}", back.output());
    assert!(
        back.stdout.contains(
            "then the rollback command of stage smoke: echo \"undo $ROLLGUARD_IS_ROLLBACK $ROLLGUARD_REVISION ${ROLLGUARD_FAILED_STAGE-unset} $ROLLGUARD_ROLLBACK_REASON\" >> order.log"
        ),
        "{}",
        back.output()
    );
    assert!(
        back.stdout
            .contains("target eu: rollback command of stage smoke (target): succeeded"),
        "{}",
        back.output()
    );
    // Rolled back by hand: no stage failed.
    assert_eq!(
        lines(&env.read("order.log")),
        vec!["undo true 2 unset manual"]
    );
    assert_eq!(web_image(&env, 1).await, GOOD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_working_dir_is_bad_input_with_zero_writes() {
    let env = env_with(
        1,
        "",
        "  - apply\n  - script:\n      name: smoke\n      run: \"true\"\n      working_dir: nope\n",
    )
    .await;
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("rollguard.yaml:12: stage \"smoke\": working_dir")
            && run.stderr.contains("is not a folder"),
        "{}",
        run.stderr
    );
    assert_eq!(env.writes(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_fleet_script_fails_every_target_before_anything_is_applied() {
    let env = env_with(
        2,
        "",
        "  - script:\n      name: migrate\n      run: echo \"cannot reach the database\"; exit 5\n      scope: fleet\n  - apply\n",
    )
    .await;
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2)] {
        let t = run.target(target);
        assert_eq!(t["outcome"], "failed", "{}", run.output());
        assert_eq!(t["failures"][0]["object"], "stage migrate (fleet)", "{t:#}");
        assert_eq!(t["stages"][0]["exit_code"], 5, "{t:#}");
        assert_eq!(
            web_image(&env, cluster).await,
            "",
            "sim-{cluster} got the app"
        );
    }
    // The script ran once, not once per target.
    let runs = run
        .stderr
        .lines()
        .filter(|l| l.contains("cannot reach the database") && l.contains("stage=migrate"))
        .count();
    assert_eq!(runs, 1, "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_never_reach_the_log_or_the_report() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: leak
      run: echo "token=$(kubectl -n shop get secret api -o jsonpath='{.data.token}' | base64 -d)"; exit 1
"#,
    )
    .await;
    env.write(
        "k8s/secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api\ndata:\n  token: czNjcjN0LXQwa2VuLXZhbHVl\n",
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let report = env.read("report.json");
    for (what, text) in [
        ("stderr", &run.stderr),
        ("stdout", &run.stdout),
        ("report", &report),
    ] {
        assert!(
            !text.contains("s3cr3t-t0ken-value"),
            "secret in {what}:\n{text}"
        );
    }
    // The scrubber's marker names the value by a digest prefix, never the value.
    let output = &run.target("eu")["stages"][0]["output"];
    let line = output[0].as_str().unwrap_or_default();
    assert!(
        output.as_array().map(Vec::len) == Some(1)
            && line.starts_with("token=<redacted sha256:")
            && line.ends_with('>'),
        "{output}\n{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enormous_lines_of_a_script_keep_the_report_bounded() {
    // One 20 MB line, then twenty 2 MB lines: each line is cut at 4 KiB with a note, so the
    // report holds at most 20 short lines.
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: spam
      run: ./spam.sh
"#,
    )
    .await;
    env.write_script(
        "spam.sh",
        "head -c 20000000 /dev/zero | tr '\\0' x; echo\n\
         i=0; while [ $i -lt 20 ]; do head -c 2000000 /dev/zero | tr '\\0' y; echo; i=$((i+1)); done\n\
         exit 1",
    );
    let run = env.deploy(&[]).await;
    assert_eq!(
        run.code,
        1,
        "{}",
        &run.output()[..run.output().len().min(4000)]
    );
    let size = std::fs::metadata(env.path("report.json"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(size > 0 && size < 400_000, "report.json is {size} bytes");
    let output = run.target("eu")["stages"]
        .as_array()
        .and_then(|ss| ss.iter().find(|s| s["name"] == "spam"))
        .map(|s| s["output"].clone())
        .unwrap_or_default();
    let lines: Vec<&str> = output
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(lines.len(), 20, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.len() < 4200 && l.contains("[rollguard cut this line at 4 KiB")),
        "{:?}",
        lines
            .iter()
            .map(|l| &l[l.len().saturating_sub(80)..])
            .collect::<Vec<_>>()
    );
    assert!(
        run.stderr.len() < 2_000_000,
        "stderr is {} bytes",
        run.stderr.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_command_output_during_a_deploy_names_its_target_and_stage() {
    let env = env_with(
        1,
        "",
        r#"  - apply
  - script:
      name: smoke
      run: test ! -e fail
      rollback: echo rollback-says-hi
"#,
    )
    .await;
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("fail", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&[]).await;
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("rollback-says-hi"))
        .unwrap_or_else(|| panic!("no output line\n{}", run.output()));
    // In the target's span (its log group in GitHub Actions), with the stage named.
    assert!(
        line.contains("target{target=eu}") && line.contains("stage=smoke"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_commands_run_in_pipeline_order_or_last_first_under_reverse() {
    let pipeline = r#"  - apply
  - script: {name: a, run: echo run a >> order.log, rollback: echo undo a >> order.log}
  - script: {name: b, run: echo run b >> order.log, rollback: echo undo b >> order.log}
  - script:
      name: c
      run: echo run c >> order.log; test ! -e fail
      rollback: echo undo c >> order.log
"#;
    for (extra, undo) in [
        ("", ["undo a", "undo b", "undo c"]),
        ("rollback_order: pipeline\n", ["undo a", "undo b", "undo c"]),
        ("rollback_order: reverse\n", ["undo c", "undo b", "undo a"]),
    ] {
        let env = env_with(1, extra, pipeline).await;
        let first = env.deploy(&[]).await;
        assert_eq!(first.code, 0, "{}", first.output());
        // A failed deploy's rollback.
        env.write("order.log", "");
        env.write("fail", "");
        env.write("k8s/app.yaml", &small_app(NEXT));
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 1, "{extra}{}", run.output());
        assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
        let mut want = vec!["run a", "run b", "run c"];
        want.extend(undo);
        assert_eq!(
            lines(&env.read("order.log")),
            want,
            "{extra}{}",
            run.output()
        );
        // A rollback by hand: the same order, and the prompt lists them in it.
        std::fs::remove_file(env.path("fail")).expect("remove fail");
        let good = env.deploy(&[]).await;
        assert_eq!(good.code, 0, "{}", good.output());
        env.write("order.log", "");
        let back = env.command("rollback", &["--yes"]).await;
        assert_eq!(back.code, 0, "{extra}{}", back.output());
        assert_eq!(
            lines(&env.read("order.log")),
            undo,
            "{extra}{}",
            back.output()
        );
        let listed: Vec<&str> = back
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("  then the rollback command of stage "))
            .filter_map(|l| l.split(':').next())
            .collect();
        let names: Vec<&str> = undo.iter().map(|u| &u[5..]).collect();
        assert_eq!(listed, names, "{extra}{}", back.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_of_part_of_the_fleet_runs_the_fleet_rollback_only_when_the_rest_is_off_it()
 {
    let env = env_with(
        2,
        "",
        r#"  - script:
      name: migrate
      run: echo "migrate up $ROLLGUARD_TARGETS" >> order.log
      rollback: echo "migrate down $ROLLGUARD_TARGETS" >> order.log
      scope: fleet
  - apply
"#,
    )
    .await;
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app(NEXT));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    env.write("order.log", "");

    // eu goes back; us, which took part in v2's migrate, still runs v2 (its records say so).
    let eu = env.command("rollback", &["--target", "eu", "--yes"]).await;
    assert_eq!(eu.code, 0, "{}", eu.output());
    assert_eq!(env.read("order.log"), "", "{}", eu.output());
    assert!(
        eu.stdout.contains(
            "target eu: rollback command of stage migrate (fleet): not-run: not run: us still on the new revision"
        ),
        "{}",
        eu.output()
    );
    assert_eq!(web_image(&env, 1).await, GOOD);
    assert_eq!(web_image(&env, 2).await, NEXT);

    // Then us: nobody is on v2 any more, and migrate's rollback runs, once.
    let us = env.command("rollback", &["--target", "us", "--yes"]).await;
    assert_eq!(us.code, 0, "{}", us.output());
    assert_eq!(
        lines(&env.read("order.log")),
        vec!["migrate down us"],
        "{}",
        us.output()
    );
    assert_eq!(web_image(&env, 2).await, GOOD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rollback_runs_once_when_every_target_that_took_part_rolled_back() {
    let env = TestEnv::start(
        2,
        "- {cluster: sim-2, image: \"example.com/web:v2\", behaviour: ImagePullBackOff}\n- {image: \"*\", behaviour: Ready}\n",
    )
    .await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}on_failure: rollback-all\npipeline:\n{}",
            config(2, "60s"),
            r#"  - script:
      name: migrate
      run: echo "migrate up $ROLLGUARD_TARGETS" >> order.log
      rollback: echo "migrate down $ROLLGUARD_TARGETS" >> order.log
      scope: fleet
  - apply
"#
        ),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("order.log", "");
    env.write("k8s/app.yaml", &small_app(NEXT));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    // Both went back to v1 first: nobody runs the new code, so the database may go back.
    assert_eq!(
        lines(&env.read("order.log")),
        vec!["migrate up eu us", "migrate down eu us"],
        "{}",
        run.output()
    );
    for target in ["eu", "us"] {
        assert_eq!(
            stage_list(&run, target).last(),
            Some(&("migrate".into(), true, "succeeded".into())),
            "{}",
            run.output()
        );
    }
}
