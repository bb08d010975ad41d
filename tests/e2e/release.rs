//! Release history, the lock and automatic rollback (issue 4), end to end: the real binary
//! against kube-sim clusters.

use std::time::{Duration, Instant};

use rollguard::release::{ReleaseKind, ReleaseRecord, ReleaseStatus, ReleaseStore};
use serde_json::Value;

use crate::harness::{
    Run, TestEnv, config, deployment_available, git, list, rollguard, signal, small_app,
};

pub(crate) const GOOD: &str = "example.com/web:v1";
const BAD: &str = "example.com/web:v2";

/// Three clusters where `BAD` cannot be pulled on sim-2 (target `us`) and runs everywhere else.
async fn fleet_with_bad_us() -> TestEnv {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(3, &rules).await;
    env.write("rollguard.yaml", &config(3, "60s"));
    env
}

/// The release records of app `shop` on cluster `sim-N`, oldest first.
pub(crate) async fn records(env: &TestEnv, cluster: usize) -> Vec<ReleaseRecord> {
    ReleaseStore::new(env.client(cluster).await, "shop", "shop", 10)
        .list()
        .await
        .expect("records readable")
}

pub(crate) fn statuses(records: &[ReleaseRecord]) -> Vec<(u64, ReleaseStatus)> {
    records.iter().map(|r| (r.revision, r.status)).collect()
}

pub(crate) async fn web(env: &TestEnv, cluster: usize) -> Value {
    let client = env.client(cluster).await;
    list(&client, "apps/v1", "Deployment", "deployments", "shop")
        .await
        .into_iter()
        .find(|d| d["metadata"]["name"] == "web")
        .expect("Deployment web exists")
}

pub(crate) fn image(d: &Value) -> String {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The Deployment runs `want` and all its pods are ready.
pub(crate) async fn assert_runs(env: &TestEnv, cluster: usize, want: &str) {
    let d = web(env, cluster).await;
    assert_eq!(image(&d), want, "sim-{cluster}");
    assert!(
        deployment_available(&d),
        "sim-{cluster} web not available: {:#}",
        d["status"]
    );
}

/// Deploys `GOOD` everywhere (revision 1), which must succeed.
pub(crate) async fn first_good_deploy(env: &TestEnv) {
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
}

fn rollback_of(run: &Run, target: &str) -> Value {
    run.target(target)["rollback"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_all_brings_every_target_back() {
    let env = fleet_with_bad_us().await;
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2), ("ap", 3)] {
        assert_eq!(run.outcome(target), "rolled-back", "{}", run.output());
        assert_eq!(
            rollback_of(&run, target)["to_revision"],
            1,
            "{}",
            run.output()
        );
        assert_runs(&env, cluster, GOOD).await;
        let recs = records(&env, cluster).await;
        // v1 good, v2 the new one, v3 the rollback to v1. v2 failed on us; elsewhere the
        // policy stopped its wait at us's failure (failed, saying why), or it was healthy
        // by then and is superseded by the rollback.
        let v2 = if cluster == 2 || recs[1].status == ReleaseStatus::Failed {
            ReleaseStatus::Failed
        } else {
            ReleaseStatus::Superseded
        };
        if cluster != 2 && v2 == ReleaseStatus::Failed {
            let reason = recs[1].reason.clone().unwrap_or_default();
            assert!(
                reason.contains("policy rollback-all: us failed at"),
                "sim-{cluster}: {reason}"
            );
        }
        assert_eq!(
            statuses(&recs),
            vec![
                (1, ReleaseStatus::Superseded),
                (2, v2),
                (3, ReleaseStatus::Deployed)
            ],
            "sim-{cluster}"
        );
        assert_eq!(recs[2].kind, ReleaseKind::Rollback);
        assert_eq!(recs[2].rollback_of, Some(1));
    }
    let summary = run.report.as_ref().expect("report")["summary"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(summary.contains("rolled back 3 of 3"), "{summary}");
}

/// The policy's rollbacks keep to the memory budget, not to `concurrency`: with a budget
/// that holds one target (512 KiB) and `concurrency: 3`, the three targets deploy at once
/// and go back one after the other, each rollback starting after the one before ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policys_rollbacks_keep_to_the_memory_budget() {
    let env = fleet_with_bad_us().await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}concurrency: 3\nmemory_budget: 512KiB\n",
            config(3, "60s")
        ),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let time = |v: &Value| -> jiff::Timestamp {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a timestamp: {v}\n{}", run.output()))
    };
    let mut turns: Vec<(jiff::Timestamp, jiff::Timestamp, &str)> = ["eu", "us", "ap"]
        .iter()
        .map(|t| {
            assert_eq!(run.outcome(t), "rolled-back", "{}", run.output());
            let target = run.target(t);
            (
                time(&target["rollback"]["started_at"]),
                time(&target["finished_at"]),
                *t,
            )
        })
        .collect();
    turns.sort();
    for pair in turns.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "{}'s rollback started before {}'s ended: {turns:?}",
            pair[1].2,
            pair[0].2
        );
    }
    for cluster in [1, 2, 3] {
        assert_runs(&env, cluster, GOOD).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_failed_only_touches_the_failed_target_and_prunes_nothing() {
    let env = fleet_with_bad_us().await;
    first_good_deploy(&env).await;
    // The new revision also adds a ConfigMap that v1 does not have.
    let extra =
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: only-in-v2\ndata:\n  a: b\n";
    env.write("k8s/app.yaml", &format!("{}{extra}", small_app(BAD)));
    let run = env.deploy(&["--on-failure", "rollback-failed"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("ap"), "deployed", "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    assert_runs(&env, 1, BAD).await;
    assert_runs(&env, 3, BAD).await;
    assert_runs(&env, 2, GOOD).await;

    // Not pruned: still there, and named in the report.
    let client = env.client(2).await;
    let configmaps = list(&client, "v1", "ConfigMap", "configmaps", "shop").await;
    assert!(
        configmaps
            .iter()
            .any(|c| c["metadata"]["name"] == "only-in-v2"),
        "the ConfigMap only v2 had must stay"
    );
    let left = rollback_of(&run, "us")["left_in_place"].clone();
    assert!(
        left.as_array()
            .is_some_and(|l| l.iter().any(|o| o == "ConfigMap shop/only-in-v2")),
        "left_in_place: {left}"
    );

    let us = records(&env, 2).await;
    assert_eq!(
        statuses(&us),
        vec![
            (1, ReleaseStatus::Superseded),
            (2, ReleaseStatus::Failed),
            (3, ReleaseStatus::Deployed)
        ]
    );
    assert!(
        us[1]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("ImagePullBackOff")),
        "{:?}",
        us[1].reason
    );
    let eu = records(&env, 1).await;
    assert_eq!(
        statuses(&eu),
        vec![(1, ReleaseStatus::Superseded), (2, ReleaseStatus::Deployed)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_if_all_fail_and_none_leave_a_partial_failure() {
    for policy in ["rollback-if-all-fail", "none"] {
        let env = fleet_with_bad_us().await;
        first_good_deploy(&env).await;
        env.write("k8s/app.yaml", &small_app(BAD));
        let run = env.deploy(&["--on-failure", policy]).await;
        assert_eq!(run.code, 1, "{policy}: {}", run.output());
        assert_eq!(run.outcome("eu"), "deployed", "{policy}: {}", run.output());
        assert_eq!(run.outcome("ap"), "deployed", "{policy}: {}", run.output());
        assert_eq!(run.outcome("us"), "failed", "{policy}: {}", run.output());
        assert!(
            rollback_of(&run, "us").is_null(),
            "{policy}: {}",
            run.output()
        );
        // us keeps the broken revision; its last good is still v1.
        assert_eq!(image(&web(&env, 2).await), BAD, "{policy}");
        assert_eq!(
            statuses(&records(&env, 2).await),
            vec![(1, ReleaseStatus::Deployed), (2, ReleaseStatus::Failed)],
            "{policy}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_if_all_fail_rolls_back_when_all_fail() {
    let env = TestEnv::start(
        2,
        &format!("- {{image: \"{BAD}\", behaviour: ImagePullBackOff}}\n"),
    )
    .await;
    env.write("rollguard.yaml", &config(2, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&["--on-failure", "rollback-if-all-fail"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2)] {
        assert_eq!(run.outcome(target), "rolled-back", "{}", run.output());
        assert_runs(&env, cluster, GOOD).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_deploy_failing_deletes_nothing() {
    let env = fleet_with_bad_us().await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("us"), "failed", "{}", run.output());
    let rollback = rollback_of(&run, "us");
    assert!(
        rollback["message"]
            .as_str()
            .is_some_and(|m| m.contains("nothing to roll back to")),
        "{}",
        run.output()
    );
    // Everything applied is still there.
    assert_eq!(image(&web(&env, 2).await), BAD);
    let client = env.client(2).await;
    let configmaps = list(&client, "v1", "ConfigMap", "configmaps", "shop").await;
    assert!(
        configmaps
            .iter()
            .any(|c| c["metadata"]["name"] == "web-config")
    );
    assert_eq!(
        statuses(&records(&env, 2).await),
        vec![(1, ReleaseStatus::Failed)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_fails_its_rollback_but_not_the_others() {
    // us cannot pull the new image; ap's new pods never become ready, and while rollguard
    // waits for them, ap goes down. eu and us roll back; ap's rollback cannot reach it.
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n\
         - {{cluster: sim-3, image: \"{BAD}\", behaviour: NeverReady}}\n\
         - {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(3, &rules).await;
    env.write("rollguard.yaml", &config(3, "10s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));
    let deploy = env.deploy(&[]);
    let take_down = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let client = env.client(3).await;
            let applied = list(&client, "apps/v1", "Deployment", "deployments", "shop")
                .await
                .iter()
                .any(|d| d["metadata"]["name"] == "web" && image(d) == BAD);
            if applied || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.cluster(3).set_down(true);
    };
    let (run, ()) = tokio::join!(deploy, take_down);
    assert_eq!(run.code, 3, "{}", run.output());
    assert_eq!(run.outcome("eu"), "rolled-back", "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    assert_eq!(run.outcome("ap"), "rollback-failed", "{}", run.output());
    // v2 added nothing that v1 lacks.
    assert_eq!(
        rollback_of(&run, "ap")["left_in_place"],
        serde_json::json!([]),
        "{}",
        run.output()
    );
    let summary = run.report.as_ref().expect("report")["summary"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(summary.contains("rolled back 2 of 3"), "{summary}");
    assert!(summary.contains("ap: "), "{summary}");
    assert_runs(&env, 1, GOOD).await;
    assert_runs(&env, 2, GOOD).await;
}

/// Waits until revision `revision` exists on `sim-N` with status pending.
pub(crate) async fn wait_for_pending(env: &TestEnv, cluster: usize, revision: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let recs = records(env, cluster).await;
        if recs
            .iter()
            .any(|r| r.revision == revision && r.status == ReleaseStatus::Pending)
            && image(&web(env, cluster).await) != GOOD
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "revision {revision} never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_never_wedges_the_next_one() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let lease = [("ROLLGUARD_LEASE_SECONDS", "2")];
    let mut child = env.spawn_deploy(&lease);
    wait_for_pending(&env, 1, 2).await;
    signal(&child, "-KILL");
    let _ = child.wait().await;

    // The next run: the lease lapses 2 s after the last renewal and is taken over.
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let args: Vec<String> = [
        "deploy",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--kubeconfig",
        &env.kubeconfig.display().to_string(),
        "--report",
        &env.path("report2.json").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = rollguard(&args, env.dir.path(), &lease).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(env.path("report2.json")).expect("report written"),
    )
    .expect("report json");
    let warnings = report["targets"][0]["warnings"].to_string();
    assert!(warnings.contains("abandoned"), "{warnings}");
    assert!(warnings.contains("took over the lock"), "{warnings}");
    // What is known of the killed run: where it ran, and that it never released its lock.
    assert!(
        warnings.contains("release v2 was left pending by ")
            && warnings.contains("host ")
            && warnings.contains(
                "its lock expired unreleased, so it died or lost this cluster before it ended"
            ),
        "{warnings}"
    );
    let recs = records(&env, 1).await;
    assert_eq!(
        statuses(&recs),
        vec![
            (1, ReleaseStatus::Superseded),
            (2, ReleaseStatus::Failed),
            (3, ReleaseStatus::Deployed)
        ]
    );
    assert_eq!(recs[1].reason.as_deref(), Some("abandoned"));
    assert_runs(&env, 1, "example.com/web:v3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_rolls_back_writes_records_and_exits_130() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let child = env.spawn_deploy(&[]);
    wait_for_pending(&env, 1, 2).await;
    wait_for_pending(&env, 2, 2).await;
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
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(env.path("report.json")).expect("report written"),
    )
    .expect("report json");
    // Issue 16: the signal that came, said once ("cancelled: cancelled" before).
    assert!(
        stderr.contains("cancelled by SIGTERM") && !stderr.contains("cancelled: cancelled"),
        "{stderr}"
    );
    for (i, cluster) in [1, 2].iter().enumerate() {
        let target = &report["targets"][i];
        assert_eq!(target["outcome"], "cancelled", "{report:#}");
        assert_eq!(target["rollback"]["to_revision"], 1, "{report:#}");
        // The rollback was sent: the Deployment spec is v1 again.
        assert_eq!(image(&web(&env, *cluster).await), GOOD);
        let recs = records(&env, *cluster).await;
        assert_eq!(recs[1].status, ReleaseStatus::Failed);
        assert_eq!(recs[1].reason.as_deref(), Some("cancelled by SIGTERM"));
        assert_eq!(target["message"], "cancelled by SIGTERM", "{report:#}");
        assert_eq!(recs[2].rollback_of, Some(1));
        assert_ne!(
            recs[2].status,
            ReleaseStatus::Pending,
            "rollback record written"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_waits_for_the_lock_then_proceeds_or_fails_clearly() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    first_good_deploy(&env).await;
    // Run A holds the lock for ~5 s: its pods pass readiness late.
    let slow = small_app("example.com/web:v2").replace(
        "          image: ",
        "          readinessProbe:\n            initialDelaySeconds: 100\n            exec: {command: [\"true\"]}\n          image: ",
    );
    env.write("k8s/app.yaml", &slow);
    let a = env.spawn_deploy(&[]);
    wait_for_pending(&env, 1, 2).await;

    let args = |report: &str| -> Vec<String> {
        [
            "deploy",
            "--config",
            &env.path("rollguard.yaml").display().to_string(),
            "--kubeconfig",
            &env.kubeconfig.display().to_string(),
            "--report",
            &env.path(report).display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // B gives up after 1 s, naming the holder.
    let b = rollguard(
        &args("b.json"),
        env.dir.path(),
        &[("ROLLGUARD_LOCK_TIMEOUT", "1s")],
    )
    .await;
    assert_eq!(b.code, 1, "{}", b.output());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("b.json")).expect("b report"))
            .expect("json");
    let failure = &report["targets"][0]["failures"][0];
    assert_eq!(failure["reason"], "LockTimeout", "{report:#}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("held by") && m.contains(" since ")),
        "{failure:#}"
    );
    // C waits for A and then deploys (--force: A's release already is what C deploys).
    let mut c_args = args("c.json");
    c_args.push("--force".into());
    let c = rollguard(&c_args, env.dir.path(), &[]).await;
    assert_eq!(c.code, 0, "{}", c.output());
    let a = a.wait_with_output().await.expect("A exits");
    assert_eq!(a.status.code(), Some(0));
    let recs = records(&env, 1).await;
    // v1, A's v2, C's v3 (B never got a revision).
    assert_eq!(
        recs.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_show_and_manual_rollback() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    let secret = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: hunter2\n";
    env.write("k8s/app.yaml", &format!("{}{secret}", small_app(GOOD)));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write(
        "k8s/app.yaml",
        &format!("{}{secret}", small_app("example.com/web:v3")),
    );
    assert_eq!(env.deploy(&[]).await.code, 0);

    let base = |command: &str| -> Vec<String> {
        vec![
            command.to_string(),
            "--config".into(),
            env.path("rollguard.yaml").display().to_string(),
            "--kubeconfig".into(),
            env.kubeconfig.display().to_string(),
        ]
    };
    let history = rollguard(&base("history"), env.dir.path(), &[]).await;
    assert_eq!(history.code, 0, "{}", history.output());
    assert!(history.stdout.contains("REVISION"), "{}", history.output());
    assert!(
        history.stdout.contains("superseded"),
        "{}",
        history.output()
    );
    assert!(history.stdout.contains("deployed"), "{}", history.output());

    let mut show = base("show");
    show.extend(["--revision".into(), "1".into(), "-o".into(), "json".into()]);
    let shown = rollguard(&show, env.dir.path(), &[]).await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    assert!(!shown.stdout.contains("hunter2"), "Secret value leaked");
    assert!(
        shown.stdout.contains("<redacted sha256:"),
        "{}",
        shown.output()
    );
    let shown: Value = serde_json::from_str(&shown.stdout).expect("show -o json is JSON");
    assert_eq!(shown["eu"]["revision"], 1, "{shown:#}");

    // A revision that does not exist is refused (a failed one: see below).
    let mut refused = base("rollback");
    refused.extend(["--revision".into(), "9".into(), "--yes".into()]);
    let refused = rollguard(&refused, env.dir.path(), &[]).await;
    assert_eq!(refused.code, 2, "{}", refused.output());
    assert!(
        refused.stderr.contains("revision 9 does not exist"),
        "{}",
        refused.output()
    );

    let mut dry = base("rollback");
    dry.extend(["--revision".into(), "1".into(), "--dry-run".into()]);
    let dry = rollguard(&dry, env.dir.path(), &[]).await;
    assert_eq!(dry.code, 0, "{}", dry.output());
    assert!(
        dry.stdout.contains("  ~ Deployment shop/web"),
        "{}",
        dry.output()
    );
    assert_eq!(
        image(&web(&env, 1).await),
        "example.com/web:v3",
        "dry run changes nothing"
    );

    let mut back = base("rollback");
    back.extend(["--revision".into(), "1".into(), "--yes".into()]);
    let back = rollguard(&back, env.dir.path(), &[]).await;
    assert_eq!(back.code, 0, "{}", back.output());
    assert_runs(&env, 1, GOOD).await;
    let recs = records(&env, 1).await;
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[2].kind, ReleaseKind::ManualRollback);
    assert_eq!(recs[2].rollback_of, Some(1));
    assert_eq!(recs[2].status, ReleaseStatus::Deployed);

    // unlock with nothing held says so.
    let unlock = rollguard(&base("unlock"), env.dir.path(), &[]).await;
    assert_eq!(unlock.code, 0, "{}", unlock.output());
    assert!(unlock.stdout.contains("no lock"), "{}", unlock.output());
}

/// `rollback --report FILE` writes the deploy report's JSON: each target rolled back to the
/// chosen revision, recorded as the new one, its rollback commands, and why (by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_writes_a_report_of_each_target_and_why() {
    let env = TestEnv::start(2, "").await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}pipeline:\n  - apply\n  - script:\n      name: smoke\n      run: \"true\"\n      rollback: \"true\"\n",
            config(2, "60s")
        ),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());

    let path = env.path("manual.json");
    let path_text = path.display().to_string();
    let markdown = env.path("manual.md");
    let markdown_text = markdown.display().to_string();
    let back = env
        .command(
            "rollback",
            &[
                "--revision",
                "1",
                "--yes",
                "--report",
                &path_text,
                "--report-markdown",
                &markdown_text,
            ],
        )
        .await;
    assert_eq!(back.code, 0, "{}", back.output());
    // The output people read stays: one line per target, then the summary.
    assert!(
        back.stdout
            .contains("target eu: rolled back to v1 (recorded as v3)")
            && back.stdout.contains("rolled back 2 of 2"),
        "{}",
        back.output()
    );
    let text = std::fs::read_to_string(&path).expect("rollback --report writes the report");
    let report: Value = serde_json::from_str(&text).expect("the report is JSON");
    assert_eq!(report["app"], "shop", "{report:#}");
    assert_eq!(report["outcome"], "rolled-back", "{report:#}");
    assert_eq!(report["summary"], "rolled back 2 of 2", "{report:#}");
    let md = std::fs::read_to_string(&markdown).expect("--report-markdown writes the markdown");
    assert!(
        md.starts_with("### ↩️ rollguard: `shop` rolled-back") && md.contains("rolled back 2 of 2"),
        "{md}"
    );
    for (cluster, name) in [(1, "eu"), (2, "us")] {
        assert_runs(&env, cluster, GOOD).await;
        let target = report["targets"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == name))
            .unwrap_or_else(|| panic!("{name} not in the report: {report:#}"));
        assert_eq!(target["outcome"], "rolled-back", "{report:#}");
        assert_eq!(target["revision"], 3, "{report:#}");
        let rollback = &target["rollback"];
        assert_eq!(rollback["to_revision"], 1, "{report:#}");
        assert_eq!(rollback["as_revision"], 3, "{report:#}");
        assert_eq!(
            rollback["why"], "rolled back by hand (rollguard rollback) to v1",
            "{report:#}"
        );
        assert!(rollback["started_at"].is_string(), "{report:#}");
        let stages = target["stages"].as_array().expect("its rollback commands");
        assert_eq!(stages.len(), 1, "{report:#}");
        assert_eq!(stages[0]["name"], "smoke", "{report:#}");
        assert_eq!(stages[0]["rollback"], true, "{report:#}");
        assert_eq!(stages[0]["outcome"], "succeeded", "{report:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_from_git_in_a_shallow_clone() {
    let env = TestEnv::start(1, "").await;
    // The app's repository, with v1 then v3, as a bare "origin".
    let work = env.path("work");
    std::fs::create_dir_all(work.join("k8s")).expect("mkdir");
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("rollguard.yaml"), config(1, "60s")).expect("write");
    std::fs::write(work.join("k8s/app.yaml"), small_app(GOOD)).expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "v1"]);
    let v1 = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("k8s/app.yaml"), small_app("example.com/web:v3")).expect("write");
    git(&work, &["commit", "-qam", "v3"]);
    let origin = env.path("origin.git");
    git(
        env.dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            &work.display().to_string(),
            &origin.display().to_string(),
        ],
    );
    // CI's checkout: shallow, without v1.
    let ci = env.path("ci");
    git(
        env.dir.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            &format!("file://{}", origin.display()),
            &ci.display().to_string(),
        ],
    );
    let args = |command: &str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            command.to_string(),
            "--config".into(),
            ci.join("rollguard.yaml").display().to_string(),
            "--kubeconfig".into(),
            env.kubeconfig.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let deployed = rollguard(&args("deploy", &[]), &ci, &[]).await;
    assert_eq!(deployed.code, 0, "{}", deployed.output());
    assert_runs(&env, 1, "example.com/web:v3").await;

    let back = rollguard(&args("rollback", &["--from-git", &v1, "--yes"]), &ci, &[]).await;
    assert_eq!(back.code, 0, "{}", back.output());
    assert_runs(&env, 1, GOOD).await;
    let recs = records(&env, 1).await;
    let last = recs.last().expect("a record");
    assert_eq!(last.kind, ReleaseKind::ManualRollback);
    assert_eq!(
        last.commit.as_ref().map(|c| c.sha.as_str()),
        Some(v1.as_str())
    );

    let missing = rollguard(
        &args(
            "rollback",
            &[
                "--from-git",
                "0123456789abcdef0123456789abcdef01234567",
                "--yes",
            ],
        ),
        &ci,
        &[],
    )
    .await;
    // A commit that origin says it does not have is a wrong name: bad input (2). Origin out
    // of reach, below, is a failure (1): a git failure is never exit 2 (issue 21).
    assert_eq!(missing.code, 2, "{}", missing.output());
    assert!(
        missing
            .stderr
            .contains("0123456789abcdef0123456789abcdef01234567"),
        "{}",
        missing.output()
    );

    // Origin out of reach: a fetch that failed is a failure (1), never bad input (2).
    git(
        &ci,
        &[
            "remote",
            "set-url",
            "origin",
            "file:///nonexistent/origin.git",
        ],
    );
    let unreachable = rollguard(
        &args(
            "rollback",
            &[
                "--from-git",
                "0123456789abcdef0123456789abcdef01234567",
                "--yes",
            ],
        ),
        &ci,
        &[],
    )
    .await;
    assert_eq!(unreachable.code, 1, "{}", unreachable.output());
    assert!(
        unreachable
            .stderr
            .contains("could not be fetched from origin"),
        "{}",
        unreachable.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cancel_leave_keeps_the_new_revision() {
    let env = TestEnv::start(1, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}on_cancel: leave\n", config(1, "60s")),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let child = env.spawn_deploy(&[]);
    wait_for_pending(&env, 1, 2).await;
    signal(&child, "-INT");
    let out = child.wait_with_output().await.expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(image(&web(&env, 1).await), "example.com/web:neverready");
    let recs = records(&env, 1).await;
    assert_eq!(
        statuses(&recs),
        vec![(1, ReleaseStatus::Deployed), (2, ReleaseStatus::Failed)],
        "no rollback revision; v1 is still the last good one"
    );
    assert_eq!(recs[1].reason.as_deref(), Some("cancelled by SIGINT"));
}

/// A ConfigMap of about `bytes` characters that gzip cannot shrink much.
fn noisy_configmap(name: &str, bytes: usize, seed: u64) -> String {
    let mut state = seed;
    let noise: String = (0..bytes)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'a' + ((state >> 33) % 26) as u8)
        })
        .collect();
    format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  noise: {noise}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_for_a_secret_rolls_back_from_git() {
    let env = TestEnv::start(
        1,
        &format!("- {{image: \"{BAD}\", behaviour: ImagePullBackOff}}\n"),
    )
    .await;
    let work = env.path("work");
    std::fs::create_dir_all(work.join("k8s")).expect("mkdir");
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("rollguard.yaml"), config(1, "60s")).expect("write");
    let big: String = (0..4)
        .map(|i| noisy_configmap(&format!("big-{i}"), 500_000, i + 1))
        .collect();
    std::fs::write(
        work.join("k8s/app.yaml"),
        format!("{}{big}", small_app(GOOD)),
    )
    .expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "v1"]);
    let v1 = git(&work, &["rev-parse", "HEAD"]);
    let args: Vec<String> = vec![
        "deploy".into(),
        "--config".into(),
        work.join("rollguard.yaml").display().to_string(),
        "--kubeconfig".into(),
        env.kubeconfig.display().to_string(),
    ];
    let first = rollguard(&args, &work, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let recs = records(&env, 1).await;
    assert!(
        recs[0].manifests_omitted && recs[0].manifests.is_none(),
        "v1 keeps the commit only"
    );
    assert_eq!(
        recs[0].commit.as_ref().map(|c| c.sha.as_str()),
        Some(v1.as_str())
    );

    std::fs::write(
        work.join("k8s/app.yaml"),
        format!("{}{big}", small_app(BAD)),
    )
    .expect("write");
    git(&work, &["commit", "-qam", "v2"]);
    let second = rollguard(&args, &work, &[]).await;
    assert_eq!(second.code, 1, "{}", second.output());
    // The table: what happened, and what runs now (the rollback's revision, v1's commit).
    assert!(
        second.stdout.contains("rolled back 2 → 1 (as 3)")
            && second.stdout.contains(&format!("v3 ({})", &v1[..7])),
        "{}",
        second.output()
    );
    assert_runs(&env, 1, GOOD).await;
    let recs = records(&env, 1).await;
    assert_eq!(
        statuses(&recs),
        vec![
            (1, ReleaseStatus::Superseded),
            (2, ReleaseStatus::Failed),
            (3, ReleaseStatus::Deployed)
        ]
    );
    assert_eq!(recs[2].rollback_of, Some(1));
    assert_eq!(
        recs[2].commit.as_ref().map(|c| c.sha.as_str()),
        Some(v1.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_revision_is_refused_without_force() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app("nginx:doesnotexist"));
    let failed = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(failed.code, 1, "{}", failed.output());
    assert_eq!(failed.target("eu")["revision"], 2, "{}", failed.output());

    let mut refused: Vec<String> = [
        "rollback",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--kubeconfig",
        &env.kubeconfig.display().to_string(),
        "--revision",
        "2",
        "--yes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = rollguard(&refused, env.dir.path(), &[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("revision 2 is failed") && run.stderr.contains("--force"),
        "{}",
        run.output()
    );
    assert_eq!(
        image(&web(&env, 1).await),
        "nginx:doesnotexist",
        "nothing was applied"
    );
    // With --force it goes (and makes a new revision).
    refused.push("--force".into());
    let forced = rollguard(&refused, env.dir.path(), &[]).await;
    assert_ne!(forced.code, 2, "{}", forced.output());
}

/// Every key of the Secrets in namespace `ns` of cluster 1, inflated when gzip'd, as text.
async fn raw_secret_text(env: &TestEnv, ns: &str) -> String {
    use std::io::Read;
    let client = env.client(1).await;
    let mut text = String::new();
    for secret in list(&client, "v1", "Secret", "secrets", ns).await {
        for (_, value) in secret["data"].as_object().into_iter().flatten() {
            let bytes = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                value.as_str().unwrap_or(""),
            )
            .expect("base64 data");
            let mut inflated = Vec::new();
            match flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut inflated) {
                Ok(_) => text.push_str(&String::from_utf8_lossy(&inflated)),
                Err(_) => text.push_str(&String::from_utf8_lossy(&bytes)),
            }
            text.push('\n');
        }
    }
    text
}

fn app_with_secret_elsewhere(image: &str, password: &str) -> String {
    format!(
        "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: vault}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: vault}}\nstringData: {{password: {password}}}\n",
        small_app(image)
    )
}

/// history.secrets: digest (the default) keeps no value of a Secret of another namespace in
/// the record, and a rollback restores that Secret from git; `store` keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_other_namespaces_are_digests_in_records_and_rollback_restores_them() {
    let env = TestEnv::start(
        1,
        &format!("- {{image: \"{BAD}\", behaviour: ImagePullBackOff}}\n"),
    )
    .await;
    let work = env.path("work");
    std::fs::create_dir_all(work.join("k8s")).expect("mkdir");
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("rollguard.yaml"), config(1, "60s")).expect("write");
    std::fs::write(
        work.join("k8s/app.yaml"),
        app_with_secret_elsewhere(GOOD, "other-ns-value-v1"),
    )
    .expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "v1"]);
    let args = |command: &str| -> Vec<String> {
        vec![
            command.into(),
            "--config".into(),
            work.join("rollguard.yaml").display().to_string(),
            "--kubeconfig".into(),
            env.kubeconfig.display().to_string(),
        ]
    };
    let first = rollguard(&args("deploy"), &work, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let stored = raw_secret_text(&env, "shop").await;
    assert!(stored.contains("rollguard.dev/secret-digest"), "{stored}");
    for leak in ["other-ns-value-v1", "b3RoZXItbnMtdmFsdWUtdjE"] {
        assert!(
            !stored.contains(leak),
            "the record holds the Secret's value: {stored}"
        );
    }
    let mut show = args("show");
    show.extend(["--revision".into(), "1".into()]);
    let shown = rollguard(&show, &work, &[]).await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    assert!(
        shown.stdout.contains("other_namespace_secrets:")
            && shown.stdout.contains("kept: digest")
            && shown.stdout.contains("vault/db"),
        "{}",
        shown.output()
    );

    std::fs::write(
        work.join("k8s/app.yaml"),
        app_with_secret_elsewhere(BAD, "other-ns-value-v2"),
    )
    .expect("write");
    git(&work, &["commit", "-qam", "v2"]);
    let second = rollguard(&args("deploy"), &work, &[]).await;
    assert_eq!(second.code, 1, "{}", second.output());
    assert!(
        second.stdout.contains("rolled back 2 → 1"),
        "{}",
        second.output()
    );
    assert_runs(&env, 1, GOOD).await;
    let client = env.client(1).await;
    let secrets = list(&client, "v1", "Secret", "secrets", "vault").await;
    let db = secrets
        .iter()
        .find(|s| s["metadata"]["name"] == "db")
        .expect("Secret vault/db");
    let restored = db["data"]["password"]
        .as_str()
        .map(|b| {
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).expect("base64")
        })
        .or_else(|| {
            db["stringData"]["password"]
                .as_str()
                .map(|s| s.as_bytes().to_vec())
        })
        .expect("a password");
    assert_eq!(restored, b"other-ns-value-v1", "{db}");
    assert!(
        !raw_secret_text(&env, "shop")
            .await
            .contains("other-ns-value")
    );

    // `store`: the record keeps the Secret as applied, and says so.
    std::fs::write(
        work.join("rollguard.yaml"),
        format!("{}history:\n  secrets: store\n", config(1, "60s")),
    )
    .expect("write");
    std::fs::write(
        work.join("k8s/app.yaml"),
        app_with_secret_elsewhere(GOOD, "other-ns-value-v3"),
    )
    .expect("write");
    git(&work, &["commit", "-qam", "v3"]);
    let third = rollguard(&args("deploy"), &work, &[]).await;
    assert_eq!(third.code, 0, "{}", third.output());
    assert!(
        raw_secret_text(&env, "shop")
            .await
            .contains("other-ns-value-v3")
    );
    let revision = records(&env, 1)
        .await
        .last()
        .map(|r| r.revision)
        .expect("a record");
    let mut show = args("show");
    show.extend(["--revision".into(), revision.to_string()]);
    let shown = rollguard(&show, &work, &[]).await;
    assert!(shown.stdout.contains("kept: store"), "{}", shown.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_from_a_dirty_tree_is_recorded_as_dirty() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let dir = env.dir.path();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "rollguard.yaml", "k8s"]);
    git(dir, &["commit", "-q", "-m", "shop v1"]);
    let sha = git(dir, &["rev-parse", "HEAD"]);
    let short = &sha[..7];

    // Clean (the kubeconfig and the report are untracked, which does not count).
    let clean = env.deploy(&[]).await;
    assert_eq!(clean.code, 0, "{}", clean.output());
    let commit = &clean.report.as_ref().expect("report")["commit"];
    assert_eq!(commit["sha"], sha.as_str(), "{commit}");
    assert!(commit.get("dirty").is_none(), "{commit}");

    // A change to a tracked file, not committed: deployed, and said to be.
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let dirty = env.deploy(&[]).await;
    assert_eq!(dirty.code, 0, "{}", dirty.output());
    let commit = &dirty.report.as_ref().expect("report")["commit"];
    assert_eq!(commit["sha"], sha.as_str(), "{commit}");
    assert_eq!(commit["dirty"], true, "{commit}");

    let history = env.command("history", &[]).await;
    assert_eq!(history.code, 0, "{}", history.output());
    let rows: Vec<&str> = history
        .stdout
        .lines()
        .filter(|l| l.contains(short))
        .collect();
    assert_eq!(rows.len(), 2, "{}", history.output());
    assert!(
        !rows[0].contains("(dirty)") && rows[1].contains(&format!("{short} (dirty)")),
        "revision 1 clean, revision 2 dirty:\n{}",
        history.output()
    );
    // `show` prints the record itself, which says it too.
    let shown = env
        .command("show", &["--revision", "2", "-o", "json"])
        .await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    let shown: Value = serde_json::from_str(&shown.stdout).expect("show -o json is JSON");
    assert_eq!(shown["eu"]["commit"]["dirty"], true, "{shown:#}");
    let recs = records(&env, 1).await;
    assert_eq!(
        recs.iter()
            .map(|r| r.commit.as_ref().is_some_and(|c| c.dirty))
            .collect::<Vec<_>>(),
        vec![false, true]
    );

    // Tracked files back as committed, and a new manifest file never added: it is deployed
    // all the same, so the commit is dirty.
    git(dir, &["checkout", "-q", "--", "k8s"]);
    env.write(
        "k8s/extra.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata: {a: b}\n",
    );
    let untracked = env.deploy(&[]).await;
    assert_eq!(untracked.code, 0, "{}", untracked.output());
    let commit = &untracked.report.as_ref().expect("report")["commit"];
    assert_eq!(commit["dirty"], true, "{commit}");
}

/// Issue 16: one revision number per run across the fleet, whatever each target's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_revision_per_run_across_targets_whose_histories_differ() {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(2, &rules).await;
    env.write("rollguard.yaml", &config(2, "60s"));
    // eu alone, twice: eu has v1 and v2, us nothing.
    // (Not GOOD: the run on both below would change nothing on eu.)
    for image in ["example.com/web:a", "example.com/web:b"] {
        env.write("k8s/app.yaml", &small_app(image));
        let run = env.deploy(&["--context", "eu"]).await;
        assert_eq!(run.code, 0, "{}", run.output());
    }
    let revisions = |recs: &[ReleaseRecord]| recs.iter().map(|r| r.revision).collect::<Vec<_>>();
    assert_eq!(revisions(&records(&env, 1).await), vec![1, 2]);
    assert!(records(&env, 2).await.is_empty());

    // Both: one above the highest anywhere (v3), on us too (its numbers skip 1 and 2).
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for target in ["eu", "us"] {
        assert_eq!(run.target(target)["revision"], 3, "{}", run.output());
    }
    assert_eq!(revisions(&records(&env, 1).await), vec![1, 2, 3]);
    assert_eq!(revisions(&records(&env, 2).await), vec![3]);

    // A failed deploy (us cannot pull) is v4 on both, rolled back to v3 on both as v5.
    env.write("k8s/app.yaml", &small_app(BAD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2)] {
        assert_eq!(run.outcome(target), "rolled-back", "{}", run.output());
        assert_eq!(run.target(target)["revision"], 4, "{}", run.output());
        assert_eq!(
            rollback_of(&run, target)["to_revision"],
            3,
            "{}",
            run.output()
        );
        let recs = records(&env, cluster).await;
        let last = recs.last().expect("a rollback record");
        assert_eq!(
            (last.revision, last.kind, last.rollback_of, last.status),
            (5, ReleaseKind::Rollback, Some(3), ReleaseStatus::Deployed),
            "sim-{cluster}: {:?}",
            statuses(&recs)
        );
        assert!(
            run.target(target)["warnings"].as_array().is_none_or(|w| w
                .iter()
                .all(|w| !w.as_str().unwrap_or("").contains("recorded as"))),
            "no number moved: {}",
            run.output()
        );
        assert_runs(&env, cluster, GOOD).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_that_changes_nothing_records_nothing_and_runs_no_stage() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}pipeline:
  - script: {{name: migrate, run: 'echo \"migrate $ROLLGUARD_TARGETS\" >> ran.log', scope: fleet}}
  - apply
  - script: {{name: smoke, run: 'echo \"smoke $ROLLGUARD_TARGET\" >> ran.log'}}
  - script: {{name: probe, run: 'echo \"probe $ROLLGUARD_TARGET v$ROLLGUARD_REVISION\" >> always.log', always: true}}
",
            config(2, "60s")
        ),
    );
    first_good_deploy(&env).await;
    env.write("ran.log", "");
    env.write("always.log", "");

    // The same manifests again: nothing to apply anywhere.
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2)] {
        let t = run.target(target);
        assert_eq!(t["outcome"], "deployed", "{}", run.output());
        assert_eq!(t["unchanged"], true, "{}", run.output());
        assert_eq!(t["revision"], Value::Null, "{}", run.output());
        assert!(
            t["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("no changes"),
            "{}",
            run.output()
        );
        assert_eq!(
            statuses(&records(&env, cluster).await).len(),
            1,
            "sim-{cluster}"
        );
    }
    let report = run.report.as_ref().expect("report");
    assert_eq!(
        report["summary"],
        "no changes on 2 of 2",
        "{}",
        run.output()
    );
    assert!(run.stdout.contains("no changes"), "{}", run.output());
    assert_eq!(env.read("ran.log"), "", "no stage but `always` ones ran");
    let mut always = lines(&env.read("always.log"));
    always.sort();
    assert_eq!(always, vec!["probe eu v1", "probe us v1"]);

    // A live object deleted by hand is a change, even with the same manifests.
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client(1).await, "shop");
    api.delete("web-config", &Default::default())
        .await
        .expect("delete the ConfigMap");
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.target("eu")["revision"], 2, "{}", run.output());
    assert_eq!(run.target("us")["unchanged"], true, "{}", run.output());
    assert_eq!(lines(&env.read("ran.log")), vec!["migrate eu", "smoke eu"]);

    // --force deploys anyway: a record and every stage, on both.
    env.write("ran.log", "");
    let run = env.deploy(&["--force"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for (target, cluster) in [("eu", 1), ("us", 2)] {
        assert_eq!(run.target(target)["revision"], 3, "{}", run.output());
        assert!(
            run.target(target).get("unchanged").is_none(),
            "{}",
            run.output()
        );
        assert_eq!(
            records(&env, cluster).await.len(),
            2 + usize::from(cluster == 1)
        );
    }
    assert_eq!(env.read("ran.log").lines().count(), 3, "{}", run.output());
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_names_different_runs_is_refused_with_the_runs() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    // Separate runs per target: each numbers only its own target's history, so v1 and v2
    // name different runs on eu and us.
    for (target, image) in [("eu", "a"), ("eu", "b"), ("us", "c"), ("us", "d")] {
        env.write(
            "k8s/app.yaml",
            &small_app(&format!("example.com/web:{image}")),
        );
        let run = env.deploy(&["--target", target]).await;
        assert_eq!(run.code, 0, "{}", run.output());
    }
    let shown = env.command("show", &["--revision", "1"]).await;
    assert_eq!(shown.code, 2, "{}", shown.output());
    assert!(
        shown.stderr.contains("v1 names different runs")
            && shown.stderr.contains("eu: deploy")
            && shown.stderr.contains("us: deploy")
            && shown.stderr.contains("--target"),
        "{}",
        shown.output()
    );
    let one = env
        .command("show", &["--revision", "1", "--target", "eu"])
        .await;
    assert_eq!(one.code, 0, "{}", one.output());

    let before: Vec<u64> = records(&env, 1).await.iter().map(|r| r.revision).collect();
    let back = env.command("rollback", &["--revision", "1", "--yes"]).await;
    assert_eq!(back.code, 2, "{}", back.output());
    assert!(
        back.stderr.contains("v1 names different runs"),
        "{}",
        back.output()
    );
    let after: Vec<u64> = records(&env, 1).await.iter().map(|r| r.revision).collect();
    assert_eq!(before, after, "nothing rolled back");
    assert_runs(&env, 1, "example.com/web:b").await;
}

/// `rollguard <command> --config .. --kubeconfig ..` plus `extra`, in the background, with a
/// temporary directory of its own (TMPDIR) and `stdin` (a pty's side for a prompt).
fn spawn_command(
    env: &TestEnv,
    command: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
    stdin: std::process::Stdio,
) -> tokio::process::Child {
    let tmp = env.path("tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir tmp");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollguard"));
    cmd.arg(command)
        .arg("--config")
        .arg(env.path("rollguard.yaml"))
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(extra)
        .current_dir(env.dir.path())
        .env_clear()
        .env("TMPDIR", &tmp)
        .env("RUST_LOG", "rollguard=info")
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for key in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("rollguard starts")
}

/// Waits (at most 60 s) until `file` in the scratch folder holds a pid.
async fn wait_for_pid(env: &TestEnv, file: &str) -> u32 {
    let started = Instant::now();
    loop {
        if let Ok(pid) = env.read(file).trim().parse::<u32>() {
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{file} never appeared"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two healthy deploys (v1 GOOD, v2 `example.com/web:v3`) through a pipeline whose script
/// stage has `rollback`.
async fn two_revisions_with_a_rollback_command(rollback: &str) -> TestEnv {
    let env = TestEnv::start(1, "").await;
    env.write(
        "rollguard.yaml",
        &format!(
            "{}pipeline:\n  - apply\n  - script:\n      name: smoke\n      run: \"true\"\n      rollback: {rollback}\n",
            config(1, "60s")
        ),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_manual_rollback_kills_its_scripts_and_releases_everything() {
    let env = two_revisions_with_a_rollback_command("./down.sh").await;
    // A rollback command that ignores SIGTERM and leaves a grandchild in a session of its
    // own that ignores it too.
    env.write_script(
        "down.sh",
        "trap '' TERM\n\
         setsid sh -c 'trap \"\" TERM; echo $$ > grandchild.pid; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &\n\
         echo $$ > script.pid\n\
         while :; do sleep 1; done",
    );
    let child = spawn_command(
        &env,
        "rollback",
        &["--yes"],
        &[],
        std::process::Stdio::null(),
    );
    let script = wait_for_pid(&env, "script.pid").await;
    let grandchild = wait_for_pid(&env, "grandchild.pid").await;
    signal(&child, "-INT");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("rollguard ended after SIGINT")
        .expect("rollguard ran");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(130), "{text}");
    assert!(
        crate::harness::process_gone(script),
        "the script survived\n{text}"
    );
    assert!(
        crate::harness::process_gone(grandchild),
        "the setsid grandchild survived\n{text}"
    );
    let left: Vec<String> = std::fs::read_dir(env.path("tmp"))
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("rollguard-kubeconfig-"))
        .collect();
    assert!(left.is_empty(), "temporary kubeconfigs left: {left:?}");
    // Its lock is released: a deploy right after takes it without waiting.
    let next = env.deploy(&["--lock-timeout", "1s"]).await;
    assert_eq!(next.code, 0, "{}", next.output());
    let pending: Vec<u64> = records(&env, 1)
        .await
        .iter()
        .filter(|r| r.status == ReleaseStatus::Pending)
        .map(|r| r.revision)
        .collect();
    assert!(pending.is_empty(), "records left pending: {pending:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_that_hangs_is_stopped_at_its_deadline() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    // A git that never answers (a remote that hangs, in effect), first on PATH.
    env.write_script("bin/git", "sleep 60");
    let path = format!(
        "{}:{}",
        env.path("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = env
        .command_env(
            "rollback",
            &[
                "--from-git",
                "0123456789abcdef0123456789abcdef01234567",
                "--yes",
            ],
            &[("PATH", path.as_str()), ("ROLLGUARD_GIT_TIMEOUT", "1s")],
        )
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(
        run.stderr.contains("did not finish within 1s")
            && run.stderr.contains("ROLLGUARD_GIT_TIMEOUT"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0);
}

/// A pty whose other side is given as stdin: `rollguard rollback` then asks.
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two new fds into master and slave; the rest are null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened by openpty and are owned here alone.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    }
}

/// Starts `rollguard rollback` on a pty, waits for its prompt, then deploys v4 meanwhile
/// (which must go through at once: no lock is held at the prompt), answers `answer` and
/// returns the rollback's exit code and stdout.
async fn answer_after_a_deploy_meanwhile(env: &TestEnv, answer: &[u8]) -> (Option<i32>, String) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let (mut master, slave) = pty();
    let mut child = spawn_command(env, "rollback", &[], &[], std::process::Stdio::from(slave));
    let mut stderr = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("[y/N]") {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(60), stderr.read(&mut buf))
            .await
            .expect("the prompt came")
            .expect("stderr reads");
        assert!(
            n > 0,
            "stderr ended before the prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    env.write("k8s/app.yaml", &small_app("example.com/web:v4"));
    let meanwhile = env.deploy(&["--lock-timeout", "1s"]).await;
    assert_eq!(meanwhile.code, 0, "{}", meanwhile.output());
    master.write_all(answer).expect("answer");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("rollguard ended")
        .expect("rollguard ran");
    let mut rest = Vec::new();
    let _ = stderr.read_to_end(&mut rest).await;
    let text = format!(
        "{}\n--- stderr\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(&rest)
    );
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollback_prompt_lists_the_commands_blocks_nobody_and_n_exits_1() {
    let env = two_revisions_with_a_rollback_command("echo undone >> order.log").await;
    let (code, text) = answer_after_a_deploy_meanwhile(&env, b"n\n").await;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("then the rollback command of stage smoke: echo undone >> order.log"),
        "{text}"
    );
    assert!(text.contains("nothing changed"), "{text}");
    assert_eq!(env.read("order.log"), "", "a rollback command ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_confirmed_after_the_history_moved_changes_nothing() {
    let env = two_revisions_with_a_rollback_command("echo undone >> order.log").await;
    let (code, text) = answer_after_a_deploy_meanwhile(&env, b"y\n").await;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("its history changed while the rollback waited for confirmation")
            && text.contains("the newest release is now v3"),
        "{text}"
    );
    assert_eq!(env.read("order.log"), "", "a rollback command ran");
    // The deploy made meanwhile stays; its lock was released.
    let newest = records(&env, 1).await.into_iter().map(|r| r.revision).max();
    assert_eq!(newest, Some(3));
    let again = env.deploy(&["--lock-timeout", "1s"]).await;
    assert_eq!(again.code, 0, "{}", again.output());
}
