//! A manual rollback goes through the deploy's sinks (issue 22.6): the same JSON report shape
//! as a deploy with each target's outcome, the final table, and in GitHub Actions the step
//! summary, the outputs and the sticky PR comment a deploy writes.

use kube_sim::faults::Faults;
use serde_json::Value;

use crate::fake_github::FakeGithub;
use crate::github::{PR, actions_env, deploy_in_actions, marker_comments};
use crate::harness::{TestEnv, config, small_app};
use crate::release::{GOOD, assert_runs, first_good_deploy};

/// The keys of a JSON object, sorted (the report's shape, not its values).
fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_of_two_targets_reports_through_the_deploys_sinks() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let first = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let second = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    let deployed = second.report.clone().expect("the deploy's report");
    // The summary file holds what the deploys wrote; the rollback's part comes after.
    let summary_path = env.path("summary.md");
    let before = std::fs::read_to_string(&summary_path).unwrap_or_default();

    let path = env.path("manual.json");
    let path_text = path.display().to_string();
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let back = env
        .command_env(
            "rollback",
            &["--revision", "1", "--yes", "--report", &path_text],
            &pairs,
        )
        .await;
    assert_eq!(back.code, 0, "{}", back.output());
    for cluster in [1, 2] {
        assert_runs(&env, cluster, GOOD).await;
    }

    // The same report document as the deploy's, each target rolled back to v1 as v3.
    let text = std::fs::read_to_string(&path).expect("rollback --report writes the report");
    let report: Value = serde_json::from_str(&text).expect("the report is JSON");
    assert_eq!(keys(&report), keys(&deployed), "{report:#}");
    assert_eq!(report["outcome"], "rolled-back", "{report:#}");
    let targets = report["targets"].as_array().expect("targets");
    let names: Vec<&str> = targets.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["eu", "us"], "{report:#}");
    for target in targets {
        assert_eq!(target["outcome"], "rolled-back", "{report:#}");
        assert_eq!(target["revision"], 3, "{report:#}");
        assert_eq!(target["rollback"]["to_revision"], 1, "{report:#}");
        let deploy_target = &deployed["targets"][0];
        for key in keys(deploy_target) {
            assert!(
                target.get(&key).is_some(),
                "{key} of a deploy's target is missing: {report:#}"
            );
        }
    }

    // The final table, as a deploy prints it.
    assert!(
        back.stdout.contains("rolled-back") && back.stdout.contains("target eu: rolled back to v1"),
        "{}",
        back.output()
    );
    // The step summary gets the rollback's report after the deploys'.
    let summary = std::fs::read_to_string(&summary_path).expect("the step summary");
    let added = summary.strip_prefix(before.as_str()).unwrap_or_default();
    assert!(
        added.contains("rolled-back") && added.contains("rolled back 2 of 2"),
        "{added}"
    );
    // The outputs name the run's outcome, as a deploy's do.
    let outputs = std::fs::read_to_string(env.path("output.txt")).expect("the outputs");
    assert!(outputs.contains("rolled-back"), "{outputs}");
    // The deploy's sticky PR comment now says the fleet was rolled back.
    let comments = marker_comments(&gh, PR);
    assert_eq!(comments.len(), 1, "one sticky comment: {comments:?}");
    assert!(
        comments[0].contains("rolled-back") && comments[0].contains("rolled back 2 of 2"),
        "{}",
        comments[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_takes_its_locks_as_a_deploy_all_or_none() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    // us's Lease answers 403 (RBAC without leases): not contention, not retried.
    env.cluster(2).set_faults(Faults {
        error_rate: 1.0,
        error_status: 403,
        only_resources: vec!["leases.coordination.k8s.io".into()],
        ..Default::default()
    });
    let before: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    let back = env.command("rollback", &["--yes"]).await;
    env.cluster(2).set_faults(Faults::default());
    assert_eq!(back.code, 1, "{}", back.output());
    let after: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    assert_eq!(after, before, "written before every lock was held");
    // The refused lock says why; the others say, as in a deploy, that nothing started.
    assert!(
        back.stderr.contains("target us: Forbidden")
            && back.stderr.contains("nothing was rolled back"),
        "{}",
        back.output()
    );
    for target in ["eu", "ap"] {
        assert!(
            back.stderr.contains(&format!(
                "target {target}: not started: the lock of target us could not be taken"
            )),
            "{}",
            back.output()
        );
    }
    // eu's and ap's locks were given back: the next rollback takes them at once.
    let again = env.command("rollback", &["--yes"]).await;
    assert_eq!(again.code, 0, "{}", again.output());
    for cluster in 1..=3 {
        assert_runs(&env, cluster, GOOD).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_puts_objects_back_in_the_namespace_their_release_used() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    // The records stay in shop while the app's namespace moves.
    let before = format!("{}history:\n  namespace: shop\n", config(1, "30s"));
    env.write("rollguard.yaml", &before);
    first_good_deploy(&env).await;
    // The first `namespace: shop` is the app's (the history's is indented).
    let after = before.replacen("namespace: shop\n", "namespace: shop-next\n", 1);
    env.write("rollguard.yaml", &after);
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    let back = env.command("rollback", &["--revision", "1", "--yes"]).await;
    assert_eq!(back.code, 0, "{}", back.output());
    assert_runs(&env, 1, GOOD).await;
    // v1's objects went back to shop, where v1 applied them; v2's, in shop-next, stay as
    // they are (a rollback never prunes, nor re-applies v1 elsewhere).
    let client = env.client(1).await;
    let moved =
        crate::harness::list(&client, "apps/v1", "Deployment", "deployments", "shop-next").await;
    assert_eq!(moved.len(), 1, "{moved:#?}");
    assert_eq!(
        crate::release::image(&moved[0]),
        "example.com/web:v3",
        "{}",
        back.output()
    );
}

/// A manual rollback keeps to the memory budget: one that holds a single target of this app
/// (512 KiB) makes the three targets go back one after the other (each re-applies only once
/// the one before is healthy again), and the report says the bound and why. It ran every
/// target at once whatever the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_keeps_to_the_memory_budget() {
    let env = TestEnv::start(3, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write(
        "rollguard.yaml",
        &format!("{}memory_budget: 512KiB\n", config(3, "60s")),
    );
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let second = env.deploy(&[]).await;
    assert_eq!(second.code, 0, "{}", second.output());

    let path = env.path("manual.json");
    let path_text = path.display().to_string();
    let back = env
        .command_env(
            "rollback",
            &["--revision", "1", "--yes", "--report", &path_text],
            &[("RUST_LOG", "rollguard=info")],
        )
        .await;
    assert_eq!(back.code, 0, "{}", back.output());
    for cluster in [1, 2, 3] {
        assert_runs(&env, cluster, GOOD).await;
    }
    let text = std::fs::read_to_string(&path).expect("rollback --report writes the report");
    let report: Value = serde_json::from_str(&text).expect("the report is JSON");
    let concurrency = &report["concurrency"];
    assert_eq!(concurrency["value"], 1, "{concurrency:#}");
    assert_eq!(
        concurrency["memory_budget_bytes"],
        512 * 1024,
        "{concurrency:#}"
    );
    back.assert_one_at_a_time(&["eu", "us", "ap"], "applied", "rollout healthy");
}
