//! Memory-bounded scheduling (issue 25.2): without a `concurrency`, the number of targets at
//! once is what `--memory-budget` holds; targets beyond it wait for a slot and still deploy.

use crate::harness::{TestEnv, config, small_app};

/// A 512 KiB budget holds one target of this app: the three targets deploy one after the
/// other (each applies only after the one before is healthy), the report says concurrency 1
/// and why, and every target is deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_memory_budget_runs_fewer_targets_at_once_and_all_deploy() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env
        .deploy_with_env(
            &["--memory-budget", "512KiB"],
            &[("RUST_LOG", "rollguard=info")],
        )
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let targets = ["eu", "us", "ap"];
    for t in targets {
        assert_eq!(run.outcome(t), "deployed", "{}", run.output());
    }
    let report = run.report.as_ref().expect("report");
    let concurrency = &report["concurrency"];
    assert_eq!(concurrency["value"], 1, "{concurrency:#}");
    assert_eq!(concurrency["memory_budget_bytes"], 512 * 1024);
    let reason = concurrency["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("concurrency 1 (memory budget 0.5 MiB / ")
            && reason.ends_with("per target of 2 objects)"),
        "{reason}"
    );
    assert!(
        run.output()
            .contains(&format!("1 of 3 targets at once: {reason}")),
        "{}",
        run.output()
    );
    // One slot: each target applies only once the one before it is healthy.
    run.assert_one_at_a_time(&targets, "applied", "rollout healthy");

    // The default budget (512 MiB) holds the three at once; an explicit --concurrency wins
    // over any budget. (Unchanged deploys: the concurrency is still said.)
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let c = &run.report.as_ref().expect("report")["concurrency"];
    assert!(c["value"].as_u64().unwrap_or(0) > 3, "{c:#}");
    assert_eq!(c["memory_budget_bytes"], 512 * 1024 * 1024, "{c:#}");
    assert!(
        !run.output().contains("targets at once"),
        "{}",
        run.output()
    );
    let run = env
        .deploy(&["--memory-budget", "1MiB", "--concurrency", "2"])
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let c = &run.report.as_ref().expect("report")["concurrency"];
    assert_eq!(c["value"], 2, "{c:#}");
    assert_eq!(c["reason"], "concurrency 2 (set by --concurrency)", "{c:#}");
    assert!(c.get("memory_budget_bytes").is_none(), "{c:#}");
}

/// A budget that is not a size is bad input: exit 2, saying what to write, before any
/// cluster is asked; in the file it names the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_memory_budget_exits_2_saying_what_to_write() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    env.write("rollguard.yaml", &config(1, "60s"));
    env.sim.clusters()[0].reset_counters();
    let run = env.deploy(&["--memory-budget", "512MB"]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("\"512MB\" is not a memory size") && run.stderr.contains("512MiB"),
        "{}",
        run.output()
    );
    env.write(
        "rollguard.yaml",
        &format!("{}memory_budget: 2GB\n", config(1, "60s")),
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("rollguard.yaml:9: memory_budget: \"2GB\" is not a memory size"),
        "{}",
        run.output()
    );
    assert_eq!(
        env.sim.clusters()[0].counters().total(),
        0,
        "a cluster was asked"
    );
}
