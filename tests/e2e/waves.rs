//! Issue 22: the fleet acts the moment it knows. Waves run in order with a bake; the failure
//! policy decides at the first failure; the bound is a bound.

use serde_json::Value;

use crate::harness::{TestEnv, small_app};
use crate::release::{GOOD, assert_runs, first_good_deploy, records};

const BAD: &str = "example.com/web:v2";

/// `app: shop` with one target per (name, wave) on sim-1, sim-2, ... and `extra` top-level
/// settings.
fn wave_config(targets: &[(&str, u32)], extra: &str) -> String {
    let mut text = String::from("app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n");
    for (i, (name, wave)) in targets.iter().enumerate() {
        text.push_str(&format!(
            "  - {{name: {name}, context: sim-{}, wave: {wave}}}\n",
            i + 1
        ));
    }
    text.push_str(extra);
    text
}

/// The small app whose pods are ready only `delay` simulated seconds after they start
/// (a readiness probe's initial delay): a slow but healthy rollout.
fn slow_app(image: &str, delay: u32) -> String {
    // The container is the last thing in the small app: the probe goes under it.
    small_app(image)
        + &format!(
            "          readinessProbe:\n            initialDelaySeconds: {delay}\n            httpGet: {{path: /, port: 80}}\n"
        )
}

fn timestamp(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a timestamp: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_canary_skips_every_later_wave_with_no_write_but_its_lease() {
    let rules = format!(
        "- {{cluster: sim-1, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(5, &rules).await;
    let targets = [("canary", 0), ("eu", 1), ("us", 1), ("ap", 2), ("sa", 2)];
    env.write(
        "rollguard.yaml",
        &wave_config(&targets, "waves:\n  - {wave: 0, bake: 2s}\n"),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let before: Vec<u64> = (1..=5).map(|c| env.writes_besides_locks(c)).collect();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("canary"), "rolled-back", "{}", run.output());
    assert_runs(&env, 1, GOOD).await;
    for (i, (name, wave)) in targets.iter().enumerate().skip(1) {
        let cluster = i + 1;
        assert_eq!(run.outcome(name), "skipped", "{}", run.output());
        assert_eq!(run.target(name)["wave"], *wave, "{}", run.output());
        let message = run.target(name)["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("wave 0 failed (canary)"),
            "{name}: {message}"
        );
        assert_eq!(
            env.writes_besides_locks(cluster),
            before[i],
            "{name} got a write besides its Lease"
        );
        // No new record: v1 is all there is.
        assert_eq!(records(&env, cluster).await.len(), 1, "{name}");
        assert_runs(&env, cluster, GOOD).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_run_in_order_each_after_the_one_before_baked() {
    let env = TestEnv::start(3, "").await;
    let targets = [("canary", 0), ("eu", 1), ("us", 1)];
    env.write(
        "rollguard.yaml",
        &wave_config(
            &targets,
            "wait:\n  bake: 1s\nwaves:\n  - {wave: 1, max_parallel: 1}\n",
        ),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env
        .deploy_with_env(&[], &[("RUST_LOG", "rollguard=info")])
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let line_of = |target: &str, words: &str| run.line_of(target, words);
    // Wave 1 starts after the canary's bake; max_parallel 1: one of its targets at a time.
    let canary = line_of("canary", "rollout healthy");
    let (eu, us) = (line_of("eu", "applied"), line_of("us", "applied"));
    assert!(canary < eu && canary < us, "{}", run.output());
    let first_done = line_of("eu", "rollout healthy").min(line_of("us", "rollout healthy"));
    assert!(
        first_done < eu.max(us),
        "wave 1 ran two at once:\n{}",
        run.output()
    );
    // The bake is in the timeline.
    let phases = run.target("canary")["phases"].to_string();
    assert!(phases.contains("\"bake\""), "{phases}");
}

/// rollback-all: us fails at once (the image does not exist); eu is healthy but slow (its pods
/// are ready 100 simulated seconds after they start). eu's wait is stopped and its rollback
/// starts within a second of us's failure; the deploy does not wait for eu's rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_all_stops_a_slow_target_at_the_first_failure() {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(2, &rules).await;
    env.write(
        "rollguard.yaml",
        &wave_config(
            &[("eu", 0), ("us", 0)],
            "on_failure: rollback-all\nwait:\n  timeout: 300s\n",
        ),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &slow_app(BAD, 100));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    for target in ["eu", "us"] {
        assert_eq!(run.outcome(target), "rolled-back", "{}", run.output());
    }
    let started = |t: &str| timestamp(&run.target(t)["rollback"]["started_at"]);
    let gap = started("eu").duration_since(started("us")).abs();
    assert!(
        gap.as_secs_f64() < 1.0,
        "eu's rollback started {gap:?} after us's failure:\n{}",
        run.output()
    );
    let why = run.target("eu")["rollback"]["why"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.starts_with("policy rollback-all: us failed at"),
        "{why}"
    );
    assert_eq!(run.target("us")["rollback"]["why"], "failed");
    // eu was stopped, never healthy: its v2 record failed with the policy's reason.
    let recs = records(&env, 1).await;
    let reason = recs[1].reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("stopped: policy rollback-all: us failed at"),
        "{reason}"
    );
    // Its lines go from its rollout to its rollback and its end: the stop is not a cancel
    // ("cancelled") nor its end ("failed: stopped: ..."), which both said before.
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("] eu  "))
        .collect();
    let tail: Vec<&str> = lines.iter().rev().take(2).rev().copied().collect();
    assert!(
        matches!(tail.as_slice(), [rolling, end]
            if rolling.contains("  rolling back: policy rollback-all: us failed at")
                && end.contains("  rolled-back: ")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("  cancelled") && !l.contains("  failed")),
        "{lines:#?}"
    );
    assert_runs(&env, 1, GOOD).await;
    assert_runs(&env, 2, GOOD).await;
}

/// rollback-failed: us fails and is rolled back (and healthy) while eu's slow rollout still
/// goes on; eu is deployed in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_failed_rolls_back_at_once_while_the_slow_target_waits() {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(2, &rules).await;
    env.write(
        "rollguard.yaml",
        &wave_config(
            &[("eu", 0), ("us", 0)],
            "on_failure: rollback-failed\nwait:\n  timeout: 300s\n",
        ),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &slow_app(BAD, 60));
    let run = env
        .deploy_with_env(&[], &[("RUST_LOG", "rollguard=info")])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    let line_of = |target: &str, words: &str| run.line_of(target, words);
    assert!(
        line_of("us", "rolled back to v1") < line_of("eu", "rollout healthy"),
        "us waited for eu:\n{}",
        run.output()
    );
}

/// `--concurrency 1`, four targets, rollback-all: the first fails; the other three never
/// start: no write but their Lease, skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_all_skips_the_queued_targets_with_no_write() {
    let rules = format!(
        "- {{cluster: sim-1, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(4, &rules).await;
    let targets = [("eu", 0), ("us", 0), ("ap", 0), ("sa", 0)];
    env.write(
        "rollguard.yaml",
        &wave_config(&targets, "on_failure: rollback-all\n"),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let before: Vec<u64> = (1..=4).map(|c| env.writes_besides_locks(c)).collect();
    let run = env.deploy(&["--concurrency", "1"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    for (i, name) in ["us", "ap", "sa"].iter().enumerate() {
        let cluster = i + 2;
        assert_eq!(run.outcome(name), "skipped", "{}", run.output());
        let message = run.target(name)["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("policy rollback-all: eu failed at"),
            "{name}: {message}"
        );
        assert_eq!(
            env.writes_besides_locks(cluster),
            before[cluster - 1],
            "{name} got a write besides its Lease"
        );
    }
}

/// The bake watches: the canary is healthy, then its pods crash-loop during its 10 s bake
/// (60 simulated seconds after they started: 3 s): the wave fails, wave 1 never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_the_bake_fails_the_wave_and_the_next_never_starts() {
    let rules = format!(
        "- {{cluster: sim-1, image: \"{BAD}\", behaviour: CrashLoopBackOff, after: 60s}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(3, &rules).await;
    let targets = [("canary", 0), ("eu", 1), ("us", 1)];
    env.write(
        "rollguard.yaml",
        &wave_config(&targets, "waves:\n  - {wave: 0, bake: 10s}\n"),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let before: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    let run = env
        .deploy_with_env(&[], &[("RUST_LOG", "rollguard=info")])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("canary"), "rolled-back", "{}", run.output());
    // It was healthy first: the failure came during the bake.
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains("target=canary") && l.contains("rollout healthy")),
        "{}",
        run.output()
    );
    let failure = run.target("canary")["failures"][0].to_string();
    assert!(failure.contains("during the bake"), "{failure}");
    let phases = run.target("canary")["phases"].to_string();
    assert!(phases.contains("\"bake\""), "{phases}");
    for (i, name) in ["eu", "us"].iter().enumerate() {
        assert_eq!(run.outcome(name), "skipped", "{}", run.output());
        assert_eq!(env.writes_besides_locks(i + 2), before[i + 1], "{name}");
    }
    assert_runs(&env, 1, GOOD).await;
}

/// A healthy canary rolled back because the next wave failed (`rollback-all`): its lines go
/// from its rollout to `healthy` while the next wave runs, then to its rollback and its end;
/// none says `deployed` on the way (it said "deployed: policy rollback-all: eu failed at ..."
/// before its rollback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_target_rolled_back_by_the_policy_never_says_deployed() {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(2, &rules).await;
    env.write(
        "rollguard.yaml",
        &wave_config(&[("canary", 0), ("eu", 1)], ""),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("canary"), "rolled-back", "{}", run.output());
    let why = run.target("canary")["rollback"]["why"].to_string();
    assert!(why.contains("policy rollback-all: eu failed"), "{why}");
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("] canary  "))
        .collect();
    assert!(
        lines.iter().all(|l| !l.contains("  deployed")),
        "{lines:#?}"
    );
    // Healthy while the next wave ran, then rolled back.
    let at = |words: &str| lines.iter().position(|l| l.contains(words));
    let healthy = at("  healthy, waiting for the other targets");
    let rolling_back = at("  rolling back: policy rollback-all: eu failed at");
    assert!(
        healthy.is_some() && rolling_back.is_some() && healthy < rolling_back,
        "{lines:#?}"
    );
    assert!(
        lines.last().is_some_and(|l| l.contains("  rolled-back: ")),
        "{lines:#?}"
    );
    assert_runs(&env, 1, GOOD).await;
}

/// A git repository around the test's config and manifests, committed; the commit's sha.
fn commit_all(env: &TestEnv, subject: &str) -> String {
    let dir = env.dir.path();
    if !dir.join(".git").exists() {
        crate::harness::git(dir, &["init", "-q"]);
    }
    crate::harness::git(dir, &["add", "rollguard.yaml", "k8s"]);
    crate::harness::git(dir, &["commit", "-q", "-m", subject]);
    crate::harness::git(dir, &["rev-parse", "HEAD"])
}

/// Every write kube-sim counted on each of `clusters` clusters, Leases included.
fn all_writes(env: &TestEnv, clusters: usize) -> Vec<u64> {
    (1..=clusters).map(|c| env.writes(c)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wave_1_deploys_after_wave_0_ran_the_same_commit() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write(
        "rollguard.yaml",
        &wave_config(&[("canary", 0), ("eu", 1)], ""),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let a = commit_all(&env, "v1");
    let run = env.deploy(&["--wave", "0"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("canary"), "deployed", "{}", run.output());
    // Wave 1 alone, as the approval's job runs it: wave 0 is on this commit.
    let run = env.deploy(&["--wave", "1"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_runs(&env, 2, GOOD).await;
    let eu = records(&env, 2).await;
    assert_eq!(eu.len(), 1, "{eu:?}");
    assert_eq!(
        eu[0].commit.as_ref().map(|c| c.sha.as_str()),
        Some(a.as_str())
    );
    // Wave 0 was left alone: its one record, no second run.
    assert_eq!(records(&env, 1).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wave_1_refuses_with_no_write_while_wave_0_runs_another_commit() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write(
        "rollguard.yaml",
        &wave_config(&[("canary", 0), ("eu", 1)], ""),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));

    // No git, no --commit: nothing to compare wave 0's records with (bad input, exit 2).
    let before = all_writes(&env, 2);
    let run = env.deploy(&["--wave", "1"]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("deploy --wave 1 refused, nothing was written: this deploy has no commit")
            && run.stderr.contains("pass --commit SHA"),
        "{}",
        run.output()
    );
    assert_eq!(all_writes(&env, 2), before, "{}", run.output());

    let a = commit_all(&env, "v1");
    let run = env.deploy(&["--wave", "0"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let b = commit_all(&env, "v3");

    let before = all_writes(&env, 2);
    let run = env.deploy(&["--wave", "1"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let line = format!(
        "target canary (wave 0, context sim-1): runs commit {} (v1), this deploy is {}; deploy wave 0 first (rollguard deploy --wave 0), then wave 1 again",
        &a[..7],
        &b[..7]
    );
    assert!(
        run.stderr
            .contains("deploy --wave 1 refused, nothing was written: 1 target of an earlier wave is not on this deploy's commit:")
            && run.stderr.contains(&line),
        "want {line:?}\n{}",
        run.output()
    );
    // Not a write anywhere, not even a Lease; no report, no record.
    assert_eq!(all_writes(&env, 2), before, "{}", run.output());
    assert!(run.report.is_none(), "{}", run.output());
    assert!(records(&env, 2).await.is_empty());

    // A dry run says it and goes on (it writes nothing to hold back).
    let run = env.deploy(&["--wave", "1", "--dry-run"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(
        run.stderr
            .contains("warning: without --dry-run, deploy --wave 1 would not start: 1 target of an earlier wave is not on this deploy's commit:")
            && run.stderr.contains(&line),
        "{}",
        run.output()
    );
    assert_eq!(all_writes(&env, 2), before, "{}", run.output());

    // Once wave 0 runs it, wave 1 follows.
    let run = env.deploy(&["--wave", "0"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let run = env.deploy(&["--wave", "1"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_runs(&env, 2, "example.com/web:v3").await;
}
