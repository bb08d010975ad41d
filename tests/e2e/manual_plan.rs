//! The engine's pieces of a manual rollback through the coordinator (issue 22.6): a target's
//! own manifests, commit and record kind in the plan, the plan's manual-rollback mode, and
//! the check of every history under the locks before anything is written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rollguard::engine::fleet::{HistoryCheck, run_targets, run_targets_checked};
use rollguard::engine::plan::{DeployOptions, Plan, TargetManifests};
use rollguard::release::{ReleaseKind, ReleaseOrigin, ReleaseStatus};
use rollguard::report::progress::Progress;
use rollguard::report::{Failure, TargetOutcome};
use tokio_util::sync::CancellationToken;

use crate::harness::{TestEnv, config, small_app};
use crate::release::{GOOD, assert_runs, first_good_deploy, records, statuses};

const NEWER: &str = "example.com/web:v3";

/// GOOD deployed as v1 on both clusters, then NEWER as v2.
async fn two_deploys() -> TestEnv {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(2, "30s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(NEWER));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    env
}

/// The plan of the config and manifests in `env` (as `deploy` builds it).
fn plan_of(env: &TestEnv) -> Plan {
    let config = rollguard::config::load(
        &env.path("rollguard.yaml"),
        &rollguard::config::Overrides::default(),
        &|_| None,
    )
    .expect("the config loads");
    let manifests = rollguard::manifests::load(&config).expect("the manifests load");
    let options = DeployOptions {
        cli_kubeconfig: Some(env.kubeconfig.clone()),
        ..Default::default()
    };
    Plan::new(config, manifests, None, options, HashMap::new())
}

/// The manifests of GOOD, as a manual rollback to v1 re-applies them.
fn good_set(env: &TestEnv) -> rollguard::manifests::ManifestSet {
    env.write("k8s/app.yaml", &small_app(GOOD));
    let set = plan_of(env).manifests;
    env.write("k8s/app.yaml", &small_app(NEWER));
    set
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_with_its_own_manifests_is_rolled_back_by_the_coordinator() {
    let env = two_deploys().await;
    let good = good_set(&env);
    // Only eu goes back; us deploys the plan's own set (NEWER again, forced).
    let plan = plan_of(&env)
        .with_target_manifests(
            "eu",
            TargetManifests {
                manifests: good,
                commit: None,
                origin: ReleaseOrigin::ManualRollback { to: 1 },
            },
        )
        .manual_rollback(Duration::from_secs(20));
    let runs = run_targets(Arc::new(plan), CancellationToken::new(), Progress::quiet()).await;
    for run in &runs {
        assert_eq!(
            run.report.outcome,
            TargetOutcome::Deployed,
            "{}: {:?}",
            run.target.name,
            run.report
        );
    }
    assert_runs(&env, 1, GOOD).await;
    assert_runs(&env, 2, NEWER).await;
    let eu = records(&env, 1).await;
    let us = records(&env, 2).await;
    // Forced: going back to what a cluster runs is still a new record (us's v3).
    assert_eq!(statuses(&us).len(), 3, "{us:?}");
    assert_eq!(us[2].kind, ReleaseKind::Deploy);
    assert_eq!(eu[2].revision, 3);
    assert_eq!(eu[2].status, ReleaseStatus::Deployed);
    assert_eq!(eu[2].kind, ReleaseKind::ManualRollback);
    assert_eq!(eu[2].rollback_of, Some(1));
    // The record holds the manifests it re-applied: v1's, not the plan's.
    assert_eq!(eu[2].digest, eu[0].digest);
    assert_ne!(eu[2].digest, eu[1].digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_refused_under_the_locks_stops_every_target_before_a_write() {
    let env = two_deploys().await;
    let plan = plan_of(&env).manual_rollback(Duration::from_secs(20));
    let refuse_us = |run: &rollguard::engine::target_run::TargetRun,
                     history: &rollguard::release::session::OpenHistory| {
        // The check sees the history read under the lock.
        assert_eq!(history.revisions(), vec![1, 2]);
        match run.target.name.as_str() {
            "us" => Err(Box::new(Failure {
                object: "history".into(),
                reason: "HistoryMoved".into(),
                message: "its history moved".into(),
                ..Default::default()
            })),
            _ => Ok(()),
        }
    };
    let check: &HistoryCheck = &refuse_us;
    let runs = run_targets_checked(
        Arc::new(plan),
        CancellationToken::new(),
        Progress::quiet(),
        Some(check),
    )
    .await;
    let by_name = |name: &str| {
        runs.iter()
            .find(|r| r.target.name == name)
            .expect("every target has a run")
    };
    let (eu, us) = (by_name("eu"), by_name("us"));
    assert_eq!(us.report.outcome, TargetOutcome::Failed, "{:?}", us.report);
    assert_eq!(us.report.failures[0].reason, "HistoryMoved");
    assert_eq!(eu.report.outcome, TargetOutcome::Skipped, "{:?}", eu.report);
    let message = eu.report.message.clone().unwrap_or_default();
    assert!(message.contains("us refused"), "{message}");
    for cluster in [1, 2] {
        assert_eq!(records(&env, cluster).await.len(), 2, "sim-{cluster}");
        assert_runs(&env, cluster, NEWER).await;
    }
    // Every lock was released: the next deploy takes them at once.
    let next = env.deploy(&["--lock-timeout", "2s"]).await;
    assert_eq!(next.code, 0, "{}", next.output());
}
