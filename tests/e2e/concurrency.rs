//! Concurrent runs and flaky APIs (issue 10), end to end: runs as separate processes, as CI
//! starts them, against kube-sim clusters with faults.

use std::time::{Duration, Instant};

use kube_sim::faults::Faults;
use serde_json::{Value, json};

use crate::harness::{TestEnv, config, list, signal, small_app};
use crate::release::{
    GOOD, assert_runs, first_good_deploy, image, records, statuses, wait_for_pending, web,
};
use rollguard::release::ReleaseStatus;

/// The `deployed` records of app shop on `sim-N`.
async fn deployed(env: &TestEnv, cluster: usize) -> Vec<u64> {
    records(env, cluster)
        .await
        .iter()
        .filter(|r| r.status == ReleaseStatus::Deployed)
        .map(|r| r.revision)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_started_together_one_deploys_the_other_waits_ten_times() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    first_good_deploy(&env).await;
    // A deadlock would end both at this lock timeout, each rolling back.
    let lock = [("ROLLGUARD_LOCK_TIMEOUT", "30s")];
    for round in 0..10 {
        let want = format!("example.com/web:r{round}");
        env.write("k8s/app.yaml", &small_app(&want));
        let a = env.spawn_deploy_to("a.json", &lock);
        let b = env.spawn_deploy_to("b.json", &lock);
        let (a, b) = tokio::join!(env.finish(a, "a.json"), env.finish(b, "b.json"));
        for run in [&a, &b] {
            // Both deploy, one after the other: the second waited for the first's locks.
            assert_eq!(run.code, 0, "round {round}:\n{}", run.output());
            for target in ["eu", "us", "ap"] {
                assert_eq!(
                    run.outcome(target),
                    "deployed",
                    "round {round}:\n{}",
                    run.output()
                );
                assert!(
                    run.target(target)["rollback"].is_null(),
                    "round {round}: {}",
                    run.output()
                );
            }
        }
    }
    for cluster in 1..=3 {
        assert_runs(&env, cluster, "example.com/web:r9").await;
        let recs = records(&env, cluster).await;
        assert_eq!(
            deployed(&env, cluster).await.len(),
            1,
            "sim-{cluster}: {:?}",
            statuses(&recs)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_loses_its_lock_stops_and_the_new_holders_deploy_stands() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "20s"));
    first_good_deploy(&env).await;
    // Run A never gets healthy and holds a 2 s lease.
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let a = env.spawn_deploy_to("a.json", &[("ROLLGUARD_LEASE_SECONDS", "2")]);
    wait_for_pending(&env, 1, 2).await;
    // Every Lease request now takes 2.5 s: A's renewals stall past its lease.
    env.cluster(1).set_faults(Faults {
        latency_ms: 2500,
        only_resources: vec!["leases.coordination.k8s.io".into()],
        ..Default::default()
    });
    // Run B takes the lapsed lock over and deploys v3 while A is still around.
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let b = env.spawn_deploy_to("b.json", &[]);
    let (a, b) = tokio::join!(env.finish(a, "a.json"), env.finish(b, "b.json"));
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(b.code, 0, "{}", b.output());
    assert_eq!(a.code, 1, "{}", a.output());
    let failure = &a.target("eu")["failures"][0];
    assert_eq!(failure["reason"], "LockLost", "{}", a.output());
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("was lost")),
        "{failure:#}"
    );
    assert!(a.target("eu")["rollback"].is_null(), "{}", a.output());
    // The cluster is on B's revision, and B's record is the one deployed.
    assert_runs(&env, 1, "example.com/web:v3").await;
    let recs = records(&env, 1).await;
    assert_eq!(
        statuses(&recs),
        vec![
            (1, ReleaseStatus::Superseded),
            (2, ReleaseStatus::Failed),
            (3, ReleaseStatus::Deployed)
        ],
        "A wrote nothing over B's records"
    );
    assert_eq!(recs[1].reason.as_deref(), Some("abandoned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_on_one_cluster_and_namespace_are_refused_before_any_write() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app(GOOD));
    env.write(
        "rollguard.yaml",
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: sim-1\n  - name: eu-again\n    context: sim-1\n",
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("targets eu and eu-again") && run.stderr.contains("rollguard.yaml:7"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_declaring_one_object_conflict_naming_the_other_app() {
    let env = TestEnv::start(1, "").await;
    let shared = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n  owner: {value}\n"
        )
    };
    env.write("one/k8s/cm.yaml", &shared("one"));
    env.write("two/k8s/cm.yaml", &shared("two"));
    for app in ["one", "two"] {
        env.write(
            &format!("{app}/rollguard.yaml"),
            &format!("app: {app}\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: sim-1\n"),
        );
    }
    let run = |app: &str| {
        let args: Vec<String> = [
            "deploy",
            "--config",
            &env.path(&format!("{app}/rollguard.yaml"))
                .display()
                .to_string(),
            "--kubeconfig",
            &env.kubeconfig.display().to_string(),
            "--report",
            &env.path(&format!("{app}.json")).display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args
    };
    let one = crate::harness::rollguard(&run("one"), env.dir.path(), &[]).await;
    assert_eq!(one.code, 0, "{}", one.output());
    let writes = env.writes_besides_locks(1);
    let two = crate::harness::rollguard(&run("two"), env.dir.path(), &[]).await;
    // Refused in the preflight dry run: bad input, nothing written.
    assert_eq!(two.code, 2, "{}", two.output());
    assert_eq!(env.writes_besides_locks(1), writes, "{}", two.output());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("two.json")).expect("report"))
            .expect("json");
    let failure = &report["targets"][0]["failures"][0];
    assert_eq!(failure["reason"], "Conflict", "{report:#}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(".data.owner") && message.contains("app one"),
        "{message}"
    );
    // App one's value stands.
    let client = env.client(1).await;
    let cms = list(&client, "v1", "ConfigMap", "configmaps", "shop").await;
    let cm = cms
        .iter()
        .find(|c| c["metadata"]["name"] == "shared")
        .expect("cm");
    assert_eq!(cm["data"]["owner"], "one");
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e["manager"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_the_old_shared_manager_are_taken_over_once() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // What an older rollguard left: everything applied as "rollguard", with a field the
    // manifests no longer have.
    env.apply_as(
        1,
        "rollguard",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
    )
    .await;
    env.apply_as(
        1,
        "rollguard",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-config", "namespace": "shop"},
        "data": {"greeting": "hello", "old": "stale"}}),
    )
    .await;
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let warnings = run.target("eu")["warnings"].to_string();
    assert!(
        warnings.contains(
            "ConfigMap shop/web-config: took over the fields of the old shared field manager"
        ),
        "{warnings}"
    );
    let client = env.client(1).await;
    let cm = list(&client, "v1", "ConfigMap", "configmaps", "shop")
        .await
        .into_iter()
        .find(|c| c["metadata"]["name"] == "web-config")
        .expect("cm");
    assert_eq!(managers(&cm), vec!["rollguard-shop".to_string()], "{cm:#}");
    assert!(
        cm["data"].get("old").is_none(),
        "the old manager's own field went: {cm:#}"
    );
    // Once: the next deploy has nothing to take over.
    let again = env.deploy(&[]).await;
    assert_eq!(again.code, 0, "{}", again.output());
    assert!(
        !again.target("eu")["warnings"]
            .to_string()
            .contains("old shared field manager"),
        "{}",
        again.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_whose_wait_does_not_fit_is_rate_limited_and_a_503_costs_few_requests() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "5s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    env.cluster(1).set_faults(Faults {
        error_rate: 1.0,
        error_status: 429,
        retry_after_seconds: 100,
        ..Default::default()
    });
    env.cluster(2).set_faults(Faults {
        error_rate: 1.0,
        error_status: 503,
        ..Default::default()
    });
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let eu = &run.target("eu")["failures"][0];
    assert_eq!(eu["reason"], "RateLimited", "{}", run.output());
    assert!(
        eu["message"]
            .as_str()
            .is_some_and(|m| m.contains("wait 100s")),
        "{eu:#}"
    );
    // The 429 was not retried: its wait did not fit before the deadline.
    assert!(
        env.cluster(1).counters().total() <= 2,
        "{:?}",
        env.cluster(1).counters()
    );
    // First contact: at most ten attempts of discovery (two requests each) within the 5 s
    // deadline, and no retries below them (a retry layer under the policy multiplied this).
    let us = env.cluster(2).counters().total();
    assert!(us <= 20, "503s cost {us} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_30_percent_500s_healthy_targets_deploy_with_one_deployed_record_each() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    for cluster in 1..=3 {
        env.cluster(cluster).set_faults(Faults {
            error_rate: 0.3,
            error_status: 500,
            ..Default::default()
        });
    }
    let run = env.deploy(&[]).await;
    for cluster in 1..=3 {
        env.cluster(cluster).set_faults(Faults::default());
    }
    assert_eq!(run.code, 0, "{}", run.output());
    for cluster in 1..=3 {
        assert_runs(&env, cluster, "example.com/web:v2").await;
        let recs = records(&env, cluster).await;
        assert_eq!(
            statuses(&recs),
            vec![(1, ReleaseStatus::Superseded), (2, ReleaseStatus::Deployed)],
            "sim-{cluster}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passing_mid_apply_stops_sending_and_says_what_was_not_applied() {
    let env = TestEnv::start(1, "").await;
    // The apply's own deadline is tested: the preflight would stop at it first, unwritten.
    env.write(
        "rollguard.yaml",
        &format!("{}preflight: false\n", config(1, "1s")),
    );
    // Eight rounds of the apply's in-flight bound at 300 ms each: well past the 1 s deadline.
    let objects = 8 * rollguard::cluster::apply::MAX_IN_FLIGHT;
    let many: String = (0..objects)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  n: \"{i}\"\n"))
        .collect();
    env.write("k8s/app.yaml", &many);
    env.cluster(1).set_faults(Faults {
        latency_ms: 300,
        ..Default::default()
    });
    let run = env.deploy(&[]).await;
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(run.code, 1, "{}", run.output());
    let failures = run.target("eu")["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let not_applied: Vec<String> = failures
        .iter()
        .filter(|f| f["reason"] == "NotApplied")
        .map(|f| f["object"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(!not_applied.is_empty(), "{}", run.output());
    assert!(
        failures
            .iter()
            .filter(|f| f["reason"] == "NotApplied")
            .all(|f| f["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("not applied (deadline)"))),
        "{failures:#?}"
    );
    // What the report calls not applied never reached the server.
    let client = env.client(1).await;
    let stored: Vec<String> = list(&client, "v1", "ConfigMap", "configmaps", "shop")
        .await
        .iter()
        .map(|c| {
            format!(
                "ConfigMap shop/{}",
                c["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    for object in &not_applied {
        assert!(!stored.contains(object), "{object} is on the server");
    }
    assert!(!stored.is_empty(), "some were applied before the deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_rollback_runs_out_of_budget_is_rollback_failed() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let child = env.spawn_deploy(&[]);
    wait_for_pending(&env, 1, 2).await;
    // A slow API: the rollback cannot finish in the cancel budget.
    env.cluster(1).set_faults(Faults {
        latency_ms: 500,
        ..Default::default()
    });
    signal(&child, "-TERM");
    let run = env.finish(child, "report.json").await;
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(run.code, 3, "{}", run.output());
    let target = run.target("eu");
    assert_eq!(target["outcome"], "rollback-failed", "{}", run.output());
    let message = target["rollback"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("re-applied: ") && message.contains("not re-applied: "),
        "{message}"
    );
    // It was not rolled back: the cluster is still on the cancelled revision.
    assert_ne!(image(&web(&env, 1).await), GOOD);
}

/// A cancel lets a write in flight be answered: dropping it would leave unknown whether the
/// server did it (a real API server may finish a request whose client went away), and a
/// target whose write was dropped was said to have nothing to undo. The Deployment's apply
/// is held 1.5 s by the server when SIGINT comes; it is answered, counts as a change, and
/// `on_cancel: rollback` sends the last good release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_when_the_cancel_comes_is_answered_and_rolled_back() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // The Deployment alone: the only write of the deploy is the one in flight.
    let deployment_only = |image: &str| {
        let app = small_app(image);
        app.split("---\n").nth(1).unwrap_or_default().to_string()
    };
    env.write("k8s/app.yaml", &deployment_only(GOOD));
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("k8s/app.yaml", &deployment_only("example.com/web:v2"));
    env.cluster(1).set_faults(Faults {
        latency_ms: 1500,
        only_resources: vec!["deployments.apps".into()],
        ..Default::default()
    });
    let applies = |env: &TestEnv| env.cluster(1).counters().get("apply", "deployments.apps");
    let before = applies(&env);
    let child = env.spawn_deploy(&[]);
    // The server counts a request as it arrives, before its latency.
    let deadline = Instant::now() + Duration::from_secs(30);
    while applies(&env) == before {
        assert!(Instant::now() < deadline, "the apply never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&child, "-INT");
    let run = env.finish(child, "report.json").await;
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(run.code, 130, "{}", run.output());
    let target = run.target("eu");
    assert_eq!(target["outcome"], "cancelled", "{}", run.output());
    // Rolled back, or (its rollout cut short by the cancel's budget) sent and not verified.
    assert!(target["rollback"].is_object(), "{}", run.output());
    // v1, v2 (answered, not dropped) and the rollback to v1.
    assert_eq!(applies(&env), before + 2, "{}", run.output());
    assert_runs(&env, 1, GOOD).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_refused_on_one_target_writes_nothing_anywhere_and_gives_back_the_others() {
    let env = TestEnv::start(3, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}on_failure: rollback-failed\n", config(3, "60s")),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    // us's Lease answers 403 (RBAC without leases): not contention, not retried.
    env.cluster(2).set_faults(Faults {
        error_rate: 1.0,
        error_status: 403,
        only_resources: vec!["leases.coordination.k8s.io".into()],
        ..Default::default()
    });
    let before: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    let run = env.deploy(&[]).await;
    env.cluster(2).set_faults(Faults::default());
    assert_eq!(run.code, 1, "{}", run.output());
    let after: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    assert_eq!(after, before, "written before every lock was held");
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
    assert_eq!(run.target("us")["failures"][0]["object"], "lock");
    for target in ["eu", "ap"] {
        assert_eq!(run.outcome(target), "skipped", "{}", run.output());
        let message = run.target(target)["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("not started: the lock of target us could not be taken"),
            "{target}: {message}"
        );
        assert!(run.target(target)["rollback"].is_null(), "{}", run.output());
    }
    // eu's and ap's locks were given back: the next run takes them at once.
    let again = env.deploy(&["--lock-timeout", "1s"]).await;
    assert_eq!(again.code, 0, "{}", again.output());
    for cluster in 1..=3 {
        assert_runs(&env, cluster, "example.com/web:v2").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_the_new_revision_never_reached_behind_a_429_is_failed_not_rollback_failed() {
    let env = TestEnv::start(2, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}on_failure: rollback-all\n", config(2, "5s")),
    );
    first_good_deploy(&env).await;
    // A 429 in the apply is tested: the preflight would stop at it first, unwritten.
    env.write(
        "rollguard.yaml",
        &format!(
            "{}on_failure: rollback-all\npreflight: false\n",
            config(2, "5s")
        ),
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    // eu's Deployments answer 429 asking for 100 s: the new image never reaches eu (its
    // ConfigMap is unchanged), and its rollback cannot send the Deployment either. The 429
    // comes after 300 ms, so that us has sent the new revision before eu fails (else the
    // policy stops us before it sent anything, and it is skipped, not rolled back).
    env.cluster(1).set_faults(Faults {
        latency_ms: 300,
        error_rate: 1.0,
        error_status: 429,
        retry_after_seconds: 100,
        only_resources: vec!["deployments.apps".into()],
        ..Default::default()
    });
    let run = env.deploy(&[]).await;
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(
        run.code,
        1,
        "a failed deploy, not a failed rollback:\n{}",
        run.output()
    );
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    // Everything eu had been sent was re-applied at v1, and the rest never reached it.
    let eu_row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("eu "))
        .unwrap_or_default();
    assert!(eu_row.contains(" v1 "), "eu runs v1: {eu_row}");
    assert_runs(&env, 1, GOOD).await;
    assert_runs(&env, 2, GOOD).await;
}

/// Issue 22.3: the bound is a bound, not batches. eu is slow (20 simulated seconds), us and
/// ap are fast; with `--concurrency 2` ap starts the moment us ends, long before eu is healthy
/// (an ordered buffer held us's slot until eu ended, so ap's apply came after eu's rollout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_target_gives_its_slot_to_the_next_at_once() {
    let env = TestEnv::start(
        3,
        "- {cluster: sim-1, image: \"*\", behaviour: SlowStart}\n- {image: \"*\", behaviour: Ready}\n",
    )
    .await;
    env.write("rollguard.yaml", &config(3, "120s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env
        .deploy_with_env(&["--concurrency", "2"], &[("RUST_LOG", "rollguard=info")])
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let line_of = |target: &str, words: &str| run.line_of(target, words);
    assert!(
        line_of("ap", "applied") < line_of("eu", "rollout healthy"),
        "ap waited for the slow eu:\n{}",
        run.output()
    );
    assert!(
        line_of("us", "rollout healthy") < line_of("ap", "applied"),
        "ap started before a slot was free:\n{}",
        run.output()
    );
}

/// Issue 25.4: an API server's max-in-flight limit answers 429 with `Retry-After: 1`
/// before it handles the request. With a limit of 2 mutating requests (the real default is
/// 200) and 40 ms per request, rollguard's parallel applies are throttled; each waits its
/// Retry-After and the deploy succeeds, every object applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_in_flight_429_is_waited_out_and_the_deploy_succeeds() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    let mut app = small_app("example.com/web:v1");
    for i in 0..16 {
        app.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-{i}\ndata:\n  n: \"{i}\"\n"
        ));
    }
    env.write("k8s/app.yaml", &app);
    env.cluster(1).set_faults(Faults {
        latency_ms: 40,
        max_mutating_requests_inflight: 2,
        ..Default::default()
    });
    let run = env.deploy(&[]).await;
    env.cluster(1).set_faults(Faults::default());
    assert_eq!(run.code, 0, "{}", run.output());
    let counters = env.cluster(1).counters();
    let throttled: u64 = counters
        .counts
        .iter()
        .filter(|(k, _)| k.verb == kube_sim::faults::THROTTLED)
        .map(|(_, n)| n)
        .sum();
    assert!(throttled > 0, "nothing was throttled: {counters:?}");
    // A throttled request was never handled: the ConfigMaps were applied once each.
    assert_eq!(counters.get("apply", "configmaps"), 17, "{counters:?}");
}
