//! `rollguard demo`: the main job on an embedded app, on a fresh machine, in well under a
//! minute and with no network beyond loopback. It starts three kube-sim clusters in this
//! process, deploys version 1 of a small app to all three, then version 2, whose image
//! cannot be pulled in one cluster (a kube-sim rule), and shows the fast failure and the
//! report. It goes through the same config loading and fleet code as `rollguard deploy`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::cli::{ConfigFiles, DemoArgs, DeployArgs, Selection};
use crate::commands::deploy::{
    cancel_on_signals, env_snapshot, finish_report, plan_off_runtime, run_plan,
};
use crate::error::{Error, exit};
use crate::report::{Report, TargetOutcome};
use crate::util::duration::format_duration;

/// The demo's config: three targets on the three simulated clusters.
pub const DEMO_CONFIG: &str = "\
app: shop
namespace: shop
manifests: [k8s/]
targets:
  - name: eu
    context: sim-1
  - name: us
    context: sim-2
  - name: ap
    context: sim-3
wait:
  timeout: 2m
";

/// The kube-sim rule that makes version 2 unpullable in one cluster only.
pub const DEMO_RULES: &str = "- {cluster: sim-2, image: \"*:v2\", behaviour: ImagePullBackOff}\n";

/// The embedded app; `{version}` is replaced by v1 or v2.
pub const DEMO_APP: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello from {version}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
    - port: 80
      targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 3
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
          image: example.com/shop/web:{version}
          ports:
            - containerPort: 8080
          readinessProbe:
            httpGet:
              path: /healthz
              port: 8080
";

fn write(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Demo(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| Error::Demo(format!("cannot write {}: {e}", path.display())))
}

fn step_args(dir: &Path, kubeconfig: &Path, report: Option<&Path>) -> DeployArgs {
    DeployArgs {
        selection: Selection {
            files: ConfigFiles {
                config: Some(dir.join("rollguard.yaml")),
                kubeconfig: Some(kubeconfig.to_path_buf()),
            },
            targets: Vec::new(),
        },
        timeout: None,
        commit: None,
        report: report.map(Path::to_path_buf),
        force_conflicts: false,
        dry_run: false,
        force: false,
        prune: false,
        on_failure: None,
        concurrency: None,
        memory_budget: None,
        lock_timeout: None,
        wave: None,
        shard: None,
        plan_output: Default::default(),
        saved: Default::default(),
        github: Default::default(),
    }
}

async fn deploy_version(
    dir: &Path,
    kubeconfig: &Path,
    version: &str,
    report: Option<&Path>,
) -> Result<Report, Error> {
    write(
        &dir.join("k8s").join("app.yaml"),
        &DEMO_APP.replace("{version}", version),
    )?;
    let args = step_args(dir, kubeconfig, report);
    let mut env = env_snapshot();
    // The demo's own clusters only, whatever the shell has set.
    for key in [
        "KUBECONFIG",
        "ROLLGUARD_CONFIG",
        "INPUT_CONFIG",
        "GITHUB_SHA",
    ] {
        env.remove(key);
    }
    env.insert("GITHUB_SHA".into(), format!("demo-{version}"));
    let plan = Arc::new(plan_off_runtime(&args, env).await?);
    let report = run_plan(plan.clone(), cancel_on_signals()).await;
    finish_report(&report, args.report.as_ref(), &plan.env, false);
    Ok(report)
}

/// Runs the demo; exit 0 when it showed what it should.
pub async fn run(args: DemoArgs) -> Result<i32, Error> {
    let dir = tempfile::tempdir()
        .map_err(|e| Error::Demo(format!("cannot create a temporary folder: {e}")))?;
    let kubeconfig = dir.path().join("kubeconfig");
    let rules = DEMO_RULES;
    let scale = time_scale_note(args.time_scale);
    // Short enough for an 80-column terminal (tests/e2e/terminal.rs checks every row).
    eprintln!("rollguard demo: three kube-sim clusters ({scale})");
    let sim = start_sim(3, args.time_scale, rules, &kubeconfig).await?;
    write(&dir.path().join("rollguard.yaml"), DEMO_CONFIG)?;

    eprintln!("\n== Step 1: deploy shop v1 to eu (sim-1), us (sim-2) and ap (sim-3) ==");
    let started = Instant::now();
    let first = deploy_version(dir.path(), &kubeconfig, "v1", None).await?;
    eprintln!(
        "step 1 took {} ({scale})",
        format_duration(started.elapsed())
    );

    eprintln!("\n== Step 2: deploy shop v2; its image cannot be pulled on us (sim-2) ==");
    let started = Instant::now();
    let second = deploy_version(dir.path(), &kubeconfig, "v2", args.report.as_deref()).await?;
    eprintln!(
        "step 2 took {} ({scale})",
        format_duration(started.elapsed())
    );
    for line in explain(&second, args.time_scale) {
        eprintln!("{line}");
    }
    if let Some(path) = &args.report {
        eprintln!("JSON report written to {}", path.display());
    }
    sim.shutdown();
    for line in NEXT_STEPS {
        eprintln!("{line}");
    }

    let as_expected = first
        .targets
        .iter()
        .all(|t| t.outcome == TargetOutcome::Deployed)
        && second
            .targets
            .iter()
            .any(|t| t.name == "us" && t.outcome != TargetOutcome::Deployed);
    Ok(if as_expected { exit::OK } else { exit::FAILED })
}

/// What to do after the demo, on one's own manifests and clusters (each line fits 80
/// columns).
pub const NEXT_STEPS: [&str; 4] = [
    "\nNext, on your own manifests and clusters:",
    "  rollguard init     # a rollguard.yaml from your kubeconfig and manifests",
    "  rollguard diff     # what a deploy would change on each cluster (no writes)",
    "  rollguard deploy   # deploy everywhere, watch, roll back on failure",
];

/// What the demo's times mean: they are real seconds, while the simulated clusters' clocks
/// run `scale` times faster (pods start, images fail in simulated time).
pub fn time_scale_note(scale: f64) -> String {
    if scale == 1.0 {
        "simulated time runs at real speed".to_string()
    } else if scale > 1.0 {
        format!("simulated time runs {scale}× faster")
    } else {
        format!("simulated time runs {}× slower", 1.0 / scale)
    }
}

/// What step 2 showed, in words: how fast the failure was caught (in real seconds, with the
/// simulation's time scale), and what became of every target.
pub fn explain(report: &Report, time_scale: f64) -> Vec<String> {
    let mut lines = Vec::new();
    for t in &report.targets {
        if let Some(failure) = t.failures.first() {
            let waited = t
                .phases
                .iter()
                .find(|p| p.name == "wait")
                .map(|p| p.seconds);
            // Two lines, each within 80 columns.
            lines.push(format!(
                "{}: {} caught {} into the rollout",
                t.name,
                failure.reason,
                waited
                    .map(|s| format!("{s:.1} s"))
                    .unwrap_or_else(|| "early".into()),
            ));
            lines.push(format!(
                "  ({}; `kubectl rollout status` waits 600 s)",
                time_scale_note(time_scale)
            ));
        }
    }
    for t in &report.targets {
        let what = t
            .rollback
            .as_ref()
            .and_then(|rb| rb.message.clone())
            .unwrap_or_else(|| t.outcome.to_string());
        lines.push(format!("{}: {what}", t.name));
    }
    lines
}

/// Starts the simulated clusters (contexts sim-1..sim-N) and writes their kubeconfig.
async fn start_sim(
    clusters: usize,
    time_scale: f64,
    rules: &str,
    kubeconfig: &Path,
) -> Result<kube_sim::cluster::Sim, Error> {
    let rules = kube_sim::rules::parse(rules).map_err(|e| Error::Demo(e.to_string()))?;
    let options = kube_sim::SimOptions {
        clusters,
        time_scale,
        rules,
        ..Default::default()
    };
    kube_sim::Sim::start_with_kubeconfig(options, kubeconfig)
        .await
        .map_err(|e| Error::Demo(format!("cannot start kube-sim: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Failure, PhaseTiming, TargetReport};

    #[test]
    fn next_steps_fit_80_columns() {
        for line in NEXT_STEPS {
            assert!(
                line.trim_start_matches('\n').chars().count() <= 80,
                "{line}"
            );
        }
        let commands: Vec<&str> = NEXT_STEPS[1..]
            .iter()
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        assert_eq!(commands, ["init", "diff", "deploy"]);
    }

    #[test]
    fn time_scale_said_with_every_time() {
        let cases = [
            (5.0, "simulated time runs 5× faster"),
            (2.5, "simulated time runs 2.5× faster"),
            (1.0, "simulated time runs at real speed"),
            (0.5, "simulated time runs 2× slower"),
        ];
        for (scale, want) in cases {
            assert_eq!(time_scale_note(scale), want);
        }
    }

    #[test]
    fn the_catch_is_quoted_with_the_time_scale() {
        let at = jiff::Timestamp::UNIX_EPOCH;
        let mut us = TargetReport::new("us", TargetOutcome::RolledBack, at);
        us.failures.push(Failure {
            object: "Deployment shop/web".into(),
            reason: "ImagePullBackOff".into(),
            message: "cannot pull".into(),
            ..Default::default()
        });
        us.phases.push(PhaseTiming::new("wait", 0.52));
        let report = Report::new("shop", None, at, at, vec![us]);
        let lines = explain(&report, 5.0);
        assert_eq!(
            lines[..2],
            [
                "us: ImagePullBackOff caught 0.5 s into the rollout",
                "  (simulated time runs 5× faster; `kubectl rollout status` waits 600 s)"
            ]
        );
        for line in &lines {
            assert!(line.chars().count() <= 80, "{line}");
        }
    }
}
