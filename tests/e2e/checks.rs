//! Issue 23: checks during the bake, against a real Prometheus (tests/e2e/prometheus.rs) and
//! an HTTP server on loopback. Bakes are seconds long; sample counts are asserted loosely
//! (timing decides them), verdicts and order exactly.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{Run, TestEnv, small_app};
use crate::prometheus::{Exporter, Prometheus};
use crate::release::{GOOD, assert_runs};

const NEXT: &str = "example.com/web:v2";

/// canary in wave 0 (baking `bake`), eu and us in wave 1 (no bake), with `checks`.
fn fleet(bake: &str, checks: &str) -> String {
    format!(
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - {{name: canary, context: sim-1, wave: 0}}\n  - {{name: eu, context: sim-2, wave: 1}}\n  - {{name: us, context: sim-3, wave: 1}}\nwaves:\n  - {{wave: 0, bake: {bake}}}\n{checks}"
    )
}

/// The error-rate check of the issue, on `prometheus`, with `extra` settings.
fn error_rate(prometheus: &str, extra: &str) -> String {
    format!(
        "checks:\n  - name: error-rate\n    prometheus:\n      url: {prometheus}\n      query: max({metric}{{cluster=\"{{{{target}}}}\"}})\n    fail_if: \"> 0.01\"\n    interval: 1s\n{extra}",
        metric = crate::prometheus::METRIC
    )
}

/// The v1 release everywhere, deployed without checks.
async fn first_release(env: &TestEnv) {
    env.write("rollguard.yaml", &fleet("1s", ""));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    env.write("k8s/app.yaml", &small_app(NEXT));
}

/// The report of `check` on `target`.
fn check<'a>(run: &'a Run, target: &str, check: &str) -> &'a Value {
    run.target(target)["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == check))
        .unwrap_or_else(|| panic!("no check {check} on {target}:\n{}", run.output()))
}

fn samples(check: &Value) -> Vec<&Value> {
    check["samples"]
        .as_array()
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rising_error_rate_fails_the_canary_and_stops_the_next_wave() {
    let exporter = Exporter::start(&[("canary", 0.0), ("eu", 0.0), ("us", 0.0)]).await;
    let Some(prometheus) = Prometheus::start("checks::a_rising_error_rate", &exporter).await else {
        return;
    };
    let env = TestEnv::start(3, "").await;
    first_release(&env).await;
    env.write(
        "rollguard.yaml",
        &fleet("6s", &error_rate(&prometheus.url, "")),
    );
    let before: Vec<u64> = (1..=3).map(|c| env.writes_besides_locks(c)).collect();
    let exporter = std::sync::Arc::new(exporter);
    let rise = tokio::spawn({
        let exporter = exporter.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            exporter.set("canary", 0.2);
        }
    });
    let run = env.deploy(&[]).await;
    rise.await.expect("the rise");
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("canary"), "rolled-back", "{}", run.output());
    let rate = check(&run, "canary", "error-rate");
    assert_eq!(rate["verdict"], "failed", "{rate:#}");
    assert_eq!(rate["kind"], "prometheus");
    assert_eq!(rate["threshold"], 0.01);
    let message = rate["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("error-rate = 0.2 > 0.01 at "),
        "{message}"
    );
    // The source is the rendered query: the canary's own series.
    assert!(
        rate["source"]
            .as_str()
            .unwrap_or_default()
            .contains("cluster=\"canary\""),
        "{rate:#}"
    );
    let last = samples(rate).last().copied().cloned().unwrap_or_default();
    assert_eq!(
        (last["value"].clone(), last["verdict"].clone()),
        (0.2.into(), "failed".into())
    );
    let failure = &run.target("canary")["failures"][0];
    assert_eq!(failure["reason"], "AnalysisFailed", "{failure:#}");
    assert_eq!(failure["message"], message);
    // The policy acted at once: wave 1 never started, no write but its Lease.
    for (i, name) in ["eu", "us"].iter().enumerate() {
        assert_eq!(run.outcome(name), "skipped", "{}", run.output());
        assert_eq!(
            env.writes_besides_locks(i + 2),
            before[i + 1],
            "{name} got a write"
        );
        assert_eq!(check(&run, name, "error-rate")["verdict"], "not-run");
    }
    assert_runs(&env, 1, GOOD).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flat_error_rate_lets_every_wave_deploy_with_its_samples_in_the_report() {
    let exporter = Exporter::start(&[("canary", 0.0), ("eu", 0.0), ("us", 0.0)]).await;
    let Some(_prometheus) = Prometheus::start("checks::a_flat_error_rate", &exporter).await else {
        return;
    };
    let env = TestEnv::start(3, "").await;
    env.write(
        "rollguard.yaml",
        &fleet("4s", &error_rate(&_prometheus.url, "")),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["canary", "eu", "us"] {
        assert_eq!(run.outcome(name), "deployed", "{}", run.output());
        let rate = check(&run, name, "error-rate");
        assert_eq!(rate["verdict"], "passed", "{rate:#}");
        let taken = samples(rate);
        assert!(!taken.is_empty(), "{rate:#}");
        assert!(
            taken
                .iter()
                .all(|s| s["value"] == 0.0 && s["verdict"] == "passed"),
            "{rate:#}"
        );
    }
    // The canary's bake of 4 s at 1 s: several samples, in time order; wave 1 has no bake:
    // one sample each.
    let canary = samples(check(&run, "canary", "error-rate"));
    assert!(canary.len() >= 2, "{canary:#?}");
    let times: Vec<&str> = canary
        .iter()
        .map(|s| s["time"].as_str().unwrap_or_default())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(samples(check(&run, "eu", "error-rate")).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_down_during_the_bake_is_inconclusive_unless_on_error_fails() {
    let exporter = Exporter::start(&[("canary", 0.0), ("eu", 0.0), ("us", 0.0)]).await;
    let Some(mut prometheus) = Prometheus::start("checks::prometheus_down", &exporter).await else {
        return;
    };
    let env = TestEnv::start(3, "").await;
    first_release(&env).await;
    env.write(
        "rollguard.yaml",
        &fleet("5s", &error_rate(&prometheus.url, "")),
    );
    let child = env.spawn_deploy(&[]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let url = prometheus.url.clone();
    prometheus.kill();
    let run = env.finish(child, "report.json").await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["canary", "eu", "us"] {
        assert_eq!(run.outcome(name), "deployed", "{}", run.output());
    }
    let rate = check(&run, "canary", "error-rate");
    assert_eq!(rate["verdict"], "inconclusive", "{rate:#}");
    let last = samples(rate).last().copied().cloned().unwrap_or_default();
    assert_eq!(last["verdict"], "inconclusive", "{rate:#}");
    assert!(
        last["note"]
            .as_str()
            .unwrap_or_default()
            .contains("Prometheus"),
        "{last:#}"
    );

    // The same with `on_error: fail`: the canary fails on it and rolls back.
    env.write(
        "rollguard.yaml",
        &fleet("5s", &error_rate(&url, "    on_error: fail\n")),
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v3"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("canary"), "rolled-back", "{}", run.output());
    let rate = check(&run, "canary", "error-rate");
    assert_eq!(rate["verdict"], "failed", "{rate:#}");
    let message = rate["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("error-rate: Prometheus: no answer from 127.0.0.1"),
        "{message}"
    );
    assert_eq!(run.outcome("eu"), "skipped", "{}", run.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_check_fails_the_one_target_that_answers_503() {
    let server = Exporter::start(&[]).await;
    server.set_status("us", 503);
    let env = TestEnv::start(3, "").await;
    first_release(&env).await;
    let checks = format!(
        "on_failure: rollback-failed\nchecks:\n  - name: healthz\n    http:\n      url: \"{}/healthz/{{{{target}}}}\"\n      expect_status: 200\n      expect_body: \"ok\"\n      timeout: 2s\n    interval: 1s\n",
        server.url()
    );
    // Every target in wave 0 with a short bake.
    let config = fleet("3s", &checks).replace("wave: 1}", "wave: 0}");
    env.write("rollguard.yaml", &config);
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("us"), "rolled-back", "{}", run.output());
    let us = check(&run, "us", "healthz");
    assert_eq!(us["verdict"], "failed", "{us:#}");
    assert_eq!(us["kind"], "http");
    let message = us["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("healthz = 503 (expected 200, got 503) at "),
        "{message}"
    );
    for name in ["canary", "eu"] {
        assert_eq!(run.outcome(name), "deployed", "{}", run.output());
        let probe = check(&run, name, "healthz");
        assert_eq!(probe["verdict"], "passed", "{probe:#}");
        assert!(
            samples(probe).iter().all(|s| s["value"] == 200.0),
            "{probe:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollguard_check_prints_one_line_per_target_and_check() {
    let exporter = Exporter::start(&[("canary", 0.2), ("eu", 0.0), ("us", 0.0)]).await;
    let Some(prometheus) = Prometheus::start("checks::rollguard_check", &exporter).await else {
        return;
    };
    exporter.set_status("eu", 503);
    let env = TestEnv::start(3, "").await;
    let probe = format!(
        "  - name: healthz\n    http:\n      url: \"{}/healthz/{{{{target}}}}\"\n",
        exporter.url()
    );
    env.write(
        "rollguard.yaml",
        &fleet("1m", &(error_rate(&prometheus.url, "") + &probe)),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.command("check", &[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let lines: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .collect()
        })
        .collect();
    let want: Vec<Vec<&str>> = vec![
        vec!["canary", "error-rate", "0.2 > 0.01", "failed"],
        vec!["canary", "healthz", "200", "passed"],
        vec!["eu", "error-rate", "0 (fails if > 0.01)", "passed"],
        vec!["eu", "healthz", "503 (expected 200, got 503)", "failed"],
        vec!["us", "error-rate", "0 (fails if > 0.01)", "passed"],
        vec!["us", "healthz", "200", "passed"],
    ];
    assert_eq!(lines, want, "{}", run.output());
    // Nothing was deployed.
    assert_eq!(env.writes(1), 0);

    // `diff` lists the checks each target would run, rendered for it.
    let diff = env.command("diff", &[]).await;
    assert!(
        diff.stderr.contains(&format!(
            "  eu: error-rate (every 1s, fails if > 0.01): max(error_rate{{cluster=\"eu\"}}) on {}",
            prometheus.url
        )),
        "{}",
        diff.output()
    );
    assert!(
        diff.stderr.contains(&format!(
            "  us: healthz (every 10s, fails if status != 200): GET {}/healthz/us",
            exporter.url()
        )),
        "{}",
        diff.output()
    );

    // A bad fail_if is bad input, with its line, before anything runs.
    let text = std::fs::read_to_string(env.path("rollguard.yaml")).expect("config");
    env.write(
        "rollguard.yaml",
        &text.replace("\"> 0.01\"", "\"about 0.01\""),
    );
    let run = env.command("check", &[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("rollguard.yaml:15: check \"error-rate\" fail_if"),
        "{}",
        run.output()
    );

    // An unset token variable: bad input for deploy (before any write) and check, at its
    // line; the release commands, which run no check, do not need it.
    env.write(
        "rollguard.yaml",
        &text.replace(
            "      query:",
            "      token_env: ROLLGUARD_TEST_UNSET_TOKEN\n      query:",
        ),
    );
    let unset = "rollguard.yaml:14: check \"error-rate\" prometheus: token_env: $ROLLGUARD_TEST_UNSET_TOKEN is not set";
    for command in ["check", "deploy"] {
        let run = env.command(command, &[]).await;
        assert_eq!(run.code, 2, "{command}: {}", run.output());
        assert!(run.stderr.contains(unset), "{command}: {}", run.output());
    }
    assert_eq!(env.writes(1), 0);
    let history = env.command("history", &[]).await;
    assert!(
        !history.stderr.contains("ROLLGUARD_TEST_UNSET_TOKEN"),
        "{}",
        history.output()
    );
    assert_ne!(history.code, 2, "{}", history.output());
}
