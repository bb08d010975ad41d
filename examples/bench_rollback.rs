//! Benchmark (issue 4): from the start of a bad deploy to every target rolled back and
//! healthy, on three kube-sim clusters, and the API requests it took per cluster.
//!
//! `cargo run --release --example bench_rollback -- [runs] [time_scale]` (defaults 5, 20).
//! The bad image fails on sim-2 only; under the default `rollback-all` policy all three
//! targets roll back, so the time covers detection, the rollbacks and their rollouts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rollguard::cli::DeployArgs;
use rollguard::progress::Progress;
use rollguard::report::TargetOutcome;
use tokio_util::sync::CancellationToken;

const APP: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: IMAGE
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data: {greeting: hello}
";

fn args(dir: &std::path::Path) -> DeployArgs {
    DeployArgs {
        config: Some(dir.join("rollguard.yaml")),
        kubeconfig: Some(dir.join("kubeconfig")),
        contexts: Vec::new(),
        timeout: None,
        commit: None,
        report: None,
        force_conflicts: false,
        dry_run: false,
        on_failure: None,
        concurrency: None,
        lock_timeout: None,
    }
}

async fn deploy(dir: &std::path::Path, image: &str) -> rollguard::report::Report {
    std::fs::write(dir.join("k8s/app.yaml"), APP.replace("IMAGE", image)).expect("write");
    let env: HashMap<String, String> = HashMap::new();
    let plan = rollguard::cli::plan(&args(dir), env).expect("plan");
    rollguard::fleet::deploy(Arc::new(plan), CancellationToken::new(), Progress::quiet()).await
}

#[tokio::main]
async fn main() {
    let mut argv = std::env::args().skip(1);
    let runs: usize = argv.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let time_scale: f64 = argv.next().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let rules = kube_sim::rules::parse(
        "- {cluster: sim-2, image: \"example.com/web:bad*\", behaviour: ImagePullBackOff}\n",
    )
    .expect("rules");
    println!(
        "runs: {runs}, time scale: {time_scale}x, 3 clusters, bad image on sim-2, rollback-all"
    );
    println!("run  seconds  requests(sim-1/sim-2/sim-3)  writes(sim-1/sim-2/sim-3)");
    let mut times = Vec::new();
    for run in 1..=runs {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("k8s")).expect("mkdir");
        let sim = kube_sim::Sim::start(kube_sim::SimOptions {
            clusters: 3,
            time_scale,
            rules: rules.clone(),
            ..Default::default()
        })
        .await
        .expect("kube-sim");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        std::fs::write(
            dir.path().join("rollguard.yaml"),
            "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait: {timeout: 5m}\ntargets:\n  - {name: eu, context: sim-1}\n  - {name: us, context: sim-2}\n  - {name: ap, context: sim-3}\n",
        )
        .expect("config");
        let good = deploy(dir.path(), "example.com/web:good").await;
        assert_eq!(good.outcome, TargetOutcome::Deployed, "{}", good.summary);
        for cluster in sim.clusters() {
            cluster.reset_counters();
        }
        let started = Instant::now();
        let bad = deploy(dir.path(), &format!("example.com/web:bad{run}")).await;
        let seconds = started.elapsed().as_secs_f64();
        assert!(
            bad.targets
                .iter()
                .all(|t| t.outcome == TargetOutcome::RolledBack),
            "{}",
            bad.summary
        );
        let counters: Vec<_> = sim.clusters().iter().map(|c| c.counters()).collect();
        let requests: Vec<String> = counters.iter().map(|c| c.total().to_string()).collect();
        let writes: Vec<String> = counters.iter().map(|c| c.writes().to_string()).collect();
        println!(
            "{run:>3}  {seconds:>7.2}  {:<27}  {}",
            requests.join("/"),
            writes.join("/")
        );
        times.push(seconds);
        sim.shutdown();
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.2} s, min {:.2} s, max {:.2} s (simulated time runs {time_scale}x)",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
